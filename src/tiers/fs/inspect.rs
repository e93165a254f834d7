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

use std::fs;
use std::io::Read;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant, SystemTime};

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
    /// The file could not be read.
    Unreadable,
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
        ..DirReport::default()
    };
    let list =
        |p: &Path| fs::read_dir(p).map_err(|e| Error::io(format!("listing {}", p.display()), e));
    let is_fanout = |name: &str| name.len() == 2 && name.bytes().all(|b| b.is_ascii_hexdigit());
    let mut files: Vec<(String, PathBuf)> = Vec::new();
    for dir in list(root)? {
        let Ok(dir) = dir else { continue };
        let name = dir.file_name().to_string_lossy().into_owned();
        if !is_fanout(&name) || !dir.path().is_dir() {
            if dir.path().is_file() {
                r.other_files += 1;
            }
            continue;
        }
        for entry in list(&dir.path())? {
            let Ok(entry) = entry else { continue };
            files.push((name.clone(), entry.path()));
        }
    }
    let total = files.len() as u64;
    let now = SystemTime::now();
    let mut last_progress = Instant::now();
    let mut buf = vec![0u8; 1 << 20];
    for (done, (fanout, path)) in files.iter().enumerate() {
        if last_progress.elapsed() >= Duration::from_secs(1) {
            progress(done as u64, total);
            last_progress = Instant::now();
        }
        let name = path
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        if name.ends_with(".tmp") {
            r.temp_files += 1;
            continue;
        }
        let Some(key) = key_of_block_name(&name) else {
            r.other_files += 1;
            continue;
        };
        let meta = match fs::symlink_metadata(path) {
            Ok(m) if m.is_file() => m,
            Ok(_) => {
                r.other_files += 1;
                continue;
            }
            Err(_) => {
                r.vanished += 1;
                continue;
            }
        };
        r.blocks += 1;
        r.bytes += meta.len();
        r.data_bytes += meta.len().saturating_sub(HEADER_LEN as u64);
        if let Ok(age) = meta
            .modified()
            .map(|m| now.duration_since(m).unwrap_or_default())
        {
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
        let problem = if fanout.as_bytes() != Layout::fanout(&key) {
            Some(Problem::Misplaced)
        } else {
            match check(path, &key, meta.len(), &mut buf) {
                Ok(p) => p,
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                    r.vanished += 1;
                    r.blocks -= 1;
                    continue;
                }
                Err(_) => Some(Problem::Unreadable),
            }
        };
        r.verified += 1;
        if let Some(problem) = problem {
            let removed = opts.repair && fs::remove_file(path).is_ok();
            r.bad.push(BadBlock {
                path: path.clone(),
                record: None,
                problem,
                removed,
            });
        }
    }
    if total > 0 {
        progress(total, total);
    }
    let segments = root.join(SEGMENTS_DIR);
    if segments.is_dir() {
        scan_segments(&segments, verify, opts.repair, &mut r, &mut buf)?;
    }
    Ok(r)
}

/// Adds the records of the segment files under `dir` to `r`: whole
/// headers are blocks; with `verify` every block is read back, and with
/// `repair` a bad record's header is cleared (the record is free at the
/// next open), under the directory's lock.
fn scan_segments(
    dir: &Path,
    verify: bool,
    repair: bool,
    r: &mut DirReport,
    buf: &mut [u8],
) -> Result<()> {
    let _lock = if repair {
        Some(super::segments::lock_dir(dir)?)
    } else {
        None
    };
    let list = fs::read_dir(dir).map_err(|e| Error::io(format!("listing {}", dir.display()), e))?;
    for entry in list.flatten() {
        let path = entry.path();
        let name = entry.file_name().to_string_lossy().into_owned();
        let Some((record_bytes, _)) = super::segments::parse_segment_name(&name) else {
            if name != "lock" {
                r.other_files += 1;
            }
            continue;
        };
        let Ok(file) = fs::OpenOptions::new().read(true).write(repair).open(&path) else {
            r.vanished += 1;
            continue;
        };
        let len = file.metadata().map(|m| m.len()).unwrap_or(0);
        let mut header = vec![0u8; HEADER_LEN];
        for n in 0..len / record_bytes.max(1) {
            let off = n * record_bytes;
            if file.read_exact_at(&mut header, off).is_err() {
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
                    match record_checksum(&file, off, &h, buf) {
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
            let removed = repair && file.write_all_at(&[0u8; HEADER_LEN], off).is_ok();
            r.bad.push(BadBlock {
                path: path.clone(),
                record: Some(n),
                problem,
                removed,
            });
        }
    }
    Ok(())
}

/// Whether the data of the record at `off` matches its header's checksum.
fn record_checksum(
    file: &fs::File,
    off: u64,
    h: &super::format::Header,
    buf: &mut [u8],
) -> std::io::Result<bool> {
    let mut hasher = BlockHasher::new(&h.key, h.data_len);
    let mut at = off + HEADER_LEN as u64;
    let mut left = h.data_len;
    while left > 0 {
        let n = (buf.len() as u64).min(left) as usize;
        file.read_exact_at(&mut buf[..n], at)?;
        hasher.update(&buf[..n]);
        at += n as u64;
        left -= n as u64;
    }
    Ok(hasher.finish() == h.checksum)
}

/// Reads the block file at `path` (of `len` bytes) back: what is wrong
/// with it, if anything.
fn check(
    path: &Path,
    key: &crate::key::Key,
    len: u64,
    buf: &mut [u8],
) -> std::io::Result<Option<Problem>> {
    let mut f = fs::File::open(path)?;
    let mut header = vec![0u8; HEADER_LEN];
    if len < HEADER_LEN as u64 {
        return Ok(Some(Problem::WrongLength));
    }
    f.read_exact(&mut header)?;
    let h = match decode_header(&header) {
        Ok(h) => h,
        Err(HeaderError::BadMagic) => return Ok(Some(Problem::NotABlock)),
        Err(HeaderError::OldFormat(_)) => return Ok(Some(Problem::OtherFormat)),
        Err(HeaderError::Damaged) => return Ok(Some(Problem::DamagedHeader)),
    };
    if h.key != *key {
        return Ok(Some(Problem::WrongKey));
    }
    if HEADER_LEN as u64 + h.data_len != len {
        return Ok(Some(Problem::WrongLength));
    }
    let mut hasher = BlockHasher::new(key, h.data_len);
    let mut left = h.data_len;
    while left > 0 {
        let n = (buf.len() as u64).min(left) as usize;
        f.read_exact(&mut buf[..n])?;
        hasher.update(&buf[..n]);
        left -= n as u64;
    }
    Ok((hasher.finish() != h.checksum).then_some(Problem::Checksum))
}
