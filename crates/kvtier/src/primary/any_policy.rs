//! The tier's policy, whichever kind it is: [`AnyPolicy`] holds one of
//! the policies and dispatches every [`Policy`] call to it, and
//! [`PolicyKind`]'s constructor makes it.  Above the policies (`lru.rs`,
//! `arc.rs`) and the trait they implement (`policy.rs`).

use foldhash::fast::RandomState;

use super::arc::ArcPolicy;
use super::lru::LruPolicy;
use super::policy::{Policy, PolicyStats};
use super::policy_kind::PolicyKind;
use super::slots::Slots;
use crate::error::Result;
use crate::key::Key;

/// The tier's policy, one of the kinds [`PolicyKind`](super::PolicyKind)
/// names.  Calls dispatch by a match rather than through a trait object,
/// so the per-key methods (touch, commit, insert, the read-ahead hints)
/// inline into the tier's loops: a call per key through a trait object
/// cost more than the work of the smallest of them.
#[derive(Debug)]
pub(crate) enum AnyPolicy {
    /// `lru`.
    Lru(LruPolicy),
    /// `arc`.
    Arc(ArcPolicy),
}

impl PolicyKind {
    /// The policy of this kind for a tier of `capacity` slots.
    pub(super) fn build(self, capacity: u32, hasher: RandomState) -> Result<AnyPolicy> {
        Ok(match self {
            PolicyKind::Lru => AnyPolicy::Lru(LruPolicy::new(capacity)?),
            PolicyKind::Arc => AnyPolicy::Arc(ArcPolicy::new(capacity, hasher)?),
        })
    }
}

/// `$body` with `$p` bound to the policy inside `$self`, whatever its kind.
macro_rules! on_policy {
    ($self:expr, $p:ident => $body:expr) => {
        match $self {
            AnyPolicy::Lru($p) => $body,
            AnyPolicy::Arc($p) => $body,
        }
    };
}

/// Every method, defaulted ones included, is the inner policy's.
impl Policy for AnyPolicy {
    #[inline]
    fn insert(&mut self, slots: &Slots, slot: u32, h: u64, maybe_ghost: bool) {
        on_policy!(self, p => p.insert(slots, slot, h, maybe_ghost))
    }

    #[inline]
    fn insert_positioned(
        &mut self,
        slots: &Slots,
        slot: u32,
        h: u64,
        maybe_ghost: bool,
        rank: &mut u32,
        position: u64,
    ) {
        on_policy!(self, p => p.insert_positioned(slots, slot, h, maybe_ghost, rank, position))
    }

    #[inline]
    fn request_access(&mut self, rank: &mut u32) {
        on_policy!(self, p => p.request_access(rank))
    }

    #[inline]
    fn raise(&mut self, slots: &Slots, slot: u32, rank: &mut u32, position: u64) {
        on_policy!(self, p => p.raise(slots, slot, rank, position))
    }

    #[inline]
    fn end_request(&mut self, rank: &mut u32) {
        on_policy!(self, p => p.end_request(rank))
    }

    fn use_positions(&mut self) -> Result<()> {
        on_policy!(self, p => p.use_positions())
    }

    #[inline]
    fn reserve_requests(&mut self, active: usize) -> Result<()> {
        on_policy!(self, p => p.reserve_requests(active))
    }

    #[inline]
    fn remove(&mut self, slot: u32) {
        on_policy!(self, p => p.remove(slot))
    }

    #[inline(always)]
    fn touch(&mut self, slots: &Slots, slot: u32) {
        on_policy!(self, p => p.touch(slots, slot))
    }

    #[inline]
    fn touch_absent(&mut self, key: &[u8], h: u64) {
        on_policy!(self, p => p.touch_absent(key, h))
    }

    #[inline]
    fn learns_from_store_misses(&self) -> bool {
        on_policy!(self, p => p.learns_from_store_misses())
    }

    #[inline]
    fn store_miss(&mut self, key: &Key, h: u64, first: bool) -> bool {
        on_policy!(self, p => p.store_miss(key, h, first))
    }

    #[inline]
    fn select_victims(&mut self, slots: &mut Slots, n: usize, out: &mut Vec<u32>) -> bool {
        on_policy!(self, p => p.select_victims(slots, n, out))
    }

    #[inline]
    fn became_idle(&mut self, slot: u32) {
        on_policy!(self, p => p.became_idle(slot))
    }

    #[inline]
    fn reserve_evictions(&mut self, n: usize) -> Result<()> {
        on_policy!(self, p => p.reserve_evictions(n))
    }

    #[inline]
    fn evict(&mut self, slots: &Slots, slot: u32, h: u64) {
        on_policy!(self, p => p.evict(slots, slot, h))
    }

    #[inline(always)]
    fn commit(&mut self, slots: &Slots, slot: u32, reused: bool, inserted: bool) {
        on_policy!(self, p => p.commit(slots, slot, reused, inserted))
    }

    #[inline]
    fn prefetch_history(&self, h: u64) {
        on_policy!(self, p => p.prefetch_history(h))
    }

    #[inline]
    fn prefetch_eviction(&self, slot: u32, h: u64) {
        on_policy!(self, p => p.prefetch_eviction(slot, h))
    }

    #[inline]
    fn prefetch_links(&self, slot: u32) {
        on_policy!(self, p => p.prefetch_links(slot))
    }

    #[inline]
    fn prefetch_neighbours(&self, slot: u32) {
        on_policy!(self, p => p.prefetch_neighbours(slot))
    }

    fn clear(&mut self) {
        on_policy!(self, p => p.clear())
    }

    fn stats(&self) -> PolicyStats {
        on_policy!(self, p => p.stats())
    }

    fn metadata_bytes(&self) -> usize {
        on_policy!(self, p => p.metadata_bytes())
    }

    fn order(&self) -> Vec<u32> {
        on_policy!(self, p => p.order())
    }

    fn candidate_order(&self) -> Vec<u32> {
        on_policy!(self, p => p.candidate_order())
    }

    #[cfg(test)]
    fn walked(&self) -> u64 {
        on_policy!(self, p => p.walked())
    }
}
