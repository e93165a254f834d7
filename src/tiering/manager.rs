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
    /// Not found in any tier (or the primary tier has no room to promote it).
    Miss,
    /// Ready in the primary tier.
    Hit,
    /// Coming into the primary tier (write pending).
    HitPending,
    /// Ask again later (a promotion started, or a tier is busy).
    Retry,
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
    /// The last request name resolved and its id: engines make runs of
    /// calls for one request, and this skips hashing the name.
    last_name: String,
    last_id: Option<RequestId>,
    errors: VecDeque<String>,
    /// Events gathered from the tiers, not yet taken: at most the event
    /// capacity per tier (`pending_per_tier`, indexed by tier number).
    pending_events: VecDeque<TierEvent>,
    pending_per_tier: Vec<usize>,
    listener: Option<Listener>,
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
                last_name: String::new(),
                last_id: None,
                errors: VecDeque::new(),
                pending_events: VecDeque::new(),
                pending_per_tier: vec![0],
                listener: None,
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

    /// Starts request `name`: asks every tier for its offload policy and
    /// answers request-level if any tier wants it.
    pub fn on_new_request(&self, name: &str, params: RequestParams) -> Result<OffloadPolicy> {
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
        Ok(if request_level != 0 {
            OffloadPolicy::RequestLevel
        } else {
            OffloadPolicy::BlockLevel
        })
    }

    /// Looks one key up for `request`; see [`LookupResult`].
    pub fn lookup(&self, request: &str, key: &Key) -> Result<LookupResult> {
        let mut s = self.enter("lookup")?;
        let s = &mut *s;
        let rid = s.active(request)?;
        s.poll_gated(&self.queue);
        s.c.lookups += 1;
        match s.primary.lookup(key) {
            PrimaryLookup::Hit => {
                s.c.primary_hits += 1;
                return Ok(LookupResult::Hit);
            }
            PrimaryLookup::HitPending => {
                s.c.primary_hit_pending += 1;
                return Ok(LookupResult::HitPending);
            }
            PrimaryLookup::Miss => {}
        }
        if s.tiers.is_empty() {
            return Ok(LookupResult::Miss);
        }
        if s.held {
            s.c.held_misses += 1;
            return Ok(LookupResult::Miss);
        }
        let info = match s.reqs.get(&rid) {
            Some(st) => st.info.clone(),
            None => return Err(Error::UnknownRequest(request.to_string())),
        };
        let mut any_retry = false;
        for t in 0..s.tiers.len() {
            let entry = &mut s.tiers[t];
            if !filter_allows(&info.filter, entry.medium, entry.locality) {
                continue;
            }
            entry.c.lookups += 1;
            match entry.tier.lookup(key, &info) {
                TierLookup::Hit => {
                    entry.c.hits += 1;
                    if !s.start_promotion(t, rid, key) {
                        return Ok(LookupResult::Miss);
                    }
                    return Ok(match s.opts.promotion_answer {
                        PromotionAnswer::Retry => LookupResult::Retry,
                        PromotionAnswer::HitPending => LookupResult::HitPending,
                    });
                }
                TierLookup::Retry => {
                    entry.c.retries += 1;
                    any_retry = true;
                }
                TierLookup::Miss => {}
            }
        }
        Ok(if any_retry {
            LookupResult::Retry
        } else {
            LookupResult::Miss
        })
    }

    /// Pins `keys` (all ready) for a load to the GPU; `slots_out` gets
    /// their slots in key order.
    pub fn prepare_load(
        &self,
        request: &str,
        keys: &[Key],
        slots_out: &mut Vec<u32>,
    ) -> Result<()> {
        let mut s = self.enter("prepare_load")?;
        let rid = s.active(request)?;
        s.poll_gated(&self.queue);
        s.primary.prepare_load(rid, keys, slots_out)
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
    pub fn set_positions(&self, request: &str, keys: &[Key], positions: &[u64]) -> Result<()> {
        let mut s = self.enter("set_positions")?;
        let rid = s.active(request)?;
        s.primary.set_positions(rid, keys, positions)
    }

    /// Marks `keys` recently used in the primary tier and every secondary tier.
    pub fn touch(&self, request: &str, keys: &[Key]) -> Result<()> {
        let mut s = self.enter("touch")?;
        let s = &mut *s;
        let rid = s.active(request)?;
        s.primary.touch(rid, keys)?;
        if !s.tiers.is_empty() {
            let info = &s.reqs[&rid].info;
            for t in &mut s.tiers {
                t.tier.touch(keys, info);
            }
        }
        Ok(())
    }

    /// Unpins `keys` after a load to the GPU.
    pub fn complete_load(&self, request: &str, keys: &[Key]) -> Result<()> {
        let mut s = self.enter("complete_load")?;
        let rid = s.active(request)?;
        s.primary.complete_load(rid, keys)
    }

    /// Plans a store of `keys` into the primary tier (always polling first),
    /// and cascades the request's already resident ready keys to the tiers
    /// that asked for request-level offload (write-pending ones are parked).
    /// The keys to store are write pending for `request`: only its own
    /// [`Manager::complete_store`] finishes them.
    pub fn prepare_store(
        &self,
        request: &str,
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
    /// tier's stats.  On success the keys it made ready cascade to every
    /// secondary tier.  A plan may be completed in several calls: the
    /// request has a store in flight, and is not finalized, until every
    /// key it planned was completed.  A completion for a request with no
    /// store in flight (after a reset) is counted and ignored.
    pub fn complete_store(
        &self,
        request: &str,
        keys: &[Key],
        success: bool,
    ) -> Result<CompleteStoreReport> {
        let mut s = self.enter("complete_store")?;
        let s = &mut *s;
        let rid = s.resolve(request)?;
        let Some(st) = s.reqs.get_mut(&rid) else {
            return Err(Error::UnknownRequest(request.to_string()));
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
    pub fn on_request_finished(&self, request: &str) -> Result<()> {
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

    /// Appends the queued events: the primary tier's, then each secondary
    /// tier's own.  One call takes at most the event capacity from each
    /// tier (and at most [`MAX_EVENTS_PER_TAKE`] from a secondary tier);
    /// what a tier still holds comes with the next call.
    pub fn take_events(&self, out: &mut Vec<TierEvent>) -> Result<()> {
        let mut s = self.enter("take_events")?;
        s.gather_events();
        out.extend(s.pending_events.drain(..));
        s.pending_per_tier.fill(0);
        Ok(())
    }

    /// Like [`Manager::take_events`] into at most `max` calls of `sink`;
    /// events that do not fit wait for the next call.  Returns how many were
    /// given and whether more remain.
    pub fn take_events_with(
        &self,
        max: usize,
        mut sink: impl FnMut(usize, &TierEvent),
    ) -> Result<(usize, bool)> {
        let mut s = self.enter("take_events")?;
        let s = &mut *s;
        s.gather_events();
        let n = max.min(s.pending_events.len());
        for (i, e) in s.pending_events.drain(..n).enumerate() {
            s.pending_per_tier[e.tier] -= 1;
            sink(i, &e);
        }
        if s.pending_events.is_empty() {
            // Whether the tiers still hold some.
            s.gather_events();
        }
        Ok((n, !s.pending_events.is_empty()))
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

    /// Merged statistics: the manager's totals, the primary tier's, then
    /// per secondary tier the manager's counters for it and its own.
    ///
    /// Counters (histogram series included) are cumulative from creation
    /// and never decrease; gauges are current values.  A secondary tier's
    /// own counters are held to this: one the tier no longer reports keeps
    /// its last value (after the tier's reported stats), and one it reports
    /// below its previous report keeps the value shown before and counts as
    /// a tier bug (`tier_bugs`, and a message in the error log), once per
    /// decrease.  For per-interval numbers, as vLLM's statistics are, keep
    /// the previous result and subtract counter by counter (see
    /// [`crate::stats`]).
    pub fn stats(&self) -> Result<Vec<ManagerStat>> {
        let mut s = self.enter("stats")?;
        s.gather_errors();
        // The tiers' own reports first: a decrease found now is counted in
        // the `tier_bugs` this call returns.
        let mut reports: Vec<Vec<Stat>> = Vec::with_capacity(s.tiers.len());
        for i in 0..s.tiers.len() {
            let t = &mut s.tiers[i];
            let mut report = t.tier.stats();
            let mut decreases = Vec::new();
            t.reported.apply(&mut report, |d| decreases.push(d));
            reports.push(report);
            for d in decreases {
                let name = s.tiers[i].name.clone();
                s.tiers[i].c.tier_bugs += 1;
                s.tier_bug(
                    &name,
                    format!(
                        "counter {} went back from {} to {}; {} is reported (counters never decrease)",
                        d.series, d.before, d.now, d.shown
                    ),
                );
            }
        }
        let mut out = Vec::new();
        let m: Arc<str> = Arc::from("manager");
        let c = s.c;
        let push =
            |out: &mut Vec<ManagerStat>, tier: Option<usize>, name: &Arc<str>, stat: Stat| {
                out.push(ManagerStat {
                    tier,
                    tier_name: name.clone(),
                    stat,
                })
            };
        for (n, v) in [
            ("lookups", c.lookups),
            ("primary_hits", c.primary_hits),
            ("primary_hit_pending", c.primary_hit_pending),
            ("promotions_started", c.promotions_started),
            ("allocation_failures", c.allocation_failures),
            ("promotions_not_admitted", c.promotions_not_admitted),
            ("held_misses", c.held_misses),
            ("store_refusals", c.store_refusals),
            ("ignored_store_completions", c.ignored_store_completions),
            ("parked_keys", c.parked_keys),
            ("parked_keys_dropped", c.parked_keys_dropped),
            ("stale_completions", c.stale_completions),
            ("tier_bugs", c.tier_bugs),
            ("internal_errors", c.internal_errors),
            ("resets", c.resets),
        ] {
            push(&mut out, None, &m, Stat::counter(n, v));
        }
        for (n, v) in [
            ("jobs_in_flight", s.jobs.len() as f64),
            ("active_requests", s.reqs.len() as f64),
            ("promotions_held", if s.held { 1.0 } else { 0.0 }),
            ("events_queued", s.pending_events.len() as f64),
        ] {
            push(&mut out, None, &m, Stat::gauge(n, v));
        }
        let p: Arc<str> = Arc::from("primary");
        for st in s.primary.stat_list() {
            push(&mut out, Some(0), &p, st);
        }
        for ((i, t), report) in s.tiers.iter().enumerate().zip(reports) {
            let c = t.c;
            for (n, v) in [
                ("lookups", c.lookups),
                ("hits", c.hits),
                ("retries", c.retries),
                ("promotion_jobs", c.promotion_jobs),
                ("promotion_blocks", c.promotion_blocks),
                ("promotion_failures", c.promotion_failures),
                ("partial_promotions", c.partial_promotions),
                ("cascade_jobs", c.cascade_jobs),
                ("cascade_blocks", c.cascade_blocks),
                ("cascade_failures", c.cascade_failures),
                ("dropped_cascade_jobs", c.dropped_cascade_jobs),
                ("dropped_cascade_blocks", c.dropped_cascade_blocks),
                ("bytes_loaded", c.bytes_loaded),
                ("bytes_stored", c.bytes_stored),
                ("tier_bugs", c.tier_bugs),
                ("poll_limit_reached", c.poll_limit_reached),
                ("event_limit_reached", c.event_limit_reached),
            ] {
                push(&mut out, Some(i + 1), &t.name, Stat::counter(n, v));
            }
            for (n, v) in [
                ("load_seconds", c.load_time.as_secs_f64()),
                ("store_seconds", c.store_time.as_secs_f64()),
            ] {
                push(&mut out, Some(i + 1), &t.name, Stat::gauge(n, v));
            }
            if let Some(d) = &t.detector {
                for (n, v) in [
                    ("under_pressure", if d.under_pressure() { 1.0 } else { 0.0 }),
                    ("store_latency_ema", d.ema()),
                ] {
                    push(&mut out, Some(i + 1), &t.name, Stat::gauge(n, v));
                }
            }
            for st in report {
                push(&mut out, Some(i + 1), &t.name, st);
            }
        }
        Ok(out)
    }

    /// Moves the error log (tier bugs, failed tier calls), oldest first, into `out`.
    pub fn take_errors(&self, out: &mut Vec<String>) -> Result<()> {
        let mut s = self.enter("take_errors")?;
        s.gather_errors();
        out.extend(s.errors.drain(..));
        Ok(())
    }

    /// Removes and returns the oldest message of the error log.
    pub fn pop_error(&self) -> Result<Option<String>> {
        let mut s = self.enter("pop_error")?;
        s.gather_errors();
        Ok(s.errors.pop_front())
    }

    /// Installs `listener` to receive events as they happen (at the end of
    /// the call that produced them), or removes it (`None`).  With
    /// `also_queue`, delivered events also stay queued for
    /// [`Manager::take_events`]; without, they are delivered only.  Events
    /// queued before the call are delivered at the end of this call.  See
    /// [`crate::tiering::listen`].
    pub fn set_event_listener(
        &self,
        listener: Option<EventListener>,
        also_queue: bool,
    ) -> Result<()> {
        let mut s = self.enter("set_event_listener")?;
        s.listener = listener.map(|l| Listener::new(l, also_queue));
        if s.listener.is_some() && !also_queue {
            // Earlier undrained events go to the listener, not to a queue nobody drains.
            let pending: Vec<TierEvent> = s.pending_events.drain(..).collect();
            s.pending_per_tier.fill(0);
            let s = &mut *s;
            let tiers = &s.tiers;
            if let Some(l) = &mut s.listener {
                l.deliver(pending.iter(), |t| {
                    if t == 0 {
                        (Some(Medium::Cpu), Some(Locality::Local))
                    } else {
                        tiers
                            .get(t - 1)
                            .map_or((None, None), |e| (e.medium, e.locality))
                    }
                });
            }
        }
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
    /// Id of started request `name` (finished or not).
    fn resolve(&mut self, name: &str) -> Result<RequestId> {
        if let Some(id) = self.last_id
            && self.last_name == name
        {
            return Ok(id);
        }
        let id = self.names.get(name)?;
        self.last_name.clear();
        self.last_name.push_str(name);
        self.last_id = Some(id);
        Ok(id)
    }

    /// Id of `name`, which must be started and not finished.
    fn active(&mut self, name: &str) -> Result<RequestId> {
        let id = self.resolve(name)?;
        match self.reqs.get(&id) {
            Some(st) if !st.finished => Ok(id),
            _ => Err(Error::UnknownRequest(name.to_string())),
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

    fn gather_events(&mut self) {
        let start = self.pending_events.len();
        self.collect_events();
        if let Some(listener) = &mut self.listener {
            let tiers = &self.tiers;
            listener.deliver(self.pending_events.range(start..), |t| {
                if t == 0 {
                    (Some(Medium::Cpu), Some(Locality::Local))
                } else {
                    tiers
                        .get(t - 1)
                        .map_or((None, None), |e| (e.medium, e.locality))
                }
            });
            if !listener.also_queue {
                for e in self.pending_events.drain(start..) {
                    self.pending_per_tier[e.tier] -= 1;
                }
            }
        }
    }

    /// Moves events from the tiers into `pending_events`: from each tier
    /// at most what its share of the queue has room for (the event
    /// capacity per tier) and, from a secondary tier, at most
    /// [`MAX_EVENTS_PER_TAKE`]; the rest stays in the tier.
    fn collect_events(&mut self) {
        let cap = self.primary.event_capacity();
        let mut events = std::mem::take(&mut self.events);
        events.clear();
        let room = cap.saturating_sub(self.pending_per_tier[0]);
        if room > 0 {
            self.primary.take_events(room, &mut events);
            self.pending_per_tier[0] += events.len();
            self.pending_events
                .extend(events.drain(..).map(|event| TierEvent { tier: 0, event }));
        }
        for t in 0..self.tiers.len() {
            events.clear();
            let entry = &mut self.tiers[t];
            if !entry.events_on {
                // A tier with its events off queues none; whatever one
                // reports anyway (a C tier keeps its own queue) is discarded.
                entry.tier.take_events(MAX_EVENTS_PER_TAKE, &mut events);
                continue;
            }
            let room = cap
                .saturating_sub(self.pending_per_tier[t + 1])
                .min(MAX_EVENTS_PER_TAKE);
            if room == 0 {
                continue;
            }
            entry.tier.take_events(room, &mut events);
            if events.len() >= MAX_EVENTS_PER_TAKE {
                entry.c.event_limit_reached += 1;
            }
            events.truncate(room);
            self.pending_per_tier[t + 1] += events.len();
            self.pending_events.extend(
                events
                    .drain(..)
                    .map(|event| TierEvent { tier: t + 1, event }),
            );
        }
        events.clear();
        self.events = events;
    }

    /// Applies one finished job reported by tier `t` (internal index).
    fn finish_job(&mut self, t: usize, r: JobResult) {
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
                tier.c.store_time += elapsed;
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
                if let Err(e) = self.primary.unpin_for_transfer(&job.keys) {
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
        self.tiers[t].c.load_time += elapsed;
        if r.success {
            self.tiers[t].c.bytes_loaded += r.bytes;
            self.primary.complete_promotion(&job.keys, true);
            return;
        }
        self.tiers[t].c.promotion_failures += 1;
        let Some(list) = &r.succeeded_keys else {
            self.primary.complete_promotion(&job.keys, false);
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
            return;
        }
        self.tiers[t].c.partial_promotions += 1;
        self.tiers[t].c.bytes_loaded += r.bytes;
        self.primary.complete_promotion(list, true);
        let mut rest = std::mem::take(&mut self.keys_b);
        rest.clear();
        rest.extend(job.keys.iter().filter(|k| !list.contains(k)));
        self.primary.complete_promotion(&rest, false);
        self.keys_b = rest;
    }

    /// Reserves a primary slot for `key` (written by the promotion, not by
    /// request `rid`) and stages its load from tier `t`.
    fn start_promotion(&mut self, t: usize, rid: RequestId, key: &Key) -> bool {
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

    /// Cascades ready `keys` to every tier in `mask`: one store job per
    /// tier, pinning once per tier, subject to each tier's back-pressure.
    fn cascade_to(&mut self, mask: u64, keys: &[Key], info: &Request) {
        if keys.is_empty() {
            return;
        }
        for t in 0..self.tiers.len() {
            if mask & (1 << t) == 0 {
                continue;
            }
            let tier = &mut self.tiers[t];
            if let Some(d) = &tier.detector
                && d.under_pressure()
            {
                let admit = match d.config().policy {
                    PressurePolicy::Drop => false,
                    PressurePolicy::Throttle => tier.stores_in_flight == 0,
                };
                if !admit {
                    tier.c.dropped_cascade_jobs += 1;
                    tier.c.dropped_cascade_blocks += keys.len() as u64;
                    continue;
                }
            }
            let mut slots = Vec::with_capacity(keys.len());
            if let Err(e) = self.primary.pin_for_transfer(keys, &mut slots) {
                self.c.internal_errors += 1;
                self.log(format!("internal error: pinning for a cascade failed: {e}"));
                continue;
            }
            let tier = &mut self.tiers[t];
            tier.c.cascade_jobs += 1;
            tier.c.cascade_blocks += keys.len() as u64;
            self.submit(t, Direction::Store, keys.to_vec(), slots, info.clone());
        }
    }

    fn submit(
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

    /// Cascades parked keys that became ready; drops those whose write
    /// failed; pushes requests left with nothing parked onto `done`.
    fn retry_parked(&mut self, done: &mut Vec<RequestId>) {
        if self.parked_reqs.is_empty() {
            return;
        }
        let reqs = std::mem::take(&mut self.parked_reqs);
        let mut keep = Vec::with_capacity(reqs.len());
        let mut ready = std::mem::take(&mut self.keys_a);
        for rid in reqs {
            let Some(st) = self.reqs.get_mut(&rid) else {
                continue;
            };
            ready.clear();
            let primary = &self.primary;
            let mut dropped = 0;
            st.parked.retain(|k| match primary.lookup(k) {
                PrimaryLookup::Hit => {
                    ready.push(*k);
                    false
                }
                PrimaryLookup::HitPending => true,
                PrimaryLookup::Miss => {
                    dropped += 1;
                    false
                }
            });
            self.c.parked_keys_dropped += dropped;
            let mask = st.request_level;
            let info = st.info.clone();
            if st.parked.is_empty() {
                done.push(rid);
            } else {
                keep.push(rid);
            }
            self.cascade_to(mask, &ready, &info);
        }
        self.keys_a = ready;
        self.parked_reqs = keep;
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
        if self.last_id == Some(rid) {
            self.last_id = None;
        }
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
