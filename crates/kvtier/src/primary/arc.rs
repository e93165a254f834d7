//! `arc`: Adaptive Replacement Cache.
//!
//! T1 holds resident keys seen once, T2 resident keys reused; B1 and B2 are
//! ghost lists (keys only) of keys evicted from T1 and T2, each bounded by
//! the capacity, oldest forgotten first.  The T1 target adapts on ghost hits
//! (by `touch`, and [0.33] when `prepare_store` offers a ghost: see
//! [`Policy::store_miss`]); a ghost hit makes the ghost the most recent of
//! its list.  Eviction takes from T1 while |T1| is at or above the
//! truncated target, else from T2, falling back to the other list.
//!
//! Ghosts live apart from the slots: B1 and B2 each in an arena of their
//! own (keys and prev/next links, 8 bytes per ghost besides the key), so a
//! ghost's list is known from its id (B1's ids first, then B2's), with no
//! tag.  One [`TagIndex`] over both (narrow entries up to 2^25 slots: 8
//! bytes per ghost, 16 beyond), sized once
//! (at the first eviction) for the most ghosts there can be (the capacity
//! in each list), so nothing scans and nothing grows under churn.  A full
//! list reuses its oldest ghost's place for a new one; a ghost removed from
//! the middle (its key stored again) leaves a place the next one reuses.
//! With both lists full: 16 bytes of ghost links and 16 of ghost index per
//! slot.

use super::slots::key_hash;
use foldhash::fast::RandomState;

use super::huge;
use super::index::TagIndex;
use super::lists::{NIL, OrderLists};
use super::policy::{Policy, PolicyStats};
use super::slots::{PARKED, Slots, same_key};
use crate::error::Result;
use crate::fallible;
use crate::key::{Key, KeyBytes};

const T1: usize = 0;
const T2: usize = 1;
const B1: usize = 0;
const B2: usize = 1;

/// The largest capacity ARC supports: the ghost ids of both lists
/// (2 x capacity) must fit in a `u32` below [`NIL`].
pub(crate) const MAX_CAPACITY: u32 = i32::MAX as u32;

/// One ghost list over local ids `0..keys.len()`: a doubly linked list,
/// oldest at the front, and a stack of free ids linked through `next`.
#[derive(Debug)]
struct GhostList {
    keys: Vec<Key>,
    prev: Vec<u32>,
    next: Vec<u32>,
    head: u32,
    tail: u32,
    len: u32,
    free: u32,
}

impl GhostList {
    fn new() -> GhostList {
        GhostList {
            keys: Vec::new(),
            prev: Vec::new(),
            next: Vec::new(),
            head: NIL,
            tail: NIL,
            len: 0,
            free: NIL,
        }
    }

    /// A local id for a new ghost: a freed one, else a fresh one (growing
    /// the arrays, amortized O(1), never beyond `bound`).
    fn take_id(&mut self, key: Key, bound: usize) -> u32 {
        if self.free != NIL {
            let i = self.free;
            self.free = self.next[i as usize];
            self.keys[i as usize] = key;
            return i;
        }
        let i = self.keys.len();
        if i == self.keys.capacity() {
            let want = Self::growth(i, bound);
            self.keys.reserve_exact(want);
            self.prev.reserve_exact(want);
            self.next.reserve_exact(want);
            huge::advise(&self.keys);
            huge::advise(&self.prev);
            huge::advise(&self.next);
        }
        self.keys.push(key);
        self.prev.push(NIL);
        self.next.push(NIL);
        i as u32
    }

    /// How many ids to add when the arena of `len` ids is full: as many
    /// again (at least 16), never beyond `bound`, at least one.
    fn growth(len: usize, bound: usize) -> usize {
        (len * 2).max(16).min(bound).max(len + 1) - len
    }

    /// Makes room, fallibly, for `additional` more ghosts (never beyond
    /// `bound` in all), so that [`GhostList::take_id`] does not allocate.
    fn reserve(&mut self, additional: usize, bound: usize) -> Result<()> {
        let i = self.keys.len();
        let wanted = additional.min(bound.saturating_sub(i));
        if wanted == 0 || self.keys.capacity() - i >= wanted {
            return Ok(());
        }
        let extra = Self::growth(i, bound).max(wanted);
        let what = "the ghost lists";
        fallible::reserve_exact(&mut self.keys, extra, what)?;
        fallible::reserve_exact(&mut self.prev, extra, what)?;
        fallible::reserve_exact(&mut self.next, extra, what)?;
        huge::advise(&self.keys);
        huge::advise(&self.prev);
        huge::advise(&self.next);
        Ok(())
    }

    /// Appends local id `i` (in no list) at the back.
    fn push_back(&mut self, i: u32) {
        self.prev[i as usize] = self.tail;
        self.next[i as usize] = NIL;
        if self.tail == NIL {
            self.head = i;
        } else {
            self.next[self.tail as usize] = i;
        }
        self.tail = i;
        self.len += 1;
    }

    /// Takes local id `i` out of the list.
    fn unlink(&mut self, i: u32) {
        let (p, n) = (self.prev[i as usize], self.next[i as usize]);
        if p == NIL {
            self.head = n;
        } else {
            self.next[p as usize] = n;
        }
        if n == NIL {
            self.tail = p;
        } else {
            self.prev[n as usize] = p;
        }
        self.len -= 1;
    }

    /// Makes local id `i` the most recent.
    fn move_to_back(&mut self, i: u32) {
        if self.tail != i {
            self.unlink(i);
            self.push_back(i);
        }
    }

    fn clear(&mut self) {
        self.keys.clear();
        self.prev.clear();
        self.next.clear();
        self.head = NIL;
        self.tail = NIL;
        self.len = 0;
        self.free = NIL;
    }

    fn bytes(&self) -> usize {
        (self.prev.capacity() + self.next.capacity()) * 4
    }
}

/// Keys evicted from T1 (B1) and T2 (B2), without data.  A ghost's id in
/// the index is its local id in B1, or `bound` + its local id in B2.
#[derive(Debug)]
struct Ghosts {
    lists: [GhostList; 2],
    index: TagIndex,
    hasher: RandomState,
    bound: usize,
}

impl Ghosts {
    /// The list and local id of ghost `g`.
    #[inline]
    fn split(bound: usize, g: u32) -> (usize, u32) {
        if (g as usize) < bound {
            (B1, g)
        } else {
            (B2, g - bound as u32)
        }
    }

    /// The key of ghost `g`.
    #[inline]
    fn key(lists: &[GhostList; 2], bound: usize, g: u32) -> &Key {
        let (list, i) = Self::split(bound, g);
        &lists[list].keys[i as usize]
    }

    fn find(&self, key: &(impl KeyBytes + ?Sized), h: u64) -> Option<u32> {
        let (lists, bound) = (&self.lists, self.bound);
        self.index
            .find(h, |g| same_key(Self::key(lists, bound, g), key))
    }

    fn len(&self, list: usize) -> usize {
        self.lists[list].len as usize
    }

    /// The list of ghost `g`.
    fn list_of(&self, g: u32) -> usize {
        Self::split(self.bound, g).0
    }

    /// Removes ghost `g` from the index (hash `h`).
    fn unindex(&mut self, g: u32, h: u64) {
        let Ghosts {
            lists,
            index,
            hasher,
            bound,
        } = self;
        index.remove(h, g, |o| {
            key_hash(hasher, Self::key(lists, *bound, o).as_bytes())
        });
    }

    /// Adds `key` (hash `h`, not a ghost) at the back of `list`, forgetting
    /// the oldest ghost of that list if it is full.
    ///
    /// [`Ghosts::reserve`] makes the room first; should it not have, and
    /// the index cannot be had now, the key is not remembered.
    fn add(&mut self, list: usize, key: Key, h: u64) {
        if !self.index.has_room_for(2 * self.bound) {
            match TagIndex::new(2 * self.bound) {
                Ok(index) => self.index = index,
                Err(_) => return,
            }
        }
        let base = (list * self.bound) as u32;
        let i = if self.len(list) >= self.bound {
            // Full: the oldest ghost is forgotten, its place reused.
            let old = self.lists[list].head;
            let old_h = key_hash(&self.hasher, self.lists[list].keys[old as usize].as_bytes());
            self.unindex(base + old, old_h);
            let l = &mut self.lists[list];
            l.keys[old as usize] = key;
            l.move_to_back(old);
            old
        } else {
            let l = &mut self.lists[list];
            let i = l.take_id(key, self.bound);
            l.push_back(i);
            i
        };
        self.index.insert(h, base + i);
    }

    /// Makes room, fallibly, for `n` more ghosts: the index, sized once for
    /// the most ghosts there can be, and both lists' arenas.
    fn reserve(&mut self, n: usize) -> Result<()> {
        if !self.index.has_room_for(2 * self.bound) {
            self.index = TagIndex::new(2 * self.bound)?;
        }
        for l in &mut self.lists {
            l.reserve(n, self.bound)?;
        }
        Ok(())
    }

    /// Forgets ghost `g` (hash `h`).
    fn remove(&mut self, g: u32, h: u64) {
        self.unindex(g, h);
        let (list, i) = Self::split(self.bound, g);
        let l = &mut self.lists[list];
        l.unlink(i);
        l.next[i as usize] = l.free;
        l.free = i;
    }

    /// Makes ghost `g` the most recent of its list.
    fn touch(&mut self, g: u32) {
        let (list, i) = Self::split(self.bound, g);
        self.lists[list].move_to_back(i);
    }

    fn clear(&mut self) {
        for l in &mut self.lists {
            l.clear();
        }
        self.index.clear();
    }

    fn bytes(&self) -> usize {
        self.lists[B1].bytes() + self.lists[B2].bytes() + self.index.bytes()
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
    /// An empty policy over `capacity` (at most [`MAX_CAPACITY`]) slots;
    /// `hasher` must be the tier's.
    /// An out-of-memory error if its lists cannot be had.
    pub(crate) fn new(capacity: u32, hasher: RandomState) -> Result<ArcPolicy> {
        Ok(ArcPolicy {
            lists: OrderLists::new(capacity as usize)?,
            ghosts: Ghosts {
                lists: [GhostList::new(), GhostList::new()],
                index: TagIndex::new(0)?,
                hasher,
                bound: capacity as usize,
            },
            capacity,
            target: 0.0,
        })
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

    /// A hit on ghost `g`: adapt the target, and make `g` the most recent
    /// of its list.
    fn ghost_hit(&mut self, g: u32) {
        if self.ghosts.list_of(g) == B1 {
            self.grow();
        } else {
            self.shrink();
        }
        self.ghosts.touch(g);
    }

    /// The next idle, unmarked candidate from `*cursor` on, advancing the
    /// cursor past it; busy candidates met are parked.
    fn next_candidate(&mut self, slots: &mut Slots, cursor: &mut u32) -> Option<u32> {
        while *cursor != NIL {
            let id = *cursor;
            *cursor = self.lists.candidate_next(id);
            if !slots.is_idle(id) {
                self.lists.park(id);
                *slots.flags_mut(id) |= PARKED;
            } else if !slots.is_marked(id) {
                return Some(id);
            }
        }
        None
    }
}

impl Policy for ArcPolicy {
    #[inline]
    fn insert(&mut self, slots: &Slots, slot: u32, h: u64, maybe_ghost: bool) {
        self.lists.push_back(T1, slot);
        if maybe_ghost {
            if let Some(g) = self.ghosts.find(slots.key(slot), h) {
                self.ghosts.remove(g, h);
            }
        }
    }

    #[inline]
    fn remove(&mut self, slot: u32) {
        self.lists.unlink(slot);
    }

    #[inline(always)]
    fn touch(&mut self, slots: &Slots, slot: u32) {
        match self.lists.list_of(slot) {
            Some(T1) if slots.refs(slot) >= 0 => self.lists.move_to_back(T2, slot),
            Some(list) => self.lists.move_to_back(list, slot),
            None => {}
        }
    }

    fn touch_absent(&mut self, key: &[u8], h: u64) {
        if let Some(g) = self.ghosts.find(key, h) {
            self.ghost_hit(g);
        }
    }

    #[inline]
    fn learns_from_store_misses(&self) -> bool {
        true
    }

    fn store_miss(&mut self, key: &Key, h: u64, first: bool) -> bool {
        let Some(g) = self.ghosts.find(key, h) else {
            return false;
        };
        if first {
            self.ghost_hit(g);
        }
        true
    }

    #[inline]
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

    fn reserve_evictions(&mut self, n: usize) -> Result<()> {
        self.ghosts.reserve(n)
    }

    #[inline]
    fn evict(&mut self, slots: &Slots, slot: u32, h: u64) {
        let ghost_list = match self.lists.list_of(slot) {
            Some(T1) => B1,
            _ => B2,
        };
        self.lists.unlink(slot);
        self.ghosts.add(ghost_list, *slots.key(slot), h);
    }

    #[inline(always)]
    fn commit(&mut self, _slots: &Slots, slot: u32, reused: bool, inserted: bool) {
        match self.lists.list_of(slot) {
            Some(_) if reused => self.lists.move_to_back(T2, slot),
            Some(list) if inserted => self.lists.move_to_back(list, slot),
            _ => {}
        }
    }

    #[inline]
    fn prefetch_history(&self, h: u64) {
        self.ghosts.index.prefetch(h);
    }

    #[inline]
    fn prefetch_eviction(&self, slot: u32, h: u64) {
        self.lists.prefetch_neighbours(slot);
        self.ghosts.index.prefetch(h);
    }

    #[inline]
    fn prefetch_links(&self, slot: u32) {
        self.lists.prefetch(slot);
    }

    #[inline]
    fn prefetch_neighbours(&self, slot: u32) {
        self.lists.prefetch_neighbours(slot);
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
        self.lists.bytes() + self.ghosts.bytes()
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
        let mut s = Slots::new(n).unwrap();
        s.next_epoch();
        for i in 0..n {
            let slot = s.allocate().unwrap();
            let key = Key::new(&i.to_be_bytes()).unwrap();
            let h = s.hash(&key);
            s.occupy(slot, &key, h, 0);
            s.set_refs(slot, 0);
        }
        s
    }

    #[test]
    fn eviction_compares_t1_with_the_truncated_target() {
        let mut s = slots(4);
        let mut p = ArcPolicy::new(4, s.hasher.clone()).unwrap();
        for i in 0..4 {
            p.insert(&s, i, s.hash(s.key(i)), true);
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
