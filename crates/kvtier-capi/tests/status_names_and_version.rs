//! Statuses and version through the C ABI: every status code has a name
//! (unknown ones one too), and the version is the crate's.  (Panics and
//! errors inside the boundary: `src/panic_tests.rs`.)

use std::ffi::CStr;

use kvtier::{kvtier_status, kvtier_status_str, kvtier_version};

#[test]
fn status_names_are_total() {
    let name = |s: i32| {
        unsafe { CStr::from_ptr(kvtier_status_str(s)) }
            .to_str()
            .unwrap()
            .to_owned()
    };
    assert_eq!(name(0), "KVTIER_STATUS_OK");
    assert_eq!(name(kvtier_status::Panic as i32), "KVTIER_STATUS_PANIC");
    assert_eq!(name(-1), "KVTIER_STATUS_UNKNOWN");
    assert_eq!(name(9999), "KVTIER_STATUS_UNKNOWN");
}

#[test]
fn version_matches_the_crate() {
    let v = unsafe { CStr::from_ptr(kvtier_version()) }
        .to_str()
        .unwrap();
    assert_eq!(v, env!("CARGO_PKG_VERSION"));
}
