//! A C tier (`extern "C"` functions behind a `kvtier_tier_vtable`) that
//! lies about every length and count it writes back: the manager bounds
//! each one, reads nothing past what it handed out, refuses what does not
//! fit and counts it as the tier's misbehaviour (`callback_errors`, or
//! `tier_bugs` for a made-up job), with a message in the error log.

#[path = "support/ffi_calls.rs"]
mod ffi_calls;

use std::collections::HashMap;
use std::ffi::{CStr, c_char, c_void};
use std::ptr::{null, null_mut};

use ffi_calls::{ck, last_error, store_with};
use kvtier::dialect::*;
use kvtier::events::*;
use kvtier::kvtier_key;
use kvtier::kvtier_status as S;
use kvtier::manager::*;
use kvtier::observe::*;
use kvtier::requests::*;
use kvtier::tier::*;

/// What the tier lies about.
#[derive(Default)]
struct Liar {
    /// `stats` claims this many entries more than its capacity.
    stats_extra: Option<usize>,
    /// `stats` returns this status.
    stats_status: i32,
    /// `stats` writes this kind for its one entry.
    stats_kind: Option<i32>,
    /// `stats` fills its whole buffer (`own_0`, `own_1`, ...).
    stats_fill: bool,
    /// `take_events` claims this many more events than its capacity.
    events_extra: Option<usize>,
    /// `take_events` writes one event whose key claims this length.
    event_key_len: Option<usize>,
    /// `poll_finished` claims this many results more than its capacity.
    poll_extra: Option<usize>,
    /// `poll_finished` reports each job with one real key listed and this
    /// many claimed.
    succeeded_len: Option<usize>,
    /// `has_pending_work` writes this byte into its `bool`.
    pending_byte: Option<u8>,
    /// Jobs submitted and not yet reported.
    jobs: Vec<u64>,
    /// The one key each result lists (kept valid until the next callback).
    listed: Vec<[u8; 4]>,
    listed_keys: Vec<kvtier_key>,
    events_given: bool,
}

unsafe fn liar<'a>(ud: *mut c_void) -> &'a mut Liar {
    unsafe { &mut *(ud as *mut Liar) }
}

unsafe extern "C" fn l_lookup(
    _ud: *mut c_void,
    _key: *const kvtier_key,
    _r: *const kvtier_request,
    answer: *mut kvtier_lookup_result,
) -> i32 {
    unsafe { *answer = KVTIER_LOOKUP_MISS };
    0
}

unsafe extern "C" fn l_submit(ud: *mut c_void, job: *const kvtier_job) -> i32 {
    unsafe { liar(ud) }.jobs.push(unsafe { (*job).id });
    0
}

unsafe extern "C" fn l_poll(
    ud: *mut c_void,
    out: *mut kvtier_job_result,
    cap: usize,
    written: *mut usize,
) -> i32 {
    let l = unsafe { liar(ud) };
    if let Some(extra) = l.poll_extra {
        // Claims more than the buffer holds; writes nothing.
        unsafe { *written = cap + extra };
        return 0;
    }
    let jobs: Vec<u64> = l.jobs.drain(..).take(cap).collect();
    l.listed = vec![[0, 0, 0, 1]; jobs.len()];
    l.listed_keys = l.listed.iter().map(|k| ck(k)).collect();
    for (i, id) in jobs.iter().enumerate() {
        let (keys, len) = match l.succeeded_len {
            Some(n) => (&l.listed_keys[i] as *const kvtier_key, n),
            None => (null(), 0),
        };
        let r = kvtier_job_result {
            id: *id,
            success: l.succeeded_len.is_none(),
            succeeded_keys: keys,
            succeeded_len: len,
            bytes: 0,
            duration_ns: 0,
        };
        unsafe { *out.add(i) = r };
    }
    unsafe { *written = jobs.len() };
    0
}

unsafe extern "C" fn l_pending(ud: *mut c_void, pending: *mut bool) -> i32 {
    let l = unsafe { liar(ud) };
    // A C tier may write any byte through its `bool *`.
    unsafe { *(pending as *mut u8) = l.pending_byte.unwrap_or(0) };
    0
}

unsafe extern "C" fn l_stats(
    ud: *mut c_void,
    out: *mut kvtier_tier_stat,
    cap: usize,
    written: *mut usize,
) -> i32 {
    let l = unsafe { liar(ud) };
    if l.stats_status != 0 {
        return l.stats_status;
    }
    if let Some(extra) = l.stats_extra {
        unsafe { *written = cap + extra };
        return 0;
    }
    if l.stats_fill {
        for i in 0..cap {
            let mut s = kvtier_tier_stat {
                name: [0; 48],
                kind: KVTIER_STAT_GAUGE,
                value: i as f64,
            };
            for (d, c) in s.name.iter_mut().zip(format!("own_{i}").bytes()) {
                *d = c as c_char;
            }
            unsafe { *out.add(i) = s };
        }
        unsafe { *written = cap };
        return 0;
    }
    let mut s = kvtier_tier_stat {
        name: [0; 48],
        kind: l.stats_kind.unwrap_or(KVTIER_STAT_GAUGE),
        value: 5.0,
    };
    for (d, c) in s.name.iter_mut().zip(b"own_gauge") {
        *d = *c as c_char;
    }
    unsafe { *out = s };
    unsafe { *written = 1 };
    0
}

unsafe extern "C" fn l_events(
    ud: *mut c_void,
    out: *mut kvtier_tier_event,
    cap: usize,
    written: *mut usize,
) -> i32 {
    let l = unsafe { liar(ud) };
    if let Some(extra) = l.events_extra {
        unsafe { *written = cap + extra };
        return 0;
    }
    if l.events_given {
        unsafe { *written = 0 };
        return 0;
    }
    l.events_given = true;
    let mut good = kvtier_tier_event {
        kind: KVTIER_EVENT_STORED,
        key: kvtier_key_buf {
            len: 4,
            bytes: [0; 64],
        },
    };
    good.key.bytes[..4].copy_from_slice(&[0, 0, 0, 9]);
    let mut bad = good;
    bad.key.len = l.event_key_len.unwrap_or(4);
    unsafe {
        *out = good;
        *out.add(1) = bad;
        *out.add(2) = good;
        *written = 3;
    }
    0
}

unsafe extern "C" fn l_destroy(ud: *mut c_void) {
    drop(unsafe { Box::from_raw(ud as *mut Liar) });
}

fn vtable(l: Liar) -> kvtier_tier_vtable {
    kvtier_tier_vtable {
        struct_size: std::mem::size_of::<kvtier_tier_vtable>(),
        user_data: Box::into_raw(Box::new(l)) as *mut c_void,
        name: c"liar".as_ptr(),
        medium: KVTIER_MEDIUM_ANY,
        locality: KVTIER_LOCALITY_ANY,
        lookup: Some(l_lookup),
        submit_store: Some(l_submit),
        submit_load: Some(l_submit),
        poll_finished: Some(l_poll),
        touch: None,
        on_new_request: None,
        on_request_finished: None,
        on_schedule_end: None,
        has_pending_work: Some(l_pending),
        drain: None,
        stats: Some(l_stats),
        shutdown: None,
        destroy: Some(l_destroy),
        take_events: Some(l_events),
    }
}

/// A manager of 8 slots with events on, and `l` as its tier 1.
fn manager_with(l: Liar) -> *mut kvtier_manager {
    let mut o = kvtier_manager_options_default();
    o.capacity = 8;
    o.event_capacity = 64;
    let mut m = null_mut();
    assert_eq!(unsafe { kvtier_manager_new(&o, null(), &mut m) }, S::Ok);
    let vt = vtable(l);
    let mut index = 0;
    assert_eq!(
        unsafe { kvtier_manager_add_tier(m, &vt, null(), &mut index) },
        S::Ok,
        "{}",
        last_error()
    );
    assert_eq!(index, 1);
    m
}

/// Tier `tier`'s statistics by name.
fn tier_stats(m: *mut kvtier_manager, tier: usize) -> HashMap<String, f64> {
    let mut buf = vec![unsafe { std::mem::zeroed::<kvtier_tier_stat>() }; 512];
    let mut got = 0;
    assert_eq!(
        unsafe { kvtier_manager_read_tier_stats(m, tier, buf.as_mut_ptr(), buf.len(), &mut got) },
        S::Ok,
        "{}",
        last_error()
    );
    buf[..got]
        .iter()
        .map(|s| {
            let name = unsafe { CStr::from_ptr(s.name.as_ptr()) };
            (name.to_string_lossy().into_owned(), s.value)
        })
        .collect()
}

/// Every message of the error log.
fn errors(m: *mut kvtier_manager) -> Vec<String> {
    let mut out = Vec::new();
    loop {
        let mut buf = [0 as c_char; 1024];
        let mut written = 0;
        assert_eq!(
            unsafe { kvtier_manager_take_error(m, buf.as_mut_ptr(), buf.len(), &mut written) },
            S::Ok
        );
        if written == 0 {
            return out;
        }
        out.push(
            unsafe { CStr::from_ptr(buf.as_ptr()) }
                .to_string_lossy()
                .into_owned(),
        );
    }
}

fn take_events(m: *mut kvtier_manager) -> Vec<Vec<u8>> {
    let mut evs = vec![unsafe { std::mem::zeroed::<kvtier_event>() }; 16];
    let (mut n, mut more) = (0, false);
    assert_eq!(
        unsafe {
            kvtier_manager_take_events(
                m,
                ffi_calls::thread_buffer(),
                evs.as_mut_ptr(),
                evs.len(),
                &mut n,
                &mut more,
            )
        },
        S::Ok
    );
    evs[..n]
        .iter()
        .filter(|e| e.tier == 1)
        .flat_map(|e| {
            (0..e.len).map(|i| {
                let k = unsafe { &*e.keys.add(i) };
                unsafe { std::slice::from_raw_parts(k.data, k.len) }.to_vec()
            })
        })
        .collect()
}

/// Stores one key through request "r", which cascades it to the tier.
fn store_one(m: *mut kvtier_manager) {
    let mut h = 0;
    assert_eq!(
        unsafe { kvtier_manager_request_begin(m, c"r".as_ptr(), null(), &mut h, null_mut()) },
        S::Ok
    );
    store_with(m, h, &[[0u8, 0, 0, 1]], |_, _| {});
}

#[test]
fn a_stats_callback_claiming_more_entries_than_its_buffer_is_counted() {
    for extra in [1, 1000, usize::MAX / 2] {
        let m = manager_with(Liar {
            stats_extra: Some(extra),
            ..Default::default()
        });
        let first = tier_stats(m, 1);
        assert!(!first.contains_key("own_gauge"));
        let second = tier_stats(m, 1);
        assert_eq!(
            second["callback_errors"],
            first["callback_errors"] + 1.0,
            "each read of the lying stats callback counts once"
        );
        assert!(second["callback_errors"] >= 1.0);
        let log = errors(m);
        assert!(
            log.iter()
                .any(|e| e.contains("stats wrote") && e.contains("buffer of")),
            "{log:?}"
        );
        unsafe { kvtier_manager_free(m) };
    }
}

#[test]
fn a_stats_callback_filling_its_whole_buffer_is_read_whole() {
    let m = manager_with(Liar {
        stats_fill: true,
        ..Default::default()
    });
    let st = tier_stats(m, 1);
    let own = st.keys().filter(|k| k.starts_with("own_")).count();
    assert_eq!(own, 64, "the whole batch of 64");
    assert_eq!(st["own_63"], 63.0);
    assert_eq!(st["callback_errors"], 0.0);
    unsafe { kvtier_manager_free(m) };
}

#[test]
fn a_failing_stats_callback_is_counted() {
    let m = manager_with(Liar {
        stats_status: S::Tier as i32,
        ..Default::default()
    });
    let first = tier_stats(m, 1)["callback_errors"];
    assert_eq!(tier_stats(m, 1)["callback_errors"], first + 1.0);
    assert!(
        errors(m)
            .iter()
            .any(|e| e.contains("callback stats returned"))
    );
    unsafe { kvtier_manager_free(m) };
}

#[test]
fn a_stat_of_an_unknown_kind_is_refused_and_counted() {
    let m = manager_with(Liar {
        stats_kind: Some(7),
        ..Default::default()
    });
    let first = tier_stats(m, 1);
    assert!(!first.contains_key("own_gauge"), "kind 7 is no gauge");
    assert_eq!(
        tier_stats(m, 1)["callback_errors"],
        first["callback_errors"] + 1.0
    );
    assert!(errors(m).iter().any(|e| e.contains("kind 7")));
    unsafe { kvtier_manager_free(m) };
    // The same tier with a valid kind reports its gauge.
    let m = manager_with(Liar::default());
    assert_eq!(tier_stats(m, 1)["own_gauge"], 5.0);
    assert_eq!(tier_stats(m, 1)["callback_errors"], 0.0);
    unsafe { kvtier_manager_free(m) };
}

#[test]
fn take_events_claiming_more_events_than_its_buffer_is_counted() {
    for extra in [1, 4000, usize::MAX / 2] {
        let m = manager_with(Liar {
            events_extra: Some(extra),
            ..Default::default()
        });
        assert!(take_events(m).is_empty());
        assert!(tier_stats(m, 1)["callback_errors"] >= 1.0);
        assert!(errors(m).iter().any(|e| e.contains("take_events wrote")));
        unsafe { kvtier_manager_free(m) };
    }
}

#[test]
fn an_event_key_claiming_any_length_over_64_bytes_is_refused_and_counted() {
    for len in [0, 65, 4000, 1 << 16, 4 << 20, usize::MAX] {
        let m = manager_with(Liar {
            event_key_len: Some(len),
            ..Default::default()
        });
        assert_eq!(
            take_events(m),
            vec![vec![0, 0, 0, 9]; 2],
            "key length {len}: the two good events, not the bad one"
        );
        let st = tier_stats(m, 1);
        assert_eq!(st["events_rejected"], 1.0, "key length {len}");
        assert_eq!(st["callback_errors"], 1.0, "key length {len}");
        assert!(
            errors(m)
                .iter()
                .any(|e| e.contains(&format!("{len} bytes")))
        );
        unsafe { kvtier_manager_free(m) };
    }
}

#[test]
fn poll_finished_claiming_more_results_than_its_buffer_is_counted() {
    let m = manager_with(Liar {
        poll_extra: Some(1 << 20),
        ..Default::default()
    });
    assert_eq!(unsafe { kvtier_manager_schedule_end(m) }, S::Ok);
    assert!(tier_stats(m, 1)["callback_errors"] >= 1.0);
    assert!(errors(m).iter().any(|e| e.contains("poll_finished wrote")));
    unsafe { kvtier_manager_free(m) };
}

#[test]
fn a_result_listing_more_arrived_keys_than_any_job_had_is_refused_unread() {
    // One real key is listed; the count claims far more: reading them
    // would run past the tier's array (ASan: a heap-buffer-overflow).
    for claimed in [2, 1000, 1 << 20] {
        let m = manager_with(Liar {
            succeeded_len: Some(claimed),
            ..Default::default()
        });
        store_one(m);
        assert_eq!(unsafe { kvtier_manager_schedule_end(m) }, S::Ok);
        assert_eq!(unsafe { kvtier_manager_schedule_end(m) }, S::Ok);
        let st = tier_stats(m, 1);
        assert_eq!(st["cascade_jobs"], 1.0);
        assert_eq!(st["cascade_failures"], 1.0, "the job counts as failed");
        assert_eq!(st["callback_errors"], 1.0, "claimed {claimed}");
        let log = errors(m);
        assert!(
            log.iter()
                .any(|e| e.contains(&format!("{claimed} arrived keys"))),
            "{log:?}"
        );
        let mut pending = true;
        assert_eq!(
            unsafe { kvtier_manager_has_pending_work(m, &mut pending) },
            S::Ok
        );
        assert!(!pending, "the job was reported");
        unsafe { kvtier_manager_free(m) };
    }
    // Listing as many keys as the job had is fine.
    let m = manager_with(Liar {
        succeeded_len: Some(1),
        ..Default::default()
    });
    store_one(m);
    assert_eq!(unsafe { kvtier_manager_schedule_end(m) }, S::Ok);
    assert_eq!(unsafe { kvtier_manager_schedule_end(m) }, S::Ok);
    assert_eq!(tier_stats(m, 1)["callback_errors"], 0.0);
    unsafe { kvtier_manager_free(m) };
}

#[test]
fn a_pending_flag_of_any_byte_is_read_as_a_bool() {
    for (byte, pending) in [(0u8, false), (1, true), (2, true), (0xff, true)] {
        let m = manager_with(Liar {
            pending_byte: Some(byte),
            ..Default::default()
        });
        let mut out = !pending;
        assert_eq!(
            unsafe { kvtier_manager_has_pending_work(m, &mut out) },
            S::Ok
        );
        assert_eq!(out, pending, "byte {byte}");
        unsafe { kvtier_manager_free(m) };
    }
}

#[test]
fn a_tier_name_longer_than_255_bytes_is_refused() {
    let mut o = kvtier_manager_options_default();
    o.capacity = 8;
    let mut m = null_mut();
    assert_eq!(unsafe { kvtier_manager_new(&o, null(), &mut m) }, S::Ok);
    let long = format!("{}\0", "n".repeat(256));
    let mut vt = vtable(Liar::default());
    vt.name = long.as_ptr() as *const c_char;
    let mut index = 0;
    assert_eq!(
        unsafe { kvtier_manager_add_tier(m, &vt, null(), &mut index) },
        S::InvalidArgument
    );
    assert!(last_error().contains("255"), "{}", last_error());
    // The longest name allowed is taken whole.
    let fits = format!("{}\0", "n".repeat(255));
    vt.name = fits.as_ptr() as *const c_char;
    assert_eq!(
        unsafe { kvtier_manager_add_tier(m, &vt, null(), &mut index) },
        S::Ok,
        "{}",
        last_error()
    );
    unsafe { kvtier_manager_free(m) };
}
