//! Unit tests of store completions and their writers: a completion acts
//! only on the keys its own writer (a request, or a promotion) planned.

use super::*;

#[test]
fn a_completion_acts_only_on_keys_its_own_request_planned() {
    // r1 plans A (slot 0); r2 names [A, B] and plans only B; r2 completes
    // every key it named.  A stays write pending for r1: dropping it would
    // let a later store reuse slot 0 while r1 still writes A there, and
    // publishing it would make A readable before anyone wrote it.
    let (r1, r2, r3) = (RequestId(1), RequestId(2), RequestId(3));
    for p in BOTH {
        for success in [false, true] {
            let what = format!("{p:?} success {success}");
            let mut t = tier(2, p);
            for r in [r1, r2, r3] {
                t.request_begin(r).unwrap();
            }
            let mut plan = StorePlan::default();
            t.prepare_store(r1, &ks(&[1]), &mut plan).unwrap();
            assert_eq!(plan.slots, vec![0], "{what}");
            t.prepare_store(r2, &ks(&[1, 2]), &mut plan).unwrap();
            assert_eq!(
                (plan.to_store.clone(), plan.slots.clone()),
                (ks(&[2]), vec![1])
            );
            assert_eq!(
                (t.stores_pending(r1), t.stores_pending(r2)),
                (1, 1),
                "{what}"
            );
            let r = t.complete_store(r2, &ks(&[1, 2]), success);
            assert_eq!(
                r,
                CompleteStoreReport {
                    ready: success as usize,
                    dropped: !success as usize,
                    foreign: 1,
                    ..Default::default()
                },
                "{what}"
            );
            assert_eq!(
                t.ref_count(&k(1)),
                Some(-1),
                "{what}: A still write pending"
            );
            assert_eq!(t.slot_of(&k(1)), Some(0), "{what}");
            assert_eq!(
                (t.stores_pending(r1), t.stores_pending(r2)),
                (1, 0),
                "{what}"
            );
            // A's slot is neither free nor evictable.
            assert_eq!(
                t.prepare_store(r3, &ks(&[3, 4]), &mut plan).unwrap(),
                StoreOutcome::Refused,
                "{what}"
            );
            if !success {
                t.prepare_store(r3, &ks(&[3]), &mut plan).unwrap();
                assert_eq!(plan.slots, vec![1], "{what}: only B's slot was freed");
                t.complete_store(r3, &ks(&[3]), true);
            }
            let r = t.complete_store(r1, &ks(&[1]), true);
            assert_eq!((r.ready, r.foreign), (1, 0), "{what}");
            assert_eq!(t.lookup(&k(1)), PrimaryLookup::Hit, "{what}");
            assert_eq!(t.slot_of(&k(1)), Some(0), "{what}");
            assert_eq!(t.stats().foreign_completions, 1, "{what}");
            t.check_invariants().unwrap();
        }
    }
}

#[test]
fn a_store_completion_never_finishes_a_promotions_slot_nor_the_reverse() {
    let (r1, r2) = (RequestId(1), RequestId(2));
    for success in [false, true] {
        let what = format!("success {success}");
        let mut t = tier(4, PolicyKind::Lru);
        t.request_begin(r1).unwrap();
        t.request_begin(r2).unwrap();
        let mut plan = StorePlan::default();
        t.prepare_promotion(r1, &ks(&[9]), &mut plan).unwrap();
        assert_eq!(plan.slots, vec![0]);
        assert_eq!(t.stores_pending(r1), 0, "a promotion is not r1's store");
        t.prepare_store(r2, &ks(&[2]), &mut plan).unwrap();
        for r in [r1, r2] {
            let rep = t.complete_store(r, &ks(&[9, 2]), success);
            assert_eq!(rep.foreign, if r == r1 { 2 } else { 1 }, "{what}");
            assert_eq!(t.ref_count(&k(9)), Some(-1), "{what}: promotion left alone");
        }
        // A promotion's completion leaves a request's write-pending key alone.
        t.prepare_store(r2, &ks(&[5]), &mut plan).unwrap();
        let rep = t.complete_promotion(&ks(&[9, 5]), true);
        assert_eq!((rep.ready, rep.foreign), (1, 1), "{what}");
        assert_eq!(t.ref_count(&k(9)), Some(0), "{what}");
        assert_eq!(t.ref_count(&k(5)), Some(-1), "{what}");
        assert_eq!(t.stores_pending(r2), 1, "{what}");
        t.check_invariants().unwrap();
    }
}

#[test]
fn a_plan_may_be_completed_in_several_calls_and_after_its_request_finished() {
    let mut t = tier(4, PolicyKind::Lru);
    t.request_begin(R).unwrap();
    let mut plan = StorePlan::default();
    t.prepare_store(R, &ks(&[1, 2, 3]), &mut plan).unwrap();
    assert_eq!(t.stores_pending(R), 3);
    assert_eq!(t.complete_store(R, &ks(&[1]), true).ready, 1);
    assert_eq!(t.stores_pending(R), 2);
    t.request_finished(R).unwrap();
    let r = t.complete_store(R, &ks(&[2, 3]), true);
    assert_eq!(
        r.ready, 2,
        "completions may arrive after the request finished"
    );
    assert_eq!(t.stores_pending(R), 0);
    for n in 1..=3 {
        assert_eq!(t.lookup(&k(n)), PrimaryLookup::Hit);
    }
    t.check_invariants().unwrap();
}

#[test]
fn a_writer_is_forgotten_once_done_or_reset_and_never_confused_with_a_later_one() {
    let (r1, r2) = (RequestId(1), RequestId(2));
    let mut t = tier(4, PolicyKind::Lru);
    t.request_begin(r1).unwrap();
    t.request_begin(r2).unwrap();
    // r1 done: whatever stood for it may stand for r2 now, but r1's late
    // completion of r2's key is still foreign.
    store(&mut t, r1, &[1]);
    let mut plan = StorePlan::default();
    t.prepare_store(r2, &ks(&[2]), &mut plan).unwrap();
    assert_eq!(t.complete_store(r1, &ks(&[2]), true).foreign, 1);
    assert_eq!(t.ref_count(&k(2)), Some(-1));
    // A reset forgets every writer.
    t.prepare_store(r1, &ks(&[3]), &mut plan).unwrap();
    t.reset();
    assert_eq!((t.stores_pending(r1), t.stores_pending(r2)), (0, 0));
    assert_eq!(t.complete_store(r1, &ks(&[3]), true).ignored, 1);
    t.prepare_store(r2, &ks(&[3]), &mut plan).unwrap();
    assert_eq!(plan.slots, vec![0]);
    let r = t.complete_store(r1, &ks(&[3]), false);
    assert_eq!(
        (r.foreign, r.dropped),
        (1, 0),
        "r1's write of 3 ended at the reset"
    );
    assert_eq!(t.complete_store(r2, &ks(&[3]), true).ready, 1);
    t.check_invariants().unwrap();
}
