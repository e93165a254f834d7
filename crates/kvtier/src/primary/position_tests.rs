//! Unit tests of the [0.33] rules about token positions, the rank of an
//! active request (lru), KV-cache groups and the order of a request's
//! finish.  vLLM 0.33.0's own tests of those rules
//! (`tests/v1/kv_offload/cpu/test_manager.py`), re-expressed through this
//! tier's public interface, are in the submodule `vllm`
//! (`primary/position_tests/vllm.rs`).

use super::*;

mod vllm;

fn k(n: u32) -> Key {
    Key::new(&n.to_be_bytes()).unwrap()
}

fn ks(ns: &[u32]) -> Vec<Key> {
    ns.iter().map(|&n| k(n)).collect()
}

/// A key as vLLM makes it: `name` then the 4-byte big-endian `group`.
fn gk(name: &str, group: u32) -> Key {
    let mut b = name.as_bytes().to_vec();
    b.extend_from_slice(&group.to_be_bytes());
    Key::new(&b).unwrap()
}

fn tier(capacity: u32, policy: PolicyKind) -> PrimaryTier {
    PrimaryTier::new(PrimaryConfig {
        capacity,
        policy,
        event_capacity: 1024,
        ..Default::default()
    })
    .unwrap()
}

fn grouped(capacity: u32, policy: PolicyKind) -> PrimaryTier {
    PrimaryTier::new(PrimaryConfig {
        capacity,
        policy,
        kv_groups: true,
        ..Default::default()
    })
    .unwrap()
}

fn lru(capacity: u32) -> PrimaryTier {
    tier(capacity, PolicyKind::Lru)
}

const R: RequestId = RequestId(1);
const S: RequestId = RequestId(2);
const BOTH: [PolicyKind; 2] = [PolicyKind::Lru, PolicyKind::Arc];

/// `prepare_store` of `keys` for `req`: the plan, or `None` if refused.
fn offer(t: &mut PrimaryTier, req: RequestId, keys: &[Key]) -> Option<StorePlan> {
    let mut plan = StorePlan::default();
    match t.prepare_store(req, keys, &mut plan).unwrap() {
        StoreOutcome::Planned => Some(plan),
        StoreOutcome::Refused => None,
    }
}

/// Stores `keys` for `req` and completes what the plan stores.
fn put(t: &mut PrimaryTier, req: RequestId, keys: &[Key]) -> StorePlan {
    let plan = offer(t, req, keys).expect("store planned");
    t.complete_store(req, &plan.to_store, true);
    plan
}

/// Gives `keys` positions 16, 32, 48, ... (block i ends at 16 x (i + 1)).
fn blocks(t: &mut PrimaryTier, req: RequestId, keys: &[Key]) {
    let pos: Vec<u64> = (1..=keys.len() as u64).map(|i| 16 * i).collect();
    t.set_positions(req, keys, &pos).unwrap();
}

fn pin(t: &mut PrimaryTier, req: RequestId, keys: &[Key]) {
    let mut slots = Vec::new();
    t.prepare_load(req, keys, &mut slots).unwrap();
}

/// The keys an eviction of `n` by a fresh request takes: stores `n` new
/// keys (numbers from 1000) that need exactly `n` evictions.
fn pressure(t: &mut PrimaryTier, n: u32) -> Vec<Key> {
    let p = RequestId(999);
    t.request_begin(p).unwrap();
    let free = t.capacity() - t.stats().used;
    let plan = offer(t, p, &ks(&(1000..1000 + n + free).collect::<Vec<_>>()))
        .expect("pressure store planned");
    t.check_invariants().unwrap();
    plan.evicted
}

// ---- ranks of an active request (lru) ----

#[test]
fn lru_the_tail_of_an_active_request_is_evicted_before_its_head() {
    let mut t = lru(4);
    t.request_begin(R).unwrap();
    blocks(&mut t, R, &ks(&[1, 2, 3]));
    put(&mut t, R, &ks(&[1, 2, 3]));
    // Without positions the last stored (3) would be the most recent.
    assert_eq!(t.eviction_order(), ks(&[3, 2, 1]));
    assert_eq!(pressure(&mut t, 2), ks(&[3, 2]));
}

#[test]
fn lru_every_batch_of_a_request_shares_its_one_rank() {
    let mut t = lru(8);
    t.request_begin(R).unwrap();
    t.request_begin(S).unwrap();
    blocks(&mut t, R, &ks(&[1, 2, 3]));
    put(&mut t, R, &ks(&[1]));
    // Another request's key, without a position, after R got its rank.
    put(&mut t, S, &ks(&[9]));
    put(&mut t, R, &ks(&[2]));
    put(&mut t, R, &ks(&[3]));
    // R's later batches rank below 9: they share R's first rank.
    assert_eq!(t.eviction_order(), ks(&[3, 2, 1, 9]));
    // R's finish commits head most recent, after 9.
    t.request_finished(R).unwrap();
    assert_eq!(t.eviction_order(), ks(&[9, 3, 2, 1]));
    t.check_invariants().unwrap();
}

#[test]
fn lru_a_request_has_its_rank_from_its_first_recorded_access() {
    let mut t = lru(8);
    t.request_begin(R).unwrap();
    t.request_begin(S).unwrap();
    // R's first access (a key without a position) gives R its rank ...
    put(&mut t, R, &ks(&[1]));
    put(&mut t, S, &ks(&[9]));
    // ... so a key stored later with a position ranks (R, -32): below 9,
    // and below 1 too (1 got a fresh rank, after R's).
    t.set_positions(R, &ks(&[2]), &[32]).unwrap();
    put(&mut t, R, &ks(&[2]));
    assert_eq!(t.eviction_order(), ks(&[2, 1, 9]));
    t.check_invariants().unwrap();
}

#[test]
fn lru_an_access_only_ever_raises_a_rank() {
    let mut t = lru(8);
    for r in 1..=3 {
        t.request_begin(RequestId(r)).unwrap();
    }
    let (old, mid, new) = (RequestId(1), RequestId(2), RequestId(3));
    // old gets its rank first, then mid's key, then new's.
    put(&mut t, old, &ks(&[1]));
    put(&mut t, mid, &ks(&[2]));
    put(&mut t, new, &ks(&[3]));
    t.set_positions(old, &ks(&[2, 3]), &[16, 32]).unwrap();
    // 2 and 3 were stored after old got its rank: old's load leaves them.
    pin(&mut t, old, &ks(&[2, 3]));
    t.complete_load(old, &ks(&[2, 3])).unwrap();
    assert_eq!(t.eviction_order(), ks(&[1, 2, 3]));
    // new's rank is above 1's: new's load raises 1 into new's rank.
    t.set_positions(new, &ks(&[1]), &[16]).unwrap();
    pin(&mut t, new, &ks(&[1]));
    t.complete_load(new, &ks(&[1])).unwrap();
    assert_eq!(t.eviction_order(), ks(&[2, 1, 3]));
    t.check_invariants().unwrap();
}

#[test]
fn lru_an_access_raises_a_key_of_an_older_request_into_the_newer_one() {
    let mut t = lru(8);
    t.request_begin(R).unwrap();
    t.request_begin(S).unwrap();
    blocks(&mut t, R, &ks(&[1, 2]));
    put(&mut t, R, &ks(&[1, 2]));
    put(&mut t, S, &ks(&[7]));
    // S presents R's head at position 16: (S, -16) > (R, -16).
    t.set_positions(S, &ks(&[1, 8]), &[16, 32]).unwrap();
    pin(&mut t, S, &ks(&[1]));
    t.complete_load(S, &ks(&[1])).unwrap();
    put(&mut t, S, &ks(&[8]));
    assert_eq!(t.eviction_order(), ks(&[2, 8, 1, 7]));
    // A second presentation changes nothing (recorded once).
    t.set_positions(S, &ks(&[1]), &[64]).unwrap();
    pin(&mut t, S, &ks(&[1]));
    t.complete_load(S, &ks(&[1])).unwrap();
    assert_eq!(t.eviction_order(), ks(&[2, 8, 1, 7]));
    t.check_invariants().unwrap();
}

#[test]
fn lru_positions_given_after_keys_were_stored_compare_with_earlier_ranks() {
    // The tier numbers its list when the first position arrives: keys
    // stored before then keep their order relative to requests' ranks.
    let mut t = lru(8);
    t.request_begin(S).unwrap();
    put(&mut t, S, &ks(&[1, 3]));
    t.request_begin(R).unwrap();
    put(&mut t, R, &ks(&[5])); // R's rank: above 1 and 3
    put(&mut t, S, &ks(&[2])); // above R's rank
    assert_eq!(t.eviction_order(), ks(&[1, 3, 5, 2]));
    blocks(&mut t, R, &ks(&[2, 1]));
    pin(&mut t, R, &ks(&[1, 2]));
    t.complete_load(R, &ks(&[1, 2])).unwrap();
    // 1 (below R's rank) is raised to (R, -32); 2 (above) stays.
    assert_eq!(t.eviction_order(), ks(&[3, 1, 5, 2]));
    t.check_invariants().unwrap();
}

#[test]
fn lru_a_block_keeps_position_order_whatever_order_keys_arrive_in() {
    let mut t = lru(16);
    t.request_begin(R).unwrap();
    let keys = ks(&[1, 2, 3, 4, 5, 6, 7, 8]);
    blocks(&mut t, R, &keys);
    // Head first, then tail first, then the middle (backfills).
    for batch in [&[1, 2][..], &[8, 7], &[4], &[6, 3], &[5]] {
        put(&mut t, R, &ks(batch));
        t.check_invariants().unwrap();
    }
    assert_eq!(t.eviction_order(), ks(&[8, 7, 6, 5, 4, 3, 2, 1]));
    // Equal positions: the smaller key bytes rank lower.
    t.set_positions(R, &ks(&[20, 10]), &[200, 200]).unwrap();
    put(&mut t, R, &ks(&[20, 10]));
    assert_eq!(&t.eviction_order()[..3], &ks(&[10, 20, 8])[..]);
    t.check_invariants().unwrap();
}

#[test]
fn lru_keys_without_positions_behave_as_if_none_were_ever_given() {
    // The same calls, once on a tier where another request has positions
    // for keys it never presents: the order of every key is the same.
    let run = |with_positions: bool| {
        let mut t = lru(6);
        t.request_begin(R).unwrap();
        t.request_begin(S).unwrap();
        if with_positions {
            blocks(&mut t, S, &ks(&[100, 101]));
        }
        put(&mut t, R, &ks(&[1, 2, 3]));
        put(&mut t, S, &ks(&[4]));
        t.touch(S, &ks(&[2, 1])).unwrap();
        pin(&mut t, S, &ks(&[3]));
        put(&mut t, R, &ks(&[5, 6, 7]));
        t.complete_load(S, &ks(&[3])).unwrap();
        t.request_finished(R).unwrap();
        let o = t.eviction_order();
        t.request_finished(S).unwrap();
        t.check_invariants().unwrap();
        (o, t.eviction_order())
    };
    assert_eq!(run(true), run(false));
}

#[test]
fn lru_reset_starts_a_new_generation_and_keeps_positions() {
    let mut t = lru(4);
    t.request_begin(R).unwrap();
    t.request_begin(S).unwrap();
    blocks(&mut t, R, &ks(&[1, 2]));
    put(&mut t, R, &ks(&[1]));
    t.reset();
    // S accesses first in the new generation, then R (a new rank, after S).
    put(&mut t, S, &ks(&[9]));
    put(&mut t, R, &ks(&[1, 2]));
    // R's positions survived the reset: 2 (tail) below 1 (head).
    assert_eq!(t.eviction_order(), ks(&[9, 2, 1]));
    t.request_finished(R).unwrap();
    assert_eq!(t.eviction_order(), ks(&[9, 2, 1]));
    t.check_invariants().unwrap();
}

#[test]
fn lru_ranks_of_many_active_requests_are_recycled() {
    // More active requests than the tier first has room for, finishing
    // and beginning again, with and without positions.
    let mut t = lru(64);
    for round in 0..3u32 {
        for r in 0..40u32 {
            let id = RequestId(r as u64 + 10);
            t.request_begin(id).unwrap();
            let key = k(round * 100 + r);
            if r % 2 == 0 {
                t.set_positions(id, &[key], &[16]).unwrap();
            }
            put(&mut t, id, &[key]);
        }
        t.check_invariants().unwrap();
        for r in 0..40u32 {
            t.request_finished(RequestId(r as u64 + 10)).unwrap();
        }
        t.check_invariants().unwrap();
        assert_eq!(t.eviction_order().len() as u32, t.stats().used);
    }
    let bytes = t.metadata_bytes_per_slot();
    for r in 0..40u32 {
        t.request_begin(RequestId(r as u64 + 10)).unwrap();
        put(&mut t, RequestId(r as u64 + 10), &[k(r)]);
        t.request_finished(RequestId(r as u64 + 10)).unwrap();
    }
    assert_eq!(
        t.metadata_bytes_per_slot(),
        bytes,
        "markers reused, no growth"
    );
}

// ---- what a request records ----

#[test]
fn a_refused_store_records_its_keys_for_the_finish() {
    for p in BOTH {
        let mut t = tier(1, p);
        t.request_begin(R).unwrap();
        t.request_begin(S).unwrap();
        put(&mut t, S, &ks(&[1]));
        pin(&mut t, S, &ks(&[1]));
        // R offers 2 (a store candidate) and 1 (ready): refused.
        assert!(offer(&mut t, R, &ks(&[2, 1])).is_none());
        t.complete_load(S, &ks(&[1])).unwrap();
        t.request_finished(S).unwrap();
        // 1 was found ready by R: a reuse, committed at R's finish.
        t.request_finished(R).unwrap();
        if p == PolicyKind::Arc {
            assert_eq!((t.stats().arc_t1, t.stats().arc_t2), (0, 1));
        }
        t.check_invariants().unwrap();
    }
    // lru: a candidate of a refused store that another request stored
    // since is committed at the finish of the request that offered it.
    let mut t = lru(2);
    t.request_begin(R).unwrap();
    t.request_begin(S).unwrap();
    put(&mut t, S, &ks(&[1]));
    pin(&mut t, S, &ks(&[1]));
    assert!(offer(&mut t, R, &ks(&[2, 3])).is_none());
    t.complete_load(S, &ks(&[1])).unwrap();
    t.request_finished(S).unwrap();
    put_new(&mut t, RequestId(3), &ks(&[2, 4]));
    assert_eq!(t.eviction_order(), ks(&[2, 4]));
    t.request_finished(R).unwrap();
    assert_eq!(t.eviction_order(), ks(&[4, 2]));
    t.check_invariants().unwrap();
}

fn put_new(t: &mut PrimaryTier, req: RequestId, keys: &[Key]) -> StorePlan {
    if !t.is_active(req) {
        t.request_begin(req).unwrap();
    }
    put(t, req, keys)
}

// ---- positions and groups: arguments ----

#[test]
fn set_positions_checks_its_arguments_and_changes_nothing_on_error() {
    let mut t = lru(4);
    assert!(matches!(
        t.set_positions(R, &ks(&[1]), &[16]),
        Err(Error::UnknownRequest(_))
    ));
    t.request_begin(R).unwrap();
    assert!(matches!(
        t.set_positions(R, &ks(&[1, 2]), &[16]),
        Err(Error::InvalidArgument(_))
    ));
    t.set_positions(R, &[], &[]).unwrap();
    // Nothing was given: the request's keys behave as without positions.
    put(&mut t, R, &ks(&[1, 2]));
    assert_eq!(t.eviction_order(), ks(&[1, 2]));
    // A later position replaces an earlier one.
    t.set_positions(R, &ks(&[3, 4]), &[16, 32]).unwrap();
    t.set_positions(R, &ks(&[3]), &[48]).unwrap();
    put(&mut t, R, &ks(&[3, 4]));
    assert_eq!(&t.eviction_order()[..2], &ks(&[3, 4])[..]);
    t.request_finished(R).unwrap();
    assert!(matches!(
        t.set_positions(R, &ks(&[1]), &[16]),
        Err(Error::UnknownRequest(_))
    ));
}

#[test]
fn with_kv_groups_keys_too_short_for_a_group_are_refused() {
    for p in BOTH {
        let mut t = grouped(4, p);
        t.request_begin(R).unwrap();
        let short = Key::new(&[1, 2, 3, 4]).unwrap();
        let good = gk("a", 0);
        let e = t.set_positions(R, &[good, short], &[16, 32]).unwrap_err();
        assert!(matches!(e, Error::InvalidKey { index: 1, .. }), "{e}");
        let mut plan = StorePlan::default();
        let e = t.prepare_store(R, &[good, short], &mut plan).unwrap_err();
        assert!(matches!(e, Error::InvalidKey { index: 1, .. }), "{e}");
        assert_eq!(t.stats().used, 0, "nothing stored");
        put(&mut t, R, &[good]);
        let mut slots = Vec::new();
        let e = t.prepare_load(R, &[good, short], &mut slots).unwrap_err();
        assert!(matches!(e, Error::InvalidKey { index: 1, .. }), "{e}");
        assert_eq!(t.ref_count(&good), Some(0), "nothing pinned");
        // Every other call that takes a request's keys refuses it too,
        // changing nothing.
        t.prepare_load(R, &[good], &mut slots).unwrap();
        let before = (t.stats(), t.eviction_order());
        let e = t.touch(R, &[good, short]).unwrap_err();
        assert!(matches!(e, Error::InvalidKey { index: 1, .. }), "{e}");
        let e = t.complete_load(R, &[good, short]).unwrap_err();
        assert!(matches!(e, Error::InvalidKey { index: 1, .. }), "{e}");
        assert_eq!((t.stats(), t.eviction_order()), before, "{p:?}");
        assert_eq!(t.ref_count(&good), Some(1), "still pinned");
        let e = t.check_keys(&[good, good, short]).unwrap_err();
        assert!(matches!(e, Error::InvalidKey { index: 2, .. }), "{e}");
        t.check_keys(&[good]).unwrap();
        // A finished request's late completion too.
        t.request_finished(R).unwrap();
        let e = t.complete_load(R, &[short]).unwrap_err();
        assert!(matches!(e, Error::InvalidKey { index: 0, .. }), "{e}");
        t.complete_load(R, &[good]).unwrap();
        // Without the option, the same key is an ordinary key.
        let mut t = tier(4, p);
        t.request_begin(R).unwrap();
        put(&mut t, R, &[short]);
        t.check_keys(&[short]).unwrap();
        t.touch(R, &[short]).unwrap();
        t.prepare_load(R, &[short], &mut slots).unwrap();
        t.complete_load(R, &[short]).unwrap();
        t.check_invariants().unwrap();
    }
}

// ---- the finish order ----

/// The keys in the order `t`'s request `req` commits them, head first:
/// every key is resident, finished as the only access, so the lru order
/// after the finish is the commit order reversed.
fn finish_order(t: &mut PrimaryTier, req: RequestId) -> Vec<Key> {
    t.request_finished(req).unwrap();
    let mut o = t.eviction_order();
    o.reverse();
    o
}

#[test]
fn finish_goes_by_group_then_by_position_where_a_whole_group_has_them() {
    let mut t = grouped(8, PolicyKind::Lru);
    t.request_begin(R).unwrap();
    let (a0, b0, a1, b1, c1) = (gk("a", 0), gk("b", 0), gk("a", 1), gk("b", 1), gk("c", 1));
    // Group 0 fully positioned (presented tail first), group 1 partly.
    t.set_positions(R, &[a0, b0, a1, c1], &[16, 32, 16, 48])
        .unwrap();
    put(&mut t, R, &[c1, a1, b0, b1, a0]);
    assert_eq!(finish_order(&mut t, R), vec![a0, b0, c1, a1, b1]);
}

#[test]
fn finish_goes_by_position_across_groups_when_every_key_has_one() {
    let mut t = grouped(8, PolicyKind::Lru);
    t.request_begin(R).unwrap();
    let (h0, t0, h1, t1) = (gk("h", 0), gk("t", 0), gk("h", 1), gk("t", 1));
    t.set_positions(R, &[h0, h1, t0, t1], &[16, 16, 32, 32])
        .unwrap();
    put(&mut t, R, &[t1, h1, t0, h0]);
    // Equal positions: ascending group.
    assert_eq!(finish_order(&mut t, R), vec![h0, h1, t0, t1]);
}

#[test]
fn finish_without_groups_sorts_by_position_only_when_every_key_has_one() {
    let mut t = lru(8);
    t.request_begin(R).unwrap();
    t.set_positions(R, &ks(&[1, 2]), &[32, 16]).unwrap();
    put(&mut t, R, &ks(&[1, 2, 3]));
    // 3 has no position: first-presentation order.
    assert_eq!(finish_order(&mut t, R), ks(&[1, 2, 3]));
    t.request_begin(S).unwrap();
    t.set_positions(S, &ks(&[1, 2, 3]), &[32, 16, 8]).unwrap();
    pin(&mut t, S, &ks(&[1, 2, 3]));
    t.complete_load(S, &ks(&[1, 2, 3])).unwrap();
    assert_eq!(finish_order(&mut t, S), ks(&[3, 2, 1]));
}

#[test]
fn arc_finish_walks_the_same_order_from_the_tail() {
    let mut t = grouped(8, PolicyKind::Arc);
    t.request_begin(R).unwrap();
    let (h0, t0, h1, t1) = (gk("h", 0), gk("t", 0), gk("h", 1), gk("t", 1));
    put(&mut t, R, &[t1, h1, t0, h0]);
    t.request_finished(R).unwrap();
    // Inserted only: refreshed in T1, group 0's first key most recent.
    assert_eq!(t.eviction_order(), vec![h1, t1, h0, t0]);
    // Reused by S, every key positioned: T2, by position.
    t.request_begin(S).unwrap();
    t.set_positions(S, &[h0, h1, t0, t1], &[16, 16, 32, 32])
        .unwrap();
    pin(&mut t, S, &[t1, h1, t0, h0]);
    t.complete_load(S, &[t1, h1, t0, h0]).unwrap();
    t.request_finished(S).unwrap();
    assert_eq!(t.stats().arc_t2, 4);
    assert_eq!(t.eviction_order(), vec![t1, t0, h1, h0]);
    t.check_invariants().unwrap();
}
