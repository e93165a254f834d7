//! What the manager records per request, and what it feeds: the
//! per-request counters (requests finished, blocks asked for, served from
//! each tier, recomputed, steps waited: each request counted once, when
//! the manager lets it go), the manager-wide histogram of the time
//! requests wait for blocks on their way (see `progress.rs` for when a
//! wait begins and ends), and, when an engine asks for them, one
//! [`RequestReport`] per finished request, for a JSONL trace or
//! OpenTelemetry spans.
//!
//! Recording allocates nothing per key and takes no lock beyond the
//! manager's own, which every call already holds.

use std::time::Duration;

use super::PrimaryBackend;
use super::lookup::LookupKind;
use super::progress::WaitEnded;
use super::stat_lists::PROMOTION_WAIT_STAT;
use super::{
    Job, Key, LookupAnswer, LookupResult, Manager, MissReason, ReqState, RequestId, Result, State,
};
use crate::histogram::{Histogram, LATENCY_BUCKETS, LATENCY_SECONDS_BOUNDS};
use crate::primary::CompleteStoreReport;
use crate::stats::Stat;

/// What happened to one finished request, handed to the listener of
/// [`Manager::set_request_report_listener`] once, when the manager lets
/// the request go (after `request_finished`, once no store of it is in
/// flight and none of its promotions is staged).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RequestReport<'a> {
    /// The request's handle.
    pub id: RequestId,
    /// The request's name.
    pub name: &'a str,
    /// Keys its lookups looked at (a batched lookup counts the keys up to
    /// the one it stopped at).
    pub lookups: u64,
    /// Keys its lookups found, by tier number: `[0]` in the primary tier
    /// (answered HIT), `[t]` in secondary tier `t` (a promotion started).
    /// One entry per tier, the primary tier's included.
    pub tier_hits: &'a [u64],
    /// Keys its `prepare_load` calls pinned for loads to the GPU.
    pub loaded: u64,
    /// Keys its stores made ready in the primary tier.
    pub stored: u64,
    /// Keys promoted for it that arrived in the primary tier.
    pub promoted: u64,
    /// Keys of its stores that failed (dropped) and of its promotions
    /// that failed.
    pub failed: u64,
    /// Time it waited for blocks on their way: each wait runs from a
    /// lookup that left keys on their way to the first later lookup that
    /// left none (or its `prepare_load`, or the wait bound); a wait still
    /// running when it finished counts up to then.
    pub promotion_wait: Duration,
    /// Blocks it asked for: the keys of its largest lookup (per-key
    /// lookups: those of one step together, up to the first miss, which
    /// is all they see).
    pub asked: u64,
    /// Blocks it was served, by the tier they came from: `[0]` already in
    /// the primary tier, `[t]` promoted for it from secondary tier `t`.
    /// One entry per tier.  Each block asked for counts once: they sum to
    /// `loaded` or `asked`, whichever is smaller (a request that loads its
    /// blocks again after a preemption is served them once).
    pub served: &'a [u64],
    /// Blocks it asked for and was not served (`asked` less the sum of
    /// `served`): the engine computed them.
    pub recomputed: u64,
    /// Steps (`schedule_end` calls) it spent waiting.
    pub steps_waited: u64,
}

/// Receives the report of each finished request, on the thread of the
/// manager call that let the request go, with the manager's lock held: it
/// must not call the manager (such calls fail with
/// [`crate::Error::Reentrant`]) and should return quickly.
pub type RequestReportListener = Box<dyn FnMut(&RequestReport<'_>) + Send>;

/// The manager's histograms that are not a tier's, and the report listener.
pub(super) struct Observations {
    /// Seconds a request waited for blocks on their way (`progress.rs`: from
    /// the first lookup that left keys on their way to the end of the
    /// wait), one
    /// observation per wait.
    promotion_wait: Histogram<LATENCY_BUCKETS>,
    listener: Option<RequestReportListener>,
    /// The hits per tier of the report being delivered (reused).
    hits: Vec<u64>,
    /// The served blocks per tier of the report being delivered (reused).
    served: Vec<u64>,
}

impl Default for Observations {
    fn default() -> Self {
        Observations {
            promotion_wait: Histogram::new(&LATENCY_SECONDS_BOUNDS),
            listener: None,
            hits: Vec::new(),
            served: Vec::new(),
        }
    }
}

impl std::fmt::Debug for Observations {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Observations")
            .field("promotion_wait", &self.promotion_wait)
            .field("reporting", &self.listener.is_some())
            .finish()
    }
}

impl Observations {
    /// Appends the histograms to the manager's statistics.
    pub(super) fn push_stats(&self, out: &mut Vec<Stat>) {
        self.promotion_wait.push_stats(PROMOTION_WAIT_STAT, out);
    }

    /// Whether requests are tallied for reports.
    #[inline]
    pub(super) fn reporting(&self) -> bool {
        self.listener.is_some()
    }

    /// Records a request's wait that ended.
    pub(super) fn record_wait(&mut self, ended: WaitEnded) {
        self.promotion_wait.record(ended.time.as_secs_f64());
    }
}

/// What happened to one request so far.
#[derive(Debug, Default)]
pub(super) struct RequestTally {
    /// Time spent waiting for blocks on their way, waits that ended summed.
    waited: Duration,
    /// Steps spent waiting, waits that ended summed.
    steps_waited: u64,
    lookups: u64,
    primary_hits: u64,
    /// Promotions started per secondary tier (`[t - 1]` for tier `t`),
    /// grown on the first.
    promotions: Vec<u64>,
    /// Keys pinned by its loads.
    pub(super) loaded: u64,
    /// Loaded blocks promoted for it, per secondary tier (`[t - 1]`),
    /// grown on the first.
    served: Vec<u64>,
    /// Blocks asked for: the keys of its largest lookup.
    asked: u64,
    /// The step (plus one) of its latest per-key lookup, and the keys
    /// those of that step looked up.
    asked_step: u64,
    asked_in_step: u64,
    stored: u64,
    promoted: u64,
    failed: u64,
}

impl RequestTally {
    /// Counts a store completion of the request.
    #[inline]
    pub(super) fn on_store(&mut self, report: &CompleteStoreReport) {
        self.stored += report.ready as u64;
        self.failed += report.dropped as u64;
    }

    /// Counts a wait that ended.
    #[inline]
    pub(super) fn on_wait_ended(&mut self, ended: WaitEnded) {
        self.waited += ended.time;
        self.steps_waited += ended.steps;
    }

    /// Counts a loaded block promoted for it from secondary tier `t`
    /// (tier number, 1..).
    pub(super) fn served_from(&mut self, t: usize) {
        bump(&mut self.served, t - 1);
    }

    /// Counts a promotion started for it from secondary tier `t` (internal
    /// index).
    pub(super) fn promotion_from(&mut self, t: usize) {
        bump(&mut self.promotions, t);
    }

    /// Blocks it was served, each block asked for counted once: loads
    /// beyond them (a request that loads its blocks again after a
    /// preemption) add nothing.
    fn served_once(&self) -> u64 {
        self.loaded.min(self.asked)
    }

    /// The blocks it was served by tier number, `[0]` the primary tier's
    /// (0..=`tiers`), handed to `each`: those promoted for it from each
    /// tier first, in tier order, within [`RequestTally::served_once`].
    fn split_served(&self, tiers: usize, mut each: impl FnMut(usize, u64)) {
        let mut left = self.served_once();
        let mut from_tiers = [0u64; super::MAX_SECONDARY_TIERS];
        for (i, slot) in from_tiers.iter_mut().enumerate().take(tiers) {
            let n = self.served.get(i).copied().unwrap_or(0).min(left);
            *slot = n;
            left -= n;
        }
        each(0, left);
        for (i, &n) in from_tiers.iter().enumerate().take(tiers) {
            each(i + 1, n);
        }
    }

    /// Blocks it asked for and was not served: the engine computed them.
    fn recomputed(&self) -> u64 {
        self.asked - self.served_once()
    }
}

/// Adds one at `i`, growing `v` (at most one entry per tier).
fn bump(v: &mut Vec<u64>, i: usize) {
    if v.len() <= i {
        v.resize(i + 1, 0);
    }
    v[i] += 1;
}

impl<P: PrimaryBackend> Manager<P> {
    /// Installs `listener` to receive a [`RequestReport`] for each request
    /// the manager lets go from now on, or removes it (`None`).  Counting
    /// per request starts with the listener: a request already running
    /// reports only what happened since.  The promotion-wait histogram is
    /// kept either way.
    pub fn set_request_report_listener(
        &self,
        listener: Option<RequestReportListener>,
    ) -> Result<()> {
        let mut s = self.enter("set_request_report_listener")?;
        s.obs.listener = listener;
        Ok(())
    }
}

impl<P: PrimaryBackend> State<P> {
    /// Notes a lookup call of `kind` by `request` over `n` keys that
    /// answered `answer`: the blocks it asks for, its report's
    /// counts, and its wait, which begins at a lookup that leaves keys on
    /// their way and ends at one that leaves none (for per-key lookups: a
    /// HIT or a MISS while none of its promotions is staged or in
    /// flight), or that timed out.
    #[inline]
    pub(super) fn note_lookup(
        &mut self,
        request: RequestId,
        n: usize,
        answer: &LookupAnswer,
        kind: LookupKind,
    ) {
        let prefix = kind == LookupKind::Prefix;
        let step = self.steps + 1;
        let reporting = self.obs.reporting();
        let Some(st) = self.reqs.get_mut(&request) else {
            return;
        };
        let t = &mut st.tally;
        let looked_at = if prefix {
            answer.end + usize::from(answer.end < n)
        } else {
            answer.looked_up()
        };
        if prefix {
            t.asked = t.asked.max(n as u64);
        } else {
            if t.asked_step != step {
                t.asked_step = step;
                t.asked_in_step = 0;
            }
            t.asked_in_step += looked_at as u64;
            t.asked = t.asked.max(t.asked_in_step);
        }
        if reporting {
            t.lookups += looked_at as u64;
            t.primary_hits += answer.hits as u64;
        }
        let timed_out = answer.reason == Some(MissReason::TimedOut);
        let settled = timed_out
            || if prefix {
                answer.settled()
            } else {
                matches!(answer.stop, LookupResult::Hit | LookupResult::Miss)
                    && st.progress.promoting == 0
            };
        let waits = st.progress.wait.is_some();
        if settled {
            if waits {
                self.end_wait(request);
            }
            return;
        }
        self.begin_wait(request);
        if prefix
            && answer.reason == Some(MissReason::NoRoom)
            && let Some(w) = self
                .reqs
                .get_mut(&request)
                .and_then(|st| st.progress.wait.as_mut())
        {
            w.cap = w.cap.min(answer.end);
        }
    }

    /// Notes finished promotion `job` from secondary tier `t` (internal
    /// index), of which keys `arrived` arrived, for the request it was
    /// started for (if that request is still there): its promotions in
    /// flight, its report's counts, and the blocks it may load (held for
    /// it if it waits: `progress.rs`).
    pub(super) fn note_promotion_done(&mut self, t: usize, job: &Job, arrived: &[Key]) {
        let Some(id) = self.names.id_of(&job.request.name) else {
            return;
        };
        let reporting = self.obs.reporting();
        let Some(st) = self.reqs.get_mut(&id) else {
            return;
        };
        if !std::sync::Arc::ptr_eq(&st.info, &job.request) {
            return;
        }
        let p = &mut st.progress;
        p.promoting = p.promoting.saturating_sub(job.keys.len() as u64);
        if reporting {
            st.tally.promoted += arrived.len() as u64;
            st.tally.failed += (job.keys.len() - arrived.len().min(job.keys.len())) as u64;
        }
        if !arrived.is_empty() {
            self.on_promoted_for(id, arrived, t + 1);
        }
    }

    /// Counts `st`, which the manager just let go, in the per-request
    /// counters.
    pub(super) fn count_finished(&mut self, st: &ReqState) {
        let t = &st.tally;
        let running = st
            .progress
            .wait
            .map(|w| w.running(self.steps))
            .unwrap_or_default();
        let c = &mut self.c;
        c.requests_finished += 1;
        c.request_blocks_asked += t.asked;
        c.request_blocks_recomputed += t.recomputed();
        c.request_wait_steps += t.steps_waited + running.steps;
        let tiers = &mut self.tiers;
        t.split_served(tiers.len(), |i, n| match i {
            0 => c.request_blocks_served_primary += n,
            i => tiers[i - 1].c.request_blocks_served += n,
        });
    }

    /// Hands the report of `st`, which the manager just let go, to the
    /// listener.
    pub(super) fn report_finished(&mut self, st: &ReqState) {
        let Some(listener) = self.obs.listener.as_mut() else {
            return;
        };
        let t = &st.tally;
        let hits = &mut self.obs.hits;
        hits.clear();
        hits.push(t.primary_hits);
        hits.extend((0..self.tiers.len()).map(|i| t.promotions.get(i).copied().unwrap_or(0)));
        let served = &mut self.obs.served;
        served.clear();
        t.split_served(self.tiers.len(), |_, n| served.push(n));
        let running = st
            .progress
            .wait
            .map(|w| w.running(self.steps))
            .unwrap_or_default();
        let report = RequestReport {
            id: st.id,
            name: &st.info.name,
            lookups: t.lookups,
            tier_hits: hits,
            loaded: t.loaded,
            stored: t.stored,
            promoted: t.promoted,
            failed: t.failed,
            promotion_wait: t.waited + running.time,
            asked: t.asked,
            served,
            recomputed: t.recomputed(),
            steps_waited: t.steps_waited + running.steps,
        };
        listener(&report);
    }
}
