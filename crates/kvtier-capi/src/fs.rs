//! The built-in file-system tier, from C: its options and
//! `kvtier_manager_add_fs_tier`, which adds one over the manager's slot
//! memory.
//!
//! `kvtier_fs_options` is read into the core [`FsOptions`] (whose
//! `Default` gives the C defaults too), then [`add_builtin_tier`] opens the
//! tier, the same path a JSON configuration takes.

use std::ffi::c_char;
use std::path::PathBuf;
use std::time::Duration;

use super::boundary::{Failure, enter, ffi_call, in_str, opt_str, out_ref};
use super::dialect::kvtier_locality;
use super::dialect::{locality_code, locality_of};
use super::growth::{Grows, read_grown};
use super::manager::kvtier_manager;
use super::status::kvtier_status;
use kvtier_core::config::{BuiltinTier, add_builtin_tier};
use kvtier_core::error::Error;
use kvtier_core::tiering::TierOptions;
use kvtier_core::tiers::fs::{FsLayout, FsOptions};

/// Options of `kvtier_manager_add_fs_tier`.  Initialize with
/// `kvtier_fs_options_default()` (growth rule), then set `directory` at
/// least.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct kvtier_fs_options {
    /// `sizeof(kvtier_fs_options)` as the caller was compiled with.
    pub struct_size: usize,
    /// Directory holding the block files (NUL-terminated; required: NULL
    /// is `KVTIER_STATUS_INVALID_ARGUMENT`).
    pub directory: *const c_char,
    /// Create the directory (and its parents) if missing (default true);
    /// when false a missing directory is `KVTIER_STATUS_NOT_FOUND`.
    pub create_dir: bool,
    /// Byte limit of the files, headers included; 0 = unbounded (default).
    pub capacity_bytes: u64,
    /// Fraction of the capacity above which a store evicts (default 0.95).
    pub high_watermark: f64,
    /// Fraction of the capacity eviction goes down to (default 0.85);
    /// 0 < low <= high <= 1.
    pub low_watermark: f64,
    /// Read-priority worker threads, 1..=256 (default 8).
    pub read_threads: u32,
    /// Write-priority worker threads, 1..=256 (default 8).
    pub write_threads: u32,
    /// Use `O_DIRECT` where the file system supports it (default true).
    pub direct_io: bool,
    /// Make every stored block durable (fdatasync, directory fsync) before
    /// reporting it (default false).
    pub durable: bool,
    /// Write stores as unnamed files (`O_TMPFILE`) linked in when whole,
    /// where supported (default true); false: named temporary files renamed.
    pub unnamed_temp_files: bool,
    /// Other processes use the directory too: keys missing from this
    /// tier's index are looked for on disk, off the caller's thread, with
    /// lookups answering RETRY meanwhile (default false).
    pub shared: bool,
    /// `KVTIER_LOCALITY_LOCAL` (default) or `KVTIER_LOCALITY_REMOTE` (a
    /// network file system), for request tier filters.
    pub locality: kvtier_locality,
    /// Temporary files older than this (ms) are removed at open even when
    /// their writer cannot be shown dead (default 15 minutes).
    pub stale_temp_age_ms: u64,
    /// Whether the tier's events ("stored", "removed") reach
    /// `kvtier_manager_take_events` (default true); its queue holds at most
    /// the manager's `event_capacity` events.
    pub events: bool,
    /// In the segments layout, the size each segment file aims at
    /// (default 1 GiB; must be positive).  Since 0.3.
    pub segment_file_bytes: u64,
    /// `KVTIER_FS_LAYOUT_FILES` (default: a file per block) or
    /// `KVTIER_FS_LAYOUT_SEGMENTS` (records in preallocated segment files:
    /// no file-system metadata work per block; needs `capacity_bytes` and
    /// one process, so refuses `shared`).  Since 0.3.
    pub layout: kvtier_fs_layout,
    /// Permission bits of every file the tier creates (block, temporary,
    /// segment, lock and probe files; default `0600`); the directories it
    /// creates get the same bits with search added wherever read is set
    /// (`0600` gives `0700`, `0640` gives `0750`).  Set with `fchmod`, so
    /// the umask does not narrow it.  Within `0777` and giving the owner
    /// read and write, else `KVTIER_STATUS_INVALID_ARGUMENT`.  Since 0.3.
    pub file_mode: u32,
    /// The block layout the directory's blocks belong to (model id, dtype,
    /// block size, KV layout; 1..=256 printable ASCII bytes,
    /// NUL-terminated), kept in the file `kvtier-layout` of the directory:
    /// a directory without it adopts it, one holding another is refused
    /// with `KVTIER_STATUS_INVALID_ARGUMENT` naming both.  NULL (default):
    /// no check.  Read during the call only.  Since 0.3.
    pub layout_fingerprint: *const c_char,
    /// A block stored more than this many milliseconds ago is a miss and is
    /// removed; 0 (default): no limit.  Since 0.3.
    pub max_age_ms: u64,
    /// At manager shutdown (after the transfers finish), remove every block
    /// of the directory, leaving the directory and its layout file
    /// (default false).  Since 0.3.
    pub clear_on_shutdown: bool,
    /// Segments layout only: keep each key of more than 16 bytes in the
    /// index as a 16-byte digest (about 43 heap bytes a block instead of
    /// 59 for 32-byte keys; every load still checks the key in the block's
    /// header).  The tier then announces no events, a drop by a non-empty
    /// key prefix reads the header of each block kept as a digest, and
    /// `max_age_ms` must be 0 (default false).  Since 0.3.
    pub key_digests: bool,
}

/// How a file-system tier lays its blocks out: a `KVTIER_FS_LAYOUT_*` value.
pub type kvtier_fs_layout = i32;
/// A file per block: any file system, and directories several processes
/// or hosts share.
pub const KVTIER_FS_LAYOUT_FILES: kvtier_fs_layout = 0;
/// Records in large preallocated segment files: local storage used by one
/// process, at the device's speed for small blocks too.
pub const KVTIER_FS_LAYOUT_SEGMENTS: kvtier_fs_layout = 1;

impl Grows for kvtier_fs_options {
    const NAME: &'static str = "kvtier_fs_options";
    /// The 0.2 layout ended with `events` (its size, padding included, is
    /// where the fields added in 0.3 begin).
    const FIRST_LAYOUT_SIZE: usize = std::mem::offset_of!(Self, segment_file_bytes);
}

/// The core layout of a C value.
fn fs_layout_of(code: kvtier_fs_layout) -> Result<FsLayout, Failure> {
    match code {
        KVTIER_FS_LAYOUT_FILES => Ok(FsLayout::Files),
        KVTIER_FS_LAYOUT_SEGMENTS => Ok(FsLayout::Segments),
        v => Err(Error::InvalidArgument(format!(
            "options->layout {v} is not KVTIER_FS_LAYOUT_FILES or _SEGMENTS"
        ))
        .into()),
    }
}

/// Returns the default file-system tier options (the core defaults; the
/// directory NULL: set it) with `struct_size` set.  Safe to call from any
/// thread.
#[unsafe(no_mangle)]
pub extern "C" fn kvtier_fs_options_default() -> kvtier_fs_options {
    let d = FsOptions::default();
    kvtier_fs_options {
        struct_size: std::mem::size_of::<kvtier_fs_options>(),
        directory: std::ptr::null(),
        create_dir: d.create_dir,
        capacity_bytes: d.capacity_bytes,
        high_watermark: d.high_watermark,
        low_watermark: d.low_watermark,
        read_threads: u32::try_from(d.read_threads).unwrap_or(u32::MAX),
        write_threads: u32::try_from(d.write_threads).unwrap_or(u32::MAX),
        direct_io: d.direct_io,
        durable: d.durable,
        unnamed_temp_files: d.unnamed_temp_files,
        shared: d.shared,
        locality: locality_code(d.locality),
        stale_temp_age_ms: u64::try_from(d.stale_temp_age.as_millis()).unwrap_or(u64::MAX),
        events: TierOptions::default().events,
        segment_file_bytes: d.segment_file_bytes,
        layout: match d.layout {
            FsLayout::Files => KVTIER_FS_LAYOUT_FILES,
            FsLayout::Segments => KVTIER_FS_LAYOUT_SEGMENTS,
        },
        file_mode: d.file_mode,
        layout_fingerprint: std::ptr::null(),
        max_age_ms: u64::try_from(d.max_age.as_millis()).unwrap_or(u64::MAX),
        clear_on_shutdown: d.clear_on_shutdown,
        key_digests: d.key_digests,
    }
}

/// The core options of the caller's `kvtier_fs_options` (NULL: the
/// defaults), and whether the tier's events are on.  A NULL directory is
/// the core's empty one.
///
/// # Safety
/// `options` NULL or valid for its `struct_size`, `directory` NULL or
/// NUL-terminated.
pub(crate) unsafe fn fs_options_of(
    options: *const kvtier_fs_options,
) -> Result<(FsOptions, TierOptions), Failure> {
    let c = unsafe { read_grown(options, kvtier_fs_options_default()) }?;
    let root = if c.directory.is_null() {
        PathBuf::new()
    } else {
        PathBuf::from(unsafe { in_str(c.directory, "options->directory") }?)
    };
    let fs = FsOptions {
        root,
        layout: fs_layout_of(c.layout)?,
        segment_file_bytes: c.segment_file_bytes,
        create_dir: c.create_dir,
        capacity_bytes: c.capacity_bytes,
        high_watermark: c.high_watermark,
        low_watermark: c.low_watermark,
        read_threads: c.read_threads as usize,
        write_threads: c.write_threads as usize,
        direct_io: c.direct_io,
        durable: c.durable,
        unnamed_temp_files: c.unnamed_temp_files,
        shared: c.shared,
        locality: locality_of(c.locality, "options->locality")?,
        stale_temp_age: Duration::from_millis(c.stale_temp_age_ms),
        file_mode: c.file_mode,
        layout_fingerprint: unsafe {
            opt_str(c.layout_fingerprint, "options->layout_fingerprint")
        }?
        .map(String::from),
        max_age: Duration::from_millis(c.max_age_ms),
        clear_on_shutdown: c.clear_on_shutdown,
        key_digests: c.key_digests,
    };
    let tier = TierOptions {
        events: c.events,
        ..TierOptions::default()
    };
    Ok((fs, tier))
}

/// Opens a file-system tier over the manager's slot memory (blocks of its
/// slot size) in `options->directory`, starting to rebuild its index in
/// the background (from the index a clean shutdown persisted there, else
/// from the files already there), and registers it as the
/// next secondary tier (name "fs", medium storage); writes its tier index
/// to `*index_out`.  Allowed until the first request starts.
///
/// The manager must have slot memory (made by `kvtier_manager_new` with a
/// region, or from JSON with `block_bytes`), else
/// `KVTIER_STATUS_INVALID_ARGUMENT` saying so.  `options` initialized with
/// `kvtier_fs_options_default()` (growth rule) with `directory` set (NULL
/// options are the defaults, which have no directory); its strings are
/// read during the call only.  Bad options give
/// `KVTIER_STATUS_INVALID_ARGUMENT` (or `_NOT_FOUND` for a missing
/// directory with `create_dir` off) and change nothing.  The manager owns
/// the tier.  Returns without reading a block or the persisted index's
/// entries: the tier serves what the load or scan has indexed so far (a
/// block not indexed yet is a miss), and `kvtier_manager_readiness` lists
/// "fs tier rebuilding" until it has ended (the gauge
/// `kvtier_fs_rebuilding`).  Internally synchronized
/// (as the manager).
///
/// # Safety
/// `manager` a live handle; `options` NULL or valid for its `struct_size`
/// with `directory` NULL or NUL-terminated; `index_out` valid for writes.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn kvtier_manager_add_fs_tier(
    manager: *const kvtier_manager,
    options: *const kvtier_fs_options,
    index_out: *mut usize,
) -> kvtier_status {
    ffi_call!({
        // The manager first: a NULL or poisoned manager opens no tier.
        let m = unsafe { enter::<kvtier_manager>(manager) }?;
        let out = unsafe { out_ref(index_out, "index_out") }?;
        let (fs, tier) = unsafe { fs_options_of(options) }?;
        *out = add_builtin_tier(
            m.local("kvtier_manager_add_fs_tier")?,
            BuiltinTier::Fs(fs),
            tier,
        )?;
        Ok(())
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn c_defaults_are_the_core_defaults() {
        let (fs, tier) = unsafe { fs_options_of(&kvtier_fs_options_default()) }.unwrap();
        assert_eq!(fs, FsOptions::default());
        assert_eq!(tier, TierOptions::default());
        let json: FsOptions = serde_json::from_str("{}").unwrap();
        assert_eq!(json, FsOptions::default());
        let (null, _) = unsafe { fs_options_of(std::ptr::null()) }.unwrap();
        assert_eq!(null, FsOptions::default());
    }

    #[test]
    fn file_modes_read_as_octal_text_or_numbers_and_bad_ones_are_refused() {
        let read = |v: &str| {
            serde_json::from_str::<FsOptions>(&format!(r#"{{"file_mode": {v}}}"#))
                .map(|o| o.file_mode)
        };
        assert_eq!(read(r#""0640""#).unwrap(), 0o640);
        assert_eq!(read(r#""0o660""#).unwrap(), 0o660);
        assert_eq!(read("416").unwrap(), 0o640);
        assert!(read(r#""0999""#).is_err());
        let mut c = kvtier_fs_options_default();
        assert_eq!(c.file_mode, 0o600);
        c.file_mode = 0o640;
        let (fs, _) = unsafe { fs_options_of(&c) }.unwrap();
        assert_eq!(fs.file_mode, 0o640);
        let dir = tempfile::tempdir().unwrap();
        for bad in [0, 0o400, 0o200, 0o1600, 0o7777] {
            let mut o = FsOptions::new(dir.path());
            o.file_mode = bad;
            let mem = kvtier_core::region::SlotMemory::anonymous(2, 4096).unwrap();
            let err = kvtier_core::tiers::fs::FsTier::open(mem, o).unwrap_err();
            assert!(matches!(err, Error::InvalidArgument(_)), "{bad:o}: {err}");
        }
    }
}
