//! The `kvtier_primary_*` C API called directly: NULL arguments, bad keys
//! and misuse return statuses with messages and change nothing; a refusal
//! is a successful call; stores, loads, touches, positions and KV groups
//! act as the Rust API does.

#[path = "support/primary_calls.rs"]
mod primary_calls;

use std::ptr;

use kvtier::dialect::*;
use kvtier::kvtier_key;
use kvtier::kvtier_status;
use kvtier::primary::*;
use primary_calls::*;

#[test]
fn constructor_checks_options_and_writes_out_only_on_success() {
    // NULL options are the defaults.
    let mut p = ptr::null_mut();
    assert_eq!(
        unsafe { kvtier_primary_new(ptr::null(), &mut p) },
        kvtier_status::Ok
    );
    assert!(!p.is_null());
    unsafe { kvtier_primary_free(p) };
    let mut p = ptr::null_mut();
    let mut o = kvtier_primary_options_default();
    o.capacity = 0;
    assert_eq!(
        unsafe { kvtier_primary_new(&o, &mut p) },
        kvtier_status::InvalidArgument
    );
    assert!(p.is_null());
    assert!(last_error().contains("capacity"), "{}", last_error());
    let o = kvtier_primary_options_default();
    assert_eq!(
        unsafe { kvtier_primary_new(&o, ptr::null_mut()) },
        kvtier_status::NullArgument
    );
    unsafe { kvtier_primary_free(ptr::null_mut()) };
}

#[test]
fn store_load_and_misuse_through_the_c_api() {
    let p = new(2, c"arc");
    let (a, b, c) = (b"aa".to_vec(), b"bbb".to_vec(), b"c".to_vec());
    let r = begin(p, c"r");
    let (st, s) = store_for(p, r, &[ck(&a), ck(&a), ck(&b)]);
    assert_eq!(st, kvtier_status::Ok);
    assert_eq!((s.refused, s.stored, s.evicted_count), (false, 2, 0));
    assert_eq!(
        &s.store_indices[..2],
        &[0, 2],
        "positions of first occurrences"
    );
    assert_eq!(&s.slots[..2], &[0, 1]);
    let keys = [ck(&a), ck(&b)];
    complete_for(p, r, &keys, true);

    // Pin a; store c evicts b.
    let mut slots = [0u32; 1];
    assert_eq!(
        unsafe { kvtier_primary_prepare_load(p, r, keys.as_ptr(), 1, slots.as_mut_ptr()) },
        kvtier_status::Ok
    );
    let (st, s) = store_for(p, r, &[ck(&c)]);
    assert_eq!(st, kvtier_status::Ok);
    assert_eq!(s.evicted_keys(), vec![b.clone()]);
    // Nothing evictable left: a refusal is a successful call.
    let d = b"d".to_vec();
    let (st, s) = store_for(p, r, &[ck(&d)]);
    assert_eq!(st, kvtier_status::Ok);
    assert!(s.refused);
    assert_eq!((s.stored, s.evicted_count), (0, 0));
    assert_eq!(s.slots[0], u32::MAX, "no array written on refusal");
    assert_eq!(
        s.store_indices[0],
        usize::MAX,
        "no array written on refusal"
    );

    // Bad key, unknown request, misuse.
    let long = [0u8; 65];
    let bad = [ck(&a), ck(&long)];
    assert_eq!(
        unsafe { kvtier_primary_touch(p, r, bad.as_ptr(), 2) },
        kvtier_status::InvalidKey
    );
    assert!(last_error().contains("position 1"), "{}", last_error());
    assert_eq!(
        unsafe { kvtier_primary_complete_load(p, r + 1, keys.as_ptr(), 1) },
        kvtier_status::UnknownRequest
    );
    let absent = [ck(&a), ck(&d)];
    assert_eq!(
        unsafe { kvtier_primary_complete_load(p, r, absent.as_ptr(), 2) },
        kvtier_status::KeyState
    );
    assert!(last_error().contains("position 1"), "{}", last_error());
    let stats = read_stats(p);
    assert_eq!((stats.pinned, stats.refusals, stats.arc_b1), (1, 1, 1));
    assert_eq!(
        unsafe { kvtier_primary_complete_load(p, r, keys.as_ptr(), 1) },
        kvtier_status::Ok
    );

    // Events, in pieces: stored a and b (one event), removed b.
    let mut ev = [no_event(); 1];
    let (mut n, mut more) = (9usize, false);
    assert_eq!(
        unsafe { kvtier_primary_take_events(p, ev.as_mut_ptr(), 1, &mut n, &mut more) },
        kvtier_status::Ok
    );
    assert_eq!((n, more), (1, true));
    assert_eq!(event_keys(&ev[0]), vec![a.clone(), b.clone()]);
    assert_eq!(
        unsafe { kvtier_primary_take_events(p, ptr::null_mut(), 0, &mut n, &mut more) },
        kvtier_status::Ok
    );
    assert_eq!((n, more), (0, true));
    assert_eq!(
        unsafe { kvtier_primary_take_events(p, ev.as_mut_ptr(), 1, &mut n, &mut more) },
        kvtier_status::Ok
    );
    assert_eq!((n, more), (1, false), "c is still being written: no event");
    assert_eq!(ev[0].kind, KVTIER_EVENT_REMOVED);
    assert_eq!(event_keys(&ev[0]), vec![b.clone()]);

    assert_eq!(
        lookup(p, &keys),
        (kvtier_status::Ok, answer(1, KVTIER_LOOKUP_MISS))
    );
    assert_eq!(unsafe { kvtier_primary_reset(p) }, kvtier_status::Ok);
    finish(p, r);
    assert_eq!(
        unsafe { kvtier_primary_request_finished(p, r) },
        kvtier_status::UnknownRequest
    );
    assert_eq!(
        unsafe { kvtier_primary_reset(ptr::null_mut()) },
        kvtier_status::NullArgument
    );
    unsafe { kvtier_primary_free(p) };
}

#[test]
fn long_lookups_agree_with_single_ones_and_a_bad_key_anywhere_writes_nothing() {
    // 300 keys (far more than a lookup reads ahead): ready, write-pending
    // and absent keys throughout.  A lookup of any prefix stops where the
    // lookups of its keys one by one first answer other than HIT, with
    // that key's answer.
    let p = new(512, c"lru");
    let r = begin(p, c"r");
    let names: Vec<[u8; 4]> = (0..300u32).map(|i| i.to_be_bytes()).collect();
    let keys: Vec<kvtier_key> = names.iter().map(|b| ck(b)).collect();
    let ready: Vec<kvtier_key> = keys.iter().step_by(3).copied().collect();
    let pending: Vec<kvtier_key> = keys.iter().skip(1).step_by(7).copied().collect();
    let (st, _) = store_for(p, r, &ready);
    assert_eq!(st, kvtier_status::Ok);
    complete_for(p, r, &ready, true);
    let (st, _) = store_for(p, r, &pending);
    assert_eq!(st, kvtier_status::Ok);
    let one: Vec<kvtier_lookup_result> = keys.iter().map(|&k| lookup_one(p, k)).collect();
    for (i, &got) in one.iter().enumerate() {
        let want = if i % 3 == 0 {
            KVTIER_LOOKUP_HIT
        } else if i % 7 == 1 {
            KVTIER_LOOKUP_HIT_PENDING
        } else {
            KVTIER_LOOKUP_MISS
        };
        assert_eq!(got, want, "key {i}");
    }
    // Every third key from 0 on is ready: a run of 100 hits.
    let hits: Vec<kvtier_key> = ready.clone();
    assert_eq!(
        lookup(p, &hits),
        (kvtier_status::Ok, answer(100, KVTIER_LOOKUP_HIT))
    );
    for start in (0..300).step_by(7) {
        let from = &keys[start..];
        let want = match one[start..].iter().position(|&a| a != KVTIER_LOOKUP_HIT) {
            Some(i) => answer(i, one[start + i]),
            None => answer(from.len(), KVTIER_LOOKUP_HIT),
        };
        assert_eq!(lookup(p, from), (kvtier_status::Ok, want), "from {start}");
    }
    // A bad key late in the call, after the stop: an error naming it,
    // the answer untouched.
    let mut bad = keys.clone();
    bad[260] = kvtier_key {
        data: names[0].as_ptr(),
        len: 65,
    };
    let (st, a) = lookup(p, &bad);
    assert_eq!(st, kvtier_status::InvalidKey);
    assert!(last_error().contains("260"), "{}", last_error());
    assert_eq!(a.hits, usize::MAX, "nothing written");
    unsafe { kvtier_primary_free(p) };
}

#[test]
fn lookups_compare_the_callers_bytes_at_every_key_length() {
    // Keys of 1 to 64 bytes, each a prefix of the next: only the stored
    // odd lengths are found, whatever the bytes they share.  Looked up in
    // place in the caller's memory.
    let p = new(64, c"lru");
    let r = begin(p, c"r");
    let bytes: Vec<u8> = (0..64u8).map(|b| b.wrapping_mul(37)).collect();
    let keys: Vec<kvtier_key> = (1..=64).map(|n| ck(&bytes[..n])).collect();
    let odd: Vec<kvtier_key> = keys.iter().step_by(2).copied().collect();
    let (st, _) = store_for(p, r, &odd);
    assert_eq!(st, kvtier_status::Ok);
    complete_for(p, r, &odd, true);
    for (i, &k) in keys.iter().enumerate() {
        let want = if i % 2 == 0 {
            KVTIER_LOOKUP_HIT
        } else {
            KVTIER_LOOKUP_MISS
        };
        assert_eq!(lookup_one(p, k), want, "key of {} bytes", i + 1);
    }
    assert_eq!(
        lookup(p, &odd),
        (kvtier_status::Ok, answer(32, KVTIER_LOOKUP_HIT))
    );
    // The same bytes at another address are the same keys.
    let copy = bytes.clone();
    let moved: Vec<kvtier_key> = (1..=64).step_by(2).map(|n| ck(&copy[..n])).collect();
    assert_eq!(
        lookup(p, &moved),
        (kvtier_status::Ok, answer(32, KVTIER_LOOKUP_HIT))
    );
    unsafe { kvtier_primary_free(p) };
}

#[test]
fn loads_from_c_commit_the_keys_they_name() {
    // Keys of 1, 20, 33 and 64 bytes stored in that order by one request:
    // when it finishes the first is the most recent, the last the least.
    // Then the last two are loaded through the C API (their bytes read in
    // place): when that request finishes they become the most recent, so
    // storing two more keys evicts the first two.
    let p = new(4, c"lru");
    let names: Vec<Vec<u8>> = [1usize, 20, 33, 64]
        .iter()
        .map(|&n| (0..n as u8).map(|b| b ^ n as u8).collect())
        .collect();
    let keys: Vec<kvtier_key> = names.iter().map(|b| ck(b)).collect();
    let r = begin(p, c"r");
    assert_eq!(store_for(p, r, &keys).0, kvtier_status::Ok);
    complete_for(p, r, &keys, true);
    finish(p, r);
    let r = begin(p, c"r");
    let load = [keys[3], keys[2]];
    let mut slots = [u32::MAX; 2];
    let st = unsafe { kvtier_primary_prepare_load(p, r, load.as_ptr(), 2, slots.as_mut_ptr()) };
    assert_eq!((st, slots), (kvtier_status::Ok, [3, 2]));
    let st = unsafe { kvtier_primary_complete_load(p, r, load.as_ptr(), 2) };
    assert_eq!(st, kvtier_status::Ok);
    finish(p, r);
    let r = begin(p, c"r");
    let fresh = [ck(b"fresh-1"), ck(b"fresh-2")];
    let (st, s) = store_for(p, r, &fresh);
    assert_eq!((st, s.evicted_count), (kvtier_status::Ok, 2));
    let mut evicted = s.evicted_keys();
    evicted.sort();
    let mut want = vec![names[0].clone(), names[1].clone()];
    want.sort();
    assert_eq!(evicted, want);
    unsafe { kvtier_primary_free(p) };
}

#[test]
fn c_stores_plan_as_the_rust_api_plans() {
    // Batches of 5 and of 60 keys (the second past the size where repeats
    // are found through a table), with repeats, keys already resident and
    // keys of many lengths, stored through the C API (bytes read in place)
    // and through the Rust API on a twin tier: the same positions, slots
    // and evictions.
    use kvtier_core::Key;
    use kvtier_core::primary::{PolicyKind, PrimaryConfig, PrimaryTier, StoreOutcome, StorePlan};
    use kvtier_core::request::RequestId;
    let p = new(48, c"lru");
    let mut twin = PrimaryTier::new(PrimaryConfig {
        capacity: 48,
        policy: PolicyKind::Lru,
        event_capacity: 16,
        ..Default::default()
    })
    .unwrap();
    let req = RequestId(7);
    twin.request_begin(req).unwrap();
    let r = begin(p, c"r");
    let name = |i: usize| -> Vec<u8> { (0..1 + i % 64).map(|b| (b * 7 + i) as u8).collect() };
    let batches: [Vec<usize>; 3] = [
        vec![3, 9, 3, 40, 9],
        (0..60).map(|i| (i * 13) % 45).collect(),
        (30..90).collect(),
    ];
    let mut plan = StorePlan::default();
    let mut positions = Vec::new();
    for (b, ids) in batches.iter().enumerate() {
        let names: Vec<Vec<u8>> = ids.iter().map(|&i| name(i)).collect();
        let keys: Vec<kvtier_key> = names.iter().map(|b| ck(b)).collect();
        let rust: Vec<Key> = names.iter().map(|b| Key::new(b).unwrap()).collect();
        let (st, s) = store_for(p, r, &keys);
        assert_eq!(st, kvtier_status::Ok);
        let outcome = twin.prepare_store(req, &rust, &mut plan).unwrap();
        assert_eq!(s.refused, outcome == StoreOutcome::Refused);
        plan.positions_in(&rust, &mut positions);
        assert_eq!(s.stored, plan.slots.len());
        assert_eq!(&s.store_indices[..s.stored], &positions[..]);
        if b == 0 {
            // First occurrences of the three distinct keys.
            assert_eq!(&s.store_indices[..s.stored], &[0, 1, 3]);
        }
        assert_eq!(&s.slots[..s.stored], &plan.slots[..]);
        let want: Vec<Vec<u8>> = plan.evicted.iter().map(|k| k.as_bytes().to_vec()).collect();
        assert_eq!(s.evicted_keys(), want);
        let done = complete_for(p, r, &keys, true);
        let report = twin.complete_store(req, &rust, true);
        assert_eq!(
            (
                done.ready,
                done.dropped,
                done.ignored,
                done.foreign,
                done.already_ready
            ),
            (
                report.ready,
                report.dropped,
                report.ignored,
                report.foreign,
                report.already_ready
            )
        );
    }
    unsafe { kvtier_primary_free(p) };
}

#[test]
fn touches_from_c_reorder_and_teach_arc() {
    // LRU: three keys stored by one request (the first ends most recent),
    // then the least recent touched through the C API: a new key evicts
    // the middle one instead.  ARC: touching (through C) a key it just
    // evicted is a ghost hit in B1, which raises its target for T1.
    for policy in [c"lru", c"arc"] {
        let p = new(3, policy);
        let names: Vec<Vec<u8>> = (0..5u8).map(|i| vec![i; 3 + 10 * i as usize]).collect();
        let keys: Vec<kvtier_key> = names.iter().map(|b| ck(b)).collect();
        let r = begin(p, c"r");
        assert_eq!(store_for(p, r, &keys[..3]).0, kvtier_status::Ok);
        complete_for(p, r, &keys[..3], true);
        finish(p, r);
        let r = begin(p, c"r");
        assert_eq!(
            unsafe { kvtier_primary_touch(p, r, &keys[2], 1) },
            kvtier_status::Ok
        );
        let (st, s) = store_for(p, r, &keys[3..4]);
        assert_eq!((st, s.evicted_count), (kvtier_status::Ok, 1));
        // ARC: the touched key went to T2, and T1's oldest went to B1.
        assert_eq!(s.evicted_keys(), vec![names[1].clone()]);
        if policy == c"arc" {
            let before = read_stats(p);
            let ghost = ck(&names[1]);
            assert_eq!(
                unsafe { kvtier_primary_touch(p, r, &ghost, 1) },
                kvtier_status::Ok
            );
            let after = read_stats(p);
            assert!(after.arc_target > before.arc_target, "{before:?} {after:?}");
        }
        unsafe { kvtier_primary_free(p) };
    }
}

#[test]
fn c_completions_act_only_on_their_own_requests_keys_even_after_it_finished() {
    // r1 plans A (slot 0); r2 names A and B and plans only B; r2 completes
    // both with failure: A stays r1's, so a later store cannot take slot 0.
    // r1 finishes, then completes A with its handle: A becomes readable.
    let p = new(2, c"lru");
    let (a, b, c, d) = (ck(b"A"), ck(b"B"), ck(b"C"), ck(b"D"));
    let plan = |r: kvtier_request_handle, keys: &[kvtier_key]| {
        let (st, s) = store_for(p, r, keys);
        assert_eq!(st, kvtier_status::Ok, "{}", last_error());
        (s.refused, s.slots[..s.stored].to_vec())
    };
    let (r1, r2) = (begin(p, c"r1"), begin(p, c"r2"));
    assert_eq!(plan(r1, &[a]), (false, vec![0]));
    assert_eq!(plan(r2, &[a, b]), (false, vec![1]));
    let done = complete_for(p, r2, &[a, b], false);
    assert_eq!((done.dropped, done.foreign, done.ready), (1, 1, 0));
    assert!(
        plan(r2, &[c, d]).0,
        "refused: A's slot is taken, A not evictable"
    );
    finish(p, r1);
    // The name is free again at once; the new request is another handle,
    // which does not complete r1's key.
    let again = begin(p, c"r1");
    assert_ne!(again, r1);
    assert_eq!(complete_for(p, again, &[a], true).foreign, 1);
    assert_eq!(complete_for(p, r1, &[a], true).ready, 1);
    assert_eq!(lookup_one(p, a), KVTIER_LOOKUP_HIT);
    let st = unsafe { kvtier_primary_complete_store(p, r1, &a, 1, true, ptr::null_mut()) };
    assert_eq!(
        st,
        kvtier_status::UnknownRequest,
        "r1 is done: its handle is released"
    );
    let stats = read_stats(p);
    assert_eq!((stats.foreign_completions, stats.stores_completed), (2, 1));
    unsafe { kvtier_primary_free(p) };
}

/// The allocation-size histogram through the C struct: one observation per
/// prepare_store with keys to store, refused ones included (as vLLM 0.33),
/// none for a call that stores nothing.
#[test]
fn allocation_sizes_are_a_histogram_in_the_stats_struct() {
    assert_eq!(KVTIER_ALLOCATION_SIZE_BUCKETS, 11);
    let p = new(5, c"lru");
    let r = begin(p, c"r");
    let names: Vec<[u8; 1]> = (0..7u8).map(|i| [i]).collect();
    let keys: Vec<kvtier_key> = names.iter().map(|n| ck(n)).collect();
    let (st, s) = store_for(p, r, &keys[..5]);
    assert_eq!((st, s.refused), (kvtier_status::Ok, false));
    // Every key resident: nothing to store, no observation.
    let (st, _) = store_for(p, r, &keys[..2]);
    assert_eq!(st, kvtier_status::Ok);
    // Nothing evictable (all write pending): refused, yet observed.
    let (st, s) = store_for(p, r, &keys[5..7]);
    assert_eq!((st, s.refused), (kvtier_status::Ok, true));
    let stats = read_stats(p);
    // Bounds 1, 4, 16, ...: the 2-key call is at most 4, the 5-key at most 16.
    assert_eq!(
        stats.allocation_size_buckets,
        [0, 1, 2, 2, 2, 2, 2, 2, 2, 2, 2]
    );
    assert_eq!(
        (stats.allocation_size_count, stats.allocation_size_sum),
        (2, 7)
    );
    assert_eq!(stats.refusals, 1);
    // Reset frees every slot but keeps the counters.
    assert_eq!(unsafe { kvtier_primary_reset(p) }, kvtier_status::Ok);
    let (st, _) = store_for(p, r, &keys[..1]);
    assert_eq!(st, kvtier_status::Ok);
    let after = read_stats(p);
    assert_eq!(
        (after.allocation_size_count, after.allocation_size_sum),
        (3, 8)
    );
    assert_eq!(after.allocation_size_buckets[0], 1);
    unsafe { kvtier_primary_free(p) };
}

/// A key as vLLM makes it: `name` then the 4-byte big-endian `group`.
fn group_key(name: &[u8], group: u32) -> Vec<u8> {
    [name, &group.to_be_bytes()[..]].concat()
}

#[test]
fn positions_from_c_rank_a_requests_tail_below_its_head() {
    // The same request stores head, middle and tail in one call, with and
    // without positions; while it is active, a store of two new keys
    // evicts its tail first with positions, its head first without.
    for with_positions in [true, false] {
        let p = new(3, c"lru");
        let r = begin(p, c"r");
        let names = [b"head".to_vec(), b"middle".to_vec(), b"tail".to_vec()];
        let keys: Vec<kvtier_key> = names.iter().map(|b| ck(b)).collect();
        if with_positions {
            let pos = [16u64, 32, 48];
            let st = unsafe { kvtier_primary_set_positions(p, r, keys.as_ptr(), 3, pos.as_ptr()) };
            assert_eq!(st, kvtier_status::Ok, "{}", last_error());
        }
        let (st, _) = store_for(p, r, &keys);
        assert_eq!(st, kvtier_status::Ok);
        complete_for(p, r, &keys, true);
        let other = begin(p, c"other");
        let fresh = [ck(b"fresh-1"), ck(b"fresh-2")];
        let (st, s) = store_for(p, other, &fresh);
        assert_eq!(st, kvtier_status::Ok);
        let want: Vec<Vec<u8>> = if with_positions {
            vec![names[2].clone(), names[1].clone()]
        } else {
            vec![names[0].clone(), names[1].clone()]
        };
        assert_eq!(s.evicted_keys(), want, "with positions: {with_positions}");
        unsafe { kvtier_primary_free(p) };
    }
}

#[test]
fn set_positions_from_c_names_unknown_requests_bad_keys_and_nulls() {
    let mut o = kvtier_primary_options_default();
    o.capacity = 4;
    o.kv_groups = true;
    let mut p = ptr::null_mut();
    assert_eq!(unsafe { kvtier_primary_new(&o, &mut p) }, kvtier_status::Ok);
    let good = group_key(b"k", 0);
    let keys = [ck(&good), ck(b"four")];
    let pos = [16u64, 32];
    let st = unsafe { kvtier_primary_set_positions(p, 1, keys.as_ptr(), 1, pos.as_ptr()) };
    assert_eq!(st, kvtier_status::UnknownRequest);
    let r = begin(p, c"r");
    // With KV groups a 4-byte key has no room for its group index.
    let st = unsafe { kvtier_primary_set_positions(p, r, keys.as_ptr(), 2, pos.as_ptr()) };
    assert_eq!(st, kvtier_status::InvalidKey);
    assert!(last_error().contains("position 1"), "{}", last_error());
    let st = unsafe { kvtier_primary_set_positions(p, r, keys.as_ptr(), 1, ptr::null()) };
    assert_eq!(st, kvtier_status::NullArgument);
    assert!(last_error().contains("positions"), "{}", last_error());
    let st = unsafe { kvtier_primary_set_positions(p, r, ptr::null(), 0, ptr::null()) };
    assert_eq!(st, kvtier_status::Ok);
    // A store naming the short key is refused as a whole, nothing stored.
    let (st, _) = store_for(p, r, &keys);
    assert_eq!(st, kvtier_status::InvalidKey);
    assert_eq!(lookup_one(p, keys[0]), KVTIER_LOOKUP_MISS);
    unsafe { kvtier_primary_free(p) };
}

#[test]
fn a_finish_from_c_commits_group_by_group_with_kv_groups() {
    // One request stores a group-1 key, then a group-0 key.  Without the
    // option its first key ends most recent; with it, group 0 does.
    for kv_groups in [false, true] {
        let mut o = kvtier_primary_options_default();
        o.capacity = 2;
        o.kv_groups = kv_groups;
        let mut p = ptr::null_mut();
        assert_eq!(unsafe { kvtier_primary_new(&o, &mut p) }, kvtier_status::Ok);
        let r = begin(p, c"r");
        let (g1, g0) = (group_key(b"one", 1), group_key(b"zero", 0));
        let keys = [ck(&g1), ck(&g0)];
        assert_eq!(store_for(p, r, &keys).0, kvtier_status::Ok);
        complete_for(p, r, &keys, true);
        finish(p, r);
        let r = begin(p, c"r");
        let fresh = group_key(b"fresh", 0);
        let (st, s) = store_for(p, r, &[ck(&fresh)]);
        assert_eq!(st, kvtier_status::Ok);
        let want = if kv_groups { g1.clone() } else { g0.clone() };
        assert_eq!(s.evicted_keys(), vec![want], "kv_groups {kv_groups}");
        unsafe { kvtier_primary_free(p) };
    }
}

/// As vLLM 0.33 allows, a request may finish while its load is in flight
/// (an abort) and complete the load afterwards: its handle still releases
/// the pins its own loads hold, and only those, and is unknown once the
/// last is released.
#[test]
fn a_finished_request_releases_only_its_own_loads_through_the_c_api() {
    let p = new(4, c"lru");
    let (a, b, c) = (b"a".to_vec(), b"b".to_vec(), b"c".to_vec());
    let other = begin(p, c"other");
    let all = [ck(&a), ck(&b), ck(&c)];
    assert_eq!(store_for(p, other, &all).0, kvtier_status::Ok);
    complete_for(p, other, &all, true);
    let r = begin(p, c"r");
    let mut slots = [u32::MAX; 2];
    let (ab, ac) = ([ck(&a), ck(&b)], [ck(&a), ck(&c)]);
    for (req, keys) in [(r, &ab), (other, &ac)] {
        assert_eq!(
            unsafe { kvtier_primary_prepare_load(p, req, keys.as_ptr(), 2, slots.as_mut_ptr()) },
            kvtier_status::Ok
        );
    }
    finish(p, r);
    assert_eq!(read_stats(p).pinned, 3);
    let complete = |keys: &[kvtier_key]| unsafe {
        kvtier_primary_complete_load(p, r, keys.as_ptr(), keys.len())
    };
    // Every other call takes the handle as unknown.
    assert_eq!(
        unsafe { kvtier_primary_touch(p, r, ab.as_ptr(), 1) },
        kvtier_status::UnknownRequest
    );
    assert_eq!(
        unsafe { kvtier_primary_prepare_load(p, r, ab.as_ptr(), 1, slots.as_mut_ptr()) },
        kvtier_status::UnknownRequest
    );
    // Another request's pin cannot be released through the handle.
    assert_eq!(complete(&[ck(&c)]), kvtier_status::KeyState);
    assert!(last_error().contains("position 0"), "{}", last_error());
    assert_eq!(complete(&[ck(&b), ck(&b)]), kvtier_status::KeyState);
    assert!(last_error().contains("position 1"), "{}", last_error());
    assert_eq!(read_stats(p).pinned, 3, "refused calls change nothing");
    assert_eq!(complete(&[ck(&a)]), kvtier_status::Ok);
    assert_eq!(
        read_stats(p).pinned,
        3,
        "a stays pinned by the other request"
    );
    assert_eq!(
        complete(&[ck(&a)]),
        kvtier_status::KeyState,
        "released once"
    );
    assert_eq!(complete(&[ck(&b)]), kvtier_status::Ok);
    assert_eq!(read_stats(p).pinned, 2);
    // The last pin released: the handle is unknown.
    assert_eq!(complete(&[ck(&a)]), kvtier_status::UnknownRequest);
    assert_eq!(
        unsafe { kvtier_primary_complete_load(p, other, ac.as_ptr(), 2) },
        kvtier_status::Ok
    );
    assert_eq!(read_stats(p).pinned, 0);
    unsafe { kvtier_primary_free(p) };
}

/// R pins a and finishes; S pins a and unpins it twice (its second unpin
/// took R's pin, as an active request may); T pins a.  R's late
/// completion succeeds, releases nothing and is counted; T's slot is not
/// handed to a store while T loads from it.
#[test]
fn a_late_completion_through_the_c_api_never_releases_a_pin_another_request_took() {
    let p = new(1, c"lru");
    let a = [ck(b"a")];
    let w = begin(p, c"w");
    assert_eq!(store_for(p, w, &a).0, kvtier_status::Ok);
    complete_for(p, w, &a, true);
    let (r, s, t) = (begin(p, c"r"), begin(p, c"s"), begin(p, c"t"));
    let load = |req| {
        let mut slot = [u32::MAX; 1];
        unsafe { kvtier_primary_prepare_load(p, req, a.as_ptr(), 1, slot.as_mut_ptr()) }
    };
    let complete = |req| unsafe { kvtier_primary_complete_load(p, req, a.as_ptr(), 1) };
    assert_eq!(load(r), kvtier_status::Ok);
    finish(p, r);
    assert_eq!(load(s), kvtier_status::Ok);
    assert_eq!(complete(s), kvtier_status::Ok);
    assert_eq!(
        complete(s),
        kvtier_status::Ok,
        "an active request unpins any pin"
    );
    assert_eq!(read_stats(p).pinned, 0);
    assert_eq!(load(t), kvtier_status::Ok);
    assert_eq!(complete(r), kvtier_status::Ok, "as in vLLM");
    let stats = read_stats(p);
    assert_eq!(stats.pinned, 1, "T's pin stays");
    assert_eq!(stats.spent_load_completions, 1);
    assert_eq!(complete(r), kvtier_status::UnknownRequest);
    let (st, plan) = store_for(p, w, &[ck(b"b")]);
    assert_eq!(st, kvtier_status::Ok);
    assert!(plan.refused, "T's slot is not handed to a store");
    assert_eq!(complete(t), kvtier_status::Ok);
    assert_eq!(read_stats(p).pinned, 0);
    unsafe { kvtier_primary_free(p) };
}

/// With KV groups on, a key shorter than 5 bytes (too short for its group
/// index) is `KVTIER_STATUS_INVALID_KEY`, naming its position, in every
/// call that takes keys, nothing written or changed.
#[test]
fn with_kv_groups_every_call_refuses_a_key_too_short_for_its_group() {
    let mut o = kvtier_primary_options_default();
    o.capacity = 2;
    o.kv_groups = true;
    let mut p = ptr::null_mut();
    assert_eq!(unsafe { kvtier_primary_new(&o, &mut p) }, kvtier_status::Ok);
    let r = begin(p, c"r");
    let good = group_key(b"good", 0);
    assert_eq!(store_for(p, r, &[ck(&good)]).0, kvtier_status::Ok);
    complete_for(p, r, &[ck(&good)], true);
    let mut slot = [u32::MAX; 1];
    assert_eq!(
        unsafe { kvtier_primary_prepare_load(p, r, [ck(&good)].as_ptr(), 1, slot.as_mut_ptr()) },
        kvtier_status::Ok
    );
    let keys = [ck(&good), ck(b"tiny")];
    let before = read_stats(p);
    let mut answer = answer(usize::MAX, -1);
    let mut done = kvtier_store_completion {
        ready: usize::MAX,
        ..Default::default()
    };
    let mut slots = [u32::MAX; 2];
    let statuses = [
        ("lookup", unsafe {
            kvtier_primary_lookup(p, keys.as_ptr(), 2, &mut answer)
        }),
        ("touch", unsafe {
            kvtier_primary_touch(p, r, keys.as_ptr(), 2)
        }),
        ("prepare_load", unsafe {
            kvtier_primary_prepare_load(p, r, keys.as_ptr(), 2, slots.as_mut_ptr())
        }),
        ("complete_load", unsafe {
            kvtier_primary_complete_load(p, r, keys.as_ptr(), 2)
        }),
        ("prepare_store", store_for(p, r, &keys).0),
        ("complete_store", unsafe {
            kvtier_primary_complete_store(p, r, keys.as_ptr(), 2, true, &mut done)
        }),
    ];
    for (call, st) in statuses {
        assert_eq!(st, kvtier_status::InvalidKey, "{call}");
    }
    assert_eq!(answer.hits, usize::MAX, "no answer written");
    assert_eq!(done.ready, usize::MAX, "no result written");
    assert_eq!(slots, [u32::MAX; 2], "no slot written");
    let after = read_stats(p);
    assert_eq!(
        (after.pinned, after.loads, after.stores_planned),
        (before.pinned, before.loads, before.stores_planned),
        "nothing changed"
    );
    finish(p, r);
    // A finished request's late completion too.
    assert_eq!(
        unsafe { kvtier_primary_complete_load(p, r, keys[1..].as_ptr(), 1) },
        kvtier_status::InvalidKey
    );
    assert_eq!(
        unsafe { kvtier_primary_complete_load(p, r, keys.as_ptr(), 1) },
        kvtier_status::Ok
    );
    unsafe { kvtier_primary_free(p) };
}

#[test]
fn a_caller_built_against_0_2_reads_the_stats_of_its_layout_and_nothing_beyond() {
    let p = new(4, c"lru");
    let mut stats: kvtier_primary_stats = unsafe { std::mem::zeroed() };
    stats.struct_size = std::mem::offset_of!(kvtier_primary_stats, spent_load_completions);
    stats.spent_load_completions = 0xdead;
    let st = unsafe { kvtier_primary_read_stats(p, &mut stats) };
    assert_eq!(st, kvtier_status::Ok, "{}", last_error());
    assert_eq!(stats.capacity, 4);
    assert_eq!(
        stats.spent_load_completions, 0xdead,
        "written past the caller's layout"
    );
    stats.struct_size = std::mem::size_of::<kvtier_primary_stats>();
    assert_eq!(
        unsafe { kvtier_primary_read_stats(p, &mut stats) },
        kvtier_status::Ok
    );
    assert_eq!(stats.spent_load_completions, 0);
    stats.struct_size = std::mem::offset_of!(kvtier_primary_stats, spent_load_completions) + 4;
    assert_eq!(
        unsafe { kvtier_primary_read_stats(p, &mut stats) },
        kvtier_status::InvalidArgument
    );
    unsafe { kvtier_primary_free(p) };
}
