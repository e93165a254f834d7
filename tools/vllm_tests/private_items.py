"""vLLM 0.33 test items that read vLLM's private attributes (or patch
private methods of vLLM's own composition), and what becomes of each.

These items test vLLM's Python classes as built, not only the manager
interface: kvtier's managers have no such attributes, so the items fail
there.  `run.py` lets exactly these fail (and checks each is listed in
docs/vllm.md, which gives the same list).  Each value says either where
the item is restated through the public interface (`cpu/` or `tiering/`
`test_public_interface.py`, files of our own run on both sides), or why
its assertions cannot be observed publicly (it patches, spies on or
counts vLLM's internals), or why it is not restated.
"""

PRIVATE: dict[str, str] = {
    'tests/v1/kv_offload/cpu/test_manager.py::test_cpu_manager_reports_allocation_size_on_allocation_failure':
        'not observable: patches the private `_allocate_chunks` to raise; no public call makes an allocation fail',
    'tests/v1/kv_offload/cpu/test_manager.py::test_lru_batch_eviction_failure_is_atomic':
        'restated in cpu/test_public_interface.py as `test_store_that_cannot_evict_enough_evicts_nothing[lru]`',
    'tests/v1/kv_offload/cpu/test_manager.py::test_lru_repeated_pin_cycles_compact_lazy_heap_entries':
        'restated in cpu/test_public_interface.py as `test_lru_key_loaded_many_times_is_still_evicted` (the size of the private `_heap` is not observable)',
    'tests/v1/kv_offload/cpu/test_manager.py::test_reset_discards_stale_request_access_classification':
        'restated in cpu/test_public_interface.py as `test_arc_reset_forgets_the_classification_of_earlier_requests`',
    'tests/v1/kv_offload/cpu/test_manager.py::TestARCPolicy::test_basic':
        'restated in cpu/test_public_interface.py as `TestArcThroughEvictions::test_stores_then_lookups`',
    'tests/v1/kv_offload/cpu/test_manager.py::TestARCPolicy::test_t1_to_t2_promotion':
        'restated in cpu/test_public_interface.py as `TestArcThroughEvictions::test_second_access_outlives_later_single_accesses`',
    'tests/v1/kv_offload/cpu/test_manager.py::TestARCPolicy::test_eviction_with_load':
        'restated in cpu/test_public_interface.py as `TestArcThroughEvictions::test_pinned_keys_block_a_store_until_loaded`',
    'tests/v1/kv_offload/cpu/test_manager.py::TestARCPolicy::test_adaptive_target':
        'restated in cpu/test_public_interface.py as `TestArcThroughEvictions::test_ghost_hits_raise_the_recency_target`',
    'tests/v1/kv_offload/cpu/test_manager.py::TestARCPolicy::test_t1_t2_eviction_policy':
        'restated in cpu/test_public_interface.py as `TestArcThroughEvictions::test_without_ghost_hits_recency_keys_go_first` (vLLM sets `target_t1_size` by hand; here the target stays 0)',
    'tests/v1/kv_offload/cpu/test_manager.py::TestARCPolicy::test_batch_eviction_scans_t1_and_t2_once':
        "not observable: counts the entries the policy's eviction scan reads from `t1` and `t2` (wrapped in counting dicts), after setting `target_t1_size` and chunks' `ref_cnt` by hand",
    'tests/v1/kv_offload/cpu/test_manager.py::TestARCPolicy::test_batch_eviction_falls_back_after_t1_iterator_exhausted':
        "not observable: counts the entries the policy's eviction scan reads from `t1` and `t2` (wrapped in counting dicts), after setting `target_t1_size` and chunks' `ref_cnt` by hand",
    'tests/v1/kv_offload/cpu/test_manager.py::TestARCPolicy::test_store_falls_back_to_t1_when_t2_cannot_satisfy_eviction[pinned0-protected0-new_keys0-expected_evicted0]':
        'restated in cpu/test_public_interface.py as `TestArcThroughEvictions::test_store_reclaims_recency_keys_when_frequency_keys_cannot_go` (case 1 of 6) (the bound on the scan of `t1`/`t2` is not observable)',
    'tests/v1/kv_offload/cpu/test_manager.py::TestARCPolicy::test_store_falls_back_to_t1_when_t2_cannot_satisfy_eviction[pinned1-protected1-new_keys1-expected_evicted1]':
        'restated in cpu/test_public_interface.py as `TestArcThroughEvictions::test_store_reclaims_recency_keys_when_frequency_keys_cannot_go` (case 2 of 6) (the bound on the scan of `t1`/`t2` is not observable)',
    'tests/v1/kv_offload/cpu/test_manager.py::TestARCPolicy::test_store_falls_back_to_t1_when_t2_cannot_satisfy_eviction[pinned2-protected2-new_keys2-expected_evicted2]':
        'restated in cpu/test_public_interface.py as `TestArcThroughEvictions::test_store_reclaims_recency_keys_when_frequency_keys_cannot_go` (case 3 of 6) (the bound on the scan of `t1`/`t2` is not observable)',
    'tests/v1/kv_offload/cpu/test_manager.py::TestARCPolicy::test_store_falls_back_to_t1_when_t2_cannot_satisfy_eviction[pinned3-protected3-new_keys3-expected_evicted3]':
        'restated in cpu/test_public_interface.py as `TestArcThroughEvictions::test_store_reclaims_recency_keys_when_frequency_keys_cannot_go` (case 4 of 6) (the bound on the scan of `t1`/`t2` is not observable)',
    'tests/v1/kv_offload/cpu/test_manager.py::TestARCPolicy::test_store_falls_back_to_t1_when_t2_cannot_satisfy_eviction[pinned4-protected4-new_keys4-expected_evicted4]':
        'restated in cpu/test_public_interface.py as `TestArcThroughEvictions::test_store_reclaims_recency_keys_when_frequency_keys_cannot_go` (case 5 of 6) (the bound on the scan of `t1`/`t2` is not observable)',
    'tests/v1/kv_offload/cpu/test_manager.py::TestARCPolicy::test_store_falls_back_to_t1_when_t2_cannot_satisfy_eviction[pinned5-protected5-new_keys5-None]':
        'restated in cpu/test_public_interface.py as `TestArcThroughEvictions::test_store_reclaims_recency_keys_when_frequency_keys_cannot_go` (case 6 of 6) (the bound on the scan of `t1`/`t2` is not observable)',
    'tests/v1/kv_offload/cpu/test_manager.py::TestARCPolicy::test_batch_eviction_failure_is_atomic':
        'restated in cpu/test_public_interface.py as `test_store_that_cannot_evict_enough_evicts_nothing[arc]`',
    'tests/v1/kv_offload/cpu/test_manager.py::TestARCPolicy::test_ghost_list_bounds':
        'not observable: the length of the ghost lists `b1` and `b2` (a memory bound); no answer of the manager depends on a ghost entry beyond the capacity',
    'tests/v1/kv_offload/cpu/test_manager.py::TestARCPolicy::test_touch_ordering':
        'restated in cpu/test_public_interface.py as `TestArcThroughEvictions::test_touch_reorders_and_promotes`',
    'tests/v1/kv_offload/cpu/test_manager.py::TestARCPolicy::test_failed_store':
        'restated in cpu/test_public_interface.py as `TestArcThroughEvictions::test_failed_store_leaves_no_entry`',
    'tests/v1/kv_offload/cpu/test_manager.py::TestARCPolicy::test_full_scenario':
        'restated in cpu/test_public_interface.py as `TestArcThroughEvictions::test_mixed_sequence`',
    'tests/v1/kv_offload/cpu/test_manager.py::test_filter_reused_manager':
        'restated in cpu/test_public_interface.py as `test_reuse_filter_counts_offers_not_lookups`',
    'tests/v1/kv_offload/cpu/test_manager.py::test_store_threshold_does_not_hide_ready_reuse':
        'restated in cpu/test_public_interface.py as `test_reuse_below_the_threshold_refreshes_a_resident_key`',
    'tests/v1/kv_offload/cpu/test_manager.py::test_evictable_cache_chunk_count':
        "restated in cpu/test_public_interface.py as `test_pins_and_failures_bound_what_a_store_can_take` (the spy on the policy's `evict` is not observable)",
    'tests/v1/kv_offload/cpu/test_manager.py::test_touch_forwards_req_context_to_policy':
        "not observable: replaces the policy's `touch` with a spy and checks the arguments it receives",
    'tests/v1/kv_offload/cpu/test_manager.py::test_arc_counts_reuse_once_and_keeps_insertions_in_t1':
        'restated in cpu/test_public_interface.py as `test_arc_own_offers_and_reads_are_not_reuse` and `test_arc_another_requests_reads_are_one_reuse`',
    'tests/v1/kv_offload/cpu/test_manager.py::test_arc_reuse_wins_if_same_request_later_reinserts_key':
        'not restated: with one chunk no later store can tell `t1` from `t2`, and a pinned filler chunk (the way to a second chunk) is older than the key in either list',
    'tests/v1/kv_offload/cpu/test_manager.py::test_request_finish_forwards_grouped_deduplicated_accesses':
        "not observable: replaces the policy's `on_request_finished` hook with a spy and checks the grouped accesses it receives",
    'tests/v1/kv_offload/cpu/test_manager.py::test_failed_store_records_access_once_and_uses_store_miss_hook':
        "not observable: counts calls of the private `_record_request_cache_access` and spies on the policy's `on_store_miss` and `on_request_finished` hooks",
    'tests/v1/kv_offload/cpu/test_manager.py::test_arc_ghost_hit_adapts_once_per_request_before_insertion':
        "not restated: asserts `target_t1_size` rose once (not twice) over two refused offers of one request; through evictions a target of 1 and of 2 differ only with more frequency keys than the case's two chunks hold",
    'tests/v1/kv_offload/cpu/test_manager.py::test_arc_pending_chunk_is_not_a_frequency_hit':
        'restated in cpu/test_public_interface.py as `test_arc_key_being_written_is_not_a_frequency_hit`',
    'tests/v1/kv_offload/tiering/test_tiering_offloading.py::TestTieringOffloadingManager::test_failed_promotion_finalizes_primary_with_failure':
        'restated in tiering/test_public_interface.py as `test_promotion_result_decides_the_primary_slots[failure]`',
    'tests/v1/kv_offload/tiering/test_tiering_offloading.py::TestTieringOffloadingManager::test_successful_promotion_finalizes_primary_with_success':
        'restated in tiering/test_public_interface.py as `test_promotion_result_decides_the_primary_slots[success]`',
    'tests/v1/kv_offload/tiering/test_tiering_offloading.py::TestTieringOffloadingManager::test_take_events_aggregates_tier_owned_events':
        'restated in tiering/test_public_interface.py as `test_tier_events_follow_the_primary_tiers` (vLLM replaces the primary tier\'s private `take_events`)',
    'tests/v1/kv_offload/tiering/test_tiering_offloading.py::TestTieringOffloadingManager::test_ref_cnt_protection_during_cascade':
        "restated in tiering/test_public_interface.py as `test_cascade_pins_primary_keys_until_the_tiers_finish` (with tiers whose copies stay outstanding: vLLM's `prepare_store` reads finished jobs first, so with the example tier no store sees the pins)",
    'tests/v1/kv_offload/tiering/test_tiering_offloading.py::TestTieringOffloadingManager::test_promotion_from_secondary[external_unspecified]':
        'restated in tiering/test_public_interface.py as `test_promotion_serves_its_request_from_the_tier[external_unspecified]`',
    'tests/v1/kv_offload/tiering/test_tiering_offloading.py::TestTieringOffloadingManager::test_promotion_from_secondary[disk]':
        'restated in tiering/test_public_interface.py as `test_promotion_serves_its_request_from_the_tier[disk]`',
    'tests/v1/kv_offload/tiering/test_tiering_offloading.py::TestTieringOffloadingManager::test_promotion_from_secondary[p2p]':
        'restated in tiering/test_public_interface.py as `test_promotion_serves_its_request_from_the_tier[p2p]`',
    'tests/v1/kv_offload/tiering/test_tiering_offloading.py::TestTieringOffloadingManager::test_failed_promotion_keeps_only_successful_chunks[partial-external_unspecified]':
        'restated in tiering/test_public_interface.py as `test_failed_promotion_keeps_only_successful_chunks` (`get_load_source` key by key for the private `_request_load_sources`)',
    'tests/v1/kv_offload/tiering/test_tiering_offloading.py::TestTieringOffloadingManager::test_failed_promotion_keeps_only_successful_chunks[partial-disk]':
        'restated in tiering/test_public_interface.py as `test_failed_promotion_keeps_only_successful_chunks` (`get_load_source` key by key for the private `_request_load_sources`)',
    'tests/v1/kv_offload/tiering/test_tiering_offloading.py::TestTieringOffloadingManager::test_failed_promotion_keeps_only_successful_chunks[partial-p2p]':
        'restated in tiering/test_public_interface.py as `test_failed_promotion_keeps_only_successful_chunks` (`get_load_source` key by key for the private `_request_load_sources`)',
    'tests/v1/kv_offload/tiering/test_tiering_offloading.py::TestTieringOffloadingManager::test_failed_promotion_keeps_only_successful_chunks[legacy-full-failure-external_unspecified]':
        'restated in tiering/test_public_interface.py as `test_failed_promotion_keeps_only_successful_chunks` (`get_load_source` key by key for the private `_request_load_sources`)',
    'tests/v1/kv_offload/tiering/test_tiering_offloading.py::TestTieringOffloadingManager::test_failed_promotion_keeps_only_successful_chunks[legacy-full-failure-disk]':
        'restated in tiering/test_public_interface.py as `test_failed_promotion_keeps_only_successful_chunks` (`get_load_source` key by key for the private `_request_load_sources`)',
    'tests/v1/kv_offload/tiering/test_tiering_offloading.py::TestTieringOffloadingManager::test_failed_promotion_keeps_only_successful_chunks[legacy-full-failure-p2p]':
        'restated in tiering/test_public_interface.py as `test_failed_promotion_keeps_only_successful_chunks` (`get_load_source` key by key for the private `_request_load_sources`)',
    'tests/v1/kv_offload/tiering/test_tiering_offloading.py::TestTieringOffloadingManager::test_touch_propagates_to_all_tiers':
        'restated in tiering/test_public_interface.py as `test_touch_reaches_every_tier_and_renews_the_primary_keys`',
    'tests/v1/kv_offload/tiering/test_tiering_offloading.py::TestTieringOffloadingManager::test_held_promotions_keep_primary_hits':
        'restated in tiering/test_public_interface.py as `test_promotions_held_after_a_reset_leave_primary_hits` (held by a reset, not by setting `_promotions_held`)',
    'tests/v1/kv_offload/tiering/test_tiering_offloading.py::TestTieringOffloadingManager::test_on_request_finished_delays_only_secondary_until_store_submitted':
        "restated in tiering/test_public_interface.py as `test_tiers_hear_of_a_finish_after_its_stores_reach_them` (the primary-tier object's `on_request_finished`, patched, is composition: kvtier's primary tier lives inside the kvtier manager)",
    'tests/v1/kv_offload/tiering/test_tiering_offloading.py::TestTieringOffloadingManager::test_reset_cache_clears_pending_primary_stores_for_active_request':
        'restated in tiering/test_public_interface.py as `test_reset_forgets_a_requests_pending_store`',
    'tests/v1/kv_offload/tiering/test_tiering_offloading.py::TestTieringOffloadingManager::test_on_new_request_lifecycle':
        'restated in tiering/test_public_interface.py as `test_request_policy_follows_the_tiers`',
    'tests/v1/kv_offload/tiering/test_tiering_offloading.py::TestTieringOffloadingManager::test_cascade_rejects_retry_from_primary':
        'not observable: calls the private `_cascade_existing_chunks_to_request_level_tiers` after forcing the primary tier to answer RETRY, which no primary tier answers',
    'tests/v1/kv_offload/tiering/test_tiering_offloading.py::TestTieringOffloadingManager::test_reset_cache_clears_orchestrator_state':
        'restated in tiering/test_public_interface.py as `test_reset_drops_unsubmitted_promotions_and_empties_the_primary`',
    'tests/v1/kv_offload/tiering/test_tiering_offloading.py::TestTieringOffloadingManager::test_reset_cache_drains_all_tiers':
        'restated in tiering/test_public_interface.py as `test_reset_drops_unsubmitted_promotions_and_empties_the_primary`',
}
