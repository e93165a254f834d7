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

/// Mirrors vLLM's `test_filter_reused_manager_reports_stores_skipped_counter`
/// (vLLM reports the count since the last read; here it is cumulative).
#[test]
fn admission_skips_count_every_candidate_held_back() {
    let mut t = configured(4, PolicyKind::Lru, 2, 64_000);
    t.begin_request(R).unwrap();
    let plan = store(&mut t, R, &[1, 2, 3]);
    assert_eq!(
        (plan.to_store, plan.slots, plan.evicted),
        (vec![], vec![], vec![])
    );
    assert_eq!(t.stats().admission_skips, 3);
    assert_eq!(t.stats().admission_skips, 3, "a read resets nothing");
}

/// Mirrors vLLM's `test_store_threshold_does_not_hide_ready_reuse`: a
/// resident key whose offers the table forgot is still found ready (reused,
/// not a skipped store), and its reuse refreshes it.
#[test]
fn admission_does_not_hide_the_reuse_of_a_ready_key() {
    let mut t = configured(2, PolicyKind::Lru, 2, 2);
    let (head, tail, noise_1, noise_2, replacement) = (0, 1, 2, 3, 4);
    let seed = RequestId(10);
    t.begin_request(seed).unwrap();
    assert_eq!(offer(&mut t, seed, &[head, tail]), Some(vec![]));
    assert_eq!(
        store(&mut t, seed, &[head, tail]).to_store,
        ks(&[head, tail])
    );
    t.on_request_finished(seed).unwrap();
    // The noise ages both resident keys out of the table.
    let noise = RequestId(11);
    t.begin_request(noise).unwrap();
    assert_eq!(offer(&mut t, noise, &[noise_1, noise_2]), Some(vec![]));
    let reuse = RequestId(12);
    t.begin_request(reuse).unwrap();
    let skips = t.stats().admission_skips;
    assert_eq!(offer(&mut t, reuse, &[tail]), Some(vec![]));
    assert_eq!(
        t.stats().admission_skips,
        skips,
        "a resident key is no skipped store"
    );
    t.on_request_finished(reuse).unwrap();
    let r = RequestId(13);
    t.begin_request(r).unwrap();
    assert_eq!(offer(&mut t, r, &[replacement]), Some(vec![]));
    let mut plan = StorePlan::default();
    t.prepare_store(r, &ks(&[replacement]), &mut plan).unwrap();
    assert_eq!(
        plan.evicted,
        ks(&[head]),
        "the reused tail outlives the head"
    );
}

/// The events drained, consecutive keys of one kind together.
fn drain(t: &mut PrimaryTier) -> Vec<(EventKind, Vec<Key>)> {
    let mut events = Vec::new();
    t.take_events(&mut events);
    let mut out: Vec<(EventKind, Vec<Key>)> = Vec::new();
    for e in events {
        match out.last_mut() {
            Some((kind, keys)) if *kind == e.kind => keys.extend(e.key),
            _ => out.push((e.kind, e.key.into_iter().collect())),
        }
    }
    out
}

use EventKind::{Removed, Stored};

/// Mirrors vLLM's `test_cpu_eviction_removed_precedes_stored`.
#[test]
fn an_eviction_is_announced_before_the_store_that_takes_its_slot() {
    for p in [PolicyKind::Lru, PolicyKind::Arc] {
        let mut t = tier(2, p);
        t.begin_request(R).unwrap();
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
    t.begin_request(any).unwrap();
    let mut plan = StorePlan::default();
    t.prepare_store(any, &ks(&[1, 2]), &mut plan).unwrap();
    assert_eq!((&plan.to_store, &plan.slots), (&ks(&[1, 2]), &vec![0, 1]));
    assert_eq!(t.lookup(&k(1)), PrimaryLookup::HitPending);
    assert_eq!(t.lookup(&k(2)), PrimaryLookup::HitPending);
    assert_eq!(drain(&mut t), vec![]);
    t.complete_store(&ks(&[1, 2]), true);
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
    t.complete_store(&ks(&[2, 3, 4, 5]), true);
    assert_eq!(t.lookup(&k(1)), PrimaryLookup::Miss);
    for n in [2, 3, 4, 5] {
        assert_eq!(t.lookup(&k(n)), PrimaryLookup::Hit);
    }
    let load = RequestId(21);
    t.begin_request(load).unwrap();
    let mut slots = Vec::new();
    t.prepare_load(load, &ks(&[2, 3]), &mut slots).unwrap();
    assert_eq!(slots, vec![1, 2]);
    assert_eq!(
        offer(&mut t, any, &[6, 7, 8]),
        None,
        "2 and 3 are being loaded"
    );
    t.complete_load(load, &ks(&[2, 3])).unwrap();
    t.on_request_finished(load).unwrap();
    // The loaded prefix [2, 3] is most recent, its tail before its head.
    t.prepare_store(any, &ks(&[6, 7, 8]), &mut plan).unwrap();
    assert_eq!(
        (&plan.to_store, &plan.slots, &plan.evicted),
        (&ks(&[6, 7, 8]), &vec![2, 0, 3], &ks(&[4, 5, 3]))
    );
    t.complete_store(&ks(&[6, 7, 8]), true);
    t.touch(any, &ks(&[2, 6, 7])).unwrap();
    t.prepare_store(any, &ks(&[9]), &mut plan).unwrap();
    assert_eq!(
        (&plan.to_store, &plan.slots, &plan.evicted),
        (&ks(&[9]), &vec![3], &ks(&[8]))
    );
    t.complete_store(&ks(&[7, 9]), false);
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
    t.begin_request(R).unwrap();
    assert!(offer(&mut t, R, &[1, 2]).is_some());
    t.complete_store(&ks(&[1, 2]), false);
    assert!(offer(&mut t, R, &[1]).is_some()); // a retry re-allocates 1
    store(&mut t, R, &[3]);
    assert_eq!(drain(&mut t), vec![(Stored, ks(&[3]))]);
    assert_eq!(drain(&mut t), vec![]);
}

// ---- vLLM's TestARCPolicy, through the tier's interface ----

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
    t.complete_store(&ks(&[1, 2]), true);
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
        t.begin_request(q).unwrap();
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
                t.complete_store(&ks(new), true);
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
    t.complete_store(&ks(&[5]), false);
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

/// Mirrors vLLM's `test_already_stored_chunk_not_evicted_during_prepare_store`.
#[test]
fn a_resident_key_named_in_the_store_is_not_evicted_by_it() {
    for p in [PolicyKind::Lru, PolicyKind::Arc] {
        let mut t = tier(4, p);
        t.begin_request(R).unwrap();
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
