//! The persisted index file's format (see `snapshot.rs`): its header,
//! its body of checksummed chunks (written here, checked one by one as
//! they are read), and their entries, parsed defensively (a file that
//! passed its checksums may still be hostile).

use super::index::{DIGEST_LEN, Held};
use super::{FsLayout, FsOptions};
use crate::key::{Key, MAX_KEY_LEN};

pub(super) const MAGIC: [u8; 8] = *b"KVTINDEX";
pub(super) const VERSION: u32 = 3;
/// The first byte of an entry holding a key's digest (other entries
/// start with their key's length, 1 to 64).
const DIGEST_ENTRY: u8 = 0x80;
pub(super) const HEADER: usize = 80;
/// The shortest and longest entry.
pub(super) const MIN_ENTRY: usize = 1 + 1 + 4 + 8;
pub(super) const MAX_ENTRY: usize = 1 + MAX_KEY_LEN + 4 + 8;
/// Most bytes of entries in one chunk.
pub(super) const CHUNK: usize = 1 << 20;
/// A chunk's trailer: its entries' bytes (u32), its entry count (u32),
/// and the xxh3-64 of its entries and those two numbers.
pub(super) const TRAILER: usize = 16;
/// Largest generation file: a u64 in decimal and a newline.
pub(super) const MAX_GENERATION_LEN: i64 = 21;

/// The header's fields.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct Header {
    pub(super) layout: u32,
    pub(super) block_bytes: u64,
    pub(super) fingerprint: u64,
    pub(super) generation: u64,
    pub(super) entries: u64,
    pub(super) body_len: u64,
    /// The number of chunks of the body.
    pub(super) chunks: u64,
    /// The seed of the entries' key digests; 0: the index kept whole keys.
    pub(super) digest_seed: u64,
}

fn layout_code(layout: FsLayout) -> u32 {
    match layout {
        FsLayout::Files => 1,
        FsLayout::Segments => 2,
    }
}

/// The hash of a layout fingerprint (0 for none).
fn fingerprint_hash(fingerprint: Option<&str>) -> u64 {
    fingerprint.map_or(0, |f| xxh3(f.as_bytes()) | 1)
}

pub(super) fn xxh3(bytes: &[u8]) -> u64 {
    twox_hash::XxHash3_64::oneshot(bytes)
}

impl Header {
    pub(super) fn of(opts: &FsOptions, block_bytes: usize, generation: u64) -> Header {
        Header {
            layout: layout_code(opts.layout),
            block_bytes: block_bytes as u64,
            fingerprint: fingerprint_hash(opts.layout_fingerprint.as_deref()),
            generation,
            entries: 0,
            body_len: 0,
            chunks: 0,
            digest_seed: 0,
        }
    }

    pub(super) fn encode(&self) -> [u8; HEADER] {
        let mut h = [0u8; HEADER];
        h[..8].copy_from_slice(&MAGIC);
        h[8..12].copy_from_slice(&VERSION.to_le_bytes());
        h[12..16].copy_from_slice(&self.layout.to_le_bytes());
        let words = [
            self.block_bytes,
            self.fingerprint,
            self.generation,
            self.entries,
            self.body_len,
            self.chunks,
            self.digest_seed,
        ];
        for (i, w) in words.iter().enumerate() {
            h[16 + 8 * i..24 + 8 * i].copy_from_slice(&w.to_le_bytes());
        }
        let sum = xxh3(&h[..HEADER - 8]);
        h[HEADER - 8..].copy_from_slice(&sum.to_le_bytes());
        h
    }

    /// The header `h` holds, or why it is not one of this format.
    pub(super) fn decode(h: &[u8; HEADER]) -> Result<Header, String> {
        let word = |at: usize| u64::from_le_bytes(h[at..at + 8].try_into().expect("8 bytes"));
        if h[..8] != MAGIC {
            return Err("not an index file (magic)".into());
        }
        if word(HEADER - 8) != xxh3(&h[..HEADER - 8]) {
            return Err("damaged header (checksum)".into());
        }
        let version = u32::from_le_bytes(h[8..12].try_into().expect("4 bytes"));
        if version != VERSION {
            return Err(format!("format version {version}, not {VERSION}"));
        }
        Ok(Header {
            layout: u32::from_le_bytes(h[12..16].try_into().expect("4 bytes")),
            block_bytes: word(16),
            fingerprint: word(24),
            generation: word(32),
            entries: word(40),
            body_len: word(48),
            chunks: word(56),
            digest_seed: word(64),
        })
    }

    /// Whether a body of `len` bytes can hold this header's entries in
    /// its chunks, at most `max_entries` of them.
    pub(super) fn fits(&self, len: u64, max_entries: u64) -> bool {
        let trailers = self.chunks.saturating_mul(TRAILER as u64);
        let bytes = |per: usize| self.entries.saturating_mul(per as u64);
        self.entries <= max_entries
            && self.body_len == len
            && self.chunks <= self.entries
            && (self.entries == 0) == (self.chunks == 0)
            && len >= bytes(MIN_ENTRY).saturating_add(trailers)
            && len <= bytes(MAX_ENTRY).saturating_add(trailers)
    }
}

/// The next entry of an index body, `rest` moved past it: (key as the
/// index held it, record, store time); `None` at the end or where no
/// well-formed entry starts.
pub(super) fn next_entry(rest: &mut &[u8]) -> Option<(Held, Option<u32>, u64)> {
    let (&first, tail) = rest.split_first()?;
    let len = match first {
        DIGEST_ENTRY => DIGEST_LEN,
        n => n as usize,
    };
    if tail.len() < len + 12 {
        return None;
    }
    let key = match first {
        DIGEST_ENTRY => Held::Digest(tail[..len].try_into().ok()?),
        _ => Held::Key(Key::new(&tail[..len]).ok()?),
    };
    let record = u32::from_le_bytes(tail[len..len + 4].try_into().ok()?);
    let born = u64::from_le_bytes(tail[len + 4..len + 12].try_into().ok()?);
    *rest = &tail[len + 12..];
    Some((key, Some(record).filter(|&r| r != u32::MAX), born))
}

/// Writes an index body: entries appended least recently used first,
/// cut into chunks of at most [`CHUNK`] bytes of whole entries, each
/// followed by its trailer.  Chunk `i` (from 0) is checksummed with seed
/// `i`, so that chunks put in another order are refused too.
#[derive(Debug)]
pub(super) struct BodyWriter {
    /// Most bytes of entries in a chunk ([`CHUNK`]; less in tests).
    limit: usize,
    body: Vec<u8>,
    /// Where the open chunk starts, and its entries.
    start: usize,
    count: u32,
    chunks: u64,
    entries: u64,
}

impl Default for BodyWriter {
    fn default() -> BodyWriter {
        BodyWriter::with_chunk(CHUNK)
    }
}

impl BodyWriter {
    /// A writer of chunks of at most `limit` bytes of entries.
    pub(super) fn with_chunk(limit: usize) -> BodyWriter {
        BodyWriter {
            limit: limit.min(CHUNK),
            body: Vec::new(),
            start: 0,
            count: 0,
            chunks: 0,
            entries: 0,
        }
    }

    /// Appends an entry: key as the index holds it, segment record
    /// (`None`: none), store time (nanoseconds since the epoch, 0 unknown).
    pub(super) fn push(&mut self, key: &Held, record: Option<u32>, at: u64) {
        let k = key.bytes();
        if self.body.len() - self.start + 1 + k.len() + 12 > self.limit {
            self.close_chunk();
        }
        self.body.push(match key {
            Held::Key(_) => k.len() as u8,
            Held::Digest(_) => DIGEST_ENTRY,
        });
        self.body.extend_from_slice(k);
        self.body
            .extend_from_slice(&record.unwrap_or(u32::MAX).to_le_bytes());
        self.body.extend_from_slice(&at.to_le_bytes());
        self.count += 1;
        self.entries += 1;
    }

    fn close_chunk(&mut self) {
        if self.count == 0 {
            return;
        }
        let len = (self.body.len() - self.start) as u32;
        self.body.extend_from_slice(&len.to_le_bytes());
        self.body.extend_from_slice(&self.count.to_le_bytes());
        let sum = chunk_sum(self.chunks, &self.body[self.start..]);
        self.body.extend_from_slice(&sum.to_le_bytes());
        self.chunks += 1;
        self.start = self.body.len();
        self.count = 0;
    }

    /// The body, its entry count and its chunk count.
    pub(super) fn finish(mut self) -> (Vec<u8>, u64, u64) {
        self.close_chunk();
        (self.body, self.entries, self.chunks)
    }
}

/// The checksum of chunk `i`: over its entries and the first two words
/// of its trailer (`bytes`).
fn chunk_sum(i: u64, bytes: &[u8]) -> u64 {
    twox_hash::XxHash3_64::oneshot_with_seed(i, bytes)
}

/// A chunk's entries' length and count, from its trailer.
pub(super) fn trailer(t: &[u8; TRAILER]) -> (usize, u32) {
    let len = u32::from_le_bytes(t[..4].try_into().expect("4 bytes"));
    let count = u32::from_le_bytes(t[4..8].try_into().expect("4 bytes"));
    (len as usize, count)
}

/// The entries of chunk `i`, `bytes` being its entries and trailer, once
/// its checksum and its entries check out: each (key, record, store
/// time) into `out` (cleared first), least recently used first.
pub(super) fn check_chunk(
    i: u64,
    bytes: &[u8],
    out: &mut Vec<(Held, Option<u32>, u64)>,
) -> Result<(), &'static str> {
    out.clear();
    let Some(at) = bytes.len().checked_sub(TRAILER) else {
        return Err("a chunk shorter than its trailer");
    };
    let t: &[u8; TRAILER] = bytes[at..].try_into().expect("a trailer");
    let (len, count) = trailer(t);
    let sum = u64::from_le_bytes(t[8..].try_into().expect("8 bytes"));
    if len != at || chunk_sum(i, &bytes[..at + 8]) != sum {
        return Err("damaged (checksum)");
    }
    let mut rest = &bytes[..at];
    for _ in 0..count {
        out.push(next_entry(&mut rest).ok_or("entries that do not parse")?);
    }
    if !rest.is_empty() {
        return Err("entries that do not parse");
    }
    Ok(())
}
