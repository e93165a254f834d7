//! The persisted index file's format (see `snapshot.rs`): its header,
//! and its entries, parsed defensively (a file that passed its checksums
//! may still be hostile).

use std::hash::BuildHasher;

use super::{FsLayout, FsOptions};
use crate::key::{Key, MAX_KEY_LEN};

pub(super) const MAGIC: [u8; 8] = *b"KVTINDEX";
pub(super) const VERSION: u32 = 1;
pub(super) const HEADER: usize = 80;
/// The shortest and longest entry.
pub(super) const MIN_ENTRY: usize = 1 + 1 + 4 + 8;
pub(super) const MAX_ENTRY: usize = 1 + MAX_KEY_LEN + 4 + 8;
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
    pub(super) body_sum: u64,
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
            body_sum: 0,
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
            self.body_sum,
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
            body_sum: word(56),
        })
    }
}

/// The (key, record) pairs of an index body for `records` segment
/// records, least recently used first, or why they are not usable.  Each
/// record must be set in `maybe_live` (the live map's words): a record
/// clear there holds no block.
pub(super) fn listed(
    body: &[u8],
    entries: u64,
    records: u32,
    maybe_live: &[u64],
) -> Result<Vec<(Key, u32)>, &'static str> {
    let mut found: Vec<(Key, u32)> = Vec::new();
    found
        .try_reserve_exact(entries as usize)
        .map_err(|_| "no memory for its entries")?;
    let mut keys = hashbrown::HashTable::<u32>::new();
    keys.try_reserve(entries as usize, |_| 0)
        .map_err(|_| "no memory for its entries")?;
    let mut taken = vec![0u64; (records as usize).div_ceil(64)];
    let hasher = foldhash::fast::FixedState::default();
    let mut rest = body;
    for _ in 0..entries {
        let (key, record, _) = next_entry(&mut rest).ok_or("entries that do not parse")?;
        let record = record.ok_or("an entry without a segment record")?;
        if record >= records {
            return Err("a segment record past the capacity");
        }
        if maybe_live[record as usize / 64] & (1 << (record % 64)) == 0 {
            return Err("a segment record the live map says holds no block");
        }
        let (word, bit) = (&mut taken[record as usize / 64], 1 << (record % 64));
        if *word & bit != 0 {
            return Err("a segment record listed twice");
        }
        *word |= bit;
        let h = hasher.hash_one(key);
        if keys.find(h, |&i| found[i as usize].0 == key).is_some() {
            return Err("a key listed twice");
        }
        keys.insert_unique(h, found.len() as u32, |&i| {
            hasher.hash_one(found[i as usize].0)
        });
        found.push((key, record));
    }
    if !rest.is_empty() {
        return Err("entries that do not parse");
    }
    Ok(found)
}

/// The next entry of an index body, `rest` moved past it: (key, record,
/// store time); `None` at the end or where no well-formed entry starts.
pub(super) fn next_entry(rest: &mut &[u8]) -> Option<(Key, Option<u32>, u64)> {
    let (&len, tail) = rest.split_first()?;
    let len = len as usize;
    if tail.len() < len + 12 {
        return None;
    }
    let key = Key::new(&tail[..len]).ok()?;
    let record = u32::from_le_bytes(tail[len..len + 4].try_into().ok()?);
    let born = u64::from_le_bytes(tail[len + 4..len + 12].try_into().ok()?);
    *rest = &tail[len + 12..];
    Some((key, Some(record).filter(|&r| r != u32::MAX), born))
}
