//! `kvtier_manager_add_redis_tier` called the way C calls it: defaults,
//! NULL arguments, bad options and their statuses.  (The end-to-end run
//! against a server is examples/redis_tier.c under ctest.)

#[path = "support/c_basics.rs"]
mod c_basics;

use c_basics::last_error;
use std::ffi::{CStr, CString};
use std::ptr;

use kvtier::kvtier_status as S;
use kvtier::manager::{kvtier_manager, kvtier_manager_free};
use kvtier::manager::{kvtier_manager_new, kvtier_manager_options_default};
use kvtier::redis::*;
use kvtier::region::*;

struct Fixture {
    manager: *mut kvtier_manager,
    region: *mut kvtier_region,
}

impl Fixture {
    fn new(tag: &str) -> Fixture {
        let name = CString::new(format!("kvtier-redis-ffi-{}-{tag}", std::process::id())).unwrap();
        let mut o = kvtier_region_options_default();
        o.name = name.as_ptr();
        o.slot_count = 8;
        o.slot_bytes = 4096;
        o.open = KVTIER_REGION_OPEN_MODE_CREATE;
        let mut region = ptr::null_mut();
        assert_eq!(
            unsafe { kvtier_region_new(&o, &mut region) },
            S::Ok,
            "{}",
            last_error()
        );
        // As many primary slots as the region has: a region of fewer
        // slots than the primary tier is refused.
        let mut mo = kvtier_manager_options_default();
        mo.capacity = 8;
        let mut manager = ptr::null_mut();
        assert_eq!(
            unsafe { kvtier_manager_new(&mo, region, &mut manager) },
            S::Ok
        );
        Fixture { manager, region }
    }
}

impl Drop for Fixture {
    fn drop(&mut self) {
        unsafe {
            kvtier_manager_free(self.manager);
            kvtier_region_close(self.region, ptr::null_mut());
        }
    }
}

#[test]
fn defaults_are_documented_values() {
    let o = kvtier_redis_options_default();
    assert!(o.nodes.is_null() && o.key_namespace.is_null() && o.name.is_null());
    assert_eq!(o.connections, 4);
    assert_eq!(o.connect_timeout_ms, 1000);
    assert_eq!(o.command_timeout_ms, 2000);
    assert_eq!(o.breaker_failures, 3);
    assert_eq!(o.ttl_ms, 0);
    assert_eq!(o.max_known_keys, 1 << 18);
    assert!(!o.cluster && !o.tls);
    assert!(o.layout_fingerprint.is_null() && !o.clear_on_shutdown);
}

/// A caller built against the 0.2 header (its `struct_size` ends before
/// `layout_fingerprint`) still adds a tier: the fields past it are not
/// read (no fingerprint, so no connection at creation).
#[test]
fn a_caller_of_the_first_layout_adds_a_tier_without_a_fingerprint() {
    let f = Fixture::new("old");
    let junk = CString::new("never read").unwrap();
    let nodes = CString::new("127.0.0.1:1").unwrap();
    let mut o = kvtier_redis_options_default();
    o.nodes = nodes.as_ptr();
    o.struct_size = std::mem::offset_of!(kvtier_redis_options, layout_fingerprint);
    o.layout_fingerprint = junk.as_ptr();
    o.clear_on_shutdown = true;
    let mut index = 0usize;
    let st = unsafe { kvtier_manager_add_redis_tier(f.manager, &o, &mut index) };
    #[cfg(feature = "redis-tier")]
    assert_eq!(st, S::Ok, "{}", last_error());
    #[cfg(not(feature = "redis-tier"))]
    assert_eq!(st, S::Unsupported);
}

/// The layout fingerprint and clear_on_shutdown from C, against a real
/// server: the namespace adopts the first fingerprint, another is refused
/// naming both, and the manager's shutdown deletes the namespace's blocks
/// but not its layout key.
#[cfg(feature = "redis-tier")]
#[test]
fn the_layout_fingerprint_and_clearing_reach_the_server() {
    use kvtier_testkit::redis_server::{self, RedisServer};
    let Some(server) = redis_server::or_skip(RedisServer::start()) else {
        return;
    };
    let nodes = CString::new(server.addr()).unwrap();
    let ns = CString::new("ffi-fp").unwrap();
    let a = CString::new("m|bf16|16").unwrap();
    let b = CString::new("m|fp8|16").unwrap();
    let mut o = kvtier_redis_options_default();
    o.nodes = nodes.as_ptr();
    o.key_namespace = ns.as_ptr();
    o.connections = 1;
    o.layout_fingerprint = a.as_ptr();
    o.clear_on_shutdown = true;
    let mut index = 0usize;
    let f = Fixture::new("fp");
    let st = unsafe { kvtier_manager_add_redis_tier(f.manager, &o, &mut index) };
    assert_eq!(st, S::Ok, "{}", last_error());
    assert_eq!(server.cli_text(&["GET", "ffi-fp:layout"]), "m|bf16|16");
    server.cli_text(&["SET", "ffi-fp:00ff", "block"]);
    let g = Fixture::new("fp2");
    o.layout_fingerprint = b.as_ptr();
    let st = unsafe { kvtier_manager_add_redis_tier(g.manager, &o, &mut index) };
    assert_eq!(st, S::InvalidArgument);
    let e = last_error();
    assert!(
        e.contains("\"m|bf16|16\"") && e.contains("\"m|fp8|16\""),
        "{e}"
    );
    assert_eq!(
        unsafe { kvtier::manager::kvtier_manager_shutdown(f.manager) },
        S::Ok
    );
    assert_eq!(server.cli_text(&["EXISTS", "ffi-fp:00ff"]), "0");
    assert_eq!(server.cli_text(&["EXISTS", "ffi-fp:layout"]), "1");
}

#[test]
fn null_arguments_and_bad_options_are_errors_naming_the_problem() {
    let f = Fixture::new("bad");
    let mut index = 0usize;
    let o = kvtier_redis_options_default();
    let add = |m, o: *const kvtier_redis_options, i: *mut usize| unsafe {
        kvtier_manager_add_redis_tier(m, o, i)
    };
    assert_eq!(add(ptr::null_mut(), &o, &mut index), S::NullArgument);
    assert_eq!(add(f.manager, &o, ptr::null_mut()), S::NullArgument);
    assert!(last_error().contains("index_out"), "{}", last_error());
    if !cfg!(feature = "redis-tier") {
        assert_eq!(add(f.manager, &o, &mut index), S::Unsupported);
        return;
    }

    let mut bad = kvtier_redis_options_default();
    bad.connections = 0;
    assert_eq!(add(f.manager, &bad, &mut index), S::InvalidArgument);
    assert!(last_error().contains("connections"), "{}", last_error());

    let nodes = CString::new("no-port-here").unwrap();
    let mut bad = kvtier_redis_options_default();
    bad.nodes = nodes.as_ptr();
    assert_eq!(add(f.manager, &bad, &mut index), S::InvalidArgument);
    assert!(last_error().contains("host:port"), "{}", last_error());

    let ns = CString::new("").unwrap();
    let mut bad = kvtier_redis_options_default();
    bad.key_namespace = ns.as_ptr();
    assert_eq!(add(f.manager, &bad, &mut index), S::InvalidArgument);
    assert!(last_error().contains("namespace"), "{}", last_error());
}

#[test]
fn a_tier_attaches_without_waiting_for_the_server() {
    let f = Fixture::new("ok");
    // A server that never answers (a listener that never accepts: the
    // kernel completes connections, commands wait for replies for an
    // hour): attaching does not wait for it.  Attached on a thread, so that
    // waiting fails the test instead of hanging it; what that thread uses
    // outlives a failed wait.
    let silent = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let nodes: &'static CStr = Box::leak(
        CString::new(silent.local_addr().unwrap().to_string())
            .unwrap()
            .into_boxed_c_str(),
    );
    let mut o = kvtier_redis_options_default();
    o.nodes = nodes.as_ptr();
    o.connect_timeout_ms = 3_600_000;
    o.command_timeout_ms = 3_600_000;
    let o = Box::into_raw(Box::new(o)) as usize; // leaked
    let (tx, rx) = std::sync::mpsc::channel();
    let m = f.manager as usize;
    std::thread::spawn(move || {
        let mut index = 0usize;
        let (m, o) = (m as *mut kvtier_manager, o as *const kvtier_redis_options);
        let st = unsafe { kvtier_manager_add_redis_tier(m, o, &mut index) };
        let _ = tx.send((st, index, last_error()));
    });
    let Ok((st, index, error)) = rx.recv_timeout(std::time::Duration::from_secs(60)) else {
        std::mem::forget(f); // still in use by the attaching thread
        panic!("attaching the tier waited on a server that never answers");
    };
    if cfg!(feature = "redis-tier") {
        assert_eq!(st, S::Ok, "{error}");
        assert_eq!(index, 1);
    } else {
        assert_eq!(st, S::Unsupported);
        assert!(error.contains("redis-tier"), "{error}");
    }
    // NULL options mean the defaults.
    let mut index2 = 0usize;
    let st = unsafe { kvtier_manager_add_redis_tier(f.manager, ptr::null(), &mut index2) };
    if cfg!(feature = "redis-tier") {
        assert_eq!(st, S::Ok, "{}", last_error());
        assert_eq!(index2, 2);
    }
}

#[test]
fn options_redis_would_refuse_are_refused_when_the_tier_is_added() {
    if !cfg!(feature = "redis-tier") {
        return;
    }
    let f = Fixture::new("refuse");
    let mut index = 0usize;
    let mut bad = kvtier_redis_options_default();
    bad.db = -1;
    assert_eq!(
        unsafe { kvtier_manager_add_redis_tier(f.manager, &bad, &mut index) },
        S::InvalidArgument
    );
    assert!(last_error().contains("db"), "{}", last_error());
    let mut bad = kvtier_redis_options_default();
    bad.ttl_ms = i64::MAX as u64;
    assert_eq!(
        unsafe { kvtier_manager_add_redis_tier(f.manager, &bad, &mut index) },
        S::InvalidArgument
    );
    assert!(last_error().contains("ttl"), "{}", last_error());
    // The longest TTL Redis takes for sure is accepted.
    let mut ok = kvtier_redis_options_default();
    ok.ttl_ms = 1 << 62;
    assert_eq!(
        unsafe { kvtier_manager_add_redis_tier(f.manager, &ok, &mut index) },
        S::Ok,
        "{}",
        last_error()
    );
}

#[test]
fn a_manager_without_slot_memory_has_no_room_for_a_redis_tier() {
    let mut manager = ptr::null_mut();
    assert_eq!(
        unsafe { kvtier_manager_new(ptr::null(), ptr::null(), &mut manager) },
        S::Ok
    );
    let mut index = 99usize;
    let st = unsafe { kvtier_manager_add_redis_tier(manager, ptr::null(), &mut index) };
    assert_eq!(st, S::InvalidArgument);
    let e = last_error();
    assert!(e.contains("slot memory") && e.contains("region"), "{e}");
    assert_eq!(index, 99, "nothing written on failure");
    unsafe { kvtier_manager_free(manager) };
}
