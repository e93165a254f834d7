//! What the checks of every export share: live handles, keys, a minimal C
//! tier, option structs, and the functions the header declares.  Included
//! by `tests/every_export.rs` and by the crate's own panic tests
//! (`src/panic_tests.rs`), which reach into the boundary.

#![allow(dead_code, unused_imports)]

use std::ffi::{CStr, CString, c_char, c_int, c_void};
use std::path::Path;
use std::ptr::{NonNull, null, null_mut};
use std::sync::atomic::{AtomicU32, Ordering};

pub use kvtier::config::*;
pub use kvtier::dialect::*;
pub use kvtier::events::*;
pub use kvtier::fs::*;
pub use kvtier::handles::*;
pub use kvtier::health::*;
pub use kvtier::key::kvtier_key;
pub use kvtier::log::*;
pub use kvtier::manager::*;
pub use kvtier::observe::*;
pub use kvtier::pins::*;
pub use kvtier::primary::*;
pub use kvtier::reclaim::*;
pub use kvtier::redis::*;
pub use kvtier::region::*;
pub use kvtier::report::*;
pub use kvtier::requests::*;
pub use kvtier::server::*;
pub use kvtier::tier::*;
pub use kvtier::{kvtier_last_error_message, kvtier_status, kvtier_status_str, kvtier_version};
pub use kvtier_core::Key;
pub use kvtier_core::events::Event;
pub use kvtier_core::request::Request;
pub use kvtier_core::tiering::{JobRef, JobResult, SecondaryTier, TierLookup};

pub use kvtier::kvtier_status as S;

// ---------------------------------------------------------------------------
// Helpers

#[path = "c_basics.rs"]
pub mod c_basics;

pub use c_basics::last_error;
/// The minimal C tier: every key misses, jobs are accepted and never finish.
pub use c_basics::{accept_every_job as c_submit, miss_every_key as c_lookup};

/// `status` is NULL_ARGUMENT and the message names `arg`.
#[track_caller]
pub fn is_null_arg(f: &str, arg: &str, status: kvtier_status) {
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
pub fn expect(f: &str, what: &str, status: kvtier_status, want: kvtier_status) {
    assert_eq!(status, want, "{f} ({what}): {}", last_error());
}

pub const K: &[u8] = b"every-export-key";

pub fn key() -> kvtier_key {
    kvtier_key {
        data: K.as_ptr(),
        len: K.len(),
    }
}

/// A key whose `data` is NULL (with a valid length).
pub fn null_data_key() -> kvtier_key {
    kvtier_key {
        data: null(),
        len: K.len(),
    }
}

pub fn dangling<T>() -> *mut T {
    NonNull::dangling().as_ptr()
}

pub static NAMES: AtomicU32 = AtomicU32::new(0);

pub fn unique_name() -> CString {
    let n = NAMES.fetch_add(1, Ordering::Relaxed);
    CString::new(format!("kvtier-every-export-{}-{n}", std::process::id())).unwrap()
}

pub fn region_in(dir: &Path, slots: u32) -> *mut kvtier_region {
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
pub fn manager(capacity: u32, region: *const kvtier_region) -> *mut kvtier_manager {
    let mut o = kvtier_manager_options_default();
    o.capacity = capacity;
    let mut m = null_mut();
    let st = unsafe { kvtier_manager_new(&o, region, &mut m) };
    assert_eq!(st, S::Ok, "manager: {}", last_error());
    m
}

pub fn primary(capacity: u32) -> *mut kvtier_primary {
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
pub struct Fx {
    pub dir: tempfile::TempDir,
    pub manager: *mut kvtier_manager,
    pub primary: *mut kvtier_primary,
    pub region: *mut kvtier_region,
}

pub const SLOTS: u32 = 4;

impl Fx {
    pub fn new() -> Fx {
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
    pub fn start(&self, name: &CStr) -> kvtier_request_handle {
        let mut h = 0;
        let st = unsafe {
            kvtier_manager_request_begin(self.manager, name.as_ptr(), null(), &mut h, null_mut())
        };
        assert_eq!(st, S::Ok, "{}", last_error());
        self.primary_request(name);
        h
    }

    /// Starts request `name` on the primary tier; its handle.
    pub fn primary_request(&self, name: &CStr) -> kvtier_request_handle {
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

pub unsafe extern "C" fn on_events(_: *mut c_void, _: *const kvtier_event) {}

pub unsafe extern "C" fn on_report(_: *mut c_void, _: *const kvtier_request_report) {}

pub fn vtable() -> kvtier_tier_vtable {
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

pub fn fs_options(dir: &CStr) -> kvtier_fs_options {
    let mut o = kvtier_fs_options_default();
    o.directory = dir.as_ptr();
    o.read_threads = 1;
    o.write_threads = 1;
    o.direct_io = false;
    o
}

pub fn key_buf() -> kvtier_key_buf {
    kvtier_key_buf {
        len: 0,
        bytes: [0; 64],
    }
}

pub fn shared_event() -> kvtier::dialect::kvtier_event {
    kvtier::dialect::kvtier_event {
        tier: 0,
        kind: 0,
        medium: 0,
        locality: 0,
        keys: null(),
        len: 0,
    }
}

pub fn manager_event() -> kvtier_event {
    kvtier_event {
        tier: 0,
        kind: KVTIER_EVENT_CLEARED,
        medium: KVTIER_MEDIUM_ANY,
        locality: KVTIER_LOCALITY_ANY,
        keys: null(),
        len: 0,
    }
}

pub fn region_view() -> kvtier_region_view {
    kvtier_region_view::default()
}

/// Every function the header declares: its name and its parameter list.
pub fn header_functions() -> Vec<(String, String)> {
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
pub fn takes(params: &str, handle: &str) -> bool {
    params.split(',').any(|p| {
        let spaced = p.replace('*', " * ");
        let t: Vec<&str> = spaced.split_whitespace().collect();
        t.windows(3)
            .any(|w| w[0] == handle && w[1] == "*" && w[2] != "*")
            || (t.len() >= 2 && t[t.len() - 2] == handle && t[t.len() - 1] == "*")
    })
}
