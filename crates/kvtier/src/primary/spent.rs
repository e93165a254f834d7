//! Pins spent by unpins beyond the unpinner's own: what keeps a finished
//! request's late `complete_load` from releasing another request's pin.
//!
//! An active request may unpin any pinned key, as vLLM allows, pins of
//! its own or not.  An unpin of a key the request holds no pin of (on its
//! record) takes a pin some other holder counts as its own: the slot's
//! ref count went down, the holder's record did not.  Such unpins are
//! counted here, per key.  For every key,
//!
//! `ref count + spent = pins requests' records hold + pins of cascades`,
//!
//! so a pin a finished request holds on record is a pin of the slot
//! unless some were spent: its late completion of a key with spent pins
//! takes one of those instead (releasing nothing, counted as a spent
//! load completion), and otherwise releases its own pin, which leaves
//! every other holder's pins in the count.  Only a finished request's
//! completion is charged: an active request's unpins are vLLM's, however
//! many pins they take.  The table is empty unless such unpins happened;
//! a key leaves it when its last spent pin is charged, and everything at
//! a reset (which drops every pin).

use foldhash::fast::RandomState;

use super::slots::{key_hash, same_key};
use crate::error::Result;
use crate::fallible;
use crate::key::{Key, KeyBytes};

/// Spent pins per key (entries with a count of 0 only within a call).
#[derive(Debug, Default)]
pub(super) struct SpentPins {
    table: hashbrown::HashTable<(Key, u32)>,
}

impl SpentPins {
    /// Whether no key has spent pins (the common case: one check).
    #[inline]
    pub(super) fn is_empty(&self) -> bool {
        self.table.is_empty()
    }

    /// Makes room for `n` more keys, fallibly.
    pub(super) fn reserve(&mut self, hasher: &RandomState, n: usize) -> Result<()> {
        fallible::reserve_table(
            &mut self.table,
            n,
            |(k, _)| key_hash(hasher, k.as_bytes()),
            "the pins unpins took from other requests",
        )
    }

    /// Counts one more spent pin of `key` (hash `h`); room for a new key
    /// must have been reserved.
    pub(super) fn add(&mut self, hasher: &RandomState, key: &(impl KeyBytes + ?Sized), h: u64) {
        let (len, capacity) = (self.table.len(), self.table.capacity());
        match self.table.entry(
            h,
            |(k, _)| same_key(k, key),
            |(k, _)| key_hash(hasher, k.as_bytes()),
        ) {
            hashbrown::hash_table::Entry::Occupied(mut e) => e.get_mut().1 += 1,
            hashbrown::hash_table::Entry::Vacant(e) => {
                debug_assert!(len < capacity, "room for a new key was reserved");
                let mut k = key.keep_value();
                key.keep_finish(&mut k);
                e.insert((k, 1));
            }
        }
    }

    /// Charges one spent pin of `key` (hash `h`): true if it had one.  Its
    /// entry stays, at 0 maybe, until [`SpentPins::prune`], so that
    /// [`SpentPins::give_back`] never allocates.
    pub(super) fn charge(&mut self, key: &(impl KeyBytes + ?Sized), h: u64) -> bool {
        match self.table.find_mut(h, |(k, _)| same_key(k, key)) {
            Some((_, n)) if *n > 0 => {
                *n -= 1;
                true
            }
            _ => false,
        }
    }

    /// Undoes one [`SpentPins::charge`] of `key`.
    pub(super) fn give_back(&mut self, key: &(impl KeyBytes + ?Sized), h: u64) {
        if let Some((_, n)) = self.table.find_mut(h, |(k, _)| same_key(k, key)) {
            *n += 1;
        }
    }

    /// Drops `key`'s entry if no spent pin is left.
    pub(super) fn prune(&mut self, key: &(impl KeyBytes + ?Sized), h: u64) {
        if let Ok(e) = self.table.find_entry(h, |(k, _)| same_key(k, key)) {
            if e.get().1 == 0 {
                e.remove();
            }
        }
    }

    /// Every key with spent pins, and their number.
    pub(super) fn iter(&self) -> impl Iterator<Item = &(Key, u32)> {
        self.table.iter()
    }

    /// Forgets every spent pin (a reset dropped every pin).
    pub(super) fn clear(&mut self) {
        self.table.clear();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn get(s: &SpentPins, key: &Key) -> u32 {
        s.iter().find(|(k, _)| k == key).map_or(0, |&(_, n)| n)
    }

    #[test]
    fn spent_pins_are_counted_charged_given_back_and_pruned() {
        let hasher = RandomState::default();
        let (a, b) = (Key::new(b"a").unwrap(), Key::new(b"b").unwrap());
        let h = |k: &Key| key_hash(&hasher, k.as_bytes());
        let mut s = SpentPins::default();
        assert!(s.is_empty());
        s.reserve(&hasher, 2).unwrap();
        s.add(&hasher, &a, h(&a));
        s.add(&hasher, &a, h(&a));
        assert_eq!((get(&s, &a), get(&s, &b)), (2, 0));
        assert!(!s.charge(&b, h(&b)));
        assert!(s.charge(&a, h(&a)));
        assert!(s.charge(&a, h(&a)));
        assert!(!s.charge(&a, h(&a)), "no third");
        s.give_back(&a, h(&a));
        assert_eq!(get(&s, &a), 1);
        s.prune(&a, h(&a));
        assert!(!s.is_empty(), "a count left: kept");
        assert!(s.charge(&a, h(&a)));
        s.prune(&a, h(&a));
        assert!(s.is_empty());
        s.add(&hasher, &b, h(&b));
        assert_eq!(s.iter().count(), 1);
        s.clear();
        assert!(s.is_empty());
    }
}
