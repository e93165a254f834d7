//! The adapter that makes a `kvtier_tier_vtable` a [`SecondaryTier`]: each
//! trait call converts its arguments, calls the C callback and checks
//! what comes back (the calling discipline is in the parent module's doc).

use std::ffi::{CString, c_char, c_void};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

mod convert;

use super::{
    KVTIER_EVENT_CLEARED, KVTIER_EVENT_REMOVED, KVTIER_EVENT_STORED, KVTIER_JOB_LOAD,
    KVTIER_JOB_STORE, KVTIER_LOCALITY_ANY, KVTIER_LOCALITY_LOCAL, KVTIER_LOCALITY_REMOTE,
    KVTIER_LOOKUP_HIT, KVTIER_LOOKUP_MISS, KVTIER_LOOKUP_RETRY, KVTIER_MEDIUM_ANY,
    KVTIER_MEDIUM_CPU, KVTIER_MEDIUM_STORAGE, KVTIER_OFFLOAD_BLOCK_LEVEL,
    KVTIER_OFFLOAD_REQUEST_LEVEL, KVTIER_STAT_COUNTER, KVTIER_STAT_GAUGE, kvtier_job,
    kvtier_job_result, kvtier_locality, kvtier_medium, kvtier_param, kvtier_request,
    kvtier_tier_event, kvtier_tier_stat, kvtier_tier_vtable,
};
use crate::boundary;
use crate::key::{kvtier_key, read_key};
use crate::status::kvtier_status;
pub(crate) use convert::job_result_of;
use convert::*;
use kvtier_core::error::{Error, Result};
use kvtier_core::events::{Event, EventKind};
use kvtier_core::key::Key;
use kvtier_core::request::{Locality, Medium, Request};
use kvtier_core::stats::Stat;
use kvtier_core::tiering::{
    Direction, JobRef, JobResult, OffloadPolicy, SecondaryTier, TierLookup,
};

/// A secondary tier implemented by a C vtable.
pub(crate) struct CTier {
    vt: kvtier_tier_vtable,
    name: String,
    medium: Option<Medium>,
    locality: Option<Locality>,
    /// Set once registration succeeded: only then does drop call `destroy`.
    armed: Arc<AtomicBool>,
    requests: hashbrown::HashMap<usize, CRequest, foldhash::fast::RandomState>,
    /// Views of finished requests, for the next ones (at most
    /// [`SPARE_REQUESTS`]).
    spare_requests: Vec<CRequest>,
    keys: Vec<kvtier_key>,
    results: Vec<kvtier_job_result>,
    failed_submits: Vec<JobResult>,
    events: Vec<kvtier_tier_event>,
    /// Misbehaviour found (also by the `&self` calls: `stats`,
    /// `has_pending_work`) and its descriptions, until `take_errors`.
    errors: Mutex<Vec<String>>,
    callback_errors: AtomicU64,
    /// Events refused because their key was empty or longer than 64 bytes.
    events_rejected: u64,
    /// The most keys of one job given to the tier: a result listing more
    /// arrived keys than that is refused before they are read.
    max_job_keys: usize,
}

// SAFETY: the vtable contract lets any thread call the callbacks as long as
// calls do not overlap, which the manager's lock guarantees; `user_data` is
// owned by this value after registration.
unsafe impl Send for CTier {}

const RESULT_BATCH: usize = 64;

/// Most views of finished requests a C tier keeps for reuse.
const SPARE_REQUESTS: usize = 64;

/// Most errors a C tier keeps between two `take_errors` calls (the
/// `callback_errors` counter keeps the total).
const MAX_PENDING_ERRORS: usize = 64;

/// Longest tier name, in bytes without the NUL: a longer one (or one with
/// no NUL among its first 256 bytes) is refused at registration, and no
/// byte past the 256th is read.
pub(crate) const MAX_TIER_NAME: usize = 255;

impl CTier {
    /// Checks and copies `vt`; `armed` decides whether drop calls `destroy`.
    ///
    /// # Safety
    /// `vt.name` must be NULL or a valid NUL-terminated string.
    pub(crate) unsafe fn new(vt: &kvtier_tier_vtable, armed: Arc<AtomicBool>) -> Result<CTier> {
        let mut missing = Vec::new();
        if vt.lookup.is_none() {
            missing.push("lookup");
        }
        if vt.submit_store.is_none() {
            missing.push("submit_store");
        }
        if vt.submit_load.is_none() {
            missing.push("submit_load");
        }
        if !missing.is_empty() {
            return Err(Error::InvalidArgument(format!(
                "tier vtable lacks required entries: {}",
                missing.join(", ")
            )));
        }
        let name = if vt.name.is_null() {
            "c-tier".to_string()
        } else {
            // SAFETY: the caller's contract (a NUL-terminated string); no
            // byte past the bound is read even if it is not.
            unsafe { bounded_name(vt.name) }?
        };
        Ok(CTier {
            medium: medium_of(vt.medium)?,
            locality: locality_of(vt.locality)?,
            vt: *vt,
            name,
            armed,
            requests: Default::default(),
            spare_requests: Vec::new(),
            keys: Vec::new(),
            results: Vec::with_capacity(RESULT_BATCH),
            failed_submits: Vec::new(),
            events: Vec::new(),
            errors: Mutex::new(Vec::new()),
            callback_errors: AtomicU64::new(0),
            events_rejected: 0,
            max_job_keys: 0,
        })
    }

    /// Records a callback's status; true if it was `KVTIER_STATUS_OK`.
    fn ok(&self, what: &str, rc: i32) -> bool {
        match kvtier_status::from_i32(rc) {
            Some(kvtier_status::Ok) => true,
            Some(s) => {
                self.note(format!(
                    "callback {what} returned {}",
                    s.as_cstr().to_string_lossy()
                ));
                false
            }
            None => {
                self.note(format!(
                    "callback {what} returned {rc}, which is not a kvtier_status"
                ));
                false
            }
        }
    }

    /// Counts a callback failure and keeps its description (a bounded
    /// number between two `take_errors`).
    fn note(&self, message: String) {
        self.callback_errors.fetch_add(1, Ordering::Relaxed);
        let mut errors = self.errors.lock().unwrap_or_else(|e| e.into_inner());
        if errors.len() < MAX_PENDING_ERRORS {
            errors.push(message);
        }
    }

    /// Calls the optional callback `f` named `what` (drain, shutdown): an
    /// absent one succeeds; a status other than OK is noted like any
    /// callback failure and returned as a tier error naming `what`.
    fn call_checked(
        &mut self,
        what: &str,
        f: Option<unsafe extern "C" fn(user_data: *mut c_void) -> i32>,
    ) -> Result<()> {
        let Some(f) = f else {
            return Ok(());
        };
        // SAFETY: the vtable contract.
        let rc = unsafe { f(self.vt.user_data) };
        if self.ok(what, rc) {
            Ok(())
        } else {
            Err(Error::Tier {
                tier: self.name.clone(),
                message: format!("{what} returned status {rc}"),
            })
        }
    }

    /// The C view of `info`, made once per request.
    fn request(&mut self, info: &Request) -> *const kvtier_request {
        let id = Arc::as_ptr(info) as usize;
        let spare = &mut self.spare_requests;
        let entry = self.requests.entry(id).or_insert_with(|| {
            let mut view = spare.pop().unwrap_or_default();
            view.fill(info);
            view
        });
        debug_assert_eq!(entry.c.params, entry.params.as_ptr());
        &entry.c
    }

    fn fill_keys(&mut self, keys: &[Key]) {
        self.keys.clear();
        self.keys.extend(keys.iter().map(|k| kvtier_key {
            data: k.as_bytes().as_ptr(),
            len: k.len(),
        }));
    }

    fn submit(&mut self, job: JobRef) {
        self.max_job_keys = self.max_job_keys.max(job.keys.len());
        self.fill_keys(&job.keys);
        let request = self.request(&job.request);
        let c = kvtier_job {
            id: job.id.0,
            direction: match job.direction {
                Direction::Store => KVTIER_JOB_STORE,
                Direction::Load => KVTIER_JOB_LOAD,
            },
            keys: self.keys.as_ptr(),
            slots: job.slots.as_ptr(),
            len: job.keys.len(),
            request,
        };
        let (f, what) = match job.direction {
            Direction::Store => (self.vt.submit_store, "submit_store"),
            Direction::Load => (self.vt.submit_load, "submit_load"),
        };
        let rc = match f {
            // SAFETY: the vtable contract; `c` and what it points to live for the call.
            Some(f) => unsafe { f(self.vt.user_data, &c) },
            None => kvtier_status::Unsupported as i32,
        };
        if !self.ok(what, rc) {
            self.failed_submits.push(JobResult::new(job.id, false));
        }
    }
}

impl Drop for CTier {
    fn drop(&mut self) {
        if self.armed.load(Ordering::Acquire)
            && let Some(destroy) = self.vt.destroy
        {
            // SAFETY: registration succeeded, so we own `user_data`; this is
            // the last use.
            unsafe { destroy(self.vt.user_data) };
        }
    }
}

impl SecondaryTier for CTier {
    fn name(&self) -> &str {
        &self.name
    }

    fn reports_through_complete_job(&self) -> bool {
        true
    }
    fn medium(&self) -> Option<Medium> {
        self.medium
    }

    fn locality(&self) -> Option<Locality> {
        self.locality
    }

    fn lookup(&mut self, key: &Key, request: &Request) -> TierLookup {
        let req = self.request(request);
        let k = kvtier_key {
            data: key.as_bytes().as_ptr(),
            len: key.len(),
        };
        let mut answer = KVTIER_LOOKUP_MISS;
        let Some(f) = self.vt.lookup else {
            // Checked at registration.
            return TierLookup::Miss;
        };
        // SAFETY: the vtable contract; arguments live for the call.
        let rc = unsafe { f(self.vt.user_data, &k, req, &mut answer) };
        if !self.ok("lookup", rc) {
            return TierLookup::Miss;
        }
        match answer {
            KVTIER_LOOKUP_MISS => TierLookup::Miss,
            KVTIER_LOOKUP_HIT => TierLookup::Hit,
            KVTIER_LOOKUP_RETRY => TierLookup::Retry,
            other => {
                self.note(format!(
                    "lookup answered {other}, which is not KVTIER_LOOKUP_MISS, _HIT or _RETRY"
                ));
                TierLookup::Miss
            }
        }
    }

    fn submit_store(&mut self, job: JobRef) {
        self.submit(job)
    }

    fn submit_load(&mut self, job: JobRef) {
        self.submit(job)
    }

    /// Takes at most `max` results: the callback is called again while it
    /// fills its buffer, until `max` are taken; the rest wait for the next
    /// poll.
    fn poll_finished(&mut self, max: usize, out: &mut Vec<JobResult>) {
        let mut left = max;
        let n = left.min(self.failed_submits.len());
        out.extend(self.failed_submits.drain(..n));
        left -= n;
        let Some(f) = self.vt.poll_finished else {
            return;
        };
        while left > 0 {
            let capacity = left.min(RESULT_BATCH);
            let (rc, written) = fill_batch(&mut self.results, capacity, self.vt.user_data, f);
            if !self.ok("poll_finished", rc) {
                return;
            }
            if written > capacity {
                self.note(format!(
                    "poll_finished wrote {written} results into a buffer of {capacity}"
                ));
                return;
            }
            left -= written;
            for i in 0..written {
                let r = &self.results[i];
                if r.succeeded_len > self.max_job_keys {
                    self.note(format!(
                        "result of job {} lists {} arrived keys, more than any job given to the tier had ({}); the job counts as failed",
                        r.id, r.succeeded_len, self.max_job_keys
                    ));
                    out.push(JobResult::new(kvtier_core::tiering::JobId(r.id), false));
                    continue;
                }
                // SAFETY: the tier keeps its key lists valid until its next
                // callback, and they are copied here, before it.
                match unsafe { job_result_of(r) } {
                    Ok(jr) => out.push(jr),
                    Err(why) => {
                        self.note(format!(
                            "result of job {}: {why}; the job counts as failed",
                            r.id
                        ));
                        out.push(JobResult::new(kvtier_core::tiering::JobId(r.id), false));
                    }
                }
            }
            if written < capacity {
                return;
            }
        }
    }

    fn wants_touches(&self) -> bool {
        self.vt.touch.is_some()
    }

    fn touch(&mut self, keys: &[Key], request: &Request) {
        let Some(f) = self.vt.touch else {
            return;
        };
        let req = self.request(request);
        self.fill_keys(keys);
        // SAFETY: the vtable contract; arguments live for the call.
        let rc = unsafe { f(self.vt.user_data, self.keys.as_ptr(), keys.len(), req) };
        self.ok("touch", rc);
    }

    fn on_new_request(&mut self, request: &Request) -> OffloadPolicy {
        // The C view of the request is made when a callback first needs it.
        let Some(f) = self.vt.on_new_request else {
            return OffloadPolicy::BlockLevel;
        };
        let req = self.request(request);
        let mut policy = KVTIER_OFFLOAD_BLOCK_LEVEL;
        // SAFETY: the vtable contract; arguments live for the call.
        let rc = unsafe { f(self.vt.user_data, req, &mut policy) };
        if !self.ok("on_new_request", rc) {
            return OffloadPolicy::BlockLevel;
        }
        match policy {
            KVTIER_OFFLOAD_BLOCK_LEVEL => OffloadPolicy::BlockLevel,
            KVTIER_OFFLOAD_REQUEST_LEVEL => OffloadPolicy::RequestLevel,
            other => {
                self.note(format!(
                    "on_new_request answered policy {other}, which is not a KVTIER_OFFLOAD_* value"
                ));
                OffloadPolicy::BlockLevel
            }
        }
    }

    fn on_request_finished(&mut self, request: &Request) {
        if let Some(f) = self.vt.on_request_finished {
            let req = self.request(request);
            // SAFETY: the vtable contract; arguments live for the call.
            let rc = unsafe { f(self.vt.user_data, req) };
            self.ok("on_request_finished", rc);
        }
        if let Some(view) = self.requests.remove(&(Arc::as_ptr(request) as usize))
            && self.spare_requests.len() < SPARE_REQUESTS
        {
            self.spare_requests.push(view);
        }
    }

    fn on_schedule_end(&mut self) {
        if let Some(f) = self.vt.on_schedule_end {
            // SAFETY: the vtable contract.
            let rc = unsafe { f(self.vt.user_data) };
            self.ok("on_schedule_end", rc);
        }
    }

    fn has_pending_work(&self) -> bool {
        let Some(f) = self.vt.has_pending_work else {
            return !self.failed_submits.is_empty();
        };
        // Read as a byte: a C tier may write any byte through its `bool *`
        // (any but 0 is "pending").
        let mut pending = 0u8;
        // SAFETY: the vtable contract; a `bool` is one byte.
        let rc = unsafe { f(self.vt.user_data, (&raw mut pending).cast::<bool>()) };
        let pending = self.ok("has_pending_work", rc) && pending != 0;
        pending || !self.failed_submits.is_empty()
    }

    fn drain(&mut self) -> Result<()> {
        self.call_checked("drain", self.vt.drain)
    }

    fn stat_table(&self) -> Option<kvtier_core::stats::StatTable> {
        Some(kvtier_core::tiering::ADAPTER_STATS)
    }

    fn stats(&self) -> Vec<Stat> {
        let mut own = Vec::new();
        if let Some(f) = self.vt.stats {
            let mut buf: Vec<kvtier_tier_stat> = Vec::with_capacity(RESULT_BATCH);
            let (rc, written) = fill_batch(&mut buf, RESULT_BATCH, self.vt.user_data, f);
            if !self.ok("stats", rc) {
                // Noted by `ok`.
            } else if written > RESULT_BATCH {
                self.note(format!(
                    "stats wrote {written} statistics into a buffer of {RESULT_BATCH}; none was read"
                ));
            } else {
                for s in &buf {
                    let name = fixed_name(&s.name);
                    match s.kind {
                        KVTIER_STAT_COUNTER => own.push(Stat {
                            name: name.into(),
                            kind: kvtier_core::stats::StatKind::Counter,
                            value: s.value,
                        }),
                        KVTIER_STAT_GAUGE => own.push(Stat::gauge(name, s.value)),
                        other => self.note(format!(
                            "stats gave {name:?} kind {other}, which is not KVTIER_STAT_COUNTER or KVTIER_STAT_GAUGE; it was dropped"
                        )),
                    }
                }
            }
        }
        // The counts after this call's own findings.
        let mut out = kvtier_core::tiering::AdapterStats {
            callback_errors: self.callback_errors.load(Ordering::Relaxed),
            events_rejected: self.events_rejected,
        }
        .stat_list();
        out.append(&mut own);
        out
    }

    /// Takes at most `max` events: the callback is called again while it
    /// fills its buffer, until `max` are taken; the rest stay with the tier.
    /// An event whose key is empty or longer than 64 bytes is refused (not
    /// cut short), counted in `events_rejected` and noted as a callback error.
    fn take_events(&mut self, max: usize, out: &mut Vec<Event>) {
        let Some(f) = self.vt.take_events else {
            return;
        };
        let mut buf = std::mem::take(&mut self.events);
        let mut left = max;
        while left > 0 {
            let capacity = left.min(RESULT_BATCH);
            let (rc, written) = fill_batch(&mut buf, capacity, self.vt.user_data, f);
            if !self.ok("take_events", rc) {
                break;
            }
            if written > capacity {
                self.note(format!(
                    "take_events wrote {written} events into a buffer of {capacity}"
                ));
                break;
            }
            left -= written;
            for e in &buf {
                let kind = match e.kind {
                    KVTIER_EVENT_STORED => EventKind::Stored,
                    KVTIER_EVENT_REMOVED => EventKind::Removed,
                    KVTIER_EVENT_CLEARED => EventKind::Cleared,
                    other => {
                        self.note(format!("take_events gave event kind {other}"));
                        continue;
                    }
                };
                let key = if kind == EventKind::Cleared {
                    None
                } else {
                    let key = e.key.bytes.get(..e.key.len).and_then(|b| Key::new(b).ok());
                    if key.is_none() {
                        self.events_rejected += 1;
                        self.note(format!(
                            "take_events gave a key of {} bytes (keys are 1 to 64 bytes); the event was dropped",
                            e.key.len
                        ));
                        continue;
                    }
                    key
                };
                out.push(Event { kind, key });
            }
            if written < capacity {
                break;
            }
        }
        buf.clear();
        self.events = buf;
    }

    fn take_errors(&mut self, out: &mut Vec<String>) {
        out.append(self.errors.get_mut().unwrap_or_else(|e| e.into_inner()));
    }

    fn shutdown(&mut self) -> Result<()> {
        self.call_checked("shutdown", self.vt.shutdown)
    }
}

/// Wraps `vtable` in the adapter the manager uses, as a boxed tier that
/// owns `user_data` (dropping it calls `destroy`), for Rust hosts that
/// hold C tiers and for tests.
///
/// # Safety
/// `vtable` must satisfy the `kvtier_tier_vtable` contract.
pub unsafe fn tier_from_vtable(vtable: &kvtier_tier_vtable) -> Result<Box<dyn SecondaryTier>> {
    let tier = unsafe { CTier::new(vtable, Arc::new(AtomicBool::new(true))) }?;
    Ok(Box::new(tier))
}
