//! The scriptable test tier of `kvtier_testkit::common` behind `extern "C"`
//! callbacks and the C vtable adapter, so the manager's rules are checked
//! through the foreign-tier path too.

use kvtier_core::request::{Locality, Medium};
use kvtier_core::tiering::SecondaryTier;
use kvtier_testkit::common::TestTier;

/// The tier behind `extern "C"` callbacks and the C vtable adapter, so the
/// same rules are checked through the foreign-tier path.
pub fn via_c(t: TestTier) -> Box<dyn SecondaryTier> {
    use kvtier::tier::*;
    let (medium, locality) = {
        let s = t.s.lock();
        (
            match s.medium {
                None => KVTIER_MEDIUM_ANY,
                Some(Medium::Cpu) => KVTIER_MEDIUM_CPU,
                Some(Medium::Storage) => KVTIER_MEDIUM_STORAGE,
            },
            match s.locality {
                None => KVTIER_LOCALITY_ANY,
                Some(Locality::Local) => KVTIER_LOCALITY_LOCAL,
                Some(Locality::Remote) => KVTIER_LOCALITY_REMOTE,
            },
        )
    };
    let name = std::ffi::CString::new(t.name.clone()).unwrap();
    let bridge = Box::new(callbacks::Bridge {
        tier: t,
        results: Vec::new(),
        keys: Vec::new(),
        owned: Vec::new(),
    });
    let vt = kvtier_tier_vtable {
        user_data: Box::into_raw(bridge) as *mut std::ffi::c_void,
        name: name.as_ptr(),
        medium,
        locality,
        lookup: Some(callbacks::lookup),
        submit_store: Some(callbacks::submit),
        submit_load: Some(callbacks::submit),
        poll_finished: Some(callbacks::poll),
        touch: Some(callbacks::touch),
        on_new_request: Some(callbacks::new_request),
        on_request_finished: Some(callbacks::finished),
        on_schedule_end: Some(callbacks::schedule_end),
        has_pending_work: Some(callbacks::pending),
        drain: Some(callbacks::drain),
        stats: None,
        shutdown: Some(callbacks::shutdown),
        destroy: Some(callbacks::destroy),
        take_events: Some(callbacks::events),
        ..kvtier::tier::kvtier_tier_vtable_default()
    };
    unsafe { tier_from_vtable(&vt) }.unwrap()
}

mod callbacks {
    use std::ffi::{CStr, c_void};
    use std::sync::Arc;

    use kvtier::kvtier_key;
    use kvtier::tier::*;
    use kvtier_core::Key;
    use kvtier_core::request::{Request, RequestInfo};
    use kvtier_core::tiering::{
        Direction, Job, JobId, JobResult, OffloadPolicy, SecondaryTier, TierLookup,
    };

    pub struct Bridge {
        pub tier: kvtier_testkit::common::TestTier,
        pub results: Vec<JobResult>,
        pub keys: Vec<Vec<kvtier_key>>,
        pub owned: Vec<Vec<Key>>,
    }

    unsafe fn b<'a>(ud: *mut c_void) -> &'a mut Bridge {
        unsafe { &mut *(ud as *mut Bridge) }
    }

    unsafe fn req(r: *const kvtier_request) -> Request {
        let r = unsafe { &*r };
        let name = unsafe { CStr::from_ptr(r.id) }
            .to_str()
            .unwrap()
            .to_string();
        Arc::new(RequestInfo {
            name,
            user_data: r.user_data as usize,
            ..Default::default()
        })
    }

    unsafe fn keys(k: *const kvtier_key, n: usize) -> Vec<Key> {
        (0..n)
            .map(|i| {
                let k = unsafe { &*k.add(i) };
                Key::new(unsafe { std::slice::from_raw_parts(k.data, k.len) }).unwrap()
            })
            .collect()
    }

    pub unsafe extern "C" fn lookup(
        ud: *mut c_void,
        k: *const kvtier_key,
        r: *const kvtier_request,
        answer: *mut i32,
    ) -> i32 {
        let key = unsafe { keys(k, 1) }[0];
        let a = unsafe { b(ud) }.tier.lookup(&key, &unsafe { req(r) });
        unsafe {
            *answer = match a {
                TierLookup::Hit => KVTIER_LOOKUP_HIT,
                TierLookup::Miss => KVTIER_LOOKUP_MISS,
                TierLookup::Retry => KVTIER_LOOKUP_RETRY,
            }
        };
        0
    }

    pub unsafe extern "C" fn submit(ud: *mut c_void, j: *const kvtier_job) -> i32 {
        let j = unsafe { &*j };
        let job = Arc::new(Job {
            id: JobId(j.id),
            direction: if j.direction == KVTIER_JOB_STORE {
                Direction::Store
            } else {
                Direction::Load
            },
            keys: unsafe { keys(j.keys, j.len) },
            slots: unsafe { std::slice::from_raw_parts(j.slots, j.len) }.to_vec(),
            request: unsafe { req(j.request) },
        });
        let t = &mut unsafe { b(ud) }.tier;
        match job.direction {
            Direction::Store => t.submit_store(job),
            Direction::Load => t.submit_load(job),
        }
        0
    }

    pub unsafe extern "C" fn poll(
        ud: *mut c_void,
        out: *mut kvtier_job_result,
        cap: usize,
        written: *mut usize,
    ) -> i32 {
        let br = unsafe { b(ud) };
        if br.results.is_empty() {
            br.keys.clear();
            br.owned.clear();
            br.tier.poll_finished(usize::MAX, &mut br.results);
        }
        let n = br.results.len().min(cap);
        for (i, r) in br.results.drain(..n).enumerate() {
            // The key lists stay alive (in the bridge) until the next poll.
            let owned: Vec<Key> = r.succeeded_keys.clone().unwrap_or_default();
            let list: Vec<kvtier_key> = owned
                .iter()
                .map(|k| kvtier_key {
                    data: k.as_bytes().as_ptr(),
                    len: k.len(),
                })
                .collect();
            unsafe {
                *out.add(i) = kvtier_job_result {
                    id: r.id.0,
                    success: r.success,
                    succeeded_keys: if r.succeeded_keys.is_some() {
                        list.as_ptr()
                    } else {
                        std::ptr::null()
                    },
                    succeeded_len: list.len(),
                    bytes: r.bytes,
                    duration_ns: r.duration.map_or(0, |d| d.as_nanos() as u64),
                }
            };
            br.keys.push(list);
            br.owned.push(owned);
        }
        unsafe { *written = n };
        0
    }

    pub unsafe extern "C" fn touch(
        ud: *mut c_void,
        k: *const kvtier_key,
        n: usize,
        r: *const kvtier_request,
    ) -> i32 {
        let ks = unsafe { keys(k, n) };
        unsafe { b(ud) }.tier.touch(&ks, &unsafe { req(r) });
        0
    }

    pub unsafe extern "C" fn new_request(
        ud: *mut c_void,
        r: *const kvtier_request,
        policy: *mut i32,
    ) -> i32 {
        let p = unsafe { b(ud) }.tier.on_new_request(&unsafe { req(r) });
        unsafe {
            *policy = match p {
                OffloadPolicy::BlockLevel => KVTIER_OFFLOAD_BLOCK_LEVEL,
                OffloadPolicy::RequestLevel => KVTIER_OFFLOAD_REQUEST_LEVEL,
            }
        };
        0
    }

    pub unsafe extern "C" fn finished(ud: *mut c_void, r: *const kvtier_request) -> i32 {
        unsafe { b(ud) }
            .tier
            .on_request_finished(&unsafe { req(r) });
        0
    }

    pub unsafe extern "C" fn schedule_end(ud: *mut c_void) -> i32 {
        unsafe { b(ud) }.tier.on_schedule_end();
        0
    }

    pub unsafe extern "C" fn pending(ud: *mut c_void, out: *mut bool) -> i32 {
        let br = unsafe { b(ud) };
        unsafe { *out = !br.results.is_empty() || br.tier.has_pending_work() };
        0
    }

    pub unsafe extern "C" fn drain(ud: *mut c_void) -> i32 {
        match unsafe { b(ud) }.tier.drain() {
            Ok(()) => 0,
            Err(_) => kvtier::kvtier_status::Io as i32,
        }
    }

    pub unsafe extern "C" fn shutdown(ud: *mut c_void) -> i32 {
        match unsafe { b(ud) }.tier.shutdown() {
            Ok(()) => 0,
            Err(_) => kvtier::kvtier_status::Io as i32,
        }
    }

    pub unsafe extern "C" fn events(
        ud: *mut c_void,
        out: *mut kvtier_tier_event,
        cap: usize,
        written: *mut usize,
    ) -> i32 {
        let mut evs = Vec::new();
        unsafe { b(ud) }.tier.take_events(cap, &mut evs);
        assert!(evs.len() <= cap);
        for (i, e) in evs.iter().enumerate() {
            let mut c = kvtier_tier_event {
                kind: KVTIER_EVENT_STORED,
                key: kvtier::dialect::kvtier_key_buf {
                    len: 0,
                    bytes: [0; 64],
                },
            };
            c.kind = match e.kind {
                kvtier_core::events::EventKind::Stored => KVTIER_EVENT_STORED,
                kvtier_core::events::EventKind::Removed => KVTIER_EVENT_REMOVED,
                kvtier_core::events::EventKind::Cleared => KVTIER_EVENT_CLEARED,
            };
            if let Some(k) = e.key {
                c.key.len = k.len();
                c.key.bytes[..k.len()].copy_from_slice(k.as_bytes());
            }
            unsafe { *out.add(i) = c };
        }
        unsafe { *written = evs.len() };
        0
    }

    pub unsafe extern "C" fn destroy(ud: *mut c_void) {
        drop(unsafe { Box::from_raw(ud as *mut Bridge) });
    }
}
