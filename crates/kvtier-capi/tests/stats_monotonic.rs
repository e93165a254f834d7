//! Counters never go back: a secondary tier (Rust, or C behind a vtable)
//! that stops reporting a counter, or reports it smaller than before, does
//! not make the manager's merged stats or its Prometheus text go back.
//! Also the C name/value stats' names for the primary tier's histogram.

#[path = "support/c_basics.rs"]
mod c_basics;

use c_basics::miss_every_key;
use std::collections::HashMap;
use std::ffi::{CStr, c_char, c_void};
use std::ptr::{null, null_mut};
use std::sync::Arc;

use parking_lot::Mutex;

use kvtier::dialect::*;
use kvtier::kvtier_status as S;
use kvtier::manager::*;
use kvtier::observe::*;
use kvtier::requests::*;
use kvtier::tier::*;
use kvtier_core::Key;
use kvtier_core::primary::{PrimaryConfig, PrimaryTier};
use kvtier_core::request::Request;
use kvtier_core::stats::Stat;
use kvtier_core::tiering::{JobRef, JobResult, Manager, ManagerOptions, SecondaryTier, TierLookup};

/// What the scripted tier reports as its own stats, set by the test.
type Script = Arc<Mutex<Vec<Stat>>>;

/// A Rust tier that holds nothing and reports the scripted stats.
struct ScriptedTier {
    stats: Script,
    finished: Vec<JobResult>,
}

impl SecondaryTier for ScriptedTier {
    fn name(&self) -> &str {
        "scripted"
    }
    fn lookup(&mut self, _key: &Key, _request: &Request) -> TierLookup {
        TierLookup::Miss
    }
    fn submit_store(&mut self, job: JobRef) {
        self.finished.push(JobResult::new(job.id, false));
    }
    fn submit_load(&mut self, job: JobRef) {
        self.finished.push(JobResult::new(job.id, false));
    }
    fn poll_finished(&mut self, _max: usize, out: &mut Vec<JobResult>) {
        out.append(&mut self.finished);
    }
    fn has_pending_work(&self) -> bool {
        !self.finished.is_empty()
    }
    fn drain(&mut self) -> kvtier_core::Result<()> {
        Ok(())
    }
    fn stats(&self) -> Vec<Stat> {
        self.stats.lock().clone()
    }
    fn shutdown(&mut self) -> kvtier_core::Result<()> {
        Ok(())
    }
}

fn rust_manager() -> (Manager, Script) {
    let primary = PrimaryTier::new(PrimaryConfig {
        capacity: 8,
        ..Default::default()
    })
    .unwrap();
    let m = Manager::new(primary, ManagerOptions::default());
    let script: Script = Arc::default();
    m.add_tier(Box::new(ScriptedTier {
        stats: script.clone(),
        finished: Vec::new(),
    }))
    .unwrap();
    (m, script)
}

/// The value of tier 1's own statistic `name` (the last of that name:
/// the tier's own come after the manager's counters for it).
fn own(m: &Manager, name: &str) -> Option<f64> {
    m.stats()
        .unwrap()
        .iter()
        .rev()
        .find(|s| s.tier == Some(1) && s.stat.name == name)
        .map(|s| s.stat.value)
}

fn tier_bugs(m: &Manager, tier: Option<usize>) -> f64 {
    m.stats()
        .unwrap()
        .iter()
        .find(|s| s.tier == tier && s.stat.name == "tier_bugs")
        .unwrap()
        .stat
        .value
}

#[test]
fn a_counter_a_rust_tier_stops_reporting_keeps_its_last_value() {
    let (m, script) = rust_manager();
    *script.lock() = vec![Stat::counter("widgets", 7), Stat::gauge("level", 2.0)];
    assert_eq!(own(&m, "widgets"), Some(7.0));
    *script.lock() = vec![Stat::gauge("level", 1.0)];
    assert_eq!(own(&m, "widgets"), Some(7.0), "held at its last value");
    assert_eq!(own(&m, "level"), Some(1.0), "gauges are current");
    let text = m.prometheus_text().unwrap();
    assert!(
        text.contains(
            "# TYPE kvtier_custom_widgets_total counter\nkvtier_custom_widgets_total{tier=\"scripted\",medium=\"any\"} 7\n"
        ),
        "{text}"
    );
    *script.lock() = vec![];
    assert_eq!(own(&m, "level"), None, "a gauge no longer reported is gone");
    assert_eq!(tier_bugs(&m, Some(1)), 0.0);
}

#[test]
fn a_rust_tier_counter_that_goes_back_is_held_and_counted_as_a_bug() {
    let (m, script) = rust_manager();
    *script.lock() = vec![Stat::counter("widgets", 10)];
    assert_eq!(own(&m, "widgets"), Some(10.0));
    *script.lock() = vec![Stat::counter("widgets", 4)];
    assert_eq!(own(&m, "widgets"), Some(10.0), "never goes back");
    // One decrease, counted once however often it is read.
    assert_eq!(tier_bugs(&m, Some(1)), 1.0);
    assert_eq!(tier_bugs(&m, None), 1.0);
    let mut errors = Vec::new();
    m.take_errors(&mut errors).unwrap();
    assert!(
        errors
            .iter()
            .any(|e| e.contains("widgets") && e.contains("went back")),
        "{errors:?}"
    );
    let text = m.prometheus_text().unwrap();
    assert!(
        text.contains("kvtier_custom_widgets_total{tier=\"scripted\",medium=\"any\"} 10\n"),
        "{text}"
    );
    *script.lock() = vec![Stat::counter("widgets", 12)];
    assert_eq!(own(&m, "widgets"), Some(12.0));
    assert_eq!(tier_bugs(&m, Some(1)), 1.0);
}

// ---- the same through the C API, with a C tier ----

/// The C tier's stats, behind `user_data`: (name, kind, value).
type CStats = Mutex<Vec<(&'static str, i32, f64)>>;

unsafe extern "C" fn c_submit(_ud: *mut c_void, _job: *const kvtier_job) -> i32 {
    // Refused: the manager reports the job as failed.
    S::Io as i32
}

unsafe extern "C" fn c_stats(
    ud: *mut c_void,
    out: *mut kvtier_tier_stat,
    cap: usize,
    written: *mut usize,
) -> i32 {
    let stats = unsafe { &*(ud as *const CStats) }.lock();
    assert!(cap >= stats.len());
    for (i, &(name, kind, value)) in stats.iter().enumerate() {
        let mut s = kvtier_tier_stat {
            name: [0; 48],
            kind,
            value,
        };
        for (d, c) in s.name.iter_mut().zip(name.as_bytes()) {
            *d = *c as c_char;
        }
        unsafe { *out.add(i) = s };
    }
    unsafe { *written = stats.len() };
    0
}

unsafe extern "C" fn c_destroy(ud: *mut c_void) {
    drop(unsafe { Arc::from_raw(ud as *const CStats) });
}

fn c_manager() -> (*mut kvtier_manager, Arc<CStats>) {
    let mut o = kvtier_manager_options_default();
    o.capacity = 8;
    let mut m = null_mut();
    assert_eq!(
        unsafe { kvtier_manager_new(&o, std::ptr::null(), &mut m) },
        S::Ok
    );
    let stats: Arc<CStats> = Arc::default();
    let vt = kvtier_tier_vtable {
        struct_size: std::mem::size_of::<kvtier_tier_vtable>(),
        user_data: Arc::into_raw(stats.clone()) as *mut c_void,
        name: c"ctier".as_ptr(),
        medium: KVTIER_MEDIUM_ANY,
        locality: KVTIER_LOCALITY_ANY,
        lookup: Some(miss_every_key),
        submit_store: Some(c_submit),
        submit_load: Some(c_submit),
        poll_finished: None,
        touch: None,
        on_new_request: None,
        on_request_finished: None,
        on_schedule_end: None,
        has_pending_work: None,
        drain: None,
        stats: Some(c_stats),
        shutdown: None,
        destroy: Some(c_destroy),
        take_events: None,
    };
    let mut index = 0;
    assert_eq!(
        unsafe { kvtier_manager_add_tier(m, &vt, null(), &mut index) },
        S::Ok
    );
    assert_eq!(index, 1);
    (m, stats)
}

/// One `kvtier_manager_read_tier_stats` read of the primary tier and the
/// C tier: (tier, name) -> (kind, value).
fn c_read(m: *mut kvtier_manager) -> HashMap<(usize, String), (i32, f64)> {
    let mut out = HashMap::new();
    for tier in 0..=1 {
        let mut got = 0;
        assert_eq!(
            unsafe { kvtier_manager_read_tier_stats(m, tier, null_mut(), 0, &mut got) },
            S::BufferTooSmall,
            "a capacity of 0 asks for the size"
        );
        let mut buf = vec![unsafe { std::mem::zeroed::<kvtier_tier_stat>() }; got];
        let mut written = 0;
        assert_eq!(
            unsafe {
                kvtier_manager_read_tier_stats(m, tier, buf.as_mut_ptr(), buf.len(), &mut written)
            },
            S::Ok
        );
        assert_eq!(written, got);
        for s in &buf {
            let name = unsafe { CStr::from_ptr(s.name.as_ptr()) }
                .to_string_lossy()
                .into_owned();
            // The last of a name wins: the tier's own come after the manager's.
            out.insert((tier, name), (s.kind, s.value));
        }
    }
    out
}

fn c_metrics(m: *mut kvtier_manager) -> String {
    let mut buf = vec![0 as c_char; 1 << 16];
    let mut needed = 0;
    assert_eq!(
        unsafe {
            kvtier::observe::kvtier_manager_metrics_prometheus(
                m,
                buf.as_mut_ptr(),
                buf.len(),
                &mut needed,
            )
        },
        S::Ok
    );
    unsafe { CStr::from_ptr(buf.as_ptr()) }
        .to_string_lossy()
        .into_owned()
}

#[test]
fn c_tier_counters_never_go_back_in_the_c_stats_and_metrics() {
    let (m, stats) = c_manager();
    let widgets = (1, "widgets".to_string());
    *stats.lock() = vec![
        ("widgets", KVTIER_STAT_COUNTER, 5.0),
        ("level", KVTIER_STAT_GAUGE, 3.0),
    ];
    assert_eq!(c_read(m)[&widgets], (KVTIER_STAT_COUNTER, 5.0));
    // No longer reported: held.
    *stats.lock() = vec![("level", KVTIER_STAT_GAUGE, 1.0)];
    let read = c_read(m);
    assert_eq!(read[&widgets], (KVTIER_STAT_COUNTER, 5.0));
    assert_eq!(read[&(1, "level".to_string())], (KVTIER_STAT_GAUGE, 1.0));
    let text = c_metrics(m);
    assert!(
        text.contains("kvtier_custom_widgets_total{tier=\"ctier\",medium=\"any\"} 5\n"),
        "{text}"
    );
    assert_eq!(read[&(1, "tier_bugs".to_string())].1, 0.0);
    // Reported again, smaller: held, one tier bug.
    *stats.lock() = vec![("widgets", KVTIER_STAT_COUNTER, 2.0)];
    let read = c_read(m);
    assert_eq!(read[&widgets], (KVTIER_STAT_COUNTER, 5.0));
    assert_eq!(read[&(1, "tier_bugs".to_string())].1, 1.0);
    let text = c_metrics(m);
    assert!(
        text.contains("kvtier_custom_widgets_total{tier=\"ctier\",medium=\"any\"} 5\n"),
        "{text}"
    );
    assert_eq!(c_read(m)[&(1, "tier_bugs".to_string())].1, 1.0);
    unsafe { kvtier_manager_free(m) };
}

#[test]
fn the_c_stats_list_names_each_series_of_the_allocation_size_histogram() {
    let (m, _stats) = c_manager();
    let mut r = 0;
    assert_eq!(
        unsafe { kvtier_manager_request_begin(m, c"r".as_ptr(), null(), &mut r, null_mut()) },
        S::Ok
    );
    let names: Vec<[u8; 1]> = (0..3u8).map(|i| [i]).collect();
    let keys: Vec<kvtier::kvtier_key> = names
        .iter()
        .map(|n| kvtier::kvtier_key {
            data: n.as_ptr(),
            len: 1,
        })
        .collect();
    let mut to_store = vec![0usize; 3];
    let mut slots = vec![0u32; 3];
    let mut evicted = vec![unsafe { std::mem::zeroed::<kvtier_key_buf>() }; 3];
    let mut plan = kvtier_store_plan {
        store_indices: to_store.as_mut_ptr(),
        slots: slots.as_mut_ptr(),
        evicted: evicted.as_mut_ptr(),
        store_count: 0,
        evicted_count: 0,
        refused: true,
    };
    assert_eq!(
        unsafe { kvtier_manager_prepare_store(m, r, keys.as_ptr(), 3, &mut plan) },
        S::Ok
    );
    assert_eq!((plan.store_count, plan.refused), (3, false));
    let read = c_read(m);
    let series = |name: &str| read[&(0, format!("allocation_size_blocks_{name}"))];
    for (bucket, count) in [
        ("1", 0.0),
        ("4", 1.0),
        ("16", 1.0),
        ("64", 1.0),
        ("256", 1.0),
        ("1024", 1.0),
        ("4096", 1.0),
        ("16384", 1.0),
        ("65536", 1.0),
        ("262144", 1.0),
        ("inf", 1.0),
    ] {
        assert_eq!(
            series(&format!("bucket_le_{bucket}")),
            (KVTIER_STAT_COUNTER, count),
            "{bucket}"
        );
    }
    assert_eq!(series("sum"), (KVTIER_STAT_COUNTER, 3.0));
    assert_eq!(series("count"), (KVTIER_STAT_COUNTER, 1.0));
    unsafe { kvtier_manager_free(m) };
}
