//! The index persisted at clean shutdown, so that a restart loads it
//! instead of reading every block's header.
//!
//! Two files in the tier's root:
//!
//! - `kvtier-generation`: the directory's generation, a decimal number and
//!   a newline (none: generation 0).
//! - `kvtier-index`: the index, written at a clean shutdown: a header of
//!   80 bytes (magic `KVTINDEX`, format version 3, layout, block size, the
//!   fingerprint's hash, the generation it belongs to, the number of
//!   entries, the body's length, the number of chunks, the seed of the
//!   key digests (0: none), the header's own xxh3-64), then the body: one
//!   entry per Ready block, least recently used first (key length and
//!   key, or with key digests for a key of more than 16 bytes 0x80 and
//!   its 16-byte digest; segment record (`u32::MAX` for none),
//!   store time (nanoseconds since the epoch, 0 unknown; the segments
//!   layout counts ages from the open, as its scan does)), cut into
//!   chunks of at most 1 MiB of whole entries, each followed by a trailer
//!   (its entries' length, their count, and the xxh3-64 of the entries and
//!   those two numbers seeded with the chunk's place from 0), so that a
//!   chunk is checked on its own, and a chunk moved elsewhere is refused
//!   (`snapshot_format.rs`).  Written to a temporary file (`fsync`ed with
//!   the `durable` option), renamed over the name.
//!
//! At open only the header is read: the index file is used only when its
//! header is whole (its checksum) and of this format (an older version is
//! refused like any untrusted file), layout, block size and fingerprint,
//! carries the directory's current generation, and its length is what
//! the header's counts allow; one written with key digests only by a
//! tier that keeps them (whose digests then take its seed: a tier with
//! digests that finds whole keys digests them under a new one).  Whatever it was, the generation is then
//! moved on (written and `fsync`ed with its directory) and the index file
//! removed, before the tier serves, its descriptor kept for the body: an
//! index is used at most once, and a crash afterwards, during the load or
//! later, finds none that matches (a copy of it put back is of an old
//! generation), so the scan runs.  Without an index file nothing is
//! written at open.  An index file that is not trusted is reported (a
//! warning, the open's error log, [`RebuildReport::index_rejected`]) and
//! the scan runs.  One the generation cannot be moved past is not used,
//! and if it cannot be removed either the open fails (whatever the tier
//! stored would be missing from a file trusted later).  Temporary files
//! of index and generation writers that are gone are removed at open.
//!
//! The body is read in the background, on the restart scan's thread,
//! from that descriptor (`snapshot_load.rs`): a chunk at a time, the last
//! first, each chunk's entries handed to the tier only once its checksum
//! and entries check out, as the scan's batches, which the tier takes in
//! at its calls under the scan's rules (`rebuilding.rs`): `open` returns
//! in milliseconds whatever the file's size, the tier serves what was
//! read so far and stores at once, readiness says "fs tier rebuilding"
//! until the body is read, and memory stays one chunk and the batches in
//! flight.  A body found bad midway (a checksum, an entry that does not
//! parse, more or fewer chunks or entries than the header says, and in
//! the segments layout a record missing, past the capacity, listed twice,
//! or clear in the live map, which marks every record a block was written
//! to before the write: a record clear there holds no block, as in
//! segment files made anew) is reported as one not trusted; what the
//! chunks read before it gave stays indexed, and the scan reads the rest
//! (in the segments layout only the records not handed on; in the files
//! layout what it finds again is not indexed twice).  Once the whole
//! body is read, [`RebuildReport::index_loaded`] is set, and in the
//! segments layout every record no entry lists is free (until then, as
//! during a scan, stores take only records the live map has clear).  So
//! the live map still covers every record the index names, and the next
//! clean shutdown, the index being whole, rewrites it exactly
//! (`live.rs`).
//!
//! The index file is meant to be loaded fast: `open` returns in about
//! 10 ms (the generation's `fsync`), and 10^6 entries are then read,
//! checked and indexed in about 0.5 s (`time_a_million_entries`, the
//! tier's side included).
//!
//! Both files are read as the tier reads everything in its directory
//! (`beneath.rs`): never through a symlink, never waiting on a FIFO, only
//! regular files of the tier's user, their size checked before anything
//! is read.
//!
//! An entry under the index file's name that is not a regular file of the
//! tier's user is left in place (as every foreign entry), and so is the
//! generation then.
//!
//! No index is written (and the next open scans) when the directory is
//! `shared` (other processes change it), cleared at shutdown, when the
//! index load or the restart scan had not ended at shutdown (the index
//! does not know every block), when a key was still being written or
//! removed at shutdown, when a block file could not be removed
//! (`removal_errors`: the index would not list it), when the generation
//! could not be read or moved on at open, or when a foreign entry holds
//! the index file's name.

use std::path::Path;
use std::time::SystemTime;

use super::FsOptions;
use super::beneath::{self, Fd};
use super::index::Index;
use super::snapshot_files::{
    INDEX_C, open_checked, read_exact, read_generation, remove_dead_temps, replace, root_fd,
    sync_dir,
};
use super::snapshot_format::{BodyWriter, HEADER, Header, MAX_ENTRY, TRAILER};
use super::snapshot_load::Load;
use crate::key::Key;

pub(crate) use super::snapshot_files::{GENERATION_NAME, INDEX_NAME};

/// What one open found of the persisted index, and what a clean shutdown
/// writes.
#[derive(Debug)]
pub(super) struct Persisted {
    /// The index file's body, its header trusted, to be read in the
    /// background (taken by `Persisted::take_load`).
    body: Option<Load>,
    /// The generation an index written at shutdown carries; `None`: none
    /// is written.
    generation: Option<u64>,
    /// Why an index file present was not trusted.
    rejected: Option<String>,
}

impl Persisted {
    /// Reads what `root` holds of a persisted index for a tier of `opts`
    /// and blocks of `block_bytes`, then moves the directory's generation
    /// on and removes the index file (both durably), so that whatever is
    /// served from here on no index on disk describes.  Never fails: an
    /// index that cannot be trusted (or made unusable again) is not used.
    pub(super) fn open(
        root: &Path,
        opts: &FsOptions,
        block_bytes: usize,
    ) -> crate::Result<Persisted> {
        let mut p = Persisted {
            body: None,
            generation: None,
            rejected: None,
        };
        let Ok(dir) = root_fd(root) else {
            return Ok(p);
        };
        remove_dead_temps(&dir, opts.stale_temp_age);
        let generation = match read_generation(&dir) {
            Ok(g) => g,
            Err(why) => {
                p.rejected = Some(format!("generation file {GENERATION_NAME}: {why}"));
                return Ok(p);
            }
        };
        let max_entries = Self::max_entries(opts, block_bytes);
        match Self::read(
            &dir,
            &Header::of(opts, block_bytes, generation),
            opts.key_digests,
            max_entries,
        ) {
            Ok(None) => {}
            Ok(Some(body)) if !opts.shared => p.body = Some(body),
            Ok(Some(_)) => p.rejected = Some("the directory is shared".into()),
            Err(why) => p.rejected = Some(why),
        }
        // An index file is used at most once: the next generation, durably,
        // before serving, and the file removed.  (Without one, nothing on
        // disk has the current generation, and nothing is written.)  An
        // entry that is not a regular file of the tier's user is left
        // alone, as everywhere in the directory, and none is written over
        // it at shutdown.
        // SAFETY: geteuid cannot fail.
        let me = unsafe { libc::geteuid() };
        match beneath::lstat_at(dir.0, INDEX_C) {
            Err(libc::ENOENT) => {
                p.generation = Some(generation);
                return Ok(p);
            }
            Ok(st) if beneath::is_regular(&st) && st.st_uid == me => {}
            _ => return Ok(p),
        }
        let next = generation.wrapping_add(1);
        let text = format!("{next}\n");
        let moved = replace(
            &dir,
            GENERATION_NAME,
            &[text.as_bytes()],
            opts.file_mode,
            true,
        )
        .and_then(|()| sync_dir(&dir));
        let removed = beneath::unlink_regular(dir.0, INDEX_C);
        if removed == Ok(true) {
            let _ = sync_dir(&dir);
        }
        match moved {
            Ok(()) => p.generation = Some(next),
            Err(e) => {
                let e = std::io::Error::from_raw_os_error(e);
                if p.body.take().is_some() {
                    p.rejected = Some(format!("the generation could not be moved on ({e})"));
                }
                // Neither moved on nor gone: the file would be trusted
                // after whatever this tier stores.
                if removed.is_err() {
                    return Err(crate::Error::io(
                        format!(
                            "fs tier: the index file {} can be neither outdated nor removed",
                            root.join(INDEX_NAME).display()
                        ),
                        e,
                    ));
                }
            }
        }
        Ok(p)
    }

    /// The most entries an index file may hold: the capacity's blocks
    /// twice over (the capacity may have been lowered since), or as many
    /// as the index can number without a capacity.
    fn max_entries(opts: &FsOptions, block_bytes: usize) -> u64 {
        let file_bytes = super::format::file_len(block_bytes).max(1);
        match opts.capacity_bytes {
            0 => u64::from(u32::MAX - 1),
            cap => (cap / file_bytes).saturating_mul(2).saturating_add(1024),
        }
    }

    /// The body of the index file of `dir`, its header trusted, `None`
    /// without one, or why it is not trusted.
    fn read(
        dir: &Fd,
        want: &Header,
        want_digests: bool,
        max_entries: u64,
    ) -> Result<Option<Load>, String> {
        let max = HEADER as u64 + max_entries.saturating_mul((MAX_ENTRY + TRAILER) as u64);
        let Some((fd, len)) = open_checked(dir, INDEX_C, max)? else {
            return Ok(None);
        };
        if len < HEADER as u64 {
            return Err(format!("{len} bytes, shorter than a header"));
        }
        let mut h = [0u8; HEADER];
        read_exact(&fd, &mut h, 0)?;
        let got = Header::decode(&h)?;
        let mismatch = |what: &str, a: u64, b: u64| Err(format!("{what} {a}, not {b}"));
        if got.layout != want.layout {
            return Err("written for the other layout".into());
        }
        if got.block_bytes != want.block_bytes {
            return mismatch("block size", got.block_bytes, want.block_bytes);
        }
        if got.fingerprint != want.fingerprint {
            return Err("written for another layout fingerprint".into());
        }
        if got.digest_seed != 0 && !want_digests {
            return Err("written with key digests, which the tier does not keep now".into());
        }
        if got.generation != want.generation {
            return mismatch("generation", got.generation, want.generation);
        }
        if !got.fits(len - HEADER as u64, max_entries) {
            return Err(format!(
                "{len} bytes do not hold the {} entries its header says",
                got.entries
            ));
        }
        Ok(Some(Load::new(fd, &got)))
    }

    /// The index file's body to read (once), when its header was trusted
    /// and the file made unusable again.
    pub(super) fn take_load(&mut self) -> Option<Load> {
        self.body.take()
    }

    /// Notes that the body turned out bad midway (why).
    pub(super) fn reject(&mut self, why: String) {
        self.rejected = Some(why);
    }

    /// Why an index file present was not trusted, if one was not.
    pub(super) fn rejected(&self) -> Option<&str> {
        self.rejected.as_deref()
    }

    /// Writes `index` (its Ready keys, with store times from `born`) as
    /// the index file of `root`, for the generation this open moved to;
    /// says why not when it does not.
    pub(super) fn write(
        &self,
        root: &Path,
        opts: &FsOptions,
        block_bytes: usize,
        index: &Index,
        born: impl Fn(&Key) -> Option<SystemTime>,
    ) -> Result<u64, String> {
        let Some(generation) = self.generation else {
            return Err("the directory's generation or index file was not usable at open".into());
        };
        if opts.shared {
            return Err("the directory is shared".into());
        }
        if index.any_in_flight() {
            return Err("blocks were still being written or removed".into());
        }
        let mut w = BodyWriter::default();
        index.ready_walk(|key, record| {
            let at = match key {
                super::index::Held::Key(k) => born(k),
                super::index::Held::Digest(_) => None,
            };
            let at = at
                .and_then(|t| t.duration_since(SystemTime::UNIX_EPOCH).ok())
                .map_or(0, |d| d.as_nanos().min(u64::MAX as u128) as u64);
            w.push(key, record, at);
        });
        let (body, entries, chunks) = w.finish();
        let header = Header {
            entries,
            body_len: body.len() as u64,
            chunks,
            // Never 0 with digests (`Index::with_digests`): 0 says none.
            digest_seed: index.digest_seed().unwrap_or(0),
            ..Header::of(opts, block_bytes, generation)
        }
        .encode();
        let errno = |e: i32| std::io::Error::from_raw_os_error(e).to_string();
        let dir = root_fd(root).map_err(errno)?;
        replace(
            &dir,
            INDEX_NAME,
            &[&header, &body],
            opts.file_mode,
            opts.durable,
        )
        .map_err(errno)?;
        if opts.durable {
            sync_dir(&dir).map_err(errno)?;
        }
        Ok(entries)
    }
}

impl super::FsTier {
    /// Writes the index file at a clean shutdown (the workers stopped)
    /// when the index is `whole` (it knows every block on disk: loaded, or
    /// its restart scan ended), and logs what became of it.
    pub(super) fn persist_index(&mut self, whole: bool) {
        let block_bytes = self.pool.shared().io.slots.slot_bytes();
        let ages = &self.ages;
        let root = self.opts.root.display();
        let started = std::time::Instant::now();
        let (opts, index) = (&self.opts, &self.index);
        let stray = self.counts.removal_errors.get();
        let written = if !whole {
            // Blocks the restart had not reached: the next open scans.
            Err("the restart (index load or scan) had not ended".to_string())
        } else if stray > 0 {
            // Files the index would not list: a scan finds them again.
            Err(format!("{stray} block files could not be removed"))
        } else {
            let born = |k: &Key| ages.born(k);
            self.persisted
                .write(&opts.root, opts, block_bytes, index, born)
        };
        match written {
            Ok(n) => log::info!(
                target: "kvtier::fs",
                "fs tier {root}: index of {n} blocks written at shutdown in {:?}",
                started.elapsed()
            ),
            Err(why) => log::info!(
                target: "kvtier::fs",
                "fs tier {root}: no index written at shutdown ({why}): the next open scans"
            ),
        }
    }

    /// Reports (a warning, and in the error log the manager takes) an
    /// index file the open did not trust.
    pub(super) fn note_index_at_open(&mut self) {
        if let Some(why) = self.persisted.rejected() {
            let why = why.to_string();
            self.rebuild.index_rejected = true;
            log::warn!(
                target: "kvtier::fs",
                "fs tier {}: index file {INDEX_NAME} not used ({why}); the directory is scanned in the background",
                self.opts.root.display()
            );
            self.errors
                .note(|| format!("index file {INDEX_NAME} not used ({why}); scanned instead"));
        }
    }
}

#[cfg(test)]
#[path = "snapshot_tests.rs"]
mod tests;
