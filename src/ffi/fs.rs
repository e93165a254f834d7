//! The built-in file-system tier, from C: options and attaching it to a
//! manager over a region's slots.
//!
//! Converts and checks, then calls [`crate::tiers::fs::FsTier::open`] and
//! the manager's `add_tier`.

use std::ffi::c_char;
use std::path::PathBuf;
use std::time::Duration;

use super::boundary::{Failure, enter, ffi_call, in_str, out_ref};
use super::manager::kvtier_manager;
use super::region::kvtier_region;
use super::status::kvtier_status;
use super::tier::{KVTIER_LOCALITY_LOCAL, KVTIER_LOCALITY_REMOTE};
use crate::error::Error;
use crate::request::Locality;
use crate::tiering::TierOptions;
use crate::tiers::fs::{FsOptions, FsTier};

/// Options of `kvtier_manager_add_fs_tier`.  Start from
/// `kvtier_fs_options_default()`, then set `directory` at least.
#[repr(C)]
#[allow(non_camel_case_types)]
#[derive(Debug, Clone, Copy)]
pub struct kvtier_fs_options {
    /// Directory holding the block files (NUL-terminated; required).
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
    pub locality: i32,
    /// Temporary files older than this (ms) are removed at open even when
    /// their writer cannot be shown dead (default 15 minutes).
    pub stale_temp_age_ms: u64,
    /// Whether the tier's events ("stored", "removed") reach
    /// `kvtier_manager_take_events` (default true); its queue holds at most
    /// the manager's `event_capacity` events.
    pub events: bool,
}

/// Returns the default file-system tier options (directory NULL: set it).
/// Safe to call from any thread.
#[unsafe(no_mangle)]
pub extern "C" fn kvtier_fs_options_default() -> kvtier_fs_options {
    let d = FsOptions::new("");
    kvtier_fs_options {
        directory: std::ptr::null(),
        create_dir: d.create_dir,
        capacity_bytes: d.capacity_bytes,
        high_watermark: d.high_watermark,
        low_watermark: d.low_watermark,
        read_threads: d.read_threads as u32,
        write_threads: d.write_threads as u32,
        direct_io: d.direct_io,
        durable: d.durable,
        unnamed_temp_files: d.unnamed_temp_files,
        shared: d.shared,
        locality: KVTIER_LOCALITY_LOCAL,
        stale_temp_age_ms: d.stale_temp_age.as_millis() as u64,
        events: true,
    }
}

/// Opens a file-system tier over `region`'s slots (blocks of the region's
/// row size) in `options->directory`, rebuilding its index from the files
/// already there, and registers it with `manager` as the next secondary
/// tier (name "fs", medium storage); writes its tier index to
/// `*tier_index_out`.  Allowed until the first request starts.
///
/// `options` must be initialized by `kvtier_fs_options_default()` with
/// `directory` set; its strings are read during the call only.  Bad options
/// give `KVTIER_STATUS_INVALID_ARGUMENT` (or `_NOT_FOUND` for a missing
/// directory with `create_dir` off) and change nothing; so does a region
/// with fewer slots than the manager's primary tier (the tier would be
/// handed slot ids past its end).  The manager owns
/// the tier; the tier keeps the region's mapping alive for as long as it
/// lives, so the region handle may be closed earlier.  Blocks while it
/// scans the directory.  Internally synchronized (as the manager).
///
/// # Safety
/// `manager` and `region` must be live handles; `options` valid for reads
/// with `directory` a NUL-terminated string; `tier_index_out` valid for writes.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn kvtier_manager_add_fs_tier(
    manager: *mut kvtier_manager,
    region: *const kvtier_region,
    options: *const kvtier_fs_options,
    tier_index_out: *mut usize,
) -> kvtier_status {
    ffi_call!({
        // The manager first: a NULL or poisoned manager opens no tier.
        let m = unsafe { enter::<kvtier_manager>(manager) }?;
        let r = unsafe { enter::<kvtier_region>(region) }?;
        let c = unsafe { options.as_ref() }.ok_or(Failure::Null("options"))?;
        let out = unsafe { out_ref(tier_index_out, "tier_index_out") }?;
        let dir = unsafe { in_str(c.directory, "options->directory") }?;
        let locality = match c.locality {
            KVTIER_LOCALITY_LOCAL => Locality::Local,
            KVTIER_LOCALITY_REMOTE => Locality::Remote,
            v => {
                return Err(Error::InvalidArgument(format!(
                    "options->locality {v} is not KVTIER_LOCALITY_LOCAL or _REMOTE"
                ))
                .into());
            }
        };
        let opts = FsOptions {
            root: PathBuf::from(dir),
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
            locality,
            stale_temp_age: Duration::from_millis(c.stale_temp_age_ms),
        };
        // Checked before the directory is scanned: a region of fewer slots
        // than the primary tier is refused either way.
        m.check_slots(&r.slots())?;
        let tier = FsTier::open(r.slots(), opts)?;
        let tier_options = TierOptions {
            events: c.events,
            ..TierOptions::default()
        };
        *out = m.add_tier_with(Box::new(tier), tier_options)?;
        Ok(())
    })
}
