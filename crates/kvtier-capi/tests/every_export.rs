//! Every export of `include/kvtier.h`, called with NULL arguments and
//! driven into a panic: each call returns its documented status (none
//! crashes), the message names the NULL argument, a panic poisons the handle
//! it happened on, and `_free` still releases a poisoned handle.
//!
//! The table below must name every function the header declares (checked
//! against the header), and the poisoned-handle lists every function taking
//! that handle, so a new export without these checks fails the suite.

use std::ffi::{CStr, CString, c_char, c_int, c_void};
use std::path::Path;
use std::ptr::{NonNull, null, null_mut};
use std::sync::atomic::{AtomicU32, Ordering};

use kvtier::build::*;
use kvtier::config::*;
use kvtier::dialect::*;
use kvtier::events::*;
use kvtier::fs::*;
use kvtier::handles::*;
use kvtier::key::kvtier_key;
use kvtier::log::*;
use kvtier::manager::*;
use kvtier::observe::*;
use kvtier::primary::*;
use kvtier::reclaim::*;
use kvtier::redis::*;
use kvtier::region::*;
use kvtier::report::*;
use kvtier::requests::*;
use kvtier::tier::*;
use kvtier::{kvtier_last_error_message, kvtier_status, kvtier_status_str, kvtier_version};
use kvtier_core::Key;
use kvtier_core::events::Event;
use kvtier_core::request::Request;
use kvtier_core::tiering::{JobRef, JobResult, SecondaryTier, TierLookup};

use kvtier_status as S;

// ---------------------------------------------------------------------------
// Helpers

fn last_error() -> String {
    unsafe { CStr::from_ptr(kvtier_last_error_message()) }
        .to_string_lossy()
        .into_owned()
}

/// `status` is NULL_ARGUMENT and the message names `arg`.
#[track_caller]
fn is_null_arg(f: &str, arg: &str, status: kvtier_status) {
    let msg = last_error();
    assert_eq!(
        status,
        S::NullArgument,
        "{f} with `{arg}` NULL returned {status:?} ({msg})"
    );
    assert!(
        msg.contains(&format!("`{arg}`")) && msg.contains("NULL"),
        "{f} with `{arg}` NULL: the message does not name it: {msg:?}"
    );
}

/// `status` is `want` (for NULLs the documentation allows).
#[track_caller]
fn expect(f: &str, what: &str, status: kvtier_status, want: kvtier_status) {
    assert_eq!(status, want, "{f} ({what}): {}", last_error());
}

const K: &[u8] = b"every-export-key";

fn key() -> kvtier_key {
    kvtier_key {
        data: K.as_ptr(),
        len: K.len(),
    }
}

/// A key whose `data` is NULL (with a valid length).
fn null_data_key() -> kvtier_key {
    kvtier_key {
        data: null(),
        len: K.len(),
    }
}

fn dangling<T>() -> *mut T {
    NonNull::dangling().as_ptr()
}

static NAMES: AtomicU32 = AtomicU32::new(0);

fn unique_name() -> CString {
    let n = NAMES.fetch_add(1, Ordering::Relaxed);
    CString::new(format!("kvtier-every-export-{}-{n}", std::process::id())).unwrap()
}

fn region_in(dir: &Path, slots: u32) -> *mut kvtier_region {
    let name = unique_name();
    let dir = CString::new(dir.to_str().unwrap()).unwrap();
    let mut o = kvtier_region_options_default();
    o.name = name.as_ptr();
    o.directory = dir.as_ptr();
    o.slot_count = slots;
    o.slot_bytes = 4096;
    o.prefault = KVTIER_REGION_PREFAULT_OFF;
    let mut r = null_mut();
    let st = unsafe { kvtier_region_new(&o, &mut r) };
    assert_eq!(st, S::Ok, "region: {}", last_error());
    r
}

/// A manager of `capacity` slots over `region`'s slots (NULL: none).
fn manager(capacity: u32, region: *const kvtier_region) -> *mut kvtier_manager {
    let mut o = kvtier_manager_options_default();
    o.capacity = capacity;
    let mut m = null_mut();
    let st = unsafe { kvtier_manager_new(&o, region, &mut m) };
    assert_eq!(st, S::Ok, "manager: {}", last_error());
    m
}

fn primary(capacity: u32) -> *mut kvtier_primary {
    let mut o = kvtier_primary_options_default();
    o.capacity = capacity;
    let mut p = null_mut();
    let st = unsafe { kvtier_primary_new(&o, &mut p) };
    assert_eq!(st, S::Ok, "primary: {}", last_error());
    p
}

/// Live handles for one export's checks: a region of `SLOTS` slots in a
/// temporary directory, a manager of as many slots over it, and a primary
/// tier of as many slots.
struct Fx {
    dir: tempfile::TempDir,
    manager: *mut kvtier_manager,
    primary: *mut kvtier_primary,
    region: *mut kvtier_region,
}

const SLOTS: u32 = 4;

impl Fx {
    fn new() -> Fx {
        let dir = tempfile::tempdir().unwrap();
        let region = region_in(dir.path(), SLOTS);
        Fx {
            manager: manager(SLOTS, region),
            primary: primary(SLOTS),
            region,
            dir,
        }
    }

    /// Starts request `name` on the manager and the primary tier; the
    /// manager's handle of it.
    fn start(&self, name: &CStr) -> kvtier_request_handle {
        let mut h = 0;
        let st = unsafe {
            kvtier_manager_request_begin(self.manager, name.as_ptr(), null(), &mut h, null_mut())
        };
        assert_eq!(st, S::Ok, "{}", last_error());
        self.primary_request(name);
        h
    }

    /// Starts request `name` on the primary tier; its handle.
    fn primary_request(&self, name: &CStr) -> kvtier_request_handle {
        let mut r = 0;
        let st = unsafe { kvtier_primary_request_begin(self.primary, name.as_ptr(), &mut r) };
        assert_eq!(st, S::Ok, "{}", last_error());
        r
    }
}

impl Drop for Fx {
    fn drop(&mut self) {
        unsafe {
            kvtier_manager_free(self.manager);
            kvtier_primary_free(self.primary);
            kvtier_region_free(self.region);
        }
    }
}

// A minimal C tier: every key misses, jobs are accepted and never finish.
unsafe extern "C" fn c_lookup(
    _: *mut c_void,
    _: *const kvtier_key,
    _: *const kvtier_request,
    answer: *mut kvtier_lookup_result,
) -> i32 {
    unsafe { *answer = KVTIER_LOOKUP_MISS };
    0
}

unsafe extern "C" fn c_submit(_: *mut c_void, _: *const kvtier_job) -> i32 {
    0
}

unsafe extern "C" fn on_events(_: *mut c_void, _: *const kvtier_event) {}

unsafe extern "C" fn on_report(_: *mut c_void, _: *const kvtier_request_report) {}

fn vtable() -> kvtier_tier_vtable {
    kvtier_tier_vtable {
        struct_size: std::mem::size_of::<kvtier_tier_vtable>(),
        user_data: null_mut(),
        name: null(),
        medium: KVTIER_MEDIUM_ANY,
        locality: KVTIER_LOCALITY_ANY,
        lookup: Some(c_lookup),
        submit_store: Some(c_submit),
        submit_load: Some(c_submit),
        poll_finished: None,
        touch: None,
        on_new_request: None,
        on_request_finished: None,
        on_schedule_end: None,
        has_pending_work: None,
        drain: None,
        stats: None,
        shutdown: None,
        destroy: None,
        take_events: None,
    }
}

fn fs_options(dir: &CStr) -> kvtier_fs_options {
    let mut o = kvtier_fs_options_default();
    o.directory = dir.as_ptr();
    o.read_threads = 1;
    o.write_threads = 1;
    o.direct_io = false;
    o
}

fn key_buf() -> kvtier_key_buf {
    kvtier_key_buf {
        len: 0,
        bytes: [0; 64],
    }
}

fn shared_event() -> kvtier::dialect::kvtier_event {
    kvtier::dialect::kvtier_event {
        tier: 0,
        kind: 0,
        medium: 0,
        locality: 0,
        keys: null(),
        len: 0,
    }
}

fn manager_event() -> kvtier_event {
    kvtier_event {
        tier: 0,
        kind: KVTIER_EVENT_CLEARED,
        medium: KVTIER_MEDIUM_ANY,
        locality: KVTIER_LOCALITY_ANY,
        keys: null(),
        len: 0,
    }
}

fn region_view() -> kvtier_region_view {
    kvtier_region_view::default()
}

// ---------------------------------------------------------------------------
// The table: one entry per export, checking it with each pointer argument
// NULL in turn (the others valid, so the call reaches that check), with
// the NULLs its documentation allows, and with every pointer NULL.

struct Export {
    name: &'static str,
    nulls: fn(&'static str),
}

/// `export!(kvtier_x, f, { ... })`: an entry named after the function (which
/// must exist in the `kvtier` (C) crate), whose checks run with `f` = its name.
/// A manager lookup export's signature.
type LookupFn = unsafe extern "C" fn(
    *const kvtier_manager,
    kvtier_request_handle,
    *const kvtier_key,
    usize,
    *mut kvtier_lookup_answer,
) -> kvtier_status;

/// The NULL checks and the two valid calls both lookup exports share.
fn check_lookup(f: &str, lookup: LookupFn) {
    let fx = Fx::new();
    let r = fx.start(c"r");
    let (k, bad) = ([key()], [null_data_key()]);
    let mut a = kvtier_lookup_answer {
        hits: 9,
        stop: 9,
        reason: 9,
        pending: 9,
        end: 9,
    };
    unsafe {
        is_null_arg(f, "manager", lookup(null(), r, k.as_ptr(), 1, &mut a));
        is_null_arg(f, "keys", lookup(fx.manager, r, null(), 1, &mut a));
        is_null_arg(
            f,
            "keys[].data",
            lookup(fx.manager, r, bad.as_ptr(), 1, &mut a),
        );
        is_null_arg(
            f,
            "answer_out",
            lookup(fx.manager, r, k.as_ptr(), 1, null_mut()),
        );
        is_null_arg(f, "manager", lookup(null(), r, null(), 1, null_mut()));
        assert_eq!(
            (a.hits, a.stop, a.reason, a.pending, a.end),
            (9, 9, 9, 9, 9),
            "{f} wrote on failure"
        );
        expect(
            f,
            "no keys at NULL",
            lookup(fx.manager, r, null(), 0, &mut a),
            kvtier_status::Ok,
        );
        assert_eq!(
            (a.hits, a.stop, a.reason, a.pending, a.end),
            (0, KVTIER_LOOKUP_HIT, KVTIER_MISS_NONE, 0, 0),
            "{f}"
        );
        expect(
            f,
            "all valid",
            lookup(fx.manager, r, k.as_ptr(), 1, &mut a),
            kvtier_status::Ok,
        );
    }
    assert_eq!(
        (a.hits, a.stop, a.reason, a.pending, a.end),
        (0, KVTIER_LOOKUP_MISS, KVTIER_MISS_ABSENT, 0, 0),
        "{f}"
    );
}

macro_rules! export {
    ($func:ident, $f:ident, $body:block) => {
        Export {
            name: stringify!($func),
            nulls: {
                let _ = $func as *const ();
                #[allow(unused_unsafe, unused_variables)]
                fn check($f: &'static str) {
                    unsafe { $body }
                }
                check
            },
        }
    };
}

#[rustfmt::skip] // a table: one line per call reads best
fn table() -> Vec<Export> {
    vec![
        // --- the boundary: no pointer arguments -------------------------
        export!(kvtier_last_error_message, f, {
            assert!(!kvtier_last_error_message().is_null(), "{f} returned NULL");
        }),
        export!(kvtier_status_str, f, {
            for s in [-1, 0, 1, 20, 9999] {
                assert!(!kvtier_status_str(s).is_null(), "{f}({s}) returned NULL");
            }
        }),
        export!(kvtier_version, f, {
            assert!(!kvtier_version().is_null(), "{f} returned NULL");
        }),
        export!(kvtier_set_log_callback, f, {
            // A NULL callback (and NULL user data) removes the callback.
            expect(f, "callback NULL", kvtier_set_log_callback(None, null_mut(), 1), S::Ok);
            expect(f, "callback NULL, level OFF", kvtier_set_log_callback(None, null_mut(), 0), S::Ok);
        }),
        // --- option initializers: no arguments; pointers start NULL -----
        // --- option initializers: no arguments; struct_size set, the
        // policy names the default, other pointers start NULL ------------
        export!(kvtier_manager_options_default, f, {
            let o = kvtier_manager_options_default();
            assert_eq!(o.struct_size, size_of::<kvtier_manager_options>(), "{f}");
            assert_eq!(CStr::from_ptr(o.policy), c"lru", "{f}");
        }),
        export!(kvtier_tier_options_default, f, {
            let o = kvtier_tier_options_default();
            assert_eq!(o.struct_size, size_of::<kvtier_tier_options>(), "{f}");
            assert!(!o.backpressure, "{f}");
        }),
        export!(kvtier_tier_vtable_default, f, {
            let v = kvtier_tier_vtable_default();
            assert_eq!(v.struct_size, size_of::<kvtier_tier_vtable>(), "{f}");
            assert!(v.user_data.is_null() && v.name.is_null(), "{f}");
            assert!(v.lookup.is_none() && v.submit_store.is_none() && v.destroy.is_none(), "{f}");
        }),
        export!(kvtier_request_params_default, f, {
            let p = kvtier_request_params_default();
            assert_eq!(p.struct_size, size_of::<kvtier_request_params>(), "{f}");
            assert!(p.user_data.is_null() && p.params.is_null() && p.filter.is_null(), "{f}");
            assert!(!p.filter_set && p.params_len == 0 && p.filter_len == 0, "{f}");
        }),
        export!(kvtier_fs_options_default, f, {
            let o = kvtier_fs_options_default();
            assert_eq!(o.struct_size, size_of::<kvtier_fs_options>(), "{f}");
            assert!(o.directory.is_null(), "{f}");
        }),
        export!(kvtier_primary_options_default, f, {
            let o = kvtier_primary_options_default();
            assert_eq!(o.struct_size, size_of::<kvtier_primary_options>(), "{f}");
            assert_eq!(CStr::from_ptr(o.policy), c"lru", "{f}");
        }),
        export!(kvtier_redis_options_default, f, {
            let o = kvtier_redis_options_default();
            assert_eq!(o.struct_size, size_of::<kvtier_redis_options>(), "{f}");
            for p in [o.name, o.nodes, o.key_namespace, o.username, o.password, o.tls_ca_file] {
                assert!(p.is_null(), "{f}");
            }
        }),
        export!(kvtier_region_options_default, f, {
            let o = kvtier_region_options_default();
            assert_eq!(o.struct_size, size_of::<kvtier_region_options>(), "{f}");
            assert!(o.name.is_null() && o.directory.is_null(), "{f}");
            assert!(o.barrier.is_none() && o.barrier_user_data.is_null(), "{f}");
        }),
        // --- _free(NULL) is a no-op ---------------------------------------
        export!(kvtier_manager_free, f, {
            is_null_arg("setup", "manager", kvtier_manager_schedule_end(null()));
            let before = last_error();
            kvtier_manager_free(null_mut());
            assert_eq!(last_error(), before, "{f}(NULL) changed the last error");
        }),
        export!(kvtier_primary_free, f, {
            is_null_arg("setup", "primary", kvtier_primary_reset(null_mut()));
            let before = last_error();
            kvtier_primary_free(null_mut());
            assert_eq!(last_error(), before, "{f}(NULL) changed the last error");
        }),
        export!(kvtier_region_free, f, {
            is_null_arg("setup", "region", kvtier_region_set_lent_slots(null(), 0));
            let before = last_error();
            kvtier_region_free(null_mut());
            assert_eq!(last_error(), before, "{f}(NULL) changed the last error");
        }),
        // --- manager: creation ----------------------------------------------
        export!(kvtier_manager_new, f, {
            let o = kvtier_manager_options_default();
            let mut m: *mut kvtier_manager = dangling();
            is_null_arg(f, "manager_out", kvtier_manager_new(&o, null(), null_mut()));
            is_null_arg(f, "manager_out", kvtier_manager_new(null(), null(), null_mut()));
            // NULL options: the defaults; NULL region: no slot memory; a NULL policy: "lru".
            expect(f, "options NULL", kvtier_manager_new(null(), null(), &mut m), S::Ok);
            assert!(!m.is_null(), "{f}");
            kvtier_manager_free(m);
            let no_policy = kvtier_manager_options { policy: null(), ..o };
            let mut m = null_mut();
            expect(f, "options->policy NULL", kvtier_manager_new(&no_policy, null(), &mut m), S::Ok);
            kvtier_manager_free(m);
        }),
        export!(kvtier_manager_new_from_json, f, {
            let json = b"{\"capacity\": 4}";
            let mut m: *mut kvtier_manager = dangling();
            is_null_arg(f, "manager_out", kvtier_manager_new_from_json(json.as_ptr().cast(), json.len(), null_mut()));
            is_null_arg(f, "json", kvtier_manager_new_from_json(null(), json.len(), &mut m));
            // NULL is allowed with length 0: an empty document, which is not JSON.
            expect(f, "json NULL, len 0", kvtier_manager_new_from_json(null(), 0, &mut m), S::InvalidArgument);
            assert_eq!(m, dangling(), "{f} wrote *manager_out on failure");
            is_null_arg(f, "manager_out", kvtier_manager_new_from_json(null(), json.len(), null_mut()));
            is_null_arg(f, "manager_out", kvtier_manager_new_from_json(null(), 0, null_mut()));
        }),
        export!(kvtier_manager_new_from_json_with_region, f, {
            let fx = Fx::new();
            let json = b"{\"primary\": {\"capacity\": 4}}";
            let mut m: *mut kvtier_manager = dangling();
            is_null_arg(f, "manager_out", kvtier_manager_new_from_json_with_region(json.as_ptr().cast(), json.len(), fx.region, null_mut()));
            is_null_arg(f, "json", kvtier_manager_new_from_json_with_region(null(), json.len(), fx.region, &mut m));
            expect(f, "json NULL, len 0", kvtier_manager_new_from_json_with_region(null(), 0, fx.region, &mut m), S::InvalidArgument);
            assert_eq!(m, dangling(), "{f} wrote *manager_out on failure");
            is_null_arg(f, "manager_out", kvtier_manager_new_from_json_with_region(null(), 0, null(), null_mut()));
            // NULL region: kvtier_manager_new_from_json (no slot memory here).
            let mut m = null_mut();
            expect(f, "region NULL", kvtier_manager_new_from_json_with_region(json.as_ptr().cast(), json.len(), null(), &mut m), S::Ok);
            let (mut base, mut stride, mut bytes, mut count) = (null_mut(), 0usize, 0usize, 0u32);
            expect(f, "no slot memory", kvtier_manager_slot_memory(m, &mut base, &mut stride, &mut bytes, &mut count), S::NotFound);
            kvtier_manager_free(m);
            // Over the region: its slots.
            let mut m = null_mut();
            expect(f, "over the region", kvtier_manager_new_from_json_with_region(json.as_ptr().cast(), json.len(), fx.region, &mut m), S::Ok);
            expect(f, "slot memory", kvtier_manager_slot_memory(m, &mut base, &mut stride, &mut bytes, &mut count), S::Ok);
            assert_eq!(count, SLOTS, "{f}");
            kvtier_manager_free(m);
        }),
        export!(kvtier_manager_slot_memory, f, {
            let fx = Fx::new();
            let (mut base, mut stride, mut bytes, mut count) = (null_mut(), 0usize, 0usize, 0u32);
            is_null_arg(f, "manager", kvtier_manager_slot_memory(null(), &mut base, &mut stride, &mut bytes, &mut count));
            is_null_arg(f, "base_out", kvtier_manager_slot_memory(fx.manager, null_mut(), &mut stride, &mut bytes, &mut count));
            is_null_arg(f, "stride_out", kvtier_manager_slot_memory(fx.manager, &mut base, null_mut(), &mut bytes, &mut count));
            is_null_arg(f, "slot_bytes_out", kvtier_manager_slot_memory(fx.manager, &mut base, &mut stride, null_mut(), &mut count));
            is_null_arg(f, "slot_count_out", kvtier_manager_slot_memory(fx.manager, &mut base, &mut stride, &mut bytes, null_mut()));
            is_null_arg(f, "manager", kvtier_manager_slot_memory(null(), null_mut(), null_mut(), null_mut(), null_mut()));
            // Every output valid: the region's slots.
            expect(f, "all valid", kvtier_manager_slot_memory(fx.manager, &mut base, &mut stride, &mut bytes, &mut count), S::Ok);
            assert_eq!(count, SLOTS, "{f}");
            // A manager made without a region has no slot memory.
            let bare = manager(SLOTS, null());
            expect(f, "no region", kvtier_manager_slot_memory(bare, &mut base, &mut stride, &mut bytes, &mut count), S::NotFound);
            kvtier_manager_free(bare);
        }),
        // --- manager: tiers ---------------------------------------------------
        export!(kvtier_manager_add_tier, f, {
            let fx = Fx::new();
            let vt = vtable();
            let o = kvtier_tier_options_default();
            let mut index = 0usize;
            is_null_arg(f, "manager", kvtier_manager_add_tier(null_mut(), &vt, &o, &mut index));
            is_null_arg(f, "vtable", kvtier_manager_add_tier(fx.manager, null(), &o, &mut index));
            is_null_arg(f, "index_out", kvtier_manager_add_tier(fx.manager, &vt, &o, null_mut()));
            is_null_arg(f, "manager", kvtier_manager_add_tier(null_mut(), null(), null(), null_mut()));
            // Required callbacks left NULL: named in an INVALID_ARGUMENT.
            for (entry, vt) in [
                ("lookup", kvtier_tier_vtable { lookup: None, ..vtable() }),
                ("submit_store", kvtier_tier_vtable { submit_store: None, ..vtable() }),
                ("submit_load", kvtier_tier_vtable { submit_load: None, ..vtable() }),
            ] {
                expect(f, entry, kvtier_manager_add_tier(fx.manager, &vt, &o, &mut index), S::InvalidArgument);
                assert!(last_error().contains(entry), "{f}: {}", last_error());
            }
            // NULL options (defaults), NULL name ("c-tier"), NULL user data and optional entries.
            expect(f, "options NULL", kvtier_manager_add_tier(fx.manager, &vt, null(), &mut index), S::Ok);
            assert_eq!(index, 1, "{f}");
        }),
        export!(kvtier_manager_add_fs_tier, f, {
            let fx = Fx::new();
            let path = fx.dir.path().join("fs");
            let dir = CString::new(path.to_str().unwrap()).unwrap();
            let o = fs_options(&dir);
            let no_dir = kvtier_fs_options { directory: null(), ..o };
            let mut index = 0usize;
            is_null_arg(f, "manager", kvtier_manager_add_fs_tier(null_mut(), &o, &mut index));
            is_null_arg(f, "index_out", kvtier_manager_add_fs_tier(fx.manager, &o, null_mut()));
            is_null_arg(f, "manager", kvtier_manager_add_fs_tier(null_mut(), null(), null_mut()));
            // NULL options are the defaults, and the defaults (like a NULL
            // directory) name no directory: an invalid argument.
            expect(f, "options NULL", kvtier_manager_add_fs_tier(fx.manager, null(), &mut index), S::InvalidArgument);
            expect(f, "options->directory NULL", kvtier_manager_add_fs_tier(fx.manager, &no_dir, &mut index), S::InvalidArgument);
            assert!(last_error().contains("directory"), "{f}: {}", last_error());
            // None of them opened a tier (which would create the directory).
            assert!(!path.exists(), "{f} opened a tier on a NULL argument");
            expect(f, "all valid", kvtier_manager_add_fs_tier(fx.manager, &o, &mut index), S::Ok);
            assert!(index == 1 && path.is_dir(), "{f}");
        }),
        export!(kvtier_manager_add_redis_tier, f, {
            let fx = Fx::new();
            let o = kvtier_redis_options_default();
            let mut index = 0usize;
            is_null_arg(f, "manager", kvtier_manager_add_redis_tier(null_mut(), &o, &mut index));
            is_null_arg(f, "index_out", kvtier_manager_add_redis_tier(fx.manager, &o, null_mut()));
            is_null_arg(f, "manager", kvtier_manager_add_redis_tier(null_mut(), null(), null_mut()));
            // NULL options and NULL option strings mean the defaults; the
            // call connects nothing.  Without the build feature: UNSUPPORTED.
            let want = if cfg!(feature = "redis-tier") { S::Ok } else { S::Unsupported };
            expect(f, "options NULL", kvtier_manager_add_redis_tier(fx.manager, null(), &mut index), want);
            expect(f, "option strings NULL", kvtier_manager_add_redis_tier(fx.manager, &o, &mut index), want);
            if want == S::Ok {
                assert_eq!(index, 2, "{f}");
            }
        }),
        // --- manager: requests --------------------------------------------
        export!(kvtier_manager_request_begin, f, {
            let fx = Fx::new();
            let (mut h, mut policy) = (0, -1);
            let value = c"v";
            is_null_arg(f, "manager", kvtier_manager_request_begin(null(), c"r".as_ptr(), null(), &mut h, &mut policy));
            is_null_arg(f, "name", kvtier_manager_request_begin(fx.manager, null(), null(), &mut h, &mut policy));
            is_null_arg(f, "request_out", kvtier_manager_request_begin(fx.manager, c"r".as_ptr(), null(), null_mut(), &mut policy));
            is_null_arg(f, "manager", kvtier_manager_request_begin(null(), null(), null(), null_mut(), null_mut()));
            let base = kvtier_request_params_default();
            let p = kvtier_request_params { params: null(), params_len: 1, ..base };
            is_null_arg(f, "params->params", kvtier_manager_request_begin(fx.manager, c"r".as_ptr(), &p, &mut h, &mut policy));
            let kv = [kvtier_param { key: null(), value: value.as_ptr() }];
            let p = kvtier_request_params { params: kv.as_ptr(), params_len: 1, ..base };
            is_null_arg(f, "params->params[].key", kvtier_manager_request_begin(fx.manager, c"r".as_ptr(), &p, &mut h, &mut policy));
            let kv = [kvtier_param { key: value.as_ptr(), value: null() }];
            let p = kvtier_request_params { params: kv.as_ptr(), params_len: 1, ..base };
            is_null_arg(f, "params->params[].value", kvtier_manager_request_begin(fx.manager, c"r".as_ptr(), &p, &mut h, &mut policy));
            let p = kvtier_request_params { filter_set: true, filter: null(), filter_len: 1, ..base };
            is_null_arg(f, "params->filter", kvtier_manager_request_begin(fx.manager, c"r".as_ptr(), &p, &mut h, &mut policy));
            assert_eq!(h, 0, "{f} wrote a handle on failure");
            // Allowed: NULL params; the defaults (NULL arrays of length 0, NULL
            // user data); an empty set filter at NULL; a NULL policy_out.
            expect(f, "params NULL", kvtier_manager_request_begin(fx.manager, c"a".as_ptr(), null(), &mut h, &mut policy), S::Ok);
            assert_eq!((h, policy), (1, KVTIER_OFFLOAD_BLOCK_LEVEL), "{f}");
            expect(f, "default params", kvtier_manager_request_begin(fx.manager, c"b".as_ptr(), &base, &mut h, &mut policy), S::Ok);
            let p = kvtier_request_params { filter_set: true, ..base };
            expect(f, "empty filter at NULL", kvtier_manager_request_begin(fx.manager, c"c".as_ptr(), &p, &mut h, &mut policy), S::Ok);
            expect(f, "policy_out NULL", kvtier_manager_request_begin(fx.manager, c"d".as_ptr(), null(), &mut h, null_mut()), S::Ok);
            assert_eq!(h, 4, "{f}");
        }),
        export!(kvtier_manager_request_finished, f, {
            let fx = Fx::new();
            let r = fx.start(c"r");
            is_null_arg(f, "manager", kvtier_manager_request_finished(null(), r));
            expect(f, "all valid", kvtier_manager_request_finished(fx.manager, r), S::Ok);
            expect(f, "finished", kvtier_manager_request_finished(fx.manager, r), S::UnknownRequest);
        }),
        export!(kvtier_manager_lookup, f, {
            check_lookup(f, kvtier_manager_lookup);
        }),
        export!(kvtier_manager_lookup_per_key, f, {
            check_lookup(f, kvtier_manager_lookup_per_key);
        }),
        export!(kvtier_manager_prepare_load, f, {
            let fx = Fx::new();
            let r = fx.start(c"r");
            let (k, bad) = ([key()], [null_data_key()]);
            let mut slots = [0u32; 1];
            is_null_arg(f, "manager", kvtier_manager_prepare_load(null(), r, k.as_ptr(), 1, slots.as_mut_ptr()));
            is_null_arg(f, "keys", kvtier_manager_prepare_load(fx.manager, r, null(), 1, slots.as_mut_ptr()));
            is_null_arg(f, "keys[].data", kvtier_manager_prepare_load(fx.manager, r, bad.as_ptr(), 1, slots.as_mut_ptr()));
            is_null_arg(f, "slots_out", kvtier_manager_prepare_load(fx.manager, r, k.as_ptr(), 1, null_mut()));
            is_null_arg(f, "manager", kvtier_manager_prepare_load(null(), r, null(), 1, null_mut()));
            expect(f, "empty arrays at NULL", kvtier_manager_prepare_load(fx.manager, r, null(), 0, null_mut()), S::Ok);
        }),
        export!(kvtier_manager_set_positions, f, {
            let fx = Fx::new();
            let r = fx.start(c"r");
            let (k, bad) = ([key()], [null_data_key()]);
            let pos = [16u64];
            is_null_arg(f, "manager", kvtier_manager_set_positions(null(), r, k.as_ptr(), 1, pos.as_ptr()));
            is_null_arg(f, "keys", kvtier_manager_set_positions(fx.manager, r, null(), 1, pos.as_ptr()));
            is_null_arg(f, "keys[].data", kvtier_manager_set_positions(fx.manager, r, bad.as_ptr(), 1, pos.as_ptr()));
            is_null_arg(f, "positions", kvtier_manager_set_positions(fx.manager, r, k.as_ptr(), 1, null()));
            is_null_arg(f, "manager", kvtier_manager_set_positions(null(), r, null(), 1, null()));
            expect(f, "empty arrays at NULL", kvtier_manager_set_positions(fx.manager, r, null(), 0, null()), S::Ok);
            expect(f, "all valid", kvtier_manager_set_positions(fx.manager, r, k.as_ptr(), 1, pos.as_ptr()), S::Ok);
        }),
        export!(kvtier_manager_touch, f, {
            let fx = Fx::new();
            let r = fx.start(c"r");
            let (k, bad) = ([key()], [null_data_key()]);
            is_null_arg(f, "manager", kvtier_manager_touch(null(), r, k.as_ptr(), 1));
            is_null_arg(f, "keys", kvtier_manager_touch(fx.manager, r, null(), 1));
            is_null_arg(f, "keys[].data", kvtier_manager_touch(fx.manager, r, bad.as_ptr(), 1));
            is_null_arg(f, "manager", kvtier_manager_touch(null(), r, null(), 1));
            expect(f, "no keys at NULL", kvtier_manager_touch(fx.manager, r, null(), 0), S::Ok);
        }),
        export!(kvtier_manager_complete_load, f, {
            let fx = Fx::new();
            let r = fx.start(c"r");
            let (k, bad) = ([key()], [null_data_key()]);
            is_null_arg(f, "manager", kvtier_manager_complete_load(null(), r, k.as_ptr(), 1));
            is_null_arg(f, "keys", kvtier_manager_complete_load(fx.manager, r, null(), 1));
            is_null_arg(f, "keys[].data", kvtier_manager_complete_load(fx.manager, r, bad.as_ptr(), 1));
            is_null_arg(f, "manager", kvtier_manager_complete_load(null(), r, null(), 1));
            expect(f, "no keys at NULL", kvtier_manager_complete_load(fx.manager, r, null(), 0), S::Ok);
        }),
        export!(kvtier_manager_prepare_store, f, {
            let fx = Fx::new();
            let r = fx.start(c"r");
            let (k, bad) = ([key()], [null_data_key()]);
            let (mut idx, mut slots, mut ev) = ([0usize; 1], [0u32; 1], [key_buf()]);
            let plan = kvtier_store_plan {
                store_indices: idx.as_mut_ptr(),
                slots: slots.as_mut_ptr(),
                evicted: ev.as_mut_ptr(),
                store_count: 9,
                evicted_count: 9,
                refused: true,
            };
            let mut p = plan;
            is_null_arg(f, "manager", kvtier_manager_prepare_store(null(), r, k.as_ptr(), 1, &mut p));
            is_null_arg(f, "keys", kvtier_manager_prepare_store(fx.manager, r, null(), 1, &mut p));
            is_null_arg(f, "keys[].data", kvtier_manager_prepare_store(fx.manager, r, bad.as_ptr(), 1, &mut p));
            is_null_arg(f, "plan_out", kvtier_manager_prepare_store(fx.manager, r, k.as_ptr(), 1, null_mut()));
            let mut p = kvtier_store_plan { store_indices: null_mut(), ..plan };
            is_null_arg(f, "plan_out->store_indices", kvtier_manager_prepare_store(fx.manager, r, k.as_ptr(), 1, &mut p));
            let mut p = kvtier_store_plan { slots: null_mut(), ..plan };
            is_null_arg(f, "plan_out->slots", kvtier_manager_prepare_store(fx.manager, r, k.as_ptr(), 1, &mut p));
            is_null_arg(f, "manager", kvtier_manager_prepare_store(null(), r, null(), 1, null_mut()));
            assert_eq!((p.store_count, p.evicted_count, p.refused), (9, 9, true), "{f} wrote on failure");
            // `evicted` may be NULL: only the count is written.
            let mut p = kvtier_store_plan { evicted: null_mut(), ..plan };
            expect(f, "evicted NULL", kvtier_manager_prepare_store(fx.manager, r, k.as_ptr(), 1, &mut p), S::Ok);
            assert!(p.store_count == 1 && p.evicted_count == 0 && !p.refused, "{f}");
            // No keys: the arrays may all be NULL.
            let mut p = kvtier_store_plan { store_indices: null_mut(), slots: null_mut(), evicted: null_mut(), ..plan };
            expect(f, "no keys, arrays NULL", kvtier_manager_prepare_store(fx.manager, r, null(), 0, &mut p), S::Ok);
            assert!(p.store_count == 0 && !p.refused, "{f}");
        }),
        export!(kvtier_manager_complete_store, f, {
            let fx = Fx::new();
            let r = fx.start(c"r");
            let (k, bad) = ([key()], [null_data_key()]);
            let mut done = kvtier_store_completion::default();
            is_null_arg(f, "manager", kvtier_manager_complete_store(null(), r, k.as_ptr(), 1, true, &mut done));
            is_null_arg(f, "keys", kvtier_manager_complete_store(fx.manager, r, null(), 1, true, &mut done));
            is_null_arg(f, "keys[].data", kvtier_manager_complete_store(fx.manager, r, bad.as_ptr(), 1, true, &mut done));
            is_null_arg(f, "manager", kvtier_manager_complete_store(null(), r, null(), 1, true, null_mut()));
            // With no store in flight the completion is ignored, and says so.
            done.ready = 9;
            expect(f, "nothing in flight", kvtier_manager_complete_store(fx.manager, r, k.as_ptr(), 1, true, &mut done), S::KeysIgnored);
            assert_eq!(done, kvtier_store_completion::default(), "{f}: the report is written, all 0");
            // `result_out` may be NULL.
            let (mut i, mut sl) = ([0usize], [0u32]);
            let mut plan = kvtier_store_plan {
                store_indices: i.as_mut_ptr(),
                slots: sl.as_mut_ptr(),
                evicted: null_mut(),
                store_count: 0,
                evicted_count: 0,
                refused: false,
            };
            expect(f, "plan", kvtier_manager_prepare_store(fx.manager, r, k.as_ptr(), 1, &mut plan), S::Ok);
            expect(f, "result_out NULL", kvtier_manager_complete_store(fx.manager, r, k.as_ptr(), 1, true, null_mut()), S::Ok);
        }),
        export!(kvtier_manager_schedule_end, f, {
            is_null_arg(f, "manager", kvtier_manager_schedule_end(null()));
        }),
        export!(kvtier_manager_has_pending_work, f, {
            let fx = Fx::new();
            let mut pending = true;
            is_null_arg(f, "manager", kvtier_manager_has_pending_work(null(), &mut pending));
            is_null_arg(f, "pending_out", kvtier_manager_has_pending_work(fx.manager, null_mut()));
            is_null_arg(f, "manager", kvtier_manager_has_pending_work(null(), null_mut()));
        }),
        export!(kvtier_manager_take_events, f, {
            let fx = Fx::new();
            let mut b = null_mut();
            expect(f, "buffer", kvtier_event_buffer_new(&mut b), S::Ok);
            let mut ev = [manager_event()];
            let (mut written, mut more) = (9usize, true);
            is_null_arg(f, "manager", kvtier_manager_take_events(null(), b, ev.as_mut_ptr(), 1, &mut written, &mut more));
            is_null_arg(f, "buffer", kvtier_manager_take_events(fx.manager, null_mut(), ev.as_mut_ptr(), 1, &mut written, &mut more));
            is_null_arg(f, "events_out", kvtier_manager_take_events(fx.manager, b, null_mut(), 1, &mut written, &mut more));
            is_null_arg(f, "written_out", kvtier_manager_take_events(fx.manager, b, ev.as_mut_ptr(), 1, null_mut(), &mut more));
            is_null_arg(f, "more_out", kvtier_manager_take_events(fx.manager, b, ev.as_mut_ptr(), 1, &mut written, null_mut()));
            is_null_arg(f, "manager", kvtier_manager_take_events(null(), null_mut(), null_mut(), 1, null_mut(), null_mut()));
            expect(f, "events_out NULL, capacity 0", kvtier_manager_take_events(fx.manager, b, null_mut(), 0, &mut written, &mut more), S::Ok);
            assert_eq!(written, 0, "{f}");
            kvtier_event_buffer_free(b);
        }),
        export!(kvtier_event_buffer_new, f, {
            is_null_arg(f, "buffer_out", kvtier_event_buffer_new(null_mut()));
        }),
        export!(kvtier_event_buffer_free, f, {
            kvtier_event_buffer_free(null_mut());
        }),
        export!(kvtier_manager_events_queued, f, {
            let fx = Fx::new();
            let (mut events, mut keys) = (9usize, 9usize);
            is_null_arg(f, "manager", kvtier_manager_events_queued(null(), &mut events, &mut keys));
            is_null_arg(f, "events_out", kvtier_manager_events_queued(fx.manager, null_mut(), &mut keys));
            is_null_arg(f, "manager", kvtier_manager_events_queued(null(), null_mut(), null_mut()));
            // `keys_out` may be NULL.
            expect(f, "keys_out NULL", kvtier_manager_events_queued(fx.manager, &mut events, null_mut()), S::Ok);
            assert_eq!(events, 0, "{f}");
        }),
        export!(kvtier_manager_request_state, f, {
            let fx = Fx::new();
            let mut state = 9;
            is_null_arg(f, "manager", kvtier_manager_request_state(null(), 1, &mut state));
            is_null_arg(f, "state_out", kvtier_manager_request_state(fx.manager, 1, null_mut()));
            is_null_arg(f, "manager", kvtier_manager_request_state(null(), 1, null_mut()));
            expect(f, "any handle", kvtier_manager_request_state(fx.manager, 0, &mut state), S::Ok);
            assert_eq!(state, KVTIER_REQUEST_STATE_NEVER_ISSUED, "{f}");
        }),
        export!(kvtier_primary_request_state, f, {
            let fx = Fx::new();
            let mut state = 9;
            is_null_arg(f, "primary", kvtier_primary_request_state(null_mut(), 1, &mut state));
            is_null_arg(f, "state_out", kvtier_primary_request_state(fx.primary, 1, null_mut()));
            is_null_arg(f, "primary", kvtier_primary_request_state(null_mut(), 1, null_mut()));
            expect(f, "any handle", kvtier_primary_request_state(fx.primary, 0, &mut state), S::Ok);
            assert_eq!(state, KVTIER_REQUEST_STATE_NEVER_ISSUED, "{f}");
        }),
        export!(kvtier_manager_reset_cache, f, {
            is_null_arg(f, "manager", kvtier_manager_reset_cache(null()));
        }),
        export!(kvtier_manager_reset_flushed, f, {
            is_null_arg(f, "manager", kvtier_manager_reset_flushed(null()));
        }),
        export!(kvtier_manager_shutdown, f, {
            is_null_arg(f, "manager", kvtier_manager_shutdown(null()));
        }),
        // --- manager: observing ---------------------------------------------
        export!(kvtier_manager_read_stats, f, {
            let fx = Fx::new();
            let mut s = kvtier_manager_stats { struct_size: std::mem::size_of::<kvtier_manager_stats>(), ..Default::default() };
            is_null_arg(f, "manager", kvtier_manager_read_stats(null(), &mut s));
            is_null_arg(f, "stats_out", kvtier_manager_read_stats(fx.manager, null_mut()));
            is_null_arg(f, "manager", kvtier_manager_read_stats(null(), null_mut()));
            expect(f, "all valid", kvtier_manager_read_stats(fx.manager, &mut s), S::Ok);
        }),
        export!(kvtier_manager_read_tier_stats, f, {
            let fx = Fx::new();
            let mut written = 0usize;
            let mut one = [unsafe { std::mem::zeroed::<kvtier_tier_stat>() }];
            is_null_arg(f, "manager", kvtier_manager_read_tier_stats(null(), 0, one.as_mut_ptr(), 1, &mut written));
            is_null_arg(f, "written_out", kvtier_manager_read_tier_stats(fx.manager, 0, one.as_mut_ptr(), 1, null_mut()));
            is_null_arg(f, "manager", kvtier_manager_read_tier_stats(null(), 0, null_mut(), 1, null_mut()));
            // NULL with capacity 0: too small, and the number needed is written.
            expect(f, "stats_out NULL, capacity 0", kvtier_manager_read_tier_stats(fx.manager, 0, null_mut(), 0, &mut written), S::BufferTooSmall);
            assert!(written > 0, "{f}");
            is_null_arg(f, "stats_out", kvtier_manager_read_tier_stats(fx.manager, 0, null_mut(), written, &mut written));
        }),
        export!(kvtier_manager_take_error, f, {
            let fx = Fx::new();
            let mut buf = [0 as c_char; 8];
            let mut written = 9usize;
            is_null_arg(f, "manager", kvtier_manager_take_error(null(), buf.as_mut_ptr(), 8, &mut written));
            is_null_arg(f, "message_out", kvtier_manager_take_error(fx.manager, null_mut(), 8, &mut written));
            is_null_arg(f, "written_out", kvtier_manager_take_error(fx.manager, buf.as_mut_ptr(), 8, null_mut()));
            is_null_arg(f, "manager", kvtier_manager_take_error(null(), null_mut(), 8, null_mut()));
            expect(f, "message_out NULL, capacity 0", kvtier_manager_take_error(fx.manager, null_mut(), 0, &mut written), S::Ok);
            assert_eq!(written, 0, "{f}: no message");
        }),
        export!(kvtier_manager_complete_job, f, {
            let fx = Fx::new();
            let mut tier = 0usize;
            assert_eq!(kvtier_manager_add_tier(fx.manager, &vtable(), null(), &mut tier), S::Ok, "{}", last_error());
            let ok = kvtier_job_result { id: 77, success: false, succeeded_keys: null(), succeeded_len: 0, bytes: 0, duration_ns: 0 };
            is_null_arg(f, "manager", kvtier_manager_complete_job(null(), tier, &ok));
            is_null_arg(f, "result", kvtier_manager_complete_job(fx.manager, tier, null()));
            is_null_arg(f, "manager", kvtier_manager_complete_job(null(), tier, null()));
            // A key list at NULL is "none listed" only with length 0.
            let bad = kvtier_job_result { succeeded_len: 1, ..ok };
            expect(f, "succeeded_keys NULL, len 1", kvtier_manager_complete_job(fx.manager, tier, &bad), S::InvalidArgument);
            assert!(last_error().contains("NULL"), "{f}: {}", last_error());
            expect(f, "succeeded_keys NULL, len 0", kvtier_manager_complete_job(fx.manager, tier, &ok), S::Ok);
        }),
        export!(kvtier_manager_metrics_prometheus, f, {
            let fx = Fx::new();
            let mut buf = [0 as c_char; 8];
            let mut needed = 0usize;
            is_null_arg(f, "manager", kvtier_manager_metrics_prometheus(null(), buf.as_mut_ptr(), 8, &mut needed));
            is_null_arg(f, "written_out", kvtier_manager_metrics_prometheus(fx.manager, buf.as_mut_ptr(), 8, null_mut()));
            is_null_arg(f, "manager", kvtier_manager_metrics_prometheus(null(), null_mut(), 8, null_mut()));
            // NULL with capacity 0: too small, and the size needed is written.
            expect(f, "text_out NULL, capacity 0", kvtier_manager_metrics_prometheus(fx.manager, null_mut(), 0, &mut needed), S::BufferTooSmall);
            assert!(needed > 1, "{f}");
            is_null_arg(f, "text_out", kvtier_manager_metrics_prometheus(fx.manager, null_mut(), needed + 4096, &mut needed));
        }),
        export!(kvtier_manager_set_event_callback, f, {
            let fx = Fx::new();
            is_null_arg(f, "manager", kvtier_manager_set_event_callback(null(), Some(on_events), null_mut(), true));
            is_null_arg(f, "manager", kvtier_manager_set_event_callback(null(), None, null_mut(), false));
            // NULL user data is passed through; a NULL callback removes it.
            expect(f, "user_data NULL", kvtier_manager_set_event_callback(fx.manager, Some(on_events), null_mut(), true), S::Ok);
            expect(f, "callback NULL", kvtier_manager_set_event_callback(fx.manager, None, null_mut(), true), S::Ok);
        }),
        export!(kvtier_manager_set_request_report_callback, f, {
            let fx = Fx::new();
            is_null_arg(f, "manager", kvtier_manager_set_request_report_callback(null(), Some(on_report), null_mut()));
            is_null_arg(f, "manager", kvtier_manager_set_request_report_callback(null(), None, null_mut()));
            // NULL user data is passed through; a NULL callback removes it.
            expect(f, "user_data NULL", kvtier_manager_set_request_report_callback(fx.manager, Some(on_report), null_mut()), S::Ok);
            expect(f, "callback NULL", kvtier_manager_set_request_report_callback(fx.manager, None, null_mut()), S::Ok);
        }),
        export!(kvtier_manager_wake_fd, f, {
            let fx = Fx::new();
            let mut fd: c_int = -1;
            is_null_arg(f, "manager", kvtier_manager_wake_fd(null(), &mut fd));
            is_null_arg(f, "fd_out", kvtier_manager_wake_fd(fx.manager, null_mut()));
            is_null_arg(f, "manager", kvtier_manager_wake_fd(null(), null_mut()));
        }),
        // --- primary tier ------------------------------------------------------
        export!(kvtier_primary_new, f, {
            let o = kvtier_primary_options_default();
            let mut p: *mut kvtier_primary = dangling();
            is_null_arg(f, "primary_out", kvtier_primary_new(&o, null_mut()));
            is_null_arg(f, "primary_out", kvtier_primary_new(null(), null_mut()));
            assert_eq!(p, dangling(), "{f} wrote *primary_out on failure");
            // NULL options are the defaults; a NULL policy is "lru".
            expect(f, "options NULL", kvtier_primary_new(null(), &mut p), S::Ok);
            kvtier_primary_free(p);
            let no_policy = kvtier_primary_options { policy: null(), ..o };
            let mut p = null_mut();
            expect(f, "options->policy NULL", kvtier_primary_new(&no_policy, &mut p), S::Ok);
            kvtier_primary_free(p);
        }),
        export!(kvtier_primary_request_begin, f, {
            let fx = Fx::new();
            let mut h: kvtier_request_handle = 77;
            is_null_arg(f, "primary", kvtier_primary_request_begin(null_mut(), c"r".as_ptr(), &mut h));
            is_null_arg(f, "name", kvtier_primary_request_begin(fx.primary, null(), &mut h));
            is_null_arg(f, "request_out", kvtier_primary_request_begin(fx.primary, c"r".as_ptr(), null_mut()));
            is_null_arg(f, "primary", kvtier_primary_request_begin(null_mut(), null(), null_mut()));
            assert_eq!(h, 77, "{f} wrote *request_out on failure");
            expect(f, "all valid", kvtier_primary_request_begin(fx.primary, c"r".as_ptr(), &mut h), S::Ok);
            assert_ne!(h, 0, "{f}");
        }),
        export!(kvtier_primary_request_finished, f, {
            let fx = Fx::new();
            let r = fx.primary_request(c"r");
            is_null_arg(f, "primary", kvtier_primary_request_finished(null_mut(), r));
            expect(f, "handle 0", kvtier_primary_request_finished(fx.primary, 0), S::UnknownRequest);
            expect(f, "all valid", kvtier_primary_request_finished(fx.primary, r), S::Ok);
            expect(f, "finished", kvtier_primary_request_finished(fx.primary, r), S::UnknownRequest);
        }),
        export!(kvtier_primary_lookup, f, {
            let fx = Fx::new();
            let (k, bad) = ([key()], [null_data_key()]);
            let mut a = kvtier_lookup_answer { hits: 0, stop: 0, reason: 0, pending: 0, end: 0 };
            is_null_arg(f, "primary", kvtier_primary_lookup(null_mut(), k.as_ptr(), 1, &mut a));
            is_null_arg(f, "keys", kvtier_primary_lookup(fx.primary, null(), 1, &mut a));
            is_null_arg(f, "keys[].data", kvtier_primary_lookup(fx.primary, bad.as_ptr(), 1, &mut a));
            is_null_arg(f, "answer_out", kvtier_primary_lookup(fx.primary, k.as_ptr(), 1, null_mut()));
            is_null_arg(f, "primary", kvtier_primary_lookup(null_mut(), null(), 1, null_mut()));
            expect(f, "no keys at NULL", kvtier_primary_lookup(fx.primary, null(), 0, &mut a), S::Ok);
        }),
        export!(kvtier_primary_prepare_load, f, {
            let fx = Fx::new();
            let r = fx.primary_request(c"r");
            let (k, bad) = ([key()], [null_data_key()]);
            let mut slots = [0u32; 1];
            is_null_arg(f, "primary", kvtier_primary_prepare_load(null_mut(), r, k.as_ptr(), 1, slots.as_mut_ptr()));
            is_null_arg(f, "keys", kvtier_primary_prepare_load(fx.primary, r, null(), 1, slots.as_mut_ptr()));
            is_null_arg(f, "keys[].data", kvtier_primary_prepare_load(fx.primary, r, bad.as_ptr(), 1, slots.as_mut_ptr()));
            is_null_arg(f, "slots_out", kvtier_primary_prepare_load(fx.primary, r, k.as_ptr(), 1, null_mut()));
            is_null_arg(f, "primary", kvtier_primary_prepare_load(null_mut(), r, null(), 1, null_mut()));
            expect(f, "empty arrays at NULL", kvtier_primary_prepare_load(fx.primary, r, null(), 0, null_mut()), S::Ok);
            expect(f, "handle 0", kvtier_primary_prepare_load(fx.primary, 0, null(), 0, null_mut()), S::UnknownRequest);
        }),
        export!(kvtier_primary_set_positions, f, {
            let fx = Fx::new();
            let r = fx.primary_request(c"r");
            let (k, bad) = ([key()], [null_data_key()]);
            let pos = [16u64];
            is_null_arg(f, "primary", kvtier_primary_set_positions(null_mut(), r, k.as_ptr(), 1, pos.as_ptr()));
            is_null_arg(f, "keys", kvtier_primary_set_positions(fx.primary, r, null(), 1, pos.as_ptr()));
            is_null_arg(f, "keys[].data", kvtier_primary_set_positions(fx.primary, r, bad.as_ptr(), 1, pos.as_ptr()));
            is_null_arg(f, "positions", kvtier_primary_set_positions(fx.primary, r, k.as_ptr(), 1, null()));
            is_null_arg(f, "primary", kvtier_primary_set_positions(null_mut(), r, null(), 1, null()));
            expect(f, "empty arrays at NULL", kvtier_primary_set_positions(fx.primary, r, null(), 0, null()), S::Ok);
            expect(f, "all valid", kvtier_primary_set_positions(fx.primary, r, k.as_ptr(), 1, pos.as_ptr()), S::Ok);
        }),
        export!(kvtier_primary_touch, f, {
            let fx = Fx::new();
            let r = fx.primary_request(c"r");
            let (k, bad) = ([key()], [null_data_key()]);
            is_null_arg(f, "primary", kvtier_primary_touch(null_mut(), r, k.as_ptr(), 1));
            is_null_arg(f, "keys", kvtier_primary_touch(fx.primary, r, null(), 1));
            is_null_arg(f, "keys[].data", kvtier_primary_touch(fx.primary, r, bad.as_ptr(), 1));
            is_null_arg(f, "primary", kvtier_primary_touch(null_mut(), r, null(), 1));
            expect(f, "no keys at NULL", kvtier_primary_touch(fx.primary, r, null(), 0), S::Ok);
        }),
        export!(kvtier_primary_complete_load, f, {
            let fx = Fx::new();
            let r = fx.primary_request(c"r");
            let (k, bad) = ([key()], [null_data_key()]);
            is_null_arg(f, "primary", kvtier_primary_complete_load(null_mut(), r, k.as_ptr(), 1));
            is_null_arg(f, "keys", kvtier_primary_complete_load(fx.primary, r, null(), 1));
            is_null_arg(f, "keys[].data", kvtier_primary_complete_load(fx.primary, r, bad.as_ptr(), 1));
            is_null_arg(f, "primary", kvtier_primary_complete_load(null_mut(), r, null(), 1));
            expect(f, "no keys at NULL", kvtier_primary_complete_load(fx.primary, r, null(), 0), S::Ok);
        }),
        export!(kvtier_primary_prepare_store, f, {
            let fx = Fx::new();
            let r = fx.primary_request(c"r");
            let (k, bad) = ([key()], [null_data_key()]);
            let (mut idx, mut slots, mut ev) = ([0usize; 1], [0u32; 1], [key_buf(); 1]);
            let plan = kvtier_store_plan {
                store_indices: idx.as_mut_ptr(),
                slots: slots.as_mut_ptr(),
                evicted: ev.as_mut_ptr(),
                store_count: 0,
                evicted_count: 0,
                refused: false,
            };
            let (mut p, mut no_idx, mut no_slots, mut no_ev) = (plan, plan, plan, plan);
            no_idx.store_indices = null_mut();
            no_slots.slots = null_mut();
            no_ev.evicted = null_mut();
            is_null_arg(f, "primary", kvtier_primary_prepare_store(null_mut(), r, k.as_ptr(), 1, &mut p));
            is_null_arg(f, "keys", kvtier_primary_prepare_store(fx.primary, r, null(), 1, &mut p));
            is_null_arg(f, "keys[].data", kvtier_primary_prepare_store(fx.primary, r, bad.as_ptr(), 1, &mut p));
            is_null_arg(f, "plan_out", kvtier_primary_prepare_store(fx.primary, r, k.as_ptr(), 1, null_mut()));
            is_null_arg(f, "plan_out->store_indices", kvtier_primary_prepare_store(fx.primary, r, k.as_ptr(), 1, &mut no_idx));
            is_null_arg(f, "plan_out->slots", kvtier_primary_prepare_store(fx.primary, r, k.as_ptr(), 1, &mut no_slots));
            is_null_arg(f, "primary", kvtier_primary_prepare_store(null_mut(), r, null(), 1, null_mut()));
            // `evicted` may be NULL: only the count is written.
            expect(f, "evicted NULL", kvtier_primary_prepare_store(fx.primary, r, k.as_ptr(), 1, &mut no_ev), S::Ok);
            assert!(no_ev.store_count == 1 && no_ev.evicted_count == 0 && !no_ev.refused, "{f}");
            let mut empty = kvtier_store_plan { store_indices: null_mut(), slots: null_mut(), evicted: null_mut(), ..plan };
            expect(f, "empty arrays at NULL", kvtier_primary_prepare_store(fx.primary, r, null(), 0, &mut empty), S::Ok);
        }),
        export!(kvtier_primary_complete_store, f, {
            let fx = Fx::new();
            let r = fx.primary_request(c"r");
            let (k, bad) = ([key()], [null_data_key()]);
            let mut res = kvtier_store_completion::default();
            is_null_arg(f, "primary", kvtier_primary_complete_store(null_mut(), r, k.as_ptr(), 1, true, &mut res));
            is_null_arg(f, "keys", kvtier_primary_complete_store(fx.primary, r, null(), 1, true, &mut res));
            is_null_arg(f, "keys[].data", kvtier_primary_complete_store(fx.primary, r, bad.as_ptr(), 1, true, &mut res));
            is_null_arg(f, "primary", kvtier_primary_complete_store(null_mut(), r, null(), 1, true, null_mut()));
            expect(f, "unknown request", kvtier_primary_complete_store(fx.primary, r + 1, k.as_ptr(), 1, true, &mut res), S::UnknownRequest);
            // A key the request did not plan is left alone, and the status says so.
            res.ready = 9;
            expect(f, "key not planned", kvtier_primary_complete_store(fx.primary, r, k.as_ptr(), 1, true, &mut res), S::KeysIgnored);
            assert_eq!(res, kvtier_store_completion { ignored: 1, ..Default::default() }, "{f}: the report is written");
            // `result_out` may be NULL: no counts written.
            let (mut i, mut sl) = ([0usize], [0u32]);
            let mut plan = kvtier_store_plan {
                store_indices: i.as_mut_ptr(),
                slots: sl.as_mut_ptr(),
                evicted: null_mut(),
                store_count: 0,
                evicted_count: 0,
                refused: false,
            };
            expect(f, "plan", kvtier_primary_prepare_store(fx.primary, r, k.as_ptr(), 1, &mut plan), S::Ok);
            expect(f, "result_out NULL", kvtier_primary_complete_store(fx.primary, r, k.as_ptr(), 1, true, null_mut()), S::Ok);
        }),
        export!(kvtier_primary_reset, f, {
            is_null_arg(f, "primary", kvtier_primary_reset(null_mut()));
        }),
        export!(kvtier_primary_take_events, f, {
            let fx = Fx::new();
            let mut ev = [shared_event()];
            let (mut written, mut more) = (9usize, true);
            is_null_arg(f, "primary", kvtier_primary_take_events(null_mut(), ev.as_mut_ptr(), 1, &mut written, &mut more));
            is_null_arg(f, "events_out", kvtier_primary_take_events(fx.primary, null_mut(), 1, &mut written, &mut more));
            is_null_arg(f, "written_out", kvtier_primary_take_events(fx.primary, ev.as_mut_ptr(), 1, null_mut(), &mut more));
            is_null_arg(f, "more_out", kvtier_primary_take_events(fx.primary, ev.as_mut_ptr(), 1, &mut written, null_mut()));
            is_null_arg(f, "primary", kvtier_primary_take_events(null_mut(), null_mut(), 1, null_mut(), null_mut()));
            expect(f, "events_out NULL, capacity 0", kvtier_primary_take_events(fx.primary, null_mut(), 0, &mut written, &mut more), S::Ok);
            assert!(written == 0 && !more, "{f}");
        }),
        export!(kvtier_primary_read_stats, f, {
            let fx = Fx::new();
            let mut stats = kvtier_primary_stats::default();
            is_null_arg(f, "primary", kvtier_primary_read_stats(null_mut(), &mut stats));
            is_null_arg(f, "stats_out", kvtier_primary_read_stats(fx.primary, null_mut()));
            is_null_arg(f, "primary", kvtier_primary_read_stats(null_mut(), null_mut()));
            stats.struct_size = 0;
            expect(f, "struct_size 0", kvtier_primary_read_stats(fx.primary, &mut stats), S::InvalidArgument);
        }),
        // --- region ------------------------------------------------------------
        export!(kvtier_region_new, f, {
            let dir = tempfile::tempdir().unwrap();
            let name = unique_name();
            let d = CString::new(dir.path().to_str().unwrap()).unwrap();
            let mut o = kvtier_region_options_default();
            o.name = name.as_ptr();
            o.directory = d.as_ptr();
            o.slot_count = 1;
            o.slot_bytes = 4096;
            o.prefault = KVTIER_REGION_PREFAULT_OFF;
            let mut r: *mut kvtier_region = dangling();
            is_null_arg(f, "region_out", kvtier_region_new(&o, null_mut()));
            is_null_arg(f, "region_out", kvtier_region_new(null(), null_mut()));
            // NULL options are the defaults, and neither they nor a NULL
            // name name a region.
            let no_name = kvtier_region_options { name: null(), ..o };
            expect(f, "options->name NULL", kvtier_region_new(&no_name, &mut r), S::InvalidArgument);
            expect(f, "options NULL", kvtier_region_new(null(), &mut r), S::InvalidArgument);
            assert_eq!(r, dangling(), "{f} wrote *region_out on failure");
            assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 0, "{f} left files behind");
            // No barrier (NULL) and NULL barrier data: the defaults.
            expect(f, "barrier NULL", kvtier_region_new(&o, &mut r), S::Ok);
            kvtier_region_free(r);
            // A NULL directory is /dev/shm.
            if Path::new("/dev/shm").is_dir() {
                let name = unique_name();
                let shm = kvtier_region_options { name: name.as_ptr(), directory: null(), ..o };
                let mut r = null_mut();
                expect(f, "directory NULL", kvtier_region_new(&shm, &mut r), S::Ok);
                expect(f, "close", kvtier_region_close(r, null_mut()), S::Ok);
            }
        }),
        export!(kvtier_region_close, f, {
            let dir = tempfile::tempdir().unwrap();
            is_null_arg(f, "region", kvtier_region_close(null_mut(), null_mut()));
            let mut kept = true;
            is_null_arg(f, "region", kvtier_region_close(null_mut(), &mut kept));
            // `kept_mapping_out` may be NULL.
            let r = region_in(dir.path(), 1);
            expect(f, "kept_mapping_out NULL", kvtier_region_close(r, null_mut()), S::Ok);
        }),
        export!(kvtier_region_read_role, f, {
            let fx = Fx::new();
            let mut role = 0;
            is_null_arg(f, "region", kvtier_region_read_role(null(), &mut role));
            is_null_arg(f, "role_out", kvtier_region_read_role(fx.region, null_mut()));
            is_null_arg(f, "region", kvtier_region_read_role(null(), null_mut()));
        }),
        export!(kvtier_region_base, f, {
            let fx = Fx::new();
            let mut base = null_mut();
            is_null_arg(f, "region", kvtier_region_base(null(), &mut base));
            is_null_arg(f, "base_out", kvtier_region_base(fx.region, null_mut()));
            is_null_arg(f, "region", kvtier_region_base(null(), null_mut()));
        }),
        export!(kvtier_region_stride, f, {
            let fx = Fx::new();
            let mut stride = 0usize;
            is_null_arg(f, "region", kvtier_region_stride(null(), &mut stride));
            is_null_arg(f, "stride_out", kvtier_region_stride(fx.region, null_mut()));
            is_null_arg(f, "region", kvtier_region_stride(null(), null_mut()));
        }),
        export!(kvtier_region_slot_count, f, {
            let fx = Fx::new();
            let mut n = 0u32;
            is_null_arg(f, "region", kvtier_region_slot_count(null(), &mut n));
            is_null_arg(f, "slot_count_out", kvtier_region_slot_count(fx.region, null_mut()));
            is_null_arg(f, "region", kvtier_region_slot_count(null(), null_mut()));
        }),
        export!(kvtier_region_slot_address, f, {
            let fx = Fx::new();
            let mut a = null_mut();
            is_null_arg(f, "region", kvtier_region_slot_address(null(), 0, &mut a));
            is_null_arg(f, "address_out", kvtier_region_slot_address(fx.region, 0, null_mut()));
            is_null_arg(f, "region", kvtier_region_slot_address(null(), 0, null_mut()));
        }),
        export!(kvtier_region_worker_view, f, {
            let fx = Fx::new();
            let mut v = region_view();
            is_null_arg(f, "region", kvtier_region_worker_view(null(), 0, 0, 1, &mut v));
            is_null_arg(f, "view_out", kvtier_region_worker_view(fx.region, 0, 0, 1, null_mut()));
            is_null_arg(f, "region", kvtier_region_worker_view(null(), 0, 0, 1, null_mut()));
        }),
        export!(kvtier_region_canonical_view, f, {
            let fx = Fx::new();
            let mut v = region_view();
            is_null_arg(f, "region", kvtier_region_canonical_view(null(), 0, 1, &mut v));
            is_null_arg(f, "view_out", kvtier_region_canonical_view(fx.region, 0, 1, null_mut()));
            is_null_arg(f, "region", kvtier_region_canonical_view(null(), 0, 1, null_mut()));
        }),
        export!(kvtier_region_unlink, f, {
            let fx = Fx::new();
            let mut removed = false;
            is_null_arg(f, "region", kvtier_region_unlink(null(), &mut removed));
            is_null_arg(f, "region", kvtier_region_unlink(null(), null_mut()));
            // `removed_out` may be NULL.
            expect(f, "removed_out NULL", kvtier_region_unlink(fx.region, null_mut()), S::Ok);
        }),
        export!(kvtier_region_set_lent_slots, f, {
            is_null_arg(f, "region", kvtier_region_set_lent_slots(null(), 0));
        }),
        export!(kvtier_region_reclaim_stale, f, {
            let dir = tempfile::tempdir().unwrap();
            let d = CString::new(dir.path().to_str().unwrap()).unwrap();
            let mut removed = 7usize;
            is_null_arg(f, "prefix", kvtier_region_reclaim_stale(d.as_ptr(), null(), None, null_mut(), &mut removed));
            is_null_arg(f, "prefix", kvtier_region_reclaim_stale(null(), null(), None, null_mut(), null_mut()));
            assert_eq!(removed, 7, "{f} wrote *removed_out on failure");
            // The callback, its data and `removed_out` may be NULL; a NULL
            // directory is /dev/shm (a prefix nothing there has).
            let prefix = CString::new(format!("kvtier-every-export-{}-", std::process::id())).unwrap();
            expect(f, "callback, removed_out NULL", kvtier_region_reclaim_stale(d.as_ptr(), prefix.as_ptr(), None, null_mut(), null_mut()), S::Ok);
            if Path::new("/dev/shm").is_dir() {
                expect(f, "directory NULL", kvtier_region_reclaim_stale(null(), prefix.as_ptr(), None, null_mut(), &mut removed), S::Ok);
                assert_eq!(removed, 0, "{f}");
            }
        }),
    ]
}

#[test]
fn every_export_answers_null_arguments_with_its_documented_status() {
    for e in table() {
        (e.nulls)(e.name);
    }
}

// ---------------------------------------------------------------------------
// Completeness against the header

/// Every function the header declares: its name and its parameter list.
fn header_functions() -> Vec<(String, String)> {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../../include/kvtier.h");
    let text = std::fs::read_to_string(path).expect("include/kvtier.h");
    // Drop comments, so names mentioned in documentation do not count.
    let mut code = String::with_capacity(text.len());
    let mut rest = text.as_str();
    while !rest.is_empty() {
        if let Some(after) = rest.strip_prefix("/*") {
            rest = after.find("*/").map_or("", |i| &after[i + 2..]);
        } else if let Some(after) = rest.strip_prefix("//") {
            rest = after.find('\n').map_or("", |i| &after[i..]);
        } else {
            let c = rest.chars().next().unwrap();
            code.push(c);
            rest = &rest[c.len_utf8()..];
        }
    }
    let bytes = code.as_bytes();
    let ident = |b: u8| b.is_ascii_alphanumeric() || b == b'_';
    let mut out = Vec::new();
    let mut i = 0;
    while let Some(at) = code[i..].find("kvtier_").map(|p| p + i) {
        let mut end = at;
        while end < bytes.len() && ident(bytes[end]) {
            end += 1;
        }
        let starts_word = at == 0 || !ident(bytes[at - 1]);
        let mut open = end;
        while open < bytes.len() && bytes[open].is_ascii_whitespace() {
            open += 1;
        }
        if starts_word && open < bytes.len() && bytes[open] == b'(' {
            let mut depth = 0;
            let mut close = open;
            for (j, &b) in bytes[open..].iter().enumerate() {
                match b {
                    b'(' => depth += 1,
                    b')' => {
                        depth -= 1;
                        if depth == 0 {
                            close = open + j;
                            break;
                        }
                    }
                    _ => {}
                }
            }
            out.push((code[at..end].to_string(), code[open + 1..close].to_string()));
            i = close;
        } else {
            i = end;
        }
    }
    assert!(
        out.len() > 50,
        "found only {} functions in {path}",
        out.len()
    );
    out
}

/// Whether a parameter list takes an existing `handle` (`T *` or `const T *`,
/// not the `T **` a constructor writes).
fn takes(params: &str, handle: &str) -> bool {
    params.split(',').any(|p| {
        let spaced = p.replace('*', " * ");
        let t: Vec<&str> = spaced.split_whitespace().collect();
        t.windows(3)
            .any(|w| w[0] == handle && w[1] == "*" && w[2] != "*")
            || (t.len() >= 2 && t[t.len() - 2] == handle && t[t.len() - 1] == "*")
    })
}

#[test]
fn the_table_names_every_export_of_the_header() {
    let declared: Vec<String> = header_functions().into_iter().map(|(n, _)| n).collect();
    let table = table();
    let mut tested: Vec<&str> = table.iter().map(|e| e.name).collect();
    let missing: Vec<&String> = declared
        .iter()
        .filter(|n| !tested.contains(&n.as_str()))
        .collect();
    assert!(
        missing.is_empty(),
        "exports of include/kvtier.h without NULL-argument checks in crates/kvtier-capi/tests/every_export.rs: {missing:?}"
    );
    let stale: Vec<&&str> = tested
        .iter()
        .filter(|n| !declared.iter().any(|d| d == *n))
        .collect();
    assert!(
        stale.is_empty(),
        "table entries not in the header: {stale:?}"
    );
    tested.sort_unstable();
    let before = tested.len();
    tested.dedup();
    assert_eq!(before, tested.len(), "an export is listed twice");
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
        "exports taking a {handle} without a poisoned-handle check in crates/kvtier-capi/tests/every_export.rs: {missing:?}"
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
    let st = unsafe { kvtier::manager::attach_rust_tier(m, Box::new(PanickingTier), &mut index) };
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
        unsafe { kvtier::primary::panic_in_call(null_mut()) },
        S::NullArgument
    );
    let st = unsafe { kvtier::primary::panic_in_call(p) };
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
    assert_eq!(
        unsafe { kvtier::region::panic_in_call(null()) },
        S::NullArgument
    );
    let st = unsafe { kvtier::region::panic_in_call(reg) };
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
    assert_eq!(unsafe { kvtier::region::panic_in_call(other) }, S::Panic);
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
