//! Reading ahead for the calls that reorder the policy's lists without
//! changing the index (touches, request commits): the policy links of a
//! key's slot, and its neighbours', are requested some keys before its
//! turn, so that on tables beyond the CPU caches their misses overlap.

use super::lists::NIL;
use super::policy::Policy;
use super::slots::{Lookahead, Slots};
use crate::key::KeyBytes;

/// How many keys ahead a call that reorders the policy's lists (touches,
/// request commits) requests a slot's policy links; its neighbours' links
/// are requested half as far ahead.
pub(super) const LINKS_AHEAD: usize = 16;

/// Requests the policy lines the first keys of a reordering call will
/// read: the links of the slots of keys `0..LINKS_AHEAD`, then the
/// neighbours' links of keys `0..LINKS_AHEAD / 2`.  `slot_at(j)` is key
/// `j`'s slot or a likely one: [`NIL`] or a stale slot is a harmless hint.
#[inline]
pub(super) fn request_links_first(
    policy: &impl Policy,
    len: usize,
    slot_at: impl Fn(usize) -> u32,
) {
    for j in 0..len.min(LINKS_AHEAD) {
        policy.prefetch_links(slot_at(j));
    }
    for j in 0..len.min(LINKS_AHEAD / 2) {
        policy.prefetch_neighbours(slot_at(j));
    }
}

/// At key `j` of a reordering call of `len` keys: requests the links of key
/// `j + LINKS_AHEAD`'s slot and the neighbours' links of key
/// `j + LINKS_AHEAD / 2`'s slot (`slot_at` as for [`request_links_first`]).
#[inline]
pub(super) fn request_links_at(
    policy: &impl Policy,
    j: usize,
    len: usize,
    slot_at: impl Fn(usize) -> u32,
) {
    if j + LINKS_AHEAD < len {
        policy.prefetch_links(slot_at(j + LINKS_AHEAD));
    }
    if j + LINKS_AHEAD / 2 < len {
        policy.prefetch_neighbours(slot_at(j + LINKS_AHEAD / 2));
    }
}

/// Resolves the keys of a touch, which reorders the policy's lists but
/// never changes the index: each key is resolved [`LINKS_AHEAD`] positions
/// before its turn (its index and slot reads requested further ahead
/// still, by a [`Lookahead`]), so that its slot's policy lines can be
/// requested ahead too.
pub(super) struct ReorderAhead {
    ahead: Lookahead,
    /// Hash and slot of the keys in `j..j + LINKS_AHEAD`, at `position % LINKS_AHEAD`.
    found: [(u64, u32); LINKS_AHEAD],
    len: usize,
}

impl ReorderAhead {
    /// Starts resolving the `len` keys `key(0..len)`.
    #[inline]
    pub(super) fn new<'k, K: KeyBytes + ?Sized + 'k>(
        slots: &Slots,
        policy: &impl Policy,
        len: usize,
        key: impl Fn(usize) -> &'k K + Copy,
    ) -> ReorderAhead {
        let mut r = ReorderAhead {
            ahead: Lookahead::new(slots, len, key),
            found: [(0, NIL); LINKS_AHEAD],
            len,
        };
        if !slots.read_ahead {
            return r;
        }
        for j in 0..len.min(LINKS_AHEAD) {
            r.found[j] = r.ahead.find(slots, j, key);
        }
        request_links_first(policy, len, |j| r.found[j].1);
        r
    }

    /// The hash and slot ([`NIL`] if absent) of key `j`; calls go
    /// `j = 0, 1, 2, ...`, and nothing may change the index in between.
    #[inline]
    pub(super) fn find<'k, K: KeyBytes + ?Sized + 'k>(
        &mut self,
        slots: &Slots,
        policy: &impl Policy,
        j: usize,
        key: impl Fn(usize) -> &'k K + Copy,
    ) -> (u64, u32) {
        if !slots.read_ahead {
            return self.ahead.find(slots, j, key);
        }
        let here = self.found[j % LINKS_AHEAD];
        if j + LINKS_AHEAD < self.len {
            self.found[j % LINKS_AHEAD] = self.ahead.find(slots, j + LINKS_AHEAD, key);
        }
        request_links_at(policy, j, self.len, |k| self.found[k % LINKS_AHEAD].1);
        here
    }
}
