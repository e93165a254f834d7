//! The `kvtier_primary_*` C API called directly: NULL arguments, bad keys
//! and misuse return statuses with messages and change nothing; a refusal
//! is a successful call; request handles, batched lookups, store plans,
//! events and statistics have the shapes the header gives them.

use std::ffi::CStr;
use std::ptr;

use kvtier::ffi::dialect::*;
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

/// Starts a request named `name`; its handle.
fn begin(p: *mut kvtier_primary, name: &CStr) -> kvtier_request_handle {
    let mut r = 0;
    let st = unsafe { kvtier_primary_request_begin(p, name.as_ptr(), &mut r) };
    assert_eq!(st, kvtier_status::Ok, "{}", last_error());
    assert_ne!(r, 0, "0 is never a handle");
    r
}

fn finish(p: *mut kvtier_primary, r: kvtier_request_handle) {
    let st = unsafe { kvtier_primary_request_finished(p, r) };
    assert_eq!(st, kvtier_status::Ok, "{}", last_error());
}

fn empty_key_buf() -> kvtier_key_buf {
    kvtier_key_buf {
        len: 0,
        bytes: [0; 64],
    }
}

/// What one prepare_store wrote: its arrays (room for one entry per key,
/// pre-filled with markers) and counts.
struct Store {
    store_indices: Vec<usize>,
    slots: Vec<u32>,
    evicted: Vec<kvtier_key_buf>,
    stored: usize,
    evicted_count: usize,
    refused: bool,
}

impl Store {
    /// The keys evicted, in eviction order.
    fn evicted_keys(&self) -> Vec<Vec<u8>> {
        self.evicted[..self.evicted_count]
            .iter()
            .map(|k| k.bytes[..k.len].to_vec())
            .collect()
    }
}

fn store_for(
    p: *mut kvtier_primary,
    r: kvtier_request_handle,
    keys: &[kvtier_key],
) -> (kvtier_status, Store) {
    let n = keys.len();
    let mut s = Store {
        store_indices: vec![usize::MAX; n],
        slots: vec![u32::MAX; n],
        evicted: vec![empty_key_buf(); n],
        stored: usize::MAX,
        evicted_count: usize::MAX,
        refused: false,
    };
    let mut plan = kvtier_store_plan {
        store_indices: s.store_indices.as_mut_ptr(),
        slots: s.slots.as_mut_ptr(),
        evicted: s.evicted.as_mut_ptr(),
        store_count: usize::MAX,
        evicted_count: usize::MAX,
        refused: false,
    };
    let st = unsafe { kvtier_primary_prepare_store(p, r, keys.as_ptr(), n, &mut plan) };
    s.stored = plan.store_count;
    s.evicted_count = plan.evicted_count;
    s.refused = plan.refused;
    (st, s)
}

fn complete_for(
    p: *mut kvtier_primary,
    r: kvtier_request_handle,
    keys: &[kvtier_key],
    success: bool,
) -> kvtier_store_completion {
    let mut done = kvtier_store_completion::default();
    let st = unsafe {
        kvtier_primary_complete_store(p, r, keys.as_ptr(), keys.len(), success, &mut done)
    };
    assert_eq!(st, kvtier_status::Ok, "{}", last_error());
    done
}

fn lookup(p: *mut kvtier_primary, keys: &[kvtier_key]) -> (kvtier_status, kvtier_lookup_answer) {
    let mut a = kvtier_lookup_answer {
        hits: usize::MAX,
        stop: -1,
        reason: -1,
    };
    let st = unsafe { kvtier_primary_lookup(p, keys.as_ptr(), keys.len(), &mut a) };
    (st, a)
}

/// The answer of a lookup that stopped after `hits` keys with `stop`.
fn answer(hits: usize, stop: kvtier_lookup_result) -> kvtier_lookup_answer {
    kvtier_lookup_answer {
        hits,
        stop,
        reason: if stop == KVTIER_LOOKUP_MISS {
            KVTIER_MISS_ABSENT
        } else {
            KVTIER_MISS_NONE
        },
    }
}

/// The answer of one key looked up alone.
fn lookup_one(p: *mut kvtier_primary, key: kvtier_key) -> kvtier_lookup_result {
    let (st, a) = lookup(p, &[key]);
    assert_eq!(st, kvtier_status::Ok, "{}", last_error());
    a.stop
}

#[test]
fn constructor_checks_options_and_writes_out_only_on_success() {
    let mut p = ptr::null_mut();
    assert_eq!(
        unsafe { kvtier_primary_new(ptr::null(), &mut p) },
        kvtier_status::NullArgument
    );
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

fn no_event() -> kvtier_event {
    kvtier_event {
        tier: 99,
        kind: -1,
        medium: -1,
        locality: -1,
        keys: ptr::null(),
        len: 0,
    }
}

/// The keys of a primary-tier event (checking its fixed fields).
fn event_keys(e: &kvtier_event) -> Vec<Vec<u8>> {
    assert_eq!(
        (e.tier, e.medium, e.locality),
        (0, KVTIER_MEDIUM_CPU, KVTIER_LOCALITY_LOCAL)
    );
    if e.len == 0 {
        assert!(e.keys.is_null());
        return Vec::new();
    }
    let keys = unsafe { std::slice::from_raw_parts(e.keys, e.len) };
    keys.iter()
        .map(|k| unsafe { std::slice::from_raw_parts(k.data, k.len) }.to_vec())
        .collect()
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

/// The batched lookup as an engine uses it: a request's keys in order,
/// stopping at the first that is not ready, with HIT_PENDING and MISS told
/// apart and a miss saying why.
#[test]
fn a_batched_lookup_counts_leading_hits_and_says_how_the_first_other_key_answered() {
    let p = new(8, c"lru");
    let r = begin(p, c"r");
    let names: Vec<Vec<u8>> = (0..6u8).map(|i| vec![b'k', i]).collect();
    let k: Vec<kvtier_key> = names.iter().map(|n| ck(n)).collect();
    // 0, 1, 2 ready; 3 being written; 4, 5 absent.
    let (st, _) = store_for(p, r, &k[..4]);
    assert_eq!(st, kvtier_status::Ok);
    complete_for(p, r, &k[..3], true);
    assert_eq!(
        (
            KVTIER_LOOKUP_MISS,
            KVTIER_LOOKUP_HIT,
            KVTIER_LOOKUP_HIT_PENDING
        ),
        (0, 1, 2),
        "the header's values"
    );
    let cases: [(&[usize], kvtier_lookup_answer); 7] = [
        (&[0, 1, 2], answer(3, KVTIER_LOOKUP_HIT)),
        (&[0, 1, 2, 3, 4], answer(3, KVTIER_LOOKUP_HIT_PENDING)),
        (&[0, 1, 4, 2, 3], answer(2, KVTIER_LOOKUP_MISS)),
        (&[5, 0, 1], answer(0, KVTIER_LOOKUP_MISS)),
        (&[3], answer(0, KVTIER_LOOKUP_HIT_PENDING)),
        (&[2, 2, 2], answer(3, KVTIER_LOOKUP_HIT)),
        (&[], answer(0, KVTIER_LOOKUP_HIT)),
    ];
    for (ids, want) in cases {
        let keys: Vec<kvtier_key> = ids.iter().map(|&i| k[i]).collect();
        assert_eq!(lookup(p, &keys), (kvtier_status::Ok, want), "{ids:?}");
    }
    assert_eq!(answer(0, KVTIER_LOOKUP_MISS).reason, KVTIER_MISS_ABSENT);
    assert_eq!(
        answer(0, KVTIER_LOOKUP_HIT_PENDING).reason,
        KVTIER_MISS_NONE
    );
    // Lookups change nothing: no stats, no events beyond the stores'.
    let before = read_stats(p);
    lookup(p, &k);
    let after = read_stats(p);
    assert_eq!(
        (before.used, before.events_queued, before.write_pending),
        (after.used, after.events_queued, after.write_pending)
    );
    // NULL keys with len 0 are an empty lookup; NULL answer_out is refused.
    let mut a = answer(9, KVTIER_LOOKUP_MISS);
    assert_eq!(
        unsafe { kvtier_primary_lookup(p, ptr::null(), 0, &mut a) },
        kvtier_status::Ok
    );
    assert_eq!(a, answer(0, KVTIER_LOOKUP_HIT));
    assert_eq!(
        unsafe { kvtier_primary_lookup(p, k.as_ptr(), 1, ptr::null_mut()) },
        kvtier_status::NullArgument
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

/// A stale handle (never handed out, 0, or finished) is refused by every
/// call of a request, changing nothing and touching no other request.
#[test]
fn stale_and_finished_handles_are_unknown_requests_for_every_call() {
    let p = new(4, c"lru");
    let (ka, kb) = (b"a".to_vec(), b"b".to_vec());
    let keys = [ck(&ka), ck(&kb)];
    let r1 = begin(p, c"one");
    let r2 = begin(p, c"two");
    assert_eq!(r2, r1 + 1, "handles count up");
    assert_eq!(r1, 1, "the first handle is 1");
    // A duplicate name is refused and writes no handle.
    let mut out = 77;
    assert_eq!(
        unsafe { kvtier_primary_request_begin(p, c"two".as_ptr(), &mut out) },
        kvtier_status::DuplicateRequest
    );
    assert_eq!(out, 77);
    // r2 stores and pins a key; r1 finishes.
    assert_eq!(store_for(p, r2, &keys[..1]).0, kvtier_status::Ok);
    complete_for(p, r2, &keys[..1], true);
    let mut slot = [u32::MAX; 2];
    assert_eq!(
        unsafe { kvtier_primary_prepare_load(p, r2, keys.as_ptr(), 1, slot.as_mut_ptr()) },
        kvtier_status::Ok
    );
    finish(p, r1);
    let before = read_stats(p);
    let never = r2 + 100;
    for stale in [r1, 0, never] {
        let unknown = |st: kvtier_status, call: &str| {
            assert_eq!(st, kvtier_status::UnknownRequest, "{call} with {stale}");
            assert!(last_error().contains("unknown request"), "{}", last_error());
        };
        unknown(
            unsafe { kvtier_primary_request_finished(p, stale) },
            "request_finished",
        );
        let (st, s) = store_for(p, stale, &keys);
        unknown(st, "prepare_store");
        assert_eq!(
            (s.stored, s.slots[0]),
            (usize::MAX, u32::MAX),
            "nothing written"
        );
        let mut done = kvtier_store_completion {
            ready: 9,
            ..Default::default()
        };
        unknown(
            unsafe { kvtier_primary_complete_store(p, stale, keys.as_ptr(), 2, true, &mut done) },
            "complete_store",
        );
        assert_eq!(done.ready, 9, "nothing written");
        unknown(
            unsafe {
                kvtier_primary_prepare_load(p, stale, keys.as_ptr(), 1, slot[1..].as_mut_ptr())
            },
            "prepare_load",
        );
        assert_eq!(slot[1], u32::MAX, "nothing written");
        unknown(
            unsafe { kvtier_primary_complete_load(p, stale, keys.as_ptr(), 1) },
            "complete_load",
        );
        unknown(
            unsafe { kvtier_primary_touch(p, stale, keys.as_ptr(), 2) },
            "touch",
        );
        let pos = [16u64, 32];
        unknown(
            unsafe { kvtier_primary_set_positions(p, stale, keys.as_ptr(), 2, pos.as_ptr()) },
            "set_positions",
        );
    }
    let after = read_stats(p);
    assert_eq!(
        (after.used, after.pinned, after.stores_planned, after.loads),
        (
            before.used,
            before.pinned,
            before.stores_planned,
            before.loads
        ),
        "stale handles changed nothing"
    );
    // r2 is intact: its pin is released by its own handle.
    assert_eq!(
        unsafe { kvtier_primary_complete_load(p, r2, keys.as_ptr(), 1) },
        kvtier_status::Ok
    );
    // A new request never gets an old handle back, even with an old name.
    let again = begin(p, c"one");
    assert!(again > r2, "{again} reuses a handle");
    finish(p, r2);
    finish(p, again);
    unsafe { kvtier_primary_free(p) };
}

/// The store plan: the caller's three arrays get the positions and slots
/// of the keys to store and copies of the evicted keys, the counts say how
/// many entries are used, and entries past them are left alone.
#[test]
fn a_store_plan_lists_positions_slots_and_evicted_key_copies() {
    let p = new(3, c"lru");
    let r = begin(p, c"r");
    // Three ready keys of different lengths; the first stays pinned.
    let old: Vec<Vec<u8>> = vec![vec![1; 64], vec![2; 5], vec![3; 17]];
    let old_keys: Vec<kvtier_key> = old.iter().map(|k| ck(k)).collect();
    assert_eq!(store_for(p, r, &old_keys).0, kvtier_status::Ok);
    complete_for(p, r, &old_keys, true);
    let mut slot = [0u32];
    assert_eq!(
        unsafe { kvtier_primary_prepare_load(p, r, old_keys.as_ptr(), 1, slot.as_mut_ptr()) },
        kvtier_status::Ok
    );
    finish(p, r);
    let r = begin(p, c"s");
    // A resident key, two new keys (one repeated): two stored, two evicted.
    let (n1, n2) = (b"new-1".to_vec(), b"new-2".to_vec());
    let keys = [old_keys[0], ck(&n1), ck(&n2), ck(&n1)];
    let (st, s) = store_for(p, r, &keys);
    assert_eq!(st, kvtier_status::Ok, "{}", last_error());
    assert!(!s.refused);
    assert_eq!((s.stored, s.evicted_count), (2, 2));
    assert_eq!(&s.store_indices, &[1, 2, usize::MAX, usize::MAX]);
    let mut freed = s.slots[..2].to_vec();
    freed.sort();
    assert_eq!(freed, vec![1, 2], "the evicted keys' slots");
    assert_eq!(&s.slots[2..], &[u32::MAX, u32::MAX]);
    let mut evicted = s.evicted_keys();
    evicted.sort();
    assert_eq!(evicted, vec![old[1].clone(), old[2].clone()]);
    assert!(s.evicted[2..].iter().all(|k| k.len == 0), "left alone");
    // No keys: NULL arrays are fine; with keys, each array is required.
    let mut plan = kvtier_store_plan {
        store_indices: ptr::null_mut(),
        slots: ptr::null_mut(),
        evicted: ptr::null_mut(),
        store_count: 9,
        evicted_count: 9,
        refused: true,
    };
    assert_eq!(
        unsafe { kvtier_primary_prepare_store(p, r, ptr::null(), 0, &mut plan) },
        kvtier_status::Ok
    );
    assert_eq!(
        (plan.store_count, plan.evicted_count, plan.refused),
        (0, 0, false)
    );
    let mut indices = [0usize; 1];
    let mut bufs = [empty_key_buf(); 1];
    plan.store_indices = indices.as_mut_ptr();
    plan.evicted = bufs.as_mut_ptr();
    assert_eq!(
        unsafe { kvtier_primary_prepare_store(p, r, keys.as_ptr(), 1, &mut plan) },
        kvtier_status::NullArgument
    );
    assert!(last_error().contains("plan_out->slots"), "{}", last_error());
    unsafe { kvtier_primary_free(p) };
}

/// Events come as runs of one kind in the one event shape, their keys in
/// memory the handle owns: valid, unchanged, through any number of other
/// calls, until the next take_events.
#[test]
fn events_come_in_runs_of_one_kind_with_keys_valid_until_the_next_take() {
    let p = new(2, c"lru");
    let r = begin(p, c"r");
    let names: Vec<Vec<u8>> = (0..4u8).map(|i| vec![b'e', i, i, i]).collect();
    let k: Vec<kvtier_key> = names.iter().map(|n| ck(n)).collect();
    // stored 0, 1 | removed 0, 1 | stored 2, 3.
    assert_eq!(store_for(p, r, &k[..2]).0, kvtier_status::Ok);
    complete_for(p, r, &k[..2], true);
    let (st, s) = store_for(p, r, &k[2..]);
    assert_eq!((st, s.evicted_count), (kvtier_status::Ok, 2));
    complete_for(p, r, &k[2..], true);
    let mut ev = [no_event(); 8];
    let (mut n, mut more) = (0usize, true);
    assert_eq!(
        unsafe { kvtier_primary_take_events(p, ev.as_mut_ptr(), 2, &mut n, &mut more) },
        kvtier_status::Ok
    );
    assert_eq!((n, more), (2, true), "two runs fit; the third waits");
    assert_eq!(
        (ev[0].kind, ev[1].kind),
        (KVTIER_EVENT_STORED, KVTIER_EVENT_REMOVED)
    );
    let first = (event_keys(&ev[0]), event_keys(&ev[1]));
    assert_eq!(first.0, names[..2].to_vec());
    let mut removed = first.1.clone();
    removed.sort();
    assert_eq!(removed, names[..2].to_vec());
    assert_eq!(ev[2].tier, 99, "nothing written past the runs");
    // Other calls (a reset included) leave the keys handed over alone.
    let kept = ev;
    complete_for(p, r, &k[..1], true);
    lookup(p, &k);
    read_stats(p);
    assert_eq!(unsafe { kvtier_primary_reset(p) }, kvtier_status::Ok);
    assert_eq!((event_keys(&kept[0]), event_keys(&kept[1])), first);
    // The reset dropped "stored 2, 3" and queued "cleared": no keys.
    assert_eq!(
        unsafe { kvtier_primary_take_events(p, ev.as_mut_ptr(), 8, &mut n, &mut more) },
        kvtier_status::Ok
    );
    assert_eq!((n, more), (1, false));
    assert_eq!(ev[0].kind, KVTIER_EVENT_CLEARED);
    assert_eq!(event_keys(&ev[0]), Vec::<Vec<u8>>::new());
    // Many events of one kind are one run.
    let r = begin(p, c"s");
    assert_eq!(store_for(p, r, &k[..2]).0, kvtier_status::Ok);
    complete_for(p, r, &k[1..2], true);
    complete_for(p, r, &k[..1], true);
    assert_eq!(
        unsafe { kvtier_primary_take_events(p, ev.as_mut_ptr(), 8, &mut n, &mut more) },
        kvtier_status::Ok
    );
    assert_eq!((n, more), (1, false));
    assert_eq!(ev[0].kind, KVTIER_EVENT_STORED);
    assert_eq!(event_keys(&ev[0]), vec![names[1].clone(), names[0].clone()]);
    unsafe { kvtier_primary_free(p) };
}

/// read_stats under the growth rule: a caller built against an older,
/// shorter kvtier_primary_stats gets only the fields it knows, and nothing
/// is written past its struct; sizes outside the known layouts are refused.
#[test]
fn read_stats_writes_only_inside_the_callers_struct_size() {
    let p = new(4, c"lru");
    let r = begin(p, c"r");
    assert_eq!(store_for(p, r, &[ck(b"x"), ck(b"y")]).0, kvtier_status::Ok);
    let full = read_stats(p);
    assert_eq!(
        full.struct_size,
        std::mem::size_of::<kvtier_primary_stats>()
    );
    assert_eq!((full.capacity, full.used, full.write_pending), (4, 2, 2));
    // An "older" layout ending after `write_pending`, in a buffer of
    // marker bytes: its fields are written, the bytes after it are not.
    #[repr(C)]
    struct Guarded {
        stats: kvtier_primary_stats,
        guard: u64,
    }
    let short = std::mem::offset_of!(kvtier_primary_stats, pinned);
    let mut g: Guarded = unsafe { std::mem::zeroed() };
    let bytes = unsafe {
        std::slice::from_raw_parts_mut(
            (&mut g as *mut Guarded).cast::<u8>(),
            std::mem::size_of::<Guarded>(),
        )
    };
    bytes.fill(0xA5);
    g.stats.struct_size = short;
    // The first published layout is this one: a shorter size is refused,
    // writing nothing.
    assert_eq!(
        unsafe { kvtier_primary_read_stats(p, &mut g.stats) },
        kvtier_status::InvalidArgument
    );
    assert!(last_error().contains("struct_size"), "{}", last_error());
    let bytes = unsafe {
        std::slice::from_raw_parts(
            (&g as *const Guarded).cast::<u8>(),
            std::mem::size_of::<Guarded>(),
        )
    };
    assert!(
        bytes[8..].iter().all(|&b| b == 0xA5),
        "written on a refusal"
    );
    // The full size is written whole, and the guard after it stays.
    g.stats.struct_size = std::mem::size_of::<kvtier_primary_stats>();
    assert_eq!(
        unsafe { kvtier_primary_read_stats(p, &mut g.stats) },
        kvtier_status::Ok
    );
    assert_eq!(g.guard, 0xA5A5_A5A5_A5A5_A5A5, "wrote past struct_size");
    assert_eq!((g.stats.used, g.stats.write_pending), (2, 2));
    // Larger than this library knows, or 0: refused.
    for size in [0, std::mem::size_of::<kvtier_primary_stats>() + 8] {
        g.stats.struct_size = size;
        g.stats.used = 77;
        assert_eq!(
            unsafe { kvtier_primary_read_stats(p, &mut g.stats) },
            kvtier_status::InvalidArgument,
            "struct_size {size}"
        );
        assert_eq!(g.stats.used, 77, "nothing written");
    }
    unsafe { kvtier_primary_free(p) };
}
