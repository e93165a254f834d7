//! `kvtier_manager`: the tiering manager behind the C ABI.
//!
//! The handle is internally synchronized: any thread may call any function
//! on it, concurrently (calls are serialized inside), except `_free`, which
//! must be the last call; so every call but `_free` takes it `const`.  A
//! request begins with `kvtier_manager_request_begin`, whose handle its
//! later calls take (see `requests.rs`); statistics, events and the error
//! log are read through `observe.rs`.

use std::ffi::{c_char, c_void};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use parking_lot::Mutex;

use super::boundary::{
    Castable, Failure, enter, ffi_call, free_handle, in_slice, in_str, into_handle, out_ref,
};
pub use super::dialect::kvtier_key_buf;
use super::dialect::{
    KVTIER_LOCALITY_ANY, KVTIER_LOCALITY_LOCAL, KVTIER_LOCALITY_REMOTE, KVTIER_MEDIUM_ANY,
    KVTIER_MEDIUM_CPU, KVTIER_MEDIUM_STORAGE, kvtier_locality, kvtier_medium,
};
use super::key::kvtier_key;
use super::tier::{CTier, job_result_of, kvtier_job_result, kvtier_param, kvtier_tier_vtable};
use crate::error::Error;
use crate::primary::{PrimaryConfig, PrimaryTier};
use crate::request::{Locality, Medium, TierFilter, TierMatcher};
use crate::tiering::{
    BackpressureConfig, Manager, ManagerOptions, PressurePolicy, PromotionAnswer, RequestParams,
    TierOptions,
};

/// Opaque handle of a tiering manager (internally synchronized).
#[allow(non_camel_case_types)]
pub struct kvtier_manager {
    _private: [u8; 0],
}

impl Castable for kvtier_manager {
    type Rust = CManager;
    const NAME: &'static str = "manager";
}

/// A manager as the C handle holds it: the manager, and the key views of
/// the events the last `kvtier_manager_take_events` handed out (which stay
/// valid until the next take).
pub(crate) struct CManager {
    manager: Manager,
    /// Views of the keys the manager keeps for its last event take; only
    /// changed while the manager's lock is held.
    pub(crate) taken_keys: Mutex<Vec<kvtier_key>>,
}

impl From<Manager> for CManager {
    fn from(manager: Manager) -> CManager {
        CManager {
            manager,
            taken_keys: Mutex::new(Vec::new()),
        }
    }
}

impl std::ops::Deref for CManager {
    type Target = Manager;
    fn deref(&self) -> &Manager {
        &self.manager
    }
}

/// Promotion answer option: a lookup that starts a promotion answers RETRY (default).
pub const KVTIER_PROMOTION_ANSWER_RETRY: i32 = 0;
/// Promotion answer option: a lookup that starts a promotion answers HIT_PENDING.
pub const KVTIER_PROMOTION_ANSWER_HIT_PENDING: i32 = 1;

/// Back-pressure policy: drop every cascade while the tier is under pressure.
pub const KVTIER_PRESSURE_DROP: i32 = 0;
/// Back-pressure policy: admit one cascade at a time while under pressure.
pub const KVTIER_PRESSURE_THROTTLE: i32 = 1;

/// Options of `kvtier_manager_new`; start from `kvtier_manager_options_default()`.
#[repr(C)]
#[allow(non_camel_case_types)]
#[derive(Debug, Clone, Copy)]
pub struct kvtier_manager_options {
    /// Number of primary slots (> 0).
    pub capacity: u32,
    /// Eviction policy name, "lru" or "arc" (NUL-terminated); NULL = "lru".
    pub policy: *const c_char,
    /// Store a key only at its `store_threshold`-th offer; 0 or 1 = at the first.
    pub store_threshold: u32,
    /// Bound of the recent-offers table (used when `store_threshold` >= 2),
    /// at most 4294967294.
    pub admission_table_size: usize,
    /// Bound of each tier's event queue: the primary tier's and every
    /// secondary tier's (overflow dropped and counted in each tier's
    /// `events_dropped`); 0 turns every tier's events off.
    pub event_capacity: usize,
    /// `KVTIER_PROMOTION_ANSWER_RETRY` (default) or `_HIT_PENDING`.
    pub promotion_answer: i32,
    /// Bytes per block, for back-pressure latency per byte when a tier
    /// reports no byte count (0: latency per block).
    pub block_bytes: u64,
    /// How many messages the error log keeps.
    pub error_log_capacity: usize,
    /// Keys end with a 4-byte big-endian KV-cache group index (vLLM's
    /// `block_hash || u32_be(group)`): a request's finish commits its keys
    /// group by group, ascending, and calls that record keys for a request
    /// (prepare_store, prepare_load, set_positions) refuse keys shorter
    /// than 5 bytes (`KVTIER_STATUS_INVALID_KEY`).  Default false: one group.
    pub kv_groups: bool,
}

/// Returns the default manager options: 1024 slots, "lru", no admission
/// threshold, events off, RETRY for started promotions, an error log of 64.
/// Safe to call from any thread.
#[unsafe(no_mangle)]
pub extern "C" fn kvtier_manager_options_default() -> kvtier_manager_options {
    let p = PrimaryConfig::default();
    let m = ManagerOptions::default();
    kvtier_manager_options {
        capacity: p.capacity,
        policy: std::ptr::null(),
        store_threshold: p.store_threshold,
        admission_table_size: p.admission_table_size,
        event_capacity: p.event_capacity,
        promotion_answer: KVTIER_PROMOTION_ANSWER_RETRY,
        block_bytes: m.block_bytes,
        error_log_capacity: m.error_log_capacity,
        kv_groups: m.kv_groups,
    }
}

/// Per-tier options of `kvtier_manager_add_tier`; start from
/// `kvtier_tier_options_default()`.
#[repr(C)]
#[allow(non_camel_case_types)]
#[derive(Debug, Clone, Copy)]
pub struct kvtier_tier_options {
    /// Whether cascades to this tier are subject to back-pressure.
    pub backpressure: bool,
    /// Weight of a new latency sample, in (0, 1].
    pub alpha: f64,
    /// Enter pressure above this store latency (ns per byte, or per block).
    pub high_ns_per_byte: f64,
    /// Leave pressure below this (<= high).
    pub low_ns_per_byte: f64,
    /// Samples averaged before the detector may signal.
    pub warmup: u32,
    /// Enter pressure after this many consecutive failed stores (0 = never).
    pub max_consecutive_failures: u32,
    /// `KVTIER_PRESSURE_DROP` or `KVTIER_PRESSURE_THROTTLE`.
    pub policy: i32,
    /// Whether the tier's events reach `kvtier_manager_take_events`
    /// (default true).  Every tier queues at most the manager's
    /// `event_capacity` events (0 turns every tier's events off); false
    /// turns this tier's events off: whatever its `take_events` gives is
    /// discarded.
    pub events: bool,
}

/// Returns the default tier options: back-pressure off; when turned on,
/// alpha 0.3, high 1.0 and low 0.5 ns per byte, warm-up 3, 3 failures, drop;
/// events on.
/// Safe to call from any thread.
#[unsafe(no_mangle)]
pub extern "C" fn kvtier_tier_options_default() -> kvtier_tier_options {
    let b = BackpressureConfig::default();
    kvtier_tier_options {
        backpressure: false,
        alpha: b.alpha,
        high_ns_per_byte: b.high_ns_per_byte,
        low_ns_per_byte: b.low_ns_per_byte,
        warmup: b.warmup,
        max_consecutive_failures: b.max_consecutive_failures,
        policy: KVTIER_PRESSURE_DROP,
        events: true,
    }
}

/// One matcher of a request's tier filter: a tier matches when both its
/// medium and its locality match (`_ANY`, or a tier that declared none,
/// matches anything).
#[repr(C)]
#[allow(non_camel_case_types)]
#[derive(Debug, Clone, Copy)]
pub struct kvtier_tier_matcher {
    /// `KVTIER_MEDIUM_ANY`, `KVTIER_MEDIUM_CPU` or `KVTIER_MEDIUM_STORAGE`.
    pub medium: kvtier_medium,
    /// `KVTIER_LOCALITY_ANY`, `KVTIER_LOCALITY_LOCAL` or `KVTIER_LOCALITY_REMOTE`.
    pub locality: kvtier_locality,
}

/// What the engine attaches to a request; start from
/// `kvtier_request_params_default()`.
#[repr(C)]
#[allow(non_camel_case_types)]
#[derive(Debug, Clone, Copy)]
pub struct kvtier_request_params {
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

/// Returns request parameters with nothing attached and no filter.
/// Safe to call from any thread.
#[unsafe(no_mangle)]
pub extern "C" fn kvtier_request_params_default() -> kvtier_request_params {
    kvtier_request_params {
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

/// Reads the request parameters at `params` (NULL: nothing attached, no
/// filter), copying their strings and arrays.
///
/// # Safety
/// `params` NULL or valid for reads, with its arrays valid for their lengths.
pub(crate) unsafe fn read_request_params(
    params: *const kvtier_request_params,
) -> Result<RequestParams, Failure> {
    let mut rp = RequestParams::default();
    let Some(p) = (unsafe { params.as_ref() }) else {
        return Ok(rp);
    };
    rp.user_data = p.user_data as usize;
    let raw = unsafe { in_slice(p.params, p.params_len, "params->params") }?;
    crate::fallible::reserve(&mut rp.params, raw.len(), "request parameters")?;
    for kv in raw {
        let k = unsafe { in_str(kv.key, "params->params[].key") }?;
        let v = unsafe { in_str(kv.value, "params->params[].value") }?;
        rp.params.push((k.to_string(), v.to_string()));
    }
    if p.filter_set {
        let raw = unsafe { in_slice(p.filter, p.filter_len, "params->filter") }?;
        let mut ms = crate::fallible::with_capacity(raw.len(), "request tier filter")?;
        for (i, mt) in raw.iter().enumerate() {
            ms.push(matcher_of(mt, i)?);
        }
        rp.filter = TierFilter::Only(ms);
    }
    Ok(rp)
}

/// Creates a tiering manager over a new primary tier.
///
/// `options` must be NULL (defaults) or point to options initialized with
/// `kvtier_manager_options_default()`; `out` must not be NULL.  Options out
/// of range are `KVTIER_STATUS_INVALID_ARGUMENT`; a capacity whose slot
/// tables cannot be allocated is `KVTIER_STATUS_OUT_OF_MEMORY`.  On success
/// writes the new handle to `*out`; on failure writes nothing.  The caller
/// owns the handle and releases it with `kvtier_manager_free`.  Thread
/// safety: the handle is internally synchronized.
///
/// # Safety
/// `options` must be NULL or valid for reads; `options->policy` NULL or a
/// NUL-terminated string; `out` valid for writes.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn kvtier_manager_new(
    options: *const kvtier_manager_options,
    out: *mut *mut kvtier_manager,
) -> super::kvtier_status {
    ffi_call!({
        let out = unsafe { out_ref(out, "out") }?;
        let o = unsafe { options.as_ref() }
            .copied()
            .unwrap_or_else(|| kvtier_manager_options_default());
        let policy = if o.policy.is_null() {
            "lru"
        } else {
            unsafe { in_str(o.policy, "options->policy") }?
        };
        let promotion_answer = match o.promotion_answer {
            KVTIER_PROMOTION_ANSWER_RETRY => PromotionAnswer::Retry,
            KVTIER_PROMOTION_ANSWER_HIT_PENDING => PromotionAnswer::HitPending,
            v => {
                return Err(Error::InvalidArgument(format!(
                    "options->promotion_answer {v} is not KVTIER_PROMOTION_ANSWER_RETRY or _HIT_PENDING"
                ))
                .into());
            }
        };
        let primary = PrimaryTier::new(PrimaryConfig {
            capacity: o.capacity,
            policy: policy.parse()?,
            store_threshold: o.store_threshold,
            admission_table_size: o.admission_table_size,
            event_capacity: o.event_capacity,
            kv_groups: o.kv_groups,
        })?;
        let manager = Manager::new(
            primary,
            ManagerOptions {
                promotion_answer,
                block_bytes: o.block_bytes,
                error_log_capacity: o.error_log_capacity,
                kv_groups: o.kv_groups,
            },
        );
        *out = into_handle::<kvtier_manager>(manager);
        Ok(())
    })
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

/// Registers a secondary tier implemented by a C vtable (copied) and writes
/// its tier index (1 for the first) to `*index_out`.  Allowed until the
/// first request starts.
///
/// `vtable` must have `lookup`, `submit_store` and `submit_load`; `options`
/// may be NULL (defaults).  On success the manager owns
/// `vtable->user_data` and calls `destroy` exactly once when it is freed;
/// on failure nothing is kept and `destroy` is not called.  Internally
/// synchronized.
///
/// # Safety
/// `manager` a live handle; `vtable` valid for reads with `name` NULL or
/// NUL-terminated; `options` NULL or valid; `index_out` valid for writes.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn kvtier_manager_add_tier(
    manager: *mut kvtier_manager,
    vtable: *const kvtier_tier_vtable,
    options: *const kvtier_tier_options,
    index_out: *mut usize,
) -> super::kvtier_status {
    ffi_call!({
        let m = unsafe { enter::<kvtier_manager>(manager) }?;
        let vt = unsafe { vtable.as_ref() }.ok_or(Failure::Null("vtable"))?;
        let index_out = unsafe { out_ref(index_out, "index_out") }?;
        let o = unsafe { options.as_ref() }
            .copied()
            .unwrap_or_else(|| kvtier_tier_options_default());
        let backpressure = if o.backpressure {
            let policy = match o.policy {
                KVTIER_PRESSURE_DROP => PressurePolicy::Drop,
                KVTIER_PRESSURE_THROTTLE => PressurePolicy::Throttle,
                v => {
                    return Err(Error::InvalidArgument(format!(
                        "options->policy {v} is not KVTIER_PRESSURE_DROP or _THROTTLE"
                    ))
                    .into());
                }
            };
            Some(BackpressureConfig {
                alpha: o.alpha,
                high_ns_per_byte: o.high_ns_per_byte,
                low_ns_per_byte: o.low_ns_per_byte,
                warmup: o.warmup,
                max_consecutive_failures: o.max_consecutive_failures,
                policy,
            })
        } else {
            None
        };
        let armed = Arc::new(AtomicBool::new(false));
        let tier = unsafe { CTier::new(vt, armed.clone()) }?;
        let index = m.add_tier_with(
            Box::new(tier),
            TierOptions {
                backpressure,
                events: o.events,
            },
        )?;
        armed.store(true, Ordering::Release);
        *index_out = index;
        Ok(())
    })
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
/// forgets every block of the primary tier, drops staged promotions and
/// parked keys, and finalizes finished requests; secondary tiers keep
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

/// Attaches a built-in Rust tier (used by the other handle modules'
/// `kvtier_manager_add_*_tier` functions).
pub(crate) fn add_rust_tier(
    manager: *mut kvtier_manager,
    tier: Box<dyn crate::tiering::SecondaryTier>,
    opts: TierOptions,
) -> Result<usize, Failure> {
    // SAFETY: the caller passes a handle it got from C, checked here.
    let m = unsafe { enter::<kvtier_manager>(manager) }?;
    Ok(m.add_tier_with(tier, opts)?)
}

/// Ties `region`'s mapping to `manager`: the manager keeps a view of the
/// region's slots until it shuts down successfully, and for good if a
/// secondary tier fails to shut down (that tier may still write into the
/// slots, so the address range must never be reused).
///
/// `region` stays owned by the caller, who may free it at any time; the
/// mapping itself lives on while the manager (or any tier) holds a view.
/// A region with fewer slots than the manager's primary tier is
/// `KVTIER_STATUS_INVALID_ARGUMENT`.  Internally synchronized.
///
/// # Safety
/// `manager` and `region` must be live handles (or NULL, which is an error).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn kvtier_manager_attach_region(
    manager: *const kvtier_manager,
    region: *const super::region::kvtier_region,
) -> super::kvtier_status {
    ffi_call!({
        let m = unsafe { enter::<kvtier_manager>(manager) }?;
        let r = unsafe { enter::<super::region::kvtier_region>(region) }?;
        Ok(m.attach_region(r.slots())?)
    })
}

/// Test support: attaches a Rust [`crate::tiering::SecondaryTier`] to a C
/// manager handle inside the boundary and writes its index to `*index_out`,
/// so tests can drive a real export into a tier that panics (the path a
/// bug in a built-in tier takes).
///
/// # Safety
/// `manager` must be NULL or a live handle; `index_out` NULL or valid.
#[doc(hidden)]
pub unsafe fn attach_rust_tier(
    manager: *mut kvtier_manager,
    tier: Box<dyn crate::tiering::SecondaryTier>,
    index_out: *mut usize,
) -> super::kvtier_status {
    ffi_call!({
        let out = unsafe { out_ref(index_out, "index_out") }?;
        *out = add_rust_tier(manager, tier, TierOptions::default())?;
        Ok(())
    })
}
