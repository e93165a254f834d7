//! Calls on a standalone primary tier through the C ABI that several tests
//! make the same way: tiers and requests, whole store plans, completions,
//! lookups, stats and the keys of events.

#![allow(dead_code)]

#[path = "c_basics.rs"]
pub mod c_basics;

pub use c_basics::{ck, last_error};
use std::ffi::CStr;
use std::ptr;

use kvtier::dialect::*;
use kvtier::kvtier_key;
use kvtier::kvtier_status;
use kvtier::primary::*;

/// A tier of `capacity` slots with `policy` and room for 16 events.
pub fn new(capacity: u32, policy: &CStr) -> *mut kvtier_primary {
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
pub fn begin(p: *mut kvtier_primary, name: &CStr) -> kvtier_request_handle {
    let mut r = 0;
    let st = unsafe { kvtier_primary_request_begin(p, name.as_ptr(), &mut r) };
    assert_eq!(st, kvtier_status::Ok, "{}", last_error());
    assert_ne!(r, 0, "0 is never a handle");
    r
}

/// Finishes request `r`, which must be active.
pub fn finish(p: *mut kvtier_primary, r: kvtier_request_handle) {
    let st = unsafe { kvtier_primary_request_finished(p, r) };
    assert_eq!(st, kvtier_status::Ok, "{}", last_error());
}

/// An evicted-key entry holding nothing.
pub fn empty_key_buf() -> kvtier_key_buf {
    kvtier_key_buf {
        len: 0,
        bytes: [0; 64],
    }
}

/// What one prepare_store wrote: its arrays (room for one entry per key,
/// pre-filled with markers) and counts.
pub struct Store {
    pub store_indices: Vec<usize>,
    pub slots: Vec<u32>,
    pub evicted: Vec<kvtier_key_buf>,
    pub stored: usize,
    pub evicted_count: usize,
    pub refused: bool,
}

impl Store {
    /// The keys evicted, in eviction order.
    pub fn evicted_keys(&self) -> Vec<Vec<u8>> {
        self.evicted[..self.evicted_count]
            .iter()
            .map(|k| k.bytes[..k.len].to_vec())
            .collect()
    }
}

/// prepare_store of `keys` for `r`, with arrays pre-filled with markers.
pub fn store_for(
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

/// complete_store of `keys` for `r`, which must complete what it can;
/// its counts.  The status must follow them: `KEYS_IGNORED` exactly when a
/// key named was left alone (absent, another writer's, ready), else OK.
pub fn complete_for(
    p: *mut kvtier_primary,
    r: kvtier_request_handle,
    keys: &[kvtier_key],
    success: bool,
) -> kvtier_store_completion {
    let mut done = kvtier_store_completion::default();
    let st = unsafe {
        kvtier_primary_complete_store(p, r, keys.as_ptr(), keys.len(), success, &mut done)
    };
    let left_alone = done.ignored + done.foreign + done.already_ready;
    let want = if left_alone > 0 {
        kvtier_status::KeysIgnored
    } else {
        kvtier_status::Ok
    };
    assert_eq!(st, want, "{done:?}: {}", last_error());
    done
}

/// The batched lookup of `keys`, its answer pre-filled with markers.
pub fn lookup(
    p: *mut kvtier_primary,
    keys: &[kvtier_key],
) -> (kvtier_status, kvtier_lookup_answer) {
    let mut a = kvtier_lookup_answer {
        hits: usize::MAX,
        stop: -1,
        reason: -1,
        pending: usize::MAX,
        end: usize::MAX,
    };
    let st = unsafe { kvtier_primary_lookup(p, keys.as_ptr(), keys.len(), &mut a) };
    (st, a)
}

/// The answer of a lookup that stopped after `hits` keys with `stop`
/// (a key being written is one pending, and the prefix ends after it).
pub fn answer(hits: usize, stop: kvtier_lookup_result) -> kvtier_lookup_answer {
    let pending = usize::from(stop == kvtier::dialect::KVTIER_LOOKUP_HIT_PENDING);
    kvtier_lookup_answer {
        hits,
        stop,
        reason: if stop == KVTIER_LOOKUP_MISS {
            KVTIER_MISS_ABSENT
        } else {
            KVTIER_MISS_NONE
        },
        pending,
        end: hits + pending,
    }
}

/// The answer of one key looked up alone.
pub fn lookup_one(p: *mut kvtier_primary, key: kvtier_key) -> kvtier_lookup_result {
    let (st, a) = lookup(p, &[key]);
    assert_eq!(st, kvtier_status::Ok, "{}", last_error());
    a.stop
}

/// The tier's stats, in a struct of this library's size.
pub fn read_stats(p: *mut kvtier_primary) -> kvtier_primary_stats {
    let mut stats = kvtier_primary_stats::default();
    assert_eq!(
        unsafe { kvtier_primary_read_stats(p, &mut stats) },
        kvtier_status::Ok
    );
    stats
}

/// An event entry of marker values, as no call writes them.
pub fn no_event() -> kvtier_event {
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
pub fn event_keys(e: &kvtier_event) -> Vec<Vec<u8>> {
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
