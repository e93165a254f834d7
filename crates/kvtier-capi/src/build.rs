//! Building a manager from C: `kvtier_manager_options`, `kvtier_manager_new`,
//! and adding tiers implemented in C (`kvtier_manager_add_tier`, with
//! `kvtier_tier_options` and the vtable's default).
//!
//! The option structs follow the growth rule (`struct_size` first, read
//! with `read_grown`); their defaults are built from the core options'
//! `Default` ([`Config`], [`PrimaryConfig`], [`TierOptions`]), and they are
//! converted into those same types, so C, Rust and JSON share one set of
//! options and defaults.

use std::ffi::{CStr, c_char};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use super::boundary::{Failure, enter, ffi_call, in_str, into_handle, out_ref};
use super::dialect::{
    KVTIER_LOCALITY_ANY, KVTIER_LOCALITY_LOCAL, KVTIER_LOCALITY_REMOTE, KVTIER_MEDIUM_ANY,
    kvtier_locality,
};
use super::growth::{Grows, read_grown};
use super::manager::kvtier_manager;
use super::region::kvtier_region;
use super::status::kvtier_status;
use super::tier::{CTier, kvtier_tier_vtable};
use kvtier_core::config::{Config, SlotSource};
use kvtier_core::error::Error;
use kvtier_core::primary::{PolicyKind, PrimaryConfig};
use kvtier_core::request::Locality;
use kvtier_core::tiering::{
    BackpressureConfig, PressurePolicy, ProgressOptions, PromotionAnswer, TierOptions,
};

/// What a lookup that starts a promotion answers: a
/// `KVTIER_PROMOTION_ANSWER_*` value.
pub type kvtier_promotion_answer = i32;
/// The lookup answers RETRY: ask again later (default).
pub const KVTIER_PROMOTION_ANSWER_RETRY: kvtier_promotion_answer = 0;
/// The lookup answers HIT_PENDING: the block is on its way (vLLM 0.33).
pub const KVTIER_PROMOTION_ANSWER_HIT_PENDING: kvtier_promotion_answer = 1;

/// What happens to cascades to a tier under back-pressure: a
/// `KVTIER_PRESSURE_POLICY_*` value.
pub type kvtier_pressure_policy = i32;
/// Drop every cascade while the tier is under pressure (default).
pub const KVTIER_PRESSURE_POLICY_DROP: kvtier_pressure_policy = 0;
/// Admit one cascade at a time while the tier is under pressure.
pub const KVTIER_PRESSURE_POLICY_THROTTLE: kvtier_pressure_policy = 1;

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

/// Per-tier options of `kvtier_manager_add_tier`.  Initialize with
/// `kvtier_tier_options_default()` (growth rule).
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct kvtier_tier_options {
    /// `sizeof(kvtier_tier_options)` as the caller was compiled with.
    pub struct_size: usize,
    /// Whether cascades to this tier are subject to back-pressure (default false).
    pub backpressure: bool,
    /// Weight of a new latency sample, in (0, 1] (default 0.3).
    pub alpha: f64,
    /// Enter pressure above this store latency, ns per byte or per block
    /// (default 1.0).
    pub high_ns_per_byte: f64,
    /// Leave pressure below this (<= high; default 0.5).
    pub low_ns_per_byte: f64,
    /// Samples averaged before the detector may signal (default 3).
    pub warmup: u32,
    /// Enter pressure after this many consecutive failed stores (0 = never;
    /// default 3).
    pub max_consecutive_failures: u32,
    /// `KVTIER_PRESSURE_POLICY_DROP` (default) or `_THROTTLE`.
    pub policy: kvtier_pressure_policy,
    /// Whether the tier's events reach `kvtier_manager_take_events`
    /// (default true).  Every tier queues at most the manager's
    /// `event_capacity` events (0 turns every tier's events off); false
    /// turns this tier's events off: whatever its `take_events` gives is
    /// discarded.
    pub events: bool,
}

impl Grows for kvtier_manager_options {
    const NAME: &'static str = "kvtier_manager_options";
    /// 0.2's layout ended with `kv_groups`; the progress fields of 0.3 start
    /// at the next 8-byte boundary, past that layout's padding.
    const FIRST_LAYOUT_SIZE: usize = std::mem::offset_of!(Self, progress_wait_ms);
}

impl Grows for kvtier_tier_options {
    const NAME: &'static str = "kvtier_tier_options";
    const FIRST_LAYOUT_SIZE: usize = std::mem::size_of::<Self>();
}

impl Grows for kvtier_tier_vtable {
    const NAME: &'static str = "kvtier_tier_vtable";
    const FIRST_LAYOUT_SIZE: usize = std::mem::size_of::<Self>();
}

/// The policy's name as a static C string.
pub(crate) fn policy_name(policy: PolicyKind) -> *const c_char {
    let name: &'static CStr = match policy {
        PolicyKind::Lru => c"lru",
        PolicyKind::Arc => c"arc",
    };
    name.as_ptr()
}

/// The policy named by `name` (NULL: the default).
///
/// # Safety
/// `name` NULL or NUL-terminated.
pub(crate) unsafe fn policy_of(
    name: *const c_char,
    what: &'static str,
) -> Result<PolicyKind, Failure> {
    if name.is_null() {
        return Ok(PolicyKind::default());
    }
    Ok(unsafe { in_str(name, what) }?.parse()?)
}

/// The C value of a locality.
pub(crate) fn locality_code(locality: Locality) -> kvtier_locality {
    match locality {
        Locality::Local => KVTIER_LOCALITY_LOCAL,
        Locality::Remote => KVTIER_LOCALITY_REMOTE,
    }
}

/// The locality of a C value (`what` names the field in errors).
pub(crate) fn locality_of(code: kvtier_locality, what: &str) -> Result<Locality, Failure> {
    match code {
        KVTIER_LOCALITY_LOCAL => Ok(Locality::Local),
        KVTIER_LOCALITY_REMOTE => Ok(Locality::Remote),
        v => Err(Error::InvalidArgument(format!(
            "{what} {v} is not KVTIER_LOCALITY_LOCAL or _REMOTE"
        ))
        .into()),
    }
}

/// A string option: NULL is `None`.
///
/// # Safety
/// `p` NULL or NUL-terminated.
pub(crate) unsafe fn opt_str<'a>(
    p: *const c_char,
    what: &'static str,
) -> Result<Option<&'a str>, Failure> {
    if p.is_null() {
        Ok(None)
    } else {
        unsafe { in_str(p, what) }.map(Some)
    }
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

/// The core options of the caller's `kvtier_manager_options` (NULL: the
/// defaults).
///
/// # Safety
/// `options` NULL or valid for its `struct_size`, `policy` NULL or NUL-terminated.
pub(crate) unsafe fn manager_config_of(
    options: *const kvtier_manager_options,
) -> Result<Config, Failure> {
    let o = unsafe { read_grown(options, kvtier_manager_options_default()) }?;
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
    Ok(Config {
        block_bytes: o.block_bytes,
        region: None,
        primary: PrimaryConfig {
            capacity: o.capacity,
            policy: unsafe { policy_of(o.policy, "options->policy") }?,
            store_threshold: o.store_threshold,
            admission_table_size: o.admission_table_size,
            event_capacity: o.event_capacity,
            kv_groups: o.kv_groups,
        },
        promotion_answer,
        error_log_capacity: o.error_log_capacity,
        progress: ProgressOptions {
            hold: o.progress_hold,
            wait_steps: o.progress_wait_steps,
            wait_ms: o.progress_wait_ms,
        },
        tiers: Vec::new(),
        metrics: None,
    })
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

/// Returns the default tier options (the core defaults): back-pressure
/// off; when turned on, alpha 0.3, high 1.0 and low 0.5 ns per byte,
/// warm-up 3, 3 failures, drop; events on; `struct_size` set.
/// Safe to call from any thread.
#[unsafe(no_mangle)]
pub extern "C" fn kvtier_tier_options_default() -> kvtier_tier_options {
    let d = TierOptions::default();
    let b = d.backpressure.unwrap_or_default();
    kvtier_tier_options {
        struct_size: std::mem::size_of::<kvtier_tier_options>(),
        backpressure: d.backpressure.is_some(),
        alpha: b.alpha,
        high_ns_per_byte: b.high_ns_per_byte,
        low_ns_per_byte: b.low_ns_per_byte,
        warmup: b.warmup,
        max_consecutive_failures: b.max_consecutive_failures,
        policy: match b.policy {
            PressurePolicy::Drop => KVTIER_PRESSURE_POLICY_DROP,
            PressurePolicy::Throttle => KVTIER_PRESSURE_POLICY_THROTTLE,
        },
        events: d.events,
    }
}

/// The core options of the caller's `kvtier_tier_options` (NULL: the
/// defaults).
///
/// # Safety
/// `options` NULL or valid for its `struct_size`.
pub(crate) unsafe fn tier_options_of(
    options: *const kvtier_tier_options,
) -> Result<TierOptions, Failure> {
    let o = unsafe { read_grown(options, kvtier_tier_options_default()) }?;
    let backpressure = if o.backpressure {
        let policy = match o.policy {
            KVTIER_PRESSURE_POLICY_DROP => PressurePolicy::Drop,
            KVTIER_PRESSURE_POLICY_THROTTLE => PressurePolicy::Throttle,
            v => {
                return Err(Error::InvalidArgument(format!(
                    "options->policy {v} is not KVTIER_PRESSURE_POLICY_DROP or _THROTTLE"
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
    Ok(TierOptions {
        backpressure,
        events: o.events,
    })
}

/// Returns a vtable with every entry NULL, no name, medium and locality
/// `_ANY`, and `struct_size` set: start every `kvtier_tier_vtable` from
/// it, then set the entries the tier implements (`lookup`, `submit_store`
/// and `submit_load` at least).  Safe to call from any thread.
#[unsafe(no_mangle)]
pub extern "C" fn kvtier_tier_vtable_default() -> kvtier_tier_vtable {
    kvtier_tier_vtable {
        struct_size: std::mem::size_of::<kvtier_tier_vtable>(),
        user_data: std::ptr::null_mut(),
        name: std::ptr::null(),
        medium: KVTIER_MEDIUM_ANY,
        locality: KVTIER_LOCALITY_ANY,
        lookup: None,
        submit_store: None,
        submit_load: None,
        poll_finished: None,
        touch: None,
        on_new_request: None,
        on_request_finished: None,
        on_schedule_end: None,
        has_pending_work: None,
        drain: None,
        stats: None,
        shutdown: None,
        destroy: None,
        take_events: None,
    }
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
        let index = m.add_tier_with(Box::new(tier), tier_options)?;
        armed.store(true, Ordering::Release);
        *index_out = index;
        Ok(())
    })
}

#[cfg(test)]
mod tests {
    use super::*;

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
        for p in [PolicyKind::Lru, PolicyKind::Arc] {
            assert_eq!(unsafe { policy_of(policy_name(p), "policy") }.ok(), Some(p));
        }
    }
}
