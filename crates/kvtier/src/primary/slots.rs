//! The slot table: per-slot key, reference count, call mark and flags, the
//! key index, and slot allocation.
//!
//! Each slot has one [`Record`]: ref count, flags and key together, so
//! finding a key and reading its state usually costs one cache line.  The
//! index is a [`TagIndex`] of slot ids (each with a tag of its key's hash)
//! hashed (foldhash) over the key bytes kept in the records, so each key
//! is stored once.  Per slot, besides the key: ref count 4 bytes (which,
//! while the key is write pending, also names who writes it), flags 1,
//! index 8 (narrow entries, at most half full; 16 with wide ones, beyond
//! 2^26 slots): 13 bytes.

use foldhash::fast::RandomState;
use std::hash::{BuildHasher, Hasher};

use super::huge;
use super::index::{READ_AHEAD, TagIndex};
use super::lists::NIL;
use super::prefetch::{prefetch_addr, reads_ahead};
use crate::error::Result;
use crate::key::{Key, KeyBytes};

/// Flag: the slot holds a resident key (write pending or ready).
pub(crate) const RESIDENT: u8 = 1;
/// Flag: a "stored" event for the slot's key was queued, so its removal is announced too.
pub(crate) const ANNOUNCED: u8 = 2;

/// Flag: the key is named in the current `prepare_store` call (not evictable by it).
pub(crate) const NAMED: u8 = 4;

/// Flag: the policy took the (busy) key out of its eviction candidates when
/// an eviction passed over it; it must be restored when the key turns idle.
pub(crate) const PARKED: u8 = 8;

/// Flag: a pin set holds the (ready) key resident (`held.rs`): busy for
/// eviction whatever its ref count, which loads' unpins never touch.
pub(crate) const HELD: u8 = 16;

/// Where a record's key starts.
const KEY_OFFSET: usize = std::mem::offset_of!(Record, key);

/// The reference count a write-pending key reports outside the tier (its
/// ref count proper is negative and names its writer: -1 - writer id).
pub(crate) const WRITE_PENDING: i32 = -1;

/// The ref count of a slot write pending for writer `id` (`writers.rs`):
/// -1 for promotions (id 0), -2, -3, ... for requests.
#[inline(always)]
pub(crate) fn pending_for(id: u32) -> i32 {
    -1 - id as i32
}

/// The writer id of a write-pending (negative) ref count.
#[inline(always)]
pub(crate) fn writer_id(refs: i32) -> u32 {
    (-1 - refs) as u32
}

/// One slot: its ref count, flags and key, packed (70 bytes, no padding).
///
/// The ref count of a resident slot: negative write pending (-1 - the
/// writer's id, see [`pending_for`]), 0 ready and idle, n > 0 ready and
/// pinned n times.  Of a freed slot: the next slot of the
/// free stack (as `u32`, [`NIL`] at the bottom), so the stack costs no
/// extra memory.
#[derive(Clone, Copy, Debug)]
#[repr(C)]
pub(crate) struct Record {
    /// The ref count, native byte order (unaligned, so records pack).
    refs: [u8; 4],
    /// [`RESIDENT`] | [`ANNOUNCED`] | [`NAMED`] | [`PARKED`] | [`HELD`].
    pub(crate) flags: u8,
    /// The slot's key (meaningful while resident).
    pub(crate) key: Key,
}

impl Record {
    /// A fresh slot's record, before it is first occupied.
    const FREE: Record = Record {
        refs: [0; 4],
        flags: 0,
        key: Key::FILLER,
    };

    /// The ref count.
    #[inline(always)]
    pub(crate) fn refs(&self) -> i32 {
        i32::from_ne_bytes(self.refs)
    }

    /// Sets the ref count.
    #[inline(always)]
    pub(crate) fn set_refs(&mut self, r: i32) {
        self.refs = r.to_ne_bytes();
    }
}

/// Per-slot state and the key index.  Policies read it; the tier changes it.
#[derive(Debug)]
pub(crate) struct Slots {
    /// Record of each slot ever allocated (grows as fresh slots are handed out).
    pub(crate) records: Vec<Record>,
    /// Slot ids of resident keys, hashed over their key bytes.
    pub(crate) index: TagIndex,
    /// The hasher of the index (and of ARC's ghost index).
    pub(crate) hasher: RandomState,
    /// Top of the stack of freed slots (most recently freed), linked through ref counts.
    pub(crate) free_top: u32,
    /// Number of slots on the free stack.
    pub(crate) free_len: u32,
    /// Slots `fresh..capacity` were never handed out since creation or reset.
    pub(crate) fresh: u32,
    /// Number of slots.
    pub(crate) capacity: u32,
    /// Stamp of the current `prepare_store` call (for the admission table).
    pub(crate) epoch: u32,
    /// Changes whenever a key comes or goes (wrapping), so what was read
    /// of the index can be known to be still current.
    pub(crate) version: u32,
    /// Whether batch loops read ahead (a table beyond the CPU caches:
    /// [`reads_ahead`]); otherwise they resolve each key in turn.
    pub(crate) read_ahead: bool,
}

impl Slots {
    /// A table of `capacity` free slots; an out-of-memory error if its
    /// records or index cannot be had.
    pub(crate) fn new(capacity: u32) -> Result<Slots> {
        let n = capacity as usize;
        Ok(Slots {
            records: huge::with_capacity(n, "slot records")?,
            index: TagIndex::new(n)?,
            hasher: RandomState::default(),
            free_top: NIL,
            free_len: 0,
            fresh: 0,
            capacity,
            epoch: 0,
            version: 0,
            read_ahead: reads_ahead(capacity),
        })
    }

    /// The key of allocated `slot`.
    #[inline(always)]
    pub(crate) fn key(&self, slot: u32) -> &Key {
        &self.records[slot as usize].key
    }

    /// The ref count of allocated `slot`.
    #[inline(always)]
    pub(crate) fn refs(&self, slot: u32) -> i32 {
        self.records[slot as usize].refs()
    }

    /// Sets the ref count of allocated `slot`.
    #[inline(always)]
    pub(crate) fn set_refs(&mut self, slot: u32, r: i32) {
        self.records[slot as usize].set_refs(r);
    }

    /// The flags of allocated `slot`.
    #[inline(always)]
    pub(crate) fn flags(&self, slot: u32) -> u8 {
        self.records[slot as usize].flags
    }

    /// The flags of allocated `slot`, to change.
    #[inline(always)]
    pub(crate) fn flags_mut(&mut self, slot: u32) -> &mut u8 {
        &mut self.records[slot as usize].flags
    }

    /// The hash of `key` in the index.
    #[inline]
    pub(crate) fn hash(&self, key: &(impl KeyBytes + ?Sized)) -> u64 {
        key_hash(&self.hasher, key.key_bytes())
    }

    /// The slot holding `key` (hash `h`), if resident.
    #[inline]
    pub(crate) fn find(&self, key: &(impl KeyBytes + ?Sized), h: u64) -> Option<u32> {
        let records = &self.records;
        self.index
            .find(h, |s| same_key(&records[s as usize].key, key))
    }

    /// Resolves keys `key(0..n)` in order, reading ahead: hands
    /// `put(j, slot, hash)` key `j`'s slot ([`NIL`] if absent) and hash.
    /// For calls that change no key's residence while resolving (lookups,
    /// pins and unpins resolve first, then act); calls that do use
    /// [`Lookahead`].
    #[inline]
    pub(crate) fn resolve_each<'k, K: KeyBytes + ?Sized + 'k>(
        &self,
        n: usize,
        key: impl Fn(usize) -> &'k K,
        mut put: impl FnMut(usize, u32, u64),
    ) {
        if !self.read_ahead {
            for j in 0..n {
                let k = key(j);
                let h = self.hash(k);
                put(j, self.find(k, h).unwrap_or(NIL), h);
            }
            return;
        }
        self.index.find_each(
            n,
            |j| self.hash(key(j)),
            |j, s| self.prefetch_slot(s, key(j).key_bytes().len()),
            |j, s| self.holds(s, key(j)),
            put,
        );
    }

    /// Resolves keys `key(0..n)` in order, each first at slot `likely[j]`
    /// (`likely` at least `n` long): hands `put(j, slot)` key `j`'s slot
    /// ([`NIL`] if absent), looking for a key in the index only when its
    /// likely slot does not hold it.  Requests the likely slots' records
    /// some keys ahead.  For calls that change no key's residence while
    /// resolving.
    #[inline]
    pub(crate) fn resolve_at<'k, K: KeyBytes + ?Sized + 'k>(
        &self,
        n: usize,
        key: impl Fn(usize) -> &'k K,
        likely: &[u32],
        mut put: impl FnMut(usize, u32),
    ) {
        const AHEAD: usize = 8;
        let likely = &likely[..n];
        let ahead = if self.read_ahead { AHEAD } else { 0 };
        for (j, &s) in likely.iter().enumerate().take(ahead) {
            self.prefetch_slot(s, key(j).key_bytes().len());
        }
        for (j, &s) in likely.iter().enumerate() {
            if ahead != 0 {
                if let Some(&t) = likely.get(j + AHEAD) {
                    self.prefetch_slot(t, key(j + AHEAD).key_bytes().len());
                }
            }
            let k = key(j);
            if self.holds(s, k) {
                put(j, s);
            } else {
                put(j, self.find(k, self.hash(k)).unwrap_or(NIL));
            }
        }
    }

    /// Whether resident `slot` holds `key` ([`NIL`] or a freed slot: false).
    #[inline(always)]
    pub(crate) fn holds(&self, slot: u32, key: &(impl KeyBytes + ?Sized)) -> bool {
        self.records
            .get(slot as usize)
            .is_some_and(|r| r.flags & RESIDENT != 0 && same_key(&r.key, key))
    }

    /// Requests what [`Slots::holds`] of `slot` and a key of `len` bytes
    /// reads (a hint; nothing for [`NIL`]).
    #[inline(always)]
    pub(crate) fn prefetch_slot(&self, slot: u32, len: usize) {
        if let Some(r) = self.records.get(slot as usize) {
            self.prefetch_record(r, len);
        }
    }

    /// Requests what resolving a key of `len` bytes to record `r` reads:
    /// the ref count and flags, and the stored key's length byte through
    /// its `len`-th byte (one or two cache lines).
    #[inline(always)]
    pub(crate) fn prefetch_record(&self, r: &Record, len: usize) {
        let first = r as *const Record as *const u8;
        prefetch_addr(first);
        // The last byte compared lies inside the record: `len` is at most 64.
        prefetch_addr(first.wrapping_add(KEY_OFFSET + len));
    }

    /// Whether `slot` is ready, unpinned and not held by a pin set (an
    /// eviction candidate when unmarked).
    #[inline]
    pub(crate) fn is_idle(&self, slot: u32) -> bool {
        self.refs(slot) == 0 && self.flags(slot) & HELD == 0
    }

    /// Whether `slot`'s key was named in the current call.
    #[inline]
    pub(crate) fn is_marked(&self, slot: u32) -> bool {
        self.flags(slot) & NAMED != 0
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
            self.free_top = self.refs(s) as u32;
            self.free_len -= 1;
            Some(s)
        } else {
            None
        }
    }

    /// Makes `slot` resident with `key` (hash `h`), write pending for
    /// writer `writer` (its id, see [`pending_for`]).
    #[inline]
    pub(crate) fn occupy(&mut self, slot: u32, key: &Key, h: u64, writer: u32) {
        let i = slot as usize;
        if i == self.records.len() {
            self.records.push(Record::FREE);
        }
        // Field by field, in place: a whole record built elsewhere and
        // copied in would be read back from the store buffer at offsets it
        // was not written at, which stalls.
        let record = &mut self.records[i];
        record.key = *key;
        record.set_refs(pending_for(writer));
        record.flags = RESIDENT;
        self.index.insert(h, slot);
        self.version = self.version.wrapping_add(1);
    }

    /// Removes `slot`'s key (hash `h`) from the index and frees the slot.
    #[inline]
    pub(crate) fn release(&mut self, slot: u32, h: u64) {
        let (records, hasher) = (&self.records, &self.hasher);
        self.index.remove(h, slot, |s| {
            key_hash(hasher, records[s as usize].key.as_bytes())
        });
        let record = &mut self.records[slot as usize];
        record.set_refs(self.free_top as i32);
        record.flags = 0;
        self.version = self.version.wrapping_add(1);
        self.free_top = slot;
        self.free_len += 1;
    }

    /// The freed slots, most recently freed first; O(n), for checks.
    pub(crate) fn free_slots(&self) -> Vec<u32> {
        let mut out = Vec::with_capacity(self.free_len as usize);
        let mut s = self.free_top;
        while s != NIL && out.len() <= self.capacity as usize {
            out.push(s);
            s = self.refs(s) as u32;
        }
        out
    }

    /// Forgets every key and frees every slot; allocation restarts at 0.
    pub(crate) fn clear(&mut self) {
        self.records.clear();
        self.index.clear();
        self.version = self.version.wrapping_add(1);
        self.free_top = NIL;
        self.free_len = 0;
        self.fresh = 0;
    }

    /// Bytes of per-slot metadata (everything but the key bytes).
    pub(crate) fn metadata_bytes(&self) -> usize {
        let key = std::mem::size_of::<Key>();
        self.records.capacity() * (std::mem::size_of::<Record>() - key) + self.index.bytes()
    }
}

/// The hash of a key's `bytes` under `hasher`, as every table over keys
/// (the index, ARC's ghosts, the admission table, a request's record and
/// positions) hashes them: the bytes alone, which foldhash mixes with
/// their length (one multiply up to 16 bytes), not the length prefix and
/// the extra multiply that hashing a slice as a value adds.
#[inline(always)]
pub(crate) fn key_hash(hasher: &RandomState, bytes: &[u8]) -> u64 {
    let mut h = hasher.build_hasher();
    h.write(bytes);
    h.finish()
}

/// Whether `a` and `b` are the same key (see [`crate::key::same_bytes`]).
#[inline(always)]
pub(crate) fn same_key(a: &Key, b: &(impl KeyBytes + ?Sized)) -> bool {
    crate::key::same_bytes(a.as_bytes(), b.key_bytes())
}

/// Resolves a batch's keys in order while the memory reads of later keys
/// are under way: when key `i` is resolved, the index line of key
/// `i + READ_AHEAD` and the record of key `i + READ_AHEAD / 2`'s likely slot have
/// been requested, so on large tables the misses of a long batch overlap
/// each other and the work on earlier keys (and in the caches, the keys'
/// work overlaps).  What was read ahead is checked, never trusted: a key
/// is resolved against the table as it is when its turn comes, so callers
/// may change the table between keys.
///
/// Keys are named by position: `key(j)` is the batch's `j`-th key, for
/// `j < len` (a slice, a reversed slice, a field of records).
pub(crate) struct Lookahead {
    /// Hashes of the keys in `i..i + READ_AHEAD`, each at `position % READ_AHEAD`.
    hashes: [u64; READ_AHEAD],
    /// The likely slot of each key in `i..i + READ_AHEAD / 2` (the first whose
    /// tag matched, or [`NIL`]), at the same positions.
    likely: [u32; READ_AHEAD],
    /// The table's [`Slots::version`] when each likely slot was read.
    seen: [u32; READ_AHEAD],
    len: usize,
}

impl Lookahead {
    /// Starts resolving the `len` keys `key(0..len)`: hashes the first
    /// ones and requests their reads.
    #[inline]
    pub(crate) fn new<'k, K: KeyBytes + ?Sized + 'k>(
        slots: &Slots,
        len: usize,
        key: impl Fn(usize) -> &'k K,
    ) -> Lookahead {
        let mut ahead = Lookahead {
            hashes: [0; READ_AHEAD],
            likely: [NIL; READ_AHEAD],
            seen: [0; READ_AHEAD],
            len,
        };
        if !slots.read_ahead {
            return ahead;
        }
        for j in 0..len.min(READ_AHEAD) {
            let h = slots.hash(key(j));
            ahead.hashes[j] = h;
            slots.index.prefetch(h);
        }
        // The first keys' records are requested all at once: one wait for
        // their index lines, then one for the records.
        for j in 0..len.min(READ_AHEAD) {
            ahead.request_slot(slots, j, key(j));
        }
        ahead
    }

    /// Notes and requests the record of the slot that key `j`'s index
    /// line names (the line was requested earlier).
    #[inline(always)]
    fn request_slot(&mut self, slots: &Slots, j: usize, key: &(impl KeyBytes + ?Sized)) {
        let s = slots.index.peek(self.hashes[j % READ_AHEAD]).unwrap_or(NIL);
        self.likely[j % READ_AHEAD] = s;
        self.seen[j % READ_AHEAD] = slots.version;
        if let Some(r) = slots.records.get(s as usize) {
            slots.prefetch_record(r, key.key_bytes().len());
        }
    }

    /// The hash and slot ([`NIL`] if absent) of key `i`.  Calls go
    /// `i = 0, 1, 2, ...` with the `key` of [`Lookahead::new`] (stopping
    /// early is fine).
    #[inline(always)]
    pub(crate) fn find<'k, K: KeyBytes + ?Sized + 'k>(
        &mut self,
        slots: &Slots,
        i: usize,
        key: impl Fn(usize) -> &'k K,
    ) -> (u64, u32) {
        let k = key(i);
        if !slots.read_ahead {
            let h = slots.hash(k);
            return (h, slots.find(k, h).unwrap_or(NIL));
        }
        let h = self.hashes[i % READ_AHEAD];
        let likely = self.likely[i % READ_AHEAD];
        let unchanged = self.seen[i % READ_AHEAD] == slots.version;
        if i + READ_AHEAD < self.len {
            let next = slots.hash(key(i + READ_AHEAD));
            self.hashes[i % READ_AHEAD] = next;
            slots.index.prefetch(next);
        }
        if i + READ_AHEAD / 2 < self.len && i + READ_AHEAD / 2 >= READ_AHEAD {
            self.request_slot(slots, i + READ_AHEAD / 2, key(i + READ_AHEAD / 2));
        }
        match slots.records.get(likely as usize) {
            // No tag matched, and no key came or went since: absent.
            None if unchanged => return (h, NIL),
            // A key is resident in one slot at most: if the likely slot
            // holds `k` now, it is the answer, whatever changed since.
            Some(r) if r.flags & RESIDENT != 0 && same_key(&r.key, k) => return (h, likely),
            _ => {}
        }
        (h, slots.find(k, h).unwrap_or(NIL))
    }
}
