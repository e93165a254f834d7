//! What engines watch a manager with: its statistics (a typed struct of
//! its own counters, name/value pairs per tier, Prometheus text), cache
//! events pushed to a callback for KV-aware routers (drained ones:
//! `events.rs`), the error log, and a wake-up descriptor for idle loops.

use std::ffi::{c_char, c_int, c_void};

use super::boundary::{Failure, enter, ffi_call, out_ref, out_slice, write_text};
use super::dialect::{
    KVTIER_EVENT_CLEARED, KVTIER_EVENT_REMOVED, KVTIER_EVENT_STORED, KVTIER_LOCALITY_ANY,
    KVTIER_LOCALITY_LOCAL, KVTIER_LOCALITY_REMOTE, KVTIER_MEDIUM_ANY, KVTIER_MEDIUM_CPU,
    KVTIER_MEDIUM_STORAGE, kvtier_event, kvtier_event_kind, kvtier_locality, kvtier_medium,
};
use super::growth::{Grows, write_grown};
use super::key::kvtier_key;
use super::manager::kvtier_manager;
use super::tier::{KVTIER_STAT_COUNTER, KVTIER_STAT_GAUGE, kvtier_tier_stat};
use kvtier_core::error::Error;
use kvtier_core::events::EventKind;
use kvtier_core::request::{Locality, Medium};
use kvtier_core::stats::StatKind;
use kvtier_core::tiering::{EventBatch, ManagerStats};

/// The manager's own statistics, as `kvtier_manager_read_stats` writes
/// them (each tier's are read with `kvtier_manager_read_tier_stats`).
/// Counters are cumulative from the manager's creation and never decrease,
/// resets included: for numbers per interval, keep the previous read and
/// subtract.  Gauges are current values.  Set `struct_size` to
/// `sizeof(kvtier_manager_stats)` before the call.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct kvtier_manager_stats {
    /// `sizeof(kvtier_manager_stats)` as the caller was compiled with
    /// (the growth rule: only the fields inside it are written).
    pub struct_size: usize,
    /// Counter: keys looked up.
    pub lookups: u64,
    /// Counter: lookups the primary tier answered HIT.
    pub primary_hits: u64,
    /// Counter: lookups the primary tier answered HIT_PENDING.
    pub primary_hit_pending: u64,
    /// Counter: promotions started (a slot reserved, a load staged).
    pub promotions_started: u64,
    /// Counter: promotions refused for want of a free primary slot.
    pub allocation_failures: u64,
    /// Counter: promotions the primary tier's admission threshold did not admit.
    pub promotions_not_admitted: u64,
    /// Counter: lookups answered MISS without asking the secondary tiers
    /// (promotions held after a reset).
    pub held_misses: u64,
    /// Counter: lookups answered MISS with `KVTIER_MISS_ABSENT`.
    pub misses_absent: u64,
    /// Counter: lookups answered MISS with `KVTIER_MISS_NO_ROOM`.
    pub misses_no_room: u64,
    /// Counter: stores refused as a whole (no room).
    pub store_refusals: u64,
    /// Counter: store completions of a request with no store in flight.
    pub ignored_store_completions: u64,
    /// Counter: keys of request-level cascades parked until written.
    pub parked_keys: u64,
    /// Counter: parked keys dropped because their write failed.
    pub parked_keys_dropped: u64,
    /// Counter: jobs that finished after a reset orphaned them.
    pub stale_completions: u64,
    /// Counter: misbehaviours of secondary tiers (all tiers together).
    pub tier_bugs: u64,
    /// Counter: internal errors (logged; never expected).
    pub internal_errors: u64,
    /// Counter: cache resets.
    pub resets: u64,
    /// Gauge: jobs submitted to secondary tiers and not yet finished.
    pub jobs_in_flight: u64,
    /// Gauge: requests started and not yet finalized.
    pub active_requests: u64,
    /// Gauge: 1 while promotions are held after a reset, else 0.
    pub promotions_held: u64,
    /// Gauge: events waiting to be taken.
    pub events_queued: u64,
    /// Counter: lookups answered MISS with `KVTIER_MISS_TIMED_OUT` (the
    /// request's wait for blocks on their way passed its bound).  Since 0.3.
    pub misses_timed_out: u64,
    /// Counter: waits of requests that passed the bound
    /// (`progress_wait_steps` or `progress_wait_ms` of
    /// `kvtier_manager_options`): their holds were released.  Since 0.3.
    pub wait_timeouts: u64,
    /// Counter: requests the manager let go (after
    /// `kvtier_manager_request_finished`, once no store of theirs is in
    /// flight); each is counted once, then, in this and the `request_*`
    /// counters below.  Since 0.3.
    pub requests_finished: u64,
    /// Counter: blocks finished requests asked for: per request, the keys
    /// of its largest lookup (per-key lookups: those of one step
    /// together).  Since 0.3.
    pub request_blocks_asked: u64,
    /// Counter: blocks finished requests loaded that were already in the
    /// primary tier (not promoted for them); each secondary tier's
    /// `request_blocks_served` statistic counts those promoted for them
    /// from it.  Since 0.3.
    pub request_blocks_served_primary: u64,
    /// Counter: blocks finished requests asked for and did not load (per
    /// request, asked minus loaded, at least 0): the engine computed them.
    /// Since 0.3.
    pub request_blocks_recomputed: u64,
    /// Counter: steps (`kvtier_manager_schedule_end` calls) finished
    /// requests spent waiting for blocks on their way.  Since 0.3.
    pub request_wait_steps: u64,
    /// Counter: blocks `kvtier_manager_drop_blocks` removed, all tiers
    /// together.  Since 0.3.
    pub dropped_blocks: u64,
    /// Gauge: pin sets (`kvtier_manager_pin_set`).  Since 0.3.
    pub pin_sets: u64,
    /// Gauge: blocks pin sets hold in the primary tier (distinct keys).
    /// Since 0.3.
    pub pinned_blocks_primary: u64,
    /// Gauge: their bytes (blocks × `block_bytes`; 0 when unknown).  Since 0.3.
    pub pinned_bytes_primary: u64,
}

impl Grows for kvtier_manager_stats {
    const NAME: &'static str = "kvtier_manager_stats";
    /// The 0.2 layout ended with `events_queued`.
    const FIRST_LAYOUT_SIZE: usize = std::mem::offset_of!(Self, misses_timed_out);
}

impl From<&ManagerStats> for kvtier_manager_stats {
    fn from(s: &ManagerStats) -> Self {
        kvtier_manager_stats {
            struct_size: std::mem::size_of::<Self>(),
            lookups: s.lookups,
            primary_hits: s.primary_hits,
            primary_hit_pending: s.primary_hit_pending,
            promotions_started: s.promotions_started,
            allocation_failures: s.allocation_failures,
            promotions_not_admitted: s.promotions_not_admitted,
            held_misses: s.held_misses,
            misses_absent: s.misses_absent,
            misses_no_room: s.misses_no_room,
            store_refusals: s.store_refusals,
            ignored_store_completions: s.ignored_store_completions,
            parked_keys: s.parked_keys,
            parked_keys_dropped: s.parked_keys_dropped,
            stale_completions: s.stale_completions,
            tier_bugs: s.tier_bugs,
            internal_errors: s.internal_errors,
            resets: s.resets,
            jobs_in_flight: s.jobs_in_flight,
            active_requests: s.active_requests,
            promotions_held: s.promotions_held,
            events_queued: s.events_queued,
            misses_timed_out: s.misses_timed_out,
            wait_timeouts: s.wait_timeouts,
            requests_finished: s.requests_finished,
            request_blocks_asked: s.request_blocks_asked,
            request_blocks_served_primary: s.request_blocks_served_primary,
            request_blocks_recomputed: s.request_blocks_recomputed,
            request_wait_steps: s.request_wait_steps,
            dropped_blocks: s.dropped_blocks,
            pin_sets: s.pin_sets,
            pinned_blocks_primary: s.pinned_blocks_primary,
            pinned_bytes_primary: s.pinned_bytes_primary,
        }
    }
}

/// Writes the manager's own statistics to `*stats_out` (under the growth
/// rule: set `stats_out->struct_size` first; a size this library does
/// not know is `KVTIER_STATUS_INVALID_ARGUMENT`, nothing written).  The
/// names of every statistic, the manager's and each tier's, are listed in
/// the project's docs/statistics.md.  Internally synchronized.
///
/// # Safety
/// `manager` a live handle; `stats_out` valid for reads and writes of its
/// own `struct_size` bytes.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn kvtier_manager_read_stats(
    manager: *const kvtier_manager,
    stats_out: *mut kvtier_manager_stats,
) -> super::kvtier_status {
    ffi_call!({
        let m = unsafe { enter::<kvtier_manager>(manager) }?;
        if stats_out.is_null() {
            return Err(Failure::Null("stats_out"));
        }
        let stats = kvtier_manager_stats::from(&m.manager_stats()?);
        unsafe { write_grown(stats_out, &stats, "stats_out") }
    })
}

/// Copies `src` into the fixed C array `dst`, NUL-terminated, cut short
/// to fit (at a character boundary).
fn copy_name<const N: usize>(dst: &mut [c_char; N], src: &str) {
    let mut n = src.len().min(N - 1);
    while !src.is_char_boundary(n) {
        n -= 1;
    }
    for (d, s) in dst.iter_mut().zip(src.as_bytes()[..n].iter()) {
        *d = *s as c_char;
    }
    dst[n] = 0;
}

/// Writes the statistics of tier `tier` (0 the primary tier, 1.. the
/// secondary tiers in the order added) to `stats_out` and their number to
/// `*written_out`: for a secondary tier, the manager's counters for it,
/// then the tier's own.  If `capacity` is too small, writes nothing to
/// `stats_out`, sets `*written_out` to the number needed and returns
/// `KVTIER_STATUS_BUFFER_TOO_SMALL` (a capacity of 0 asks for it).  A tier
/// that does not exist is `KVTIER_STATUS_INVALID_ARGUMENT`.  Names are
/// snake case, NUL-terminated (every built-in name fits; a longer name a
/// tier reports is cut short), listed in the project's docs/statistics.md.
/// Internally synchronized.
///
/// Counters (`KVTIER_STAT_COUNTER`) are cumulative from creation and never
/// decrease: a counter a secondary tier stops reporting keeps its last
/// value, and one it reports smaller than before keeps its previous value
/// (and counts in the tier's `tier_bugs`).  Gauges are current values.
/// For numbers per interval, keep the previous read and subtract.
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
/// `manager` a live handle; `stats_out` valid for `capacity` writes (NULL
/// if 0); `written_out` valid for writes.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn kvtier_manager_read_tier_stats(
    manager: *const kvtier_manager,
    tier: usize,
    stats_out: *mut kvtier_tier_stat,
    capacity: usize,
    written_out: *mut usize,
) -> super::kvtier_status {
    ffi_call!({
        let m = unsafe { enter::<kvtier_manager>(manager) }?;
        let buf = unsafe { out_slice(stats_out, capacity, "stats_out") }?;
        let written = unsafe { out_ref(written_out, "written_out") }?;
        let stats = m.tier_stats(tier)?;
        *written = stats.len();
        if capacity < stats.len() {
            return Err(Error::BufferTooSmall {
                needed: stats.len(),
                given: capacity,
            }
            .into());
        }
        for (dst, s) in buf.iter_mut().zip(stats.iter()) {
            copy_name(&mut dst.name, &s.series_name());
            dst.kind = if s.kind == StatKind::Gauge {
                KVTIER_STAT_GAUGE
            } else {
                KVTIER_STAT_COUNTER
            };
            dst.value = s.value;
        }
        Ok(())
    })
}

/// Writes the manager's statistics (its own, the primary tier's, and each
/// secondary tier's) in the Prometheus text exposition format (version
/// 0.0.4), NUL-terminated, to `text_out`: every family with `# HELP` and
/// `# TYPE`, named in base units; the manager's as `kvtier_manager_*`
/// without a `tier` label, each tier's labelled `tier` and `medium`; what
/// a C tier's own `stats` callback reports as `kvtier_custom_<name>`.  The
/// project's docs/metrics.md lists every family.  Counters and histograms
/// are cumulative and never go back; gauges are current values.
///
/// The buffer idiom: when the text and its NUL fit in `capacity` bytes,
/// writes them and sets `*written_out` to the text's length plus one;
/// otherwise writes nothing to `text_out`, sets `*written_out` to the
/// size needed and returns `KVTIER_STATUS_BUFFER_TOO_SMALL` (call again
/// with a larger buffer; the values may have changed by then, so leave
/// some room).  `text_out` may be NULL when `capacity` is 0.  Internally
/// synchronized: any thread may call it.
///
/// # Safety
/// `manager` a live handle; `text_out` valid for `capacity` writes;
/// `written_out` valid for writes.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn kvtier_manager_metrics_prometheus(
    manager: *const kvtier_manager,
    text_out: *mut c_char,
    capacity: usize,
    written_out: *mut usize,
) -> super::kvtier_status {
    ffi_call!({
        let m = unsafe { enter::<kvtier_manager>(manager) }?;
        let out = unsafe { out_slice(text_out.cast::<u8>(), capacity, "text_out") }?;
        let written = unsafe { out_ref(written_out, "written_out") }?;
        write_text(&m.prometheus_text()?, out, written)
    })
}

/// Takes the oldest message of the manager's error log (tier bugs such as
/// unknown job ids, failed or misbehaving tier callbacks) under the buffer
/// idiom: when it fits in `capacity` bytes with its NUL, writes it to
/// `message_out`, removes it from the log and sets `*written_out` to its
/// length plus one; when it does not fit, writes nothing, keeps it in the
/// log, sets `*written_out` to the size needed and returns
/// `KVTIER_STATUS_BUFFER_TOO_SMALL`.  An empty log sets `*written_out` to
/// 0 (no message) and returns `KVTIER_STATUS_OK`.  `message_out` may be
/// NULL when `capacity` is 0.  Internally synchronized.
///
/// # Safety
/// `manager` a live handle; `message_out` valid for `capacity` writes;
/// `written_out` valid for writes.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn kvtier_manager_take_error(
    manager: *const kvtier_manager,
    message_out: *mut c_char,
    capacity: usize,
    written_out: *mut usize,
) -> super::kvtier_status {
    ffi_call!({
        let m = unsafe { enter::<kvtier_manager>(manager) }?;
        let out = unsafe { out_slice(message_out.cast::<u8>(), capacity, "message_out") }?;
        let written = unsafe { out_ref(written_out, "written_out") }?;
        let taken = m.take_error_if_dyn(&mut |message: &str| {
            let needed = message.len() + 1;
            if needed > out.len() {
                return (false, needed);
            }
            out[..message.len()].copy_from_slice(message.as_bytes());
            out[message.len()] = 0;
            (true, needed)
        })?;
        let Some(needed) = taken else {
            *written = 0;
            return Ok(());
        };
        *written = needed;
        if needed > capacity {
            return Err(Error::BufferTooSmall {
                needed,
                given: capacity,
            }
            .into());
        }
        Ok(())
    })
}

pub(super) fn event_kind(kind: EventKind) -> kvtier_event_kind {
    match kind {
        EventKind::Stored => KVTIER_EVENT_STORED,
        EventKind::Removed => KVTIER_EVENT_REMOVED,
        EventKind::Cleared => KVTIER_EVENT_CLEARED,
    }
}

pub(super) fn medium_value(medium: Option<Medium>) -> kvtier_medium {
    match medium {
        None => KVTIER_MEDIUM_ANY,
        Some(Medium::Cpu) => KVTIER_MEDIUM_CPU,
        Some(Medium::Storage) => KVTIER_MEDIUM_STORAGE,
    }
}

pub(super) fn locality_value(locality: Option<Locality>) -> kvtier_locality {
    match locality {
        None => KVTIER_LOCALITY_ANY,
        Some(Locality::Local) => KVTIER_LOCALITY_LOCAL,
        Some(Locality::Remote) => KVTIER_LOCALITY_REMOTE,
    }
}

/// Receives one event: consecutive events of one tier and kind (see
/// `kvtier_event`), whose keys are valid during the call only.  Called at
/// the end of the manager call that produced the events, on that call's
/// thread, with the manager's lock held: it must not call the manager
/// (such calls fail with `KVTIER_STATUS_REENTRANT`), must return quickly,
/// and must not unwind (C++: `noexcept`).
pub type kvtier_event_fn =
    Option<unsafe extern "C" fn(user_data: *mut c_void, event: *const kvtier_event)>;

/// The callback and its pointer, moved into the manager.
struct CListener {
    callback: unsafe extern "C" fn(*mut c_void, *const kvtier_event),
    user_data: *mut c_void,
    keys: Vec<kvtier_key>,
}

// SAFETY: the caller of `kvtier_manager_set_event_callback` promises the
// callback may be called from any thread with `user_data`.
unsafe impl Send for CListener {}

impl CListener {
    fn deliver(&mut self, b: &EventBatch<'_>) {
        self.keys.clear();
        self.keys.extend(b.keys.iter().map(|k| kvtier_key {
            data: k.as_bytes().as_ptr(),
            len: k.len(),
        }));
        let event = kvtier_event {
            tier: b.tier as u32,
            kind: event_kind(b.kind),
            medium: medium_value(b.medium),
            locality: locality_value(b.locality),
            keys: if self.keys.is_empty() {
                std::ptr::null()
            } else {
                self.keys.as_ptr()
            },
            len: self.keys.len(),
        };
        // SAFETY: the registrant promised a callable function; the event
        // and its keys live for the call.
        unsafe { (self.callback)(self.user_data, &event) };
    }
}

/// Installs `callback` to receive cache events (stored, removed, cleared;
/// per tier, with the tier's medium and locality) as they happen, replacing
/// any previous one; NULL removes it.  With `also_queue`, events still
/// queue for `kvtier_manager_take_events` too; without, they go to the
/// callback only (events queued earlier are delivered at the end of this
/// call).  The primary tier's events need `event_capacity` > 0.
///
/// `user_data` is passed back to every call and never freed; it and the
/// callback must stay valid until the callback is replaced or removed, or
/// the manager is freed.  See `kvtier_event_fn` for what the callback may
/// do.  Internally synchronized.
///
/// # Safety
/// `manager` a live handle; `callback` NULL or callable from any thread
/// that calls the manager, with `user_data`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn kvtier_manager_set_event_callback(
    manager: *const kvtier_manager,
    callback: kvtier_event_fn,
    user_data: *mut c_void,
    also_queue: bool,
) -> super::kvtier_status {
    ffi_call!({
        let m = unsafe { enter::<kvtier_manager>(manager) }?;
        let listener = callback.map(|callback| {
            let mut l = CListener {
                callback,
                user_data,
                keys: Vec::new(),
            };
            Box::new(move |b: &EventBatch<'_>| l.deliver(b)) as kvtier_core::tiering::EventListener
        });
        Ok(m.local("kvtier_manager_set_event_callback")?
            .set_event_listener(listener, also_queue)?)
    })
}

/// Writes the manager's wake-up descriptor to `*fd_out`: a Linux `eventfd`
/// (non-blocking, close-on-exec) that becomes readable when a secondary
/// tier finishes a job: when any thread calls `kvtier_manager_complete_job`,
/// or a built-in tier's worker finishes.  An idle engine polls it (with
/// `POLLIN`) instead of spinning on `kvtier_manager_has_pending_work`, then
/// reads 8 bytes from it, which resets it, and calls the manager.  Jobs a
/// C tier reports only through `poll_finished` do not wake it.
///
/// The descriptor is created on the first call; every call returns the
/// same one.  kvtier owns it: never close it; it is closed when the manager
/// is freed.  Thread-safe.  Other systems: `KVTIER_STATUS_UNSUPPORTED`.
///
/// # Safety
/// `manager` a live handle; `fd_out` valid for writes.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn kvtier_manager_wake_fd(
    manager: *const kvtier_manager,
    fd_out: *mut c_int,
) -> super::kvtier_status {
    ffi_call!({
        let m = unsafe { enter::<kvtier_manager>(manager) }?;
        let out = unsafe { out_ref(fd_out, "fd_out") }?;
        *out = m.local("kvtier_manager_wake_fd")?.notifier().fd()?;
        Ok(())
    })
}
