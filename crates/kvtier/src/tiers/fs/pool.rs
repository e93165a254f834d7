//! Worker threads and the work they share: per-block transfer tasks (loads
//! and stores in separate queues) and existence checks for shared
//! directories.
//!
//! Read-priority workers take existence checks, then loads, then stores;
//! write-priority workers take stores, then loads, then checks.  So a load
//! never waits behind queued stores (at most behind the one block a
//! read-priority worker is already storing), and neither queue starves.

use std::collections::VecDeque;
use std::sync::Arc;
use std::sync::atomic::{AtomicU8, AtomicU64, AtomicUsize, Ordering};
use std::thread::JoinHandle;
use std::time::Instant;

use parking_lot::{Condvar, Mutex};

use super::io::{BlockIo, Cause, Scratch, Stored};
use crate::key::Key;
use crate::tiering::{Direction, JobRef};

/// Per-key outcome codes in [`JobState::outcome`].
pub(super) mod outcome {
    /// Not transferred and nothing to do (already present, duplicate).
    pub(crate) const SKIPPED: u8 = 0;
    /// Transferred.
    pub(crate) const DONE: u8 = 1;
    /// Store found a whole file already there.
    pub(crate) const PRESENT: u8 = 2;
    /// Store refused: no room even after eviction.
    pub(crate) const REJECTED_FULL: u8 = 3;
    /// Task queued, not run yet.
    pub(crate) const QUEUED: u8 = 4;
    /// First failure code; add `Cause::index()`.
    pub(crate) const FAILED: u8 = 16;
}

/// One submitted job as the workers see it.
pub(super) struct JobState {
    /// The job.
    pub job: JobRef,
    /// Per key (co-indexed with `job.keys`): an [`outcome`] code.
    pub outcome: Vec<AtomicU8>,
    /// Indices of the keys that have a task.
    pub work: Vec<u32>,
    /// Files to remove before writing (a store's eviction victims).
    pub victims: Vec<Key>,
    /// In the segments layout, each task's record (co-indexed with
    /// `work`); empty in the files layout.
    pub records: Vec<u32>,
    /// Tasks not finished yet.
    pub remaining: AtomicUsize,
    /// Bytes moved.
    pub bytes: AtomicU64,
    /// When the job was submitted.
    pub started: Instant,
}

impl JobState {
    /// A job with `work` tasks queued (their segment `records`, if any)
    /// and every other key at its code in `codes`.
    pub(super) fn new(
        job: JobRef,
        codes: Vec<u8>,
        work: Vec<u32>,
        victims: Vec<Key>,
        records: Vec<u32>,
    ) -> JobState {
        debug_assert!(records.is_empty() || records.len() == work.len());
        let outcome = codes.into_iter().map(AtomicU8::new).collect();
        JobState {
            remaining: AtomicUsize::new(work.len()),
            job,
            outcome,
            work,
            victims,
            records,
            bytes: AtomicU64::new(0),
            started: Instant::now(),
        }
    }

    /// The outcome code of key `i`.
    pub(super) fn code(&self, i: usize) -> u8 {
        self.outcome[i].load(Ordering::Acquire)
    }
}

/// One unit of work.
enum Work {
    /// Task `t` of a job (its `work[t]` key).
    Task(Arc<JobState>, u32),
    /// Does `key`'s file exist?
    Check(Key),
}

#[derive(Default)]
struct Queues {
    loads: VecDeque<(Arc<JobState>, u32)>,
    stores: VecDeque<(Arc<JobState>, u32)>,
    checks: VecDeque<Key>,
    active: usize,
    stop: bool,
}

impl Queues {
    fn is_empty(&self) -> bool {
        self.loads.is_empty() && self.stores.is_empty() && self.checks.is_empty()
    }

    fn pick(&mut self, read_priority: bool) -> Option<Work> {
        let task = |t: (Arc<JobState>, u32)| Work::Task(t.0, t.1);
        if read_priority {
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
}

/// Counters workers update; the tier reads them for stats.
#[derive(Default)]
pub(super) struct Counters {
    /// Bytes read into slots.
    pub read_bytes: AtomicU64,
    /// Nanoseconds spent in successful block reads.
    pub read_ns: AtomicU64,
    /// Bytes written from slots.
    pub write_bytes: AtomicU64,
    /// Nanoseconds spent in successful block writes.
    pub write_ns: AtomicU64,
    /// Failures by cause (indexed by `Cause::index`).
    pub errors: [AtomicU64; Cause::ALL.len()],
    /// Evicted files whose removal failed.
    pub removal_errors: AtomicU64,
    /// Existence checks run.
    pub checks: AtomicU64,
}

impl Counters {
    /// Counts one failure of `cause`.
    pub(super) fn error(&self, cause: Cause) {
        self.errors[cause.index()].fetch_add(1, Ordering::Relaxed);
    }
}

/// State shared by the tier and its workers.
pub(super) struct Shared {
    /// Block I/O.
    pub io: BlockIo,
    /// Counters.
    pub counters: Counters,
    queues: Mutex<Queues>,
    work_cv: Condvar,
    idle_cv: Condvar,
    finished: Mutex<Vec<Arc<JobState>>>,
    checked: Mutex<Vec<(Key, bool)>>,
    /// Jobs in `finished` plus check results in `checked` (lets the
    /// scheduler skip taking the locks when nothing is there).
    ready: AtomicUsize,
    /// The manager's wake-up signal, raised when a job or check finishes.
    notifier: std::sync::OnceLock<crate::tiering::Notifier>,
}

/// The worker threads.
pub(super) struct Pool {
    shared: Arc<Shared>,
    threads: Vec<JoinHandle<()>>,
}

impl Pool {
    /// Starts `read_threads` read-priority and `write_threads` write-priority workers.
    pub(super) fn start(
        io: BlockIo,
        read_threads: usize,
        write_threads: usize,
    ) -> crate::Result<Pool> {
        let shared = Arc::new(Shared {
            io,
            counters: Counters::default(),
            queues: Mutex::new(Queues::default()),
            work_cv: Condvar::new(),
            idle_cv: Condvar::new(),
            finished: Mutex::new(Vec::new()),
            checked: Mutex::new(Vec::new()),
            ready: AtomicUsize::new(0),
            notifier: std::sync::OnceLock::new(),
        });
        let mut pool = Pool {
            shared: shared.clone(),
            threads: Vec::new(),
        };
        for n in 0..read_threads + write_threads {
            let read_priority = n < read_threads;
            let s = shared.clone();
            let name = format!("kvtier-fs-{}{}", if read_priority { 'r' } else { 'w' }, n);
            let handle = std::thread::Builder::new()
                .name(name)
                .spawn(move || worker(&s, read_priority))
                .map_err(|e| crate::Error::io("starting a file-system tier worker thread", e));
            match handle {
                Ok(h) => pool.threads.push(h),
                Err(e) => {
                    pool.stop();
                    return Err(e);
                }
            }
        }
        Ok(pool)
    }

    /// The shared state.
    pub(super) fn shared(&self) -> &Arc<Shared> {
        &self.shared
    }

    /// Queues a job's tasks (or reports it at once if it has none).
    pub(super) fn submit(&self, state: Arc<JobState>) {
        if state.work.is_empty() {
            self.shared.push_finished(state);
            return;
        }
        let mut q = self.shared.queues.lock();
        let load = state.job.direction == Direction::Load;
        for t in 0..state.work.len() as u32 {
            let item = (state.clone(), t);
            if load {
                q.loads.push_back(item);
            } else {
                q.stores.push_back(item);
            }
        }
        drop(q);
        self.shared.work_cv.notify_all();
    }

    /// Queues an existence check of `key`.
    pub(super) fn check(&self, key: Key) {
        self.shared.queues.lock().checks.push_back(key);
        self.shared.work_cv.notify_one();
    }

    /// Raises `notifier` whenever a job finishes from now on (set once).
    pub(super) fn set_notifier(&self, notifier: crate::tiering::Notifier) {
        let _ = self.shared.notifier.set(notifier);
    }

    /// Takes finished jobs and check results, if any.
    pub(super) fn take(&self, jobs: &mut Vec<Arc<JobState>>, checks: &mut Vec<(Key, bool)>) {
        if self.shared.ready.load(Ordering::Acquire) == 0 {
            return;
        }
        jobs.append(&mut self.shared.finished.lock());
        checks.append(&mut self.shared.checked.lock());
        self.shared.ready.store(0, Ordering::Release);
        // A worker may have pushed between the appends and the store: recount.
        let late = self.shared.finished.lock().len() + self.shared.checked.lock().len();
        if late > 0 {
            self.shared.ready.fetch_add(late, Ordering::AcqRel);
        }
    }

    /// Blocks until no task is queued or running.  With `cancel`, queued
    /// tasks are not run: their keys fail with [`Cause::Closed`].
    pub(super) fn wait_idle(&self, cancel: bool) {
        let mut q = self.shared.queues.lock();
        if cancel {
            let mut cancelled = Vec::new();
            cancelled.extend(q.loads.drain(..));
            cancelled.extend(q.stores.drain(..));
            q.checks.clear();
            drop(q);
            for (state, t) in cancelled {
                let i = state.work[t as usize] as usize;
                state.outcome[i].store(
                    outcome::FAILED + Cause::Closed.index() as u8,
                    Ordering::Release,
                );
                self.shared.counters.error(Cause::Closed);
                self.shared.task_done(state);
            }
            q = self.shared.queues.lock();
        }
        while q.active > 0 || !q.is_empty() {
            self.shared.idle_cv.wait(&mut q);
        }
    }

    /// Cancels queued work, waits for running work, and joins the threads.
    pub(super) fn stop(&mut self) {
        self.wait_idle(true);
        self.shared.queues.lock().stop = true;
        self.shared.work_cv.notify_all();
        for t in self.threads.drain(..) {
            let _ = t.join();
        }
    }
}

impl Drop for Pool {
    fn drop(&mut self) {
        if !self.threads.is_empty() {
            self.stop();
        }
    }
}

impl Shared {
    fn push_finished(&self, state: Arc<JobState>) {
        self.finished.lock().push(state);
        self.ready.fetch_add(1, Ordering::AcqRel);
        if let Some(n) = self.notifier.get() {
            n.notify();
        }
    }

    fn task_done(&self, state: Arc<JobState>) {
        if state.remaining.fetch_sub(1, Ordering::AcqRel) == 1 {
            self.push_finished(state);
        }
    }

    /// Stores `key` from `slot`: into its segment `record`, or as a file.
    fn store(
        &self,
        key: &Key,
        slot: u32,
        record: Option<u32>,
        scratch: &mut Scratch,
    ) -> Result<Stored, Cause> {
        match record {
            Some(r) => self.io.store_record(key, slot, r, scratch),
            None => self.io.store(key, slot, scratch),
        }
    }

    /// Loads `key` into `slot`: from its segment `record`, or its file.
    fn load(
        &self,
        key: &Key,
        slot: u32,
        record: Option<u32>,
        scratch: &mut Scratch,
    ) -> Result<u64, Cause> {
        match record {
            Some(r) => self.io.load_record(key, slot, r, scratch),
            None => self.io.load(key, slot, scratch),
        }
    }

    fn run_task(&self, state: Arc<JobState>, t: u32, scratch: &mut Scratch) {
        let i = state.work[t as usize] as usize;
        let key = state.job.keys[i];
        let slot = state.job.slots[i];
        let record = state.records.get(t as usize).copied();
        let start = Instant::now();
        let code = match state.job.direction {
            Direction::Store => {
                // This task's share of the job's eviction victims goes first,
                // so the files it frees are gone before the new one lands.
                let (n, v) = (state.work.len(), state.victims.len());
                for victim in &state.victims[t as usize * v / n..(t as usize + 1) * v / n] {
                    if self.io.remove(victim, scratch).is_err() {
                        self.counters.removal_errors.fetch_add(1, Ordering::Relaxed);
                    }
                }
                match self.store(&key, slot, record, scratch) {
                    Ok(Stored::Written(b)) => {
                        self.counters.write_bytes.fetch_add(b, Ordering::Relaxed);
                        self.counters
                            .write_ns
                            .fetch_add(start.elapsed().as_nanos() as u64, Ordering::Relaxed);
                        state.bytes.fetch_add(b, Ordering::Relaxed);
                        outcome::DONE
                    }
                    Ok(Stored::Present) => outcome::PRESENT,
                    Err(c) => {
                        self.counters.error(c);
                        outcome::FAILED + c.index() as u8
                    }
                }
            }
            Direction::Load => match self.load(&key, slot, record, scratch) {
                Ok(b) => {
                    self.counters.read_bytes.fetch_add(b, Ordering::Relaxed);
                    self.counters
                        .read_ns
                        .fetch_add(start.elapsed().as_nanos() as u64, Ordering::Relaxed);
                    state.bytes.fetch_add(b, Ordering::Relaxed);
                    outcome::DONE
                }
                Err(c) => {
                    self.counters.error(c);
                    outcome::FAILED + c.index() as u8
                }
            },
        };
        state.outcome[i].store(code, Ordering::Release);
        self.task_done(state);
    }
}

fn worker(shared: &Shared, read_priority: bool) {
    let mut scratch = Scratch::new();
    loop {
        let work = {
            let mut q = shared.queues.lock();
            loop {
                if let Some(w) = q.pick(read_priority) {
                    q.active += 1;
                    break Some(w);
                }
                if q.stop {
                    break None;
                }
                shared.work_cv.wait(&mut q);
            }
        };
        let Some(work) = work else { return };
        match work {
            Work::Task(state, t) => shared.run_task(state, t, &mut scratch),
            Work::Check(key) => {
                let found = shared.io.exists(&key, &mut scratch);
                shared.counters.checks.fetch_add(1, Ordering::Relaxed);
                shared.checked.lock().push((key, found));
                shared.ready.fetch_add(1, Ordering::AcqRel);
                if let Some(n) = shared.notifier.get() {
                    n.notify();
                }
            }
        }
        let mut q = shared.queues.lock();
        q.active -= 1;
        if q.active == 0 && q.is_empty() {
            shared.idle_cv.notify_all();
        }
    }
}
