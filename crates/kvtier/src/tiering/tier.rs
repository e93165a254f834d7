//! The secondary-tier contract: what the manager asks of every tier beyond
//! the primary one (built-in Rust tiers and foreign C vtable tiers alike).
//!
//! Every method is called with the manager's lock held, never concurrently,
//! but not always from the same thread.  All are non-blocking except
//! [`SecondaryTier::drain`] and the operator's calls
//! [`SecondaryTier::drop_blocks`] (which may remove files or ask a
//! server in the call) and [`SecondaryTier::shutdown`].

use std::sync::Arc;
use std::time::Duration;

use crate::error::Result;
use crate::events::Event;
use crate::key::Key;
use crate::primary::DropCount;
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

/// Most finished jobs the manager takes from one tier in one poll
/// ([`SecondaryTier::poll_finished`]'s `max`); the rest wait for the next
/// poll, so a tier that always has more to report cannot hold the manager.
pub const MAX_FINISHED_PER_POLL: usize = 1024;

/// Most events the manager takes from one tier in one call
/// ([`SecondaryTier::take_events`]'s `max` is at most this); the rest wait
/// in the tier for the next call.
pub const MAX_EVENTS_PER_TAKE: usize = 4096;

/// Event capacity of a tier that was never given one with
/// [`SecondaryTier::set_event_capacity`] (a tier used on its own, outside a
/// manager).
pub const DEFAULT_TIER_EVENT_CAPACITY: usize = 65_536;

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

    /// How many primary slots the tier copies through (the slot memory it
    /// was opened over), if it says.  The manager refuses a tier that
    /// reaches fewer slots than the primary tier has: slot ids past the end
    /// of its memory would reach it.  Tiers that address the region on
    /// their own (C tiers) do not say.
    fn slot_count(&self) -> Option<u32> {
        None
    }

    /// The block layout fingerprint the tier's store was opened with and
    /// checked against, if it has one (see
    /// [`ManagerOptions::layout_fingerprint`](super::ManagerOptions::layout_fingerprint));
    /// `Manager::drop_blocks` selects tiers by it.
    fn layout_fingerprint(&self) -> Option<&str> {
        None
    }

    /// Whether `key` is present and readable.
    fn lookup(&mut self, key: &Key, request: &Request) -> TierLookup;

    /// Starts copying the job's (pinned) slots into the tier.  Keys the tier
    /// already has are skipped; the tier evicts by its own policy if full.
    fn submit_store(&mut self, job: JobRef);

    /// Starts copying from the tier into the job's (write pending) slots.
    fn submit_load(&mut self, job: JobRef);

    /// Appends jobs that finished since the last call to `out`, at most
    /// `max` of them (the manager passes [`MAX_FINISHED_PER_POLL`]); the
    /// others wait for a later call.  Every submitted job is reported
    /// exactly once.
    fn poll_finished(&mut self, max: usize, out: &mut Vec<JobResult>);

    /// Marks keys recently used.
    fn touch(&mut self, _keys: &[Key], _request: &Request) {}

    /// Whether the tier acts on [`SecondaryTier::touch`] (by default it
    /// may): a tier that ignores touches says false, and the manager then
    /// neither calls it nor copies a touch's keys for it.
    fn wants_touches(&self) -> bool {
        true
    }

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

    /// The families of the statistics [`SecondaryTier::stats`] reports, as
    /// the tier declares them (see [`crate::stats`]), so the Prometheus
    /// exposition can give each its family; `None` (the default) for a
    /// tier of its own, whose statistics keep their names under the
    /// `kvtier_custom_` prefix.  A statistic the table does not list is a
    /// custom one too.
    fn stat_table(&self) -> Option<crate::stats::StatTable> {
        None
    }

    /// Moves the tier's own queued events, oldest first, into `out`, at
    /// most `max` of them; the others stay queued for a later call.
    fn take_events(&mut self, _max: usize, _out: &mut Vec<Event>) {}

    /// Bounds the tier's queue of events to `capacity` (0: the tier queues
    /// none).  The manager calls it once, when the tier is added, with its
    /// primary tier's event capacity (or 0 when the tier's events are
    /// turned off).  A tier whose queue is full drops new events and
    /// counts them in its `events_dropped` stat; a key whose "stored" event
    /// was dropped is never announced as removed.  Tiers that queue no
    /// events can ignore it.
    fn set_event_capacity(&mut self, _capacity: usize) {}

    /// Appends descriptions of the tier's own failures since the last call
    /// (failed callbacks, bad answers), for the manager's error log.
    fn take_errors(&mut self, _out: &mut Vec<String>) {}

    /// Stops the tier; after it, the tier no longer touches the region.
    fn shutdown(&mut self) -> Result<()>;

    /// Whether the tier reports finished jobs through
    /// `Manager::complete_job`, the thread-safe completion call (it may
    /// also report through [`SecondaryTier::poll_finished`]).  Only such a
    /// tier may be completed through that call: for any other tier it is
    /// refused, so that no made-up result can make a key readable while
    /// the tier is still writing its slot.  Built-in tiers report only
    /// through `poll_finished` and answer false (the default); tiers
    /// behind a C vtable answer true.  Asked once, when the tier is added.
    fn reports_through_complete_job(&self) -> bool {
        false
    }

    /// Receives the manager's wake-up signal when the tier is added.  A
    /// tier whose worker threads finish jobs should keep it and call
    /// [`Notifier::notify`] when a job is ready for `poll_finished`, so an
    /// idle engine sleeping on the wake-up descriptor wakes.  Tiers that
    /// report only through `Manager::complete_job` can ignore it.
    fn set_notifier(&mut self, _notifier: Notifier) {}

    /// Whether the tier can be used now, for the manager's
    /// `Manager::readiness` (and the `/readyz` endpoint): ready (the
    /// default) or not, with the reason (a circuit breaker open, a
    /// directory gone, shut down).  Reads the tier's state as its last
    /// calls left it; must not block or change anything.
    fn readiness(&self) -> super::TierReadiness {
        super::TierReadiness::Ready
    }

    /// Removes every block whose key starts with `key_prefix` (every
    /// block for an empty one); blocks the tier cannot remove now (being
    /// read or written, held by a pin set) are kept and counted.  By
    /// default [`Error::Unsupported`](crate::Error::Unsupported): the
    /// manager skips such a tier and reports it.
    fn drop_blocks(&mut self, _key_prefix: &[u8]) -> Result<DropCount> {
        Err(crate::Error::Unsupported(format!(
            "dropping blocks from tier {}",
            self.name()
        )))
    }

    /// Holds `keys` (distinct) for pin sets: a held block stays whatever
    /// the tier's eviction, expiry or [`SecondaryTier::drop_blocks`] want,
    /// until [`SecondaryTier::release_hold`].  Answers, co-indexed with
    /// `keys`, whether each is held now: true for a block present and
    /// readable in the tier (also when it already was held), false for one
    /// absent or still being written (nothing changed for it).  The
    /// manager asks only for keys no pin set holds in the tier yet, and
    /// may release them again at once (a set past its bound), so holds
    /// never nest.  By default [`Error::Unsupported`](crate::Error::Unsupported):
    /// the tier keeps no pin sets.
    fn hold(&mut self, _keys: &[Key]) -> Result<Vec<bool>> {
        Err(crate::Error::Unsupported(format!(
            "pin sets in tier {}",
            self.name()
        )))
    }

    /// Releases the holds of `keys` ([`SecondaryTier::hold`]): each block
    /// is evictable again (at its recency); keys not held are ignored.
    fn release_hold(&mut self, _keys: &[Key]) {}

    /// How many blocks the tier holds at most, for the bound of pin sets
    /// (`pinning.max_share` of it); `None` (the default) for a tier
    /// without a bound in blocks, where pin sets have no bound either.
    fn capacity_blocks(&self) -> Option<u64> {
        None
    }
}
