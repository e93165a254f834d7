//! The `kvtier_region` C API, called the way C calls it: defaults, NULL
//! arguments, bad inputs and their statuses, accessors, views, the
//! barrier callback, unlink, and cleanup with lent slots.

#[path = "support/c_basics.rs"]
mod c_basics;

use c_basics::last_error;
use std::ffi::{CStr, CString, c_void};
use std::ptr;
use std::sync::atomic::{AtomicU32, Ordering};

use kvtier::kvtier_status as S;
use kvtier::region::*;

const PAGE: usize = 4096;
static COUNTER: AtomicU32 = AtomicU32::new(0);

fn unique(tag: &str) -> CString {
    CString::new(format!(
        "kvtier-ffi-{}-{}-{tag}",
        std::process::id(),
        COUNTER.fetch_add(1, Ordering::Relaxed)
    ))
    .unwrap()
}

fn path_of(name: &CStr) -> std::path::PathBuf {
    std::path::Path::new("/dev/shm").join(name.to_str().unwrap())
}

fn options(name: &CStr, slots: u32, bytes: usize) -> kvtier_region_options {
    let mut o = kvtier_region_options_default();
    o.name = name.as_ptr();
    o.slot_count = slots;
    o.slot_bytes = bytes;
    o.join_timeout_ms = 5000;
    o
}

fn new(o: &kvtier_region_options) -> Result<*mut kvtier_region, (S, String)> {
    let mut r: *mut kvtier_region = ptr::null_mut();
    let s = unsafe { kvtier_region_new(o, &mut r) };
    if s == S::Ok {
        assert!(!r.is_null());
        Ok(r)
    } else {
        assert!(r.is_null(), "*out is written only on success");
        Err((s, last_error()))
    }
}

#[test]
fn defaults_are_documented_values() {
    let d = kvtier_region_options_default();
    assert!(d.name.is_null() && d.directory.is_null());
    assert_eq!(d.open, KVTIER_REGION_OPEN_MODE_CREATE_OR_JOIN);
    assert_eq!(d.join_timeout_ms, 30_000);
    assert_eq!(d.segments, 1);
    assert_eq!(d.prefault, KVTIER_REGION_PREFAULT_AUTO);
    assert_eq!((d.prefault_share_count, d.prefault_threads), (0, 1));
    assert_eq!(d.mode, 0o600);
    assert!(d.replace_stale && d.barrier.is_none());
}

#[test]
fn null_arguments_are_rejected() {
    let name = unique("null");
    let o = options(&name, 2, PAGE);
    let mut r: *mut kvtier_region = ptr::null_mut();
    assert_eq!(
        unsafe { kvtier_region_new(&o, ptr::null_mut()) },
        S::NullArgument
    );
    // NULL options are the defaults, which name no region; nor does a NULL name.
    assert_eq!(
        unsafe { kvtier_region_new(ptr::null(), &mut r) },
        S::InvalidArgument
    );
    assert!(last_error().contains("region name"), "{}", last_error());
    assert!(r.is_null());
    let mut no_name = o;
    no_name.name = ptr::null();
    assert_eq!(new(&no_name).unwrap_err().0, S::InvalidArgument);
    assert!(last_error().contains("region name"), "{}", last_error());
    let mut out = 0usize;
    assert_eq!(
        unsafe { kvtier_region_stride(ptr::null(), &mut out) },
        S::NullArgument
    );
    assert_eq!(
        unsafe { kvtier_region_close(ptr::null_mut(), ptr::null_mut()) },
        S::NullArgument
    );
    unsafe { kvtier_region_free(ptr::null_mut()) };
    assert!(!path_of(&name).exists());
}

#[test]
fn bad_inputs_map_to_statuses_with_messages() {
    let name = unique("bad");
    let cases: Vec<(kvtier_region_options, S, &str)> = vec![
        (
            options(&name, 0, PAGE),
            S::InvalidArgument,
            "at least one slot",
        ),
        (
            options(&name, 2, 0),
            S::InvalidArgument,
            "at least one slot",
        ),
        (options(&name, 2, PAGE + 8), S::InvalidArgument, "page size"),
        (options(c"a/b", 2, PAGE), S::InvalidArgument, "contains '/'"),
        (
            {
                let mut o = options(&name, 2, PAGE);
                o.directory = c"/no/such/kvtier/dir".as_ptr();
                o
            },
            S::NotFound,
            "does not exist",
        ),
        (
            {
                let mut o = options(&name, 2, PAGE);
                o.prefault = 9;
                o
            },
            S::InvalidArgument,
            "options->prefault",
        ),
        (
            {
                let mut o = options(&name, 2, PAGE);
                o.open = 7;
                o
            },
            S::InvalidArgument,
            "options->open",
        ),
        (
            {
                let mut o = options(&name, 2, PAGE);
                o.open = KVTIER_REGION_OPEN_MODE_JOIN;
                o.join_timeout_ms = 50;
                o
            },
            S::Timeout,
            "never appeared",
        ),
        (options(&name, 1 << 20, 1 << 20), S::NoSpace, "free"),
    ];
    for (o, status, text) in cases {
        let (s, m) = new(&o).unwrap_err();
        assert_eq!(s, status, "{m}");
        assert!(m.contains(text), "{m} lacks {text}");
        assert!(!path_of(&name).exists(), "nothing left on disk after: {m}");
    }
    // An existing name with another layout: both are named.
    let r = new(&options(&name, 2, PAGE)).unwrap();
    let (s, m) = new(&options(&name, 3, PAGE)).unwrap_err();
    assert_eq!(s, S::InvalidArgument);
    assert!(
        m.contains("2 slots of 4096 bytes") && m.contains("3 slots of 4096 bytes"),
        "{m}"
    );
    unsafe { kvtier_region_free(r) };
    assert!(!path_of(&name).exists());
}

#[test]
fn accessors_views_and_roles() {
    let name = unique("acc");
    let mut o = options(&name, 8, 4 * PAGE);
    o.worker_bytes = 2 * PAGE;
    let a = new(&o).unwrap();
    let b = new(&o).unwrap();
    let role = |r| {
        let mut v: kvtier_region_role = 0;
        assert_eq!(unsafe { kvtier_region_read_role(r, &mut v) }, S::Ok);
        v
    };
    assert_eq!(role(a), KVTIER_REGION_ROLE_CREATOR);
    assert_eq!(role(b), KVTIER_REGION_ROLE_JOINER);
    let mut base: *mut c_void = ptr::null_mut();
    let mut stride = 0usize;
    let mut count = 0u32;
    unsafe {
        assert_eq!(kvtier_region_base(a, &mut base), S::Ok);
        assert_eq!(kvtier_region_stride(a, &mut stride), S::Ok);
        assert_eq!(kvtier_region_slot_count(a, &mut count), S::Ok);
    }
    assert_eq!((stride, count), (4 * PAGE, 8));
    let mut slot: *mut c_void = ptr::null_mut();
    assert_eq!(
        unsafe { kvtier_region_slot_address(a, 7, &mut slot) },
        S::Ok
    );
    assert_eq!(slot as usize, base as usize + 7 * stride);
    assert_eq!(
        unsafe { kvtier_region_slot_address(a, 8, &mut slot) },
        S::InvalidArgument
    );
    assert!(last_error().contains("slot 8 out of range"));
    // Bytes written through one handle are read through the other.
    unsafe { ptr::write_bytes(slot.cast::<u8>(), 0x5a, stride) };
    let mut other: *mut c_void = ptr::null_mut();
    assert_eq!(
        unsafe { kvtier_region_slot_address(b, 7, &mut other) },
        S::Ok
    );
    assert_eq!(unsafe { *other.cast::<u8>().add(stride - 1) }, 0x5a);

    let mut v = kvtier_region_view::default();
    assert_eq!(
        unsafe { kvtier_region_worker_view(a, 1, 8, 64, &mut v) },
        S::Ok
    );
    assert_eq!(
        (v.offset, v.stride, v.length, v.rows),
        (2 * PAGE + 8, 4 * PAGE, 64, 8)
    );
    assert_eq!(
        unsafe { kvtier_region_worker_view(a, 2, 0, 1, &mut v) },
        S::InvalidArgument
    );
    assert_eq!(
        unsafe { kvtier_region_canonical_view(a, 0, 4 * PAGE, &mut v) },
        S::Ok
    );
    assert_eq!((v.offset, v.length), (0, 4 * PAGE));
    assert_eq!(
        unsafe { kvtier_region_canonical_view(a, 1, 4 * PAGE, &mut v) },
        S::InvalidArgument
    );

    let mut removed = false;
    assert_eq!(unsafe { kvtier_region_unlink(b, &mut removed) }, S::Ok);
    assert!(removed && !path_of(&name).exists());
    assert_eq!(unsafe { kvtier_region_unlink(a, &mut removed) }, S::Ok);
    assert!(!removed);

    // Lent slots: the mapping is kept and reported.
    assert_eq!(unsafe { kvtier_region_set_lent_slots(a, 1) }, S::Ok);
    let mut kept = false;
    assert_eq!(unsafe { kvtier_region_close(a, &mut kept) }, S::Ok);
    assert!(kept);
    assert_eq!(unsafe { *slot.cast::<u8>() }, 0x5a, "still mapped");
    assert_eq!(unsafe { kvtier_region_close(b, &mut kept) }, S::Ok);
    assert!(!kept);
}

struct BarrierLog {
    calls: u32,
    setup_status: i32,
    reply: i32,
}

unsafe extern "C" fn barrier(user: *mut c_void, setup_status: i32) -> i32 {
    let log = unsafe { &mut *user.cast::<BarrierLog>() };
    log.calls += 1;
    log.setup_status = setup_status;
    log.reply
}

#[test]
fn barrier_runs_once_then_names_are_removed() {
    let name = unique("barrier");
    let mut log = BarrierLog {
        calls: 0,
        setup_status: -1,
        reply: 0,
    };
    let mut o = options(&name, 2, PAGE);
    o.barrier = Some(barrier);
    o.barrier_user_data = (&mut log as *mut BarrierLog).cast();
    let r = new(&o).unwrap();
    assert_eq!((log.calls, log.setup_status), (1, 0));
    assert!(!path_of(&name).exists(), "unlinked after the barrier");
    unsafe { kvtier_region_free(r) };

    // A failed set-up still calls the barrier, then reports its own error.
    let mut bad = o;
    bad.slot_bytes = PAGE + 1;
    let (s, m) = new(&bad).unwrap_err();
    assert_eq!(s, S::InvalidArgument, "{m}");
    assert_eq!(
        (log.calls, log.setup_status),
        (2, S::InvalidArgument as i32)
    );

    // A barrier that times out fails the call as a timeout; one that fails
    // otherwise, or answers a value that is no status, as a failed peer.
    log.reply = S::Timeout as i32;
    let (s, m) = new(&o).unwrap_err();
    assert_eq!(s, S::Timeout, "{m}");
    assert!(m.contains("KVTIER_STATUS_TIMEOUT"), "{m}");
    log.reply = S::Closed as i32;
    let (s, m) = new(&o).unwrap_err();
    assert_eq!(s, S::PeerFailed);
    assert!(m.contains("KVTIER_STATUS_CLOSED"), "{m}");
    log.reply = 12345;
    let (s, m) = new(&o).unwrap_err();
    assert_eq!(s, S::PeerFailed);
    assert!(m.contains("12345"), "{m}");
    assert_eq!(log.calls, 5);
    assert!(
        !path_of(&name).exists(),
        "a failed barrier leaves nothing behind"
    );
}

#[test]
fn a_manager_keeps_its_region_mapped_after_the_region_handle_is_freed() {
    use kvtier::manager::*;
    let name = unique("attach");
    let region = new(&options(&name, 4, PAGE)).expect("region");
    let mut slot: *mut c_void = ptr::null_mut();
    assert_eq!(
        unsafe { kvtier_region_slot_address(region, 3, &mut slot) },
        S::Ok
    );

    let mut m: *mut kvtier_manager = ptr::null_mut();
    let mut o = kvtier_manager_options_default();
    o.capacity = 4;
    assert_eq!(unsafe { kvtier_manager_new(&o, region, &mut m) }, S::Ok);

    unsafe { kvtier_region_free(region) };
    // The manager's view keeps the mapping: writing and reading slot 3 works
    // (an unmapped address would fault here).
    let bytes = unsafe { std::slice::from_raw_parts_mut(slot.cast::<u8>(), PAGE) };
    bytes.fill(0x5a);
    assert!(bytes.iter().all(|b| *b == 0x5a));
    assert_eq!(unsafe { kvtier_manager_shutdown(m) }, S::Ok);
    unsafe { kvtier_manager_free(m) };
    assert!(
        !path_of(&name).exists(),
        "the creator's free removed the name"
    );
}

#[test]
fn a_region_with_fewer_slots_than_the_manager_is_refused() {
    use kvtier::config::kvtier_manager_slot_memory;
    use kvtier::manager::*;
    let name = unique("attach-small");
    let region = new(&options(&name, 4, PAGE)).expect("region");
    let mut m: *mut kvtier_manager = ptr::null_mut();
    let mut o = kvtier_manager_options_default();
    o.capacity = 5;
    assert_eq!(
        unsafe { kvtier_manager_new(&o, region, &mut m) },
        S::InvalidArgument
    );
    let e = last_error();
    assert!(e.contains("4 slots") && e.contains("5"), "{e}");
    assert!(m.is_null(), "nothing written on failure");
    // As many primary slots as the region has: its slots are the manager's.
    o.capacity = 4;
    assert_eq!(unsafe { kvtier_manager_new(&o, region, &mut m) }, S::Ok);
    let (mut base, mut stride, mut bytes, mut count) = (ptr::null_mut(), 0, 0, 0);
    assert_eq!(
        unsafe { kvtier_manager_slot_memory(m, &mut base, &mut stride, &mut bytes, &mut count) },
        S::Ok
    );
    let mut region_base = ptr::null_mut();
    assert_eq!(
        unsafe { kvtier_region_base(region, &mut region_base) },
        S::Ok
    );
    assert_eq!((base, stride, bytes, count), (region_base, PAGE, PAGE, 4));
    unsafe { kvtier_manager_free(m) };
    unsafe { kvtier_region_free(region) };
}
