//! Every metric family kvtier exposes, and which statistic feeds which
//! family: one table per source of statistics (the manager's own, the
//! primary tier's, the manager's counters for each secondary tier, and
//! the built-in tiers' own reports).
//!
//! The names follow the Prometheus conventions: a `kvtier_` prefix, then
//! the scope (`manager`, `tier` for a concept every tier shares, `primary`,
//! `fs`, `redis` for one tier's own), base units as suffixes (`_seconds`,
//! `_bytes`, `_blocks`, `_keys`), `_total` on counters only, `_ratio` on
//! ratios.  Values that differ only by a reason, a cause or a direction
//! share one family with a label saying which.  Manager-level families
//! carry no `tier` label (except `kvtier_manager_lookup_hits_total`
//! and `kvtier_manager_request_blocks_served_total`, which partition the
//! manager's lookups and its requests' loaded blocks by the tier that had
//! them); tier-level families carry `tier` and `medium`, so no sum mixes
//! the two.

/// A family's type, as its `# TYPE` line says.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FamilyType {
    /// Cumulative count (the name ends in `_total`).
    Counter,
    /// Current level.
    Gauge,
    /// Cumulative buckets, sum and count.
    Histogram,
}

impl FamilyType {
    /// The word on the `# TYPE` line.
    pub fn as_str(self) -> &'static str {
        match self {
            FamilyType::Counter => "counter",
            FamilyType::Gauge => "gauge",
            FamilyType::Histogram => "histogram",
        }
    }
}

/// Which labels a family's series carry besides the entry's own.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Scope {
    /// The manager as a whole: no `tier` label.
    Manager,
    /// The manager's, split by the tier that answered: `tier` only.
    ManagerByTier,
    /// One tier's: `tier` and `medium`.
    Tier,
}

/// One metric family.
#[derive(Debug)]
pub struct Family {
    /// The family's name (counters end in `_total`).
    pub name: &'static str,
    /// Its type.
    pub ty: FamilyType,
    /// Which labels identify a tier.
    pub scope: Scope,
    /// The label an entry sets (`reason`, `cause`, `direction`, ...), if any.
    pub label: Option<&'static str>,
    /// The `# HELP` text.
    pub help: &'static str,
}

/// Which family one statistic feeds.
#[derive(Debug)]
pub struct Entry {
    /// The statistic's name (a histogram's name for its series).
    pub stat: &'static str,
    /// Its family.
    pub family: &'static Family,
    /// The value of the family's label for this statistic.
    pub label_value: Option<&'static str>,
    /// Factor from the statistic's unit to the family's (1e-6 for
    /// microseconds exposed as seconds).
    pub scale: f64,
}

const fn entry(stat: &'static str, family: &'static Family) -> Entry {
    Entry {
        stat,
        family,
        label_value: None,
        scale: 1.0,
    }
}

const fn labelled(stat: &'static str, family: &'static Family, value: &'static str) -> Entry {
    Entry {
        stat,
        family,
        label_value: Some(value),
        scale: 1.0,
    }
}

const fn scaled(
    stat: &'static str,
    family: &'static Family,
    value: &'static str,
    scale: f64,
) -> Entry {
    Entry {
        stat,
        family,
        label_value: Some(value),
        scale,
    }
}

mod families;
pub use families::*;

/// The manager's own statistics.
pub static MANAGER: &[Entry] = &[
    entry("lookups", &M_LOOKUPS),
    labelled("primary_hits", &M_LOOKUP_HITS, "primary"),
    entry("primary_hit_pending", &M_LOOKUP_PENDING),
    entry("promotions_started", &M_PROMOTIONS),
    labelled("allocation_failures", &M_PROMOTIONS_REFUSED, "no_slot"),
    labelled(
        "promotions_not_admitted",
        &M_PROMOTIONS_REFUSED,
        "not_admitted",
    ),
    entry("held_misses", &M_HELD_MISSES),
    labelled("misses_absent", &M_LOOKUP_MISSES, "absent"),
    labelled("misses_no_room", &M_LOOKUP_MISSES, "no_room"),
    labelled("misses_timed_out", &M_LOOKUP_MISSES, "timed_out"),
    entry("wait_timeouts", &M_WAIT_TIMEOUTS),
    entry("store_refusals", &M_STORE_REFUSALS),
    entry("ignored_store_completions", &M_IGNORED_COMPLETIONS),
    entry("parked_keys", &M_PARKED),
    entry("parked_keys_dropped", &M_PARKED_DROPPED),
    entry("stale_completions", &M_STALE),
    entry("tier_bugs", &M_TIER_BUGS),
    entry("internal_errors", &M_INTERNAL),
    entry("resets", &M_RESETS),
    entry("requests_finished", &M_REQUESTS_FINISHED),
    entry("request_blocks_asked", &M_REQUEST_ASKED),
    labelled(
        "request_blocks_served_primary",
        &M_REQUEST_SERVED,
        "primary",
    ),
    entry("request_blocks_recomputed", &M_REQUEST_RECOMPUTED),
    entry("request_wait_steps", &M_REQUEST_WAIT_STEPS),
    entry("jobs_in_flight", &M_JOBS_IN_FLIGHT),
    entry("active_requests", &M_ACTIVE_REQUESTS),
    entry("promotions_held", &M_PROMOTIONS_HELD),
    entry("events_queued", &M_EVENTS_QUEUED),
    entry("promotion_wait_seconds", &M_PROMOTION_WAIT),
];

/// The primary tier's statistics.
pub static PRIMARY: &[Entry] = &[
    entry("capacity", &T_CAPACITY_BLOCKS),
    entry("used", &T_BLOCKS),
    entry("allocated", &P_ALLOCATED),
    entry("write_pending", &P_WRITE_PENDING),
    entry("pinned", &P_PINNED),
    entry("idle", &P_IDLE),
    entry("usage", &P_USAGE),
    entry("write_usage", &P_WRITE_USAGE),
    entry("read_usage", &P_READ_USAGE),
    entry("evictions", &T_EVICTIONS),
    entry("refusals", &P_REFUSALS),
    entry("admission_skips", &P_ADMISSION_SKIPS),
    entry("stores_planned", &P_STORES_PLANNED),
    entry("stores_completed", &P_STORES_COMPLETED),
    entry("stores_failed", &P_STORES_FAILED),
    labelled("late_completions", &P_IGNORED_COMPLETIONS, "late"),
    labelled("foreign_completions", &P_IGNORED_COMPLETIONS, "foreign"),
    labelled(
        "already_ready_completions",
        &P_IGNORED_COMPLETIONS,
        "already_ready",
    ),
    entry("spent_load_completions", &P_SPENT_LOAD_COMPLETIONS),
    entry("loads", &P_LOADS),
    entry("transfer_pins", &P_TRANSFER_PINS),
    entry("events_queued", &T_EVENTS_QUEUED),
    entry("events_dropped", &T_EVENTS_DROPPED),
    entry("admission_table_len", &P_ADMISSION_TABLE),
    labelled("arc_t1", &P_ARC_LISTS, "t1"),
    labelled("arc_t2", &P_ARC_LISTS, "t2"),
    labelled("arc_b1", &P_ARC_LISTS, "b1"),
    labelled("arc_b2", &P_ARC_LISTS, "b2"),
    entry("arc_target", &P_ARC_TARGET),
    entry("allocation_size_blocks", &P_ALLOCATION_SIZES),
];

/// The manager's counters for each secondary tier.
pub static TIER_MANAGED: &[Entry] = &[
    entry("lookups", &T_LOOKUPS),
    labelled("hits", &T_LOOKUP_ANSWERS, "hit"),
    labelled("retries", &T_LOOKUP_ANSWERS, "retry"),
    labelled("promotion_jobs", &T_JOBS, "load"),
    labelled("promotion_blocks", &T_JOB_BLOCKS, "load"),
    labelled("promotion_failures", &T_JOB_FAILURES, "load"),
    entry("partial_promotions", &T_PARTIAL_LOADS),
    labelled("cascade_jobs", &T_JOBS, "store"),
    labelled("cascade_blocks", &T_JOB_BLOCKS, "store"),
    labelled("cascade_failures", &T_JOB_FAILURES, "store"),
    entry("dropped_cascade_jobs", &T_DROPPED_JOBS),
    entry("dropped_cascade_blocks", &T_DROPPED_BLOCKS),
    labelled("bytes_loaded", &T_TRANSFER_BYTES, "load"),
    labelled("bytes_stored", &T_TRANSFER_BYTES, "store"),
    entry("tier_bugs", &T_BUGS),
    entry("poll_limit_reached", &T_POLL_LIMIT),
    entry("event_limit_reached", &T_EVENT_LIMIT),
    entry("promotions_started", &M_LOOKUP_HITS),
    entry("request_blocks_served", &M_REQUEST_SERVED),
    labelled("load_duration_seconds", &T_JOB_DURATION, "load"),
    labelled("load_size_blocks", &T_JOB_SIZE, "load"),
    labelled("store_duration_seconds", &T_JOB_DURATION, "store"),
    labelled("store_size_blocks", &T_JOB_SIZE, "store"),
    entry("under_pressure", &T_UNDER_PRESSURE),
    Entry {
        stat: "store_latency_ema",
        family: &T_STORE_LATENCY_EMA,
        label_value: None,
        scale: 1e-9,
    },
];

/// The built-in statistics of a tier behind the C vtable (what the tier's
/// own `stats` callback reports comes after them and is not in here).
pub static VTABLE: &[Entry] = &[
    entry("callback_errors", &T_CALLBACK_ERRORS),
    entry("events_rejected", &T_EVENTS_REJECTED),
];

/// The fs tier's own statistics.
pub static FS: &[Entry] = &[
    entry("bytes_used", &T_USED_BYTES),
    entry("capacity_bytes", &T_CAPACITY_BYTES),
    entry("blocks", &T_BLOCKS),
    entry("direct_io", &FS_DIRECT_IO),
    labelled("hits", &FS_LOOKUP_RESULTS, "hit"),
    labelled("misses", &FS_LOOKUP_RESULTS, "miss"),
    labelled("lookup_retries", &FS_LOOKUP_RESULTS, "retry"),
    entry("existence_checks", &FS_EXISTENCE_CHECKS),
    entry("blocks_adopted", &FS_ADOPTED),
    labelled("stores_written", &FS_STORES, "written"),
    labelled("stores_already_present", &FS_STORES, "already_present"),
    labelled("stores_skipped", &FS_STORES, "skipped"),
    labelled("stores_rejected_full", &FS_STORES, "rejected_full"),
    entry("loads", &FS_LOADS),
    entry("jobs_failed", &FS_JOBS_FAILED),
    entry("evictions", &T_EVICTIONS),
    entry("corrupt_blocks_removed", &FS_CORRUPT_REMOVED),
    entry("unreadable_blocks_dropped", &FS_UNREADABLE_DROPPED),
    entry("blocks_found_missing", &FS_FOUND_MISSING),
    entry("events_dropped", &T_EVENTS_DROPPED),
    entry("events_queued", &T_EVENTS_QUEUED),
    entry("removal_errors", &FS_REMOVAL_ERRORS),
    labelled("read_bytes", &FS_IO_BYTES, "read"),
    scaled("read_time_us", &FS_IO_SECONDS, "read", 1e-6),
    labelled("write_bytes", &FS_IO_BYTES, "write"),
    scaled("write_time_us", &FS_IO_SECONDS, "write", 1e-6),
    entry("restart_blocks", &FS_RESTART_BLOCKS),
    labelled("restart_skipped_files", &FS_RESTART_FILES, "skipped"),
    labelled("restart_removed_files", &FS_RESTART_FILES, "removed"),
    labelled("restart_temp_removed", &FS_RESTART_FILES, "temp_removed"),
    labelled("restart_unreadable_files", &FS_RESTART_FILES, "unreadable"),
    labelled("restart_foreign_entries", &FS_RESTART_FILES, "foreign"),
    labelled("errors_no_space", &FS_ERRORS, "no_space"),
    labelled("errors_read_only", &FS_ERRORS, "read_only"),
    labelled("errors_permission", &FS_ERRORS, "permission"),
    labelled("errors_missing_dir", &FS_ERRORS, "missing_dir"),
    labelled("errors_io", &FS_ERRORS, "io"),
    labelled("errors_vanished", &FS_ERRORS, "vanished"),
    labelled("errors_truncated", &FS_ERRORS, "truncated"),
    labelled("errors_bad_header", &FS_ERRORS, "bad_header"),
    labelled("errors_checksum", &FS_ERRORS, "checksum"),
    labelled("errors_not_present", &FS_ERRORS, "not_present"),
    labelled("errors_closed", &FS_ERRORS, "closed"),
    labelled("errors_bad_slot", &FS_ERRORS, "bad_slot"),
    labelled("errors_foreign", &FS_ERRORS, "foreign"),
    labelled("errors_transient", &FS_ERRORS, "transient"),
];

/// The redis tier's own statistics.
pub static REDIS: &[Entry] = &[
    entry("lookups", &R_LOOKUPS),
    labelled("lookup_hits", &R_LOOKUP_RESULTS, "hit"),
    labelled("lookup_misses", &R_LOOKUP_RESULTS, "miss"),
    labelled("lookup_retries", &R_LOOKUP_RESULTS, "retry"),
    entry("lookup_breaker_misses", &R_BREAKER_MISSES),
    entry("exists_checks", &R_EXISTS_CHECKS),
    entry("exists_batches", &R_EXISTS_BATCHES),
    labelled("store_jobs", &R_JOBS, "store"),
    labelled("store_jobs_failed", &R_JOBS_FAILED, "store"),
    entry("stores_dropped", &R_BREAKER_DROPPED_JOBS),
    entry("blocks_dropped", &R_BREAKER_DROPPED_BLOCKS),
    entry("blocks_stored", &R_BLOCKS_STORED),
    entry("blocks_skipped", &R_BLOCKS_SKIPPED),
    labelled("bytes_stored", &R_BYTES, "store"),
    labelled("load_jobs", &R_JOBS, "load"),
    labelled("load_jobs_failed", &R_JOBS_FAILED, "load"),
    entry("loads_rejected", &R_LOADS_REJECTED),
    entry("blocks_loaded", &R_BLOCKS_LOADED),
    labelled("bytes_loaded", &R_BYTES, "load"),
    labelled("blocks_missing", &R_BAD_BLOCKS, "missing"),
    labelled("blocks_corrupt", &R_BAD_BLOCKS, "corrupt"),
    labelled("blocks_wrong_size", &R_BAD_BLOCKS, "wrong_size"),
    entry("corrupt_deleted", &R_CORRUPT_DELETED),
    entry("round_trips", &R_ROUND_TRIPS),
    entry("breaker_opens", &R_BREAKER_OPENS),
    entry("breaker_closes", &R_BREAKER_CLOSES),
    entry("probes", &R_PROBES),
    entry("probes_failed", &R_PROBES_FAILED),
    labelled("expired", &R_FORGOTTEN, "expired"),
    labelled("known_forgotten", &R_FORGOTTEN, "memory_bound"),
    entry("events_dropped", &T_EVENTS_DROPPED),
    labelled("failures_server_down", &R_FAILURES, "server_down"),
    labelled("failures_timeout", &R_FAILURES, "timeout"),
    labelled("failures_connection_reset", &R_FAILURES, "connection_reset"),
    labelled("failures_oom", &R_FAILURES, "oom"),
    labelled("failures_server_error", &R_FAILURES, "server_error"),
    labelled("failures_other", &R_FAILURES, "other"),
    labelled("failures_breaker_open", &R_FAILURES, "breaker_open"),
    labelled("failures_cancelled", &R_FAILURES, "cancelled"),
    entry("breaker_open", &R_BREAKER_OPEN),
    entry("known_keys", &R_KNOWN_KEYS),
    entry("events_queued", &T_EVENTS_QUEUED),
    entry("jobs_in_flight", &R_JOBS_IN_FLIGHT),
    entry("connections", &R_CONNECTIONS),
];

/// Every table, for listing every family.
pub static TABLES: &[&[Entry]] = &[MANAGER, PRIMARY, TIER_MANAGED, VTABLE, FS, REDIS];

/// The entry for `stat` in `table`, if any.
pub fn find(table: &'static [Entry], stat: &str) -> Option<&'static Entry> {
    table.iter().find(|e| e.stat == stat)
}
