//! `kvtier_manager`: the tiering manager behind the C ABI.
//!
//! The handle is internally synchronized: any thread may call any function
//! on it, concurrently (calls are serialized inside), except `_free`, which
//! must be the last call.  Requests are named by NUL-terminated id strings
//! chosen at `kvtier_manager_on_new_request`.

use std::cell::RefCell;
use std::ffi::{c_char, c_void};

use super::boundary::{
    Castable, Failure, enter, ffi_call, free_handle, in_slice, in_str, out_ref, out_slice,
};
pub use super::dialect::kvtier_key_buf;
use super::growth::{Grows, read_grown};
use super::key::{kvtier_key, read_key, read_keys};
use super::tier::{
    KVTIER_EVENT_CLEARED, KVTIER_EVENT_REMOVED, KVTIER_EVENT_STORED, KVTIER_OFFLOAD_BLOCK_LEVEL,
    KVTIER_OFFLOAD_REQUEST_LEVEL, KVTIER_STAT_COUNTER, KVTIER_STAT_GAUGE, job_result_of,
    kvtier_job_result, kvtier_param, kvtier_tier_event,
};
use crate::error::Error;
use crate::events::EventKind;
use crate::key::Key;
use crate::request::{Locality, Medium, TierFilter, TierMatcher};
use crate::stats::StatKind;
use crate::tiering::backend::{StoreOutcome, StorePlan};
use crate::tiering::{LookupResult, Manager, OffloadPolicy, RequestParams, TierOptions};

/// Opaque handle of a tiering manager (internally synchronized).
#[allow(non_camel_case_types)]
pub struct kvtier_manager {
    _private: [u8; 0],
}

impl Castable for kvtier_manager {
    type Rust = Manager;
    const NAME: &'static str = "manager";
}

/// Manager lookup answer: not in any tier (or no room to promote it).
pub const KVTIER_MANAGER_LOOKUP_MISS: i32 = 0;
/// Manager lookup answer: ready in the primary tier.
pub const KVTIER_MANAGER_LOOKUP_HIT: i32 = 1;
/// Manager lookup answer: coming into the primary tier (write pending).
pub const KVTIER_MANAGER_LOOKUP_HIT_PENDING: i32 = 2;
/// Manager lookup answer: ask again later (a promotion started, a tier is busy).
pub const KVTIER_MANAGER_LOOKUP_RETRY: i32 = 3;

/// Tier index of the manager's own totals in `kvtier_manager_stat`.
pub const KVTIER_STAT_TIER_MANAGER: i32 = -1;

/// One matcher of a request's tier filter (`KVTIER_TIER_ANY` matches anything).
#[repr(C)]
#[allow(non_camel_case_types)]
#[derive(Debug, Clone, Copy)]
pub struct kvtier_tier_matcher {
    /// `KVTIER_TIER_ANY`, `KVTIER_MEDIUM_CPU` or `KVTIER_MEDIUM_STORAGE`.
    pub medium: i32,
    /// `KVTIER_TIER_ANY`, `KVTIER_LOCALITY_LOCAL` or `KVTIER_LOCALITY_REMOTE`.
    pub locality: i32,
}

/// What the engine attaches to a request.  Initialize with
/// `kvtier_request_params_default()` (growth rule).
#[repr(C)]
#[allow(non_camel_case_types)]
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

/// One merged statistic with its source.
#[repr(C)]
#[allow(non_camel_case_types)]
#[derive(Debug, Clone, Copy)]
pub struct kvtier_manager_stat {
    /// `KVTIER_STAT_TIER_MANAGER` (-1) for the manager's totals, 0 for the
    /// primary tier, 1.. for secondary tiers.
    pub tier: i32,
    /// Name of the tier ("manager", "primary", or the tier's), NUL-terminated, truncated.
    pub tier_name: [c_char; 32],
    /// Snake-case statistic name, NUL-terminated, truncated.
    pub name: [c_char; 64],
    /// `KVTIER_STAT_COUNTER` (cumulative, never decreases; histogram
    /// series too) or `KVTIER_STAT_GAUGE` (a current value).
    pub kind: i32,
    /// The value.
    pub value: f64,
}

fn copy_name<const N: usize>(dst: &mut [c_char; N], src: &str) {
    let n = src.len().min(N - 1);
    for (d, s) in dst.iter_mut().zip(src.as_bytes()[..n].iter()) {
        *d = *s as c_char;
    }
    dst[n] = 0;
}

fn matcher_of(m: &kvtier_tier_matcher, index: usize) -> Result<TierMatcher, Error> {
    let medium = match m.medium {
        0 => None,
        1 => Some(Medium::Cpu),
        2 => Some(Medium::Storage),
        v => {
            return Err(Error::InvalidArgument(format!(
                "filter matcher {index}: medium {v} is not a KVTIER_MEDIUM_* value"
            )));
        }
    };
    let locality = match m.locality {
        0 => None,
        1 => Some(Locality::Local),
        2 => Some(Locality::Remote),
        v => {
            return Err(Error::InvalidArgument(format!(
                "filter matcher {index}: locality {v} is not a KVTIER_LOCALITY_* value"
            )));
        }
    };
    Ok(TierMatcher { medium, locality })
}

thread_local! {
    /// Per-thread scratch for key and slot batches (no allocation per call).
    static SCRATCH: RefCell<(Vec<Key>, Vec<u32>, StorePlan)> = RefCell::new(Default::default());
}

/// Runs `f` with this thread's scratch buffers (fresh ones if a callback
/// nested inside another kvtier call already holds them).
fn with_scratch<R>(f: impl FnOnce(&mut Vec<Key>, &mut Vec<u32>, &mut StorePlan) -> R) -> R {
    SCRATCH.with(|cell| match cell.try_borrow_mut() {
        Ok(mut s) => {
            let (k, sl, p) = &mut *s;
            f(k, sl, p)
        }
        Err(_) => {
            let (mut k, mut sl, mut p) = Default::default();
            f(&mut k, &mut sl, &mut p)
        }
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

/// Starts request `request` (an id string, unique among active requests):
/// asks every tier for its offload policy and writes
/// `KVTIER_OFFLOAD_REQUEST_LEVEL` to `*policy_out` if any tier wants it,
/// else `KVTIER_OFFLOAD_BLOCK_LEVEL`.
///
/// `params` may be NULL (nothing attached, no filter), else initialized
/// with `kvtier_request_params_default()` (growth rule); its strings and
/// arrays are copied.  Internally synchronized.
///
/// # Safety
/// `manager` a live handle; `request` NUL-terminated; `params` NULL or
/// valid for its `struct_size`, with its arrays valid for their lengths;
/// `policy_out` valid for writes.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn kvtier_manager_on_new_request(
    manager: *mut kvtier_manager,
    request: *const c_char,
    params: *const kvtier_request_params,
    policy_out: *mut i32,
) -> super::kvtier_status {
    ffi_call!({
        let m = unsafe { enter::<kvtier_manager>(manager) }?;
        let name = unsafe { in_str(request, "request") }?;
        let policy_out = unsafe { out_ref(policy_out, "policy_out") }?;
        let mut rp = RequestParams::default();
        if !params.is_null() {
            let p = &unsafe { read_grown(params, kvtier_request_params_default()) }?;
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
        }
        *policy_out = match m.on_new_request(name, rp)? {
            OffloadPolicy::BlockLevel => KVTIER_OFFLOAD_BLOCK_LEVEL,
            OffloadPolicy::RequestLevel => KVTIER_OFFLOAD_REQUEST_LEVEL,
        };
        Ok(())
    })
}

/// Looks one key up for `request` and writes a `KVTIER_MANAGER_LOOKUP_*`
/// answer to `*result_out`: HIT and HIT_PENDING from the primary tier; on a
/// primary miss the first secondary tier that has the key starts a
/// promotion (RETRY, or HIT_PENDING with that option); MISS if no tier has
/// it or the primary tier has no room.  Internally synchronized.
///
/// # Safety
/// `manager` a live handle; `request` NUL-terminated; `key` valid with
/// `len` readable bytes; `result_out` valid for writes.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn kvtier_manager_lookup(
    manager: *mut kvtier_manager,
    request: *const c_char,
    key: *const kvtier_key,
    result_out: *mut i32,
) -> super::kvtier_status {
    ffi_call!({
        let m = unsafe { enter::<kvtier_manager>(manager) }?;
        let name = unsafe { in_str(request, "request") }?;
        let key = unsafe { key.as_ref() }.ok_or(Failure::Null("key"))?;
        let key = unsafe { read_key(key, 0) }.map_err(|f| match f {
            Failure::Null(_) => Failure::Null("key->data"),
            other => other,
        })?;
        let out = unsafe { out_ref(result_out, "result_out") }?;
        *out = match m.lookup(name, &key)? {
            LookupResult::Miss => KVTIER_MANAGER_LOOKUP_MISS,
            LookupResult::Hit => KVTIER_MANAGER_LOOKUP_HIT,
            LookupResult::HitPending => KVTIER_MANAGER_LOOKUP_HIT_PENDING,
            LookupResult::Retry => KVTIER_MANAGER_LOOKUP_RETRY,
        };
        Ok(())
    })
}

/// Pins `len` ready keys for a load to the GPU and writes their slots, in
/// key order, to `slots_out` (`slots_len` >= `len`).  Any key absent or not
/// ready is an error naming its position; nothing changes then.
/// Internally synchronized.
///
/// # Safety
/// `manager` a live handle; `request` NUL-terminated; `keys` valid for
/// `len` reads; `slots_out` valid for `slots_len` writes.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn kvtier_manager_prepare_load(
    manager: *mut kvtier_manager,
    request: *const c_char,
    keys: *const kvtier_key,
    len: usize,
    slots_out: *mut u32,
    slots_len: usize,
) -> super::kvtier_status {
    ffi_call!({
        let m = unsafe { enter::<kvtier_manager>(manager) }?;
        let name = unsafe { in_str(request, "request") }?;
        if slots_len < len {
            return Err(Error::BufferTooSmall {
                needed: len,
                given: slots_len,
            }
            .into());
        }
        let out = unsafe { out_slice(slots_out, slots_len, "slots_out") }?;
        with_scratch(|ks, slots, _| -> Result<(), Failure> {
            unsafe { read_keys(keys, len, ks) }?;
            m.prepare_load(name, ks, slots)?;
            out[..slots.len()].copy_from_slice(slots);
            Ok(())
        })
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
/// never lowers a key's rank.  At `kvtier_manager_on_request_finished`, a
/// request's keys are committed head to tail by position when all of them
/// (or, per KV group, all of the group's) have one.  Keys without a
/// position behave as if this call was never made.
///
/// Errors, nothing changed: `KVTIER_STATUS_UNKNOWN_REQUEST` (not started,
/// or finished); `KVTIER_STATUS_INVALID_KEY` for a key of 0 or more than
/// 64 bytes, or (with `kv_groups`) fewer than 5, the message naming its
/// position; `KVTIER_STATUS_NULL_ARGUMENT` if `keys` or `positions` is
/// NULL with `len` > 0; `KVTIER_STATUS_NO_SPACE` if memory runs out.
/// `len` = 0 does nothing.  The arrays are read during the call only; the
/// keys are copied.  Internally synchronized.
///
/// # Safety
/// `manager` a live handle; `request` NUL-terminated; `keys` and
/// `positions` valid for `len` reads each.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn kvtier_manager_set_positions(
    manager: *mut kvtier_manager,
    request: *const c_char,
    keys: *const kvtier_key,
    positions: *const u64,
    len: usize,
) -> super::kvtier_status {
    ffi_call!({
        let m = unsafe { enter::<kvtier_manager>(manager) }?;
        let name = unsafe { in_str(request, "request") }?;
        let positions = unsafe { in_slice(positions, len, "positions") }?;
        with_scratch(|ks, _, _| -> Result<(), Failure> {
            unsafe { read_keys(keys, len, ks) }?;
            Ok(m.set_positions(name, ks, positions)?)
        })
    })
}

/// Marks `len` keys recently used in the primary tier and every secondary
/// tier.  Internally synchronized.
///
/// # Safety
/// `manager` a live handle; `request` NUL-terminated; `keys` valid for `len` reads.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn kvtier_manager_touch(
    manager: *mut kvtier_manager,
    request: *const c_char,
    keys: *const kvtier_key,
    len: usize,
) -> super::kvtier_status {
    ffi_call!({
        let m = unsafe { enter::<kvtier_manager>(manager) }?;
        let name = unsafe { in_str(request, "request") }?;
        with_scratch(|ks, _, _| -> Result<(), Failure> {
            unsafe { read_keys(keys, len, ks) }?;
            Ok(m.touch(name, ks)?)
        })
    })
}

/// Unpins `len` keys after their load to the GPU finished.  Unpinning a key
/// that is absent or not pinned is an error; nothing changes then.
/// Internally synchronized.
///
/// # Safety
/// `manager` a live handle; `request` NUL-terminated; `keys` valid for `len` reads.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn kvtier_manager_complete_load(
    manager: *mut kvtier_manager,
    request: *const c_char,
    keys: *const kvtier_key,
    len: usize,
) -> super::kvtier_status {
    ffi_call!({
        let m = unsafe { enter::<kvtier_manager>(manager) }?;
        let name = unsafe { in_str(request, "request") }?;
        with_scratch(|ks, _, _| -> Result<(), Failure> {
            unsafe { read_keys(keys, len, ks) }?;
            Ok(m.complete_load(name, ks)?)
        })
    })
}

/// Plans a store of `len` keys into the primary tier (collecting finished
/// jobs first).  On success writes `*refused_out` (true: no room, no key,
/// slot or event changed; the request still records its offer for its
/// finish, as in vLLM 0.33), the number of keys to store to `*n_store_out`, for each the
/// position of the key in `keys` (`store_index_out`) and its slot
/// (`slots_out`) (both `out_len` >= `len`), and the number of keys evicted
/// to `*n_evicted_out`, copying the first `evicted_len` of them to
/// `evicted_out` (which may be NULL when `evicted_len` is 0; evictions are
/// also announced as events).  The keys to store are written by this
/// request: only its own `kvtier_manager_complete_store` finishes them.
/// Keys already resident are not stored again; for tiers that asked for
/// request-level offload they are cascaded now (ready) or once ready
/// (write pending).  Internally synchronized.
///
/// # Safety
/// `manager` a live handle; `request` NUL-terminated; `keys` valid for
/// `len` reads; output arrays valid for their lengths; scalar outputs valid.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn kvtier_manager_prepare_store(
    manager: *mut kvtier_manager,
    request: *const c_char,
    keys: *const kvtier_key,
    len: usize,
    store_index_out: *mut usize,
    slots_out: *mut u32,
    out_len: usize,
    n_store_out: *mut usize,
    evicted_out: *mut kvtier_key_buf,
    evicted_len: usize,
    n_evicted_out: *mut usize,
    refused_out: *mut bool,
) -> super::kvtier_status {
    ffi_call!({
        let m = unsafe { enter::<kvtier_manager>(manager) }?;
        let name = unsafe { in_str(request, "request") }?;
        if out_len < len {
            return Err(Error::BufferTooSmall {
                needed: len,
                given: out_len,
            }
            .into());
        }
        let idx_out = unsafe { out_slice(store_index_out, out_len, "store_index_out") }?;
        let slots_o = unsafe { out_slice(slots_out, out_len, "slots_out") }?;
        let ev_out = unsafe { out_slice(evicted_out, evicted_len, "evicted_out") }?;
        let n_store = unsafe { out_ref(n_store_out, "n_store_out") }?;
        let n_evicted = unsafe { out_ref(n_evicted_out, "n_evicted_out") }?;
        let refused = unsafe { out_ref(refused_out, "refused_out") }?;
        with_scratch(|ks, _, plan| -> Result<(), Failure> {
            unsafe { read_keys(keys, len, ks) }?;
            let outcome = m.prepare_store(name, ks, plan)?;
            *refused = outcome == StoreOutcome::Refused;
            // to_store is in call order: walk the keys once to find positions.
            let mut j = 0;
            for (i, k) in ks.iter().enumerate() {
                if j < plan.to_store.len() && plan.to_store[j] == *k {
                    idx_out[j] = i;
                    slots_o[j] = plan.slots[j];
                    j += 1;
                }
            }
            *n_store = j;
            *n_evicted = plan.evicted.len();
            for (dst, k) in ev_out.iter_mut().zip(plan.evicted.iter()) {
                dst.len = k.len();
                dst.bytes[..k.len()].copy_from_slice(k.as_bytes());
            }
            Ok(())
        })
    })
}

/// Finishes (part of) `request`'s store: of the `len` keys, those this
/// request's own `kvtier_manager_prepare_store` planned and that are still
/// being written for it become ready and cascade to every secondary tier
/// (success), or are dropped (failure).  Every other key is left alone and
/// counted in the primary tier's stats: a key another request or a
/// promotion is writing (`foreign_completions`), a ready key
/// (`already_ready_completions`), an absent key (`late_completions`).  So
/// passing every key given to prepare_store is safe.  A plan may be
/// completed in several calls, a part of its keys each time.  The request
/// may already be finished: it is finalized once every key it planned was
/// completed.  A completion for a request with no store in flight (after a
/// reset) is counted (`ignored_store_completions`) and ignored.
/// Internally synchronized.
///
/// # Safety
/// `manager` a live handle; `request` NUL-terminated; `keys` valid for `len` reads.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn kvtier_manager_complete_store(
    manager: *mut kvtier_manager,
    request: *const c_char,
    keys: *const kvtier_key,
    len: usize,
    success: bool,
) -> super::kvtier_status {
    ffi_call!({
        let m = unsafe { enter::<kvtier_manager>(manager) }?;
        let name = unsafe { in_str(request, "request") }?;
        with_scratch(|ks, _, _| -> Result<(), Failure> {
            unsafe { read_keys(keys, len, ks) }?;
            m.complete_store(name, ks, success)?;
            Ok(())
        })
    })
}

/// Marks `request` finished.  Tiers hear of it (and the id may be reused)
/// once it has no store in flight, no parked key and no staged promotion.
/// The primary tier commits the request's accesses at once: every key it
/// stored, loaded or offered to store that is still resident gets one
/// access, its head most recent (head to tail: first presentation order;
/// with `kv_groups`, group by group, each by token position when all its
/// keys have one; by position when every key has one; see
/// `kvtier_manager_set_positions`).  Internally synchronized.
///
/// # Safety
/// `manager` a live handle; `request` NUL-terminated.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn kvtier_manager_on_request_finished(
    manager: *mut kvtier_manager,
    request: *const c_char,
) -> super::kvtier_status {
    ffi_call!({
        let m = unsafe { enter::<kvtier_manager>(manager) }?;
        let name = unsafe { in_str(request, "request") }?;
        Ok(m.on_request_finished(name)?)
    })
}

/// Ends a scheduler step: collects finished jobs (once per step), submits
/// the promotions gathered in the step (one load job per tier and request),
/// retries parked cascades, and tells every tier.  Internally synchronized.
///
/// # Safety
/// `manager` a live handle.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn kvtier_manager_on_schedule_end(
    manager: *mut kvtier_manager,
) -> super::kvtier_status {
    ffi_call!({
        let m = unsafe { enter::<kvtier_manager>(manager) }?;
        Ok(m.on_schedule_end()?)
    })
}

/// Writes whether jobs are in flight, keys parked, promotions staged, or
/// any tier has work outstanding to `*pending_out`.  Internally synchronized.
///
/// # Safety
/// `manager` a live handle; `pending_out` valid for writes.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn kvtier_manager_has_pending_work(
    manager: *mut kvtier_manager,
    pending_out: *mut bool,
) -> super::kvtier_status {
    ffi_call!({
        let m = unsafe { enter::<kvtier_manager>(manager) }?;
        let out = unsafe { out_ref(pending_out, "pending_out") }?;
        *out = m.has_pending_work()?;
        Ok(())
    })
}

/// Moves up to `len` events (the primary tier's, then each secondary
/// tier's own, oldest first) into `out`, writes their number to
/// `*written_out` and whether more wait to `*more_out`.  Events are copies:
/// the caller owns the buffer.  Internally synchronized.
///
/// # Safety
/// `manager` a live handle; `out` valid for `len` writes (NULL if 0);
/// `written_out` and `more_out` valid for writes.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn kvtier_manager_take_events(
    manager: *mut kvtier_manager,
    out: *mut kvtier_tier_event,
    len: usize,
    written_out: *mut usize,
    more_out: *mut bool,
) -> super::kvtier_status {
    ffi_call!({
        let m = unsafe { enter::<kvtier_manager>(manager) }?;
        let buf = unsafe { out_slice(out, len, "out") }?;
        let written = unsafe { out_ref(written_out, "written_out") }?;
        let more = unsafe { out_ref(more_out, "more_out") }?;
        let (n, left) = m.take_events_with(len, |i, e| {
            let dst = &mut buf[i];
            dst.kind = match e.event.kind {
                EventKind::Stored => KVTIER_EVENT_STORED,
                EventKind::Removed => KVTIER_EVENT_REMOVED,
                EventKind::Cleared => KVTIER_EVENT_CLEARED,
            };
            dst.tier = e.tier as u32;
            match e.event.key {
                Some(k) => {
                    dst.key_len = k.len();
                    dst.key[..k.len()].copy_from_slice(k.as_bytes());
                }
                None => dst.key_len = 0,
            }
        })?;
        *written = n;
        *more = left;
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
    manager: *mut kvtier_manager,
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
    manager: *mut kvtier_manager,
) -> super::kvtier_status {
    ffi_call!({
        let m = unsafe { enter::<kvtier_manager>(manager) }?;
        Ok(m.reset_flushed()?)
    })
}

/// Writes the merged statistics (manager totals, primary tier, then each
/// secondary tier: the manager's counters for it and its own) to `out`
/// and their number to `*written_out`.  If `len` is too small, writes
/// nothing to `out`, sets `*written_out` to the number needed and returns
/// `KVTIER_STATUS_BUFFER_TOO_SMALL`.  Internally synchronized.
///
/// Counters (`KVTIER_STAT_COUNTER`) are cumulative from creation and never
/// decrease: a counter a secondary tier stops reporting keeps its last
/// value, and one it reports smaller than before keeps its previous value
/// (and counts in the tier's `tier_bugs`).  Gauges are current values.
/// For vLLM-style numbers per interval, keep the previous read and
/// subtract: `now - before` per counter.
///
/// A histogram is written as counters, one per series: for the histogram
/// `h`, `h_bucket_le_<bound>` per bucket (cumulative: observations at most
/// the bound, written in decimal with `.` as `_`; the last is
/// `h_bucket_le_inf`), then `h_sum` and `h_count`.  The primary tier's
/// `allocation_size_blocks` has buckets `le_1`, `le_4`, `le_16`, `le_64`,
/// `le_256`, `le_1024`, `le_4096`, `le_16384`, `le_65536`, `le_262144`
/// and `le_inf`.
///
/// # Safety
/// `manager` a live handle; `out` valid for `len` writes; `written_out` valid.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn kvtier_manager_stats(
    manager: *mut kvtier_manager,
    out: *mut kvtier_manager_stat,
    len: usize,
    written_out: *mut usize,
) -> super::kvtier_status {
    ffi_call!({
        let m = unsafe { enter::<kvtier_manager>(manager) }?;
        let written = unsafe { out_ref(written_out, "written_out") }?;
        let stats = m.stats()?;
        *written = stats.len();
        if len < stats.len() {
            return Err(Error::BufferTooSmall {
                needed: stats.len(),
                given: len,
            }
            .into());
        }
        let buf = unsafe { out_slice(out, len, "out") }?;
        for (dst, s) in buf.iter_mut().zip(stats.iter()) {
            dst.tier = s.tier.map_or(KVTIER_STAT_TIER_MANAGER, |t| t as i32);
            copy_name(&mut dst.tier_name, &s.tier_name);
            copy_name(&mut dst.name, &s.stat.series_name());
            dst.kind = if s.stat.kind == StatKind::Gauge {
                KVTIER_STAT_GAUGE
            } else {
                KVTIER_STAT_COUNTER
            };
            dst.value = s.stat.value;
        }
        Ok(())
    })
}

/// Takes the oldest message of the manager's error log (tier bugs such as
/// unknown job ids, failed or misbehaving tier callbacks).  Writes whether
/// there was one to `*found_out`, and the message, NUL-terminated and
/// truncated to fit, to `buf` (`len` bytes; NULL if 0); `*needed_out` gets
/// the full length plus one.  Internally synchronized.
///
/// # Safety
/// `manager` a live handle; `buf` valid for `len` writes; outputs valid.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn kvtier_manager_take_error(
    manager: *mut kvtier_manager,
    buf: *mut c_char,
    len: usize,
    needed_out: *mut usize,
    found_out: *mut bool,
) -> super::kvtier_status {
    ffi_call!({
        let m = unsafe { enter::<kvtier_manager>(manager) }?;
        let out = unsafe { out_slice(buf, len, "buf") }?;
        let needed = unsafe { out_ref(needed_out, "needed_out") }?;
        let found = unsafe { out_ref(found_out, "found_out") }?;
        match m.pop_error()? {
            None => {
                *found = false;
                *needed = 1;
                if let Some(first) = out.first_mut() {
                    *first = 0;
                }
            }
            Some(msg) => {
                *found = true;
                *needed = msg.len() + 1;
                if !out.is_empty() {
                    let n = msg.len().min(out.len() - 1);
                    for (d, s) in out.iter_mut().zip(msg.as_bytes()[..n].iter()) {
                        *d = *s as c_char;
                    }
                    out[n] = 0;
                }
            }
        }
        Ok(())
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
    manager: *mut kvtier_manager,
) -> super::kvtier_status {
    ffi_call!({
        let m = unsafe { enter::<kvtier_manager>(manager) }?;
        Ok(m.shutdown()?)
    })
}

/// Attaches a Rust tier (for [`attach_rust_tier`]; the built-in tiers are
/// added by `crate::config::add_builtin_tier`).
pub(crate) fn add_rust_tier(
    manager: *mut kvtier_manager,
    tier: Box<dyn crate::tiering::SecondaryTier>,
    opts: TierOptions,
) -> Result<usize, Failure> {
    // SAFETY: the caller passes a handle it got from C, checked here.
    let m = unsafe { enter::<kvtier_manager>(manager) }?;
    Ok(m.add_tier_with(tier, opts)?)
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
