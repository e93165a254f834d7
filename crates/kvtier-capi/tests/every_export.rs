//! Every export of `include/kvtier.h`, called with NULL arguments and
//! driven into a panic: each call returns its documented status (none
//! crashes), the message names the NULL argument, a panic poisons the handle
//! it happened on, and `_free` still releases a poisoned handle.
//!
//! The table below must name every function the header declares (checked
//! against the header), and the poisoned-handle lists every function taking
//! that handle, so a new export without these checks fails the suite.

#[path = "support/export_fixtures.rs"]
mod export_fixtures;

use std::ffi::{CStr, CString, c_char, c_int};
use std::path::Path;
use std::ptr::{null, null_mut};

use export_fixtures::*;

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
        export!(kvtier_connect_options_default, f, {
            let o = kvtier_connect_options_default();
            assert_eq!(o.struct_size, size_of::<kvtier_connect_options>(), "{f}");
            assert_eq!((o.block_bytes, o.slot_stride, o.call_timeout_ms, o.spin_us), (0, 0, 10_000, 50), "{f}");
            assert!(o.fingerprint.is_null() && o.name.is_null(), "{f}");
        }),
        export!(kvtier_manager_connect, f, {
            let dir = tempfile::tempdir().unwrap();
            let path = CString::new(dir.path().join("none.sock").to_str().unwrap()).unwrap();
            let mut m: *mut kvtier_manager = dangling();
            is_null_arg(f, "socket_path", kvtier_manager_connect(null(), null(), &mut m));
            is_null_arg(f, "manager_out", kvtier_manager_connect(path.as_ptr(), null(), null_mut()));
            is_null_arg(f, "manager_out", kvtier_manager_connect(null(), null(), null_mut()));
            // NULL options are the defaults: no server there.
            expect(f, "no server", kvtier_manager_connect(path.as_ptr(), null(), &mut m), S::Disconnected);
            assert_eq!(m, dangling(), "{f} wrote *manager_out on failure");
        }),
        export!(kvtier_manager_server_info, f, {
            let fx = Fx::new();
            let mut info: kvtier_server_info = std::mem::zeroed();
            info.struct_size = size_of::<kvtier_server_info>();
            is_null_arg(f, "manager", kvtier_manager_server_info(null(), &mut info));
            is_null_arg(f, "info_out", kvtier_manager_server_info(fx.manager, null_mut()));
            is_null_arg(f, "manager", kvtier_manager_server_info(null(), null_mut()));
            expect(f, "a local manager", kvtier_manager_server_info(fx.manager, &mut info), S::NotFound);
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
        export!(kvtier_manager_pin_set, f, {
            let fx = Fx::new();
            let name = c"sys";
            let mut o = kvtier_pin_outcome::default();
            is_null_arg(f, "manager", kvtier_manager_pin_set(null(), name.as_ptr(), 0, null(), 0, &mut o));
            is_null_arg(f, "name", kvtier_manager_pin_set(fx.manager, null(), 0, null(), 0, &mut o));
            is_null_arg(f, "outcome_out", kvtier_manager_pin_set(fx.manager, name.as_ptr(), 0, null(), 0, null_mut()));
            expect(f, "empty name", kvtier_manager_pin_set(fx.manager, c"".as_ptr(), 0, null(), 0, &mut o), S::InvalidArgument);
            expect(f, "no keys", kvtier_manager_pin_set(fx.manager, name.as_ptr(), 0, null(), 0, &mut o), S::Ok);
            assert_eq!((o.pinned, o.absent), (0, 0), "{f}");
        }),
        export!(kvtier_manager_unpin_set, f, {
            let fx = Fx::new();
            let mut n = 0usize;
            is_null_arg(f, "manager", kvtier_manager_unpin_set(null(), c"a".as_ptr(), &mut n));
            is_null_arg(f, "name", kvtier_manager_unpin_set(fx.manager, null(), &mut n));
            is_null_arg(f, "keys_out", kvtier_manager_unpin_set(fx.manager, c"a".as_ptr(), null_mut()));
            expect(f, "unknown set", kvtier_manager_unpin_set(fx.manager, c"a".as_ptr(), &mut n), S::NotFound);
        }),
        export!(kvtier_manager_pin_sets, f, {
            let fx = Fx::new();
            let mut n = 9usize;
            is_null_arg(f, "manager", kvtier_manager_pin_sets(null(), null_mut(), 0, &mut n));
            is_null_arg(f, "written_out", kvtier_manager_pin_sets(fx.manager, null_mut(), 0, null_mut()));
            expect(f, "none", kvtier_manager_pin_sets(fx.manager, null_mut(), 0, &mut n), S::Ok);
            assert_eq!(n, 0, "{f}");
        }),
        export!(kvtier_manager_drop_blocks, f, {
            let fx = Fx::new();
            let sel = kvtier_drop_selector {
                struct_size: std::mem::size_of::<kvtier_drop_selector>(),
                key_prefix: null(),
                key_prefix_len: 0,
                fingerprint: null(),
            };
            let mut r = kvtier_drop_report::default();
            is_null_arg(f, "manager", kvtier_manager_drop_blocks(null(), &sel, &mut r));
            is_null_arg(f, "selector", kvtier_manager_drop_blocks(fx.manager, null(), &mut r));
            is_null_arg(f, "report_out", kvtier_manager_drop_blocks(fx.manager, &sel, null_mut()));
            let bad = kvtier_drop_selector { key_prefix_len: 1, ..sel };
            is_null_arg(f, "selector.key_prefix", kvtier_manager_drop_blocks(fx.manager, &bad, &mut r));
            expect(f, "all valid", kvtier_manager_drop_blocks(fx.manager, &sel, &mut r), S::Ok);
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
        export!(kvtier_manager_metrics_address, f, {
            let fx = Fx::new();
            let mut buf = [0 as c_char; 64];
            let mut needed = 0usize;
            is_null_arg(f, "manager", kvtier_manager_metrics_address(null(), buf.as_mut_ptr(), 64, &mut needed));
            is_null_arg(f, "written_out", kvtier_manager_metrics_address(fx.manager, buf.as_mut_ptr(), 64, null_mut()));
            is_null_arg(f, "manager", kvtier_manager_metrics_address(null(), null_mut(), 64, null_mut()));
            is_null_arg(f, "text_out", kvtier_manager_metrics_address(fx.manager, null_mut(), 64, &mut needed));
            // NULL with capacity 0 is allowed: this manager has no endpoint.
            expect(f, "text_out NULL, capacity 0", kvtier_manager_metrics_address(fx.manager, null_mut(), 0, &mut needed), S::NotFound);
        }),
        export!(kvtier_manager_readiness, f, {
            let fx = Fx::new();
            let mut buf = [0 as c_char; 8];
            let mut needed = 9usize;
            is_null_arg(f, "manager", kvtier_manager_readiness(null(), buf.as_mut_ptr(), 8, &mut needed));
            is_null_arg(f, "written_out", kvtier_manager_readiness(fx.manager, buf.as_mut_ptr(), 8, null_mut()));
            is_null_arg(f, "manager", kvtier_manager_readiness(null(), null_mut(), 8, null_mut()));
            is_null_arg(f, "text_out", kvtier_manager_readiness(fx.manager, null_mut(), 8, &mut needed));
            // NULL with capacity 0: too small even for the empty text's NUL.
            expect(f, "text_out NULL, capacity 0", kvtier_manager_readiness(fx.manager, null_mut(), 0, &mut needed), S::BufferTooSmall);
            assert_eq!(needed, 1, "{f}: a ready manager's text is empty");
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
