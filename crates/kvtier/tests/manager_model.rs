//! Model-based test of the manager: random engine operations over a random,
//! fault-injecting tier (delays, failures, partial loads, duplicate and
//! unknown completions, completions through the thread-safe call), stores
//! completed in parts or naming every key given to `prepare_store` (so
//! also keys that other requests or promotions are writing), with the
//! invariants checked after every step, over both the reference primary
//! model and the real primary tier.  When every request finished and every
//! job drained, every slot is free or idle and every injected bogus report
//! was counted as a tier bug.  Half the requests that finish leave their
//! loads in flight and complete them after the finish; active requests
//! now and then unpin a key such a finished request holds (beyond their
//! own pins, as vLLM allows), and the late completion must then release
//! nothing: every pin a live request holds that no such unpin took stays
//! in its key's ref count.  Half the requests get token positions for
//! some keys, and a third of the runs have KV groups on: the reference
//! model checks those calls' arguments (its recency is coarser than the
//! tier's, which `crates/kvtier/tests/primary_model.rs` checks exactly).

use std::collections::HashMap;
use std::sync::Arc;

use parking_lot::Mutex;

use kvtier_core::primary::{PolicyKind, PrimaryConfig, PrimaryTier};
use kvtier_core::primary::{StoreOutcome, StorePlan};
use kvtier_core::request::{Request, RequestId};
use kvtier_core::tiering::backend::PrimaryBackend;
use kvtier_core::tiering::{
    Direction, JobId, JobRef, JobResult, LookupResult, ManagerOptions, OffloadPolicy,
    PromotionAnswer, RequestParams, SecondaryTier, TierLookup,
};
use kvtier_core::{Key, Result};

use kvtier_testkit::model;
use kvtier_testkit::probe::Probed;
use kvtier_testkit::rng::Rng;
use model::ModelPrimary;

fn key(i: u64) -> Key {
    Key::new(&i.to_le_bytes()).unwrap()
}

/// The fault-injecting tier's state, shared with the driver.
struct Faulty {
    rng: Rng,
    stored: std::collections::HashSet<Key>,
    /// Jobs not reported yet, with steps left before they finish.
    held: Vec<(JobRef, u32)>,
    /// Finished results waiting for a poll.
    ready: Vec<JobResult>,
    /// Results the driver reports through `complete_job`.
    via_queue: Vec<JobResult>,
    reported: HashMap<u64, u32>,
    given: std::collections::HashSet<u64>,
    bogus_reports: u64,
    faults_on: bool,
    request_level: bool,
    /// Requests started and not yet finished, as the tier heard of them.
    live: std::collections::HashSet<String>,
    started: u64,
    finished: u64,
    /// Calls that broke the contract (a request named after it finished).
    violations: Vec<String>,
}

impl Faulty {
    fn named(&mut self, what: &str, r: &Request) {
        if !self.live.contains(&r.name) {
            self.violations
                .push(format!("{what} named {} outside its life", r.name));
        }
    }
    fn finish(&mut self, job: &JobRef) {
        let fail = self.faults_on && self.rng.chance(20);
        let mut r = JobResult::new(job.id, !fail);
        if !fail && job.direction == Direction::Store {
            self.stored.extend(job.keys.iter().copied());
        }
        if fail && job.direction == Direction::Load && self.rng.chance(50) {
            let some: Vec<Key> = job
                .keys
                .iter()
                .copied()
                .filter(|_| self.rng.chance(50))
                .collect();
            r.succeeded_keys = Some(some);
        }
        *self.reported.entry(job.id.0).or_default() += 1;
        if self.faults_on && self.rng.chance(30) {
            self.via_queue.push(r.clone());
        } else {
            self.ready.push(r.clone());
        }
        if self.faults_on && self.rng.chance(5) {
            self.bogus_reports += 1;
            self.ready.push(r); // reported twice
        }
    }
    fn tick(&mut self) {
        let mut i = 0;
        while i < self.held.len() {
            if self.held[i].1 == 0 {
                let (job, _) = self.held.swap_remove(i);
                self.finish(&job);
            } else {
                self.held[i].1 -= 1;
                i += 1;
            }
        }
        if self.faults_on && self.rng.chance(5) {
            self.bogus_reports += 1;
            self.ready.push(JobResult::new(
                JobId(1_000_000 + self.rng.below(1000)),
                true,
            ));
        }
    }
    fn take(&mut self, job: JobRef) {
        assert!(
            self.given.insert(job.id.0),
            "job id {} given twice",
            job.id.0
        );
        assert_eq!(job.keys.len(), job.slots.len());
        let delay = if self.faults_on {
            self.rng.below(4) as u32
        } else {
            0
        };
        self.held.push((job, delay));
    }
}

struct FaultyTier(Arc<Mutex<Faulty>>);

impl SecondaryTier for FaultyTier {
    fn name(&self) -> &str {
        "faulty"
    }
    fn reports_through_complete_job(&self) -> bool {
        true
    }
    fn lookup(&mut self, key: &Key, r: &Request) -> TierLookup {
        let mut f = self.0.lock();
        f.named("lookup", r);
        if f.stored.contains(key) {
            TierLookup::Hit
        } else if f.faults_on && f.rng.chance(5) {
            TierLookup::Retry
        } else {
            TierLookup::Miss
        }
    }
    fn submit_store(&mut self, job: JobRef) {
        let mut f = self.0.lock();
        f.named("submit_store", &job.request);
        f.take(job)
    }
    fn submit_load(&mut self, job: JobRef) {
        let mut f = self.0.lock();
        f.named("submit_load", &job.request);
        f.take(job)
    }
    fn touch(&mut self, _keys: &[Key], r: &Request) {
        self.0.lock().named("touch", r);
    }
    fn on_request_finished(&mut self, r: &Request) {
        let mut f = self.0.lock();
        f.named("on_request_finished", r);
        f.live.remove(&r.name);
        f.finished += 1;
    }
    fn poll_finished(&mut self, max: usize, out: &mut Vec<JobResult>) {
        let mut f = self.0.lock();
        let n = max.min(f.ready.len());
        out.extend(f.ready.drain(..n));
    }
    fn on_new_request(&mut self, r: &Request) -> OffloadPolicy {
        let mut f = self.0.lock();
        if !f.live.insert(r.name.clone()) {
            f.violations.push(format!("{} started twice", r.name));
        }
        f.started += 1;
        if f.request_level {
            OffloadPolicy::RequestLevel
        } else {
            OffloadPolicy::BlockLevel
        }
    }
    fn on_schedule_end(&mut self) {
        self.0.lock().tick()
    }
    fn has_pending_work(&self) -> bool {
        let f = self.0.lock();
        !f.held.is_empty() || !f.ready.is_empty() || !f.via_queue.is_empty()
    }
    fn drain(&mut self) -> Result<()> {
        let mut f = self.0.lock();
        let held: Vec<JobRef> = f.held.drain(..).map(|(j, _)| j).collect();
        for j in &held {
            f.finish(j);
        }
        let q: Vec<JobResult> = f.via_queue.drain(..).collect();
        f.ready.extend(q);
        Ok(())
    }
    fn shutdown(&mut self) -> Result<()> {
        Ok(())
    }
}

#[derive(Default)]
struct Req {
    pins: Vec<Key>,
    /// Each plan not completed yet: its keys still to complete, and every
    /// key the `prepare_store` call named.
    stores: Vec<(Vec<Key>, Vec<Key>)>,
    finished: bool,
}

fn run<T: PrimaryBackend>(
    seed: u64,
    backend: T,
    check: &dyn Fn(&T) -> std::result::Result<(), String>,
    refs: &dyn Fn(&T, &Key) -> Option<i32>,
    request_level: bool,
    exact: bool,
) -> (Probed<T>, u64) {
    let opts = ManagerOptions {
        promotion_answer: if seed % 2 == 0 {
            PromotionAnswer::Retry
        } else {
            PromotionAnswer::HitPending
        },
        // Keys are 8 bytes: with groups, all in group 0.
        kv_groups: seed % 3 == 0,
        ..Default::default()
    };
    let m = Probed::new(backend, opts);
    let faulty = Arc::new(Mutex::new(Faulty {
        rng: Rng(seed * 7919 + 1),
        stored: Default::default(),
        held: Vec::new(),
        ready: Vec::new(),
        via_queue: Vec::new(),
        reported: HashMap::new(),
        given: Default::default(),
        bogus_reports: 0,
        faults_on: true,
        request_level,
        live: Default::default(),
        started: 0,
        finished: 0,
        violations: Vec::new(),
    }));
    let tier_index = m.add_tier(Box::new(FaultyTier(faulty.clone()))).unwrap();
    let mut rng = Rng(seed + 17);
    let mut reqs: HashMap<String, Req> = HashMap::new();
    let mut ids: HashMap<String, RequestId> = HashMap::new();
    let mut next_req = 0u64;
    let mut plan = StorePlan::default();
    let mut slots = Vec::new();
    // Per key, pins active requests' unpins took from finished requests
    // and no late completion was charged with yet.
    let mut spent: HashMap<Key, u32> = HashMap::new();
    let (mut taken, mut charged, mut dropped) = (0u64, 0u64, 0u64);
    for step in 0..3000 {
        let names: Vec<String> = reqs
            .iter()
            .filter(|(_, r)| !r.finished)
            .map(|(n, _)| n.clone())
            .collect();
        let op = rng.below(100);
        if names.is_empty() || op < 8 {
            if names.len() < 6 {
                let name = format!("req{next_req}");
                next_req += 1;
                let id = m.request_begin(&name, RequestParams::default()).unwrap().id;
                ids.insert(name.clone(), id);
                if rng.chance(50) {
                    // Token positions for some keys the request may present.
                    let ks: Vec<Key> = (0..1 + rng.below(6)).map(|_| key(rng.below(40))).collect();
                    let pos: Vec<u64> = ks.iter().map(|_| 16 * (1 + rng.below(8))).collect();
                    m.set_positions(ids[&name], &ks, &pos).unwrap();
                }
                reqs.insert(name, Req::default());
            }
        } else {
            let name = names[rng.below(names.len() as u64) as usize].clone();
            match op {
                8..=35 => {
                    let k = key(rng.below(40));
                    let r = m.lookup(ids[&name], &k).unwrap();
                    if r == LookupResult::Hit && rng.chance(50) {
                        m.prepare_load(ids[&name], &[k], &mut slots).unwrap();
                        m.touch(ids[&name], &[k]).unwrap();
                        reqs.get_mut(&name).unwrap().pins.push(k);
                    }
                }
                36..=55 => {
                    let n = 1 + rng.below(5);
                    let ks: Vec<Key> = (0..n).map(|_| key(rng.below(40))).collect();
                    if m.prepare_store(ids[&name], &ks, &mut plan).unwrap() == StoreOutcome::Planned
                        && !plan.to_store.is_empty()
                    {
                        reqs.get_mut(&name)
                            .unwrap()
                            .stores
                            .push((plan.to_store.clone(), ks));
                    }
                }
                56..=62 => {
                    let r = reqs.get_mut(&name).unwrap();
                    if let Some(k) = r.pins.pop() {
                        m.complete_load(ids[&name], &[k]).unwrap();
                    }
                }
                63..=70 => {
                    let r = reqs.get_mut(&name).unwrap();
                    // Half the time the request finishes with its loads
                    // still in flight (an abort) and completes them later.
                    if rng.chance(50) {
                        for k in r.pins.drain(..) {
                            m.complete_load(ids[&name], &[k]).unwrap();
                        }
                    }
                    r.finished = true;
                    m.request_finished(ids[&name]).unwrap();
                }
                71..=71 if rng.chance(20) => {
                    m.reset_cache().unwrap();
                    for r in reqs.values_mut() {
                        r.pins.clear();
                    }
                    // Every pin is dropped, taken ones too.
                    dropped += spent.drain().map(|(_, c)| c as u64).sum::<u64>();
                    // completions of stores from before the reset are ignored
                    let pending: Vec<(String, Vec<Key>)> = reqs
                        .iter_mut()
                        .flat_map(|(n, r)| r.stores.drain(..).map(move |s| (n.clone(), s.0)))
                        .collect();
                    for (n, s) in pending {
                        let finalized = reqs[&n].finished;
                        match m.complete_store(ids[&n], &s, true) {
                            Err(kvtier_core::Error::KeysIgnored { report, .. }) => {
                                assert!(!finalized, "{n}");
                                assert_eq!(report, Default::default(), "{n}: nothing in flight");
                            }
                            Err(kvtier_core::Error::UnknownRequest(_)) => assert!(finalized, "{n}"),
                            other => panic!("{n}: {other:?}"),
                        }
                    }
                    reqs.retain(|_, r| !r.finished);
                    if rng.chance(50) {
                        m.reset_flushed().unwrap();
                    }
                }
                72..=72 => m.reset_flushed().unwrap(),
                _ => m.schedule_end().unwrap(),
            }
        }
        // complete some stores of any request (finished ones too)
        if rng.chance(30) {
            let with: Vec<String> = reqs
                .iter()
                .filter(|(_, r)| !r.stores.is_empty())
                .map(|(n, _)| n.clone())
                .collect();
            if !with.is_empty() {
                let n = with[rng.below(with.len() as u64) as usize].clone();
                let r = reqs.get_mut(&n).unwrap();
                let (planned, named) = r.stores[0].clone();
                let success = rng.chance(85);
                let pick = rng.below(3);
                let keys: Vec<Key> = if pick == 0 && planned.len() > 1 {
                    // A part of the plan now, the rest later.
                    let part = 1 + rng.below(planned.len() as u64 - 1) as usize;
                    planned[..part].to_vec()
                } else if pick == 1 {
                    // Every key named at prepare_store: only the request's
                    // own write-pending keys (of this plan or an earlier
                    // one) are acted on; other requests' and promotions'
                    // are left alone.
                    named
                } else {
                    planned
                };
                let answer = m.complete_store(ids[&n], &keys, success);
                let mut acted: Vec<Key> = Vec::new();
                for k in &keys {
                    if !acted.contains(k) && r.stores.iter().any(|(p, _)| p.contains(k)) {
                        acted.push(*k);
                    }
                }
                // Every key named that was not acted on was left alone,
                // and the answer says so exactly then.
                let left = keys.len() - acted.len();
                let report = match answer {
                    Ok(report) if left == 0 => report,
                    Err(kvtier_core::Error::KeysIgnored { report, .. }) if left > 0 => report,
                    other => panic!("seed {seed}: {left} keys left alone, answered {other:?}"),
                };
                assert_eq!(report.left_alone(), left, "seed {seed}");
                for (p, _) in r.stores.iter_mut() {
                    p.retain(|k| !acted.contains(k));
                }
                r.stores.retain(|(p, _)| !p.is_empty());
                assert_eq!(report.ready + report.dropped, acted.len(), "seed {seed}");
                if pick != 1 {
                    assert_eq!(report.foreign + report.already_ready, 0, "seed {seed}");
                }
                if r.finished && r.stores.is_empty() && r.pins.is_empty() {
                    reqs.remove(&n);
                }
            }
        }
        // complete a load of a finished request: its handle is known to
        // complete_load until its last pin is released
        if rng.chance(30) {
            let with: Vec<String> = reqs
                .iter()
                .filter(|(_, r)| r.finished && !r.pins.is_empty())
                .map(|(n, _)| n.clone())
                .collect();
            if !with.is_empty() {
                let n = with[rng.below(with.len() as u64) as usize].clone();
                let r = reqs.get_mut(&n).unwrap();
                let k = r.pins.swap_remove(rng.below(r.pins.len() as u64) as usize);
                let before = refs(&m.primary(), &k);
                m.complete_load(ids[&n], &[k]).unwrap();
                match spent.get_mut(&k) {
                    Some(c) if *c > 0 => {
                        // Charged: nothing released.
                        *c -= 1;
                        charged += 1;
                        assert_eq!(
                            refs(&m.primary(), &k),
                            before,
                            "seed {seed} step {step}: {n} {k}"
                        );
                    }
                    _ => {}
                }
                if r.pins.is_empty() {
                    assert!(
                        matches!(
                            m.complete_load(ids[&n], &[k]),
                            Err(kvtier_core::Error::UnknownRequest(_))
                        ),
                        "seed {seed}: {n} is forgotten with its last pin"
                    );
                }
            }
        }
        // an active request unpins a key a finished request holds (not
        // one it holds itself): the finished request's pin is taken
        if rng.chance(15) {
            let mut held: HashMap<Key, u32> = HashMap::new();
            for r in reqs.values().filter(|r| r.finished) {
                for k in &r.pins {
                    *held.entry(*k).or_default() += 1;
                }
            }
            let mut open: Vec<Key> = held
                .into_iter()
                .filter(|(k, n)| *n > spent.get(k).copied().unwrap_or(0))
                .map(|(k, _)| k)
                .collect();
            open.sort_by(|a, b| a.as_bytes().cmp(b.as_bytes()));
            let unpinner = reqs
                .iter()
                .filter(|(_, r)| !r.finished)
                .map(|(n, _)| n.clone())
                .min();
            if let (false, Some(u)) = (open.is_empty(), unpinner) {
                let k = open[rng.below(open.len() as u64) as usize];
                if !reqs[&u].pins.contains(&k) {
                    m.complete_load(ids[&u], &[k]).unwrap();
                    *spent.entry(k).or_default() += 1;
                    taken += 1;
                }
            }
        }
        reqs.retain(|_, r| !(r.finished && r.stores.is_empty() && r.pins.is_empty()));
        spent.retain(|_, c| *c > 0);
        // completions reported from another thread
        let queued: Vec<JobResult> = faulty.lock().via_queue.drain(..).collect();
        if !queued.is_empty() {
            let m = &m;
            std::thread::scope(|sc| {
                sc.spawn(move || {
                    for r in queued {
                        m.complete_job(tier_index, r).unwrap();
                    }
                });
            });
        }
        check(&m.primary()).unwrap_or_else(|e| panic!("seed {seed} step {step}: {e}"));
        // Every pin live requests hold that no unpin took is counted.
        let mut need: HashMap<Key, i64> = HashMap::new();
        for r in reqs.values() {
            for k in &r.pins {
                *need.entry(*k).or_default() += 1;
            }
        }
        for (k, n) in need {
            let n = n - spent.get(&k).copied().unwrap_or(0) as i64;
            if n <= 0 {
                continue;
            }
            let c = refs(&m.primary(), &k).unwrap_or(0);
            assert!(
                c as i64 >= n,
                "seed {seed} step {step}: live requests hold {n} pins of {k} but its ref count is {c}"
            );
        }
    }
    // Wind down: finish every request, complete every store, drain every job.
    faulty.lock().faults_on = false;
    for (n, r) in reqs.iter_mut() {
        for k in r.pins.drain(..) {
            m.complete_load(ids[n], &[k]).unwrap();
            if let Some(c) = spent.get_mut(&k).filter(|c| **c > 0 && r.finished) {
                *c -= 1;
                charged += 1;
            }
        }
        if !r.finished {
            m.request_finished(ids[n]).unwrap();
        }
        for (planned, _) in r.stores.drain(..) {
            m.complete_store(ids[n], &planned, true).unwrap();
        }
    }
    for _ in 0..50 {
        let q: Vec<JobResult> = faulty.lock().via_queue.drain(..).collect();
        for r in q {
            m.complete_job(tier_index, r).unwrap();
        }
        if !m.has_pending_work().unwrap() {
            break;
        }
        m.schedule_end().unwrap();
    }
    assert!(
        !m.has_pending_work().unwrap(),
        "seed {seed}: work left after draining"
    );
    check(&m.primary()).unwrap();
    let stats = m.stats().unwrap();
    let get = |tier: Option<usize>, name: &str| {
        stats
            .iter()
            .find(|s| s.tier == tier && s.stat.name == name)
            .unwrap()
            .stat
            .value
    };
    assert_eq!(get(None, "active_requests"), 0.0);
    assert!(
        get(Some(1), "promotion_jobs") > 0.0 && get(Some(1), "cascade_jobs") > 0.0,
        "seed {seed}: the run moved blocks"
    );
    assert!(
        get(Some(1), "promotion_failures") > 0.0 && get(Some(1), "cascade_failures") > 0.0,
        "seed {seed}: faults were injected"
    );
    assert_eq!(get(None, "jobs_in_flight"), 0.0);
    let f = faulty.lock();
    assert_eq!(
        get(Some(1), "tier_bugs") as u64,
        f.bogus_reports,
        "seed {seed}: every bogus report counted, nothing else"
    );
    assert!(
        f.reported.values().all(|&n| n == 1),
        "each job finished once by the tier itself"
    );
    assert_eq!(f.reported.len(), f.given.len());
    assert!(f.violations.is_empty(), "seed {seed}: {:?}", f.violations);
    assert_eq!(
        taken,
        charged + dropped,
        "seed {seed}: every taken pin was charged once, or dropped by a reset"
    );
    assert_eq!(
        (f.finished, f.live.len()),
        (f.started, 0),
        "seed {seed}: every request finished exactly once"
    );
    drop(f);
    for i in 0..40 {
        if !exact {
            break;
        }
        if let Some(r) = refs(&m.primary(), &key(i)) {
            assert_eq!(r, 0, "seed {seed}: key {i} left with ref count {r}");
        }
    }
    (m, taken)
}

#[test]
fn random_operations_over_the_model_primary() {
    let mut taken = 0;
    for seed in 1..=12 {
        taken += run(
            seed,
            ModelPrimary::new(12),
            &ModelPrimary::check,
            &|model, k| model.refs(k),
            seed % 3 == 0,
            true,
        )
        .1;
    }
    assert!(taken > 0, "unpins took finished requests' pins");
}

#[test]
fn random_operations_over_the_real_primary() {
    let mut taken = 0;
    for seed in 1..=12 {
        let policy = if seed % 2 == 0 {
            PolicyKind::Lru
        } else {
            PolicyKind::Arc
        };
        let tier = PrimaryTier::new(PrimaryConfig {
            capacity: 12,
            policy,
            event_capacity: 256,
            ..Default::default()
        })
        .unwrap();
        let (m, t) = run(
            seed,
            tier,
            &PrimaryTier::check_invariants,
            &|real, k| real.ref_count(k),
            seed % 3 == 0,
            true,
        );
        let st = m.primary().stats();
        assert_eq!(st.write_pending, 0, "seed {seed}: {st:?}");
        assert_eq!(st.pinned, 0, "seed {seed}: every slot free or idle: {st:?}");
        taken += t;
    }
    assert!(taken > 0, "unpins took finished requests' pins");
}
