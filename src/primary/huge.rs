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

/// The huge page size asked for.
const HUGE_PAGE: usize = 2 << 20;

/// Asks for huge pages over the whole 2 MiB pages inside `v`'s buffer
/// (its capacity, used or not), then commits the buffer.
pub(crate) fn advise<T>(v: &Vec<T>) {
    let bytes = v.capacity() * std::mem::size_of::<T>();
    if bytes < 2 * HUGE_PAGE {
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
/// was written.
pub(crate) fn filled<T: Clone>(n: usize, value: T) -> Vec<T> {
    let mut v = Vec::with_capacity(n);
    advise(&v);
    v.resize(n, value);
    v
}

/// `n` zeros of an integer type: fresh zero pages from the allocator
/// (never written by us), committed at once.
pub(crate) fn zeroed<T: ZeroInt>(n: usize) -> Vec<T> {
    let v = vec![T::ZERO; n];
    advise(&v);
    v
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

/// An empty vector with room for `n` elements, its buffer advised.
pub(crate) fn with_capacity<T>(n: usize) -> Vec<T> {
    let v = Vec::with_capacity(n);
    advise(&v);
    v
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn advised_buffers_keep_their_contents() {
        let big = 3 * HUGE_PAGE / 8 + 5;
        let v: Vec<u64> = zeroed(big);
        assert!(v.iter().all(|&x| x == 0));
        let w = filled(big, 7u32);
        assert_eq!((w.len(), w.iter().all(|&x| x == 7)), (big, true));
        let mut k: Vec<u8> = with_capacity(big * 8);
        k.extend(std::iter::repeat_n(9, 100));
        assert_eq!(k.iter().map(|&b| b as usize).sum::<usize>(), 900);
        // Small buffers are left alone (nothing to check but that they work).
        assert_eq!(filled(3, 1u8), vec![1, 1, 1]);
    }
}
