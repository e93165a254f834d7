//! The eviction-policy trait: what a policy is told and what it decides.
//!
//! The tier owns slots, reference counts and the key index; a policy owns
//! only its ordering (intrusive lists over slot ids) and any history (ARC's
//! ghosts).  A new policy is one new file implementing [`Policy`] plus one
//! arm in [`PolicyKind`](super::PolicyKind)'s constructor.

use super::slots::Slots;
use crate::key::Key;

/// Sizes a policy reports in the tier's stats (zero where meaningless).
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub(crate) struct PolicyStats {
    pub(crate) t1: u32,
    pub(crate) t2: u32,
    pub(crate) b1: u32,
    pub(crate) b2: u32,
    pub(crate) target: f64,
}

/// An eviction policy over the slots of one tier.
///
/// Every method costs O(1) per slot or key it is given; `select_victims`
/// costs O(n + skipped), where skipped counts the pinned, write-pending or
/// call-named keys it passes over.
pub(crate) trait Policy: Send + Sync + std::fmt::Debug {
    /// `slot` (key hash `h`) became resident, write pending; calls come in
    /// batch order, so the last key of a batch ends up most recent.
    /// `maybe_ghost` is false when the key is known not to be a ghost (it
    /// saves ARC a lookup).
    fn insert(&mut self, slots: &Slots, slot: u32, h: u64, maybe_ghost: bool);

    /// `slot` left without eviction (a failed store): no history is kept.
    fn remove(&mut self, slot: u32);

    /// `touch` of resident `slot`; the tier calls it in reversed batch order.
    fn touch(&mut self, slots: &Slots, slot: u32);

    /// `touch` of a key that is not resident (ARC learns from ghost hits).
    fn touch_absent(&mut self, _key: &Key, _h: u64) {}

    /// Whether an absent key is remembered in a ghost list.
    fn is_ghost(&self, _key: &Key, _h: u64) -> bool {
        false
    }

    /// An absent key remembered as a ghost was offered to `prepare_store`:
    /// adapt as a ghost hit would, without reordering anything.
    fn adapt_on_offer(&mut self, _key: &Key, _h: u64) {}

    /// Chooses `n` idle, unmarked slots to evict, in eviction order, into
    /// `out` (cleared first) without changing anything; false if fewer exist.
    fn select_victims(&self, slots: &Slots, n: usize, out: &mut Vec<u32>) -> bool;

    /// Evicts `slot` (chosen by `select_victims`, key hash `h`); the slot's
    /// key is still readable in `slots`.
    fn evict(&mut self, slots: &Slots, slot: u32, h: u64);

    /// One committed access of resident `slot` at request finish; the tier
    /// calls it from the request's tail to its head.  `reused`: the request
    /// loaded the key or found it ready at store (not merely inserted it).
    fn commit(&mut self, slots: &Slots, slot: u32, reused: bool);

    /// Forgets everything (reset).
    fn clear(&mut self);

    /// Sizes for the stats.
    fn stats(&self) -> PolicyStats;

    /// Bytes of metadata the policy keeps, for the per-block size figure.
    fn metadata_bytes(&self) -> usize;

    /// The resident slots in eviction-preference order (first evicted
    /// first, pinned ones included); for tests and checks, O(n).
    fn order(&self) -> Vec<u32>;
}
