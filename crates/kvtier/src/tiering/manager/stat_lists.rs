//! The manager's statistics as the engine reads them: its own as the
//! typed [`ManagerStats`] and as named values, and the counters it keeps
//! for each secondary tier as named values (listed first in that tier's
//! statistics).  docs/statistics.md lists every name.

use std::sync::Arc;

use super::State;
use crate::stats::Stat;

/// One merged statistic, labelled with where it comes from.
#[derive(Clone, Debug, PartialEq)]
pub struct ManagerStat {
    /// `None` for the manager's own totals, else the tier index (0 primary).
    pub tier: Option<usize>,
    /// Name of the tier ("manager", "primary", or the tier's name).
    pub tier_name: Arc<str>,
    /// The statistic.
    pub stat: Stat,
}

/// The manager's own statistics (besides each tier's, see
/// [`Manager::tier_stats`](super::Manager::tier_stats)).  Counters are
/// cumulative from the manager's creation and never decrease, resets
/// included; gauges are current.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ManagerStats {
    /// Counter: keys looked up.
    pub lookups: u64,
    /// Counter: lookups the primary tier answered HIT.
    pub primary_hits: u64,
    /// Counter: lookups the primary tier answered HIT_PENDING (being written).
    pub primary_hit_pending: u64,
    /// Counter: promotions started (a slot reserved, a load staged).
    pub promotions_started: u64,
    /// Counter: promotions the primary tier refused for want of a free slot.
    pub allocation_failures: u64,
    /// Counter: promotions the primary tier's admission threshold did not admit.
    pub promotions_not_admitted: u64,
    /// Counter: lookups answered MISS without asking the secondary tiers,
    /// because promotions are held after a reset.
    pub held_misses: u64,
    /// Counter: lookups answered MISS because no tier has the key (or
    /// none was asked).
    pub misses_absent: u64,
    /// Counter: lookups answered MISS although a secondary tier has the
    /// key, because the primary tier did not take its promotion.
    pub misses_no_room: u64,
    /// Counter: lookups answered MISS because the request's wait for
    /// blocks on their way passed its bound
    /// ([`MissReason::TimedOut`](super::MissReason::TimedOut)).
    pub misses_timed_out: u64,
    /// Counter: waits of requests that passed the bound
    /// ([`ProgressOptions`](super::ProgressOptions)`::wait_steps` or
    /// `wait_ms`): their holds were released.
    pub wait_timeouts: u64,
    /// Counter: stores the primary tier refused as a whole (no room).
    pub store_refusals: u64,
    /// Counter: store completions of a request with no store in flight.
    pub ignored_store_completions: u64,
    /// Counter: keys of request-level cascades parked until their write finished.
    pub parked_keys: u64,
    /// Counter: parked keys dropped because their write failed.
    pub parked_keys_dropped: u64,
    /// Counter: jobs that finished after a reset orphaned them.
    pub stale_completions: u64,
    /// Counter: misbehaviours of secondary tiers (all tiers together).
    pub tier_bugs: u64,
    /// Counter: internal errors (logged; never expected).
    pub internal_errors: u64,
    /// Counter: cache resets.
    pub resets: u64,
    /// Counter: requests the manager let go (each counted once, then, in
    /// this and the `request_*` counters below).
    pub requests_finished: u64,
    /// Counter: blocks finished requests asked for: per request, the keys
    /// of its largest lookup (per-key lookups: those of one step together).
    pub request_blocks_asked: u64,
    /// Counter: blocks finished requests loaded that were already in the
    /// primary tier (not promoted for them); each secondary tier's
    /// `request_blocks_served` counts those promoted for them from it.
    pub request_blocks_served_primary: u64,
    /// Counter: blocks finished requests asked for and did not load (per
    /// request, asked minus loaded, at least 0): the engine computed them.
    pub request_blocks_recomputed: u64,
    /// Counter: steps (`on_schedule_end` calls) finished requests spent
    /// waiting for blocks on their way.
    pub request_wait_steps: u64,
    /// Gauge: jobs submitted to secondary tiers and not yet finished.
    pub jobs_in_flight: u64,
    /// Gauge: requests started and not yet finalized.
    pub active_requests: u64,
    /// Gauge: 1 while promotions are held after a reset, else 0.
    pub promotions_held: u64,
    /// Gauge: events waiting to be taken.
    pub events_queued: u64,
}

impl ManagerStats {
    /// The statistics as named values, in field order.
    pub fn stat_list(&self) -> Vec<Stat> {
        let mut out = Vec::with_capacity(28);
        for (n, v) in [
            ("lookups", self.lookups),
            ("primary_hits", self.primary_hits),
            ("primary_hit_pending", self.primary_hit_pending),
            ("promotions_started", self.promotions_started),
            ("allocation_failures", self.allocation_failures),
            ("promotions_not_admitted", self.promotions_not_admitted),
            ("held_misses", self.held_misses),
            ("misses_absent", self.misses_absent),
            ("misses_no_room", self.misses_no_room),
            ("misses_timed_out", self.misses_timed_out),
            ("wait_timeouts", self.wait_timeouts),
            ("store_refusals", self.store_refusals),
            ("ignored_store_completions", self.ignored_store_completions),
            ("parked_keys", self.parked_keys),
            ("parked_keys_dropped", self.parked_keys_dropped),
            ("stale_completions", self.stale_completions),
            ("tier_bugs", self.tier_bugs),
            ("internal_errors", self.internal_errors),
            ("resets", self.resets),
            ("requests_finished", self.requests_finished),
            ("request_blocks_asked", self.request_blocks_asked),
            (
                "request_blocks_served_primary",
                self.request_blocks_served_primary,
            ),
            ("request_blocks_recomputed", self.request_blocks_recomputed),
            ("request_wait_steps", self.request_wait_steps),
        ] {
            out.push(Stat::counter(n, v));
        }
        for (n, v) in [
            ("jobs_in_flight", self.jobs_in_flight),
            ("active_requests", self.active_requests),
            ("promotions_held", self.promotions_held),
            ("events_queued", self.events_queued),
        ] {
            out.push(Stat::gauge(n, v as f64));
        }
        out
    }
}

impl State {
    /// The manager's own statistics now.
    pub(super) fn manager_stats(&self) -> ManagerStats {
        let c = &self.c;
        ManagerStats {
            lookups: c.lookups,
            primary_hits: c.primary_hits,
            primary_hit_pending: c.primary_hit_pending,
            promotions_started: c.promotions_started,
            allocation_failures: c.allocation_failures,
            promotions_not_admitted: c.promotions_not_admitted,
            held_misses: c.held_misses,
            misses_absent: c.misses_absent,
            misses_no_room: c.misses_no_room,
            misses_timed_out: c.misses_timed_out,
            wait_timeouts: c.wait_timeouts,
            store_refusals: c.store_refusals,
            ignored_store_completions: c.ignored_store_completions,
            parked_keys: c.parked_keys,
            parked_keys_dropped: c.parked_keys_dropped,
            stale_completions: c.stale_completions,
            tier_bugs: c.tier_bugs,
            internal_errors: c.internal_errors,
            resets: c.resets,
            requests_finished: c.requests_finished,
            request_blocks_asked: c.request_blocks_asked,
            request_blocks_served_primary: c.request_blocks_served_primary,
            request_blocks_recomputed: c.request_blocks_recomputed,
            request_wait_steps: c.request_wait_steps,
            jobs_in_flight: self.jobs.len() as u64,
            active_requests: self.reqs.len() as u64,
            promotions_held: u64::from(self.held),
            events_queued: self.pending_events.len() as u64,
        }
    }

    /// The manager's own statistics as named values.
    pub(super) fn manager_stat_list(&self) -> Vec<Stat> {
        let mut out = self.manager_stats().stat_list();
        self.obs.push_stats(&mut out);
        out
    }

    /// The manager's counters for secondary tier `i` (internal index).
    pub(super) fn tier_counter_stats(&self, i: usize) -> Vec<Stat> {
        let t = &self.tiers[i];
        let c = t.c;
        let mut out = Vec::with_capacity(96);
        for (n, v) in [
            ("lookups", c.lookups),
            ("hits", c.hits),
            ("retries", c.retries),
            ("promotions_started", c.promotions_started),
            ("promotion_jobs", c.promotion_jobs),
            ("promotion_blocks", c.promotion_blocks),
            ("promotion_failures", c.promotion_failures),
            ("partial_promotions", c.partial_promotions),
            ("cascade_jobs", c.cascade_jobs),
            ("cascade_blocks", c.cascade_blocks),
            ("cascade_failures", c.cascade_failures),
            ("dropped_cascade_jobs", c.dropped_cascade_jobs),
            ("dropped_cascade_blocks", c.dropped_cascade_blocks),
            ("bytes_loaded", c.bytes_loaded),
            ("bytes_stored", c.bytes_stored),
            ("tier_bugs", c.tier_bugs),
            ("poll_limit_reached", c.poll_limit_reached),
            ("event_limit_reached", c.event_limit_reached),
            ("request_blocks_served", c.request_blocks_served),
        ] {
            out.push(Stat::counter(n, v));
        }
        c.loads
            .push_stats("load_duration_seconds", "load_size_blocks", &mut out);
        c.stores
            .push_stats("store_duration_seconds", "store_size_blocks", &mut out);
        if let Some(d) = &t.detector {
            for (n, v) in [
                ("under_pressure", if d.under_pressure() { 1.0 } else { 0.0 }),
                ("store_latency_ema", d.ema()),
            ] {
                out.push(Stat::gauge(n, v));
            }
        }
        out
    }
}
