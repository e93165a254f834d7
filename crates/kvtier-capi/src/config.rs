//! `kvtier_manager_new_from_json`: a manager built from one JSON document
//! (see `kvtier_core::config` and docs/configuration.md), the same
//! options as `kvtier_manager_new`'s read the same way, and
//! `kvtier_manager_slot_memory`, where a manager's slots are.

use std::ffi::{c_char, c_void};

use super::boundary::{Failure, enter, ffi_call, in_slice, into_handle, out_ref};
use super::manager::{CManager, kvtier_manager};
use super::region::kvtier_region;
use kvtier_core::config::Config;
use kvtier_core::error::Error;
use kvtier_core::serve::MetricsServer;
use kvtier_core::tiering::Manager;

/// Builds a manager from the JSON document `json` (`len` bytes of UTF-8,
/// no NUL needed): slot memory (a shared region if `"region"` is given,
/// else private memory when `"block_bytes"` > 0), the primary tier, and
/// the built-in secondary tiers listed in `"tiers"`, and, with
/// `"metrics": {"listen": "IP:port"}`, an HTTP endpoint serving
/// `/metrics` (the text of `kvtier_manager_metrics_prometheus`) from a
/// thread of its own until the manager is freed; an address that cannot
/// be listened on (bad, in use) fails the call with a message naming it.  The document holds
/// the options of `kvtier_manager_options` (the primary tier's under
/// `"primary"`) with the same defaults, and the manager is built the same
/// way as by `kvtier_manager_new`.  More tiers, C and C++ ones included,
/// may be added afterwards with the `kvtier_manager_add_*` calls.
/// `kvtier_manager_new_from_json_with_region` builds it over a region the
/// caller made.
///
/// `json` must not be NULL unless `len` is 0; `manager_out` must not be NULL.
/// Unknown fields and wrong types fail with `KVTIER_STATUS_INVALID_ARGUMENT`
/// and a message (`kvtier_last_error_message`) that starts with the field's
/// path, e.g. `tiers[1].options.capacity_bytes: invalid type: ...`; a
/// capacity whose slot tables (or slot memory) cannot be allocated is
/// `KVTIER_STATUS_OUT_OF_MEMORY`.  On
/// success writes the new handle to `*manager_out`; on failure writes
/// nothing and leaves nothing behind.  The caller owns the handle (free it with
/// `kvtier_manager_free`, which also releases the region).  The document
/// is read during the call only.  Thread-safe.
///
/// # Safety
/// `json` valid for `len` reads; `manager_out` valid for writes.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn kvtier_manager_new_from_json(
    json: *const c_char,
    len: usize,
    manager_out: *mut *mut kvtier_manager,
) -> super::kvtier_status {
    ffi_call!({
        let out = unsafe { out_ref(manager_out, "manager_out") }?;
        let config = unsafe { config_of(json, len) }?;
        let manager = config.build()?;
        *out = serve(&config, manager)?;
        Ok(())
    })
}

/// Builds a manager from the JSON document `json` as
/// `kvtier_manager_new_from_json` does, the same fields read the same way,
/// with `region`'s slots as its slot memory as `kvtier_manager_new` takes
/// them: the built-in tiers (the document's `"tiers"`, and those added
/// later) copy blocks through them.  A NULL `region` is
/// `kvtier_manager_new_from_json` exactly.  With a region, the document
/// must not name one too (`"region"`: `KVTIER_STATUS_INVALID_ARGUMENT`),
/// the region must have at least the primary tier's capacity in slots, and
/// `"block_bytes"` is only the block size of back-pressure per byte (as in
/// `kvtier_manager_options`).
///
/// `json` must not be NULL unless `len` is 0; `manager_out` must not be
/// NULL.  Errors, outputs and ownership are those of
/// `kvtier_manager_new_from_json`; the region stays the caller's, as with
/// `kvtier_manager_new` (the manager keeps its mapping alive as long as it
/// needs it).  Thread-safe.
///
/// # Safety
/// `json` valid for `len` reads; `region` NULL or a live handle;
/// `manager_out` valid for writes.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn kvtier_manager_new_from_json_with_region(
    json: *const c_char,
    len: usize,
    region: *const kvtier_region,
    manager_out: *mut *mut kvtier_manager,
) -> super::kvtier_status {
    ffi_call!({
        let out = unsafe { out_ref(manager_out, "manager_out") }?;
        let config = unsafe { config_of(json, len) }?;
        let manager = if region.is_null() {
            config.build()?
        } else {
            let slots = unsafe { enter::<kvtier_region>(region) }?.slots();
            config.build_over(slots)?
        };
        *out = serve(&config, manager)?;
        Ok(())
    })
}

/// The configuration in `len` bytes at `json`.
///
/// # Safety
/// `json` valid for `len` reads.
unsafe fn config_of(json: *const c_char, len: usize) -> Result<Config, Failure> {
    let bytes = unsafe { in_slice(json.cast::<u8>(), len, "json") }?;
    let text = std::str::from_utf8(bytes).map_err(|e| {
        Error::InvalidArgument(format!("configuration: the document is not UTF-8: {e}"))
    })?;
    Ok(Config::from_json(text)?)
}

/// `manager` as a handle (the caller's to free), with the metrics
/// endpoint `config` asks for.
fn serve(config: &Config, manager: Manager) -> Result<*mut kvtier_manager, Failure> {
    let manager = std::sync::Arc::new(manager);
    let metrics = match &config.metrics {
        Some(m) => Some(MetricsServer::start(&m.listen, &manager)?),
        None => None,
    };
    Ok(into_handle::<kvtier_manager>(CManager::serving(
        manager, metrics,
    )))
}

/// Writes where the manager's slots are: the address of slot 0 to
/// `*base_out`, the distance between slots to `*stride_out`, the usable
/// bytes of each slot to `*slot_bytes_out` and the number of slots to
/// `*slot_count_out` (slot `i` is at `base + i * stride`).  A manager
/// without slot memory (made by `kvtier_manager_new` without a region, or
/// from JSON without `block_bytes`) is `KVTIER_STATUS_NOT_FOUND`.
///
/// Every output must be non-NULL.  The memory stays valid until
/// `kvtier_manager_free`.  Thread-safe.
///
/// # Safety
/// `manager` a live handle; outputs valid for writes.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn kvtier_manager_slot_memory(
    manager: *const kvtier_manager,
    base_out: *mut *mut c_void,
    stride_out: *mut usize,
    slot_bytes_out: *mut usize,
    slot_count_out: *mut u32,
) -> super::kvtier_status {
    ffi_call!({
        let m = unsafe { enter::<kvtier_manager>(manager) }?;
        let base = unsafe { out_ref(base_out, "base_out") }?;
        let stride = unsafe { out_ref(stride_out, "stride_out") }?;
        let slot_bytes = unsafe { out_ref(slot_bytes_out, "slot_bytes_out") }?;
        let slot_count = unsafe { out_ref(slot_count_out, "slot_count_out") }?;
        let s = m.slot_memory().ok_or_else(|| {
            Error::NotFound(
                "slot memory: this manager has none (made without a region, or from JSON without block_bytes)"
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
