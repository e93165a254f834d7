//! A scriptable in-memory secondary tier for manager tests, and managers
//! over the reference model of the primary tier.
#![allow(dead_code)]

#[path = "../support/model.rs"]
pub mod model;

use parking_lot::Mutex;
use std::collections::HashSet;
use std::sync::Arc;

use kvtier::Key;
use kvtier::events::Event;
use kvtier::request::{Locality, Medium, Request};
use kvtier::stats::Stat;
use kvtier::tiering::{
    Direction, JobId, JobRef, JobResult, Manager, ManagerOptions, OffloadPolicy, SecondaryTier,
    TierLookup,
};

/// The report of a store completion, whichever way it came back, checking
/// the rule of the answer: `Ok` exactly when no key named was left alone;
/// else `KeysIgnored` carrying the report (all 0 when no store was in
/// flight).
pub fn report_of(
    answer: kvtier::Result<kvtier::primary::CompleteStoreReport>,
) -> kvtier::primary::CompleteStoreReport {
    match answer {
        Ok(r) => {
            assert_eq!(r.left_alone(), 0, "{r:?} came back Ok");
            r
        }
        Err(kvtier::Error::KeysIgnored { report, message }) => {
            assert!(
                report.left_alone() > 0 || report == Default::default(),
                "{report:?} came back as KeysIgnored: {message}"
            );
            report
        }
        Err(e) => panic!("complete_store failed: {e}"),
    }
}

/// Whether a store completion came back as `KeysIgnored`.
pub fn ignored_keys<T: std::fmt::Debug>(answer: &kvtier::Result<T>) -> bool {
    matches!(answer, Err(kvtier::Error::KeysIgnored { .. }))
}

pub fn k(i: u32) -> Key {
    Key::new(&i.to_be_bytes()).unwrap()
}

pub fn keys(r: std::ops::Range<u32>) -> Vec<Key> {
    r.map(k).collect()
}

/// What the test tier saw and what it will do.
#[derive(Default)]
pub struct Script {
    pub stored: HashSet<Key>,
    pub submitted: Vec<JobRef>,
    /// Jobs submitted but not finished yet (auto_finish off).
    pub held: Vec<JobRef>,
    /// Results to report at the next poll.
    pub ready: Vec<JobResult>,
    pub auto_finish: bool,
    pub fail_all: bool,
    pub polls: u32,
    pub lookups: u32,
    pub retry_lookups: bool,
    pub policy: Option<OffloadPolicy>,
    pub log: Vec<String>,
    pub drains: u32,
    pub fail_shutdown: bool,
    /// `drain` finishes every held job with success before returning.
    pub finish_on_drain: bool,
    /// `drain` fails.
    pub fail_drain: bool,
    pub shutdowns: u32,
    pub schedule_ends: u32,
    pub events: Vec<Event>,
    pub medium: Option<Medium>,
    pub locality: Option<Locality>,
    pub touches: u32,
    pub dropped: Option<Arc<Mutex<bool>>>,
    /// Called on every lookup (re-entrancy tests).
    pub on_lookup: Option<Box<dyn FnMut() + Send>>,
}

pub struct TestTier {
    pub name: String,
    pub s: Arc<Mutex<Script>>,
}

impl TestTier {
    pub fn new(name: &str) -> (TestTier, Arc<Mutex<Script>>) {
        let s = Arc::new(Mutex::new(Script {
            auto_finish: true,
            ..Script::default()
        }));
        (
            TestTier {
                name: name.into(),
                s: s.clone(),
            },
            s,
        )
    }
}

impl Script {
    /// Finishes a held job with `success`.
    pub fn finish(&mut self, id: JobId, success: bool) {
        let pos = self.held.iter().position(|j| j.id == id).expect("held job");
        let job = self.held.remove(pos);
        if success && job.direction == Direction::Store {
            self.stored.extend(job.keys.iter().copied());
        }
        self.ready.push(JobResult::new(id, success));
    }
    pub fn finish_all(&mut self, success: bool) {
        let ids: Vec<JobId> = self.held.iter().map(|j| j.id).collect();
        for id in ids {
            self.finish(id, success);
        }
    }
}

impl Drop for TestTier {
    fn drop(&mut self) {
        let mut s = self.s.lock();
        s.log.push("dropped".into());
        if let Some(d) = &s.dropped {
            *d.lock() = true;
        }
    }
}

impl SecondaryTier for TestTier {
    fn name(&self) -> &str {
        &self.name
    }
    fn reports_through_complete_job(&self) -> bool {
        true
    }
    fn medium(&self) -> Option<Medium> {
        self.s.lock().medium
    }
    fn locality(&self) -> Option<Locality> {
        self.s.lock().locality
    }
    fn lookup(&mut self, key: &Key, _request: &Request) -> TierLookup {
        let hook = self.s.lock().on_lookup.take();
        if let Some(mut f) = hook {
            f();
            self.s.lock().on_lookup = Some(f);
        }
        let mut s = self.s.lock();
        s.lookups += 1;
        if s.stored.contains(key) {
            TierLookup::Hit
        } else if s.retry_lookups {
            TierLookup::Retry
        } else {
            TierLookup::Miss
        }
    }
    fn submit_store(&mut self, job: JobRef) {
        let mut s = self.s.lock();
        s.log
            .push(format!("store {} {}", job.id.0, job.request.name));
        s.submitted.push(job.clone());
        s.held.push(job.clone());
        if s.auto_finish {
            let ok = !s.fail_all;
            s.finish(job.id, ok);
        }
    }
    fn submit_load(&mut self, job: JobRef) {
        let mut s = self.s.lock();
        s.log.push(format!(
            "load {} {} {}",
            job.id.0,
            job.request.name,
            job.keys.len()
        ));
        s.submitted.push(job.clone());
        s.held.push(job.clone());
        if s.auto_finish {
            let ok = !s.fail_all;
            s.finish(job.id, ok);
        }
    }
    fn poll_finished(&mut self, max: usize, out: &mut Vec<JobResult>) {
        let mut s = self.s.lock();
        s.polls += 1;
        s.log.push("poll".into());
        let n = max.min(s.ready.len());
        out.extend(s.ready.drain(..n));
    }
    fn touch(&mut self, _keys: &[Key], _request: &Request) {
        self.s.lock().touches += 1;
    }
    fn on_new_request(&mut self, request: &Request) -> OffloadPolicy {
        let mut s = self.s.lock();
        s.log.push(format!("new {}", request.name));
        s.policy.unwrap_or_default()
    }
    fn on_request_finished(&mut self, request: &Request) {
        self.s.lock().log.push(format!("finished {}", request.name));
    }
    fn on_schedule_end(&mut self) {
        let mut s = self.s.lock();
        s.schedule_ends += 1;
        s.log.push("end".into());
    }
    fn has_pending_work(&self) -> bool {
        let s = self.s.lock();
        !s.held.is_empty() || !s.ready.is_empty()
    }
    fn drain(&mut self) -> kvtier::Result<()> {
        let mut s = self.s.lock();
        s.drains += 1;
        s.log.push("drain".into());
        if s.fail_drain {
            return Err(kvtier::Error::Io {
                context: "draining test tier".into(),
                source: std::io::Error::other("device busy"),
            });
        }
        if s.finish_on_drain {
            s.finish_all(true);
        }
        Ok(())
    }
    fn stats(&self) -> Vec<Stat> {
        vec![Stat::gauge(
            "stored_keys",
            self.s.lock().stored.len() as f64,
        )]
    }
    fn take_events(&mut self, max: usize, out: &mut Vec<Event>) {
        let mut s = self.s.lock();
        let n = max.min(s.events.len());
        out.extend(s.events.drain(..n));
    }
    fn shutdown(&mut self) -> kvtier::Result<()> {
        let mut s = self.s.lock();
        s.shutdowns += 1;
        s.log.push("shutdown".into());
        if s.fail_shutdown {
            return Err(kvtier::Error::Io {
                context: "closing test tier".into(),
                source: std::io::Error::other("device busy"),
            });
        }
        Ok(())
    }
}

/// A manager over the reference model with `capacity` slots.
pub fn model_manager(capacity: u32, opts: ManagerOptions) -> Manager {
    Manager::with_backend(Box::new(model::ModelPrimary::new(capacity)), opts)
}

/// `f` of the reference model `m` drives (`m` from [`model_manager`]).
pub fn with_model<R>(m: &Manager, f: impl FnOnce(&model::ModelPrimary) -> R) -> R {
    m.inspect_primary(f).unwrap()
}

/// Ref count of `key` in the model `m` drives (-1 write pending, `None` absent).
pub fn model_refs(m: &Manager, key: &Key) -> Option<i32> {
    with_model(m, |model| model.refs(key))
}

pub fn stat(m: &Manager, tier: Option<usize>, name: &str) -> f64 {
    m.stats()
        .unwrap()
        .into_iter()
        .find(|s| s.tier == tier && s.stat.name == name)
        .unwrap_or_else(|| panic!("no stat {name} for {tier:?}"))
        .stat
        .value
}

/// How a test registers its tier: as a Rust tier, or behind a C vtable.
pub type Wrap = fn(TestTier) -> Box<dyn SecondaryTier>;

/// The tier as is.
pub fn rust(t: TestTier) -> Box<dyn SecondaryTier> {
    Box::new(t)
}

/// The tier behind `extern "C"` callbacks and the C vtable adapter, so the
/// same rules are checked through the foreign-tier path.
pub fn via_c(t: TestTier) -> Box<dyn SecondaryTier> {
    use kvtier::ffi::tier::*;
    let (medium, locality) = {
        let s = t.s.lock();
        (
            match s.medium {
                None => KVTIER_MEDIUM_ANY,
                Some(Medium::Cpu) => KVTIER_MEDIUM_CPU,
                Some(Medium::Storage) => KVTIER_MEDIUM_STORAGE,
            },
            match s.locality {
                None => KVTIER_LOCALITY_ANY,
                Some(Locality::Local) => KVTIER_LOCALITY_LOCAL,
                Some(Locality::Remote) => KVTIER_LOCALITY_REMOTE,
            },
        )
    };
    let name = std::ffi::CString::new(t.name.clone()).unwrap();
    let bridge = Box::new(c_bridge::Bridge {
        tier: t,
        results: Vec::new(),
        keys: Vec::new(),
        owned: Vec::new(),
    });
    let vt = kvtier_tier_vtable {
        user_data: Box::into_raw(bridge) as *mut std::ffi::c_void,
        name: name.as_ptr(),
        medium,
        locality,
        lookup: Some(c_bridge::lookup),
        submit_store: Some(c_bridge::submit),
        submit_load: Some(c_bridge::submit),
        poll_finished: Some(c_bridge::poll),
        touch: Some(c_bridge::touch),
        on_new_request: Some(c_bridge::new_request),
        on_request_finished: Some(c_bridge::finished),
        on_schedule_end: Some(c_bridge::schedule_end),
        has_pending_work: Some(c_bridge::pending),
        drain: Some(c_bridge::drain),
        stats: None,
        shutdown: Some(c_bridge::shutdown),
        destroy: Some(c_bridge::destroy),
        take_events: Some(c_bridge::events),
        ..kvtier::ffi::build::kvtier_tier_vtable_default()
    };
    unsafe { tier_from_vtable(&vt) }.unwrap()
}

mod c_bridge {
    use std::ffi::{CStr, c_void};
    use std::sync::Arc;

    use kvtier::Key;
    use kvtier::ffi::kvtier_key;
    use kvtier::ffi::tier::*;
    use kvtier::request::{Request, RequestInfo};
    use kvtier::tiering::{
        Direction, Job, JobId, JobResult, OffloadPolicy, SecondaryTier, TierLookup,
    };

    pub struct Bridge {
        pub tier: super::TestTier,
        pub results: Vec<JobResult>,
        pub keys: Vec<Vec<kvtier_key>>,
        pub owned: Vec<Vec<Key>>,
    }

    unsafe fn b<'a>(ud: *mut c_void) -> &'a mut Bridge {
        unsafe { &mut *(ud as *mut Bridge) }
    }

    unsafe fn req(r: *const kvtier_request) -> Request {
        let r = unsafe { &*r };
        let name = unsafe { CStr::from_ptr(r.id) }
            .to_str()
            .unwrap()
            .to_string();
        Arc::new(RequestInfo {
            name,
            user_data: r.user_data as usize,
            ..Default::default()
        })
    }

    unsafe fn keys(k: *const kvtier_key, n: usize) -> Vec<Key> {
        (0..n)
            .map(|i| {
                let k = unsafe { &*k.add(i) };
                Key::new(unsafe { std::slice::from_raw_parts(k.data, k.len) }).unwrap()
            })
            .collect()
    }

    pub unsafe extern "C" fn lookup(
        ud: *mut c_void,
        k: *const kvtier_key,
        r: *const kvtier_request,
        answer: *mut i32,
    ) -> i32 {
        let key = unsafe { keys(k, 1) }[0];
        let a = unsafe { b(ud) }.tier.lookup(&key, &unsafe { req(r) });
        unsafe {
            *answer = match a {
                TierLookup::Hit => KVTIER_LOOKUP_HIT,
                TierLookup::Miss => KVTIER_LOOKUP_MISS,
                TierLookup::Retry => KVTIER_LOOKUP_RETRY,
            }
        };
        0
    }

    pub unsafe extern "C" fn submit(ud: *mut c_void, j: *const kvtier_job) -> i32 {
        let j = unsafe { &*j };
        let job = Arc::new(Job {
            id: JobId(j.id),
            direction: if j.direction == KVTIER_JOB_STORE {
                Direction::Store
            } else {
                Direction::Load
            },
            keys: unsafe { keys(j.keys, j.len) },
            slots: unsafe { std::slice::from_raw_parts(j.slots, j.len) }.to_vec(),
            request: unsafe { req(j.request) },
        });
        let t = &mut unsafe { b(ud) }.tier;
        match job.direction {
            Direction::Store => t.submit_store(job),
            Direction::Load => t.submit_load(job),
        }
        0
    }

    pub unsafe extern "C" fn poll(
        ud: *mut c_void,
        out: *mut kvtier_job_result,
        cap: usize,
        written: *mut usize,
    ) -> i32 {
        let br = unsafe { b(ud) };
        if br.results.is_empty() {
            br.keys.clear();
            br.owned.clear();
            br.tier.poll_finished(usize::MAX, &mut br.results);
        }
        let n = br.results.len().min(cap);
        for (i, r) in br.results.drain(..n).enumerate() {
            // The key lists stay alive (in the bridge) until the next poll.
            let owned: Vec<Key> = r.succeeded_keys.clone().unwrap_or_default();
            let list: Vec<kvtier_key> = owned
                .iter()
                .map(|k| kvtier_key {
                    data: k.as_bytes().as_ptr(),
                    len: k.len(),
                })
                .collect();
            unsafe {
                *out.add(i) = kvtier_job_result {
                    id: r.id.0,
                    success: r.success,
                    succeeded_keys: if r.succeeded_keys.is_some() {
                        list.as_ptr()
                    } else {
                        std::ptr::null()
                    },
                    succeeded_len: list.len(),
                    bytes: r.bytes,
                    duration_ns: r.duration.map_or(0, |d| d.as_nanos() as u64),
                }
            };
            br.keys.push(list);
            br.owned.push(owned);
        }
        unsafe { *written = n };
        0
    }

    pub unsafe extern "C" fn touch(
        ud: *mut c_void,
        k: *const kvtier_key,
        n: usize,
        r: *const kvtier_request,
    ) -> i32 {
        let ks = unsafe { keys(k, n) };
        unsafe { b(ud) }.tier.touch(&ks, &unsafe { req(r) });
        0
    }

    pub unsafe extern "C" fn new_request(
        ud: *mut c_void,
        r: *const kvtier_request,
        policy: *mut i32,
    ) -> i32 {
        let p = unsafe { b(ud) }.tier.on_new_request(&unsafe { req(r) });
        unsafe {
            *policy = match p {
                OffloadPolicy::BlockLevel => KVTIER_OFFLOAD_BLOCK_LEVEL,
                OffloadPolicy::RequestLevel => KVTIER_OFFLOAD_REQUEST_LEVEL,
            }
        };
        0
    }

    pub unsafe extern "C" fn finished(ud: *mut c_void, r: *const kvtier_request) -> i32 {
        unsafe { b(ud) }
            .tier
            .on_request_finished(&unsafe { req(r) });
        0
    }

    pub unsafe extern "C" fn schedule_end(ud: *mut c_void) -> i32 {
        unsafe { b(ud) }.tier.on_schedule_end();
        0
    }

    pub unsafe extern "C" fn pending(ud: *mut c_void, out: *mut bool) -> i32 {
        let br = unsafe { b(ud) };
        unsafe { *out = !br.results.is_empty() || br.tier.has_pending_work() };
        0
    }

    pub unsafe extern "C" fn drain(ud: *mut c_void) -> i32 {
        match unsafe { b(ud) }.tier.drain() {
            Ok(()) => 0,
            Err(_) => kvtier::ffi::kvtier_status::Io as i32,
        }
    }

    pub unsafe extern "C" fn shutdown(ud: *mut c_void) -> i32 {
        match unsafe { b(ud) }.tier.shutdown() {
            Ok(()) => 0,
            Err(_) => kvtier::ffi::kvtier_status::Io as i32,
        }
    }

    pub unsafe extern "C" fn events(
        ud: *mut c_void,
        out: *mut kvtier_tier_event,
        cap: usize,
        written: *mut usize,
    ) -> i32 {
        let mut evs = Vec::new();
        unsafe { b(ud) }.tier.take_events(cap, &mut evs);
        assert!(evs.len() <= cap);
        for (i, e) in evs.iter().enumerate() {
            let mut c = kvtier_tier_event {
                kind: KVTIER_EVENT_STORED,
                key: kvtier::ffi::dialect::kvtier_key_buf {
                    len: 0,
                    bytes: [0; 64],
                },
            };
            c.kind = match e.kind {
                kvtier::events::EventKind::Stored => KVTIER_EVENT_STORED,
                kvtier::events::EventKind::Removed => KVTIER_EVENT_REMOVED,
                kvtier::events::EventKind::Cleared => KVTIER_EVENT_CLEARED,
            };
            if let Some(k) = e.key {
                c.key.len = k.len();
                c.key.bytes[..k.len()].copy_from_slice(k.as_bytes());
            }
            unsafe { *out.add(i) = c };
        }
        unsafe { *written = evs.len() };
        0
    }

    pub unsafe extern "C" fn destroy(ud: *mut c_void) {
        drop(unsafe { Box::from_raw(ud as *mut Bridge) });
    }
}
