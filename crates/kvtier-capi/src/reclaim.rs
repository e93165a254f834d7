//! `kvtier_region_reclaim_stale`: removing the files of regions no process
//! maps any more, from C.
//!
//! Converts the arguments, calls [`kvtier_core::region::reclaim_stale`], and
//! hands each region it found to the caller's callback.

use std::ffi::{CString, c_char, c_void};
use std::os::unix::ffi::OsStrExt;
use std::path::PathBuf;

use super::boundary::{ffi_call, in_str};
use super::status::kvtier_status;
use kvtier_core::region::{FoundRegion, Kept, RegionOptions, reclaim_stale};

/// What `kvtier_region_reclaim_stale` did with one region's files: a
/// `KVTIER_REGION_RECLAIM_*` value.
pub type kvtier_region_reclaim_outcome = i32;
/// Its files were removed: no process held them.
pub const KVTIER_REGION_RECLAIM_REMOVED: kvtier_region_reclaim_outcome = 0;
/// Kept: a process holds one of its files (it maps the region, or is
/// setting it up).
pub const KVTIER_REGION_RECLAIM_HELD: kvtier_region_reclaim_outcome = 1;
/// Kept: one of its names is a symlink, directory, FIFO, socket or device.
pub const KVTIER_REGION_RECLAIM_NOT_REGULAR: kvtier_region_reclaim_outcome = 2;
/// Kept: one of its files belongs to another user.
pub const KVTIER_REGION_RECLAIM_OTHER_USER: kvtier_region_reclaim_outcome = 3;
/// Kept: its first file does not begin with a region's layout header.
pub const KVTIER_REGION_RECLAIM_NO_HEADER: kvtier_region_reclaim_outcome = 4;
/// Kept: a file was removed, replaced or created while it was looked at.
pub const KVTIER_REGION_RECLAIM_CHANGED: kvtier_region_reclaim_outcome = 5;
/// Kept (or partly removed): looking at or removing a file failed.
pub const KVTIER_REGION_RECLAIM_FAILED: kvtier_region_reclaim_outcome = 6;

/// One region `kvtier_region_reclaim_stale` found, handed to its callback.
/// The strings live during the callback only.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct kvtier_region_reclaim_entry {
    /// The region's name (its first file's name), NUL-terminated.
    pub name: *const c_char,
    /// Why its files were kept, NUL-terminated (naming the file); "" when
    /// they were removed.
    pub reason: *const c_char,
    /// Bytes of its files found.
    pub bytes: u64,
    /// `KVTIER_REGION_RECLAIM_REMOVED`, or why the files were kept.
    pub outcome: kvtier_region_reclaim_outcome,
    /// Segment files found (`<name>.seg<N>`).
    pub segment_files: u32,
    /// Whether its first file was found (false: only segments were).
    pub first_file: bool,
}

/// Receives one region `kvtier_region_reclaim_stale` found (see
/// `kvtier_region_reclaim_entry`).  Called on the calling thread once the
/// sweep is over (no file is locked then); it may call any kvtier function
/// and must not unwind (C++: `noexcept`).
pub type kvtier_region_reclaim_fn =
    Option<unsafe extern "C" fn(user_data: *mut c_void, entry: *const kvtier_region_reclaim_entry)>;

fn outcome(r: &FoundRegion) -> kvtier_region_reclaim_outcome {
    match &r.kept {
        None => KVTIER_REGION_RECLAIM_REMOVED,
        Some(Kept::Held { .. }) => KVTIER_REGION_RECLAIM_HELD,
        Some(Kept::NotRegular { .. }) => KVTIER_REGION_RECLAIM_NOT_REGULAR,
        Some(Kept::OtherUser { .. }) => KVTIER_REGION_RECLAIM_OTHER_USER,
        Some(Kept::NoHeader { .. }) => KVTIER_REGION_RECLAIM_NO_HEADER,
        Some(Kept::Changed { .. }) => KVTIER_REGION_RECLAIM_CHANGED,
        Some(Kept::Failed { .. }) => KVTIER_REGION_RECLAIM_FAILED,
    }
}

/// A C string of `bytes`, cut at a NUL (file names and messages have none).
fn c_string(bytes: &[u8]) -> CString {
    let end = bytes.iter().position(|&b| b == 0).unwrap_or(bytes.len());
    CString::new(&bytes[..end]).unwrap_or_default()
}

/// Removes the files of every stale region in `directory` whose name
/// starts with `prefix`, and reports each region found to `callback`.  A
/// region is stale when no process holds any of its files: every process
/// mapping a region holds a shared `flock` on each of them, so what a
/// killed process left is found without knowing its name.  It is for
/// callers whose region names change at every start: a name opened again
/// is replaced by `kvtier_region_new` itself.
///
/// The directory is treated as hostile: symlinks, directories, FIFOs,
/// sockets and devices are never opened or removed, nor files of another
/// user; a first file that does not begin with a region's layout header
/// is kept; a region with any such file, or any file held, is kept whole.
/// Segment files (`<name>.seg<N>`) whose first file is gone are removed
/// by the same rules (they have no header).  A name is removed only while
/// it still names the file found unheld and locked by this call.  The
/// project's docs/region.md gives the rules in full.
///
/// `directory` NULL means `/dev/shm`; one that does not exist holds no
/// region.  `prefix` is required, non-empty, without `/`
/// (`KVTIER_STATUS_INVALID_ARGUMENT` otherwise); both are UTF-8 and read
/// during the call only.  `callback` (may be NULL) is called once per
/// region found, in name order, removed or kept, after the sweep; with
/// `user_data`, which is not kvtier's.  Writes the number of regions
/// removed to `*removed_out` (may be NULL).  A directory that cannot be
/// opened or listed is an error (`KVTIER_STATUS_IO`), before anything is
/// removed; a file that cannot be looked at or removed is reported as
/// `KVTIER_REGION_RECLAIM_FAILED` and the sweep goes on.  Thread-safe.
///
/// # Safety
/// `directory` NULL or a valid NUL-terminated string; `prefix` a valid
/// NUL-terminated string; `callback` NULL or callable with `user_data`;
/// `removed_out` NULL or valid for writes.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn kvtier_region_reclaim_stale(
    directory: *const c_char,
    prefix: *const c_char,
    callback: kvtier_region_reclaim_fn,
    user_data: *mut c_void,
    removed_out: *mut usize,
) -> kvtier_status {
    ffi_call!({
        let prefix = unsafe { in_str(prefix, "prefix") }?;
        let directory = if directory.is_null() {
            RegionOptions::default().directory
        } else {
            PathBuf::from(unsafe { in_str(directory, "directory") }?)
        };
        let report = reclaim_stale(&directory, prefix)?;
        if let Some(f) = callback {
            for r in &report.regions {
                let name = c_string(r.name.as_bytes());
                let reason = c_string(
                    r.kept
                        .as_ref()
                        .map(|k| k.to_string())
                        .unwrap_or_default()
                        .as_bytes(),
                );
                let entry = kvtier_region_reclaim_entry {
                    name: name.as_ptr(),
                    reason: reason.as_ptr(),
                    bytes: r.bytes(),
                    outcome: outcome(r),
                    segment_files: u32::try_from(r.segments.len()).unwrap_or(u32::MAX),
                    first_file: r.first.is_some(),
                };
                // SAFETY: the caller vouches for the callback and its data;
                // the strings outlive the call.
                unsafe { f(user_data, &entry) };
            }
        }
        if let Some(out) = unsafe { removed_out.as_mut() } {
            *out = report.removed().count();
        }
        Ok(())
    })
}
