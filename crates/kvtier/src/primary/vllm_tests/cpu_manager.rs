//! vLLM's CPU manager tests of stores and their events: the lru scenario
//! of `test_cpu_manager`, an eviction announced before the store that
//! takes its slot, failed writes never announced, a resident key named in
//! a store never evicted by it.

use super::*;

/// Mirrors vLLM's `test_cpu_eviction_removed_precedes_stored`.
#[test]
fn an_eviction_is_announced_before_the_store_that_takes_its_slot() {
    for p in [PolicyKind::Lru, PolicyKind::Arc] {
        let mut t = tier(2, p);
        t.request_begin(R).unwrap();
        store(&mut t, R, &[1, 2]);
        drain(&mut t);
        store(&mut t, R, &[3]);
        assert_eq!(drain(&mut t), vec![(Removed, ks(&[1])), (Stored, ks(&[3]))]);
    }
}

/// Mirrors vLLM's `test_cpu_manager` (lru: stores, lookups, loads, touches,
/// refusals, a failed store, and the events of each).  One difference: the
/// failed write of 9 was never announced as stored, so its removal is not
/// announced either (vLLM queues a metadata-only removal, which is no
/// public eviction).
#[test]
fn lru_scenario_of_vllms_cpu_manager_test() {
    let mut t = tier(4, PolicyKind::Lru);
    let any = RequestId(20);
    t.request_begin(any).unwrap();
    let mut plan = StorePlan::default();
    t.prepare_store(any, &ks(&[1, 2]), &mut plan).unwrap();
    assert_eq!((&plan.to_store, &plan.slots), (&ks(&[1, 2]), &vec![0, 1]));
    assert_eq!(t.lookup(&k(1)), PrimaryLookup::HitPending);
    assert_eq!(t.lookup(&k(2)), PrimaryLookup::HitPending);
    assert_eq!(drain(&mut t), vec![]);
    t.complete_store(any, &ks(&[1, 2]), true);
    assert_eq!(drain(&mut t), vec![(Stored, ks(&[1, 2]))]);
    assert_eq!(t.lookup(&k(1)), PrimaryLookup::Hit);
    assert_eq!(t.lookup(&k(3)), PrimaryLookup::Miss);
    t.prepare_store(any, &ks(&[2, 3, 4, 5]), &mut plan).unwrap();
    assert_eq!(
        (&plan.to_store, &plan.slots, &plan.evicted),
        (&ks(&[3, 4, 5]), &vec![2, 3, 0], &ks(&[1]))
    );
    assert_eq!(drain(&mut t), vec![(Removed, ks(&[1]))]);
    assert_eq!(offer(&mut t, any, &[1, 6]), None, "no room");
    t.complete_store(any, &ks(&[2, 3, 4, 5]), true);
    assert_eq!(t.lookup(&k(1)), PrimaryLookup::Miss);
    for n in [2, 3, 4, 5] {
        assert_eq!(t.lookup(&k(n)), PrimaryLookup::Hit);
    }
    let load = RequestId(21);
    t.request_begin(load).unwrap();
    let mut slots = Vec::new();
    t.prepare_load(load, &ks(&[2, 3]), &mut slots).unwrap();
    assert_eq!(slots, vec![1, 2]);
    assert_eq!(
        offer(&mut t, any, &[6, 7, 8]),
        None,
        "2 and 3 are being loaded"
    );
    t.complete_load(load, &ks(&[2, 3])).unwrap();
    t.request_finished(load).unwrap();
    // The loaded prefix [2, 3] is most recent, its tail before its head.
    t.prepare_store(any, &ks(&[6, 7, 8]), &mut plan).unwrap();
    assert_eq!(
        (&plan.to_store, &plan.slots, &plan.evicted),
        (&ks(&[6, 7, 8]), &vec![2, 0, 3], &ks(&[4, 5, 3]))
    );
    t.complete_store(any, &ks(&[6, 7, 8]), true);
    t.touch(any, &ks(&[2, 6, 7])).unwrap();
    t.prepare_store(any, &ks(&[9]), &mut plan).unwrap();
    assert_eq!(
        (&plan.to_store, &plan.slots, &plan.evicted),
        (&ks(&[9]), &vec![3], &ks(&[8]))
    );
    t.complete_store(any, &ks(&[7, 9]), false);
    assert_eq!(t.lookup(&k(7)), PrimaryLookup::Hit);
    assert_eq!(t.lookup(&k(9)), PrimaryLookup::Miss);
    assert_eq!(
        drain(&mut t),
        vec![
            (Stored, ks(&[3, 4, 5])),
            (Removed, ks(&[4, 5, 3])),
            (Stored, ks(&[6, 7, 8])),
            (Removed, ks(&[8])),
        ]
    );
}

/// Mirrors vLLM's `test_take_events_prunes_retried_cleanup_and_drains_once`:
/// a failed write is never announced, a retry of the key is announced once
/// it is stored, and a drain hands each event out once.
#[test]
fn failed_writes_are_not_announced_and_a_drain_hands_each_event_out_once() {
    let mut t = tier(4, PolicyKind::Lru);
    t.request_begin(R).unwrap();
    assert!(offer(&mut t, R, &[1, 2]).is_some());
    t.complete_store(R, &ks(&[1, 2]), false);
    assert!(offer(&mut t, R, &[1]).is_some()); // a retry re-allocates 1
    store(&mut t, R, &[3]);
    assert_eq!(drain(&mut t), vec![(Stored, ks(&[3]))]);
    assert_eq!(drain(&mut t), vec![]);
}

/// Mirrors vLLM's `test_already_stored_chunk_not_evicted_during_prepare_store`.
#[test]
fn a_resident_key_named_in_the_store_is_not_evicted_by_it() {
    for p in [PolicyKind::Lru, PolicyKind::Arc] {
        let mut t = tier(4, p);
        t.request_begin(R).unwrap();
        store(&mut t, R, &[1, 2]);
        t.touch(R, &ks(&[1])).unwrap();
        let plan = store(&mut t, R, &[2, 3, 4, 5]);
        assert_eq!(
            (plan.to_store, plan.slots, plan.evicted),
            (ks(&[3, 4, 5]), vec![2, 3, 0], ks(&[1]))
        );
        assert_eq!(t.lookup(&k(2)), PrimaryLookup::Hit);
    }
}
