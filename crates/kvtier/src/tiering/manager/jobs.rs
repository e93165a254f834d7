//! Jobs on the secondary tiers: applying finished ones, staging
//! promotions, and submitting jobs (cascades are in `cascade.rs`).

use std::sync::Arc;
use std::time::{Duration, Instant};

use super::PrimaryBackend;
use super::{
    Direction, Error, Job, JobEntry, JobId, JobResult, Key, Request, RequestId, Staged, State,
    StoreOutcome,
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
        let job = entry.job;
        let elapsed = r.duration.unwrap_or_else(|| entry.submitted.elapsed());
        if job.direction == Direction::Store {
            let tier = &mut self.tiers[t];
            tier.stores_in_flight = tier.stores_in_flight.saturating_sub(1);
        }
        if entry.epoch != self.epoch {
            // Orphaned by a reset: its slots belong to the new epoch now.
            self.c.stale_completions += 1;
            return;
        }
        match job.direction {
            Direction::Load => self.finish_load(t, &job, &r, elapsed),
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
                    self.staged.push(Staged {
                        tier: t,
                        req: rid,
                        keys: vec![*key],
                        slots: vec![slot],
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

    pub(super) fn submit(
        &mut self,
        t: usize,
        direction: Direction,
        keys: Vec<Key>,
        slots: Vec<u32>,
        request: Request,
    ) {
        let id = JobId(self.next_job);
        self.next_job += 1;
        let job = Arc::new(Job {
            id,
            direction,
            keys,
            slots,
            request,
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
}
