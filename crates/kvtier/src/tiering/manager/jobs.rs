//! Jobs on the secondary tiers: applying finished ones, staging
//! promotions, and submitting jobs (cascades are in `cascade.rs`).

use std::sync::Arc;
use std::time::{Duration, Instant};

use super::PrimaryBackend;
use super::{
    Direction, Error, Job, JobEntry, JobId, JobRef, JobResult, Key, Request, RequestId, Staged,
    State, StoreOutcome,
};

impl<P: PrimaryBackend> State<P> {
    /// Applies one finished job reported by tier `t` (internal index).
    pub(super) fn finish_job(&mut self, t: usize, r: JobResult) {
        let owner = match self.jobs.get(&r.id) {
            None => {
                let name = self.tiers[t].name.clone();
                self.tiers[t].c.tier_bugs += 1;
                self.tier_bug(
                    &name,
                    format!(
                        "{}",
                        Error::UnknownJob {
                            job: r.id.0,
                            tier: name.to_string()
                        }
                    ) + " (never given to it, or already reported); ignored",
                );
                return;
            }
            Some(e) => e.tier,
        };
        if owner != t {
            let name = self.tiers[t].name.clone();
            let other = self.tiers[owner].name.clone();
            self.tiers[t].c.tier_bugs += 1;
            self.tier_bug(
                &name,
                format!(
                    "reported job {} that belongs to tier {other:?}; ignored",
                    r.id.0
                ),
            );
            return;
        }
        let Some(entry) = self.jobs.remove(&r.id) else {
            return;
        };
        let job = entry.job.clone();
        let (epoch, submitted) = (entry.epoch, entry.submitted);
        drop(entry);
        self.apply_finished(t, &job, &r, epoch, submitted);
        self.recycle_job(job);
    }

    /// Applies finished job `job` of tier `t` (result `r`), submitted in
    /// cache epoch `epoch` at `submitted`.
    fn apply_finished(
        &mut self,
        t: usize,
        job: &Job,
        r: &JobResult,
        epoch: u64,
        submitted: Instant,
    ) {
        let elapsed = r.duration.unwrap_or_else(|| submitted.elapsed());
        if job.direction == Direction::Store {
            let tier = &mut self.tiers[t];
            tier.stores_in_flight = tier.stores_in_flight.saturating_sub(1);
        }
        if epoch != self.epoch {
            // Orphaned by a reset: its slots belong to the new epoch now.
            self.c.stale_completions += 1;
            return;
        }
        match job.direction {
            Direction::Load => self.finish_load(t, job, r, elapsed),
            Direction::Store => {
                let block_bytes = self.opts.block_bytes;
                let tier = &mut self.tiers[t];
                if r.success {
                    tier.c.bytes_stored += r.bytes;
                } else {
                    tier.c.cascade_failures += 1;
                }
                tier.c.stores.record(elapsed, job.keys.len());
                if let Some(d) = &mut tier.detector {
                    let units = if r.bytes > 0 {
                        r.bytes
                    } else if block_bytes > 0 {
                        block_bytes * job.keys.len() as u64
                    } else {
                        job.keys.len() as u64
                    };
                    d.on_store_finished(r.success, units, elapsed);
                }
                if let Err(e) = self.primary.unpin_for_transfer_in(&job.keys, &job.slots) {
                    self.c.internal_errors += 1;
                    self.log(format!(
                        "internal error: unpinning cascade job {} failed: {e}",
                        job.id.0
                    ));
                }
            }
        }
    }

    /// Applies a finished promotion: its slots become ready or are dropped
    /// through the promotion's own completion, which acts only on slots
    /// promotions reserved (never on a request's write-pending key).
    fn finish_load(&mut self, t: usize, job: &Job, r: &JobResult, elapsed: Duration) {
        self.tiers[t].c.loads.record(elapsed, job.keys.len());
        if r.success {
            self.tiers[t].c.bytes_loaded += r.bytes;
            self.primary.complete_promotion(&job.keys, true);
            self.note_promotion_done(t, job, &job.keys);
            return;
        }
        self.tiers[t].c.promotion_failures += 1;
        let Some(list) = &r.succeeded_keys else {
            self.primary.complete_promotion(&job.keys, false);
            self.note_promotion_done(t, job, &[]);
            return;
        };
        if let Some(bad) = list.iter().find(|k| !job.keys.contains(k)) {
            let name = self.tiers[t].name.clone();
            self.tiers[t].c.tier_bugs += 1;
            self.tier_bug(&name, format!(
                "load job {} listed key {bad} as arrived, which is not in the job; the whole job counts as failed",
                job.id.0
            ));
            self.primary.complete_promotion(&job.keys, false);
            self.note_promotion_done(t, job, &[]);
            return;
        }
        self.tiers[t].c.partial_promotions += 1;
        self.tiers[t].c.bytes_loaded += r.bytes;
        self.primary.complete_promotion(list, true);
        self.note_promotion_done(t, job, list);
        let mut rest = std::mem::take(&mut self.keys_b);
        rest.clear();
        rest.extend(job.keys.iter().filter(|k| !list.contains(k)));
        self.primary.complete_promotion(&rest, false);
        self.keys_b = rest;
    }

    /// Reserves a primary slot for `key` (written by the promotion, not by
    /// request `rid`) and stages its load from tier `t`.
    pub(super) fn start_promotion(&mut self, t: usize, rid: RequestId, key: &Key) -> bool {
        let mut plan = std::mem::take(&mut self.plan);
        let ok = match self
            .primary
            .prepare_promotion(rid, std::slice::from_ref(key), &mut plan)
        {
            Ok(StoreOutcome::Planned) if plan.to_store.len() == 1 => {
                let slot = plan.slots[0];
                if let Some(e) = self.staged.iter_mut().find(|e| e.tier == t && e.req == rid) {
                    e.keys.push(*key);
                    e.slots.push(slot);
                } else {
                    let (mut keys, mut slots) = self.spare_staged.pop().unwrap_or_default();
                    keys.push(*key);
                    slots.push(slot);
                    self.staged.push(Staged {
                        tier: t,
                        req: rid,
                        keys,
                        slots,
                    });
                    if let Some(st) = self.reqs.get_mut(&rid) {
                        st.staged += 1;
                    }
                }
                self.c.promotions_started += 1;
                true
            }
            Ok(StoreOutcome::Planned) => {
                self.c.promotions_not_admitted += 1;
                false
            }
            Ok(StoreOutcome::Refused) => {
                self.c.allocation_failures += 1;
                false
            }
            Err(e) => {
                self.c.internal_errors += 1;
                self.log(format!(
                    "internal error: reserving a slot for a promotion failed: {e}"
                ));
                false
            }
        };
        self.plan = plan;
        ok
    }

    /// Submits a job of `keys` in `slots` to tier `t` for `request`; the
    /// job comes from the pool of finished ones when it has one.
    pub(super) fn submit(
        &mut self,
        t: usize,
        direction: Direction,
        keys: &[Key],
        slots: &[u32],
        request: Request,
    ) {
        let id = JobId(self.next_job);
        self.next_job += 1;
        let pooled = self.spare_jobs.pop().and_then(|mut job| {
            let j = Arc::get_mut(&mut job)?;
            j.id = id;
            j.direction = direction;
            j.keys.extend_from_slice(keys);
            j.slots.extend_from_slice(slots);
            j.request = request.clone();
            Some(job)
        });
        let job = pooled.unwrap_or_else(|| {
            Arc::new(Job {
                id,
                direction,
                keys: keys.to_vec(),
                slots: slots.to_vec(),
                request,
            })
        });
        self.jobs.insert(
            id,
            JobEntry {
                tier: t,
                job: job.clone(),
                submitted: Instant::now(),
                epoch: self.epoch,
            },
        );
        let tier = &mut self.tiers[t];
        match direction {
            Direction::Store => {
                tier.stores_in_flight += 1;
                tier.tier.submit_store(job);
            }
            Direction::Load => tier.tier.submit_load(job),
        }
    }

    /// Keeps finished `job` for a later submission if no tier holds it
    /// any more (emptied: its request let go), up to [`SPARE_JOBS`].
    fn recycle_job(&mut self, mut job: JobRef) {
        if self.spare_jobs.len() >= SPARE_JOBS {
            return;
        }
        if let Some(j) = Arc::get_mut(&mut job) {
            j.keys.clear();
            j.slots.clear();
            j.request = self.no_request.clone();
            self.spare_jobs.push(job);
        }
    }

    /// Keeps the buffers of a submitted staged promotion for a later one.
    pub(super) fn recycle_staged(&mut self, mut keys: Vec<Key>, mut slots: Vec<u32>) {
        if self.spare_staged.len() < SPARE_JOBS {
            keys.clear();
            slots.clear();
            self.spare_staged.push((keys, slots));
        }
    }
}

/// Most finished jobs (and staged promotions' buffers) kept for reuse.
const SPARE_JOBS: usize = 256;

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use parking_lot::Mutex;

    use crate::key::Key;
    use crate::primary::{PrimaryConfig, PrimaryTier, StorePlan};
    use crate::request::Request;
    use crate::tiering::{
        JobRef, JobResult, Manager, ManagerOptions, RequestParams, SecondaryTier, TierLookup,
    };

    /// What a tier saw of one job: where it lives, its keys, its request.
    type Seen = (usize, Vec<Key>, String);

    /// A tier that reports every job finished at the next poll, and
    /// keeps the jobs it was given if `keep`.
    struct Jobs {
        keep: bool,
        pending: Vec<JobRef>,
        kept: Vec<JobRef>,
        seen: Arc<Mutex<Vec<Seen>>>,
    }

    impl SecondaryTier for Jobs {
        fn name(&self) -> &str {
            "jobs"
        }
        fn lookup(&mut self, _key: &Key, _request: &Request) -> TierLookup {
            TierLookup::Miss
        }
        fn submit_store(&mut self, job: JobRef) {
            let at = Arc::as_ptr(&job) as usize;
            let name = job.request.name.clone();
            self.seen.lock().push((at, job.keys.clone(), name));
            self.pending.push(job);
        }
        fn submit_load(&mut self, job: JobRef) {
            self.submit_store(job)
        }
        fn poll_finished(&mut self, _max: usize, out: &mut Vec<JobResult>) {
            for job in self.pending.drain(..) {
                out.push(JobResult::new(job.id, true));
                if self.keep {
                    self.kept.push(job);
                }
            }
        }
        fn has_pending_work(&self) -> bool {
            !self.pending.is_empty()
        }
        fn drain(&mut self) -> crate::Result<()> {
            Ok(())
        }
        fn shutdown(&mut self) -> crate::Result<()> {
            Ok(())
        }
    }

    #[test]
    fn a_finished_job_no_tier_holds_is_reused_with_the_next_keys_and_request() {
        for keep in [false, true] {
            let primary = PrimaryTier::new(PrimaryConfig {
                capacity: 8,
                ..Default::default()
            })
            .unwrap();
            let m = Manager::new(primary, ManagerOptions::default());
            let seen = Arc::new(Mutex::new(Vec::new()));
            m.add_tier(Box::new(Jobs {
                keep,
                pending: Vec::new(),
                kept: Vec::new(),
                seen: seen.clone(),
            }))
            .unwrap();
            for (name, keys) in [("a", &[b"k1", b"k2"][..]), ("b", &[b"k3"][..])] {
                let r = m.request_begin(name, RequestParams::default()).unwrap().id;
                let keys: Vec<Key> = keys.iter().map(|k| Key::new(*k).unwrap()).collect();
                let mut plan = StorePlan::default();
                m.prepare_store(r, &keys, &mut plan).unwrap();
                m.complete_store(r, &plan.to_store, true).unwrap();
                m.request_finished(r).unwrap();
                // The job finishes at this poll.
                m.schedule_end().unwrap();
            }
            let seen = seen.lock();
            assert_eq!(seen.len(), 2, "keep: {keep}");
            let keys =
                |ks: &[&[u8]]| -> Vec<Key> { ks.iter().map(|k| Key::new(k).unwrap()).collect() };
            assert_eq!(
                (&seen[0].1, seen[0].2.as_str()),
                (&keys(&[b"k1", b"k2"]), "a")
            );
            assert_eq!((&seen[1].1, seen[1].2.as_str()), (&keys(&[b"k3"]), "b"));
            // Reused only when the tier let the first job go.
            assert_eq!(seen[0].0 == seen[1].0, !keep, "keep: {keep}");
        }
    }
}
