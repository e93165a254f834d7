//! Read-ahead hints: start loading a cache line that a batch loop will
//! read a few keys later (the key index, the slot arrays and the policies'
//! lists all use them).  Hints only: they never fault and change nothing.

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
