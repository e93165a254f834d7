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
//!   removes a block a load is reading.
//! - Opening an existing directory rebuilds the index and byte accounting
//!   from the headers on disk; files under block names that are not whole
//!   blocks of this format and size are removed (`rebuild.rs`).
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

mod beneath;
mod cause;
mod file;
// The block file format, public for the tests that write damaged block
// files; not part of the API.
#[doc(hidden)]
pub mod format;
mod index;
pub mod inspect;
mod io;
mod pool;
mod rebuild;
mod segments;
mod stats;

use std::fs;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use hashbrown::HashMap;

use crate::error::{Error, Result};
use crate::events::{Event, EventKind, EventQueue};
use crate::key::Key;
use crate::region::SlotMemory;
use crate::request::{Locality, Medium, Request};
use crate::stats::Stat;
use crate::tiering::{
    DEFAULT_TIER_EVENT_CAPACITY, Direction, JobRef, JobResult, SecondaryTier, TierLookup,
};

use format::{Layout, file_len};
use index::{Index, State};
use io::BlockIo;
pub use io::Cause;
use pool::{JobState, Pool, outcome};
pub use rebuild::RebuildReport;
use segments::Segments;
pub(crate) use stats::FS_STATS;

/// How the tier lays blocks out in its directory.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum FsLayout {
    /// A file per block (`<root>/<aa>/<key hex>.kvb`): any file system,
    /// and a directory several processes or hosts share.
    #[default]
    Files,
    /// Records in large preallocated segment files
    /// (`<root>/segments/`, see `segments.rs`): no file-system metadata
    /// work per block, for local storage used by one process; needs a
    /// capacity, and refuses `shared`.
    Segments,
}

/// Options of a file-system tier: the one set of them
/// (`kvtier_fs_options` and the `"options"` of a JSON tier of type `"fs"`
/// are read into it; JSON names the root `directory`, gives
/// `stale_temp_age_ms` in milliseconds and the locality as `"local"` or
/// `"remote"`).  Missing fields take [`Default`]'s values, whose directory
/// is empty: a tier cannot open until one is given.
#[derive(Clone, Debug, PartialEq, serde::Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct FsOptions {
    /// Directory holding the blocks.
    #[serde(rename = "directory")]
    pub root: PathBuf,
    /// A file per block, or segment files ([`FsLayout`]).
    pub layout: FsLayout,
    /// In the segments layout, the size each segment file aims at (the
    /// last one may be smaller; a block larger than this gets a file of its
    /// own).  Default 1 GiB.
    pub segment_file_bytes: u64,
    /// Create `root` (and its parents) if missing; if false, a missing
    /// directory is an error at open.
    pub create_dir: bool,
    /// Byte limit of the files (headers included); 0 means unbounded.
    pub capacity_bytes: u64,
    /// Fraction of the capacity above which a store evicts (0 < low <= high <= 1).
    pub high_watermark: f64,
    /// Fraction of the capacity eviction brings usage down to.
    pub low_watermark: f64,
    /// Read-priority worker threads (1..=256).
    pub read_threads: usize,
    /// Write-priority worker threads (1..=256).
    pub write_threads: usize,
    /// Use `O_DIRECT` where the file system supports it.
    pub direct_io: bool,
    /// Make each stored block durable before reporting it (fdatasync + directory fsync).
    pub durable: bool,
    /// Write each store as an unnamed file (`O_TMPFILE`) linked under its
    /// name once whole, where the file system supports it (a crash then
    /// leaves nothing behind); otherwise, or when false, a named temporary
    /// file is renamed.
    pub unnamed_temp_files: bool,
    /// Other processes use the directory too: look for keys missing from
    /// the local index on disk (off the caller's thread).
    pub shared: bool,
    /// Where the storage is, for request tier filters.
    #[serde(deserialize_with = "crate::serde_forms::locality")]
    pub locality: Locality,
    /// Temporary files older than this are removed at open even if their
    /// writer cannot be shown dead (a writer on another host).
    #[serde(
        rename = "stale_temp_age_ms",
        deserialize_with = "crate::serde_forms::millis"
    )]
    pub stale_temp_age: Duration,
    /// Permission bits of every file the tier creates (block, temporary,
    /// segment, lock and probe files), default `0o600`: a KV cache is
    /// derived from prompts.  Directories it creates get the same bits
    /// with search (x) added wherever read (r) is set (`0o600` gives
    /// `0o700`, `0o640` gives `0o750`).  Set with `fchmod` after creation,
    /// so the process umask does not narrow it (only the parents of the
    /// root that `create_dir` makes are left to the umask).  Must be
    /// within `0o777` and give the owner read and write.  JSON takes an
    /// octal string (`"0640"`) or a number.
    #[serde(deserialize_with = "crate::serde_forms::file_mode")]
    pub file_mode: u32,
}

impl Default for FsOptions {
    /// No directory (set one), a file per block, unbounded, 8 + 8 threads, `O_DIRECT`, no
    /// fsync, unnamed temporary files, not shared, local, watermarks
    /// 0.95 / 0.85, stale temporary files removed after 15 minutes, files
    /// `0600` (directories `0700`).
    fn default() -> FsOptions {
        FsOptions {
            root: PathBuf::new(),
            layout: FsLayout::Files,
            segment_file_bytes: segments::SEGMENT_TARGET_BYTES,
            create_dir: true,
            capacity_bytes: 0,
            high_watermark: 0.95,
            low_watermark: 0.85,
            read_threads: 8,
            write_threads: 8,
            direct_io: true,
            durable: false,
            unnamed_temp_files: true,
            shared: false,
            locality: Locality::Local,
            stale_temp_age: Duration::from_secs(15 * 60),
            file_mode: 0o600,
        }
    }
}

impl FsOptions {
    /// [`Default`]'s options for a tier rooted at `root`.
    pub fn new(root: impl Into<PathBuf>) -> FsOptions {
        FsOptions {
            root: root.into(),
            ..FsOptions::default()
        }
    }

    fn validate(&self, block_bytes: usize) -> Result<()> {
        let bad = |m: String| Err(Error::InvalidArgument(format!("fs tier: {m}")));
        if self.root.as_os_str().is_empty() {
            return bad("the directory is empty (give the path of a directory)".into());
        }
        if self.file_mode & !0o777 != 0 || self.file_mode & 0o600 != 0o600 {
            return bad(format!(
                "file_mode {:#o} must be within 0o777 and give the owner read and write (0o600)",
                self.file_mode
            ));
        }
        let (lo, hi) = (self.low_watermark, self.high_watermark);
        if !(lo > 0.0 && lo <= hi && hi <= 1.0) {
            return bad(format!(
                "watermarks must satisfy 0 < low <= high <= 1 (got low {lo}, high {hi})"
            ));
        }
        for (what, n) in [("read", self.read_threads), ("write", self.write_threads)] {
            if n == 0 || n > 256 {
                return bad(format!("{what}_threads must be 1..=256 (got {n})"));
            }
        }
        let one = file_len(block_bytes);
        if self.layout == FsLayout::Segments {
            if self.capacity_bytes < one {
                return bad(format!(
                    "the segments layout needs capacity_bytes of at least one block of {one} bytes, header included (got {})",
                    self.capacity_bytes
                ));
            }
            if self.segment_file_bytes == 0 {
                return bad("segment_file_bytes must be positive".into());
            }
            if self.shared {
                return bad(
                    "the segments layout is for one process: shared needs the files layout".into(),
                );
            }
        }
        if self.capacity_bytes != 0 && (self.capacity_bytes as f64 * lo) < one as f64 {
            return bad(format!(
                "capacity {} bytes at low watermark {lo} holds no block of {one} bytes (header included)",
                self.capacity_bytes
            ));
        }
        Ok(())
    }
}

#[derive(Debug, Default)]
struct Totals {
    hits: u64,
    misses: u64,
    retries: u64,
    stores_written: u64,
    stores_present: u64,
    stores_skipped: u64,
    stores_rejected_full: u64,
    loads: u64,
    jobs_failed: u64,
    evictions: u64,
    corrupt_removed: u64,
    unreadable_removed: u64,
    found_missing: u64,
    adopted: u64,
}

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
    events: EventQueue,
    totals: Totals,
    rebuild: RebuildReport,
    outstanding: usize,
    closed: bool,
    finished_buf: Vec<Arc<JobState>>,
    checked_buf: Vec<(Key, bool)>,
    lost_buf: Vec<(Key, bool)>,
    /// Descriptions of failed transfers for the manager's error log
    /// (bounded: the counters keep the totals).
    errors: Vec<String>,
}

/// Most failure descriptions kept between two `take_errors` calls.
const MAX_PENDING_ERRORS: usize = 64;

impl std::fmt::Debug for FsTier {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FsTier")
            .field("root", &self.opts.root)
            .field("blocks", &self.index.ready_count())
            .field("bytes_used", &self.index.used())
            .finish()
    }
}

impl FsTier {
    /// Opens (or creates) the tier's directory for blocks of
    /// `slots.slot_bytes()` bytes, rebuilding the index from what is there.
    /// Blocks the caller while it scans the directory.
    pub fn open(slots: SlotMemory, opts: FsOptions) -> Result<FsTier> {
        let block_bytes = slots.slot_bytes();
        opts.validate(block_bytes)?;
        let root = &opts.root;
        match fs::metadata(root) {
            Ok(m) if m.is_dir() => {}
            Ok(_) => {
                return Err(Error::InvalidArgument(format!(
                    "fs tier: {} is not a directory",
                    root.display()
                )));
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound && opts.create_dir => {
                use std::os::unix::fs::{DirBuilderExt, PermissionsExt};
                let mode = beneath::dir_mode_of(opts.file_mode);
                fs::DirBuilder::new()
                    .recursive(true)
                    .mode(mode)
                    .create(root)
                    .and_then(|()| fs::set_permissions(root, fs::Permissions::from_mode(mode)))
                    .map_err(|e| {
                        Error::io(format!("fs tier: creating directory {}", root.display()), e)
                    })?;
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                return Err(Error::NotFound(format!(
                    "fs tier directory {} (create_dir is off)",
                    root.display()
                )));
            }
            Err(e) => {
                return Err(Error::io(format!("fs tier: opening {}", root.display()), e));
            }
        }
        let direct = opts.direct_io && io::probe_direct(root, opts.file_mode);
        let layout = Layout::new(root.clone());
        let (index, rebuild, segments) = match opts.layout {
            FsLayout::Files => {
                let mut index = Index::new(file_len(block_bytes));
                let rebuild = rebuild::rebuild(&layout, block_bytes, &opts, &mut index)?;
                (index, rebuild, None)
            }
            FsLayout::Segments => {
                let (segments, found, mut rebuild) =
                    Segments::open(root, block_bytes, &opts, direct)?;
                // The probe files of a process killed while opening.
                if let Ok(c) = beneath::c_path(root)
                    && let Ok(fd) = beneath::open_root(&c)
                {
                    rebuild::remove_dead_probes(&fd, opts.stale_temp_age, &mut rebuild);
                }
                let mut index =
                    Index::with_records(file_len(block_bytes), segments.records(), &found)?;
                // As the files layout's rebuild does; an evicted record is
                // only freed.
                rebuild.evicted = rebuild::evict_over_capacity(&opts, &mut index, |_| ());
                rebuild.blocks -= rebuild.evicted;
                (index, rebuild, Some(segments))
            }
        };
        let link = if opts.unnamed_temp_files && segments.is_none() {
            io::probe_tmpfile(root, opts.file_mode)
        } else {
            None
        };
        let direct = segments.as_ref().map_or(direct, Segments::direct);
        let mut io = BlockIo::new(layout, slots, direct, opts.durable, opts.shared, link);
        io.segments = segments;
        io.file_mode = opts.file_mode;
        let pool = Pool::start(io, opts.read_threads, opts.write_threads)?;
        let mut tier = FsTier {
            opts,
            pool,
            index,
            checks: HashMap::default(),
            pending_checks: 0,
            absent: Vec::new(),
            events: EventQueue::new(DEFAULT_TIER_EVENT_CAPACITY),
            totals: Totals::default(),
            rebuild,
            outstanding: 0,
            closed: false,
            finished_buf: Vec::new(),
            checked_buf: Vec::new(),
            lost_buf: Vec::new(),
            errors: Vec::new(),
        };
        tier.note_skipped_at_open();
        // The rebuilt blocks are announced, oldest first, so a router learns of them.
        let mut keys = Vec::new();
        tier.index.ready_keys(&mut keys);
        for key in keys {
            tier.announce_stored(key);
        }
        Ok(tier)
    }

    /// Reports (in the error log the manager takes) what the opening scan
    /// skipped and left on disk: foreign entries and unreadable blocks.
    fn note_skipped_at_open(&mut self) {
        let r = self.rebuild;
        if r.foreign > 0 {
            self.errors.push(format!(
                "fs tier {}: skipped {} foreign entries under the tier's names at open ({}); never followed, left in place",
                self.opts.root.display(),
                r.foreign,
                r.foreign_kinds
            ));
        }
        if r.unreadable > 0 {
            self.errors.push(format!(
                "fs tier {}: skipped {} block files that could not be read at open (permission or I/O error); left in place",
                self.opts.root.display(),
                r.unreadable
            ));
        }
    }

    /// Queues an event; false if it was dropped (the queue is full,
    /// counted) or events are off.
    fn emit(&mut self, kind: EventKind, key: Key) -> bool {
        self.events.push(kind, key)
    }

    /// Announces Ready `key` as stored, remembering whether it was.
    fn announce_stored(&mut self, key: Key) {
        if self.emit(EventKind::Stored, key) {
            self.index.set_announced(&key);
        }
    }

    /// Removes `key` from the index, announcing it as removed if it was
    /// announced as stored.
    fn forget(&mut self, key: &Key) {
        let announced = self.index.announced(key);
        self.index.remove(key);
        if announced {
            self.emit(EventKind::Removed, *key);
        }
    }

    /// Takes out of the index the Ready blocks that the workers proved
    /// gone: all of them if the root directory was missing, else those of
    /// every fan-out directory that had to be made again.
    fn drop_lost(&mut self) {
        let (root, fanouts) = self.pool.shared().io.lost.take();
        if !root && fanouts == [0; 4] {
            return;
        }
        let mut lost = std::mem::take(&mut self.lost_buf);
        if root {
            self.index.drop_ready(None, &mut lost);
        }
        for (word, bits) in fanouts.iter().enumerate() {
            let mut bits = *bits;
            while bits != 0 {
                let bit = bits.trailing_zeros();
                bits &= bits - 1;
                self.index
                    .drop_ready(Some((word * 64) as u8 + bit as u8), &mut lost);
            }
        }
        self.totals.found_missing += lost.len() as u64;
        for (key, announced) in lost.drain(..) {
            if announced {
                self.emit(EventKind::Removed, key);
            }
        }
        self.lost_buf = lost;
    }

    /// The options the tier runs with.
    pub fn options(&self) -> &FsOptions {
        &self.opts
    }

    /// Whether stores write unnamed files and link them (the probe at open
    /// succeeded and the option is on).
    pub fn unnamed_temp_files(&self) -> bool {
        self.pool.shared().io.link.is_some()
    }

    /// Whether `O_DIRECT` is in use (the probe at open succeeded).
    pub fn direct_io(&self) -> bool {
        self.pool.shared().io.direct
    }

    /// The layout in use.
    pub fn layout(&self) -> FsLayout {
        self.opts.layout
    }

    /// Whether blocks live in segment records.
    fn segmented(&self) -> bool {
        self.pool.shared().io.segments.is_some()
    }

    /// What the restart scan found.
    pub fn rebuild_report(&self) -> RebuildReport {
        self.rebuild
    }

    /// Bytes the tier accounts to its directory.
    pub fn bytes_used(&self) -> u64 {
        self.index.used()
    }

    /// Number of whole, readable blocks.
    pub fn block_count(&self) -> usize {
        self.index.ready_count()
    }

    /// Failures counted for `cause` so far.
    pub fn errors(&self, cause: Cause) -> u64 {
        self.pool.shared().counters.errors[cause.index()].load(Ordering::Relaxed)
    }

    /// Why a job is failed whole before it starts, if it is.
    fn refusal(&self, job: &JobRef) -> Option<Cause> {
        if self.closed {
            Some(Cause::Closed)
        } else if job.slots.len() != job.keys.len() {
            Some(Cause::BadSlot)
        } else {
            None
        }
    }

    /// Reports every key of `job` failed with `cause` (at the next poll).
    fn fail_job(&mut self, job: JobRef, cause: Cause) {
        let n = job.keys.len();
        let counters = &self.pool.shared().counters;
        for _ in 0..n {
            counters.error(cause);
        }
        let codes = vec![outcome::FAILED + cause.index() as u8; n];
        self.pool.submit(Arc::new(JobState::new(
            job,
            codes,
            Vec::new(),
            Vec::new(),
            Vec::new(),
        )));
    }

    fn absorb(&mut self) {
        let mut jobs = std::mem::take(&mut self.finished_buf);
        let mut checks = std::mem::take(&mut self.checked_buf);
        self.pool.take(&mut jobs, &mut checks);
        // Before the jobs just taken are settled: a store among them may
        // have written its block after the directory came back.
        self.drop_lost();
        for (key, found) in checks.drain(..) {
            if self.checks.get(&key) != Some(&true) {
                continue;
            }
            self.pending_checks -= 1;
            if !found {
                self.checks.insert(key, false);
                self.absent.push(key);
                continue;
            }
            self.checks.remove(&key);
            if self.index.get(&key).is_none() {
                self.index.insert(key, State::Ready);
                self.totals.adopted += 1;
                self.announce_stored(key);
            }
        }
        self.checked_buf = checks;
        self.finished_buf = jobs;
    }

    fn note_failure(&mut self, what: &str, key: &Key, code: u8) {
        if self.errors.len() >= MAX_PENDING_ERRORS {
            return;
        }
        let why = if code >= outcome::FAILED {
            Cause::ALL[(code - outcome::FAILED) as usize]
                .stat_name()
                .trim_start_matches("errors_")
                .replace('_', " ")
        } else {
            "no room (every block is being read or written)".to_string()
        };
        self.errors.push(format!(
            "fs tier {}: {what} of key {key} failed: {why}",
            self.opts.root.display()
        ));
    }

    fn settle(&mut self, state: &JobState) -> JobResult {
        let job = &state.job;
        for i in 0..job.keys.len() {
            let code = state.code(i);
            if code >= outcome::FAILED || code == outcome::REJECTED_FULL {
                let what = match job.direction {
                    Direction::Store => "store",
                    Direction::Load => "load",
                };
                self.note_failure(what, &job.keys[i], code);
            }
        }
        let mut ok = true;
        match job.direction {
            Direction::Store => {
                for &i in &state.work {
                    let key = job.keys[i as usize];
                    let code = state.code(i as usize);
                    match code {
                        outcome::DONE | outcome::PRESENT => {
                            if code == outcome::DONE {
                                self.totals.stores_written += 1;
                            } else {
                                self.totals.stores_present += 1;
                            }
                            if self.index.set_ready(&key) {
                                self.announce_stored(key);
                            }
                        }
                        _ => {
                            ok = false;
                            if self.index.get(&key).map(|s| s.0) == Some(State::Writing) {
                                self.index.remove(&key);
                            }
                        }
                    }
                }
                if (0..job.keys.len()).any(|i| {
                    let c = state.code(i);
                    c == outcome::REJECTED_FULL || c >= outcome::FAILED
                }) {
                    ok = false;
                }
                for victim in &state.victims {
                    if self.index.get(victim).map(|s| s.0) == Some(State::Removing) {
                        self.index.remove(victim);
                    }
                }
            }
            Direction::Load => {
                for (i, key) in job.keys.iter().enumerate() {
                    let code = state.code(i);
                    if code == outcome::DONE {
                        self.totals.loads += 1;
                        self.index.drop_reader(key);
                        self.index.touch(key);
                        continue;
                    }
                    ok = false;
                    if code < outcome::FAILED {
                        continue;
                    }
                    let cause = Cause::ALL[(code - outcome::FAILED) as usize];
                    if cause != Cause::NotPresent {
                        self.index.drop_reader(key);
                    }
                    // A bad, unreadable or vanished file is no longer in the tier.
                    if cause.loses_block() && self.index.get(key).map(|s| s.0) == Some(State::Ready)
                    {
                        if cause.is_corruption() {
                            self.totals.corrupt_removed += 1;
                        } else if cause != Cause::Vanished {
                            self.totals.unreadable_removed += 1;
                        }
                        self.forget(key);
                    }
                }
            }
        }
        if !ok {
            self.totals.jobs_failed += 1;
        }
        let succeeded_keys = if !ok && job.direction == Direction::Load {
            Some(
                job.keys
                    .iter()
                    .enumerate()
                    .filter(|(i, _)| state.code(*i) == outcome::DONE)
                    .map(|(_, k)| *k)
                    .collect(),
            )
        } else {
            None
        };
        JobResult {
            id: job.id,
            success: ok,
            succeeded_keys,
            bytes: state.bytes.load(Ordering::Relaxed),
            duration: Some(state.started.elapsed()),
        }
    }

    /// Evicts LRU blocks so `need` more bytes fit under the watermarks;
    /// returns how many of `new` blocks may be admitted.
    fn make_room(&mut self, new: usize, victims: &mut Vec<Key>) -> usize {
        let cap = self.opts.capacity_bytes;
        if cap == 0 || new == 0 {
            return new;
        }
        let one = self.index.file_bytes();
        let high = (cap as f64 * self.opts.high_watermark) as u64;
        let low = (cap as f64 * self.opts.low_watermark) as u64;
        let need = one * new as u64;
        if self.index.used() + need > high {
            while self.index.used() + need > low {
                let Some(victim) = self.index.evict_one(true) else {
                    break;
                };
                self.totals.evictions += 1;
                if self.index.announced(&victim) {
                    self.emit(EventKind::Removed, victim);
                }
                if self.segmented() {
                    // The record is free at once: the next store
                    // overwrites it, nothing to remove.
                    self.index.remove(&victim);
                } else {
                    // The file goes before the job's new blocks are written.
                    victims.push(victim);
                }
            }
        }
        let room = cap.saturating_sub(self.index.used()) / one;
        new.min(room as usize)
    }
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

    fn lookup(&mut self, key: &Key, _request: &Request) -> TierLookup {
        if self.closed {
            return TierLookup::Miss;
        }
        if self.opts.shared {
            self.absorb();
        }
        match self.index.get(key) {
            Some((State::Ready, _)) => {
                self.totals.hits += 1;
                return TierLookup::Hit;
            }
            Some(_) => {
                self.totals.misses += 1;
                return TierLookup::Miss;
            }
            None => {}
        }
        if !self.opts.shared {
            self.totals.misses += 1;
            return TierLookup::Miss;
        }
        match self.checks.get(key) {
            Some(true) => {
                self.totals.retries += 1;
                TierLookup::Retry
            }
            Some(false) => {
                self.totals.misses += 1;
                TierLookup::Miss
            }
            None => {
                self.checks.insert(*key, true);
                self.pending_checks += 1;
                self.pool.check(*key);
                self.totals.retries += 1;
                TierLookup::Retry
            }
        }
    }

    fn submit_store(&mut self, job: JobRef) {
        self.outstanding += 1;
        if let Some(cause) = self.refusal(&job) {
            self.fail_job(job, cause);
            return;
        }
        let n = job.keys.len();
        let mut codes = vec![outcome::SKIPPED; n];
        let mut new = 0;
        for (i, key) in job.keys.iter().enumerate() {
            match self.index.get(key) {
                Some((State::Ready, _)) => {
                    self.totals.stores_skipped += 1;
                    self.index.touch(key);
                }
                Some(_) => self.totals.stores_skipped += 1,
                None => {
                    // Reserve now, so a duplicate later in the job is skipped.
                    self.index.insert(*key, State::Writing);
                    codes[i] = outcome::QUEUED;
                    new += 1;
                }
            }
        }
        // Release the reservations while making room, then take back the admitted ones.
        let reserved: Vec<u32> = (0..n as u32)
            .filter(|&i| codes[i as usize] == outcome::QUEUED)
            .collect();
        for &i in &reserved {
            self.index.remove(&job.keys[i as usize]);
        }
        let mut victims = Vec::new();
        let admitted = self.make_room(new, &mut victims);
        let mut work = Vec::with_capacity(admitted);
        let segmented = self.segmented();
        let mut records = Vec::with_capacity(if segmented { admitted } else { 0 });
        for &i in &reserved {
            let key = job.keys[i as usize];
            if work.len() < admitted {
                self.index.insert(key, State::Writing);
                if segmented {
                    // The capacity bounds the keys to the records, so one
                    // is free for each admitted key.
                    let Some(record) = self.index.assign_record(&key) else {
                        debug_assert!(false, "no free record for an admitted store");
                        self.index.remove(&key);
                        codes[i as usize] = outcome::REJECTED_FULL;
                        self.totals.stores_rejected_full += 1;
                        continue;
                    };
                    records.push(record);
                }
                work.push(i);
            } else {
                codes[i as usize] = outcome::REJECTED_FULL;
                self.totals.stores_rejected_full += 1;
            }
        }
        self.pool
            .submit(Arc::new(JobState::new(job, codes, work, victims, records)));
    }

    fn submit_load(&mut self, job: JobRef) {
        self.outstanding += 1;
        if let Some(cause) = self.refusal(&job) {
            self.fail_job(job, cause);
            return;
        }
        let n = job.keys.len();
        let not_present = outcome::FAILED + Cause::NotPresent.index() as u8;
        let mut codes = vec![not_present; n];
        let mut work = Vec::with_capacity(n);
        let segmented = self.segmented();
        let mut records = Vec::with_capacity(if segmented { n } else { 0 });
        for (i, key) in job.keys.iter().enumerate() {
            // In the segments layout a key is read from its record (every
            // Ready key has one; one without is not present).
            let record = if segmented {
                match self.index.record(key) {
                    Some(r) => Some(r),
                    None => continue,
                }
            } else {
                None
            };
            if self.index.add_reader(key) {
                codes[i] = outcome::QUEUED;
                work.push(i as u32);
                records.extend(record);
            }
        }
        let counters = &self.pool.shared().counters;
        for &c in &codes {
            if c >= outcome::FAILED {
                counters.error(Cause::ALL[(c - outcome::FAILED) as usize]);
            }
        }
        self.pool.submit(Arc::new(JobState::new(
            job,
            codes,
            work,
            Vec::new(),
            records,
        )));
    }

    fn poll_finished(&mut self, max: usize, out: &mut Vec<JobResult>) {
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
        if self.opts.shared {
            self.absorb();
            for key in self.absent.drain(..) {
                self.checks.remove(&key);
            }
        }
    }

    fn set_notifier(&mut self, notifier: crate::tiering::Notifier) {
        self.pool.set_notifier(notifier);
    }

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

    fn set_event_capacity(&mut self, capacity: usize) {
        let index = &mut self.index;
        self.events.set_capacity(capacity, |e| {
            if let (EventKind::Stored, Some(key)) = (e.kind, e.key) {
                index.clear_announced(&key);
            }
        });
    }

    fn take_errors(&mut self, out: &mut Vec<String>) {
        out.append(&mut self.errors);
    }

    fn shutdown(&mut self) -> Result<()> {
        if !self.closed {
            self.closed = true;
            self.pool.stop();
            // Queued existence checks were cancelled.
            self.checks.clear();
            self.absent.clear();
            self.pending_checks = 0;
        }
        Ok(())
    }
}
