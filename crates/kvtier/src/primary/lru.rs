//! `lru` [0.33]: least recently used, with logical recency independent of
//! pinning, and token positions within active requests.
//!
//! # Ranks
//!
//! Every resident key has a rank; the least ranked idle key is evicted
//! first.  A rank is a pair compared lexicographically:
//!
//! - a key placed without a position (stored, touched, or committed at its
//!   request's finish) gets a fresh rank `(n, 0)`, `n` from a counter that
//!   only grows;
//! - a request gets one rank `r` from the same counter the first time it
//!   needs one (its first recorded access, or its first store of a key with
//!   a position); reset starts over, so a request active across a reset
//!   gets a new rank at its next access;
//! - a key with position `p` that an active request stores ranks `(r, -p)`:
//!   all batches of the request share `r`, and within it a later position
//!   (the tail) ranks lower than an earlier one (the head);
//! - when an active request first accesses a resident key with position
//!   `p`, the key's rank becomes `(r, -p)` if that is higher, never lower;
//! - ties (equal positions within one request) go by key bytes, the
//!   smaller key ranking lower.
//!
//! # One list in rank order
//!
//! One intrusive list (`OrderLists`) holds every resident key in rank
//! order, oldest first.  A fresh rank is the highest there is, so fresh
//! keys go to the back in O(1).  A request's rank `(r, _)` sits inside the
//! list, wherever the back was when the request got it: two marker nodes
//! (a *start* and an *end*, ids past the slot range, allocated per active
//! request and recycled at its finish or at reset) bracket the request's
//! *block*, the keys ranked `(r, -p)`, kept in position order (highest
//! position first).  A key joins the block after its start marker when its
//! position is the highest so far and before its end marker when it is the
//! lowest (a request storing head to tail, or tail to head: O(1)); other
//! positions walk the block from its start (backfills).  Markers are never
//! eviction candidates, so an eviction walk never meets them; a busy key
//! turning idle walks back over them as over other non-candidates.
//!
//! Comparing a key's rank with a request's needs numbers: once any
//! position was given to the tier, every id carries a stamp (its rank's
//! `n` or `r`) and a position (16 bytes per slot).  Until then the tier
//! keeps none and the path without positions writes nothing more than
//! before; the first position numbers the list once, front to back (every
//! block is still empty then), and that order is the rank order.
//!
//! Pinning does not move a key, so an unpinned key is a candidate again at
//! the rank it had.  Busy keys an eviction passes over are parked out of
//! the candidates (see `OrderLists`), so no eviction walks them twice.

use super::lists::{NIL, OrderLists};
use super::policy::{Policy, PolicyStats};
use super::slots::{PARKED, Slots};
use crate::error::{Error, Result};

const MAIN: usize = 0;

/// Request marker pairs a tier has room for from the start: one per 64
/// slots, at least 1 and at most 1024 (so a large tier need not grow its
/// arrays until that many requests are active at once); more are added,
/// doubling, as more requests are active.
fn initial_pairs(capacity: u32) -> u32 {
    (capacity / 64).clamp(1, 1024).min(max_pairs(capacity))
}

/// Most marker pairs a tier of `capacity` slots can number (every id stays
/// below [`NIL`]).
fn max_pairs(capacity: u32) -> u32 {
    (NIL - capacity) / 2
}

fn no_room(e: std::collections::TryReserveError) -> Error {
    Error::OutOfMemory(format!("lru request ranks: {e}"))
}

/// What a comparison of ranks needs of one id: its stamp (the counter value
/// of its fresh rank, or of its request's rank) and, in a request's block,
/// its position.
#[derive(Clone, Copy, Debug, Default)]
struct Rank {
    stamp: u64,
    position: u64,
}

/// The `lru` policy.
#[derive(Debug)]
pub(crate) struct LruPolicy {
    lists: OrderLists<1>,
    /// Slots are ids `0..capacity`; request markers come after.
    capacity: u32,
    /// Stamp and position of every id, once positions are in use (empty before).
    ranks: Vec<Rank>,
    positions_in_use: bool,
    /// The rank counter (the last value handed out).
    clock: u64,
    /// Marker pairs `0..pairs_made` were handed out since the last reset;
    /// pair `i` is ids `capacity + 2i` (start) and `capacity + 2i + 1` (end).
    pairs_made: u32,
    /// Pairs given back, handed out again first.
    free_pairs: Vec<u32>,
    /// Block entries walked past to place keys (tests check it stays 0
    /// for keys arriving in position order).
    #[cfg(test)]
    walked: u64,
}

impl LruPolicy {
    /// An empty policy over `capacity` slots; an out-of-memory error if its
    /// list cannot be had.
    pub(crate) fn new(capacity: u32) -> crate::error::Result<LruPolicy> {
        let pairs = initial_pairs(capacity) as usize;
        Ok(LruPolicy {
            lists: OrderLists::new(capacity as usize + 2 * pairs)?,
            capacity,
            ranks: Vec::new(),
            positions_in_use: false,
            clock: 0,
            pairs_made: 0,
            free_pairs: Vec::new(),
            #[cfg(test)]
            walked: 0,
        })
    }

    /// Whether `id` is a slot (not a request marker).
    #[inline]
    fn is_slot(&self, id: u32) -> bool {
        id < self.capacity
    }

    /// Gives `id` a fresh rank (it was just placed at the back).
    #[inline]
    fn stamp_fresh(&mut self, id: u32) {
        if self.positions_in_use {
            self.clock += 1;
            self.ranks[id as usize] = Rank {
                stamp: self.clock,
                position: 0,
            };
        }
    }

    /// The start marker of the request whose handle is `rank`, giving the
    /// request its rank (markers at the back) if it has none.
    fn start_of(&mut self, rank: &mut u32) -> u32 {
        if *rank != NIL {
            return *rank;
        }
        let pair = match self.free_pairs.pop() {
            Some(p) => p,
            None => {
                self.pairs_made += 1;
                self.pairs_made - 1
            }
        };
        let start = self.capacity + 2 * pair;
        debug_assert!(
            (start as usize + 1) < self.lists.ids(),
            "room reserved at begin"
        );
        for id in [start, start + 1] {
            self.lists.push_back(MAIN, id);
            self.lists.park(id);
        }
        if self.positions_in_use {
            self.clock += 1;
            let r = Rank {
                stamp: self.clock,
                position: 0,
            };
            self.ranks[start as usize] = r;
            self.ranks[start as usize + 1] = r;
        }
        *rank = start;
        start
    }

    /// Whether a key with `position` and bytes `key` goes before block key
    /// `other` (a higher position ranks lower; ties by key bytes).
    #[inline]
    fn goes_before(&self, slots: &Slots, position: u64, key: &[u8], other: u32) -> bool {
        let o = self.ranks[other as usize].position;
        position > o || (position == o && key < slots.key(other).as_bytes())
    }

    /// Links `slot` (in no list) into the block of the request starting at
    /// `start`, at its place for `position`, and ranks it there; a
    /// candidate if `candidate`.
    fn place_in_block(
        &mut self,
        slots: &Slots,
        slot: u32,
        start: u32,
        position: u64,
        candidate: bool,
    ) {
        let end = start + 1;
        let key = slots.key(slot).as_bytes();
        let first = self.lists.next(start);
        let after = if first == end || self.goes_before(slots, position, key, first) {
            start
        } else {
            let last = self.lists.prev(end);
            if !self.goes_before(slots, position, key, last) {
                last
            } else {
                // Between the head and the tail of the block: walk it.
                let mut at = first;
                loop {
                    #[cfg(test)]
                    {
                        self.walked += 1;
                    }
                    let next = self.lists.next(at);
                    if next == end || self.goes_before(slots, position, key, next) {
                        break at;
                    }
                    at = next;
                }
            }
        };
        self.lists.insert_after(MAIN, after, slot);
        if candidate {
            self.lists.restore(slot);
        }
        self.ranks[slot as usize] = Rank {
            stamp: self.ranks[start as usize].stamp,
            position,
        };
    }

    /// Room for marker pairs `0..pairs` (their stamps included).
    fn grow_pairs(&mut self, pairs: usize) -> Result<()> {
        let ids = self.capacity as usize + 2 * pairs;
        self.lists.grow_to(ids).map_err(no_room)?;
        if self.positions_in_use && ids > self.ranks.len() {
            self.ranks
                .try_reserve_exact(ids - self.ranks.len())
                .map_err(no_room)?;
            self.ranks.resize(ids, Rank::default());
        }
        Ok(())
    }
}

impl Policy for LruPolicy {
    #[inline]
    fn insert(&mut self, _slots: &Slots, slot: u32, _h: u64, _maybe_ghost: bool) {
        self.lists.push_back(MAIN, slot);
        self.stamp_fresh(slot);
    }

    fn insert_positioned(
        &mut self,
        slots: &Slots,
        slot: u32,
        _h: u64,
        _maybe_ghost: bool,
        rank: &mut u32,
        position: u64,
    ) {
        debug_assert!(self.positions_in_use);
        let start = self.start_of(rank);
        self.place_in_block(slots, slot, start, position, true);
    }

    #[inline]
    fn request_access(&mut self, rank: &mut u32) {
        self.start_of(rank);
    }

    fn raise(&mut self, slots: &Slots, slot: u32, rank: &mut u32, position: u64) {
        debug_assert!(self.positions_in_use);
        let start = self.start_of(rank);
        let own = self.ranks[start as usize].stamp;
        let now = self.ranks[slot as usize];
        let higher_already = now.stamp > own || (now.stamp == own && now.position <= position);
        if higher_already {
            return;
        }
        let candidate = self.lists.is_candidate(slot);
        self.lists.unlink(slot);
        self.place_in_block(slots, slot, start, position, candidate);
    }

    fn end_request(&mut self, rank: &mut u32) {
        let start = *rank;
        if start == NIL {
            return;
        }
        self.lists.unlink(start);
        self.lists.unlink(start + 1);
        self.free_pairs.push((start - self.capacity) / 2);
        *rank = NIL;
    }

    fn use_positions(&mut self) -> Result<()> {
        if self.positions_in_use {
            return Ok(());
        }
        let ids = self.lists.ids();
        self.ranks.try_reserve_exact(ids).map_err(no_room)?;
        self.ranks.resize(ids, Rank::default());
        // Number the list as it stands: every block is empty (no key had a
        // position), so list order is rank order.
        let mut id = self.lists.front(MAIN);
        while id != NIL {
            let marker_end = !self.is_slot(id) && (id - self.capacity) % 2 == 1;
            if !marker_end {
                self.clock += 1;
            }
            self.ranks[id as usize] = Rank {
                stamp: self.clock,
                position: 0,
            };
            id = self.lists.next(id);
        }
        self.positions_in_use = true;
        Ok(())
    }

    fn reserve_requests(&mut self, active: usize) -> Result<()> {
        let have = (self.lists.ids() - self.capacity as usize) / 2;
        if active <= have {
            return Ok(());
        }
        let most = max_pairs(self.capacity) as usize;
        if active > most {
            return Err(Error::NoSpace(format!(
                "{active} active requests: an lru tier of {} slots tracks at most {most}",
                self.capacity
            )));
        }
        self.grow_pairs(active.max(2 * have).min(most))
    }

    #[inline]
    fn remove(&mut self, slot: u32) {
        self.lists.unlink(slot);
    }

    #[inline(always)]
    fn touch(&mut self, _slots: &Slots, slot: u32) {
        // Stamp first: the move is then the last call (a jump).
        self.stamp_fresh(slot);
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

    #[inline]
    fn became_idle(&mut self, slot: u32) {
        self.lists.restore(slot);
    }

    #[inline]
    fn evict(&mut self, _slots: &Slots, slot: u32, _h: u64) {
        self.lists.unlink(slot);
    }

    #[inline(always)]
    fn commit(&mut self, _slots: &Slots, slot: u32, _reused: bool, _inserted: bool) {
        self.stamp_fresh(slot);
        self.lists.move_to_back(MAIN, slot);
    }

    #[inline]
    fn prefetch_eviction(&self, slot: u32, _h: u64) {
        self.lists.prefetch_neighbours(slot);
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
        self.free_pairs.clear();
        self.pairs_made = 0;
    }

    fn stats(&self) -> PolicyStats {
        PolicyStats::default()
    }

    fn metadata_bytes(&self) -> usize {
        self.lists.bytes()
            + self.ranks.capacity() * std::mem::size_of::<Rank>()
            + self.free_pairs.capacity() * 4
    }

    fn order(&self) -> Vec<u32> {
        let mut v = self.lists.collect(MAIN);
        v.retain(|&id| self.is_slot(id));
        v
    }

    fn candidate_order(&self) -> Vec<u32> {
        self.lists.collect_candidates(MAIN)
    }

    #[cfg(test)]
    fn walked(&self) -> u64 {
        self.walked
    }
}

#[cfg(test)]
mod tests {
    use super::super::policy::Policy;
    use super::super::{PrimaryConfig, PrimaryTier, StorePlan};
    use crate::key::Key;
    use crate::request::RequestId;

    fn walked(t: &PrimaryTier) -> u64 {
        t.policy.walked()
    }

    /// Mirrors vLLM's `test_lru_incremental_stores_do_not_rescan_the_prefix`:
    /// a request storing its keys one call at a time, head to tail (or
    /// tail to head), places each without walking its block.
    #[test]
    fn keys_in_position_order_are_placed_without_a_walk() {
        for ascending in [true, false] {
            let mut t = PrimaryTier::new(PrimaryConfig {
                capacity: 64,
                ..Default::default()
            })
            .unwrap();
            let r = RequestId(1);
            t.request_begin(r).unwrap();
            let mut plan = StorePlan::default();
            for i in 0..64u32 {
                let n = if ascending { i } else { 63 - i };
                let k = Key::new(&n.to_be_bytes()).unwrap();
                t.set_positions(r, &[k], &[16 * (n as u64 + 1)]).unwrap();
                t.prepare_store(r, &[k], &mut plan).unwrap();
                t.complete_store(r, &plan.to_store, true);
            }
            assert_eq!(walked(&t), 0, "ascending: {ascending}");
            let tail_first: Vec<Key> = (0..64u32)
                .rev()
                .map(|n| Key::new(&n.to_be_bytes()).unwrap())
                .collect();
            assert_eq!(t.eviction_order(), tail_first);
            // A backfill in the middle walks.
            let k = Key::new(&100u32.to_be_bytes()).unwrap();
            t.set_positions(r, &[k], &[16 * 32 + 8]).unwrap();
            t.touch(r, &tail_first[..1]).unwrap();
            t.prepare_store(r, &[k], &mut plan).unwrap();
            assert!(walked(&t) > 0);
            t.check_invariants().unwrap();
        }
    }
}
