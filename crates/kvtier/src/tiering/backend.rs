//! What the manager needs from a primary tier, as an object-safe trait.
//!
//! The manager drives the primary tier only through [`PrimaryBackend`]: the
//! real CPU tier implements it, and tests can plug in a reference model to
//! check the manager against it (`Manager::with_backend`; the tests' kit,
//! `crates/kvtier-testkit`, keeps a handle to the backend it gives the
//! manager, to look into it between calls).  The manager is generic over
//! its backend (`Manager<P: PrimaryBackend = PrimaryTier>`), so its calls
//! into the CPU tier are static ones.  The plan and report types are the
//! primary tier's own ([`crate::primary`]).

use crate::error::Result;
use std::collections::VecDeque;

use crate::events::{Event, TierEvent};
use crate::key::{Key, KeyBatch, KeyRef};
use crate::request::RequestId;
use crate::stats::Stat;

use crate::primary::{
    CompleteStoreReport, DropCount, PrefixLookup, PrimaryLookup, PrimaryTier, StoreOutcome,
    StorePlan,
};

/// The operations of a primary tier that the tiering manager calls.
///
/// Semantics are the primary tier's ([`PrimaryTier`]): every
/// fallible call leaves the state unchanged on error.
pub trait PrimaryBackend: Send + 'static {
    /// Number of slots.
    fn capacity(&self) -> u32;
    /// Starts a request (its accesses are committed at `request_finished`).
    fn request_begin(&mut self, req: RequestId) -> Result<()>;
    /// MISS, HIT_PENDING or HIT; changes nothing.
    fn lookup(&self, key: &Key) -> PrimaryLookup;
    /// [`PrimaryBackend::lookup`] of each of `keys` (read in place) into
    /// `out[i]` (`out` at least as long); changes nothing.  By default one
    /// [`PrimaryBackend::lookup`] per key.
    fn lookup_batch(&self, keys: &[KeyRef<'_>], out: &mut [PrimaryLookup]) {
        for (k, o) in keys.iter().zip(out.iter_mut()) {
            *o = self.lookup(&Key::from(*k));
        }
    }
    /// [`PrimaryBackend::lookup`] of `keys` (read in place) in order for active request `req`, stopping at the first
    /// that is not HIT: the number of leading hits and the answer of the
    /// key after them (HIT when every key is one).  `keys` are keys
    /// `first..` of the request's lookup (`first` 0 starts a new one); the
    /// tier may remember where the hits are, to find them faster when the
    /// request's next calls name the same keys (the CPU tier does).
    /// Changes nothing else.  By default one lookup per key.
    fn lookup_prefix_for(
        &mut self,
        req: RequestId,
        first: usize,
        keys: &[KeyRef<'_>],
    ) -> PrefixLookup {
        let _ = (req, first);
        for (i, k) in keys.iter().enumerate() {
            let answer = self.lookup(&Key::from(*k));
            if answer != PrimaryLookup::Hit {
                return PrefixLookup {
                    hits: i,
                    stop: answer,
                };
            }
        }
        PrefixLookup {
            hits: keys.len(),
            stop: PrimaryLookup::Hit,
        }
    }
    /// Pins ready keys for a load to the GPU; `slots_out` gets their slots.
    fn prepare_load(
        &mut self,
        req: RequestId,
        keys: KeyBatch<'_>,
        slots_out: &mut Vec<u32>,
    ) -> Result<()>;
    /// Marks keys recently used.
    fn touch(&mut self, req: RequestId, keys: KeyBatch<'_>) -> Result<()>;
    /// [0.33] Gives keys of an active request their token positions.
    fn set_positions(
        &mut self,
        req: RequestId,
        keys: KeyBatch<'_>,
        positions: &[u64],
    ) -> Result<()>;
    /// [0.33] Keys end with a 4-byte KV-cache group index from now on.
    fn enable_kv_groups(&mut self);
    /// Unpins keys after a load to the GPU.  [0.33] `req` may have
    /// finished with pins of its loads still held: it then releases only
    /// those, and is forgotten (`UnknownRequest`) with the last; any id
    /// neither active nor holding such pins is `UnknownRequest`.
    fn complete_load(&mut self, req: RequestId, keys: KeyBatch<'_>) -> Result<()>;
    /// Whether `req` finished with pins its loads took still held: only
    /// [`PrimaryBackend::complete_load`] of those takes it.
    fn holds_finished_loads(&self, req: RequestId) -> bool;
    /// Plans a store (slots for new keys, evictions) or refuses it.
    fn prepare_store(
        &mut self,
        req: RequestId,
        keys: KeyBatch<'_>,
        plan: &mut StorePlan,
    ) -> Result<StoreOutcome>;
    /// Plans a promotion of `keys` into the primary tier: like
    /// `prepare_store` (an access of `req`), but the planned keys are
    /// written by the promotion's load job, not by `req`.
    fn prepare_promotion(
        &mut self,
        req: RequestId,
        keys: &[Key],
        plan: &mut StorePlan,
    ) -> Result<StoreOutcome>;
    /// Finishes `req`'s store: of `keys`, only those `req` planned and that
    /// are still write pending for it become ready (success) or are dropped
    /// (failure); every other key is left alone and counted.  With `pins`
    /// above 0, appends the keys it made ready to `made_ready` and their
    /// slots to `slots`, each key pinned `pins` times for transfers (as
    /// `pins` calls of [`PrimaryBackend::pin_for_transfer`] over them
    /// would: the manager cascades them to that many tiers); with 0 it
    /// appends nothing.
    fn complete_store_pinned(
        &mut self,
        req: RequestId,
        keys: KeyBatch<'_>,
        success: bool,
        pins: u32,
        made_ready: &mut Vec<Key>,
        slots: &mut Vec<u32>,
    ) -> CompleteStoreReport;
    /// Finishes a promotion: of `keys`, only those reserved by a promotion
    /// and still write pending become ready (success) or are dropped.
    fn complete_promotion(&mut self, keys: &[Key], success: bool) -> CompleteStoreReport;
    /// Pins ready keys for a cascade (not an access of any request).
    fn pin_for_transfer(&mut self, keys: &[Key], slots_out: &mut Vec<u32>) -> Result<()>;
    /// Unpins keys pinned by [`PrimaryBackend::pin_for_transfer`].
    /// `slots[i]` is the slot `keys[i]` was in when pinned: a hint a
    /// backend may look at first (or not at all); the answer must not
    /// depend on it.
    fn unpin_for_transfer_in(&mut self, keys: &[Key], slots: &[u32]) -> Result<()>;
    /// Commits the request's accesses and ends it: only
    /// [`PrimaryBackend::complete_load`] of the pins its loads still hold
    /// takes it after that.
    fn request_finished(&mut self, req: RequestId) -> Result<()>;
    /// Forgets every key and frees every slot; emits one Cleared event.
    fn reset(&mut self);
    /// Moves up to `max` queued events, oldest first, into `out`.
    fn take_events_up_to(&mut self, max: usize, out: &mut Vec<Event>);
    /// Moves up to `max` queued events, oldest first, onto the back of
    /// `out`, each as tier 0's; returns how many.  `scratch` (emptied
    /// first, and left empty) is room for a backend that takes them through
    /// [`PrimaryBackend::take_events_up_to`], as this default does; the
    /// CPU tier copies them straight from its queue.
    fn take_events_tagged(
        &mut self,
        max: usize,
        scratch: &mut Vec<Event>,
        out: &mut VecDeque<TierEvent>,
    ) -> usize {
        scratch.clear();
        self.take_events_up_to(max, scratch);
        let n = scratch.len();
        out.extend(scratch.drain(..).map(|event| TierEvent { tier: 0, event }));
        n
    }
    /// Bound of the tier's event queue (0: events off).  The manager bounds
    /// its own queue of events, and every secondary tier's, by it too.
    fn event_capacity(&self) -> usize;
    /// The tier's statistics, as named values.
    fn stat_list(&self) -> Vec<Stat>;
    /// [`PrimaryTier::hold`]; a backend without pin sets answers
    /// [`Error::Unsupported`](crate::Error::Unsupported) (the default).
    fn hold(&mut self, _key: &Key) -> Result<bool> {
        Err(crate::Error::Unsupported(
            "pin sets in this primary tier".into(),
        ))
    }
    /// [`PrimaryTier::release_hold`]; unsupported by default.
    fn release_hold(&mut self, _key: &Key) -> Result<bool> {
        Err(crate::Error::Unsupported(
            "pin sets in this primary tier".into(),
        ))
    }
    /// [`PrimaryTier::drop_prefix`]; unsupported by default.
    fn drop_prefix(&mut self, _prefix: &[u8]) -> Result<DropCount> {
        Err(crate::Error::Unsupported(
            "dropping blocks from this primary tier".into(),
        ))
    }
}

impl PrimaryBackend for PrimaryTier {
    fn capacity(&self) -> u32 {
        PrimaryTier::capacity(self)
    }
    fn request_begin(&mut self, req: RequestId) -> Result<()> {
        PrimaryTier::request_begin(self, req)
    }
    fn lookup(&self, key: &Key) -> PrimaryLookup {
        PrimaryTier::lookup(self, key)
    }
    /// One pass over the keys, their memory reads overlapping.
    fn lookup_batch(&self, keys: &[KeyRef<'_>], out: &mut [PrimaryLookup]) {
        PrimaryTier::lookup_batch(self, keys, out)
    }
    /// One pass over the keys; the request remembers where its hits are.
    fn lookup_prefix_for(
        &mut self,
        req: RequestId,
        first: usize,
        keys: &[KeyRef<'_>],
    ) -> PrefixLookup {
        PrimaryTier::lookup_prefix_for(self, req, first, keys.len(), |j| &keys[j])
    }
    fn prepare_load(
        &mut self,
        req: RequestId,
        keys: KeyBatch<'_>,
        slots_out: &mut Vec<u32>,
    ) -> Result<()> {
        PrimaryTier::prepare_load(self, req, keys, slots_out)
    }
    fn touch(&mut self, req: RequestId, keys: KeyBatch<'_>) -> Result<()> {
        PrimaryTier::touch(self, req, keys)
    }
    fn set_positions(
        &mut self,
        req: RequestId,
        keys: KeyBatch<'_>,
        positions: &[u64],
    ) -> Result<()> {
        PrimaryTier::set_positions(self, req, keys, positions)
    }
    fn enable_kv_groups(&mut self) {
        PrimaryTier::enable_kv_groups(self)
    }
    fn complete_load(&mut self, req: RequestId, keys: KeyBatch<'_>) -> Result<()> {
        PrimaryTier::complete_load(self, req, keys)
    }
    fn holds_finished_loads(&self, req: RequestId) -> bool {
        PrimaryTier::holds_finished_loads(self, req)
    }
    fn prepare_store(
        &mut self,
        req: RequestId,
        keys: KeyBatch<'_>,
        plan: &mut StorePlan,
    ) -> Result<StoreOutcome> {
        PrimaryTier::prepare_store(self, req, keys, plan)
    }
    fn prepare_promotion(
        &mut self,
        req: RequestId,
        keys: &[Key],
        plan: &mut StorePlan,
    ) -> Result<StoreOutcome> {
        PrimaryTier::prepare_promotion(self, req, keys, plan)
    }
    fn complete_store_pinned(
        &mut self,
        req: RequestId,
        keys: KeyBatch<'_>,
        success: bool,
        pins: u32,
        made_ready: &mut Vec<Key>,
        slots: &mut Vec<u32>,
    ) -> CompleteStoreReport {
        PrimaryTier::complete_store_pinned(self, req, keys, success, pins, made_ready, slots)
    }
    fn complete_promotion(&mut self, keys: &[Key], success: bool) -> CompleteStoreReport {
        PrimaryTier::complete_promotion(self, keys, success)
    }
    fn pin_for_transfer(&mut self, keys: &[Key], slots_out: &mut Vec<u32>) -> Result<()> {
        PrimaryTier::pin_for_transfer(self, keys, slots_out)
    }
    fn unpin_for_transfer_in(&mut self, keys: &[Key], slots: &[u32]) -> Result<()> {
        PrimaryTier::unpin_for_transfer_in(self, keys, slots)
    }
    fn request_finished(&mut self, req: RequestId) -> Result<()> {
        PrimaryTier::request_finished(self, req)
    }
    fn reset(&mut self) {
        PrimaryTier::reset(self)
    }
    fn take_events_up_to(&mut self, max: usize, out: &mut Vec<Event>) {
        PrimaryTier::take_events_up_to(self, max, out);
    }
    fn take_events_tagged(
        &mut self,
        max: usize,
        _scratch: &mut Vec<Event>,
        out: &mut VecDeque<TierEvent>,
    ) -> usize {
        PrimaryTier::take_events_tagged(self, max, out)
    }
    fn event_capacity(&self) -> usize {
        self.config().event_capacity
    }
    fn stat_list(&self) -> Vec<Stat> {
        PrimaryTier::stat_list(self)
    }
    fn hold(&mut self, key: &Key) -> Result<bool> {
        Ok(PrimaryTier::hold(self, key))
    }
    fn release_hold(&mut self, key: &Key) -> Result<bool> {
        Ok(PrimaryTier::release_hold(self, key))
    }
    fn drop_prefix(&mut self, prefix: &[u8]) -> Result<DropCount> {
        Ok(PrimaryTier::drop_prefix(self, prefix))
    }
}
