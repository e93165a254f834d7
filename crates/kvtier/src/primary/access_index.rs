//! Where a request's record finds the access of a key it presented
//! before: a flat table of access positions, by key hash, that a reused
//! record empties in O(1).
//!
//! Each entry is a position in the record's list of accesses, stamped with
//! the generation of the record it belongs to: a record reused by a later
//! request starts a new generation ([`AccessIndex::clear`]), and entries of
//! earlier generations read as empty, so a finished request's entries
//! never answer for the next one, and clearing costs nothing per entry.
//! (Every 2^32 generations the stamps wrap; the table is then wiped once.)
//! Open addressing with linear probing, at most half full; a probe compares
//! stamps first, then the hashes and keys the caller's `eq` checks.  The
//! table allocates only when a request's distinct keys outgrow it, and a
//! reused record keeps its size (up to [`KEEP_ENTRIES`]).

use crate::error::Result;
use crate::fallible;

/// Entries a cleared table keeps at most (32 KiB): one huge request
/// must not make every later one carry its table.
pub(super) const KEEP_ENTRIES: usize = 4096;

/// Fewest entries a table that holds anything has.
const MIN_ENTRIES: usize = 16;

/// Positions of accesses by key hash (see the module's doc).
#[derive(Debug)]
pub(super) struct AccessIndex {
    /// `generation << 32 | position`; an entry of another generation is empty.
    entries: Vec<u64>,
    /// The current generation (never 0, the stamp of a fresh entry).
    generation: u32,
    /// Entries of the current generation.
    len: usize,
}

impl Default for AccessIndex {
    fn default() -> Self {
        AccessIndex {
            entries: Vec::new(),
            generation: 1,
            len: 0,
        }
    }
}

impl AccessIndex {
    /// Number of positions held.
    #[cfg(test)]
    pub(super) fn len(&self) -> usize {
        self.len
    }

    /// The entry where a probe for hash `h` starts (the table is not empty).
    #[inline(always)]
    fn home(&self, h: u64) -> usize {
        // Fibonacci hashing: the top bits of the product, as many as the
        // table has entries (a power of two).
        let bits = self.entries.len().trailing_zeros();
        (h.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> (64 - bits)) as usize
    }

    /// The position for which `eq` holds among those under hash `h`, or
    /// else the entry where it would be added (for [`AccessIndex::put`]).
    /// The table must have room ([`AccessIndex::reserve`]).
    #[inline(always)]
    pub(super) fn find_or_place(
        &self,
        h: u64,
        mut eq: impl FnMut(u32) -> bool,
    ) -> std::result::Result<u32, usize> {
        debug_assert!(self.len < self.entries.len());
        let mask = self.entries.len() - 1;
        let mut i = self.home(h);
        loop {
            let e = self.entries[i];
            if (e >> 32) as u32 != self.generation {
                return Err(i);
            }
            if eq(e as u32) {
                return Ok(e as u32);
            }
            i = (i + 1) & mask;
        }
    }

    /// The position for which `eq` holds among those under hash `h`.
    #[inline]
    pub(super) fn find(&self, h: u64, eq: impl FnMut(u32) -> bool) -> Option<u32> {
        if self.len == 0 {
            return None;
        }
        self.find_or_place(h, eq).ok()
    }

    /// Puts `position` at entry `at`, which [`AccessIndex::find_or_place`]
    /// named (nothing added since).
    #[inline(always)]
    pub(super) fn put(&mut self, at: usize, position: u32) {
        self.entries[at] = (self.generation as u64) << 32 | position as u64;
        self.len += 1;
    }

    /// Makes room for `total` positions in all, at most half the entries;
    /// growing re-adds every position, `hash(p)` giving position `p`'s
    /// hash.  An allocation failure is an error, and changes nothing.
    pub(super) fn reserve(
        &mut self,
        total: usize,
        hash: impl Fn(u32) -> u64,
        what: &str,
    ) -> Result<()> {
        if total <= self.entries.len() / 2 {
            return Ok(());
        }
        let size = total
            .checked_mul(2)
            .and_then(usize::checked_next_power_of_two)
            .ok_or_else(|| fallible::out_of_memory::<u64>(what, total))?
            .max(MIN_ENTRIES);
        let mut entries = Vec::new();
        fallible::reserve_exact(&mut entries, size, what)?;
        entries.resize(size, 0);
        let old = std::mem::replace(&mut self.entries, entries);
        let generation = std::mem::replace(&mut self.generation, 1);
        self.len = 0;
        for e in old {
            if (e >> 32) as u32 == generation {
                let p = e as u32;
                if let Err(at) = self.find_or_place(hash(p), |_| false) {
                    self.put(at, p);
                }
            }
        }
        Ok(())
    }

    /// Forgets every position: a new generation (O(1); a wipe every 2^32),
    /// keeping at most [`KEEP_ENTRIES`] entries of room.
    pub(super) fn clear(&mut self) {
        self.len = 0;
        if self.entries.len() > KEEP_ENTRIES {
            self.entries = Vec::new();
            self.generation = 1;
            return;
        }
        self.generation = self.generation.wrapping_add(1);
        if self.generation == 0 {
            self.entries.fill(0);
            self.generation = 1;
        }
    }

    /// Sets the generation (tests of the wrap-around).
    #[cfg(test)]
    pub(super) fn set_generation(&mut self, generation: u32) {
        self.generation = generation;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Adds position `p` under hash `hs[p]` unless present; returns
    /// whether it was.
    fn add(ix: &mut AccessIndex, hs: &[u64], p: u32) -> bool {
        ix.reserve(ix.len + 1, |q| hs[q as usize], "test").unwrap();
        match ix.find_or_place(hs[p as usize], |q| q == p) {
            Ok(_) => true,
            Err(at) => {
                ix.put(at, p);
                false
            }
        }
    }

    #[test]
    fn a_position_is_found_under_its_hash_and_added_once() {
        // Many positions under few hashes: long probes, growth past them.
        let hs: Vec<u64> = (0..500u64).map(|p| p % 7).collect();
        let mut ix = AccessIndex::default();
        assert_eq!(ix.find(3, |_| true), None);
        for p in 0..500 {
            assert!(!add(&mut ix, &hs, p));
        }
        for p in 0..500 {
            assert!(add(&mut ix, &hs, p), "{p} twice");
            assert_eq!(ix.find(hs[p as usize], |q| q == p), Some(p));
        }
        assert_eq!(ix.len(), 500);
        assert_eq!(ix.find(2, |q| q == 999), None);
    }

    #[test]
    fn a_cleared_index_answers_nothing_of_its_earlier_generation() {
        let hs: Vec<u64> = (0..40u64)
            .map(|p| p.wrapping_mul(0x1234_5678_9abc))
            .collect();
        let mut ix = AccessIndex::default();
        for p in 0..40 {
            add(&mut ix, &hs, p);
        }
        let entries = ix.entries.as_ptr();
        ix.clear();
        assert_eq!(ix.len(), 0);
        for p in 0..40 {
            assert_eq!(ix.find(hs[p as usize], |_| true), None, "{p}");
        }
        // The next generation adds them afresh, in the same room.
        for p in (0..40).rev() {
            assert!(!add(&mut ix, &hs, p));
        }
        assert_eq!(ix.entries.as_ptr(), entries);
    }

    #[test]
    fn generations_wrap_without_reviving_old_entries() {
        let hs: Vec<u64> = (0..20u64).collect();
        let mut ix = AccessIndex::default();
        // Entries of generation 1, then of the last generation before the wrap.
        for p in 0..10 {
            add(&mut ix, &hs, p);
        }
        ix.set_generation(u32::MAX);
        for p in 10..20 {
            add(&mut ix, &hs, p);
        }
        // The wrap wipes the table: neither generation 1 (the next) nor
        // the last one answers.
        ix.clear();
        for p in 0..20 {
            assert_eq!(ix.find(hs[p as usize], |_| true), None, "{p}");
        }
        assert!(!add(&mut ix, &hs, 3));
        assert_eq!(ix.find(hs[3], |_| true), Some(3));
    }

    #[test]
    fn a_huge_request_leaves_no_huge_table_behind() {
        let hs: Vec<u64> = (0..5000u64).collect();
        let mut ix = AccessIndex::default();
        for p in 0..5000 {
            add(&mut ix, &hs, p);
        }
        assert!(ix.entries.len() > KEEP_ENTRIES);
        ix.clear();
        assert!(ix.entries.len() <= KEEP_ENTRIES);
        assert!(!add(&mut ix, &hs, 7));
        assert_eq!(ix.find(7, |q| q == 7), Some(7));
    }

    #[test]
    fn a_table_of_exactly_keep_entries_is_kept_by_a_clear() {
        // Half of KEEP_ENTRIES positions fill a table of KEEP_ENTRIES
        // entries: the most a cleared record keeps.
        let hs: Vec<u64> = (0..(KEEP_ENTRIES / 2) as u64).collect();
        let mut ix = AccessIndex::default();
        for p in 0..hs.len() as u32 {
            add(&mut ix, &hs, p);
        }
        assert_eq!(ix.entries.len(), KEEP_ENTRIES);
        let entries = ix.entries.as_ptr();
        ix.clear();
        assert_eq!(ix.entries.len(), KEEP_ENTRIES);
        assert_eq!(ix.entries.as_ptr(), entries, "the same room");
        assert_eq!(ix.find(hs[7], |_| true), None);
    }

    #[test]
    fn an_impossible_size_is_an_error_and_changes_nothing() {
        let mut ix = AccessIndex::default();
        add(&mut ix, &[5], 0);
        assert!(ix.reserve(usize::MAX / 2, |_| 0, "test").is_err());
        assert_eq!(ix.find(5, |q| q == 0), Some(0));
    }
}
