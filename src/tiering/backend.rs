//! What the manager needs from a primary tier, as an object-safe trait.
//!
//! The manager drives the primary tier only through [`PrimaryBackend`]: the
//! real CPU tier implements it, and tests can plug in a reference model to
//! check the manager against it.  The plan and report types are the primary
//! tier's own.

use crate::error::Result;
use crate::events::Event;
use crate::key::Key;
use crate::request::RequestId;
use crate::stats::Stat;

// PRE-MERGE: the contract's types, replaced by `pub use crate::primary::...` once merged.
/// Answer of the primary tier's lookup.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PrimaryLookup {
    /// Absent.
    Miss,
    /// Write pending.
    HitPending,
    /// Ready.
    Hit,
}
/// A store plan.
#[derive(Default, Debug)]
pub struct StorePlan {
    /// Keys to store, in call order.
    pub to_store: Vec<Key>,
    /// Their slots.
    pub slots: Vec<u32>,
    /// Keys evicted, in eviction order.
    pub evicted: Vec<Key>,
}
/// Planned or refused.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StoreOutcome {
    /// Planned.
    Planned,
    /// Refused.
    Refused,
}
/// What complete_store did.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CompleteStoreReport {
    /// Became ready.
    pub ready: usize,
    /// Dropped.
    pub dropped: usize,
    /// Ignored.
    pub ignored: usize,
}

/// The operations of a primary tier that the tiering manager calls.
///
/// Semantics are the primary tier's (SPEC.md, "Primary tier"): every
/// fallible call leaves the state unchanged on error.
pub trait PrimaryBackend: Send {
    /// Number of slots.
    fn capacity(&self) -> u32;
    /// Starts a request (its accesses are committed at `on_request_finished`).
    fn begin_request(&mut self, req: RequestId) -> Result<()>;
    /// MISS, HIT_PENDING or HIT; changes nothing.
    fn lookup(&self, key: &Key) -> PrimaryLookup;
    /// Pins ready keys for a load to the GPU; `slots_out` gets their slots.
    fn prepare_load(
        &mut self,
        req: RequestId,
        keys: &[Key],
        slots_out: &mut Vec<u32>,
    ) -> Result<()>;
    /// Marks keys recently used.
    fn touch(&mut self, req: RequestId, keys: &[Key]) -> Result<()>;
    /// Unpins keys after a load to the GPU.
    fn complete_load(&mut self, req: RequestId, keys: &[Key]) -> Result<()>;
    /// Plans a store (slots for new keys, evictions) or refuses it.
    fn prepare_store(
        &mut self,
        req: RequestId,
        keys: &[Key],
        plan: &mut StorePlan,
    ) -> Result<StoreOutcome>;
    /// Finishes a store: ready on success, dropped on failure.
    fn complete_store(&mut self, keys: &[Key], success: bool) -> CompleteStoreReport;
    /// Pins ready keys for a cascade (not an access of any request).
    fn pin_for_transfer(&mut self, keys: &[Key], slots_out: &mut Vec<u32>) -> Result<()>;
    /// Unpins keys pinned by [`PrimaryBackend::pin_for_transfer`].
    fn unpin_for_transfer(&mut self, keys: &[Key]) -> Result<()>;
    /// Commits the request's accesses and forgets it.
    fn on_request_finished(&mut self, req: RequestId) -> Result<()>;
    /// Forgets every key and frees every slot; emits one Cleared event.
    fn reset(&mut self);
    /// Appends the tier's events since the last call, oldest first.
    fn take_events(&mut self, out: &mut Vec<Event>);
    /// The tier's statistics, as named values.
    fn stat_list(&self) -> Vec<Stat>;
}
