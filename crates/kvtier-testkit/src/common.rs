//! A scriptable in-memory secondary tier for manager tests, managers over
//! the reference model of the primary tier, and the calls on a manager
//! that tests make the same way (keys, stats, whole stores).

pub use crate::model;
use crate::probe::Probed;

use parking_lot::Mutex;
use std::collections::HashSet;
use std::sync::Arc;

use kvtier_core::Key;
use kvtier_core::events::Event;
use kvtier_core::primary::StorePlan;
use kvtier_core::request::{Locality, Medium, Request, RequestId};
use kvtier_core::stats::Stat;
use kvtier_core::tiering::PrimaryBackend;
use kvtier_core::tiering::{
    Direction, JobId, JobRef, JobResult, Manager, ManagerOptions, OffloadPolicy, SecondaryTier,
    TierLookup,
};

/// The report of a store completion, whichever way it came back, checking
/// the rule of the answer: `Ok` exactly when no key named was left alone;
/// else `KeysIgnored` carrying the report (all 0 when no store was in
/// flight).
pub fn report_of(
    answer: kvtier_core::Result<kvtier_core::primary::CompleteStoreReport>,
) -> kvtier_core::primary::CompleteStoreReport {
    match answer {
        Ok(r) => {
            assert_eq!(r.left_alone(), 0, "{r:?} came back Ok");
            r
        }
        Err(kvtier_core::Error::KeysIgnored { report, message }) => {
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
pub fn ignored_keys<T: std::fmt::Debug>(answer: &kvtier_core::Result<T>) -> bool {
    matches!(answer, Err(kvtier_core::Error::KeysIgnored { .. }))
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
    fn drain(&mut self) -> kvtier_core::Result<()> {
        let mut s = self.s.lock();
        s.drains += 1;
        s.log.push("drain".into());
        if s.fail_drain {
            return Err(kvtier_core::Error::Io {
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
    fn shutdown(&mut self) -> kvtier_core::Result<()> {
        let mut s = self.s.lock();
        s.shutdowns += 1;
        s.log.push("shutdown".into());
        if s.fail_shutdown {
            return Err(kvtier_core::Error::Io {
                context: "closing test tier".into(),
                source: std::io::Error::other("device busy"),
            });
        }
        Ok(())
    }
}

/// A manager over the reference model with `capacity` slots.
pub fn model_manager(capacity: u32, opts: ManagerOptions) -> Probed<model::ModelPrimary> {
    Probed::new(model::ModelPrimary::new(capacity), opts)
}

/// `f` of the reference model `m` drives (`m` from [`model_manager`]).
pub fn with_model<R>(
    m: &Probed<model::ModelPrimary>,
    f: impl FnOnce(&model::ModelPrimary) -> R,
) -> R {
    f(&m.primary())
}

/// Ref count of `key` in the model `m` drives (-1 write pending, `None` absent).
pub fn model_refs(m: &Probed<model::ModelPrimary>, key: &Key) -> Option<i32> {
    with_model(m, |model| model.refs(key))
}

pub fn stat<P: PrimaryBackend>(m: &Manager<P>, tier: Option<usize>, name: &str) -> f64 {
    m.stats()
        .unwrap()
        .into_iter()
        .find(|s| s.tier == tier && s.stat.name == name)
        .unwrap_or_else(|| panic!("no stat {name} for {tier:?}"))
        .stat
        .value
}

/// Stores `keys` through `m` for request `r`: every slot the plan names
/// is filled with its key's first byte, then the plan completes as
/// written.  The plan.
pub fn store_filled<P: PrimaryBackend>(m: &Manager<P>, r: RequestId, keys: &[Key]) -> StorePlan {
    let mut plan = StorePlan::default();
    m.prepare_store(r, keys, &mut plan).unwrap();
    let slots = m.slot_memory().unwrap();
    for (k, &slot) in plan.to_store.iter().zip(&plan.slots) {
        let block = vec![k.as_bytes()[0]; slots.slot_bytes()];
        slots.write(slot, 0, &block).unwrap();
    }
    let done = plan.to_store.clone();
    m.complete_store(r, &done, true).unwrap();
    plan
}

/// How a test registers its tier: as a Rust tier, or behind a C vtable.
pub type Wrap = fn(TestTier) -> Box<dyn SecondaryTier>;

/// The tier as is.
pub fn rust(t: TestTier) -> Box<dyn SecondaryTier> {
    Box::new(t)
}
