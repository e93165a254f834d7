//! `kvtier_primary`: the CPU primary tier as a C handle.
//!
//! Engines that want only a CPU tier (as vLLM uses its CPU offloading
//! manager) drive it directly: slots of a region they manage, reference
//! counts, and LRU or ARC eviction.  Requests are named by NUL-terminated id
//! strings.  Every output goes into caller buffers sized by the input count,
//! so no call allocates memory the caller must free.

use std::ffi::c_char;

use super::boundary::{
    Castable, Failure, enter, enter_mut, ffi_call, free_handle, in_slice, in_str, into_handle,
    out_ref, out_slice,
};
use super::build::{policy_name, policy_of};
use super::growth::{Grows, read_grown};
use super::key::{CheckedKeys, KVTIER_MAX_KEY_LEN, kvtier_key};
use super::status::kvtier_status;
use crate::error::Error;
use crate::events::{Event, EventKind};
use crate::key::MAX_KEY_LEN;
use crate::primary::{
    NamedPrimary, PrimaryConfig, PrimaryLookup, PrimaryStats, StoreOutcome, StorePlan,
};

/// Opaque handle of one CPU primary tier.
#[allow(non_camel_case_types)]
pub struct kvtier_primary {
    _private: [u8; 0],
}

/// The tier plus reusable conversion buffers (no allocation per call once warm).
pub(crate) struct PrimaryHandle {
    core: NamedPrimary,
    slots: Vec<u32>,
    plan: StorePlan,
    positions: Vec<usize>,
    events: Vec<Event>,
}

impl Castable for kvtier_primary {
    type Rust = PrimaryHandle;
    const NAME: &'static str = "primary";
}

/// Options of [`kvtier_primary_new`].  Initialize with
/// [`kvtier_primary_options_default`] (growth rule).  The same options as
/// the primary tier's in `kvtier_manager_options`, with the same defaults.
#[repr(C)]
#[allow(non_camel_case_types)]
#[derive(Debug, Clone, Copy)]
pub struct kvtier_primary_options {
    /// `sizeof(kvtier_primary_options)` as the caller was compiled with.
    pub struct_size: usize,
    /// Number of slots, at least 1 (default 1024); at most 2^31 - 1 for `"arc"`.
    pub capacity: u32,
    /// Eviction policy name, `"lru"` (default) or `"arc"`; NULL means the
    /// default.  Read during the call only.
    pub policy: *const c_char,
    /// Store a key only at its `store_threshold`-th offer to prepare_store; 0 or 1 = at once (default 0).
    pub store_threshold: u32,
    /// Bound of the table of recent offers, used when `store_threshold` >= 2
    /// (default 64000), at most 4294967294.
    pub admission_table_size: usize,
    /// Bound of the event buffer; 0 (default) turns events off.  When full,
    /// new events are dropped and counted in `events_dropped`, and a key
    /// whose "stored" event was dropped is never announced as removed.
    pub event_capacity: usize,
    /// Keys end with a 4-byte big-endian KV-cache group index (vLLM's
    /// `block_hash || u32_be(group)`): a request's finish commits its keys
    /// group by group, ascending.  Calls that record keys for a request
    /// (prepare_store, prepare_load, set_positions) then refuse keys
    /// shorter than 5 bytes (`KVTIER_STATUS_INVALID_KEY`).  Default false:
    /// one group.
    pub kv_groups: bool,
}

/// What lookup found for one key.
#[repr(C)]
#[allow(non_camel_case_types)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum kvtier_primary_lookup_result {
    /// Not resident.
    Miss = 0,
    /// Resident, being written: not readable yet (retry later).
    HitPending = 1,
    /// Resident and readable.
    Hit = 2,
}

/// Summary of one prepare_store call.
#[repr(C)]
#[allow(non_camel_case_types)]
#[derive(Debug, Clone, Copy, Default)]
pub struct kvtier_primary_store_result {
    /// True if the store was refused (not enough evictable keys): no key,
    /// slot or event changed and no other output was written (the request
    /// still recorded the keys it offered, see
    /// [`kvtier_primary_prepare_store`]).  A refusal is not an error.
    pub refused: bool,
    /// Number of keys to store (entries written to `to_store_out` and `slots_out`).
    pub stored: usize,
    /// Number of keys evicted (entries written to `evicted_out` and `evicted_lens_out`).
    pub evicted: usize,
}

/// Summary of one complete_store call.
#[repr(C)]
#[allow(non_camel_case_types)]
#[derive(Debug, Clone, Copy, Default)]
pub struct kvtier_primary_complete_result {
    /// Write-pending keys that became ready (success).
    pub ready: usize,
    /// Write-pending keys dropped and their slots freed (failure).
    pub dropped: usize,
    /// Absent keys ignored (late completions).
    pub ignored: usize,
    /// Keys being written for another request, or for a promotion, left
    /// alone (only the request that planned a key completes it).
    pub foreign: usize,
    /// Keys already readable, left alone.
    pub already_ready: usize,
}

/// Kind of one event.
#[repr(C)]
#[allow(non_camel_case_types)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum kvtier_primary_event_kind {
    /// The key became readable.
    Stored = 0,
    /// The key was evicted (only keys announced as stored).
    Removed = 1,
    /// The tier was reset and forgot every key (no key).
    Cleared = 2,
}

/// One event, key copied inline.
#[repr(C)]
#[allow(non_camel_case_types)]
#[derive(Debug, Clone, Copy)]
pub struct kvtier_primary_event {
    /// What happened.
    pub kind: kvtier_primary_event_kind,
    /// Number of key bytes (0 for `Cleared`).
    pub key_len: usize,
    /// The key's bytes (the first `key_len` are meaningful).
    pub key: [u8; KVTIER_MAX_KEY_LEN],
}

/// Number of buckets of the primary tier's allocation-size histogram
/// (`kvtier_primary_stats.allocation_size_buckets`), the +Inf bucket included.
pub const KVTIER_ALLOCATION_SIZE_BUCKETS: usize = 11;
const _: () = assert!(KVTIER_ALLOCATION_SIZE_BUCKETS == crate::primary::ALLOCATION_SIZE_BUCKETS);

/// The tier's numbers.  Counters (the allocation-size histogram included)
/// are cumulative from the tier's creation and never decrease, not even at
/// `kvtier_primary_reset`; the rest are current values.  For numbers per
/// interval, keep the previous read and subtract (`now - before`).
#[repr(C)]
#[allow(non_camel_case_types)]
#[derive(Debug, Clone, Copy, Default)]
pub struct kvtier_primary_stats {
    /// Number of slots.
    pub capacity: u32,
    /// Slots holding a key (any state).
    pub used: u32,
    /// Slots handed out fresh since creation or the last reset.
    pub allocated: u32,
    /// Keys being written.
    pub write_pending: u32,
    /// Keys ready and pinned.
    pub pinned: u32,
    /// Keys ready and idle (evictable).
    pub idle: u32,
    /// (write pending + pinned) / capacity.
    pub usage: f64,
    /// write pending / capacity.
    pub write_usage: f64,
    /// pinned / capacity.
    pub read_usage: f64,
    /// Keys evicted.
    pub evictions: u64,
    /// prepare_store calls refused.
    pub refusals: u64,
    /// Keys not stored because offered fewer than `store_threshold` times.
    pub admission_skips: u64,
    /// Keys prepare_store planned to store.
    pub stores_planned: u64,
    /// Keys made ready by complete_store.
    pub stores_completed: u64,
    /// Keys dropped by a failed complete_store.
    pub stores_failed: u64,
    /// Absent keys in complete_store (late completions), ignored.
    pub late_completions: u64,
    /// Keys in complete_store being written for another request (or a
    /// promotion), left alone.
    pub foreign_completions: u64,
    /// Keys in complete_store already readable, left alone.
    pub already_ready_completions: u64,
    /// Keys pinned by prepare_load.
    pub loads: u64,
    /// Events waiting to be taken.
    pub events_queued: u32,
    /// Events dropped because the buffer was full.
    pub events_dropped: u64,
    /// ARC: resident keys seen once (0 for lru).
    pub arc_t1: u32,
    /// ARC: resident keys reused (0 for lru).
    pub arc_t2: u32,
    /// ARC: ghosts of keys evicted from T1.
    pub arc_b1: u32,
    /// ARC: ghosts of keys evicted from T2.
    pub arc_b2: u32,
    /// ARC: the adaptive T1 target.
    pub arc_target: f64,
    /// Allocation sizes, cumulative buckets: `allocation_size_buckets[i]`
    /// counts the prepare_store calls that had at most the i-th bound of
    /// 1, 4, 16, 64, 256, 1024, 4096, 16384, 65536, 262144, +Inf keys to
    /// store (the last equals `allocation_size_count`).  As vLLM 0.33, one
    /// observation per call with keys to store (absent, distinct, admitted),
    /// refused calls included; none for a call with nothing to store.
    pub allocation_size_buckets: [u64; KVTIER_ALLOCATION_SIZE_BUCKETS],
    /// Allocation sizes: total keys over every observation.
    pub allocation_size_sum: u64,
    /// Allocation sizes: number of observations.
    pub allocation_size_count: u64,
}

impl From<PrimaryStats> for kvtier_primary_stats {
    fn from(s: PrimaryStats) -> Self {
        kvtier_primary_stats {
            capacity: s.capacity,
            used: s.used,
            allocated: s.allocated,
            write_pending: s.write_pending,
            pinned: s.pinned,
            idle: s.idle,
            usage: s.usage,
            write_usage: s.write_usage,
            read_usage: s.read_usage,
            evictions: s.evictions,
            refusals: s.refusals,
            admission_skips: s.admission_skips,
            stores_planned: s.stores_planned,
            stores_completed: s.stores_completed,
            stores_failed: s.stores_failed,
            late_completions: s.late_completions,
            foreign_completions: s.foreign_completions,
            already_ready_completions: s.already_ready_completions,
            loads: s.loads,
            events_queued: s.events_queued,
            events_dropped: s.events_dropped,
            arc_t1: s.arc_t1,
            arc_t2: s.arc_t2,
            arc_b1: s.arc_b1,
            arc_b2: s.arc_b2,
            arc_target: s.arc_target,
            allocation_size_buckets: s.allocation_sizes.cumulative,
            allocation_size_sum: s.allocation_sizes.sum as u64,
            allocation_size_count: s.allocation_sizes.count,
        }
    }
}

fn need(buffer: &'static str, given: usize, needed: usize) -> Result<(), Failure> {
    if given < needed {
        return Err(Error::InvalidArgument(format!(
            "`{buffer}` holds {given} entries; {needed} needed (one per input key)"
        ))
        .into());
    }
    Ok(())
}

impl Grows for kvtier_primary_options {
    const NAME: &'static str = "kvtier_primary_options";
    const FIRST_LAYOUT_SIZE: usize = std::mem::size_of::<Self>();
}

/// Returns the default options (the core defaults: 1024 slots, "lru", no
/// admission threshold, events off, one KV group) with `struct_size` set.
/// Safe to call from any thread.
#[unsafe(no_mangle)]
pub extern "C" fn kvtier_primary_options_default() -> kvtier_primary_options {
    let d = PrimaryConfig::default();
    kvtier_primary_options {
        struct_size: std::mem::size_of::<kvtier_primary_options>(),
        capacity: d.capacity,
        policy: policy_name(d.policy),
        store_threshold: d.store_threshold,
        admission_table_size: d.admission_table_size,
        event_capacity: d.event_capacity,
        kv_groups: d.kv_groups,
    }
}

/// The core options of the caller's `kvtier_primary_options` (NULL: the
/// defaults).
///
/// # Safety
/// `options` NULL or valid for its `struct_size`, `policy` NULL or NUL-terminated.
pub(crate) unsafe fn primary_config_of(
    options: *const kvtier_primary_options,
) -> Result<PrimaryConfig, Failure> {
    let o = unsafe { read_grown(options, kvtier_primary_options_default()) }?;
    Ok(PrimaryConfig {
        capacity: o.capacity,
        policy: unsafe { policy_of(o.policy, "options->policy") }?,
        store_threshold: o.store_threshold,
        admission_table_size: o.admission_table_size,
        event_capacity: o.event_capacity,
        kv_groups: o.kv_groups,
    })
}

/// Creates a primary tier with `options->capacity` free slots.
///
/// `options` NULL means the defaults; else initialized with
/// [`kvtier_primary_options_default`] (growth rule).  An unknown policy
/// name, a zero capacity or a size beyond its limit is
/// `KVTIER_STATUS_INVALID_ARGUMENT`; a capacity whose slot tables cannot be
/// allocated is `KVTIER_STATUS_OUT_OF_MEMORY` (about 100 bytes per slot).
/// On success writes the new handle to `*primary_out`; on failure
/// `*primary_out` is untouched and nothing is allocated.  The caller owns
/// the handle and frees it with [`kvtier_primary_free`].  Safe to call
/// from any thread.
///
/// # Safety
/// `options` NULL or valid for its `struct_size`, `options->policy` NULL
/// or a NUL-terminated string; `primary_out` valid for writes.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn kvtier_primary_new(
    options: *const kvtier_primary_options,
    primary_out: *mut *mut kvtier_primary,
) -> kvtier_status {
    ffi_call!({
        let out = unsafe { out_ref(primary_out, "primary_out") }?;
        let core = NamedPrimary::new(unsafe { primary_config_of(options) }?)?;
        *out = into_handle::<kvtier_primary>(PrimaryHandle {
            core,
            slots: Vec::new(),
            plan: StorePlan::default(),
            positions: Vec::new(),
            events: Vec::new(),
        });
        Ok(())
    })
}

/// Frees a primary tier; NULL is ignored.  Forgets every key and pending
/// event.  Must not run concurrently with any other call on the handle.
///
/// # Safety
/// `primary` must be NULL or a live handle from [`kvtier_primary_new`], not
/// used afterwards.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn kvtier_primary_free(primary: *mut kvtier_primary) {
    // Inside the boundary: a panic while releasing never unwinds into C.
    let _ = super::boundary::run(|| {
        unsafe { free_handle(primary) };
        Ok(())
    });
}

/// Starts the request named `request_id`; every load and store names an
/// active request.  A name already active, or finished with keys it
/// planned still being written, is `KVTIER_STATUS_DUPLICATE_REQUEST`.  The
/// string is copied.  Exclusive access to the handle.
///
/// # Safety
/// `primary` must be a live handle; `request_id` a NUL-terminated UTF-8 string.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn kvtier_primary_request_begin(
    primary: *mut kvtier_primary,
    request_id: *const c_char,
) -> kvtier_status {
    ffi_call!({
        let mut h = unsafe { enter_mut(primary) }?;
        let name = unsafe { in_str(request_id, "request_id") }?;
        h.core.begin(name)?;
        Ok(())
    })
}

/// Ends the request named `request_id`, committing its accesses: every key
/// it stored, loaded or offered to store that is still resident gets one
/// access, its head most recent.  Head to tail is the order in which the
/// request first presented its keys; with `kv_groups`, group by group
/// (ascending), each group by token position when all its keys have one
/// ([`kvtier_primary_set_positions`]); when every key has a position, all
/// by position.  Keys it planned and did not complete yet stay write
/// pending for it: `kvtier_primary_complete_store` with its name still
/// completes them.  An unknown name is `KVTIER_STATUS_UNKNOWN_REQUEST`.
/// Exclusive access to the handle.
///
/// # Safety
/// `primary` must be a live handle; `request_id` a NUL-terminated UTF-8 string.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn kvtier_primary_request_finished(
    primary: *mut kvtier_primary,
    request_id: *const c_char,
) -> kvtier_status {
    ffi_call!({
        let mut h = unsafe { enter_mut(primary) }?;
        let name = unsafe { in_str(request_id, "request_id") }?;
        h.core.finish(name)?;
        Ok(())
    })
}

/// Looks up `n` keys and writes one result per key into `results_out`
/// (`results_len` >= `n`): MISS, HIT_PENDING or HIT.  Changes nothing.
/// The keys are read where they are, as results are written, so
/// `results_out` must not overlap them (`KVTIER_STATUS_INVALID_ARGUMENT`).
/// A const call: may run concurrently with other const calls on the handle.
///
/// # Safety
/// `primary` must be a live handle; `keys` valid for `n` entries;
/// `results_out` valid for writes of `results_len` entries.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn kvtier_primary_lookup(
    primary: *const kvtier_primary,
    keys: *const kvtier_key,
    n: usize,
    results_out: *mut kvtier_primary_lookup_result,
    results_len: usize,
) -> kvtier_status {
    ffi_call!({
        let h = unsafe { enter(primary) }?;
        need("results_out", results_len, n)?;
        // Every key is checked first, so a bad one leaves `results_out`
        // untouched; then they are looked up in place, without a copy.
        let keys = unsafe { CheckedKeys::new(keys, n) }?;
        keys.check_apart(results_out, results_len, "results_out")?;
        let out = unsafe { out_slice(results_out, results_len, "results_out") }?;
        h.core.tier.lookup_each(
            keys.len(),
            |j| keys.bytes(j),
            |i, found| {
                out[i] = match found {
                    PrimaryLookup::Miss => kvtier_primary_lookup_result::Miss,
                    PrimaryLookup::HitPending => kvtier_primary_lookup_result::HitPending,
                    PrimaryLookup::Hit => kvtier_primary_lookup_result::Hit,
                }
            },
        );
        Ok(())
    })
}

/// Pins `n` ready keys for a load by request `request_id` and writes their
/// slot ids, in key order, into `slots_out` (`slots_len` >= `n`).  A key
/// that is absent or being written is `KVTIER_STATUS_KEY_STATE`, the message
/// naming its position; nothing changes then.  Release the pins with
/// [`kvtier_primary_complete_load`].  Exclusive access to the handle.
///
/// # Safety
/// `primary` must be a live handle; `request_id` a NUL-terminated string;
/// `keys` valid for `n` entries; `slots_out` valid for `slots_len` writes.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn kvtier_primary_prepare_load(
    primary: *mut kvtier_primary,
    request_id: *const c_char,
    keys: *const kvtier_key,
    n: usize,
    slots_out: *mut u32,
    slots_len: usize,
) -> kvtier_status {
    ffi_call!({
        let mut h = unsafe { enter_mut(primary) }?;
        let name = unsafe { in_str(request_id, "request_id") }?;
        need("slots_out", slots_len, n)?;
        let out = unsafe { out_slice(slots_out, slots_len, "slots_out") }?;
        let h = &mut *h;
        let keys = unsafe { CheckedKeys::new(keys, n) }?;
        h.core
            .prepare_load_each(name, keys.len(), |j| keys.bytes(j), &mut h.slots)?;
        out[..n].copy_from_slice(&h.slots);
        Ok(())
    })
}

/// [0.33] Gives `n` keys of active request `request_id` their token
/// positions: `positions[i]` is the end-token position of the block of
/// `keys[i]` (block `i` of a request of 16-token blocks ends at token
/// `16 * (i + 1)`).  A later position replaces an earlier one for the same
/// key.  Call it before the request's first call or between its calls;
/// positions are read when used and kept until the request finishes (a
/// reset keeps them).
///
/// What positions change: with `"lru"`, a key with a position that the
/// request stores, or first presents while resident (a load, or a ready
/// key offered to prepare_store), ranks within the request's one rank,
/// the tail evicted before the head, until the request finishes; an access
/// never lowers a key's rank.  At [`kvtier_primary_request_finished`], a
/// request's keys are committed head to tail by position when all of them
/// (or, per KV group, all of the group's) have one.  Keys without a
/// position behave as if this call was never made.
///
/// Errors, nothing changed: `KVTIER_STATUS_UNKNOWN_REQUEST` (not begun, or
/// finished); `KVTIER_STATUS_INVALID_KEY` for a key of 0 or more than 64
/// bytes, or (with `kv_groups`) fewer than 5, the message naming its
/// position; `KVTIER_STATUS_NULL_ARGUMENT` if `keys` or `positions` is
/// NULL with `n` > 0; `KVTIER_STATUS_NO_SPACE` if memory runs out.
/// `n` = 0 does nothing.  The arrays are read during the call only; the
/// keys are copied.  Exclusive access to the handle.
///
/// # Safety
/// `primary` must be a live handle; `request_id` a NUL-terminated string;
/// `keys` and `positions` valid for `n` entries each.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn kvtier_primary_set_positions(
    primary: *mut kvtier_primary,
    request_id: *const c_char,
    keys: *const kvtier_key,
    positions: *const u64,
    n: usize,
) -> kvtier_status {
    ffi_call!({
        let mut h = unsafe { enter_mut(primary) }?;
        let name = unsafe { in_str(request_id, "request_id") }?;
        let h = &mut *h;
        let keys = unsafe { CheckedKeys::new(keys, n) }?;
        let positions = unsafe { in_slice(positions, n, "positions") }?;
        h.core
            .set_positions_each(name, keys.len(), |j| keys.bytes(j), |j| positions[j])?;
        Ok(())
    })
}

/// Marks `n` keys recently used for request `request_id` (policy-specific;
/// the first key ends up most recent); absent keys are ignored (ARC learns
/// from keys it evicted recently).  Exclusive access to the handle.
///
/// # Safety
/// `primary` must be a live handle; `request_id` a NUL-terminated string;
/// `keys` valid for `n` entries.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn kvtier_primary_touch(
    primary: *mut kvtier_primary,
    request_id: *const c_char,
    keys: *const kvtier_key,
    n: usize,
) -> kvtier_status {
    ffi_call!({
        let mut h = unsafe { enter_mut(primary) }?;
        let name = unsafe { in_str(request_id, "request_id") }?;
        let h = &mut *h;
        let keys = unsafe { CheckedKeys::new(keys, n) }?;
        h.core.touch_each(name, keys.len(), |j| keys.bytes(j))?;
        Ok(())
    })
}

/// Releases the pins [`kvtier_primary_prepare_load`] took on `n` keys.  A
/// key that is absent or not pinned is `KVTIER_STATUS_KEY_STATE`, naming its
/// position; nothing changes then.  Exclusive access to the handle.
///
/// # Safety
/// `primary` must be a live handle; `request_id` a NUL-terminated string;
/// `keys` valid for `n` entries.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn kvtier_primary_complete_load(
    primary: *mut kvtier_primary,
    request_id: *const c_char,
    keys: *const kvtier_key,
    n: usize,
) -> kvtier_status {
    ffi_call!({
        let mut h = unsafe { enter_mut(primary) }?;
        let name = unsafe { in_str(request_id, "request_id") }?;
        let h = &mut *h;
        let keys = unsafe { CheckedKeys::new(keys, n) }?;
        h.core
            .complete_load_each(name, keys.len(), |j| keys.bytes(j))?;
        Ok(())
    })
}

/// Plans storing `n` keys for request `request_id`.
///
/// Keys already resident are not stored again.  If free slots are short,
/// exactly the shortfall is evicted from idle keys not named in this call;
/// if that many are not available, the call succeeds with
/// `result_out->refused = true` and no key, slot or event changes.
/// Otherwise the keys to store enter the write-pending state, written by
/// this request; write their data, then call
/// [`kvtier_primary_complete_store`] with the same request (once or in
/// several calls).  Either way the request records, before any eviction,
/// the keys it offered to store and the ready keys it named (as vLLM 0.33
/// does): they are committed at its finish if resident then, and with
/// `"lru"` a ready key with a token position presented for the first time
/// is raised to the request's rank.
///
/// Buffers, each sized by the input count `n` (at most `n` keys are stored
/// and at most `n` evicted): `to_store_out` (`to_store_len` >= n) gets the
/// position in `keys` of each key to store, in call order; `slots_out`
/// (`slots_len` >= n) its slot id; `evicted_out` (`evicted_len` >= n *
/// `KVTIER_MAX_KEY_LEN` bytes) gets evicted key `i` at byte offset `i *
/// KVTIER_MAX_KEY_LEN`, its length in `evicted_lens_out[i]`
/// (`evicted_lens_len` >= n).  Counts go to `*result_out`.  Nothing is
/// allocated for the caller.  Exclusive access to the handle.
///
/// # Safety
/// `primary` must be a live handle; `request_id` a NUL-terminated string;
/// `keys` valid for `n` entries; each output valid for writes of its length;
/// `result_out` valid for writes.
#[unsafe(no_mangle)]
#[allow(clippy::too_many_arguments)]
pub unsafe extern "C" fn kvtier_primary_prepare_store(
    primary: *mut kvtier_primary,
    request_id: *const c_char,
    keys: *const kvtier_key,
    n: usize,
    to_store_out: *mut usize,
    to_store_len: usize,
    slots_out: *mut u32,
    slots_len: usize,
    evicted_out: *mut u8,
    evicted_len: usize,
    evicted_lens_out: *mut usize,
    evicted_lens_len: usize,
    result_out: *mut kvtier_primary_store_result,
) -> kvtier_status {
    ffi_call!({
        let mut h = unsafe { enter_mut(primary) }?;
        let name = unsafe { in_str(request_id, "request_id") }?;
        let result = unsafe { out_ref(result_out, "result_out") }?;
        need("to_store_out", to_store_len, n)?;
        need("slots_out", slots_len, n)?;
        need("evicted_lens_out", evicted_lens_len, n)?;
        if evicted_len < n.saturating_mul(MAX_KEY_LEN) {
            return Err(Error::InvalidArgument(format!(
                "`evicted_out` holds {evicted_len} bytes; {} needed (KVTIER_MAX_KEY_LEN per input key)",
                n.saturating_mul(MAX_KEY_LEN)
            ))
            .into());
        }
        let to_store = unsafe { out_slice(to_store_out, to_store_len, "to_store_out") }?;
        let slots = unsafe { out_slice(slots_out, slots_len, "slots_out") }?;
        let evicted = unsafe { out_slice(evicted_out, evicted_len, "evicted_out") }?;
        let evicted_lens =
            unsafe { out_slice(evicted_lens_out, evicted_lens_len, "evicted_lens_out") }?;
        let h = &mut *h;
        let keys = unsafe { CheckedKeys::new(keys, n) }?;
        let outcome =
            h.core
                .prepare_store_each(name, keys.len(), |j| keys.bytes(j), &mut h.plan)?;
        if outcome == StoreOutcome::Refused {
            *result = kvtier_primary_store_result {
                refused: true,
                stored: 0,
                evicted: 0,
            };
            return Ok(());
        }
        h.plan
            .positions_in_each(keys.len(), |j| keys.bytes(j), &mut h.positions);
        to_store[..h.positions.len()].copy_from_slice(&h.positions);
        slots[..h.plan.slots.len()].copy_from_slice(&h.plan.slots);
        for (i, key) in h.plan.evicted.iter().enumerate() {
            let at = i * MAX_KEY_LEN;
            evicted[at..at + key.len()].copy_from_slice(key.as_bytes());
            evicted_lens[i] = key.len();
        }
        *result = kvtier_primary_store_result {
            refused: false,
            stored: h.plan.to_store.len(),
            evicted: h.plan.evicted.len(),
        };
        Ok(())
    })
}

/// Finishes writes of `n` keys that request `request_id` planned: with
/// `success`, its keys still being written become readable and evictable
/// ("stored" events); without, they are dropped and their slots freed.
///
/// Only keys that this request's own `kvtier_primary_prepare_store`
/// planned, and that are still being written for it, are acted on; every
/// other key is left alone and counted: keys being written for another
/// request (`foreign`), keys already readable (`already_ready`), absent
/// keys (`ignored`: a completion after a reset).  Passing every key given
/// to prepare_store is therefore safe.  A plan may be completed in
/// several calls, a part of its keys each time.  The request may have
/// finished: its name stays known for its completions until every key it
/// planned was completed (or the tier was reset); an unknown name is
/// `KVTIER_STATUS_UNKNOWN_REQUEST`.  Writes counts to `*result_out` unless
/// it is NULL.  Exclusive access to the handle.
///
/// # Safety
/// `primary` must be a live handle; `request_id` a NUL-terminated string;
/// `keys` valid for `n` entries; `result_out` NULL or valid for writes.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn kvtier_primary_complete_store(
    primary: *mut kvtier_primary,
    request_id: *const c_char,
    keys: *const kvtier_key,
    n: usize,
    success: bool,
    result_out: *mut kvtier_primary_complete_result,
) -> kvtier_status {
    ffi_call!({
        let mut h = unsafe { enter_mut(primary) }?;
        let name = unsafe { in_str(request_id, "request_id") }?;
        let h = &mut *h;
        let keys = unsafe { CheckedKeys::new(keys, n) }?;
        let r = h
            .core
            .complete_store_each(name, keys.len(), |j| keys.bytes(j), success)?;
        if let Some(out) = unsafe { result_out.as_mut() } {
            *out = kvtier_primary_complete_result {
                ready: r.ready,
                dropped: r.dropped,
                ignored: r.ignored,
                foreign: r.foreign,
                already_ready: r.already_ready,
            };
        }
        Ok(())
    })
}

/// Forgets every key and frees every slot, whatever its state (pins and
/// writes in flight included); slot allocation restarts at 0.  Drops queued
/// events and queues one "cleared" event.  Active requests stay active;
/// writes in flight are forgotten (their completions find nothing), and
/// finished requests' names are released.  Exclusive access to the handle.
///
/// # Safety
/// `primary` must be a live handle.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn kvtier_primary_reset(primary: *mut kvtier_primary) -> kvtier_status {
    ffi_call!({
        let mut h = unsafe { enter_mut(primary) }?;
        h.core.reset();
        Ok(())
    })
}

/// Moves up to `events_len` queued events, oldest first, into `events_out`
/// and writes how many to `*count_out` and whether more remain to
/// `*more_out`.  Keys are copied into the events.  Events are buffered up to
/// the `event_capacity` option; beyond it new events are dropped and
/// counted (stats `events_dropped`).  Exclusive access to the handle.
///
/// # Safety
/// `primary` must be a live handle; `events_out` valid for `events_len`
/// writes (NULL allowed when 0); `count_out` and `more_out` valid for writes.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn kvtier_primary_take_events(
    primary: *mut kvtier_primary,
    events_out: *mut kvtier_primary_event,
    events_len: usize,
    count_out: *mut usize,
    more_out: *mut bool,
) -> kvtier_status {
    ffi_call!({
        let mut h = unsafe { enter_mut(primary) }?;
        let out = unsafe { out_slice(events_out, events_len, "events_out") }?;
        let count = unsafe { out_ref(count_out, "count_out") }?;
        let more = unsafe { out_ref(more_out, "more_out") }?;
        let h = &mut *h;
        h.events.clear();
        let n = h.core.tier.take_events_up_to(events_len, &mut h.events);
        for (slot, e) in out.iter_mut().zip(h.events.iter()) {
            let mut key = [0u8; MAX_KEY_LEN];
            let len = e.key.map_or(0, |k| {
                key[..k.len()].copy_from_slice(k.as_bytes());
                k.len()
            });
            *slot = kvtier_primary_event {
                kind: match e.kind {
                    EventKind::Stored => kvtier_primary_event_kind::Stored,
                    EventKind::Removed => kvtier_primary_event_kind::Removed,
                    EventKind::Cleared => kvtier_primary_event_kind::Cleared,
                },
                key_len: len,
                key,
            };
        }
        *count = n;
        *more = h.core.tier.events_queued() > 0;
        Ok(())
    })
}

/// Writes the tier's numbers to `*stats_out`.  A const call: may run
/// concurrently with other const calls on the handle.  Counters are
/// cumulative from creation and never decrease; gauges are current.  For
/// per-interval numbers (vLLM reports deltas since the previous read),
/// keep the previous `kvtier_primary_stats` and subtract field by field.
///
/// # Safety
/// `primary` must be a live handle; `stats_out` valid for writes.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn kvtier_primary_read_stats(
    primary: *const kvtier_primary,
    stats_out: *mut kvtier_primary_stats,
) -> kvtier_status {
    ffi_call!({
        let h = unsafe { enter(primary) }?;
        let out = unsafe { out_ref(stats_out, "stats_out") }?;
        *out = h.core.tier.stats().into();
        Ok(())
    })
}

/// Test support: a call on `primary` that panics inside the boundary while
/// it holds the handle exclusively, as a bug in any export would; returns
/// `KVTIER_STATUS_PANIC` and poisons the handle (NULL gives NULL_ARGUMENT).
///
/// # Safety
/// `primary` must be NULL or a live handle.
#[doc(hidden)]
pub unsafe fn panic_in_call(primary: *mut kvtier_primary) -> kvtier_status {
    ffi_call!({
        let _h = unsafe { enter_mut(primary) }?;
        panic!("deliberate panic inside a kvtier_primary call")
    })
}
