//! The per-request counters: each request the manager lets go is counted
//! once, in the manager's statistics (`requests_finished`,
//! `request_blocks_asked`, `request_blocks_served_primary`,
//! `request_blocks_recomputed`, `request_wait_steps`, and each tier's
//! `request_blocks_served`), in its report and in the Prometheus text;
//! a waiting request's repeated lookups do not multiply them.

use kvtier_testkit::common;

use std::sync::Arc;

use common::*;
use kvtier_core::Key;
use kvtier_core::primary::StorePlan;
use kvtier_core::request::RequestId;
use kvtier_core::tiering::PrimaryBackend;
use kvtier_core::tiering::{
    LookupResult, Manager, ManagerOptions, ManagerStats, MissReason, ProgressOptions,
    RequestParams, RequestReport,
};
use parking_lot::Mutex;

/// What a report says about the per-request counters, owned.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Counted {
    name: String,
    asked: u64,
    loaded: u64,
    served: Vec<u64>,
    recomputed: u64,
    steps_waited: u64,
}

type Reports = Arc<Mutex<Vec<Counted>>>;

/// A manager over 16 slots with one test tier, "slow" (jobs finished at
/// submission unless `auto_finish` is turned off), and a listener keeping
/// every report.
fn manager(opts: ManagerOptions) -> (Manager<impl PrimaryBackend>, Arc<Mutex<Script>>, Reports) {
    let m = model_manager(16, opts);
    let (t, s) = TestTier::new("slow");
    m.add_tier(rust(t)).unwrap();
    let reports: Reports = Arc::default();
    let r = reports.clone();
    m.set_request_report_listener(Some(Box::new(move |rep: &RequestReport<'_>| {
        r.lock().push(Counted {
            name: rep.name.to_string(),
            asked: rep.asked,
            loaded: rep.loaded,
            served: rep.served.to_vec(),
            recomputed: rep.recomputed,
            steps_waited: rep.steps_waited,
        })
    })))
    .unwrap();
    (m.into_manager(), s, reports)
}

fn start<P: PrimaryBackend>(m: &Manager<P>, name: &str) -> RequestId {
    m.request_begin(name, RequestParams::default()).unwrap().id
}

/// Request `name` stores `ks` into the primary tier and finishes.
fn write<P: PrimaryBackend>(m: &Manager<P>, name: &str, ks: &[Key]) {
    let r = start(m, name);
    let mut plan = StorePlan::default();
    m.prepare_store(r, ks, &mut plan).unwrap();
    assert_eq!(plan.to_store.len(), ks.len());
    m.complete_store(r, &plan.to_store, true).unwrap();
    m.request_finished(r).unwrap();
}

/// Loads `ks` for `r` (pin, then release), then finishes it.
fn load_and_finish<P: PrimaryBackend>(m: &Manager<P>, r: RequestId, ks: &[Key]) {
    let mut slots = Vec::new();
    m.prepare_load(r, ks, &mut slots).unwrap();
    m.complete_load(r, ks).unwrap();
    m.request_finished(r).unwrap();
}

/// The per-request counters of `s` and of tier 1, in one tuple:
/// (finished, asked, served primary, served by tier 1, recomputed, steps).
fn counters<P: PrimaryBackend>(m: &Manager<P>) -> (u64, u64, u64, u64, u64, u64) {
    let s = m.manager_stats().unwrap();
    let tier = stat(m, Some(1), "request_blocks_served") as u64;
    (
        s.requests_finished,
        s.request_blocks_asked,
        s.request_blocks_served_primary,
        tier,
        s.request_blocks_recomputed,
        s.request_wait_steps,
    )
}

fn report(name: &str, asked: u64, served: [u64; 2], recomputed: u64, steps: u64) -> Counted {
    Counted {
        name: name.into(),
        asked,
        loaded: served.iter().sum(),
        served: served.to_vec(),
        recomputed,
        steps_waited: steps,
    }
}

/// The line of the Prometheus text `text` for `series`: its value.
fn series(text: &str, series: &str) -> f64 {
    let prefix = format!("{series} ");
    let line = text
        .lines()
        .find(|l| l.starts_with(&prefix))
        .unwrap_or_else(|| panic!("no series {series} in\n{text}"));
    line[prefix.len()..].parse().unwrap()
}

#[test]
fn served_from_the_primary_tier_promoted_and_recomputed_blocks_are_counted_per_request() {
    let (m, tier, reports) = manager(ManagerOptions::default());
    write(&m, "writer", &keys(0..4));
    tier.lock().stored.extend(keys(10..13));

    // All four blocks in the primary tier.
    let a = start(&m, "primary");
    let answer = m.lookup_prefix(a, &keys(0..4)).unwrap();
    assert_eq!((answer.hits, answer.end), (4, 4));
    load_and_finish(&m, a, &keys(0..4));

    // Two in the primary tier, three promoted from the tier: one step of
    // waiting, then all five are loaded.
    let b = start(&m, "promoted");
    let ks: Vec<Key> = [k(0), k(1), k(10), k(11), k(12)].into();
    let answer = m.lookup_prefix(b, &ks).unwrap();
    assert_eq!((answer.hits, answer.pending, answer.end), (2, 3, 5));
    m.schedule_end().unwrap();
    let answer = m.lookup_prefix(b, &ks).unwrap();
    assert_eq!((answer.hits, answer.pending, answer.end), (5, 0, 5));
    load_and_finish(&m, b, &ks);

    // Two ready, two no tier has: the engine computes those.
    let c = start(&m, "recomputed");
    let ks: Vec<Key> = [k(2), k(3), k(20), k(21)].into();
    let answer = m.lookup_prefix(c, &ks).unwrap();
    assert_eq!(
        (answer.hits, answer.end, answer.reason),
        (2, 2, Some(MissReason::Absent))
    );
    load_and_finish(&m, c, &keys(2..4));

    // writer, primary, promoted, recomputed.
    assert_eq!(
        counters(&m),
        (4, 4 + 5 + 4, 4 + 2 + 2, 3, 2, 1),
        "{:?}",
        m.manager_stats()
    );
    assert_eq!(
        *reports.lock(),
        [
            report("writer", 0, [0, 0], 0, 0),
            report("primary", 4, [4, 0], 0, 0),
            report("promoted", 5, [2, 3], 0, 1),
            report("recomputed", 4, [2, 0], 2, 0),
        ]
    );
    let text = m.prometheus_text().unwrap();
    for (s, v) in [
        ("kvtier_manager_requests_finished_total", 4.0),
        ("kvtier_manager_request_blocks_asked_total", 13.0),
        (
            "kvtier_manager_request_blocks_served_total{tier=\"primary\"}",
            8.0,
        ),
        (
            "kvtier_manager_request_blocks_served_total{tier=\"slow\"}",
            3.0,
        ),
        ("kvtier_manager_request_blocks_recomputed_total", 2.0),
        ("kvtier_manager_request_wait_steps_total", 1.0),
        ("kvtier_manager_wait_timeouts_total", 0.0),
        (
            "kvtier_manager_lookup_misses_total{reason=\"timed_out\"}",
            0.0,
        ),
    ] {
        assert_eq!(series(&text, s), v, "{s}");
    }
}

#[test]
fn a_request_waiting_past_the_bound_recomputes_what_did_not_arrive() {
    let opts = ManagerOptions {
        progress: ProgressOptions {
            wait_steps: 2,
            ..Default::default()
        },
        ..Default::default()
    };
    let (m, tier, reports) = manager(opts);
    {
        let mut s = tier.lock();
        s.auto_finish = false;
        s.stored.extend(keys(30..32));
    }
    let d = start(&m, "timed-out");
    let answer = m.lookup_prefix(d, &keys(30..32)).unwrap();
    assert_eq!((answer.hits, answer.pending), (0, 2));
    m.schedule_end().unwrap();
    // Still on its way (the tier never finishes its loads).
    let answer = m.lookup_prefix(d, &keys(30..32)).unwrap();
    assert_eq!((answer.hits, answer.pending), (0, 2));
    m.schedule_end().unwrap();
    assert_eq!(m.manager_stats().unwrap().wait_timeouts, 1);
    let answer = m.lookup_prefix(d, &keys(30..32)).unwrap();
    assert_eq!(
        (answer.hits, answer.stop, answer.reason),
        (0, LookupResult::Miss, Some(MissReason::TimedOut))
    );
    m.request_finished(d).unwrap();
    let s = m.manager_stats().unwrap();
    assert_eq!((s.wait_timeouts, s.misses_timed_out), (1, 1));
    assert_eq!(counters(&m), (1, 2, 0, 0, 2, 2));
    assert_eq!(*reports.lock(), [report("timed-out", 2, [0, 0], 2, 2)]);
    let text = m.prometheus_text().unwrap();
    assert_eq!(series(&text, "kvtier_manager_wait_timeouts_total"), 1.0);
    assert_eq!(
        series(
            &text,
            "kvtier_manager_lookup_misses_total{reason=\"timed_out\"}"
        ),
        1.0
    );
    tier.lock().finish_all(true);
    m.schedule_end().unwrap();
}

#[test]
fn a_request_looking_up_ten_times_while_it_waits_is_counted_once() {
    let (m, tier, reports) = manager(ManagerOptions::default());
    write(&m, "writer", &keys(0..2));
    {
        let mut s = tier.lock();
        s.auto_finish = false;
        s.stored.extend(keys(40..43));
    }
    let before = m.manager_stats().unwrap();
    let r = start(&m, "patient");
    let ks: Vec<Key> = [k(0), k(1), k(40), k(41), k(42)].into();
    for _ in 0..10 {
        let answer = m.lookup_prefix(r, &ks).unwrap();
        assert_eq!((answer.hits, answer.pending), (2, 3));
        m.schedule_end().unwrap();
    }
    tier.lock().finish_all(true);
    let answer = m.lookup_prefix(r, &ks).unwrap();
    assert_eq!((answer.hits, answer.pending), (5, 0));
    load_and_finish(&m, r, &ks);
    let after = m.manager_stats().unwrap();
    // The lookup counters count every lookup: eleven of the two blocks
    // already in the primary tier, and the three promoted at the last.
    assert_eq!(after.primary_hits - before.primary_hits, 11 * 2 + 3);
    // The per-request counters count the request once.
    assert_eq!(delta(&before, &after), (1, 5, 2, 0, 10), "{after:?}");
    assert_eq!(stat(&m, Some(1), "request_blocks_served"), 3.0);
    assert_eq!(
        reports.lock().last().cloned(),
        Some(report("patient", 5, [2, 3], 0, 10))
    );
}

#[test]
fn per_key_lookups_ask_for_the_keys_of_one_step_together() {
    let (m, _, reports) = manager(ManagerOptions::default());
    write(&m, "writer", &keys(0..3));
    let r = start(&m, "per-key");
    // Three keys one by one in a step, then the first two again in the
    // next: it asked for three.
    for key in keys(0..3) {
        assert_eq!(m.lookup(r, &key).unwrap(), LookupResult::Hit);
    }
    m.schedule_end().unwrap();
    let answer = m.lookup_per_key(r, &keys(0..2)).unwrap();
    assert_eq!(answer.hits, 2);
    load_and_finish(&m, r, &keys(0..2));
    assert_eq!(counters(&m), (2, 3, 2, 0, 1, 0));
    assert_eq!(
        reports.lock().last().cloned(),
        Some(report("per-key", 3, [2, 0], 1, 0))
    );
}

/// Differences of the manager's per-request counters:
/// (finished, asked, served primary, recomputed, steps).
fn delta(before: &ManagerStats, after: &ManagerStats) -> (u64, u64, u64, u64, u64) {
    (
        after.requests_finished - before.requests_finished,
        after.request_blocks_asked - before.request_blocks_asked,
        after.request_blocks_served_primary - before.request_blocks_served_primary,
        after.request_blocks_recomputed - before.request_blocks_recomputed,
        after.request_wait_steps - before.request_wait_steps,
    )
}

// --- C -------------------------------------------------------------------

#[path = "support/ffi_calls.rs"]
mod ffi_calls;

use std::ffi::c_void;
use std::ptr::{null, null_mut};

use ffi_calls::{begin, ck, last_error, lookup_keys, store_with, succeeded};
use kvtier::dialect::{KVTIER_LOCALITY_ANY, KVTIER_LOOKUP_HIT, KVTIER_LOOKUP_MISS};
use kvtier::kvtier_key;
use kvtier::kvtier_status as S;
use kvtier::manager::*;
use kvtier::observe::*;
use kvtier::report::*;
use kvtier::requests::*;
use kvtier::tier::*;

/// The C tier: has the keys starting with `t`, keeps the ids of its jobs
/// for the test to finish.
unsafe extern "C" fn c_lookup(
    _: *mut c_void,
    key: *const kvtier_key,
    _: *const kvtier_request,
    answer: *mut kvtier::dialect::kvtier_lookup_result,
) -> i32 {
    let first = unsafe { *(*key).data };
    unsafe {
        *answer = if first == b't' {
            KVTIER_LOOKUP_HIT
        } else {
            KVTIER_LOOKUP_MISS
        }
    };
    0
}

unsafe extern "C" fn c_submit(ud: *mut c_void, job: *const kvtier_job) -> i32 {
    let jobs = unsafe { &*(ud as *const Mutex<Vec<u64>>) };
    jobs.lock().push(unsafe { (*job).id });
    0
}

unsafe extern "C" fn c_counted(ud: *mut c_void, r: *const kvtier_request_report) {
    let out = unsafe { &*(ud as *const Mutex<Vec<Counted>>) };
    let r = unsafe { &*r };
    let name = unsafe { std::ffi::CStr::from_ptr(r.name) };
    out.lock().push(Counted {
        name: name.to_str().unwrap().to_string(),
        asked: r.asked,
        loaded: r.loaded,
        served: unsafe { std::slice::from_raw_parts(r.tier_served, r.tier_count) }.to_vec(),
        recomputed: r.recomputed,
        steps_waited: r.steps_waited,
    });
}

/// Finishes every job the C tier holds.
fn finish_jobs(m: *const kvtier_manager, jobs: &Mutex<Vec<u64>>) {
    for id in std::mem::take(&mut *jobs.lock()) {
        let r = succeeded(id);
        assert_eq!(
            unsafe { kvtier_manager_complete_job(m, 1, &r) },
            S::Ok,
            "{}",
            last_error()
        );
    }
}

#[test]
fn c_callers_read_the_per_request_counters_in_the_stats_the_tier_stats_and_the_report() {
    let mut o = kvtier_manager_options_default();
    o.capacity = 8;
    let mut m = null_mut();
    assert_eq!(unsafe { kvtier_manager_new(&o, null(), &mut m) }, S::Ok);
    let jobs: Box<Mutex<Vec<u64>>> = Box::default();
    let vt = kvtier_tier_vtable {
        user_data: &*jobs as *const Mutex<Vec<u64>> as *mut c_void,
        name: c"ctier".as_ptr(),
        medium: kvtier::dialect::KVTIER_MEDIUM_ANY,
        locality: KVTIER_LOCALITY_ANY,
        lookup: Some(c_lookup),
        submit_store: Some(c_submit),
        submit_load: Some(c_submit),
        ..kvtier_tier_vtable_default()
    };
    let mut index = 0;
    assert_eq!(
        unsafe { kvtier_manager_add_tier(m, &vt, null(), &mut index) },
        S::Ok
    );
    let got: Box<Mutex<Vec<Counted>>> = Box::default();
    let ud = &*got as *const Mutex<Vec<Counted>> as *mut c_void;
    assert_eq!(
        unsafe { kvtier_manager_set_request_report_callback(m, Some(c_counted), ud) },
        S::Ok
    );
    // A writer puts p0 into the primary tier.
    let w = begin(m, c"writer");
    assert_eq!(store_with(m, w, &[b"p0"], |_, _| {}), 1);
    assert_eq!(unsafe { kvtier_manager_request_finished(m, w) }, S::Ok);
    // p0 ready, t1 and t2 promoted from the C tier, x3 nowhere.
    let h = begin(m, c"reader");
    let asked: [&[u8]; 4] = [b"p0", b"t1", b"t2", b"x3"];
    let a = lookup_keys(m, h, &asked);
    assert_eq!((a.hits, a.pending, a.end), (1, 2, 3));
    assert_eq!(unsafe { kvtier_manager_schedule_end(m) }, S::Ok);
    finish_jobs(m, &jobs);
    let a = lookup_keys(m, h, &asked);
    assert_eq!((a.hits, a.pending, a.end), (3, 0, 3));
    let load: Vec<kvtier_key> = asked[..3].iter().map(|k| ck(k)).collect();
    let mut slots = [0u32; 3];
    assert_eq!(
        unsafe { kvtier_manager_prepare_load(m, h, load.as_ptr(), 3, slots.as_mut_ptr()) },
        S::Ok,
        "{}",
        last_error()
    );
    assert_eq!(
        unsafe { kvtier_manager_complete_load(m, h, load.as_ptr(), 3) },
        S::Ok
    );
    assert_eq!(unsafe { kvtier_manager_request_finished(m, h) }, S::Ok);
    assert_eq!(
        *got.lock(),
        [
            report("writer", 0, [0, 0], 0, 0),
            report("reader", 4, [1, 2], 1, 1),
        ]
    );

    let mut stats = kvtier_manager_stats {
        struct_size: std::mem::size_of::<kvtier_manager_stats>(),
        ..Default::default()
    };
    assert_eq!(unsafe { kvtier_manager_read_stats(m, &mut stats) }, S::Ok);
    assert_eq!(
        (
            stats.requests_finished,
            stats.request_blocks_asked,
            stats.request_blocks_served_primary,
            stats.request_blocks_recomputed,
            stats.request_wait_steps,
            stats.wait_timeouts,
            stats.misses_timed_out,
        ),
        (2, 4, 1, 1, 1, 0, 0)
    );
    // A caller built against the 0.2 layout gets its fields, nothing past them.
    let old = std::mem::offset_of!(kvtier_manager_stats, misses_timed_out);
    let mut short = kvtier_manager_stats {
        struct_size: old,
        requests_finished: 77,
        ..Default::default()
    };
    assert_eq!(unsafe { kvtier_manager_read_stats(m, &mut short) }, S::Ok);
    assert_eq!((short.struct_size, short.lookups), (old, stats.lookups));
    assert_eq!(short.requests_finished, 77);

    let mut n = 0;
    assert_eq!(
        unsafe { kvtier_manager_read_tier_stats(m, 1, null_mut(), 0, &mut n) },
        S::BufferTooSmall
    );
    let mut buf = vec![unsafe { std::mem::zeroed::<kvtier_tier_stat>() }; n];
    assert_eq!(
        unsafe { kvtier_manager_read_tier_stats(m, 1, buf.as_mut_ptr(), n, &mut n) },
        S::Ok
    );
    let served = buf
        .iter()
        .find(|s| unsafe { std::ffi::CStr::from_ptr(s.name.as_ptr()) } == c"request_blocks_served")
        .expect("request_blocks_served among the tier's statistics");
    assert_eq!((served.kind, served.value), (KVTIER_STAT_COUNTER, 2.0));

    finish_jobs(m, &jobs);
    unsafe { kvtier_manager_free(m) };
}

#[test]
fn a_wait_cut_short_by_a_reset_still_counts_its_steps() {
    let (m, s, reports) = manager(ManagerOptions::default());
    s.lock().auto_finish = false;
    s.lock().stored.extend(keys(0..2));
    let r = start(&m, "r");
    assert_eq!(m.lookup_prefix(r, &keys(0..2)).unwrap().pending, 2);
    m.schedule_end().unwrap();
    m.schedule_end().unwrap();
    s.lock().finish_on_drain = true;
    m.reset_cache().unwrap();
    m.reset_flushed().unwrap();
    m.schedule_end().unwrap();
    m.request_finished(r).unwrap();
    assert_eq!(m.manager_stats().unwrap().request_wait_steps, 2);
    assert_eq!(reports.lock()[0].steps_waited, 2);
}

#[test]
fn a_request_that_loads_its_blocks_again_is_served_each_block_once() {
    let (m, _s, reports) = manager(ManagerOptions::default());
    write(&m, "w", &keys(0..2));
    m.schedule_end().unwrap();
    let r = start(&m, "r");
    assert_eq!(m.lookup_prefix(r, &keys(0..2)).unwrap().hits, 2);
    for _ in 0..2 {
        let mut slots = Vec::new();
        m.prepare_load(r, &keys(0..2), &mut slots).unwrap();
        m.complete_load(r, &keys(0..2)).unwrap();
    }
    m.request_finished(r).unwrap();
    let s = m.manager_stats().unwrap();
    assert_eq!(
        (
            s.request_blocks_asked,
            s.request_blocks_served_primary,
            s.request_blocks_recomputed
        ),
        (2, 2, 0),
        "w looked nothing up; r asked for 2 and was served 2, once"
    );
    let r = reports.lock().last().cloned().unwrap();
    assert_eq!((r.asked, r.loaded, r.served[0], r.recomputed), (2, 4, 2, 0));
}

#[test]
fn steps_waited_count_from_the_step_the_wait_began() {
    let (m, s, reports) = manager(ManagerOptions::default());
    s.lock().auto_finish = false;
    s.lock().stored.extend(keys(0..2));
    for _ in 0..5 {
        m.schedule_end().unwrap();
    }
    let r = start(&m, "r");
    assert_eq!(m.lookup_prefix(r, &keys(0..2)).unwrap().pending, 2);
    for _ in 0..3 {
        m.schedule_end().unwrap();
    }
    s.lock().finish_all(true);
    assert_eq!(m.lookup_prefix(r, &keys(0..2)).unwrap().hits, 2);
    load_and_finish(&m, r, &keys(0..2));
    assert_eq!(m.manager_stats().unwrap().request_wait_steps, 3);
    assert_eq!(reports.lock().last().unwrap().steps_waited, 3);
}
