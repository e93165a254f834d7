//! Unit tests of what batches meet: busy and named keys passed over by an
//! eviction, keys a request presents more than once, parked keys, reading
//! ahead on large tables, batched lookups, commits of keys that moved,
//! sizes at their limits.

use super::*;

#[test]
fn pinned_write_pending_and_named_keys_are_all_passed_over_by_eviction() {
    for p in BOTH {
        let mut t = tier(6, p);
        t.request_begin(R).unwrap();
        store(&mut t, R, &[1, 2, 3, 4]);
        let mut plan = StorePlan::default();
        t.prepare_store(R, &ks(&[5, 6]), &mut plan).unwrap(); // pending, full
        let mut slots = Vec::new();
        t.prepare_load(R, &ks(&[1]), &mut slots).unwrap();
        // 1 pinned, 2 named, 5 and 6 pending: only 3 and 4 can go.
        t.prepare_store(R, &ks(&[2, 7, 8]), &mut plan).unwrap();
        assert_eq!(plan.evicted, ks(&[3, 4]));
        // Now 2 is the only idle key: naming it refuses, not naming it evicts it.
        assert_eq!(
            t.prepare_store(R, &ks(&[9, 2]), &mut plan).unwrap(),
            StoreOutcome::Refused
        );
        t.prepare_store(R, &ks(&[9]), &mut plan).unwrap();
        assert_eq!(plan.evicted, ks(&[2]));
        t.check_invariants().unwrap();
    }
}

#[test]
fn a_request_records_each_key_once_however_often_it_presents_it() {
    for p in BOTH {
        let mut t = tier(8, p);
        t.request_begin(R).unwrap();
        store(&mut t, R, &[1, 2, 3]);
        let mut slots = Vec::new();
        // A record per presentation would show as thousands of entries
        // (tens under Miri, a thousand times slower).
        let rounds = if cfg!(miri) { 10 } else { 1000 };
        for _ in 0..rounds {
            t.prepare_load(R, &ks(&[3, 2]), &mut slots).unwrap();
            t.complete_load(R, &ks(&[3, 2])).unwrap();
            store(&mut t, R, &[1, 3]);
        }
        let record = &t.requests[&R];
        assert_eq!(
            record.accesses.len(),
            3,
            "{p:?}: one entry per distinct key"
        );
        let seen: Vec<(Key, u32, bool)> = record
            .accesses
            .iter()
            .map(|a| (a.key, a.slot, a.reused))
            .collect();
        assert_eq!(
            seen,
            vec![(k(1), 0, false), (k(2), 1, false), (k(3), 2, false)],
            "{p:?}: first-presentation order, with the keys' slots; all were \
             stored by the request, so finding them ready later is no reuse"
        );
        t.request_finished(R).unwrap();
        if p == PolicyKind::Lru {
            // Head most recent: 1 (first presented), then 2, then 3.
            assert_eq!(order(&t), ks(&[3, 2, 1]));
        } else {
            assert_eq!(
                (arc_stats(&t).0, arc_stats(&t).1),
                (3, 0),
                "only inserted: refreshed in T1"
            );
            assert_eq!(order(&t), ks(&[3, 2, 1]));
        }
        t.check_invariants().unwrap();
    }
}

#[test]
fn busy_keys_passed_over_once_are_parked_and_come_back_at_their_recency() {
    for p in BOTH {
        let mut t = tier(100, p);
        t.request_begin(R).unwrap();
        let all: Vec<u32> = (0..100).collect();
        store(&mut t, R, &all);
        // Pin the 90 oldest keys: the first eviction passes over them once.
        let old = ks(&all[..90]);
        let mut slots = Vec::new();
        t.pin_for_transfer(&old, &mut slots).unwrap();
        let plan = store(&mut t, R, &[1000]);
        assert_eq!(plan.evicted, ks(&[90]), "{p:?}");
        assert_eq!(t.policy.candidate_order().len(), 10, "{p:?}: 90 parked");
        t.check_invariants().unwrap();
        // Later evictions meet no pinned key at all.
        let plan = store(&mut t, R, &[1001]);
        assert_eq!(plan.evicted, ks(&[91]), "{p:?}");
        // Unpinned, key 5 is a candidate again at its old recency: first.
        t.unpin_for_transfer(&ks(&[5])).unwrap();
        t.check_invariants().unwrap();
        let plan = store(&mut t, R, &[1002, 1003]);
        assert_eq!(plan.evicted, ks(&[5, 92]), "{p:?}");
        t.unpin_for_transfer(&ks(&all[..90])[..5]).unwrap();
        t.unpin_for_transfer(&ks(&all[6..90])).unwrap();
        t.check_invariants().unwrap();
        let plan = store(&mut t, R, &[1004, 1005, 1006]);
        assert_eq!(plan.evicted, ks(&[0, 1, 2]), "{p:?}");
        t.check_invariants().unwrap();
    }
}

#[test]
fn large_tiers_prefetch_and_keep_their_invariants() {
    // Tables beyond the CPU caches, where what batches read ahead matters.
    // Miri neither has caches nor gets through 2^16 keys in minutes: there
    // the same batches (longer than the read-ahead, evicting) run on a
    // small tier.
    let (n, evictions) = if cfg!(miri) {
        (64 + 16, 40)
    } else {
        ((1u32 << 16) + 64, 200)
    };
    for p in BOTH {
        let mut t = tier(n, p);
        t.request_begin(R).unwrap();
        let all: Vec<u32> = (0..n + evictions).collect();
        for chunk in all.chunks(40) {
            store(&mut t, R, chunk);
        }
        assert_eq!(t.stats().evictions, evictions as u64, "{p:?}");
        let mut slots = Vec::new();
        let some = ks(&all[n as usize..n as usize + 40]);
        t.prepare_load(R, &some, &mut slots).unwrap();
        assert_eq!(slots.len(), 40);
        t.complete_load(R, &some).unwrap();
        assert_eq!(t.lookup(&k(0)), PrimaryLookup::Miss);
        assert_eq!(t.lookup(&k(n + evictions - 1)), PrimaryLookup::Hit);
        t.request_finished(R).unwrap();
        t.check_invariants().unwrap();
    }
}

#[test]
fn same_key_agrees_with_key_equality_at_every_length() {
    let mut keys = Vec::new();
    for len in 1..=64usize {
        let bytes: Vec<u8> = (0..len as u8).collect();
        keys.push(Key::new(&bytes).unwrap());
        for flip in [0, len / 2, len - 1] {
            let mut other = bytes.clone();
            other[flip] ^= 0x80;
            keys.push(Key::new(&other).unwrap());
        }
    }
    // Every pair; under Miri, where the 65,536 pairs take minutes, each key
    // with the keys of its own and the adjacent lengths (within 7 places
    // of it: four keys per length, in length order).
    let near = if cfg!(miri) { 7 } else { keys.len() };
    for (i, a) in keys.iter().enumerate() {
        for b in &keys[i.saturating_sub(near)..(i + near + 1).min(keys.len())] {
            assert_eq!(slots::same_key(a, b), a == b, "{a:?} {b:?}");
        }
    }
}

#[test]
fn arc_ghosts_of_tiny_tiers_fit_their_index() {
    // Ghost lists of a 1..8-slot tier fill up to capacity ghosts each.
    for cap in 1..=8u32 {
        let mut t = tier(cap, PolicyKind::Arc);
        t.request_begin(R).unwrap();
        // Both ghost lists are full after 4 x cap - 2 stores; under Miri,
        // a thousand times slower, the churn stops two stores later.
        let stores = if cfg!(miri) { 4 * cap } else { 64 };
        for i in 0..stores {
            store(&mut t, R, &[i]);
            if i % 2 == 0 {
                t.touch(R, &ks(&[i])).unwrap();
            }
        }
        let s = t.stats();
        assert!(s.arc_b1 <= cap && s.arc_b2 <= cap, "{cap}: {s:?}");
        assert!(s.arc_b1 + s.arc_b2 > cap, "{cap}: both ghost lists used");
        t.check_invariants().unwrap();
    }
}

#[test]
fn batched_lookups_agree_with_single_lookups() {
    // Small and large tiers; batches across read-ahead distances,
    // with misses, write-pending and ready keys, and repeats.  Under Miri,
    // which has no caches and takes minutes to fill 2^16 slots, the
    // larger tier is 256 + 8 slots.
    let large = if cfg!(miri) { 256 + 8 } else { (1 << 16) + 8 };
    for n in [64u32, large] {
        let mut t = tier(n, PolicyKind::Lru);
        t.request_begin(R).unwrap();
        let ready: Vec<u32> = (0..n / 2).collect();
        for chunk in ready.chunks(40) {
            store(&mut t, R, chunk);
        }
        let mut plan = StorePlan::default();
        let pending = ks(&[n / 2, n / 2 + 1, n / 2 + 2]);
        t.prepare_store(R, &pending, &mut plan).unwrap();
        assert_eq!(plan.to_store.len(), 3);
        let mut probe: Vec<Key> = (0..40u32).map(|i| k(i * (n / 80) % (n / 2))).collect();
        probe.extend((0..13u32).map(|i| k(n + 1000 + i)));
        probe.extend(&pending);
        probe.push(probe[0]);
        let mut out = vec![PrimaryLookup::Miss; probe.len() + 2];
        out[probe.len()] = PrimaryLookup::Hit;
        t.lookup_batch(&probe, &mut out);
        for (key, got) in probe.iter().zip(&out) {
            assert_eq!(*got, t.lookup(key), "{n}: {key:?}");
        }
        assert_eq!(
            out[probe.len()],
            PrimaryLookup::Hit,
            "extra entries left alone"
        );
        let kinds = |want: PrimaryLookup| out[..probe.len()].iter().filter(|&&r| r == want).count();
        assert_eq!(
            [
                PrimaryLookup::Hit,
                PrimaryLookup::Miss,
                PrimaryLookup::HitPending
            ]
            .map(kinds),
            [41, 13, 3],
            "{n}"
        );
    }
}

#[test]
fn a_tier_reads_ahead_from_the_size_beyond_the_caches() {
    use crate::primary::prefetch::READ_AHEAD_MIN_SLOTS;
    assert!(!slots::Slots::new(16384).unwrap().read_ahead);
    assert!(
        !slots::Slots::new(READ_AHEAD_MIN_SLOTS - 1)
            .unwrap()
            .read_ahead
    );
    assert!(slots::Slots::new(READ_AHEAD_MIN_SLOTS).unwrap().read_ahead);
}

#[test]
fn transfer_unpins_at_known_slots_reading_ahead_answer_as_without() {
    // Batches longer than the read-ahead: each key unpinned where it was
    // pinned, whichever slots are given (right, stale, or short).
    for p in BOTH {
        let mut seen = [Vec::new(), Vec::new()];
        for (ahead, out) in [true, false].into_iter().zip(&mut seen) {
            let mut t = tier(48, p);
            t.set_read_ahead(ahead);
            t.request_begin(R).unwrap();
            let ids: Vec<u32> = (0..30).collect();
            store(&mut t, R, &ids);
            for n in [1, 8, 9, 20, 30] {
                let keys = ks(&ids[..n]);
                let mut slots = Vec::new();
                t.pin_for_transfer(&keys, &mut slots).unwrap();
                let pinned = t.stats().pinned;
                let mut given = slots.clone();
                given.rotate_left(n / 3);
                t.unpin_for_transfer_in(&keys, &given).unwrap();
                out.push(format!("{n} {slots:?} {pinned} {}", t.stats().pinned));
                t.check_invariants().unwrap();
            }
        }
        assert_eq!(seen[0], seen[1], "{p:?}");
    }
}

#[test]
fn reading_ahead_or_not_gives_the_same_answers_plans_and_order() {
    // The same calls, batches longer than the read-ahead, keys presented
    // twice, evictions and commits, on a small tier reading ahead and one
    // not: every plan, slot, lookup and the final order agree.
    for p in BOTH {
        let mut tiers = [tier(48, p), tier(48, p)];
        tiers[0].set_read_ahead(true);
        tiers[1].set_read_ahead(false);
        let mut seen = [Vec::new(), Vec::new()];
        for (t, out) in tiers.iter_mut().zip(&mut seen) {
            for round in 0..12u32 {
                let req = RequestId(100 + round as u64);
                t.request_begin(req).unwrap();
                let base = round * 7;
                let keys: Vec<u32> = (base..base + 30).chain([base, base + 1]).collect();
                let plan = store(t, req, &keys);
                out.push(format!("{:?} {:?}", plan.to_store, plan.evicted));
                let hits: Vec<u32> = (base..base + 20).collect();
                let mut slots = Vec::new();
                t.prepare_load(req, &ks(&hits), &mut slots).unwrap();
                t.touch(req, &ks(&hits)).unwrap();
                t.complete_load(req, &ks(&hits)).unwrap();
                out.push(format!("{slots:?}"));
                t.request_finished(req).unwrap();
                let found: Vec<_> = (0..120).map(|n| t.lookup(&k(n))).collect();
                out.push(format!("{found:?}"));
                t.check_invariants().unwrap();
            }
            out.push(format!("{:?}", order(t)));
        }
        assert_eq!(seen[0], seen[1], "{p:?}");
    }
}

#[test]
fn keys_read_ahead_are_resolved_against_the_table_at_their_turn() {
    // A key absent when its index line was read ahead, stored before its
    // turn, is found; a key released before its turn is absent.
    let mut s = slots::Slots::new(64).unwrap();
    s.read_ahead = true;
    let keys = ks(&[1, 2, 3, 4]);
    let put = |s: &mut slots::Slots, key: &Key| {
        let slot = s.allocate().unwrap();
        let h = s.hash(key);
        s.occupy(slot, key, h, 0);
        slot
    };
    let one = put(&mut s, &keys[0]);
    let two = put(&mut s, &keys[1]);
    let at = |j: usize| &keys[j];
    let mut ahead = slots::Lookahead::new(&s, keys.len(), at);
    let three = put(&mut s, &keys[2]);
    s.release(two, s.hash(&keys[1]));
    let found: Vec<u32> = (0..keys.len()).map(|i| ahead.find(&s, i, at).1).collect();
    assert_eq!(found, vec![one, NIL, three, NIL]);
}

#[test]
fn commits_find_keys_that_moved_since_they_were_recorded() {
    // A request records where each key was; keys evicted and stored again
    // elsewhere by other requests, or gone, are still committed correctly.
    let mut t = tier(4, PolicyKind::Lru);
    let other = RequestId(2);
    t.request_begin(R).unwrap();
    t.request_begin(other).unwrap();
    store(&mut t, R, &[1, 2]); // slots 0, 1
    store(&mut t, other, &[3, 4]); // slots 2, 3
    // Other evicts 1 and 2 (oldest), then stores 1 again: it lands in a freed slot.
    store(&mut t, other, &[5, 6]);
    assert_eq!(t.lookup(&k(1)), PrimaryLookup::Miss);
    store(&mut t, other, &[1]);
    let slot_of_1 = t.slot_of(&k(1)).unwrap();
    assert_eq!(
        t.slot_of(&k(5)),
        Some(1),
        "5 took 2's slot, 1's old slot went to 6"
    );
    assert_ne!(slot_of_1, 0);
    t.request_finished(R).unwrap();
    // R's commit made 1 most recent, at its new slot; 2 is gone, and the
    // slot it had (now 5's) was not committed in its place.
    assert_eq!(order(&t).last(), Some(&k(1)));
    assert_eq!(order(&t), ks(&[4, 5, 6, 1]));
    t.check_invariants().unwrap();
}

#[test]
fn sizes_beyond_their_limits_are_invalid_arguments() {
    let config = |admission_table_size| PrimaryConfig {
        capacity: 8,
        store_threshold: 2,
        admission_table_size,
        ..Default::default()
    };
    let e = PrimaryTier::new(config(MAX_ADMISSION_TABLE_SIZE + 1)).unwrap_err();
    assert!(matches!(e, Error::InvalidArgument(_)), "{e}");
    assert!(e.to_string().contains("admission_table_size"), "{e}");
    // At the limit the table allocates nothing up front: it grows with offers.
    let mut t = PrimaryTier::new(config(MAX_ADMISSION_TABLE_SIZE)).unwrap();
    t.request_begin(R).unwrap();
    let mut plan = StorePlan::default();
    t.prepare_store(R, &ks(&[1, 2]), &mut plan).unwrap();
    assert!(plan.to_store.is_empty(), "first offers are only counted");
    t.prepare_store(R, &ks(&[1, 2]), &mut plan).unwrap();
    assert_eq!(plan.to_store, ks(&[1, 2]));
    t.check_invariants().unwrap();
}
