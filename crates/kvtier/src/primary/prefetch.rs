//! Read-ahead hints: start loading a cache line that a batch loop will
//! read a few keys later (the key index, the slot arrays and the policies'
//! lists all use them).  Hints only: they never fault and change nothing.
//!
//! Read-ahead pays on tables beyond the CPU caches, where a batch's
//! memory misses overlap; on a table that fits (below
//! [`READ_AHEAD_MIN_SLOTS`] slots, some megabytes of records, index and
//! lists) its address arithmetic, bounds checks and extra probes only add
//! instructions.  A tier decides once, at creation, by its capacity
//! ([`reads_ahead`]); the batch loops then take the plain path.

/// Fewest slots a tier reads ahead with: 2^16 (about 6 MiB of slot
/// records, index and policy lists with 16-byte keys), beyond a core's
/// L2 cache; 16,384 slots (1.5 MiB) fit it.
pub(crate) const READ_AHEAD_MIN_SLOTS: u32 = 1 << 16;

/// Whether a tier of `capacity` slots reads ahead.
#[inline]
pub(crate) fn reads_ahead(capacity: u32) -> bool {
    capacity >= READ_AHEAD_MIN_SLOTS
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
