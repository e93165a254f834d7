//! Unit tests of the [0.33] store-time rules (admission threshold within a
//! call, ARC's store-miss adaptation) and of vLLM 0.33.0's own primary-tier
//! tests (`tests/v1/kv_offload/cpu/test_manager.py`) re-expressed through
//! this tier's public interface: each such test names the vLLM test it
//! mirrors.

use super::*;

fn k(n: u32) -> Key {
    Key::new(&n.to_be_bytes()).unwrap()
}

fn ks(ns: &[u32]) -> Vec<Key> {
    ns.iter().map(|&n| k(n)).collect()
}

fn tier(capacity: u32, policy: PolicyKind) -> PrimaryTier {
    configured(capacity, policy, 1, 0)
}

fn configured(capacity: u32, policy: PolicyKind, threshold: u32, table: usize) -> PrimaryTier {
    let mut config = PrimaryConfig {
        capacity,
        policy,
        event_capacity: 1024,
        ..Default::default()
    };
    config.store_threshold = threshold;
    config.admission_table_size = table;
    PrimaryTier::new(config).unwrap()
}

const R: RequestId = RequestId(1);

/// `prepare_store` of `ns` for `req`: the keys to store, or `None` if refused.
fn offer(t: &mut PrimaryTier, req: RequestId, ns: &[u32]) -> Option<Vec<Key>> {
    let mut plan = StorePlan::default();
    match t.prepare_store(req, &ks(ns), &mut plan).unwrap() {
        StoreOutcome::Planned => Some(plan.to_store),
        StoreOutcome::Refused => None,
    }
}

/// Offers `ns` for `req` and completes whatever the plan stores.
fn store(t: &mut PrimaryTier, req: RequestId, ns: &[u32]) -> StorePlan {
    let mut plan = StorePlan::default();
    assert_eq!(
        t.prepare_store(req, &ks(ns), &mut plan).unwrap(),
        StoreOutcome::Planned
    );
    t.complete_store(&plan.to_store, true);
    plan
}

fn target(t: &PrimaryTier) -> f64 {
    t.stats().arc_target
}

fn ghosts(t: &PrimaryTier) -> (u32, u32) {
    let s = t.stats();
    (s.arc_b1, s.arc_b2)
}

// ---- admission within one call ----

#[test]
fn admission_counts_every_key_of_a_call_before_forgetting_any() {
    // Table of 2: the second call's C must not push out A, offered again
    // in the same call.
    let mut t = configured(4, PolicyKind::Lru, 2, 2);
    t.begin_request(R).unwrap();
    assert_eq!(offer(&mut t, R, &[1, 2]), Some(vec![]));
    assert_eq!(offer(&mut t, R, &[3, 1]), Some(ks(&[1])));
    // The table forgot 2 (the oldest not offered in the call) for 3.
    assert_eq!(offer(&mut t, R, &[3]), Some(ks(&[3])));
}

/// Mirrors vLLM's `test_filter_reused_manager_oversized_offer_makes_progress`:
/// a call offering more distinct keys than the table holds records what
/// fits; the rest are stored by later offers.
#[test]
fn admission_of_an_offer_larger_than_the_table_makes_progress() {
    let mut t = configured(4, PolicyKind::Lru, 2, 3);
    t.begin_request(R).unwrap();
    let mut stored: Vec<u32> = Vec::new();
    let mut per_call = Vec::new();
    for _ in 0..4 {
        let rest: Vec<u32> = (1..=4).filter(|n| !stored.contains(n)).collect();
        let plan = store(&mut t, R, &rest);
        per_call.push(plan.to_store.len());
        stored.extend(rest.iter().filter(|&&n| plan.to_store.contains(&k(n))));
    }
    stored.sort();
    assert_eq!(stored, vec![1, 2, 3, 4]);
    // 1, 2, 3 recorded by the first call (4 did not fit); the second
    // stores them; 4 is recorded by the third and stored by the fourth.
    assert_eq!(per_call, vec![0, 3, 0, 1]);
}

/// Mirrors vLLM's `test_filter_reused_manager` (store_threshold 2, a table
/// of 3): a repeated offer makes the whole prefix eligible at once; the
/// table forgets its oldest entry; an offer of a resident key counts.
#[test]
fn admission_follows_vllms_reuse_filter_scenario() {
    let mut t = configured(4, PolicyKind::Lru, 2, 3);
    t.begin_request(R).unwrap();
    // Lookups do not count as offers.
    assert_eq!(t.lookup(&k(1)), PrimaryLookup::Miss);
    assert_eq!(t.stats().admission_table_len, 0);
    assert_eq!(store(&mut t, R, &[1, 2]).to_store, vec![]);
    assert_eq!(t.stats().admission_table_len, 2);
    assert_eq!(store(&mut t, R, &[1, 2]).to_store, ks(&[1, 2]));
    // 3 and 4: first offers; 1, the oldest entry, is forgotten.
    assert_eq!(store(&mut t, R, &[3, 4]).to_store, vec![]);
    assert_eq!(t.stats().admission_table_len, 3);
    // 1 (resident) is offered: it re-enters the table at one offer,
    // pushing out 2.  3 is then at its second offer.
    assert_eq!(store(&mut t, R, &[1]).to_store, vec![]);
    assert_eq!(store(&mut t, R, &[3]).to_store, ks(&[3]));
    assert_eq!(t.stats().admission_skips, 4);
}

#[test]
fn admission_counts_an_offer_of_a_resident_key() {
    // Capacity 1, threshold 2, a table of 2.
    let mut t = configured(1, PolicyKind::Lru, 2, 2);
    t.begin_request(R).unwrap();
    store(&mut t, R, &[1]);
    assert_eq!(store(&mut t, R, &[1]).to_store, ks(&[1]));
    store(&mut t, R, &[2]);
    store(&mut t, R, &[3]); // the table forgets 1: [2, 3]
    // 1 is resident; its offer still counts (the table forgets 2).
    assert_eq!(store(&mut t, R, &[1]).to_store, vec![]);
    let plan = store(&mut t, R, &[3]);
    assert_eq!((plan.to_store, plan.evicted), (ks(&[3]), ks(&[1])));
    // 1 is absent again, at its second offer since the table forgot it.
    assert_eq!(store(&mut t, R, &[1]).to_store, ks(&[1]));
}

// ---- ARC: adaptation when prepare_store is offered a ghost ----

/// A capacity-`cap` ARC tier whose request `R` is active.
fn arc(cap: u32) -> PrimaryTier {
    let mut t = tier(cap, PolicyKind::Arc);
    t.begin_request(R).unwrap();
    t
}

/// Pins every resident key of `keys` for a new request `id` (nothing idle
/// is left to evict, so stores are refused).
fn pin_all(t: &mut PrimaryTier, id: u64, ns: &[u32]) -> RequestId {
    let q = RequestId(id);
    t.begin_request(q).unwrap();
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
    t.begin_request(r3).unwrap();
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
    t.begin_request(R).unwrap();
    store(&mut t, R, &[1, 2]);
    store(&mut t, R, &[1, 2]);
    store(&mut t, R, &[3]);
    assert_eq!(store(&mut t, R, &[3]).evicted, ks(&[1]));
    store(&mut t, R, &[4]); // the table forgets 1
    store(&mut t, R, &[5]); // and 2: [3, 4, 5]
    assert_eq!(ghosts(&t), (1, 0));
    let q = RequestId(2);
    t.begin_request(q).unwrap();
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
    t.begin_request(q).unwrap();
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
    t.begin_request(seed).unwrap();
    store(&mut t, seed, &[1, 2]);
    t.on_request_finished(seed).unwrap();
    let evict = RequestId(11);
    t.begin_request(evict).unwrap();
    let plan = store(&mut t, evict, &[3]);
    t.on_request_finished(evict).unwrap();
    let ghost = plan.evicted[0];
    assert_eq!(ghosts(&t), (1, 0));
    let residents: Vec<Key> = ks(&[1, 2, 3]).into_iter().filter(|x| *x != ghost).collect();
    let pin = RequestId(12);
    t.begin_request(pin).unwrap();
    let mut slots = Vec::new();
    t.prepare_load(pin, &residents, &mut slots).unwrap();
    let g = RequestId(13);
    t.begin_request(g).unwrap();
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
    t.complete_store(&[ghost], true);
    t.on_request_finished(g).unwrap();
    let s = t.stats();
    assert_eq!((s.arc_t1, s.arc_t2), (2, 0), "the ghost entered T1");
    t.check_invariants().unwrap();
}
