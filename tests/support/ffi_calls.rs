//! Calls on a manager through the C ABI that several tests make the same
//! way: the last error message, key views, lookups, whole stores, and the
//! plain "job succeeded" result a C tier reports.

#![allow(dead_code)]

use std::ffi::CStr;
use std::ptr::{null, null_mut};

use kvtier::ffi::kvtier_key;
use kvtier::ffi::kvtier_status as S;
use kvtier::ffi::manager::*;
use kvtier::ffi::tier::kvtier_job_result;

/// This thread's last error message.
pub fn last_error() -> String {
    unsafe { CStr::from_ptr(kvtier::ffi::kvtier_last_error_message()) }
        .to_string_lossy()
        .into_owned()
}

/// A key view of `b` (borrowed: `b` must outlive it).
pub fn ck(b: &[u8]) -> kvtier_key {
    kvtier_key {
        data: b.as_ptr(),
        len: b.len(),
    }
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

/// `kvtier_manager_lookup` of `k` for `req`; returns what it wrote.
pub fn lookup(m: *mut kvtier_manager, req: &CStr, k: &[u8]) -> i32 {
    let mut out = -1;
    let kk = ck(k);
    assert_eq!(
        unsafe { kvtier_manager_lookup(m, req.as_ptr(), &kk, &mut out) },
        S::Ok,
        "{}",
        last_error()
    );
    out
}

/// prepare_store of `ks` for `req` (which must not be refused), then
/// `fill(index into ks, slot)` for each position to store, then
/// complete_store of those with success; returns how many were stored.
pub fn store_with<K: AsRef<[u8]>>(
    m: *mut kvtier_manager,
    req: &CStr,
    ks: &[K],
    mut fill: impl FnMut(usize, u32),
) -> usize {
    let keys: Vec<kvtier_key> = ks.iter().map(|k| ck(k.as_ref())).collect();
    let n = keys.len();
    let (mut idx, mut slots) = (vec![0usize; n], vec![0u32; n]);
    let (mut ns, mut ne, mut refused) = (0usize, 0usize, true);
    let st = unsafe {
        kvtier_manager_prepare_store(
            m,
            req.as_ptr(),
            keys.as_ptr(),
            n,
            idx.as_mut_ptr(),
            slots.as_mut_ptr(),
            n,
            &mut ns,
            null_mut(),
            0,
            &mut ne,
            &mut refused,
        )
    };
    assert_eq!(st, S::Ok, "{}", last_error());
    assert!(!refused);
    for j in 0..ns {
        fill(idx[j], slots[j]);
    }
    let to_store: Vec<kvtier_key> = idx[..ns].iter().map(|&i| keys[i]).collect();
    assert_eq!(
        unsafe { kvtier_manager_complete_store(m, req.as_ptr(), to_store.as_ptr(), ns, true) },
        S::Ok,
        "{}",
        last_error()
    );
    ns
}
