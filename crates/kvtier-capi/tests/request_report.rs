//! Per-request reports: the listener (C: the callback) hears once of each
//! request the manager lets go, with what happened to it.

use kvtier_testkit::common;

use std::ffi::{CStr, c_void};
use std::ptr::{null, null_mut};
use std::sync::Arc;
use std::time::Duration;

use common::*;
use kvtier_core::primary::StorePlan;
use kvtier_core::request::RequestId;
use kvtier_core::tiering::PrimaryBackend;
use kvtier_core::tiering::{
    JobResult, LookupResult, Manager, ManagerOptions, RequestParams, RequestReport,
};
use parking_lot::Mutex;

/// A report, owned.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Owned {
    id: u64,
    name: String,
    lookups: u64,
    tier_hits: Vec<u64>,
    loaded: u64,
    stored: u64,
    promoted: u64,
    failed: u64,
    wait: Duration,
}

fn owned(r: &RequestReport<'_>) -> Owned {
    Owned {
        id: r.id.0,
        name: r.name.to_string(),
        lookups: r.lookups,
        tier_hits: r.tier_hits.to_vec(),
        loaded: r.loaded,
        stored: r.stored,
        promoted: r.promoted,
        failed: r.failed,
        wait: r.promotion_wait,
    }
}

fn collect<P: PrimaryBackend>(m: &Manager<P>) {
    m.schedule_end().unwrap();
    m.schedule_end().unwrap();
}

fn start<P: PrimaryBackend>(m: &Manager<P>, name: &str) -> RequestId {
    m.request_begin(name, RequestParams::default()).unwrap().id
}

/// A manager over 8 slots with two test tiers ("a" and "b", jobs held
/// until finished by hand) and a listener keeping every report.
type Scripts = [Arc<Mutex<Script>>; 2];
type Reports = Arc<Mutex<Vec<Owned>>>;

fn manager() -> (Manager<impl PrimaryBackend>, Scripts, Reports) {
    let m = model_manager(8, ManagerOptions::default());
    let (a, sa) = TestTier::new("a");
    let (b, sb) = TestTier::new("b");
    sa.lock().auto_finish = false;
    sb.lock().auto_finish = false;
    m.add_tier(rust(a)).unwrap();
    m.add_tier(rust(b)).unwrap();
    let reports = Arc::new(Mutex::new(Vec::new()));
    let r = reports.clone();
    m.set_request_report_listener(Some(Box::new(move |report: &RequestReport<'_>| {
        r.lock().push(owned(report))
    })))
    .unwrap();
    (m.into_manager(), [sa, sb], reports)
}

#[test]
fn a_finished_request_is_reported_once_with_what_happened_to_it() {
    let (m, [a, b], reports) = manager();
    let r = start(&m, "chat-1");
    // Stores: 3 keys made ready, then 2 whose write fails.
    let mut plan = StorePlan::default();
    m.prepare_store(r, &keys(0..3), &mut plan).unwrap();
    m.complete_store(r, &plan.to_store, true).unwrap();
    m.prepare_store(r, &keys(3..5), &mut plan).unwrap();
    m.complete_store(r, &plan.to_store, false).unwrap();
    a.lock().finish_all(true);
    b.lock().finish_all(true);
    collect(&m);
    // Lookups: 3 primary hits then key 20, which tier b has: a promotion
    // (4 keys looked at); later the same prefix finds it, and key 21 is
    // missed everywhere (5 keys, 4 hits).
    b.lock().stored.insert(k(20));
    let before = std::time::Instant::now();
    let answer = m.lookup_prefix(r, &[k(0), k(1), k(2), k(20)]).unwrap();
    assert_eq!((answer.hits, answer.stop), (3, LookupResult::Retry));
    m.schedule_end().unwrap();
    std::thread::sleep(Duration::from_millis(20));
    {
        let mut s = b.lock();
        let held = std::mem::take(&mut s.held);
        for job in held {
            s.ready.push(JobResult::new(job.id, true));
        }
    }
    collect(&m);
    let answer = m
        .lookup_prefix(r, &[k(0), k(1), k(2), k(20), k(21)])
        .unwrap();
    assert_eq!((answer.hits, answer.stop), (4, LookupResult::Miss));
    // A promotion from tier a that fails.
    a.lock().stored.insert(k(30));
    assert_eq!(m.lookup(r, &k(30)).unwrap(), LookupResult::Retry);
    m.schedule_end().unwrap();
    a.lock().finish_all(false);
    collect(&m);
    // Loads to the GPU of 2 keys.
    let mut slots = Vec::new();
    m.prepare_load(r, &keys(0..2), &mut slots).unwrap();
    m.complete_load(r, &keys(0..2)).unwrap();
    assert!(
        reports.lock().is_empty(),
        "nothing reported before the finish"
    );
    m.request_finished(r).unwrap();
    let span = before.elapsed();
    let got = reports.lock().clone();
    assert_eq!(got.len(), 1, "{got:?}");
    let g = &got[0];
    assert_eq!(
        (g.id, g.name.as_str(), g.lookups, g.tier_hits.as_slice()),
        (r.0, "chat-1", 4 + 5 + 1, &[3 + 4, 1, 1][..])
    );
    assert_eq!((g.loaded, g.stored, g.promoted, g.failed), (2, 3, 1, 2 + 1));
    // The waits lie within the lookups that started them and the finish,
    // and include the 20 ms sleep: no wall-clock guess at the rest.
    assert!(
        g.wait >= Duration::from_millis(20) && g.wait <= span,
        "waited {:?} within {span:?}",
        g.wait
    );
    // Once: nothing more for it, and a second request is a second report.
    let r2 = start(&m, "chat-2");
    assert_eq!(m.lookup(r2, &k(0)).unwrap(), LookupResult::Hit);
    m.request_finished(r2).unwrap();
    collect(&m);
    let got = reports.lock().clone();
    assert_eq!(got.len(), 2, "{got:?}");
    assert_eq!(
        (
            got[1].name.as_str(),
            got[1].lookups,
            got[1].tier_hits.as_slice()
        ),
        ("chat-2", 1, &[1, 0, 0][..])
    );
}

#[test]
fn a_request_with_a_store_in_flight_is_reported_when_the_store_completes() {
    let (m, _, reports) = manager();
    let r = start(&m, "r");
    let mut plan = StorePlan::default();
    m.prepare_store(r, &keys(0..2), &mut plan).unwrap();
    m.request_finished(r).unwrap();
    assert!(reports.lock().is_empty());
    m.complete_store(r, &plan.to_store, true).unwrap();
    let got = reports.lock().clone();
    assert_eq!(got.len(), 1);
    assert_eq!(got[0].stored, 2);
    // Removed: no more reports.
    m.set_request_report_listener(None).unwrap();
    let r = start(&m, "s");
    m.request_finished(r).unwrap();
    assert_eq!(reports.lock().len(), 1);
}

#[test]
fn the_listener_cannot_call_the_manager() {
    let m = model_manager(4, ManagerOptions::default());
    let m = Arc::new(m);
    let seen = Arc::new(Mutex::new(None));
    let (weak, s) = (Arc::downgrade(&m), seen.clone());
    m.set_request_report_listener(Some(Box::new(move |_: &RequestReport<'_>| {
        let m = weak.upgrade().unwrap();
        *s.lock() = Some(m.has_pending_work().map_err(|e| e.to_string()));
    })))
    .unwrap();
    let r = start(&m, "r");
    m.request_finished(r).unwrap();
    let got = seen.lock().clone().expect("reported");
    assert!(
        got.as_ref().is_err_and(|e| e.contains("inside a callback")),
        "{got:?}"
    );
}

// --- C -------------------------------------------------------------------

use kvtier::kvtier_status as S;
use kvtier::manager::*;
use kvtier::report::*;
use kvtier::requests::*;

unsafe extern "C" fn c_report(user_data: *mut c_void, r: *const kvtier_request_report) {
    let out = unsafe { &*(user_data as *const Mutex<Vec<Owned>>) };
    let r = unsafe { &*r };
    assert_eq!(r.struct_size, std::mem::size_of::<kvtier_request_report>());
    let name = unsafe { CStr::from_ptr(r.name) }
        .to_str()
        .unwrap()
        .to_string();
    let hits = unsafe { std::slice::from_raw_parts(r.tier_hits, r.tier_count) }.to_vec();
    out.lock().push(Owned {
        id: r.request,
        name,
        lookups: r.lookups,
        tier_hits: hits,
        loaded: r.loaded,
        stored: r.stored,
        promoted: r.promoted,
        failed: r.failed,
        wait: Duration::from_nanos(r.promotion_wait_ns),
    });
}

#[test]
fn c_callers_get_the_report_with_the_name_and_the_hits_per_tier() {
    let mut o = kvtier_manager_options_default();
    o.capacity = 8;
    let mut m = null_mut();
    assert_eq!(unsafe { kvtier_manager_new(&o, null(), &mut m) }, S::Ok);
    let got: Box<Mutex<Vec<Owned>>> = Box::default();
    let ud = &*got as *const Mutex<Vec<Owned>> as *mut c_void;
    assert_eq!(
        unsafe { kvtier_manager_set_request_report_callback(m, Some(c_report), ud) },
        S::Ok
    );
    let mut h = 0;
    assert_eq!(
        unsafe {
            kvtier_manager_request_begin(m, c"c-request".as_ptr(), null(), &mut h, null_mut())
        },
        S::Ok
    );
    let key = b"some-key";
    let ks = [kvtier::kvtier_key {
        data: key.as_ptr(),
        len: key.len(),
    }];
    let mut answer = kvtier::dialect::kvtier_lookup_answer {
        hits: 9,
        stop: 9,
        reason: 9,
        pending: 9,
        end: 9,
    };
    assert_eq!(
        unsafe { kvtier_manager_lookup(m, h, ks.as_ptr(), 1, &mut answer) },
        S::Ok
    );
    assert_eq!(unsafe { kvtier_manager_request_finished(m, h) }, S::Ok);
    let reports = got.lock().clone();
    assert_eq!(reports.len(), 1, "{reports:?}");
    assert_eq!(
        (reports[0].id, reports[0].name.as_str(), reports[0].lookups),
        (h, "c-request", 1)
    );
    assert_eq!(reports[0].tier_hits, [0]);
    unsafe { kvtier_manager_free(m) };
}
