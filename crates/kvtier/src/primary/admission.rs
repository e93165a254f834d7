//! [0.33] Admission threshold: a bounded table of recent store offers.
//!
//! A key is stored only once it has been offered to `prepare_store`
//! `threshold` times.  Every key a call names is an offer, resident or not.
//! Offers are counted in a table of at most `bound` keys, kept in
//! least-recently-offered order, one call at a time, in two passes:
//!
//! 1. [`Admission::count_known`] for every key the call names: a key on
//!    record counts one more offer (per time the call names it), becomes
//!    the most recent and is marked as offered in this call;
//! 2. [`Admission::record_new`] for every key the call names: a key not on
//!    record enters at one offer (once, however often the call names it),
//!    most recent and marked; when the table is full, the entry offered
//!    longest ago is forgotten first, never one offered in this call, so a
//!    key offered again within the call is never pushed out by a new one.
//!    If every entry was offered in this call the key is not recorded (it
//!    has no offer on record, [`Admission::offers`] says 0), so a call naming
//!    more distinct keys than the table holds records the first ones and
//!    the rest wait for a later call.
//!
//! Then [`Admission::offers`] gives a candidate's count.

use super::slots::key_hash;
use foldhash::fast::RandomState;
use hashbrown::HashTable;

use super::lists::Lists;
use super::slots::same_key;
use crate::error::Result;
use crate::fallible;
use crate::key::{Key, KeyBytes};

const RECENT: usize = 0;

/// Offer counts of recently offered keys.
#[derive(Debug)]
pub(crate) struct Admission {
    keys: Vec<Key>,
    counts: Vec<u32>,
    marks: Vec<u32>,
    lists: Lists<1>,
    index: HashTable<u32>,
    hasher: RandomState,
    bound: usize,
}

impl Admission {
    /// A table of at most `bound` keys; `hasher` must be the tier's.
    /// Nothing is allocated until offers come.
    pub(crate) fn new(bound: usize, hasher: RandomState) -> Admission {
        Admission {
            keys: Vec::new(),
            counts: Vec::new(),
            marks: Vec::new(),
            lists: Lists::empty(),
            index: HashTable::new(),
            hasher,
            bound,
        }
    }

    /// Makes room, fallibly, for `offers` more keys on record (never beyond
    /// the bound), so that as many new entries ([`Admission::record_new`]) allocate
    /// nothing.
    pub(crate) fn reserve(&mut self, offers: usize) -> Result<()> {
        let room = offers.min(self.bound.saturating_sub(self.keys.len()));
        if room == 0 {
            return Ok(());
        }
        let what = "the admission table";
        fallible::reserve(&mut self.keys, room, what)?;
        fallible::reserve(&mut self.counts, room, what)?;
        fallible::reserve(&mut self.marks, room, what)?;
        self.lists.reserve_ids(self.keys.len() + room, self.bound)?;
        let (keys, hasher) = (&self.keys, &self.hasher);
        fallible::reserve_table(
            &mut self.index,
            room,
            |&x| key_hash(hasher, keys[x as usize].as_bytes()),
            what,
        )
    }

    /// Pass 1 of a call (`epoch`): if `key` (hash `h`) is on record, one
    /// more offer, most recent, marked; true if it was.
    pub(crate) fn count_known(
        &mut self,
        key: &(impl KeyBytes + ?Sized),
        h: u64,
        epoch: u32,
    ) -> bool {
        let keys = &self.keys;
        let Some(&e) = self.index.find(h, |&e| same_key(&keys[e as usize], key)) else {
            return false;
        };
        let i = e as usize;
        self.counts[i] = self.counts[i].saturating_add(1);
        self.marks[i] = epoch;
        self.lists.move_to_back(RECENT, e);
        true
    }

    /// Pass 2 of a call (`epoch`): if `key` (hash `h`) is not on record, it
    /// enters at one offer, forgetting the entry offered longest ago if the
    /// table is full, unless that entry was offered in this call (then the
    /// key is not recorded).
    pub(crate) fn record_new(&mut self, key: &(impl KeyBytes + ?Sized), h: u64, epoch: u32) {
        let keys = &self.keys;
        if self.bound == 0
            || self
                .index
                .find(h, |&e| same_key(&keys[e as usize], key))
                .is_some()
        {
            return;
        }
        let e = if self.keys.len() < self.bound {
            let e = self.keys.len() as u32;
            self.keys.push(key.keep_value());
            self.counts.push(0);
            self.marks.push(0);
            self.lists.grow_to(self.keys.len(), self.bound);
            e
        } else {
            let old = self.lists.front(RECENT);
            if self.marks[old as usize] == epoch {
                return;
            }
            let oh = key_hash(&self.hasher, self.keys[old as usize].as_bytes());
            if let Ok(entry) = self.index.find_entry(oh, |&x| x == old) {
                entry.remove();
            }
            self.lists.unlink(old);
            self.keys[old as usize] = key.keep_value();
            old
        };
        let i = e as usize;
        key.keep_finish(&mut self.keys[i]);
        self.counts[i] = 1;
        self.marks[i] = epoch;
        self.lists.push_back(RECENT, e);
        let (keys, hasher) = (&self.keys, &self.hasher);
        self.index
            .insert_unique(h, e, |&x| key_hash(hasher, keys[x as usize].as_bytes()));
    }

    /// The offers on record for `key` (hash `h`): 0 if it is not on record.
    pub(crate) fn offers(&self, key: &(impl KeyBytes + ?Sized), h: u64) -> u32 {
        let keys = &self.keys;
        self.index
            .find(h, |&e| same_key(&keys[e as usize], key))
            .map_or(0, |&e| self.counts[e as usize])
    }

    /// Number of keys on record.
    pub(crate) fn len(&self) -> usize {
        self.lists.len(RECENT)
    }

    /// Clears every mark (the tier's call stamp wrapped around).
    pub(crate) fn clear_marks(&mut self) {
        self.marks.fill(0);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(i: u32) -> Key {
        Key::new(&i.to_be_bytes()).unwrap()
    }

    /// A call offering key `i` alone (call stamp `epoch`): the offers now
    /// on record, 1 if the key could not be recorded.
    fn offer(a: &mut Admission, i: u32, epoch: u32) -> u32 {
        let k = key(i);
        let h = key_hash(&a.hasher, k.as_bytes());
        if !a.count_known(&k, h, epoch) {
            a.record_new(&k, h, epoch);
        }
        a.offers(&k, h).max(1)
    }

    #[test]
    fn a_full_table_keeps_entries_of_the_current_call_and_forgets_older_ones() {
        let mut a = Admission::new(2, RandomState::default());
        assert_eq!(offer(&mut a, 1, 5), 1);
        assert_eq!(offer(&mut a, 2, 5), 1);
        // Full, and both entries are of call 5: a third key is not recorded.
        assert_eq!(offer(&mut a, 3, 5), 1);
        assert_eq!(offer(&mut a, 3, 5), 1, "3 was recorded");
        assert_eq!(a.len(), 2);
        // In a later call the oldest entry (1) is forgotten for 3.
        assert_eq!(offer(&mut a, 3, 6), 1);
        assert_eq!(offer(&mut a, 3, 7), 2);
        assert_eq!(offer(&mut a, 2, 7), 2);
        assert_eq!(offer(&mut a, 1, 8), 1, "1 was forgotten");
        assert_eq!(a.len(), 2);
    }

    /// After the call stamp wraps around, stamps of calls long past may
    /// equal new ones: cleared marks keep such an old entry from being
    /// taken for one of the current call.
    #[test]
    fn cleared_marks_let_a_call_after_the_wrap_forget_entries_of_any_earlier_call() {
        let mut a = Admission::new(1, RandomState::default());
        assert_eq!(offer(&mut a, 1, 3), 1);
        // The stamp wraps around and comes back to 3 (marks cleared at 1).
        a.clear_marks();
        assert_eq!(offer(&mut a, 2, 3), 1);
        // 2 took 1's place: offered again, it counts twice, and 1 is new.
        assert_eq!(offer(&mut a, 2, 4), 2);
        assert_eq!(offer(&mut a, 1, 5), 1);
        assert_eq!(a.len(), 1);
    }

    /// Forgetting a key removes its index entry too: the table's memory
    /// stays bounded however many keys pass through it.
    #[test]
    fn the_index_holds_one_entry_per_recorded_key_after_many_replacements() {
        let mut a = Admission::new(4, RandomState::default());
        for i in 0..200 {
            assert_eq!(offer(&mut a, i, i + 1), 1);
        }
        assert_eq!(a.len(), 4);
        assert_eq!(a.index.len(), 4);
        // The last four are on record; an early key is new again.
        for i in 196..200 {
            assert_eq!(offer(&mut a, i, 500), 2, "key {i}");
        }
        assert_eq!(offer(&mut a, 3, 501), 1);
    }

    #[test]
    fn a_table_of_no_entries_counts_every_offer_as_the_first() {
        let mut a = Admission::new(0, RandomState::default());
        assert_eq!(offer(&mut a, 1, 1), 1);
        assert_eq!(offer(&mut a, 1, 2), 1);
        assert_eq!(a.len(), 0);
    }
}
