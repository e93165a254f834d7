//! The `kvtier_primary_*` C API called directly: NULL arguments, short
//! buffers, bad keys and misuse return statuses with messages and change
//! nothing; a refusal is a successful call.

use std::ffi::{CStr, c_char};
use std::ptr;

use kvtier::ffi::kvtier_status;
use kvtier::ffi::primary::*;
use kvtier::ffi::{kvtier_key, kvtier_last_error_message};

fn last_error() -> String {
    unsafe { CStr::from_ptr(kvtier_last_error_message()) }
        .to_string_lossy()
        .into_owned()
}

fn ck(bytes: &[u8]) -> kvtier_key {
    kvtier_key {
        data: bytes.as_ptr(),
        len: bytes.len(),
    }
}

const REQ: *const c_char = c"r".as_ptr();

fn new(capacity: u32, policy: &CStr) -> *mut kvtier_primary {
    let mut o = kvtier_primary_options_default();
    o.capacity = capacity;
    o.policy = policy.as_ptr();
    o.event_capacity = 16;
    let mut p = ptr::null_mut();
    assert_eq!(unsafe { kvtier_primary_new(&o, &mut p) }, kvtier_status::Ok);
    assert!(!p.is_null());
    p
}

struct Store {
    to_store: Vec<usize>,
    slots: Vec<u32>,
    evicted: Vec<u8>,
    lens: Vec<usize>,
    result: kvtier_primary_store_result,
}

fn store(p: *mut kvtier_primary, keys: &[kvtier_key]) -> (kvtier_status, Store) {
    let n = keys.len();
    let mut s = Store {
        to_store: vec![usize::MAX; n],
        slots: vec![u32::MAX; n],
        evicted: vec![0; n * 64],
        lens: vec![0; n],
        result: Default::default(),
    };
    let st = unsafe {
        kvtier_primary_prepare_store(
            p,
            REQ,
            keys.as_ptr(),
            n,
            s.to_store.as_mut_ptr(),
            n,
            s.slots.as_mut_ptr(),
            n,
            s.evicted.as_mut_ptr(),
            n * 64,
            s.lens.as_mut_ptr(),
            n,
            &mut s.result,
        )
    };
    (st, s)
}

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
    assert_eq!(
        unsafe { kvtier_primary_request_begin(p, REQ) },
        kvtier_status::Ok
    );
    let (st, s) = store(p, &[ck(&a), ck(&a), ck(&b)]);
    assert_eq!(st, kvtier_status::Ok);
    assert_eq!(
        (s.result.refused, s.result.stored, s.result.evicted),
        (false, 2, 0)
    );
    assert_eq!(&s.to_store[..2], &[0, 2], "positions of first occurrences");
    assert_eq!(&s.slots[..2], &[0, 1]);
    let keys = [ck(&a), ck(&b)];
    unsafe { kvtier_primary_complete_store(p, REQ, keys.as_ptr(), 2, true, ptr::null_mut()) };

    // Pin a; store c evicts b.
    let mut slots = [0u32; 1];
    assert_eq!(
        unsafe { kvtier_primary_prepare_load(p, REQ, keys.as_ptr(), 1, slots.as_mut_ptr(), 1) },
        kvtier_status::Ok
    );
    let (st, s) = store(p, &[ck(&c)]);
    assert_eq!(st, kvtier_status::Ok);
    assert_eq!(s.result.evicted, 1);
    assert_eq!(&s.evicted[..s.lens[0]], b"bbb");
    // Nothing evictable left: a refusal is a successful call.
    let d = b"d".to_vec();
    let (st, s) = store(p, &[ck(&d)]);
    assert_eq!(st, kvtier_status::Ok);
    assert!(s.result.refused);
    assert_eq!(s.slots[0], u32::MAX, "no output written on refusal");

    // Short output buffer, bad key, unknown request, misuse.
    assert_eq!(
        unsafe { kvtier_primary_prepare_load(p, REQ, keys.as_ptr(), 2, slots.as_mut_ptr(), 1) },
        kvtier_status::InvalidArgument
    );
    let long = [0u8; 65];
    let bad = [ck(&a), ck(&long)];
    assert_eq!(
        unsafe { kvtier_primary_touch(p, REQ, bad.as_ptr(), 2) },
        kvtier_status::InvalidKey
    );
    assert!(last_error().contains("position 1"), "{}", last_error());
    assert_eq!(
        unsafe { kvtier_primary_complete_load(p, c"x".as_ptr(), keys.as_ptr(), 1) },
        kvtier_status::UnknownRequest
    );
    let absent = [ck(&a), ck(&d)];
    assert_eq!(
        unsafe { kvtier_primary_complete_load(p, REQ, absent.as_ptr(), 2) },
        kvtier_status::KeyState
    );
    assert!(last_error().contains("position 1"), "{}", last_error());
    let mut stats = kvtier_primary_stats::default();
    assert_eq!(
        unsafe { kvtier_primary_read_stats(p, &mut stats) },
        kvtier_status::Ok
    );
    assert_eq!((stats.pinned, stats.refusals, stats.arc_b1), (1, 1, 1));
    assert_eq!(
        unsafe { kvtier_primary_complete_load(p, REQ, keys.as_ptr(), 1) },
        kvtier_status::Ok
    );

    // Events, in pieces.
    let mut ev = [kvtier_primary_event {
        kind: kvtier_primary_event_kind::Cleared,
        key_len: 0,
        key: [0; 64],
    }; 2];
    let (mut n, mut more) = (0usize, false);
    assert_eq!(
        unsafe { kvtier_primary_take_events(p, ev.as_mut_ptr(), 2, &mut n, &mut more) },
        kvtier_status::Ok
    );
    assert_eq!((n, more), (2, true));
    assert_eq!(
        unsafe { kvtier_primary_take_events(p, ptr::null_mut(), 0, &mut n, &mut more) },
        kvtier_status::Ok
    );
    assert_eq!((n, more), (0, true));
    assert_eq!(
        unsafe { kvtier_primary_take_events(p, ev.as_mut_ptr(), 2, &mut n, &mut more) },
        kvtier_status::Ok
    );
    assert_eq!((n, more), (1, false));
    assert_eq!(ev[0].kind, kvtier_primary_event_kind::Removed);
    assert_eq!(&ev[0].key[..ev[0].key_len], b"bbb");

    let mut results = [kvtier_primary_lookup_result::Miss; 2];
    assert_eq!(
        unsafe { kvtier_primary_lookup(p, keys.as_ptr(), 2, results.as_mut_ptr(), 2) },
        kvtier_status::Ok
    );
    assert_eq!(
        results,
        [
            kvtier_primary_lookup_result::Hit,
            kvtier_primary_lookup_result::Miss
        ]
    );
    assert_eq!(unsafe { kvtier_primary_reset(p) }, kvtier_status::Ok);
    assert_eq!(
        unsafe { kvtier_primary_request_finished(p, REQ) },
        kvtier_status::Ok
    );
    assert_eq!(
        unsafe { kvtier_primary_request_finished(p, REQ) },
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
    // and absent keys throughout, each answered as a lookup of that key
    // alone answers it.
    let p = new(512, c"lru");
    assert_eq!(
        unsafe { kvtier_primary_request_begin(p, REQ) },
        kvtier_status::Ok
    );
    let names: Vec<[u8; 4]> = (0..300u32).map(|i| i.to_be_bytes()).collect();
    let keys: Vec<kvtier_key> = names.iter().map(|b| ck(b)).collect();
    let ready: Vec<kvtier_key> = keys.iter().step_by(3).copied().collect();
    let pending: Vec<kvtier_key> = keys.iter().skip(1).step_by(7).copied().collect();
    let (st, _) = store(p, &ready);
    assert_eq!(st, kvtier_status::Ok);
    let mut done = kvtier_primary_complete_result::default();
    assert_eq!(
        unsafe {
            kvtier_primary_complete_store(p, REQ, ready.as_ptr(), ready.len(), true, &mut done)
        },
        kvtier_status::Ok
    );
    let (st, _) = store(p, &pending);
    assert_eq!(st, kvtier_status::Ok);
    let mut all = vec![kvtier_primary_lookup_result::Miss; keys.len()];
    let st =
        unsafe { kvtier_primary_lookup(p, keys.as_ptr(), keys.len(), all.as_mut_ptr(), all.len()) };
    assert_eq!(st, kvtier_status::Ok);
    for (i, k) in keys.iter().enumerate() {
        let mut one = [kvtier_primary_lookup_result::Miss];
        let st = unsafe { kvtier_primary_lookup(p, k, 1, one.as_mut_ptr(), 1) };
        assert_eq!(st, kvtier_status::Ok);
        assert_eq!(all[i], one[0], "key {i}");
        let want = if i % 3 == 0 {
            kvtier_primary_lookup_result::Hit
        } else if i % 7 == 1 {
            kvtier_primary_lookup_result::HitPending
        } else {
            kvtier_primary_lookup_result::Miss
        };
        assert_eq!(all[i], want, "key {i}");
    }
    // A bad key late in the call: an error naming it, results untouched.
    let mut bad = keys.clone();
    bad[260] = kvtier_key {
        data: names[0].as_ptr(),
        len: 65,
    };
    let mut res = vec![kvtier_primary_lookup_result::HitPending; bad.len()];
    let st =
        unsafe { kvtier_primary_lookup(p, bad.as_ptr(), bad.len(), res.as_mut_ptr(), res.len()) };
    assert_eq!(st, kvtier_status::InvalidKey);
    assert!(last_error().contains("260"), "{}", last_error());
    assert!(
        res.iter()
            .all(|&r| r == kvtier_primary_lookup_result::HitPending)
    );
    unsafe { kvtier_primary_free(p) };
}

#[test]
fn lookups_compare_the_callers_bytes_at_every_key_length() {
    // Keys of 1 to 64 bytes, each a prefix of the next: only the stored
    // odd lengths are found, whatever the bytes they share.  Looked up in
    // one call, in place in the caller's memory.
    let p = new(64, c"lru");
    assert_eq!(
        unsafe { kvtier_primary_request_begin(p, REQ) },
        kvtier_status::Ok
    );
    let bytes: Vec<u8> = (0..64u8).map(|b| b.wrapping_mul(37)).collect();
    let keys: Vec<kvtier_key> = (1..=64).map(|n| ck(&bytes[..n])).collect();
    let odd: Vec<kvtier_key> = keys.iter().step_by(2).copied().collect();
    let (st, _) = store(p, &odd);
    assert_eq!(st, kvtier_status::Ok);
    assert_eq!(
        unsafe {
            kvtier_primary_complete_store(p, REQ, odd.as_ptr(), odd.len(), true, ptr::null_mut())
        },
        kvtier_status::Ok
    );
    let mut res = vec![kvtier_primary_lookup_result::HitPending; keys.len()];
    let st =
        unsafe { kvtier_primary_lookup(p, keys.as_ptr(), keys.len(), res.as_mut_ptr(), res.len()) };
    assert_eq!(st, kvtier_status::Ok);
    for (i, r) in res.iter().enumerate() {
        let want = if i % 2 == 0 {
            kvtier_primary_lookup_result::Hit
        } else {
            kvtier_primary_lookup_result::Miss
        };
        assert_eq!(*r, want, "key of {} bytes", i + 1);
    }
    // The same bytes at another address are the same key.
    let copy = bytes.clone();
    let moved: Vec<kvtier_key> = (1..=64).map(|n| ck(&copy[..n])).collect();
    let mut again = vec![kvtier_primary_lookup_result::HitPending; moved.len()];
    let st = unsafe {
        kvtier_primary_lookup(
            p,
            moved.as_ptr(),
            moved.len(),
            again.as_mut_ptr(),
            again.len(),
        )
    };
    assert_eq!((st, again), (kvtier_status::Ok, res));
    // Results written over the keys' own bytes are refused, nothing written.
    let mut shared = [0u8; 8];
    let key = kvtier_key {
        data: shared.as_ptr(),
        len: 8,
    };
    let st = unsafe { kvtier_primary_lookup(p, &key, 1, shared.as_mut_ptr().cast(), 1) };
    assert_eq!((st, shared), (kvtier_status::InvalidArgument, [0; 8]));
    assert!(last_error().contains("overlaps"), "{}", last_error());
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
    let begin = || {
        assert_eq!(
            unsafe { kvtier_primary_request_begin(p, REQ) },
            kvtier_status::Ok
        )
    };
    let finish = || {
        assert_eq!(
            unsafe { kvtier_primary_request_finished(p, REQ) },
            kvtier_status::Ok
        )
    };
    let names: Vec<Vec<u8>> = [1usize, 20, 33, 64]
        .iter()
        .map(|&n| (0..n as u8).map(|b| b ^ n as u8).collect())
        .collect();
    let keys: Vec<kvtier_key> = names.iter().map(|b| ck(b)).collect();
    begin();
    assert_eq!(store(p, &keys).0, kvtier_status::Ok);
    let st =
        unsafe { kvtier_primary_complete_store(p, REQ, keys.as_ptr(), 4, true, ptr::null_mut()) };
    assert_eq!(st, kvtier_status::Ok);
    finish();
    begin();
    let load = [keys[3], keys[2]];
    let mut slots = [u32::MAX; 2];
    let st =
        unsafe { kvtier_primary_prepare_load(p, REQ, load.as_ptr(), 2, slots.as_mut_ptr(), 2) };
    assert_eq!((st, slots), (kvtier_status::Ok, [3, 2]));
    let st = unsafe { kvtier_primary_complete_load(p, REQ, load.as_ptr(), 2) };
    assert_eq!(st, kvtier_status::Ok);
    finish();
    begin();
    let fresh = [ck(b"fresh-1"), ck(b"fresh-2")];
    let (st, s) = store(p, &fresh);
    assert_eq!((st, s.result.evicted), (kvtier_status::Ok, 2));
    let mut evicted: Vec<&[u8]> = (0..2)
        .map(|i| &s.evicted[i * 64..i * 64 + s.lens[i]])
        .collect();
    evicted.sort();
    let mut want = vec![&names[0][..], &names[1][..]];
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
    use kvtier::Key;
    use kvtier::primary::{PolicyKind, PrimaryConfig, PrimaryTier, StoreOutcome, StorePlan};
    use kvtier::request::RequestId;
    let p = new(48, c"lru");
    let mut twin = PrimaryTier::new(PrimaryConfig {
        capacity: 48,
        policy: PolicyKind::Lru,
        event_capacity: 16,
        ..Default::default()
    })
    .unwrap();
    let req = RequestId(7);
    twin.begin_request(req).unwrap();
    assert_eq!(
        unsafe { kvtier_primary_request_begin(p, REQ) },
        kvtier_status::Ok
    );
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
        let (st, s) = store(p, &keys);
        assert_eq!(st, kvtier_status::Ok);
        let outcome = twin.prepare_store(req, &rust, &mut plan).unwrap();
        assert_eq!(s.result.refused, outcome == StoreOutcome::Refused);
        plan.positions_in(&rust, &mut positions);
        assert_eq!(s.result.stored, plan.slots.len());
        assert_eq!(&s.to_store[..s.result.stored], &positions[..]);
        if b == 0 {
            // First occurrences of the three distinct keys.
            assert_eq!(&s.to_store[..s.result.stored], &[0, 1, 3]);
        }
        assert_eq!(&s.slots[..s.result.stored], &plan.slots[..]);
        let evicted: Vec<&[u8]> = (0..s.result.evicted)
            .map(|i| &s.evicted[i * 64..i * 64 + s.lens[i]])
            .collect();
        let want: Vec<&[u8]> = plan.evicted.iter().map(|k| k.as_bytes()).collect();
        assert_eq!(evicted, want);
        let mut done = kvtier_primary_complete_result::default();
        let st = unsafe {
            kvtier_primary_complete_store(p, REQ, keys.as_ptr(), keys.len(), true, &mut done)
        };
        assert_eq!(st, kvtier_status::Ok);
        let r = twin.complete_store(req, &rust, true);
        assert_eq!(
            (
                done.ready,
                done.dropped,
                done.ignored,
                done.foreign,
                done.already_ready
            ),
            (r.ready, r.dropped, r.ignored, r.foreign, r.already_ready)
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
        let run = |f: unsafe extern "C" fn(*mut kvtier_primary, *const c_char) -> kvtier_status| {
            assert_eq!(unsafe { f(p, REQ) }, kvtier_status::Ok)
        };
        let names: Vec<Vec<u8>> = (0..5u8).map(|i| vec![i; 3 + 10 * i as usize]).collect();
        let keys: Vec<kvtier_key> = names.iter().map(|b| ck(b)).collect();
        run(kvtier_primary_request_begin);
        assert_eq!(store(p, &keys[..3]).0, kvtier_status::Ok);
        let st = unsafe {
            kvtier_primary_complete_store(p, REQ, keys.as_ptr(), 3, true, ptr::null_mut())
        };
        assert_eq!(st, kvtier_status::Ok);
        run(kvtier_primary_request_finished);
        run(kvtier_primary_request_begin);
        assert_eq!(
            unsafe { kvtier_primary_touch(p, REQ, &keys[2], 1) },
            kvtier_status::Ok
        );
        let (st, s) = store(p, &keys[3..4]);
        assert_eq!((st, s.result.evicted), (kvtier_status::Ok, 1));
        // ARC: the touched key went to T2, and T1's oldest went to B1.
        assert_eq!(&s.evicted[..s.lens[0]], &names[1][..]);
        if policy == c"arc" {
            let mut before = kvtier_primary_stats::default();
            assert_eq!(
                unsafe { kvtier_primary_read_stats(p, &mut before) },
                kvtier_status::Ok
            );
            let ghost = ck(&names[1]);
            assert_eq!(
                unsafe { kvtier_primary_touch(p, REQ, &ghost, 1) },
                kvtier_status::Ok
            );
            let mut after = kvtier_primary_stats::default();
            assert_eq!(
                unsafe { kvtier_primary_read_stats(p, &mut after) },
                kvtier_status::Ok
            );
            assert!(after.arc_target > before.arc_target, "{before:?} {after:?}");
        }
        unsafe { kvtier_primary_free(p) };
    }
}

#[test]
fn c_completions_act_only_on_their_own_requests_keys_even_after_it_finished() {
    // r1 plans A (slot 0); r2 names A and B and plans only B; r2 completes
    // both with failure: A stays r1's, so a later store cannot take slot 0.
    // r1 finishes, then completes A under its name: A becomes readable.
    let p = new(2, c"lru");
    let (r1, r2) = (c"r1".as_ptr(), c"r2".as_ptr());
    let (a, b, c, d) = (ck(b"A"), ck(b"B"), ck(b"C"), ck(b"D"));
    let plan = |req: *const c_char, keys: &[kvtier_key]| {
        let n = keys.len();
        let (mut to, mut slots, mut ev, mut lens) =
            (vec![0; n], vec![0u32; n], vec![0; 64 * n], vec![0; n]);
        let mut res = kvtier_primary_store_result::default();
        let st = unsafe {
            kvtier_primary_prepare_store(
                p,
                req,
                keys.as_ptr(),
                n,
                to.as_mut_ptr(),
                n,
                slots.as_mut_ptr(),
                n,
                ev.as_mut_ptr(),
                64 * n,
                lens.as_mut_ptr(),
                n,
                &mut res,
            )
        };
        assert_eq!(st, kvtier_status::Ok, "{}", last_error());
        slots.truncate(res.stored);
        (res.refused, slots)
    };
    let complete = |req: *const c_char, keys: &[kvtier_key], success: bool| {
        let mut done = kvtier_primary_complete_result::default();
        let st = unsafe {
            kvtier_primary_complete_store(p, req, keys.as_ptr(), keys.len(), success, &mut done)
        };
        assert_eq!(st, kvtier_status::Ok, "{}", last_error());
        done
    };
    for r in [r1, r2] {
        assert_eq!(
            unsafe { kvtier_primary_request_begin(p, r) },
            kvtier_status::Ok
        );
    }
    assert_eq!(plan(r1, &[a]), (false, vec![0]));
    assert_eq!(plan(r2, &[a, b]), (false, vec![1]));
    let done = complete(r2, &[a, b], false);
    assert_eq!((done.dropped, done.foreign, done.ready), (1, 1, 0));
    assert!(
        plan(r2, &[c, d]).0,
        "refused: A's slot is taken, A not evictable"
    );
    assert_eq!(
        unsafe { kvtier_primary_request_finished(p, r1) },
        kvtier_status::Ok
    );
    assert_eq!(
        unsafe { kvtier_primary_request_begin(p, r1) },
        kvtier_status::DuplicateRequest,
        "r1's store is still in flight"
    );
    assert_eq!(complete(r1, &[a], true).ready, 1);
    let mut res = [kvtier_primary_lookup_result::Miss];
    assert_eq!(
        unsafe { kvtier_primary_lookup(p, &a, 1, res.as_mut_ptr(), 1) },
        kvtier_status::Ok
    );
    assert_eq!(res[0], kvtier_primary_lookup_result::Hit);
    let st = unsafe { kvtier_primary_complete_store(p, r1, &a, 1, true, ptr::null_mut()) };
    assert_eq!(
        st,
        kvtier_status::UnknownRequest,
        "r1 is done: its name is released"
    );
    let mut stats = kvtier_primary_stats::default();
    assert_eq!(
        unsafe { kvtier_primary_read_stats(p, &mut stats) },
        kvtier_status::Ok
    );
    assert_eq!((stats.foreign_completions, stats.stores_completed), (1, 1));
    unsafe { kvtier_primary_free(p) };
}

fn read_stats(p: *mut kvtier_primary) -> kvtier_primary_stats {
    let mut stats = kvtier_primary_stats::default();
    assert_eq!(
        unsafe { kvtier_primary_read_stats(p, &mut stats) },
        kvtier_status::Ok
    );
    stats
}

/// The allocation-size histogram through the C struct: one observation per
/// prepare_store with keys to store, refused ones included (as vLLM 0.33),
/// none for a call that stores nothing.
#[test]
fn allocation_sizes_are_a_histogram_in_the_stats_struct() {
    assert_eq!(KVTIER_ALLOCATION_SIZE_BUCKETS, 11);
    let p = new(5, c"lru");
    assert_eq!(
        unsafe { kvtier_primary_request_begin(p, REQ) },
        kvtier_status::Ok
    );
    let names: Vec<[u8; 1]> = (0..7u8).map(|i| [i]).collect();
    let keys: Vec<kvtier_key> = names.iter().map(|n| ck(n)).collect();
    let (st, s) = store(p, &keys[..5]);
    assert_eq!((st, s.result.refused), (kvtier_status::Ok, false));
    // Every key resident: nothing to store, no observation.
    let (st, _) = store(p, &keys[..2]);
    assert_eq!(st, kvtier_status::Ok);
    // Nothing evictable (all write pending): refused, yet observed.
    let (st, s) = store(p, &keys[5..7]);
    assert_eq!((st, s.result.refused), (kvtier_status::Ok, true));
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
    let (st, _) = store(p, &keys[..1]);
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

/// The keys a store's plan evicted, in eviction order.
fn evicted_keys(s: &Store) -> Vec<Vec<u8>> {
    (0..s.result.evicted)
        .map(|i| s.evicted[i * 64..i * 64 + s.lens[i]].to_vec())
        .collect()
}

#[test]
fn positions_from_c_rank_a_requests_tail_below_its_head() {
    // The same request stores head, middle and tail in one call, with and
    // without positions; while it is active, a store of two new keys
    // evicts its tail first with positions, its head first without.
    for with_positions in [true, false] {
        let p = new(3, c"lru");
        assert_eq!(
            unsafe { kvtier_primary_request_begin(p, REQ) },
            kvtier_status::Ok
        );
        let names = [b"head".to_vec(), b"middle".to_vec(), b"tail".to_vec()];
        let keys: Vec<kvtier_key> = names.iter().map(|b| ck(b)).collect();
        if with_positions {
            let pos = [16u64, 32, 48];
            let st =
                unsafe { kvtier_primary_set_positions(p, REQ, keys.as_ptr(), pos.as_ptr(), 3) };
            assert_eq!(st, kvtier_status::Ok, "{}", last_error());
        }
        let (st, _) = store(p, &keys);
        assert_eq!(st, kvtier_status::Ok);
        let st = unsafe {
            kvtier_primary_complete_store(p, REQ, keys.as_ptr(), 3, true, ptr::null_mut())
        };
        assert_eq!(st, kvtier_status::Ok);
        let other = c"other".as_ptr();
        assert_eq!(
            unsafe { kvtier_primary_request_begin(p, other) },
            kvtier_status::Ok
        );
        let fresh = [ck(b"fresh-1"), ck(b"fresh-2")];
        let mut s = Store {
            to_store: vec![0; 2],
            slots: vec![0; 2],
            evicted: vec![0; 128],
            lens: vec![0; 2],
            result: Default::default(),
        };
        let st = unsafe {
            kvtier_primary_prepare_store(
                p,
                other,
                fresh.as_ptr(),
                2,
                s.to_store.as_mut_ptr(),
                2,
                s.slots.as_mut_ptr(),
                2,
                s.evicted.as_mut_ptr(),
                128,
                s.lens.as_mut_ptr(),
                2,
                &mut s.result,
            )
        };
        assert_eq!(st, kvtier_status::Ok);
        let want: Vec<Vec<u8>> = if with_positions {
            vec![names[2].clone(), names[1].clone()]
        } else {
            vec![names[0].clone(), names[1].clone()]
        };
        assert_eq!(evicted_keys(&s), want, "with positions: {with_positions}");
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
    let st = unsafe { kvtier_primary_set_positions(p, REQ, keys.as_ptr(), pos.as_ptr(), 1) };
    assert_eq!(st, kvtier_status::UnknownRequest);
    assert_eq!(
        unsafe { kvtier_primary_request_begin(p, REQ) },
        kvtier_status::Ok
    );
    // With KV groups a 4-byte key has no room for its group index.
    let st = unsafe { kvtier_primary_set_positions(p, REQ, keys.as_ptr(), pos.as_ptr(), 2) };
    assert_eq!(st, kvtier_status::InvalidKey);
    assert!(last_error().contains("position 1"), "{}", last_error());
    let st = unsafe { kvtier_primary_set_positions(p, REQ, keys.as_ptr(), ptr::null(), 1) };
    assert_eq!(st, kvtier_status::NullArgument);
    assert!(last_error().contains("positions"), "{}", last_error());
    let st = unsafe { kvtier_primary_set_positions(p, REQ, ptr::null(), ptr::null(), 0) };
    assert_eq!(st, kvtier_status::Ok);
    // A store naming the short key is refused as a whole, nothing stored.
    let (st, _) = store(p, &keys);
    assert_eq!(st, kvtier_status::InvalidKey);
    let mut res = [kvtier_primary_lookup_result::Hit];
    let st = unsafe { kvtier_primary_lookup(p, keys.as_ptr(), 1, res.as_mut_ptr(), 1) };
    assert_eq!(
        (st, res[0]),
        (kvtier_status::Ok, kvtier_primary_lookup_result::Miss)
    );
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
        assert_eq!(
            unsafe { kvtier_primary_request_begin(p, REQ) },
            kvtier_status::Ok
        );
        let (g1, g0) = (group_key(b"one", 1), group_key(b"zero", 0));
        let keys = [ck(&g1), ck(&g0)];
        assert_eq!(store(p, &keys).0, kvtier_status::Ok);
        let st = unsafe {
            kvtier_primary_complete_store(p, REQ, keys.as_ptr(), 2, true, ptr::null_mut())
        };
        assert_eq!(st, kvtier_status::Ok);
        assert_eq!(
            unsafe { kvtier_primary_request_finished(p, REQ) },
            kvtier_status::Ok
        );
        assert_eq!(
            unsafe { kvtier_primary_request_begin(p, REQ) },
            kvtier_status::Ok
        );
        let fresh = group_key(b"fresh", 0);
        let (st, s) = store(p, &[ck(&fresh)]);
        assert_eq!(st, kvtier_status::Ok);
        let want = if kv_groups { g1.clone() } else { g0.clone() };
        assert_eq!(evicted_keys(&s), vec![want], "kv_groups {kv_groups}");
        unsafe { kvtier_primary_free(p) };
    }
}
