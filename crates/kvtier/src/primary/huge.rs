//! Memory for the tier's large arrays: huge pages, committed at creation.
//!
//! At millions of slots nearly every random access to the index, the keys,
//! the reference counts or the list links lands on a different 4 KiB page,
//! so it also misses the TLB and pays a page walk (itself a cache miss).
//! Backing the large arrays with 2 MiB pages removes most of those walks.
//! Where the kernel offers transparent huge pages only on request (its
//! `madvise` mode, the usual default), the arrays ask for them.  It is a
//! hint: it changes no contents, and a kernel without it ignores it.
//!
//! The same arrays are committed when they are made (`MADV_POPULATE_WRITE`,
//! Linux 5.14; older kernels commit on first touch instead), so that no
//! later call pays a page fault, which with huge pages can mean zeroing
//! 2 MiB or compacting memory on the caller's thread.  Per slot that is
//! the metadata and the inline key (about 100 bytes), a small fraction of
//! the slot's own bytes in the region, which is pre-faulted as well.
//! Arrays under 4 MiB are left alone.

use crate::error::Result;
use crate::fallible;

/// The huge page size asked for.
const HUGE_PAGE: usize = 2 << 20;

/// Asks for huge pages over the whole 2 MiB pages inside `v`'s buffer
/// (its capacity, used or not), then commits the buffer.
pub(crate) fn advise<T>(v: &Vec<T>) {
    let bytes = v.capacity() * std::mem::size_of::<T>();
    // Miri cannot call madvise; the advice changes no contents, so the
    // code it checks is the same without it.
    if bytes < 2 * HUGE_PAGE || cfg!(miri) {
        return;
    }
    let start = v.as_ptr() as usize;
    let first = start.next_multiple_of(HUGE_PAGE);
    let end = (start + bytes) / HUGE_PAGE * HUGE_PAGE;
    if end > first {
        // SAFETY: [first, end) lies inside `v`'s allocation, which stays
        // mapped while `v` lives; MADV_HUGEPAGE changes no contents.  The
        // result is ignored: the advice is optional.
        unsafe {
            libc::madvise(first as *mut libc::c_void, end - first, libc::MADV_HUGEPAGE);
        }
    }
    let page = crate::region::sys::system_page_size();
    let (first, end) = (start.next_multiple_of(page), (start + bytes) / page * page);
    if end > first {
        // SAFETY: as above; MADV_POPULATE_WRITE faults the pages in
        // without changing their bytes.  Ignored where unsupported (pages
        // are then committed on first touch, as without it).
        unsafe {
            libc::madvise(
                first as *mut libc::c_void,
                end - first,
                crate::region::sys::MADV_POPULATE_WRITE,
            );
        }
    }
}

/// `n` copies of `value`, in a buffer that asked for huge pages before it
/// was written; [`Error::OutOfMemory`](crate::Error::OutOfMemory) naming
/// `what` if it cannot be had.
pub(crate) fn filled<T: Clone>(n: usize, value: T, what: &str) -> Result<Vec<T>> {
    let mut v = fallible::with_capacity(n, what)?;
    advise(&v);
    v.resize(n, value);
    Ok(v)
}

/// `n` zeros of an integer type: fresh zero pages from the allocator
/// (never written by us), committed at once; an error naming `what` if
/// they cannot be had.
pub(crate) fn zeroed<T: ZeroInt>(n: usize, what: &str) -> Result<Vec<T>> {
    if n == 0 {
        return Ok(Vec::new());
    }
    let layout =
        std::alloc::Layout::array::<T>(n).map_err(|_| fallible::out_of_memory::<T>(what, n))?;
    // SAFETY: the layout has a non-zero size (n > 0, and T is an integer).
    let p = unsafe { std::alloc::alloc_zeroed(layout) }.cast::<T>();
    if p.is_null() {
        return Err(fallible::out_of_memory::<T>(what, n));
    }
    // SAFETY: `p` comes from the global allocator with the layout of `n`
    // items of `T`, all bytes zero, which is a valid `T` (`ZeroInt`).
    let v = unsafe { Vec::from_raw_parts(p, n, n) };
    advise(&v);
    Ok(v)
}

/// Integer types whose default is all zero bytes (so `vec!` gets them from
/// the allocator's zeroed memory without writing).
pub(crate) trait ZeroInt: Copy {
    /// Zero.
    const ZERO: Self;
}
impl ZeroInt for u8 {
    const ZERO: u8 = 0;
}
impl ZeroInt for u32 {
    const ZERO: u32 = 0;
}
impl ZeroInt for i32 {
    const ZERO: i32 = 0;
}
impl ZeroInt for u64 {
    const ZERO: u64 = 0;
}

/// An empty vector with room for `n` elements, its buffer advised; an
/// error naming `what` if it cannot be had.
pub(crate) fn with_capacity<T>(n: usize, what: &str) -> Result<Vec<T>> {
    let v = fallible::with_capacity(n, what)?;
    advise(&v);
    Ok(v)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    #[cfg_attr(
        miri,
        ignore = "megabyte buffers, and Miri skips the advice this checks"
    )]
    fn advised_buffers_keep_their_contents() {
        let big = 3 * HUGE_PAGE / 8 + 5;
        let v: Vec<u64> = zeroed(big, "test").unwrap();
        assert!(v.iter().all(|&x| x == 0));
        let w = filled(big, 7u32, "test").unwrap();
        assert_eq!((w.len(), w.iter().all(|&x| x == 7)), (big, true));
        let mut k: Vec<u8> = with_capacity(big * 8, "test").unwrap();
        k.extend(std::iter::repeat_n(9, 100));
        assert_eq!(k.iter().map(|&b| b as usize).sum::<usize>(), 900);
        // Small buffers are left alone (nothing to check but that they work).
        assert_eq!(filled(3, 1u8, "test").unwrap(), vec![1, 1, 1]);
        assert!(zeroed::<u8>(0, "test").unwrap().is_empty());
    }

    #[test]
    #[cfg_attr(
        miri,
        ignore = "Miri stops at an allocation beyond its memory instead of failing it"
    )]
    fn sizes_beyond_memory_are_errors_not_aborts() {
        for e in [
            zeroed::<u64>(usize::MAX / 8, "index").unwrap_err(),
            zeroed::<u64>(usize::MAX / 4, "index").unwrap_err(),
            filled(isize::MAX as usize / 4, 0u32, "links").unwrap_err(),
            with_capacity::<u64>(isize::MAX as usize / 8, "records").unwrap_err(),
        ] {
            assert!(matches!(e, crate::Error::OutOfMemory(_)), "{e}");
        }
    }
}
