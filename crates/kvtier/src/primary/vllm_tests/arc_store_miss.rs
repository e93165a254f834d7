//! ARC's adaptation when `prepare_store` is offered a ghost: which
//! candidates it walks and in what order, where the ghost goes, and that
//! a request adapts once per key, past the admission threshold only.

use super::*;

/// Pins every resident key of `keys` for a new request `id` (nothing idle
/// is left to evict, so stores are refused).
fn pin_all(t: &mut PrimaryTier, id: u64, ns: &[u32]) -> RequestId {
    let q = RequestId(id);
    t.request_begin(q).unwrap();
    let mut slots = Vec::new();
    t.prepare_load(q, &ks(ns), &mut slots).unwrap();
    q
}

#[test]
fn arc_store_miss_walks_the_candidates_in_reverse_order() {
    // B1 = [1], B2 = [3], target 0, capacity 2.
    let mut t = arc(2);
    store(&mut t, R, &[1, 2]);
    t.touch(R, &ks(&[2])).unwrap(); // T1 = [1], T2 = [2]
    store(&mut t, R, &[3]); // 1 -> B1
    t.touch(R, &ks(&[3])).unwrap(); // T2 = [2, 3]
    store(&mut t, R, &[4]); // |T1| = 0 >= 0, T1 empty: 2 -> B2
    assert_eq!(ghosts(&t), (1, 1));
    assert_eq!(target(&t), 0.0);
    // Offer [1 (B1), 2 (B2)] while nothing can be evicted.
    let q = pin_all(&mut t, 2, &[3, 4]);
    assert_eq!(offer(&mut t, q, &[1, 2]), None);
    // Reverse: 2 shrinks (floored at 0), then 1 grows by 1.  Forward would
    // grow to 1, then shrink back to 0.
    assert_eq!(target(&t), 1.0);
}

#[test]
fn arc_store_miss_makes_the_ghost_the_most_recent_of_its_list() {
    // Capacity 2: B1 holds at most 2 ghosts.
    let mut t = arc(2);
    store(&mut t, R, &[1, 2]);
    store(&mut t, R, &[3, 4]); // 1, 2 -> B1 (1 oldest)
    assert_eq!(ghosts(&t), (2, 0));
    let q = pin_all(&mut t, 2, &[3, 4]);
    assert_eq!(offer(&mut t, q, &[1]), None); // refused; 1 refreshed in B1
    t.complete_load(q, &ks(&[3, 4])).unwrap();
    assert_eq!(target(&t), 1.0);
    // |T1| = 2 >= 1: 3 goes to B1, which forgets its oldest: 2, not 1.
    let r3 = RequestId(3);
    t.request_begin(r3).unwrap();
    assert_eq!(store(&mut t, r3, &[5]).evicted, ks(&[3]));
    t.touch(r3, &ks(&[2])).unwrap(); // forgotten: no adaptation
    assert_eq!(target(&t), 1.0);
    t.touch(r3, &ks(&[1])).unwrap(); // still a ghost
    assert_eq!(target(&t), 2.0);
    t.check_invariants().unwrap();
}

#[test]
fn arc_store_miss_adapts_only_for_candidates_past_the_admission_threshold() {
    // Threshold 2, a table of 3.
    let mut t = configured(2, PolicyKind::Arc, 2, 3);
    t.request_begin(R).unwrap();
    store(&mut t, R, &[1, 2]);
    store(&mut t, R, &[1, 2]);
    store(&mut t, R, &[3]);
    assert_eq!(store(&mut t, R, &[3]).evicted, ks(&[1]));
    store(&mut t, R, &[4]); // the table forgets 1
    store(&mut t, R, &[5]); // and 2: [3, 4, 5]
    assert_eq!(ghosts(&t), (1, 0));
    let q = RequestId(2);
    t.request_begin(q).unwrap();
    // Ghost 1 at its first offer since the table forgot it: skipped, and
    // so no adaptation (nor is it remembered for q).
    assert_eq!(offer(&mut t, q, &[1]), Some(vec![]));
    assert_eq!(target(&t), 0.0);
    // At its second offer it passes the threshold and adapts.
    assert_eq!(offer(&mut t, q, &[1]), Some(ks(&[1])));
    assert_eq!(target(&t), 1.0);
}

#[test]
fn arc_store_miss_remembers_every_candidate_of_the_request_ghost_or_not() {
    let mut t = arc(1);
    let q = RequestId(2);
    t.request_begin(q).unwrap();
    // q stores 1 (not a ghost then); R's store evicts it into B1.
    store(&mut t, q, &[1]);
    assert_eq!(store(&mut t, R, &[2]).evicted, ks(&[1]));
    assert_eq!(ghosts(&t), (1, 0));
    // q offers 1 again: already a candidate of q, so no adaptation.
    store(&mut t, q, &[1]);
    assert_eq!(target(&t), 0.0);
    // R never offered 1: it adapts.
    store(&mut t, q, &[3]); // 1 -> B1 again
    store(&mut t, R, &[1]);
    assert_eq!(target(&t), 1.0);
}

/// Mirrors vLLM's `test_arc_ghost_hit_adapts_once_per_request_before_insertion`.
#[test]
fn arc_ghost_offer_adapts_once_per_request_before_insertion() {
    let mut t = arc(2);
    let seed = RequestId(10);
    t.request_begin(seed).unwrap();
    store(&mut t, seed, &[1, 2]);
    t.request_finished(seed).unwrap();
    let evict = RequestId(11);
    t.request_begin(evict).unwrap();
    let plan = store(&mut t, evict, &[3]);
    t.request_finished(evict).unwrap();
    let ghost = plan.evicted[0];
    assert_eq!(ghosts(&t), (1, 0));
    let residents: Vec<Key> = ks(&[1, 2, 3]).into_iter().filter(|x| *x != ghost).collect();
    let pin = RequestId(12);
    t.request_begin(pin).unwrap();
    let mut slots = Vec::new();
    t.prepare_load(pin, &residents, &mut slots).unwrap();
    let g = RequestId(13);
    t.request_begin(g).unwrap();
    let mut plan = StorePlan::default();
    let before = target(&t);
    assert_eq!(
        t.prepare_store(g, &[ghost], &mut plan).unwrap(),
        StoreOutcome::Refused
    );
    let after_first = target(&t);
    assert!(after_first > before);
    assert_eq!(
        t.prepare_store(g, &[ghost], &mut plan).unwrap(),
        StoreOutcome::Refused
    );
    assert_eq!(target(&t), after_first);
    t.complete_load(pin, &residents).unwrap();
    assert_eq!(
        t.prepare_store(g, &[ghost], &mut plan).unwrap(),
        StoreOutcome::Planned
    );
    assert_eq!(target(&t), after_first);
    t.complete_store(g, &[ghost], true);
    t.request_finished(g).unwrap();
    let s = t.stats();
    assert_eq!((s.arc_t1, s.arc_t2), (2, 0), "the ghost entered T1");
    t.check_invariants().unwrap();
}
