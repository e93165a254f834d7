//! What an engine watches a manager with, through the C ABI, on a manager
//! built from JSON with a real fs tier: the wake-up descriptor (readable
//! when the tier's workers finish), the event callback, Prometheus text
//! (checked with the reference Python parser), and configuration errors.

#[path = "support/ffi_calls.rs"]
mod ffi_calls;
#[path = "support/prometheus.rs"]
mod prometheus;
use ffi_calls::c_basics::miss_every_key;
use kvtier_testkit::tmpfs;

use std::ffi::{CStr, c_char, c_int, c_void};
use std::ptr::{null, null_mut};
use std::sync::Mutex;

use ffi_calls::{PlanBuf, begin, ck, last_error, lookup, store_with, succeeded};
use kvtier::config::*;
use kvtier::dialect::*;
use kvtier::events::*;
use kvtier::kvtier_status as S;
use kvtier::manager::*;
use kvtier::observe::*;
use kvtier::requests::*;
use kvtier::tier::*;
use prometheus::parse_with_prometheus_client;
use tmpfs::SmallTmpfs;

const BLOCK: usize = 4096;

fn from_json(json: &str) -> Result<*mut kvtier_manager, (S, String)> {
    let mut m = null_mut();
    let st = unsafe { kvtier_manager_new_from_json(json.as_ptr().cast(), json.len(), &mut m) };
    if st == S::Ok {
        Ok(m)
    } else {
        assert!(m.is_null(), "nothing written on failure");
        Err((st, last_error()))
    }
}

fn key(i: u32) -> [u8; 8] {
    (0xC0FFEE00_00000000u64 | i as u64).to_be_bytes()
}

fn readable(fd: c_int, timeout_ms: i32) -> bool {
    let mut p = libc::pollfd {
        fd,
        events: libc::POLLIN,
        revents: 0,
    };
    let n = unsafe { libc::poll(&mut p, 1, timeout_ms) };
    n == 1 && p.revents & libc::POLLIN != 0
}

fn reset(fd: c_int) {
    let mut v = 0u64;
    unsafe { libc::read(fd, (&mut v as *mut u64).cast(), 8) };
}

/// Events the callback saw: (tier, kind, medium, locality, keys).
type Seen = Mutex<Vec<(u32, i32, i32, i32, Vec<Vec<u8>>)>>;

unsafe extern "C" fn on_events(ud: *mut c_void, b: *const kvtier_event) {
    let seen = unsafe { &*(ud as *const Seen) };
    let b = unsafe { &*b };
    let keys = (0..b.len)
        .map(|i| {
            let k = unsafe { &*b.keys.add(i) };
            unsafe { std::slice::from_raw_parts(k.data, k.len) }.to_vec()
        })
        .collect();
    seen.lock()
        .unwrap()
        .push((b.tier, b.kind, b.medium, b.locality, keys));
}

fn has_line(samples: &[String], line: &str) -> bool {
    samples.iter().any(|s| s == line)
}

/// Stores `ks` for `req`, filling each new slot with its key's pattern.
fn store(
    m: *mut kvtier_manager,
    base: *mut u8,
    stride: usize,
    req: kvtier_request_handle,
    ks: &[[u8; 8]],
) {
    store_with(m, req, ks, |i, slot| {
        let dst = unsafe { base.add(slot as usize * stride) };
        unsafe { std::ptr::write_bytes(dst, ks[i][7], BLOCK) };
    });
}

/// Sleeps on the wake-up descriptor until the manager has no pending work:
/// each wake-up is followed by a whole scheduler step, whose first call
/// collects what finished.
fn settle(m: *mut kvtier_manager, fd: c_int) {
    // End the step in progress (its one collection may be spent).
    assert_eq!(unsafe { kvtier_manager_schedule_end(m) }, S::Ok);
    for _ in 0..200 {
        // An empty step: collects finished jobs, then ends.
        assert_eq!(unsafe { kvtier_manager_schedule_end(m) }, S::Ok);
        let mut pending = true;
        assert_eq!(
            unsafe { kvtier_manager_has_pending_work(m, &mut pending) },
            S::Ok
        );
        if !pending {
            return;
        }
        if readable(fd, 5000) {
            reset(fd);
        }
    }
    panic!("work never finished");
}

fn metrics(m: *mut kvtier_manager) -> String {
    let mut needed = 0usize;
    assert_eq!(
        unsafe { kvtier_manager_metrics_prometheus(m, null_mut(), 0, &mut needed) },
        S::BufferTooSmall
    );
    assert!(needed > 1);
    let mut small = vec![0 as c_char; needed / 2];
    assert_eq!(
        unsafe {
            kvtier_manager_metrics_prometheus(m, small.as_mut_ptr(), small.len(), &mut needed)
        },
        S::BufferTooSmall
    );
    assert!(small.iter().all(|&c| c == 0), "nothing written when short");
    let mut buf = vec![0 as c_char; needed + 256];
    assert_eq!(
        unsafe { kvtier_manager_metrics_prometheus(m, buf.as_mut_ptr(), buf.len(), &mut needed) },
        S::Ok
    );
    let text = unsafe { CStr::from_ptr(buf.as_ptr()) }
        .to_str()
        .unwrap()
        .to_string();
    assert_eq!(text.len() + 1, needed);
    text
}

#[test]
fn json_manager_with_fs_tier_wakes_reports_events_and_metrics() {
    let dir = std::env::temp_dir().join(format!("kvtier-engine-ffi-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let json = format!(
        r#"{{
        "block_bytes": {BLOCK},
        "primary": {{"capacity": 4, "event_capacity": 256}},
        "tiers": [{{"type": "fs", "options": {{"directory": {:?}, "read_threads": 1,
                    "write_threads": 1, "direct_io": false}}}}]
    }}"#,
        dir.display().to_string()
    );
    let m = from_json(&json).unwrap_or_else(|e| panic!("{e:?}"));
    let (mut base, mut stride, mut slot_bytes, mut count) = (null_mut(), 0, 0, 0);
    assert_eq!(
        unsafe {
            kvtier_manager_slot_memory(m, &mut base, &mut stride, &mut slot_bytes, &mut count)
        },
        S::Ok
    );
    assert_eq!((slot_bytes, count), (BLOCK, 4));
    let base = base as *mut u8;

    let seen: Seen = Mutex::new(Vec::new());
    assert_eq!(
        unsafe {
            kvtier_manager_set_event_callback(
                m,
                Some(on_events),
                &seen as *const Seen as *mut c_void,
                false,
            )
        },
        S::Ok
    );
    let mut fd: c_int = -1;
    assert_eq!(unsafe { kvtier_manager_wake_fd(m, &mut fd) }, S::Ok);
    let mut fd2: c_int = -1;
    assert_eq!(unsafe { kvtier_manager_wake_fd(m, &mut fd2) }, S::Ok);
    assert!(fd >= 0 && fd == fd2);
    assert!(!readable(fd, 0), "nothing finished yet");

    let req = begin(m, c"r1");
    let first: Vec<[u8; 8]> = (0..4).map(key).collect();
    store(m, base, stride, req, &first);
    // The cascade to the fs tier runs on its worker: its finish wakes poll().
    assert!(readable(fd, 60_000), "the fs worker's finish wakes the fd");
    reset(fd);
    settle(m, fd);

    // Four more blocks evict the first four from the primary tier.
    let second: Vec<[u8; 8]> = (4..8).map(key).collect();
    store(m, base, stride, req, &second);
    settle(m, fd);
    assert_eq!(lookup(m, req, &key(0)), KVTIER_LOOKUP_RETRY);
    assert_eq!(unsafe { kvtier_manager_schedule_end(m) }, S::Ok);
    assert!(readable(fd, 60_000), "the promotion's finish wakes the fd");
    settle(m, fd);
    assert_eq!(lookup(m, req, &key(0)), KVTIER_LOOKUP_HIT);
    let mut slot = u32::MAX;
    let k0 = key(0);
    assert_eq!(
        unsafe { kvtier_manager_prepare_load(m, req, &ck(&k0), 1, &mut slot) },
        S::Ok
    );
    let got = unsafe { std::slice::from_raw_parts(base.add(slot as usize * stride), BLOCK) };
    assert!(
        got.iter().all(|&b| b == k0[7]),
        "promoted bytes are the stored bytes"
    );
    assert_eq!(
        unsafe { kvtier_manager_complete_load(m, req, &ck(&k0), 1) },
        S::Ok
    );

    // Events arrived as they happened, with the tier's medium and locality.
    {
        let seen = seen.lock().unwrap();
        let stored_primary: Vec<&Vec<u8>> = seen
            .iter()
            .filter(|e| e.0 == 0 && e.1 == KVTIER_EVENT_STORED)
            .flat_map(|e| e.4.iter())
            .collect();
        assert!(stored_primary.len() >= 9, "{seen:?}");
        assert!(
            seen.iter()
                .filter(|e| e.0 == 0)
                .all(|e| e.2 == KVTIER_MEDIUM_CPU && e.3 == KVTIER_LOCALITY_LOCAL)
        );
        assert!(
            seen.iter()
                .any(|e| e.0 == 0 && e.1 == KVTIER_EVENT_REMOVED && e.4.contains(&key(0).to_vec()))
        );
        let fs_stored: usize = seen
            .iter()
            .filter(|e| e.0 == 1 && e.1 == KVTIER_EVENT_STORED)
            .map(|e| {
                assert_eq!((e.2, e.3), (KVTIER_MEDIUM_STORAGE, KVTIER_LOCALITY_LOCAL));
                e.4.len()
            })
            .sum();
        assert_eq!(fs_stored, 8, "{seen:?}");
    }
    // Delivered only: nothing is left to drain.
    let mut ev = [unsafe { std::mem::zeroed::<kvtier_event>() }; 4];
    let (mut written, mut more) = (9usize, true);
    assert_eq!(
        unsafe {
            kvtier_manager_take_events(
                m,
                ffi_calls::thread_buffer(),
                ev.as_mut_ptr(),
                4,
                &mut written,
                &mut more,
            )
        },
        S::Ok
    );
    assert_eq!((written, more), (0, false));

    // Metrics of every tier, valid for the reference parser.
    let text = metrics(m);
    let samples = parse_with_prometheus_client(&text);
    let mut series: Vec<String> = samples
        .iter()
        .map(|s| s.rsplit_once('|').unwrap().0.to_string())
        .collect();
    let all = series.len();
    series.sort();
    series.dedup();
    assert_eq!(series.len(), all, "every series appears once:\n{text}");
    assert!(
        has_line(
            &samples,
            "kvtier_fs_lookup_results_total|counter|[('medium', 'storage'), ('result', 'hit'), ('tier', 'fs')]|1.0"
        ),
        "the fs tier's own hits beside the manager's: {text}"
    );
    let has = |prefix: &str| samples.iter().any(|s| s.starts_with(prefix));
    assert!(
        has(
            "kvtier_tier_jobs_total|counter|[('direction', 'store'), ('medium', 'storage'), ('tier', 'fs')]|2.0"
        ),
        "{text}"
    );
    assert!(
        has(
            "kvtier_tier_jobs_total|counter|[('direction', 'load'), ('medium', 'storage'), ('tier', 'fs')]|1.0"
        ),
        "{text}"
    );
    assert!(has("kvtier_manager_lookups_total|counter|[]|2.0"), "{text}");
    assert!(
        has("kvtier_tier_evictions_total|counter|[('medium', 'cpu'), ('tier', 'primary')]"),
        "{text}"
    );

    // The callback can be removed; events queue for draining again.
    assert_eq!(
        unsafe { kvtier_manager_set_event_callback(m, None, null_mut(), false) },
        S::Ok
    );
    assert_eq!(unsafe { kvtier_manager_request_finished(m, req) }, S::Ok);
    unsafe { kvtier_manager_free(m) };
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn configuration_errors_name_the_field_and_build_nothing() {
    let (st, msg) = from_json(r#"{"primary": {"capacity": "many"}}"#).unwrap_err();
    assert_eq!(st, S::InvalidArgument);
    assert!(msg.contains("primary.capacity: invalid type"), "{msg}");
    let (_, msg) = from_json(
        r#"{"block_bytes": 64, "tiers": [{"type": "fs", "options": {"directory": "/tmp/a"}},
            {"type": "fs", "options": {"directory": "/tmp/b", "capacity_bytes": 1.5}}]}"#,
    )
    .unwrap_err();
    assert!(msg.contains("tiers[1].options.capacity_bytes"), "{msg}");
    let (_, msg) = from_json(r#"{"regoin": {}}"#).unwrap_err();
    assert!(msg.contains("unknown field `regoin`"), "{msg}");
    let (_, msg) = from_json("{\"block_bytes\": 64,").unwrap_err();
    assert!(msg.contains("configuration"), "{msg}");
    let mut m = null_mut();
    assert_eq!(
        unsafe { kvtier_manager_new_from_json(null(), 3, &mut m) },
        S::NullArgument
    );
    let bad = [0xffu8, 0xfe];
    assert_eq!(
        unsafe { kvtier_manager_new_from_json(bad.as_ptr().cast(), 2, &mut m) },
        S::InvalidArgument
    );
    assert!(m.is_null());
    // A manager without block_bytes has no slot memory to report.
    let m = from_json("{}").unwrap();
    let (mut base, mut stride, mut sb, mut n) = (null_mut(), 0, 0, 0);
    assert_eq!(
        unsafe { kvtier_manager_slot_memory(m, &mut base, &mut stride, &mut sb, &mut n) },
        S::NotFound
    );
    unsafe { kvtier_manager_free(m) };
}

#[test]
fn json_region_is_shared_by_name() {
    let name = format!("kvtier-json-{}", std::process::id());
    let json = format!(
        r#"{{"block_bytes": 8192, "region": {{"name": "{name}", "directory": "/dev/shm", "prefault": "off"}},
            "primary": {{"capacity_bytes": 81920}}}}"#
    );
    let m = from_json(&json).unwrap_or_else(|e| panic!("{e:?}"));
    let (mut base, mut stride, mut sb, mut n) = (null_mut(), 0, 0, 0);
    assert_eq!(
        unsafe { kvtier_manager_slot_memory(m, &mut base, &mut stride, &mut sb, &mut n) },
        S::Ok
    );
    assert_eq!(n, 10);
    assert!(stride >= 8192 && sb >= 8192);
    unsafe { std::ptr::write_bytes(base as *mut u8, 7, 8192) };
    unsafe { kvtier_manager_free(m) };
}

/// The C tier below: its jobs finish on a thread of their own, once the
/// test opens the gate.
struct Delayed {
    manager: usize,
    gate: std::sync::Arc<std::sync::atomic::AtomicBool>,
    threads: Vec<std::thread::JoinHandle<()>>,
}

unsafe extern "C" fn d_submit(ud: *mut c_void, job: *const kvtier_job) -> i32 {
    let d = unsafe { &mut *(ud as *mut Delayed) };
    let (manager, id, gate) = (d.manager, unsafe { (*job).id }, d.gate.clone());
    d.threads.push(std::thread::spawn(move || {
        while !gate.load(std::sync::atomic::Ordering::Acquire) {
            std::thread::sleep(std::time::Duration::from_millis(1));
        }
        let r = succeeded(id);
        let st = unsafe { kvtier_manager_complete_job(manager as *const kvtier_manager, 1, &r) };
        assert_eq!(st, S::Ok);
    }));
    0
}

unsafe extern "C" fn d_destroy(ud: *mut c_void) {
    let d = unsafe { Box::from_raw(ud as *mut Delayed) };
    for t in d.threads {
        t.join().unwrap();
    }
}

#[test]
fn poll_wakes_when_a_worker_thread_completes_a_job() {
    let m = from_json(r#"{"primary": {"capacity": 8}}"#).unwrap();
    let gate = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let ud = Box::into_raw(Box::new(Delayed {
        manager: m as usize,
        gate: gate.clone(),
        threads: Vec::new(),
    }));
    let vt = kvtier_tier_vtable {
        struct_size: std::mem::size_of::<kvtier_tier_vtable>(),
        user_data: ud.cast(),
        name: c"delayed".as_ptr(),
        medium: KVTIER_MEDIUM_ANY,
        locality: KVTIER_LOCALITY_ANY,
        lookup: Some(miss_every_key),
        submit_store: Some(d_submit),
        submit_load: Some(d_submit),
        poll_finished: None,
        touch: None,
        on_new_request: None,
        on_request_finished: None,
        on_schedule_end: None,
        has_pending_work: None,
        drain: None,
        stats: None,
        shutdown: None,
        destroy: Some(d_destroy),
        take_events: None,
    };
    let mut index = 0;
    assert_eq!(
        unsafe { kvtier_manager_add_tier(m, &vt, null(), &mut index) },
        S::Ok
    );
    let mut fd: c_int = -1;
    assert_eq!(unsafe { kvtier_manager_wake_fd(m, &mut fd) }, S::Ok);
    let req = begin(m, c"r");
    // No slot memory needed: the C tier only reports.
    let k = key(1);
    let keys = [ck(&k)];
    let mut plan = PlanBuf::new(1);
    assert_eq!(
        unsafe { kvtier_manager_prepare_store(m, req, keys.as_ptr(), 1, &mut plan.plan) },
        S::Ok
    );
    assert_eq!(plan.plan.store_count, 1);
    assert_eq!(
        unsafe {
            kvtier_manager_complete_store(m, req, keys.as_ptr(), 1, true, std::ptr::null_mut())
        },
        S::Ok
    );
    let mut pending = false;
    assert_eq!(
        unsafe { kvtier_manager_has_pending_work(m, &mut pending) },
        S::Ok
    );
    assert!(pending, "the cascade is in flight");
    assert!(
        !readable(fd, 200),
        "not readable while the job is held unfinished"
    );
    gate.store(true, std::sync::atomic::Ordering::Release);
    assert!(
        readable(fd, 60_000),
        "poll wakes when the worker reports (a minute: only a lost wake-up waits that long)"
    );
    reset(fd);
    assert!(!readable(fd, 0), "reading resets it");
    // The next step collects the job; nothing is pending any more.
    assert_eq!(unsafe { kvtier_manager_schedule_end(m) }, S::Ok);
    assert_eq!(unsafe { kvtier_manager_schedule_end(m) }, S::Ok);
    assert_eq!(
        unsafe { kvtier_manager_has_pending_work(m, &mut pending) },
        S::Ok
    );
    assert!(!pending);
    unsafe { kvtier_manager_free(m) };
}

#[test]
fn events_go_to_the_callback_and_also_to_the_queue_when_asked() {
    let m = from_json(r#"{"primary": {"capacity": 2, "event_capacity": 64}}"#).unwrap();
    let seen: Seen = Mutex::new(Vec::new());
    assert_eq!(
        unsafe {
            kvtier_manager_set_event_callback(
                m,
                Some(on_events),
                &seen as *const Seen as *mut c_void,
                true,
            )
        },
        S::Ok
    );
    let req = begin(m, c"q");
    // Three keys through two slots: three stored, one removed.
    let ks: Vec<[u8; 8]> = (0..3).map(key).collect();
    for k in &ks {
        assert_eq!(store_with(m, req, &[*k], |_, _| {}), 1);
    }
    let by_callback: Vec<(i32, Vec<u8>)> = seen
        .lock()
        .unwrap()
        .iter()
        .flat_map(|e| e.4.iter().map(move |k| (e.1, k.clone())))
        .collect();
    let mut ev = [unsafe { std::mem::zeroed::<kvtier_event>() }; 16];
    let (mut written, mut more) = (0usize, true);
    assert_eq!(
        unsafe {
            kvtier_manager_take_events(
                m,
                ffi_calls::thread_buffer(),
                ev.as_mut_ptr(),
                16,
                &mut written,
                &mut more,
            )
        },
        S::Ok
    );
    // One event per batch: (stored 0 1), (removed 0), (stored 2).
    assert_eq!((written, more), (3, false));
    let drained: Vec<(i32, Vec<u8>)> = ev[..written]
        .iter()
        .flat_map(|e| {
            (0..e.len).map(move |i| {
                let k = unsafe { &*e.keys.add(i) };
                (
                    e.kind,
                    unsafe { std::slice::from_raw_parts(k.data, k.len) }.to_vec(),
                )
            })
        })
        .collect();
    assert_eq!(drained, by_callback, "the same events, in the same order");
    assert_eq!(
        drained
            .iter()
            .filter(|e| e.0 == KVTIER_EVENT_STORED)
            .count(),
        3
    );
    assert_eq!(
        drained,
        vec![
            (KVTIER_EVENT_STORED, key(0).to_vec()),
            (KVTIER_EVENT_STORED, key(1).to_vec()),
            (KVTIER_EVENT_REMOVED, key(0).to_vec()),
            (KVTIER_EVENT_STORED, key(2).to_vec()),
        ]
    );
    unsafe { kvtier_manager_free(m) };
}

#[test]
fn configuration_errors_keep_the_status_of_what_failed() {
    // A segments directory another manager holds: ALREADY_EXISTS, as
    // from kvtier_manager_add_fs_tier, with the part that failed named.
    let dir = tempfile::tempdir().unwrap();
    let json = format!(
        r#"{{"block_bytes": {BLOCK}, "primary": {{"capacity": 4}},
            "tiers": [{{"type": "fs", "options": {{"directory": {:?},
              "capacity_bytes": {}, "layout": "segments"}}}}]}}"#,
        dir.path().to_str().unwrap(),
        16 * BLOCK
    );
    let first = from_json(&json).unwrap_or_else(|e| panic!("{e:?}"));
    let (st, msg) = from_json(&json).unwrap_err();
    assert_eq!(st, S::AlreadyExists, "{msg}");
    assert!(msg.contains("configuration: tiers[0]"), "{msg}");
    unsafe { kvtier_manager_free(first) };

    // A region larger than its file system's room: NO_SPACE.
    let Some(fs) = SmallTmpfs::mount(1 << 20) else {
        return;
    };
    let json = format!(
        r#"{{"block_bytes": 65536, "primary": {{"capacity": 64}},
            "region": {{"name": "json-no-space-{}", "directory": {:?}, "prefault": "off"}}}}"#,
        std::process::id(),
        fs.path().to_str().unwrap()
    );
    let (st, msg) = from_json(&json).unwrap_err();
    assert_eq!(st, S::NoSpace, "{msg}");
    assert!(msg.contains("configuration: region"), "{msg}");
    assert_eq!(
        std::fs::read_dir(fs.path()).unwrap().count(),
        0,
        "nothing left behind"
    );
}
