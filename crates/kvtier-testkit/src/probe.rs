//! A manager whose primary tier a test can look into between calls.
//!
//! [`Probed::new`] builds a [`Manager`] over a primary tier of any type
//! `T` (the real [`kvtier_core::primary::PrimaryTier`], or the reference
//! [`crate::model::ModelPrimary`]) that the test keeps a handle to, so it
//! can check the tier's invariants and ref counts between manager calls.
//! The manager drives the tier through [`Shared`], which forwards every
//! method of [`PrimaryBackend`], the provided ones included, to `T`: the
//! manager sees exactly `T`'s behaviour.  Whatever `T`, the manager is a
//! `Manager<Shared>`, so one test body (a closure) can run on managers
//! over the real tier and over the model alike.

use std::ops::Deref;
use std::sync::Arc;

use parking_lot::{Mutex, MutexGuard};

use kvtier_core::Result;
use kvtier_core::events::Event;
use kvtier_core::key::{Key, KeyBatch, KeyRef};
use kvtier_core::primary::{
    CompleteStoreReport, PrefixLookup, PrimaryLookup, StoreOutcome, StorePlan,
};
use kvtier_core::request::RequestId;
use kvtier_core::stats::Stat;
use kvtier_core::tiering::backend::PrimaryBackend;
use kvtier_core::tiering::{Manager, ManagerOptions};

/// A manager over a primary tier of type `T` that the test can look into
/// ([`Probed::primary`]); every manager call goes through `Deref`.
pub struct Probed<T> {
    manager: Manager<Shared>,
    primary: Arc<Mutex<T>>,
}

impl<T: PrimaryBackend> Probed<T> {
    /// A manager over `primary` (through [`Shared`]) with `opts`.
    pub fn new(primary: T, opts: ManagerOptions) -> Probed<T> {
        let primary = Arc::new(Mutex::new(primary));
        let manager = Manager::with_backend(Shared(primary.clone()), opts);
        Probed { manager, primary }
    }

    /// The primary tier, locked until the guard drops: look between
    /// manager calls (a manager call while the guard is held deadlocks).
    pub fn primary(&self) -> MutexGuard<'_, T> {
        self.primary.lock()
    }

    /// The manager alone (the probe is dropped).
    pub fn into_manager(self) -> Manager<Shared> {
        self.manager
    }
}

impl<T> Deref for Probed<T> {
    type Target = Manager<Shared>;

    fn deref(&self) -> &Manager<Shared> {
        &self.manager
    }
}

/// A primary tier shared with the test: every [`PrimaryBackend`] method,
/// the provided ones included, is the tier's.  (A method added to the
/// trait must be forwarded here too, or the manager would see its default.)
pub struct Shared(pub Arc<Mutex<dyn PrimaryBackend>>);

impl PrimaryBackend for Shared {
    fn capacity(&self) -> u32 {
        self.0.lock().capacity()
    }
    fn request_begin(&mut self, req: RequestId) -> Result<()> {
        self.0.lock().request_begin(req)
    }
    fn lookup(&self, key: &Key) -> PrimaryLookup {
        self.0.lock().lookup(key)
    }
    fn lookup_batch(&self, keys: &[KeyRef<'_>], out: &mut [PrimaryLookup]) {
        self.0.lock().lookup_batch(keys, out)
    }
    fn lookup_prefix_for(
        &mut self,
        req: RequestId,
        first: usize,
        keys: &[KeyRef<'_>],
    ) -> PrefixLookup {
        self.0.lock().lookup_prefix_for(req, first, keys)
    }
    fn prepare_load(
        &mut self,
        req: RequestId,
        keys: KeyBatch<'_>,
        slots_out: &mut Vec<u32>,
    ) -> Result<()> {
        self.0.lock().prepare_load(req, keys, slots_out)
    }
    fn touch(&mut self, req: RequestId, keys: KeyBatch<'_>) -> Result<()> {
        self.0.lock().touch(req, keys)
    }
    fn set_positions(
        &mut self,
        req: RequestId,
        keys: KeyBatch<'_>,
        positions: &[u64],
    ) -> Result<()> {
        self.0.lock().set_positions(req, keys, positions)
    }
    fn enable_kv_groups(&mut self) {
        self.0.lock().enable_kv_groups()
    }
    fn complete_load(&mut self, req: RequestId, keys: KeyBatch<'_>) -> Result<()> {
        self.0.lock().complete_load(req, keys)
    }
    fn holds_finished_loads(&self, req: RequestId) -> bool {
        self.0.lock().holds_finished_loads(req)
    }
    fn prepare_store(
        &mut self,
        req: RequestId,
        keys: KeyBatch<'_>,
        plan: &mut StorePlan,
    ) -> Result<StoreOutcome> {
        self.0.lock().prepare_store(req, keys, plan)
    }
    fn prepare_promotion(
        &mut self,
        req: RequestId,
        keys: &[Key],
        plan: &mut StorePlan,
    ) -> Result<StoreOutcome> {
        self.0.lock().prepare_promotion(req, keys, plan)
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
        self.0
            .lock()
            .complete_store_pinned(req, keys, success, pins, made_ready, slots)
    }
    fn complete_promotion(&mut self, keys: &[Key], success: bool) -> CompleteStoreReport {
        self.0.lock().complete_promotion(keys, success)
    }
    fn pin_for_transfer(&mut self, keys: &[Key], slots_out: &mut Vec<u32>) -> Result<()> {
        self.0.lock().pin_for_transfer(keys, slots_out)
    }
    fn unpin_for_transfer_in(&mut self, keys: &[Key], slots: &[u32]) -> Result<()> {
        self.0.lock().unpin_for_transfer_in(keys, slots)
    }
    fn request_finished(&mut self, req: RequestId) -> Result<()> {
        self.0.lock().request_finished(req)
    }
    fn reset(&mut self) {
        self.0.lock().reset()
    }
    fn take_events_up_to(&mut self, max: usize, out: &mut Vec<Event>) {
        self.0.lock().take_events_up_to(max, out)
    }
    fn take_events_tagged(
        &mut self,
        max: usize,
        scratch: &mut Vec<Event>,
        out: &mut std::collections::VecDeque<kvtier_core::tiering::TierEvent>,
    ) -> usize {
        self.0.lock().take_events_tagged(max, scratch, out)
    }
    fn event_capacity(&self) -> usize {
        self.0.lock().event_capacity()
    }
    fn stat_list(&self) -> Vec<Stat> {
        self.0.lock().stat_list()
    }
    fn hold(&mut self, key: &Key) -> Result<bool> {
        self.0.lock().hold(key)
    }
    fn release_hold(&mut self, key: &Key) -> Result<bool> {
        self.0.lock().release_hold(key)
    }
    fn drop_prefix(&mut self, prefix: &[u8]) -> Result<kvtier_core::primary::DropCount> {
        self.0.lock().drop_prefix(prefix)
    }
}

#[cfg(test)]
mod tests {
    /// The names of the `fn`s between `start` and the first line that is
    /// exactly `}` after it.
    fn fns(source: &str, start: &str) -> Vec<String> {
        let body = &source[source.find(start).expect(start)..];
        let body = &body[..body.find("\n}\n").expect("the block's end")];
        let mut names: Vec<String> = body
            .split("fn ")
            .skip(1)
            .map(|s| s[..s.find(['(', '<']).unwrap()].to_string())
            .collect();
        names.sort();
        names
    }

    #[test]
    fn shared_forwards_every_method_of_the_backend_trait() {
        let trait_source = include_str!("../../kvtier/src/tiering/backend.rs");
        let wanted = fns(trait_source, "pub trait PrimaryBackend");
        assert!(wanted.len() > 20, "{wanted:?}");
        let forwarded = fns(include_str!("probe.rs"), "impl PrimaryBackend for Shared {");
        assert_eq!(forwarded, wanted);
    }
}
