//! On-disk format of one block file, and where each key's file lives.
//!
//! A block file is a [`HEADER_LEN`]-byte header followed by the block's
//! bytes, so the data starts page-aligned and `O_DIRECT` offsets and lengths
//! stay aligned.  The header holds a magic, the format version, the key, the
//! data length, a checksum binding the key and the data (xxh3-64), and a
//! checksum of the header itself, so a restart can trust a header without
//! reading the data.  All integers are little-endian.
//!
//! Layout of the header:
//!
//! | offset | size | field |
//! | --- | --- | --- |
//! | 0 | 8 | magic `KVTIERFS` |
//! | 8 | 4 | format version ([`FORMAT_VERSION`]) |
//! | 12 | 4 | header length ([`HEADER_LEN`]) |
//! | 16 | 8 | data length |
//! | 24 | 8 | checksum of key length, key, data length and data |
//! | 32 | 1 | key length (1..=64) |
//! | 40 | 64 | key bytes, zero padded |
//! | 104 | 8 | checksum of bytes 0..104 |
//! | 112 | .. | zero up to [`HEADER_LEN`] |
//!
//! Paths: `<root>/<aa>/<key hex>.kvb`, where `aa` comes from a hash of the
//! key, so even clustered keys spread evenly over 256 directories (10 million
//! blocks make about 40,000 entries per directory, which ext4, XFS and
//! network file systems index well; few directories keep a cold start from
//! paying a `mkdir` per block).
//! Keys become hex, never path components directly, so no key can escape the
//! root.  Where stores cannot use unnamed files (`O_TMPFILE`), their
//! temporary files are `.<key hex>.<pid>.<n>.tmp` in the same directory.

use std::ffi::{CStr, OsStr};
use std::io::Write as _;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

use std::hash::Hasher as _;

use twox_hash::XxHash3_64;
use twox_hash::xxhash3_64::{RawHasher, SecretBuffer};

use crate::key::{Key, MAX_KEY_LEN};

/// Bytes before the data: one page, so the data is page-aligned.
pub const HEADER_LEN: usize = 4096;
/// Magic at the start of every block file.
pub const MAGIC: [u8; 8] = *b"KVTIERFS";
/// Current format version; files of another version are skipped at restart.
pub const FORMAT_VERSION: u32 = 1;

const HEADER_HASHED: usize = 104;

/// Rounds `n` up to a multiple of `align` (a power of two).
pub const fn align_up(n: usize, align: usize) -> usize {
    (n + align - 1) & !(align - 1)
}

/// Size on disk of a block of `data_len` bytes: the header, then the data.
/// (`O_DIRECT` is used only when `data_len` is a multiple of the page size,
/// so its offsets and lengths stay aligned.)
pub fn file_len(data_len: usize) -> u64 {
    (HEADER_LEN + data_len) as u64
}

/// Streaming checksum of a block (xxh3-64, default seed and secret): key
/// length, key, data length, then the data fed in chunks through
/// [`BlockHasher::update`].  Allocates nothing.
pub struct BlockHasher(RawHasher<&'static [u8; 192]>);

impl BlockHasher {
    /// Starts the checksum of `key`'s block of `data_len` bytes.
    pub fn new(key: &Key, data_len: u64) -> BlockHasher {
        let mut h = RawHasher::new(SecretBuffer::default());
        h.write(&[key.len() as u8]);
        h.write(key.as_bytes());
        h.write(&data_len.to_le_bytes());
        BlockHasher(h)
    }

    /// Feeds the next chunk of data.
    pub fn update(&mut self, chunk: &[u8]) {
        self.0.write(chunk);
    }

    /// The checksum.
    pub fn finish(&self) -> u64 {
        self.0.finish()
    }
}

fn xxh3_64(bytes: &[u8]) -> u64 {
    XxHash3_64::oneshot(bytes)
}

/// A parsed, self-consistent header.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Header {
    /// The block's key.
    pub key: Key,
    /// Bytes of data after the header.
    pub data_len: u64,
    /// Checksum of key and data.
    pub checksum: u64,
}

/// Why a header was rejected.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum HeaderError {
    /// Not our magic: not a block file at all.
    BadMagic,
    /// Our magic, another format version.
    OldFormat(u32),
    /// Our magic and version, but the fields are inconsistent or damaged.
    Damaged,
}

/// Writes `h` into `buf` (at least [`HEADER_LEN`] bytes; the rest is zeroed).
pub fn encode_header(h: &Header, buf: &mut [u8]) {
    let buf = &mut buf[..HEADER_LEN];
    buf.fill(0);
    buf[0..8].copy_from_slice(&MAGIC);
    buf[8..12].copy_from_slice(&FORMAT_VERSION.to_le_bytes());
    buf[12..16].copy_from_slice(&(HEADER_LEN as u32).to_le_bytes());
    buf[16..24].copy_from_slice(&h.data_len.to_le_bytes());
    buf[24..32].copy_from_slice(&h.checksum.to_le_bytes());
    buf[32] = h.key.len() as u8;
    buf[40..40 + h.key.len()].copy_from_slice(h.key.as_bytes());
    let hh = xxh3_64(&buf[..HEADER_HASHED]);
    buf[HEADER_HASHED..HEADER_HASHED + 8].copy_from_slice(&hh.to_le_bytes());
}

fn u32_at(b: &[u8], at: usize) -> u32 {
    u32::from_le_bytes(b[at..at + 4].try_into().expect("4 bytes"))
}

fn u64_at(b: &[u8], at: usize) -> u64 {
    u64::from_le_bytes(b[at..at + 8].try_into().expect("8 bytes"))
}

/// Parses and checks a header (magic, version, length, key, own checksum).
pub fn decode_header(buf: &[u8]) -> Result<Header, HeaderError> {
    if buf.len() < HEADER_LEN || buf[0..8] != MAGIC {
        return Err(HeaderError::BadMagic);
    }
    let version = u32_at(buf, 8);
    if version != FORMAT_VERSION {
        return Err(HeaderError::OldFormat(version));
    }
    if u32_at(buf, 12) as usize != HEADER_LEN
        || u64_at(buf, HEADER_HASHED) != xxh3_64(&buf[..HEADER_HASHED])
    {
        return Err(HeaderError::Damaged);
    }
    let key_len = buf[32] as usize;
    if key_len == 0 || key_len > MAX_KEY_LEN {
        return Err(HeaderError::Damaged);
    }
    let key = Key::new(&buf[40..40 + key_len]).map_err(|_| HeaderError::Damaged)?;
    Ok(Header {
        key,
        data_len: u64_at(buf, 16),
        checksum: u64_at(buf, 24),
    })
}

/// Maps keys to paths under one root directory.
#[derive(Clone, Debug)]
pub struct Layout {
    root: PathBuf,
}

const HEX: &[u8; 16] = b"0123456789abcdef";

impl Layout {
    /// A layout rooted at `root`.
    pub fn new(root: PathBuf) -> Layout {
        Layout { root }
    }

    /// The root directory.
    pub fn root(&self) -> &Path {
        &self.root
    }

    /// The fan-out directory name of `key` (`aa`, two hex digits).
    pub fn fanout(key: &Key) -> [u8; 2] {
        let a = Self::fanout_index(key);
        [HEX[(a >> 4) as usize], HEX[(a & 15) as usize]]
    }

    /// The number (0..=255) of `key`'s fan-out directory: the two hex
    /// digits of its name.
    pub fn fanout_index(key: &Key) -> u8 {
        (xxh3_64(key.as_bytes()) & 0xff) as u8
    }

    fn push_dir(&self, key: &Key, out: &mut Vec<u8>) {
        out.clear();
        out.extend_from_slice(self.root.as_os_str().as_bytes());
        out.push(b'/');
        out.extend_from_slice(&Self::fanout(key));
    }

    fn push_hex(key: &Key, out: &mut Vec<u8>) {
        for b in key.as_bytes() {
            out.push(HEX[(b >> 4) as usize]);
            out.push(HEX[(b & 15) as usize]);
        }
    }

    fn finish(out: &mut Vec<u8>) -> &CStr {
        out.push(0);
        CStr::from_bytes_with_nul(out).expect("tier paths hold no NUL but the last")
    }

    /// `<root>/<aa>` for `key`, built in `out` (reused: no allocation once
    /// it has grown).
    pub(crate) fn dir_c<'a>(&self, key: &Key, out: &'a mut Vec<u8>) -> &'a CStr {
        self.push_dir(key, out);
        Self::finish(out)
    }

    /// The block file of `key`, built in `out`.
    pub(crate) fn block_c<'a>(&self, key: &Key, out: &'a mut Vec<u8>) -> &'a CStr {
        self.push_dir(key, out);
        out.push(b'/');
        Self::push_hex(key, out);
        out.extend_from_slice(b".kvb");
        Self::finish(out)
    }

    /// A temporary file for a store of `key` by process `pid`, attempt
    /// `n`, built in `out`.
    pub(crate) fn temp_c<'a>(&self, key: &Key, pid: u32, n: u64, out: &'a mut Vec<u8>) -> &'a CStr {
        self.push_dir(key, out);
        out.extend_from_slice(b"/.");
        Self::push_hex(key, out);
        // Writing into a Vec cannot fail.
        let _ = write!(out, ".{pid}.{n}.tmp");
        Self::finish(out)
    }

    /// `key`'s fan-out directory name, NUL-terminated.
    pub(crate) fn fanout_c(key: &Key) -> [u8; 3] {
        let [a, b] = Self::fanout(key);
        [a, b, 0]
    }

    /// `key`'s block file name (`<key hex>.kvb`), built in `out`.
    pub(crate) fn name_c<'a>(key: &Key, out: &'a mut Vec<u8>) -> &'a CStr {
        out.clear();
        Self::push_hex(key, out);
        out.extend_from_slice(b".kvb");
        Self::finish(out)
    }

    /// The name of a temporary file for a store of `key` by process
    /// `pid`, attempt `n` (`.<key hex>.<pid>.<n>.tmp`), built in `out`.
    pub(crate) fn temp_name_c<'a>(key: &Key, pid: u32, n: u64, out: &'a mut Vec<u8>) -> &'a CStr {
        out.clear();
        out.push(b'.');
        Self::push_hex(key, out);
        // Writing into a Vec cannot fail.
        let _ = write!(out, ".{pid}.{n}.tmp");
        Self::finish(out)
    }

    fn owned(c: &CStr) -> PathBuf {
        PathBuf::from(OsStr::from_bytes(c.to_bytes()))
    }

    /// `<root>/<aa>` for `key`.
    pub fn dir(&self, key: &Key) -> PathBuf {
        Self::owned(self.dir_c(key, &mut Vec::new()))
    }

    /// The block file of `key`.
    pub fn block_path(&self, key: &Key) -> PathBuf {
        Self::owned(self.block_c(key, &mut Vec::new()))
    }

    /// A temporary file for a store of `key` by process `pid`, attempt `n`.
    pub fn temp_path(&self, key: &Key, pid: u32, n: u64) -> PathBuf {
        Self::owned(self.temp_c(key, pid, n, &mut Vec::new()))
    }
}

/// Parses a block file name (`<hex>.kvb`) back into its key.
pub fn key_of_block_name(name: &str) -> Option<Key> {
    let hex = name.strip_suffix(".kvb")?;
    if hex.is_empty() || hex.len() % 2 != 0 || hex.len() > 2 * MAX_KEY_LEN {
        return None;
    }
    let mut bytes = [0u8; MAX_KEY_LEN];
    let digits = hex.as_bytes();
    for (i, pair) in digits.chunks(2).enumerate() {
        let hi = (pair[0] as char).to_digit(16)?;
        let lo = (pair[1] as char).to_digit(16)?;
        bytes[i] = (hi * 16 + lo) as u8;
    }
    Key::new(&bytes[..hex.len() / 2]).ok()
}

/// The writer's pid in a temporary file name (`.<hex>.<pid>.<n>.tmp`).
pub fn pid_of_temp_name(name: &str) -> Option<u32> {
    let rest = name.strip_prefix('.')?.strip_suffix(".tmp")?;
    let mut parts = rest.rsplitn(3, '.');
    let _n = parts.next()?;
    parts.next()?.parse().ok()
}

/// The kinds of probe file the tier writes in its root at open (`file.rs`).
pub const PROBE_KINDS: [&str; 2] = ["odirect", "tmpfile"];

/// The name of the `kind` probe file of process `pid` (kind one of
/// [`PROBE_KINDS`]): `.<kind>-probe.<pid>.tmp`.
pub fn probe_name(kind: &str, pid: u32) -> String {
    format!(".{kind}-probe.{pid}.tmp")
}

/// The process id in a probe file name written by [`probe_name`].
pub fn pid_of_probe_name(name: &str) -> Option<u32> {
    let rest = name.strip_prefix('.')?.strip_suffix(".tmp")?;
    let (kind, pid) = rest.split_once("-probe.")?;
    if !PROBE_KINDS.contains(&kind) || pid.is_empty() || !pid.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    pid.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn probe_names_parse_back_and_nothing_else_does() {
        for kind in PROBE_KINDS {
            assert_eq!(pid_of_probe_name(&probe_name(kind, 4242)), Some(4242));
        }
        for other in [
            ".other-probe.12.tmp",
            ".odirect-probe..tmp",
            ".odirect-probe.12x.tmp",
            "odirect-probe.12.tmp",
            ".odirect-probe.12",
            ".0a0b.12.3.tmp",
        ] {
            assert_eq!(pid_of_probe_name(other), None, "{other}");
        }
    }

    fn key(b: &[u8]) -> Key {
        Key::new(b).unwrap()
    }

    #[test]
    fn header_round_trips_and_rejects_damage() {
        let h = Header {
            key: key(b"block-7"),
            data_len: 8192,
            checksum: 0x1234_5678_9abc_def0,
        };
        let mut buf = vec![0xffu8; HEADER_LEN];
        encode_header(&h, &mut buf);
        assert_eq!(decode_header(&buf), Ok(h));
        for at in [9usize, 17, 25, 33, 41, 100] {
            let mut bad = buf.clone();
            bad[at] ^= 1;
            assert!(decode_header(&bad).is_err(), "flip at {at} accepted");
        }
        let mut old = buf.clone();
        old[8..12].copy_from_slice(&0u32.to_le_bytes());
        assert_eq!(decode_header(&old), Err(HeaderError::OldFormat(0)));
        assert_eq!(decode_header(&[0u8; 16]), Err(HeaderError::BadMagic));
    }

    #[test]
    fn the_hash_is_standard_xxh3_64() {
        // Reference values of XXH3_64bits (seed 0) from the xxHash project.
        assert_eq!(xxh3_64(b""), 0x2d06_8005_38d3_94c2);
        assert_eq!(xxh3_64(b"a"), 0xe6c6_32b6_1e96_4e1f);
    }

    #[test]
    fn checksum_binds_key_and_data() {
        let data = vec![7u8; 4096];
        let sum = |k: &[u8], d: &[u8]| {
            let mut h = BlockHasher::new(&key(k), d.len() as u64);
            h.update(d);
            h.finish()
        };
        let mut split = BlockHasher::new(&key(b"a"), 4096);
        split.update(&data[..1000]);
        split.update(&data[1000..]);
        assert_eq!(split.finish(), sum(b"a", &data));
        assert_ne!(sum(b"a", &data), sum(b"b", &data));
        let mut other = data.clone();
        other[4000] ^= 0x10;
        assert_ne!(sum(b"a", &data), sum(b"a", &other));
    }

    #[test]
    fn names_round_trip_and_never_escape_the_root() {
        let layout = Layout::new(PathBuf::from("/r"));
        let k = key(b"../../etc/passwd");
        let p = layout.block_path(&k);
        assert!(p.starts_with("/r"));
        assert_eq!(p.components().count(), 4, "{p:?}");
        let name = p.file_name().unwrap().to_str().unwrap();
        assert_eq!(key_of_block_name(name), Some(k));
        let long = key(&[0xab; 64]);
        let name = layout.block_path(&long);
        assert!(name.file_name().unwrap().len() < 255);
        assert_eq!(key_of_block_name("xyz.kvb"), None);
        assert_eq!(key_of_block_name("abc.kvb"), None);
        let t = layout.temp_path(&k, 4242, 9);
        let tname = t.file_name().unwrap().to_str().unwrap();
        assert_eq!(pid_of_temp_name(tname), Some(4242));
        assert_eq!(t.parent(), p.parent());
    }

    #[test]
    fn file_len_and_alignment() {
        assert_eq!(file_len(4096), 8192);
        assert_eq!(file_len(2 << 20), (4096 + (2 << 20)) as u64);
        assert_eq!(align_up(100, 4096), 4096);
        assert_eq!(align_up(8192, 4096), 8192);
    }

    fn header(k: Key) -> Header {
        Header {
            key: k,
            data_len: 8192,
            checksum: 0x1234_5678_9abc_def0,
        }
    }

    fn encoded(h: &Header) -> Vec<u8> {
        let mut buf = vec![0u8; HEADER_LEN];
        encode_header(h, &mut buf);
        buf
    }

    /// Rewrites the header's own checksum after a field was changed, so
    /// the later checks (not the checksum) must catch the change.
    fn rehash(buf: &mut [u8]) {
        let hh = xxh3_64(&buf[..HEADER_HASHED]);
        buf[HEADER_HASHED..HEADER_HASHED + 8].copy_from_slice(&hh.to_le_bytes());
    }

    #[test]
    fn a_key_of_the_longest_length_round_trips_and_one_byte_more_is_damage() {
        let h = header(key(&[0xc3; MAX_KEY_LEN]));
        let mut buf = encoded(&h);
        assert_eq!(buf[32] as usize, MAX_KEY_LEN);
        assert_eq!(decode_header(&buf), Ok(h));
        // A key length field one past the longest key, made consistent.
        buf[32] = (MAX_KEY_LEN + 1) as u8;
        rehash(&mut buf);
        assert_eq!(decode_header(&buf), Err(HeaderError::Damaged));
        // And a zero key length.
        buf[32] = 0;
        rehash(&mut buf);
        assert_eq!(decode_header(&buf), Err(HeaderError::Damaged));
        // A shorter key length field with a valid checksum decodes as the
        // shorter key: the name-to-header check at restart and the data
        // checksum on load are what reject such a file.
        buf[32] = 3;
        rehash(&mut buf);
        assert_eq!(decode_header(&buf).map(|d| d.key), Ok(key(&[0xc3; 3])));
    }

    #[test]
    fn names_of_the_longest_keys_parse_back_and_longer_names_are_not_blocks() {
        let layout = Layout::new(PathBuf::from("/r"));
        let longest = key(&[0x5a; MAX_KEY_LEN]);
        let p = layout.block_path(&longest);
        let name = p.file_name().unwrap().to_str().unwrap();
        assert_eq!(name.len(), 2 * MAX_KEY_LEN + ".kvb".len());
        assert_eq!(key_of_block_name(name), Some(longest));
        // One byte (two hex digits) more is no block name, nor is an odd
        // or empty one.
        let longer = format!("5a{name}");
        assert_eq!(key_of_block_name(&longer), None);
        assert_eq!(key_of_block_name(&format!("0{name}")), None);
        assert_eq!(key_of_block_name(".kvb"), None);
        assert_eq!(key_of_block_name("0a0b"), None, "no suffix");
        assert_eq!(key_of_block_name("0a0b.kvb"), Some(key(&[10, 11])));
    }

    #[test]
    fn short_headers_and_foreign_magic_are_not_block_files() {
        let buf = encoded(&header(key(b"block-7")));
        // Our magic, but cut short anywhere before the end of the header.
        for len in [8usize, 16, 112, HEADER_LEN - 1] {
            assert_eq!(
                decode_header(&buf[..len]),
                Err(HeaderError::BadMagic),
                "a {len}-byte header"
            );
        }
        // A whole header with another magic (its checksum made consistent):
        // not ours at all, rather than damaged.
        let mut other = buf.clone();
        other[0..8].copy_from_slice(b"KVTIERFZ");
        rehash(&mut other);
        assert_eq!(decode_header(&other), Err(HeaderError::BadMagic));
        other[0..8].copy_from_slice(&[0; 8]);
        assert_eq!(decode_header(&other), Err(HeaderError::BadMagic));
        // Another version, made consistent, is an old format; another header
        // length is damage.
        let mut v2 = buf.clone();
        v2[8..12].copy_from_slice(&2u32.to_le_bytes());
        rehash(&mut v2);
        assert_eq!(decode_header(&v2), Err(HeaderError::OldFormat(2)));
        let mut len = buf.clone();
        len[12..16].copy_from_slice(&8192u32.to_le_bytes());
        rehash(&mut len);
        assert_eq!(decode_header(&len), Err(HeaderError::Damaged));
        // A longer buffer (header and data read together) decodes.
        let mut with_data = buf.clone();
        with_data.extend_from_slice(&[7u8; 100]);
        assert!(decode_header(&with_data).is_ok());
    }

    /// The on-disk format of a known block, byte for byte: a change to the
    /// layout, the hash or the fan-out breaks every existing cache
    /// directory and must fail here first.
    #[test]
    fn the_on_disk_format_of_a_known_block_is_fixed() {
        let k = key(b"block-7");
        let layout = Layout::new(PathBuf::from("/r"));
        assert_eq!(&Layout::fanout(&k), b"2d");
        assert_eq!(
            layout.block_path(&k),
            PathBuf::from("/r/2d/626c6f636b2d37.kvb")
        );
        assert_eq!(layout.dir(&k), PathBuf::from("/r/2d"));
        assert_eq!(
            layout.temp_path(&k, 42, 7),
            PathBuf::from("/r/2d/.626c6f636b2d37.42.7.tmp")
        );
        assert_eq!(&Layout::fanout(&key(&[0x5a; MAX_KEY_LEN])), b"d8");
        let mut c = Vec::new();
        assert_eq!(
            layout.block_c(&k, &mut c).to_bytes(),
            b"/r/2d/626c6f636b2d37.kvb"
        );
        assert_eq!(layout.dir_c(&k, &mut c).to_bytes(), b"/r/2d");

        let buf = encoded(&header(k));
        let mut want = vec![0u8; HEADER_LEN];
        want[0..8].copy_from_slice(b"KVTIERFS");
        want[8..12].copy_from_slice(&1u32.to_le_bytes());
        want[12..16].copy_from_slice(&4096u32.to_le_bytes());
        want[16..24].copy_from_slice(&8192u64.to_le_bytes());
        want[24..32].copy_from_slice(&0x1234_5678_9abc_def0u64.to_le_bytes());
        want[32] = 7;
        want[40..47].copy_from_slice(b"block-7");
        want[104..112].copy_from_slice(&0x528e_46ff_3b70_5f4au64.to_le_bytes());
        assert_eq!(buf, want);
        // The data checksum: xxh3-64 of key length, key, data length, data.
        let mut h = BlockHasher::new(&k, 4);
        h.update(b"abcd");
        let mut whole = vec![7u8];
        whole.extend_from_slice(b"block-7");
        whole.extend_from_slice(&4u64.to_le_bytes());
        whole.extend_from_slice(b"abcd");
        assert_eq!(h.finish(), xxh3_64(&whole));
        assert_eq!(h.finish(), 0x7190_76f0_c18f_1b7b);
    }
}
