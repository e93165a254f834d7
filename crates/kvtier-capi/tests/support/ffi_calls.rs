//! Calls on a manager through the C ABI that several tests make the same
//! way: the last error message, key views, starting requests, lookups,
//! whole stores, and the plain "job succeeded" result a C tier reports.

#![allow(dead_code)]

#[path = "c_basics.rs"]
pub mod c_basics;

pub use c_basics::{ck, last_error};
use std::ffi::CStr;
use std::ptr::{null, null_mut};

use kvtier::dialect::{
    kvtier_lookup_answer, kvtier_request_handle, kvtier_store_completion, kvtier_store_plan,
};
use kvtier::events::{kvtier_event_buffer, kvtier_event_buffer_free, kvtier_event_buffer_new};
use kvtier::kvtier_key;
use kvtier::kvtier_status as S;
use kvtier::manager::*;
use kvtier::requests::*;
use kvtier::tier::kvtier_job_result;

/// An event buffer, freed when dropped.
pub struct Buffer(pub *mut kvtier_event_buffer);

impl Buffer {
    pub fn new() -> Buffer {
        let mut b = null_mut();
        assert_eq!(unsafe { kvtier_event_buffer_new(&mut b) }, S::Ok);
        assert!(!b.is_null());
        Buffer(b)
    }
}

impl Drop for Buffer {
    fn drop(&mut self) {
        unsafe { kvtier_event_buffer_free(self.0) };
    }
}

thread_local! {
    static THREAD_BUFFER: Buffer = Buffer::new();
}

/// This thread's event buffer (freed when the thread ends): the keys of
/// the events taken into it stay valid until the thread's next take.
pub fn thread_buffer() -> *mut kvtier_event_buffer {
    THREAD_BUFFER.with(|b| b.0)
}

/// The result of job `id` that succeeded as a whole (no per-key list, no
/// figures).
pub fn succeeded(id: u64) -> kvtier_job_result {
    kvtier_job_result {
        id,
        success: true,
        succeeded_keys: null(),
        succeeded_len: 0,
        bytes: 0,
        duration_ns: 0,
    }
}

/// Starts request `name` (no parameters); its handle.
pub fn begin(m: *const kvtier_manager, name: &CStr) -> kvtier_request_handle {
    let mut h = 0;
    assert_eq!(
        unsafe { kvtier_manager_request_begin(m, name.as_ptr(), null(), &mut h, null_mut()) },
        S::Ok,
        "{}",
        last_error()
    );
    assert_ne!(h, 0, "0 is never a handle");
    h
}

/// `kvtier_manager_lookup` of `ks` for `req`; returns what it wrote.
pub fn lookup_keys<K: AsRef<[u8]>>(
    m: *const kvtier_manager,
    req: kvtier_request_handle,
    ks: &[K],
) -> kvtier_lookup_answer {
    lookup_keys_with(kvtier_manager_lookup, m, req, ks)
}

/// `kvtier_manager_lookup_per_key` of `ks` for `req`; returns what it wrote.
pub fn lookup_keys_per_key<K: AsRef<[u8]>>(
    m: *const kvtier_manager,
    req: kvtier_request_handle,
    ks: &[K],
) -> kvtier_lookup_answer {
    lookup_keys_with(kvtier::requests::kvtier_manager_lookup_per_key, m, req, ks)
}

/// A lookup export `f` of `ks` for `req`; returns what it wrote.
fn lookup_keys_with<K: AsRef<[u8]>>(
    f: unsafe extern "C" fn(
        *const kvtier_manager,
        kvtier_request_handle,
        *const kvtier_key,
        usize,
        *mut kvtier_lookup_answer,
    ) -> S,
    m: *const kvtier_manager,
    req: kvtier_request_handle,
    ks: &[K],
) -> kvtier_lookup_answer {
    let keys: Vec<kvtier_key> = ks.iter().map(|k| ck(k.as_ref())).collect();
    let mut out = kvtier_lookup_answer {
        hits: usize::MAX,
        stop: -1,
        reason: -1,
        pending: usize::MAX,
        end: usize::MAX,
    };
    assert_eq!(
        unsafe { f(m, req, keys.as_ptr(), keys.len(), &mut out) },
        S::Ok,
        "{}",
        last_error()
    );
    out
}

/// `kvtier_manager_lookup` of the one key `k` for `req`; its answer (a
/// `KVTIER_LOOKUP_*` value).
pub fn lookup(m: *const kvtier_manager, req: kvtier_request_handle, k: &[u8]) -> i32 {
    let a = lookup_keys(m, req, &[k]);
    assert_eq!(
        a.hits,
        usize::from(a.stop == kvtier::dialect::KVTIER_LOOKUP_HIT)
    );
    a.stop
}

/// A store plan over caller arrays for `n` keys (evictions not copied).
pub struct PlanBuf {
    pub indices: Vec<usize>,
    pub slots: Vec<u32>,
    pub plan: kvtier_store_plan,
}

impl PlanBuf {
    pub fn new(n: usize) -> Box<PlanBuf> {
        let mut b = Box::new(PlanBuf {
            indices: vec![0; n.max(1)],
            slots: vec![0; n.max(1)],
            plan: kvtier_store_plan {
                store_indices: null_mut(),
                slots: null_mut(),
                evicted: null_mut(),
                store_count: usize::MAX,
                evicted_count: usize::MAX,
                refused: true,
            },
        });
        b.plan.store_indices = b.indices.as_mut_ptr();
        b.plan.slots = b.slots.as_mut_ptr();
        b
    }
}

/// prepare_store of `ks` for `req` (which must not be refused), then
/// `fill(index into ks, slot)` for each position to store, then
/// complete_store of those with success; returns how many were stored.
pub fn store_with<K: AsRef<[u8]>>(
    m: *const kvtier_manager,
    req: kvtier_request_handle,
    ks: &[K],
    mut fill: impl FnMut(usize, u32),
) -> usize {
    let keys: Vec<kvtier_key> = ks.iter().map(|k| ck(k.as_ref())).collect();
    let n = keys.len();
    let mut b = PlanBuf::new(n);
    let st = unsafe { kvtier_manager_prepare_store(m, req, keys.as_ptr(), n, &mut b.plan) };
    assert_eq!(st, S::Ok, "{}", last_error());
    assert!(!b.plan.refused);
    let ns = b.plan.store_count;
    for j in 0..ns {
        fill(b.indices[j], b.slots[j]);
    }
    let to_store: Vec<kvtier_key> = b.indices[..ns].iter().map(|&i| keys[i]).collect();
    let mut done = kvtier_store_completion::default();
    assert_eq!(
        unsafe { kvtier_manager_complete_store(m, req, to_store.as_ptr(), ns, true, &mut done) },
        S::Ok,
        "{}",
        last_error()
    );
    assert_eq!(done.ready, ns, "every planned key made ready");
    ns
}
