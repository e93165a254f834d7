//! The secondary-tier contract: what the manager asks of every tier beyond
//! the primary one (built-in Rust tiers and foreign C vtable tiers alike).
//!
//! Every method is called with the manager's lock held, never concurrently,
//! but not always from the same thread.  All are non-blocking except
//! [`SecondaryTier::drain`].

use std::sync::Arc;
use std::time::Duration;

use crate::error::Result;
use crate::events::Event;
use crate::key::Key;
use crate::request::{Locality, Medium, Request};
use crate::stats::Stat;

use super::notify::Notifier;

/// Id of one transfer job, unique within one manager.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct JobId(pub u64);

/// Which way a job moves blocks.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Direction {
    /// Primary → secondary (a cascade); the slots are pinned until the job finishes.
    Store,
    /// Secondary → primary (a promotion); the slots are write pending until the job finishes.
    Load,
}

/// One asynchronous transfer on one secondary tier.
#[derive(Debug)]
pub struct Job {
    /// The job's id; report it back exactly once.
    pub id: JobId,
    /// Store (cascade) or load (promotion).
    pub direction: Direction,
    /// The blocks' keys.
    pub keys: Vec<Key>,
    /// Primary slot of each key (co-indexed with `keys`).
    pub slots: Vec<u32>,
    /// The request the job serves.
    pub request: Request,
}

/// Shared handle to a job: the manager keeps one, the tier may keep others.
pub type JobRef = Arc<Job>;

/// A finished job as a tier reports it.
#[derive(Clone, Debug, PartialEq)]
pub struct JobResult {
    /// The job's id.
    pub id: JobId,
    /// Whether the whole job succeeded.
    pub success: bool,
    /// For a failed load: the keys that did arrive (they become ready, the
    /// rest are dropped).  Must name only keys of the job.
    pub succeeded_keys: Option<Vec<Key>>,
    /// Bytes moved, if the tier measures them.
    pub bytes: u64,
    /// Time the transfer took, if the tier measures it.
    pub duration: Option<Duration>,
}

impl JobResult {
    /// A plain success or failure with no measurements.
    pub fn new(id: JobId, success: bool) -> JobResult {
        JobResult {
            id,
            success,
            succeeded_keys: None,
            bytes: 0,
            duration: None,
        }
    }
}

/// A tier's answer to a lookup.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TierLookup {
    /// Present and readable.
    Hit,
    /// Not present.
    Miss,
    /// Busy (for example an existence check still running); ask again later.
    Retry,
}

/// How a tier wants a request's blocks offloaded.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum OffloadPolicy {
    /// Blocks newly stored in the primary tier are cascaded (vLLM 0.33: chunk-level).
    #[default]
    BlockLevel,
    /// Every block of the request is cascaded, including blocks already resident.
    RequestLevel,
}

/// A storage tier behind the primary tier.  See the module docs for the
/// calling discipline.
pub trait SecondaryTier: Send {
    /// Short name used in stats, logs and errors ("fs", "redis", ...).
    fn name(&self) -> &str;

    /// The tier's medium, if it declares one (matches every filter if not).
    fn medium(&self) -> Option<Medium> {
        None
    }

    /// The tier's locality, if it declares one (matches every filter if not).
    fn locality(&self) -> Option<Locality> {
        None
    }

    /// Whether `key` is present and readable.
    fn lookup(&mut self, key: &Key, request: &Request) -> TierLookup;

    /// Starts copying the job's (pinned) slots into the tier.  Keys the tier
    /// already has are skipped; the tier evicts by its own policy if full.
    fn submit_store(&mut self, job: JobRef);

    /// Starts copying from the tier into the job's (write pending) slots.
    fn submit_load(&mut self, job: JobRef);

    /// Appends every job that finished since the last call to `out`; every
    /// submitted job is reported exactly once.
    fn poll_finished(&mut self, out: &mut Vec<JobResult>);

    /// Marks keys recently used.
    fn touch(&mut self, _keys: &[Key], _request: &Request) {}

    /// A request starts; the answer is this tier's offload policy for it.
    fn on_new_request(&mut self, _request: &Request) -> OffloadPolicy {
        OffloadPolicy::BlockLevel
    }

    /// A request is finished; no later call names it again.
    fn on_request_finished(&mut self, _request: &Request) {}

    /// The scheduler step ended.
    fn on_schedule_end(&mut self) {}

    /// Whether the tier still has work outstanding.
    fn has_pending_work(&self) -> bool;

    /// Blocks until none of the tier's transfers touches the region (queued
    /// jobs may be cancelled but are still reported).  Never aborts a copy
    /// half done.
    fn drain(&mut self) -> Result<()>;

    /// The tier's statistics.
    ///
    /// Counters (and histogram series) are cumulative from the tier's
    /// creation and never decrease, also across resets and reconnections;
    /// gauges are current values.  Report every counter at every call.  The
    /// manager holds a tier to this: a counter it no longer reports keeps
    /// its last value in the merged stats, and one reported below its
    /// previous report keeps the value shown before and counts as a tier
    /// bug.  Per-interval numbers are for the caller to compute (two reads
    /// subtracted).
    fn stats(&self) -> Vec<Stat> {
        Vec::new()
    }

    /// Appends the tier's own events since the last call to `out`.
    fn take_events(&mut self, _out: &mut Vec<Event>) {}

    /// Appends descriptions of the tier's own failures since the last call
    /// (failed callbacks, bad answers), for the manager's error log.
    fn take_errors(&mut self, _out: &mut Vec<String>) {}

    /// Stops the tier; after it, the tier no longer touches the region.
    fn shutdown(&mut self) -> Result<()>;

    /// Receives the manager's wake-up signal when the tier is added.  A
    /// tier whose worker threads finish jobs should keep it and call
    /// [`Notifier::notify`] when a job is ready for `poll_finished`, so an
    /// idle engine sleeping on the wake-up descriptor wakes.  Tiers that
    /// report only through `Manager::complete_job` can ignore it.
    fn set_notifier(&mut self, _notifier: Notifier) {}
}
