//! What engines watch a manager with: Prometheus metrics text, an event
//! callback for KV-aware routers, and a wake-up descriptor for idle loops.

use std::ffi::{c_char, c_int, c_void};

use super::boundary::{enter, ffi_call, out_ref, out_slice};
use super::key::kvtier_key;
use super::manager::kvtier_manager;
use super::tier::{
    KVTIER_EVENT_CLEARED, KVTIER_EVENT_REMOVED, KVTIER_EVENT_STORED, KVTIER_LOCALITY_LOCAL,
    KVTIER_LOCALITY_REMOTE, KVTIER_MEDIUM_CPU, KVTIER_MEDIUM_STORAGE, KVTIER_TIER_ANY,
};
use crate::error::Error;
use crate::events::EventKind;
use crate::request::{Locality, Medium};
use crate::tiering::EventBatch;

/// Writes the manager's statistics (its own totals, the primary tier's,
/// and each secondary tier's, labelled `tier="..."`) in the Prometheus text
/// exposition format (version 0.0.4), NUL-terminated, to `buf`.  Counters
/// and histograms (the primary tier's `kvtier_allocation_size_blocks`) are
/// cumulative and never go back, as in `kvtier_manager_stats`; gauges are
/// current values.
///
/// `buf` must be valid for `len` bytes (NULL if `len` is 0); `needed` must
/// not be NULL.  Always writes the text's length plus one (the NUL) to
/// `*needed`; if that exceeds `len`, writes nothing to `buf` and returns
/// `KVTIER_STATUS_BUFFER_TOO_SMALL` (call again with a larger buffer; the
/// values may have changed by then, so leave some room).  The caller owns
/// `buf`.  Internally synchronized: any thread may call it.
///
/// # Safety
/// `manager` a live handle; `buf` valid for `len` writes; `needed` valid.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn kvtier_manager_metrics_prometheus(
    manager: *const kvtier_manager,
    buf: *mut c_char,
    len: usize,
    needed: *mut usize,
) -> super::kvtier_status {
    ffi_call!({
        let m = unsafe { enter::<kvtier_manager>(manager) }?;
        let needed = unsafe { out_ref(needed, "needed") }?;
        let text = crate::metrics::manager_prometheus_text(&m.stats()?);
        *needed = text.len() + 1;
        if len < text.len() + 1 {
            return Err(Error::BufferTooSmall {
                needed: text.len() + 1,
                given: len,
            }
            .into());
        }
        let out = unsafe { out_slice(buf.cast::<u8>(), len, "buf") }?;
        out[..text.len()].copy_from_slice(text.as_bytes());
        out[text.len()] = 0;
        Ok(())
    })
}

/// Consecutive cache events of one tier and kind, as the event callback
/// receives them.  Borrowed for the callback only: copy what you keep.
#[repr(C)]
#[allow(non_camel_case_types)]
#[derive(Debug, Clone, Copy)]
pub struct kvtier_event_batch {
    /// Tier index: 0 primary, 1.. secondary tiers in the order added.
    pub tier: u32,
    /// `KVTIER_EVENT_STORED`, `KVTIER_EVENT_REMOVED` or `KVTIER_EVENT_CLEARED`.
    pub kind: i32,
    /// `KVTIER_MEDIUM_CPU`, `KVTIER_MEDIUM_STORAGE` or `KVTIER_TIER_ANY` (undeclared).
    pub medium: i32,
    /// `KVTIER_LOCALITY_LOCAL`, `KVTIER_LOCALITY_REMOTE` or `KVTIER_TIER_ANY`.
    pub locality: i32,
    /// The keys (NULL and 0 for `KVTIER_EVENT_CLEARED`).
    pub keys: *const kvtier_key,
    /// Number of keys.
    pub len: usize,
}

/// Receives one batch of events.  Called at the end of the manager call
/// that produced the events, on that call's thread, with the manager's
/// lock held: it must not call the manager (such calls fail with
/// `KVTIER_STATUS_REENTRANT`), must return quickly, and must not unwind
/// (C++: `noexcept`).
#[allow(non_camel_case_types)]
pub type kvtier_event_fn =
    Option<unsafe extern "C" fn(user_data: *mut c_void, batch: *const kvtier_event_batch)>;

/// The callback and its pointer, moved into the manager.
struct CListener {
    callback: unsafe extern "C" fn(*mut c_void, *const kvtier_event_batch),
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
        let batch = kvtier_event_batch {
            tier: b.tier as u32,
            kind: match b.kind {
                EventKind::Stored => KVTIER_EVENT_STORED,
                EventKind::Removed => KVTIER_EVENT_REMOVED,
                EventKind::Cleared => KVTIER_EVENT_CLEARED,
            },
            medium: match b.medium {
                None => KVTIER_TIER_ANY,
                Some(Medium::Cpu) => KVTIER_MEDIUM_CPU,
                Some(Medium::Storage) => KVTIER_MEDIUM_STORAGE,
            },
            locality: match b.locality {
                None => KVTIER_TIER_ANY,
                Some(Locality::Local) => KVTIER_LOCALITY_LOCAL,
                Some(Locality::Remote) => KVTIER_LOCALITY_REMOTE,
            },
            keys: if self.keys.is_empty() {
                std::ptr::null()
            } else {
                self.keys.as_ptr()
            },
            len: self.keys.len(),
        };
        // SAFETY: the registrant promised a callable function; the batch
        // and its keys live for the call.
        unsafe { (self.callback)(self.user_data, &batch) };
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
    manager: *mut kvtier_manager,
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
            Box::new(move |b: &EventBatch<'_>| l.deliver(b)) as crate::tiering::EventListener
        });
        Ok(m.set_event_listener(listener, also_queue)?)
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
        *out = m.notifier().fd()?;
        Ok(())
    })
}
