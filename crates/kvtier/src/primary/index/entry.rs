//! The two entry widths of the index's tables: what a bucket holds (an id
//! and a tag of its key's hash, and for narrow entries the distance from
//! the home bucket) and how each width packs it (see the module docs of
//! `index.rs`).  The tables' probing never looks inside an entry but
//! through [`Entry`].

use super::super::huge::ZeroInt;

/// Most id bits a narrow entry holds (leaving it at least 4 tag bits).
pub(super) const NARROW_ID_BITS: u32 = 26;

/// The displacement field of a narrow entry: buckets from its home, this
/// value meaning "this many or more" (then the home comes from the key).
pub(super) const DISP_SAT: u32 = 3;

/// The hash with its bits mixed upward by one multiply (so every bit of `h`
/// counts in the high half, and the low 32 bits of `h` in the low half).
#[inline(always)]
pub(super) fn mix(h: u64) -> u64 {
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
