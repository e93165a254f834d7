//! `kvtier_primary`: the CPU primary tier as a C handle.
//!
//! Engines that want only a CPU tier (as vLLM uses its CPU offloading
//! manager) drive it directly: slots of a region they manage, reference
//! counts, and LRU or ARC eviction.  A request starts by name with
//! [`kvtier_primary_request_begin`], which hands out a
//! [`kvtier_request_handle`]; every later call of the request takes the
//! handle.  Keys are read in place; every output goes into caller memory
//! sized by the key count (or, for events, into memory the handle owns),
//! so no call allocates memory the caller must free.
//!
//! The primary tier is not internally synchronized: no call takes a const
//! handle, and calls on one `kvtier_primary` must not overlap (any thread
//! may make them, one at a time).

use std::ffi::c_char;

use super::boundary::{
    Castable, enter_mut, ffi_call, free_handle, in_slice, in_str, into_handle, out_ref, out_slice,
};
use super::dialect::{
    KVTIER_EVENT_CLEARED, KVTIER_EVENT_REMOVED, KVTIER_EVENT_STORED, KVTIER_LOCALITY_LOCAL,
    KVTIER_LOOKUP_HIT, KVTIER_LOOKUP_HIT_PENDING, KVTIER_LOOKUP_MISS, KVTIER_MEDIUM_CPU,
    KVTIER_MISS_ABSENT, KVTIER_MISS_NONE, kvtier_event, kvtier_event_kind, kvtier_lookup_answer,
    kvtier_request_handle, kvtier_store_completion, kvtier_store_plan,
};
use super::growth::{Grows, write_grown};
use super::key::{kvtier_key, with_keys};
use super::status::kvtier_status;
use super::store_out::{PlanOut, write_completion};
use kvtier_core::events::{Event, EventKind};
use kvtier_core::fallible;
use kvtier_core::primary::{NamedPrimary, PrimaryConfig, PrimaryLookup, StorePlan};
use kvtier_core::request::RequestId;

/// Opaque handle of one CPU primary tier.
pub struct kvtier_primary {
    _private: [u8; 0],
}

/// The tier plus reusable buffers (no allocation per call once warm).
pub(crate) struct PrimaryHandle {
    pub(crate) core: NamedPrimary,
    slots: Vec<u32>,
    plan: StorePlan,
    /// The events the latest take_events handed over: their keys are what
    /// `event_keys` points into, until the next take_events.
    events: Vec<Event>,
    event_keys: Vec<kvtier_key>,
}

impl PrimaryHandle {
    fn new(core: NamedPrimary) -> PrimaryHandle {
        PrimaryHandle {
            core,
            slots: Vec::new(),
            plan: StorePlan::default(),
            events: Vec::new(),
            event_keys: Vec::new(),
        }
    }
}

mod convert;
pub(crate) use convert::{policy_name, primary_config_of};
mod observe;
pub use observe::{kvtier_primary_read_stats, kvtier_primary_take_events};
mod stats;
pub use stats::{KVTIER_ALLOCATION_SIZE_BUCKETS, kvtier_primary_stats};

impl Castable for kvtier_primary {
    type Rust = PrimaryHandle;
    const NAME: &'static str = "primary";
}

/// Options of [`kvtier_primary_new`].  Initialize with
/// [`kvtier_primary_options_default`] (growth rule).  The same options as
/// the primary tier's in `kvtier_manager_options`, with the same defaults.
#[repr(C)]
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
    /// group by group, ascending.  Every call that takes keys (lookup,
    /// prepare_load, touch, complete_load, prepare_store, complete_store,
    /// set_positions) then refuses keys shorter than 5 bytes
    /// (`KVTIER_STATUS_INVALID_KEY`, naming the position; nothing
    /// changes).  Default false: one group.
    pub kv_groups: bool,
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
        *out = into_handle::<kvtier_primary>(PrimaryHandle::new(core));
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

/// Starts a request labelled `name` and writes its handle to
/// `*request_out`; every load, store, touch and position of the request
/// takes the handle.  Handles start at 1 and are never reused by the same
/// tier.  A name already active is `KVTIER_STATUS_DUPLICATE_REQUEST` (names
/// are unique among active requests; a finished request's name is free at
/// once).  The name is copied.  On failure `*request_out` is untouched.
/// Exclusive access to the handle.
///
/// # Safety
/// `primary` must be a live handle; `name` a NUL-terminated UTF-8 string;
/// `request_out` valid for writes.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn kvtier_primary_request_begin(
    primary: *mut kvtier_primary,
    name: *const c_char,
    request_out: *mut kvtier_request_handle,
) -> kvtier_status {
    ffi_call!({
        let mut h = unsafe { enter_mut(primary) }?;
        let name = unsafe { in_str(name, "name") }?;
        let out = unsafe { out_ref(request_out, "request_out") }?;
        *out = h.core.request_begin(name)?.0;
        Ok(())
    })
}

/// Ends `request`, committing its accesses: every key it stored, loaded or
/// offered to store that is still resident gets one access, its head most
/// recent.  Head to tail is the order in which the request first presented
/// its keys; with `kv_groups`, group by group (ascending), each group by
/// token position when all its keys have one
/// ([`kvtier_primary_set_positions`]); when every key has a position, all
/// by position.  Keys it planned and did not complete yet stay write
/// pending for it: `kvtier_primary_complete_store` with its handle still
/// completes them.  Keys it pinned with [`kvtier_primary_prepare_load`]
/// and did not release stay pinned (as in vLLM 0.33, an aborted request
/// may finish while its load is in flight): [`kvtier_primary_complete_load`]
/// with its handle still releases them, and only them.  Every other call
/// takes the handle as unknown.  A handle that is not active (never handed
/// out, or finished) is `KVTIER_STATUS_UNKNOWN_REQUEST`.  Exclusive access
/// to the handle.
///
/// # Safety
/// `primary` must be a live handle.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn kvtier_primary_request_finished(
    primary: *mut kvtier_primary,
    request: kvtier_request_handle,
) -> kvtier_status {
    ffi_call!({
        let mut h = unsafe { enter_mut(primary) }?;
        h.core.request_finished(RequestId(request))?;
        Ok(())
    })
}

/// Looks up `len` keys in order, as an engine finds a request's cached
/// prefix, and stops at the first key that is not `KVTIER_LOOKUP_HIT`:
/// `answer_out->hits` is the number of leading keys that are HIT,
/// `answer_out->stop` the answer of the key after them
/// (`KVTIER_LOOKUP_MISS`: not resident, with reason `KVTIER_MISS_ABSENT`;
/// `KVTIER_LOOKUP_HIT_PENDING`: being written, ask again later; or
/// `KVTIER_LOOKUP_HIT` when every key is a hit, `len` = 0 included), and
/// `answer_out->reason` `KVTIER_MISS_NONE` unless it is a miss;
/// `answer_out->pending` is 1 for a HIT_PENDING stop, else 0, and
/// `answer_out->end` is `hits + pending`.  The keys after the stop are not
/// looked up.  Changes nothing; takes no request.
/// The keys are read in place.  Every key is checked first: a bad one is
/// `KVTIER_STATUS_INVALID_KEY` naming its position, nothing written.
/// Exclusive access to the handle.
///
/// # Safety
/// `primary` must be a live handle; `keys` valid for `len` entries;
/// `answer_out` valid for writes.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn kvtier_primary_lookup(
    primary: *mut kvtier_primary,
    keys: *const kvtier_key,
    len: usize,
    answer_out: *mut kvtier_lookup_answer,
) -> kvtier_status {
    ffi_call!({
        let h = unsafe { enter_mut(primary) }?;
        let found = unsafe {
            with_keys(keys, len, |keys| {
                let answer = out_ref(answer_out, "answer_out")?;
                h.core.tier.check_keys(keys)?;
                Ok((answer, h.core.tier.lookup_prefix(keys)))
            })
        };
        let (answer, found) = found?;
        let (stop, reason) = match found.stop {
            PrimaryLookup::Miss => (KVTIER_LOOKUP_MISS, KVTIER_MISS_ABSENT),
            PrimaryLookup::HitPending => (KVTIER_LOOKUP_HIT_PENDING, KVTIER_MISS_NONE),
            PrimaryLookup::Hit => (KVTIER_LOOKUP_HIT, KVTIER_MISS_NONE),
        };
        let pending = usize::from(stop == KVTIER_LOOKUP_HIT_PENDING);
        *answer = kvtier_lookup_answer {
            hits: found.hits,
            stop,
            reason,
            pending,
            end: found.hits + pending,
        };
        Ok(())
    })
}

/// Pins `len` ready keys for a load by `request` and writes their slot ids,
/// in key order, into `slots_out` (room for `len` entries).  A key that is
/// absent or being written is `KVTIER_STATUS_KEY_STATE`, the message naming
/// its position; nothing changes then.  Release the pins with
/// [`kvtier_primary_complete_load`].  A request that is not active is
/// `KVTIER_STATUS_UNKNOWN_REQUEST`.  Exclusive access to the handle.
///
/// # Safety
/// `primary` must be a live handle; `keys` valid for `len` entries;
/// `slots_out` valid for `len` writes.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn kvtier_primary_prepare_load(
    primary: *mut kvtier_primary,
    request: kvtier_request_handle,
    keys: *const kvtier_key,
    len: usize,
    slots_out: *mut u32,
) -> kvtier_status {
    ffi_call!({
        let mut h = unsafe { enter_mut(primary) }?;
        let out = unsafe { out_slice(slots_out, len, "slots_out") }?;
        let h = &mut *h;
        unsafe {
            with_keys(keys, len, |keys| {
                Ok(h.core
                    .tier
                    .prepare_load(RequestId(request), keys, &mut h.slots)?)
            })
        }?;
        out.copy_from_slice(&h.slots);
        Ok(())
    })
}

/// [0.33] Gives `len` keys of active `request` their token positions:
/// `positions[i]` is the end-token position of the block of `keys[i]`
/// (block `i` of a request of 16-token blocks ends at token
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
/// Errors, nothing changed: `KVTIER_STATUS_UNKNOWN_REQUEST` (not active);
/// `KVTIER_STATUS_INVALID_KEY` for a key of 0 or more than 64 bytes, or
/// (with `kv_groups`) fewer than 5, the message naming its position;
/// `KVTIER_STATUS_NULL_ARGUMENT` if `keys` or `positions` is NULL with
/// `len` > 0; `KVTIER_STATUS_OUT_OF_MEMORY` if memory runs out.  `len` = 0 does
/// nothing.  The arrays are read during the call only; the keys are
/// copied.  Exclusive access to the handle.
///
/// # Safety
/// `primary` must be a live handle; `keys` and `positions` valid for `len`
/// entries each.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn kvtier_primary_set_positions(
    primary: *mut kvtier_primary,
    request: kvtier_request_handle,
    keys: *const kvtier_key,
    len: usize,
    positions: *const u64,
) -> kvtier_status {
    ffi_call!({
        let mut h = unsafe { enter_mut(primary) }?;
        unsafe {
            with_keys(keys, len, |keys| {
                let positions = in_slice(positions, len, "positions")?;
                Ok(h.core
                    .tier
                    .set_positions(RequestId(request), keys, positions)?)
            })
        }
    })
}

/// Marks `len` keys recently used for `request` (policy-specific; the
/// first key ends up most recent); absent keys are ignored (ARC learns
/// from keys it evicted recently).  A request that is not active is
/// `KVTIER_STATUS_UNKNOWN_REQUEST`.  Exclusive access to the handle.
///
/// # Safety
/// `primary` must be a live handle; `keys` valid for `len` entries.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn kvtier_primary_touch(
    primary: *mut kvtier_primary,
    request: kvtier_request_handle,
    keys: *const kvtier_key,
    len: usize,
) -> kvtier_status {
    ffi_call!({
        let mut h = unsafe { enter_mut(primary) }?;
        unsafe {
            with_keys(keys, len, |keys| {
                Ok(h.core.tier.touch(RequestId(request), keys)?)
            })
        }
    })
}

/// Releases the pins [`kvtier_primary_prepare_load`] took on `len` keys.  A
/// key that is absent or not pinned is `KVTIER_STATUS_KEY_STATE`, naming
/// its position; nothing changes then.
///
/// The request may have finished with keys its loads pinned still pinned
/// (an aborted request whose load is in flight, as vLLM 0.33 allows): its
/// handle then releases only those pins, a key it holds no pin of
/// (counting repeats in the batch) being `KVTIER_STATUS_KEY_STATE` with
/// nothing changed, so it never unpins another request's blocks.  An
/// active request may unpin keys it did not pin (as in vLLM); if such
/// unpins took the pin a finished request holds of a key, that request's
/// completion of the key releases nothing and still succeeds, counted in
/// `kvtier_primary_stats.spent_load_completions`.  Once its last pin is
/// released (or the tier is reset) the handle is unknown here too.  Any other handle that is not active is
/// `KVTIER_STATUS_UNKNOWN_REQUEST`.  Exclusive access to the handle.
///
/// # Safety
/// `primary` must be a live handle; `keys` valid for `len` entries.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn kvtier_primary_complete_load(
    primary: *mut kvtier_primary,
    request: kvtier_request_handle,
    keys: *const kvtier_key,
    len: usize,
) -> kvtier_status {
    ffi_call!({
        let mut h = unsafe { enter_mut(primary) }?;
        unsafe {
            with_keys(keys, len, |keys| {
                Ok(h.core.tier.complete_load(RequestId(request), keys)?)
            })
        }
    })
}

/// Plans storing `len` keys for `request`.
///
/// Keys already resident are not stored again.  If free slots are short,
/// exactly the shortfall is evicted from idle keys not named in this call;
/// if that many are not available, the call succeeds with
/// `plan_out->refused = true`, both counts 0, and no key, slot or event
/// changes.  Otherwise the keys to store enter the write-pending state,
/// written by this request; write their data, then call
/// [`kvtier_primary_complete_store`] with the same request (once or in
/// several calls).  Either way the request records, before any eviction,
/// the keys it offered to store and the ready keys it named (as vLLM 0.33
/// does): they are committed at its finish if resident then, and with
/// `"lru"` a ready key with a token position presented for the first time
/// is raised to the request's rank.
///
/// The caller fills `plan_out`'s three arrays, each with room for `len`
/// entries (at most `len` keys are stored and at most `len` evicted; NULL
/// when `len` is 0), `evicted` NULL also when it does not want the evicted
/// keys (as `kvtier_manager_prepare_store` takes it); the call writes
/// `store_indices[i]`, the position in `keys` of the i-th key to store
/// (its first occurrence, in call order), `slots[i]`, its slot, and
/// `evicted[i]`, a copy of the i-th key evicted to make room (the engine
/// drops its copies), then `store_count`, `evicted_count` (written even
/// when `evicted` is NULL) and `refused`.  On a refusal or an error the
/// arrays are untouched.  A request that is not active is
/// `KVTIER_STATUS_UNKNOWN_REQUEST`.  Exclusive access to the handle.
///
/// # Safety
/// `primary` must be a live handle; `keys` valid for `len` entries;
/// `plan_out` valid for reads and writes, its arrays valid for `len`
/// writes each (`evicted` may be NULL).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn kvtier_primary_prepare_store(
    primary: *mut kvtier_primary,
    request: kvtier_request_handle,
    keys: *const kvtier_key,
    len: usize,
    plan_out: *mut kvtier_store_plan,
) -> kvtier_status {
    ffi_call!({
        let mut h = unsafe { enter_mut(primary) }?;
        let out = unsafe { PlanOut::new(plan_out, len) }?;
        let h = &mut *h;
        unsafe {
            with_keys(keys, len, |keys| {
                let outcome = h
                    .core
                    .tier
                    .prepare_store(RequestId(request), keys, &mut h.plan)?;
                let plan = &h.plan;
                out.write(outcome, plan, |positions| {
                    plan.positions_into(keys, positions)
                });
                Ok(())
            })
        }
    })
}

/// Finishes writes of `len` keys that `request` planned: with `success`,
/// its keys still being written become readable and evictable ("stored"
/// events); without, they are dropped and their slots freed.
///
/// Only keys that this request's own `kvtier_primary_prepare_store`
/// planned, and that are still being written for it, are acted on; every
/// other key is left alone and counted: keys being written for another
/// request (`foreign`), keys already readable (`already_ready`), absent
/// keys (`ignored`: a completion after a reset).  Passing every key given
/// to prepare_store is therefore safe (the keys not this request's to
/// complete are reported, see below).  A plan may be completed in
/// several calls, a part of its keys each time.  The request may have
/// finished: its handle stays valid here until every key it planned was
/// completed (or the tier was reset); any other handle is
/// `KVTIER_STATUS_UNKNOWN_REQUEST`.
///
/// Returns `KVTIER_STATUS_OK` when every key named was acted on, and
/// `KVTIER_STATUS_KEYS_IGNORED` when one was left alone (the message says
/// how many and why), the request's own keys named completed all the
/// same: the rule of `kvtier_manager_complete_store`.  With either, writes
/// the counts to `*result_out` unless it is NULL; any other status writes
/// nothing.  Exclusive access to the handle.
///
/// # Safety
/// `primary` must be a live handle; `keys` valid for `len` entries;
/// `result_out` NULL or valid for writes.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn kvtier_primary_complete_store(
    primary: *mut kvtier_primary,
    request: kvtier_request_handle,
    keys: *const kvtier_key,
    len: usize,
    success: bool,
    result_out: *mut kvtier_store_completion,
) -> kvtier_status {
    ffi_call!({
        let mut h = unsafe { enter_mut(primary) }?;
        let answer = unsafe {
            with_keys(keys, len, |keys| {
                Ok(h.core.complete_store(RequestId(request), keys, success))
            })
        }?;
        unsafe { write_completion(answer, result_out) }
    })
}

/// Forgets every key and frees every slot, whatever its state (pins and
/// writes in flight included); slot allocation restarts at 0.  Drops queued
/// events and queues one "cleared" event.  Active requests stay active
/// (their handles stay valid); writes in flight are forgotten (their
/// completions find nothing), and finished requests' handles are
/// released (for their stores and their loads alike).  Exclusive access
/// to the handle.
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
