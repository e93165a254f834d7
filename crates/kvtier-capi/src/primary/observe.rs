//! What a standalone primary tier tells: its queued events and its
//! statistics.

use super::*;

fn event_kind(kind: EventKind) -> kvtier_event_kind {
    match kind {
        EventKind::Stored => KVTIER_EVENT_STORED,
        EventKind::Removed => KVTIER_EVENT_REMOVED,
        EventKind::Cleared => KVTIER_EVENT_CLEARED,
    }
}

/// Moves the oldest queued events into `events_out`, at most `capacity`
/// entries, writes how many to `*written_out` and whether more remain to
/// `*more_out` (a queue: what fits is handed over, the rest waits).
///
/// Each `kvtier_event` carries consecutive events of one kind: `tier` 0,
/// `medium` `KVTIER_MEDIUM_CPU`, `locality` `KVTIER_LOCALITY_LOCAL`,
/// `kind` `KVTIER_EVENT_STORED` (the keys became readable),
/// `KVTIER_EVENT_REMOVED` (they were evicted; only keys announced as
/// stored) or `KVTIER_EVENT_CLEARED` (a reset; no keys, `keys` NULL), and
/// `len` keys at `keys`.  The keys point into memory this handle owns,
/// valid until the next `kvtier_primary_take_events` call on it or its
/// `_free`; copy what you keep.
///
/// Events are buffered up to the `event_capacity` option; beyond it new
/// events are dropped and counted (stats `events_dropped`).  `capacity` 0
/// (with `events_out` NULL allowed) takes nothing and tells, in
/// `*more_out`, whether events wait.  Exclusive access to the handle.
///
/// # Safety
/// `primary` must be a live handle; `events_out` valid for `capacity`
/// writes (NULL allowed when 0); `written_out` and `more_out` valid for
/// writes.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn kvtier_primary_take_events(
    primary: *mut kvtier_primary,
    events_out: *mut kvtier_event,
    capacity: usize,
    written_out: *mut usize,
    more_out: *mut bool,
) -> kvtier_status {
    ffi_call!({
        let mut h = unsafe { enter_mut(primary) }?;
        let out = unsafe { out_slice(events_out, capacity, "events_out") }?;
        let written = unsafe { out_ref(written_out, "written_out") }?;
        let more = unsafe { out_ref(more_out, "more_out") }?;
        let h = &mut *h;
        // The previous call's keys are released only now.
        h.event_keys.clear();
        h.events.clear();
        let n = h.core.tier.events_in_runs(capacity);
        fallible::reserve(&mut h.events, n, "the events taken")?;
        fallible::reserve(&mut h.event_keys, n, "the keys of the events taken")?;
        h.core.tier.take_events_up_to(n, &mut h.events);
        // `events` is not touched again before the next call, so the keys
        // stay where `event_keys` points.
        for e in &h.events {
            if let Some(key) = e.key.as_ref() {
                let bytes = key.as_bytes();
                h.event_keys.push(kvtier_key {
                    data: bytes.as_ptr(),
                    len: bytes.len(),
                });
            }
        }
        let mut runs = 0;
        let mut first_key = 0;
        let mut i = 0;
        while i < h.events.len() {
            let kind = h.events[i].kind;
            let mut end = i + 1;
            if kind != EventKind::Cleared {
                while end < h.events.len() && h.events[end].kind == kind {
                    end += 1;
                }
            }
            let keys = if kind == EventKind::Cleared {
                0
            } else {
                end - i
            };
            out[runs] = kvtier_event {
                tier: 0,
                kind: event_kind(kind),
                medium: KVTIER_MEDIUM_CPU,
                locality: KVTIER_LOCALITY_LOCAL,
                keys: if keys == 0 {
                    std::ptr::null()
                } else {
                    h.event_keys[first_key..].as_ptr()
                },
                len: keys,
            };
            first_key += keys;
            runs += 1;
            i = end;
        }
        *written = runs;
        *more = h.core.tier.events_queued() > 0;
        Ok(())
    })
}

/// Writes the tier's numbers to `*stats_out`, under the growth rule: set
/// `stats_out->struct_size` to `sizeof(kvtier_primary_stats)` first; only
/// the fields inside it are written (a size smaller than the first
/// published layout, or larger than this library's, is
/// `KVTIER_STATUS_INVALID_ARGUMENT`, nothing written).  Counters are
/// cumulative from creation and never decrease; gauges are current.  For
/// per-interval numbers (vLLM reports deltas since the previous read),
/// keep the previous `kvtier_primary_stats` and subtract field by field.
/// Exclusive access to the handle, like every primary call.
///
/// # Safety
/// `primary` must be a live handle; `stats_out` valid for reads and writes
/// of its `struct_size` bytes.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn kvtier_primary_read_stats(
    primary: *mut kvtier_primary,
    stats_out: *mut kvtier_primary_stats,
) -> kvtier_status {
    ffi_call!({
        let h = unsafe { enter_mut(primary) }?;
        let stats: kvtier_primary_stats = h.core.tier.stats().into();
        unsafe { write_grown(stats_out, &stats, "stats_out") }?;
        Ok(())
    })
}
