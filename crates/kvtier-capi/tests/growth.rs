//! The growth rule, called the way C calls it: every options struct (and
//! the tier vtable) starts with `struct_size`; a size of 0, one smaller
//! than the first published layout, or one larger than this library knows
//! is `KVTIER_STATUS_INVALID_ARGUMENT` with a message naming the struct,
//! and nothing is made; the size `_default()` sets is accepted; NULL
//! options are the defaults.

#[path = "support/c_basics.rs"]
mod c_basics;

use c_basics::{accept_every_job, last_error, miss_every_key};
use std::ffi::CString;
use std::ptr::{null, null_mut};

use kvtier::fs::*;
use kvtier::kvtier_status as S;
use kvtier::manager::*;
use kvtier::primary::*;
use kvtier::redis::*;
use kvtier::region::*;
use kvtier::tier::*;

/// `value` followed by room the library must never read: a caller's
/// struct from a newer header claims the whole of it.
#[repr(C)]
struct Padded<T> {
    value: T,
    newer_fields: [u64; 8],
}

/// Calls `call` with `value` claiming a size of 0, of one byte less than
/// the struct (its only layout so far), of just the size field, and of
/// more than this library knows: each is an invalid argument naming
/// `name`, after which `made` says nothing was made.  Then the size
/// `_default()` set is accepted.
fn check_sizes<T: Copy>(
    name: &str,
    value: T,
    mut call: impl FnMut(*const T) -> S,
    made: impl Fn() -> bool,
) {
    let size = std::mem::size_of::<T>();
    assert_eq!(
        unsafe { (&value as *const T).cast::<usize>().read() },
        size,
        "{name}: _default() sets struct_size"
    );
    for claimed in [0, size - 1, std::mem::size_of::<usize>(), size + 8] {
        let mut padded = Padded {
            value,
            newer_fields: [0xa5a5_a5a5_a5a5_a5a5; 8],
        };
        unsafe { (&mut padded.value as *mut T).cast::<usize>().write(claimed) };
        let st = call(&padded.value);
        let e = last_error();
        assert_eq!(st, S::InvalidArgument, "{name} of {claimed} bytes: {e}");
        assert!(
            e.contains(&format!("{name}.struct_size is {claimed}")),
            "{name} of {claimed} bytes: {e}"
        );
        assert!(!made(), "{name} of {claimed} bytes made something");
    }
    let st = call(&value);
    assert_eq!(st, S::Ok, "{name} from its _default(): {}", last_error());
}

static REGIONS: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);

fn region(slots: u32) -> *mut kvtier_region {
    let n = REGIONS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let name = CString::new(format!("kvtier-growth-{}-{n}", std::process::id())).unwrap();
    let mut o = kvtier_region_options_default();
    o.name = name.as_ptr();
    o.slot_count = slots;
    o.slot_bytes = 4096;
    o.prefault = KVTIER_REGION_PREFAULT_OFF;
    let mut r = null_mut();
    assert_eq!(
        unsafe { kvtier_region_new(&o, &mut r) },
        S::Ok,
        "{}",
        last_error()
    );
    r
}

fn manager_over(region: *const kvtier_region) -> *mut kvtier_manager {
    let mut o = kvtier_manager_options_default();
    o.capacity = 4;
    let mut m = null_mut();
    assert_eq!(
        unsafe { kvtier_manager_new(&o, region, &mut m) },
        S::Ok,
        "{}",
        last_error()
    );
    m
}

#[test]
fn manager_options() {
    let mut m: *mut kvtier_manager = null_mut();
    let made = std::cell::Cell::new(null_mut());
    check_sizes(
        "kvtier_manager_options",
        kvtier_manager_options_default(),
        |o| {
            let st = unsafe { kvtier_manager_new(o, null(), &mut m) };
            made.set(m);
            st
        },
        || !made.get().is_null(),
    );
    unsafe { kvtier_manager_free(m) };
    // NULL options are the defaults.
    let mut m = null_mut();
    assert_eq!(unsafe { kvtier_manager_new(null(), null(), &mut m) }, S::Ok);
    unsafe { kvtier_manager_free(m) };
}

#[test]
fn primary_options() {
    let mut p: *mut kvtier_primary = null_mut();
    let made = std::cell::Cell::new(null_mut());
    check_sizes(
        "kvtier_primary_options",
        kvtier_primary_options_default(),
        |o| {
            let st = unsafe { kvtier_primary_new(o, &mut p) };
            made.set(p);
            st
        },
        || !made.get().is_null(),
    );
    unsafe { kvtier_primary_free(p) };
    let mut p = null_mut();
    assert_eq!(unsafe { kvtier_primary_new(null(), &mut p) }, S::Ok);
    unsafe { kvtier_primary_free(p) };
}

#[test]
fn region_options() {
    let n = REGIONS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let name = CString::new(format!("kvtier-growth-{}-{n}", std::process::id())).unwrap();
    let mut o = kvtier_region_options_default();
    o.name = name.as_ptr();
    o.slot_count = 1;
    o.slot_bytes = 4096;
    o.prefault = KVTIER_REGION_PREFAULT_OFF;
    let mut r: *mut kvtier_region = null_mut();
    let made = std::cell::Cell::new(null_mut());
    check_sizes(
        "kvtier_region_options",
        o,
        |o| {
            let st = unsafe { kvtier_region_new(o, &mut r) };
            made.set(r);
            st
        },
        || !made.get().is_null(),
    );
    unsafe { kvtier_region_free(r) };
}

fn vtable() -> kvtier_tier_vtable {
    kvtier_tier_vtable {
        lookup: Some(miss_every_key),
        submit_store: Some(accept_every_job),
        submit_load: Some(accept_every_job),
        ..kvtier_tier_vtable_default()
    }
}

#[test]
fn tier_vtable_and_tier_options() {
    let m = manager_over(null());
    let mut index = 0usize;
    let tiers = std::cell::Cell::new(0usize);
    check_sizes(
        "kvtier_tier_vtable",
        vtable(),
        |vt| {
            let st = unsafe { kvtier_manager_add_tier(m, vt, null(), &mut index) };
            tiers.set(index);
            st
        },
        || tiers.get() != 0,
    );
    assert_eq!(index, 1);
    let vt = vtable();
    check_sizes(
        "kvtier_tier_options",
        kvtier_tier_options_default(),
        |o| {
            let st = unsafe { kvtier_manager_add_tier(m, &vt, o, &mut index) };
            tiers.set(index);
            st
        },
        || tiers.get() != 1,
    );
    assert_eq!(index, 2);
    // NULL tier options are the defaults; a vtable is required.
    assert_eq!(
        unsafe { kvtier_manager_add_tier(m, &vt, null(), &mut index) },
        S::Ok
    );
    assert_eq!(
        unsafe { kvtier_manager_add_tier(m, null(), null(), &mut index) },
        S::NullArgument
    );
    unsafe { kvtier_manager_free(m) };
}

#[test]
fn request_params() {
    let m = manager_over(null());
    let mut policy = -1;
    let started = std::cell::Cell::new(false);
    check_sizes(
        "kvtier_request_params",
        kvtier_request_params_default(),
        |p| {
            let mut h = 0;
            let st = unsafe {
                kvtier::requests::kvtier_manager_request_begin(
                    m,
                    c"r".as_ptr(),
                    p,
                    &mut h,
                    &mut policy,
                )
            };
            started.set(h != 0);
            st
        },
        || started.get(),
    );
    // NULL parameters are the defaults.
    assert_eq!(
        unsafe {
            kvtier::requests::kvtier_manager_request_begin(
                m,
                c"s".as_ptr(),
                null(),
                &mut 0,
                &mut policy,
            )
        },
        S::Ok
    );
    unsafe { kvtier_manager_free(m) };
}

#[test]
fn fs_options() {
    let r = region(4);
    let m = manager_over(r);
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("fs");
    let cdir = CString::new(path.to_str().unwrap()).unwrap();
    let mut o = kvtier_fs_options_default();
    o.directory = cdir.as_ptr();
    o.read_threads = 1;
    o.write_threads = 1;
    let mut index = 0usize;
    check_sizes(
        "kvtier_fs_options",
        o,
        |o| unsafe { kvtier_manager_add_fs_tier(m, o, &mut index) },
        || path.exists(),
    );
    assert_eq!(index, 1);
    unsafe {
        kvtier_manager_free(m);
        kvtier_region_free(r);
    }
}

#[test]
fn redis_options() {
    let r = region(4);
    let m = manager_over(r);
    let mut index = 0usize;
    let nodes = c"127.0.0.1:1";
    let mut o = kvtier_redis_options_default();
    o.nodes = nodes.as_ptr();
    o.connections = 1;
    if cfg!(feature = "redis-tier") {
        let added = std::cell::Cell::new(false);
        check_sizes(
            "kvtier_redis_options",
            o,
            |o| {
                let st = unsafe { kvtier_manager_add_redis_tier(m, o, &mut index) };
                added.set(index != 0);
                st
            },
            || added.get(),
        );
        assert_eq!(index, 1);
    } else {
        // The options are read (and refused) before the tier is found missing.
        o.struct_size = 0;
        let st = unsafe { kvtier_manager_add_redis_tier(m, &o, &mut index) };
        assert_eq!(st, S::InvalidArgument, "{}", last_error());
        assert!(last_error().contains("kvtier_redis_options.struct_size"));
    }
    unsafe {
        kvtier_manager_free(m);
        kvtier_region_free(r);
    }
}
