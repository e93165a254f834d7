//! The tiering manager: one primary tier, an ordered list of secondary
//! tiers, and the rules that move blocks between them (each method's doc
//! states its rule).
//!
//! The manager is internally synchronized: every method takes `&self` and
//! runs under one mutex, so any thread may call it.  A tier callback that
//! calls back into the manager that called it gets [`Error::Reentrant`]
//! (detected with a thread-local marker) instead of a deadlock.  Tiers may
//! also report finished jobs from any thread, at any time, with
//! [`Manager::complete_job`], which does not take the main lock: the results
//! wait in a queue that the next poll collects.
//!
//! Tier numbering, used by events, stats and `complete_job`: 0 is the
//! primary tier, 1.. are the secondary tiers in the order they were added.
//!
//! Bounds: one poll takes at most [`MAX_FINISHED_PER_POLL`] finished jobs
//! from each tier and one gathering of events at most
//! [`MAX_EVENTS_PER_TAKE`] events; the rest wait in the tier for the next
//! one (counted per tier: `poll_limit_reached`, `event_limit_reached`), so
//! a tier that always has more cannot keep the manager's lock.  Events wait
//! in one queue holding at most the primary tier's event capacity per tier;
//! each secondary tier bounds its own queue by the same capacity
//! ([`SecondaryTier::set_event_capacity`]), or queues none when its events
//! are off ([`TierOptions::events`]).
//!
//! Where things are: this file holds the [`Manager`] and the state
//! behind its lock, with the few calls that only read it; `manager/` the
//! rest: `options.rs` the options and parameters callers pass in,
//! `entered.rs` taking the lock and the re-entrancy guard, `requests.rs`
//! a request's calls from start to finish, `setup.rs` building a manager
//! and adding its tiers, `lookup.rs` vLLM's per-key lookups and the
//! answers' types, `prefix.rs` the lookup of a whole prefix,
//! `progress.rs` the waits and the bound that keep waiting requests
//! moving, `holds.rs` their holds, `handles.rs` what a request handle
//! stands for, `poll.rs` polling for finished jobs and the error log,
//! `jobs.rs` finishing jobs, staging promotions and submitting jobs,
//! `cascade.rs` cascades and parked keys, `step.rs` the end of a step and
//! the reset, `shutdown.rs` the shutdown, `counters.rs` the counters,
//! `report.rs` what is recorded per request, `stat_lists.rs` the
//! statistics as lists, `observe.rs` what the engine reads (stats,
//! events, errors).

use std::any::Any;
use std::collections::VecDeque;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::time::Instant;

use parking_lot::Mutex;

use super::backend::PrimaryBackend;
use super::backpressure::{BackpressureConfig, Detector, PressurePolicy};
use super::counter_memory::CounterMemory;
use super::listen::{EventListener, Listener};
use super::notify::Notifier;
use super::tier::{
    Direction, Job, JobId, JobRef, JobResult, MAX_EVENTS_PER_TAKE, MAX_FINISHED_PER_POLL,
    OffloadPolicy, SecondaryTier, TierLookup,
};
use crate::error::{Error, Result};
use crate::events::Event;
pub(super) use crate::events::TierEvent;
use crate::key::Key;
use crate::primary::{CompleteStoreReport, PrimaryLookup, PrimaryTier, StoreOutcome, StorePlan};
use crate::region::{SlotMemory, SlotOwner};
use crate::request::{Locality, Medium, Request, RequestId, RequestInfo, RequestNames, TierFilter};

mod cascade;
mod counters;
mod entered;
mod handles;
mod holds;
mod jobs;
mod lookup;
mod observe;
mod options;
mod pins;
mod poll;
mod prefix;
mod progress;
mod ready;
mod report;
mod requests;
mod setup;
mod shutdown;
mod stat_lists;
mod step;

pub(crate) use counters::TIER_MANAGED_STATS;
use counters::TierCounters;
pub use lookup::{LookupAnswer, LookupResult, MissReason, PromotionAnswer};
use observe::Handout;
pub use observe::{EventBuffer, QueuedEvents, TakenBatch, TakenEvents};
pub use options::{ManagerOptions, PinningOptions, RequestParams, StartedRequest, TierOptions};
pub use pins::{DropReport, MAX_PIN_SET_NAME, PinOutcome, PinSetInfo};
use poll::CompletionQueue;
pub use progress::ProgressOptions;
pub use report::{RequestReport, RequestReportListener};
pub(crate) use stat_lists::MANAGER_STATS;
pub use stat_lists::{ManagerStat, ManagerStats};

type FastMap<K, V> = hashbrown::HashMap<K, V, foldhash::fast::RandomState>;

/// Most secondary tiers one manager holds (request-level tiers are a bit set).
pub(super) const MAX_SECONDARY_TIERS: usize = 64;

/// The tiering manager.  See the module docs.
///
/// It drives its primary tier, of type `P`, through [`PrimaryBackend`],
/// statically: the CPU tier ([`PrimaryTier`], the default), or any other
/// backend given to [`Manager::with_backend`] (a reference model in tests).
pub struct Manager<P: PrimaryBackend = PrimaryTier> {
    state: Mutex<State<P>>,
    queue: CompletionQueue,
    tier_count: AtomicUsize,
    /// Bit `i` set: secondary tier `i + 1` reports through
    /// [`Manager::complete_job`] (written before `tier_count` publishes the tier).
    completes_through_queue: AtomicU64,
    /// Tier names for `complete_job`'s refusals, which run without the main lock.
    queue_tier_names: Mutex<Vec<Arc<str>>>,
    notifier: Notifier,
    slots: std::sync::OnceLock<SlotMemory>,
}

struct TierEntry {
    tier: Box<dyn SecondaryTier>,
    name: Arc<str>,
    medium: Option<Medium>,
    locality: Option<Locality>,
    detector: Option<Detector>,
    stores_in_flight: usize,
    /// Whether the tier's events are queued (on, and the capacity is not 0).
    events_on: bool,
    c: TierCounters,
    /// The tier's own counters as last reported (never go back).
    reported: CounterMemory,
}

struct JobEntry {
    tier: usize,
    job: JobRef,
    submitted: Instant,
    epoch: u64,
}

struct ReqState {
    id: RequestId,
    info: Request,
    request_level: u64,
    /// Keys its `prepare_store` calls planned that are still write pending
    /// for it: it has a store in flight until every one was completed.
    store_keys_pending: u64,
    finished: bool,
    parked: Vec<Key>,
    staged: u32,
    /// What happened to it, for its counters, its report and the
    /// promotion-wait histogram.
    tally: report::RequestTally,
    /// Its wait, holds and promotions in flight.
    progress: progress::RequestProgress,
}

impl ReqState {
    fn can_finalize(&self) -> bool {
        self.finished && self.store_keys_pending == 0 && self.parked.is_empty() && self.staged == 0
    }
}

struct Staged {
    tier: usize,
    req: RequestId,
    keys: Vec<Key>,
    slots: Vec<u32>,
}

struct State<P: PrimaryBackend> {
    primary: P,
    opts: ManagerOptions,
    tiers: Vec<TierEntry>,
    jobs: FastMap<JobId, JobEntry>,
    next_job: u64,
    epoch: u64,
    names: RequestNames,
    reqs: FastMap<RequestId, ReqState>,
    gate_spent: bool,
    /// Steps ended (`schedule_end` calls).
    steps: u64,
    /// Requests with a bounded wait or holds (checked against the bound at
    /// each step's end).
    tracked_reqs: Vec<RequestId>,
    staged: Vec<Staged>,
    parked_reqs: Vec<RequestId>,
    held: bool,
    started: bool,
    closed: bool,
    shutdown_failed: bool,
    keepalive: Option<Box<dyn Any + Send>>,
    /// The manager's counters (its gauges stay 0 here: `manager_stats` reads them).
    c: ManagerStats,
    /// Histograms and the request-report listener.
    obs: report::Observations,
    errors: VecDeque<String>,
    /// Events gathered from the tiers, not yet taken: at most the event
    /// capacity per tier (`pending_per_tier`, indexed by tier number).
    pending_events: VecDeque<TierEvent>,
    pending_per_tier: Vec<usize>,
    listener: Option<Listener>,
    /// What the last [`Manager::take_event_batches`] handed out, kept
    /// until the next one.
    handout: Handout,
    // scratch, reused across calls
    results: Vec<JobResult>,
    queue_buf: Vec<(usize, JobResult)>,
    keys_a: Vec<Key>,
    keys_b: Vec<Key>,
    slots_b: Vec<u32>,
    slots_c: Vec<u32>,
    found: Vec<(usize, prefix::Found)>,
    plan: StorePlan,
    events: Vec<Event>,
    ids: Vec<RequestId>,
    strings: Vec<String>,
    /// The pin sets and what they hold.
    pins: pins::PinSets,
    /// Finished jobs no tier holds any more, emptied, for the next
    /// submissions (`jobs.rs`): a job costs no allocation once the pool
    /// has its size.
    spare_jobs: Vec<JobRef>,
    /// Key and slot buffers of submitted staged promotions, for the next.
    spare_staged: Vec<(Vec<Key>, Vec<u32>)>,
    /// The request a pooled job names (none of the manager's).
    no_request: Request,
}

fn filter_allows(filter: &TierFilter, medium: Option<Medium>, locality: Option<Locality>) -> bool {
    match filter {
        TierFilter::All => true,
        TierFilter::Only(matchers) => matchers.iter().any(|m| {
            let medium_ok = m.medium.is_none() || medium.is_none() || m.medium == medium;
            let locality_ok = m.locality.is_none() || locality.is_none() || m.locality == locality;
            medium_ok && locality_ok
        }),
    }
}

impl<P: PrimaryBackend> Manager<P> {
    /// Number of secondary tiers.
    pub fn tier_count(&self) -> usize {
        self.tier_count.load(Ordering::Acquire)
    }

    /// Whether jobs are in flight, keys parked, promotions staged,
    /// completions queued, or any tier has work outstanding.
    pub fn has_pending_work(&self) -> Result<bool> {
        let s = self.enter("has_pending_work")?;
        Ok(!s.jobs.is_empty()
            || !s.parked_reqs.is_empty()
            || !s.staged.is_empty()
            || self.queue.nonempty.load(Ordering::Acquire)
            || s.tiers.iter().any(|t| t.tier.has_pending_work()))
    }

    /// The wake-up signal jobs finishing raise (see [`Notifier`]).
    pub fn notifier(&self) -> &Notifier {
        &self.notifier
    }

    /// Name of tier `index` (0 is "primary").
    pub fn tier_name(&self, index: usize) -> Result<Arc<str>> {
        let s = self.enter("tier_name")?;
        if index == 0 {
            return Ok(Arc::from("primary"));
        }
        s.tiers
            .get(index - 1)
            .map(|t| t.name.clone())
            .ok_or_else(|| {
                Error::InvalidArgument(format!(
                    "no tier {index} (the manager has {} secondary tiers)",
                    s.tiers.len()
                ))
            })
    }
}

impl<P: PrimaryBackend> State<P> {
    /// `id`, if it names a started request that is not finished; else
    /// [`Error::UnknownRequest`].
    #[inline]
    fn active(&self, id: RequestId) -> Result<RequestId> {
        match self.reqs.get(&id) {
            Some(st) if !st.finished => Ok(id),
            _ => Err(self.unknown_request(id)),
        }
    }
}
