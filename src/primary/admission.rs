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
use crate::error::Result;
use crate::fallible;
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
    /// the bound), so that as many calls of [`Admission::offer`] allocate
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
            |&x| hasher.hash_one(keys[x as usize].as_bytes()),
            what,
        )
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
