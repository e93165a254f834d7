//! Panics inside the boundary: a panic in any export becomes
//! `KVTIER_STATUS_PANIC` with its message, poisons the handle it happened
//! on (every later call on it is `KVTIER_STATUS_POISONED`), and `_free`
//! still releases a poisoned handle.  Unit tests, because driving a panic
//! into a real export takes the boundary's own machinery; the
//! poisoned-handle lists must name every export of the header taking
//! that handle, so a new export without the check fails here.

#[path = "../tests/support/export_fixtures.rs"]
mod export_fixtures;

use std::ffi::CString;
use std::ptr::{null, null_mut};

use crate::boundary::{Failure, enter, enter_mut, ffi_call, out_ref};
use crate::manager::kvtier_manager;
use crate::primary::kvtier_primary;
use crate::region::kvtier_region;
use export_fixtures::*;

// ---------------------------------------------------------------------------
// Ways into the boundary that only tests take

/// Runs `body` inside the same panic boundary every export uses.
fn run_in_boundary(body: impl FnOnce() -> Result<(), kvtier_core::Error>) -> kvtier_status {
    ffi_call!({ body().map_err(Failure::from) })
}

/// Attaches a Rust [`SecondaryTier`] to a C manager handle inside the
/// boundary and writes its index to `*index_out`, so a real export can be
/// driven into a tier that panics (the path a bug in a built-in tier
/// takes).
///
/// # Safety
/// `manager` must be NULL or a live handle; `index_out` NULL or valid.
unsafe fn attach_rust_tier(
    manager: *mut kvtier_manager,
    tier: Box<dyn SecondaryTier>,
    index_out: *mut usize,
) -> kvtier_status {
    ffi_call!({
        let out = unsafe { out_ref(index_out, "index_out") }?;
        let m = unsafe { enter::<kvtier_manager>(manager) }?;
        *out = m.local("add_tier")?.add_tier(tier)?;
        Ok(())
    })
}

/// A call on `primary` that panics inside the boundary while it holds the
/// handle exclusively, as a bug in any export would (NULL gives
/// NULL_ARGUMENT).
///
/// # Safety
/// `primary` must be NULL or a live handle.
unsafe fn primary_panic_in_call(primary: *mut kvtier_primary) -> kvtier_status {
    ffi_call!({
        let _h = unsafe { enter_mut(primary) }?;
        panic!("deliberate panic inside a kvtier_primary call")
    })
}

/// A call on `region` that panics inside the boundary while it holds the
/// handle, as a bug in any export would (NULL gives NULL_ARGUMENT).
///
/// # Safety
/// `region` must be NULL or a live handle.
unsafe fn region_panic_in_call(region: *const kvtier_region) -> kvtier_status {
    ffi_call!({
        let _r = unsafe { enter(region) }?;
        panic!("deliberate panic inside a kvtier_region call")
    })
}

// ---------------------------------------------------------------------------
// The boundary itself

#[test]
fn a_panic_becomes_a_status_and_a_message() {
    let status = run_in_boundary(|| panic!("deliberate test panic"));
    assert_eq!(status, kvtier_status::Panic);
    let msg = last_error();
    assert!(msg.contains("deliberate test panic"), "{msg}");
    // The boundary still works afterwards, on this thread and others.
    let ok = run_in_boundary(|| Ok(()));
    assert_eq!(ok, kvtier_status::Ok);
    let t = std::thread::spawn(|| run_in_boundary(|| panic!("other thread")));
    assert_eq!(t.join().unwrap(), kvtier_status::Panic);
}

#[test]
fn errors_map_to_their_status_with_the_message() {
    let status = run_in_boundary(|| Err(kvtier_core::Key::at(&[], 2).unwrap_err()));
    assert_eq!(status, kvtier_status::InvalidKey);
    assert!(last_error().contains("position 2"), "{}", last_error());
}

#[test]
fn panics_on_kvtier_worker_threads_print_nothing() {
    if std::env::var_os("KVTIER_TEST_WORKER_PANIC").is_some() {
        // Child: install the hook as any export does, then let a kvtier
        // worker thread panic.
        assert_eq!(run_in_boundary(|| Ok(())), kvtier_status::Ok);
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
            "panic_tests::panics_on_kvtier_worker_threads_print_nothing",
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

// ---------------------------------------------------------------------------
// Panics: each handle type, driven into a panic inside the boundary

type Calls = Vec<(&'static str, Box<dyn Fn() -> kvtier_status>)>;

/// `call!(kvtier_x, expr)`: a named call for a poisoned-handle list.
macro_rules! call {
    ($func:ident, $body:expr) => {
        (stringify!($func), {
            let _ = $func as *const ();
            Box::new(move || unsafe { $body }) as Box<dyn Fn() -> kvtier_status>
        })
    };
}

/// Runs every call of `calls` (each must return POISONED with a message
/// saying the `handle` is poisoned), after checking that `calls` names every
/// export of the header taking that handle except those in `elsewhere`.
fn all_poisoned(handle: &str, calls: &Calls, elsewhere: &[&str]) {
    let header = header_functions();
    for (name, _) in calls {
        assert!(
            header.iter().any(|(n, p)| n == name && takes(p, handle)),
            "{name} does not take a {handle} in include/kvtier.h"
        );
    }
    let missing: Vec<String> = header
        .into_iter()
        .filter(|(n, p)| takes(p, handle) && !n.ends_with("_free"))
        .map(|(n, _)| n)
        .filter(|n| !calls.iter().any(|(c, _)| c == n) && !elsewhere.contains(&n.as_str()))
        .collect();
    assert!(
        missing.is_empty(),
        "exports taking a {handle} without a poisoned-handle check in crates/kvtier-capi/src/panic_tests.rs: {missing:?}"
    );
    for (name, call) in calls {
        let status = call();
        let msg = last_error();
        assert_eq!(status, S::Poisoned, "{name} on a poisoned {handle}: {msg}");
        let what = handle.trim_start_matches("kvtier_");
        assert!(
            msg.contains(&format!("{what} handle is poisoned")),
            "{name}: {msg:?}"
        );
    }
}

/// A Rust secondary tier whose lookup panics, like a bug in a built-in tier.
struct PanickingTier;

impl SecondaryTier for PanickingTier {
    fn name(&self) -> &str {
        "panicking"
    }
    fn lookup(&mut self, _key: &Key, _request: &Request) -> TierLookup {
        panic!("deliberate panic in a tier lookup")
    }
    fn submit_store(&mut self, _job: JobRef) {}
    fn submit_load(&mut self, _job: JobRef) {}
    fn poll_finished(&mut self, _max: usize, _out: &mut Vec<JobResult>) {}
    fn has_pending_work(&self) -> bool {
        false
    }
    fn drain(&mut self) -> kvtier_core::Result<()> {
        Ok(())
    }
    fn take_events(&mut self, _max: usize, _out: &mut Vec<Event>) {}
    fn shutdown(&mut self) -> kvtier_core::Result<()> {
        Ok(())
    }
}

#[test]
fn a_panic_in_a_manager_call_poisons_the_manager_and_free_still_works() {
    let dir = tempfile::tempdir().unwrap();
    let region = region_in(dir.path(), SLOTS);
    let m = manager(SLOTS, region);
    let mut index = 0usize;
    let st = unsafe { attach_rust_tier(m, Box::new(PanickingTier), &mut index) };
    assert_eq!(st, S::Ok, "{}", last_error());
    let mut req = 0;
    let st =
        unsafe { kvtier_manager_request_begin(m, c"r".as_ptr(), null(), &mut req, null_mut()) };
    assert_eq!(st, S::Ok, "{}", last_error());
    // A primary miss asks the tier, which panics inside the real export.
    let k = key();
    let mut answer = kvtier_lookup_answer {
        hits: 9,
        stop: 9,
        reason: 9,
        pending: 9,
        end: 9,
    };
    let st = unsafe { kvtier_manager_lookup(m, req, &k, 1, &mut answer) };
    let msg = last_error();
    assert_eq!(st, S::Panic, "{msg}");
    assert!(
        msg.contains("deliberate panic in a tier lookup") && msg.contains("poisoned"),
        "{msg}"
    );
    assert_eq!(answer.stop, 9, "a panicking lookup wrote its answer");

    let fs_dir = CString::new(dir.path().join("fs").to_str().unwrap()).unwrap();
    let calls: Calls = vec![
        call!(kvtier_manager_slot_memory, {
            let (mut b, mut s, mut sb, mut n) = (null_mut(), 0, 0, 0);
            kvtier_manager_slot_memory(m, &mut b, &mut s, &mut sb, &mut n)
        }),
        call!(kvtier_manager_add_tier, {
            let mut i = 0;
            kvtier_manager_add_tier(m, &vtable(), null(), &mut i)
        }),
        call!(kvtier_manager_add_fs_tier, {
            let mut i = 0;
            kvtier_manager_add_fs_tier(m, &fs_options(&fs_dir), &mut i)
        }),
        call!(kvtier_manager_add_redis_tier, {
            let mut i = 0;
            kvtier_manager_add_redis_tier(m, null(), &mut i)
        }),
        call!(kvtier_manager_request_begin, {
            let mut h = 0;
            kvtier_manager_request_begin(m, c"s".as_ptr(), null(), &mut h, null_mut())
        }),
        call!(kvtier_manager_lookup, {
            let mut a = kvtier_lookup_answer {
                hits: 0,
                stop: 0,
                reason: 0,
                pending: 0,
                end: 0,
            };
            kvtier_manager_lookup(m, req, &key(), 1, &mut a)
        }),
        call!(kvtier_manager_lookup_per_key, {
            let mut a = kvtier_lookup_answer {
                hits: 0,
                stop: 0,
                reason: 0,
                pending: 0,
                end: 0,
            };
            kvtier_manager_lookup_per_key(m, req, &key(), 1, &mut a)
        }),
        call!(kvtier_manager_prepare_load, {
            let mut s = [0u32; 1];
            kvtier_manager_prepare_load(m, req, &key(), 1, s.as_mut_ptr())
        }),
        call!(
            kvtier_manager_touch,
            kvtier_manager_touch(m, req, &key(), 1)
        ),
        call!(
            kvtier_manager_set_positions,
            kvtier_manager_set_positions(m, req, &key(), 1, &16)
        ),
        call!(
            kvtier_manager_complete_load,
            kvtier_manager_complete_load(m, req, &key(), 1)
        ),
        call!(kvtier_manager_prepare_store, {
            let (mut i, mut s, mut e) = (0usize, 0u32, key_buf());
            let mut plan = kvtier_store_plan {
                store_indices: &mut i,
                slots: &mut s,
                evicted: &mut e,
                store_count: 0,
                evicted_count: 0,
                refused: false,
            };
            kvtier_manager_prepare_store(m, req, &key(), 1, &mut plan)
        }),
        call!(
            kvtier_manager_complete_store,
            kvtier_manager_complete_store(m, req, &key(), 1, true, null_mut())
        ),
        call!(
            kvtier_manager_request_finished,
            kvtier_manager_request_finished(m, req)
        ),
        call!(kvtier_manager_schedule_end, kvtier_manager_schedule_end(m)),
        call!(kvtier_manager_has_pending_work, {
            let mut p = false;
            kvtier_manager_has_pending_work(m, &mut p)
        }),
        call!(kvtier_manager_take_events, {
            let (mut w, mut more) = (0, false);
            let mut b = null_mut();
            assert_eq!(kvtier_event_buffer_new(&mut b), S::Ok);
            let st = kvtier_manager_take_events(m, b, null_mut(), 0, &mut w, &mut more);
            kvtier_event_buffer_free(b);
            st
        }),
        call!(kvtier_manager_events_queued, {
            let mut n = 0;
            kvtier_manager_events_queued(m, &mut n, null_mut())
        }),
        call!(kvtier_manager_request_state, {
            let mut state = 0;
            kvtier_manager_request_state(m, req, &mut state)
        }),
        call!(kvtier_manager_server_info, {
            let mut info: kvtier_server_info = std::mem::zeroed();
            info.struct_size = std::mem::size_of::<kvtier_server_info>();
            kvtier_manager_server_info(m, &mut info)
        }),
        call!(kvtier_manager_pin_set, {
            let mut o = crate::pins::kvtier_pin_outcome::default();
            crate::pins::kvtier_manager_pin_set(m, c"a".as_ptr(), 0, null(), 0, &mut o)
        }),
        call!(kvtier_manager_unpin_set, {
            let mut n = 0usize;
            crate::pins::kvtier_manager_unpin_set(m, c"a".as_ptr(), &mut n)
        }),
        call!(kvtier_manager_pin_sets, {
            let mut n = 0usize;
            crate::pins::kvtier_manager_pin_sets(m, null_mut(), 0, &mut n)
        }),
        call!(kvtier_manager_drop_blocks, {
            let sel = crate::pins::kvtier_drop_selector {
                struct_size: std::mem::size_of::<crate::pins::kvtier_drop_selector>(),
                key_prefix: null(),
                key_prefix_len: 0,
                fingerprint: null(),
            };
            let mut r = crate::pins::kvtier_drop_report::default();
            crate::pins::kvtier_manager_drop_blocks(m, &sel, &mut r)
        }),
        call!(kvtier_manager_reset_cache, kvtier_manager_reset_cache(m)),
        call!(
            kvtier_manager_reset_flushed,
            kvtier_manager_reset_flushed(m)
        ),
        call!(kvtier_manager_read_stats, {
            let mut s = kvtier_manager_stats {
                struct_size: std::mem::size_of::<kvtier_manager_stats>(),
                ..Default::default()
            };
            kvtier_manager_read_stats(m, &mut s)
        }),
        call!(kvtier_manager_read_tier_stats, {
            let mut w = 0;
            kvtier_manager_read_tier_stats(m, 0, null_mut(), 0, &mut w)
        }),
        call!(kvtier_manager_take_error, {
            let mut w = 0;
            kvtier_manager_take_error(m, null_mut(), 0, &mut w)
        }),
        call!(kvtier_manager_complete_job, {
            let jr = kvtier_job_result {
                id: 1,
                success: true,
                succeeded_keys: null(),
                succeeded_len: 0,
                bytes: 0,
                duration_ns: 0,
            };
            kvtier_manager_complete_job(m, index, &jr)
        }),
        call!(kvtier_manager_metrics_prometheus, {
            let mut n = 0;
            kvtier_manager_metrics_prometheus(m, null_mut(), 0, &mut n)
        }),
        call!(kvtier_manager_metrics_address, {
            let mut n = 0;
            kvtier_manager_metrics_address(m, null_mut(), 0, &mut n)
        }),
        call!(kvtier_manager_readiness, {
            let mut n = 0;
            kvtier_manager_readiness(m, null_mut(), 0, &mut n)
        }),
        call!(
            kvtier_manager_set_event_callback,
            kvtier_manager_set_event_callback(m, None, null_mut(), true)
        ),
        call!(
            kvtier_manager_set_request_report_callback,
            kvtier_manager_set_request_report_callback(m, None, null_mut())
        ),
        call!(kvtier_manager_wake_fd, {
            let mut fd = -1;
            kvtier_manager_wake_fd(m, &mut fd)
        }),
        call!(kvtier_manager_shutdown, kvtier_manager_shutdown(m)),
    ];
    all_poisoned("kvtier_manager", &calls, &[]);
    assert!(
        !dir.path().join("fs").exists(),
        "a poisoned manager opened an fs tier"
    );
    // `_free` still releases it (and shuts its tiers down).
    unsafe { kvtier_manager_free(m) };
    unsafe { kvtier_region_free(region) };
}

#[test]
fn a_panic_in_a_primary_call_poisons_the_primary_and_free_still_works() {
    let p = primary(SLOTS);
    let mut r = 0;
    assert_eq!(
        unsafe { kvtier_primary_request_begin(p, c"r".as_ptr(), &mut r) },
        S::Ok
    );
    assert_eq!(
        unsafe { primary_panic_in_call(null_mut()) },
        S::NullArgument
    );
    let st = unsafe { primary_panic_in_call(p) };
    let msg = last_error();
    assert_eq!(st, S::Panic, "{msg}");
    assert!(
        msg.contains("deliberate panic") && msg.contains("poisoned"),
        "{msg}"
    );
    let calls: Calls = vec![
        call!(kvtier_primary_request_begin, {
            let mut h = 0;
            kvtier_primary_request_begin(p, c"s".as_ptr(), &mut h)
        }),
        call!(
            kvtier_primary_request_finished,
            kvtier_primary_request_finished(p, r)
        ),
        call!(kvtier_primary_lookup, {
            let mut a = kvtier_lookup_answer {
                hits: 0,
                stop: 0,
                reason: 0,
                pending: 0,
                end: 0,
            };
            kvtier_primary_lookup(p, &key(), 1, &mut a)
        }),
        call!(kvtier_primary_prepare_load, {
            let mut s = [0u32];
            kvtier_primary_prepare_load(p, r, &key(), 1, s.as_mut_ptr())
        }),
        call!(kvtier_primary_touch, kvtier_primary_touch(p, r, &key(), 1)),
        call!(
            kvtier_primary_set_positions,
            kvtier_primary_set_positions(p, r, &key(), 1, &16)
        ),
        call!(
            kvtier_primary_complete_load,
            kvtier_primary_complete_load(p, r, &key(), 1)
        ),
        call!(kvtier_primary_prepare_store, {
            let (mut i, mut s, mut e) = ([0usize], [0u32], [key_buf()]);
            let mut plan = kvtier_store_plan {
                store_indices: i.as_mut_ptr(),
                slots: s.as_mut_ptr(),
                evicted: e.as_mut_ptr(),
                store_count: 0,
                evicted_count: 0,
                refused: false,
            };
            kvtier_primary_prepare_store(p, r, &key(), 1, &mut plan)
        }),
        call!(
            kvtier_primary_complete_store,
            kvtier_primary_complete_store(p, r, &key(), 1, true, null_mut())
        ),
        call!(kvtier_primary_reset, kvtier_primary_reset(p)),
        call!(kvtier_primary_take_events, {
            let (mut n, mut more) = (0, false);
            kvtier_primary_take_events(p, null_mut(), 0, &mut n, &mut more)
        }),
        call!(kvtier_primary_request_state, {
            let mut state = 0;
            kvtier_primary_request_state(p, r, &mut state)
        }),
        call!(kvtier_primary_read_stats, {
            let mut s = kvtier_primary_stats::default();
            kvtier_primary_read_stats(p, &mut s)
        }),
    ];
    all_poisoned("kvtier_primary", &calls, &[]);
    unsafe { kvtier_primary_free(p) };
}

#[test]
fn a_panic_in_a_region_call_poisons_the_region_and_free_or_close_still_release_it() {
    let dir = tempfile::tempdir().unwrap();
    let m = manager(SLOTS, null());
    let reg = region_in(dir.path(), SLOTS);
    assert_eq!(unsafe { region_panic_in_call(null()) }, S::NullArgument);
    let st = unsafe { region_panic_in_call(reg) };
    let msg = last_error();
    assert_eq!(st, S::Panic, "{msg}");
    assert!(
        msg.contains("deliberate panic") && msg.contains("poisoned"),
        "{msg}"
    );
    let r = reg;
    let calls: Calls = vec![
        call!(kvtier_manager_new, {
            let mut x = null_mut();
            kvtier_manager_new(null(), r, &mut x)
        }),
        call!(kvtier_manager_new_from_json_with_region, {
            let mut x = null_mut();
            kvtier_manager_new_from_json_with_region(b"{}".as_ptr().cast(), 2, r, &mut x)
        }),
        call!(kvtier_region_read_role, {
            let mut x = 0;
            kvtier_region_read_role(r, &mut x)
        }),
        call!(kvtier_region_base, {
            let mut b = null_mut();
            kvtier_region_base(r, &mut b)
        }),
        call!(kvtier_region_stride, {
            let mut s = 0;
            kvtier_region_stride(r, &mut s)
        }),
        call!(kvtier_region_slot_count, {
            let mut n = 0;
            kvtier_region_slot_count(r, &mut n)
        }),
        call!(kvtier_region_slot_address, {
            let mut a = null_mut();
            kvtier_region_slot_address(r, 0, &mut a)
        }),
        call!(kvtier_region_worker_view, {
            let mut v = region_view();
            kvtier_region_worker_view(r, 0, 0, 1, &mut v)
        }),
        call!(kvtier_region_canonical_view, {
            let mut v = region_view();
            kvtier_region_canonical_view(r, 0, 1, &mut v)
        }),
        call!(kvtier_region_unlink, kvtier_region_unlink(r, null_mut())),
        call!(
            kvtier_region_set_lent_slots,
            kvtier_region_set_lent_slots(r, 1)
        ),
    ];
    // `kvtier_region_close` consumes the handle: checked last, below.
    all_poisoned("kvtier_region", &calls, &["kvtier_region_close"]);
    // The manager was not poisoned by the region's panic.
    assert_eq!(
        unsafe { kvtier_manager_schedule_end(m) },
        S::Ok,
        "{}",
        last_error()
    );
    // `_free` releases a poisoned region ...
    unsafe { kvtier_region_free(reg) };
    // ... and `_close`, which consumes it whatever the result, says POISONED.
    let other = region_in(dir.path(), 1);
    assert_eq!(unsafe { region_panic_in_call(other) }, S::Panic);
    let mut kept = true;
    let st = unsafe { kvtier_region_close(other, &mut kept) };
    assert_eq!(st, S::Poisoned, "{}", last_error());
    assert!(
        last_error().contains("region handle is poisoned"),
        "{}",
        last_error()
    );
    unsafe { kvtier_manager_free(m) };
}
