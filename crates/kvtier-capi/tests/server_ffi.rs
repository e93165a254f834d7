//! `kvtier_manager_connect` through the C ABI, against a node server run
//! in this process (`kvtier_core::server::Server` on a thread): the same
//! calls and statuses as a local manager, the server's region mapped in
//! the caller, what a connected manager does not take, and the statuses
//! of refusals and disconnection.

#[path = "support/ffi_calls.rs"]
mod ffi_calls;

use std::ffi::{CStr, CString};
use std::ptr::{null, null_mut};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use ffi_calls::c_basics::{ck, last_error};
use ffi_calls::{begin, lookup_keys, store_with};
use kvtier::config::kvtier_manager_slot_memory;
use kvtier::dialect::KVTIER_LOOKUP_HIT;
use kvtier::kvtier_status as S;
use kvtier::manager::*;
use kvtier::observe::*;
use kvtier::requests::*;
use kvtier::server::*;
use kvtier_core::server::{DaemonConfig, Server};

struct Running {
    stop: Arc<AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
    socket: CString,
    _dir: tempfile::TempDir,
}

impl Running {
    fn stop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            t.join().unwrap();
        }
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        self.stop();
    }
}

fn start(server: &str) -> Running {
    start_with("", server)
}

/// A server whose region's options add `region` and whose `"server"`
/// object holds `server`.
fn start_with(region: &str, server: &str) -> Running {
    let dir = tempfile::tempdir().unwrap();
    let socket = dir.path().join("s.sock");
    let json = format!(
        r#"{{"block_bytes": 4096, "region": {{"name": "ffi{}", "directory": "{}" {region}}},
            "primary": {{"capacity": 32}}, "server": {{{server}}}}}"#,
        std::process::id(),
        dir.path().display()
    );
    let s = Server::start(DaemonConfig::from_json(&json).unwrap(), &socket).unwrap();
    let stop = Arc::new(AtomicBool::new(false));
    let flag = stop.clone();
    let thread = std::thread::spawn(move || s.run(&flag).unwrap());
    Running {
        stop,
        thread: Some(thread),
        socket: CString::new(socket.to_str().unwrap()).unwrap(),
        _dir: dir,
    }
}

fn connect(path: &CStr, o: Option<&kvtier_connect_options>) -> Result<*mut kvtier_manager, S> {
    let mut m = null_mut();
    let st = unsafe { kvtier_manager_connect(path.as_ptr(), o.map_or(null(), |o| o), &mut m) };
    if st == S::Ok { Ok(m) } else { Err(st) }
}

fn slot_base(m: *const kvtier_manager) -> (*mut u8, usize) {
    let (mut base, mut stride, mut bytes, mut count) = (null_mut(), 0, 0, 0);
    let st =
        unsafe { kvtier_manager_slot_memory(m, &mut base, &mut stride, &mut bytes, &mut count) };
    assert_eq!(st, S::Ok, "{}", last_error());
    assert_eq!((bytes, count), (4096, 32));
    (base.cast(), stride)
}

#[test]
fn two_connected_handles_share_blocks_byte_for_byte_and_not_requests() {
    let s = start("");
    let a = connect(&s.socket, None).unwrap();
    let b = connect(&s.socket, None).unwrap();
    let keys: Vec<[u8; 8]> = (0..4u8).map(|i| [i, 1, 2, 3, 4, 5, 6, 7]).collect();
    let (base_a, stride) = slot_base(a);
    let ra = begin(a, c"req");
    let stored = store_with(a, ra, &keys, |i, slot| unsafe {
        std::ptr::write_bytes(base_a.add(slot as usize * stride), 0x40 + i as u8, 4096);
    });
    assert_eq!(stored, 4);
    assert_eq!(unsafe { kvtier_manager_request_finished(a, ra) }, S::Ok);
    let rb = begin(b, c"req");
    let ans = lookup_keys(b, rb, &keys);
    assert_eq!((ans.hits, ans.stop), (4, KVTIER_LOOKUP_HIT));
    let ck_keys: Vec<_> = keys.iter().map(|k| ck(k)).collect();
    let mut slots = [0u32; 4];
    let st = unsafe { kvtier_manager_prepare_load(b, rb, ck_keys.as_ptr(), 4, slots.as_mut_ptr()) };
    assert_eq!(st, S::Ok, "{}", last_error());
    let (base_b, stride_b) = slot_base(b);
    for (i, slot) in slots.iter().enumerate() {
        let block =
            unsafe { std::slice::from_raw_parts(base_b.add(*slot as usize * stride_b), 4096) };
        assert!(block.iter().all(|&x| x == 0x40 + i as u8), "block {i}");
    }
    // b's request is unknown to a, whatever the call.
    let st = unsafe { kvtier_manager_complete_load(a, rb, ck_keys.as_ptr(), 4) };
    assert_eq!(st, S::UnknownRequest);
    assert_eq!(
        unsafe { kvtier_manager_request_finished(a, rb) },
        S::UnknownRequest
    );
    let mut state = -1;
    assert_eq!(
        unsafe { kvtier::handles::kvtier_manager_request_state(a, rb, &mut state) },
        S::Ok
    );
    assert_eq!(state, kvtier::handles::KVTIER_REQUEST_STATE_NEVER_ISSUED);
    assert_eq!(
        unsafe { kvtier_manager_complete_load(b, rb, ck_keys.as_ptr(), 4) },
        S::Ok
    );
    assert_eq!(unsafe { kvtier_manager_request_finished(b, rb) }, S::Ok);
    let mut stats = kvtier_manager_stats {
        struct_size: std::mem::size_of::<kvtier_manager_stats>(),
        ..Default::default()
    };
    assert_eq!(unsafe { kvtier_manager_read_stats(b, &mut stats) }, S::Ok);
    assert_eq!((stats.lookups, stats.primary_hits), (4, 4));
    unsafe {
        kvtier_manager_free(a);
        kvtier_manager_free(b);
    }
}

#[test]
fn server_info_names_the_region_and_a_local_manager_has_none() {
    let s = start(r#""fingerprint": "model-x""#);
    let mut o = kvtier_connect_options_default();
    o.fingerprint = c"model-x".as_ptr();
    o.block_bytes = 4096;
    let m = connect(&s.socket, Some(&o)).unwrap();
    let mut info = unsafe { std::mem::zeroed::<kvtier_server_info>() };
    info.struct_size = std::mem::size_of::<kvtier_server_info>();
    assert_eq!(unsafe { kvtier_manager_server_info(m, &mut info) }, S::Ok);
    let name = unsafe { CStr::from_ptr(info.region_name) }
        .to_str()
        .unwrap();
    assert!(
        name.starts_with(&format!("ffi{}-", std::process::id())),
        "{name}"
    );
    assert_eq!(unsafe { CStr::from_ptr(info.fingerprint) }, c"model-x");
    assert_eq!(
        (info.slot_count, info.slot_bytes, info.capacity),
        (32, 4096, 32)
    );
    assert_eq!(info.protocol, 1);
    assert!(info.client_id >= 1);
    assert_eq!(
        unsafe { kvtier_manager_server_info(m, null_mut()) },
        S::NullArgument
    );
    let mut local = null_mut();
    assert_eq!(
        unsafe { kvtier_manager_new(null(), null(), &mut local) },
        S::Ok
    );
    assert_eq!(
        unsafe { kvtier_manager_server_info(local, &mut info) },
        S::NotFound
    );
    unsafe {
        kvtier_manager_free(local);
        kvtier_manager_free(m);
    }
}

#[test]
fn refusals_at_connect_have_their_statuses() {
    let s = start(r#""fingerprint": "model-x""#);
    let missing = CString::new(format!("{}.none", s.socket.to_str().unwrap())).unwrap();
    assert_eq!(connect(&missing, None).unwrap_err(), S::Disconnected);
    let mut o = kvtier_connect_options_default();
    o.fingerprint = c"model-y".as_ptr();
    assert_eq!(
        connect(&s.socket, Some(&o)).unwrap_err(),
        S::InvalidArgument
    );
    let e = last_error();
    assert!(
        e.contains("fingerprint \"model-y\"") && e.contains("\"model-x\""),
        "{e}"
    );
    o.fingerprint = c"model-x".as_ptr();
    o.block_bytes = 8192;
    assert_eq!(
        connect(&s.socket, Some(&o)).unwrap_err(),
        S::InvalidArgument
    );
    assert!(
        last_error().contains("block bytes 8192"),
        "{}",
        last_error()
    );
    o.block_bytes = 0;
    o.call_timeout_ms = 0;
    assert_eq!(
        connect(&s.socket, Some(&o)).unwrap_err(),
        S::InvalidArgument
    );
    let mut m = null_mut();
    assert_eq!(
        unsafe { kvtier_manager_connect(null(), null(), &mut m) },
        S::NullArgument
    );
    assert_eq!(
        unsafe { kvtier_manager_connect(s.socket.as_ptr(), null(), null_mut()) },
        S::NullArgument
    );
    let other = start(r#""allowed_uids": [4000000000]"#);
    assert_eq!(connect(&other.socket, None).unwrap_err(), S::PeerFailed);
    assert!(last_error().contains("may not connect"), "{}", last_error());
}

#[test]
fn what_belongs_to_the_server_is_unsupported_and_a_gone_server_is_disconnected() {
    let mut s = start("");
    let m = connect(&s.socket, None).unwrap();
    assert_eq!(unsafe { kvtier_manager_reset_cache(m) }, S::Unsupported);
    assert!(
        last_error().contains("kvtier_manager_reset_cache"),
        "{}",
        last_error()
    );
    assert_eq!(unsafe { kvtier_manager_reset_flushed(m) }, S::Unsupported);
    let mut fd = -1;
    assert_eq!(
        unsafe { kvtier_manager_wake_fd(m, &mut fd) },
        S::Unsupported
    );
    let r = begin(m, c"r");
    s.stop();
    let k = [1u8, 2, 3];
    let keys = [ck(&k)];
    let mut ans = unsafe { std::mem::zeroed::<kvtier::dialect::kvtier_lookup_answer>() };
    assert_eq!(
        unsafe { kvtier_manager_lookup(m, r, keys.as_ptr(), 1, &mut ans) },
        S::Disconnected
    );
    assert_eq!(unsafe { kvtier_manager_schedule_end(m) }, S::Disconnected);
    assert_eq!(unsafe { kvtier_manager_shutdown(m) }, S::Ok);
    assert_eq!(unsafe { kvtier_manager_schedule_end(m) }, S::Closed);
    unsafe { kvtier_manager_free(m) };
}

#[test]
fn the_prometheus_text_of_a_connected_handle_has_the_server_families_per_client() {
    let s = start("");
    let mut o = kvtier_connect_options_default();
    o.name = c"engine-a".as_ptr();
    let m = connect(&s.socket, Some(&o)).unwrap();
    let r = begin(m, c"r");
    let k = [9u8; 16];
    let keys = [ck(&k)];
    let mut b = ffi_calls::PlanBuf::new(1);
    assert_eq!(
        unsafe { kvtier_manager_prepare_store(m, r, keys.as_ptr(), 1, &mut b.plan) },
        S::Ok
    );
    let mut buf = vec![0 as std::ffi::c_char; 1 << 20];
    let mut written = 0;
    let st =
        unsafe { kvtier_manager_metrics_prometheus(m, buf.as_mut_ptr(), buf.len(), &mut written) };
    assert_eq!(st, S::Ok, "{}", last_error());
    let text = unsafe { CStr::from_ptr(buf.as_ptr()) }.to_str().unwrap();
    let mut info = unsafe { std::mem::zeroed::<kvtier_server_info>() };
    info.struct_size = std::mem::size_of::<kvtier_server_info>();
    assert_eq!(unsafe { kvtier_manager_server_info(m, &mut info) }, S::Ok);
    let label = format!("client=\"engine-a#{}\"", info.client_id);
    assert!(text.contains("kvtier_server_clients 1\n"), "{text}");
    assert!(
        text.contains(&format!(
            "kvtier_server_client_stores_in_flight{{{label}}} 1\n"
        )),
        "{text}"
    );
    assert!(
        text.contains(&format!("kvtier_server_client_requests{{{label}}} 1\n")),
        "{text}"
    );
    assert!(text.contains("kvtier_manager_lookups_total"), "{text}");
    unsafe { kvtier_manager_free(m) };
}

#[test]
fn request_states_read_as_on_a_local_manager_and_others_live_requests_as_never_issued() {
    use kvtier::handles::*;
    let s = start("");
    let a = connect(&s.socket, None).unwrap();
    let b = connect(&s.socket, None).unwrap();
    let state = |m, r| {
        let mut st = -1;
        assert_eq!(
            unsafe { kvtier_manager_request_state(m, r, &mut st) },
            S::Ok
        );
        st
    };
    let ra = begin(a, c"r");
    assert_eq!(state(a, ra), KVTIER_REQUEST_STATE_ACTIVE);
    assert_eq!(state(b, ra), KVTIER_REQUEST_STATE_NEVER_ISSUED);
    assert_eq!(state(a, ra + 1000), KVTIER_REQUEST_STATE_NEVER_ISSUED);
    assert_eq!(unsafe { kvtier_manager_request_finished(a, ra) }, S::Ok);
    assert_eq!(state(a, ra), KVTIER_REQUEST_STATE_GONE);
    assert_eq!(state(b, ra), KVTIER_REQUEST_STATE_GONE);
    assert_eq!(
        unsafe { kvtier_manager_request_finished(a, ra) },
        S::UnknownRequest
    );
    unsafe {
        kvtier_manager_free(a);
        kvtier_manager_free(b);
    }
}

#[test]
fn a_region_split_per_worker_maps_in_the_engine_with_its_layout() {
    let s = start_with(r#", "worker_bytes": 2048"#, "");
    let m = connect(&s.socket, None).unwrap();
    let (base, stride) = slot_base(m);
    assert!(!base.is_null());
    assert_eq!(stride, 4096);
    unsafe { kvtier_manager_free(m) };
}
