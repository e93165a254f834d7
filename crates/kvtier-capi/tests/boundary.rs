//! The boundary machinery: statuses, last error, panics, version.

use std::ffi::CStr;

use kvtier::{kvtier_last_error_message, kvtier_status, kvtier_status_str, kvtier_version};

fn last_error() -> String {
    unsafe { CStr::from_ptr(kvtier_last_error_message()) }
        .to_string_lossy()
        .into_owned()
}

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

#[test]
fn a_panic_becomes_a_status_and_a_message() {
    let status = kvtier::run_in_boundary(|| panic!("deliberate test panic"));
    assert_eq!(status, kvtier_status::Panic);
    let msg = last_error();
    assert!(msg.contains("deliberate test panic"), "{msg}");
    // The boundary still works afterwards, on this thread and others.
    let ok = kvtier::run_in_boundary(|| Ok(()));
    assert_eq!(ok, kvtier_status::Ok);
    let t = std::thread::spawn(|| kvtier::run_in_boundary(|| panic!("other thread")));
    assert_eq!(t.join().unwrap(), kvtier_status::Panic);
}

#[test]
fn errors_map_to_their_status_with_the_message() {
    let status = kvtier::run_in_boundary(|| Err(kvtier_core::Key::at(&[], 2).unwrap_err()));
    assert_eq!(status, kvtier_status::InvalidKey);
    assert!(last_error().contains("position 2"), "{}", last_error());
}

#[test]
fn panics_on_kvtier_worker_threads_print_nothing() {
    if std::env::var_os("KVTIER_TEST_WORKER_PANIC").is_some() {
        // Child: install the hook as any export does, then let a kvtier
        // worker thread panic.
        assert_eq!(kvtier::run_in_boundary(|| Ok(())), kvtier_status::Ok);
        let t = std::thread::Builder::new()
            .name("kvtier-test-worker".into())
            .spawn(|| panic!("worker panic text"))
            .unwrap();
        assert!(t.join().is_err());
        let other = std::thread::Builder::new()
            .name("engine-thread".into())
            .spawn(|| panic!("engine panic text"))
            .unwrap();
        assert!(other.join().is_err());
        return;
    }
    let out = std::process::Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            "panics_on_kvtier_worker_threads_print_nothing",
            "--nocapture",
        ])
        .env("KVTIER_TEST_WORKER_PANIC", "1")
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "child failed: {stderr}");
    assert!(
        !stderr.contains("worker panic text"),
        "a kvtier worker printed: {stderr}"
    );
    assert!(
        stderr.contains("engine panic text"),
        "other threads keep the host's hook: {stderr}"
    );
}
