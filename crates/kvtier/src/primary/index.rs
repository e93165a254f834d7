//! A fixed-size open-addressing index from key hashes to ids, with a hash
//! tag beside each id.
//!
//! Linear probing with backward-shift deletion: no tombstones, so the table
//! never grows or rehashes under churn; its size is fixed at creation for
//! at most `max` entries (load factor at most 1/2) with ids below `max`.  A
//! probe compares keys (a memory access elsewhere) only on a tag match.  A
//! lookup usually reads one cache line of the table; [`TagIndex::prefetch`]
//! lets batch callers start that read early.
//!
//! Two entry widths, chosen at creation:
//! - narrow (ids below 2^26, every practical size): one `u32` per bucket,
//!   `id + 1` in the low `k` bits (`k` the bits `max` needs), then the
//!   entry's distance from its home bucket (2 bits: 0, 1, 2, or "3 or
//!   more"), then a tag of the hash in the high `30 - k` bits (6 bits at
//!   10^7 ids: a probe meets a false tag match about once in 64 entries).
//!   4 bytes per bucket, 8 per key.  The home bucket is not in the entry:
//!   a removal shifting an entry back takes its home from the recorded
//!   distance, or, for the few entries 3 or more buckets from home, from
//!   its key (the caller passes `hash_of`).
//! - wide: one `u64` per bucket, `id + 1` in the low half and 32 bits of the
//!   hash in the high half, from which the home bucket is computed, so a
//!   removal needs no key.  16 bytes per key.
//!
//! Both take the home bucket from the high 32 bits of the mixed hash and
//! keep empty buckets all zero, so a new table comes from the allocator's
//! zero pages without being written (large ones are committed at once:
//! `huge.rs`).

mod entry;

use super::huge;
use super::prefetch::prefetch_read;
use crate::error::Result;
use entry::{DISP_SAT, Entry, NARROW_ID_BITS, mix};

/// How many keys ahead a batch's read-ahead ([`TagIndex::find_each`], and
/// `Lookahead` in `slots.rs`) requests a key's table line; what checking
/// its likely id reads is requested half as far ahead.  About a memory
/// latency's worth of per-key work at each stage.
pub(crate) const READ_AHEAD: usize = 16;

/// An open-addressing table of one entry width.
#[derive(Debug, Clone)]
pub(crate) struct Table<E> {
    slots: Box<[E]>,
    /// The id bits of a narrow entry (32 for wide ones).
    bits: u32,
    len: usize,
}

/// Table size for at most `max` entries: at most half full.
fn buckets_for(max: usize) -> usize {
    max.saturating_mul(2).saturating_add(16)
}

impl<E: Entry> Table<E> {
    fn new(max: usize, bits: u32) -> Result<Self> {
        Ok(Table {
            slots: huge::zeroed::<E>(buckets_for(max), "the key index")?.into_boxed_slice(),
            bits,
            len: 0,
        })
    }

    /// Whether ids below `max` fit the entries.
    fn ids_fit(&self, max: usize) -> bool {
        (max as u64) < 1u64 << self.bits
    }

    /// The home bucket of an entry whose mixed hash has high half `hi`.
    #[inline(always)]
    fn home(&self, hi: u32) -> usize {
        let n = self.slots.len();
        if E::NARROW || n <= u32::MAX as usize {
            ((hi as u64 * n as u64) >> 32) as usize
        } else {
            ((hi as u128 * n as u128) >> 32) as usize
        }
    }

    #[inline(always)]
    fn next(&self, i: usize) -> usize {
        if i + 1 == self.slots.len() { 0 } else { i + 1 }
    }

    #[inline(always)]
    fn prefetch(&self, h: u64) {
        self.prefetch_mixed(mix(h));
    }

    #[inline(always)]
    fn find(&self, h: u64, eq: impl FnMut(u32) -> bool) -> Option<u32> {
        self.find_mixed(mix(h), eq)
    }

    #[inline(always)]
    fn find_mixed(&self, m: u64, mut eq: impl FnMut(u32) -> bool) -> Option<u32> {
        let mut i = self.home((m >> 32) as u32);
        loop {
            let e = self.slots[i];
            if e == E::ZERO {
                return None;
            }
            if e.tag_matches(m, self.bits) && eq(e.id(self.bits)) {
                return Some(e.id(self.bits));
            }
            i = self.next(i);
        }
    }

    /// The first id whose tag matches mixed hash `m`, or `u32::MAX`.
    #[inline(always)]
    fn peek_mixed(&self, m: u64) -> u32 {
        self.find_mixed(m, |_| true).unwrap_or(u32::MAX)
    }

    /// Starts loading the line where a probe for mixed hash `m` begins.
    #[inline(always)]
    fn prefetch_mixed(&self, m: u64) {
        // A table not sized yet has no line to load.
        if let Some(e) = self.slots.get(self.home((m >> 32) as u32)) {
            prefetch_read(e);
        }
    }

    /// See [`TagIndex::find_each`].
    #[inline(always)]
    fn find_each(
        &self,
        n: usize,
        hash: impl Fn(usize) -> u64,
        request: impl Fn(usize, u32),
        is_key: impl Fn(usize, u32) -> bool,
        mut put: impl FnMut(usize, u32, u64),
    ) {
        // Each key's hash, mixed hash and likely id, at `position % READ_AHEAD`.
        let mut hashes = [0u64; READ_AHEAD];
        let mut mixed = [0u64; READ_AHEAD];
        let mut likely = [u32::MAX; READ_AHEAD];
        for j in 0..n.min(READ_AHEAD) {
            hashes[j] = hash(j);
            mixed[j] = mix(hashes[j]);
            self.prefetch_mixed(mixed[j]);
        }
        // The first keys' likely ids are requested all at once: one wait
        // for their table lines, then one for what checking them reads.
        for j in 0..n.min(READ_AHEAD) {
            likely[j] = self.peek_mixed(mixed[j]);
            if likely[j] != u32::MAX {
                request(j, likely[j]);
            }
        }
        for i in 0..n {
            let at = i % READ_AHEAD;
            let (h, m, id) = (hashes[at], mixed[at], likely[at]);
            if i + READ_AHEAD < n {
                hashes[at] = hash(i + READ_AHEAD);
                mixed[at] = mix(hashes[at]);
                self.prefetch_mixed(mixed[at]);
            }
            let next = i + READ_AHEAD / 2;
            if next < n && next >= READ_AHEAD {
                let at = next % READ_AHEAD;
                likely[at] = self.peek_mixed(mixed[at]);
                if likely[at] != u32::MAX {
                    request(next, likely[at]);
                }
            }
            // No tag matched: absent.  A false tag match: probe on.
            let found = if id == u32::MAX || is_key(i, id) {
                id
            } else {
                self.find_mixed(m, |id| is_key(i, id)).unwrap_or(u32::MAX)
            };
            put(i, found, h);
        }
    }

    #[inline]
    fn insert(&mut self, h: u64, id: u32) {
        debug_assert!(self.len * 2 < self.slots.len());
        debug_assert!(self.ids_fit(id as usize + 1));
        let m = mix(h);
        let mut i = self.home((m >> 32) as u32);
        let mut d = 0;
        while self.slots[i] != E::ZERO {
            i = self.next(i);
            d += 1;
        }
        self.slots[i] = E::new(m, id, d, self.bits);
        self.len += 1;
    }

    #[inline]
    fn remove(&mut self, h: u64, id: u32, hash_of: impl Fn(u32) -> u64) {
        let m = mix(h);
        let want = E::new(m, id, 0, self.bits).sans_disp(self.bits);
        let mut hole = self.home((m >> 32) as u32);
        loop {
            let e = self.slots[hole];
            if e == E::ZERO {
                return;
            }
            if e.sans_disp(self.bits) == want {
                break;
            }
            hole = self.next(hole);
        }
        // Backward shift: pull later entries of the run into the hole when
        // their home bucket is not after the hole (cyclically), i.e. when
        // they sit at least as far from their home as from the hole.
        let n = self.slots.len();
        // Cyclic distance from `a` forward to `b`.
        let dist = |a: usize, b: usize| if b >= a { b - a } else { b + n - a };
        let mut j = hole;
        loop {
            j = self.next(j);
            let e = self.slots[j];
            if e == E::ZERO {
                break;
            }
            let d = if !E::NARROW {
                dist(self.home(e.home_bits()), j)
            } else if e.disp(self.bits) < DISP_SAT {
                e.disp(self.bits) as usize
            } else {
                dist(self.home((mix(hash_of(e.id(self.bits))) >> 32) as u32), j)
            };
            let gap = dist(hole, j);
            if d >= gap {
                self.slots[hole] = e.with_disp(d - gap, self.bits);
                hole = j;
            }
        }
        self.slots[hole] = E::ZERO;
        self.len -= 1;
    }

    fn clear(&mut self) {
        if self.len > 0 {
            self.slots.fill(E::ZERO);
            self.len = 0;
        }
    }
}

/// Id index keyed by 64-bit hashes, for at most `max` ids, all below `max`.
#[derive(Debug, Clone)]
pub(crate) enum TagIndex {
    /// `u32` entries: ids below 2^28.
    Narrow(Table<u32>),
    /// `u64` entries: any id below `u32::MAX`.
    Wide(Table<u64>),
}

/// Dispatches `$body` to the table of either width as `$t`.
macro_rules! with_table {
    ($self:expr, $t:ident => $body:expr) => {
        match $self {
            TagIndex::Narrow($t) => $body,
            TagIndex::Wide($t) => $body,
        }
    };
}

impl TagIndex {
    /// An index with room for `max` entries with ids below `max`: narrow
    /// entries where the ids fit them, else wide ones.
    /// [`Error::OutOfMemory`](crate::Error::OutOfMemory) if its table
    /// cannot be had.
    pub(crate) fn new(max: usize) -> Result<TagIndex> {
        let bits = usize::BITS - max.leading_zeros();
        if bits <= NARROW_ID_BITS {
            Ok(TagIndex::Narrow(Table::new(max, bits.max(1))?))
        } else {
            Self::new_wide(max)
        }
    }

    /// An index of wide entries whatever `max` is (tests use it at small sizes).
    pub(crate) fn new_wide(max: usize) -> Result<TagIndex> {
        Ok(TagIndex::Wide(Table::new(max, 32)?))
    }

    /// Whether the index was sized for at least `max` entries with ids below `max`.
    pub(crate) fn has_room_for(&self, max: usize) -> bool {
        with_table!(self, t => t.slots.len() >= buckets_for(max) && t.ids_fit(max))
    }

    /// Number of entries.
    #[inline]
    pub(crate) fn len(&self) -> usize {
        with_table!(self, t => t.len)
    }

    /// Starts loading the table line where a probe for hash `h` begins.
    #[inline]
    pub(crate) fn prefetch(&self, h: u64) {
        with_table!(self, t => t.prefetch(h))
    }

    /// The first id whose tag matches `h` (a likely match), without
    /// comparing keys; for prefetching what a lookup will read next.
    #[inline]
    pub(crate) fn peek(&self, h: u64) -> Option<u32> {
        self.find(h, |_| true)
    }

    /// The id with hash `h` for which `eq` holds, if any; `eq` is called
    /// only for ids whose tag matches.
    #[inline(always)]
    pub(crate) fn find(&self, h: u64, eq: impl FnMut(u32) -> bool) -> Option<u32> {
        with_table!(self, t => t.find(h, eq))
    }

    /// Resolves `n` keys in order, key `j` having hash `hash(j)`: hands
    /// `put(j, id, hash(j))` the id for which `is_key(j, id)` holds, or
    /// `u32::MAX` if none.  The table lines of later keys are requested
    /// [`READ_AHEAD`] keys ahead, and `request(j, id)` is asked to
    /// request what `is_key(j, id)` will read half as far ahead, so the
    /// memory reads of a long batch overlap.  Read-only: nothing may
    /// change the index during the call.
    #[inline]
    pub(crate) fn find_each(
        &self,
        n: usize,
        hash: impl Fn(usize) -> u64,
        request: impl Fn(usize, u32),
        is_key: impl Fn(usize, u32) -> bool,
        put: impl FnMut(usize, u32, u64),
    ) {
        with_table!(self, t => t.find_each(n, hash, request, is_key, put))
    }

    /// Adds `id` (below `max`) under hash `h`; the caller knows it is
    /// absent and that fewer than `max` entries are present.
    #[inline]
    pub(crate) fn insert(&mut self, h: u64, id: u32) {
        with_table!(self, t => t.insert(h, id))
    }

    /// Removes `id` (added under hash `h`); absent ids are left alone.
    /// `hash_of(i)` must give the hash every other present id `i` was added
    /// under (a narrow table asks it for the entries it shifts back).
    #[inline]
    pub(crate) fn remove(&mut self, h: u64, id: u32, hash_of: impl Fn(u32) -> u64) {
        with_table!(self, t => t.remove(h, id, hash_of))
    }

    /// Removes every entry.
    pub(crate) fn clear(&mut self) {
        with_table!(self, t => t.clear())
    }

    /// Bytes of table storage.
    pub(crate) fn bytes(&self) -> usize {
        with_table!(self, t => std::mem::size_of_val(&*t.slots))
    }
}

// After `with_table!`, which the tests use.
#[cfg(test)]
mod tests;
