//! Misuse that once looked like success, through the C ABI: a store
//! completion that names keys it leaves alone answers
//! `KVTIER_STATUS_KEYS_IGNORED` (manager and primary tier by one rule),
//! every request handle has one state an engine can ask for, an unknown
//! handle's message says which, event keys live in the caller's own
//! buffer, and both `prepare_store` calls take `plan.evicted` NULL.

#[path = "support/ffi_calls.rs"]
mod ffi_calls;

use std::ffi::CStr;
use std::ptr::{null, null_mut};

use ffi_calls::{Buffer, PlanBuf, begin, ck, last_error};
use kvtier::dialect::*;
use kvtier::events::*;
use kvtier::handles::*;
use kvtier::kvtier_key;
use kvtier::kvtier_status as S;
use kvtier::manager::*;
use kvtier::primary::*;
use kvtier::requests::*;

fn manager(capacity: u32) -> *mut kvtier_manager {
    let mut o = kvtier_manager_options_default();
    o.capacity = capacity;
    o.event_capacity = 1024;
    let mut m = null_mut();
    assert_eq!(unsafe { kvtier_manager_new(&o, null(), &mut m) }, S::Ok);
    m
}

fn primary(capacity: u32) -> *mut kvtier_primary {
    let mut o = kvtier_primary_options_default();
    o.capacity = capacity;
    o.event_capacity = 1024;
    let mut p = null_mut();
    assert_eq!(unsafe { kvtier_primary_new(&o, &mut p) }, S::Ok);
    p
}

fn key(i: u8) -> [u8; 4] {
    [b'k', 0, 0, i]
}

fn views(ks: &[[u8; 4]]) -> Vec<kvtier_key> {
    ks.iter().map(|k| ck(k)).collect()
}

/// prepare_store through the manager (not refused): the planned slots.
fn plan(m: *mut kvtier_manager, r: kvtier_request_handle, ks: &[[u8; 4]]) -> usize {
    let keys = views(ks);
    let mut b = PlanBuf::new(keys.len());
    let st = unsafe { kvtier_manager_prepare_store(m, r, keys.as_ptr(), keys.len(), &mut b.plan) };
    assert_eq!(st, S::Ok, "{}", last_error());
    assert!(!b.plan.refused);
    b.plan.store_count
}

/// complete_store through the manager: its status and what it wrote
/// (pre-filled with 9s, so a report not written shows).
fn complete(
    m: *mut kvtier_manager,
    r: kvtier_request_handle,
    ks: &[[u8; 4]],
) -> (S, kvtier_store_completion) {
    let keys = views(ks);
    let mut done = kvtier_store_completion {
        ready: 9,
        dropped: 9,
        ignored: 9,
        foreign: 9,
        already_ready: 9,
    };
    let st =
        unsafe { kvtier_manager_complete_store(m, r, keys.as_ptr(), keys.len(), true, &mut done) };
    (st, done)
}

fn report(
    ready: usize,
    ignored: usize,
    foreign: usize,
    already_ready: usize,
) -> kvtier_store_completion {
    kvtier_store_completion {
        ready,
        dropped: 0,
        ignored,
        foreign,
        already_ready,
    }
}

fn state(m: *mut kvtier_manager, r: kvtier_request_handle) -> kvtier_request_state {
    let mut s = -1;
    assert_eq!(unsafe { kvtier_manager_request_state(m, r, &mut s) }, S::Ok);
    s
}

fn primary_state(p: *mut kvtier_primary, r: kvtier_request_handle) -> kvtier_request_state {
    let mut s = -1;
    assert_eq!(unsafe { kvtier_primary_request_state(p, r, &mut s) }, S::Ok);
    s
}

#[test]
fn a_manager_completion_that_leaves_keys_alone_says_so_in_its_status() {
    let m = manager(8);
    let (a, b) = (begin(m, c"a"), begin(m, c"b"));
    assert_eq!(plan(m, a, &[key(1)]), 1);
    assert_eq!(plan(m, b, &[key(2), key(3)]), 2);
    // b names a's write-pending key and an absent one beside its own.
    let (st, done) = complete(m, b, &[key(2), key(1), key(9)]);
    assert_eq!(st, S::KeysIgnored, "{}", last_error());
    assert_eq!(
        done,
        report(1, 1, 1, 0),
        "the report is written with the status"
    );
    assert_eq!(
        last_error(),
        "keys ignored: 2 of the keys named were not write pending for request handle 2 and were left alone (1 absent, 1 written by another request or a promotion); 1 completed"
    );
    // Its own keys only: OK; then a ready key named again: ignored.
    assert_eq!(complete(m, a, &[key(1)]), (S::Ok, report(1, 0, 0, 0)));
    assert_eq!(
        complete(m, b, &[key(3), key(1)]),
        (S::KeysIgnored, report(1, 0, 0, 1))
    );
    // Nothing in flight: every key named is left alone, the report all 0;
    // naming none is no misuse.
    assert_eq!(
        complete(m, a, &[key(1)]),
        (S::KeysIgnored, report(0, 0, 0, 0))
    );
    assert!(
        last_error().contains("request handle 1 has no store in flight"),
        "{}",
        last_error()
    );
    assert_eq!(complete(m, a, &[]), (S::Ok, report(0, 0, 0, 0)));
    unsafe { kvtier_manager_free(m) };
}

#[test]
fn the_primary_tier_completes_by_the_same_rule() {
    let p = primary(8);
    let mut r = 0;
    assert_eq!(
        unsafe { kvtier_primary_request_begin(p, c"r".as_ptr(), &mut r) },
        S::Ok
    );
    let keys = views(&[key(1), key(2)]);
    let mut b = PlanBuf::new(2);
    let st = unsafe { kvtier_primary_prepare_store(p, r, keys.as_ptr(), 2, &mut b.plan) };
    assert_eq!((st, b.plan.store_count), (S::Ok, 2));
    let mut done = kvtier_store_completion::default();
    let named = views(&[key(1), key(9)]);
    let st = unsafe { kvtier_primary_complete_store(p, r, named.as_ptr(), 2, true, &mut done) };
    assert_eq!(st, S::KeysIgnored, "{}", last_error());
    assert_eq!(done, report(1, 1, 0, 0));
    let st = unsafe { kvtier_primary_complete_store(p, r, keys[1..].as_ptr(), 1, true, &mut done) };
    assert_eq!((st, done), (S::Ok, report(1, 0, 0, 0)));
    unsafe { kvtier_primary_free(p) };
}

/// The message of a call that does not take `r`.
fn unknown_message(m: *mut kvtier_manager, r: kvtier_request_handle) -> String {
    let k = [ck(&key(7))];
    assert_eq!(
        unsafe { kvtier_manager_touch(m, r, k.as_ptr(), 1) },
        S::UnknownRequest
    );
    last_error()
}

#[test]
fn every_manager_handle_has_one_state_and_an_unknown_one_says_which() {
    let m = manager(8);
    assert_eq!(state(m, 0), KVTIER_REQUEST_STATE_NEVER_ISSUED);
    assert_eq!(state(m, 1), KVTIER_REQUEST_STATE_NEVER_ISSUED);
    let r = begin(m, c"r");
    assert_eq!(state(m, r), KVTIER_REQUEST_STATE_ACTIVE);
    assert_eq!(state(m, r + 1), KVTIER_REQUEST_STATE_NEVER_ISSUED);
    // r stores k1 (ready) and plans k2; it loads k1 and finishes with both
    // in flight.
    plan(m, r, &[key(1)]);
    assert_eq!(complete(m, r, &[key(1)]).0, S::Ok);
    plan(m, r, &[key(2)]);
    let mut slot = 0;
    let k1 = [ck(&key(1))];
    assert_eq!(
        unsafe { kvtier_manager_prepare_load(m, r, k1.as_ptr(), 1, &mut slot) },
        S::Ok
    );
    assert_eq!(unsafe { kvtier_manager_request_finished(m, r) }, S::Ok);
    assert_eq!(state(m, r), KVTIER_REQUEST_STATE_FINISHING);
    assert_eq!(
        unknown_message(m, r),
        "unknown request: request handle 1 has finished; until its stores in flight are completed only complete_store, and complete_load of the pins its loads hold, take it"
    );
    assert_eq!(complete(m, r, &[key(2)]).0, S::Ok);
    assert_eq!(state(m, r), KVTIER_REQUEST_STATE_LOADS_PINNED);
    assert_eq!(
        unknown_message(m, r),
        "unknown request: request handle 1 has finished; only complete_load of the pins its loads still hold takes it"
    );
    assert_eq!(
        unsafe { kvtier_manager_complete_load(m, r, k1.as_ptr(), 1) },
        S::Ok
    );
    assert_eq!(state(m, r), KVTIER_REQUEST_STATE_GONE);
    assert_eq!(
        unknown_message(m, r),
        "unknown request: request handle 1 finished and was let go"
    );
    assert_eq!(
        unknown_message(m, 99),
        "unknown request: request handle 99 was never issued by this manager"
    );
    // The late calls say it too.
    let (st, _) = complete(m, r, &[key(2)]);
    assert_eq!(st, S::UnknownRequest);
    assert!(
        last_error().ends_with("finished and was let go"),
        "{}",
        last_error()
    );
    unsafe { kvtier_manager_free(m) };
}

#[test]
fn every_primary_handle_has_one_state() {
    let p = primary(8);
    assert_eq!(primary_state(p, 0), KVTIER_REQUEST_STATE_NEVER_ISSUED);
    let mut r = 0;
    assert_eq!(
        unsafe { kvtier_primary_request_begin(p, c"r".as_ptr(), &mut r) },
        S::Ok
    );
    assert_eq!(primary_state(p, r), KVTIER_REQUEST_STATE_ACTIVE);
    let keys = views(&[key(1)]);
    let mut b = PlanBuf::new(1);
    assert_eq!(
        unsafe { kvtier_primary_prepare_store(p, r, keys.as_ptr(), 1, &mut b.plan) },
        S::Ok
    );
    assert_eq!(unsafe { kvtier_primary_request_finished(p, r) }, S::Ok);
    assert_eq!(primary_state(p, r), KVTIER_REQUEST_STATE_FINISHING);
    let mut done = kvtier_store_completion::default();
    assert_eq!(
        unsafe { kvtier_primary_complete_store(p, r, keys.as_ptr(), 1, true, &mut done) },
        S::Ok
    );
    assert_eq!(primary_state(p, r), KVTIER_REQUEST_STATE_GONE);
    let mut q = 0;
    assert_eq!(
        unsafe { kvtier_primary_request_begin(p, c"q".as_ptr(), &mut q) },
        S::Ok
    );
    let mut slot = 0;
    assert_eq!(
        unsafe { kvtier_primary_prepare_load(p, q, keys.as_ptr(), 1, &mut slot) },
        S::Ok
    );
    assert_eq!(unsafe { kvtier_primary_request_finished(p, q) }, S::Ok);
    assert_eq!(primary_state(p, q), KVTIER_REQUEST_STATE_LOADS_PINNED);
    assert_eq!(primary_state(p, q + 1), KVTIER_REQUEST_STATE_NEVER_ISSUED);
    unsafe { kvtier_primary_free(p) };
}

/// Takes up to `capacity` events into `buffer`: the events and `more`.
fn take(m: *mut kvtier_manager, buffer: &Buffer, capacity: usize) -> (Vec<kvtier_event>, bool) {
    let mut evs = vec![unsafe { std::mem::zeroed::<kvtier_event>() }; capacity];
    let (mut n, mut more) = (0, false);
    let st = unsafe {
        kvtier_manager_take_events(m, buffer.0, evs.as_mut_ptr(), capacity, &mut n, &mut more)
    };
    assert_eq!(st, S::Ok, "{}", last_error());
    evs.truncate(n);
    (evs, more)
}

fn keys_of(e: &kvtier_event) -> Vec<Vec<u8>> {
    (0..e.len)
        .map(|i| {
            let k = unsafe { &*e.keys.add(i) };
            unsafe { std::slice::from_raw_parts(k.data, k.len) }.to_vec()
        })
        .collect()
}

fn queued(m: *mut kvtier_manager) -> (usize, usize) {
    let (mut events, mut keys) = (9, 9);
    assert_eq!(
        unsafe { kvtier_manager_events_queued(m, &mut events, &mut keys) },
        S::Ok
    );
    (events, keys)
}

#[test]
fn event_keys_live_in_the_callers_buffer_until_its_own_next_take() {
    let m = manager(8);
    let r = begin(m, c"r");
    assert_eq!(queued(m), (0, 0));
    plan(m, r, &[key(1), key(2)]);
    complete(m, r, &[key(1), key(2)]);
    assert_eq!(queued(m), (1, 2), "one batch of two stored keys");
    let (first, second) = (Buffer::new(), Buffer::new());
    let (mine, more) = take(m, &first, 4);
    assert_eq!((mine.len(), more), (1, false));
    assert_eq!(queued(m), (0, 0));
    // Another caller takes into its own buffer: the first caller's keys
    // stay where they were, unchanged.
    plan(m, r, &[key(3)]);
    complete(m, r, &[key(3)]);
    let (theirs, _) = take(m, &second, 4);
    assert_eq!(keys_of(&theirs[0]), vec![key(3).to_vec()]);
    assert_eq!(keys_of(&mine[0]), vec![key(1).to_vec(), key(2).to_vec()]);
    // Only a take into the first buffer replaces them.
    let (again, _) = take(m, &first, 4);
    assert!(again.is_empty());
    // events_queued counts batches as a take hands them out.
    plan(m, r, &[key(4)]);
    complete(m, r, &[key(4)]);
    assert_eq!(unsafe { kvtier_manager_reset_cache(m) }, S::Ok);
    let (events, keys) = queued(m);
    let (taken, more) = take(m, &first, 16);
    assert!(!more);
    assert_eq!(events, taken.len());
    assert_eq!(keys, taken.iter().map(|e| e.len).sum::<usize>());
    assert_eq!(taken.last().map(|e| e.kind), Some(KVTIER_EVENT_CLEARED));
    unsafe { kvtier_manager_free(m) };
}

#[test]
fn both_prepare_stores_take_plan_evicted_null_and_count_the_evictions() {
    // Two slots full of idle keys: a store of two new keys evicts both.
    let m = manager(2);
    let r = begin(m, c"r");
    plan(m, r, &[key(1), key(2)]);
    complete(m, r, &[key(1), key(2)]);
    let keys = views(&[key(3), key(4)]);
    let mut b = PlanBuf::new(2);
    b.plan.evicted = null_mut();
    let st = unsafe { kvtier_manager_prepare_store(m, r, keys.as_ptr(), 2, &mut b.plan) };
    assert_eq!(st, S::Ok, "{}", last_error());
    assert_eq!(
        (b.plan.store_count, b.plan.evicted_count, b.plan.refused),
        (2, 2, false)
    );
    unsafe { kvtier_manager_free(m) };

    let p = primary(2);
    let mut r = 0;
    assert_eq!(
        unsafe { kvtier_primary_request_begin(p, c"r".as_ptr(), &mut r) },
        S::Ok
    );
    let first = views(&[key(1), key(2)]);
    let mut b = PlanBuf::new(2);
    assert_eq!(
        unsafe { kvtier_primary_prepare_store(p, r, first.as_ptr(), 2, &mut b.plan) },
        S::Ok
    );
    let mut done = kvtier_store_completion::default();
    assert_eq!(
        unsafe { kvtier_primary_complete_store(p, r, first.as_ptr(), 2, true, &mut done) },
        S::Ok
    );
    let mut b = PlanBuf::new(2);
    b.plan.evicted = null_mut();
    let st = unsafe { kvtier_primary_prepare_store(p, r, keys.as_ptr(), 2, &mut b.plan) };
    assert_eq!(st, S::Ok, "{}", last_error());
    assert_eq!(
        (b.plan.store_count, b.plan.evicted_count, b.plan.refused),
        (2, 2, false)
    );
    unsafe { kvtier_primary_free(p) };
}

#[test]
fn a_take_without_a_buffer_is_a_null_argument() {
    let m = manager(2);
    let (mut n, mut more) = (0, false);
    let st = unsafe { kvtier_manager_take_events(m, null_mut(), null_mut(), 0, &mut n, &mut more) };
    assert_eq!(st, S::NullArgument);
    assert_eq!(
        unsafe { CStr::from_ptr(kvtier::kvtier_last_error_message()) }
            .to_str()
            .unwrap(),
        "argument `buffer` is NULL"
    );
    unsafe { kvtier_manager_free(m) };
}
