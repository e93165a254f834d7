//! [0.33] Admission threshold: a bounded table of recent store offers.
//!
//! A key is stored only once it has been offered to `prepare_store`
//! `threshold` times.  Offers are counted in a table of at most `bound`
//! keys, kept in least-recently-offered order: when it is full, the entry
//! offered longest ago is forgotten, never one offered in the current call
//! (if every entry was offered in this call, the new offer is not recorded
//! and counts as a first offer).

use foldhash::fast::RandomState;
use hashbrown::HashTable;
use std::hash::BuildHasher;

use super::lists::Lists;
use crate::key::Key;

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
    pub(crate) fn new(bound: usize, hasher: RandomState) -> Admission {
        Admission {
            keys: Vec::new(),
            counts: Vec::new(),
            marks: Vec::new(),
            lists: Lists::new(0),
            index: HashTable::new(),
            hasher,
            bound,
        }
    }

    /// Counts one offer of `key` (hash `h`) in call `epoch`; returns the
    /// number of offers now on record (1 if it could not be recorded).
    pub(crate) fn offer(&mut self, key: &Key, h: u64, epoch: u32) -> u32 {
        let keys = &self.keys;
        if let Some(&e) = self.index.find(h, |&e| keys[e as usize] == *key) {
            let i = e as usize;
            self.counts[i] = self.counts[i].saturating_add(1);
            self.marks[i] = epoch;
            self.lists.move_to_back(RECENT, e);
            return self.counts[i];
        }
        if self.bound == 0 {
            return 1;
        }
        let e = if self.keys.len() < self.bound {
            let e = self.keys.len() as u32;
            self.keys.push(*key);
            self.counts.push(0);
            self.marks.push(0);
            self.lists.grow_to(self.keys.len(), self.bound);
            e
        } else {
            let old = self.lists.front(RECENT);
            if self.marks[old as usize] == epoch {
                return 1;
            }
            let oh = self.hasher.hash_one(self.keys[old as usize].as_bytes());
            if let Ok(entry) = self.index.find_entry(oh, |&x| x == old) {
                entry.remove();
            }
            self.lists.unlink(old);
            self.keys[old as usize] = *key;
            old
        };
        let i = e as usize;
        self.counts[i] = 1;
        self.marks[i] = epoch;
        self.lists.push_back(RECENT, e);
        let (keys, hasher) = (&self.keys, &self.hasher);
        self.index
            .insert_unique(h, e, |&x| hasher.hash_one(keys[x as usize].as_bytes()));
        1
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

    fn offer(a: &mut Admission, i: u32, epoch: u32) -> u32 {
        let k = key(i);
        let h = a.hasher.hash_one(k.as_bytes());
        a.offer(&k, h, epoch)
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
