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
//! Where things are: this file holds the public types, the [`Manager`]
//! with its re-entrancy guard and its request calls, and the state behind
//! its lock; `manager/` the rest: `setup.rs` building a manager and adding
//! its tiers, `lookup.rs` vLLM's per-key lookups and the answers' types,
//! `prefix.rs` the lookup of a whole prefix, `progress.rs` the waits and
//! the bound that keep waiting requests moving, `holds.rs` their holds, `handles.rs` what a
//! request handle stands for, `poll.rs` polling for finished jobs and the
//! error log, `jobs.rs` finishing jobs, staging promotions and submitting
//! jobs, `cascade.rs` cascades and parked keys, `step.rs` the end of a
//! step and the reset, `counters.rs` the counters, `report.rs` what is
//! recorded per request, `observe.rs` what the engine reads (stats,
//! events, errors).

use std::any::Any;
use std::cell::RefCell;
use std::collections::VecDeque;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::time::Instant;

use parking_lot::{Mutex, MutexGuard};

use super::backend::{CompleteStoreReport, PrimaryBackend, PrimaryLookup, StoreOutcome, StorePlan};
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
pub use crate::events::TierEvent;
use crate::key::Key;
use crate::region::{SlotMemory, SlotOwner};
use crate::request::{Locality, Medium, Request, RequestId, RequestInfo, RequestNames, TierFilter};
use crate::stats::Stat;

mod cascade;
mod counters;
mod handles;
mod holds;
mod in_place;
mod jobs;
mod lookup;
mod observe;
mod poll;
mod prefix;
mod progress;
mod report;
mod setup;
mod stat_lists;
mod step;

use counters::{ManagerCounters, TierCounters};
pub(crate) use lookup::LookupKind;
pub use lookup::{LookupAnswer, LookupResult, MissReason, PromotionAnswer};
use observe::Handout;
pub use observe::{EventBuffer, QueuedEvents, TakenBatch, TakenEvents};
use poll::CompletionQueue;
pub use progress::ProgressOptions;
pub use report::{PROMOTION_WAIT_STAT, RequestReport, RequestReportListener};
pub use stat_lists::ManagerStats;

type FastMap<K, V> = hashbrown::HashMap<K, V, foldhash::fast::RandomState>;

/// Most secondary tiers one manager holds (request-level tiers are a bit set).
pub const MAX_SECONDARY_TIERS: usize = 64;

/// A started request: the handle its later calls take, and the offload
/// policy the tiers asked for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct StartedRequest {
    /// The request's handle: never 0, never reused by the same manager.
    pub id: RequestId,
    /// Request-level if any tier asked for it, else block-level.
    pub policy: OffloadPolicy,
}

/// Options of a manager beyond its primary tier.
#[derive(Clone, Debug)]
pub struct ManagerOptions {
    /// Answer for a lookup that started a promotion.
    pub promotion_answer: PromotionAnswer,
    /// Bytes per block, used for back-pressure latency per byte when a tier
    /// reports no byte count (0: latency per block instead).
    pub block_bytes: u64,
    /// How many tier error messages the error log keeps (oldest dropped).
    pub error_log_capacity: usize,
    /// [0.33] Keys end with a 4-byte big-endian KV-cache group index: the
    /// manager turns its primary tier's KV-group option on (see
    /// [`PrimaryConfig::kv_groups`](crate::primary::PrimaryConfig::kv_groups));
    /// a primary tier built with the option keeps it either way.  Every
    /// call that takes keys (lookups included) then refuses a key shorter
    /// than 5 bytes as `InvalidKey`, before anything changes.
    pub kv_groups: bool,
    /// How waiting requests are kept moving: holds and the wait
    /// bound (default on; [`ProgressOptions::vllm()`] follows vLLM 0.33).
    pub progress: ProgressOptions,
}

impl Default for ManagerOptions {
    fn default() -> Self {
        ManagerOptions {
            promotion_answer: PromotionAnswer::Retry,
            block_bytes: 0,
            error_log_capacity: 64,
            kv_groups: false,
            progress: ProgressOptions::default(),
        }
    }
}

/// Per-tier options given at registration.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct TierOptions {
    /// Back-pressure detector and policy for cascades to this tier (none: never dropped).
    pub backpressure: Option<BackpressureConfig>,
    /// Whether the tier's events reach [`Manager::take_events`] (default
    /// true).  The tier queues at most the primary tier's event capacity
    /// (so a capacity of 0 turns every tier's events off); false turns this
    /// tier's events off whatever the capacity: the tier queues none, and
    /// any a tier reports anyway are discarded.
    pub events: bool,
}

impl Default for TierOptions {
    fn default() -> Self {
        TierOptions {
            backpressure: None,
            events: true,
        }
    }
}

/// What the caller attaches to a request at `on_new_request`.
#[derive(Clone, Debug, Default)]
pub struct RequestParams {
    /// Small key/value list tiers may read.
    pub params: Vec<(String, String)>,
    /// Opaque value passed back to tiers as is (a C pointer).
    pub user_data: usize,
    /// Which secondary tiers lookups may use.
    pub filter: TierFilter,
}

/// One merged statistic, labelled with where it comes from.
#[derive(Clone, Debug, PartialEq)]
pub struct ManagerStat {
    /// `None` for the manager's own totals, else the tier index (0 primary).
    pub tier: Option<usize>,
    /// Name of the tier ("manager", "primary", or the tier's name).
    pub tier_name: Arc<str>,
    /// The statistic.
    pub stat: Stat,
}

thread_local! {
    /// Managers whose lock this thread holds (innermost last).
    static ENTERED: RefCell<Vec<usize>> = const { RefCell::new(Vec::new()) };
}

/// The lock of one manager, taken by this thread; releases the
/// re-entrancy marker when dropped.
struct Entered<'a> {
    guard: MutexGuard<'a, State>,
    me: usize,
}

impl Drop for Entered<'_> {
    fn drop(&mut self) {
        if self.guard.listener.is_some() {
            // Push this call's events to the listener while the lock and the
            // re-entrancy marker are still held.
            self.guard.gather_events();
        }
        let me = self.me;
        ENTERED.with(|e| {
            let mut e = e.borrow_mut();
            // Usually this call's marker is the last (calls nest).
            if e.last() == Some(&me) {
                e.pop();
            } else if let Some(pos) = e.iter().rposition(|&m| m == me) {
                e.remove(pos);
            }
        });
    }
}

impl std::ops::Deref for Entered<'_> {
    type Target = State;
    fn deref(&self) -> &State {
        &self.guard
    }
}

impl std::ops::DerefMut for Entered<'_> {
    fn deref_mut(&mut self) -> &mut State {
        &mut self.guard
    }
}

/// The tiering manager.  See the module docs.
pub struct Manager {
    state: Mutex<State>,
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

struct State {
    primary: Box<dyn PrimaryBackend>,
    opts: ManagerOptions,
    tiers: Vec<TierEntry>,
    jobs: FastMap<JobId, JobEntry>,
    next_job: u64,
    epoch: u64,
    names: RequestNames,
    reqs: FastMap<RequestId, ReqState>,
    gate_spent: bool,
    /// Steps ended (`on_schedule_end` calls).
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
    c: ManagerCounters,
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

impl Manager {
    /// Takes the lock, refusing a re-entrant call from a tier callback.
    fn enter(&self, what: &str) -> Result<Entered<'_>> {
        let me = self as *const Manager as usize;
        ENTERED.with(|e| {
            let mut e = e.borrow_mut();
            if e.contains(&me) {
                return Err(Error::Reentrant(format!(
                    "{what} called from inside a callback of the same tiering manager"
                )));
            }
            e.push(me);
            Ok(())
        })?;
        // The marker is popped by `Entered::drop`.
        let guard = self.state.lock();
        let entered = Entered { guard, me };
        if entered.closed {
            return Err(Error::Closed(format!(
                "{what}: the tiering manager is shut down"
            )));
        }
        Ok(entered)
    }

    /// Number of secondary tiers.
    pub fn tier_count(&self) -> usize {
        self.tier_count.load(Ordering::Acquire)
    }

    /// Starts request `name` (unique among active requests: a name in use
    /// is [`Error::DuplicateRequest`]): asks every tier for its offload
    /// policy and answers request-level if any tier wants it.  The
    /// returned id is the handle every later call of the request takes;
    /// the name stays the request's label for tiers, events and logs.
    pub fn on_new_request(&self, name: &str, params: RequestParams) -> Result<StartedRequest> {
        let mut s = self.enter("on_new_request")?;
        let s = &mut *s;
        let id = s.names.insert(name)?;
        if let Err(e) = s.primary.begin_request(id) {
            let _ = s.names.remove(name);
            return Err(e);
        }
        s.started = true;
        let info: Request = Arc::new(RequestInfo {
            name: name.to_string(),
            params: params.params,
            user_data: params.user_data,
            filter: params.filter,
        });
        let mut request_level = 0u64;
        for (i, t) in s.tiers.iter_mut().enumerate() {
            if t.tier.on_new_request(&info) == OffloadPolicy::RequestLevel {
                request_level |= 1 << i;
            }
        }
        s.reqs.insert(
            id,
            ReqState {
                id,
                info,
                request_level,
                store_keys_pending: 0,
                finished: false,
                parked: Vec::new(),
                staged: 0,
                tally: report::RequestTally::default(),
                progress: progress::RequestProgress::default(),
            },
        );
        let policy = if request_level != 0 {
            OffloadPolicy::RequestLevel
        } else {
            OffloadPolicy::BlockLevel
        };
        Ok(StartedRequest { id, policy })
    }

    /// Pins `keys` (all ready) for a load to the GPU; `slots_out` gets
    /// their slots in key order.
    pub fn prepare_load(
        &self,
        request: RequestId,
        keys: &[Key],
        slots_out: &mut Vec<u32>,
    ) -> Result<()> {
        let mut s = self.enter("prepare_load")?;
        s.active(request)?;
        s.check_keys(keys.len(), |j| &keys[j])?;
        s.poll_gated(&self.queue);
        s.primary.prepare_load(request, keys, slots_out)?;
        s.on_loaded(request, keys.len(), |j| keys[j].as_bytes());
        Ok(())
    }

    /// [0.33] Gives keys of active `request` their token positions in the
    /// primary tier: `positions[i]` is the end-token position of the block
    /// of `keys[i]`; a later position replaces an earlier one.  Callable
    /// before the request's first call or between its calls.  See
    /// [`PrimaryTier::set_positions`](crate::primary::PrimaryTier::set_positions):
    /// with lru an active request's keys rank by position, tail evicted
    /// before head, and its finish commits them head to tail by position.
    /// Errors, nothing changed: unknown request, slices of different
    /// lengths, a key too short for its group index (KV groups on).
    pub fn set_positions(&self, request: RequestId, keys: &[Key], positions: &[u64]) -> Result<()> {
        let mut s = self.enter("set_positions")?;
        s.active(request)?;
        s.check_keys(keys.len(), |j| &keys[j])?;
        s.primary.set_positions(request, keys, positions)
    }

    /// Marks `keys` recently used in the primary tier and every secondary tier.
    pub fn touch(&self, request: RequestId, keys: &[Key]) -> Result<()> {
        let mut s = self.enter("touch")?;
        let s = &mut *s;
        s.active(request)?;
        s.check_keys(keys.len(), |j| &keys[j])?;
        s.primary.touch(request, keys)?;
        if !s.tiers.is_empty() {
            let info = &s.reqs[&request].info;
            for t in &mut s.tiers {
                t.tier.touch(keys, info);
            }
        }
        Ok(())
    }

    /// Unpins `keys` after a load to the GPU.
    ///
    /// [0.33] As in vLLM, the load may complete after the request finished
    /// (an aborted request whose load was in flight): the handle of a
    /// request that finished with keys its [`Manager::prepare_load`] pinned
    /// still pinned stays valid here, for those pins alone (any other key
    /// is an error, nothing changed), until the last is released or the
    /// cache is reset; every other call takes it as unknown.  A pin of
    /// it that other requests' unpins took is not released again (see
    /// [`PrimaryTier::complete_load`](crate::primary::PrimaryTier::complete_load)).
    pub fn complete_load(&self, request: RequestId, keys: &[Key]) -> Result<()> {
        let mut s = self.enter("complete_load")?;
        // The primary tier knows both the active requests and the finished
        // ones whose loads still hold pins.
        s.check_keys(keys.len(), |j| &keys[j])?;
        s.primary.complete_load(request, keys).map_err(|e| match e {
            Error::UnknownRequest(_) => s.unknown_request(request),
            other => other,
        })
    }

    /// Plans a store of `keys` into the primary tier (always polling first),
    /// and cascades the request's already resident ready keys to the tiers
    /// that asked for request-level offload (write-pending ones are parked).
    /// The keys to store are write pending for `request`: only its own
    /// [`Manager::complete_store`] finishes them.
    pub fn prepare_store(
        &self,
        request: RequestId,
        keys: &[Key],
        plan: &mut StorePlan,
    ) -> Result<StoreOutcome> {
        let mut s = self.enter("prepare_store")?;
        let s = &mut *s;
        let rid = s.active(request)?;
        s.check_keys(keys.len(), |j| &keys[j])?;
        let _ = s.poll_now(&self.queue);
        s.gate_spent = true;
        let outcome = s.primary.prepare_store(rid, keys, plan)?;
        if outcome == StoreOutcome::Refused {
            s.c.store_refusals += 1;
            return Ok(outcome);
        }
        let Some(st) = s.reqs.get_mut(&rid) else {
            return Ok(outcome);
        };
        st.store_keys_pending += plan.slots.len() as u64;
        if st.request_level != 0 {
            s.cascade_resident(rid, keys, plan);
        }
        Ok(outcome)
    }

    /// Finishes (part of) `request`'s store of `keys` into the primary
    /// tier: only the keys its own `prepare_store` planned, and that are
    /// still write pending for it, become ready (success) or are dropped
    /// (failure); every other key named (another request's, a promotion's,
    /// a ready or an absent key) is left alone and counted in the primary
    /// tier's stats and in the report.  On success the keys it made ready
    /// cascade to every secondary tier.  A plan may be completed in several
    /// calls: the request has a store in flight, and is not finalized,
    /// until every key it planned was completed.  The request may already
    /// be finished (not yet finalized).
    ///
    /// The report comes back as `Ok` only when every key named was acted
    /// on.  A key left alone makes the answer [`Error::KeysIgnored`],
    /// carrying the report (the rest of the keys were completed all the
    /// same; see [`CompleteStoreReport::checked`]).  A completion for a
    /// request with no store in flight (after a reset) is counted
    /// (`ignored_store_completions`) and ignored: every key it names is
    /// left alone, [`Error::KeysIgnored`] with an all-zero report (none
    /// named: the all-zero report).
    pub fn complete_store(
        &self,
        request: RequestId,
        keys: &[Key],
        success: bool,
    ) -> Result<CompleteStoreReport> {
        let mut s = self.enter("complete_store")?;
        let s = &mut *s;
        let rid = request;
        if !s.reqs.contains_key(&rid) {
            return Err(s.unknown_request(rid));
        }
        s.check_keys(keys.len(), |j| &keys[j])?;
        let Some(st) = s.reqs.get_mut(&rid) else {
            return Err(Error::UnknownRequest(rid.to_string()));
        };
        if st.store_keys_pending == 0 {
            s.c.ignored_store_completions += 1;
            return CompleteStoreReport::nothing_in_flight(rid, keys.len());
        }
        let info = st.info.clone();
        let report = s.complete_and_cascade(rid, keys, success, &info);
        if let Some(st) = s.reqs.get_mut(&rid) {
            let done = (report.ready + report.dropped) as u64;
            st.store_keys_pending = st.store_keys_pending.saturating_sub(done);
            st.tally.on_store(&report);
        }
        s.maybe_finalize(rid);
        report.checked(rid)
    }

    /// Marks `request` finished; its state goes (and tiers hear of it) once
    /// no store is in flight, no key is parked and no promotion is staged.
    /// Its handle is then unknown to every call (but
    /// [`Manager::complete_load`] of keys its loads still pin); its name
    /// may be reused.
    pub fn on_request_finished(&self, request: RequestId) -> Result<()> {
        let mut s = self.enter("on_request_finished")?;
        let rid = s.active(request)?;
        s.primary.on_request_finished(rid)?;
        s.forget_holds(rid);
        s.end_wait(rid);
        if let Some(st) = s.reqs.get_mut(&rid) {
            st.finished = true;
        }
        s.maybe_finalize(rid);
        Ok(())
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

    /// The wake-up signal jobs finishing raise (see [`crate::tiering::notify`]).
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

    /// Test support (feature `testing`): hands the primary tier this
    /// manager drives to `f` as its own type `T` (the real
    /// [`PrimaryTier`](crate::primary::PrimaryTier), or the model a test
    /// built it over), so a test can check its invariants between calls.
    /// A backend of another type is [`Error::InvalidArgument`].
    #[cfg(feature = "testing")]
    pub fn inspect_primary<T: PrimaryBackend, R>(&self, f: impl FnOnce(&T) -> R) -> Result<R> {
        let s = self.enter("inspect_primary")?;
        match s.primary.as_any().downcast_ref::<T>() {
            Some(primary) => Ok(f(primary)),
            None => Err(Error::InvalidArgument(format!(
                "inspect_primary: the primary tier is not a {}",
                std::any::type_name::<T>()
            ))),
        }
    }

    /// Shuts every secondary tier down (each gets a try even if an earlier
    /// one failed), then releases the attached region.  If a tier failed,
    /// the region stays mapped (that tier may still use it) and the error
    /// names every failure.  Every later call returns [`Error::Closed`].
    pub fn shutdown(&self) -> Result<()> {
        let mut s = self.enter("shutdown")?;
        s.shutdown_now()
    }
}

impl Drop for Manager {
    fn drop(&mut self) {
        let s = self.state.get_mut();
        if !s.closed {
            let _ = s.shutdown_now();
        }
        if s.shutdown_failed
            && let Some(keep) = s.keepalive.take()
        {
            // A tier failed to stop and may still touch the region: keep it mapped.
            std::mem::forget(keep);
        }
    }
}

impl State {
    /// `id`, if it names a started request that is not finished; else
    /// [`Error::UnknownRequest`].
    #[inline]
    fn active(&self, id: RequestId) -> Result<RequestId> {
        match self.reqs.get(&id) {
            Some(st) if !st.finished => Ok(id),
            _ => Err(self.unknown_request(id)),
        }
    }

    fn shutdown_now(&mut self) -> Result<()> {
        self.closed = true;
        let mut failures = Vec::new();
        let mut names = Vec::new();
        for t in &mut self.tiers {
            if let Err(e) = t.tier.shutdown() {
                failures.push(format!("{}: {e}", t.name));
                names.push(t.name.to_string());
            }
        }
        if failures.is_empty() {
            self.keepalive = None;
            return Ok(());
        }
        self.shutdown_failed = true;
        let message = format!(
            "shutdown failed ({}); the region stays mapped because the tier may still use it",
            failures.join("; ")
        );
        self.log(message.clone());
        Err(Error::Tier {
            tier: names.join(","),
            message,
        })
    }
}
