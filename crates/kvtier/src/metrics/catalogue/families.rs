//! The metric families themselves, scope by scope: name, type, label and
//! help text (the tables of `catalogue.rs` say which statistic feeds each).

use super::{Family, FamilyType, Scope};

macro_rules! family {
    ($id:ident, $name:literal, $ty:ident, $scope:ident, $help:literal) => {
        #[doc = $help]
        pub static $id: Family = Family {
            name: $name,
            ty: FamilyType::$ty,
            scope: Scope::$scope,
            label: None,
            help: $help,
        };
    };
    ($id:ident, $name:literal, $ty:ident, $scope:ident, $label:literal, $help:literal) => {
        #[doc = $help]
        pub static $id: Family = Family {
            name: $name,
            ty: FamilyType::$ty,
            scope: Scope::$scope,
            label: Some($label),
            help: $help,
        };
    };
}

// The manager as a whole.
family! {
    M_LOOKUPS, "kvtier_manager_lookups_total", Counter, Manager,
    "Keys looked up (a batched lookup counts the keys it looked at, up to the one it stopped at)."
}
family! {
    M_LOOKUP_HITS, "kvtier_manager_lookup_hits_total", Counter, ManagerByTier,
    "Keys a lookup found, by the tier that had them: tier=\"primary\" answered HIT, a secondary tier's name started a promotion from that tier. Every lookup counts, a waiting request's repeated lookups of one key included: for what requests got, see kvtier_manager_request_blocks_served_total."
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
    M_REQUEST_SERVED, "kvtier_manager_request_blocks_served_total", Counter, ManagerByTier,
    "Blocks finished requests were served (loaded, each block asked for once), by the tier they came from: tier=\"primary\" already in the primary tier, a secondary tier's name promoted for the request from that tier. Divided by kvtier_manager_request_blocks_asked_total: the share of asked blocks each tier served."
}
family! {
    M_REQUEST_RECOMPUTED, "kvtier_manager_request_blocks_recomputed_total", Counter, Manager,
    "Blocks finished requests asked for and were not served (per request, asked minus served): the engine computed them."
}
family! {
    M_REQUEST_WAIT_STEPS, "kvtier_manager_request_wait_steps_total", Counter, Manager,
    "Steps (on_schedule_end calls) finished requests spent waiting for blocks on their way."
}
family! {
    M_EVENTS_QUEUED, "kvtier_manager_events_queued", Gauge, Manager,
    "Cache events gathered from the tiers and waiting to be taken."
}

// Concepts every tier shares (the primary tier included).
family! {
    T_BLOCKS, "kvtier_tier_blocks", Gauge, Tier,
    "Blocks the tier holds: in the primary tier the slots holding a key (write pending included), in the fs tier the blocks stored and readable."
}
family! {
    T_CAPACITY_BLOCKS, "kvtier_tier_capacity_blocks", Gauge, Tier,
    "The tier's capacity in blocks (the primary tier's slots)."
}
family! {
    T_USED_BYTES, "kvtier_tier_used_bytes", Gauge, Tier,
    "Bytes the tier's blocks take on its medium."
}
family! {
    T_CAPACITY_BYTES, "kvtier_tier_capacity_bytes", Gauge, Tier,
    "The tier's capacity in bytes (0: no limit)."
}
family! {
    T_EVICTIONS, "kvtier_tier_evictions_total", Counter, Tier,
    "Blocks the tier evicted to make room."
}
family! {
    T_EVENTS_QUEUED, "kvtier_tier_events_queued", Gauge, Tier,
    "Cache events the tier queued that the manager has not gathered yet."
}
family! {
    T_EVENTS_DROPPED, "kvtier_tier_events_dropped_total", Counter, Tier,
    "Cache events the tier dropped because its queue was full."
}

// The manager's counters for each secondary tier.
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
family! {
    T_CALLBACK_ERRORS, "kvtier_tier_callback_errors_total", Counter, Tier,
    "Callbacks of a C or C++ tier that returned a status other than OK or answered something invalid."
}
family! {
    T_EVENTS_REJECTED, "kvtier_tier_events_rejected_total", Counter, Tier,
    "Events of a C or C++ tier refused because their key was empty or longer than 64 bytes."
}

// The primary tier's own.
family! {
    P_ALLOCATED, "kvtier_primary_allocated_blocks", Gauge, Tier,
    "Slots handed out fresh since creation or the last reset (a high-water mark)."
}
family! {
    P_WRITE_PENDING, "kvtier_primary_write_pending_blocks", Gauge, Tier,
    "Keys being written into the primary tier."
}
family! {
    P_PINNED, "kvtier_primary_pinned_blocks", Gauge, Tier,
    "Ready keys pinned by loads or transfers."
}
family! {
    P_IDLE, "kvtier_primary_idle_blocks", Gauge, Tier,
    "Ready keys nobody pins (evictable)."
}
family! {
    P_USAGE, "kvtier_primary_usage_ratio", Gauge, Tier,
    "(write pending + pinned) / capacity: the share of slots neither free nor evictable."
}
family! {
    P_WRITE_USAGE, "kvtier_primary_write_usage_ratio", Gauge, Tier,
    "write pending / capacity."
}
family! {
    P_READ_USAGE, "kvtier_primary_read_usage_ratio", Gauge, Tier,
    "pinned / capacity."
}
family! {
    P_REFUSALS, "kvtier_primary_store_refusals_total", Counter, Tier,
    "prepare_store calls the primary tier refused for lack of evictable keys."
}
family! {
    P_ADMISSION_SKIPS, "kvtier_primary_admission_skips_total", Counter, Tier,
    "Keys not stored because they were offered fewer times than the admission threshold."
}
family! {
    P_STORES_PLANNED, "kvtier_primary_stores_planned_total", Counter, Tier,
    "Keys prepare_store planned to store."
}
family! {
    P_STORES_COMPLETED, "kvtier_primary_stores_completed_total", Counter, Tier,
    "Write-pending keys complete_store made ready."
}
family! {
    P_STORES_FAILED, "kvtier_primary_stores_failed_total", Counter, Tier,
    "Write-pending keys a failed complete_store dropped."
}
family! {
    P_IGNORED_COMPLETIONS, "kvtier_primary_ignored_completions_total", Counter, Tier, "reason",
    "Keys named in complete_store and left alone, by reason: late (absent), foreign (write pending for another writer), already_ready."
}
family! {
    P_LOADS, "kvtier_primary_loads_total", Counter, Tier,
    "Keys prepare_load pinned for a load to the GPU."
}
family! {
    P_SPENT_LOAD_COMPLETIONS, "kvtier_primary_spent_load_completions_total", Counter, Tier,
    "Keys a finished request's late complete_load named whose pin other requests' unpins had already taken: nothing released."
}
family! {
    P_TRANSFER_PINS, "kvtier_primary_transfer_pins_total", Counter, Tier,
    "Keys pinned for cascades to secondary tiers."
}
family! {
    P_ADMISSION_TABLE, "kvtier_primary_admission_table_keys", Gauge, Tier,
    "Keys in the admission threshold's table of recent offers."
}
family! {
    P_ARC_LISTS, "kvtier_primary_arc_list_keys", Gauge, Tier, "list",
    "Keys in each ARC list (policy \"arc\"): t1 resident and seen once, t2 resident and reused, b1 and b2 ghosts of keys evicted from t1 and t2."
}
family! {
    P_ARC_TARGET, "kvtier_primary_arc_target_keys", Gauge, Tier,
    "ARC's adaptive target size of t1 (policy \"arc\")."
}
family! {
    P_ALLOCATION_SIZES, "kvtier_primary_allocation_size_blocks", Histogram, Tier,
    "Keys to store per prepare_store call that had any (refused calls included)."
}

// The fs tier's own.
family! {
    FS_DIRECT_IO, "kvtier_fs_direct_io", Gauge, Tier,
    "1 when the fs tier reads and writes with O_DIRECT, else 0."
}
family! {
    FS_LOOKUP_RESULTS, "kvtier_fs_lookup_results_total", Counter, Tier, "result",
    "The fs tier's answers to lookups: hit, miss, or retry (while a shared directory is checked)."
}
family! {
    FS_EXISTENCE_CHECKS, "kvtier_fs_existence_checks_total", Counter, Tier,
    "Checks on disk of keys another instance may have written into a shared directory."
}
family! {
    FS_ADOPTED, "kvtier_fs_blocks_adopted_total", Counter, Tier,
    "Blocks another instance wrote into a shared directory, taken into this tier's index."
}
family! {
    FS_STORES, "kvtier_fs_stores_total", Counter, Tier, "result",
    "Blocks the fs tier was asked to store, by result: written, already_present, skipped, rejected_full."
}
family! {
    FS_LOADS, "kvtier_fs_loads_total", Counter, Tier,
    "Blocks the fs tier loaded."
}
family! {
    FS_JOBS_FAILED, "kvtier_fs_jobs_failed_total", Counter, Tier,
    "Jobs the fs tier reported failed."
}
family! {
    FS_CORRUPT_REMOVED, "kvtier_fs_corrupt_blocks_removed_total", Counter, Tier,
    "Block files removed because they were damaged (truncated, bad header, bad checksum)."
}
family! {
    FS_UNREADABLE_DROPPED, "kvtier_fs_unreadable_blocks_dropped_total", Counter, Tier,
    "Blocks dropped from the index because they could not be read."
}
family! {
    FS_FOUND_MISSING, "kvtier_fs_blocks_found_missing_total", Counter, Tier,
    "Blocks whose file had disappeared when they were read."
}
family! {
    FS_REMOVAL_ERRORS, "kvtier_fs_removal_errors_total", Counter, Tier,
    "Block files the fs tier failed to remove."
}
family! {
    FS_IO_BYTES, "kvtier_fs_io_bytes_total", Counter, Tier, "op",
    "Bytes the fs tier read and wrote, by op."
}
family! {
    FS_IO_SECONDS, "kvtier_fs_io_seconds_total", Counter, Tier, "op",
    "Time the fs tier's workers spent reading and writing block files, by op."
}
family! {
    FS_RESTART_BLOCKS, "kvtier_fs_restart_blocks_total", Counter, Tier,
    "Blocks found in the directory when the tier opened."
}
family! {
    FS_RESTART_FILES, "kvtier_fs_restart_files_total", Counter, Tier, "action",
    "Files the opening scan did not take as blocks, by action: skipped, removed (damaged), temp_removed (unfinished writes)."
}
family! {
    FS_ERRORS, "kvtier_fs_errors_total", Counter, Tier, "cause",
    "Failed fs-tier operations, by cause."
}

// The redis tier's own.
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
    R_FAILURES, "kvtier_redis_failures_total", Counter, Tier, "cause",
    "Failed Redis operations, by cause."
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
