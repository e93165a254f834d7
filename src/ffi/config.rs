//! `kvtier_manager_new_from_json`: a manager built from one JSON document
//! (see `crate::config` and docs/configuration.md), and
//! `kvtier_manager_slot_memory`, where its slots are.

use std::ffi::{c_char, c_void};

use super::boundary::{enter, ffi_call, in_slice, into_handle, out_ref};
use super::manager::kvtier_manager;
use crate::config::Config;
use crate::error::Error;

/// Builds a manager from the JSON document `json` (`len` bytes of UTF-8,
/// no NUL needed): slot memory (a shared region if `"region"` is given,
/// else private memory when `"block_bytes"` > 0), the primary tier, and
/// the built-in secondary tiers listed in `"tiers"`.  C and C++ tiers are
/// added afterwards with `kvtier_manager_add_tier`.
///
/// `json` must not be NULL unless `len` is 0; `out` must not be NULL.
/// Unknown fields and wrong types fail with `KVTIER_STATUS_INVALID_ARGUMENT`
/// and a message (`kvtier_last_error_message`) that starts with the field's
/// path, e.g. `tiers[1].options.capacity_bytes: invalid type: ...`; a
/// capacity whose slot tables (or slot memory) cannot be allocated is
/// `KVTIER_STATUS_OUT_OF_MEMORY`.  On
/// success writes the new handle to `*out`; on failure writes nothing and
/// leaves nothing behind.  The caller owns the handle (free it with
/// `kvtier_manager_free`, which also releases the region).  The document
/// is read during the call only.  Thread-safe.
///
/// # Safety
/// `json` valid for `len` reads; `out` valid for writes.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn kvtier_manager_new_from_json(
    json: *const c_char,
    len: usize,
    out: *mut *mut kvtier_manager,
) -> super::kvtier_status {
    ffi_call!({
        let out = unsafe { out_ref(out, "out") }?;
        let bytes = unsafe { in_slice(json.cast::<u8>(), len, "json") }?;
        let text = std::str::from_utf8(bytes).map_err(|e| {
            Error::InvalidArgument(format!("configuration: the document is not UTF-8: {e}"))
        })?;
        let manager = Config::from_json(text)?.build()?;
        *out = into_handle::<kvtier_manager>(manager);
        Ok(())
    })
}

/// Writes where the manager's slots are: the address of slot 0 to
/// `*base`, the distance between slots to `*stride`, the usable bytes of
/// each slot to `*slot_bytes` and the number of slots to `*slot_count`
/// (slot `i` is at `base + i * stride`).  Managers made by
/// `kvtier_manager_new` have no slot memory of their own (the engine
/// brought it): `KVTIER_STATUS_NOT_FOUND`; so do configurations without
/// `block_bytes`.
///
/// Every output must be non-NULL.  The memory is owned by the manager and
/// stays valid until `kvtier_manager_free`.  Thread-safe.
///
/// # Safety
/// `manager` a live handle; outputs valid for writes.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn kvtier_manager_slot_memory(
    manager: *const kvtier_manager,
    base: *mut *mut c_void,
    stride: *mut usize,
    slot_bytes: *mut usize,
    slot_count: *mut u32,
) -> super::kvtier_status {
    ffi_call!({
        let m = unsafe { enter::<kvtier_manager>(manager) }?;
        let base = unsafe { out_ref(base, "base") }?;
        let stride = unsafe { out_ref(stride, "stride") }?;
        let slot_bytes = unsafe { out_ref(slot_bytes, "slot_bytes") }?;
        let slot_count = unsafe { out_ref(slot_count, "slot_count") }?;
        let s = m.slot_memory().ok_or_else(|| {
            Error::NotFound(
                "slot memory: this manager has none (made without block_bytes, or by kvtier_manager_new)"
                    .into(),
            )
        })?;
        *base = s.slot_ptr(0)?.as_ptr().cast();
        *stride = s.stride();
        *slot_bytes = s.slot_bytes();
        *slot_count = s.slot_count();
        Ok(())
    })
}
