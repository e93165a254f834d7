//! What most tests of the C ABI need, in one place: this thread's last
//! error message, a key view of bytes, and the callbacks of a C tier that
//! misses every key and accepts every job (and never finishes one).
//! Included by the tests with `#[path = "support/c_basics.rs"] mod
//! c_basics;`, and by the other support files with `#[path = "c_basics.rs"]
//! pub mod c_basics;`: a test that includes one of those reaches it through
//! that file (`ffi_calls::c_basics::...`), since a file loaded as two
//! modules is a clippy error.

#![allow(dead_code)]

use std::ffi::{CStr, c_void};

use kvtier::dialect::{KVTIER_LOOKUP_MISS, kvtier_lookup_result};
use kvtier::tier::{kvtier_job, kvtier_request};
use kvtier::{kvtier_key, kvtier_last_error_message};

/// This thread's last error message.
pub fn last_error() -> String {
    unsafe { CStr::from_ptr(kvtier_last_error_message()) }
        .to_string_lossy()
        .into_owned()
}

/// A key view of `bytes` (borrowed: `bytes` must outlive it).
pub fn ck(bytes: &[u8]) -> kvtier_key {
    kvtier_key {
        data: bytes.as_ptr(),
        len: bytes.len(),
    }
}

/// A C tier's lookup that misses every key.
pub unsafe extern "C" fn miss_every_key(
    _: *mut c_void,
    _: *const kvtier_key,
    _: *const kvtier_request,
    answer: *mut kvtier_lookup_result,
) -> i32 {
    unsafe { *answer = KVTIER_LOOKUP_MISS };
    0
}

/// A C tier's submit that accepts every job (and never finishes it).
pub unsafe extern "C" fn accept_every_job(_: *mut c_void, _: *const kvtier_job) -> i32 {
    0
}
