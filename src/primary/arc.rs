//! `arc`: Adaptive Replacement Cache.
//!
//! T1 holds resident keys seen once, T2 resident keys reused; B1 and B2 are
//! ghost lists (keys only) of keys evicted from T1 and T2, each bounded by
//! the capacity, oldest forgotten first.  The T1 target adapts on ghost hits
//! (by `touch`, and [0.33] once per request and key when offered to
//! `prepare_store`).  Eviction takes from T1 while |T1| is at or above the
//! truncated target, else from T2, falling back to the other list.
//!
//! Ghosts live in their own arena (key, links, tag) with their own
//! [`TagIndex`], sized once (at the first eviction) for the most ghosts
//! there can be, so nothing scans and nothing grows under churn.

use foldhash::fast::RandomState;
use std::hash::BuildHasher;

use super::huge;
use super::index::TagIndex;
use super::lists::{Lists, NIL, OrderLists};
use super::policy::{Policy, PolicyStats};
use super::slots::{PARKED, Slots, same_key};
use crate::key::Key;

const T1: usize = 0;
const T2: usize = 1;
const B1: usize = 0;
const B2: usize = 1;
const GHOST_FREE: usize = 2;

/// Keys evicted from T1 (B1) and T2 (B2), without data.
#[derive(Debug)]
struct Ghosts {
    keys: Vec<Key>,
    lists: Lists<3>,
    index: TagIndex,
    hasher: RandomState,
    bound: usize,
}

impl Ghosts {
    fn find(&self, key: &Key, h: u64) -> Option<u32> {
        let keys = &self.keys;
        self.index.find(h, |g| same_key(&keys[g as usize], key))
    }

    fn len(&self, list: usize) -> usize {
        self.lists.len(list)
    }

    /// Adds `key` (hash `h`, not a ghost) at the back of `list`, then forgets
    /// the oldest ghosts of that list beyond the bound.
    fn add(&mut self, list: usize, key: Key, h: u64) {
        let g = match self.lists.pop_front(GHOST_FREE) {
            Some(g) => {
                self.keys[g as usize] = key;
                g
            }
            None => {
                let g = self.keys.len() as u32;
                // B1 and B2 hold at most `bound` each, plus one being added.
                let max = 2 * self.bound + 1;
                if g == 0 && !self.index.has_room_for(max) {
                    // Sized once for the most ghosts there can be.
                    self.index = TagIndex::new(max);
                }
                if self.keys.len() == self.keys.capacity() {
                    let want = (self.keys.capacity() * 2).max(16).min(max);
                    self.keys.reserve_exact(want - self.keys.len());
                    huge::advise(&self.keys);
                }
                self.keys.push(key);
                self.lists.grow_to(self.keys.len(), max);
                g
            }
        };
        self.lists.push_back(list, g);
        self.index.insert(h, g);
        while self.lists.len(list) > self.bound {
            let old = self.lists.front(list);
            self.remove(old);
        }
    }

    /// Forgets ghost `g`.
    fn remove(&mut self, g: u32) {
        let h = self.hasher.hash_one(self.keys[g as usize].as_bytes());
        self.index.remove(h, g);
        self.lists.unlink(g);
        self.lists.push_back(GHOST_FREE, g);
    }

    fn clear(&mut self) {
        self.lists.clear();
        self.keys.clear();
        self.index.clear();
    }
}

/// The `arc` policy.
#[derive(Debug)]
pub(crate) struct ArcPolicy {
    lists: OrderLists<2>,
    ghosts: Ghosts,
    capacity: u32,
    target: f64,
}

impl ArcPolicy {
    /// An empty policy over `capacity` slots; `hasher` must be the tier's.
    pub(crate) fn new(capacity: u32, hasher: RandomState) -> ArcPolicy {
        ArcPolicy {
            lists: OrderLists::new(capacity as usize),
            ghosts: Ghosts {
                keys: Vec::new(),
                lists: Lists::new(0),
                index: TagIndex::new(0),
                hasher,
                bound: capacity as usize,
            },
            capacity,
            target: 0.0,
        }
    }

    /// Ghost hit in B1: grow the target by max(1, |B2|/|B1|), capped at capacity.
    fn grow(&mut self) {
        let (b1, b2) = (self.ghosts.len(B1) as f64, self.ghosts.len(B2) as f64);
        let delta = (b2 / b1).max(1.0);
        self.target = (self.target + delta).min(self.capacity as f64);
    }

    /// Ghost hit in B2: shrink the target by max(1, |B1|/|B2|), floored at 0.
    fn shrink(&mut self) {
        let (b1, b2) = (self.ghosts.len(B1) as f64, self.ghosts.len(B2) as f64);
        let delta = (b1 / b2).max(1.0);
        self.target = (self.target - delta).max(0.0);
    }

    /// The next idle, unmarked candidate from `*cursor` on, advancing the
    /// cursor past it; busy candidates met are parked.
    fn next_candidate(&mut self, slots: &mut Slots, cursor: &mut u32) -> Option<u32> {
        while *cursor != NIL {
            let id = *cursor;
            *cursor = self.lists.candidate_next(id);
            if !slots.is_idle(id) {
                self.lists.park(id);
                slots.flags[id as usize] |= PARKED;
            } else if !slots.is_marked(id) {
                return Some(id);
            }
        }
        None
    }
}

impl Policy for ArcPolicy {
    fn insert(&mut self, slots: &Slots, slot: u32, h: u64, maybe_ghost: bool) {
        self.lists.push_back(T1, slot);
        if maybe_ghost {
            if let Some(g) = self.ghosts.find(&slots.keys[slot as usize], h) {
                self.ghosts.remove(g);
            }
        }
    }

    fn remove(&mut self, slot: u32) {
        self.lists.unlink(slot);
    }

    fn touch(&mut self, slots: &Slots, slot: u32) {
        match self.lists.list_of(slot) {
            Some(T1) if slots.refs[slot as usize] >= 0 => self.lists.move_to_back(T2, slot),
            Some(list) => self.lists.move_to_back(list, slot),
            None => {}
        }
    }

    fn touch_absent(&mut self, key: &Key, h: u64) {
        if let Some(g) = self.ghosts.find(key, h) {
            match self.ghosts.lists.list_of(g) {
                Some(B1) => {
                    self.grow();
                    self.ghosts.lists.move_to_back(B1, g);
                }
                Some(B2) => {
                    self.shrink();
                    self.ghosts.lists.move_to_back(B2, g);
                }
                _ => {}
            }
        }
    }

    fn is_ghost(&self, key: &Key, h: u64) -> bool {
        self.ghosts.find(key, h).is_some()
    }

    fn adapt_on_offer(&mut self, key: &Key, h: u64) {
        if let Some(g) = self.ghosts.find(key, h) {
            match self.ghosts.lists.list_of(g) {
                Some(B1) => self.grow(),
                Some(B2) => self.shrink(),
                _ => {}
            }
        }
    }

    fn became_idle(&mut self, slot: u32) {
        self.lists.restore(slot);
    }

    fn select_victims(&mut self, slots: &mut Slots, n: usize, out: &mut Vec<u32>) -> bool {
        out.clear();
        let target = self.target as usize;
        let mut virtual_t1 = self.lists.len(T1);
        let (mut c1, mut c2) = (
            self.lists.candidate_front(T1),
            self.lists.candidate_front(T2),
        );
        while out.len() < n {
            let from_t1_first = virtual_t1 >= target;
            let pick = if from_t1_first {
                self.next_candidate(slots, &mut c1)
                    .map(|s| (s, true))
                    .or_else(|| self.next_candidate(slots, &mut c2).map(|s| (s, false)))
            } else {
                self.next_candidate(slots, &mut c2)
                    .map(|s| (s, false))
                    .or_else(|| self.next_candidate(slots, &mut c1).map(|s| (s, true)))
            };
            match pick {
                Some((s, from_t1)) => {
                    if from_t1 {
                        virtual_t1 -= 1;
                    }
                    out.push(s);
                }
                None => return false,
            }
        }
        true
    }

    fn evict(&mut self, slots: &Slots, slot: u32, h: u64) {
        let ghost_list = match self.lists.list_of(slot) {
            Some(T1) => B1,
            _ => B2,
        };
        self.lists.unlink(slot);
        self.ghosts.add(ghost_list, slots.keys[slot as usize], h);
    }

    fn commit(&mut self, _slots: &Slots, slot: u32, reused: bool) {
        match self.lists.list_of(slot) {
            Some(_) if reused => self.lists.move_to_back(T2, slot),
            Some(list) => self.lists.move_to_back(list, slot),
            None => {}
        }
    }

    fn clear(&mut self) {
        self.lists.clear();
        self.ghosts.clear();
        self.target = 0.0;
    }

    fn stats(&self) -> PolicyStats {
        PolicyStats {
            t1: self.lists.len(T1) as u32,
            t2: self.lists.len(T2) as u32,
            b1: self.ghosts.len(B1) as u32,
            b2: self.ghosts.len(B2) as u32,
            target: self.target,
        }
    }

    fn metadata_bytes(&self) -> usize {
        self.lists.bytes() + self.ghosts.lists.bytes() + self.ghosts.index.bytes()
    }

    fn order(&self) -> Vec<u32> {
        let mut v = self.lists.collect(T1);
        v.extend(self.lists.collect(T2));
        v
    }

    fn candidate_order(&self) -> Vec<u32> {
        let mut v = self.lists.collect_candidates(T1);
        v.extend(self.lists.collect_candidates(T2));
        v
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A slot table with `n` idle resident keys 0..n.
    fn slots(n: u32) -> Slots {
        let mut s = Slots::new(n);
        s.next_epoch();
        for i in 0..n {
            let slot = s.allocate().unwrap();
            let key = Key::new(&i.to_be_bytes()).unwrap();
            let h = s.hash(&key);
            s.occupy(slot, key, h);
            s.refs[slot as usize] = 0;
        }
        s
    }

    #[test]
    fn eviction_compares_t1_with_the_truncated_target() {
        let mut s = slots(4);
        let mut p = ArcPolicy::new(4, s.hasher.clone());
        for i in 0..4 {
            p.insert(&s, i, s.hash(&s.keys[i as usize]), true);
        }
        p.touch(&s, 2);
        p.touch(&s, 3); // T1 = [0, 1], T2 = [2, 3]
        let mut out = Vec::new();
        p.target = 2.9; // truncated: 2; |T1| = 2 >= 2, then 1 < 2
        assert!(p.select_victims(&mut s, 2, &mut out));
        assert_eq!(out, vec![0, 2]);
        p.target = 3.0; // |T1| = 2 < 3: T2 first
        assert!(p.select_victims(&mut s, 3, &mut out));
        assert_eq!(out, vec![2, 3, 0], "falls back to T1 when T2 runs out");
        assert!(!p.select_victims(&mut s, 5, &mut out));
    }
}
