//! The persisted index's body read in the background (see `snapshot.rs`):
//! from the descriptor the open kept (the file itself already removed),
//! one chunk at a time, last chunk first, each checked whole (its
//! checksum, its entries, in the segments layout its records) before any
//! of its entries is handed on, as the batches the restart scan sends
//! (`scan.rs`), so that the tier takes them in under the scan's rules
//! (`rebuilding.rs`).
//!
//! - Chunks are read from the end, so that each batch is more recent than
//!   the ones after it, as the scan's batches are: the tier puts each
//!   below the ones it has, and the file's order (least recently used
//!   first) is the index's again.  Memory stays one chunk and the
//!   batches the channel holds, whatever the file's size.
//! - Segments layout: a record must be one the live map marked at open
//!   (`maybe_live`), within the capacity, and listed once; each record
//!   handed on is cleared in `maybe_live`.  So when the whole body was
//!   read, the records still marked there are listed by no entry and
//!   are handed on as free; and when it turned out bad midway, they are
//!   exactly those the restart scan still has to read (never one whose
//!   block the tier may have taken, freed or rewritten meanwhile).

use std::time::{Duration, SystemTime};

use super::beneath::Fd;
use super::found::{BATCH, Found, send_newest_first};
use super::index::Held;
use super::snapshot_files::read_exact;
use super::snapshot_format::{CHUNK, HEADER, Header, TRAILER, check_chunk, trailer};

/// A trusted index file's body, still to be read.
pub(super) struct Load {
    fd: Fd,
    entries: u64,
    body_len: u64,
    chunks: u64,
    digest_seed: u64,
}

impl std::fmt::Debug for Load {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Load")
            .field("fd", &self.fd.0)
            .field("entries", &self.entries)
            .field("body_len", &self.body_len)
            .field("chunks", &self.chunks)
            .field("digest_seed", &self.digest_seed)
            .finish()
    }
}

/// How a load ended.
#[derive(Debug, PartialEq, Eq)]
pub(super) enum Loaded {
    /// Every entry was handed on (and, in the segments layout, every
    /// record no entry lists, as free).
    Whole,
    /// Stopped, or the tier is gone.
    Stopped,
    /// The body turned out bad here (why): what was handed on before is
    /// good, the rest must be scanned.
    Rejected(String),
}

/// What a load checks segment records against.
#[derive(Debug)]
pub(super) struct Records<'a> {
    /// Records the segments hold.
    pub(super) count: u32,
    /// The live map's words as the tier opened: a record clear there holds
    /// no block.  Each record handed on is cleared.
    pub(super) maybe_live: &'a mut [u64],
}

impl Records<'_> {
    /// Takes `record` (clears its bit), or says why it is not usable.
    fn take(&mut self, record: Option<u32>) -> Result<u32, &'static str> {
        let record = record.ok_or("an entry without a segment record")?;
        if record >= self.count {
            return Err("a segment record past the capacity");
        }
        let (word, bit) = (
            &mut self.maybe_live[record as usize / 64],
            1 << (record % 64),
        );
        if *word & bit == 0 {
            return Err("a segment record listed twice, or one the live map says holds no block");
        }
        *word &= !bit;
        Ok(record)
    }

    /// Gives back `record` (marks it again).
    fn give_back(&mut self, record: u32) {
        self.maybe_live[record as usize / 64] |= 1 << (record % 64);
    }
}

impl Load {
    /// The body of the index file open as `fd`, described by `h`.
    pub(super) fn new(fd: Fd, h: &Header) -> Load {
        Load {
            fd,
            entries: h.entries,
            body_len: h.body_len,
            chunks: h.chunks,
            digest_seed: h.digest_seed,
        }
    }

    /// The seed of its entries' key digests (0: whole keys only).
    pub(super) fn digest_seed(&self) -> u64 {
        self.digest_seed
    }

    /// The number of entries the header announced.
    pub(super) fn entries(&self) -> u64 {
        self.entries
    }

    /// Reads the body, last chunk first, and hands its entries on with
    /// `send` (false: the tier is gone) in batches of at most [`BATCH`],
    /// most recent batch first, each least recent first: in the files
    /// layout as (store time, key), an unknown time now's; in the segments
    /// layout (`records`) as (key, record), then the records no entry
    /// lists as free.  `stopped` is asked between chunks.
    pub(super) fn run(
        self,
        mut records: Option<Records<'_>>,
        stopped: &dyn Fn() -> bool,
        send: &mut dyn FnMut(Found) -> bool,
    ) -> Loaded {
        let now = SystemTime::now();
        let mut buf = vec![0u8; CHUNK + TRAILER];
        let mut entries = Vec::new();
        let mut end = HEADER as u64 + self.body_len;
        let (mut chunks, mut left) = (self.chunks, self.entries);
        while end > HEADER as u64 {
            if stopped() {
                return Loaded::Stopped;
            }
            let Some(i) = chunks.checked_sub(1) else {
                return Loaded::Rejected("more chunks than its header says".into());
            };
            chunks = i;
            let mut t = [0u8; TRAILER];
            if end < (HEADER + TRAILER) as u64 {
                return Loaded::Rejected("a chunk that does not fit".into());
            }
            if let Err(why) = read_exact(&self.fd, &mut t, end - TRAILER as u64) {
                return Loaded::Rejected(why);
            }
            let (len, count) = trailer(&t);
            let whole = (len + TRAILER) as u64;
            if len > CHUNK || whole > end - HEADER as u64 || u64::from(count) > left {
                return Loaded::Rejected("a chunk that does not fit".into());
            }
            let bytes = &mut buf[..len + TRAILER];
            if let Err(why) = read_exact(&self.fd, bytes, end - whole) {
                return Loaded::Rejected(why);
            }
            if let Err(why) = check_chunk(i, bytes, &mut entries) {
                return Loaded::Rejected(why.into());
            }
            let digest = |(key, _, _): &(Held, Option<u32>, u64)| matches!(key, Held::Digest(_));
            if self.digest_seed == 0 && entries.iter().any(digest) {
                return Loaded::Rejected("a key digest in an index of whole keys".into());
            }
            left -= u64::from(count);
            end -= whole;
            let sent = match &mut records {
                None => {
                    let mut blocks = Vec::with_capacity(entries.len());
                    for &(key, _, at) in &entries {
                        let Held::Key(key) = key else {
                            return Loaded::Rejected("a key digest in the files layout".into());
                        };
                        blocks.push((born(at, now), key));
                    }
                    send_newest_first(blocks, Found::Files, send)
                }
                Some(records) => match take_records(records, &entries) {
                    Ok(taken) => send_newest_first(taken, |b| Found::Records(b, Vec::new()), send),
                    Err(why) => return Loaded::Rejected(why.into()),
                },
            };
            if !sent {
                return Loaded::Stopped;
            }
        }
        if chunks != 0 || left != 0 {
            return Loaded::Rejected("fewer entries than its header says".into());
        }
        if let Some(records) = records {
            // The records no entry lists hold no block the index knows.
            let mut free = Vec::new();
            for r in (0..records.count).rev() {
                if records.maybe_live[r as usize / 64] & (1 << (r % 64)) != 0 {
                    free.push(r);
                    if free.len() == BATCH && !send(Found::Records(Vec::new(), free.split_off(0))) {
                        return Loaded::Stopped;
                    }
                }
            }
            if !free.is_empty() && !send(Found::Records(Vec::new(), free)) {
                return Loaded::Stopped;
            }
        }
        Loaded::Whole
    }
}

/// A store time from an entry's (nanoseconds since the epoch; 0 unknown:
/// `now`).
fn born(at: u64, now: SystemTime) -> SystemTime {
    match at {
        0 => now,
        n => SystemTime::UNIX_EPOCH + Duration::from_nanos(n),
    }
}

/// The (key, record) pairs of a chunk's `entries`, each record taken
/// from `records`; when one is not usable, none is (those taken are given
/// back) and why.
fn take_records(
    records: &mut Records<'_>,
    entries: &[(Held, Option<u32>, u64)],
) -> Result<Vec<(Held, u32)>, &'static str> {
    let mut taken = Vec::with_capacity(entries.len());
    for &(key, record, _) in entries {
        match records.take(record) {
            Ok(r) => taken.push((key, r)),
            Err(why) => {
                for &(_, r) in &taken {
                    records.give_back(r);
                }
                return Err(why);
            }
        }
    }
    Ok(taken)
}

#[cfg(test)]
#[path = "snapshot_load_tests.rs"]
mod tests;
