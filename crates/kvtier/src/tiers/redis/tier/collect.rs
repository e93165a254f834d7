//! Collecting what the workers did: applying their reports of jobs,
//! existence checks and probes to what the tier knows, its breaker and its
//! counters; failing jobs without sending them; and quiescing (cancelling
//! queued tasks and waiting for the running ones).

use std::sync::atomic::Ordering;
use std::time::Instant;

use super::super::outcome::Cause;
use super::super::report;
use super::super::worker::{Done, JobDone, Task};
use super::RedisTier;
use crate::tiering::{Direction, JobRef};
use crate::tiers::kit::settled;

impl RedisTier {
    /// Applies every report the workers have sent, without waiting.
    pub(super) fn collect(&mut self) {
        while let Ok(d) = self.done_rx.try_recv() {
            self.apply(d);
        }
        let n = self.shared.connect_failures.load(Ordering::Acquire);
        if n > self.connect_failures_seen {
            let cause = Cause::ALL
                .get(self.shared.last_connect_cause.load(Ordering::Relaxed))
                .copied()
                .unwrap_or(Cause::Other);
            let seen = n - self.connect_failures_seen;
            report::connect_failed(&mut self.reporter, &self.nodes, seen, cause);
            self.connect_failures_seen = n;
        }
    }

    pub(super) fn apply(&mut self, done: Done) {
        match done {
            Done::Job(d) => self.apply_job(d),
            Done::Exists {
                keys,
                present,
                failure,
            } => {
                for k in &keys {
                    self.pending.remove(k);
                }
                match failure {
                    Some(c) => {
                        self.record_failure(c);
                        let n = keys.len();
                        self.reporter
                            .failed(|| format!("existence check of {n} keys"), c);
                        // Answer MISS rather than RETRY forever while the
                        // server is unwell.
                        for k in keys {
                            self.mark_absent(k);
                        }
                    }
                    None => {
                        self.record_success();
                        for (k, p) in keys.into_iter().zip(present) {
                            if p {
                                self.absent.remove(&k);
                                if !self.known.contains_key(&k) {
                                    self.remember(k, false);
                                }
                            } else {
                                self.mark_absent(k);
                            }
                        }
                    }
                }
            }
            Done::Probe(failure) => {
                self.breaker.probe_in_flight = false;
                match failure {
                    None => self.close_breaker(),
                    Some(c) => {
                        self.counters.probes_failed += 1;
                        self.counters.failures.count(c);
                        self.reporter.failed(|| "probe of the server".into(), c);
                        if self.breaker.open_since.is_some() {
                            self.breaker.open_since = Some(Instant::now());
                        }
                    }
                }
            }
        }
    }

    pub(super) fn apply_job(&mut self, d: JobDone) {
        self.in_flight -= 1;
        self.counters.round_trips += d.round_trips;
        let job = &d.job;
        match d.failure {
            Some(c) => {
                self.record_failure(c);
                let what = match d.direction {
                    Direction::Store => "store",
                    Direction::Load => "load",
                };
                let n = job.keys.len();
                self.reporter
                    .failed(|| format!("{what} job {} of {n} blocks", job.id.0), c);
            }
            None => self.record_success(),
        }
        let result = match d.direction {
            Direction::Store => {
                for &p in &d.done {
                    self.remember(job.keys[p], true);
                }
                self.counters.blocks_stored += d.done.len() as u64;
                self.counters.bytes_stored += d.bytes;
                if d.failure.is_some() {
                    self.counters.store_jobs_failed += 1;
                }
                let arrived = std::iter::empty();
                settled(job, d.failure.is_none(), arrived, d.bytes, Some(d.duration))
            }
            Direction::Load => {
                for &p in &d.missing {
                    self.forget(&job.keys[p]);
                }
                for &(p, _) in &d.corrupt {
                    self.forget(&job.keys[p]);
                }
                for &p in &d.mismatched {
                    self.forget(&job.keys[p]);
                }
                self.counters.blocks_wrong_size += d.mismatched.len() as u64;
                self.counters.blocks_missing += d.missing.len() as u64;
                self.counters.blocks_corrupt += d.corrupt.len() as u64;
                self.counters.corrupt_deleted += d.deleted as u64;
                self.counters.blocks_loaded += d.done.len() as u64;
                self.counters.bytes_loaded += d.bytes;
                let success = d.failure.is_none() && d.done.len() == job.keys.len();
                if !success {
                    self.counters.load_jobs_failed += 1;
                }
                let arrived = d.done.iter().map(|&p| job.keys[p]);
                settled(job, success, arrived, d.bytes, Some(d.duration))
            }
        };
        self.finished.push_back(result);
    }

    /// Reports a job as failed without sending it (breaker open, closed tier).
    pub(super) fn fail_now(&mut self, job: &JobRef, cause: Cause) {
        self.counters.failures.count(cause);
        let r = settled(job, false, std::iter::empty(), 0, None);
        self.finished.push_back(r);
    }

    /// Cancels queued tasks and waits until no worker runs one.
    pub(super) fn quiesce(&mut self) {
        let cancelled: Vec<Task> = self.pool.with_queue(|q| q.0.drain(..).collect());
        for t in cancelled {
            match t {
                Task::Store(job, _) => {
                    self.in_flight -= 1;
                    self.counters.store_jobs_failed += 1;
                    self.fail_now(&job, Cause::Cancelled);
                }
                Task::Load(job) => {
                    self.in_flight -= 1;
                    self.counters.load_jobs_failed += 1;
                    self.fail_now(&job, Cause::Cancelled);
                }
                Task::Exists(keys) => {
                    for k in &keys {
                        self.pending.remove(k);
                    }
                }
                Task::Probe => self.breaker.probe_in_flight = false,
            }
        }
        self.pool.wait_idle();
        self.collect();
    }
}
