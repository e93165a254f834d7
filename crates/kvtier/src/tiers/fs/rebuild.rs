//! The restart scan of the files layout: what it finds in each fan-out
//! directory, which the background scan (`scan.rs`) hands the tier to
//! rebuild its index and byte accounting from the block files already in
//! its directory.
//!
//! - Whole blocks of the current format, block size and key are indexed,
//!   each fan-out directory's oldest file first (so its newest ends up
//!   the most recently used), less recent than every block the tier
//!   stored or used since it opened.
//! - A regular file under a block name that is proven not such a block
//!   (another format version, a damaged or truncated file, another block
//!   size, a header naming another key, a block under another fan-out
//!   directory than its key's) is skipped and removed, so nothing stays on
//!   disk outside the capacity count.  A tier must therefore not share its
//!   directory with processes using another block size or format version.
//!   Files whose names are not block names are left alone.
//! - A block file that cannot be read (permission denied, an I/O error) is
//!   skipped, counted as unreadable and left on disk untouched: only a
//!   block proven bad is removed.
//! - Nothing is followed or waited on: the scan reaches every entry from
//!   its directory's descriptor without following symlinks, and a
//!   symlink, FIFO, socket or device (a *foreign* entry) in place of a
//!   fan-out directory, block file or temporary file is skipped, counted
//!   by kind, and left alone (`beneath.rs`).
//! - Temporary files of writers that are gone (dead on this host, or older
//!   than `stale_temp_age`) are removed, and so are the probe files a
//!   process killed while opening the tier left in its root (both
//!   layouts).
//! - If the directory holds more than the capacity once the scan ended,
//!   the least recently used blocks are evicted down to the low watermark.

use std::ffi::{CStr, OsStr, OsString};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, SystemTime};

use super::FsOptions;
use super::beneath::Fd;
use super::beneath::{self, FOREIGN};
use super::format::{
    HEADER_LEN, Layout, decode_header, file_len, key_of_block_name, pid_of_probe_name,
    pid_of_temp_name,
};
use super::index::Index;
use crate::error::{Error, Result};
use crate::key::Key;

/// Foreign entries (not regular files, or symlinks) a scan skipped, by
/// kind.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ForeignKinds {
    /// Symbolic links.
    pub symlinks: u64,
    /// FIFOs (named pipes).
    pub fifos: u64,
    /// Unix sockets.
    pub sockets: u64,
    /// Character and block devices.
    pub devices: u64,
    /// Anything else (a directory under a file name, ...).
    pub other: u64,
}

impl ForeignKinds {
    /// Counts one entry of mode `mode`.
    pub fn count(&mut self, mode: libc::mode_t) {
        match mode & libc::S_IFMT {
            libc::S_IFLNK => self.symlinks += 1,
            libc::S_IFIFO => self.fifos += 1,
            libc::S_IFSOCK => self.sockets += 1,
            libc::S_IFCHR | libc::S_IFBLK => self.devices += 1,
            _ => self.other += 1,
        }
    }

    /// All of them.
    pub fn total(&self) -> u64 {
        self.symlinks + self.fifos + self.sockets + self.devices + self.other
    }
}

impl std::fmt::Display for ForeignKinds {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{} symlinks, {} FIFOs, {} sockets, {} devices, {} other",
            self.symlinks, self.fifos, self.sockets, self.devices, self.other
        )
    }
}

/// What a restart found in the directory.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RebuildReport {
    /// Whole blocks indexed.
    pub blocks: u64,
    /// Files skipped: another format version, a damaged header, another
    /// block size, a name that does not match the header's key, or a block
    /// under another fan-out directory than its key's.
    pub skipped: u64,
    /// Skipped files removed (those that could not be, a directory under a
    /// block name for instance, are counted as skipped only).
    pub removed: u64,
    /// Temporary files left by crashed writers (block stores, and the
    /// probe files of an open), removed.
    pub temp_removed: u64,
    /// Blocks evicted because the directory held more than the capacity.
    pub evicted: u64,
    /// Block files that could not be opened or read (permission denied,
    /// an I/O error): skipped and left on disk.
    pub unreadable: u64,
    /// Foreign entries (symlinks, FIFOs, sockets, devices) under the
    /// tier's names: skipped, never followed, left alone.
    pub foreign: u64,
    /// The foreign entries by kind.
    pub foreign_kinds: ForeignKinds,
    /// The index persisted at the last clean shutdown was read whole (in
    /// the background, after the open) instead of a scan: no restart scan
    /// ran (`blocks` and `evicted` are the index's; the other counts only
    /// what the open itself removed: probe files of killed opens, segment
    /// files of another block size or past the capacity).  Set when the
    /// last of it was taken in.
    pub index_loaded: bool,
    /// An index file was there but not trusted (torn, damaged, stale, of
    /// another format, layout, block size or fingerprint, not a regular
    /// file of the tier's user, or in the segments layout naming records
    /// the live map says hold no block), at open or when its body turned
    /// out bad while it was read: the restart scan runs instead (after a
    /// body bad midway, for what the chunks read before did not give).
    pub index_rejected: bool,
}

impl RebuildReport {
    fn foreign(&mut self, mode: libc::mode_t) {
        self.foreign += 1;
        self.foreign_kinds.count(mode);
    }
}

fn is_fanout(name: &str) -> bool {
    name.len() == 2 && name.bytes().all(|b| b.is_ascii_hexdigit())
}

fn open_root(layout: &Layout) -> Result<Fd> {
    let shown = || format!("fs tier: listing {}", layout.root().display());
    let c = beneath::c_path(layout.root())
        .map_err(|e| Error::io(shown(), std::io::Error::from_raw_os_error(e)))?;
    beneath::open_root(&c).map_err(|e| Error::io(shown(), std::io::Error::from_raw_os_error(e)))
}

/// Removes the probe files (`.<kind>-probe.<pid>.tmp`) that processes
/// killed while opening a tier left in its root (`root`, an open
/// descriptor), when their writer is gone.
pub(super) fn remove_dead_probes(root: &Fd, max_age: Duration, report: &mut RebuildReport) {
    let Ok(names) = beneath::list(root.0) else {
        return;
    };
    for name in names {
        let Some(pid) = name.to_str().and_then(pid_of_probe_name) else {
            continue;
        };
        let c = beneath::c_name(&name);
        match beneath::lstat_at(root.0, &c) {
            Ok(st) if beneath::is_regular(&st) => {
                if stale_temp(&st, Some(pid), max_age)
                    && beneath::unlink_same(root.0, &c, &st) == Ok(true)
                {
                    report.temp_removed += 1;
                }
            }
            Ok(st) => report.foreign(st.st_mode),
            Err(_) => {}
        }
    }
}

/// The fan-out directories of the root `root` (two hex digits; anything
/// else is left alone), listed at open (one directory of a few hundred
/// entries).
pub(super) fn list_fanouts(layout: &Layout, root: &Fd) -> Result<Vec<OsString>> {
    let names = beneath::list(root.0).map_err(|e| {
        Error::io(
            format!("fs tier: listing {}", layout.root().display()),
            std::io::Error::from_raw_os_error(e),
        )
    })?;
    Ok(names
        .into_iter()
        .filter(|d| d.to_str().is_some_and(is_fanout))
        .collect())
}

/// Removes the probe files of processes killed while opening the tier in
/// `layout`'s root (counted in `report`); a root that cannot be opened is
/// left as it is (the tier's calls find out).
pub(super) fn remove_dead_probes_of(layout: &Layout, opts: &FsOptions, report: &mut RebuildReport) {
    if let Ok(c) = beneath::c_path(layout.root())
        && let Ok(fd) = beneath::open_root(&c)
    {
        remove_dead_probes(&fd, opts.stale_temp_age, report);
    }
}

/// Opens the root of `layout` and removes the probe files of processes
/// killed while opening it (counted in `report`).
pub(super) fn open_and_tidy(
    layout: &Layout,
    opts: &FsOptions,
    report: &mut RebuildReport,
) -> Result<Fd> {
    let root = open_root(layout)?;
    remove_dead_probes(&root, opts.stale_temp_age, report);
    Ok(root)
}

/// Scans fan-out directory `dir` of the root `root` for blocks of
/// `block_bytes`: the whole ones into `found` as (modification time,
/// key), the rest counted in `report` (bad files removed, temporary files
/// of writers that are gone removed, foreign entries left alone).  Stops
/// early when `stop` says so.
pub(super) fn scan_fanout(
    root: &Fd,
    dir: &OsStr,
    block_bytes: usize,
    stale_temp_age: Duration,
    found: &mut Vec<(SystemTime, Key)>,
    report: &mut RebuildReport,
    stop: &AtomicBool,
) {
    let expected_len = file_len(block_bytes);
    let mut header = vec![0u8; HEADER_LEN];
    let fan = match beneath::subdir(root.0, &beneath::c_name(dir), None, || ()) {
        Ok(fan) => fan,
        Err(FOREIGN) => {
            if let Ok(st) = beneath::lstat_at(root.0, &beneath::c_name(dir)) {
                report.foreign(st.st_mode);
            }
            return;
        }
        Err(_) => return,
    };
    let Ok(entries) = beneath::list(fan.0) else {
        return;
    };
    for name in entries {
        if stop.load(Ordering::Relaxed) {
            return;
        }
        let Some(name) = name.to_str() else { continue };
        let c = beneath::c_name(name.as_ref());
        let Ok(st) = beneath::lstat_at(fan.0, &c) else {
            continue;
        };
        if name.ends_with(".tmp") {
            if !beneath::is_regular(&st) {
                report.foreign(st.st_mode);
            } else if stale_temp(&st, pid_of_temp_name(name), stale_temp_age)
                && beneath::unlink_same(fan.0, &c, &st) == Ok(true)
            {
                report.temp_removed += 1;
            }
            continue;
        }
        let Some(key) = key_of_block_name(name) else {
            continue;
        };
        if !beneath::is_regular(&st) {
            report.foreign(st.st_mode);
            continue;
        }
        // A block under another fan-out directory than its key's is
        // not where the tier looks for it (nor counted): not a block.
        let in_place = dir.as_encoded_bytes() == Layout::fanout(&key);
        let checked = if in_place {
            check_block(&fan, &c, &key, block_bytes, expected_len, &mut header)
        } else {
            Check::Bad(st)
        };
        match checked {
            Check::Block(mtime) => found.push((mtime, key)),
            Check::Gone => {}
            Check::Unreadable => report.unreadable += 1,
            Check::Foreign(mode) => report.foreign(mode),
            Check::Bad(st) => {
                report.skipped += 1;
                if beneath::unlink_same(fan.0, &c, &st) == Ok(true) {
                    report.removed += 1;
                }
            }
        }
    }
    // Oldest first, so the newest file ends up the most recently used.
    found.sort_by_key(|(t, _)| *t);
}

/// When the directory held more than the high watermark of the capacity
/// once the restart scan ended, evicts least recently used blocks down to
/// the low watermark: each leaves the Ready blocks as eviction makes it
/// (Removing), and `removed` is called with it (to announce it, remove its
/// file and forget it); returns how many.
pub(super) fn evict_over_capacity(
    opts: &FsOptions,
    index: &mut Index,
    mut removed: impl FnMut(&mut Index, Key),
) -> u64 {
    let cap = opts.capacity_bytes;
    let mut evicted = 0;
    if cap > 0 && index.used() > (cap as f64 * opts.high_watermark) as u64 {
        let low = (cap as f64 * opts.low_watermark) as u64;
        while index.used() > low {
            let Some(victim) = index.evict_one(true) else {
                break;
            };
            removed(index, victim);
            evicted += 1;
        }
    }
    evicted
}

/// What a block file turned out to be.
enum Check {
    /// A whole block of its key, modified at this time.
    Block(SystemTime),
    /// Proven not a block of this format and size: this file may go.
    Bad(libc::stat),
    /// It could not be opened or read: left alone.
    Unreadable,
    /// Not a regular file (replaced since it was listed): left alone.
    Foreign(libc::mode_t),
    /// Gone since it was listed.
    Gone,
}

/// Whether file `name` of `fan` holds a whole block of `key` in the
/// current format: its size is checked before anything is read.
fn check_block(
    fan: &Fd,
    name: &CStr,
    key: &Key,
    block_bytes: usize,
    expected_len: u64,
    header: &mut [u8],
) -> Check {
    let (f, st) = match beneath::open_at(fan.0, name, libc::O_RDONLY, 0, false) {
        Ok(opened) => opened,
        Err(FOREIGN) => {
            return beneath::lstat_at(fan.0, name)
                .map_or(Check::Gone, |st| Check::Foreign(st.st_mode));
        }
        Err(libc::ENOENT) => return Check::Gone,
        Err(_) => return Check::Unreadable,
    };
    if st.st_size as u64 != expected_len {
        return Check::Bad(st);
    }
    // SAFETY: `header` is HEADER_LEN writable bytes.
    let n = unsafe { libc::pread(f.0, header.as_mut_ptr().cast(), header.len(), 0) };
    if n < 0 {
        return Check::Unreadable;
    }
    if n as usize != header.len() {
        return Check::Bad(st);
    }
    match decode_header(header) {
        Ok(h) if h.key == *key && h.data_len == block_bytes as u64 => Check::Block(mtime_of(&st)),
        _ => Check::Bad(st),
    }
}

fn mtime_of(st: &libc::stat) -> SystemTime {
    std::time::UNIX_EPOCH
        + Duration::from_secs(st.st_mtime.max(0) as u64)
        + Duration::from_nanos(st.st_mtime_nsec.clamp(0, 999_999_999) as u64)
}

/// Whether a temporary file's writer (`pid`, when its name tells) is gone:
/// dead on this host, or the file (`st`) is older than `max_age`.
pub(super) fn stale_temp(st: &libc::stat, pid: Option<u32>, max_age: Duration) -> bool {
    if let Some(pid) = pid {
        // SAFETY: signal 0 only checks that the process exists.
        let alive = unsafe { libc::kill(pid as libc::pid_t, 0) } == 0
            || std::io::Error::last_os_error().raw_os_error() == Some(libc::EPERM);
        if !alive {
            return true;
        }
    }
    let mtime = std::time::UNIX_EPOCH + Duration::from_secs(st.st_mtime.max(0) as u64);
    SystemTime::now()
        .duration_since(mtime)
        .is_ok_and(|age| age > max_age)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::ffi::CString;

    /// A dead writer's pid (above any pid_max).
    const DEAD: u32 = 999_999_999;

    fn stat_at(mtime: SystemTime) -> libc::stat {
        // SAFETY: stat is plain data, valid when zeroed.
        let mut st: libc::stat = unsafe { std::mem::zeroed() };
        let since = mtime.duration_since(std::time::UNIX_EPOCH).unwrap();
        st.st_mtime = since.as_secs() as libc::time_t;
        st.st_mtime_nsec = since.subsec_nanos() as _;
        st
    }

    #[test]
    fn foreign_entries_are_counted_by_kind() {
        let mut kinds = ForeignKinds::default();
        for t in [
            libc::S_IFLNK,
            libc::S_IFIFO,
            libc::S_IFIFO,
            libc::S_IFSOCK,
            libc::S_IFCHR,
            libc::S_IFBLK,
            libc::S_IFDIR,
        ] {
            kinds.count(t | 0o644);
        }
        let want = ForeignKinds {
            symlinks: 1,
            fifos: 2,
            sockets: 1,
            devices: 2,
            other: 1,
        };
        assert_eq!(kinds, want);
        assert_eq!(kinds.total(), 7);
        assert_eq!(
            kinds.to_string(),
            "1 symlinks, 2 FIFOs, 1 sockets, 2 devices, 1 other"
        );
        let mut report = RebuildReport::default();
        report.foreign(libc::S_IFSOCK | 0o600);
        report.foreign(libc::S_IFLNK | 0o777);
        assert_eq!((report.foreign, report.foreign_kinds.total()), (2, 2));
    }

    #[test]
    fn fan_out_directories_are_two_hex_digits() {
        for name in ["00", "7f", "aB", "ff"] {
            assert!(is_fanout(name), "{name}");
        }
        for name in ["", "0", "abc", "0g", "zz", "segments"] {
            assert!(!is_fanout(name), "{name}");
        }
    }

    #[test]
    fn modification_times_keep_their_nanoseconds() {
        let t = std::time::UNIX_EPOCH + Duration::new(1_700_000_000, 123_456_789);
        assert_eq!(mtime_of(&stat_at(t)), t);
    }

    #[test]
    fn a_temporary_file_is_stale_when_its_writer_is_dead_or_it_is_old() {
        let hour = Duration::from_secs(3600);
        let fresh = stat_at(SystemTime::now());
        let old = stat_at(SystemTime::now() - 2 * hour);
        let me = Some(std::process::id());
        assert!(!stale_temp(&fresh, me, hour));
        assert!(!stale_temp(&fresh, None, hour));
        assert!(stale_temp(&fresh, Some(DEAD), hour));
        assert!(stale_temp(&old, me, hour));
        assert!(stale_temp(&old, None, hour));
    }

    #[test]
    fn only_regular_probe_files_of_dead_processes_are_removed() {
        let dir = tempfile::tempdir().unwrap();
        let at = |name: String| dir.path().join(name);
        let dead = at(format!(".odirect-probe.{DEAD}.tmp"));
        let live = at(format!(".tmpfile-probe.{}.tmp", std::process::id()));
        let not_a_probe = at(format!(".other-probe.{DEAD}.tmp"));
        let fifo = at(format!(".tmpfile-probe.{DEAD}.tmp"));
        for p in [&dead, &live, &not_a_probe] {
            std::fs::write(p, b"").unwrap();
        }
        let c = CString::new(fifo.to_str().unwrap()).unwrap();
        // SAFETY: NUL-terminated path.
        assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
        let root = beneath::open_root(&beneath::c_path(dir.path()).unwrap()).unwrap();
        let mut report = RebuildReport::default();
        remove_dead_probes(&root, Duration::from_secs(3600), &mut report);
        let mut want = RebuildReport {
            temp_removed: 1,
            foreign: 1,
            ..RebuildReport::default()
        };
        want.foreign_kinds.fifos = 1;
        assert_eq!(report, want);
        assert!(!dead.exists());
        for p in [&live, &not_a_probe, &fifo] {
            assert!(p.symlink_metadata().is_ok(), "{}", p.display());
        }
    }
}
