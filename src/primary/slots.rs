//! The slot table: per-slot key, reference count, call mark and flags, the
//! key index, and slot allocation.
//!
//! Every array is indexed by slot id.  The index is a [`TagIndex`] of slot
//! ids (each with a tag of its key's hash) hashed (foldhash) over the key
//! bytes kept in `keys`, so each key is stored once.  Per slot, besides the
//! key: ref count 4 bytes, flags 1, index 8 (narrow entries, at most half
//! full; 16 with wide ones, beyond 2^26 slots): 13 bytes.

use foldhash::fast::RandomState;
use std::hash::BuildHasher;

use super::huge;
use super::index::{TagIndex, prefetch_addr, prefetch_read};
use super::lists::NIL;
use crate::key::Key;

/// Flag: the slot holds a resident key (write pending or ready).
pub(crate) const RESIDENT: u8 = 1;
/// Flag: a "stored" event for the slot's key was queued, so its removal is announced too.
pub(crate) const ANNOUNCED: u8 = 2;

/// Flag: the key is named in the current `prepare_store` call (not evictable by it).
pub(crate) const NAMED: u8 = 4;

/// Flag: the policy took the (busy) key out of its eviction candidates when
/// an eviction passed over it; it must be restored when the key turns idle.
pub(crate) const PARKED: u8 = 8;

/// Tables of fewer slots stay in the CPU caches: no prefetching.
const PREFETCH_MIN_SLOTS: u32 = 1 << 16;


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
    /// [`RESIDENT`] | [`ANNOUNCED`] | [`NAMED`] | [`PARKED`].
    pub(crate) flags: Vec<u8>,
    /// Slot ids of resident keys, hashed over their key bytes.
    pub(crate) index: TagIndex,
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
    /// Whether batches request their reads ahead (the table outgrows the
    /// caches); tests turn it on for small tables.
    pub(crate) prefetch: bool,
}

impl Slots {
    /// A table of `capacity` free slots.
    pub(crate) fn new(capacity: u32) -> Slots {
        let n = capacity as usize;
        let keys: Vec<Key> = huge::with_capacity(n);
        let refs = huge::zeroed(n);
        let flags = huge::zeroed(n);
        Slots {
            keys,
            refs,
            flags,
            index: TagIndex::new(n),
            hasher: RandomState::default(),
            free_top: NIL,
            free_len: 0,
            fresh: 0,
            capacity,
            epoch: 0,
            prefetch: capacity >= PREFETCH_MIN_SLOTS,
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
        self.index.find(h, |s| same_key(&keys[s as usize], key))
    }

    /// Requests the bytes a comparison of stored key `k` with a key of
    /// `len` bytes reads: its length byte through its `len`-th byte (one
    /// or two cache lines).
    #[inline(always)]
    pub(crate) fn prefetch_key(&self, k: &Key, len: usize) {
        let first = k as *const Key as *const u8;
        prefetch_addr(first);
        // The last byte compared lies inside the key: `len` is at most 64.
        prefetch_addr(first.wrapping_add(len));
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
        self.index.insert(h, slot);
    }

    /// Removes `slot`'s key (hash `h`) from the index and frees the slot.
    #[inline]
    pub(crate) fn release(&mut self, slot: u32, h: u64) {
        let (keys, hasher) = (&self.keys, &self.hasher);
        self.index
            .remove(h, slot, |s| hasher.hash_one(keys[s as usize].as_bytes()));
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
        self.refs.capacity() * 4 + self.flags.capacity() + self.index.bytes()
    }
}

/// Whether `a` and `b` are the same key: lengths, then 8-byte words (the
/// last one overlapping), without a call into `memcmp`.
#[inline(always)]
pub(crate) fn same_key(a: &Key, b: &Key) -> bool {
    let (a, b) = (a.as_bytes(), b.as_bytes());
    let n = a.len();
    if n != b.len() {
        return false;
    }
    if n < 8 {
        return a == b;
    }
    let word = |s: &[u8], i: usize| u64::from_ne_bytes(s[i..i + 8].try_into().unwrap_or([0; 8]));
    let mut i = 0;
    while i + 8 < n {
        if word(a, i) != word(b, i) {
            return false;
        }
        i += 8;
    }
    word(a, n - 8) == word(b, n - 8)
}

/// How many keys ahead a [`Lookahead`] requests a key's index line; the
/// stored key and ref count of its likely slot are requested half as far
/// ahead.  About a memory latency's worth of per-key work at each stage.
const AHEAD: usize = 16;

/// Resolves a batch's keys in order while the memory reads of later keys
/// are under way: when key `i` is resolved, the index line of key
/// `i + AHEAD` and the likely slot of key `i + AHEAD / 2` have been
/// requested, so on large tables the misses of a long batch overlap each
/// other and the work on earlier keys.  What is read ahead is only a hint:
/// each key is resolved against the table as it is when its turn comes,
/// so callers may change the table between keys.
///
/// Keys are named by position: `key(j)` is the batch's `j`-th key, for
/// `j < len` (a slice, a reversed slice, a field of records).
pub(crate) struct Lookahead {
    /// Hashes of the keys in `i..i + AHEAD`, each at `position % AHEAD`.
    hashes: [u64; AHEAD],
    len: usize,
    prefetching: bool,
}

impl Lookahead {
    /// Starts resolving the `len` keys `key(0..len)`: hashes the first
    /// ones and requests their reads.
    #[inline]
    pub(crate) fn new<'k>(slots: &Slots, len: usize, key: impl Fn(usize) -> &'k Key) -> Lookahead {
        let mut ahead = Lookahead {
            hashes: [0; AHEAD],
            len,
            prefetching: slots.prefetch,
        };
        if ahead.prefetching {
            for j in 0..len.min(AHEAD) {
                let h = slots.hash(key(j));
                ahead.hashes[j] = h;
                slots.index.prefetch(h);
            }
            for j in 0..len.min(AHEAD / 2) {
                ahead.request_slot(slots, j, key(j));
            }
        }
        ahead
    }

    /// Requests the stored key and ref count of the slot that key `j`'s
    /// index line names (the line was requested earlier).
    #[inline(always)]
    fn request_slot(&self, slots: &Slots, j: usize, key: &Key) {
        if let Some(s) = slots.index.peek(self.hashes[j % AHEAD]) {
            if let (Some(k), Some(r)) = (slots.keys.get(s as usize), slots.refs.get(s as usize)) {
                slots.prefetch_key(k, key.len());
                prefetch_read(r);
            }
        }
    }

    /// The hash and slot ([`NIL`] if absent) of key `i`.  Calls go
    /// `i = 0, 1, 2, ...` with the `key` of [`Lookahead::new`] (stopping
    /// early is fine).
    #[inline(always)]
    pub(crate) fn find<'k>(
        &mut self,
        slots: &Slots,
        i: usize,
        key: impl Fn(usize) -> &'k Key,
    ) -> (u64, u32) {
        let h = if self.prefetching {
            let h = self.hashes[i % AHEAD];
            if i + AHEAD < self.len {
                let next = slots.hash(key(i + AHEAD));
                self.hashes[i % AHEAD] = next;
                slots.index.prefetch(next);
            }
            if i + AHEAD / 2 < self.len {
                self.request_slot(slots, i + AHEAD / 2, key(i + AHEAD / 2));
            }
            h
        } else {
            slots.hash(key(i))
        };
        (h, slots.find(key(i), h).unwrap_or(NIL))
    }
}
