//! The built-in file-system secondary tier: KV blocks as files under one
//! directory (local NVMe, tmpfs, or a shared file system).
//!
//! - One file per block, `<root>/<aa>/<key hex>.kvb` (see [`mod@format`]):
//!   a page-sized header (magic, version, key, length, xxh3 checksum of key
//!   and data), then the data, page-aligned.
//! - Stores write an unnamed file (`O_TMPFILE`) and link it under its name,
//!   or, where the file system lacks that, a temporary file in the final
//!   directory renamed: a crash leaves the old state or the whole block.
//!   Optional durability: `fdatasync` of the file and `fsync` of its
//!   directory.
//! - Loads verify header and checksum; a bad block's key is reported failed
//!   (the other keys of the job still arrive), its file removed, the cause
//!   counted.  A block that cannot be read for a reason that will not pass
//!   by itself (permission denied, an I/O error, a vanished file) leaves the
//!   index the same way, so the next lookup answers MISS rather than start a
//!   promotion that fails again; shortages that pass (`EAGAIN`, `ENOMEM`,
//!   too many open files, ...) keep it (see [`Cause::loses_block`]).
//! - Copies go straight between region slots and files (`pread`/`pwrite`),
//!   with `O_DIRECT` where the file system takes it.
//! - Read-priority and write-priority worker pools; nothing but `drain` and
//!   `shutdown` blocks the caller.
//! - A byte capacity with high/low watermarks and LRU eviction that never
//!   removes a block a load is reading or a pin set holds (`holds.rs`).
//! - Opening an existing directory gets its index and byte accounting
//!   back, at once or in the background:
//!   - After a clean shutdown, from the index written then
//!     (`kvtier-index`): loaded instead of reading any block, once (a
//!     generation moved on and the file removed before serving, so that
//!     after a crash the scan runs), and only what checks out (a torn,
//!     damaged, stale or foreign index file is never trusted; a body bad
//!     midway leaves the rest to the scan): `open` checks its header, and
//!     its body is read in the background, chunk by checked chunk, and
//!     taken in as the scan's batches are (`snapshot.rs`, with
//!     `snapshot_format.rs`, `snapshot_files.rs` and `snapshot_load.rs`).
//!     A shutdown writes it only when the index knows every block (not
//!     while the load or a restart scan still runs).
//!   - Otherwise from the headers on disk, in the background: `open`
//!     returns after the cheap checks (root, layout marker, options,
//!     segment files) and the tier serves at once what the scan has found
//!     so far (a key not found yet is a MISS; in a shared directory the
//!     existence check finds it); stores work from the first moment.  The
//!     scan reads with up to 16 threads (`scan.rs`); the tier takes in its
//!     batches at its calls (`rebuilding.rs`, which also keeps the scan
//!     from undoing what the tier did meanwhile); readiness says "fs tier
//!     rebuilding" and the `kvtier_fs_rebuilding` gauge is 1 until it
//!     ends.  Files under block names that are not whole blocks of this
//!     format and size are removed (`rebuild.rs`).  In the segments layout
//!     only the records the live map (`live.rs`) says may hold a block are
//!     read.
//! - The index keeps each key once, beside its node: about 43 heap bytes
//!   per block for 16-byte keys, 59 for 32-byte ones; with key digests
//!   (segments layout), 43 whatever the key's length (`index.rs`).
//! - Blocks removed behind the tier's back are taken out of the index (and
//!   the byte count) when a transfer proves them gone: a load that finds a
//!   file missing drops its key; a store or load that finds the root
//!   directory missing drops every readable block; a store that has to make
//!   a fan-out directory again drops the readable blocks indexed in it (they
//!   were stored before the directory disappeared).  This costs nothing
//!   while the directory is intact.  Blocks of a directory removed and made
//!   again with no store in between are found out this way block by block
//!   (when loaded) or fan-out directory by fan-out directory.
//! - Events ("stored", "removed") go to a queue bounded by the capacity the
//!   manager gives ([`SecondaryTier::set_event_capacity`]; standalone,
//!   [`crate::tiering::DEFAULT_TIER_EVENT_CAPACITY`]); when it is full new
//!   events are dropped and counted (`events_dropped`), and a key whose
//!   "stored" event was dropped is never announced as removed.
//! - With `shared`, keys absent from the local index are looked for on disk
//!   by a worker (lookup answers RETRY meanwhile), so several processes can
//!   use one directory.

//!
//! Where things are: this file holds [`FsTier`] and its calls; `options.rs`
//! the options; `open.rs` opening a directory; `scan.rs` the restart scan's
//! threads, `rebuilding.rs` the tier taking in what it finds, `live.rs` the
//! segments layout's live map;
//! `admission.rs` what a store or load is given to the workers with (room
//! made, records assigned); `settle.rs` taking finished jobs back into the
//! index; `recovery.rs` keeping the index true to the disk meanwhile
//! (directories found missing, blocks other processes stored); `pool.rs`
//! the workers' queues and tasks; `io.rs` moving one block, over
//! `segments.rs` (segment files) and `file.rs` (positioned I/O, probes);
//! `format.rs`, `beneath.rs`, `index.rs`, `rebuild.rs`, `snapshot.rs`,
//! `cause.rs` below;
//! `overhead.rs` the header's share of each block (warned of at open);
//! `holds.rs` pin sets (held blocks).
//! Events, job outcomes, cause counters and the workers come from the tier
//! kit (`crate::tiers::kit`).

mod admission;
mod age;
mod beneath;
mod cause;
mod clear;
#[cfg(test)]
mod drop_tests;
mod file;
mod files;
pub mod format;
mod found;
mod holds;
mod index;
pub mod inspect;
mod io;
mod live;
pub mod marker;
mod open;
mod options;
mod overhead;
mod pool;
mod rebuild;
mod rebuilding;
mod records;
mod recovery;
mod scan;
mod segments;
mod settle;
mod snapshot;
mod snapshot_files;
mod snapshot_format;
mod snapshot_load;
mod stats;

use std::sync::Arc;

use hashbrown::{HashMap, HashSet};

use super::kit::{Announcer, Reporter};
use crate::error::Result;
use crate::events::Event;
use crate::key::Key;
use crate::request::{Locality, Medium, Request};
use crate::stats::Stat;
use crate::tiering::{JobRef, JobResult, SecondaryTier, TierLookup};

pub use cause::Cause;
pub use clear::{ClearReport, clear_blocks, clear_layout};
use index::Index;
pub use options::{FsLayout, FsOptions};
use pool::{JobState, Pool};
pub use rebuild::RebuildReport;
pub use scan::RebuildHold;
pub(crate) use stats::FS_STATS;
use stats::FsStats;

/// The file-system tier.
pub struct FsTier {
    opts: FsOptions,
    pool: Pool,
    index: Index,
    /// Existence checks: `true` while pending, `false` once answered absent
    /// (forgotten at the end of the step).
    checks: HashMap<Key, bool, foldhash::fast::RandomState>,
    /// Checks still pending.
    pending_checks: usize,
    /// Keys answered absent this step (forgotten at its end).
    absent: Vec<Key>,
    events: Announcer,
    /// The tier's statistics, shared with the workers.
    counts: Arc<FsStats>,
    rebuild: RebuildReport,
    /// The restart scan, while it runs.
    rebuild_state: Option<Box<rebuilding::Rebuilding>>,
    outstanding: usize,
    closed: bool,
    finished_buf: Vec<Arc<JobState>>,
    checked_buf: Vec<(Key, bool)>,
    lost_buf: Vec<(Key, bool)>,
    /// A store's scratch: the positions of its new keys, and the keys it
    /// named (reused, so admitting a store allocates nothing per key).
    store_scratch: (Vec<usize>, HashSet<Key, foldhash::fast::RandomState>),
    /// Descriptions of failed transfers for the manager's error log
    /// (bounded: the counters keep the totals).
    errors: Reporter,
    /// Store times, under a max age.
    ages: age::Ages,
    /// The persisted index: what the open found, what shutdown writes.
    persisted: snapshot::Persisted,
}

impl std::fmt::Debug for FsTier {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FsTier")
            .field("root", &self.opts.root)
            .field("blocks", &self.index.ready_count())
            .field("bytes_used", &self.index.used())
            .field("held", &self.index.held_count())
            .field("index_heap_bytes", &self.index.heap_bytes())
            .finish()
    }
}

/// The event capacity a tier of `opts` takes when `asked` for one: 0
/// with key digests (a key kept as a digest could not be announced as
/// removed).
pub(super) fn event_capacity(opts: &FsOptions, asked: usize) -> usize {
    if opts.key_digests { 0 } else { asked }
}

impl SecondaryTier for FsTier {
    fn name(&self) -> &str {
        "fs"
    }

    fn slot_count(&self) -> Option<u32> {
        Some(self.pool.shared().io.slots.slot_count())
    }

    fn medium(&self) -> Option<Medium> {
        Some(Medium::Storage)
    }

    fn locality(&self) -> Option<Locality> {
        Some(self.opts.locality)
    }

    fn layout_fingerprint(&self) -> Option<&str> {
        self.opts.layout_fingerprint.as_deref()
    }

    fn lookup(&mut self, key: &Key, _request: &Request) -> TierLookup {
        self.take_found();
        self.look_up(key)
    }

    fn submit_store(&mut self, job: JobRef) {
        self.outstanding += 1;
        self.take_found();
        self.admit_store(job);
    }

    fn submit_load(&mut self, job: JobRef) {
        self.outstanding += 1;
        self.take_found();
        self.admit_load(job);
    }

    fn poll_finished(&mut self, max: usize, out: &mut Vec<JobResult>) {
        self.take_found();
        self.absorb();
        let mut jobs = std::mem::take(&mut self.finished_buf);
        let n = max.min(jobs.len());
        for state in jobs.drain(..n) {
            out.push(self.settle(&state));
            self.outstanding -= 1;
        }
        self.finished_buf = jobs;
    }

    fn touch(&mut self, keys: &[Key], _request: &Request) {
        // Reversed, so the batch's first key (a prefix's head) ends up most recent.
        for key in keys.iter().rev() {
            self.index.touch(key);
        }
    }

    fn on_schedule_end(&mut self) {
        self.take_found();
        self.end_step();
    }

    fn set_notifier(&mut self, notifier: crate::tiering::Notifier) {
        self.pool.set_notifier(notifier);
    }

    /// Transfers and existence checks only: a restart scan still running
    /// is not waited for (readiness and the `rebuilding` gauge tell it).
    fn has_pending_work(&self) -> bool {
        self.outstanding > 0 || self.pending_checks > 0
    }

    fn drain(&mut self) -> Result<()> {
        self.pool.wait_idle(false);
        Ok(())
    }

    fn stat_table(&self) -> Option<crate::stats::StatTable> {
        Some(stats::FS_STATS)
    }

    fn stats(&self) -> Vec<Stat> {
        self.stat_list()
    }

    fn take_events(&mut self, max: usize, out: &mut Vec<Event>) {
        self.events.take(max, out);
    }

    /// With key digests the tier announces nothing (`FsOptions::key_digests`).
    fn set_event_capacity(&mut self, capacity: usize) {
        let capacity = event_capacity(&self.opts, capacity);
        let index = &mut self.index;
        self.events
            .set_capacity(capacity, |key| index.clear_announced(&key));
    }

    fn take_errors(&mut self, out: &mut Vec<String>) {
        self.errors.take(out);
    }

    /// Not ready once shut down, while its index is rebuilt (its
    /// persisted index read, or its restart scan: "fs tier rebuilding",
    /// it serves the blocks found so far), or while its
    /// directory is not there (a `stat` of the root, the one file-system
    /// call it makes).
    fn readiness(&self) -> crate::tiering::TierReadiness {
        use crate::tiering::TierReadiness::{NotReady, Ready};
        if self.closed {
            return NotReady("shut down".to_string());
        }
        if let Some(r) = &self.rebuild_state {
            let how = if r.loading() {
                "loading its persisted index"
            } else {
                "its restart scan"
            };
            return NotReady(format!(
                "fs tier rebuilding: {how} has found {} blocks so far",
                self.rebuild.blocks
            ));
        }
        match std::fs::metadata(&self.opts.root) {
            Ok(m) if m.is_dir() => Ready,
            Ok(_) => NotReady(format!("{} is not a directory", self.opts.root.display())),
            Err(e) => NotReady(format!("directory {}: {e}", self.opts.root.display())),
        }
    }

    /// Removes the idle blocks whose keys start with `key_prefix`: from
    /// the index at once (announced as removed), and in the files layout
    /// their files, here, synchronously (a failure to remove one is
    /// counted in `removal_errors`, as an eviction's would be).  Blocks
    /// being read or written, or held by a pin set, are kept and counted.
    /// With key digests and a non-empty prefix, the key of each block kept
    /// as a digest is read from its record's header, here (one small
    /// read a block; those being written are not counted).  While the
    /// restart scan runs, the blocks under the prefix that it finds later
    /// are removed as it finds them (not counted here).  After shutdown,
    /// nothing is dropped.
    fn drop_blocks(&mut self, key_prefix: &[u8]) -> Result<crate::primary::DropCount> {
        let (mut idle, mut unsure) = (Vec::new(), Vec::new());
        if self.closed {
            return Ok(crate::primary::DropCount::default());
        }
        self.take_found();
        self.note_dropped(key_prefix);
        let mut kept = self.index.with_prefix(key_prefix, &mut idle, &mut unsure);
        let mut scratch = file::Scratch::new();
        let shared = self.pool.shared();
        for (digest, record) in unsure {
            let matches = shared
                .disk
                .record_key(&shared.io, record, &mut scratch)
                .is_some_and(|k| k.as_bytes().starts_with(key_prefix));
            let held = index::Held::Digest(digest);
            match self.index.held_state(&held) {
                Some((_, true)) if matches => kept += 1,
                Some(_) if matches => idle.push(held),
                _ => {}
            }
        }
        let files = !self.segmented();
        for held in &idle {
            if let index::Held::Key(key) = held {
                let announced = self.index.announced(key);
                self.events.removed(*key, announced);
                if files && self.pool.shared().disk.remove(key, &mut scratch).is_err() {
                    self.counts.removal_errors.add(1);
                }
            }
            self.index.remove_held(held);
        }
        Ok(crate::primary::DropCount {
            dropped: idle.len() as u64,
            kept,
        })
    }

    /// Holds Ready blocks for pin sets: out of the watermark eviction's
    /// reach, kept by max age and by drops, until released (then the most
    /// recent).  A block past its max age is not held (it goes).
    fn hold(&mut self, keys: &[Key]) -> Result<Vec<bool>> {
        self.hold_keys(keys)
    }

    fn release_hold(&mut self, keys: &[Key]) {
        self.release_keys(keys)
    }

    /// `capacity_bytes` over the bytes of one block file (header
    /// included); `None` when unbounded (0).
    fn capacity_blocks(&self) -> Option<u64> {
        self.capacity_in_blocks()
    }

    fn shutdown(&mut self) -> Result<()> {
        if !self.closed {
            // What a restart scan found is taken in (so a scan that has
            // ended counts as whole); one still running stops at its next
            // read.
            self.take_found();
            self.closed = true;
            // Whether the index knows every block on disk (loaded, or its
            // scan ended): only then are the live map and the persisted
            // index written from it.
            let whole = self.stop_rebuild();
            // Transfers under way finish first (queued ones are cancelled).
            self.pool.stop();
            if whole {
                self.save_live_records();
            }
            // Queued existence checks were cancelled.
            self.checks.clear();
            self.absent.clear();
            self.pending_checks = 0;
            // The workers are gone: nothing writes the directory now.  A
            // failure leaves blocks behind, and the tier is still stopped.
            if !self.opts.clear_on_shutdown {
                self.persist_index(whole);
            } else {
                let root = self.opts.root.display();
                match clear_blocks(&self.opts.root) {
                    Ok(r) => log::info!(
                        target: "kvtier::fs",
                        "fs tier {root}: removed {} files at shutdown ({} entries left in place)",
                        r.files_removed,
                        r.left
                    ),
                    Err(e) => log::warn!(
                        target: "kvtier::fs",
                        "fs tier {root}: clearing at shutdown failed: {e}"
                    ),
                }
            }
        }
        Ok(())
    }
}

#[cfg(test)]
impl FsTier {
    /// Stores `keys` (slot `i` for key `i`) in one job, waits for it and
    /// returns its result.
    pub(super) fn store_and_wait(&mut self, keys: &[Key]) -> crate::tiering::JobResult {
        self.submit_store(std::sync::Arc::new(crate::tiering::Job {
            id: crate::tiering::JobId(1),
            direction: crate::tiering::Direction::Store,
            keys: keys.to_vec(),
            slots: (0..keys.len() as u32).collect(),
            request: Default::default(),
        }));
        self.drain().unwrap();
        let mut out = Vec::new();
        self.poll_finished(16, &mut out);
        out.pop().expect("the job finished")
    }
}
