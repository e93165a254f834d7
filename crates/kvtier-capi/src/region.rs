//! `kvtier_region`: the shared offload region, from C.
//!
//! Converts options and checks pointers, then calls [`kvtier_core::region::Region`].
//! `kvtier_region_options` is read into the core [`RegionOptions`], whose
//! `Default` gives the C defaults too.

use std::ffi::{c_char, c_void};
use std::path::PathBuf;
use std::time::Duration;

use super::boundary::{
    Castable, Failure, enter, ffi_call, free_handle, in_str, into_handle, out_ref, take_handle,
};
use super::growth::{Grows, read_grown};
use super::status::kvtier_status;
use kvtier_core::error::Error;
use kvtier_core::region::{OpenMode, Prefault, Region, RegionOptions, Role, Share, StridedView};

mod convert;
use convert::convert;

/// A shared offload region mapped in this process.  Opaque; made by
/// `kvtier_region_new`, released by `kvtier_region_close` or
/// `kvtier_region_free`.  Const calls may run concurrently from any thread.
pub struct kvtier_region {
    _private: [u8; 0],
}

impl Castable for kvtier_region {
    type Rust = Region;
    const NAME: &'static str = "region";
}

/// Whether `kvtier_region_new` may create the region, join it, or either:
/// a `KVTIER_REGION_OPEN_MODE_*` value.
pub type kvtier_region_open_mode = i32;
/// Create the region if nobody has, else join it (default).
pub const KVTIER_REGION_OPEN_MODE_CREATE_OR_JOIN: kvtier_region_open_mode = 0;
/// Create the region; fail if a live one exists.
pub const KVTIER_REGION_OPEN_MODE_CREATE: kvtier_region_open_mode = 1;
/// Join the region, waiting for it to appear.
pub const KVTIER_REGION_OPEN_MODE_JOIN: kvtier_region_open_mode = 2;

/// How the region's pages are faulted in: a `KVTIER_REGION_PREFAULT_*` value.
pub type kvtier_region_prefault = i32;
/// No pre-faulting.
pub const KVTIER_REGION_PREFAULT_OFF: kvtier_region_prefault = 0;
/// `MADV_POPULATE_WRITE`, else touch each page (default).
pub const KVTIER_REGION_PREFAULT_AUTO: kvtier_region_prefault = 1;
/// Touch each page (keeping its bytes).
pub const KVTIER_REGION_PREFAULT_TOUCH: kvtier_region_prefault = 2;

/// Smallest segment size (1 GiB) when `kvtier_region_options.segments > 1`.
pub const KVTIER_REGION_MIN_SEGMENT_BYTES: usize = 1 << 30;
/// Longest region name in bytes.
pub const KVTIER_REGION_MAX_NAME_LEN: usize = 200;

/// What part this process took in making the region: a
/// `KVTIER_REGION_ROLE_*` value (`kvtier_region_read_role`).
pub type kvtier_region_role = i32;
/// This process created the region.
pub const KVTIER_REGION_ROLE_CREATOR: kvtier_region_role = 1;
/// This process joined a region another created.
pub const KVTIER_REGION_ROLE_JOINER: kvtier_region_role = 2;

/// Barrier callback given at creation: called exactly once by
/// `kvtier_region_new`, on the calling thread, after this process's set-up
/// finished, with `setup_status` (`KVTIER_STATUS_OK` or the set-up error's
/// status).  It must return only once every process of the region has
/// called its barrier, and return `KVTIER_STATUS_OK` to proceed; any other
/// value fails `kvtier_region_new` (`KVTIER_STATUS_TIMEOUT` for a barrier
/// that gave up waiting, as `KVTIER_STATUS_TIMEOUT`; anything else as
/// `KVTIER_STATUS_PEER_FAILED`).  It must not call kvtier region
/// functions.
pub type kvtier_region_barrier_fn =
    Option<unsafe extern "C" fn(user_data: *mut c_void, setup_status: i32) -> i32>;

/// Options for `kvtier_region_new`.  Initialize with
/// `kvtier_region_options_default()` (growth rule), then set `name`,
/// `slot_count` and `slot_bytes` at least.  Every process of one region
/// passes the same layout (`slot_count`, `slot_bytes`, `worker_bytes`,
/// `segments`).
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct kvtier_region_options {
    /// `sizeof(kvtier_region_options)` as the caller was compiled with.
    pub struct_size: usize,
    /// Region name (NUL-terminated UTF-8 file name, no `/`); required
    /// (NULL is `KVTIER_STATUS_INVALID_ARGUMENT`).
    pub name: *const c_char,
    /// Directory of the backing files; NULL means `/dev/shm`.
    pub directory: *const c_char,
    /// Number of slots (rows); at least 1.
    pub slot_count: u32,
    /// Bytes per slot = row stride; a multiple of the page size.
    pub slot_bytes: usize,
    /// Bytes of each worker's area in a row (per-worker layout); 0: none.
    pub worker_bytes: usize,
    /// `KVTIER_REGION_OPEN_MODE_CREATE_OR_JOIN` (default), `_CREATE` or `_JOIN`.
    pub open: kvtier_region_open_mode,
    /// How long a joiner waits for the region to appear and be sized, in
    /// milliseconds (default 30000).
    pub join_timeout_ms: u32,
    /// Number of backing files, each at least 1 GiB (default 1).
    pub segments: u32,
    /// `KVTIER_REGION_PREFAULT_AUTO` (default), `_OFF` or `_TOUCH`.  Even
    /// off, the creator reserves the region's room on the file system.
    pub prefault: kvtier_region_prefault,
    /// With `prefault_share_count > 0`, pre-fault only share
    /// `prefault_share_index` of `prefault_share_count`: this worker's area
    /// of every row under the per-worker layout, else a contiguous range
    /// of rows.  0: the whole region (default).
    pub prefault_share_count: u32,
    /// Which share to pre-fault, below `prefault_share_count`.
    pub prefault_share_index: u32,
    /// Threads pre-faulting in parallel (default 1: the calling thread).
    pub prefault_threads: u32,
    /// Permission bits of the backing files (default 0600), applied exactly.
    pub mode: u32,
    /// What a creator does with a backing file no process holds (left by a
    /// crashed run): replace it (true, default) or fail.
    pub replace_stale: bool,
    /// Optional barrier (see `kvtier_region_barrier_fn`); when set, the
    /// names are removed after it returns, so the memory is freed when the
    /// last process unmaps.  NULL: no barrier (default).
    pub barrier: kvtier_region_barrier_fn,
    /// Passed to `barrier`; not owned by kvtier.
    pub barrier_user_data: *mut c_void,
}

/// A strided view of a region: `rows` rows of `length` bytes, row `r` at
/// byte `offset + r * stride` from the region's base address.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub struct kvtier_region_view {
    /// Offset of row 0 from the base, in bytes.
    pub offset: usize,
    /// Distance between rows, in bytes.
    pub stride: usize,
    /// Bytes per row in the view.
    pub length: usize,
    /// Number of rows (the slot count).
    pub rows: u32,
}

impl From<StridedView> for kvtier_region_view {
    fn from(v: StridedView) -> Self {
        kvtier_region_view {
            offset: v.offset,
            stride: v.stride,
            length: v.length,
            rows: v.rows,
        }
    }
}

impl Grows for kvtier_region_options {
    const NAME: &'static str = "kvtier_region_options";
    const FIRST_LAYOUT_SIZE: usize = std::mem::size_of::<Self>();
}

/// Returns the default options (the core defaults): no name, directory
/// NULL (`/dev/shm`), create or join, 30 s join timeout, one segment,
/// automatic pre-faulting of the whole region on one thread, mode 0600,
/// stale files replaced, no barrier; `struct_size` set.
///
/// The result is a plain value owned by the caller.  Thread-safe.
#[unsafe(no_mangle)]
pub extern "C" fn kvtier_region_options_default() -> kvtier_region_options {
    let d = RegionOptions::default();
    let share = d.prefault_share.unwrap_or(Share { index: 0, count: 0 });
    kvtier_region_options {
        struct_size: std::mem::size_of::<kvtier_region_options>(),
        name: std::ptr::null(),
        directory: std::ptr::null(),
        slot_count: d.slot_count,
        slot_bytes: d.slot_bytes,
        worker_bytes: d.worker_bytes,
        open: match d.open {
            OpenMode::CreateOrJoin => KVTIER_REGION_OPEN_MODE_CREATE_OR_JOIN,
            OpenMode::Create => KVTIER_REGION_OPEN_MODE_CREATE,
            OpenMode::Join => KVTIER_REGION_OPEN_MODE_JOIN,
        },
        join_timeout_ms: u32::try_from(d.join_timeout.as_millis()).unwrap_or(u32::MAX),
        segments: d.segments,
        prefault: match d.prefault {
            Prefault::Off => KVTIER_REGION_PREFAULT_OFF,
            Prefault::Auto => KVTIER_REGION_PREFAULT_AUTO,
            Prefault::Touch => KVTIER_REGION_PREFAULT_TOUCH,
        },
        prefault_share_count: share.count,
        prefault_share_index: share.index,
        prefault_threads: d.prefault_threads,
        mode: d.mode,
        replace_stale: d.replace_stale,
        barrier: None,
        barrier_user_data: std::ptr::null_mut(),
    }
}

/// Creates the region named `options->name` in `options->directory`, or
/// joins it if another process created it (the first process to create
/// the backing file exclusively is the creator; the rest wait, up to
/// `join_timeout_ms`, until it is sized).  The creator records the layout
/// (slot count, slot bytes, worker bytes, segments) in a one-page header
/// before the slots of the first backing file, and a joiner that asks for
/// another layout fails with `KVTIER_STATUS_INVALID_ARGUMENT` naming both.
/// The creator reserves the region's room on the file system (also with
/// pre-faulting off): too little room is `KVTIER_STATUS_NO_SPACE`.  A
/// joiner whose creator fails during set-up fails at once with
/// `KVTIER_STATUS_PEER_FAILED`.  With a
/// barrier, the barrier runs once (even if set-up failed: a set-up error is
/// then returned as it was) and the names are removed afterwards; a barrier
/// that returns `KVTIER_STATUS_TIMEOUT` fails the call with
/// `KVTIER_STATUS_TIMEOUT`, any other status but OK (or a value that is no
/// status) with `KVTIER_STATUS_PEER_FAILED`.
///
/// `options` NULL means the defaults (which have no name: an error); else
/// initialized with `kvtier_region_options_default()` (growth rule).  Its
/// strings are read during the call only.  On success writes a new handle
/// to `*region_out`; on failure writes nothing and leaves nothing it
/// created on disk.  The caller owns the handle and releases it with
/// `kvtier_region_close` or `kvtier_region_free`.  May block up to the join
/// timeout.  Thread-safe.
///
/// # Safety
/// `options` NULL or valid for its `struct_size`; `region_out` valid for
/// writes; the barrier, if any, must be callable with `barrier_user_data`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn kvtier_region_new(
    options: *const kvtier_region_options,
    region_out: *mut *mut kvtier_region,
) -> kvtier_status {
    ffi_call!({
        let out = unsafe { out_ref(region_out, "region_out") }?;
        let c = unsafe { read_grown(options, kvtier_region_options_default()) }?;
        let opts = unsafe { convert(&c) }?;
        let region = match c.barrier {
            None => Region::create_or_join(&opts)?,
            Some(f) => {
                let user = c.barrier_user_data;
                Region::create_or_join_with_barrier(&opts, |setup| {
                    let status = match setup {
                        Ok(()) => kvtier_status::Ok,
                        Err(e) => super::status::status_of(e),
                    };
                    // SAFETY: the caller vouches for the callback and its data.
                    let r = unsafe { f(user, status as i32) };
                    match kvtier_status::from_i32(r) {
                        Some(kvtier_status::Ok) => Ok(()),
                        // A barrier that waited too long for its peers
                        // says so: that is a timeout, not a failed peer.
                        Some(kvtier_status::Timeout) => Err(Error::Timeout(
                            "the region barrier returned KVTIER_STATUS_TIMEOUT".into(),
                        )),
                        Some(s) => Err(Error::PeerFailed(format!(
                            "the region barrier returned {}",
                            s.as_cstr().to_string_lossy()
                        ))),
                        None => Err(Error::PeerFailed(format!(
                            "the region barrier returned {r}, which is not a kvtier_status"
                        ))),
                    }
                })?
            }
        };
        *out = into_handle::<kvtier_region>(region);
        Ok(())
    })
}

/// Cleans up and releases the region: removes the backing-file names if
/// this process created them, closes the descriptors, and unmaps, except
/// that while slots are lent out (`kvtier_region_set_lent_slots`) the
/// mapping is kept for good.
///
/// `region` is consumed whatever the result and must not be used again;
/// NULL is an error.  Writes to `*kept_mapping_out` (which may be NULL)
/// whether the mapping was kept.  Must not run concurrently with other
/// calls on `region`.  A failure (removing a name) is reported after the
/// release.
///
/// # Safety
/// `region` must be a live handle; `kept_mapping_out` NULL or valid.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn kvtier_region_close(
    region: *mut kvtier_region,
    kept_mapping_out: *mut bool,
) -> kvtier_status {
    ffi_call!({
        // SAFETY: a live handle made by `into_handle`, consumed here.
        let region = unsafe { take_handle::<kvtier_region>(region) }?;
        let report = region.close()?;
        if let Some(k) = unsafe { kept_mapping_out.as_mut() } {
            *k = report.kept_mapping;
        }
        Ok(())
    })
}

/// Releases the region like `kvtier_region_close`, ignoring errors.
/// NULL is a no-op.
///
/// # Safety
/// `region` must be NULL or a live handle, not used afterwards.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn kvtier_region_free(region: *mut kvtier_region) {
    // Inside the boundary: a panic while releasing never unwinds into C.
    let _ = super::boundary::run(|| {
        unsafe { free_handle(region) };
        Ok(())
    });
}

/// Writes `KVTIER_REGION_ROLE_CREATOR` or `KVTIER_REGION_ROLE_JOINER` to
/// `*role_out`.  Thread-safe.
///
/// # Safety
/// `region` and `role_out` must be NULL or valid.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn kvtier_region_read_role(
    region: *const kvtier_region,
    role_out: *mut kvtier_region_role,
) -> kvtier_status {
    ffi_call!({
        let r = unsafe { enter(region) }?;
        let out = unsafe { out_ref(role_out, "role_out") }?;
        *out = match r.role() {
            Role::Creator => KVTIER_REGION_ROLE_CREATOR,
            Role::Joiner => KVTIER_REGION_ROLE_JOINER,
        };
        Ok(())
    })
}

/// Writes the region's base address to `*base_out`: `slot_count * stride`
/// contiguous bytes, valid until the region is released (or for good
/// while slots are lent).  Thread-safe.
///
/// # Safety
/// `region` and `base_out` must be NULL or valid.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn kvtier_region_base(
    region: *const kvtier_region,
    base_out: *mut *mut c_void,
) -> kvtier_status {
    ffi_call!({
        let r = unsafe { enter(region) }?;
        *unsafe { out_ref(base_out, "base_out") }? = r.base().as_ptr().cast();
        Ok(())
    })
}

/// Writes the row stride (bytes per slot) to `*stride_out`.  Thread-safe.
///
/// # Safety
/// `region` and `stride_out` must be NULL or valid.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn kvtier_region_stride(
    region: *const kvtier_region,
    stride_out: *mut usize,
) -> kvtier_status {
    ffi_call!({
        let r = unsafe { enter(region) }?;
        *unsafe { out_ref(stride_out, "stride_out") }? = r.stride();
        Ok(())
    })
}

/// Writes the number of slots to `*slot_count_out`.  Thread-safe.
///
/// # Safety
/// `region` and `slot_count_out` must be NULL or valid.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn kvtier_region_slot_count(
    region: *const kvtier_region,
    slot_count_out: *mut u32,
) -> kvtier_status {
    ffi_call!({
        let r = unsafe { enter(region) }?;
        *unsafe { out_ref(slot_count_out, "slot_count_out") }? = r.slot_count();
        Ok(())
    })
}

/// Writes the address of slot `slot` to `*address_out`; a slot at or beyond
/// the slot count is `KVTIER_STATUS_INVALID_ARGUMENT`.  The address lives
/// as long as the base address.  Thread-safe.
///
/// # Safety
/// `region` and `address_out` must be NULL or valid.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn kvtier_region_slot_address(
    region: *const kvtier_region,
    slot: u32,
    address_out: *mut *mut c_void,
) -> kvtier_status {
    ffi_call!({
        let r = unsafe { enter(region) }?;
        let out = unsafe { out_ref(address_out, "address_out") }?;
        *out = r.slot_ptr(slot)?.as_ptr().cast();
        Ok(())
    })
}

/// Per-worker layout: writes to `*view_out` the view of `length` bytes at
/// `offset` within worker `worker`'s area of every row.  The region must
/// have been created with `worker_bytes > 0`, and `offset + length` must
/// fit in `worker_bytes`.  Thread-safe.
///
/// # Safety
/// `region` and `view_out` must be NULL or valid.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn kvtier_region_worker_view(
    region: *const kvtier_region,
    worker: u32,
    offset: usize,
    length: usize,
    view_out: *mut kvtier_region_view,
) -> kvtier_status {
    ffi_call!({
        let r = unsafe { enter(region) }?;
        let out = unsafe { out_ref(view_out, "view_out") }?;
        *out = r.worker_view(worker, offset, length)?.into();
        Ok(())
    })
}

/// Canonical layout: writes to `*view_out` the view of `length` bytes at
/// `offset` of every row, the same bytes for every worker; `offset +
/// length` must fit in the stride.  Thread-safe.
///
/// # Safety
/// `region` and `view_out` must be NULL or valid.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn kvtier_region_canonical_view(
    region: *const kvtier_region,
    offset: usize,
    length: usize,
    view_out: *mut kvtier_region_view,
) -> kvtier_status {
    ffi_call!({
        let r = unsafe { enter(region) }?;
        let out = unsafe { out_ref(view_out, "view_out") }?;
        *out = r.canonical_view(offset, length)?.into();
        Ok(())
    })
}

/// Removes the backing files' names if they still name this region's
/// files; call it once every process has joined.  Mappings stay valid and
/// the memory is freed when the last process unmaps.  Writes to
/// `*removed_out` (which may be NULL) whether this call removed a name.
/// Thread-safe.
///
/// # Safety
/// `region` must be NULL or valid; `removed_out` NULL or valid.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn kvtier_region_unlink(
    region: *const kvtier_region,
    removed_out: *mut bool,
) -> kvtier_status {
    ffi_call!({
        let r = unsafe { enter(region) }?;
        let done = r.unlink()?;
        if let Some(out) = unsafe { removed_out.as_mut() } {
            *out = done;
        }
        Ok(())
    })
}

/// Declares how many slots are lent out to a device (registered with a GPU
/// driver or a NIC); while non-zero, `kvtier_region_close` keeps the
/// mapping so no device writes into reused address space.  0 clears it.
/// Thread-safe.
///
/// # Safety
/// `region` must be NULL or valid.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn kvtier_region_set_lent_slots(
    region: *const kvtier_region,
    count: u32,
) -> kvtier_status {
    ffi_call!({
        let r = unsafe { enter(region) }?;
        r.set_lent_slots(count);
        Ok(())
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn c_constants_match_the_core() {
        assert_eq!(
            KVTIER_REGION_MIN_SEGMENT_BYTES,
            RegionOptions::MIN_SEGMENT_BYTES
        );
        assert_eq!(KVTIER_REGION_MAX_NAME_LEN, RegionOptions::MAX_NAME_LEN);
        let d = kvtier_region_options_default();
        assert_eq!(d.mode, 0o600);
        assert_eq!(d.join_timeout_ms, 30_000);
        assert!(d.replace_stale && d.barrier.is_none() && d.name.is_null());
    }

    #[test]
    fn c_defaults_are_the_core_defaults() {
        let c = unsafe { convert(&kvtier_region_options_default()) }.unwrap();
        assert_eq!(c, RegionOptions::default());
        let json: RegionOptions = serde_json::from_str("{}").unwrap();
        assert_eq!(json, RegionOptions::default());
        let null = unsafe { read_grown(std::ptr::null(), kvtier_region_options_default()) };
        assert_eq!(unsafe { convert(&null.unwrap()) }.unwrap(), c);
    }

    #[test]
    fn every_enumeration_value_converts() {
        let mut o = kvtier_region_options_default();
        for (code, mode) in [
            (
                KVTIER_REGION_OPEN_MODE_CREATE_OR_JOIN,
                OpenMode::CreateOrJoin,
            ),
            (KVTIER_REGION_OPEN_MODE_CREATE, OpenMode::Create),
            (KVTIER_REGION_OPEN_MODE_JOIN, OpenMode::Join),
        ] {
            o.open = code;
            assert_eq!(unsafe { convert(&o) }.unwrap().open, mode);
        }
        o.open = 3;
        assert!(unsafe { convert(&o) }.is_err());
        o.open = KVTIER_REGION_OPEN_MODE_CREATE_OR_JOIN;
        for (code, prefault) in [
            (KVTIER_REGION_PREFAULT_OFF, Prefault::Off),
            (KVTIER_REGION_PREFAULT_AUTO, Prefault::Auto),
            (KVTIER_REGION_PREFAULT_TOUCH, Prefault::Touch),
        ] {
            o.prefault = code;
            assert_eq!(unsafe { convert(&o) }.unwrap().prefault, prefault);
        }
        o.prefault = -1;
        assert!(unsafe { convert(&o) }.is_err());
    }
}
