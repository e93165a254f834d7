//! The manager's statistics as the engine reads them: its own as the
//! typed [`ManagerStats`] and as named values, and the counters it keeps
//! for each secondary tier as named values (listed first in that tier's
//! statistics).  The manager's own are declared once, in the table of
//! [`ManagerStats`] below (the counters the manager keeps are that struct's
//! fields); docs/statistics.md lists every name.

use std::sync::Arc;

use super::PrimaryBackend;
use super::State;
use super::counters::{
    LOAD_DURATION, LOAD_SIZE, M_LOOKUP_HITS, M_REQUEST_SERVED, STORE_DURATION, STORE_LATENCY_EMA,
    STORE_SIZE, UNDER_PRESSURE,
};
use crate::stats::{Stat, family, stat_table};

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

stat_table! {
    /// The families of the manager's own statistics.
    pub(crate) static MANAGER_STATS;

    /// The manager's own statistics (besides each tier's, see
    /// [`Manager::tier_stats`](super::Manager::tier_stats)).  Counters are
    /// cumulative from the manager's creation and never decrease, resets
    /// included; gauges are current.
    #[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
    pub struct ManagerStats {
        /// Counter: keys looked up.
        counter lookups: u64 => M_LOOKUPS,
        /// Counter: lookups the primary tier answered HIT.
        counter primary_hits: u64 => M_LOOKUP_HITS["primary"],
        /// Counter: lookups the primary tier answered HIT_PENDING (being written).
        counter primary_hit_pending: u64 => M_LOOKUP_PENDING,
        /// Counter: promotions started (a slot reserved, a load staged).
        counter promotions_started: u64 => M_PROMOTIONS,
        /// Counter: promotions the primary tier refused for want of a free slot.
        counter allocation_failures: u64 => M_PROMOTIONS_REFUSED["no_slot"],
        /// Counter: promotions the primary tier's admission threshold did not admit.
        counter promotions_not_admitted: u64 => M_PROMOTIONS_REFUSED["not_admitted"],
        /// Counter: lookups answered MISS without asking the secondary tiers,
        /// because promotions are held after a reset.
        counter held_misses: u64 => M_HELD_MISSES,
        /// Counter: lookups answered MISS because no tier has the key (or
        /// none was asked).
        counter misses_absent: u64 => M_LOOKUP_MISSES["absent"],
        /// Counter: lookups answered MISS although a secondary tier has the
        /// key, because the primary tier did not take its promotion.
        counter misses_no_room: u64 => M_LOOKUP_MISSES["no_room"],
        /// Counter: lookups answered MISS because the request's wait for
        /// blocks on their way passed its bound
        /// ([`MissReason::TimedOut`](super::MissReason::TimedOut)).
        counter misses_timed_out: u64 => M_LOOKUP_MISSES["timed_out"],
        /// Counter: waits of requests that passed the bound
        /// ([`ProgressOptions`](super::ProgressOptions)`::wait_steps` or
        /// `wait_ms`): their holds were released.
        counter wait_timeouts: u64 => M_WAIT_TIMEOUTS,
        /// Counter: stores the primary tier refused as a whole (no room).
        counter store_refusals: u64 => M_STORE_REFUSALS,
        /// Counter: store completions of a request with no store in flight.
        counter ignored_store_completions: u64 => M_IGNORED_COMPLETIONS,
        /// Counter: keys of request-level cascades parked until their write finished.
        counter parked_keys: u64 => M_PARKED,
        /// Counter: parked keys dropped because their write failed.
        counter parked_keys_dropped: u64 => M_PARKED_DROPPED,
        /// Counter: jobs that finished after a reset orphaned them.
        counter stale_completions: u64 => M_STALE,
        /// Counter: misbehaviours of secondary tiers (all tiers together).
        counter tier_bugs: u64 => M_TIER_BUGS,
        /// Counter: internal errors (logged; never expected).
        counter internal_errors: u64 => M_INTERNAL,
        /// Counter: cache resets.
        counter resets: u64 => M_RESETS,
        /// Counter: requests the manager let go (each counted once, then, in
        /// this and the `request_*` counters below).
        counter requests_finished: u64 => M_REQUESTS_FINISHED,
        /// Counter: blocks finished requests asked for: per request, the keys
        /// of its largest lookup (per-key lookups: those of one step together).
        counter request_blocks_asked: u64 => M_REQUEST_ASKED,
        /// Counter: blocks finished requests loaded that were already in the
        /// primary tier (not promoted for them); each secondary tier's
        /// `request_blocks_served` counts those promoted for them from it.
        counter request_blocks_served_primary: u64 => M_REQUEST_SERVED["primary"],
        /// Counter: blocks finished requests asked for and did not load (per
        /// request, asked minus loaded, at least 0): the engine computed them.
        counter request_blocks_recomputed: u64 => M_REQUEST_RECOMPUTED,
        /// Counter: steps (`schedule_end` calls) finished requests spent
        /// waiting for blocks on their way.
        counter request_wait_steps: u64 => M_REQUEST_WAIT_STEPS,
        /// Counter: blocks `drop_blocks` removed (all tiers together).
        counter dropped_blocks: u64 => M_DROPPED_BLOCKS,
        /// Gauge: jobs submitted to secondary tiers and not yet finished.
        gauge jobs_in_flight: u64 => M_JOBS_IN_FLIGHT,
        /// Gauge: requests started and not yet finalized.
        gauge active_requests: u64 => M_ACTIVE_REQUESTS,
        /// Gauge: 1 while promotions are held after a reset, else 0.
        gauge promotions_held: u64 => M_PROMOTIONS_HELD,
        /// Gauge: events waiting to be taken.
        gauge events_queued: u64 => M_EVENTS_QUEUED,
        /// Gauge: pin sets.
        gauge pin_sets: u64 => M_PIN_SETS,
        /// Gauge: blocks pin sets hold in the primary tier (distinct keys).
        gauge pinned_blocks_primary: u64 => M_PINNED_BLOCKS["primary"],
        /// Gauge: their bytes (blocks × `block_bytes`; 0 when unknown).
        gauge pinned_bytes_primary: u64 => M_PINNED_BYTES["primary"],
    }
    also {
        /// The histogram of requests' waits for blocks on their way.
        histogram PROMOTION_WAIT_STAT = "promotion_wait_seconds" => M_PROMOTION_WAIT,
    }
}

impl<P: PrimaryBackend> State<P> {
    /// The manager's own statistics now.
    pub(super) fn manager_stats(&self) -> ManagerStats {
        ManagerStats {
            jobs_in_flight: self.jobs.len() as u64,
            active_requests: self.reqs.len() as u64,
            promotions_held: u64::from(self.held),
            events_queued: self.pending_events.len() as u64,
            pin_sets: self.pins.set_count() as u64,
            pinned_blocks_primary: self.pins.held_blocks(0),
            pinned_bytes_primary: self.pins.held_blocks(0) * self.opts.block_bytes,
            ..self.c
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
        c.push_stats(&mut out);
        c.loads.push_stats(LOAD_DURATION, LOAD_SIZE, &mut out);
        c.stores.push_stats(STORE_DURATION, STORE_SIZE, &mut out);
        if let Some(d) = &t.detector {
            out.push(Stat::gauge(
                UNDER_PRESSURE,
                if d.under_pressure() { 1.0 } else { 0.0 },
            ));
            out.push(Stat::gauge(STORE_LATENCY_EMA, d.ema()));
        }
        out
    }
}

// The manager's families.
family! {
    M_LOOKUPS, "kvtier_manager_lookups_total", Counter, Manager,
    "Keys looked up (a batched lookup counts the keys it looked at, up to the one it stopped at)."
}
family! {
    M_LOOKUP_MISSES, "kvtier_manager_lookup_misses_total", Counter, Manager, "reason",
    "Keys a lookup answered MISS, by reason: absent (no tier has the key, or none was asked), no_room (a secondary tier has it, but the primary tier did not take its promotion) or timed_out (the request waited past the bound for it)."
}
family! {
    M_LOOKUP_PENDING, "kvtier_manager_lookup_hit_pending_total", Counter, Manager,
    "Keys a lookup found in the primary tier while they were being written (answered HIT_PENDING)."
}
family! {
    M_HELD_MISSES, "kvtier_manager_held_misses_total", Counter, Manager,
    "Keys answered MISS without asking the secondary tiers, because promotions are held after a reset (also counted as absent misses)."
}
family! {
    M_PROMOTIONS, "kvtier_manager_promotions_started_total", Counter, Manager,
    "Promotions started: a primary slot reserved and a load from a secondary tier staged."
}
family! {
    M_PROMOTIONS_REFUSED, "kvtier_manager_promotions_refused_total", Counter, Manager, "reason",
    "Promotions the primary tier did not take, by reason: no_slot (no free or evictable slot) or not_admitted (its admission threshold did not admit the key yet)."
}
family! {
    M_STORE_REFUSALS, "kvtier_manager_store_refusals_total", Counter, Manager,
    "prepare_store calls the primary tier refused as a whole (no room)."
}
family! {
    M_IGNORED_COMPLETIONS, "kvtier_manager_ignored_store_completions_total", Counter, Manager,
    "complete_store calls of a request with no store in flight (after a reset), ignored."
}
family! {
    M_PARKED, "kvtier_manager_parked_keys_total", Counter, Manager,
    "Keys of request-level cascades parked until their write into the primary tier finished."
}
family! {
    M_PARKED_DROPPED, "kvtier_manager_parked_keys_dropped_total", Counter, Manager,
    "Parked keys dropped because their write into the primary tier failed."
}
family! {
    M_STALE, "kvtier_manager_stale_completions_total", Counter, Manager,
    "Secondary-tier jobs that finished after a reset orphaned them."
}
family! {
    M_TIER_BUGS, "kvtier_manager_tier_bugs_total", Counter, Manager,
    "Misbehaviours of secondary tiers, all tiers together (unknown or repeated job ids, counters that went back, ...)."
}
family! {
    M_INTERNAL, "kvtier_manager_internal_errors_total", Counter, Manager,
    "kvtier's own inconsistencies (logged; never expected)."
}
family! {
    M_RESETS, "kvtier_manager_resets_total", Counter, Manager,
    "Cache resets."
}
family! {
    M_DROPPED_BLOCKS, "kvtier_manager_dropped_blocks_total", Counter, Manager,
    "Blocks drop_blocks removed, all tiers together (busy blocks it kept are not counted)."
}
family! {
    M_PIN_SETS, "kvtier_manager_pin_sets", Gauge, Manager,
    "Pin sets (named sets of blocks held resident)."
}
family! {
    M_PINNED_BLOCKS, "kvtier_manager_pinned_blocks", Gauge, ManagerByTier,
    "Blocks pin sets hold, by tier (a block in several sets counted once)."
}
family! {
    M_PINNED_BYTES, "kvtier_manager_pinned_bytes", Gauge, ManagerByTier,
    "Bytes of the blocks pin sets hold, by tier (blocks times block_bytes; 0 when the block size is unknown)."
}
family! {
    M_JOBS_IN_FLIGHT, "kvtier_manager_jobs_in_flight", Gauge, Manager,
    "Jobs submitted to secondary tiers and not finished yet."
}
family! {
    M_ACTIVE_REQUESTS, "kvtier_manager_active_requests", Gauge, Manager,
    "Requests started and not finalized yet."
}
family! {
    M_PROMOTIONS_HELD, "kvtier_manager_promotions_held", Gauge, Manager,
    "1 while promotions are held after a reset, else 0."
}
family! {
    M_PROMOTION_WAIT, "kvtier_manager_promotion_wait_seconds", Histogram, Manager,
    "How long requests waited for blocks on their way: from a lookup that left some of a request's keys on their way to the first later lookup that left none (or its prepare_load, its finish, or a lookup after the wait bound), one observation per wait."
}
family! {
    M_WAIT_TIMEOUTS, "kvtier_manager_wait_timeouts_total", Counter, Manager,
    "Waits of requests for blocks on their way that passed the bound (wait_steps steps or wait_ms milliseconds): their holds were released."
}
family! {
    M_REQUESTS_FINISHED, "kvtier_manager_requests_finished_total", Counter, Manager,
    "Requests the manager let go after their finish; each is counted once, then, in every kvtier_manager_request_* family."
}
family! {
    M_REQUEST_ASKED, "kvtier_manager_request_blocks_asked_total", Counter, Manager,
    "Blocks finished requests asked for: per request, the keys of its largest lookup (per-key lookups: those of one step together, up to the first miss)."
}
family! {
    M_REQUEST_RECOMPUTED, "kvtier_manager_request_blocks_recomputed_total", Counter, Manager,
    "Blocks finished requests asked for and were not served (per request, asked minus served): the engine computed them."
}
family! {
    M_REQUEST_WAIT_STEPS, "kvtier_manager_request_wait_steps_total", Counter, Manager,
    "Steps (schedule_end calls) finished requests spent waiting for blocks on their way."
}
family! {
    M_EVENTS_QUEUED, "kvtier_manager_events_queued", Gauge, Manager,
    "Cache events gathered from the tiers and waiting to be taken."
}
