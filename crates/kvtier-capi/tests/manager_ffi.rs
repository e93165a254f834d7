//! The manager through its C ABI, with a secondary tier written as
//! `extern "C"` functions behind a `kvtier_tier_vtable`.

#[path = "support/ffi_calls.rs"]
mod ffi_calls;

use std::collections::{HashMap, HashSet};
use std::ffi::{CStr, c_char, c_void};
use std::ptr::{null, null_mut};
use std::sync::atomic::{AtomicUsize, Ordering};

use ffi_calls::{
    PlanBuf, ck, last_error, lookup, lookup_keys, lookup_keys_per_key, store_with, succeeded,
};
use kvtier::dialect::*;
use kvtier::events::*;
use kvtier::kvtier_key;
use kvtier::kvtier_status as S;
use kvtier::manager::*;
use kvtier::observe::*;
use kvtier::requests::*;
use kvtier::tier::*;

/// One job as the C tier recorded it: id, direction, keys, slots, request id, params, user data.
type SeenJob = (
    u64,
    i32,
    Vec<Vec<u8>>,
    Vec<u32>,
    String,
    Vec<(String, String)>,
    usize,
);

/// The C tier's state behind `user_data`.
#[derive(Default)]
struct Mem {
    stored: HashSet<Vec<u8>>,
    finished: Vec<kvtier_job_result>,
    jobs: Vec<SeenJob>,
    finished_requests: Vec<String>,
    hold: bool,
    held: Vec<(u64, i32, Vec<Vec<u8>>)>,
    fail_submit: bool,
    bad_status: Option<i32>,
    request_level: bool,
    reenter: Option<*mut kvtier_manager>,
    reenter_status: Option<i32>,
    fail_shutdown: bool,
    destroyed: Option<&'static AtomicUsize>,
    /// The keys of each touch, and the request that made it.
    touched: Vec<(Vec<Vec<u8>>, String)>,
}

unsafe fn mem<'a>(ud: *mut c_void) -> &'a mut Mem {
    unsafe { &mut *(ud as *mut Mem) }
}

unsafe fn key_bytes(k: &kvtier_key) -> Vec<u8> {
    unsafe { std::slice::from_raw_parts(k.data, k.len) }.to_vec()
}

unsafe fn req_info(r: *const kvtier_request) -> (String, Vec<(String, String)>, usize) {
    let r = unsafe { &*r };
    let id = unsafe { CStr::from_ptr(r.id) }
        .to_str()
        .unwrap()
        .to_string();
    assert_eq!(id.len(), r.id_len);
    let params = (0..r.params_len)
        .map(|i| {
            let p = unsafe { &*r.params.add(i) };
            unsafe {
                (
                    CStr::from_ptr(p.key).to_str().unwrap().to_string(),
                    CStr::from_ptr(p.value).to_str().unwrap().to_string(),
                )
            }
        })
        .collect();
    (id, params, r.user_data as usize)
}

unsafe extern "C" fn c_lookup(
    ud: *mut c_void,
    key: *const kvtier_key,
    _r: *const kvtier_request,
    answer: *mut kvtier_lookup_result,
) -> i32 {
    let m = unsafe { mem(ud) };
    if let Some(mgr) = m.reenter.take() {
        let mut out = kvtier_lookup_answer {
            hits: 0,
            stop: 0,
            reason: 0,
            pending: 0,
            end: 0,
        };
        // The handle of the request that is looking up (the first).
        let st = unsafe { kvtier_manager_lookup(mgr, 1, key, 1, &mut out) };
        m.reenter_status = Some(st as i32);
        // the thread-safe completion call works from inside a callback
        let res = succeeded(4242);
        assert_eq!(unsafe { kvtier_manager_complete_job(mgr, 1, &res) }, S::Ok);
    }
    if let Some(bad) = m.bad_status {
        return bad;
    }
    let k = unsafe { key_bytes(&*key) };
    unsafe {
        *answer = if m.stored.contains(&k) {
            KVTIER_LOOKUP_HIT
        } else {
            KVTIER_LOOKUP_MISS
        }
    };
    0
}

unsafe extern "C" fn c_submit(ud: *mut c_void, job: *const kvtier_job) -> i32 {
    let m = unsafe { mem(ud) };
    let j = unsafe { &*job };
    let keys: Vec<Vec<u8>> = (0..j.len)
        .map(|i| unsafe { key_bytes(&*j.keys.add(i)) })
        .collect();
    let slots = unsafe { std::slice::from_raw_parts(j.slots, j.len) }.to_vec();
    let (id, params, ud2) = unsafe { req_info(j.request) };
    m.jobs
        .push((j.id, j.direction, keys.clone(), slots, id, params, ud2));
    if m.fail_submit {
        return S::Io as i32;
    }
    if m.hold {
        m.held.push((j.id, j.direction, keys));
        return 0;
    }
    if j.direction == KVTIER_JOB_STORE {
        m.stored.extend(keys);
    }
    m.finished.push(kvtier_job_result {
        id: j.id,
        success: true,
        succeeded_keys: null(),
        succeeded_len: 0,
        bytes: 4096 * j.len as u64,
        duration_ns: 1000,
    });
    0
}

unsafe extern "C" fn c_poll(
    ud: *mut c_void,
    out: *mut kvtier_job_result,
    cap: usize,
    written: *mut usize,
) -> i32 {
    let m = unsafe { mem(ud) };
    let n = m.finished.len().min(cap);
    for (i, r) in m.finished.drain(..n).enumerate() {
        unsafe { *out.add(i) = r };
    }
    unsafe { *written = n };
    0
}

unsafe extern "C" fn c_touch(
    ud: *mut c_void,
    keys: *const kvtier_key,
    len: usize,
    r: *const kvtier_request,
) -> i32 {
    let m = unsafe { mem(ud) };
    let keys = (0..len)
        .map(|i| unsafe { key_bytes(&*keys.add(i)) })
        .collect();
    m.touched.push((keys, unsafe { req_info(r) }.0));
    0
}

unsafe extern "C" fn c_new_request(
    ud: *mut c_void,
    _r: *const kvtier_request,
    policy: *mut kvtier_offload_policy,
) -> i32 {
    let m = unsafe { mem(ud) };
    unsafe {
        *policy = if m.request_level {
            KVTIER_OFFLOAD_REQUEST_LEVEL
        } else {
            KVTIER_OFFLOAD_BLOCK_LEVEL
        }
    };
    0
}

unsafe extern "C" fn c_finished(ud: *mut c_void, r: *const kvtier_request) -> i32 {
    let m = unsafe { mem(ud) };
    m.finished_requests.push(unsafe { req_info(r) }.0);
    0
}

unsafe extern "C" fn c_pending(ud: *mut c_void, out: *mut bool) -> i32 {
    let m = unsafe { mem(ud) };
    unsafe { *out = !m.finished.is_empty() || !m.held.is_empty() };
    0
}

unsafe extern "C" fn c_stats(
    ud: *mut c_void,
    out: *mut kvtier_tier_stat,
    cap: usize,
    written: *mut usize,
) -> i32 {
    let m = unsafe { mem(ud) };
    assert!(cap >= 1);
    let mut s = kvtier_tier_stat {
        name: [0; 48],
        kind: KVTIER_STAT_GAUGE,
        value: m.stored.len() as f64,
    };
    for (d, c) in s.name.iter_mut().zip(b"stored_keys") {
        *d = *c as c_char;
    }
    unsafe {
        *out = s;
        *written = 1;
    }
    0
}

unsafe extern "C" fn c_shutdown(ud: *mut c_void) -> i32 {
    if unsafe { mem(ud) }.fail_shutdown {
        S::Io as i32
    } else {
        0
    }
}

unsafe extern "C" fn c_destroy(ud: *mut c_void) {
    let m = unsafe { Box::from_raw(ud as *mut Mem) };
    if let Some(c) = m.destroyed {
        c.fetch_add(1, Ordering::SeqCst);
    }
}

fn vtable(m: Box<Mem>) -> kvtier_tier_vtable {
    kvtier_tier_vtable {
        struct_size: std::mem::size_of::<kvtier_tier_vtable>(),
        user_data: Box::into_raw(m) as *mut c_void,
        name: c"mem".as_ptr(),
        medium: KVTIER_MEDIUM_CPU,
        locality: KVTIER_LOCALITY_LOCAL,
        lookup: Some(c_lookup),
        submit_store: Some(c_submit),
        submit_load: Some(c_submit),
        poll_finished: Some(c_poll),
        touch: None,
        on_new_request: Some(c_new_request),
        on_request_finished: Some(c_finished),
        on_schedule_end: None,
        has_pending_work: Some(c_pending),
        drain: None,
        stats: Some(c_stats),
        shutdown: Some(c_shutdown),
        destroy: Some(c_destroy),
        take_events: None,
    }
}

fn manager(capacity: u32) -> *mut kvtier_manager {
    let mut o = kvtier_manager_options_default();
    o.capacity = capacity;
    o.event_capacity = 1024;
    let mut m = null_mut();
    assert_eq!(
        unsafe { kvtier_manager_new(&o, std::ptr::null(), &mut m) },
        S::Ok
    );
    m
}

fn key(i: u32) -> [u8; 4] {
    i.to_be_bytes()
}

/// Starts request `name`: its handle and offload policy.
fn start_policy(m: *mut kvtier_manager, name: &CStr) -> (kvtier_request_handle, i32) {
    let (mut h, mut policy) = (0, -1);
    assert_eq!(
        unsafe { kvtier_manager_request_begin(m, name.as_ptr(), null(), &mut h, &mut policy) },
        S::Ok,
        "{}",
        last_error()
    );
    (h, policy)
}

/// Starts request `name`; its handle.
fn start(m: *mut kvtier_manager, name: &CStr) -> kvtier_request_handle {
    start_policy(m, name).0
}

/// prepare_store + complete_store; returns the stored positions.
fn store(m: *mut kvtier_manager, req: kvtier_request_handle, ks: &[[u8; 4]]) -> usize {
    store_with(m, req, ks, |_, _| {})
}

/// The manager's own statistics.
fn own_stats(m: *mut kvtier_manager) -> kvtier_manager_stats {
    let mut s = kvtier_manager_stats {
        struct_size: std::mem::size_of::<kvtier_manager_stats>(),
        ..Default::default()
    };
    assert_eq!(unsafe { kvtier_manager_read_stats(m, &mut s) }, S::Ok);
    s
}

/// The statistics of the primary tier (0) and each secondary tier, by
/// (tier, name).
fn stats(m: *mut kvtier_manager) -> HashMap<(usize, String), f64> {
    let mut out = HashMap::new();
    for tier in 0.. {
        let mut need = 0;
        let st = unsafe { kvtier_manager_read_tier_stats(m, tier, null_mut(), 0, &mut need) };
        if st == S::InvalidArgument {
            break;
        }
        assert_eq!(st, S::BufferTooSmall);
        let mut buf = vec![unsafe { std::mem::zeroed::<kvtier_tier_stat>() }; need];
        let mut got = 0;
        assert_eq!(
            unsafe { kvtier_manager_read_tier_stats(m, tier, buf.as_mut_ptr(), need, &mut got) },
            S::Ok
        );
        for s in &buf[..got] {
            let name = unsafe { CStr::from_ptr(s.name.as_ptr()) }
                .to_string_lossy()
                .into_owned();
            out.insert((tier, name), s.value);
        }
    }
    out
}

fn take_error(m: *mut kvtier_manager) -> Option<String> {
    let mut buf = [0 as c_char; 512];
    let mut written = usize::MAX;
    assert_eq!(
        unsafe { kvtier_manager_take_error(m, buf.as_mut_ptr(), buf.len(), &mut written) },
        S::Ok
    );
    (written > 0).then(|| {
        let text = unsafe { CStr::from_ptr(buf.as_ptr()) }
            .to_string_lossy()
            .into_owned();
        assert_eq!(text.len() + 1, written);
        text
    })
}

/// The keys of one event, copied.
fn event_keys(e: &kvtier_event) -> Vec<Vec<u8>> {
    (0..e.len)
        .map(|i| unsafe { key_bytes(&*e.keys.add(i)) })
        .collect()
}

#[test]
fn cascades_promotions_and_request_data_reach_the_c_tier() {
    static DESTROYED: AtomicUsize = AtomicUsize::new(0);
    let m = manager(2);
    let vt = vtable(Box::new(Mem {
        destroyed: Some(&DESTROYED),
        ..Default::default()
    }));
    let mem_ptr = vt.user_data as *mut Mem;
    let mut index = 0;
    assert_eq!(
        unsafe { kvtier_manager_add_tier(m, &vt, null(), &mut index) },
        S::Ok
    );
    assert_eq!(index, 1);
    let (pk, pv) = (c"tenant", c"blue");
    let params = [kvtier_param {
        key: pk.as_ptr(),
        value: pv.as_ptr(),
    }];
    let mut rp = kvtier_request_params_default();
    rp.params = params.as_ptr();
    rp.params_len = 1;
    rp.user_data = 0x1234 as *mut c_void;
    let (mut r, mut policy) = (0, -1);
    assert_eq!(
        unsafe { kvtier_manager_request_begin(m, c"r".as_ptr(), &rp, &mut r, &mut policy) },
        S::Ok
    );
    assert_eq!(policy, KVTIER_OFFLOAD_BLOCK_LEVEL);
    assert_eq!(store(m, r, &[key(1), key(2)]), 2);
    {
        let mem = unsafe { &*mem_ptr };
        let j = &mem.jobs[0];
        assert_eq!((j.1, j.2.len(), j.3.len()), (KVTIER_JOB_STORE, 2, 2));
        assert_eq!(j.4, "r");
        assert_eq!(j.5, vec![("tenant".to_string(), "blue".to_string())]);
        assert_eq!(j.6, 0x1234);
    }
    // collect the cascade, then evict key 1 and 2 by storing two more
    assert_eq!(unsafe { kvtier_manager_schedule_end(m) }, S::Ok);
    assert_eq!(unsafe { kvtier_manager_schedule_end(m) }, S::Ok);
    assert_eq!(store(m, r, &[key(3), key(4)]), 2);
    assert_eq!(unsafe { kvtier_manager_schedule_end(m) }, S::Ok);
    assert_eq!(unsafe { kvtier_manager_schedule_end(m) }, S::Ok);
    // key 1 is gone from the primary tier but in the C tier: promoted back
    assert_eq!(lookup(m, r, &key(1)), KVTIER_LOOKUP_RETRY);
    assert_eq!(lookup(m, r, &key(1)), KVTIER_LOOKUP_HIT_PENDING);
    assert_eq!(unsafe { kvtier_manager_schedule_end(m) }, S::Ok);
    assert_eq!(lookup(m, r, &key(1)), KVTIER_LOOKUP_HIT);
    let mut slot = [u32::MAX];
    let k1 = key(1);
    let kk = [ck(&k1)];
    assert_eq!(
        unsafe { kvtier_manager_prepare_load(m, r, kk.as_ptr(), 1, slot.as_mut_ptr()) },
        S::Ok
    );
    let load_job = unsafe { &*mem_ptr }
        .jobs
        .iter()
        .find(|j| j.1 == KVTIER_JOB_LOAD)
        .unwrap()
        .clone();
    assert_eq!(
        load_job.3[0], slot[0],
        "the load wrote the slot the engine reads"
    );
    assert_eq!(
        unsafe { kvtier_manager_complete_load(m, r, kk.as_ptr(), 1) },
        S::Ok
    );
    // events: primary stored/removed batches, each labelled tier 0
    let (evs, more) = take_events(m, 1);
    assert!(more);
    assert_eq!(
        (evs[0].kind, evs[0].tier, evs[0].medium, evs[0].locality),
        (
            KVTIER_EVENT_STORED,
            0,
            KVTIER_MEDIUM_CPU,
            KVTIER_LOCALITY_LOCAL
        )
    );
    assert_eq!(event_keys(&evs[0]), vec![key(1).to_vec(), key(2).to_vec()]);
    let (evs, more) = take_events(m, 1);
    assert!(more);
    assert_eq!(evs[0].kind, KVTIER_EVENT_REMOVED);
    let st = stats(m);
    assert_eq!(st[&(1, "promotion_jobs".into())], 1.0);
    assert_eq!(st[&(1, "stored_keys".into())], 4.0);
    assert_eq!(st[&(1, "bytes_stored".into())], 4.0 * 4096.0);
    assert_eq!(own_stats(m).lookups, 3);
    assert_eq!(st[&(0, "pinned".into())], 0.0);
    assert_eq!(unsafe { kvtier_manager_request_finished(m, r) }, S::Ok);
    assert_eq!(
        unsafe { &*mem_ptr }.finished_requests,
        vec!["r".to_string()]
    );
    assert_eq!(unsafe { kvtier_manager_shutdown(m) }, S::Ok);
    assert_eq!(unsafe { kvtier_manager_schedule_end(m) }, S::Closed);
    assert_eq!(DESTROYED.load(Ordering::SeqCst), 0);
    unsafe { kvtier_manager_free(m) };
    assert_eq!(
        DESTROYED.load(Ordering::SeqCst),
        1,
        "destroy runs exactly once, at free"
    );
}

#[test]
fn registration_checks_and_destroy_only_after_success() {
    static DESTROYED: AtomicUsize = AtomicUsize::new(0);
    let m = manager(4);
    let mut idx = 0;
    let mut vt = vtable(Box::new(Mem {
        destroyed: Some(&DESTROYED),
        ..Default::default()
    }));
    let ud = vt.user_data;
    vt.submit_load = None;
    assert_eq!(
        unsafe { kvtier_manager_add_tier(m, &vt, null(), &mut idx) },
        S::InvalidArgument
    );
    assert!(last_error().contains("submit_load"), "{}", last_error());
    vt.submit_load = Some(c_submit);
    vt.medium = 9;
    assert_eq!(
        unsafe { kvtier_manager_add_tier(m, &vt, null(), &mut idx) },
        S::InvalidArgument
    );
    vt.medium = KVTIER_MEDIUM_ANY;
    let mut o = kvtier_tier_options_default();
    o.backpressure = true;
    o.alpha = 2.0;
    assert_eq!(
        unsafe { kvtier_manager_add_tier(m, &vt, &o, &mut idx) },
        S::InvalidArgument
    );
    assert_eq!(
        unsafe { kvtier_manager_add_tier(m, null(), null(), &mut idx) },
        S::NullArgument
    );
    start(m, c"a");
    assert_eq!(
        unsafe { kvtier_manager_add_tier(m, &vt, null(), &mut idx) },
        S::InvalidArgument
    );
    assert!(
        last_error().contains("before the first request"),
        "{}",
        last_error()
    );
    unsafe { kvtier_manager_free(m) };
    assert_eq!(
        DESTROYED.load(Ordering::SeqCst),
        0,
        "destroy never runs for a failed registration"
    );
    unsafe { c_destroy(ud) };
    assert_eq!(DESTROYED.load(Ordering::SeqCst), 1);
}

#[test]
fn misbehaving_c_tier_costs_no_crash_and_no_slot() {
    let m = manager(4);
    let vt = vtable(Box::new(Mem {
        fail_submit: true,
        ..Default::default()
    }));
    let mem_ptr = vt.user_data as *mut Mem;
    let mut idx = 0;
    assert_eq!(
        unsafe { kvtier_manager_add_tier(m, &vt, null(), &mut idx) },
        S::Ok
    );
    let r = start(m, c"r");
    store(m, r, &[key(1), key(2)]);
    assert_eq!(unsafe { kvtier_manager_schedule_end(m) }, S::Ok);
    assert_eq!(unsafe { kvtier_manager_schedule_end(m) }, S::Ok);
    let st = stats(m);
    assert_eq!(
        st[&(0, "pinned".into())],
        0.0,
        "a refused submit is a failed job: unpinned"
    );
    assert_eq!(st[&(1, "cascade_failures".into())], 1.0);
    assert_eq!(st[&(1, "callback_errors".into())], 1.0);
    let e = take_error(m).unwrap();
    assert!(
        e.contains("submit_store") && e.contains("KVTIER_STATUS_IO"),
        "{e}"
    );
    // unknown status values from a callback
    unsafe { &mut *mem_ptr }.bad_status = Some(12345);
    assert_eq!(lookup(m, r, &key(9)), KVTIER_LOOKUP_MISS);
    let e = take_error(m).unwrap();
    assert!(
        e.contains("12345") && e.contains("not a kvtier_status"),
        "{e}"
    );
    unsafe { &mut *mem_ptr }.bad_status = None;
    // an unknown job id and a repeated one
    let r = succeeded(999);
    unsafe { &mut *mem_ptr }.finished.push(r);
    unsafe { &mut *mem_ptr }.finished.push(r);
    assert_eq!(unsafe { kvtier_manager_schedule_end(m) }, S::Ok);
    assert_eq!(unsafe { kvtier_manager_schedule_end(m) }, S::Ok);
    assert_eq!(stats(m)[&(1, "tier_bugs".into())], 2.0);
    assert!(take_error(m).unwrap().contains("unknown job 999"));
    // a bad key list in a thread-safe completion is refused at the call
    let bad = kvtier_key {
        data: null(),
        len: 0,
    };
    let r = kvtier_job_result {
        id: 1,
        success: false,
        succeeded_keys: &bad,
        succeeded_len: 1,
        bytes: 0,
        duration_ns: 0,
    };
    assert_eq!(
        unsafe { kvtier_manager_complete_job(m, 1, &r) },
        S::InvalidArgument
    );
    assert_eq!(
        unsafe { kvtier_manager_complete_job(m, 2, &r) },
        S::InvalidArgument
    );
    unsafe { kvtier_manager_free(m) };
}

#[test]
fn reentrant_callback_gets_an_error_and_complete_job_works_from_it() {
    let m = manager(4);
    let vt = vtable(Box::new(Mem {
        reenter: Some(null_mut()),
        ..Default::default()
    }));
    let mem_ptr = vt.user_data as *mut Mem;
    unsafe { &mut *mem_ptr }.reenter = Some(m);
    let mut idx = 0;
    assert_eq!(
        unsafe { kvtier_manager_add_tier(m, &vt, null(), &mut idx) },
        S::Ok
    );
    let r = start(m, c"r");
    assert_eq!(lookup(m, r, &key(1)), KVTIER_LOOKUP_MISS);
    assert_eq!(
        unsafe { &*mem_ptr }.reenter_status,
        Some(S::Reentrant as i32)
    );
    assert_eq!(unsafe { kvtier_manager_schedule_end(m) }, S::Ok); // gate spent
    assert_eq!(unsafe { kvtier_manager_schedule_end(m) }, S::Ok);
    assert_eq!(
        stats(m)[&(1, "tier_bugs".into())],
        1.0,
        "the completion queued from the callback was collected"
    );
    unsafe { kvtier_manager_free(m) };
}

#[test]
fn completions_from_another_thread_and_request_level_policy() {
    let m = manager(8);
    let vt = vtable(Box::new(Mem {
        hold: true,
        request_level: true,
        ..Default::default()
    }));
    let mem_ptr = vt.user_data as usize;
    let mut idx = 0;
    assert_eq!(
        unsafe { kvtier_manager_add_tier(m, &vt, null(), &mut idx) },
        S::Ok
    );
    let (a, policy) = start_policy(m, c"a");
    assert_eq!(policy, KVTIER_OFFLOAD_REQUEST_LEVEL);
    let b = start(m, c"b");
    store(m, a, &[key(1), key(2)]);
    // b stores the same keys: they are resident, so b's request-level tier gets them now
    assert_eq!(store(m, b, &[key(1), key(2), key(3)]), 1);
    let jobs: Vec<(u64, String)> = unsafe { &*(mem_ptr as *const Mem) }
        .jobs
        .iter()
        .map(|j| (j.0, j.4.clone()))
        .collect();
    assert_eq!(
        jobs.iter().filter(|j| j.1 == "b").count(),
        2,
        "resident keys and the new key: {jobs:?}"
    );
    let mp = m as usize;
    std::thread::spawn(move || {
        let mem = unsafe { &mut *(mem_ptr as *mut Mem) };
        for (id, _, _) in mem.held.drain(..) {
            let r = succeeded(id);
            assert_eq!(
                unsafe { kvtier_manager_complete_job(mp as *const kvtier_manager, 1, &r) },
                S::Ok
            );
        }
    })
    .join()
    .unwrap();
    let mut pending = false;
    assert_eq!(
        unsafe { kvtier_manager_has_pending_work(m, &mut pending) },
        S::Ok
    );
    assert!(pending);
    assert_eq!(unsafe { kvtier_manager_schedule_end(m) }, S::Ok);
    assert_eq!(unsafe { kvtier_manager_schedule_end(m) }, S::Ok);
    assert_eq!(
        unsafe { kvtier_manager_has_pending_work(m, &mut pending) },
        S::Ok
    );
    assert!(!pending);
    assert_eq!(stats(m)[&(0, "pinned".into())], 0.0);
    unsafe { kvtier_manager_free(m) };
}

#[test]
fn null_arguments_and_unknown_requests_are_errors() {
    let m = manager(4);
    let mut out = kvtier_lookup_answer {
        hits: 7,
        stop: 7,
        reason: 7,
        pending: 7,
        end: 7,
    };
    let k = key(1);
    let kk = ck(&k);
    assert_eq!(
        unsafe { kvtier_manager_lookup(null_mut(), 1, &kk, 1, &mut out) },
        S::NullArgument
    );
    assert_eq!(
        unsafe { kvtier_manager_lookup(m, 1, null(), 1, &mut out) },
        S::NullArgument
    );
    assert_eq!(
        unsafe { kvtier_manager_lookup(m, 1, &kk, 1, null_mut()) },
        S::NullArgument
    );
    assert_eq!(
        unsafe { kvtier_manager_lookup(m, 1, &kk, 1, &mut out) },
        S::UnknownRequest
    );
    assert!(last_error().contains("handle 1"), "{}", last_error());
    assert_eq!(
        (out.hits, out.stop, out.reason),
        (7, 7, 7),
        "nothing written"
    );
    let mut h = 0;
    assert_eq!(
        unsafe { kvtier_manager_request_begin(m, null(), null(), &mut h, null_mut()) },
        S::NullArgument
    );
    assert_eq!(
        unsafe { kvtier_manager_request_begin(m, c"r".as_ptr(), null(), null_mut(), null_mut()) },
        S::NullArgument
    );
    let r = start(m, c"r");
    assert_eq!(r, 1, "the first handle is 1");
    assert_eq!(
        unsafe { kvtier_manager_request_begin(m, c"r".as_ptr(), null(), &mut h, null_mut()) },
        S::DuplicateRequest
    );
    // A handle never started, or 0, is unknown too.
    assert_eq!(
        unsafe { kvtier_manager_lookup(m, 0, &kk, 1, &mut out) },
        S::UnknownRequest
    );
    assert_eq!(
        unsafe { kvtier_manager_lookup(m, 2, &kk, 1, &mut out) },
        S::UnknownRequest
    );
    let mut slots = [0u32; 1];
    assert_eq!(
        unsafe { kvtier_manager_prepare_load(m, r, &kk, 1, null_mut()) },
        S::NullArgument
    );
    assert_eq!(
        unsafe { kvtier_manager_prepare_load(m, r, &kk, 1, slots.as_mut_ptr()) },
        S::KeyState
    );
    let long = [0u8; 65];
    let kl = ck(&long);
    assert_eq!(
        unsafe { kvtier_manager_lookup(m, r, &kl, 1, &mut out) },
        S::InvalidKey
    );
    let mut o = kvtier_manager_options_default();
    o.policy = c"fifo".as_ptr();
    let mut m2 = null_mut();
    assert_eq!(
        unsafe { kvtier_manager_new(&o, std::ptr::null(), &mut m2) },
        S::InvalidArgument
    );
    assert!(m2.is_null());
    assert!(last_error().contains("lru"), "{}", last_error());
    unsafe { kvtier_manager_free(null_mut()) };
    unsafe { kvtier_manager_free(m) };
}

/// A bad key is named by its position in the whole batch, also past the
/// first keys the lookup reads together.
#[test]
fn a_bad_key_after_many_hits_is_named_by_its_position() {
    let m = manager(16);
    let r = start(m, c"r");
    let stored: Vec<[u8; 4]> = (0..9).map(key).collect();
    assert_eq!(store_with(m, r, &stored, |_, _| {}), 9);
    let long = [7u8; 65];
    let mut batch: Vec<kvtier_key> = stored.iter().map(|k| ck(k)).collect();
    batch.push(ck(&long));
    let mut out = kvtier_lookup_answer {
        hits: 0,
        stop: 0,
        reason: 0,
        pending: 0,
        end: 0,
    };
    assert_eq!(
        unsafe { kvtier_manager_lookup(m, r, batch.as_ptr(), batch.len(), &mut out) },
        S::InvalidKey
    );
    assert!(last_error().contains("position 9"), "{}", last_error());
    unsafe { kvtier_manager_free(m) };
}

#[test]
fn failed_shutdown_is_reported_and_every_tier_tried() {
    let m = manager(4);
    let mut idx = 0;
    let v1 = vtable(Box::new(Mem {
        fail_shutdown: true,
        ..Default::default()
    }));
    let v2 = vtable(Box::default());
    assert_eq!(
        unsafe { kvtier_manager_add_tier(m, &v1, null(), &mut idx) },
        S::Ok
    );
    assert_eq!(
        unsafe { kvtier_manager_add_tier(m, &v2, null(), &mut idx) },
        S::Ok
    );
    assert_eq!(idx, 2);
    assert_eq!(unsafe { kvtier_manager_shutdown(m) }, S::Tier);
    assert!(last_error().contains("stays mapped"), "{}", last_error());
    assert_eq!(unsafe { kvtier_manager_shutdown(m) }, S::Closed);
    unsafe { kvtier_manager_free(m) };
}

unsafe extern "C" fn c_lookup_bad_answer(
    _ud: *mut c_void,
    _key: *const kvtier_key,
    _r: *const kvtier_request,
    answer: *mut i32,
) -> i32 {
    unsafe { *answer = 7 };
    0
}

unsafe extern "C" fn c_new_request_bad_policy(
    _ud: *mut c_void,
    _r: *const kvtier_request,
    policy: *mut i32,
) -> i32 {
    unsafe { *policy = 9 };
    0
}

unsafe extern "C" fn c_schedule_end_bad_status(_ud: *mut c_void) -> i32 {
    7777
}

#[test]
fn unknown_answers_and_statuses_from_callbacks_are_tier_errors() {
    let m = manager(4);
    let mut vt = vtable(Box::default());
    vt.lookup = Some(c_lookup_bad_answer);
    vt.on_new_request = Some(c_new_request_bad_policy);
    vt.on_schedule_end = Some(c_schedule_end_bad_status);
    let mut idx = 0;
    assert_eq!(
        unsafe { kvtier_manager_add_tier(m, &vt, null(), &mut idx) },
        S::Ok
    );
    let (r, policy) = start_policy(m, c"r");
    assert_eq!(
        policy, KVTIER_OFFLOAD_BLOCK_LEVEL,
        "an unknown policy reads as the default"
    );
    assert!(take_error(m).unwrap().contains("policy 9"));
    assert_eq!(
        lookup(m, r, &key(1)),
        KVTIER_LOOKUP_MISS,
        "an unknown answer reads as MISS"
    );
    assert!(take_error(m).unwrap().contains("answered 7"));
    assert_eq!(unsafe { kvtier_manager_schedule_end(m) }, S::Ok);
    let e = take_error(m).unwrap();
    assert!(
        e.contains("on_schedule_end") && e.contains("7777") && e.contains("not a kvtier_status"),
        "{e}"
    );
    assert_eq!(stats(m)[&(1, "callback_errors".into())], 3.0);
    unsafe { kvtier_manager_free(m) };
}

#[test]
fn promotion_answer_option_through_the_c_api() {
    let mut o = kvtier_manager_options_default();
    o.capacity = 4;
    o.promotion_answer = 5;
    let mut m = null_mut();
    assert_eq!(
        unsafe { kvtier_manager_new(&o, std::ptr::null(), &mut m) },
        S::InvalidArgument
    );
    assert!(m.is_null());
    assert!(
        last_error().contains("promotion_answer"),
        "{}",
        last_error()
    );
    o.promotion_answer = KVTIER_PROMOTION_ANSWER_HIT_PENDING;
    assert_eq!(
        unsafe { kvtier_manager_new(&o, std::ptr::null(), &mut m) },
        S::Ok
    );
    let mut mem = Mem::default();
    mem.stored.insert(key(7).to_vec());
    let vt = vtable(Box::new(mem));
    let mut idx = 0;
    assert_eq!(
        unsafe { kvtier_manager_add_tier(m, &vt, null(), &mut idx) },
        S::Ok
    );
    let r = start(m, c"r");
    assert_eq!(
        lookup(m, r, &key(7)),
        KVTIER_LOOKUP_HIT_PENDING,
        "a started promotion answers HIT_PENDING with the option"
    );
    assert_eq!(lookup(m, r, &key(8)), KVTIER_LOOKUP_MISS);
    unsafe { kvtier_manager_free(m) };
}

#[test]
fn tier_filter_through_the_c_api() {
    let m = manager(8);
    let mut mem = Mem::default();
    mem.stored.insert(key(7).to_vec());
    let mut vt = vtable(Box::new(mem));
    vt.medium = KVTIER_MEDIUM_STORAGE;
    vt.locality = KVTIER_LOCALITY_REMOTE;
    let mut idx = 0;
    assert_eq!(
        unsafe { kvtier_manager_add_tier(m, &vt, null(), &mut idx) },
        S::Ok
    );
    let new_with = |name: &CStr, filter: &[kvtier_tier_matcher]| {
        let mut p = kvtier_request_params_default();
        p.filter_set = true;
        p.filter = if filter.is_empty() {
            null()
        } else {
            filter.as_ptr()
        };
        p.filter_len = filter.len();
        let mut h = 0;
        let st = unsafe { kvtier_manager_request_begin(m, name.as_ptr(), &p, &mut h, null_mut()) };
        (st, h)
    };
    let any_medium = KVTIER_MEDIUM_ANY;
    let any_locality = KVTIER_LOCALITY_ANY;
    let (st, none) = new_with(c"none", &[]);
    assert_eq!(st, S::Ok);
    assert_eq!(
        lookup(m, none, &key(7)),
        KVTIER_LOOKUP_MISS,
        "an empty filter excludes every tier"
    );
    let cpu = kvtier_tier_matcher {
        medium: KVTIER_MEDIUM_CPU,
        locality: any_locality,
    };
    let (st, cpu_only) = new_with(c"cpu", &[cpu]);
    assert_eq!(st, S::Ok);
    assert_eq!(lookup(m, cpu_only, &key(7)), KVTIER_LOOKUP_MISS);
    let bad = kvtier_tier_matcher {
        medium: 42,
        locality: any_locality,
    };
    assert_eq!(new_with(c"bad", &[cpu, bad]).0, S::InvalidArgument);
    assert!(last_error().contains("matcher 1"), "{}", last_error());
    let remote = kvtier_tier_matcher {
        medium: any_medium,
        locality: KVTIER_LOCALITY_REMOTE,
    };
    let (st, bad) = new_with(c"bad", &[cpu, remote]);
    assert_eq!(st, S::Ok, "the refused request was not started");
    assert_eq!(
        lookup(m, bad, &key(7)),
        KVTIER_LOOKUP_RETRY,
        "an unset medium matches the tier's"
    );
    unsafe { kvtier_manager_free(m) };
}

/// prepare_store of `ks` for `req` through C: (refused, slots of the keys to store).
fn prepare(m: *mut kvtier_manager, req: kvtier_request_handle, ks: &[[u8; 4]]) -> (bool, Vec<u32>) {
    let keys: Vec<kvtier_key> = ks.iter().map(|k| ck(k)).collect();
    let n = keys.len();
    let mut b = PlanBuf::new(n);
    let mut evicted = vec![unsafe { std::mem::zeroed::<kvtier_key_buf>() }; n];
    b.plan.evicted = evicted.as_mut_ptr();
    let st = unsafe { kvtier_manager_prepare_store(m, req, keys.as_ptr(), n, &mut b.plan) };
    assert_eq!(st, S::Ok, "{}", last_error());
    assert!(b.plan.evicted_count <= n);
    b.slots.truncate(b.plan.store_count);
    (b.plan.refused, b.slots.clone())
}

/// complete_store of `ks` for `req` through C, which must answer `want`:
/// what it did (written with either status).
fn complete(
    m: *mut kvtier_manager,
    req: kvtier_request_handle,
    ks: &[[u8; 4]],
    success: bool,
    want: S,
) -> kvtier_store_completion {
    let keys: Vec<kvtier_key> = ks.iter().map(|k| ck(k)).collect();
    let mut done = kvtier_store_completion {
        ready: 9,
        dropped: 9,
        ignored: 9,
        foreign: 9,
        already_ready: 9,
    };
    let st = unsafe {
        kvtier_manager_complete_store(m, req, keys.as_ptr(), keys.len(), success, &mut done)
    };
    assert_eq!(st, want, "{}", last_error());
    done
}

#[test]
fn completions_through_c_act_only_on_their_own_requests_plan_in_any_number_of_calls() {
    let m = manager(2);
    let (a, b, c, d) = (key(1), key(2), key(3), key(4));
    let [r1, r2, r3] = [c"r1", c"r2", c"r3"].map(|r| start(m, r));
    // r1 plans A in slot 0; r2 names A and B and plans only B; r2 then
    // completes (with failure) every key it named: A stays r1's.
    assert_eq!(prepare(m, r1, &[a]), (false, vec![0]));
    assert_eq!(prepare(m, r2, &[a, b]), (false, vec![1]));
    let done = complete(m, r2, &[a, b], false, S::KeysIgnored);
    assert!(
        last_error().contains("1 of the keys named were not write pending for request handle 2"),
        "{}",
        last_error()
    );
    assert_eq!(
        (
            done.ready,
            done.dropped,
            done.ignored,
            done.foreign,
            done.already_ready
        ),
        (0, 1, 0, 1, 0),
        "B dropped, A left to r1"
    );
    assert_eq!(lookup(m, r2, &a), KVTIER_LOOKUP_HIT_PENDING);
    assert!(
        prepare(m, r3, &[c, d]).0,
        "refused: A's slot is neither free nor evictable"
    );
    assert_eq!(complete(m, r1, &[a], true, S::Ok).ready, 1);
    assert_eq!(
        complete(m, r1, &[a], true, S::KeysIgnored),
        kvtier_store_completion::default(),
        "r1 has no store in flight any more: ignored, all zeros"
    );
    assert!(
        last_error().contains("request handle 1 has no store in flight"),
        "{}",
        last_error()
    );
    assert_eq!(own_stats(m).ignored_store_completions, 1);
    assert_eq!(lookup(m, r1, &a), KVTIER_LOOKUP_HIT);
    // r3's plan of C and D (evicting A) completed in two calls.
    assert!(!prepare(m, r3, &[c, d]).0, "planned");
    assert_eq!(unsafe { kvtier_manager_request_finished(m, r3) }, S::Ok);
    complete(m, r3, &[c], true, S::Ok);
    complete(m, r3, &[d], true, S::Ok);
    assert_eq!(lookup(m, r1, &c), KVTIER_LOOKUP_HIT);
    assert_eq!(lookup(m, r1, &d), KVTIER_LOOKUP_HIT);
    let s = stats(m);
    assert_eq!(s[&(0, "foreign_completions".to_string())], 1.0);
    assert_eq!(own_stats(m).ignored_store_completions, 1);
    unsafe { kvtier_manager_free(m) };
}

/// A C tier gone wrong: every poll fills the whole buffer with results of
/// jobs it never had, every take of events fills the whole buffer; or it
/// hands out one event whose key is longer than 64 bytes.
#[derive(Default)]
struct Flood {
    polls: usize,
    takes: usize,
    next_key: u32,
    long_key_once: bool,
}

unsafe extern "C" fn flood_lookup(
    _ud: *mut c_void,
    _key: *const kvtier_key,
    _r: *const kvtier_request,
    answer: *mut i32,
) -> i32 {
    unsafe { *answer = KVTIER_LOOKUP_MISS };
    0
}

unsafe extern "C" fn flood_submit(_ud: *mut c_void, _job: *const kvtier_job) -> i32 {
    0
}

unsafe extern "C" fn flood_poll(
    ud: *mut c_void,
    out: *mut kvtier_job_result,
    cap: usize,
    written: *mut usize,
) -> i32 {
    let f = unsafe { &mut *(ud as *mut Flood) };
    f.polls += 1;
    for i in 0..cap {
        unsafe { *out.add(i) = succeeded(1_000_000 + i as u64) };
    }
    unsafe { *written = cap };
    0
}

unsafe extern "C" fn flood_events(
    ud: *mut c_void,
    out: *mut kvtier_tier_event,
    cap: usize,
    written: *mut usize,
) -> i32 {
    let f = unsafe { &mut *(ud as *mut Flood) };
    f.takes += 1;
    let mut n = cap;
    if f.long_key_once {
        f.long_key_once = false;
        n = cap.min(2);
        let mut long = kvtier_tier_event {
            kind: KVTIER_EVENT_STORED,
            key: kvtier_key_buf {
                len: 100,
                bytes: [7; 64],
            },
        };
        unsafe { *out = long };
        long.key.len = 4;
        long.key.bytes[..4].copy_from_slice(&key(5));
        if n == 2 {
            unsafe { *out.add(1) = long };
        }
    } else {
        for i in 0..n {
            let mut e = kvtier_tier_event {
                kind: KVTIER_EVENT_STORED,
                key: kvtier_key_buf {
                    len: 4,
                    bytes: [0; 64],
                },
            };
            e.key.bytes[..4].copy_from_slice(&key(f.next_key));
            f.next_key += 1;
            unsafe { *out.add(i) = e };
        }
    }
    unsafe { *written = n };
    0
}

unsafe extern "C" fn flood_destroy(ud: *mut c_void) {
    drop(unsafe { Box::from_raw(ud as *mut Flood) });
}

fn flood_vtable(f: Box<Flood>) -> kvtier_tier_vtable {
    kvtier_tier_vtable {
        struct_size: std::mem::size_of::<kvtier_tier_vtable>(),
        user_data: Box::into_raw(f) as *mut c_void,
        name: c"flood".as_ptr(),
        medium: KVTIER_MEDIUM_ANY,
        locality: KVTIER_LOCALITY_ANY,
        lookup: Some(flood_lookup),
        submit_store: Some(flood_submit),
        submit_load: Some(flood_submit),
        poll_finished: Some(flood_poll),
        touch: None,
        on_new_request: None,
        on_request_finished: None,
        on_schedule_end: None,
        has_pending_work: None,
        drain: None,
        stats: None,
        shutdown: None,
        destroy: Some(flood_destroy),
        take_events: Some(flood_events),
    }
}

fn take_events(m: *mut kvtier_manager, len: usize) -> (Vec<kvtier_event>, bool) {
    let mut evs = vec![unsafe { std::mem::zeroed::<kvtier_event>() }; len];
    let (mut n, mut more) = (0, false);
    assert_eq!(
        unsafe {
            kvtier_manager_take_events(
                m,
                ffi_calls::thread_buffer(),
                evs.as_mut_ptr(),
                len,
                &mut n,
                &mut more,
            )
        },
        S::Ok
    );
    evs.truncate(n);
    (evs, more)
}

#[test]
fn a_tier_that_always_fills_its_buffers_cannot_hold_the_manager() {
    let m = manager(4); // event capacity 1024
    let vt = flood_vtable(Box::default());
    let flood = vt.user_data as *mut Flood;
    let mut index = 0;
    assert_eq!(
        unsafe { kvtier_manager_add_tier(m, &vt, null(), &mut index) },
        S::Ok
    );
    start(m, c"r");
    // Each step takes a bounded number of results and returns; the rest
    // wait for the next step.
    for step in 1..=3 {
        assert_eq!(unsafe { kvtier_manager_schedule_end(m) }, S::Ok);
        let st = stats(m);
        assert_eq!(st[&(1, "poll_limit_reached".into())], step as f64);
        assert_eq!(
            st[&(1, "tier_bugs".into())],
            (step * kvtier_core::tiering::MAX_FINISHED_PER_POLL) as f64,
            "every made-up job is a tier bug"
        );
    }
    let polls = unsafe { &*flood }.polls;
    assert!(polls <= 3 * kvtier_core::tiering::MAX_FINISHED_PER_POLL.div_ceil(64));
    // Events: one take gives at most the event capacity and says more wait.
    let (evs, more) = take_events(m, 5000);
    assert_eq!(evs.len(), 1, "one batch: the tier's stored keys");
    assert_eq!(evs[0].len, 1024);
    assert!(more);
    assert!(
        evs.iter()
            .all(|e| e.tier == 1 && e.kind == KVTIER_EVENT_STORED)
    );
    assert!(event_keys(&evs[0]).iter().all(|k| k.len() == 4));
    let takes = unsafe { &*flood }.takes;
    assert!(takes <= 2 * 1024usize.div_ceil(64), "{takes} callbacks");
    assert!(own_stats(m).events_queued <= 1024);
    // The error log stays bounded whatever the tier reports.
    let mut errors = 0;
    while take_error(m).is_some() {
        errors += 1;
    }
    assert!(errors <= 64, "{errors} errors kept");
    unsafe { kvtier_manager_free(m) };
}

#[test]
fn an_event_key_longer_than_64_bytes_is_rejected_and_counted() {
    let m = manager(4);
    let vt = flood_vtable(Box::new(Flood {
        long_key_once: true,
        ..Default::default()
    }));
    let mut index = 0;
    assert_eq!(
        unsafe { kvtier_manager_add_tier(m, &vt, null(), &mut index) },
        S::Ok
    );
    let (evs, _) = take_events(m, 2);
    assert_eq!(
        event_keys(&evs[0]),
        vec![key(5).to_vec()],
        "the event with a 100-byte key is dropped, not cut short"
    );
    assert_eq!(stats(m)[&(1, "events_rejected".into())], 1.0);
    let error = take_error(m).unwrap();
    assert!(error.contains("100 bytes"), "{error}");
    unsafe { kvtier_manager_free(m) };
}

#[test]
fn positions_and_kv_groups_through_the_c_api() {
    // A request stores head, middle and tail with positions (its block i
    // ends at token 16 (i + 1)); while it is active, another request's
    // store of one key evicts its tail, not its head.
    let mut o = kvtier_manager_options_default();
    o.capacity = 3;
    o.kv_groups = true;
    let mut m = null_mut();
    assert_eq!(
        unsafe { kvtier_manager_new(&o, std::ptr::null(), &mut m) },
        S::Ok
    );
    let names: Vec<Vec<u8>> = [&b"head"[..], b"middle", b"tail"]
        .iter()
        .map(|n| [*n, &0u32.to_be_bytes()[..]].concat())
        .collect();
    let keys: Vec<kvtier_key> = names.iter().map(|n| ck(n)).collect();
    let pos = [16u64, 32, 48];
    let st = unsafe { kvtier_manager_set_positions(m, 1, keys.as_ptr(), 3, pos.as_ptr()) };
    assert_eq!(st, S::UnknownRequest, "{}", last_error());
    let r = start(m, c"r");
    let st = unsafe { kvtier_manager_set_positions(m, r, keys.as_ptr(), 3, pos.as_ptr()) };
    assert_eq!(st, S::Ok, "{}", last_error());
    // A key too short for a group index, and NULL positions, change nothing.
    let short = [ck(b"tiny")];
    let st = unsafe { kvtier_manager_set_positions(m, r, short.as_ptr(), 1, pos.as_ptr()) };
    assert_eq!(st, S::InvalidKey, "{}", last_error());
    let st = unsafe { kvtier_manager_set_positions(m, r, keys.as_ptr(), 1, null()) };
    assert_eq!(st, S::NullArgument, "{}", last_error());
    assert_eq!(store_with(m, r, &names, |_, _| {}), 3);
    let s = start(m, c"s");
    let fresh = [b"fresh".to_vec(), 0u32.to_be_bytes().to_vec()].concat();
    assert_eq!(store_with(m, s, &[fresh], |_, _| {}), 1);
    assert_eq!(lookup(m, s, &names[2]), KVTIER_LOOKUP_MISS);
    assert_eq!(lookup(m, s, &names[0]), KVTIER_LOOKUP_HIT);
    assert_eq!(lookup(m, s, &names[1]), KVTIER_LOOKUP_HIT);
    unsafe { kvtier_manager_free(m) };
}

#[test]
fn a_batched_lookup_through_the_c_api_says_why_it_missed() {
    let m = manager(1);
    let mut mem = Mem {
        hold: true,
        ..Default::default()
    };
    mem.stored.insert(key(2).to_vec());
    let vt = vtable(Box::new(mem));
    let mut idx = 0;
    assert_eq!(
        unsafe { kvtier_manager_add_tier(m, &vt, null(), &mut idx) },
        S::Ok
    );
    let r = start(m, c"r");
    assert_eq!(store(m, r, &[key(1)]), 1);
    let a = lookup_keys(m, r, &[key(1)]);
    assert_eq!(
        (a.hits, a.stop, a.reason),
        (1, KVTIER_LOOKUP_HIT, KVTIER_MISS_NONE),
        "every key a hit"
    );
    // The only slot is pinned by a load: the tier has key 2, but there is
    // no room to bring it back.
    let k1 = key(1);
    let mut slot = 0u32;
    assert_eq!(
        unsafe { kvtier_manager_prepare_load(m, r, &ck(&k1), 1, &mut slot) },
        S::Ok
    );
    let a = lookup_keys_per_key(m, r, &[key(1), key(2), key(3)]);
    assert_eq!(
        (a.hits, a.stop, a.reason, a.pending, a.end),
        (1, KVTIER_LOOKUP_MISS, KVTIER_MISS_NO_ROOM, 0, 1)
    );
    let a = lookup_keys_per_key(m, r, &[key(3), key(1)]);
    assert_eq!(
        (a.hits, a.stop, a.reason),
        (0, KVTIER_LOOKUP_MISS, KVTIER_MISS_ABSENT)
    );
    let empty: [[u8; 4]; 0] = [];
    let a = lookup_keys(m, r, &empty);
    assert_eq!(
        (a.hits, a.stop, a.reason),
        (0, KVTIER_LOOKUP_HIT, KVTIER_MISS_NONE)
    );
    let s = own_stats(m);
    assert_eq!(
        (s.lookups, s.primary_hits, s.misses_no_room, s.misses_absent),
        (4, 2, 1, 1),
        "the keys after a stop are not looked up"
    );
    // An invalid key anywhere in the batch: nothing looked up.
    let long = [0u8; 65];
    let bad = [ck(&k1), ck(&long)];
    let mut out = kvtier_lookup_answer {
        hits: 9,
        stop: 9,
        reason: 9,
        pending: 9,
        end: 9,
    };
    assert_eq!(
        unsafe { kvtier_manager_lookup(m, r, bad.as_ptr(), 2, &mut out) },
        S::InvalidKey
    );
    assert!(last_error().contains("position 1"), "{}", last_error());
    assert_eq!((out.hits, out.stop), (9, 9), "nothing written");
    assert_eq!(own_stats(m).lookups, 4);
    // The prefix lookup scans on to the first key no tier has (key 3),
    // then finds no room for key 2: its prefix ends there.
    let a = lookup_keys(m, r, &[key(1), key(2), key(3)]);
    assert_eq!(
        (a.hits, a.stop, a.reason, a.pending, a.end),
        (1, KVTIER_LOOKUP_MISS, KVTIER_MISS_NO_ROOM, 0, 1)
    );
    let s = own_stats(m);
    assert_eq!(
        (s.lookups, s.primary_hits, s.misses_no_room, s.misses_absent),
        (7, 3, 2, 2),
        "each key scanned is looked up"
    );
    unsafe { kvtier_manager_free(m) };
}

#[test]
fn touches_reach_the_c_tiers_that_take_them_with_their_keys_in_order() {
    let m = manager(8);
    // The first tier takes touches; the second (no callback) does not.
    let mut vt = vtable(Box::default());
    vt.touch = Some(c_touch);
    // The tier's state, which the manager owns (destroyed at its free).
    let with = vt.user_data as *mut Mem;
    let mut index = 0;
    assert_eq!(
        unsafe { kvtier_manager_add_tier(m, &vt, null(), &mut index) },
        S::Ok
    );
    let without = vtable(Box::default());
    assert_eq!(
        unsafe { kvtier_manager_add_tier(m, &without, null(), &mut index) },
        S::Ok
    );
    let r = start(m, c"r");
    let ks = [key(1), key(2), key(3)];
    assert_eq!(store(m, r, &ks), 3);
    let named = [ck(&ks[2]), ck(&ks[0]), ck(&key(9))];
    assert_eq!(
        unsafe { kvtier_manager_touch(m, r, named.as_ptr(), 3) },
        S::Ok,
        "{}",
        last_error()
    );
    let seen = unsafe { &(*with).touched };
    assert_eq!(
        seen,
        &[(
            vec![ks[2].to_vec(), ks[0].to_vec(), key(9).to_vec()],
            "r".to_string()
        )],
        "every key named, absent ones too, in the call's order"
    );
    // A touch that fails touches no tier.
    let empty = kvtier_key {
        data: ks[0].as_ptr(),
        len: 0,
    };
    let bad = [ck(&ks[0]), empty];
    assert_eq!(
        unsafe { kvtier_manager_touch(m, r, bad.as_ptr(), 2) },
        S::InvalidKey
    );
    assert_eq!(
        unsafe { kvtier_manager_touch(m, 999, named.as_ptr(), 3) },
        S::UnknownRequest
    );
    assert_eq!(unsafe { &(*with).touched }.len(), 1);
    unsafe { kvtier_manager_free(m) };
}

#[test]
fn a_finished_handle_is_unknown_and_its_name_can_start_a_new_request() {
    let m = manager(4);
    let first = start(m, c"r");
    assert_eq!(unsafe { kvtier_manager_request_finished(m, first) }, S::Ok);
    let second = start(m, c"r");
    assert_ne!(first, second, "handles are never reused");
    let k = key(1);
    let kk = ck(&k);
    let mut slot = 0u32;
    for st in [
        unsafe { kvtier_manager_request_finished(m, first) },
        unsafe { kvtier_manager_touch(m, first, &kk, 1) },
        unsafe { kvtier_manager_complete_load(m, first, &kk, 1) },
        unsafe { kvtier_manager_prepare_load(m, first, &kk, 1, &mut slot) },
        unsafe { kvtier_manager_complete_store(m, first, &kk, 1, true, null_mut()) },
        unsafe { kvtier_manager_set_positions(m, first, &kk, 1, [16u64].as_ptr()) },
    ] {
        assert_eq!(st, S::UnknownRequest);
    }
    let mut plan = PlanBuf::new(1);
    assert_eq!(
        unsafe { kvtier_manager_prepare_store(m, first, &kk, 1, &mut plan.plan) },
        S::UnknownRequest
    );
    assert_eq!(plan.plan.store_count, usize::MAX, "nothing written");
    assert_eq!(store(m, second, &[k]), 1, "the new request works");
    unsafe { kvtier_manager_free(m) };
}

/// As vLLM 0.33 allows, a request may finish while its load is in flight
/// (an abort) and complete the load afterwards: its handle still releases
/// the pins its own loads hold, and only those, and is unknown once the
/// last is released.
#[test]
fn a_finished_request_releases_only_its_own_loads() {
    let m = manager(4);
    let other = start(m, c"other");
    let (a, b, c) = (key(1), key(2), key(3));
    assert_eq!(store(m, other, &[a, b, c]), 3);
    let r = start(m, c"r");
    let mut slots = [u32::MAX; 2];
    let (ab, ac) = ([ck(&a), ck(&b)], [ck(&a), ck(&c)]);
    for (req, keys) in [(r, &ab), (other, &ac)] {
        assert_eq!(
            unsafe { kvtier_manager_prepare_load(m, req, keys.as_ptr(), 2, slots.as_mut_ptr()) },
            S::Ok
        );
    }
    assert_eq!(unsafe { kvtier_manager_request_finished(m, r) }, S::Ok);
    assert_eq!(own_stats(m).active_requests, 1, "finalized at once");
    let pinned = || stats(m)[&(0, "pinned".to_string())];
    assert_eq!(pinned(), 3.0);
    let complete = |keys: &[kvtier_key]| unsafe {
        kvtier_manager_complete_load(m, r, keys.as_ptr(), keys.len())
    };
    assert_eq!(
        unsafe { kvtier_manager_touch(m, r, ab.as_ptr(), 1) },
        S::UnknownRequest
    );
    // Another request's pin cannot be released through the handle.
    assert_eq!(complete(&[ck(&c)]), S::KeyState);
    assert!(last_error().contains("position 0"), "{}", last_error());
    assert_eq!(pinned(), 3.0, "a refused call changes nothing");
    assert_eq!(complete(&[ck(&a)]), S::Ok);
    assert_eq!(pinned(), 3.0, "a stays pinned by the other request");
    assert_eq!(complete(&[ck(&a)]), S::KeyState, "released once");
    assert_eq!(complete(&[ck(&b)]), S::Ok);
    assert_eq!(pinned(), 2.0);
    // The last pin released: the handle is unknown.
    assert_eq!(complete(&[ck(&a)]), S::UnknownRequest);
    assert_eq!(
        unsafe { kvtier_manager_complete_load(m, other, ac.as_ptr(), 2) },
        S::Ok
    );
    assert_eq!(pinned(), 0.0);
    unsafe { kvtier_manager_free(m) };
}

#[test]
fn the_error_log_and_the_stats_follow_the_buffer_and_growth_rules() {
    let m = manager(4);
    let vt = vtable(Box::new(Mem {
        bad_status: Some(12345),
        ..Default::default()
    }));
    let mut idx = 0;
    assert_eq!(
        unsafe { kvtier_manager_add_tier(m, &vt, null(), &mut idx) },
        S::Ok
    );
    let mut written = usize::MAX;
    assert_eq!(
        unsafe { kvtier_manager_take_error(m, null_mut(), 0, &mut written) },
        S::Ok
    );
    assert_eq!(written, 0, "an empty log: no message");
    let r = start(m, c"r");
    assert_eq!(lookup(m, r, &key(1)), KVTIER_LOOKUP_MISS);
    // Too small: the size needed, nothing written, the message kept.
    let mut small = [1 as c_char; 8];
    assert_eq!(
        unsafe { kvtier_manager_take_error(m, small.as_mut_ptr(), 8, &mut written) },
        S::BufferTooSmall
    );
    assert!(written > 8);
    assert!(small.iter().all(|&c| c == 1), "nothing written");
    let mut buf = vec![0 as c_char; written];
    let needed = written;
    assert_eq!(
        unsafe { kvtier_manager_take_error(m, buf.as_mut_ptr(), buf.len(), &mut written) },
        S::Ok
    );
    assert_eq!(written, needed, "an exact fit");
    let text = unsafe { CStr::from_ptr(buf.as_ptr()) }.to_string_lossy();
    assert!(text.contains("12345"), "{text}");
    assert_eq!(take_error(m), None, "taken once");
    assert_eq!(
        unsafe { kvtier_manager_take_error(m, null_mut(), 0, null_mut()) },
        S::NullArgument
    );

    // The manager's stats: struct_size is checked, and only the fields
    // inside it are written.
    let size = std::mem::size_of::<kvtier_manager_stats>();
    for bad in [0, 8, size - 1, size + 8] {
        let mut s = kvtier_manager_stats {
            struct_size: bad,
            lookups: 77,
            ..Default::default()
        };
        assert_eq!(
            unsafe { kvtier_manager_read_stats(m, &mut s) },
            S::InvalidArgument,
            "struct_size {bad}"
        );
        assert_eq!(s.lookups, 77, "nothing written");
    }
    assert_eq!(
        unsafe { kvtier_manager_read_stats(m, null_mut()) },
        S::NullArgument
    );
    let s = own_stats(m);
    assert_eq!((s.struct_size, s.lookups, s.misses_absent), (size, 1, 1));
    assert_eq!(s.active_requests, 1);
    // Tier statistics: a tier that does not exist, and a short buffer.
    let mut n = 0;
    assert_eq!(
        unsafe { kvtier_manager_read_tier_stats(m, 2, null_mut(), 0, &mut n) },
        S::InvalidArgument
    );
    assert_eq!(
        unsafe { kvtier_manager_read_tier_stats(m, 1, null_mut(), 0, &mut n) },
        S::BufferTooSmall
    );
    let mut one = [unsafe { std::mem::zeroed::<kvtier_tier_stat>() }; 1];
    one[0].value = -5.0;
    let needed = n;
    assert_eq!(
        unsafe { kvtier_manager_read_tier_stats(m, 1, one.as_mut_ptr(), 1, &mut n) },
        S::BufferTooSmall
    );
    assert_eq!((n, one[0].value), (needed, -5.0), "nothing written");
    let st = stats(m);
    assert_eq!(st[&(1, "lookups".to_string())], 1.0);
    assert_eq!(st[&(1, "callback_errors".to_string())], 1.0);
    unsafe { kvtier_manager_free(m) };
}

/// With KV groups on, a key shorter than 5 bytes (too short for its group
/// index) is refused as `KVTIER_STATUS_INVALID_KEY`, naming its position,
/// by every call that takes a request's keys, even when a secondary tier
/// holds it: a lookup does not answer MISS "no room" (which an engine
/// retries on every step) nor count an internal error.
#[test]
fn with_kv_groups_every_call_refuses_a_key_too_short_for_its_group() {
    let mut o = kvtier_manager_options_default();
    o.capacity = 2;
    o.kv_groups = true;
    let mut m = null_mut();
    assert_eq!(
        unsafe { kvtier_manager_new(&o, std::ptr::null(), &mut m) },
        S::Ok
    );
    let mut mem = Mem::default();
    mem.stored.insert(b"tiny".to_vec());
    let vt = vtable(Box::new(mem));
    let mut idx = 0;
    assert_eq!(
        unsafe { kvtier_manager_add_tier(m, &vt, null(), &mut idx) },
        S::Ok
    );
    let r = start(m, c"r");
    let good = [&b"block"[..], &0u32.to_be_bytes()[..]].concat();
    assert_eq!(store_with(m, r, std::slice::from_ref(&good), |_, _| {}), 1);
    let keys = [ck(&good), ck(b"tiny")];
    // The store's cascade collected first.
    for _ in 0..1000 {
        let mut pending = false;
        assert_eq!(unsafe { kvtier_manager_schedule_end(m) }, S::Ok);
        assert_eq!(
            unsafe { kvtier_manager_has_pending_work(m, &mut pending) },
            S::Ok
        );
        if !pending {
            break;
        }
    }
    let before = (own_stats(m).internal_errors, stats(m));
    for step in 0..3 {
        let mut a = kvtier_lookup_answer {
            hits: usize::MAX,
            stop: -1,
            reason: -1,
            pending: usize::MAX,
            end: usize::MAX,
        };
        let st = unsafe { kvtier_manager_lookup(m, r, keys.as_ptr(), 2, &mut a) };
        assert_eq!(st, S::InvalidKey, "step {step}: {}", last_error());
        assert!(last_error().contains("position 1"), "{}", last_error());
        assert_eq!(a.hits, usize::MAX, "nothing written");
        assert_eq!(unsafe { kvtier_manager_schedule_end(m) }, S::Ok);
    }
    let mut slots = [u32::MAX; 2];
    let statuses = [
        ("prepare_load", unsafe {
            kvtier_manager_prepare_load(m, r, keys.as_ptr(), 2, slots.as_mut_ptr())
        }),
        ("touch", unsafe {
            kvtier_manager_touch(m, r, keys.as_ptr(), 2)
        }),
        ("complete_load", unsafe {
            kvtier_manager_complete_load(m, r, keys.as_ptr(), 2)
        }),
        ("prepare_store", unsafe {
            kvtier_manager_prepare_store(m, r, keys.as_ptr(), 2, &mut PlanBuf::new(2).plan)
        }),
        ("complete_store", unsafe {
            kvtier_manager_complete_store(m, r, keys.as_ptr(), 2, true, null_mut())
        }),
        ("set_positions", unsafe {
            kvtier_manager_set_positions(m, r, keys.as_ptr(), 2, [16u64, 32].as_ptr())
        }),
    ];
    for (call, st) in statuses {
        assert_eq!(st, S::InvalidKey, "{call}");
    }
    assert_eq!(
        (own_stats(m).internal_errors, stats(m)),
        before,
        "nothing counted, nothing changed"
    );
    assert_eq!(lookup(m, r, &good), KVTIER_LOOKUP_HIT);
    unsafe { kvtier_manager_free(m) };
}
