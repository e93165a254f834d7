//! The CPU primary tier: which key lives in which slot of the shared region,
//! reference counts that protect slots during transfers, and eviction.
//!
//! Behaviour, in short (the methods' docs give each rule).  A key is write pending (ref count
//! -1: being written, not readable), ready and idle (0: readable,
//! evictable) or ready and pinned (n > 0: readable, not evictable).  Slots
//! are handed out fresh from 0 upward, then most recently freed first.
//! `prepare_store` plans a store or refuses it atomically; eviction takes
//! exactly the shortfall from idle keys, never a key named in the same call.
//! A write-pending key is written by the request that planned it (or by a
//! promotion, `prepare_promotion`), and only that writer's completion
//! finishes it; other keys a completion names are left alone and counted
//! (`completion.rs`, `writers.rs`).
//!
//! Cost: every operation is O(1) per key (amortized); eviction of k keys is
//! O(k + m), m the keys named in the same call that the policy passes over
//! (at most the call's own keys).  Busy (pinned or write-pending) keys an
//! eviction meets are parked out of the policy's candidates, once per busy
//! period, and restored at their recency when they turn idle (a walk back
//! over parked keys only, which are in flight).  A refusal for lack of idle
//! keys is decided from counts, without looking at the lists.  Per-slot
//! state lives in one record per slot, indexed by slot id (`slots.rs`);
//! batch calls on tables beyond the CPU caches (2^16 slots and more,
//! decided at creation: `prefetch.rs`) read ahead as they go (`Lookahead`
//! there, `ReorderAhead` in `reorder.rs`, and for lookups, pins and unpins,
//! which resolve every key before they change anything, the leaner
//! `TagIndex::find_each` in `index.rs`), so the memory misses of a call
//! overlap; smaller tables resolve each key in turn, sparing the
//! read-ahead's instructions; a request's lookup leaves hints (`hints.rs`): where its
//! hits are, which its next pin, touch and unpin of the same keys check
//! before probing the index; the read-ahead hints themselves are in
//! `prefetch.rs`.  Policies (the `Policy` trait in `policy.rs`,
//! implemented by `lru.rs` and `arc.rs`, and the tier's `AnyPolicy` over
//! them in `any_policy.rs`) keep intrusive lists over slot ids
//! (`lists.rs`; their recency lists in `lists/order.rs`).  A request records each
//! key it stores or loads once, at its first presentation and, for a
//! store, before the eviction (so a refused store records its keys too);
//! records reuse their buffers, so the hot path allocates nothing per key
//! (a record finds a key it has through a flat table of positions stamped
//! with the record's generation, `access_index.rs`, emptied in O(1) for
//! the next request).
//! [0.33] A record counts the pins its loads hold, per key; a request that
//! finishes with some still held (an aborted request whose load is in
//! flight) keeps its record, for `complete_load` of those pins alone,
//! until the last is released.  Unpins of keys beyond the unpinner's own
//! pins are counted per key (`spent.rs`, empty unless they happen), so
//! that such a late `complete_load` never releases another request's pin.
//! [0.33] Token positions and KV-cache groups (`positions.rs`) order a
//! request's finish, and lru ranks an active request's keys by position
//! (`lru.rs`); a request without positions pays one check per call.
//!
//! Size: metadata per slot, key bytes excluded, is fixed at creation: 13
//! bytes of slot state and index (`slots.rs`; a write-pending slot's
//! writer is carried by its ref count, at no cost) and 17 of policy lists
//! (`lists.rs`), 30 in all; the writers themselves take a few bytes per
//! request with writes in flight, and hints 16 bytes per hit of an active
//! request's latest lookup.  lru adds room for the rank markers of
//! active requests (two list entries, 34 bytes, per request; room for one
//! request per 64 slots at creation, about 0.5 byte per slot, grown as more
//! are active), and once positions are in use, 16 bytes per slot of rank
//! (`lru.rs`): about 46.5 in all.  ARC adds its ghosts as they come, up to
//! 32 bytes per slot with both ghost lists full (`arc.rs`): 62 in all
//! (positions add nothing to ARC).
//!
//! Where things are: this file holds [`PrimaryTier`], its constructor and
//! accessors, lookups, events and reset; `config.rs`, `policy_kind.rs`,
//! `outcomes.rs` and `stats.rs` the public types; `store.rs` plans stores
//! and promotions, `completion.rs` completes them; `loads.rs` pins,
//! touches and unpins; `requests.rs` keeps what a request records and
//! commits it at its finish; `diagnostics.rs` the views for tests and
//! benchmarks.

mod access_index;
mod admission;
mod allocation_sizes;
mod any_policy;
mod arc;
mod batched;
mod completion;
mod config;
mod diagnostics;
mod held;
mod hints;
mod huge;
mod index;
mod lists;
mod loads;
mod lru;
mod named;
mod outcomes;
mod policy;
mod policy_kind;
#[cfg(test)]
mod position_tests;
mod positions;
mod prefetch;
mod reorder;
mod requests;
mod slots;
mod spent;
mod stats;
mod store;
#[cfg(test)]
mod tests;
#[cfg(test)]
mod vllm_tests;
mod writers;

use std::collections::VecDeque;

use foldhash::fast::RandomState;

use crate::error::{Error, Result};
use crate::events::{Announcer, Event, TierEvent};
use crate::histogram::Histogram;
use crate::key::{Key, KeyBatch, KeyBytes, with_keys};
use crate::request::RequestId;

use admission::Admission;
use any_policy::AnyPolicy;
use lists::NIL;
use policy::Policy;
use requests::RequestRecord;
use slots::{PARKED, Slots, WRITE_PENDING};
use spent::SpentPins;
use writers::Writers;

pub use allocation_sizes::{
    ALLOCATION_SIZE_BOUNDS, ALLOCATION_SIZE_BUCKETS, ALLOCATION_SIZE_STAT, AllocationSizes,
};
pub use batched::PrefixLookup;
pub use config::{MAX_ADMISSION_TABLE_SIZE, PrimaryConfig};
pub use held::DropCount;
pub use named::NamedPrimary;
pub use outcomes::{CompleteStoreReport, PrimaryLookup, StoreOutcome, StorePlan};
pub use policy_kind::PolicyKind;
pub(crate) use positions::check_group_keys;
pub(crate) use stats::PRIMARY_STATS;
pub use stats::PrimaryStats;
pub use writers::Writer;

/// The CPU primary tier.  Not thread safe by itself: callers serialize access.
#[derive(Debug)]
pub struct PrimaryTier {
    config: PrimaryConfig,
    slots: Slots,
    policy: AnyPolicy,
    admission: Option<Admission>,
    write_pending: u32,
    pinned: u32,
    idle: u32,
    /// Keys pin sets hold (`held.rs`).
    held: u32,
    /// The tier's counters (the fields of [`PrimaryStats`] that `stats`
    /// does not compute: its gauges and histogram stay at 0 here).
    counters: PrimaryStats,
    allocation_sizes: Histogram<ALLOCATION_SIZE_BUCKETS>,
    events: Announcer,
    requests: hashbrown::HashMap<RequestId, RequestRecord, RandomState>,
    /// Finished requests whose loads still hold pins: known to
    /// `complete_load` alone, until their last pin is released.
    finished_loads: hashbrown::HashMap<RequestId, RequestRecord, RandomState>,
    spare_records: Vec<RequestRecord>,
    /// Pins that unpins beyond the unpinner's own took, per key, not yet
    /// charged to a finished request's late completion (`spent.rs`).
    spent: SpentPins,
    /// Who writes each write-pending key (named by its ref count).
    writers: Writers,
    adapted: hashbrown::HashSet<(RequestId, Key), RandomState>,
    scratch_keys: Vec<(u64, u8, u32)>,
    scratch_new: Vec<(Key, u64, u32)>,
    scratch_dedup: hashbrown::HashTable<u32>,
    scratch_victims: Vec<u32>,
    /// Hashes of the keys a call handles in bulk, in order: a pin's keys
    /// (for the request record), an eviction's victims.
    scratch_hashes: Vec<u64>,
    /// Resident keys a call presents for the first time that have a
    /// position (slot, position): raised once the request has its rank.
    scratch_raises: Vec<(u32, u64)>,
    /// The record index of each key a `prepare_store` stores, in plan order.
    scratch_stored: Vec<u32>,
    /// A finishing request's keys in commit order.
    scratch_order: Vec<positions::Ordered>,
    /// The accesses whose pins a `complete_load` released, per key.
    scratch_released: Vec<u32>,
}

fn key_error(index: usize, key: &(impl KeyBytes + ?Sized), reason: impl Into<String>) -> Error {
    Error::KeyState {
        index,
        key: crate::key::hex(key.key_bytes()),
        reason: reason.into(),
    }
}

fn unknown(req: RequestId) -> Error {
    Error::UnknownRequest(format!("{req} is not active (never begun, or finished)"))
}

impl PrimaryTier {
    /// A tier with `config.capacity` free slots.  Options out of range are
    /// [`Error::InvalidArgument`]; memory for that many slots that cannot
    /// be had is [`Error::OutOfMemory`], with nothing left allocated.
    pub fn new(config: PrimaryConfig) -> Result<PrimaryTier> {
        if config.capacity == 0 || config.capacity == u32::MAX {
            return Err(Error::InvalidArgument(format!(
                "capacity {} (must be 1 to {})",
                config.capacity,
                u32::MAX - 1
            )));
        }
        if config.policy == PolicyKind::Arc && config.capacity > arc::MAX_CAPACITY {
            return Err(Error::InvalidArgument(format!(
                "capacity {} is too large for arc (at most {}: its ghost lists hold up to 2 x capacity keys)",
                config.capacity,
                arc::MAX_CAPACITY
            )));
        }
        if config.store_threshold >= 2 && config.admission_table_size == 0 {
            return Err(Error::InvalidArgument(format!(
                "store_threshold {} needs admission_table_size > 0",
                config.store_threshold
            )));
        }
        if config.admission_table_size > MAX_ADMISSION_TABLE_SIZE {
            return Err(Error::InvalidArgument(format!(
                "admission_table_size {} is beyond the limit {MAX_ADMISSION_TABLE_SIZE}",
                config.admission_table_size
            )));
        }
        // Everything sized by the capacity is allocated here, fallibly.
        let sized = |e: Error| match e {
            Error::OutOfMemory(m) => {
                Error::OutOfMemory(format!("a primary tier of {} slots: {m}", config.capacity))
            }
            other => other,
        };
        let slots = Slots::new(config.capacity).map_err(sized)?;
        let hasher = slots.hasher.clone();
        let policy = config
            .policy
            .build(config.capacity, hasher.clone())
            .map_err(sized)?;
        let admission = (config.store_threshold >= 2)
            .then(|| Admission::new(config.admission_table_size, hasher.clone()));
        Ok(PrimaryTier {
            slots,
            policy,
            admission,
            write_pending: 0,
            pinned: 0,
            idle: 0,
            held: 0,
            counters: PrimaryStats::default(),
            allocation_sizes: allocation_sizes::new_histogram(),
            events: Announcer::preallocated(config.event_capacity),
            requests: hashbrown::HashMap::with_hasher(hasher.clone()),
            finished_loads: hashbrown::HashMap::with_hasher(hasher.clone()),
            spare_records: Vec::new(),
            spent: SpentPins::default(),
            writers: Writers::new(hasher.clone()),
            adapted: hashbrown::HashSet::with_hasher(hasher),
            scratch_keys: Vec::new(),
            scratch_new: Vec::new(),
            scratch_dedup: hashbrown::HashTable::new(),
            scratch_victims: Vec::new(),
            scratch_hashes: Vec::new(),
            scratch_raises: Vec::new(),
            scratch_stored: Vec::new(),
            scratch_order: Vec::new(),
            scratch_released: Vec::new(),
            config,
        })
    }

    /// Number of slots.
    pub fn capacity(&self) -> u32 {
        self.config.capacity
    }

    /// The configuration the tier was built with.
    pub fn config(&self) -> &PrimaryConfig {
        &self.config
    }

    /// Starts request `req`; `DuplicateRequest` if it is active, or
    /// finished with loads still pinned (see
    /// [`PrimaryTier::request_finished`]).
    pub fn request_begin(&mut self, req: RequestId) -> Result<()> {
        if self.requests.contains_key(&req) {
            return Err(Error::DuplicateRequest(format!("#{}", req.0)));
        }
        if self.finished_loads.contains_key(&req) {
            return Err(Error::DuplicateRequest(format!(
                "#{} (finished, its loads still pinned)",
                req.0
            )));
        }
        // Room for the request's rank now, so that giving it one never fails.
        self.policy.reserve_requests(self.requests.len() + 1)?;
        let record = self.spare_records.pop().unwrap_or_default();
        self.requests.insert(req, record);
        Ok(())
    }

    /// Whether `req` is active (begun and not finished).
    pub fn is_active(&self, req: RequestId) -> bool {
        self.requests.contains_key(&req)
    }

    /// Whether `req` finished with pins its loads took still held (see
    /// [`PrimaryTier::request_finished`]): only
    /// [`PrimaryTier::complete_load`] of those takes it.
    pub fn holds_finished_loads(&self, req: RequestId) -> bool {
        self.finished_loads.contains_key(&req)
    }

    /// Whether keys carry a KV-cache group index ([`PrimaryConfig::kv_groups`]).
    pub fn kv_groups(&self) -> bool {
        self.config.kv_groups
    }

    /// Turns the KV-group option on ([`PrimaryConfig::kv_groups`]), for the
    /// calls made from now on.  A tiering manager whose options ask for
    /// groups turns it on in its primary tier.
    pub fn enable_kv_groups(&mut self) {
        self.config.kv_groups = true;
    }

    /// With the KV-group option on, an error naming the first of keys
    /// `key(0..n)` too short to end with a group index; nothing otherwise
    /// (the rule: [`positions::check_group_keys`]).
    #[inline]
    pub(crate) fn check_group_keys<'k, K: KeyBytes + ?Sized + 'k>(
        &self,
        n: usize,
        key: impl Fn(usize) -> &'k K,
    ) -> Result<()> {
        positions::check_group_keys(self.config.kv_groups, n, key)
    }

    /// With the KV-group option on, `InvalidKey` naming the first of
    /// `keys` too short to end with a 4-byte group index (5 bytes or
    /// more); `Ok` otherwise.  Every call of the tier that takes a
    /// request's keys and returns a `Result` refuses such keys; the calls
    /// that cannot ([`PrimaryTier::lookup`], [`PrimaryTier::lookup_batch`],
    /// [`PrimaryTier::lookup_prefix`], [`PrimaryTier::complete_store`])
    /// never find one (no call makes one resident) and may be preceded by
    /// this check.
    pub fn check_keys<'k>(&self, keys: impl Into<KeyBatch<'k>>) -> Result<()> {
        with_keys!(keys.into(), |k| self.check_group_keys(k.len(), |j| &k[j]))
    }

    /// MISS, HIT_PENDING or HIT for `key`; changes nothing.
    pub fn lookup(&self, key: &Key) -> PrimaryLookup {
        match self.slots.find(key, self.slots.hash(key)) {
            None => PrimaryLookup::Miss,
            Some(s) if self.slots.refs(s) < 0 => PrimaryLookup::HitPending,
            Some(_) => PrimaryLookup::Hit,
        }
    }

    /// [`PrimaryTier::lookup`] of every key of `keys`, into `out` (one
    /// result per key, in order; `out` must be at least as long as `keys`,
    /// extra entries are left alone).  Changes nothing.  Faster per key
    /// than single lookups on large tiers: the memory reads of a batch
    /// overlap.
    pub fn lookup_batch<'k>(&self, keys: impl Into<KeyBatch<'k>>, out: &mut [PrimaryLookup]) {
        with_keys!(keys.into(), |k| {
            let n = k.len().min(out.len());
            self.lookup_each(n, |j| &k[j], |i, r| out[i] = r);
        })
    }

    /// [`PrimaryTier::lookup`] of keys `key(0..n)`, in order, each result
    /// handed to `put(i, result)`.  Keys may be [`Key`]s or bytes (as C
    /// passes them), so callers need not copy keys first.  Changes nothing.
    #[inline]
    pub(crate) fn lookup_each<'k, K: KeyBytes + ?Sized + 'k>(
        &self,
        n: usize,
        key: impl Fn(usize) -> &'k K,
        mut put: impl FnMut(usize, PrimaryLookup),
    ) {
        let slots = &self.slots;
        slots.resolve_each(n, key, |i, s, _| {
            put(
                i,
                if s == NIL {
                    PrimaryLookup::Miss
                } else if slots.refs(s) < 0 {
                    PrimaryLookup::HitPending
                } else {
                    PrimaryLookup::Hit
                },
            )
        });
    }

    /// The slot of resident `key`, if any; changes nothing.
    pub fn slot_of(&self, key: &Key) -> Option<u32> {
        self.slots.find(key, self.slots.hash(key))
    }

    /// The reference count of resident `key` (-1 write pending, 0 idle,
    /// n > 0 pinned n times), or `None` if absent; changes nothing.
    pub fn ref_count(&self, key: &Key) -> Option<i32> {
        self.slot_of(key)
            .map(|s| self.slots.refs(s).max(WRITE_PENDING))
    }

    /// Who writes `key`, if it is write pending; changes nothing.
    pub fn writer(&self, key: &Key) -> Option<Writer> {
        let r = self.slots.refs(self.slot_of(key)?);
        if r < 0 {
            self.writers.writer(slots::writer_id(r))
        } else {
            None
        }
    }

    /// `slot` turned idle (or is idle): a parked key becomes an eviction
    /// candidate again at its recency.
    #[inline]
    fn became_idle(&mut self, slot: u32) {
        if self.slots.flags(slot) & PARKED != 0 && self.slots.is_idle(slot) {
            *self.slots.flags_mut(slot) &= !PARKED;
            self.policy.became_idle(slot);
        }
    }

    fn next_epoch(&mut self) {
        self.slots.next_epoch();
        if self.slots.epoch == 1 {
            if let Some(a) = self.admission.as_mut() {
                a.clear_marks();
            }
        }
    }

    /// Forgets every key and frees every slot, whatever its state; slot
    /// allocation restarts at 0.  Drops queued events and queues one
    /// "cleared" event.  Active requests stay active with nothing recorded
    /// and no write in flight (their later completions find nothing);
    /// finished requests kept for their loads are forgotten.
    pub fn reset(&mut self) {
        self.slots.clear();
        self.policy.clear();
        self.write_pending = 0;
        self.pinned = 0;
        self.idle = 0;
        self.held = 0;
        self.events.cleared();
        self.adapted.clear();
        self.writers.clear();
        // A new cache generation: requests start again with no access
        // and no rank (the policy forgot them), but keep their positions.
        for r in self.requests.values_mut() {
            r.forget_accesses();
        }
        for (_, mut r) in self.finished_loads.drain() {
            r.clear();
            self.spare_records.push(r);
        }
        self.spent.clear();
    }

    /// Appends the queued events to `out`, oldest first, and empties the buffer.
    pub fn take_events(&mut self, out: &mut Vec<Event>) {
        self.events.take(usize::MAX, out);
    }

    /// Number of events waiting.
    pub fn events_queued(&self) -> usize {
        self.events.len()
    }

    /// Moves up to `max` queued events into `out`, oldest first; returns how many.
    pub fn take_events_up_to(&mut self, max: usize, out: &mut Vec<Event>) -> usize {
        self.events.take(max, out)
    }

    /// Moves up to `max` queued events, oldest first, onto the back of
    /// `out`, each as tier 0's (the primary tier's index in a manager);
    /// returns how many.
    pub fn take_events_tagged(&mut self, max: usize, out: &mut VecDeque<TierEvent>) -> usize {
        self.events.take_tagged(max, 0, out)
    }
}
