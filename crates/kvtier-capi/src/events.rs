//! Cache events drained from a manager: `kvtier_event_buffer`, the
//! caller's own memory for the keys of what it takes, so each caller's
//! events live until its own next take, whatever other threads do;
//! `kvtier_manager_take_events`; and `kvtier_manager_events_queued`.

use super::boundary::{
    Castable, enter, enter_mut, ffi_call, free_handle, into_handle, out_ref, out_slice,
};
use super::dialect::kvtier_event;
use super::key::kvtier_key;
use super::manager::kvtier_manager;
use super::observe::{event_kind, locality_value, medium_value};
use kvtier_core::tiering::EventBuffer;

/// Opaque, caller-owned memory for the events one caller takes from a
/// manager (`kvtier_manager_take_events`): the keys of the events it took
/// last stay valid until its next take into this buffer or its
/// `kvtier_event_buffer_free`.  One buffer per caller (per thread, say):
/// a buffer is not internally synchronized.
pub struct kvtier_event_buffer {
    _private: [u8; 0],
}

/// What a buffer holds: the events taken last and the key views the
/// caller reads, pointing into them.
#[derive(Default)]
pub(crate) struct BufferHandle {
    taken: EventBuffer,
    views: Vec<kvtier_key>,
}

impl Castable for kvtier_event_buffer {
    type Rust = BufferHandle;
    const NAME: &'static str = "buffer";
}

/// Creates an empty event buffer and writes it to `*buffer_out`.  It
/// allocates nothing until a take; each take grows it to what that take
/// hands out (fallibly: `KVTIER_STATUS_OUT_OF_MEMORY`, nothing taken) and
/// keeps the memory for the next.  The caller owns it and frees it with
/// [`kvtier_event_buffer_free`]; it may take from any manager, one take
/// at a time.  Safe to call from any thread.
///
/// # Safety
/// `buffer_out` valid for writes.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn kvtier_event_buffer_new(
    buffer_out: *mut *mut kvtier_event_buffer,
) -> super::kvtier_status {
    ffi_call!({
        let out = unsafe { out_ref(buffer_out, "buffer_out") }?;
        *out = into_handle::<kvtier_event_buffer>(BufferHandle::default());
        Ok(())
    })
}

/// Frees an event buffer; NULL is ignored.  The keys of the events taken
/// into it are invalid from then on.  Must not run concurrently with a
/// take into it.
///
/// # Safety
/// `buffer` NULL or a live buffer from [`kvtier_event_buffer_new`], not
/// used afterwards.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn kvtier_event_buffer_free(buffer: *mut kvtier_event_buffer) {
    let _ = super::boundary::run(|| {
        unsafe { free_handle(buffer) };
        Ok(())
    });
}

/// Moves up to `capacity` events into `events_out`, oldest first (the
/// primary tier's, then each secondary tier's own), writes their number to
/// `*written_out` and whether more wait to `*more_out`.  Each event is a
/// batch: consecutive events of one tier and kind, with the tier's medium
/// and locality and its keys (a `KVTIER_EVENT_CLEARED` event is one of its
/// own, with no keys).
///
/// The keys point into `buffer`, the caller's: they stay valid until the
/// next take into the same buffer (whatever it returns), or its
/// `kvtier_event_buffer_free`,
/// whatever other threads take from the manager into their own buffers.
/// Copy what you keep longer.  `events_out` may be NULL when `capacity` is
/// 0 (which takes nothing; `kvtier_manager_events_queued` tells how much
/// waits).  If memory for the keys runs out, nothing is taken
/// (`KVTIER_STATUS_OUT_OF_MEMORY`) and the buffer holds nothing.  The
/// manager is internally synchronized; the buffer is not (one take into
/// it at a time).
///
/// # Safety
/// `manager` a live handle; `buffer` a live buffer no other thread uses
/// during the call; `events_out` valid for `capacity` writes;
/// `written_out` and `more_out` valid for writes.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn kvtier_manager_take_events(
    manager: *const kvtier_manager,
    buffer: *mut kvtier_event_buffer,
    events_out: *mut kvtier_event,
    capacity: usize,
    written_out: *mut usize,
    more_out: *mut bool,
) -> super::kvtier_status {
    ffi_call!({
        let m = unsafe { enter::<kvtier_manager>(manager) }?;
        let mut b = unsafe { enter_mut(buffer) }?;
        let out = unsafe { out_slice(events_out, capacity, "events_out") }?;
        let written = unsafe { out_ref(written_out, "written_out") }?;
        let more = unsafe { out_ref(more_out, "more_out") }?;
        let BufferHandle { taken, views } = &mut *b;
        views.clear();
        let left = m
            .local("kvtier_manager_take_events")?
            .take_events_into_with(capacity, taken, |keys| {
                kvtier_core::fallible::reserve(views, keys, "the keys of an event take")
            })?;
        // The views point into `taken`'s keys, which nothing moves before
        // the next take into this buffer or its free.
        views.extend(taken.keys().iter().map(|k| kvtier_key {
            data: k.as_bytes().as_ptr(),
            len: k.len(),
        }));
        for (dst, b) in out.iter_mut().zip(taken.batches()) {
            *dst = kvtier_event {
                tier: b.tier as u32,
                kind: event_kind(b.kind),
                medium: medium_value(b.medium),
                locality: locality_value(b.locality),
                keys: if b.len == 0 {
                    std::ptr::null()
                } else {
                    views[b.first..].as_ptr()
                },
                len: b.len,
            };
        }
        *written = taken.batches().len();
        *more = left;
        Ok(())
    })
}

/// Writes how much waits to be taken: to `*events_out` the number of
/// `kvtier_event` entries a `kvtier_manager_take_events` needs to take it
/// all, and to `*keys_out` (unless it is NULL) their keys together.  The
/// count is of what the manager holds after gathering what each tier has
/// (at most the event capacity per tier: a tier holding more hands the
/// rest over later, which a take's `more_out` tells).  Other threads may
/// take or add events before the caller's take.  Internally synchronized.
///
/// # Safety
/// `manager` a live handle; `events_out` valid for writes; `keys_out` NULL
/// or valid for writes.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn kvtier_manager_events_queued(
    manager: *const kvtier_manager,
    events_out: *mut usize,
    keys_out: *mut usize,
) -> super::kvtier_status {
    ffi_call!({
        let m = unsafe { enter::<kvtier_manager>(manager) }?;
        let events = unsafe { out_ref(events_out, "events_out") }?;
        let q = m.local("kvtier_manager_events_queued")?.events_queued()?;
        *events = q.batches;
        if let Some(keys) = unsafe { keys_out.as_mut() } {
            *keys = q.keys;
        }
        Ok(())
    })
}
