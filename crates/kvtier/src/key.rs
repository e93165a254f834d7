//! The key type: an opaque byte string of 1..=64 bytes naming one block.
//!
//! Keys are stored inline (no heap allocation per key) and compared bytewise.
//! vLLM uses `block_hash || u32_be(group_index)`; other engines use 8-byte
//! hashes or hex strings.  kvtier never interprets the bytes.

use std::fmt;
use std::hash::{Hash, Hasher};

use crate::error::Error;

/// Longest key accepted, in bytes.
pub const MAX_KEY_LEN: usize = 64;

/// One block's name: 1..=64 opaque bytes, stored inline.
///
/// The length comes first (`repr(C)`): a comparison of a short key then
/// reads the first bytes of the struct only, usually one cache line.
#[derive(Clone, Copy)]
#[repr(C)]
pub struct Key {
    len: u8,
    bytes: [u8; MAX_KEY_LEN],
}

/// What a key can be read from without copying it: a [`Key`], a
/// [`KeyRef`], or (inside the crate) bytes already checked to be 1..=64
/// long.  The one code path of each call is generic over it, so keys
/// borrowed from the caller need not be copied into [`Key`]s first.
pub(crate) trait KeyBytes {
    /// The key's bytes.
    fn key_bytes(&self) -> &[u8];

    /// Keeping the key takes two steps, so that bytes are written where
    /// the key is kept (a key built elsewhere and copied stalls: see
    /// [`Key::assign`]): put `keep_value()` there, then call
    /// `keep_finish` on it.  A [`Key`] is kept whole in the first step.
    fn keep_value(&self) -> Key;

    /// Second step of keeping the key (see [`KeyBytes::keep_value`]).
    fn keep_finish(&self, kept: &mut Key);
}

impl KeyBytes for Key {
    #[inline(always)]
    fn key_bytes(&self) -> &[u8] {
        self.as_bytes()
    }

    #[inline(always)]
    fn keep_value(&self) -> Key {
        *self
    }

    #[inline(always)]
    fn keep_finish(&self, _kept: &mut Key) {}
}

impl KeyBytes for [u8] {
    #[inline(always)]
    fn key_bytes(&self) -> &[u8] {
        self
    }

    #[inline(always)]
    fn keep_value(&self) -> Key {
        Key::FILLER
    }

    /// Checked bytes (1..=64) only: others leave `kept` as it was.
    #[inline]
    fn keep_finish(&self, kept: &mut Key) {
        if (1..=MAX_KEY_LEN).contains(&self.len()) {
            kept.set_checked(self);
        }
    }
}

impl KeyBytes for KeyRef<'_> {
    #[inline(always)]
    fn key_bytes(&self) -> &[u8] {
        self.0
    }

    #[inline(always)]
    fn keep_value(&self) -> Key {
        Key::FILLER
    }

    #[inline(always)]
    fn keep_finish(&self, kept: &mut Key) {
        kept.set(*self);
    }
}

/// A key's bytes borrowed where they are, checked to be 1..=64 long: a
/// key read in place, without copying it into a [`Key`] (the C API reads
/// the keys C passes so).  Compares, hashes and orders as the [`Key`] of
/// the same bytes would.
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct KeyRef<'a>(&'a [u8]);

impl<'a> KeyRef<'a> {
    /// The key `bytes`; empty or longer than [`MAX_KEY_LEN`] is an error.
    #[inline]
    pub fn new(bytes: &'a [u8]) -> Result<KeyRef<'a>, Error> {
        Self::at(bytes, 0)
    }

    /// Like [`KeyRef::new`], naming `index` (the key's position in its
    /// batch) in the error, as [`Key::at`] does.
    #[inline]
    pub fn at(bytes: &'a [u8], index: usize) -> Result<KeyRef<'a>, Error> {
        check_len(bytes.len(), index)?;
        Ok(KeyRef(bytes))
    }

    /// The key's bytes.
    #[inline(always)]
    pub fn as_bytes(&self) -> &'a [u8] {
        self.0
    }

    /// Number of bytes in the key (1..=64).
    #[inline]
    #[allow(clippy::len_without_is_empty)]
    pub fn len(&self) -> usize {
        self.0.len()
    }
}

impl<'a> KeyRef<'a> {
    /// A key filler for fixed arrays written before they are read.
    pub(crate) const FILLER: KeyRef<'static> = KeyRef(&[0]);

    /// Bytes known to be 1..=64 long (a key of a [`KeyBatch`]).
    #[inline(always)]
    pub(crate) fn checked(bytes: &'a [u8]) -> KeyRef<'a> {
        debug_assert!((1..=MAX_KEY_LEN).contains(&bytes.len()));
        KeyRef(bytes)
    }
}

impl fmt::Debug for KeyRef<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "KeyRef({})", hex(self.0))
    }
}

impl From<KeyRef<'_>> for Key {
    #[inline]
    fn from(key: KeyRef<'_>) -> Key {
        let mut k = Key::FILLER;
        k.set(key);
        k
    }
}

impl<'a> From<&'a Key> for KeyRef<'a> {
    #[inline]
    fn from(key: &'a Key) -> KeyRef<'a> {
        KeyRef(key.as_bytes())
    }
}

/// The keys of one call, read where they are: [`Key`]s, or [`KeyRef`]s
/// (bytes the caller keeps, each checked once when its [`KeyRef`] was
/// made).  Every call that takes a batch of keys takes
/// `impl Into<KeyBatch>`: a slice, vector or array of either kind.
#[derive(Clone, Copy, Debug)]
pub enum KeyBatch<'a> {
    /// Keys owned by the caller.
    Keys(&'a [Key]),
    /// Keys borrowed in place.
    Refs(&'a [KeyRef<'a>]),
}

impl<'a> KeyBatch<'a> {
    /// Number of keys.
    #[inline]
    pub fn len(&self) -> usize {
        match self {
            KeyBatch::Keys(k) => k.len(),
            KeyBatch::Refs(r) => r.len(),
        }
    }

    /// Whether the batch has no key.
    #[inline]
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Key `i` (`None` past the end).
    #[inline]
    pub fn get(&self, i: usize) -> Option<KeyRef<'a>> {
        match *self {
            KeyBatch::Keys(k) => k.get(i).map(KeyRef::from),
            KeyBatch::Refs(r) => r.get(i).copied(),
        }
    }

    /// The keys in order.
    pub fn iter(&self) -> impl Iterator<Item = KeyRef<'a>> + '_ {
        (0..self.len()).filter_map(|i| self.get(i))
    }
}

impl<'a> From<&'a [Key]> for KeyBatch<'a> {
    #[inline]
    fn from(keys: &'a [Key]) -> KeyBatch<'a> {
        KeyBatch::Keys(keys)
    }
}

impl<'a> From<&'a Vec<Key>> for KeyBatch<'a> {
    #[inline]
    fn from(keys: &'a Vec<Key>) -> KeyBatch<'a> {
        KeyBatch::Keys(keys)
    }
}

impl<'a, const N: usize> From<&'a [Key; N]> for KeyBatch<'a> {
    #[inline]
    fn from(keys: &'a [Key; N]) -> KeyBatch<'a> {
        KeyBatch::Keys(keys)
    }
}

impl<'a> From<&'a [KeyRef<'a>]> for KeyBatch<'a> {
    #[inline]
    fn from(keys: &'a [KeyRef<'a>]) -> KeyBatch<'a> {
        KeyBatch::Refs(keys)
    }
}

impl<'a> From<&'a Vec<KeyRef<'a>>> for KeyBatch<'a> {
    #[inline]
    fn from(keys: &'a Vec<KeyRef<'a>>) -> KeyBatch<'a> {
        KeyBatch::Refs(keys)
    }
}

/// Runs `$body` with `$k` bound to the slice of a [`KeyBatch`], whichever
/// its kind: one code path, compiled for [`Key`]s and for [`KeyRef`]s,
/// with the kind looked at once per call and not once per key.
macro_rules! with_keys {
    ($batch:expr, |$k:ident| $body:expr) => {
        match $batch {
            $crate::key::KeyBatch::Keys($k) => $body,
            $crate::key::KeyBatch::Refs($k) => $body,
        }
    };
}
pub(crate) use with_keys;

/// The key length rule: a length out of 1..=[`MAX_KEY_LEN`] is
/// [`Error::InvalidKey`] naming `index` (the key's position in its batch).
/// [`Key::at`] and [`KeyRef::at`] apply it; a caller that holds a key's
/// length before its bytes (a C key, whose pointer may be NULL when its
/// length is 0) checks it first with this.
#[inline]
pub fn check_len(len: usize, index: usize) -> Result<(), Error> {
    if len == 0 {
        return Err(Error::InvalidKey {
            index,
            reason: "empty key (keys are 1 to 64 bytes)".into(),
        });
    }
    if len > MAX_KEY_LEN {
        return Err(Error::InvalidKey {
            index,
            reason: format!("key of {len} bytes (keys are 1 to 64 bytes)"),
        });
    }
    Ok(())
}

/// Lower-case hex of `bytes` (two characters per byte).
pub(crate) fn hex(bytes: &[u8]) -> String {
    let mut s = String::with_capacity(bytes.len() * 2);
    for b in bytes {
        s.push(char::from(HEX[(b >> 4) as usize]));
        s.push(char::from(HEX[(b & 15) as usize]));
    }
    s
}

impl Key {
    /// A valid one-byte key (a single zero byte): filler for arrays whose
    /// keys are written before they are read (see [`Key::set`]).
    pub const FILLER: Key = Key {
        len: 1,
        bytes: [0; MAX_KEY_LEN],
    };

    /// Builds a key from `bytes`; empty or longer than [`MAX_KEY_LEN`] is an error.
    pub fn new(bytes: &[u8]) -> Result<Key, Error> {
        Self::at(bytes, 0)
    }

    /// Like [`Key::new`], naming `index` (the key's position in its batch) in the error.
    pub fn at(bytes: &[u8], index: usize) -> Result<Key, Error> {
        let mut key = Key::FILLER;
        key.assign(bytes, index)?;
        Ok(key)
    }

    /// Makes this key `bytes`, in place; an empty or too long `bytes` is an
    /// error naming `index` (the key's position in its batch), and leaves
    /// the key as it was.  Filling a key where it is kept (a slot of a
    /// vector) spares a copy of a freshly written key, which the CPU
    /// cannot forward from its store buffer and stalls on.
    #[inline]
    pub fn assign(&mut self, bytes: &[u8], index: usize) -> Result<(), Error> {
        check_len(bytes.len(), index)?;
        self.set_checked(bytes);
        Ok(())
    }

    /// Makes this key `key`, in place (its length was checked when the
    /// [`KeyRef`] was made): a batch's keys are copied so, each into the
    /// slot of the vector that keeps it (filled with [`Key::FILLER`]
    /// first), which spares a copy of a freshly written key.
    #[inline(always)]
    pub fn set(&mut self, key: KeyRef<'_>) {
        self.set_checked(key.0);
    }

    /// [`Key::assign`] of bytes known to be 1..=64 long.
    #[inline(always)]
    pub(crate) fn set_checked(&mut self, bytes: &[u8]) {
        debug_assert!((1..=MAX_KEY_LEN).contains(&bytes.len()));
        self.bytes = [0; MAX_KEY_LEN];
        copy_key_bytes(&mut self.bytes, bytes);
        self.len = bytes.len() as u8;
    }

    /// The key's bytes.
    #[inline]
    pub fn as_bytes(&self) -> &[u8] {
        &self.bytes[..self.len as usize]
    }

    /// Number of bytes in the key (1..=64).
    #[inline]
    #[allow(clippy::len_without_is_empty)]
    pub fn len(&self) -> usize {
        self.len as usize
    }

    /// Lower-case hex of the key's bytes (two characters per byte).
    pub fn to_hex(&self) -> String {
        hex(self.as_bytes())
    }
}

const HEX: &[u8; 16] = b"0123456789abcdef";

/// Copies `src` (1..=64 bytes) to the start of `dst` in a few fixed-size
/// pieces that may overlap (16-byte pieces from 16 bytes on, 8- or 4-byte
/// ones below): inline, without a call into `memcpy`, whose call costs
/// more than the copy of a usual key (8 to 40 bytes).
#[inline(always)]
fn copy_key_bytes(dst: &mut [u8; MAX_KEY_LEN], src: &[u8]) {
    #[inline(always)]
    fn piece<const W: usize>(dst: &mut [u8; MAX_KEY_LEN], src: &[u8], at: usize) {
        dst[at..at + W].copy_from_slice(&src[at..at + W]);
    }
    let n = src.len();
    if n >= 16 {
        piece::<16>(dst, src, 0);
        if n > 32 {
            piece::<16>(dst, src, 16);
            piece::<16>(dst, src, n - 32);
        }
        piece::<16>(dst, src, n - 16);
    } else if n >= 8 {
        piece::<8>(dst, src, 0);
        piece::<8>(dst, src, n - 8);
    } else if n >= 4 {
        piece::<4>(dst, src, 0);
        piece::<4>(dst, src, n - 4);
    } else {
        for (d, s) in dst.iter_mut().zip(src) {
            *d = *s;
        }
    }
}

impl PartialEq for Key {
    #[inline]
    fn eq(&self, other: &Key) -> bool {
        same_bytes(self.as_bytes(), other.as_bytes())
    }
}

/// Whether key bytes `a` and `b` are equal: lengths, then 8-byte words
/// (the last one overlapping), without a call into `memcmp`, whose call
/// costs more than comparing a usual key (8 to 40 bytes).  A key of 8 to
/// 16 bytes is its first and last words, compared together without a
/// loop.
#[inline(always)]
pub(crate) fn same_bytes(a: &[u8], b: &[u8]) -> bool {
    let n = a.len();
    if n != b.len() {
        return false;
    }
    if n < 8 {
        return a == b;
    }
    let word = |s: &[u8], i: usize| u64::from_ne_bytes(s[i..i + 8].try_into().unwrap_or([0; 8]));
    if n <= 16 {
        return (word(a, 0) ^ word(b, 0)) | (word(a, n - 8) ^ word(b, n - 8)) == 0;
    }
    let mut i = 0;
    while i + 8 < n {
        if word(a, i) != word(b, i) {
            return false;
        }
        i += 8;
    }
    word(a, n - 8) == word(b, n - 8)
}

impl Eq for Key {}

impl Hash for Key {
    #[inline]
    fn hash<H: Hasher>(&self, state: &mut H) {
        state.write(self.as_bytes());
    }
}

impl PartialOrd for Key {
    fn partial_cmp(&self, other: &Key) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for Key {
    fn cmp(&self, other: &Key) -> std::cmp::Ordering {
        self.as_bytes().cmp(other.as_bytes())
    }
}

impl fmt::Debug for Key {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Key({})", self.to_hex())
    }
}

impl fmt::Display for Key {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.to_hex())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_key_ref_is_checked_when_made_and_reads_as_the_key_of_its_bytes() {
        assert!(matches!(
            KeyRef::at(&[], 2),
            Err(Error::InvalidKey { index: 2, .. })
        ));
        assert!(matches!(
            KeyRef::at(&[0; 65], 3),
            Err(Error::InvalidKey { index: 3, .. })
        ));
        let bytes: Vec<u8> = (1..=40).collect();
        let r = KeyRef::new(&bytes).unwrap();
        assert_eq!((r.as_bytes(), r.len()), (&bytes[..], 40));
        let k = Key::from(r);
        assert_eq!(k, Key::new(&bytes).unwrap());
        assert_eq!(KeyRef::from(&k), r);
        // `set` rewrites a longer key in place, nothing left past the end.
        let mut long = Key::new(&[0xff; 64]).unwrap();
        long.set(r);
        assert_eq!(long, k);
        assert!(long.bytes[40..].iter().all(|&b| b == 0));
    }

    #[test]
    fn a_key_ref_is_read_and_kept_as_the_key_of_its_bytes() {
        let bytes: Vec<u8> = (1..=20).collect();
        let r = KeyRef::new(&bytes).unwrap();
        assert_eq!(r.key_bytes(), &bytes[..]);
        // Kept in two steps, as the tiers keep it: the filler, then the bytes.
        let mut kept = r.keep_value();
        r.keep_finish(&mut kept);
        assert_eq!(kept, Key::new(&bytes).unwrap());
        // Over a longer key kept before, nothing of it left.
        let mut kept = Key::new(&[0xff; 64]).unwrap();
        r.keep_finish(&mut kept);
        assert_eq!(kept.as_bytes(), &bytes[..]);
    }

    #[test]
    fn a_key_ref_debugs_as_the_hex_of_its_bytes() {
        let r = KeyRef::new(&[0x01, 0xab, 0xf0]).unwrap();
        assert_eq!(format!("{r:?}"), "KeyRef(01abf0)");
    }

    #[test]
    fn a_batch_of_either_kind_lists_the_same_keys() {
        let keys = vec![Key::new(b"a").unwrap(), Key::new(b"bcd").unwrap()];
        let refs = vec![KeyRef::new(b"a").unwrap(), KeyRef::new(b"bcd").unwrap()];
        let batches = [
            KeyBatch::from(&keys),
            KeyBatch::from(&keys[..]),
            KeyBatch::from(&refs),
            KeyBatch::from(&refs[..]),
        ];
        for batch in batches {
            assert_eq!((batch.len(), batch.is_empty()), (2, false));
            let listed: Vec<&[u8]> = batch.iter().map(|k| k.as_bytes()).collect();
            assert_eq!(listed, [&b"a"[..], &b"bcd"[..]]);
            assert_eq!(batch.get(2), None);
        }
        let none: [Key; 0] = [];
        assert!(KeyBatch::from(&none).is_empty());
    }

    #[test]
    fn key_equality_is_byte_equality_at_every_length_and_position() {
        for n in 1..=MAX_KEY_LEN {
            let a: Vec<u8> = (0..n as u8).map(|b| b.wrapping_mul(37)).collect();
            let ka = Key::new(&a).unwrap();
            assert_eq!(ka, Key::new(&a).unwrap(), "{n} bytes");
            for at in 0..n {
                let mut b = a.clone();
                b[at] ^= 0x80;
                assert_ne!(ka, Key::new(&b).unwrap(), "{n} bytes, byte {at} differs");
            }
            // A prefix is another key.
            if n > 1 {
                assert_ne!(ka, Key::new(&a[..n - 1]).unwrap(), "{n} bytes");
            }
        }
    }

    #[test]
    fn same_bytes_of_8_to_16_bytes_sees_a_difference_in_either_word() {
        // Around the two-word path: 7, 8 to 16 and 17 bytes, each byte
        // changed in turn (in the first word, the overlap, the last word),
        // and slices of different lengths sharing a prefix.
        let a: Vec<u8> = (1..=17).collect();
        for n in 7..=17 {
            let copy = a[..n].to_vec();
            assert!(same_bytes(&a[..n], &copy), "{n} bytes");
            for at in 0..n {
                let mut b = a[..n].to_vec();
                b[at] = 0;
                assert!(!same_bytes(&a[..n], &b), "{n} bytes, byte {at} differs");
                assert!(!same_bytes(&b, &a[..n]), "{n} bytes, byte {at} differs");
            }
            assert!(!same_bytes(&a[..n], &a[..n - 1]), "{n} bytes");
        }
    }

    #[test]
    fn assign_rewrites_in_place_and_a_bad_key_changes_nothing() {
        let long: Vec<u8> = (1..=64).collect();
        let mut k = Key::new(&long).unwrap();
        k.assign(b"abc", 0).unwrap();
        assert_eq!(k, Key::new(b"abc").unwrap());
        assert_eq!(k.as_bytes(), b"abc");
        // Nothing of the longer key is left past the new length.
        assert_eq!(k.bytes[3..], [0u8; MAX_KEY_LEN - 3]);
        assert!(matches!(
            k.assign(&[], 5),
            Err(Error::InvalidKey { index: 5, .. })
        ));
        assert!(matches!(
            k.assign(&[1; 65], 6),
            Err(Error::InvalidKey { index: 6, .. })
        ));
        assert_eq!(k.as_bytes(), b"abc");
    }

    #[test]
    fn every_length_is_copied_whole_and_nothing_past_it() {
        let src: Vec<u8> = (1..=64).collect();
        for n in 1..=64 {
            let mut k = Key::new(&[0xff; 64]).unwrap();
            k.assign(&src[..n], 0).unwrap();
            assert_eq!(k.as_bytes(), &src[..n], "{n} bytes");
            assert!(k.bytes[n..].iter().all(|&b| b == 0), "{n} bytes");
        }
    }

    #[test]
    fn accepts_one_to_sixty_four_bytes() {
        assert_eq!(Key::new(&[7]).unwrap().as_bytes(), &[7]);
        let long = [0xabu8; 64];
        assert_eq!(Key::new(&long).unwrap().len(), 64);
    }

    #[test]
    fn rejects_empty_and_long_keys_naming_the_position() {
        let e = Key::at(&[], 3).unwrap_err().to_string();
        assert!(e.contains("position 3") && e.contains("empty"), "{e}");
        let e = Key::at(&[0u8; 65], 5).unwrap_err().to_string();
        assert!(e.contains("position 5") && e.contains("65 bytes"), "{e}");
    }

    #[test]
    fn compares_bytewise_regardless_of_padding() {
        let a = Key::new(b"ab").unwrap();
        let b = Key::new(b"ab\0").unwrap();
        assert_ne!(a, b);
        assert_eq!(a, Key::new(b"ab").unwrap());
        assert_eq!(a.to_hex(), "6162");
    }
}
