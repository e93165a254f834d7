"""vLLM 0.33 test items that read vLLM's private attributes (or patch
private methods of vLLM's own composition), with what they read.

These items test how vLLM's Python classes are built, not the manager
interface: kvtier's managers have no such attributes.  `run.py` lets
exactly these fail (and checks each is listed in docs/vllm.md, which
gives the same list).
"""

PRIVATE: dict[str, str] = {
    'tests/v1/kv_offload/cpu/test_manager.py::test_cpu_manager_reports_allocation_size_on_allocation_failure':
        '`_allocate_chunks` (patches this private method of the manager)',
    'tests/v1/kv_offload/cpu/test_manager.py::test_lru_batch_eviction_failure_is_atomic':
        '`_policy`',
    'tests/v1/kv_offload/cpu/test_manager.py::test_lru_repeated_pin_cycles_compact_lazy_heap_entries':
        '`_heap`, `_policy`',
    'tests/v1/kv_offload/cpu/test_manager.py::test_reset_discards_stale_request_access_classification':
        "`_policy` (ARC's `t1`, `t2`)",
    'tests/v1/kv_offload/cpu/test_manager.py::TestARCPolicy::test_basic':
        "`_policy` (ARC's `t1`, `t2`)",
    'tests/v1/kv_offload/cpu/test_manager.py::TestARCPolicy::test_t1_to_t2_promotion':
        "`_policy` (ARC's `t1`, `t2`)",
    'tests/v1/kv_offload/cpu/test_manager.py::TestARCPolicy::test_eviction_with_load':
        '',
    'tests/v1/kv_offload/cpu/test_manager.py::TestARCPolicy::test_adaptive_target':
        "`_policy` (ARC's `b1`, `target_t1_size`)",
    'tests/v1/kv_offload/cpu/test_manager.py::TestARCPolicy::test_t1_t2_eviction_policy':
        "`_policy` (ARC's `b1`, `t1`, `t2`, `target_t1_size`)",
    'tests/v1/kv_offload/cpu/test_manager.py::TestARCPolicy::test_batch_eviction_scans_t1_and_t2_once':
        "`_policy` (ARC's `t1`, `t2`, `target_t1_size`)",
    'tests/v1/kv_offload/cpu/test_manager.py::TestARCPolicy::test_batch_eviction_falls_back_after_t1_iterator_exhausted':
        "`_policy` (ARC's `t1`, `t2`, `target_t1_size`)",
    'tests/v1/kv_offload/cpu/test_manager.py::TestARCPolicy::test_store_falls_back_to_t1_when_t2_cannot_satisfy_eviction[pinned0-protected0-new_keys0-expected_evicted0]':
        "`_policy` (ARC's `b1`, `b2`, `t1`, `t2`, `target_t1_size`)",
    'tests/v1/kv_offload/cpu/test_manager.py::TestARCPolicy::test_store_falls_back_to_t1_when_t2_cannot_satisfy_eviction[pinned1-protected1-new_keys1-expected_evicted1]':
        "`_policy` (ARC's `b1`, `b2`, `t1`, `t2`, `target_t1_size`)",
    'tests/v1/kv_offload/cpu/test_manager.py::TestARCPolicy::test_store_falls_back_to_t1_when_t2_cannot_satisfy_eviction[pinned2-protected2-new_keys2-expected_evicted2]':
        "`_policy` (ARC's `b1`, `b2`, `t1`, `t2`, `target_t1_size`)",
    'tests/v1/kv_offload/cpu/test_manager.py::TestARCPolicy::test_store_falls_back_to_t1_when_t2_cannot_satisfy_eviction[pinned3-protected3-new_keys3-expected_evicted3]':
        "`_policy` (ARC's `b1`, `b2`, `t1`, `t2`, `target_t1_size`)",
    'tests/v1/kv_offload/cpu/test_manager.py::TestARCPolicy::test_store_falls_back_to_t1_when_t2_cannot_satisfy_eviction[pinned4-protected4-new_keys4-expected_evicted4]':
        "`_policy` (ARC's `b1`, `b2`, `t1`, `t2`, `target_t1_size`)",
    'tests/v1/kv_offload/cpu/test_manager.py::TestARCPolicy::test_store_falls_back_to_t1_when_t2_cannot_satisfy_eviction[pinned5-protected5-new_keys5-None]':
        "`_policy` (ARC's `b1`, `b2`, `t1`, `t2`, `target_t1_size`)",
    'tests/v1/kv_offload/cpu/test_manager.py::TestARCPolicy::test_batch_eviction_failure_is_atomic':
        "`_policy` (ARC's `b1`, `b2`, `t1`, `t2`)",
    'tests/v1/kv_offload/cpu/test_manager.py::TestARCPolicy::test_ghost_list_bounds':
        "`_policy` (ARC's `b1`, `b2`)",
    'tests/v1/kv_offload/cpu/test_manager.py::TestARCPolicy::test_touch_ordering':
        "`_policy` (ARC's `t1`, `t2`)",
    'tests/v1/kv_offload/cpu/test_manager.py::TestARCPolicy::test_failed_store':
        "`_policy` (ARC's `b1`, `t1`, `t2`)",
    'tests/v1/kv_offload/cpu/test_manager.py::TestARCPolicy::test_full_scenario':
        "`_policy` (ARC's `t1`, `t2`)",
    'tests/v1/kv_offload/cpu/test_manager.py::test_filter_reused_manager':
        '`counts`',
    'tests/v1/kv_offload/cpu/test_manager.py::test_store_threshold_does_not_hide_ready_reuse':
        '`stores_skipped_in_current_batch`',
    'tests/v1/kv_offload/cpu/test_manager.py::test_evictable_cache_chunk_count':
        '`_num_evictable_cache_chunks`, `_policy`',
    'tests/v1/kv_offload/cpu/test_manager.py::test_touch_forwards_req_context_to_policy':
        '`_policy`',
    'tests/v1/kv_offload/cpu/test_manager.py::test_arc_counts_reuse_once_and_keeps_insertions_in_t1':
        "`_policy` (ARC's `t1`, `t2`)",
    'tests/v1/kv_offload/cpu/test_manager.py::test_arc_reuse_wins_if_same_request_later_reinserts_key':
        "`_policy` (ARC's `t1`, `t2`)",
    'tests/v1/kv_offload/cpu/test_manager.py::test_request_finish_forwards_grouped_deduplicated_accesses':
        '`_policy`',
    'tests/v1/kv_offload/cpu/test_manager.py::test_failed_store_records_access_once_and_uses_store_miss_hook':
        '`_policy`, `_record_request_cache_access`',
    'tests/v1/kv_offload/cpu/test_manager.py::test_arc_ghost_hit_adapts_once_per_request_before_insertion':
        "`_policy` (ARC's `b1`, `t1`, `t2`, `target_t1_size`)",
    'tests/v1/kv_offload/cpu/test_manager.py::test_arc_pending_chunk_is_not_a_frequency_hit':
        "`_policy` (ARC's `t1`, `t2`)",
    'tests/v1/kv_offload/tiering/test_tiering_offloading.py::TestTieringOffloadingManager::test_failed_promotion_finalizes_primary_with_failure':
        '`_next_job_id`, `_register_job`, `_process_finished_jobs`; patches `complete_write` of the primary-tier object',
    'tests/v1/kv_offload/tiering/test_tiering_offloading.py::TestTieringOffloadingManager::test_successful_promotion_finalizes_primary_with_success':
        '`_next_job_id`, `_register_job`, `_process_finished_jobs`; patches `complete_write` of the primary-tier object',
    'tests/v1/kv_offload/tiering/test_tiering_offloading.py::TestTieringOffloadingManager::test_take_events_aggregates_tier_owned_events':
        "composition: patches `take_events` of the primary-tier object and expects the tiering manager to call it (kvtier's primary tier lives inside the kvtier manager)",
    'tests/v1/kv_offload/tiering/test_tiering_offloading.py::TestTieringOffloadingManager::test_ref_cnt_protection_during_cascade':
        "`primary_tier._policy` (a chunk's `ref_cnt`)",
    'tests/v1/kv_offload/tiering/test_tiering_offloading.py::TestTieringOffloadingManager::test_promotion_from_secondary[external_unspecified]':
        "`_jobs` (read inside the tier's wrapped `submit_load`)",
    'tests/v1/kv_offload/tiering/test_tiering_offloading.py::TestTieringOffloadingManager::test_promotion_from_secondary[disk]':
        "`_jobs` (read inside the tier's wrapped `submit_load`)",
    'tests/v1/kv_offload/tiering/test_tiering_offloading.py::TestTieringOffloadingManager::test_promotion_from_secondary[p2p]':
        "`_jobs` (read inside the tier's wrapped `submit_load`)",
    'tests/v1/kv_offload/tiering/test_tiering_offloading.py::TestTieringOffloadingManager::test_failed_promotion_keeps_only_successful_chunks[partial-external_unspecified]':
        '`_request_load_sources` (asked through `get_load_source` in test_public_interface.py, where it passes)',
    'tests/v1/kv_offload/tiering/test_tiering_offloading.py::TestTieringOffloadingManager::test_failed_promotion_keeps_only_successful_chunks[partial-disk]':
        '`_request_load_sources` (asked through `get_load_source` in test_public_interface.py, where it passes)',
    'tests/v1/kv_offload/tiering/test_tiering_offloading.py::TestTieringOffloadingManager::test_failed_promotion_keeps_only_successful_chunks[partial-p2p]':
        '`_request_load_sources` (asked through `get_load_source` in test_public_interface.py, where it passes)',
    'tests/v1/kv_offload/tiering/test_tiering_offloading.py::TestTieringOffloadingManager::test_failed_promotion_keeps_only_successful_chunks[legacy-full-failure-external_unspecified]':
        '`_request_load_sources` (asked through `get_load_source` in test_public_interface.py, where it passes)',
    'tests/v1/kv_offload/tiering/test_tiering_offloading.py::TestTieringOffloadingManager::test_failed_promotion_keeps_only_successful_chunks[legacy-full-failure-disk]':
        '`_request_load_sources` (asked through `get_load_source` in test_public_interface.py, where it passes)',
    'tests/v1/kv_offload/tiering/test_tiering_offloading.py::TestTieringOffloadingManager::test_failed_promotion_keeps_only_successful_chunks[legacy-full-failure-p2p]':
        '`_request_load_sources` (asked through `get_load_source` in test_public_interface.py, where it passes)',
    'tests/v1/kv_offload/tiering/test_tiering_offloading.py::TestTieringOffloadingManager::test_touch_propagates_to_all_tiers':
        '`primary_tier._policy._ranks`',
    'tests/v1/kv_offload/tiering/test_tiering_offloading.py::TestTieringOffloadingManager::test_held_promotions_keep_primary_hits':
        '`_promotions_held` (sets it)',
    'tests/v1/kv_offload/tiering/test_tiering_offloading.py::TestTieringOffloadingManager::test_on_request_finished_delays_only_secondary_until_store_submitted':
        'composition: patches `on_request_finished` of the primary-tier object and expects the tiering manager to call it',
    'tests/v1/kv_offload/tiering/test_tiering_offloading.py::TestTieringOffloadingManager::test_reset_cache_clears_pending_primary_stores_for_active_request':
        '`_req_state[...].pending_primary_stores`',
    'tests/v1/kv_offload/tiering/test_tiering_offloading.py::TestTieringOffloadingManager::test_on_new_request_lifecycle':
        '`_req_state[...].request_level_tiers`',
    'tests/v1/kv_offload/tiering/test_tiering_offloading.py::TestTieringOffloadingManager::test_cascade_rejects_retry_from_primary':
        '`_cascade_existing_chunks_to_request_level_tiers`',
    'tests/v1/kv_offload/tiering/test_tiering_offloading.py::TestTieringOffloadingManager::test_reset_cache_clears_orchestrator_state':
        '`_jobs`, `_pending_load_submissions`, `_request_load_sources`, `_processed_jobs_this_step`, `primary_tier._num_allocated_chunks`, `primary_tier._free_list`',
    'tests/v1/kv_offload/tiering/test_tiering_offloading.py::TestTieringOffloadingManager::test_reset_cache_drains_all_tiers':
        '`_jobs`',
}
