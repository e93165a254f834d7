//! The manager's counters: its own (behind [`super::ManagerStats`]) and
//! those it keeps per secondary tier (listed first in that tier's stats).
//! Cumulative from the manager's creation; resets keep them.

/// What the manager counted for one secondary tier.
#[derive(Default, Clone, Copy)]
pub(super) struct TierCounters {
    pub(super) lookups: u64,
    pub(super) hits: u64,
    pub(super) retries: u64,
    /// Lookups that started a promotion from this tier.
    pub(super) promotions_started: u64,
    pub(super) promotion_jobs: u64,
    pub(super) promotion_blocks: u64,
    pub(super) promotion_failures: u64,
    pub(super) partial_promotions: u64,
    pub(super) cascade_jobs: u64,
    pub(super) cascade_blocks: u64,
    pub(super) cascade_failures: u64,
    pub(super) dropped_cascade_jobs: u64,
    pub(super) dropped_cascade_blocks: u64,
    pub(super) bytes_loaded: u64,
    pub(super) bytes_stored: u64,
    /// Finished loads (promotions): duration and size.
    pub(super) loads: super::observe::JobHistograms,
    /// Finished stores (cascades): duration and size.
    pub(super) stores: super::observe::JobHistograms,
    pub(super) tier_bugs: u64,
    /// Polls that took [`MAX_FINISHED_PER_POLL`](crate::tiering::MAX_FINISHED_PER_POLL)
    /// jobs and left the rest.
    pub(super) poll_limit_reached: u64,
    /// Event takes that took [`MAX_EVENTS_PER_TAKE`](crate::tiering::MAX_EVENTS_PER_TAKE)
    /// events and left the rest.
    pub(super) event_limit_reached: u64,
    /// Blocks finished requests loaded that were promoted for them from
    /// this tier (each request counted once, when it is let go).
    pub(super) request_blocks_served: u64,
}

/// What the manager counted of its own.
#[derive(Default, Clone, Copy)]
pub(super) struct ManagerCounters {
    pub(super) lookups: u64,
    pub(super) primary_hits: u64,
    pub(super) primary_hit_pending: u64,
    pub(super) promotions_started: u64,
    pub(super) allocation_failures: u64,
    pub(super) promotions_not_admitted: u64,
    pub(super) held_misses: u64,
    pub(super) misses_absent: u64,
    pub(super) misses_no_room: u64,
    pub(super) misses_timed_out: u64,
    /// Waits that passed the bound.
    pub(super) wait_timeouts: u64,
    /// Per request, counted once when the manager lets it go.
    pub(super) requests_finished: u64,
    pub(super) request_blocks_asked: u64,
    pub(super) request_blocks_served_primary: u64,
    pub(super) request_blocks_recomputed: u64,
    pub(super) request_wait_steps: u64,
    pub(super) store_refusals: u64,
    pub(super) ignored_store_completions: u64,
    pub(super) parked_keys: u64,
    pub(super) parked_keys_dropped: u64,
    pub(super) stale_completions: u64,
    pub(super) tier_bugs: u64,
    pub(super) internal_errors: u64,
    pub(super) resets: u64,
}
