//! vLLM 0.33.0's own tests of the position, rank and finish rules
//! (`tests/v1/kv_offload/cpu/test_manager.py`) re-expressed through this
//! tier's public interface, each naming the vLLM test it mirrors.

use super::*;

/// Mirrors vLLM's `test_request_finish_orders_lru_prefix_independent_of_store_completion`.
#[test]
fn a_finish_makes_the_head_most_recent_whenever_the_stores_complete() {
    for finish_first in [false, true] {
        let mut t = lru(4);
        t.request_begin(R).unwrap();
        let prefix = ks(&[1, 2, 3, 4]);
        let plan = offer(&mut t, R, &prefix).unwrap();
        if finish_first {
            t.request_finished(R).unwrap();
        }
        // Completion order reversed on purpose.
        let mut done = plan.to_store.clone();
        done.reverse();
        t.complete_store(R, &done, true);
        if !finish_first {
            t.request_finished(R).unwrap();
        }
        put_new(&mut t, S, &ks(&[5]));
        assert_eq!(t.stats().evictions, 1);
        assert_eq!(t.lookup(&k(4)), PrimaryLookup::Miss, "tail evicted");
    }
}

/// Mirrors vLLM's `test_request_finish_orders_lru_prefix_independent_of_load_completion`.
#[test]
fn a_finish_makes_the_head_most_recent_whenever_the_loads_complete() {
    for finish_first in [false, true] {
        let mut t = lru(4);
        let prefix = ks(&[1, 2, 3, 4]);
        put_new(&mut t, R, &prefix);
        t.request_begin(S).unwrap();
        pin(&mut t, S, &prefix);
        if finish_first {
            t.request_finished(S).unwrap();
        }
        t.complete_load(if finish_first { R } else { S }, &ks(&[4, 3, 2, 1]))
            .unwrap();
        if !finish_first {
            t.request_finished(S).unwrap();
        }
        let plan = put_new(&mut t, RequestId(3), &ks(&[5]));
        assert_eq!(plan.evicted, ks(&[4]));
    }
}

/// Mirrors vLLM's `test_late_old_completion_does_not_override_newer_request_recency`.
#[test]
fn a_late_completion_does_not_make_an_old_request_recent() {
    let mut t = lru(4);
    t.request_begin(R).unwrap();
    let old = offer(&mut t, R, &ks(&[1, 2])).unwrap();
    t.request_finished(R).unwrap();
    put_new(&mut t, S, &ks(&[3, 4]));
    t.request_finished(S).unwrap();
    t.complete_store(R, &old.to_store, true);
    let plan = put_new(&mut t, RequestId(3), &ks(&[5]));
    assert_eq!(plan.evicted, ks(&[2]));
}

/// Mirrors vLLM's `test_arc_counts_reuse_once_and_keeps_insertions_in_t1`.
#[test]
fn arc_counts_a_reuse_once_and_keeps_a_requests_own_insertions_in_t1() {
    let mut t = tier(4, PolicyKind::Arc);
    let prefix = ks(&[1, 2, 3, 4]);
    put_new(&mut t, R, &prefix);
    // Offering its own keys again, or reading them back (as a cascade
    // does), is no reuse for the request that stored them.
    offer(&mut t, R, &prefix).unwrap();
    pin(&mut t, R, &prefix);
    t.complete_load(R, &prefix).unwrap();
    t.request_finished(R).unwrap();
    assert_eq!((t.stats().arc_t1, t.stats().arc_t2), (4, 0));
    assert_eq!(t.eviction_order(), ks(&[4, 3, 2, 1]));
    t.request_begin(S).unwrap();
    for _ in 0..2 {
        pin(&mut t, S, &prefix);
        t.complete_load(S, &prefix).unwrap();
    }
    t.request_finished(S).unwrap();
    assert_eq!((t.stats().arc_t1, t.stats().arc_t2), (0, 4));
    assert_eq!(t.eviction_order(), ks(&[4, 3, 2, 1]));
}

/// Mirrors vLLM's `test_arc_reuse_wins_if_same_request_later_reinserts_key`.
#[test]
fn arc_a_reuse_counts_even_if_the_request_later_stores_the_key_again() {
    let mut t = tier(1, PolicyKind::Arc);
    put_new(&mut t, RequestId(5), &ks(&[1]));
    t.request_finished(RequestId(5)).unwrap();
    t.request_begin(R).unwrap();
    pin(&mut t, R, &ks(&[1]));
    t.complete_load(R, &ks(&[1])).unwrap();
    put_new(&mut t, S, &ks(&[2])); // evicts 1
    t.request_finished(S).unwrap();
    put(&mut t, R, &ks(&[1])); // evicts 2
    t.request_finished(R).unwrap();
    assert_eq!((t.stats().arc_t1, t.stats().arc_t2), (0, 1));
    assert_eq!(t.eviction_order(), ks(&[1]));
}

/// Mirrors vLLM's `test_request_finish_forwards_grouped_deduplicated_accesses`
/// (there a spy on the policy; here the order and lists the finish leaves).
#[test]
fn a_finish_commits_each_key_once_group_by_group() {
    for p in BOTH {
        let mut t = grouped(5, p);
        let existing = gk("existing", 0);
        let g0_new = gk("group-0-new", 0);
        let g1_head = gk("group-1-head", 1);
        let g1_tail = gk("group-1-tail", 1);
        put_new(&mut t, S, &[existing]);
        t.request_finished(S).unwrap();
        t.request_begin(R).unwrap();
        // Group 1 first presented, but the finish goes by group index.
        offer(&mut t, R, &[g1_head, existing, g0_new]).unwrap();
        offer(&mut t, R, &[g0_new, g1_head, g1_tail]).unwrap();
        t.complete_store(R, &[g1_head, g0_new, g1_tail], true);
        t.request_finished(R).unwrap();
        assert!(t.request_finished(R).is_err(), "finished once");
        match p {
            // Head (existing, then group 0's new key) most recent.
            PolicyKind::Lru => {
                assert_eq!(t.eviction_order(), vec![g1_tail, g1_head, g0_new, existing])
            }
            // existing reused: T2; the others only inserted: T1.
            PolicyKind::Arc => {
                assert_eq!((t.stats().arc_t1, t.stats().arc_t2), (3, 1));
                assert_eq!(t.eviction_order(), vec![g1_tail, g1_head, g0_new, existing]);
            }
        }
        t.check_invariants().unwrap();
    }
}

/// Mirrors vLLM's `test_failed_store_records_access_once_and_uses_store_miss_hook`:
/// a refused store records its candidate and its ready key, once, in
/// call order; the ready key counts as reused at the finish.
#[test]
fn a_refused_store_records_the_candidate_and_the_ready_key_once() {
    let mut t = tier(1, PolicyKind::Arc);
    put_new(&mut t, S, &ks(&[1]));
    t.request_finished(S).unwrap();
    t.request_begin(RequestId(3)).unwrap();
    pin(&mut t, RequestId(3), &ks(&[1]));
    t.request_begin(R).unwrap();
    assert!(offer(&mut t, R, &ks(&[2, 1])).is_none());
    let a: Vec<(Key, bool, bool)> = t.requests[&R]
        .accesses
        .iter()
        .map(|a| (a.key, a.reused, a.inserted))
        .collect();
    assert_eq!(a, vec![(k(2), false, false), (k(1), true, false)]);
    t.request_finished(R).unwrap();
    assert_eq!((t.stats().arc_t1, t.stats().arc_t2), (0, 1));
    t.complete_load(RequestId(3), &ks(&[1])).unwrap();
}

/// Mirrors vLLM's `test_arc_pending_chunk_is_not_a_frequency_hit`.
#[test]
fn arc_a_write_pending_key_offered_again_is_no_reuse() {
    let mut t = tier(2, PolicyKind::Arc);
    t.request_begin(R).unwrap();
    offer(&mut t, R, &ks(&[1])).unwrap();
    t.request_begin(S).unwrap();
    let plan = offer(&mut t, S, &ks(&[1])).unwrap();
    assert!(plan.to_store.is_empty());
    t.request_finished(S).unwrap();
    assert_eq!(t.lookup(&k(1)), PrimaryLookup::HitPending);
    assert_eq!((t.stats().arc_t1, t.stats().arc_t2), (1, 0));
}

/// Mirrors vLLM's `test_reset_discards_stale_request_access_classification`.
#[test]
fn arc_a_reset_forgets_what_an_active_request_inserted() {
    let mut t = tier(1, PolicyKind::Arc);
    put_new(&mut t, R, &ks(&[1]));
    t.reset();
    put_new(&mut t, S, &ks(&[1]));
    t.request_finished(S).unwrap();
    assert_eq!((t.stats().arc_t1, t.stats().arc_t2), (1, 0));
    // R inserted 1 before the reset: after it, R's load is a reuse.
    pin(&mut t, R, &ks(&[1]));
    t.complete_load(R, &ks(&[1])).unwrap();
    t.request_finished(R).unwrap();
    assert_eq!((t.stats().arc_t1, t.stats().arc_t2), (0, 1));
}

/// Mirrors vLLM's `test_request_key_positions_override_store_observation_order`.
#[test]
fn positions_order_the_finish_whatever_order_the_keys_were_stored_in() {
    let mut t = lru(2);
    t.request_begin(R).unwrap();
    let (head, tail) = (k(1), k(2));
    t.set_positions(R, &[head, tail], &[16, 32]).unwrap();
    let a = offer(&mut t, R, &[tail]).unwrap();
    let b = offer(&mut t, R, &[head]).unwrap();
    t.request_finished(R).unwrap();
    t.complete_store(R, &[b.to_store, a.to_store].concat(), true);
    let plan = put_new(&mut t, S, &ks(&[3]));
    assert_eq!(plan.evicted, vec![tail]);
}

/// Mirrors vLLM's `test_request_key_positions_order_tails_across_kv_groups`.
#[test]
fn positions_evict_the_tails_of_every_group_first() {
    let mut t = grouped(4, PolicyKind::Lru);
    let (h0, t0, h1, t1) = (
        gk("group-0-head", 0),
        gk("group-0-tail", 0),
        gk("group-1-head", 1),
        gk("group-1-tail", 1),
    );
    t.request_begin(R).unwrap();
    t.set_positions(R, &[h0, h1, t0, t1], &[16, 16, 32, 32])
        .unwrap();
    put(&mut t, R, &[h0, t0, h1, t1]);
    t.request_finished(R).unwrap();
    let mut plan = StorePlan::default();
    t.request_begin(S).unwrap();
    t.prepare_store(S, &[gk("x", 0), gk("y", 0)], &mut plan)
        .unwrap();
    let mut evicted = plan.evicted.clone();
    evicted.sort_by(|a, b| a.as_bytes().cmp(b.as_bytes()));
    assert_eq!(evicted, vec![t0, t1]);
}

/// Mirrors vLLM's `test_unfinished_lru_prefix_survives_pressure_across_store_batches`.
#[test]
fn an_unfinished_prefix_survives_pressure_across_store_batches() {
    for batch in 1..=3usize {
        for reverse_completion in [false, true] {
            let mut t = grouped(8, PolicyKind::Lru);
            t.request_begin(R).unwrap();
            let groups: Vec<Vec<Key>> = (0..2)
                .map(|g| (0..3).map(|p| gk(&p.to_string(), g)).collect())
                .collect();
            let mut batches = Vec::new();
            for start in (0..3).step_by(batch) {
                let end = (start + batch).min(3);
                let keys: Vec<Key> = groups.iter().flat_map(|g| g[start..end].to_vec()).collect();
                for g in &groups {
                    let pos: Vec<u64> = (start..end).map(|p| (p as u64 + 1) * 16).collect();
                    t.set_positions(R, &g[start..end], &pos).unwrap();
                }
                let plan = offer(&mut t, R, &keys).unwrap();
                if !reverse_completion {
                    t.complete_store(R, &plan.to_store, true);
                }
                batches.push(plan.to_store);
            }
            if reverse_completion {
                for b in batches.iter().rev() {
                    t.complete_store(R, b, true);
                }
            }
            t.request_begin(S).unwrap();
            let fresh: Vec<Key> = (10..14).map(|i| gk(&i.to_string(), 0)).collect();
            let plan = offer(&mut t, S, &fresh).unwrap();
            let mut evicted = plan.evicted.clone();
            evicted.sort_by(|a, b| a.as_bytes().cmp(b.as_bytes()));
            assert_eq!(evicted, vec![groups[0][2], groups[1][2]], "batch {batch}");
            for g in &groups {
                for key in &g[..2] {
                    assert_eq!(t.lookup(key), PrimaryLookup::Hit);
                }
            }
            t.check_invariants().unwrap();
        }
    }
}

/// Mirrors vLLM's `test_unfinished_lru_reused_prefix_outlives_new_tail`.
#[test]
fn an_unfinished_reused_prefix_outlives_the_new_tail() {
    for by_load in [true, false] {
        let mut t = lru(4);
        let (head, middle, tail) = (k(1), k(2), k(3));
        put_new(&mut t, S, &[head, middle]);
        t.request_finished(S).unwrap();
        t.request_begin(R).unwrap();
        blocks(&mut t, R, &[head, middle, tail]);
        if by_load {
            pin(&mut t, R, &[head, middle]);
            t.complete_load(R, &[middle, head]).unwrap();
        } else {
            offer(&mut t, R, &[head, middle]).unwrap();
        }
        put(&mut t, R, &[tail]);
        let plan = put_new(&mut t, RequestId(3), &ks(&[10, 11, 12]));
        let mut evicted = plan.evicted.clone();
        evicted.sort_by(|a, b| a.as_bytes().cmp(b.as_bytes()));
        assert_eq!(evicted, vec![middle, tail]);
        assert_eq!(t.lookup(&head), PrimaryLookup::Hit);
    }
}

/// Mirrors vLLM's `test_unfinished_lru_backfill_orders_by_token_position`.
#[test]
fn an_unfinished_backfill_orders_by_token_position() {
    let mut t = lru(3);
    t.request_begin(R).unwrap();
    let (head, middle, tail) = (k(1), k(2), k(3));
    blocks(&mut t, R, &[head, middle, tail]);
    for key in [head, tail, middle] {
        put(&mut t, R, &[key]);
    }
    let plan = put_new(&mut t, S, &ks(&[4]));
    assert_eq!(plan.evicted, vec![tail]);
}

/// Mirrors vLLM's `test_lru_failed_store_retry_preserves_prefix_order`.
#[test]
fn a_retried_store_keeps_the_prefix_order() {
    let mut t = lru(2);
    t.request_begin(R).unwrap();
    let (head, tail) = (k(1), k(2));
    t.set_positions(R, &[head, tail], &[16, 32]).unwrap();
    offer(&mut t, R, &[head]).unwrap();
    t.complete_store(R, &[head], false);
    for key in [head, tail] {
        put(&mut t, R, &[key]);
    }
    let plan = put_new(&mut t, S, &ks(&[3]));
    assert_eq!(plan.evicted, vec![tail]);
}

/// Mirrors vLLM's `test_lru_reset_discards_unfinished_request_recency`.
#[test]
fn a_reset_discards_the_rank_of_an_unfinished_request() {
    let mut t = lru(2);
    t.request_begin(R).unwrap();
    let head = k(1);
    t.set_positions(R, &[head], &[16]).unwrap();
    put(&mut t, R, &[head]);
    t.reset();
    t.request_begin(S).unwrap();
    let other = k(9);
    t.set_positions(S, &[other], &[16]).unwrap();
    put(&mut t, S, &[other]);
    put(&mut t, R, &[head]);
    let plan = put_new(&mut t, RequestId(3), &ks(&[10]));
    assert_eq!(plan.evicted, vec![other]);
}

/// Mirrors vLLM's `test_older_lru_request_does_not_demote_a_newer_shared_access`.
#[test]
fn an_older_request_does_not_demote_a_newer_shared_access() {
    let mut t = lru(3);
    let (old, cold, newer) = (RequestId(1), RequestId(2), RequestId(3));
    let (pinned, cold_key, shared) = (k(1), k(2), k(3));
    for (req, key, p) in [(old, pinned, 16), (cold, cold_key, 16), (newer, shared, 32)] {
        t.request_begin(req).unwrap();
        t.set_positions(req, &[key], &[p]).unwrap();
        put(&mut t, req, &[key]);
    }
    pin(&mut t, old, &[pinned]);
    t.set_positions(old, &[shared], &[32]).unwrap();
    pin(&mut t, old, &[shared]);
    t.complete_load(old, &[shared]).unwrap();
    let plan = put_new(&mut t, RequestId(4), &ks(&[4]));
    assert_eq!(plan.evicted, vec![cold_key]);
    t.complete_load(old, &[pinned]).unwrap();
}

/// Mirrors vLLM's `test_lru_insert_orders_positioned_chunks_without_followup_access`
/// (there on the policy alone; here through stores, completed at once or
/// only after every store).
#[test]
fn stores_alone_order_positioned_keys_including_backfills() {
    for complete_at_once in [true, false] {
        let mut t = lru(3);
        t.request_begin(R).unwrap();
        let (head, middle, tail) = (k(1), k(2), k(3));
        blocks(&mut t, R, &[head, middle, tail]);
        for key in [head, tail, middle] {
            offer(&mut t, R, &[key]).unwrap();
            if complete_at_once {
                t.complete_store(R, &[key], true);
            }
        }
        if !complete_at_once {
            t.complete_store(R, &[head, middle, tail], true);
        }
        t.request_begin(S).unwrap();
        let plan = offer(&mut t, S, &ks(&[4, 5])).unwrap();
        assert_eq!(plan.evicted, vec![tail, middle]);
        assert_eq!(t.lookup(&head), PrimaryLookup::Hit);
    }
}
