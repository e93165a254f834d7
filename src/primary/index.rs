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

use super::huge::{self, ZeroInt};
use crate::error::Result;

/// Most id bits a narrow entry holds (leaving it at least 4 tag bits).
const NARROW_ID_BITS: u32 = 26;

/// The displacement field of a narrow entry: buckets from its home, this
/// value meaning "this many or more" (then the home comes from the key).
const DISP_SAT: u32 = 3;

/// How many keys ahead a batch's read-ahead ([`TagIndex::find_each`], and
/// `Lookahead` in `slots.rs`) requests a key's table line; what checking
/// its likely id reads is requested half as far ahead.  About a memory
/// latency's worth of per-key work at each stage.
pub(crate) const READ_AHEAD: usize = 16;

/// The hash with its bits mixed upward by one multiply (so every bit of `h`
/// counts in the high half, and the low 32 bits of `h` in the low half).
#[inline(always)]
fn mix(h: u64) -> u64 {
    h.wrapping_mul(0x9e37_79b9_7f4a_7c15)
}

/// One bucket of a table: `id + 1` and a tag, or all zeros when empty.
/// `bits` is the number of id bits of a narrow entry.
pub(crate) trait Entry: ZeroInt + Eq {
    /// Narrow: `u32`, home bucket not in the entry.
    const NARROW: bool;
    /// The entry of `id` under mixed hash `m`, `d` buckets after its home.
    fn new(m: u64, id: u32, d: usize, bits: u32) -> Self;
    /// The entry's id.
    fn id(self, bits: u32) -> u32;
    /// Whether the entry's tag is that of mixed hash `m`.
    fn tag_matches(self, m: u64, bits: u32) -> bool;
    /// The entry without its displacement (its id and tag).
    fn sans_disp(self, bits: u32) -> Self;
    /// The displacement a narrow entry records ([`DISP_SAT`]: unknown).
    fn disp(self, bits: u32) -> u32;
    /// The entry recording displacement `d` instead.
    fn with_disp(self, d: usize, bits: u32) -> Self;
    /// The high half of a wide entry's mixed hash (its home's source).
    fn home_bits(self) -> u32;
}

/// Narrow layout, high to low: tag (32 - 2 - `bits` bits of the mixed
/// hash's low half), displacement (2 bits), `id + 1` (`bits` bits).
impl Entry for u32 {
    const NARROW: bool = true;
    #[inline(always)]
    fn new(m: u64, id: u32, d: usize, bits: u32) -> u32 {
        (m as u32 & !((4 << bits) - 1)) | (d.min(DISP_SAT as usize) as u32) << bits | (id + 1)
    }
    #[inline(always)]
    fn id(self, bits: u32) -> u32 {
        (self & ((1 << bits) - 1)).wrapping_sub(1)
    }
    #[inline(always)]
    fn tag_matches(self, m: u64, bits: u32) -> bool {
        (self ^ m as u32) & !((4 << bits) - 1) == 0
    }
    #[inline(always)]
    fn sans_disp(self, bits: u32) -> u32 {
        self & !(DISP_SAT << bits)
    }
    #[inline(always)]
    fn disp(self, bits: u32) -> u32 {
        (self >> bits) & DISP_SAT
    }
    #[inline(always)]
    fn with_disp(self, d: usize, bits: u32) -> u32 {
        self.sans_disp(bits) | (d.min(DISP_SAT as usize) as u32) << bits
    }
    #[inline(always)]
    fn home_bits(self) -> u32 {
        0
    }
}

/// Wide layout: the mixed hash's high half, then `id + 1` (32 bits each).
impl Entry for u64 {
    const NARROW: bool = false;
    #[inline(always)]
    fn new(m: u64, id: u32, _d: usize, _bits: u32) -> u64 {
        (m >> 32) << 32 | (id as u64 + 1)
    }
    #[inline(always)]
    fn id(self, _bits: u32) -> u32 {
        (self as u32).wrapping_sub(1)
    }
    #[inline(always)]
    fn tag_matches(self, m: u64, _bits: u32) -> bool {
        self >> 32 == m >> 32
    }
    #[inline(always)]
    fn sans_disp(self, _bits: u32) -> u64 {
        self
    }
    #[inline(always)]
    fn disp(self, _bits: u32) -> u32 {
        DISP_SAT
    }
    #[inline(always)]
    fn with_disp(self, _d: usize, _bits: u32) -> u64 {
        self
    }
    #[inline(always)]
    fn home_bits(self) -> u32 {
        (self >> 32) as u32
    }
}

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

/// Starts loading the cache line holding `*p` (a hint; no effect elsewhere).
#[inline(always)]
pub(crate) fn prefetch_read<T>(p: &T) {
    prefetch_addr(p as *const T as *const u8);
}

/// Starts loading the cache line holding address `p` (a hint: it never
/// faults, whatever `p` is).
#[inline(always)]
pub(crate) fn prefetch_addr(p: *const u8) {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: prefetching is a hint that never faults; `p` is a valid reference.
    unsafe {
        core::arch::x86_64::_mm_prefetch(p as *const i8, core::arch::x86_64::_MM_HINT_T0);
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = p;
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Both widths at `max`.
    fn both(max: usize) -> [TagIndex; 2] {
        [
            TagIndex::new(max).unwrap(),
            TagIndex::new_wide(max).unwrap(),
        ]
    }

    #[test]
    fn width_follows_the_ids() {
        assert!(matches!(
            TagIndex::new(10_000_000).unwrap(),
            TagIndex::Narrow(_)
        ));
        assert!(matches!(
            TagIndex::new((1 << 26) - 1).unwrap(),
            TagIndex::Narrow(_)
        ));
        assert!(matches!(TagIndex::new(1 << 26).unwrap(), TagIndex::Wide(_)));
        assert!(matches!(TagIndex::new(0).unwrap(), TagIndex::Narrow(_)));
        let narrow = TagIndex::new(1000).unwrap();
        assert_eq!(narrow.bytes(), 4 * (2 * 1000 + 16));
        assert!(narrow.has_room_for(1000) && !narrow.has_room_for(1001));
        assert!(matches!(&narrow, TagIndex::Narrow(t) if t.bits == 10));
        assert!(!TagIndex::new(0).unwrap().has_room_for(5));
        let wide = TagIndex::new_wide(1000).unwrap();
        assert_eq!(wide.bytes(), 8 * (2 * 1000 + 16));
        assert!(wide.has_room_for(1000) && !wide.has_room_for(1001));
    }

    #[test]
    fn insert_find_and_backward_shift_removal_under_collisions() {
        for mut ix in both(64) {
            // Five distinct hashes: equal hashes collide fully; ids tell them apart.
            let h = |i: u64| i % 5;
            let hash_of = |id: u32| h(id as u64);
            for i in 0..64u64 {
                ix.insert(h(i), i as u32);
            }
            assert_eq!(ix.len(), 64);
            for i in 0..64u64 {
                assert_eq!(ix.find(h(i), |id| id == i as u32), Some(i as u32));
            }
            for i in (0..64u64).step_by(3) {
                ix.remove(h(i), i as u32, hash_of);
                ix.remove(h(i), i as u32, hash_of);
            }
            for i in 0..64u64 {
                let want = (i % 3 != 0).then_some(i as u32);
                assert_eq!(ix.find(h(i), |id| id == i as u32), want, "{i}");
            }
            assert_eq!(ix.len(), 64 - 22);
            assert_eq!(ix.peek(h(1)).map(|id| id % 5), Some(1));
            assert_eq!(ix.find(7, |_| true), None);
            ix.clear();
            assert_eq!((ix.len(), ix.find(h(1), |_| true)), (0, None));
        }
    }

    #[test]
    fn find_each_agrees_with_find_over_batches_of_every_length() {
        // Ids 0..300 present; keys 300..400 absent.  Under Miri, where
        // checking the longest batch takes a minute, 48 and 64.
        let (present, total) = if cfg!(miri) { (48, 64) } else { (300, 400) };
        for mut ix in both(present as usize) {
            // Few distinct hashes for some keys (false tag matches, long
            // runs), well mixed for the rest.
            let h = |k: u32| {
                if k % 4 == 0 {
                    (k % 3) as u64
                } else {
                    (k as u64 + 1)
                        .wrapping_mul(0xd6e8_feb8_6659_fd93)
                        .rotate_left(29)
                }
            };
            for id in 0..present {
                ix.insert(h(id), id);
            }
            for n in [0, 1, READ_AHEAD / 2 - 1, READ_AHEAD, READ_AHEAD + 1, total] {
                // A batch of `n` keys, present and absent mixed, repeats included.
                let keys: Vec<u32> = (0..n as u32)
                    .map(|j| (j * 37 + n as u32) % total as u32)
                    .collect();
                let requested = std::cell::RefCell::new(Vec::new());
                let mut got = vec![u32::MAX - 1; n];
                ix.find_each(
                    n,
                    |j| h(keys[j]),
                    |j, id| requested.borrow_mut().push((j, id)),
                    |j, id| id == keys[j],
                    |j, id, hj| {
                        assert_eq!(hj, h(keys[j]));
                        got[j] = id;
                    },
                );
                for (j, &k) in keys.iter().enumerate() {
                    let want = ix.find(h(k), |id| id == k).unwrap_or(u32::MAX);
                    assert_eq!(got[j], want, "n {n}, key {j} ({k})");
                }
                // Every key with a tag match had its likely id requested,
                // in key order, each once.
                let requested = requested.into_inner();
                let positions: Vec<usize> = requested.iter().map(|&(j, _)| j).collect();
                assert!(positions.windows(2).all(|w| w[0] < w[1]), "{positions:?}");
                for (j, &k) in keys.iter().enumerate().filter(|&(_, &k)| k < present) {
                    assert!(
                        positions.contains(&j),
                        "n {n}: present key {j} ({k}) not requested"
                    );
                }
            }
        }
    }

    #[test]
    fn tags_spare_key_compares_and_displacements_spare_rehashes() {
        // Well-mixed hashes: a probe compares keys almost only for its own id.
        for mut ix in both(1000) {
            let h = |i: u32| {
                (i as u64 + 1)
                    .wrapping_mul(0xd6e8_feb8_6659_fd93)
                    .rotate_left(29)
            };
            for i in 0..1000 {
                ix.insert(h(i), i);
            }
            let mut compares = 0;
            for i in 0..1000 {
                let found = ix.find(h(i), |id| {
                    compares += 1;
                    id == i
                });
                assert_eq!(found, Some(i));
            }
            assert!(compares < 1100, "{compares} key compares for 1000 finds");
            // A removal seldom needs another entry's key (narrow entries
            // record displacements up to 2), a wide one never.
            let rehashes = std::cell::Cell::new(0);
            for i in 0..1000 {
                ix.remove(h(i), i, |id| {
                    rehashes.set(rehashes.get() + 1);
                    h(id)
                });
                assert_eq!(ix.find(h(i), |id| id == i), None);
            }
            assert_eq!(ix.len(), 0);
            let narrow = matches!(ix, TagIndex::Narrow(_));
            assert!(
                rehashes.get() < if narrow { 200 } else { 1 },
                "{}",
                rehashes.get()
            );
        }
    }

    /// The home bucket of hash `h` in `ix`.
    fn home(ix: &TagIndex, h: u64) -> usize {
        with_table!(ix, t => t.home((mix(h) >> 32) as u32))
    }

    /// Whether some entry of `t` sits before its home bucket: its run
    /// wrapped around the end of the table.  `hash` gives each id's hash.
    fn some_run_wraps<E: Entry>(t: &Table<E>, hash: &[u64]) -> bool {
        t.slots.iter().enumerate().any(|(i, &e)| {
            e != E::ZERO && i < t.home((mix(hash[e.id(t.bits) as usize]) >> 32) as u32)
        })
    }

    #[test]
    fn churn_never_loses_entries() {
        // The table is as full as it gets (100 entries) after a few hundred
        // steps; under Miri, a thousand times slower, the churn stops sooner.
        let steps = if cfg!(miri) { 1_000 } else { 20_000 };
        for mut ix in both(100) {
            let mut rng = 0x1234_5678_u64;
            // Ids below 100 are reused as entries come and go; few distinct
            // hashes make long runs, and the last one's home is the table's
            // last bucket, so its run wraps around to the first buckets.
            let last = with_table!(&ix, t => t.slots.len() - 1);
            let wrapping = (0..).find(|&h| home(&ix, h) == last).unwrap();
            let hashes = [0, 1, 2, 3, 4, 5, wrapping];
            let mut hash = [0u64; 100];
            let mut free: Vec<u32> = (0..100).rev().collect();
            let mut live: Vec<u32> = Vec::new();
            let mut wrapped = false;
            for step in 0..steps {
                rng ^= rng << 13;
                rng ^= rng >> 7;
                rng ^= rng << 17;
                if !free.is_empty() && (live.is_empty() || rng % 3 != 0) {
                    let id = free.pop().unwrap();
                    hash[id as usize] = hashes[(rng % 7) as usize];
                    ix.insert(hash[id as usize], id);
                    live.push(id);
                } else {
                    let id = live.swap_remove((rng % live.len() as u64) as usize);
                    ix.remove(hash[id as usize], id, |i| hash[i as usize]);
                    free.push(id);
                }
                if step % 97 == 0 {
                    for &id in &live {
                        assert_eq!(ix.find(hash[id as usize], |x| x == id), Some(id));
                    }
                    wrapped |= with_table!(&ix, t => some_run_wraps(t, &hash));
                }
            }
            assert_eq!(ix.len(), live.len());
            assert!(wrapped, "no run wrapped around the table");
        }
    }
}
