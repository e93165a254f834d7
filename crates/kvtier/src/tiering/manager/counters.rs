//! The counters the manager keeps per secondary tier (listed first in
//! that tier's stats), each declared once with its family.  Cumulative
//! from the manager's creation; resets keep them.  (The manager's own
//! counters are the fields of [`super::ManagerStats`].)

use std::time::Duration;

use crate::histogram::{
    Histogram, JOB_SIZE_BLOCKS_BOUNDS, JOB_SIZE_BUCKETS, LATENCY_BUCKETS, LATENCY_SECONDS_BOUNDS,
};
use crate::stats::{Stat, family, stat_table};

stat_table! {
    /// The families of the manager's counters for each secondary tier.
    pub(crate) static TIER_MANAGED_STATS;

    /// What the manager counted for one secondary tier.
    #[derive(Default, Clone, Copy)]
    pub(super) struct TierCounters {
        /// Keys the manager asked the tier about.
        counter lookups: u64 => T_LOOKUPS,
        /// Lookups the tier answered HIT.
        counter hits: u64 => T_LOOKUP_ANSWERS["hit"],
        /// Lookups the tier answered RETRY.
        counter retries: u64 => T_LOOKUP_ANSWERS["retry"],
        /// Lookups that started a promotion from this tier.
        counter promotions_started: u64 => M_LOOKUP_HITS,
        /// Load jobs submitted to the tier.
        counter promotion_jobs: u64 => T_JOBS["load"],
        /// Blocks in those load jobs.
        counter promotion_blocks: u64 => T_JOB_BLOCKS["load"],
        /// Load jobs the tier reported failed.
        counter promotion_failures: u64 => T_JOB_FAILURES["load"],
        /// Failed loads some of whose keys arrived.
        counter partial_promotions: u64 => T_PARTIAL_LOADS,
        /// Store jobs submitted to the tier.
        counter cascade_jobs: u64 => T_JOBS["store"],
        /// Blocks in those store jobs.
        counter cascade_blocks: u64 => T_JOB_BLOCKS["store"],
        /// Store jobs the tier reported failed.
        counter cascade_failures: u64 => T_JOB_FAILURES["store"],
        /// Store jobs not submitted under back-pressure.
        counter dropped_cascade_jobs: u64 => T_DROPPED_JOBS,
        /// Blocks of those dropped jobs.
        counter dropped_cascade_blocks: u64 => T_DROPPED_BLOCKS,
        /// Bytes the tier reported loading in finished jobs.
        counter bytes_loaded: u64 => T_TRANSFER_BYTES["load"],
        /// Bytes the tier reported storing in finished jobs.
        counter bytes_stored: u64 => T_TRANSFER_BYTES["store"],
        /// Misbehaviours of this tier.
        counter tier_bugs: u64 => T_BUGS,
        /// Polls that took [`MAX_FINISHED_PER_POLL`](crate::tiering::MAX_FINISHED_PER_POLL)
        /// jobs and left the rest.
        counter poll_limit_reached: u64 => T_POLL_LIMIT,
        /// Event takes that took [`MAX_EVENTS_PER_TAKE`](crate::tiering::MAX_EVENTS_PER_TAKE)
        /// events and left the rest.
        counter event_limit_reached: u64 => T_EVENT_LIMIT,
        /// Blocks finished requests loaded that were promoted for them from
        /// this tier (each request counted once, when it is let go).
        counter request_blocks_served: u64 => M_REQUEST_SERVED,
    }
    plain {
        /// Finished loads (promotions): duration and size.
        loads: JobHistograms,
        /// Finished stores (cascades): duration and size.
        stores: JobHistograms,
    }
    also {
        /// Finished loads' durations (of `loads`).
        histogram LOAD_DURATION = "load_duration_seconds" => T_JOB_DURATION["load"],
        /// Finished loads' sizes (of `loads`).
        histogram LOAD_SIZE = "load_size_blocks" => T_JOB_SIZE["load"],
        /// Finished stores' durations (of `stores`).
        histogram STORE_DURATION = "store_duration_seconds" => T_JOB_DURATION["store"],
        /// Finished stores' sizes (of `stores`).
        histogram STORE_SIZE = "store_size_blocks" => T_JOB_SIZE["store"],
        /// The back-pressure detector's state (with back-pressure on).
        gauge UNDER_PRESSURE = "under_pressure" => T_UNDER_PRESSURE,
        /// The back-pressure detector's input, in nanoseconds per byte
        /// (exposed in seconds).
        gauge STORE_LATENCY_EMA = "store_latency_ema" => T_STORE_LATENCY_EMA * 1e-9,
    }
}

/// Finished jobs of one direction on one tier: how long each took
/// (seconds) and how many blocks it carried.
#[derive(Clone, Copy, Debug)]
pub(super) struct JobHistograms {
    seconds: Histogram<LATENCY_BUCKETS>,
    blocks: Histogram<JOB_SIZE_BUCKETS>,
}

impl Default for JobHistograms {
    fn default() -> Self {
        JobHistograms {
            seconds: Histogram::new(&LATENCY_SECONDS_BOUNDS),
            blocks: Histogram::new(&JOB_SIZE_BLOCKS_BOUNDS),
        }
    }
}

impl JobHistograms {
    /// Records a job of `blocks` blocks that took `elapsed`.
    #[inline]
    pub(super) fn record(&mut self, elapsed: Duration, blocks: usize) {
        self.seconds.record(elapsed.as_secs_f64());
        self.blocks.record(blocks as f64);
    }

    /// Appends `<direction>_duration_seconds` and
    /// `<direction>_size_blocks` to `out`.
    pub(super) fn push_stats(
        &self,
        duration: &'static str,
        size: &'static str,
        out: &mut Vec<Stat>,
    ) {
        self.seconds.push_stats(duration, out);
        self.blocks.push_stats(size, out);
    }
}

// Families of the manager's that a secondary tier's counters feed too
// (their `tier` label names the tier).
family! {
    pub(super) M_LOOKUP_HITS, "kvtier_manager_lookup_hits_total", Counter, ManagerByTier,
    "Keys a lookup found, by the tier that had them: tier=\"primary\" answered HIT, a secondary tier's name started a promotion from that tier. Every lookup counts, a waiting request's repeated lookups of one key included: for what requests got, see kvtier_manager_request_blocks_served_total."
}
family! {
    pub(super) M_REQUEST_SERVED, "kvtier_manager_request_blocks_served_total", Counter, ManagerByTier,
    "Blocks finished requests were served (loaded, each block asked for once), by the tier they came from: tier=\"primary\" already in the primary tier, a secondary tier's name promoted for the request from that tier. Divided by kvtier_manager_request_blocks_asked_total: the share of asked blocks each tier served."
}

// The families of the manager's counters for each secondary tier.
family! {
    T_LOOKUPS, "kvtier_tier_lookups_total", Counter, Tier,
    "Keys the manager asked the tier about (after a primary-tier miss)."
}
family! {
    T_LOOKUP_ANSWERS, "kvtier_tier_lookup_answers_total", Counter, Tier, "answer",
    "The tier's answers to the manager's lookups other than MISS: hit or retry (MISS is lookups minus these)."
}
family! {
    T_JOBS, "kvtier_tier_jobs_total", Counter, Tier, "direction",
    "Jobs the manager submitted to the tier: direction=\"load\" promotions into the primary tier, direction=\"store\" cascades out of it."
}
family! {
    T_JOB_BLOCKS, "kvtier_tier_job_blocks_total", Counter, Tier, "direction",
    "Blocks in the jobs the manager submitted to the tier, by direction."
}
family! {
    T_JOB_FAILURES, "kvtier_tier_job_failures_total", Counter, Tier, "direction",
    "Jobs the tier reported failed (a load some of whose keys arrived included), by direction."
}
family! {
    T_PARTIAL_LOADS, "kvtier_tier_partial_loads_total", Counter, Tier,
    "Failed loads in which some keys arrived (those became readable)."
}
family! {
    T_DROPPED_JOBS, "kvtier_tier_backpressure_dropped_jobs_total", Counter, Tier,
    "Store jobs not submitted because the tier was under back-pressure."
}
family! {
    T_DROPPED_BLOCKS, "kvtier_tier_backpressure_dropped_blocks_total", Counter, Tier,
    "Blocks of the store jobs dropped by back-pressure."
}
family! {
    T_TRANSFER_BYTES, "kvtier_tier_transfer_bytes_total", Counter, Tier, "direction",
    "Bytes the tier reported moving in finished jobs, by direction."
}
family! {
    T_JOB_DURATION, "kvtier_tier_job_duration_seconds", Histogram, Tier, "direction",
    "How long the tier's finished jobs took, submission to report (or as the tier measured it), by direction: load (promotions), store (cascades)."
}
family! {
    T_JOB_SIZE, "kvtier_tier_job_size_blocks", Histogram, Tier, "direction",
    "Blocks per finished job of the tier, by direction."
}
family! {
    T_BUGS, "kvtier_tier_bugs_total", Counter, Tier,
    "Misbehaviours of this tier (unknown or repeated job ids, counters that went back, ...)."
}
family! {
    T_POLL_LIMIT, "kvtier_tier_poll_limit_reached_total", Counter, Tier,
    "Polls that took the most finished jobs one poll takes from the tier and left the rest."
}
family! {
    T_EVENT_LIMIT, "kvtier_tier_event_limit_reached_total", Counter, Tier,
    "Event gatherings that took the most events one gathering takes from the tier."
}
family! {
    T_UNDER_PRESSURE, "kvtier_tier_under_pressure", Gauge, Tier,
    "1 while the tier's back-pressure detector holds it under pressure, else 0 (only with back-pressure on)."
}
family! {
    T_STORE_LATENCY_EMA, "kvtier_tier_store_latency_per_byte_seconds", Gauge, Tier,
    "Moving average of the tier's store latency per byte (per block when block sizes are unknown), the back-pressure detector's input (only with back-pressure on)."
}
