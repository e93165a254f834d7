//! A job's ledger: its keys' outcomes as the workers record them and the
//! tier settles them, and the job's result.

use std::marker::PhantomData;
use std::sync::atomic::{AtomicU8, AtomicU64, AtomicUsize, Ordering};
use std::time::Instant;

use super::causes::TierCause;
use crate::key::Key;
use crate::tiering::{Direction, JobRef, JobResult};

/// What became of one key of a job.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum KeyOutcome<C> {
    /// Nothing to do, nothing done (already in the tier, a duplicate).
    Skipped,
    /// Transferred.
    Done,
    /// A store found the whole block already there: nothing written.
    Present,
    /// A store refused: no room even after eviction.
    RejectedFull,
    /// Queued for a worker, not finished yet.
    Queued,
    /// Failed, for this cause.
    Failed(C),
}

impl<C: TierCause> KeyOutcome<C> {
    /// Whether the key counts against the job: rejected or failed.
    pub(crate) fn is_failure(self) -> bool {
        matches!(self, KeyOutcome::RejectedFull | KeyOutcome::Failed(_))
    }

    // The atomic form: 0..=4, then FAILED + the cause's index.
    const FAILED: u8 = 16;

    fn encode(self) -> u8 {
        // Every cause's code fits in a u8 (checked when the cause type is
        // compiled in).
        const {
            assert!(
                C::ALL.len() <= (u8::MAX - Self::FAILED) as usize + 1,
                "too many causes for a ledger's u8 codes"
            )
        };
        match self {
            KeyOutcome::Skipped => 0,
            KeyOutcome::Done => 1,
            KeyOutcome::Present => 2,
            KeyOutcome::RejectedFull => 3,
            KeyOutcome::Queued => 4,
            KeyOutcome::Failed(c) => Self::FAILED + c.index() as u8,
        }
    }

    fn decode(code: u8) -> KeyOutcome<C> {
        match code {
            0 => KeyOutcome::Skipped,
            1 => KeyOutcome::Done,
            2 => KeyOutcome::Present,
            3 => KeyOutcome::RejectedFull,
            4 => KeyOutcome::Queued,
            c => KeyOutcome::Failed(C::ALL[(c - Self::FAILED) as usize]),
        }
    }
}

/// One submitted job as the tier and its workers share it: the job, each
/// key's [`KeyOutcome`], the keys with a task (those queued when the
/// ledger was made), the tasks still to finish, the bytes moved and when
/// it was submitted.
pub(crate) struct JobLedger<C> {
    job: JobRef,
    outcomes: Vec<AtomicU8>,
    work: Vec<u32>,
    remaining: AtomicUsize,
    bytes: AtomicU64,
    started: Instant,
    cause: PhantomData<fn() -> C>,
}

impl<C: TierCause> JobLedger<C> {
    /// The ledger of `job` with these outcomes (co-indexed with its keys);
    /// the keys [`KeyOutcome::Queued`] are its tasks, in key order.
    pub(crate) fn new(job: JobRef, outcomes: Vec<KeyOutcome<C>>) -> JobLedger<C> {
        debug_assert_eq!(outcomes.len(), job.keys.len());
        let work: Vec<u32> = (0..outcomes.len() as u32)
            .filter(|&i| outcomes[i as usize] == KeyOutcome::Queued)
            .collect();
        JobLedger {
            remaining: AtomicUsize::new(work.len()),
            outcomes: outcomes
                .into_iter()
                .map(|o| AtomicU8::new(o.encode()))
                .collect(),
            work,
            job,
            bytes: AtomicU64::new(0),
            started: Instant::now(),
            cause: PhantomData,
        }
    }

    /// A ledger of `job` with every key failed for `cause` (and no task).
    pub(crate) fn failed(job: JobRef, cause: C) -> JobLedger<C> {
        let n = job.keys.len();
        JobLedger::new(job, vec![KeyOutcome::Failed(cause); n])
    }

    /// The job.
    pub(crate) fn job(&self) -> &JobRef {
        &self.job
    }

    /// Positions (in the job) of the keys with a task, in order.
    pub(crate) fn work(&self) -> &[u32] {
        &self.work
    }

    /// The outcome of the job's key `i`.
    pub(crate) fn outcome(&self, i: usize) -> KeyOutcome<C> {
        KeyOutcome::decode(self.outcomes[i].load(Ordering::Acquire))
    }

    /// Every key with its outcome, in job order.
    pub(crate) fn outcomes(&self) -> impl Iterator<Item = (&Key, KeyOutcome<C>)> {
        self.job
            .keys
            .iter()
            .enumerate()
            .map(|(i, k)| (k, self.outcome(i)))
    }

    /// Task `t` finished with `outcome` for its key; true when it was the
    /// job's last (the job is then finished, for the tier to settle).
    pub(crate) fn finish(&self, t: usize, outcome: KeyOutcome<C>) -> bool {
        let i = self.work[t] as usize;
        self.outcomes[i].store(outcome.encode(), Ordering::Release);
        self.remaining.fetch_sub(1, Ordering::AcqRel) == 1
    }

    /// Adds `n` to the bytes moved.
    pub(crate) fn add_bytes(&self, n: u64) {
        self.bytes.fetch_add(n, Ordering::Relaxed);
    }

    /// The job's result: `success`, the bytes moved, the time since
    /// submission, and for a failed load the keys that are
    /// [`KeyOutcome::Done`] (see [`settled`]).
    pub(crate) fn result(&self, success: bool) -> JobResult {
        settled(
            &self.job,
            success,
            self.outcomes()
                .filter(|(_, o)| *o == KeyOutcome::Done)
                .map(|(k, _)| *k),
            self.bytes.load(Ordering::Relaxed),
            Some(self.started.elapsed()),
        )
    }
}

/// The result of a settled job, by the one rule: a failed load names the
/// keys that did arrive (`arrived`, which then become ready while the
/// others are dropped); a store, or a load that succeeded, names none.
/// `duration`: the time the transfer took, if measured.
pub(crate) fn settled(
    job: &JobRef,
    success: bool,
    arrived: impl Iterator<Item = Key>,
    bytes: u64,
    duration: Option<std::time::Duration>,
) -> JobResult {
    JobResult {
        id: job.id,
        success,
        succeeded_keys: (!success && job.direction == Direction::Load).then(|| arrived.collect()),
        bytes,
        duration,
    }
}

#[cfg(test)]
mod tests {
    use super::super::causes::tests::Why;
    use super::*;
    use crate::tiering::{Job, JobId};

    fn job(direction: Direction, n: u8) -> JobRef {
        std::sync::Arc::new(Job {
            id: JobId(7),
            direction,
            keys: (0..n).map(|i| Key::new(&[i]).unwrap()).collect(),
            slots: (0..n as u32).collect(),
            request: Default::default(),
        })
    }

    #[test]
    fn outcomes_round_trip_and_queued_keys_are_the_tasks() {
        let all = [
            KeyOutcome::Skipped,
            KeyOutcome::Queued,
            KeyOutcome::Done,
            KeyOutcome::Present,
            KeyOutcome::RejectedFull,
            KeyOutcome::Failed(Why::Lost),
            KeyOutcome::Failed(Why::Broken),
            KeyOutcome::Queued,
        ];
        let l = JobLedger::new(job(Direction::Store, 8), all.to_vec());
        assert_eq!(l.work(), &[1, 7]);
        for (i, o) in all.iter().enumerate() {
            assert_eq!(l.outcome(i), *o);
        }
        assert!(!l.finish(0, KeyOutcome::Done));
        assert!(l.finish(1, KeyOutcome::Failed(Why::Lost)));
        assert_eq!(l.outcome(7), KeyOutcome::Failed(Why::Lost));
        assert!(KeyOutcome::<Why>::RejectedFull.is_failure());
        assert!(!KeyOutcome::<Why>::Present.is_failure());
    }

    #[test]
    fn a_failed_load_names_the_keys_that_arrived_and_a_store_none() {
        let l = JobLedger::<Why>::new(
            job(Direction::Load, 3),
            vec![KeyOutcome::Queued, KeyOutcome::Queued, KeyOutcome::Queued],
        );
        l.finish(0, KeyOutcome::Done);
        l.finish(1, KeyOutcome::Failed(Why::Broken));
        l.finish(2, KeyOutcome::Done);
        l.add_bytes(10);
        let r = l.result(false);
        let k = |i: u8| Key::new(&[i]).unwrap();
        assert_eq!(r.succeeded_keys, Some(vec![k(0), k(2)]));
        assert_eq!((r.id, r.bytes), (JobId(7), 10));
        assert_eq!(l.result(true).succeeded_keys, None);
        let s = JobLedger::failed(job(Direction::Store, 2), Why::Lost);
        assert!(s.work().is_empty());
        assert_eq!(s.result(false).succeeded_keys, None);
    }
}
