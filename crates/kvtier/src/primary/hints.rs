//! Where a request's latest lookup found its hits, so that the request's
//! next calls on the same keys find them without hashing them and probing
//! the index again.  An engine's scheduler looks a request's keys up,
//! pins the leading hits for a load and touches them, and unpins them when
//! the load is done: each of those calls names the keys the lookup found,
//! in the same order, from the first.
//!
//! A hint is a guess, checked before it is used: key `j` of a later call is
//! in the slot of hit `j` if that slot holds the key now (a key is resident
//! in one slot at most); otherwise the key is looked for in the index as
//! without hints, so a call on other keys, or after they moved, gets the
//! same answers, only slower.  The key's hash comes with its hint while
//! no key came or went since the lookup (the slot then still holds the key
//! it held at the lookup).  Hints allocate nothing per key: their buffer
//! belongs to the request's record, reused by later requests.

use super::lists::NIL;
use super::slots::Slots;
use crate::key::KeyBytes;

/// How many keys ahead a hinted call requests the slot record of a key.
pub(super) const RECORD_AHEAD: usize = 8;

/// The slots (and hashes) of the hits of a request's latest lookup.
#[derive(Debug, Default)]
pub(super) struct Hints {
    /// Slot and hash of hit `j` of the latest lookup, at `j`.
    found: Vec<(u32, u64)>,
    /// [`Slots::version`] when they were found.
    version: u32,
}

impl Hints {
    /// Forgets the hints, keeping a buffer of a usual request's size.
    pub(super) fn clear(&mut self) {
        self.found.clear();
        self.found.shrink_to(4096);
    }

    /// Starts recording the hits of a lookup whose keys are keys
    /// `first..first + n` of the request's lookup (`first` 0: a new
    /// lookup); false, recording nothing, if the hits before `first` were
    /// not all recorded or no room can be had for `n` more.
    pub(super) fn start(&mut self, slots: &Slots, first: usize, n: usize) -> bool {
        if first == 0 {
            self.found.clear();
            self.version = slots.version;
        }
        self.found.len() == first
            && self.version == slots.version
            && self.found.try_reserve(n).is_ok()
    }

    /// Records the next hit: its slot and its key's hash.
    #[inline(always)]
    pub(super) fn push(&mut self, slot: u32, h: u64) {
        self.found.push((slot, h));
    }

    /// Whether there is a hint for each of `n` keys.
    #[inline]
    pub(super) fn covers(&self, n: usize) -> bool {
        n > 0 && n <= self.found.len()
    }

    /// The slot hint `j` names ([`NIL`] past the hints): a harmless guess
    /// for prefetching.
    #[inline(always)]
    pub(super) fn slot_hint(&self, j: usize) -> u32 {
        self.found.get(j).map_or(NIL, |&(s, _)| s)
    }

    /// Resolves keys `key(0..n)` in order, each first at its hint (`n`
    /// at most the number of hints): hands `put(j, slot, hash)` key `j`'s
    /// slot ([`NIL`] if absent) and its hash when known without hashing
    /// (`None` when the hint held the key but keys came or went since the
    /// lookup).  Requests the slot records of later keys as it goes.  For
    /// calls that change no key's residence while resolving.
    #[inline]
    pub(super) fn resolve_each<'k, K: KeyBytes + ?Sized + 'k>(
        &self,
        slots: &Slots,
        n: usize,
        key: impl Fn(usize) -> &'k K,
        mut put: impl FnMut(usize, u32, Option<u64>),
    ) {
        debug_assert!(n <= self.found.len());
        let current = self.version == slots.version;
        let ahead = if slots.read_ahead { RECORD_AHEAD } else { 0 };
        for j in 0..n.min(ahead) {
            slots.prefetch_slot(self.slot_hint(j), key(j).key_bytes().len());
        }
        for j in 0..n {
            if j + ahead < n && ahead != 0 {
                let k = key(j + RECORD_AHEAD);
                slots.prefetch_slot(self.slot_hint(j + RECORD_AHEAD), k.key_bytes().len());
            }
            let (s, h) = self.found[j];
            let k = key(j);
            if slots.holds(s, k) {
                put(j, s, current.then_some(h));
            } else {
                let h = slots.hash(k);
                put(j, slots.find(k, h).unwrap_or(NIL), Some(h));
            }
        }
    }
}
