//! `kvtier_manager`: the tiering manager behind the C ABI.
//!
//! The handle is internally synchronized: any thread may call any function
//! on it, concurrently (calls are serialized inside), except `_free`, which
//! must be the last call; so every call but `_free` takes it `const`.  A
//! request begins with `kvtier_manager_request_begin`, whose handle its
//! later calls take (see `requests.rs`); statistics, events and the error
//! log are read through `observe.rs`.

use std::ffi::c_void;

use super::boundary::{Castable, Failure, enter, ffi_call, free_handle, in_slice, in_str, out_ref};
pub use super::dialect::kvtier_key_buf;
use super::dialect::{
    KVTIER_LOCALITY_ANY, KVTIER_LOCALITY_LOCAL, KVTIER_LOCALITY_REMOTE, KVTIER_MEDIUM_ANY,
    KVTIER_MEDIUM_CPU, KVTIER_MEDIUM_STORAGE, kvtier_locality, kvtier_medium,
};
use super::growth::{Grows, read_grown};
use super::tier::{job_result_of, kvtier_job_result, kvtier_param};
use kvtier_core::error::Error;
use kvtier_core::request::{Locality, Medium, TierFilter, TierMatcher};
use kvtier_core::tiering::{Manager, RequestParams};

/// Opaque handle of a tiering manager (internally synchronized).
pub struct kvtier_manager {
    _private: [u8; 0],
}

impl Castable for kvtier_manager {
    type Rust = CManager;
    const NAME: &'static str = "manager";
}

/// A manager as the C handle holds it: the manager and its `/metrics`
/// endpoint if it has one (stopped first when the handle is freed).
pub(crate) struct CManager {
    /// Declared before `manager`, so it stops before the manager goes.
    _metrics: Option<kvtier_core::metrics::server::MetricsServer>,
    manager: std::sync::Arc<Manager>,
}

impl From<Manager> for CManager {
    fn from(manager: Manager) -> CManager {
        CManager::serving(std::sync::Arc::new(manager), None)
    }
}

impl CManager {
    /// The handle's value for `manager` and its `/metrics` endpoint.
    pub(crate) fn serving(
        manager: std::sync::Arc<Manager>,
        metrics: Option<kvtier_core::metrics::server::MetricsServer>,
    ) -> CManager {
        CManager {
            _metrics: metrics,
            manager,
        }
    }
}

impl std::ops::Deref for CManager {
    type Target = Manager;
    fn deref(&self) -> &Manager {
        &self.manager
    }
}

/// One matcher of a request's tier filter: a tier matches when both its
/// medium and its locality match (`_ANY`, or a tier that declared none,
/// matches anything).
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct kvtier_tier_matcher {
    /// `KVTIER_MEDIUM_ANY`, `KVTIER_MEDIUM_CPU` or `KVTIER_MEDIUM_STORAGE`.
    pub medium: kvtier_medium,
    /// `KVTIER_LOCALITY_ANY`, `KVTIER_LOCALITY_LOCAL` or `KVTIER_LOCALITY_REMOTE`.
    pub locality: kvtier_locality,
}

/// What the engine attaches to a request.  Initialize with
/// `kvtier_request_params_default()` (growth rule).
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct kvtier_request_params {
    /// `sizeof(kvtier_request_params)` as the caller was compiled with.
    pub struct_size: usize,
    /// Opaque pointer passed back to tiers as is.
    pub user_data: *mut c_void,
    /// Key/value parameters tiers may read (copied).
    pub params: *const kvtier_param,
    /// Number of parameters.
    pub params_len: usize,
    /// Whether the request carries a tier filter (lookups only).
    pub filter_set: bool,
    /// The filter's matchers; an empty set filter excludes every tier.
    pub filter: *const kvtier_tier_matcher,
    /// Number of matchers.
    pub filter_len: usize,
}

impl Grows for kvtier_request_params {
    const NAME: &'static str = "kvtier_request_params";
    const FIRST_LAYOUT_SIZE: usize = std::mem::size_of::<Self>();
}

/// Returns request parameters with nothing attached and no filter, and
/// `struct_size` set.  Safe to call from any thread.
#[unsafe(no_mangle)]
pub extern "C" fn kvtier_request_params_default() -> kvtier_request_params {
    kvtier_request_params {
        struct_size: std::mem::size_of::<kvtier_request_params>(),
        user_data: std::ptr::null_mut(),
        params: std::ptr::null(),
        params_len: 0,
        filter_set: false,
        filter: std::ptr::null(),
        filter_len: 0,
    }
}

fn matcher_of(m: &kvtier_tier_matcher, index: usize) -> Result<TierMatcher, Error> {
    let medium = match m.medium {
        KVTIER_MEDIUM_ANY => None,
        KVTIER_MEDIUM_CPU => Some(Medium::Cpu),
        KVTIER_MEDIUM_STORAGE => Some(Medium::Storage),
        v => {
            return Err(Error::InvalidArgument(format!(
                "filter matcher {index}: medium {v} is not a KVTIER_MEDIUM_* value"
            )));
        }
    };
    let locality = match m.locality {
        KVTIER_LOCALITY_ANY => None,
        KVTIER_LOCALITY_LOCAL => Some(Locality::Local),
        KVTIER_LOCALITY_REMOTE => Some(Locality::Remote),
        v => {
            return Err(Error::InvalidArgument(format!(
                "filter matcher {index}: locality {v} is not a KVTIER_LOCALITY_* value"
            )));
        }
    };
    Ok(TierMatcher { medium, locality })
}

/// Reads the request parameters at `params` under the growth rule (NULL:
/// nothing attached, no filter), copying their strings and arrays.
///
/// # Safety
/// `params` NULL or valid for its `struct_size`, with its arrays valid for
/// their lengths.
pub(crate) unsafe fn read_request_params(
    params: *const kvtier_request_params,
) -> Result<RequestParams, Failure> {
    let mut rp = RequestParams::default();
    if params.is_null() {
        return Ok(rp);
    }
    let p = &unsafe { read_grown(params, kvtier_request_params_default()) }?;
    rp.user_data = p.user_data as usize;
    let raw = unsafe { in_slice(p.params, p.params_len, "params->params") }?;
    kvtier_core::fallible::reserve(&mut rp.params, raw.len(), "request parameters")?;
    for kv in raw {
        let k = unsafe { in_str(kv.key, "params->params[].key") }?;
        let v = unsafe { in_str(kv.value, "params->params[].value") }?;
        rp.params.push((k.to_string(), v.to_string()));
    }
    if p.filter_set {
        let raw = unsafe { in_slice(p.filter, p.filter_len, "params->filter") }?;
        let mut ms = kvtier_core::fallible::with_capacity(raw.len(), "request tier filter")?;
        for (i, mt) in raw.iter().enumerate() {
            ms.push(matcher_of(mt, i)?);
        }
        rp.filter = TierFilter::Only(ms);
    }
    Ok(rp)
}

/// Frees a manager: shuts its tiers down if `kvtier_manager_shutdown` was
/// not called, then runs every tier's `destroy`.  NULL is a no-op.
///
/// Must be the last call on the handle: no other thread may be using it
/// and no tier may report completions afterwards.
///
/// # Safety
/// `manager` must be NULL or a live handle from `kvtier_manager_new`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn kvtier_manager_free(manager: *mut kvtier_manager) {
    let _ = super::boundary::run(|| {
        unsafe { free_handle(manager) };
        Ok(())
    });
}

/// Writes whether jobs are in flight, keys parked, promotions staged, or
/// any tier has work outstanding to `*pending_out`.  Internally synchronized.
///
/// # Safety
/// `manager` a live handle; `pending_out` valid for writes.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn kvtier_manager_has_pending_work(
    manager: *const kvtier_manager,
    pending_out: *mut bool,
) -> super::kvtier_status {
    ffi_call!({
        let m = unsafe { enter::<kvtier_manager>(manager) }?;
        let out = unsafe { out_ref(pending_out, "pending_out") }?;
        *out = m.has_pending_work()?;
        Ok(())
    })
}

/// Drains every tier (blocks until no transfer touches the region), then
/// forgets every block of the primary tier (and the pins finished
/// requests' loads held), drops staged promotions and parked keys, and
/// finalizes finished requests; secondary tiers keep
/// their data and active requests keep going.  With secondary tiers,
/// lookups of absent keys answer MISS until `kvtier_manager_reset_flushed`.
/// If a tier fails to drain, nothing is reset.  Internally synchronized.
///
/// # Safety
/// `manager` a live handle.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn kvtier_manager_reset_cache(
    manager: *const kvtier_manager,
) -> super::kvtier_status {
    ffi_call!({
        let m = unsafe { enter::<kvtier_manager>(manager) }?;
        Ok(m.reset_cache()?)
    })
}

/// Ends the promotion hold after `kvtier_manager_reset_cache` (call it when
/// worker writes from before the reset are done).  Internally synchronized.
///
/// # Safety
/// `manager` a live handle.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn kvtier_manager_reset_flushed(
    manager: *const kvtier_manager,
) -> super::kvtier_status {
    ffi_call!({
        let m = unsafe { enter::<kvtier_manager>(manager) }?;
        Ok(m.reset_flushed()?)
    })
}

/// Reports a finished job of tier `tier` (the index `add_tier` gave) from
/// any thread, at any time, including from inside a tier callback; the
/// manager applies it at its next poll.  The result and its key list are
/// copied.  Only tiers added through `kvtier_manager_add_tier` (C vtable
/// tiers) report through this call: the index of a built-in tier (fs,
/// redis), which reports through its own polling, is
/// `KVTIER_STATUS_INVALID_ARGUMENT` and nothing is queued, as is an index
/// that names no secondary tier.  An id the tier was never given, or one
/// reported twice, is logged as a tier bug then (not an error here).
/// Thread-safe; never blocks on the manager's main lock.
///
/// # Safety
/// `manager` a live handle; `result` valid, with `succeeded_keys` valid for
/// `succeeded_len` reads.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn kvtier_manager_complete_job(
    manager: *const kvtier_manager,
    tier: usize,
    result: *const kvtier_job_result,
) -> super::kvtier_status {
    ffi_call!({
        let m = unsafe { enter::<kvtier_manager>(manager) }?;
        let r = unsafe { result.as_ref() }.ok_or(Failure::Null("result"))?;
        let jr = unsafe { job_result_of(r) }
            .map_err(|why| Error::InvalidArgument(format!("result of job {}: {why}", r.id)))?;
        Ok(m.complete_job(tier, jr)?)
    })
}

/// Shuts every secondary tier down (each gets a try even if one fails).
/// If one failed, returns `KVTIER_STATUS_TIER` naming it, and any region
/// attached to the manager stays mapped.  Every later call except `_free`
/// returns `KVTIER_STATUS_CLOSED`.  Internally synchronized.
///
/// # Safety
/// `manager` a live handle.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn kvtier_manager_shutdown(
    manager: *const kvtier_manager,
) -> super::kvtier_status {
    ffi_call!({
        let m = unsafe { enter::<kvtier_manager>(manager) }?;
        Ok(m.shutdown()?)
    })
}
