//! Sizes chosen by the caller never abort the process: memory that cannot
//! be had is `KVTIER_STATUS_OUT_OF_MEMORY`, lengths that cannot be real
//! (beyond the address space) are `KVTIER_STATUS_INVALID_ARGUMENT`, and the
//! handles involved stay usable.
//!
//! The largest capacity, 4294967294 slots, needs about 300 GB for the
//! primary tier's slot records alone.  Under the kernel's default
//! (heuristic) overcommit, or strict accounting, an allocation beyond the
//! machine's memory and swap is refused, so the attempt fails cleanly;
//! where overcommit is unconditional (`vm.overcommit_memory = 1`) or the
//! machine really has that much memory, those tests say so and skip.

#[path = "support/c_basics.rs"]
mod c_basics;

use c_basics::{ck as key, last_error};
use std::ffi::c_char;
use std::ptr;

use kvtier::config::kvtier_manager_new_from_json;
use kvtier::dialect::{KVTIER_LOOKUP_MISS, kvtier_lookup_answer};
use kvtier::kvtier_key;
use kvtier::kvtier_status as S;
use kvtier::manager::*;
use kvtier::primary::*;
use kvtier::requests::*;

/// The largest capacity a primary tier accepts.
const HUGE_CAPACITY: u32 = u32::MAX - 1;

/// Whether an allocation of the primary tier's size for `HUGE_CAPACITY`
/// slots is refused by this kernel (rather than granted lazily).
fn huge_allocations_fail() -> bool {
    let mode = std::fs::read_to_string("/proc/sys/vm/overcommit_memory").unwrap_or_default();
    let kib = |field: &str| -> u64 {
        std::fs::read_to_string("/proc/meminfo")
            .unwrap_or_default()
            .lines()
            .find_map(|l| l.strip_prefix(field))
            .and_then(|rest| rest.split_whitespace().next()?.parse().ok())
            .unwrap_or(u64::MAX / 2048)
    };
    let memory = (kib("MemTotal:") + kib("SwapTotal:")).saturating_mul(1024);
    let ok = match mode.trim() {
        "2" => true,
        "0" => memory < 250 << 30,
        _ => false,
    };
    if !ok {
        eprintln!(
            "skipped: vm.overcommit_memory = {} with {memory} bytes of memory and swap grants a 300 GB allocation",
            mode.trim()
        );
    }
    ok
}

#[test]
fn a_capacity_beyond_memory_is_out_of_memory_through_json() {
    if !huge_allocations_fail() {
        return;
    }
    let json = format!(r#"{{"primary":{{"capacity":{HUGE_CAPACITY}}}}}"#);
    let mut m = ptr::null_mut();
    let st = unsafe { kvtier_manager_new_from_json(json.as_ptr().cast(), json.len(), &mut m) };
    assert_eq!(st, S::OutOfMemory, "{}", last_error());
    assert!(m.is_null(), "nothing written on failure");
    let e = last_error();
    assert!(e.contains("out of memory") && e.contains("bytes"), "{e}");
    // A capacity that fits still works afterwards.
    let json = r#"{"primary":{"capacity":64}}"#;
    let st = unsafe { kvtier_manager_new_from_json(json.as_ptr().cast(), json.len(), &mut m) };
    assert_eq!(st, S::Ok, "{}", last_error());
    unsafe { kvtier_manager_free(m) };
}

#[test]
fn a_capacity_beyond_memory_is_out_of_memory_through_kvtier_manager_new() {
    if !huge_allocations_fail() {
        return;
    }
    for policy in [c"lru", c"arc"] {
        let mut o = kvtier_manager_options_default();
        o.capacity = if policy == c"arc" {
            i32::MAX as u32
        } else {
            HUGE_CAPACITY
        };
        o.policy = policy.as_ptr();
        let mut m = ptr::null_mut();
        let st = unsafe { kvtier_manager_new(&o, std::ptr::null(), &mut m) };
        assert_eq!(st, S::OutOfMemory, "{policy:?}: {}", last_error());
        assert!(m.is_null());
    }
}

#[test]
fn a_capacity_beyond_memory_is_out_of_memory_through_kvtier_primary_new() {
    if !huge_allocations_fail() {
        return;
    }
    let mut o = kvtier_primary_options_default();
    o.capacity = HUGE_CAPACITY;
    let mut p = ptr::null_mut();
    let st = unsafe { kvtier_primary_new(&o, &mut p) };
    assert_eq!(st, S::OutOfMemory, "{}", last_error());
    assert!(p.is_null());
    assert!(last_error().contains("slots"), "{}", last_error());
}

const REQ: *const c_char = c"r".as_ptr();

/// Key counts whose arrays would not fit in the address space.
fn impossible_counts() -> [usize; 3] {
    let per_key = std::mem::size_of::<kvtier_key>();
    [
        usize::MAX,
        usize::MAX / per_key + 1,
        isize::MAX as usize / per_key + 1,
    ]
}

#[test]
fn key_counts_beyond_the_address_space_are_invalid_arguments_for_the_primary_tier() {
    let mut o = kvtier_primary_options_default();
    o.capacity = 4;
    let mut p = ptr::null_mut();
    assert_eq!(unsafe { kvtier_primary_new(&o, &mut p) }, S::Ok);
    let mut r = 0;
    assert_eq!(
        unsafe { kvtier_primary_request_begin(p, REQ, &mut r) },
        S::Ok
    );
    let k = key(b"k");
    let mut answer = kvtier_lookup_answer {
        hits: 0,
        stop: 0,
        reason: 0,
        pending: 0,
        end: 0,
    };
    for n in impossible_counts() {
        let st = unsafe { kvtier_primary_lookup(p, &k, n, &mut answer) };
        assert_eq!(
            st,
            S::InvalidArgument,
            "lookup of {n} keys: {}",
            last_error()
        );
        assert!(last_error().contains("address space"), "{}", last_error());
        let mut slot = 0u32;
        let st = unsafe { kvtier_primary_prepare_load(p, r, &k, n, &mut slot) };
        assert_eq!(st, S::InvalidArgument, "prepare_load of {n} keys");
        let st = unsafe { kvtier_primary_touch(p, r, &k, n) };
        assert_eq!(st, S::InvalidArgument, "touch of {n} keys");
    }
    // The handle is not poisoned: a real batch still works.
    assert_eq!(
        unsafe { kvtier_primary_lookup(p, &k, 1, &mut answer) },
        S::Ok
    );
    assert_eq!((answer.hits, answer.stop), (0, KVTIER_LOOKUP_MISS));
    unsafe { kvtier_primary_free(p) };
}

#[test]
fn key_counts_beyond_the_address_space_are_invalid_arguments_for_the_manager() {
    let mut o = kvtier_manager_options_default();
    o.capacity = 4;
    let mut m = ptr::null_mut();
    assert_eq!(
        unsafe { kvtier_manager_new(&o, std::ptr::null(), &mut m) },
        S::Ok
    );
    let params = kvtier_request_params_default();
    let mut r = 0;
    assert_eq!(
        unsafe { kvtier_manager_request_begin(m, REQ, &params, &mut r, ptr::null_mut()) },
        S::Ok,
        "{}",
        last_error()
    );
    let k = key(b"k");
    let mut answer = kvtier::dialect::kvtier_lookup_answer {
        hits: 0,
        stop: 0,
        reason: 0,
        pending: 0,
        end: 0,
    };
    for n in impossible_counts() {
        let st = unsafe { kvtier_manager_lookup(m, r, &k, n, &mut answer) };
        assert_eq!(st, S::InvalidArgument, "lookup of {n} keys");
        let st = unsafe { kvtier_manager_touch(m, r, &k, n) };
        assert_eq!(
            st,
            S::InvalidArgument,
            "touch of {n} keys: {}",
            last_error()
        );
        assert!(last_error().contains("address space"), "{}", last_error());
        let st = unsafe { kvtier_manager_complete_store(m, r, &k, n, true, ptr::null_mut()) };
        assert_eq!(st, S::InvalidArgument, "complete_store of {n} keys");
        let mut slot = 0u32;
        let st = unsafe { kvtier_manager_prepare_load(m, r, &k, n, &mut slot) };
        assert_eq!(st, S::InvalidArgument, "prepare_load of {n} keys");
    }
    assert_eq!(
        unsafe { kvtier_manager_lookup(m, r, &k, 1, &mut answer) },
        S::Ok,
        "the manager is not poisoned: {}",
        last_error()
    );
    unsafe { kvtier_manager_free(m) };
}
