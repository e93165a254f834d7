//! Where a request handle stands, for an engine that holds a handle and
//! needs to know which calls still take it: `kvtier_manager_request_state`
//! and `kvtier_primary_request_state`.

use super::boundary::{enter, enter_mut, ffi_call, out_ref};
use super::dialect::kvtier_request_handle;
use super::manager::kvtier_manager;
use super::primary::kvtier_primary;
use kvtier_core::request::{RequestId, RequestState};

/// Where a request handle stands: a `KVTIER_REQUEST_STATE_*` value.
pub type kvtier_request_state = i32;
/// Never handed out by this object (0, or past the last handle it handed
/// out): a mistyped handle, or another object's.  No call takes it.
pub const KVTIER_REQUEST_STATE_NEVER_ISSUED: kvtier_request_state = 0;
/// Started and not finished: every call of a request takes it.
pub const KVTIER_REQUEST_STATE_ACTIVE: kvtier_request_state = 1;
/// Finished, but kept by its stores in flight, parked keys or staged
/// promotions: `complete_store` takes it, and `complete_load` of the pins
/// its loads still hold.
pub const KVTIER_REQUEST_STATE_FINISHING: kvtier_request_state = 2;
/// Finished and let go of all but pins its loads still hold: only
/// `complete_load` of those pins takes it, until the last is released.
pub const KVTIER_REQUEST_STATE_LOADS_PINNED: kvtier_request_state = 3;
/// Finished and let go: no call takes it.
pub const KVTIER_REQUEST_STATE_GONE: kvtier_request_state = 4;

/// The C value of a state.
pub(crate) fn state_value(state: RequestState) -> kvtier_request_state {
    match state {
        RequestState::NeverIssued => KVTIER_REQUEST_STATE_NEVER_ISSUED,
        RequestState::Active => KVTIER_REQUEST_STATE_ACTIVE,
        RequestState::Finishing => KVTIER_REQUEST_STATE_FINISHING,
        RequestState::LoadsPinned => KVTIER_REQUEST_STATE_LOADS_PINNED,
        RequestState::Gone => KVTIER_REQUEST_STATE_GONE,
    }
}

/// Writes to `*state_out` where `request` stands: never issued by this
/// manager (`KVTIER_REQUEST_STATE_NEVER_ISSUED`: 0, or a handle it never
/// handed out), active, finished but kept by its stores in flight, parked
/// keys or staged promotions (`_FINISHING`; its loads may hold pins too),
/// finished with only pins its loads took still held (`_LOADS_PINNED`),
/// or finished and let go (`_GONE`).  Handles are never 0 and never
/// reused, so every handle has one answer, and a call that does not take
/// a handle says which of these made it `KVTIER_STATUS_UNKNOWN_REQUEST` in
/// its message.  Changes nothing; any handle value may be asked about.
/// Internally synchronized.
///
/// # Safety
/// `manager` a live handle; `state_out` valid for writes.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn kvtier_manager_request_state(
    manager: *const kvtier_manager,
    request: kvtier_request_handle,
    state_out: *mut kvtier_request_state,
) -> super::kvtier_status {
    ffi_call!({
        let m = unsafe { enter::<kvtier_manager>(manager) }?;
        let out = unsafe { out_ref(state_out, "state_out") }?;
        *out = state_value(m.request_state(RequestId(request))?);
        Ok(())
    })
}

/// Writes to `*state_out` where `request` stands, as
/// [`kvtier_manager_request_state`] does for the manager: never issued by
/// this tier, active, finished with keys it planned still being written
/// (`KVTIER_REQUEST_STATE_FINISHING`: `kvtier_primary_complete_store`
/// takes it; its loads may hold pins too), finished with only pins its
/// loads took still held (`_LOADS_PINNED`), or gone.  Changes nothing.
/// Exclusive access to the handle.
///
/// # Safety
/// `primary` a live handle; `state_out` valid for writes.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn kvtier_primary_request_state(
    primary: *mut kvtier_primary,
    request: kvtier_request_handle,
    state_out: *mut kvtier_request_state,
) -> super::kvtier_status {
    ffi_call!({
        let h = unsafe { enter_mut(primary) }?;
        let out = unsafe { out_ref(state_out, "state_out") }?;
        *out = state_value(h.core.request_state(RequestId(request)));
        Ok(())
    })
}
