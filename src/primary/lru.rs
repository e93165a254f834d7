//! `lru` [0.33]: least recently used, with logical recency independent of pinning.
//!
//! One list holds every resident key, oldest at the front.  New keys go to
//! the back in batch order; `touch` and request commits move keys to the
//! back; pinning does not move a key, so an unpinned key is a candidate again
//! at the recency it had.  Busy keys an eviction passes over are parked out
//! of the candidates (see `OrderLists`), so no eviction walks them twice.

use super::lists::{NIL, OrderLists};
use super::policy::{Policy, PolicyStats};
use super::slots::{PARKED, Slots};

const MAIN: usize = 0;

/// The `lru` policy.
#[derive(Debug)]
pub(crate) struct LruPolicy {
    lists: OrderLists<1>,
}

impl LruPolicy {
    /// An empty policy over `capacity` slots; an out-of-memory error if its
    /// list cannot be had.
    pub(crate) fn new(capacity: u32) -> crate::error::Result<LruPolicy> {
        Ok(LruPolicy {
            lists: OrderLists::new(capacity as usize)?,
        })
    }
}

impl Policy for LruPolicy {
    fn insert(&mut self, _slots: &Slots, slot: u32, _h: u64, _maybe_ghost: bool) {
        self.lists.push_back(MAIN, slot);
    }

    fn remove(&mut self, slot: u32) {
        self.lists.unlink(slot);
    }

    fn touch(&mut self, _slots: &Slots, slot: u32) {
        self.lists.move_to_back(MAIN, slot);
    }

    fn select_victims(&mut self, slots: &mut Slots, n: usize, out: &mut Vec<u32>) -> bool {
        out.clear();
        let mut id = self.lists.candidate_front(MAIN);
        while out.len() < n && id != NIL {
            let next = self.lists.candidate_next(id);
            if !slots.is_idle(id) {
                self.lists.park(id);
                *slots.flags_mut(id) |= PARKED;
            } else if !slots.is_marked(id) {
                out.push(id);
            }
            id = next;
        }
        out.len() == n
    }

    fn became_idle(&mut self, slot: u32) {
        self.lists.restore(slot);
    }

    fn evict(&mut self, _slots: &Slots, slot: u32, _h: u64) {
        self.lists.unlink(slot);
    }

    fn commit(&mut self, _slots: &Slots, slot: u32, _reused: bool) {
        self.lists.move_to_back(MAIN, slot);
    }

    fn prefetch_eviction(&self, slot: u32, _h: u64) {
        self.lists.prefetch_neighbours(slot);
    }

    fn prefetch_links(&self, slot: u32) {
        self.lists.prefetch(slot);
    }

    fn prefetch_neighbours(&self, slot: u32) {
        self.lists.prefetch_neighbours(slot);
    }

    fn clear(&mut self) {
        self.lists.clear();
    }

    fn stats(&self) -> PolicyStats {
        PolicyStats::default()
    }

    fn metadata_bytes(&self) -> usize {
        self.lists.bytes()
    }

    fn order(&self) -> Vec<u32> {
        self.lists.collect(MAIN)
    }

    fn candidate_order(&self) -> Vec<u32> {
        self.lists.collect_candidates(MAIN)
    }
}
