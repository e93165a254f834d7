//! Transparent huge pages for the tier's large arrays.
//!
//! At millions of slots nearly every random access to the index, the keys,
//! the reference counts or the list links lands on a different 4 KiB page,
//! so it also misses the TLB and pays a page walk (itself a cache miss).
//! Backing the large arrays with 2 MiB pages removes most of those walks.
//! Where the kernel offers transparent huge pages only on request (its
//! `madvise` mode, the usual default), the arrays ask for them.  It is a
//! hint: it changes no contents, and a kernel without it ignores it.
//! Arrays under 2 MiB are left alone.  A cost: a touched 2 MiB page is
//! committed whole, so a large tier that is mostly empty holds more memory
//! than with 4 KiB pages (at most 2 MiB per array more, once it fills).

/// The huge page size asked for.
const HUGE_PAGE: usize = 2 << 20;

/// Asks for huge pages over the whole 2 MiB pages inside `v`'s buffer
/// (its capacity, used or not).
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
}

/// `n` copies of `value`, in a buffer that asked for huge pages before it
/// was written.
pub(crate) fn filled<T: Clone>(n: usize, value: T) -> Vec<T> {
    let mut v = Vec::with_capacity(n);
    advise(&v);
    v.resize(n, value);
    v
}

/// `n` zeros of an integer type: fresh zero pages from the allocator,
/// committed (as huge pages where granted) only when first written.
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
