//! What an operator's probes ask a manager: where its `/metrics` endpoint
//! listens (`kvtier_manager_metrics_address`) and whether it and its tiers
//! can be used now (`kvtier_manager_readiness`, what `/readyz` serves).

use std::ffi::c_char;

use super::boundary::{enter, ffi_call, out_ref, out_slice, write_text};
use super::manager::kvtier_manager;
use kvtier_core::error::Error;

/// Writes the address the manager's `/metrics` endpoint listens on (the
/// one `"metrics": {"listen": ...}` of `kvtier_manager_new_from_json`
/// asked for, with the port picked for port 0), NUL-terminated, to
/// `text_out`: `IP:port`, e.g. `127.0.0.1:40123`, or `[::1]:40123` for
/// IPv6.  A manager without an endpoint (none configured, or made by
/// `kvtier_manager_new`) is `KVTIER_STATUS_NOT_FOUND`, and so is a manager
/// connected to kvtierd (the server's own configuration decides its
/// endpoint).
///
/// The buffer idiom: when the text and its NUL fit in `capacity` bytes,
/// writes them and sets `*written_out` to the text's length plus one;
/// otherwise writes nothing to `text_out`, sets `*written_out` to the
/// size needed and returns `KVTIER_STATUS_BUFFER_TOO_SMALL` (64 bytes
/// always suffice).  `text_out` may be NULL when `capacity` is 0.
/// Thread-safe.
///
/// # Safety
/// `manager` a live handle; `text_out` valid for `capacity` writes;
/// `written_out` valid for writes.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn kvtier_manager_metrics_address(
    manager: *const kvtier_manager,
    text_out: *mut c_char,
    capacity: usize,
    written_out: *mut usize,
) -> super::kvtier_status {
    ffi_call!({
        let m = unsafe { enter::<kvtier_manager>(manager) }?;
        let out = unsafe { out_slice(text_out.cast::<u8>(), capacity, "text_out") }?;
        let written = unsafe { out_ref(written_out, "written_out") }?;
        let address = m.metrics_address().ok_or_else(|| {
            Error::NotFound(
                "the manager has no /metrics endpoint (configure \"metrics\": {\"listen\": \
                 \"IP:port\"} in kvtier_manager_new_from_json)"
                    .to_string(),
            )
        })?;
        write_text(&address.to_string(), out, written)
    })
}

/// Writes why the manager or one of its secondary tiers cannot be used
/// now, NUL-terminated, to `text_out`: one line per reason, each ending
/// in a newline (`manager: shut down`, `tier 1 (redis): circuit breaker
/// open ...`, `tier 2 (fs): directory ...`, `tier N (name): under
/// back-pressure, cascades to it are dropped`), or the empty text when it
/// is ready (`*written_out` is then 1).  This is what the `/readyz`
/// endpoint serves; the tiers' state is as the engine's last calls left
/// it.  A manager connected to kvtierd is `KVTIER_STATUS_UNSUPPORTED`.
///
/// The buffer idiom, as `kvtier_manager_metrics_prometheus`: when the
/// text and its NUL fit in `capacity` bytes, writes them and sets
/// `*written_out` to the text's length plus one; otherwise writes nothing
/// to `text_out`, sets `*written_out` to the size needed and returns
/// `KVTIER_STATUS_BUFFER_TOO_SMALL` (the reasons may have changed by the
/// next call, so leave some room).  `text_out` may be NULL when
/// `capacity` is 0.  Internally synchronized: any thread may call it.
///
/// # Safety
/// `manager` a live handle; `text_out` valid for `capacity` writes;
/// `written_out` valid for writes.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn kvtier_manager_readiness(
    manager: *const kvtier_manager,
    text_out: *mut c_char,
    capacity: usize,
    written_out: *mut usize,
) -> super::kvtier_status {
    ffi_call!({
        let m = unsafe { enter::<kvtier_manager>(manager) }?;
        let out = unsafe { out_slice(text_out.cast::<u8>(), capacity, "text_out") }?;
        let written = unsafe { out_ref(written_out, "written_out") }?;
        let readiness = m.local("kvtier_manager_readiness")?.readiness()?;
        write_text(&readiness.to_string(), out, written)
    })
}
