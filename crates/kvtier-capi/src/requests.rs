//! The manager's per-request calls: a request begins with a name and gets
//! a `kvtier_request_handle`, which every later call of the request takes
//! (no name is checked or hashed per call), until it finishes.
//!
//! Every call here takes the manager `const`: the manager is internally
//! synchronized, so any thread may make any of them at any time.

use std::cell::RefCell;
use std::ffi::c_char;

use super::boundary::{Failure, enter, ffi_call, in_slice, in_str, out_ref, out_slice};
use super::dialect::{
    KVTIER_LOOKUP_HIT, KVTIER_LOOKUP_HIT_PENDING, KVTIER_LOOKUP_MISS, KVTIER_LOOKUP_RETRY,
    KVTIER_MISS_ABSENT, KVTIER_MISS_NO_ROOM, KVTIER_MISS_NONE, KVTIER_MISS_TIMED_OUT,
    kvtier_lookup_answer, kvtier_request_handle, kvtier_store_completion, kvtier_store_plan,
};
use super::key::{kvtier_key, with_keys};
use super::manager::{kvtier_manager, kvtier_request_params, read_request_params};
use super::store_out::{PlanOut, write_completion};
use super::tier::{
    KVTIER_OFFLOAD_BLOCK_LEVEL, KVTIER_OFFLOAD_REQUEST_LEVEL, kvtier_offload_policy,
};
use kvtier_core::primary::StorePlan;
use kvtier_core::request::RequestId;
use kvtier_core::tiering::{LookupAnswer, LookupResult, MissReason, OffloadPolicy};

thread_local! {
    /// Per-thread scratch for slot batches and store plans (no allocation per call).
    static SCRATCH: RefCell<(Vec<u32>, StorePlan)> = RefCell::new(Default::default());
}

/// Runs `f` with this thread's scratch buffers (fresh ones if a callback
/// nested inside another kvtier call already holds them).
fn with_scratch<R>(f: impl FnOnce(&mut Vec<u32>, &mut StorePlan) -> R) -> R {
    SCRATCH.with(|cell| match cell.try_borrow_mut() {
        Ok(mut s) => {
            let (sl, p) = &mut *s;
            f(sl, p)
        }
        Err(_) => {
            let (mut sl, mut p) = Default::default();
            f(&mut sl, &mut p)
        }
    })
}

/// Starts a request labelled `name` (NUL-terminated, unique among active
/// requests: a name in use is `KVTIER_STATUS_DUPLICATE_REQUEST`): asks
/// every tier for its offload policy.  Writes the request's handle to
/// `*request_out`, and to `*policy_out` (which may be NULL)
/// `KVTIER_OFFLOAD_REQUEST_LEVEL` if any tier wants every block of the
/// request, else `KVTIER_OFFLOAD_BLOCK_LEVEL`.
///
/// Every later call of the request takes the handle (never 0, never
/// reused by this manager); the name is only the request's label, which
/// tiers see.  Once the request is finished the handle is
/// `KVTIER_STATUS_UNKNOWN_REQUEST` (but for completing its stores and
/// loads in flight, see [`kvtier_manager_request_finished`]) and the name
/// may be used again.
/// `params` may be NULL (nothing attached, no filter); its strings and
/// arrays are copied.  Internally synchronized.
///
/// # Safety
/// `manager` a live handle; `name` NUL-terminated; `params` NULL or
/// valid, with its arrays valid for their lengths; `request_out` valid
/// for writes; `policy_out` NULL or valid for writes.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn kvtier_manager_request_begin(
    manager: *const kvtier_manager,
    name: *const c_char,
    params: *const kvtier_request_params,
    request_out: *mut kvtier_request_handle,
    policy_out: *mut kvtier_offload_policy,
) -> super::kvtier_status {
    ffi_call!({
        let m = unsafe { enter::<kvtier_manager>(manager) }?;
        let name = unsafe { in_str(name, "name") }?;
        let request_out = unsafe { out_ref(request_out, "request_out") }?;
        let rp = unsafe { read_request_params(params) }?;
        let started = m.request_begin(name, rp)?;
        *request_out = started.id.0;
        if let Some(p) = unsafe { policy_out.as_mut() } {
            *p = match started.policy {
                OffloadPolicy::BlockLevel => KVTIER_OFFLOAD_BLOCK_LEVEL,
                OffloadPolicy::RequestLevel => KVTIER_OFFLOAD_REQUEST_LEVEL,
            };
        }
        Ok(())
    })
}

/// Looks up `len` keys of `request` as a prefix and starts, in one call,
/// the promotions of the whole prefix the tiers hold.  Writes to
/// `*answer_out` how many leading keys are ready now (`hits`), how many
/// more are on their way (`pending`), and where the prefix ends (`end`:
/// the first key no tier has, else `len`; `reason` says why it ends
/// early).  The engine's pattern: while `pending` > 0, ask again next
/// step (after `kvtier_manager_schedule_end`); then load `hits` keys with
/// `kvtier_manager_prepare_load` and compute the rest.  Blocks in a
/// secondary tier come back in two steps: this one starts every
/// promotion, the next finds them ready.
///
/// After the leading hits, the scan goes on past keys that are not ready
/// (being written, or in a tier that asked to be asked again) and past
/// keys the primary tier lacks and a secondary tier has (the first that
/// has it, in order, among those the request's filter allows), whose
/// promotions it starts in key order, and ends at the first key no tier
/// has (`KVTIER_MISS_ABSENT`; also when promotions are held after a reset).
/// If the primary tier cannot take a promotion (no slot free of pins, or
/// its admission threshold), the prefix ends there
/// (`KVTIER_MISS_NO_ROOM`) and no later key is promoted.  `stop` is the
/// answer key `hits` would get from `kvtier_manager_lookup_per_key`, or
/// MISS where the prefix ends at it (a waiting request's prefix that found
/// no room earlier, or the bound).
///
/// Progress (`progress_hold`, on by default): before it starts
/// promotions, the lookup holds the prefix's hits, so its own promotions
/// never evict a hit it reports; blocks promoted for a waiting request are
/// held when they arrive.  Holds end at the request's next
/// `kvtier_manager_prepare_load` (its pins take over the blocks it loads),
/// its finish, a reset, or the wait bound counted from its first hold
/// still in place (whether or not it still waits).  While it waits, its prefix
/// never grows past a key that found no room.  After the wait bound
/// (`progress_wait_steps`, `progress_wait_ms`) the request's next lookup
/// answers the first key not ready MISS, `KVTIER_MISS_TIMED_OUT`: every
/// request's wait ends.
///
/// The keys are read in place during the call.  Errors, nothing looked
/// up: `KVTIER_STATUS_UNKNOWN_REQUEST`; `KVTIER_STATUS_INVALID_KEY` for a
/// key of 0 or more than 64 bytes (its position named);
/// `KVTIER_STATUS_NULL_ARGUMENT` for `keys` NULL with `len` > 0.  `len` 0
/// answers 0 hits, stop HIT.  Internally synchronized.
///
/// # Safety
/// `manager` a live handle; `keys` valid for `len` reads, each naming
/// `len` readable bytes; `answer_out` valid for writes.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn kvtier_manager_lookup(
    manager: *const kvtier_manager,
    request: kvtier_request_handle,
    keys: *const kvtier_key,
    len: usize,
    answer_out: *mut kvtier_lookup_answer,
) -> super::kvtier_status {
    unsafe { lookup(LookupKind::Prefix, manager, request, keys, len, answer_out) }
}

/// vLLM 0.33's per-key lookups, batched: looks up `len` keys of `request`
/// one at a time, in order, and stops at the first that is not HIT, with
/// exactly the answers, promotions and counters of `len` calls of vLLM's
/// `lookup` up to that key.  `*answer_out`: `hits` leading keys are HIT;
/// `stop` is key `hits`'s answer (HIT when every key is); `pending` is 1
/// when it is HIT_PENDING or RETRY, and `end` is `hits + pending`.
///
/// Each key answers HIT (ready in the primary tier) or HIT_PENDING (being
/// written into it); on a primary miss, the first secondary tier that has
/// the key starts a promotion (answered `KVTIER_LOOKUP_RETRY`, or
/// `KVTIER_LOOKUP_HIT_PENDING` with that option); RETRY also if a tier
/// could not answer yet; else MISS, with `reason` `KVTIER_MISS_NO_ROOM`
/// (a tier has it, the primary tier did not take it),
/// `KVTIER_MISS_TIMED_OUT` (the request waited past the bound) or
/// `KVTIER_MISS_ABSENT`.  The leading hits are not held: a promotion the
/// stop key started may evict one of them.  For the layer that mirrors
/// vLLM's connector (which calls it one key at a time and scans on past
/// RETRY) and for checks against vLLM; an engine of its own uses
/// `kvtier_manager_lookup`, which starts a whole prefix's promotions at
/// once.  Errors and safety as `kvtier_manager_lookup`.
///
/// # Safety
/// `manager` a live handle; `keys` valid for `len` reads, each naming
/// `len` readable bytes; `answer_out` valid for writes.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn kvtier_manager_lookup_per_key(
    manager: *const kvtier_manager,
    request: kvtier_request_handle,
    keys: *const kvtier_key,
    len: usize,
    answer_out: *mut kvtier_lookup_answer,
) -> super::kvtier_status {
    unsafe { lookup(LookupKind::PerKey, manager, request, keys, len, answer_out) }
}

/// Which of the manager's two batched lookups a call is.
#[derive(Clone, Copy)]
enum LookupKind {
    /// `kvtier_manager_lookup`: the whole prefix.
    Prefix,
    /// `kvtier_manager_lookup_per_key`: vLLM's answers, key by key.
    PerKey,
}

/// A lookup of `kind`, the body of both lookup exports.
///
/// # Safety
/// As the exports'.
unsafe fn lookup(
    kind: LookupKind,
    manager: *const kvtier_manager,
    request: kvtier_request_handle,
    keys: *const kvtier_key,
    len: usize,
    answer_out: *mut kvtier_lookup_answer,
) -> super::kvtier_status {
    ffi_call!({
        let m = unsafe { enter::<kvtier_manager>(manager) }?;
        unsafe {
            with_keys(keys, len, |keys| {
                let out = out_ref(answer_out, "answer_out")?;
                let a = match kind {
                    LookupKind::Prefix => m.lookup_prefix(RequestId(request), keys.into()),
                    LookupKind::PerKey => m.lookup_per_key(RequestId(request), keys.into()),
                }?;
                *out = lookup_answer(&a);
                Ok(())
            })
        }
    })
}

/// The C form of a manager's lookup answer.
fn lookup_answer(a: &LookupAnswer) -> kvtier_lookup_answer {
    kvtier_lookup_answer {
        hits: a.hits,
        stop: match a.stop {
            LookupResult::Miss => KVTIER_LOOKUP_MISS,
            LookupResult::Hit => KVTIER_LOOKUP_HIT,
            LookupResult::HitPending => KVTIER_LOOKUP_HIT_PENDING,
            LookupResult::Retry => KVTIER_LOOKUP_RETRY,
        },
        reason: match a.reason {
            None => KVTIER_MISS_NONE,
            Some(MissReason::Absent) => KVTIER_MISS_ABSENT,
            Some(MissReason::NoRoom) => KVTIER_MISS_NO_ROOM,
            Some(MissReason::TimedOut) => KVTIER_MISS_TIMED_OUT,
        },
        pending: a.pending,
        end: a.end,
    }
}

/// Pins `len` ready keys of `request` for a load to the GPU and writes
/// their slots, in key order, to `slots_out` (room for `len`).  Any key
/// absent or not ready is an error naming its position; nothing changes
/// then.  Internally synchronized.
///
/// # Safety
/// `manager` a live handle; `keys` valid for `len` reads; `slots_out`
/// valid for `len` writes.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn kvtier_manager_prepare_load(
    manager: *const kvtier_manager,
    request: kvtier_request_handle,
    keys: *const kvtier_key,
    len: usize,
    slots_out: *mut u32,
) -> super::kvtier_status {
    ffi_call!({
        let m = unsafe { enter::<kvtier_manager>(manager) }?;
        let out = unsafe { out_slice(slots_out, len, "slots_out") }?;
        unsafe {
            with_keys(keys, len, |keys| {
                with_scratch(|slots, _| -> Result<(), Failure> {
                    m.prepare_load(RequestId(request), keys.into(), slots)?;
                    out[..slots.len()].copy_from_slice(slots);
                    Ok(())
                })
            })
        }
    })
}

/// [0.33] Gives `len` keys of active `request` their token positions in
/// the primary tier: `positions[i]` is the end-token position of the block
/// of `keys[i]` (block `i` of a request of 16-token blocks ends at token
/// `16 * (i + 1)`).  A later position replaces an earlier one for the same
/// key.  Call it before the request's first call or between its calls
/// (vLLM's scheduler records a position for each key it will present);
/// positions are read when used and kept until the request finishes (a
/// reset keeps them).
///
/// What positions change: with `"lru"`, a key with a position that the
/// request stores, or first presents while resident (a load, or a ready
/// key offered to prepare_store), ranks within the request's one rank,
/// the tail evicted before the head, until the request finishes; an access
/// never lowers a key's rank.  At `kvtier_manager_request_finished`, a
/// request's keys are committed head to tail by position when all of them
/// (or, per KV group, all of the group's) have one.  Keys without a
/// position behave as if this call was never made.
///
/// Errors, nothing changed: `KVTIER_STATUS_UNKNOWN_REQUEST` (unknown or
/// finished handle); `KVTIER_STATUS_INVALID_KEY` for a key of 0 or more
/// than 64 bytes, or (with `kv_groups`) fewer than 5, the message naming
/// its position; `KVTIER_STATUS_NULL_ARGUMENT` if `keys` or `positions` is
/// NULL with `len` > 0; `KVTIER_STATUS_OUT_OF_MEMORY` if memory runs out.
/// `len` = 0 does nothing.  The arrays are read during the call only; the
/// keys are copied.  Internally synchronized.
///
/// # Safety
/// `manager` a live handle; `keys` and `positions` valid for `len` reads each.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn kvtier_manager_set_positions(
    manager: *const kvtier_manager,
    request: kvtier_request_handle,
    keys: *const kvtier_key,
    len: usize,
    positions: *const u64,
) -> super::kvtier_status {
    ffi_call!({
        let m = unsafe { enter::<kvtier_manager>(manager) }?;
        let positions = unsafe { in_slice(positions, len, "positions") }?;
        unsafe {
            with_keys(keys, len, |keys| {
                Ok(m.set_positions(RequestId(request), keys.into(), positions)?)
            })
        }
    })
}

/// Marks `len` keys of `request` recently used in the primary tier and
/// every secondary tier.  Internally synchronized.
///
/// # Safety
/// `manager` a live handle; `keys` valid for `len` reads.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn kvtier_manager_touch(
    manager: *const kvtier_manager,
    request: kvtier_request_handle,
    keys: *const kvtier_key,
    len: usize,
) -> super::kvtier_status {
    ffi_call!({
        let m = unsafe { enter::<kvtier_manager>(manager) }?;
        unsafe {
            with_keys(keys, len, |keys| {
                Ok(m.touch(RequestId(request), keys.into())?)
            })
        }
    })
}

/// Unpins `len` keys of `request` after their load to the GPU finished.
/// Unpinning a key that is absent or not pinned is
/// `KVTIER_STATUS_KEY_STATE`, naming its position; nothing changes then.
///
/// The request may have finished with keys its
/// `kvtier_manager_prepare_load` pinned still pinned (an aborted request
/// whose load is in flight, as vLLM 0.33 allows): its handle then
/// releases only those pins, a key it holds no pin of (counting repeats in
/// the batch) being `KVTIER_STATUS_KEY_STATE` with nothing changed, so it
/// never unpins another request's blocks.  An active request may unpin
/// keys it did not pin (as in vLLM); if such unpins took the pin a
/// finished request holds of a key, that request's completion of the key
/// releases nothing and still succeeds, counted in the primary tier's
/// `spent_load_completions`.  Once its last pin is released (or the cache
/// is reset) the handle is `KVTIER_STATUS_UNKNOWN_REQUEST` here too.  Internally synchronized.
///
/// # Safety
/// `manager` a live handle; `keys` valid for `len` reads.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn kvtier_manager_complete_load(
    manager: *const kvtier_manager,
    request: kvtier_request_handle,
    keys: *const kvtier_key,
    len: usize,
) -> super::kvtier_status {
    ffi_call!({
        let m = unsafe { enter::<kvtier_manager>(manager) }?;
        unsafe {
            with_keys(keys, len, |keys| {
                Ok(m.complete_load(RequestId(request), keys.into())?)
            })
        }
    })
}

/// Plans a store of `len` keys of `request` into the primary tier
/// (collecting finished jobs first) and writes the plan to `*plan_out`:
/// `refused` (true: no room, no key, slot or event changed; the request
/// still records its offer for its finish, as in vLLM 0.33); the keys to
/// write now, as their positions in `keys` (`store_indices`) and their
/// slots (`slots`), `store_count` of each; and the keys evicted to make
/// room, `evicted_count` of them (at most `len`), copied to `evicted`
/// unless it is NULL (evictions are also announced as events).  The
/// caller provides `store_indices` and `slots` with room for `len`
/// entries each (NULL only when `len` is 0), and `evicted` with room for
/// `len`, or NULL when it does not want the evicted keys (their count is
/// written all the same): the primary tier's `kvtier_primary_prepare_store`
/// takes the plan by the same rule.
///
/// The keys to write are write pending for this request: only its own
/// `kvtier_manager_complete_store` finishes them.  Keys already resident
/// are not stored again; for tiers that asked for request-level offload
/// they are cascaded now (ready) or once ready (write pending).  On an
/// error nothing is planned and `*plan_out` is left as it was.
/// Internally synchronized.
///
/// # Safety
/// `manager` a live handle; `keys` valid for `len` reads; `plan_out`
/// valid for reads and writes, its arrays valid for `len` writes each
/// (`evicted` may be NULL).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn kvtier_manager_prepare_store(
    manager: *const kvtier_manager,
    request: kvtier_request_handle,
    keys: *const kvtier_key,
    len: usize,
    plan_out: *mut kvtier_store_plan,
) -> super::kvtier_status {
    ffi_call!({
        let m = unsafe { enter::<kvtier_manager>(manager) }?;
        let out = unsafe { PlanOut::new(plan_out, len) }?;
        unsafe {
            with_keys(keys, len, |keys| {
                with_scratch(|_, plan| -> Result<(), Failure> {
                    let outcome = m.prepare_store(RequestId(request), keys.into(), plan)?;
                    out.write(outcome, plan, |positions| {
                        plan.positions_into(keys, positions)
                    });
                    Ok(())
                })
            })
        }
    })
}

/// Finishes (part of) `request`'s store: of the `len` keys, those this
/// request's own `kvtier_manager_prepare_store` planned and that are still
/// being written for it become ready and cascade to every secondary tier
/// (success), or are dropped (failure).  Every other key is left alone and
/// counted in the primary tier's stats: a key another request or a
/// promotion is writing (`foreign_completions`), a ready key
/// (`already_ready_completions`), an absent key (`late_completions`).  So
/// passing every key given to prepare_store is safe (the keys not this
/// request's to complete are reported, see below).  A plan may be
/// completed in several calls, a part of its keys each time.  The request
/// may already be finished: it is finalized once every key it planned was
/// completed.  A completion for a request with no store in flight (after a
/// reset, or once every key it planned was completed) is counted
/// (`ignored_store_completions`) and ignored.
///
/// Returns `KVTIER_STATUS_OK` when every key named was acted on, and
/// `KVTIER_STATUS_KEYS_IGNORED` when a key named was left alone, every one
/// being left alone when the request had no store in flight (the message
/// says how many and why): the request's own keys named were completed
/// all the same, so the engine treats it as a mistake of its own made
/// visible, not as a failed call.  `len` 0 is OK.
/// With either, unless `result_out` is NULL, writes what happened to the
/// keys to it: `ready`, `dropped`, and the keys left alone (`ignored`,
/// `foreign`, `already_ready`); all 0 when no store was in flight.  Any
/// other status writes nothing.  Internally synchronized.
///
/// # Safety
/// `manager` a live handle; `keys` valid for `len` reads; `result_out`
/// NULL or valid for writes.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn kvtier_manager_complete_store(
    manager: *const kvtier_manager,
    request: kvtier_request_handle,
    keys: *const kvtier_key,
    len: usize,
    success: bool,
    result_out: *mut kvtier_store_completion,
) -> super::kvtier_status {
    ffi_call!({
        let m = unsafe { enter::<kvtier_manager>(manager) }?;
        unsafe {
            with_keys(keys, len, |keys| {
                let answer = m.complete_store(RequestId(request), keys.into(), success);
                write_completion(answer, result_out)
            })
        }
    })
}

/// Marks `request` finished: its handle is unknown to every later call
/// (`KVTIER_STATUS_UNKNOWN_REQUEST`) except `kvtier_manager_complete_store`,
/// which still completes its stores in flight, and
/// `kvtier_manager_complete_load`, which still releases the pins its
/// loads hold (those alone; an aborted request may finish while its load
/// is in flight).  Tiers hear of it (and the name may be reused) once it
/// has no store in flight, no parked key and no staged promotion, whatever
/// its loads.  The primary tier commits the request's accesses
/// at once: every key it stored, loaded or offered to store that is still
/// resident gets one access, its head most recent (head to tail: first
/// presentation order; with `kv_groups`, group by group, each by token
/// position when all its keys have one; by position when every key has
/// one; see `kvtier_manager_set_positions`).  Internally synchronized.
///
/// # Safety
/// `manager` a live handle.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn kvtier_manager_request_finished(
    manager: *const kvtier_manager,
    request: kvtier_request_handle,
) -> super::kvtier_status {
    ffi_call!({
        let m = unsafe { enter::<kvtier_manager>(manager) }?;
        Ok(m.request_finished(RequestId(request))?)
    })
}

/// Ends a scheduler step: collects finished jobs (once per step), submits
/// the promotions gathered in the step (one load job per tier and request),
/// retries parked cascades, and tells every tier.  Internally synchronized.
///
/// # Safety
/// `manager` a live handle.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn kvtier_manager_schedule_end(
    manager: *const kvtier_manager,
) -> super::kvtier_status {
    ffi_call!({
        let m = unsafe { enter::<kvtier_manager>(manager) }?;
        Ok(m.schedule_end()?)
    })
}
