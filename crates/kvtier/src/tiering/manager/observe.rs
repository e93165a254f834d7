//! What the engine reads from a manager: statistics (gathered by source;
//! the lists themselves are in `stat_lists.rs`), cache events (drained in
//! batches or pushed to a listener) and the error log.

use std::sync::Arc;

use super::PrimaryBackend;
use super::{
    EventListener, Listener, MAX_EVENTS_PER_TAKE, Manager, ManagerStat, ManagerStats, Result,
    State, TierEvent,
};
use crate::error::Error;
use crate::events::EventKind;
use crate::key::Key;
use crate::metrics::MetricGroup;
use crate::request::{Locality, Medium};
use crate::stats::Stat;

/// One batch handed out by [`Manager::take_events_into`] (or
/// [`Manager::take_event_batches`]): consecutive events of one tier and
/// kind.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TakenBatch {
    /// Tier index: 0 primary, 1.. secondary tiers in the order added.
    pub tier: usize,
    /// Stored, removed or cleared (a cleared batch has no keys).
    pub kind: EventKind,
    /// The tier's medium (the primary tier is CPU memory), if declared.
    pub medium: Option<Medium>,
    /// The tier's locality (the primary tier is local), if declared.
    pub locality: Option<Locality>,
    /// Index of its first key in [`EventBuffer::keys`] (or
    /// [`TakenEvents::keys`]).
    pub first: usize,
    /// Number of keys.
    pub len: usize,
}

/// What one [`Manager::take_event_batches`] handed out.
#[derive(Clone, Copy, Debug)]
pub struct TakenEvents<'a> {
    /// The batches, oldest first.
    pub batches: &'a [TakenBatch],
    /// Their keys, batch after batch.
    pub keys: &'a [Key],
    /// Whether more events wait.
    pub more: bool,
}

impl TakenEvents<'_> {
    /// The keys of `batch`.
    pub fn keys_of(&self, batch: &TakenBatch) -> &[Key] {
        &self.keys[batch.first..batch.first + batch.len]
    }
}

/// Events taken from a manager and kept by whoever took them: the batches
/// and keys of its last [`Manager::take_events_into`], unmoved and
/// unchanged until the next take into the same buffer (or its drop), so
/// each caller's events live as long as it wants, whatever other threads
/// take.  Its memory grows to the largest take (fallibly) and is reused.
#[derive(Debug, Default)]
pub struct EventBuffer {
    batches: Vec<TakenBatch>,
    keys: Vec<Key>,
}

impl EventBuffer {
    /// An empty buffer (allocates nothing until a take).
    pub fn new() -> EventBuffer {
        EventBuffer::default()
    }

    /// The batches of the last take, oldest first.
    pub fn batches(&self) -> &[TakenBatch] {
        &self.batches
    }

    /// Their keys, batch after batch.
    pub fn keys(&self) -> &[Key] {
        &self.keys
    }

    /// The keys of `batch`.
    pub fn keys_of(&self, batch: &TakenBatch) -> &[Key] {
        &self.keys[batch.first..batch.first + batch.len]
    }
}

/// The manager's own buffer, for [`Manager::take_event_batches`].
pub(super) type Handout = EventBuffer;

/// How many batches and keys a take of everything queued would hand out.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct QueuedEvents {
    /// Batches (consecutive events of one tier and kind; a cleared event
    /// is one of its own): the `kvtier_event` entries a take needs.
    pub batches: usize,
    /// Keys of those batches together.
    pub keys: usize,
}

impl<P: PrimaryBackend> Manager<P> {
    /// Appends the queued events: the primary tier's, then each secondary
    /// tier's own.  One call takes at most the event capacity from each
    /// tier (and at most [`MAX_EVENTS_PER_TAKE`] from a secondary tier);
    /// what a tier still holds comes with the next call.
    pub fn take_events(&self, out: &mut Vec<TierEvent>) -> Result<()> {
        let mut s = self.enter("take_events")?;
        s.gather_events();
        out.extend(s.pending_events.drain(..));
        s.pending_per_tier.fill(0);
        Ok(())
    }

    /// Takes up to `max` batches of queued events (consecutive events of
    /// one tier and kind form one batch; a cleared event is a batch of its
    /// own) into `buffer`, replacing what it held, and answers whether
    /// more wait.  Batches that do not fit wait for the next call.  Memory
    /// for the batches and keys that cannot be had is
    /// [`Error::OutOfMemory`], with nothing taken (`buffer` emptied).
    pub fn take_events_into(&self, max: usize, buffer: &mut EventBuffer) -> Result<bool> {
        self.take_events_into_with(max, buffer, |_| Ok(()))
    }

    /// [`Manager::take_events_into`] that first hands `reserve` the number
    /// of keys it is about to take, while nothing is taken yet: an error
    /// there (memory for what the caller keeps beside the keys) takes
    /// nothing and is returned.
    pub fn take_events_into_with(
        &self,
        max: usize,
        buffer: &mut EventBuffer,
        reserve: impl FnOnce(usize) -> Result<()>,
    ) -> Result<bool> {
        let mut s = self.enter("take_events")?;
        s.take_batches(max, buffer, reserve)
    }

    /// [`Manager::take_events_into`] a buffer the manager keeps, handed to
    /// `f` with whether more wait.  The batches and their keys stay
    /// unmoved in the manager until the next call of this method, from any
    /// thread, which replaces them: a caller that keeps them across calls
    /// takes into an [`EventBuffer`] of its own instead.
    pub fn take_event_batches<R>(
        &self,
        max: usize,
        f: impl FnOnce(TakenEvents<'_>) -> R,
    ) -> Result<R> {
        let mut s = self.enter("take_events")?;
        let s = &mut *s;
        let mut h = std::mem::take(&mut s.handout);
        let more = s.take_batches(max, &mut h, |_| Ok(()));
        s.handout = h;
        let more = more?;
        Ok(f(TakenEvents {
            batches: &s.handout.batches,
            keys: &s.handout.keys,
            more,
        }))
    }

    /// How many batches and keys wait to be taken, after gathering what
    /// the tiers hold (at most the event capacity per tier: events a tier
    /// holds beyond it come later, and a take's `more` tells).  Changes
    /// nothing a take sees but the gathering.
    pub fn events_queued(&self) -> Result<QueuedEvents> {
        let mut s = self.enter("events_queued")?;
        s.gather_events();
        let (batches, _, keys) = s.batches_within(usize::MAX);
        Ok(QueuedEvents { batches, keys })
    }

    /// Merged statistics: the manager's totals, the primary tier's, then
    /// per secondary tier the manager's counters for it and its own.
    ///
    /// Counters (histogram series included) are cumulative from creation
    /// and never decrease; gauges are current values.  A secondary tier's
    /// own counters are held to this: one the tier no longer reports keeps
    /// its last value (after the tier's reported stats), and one it reports
    /// below its previous report keeps the value shown before and counts as
    /// a tier bug (`tier_bugs`, and a message in the error log), once per
    /// decrease.  For per-interval numbers, as vLLM's statistics are, keep
    /// the previous result and subtract counter by counter (see
    /// [`crate::stats`]).
    pub fn stats(&self) -> Result<Vec<ManagerStat>> {
        let groups = self.metric_groups()?;
        let mut out = Vec::with_capacity(groups.iter().map(|g| g.stats.len()).sum());
        for g in groups {
            for stat in g.stats {
                out.push(ManagerStat {
                    tier: g.tier,
                    tier_name: g.tier_name.clone(),
                    stat,
                });
            }
        }
        Ok(out)
    }

    /// The statistics of [`Manager::stats`] in groups by source (the
    /// manager's own, the primary tier's, then per secondary tier the
    /// manager's counters for it and its own report), with each tier's
    /// medium: what [`crate::metrics::exposition`] writes.
    pub fn metric_groups(&self) -> Result<Vec<MetricGroup>> {
        let mut s = self.enter("stats")?;
        s.gather_errors();
        // The tiers' own reports first: a decrease found now is counted in
        // the `tier_bugs` this call returns.
        let mut reports: Vec<Vec<Stat>> = Vec::with_capacity(s.tiers.len());
        for i in 0..s.tiers.len() {
            reports.push(s.tier_report(i));
        }
        let mut out = Vec::with_capacity(2 + 2 * s.tiers.len());
        out.push(MetricGroup {
            table: Some(super::MANAGER_STATS),
            tier: None,
            tier_name: Arc::from("manager"),
            medium: None,
            stats: s.manager_stat_list(),
        });
        out.push(MetricGroup {
            table: Some(crate::primary::PRIMARY_STATS),
            tier: Some(0),
            tier_name: Arc::from("primary"),
            medium: Some(Medium::Cpu),
            stats: s.primary.stat_list(),
        });
        for (i, report) in reports.into_iter().enumerate() {
            let t = &s.tiers[i];
            out.push(MetricGroup {
                table: Some(super::TIER_MANAGED_STATS),
                tier: Some(i + 1),
                tier_name: t.name.clone(),
                medium: t.medium,
                stats: s.tier_counter_stats(i),
            });
            out.push(MetricGroup {
                table: t.tier.stat_table(),
                tier: Some(i + 1),
                tier_name: t.name.clone(),
                medium: t.medium,
                stats: report,
            });
        }
        Ok(out)
    }

    /// Every statistic in the Prometheus text format (see
    /// [`crate::metrics::exposition`]).
    pub fn prometheus_text(&self) -> Result<String> {
        Ok(crate::metrics::exposition(&self.metric_groups()?))
    }

    /// The manager's own statistics.
    pub fn manager_stats(&self) -> Result<ManagerStats> {
        let mut s = self.enter("manager_stats")?;
        s.gather_errors();
        Ok(s.manager_stats())
    }

    /// The statistics of tier `tier` (0 the primary tier, 1.. the
    /// secondary tiers in the order added), as [`Manager::stats`] lists
    /// them for that tier: for a secondary tier, the manager's counters
    /// for it, then its own report (held to never decrease).  A tier that
    /// does not exist is [`Error::InvalidArgument`].
    pub fn tier_stats(&self, tier: usize) -> Result<Vec<Stat>> {
        let mut s = self.enter("tier_stats")?;
        if tier == 0 {
            return Ok(s.primary.stat_list());
        }
        if tier > s.tiers.len() {
            return Err(Error::InvalidArgument(format!(
                "no tier {tier} (the manager has {} secondary tiers)",
                s.tiers.len()
            )));
        }
        s.gather_errors();
        let report = s.tier_report(tier - 1);
        let mut out = s.tier_counter_stats(tier - 1);
        out.extend(report);
        Ok(out)
    }

    /// Moves the error log (tier bugs, failed tier calls), oldest first, into `out`.
    pub fn take_errors(&self, out: &mut Vec<String>) -> Result<()> {
        let mut s = self.enter("take_errors")?;
        s.gather_errors();
        out.extend(s.errors.drain(..));
        Ok(())
    }

    /// Removes and returns the oldest message of the error log.
    pub fn pop_error(&self) -> Result<Option<String>> {
        let mut s = self.enter("pop_error")?;
        s.gather_errors();
        Ok(s.errors.pop_front())
    }

    /// Hands the oldest message of the error log to `f`, which answers
    /// whether to remove it (and a value returned here); `None` when the
    /// log is empty.
    pub fn take_error_if<R>(&self, f: impl FnOnce(&str) -> (bool, R)) -> Result<Option<R>> {
        let mut s = self.enter("take_error")?;
        s.gather_errors();
        let Some(message) = s.errors.front() else {
            return Ok(None);
        };
        let (remove, r) = f(message);
        if remove {
            s.errors.pop_front();
        }
        Ok(Some(r))
    }

    /// Installs `listener` to receive events as they happen (at the end of
    /// the call that produced them), or removes it (`None`).  With
    /// `also_queue`, delivered events also stay queued for
    /// [`Manager::take_events`]; without, they are delivered only.  Events
    /// queued before the call are delivered at the end of this call.  See
    /// [`EventListener`](crate::tiering::EventListener).
    pub fn set_event_listener(
        &self,
        listener: Option<EventListener>,
        also_queue: bool,
    ) -> Result<()> {
        let mut s = self.enter("set_event_listener")?;
        s.listener = listener.map(|l| Listener::new(l, also_queue));
        if s.listener.is_some() && !also_queue {
            // Earlier undrained events go to the listener, not to a queue nobody drains.
            let pending: Vec<TierEvent> = s.pending_events.drain(..).collect();
            s.pending_per_tier.fill(0);
            let s = &mut *s;
            let tiers = &s.tiers;
            if let Some(l) = &mut s.listener {
                l.deliver(pending.iter(), |t| tier_traits(tiers, t));
            }
        }
        Ok(())
    }
}

/// The medium and locality of tier `t` (0: the primary tier, CPU memory on
/// this host).
fn tier_traits(tiers: &[super::TierEntry], t: usize) -> (Option<Medium>, Option<Locality>) {
    if t == 0 {
        (Some(Medium::Cpu), Some(Locality::Local))
    } else {
        tiers
            .get(t - 1)
            .map_or((None, None), |e| (e.medium, e.locality))
    }
}

/// Appends event `e` to `h`: its key to the last batch if that batch is of
/// the same tier and kind (and not a cleared one), else to a new batch.
/// `h` has room for it.
#[inline(always)]
fn hand_out(h: &mut EventBuffer, tiers: &[super::TierEntry], e: &TierEvent) {
    let same = h.batches.last().is_some_and(|b| {
        b.tier == e.tier && b.kind == e.event.kind && b.kind != EventKind::Cleared
    });
    if !same {
        let (medium, locality) = tier_traits(tiers, e.tier);
        h.batches.push(TakenBatch {
            tier: e.tier,
            kind: e.event.kind,
            medium,
            locality,
            first: h.keys.len(),
            len: 0,
        });
    }
    if let Some(k) = &e.event.key
        && let Some(b) = h.batches.last_mut()
    {
        h.keys.push(*k);
        b.len += 1;
    }
}

impl<P: PrimaryBackend> State<P> {
    /// Of the queued events, the first `max` batches: how many batches,
    /// how many events and how many keys they hold.
    fn batches_within(&self, max: usize) -> (usize, usize, usize) {
        let (mut batches, mut events, mut keys) = (0, 0, 0);
        let mut last: Option<(usize, EventKind)> = None;
        for e in &self.pending_events {
            let group = (e.tier, e.event.kind);
            if last != Some(group) || e.event.kind == EventKind::Cleared {
                if batches == max {
                    break;
                }
                batches += 1;
                last = Some(group);
            }
            events += 1;
            keys += usize::from(e.event.key.is_some());
        }
        (batches, events, keys)
    }

    /// Takes up to `max` batches of queued events into `h` (emptied
    /// first), after `reserve` of their keys succeeded; whether more wait.
    fn take_batches(
        &mut self,
        max: usize,
        h: &mut EventBuffer,
        reserve: impl FnOnce(usize) -> Result<()>,
    ) -> Result<bool> {
        self.gather_events();
        let (batches, events, keys) = self.batches_within(max);
        h.batches.clear();
        h.keys.clear();
        crate::fallible::reserve(&mut h.batches, batches, "the batches of an event take")?;
        crate::fallible::reserve(&mut h.keys, keys, "the keys of an event take")?;
        reserve(keys)?;
        let tiers = &self.tiers;
        let per_tier = &mut self.pending_per_tier;
        // The queue's two slices in turn, each event read in place (its
        // key copied once, into `h`), then the taken ones dropped at once.
        let (front, back) = self.pending_events.as_slices();
        let first = events.min(front.len());
        for part in [&front[..first], &back[..events - first]] {
            for e in part {
                per_tier[e.tier] -= 1;
                hand_out(h, tiers, e);
            }
        }
        self.pending_events.drain(..events);
        if self.pending_events.is_empty() {
            // Whether the tiers still hold some.
            self.gather_events();
        }
        Ok(!self.pending_events.is_empty())
    }

    /// Secondary tier `i`'s own report (internal index), its counters held
    /// to never decrease: each decrease found counts as a tier bug.
    fn tier_report(&mut self, i: usize) -> Vec<Stat> {
        let t = &mut self.tiers[i];
        let mut report = t.tier.stats();
        let mut decreases = Vec::new();
        t.reported.apply(&mut report, |d| decreases.push(d));
        for d in decreases {
            let name = self.tiers[i].name.clone();
            self.tiers[i].c.tier_bugs += 1;
            self.tier_bug(
                &name,
                format!(
                    "counter {} went back from {} to {}; {} is reported (counters never decrease)",
                    d.series, d.before, d.now, d.shown
                ),
            );
        }
        report
    }

    /// Collects the tiers' events and, with a listener, delivers the new
    /// ones (taking them off the queue unless it also queues).
    pub(super) fn gather_events(&mut self) {
        let start = self.pending_events.len();
        self.collect_events();
        if let Some(listener) = &mut self.listener {
            let tiers = &self.tiers;
            listener.deliver(self.pending_events.range(start..), |t| {
                tier_traits(tiers, t)
            });
            if !listener.also_queue {
                for e in self.pending_events.drain(start..) {
                    self.pending_per_tier[e.tier] -= 1;
                }
            }
        }
    }

    /// Moves events from the tiers into `pending_events`: from each tier
    /// at most what its share of the queue has room for (the event
    /// capacity per tier) and, from a secondary tier, at most
    /// [`MAX_EVENTS_PER_TAKE`]; the rest stays in the tier.
    fn collect_events(&mut self) {
        let cap = self.primary.event_capacity();
        let mut events = std::mem::take(&mut self.events);
        events.clear();
        let room = cap.saturating_sub(self.pending_per_tier[0]);
        if room > 0 {
            self.pending_per_tier[0] +=
                self.primary
                    .take_events_tagged(room, &mut events, &mut self.pending_events);
        }
        for t in 0..self.tiers.len() {
            events.clear();
            let entry = &mut self.tiers[t];
            if !entry.events_on {
                // A tier with its events off queues none; whatever one
                // reports anyway (a C tier keeps its own queue) is discarded.
                entry.tier.take_events(MAX_EVENTS_PER_TAKE, &mut events);
                continue;
            }
            let room = cap
                .saturating_sub(self.pending_per_tier[t + 1])
                .min(MAX_EVENTS_PER_TAKE);
            if room == 0 {
                continue;
            }
            entry.tier.take_events(room, &mut events);
            if events.len() >= MAX_EVENTS_PER_TAKE {
                entry.c.event_limit_reached += 1;
            }
            events.truncate(room);
            self.pending_per_tier[t + 1] += events.len();
            self.pending_events.extend(
                events
                    .drain(..)
                    .map(|event| TierEvent { tier: t + 1, event }),
            );
        }
        events.clear();
        self.events = events;
    }
}
