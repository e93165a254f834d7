//! Foreign secondary tiers: the `kvtier_tier_vtable` C and C++ code fills
//! in and the structs passed to its callbacks, and the per-tier options
//! of `kvtier_manager_add_tier` (`kvtier_tier_options`, from the core's
//! [`TierOptions`] and its defaults) (this file), and the adapter
//! that makes a vtable a [`SecondaryTier`](kvtier_core::tiering::SecondaryTier)
//! (`tier/adapter.rs`).
//!
//! Calling discipline (also in the header): every callback is called with
//! the manager's lock held, so calls into one tier never overlap, but they
//! may come from any thread that calls the manager.  Data passed to a
//! callback is borrowed for that call only.  A callback must not call back
//! into the manager that called it (the call fails with
//! `KVTIER_STATUS_REENTRANT`), except `kvtier_manager_complete_job`, which
//! is allowed from anywhere.

use std::ffi::{c_char, c_void};

use super::boundary::Failure;
use super::growth::{Grows, read_grown};
use super::key::kvtier_key;
use kvtier_core::error::Error;
use kvtier_core::tiering::{BackpressureConfig, PressurePolicy, TierOptions};

pub use super::dialect::{
    KVTIER_EVENT_CLEARED, KVTIER_EVENT_REMOVED, KVTIER_EVENT_STORED, KVTIER_LOCALITY_ANY,
    KVTIER_LOCALITY_LOCAL, KVTIER_LOCALITY_REMOTE, KVTIER_LOOKUP_HIT, KVTIER_LOOKUP_MISS,
    KVTIER_LOOKUP_RETRY, KVTIER_MEDIUM_ANY, KVTIER_MEDIUM_CPU, KVTIER_MEDIUM_STORAGE,
};
use super::dialect::{
    kvtier_event_kind, kvtier_key_buf, kvtier_locality, kvtier_lookup_result, kvtier_medium,
};

/// Which blocks of a request are offloaded to secondary tiers: a
/// `KVTIER_OFFLOAD_*` value.
pub type kvtier_offload_policy = i32;
/// Blocks newly stored in the primary tier are cascaded.
pub const KVTIER_OFFLOAD_BLOCK_LEVEL: kvtier_offload_policy = 0;
/// Every block of the request is cascaded, resident ones too.
pub const KVTIER_OFFLOAD_REQUEST_LEVEL: kvtier_offload_policy = 1;

/// Which way a job moves blocks: a `KVTIER_JOB_*` value.
pub type kvtier_job_direction = i32;
/// Primary tier to secondary tier (a cascade; the slots are pinned).
pub const KVTIER_JOB_STORE: kvtier_job_direction = 0;
/// Secondary tier to primary tier (a promotion; the slots are write pending).
pub const KVTIER_JOB_LOAD: kvtier_job_direction = 1;

/// What a statistic is: a `KVTIER_STAT_*` value.
pub type kvtier_stat_kind = i32;
/// A counter, cumulative from creation (only grows; never reset, so
/// per-interval numbers are the difference of two reads).  The series of
/// a histogram are counters too.
pub const KVTIER_STAT_COUNTER: kvtier_stat_kind = 0;
/// A gauge (a current level).
pub const KVTIER_STAT_GAUGE: kvtier_stat_kind = 1;

/// One per-request parameter: two NUL-terminated strings.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct kvtier_param {
    /// The parameter's name.
    pub key: *const c_char,
    /// Its value.
    pub value: *const c_char,
}

/// A request as a tier sees it.  Borrowed for the callback only.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct kvtier_request {
    /// The request's name, as given to `kvtier_manager_request_begin`
    /// (NUL-terminated): its label, unique among active requests.
    pub id: *const c_char,
    /// Its length in bytes, without the NUL.
    pub id_len: usize,
    /// The opaque pointer the engine attached (may be NULL).
    pub user_data: *mut c_void,
    /// The engine's key/value parameters.
    pub params: *const kvtier_param,
    /// Number of parameters.
    pub params_len: usize,
}

/// One transfer job handed to a tier.  Borrowed for the callback only:
/// copy what you keep (id, keys, slots).
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct kvtier_job {
    /// The job's id: report it exactly once.
    pub id: u64,
    /// `KVTIER_JOB_STORE` or `KVTIER_JOB_LOAD`.
    pub direction: kvtier_job_direction,
    /// The blocks' keys.
    pub keys: *const kvtier_key,
    /// Primary slot of each key (co-indexed with `keys`).
    pub slots: *const u32,
    /// Number of keys and slots.
    pub len: usize,
    /// The request the job serves.
    pub request: *const kvtier_request,
}

/// A finished job as a tier reports it.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct kvtier_job_result {
    /// The job's id.
    pub id: u64,
    /// Whether the whole job succeeded.
    pub success: bool,
    /// For a failed load: the keys that did arrive (NULL if none listed).
    /// Reported by `poll_finished`: valid until the tier's next callback
    /// starts (kvtier copies them when `poll_finished` returns); reported
    /// by `kvtier_manager_complete_job`: valid for that call.
    pub succeeded_keys: *const kvtier_key,
    /// Number of keys in `succeeded_keys`.
    pub succeeded_len: usize,
    /// Bytes moved (0 if not measured).
    pub bytes: u64,
    /// Time the transfer took in nanoseconds (0 if not measured).
    pub duration_ns: u64,
}

/// One statistic of a tier.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct kvtier_tier_stat {
    /// Snake-case name, NUL-terminated.
    pub name: [c_char; 48],
    /// `KVTIER_STAT_COUNTER` (cumulative, never decreases) or
    /// `KVTIER_STAT_GAUGE` (a current value).
    pub kind: kvtier_stat_kind,
    /// The value.
    pub value: f64,
}

/// One cache event of a tier written against the vtable, as its
/// `take_events` callback reports it: a kind and a copy of the key.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct kvtier_tier_event {
    /// `KVTIER_EVENT_STORED`, `KVTIER_EVENT_REMOVED` or `KVTIER_EVENT_CLEARED`.
    pub kind: kvtier_event_kind,
    /// The key (`key.len` 1 to 64; ignored for `KVTIER_EVENT_CLEARED`).
    pub key: kvtier_key_buf,
}

/// The callbacks of a secondary tier written in C or C++.
///
/// Every callback returns a `kvtier_status` as `int32_t`
/// (`KVTIER_STATUS_OK` = 0); any other value, or one that is not a status,
/// is recorded as a tier error (stats and the manager's error log).
/// Required: `lookup`, `submit_store`, `submit_load`.  Optional (NULL):
/// every other entry.  A tier without `poll_finished` reports its jobs only
/// through `kvtier_manager_complete_job`; a tier without `drain` declares
/// that none of its copies outlives the job's report.
///
/// Start from `kvtier_tier_vtable_default()` (every entry NULL,
/// `struct_size` set: the growth rule), then set the entries the tier has.
/// The struct is copied at registration.  After a successful registration
/// the manager owns `user_data`: `destroy(user_data)` runs exactly once,
/// after the last callback returned (when the manager is freed); not at
/// all if registration failed.
///
/// Threads: callbacks are called with the manager's lock held, so calls
/// into one tier never overlap, but they may come from any thread that
/// calls the manager.  Arguments are borrowed for the call only.  A callback
/// must not call back into the manager (`KVTIER_STATUS_REENTRANT`), except
/// `kvtier_manager_complete_job`.  C++ callbacks must be `noexcept`.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct kvtier_tier_vtable {
    /// `sizeof(kvtier_tier_vtable)` as the caller was compiled with.
    pub struct_size: usize,
    /// Passed as the first argument of every callback.
    pub user_data: *mut c_void,
    /// Short name for stats and errors (NUL-terminated, copied; at most 255
    /// bytes, else registration fails with `KVTIER_STATUS_INVALID_ARGUMENT`
    /// and no byte past the 256th is read); NULL = "c-tier".
    pub name: *const c_char,
    /// `KVTIER_MEDIUM_ANY` (none declared: matches every filter),
    /// `KVTIER_MEDIUM_CPU` or `KVTIER_MEDIUM_STORAGE`.
    pub medium: kvtier_medium,
    /// `KVTIER_LOCALITY_ANY` (none declared: matches every filter),
    /// `KVTIER_LOCALITY_LOCAL` or `KVTIER_LOCALITY_REMOTE`.
    pub locality: kvtier_locality,
    /// Writes to `*answer` whether the tier has `key`: `KVTIER_LOOKUP_HIT`,
    /// `KVTIER_LOOKUP_MISS`, or `KVTIER_LOOKUP_RETRY` (cannot tell yet: ask
    /// again later).  Any other answer counts as a callback error and a miss.
    pub lookup: Option<
        unsafe extern "C" fn(
            user_data: *mut c_void,
            key: *const kvtier_key,
            request: *const kvtier_request,
            answer: *mut kvtier_lookup_result,
        ) -> i32,
    >,
    /// Starts copying the job's (pinned) slots into the tier.  A failure
    /// status fails the job (it is reported as failed for you).
    pub submit_store:
        Option<unsafe extern "C" fn(user_data: *mut c_void, job: *const kvtier_job) -> i32>,
    /// Starts copying from the tier into the job's (write pending) slots.
    pub submit_load:
        Option<unsafe extern "C" fn(user_data: *mut c_void, job: *const kvtier_job) -> i32>,
    /// Writes up to `capacity` finished jobs to `out` and their number to
    /// `*written`; called again while it fills the buffer, until 1024
    /// results (`kvtier::tiering::MAX_FINISHED_PER_POLL`) are taken in one
    /// poll: the rest wait for the next poll (counted in the tier's
    /// `poll_limit_reached` stat).  A count above `capacity` is refused (none
    /// of the batch is read), and so is a result whose `succeeded_len` is
    /// more than the most keys of any job given to the tier (its keys are
    /// not read; the job counts as failed): each is counted in the tier's
    /// `callback_errors` and logged.
    pub poll_finished: Option<
        unsafe extern "C" fn(
            user_data: *mut c_void,
            out: *mut kvtier_job_result,
            capacity: usize,
            written: *mut usize,
        ) -> i32,
    >,
    /// Marks keys recently used.
    pub touch: Option<
        unsafe extern "C" fn(
            user_data: *mut c_void,
            keys: *const kvtier_key,
            len: usize,
            request: *const kvtier_request,
        ) -> i32,
    >,
    /// A request starts; writes `KVTIER_OFFLOAD_*` to `*policy`.
    pub on_new_request: Option<
        unsafe extern "C" fn(
            user_data: *mut c_void,
            request: *const kvtier_request,
            policy: *mut kvtier_offload_policy,
        ) -> i32,
    >,
    /// A request finished: no later callback names it.
    pub on_request_finished:
        Option<unsafe extern "C" fn(user_data: *mut c_void, request: *const kvtier_request) -> i32>,
    /// The scheduler step ended.
    pub on_schedule_end: Option<unsafe extern "C" fn(user_data: *mut c_void) -> i32>,
    /// Writes whether the tier has work outstanding to `*pending` (read as
    /// a byte: any value but 0 is true).
    pub has_pending_work:
        Option<unsafe extern "C" fn(user_data: *mut c_void, pending: *mut bool) -> i32>,
    /// Blocks until none of the tier's copies touches the region (queued
    /// jobs may be cancelled, but are still reported).
    pub drain: Option<unsafe extern "C" fn(user_data: *mut c_void) -> i32>,
    /// Writes up to `capacity` statistics to `out` and their number to
    /// `*written`.  Counters (`KVTIER_STAT_COUNTER`) are cumulative from the
    /// tier's creation and never decrease, resets included; gauges are
    /// current values.  Report every counter every time: one no longer
    /// reported keeps its last value in the manager's stats, and one
    /// reported below its previous report keeps the value shown before and
    /// counts as a tier bug (`tier_bugs`, error log).  A count above
    /// `capacity` (none of them is read), a status other than OK, and an
    /// entry whose `kind` is neither `KVTIER_STAT_COUNTER` nor
    /// `KVTIER_STAT_GAUGE` (dropped) are each counted in the tier's
    /// `callback_errors` and logged.
    pub stats: Option<
        unsafe extern "C" fn(
            user_data: *mut c_void,
            out: *mut kvtier_tier_stat,
            capacity: usize,
            written: *mut usize,
        ) -> i32,
    >,
    /// Stops the tier: afterwards it no longer touches the region.
    pub shutdown: Option<unsafe extern "C" fn(user_data: *mut c_void) -> i32>,
    /// Releases `user_data`; runs exactly once, after the last callback.
    pub destroy: Option<unsafe extern "C" fn(user_data: *mut c_void)>,
    /// Writes up to `capacity` of the tier's own events to `out`, oldest
    /// first, and their number to `*written`; called again while it fills
    /// the buffer, until the manager's `event_capacity` (at most 4096)
    /// events are taken: the rest stay with the tier for the next take.
    /// An event (other than `KVTIER_EVENT_CLEARED`) whose `key.len` is 0
    /// or more than 64 is refused, not cut short (counted in the tier's
    /// `events_rejected` stat and logged); a count above `capacity` is
    /// refused, none of the batch read (counted in `callback_errors`).
    pub take_events: Option<
        unsafe extern "C" fn(
            user_data: *mut c_void,
            out: *mut kvtier_tier_event,
            capacity: usize,
            written: *mut usize,
        ) -> i32,
    >,
}

/// What happens to cascades to a tier under back-pressure: a
/// `KVTIER_PRESSURE_POLICY_*` value.
pub type kvtier_pressure_policy = i32;
/// Drop every cascade while the tier is under pressure (default).
pub const KVTIER_PRESSURE_POLICY_DROP: kvtier_pressure_policy = 0;
/// Admit one cascade at a time while the tier is under pressure.
pub const KVTIER_PRESSURE_POLICY_THROTTLE: kvtier_pressure_policy = 1;

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

impl Grows for kvtier_tier_options {
    const NAME: &'static str = "kvtier_tier_options";
    const FIRST_LAYOUT_SIZE: usize = std::mem::size_of::<Self>();
}

impl Grows for kvtier_tier_vtable {
    const NAME: &'static str = "kvtier_tier_vtable";
    const FIRST_LAYOUT_SIZE: usize = std::mem::size_of::<Self>();
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

mod adapter;

pub use adapter::tier_from_vtable;
pub(crate) use adapter::{CTier, job_result_of};
