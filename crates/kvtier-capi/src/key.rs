//! `kvtier_key`: how C passes keys, and their conversion to [`Key`].

use std::cell::Cell;

use super::boundary::{Failure, in_slice};
use kvtier_core::key::Key;

/// One key as C passes it: `len` bytes at `data` (1..=64 bytes).
///
/// The bytes are borrowed for the duration of the call only; kvtier copies
/// what it keeps.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct kvtier_key {
    /// First byte of the key; may be NULL only if `len` is 0 (which is an error).
    pub data: *const u8,
    /// Number of bytes, 1..=64.
    pub len: usize,
}

/// Copies `n` C keys at `keys` into `out` (cleared first), checking each.
///
/// # Safety
/// `keys` must be valid for reads of `n` entries, each naming `len` readable bytes.
pub(crate) unsafe fn read_keys(
    keys: *const kvtier_key,
    n: usize,
    out: &mut Vec<Key>,
) -> Result<(), Failure> {
    out.clear();
    let raw = unsafe { in_slice(keys, n, "keys") }?;
    kvtier_core::fallible::reserve(out, raw.len(), "copying the keys of a batch")?;
    for (index, k) in raw.iter().enumerate() {
        out.push(Key::FILLER);
        if let Some(slot) = out.last_mut() {
            unsafe { read_key_into(k, index, slot) }?;
        }
    }
    Ok(())
}

/// Checks the `n` C keys at `keys` (as [`read_keys`] does) and puts their
/// bytes, read in place, in `out` (cleared first).
///
/// # Safety
/// `keys` must be valid for reads of `n` entries, each naming `len`
/// readable bytes, for as long as `out` holds their bytes.
pub(crate) unsafe fn read_views(
    keys: *const kvtier_key,
    n: usize,
    out: &mut Vec<&[u8]>,
) -> Result<(), Failure> {
    out.clear();
    let raw = unsafe { in_slice(keys, n, "keys") }?;
    kvtier_core::fallible::reserve(out, raw.len(), "the keys of a batch")?;
    for (index, k) in raw.iter().enumerate() {
        out.push(unsafe { checked_key_bytes(k, index) }?);
    }
    Ok(())
}

thread_local! {
    /// This thread's buffer of key views, empty between calls.
    static VIEWS: Cell<Vec<&'static [u8]>> = const { Cell::new(Vec::new()) };
}

/// Runs `f` with this thread's (empty) buffer of key views, which keeps its
/// allocation from call to call: no allocation per call.  A call nested in
/// another (from a tier callback) gets a buffer of its own.
pub(crate) fn with_views<'a, R>(f: impl FnOnce(&mut Vec<&'a [u8]>) -> R) -> R {
    let mut views: Vec<&'a [u8]> = VIEWS.with(Cell::take);
    let result = f(&mut views);
    VIEWS.with(|cell| cell.set(recycled(views)));
    result
}

/// An empty vector with the allocation of `views`, for views of another
/// lifetime (the standard library collects a vector's `into_iter` of a
/// type of the same size and alignment in place).
fn recycled<'b>(mut views: Vec<&[u8]>) -> Vec<&'b [u8]> {
    views.clear();
    views.into_iter().map(|_| -> &'b [u8] { &[] }).collect()
}

/// Copies one C key into `out` (in place), naming `index` in the error;
/// `out` is left as it was on error.
///
/// # Safety
/// `key.data` must be valid for reads of `key.len` bytes.
pub(crate) unsafe fn read_key_into(
    key: &kvtier_key,
    index: usize,
    out: &mut Key,
) -> Result<(), Failure> {
    let bytes = unsafe { checked_key_bytes(key, index) }?;
    out.set_checked(bytes);
    Ok(())
}

/// Copies one C key, naming `index` in the error.
///
/// # Safety
/// `key.data` must be valid for reads of `key.len` bytes.
pub(crate) unsafe fn read_key(key: &kvtier_key, index: usize) -> Result<Key, Failure> {
    let bytes = unsafe { checked_key_bytes(key, index) }?;
    Ok(Key::at(bytes, index)?)
}

/// The bytes of one C key, checked (length 1..=64, data not null).
///
/// # Safety
/// `key.data` must be valid for reads of `key.len` bytes.
pub(crate) unsafe fn checked_key_bytes(key: &kvtier_key, index: usize) -> Result<&[u8], Failure> {
    if key.len == 0 || key.len > kvtier_core::key::MAX_KEY_LEN {
        return Err(Failure::Core(kvtier_core::Error::InvalidKey {
            index,
            reason: format!("key of {} bytes (keys are 1 to 64 bytes)", key.len),
        }));
    }
    if key.data.is_null() {
        return Err(Failure::Null("keys[].data"));
    }
    Ok(unsafe { std::slice::from_raw_parts(key.data, key.len) })
}

/// C keys, each checked (length 1..=64, data not null), to be read in
/// place: the bytes stay in the caller's memory for the call.
pub(crate) struct CheckedKeys<'a>(&'a [kvtier_key]);

impl<'a> CheckedKeys<'a> {
    /// Checks the `n` keys at `keys`; an error names the first bad one.
    ///
    /// # Safety
    /// `keys` must be valid for reads of `n` entries, each naming `len`
    /// readable bytes, for `'a`.
    pub(crate) unsafe fn new(keys: *const kvtier_key, n: usize) -> Result<Self, Failure> {
        let raw = unsafe { in_slice(keys, n, "keys") }?;
        for (i, k) in raw.iter().enumerate() {
            unsafe { checked_key_bytes(k, i) }?;
        }
        Ok(CheckedKeys(raw))
    }

    /// Number of keys.
    pub(crate) fn len(&self) -> usize {
        self.0.len()
    }

    /// The bytes of key `j` (`j < len`).
    #[inline(always)]
    pub(crate) fn bytes(&self, j: usize) -> &'a [u8] {
        let k = &self.0[j];
        // SAFETY: checked in `new`: not null, 1..=64 bytes, readable for 'a.
        unsafe { std::slice::from_raw_parts(k.data, k.len) }
    }
}

/// Longest key accepted, in bytes (keys are 1..=`KVTIER_MAX_KEY_LEN` bytes).
/// A literal, so that cbindgen emits it into the header.
pub const KVTIER_MAX_KEY_LEN: usize = 64;

const _: () = assert!(KVTIER_MAX_KEY_LEN == kvtier_core::key::MAX_KEY_LEN);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_views_buffer_keeps_its_allocation_from_call_to_call() {
        let (a, b) = ([1u8, 2], [3u8; 9]);
        let first = with_views(|v| {
            v.extend([&a[..], &b[..]]);
            v.reserve(100);
            (v.as_ptr() as usize, v.capacity())
        });
        let second = with_views(|v| {
            assert!(v.is_empty());
            (v.as_ptr() as usize, v.capacity())
        });
        assert_eq!(first, second);
    }
}
