//! Unit tests of the eviction policies (lru, arc) and of the admission
//! threshold.

use super::*;

// ---- lru [0.33] ----

#[test]
fn lru_new_keys_are_most_recent_in_batch_order() {
    let mut t = tier(8, PolicyKind::Lru);
    t.request_begin(R).unwrap();
    store(&mut t, R, &[1, 2, 3]);
    store(&mut t, R, &[4]);
    assert_eq!(order(&t), ks(&[1, 2, 3, 4]));
}

#[test]
fn lru_touch_reverses_the_batch_so_the_head_is_most_recent() {
    let mut t = tier(8, PolicyKind::Lru);
    t.request_begin(R).unwrap();
    store(&mut t, R, &[1, 2, 3, 4]);
    t.touch(R, &ks(&[1, 2, 9])).unwrap();
    assert_eq!(order(&t), ks(&[3, 4, 2, 1]));
}

#[test]
fn lru_pinned_keys_keep_their_recency_and_touching_them_counts() {
    let mut t = tier(3, PolicyKind::Lru);
    t.request_begin(R).unwrap();
    store(&mut t, R, &[1, 2, 3]);
    let mut slots = Vec::new();
    t.prepare_load(R, &ks(&[1]), &mut slots).unwrap();
    t.complete_load(R, &ks(&[1])).unwrap();
    // 1 became idle again at its old recency: it is evicted first.
    let plan = store(&mut t, R, &[4]);
    assert_eq!(plan.evicted, ks(&[1]));
    // touching a pinned key counts
    t.prepare_load(R, &ks(&[2]), &mut slots).unwrap();
    t.touch(R, &ks(&[2])).unwrap();
    t.complete_load(R, &ks(&[2])).unwrap();
    let plan = store(&mut t, R, &[5]);
    assert_eq!(plan.evicted, ks(&[3]));
}

#[test]
fn lru_request_finish_commits_accesses_head_most_recent() {
    let mut t = tier(8, PolicyKind::Lru);
    t.request_begin(R).unwrap();
    store(&mut t, R, &[1, 2, 3]);
    assert_eq!(order(&t), ks(&[1, 2, 3]));
    t.request_finished(R).unwrap();
    assert_eq!(order(&t), ks(&[3, 2, 1]));
    let q = RequestId(2);
    t.request_begin(q).unwrap();
    store(&mut t, q, &[4, 5]);
    // q presents 2 (ready, reused) then 4, 5 were stored: head order 4, 5, 2, 6
    let mut slots = Vec::new();
    t.prepare_load(q, &ks(&[2]), &mut slots).unwrap();
    t.complete_load(q, &ks(&[2])).unwrap();
    store(&mut t, q, &[6]);
    assert_eq!(order(&t), ks(&[3, 2, 1, 4, 5, 6]));
    t.request_finished(q).unwrap();
    assert_eq!(order(&t), ks(&[3, 1, 6, 2, 5, 4]));
}

#[test]
fn lru_write_pending_and_pinned_keys_are_skipped_by_eviction() {
    let mut t = tier(3, PolicyKind::Lru);
    t.request_begin(R).unwrap();
    let mut plan = StorePlan::default();
    t.prepare_store(R, &ks(&[1]), &mut plan).unwrap();
    store(&mut t, R, &[2, 3]);
    let mut slots = Vec::new();
    t.prepare_load(R, &ks(&[2]), &mut slots).unwrap();
    let plan = store(&mut t, R, &[4]);
    assert_eq!(plan.evicted, ks(&[3]));
}

// ---- arc ----

#[test]
fn arc_new_keys_enter_t1_and_touch_moves_ready_ones_to_t2() {
    let mut t = tier(8, PolicyKind::Arc);
    t.request_begin(R).unwrap();
    store(&mut t, R, &[1, 2]);
    let mut plan = StorePlan::default();
    t.prepare_store(R, &ks(&[3]), &mut plan).unwrap(); // write pending
    assert_eq!(arc_stats(&t), (3, 0, 0, 0, 0.0));
    t.touch(R, &ks(&[1, 3])).unwrap();
    // 1 ready -> T2; 3 write pending -> refreshed within T1 (most recent)
    assert_eq!(arc_stats(&t), (2, 1, 0, 0, 0.0));
    assert_eq!(order(&t), ks(&[2, 3, 1]));
    t.touch(R, &ks(&[1])).unwrap();
    assert_eq!(arc_stats(&t).1, 1, "touching a T2 key refreshes it");
}

#[test]
fn arc_evicts_t1_at_or_above_target_into_b1_and_ghost_touch_adapts() {
    let mut t = tier(2, PolicyKind::Arc);
    t.request_begin(R).unwrap();
    store(&mut t, R, &[1, 2]);
    t.touch(R, &ks(&[2])).unwrap(); // T1=[1], T2=[2]
    let plan = store(&mut t, R, &[3]); // |T1|=1 >= target 0: evict 1 -> B1
    assert_eq!(plan.evicted, ks(&[1]));
    assert_eq!(arc_stats(&t), (1, 1, 1, 0, 0.0));
    t.touch(R, &ks(&[1])).unwrap(); // B1 hit: target += max(1, 0/1) = 1
    assert_eq!(arc_stats(&t).4, 1.0);
    // |T1| = 1 >= 1: T1 again (3 -> B1)
    let plan = store(&mut t, R, &[4]);
    assert_eq!(plan.evicted, ks(&[3]));
    t.touch(R, &ks(&[1, 3])).unwrap(); // two B1 hits: target capped at 2
    assert_eq!(arc_stats(&t).4, 2.0);
    // |T1| = 1 < 2: evict from T2 (2 -> B2)
    let plan = store(&mut t, R, &[5]);
    assert_eq!(plan.evicted, ks(&[2]));
    assert_eq!(arc_stats(&t), (2, 0, 2, 1, 2.0));
    t.touch(R, &ks(&[2])).unwrap(); // B2 hit: target -= max(1, 2/1) = 2
    assert_eq!(arc_stats(&t).4, 0.0);
    t.check_invariants().unwrap();
}

#[test]
fn arc_compares_with_the_truncated_target_and_falls_back_to_the_other_list() {
    let mut t = tier(4, PolicyKind::Arc);
    t.request_begin(R).unwrap();
    store(&mut t, R, &[1, 2, 3, 4]);
    t.touch(R, &ks(&[3, 4])).unwrap(); // T1=[1,2] T2=[4,3]
    store(&mut t, R, &[5]); // evicts 1 -> B1; T1=[2,5]
    store(&mut t, R, &[6]); // evicts 2 -> B1; T1=[5,6]
    t.touch(R, &ks(&[5, 6])).unwrap(); // T1=[], T2=[4,3,6,5]
    store(&mut t, R, &[7]); // |T1|=0 >= 0: T1 has nothing, falls back to T2: 4 -> B2
    assert_eq!(arc_stats(&t), (1, 3, 2, 1, 0.0));
    // B2 hits shrink, B1 hits grow by max(1, |B2|/|B1|) = max(1, 0.5) = 1
    t.touch(R, &ks(&[1])).unwrap();
    assert_eq!(arc_stats(&t).4, 1.0);
    t.touch(R, &ks(&[4])).unwrap(); // B2: -max(1, 2/1) -> 0 (floored)
    assert_eq!(arc_stats(&t).4, 0.0);
    t.check_invariants().unwrap();
}

#[test]
fn arc_store_offer_of_a_ghost_adapts_once_per_request_and_key_even_when_refused() {
    let mut t = tier(2, PolicyKind::Arc);
    t.request_begin(R).unwrap();
    store(&mut t, R, &[1, 2]);
    store(&mut t, R, &[3]); // 1 -> B1
    assert_eq!(arc_stats(&t), (2, 0, 1, 0, 0.0));
    let q = RequestId(2);
    t.request_begin(q).unwrap();
    let mut slots = Vec::new();
    t.prepare_load(q, &ks(&[2, 3]), &mut slots).unwrap(); // nothing evictable
    let mut plan = StorePlan::default();
    assert_eq!(
        t.prepare_store(q, &ks(&[1]), &mut plan).unwrap(),
        StoreOutcome::Refused
    );
    assert_eq!(arc_stats(&t).4, 1.0, "adapted although refused");
    assert_eq!(
        t.prepare_store(q, &ks(&[1]), &mut plan).unwrap(),
        StoreOutcome::Refused
    );
    assert_eq!(arc_stats(&t).4, 1.0, "once per request and key");
    let r3 = RequestId(3);
    t.request_begin(r3).unwrap();
    t.prepare_store(r3, &ks(&[1]), &mut plan).unwrap();
    assert_eq!(arc_stats(&t).4, 2.0, "another request adapts again");
    t.complete_load(q, &ks(&[2, 3])).unwrap();
    // Now the store goes through; the key leaves B1 and enters T1.
    t.prepare_store(r3, &ks(&[1]), &mut plan).unwrap();
    assert_eq!(plan.to_store, ks(&[1]));
    assert_eq!(arc_stats(&t).2, 1, "1 left B1; the evicted key entered it");
    t.check_invariants().unwrap();
}

#[test]
fn arc_ghost_lists_are_bounded_by_capacity_oldest_forgotten() {
    let mut t = tier(2, PolicyKind::Arc);
    t.request_begin(R).unwrap();
    for n in 1..=8 {
        store(&mut t, R, &[n]);
    }
    assert_eq!(arc_stats(&t), (2, 0, 2, 0, 0.0));
    t.touch(R, &ks(&[1])).unwrap(); // forgotten: no adaptation
    assert_eq!(arc_stats(&t).4, 0.0);
    t.touch(R, &ks(&[6])).unwrap(); // still a ghost
    assert_eq!(arc_stats(&t).4, 1.0);
}

#[test]
fn metadata_per_slot_counts_every_array() {
    // 1000 slots: ref counts 4 + flags 1 + index 4 x (2 x 1000 + 16) buckets
    // + list nodes 16 + list state 1, per slot; lru adds room for the rank
    // markers of 15 active requests (2 list entries each, 17 bytes).  Under
    // Miri, where the churn below takes minutes at 1000 slots, 16 slots:
    // 4 x (2 x 16 + 16) index bytes per 16 slots, markers of 1 request.
    let (capacity, lru_bytes, ranked_bytes, arc_bytes, arc_full_bytes) = if cfg!(miri) {
        (16, 34.0 + 2.125, 34.0 + 2.125 + 18.0, 38.0, 70.0)
    } else {
        (1000, 30.064 + 0.51, 30.064 + 0.51 + 16.48, 30.128, 62.128)
    };
    let mut lru = tier(capacity, PolicyKind::Lru);
    assert_eq!(lru.metadata_bytes_per_slot(), lru_bytes);
    // Once positions are in use, 16 bytes of rank per slot and marker.
    lru.request_begin(R).unwrap();
    lru.set_positions(R, &ks(&[1]), &[16]).unwrap();
    assert_eq!(lru.metadata_bytes_per_slot(), ranked_bytes);
    let mut arc = tier(capacity, PolicyKind::Arc);
    // ARC: an empty ghost index (16 buckets) until the first eviction.
    assert_eq!(arc.metadata_bytes_per_slot(), arc_bytes);
    // Churn until both ghost lists are full: new keys, half touched into T2.
    arc.request_begin(R).unwrap();
    for i in (0..8 * capacity).step_by(16) {
        let batch: Vec<u32> = (i..i + 16).collect();
        store(&mut arc, R, &batch);
        arc.touch(R, &ks(&batch[..8])).unwrap();
    }
    let s = arc.stats();
    assert_eq!((s.arc_b1, s.arc_b2), (capacity, capacity));
    // Plus the ghost index, 4 x (2 x 2000 + 16) buckets, and prev/next
    // links (8 bytes) of 2000 ghosts (2 x 16 under Miri).
    assert_eq!(arc.metadata_bytes_per_slot(), arc_full_bytes);
    arc.check_invariants().unwrap();
}

#[test]
fn arc_request_finish_promotes_reused_keys_and_refreshes_inserted_ones() {
    let mut t = tier(8, PolicyKind::Arc);
    t.request_begin(R).unwrap();
    store(&mut t, R, &[1, 2, 3]);
    t.request_finished(R).unwrap();
    assert_eq!(arc_stats(&t), (3, 0, 0, 0, 0.0), "inserted keys stay in T1");
    assert_eq!(order(&t), ks(&[3, 2, 1]), "head most recent");
    let q = RequestId(2);
    t.request_begin(q).unwrap();
    let mut slots = Vec::new();
    t.prepare_load(q, &ks(&[3]), &mut slots).unwrap();
    t.complete_load(q, &ks(&[3])).unwrap();
    let mut plan = StorePlan::default();
    t.prepare_store(q, &ks(&[2, 4]), &mut plan).unwrap(); // 2 found ready: reused
    assert_eq!(plan.to_store, ks(&[4]));
    t.request_finished(q).unwrap();
    assert_eq!(arc_stats(&t), (2, 2, 0, 0, 0.0));
    assert_eq!(order(&t), ks(&[1, 4, 2, 3]));
}

#[test]
fn arc_stat_list_names_the_lists_and_target() {
    let t = tier(2, PolicyKind::Arc);
    let names: Vec<_> = t.stat_list().into_iter().map(|s| s.name).collect();
    for n in ["arc_t1", "arc_t2", "arc_b1", "arc_b2", "arc_target"] {
        assert!(names.iter().any(|x| x == n), "{n}");
    }
}

// ---- admission threshold [0.33] ----

fn admitting(threshold: u32, table: usize) -> PrimaryTier {
    PrimaryTier::new(PrimaryConfig {
        capacity: 8,
        store_threshold: threshold,
        admission_table_size: table,
        ..Default::default()
    })
    .unwrap()
}

#[test]
fn admission_stores_a_key_at_its_threshold_th_offer() {
    let mut t = admitting(3, 16);
    t.request_begin(R).unwrap();
    let mut plan = StorePlan::default();
    t.prepare_store(R, &ks(&[1, 1]), &mut plan).unwrap();
    assert!(
        plan.to_store.is_empty(),
        "repeats in one call are one offer"
    );
    t.prepare_store(R, &ks(&[1]), &mut plan).unwrap();
    assert!(plan.to_store.is_empty());
    t.prepare_store(R, &ks(&[1, 2]), &mut plan).unwrap();
    assert_eq!(plan.to_store, ks(&[1]));
    assert_eq!(t.stats().admission_skips, 3);
    for threshold in [0, 1] {
        let mut t = admitting(threshold, 0);
        t.request_begin(R).unwrap();
        t.prepare_store(R, &ks(&[1]), &mut plan).unwrap();
        assert_eq!(plan.to_store, ks(&[1]));
    }
}

#[test]
fn admission_table_forgets_the_oldest_offer_but_not_one_from_the_same_call() {
    let mut t = admitting(2, 2);
    t.request_begin(R).unwrap();
    let mut plan = StorePlan::default();
    t.prepare_store(R, &ks(&[1]), &mut plan).unwrap();
    t.prepare_store(R, &ks(&[2]), &mut plan).unwrap();
    t.prepare_store(R, &ks(&[3]), &mut plan).unwrap(); // forgets 1
    assert_eq!(t.stats().admission_table_len, 2);
    t.prepare_store(R, &ks(&[1]), &mut plan).unwrap(); // first offer again, forgets 2
    assert!(plan.to_store.is_empty());
    // one call offering 4, 5, 6: 4 and 5 replace 3 and 1; 6 finds only same-call entries
    t.prepare_store(R, &ks(&[4, 5, 6]), &mut plan).unwrap();
    t.prepare_store(R, &ks(&[4, 5, 6]), &mut plan).unwrap();
    assert_eq!(plan.to_store, ks(&[4, 5]));
}

#[test]
fn long_batches_with_repeats_store_each_key_once_at_its_first_position() {
    for p in BOTH {
        let mut t = tier(64, p);
        t.request_begin(R).unwrap();
        let ns: Vec<u32> = (0..50).map(|i| i % 20).collect();
        let mut plan = StorePlan::default();
        t.prepare_store(R, &ks(&ns), &mut plan).unwrap();
        assert_eq!(plan.to_store, ks(&(0..20).collect::<Vec<_>>()));
        assert_eq!(plan.slots, (0..20).collect::<Vec<_>>());
        let mut pos = Vec::new();
        plan.positions_in(&ks(&ns), &mut pos);
        assert_eq!(pos, (0..20).collect::<Vec<_>>());
        t.check_invariants().unwrap();
    }
}

#[test]
fn the_tier_can_be_shared_and_sent_across_threads() {
    fn send_sync<T: Send + Sync>() {}
    send_sync::<PrimaryTier>();
    send_sync::<NamedPrimary>();
}

#[test]
fn call_stamps_wrap_around_without_confusing_the_admission_table() {
    let mut t = admitting(2, 2);
    t.request_begin(R).unwrap();
    let mut plan = StorePlan::default();
    t.slots.epoch = u32::MAX - 1;
    t.prepare_store(R, &ks(&[1]), &mut plan).unwrap(); // stamp u32::MAX
    t.prepare_store(R, &ks(&[2]), &mut plan).unwrap(); // wraps to 1, marks cleared
    assert_eq!(t.slots.epoch, 1);
    // The table is full (1, 2); a new key forgets 1, not refused as same-call.
    t.prepare_store(R, &ks(&[3]), &mut plan).unwrap();
    t.prepare_store(R, &ks(&[2, 3]), &mut plan).unwrap();
    assert_eq!(plan.to_store, ks(&[2, 3]));
    t.check_invariants().unwrap();
}
