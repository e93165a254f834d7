//! The restart scan: rebuilds the tier's index and byte accounting from
//! the block files already in its directory.
//!
//! - Whole blocks of the current format, block size and key are indexed,
//!   oldest file first (so the newest ends up the most recently used).
//! - A file under a block name that is not such a block (another format
//!   version, a damaged or truncated file, another block size, a header
//!   naming another key, a block under another fan-out directory than its
//!   key's) is skipped and removed, so nothing stays on disk
//!   outside the capacity count.  A tier must therefore not share its
//!   directory with processes using another block size or format version.
//!   Files whose names are not block names are left alone.
//! - Temporary files of writers that are gone (dead on this host, or older
//!   than `stale_temp_age`) are removed, and so are the probe files a
//!   process killed while opening the tier left in its root.
//! - If the directory holds more than the capacity, the least recently
//!   used blocks are evicted down to the low watermark.

use std::fs;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{FileExt, MetadataExt};
use std::path::Path;
use std::time::{Duration, SystemTime};

use super::FsOptions;
use super::format::{
    HEADER_LEN, Layout, decode_header, file_len, key_of_block_name, pid_of_probe_name,
    pid_of_temp_name,
};
use super::index::{Index, State};
use crate::error::{Error, Result};
use crate::key::Key;

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
}

/// Rebuilds `index` from the files under `layout`'s root.
pub(super) fn rebuild(
    layout: &Layout,
    block_bytes: usize,
    opts: &FsOptions,
    index: &mut Index,
) -> Result<RebuildReport> {
    let mut report = RebuildReport::default();
    let mut found: Vec<(SystemTime, Key)> = Vec::new();
    let expected_len = file_len(block_bytes);
    let mut header = vec![0u8; HEADER_LEN];
    let is_fanout = |name: &str| name.len() == 2 && name.bytes().all(|b| b.is_ascii_hexdigit());
    let read = |p: &Path| {
        fs::read_dir(p).map_err(|e| Error::io(format!("fs tier: listing {}", p.display()), e))
    };
    for dir in read(layout.root())? {
        let Ok(dir) = dir else { continue };
        if let Some(name) = dir.file_name().to_str()
            && let Some(pid) = pid_of_probe_name(name)
        {
            if stale_temp(&dir.path(), Some(pid), opts.stale_temp_age)
                && fs::remove_file(dir.path()).is_ok()
            {
                report.temp_removed += 1;
            }
            continue;
        }
        if !dir.file_name().to_str().is_some_and(is_fanout) || !dir.path().is_dir() {
            continue;
        }
        let fanout = dir.file_name();
        for entry in read(&dir.path())? {
            let Ok(entry) = entry else { continue };
            let name = entry.file_name();
            let Some(name) = name.to_str() else { continue };
            let path = entry.path();
            if name.ends_with(".tmp") {
                if stale_temp(&path, pid_of_temp_name(name), opts.stale_temp_age)
                    && fs::remove_file(&path).is_ok()
                {
                    report.temp_removed += 1;
                }
                continue;
            }
            let Some(key) = key_of_block_name(name) else {
                continue;
            };
            // A block under another fan-out directory than its key's is
            // not where the tier looks for it (nor counted): not a block.
            let in_place = fanout.as_bytes() == Layout::fanout(&key);
            let block = in_place
                .then(|| check_block(&path, &key, block_bytes, expected_len, &mut header))
                .flatten();
            match block {
                Some(mtime) if index.get(&key).is_none() => found.push((mtime, key)),
                Some(_) => {}
                None => {
                    report.skipped += 1;
                    if fs::remove_file(&path).is_ok() {
                        report.removed += 1;
                    }
                }
            }
        }
    }
    // Oldest first, so the newest file ends up the most recently used.
    found.sort_by_key(|(t, _)| *t);
    for (_, key) in found {
        index.insert(key, State::Ready);
        report.blocks += 1;
    }
    report.evicted = evict_over_capacity(opts, index, |victim| {
        let _ = fs::remove_file(layout.block_path(victim));
    });
    report.blocks -= report.evicted;
    Ok(report)
}

/// When a restart found more than the high watermark of the capacity,
/// evicts least recently used blocks down to the low watermark, calling
/// `removed` for each; returns how many.
pub(super) fn evict_over_capacity(
    opts: &FsOptions,
    index: &mut Index,
    mut removed: impl FnMut(&Key),
) -> u64 {
    let cap = opts.capacity_bytes;
    let mut evicted = 0;
    if cap > 0 && index.used() > (cap as f64 * opts.high_watermark) as u64 {
        let low = (cap as f64 * opts.low_watermark) as u64;
        while index.used() > low {
            let Some(victim) = index.evict_one(false) else {
                break;
            };
            removed(&victim);
            evicted += 1;
        }
    }
    evicted
}

/// The file's mtime if it holds a whole block of `key` in the current format.
fn check_block(
    path: &Path,
    key: &Key,
    block_bytes: usize,
    expected_len: u64,
    header: &mut [u8],
) -> Option<SystemTime> {
    let f = fs::File::open(path).ok()?;
    let meta = f.metadata().ok()?;
    if !meta.is_file() || meta.len() != expected_len {
        return None;
    }
    f.read_exact_at(header, 0).ok()?;
    let h = decode_header(header).ok()?;
    if h.key != *key || h.data_len != block_bytes as u64 {
        return None;
    }
    meta.modified().ok()
}

/// Whether a temporary file's writer (`pid`, when its name tells) is gone:
/// dead on this host, or the file is older than `max_age`.
fn stale_temp(path: &Path, pid: Option<u32>, max_age: Duration) -> bool {
    if let Some(pid) = pid {
        // SAFETY: signal 0 only checks that the process exists.
        let alive = unsafe { libc::kill(pid as libc::pid_t, 0) } == 0
            || std::io::Error::last_os_error().raw_os_error() == Some(libc::EPERM);
        if !alive {
            return true;
        }
    }
    fs::metadata(path)
        .map(|m| {
            let mtime = std::time::UNIX_EPOCH + Duration::from_secs(m.mtime().max(0) as u64);
            SystemTime::now()
                .duration_since(mtime)
                .is_ok_and(|age| age > max_age)
        })
        .unwrap_or(false)
}
