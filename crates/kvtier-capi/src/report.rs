//! Per-request reports for C: `kvtier_manager_set_request_report_callback`
//! hands a `kvtier_request_report` for each finished request to the
//! engine's callback (keys looked up, hits per tier, blocks loaded, stored,
//! promoted, failed, time and steps waiting for blocks, blocks asked for,
//! served by each tier and recomputed), for a JSONL trace or
//! OpenTelemetry spans.

use std::ffi::{c_char, c_void};

use super::boundary::{enter, ffi_call};
use super::dialect::kvtier_request_handle;
use super::manager::kvtier_manager;
use kvtier_core::tiering::{RequestReport, RequestReportListener};

/// What happened to one finished request, as the report callback receives
/// it; every pointer in it is valid during the call only.  Under the growth
/// rule: `struct_size` is the size of the library's layout; a caller built
/// against a newer header reads a field only if it lies within
/// `struct_size`.
#[repr(C)]
#[allow(non_camel_case_types)]
#[derive(Debug, Clone, Copy)]
pub struct kvtier_request_report {
    /// `sizeof(kvtier_request_report)` as this library lays it out.
    pub struct_size: usize,
    /// The request's handle.
    pub request: kvtier_request_handle,
    /// The request's name, NUL-terminated.
    pub name: *const c_char,
    /// Keys its lookups looked at (a batched lookup counts the keys up to
    /// the one it stopped at).
    pub lookups: u64,
    /// Keys its lookups found, by tier number (`tier_count` entries):
    /// `tier_hits[0]` in the primary tier (answered HIT), `tier_hits[t]` in
    /// secondary tier `t` (a promotion from it started).
    pub tier_hits: *const u64,
    /// Entries of `tier_hits`: the primary tier and each secondary tier.
    pub tier_count: usize,
    /// Keys its `kvtier_manager_prepare_load` calls pinned for loads to the GPU.
    pub loaded: u64,
    /// Keys its stores made ready in the primary tier.
    pub stored: u64,
    /// Keys promoted for it that arrived in the primary tier.
    pub promoted: u64,
    /// Keys of its stores that failed and of its promotions that failed.
    pub failed: u64,
    /// Nanoseconds it waited for blocks on their way: each wait runs from
    /// a lookup that left some of its keys on their way to the first later
    /// lookup that left none (or its `kvtier_manager_prepare_load`, its
    /// finish, or a lookup after the wait bound).
    pub promotion_wait_ns: u64,
    /// Blocks it asked for: the keys of its largest lookup (per-key
    /// lookups: those of one step together, up to the first miss).
    /// Since 0.3.
    pub asked: u64,
    /// Blocks it was served, by the tier they came from (`tier_count`
    /// entries): `tier_served[0]` already in the primary tier,
    /// `tier_served[t]` promoted for it from secondary tier `t`.  Each
    /// block asked for counts once: they sum to `loaded` or `asked`,
    /// whichever is smaller.  Since 0.3.
    pub tier_served: *const u64,
    /// Blocks it asked for and was not served (`asked` less the sum of
    /// `tier_served`): the engine computed them.  Since 0.3.
    pub recomputed: u64,
    /// Steps (`kvtier_manager_schedule_end` calls) it spent waiting for
    /// blocks on their way.  Since 0.3.
    pub steps_waited: u64,
}

/// Receives the report of one finished request (see
/// `kvtier_manager_set_request_report_callback`).  Called on the thread
/// of the manager call that let the request go, with the manager's lock
/// held: it must not call the manager (such calls fail with
/// `KVTIER_STATUS_REENTRANT`), should return quickly, and must not unwind
/// (C++: `noexcept`).
#[allow(non_camel_case_types)]
pub type kvtier_request_report_fn =
    Option<unsafe extern "C" fn(user_data: *mut c_void, report: *const kvtier_request_report)>;

/// The callback and its pointer, moved into the manager, with the name
/// buffer it reuses.
struct CReporter {
    callback: unsafe extern "C" fn(*mut c_void, *const kvtier_request_report),
    user_data: *mut c_void,
    name: Vec<u8>,
}

// SAFETY: the caller of `kvtier_manager_set_request_report_callback`
// promises the callback may be called from any thread with `user_data`.
unsafe impl Send for CReporter {}

impl CReporter {
    fn deliver(&mut self, r: &RequestReport<'_>) {
        // The name up to any NUL, then a NUL; if memory for it cannot be
        // had, the empty name.
        let name = r.name.split('\0').next().unwrap_or("");
        self.name.clear();
        let name_ptr = if self.name.try_reserve(name.len() + 1).is_ok() {
            self.name.extend_from_slice(name.as_bytes());
            self.name.push(0);
            self.name.as_ptr().cast::<c_char>()
        } else {
            c"".as_ptr()
        };
        let report = kvtier_request_report {
            struct_size: std::mem::size_of::<kvtier_request_report>(),
            request: r.id.0,
            name: name_ptr,
            lookups: r.lookups,
            tier_hits: r.tier_hits.as_ptr(),
            tier_count: r.tier_hits.len(),
            loaded: r.loaded,
            stored: r.stored,
            promoted: r.promoted,
            failed: r.failed,
            promotion_wait_ns: u64::try_from(r.promotion_wait.as_nanos()).unwrap_or(u64::MAX),
            asked: r.asked,
            tier_served: r.served.as_ptr(),
            recomputed: r.recomputed,
            steps_waited: r.steps_waited,
        };
        // SAFETY: the registrant promised a callable function; the report
        // and what it points to live for the call.
        unsafe { (self.callback)(self.user_data, &report) };
    }
}

/// Installs `callback` to receive a `kvtier_request_report` for each
/// request the manager lets go from now on (after
/// `kvtier_manager_request_finished`, once no store of the request is in
/// flight and none of its promotions is staged), replacing any previous
/// one; NULL removes it.  Counting per request starts with the callback:
/// a request already running reports only what happened since.  Requests
/// still active when the manager is shut down are not reported.
///
/// `user_data` is passed back to every call and never freed; it and the
/// callback must stay valid until the callback is replaced or removed, or
/// the manager is freed.  See `kvtier_request_report_fn` for what the
/// callback may do.  Internally synchronized.
///
/// # Safety
/// `manager` a live handle; `callback` NULL or callable from any thread
/// that calls the manager, with `user_data`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn kvtier_manager_set_request_report_callback(
    manager: *const kvtier_manager,
    callback: kvtier_request_report_fn,
    user_data: *mut c_void,
) -> super::kvtier_status {
    ffi_call!({
        let m = unsafe { enter::<kvtier_manager>(manager) }?;
        let listener = callback.map(|callback| {
            let mut r = CReporter {
                callback,
                user_data,
                name: Vec::new(),
            };
            Box::new(move |report: &RequestReport<'_>| r.deliver(report)) as RequestReportListener
        });
        Ok(m.local("kvtier_manager_set_request_report_callback")?
            .set_request_report_listener(listener)?)
    })
}
