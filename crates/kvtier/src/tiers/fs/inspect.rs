//! What `kvtier-inspect` reports about an fs-tier directory: the blocks
//! and bytes it holds and their ages, and, with a verify pass, every block
//! whose file is not a whole block of its key (read back and checksummed),
//! removed only when asked to repair.  Blocks in segment files (the
//! segments layout) are counted and verified record by record; they have
//! no age of their own, and repairing one clears its header, which needs
//! the directory's lock (no tier running on it).
//!
//! Read-only unless [`ScanOptions::repair`]: a scan opens block files for
//! reading and lists directories; it never writes, and it can run beside a
//! live tier (a block removed by the tier meanwhile is counted as gone,
//! not as bad).
//!
//! It never follows a symlink inside the directory and never opens what
//! is not a regular file (`beneath.rs`): symlinks, FIFOs,
//! sockets and devices under the tier's names are listed as foreign and
//! left alone, so a scan never hangs and a repair never touches anything
//! outside the directory.  Only a block proven bad (header, key, length,
//! checksum, place) is removed; one that cannot be read is reported and
//! left.  Files and directories more open than the expected mode (the
//! tier's default `0600`, directories `0700`) are listed too.

use std::ffi::{CStr, OsString};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant, SystemTime};

use super::beneath::Fd;
use super::beneath::{self, FOREIGN};
use super::format::{
    BlockHasher, HEADER_LEN, HeaderError, Layout, decode_header, key_of_block_name,
};
use super::segments::SEGMENTS_DIR;
use crate::error::{Error, Result};

/// What to do.
#[derive(Clone, Copy, Debug, Default)]
pub struct ScanOptions {
    /// Read every block and check its header, length and checksum.
    pub verify: bool,
    /// Remove the bad blocks the verify pass finds (implies verify).
    pub repair: bool,
    /// The file mode the tier was configured with (`None`: its default,
    /// `0o600`): files with more permission bits, and directories with
    /// more than its directory mode, are listed in
    /// [`DirReport::too_open`].
    pub file_mode: Option<u32>,
}

/// Why a block file is bad.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Problem {
    /// Not a kvtier block file (its header's magic is not ours).
    NotABlock,
    /// A block file of another format version.
    OtherFormat,
    /// The header is damaged (its own checksum does not match).
    DamagedHeader,
    /// The header names another key than the file name.
    WrongKey,
    /// The file is under another fan-out directory than its key's.
    Misplaced,
    /// The file is shorter or longer than its header says.
    WrongLength,
    /// The data does not match the checksum.
    Checksum,
    /// The file could not be read (left alone, never removed).
    Unreadable,
    /// Its data has holes (never written by the tier): not read, left
    /// alone.
    Sparse,
}

impl Problem {
    /// Whether the block is proven bad, so a repair may remove it.
    pub fn removable(self) -> bool {
        !matches!(self, Problem::Unreadable | Problem::Sparse)
    }
}

impl Problem {
    /// A short name (`checksum`, `wrong_length`, ...).
    pub fn as_str(self) -> &'static str {
        match self {
            Problem::NotABlock => "not_a_block",
            Problem::OtherFormat => "other_format",
            Problem::DamagedHeader => "damaged_header",
            Problem::WrongKey => "wrong_key",
            Problem::Misplaced => "misplaced",
            Problem::WrongLength => "wrong_length",
            Problem::Checksum => "checksum",
            Problem::Unreadable => "unreadable",
            Problem::Sparse => "sparse",
        }
    }
}

/// One bad block file, or bad segment record.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BadBlock {
    /// Its path (for a record, its segment file's).
    pub path: PathBuf,
    /// For a segment record, its number within the file.
    pub record: Option<u64>,
    /// What is wrong.
    pub problem: Problem,
    /// Whether it was removed (repair).
    pub removed: bool,
}

/// Ages of the blocks (now minus each file's modification time) in
/// buckets: at most a minute, an hour, a day, a week, older.
pub const AGE_BOUNDS: [(&str, Duration); 4] = [
    ("1m", Duration::from_secs(60)),
    ("1h", Duration::from_secs(3600)),
    ("1d", Duration::from_secs(86400)),
    ("7d", Duration::from_secs(7 * 86400)),
];

/// What a scan found.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct DirReport {
    /// The directory.
    pub root: PathBuf,
    /// Block files (`<aa>/<key hex>.kvb`).
    pub blocks: u64,
    /// Their bytes on disk (headers included).
    pub bytes: u64,
    /// Their data bytes (as their sizes say: file size minus header).
    pub data_bytes: u64,
    /// Age of the oldest block.
    pub oldest: Option<Duration>,
    /// Age of the newest block.
    pub newest: Option<Duration>,
    /// Blocks per age bucket ([`AGE_BOUNDS`], then older).
    pub ages: [u64; 5],
    /// Temporary files of unfinished writes.
    pub temp_files: u64,
    /// Other files, left alone.
    pub other_files: u64,
    /// Blocks checked by the verify pass.
    pub verified: u64,
    /// Blocks that vanished during the scan (a live tier removed them).
    pub vanished: u64,
    /// Bad blocks the verify pass found.
    pub bad: Vec<BadBlock>,
    /// Foreign entries under the tier's names (symlinks, FIFOs, sockets,
    /// devices): their paths and kinds; never followed nor opened.
    pub foreign: Vec<(PathBuf, &'static str)>,
    /// Files and directories more open than the expected mode: their
    /// paths and permission bits.
    pub too_open: Vec<(PathBuf, u32)>,
    /// The file mode the modes were checked against.
    pub file_mode: u32,
    /// The layout fingerprint the directory's marker names (see
    /// [`super::marker`]), if it has one.
    pub layout_fingerprint: Option<String>,
    /// Why the marker could not be read, if it could not (it is then not
    /// the tier's: a symlink, FIFO, another user's or damaged file).
    pub layout_marker_problem: Option<String>,
}

fn io_err(what: String, errno: i32) -> Error {
    Error::io(what, std::io::Error::from_raw_os_error(errno))
}

fn is_fanout(name: &str) -> bool {
    name.len() == 2 && name.bytes().all(|b| b.is_ascii_hexdigit())
}

/// Whether `path` (of status `st`) is not a regular file, and so is left
/// unread: listed as foreign under one of the tier's names (`tier_name`),
/// else counted among the other files.
fn set_aside_irregular(r: &mut DirReport, path: &Path, st: &libc::stat, tier_name: bool) -> bool {
    if beneath::is_regular(st) {
        return false;
    }
    if tier_name {
        r.foreign
            .push((path.to_path_buf(), beneath::kind_name(st.st_mode)));
    } else {
        r.other_files += 1;
    }
    true
}

/// Notes `path` in `r.too_open` when its permission bits (`st`) exceed
/// the expected mode (files) or its directory mode (directories).
fn check_mode(r: &mut DirReport, path: &Path, st: &libc::stat) {
    let allowed = if st.st_mode & libc::S_IFMT == libc::S_IFDIR {
        beneath::dir_mode_of(r.file_mode)
    } else {
        r.file_mode
    };
    let bits = st.st_mode & 0o7777;
    if bits & !allowed != 0 {
        r.too_open.push((path.to_path_buf(), bits));
    }
}

fn seconds_since(now: SystemTime, st: &libc::stat) -> Option<Duration> {
    let mtime =
        std::time::UNIX_EPOCH.checked_add(Duration::from_secs(u64::try_from(st.st_mtime).ok()?))?;
    Some(now.duration_since(mtime).unwrap_or_default())
}

/// Lists every block file of the fs-tier directory `root`; with
/// `verify`, reads each one back.  `progress(done, total)` is called
/// about once a second during a long scan.
pub fn scan(
    root: &Path,
    opts: ScanOptions,
    mut progress: impl FnMut(u64, u64),
) -> Result<DirReport> {
    let verify = opts.verify || opts.repair;
    let mut r = DirReport {
        root: root.to_path_buf(),
        file_mode: opts.file_mode.unwrap_or(0o600),
        ..DirReport::default()
    };
    let listing = |e| io_err(format!("listing {}", root.display()), e);
    let root_fd = beneath::c_path(root)
        .and_then(|c| beneath::open_root(&c))
        .map_err(listing)?;
    let mut fans: Vec<(String, Fd)> = Vec::new();
    let mut files: Vec<(usize, OsString)> = Vec::new();
    let mut segments = None;
    for name in beneath::list(root_fd.0).map_err(listing)? {
        let c = beneath::c_name(&name);
        let Ok(st) = beneath::lstat_at(root_fd.0, &c) else {
            continue;
        };
        let path = root.join(&name);
        let text = name.to_string_lossy().into_owned();
        let tier_name = is_fanout(&text) || text == SEGMENTS_DIR;
        if tier_name && st.st_mode & libc::S_IFMT != libc::S_IFDIR {
            if beneath::is_regular(&st) {
                r.other_files += 1;
            } else {
                r.foreign.push((path, beneath::kind_name(st.st_mode)));
            }
            continue;
        }
        // The tier's own bookkeeping (the index persisted at shutdown and
        // its generation): neither blocks nor other files.
        if text == super::snapshot::INDEX_NAME || text == super::snapshot::GENERATION_NAME {
            continue;
        }
        if text == super::marker::MARKER_NAME {
            match super::marker::read(root) {
                Ok(f) => r.layout_fingerprint = f,
                Err(e) => r.layout_marker_problem = Some(e.to_string()),
            }
            continue;
        }
        if !tier_name {
            if beneath::is_regular(&st) {
                r.other_files += 1;
            }
            continue;
        }
        let dir = match beneath::subdir(root_fd.0, &c, None, || ()) {
            Ok(dir) => dir,
            Err(FOREIGN) => {
                r.foreign.push((path, beneath::kind_name(st.st_mode)));
                continue;
            }
            Err(_) => continue,
        };
        check_mode(&mut r, &path, &st);
        if text == SEGMENTS_DIR {
            segments = Some(dir);
            continue;
        }
        for entry in beneath::list(dir.0).unwrap_or_default() {
            files.push((fans.len(), entry));
        }
        fans.push((text, dir));
    }
    let total = files.len() as u64;
    let now = SystemTime::now();
    let mut last_progress = Instant::now();
    let mut buf = vec![0u8; 1 << 20];
    for (done, (fan, name)) in files.iter().enumerate() {
        if last_progress.elapsed() >= Duration::from_secs(1) {
            progress(done as u64, total);
            last_progress = Instant::now();
        }
        let (fanout, dir) = &fans[*fan];
        let path = root.join(fanout).join(name);
        let c = beneath::c_name(name);
        let st = match beneath::lstat_at(dir.0, &c) {
            Ok(st) => st,
            Err(_) => {
                r.vanished += 1;
                continue;
            }
        };
        let text = name.to_string_lossy();
        let key = key_of_block_name(&text);
        let tier_name = key.is_some() || text.ends_with(".tmp");
        if set_aside_irregular(&mut r, &path, &st, tier_name) {
            continue;
        }
        check_mode(&mut r, &path, &st);
        let Some(key) = key else {
            if text.ends_with(".tmp") {
                r.temp_files += 1;
            } else {
                r.other_files += 1;
            }
            continue;
        };
        r.blocks += 1;
        let len = st.st_size as u64;
        r.bytes += len;
        r.data_bytes += len.saturating_sub(HEADER_LEN as u64);
        if let Some(age) = seconds_since(now, &st) {
            r.oldest = Some(r.oldest.map_or(age, |o| o.max(age)));
            r.newest = Some(r.newest.map_or(age, |n| n.min(age)));
            let bucket = AGE_BOUNDS
                .iter()
                .position(|(_, b)| age <= *b)
                .unwrap_or(AGE_BOUNDS.len());
            r.ages[bucket] += 1;
        }
        if !verify {
            continue;
        }
        let (problem, checked) = if fanout.as_bytes() != Layout::fanout(&key) {
            (Some(Problem::Misplaced), st)
        } else {
            match check(dir, &c, &key, &mut buf) {
                Ok(found) => found,
                Err(libc::ENOENT) => {
                    r.vanished += 1;
                    r.blocks -= 1;
                    continue;
                }
                Err(FOREIGN) => {
                    // Replaced since it was listed.
                    r.foreign.push((path, "replaced"));
                    r.blocks -= 1;
                    continue;
                }
                Err(_) => (Some(Problem::Unreadable), st),
            }
        };
        r.verified += 1;
        if let Some(problem) = problem {
            let removed = opts.repair
                && problem.removable()
                && beneath::unlink_same(dir.0, &c, &checked) == Ok(true);
            r.bad.push(BadBlock {
                path,
                record: None,
                problem,
                removed,
            });
        }
    }
    if total > 0 {
        progress(total, total);
    }
    if let Some(seg) = segments {
        scan_segments(
            &seg,
            &root.join(SEGMENTS_DIR),
            verify,
            opts.repair,
            &mut r,
            &mut buf,
        )?;
    }
    Ok(r)
}

/// Reads `n` bytes at `off` of `fd` into `buf`.
fn read_exact_at(fd: i32, buf: &mut [u8], mut off: u64) -> std::result::Result<(), i32> {
    let mut done = 0;
    while done < buf.len() {
        // SAFETY: the rest of `buf` is writable.
        let n = unsafe {
            libc::pread(
                fd,
                buf[done..].as_mut_ptr().cast(),
                buf.len() - done,
                off as libc::off_t,
            )
        };
        if n < 0 {
            let e = super::beneath::errno();
            if e == libc::EINTR {
                continue;
            }
            return Err(e);
        }
        if n == 0 {
            return Err(libc::ENODATA);
        }
        done += n as usize;
        off += n as u64;
    }
    Ok(())
}

/// The offset of the first data at or after `off` in `fd` (`SEEK_DATA`;
/// `None` when only holes follow).  Where the file system cannot tell,
/// `off` itself.
fn next_data(fd: i32, off: u64) -> Option<u64> {
    // SAFETY: lseek on an open descriptor.
    let at = unsafe { libc::lseek(fd, off as libc::off_t, libc::SEEK_DATA) };
    if at < 0 {
        return if super::beneath::errno() == libc::ENXIO {
            None
        } else {
            Some(off)
        };
    }
    Some(at as u64)
}

/// Adds the records of the segment files in `seg` (shown as `dir`) to
/// `r`: whole headers are blocks; with `verify` every block is read back,
/// and with `repair` a bad record's header is cleared (the record is free
/// at the next open), under the directory's lock.  Holes (never written)
/// are skipped without reading, so a huge sparse file costs nothing.
fn scan_segments(
    seg: &Fd,
    dir: &Path,
    verify: bool,
    repair: bool,
    r: &mut DirReport,
    buf: &mut [u8],
) -> Result<()> {
    let _lock = if repair {
        Some(super::segments::lock_dir(seg, dir, r.file_mode)?.0)
    } else {
        None
    };
    let names =
        beneath::list(seg.0).map_err(|e| io_err(format!("listing {}", dir.display()), e))?;
    for name in names {
        let path = dir.join(&name);
        let text = name.to_string_lossy().into_owned();
        let c = beneath::c_name(&name);
        let Ok(st) = beneath::lstat_at(seg.0, &c) else {
            r.vanished += 1;
            continue;
        };
        let parsed = super::segments::parse_segment_name(&text);
        let tier_name = parsed.is_some()
            || text == super::segments::LOCK_NAME
            || text == super::live::LIVE_NAME
            || text == super::live::LIVE_TEMP_NAME;
        if set_aside_irregular(r, &path, &st, tier_name) {
            continue;
        }
        check_mode(r, &path, &st);
        let Some((record_bytes, _)) = parsed else {
            if !tier_name {
                r.other_files += 1;
            }
            continue;
        };
        let flags = if repair { libc::O_RDWR } else { libc::O_RDONLY };
        let (file, fst) = match beneath::open_at(seg.0, &c, flags, 0, false) {
            Ok(opened) => opened,
            Err(FOREIGN) => {
                r.foreign.push((path, "replaced"));
                continue;
            }
            Err(_) => {
                r.vanished += 1;
                continue;
            }
        };
        let len = fst.st_size as u64;
        let record_bytes = record_bytes.max(1);
        let mut header = vec![0u8; HEADER_LEN];
        let mut n = 0;
        while n < len / record_bytes {
            let off = n * record_bytes;
            // Skip the holes: a record with no data at its start was never
            // written (its header reads as zeros).
            match next_data(file.0, off) {
                None => break,
                Some(at) if at / record_bytes > n => {
                    n = at / record_bytes;
                    continue;
                }
                Some(_) => {}
            }
            n += 1;
            if read_exact_at(file.0, &mut header, off).is_err() {
                continue;
            }
            if header[..8] == [0; 8] {
                continue; // never written, or cleared
            }
            let problem = match decode_header(&header) {
                Ok(h) if HEADER_LEN as u64 + h.data_len == record_bytes => {
                    r.blocks += 1;
                    r.bytes += record_bytes;
                    r.data_bytes += h.data_len;
                    if !verify {
                        continue;
                    }
                    r.verified += 1;
                    match record_checksum(file.0, off, &h, buf) {
                        Ok(true) => continue,
                        Ok(false) => Problem::Checksum,
                        Err(_) => Problem::Unreadable,
                    }
                }
                Ok(_) => Problem::WrongLength,
                Err(HeaderError::BadMagic) => Problem::NotABlock,
                Err(HeaderError::OldFormat(_)) => Problem::OtherFormat,
                Err(HeaderError::Damaged) => Problem::DamagedHeader,
            };
            if !verify {
                continue;
            }
            let removed = repair && problem.removable() && clear_header(file.0, off);
            r.bad.push(BadBlock {
                path: path.clone(),
                record: Some(off / record_bytes),
                problem,
                removed,
            });
        }
    }
    Ok(())
}

/// Zeroes the header at `off` of `fd`.
fn clear_header(fd: i32, off: u64) -> bool {
    let zeros = [0u8; HEADER_LEN];
    // SAFETY: `zeros` is HEADER_LEN readable bytes.
    let n = unsafe { libc::pwrite(fd, zeros.as_ptr().cast(), HEADER_LEN, off as libc::off_t) };
    n == HEADER_LEN as isize
}

/// Whether the data of the record at `off` matches its header's checksum.
fn record_checksum(
    fd: i32,
    off: u64,
    h: &super::format::Header,
    buf: &mut [u8],
) -> std::result::Result<bool, i32> {
    let mut hasher = BlockHasher::new(&h.key, h.data_len);
    let mut at = off + HEADER_LEN as u64;
    let mut left = h.data_len;
    while left > 0 {
        let n = (buf.len() as u64).min(left) as usize;
        read_exact_at(fd, &mut buf[..n], at)?;
        hasher.update(&buf[..n]);
        at += n as u64;
        left -= n as u64;
    }
    Ok(hasher.finish() == h.checksum)
}

/// Reads block file `name` of `dir` back (a regular file, opened without
/// following a symlink or waiting): what is wrong with it, if anything,
/// and the `fstat` of what was read.  Sizes come before reading: a file
/// whose header's length disagrees with its size is not read further, and
/// one with holes in its data is not read at all.
fn check(
    dir: &Fd,
    name: &CStr,
    key: &crate::key::Key,
    buf: &mut [u8],
) -> std::result::Result<(Option<Problem>, libc::stat), i32> {
    let (f, st) = beneath::open_at(dir.0, name, libc::O_RDONLY, 0, false)?;
    let len = st.st_size as u64;
    let mut header = vec![0u8; HEADER_LEN];
    if len < HEADER_LEN as u64 {
        return Ok((Some(Problem::WrongLength), st));
    }
    read_exact_at(f.0, &mut header, 0)?;
    let h = match decode_header(&header) {
        Ok(h) => h,
        Err(HeaderError::BadMagic) => return Ok((Some(Problem::NotABlock), st)),
        Err(HeaderError::OldFormat(_)) => return Ok((Some(Problem::OtherFormat), st)),
        Err(HeaderError::Damaged) => return Ok((Some(Problem::DamagedHeader), st)),
    };
    if h.key != *key {
        return Ok((Some(Problem::WrongKey), st));
    }
    if (HEADER_LEN as u64).checked_add(h.data_len) != Some(len) {
        return Ok((Some(Problem::WrongLength), st));
    }
    // SAFETY: lseek on an open descriptor.
    let hole = unsafe { libc::lseek(f.0, HEADER_LEN as libc::off_t, libc::SEEK_HOLE) };
    if hole >= 0 && (hole as u64) < len {
        return Ok((Some(Problem::Sparse), st));
    }
    let mut hasher = BlockHasher::new(key, h.data_len);
    let mut left = h.data_len;
    let mut at = HEADER_LEN as u64;
    while left > 0 {
        let n = (buf.len() as u64).min(left) as usize;
        read_exact_at(f.0, &mut buf[..n], at)?;
        hasher.update(&buf[..n]);
        left -= n as u64;
        at += n as u64;
    }
    Ok((
        (hasher.finish() != h.checksum).then_some(Problem::Checksum),
        st,
    ))
}
