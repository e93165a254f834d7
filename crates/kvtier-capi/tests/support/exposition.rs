//! A manager with every built-in tier and a C tier, worked a little so
//! every family has values, and checks of the Prometheus text it writes:
//! the families' own rules, the reference parser, `promtool`.

#![allow(dead_code)]

#[path = "c_basics.rs"]
pub mod c_basics;

use c_basics::miss_every_key;
use kvtier_testkit::common::store_filled;
use std::collections::HashMap;
use std::ffi::c_void;
use std::io::Write;
use std::process::{Command, Stdio};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use kvtier::dialect::{KVTIER_LOCALITY_REMOTE, KVTIER_MEDIUM_CPU};
use kvtier::tier::*;
use kvtier_core::Key;
use kvtier_core::config::Config;
use kvtier_core::tiering::{BackpressureConfig, LookupResult, Manager, RequestParams, TierOptions};
use kvtier_testkit::require::require_tool;

pub const BLOCK: usize = 4096;

/// The C tier's state (its `user_data`): the jobs finished, reported at
/// its next poll.
type Finished = Mutex<Vec<u64>>;

unsafe fn finished<'a>(user_data: *mut c_void) -> &'a Finished {
    unsafe { &*(user_data as *const Finished) }
}

unsafe extern "C" fn c_destroy(user_data: *mut c_void) {
    drop(unsafe { Box::from_raw(user_data as *mut Finished) });
}

unsafe extern "C" fn c_submit(user_data: *mut c_void, job: *const kvtier_job) -> i32 {
    unsafe { finished(user_data) }
        .lock()
        .unwrap()
        .push(unsafe { (*job).id });
    0
}

unsafe extern "C" fn c_poll(
    user_data: *mut c_void,
    out: *mut kvtier_job_result,
    capacity: usize,
    written: *mut usize,
) -> i32 {
    let mut f = unsafe { finished(user_data) }.lock().unwrap();
    let n = f.len().min(capacity);
    for (i, id) in f.drain(..n).enumerate() {
        unsafe {
            *out.add(i) = kvtier_job_result {
                id,
                success: true,
                succeeded_keys: std::ptr::null(),
                succeeded_len: 0,
                bytes: BLOCK as u64,
                duration_ns: 2_000_000,
            }
        };
    }
    unsafe { *written = n };
    0
}

fn c_stat(name: &str, kind: kvtier_stat_kind, value: f64) -> kvtier_tier_stat {
    let mut s = kvtier_tier_stat {
        name: [0; 48],
        kind,
        value,
    };
    for (d, b) in s.name.iter_mut().zip(name.bytes()) {
        *d = b as std::ffi::c_char;
    }
    s
}

/// The C tier's own statistics: plain names, one spelled with a dot, one
/// named like a built-in statistic and one like a vtable's own.
unsafe extern "C" fn c_stats(
    _: *mut c_void,
    out: *mut kvtier_tier_stat,
    capacity: usize,
    written: *mut usize,
) -> i32 {
    let stats = [
        c_stat("copies", KVTIER_STAT_COUNTER, 3.0),
        c_stat("queue.depth", KVTIER_STAT_GAUGE, 1.0),
        c_stat("evictions", KVTIER_STAT_COUNTER, 2.0),
        c_stat("callback_errors", KVTIER_STAT_COUNTER, 4.0),
    ];
    unsafe { *written = stats.len() };
    if capacity < stats.len() {
        return kvtier::kvtier_status::BufferTooSmall as i32;
    }
    for (i, s) in stats.iter().enumerate() {
        unsafe { *out.add(i) = *s };
    }
    0
}

/// A port on loopback nobody listens on (bound, then released).
pub fn closed_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// Ends steps until no work is pending (at most 10 s).
pub fn settle(m: &Manager) {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        m.schedule_end().unwrap();
        if !m.has_pending_work().unwrap() {
            return;
        }
        assert!(Instant::now() < deadline, "work still pending after 10 s");
        std::thread::sleep(Duration::from_millis(2));
    }
}

/// A manager with a 4-slot primary tier, the fs tier in `dir`, the redis
/// tier (with the feature; its server does not answer) and a C tier with
/// back-pressure on; 8 blocks stored (cascaded to every tier), the first
/// promoted back from the fs tier, a lookup missed everywhere, the request
/// finished.
pub fn busy_manager(dir: &std::path::Path) -> Manager {
    let redis = if cfg!(feature = "redis-tier") {
        format!(
            r#", {{"type": "redis", "options": {{"nodes": ["127.0.0.1:{}"], "connections": 1,
                  "connect_timeout_ms": 200}}}}"#,
            closed_port()
        )
    } else {
        String::new()
    };
    let json = format!(
        r#"{{"block_bytes": {BLOCK}, "primary": {{"capacity": 4, "event_capacity": 64}},
            "tiers": [{{"type": "fs", "options": {{"directory": "{}", "read_threads": 1,
                        "write_threads": 1, "direct_io": false}}}}{redis}]}}"#,
        dir.display()
    );
    let m = Config::from_json(&json).unwrap().build().unwrap();
    let state: Box<Finished> = Box::default();
    let vt = kvtier_tier_vtable {
        user_data: Box::into_raw(state) as *mut c_void,
        destroy: Some(c_destroy),
        name: c"ctier".as_ptr(),
        medium: KVTIER_MEDIUM_CPU,
        locality: KVTIER_LOCALITY_REMOTE,
        lookup: Some(miss_every_key),
        submit_store: Some(c_submit),
        submit_load: Some(c_submit),
        poll_finished: Some(c_poll),
        stats: Some(c_stats),
        ..kvtier::tier::kvtier_tier_vtable_default()
    };
    let tier = unsafe { tier_from_vtable(&vt) }.unwrap();
    m.add_tier_with(
        tier,
        TierOptions {
            backpressure: Some(BackpressureConfig::default()),
            ..TierOptions::default()
        },
    )
    .unwrap();
    let r = m.request_begin("r", RequestParams::default()).unwrap().id;
    let keys: Vec<Key> = (1..=8u8).map(|i| Key::new(&[i; 8]).unwrap()).collect();
    store_filled(&m, r, &keys[..4]);
    settle(&m);
    store_filled(&m, r, &keys[4..]);
    settle(&m);
    let mut answer = m.lookup(r, &keys[0]).unwrap();
    for _ in 0..100 {
        if answer == LookupResult::Hit {
            break;
        }
        assert_ne!(answer, LookupResult::Miss, "the fs tier has block 1");
        settle(&m);
        answer = m.lookup(r, &keys[0]).unwrap();
    }
    assert_eq!(answer, LookupResult::Hit);
    // Missed everywhere (the redis tier may first ask to be asked again).
    let absent = Key::new(b"nowhere").unwrap();
    let mut answer = m.lookup(r, &absent).unwrap();
    let deadline = Instant::now() + Duration::from_secs(10);
    while answer != LookupResult::Miss && Instant::now() < deadline {
        settle(&m);
        std::thread::sleep(Duration::from_millis(5));
        answer = m.lookup(r, &absent).unwrap();
    }
    assert_eq!(answer, LookupResult::Miss);
    m.request_finished(r).unwrap();
    settle(&m);
    m
}

/// What is wrong with the families of `text`: a `# TYPE` without a
/// `# HELP` of the same family just before it, a family named twice, two
/// families whose sample names collide (a counter `x_total` and a gauge
/// `x`, a histogram `h` and a gauge `h_count`), a sample outside its
/// family, a family without samples.
pub fn family_problems(text: &str) -> Vec<String> {
    let mut problems = Vec::new();
    let mut help: Option<&str> = None;
    let mut current: Option<(&str, &str)> = None;
    let mut samples_in_current = 0;
    let mut owner: HashMap<String, String> = HashMap::new();
    let mut families: Vec<&str> = Vec::new();
    let end_family = |current: Option<(&str, &str)>, n: usize, problems: &mut Vec<String>| {
        if let Some((name, _)) = current
            && n == 0
        {
            problems.push(format!("family {name} has no sample"));
        }
    };
    for line in text.lines() {
        if let Some(rest) = line.strip_prefix("# HELP ") {
            let name = rest.split(' ').next().unwrap_or("");
            if help.is_some() {
                problems.push(format!("HELP of {name} follows another HELP"));
            }
            help = Some(name);
            continue;
        }
        if let Some(rest) = line.strip_prefix("# TYPE ") {
            let mut parts = rest.split(' ');
            let name = parts.next().unwrap_or("");
            let ty = parts.next().unwrap_or("");
            if help != Some(name) {
                problems.push(format!("family {name} has no HELP line"));
            }
            help = None;
            end_family(current, samples_in_current, &mut problems);
            samples_in_current = 0;
            if families.contains(&name) {
                problems.push(format!("family {name} appears twice"));
            }
            families.push(name);
            let names: Vec<String> = match ty {
                "counter" => {
                    let base = name.strip_suffix("_total").unwrap_or(name);
                    vec![base.into(), format!("{base}_total")]
                }
                "histogram" => ["", "_bucket", "_sum", "_count"]
                    .iter()
                    .map(|s| format!("{name}{s}"))
                    .collect(),
                _ => vec![name.into()],
            };
            for n in names {
                if let Some(other) = owner.insert(n.clone(), name.to_string())
                    && other != name
                {
                    problems.push(format!("families {other} and {name} share the name {n}"));
                }
            }
            current = Some((name, ty));
            continue;
        }
        if line.starts_with('#') || line.is_empty() {
            continue;
        }
        let sample = line.split(['{', ' ']).next().unwrap_or("");
        let Some((name, ty)) = current else {
            problems.push(format!("sample {sample} before any family"));
            continue;
        };
        samples_in_current += 1;
        let fits = match ty {
            "histogram" => ["_bucket", "_sum", "_count"]
                .iter()
                .any(|s| sample == format!("{name}{s}")),
            _ => sample == name,
        };
        if !fits {
            problems.push(format!("sample {sample} is outside its family {name}"));
        }
    }
    end_family(current, samples_in_current, &mut problems);
    if help.is_some() {
        problems.push("a HELP line without a TYPE line at the end".into());
    }
    problems
}

/// `promtool check metrics` on `text`: `None` when promtool is not
/// installed (after [`require_tool`]: the test skips, or fails under
/// `KVTIER_REQUIRE_ALL=1`), else its output (empty: no problem, no
/// warning) and whether it passed.
pub fn promtool_check(text: &str) -> Option<(bool, String)> {
    let exe = require_tool("promtool", "apt-get install -y prometheus")?;
    let mut child = Command::new(exe)
        .args(["check", "metrics"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("starting promtool");
    child
        .stdin
        .take()
        .unwrap()
        .write_all(text.as_bytes())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    let mut said = String::from_utf8_lossy(&out.stdout).into_owned();
    said.push_str(&String::from_utf8_lossy(&out.stderr));
    Some((out.status.success(), said))
}
