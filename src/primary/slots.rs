//! The slot table: per-slot key, reference count, call mark and flags, the
//! key index, and slot allocation.
//!
//! Every array is indexed by slot id.  The index is a `HashTable<u32>` of
//! slot ids hashed (foldhash) over the key bytes kept in `keys`, so each key
//! is stored once.

use foldhash::fast::RandomState;
use hashbrown::HashTable;
use std::hash::BuildHasher;

use super::lists::NIL;
use crate::key::Key;

/// Flag: the slot holds a resident key (write pending or ready).
pub(crate) const RESIDENT: u8 = 1;
/// Flag: a "stored" event for the slot's key was queued, so its removal is announced too.
pub(crate) const ANNOUNCED: u8 = 2;

/// Flag: the key is named in the current `prepare_store` call (not evictable by it).
pub(crate) const NAMED: u8 = 4;

/// Reference count of a write-pending key.
pub(crate) const WRITE_PENDING: i32 = -1;

/// Per-slot state and the key index.  Policies read it; the tier changes it.
#[derive(Debug)]
pub(crate) struct Slots {
    /// Key of each slot ever allocated (grows as fresh slots are handed out).
    pub(crate) keys: Vec<Key>,
    /// Resident slot: -1 write pending, 0 ready and idle, n > 0 ready and
    /// pinned n times.  Freed slot: the next slot of the free stack (as
    /// `u32`, [`NIL`] at the bottom), so the stack costs no extra memory.
    pub(crate) refs: Vec<i32>,
    /// [`RESIDENT`] | [`ANNOUNCED`] | [`NAMED`].
    pub(crate) flags: Vec<u8>,
    /// Slot ids of resident keys, hashed over their key bytes.
    pub(crate) index: HashTable<u32>,
    /// The hasher of the index (and of ARC's ghost index).
    pub(crate) hasher: RandomState,
    /// Top of the stack of freed slots (most recently freed), linked through `refs`.
    pub(crate) free_top: u32,
    /// Number of slots on the free stack.
    pub(crate) free_len: u32,
    /// Slots `fresh..capacity` were never handed out since creation or reset.
    pub(crate) fresh: u32,
    /// Number of slots.
    pub(crate) capacity: u32,
    /// Stamp of the current `prepare_store` call (for the admission table).
    pub(crate) epoch: u32,
}

impl Slots {
    /// A table of `capacity` free slots.
    pub(crate) fn new(capacity: u32) -> Slots {
        let n = capacity as usize;
        Slots {
            keys: Vec::with_capacity(n),
            refs: vec![0; n],
            flags: vec![0; n],
            index: HashTable::with_capacity(n),
            hasher: RandomState::default(),
            free_top: NIL,
            free_len: 0,
            fresh: 0,
            capacity,
            epoch: 0,
        }
    }

    /// The hash of `key` in the index.
    #[inline]
    pub(crate) fn hash(&self, key: &Key) -> u64 {
        self.hasher.hash_one(key.as_bytes())
    }

    /// The slot holding `key` (hash `h`), if resident.
    #[inline]
    pub(crate) fn find(&self, key: &Key, h: u64) -> Option<u32> {
        let keys = &self.keys;
        self.index.find(h, |&s| keys[s as usize] == *key).copied()
    }

    /// Whether `slot` is ready and unpinned (an eviction candidate when unmarked).
    #[inline]
    pub(crate) fn is_idle(&self, slot: u32) -> bool {
        self.refs[slot as usize] == 0
    }

    /// Whether `slot`'s key was named in the current call.
    #[inline]
    pub(crate) fn is_marked(&self, slot: u32) -> bool {
        self.flags[slot as usize] & NAMED != 0
    }

    /// Starts a new call stamp (never 0: wraps around to 1).
    pub(crate) fn next_epoch(&mut self) {
        self.epoch = self.epoch.wrapping_add(1);
        if self.epoch == 0 {
            self.epoch = 1;
        }
    }

    /// Number of free slots (never used, or freed).
    #[inline]
    pub(crate) fn free_count(&self) -> usize {
        (self.capacity - self.fresh) as usize + self.free_len as usize
    }

    /// Takes a free slot: fresh ones from 0 upward first, then the most recently freed.
    #[inline]
    pub(crate) fn allocate(&mut self) -> Option<u32> {
        if self.fresh < self.capacity {
            let s = self.fresh;
            self.fresh += 1;
            Some(s)
        } else if self.free_top != NIL {
            let s = self.free_top;
            self.free_top = self.refs[s as usize] as u32;
            self.free_len -= 1;
            Some(s)
        } else {
            None
        }
    }

    /// Makes `slot` resident with `key` (hash `h`), write pending.
    #[inline]
    pub(crate) fn occupy(&mut self, slot: u32, key: Key, h: u64) {
        let i = slot as usize;
        if i == self.keys.len() {
            self.keys.push(key);
        } else {
            self.keys[i] = key;
        }
        self.refs[i] = WRITE_PENDING;
        self.flags[i] = RESIDENT;
        let (keys, hasher) = (&self.keys, &self.hasher);
        self.index
            .insert_unique(h, slot, |&s| hasher.hash_one(keys[s as usize].as_bytes()));
    }

    /// Removes `slot`'s key (hash `h`) from the index and frees the slot.
    #[inline]
    pub(crate) fn release(&mut self, slot: u32, h: u64) {
        if let Ok(entry) = self.index.find_entry(h, |&s| s == slot) {
            entry.remove();
        }
        let i = slot as usize;
        self.refs[i] = self.free_top as i32;
        self.flags[i] = 0;
        self.free_top = slot;
        self.free_len += 1;
    }

    /// The freed slots, most recently freed first; O(n), for checks.
    pub(crate) fn free_slots(&self) -> Vec<u32> {
        let mut out = Vec::with_capacity(self.free_len as usize);
        let mut s = self.free_top;
        while s != NIL && out.len() <= self.capacity as usize {
            out.push(s);
            s = self.refs[s as usize] as u32;
        }
        out
    }

    /// Forgets every key and frees every slot; allocation restarts at 0.
    pub(crate) fn clear(&mut self) {
        let used = self.fresh as usize;
        self.refs[..used].fill(0);
        self.flags[..used].fill(0);
        self.index.clear();
        self.free_top = NIL;
        self.free_len = 0;
        self.fresh = 0;
    }

    /// Bytes of per-slot metadata (everything but the key bytes).
    pub(crate) fn metadata_bytes(&self) -> usize {
        self.refs.capacity() * 4 + self.flags.capacity() + self.index.allocation_size()
    }
}
