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

use std::any::Any;
use std::cell::RefCell;
use std::collections::VecDeque;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

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
use crate::key::Key;
use crate::region::{SlotMemory, SlotOwner};
use crate::request::{Locality, Medium, Request, RequestId, RequestInfo, RequestNames, TierFilter};
use crate::stats::Stat;

mod in_place;
mod jobs;
mod lookup;
mod observe;

use observe::Handout;
pub use observe::{ManagerStats, TakenBatch, TakenEvents};

type FastMap<K, V> = hashbrown::HashMap<K, V, foldhash::fast::RandomState>;

/// Most secondary tiers one manager holds (request-level tiers are a bit set).
pub const MAX_SECONDARY_TIERS: usize = 64;

/// What `lookup` answers for a key whose promotion it just started
/// (`"retry"` or `"hit_pending"` in JSON).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum PromotionAnswer {
    /// vLLM's answer before 0.33 (the default): ask again later.
    #[default]
    Retry,
    /// vLLM 0.33's answer: the block is on its way (write pending).
    HitPending,
}

/// The manager's answer to a lookup.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LookupResult {
    /// Not readable, and nothing is on its way: see [`MissReason`].
    Miss,
    /// Ready in the primary tier.
    Hit,
    /// Coming into the primary tier (write pending).
    HitPending,
    /// Ask again later (a promotion started, or a tier is busy).
    Retry,
}

/// Why a lookup answered [`LookupResult::Miss`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MissReason {
    /// No tier has the key, or none was asked: there is no secondary tier,
    /// the request's filter excludes every tier, or promotions are held
    /// after a reset.  Counted in `misses_absent`.
    Absent,
    /// A secondary tier has the key, but the primary tier did not take its
    /// promotion: no free slot, or its admission threshold did not admit
    /// the key yet.  Asking again a step later may find it.  Counted in
    /// `misses_no_room`.
    NoRoom,
}

/// The answer of [`Manager::lookup_prefix`]: keys are looked up in order
/// until the first that is not HIT.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LookupAnswer {
    /// Number of leading keys that are HIT.
    pub hits: usize,
    /// The answer of key `hits` ([`LookupResult::Hit`] when every key is).
    pub stop: LookupResult,
    /// Why, when `stop` is [`LookupResult::Miss`].
    pub reason: Option<MissReason>,
}

impl LookupAnswer {
    /// The number of keys looked up: the hits and the key that stopped them.
    pub fn looked_up(&self) -> usize {
        self.hits + usize::from(self.stop != LookupResult::Hit)
    }
}

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
    /// a primary tier built with the option keeps it either way.
    pub kv_groups: bool,
}

impl Default for ManagerOptions {
    fn default() -> Self {
        ManagerOptions {
            promotion_answer: PromotionAnswer::Retry,
            block_bytes: 0,
            error_log_capacity: 64,
            kv_groups: false,
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

/// One event with the tier it happened in (0 primary, 1.. secondary).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TierEvent {
    /// Tier index.
    pub tier: usize,
    /// The event.
    pub event: Event,
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
            if let Some(pos) = e.iter().rposition(|&m| m == me) {
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

/// Finished jobs reported from any thread, waiting for the next poll.
#[derive(Default)]
struct CompletionQueue {
    nonempty: AtomicBool,
    items: Mutex<Vec<(usize, JobResult)>>,
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

#[derive(Default, Clone, Copy)]
struct TierCounters {
    lookups: u64,
    hits: u64,
    retries: u64,
    promotion_jobs: u64,
    promotion_blocks: u64,
    promotion_failures: u64,
    partial_promotions: u64,
    cascade_jobs: u64,
    cascade_blocks: u64,
    cascade_failures: u64,
    dropped_cascade_jobs: u64,
    dropped_cascade_blocks: u64,
    bytes_loaded: u64,
    bytes_stored: u64,
    load_time: Duration,
    store_time: Duration,
    tier_bugs: u64,
    /// Polls that took [`MAX_FINISHED_PER_POLL`] jobs and left the rest.
    poll_limit_reached: u64,
    /// Event takes that took [`MAX_EVENTS_PER_TAKE`] events and left the rest.
    event_limit_reached: u64,
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

#[derive(Default, Clone, Copy)]
struct ManagerCounters {
    lookups: u64,
    primary_hits: u64,
    primary_hit_pending: u64,
    promotions_started: u64,
    allocation_failures: u64,
    promotions_not_admitted: u64,
    held_misses: u64,
    misses_absent: u64,
    misses_no_room: u64,
    store_refusals: u64,
    ignored_store_completions: u64,
    parked_keys: u64,
    parked_keys_dropped: u64,
    stale_completions: u64,
    tier_bugs: u64,
    internal_errors: u64,
    resets: u64,
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
    staged: Vec<Staged>,
    parked_reqs: Vec<RequestId>,
    held: bool,
    started: bool,
    closed: bool,
    shutdown_failed: bool,
    keepalive: Option<Box<dyn Any + Send>>,
    c: ManagerCounters,
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

/// An error unless memory of `slot_count` slots (`what`) holds every one
/// of the primary tier's `capacity` slots.
fn covers(capacity: u32, slot_count: u32, what: &str) -> Result<()> {
    if slot_count >= capacity {
        return Ok(());
    }
    Err(Error::InvalidArgument(format!(
        "{what} has {slot_count} slots, fewer than the primary tier's {capacity}: \
         slot ids {slot_count} to {} would fall outside it (give it at least {capacity} slots)",
        capacity - 1
    )))
}

impl Manager {
    /// A manager over `primary` with no secondary tier yet.
    pub fn with_backend(mut primary: Box<dyn PrimaryBackend>, opts: ManagerOptions) -> Manager {
        if opts.kv_groups {
            primary.enable_kv_groups();
        }
        Manager {
            state: Mutex::new(State {
                primary,
                opts,
                tiers: Vec::new(),
                jobs: FastMap::default(),
                next_job: 0,
                epoch: 0,
                names: RequestNames::default(),
                reqs: FastMap::default(),
                gate_spent: false,
                staged: Vec::new(),
                parked_reqs: Vec::new(),
                held: false,
                started: false,
                closed: false,
                shutdown_failed: false,
                keepalive: None,
                c: ManagerCounters::default(),
                errors: VecDeque::new(),
                pending_events: VecDeque::new(),
                pending_per_tier: vec![0],
                listener: None,
                handout: Handout::default(),
                results: Vec::new(),
                queue_buf: Vec::new(),
                keys_a: Vec::new(),
                keys_b: Vec::new(),
                plan: StorePlan::default(),
                events: Vec::new(),
                ids: Vec::new(),
                strings: Vec::new(),
            }),
            queue: CompletionQueue::default(),
            tier_count: AtomicUsize::new(0),
            completes_through_queue: AtomicU64::new(0),
            queue_tier_names: Mutex::new(Vec::new()),
            notifier: Notifier::new(),
            slots: std::sync::OnceLock::new(),
        }
    }

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

    /// Adds a secondary tier with default options; see [`Manager::add_tier_with`].
    pub fn add_tier(&self, tier: Box<dyn SecondaryTier>) -> Result<usize> {
        self.add_tier_with(tier, TierOptions::default())
    }

    /// Adds a secondary tier at the end of the list and returns its index
    /// (1 for the first).  Allowed until the first request starts.
    pub fn add_tier_with(&self, tier: Box<dyn SecondaryTier>, opts: TierOptions) -> Result<usize> {
        let mut s = self.enter("add_tier")?;
        if s.started {
            return Err(Error::InvalidArgument(format!(
                "cannot add tier {:?}: tiers must be added before the first request starts",
                tier.name()
            )));
        }
        if s.tiers.len() >= MAX_SECONDARY_TIERS {
            return Err(Error::InvalidArgument(format!(
                "cannot add tier {:?}: at most {MAX_SECONDARY_TIERS} secondary tiers",
                tier.name()
            )));
        }
        if let Some(bp) = &opts.backpressure {
            bp.validate()?;
        }
        if let Some(n) = tier.slot_count() {
            covers(
                s.primary.capacity(),
                n,
                &format!("the slot memory of tier {:?}", tier.name()),
            )?;
        }
        let mut tier = tier;
        tier.set_notifier(self.notifier.clone());
        let events_on = opts.events && s.primary.event_capacity() > 0;
        tier.set_event_capacity(if events_on {
            s.primary.event_capacity()
        } else {
            0
        });
        let name: Arc<str> = Arc::from(tier.name());
        let entry = TierEntry {
            medium: tier.medium(),
            locality: tier.locality(),
            tier,
            name,
            detector: opts.backpressure.map(Detector::new),
            stores_in_flight: 0,
            events_on,
            c: TierCounters::default(),
            reported: CounterMemory::default(),
        };
        let through_queue = entry.tier.reports_through_complete_job();
        self.queue_tier_names.lock().push(entry.name.clone());
        s.tiers.push(entry);
        s.pending_per_tier.push(0);
        let n = s.tiers.len();
        if through_queue {
            self.completes_through_queue
                .fetch_or(1 << (n - 1), Ordering::Relaxed);
        }
        self.tier_count.store(n, Ordering::Release);
        Ok(n)
    }

    /// Keeps `keep` (a region or slot memory) alive until a successful
    /// shutdown; if a tier fails to shut down it is never released, so the
    /// mapping stays valid for that tier.  Memory of fewer slots than the
    /// primary tier has is refused ([`Error::InvalidArgument`]).
    pub fn attach_region(&self, keep: impl SlotOwner) -> Result<()> {
        let mut s = self.enter("attach_region")?;
        covers(s.primary.capacity(), keep.slot_count(), "the region")?;
        s.keepalive = Some(Box::new(keep));
        Ok(())
    }

    /// An error unless `slots` holds every slot of the primary tier (a
    /// tier copying through it would otherwise be handed slot ids past its
    /// end); for checking a region before opening a tier over it.
    pub fn check_slots(&self, slots: &SlotMemory) -> Result<()> {
        let s = self.enter("check_slots")?;
        covers(s.primary.capacity(), slots.slot_count(), "the region")
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
        s.poll_gated(&self.queue);
        s.primary.prepare_load(request, keys, slots_out)
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
        s.primary.set_positions(request, keys, positions)
    }

    /// Marks `keys` recently used in the primary tier and every secondary tier.
    pub fn touch(&self, request: RequestId, keys: &[Key]) -> Result<()> {
        let mut s = self.enter("touch")?;
        let s = &mut *s;
        s.active(request)?;
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
    pub fn complete_load(&self, request: RequestId, keys: &[Key]) -> Result<()> {
        let mut s = self.enter("complete_load")?;
        s.active(request)?;
        s.primary.complete_load(request, keys)
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
        if st.request_level == 0 {
            return Ok(outcome);
        }
        let mut ready = std::mem::take(&mut s.keys_a);
        ready.clear();
        let was_parked = !st.parked.is_empty();
        let mut j = 0;
        for k in keys {
            if j < plan.to_store.len() && plan.to_store[j] == *k {
                j += 1;
                continue;
            }
            match s.primary.lookup(k) {
                PrimaryLookup::Hit => ready.push(*k),
                // A repeat of a key this call stores was not resident
                // before the call: its own completion cascades it.
                PrimaryLookup::HitPending if plan.to_store.contains(k) => {}
                PrimaryLookup::HitPending => {
                    st.parked.push(*k);
                    s.c.parked_keys += 1;
                }
                PrimaryLookup::Miss => {}
            }
        }
        if !was_parked && !st.parked.is_empty() {
            s.parked_reqs.push(rid);
        }
        let mask = st.request_level;
        let info = st.info.clone();
        s.cascade_to(mask, &ready, &info);
        s.keys_a = ready;
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
    /// be finished (not yet finalized).  A completion for a request with no
    /// store in flight (after a reset) is counted
    /// (`ignored_store_completions`) and ignored: the report is all zeros.
    pub fn complete_store(
        &self,
        request: RequestId,
        keys: &[Key],
        success: bool,
    ) -> Result<CompleteStoreReport> {
        let mut s = self.enter("complete_store")?;
        let s = &mut *s;
        let rid = request;
        let Some(st) = s.reqs.get_mut(&rid) else {
            return Err(Error::UnknownRequest(rid.to_string()));
        };
        if st.store_keys_pending == 0 {
            s.c.ignored_store_completions += 1;
            return Ok(CompleteStoreReport::default());
        }
        let info = st.info.clone();
        let mut made_ready = std::mem::take(&mut s.keys_b);
        made_ready.clear();
        let report = s
            .primary
            .complete_store(rid, keys, success, &mut made_ready);
        if let Some(st) = s.reqs.get_mut(&rid) {
            let done = (report.ready + report.dropped) as u64;
            st.store_keys_pending = st.store_keys_pending.saturating_sub(done);
        }
        if success && !s.tiers.is_empty() {
            let all = if s.tiers.len() == 64 {
                u64::MAX
            } else {
                (1u64 << s.tiers.len()) - 1
            };
            s.cascade_to(all, &made_ready, &info);
        }
        s.keys_b = made_ready;
        s.maybe_finalize(rid);
        Ok(report)
    }

    /// Marks `request` finished; its state goes (and tiers hear of it) once
    /// no store is in flight, no key is parked and no promotion is staged.
    /// Its handle is then unknown to every call; its name may be reused.
    pub fn on_request_finished(&self, request: RequestId) -> Result<()> {
        let mut s = self.enter("on_request_finished")?;
        let rid = s.active(request)?;
        s.primary.on_request_finished(rid)?;
        if let Some(st) = s.reqs.get_mut(&rid) {
            st.finished = true;
        }
        s.maybe_finalize(rid);
        Ok(())
    }

    /// Ends a scheduler step: polls (gated), re-arms the gate, submits the
    /// staged promotions (one load job per tier and request, in start
    /// order), retries parked cascades, finalizes requests that can be, and
    /// tells every tier.
    pub fn on_schedule_end(&self) -> Result<()> {
        let mut s = self.enter("on_schedule_end")?;
        let s = &mut *s;
        s.poll_gated(&self.queue);
        s.gate_spent = false;
        let mut ids = std::mem::take(&mut s.ids);
        ids.clear();
        let staged = std::mem::take(&mut s.staged);
        for e in staged {
            let Some(st) = s.reqs.get_mut(&e.req) else {
                continue;
            };
            st.staged -= 1;
            let info = st.info.clone();
            if st.can_finalize() {
                ids.push(e.req);
            }
            let entry = &mut s.tiers[e.tier];
            entry.c.promotion_jobs += 1;
            entry.c.promotion_blocks += e.keys.len() as u64;
            s.submit(e.tier, Direction::Load, e.keys, e.slots, info);
        }
        s.retry_parked(&mut ids);
        for &rid in &ids {
            s.maybe_finalize(rid);
        }
        s.ids = ids;
        for t in &mut s.tiers {
            t.tier.on_schedule_end();
        }
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

    /// Drains every tier, collects their finished jobs, drops staged
    /// promotions, clears in-flight stores (the primary tier forgets who
    /// wrote what: later completions of those stores are counted and
    /// ignored) and parked keys, finalizes
    /// finished requests and resets the primary tier.  With secondary
    /// tiers, promotions are then held until [`Manager::reset_flushed`].
    /// If a tier fails to drain, nothing is reset and the error says which.
    pub fn reset_cache(&self) -> Result<()> {
        let mut s = self.enter("reset_cache")?;
        let s = &mut *s;
        for t in &mut s.tiers {
            if let Err(e) = t.tier.drain() {
                return Err(Error::Tier {
                    tier: t.name.to_string(),
                    message: format!("drain failed, the cache was not reset: {e}"),
                });
            }
        }
        // Every drained job is reported now; a tier holding more than one
        // poll takes gets further polls, as many as its jobs need.
        let mut rounds = s.jobs.len() / MAX_FINISHED_PER_POLL + 1;
        while s.poll_now(&self.queue) && rounds > 0 {
            rounds -= 1;
        }
        if !s.jobs.is_empty() {
            let mut orphans: Vec<(usize, u64)> = s
                .jobs
                .iter()
                .filter(|(_, j)| j.epoch == s.epoch)
                .map(|(id, j)| (j.tier, id.0))
                .collect();
            orphans.sort_unstable();
            for (t, id) in orphans {
                let name = s.tiers[t].name.clone();
                s.tiers[t].c.tier_bugs += 1;
                s.tier_bug(
                    &name,
                    format!(
                        "job {id} was not reported after drain; its completion will be ignored"
                    ),
                );
            }
        }
        s.epoch += 1;
        for e in s.staged.drain(..) {
            if let Some(st) = s.reqs.get_mut(&e.req) {
                st.staged = 0;
            }
        }
        s.parked_reqs.clear();
        let mut ids = std::mem::take(&mut s.ids);
        ids.clear();
        for st in s.reqs.values_mut() {
            st.store_keys_pending = 0;
            st.parked.clear();
            st.staged = 0;
            if st.finished {
                ids.push(st.id);
            }
        }
        ids.sort_unstable();
        for &rid in &ids {
            s.maybe_finalize(rid);
        }
        s.ids = ids;
        s.primary.reset();
        for t in &mut s.tiers {
            if let Some(d) = &mut t.detector {
                d.reset();
            }
        }
        s.gate_spent = false;
        s.held = !s.tiers.is_empty();
        s.c.resets += 1;
        Ok(())
    }

    /// Ends the promotion hold that follows `reset_cache` (late worker
    /// writes from before the reset are done).
    pub fn reset_flushed(&self) -> Result<()> {
        let mut s = self.enter("reset_flushed")?;
        s.held = false;
        Ok(())
    }

    /// Reports a finished job from any thread, without the main lock; the
    /// next poll collects it.  `tier` is the index `add_tier` returned, of
    /// a tier that reports through this call
    /// ([`SecondaryTier::reports_through_complete_job`]); any other index
    /// (the primary tier's, one past the last tier, a built-in tier that
    /// reports through `poll_finished`) is [`Error::InvalidArgument`] and
    /// nothing is queued.  Reports of unknown or repeated job ids are tier
    /// bugs, logged then.
    pub fn complete_job(&self, tier: usize, result: JobResult) -> Result<()> {
        let n = self.tier_count.load(Ordering::Acquire);
        if tier == 0 || tier > n {
            return Err(Error::InvalidArgument(format!(
                "complete_job: tier index {tier} is not a secondary tier (1..={n})"
            )));
        }
        if self.completes_through_queue.load(Ordering::Relaxed) & (1 << (tier - 1)) == 0 {
            let name = self
                .queue_tier_names
                .lock()
                .get(tier - 1)
                .cloned()
                .unwrap_or_else(|| Arc::from("?"));
            return Err(Error::InvalidArgument(format!(
                "complete_job: tier {tier} ({name:?}) reports its jobs through poll_finished, \
                 not complete_job; the result of job {} was refused",
                result.id.0
            )));
        }
        let mut q = self.queue.items.lock();
        q.push((tier - 1, result));
        self.queue.nonempty.store(true, Ordering::Release);
        drop(q);
        self.notifier.notify();
        Ok(())
    }

    /// Records the slot memory the primary tier's slots live in, so
    /// callers that did not build it (a manager made from a configuration)
    /// can find it.  Set once; a second call is an error, and so is memory
    /// of fewer slots than the primary tier has.
    pub fn set_slot_memory(&self, slots: SlotMemory) -> Result<()> {
        self.check_slots(&slots)?;
        self.slots
            .set(slots)
            .map_err(|_| Error::InvalidArgument("the manager's slot memory is already set".into()))
    }

    /// The slot memory recorded with [`Manager::set_slot_memory`], if any.
    pub fn slot_memory(&self) -> Option<&SlotMemory> {
        self.slots.get()
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
            _ => Err(Error::UnknownRequest(id.to_string())),
        }
    }

    fn poll_gated(&mut self, queue: &CompletionQueue) {
        if !self.gate_spent {
            self.gate_spent = true;
            let _ = self.poll_now(queue);
        }
    }

    /// Collects finished jobs: the completion queue, then at most
    /// [`MAX_FINISHED_PER_POLL`] from each tier.  True if a tier may hold more.
    fn poll_now(&mut self, queue: &CompletionQueue) -> bool {
        if queue.nonempty.load(Ordering::Acquire) {
            let mut buf = std::mem::take(&mut self.queue_buf);
            {
                let mut q = queue.items.lock();
                std::mem::swap(&mut *q, &mut buf);
                queue.nonempty.store(false, Ordering::Release);
            }
            for (t, r) in buf.drain(..) {
                self.finish_job(t, r);
            }
            self.queue_buf = buf;
        }
        if self.tiers.is_empty() {
            return false;
        }
        let mut more = false;
        let mut results = std::mem::take(&mut self.results);
        for t in 0..self.tiers.len() {
            results.clear();
            self.tiers[t]
                .tier
                .poll_finished(MAX_FINISHED_PER_POLL, &mut results);
            if results.len() >= MAX_FINISHED_PER_POLL {
                // The rest waits for the next poll.
                self.tiers[t].c.poll_limit_reached += 1;
                more = true;
            }
            for r in results.drain(..) {
                self.finish_job(t, r);
            }
        }
        self.results = results;
        // Tier failures reach the log (and the log callback) as they happen.
        self.gather_errors();
        more
    }

    fn tier_bug(&mut self, tier: &str, message: String) {
        self.c.tier_bugs += 1;
        let text = Error::Tier {
            tier: tier.to_string(),
            message,
        }
        .to_string();
        self.log(text);
    }

    fn log(&mut self, text: String) {
        // Also to the engine's log callback, if it installed one.
        log::warn!(target: "kvtier::tiering", "{text}");
        if self.opts.error_log_capacity == 0 {
            return;
        }
        while self.errors.len() >= self.opts.error_log_capacity {
            self.errors.pop_front();
        }
        self.errors.push_back(text);
    }

    fn gather_errors(&mut self) {
        let mut strings = std::mem::take(&mut self.strings);
        for t in 0..self.tiers.len() {
            strings.clear();
            self.tiers[t].tier.take_errors(&mut strings);
            let name = self.tiers[t].name.clone();
            for m in strings.drain(..) {
                self.log(
                    Error::Tier {
                        tier: name.to_string(),
                        message: m,
                    }
                    .to_string(),
                );
            }
        }
        self.strings = strings;
    }

    fn maybe_finalize(&mut self, rid: RequestId) {
        match self.reqs.get(&rid) {
            Some(st) if st.can_finalize() => {}
            _ => return,
        }
        let Some(st) = self.reqs.remove(&rid) else {
            return;
        };
        let _ = self.names.remove(&st.info.name);
        for t in &mut self.tiers {
            t.tier.on_request_finished(&st.info);
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

impl Manager {
    /// A manager over the CPU primary tier `primary`, with no secondary tier yet.
    pub fn new(primary: crate::primary::PrimaryTier, opts: ManagerOptions) -> Manager {
        Manager::with_backend(Box::new(primary), opts)
    }
}
