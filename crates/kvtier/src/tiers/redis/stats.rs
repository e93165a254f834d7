//! The redis tier's statistics, each declared once with its family: its
//! counters (the struct the tier counts in), the ones it reports beside
//! them, and the table it hands the Prometheus exposition
//! ([`SecondaryTier::stat_table`](crate::tiering::SecondaryTier::stat_table)).

use super::outcome::Cause;
use crate::stats::{T_EVENTS_DROPPED, T_EVENTS_QUEUED, family, stat_table};
use crate::tiers::kit::CauseCounters;

stat_table! {
    /// The families of the redis tier's statistics.
    pub(crate) static REDIS_STATS;

    /// Counters since creation.
    #[derive(Default)]
    pub(super) struct Counters {
        /// Keys looked up.
        counter lookups: u64 => R_LOOKUPS,
        /// Lookups answered HIT.
        counter lookup_hits: u64 => R_LOOKUP_RESULTS["hit"],
        /// Lookups answered MISS.
        counter lookup_misses: u64 => R_LOOKUP_RESULTS["miss"],
        /// Lookups answered RETRY.
        counter lookup_retries: u64 => R_LOOKUP_RESULTS["retry"],
        /// Lookups answered MISS because the breaker was open.
        counter lookup_breaker_misses: u64 => R_BREAKER_MISSES,
        /// Keys checked with EXISTS.
        counter exists_checks: u64 => R_EXISTS_CHECKS,
        /// Round trips that carried existence checks.
        counter exists_batches: u64 => R_EXISTS_BATCHES,
        /// Store jobs run.
        counter store_jobs: u64 => R_JOBS["store"],
        /// Store jobs reported failed.
        counter store_jobs_failed: u64 => R_JOBS_FAILED["store"],
        /// Store jobs dropped while the breaker was open.
        counter stores_dropped: u64 => R_BREAKER_DROPPED_JOBS,
        /// Blocks of those jobs.
        counter blocks_dropped: u64 => R_BREAKER_DROPPED_BLOCKS,
        /// Blocks written.
        counter blocks_stored: u64 => R_BLOCKS_STORED,
        /// Blocks not written because Redis had them.
        counter blocks_skipped: u64 => R_BLOCKS_SKIPPED,
        /// Bytes written.
        counter bytes_stored: u64 => R_BYTES["store"],
        /// Load jobs run.
        counter load_jobs: u64 => R_JOBS["load"],
        /// Load jobs reported failed.
        counter load_jobs_failed: u64 => R_JOBS_FAILED["load"],
        /// Loads refused (breaker open, or closed).
        counter loads_rejected: u64 => R_LOADS_REJECTED,
        /// Blocks read.
        counter blocks_loaded: u64 => R_BLOCKS_LOADED,
        /// Bytes read.
        counter bytes_loaded: u64 => R_BYTES["load"],
        /// Blocks a load found missing.
        counter blocks_missing: u64 => R_BAD_BLOCKS["missing"],
        /// Blocks a load found corrupt.
        counter blocks_corrupt: u64 => R_BAD_BLOCKS["corrupt"],
        /// Blocks a load found of the wrong size.
        counter blocks_wrong_size: u64 => R_BAD_BLOCKS["wrong_size"],
        /// Corrupt blocks deleted.
        counter corrupt_deleted: u64 => R_CORRUPT_DELETED,
        /// Round trips.
        counter round_trips: u64 => R_ROUND_TRIPS,
        /// Times the breaker opened.
        counter breaker_opens: u64 => R_BREAKER_OPENS,
        /// Times the breaker closed.
        counter breaker_closes: u64 => R_BREAKER_CLOSES,
        /// Health probes sent.
        counter probes: u64 => R_PROBES,
        /// Health probes that failed.
        counter probes_failed: u64 => R_PROBES_FAILED,
        /// Known keys forgotten because their TTL passed.
        counter expired: u64 => R_FORGOTTEN["expired"],
        /// Known keys forgotten to bound memory.
        counter known_forgotten: u64 => R_FORGOTTEN["memory_bound"],
    }
    plain {
        /// Failures per cause.
        failures: CauseCounters<Cause>,
    }
    also {
        /// Events dropped because the queue was full.
        counter EVENTS_DROPPED = "events_dropped" => T_EVENTS_DROPPED,
        /// 1 while the breaker is open, else 0.
        gauge BREAKER_OPEN = "breaker_open" => R_BREAKER_OPEN,
        /// Keys the tier knows Redis holds.
        gauge KNOWN_KEYS = "known_keys" => R_KNOWN_KEYS,
        /// Events queued.
        gauge EVENTS_QUEUED = "events_queued" => T_EVENTS_QUEUED,
        /// Jobs running.
        gauge JOBS_IN_FLIGHT = "jobs_in_flight" => R_JOBS_IN_FLIGHT,
        /// Open connections.
        gauge CONNECTIONS = "connections" => R_CONNECTIONS,
    }
    rows Cause::STAT_ROWS;
}

// The redis tier's own families.
family! {
    R_LOOKUPS, "kvtier_redis_lookups_total", Counter, Tier,
    "Keys the redis tier was asked about."
}
family! {
    R_LOOKUP_RESULTS, "kvtier_redis_lookup_results_total", Counter, Tier, "result",
    "The redis tier's answers to lookups, by result: hit, miss, retry."
}
family! {
    R_BREAKER_MISSES, "kvtier_redis_lookup_breaker_misses_total", Counter, Tier,
    "Lookups answered MISS because the circuit breaker was open (also counted as misses)."
}
family! {
    R_EXISTS_CHECKS, "kvtier_redis_exists_checks_total", Counter, Tier,
    "Keys checked with EXISTS."
}
family! {
    R_EXISTS_BATCHES, "kvtier_redis_exists_batches_total", Counter, Tier,
    "Round trips that carried existence checks."
}
family! {
    R_JOBS, "kvtier_redis_jobs_total", Counter, Tier, "direction",
    "Jobs the redis tier ran, by direction."
}
family! {
    R_JOBS_FAILED, "kvtier_redis_jobs_failed_total", Counter, Tier, "direction",
    "Jobs the redis tier reported failed, by direction."
}
family! {
    R_BREAKER_DROPPED_JOBS, "kvtier_redis_breaker_dropped_jobs_total", Counter, Tier,
    "Store jobs dropped while the circuit breaker was open."
}
family! {
    R_BREAKER_DROPPED_BLOCKS, "kvtier_redis_breaker_dropped_blocks_total", Counter, Tier,
    "Blocks of the store jobs dropped while the circuit breaker was open."
}
family! {
    R_BLOCKS_STORED, "kvtier_redis_blocks_stored_total", Counter, Tier,
    "Blocks written to Redis."
}
family! {
    R_BLOCKS_SKIPPED, "kvtier_redis_blocks_skipped_total", Counter, Tier,
    "Blocks not written because Redis already had them."
}
family! {
    R_BYTES, "kvtier_redis_transfer_bytes_total", Counter, Tier, "direction",
    "Bytes written to and read from Redis, by direction."
}
family! {
    R_LOADS_REJECTED, "kvtier_redis_loads_rejected_total", Counter, Tier,
    "Loads refused while the circuit breaker was open or the tier closed."
}
family! {
    R_BLOCKS_LOADED, "kvtier_redis_blocks_loaded_total", Counter, Tier,
    "Blocks read from Redis."
}
family! {
    R_BAD_BLOCKS, "kvtier_redis_bad_blocks_total", Counter, Tier, "reason",
    "Blocks a load could not use, by reason: missing, corrupt, wrong_size."
}
family! {
    R_CORRUPT_DELETED, "kvtier_redis_corrupt_deleted_total", Counter, Tier,
    "Corrupt blocks deleted from Redis."
}
family! {
    R_ROUND_TRIPS, "kvtier_redis_round_trips_total", Counter, Tier,
    "Round trips to Redis."
}
family! {
    R_BREAKER_OPENS, "kvtier_redis_breaker_opens_total", Counter, Tier,
    "Times the circuit breaker opened."
}
family! {
    R_BREAKER_CLOSES, "kvtier_redis_breaker_closes_total", Counter, Tier,
    "Times the circuit breaker closed."
}
family! {
    R_PROBES, "kvtier_redis_probes_total", Counter, Tier,
    "Health probes sent while the breaker was open."
}
family! {
    R_PROBES_FAILED, "kvtier_redis_probes_failed_total", Counter, Tier,
    "Health probes that failed."
}
family! {
    R_FORGOTTEN, "kvtier_redis_known_keys_forgotten_total", Counter, Tier, "reason",
    "Keys the tier stopped tracking, by reason: expired (their TTL passed), memory_bound (to bound memory; Redis may still have them)."
}
family! {
    R_BREAKER_OPEN, "kvtier_redis_breaker_open", Gauge, Tier,
    "1 while the circuit breaker is open, else 0."
}
family! {
    R_KNOWN_KEYS, "kvtier_redis_known_keys", Gauge, Tier,
    "Keys the tier knows Redis holds."
}
family! {
    R_JOBS_IN_FLIGHT, "kvtier_redis_jobs_in_flight", Gauge, Tier,
    "Jobs the redis tier is running."
}
family! {
    R_CONNECTIONS, "kvtier_redis_connections", Gauge, Tier,
    "Open connections to Redis."
}
