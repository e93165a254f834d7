//! The shapes the header gives the primary tier's answers, through the C
//! ABI: request handles (from 1, never reused, stale ones refused by every
//! call), the batched lookup, the store plan, events as runs of one kind
//! with keys the handle owns, and statistics under the growth rule.

#[path = "support/primary_calls.rs"]
mod primary_calls;

use std::ptr;

use kvtier::dialect::*;
use kvtier::kvtier_key;
use kvtier::kvtier_status;
use kvtier::primary::*;
use primary_calls::*;

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
