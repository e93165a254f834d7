//! The byte-level encoding of the server protocol: little-endian numbers,
//! length-prefixed strings and key batches, written into a reused buffer
//! ([`Writer`]) and read back with every length checked against what is
//! left ([`Reader`]).  A reader never trusts a count: a count larger than
//! the bytes that could carry it is [`Malformed`], before any allocation.

use crate::key::{Key, KeyBatch};
use crate::{Error, MAX_KEY_LEN};

/// A frame that does not decode: what was being read when it ran out or
/// made no sense.  The server closes the connection that sent it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Malformed(pub &'static str);

impl From<Malformed> for Error {
    fn from(m: Malformed) -> Error {
        Error::InvalidArgument(format!("server protocol: malformed message: {}", m.0))
    }
}

// A key's length is written as one byte.
const _: () = assert!(MAX_KEY_LEN < 256);

/// Appends encoded values to a byte buffer.
pub struct Writer<'a> {
    buf: &'a mut Vec<u8>,
}

impl<'a> Writer<'a> {
    /// A writer appending to `buf`.
    pub fn new(buf: &'a mut Vec<u8>) -> Writer<'a> {
        Writer { buf }
    }
    /// One byte.
    pub fn u8(&mut self, v: u8) -> &mut Self {
        self.buf.push(v);
        self
    }
    /// A boolean, as one byte 0 or 1.
    pub fn bool(&mut self, v: bool) -> &mut Self {
        self.u8(u8::from(v))
    }
    /// A 32-bit number.
    pub fn u32(&mut self, v: u32) -> &mut Self {
        self.buf.extend_from_slice(&v.to_le_bytes());
        self
    }
    /// A 64-bit number.
    pub fn u64(&mut self, v: u64) -> &mut Self {
        self.buf.extend_from_slice(&v.to_le_bytes());
        self
    }
    /// A signed 32-bit number.
    pub fn i32(&mut self, v: i32) -> &mut Self {
        self.buf.extend_from_slice(&v.to_le_bytes());
        self
    }
    /// A 64-bit float.
    pub fn f64(&mut self, v: f64) -> &mut Self {
        self.u64(v.to_bits())
    }
    /// Bytes, after their length as a 32-bit number.
    pub fn bytes(&mut self, v: &[u8]) -> &mut Self {
        self.u32(v.len() as u32);
        self.buf.extend_from_slice(v);
        self
    }
    /// A string, as its UTF-8 bytes.
    pub fn str(&mut self, v: &str) -> &mut Self {
        self.bytes(v.as_bytes())
    }
    /// A batch of keys: their count, then each key's length (one byte) and bytes.
    pub fn keys(&mut self, keys: &KeyBatch<'_>) -> &mut Self {
        self.u32(keys.len() as u32);
        for k in keys.iter() {
            let b = k.as_bytes();
            self.buf.push(b.len() as u8);
            self.buf.extend_from_slice(b);
        }
        self
    }
    /// 32-bit numbers, after their count.
    pub fn u32s(&mut self, v: &[u32]) -> &mut Self {
        self.u32(v.len() as u32);
        for &x in v {
            self.u32(x);
        }
        self
    }
    /// 64-bit numbers, after their count.
    pub fn u64s(&mut self, v: &[u64]) -> &mut Self {
        self.u32(v.len() as u32);
        for &x in v {
            self.u64(x);
        }
        self
    }
}

/// Reads encoded values from a frame's bytes, each checked against what is left.
pub struct Reader<'a> {
    bytes: &'a [u8],
}

impl<'a> Reader<'a> {
    /// A reader over `bytes`.
    pub fn new(bytes: &'a [u8]) -> Reader<'a> {
        Reader { bytes }
    }
    /// An error unless every byte was read: a frame with bytes after its
    /// last field is malformed.
    pub fn finish(&self) -> Result<(), Malformed> {
        if self.bytes.is_empty() {
            Ok(())
        } else {
            Err(Malformed("bytes after the message's last field"))
        }
    }
    fn take(&mut self, n: usize, what: &'static str) -> Result<&'a [u8], Malformed> {
        if n > self.bytes.len() {
            return Err(Malformed(what));
        }
        let (head, rest) = self.bytes.split_at(n);
        self.bytes = rest;
        Ok(head)
    }
    fn array<const N: usize>(&mut self, what: &'static str) -> Result<[u8; N], Malformed> {
        let b = self.take(N, what)?;
        let mut a = [0u8; N];
        a.copy_from_slice(b);
        Ok(a)
    }
    /// One byte.
    pub fn u8(&mut self, what: &'static str) -> Result<u8, Malformed> {
        Ok(self.array::<1>(what)?[0])
    }
    /// A boolean: 0 or 1, anything else malformed.
    pub fn bool(&mut self, what: &'static str) -> Result<bool, Malformed> {
        match self.u8(what)? {
            0 => Ok(false),
            1 => Ok(true),
            _ => Err(Malformed(what)),
        }
    }
    /// A 32-bit number.
    pub fn u32(&mut self, what: &'static str) -> Result<u32, Malformed> {
        Ok(u32::from_le_bytes(self.array(what)?))
    }
    /// A 64-bit number.
    pub fn u64(&mut self, what: &'static str) -> Result<u64, Malformed> {
        Ok(u64::from_le_bytes(self.array(what)?))
    }
    /// A signed 32-bit number.
    pub fn i32(&mut self, what: &'static str) -> Result<i32, Malformed> {
        Ok(i32::from_le_bytes(self.array(what)?))
    }
    /// A 64-bit float.
    pub fn f64(&mut self, what: &'static str) -> Result<f64, Malformed> {
        Ok(f64::from_bits(self.u64(what)?))
    }
    /// A 64-bit number that must fit a `usize`.
    pub fn usize(&mut self, what: &'static str) -> Result<usize, Malformed> {
        usize::try_from(self.u64(what)?).map_err(|_| Malformed(what))
    }
    /// Length-prefixed bytes.
    pub fn bytes(&mut self, what: &'static str) -> Result<&'a [u8], Malformed> {
        let n = self.u32(what)? as usize;
        self.take(n, what)
    }
    /// A length-prefixed UTF-8 string.
    pub fn str(&mut self, what: &'static str) -> Result<&'a str, Malformed> {
        std::str::from_utf8(self.bytes(what)?).map_err(|_| Malformed(what))
    }
    /// A count of items of at least `item_bytes` bytes each, refused when
    /// the bytes left cannot hold that many.
    pub fn count(&mut self, item_bytes: usize, what: &'static str) -> Result<usize, Malformed> {
        let n = self.u32(what)? as usize;
        if n.saturating_mul(item_bytes.max(1)) > self.bytes.len() {
            return Err(Malformed(what));
        }
        Ok(n)
    }
    /// A batch of keys into `out` (cleared first, room reserved fallibly).
    /// A key of length 0 or over [`MAX_KEY_LEN`] is an [`Error::InvalidKey`]
    /// naming its position, as a local call would answer it.
    pub fn keys(&mut self, out: &mut Vec<Key>) -> Result<Result<(), Error>, Malformed> {
        out.clear();
        let n = self.count(1, "a key batch's count")?;
        if let Err(e) = crate::fallible::reserve(out, n, "a batch of keys") {
            return Ok(Err(e));
        }
        let mut bad = None;
        for i in 0..n {
            let len = self.u8("a key's length")? as usize;
            let b = self.take(len, "a key's bytes")?;
            if bad.is_some() {
                continue;
            }
            match Key::at(b, i) {
                Ok(k) => out.push(k),
                Err(e) => bad = Some(e),
            }
        }
        Ok(bad.map_or(Ok(()), Err))
    }
    /// 32-bit numbers after their count, into `out` (cleared first).
    pub fn u32s(&mut self, out: &mut Vec<u32>) -> Result<Result<(), Error>, Malformed> {
        out.clear();
        let n = self.count(4, "a count of numbers")?;
        if let Err(e) = crate::fallible::reserve(out, n, "a batch of numbers") {
            return Ok(Err(e));
        }
        for _ in 0..n {
            out.push(self.u32("a number")?);
        }
        Ok(Ok(()))
    }
    /// 64-bit numbers after their count, into `out` (cleared first).
    pub fn u64s(&mut self, out: &mut Vec<u64>) -> Result<Result<(), Error>, Malformed> {
        out.clear();
        let n = self.count(8, "a count of numbers")?;
        if let Err(e) = crate::fallible::reserve(out, n, "a batch of numbers") {
            return Ok(Err(e));
        }
        for _ in 0..n {
            out.push(self.u64("a number")?);
        }
        Ok(Ok(()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn values_read_back_as_written() {
        let mut buf = Vec::new();
        let keys = [Key::new(b"a").unwrap(), Key::new(&[7u8; 64]).unwrap()];
        Writer::new(&mut buf)
            .u8(9)
            .bool(true)
            .bool(false)
            .u32(0xdead_beef)
            .u64(u64::MAX - 1)
            .i32(-5)
            .f64(1.5)
            .str("héllo")
            .keys(&KeyBatch::from(&keys))
            .u32s(&[1, 2])
            .u64s(&[3]);
        let mut r = Reader::new(&buf);
        assert_eq!(r.u8("x"), Ok(9));
        assert_eq!(r.bool("x"), Ok(true));
        assert_eq!(r.bool("x"), Ok(false));
        assert_eq!(r.u32("x"), Ok(0xdead_beef));
        assert_eq!(r.u64("x"), Ok(u64::MAX - 1));
        assert_eq!(r.i32("x"), Ok(-5));
        assert_eq!(r.f64("x"), Ok(1.5));
        assert_eq!(r.str("x"), Ok("héllo"));
        let mut out = Vec::new();
        r.keys(&mut out).unwrap().unwrap();
        assert_eq!(out, keys);
        let mut n = Vec::new();
        r.u32s(&mut n).unwrap().unwrap();
        assert_eq!(n, [1, 2]);
        let mut m = Vec::new();
        r.u64s(&mut m).unwrap().unwrap();
        assert_eq!(m, [3]);
        assert_eq!(r.finish(), Ok(()));
    }

    #[test]
    fn every_truncation_is_malformed_and_nothing_panics() {
        let mut buf = Vec::new();
        let keys = [Key::new(b"abc").unwrap()];
        Writer::new(&mut buf)
            .str("name")
            .keys(&KeyBatch::from(&keys))
            .u64s(&[1, 2]);
        for cut in 0..buf.len() {
            let mut r = Reader::new(&buf[..cut]);
            let mut k = Vec::new();
            let mut p = Vec::new();
            let ok = r.str("s").is_ok()
                && r.keys(&mut k).is_ok_and(|x| x.is_ok())
                && r.u64s(&mut p).is_ok_and(|x| x.is_ok());
            assert!(!ok, "a frame cut at {cut} of {} decoded", buf.len());
        }
    }

    #[test]
    fn a_huge_count_is_refused_before_any_allocation() {
        let mut buf = Vec::new();
        Writer::new(&mut buf).u32(u32::MAX);
        let mut out = Vec::new();
        assert_eq!(
            Reader::new(&buf).keys(&mut out).unwrap_err(),
            Malformed("a key batch's count")
        );
        assert_eq!(out.capacity(), 0);
        let mut n = Vec::new();
        assert!(Reader::new(&buf).u64s(&mut n).is_err());
    }

    #[test]
    fn a_bad_key_names_its_position_and_the_frame_still_reads_to_its_end() {
        let mut buf = Vec::new();
        Writer::new(&mut buf)
            .u32(3)
            .u8(1)
            .u8(b'a')
            .u8(0)
            .u8(1)
            .u8(b'b')
            .u8(7);
        let mut r = Reader::new(&buf);
        let mut out = Vec::new();
        let e = r.keys(&mut out).unwrap().unwrap_err();
        assert!(matches!(e, Error::InvalidKey { index: 1, .. }), "{e}");
        assert_eq!(r.u8("tail"), Ok(7));
        assert_eq!(r.finish(), Ok(()));
    }

    #[test]
    fn a_boolean_other_than_0_or_1_and_trailing_bytes_are_malformed() {
        assert!(Reader::new(&[2]).bool("b").is_err());
        assert!(Reader::new(&[0, 0]).finish().is_err());
        assert!(Reader::new(&[0xff, 0xfe]).str("s").is_err());
        assert!(Reader::new(&[2, 0, 0, 0, 0xff, 0xfe]).str("s").is_err());
    }
}
