//! Fallible allocation for sizes the caller chooses.
//!
//! A capacity, a batch of keys, a table bound: whatever size comes from the
//! caller is allocated through these helpers, so memory that cannot be had
//! becomes [`Error::OutOfMemory`] (naming what was being allocated and how
//! many bytes) instead of aborting the process.  Nothing is allocated when
//! the room is already there, so calling them at the start of every batch
//! costs a comparison.

use crate::error::{Error, Result};

/// The error for `count` more items of `T` that could not be allocated for `what`.
pub fn out_of_memory<T>(what: &str, count: usize) -> Error {
    let size = std::mem::size_of::<T>();
    match count.checked_mul(size) {
        Some(bytes) => Error::OutOfMemory(format!(
            "{what}: {count} entries of {size} bytes ({bytes} bytes) could not be allocated"
        )),
        None => Error::OutOfMemory(format!(
            "{what}: {count} entries of {size} bytes are more than the address space holds"
        )),
    }
}

/// Makes room in `v` for `additional` more items (amortized growth).
#[inline]
pub fn reserve<T>(v: &mut Vec<T>, additional: usize, what: &str) -> Result<()> {
    if v.capacity() - v.len() >= additional {
        return Ok(());
    }
    v.try_reserve(additional)
        .map_err(|_| out_of_memory::<T>(what, additional))
}

/// Makes room in `v` for exactly `additional` more items.
pub fn reserve_exact<T>(v: &mut Vec<T>, additional: usize, what: &str) -> Result<()> {
    if v.capacity() - v.len() >= additional {
        return Ok(());
    }
    v.try_reserve_exact(additional)
        .map_err(|_| out_of_memory::<T>(what, additional))
}

/// An empty vector with room for exactly `n` items.
pub fn with_capacity<T>(n: usize, what: &str) -> Result<Vec<T>> {
    let mut v = Vec::new();
    reserve_exact(&mut v, n, what)?;
    Ok(v)
}

/// Makes room in `table` for `additional` more entries, rehashing existing
/// ones with `hasher` if it must grow.
#[inline]
pub fn reserve_table<T>(
    table: &mut hashbrown::HashTable<T>,
    additional: usize,
    hasher: impl Fn(&T) -> u64,
    what: &str,
) -> Result<()> {
    if table.capacity() - table.len() >= additional {
        return Ok(());
    }
    table
        .try_reserve(additional, hasher)
        .map_err(|_| out_of_memory::<(u64, T)>(what, additional))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn impossible_sizes_are_errors_and_possible_ones_allocate() {
        let e = with_capacity::<u64>(usize::MAX / 4, "a test array").unwrap_err();
        assert!(matches!(e, Error::OutOfMemory(_)), "{e}");
        assert!(e.to_string().contains("a test array"), "{e}");
        let e = with_capacity::<u8>(isize::MAX as usize, "bytes").unwrap_err();
        assert!(matches!(e, Error::OutOfMemory(_)), "{e}");
        let mut v = with_capacity(3, "small").unwrap();
        v.extend([7u32; 3]);
        reserve(&mut v, 100, "small").unwrap();
        assert!(v.capacity() >= 103);
        assert!(reserve(&mut v, usize::MAX, "huge").is_err());
        assert_eq!(v, [7, 7, 7], "a failed reservation changes nothing");
        let mut t = hashbrown::HashTable::<u32>::new();
        reserve_table(&mut t, 10, |&x| x as u64, "table").unwrap();
        assert!(t.capacity() >= 10);
        assert!(reserve_table(&mut t, usize::MAX / 2, |&x| x as u64, "table").is_err());
    }
}
