//! The index persisted at clean shutdown, so that a restart loads it
//! instead of reading every block's header.
//!
//! Two files in the tier's root:
//!
//! - `kvtier-generation`: the directory's generation, a decimal number and
//!   a newline (none: generation 0).
//! - `kvtier-index`: the index, written at a clean shutdown: a header
//!   (magic, format version, layout, block size, the fingerprint's hash,
//!   the generation it belongs to, the number of entries, the body's
//!   length and xxh3-64 checksum, the header's own checksum), then one
//!   entry per Ready block, least recently used first: key length, key,
//!   segment record (`u32::MAX` for none), store time (nanoseconds since
//!   the epoch, 0 unknown; the segments layout counts ages from the open,
//!   as its scan does).  Written to a temporary file (`fsync`ed with
//!   the `durable` option), renamed over the name.
//!
//! At open the index file is trusted only when it is whole (both
//! checksums), of this format, layout, block size and fingerprint, and
//! carries the directory's current generation.  Whatever it was, the
//! generation is then moved on (written and `fsync`ed with its
//! directory) and the index file removed, before the tier serves: an index
//! is used at most once, and a crash afterwards finds none that matches
//! (a copy of it put back is of an old generation), so the scan runs.
//! Without an index file nothing is written at open.  An index file that
//! is not trusted is reported (a warning, the open's error log,
//! [`RebuildReport::index_rejected`]) and the scan runs.  One the
//! generation cannot be moved past is not used, and if it cannot be
//! removed either the open fails (whatever the tier stored would be
//! missing from a file trusted later).  Temporary files of index and
//! generation writers that are gone are removed at open.
//!
//! The index file is meant to be loaded fast: 10^6 entries are read,
//! checked and indexed in about 0.3 s (`time_a_million_entries`).
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
//! `shared` (other processes change it), cleared at shutdown, when a key
//! was still being written or removed at shutdown, when a block file
//! could not be removed (`removal_errors`: the index would not list it),
//! when the generation could not be read or moved on at open, or when a
//! foreign entry holds the index file's name.
//!
//! The files layout fills its index from the file (`Persisted::restore`);
//! the segments layout opens its segment files without reading their
//! records and takes the (key, record) pairs listed
//! (`Persisted::open_segments`), read as a scan does when a record is
//! missing, past the capacity, or listed twice.

use std::ffi::CStr;
use std::hash::BuildHasher;
use std::path::Path;
use std::time::{Duration, SystemTime};

use super::age::Ages;
use super::beneath::{self, FOREIGN, Fd};
use super::format::Layout;
use super::index::Index;
use super::rebuild::RebuildReport;
use super::segments::{Opened, Segments};
use super::{FsLayout, FsOptions};
use crate::key::{Key, MAX_KEY_LEN};

/// The index file's name in the root.
pub(crate) const INDEX_NAME: &str = "kvtier-index";
const INDEX_C: &CStr = c"kvtier-index";
/// The generation file's name in the root.
pub(crate) const GENERATION_NAME: &str = "kvtier-generation";
const GENERATION_C: &CStr = c"kvtier-generation";

const MAGIC: [u8; 8] = *b"KVTINDEX";
const VERSION: u32 = 1;
const HEADER: usize = 80;
/// The shortest and longest entry.
const MIN_ENTRY: usize = 1 + 1 + 4 + 8;
const MAX_ENTRY: usize = 1 + MAX_KEY_LEN + 4 + 8;
/// Largest generation file: a u64 in decimal and a newline.
const MAX_GENERATION_LEN: i64 = 21;

/// What one open found of the persisted index, and what a clean shutdown
/// writes.
#[derive(Debug)]
pub(super) struct Persisted {
    /// The index file's body, trusted, with its entry count (taken by
    /// `Persisted::restore`).
    body: Option<(Vec<u8>, u64)>,
    /// The generation an index written at shutdown carries; `None`: none
    /// is written.
    generation: Option<u64>,
    /// Why an index file present was not trusted.
    rejected: Option<String>,
}

/// The header's fields.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Header {
    layout: u32,
    block_bytes: u64,
    fingerprint: u64,
    generation: u64,
    entries: u64,
    body_len: u64,
    body_sum: u64,
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

fn xxh3(bytes: &[u8]) -> u64 {
    twox_hash::XxHash3_64::oneshot(bytes)
}

impl Header {
    fn of(opts: &FsOptions, block_bytes: usize, generation: u64) -> Header {
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

    fn encode(&self) -> [u8; HEADER] {
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
    fn decode(h: &[u8; HEADER]) -> Result<Header, String> {
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

fn root_fd(root: &Path) -> Result<Fd, i32> {
    beneath::open_root(&beneath::c_path(root)?)
}

/// Opens regular file `name` of `dir` for reading as the tier opens its
/// block files, and checks it is the tier user's and at most `max` bytes
/// long; `Ok(None)` when absent.
fn open_checked(dir: &Fd, name: &CStr, max: u64) -> Result<Option<(Fd, u64)>, String> {
    let (fd, st) = match beneath::open_at(dir.0, name, libc::O_RDONLY, 0, false) {
        Ok(f) => f,
        Err(libc::ENOENT) => return Ok(None),
        Err(FOREIGN) => {
            let kind = beneath::lstat_at(dir.0, name)
                .map(|st| beneath::kind_name(st.st_mode))
                .unwrap_or("other");
            return Err(format!("a {kind}, not a regular file"));
        }
        Err(e) => return Err(std::io::Error::from_raw_os_error(e).to_string()),
    };
    // SAFETY: geteuid cannot fail.
    let me = unsafe { libc::geteuid() };
    if st.st_uid != me {
        return Err(format!("owned by user {}, not by {me}", st.st_uid));
    }
    let len = st.st_size.max(0) as u64;
    if len > max {
        return Err(format!("{len} bytes, more than {max}"));
    }
    Ok(Some((fd, len)))
}

/// Reads exactly `buf.len()` bytes at `offset`.
fn read_exact(fd: &Fd, buf: &mut [u8], offset: u64) -> Result<(), String> {
    let mut done = 0;
    while done < buf.len() {
        let rest = &mut buf[done..];
        // SAFETY: reading into a live slice of an owned buffer.
        let n = unsafe {
            libc::pread(
                fd.0,
                rest.as_mut_ptr().cast(),
                rest.len(),
                (offset + done as u64) as libc::off_t,
            )
        };
        match n {
            0 => return Err("shorter than its header says".into()),
            n if n > 0 => done += n as usize,
            _ => match beneath::errno() {
                libc::EINTR => {}
                e => return Err(std::io::Error::from_raw_os_error(e).to_string()),
            },
        }
    }
    Ok(())
}

/// The directory's generation (0 without a generation file).
fn read_generation(dir: &Fd) -> Result<u64, String> {
    let Some((fd, len)) = open_checked(dir, GENERATION_C, MAX_GENERATION_LEN as u64)? else {
        return Ok(0);
    };
    let mut buf = vec![0u8; len as usize];
    read_exact(&fd, &mut buf, 0)?;
    std::str::from_utf8(&buf)
        .ok()
        .and_then(|t| t.strip_suffix('\n'))
        .and_then(|t| t.parse().ok())
        .ok_or_else(|| "not a number and a newline".to_string())
}

/// Writes `bytes` to a new temporary file of `dir` (mode `mode`),
/// `fsync`s it when `sync`, and renames it over `name`.
fn replace(dir: &Fd, name: &str, bytes: &[&[u8]], mode: u32, sync: bool) -> Result<(), i32> {
    static N: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let n = N.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let temp =
        std::ffi::CString::new(format!(".{name}.{}.{n}.tmp", std::process::id())).expect("no NUL");
    let target = std::ffi::CString::new(name).expect("no NUL");
    let flags = libc::O_WRONLY | libc::O_CREAT | libc::O_EXCL;
    let (fd, st) = beneath::open_at(dir.0, &temp, flags, mode, false)?;
    let written = bytes
        .iter()
        .try_for_each(|b| super::marker::write_all(fd.0, b))
        .and_then(|()| {
            // SAFETY: an open descriptor.
            if sync && unsafe { libc::fsync(fd.0) } != 0 {
                return Err(beneath::errno());
            }
            // SAFETY: NUL-terminated names relative to an open directory.
            match unsafe { libc::renameat(dir.0, temp.as_ptr(), dir.0, target.as_ptr()) } {
                0 => Ok(()),
                _ => Err(beneath::errno()),
            }
        });
    drop(fd);
    if written.is_err() {
        let _ = beneath::unlink_same(dir.0, &temp, &st);
    }
    written
}

/// `fsync` of directory `dir`.
fn sync_dir(dir: &Fd) -> Result<(), i32> {
    // SAFETY: an open directory descriptor.
    match unsafe { libc::fsync(dir.0) } {
        0 => Ok(()),
        _ => Err(beneath::errno()),
    }
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

    /// The trusted body of the index file of `dir` and its entry count,
    /// `None` without one, or why it is not trusted.
    fn read(dir: &Fd, want: &Header, max_entries: u64) -> Result<Option<(Vec<u8>, u64)>, String> {
        let max = HEADER as u64 + max_entries.saturating_mul(MAX_ENTRY as u64);
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
        if got.generation != want.generation {
            return mismatch("generation", got.generation, want.generation);
        }
        if got.entries > max_entries
            || got.body_len != len - HEADER as u64
            || got.body_len < got.entries.saturating_mul(MIN_ENTRY as u64)
            || got.body_len > got.entries.saturating_mul(MAX_ENTRY as u64)
        {
            return Err(format!(
                "{len} bytes do not hold the {} entries its header says",
                got.entries
            ));
        }
        let mut body = Vec::new();
        body.try_reserve_exact(got.body_len as usize)
            .map_err(|_| format!("no memory for its {} bytes", got.body_len))?;
        body.resize(got.body_len as usize, 0);
        read_exact(&fd, &mut body, HEADER as u64)?;
        if xxh3(&body) != got.body_sum {
            return Err("damaged (checksum)".into());
        }
        Ok(Some((body, got.entries)))
    }

    /// Why an index file present was not trusted, if one was not.
    pub(super) fn rejected(&self) -> Option<&str> {
        self.rejected.as_deref()
    }

    /// Fills new `index` from the trusted index file, least recently
    /// used first, noting each key's store time with `stored` (now where
    /// unknown), then evicts down to the capacity's low watermark as a
    /// scan does (the victims' files removed by `remove`): the open's
    /// report, or `None` (`index` left empty) when there is no trusted
    /// index file or its entries do not parse or repeat a key (then the
    /// scan runs).  Records are not restored: files layout only.
    pub(super) fn restore(
        &mut self,
        opts: &FsOptions,
        index: &mut Index,
        mut stored: impl FnMut(Key, SystemTime),
        remove: impl FnMut(&Key),
    ) -> Option<RebuildReport> {
        let (body, entries) = self.body.take()?;
        if index.reserve(entries as usize).is_err() {
            self.rejected = Some(format!("no memory for {entries} entries"));
            return None;
        }
        let now = SystemTime::now();
        let mut rest = &body[..];
        let mut born = Vec::new();
        for _ in 0..entries {
            let problem = match next_entry(&mut rest) {
                None => Some("entries that do not parse"),
                Some((key, _, at)) => {
                    if !opts.max_age.is_zero() {
                        let at = match at {
                            0 => now,
                            n => SystemTime::UNIX_EPOCH + Duration::from_nanos(n),
                        };
                        born.push((key, at));
                    }
                    index.append_ready(key, None);
                    None
                }
            };
            if let Some(why) = problem {
                *index = Index::new(index.file_bytes());
                self.rejected = Some(why.into());
                return None;
            }
        }
        let problem = if !rest.is_empty() {
            Some("entries that do not parse")
        } else if !index.map_appended() {
            Some("a key listed twice (or no memory to index it)")
        } else {
            None
        };
        if let Some(why) = problem {
            *index = Index::new(index.file_bytes());
            self.rejected = Some(why.into());
            return None;
        }
        for (key, at) in born {
            stored(key, at);
        }
        let evicted = super::rebuild::evict_over_capacity(opts, index, remove);
        Some(RebuildReport {
            blocks: entries - evicted,
            evicted,
            index_loaded: true,
            ..RebuildReport::default()
        })
    }

    /// `Persisted::restore` for the files layout under `layout`'s root:
    /// an evicted block's file is removed.
    pub(super) fn restore_files(
        &mut self,
        layout: &Layout,
        opts: &FsOptions,
        index: &mut Index,
        ages: &mut Ages,
    ) -> Option<RebuildReport> {
        let root = root_fd(layout.root()).ok();
        let mut name = Vec::new();
        self.restore(
            opts,
            index,
            |k, at| ages.stored(k, at),
            |victim| {
                let fanout = Layout::fanout_c(victim);
                let fanout = CStr::from_bytes_with_nul(&fanout).expect("NUL-terminated");
                if let Some(root) = &root
                    && let Ok(fan) = beneath::subdir(root.0, fanout, None, || ())
                {
                    let _ = beneath::unlink_regular(fan.0, Layout::name_c(victim, &mut name));
                }
            },
        )
    }

    /// Opens the segment files of `root` as `Segments::open` does, with
    /// the blocks listed by the trusted index file instead of those a read
    /// of every record finds; the read runs when there is no such file, or
    /// its entries do not parse, lack a record, name a record past the
    /// capacity, or repeat a key or a record.
    pub(super) fn open_segments(
        &mut self,
        root: &Path,
        block_bytes: usize,
        opts: &FsOptions,
        direct: bool,
    ) -> crate::Result<Opened> {
        let Some((body, entries)) = self.body.take() else {
            return Segments::open(root, block_bytes, opts, direct);
        };
        let (segments, _, mut report) = Segments::open_unscanned(root, block_bytes, opts, direct)?;
        match listed(&body, entries, segments.records()) {
            Ok(found) => {
                report.blocks = found.len() as u64;
                report.index_loaded = true;
                Ok((segments, found, report))
            }
            Err(why) => {
                self.rejected = Some(why.into());
                let found = segments.scan(block_bytes, &mut report);
                Ok((segments, found, report))
            }
        }
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
        let mut body = Vec::new();
        let mut entries = 0u64;
        index.ready_walk(|key, record| {
            let k = key.as_bytes();
            body.push(k.len() as u8);
            body.extend_from_slice(k);
            body.extend_from_slice(&record.unwrap_or(u32::MAX).to_le_bytes());
            let at = born(key)
                .and_then(|t| t.duration_since(SystemTime::UNIX_EPOCH).ok())
                .map_or(0, |d| d.as_nanos().min(u64::MAX as u128) as u64);
            body.extend_from_slice(&at.to_le_bytes());
            entries += 1;
        });
        let header = Header {
            entries,
            body_len: body.len() as u64,
            body_sum: xxh3(&body),
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
    /// Writes the index file at a clean shutdown (the workers stopped),
    /// and logs what became of it.
    pub(super) fn persist_index(&mut self) {
        let block_bytes = self.pool.shared().io.slots.slot_bytes();
        let ages = &self.ages;
        let root = self.opts.root.display();
        let started = std::time::Instant::now();
        let (opts, index) = (&self.opts, &self.index);
        let stray = self.counts.removal_errors.get();
        let written = if stray > 0 {
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
                "fs tier {}: index file {INDEX_NAME} not used ({why}); the directory was scanned",
                self.opts.root.display()
            );
            self.errors
                .note(|| format!("index file {INDEX_NAME} not used ({why}); scanned instead"));
        }
    }
}

/// The (key, record) pairs of an index body for `records` segment
/// records, least recently used first, or why they are not usable.
fn listed(body: &[u8], entries: u64, records: u32) -> Result<Vec<(Key, u32)>, &'static str> {
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

/// Removes the temporary files of index and generation writers that
/// are gone (dead on this host, or older than `max_age`).
fn remove_dead_temps(dir: &Fd, max_age: Duration) {
    let Ok(names) = beneath::list(dir.0) else {
        return;
    };
    for name in names {
        let Some(pid) = name.to_str().and_then(temp_writer) else {
            continue;
        };
        let c = beneath::c_name(&name);
        if let Ok(st) = beneath::lstat_at(dir.0, &c)
            && beneath::is_regular(&st)
            && super::rebuild::stale_temp(&st, Some(pid), max_age)
        {
            let _ = beneath::unlink_same(dir.0, &c, &st);
        }
    }
}

/// The writer's pid in the name of a temporary index or generation file
/// (`.<name>.<pid>.<n>.tmp`).
fn temp_writer(name: &str) -> Option<u32> {
    let rest = [INDEX_NAME, GENERATION_NAME]
        .iter()
        .find_map(|n| name.strip_prefix('.')?.strip_prefix(n)?.strip_prefix('.'))?;
    let mut parts = rest.split('.');
    let pid = parts.next()?.parse().ok()?;
    parts.next()?.parse::<u64>().ok()?;
    (parts.next() == Some("tmp") && parts.next().is_none()).then_some(pid)
}

/// The next entry of an index body, `rest` moved past it: (key, record,
/// store time); `None` at the end or where no well-formed entry starts.
fn next_entry(rest: &mut &[u8]) -> Option<(Key, Option<u32>, u64)> {
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

#[cfg(test)]
#[path = "snapshot_tests.rs"]
mod tests;
