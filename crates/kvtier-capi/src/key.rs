//! `kvtier_key`: how C passes keys, and their conversion to [`Key`].

use std::cell::Cell;

use super::boundary::{Failure, in_slice};
use kvtier_core::key::{Key, KeyRef};

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

/// Checks the `n` C keys at `keys` and puts them, read in place, in `out`
/// (cleared first): the batch every call of a request's keys takes.
///
/// # Safety
/// `keys` must be valid for reads of `n` entries, each naming `len`
/// readable bytes, for as long as `out` holds their bytes.
pub(crate) unsafe fn read_views<'a>(
    keys: *const kvtier_key,
    n: usize,
    out: &mut Vec<KeyRef<'a>>,
) -> Result<(), Failure> {
    out.clear();
    let raw = unsafe { in_slice(keys, n, "keys") }?;
    kvtier_core::fallible::reserve(out, raw.len(), "the keys of a batch")?;
    // One pass checks each key and writes its view into the reserved room;
    // a bad key stops it, and is named by the checks of `key_ref`.
    let room = out.spare_capacity_mut()[..raw.len()].iter_mut();
    for (index, (v, k)) in room.zip(raw).enumerate() {
        v.write(if plausible(k) {
            unsafe { checked_ref(k) }
        } else {
            unsafe { key_ref(k, index) }?
        });
    }
    // SAFETY: the first `raw.len()` entries were written above.
    unsafe { out.set_len(raw.len()) };
    Ok(())
}

/// Whether `key` passes [`key_ref`]'s checks: length 1..=64, data not null.
#[inline(always)]
fn plausible(key: &kvtier_key) -> bool {
    (key.len.wrapping_sub(1) < kvtier_core::key::MAX_KEY_LEN) & !key.data.is_null()
}

/// `key` read in place, its checks known to pass ([`plausible`]).
///
/// # Safety
/// `plausible(key)`, and `key.data` valid for reads of `key.len` bytes for `'a`.
#[inline(always)]
unsafe fn checked_ref<'a>(key: &kvtier_key) -> KeyRef<'a> {
    match KeyRef::new(unsafe { std::slice::from_raw_parts(key.data, key.len) }) {
        Ok(k) => k,
        // SAFETY: the length was checked (`plausible`), the one thing
        // `KeyRef::new` checks.
        Err(_) => unsafe { std::hint::unreachable_unchecked() },
    }
}

thread_local! {
    /// This thread's buffer of key views, empty between calls.
    static VIEWS: Cell<Vec<KeyRef<'static>>> = const { Cell::new(Vec::new()) };
}

/// Runs `f` with this thread's (empty) buffer of key views, which keeps its
/// allocation from call to call: no allocation per call.  A call nested in
/// another (from a tier callback) gets a buffer of its own.
pub(crate) fn with_views<'a, R>(f: impl FnOnce(&mut Vec<KeyRef<'a>>) -> R) -> R {
    let mut views: Vec<KeyRef<'a>> = VIEWS.with(Cell::take);
    let result = f(&mut views);
    VIEWS.with(|cell| cell.set(recycled(views)));
    result
}

/// The `n` C keys at `keys`, checked and read in place, handed to `f` as
/// one batch (in this thread's buffer of views: [`with_views`]).
///
/// # Safety
/// As [`read_views`]'s.
pub(crate) unsafe fn with_keys<'a, R>(
    keys: *const kvtier_key,
    n: usize,
    f: impl FnOnce(&[KeyRef<'a>]) -> Result<R, Failure>,
) -> Result<R, Failure> {
    with_views(|views| {
        unsafe { read_views(keys, n, views) }?;
        f(views)
    })
}

/// An empty vector with the allocation of `views`, for views of another
/// lifetime (the standard library collects a vector's `into_iter` of a
/// type of the same size and alignment in place).
fn recycled<'b>(mut views: Vec<KeyRef<'_>>) -> Vec<KeyRef<'b>> {
    static NONE: Key = Key::FILLER;
    views.clear();
    views.into_iter().map(|_| KeyRef::from(&NONE)).collect()
}

/// Copies one C key, naming `index` in the error.
///
/// # Safety
/// `key.data` must be valid for reads of `key.len` bytes.
pub(crate) unsafe fn read_key(key: &kvtier_key, index: usize) -> Result<Key, Failure> {
    Ok(Key::from(unsafe { key_ref(key, index) }?))
}

/// One C key, checked (length 1..=64, data not null) and read in place.
///
/// # Safety
/// `key.data` must be valid for reads of `key.len` bytes for `'a`.
#[inline(always)]
pub(crate) unsafe fn key_ref<'a>(key: &kvtier_key, index: usize) -> Result<KeyRef<'a>, Failure> {
    kvtier_core::key::check_len(key.len, index)?;
    if key.data.is_null() {
        return Err(Failure::Null("keys[].data"));
    }
    Ok(KeyRef::at(
        unsafe { std::slice::from_raw_parts(key.data, key.len) },
        index,
    )?)
}

/// Longest key accepted, in bytes (keys are 1..=`KVTIER_MAX_KEY_LEN` bytes).
/// A literal, so that cbindgen emits it into the header.
pub const KVTIER_MAX_KEY_LEN: usize = 64;

const _: () = assert!(KVTIER_MAX_KEY_LEN == kvtier_core::key::MAX_KEY_LEN);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_key_length_out_of_range_is_an_invalid_key_whatever_its_data() {
        let bytes = [7u8; 65];
        for len in [0, 65] {
            for data in [std::ptr::null(), bytes.as_ptr()] {
                let k = kvtier_key { data, len };
                let r = unsafe { key_ref(&k, 4) };
                assert!(
                    matches!(
                        r,
                        Err(Failure::Core(kvtier_core::Error::InvalidKey {
                            index: 4,
                            ..
                        }))
                    ),
                    "{len} bytes at {data:?}: {r:?}"
                );
            }
        }
        let k = kvtier_key {
            data: std::ptr::null(),
            len: 1,
        };
        assert!(matches!(
            unsafe { key_ref(&k, 0) },
            Err(Failure::Null("keys[].data"))
        ));
        let k = kvtier_key {
            data: bytes.as_ptr(),
            len: 64,
        };
        assert_eq!(unsafe { key_ref(&k, 0) }.unwrap().as_bytes(), &bytes[..64]);
    }

    #[test]
    fn a_batch_is_read_into_a_cleared_vector_of_views_and_a_bad_key_is_named_by_position() {
        let (a, b) = ([1u8, 2], [3u8; 9]);
        let good = [
            kvtier_key {
                data: a.as_ptr(),
                len: 2,
            },
            kvtier_key {
                data: b.as_ptr(),
                len: 9,
            },
        ];
        let nine = [9u8];
        let mut views = vec![KeyRef::new(&nine).unwrap()];
        unsafe { read_views(good.as_ptr(), 2, &mut views) }.unwrap();
        assert_eq!(views, [KeyRef::new(&a).unwrap(), KeyRef::new(&b).unwrap()]);
        let bad = [
            good[0],
            good[1],
            kvtier_key {
                data: a.as_ptr(),
                len: 0,
            },
        ];
        assert!(matches!(
            unsafe { read_views(bad.as_ptr(), 3, &mut views) },
            Err(Failure::Core(kvtier_core::Error::InvalidKey {
                index: 2,
                ..
            }))
        ));
    }

    #[test]
    fn the_one_pass_check_accepts_exactly_the_keys_key_ref_accepts() {
        let bytes = [7u8; 66];
        for len in [0, 1, 2, 63, 64, 65, usize::MAX] {
            for data in [std::ptr::null(), bytes.as_ptr()] {
                let k = kvtier_key { data, len };
                let ok = unsafe { key_ref(&k, 0) }.is_ok();
                assert_eq!(plausible(&k), ok, "{len} bytes at {data:?}");
            }
        }
        // A batch with one bad key among good ones names it, and leaves
        // the views empty.
        let good = kvtier_key {
            data: bytes.as_ptr(),
            len: 3,
        };
        let bad = kvtier_key {
            data: std::ptr::null(),
            len: 3,
        };
        let mut views = Vec::new();
        for at in 0..4 {
            let mut batch = [good; 4];
            batch[at] = bad;
            let r = unsafe { read_views(batch.as_ptr(), 4, &mut views) };
            assert!(matches!(r, Err(Failure::Null("keys[].data"))), "{at}");
            assert!(views.is_empty());
        }
    }

    #[test]
    fn the_views_buffer_keeps_its_allocation_from_call_to_call() {
        let (a, b) = ([1u8, 2], [3u8; 9]);
        let first = with_views(|v| {
            v.extend([KeyRef::new(&a).unwrap(), KeyRef::new(&b).unwrap()]);
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
