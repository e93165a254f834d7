//! vLLM's `TestARCPolicy`, through the tier's interface: T1 and T2,
//! ghosts and the adaptive target, keys being loaded, failed stores.

use super::*;

fn t1_t2(t: &PrimaryTier) -> (u32, u32) {
    let s = t.stats();
    (s.arc_t1, s.arc_t2)
}

/// Mirrors vLLM's `TestARCPolicy::test_basic`.
#[test]
fn arc_basic_stores_lookups_and_events() {
    let mut t = arc(4);
    let mut plan = StorePlan::default();
    t.prepare_store(R, &ks(&[1, 2]), &mut plan).unwrap();
    assert_eq!((&plan.to_store, &plan.slots), (&ks(&[1, 2]), &vec![0, 1]));
    assert_eq!(t.lookup(&k(1)), PrimaryLookup::HitPending);
    assert_eq!(drain(&mut t), vec![]);
    t.complete_store(R, &ks(&[1, 2]), true);
    assert_eq!(drain(&mut t), vec![(Stored, ks(&[1, 2]))]);
    assert_eq!(t.lookup(&k(2)), PrimaryLookup::Hit);
    assert_eq!(t.lookup(&k(3)), PrimaryLookup::Miss);
    assert_eq!(t1_t2(&t), (2, 0));
}

/// Mirrors vLLM's `TestARCPolicy::test_t1_to_t2_promotion`.
#[test]
fn arc_touch_of_a_ready_t1_key_moves_it_to_t2() {
    let mut t = arc(4);
    store(&mut t, R, &[1]);
    assert_eq!(t1_t2(&t), (1, 0));
    t.touch(R, &ks(&[1])).unwrap();
    assert_eq!(t1_t2(&t), (0, 1));
}

/// Mirrors vLLM's `TestARCPolicy::test_eviction_with_load`.
#[test]
fn arc_keys_being_loaded_are_not_evicted() {
    let mut t = arc(4);
    let plan = store(&mut t, R, &[1, 2, 3, 4]);
    assert_eq!(plan.slots, vec![0, 1, 2, 3]);
    let mut slots = Vec::new();
    t.prepare_load(R, &ks(&[2, 3]), &mut slots).unwrap();
    assert_eq!(slots, vec![1, 2]);
    assert_eq!(offer(&mut t, R, &[5, 6, 7]), None);
    t.complete_load(R, &ks(&[2, 3])).unwrap();
    let mut plan = StorePlan::default();
    t.prepare_store(R, &ks(&[5, 6, 7]), &mut plan).unwrap();
    assert_eq!(plan.evicted.len(), 3);
}

/// Mirrors vLLM's `TestARCPolicy::test_adaptive_target`.
#[test]
fn arc_touch_of_a_b1_ghost_raises_the_target() {
    let mut t = arc(2);
    store(&mut t, R, &[1, 2]);
    let before = target(&t);
    assert_eq!(store(&mut t, R, &[3]).evicted, ks(&[1]));
    assert_eq!(ghosts(&t), (1, 0));
    t.touch(R, &ks(&[1])).unwrap();
    assert!(target(&t) > before);
}

/// Mirrors vLLM's `TestARCPolicy::test_store_falls_back_to_t1_when_t2_cannot_satisfy_eviction`
/// (each parameter set: keys pinned, resident keys named, new keys, the
/// expected evictions or a refusal).
#[test]
fn arc_store_falls_back_to_t1_when_t2_cannot_satisfy_the_eviction() {
    type Case = (
        &'static [u32],
        &'static [u32],
        &'static [u32],
        Option<&'static [u32]>,
    );
    let cases: [Case; 6] = [
        (&[], &[], &[7, 8, 9], Some(&[6, 5, 3])),
        (&[], &[], &[7, 8, 9, 10], Some(&[6, 5, 3, 4])),
        (&[5, 6], &[], &[7, 8], Some(&[3, 4])),
        (&[], &[5, 6], &[7, 8], Some(&[3, 4])),
        (&[5, 6], &[3], &[7], Some(&[4])),
        (&[5, 6], &[3], &[7, 8], None),
    ];
    for (pinned, named, new, expected) in cases {
        let mut t = arc(4);
        store(&mut t, R, &[1, 2, 3, 4]);
        store(&mut t, R, &[5, 6]);
        // Ghost hits raise the target to 3; T1 keeps [3, 4], T2 [6, 5].
        t.touch(R, &ks(&[1, 2])).unwrap();
        t.touch(R, &ks(&[1])).unwrap();
        t.touch(R, &ks(&[5, 6])).unwrap();
        assert_eq!(target(&t), 3.0);
        assert_eq!(t.eviction_order(), ks(&[3, 4, 6, 5]));
        let q = RequestId(2);
        t.request_begin(q).unwrap();
        let mut slots = Vec::new();
        t.prepare_load(q, &ks(pinned), &mut slots).unwrap();
        let lists = |t: &PrimaryTier| (t.eviction_order(), t1_t2(t), ghosts(t), target(t));
        let before = lists(&t);
        let offered: Vec<u32> = named.iter().chain(new).copied().collect();
        let mut plan = StorePlan::default();
        let outcome = t.prepare_store(R, &ks(&offered), &mut plan).unwrap();
        match expected {
            None => {
                assert_eq!(outcome, StoreOutcome::Refused);
                assert_eq!(lists(&t), before, "a refusal changes no list");
            }
            Some(evicted) => {
                assert_eq!(
                    (plan.to_store.clone(), plan.evicted.clone()),
                    (ks(new), ks(evicted))
                );
                t.complete_store(R, &ks(new), true);
                for &n in new {
                    assert_eq!(t.lookup(&k(n)), PrimaryLookup::Hit);
                }
            }
        }
        for &n in pinned.iter().chain(named) {
            assert_eq!(t.lookup(&k(n)), PrimaryLookup::Hit);
        }
        t.complete_load(q, &ks(pinned)).unwrap();
        t.check_invariants().unwrap();
    }
}

/// Mirrors vLLM's `TestARCPolicy::test_ghost_list_bounds`.
#[test]
fn arc_ghost_lists_stay_within_the_capacity() {
    let mut t = arc(2);
    store(&mut t, R, &[1, 2]);
    for n in 3..20 {
        store(&mut t, R, &[n]);
    }
    let (b1, b2) = ghosts(&t);
    assert!(b1 <= 2 && b2 <= 2);
}

/// Mirrors vLLM's `TestARCPolicy::test_touch_ordering`.
#[test]
fn arc_touch_promotes_and_refreshes_in_batch_order() {
    let mut t = arc(4);
    store(&mut t, R, &[1, 2, 3, 4]);
    t.touch(R, &ks(&[3, 4])).unwrap();
    t.touch(R, &ks(&[1, 3, 4])).unwrap();
    assert_eq!(t1_t2(&t), (1, 3));
    let plan = store(&mut t, R, &[5]);
    assert_eq!(
        (plan.to_store, plan.slots, plan.evicted),
        (ks(&[5]), vec![1], ks(&[2]))
    );
}

/// Mirrors vLLM's `TestARCPolicy::test_failed_store`.
#[test]
fn arc_failed_store_leaves_no_key_and_keeps_the_evicted_ghost() {
    let mut t = arc(4);
    store(&mut t, R, &[1, 2, 3, 4]);
    let mut plan = StorePlan::default();
    t.prepare_store(R, &ks(&[5]), &mut plan).unwrap();
    assert_eq!(plan.evicted.len(), 1);
    t.complete_store(R, &ks(&[5]), false);
    assert_eq!(t.lookup(&k(5)), PrimaryLookup::Miss);
    assert_eq!(t1_t2(&t), (3, 0));
    assert_eq!(ghosts(&t), (1, 0), "the evicted key is a B1 ghost");
    t.touch(R, &plan.evicted).unwrap();
    assert_eq!(target(&t), 1.0, "and adapts as one");
}

/// Mirrors vLLM's `TestARCPolicy::test_full_scenario`.
#[test]
fn arc_full_scenario_keeps_t2_keys_and_announces_events() {
    let mut t = arc(4);
    store(&mut t, R, &[1, 2]);
    assert_eq!(store(&mut t, R, &[3, 4, 5]).evicted.len(), 1);
    t.touch(R, &ks(&[2, 3])).unwrap();
    assert_eq!(t1_t2(&t), (2, 2));
    store(&mut t, R, &[6]);
    assert_eq!(t.lookup(&k(2)), PrimaryLookup::Hit);
    assert_eq!(t.lookup(&k(3)), PrimaryLookup::Hit);
    assert_eq!(
        drain(&mut t),
        vec![
            (Stored, ks(&[1, 2])),
            (Removed, ks(&[1])),
            (Stored, ks(&[3, 4, 5])),
            (Removed, ks(&[4])),
            (Stored, ks(&[6])),
        ]
    );
}
