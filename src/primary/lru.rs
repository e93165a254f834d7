//! `lru` [0.33]: least recently used, with logical recency independent of pinning.
//!
//! One list holds every resident key, oldest at the front.  New keys go to
//! the back in batch order; `touch` and request commits move keys to the
//! back; pinning does not move a key, so an unpinned key is a candidate again
//! at the recency it had.

use super::lists::{Lists, NIL};
use super::policy::{Policy, PolicyStats};
use super::slots::Slots;

const MAIN: usize = 0;

/// The `lru` policy.
#[derive(Debug)]
pub(crate) struct LruPolicy {
    lists: Lists<1>,
}

impl LruPolicy {
    /// An empty policy over `capacity` slots.
    pub(crate) fn new(capacity: u32) -> LruPolicy {
        LruPolicy {
            lists: Lists::new(capacity as usize),
        }
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

    fn select_victims(&self, slots: &Slots, n: usize, out: &mut Vec<u32>) -> bool {
        out.clear();
        let mut id = self.lists.front(MAIN);
        while out.len() < n && id != NIL {
            if slots.is_idle(id) && !slots.is_marked(id) {
                out.push(id);
            }
            id = self.lists.next_of(id);
        }
        out.len() == n
    }

    fn evict(&mut self, _slots: &Slots, slot: u32, _h: u64) {
        self.lists.unlink(slot);
    }

    fn commit(&mut self, _slots: &Slots, slot: u32, _reused: bool) {
        self.lists.move_to_back(MAIN, slot);
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
}
