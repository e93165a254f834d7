//! A fixed-size open-addressing index from key hashes to ids, with a hash
//! tag beside each id.
//!
//! Each entry is one `u64`: the id (plus one) in the low half, the high 32 bits of the
//! key's hash (the tag) in the high half.  The home bucket is computed from
//! the tag alone, so the table never needs the key to move an entry, and a
//! probe compares keys (a memory access elsewhere) only on a tag match.
//! Linear probing with backward-shift deletion: no tombstones, so the table
//! never grows or rehashes under churn; its size is fixed at creation for
//! at most `max` entries (load factor at most 1/2).  A lookup usually reads
//! one cache line of the table; [`TagIndex::prefetch`] lets batch callers
//! start that read early.

/// An empty entry.  Entries hold `id + 1` in their low half (ids are below
/// `u32::MAX`), so an empty table is all zeros: the allocator hands it out
/// as untouched zero pages, committed only as entries land in them.
const EMPTY: u64 = 0;

#[inline(always)]
fn entry(tag: u32, id: u32) -> u64 {
    (tag as u64) << 32 | (id as u64 + 1)
}

#[inline(always)]
fn id_of(e: u64) -> u32 {
    (e as u32).wrapping_sub(1)
}

/// Id index keyed by 64-bit hashes, for at most `max` ids.
#[derive(Debug, Clone)]
pub(crate) struct TagIndex {
    table: Box<[u64]>,
    len: usize,
}

/// The tag of hash `h`: its bits mixed upward by one multiply (so every bit
/// of `h` counts), the high 32 kept.
#[inline]
fn tag_of(h: u64) -> u32 {
    (h.wrapping_mul(0x9e37_79b9_7f4a_7c15) >> 32) as u32
}

impl TagIndex {
    /// An index with room for `max` entries.
    pub(crate) fn new(max: usize) -> TagIndex {
        let buckets = Self::buckets_for(max);
        let table = super::huge::zeroed::<u64>(buckets).into_boxed_slice();
        TagIndex { table, len: 0 }
    }

    /// Table size for at most `max` entries: at most half full.
    fn buckets_for(max: usize) -> usize {
        2 * max + 16
    }

    /// Whether the table was sized for at least `max` entries.
    pub(crate) fn has_room_for(&self, max: usize) -> bool {
        self.table.len() >= Self::buckets_for(max)
    }

    /// Number of entries.
    #[inline]
    pub(crate) fn len(&self) -> usize {
        self.len
    }

    /// The home bucket of tag `tag`.
    #[inline(always)]
    fn home(&self, tag: u32) -> usize {
        let n = self.table.len();
        if n <= u32::MAX as usize {
            ((tag as u64 * n as u64) >> 32) as usize
        } else {
            ((tag as u64 as u128 * n as u128) >> 32) as usize
        }
    }

    #[inline]
    fn next(&self, i: usize) -> usize {
        if i + 1 == self.table.len() { 0 } else { i + 1 }
    }

    /// Starts loading the table line where a probe for hash `h` begins.
    #[inline]
    pub(crate) fn prefetch(&self, h: u64) {
        let i = self.home(tag_of(h));
        prefetch_read(&self.table[i]);
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
    pub(crate) fn find(&self, h: u64, mut eq: impl FnMut(u32) -> bool) -> Option<u32> {
        let tag = tag_of(h);
        let mut i = self.home(tag);
        loop {
            let e = self.table[i];
            if e == EMPTY {
                return None;
            }
            if (e >> 32) as u32 == tag && eq(id_of(e)) {
                return Some(id_of(e));
            }
            i = self.next(i);
        }
    }

    /// Adds `id` under hash `h` (the caller knows it is absent and that
    /// fewer than `max` entries are present).
    #[inline]
    pub(crate) fn insert(&mut self, h: u64, id: u32) {
        debug_assert!(self.len * 2 < self.table.len());
        let tag = tag_of(h);
        let mut i = self.home(tag);
        while self.table[i] != EMPTY {
            i = self.next(i);
        }
        self.table[i] = entry(tag, id);
        self.len += 1;
    }

    /// Removes `id` (added under hash `h`); absent ids are left alone.
    #[inline]
    pub(crate) fn remove(&mut self, h: u64, id: u32) {
        let tag = tag_of(h);
        let want = entry(tag, id);
        let mut hole = self.home(tag);
        loop {
            let e = self.table[hole];
            if e == EMPTY {
                return;
            }
            if e == want {
                break;
            }
            hole = self.next(hole);
        }
        // Backward shift: pull later entries of the run into the hole when
        // their home bucket is not after the hole (cyclically).
        let n = self.table.len();
        // Cyclic distance from `a` forward to `b`.
        let dist = |a: usize, b: usize| if b >= a { b - a } else { b + n - a };
        let mut j = hole;
        loop {
            j = self.next(j);
            let e = self.table[j];
            if e == EMPTY {
                break;
            }
            let home = self.home((e >> 32) as u32);
            if dist(home, j) >= dist(hole, j) {
                self.table[hole] = e;
                hole = j;
            }
        }
        self.table[hole] = EMPTY;
        self.len -= 1;
    }

    /// Removes every entry.
    pub(crate) fn clear(&mut self) {
        if self.len > 0 {
            self.table.fill(EMPTY);
            self.len = 0;
        }
    }

    /// Bytes of table storage.
    pub(crate) fn bytes(&self) -> usize {
        self.table.len() * 8
    }
}

/// Starts loading the cache line holding `*p` (a hint; no effect elsewhere).
#[inline(always)]
pub(crate) fn prefetch_read<T>(p: &T) {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: prefetching is a hint that never faults; `p` is a valid reference.
    unsafe {
        core::arch::x86_64::_mm_prefetch(
            p as *const T as *const i8,
            core::arch::x86_64::_MM_HINT_T0,
        );
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = p;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn insert_find_and_backward_shift_removal_under_collisions() {
        let mut ix = TagIndex::new(64);
        // Five distinct hashes: equal hashes collide fully; ids tell them apart.
        let h = |i: u64| i % 5;
        for i in 0..64u64 {
            ix.insert(h(i), i as u32);
        }
        assert_eq!(ix.len(), 64);
        for i in 0..64u64 {
            assert_eq!(ix.find(h(i), |id| id == i as u32), Some(i as u32));
        }
        for i in (0..64u64).step_by(3) {
            ix.remove(h(i), i as u32);
            ix.remove(h(i), i as u32);
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

    #[test]
    fn churn_never_loses_entries() {
        let mut ix = TagIndex::new(100);
        let mut rng = 0x1234_5678_u64;
        let mut live: Vec<(u64, u32)> = Vec::new();
        for step in 0..20_000u32 {
            rng ^= rng << 13;
            rng ^= rng >> 7;
            rng ^= rng << 17;
            if live.len() < 100 && (live.is_empty() || rng % 3 != 0) {
                // Few distinct hashes: long runs that wrap around the table.
                let h = rng % 7;
                ix.insert(h, step);
                live.push((h, step));
            } else {
                let (h, id) = live.swap_remove((rng % live.len() as u64) as usize);
                ix.remove(h, id);
            }
            if step % 97 == 0 {
                for &(h, id) in &live {
                    assert_eq!(ix.find(h, |x| x == id), Some(id));
                }
            }
        }
        assert_eq!(ix.len(), live.len());
    }
}
