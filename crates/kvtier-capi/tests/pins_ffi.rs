//! Pin sets and block drops through the C API: a held block survives
//! evictions, a set past `pinning.max_share` is KVTIER_STATUS_NO_SPACE
//! with nothing changed, bad names and unknown sets are refused, and a
//! drop selects by key prefix and layout fingerprint.

#[path = "support/ffi_calls.rs"]
mod ffi_calls;

use std::ffi::{CStr, c_char};
use std::ptr::{null, null_mut};

use ffi_calls::{begin, ck, last_error, lookup, store_with};
use kvtier::config::kvtier_manager_new_from_json;
use kvtier::dialect::KVTIER_LOOKUP_HIT;
use kvtier::kvtier_key;
use kvtier::kvtier_status as S;
use kvtier::manager::*;
use kvtier::pins::*;
use kvtier::requests::*;

fn manager(json: &str) -> *mut kvtier_manager {
    let mut m = null_mut();
    let st = unsafe { kvtier_manager_new_from_json(json.as_ptr().cast(), json.len(), &mut m) };
    assert_eq!(st, S::Ok, "{}", last_error());
    m
}

const JSON: &str = r#"{"block_bytes": 64, "primary": {"capacity": 8},
    "pinning": {"max_share": 0.25}, "layout_fingerprint": "model-a/bf16/16"}"#;

fn store(m: *const kvtier_manager, keys: &[&[u8]]) {
    let r = begin(m, c"s");
    store_with(m, r, keys, |_, _| {});
    assert_eq!(unsafe { kvtier_manager_request_finished(m, r) }, S::Ok);
}

fn resident(m: *const kvtier_manager, key: &[u8]) -> bool {
    let r = begin(m, c"probe");
    let hit = lookup(m, r, key) == KVTIER_LOOKUP_HIT;
    assert_eq!(unsafe { kvtier_manager_request_finished(m, r) }, S::Ok);
    hit
}

fn pin(m: *const kvtier_manager, name: &CStr, keys: &[&[u8]]) -> (S, kvtier_pin_outcome) {
    let ks: Vec<kvtier_key> = keys.iter().map(|k| ck(k)).collect();
    let mut o = kvtier_pin_outcome::default();
    let st = unsafe { kvtier_manager_pin_set(m, name.as_ptr(), 0, ks.as_ptr(), ks.len(), &mut o) };
    (st, o)
}

fn sets(m: *const kvtier_manager) -> Vec<(String, u64, u64)> {
    let mut n = 0usize;
    let st = unsafe { kvtier_manager_pin_sets(m, null_mut(), 0, &mut n) };
    if n == 0 {
        assert_eq!(st, S::Ok);
        return Vec::new();
    }
    assert_eq!(st, S::BufferTooSmall);
    let mut buf: Vec<kvtier_pin_set_info> = Vec::with_capacity(n);
    let st = unsafe { kvtier_manager_pin_sets(m, buf.as_mut_ptr(), n, &mut n) };
    assert_eq!(st, S::Ok, "{}", last_error());
    unsafe { buf.set_len(n) };
    buf.iter()
        .map(|s| {
            let name = unsafe { CStr::from_ptr(s.name.as_ptr() as *const c_char) };
            (name.to_str().unwrap().to_string(), s.keys, s.bytes)
        })
        .collect()
}

#[test]
fn a_held_block_survives_evictions_until_its_set_is_unpinned() {
    let m = manager(JSON);
    store(m, &[b"a0", b"a1", b"a2", b"a3", b"a4", b"a5", b"a6", b"a7"]);
    let (st, o) = pin(m, c"system", &[b"a0", b"a1", b"zz"]);
    assert_eq!(st, S::Ok, "{}", last_error());
    assert_eq!((o.pinned, o.absent), (2, 1));
    assert_eq!(sets(m), vec![("system".to_string(), 2, 128)]);
    store(m, &[b"b0", b"b1", b"b2", b"b3", b"b4", b"b5"]);
    assert!(resident(m, b"a0") && resident(m, b"a1"));
    let mut n = 0usize;
    assert_eq!(
        unsafe { kvtier_manager_unpin_set(m, c"system".as_ptr(), &mut n) },
        S::Ok
    );
    assert_eq!(n, 2);
    store(m, &[b"c0", b"c1", b"c2", b"c3", b"c4", b"c5", b"c6", b"c7"]);
    assert!(!resident(m, b"a0"));
    unsafe { kvtier_manager_free(m) };
}

#[test]
fn bad_inputs_and_the_bound_change_nothing() {
    let m = manager(JSON);
    store(m, &[b"a0", b"a1", b"a2", b"a3"]);
    assert_eq!(pin(m, c"one", &[b"a0", b"a1"]).0, S::Ok);
    // A third block is past 0.25 of 8.
    let (st, _) = pin(m, c"two", &[b"a2"]);
    assert_eq!(st, S::NoSpace);
    assert!(
        last_error().contains("pinning.max_share"),
        "{}",
        last_error()
    );
    assert_eq!(pin(m, c"", &[b"a2"]).0, S::InvalidArgument);
    let long = std::ffi::CString::new(vec![b'x'; 257]).unwrap();
    assert_eq!(pin(m, &long, &[b"a2"]).0, S::InvalidArgument);
    let k = [ck(b"a2")];
    let mut o = kvtier_pin_outcome::default();
    let st = unsafe { kvtier_manager_pin_set(m, c"t".as_ptr(), 3, k.as_ptr(), 1, &mut o) };
    assert_eq!(st, S::InvalidArgument, "no tier 3");
    assert_eq!(sets(m), vec![("one".to_string(), 2, 128)]);
    let mut n = 7usize;
    assert_eq!(
        unsafe { kvtier_manager_unpin_set(m, c"nope".as_ptr(), &mut n) },
        S::NotFound
    );
    assert_eq!(n, 7, "nothing written on failure");
    unsafe { kvtier_manager_free(m) };
}

#[test]
fn a_drop_selects_blocks_by_prefix_and_tiers_by_fingerprint() {
    let m = manager(JSON);
    store(m, &[b"a0", b"a1", b"b0"]);
    assert_eq!(pin(m, c"keep", &[b"a1"]).0, S::Ok);
    let drop = |prefix: &[u8], fingerprint: Option<&CStr>| {
        let sel = kvtier_drop_selector {
            struct_size: std::mem::size_of::<kvtier_drop_selector>(),
            key_prefix: if prefix.is_empty() {
                null()
            } else {
                prefix.as_ptr()
            },
            key_prefix_len: prefix.len(),
            fingerprint: fingerprint.map_or(null(), |f| f.as_ptr()),
        };
        let mut r = kvtier_drop_report::default();
        let st = unsafe { kvtier_manager_drop_blocks(m, &sel, &mut r) };
        assert_eq!(st, S::Ok, "{}", last_error());
        (r.dropped, r.kept, r.unsupported_tiers)
    };
    assert_eq!(drop(b"a", Some(c"other")), (0, 0, 0));
    assert_eq!(drop(b"a", Some(c"model-a/bf16/16")), (1, 1, 0));
    assert!(!resident(m, b"a0") && resident(m, b"a1") && resident(m, b"b0"));
    assert_eq!(drop(b"", None), (1, 1, 0));
    unsafe { kvtier_manager_free(m) };
}

#[test]
fn json_refuses_a_bad_share_or_fingerprint() {
    for json in [
        r#"{"pinning": {"max_share": 1.5}}"#,
        r#"{"pinning": {"share": 0.1}}"#,
        r#"{"layout_fingerprint": ""}"#,
        "{\"layout_fingerprint\": \"a\\u0001\"}",
    ] {
        let mut m = null_mut();
        let st = unsafe { kvtier_manager_new_from_json(json.as_ptr().cast(), json.len(), &mut m) };
        assert_eq!(st, S::InvalidArgument, "{json}: {}", last_error());
        assert!(m.is_null());
    }
}
