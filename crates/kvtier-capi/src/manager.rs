//! `kvtier_manager`: the tiering manager behind the C ABI, from its
//! options (`kvtier_manager_options`, `kvtier_manager_new`) to its free.
//!
//! The option struct follows the growth rule (`struct_size` first, read
//! with `read_grown`); its defaults are built from the core options'
//! `Default` ([`Config`], [`PrimaryConfig`](kvtier_core::primary::PrimaryConfig)), and it is converted into
//! those same types, so C, Rust and JSON share one set of options and
//! defaults.  (The JSON configuration: `config.rs`; secondary tiers:
//! `tier.rs`.)
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

use super::boundary::{
    Castable, Failure, enter, ffi_call, free_handle, in_slice, in_str, into_handle, out_ref,
};
pub use super::dialect::kvtier_key_buf;
use super::dialect::{
    KVTIER_LOCALITY_ANY, KVTIER_LOCALITY_LOCAL, KVTIER_LOCALITY_REMOTE, KVTIER_MEDIUM_ANY,
    KVTIER_MEDIUM_CPU, KVTIER_MEDIUM_STORAGE, kvtier_locality, kvtier_medium,
};
use super::growth::{Grows, read_grown};
use super::primary::{
    kvtier_primary_options, kvtier_primary_options_default, policy_name, primary_config_of,
};
use super::region::kvtier_region;
use super::status::kvtier_status;
use super::tier::{
    CTier, job_result_of, kvtier_job_result, kvtier_param, kvtier_tier_options, kvtier_tier_vtable,
    kvtier_tier_vtable_default, tier_options_of,
};
use kvtier_core::config::{Config, SlotSource};
use kvtier_core::error::Error;
use kvtier_core::request::{Locality, Medium, TierFilter, TierMatcher};
use kvtier_core::server::Client;
use kvtier_core::tiering::{
    Manager, ManagerCalls, ProgressOptions, PromotionAnswer, RequestParams,
};

mod convert;
pub(crate) use convert::{manager_config_of, read_request_params};

/// What a lookup that starts a promotion answers: a
/// `KVTIER_PROMOTION_ANSWER_*` value.
pub type kvtier_promotion_answer = i32;
/// The lookup answers RETRY: ask again later (default).
pub const KVTIER_PROMOTION_ANSWER_RETRY: kvtier_promotion_answer = 0;
/// The lookup answers HIT_PENDING: the block is on its way (vLLM 0.33).
pub const KVTIER_PROMOTION_ANSWER_HIT_PENDING: kvtier_promotion_answer = 1;

/// Options of `kvtier_manager_new`: the manager and its primary tier.
/// Initialize with `kvtier_manager_options_default()` (growth rule).  The
/// JSON configuration of `kvtier_manager_new_from_json` names the same
/// options (the primary tier's under `"primary"`) with the same defaults.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct kvtier_manager_options {
    /// `sizeof(kvtier_manager_options)` as the caller was compiled with.
    pub struct_size: usize,
    /// Number of primary slots (> 0; default 1024).  With a region, at
    /// most its slot count.
    pub capacity: u32,
    /// Eviction policy name, "lru" (default) or "arc" (NUL-terminated,
    /// read during the call); NULL means the default.
    pub policy: *const c_char,
    /// Store a key only at its `store_threshold`-th offer; 0 or 1 = at the first.
    pub store_threshold: u32,
    /// Bound of the recent-offers table (used when `store_threshold` >= 2),
    /// at most 4294967294 (default 64000).
    pub admission_table_size: usize,
    /// Bound of each tier's event queue: the primary tier's and every
    /// secondary tier's (overflow dropped and counted in each tier's
    /// `events_dropped`); 0 (default) turns every tier's events off.
    pub event_capacity: usize,
    /// `KVTIER_PROMOTION_ANSWER_RETRY` (default) or `_HIT_PENDING`.
    pub promotion_answer: kvtier_promotion_answer,
    /// Bytes per block, for back-pressure latency per byte when a tier
    /// reports no byte count (0, default: latency per block).
    pub block_bytes: u64,
    /// How many messages the error log keeps (default 64).
    pub error_log_capacity: usize,
    /// Keys end with a 4-byte big-endian KV-cache group index (vLLM's
    /// `block_hash || u32_be(group)`): a request's finish commits its keys
    /// group by group, ascending, and every call that takes a request's
    /// keys (lookup, prepare_load, touch, complete_load, prepare_store,
    /// complete_store, set_positions) refuses keys shorter than 5 bytes
    /// (`KVTIER_STATUS_INVALID_KEY`, naming the position; nothing changes).
    /// Default false: one group.
    pub kv_groups: bool,
    /// A request waits for blocks on their way at most this many
    /// milliseconds (default 0: no bound in time).  `progress_hold` false
    /// with both bounds 0 follows vLLM 0.33 exactly.  Since 0.3.
    pub progress_wait_ms: u64,
    /// A request waits for blocks on their way at most this many steps
    /// (`kvtier_manager_schedule_end` calls); then its lookups answer the
    /// first key not ready MISS, `KVTIER_MISS_TIMED_OUT` (default 16; 0: no
    /// bound in steps).  Since 0.3.
    pub progress_wait_steps: u32,
    /// Hold the blocks a waiting request was promised (the hits of a
    /// lookup that starts promotions, and the blocks promoted for it) until
    /// its `kvtier_manager_prepare_load`, its finish, or the wait bound
    /// (default true).  See `kvtier_manager_lookup`.  Since 0.3.
    pub progress_hold: bool,
}

impl Grows for kvtier_manager_options {
    const NAME: &'static str = "kvtier_manager_options";
    /// 0.2's layout ended with `kv_groups`; the progress fields of 0.3 start
    /// at the next 8-byte boundary, past that layout's padding.
    const FIRST_LAYOUT_SIZE: usize = std::mem::offset_of!(Self, progress_wait_ms);
}

/// Returns the default manager options (the core defaults): 1024 slots,
/// "lru", no admission threshold, events off, RETRY for started
/// promotions, an error log of 64, one KV group, holds on and a wait bound
/// of 16 steps; `struct_size` set.
/// Safe to call from any thread.
#[unsafe(no_mangle)]
pub extern "C" fn kvtier_manager_options_default() -> kvtier_manager_options {
    let d = Config::default();
    kvtier_manager_options {
        struct_size: std::mem::size_of::<kvtier_manager_options>(),
        capacity: d.primary.capacity,
        policy: policy_name(d.primary.policy),
        store_threshold: d.primary.store_threshold,
        admission_table_size: d.primary.admission_table_size,
        event_capacity: d.primary.event_capacity,
        promotion_answer: match d.promotion_answer {
            PromotionAnswer::Retry => KVTIER_PROMOTION_ANSWER_RETRY,
            PromotionAnswer::HitPending => KVTIER_PROMOTION_ANSWER_HIT_PENDING,
        },
        block_bytes: d.block_bytes,
        error_log_capacity: d.error_log_capacity,
        kv_groups: d.primary.kv_groups,
        progress_hold: d.progress.hold,
        progress_wait_steps: d.progress.wait_steps,
        progress_wait_ms: d.progress.wait_ms,
    }
}

/// Creates a tiering manager over a new primary tier, with `region`'s
/// slots as its slot memory: the memory the built-in tiers
/// (`kvtier_manager_add_fs_tier`, `kvtier_manager_add_redis_tier`) copy
/// blocks through, reported by `kvtier_manager_slot_memory`.  A NULL
/// `region` gives a manager without slot memory, for tiers implemented in
/// C that bring their own (`kvtier_manager_add_tier`).
///
/// `options` NULL means the defaults; else initialized with
/// `kvtier_manager_options_default()` (growth rule).  The region must have
/// at least `capacity` slots.  Options out of range are
/// `KVTIER_STATUS_INVALID_ARGUMENT`; a capacity whose slot tables cannot
/// be allocated is `KVTIER_STATUS_OUT_OF_MEMORY`.  On success writes the
/// new handle to `*manager_out`; on failure writes nothing.  The caller
/// owns the handle and releases it with `kvtier_manager_free`.  The region
/// stays the caller's (free it whenever): the manager keeps its mapping
/// alive until it shuts down successfully, and for good if a secondary
/// tier fails to shut down (that tier may still write into the slots).
/// `kvtier_manager_new_from_json` builds a manager from the same options
/// written as JSON.  Thread-safe; the handle is internally synchronized.
///
/// # Safety
/// `options` NULL or valid for its `struct_size` with `policy` NULL or
/// NUL-terminated; `region` NULL or a live handle; `manager_out` valid for
/// writes.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn kvtier_manager_new(
    options: *const kvtier_manager_options,
    region: *const kvtier_region,
    manager_out: *mut *mut kvtier_manager,
) -> kvtier_status {
    ffi_call!({
        let out = unsafe { out_ref(manager_out, "manager_out") }?;
        let config = unsafe { manager_config_of(options) }?;
        let slots = if region.is_null() {
            SlotSource::None
        } else {
            SlotSource::View(unsafe { enter::<kvtier_region>(region) }?.slots())
        };
        *out = into_handle::<kvtier_manager>(config.build_with(slots)?);
        Ok(())
    })
}

/// Registers a secondary tier implemented by a C vtable (copied) and writes
/// its tier index (1 for the first) to `*index_out`.  Allowed until the
/// first request starts.
///
/// `vtable` is required and initialized with `kvtier_tier_vtable_default()`
/// (growth rule), with `lookup`, `submit_store` and `submit_load` set;
/// `options` NULL means the defaults, else initialized with
/// `kvtier_tier_options_default()`.  On success the manager owns
/// `vtable->user_data` and calls `destroy` exactly once when it is freed;
/// on failure nothing is kept and `destroy` is not called.  Internally
/// synchronized.
///
/// # Safety
/// `manager` a live handle; `vtable` valid for its `struct_size` with
/// `name` NULL or NUL-terminated; `options` NULL or valid for its
/// `struct_size`; `index_out` valid for writes.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn kvtier_manager_add_tier(
    manager: *const kvtier_manager,
    vtable: *const kvtier_tier_vtable,
    options: *const kvtier_tier_options,
    index_out: *mut usize,
) -> kvtier_status {
    ffi_call!({
        let m = unsafe { enter::<kvtier_manager>(manager) }?;
        if vtable.is_null() {
            return Err(Failure::Null("vtable"));
        }
        let vt = unsafe { read_grown(vtable, kvtier_tier_vtable_default()) }?;
        let index_out = unsafe { out_ref(index_out, "index_out") }?;
        let tier_options = unsafe { tier_options_of(options) }?;
        let armed = Arc::new(AtomicBool::new(false));
        let tier = unsafe { CTier::new(&vt, armed.clone()) }?;
        let index = m
            .local("kvtier_manager_add_tier")?
            .add_tier_with(Box::new(tier), tier_options)?;
        armed.store(true, Ordering::Release);
        *index_out = index;
        Ok(())
    })
}

/// Opaque handle of a tiering manager (internally synchronized).
pub struct kvtier_manager {
    _private: [u8; 0],
}

impl Castable for kvtier_manager {
    type Rust = CManager;
    const NAME: &'static str = "manager";
}

/// A manager as the C handle holds it: a local manager (with its
/// `/metrics` endpoint if it has one, stopped first when the handle is
/// freed), or one in a node server reached through its socket.  Every
/// call of [`ManagerCalls`] works on both; the few that only a local
/// manager has (adding tiers, job completions, events, callbacks, the
/// wake-up descriptor, resets) go through [`CManager::local`].
pub(crate) struct CManager {
    /// Declared before `manager`, so it stops before the manager goes.
    metrics: Option<kvtier_core::serve::MetricsServer>,
    calls: Arc<dyn ManagerCalls>,
    local: Option<Arc<Manager>>,
    remote: Option<(Arc<Client>, InfoStrings)>,
}

impl From<Manager> for CManager {
    fn from(manager: Manager) -> CManager {
        CManager::serving(Arc::new(manager), None)
    }
}

impl CManager {
    /// The handle's value for `manager` and its `/metrics` endpoint.
    pub(crate) fn serving(
        manager: Arc<Manager>,
        metrics: Option<kvtier_core::serve::MetricsServer>,
    ) -> CManager {
        CManager {
            metrics,
            calls: manager.clone(),
            local: Some(manager),
            remote: None,
        }
    }

    /// The handle's value for a manager in a node server.
    pub(crate) fn connected(client: Client) -> Result<CManager, Error> {
        let strings = InfoStrings::of(&client)?;
        let client = Arc::new(client);
        Ok(CManager {
            metrics: None,
            calls: client.clone(),
            local: None,
            remote: Some((client, strings)),
        })
    }

    /// The local manager, for calls a connected manager does not take
    /// (`what` names the call in the error).
    pub(crate) fn local(&self, what: &str) -> Result<&Manager, Error> {
        self.local.as_deref().ok_or_else(|| {
            Error::Unsupported(format!(
                "{what}: not on a manager connected to kvtierd (the server's configuration \
                 owns its tiers, events and resets)"
            ))
        })
    }

    /// The address its `/metrics` endpoint listens on, if it has one.
    pub(crate) fn metrics_address(&self) -> Option<std::net::SocketAddr> {
        self.metrics.as_ref().map(|m| m.address())
    }

    /// The connection, when the manager is in a node server.
    pub(crate) fn remote(&self) -> Option<(&Client, &InfoStrings)> {
        self.remote.as_ref().map(|(c, s)| (&**c, s))
    }
}

/// The strings of a connection's `kvtier_server_info` (`server.rs`),
/// kept with the handle for as long as the caller may read them.
pub(crate) struct InfoStrings {
    pub(crate) region_name: std::ffi::CString,
    pub(crate) region_directory: std::ffi::CString,
    pub(crate) fingerprint: std::ffi::CString,
}

impl InfoStrings {
    /// The strings of `client`'s server information.
    pub(crate) fn of(client: &Client) -> Result<InfoStrings, Error> {
        let c = |s: &str, what: &str| {
            std::ffi::CString::new(s).map_err(|_| {
                Error::InvalidArgument(format!("server protocol: the {what} holds a NUL byte"))
            })
        };
        let info = client.info();
        Ok(InfoStrings {
            region_name: c(&info.region_name, "region name")?,
            region_directory: c(&info.region_directory.to_string_lossy(), "region directory")?,
            fingerprint: c(&info.fingerprint, "fingerprint")?,
        })
    }
}

impl std::ops::Deref for CManager {
    type Target = dyn ManagerCalls;
    fn deref(&self) -> &(dyn ManagerCalls + 'static) {
        &*self.calls
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
        Ok(m.local("kvtier_manager_reset_cache")?.reset_cache()?)
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
        Ok(m.local("kvtier_manager_reset_flushed")?.reset_flushed()?)
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
        Ok(m.local("kvtier_manager_complete_job")?
            .complete_job(tier, jr)?)
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dialect::{locality_code, locality_of};
    use crate::tier::{kvtier_tier_options_default, tier_options_of};
    use kvtier_core::tiering::{BackpressureConfig, TierOptions};

    #[test]
    fn c_defaults_are_the_core_defaults() {
        let c = unsafe { manager_config_of(&kvtier_manager_options_default()) }.unwrap();
        assert_eq!(c, Config::default());
        assert_eq!(c, Config::from_json("{}").unwrap());
        assert_eq!(
            unsafe { manager_config_of(std::ptr::null()) }.unwrap(),
            Config::default()
        );
        let t = unsafe { tier_options_of(&kvtier_tier_options_default()) }.unwrap();
        assert_eq!(t, TierOptions::default());
        let json: kvtier_core::config::TierConfig =
            serde_json::from_str(r#"{"type": "fs"}"#).unwrap();
        assert_eq!(json.tier_options(), TierOptions::default());
        // Back-pressure turned on takes the core's back-pressure defaults,
        // as an empty JSON "backpressure" object does.
        let mut on = kvtier_tier_options_default();
        on.backpressure = true;
        let t = unsafe { tier_options_of(&on) }.unwrap();
        assert_eq!(t.backpressure, Some(BackpressureConfig::default()));
        let json: kvtier_core::config::TierConfig =
            serde_json::from_str(r#"{"type": "fs", "backpressure": {}}"#).unwrap();
        assert_eq!(json.tier_options().backpressure, t.backpressure);
    }

    #[test]
    fn progress_options_reach_the_core_and_older_callers_get_the_defaults() {
        let mut o = kvtier_manager_options_default();
        assert!(o.progress_hold);
        assert_eq!((o.progress_wait_steps, o.progress_wait_ms), (16, 0));
        o.progress_hold = false;
        o.progress_wait_steps = 0;
        o.progress_wait_ms = 7;
        let c = unsafe { manager_config_of(&o) }.unwrap();
        let want = ProgressOptions {
            wait_ms: 7,
            ..ProgressOptions::vllm()
        };
        assert_eq!(c.progress, want);
        // A caller built before the progress fields: its struct ends where
        // they begin, and it gets the defaults whatever lies beyond.
        o.struct_size = std::mem::offset_of!(kvtier_manager_options, progress_wait_ms);
        assert_eq!(o.struct_size, 80, "0.2's layout");
        let c = unsafe { manager_config_of(&o) }.unwrap();
        assert_eq!(c.progress, ProgressOptions::default());
    }

    #[test]
    fn enumerations_outside_their_values_are_refused() {
        let mut o = kvtier_manager_options_default();
        o.promotion_answer = 2;
        let e = unsafe { manager_config_of(&o) }.err().unwrap();
        assert!(
            matches!(e, Failure::Core(Error::InvalidArgument(m)) if m.contains("promotion_answer"))
        );
        let mut t = kvtier_tier_options_default();
        t.backpressure = true;
        t.policy = -1;
        let e = unsafe { tier_options_of(&t) }.err().unwrap();
        assert!(matches!(e, Failure::Core(Error::InvalidArgument(m)) if m.contains("policy")));
        assert!(locality_of(0, "locality").is_err());
        for l in [Locality::Local, Locality::Remote] {
            assert_eq!(locality_of(locality_code(l), "locality").ok(), Some(l));
        }
    }
}
