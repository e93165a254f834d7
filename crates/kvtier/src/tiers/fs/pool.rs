//! The fs tier's work: per-block transfer tasks (loads and stores in
//! separate queues) and existence checks for shared directories, run by
//! the kit's worker pool.
//!
//! Read-priority workers take existence checks, then loads, then stores;
//! write-priority workers take stores, then loads, then checks.  So a load
//! never waits behind queued stores (at most behind the one block a
//! read-priority worker is already storing), and neither queue starves.

use std::collections::VecDeque;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Instant;

use parking_lot::Mutex;

use super::cause::Cause;
use super::file::Scratch;
use super::io::{BlockIo, OnDisk, Stored};
use super::stats::{Count, FsStats, Nanos};
use crate::key::Key;
use crate::tiering::{Direction, JobRef};
use crate::tiers::kit::{JobLedger, KeyOutcome, Wake, WorkQueue, WorkerPool};

/// One submitted job as the workers see it: its ledger, and what the fs
/// tier adds to it.
pub(super) struct JobState {
    /// Each key's outcome; the queued keys are the tasks.
    pub ledger: JobLedger<Cause>,
    /// Files to remove before writing (a store's eviction victims).
    pub victims: Vec<Key>,
    /// In the segments layout, each task's record (co-indexed with the
    /// ledger's work); empty in the files layout.
    pub records: Vec<u32>,
}

impl JobState {
    /// A job whose queued keys are its tasks (their segment `records`, if
    /// any) and every other key at its outcome.
    pub(super) fn new(
        job: JobRef,
        outcomes: Vec<KeyOutcome<Cause>>,
        victims: Vec<Key>,
        records: Vec<u32>,
    ) -> JobState {
        let ledger = JobLedger::new(job, outcomes);
        debug_assert!(records.is_empty() || records.len() == ledger.work().len());
        JobState {
            ledger,
            victims,
            records,
        }
    }

    /// A job failed whole for `cause`, with no task.
    pub(super) fn failed(job: JobRef, cause: Cause) -> JobState {
        JobState {
            ledger: JobLedger::failed(job, cause),
            victims: Vec::new(),
            records: Vec::new(),
        }
    }
}

/// One unit of work.
pub(super) enum Work {
    /// Task `t` of a job (its `work[t]` key).
    Task(Arc<JobState>, u32),
    /// Does `key`'s file exist?
    Check(Key),
}

/// The queues, and which workers put loads first.
#[derive(Default)]
pub(super) struct Queues {
    loads: VecDeque<(Arc<JobState>, u32)>,
    stores: VecDeque<(Arc<JobState>, u32)>,
    checks: VecDeque<Key>,
    /// Workers `0..read_threads` are read-priority.
    read_threads: usize,
}

impl WorkQueue for Queues {
    type Item = Work;

    fn pick(&mut self, worker: usize) -> Option<Work> {
        let task = |t: (Arc<JobState>, u32)| Work::Task(t.0, t.1);
        if worker < self.read_threads {
            self.checks
                .pop_front()
                .map(Work::Check)
                .or_else(|| self.loads.pop_front().map(task))
                .or_else(|| self.stores.pop_front().map(task))
        } else {
            self.stores
                .pop_front()
                .map(task)
                .or_else(|| self.loads.pop_front().map(task))
                .or_else(|| self.checks.pop_front().map(Work::Check))
        }
    }

    fn is_empty(&self) -> bool {
        self.loads.is_empty() && self.stores.is_empty() && self.checks.is_empty()
    }
}

/// State shared by the tier and its workers.
pub(super) struct Shared {
    /// What every layout's transfers share.
    pub io: BlockIo,
    /// Where the blocks live: the layout.
    pub disk: Box<dyn OnDisk>,
    /// The tier's statistics, which the workers count into too.
    pub counts: Arc<FsStats>,
    finished: Mutex<Vec<Arc<JobState>>>,
    checked: Mutex<Vec<(Key, bool)>>,
    /// Jobs in `finished` plus check results in `checked` (lets the
    /// scheduler skip taking the locks when nothing is there).
    ready: AtomicUsize,
}

/// The worker threads and what they share.
pub(super) struct Pool {
    shared: Arc<Shared>,
    workers: WorkerPool<Queues>,
}

impl Pool {
    /// Starts `read_threads` read-priority and `write_threads` write-priority workers.
    pub(super) fn start(
        io: BlockIo,
        disk: Box<dyn OnDisk>,
        read_threads: usize,
        write_threads: usize,
        counts: Arc<FsStats>,
    ) -> crate::Result<Pool> {
        let shared = Arc::new(Shared {
            io,
            disk,
            counts,
            finished: Mutex::new(Vec::new()),
            checked: Mutex::new(Vec::new()),
            ready: AtomicUsize::new(0),
        });
        let workers = WorkerPool::start(
            read_threads + write_threads,
            "a file-system tier worker thread",
            |n| {
                let role = if n < read_threads { 'r' } else { 'w' };
                format!("kvtier-fs-{role}{n}")
            },
            |_| {
                let shared = shared.clone();
                let mut scratch = Scratch::new();
                move |work, core: &_| shared.run(work, &mut scratch, core)
            },
        )?;
        // Before any work is queued, so every pick sees it.
        workers.with_queue(|q| q.read_threads = read_threads);
        Ok(Pool { shared, workers })
    }

    /// The shared state.
    pub(super) fn shared(&self) -> &Arc<Shared> {
        &self.shared
    }

    /// Queues a job's tasks (or reports it at once if it has none).
    pub(super) fn submit(&self, state: Arc<JobState>) {
        let tasks = state.ledger.work().len() as u32;
        if tasks == 0 {
            self.shared.push_finished(state, || self.workers.notify());
            return;
        }
        let load = state.ledger.job().direction == Direction::Load;
        self.workers.submit(Wake::All, |q| {
            let queue = if load { &mut q.loads } else { &mut q.stores };
            queue.extend((0..tasks).map(|t| (state.clone(), t)));
        });
    }

    /// Queues an existence check of `key`.
    pub(super) fn check(&self, key: Key) {
        self.workers.submit(Wake::One, |q| q.checks.push_back(key));
    }

    /// Raises `notifier` whenever a job finishes from now on (set once).
    pub(super) fn set_notifier(&self, notifier: crate::tiering::Notifier) {
        self.workers.set_notifier(notifier);
    }

    /// Takes finished jobs and check results, if any.
    pub(super) fn take(&self, jobs: &mut Vec<Arc<JobState>>, checks: &mut Vec<(Key, bool)>) {
        let s = &self.shared;
        if s.ready.load(Ordering::Acquire) == 0 {
            return;
        }
        jobs.append(&mut s.finished.lock());
        checks.append(&mut s.checked.lock());
        s.ready.store(0, Ordering::Release);
        // A worker may have pushed between the appends and the store: recount.
        let late = s.finished.lock().len() + s.checked.lock().len();
        if late > 0 {
            s.ready.fetch_add(late, Ordering::AcqRel);
        }
    }

    /// Blocks until no task is queued or running.  With `cancel`, queued
    /// tasks are not run: their keys fail with [`Cause::Closed`].
    pub(super) fn wait_idle(&self, cancel: bool) {
        if cancel {
            let cancelled = self.workers.with_queue(|q| {
                q.checks.clear();
                let mut c: Vec<_> = q.loads.drain(..).collect();
                c.extend(q.stores.drain(..));
                c
            });
            for (state, t) in cancelled {
                self.shared.counts.errors.count(Cause::Closed);
                if state
                    .ledger
                    .finish(t as usize, KeyOutcome::Failed(Cause::Closed))
                {
                    self.shared.push_finished(state, || self.workers.notify());
                }
            }
        }
        self.workers.wait_idle();
    }

    /// Cancels queued work, waits for running work, and joins the threads.
    pub(super) fn stop(&mut self) {
        self.wait_idle(true);
        self.workers.stop();
    }
}

impl Drop for Pool {
    fn drop(&mut self) {
        if !self.workers.stopped() {
            self.stop();
        }
    }
}

impl Shared {
    fn push_finished(&self, state: Arc<JobState>, notify: impl FnOnce()) {
        self.finished.lock().push(state);
        self.ready.fetch_add(1, Ordering::AcqRel);
        notify();
    }

    fn run(&self, work: Work, scratch: &mut Scratch, core: &crate::tiers::kit::PoolCore<Queues>) {
        match work {
            Work::Task(state, t) => {
                let outcome = self.run_task(&state, t as usize, scratch);
                if state.ledger.finish(t as usize, outcome) {
                    self.push_finished(state, || core.notify());
                }
            }
            Work::Check(key) => {
                let found = self.disk.exists(&self.io, &key, scratch);
                self.counts.existence_checks.add(1);
                self.checked.lock().push((key, found));
                self.ready.fetch_add(1, Ordering::AcqRel);
                core.notify();
            }
        }
    }

    /// Runs task `t` of a job; returns its key's outcome.
    fn run_task(&self, state: &JobState, t: usize, scratch: &mut Scratch) -> KeyOutcome<Cause> {
        let job = state.ledger.job();
        let i = state.ledger.work()[t] as usize;
        let (key, slot) = (job.keys[i], job.slots[i]);
        let record = state.records.get(t).copied();
        let start = Instant::now();
        let c = &*self.counts;
        let moved = |bytes: &Count, ns: &Nanos, b: u64| {
            bytes.add(b);
            ns.add(start.elapsed().as_nanos() as u64);
            state.ledger.add_bytes(b);
            KeyOutcome::Done
        };
        let result = match job.direction {
            Direction::Store => {
                // This task's share of the job's eviction victims goes first,
                // so the files it frees are gone before the new one lands.
                let (n, v) = (state.ledger.work().len(), state.victims.len());
                for victim in &state.victims[t * v / n..(t + 1) * v / n] {
                    if self.disk.remove(victim, scratch).is_err() {
                        c.removal_errors.add(1);
                    }
                }
                self.disk
                    .store(&self.io, &key, slot, record, scratch)
                    .map(|s| match s {
                        Stored::Written(b) => moved(&c.write_bytes, &c.write_time_us, b),
                        Stored::Present => KeyOutcome::Present,
                    })
            }
            Direction::Load => self
                .disk
                .load(&self.io, &key, slot, record, scratch)
                .map(|b| moved(&c.read_bytes, &c.read_time_us, b)),
        };
        result.unwrap_or_else(|cause| {
            c.errors.count(cause);
            KeyOutcome::Failed(cause)
        })
    }
}
