//! The file-system tier's C API, called the way C calls it: defaults, NULL
//! arguments, bad options and their statuses, and adding a tier over the
//! manager's slot memory.

#[path = "support/c_basics.rs"]
mod c_basics;

use c_basics::last_error;
use std::ffi::{CStr, CString};
use std::ptr;

use kvtier::dialect::{KVTIER_LOCALITY_LOCAL, KVTIER_LOCALITY_REMOTE};
use kvtier::fs::*;
use kvtier::kvtier_status as S;
use kvtier::manager::*;
use kvtier::region::*;

/// Default fs options in `dir`, one read and one write thread.
fn small_options(dir: &CStr) -> kvtier_fs_options {
    let mut o = kvtier_fs_options_default();
    o.directory = dir.as_ptr();
    o.read_threads = 1;
    o.write_threads = 1;
    o
}

struct Setup {
    region: *mut kvtier_region,
    manager: *mut kvtier_manager,
}

impl Setup {
    /// A region of 8 slots and a manager of 8 slots over it.
    fn new(tag: &str) -> Setup {
        let name = CString::new(format!("kvtier-fs-ffi-{}-{tag}", std::process::id())).unwrap();
        let mut ro = kvtier_region_options_default();
        ro.name = name.as_ptr();
        ro.slot_count = 8;
        ro.slot_bytes = 16 << 10;
        let mut region = ptr::null_mut();
        assert_eq!(
            unsafe { kvtier_region_new(&ro, &mut region) },
            S::Ok,
            "{}",
            last_error()
        );
        let mut mo = kvtier_manager_options_default();
        mo.capacity = 8;
        let mut manager = ptr::null_mut();
        let st = unsafe { kvtier_manager_new(&mo, region, &mut manager) };
        if st != S::Ok {
            unsafe { kvtier_region_free(region) };
            manager = ptr::null_mut();
        }
        let s = Setup { region, manager };
        assert!(!s.manager.is_null(), "{}", last_error());
        s
    }
}

impl Drop for Setup {
    fn drop(&mut self) {
        unsafe {
            kvtier_manager_free(self.manager);
            kvtier_region_free(self.region);
        }
    }
}

#[test]
fn defaults_are_documented_values() {
    let d = kvtier_fs_options_default();
    assert!(d.directory.is_null());
    assert!(d.create_dir && d.direct_io && d.unnamed_temp_files && !d.durable && !d.shared);
    assert_eq!(d.capacity_bytes, 0);
    assert_eq!((d.high_watermark, d.low_watermark), (0.95, 0.85));
    assert_eq!((d.read_threads, d.write_threads), (8, 8));
    assert_eq!(d.locality, KVTIER_LOCALITY_LOCAL);
    assert_eq!(d.stale_temp_age_ms, 15 * 60 * 1000);
    assert_eq!(d.layout, KVTIER_FS_LAYOUT_FILES);
    assert_eq!(d.segment_file_bytes, 1 << 30);
    assert!(d.layout_fingerprint.is_null());
    assert_eq!(d.max_age_ms, 0);
    assert!(!d.clear_on_shutdown);
    assert!(!d.key_digests);
}

/// `key_digests` from C: refused in the files layout and with a max age
/// (saying why, nothing written), taken in the segments layout.
#[test]
fn key_digests_need_the_segments_layout_and_no_max_age() {
    let s = Setup::new("digests");
    let dir = tempfile::tempdir().unwrap();
    let cdir = CString::new(dir.path().to_str().unwrap()).unwrap();
    let mut index = 99usize;
    let mut o = small_options(&cdir);
    o.key_digests = true;
    let st = unsafe { kvtier_manager_add_fs_tier(s.manager, &o, &mut index) };
    assert_eq!(st, S::InvalidArgument);
    assert!(
        last_error().contains("key_digests needs the segments layout"),
        "{}",
        last_error()
    );
    o.layout = KVTIER_FS_LAYOUT_SEGMENTS;
    o.capacity_bytes = 64 * ((16 << 10) + 4096);
    o.max_age_ms = 1000;
    let st = unsafe { kvtier_manager_add_fs_tier(s.manager, &o, &mut index) };
    assert_eq!(st, S::InvalidArgument);
    assert!(last_error().contains("max_age_ms"), "{}", last_error());
    assert_eq!(index, 99, "nothing written on failure");
    o.max_age_ms = 0;
    let st = unsafe { kvtier_manager_add_fs_tier(s.manager, &o, &mut index) };
    assert_eq!(st, S::Ok, "{}", last_error());
    assert_ne!(index, 99, "the tier's number written");
}

/// The layout fingerprint from C: adopted by a new directory, refused for
/// another (naming both), a bad one refused; a caller of the 0.2 layout
/// gets no check.
#[test]
fn the_layout_fingerprint_guards_the_directory() {
    let dir = tempfile::tempdir().unwrap();
    let cdir = CString::new(dir.path().to_str().unwrap()).unwrap();
    let a = CString::new("m|bf16|16").unwrap();
    let b = CString::new("m|fp8|16").unwrap();
    let mut index = 99usize;
    {
        let s = Setup::new("fp-a");
        let mut o = small_options(&cdir);
        o.layout_fingerprint = a.as_ptr();
        let st = unsafe { kvtier_manager_add_fs_tier(s.manager, &o, &mut index) };
        assert_eq!(st, S::Ok, "{}", last_error());
    }
    let marker = std::fs::read_to_string(dir.path().join("kvtier-layout")).unwrap();
    assert_eq!(marker, "m|bf16|16\n");
    let s = Setup::new("fp-b");
    index = 99;
    let mut o = small_options(&cdir);
    o.layout_fingerprint = b.as_ptr();
    let st = unsafe { kvtier_manager_add_fs_tier(s.manager, &o, &mut index) };
    assert_eq!(st, S::InvalidArgument);
    let e = last_error();
    assert!(
        e.contains("\"m|bf16|16\"") && e.contains("\"m|fp8|16\""),
        "{e}"
    );
    let bad = CString::new("x".repeat(300)).unwrap();
    o.layout_fingerprint = bad.as_ptr();
    let st = unsafe { kvtier_manager_add_fs_tier(s.manager, &o, &mut index) };
    assert_eq!(st, S::InvalidArgument);
    assert!(
        last_error().contains("layout_fingerprint"),
        "{}",
        last_error()
    );
    assert_eq!(index, 99, "nothing written on failure");
    // A caller of the 0.2 layout has no fingerprint: bytes past its
    // struct_size are not read, and nothing is checked.
    o.layout_fingerprint = b.as_ptr();
    o.struct_size = std::mem::offset_of!(kvtier_fs_options, segment_file_bytes);
    let st = unsafe { kvtier_manager_add_fs_tier(s.manager, &o, &mut index) };
    assert_eq!(st, S::Ok, "{}", last_error());
}

/// `clear_on_shutdown` from C: the manager's shutdown empties the
/// directory (the marker stays).
#[test]
fn clear_on_shutdown_empties_the_directory_at_the_managers_shutdown() {
    let dir = tempfile::tempdir().unwrap();
    let cdir = CString::new(dir.path().to_str().unwrap()).unwrap();
    let f = CString::new("f").unwrap();
    let s = Setup::new("clear");
    let mut o = small_options(&cdir);
    o.layout_fingerprint = f.as_ptr();
    o.clear_on_shutdown = true;
    o.max_age_ms = 3_600_000;
    let mut index = 0usize;
    let st = unsafe { kvtier_manager_add_fs_tier(s.manager, &o, &mut index) };
    assert_eq!(st, S::Ok, "{}", last_error());
    // A block file of the tier's format is not needed: any file under a
    // block name in a fan-out directory is the tier's to remove.
    std::fs::create_dir_all(dir.path().join("ab")).unwrap();
    std::fs::write(dir.path().join("ab/00.kvb"), b"x").unwrap();
    assert_eq!(
        unsafe { kvtier_manager_shutdown(s.manager) },
        S::Ok,
        "{}",
        last_error()
    );
    assert!(!dir.path().join("ab").exists());
    assert!(dir.path().join("kvtier-layout").exists());
}

/// The segments layout from C: chosen by `layout`, refused with a clear
/// error for unknown values and missing capacities; a caller built against
/// the 0.2 header (its `struct_size` ends before `segment_file_bytes`)
/// still attaches a tier, in the files layout.
#[test]
fn the_segments_layout_is_chosen_through_the_options() {
    let s = Setup::new("segments");
    let dir = tempfile::tempdir().unwrap();
    let cdir = CString::new(dir.path().to_str().unwrap()).unwrap();
    let o = small_options(&cdir);
    let mut index = 99usize;
    let mut bad = o;
    bad.layout = 7;
    let st = unsafe { kvtier_manager_add_fs_tier(s.manager, &bad, &mut index) };
    assert_eq!(st, S::InvalidArgument);
    assert!(last_error().contains("layout 7"), "{}", last_error());
    let mut bad = o;
    bad.layout = KVTIER_FS_LAYOUT_SEGMENTS;
    let st = unsafe { kvtier_manager_add_fs_tier(s.manager, &bad, &mut index) };
    assert_eq!(st, S::InvalidArgument);
    assert!(last_error().contains("capacity"), "{}", last_error());
    assert_eq!(index, 99, "nothing written on failure");

    let mut seg = o;
    seg.layout = KVTIER_FS_LAYOUT_SEGMENTS;
    seg.capacity_bytes = 64 * ((16 << 10) + 4096);
    seg.segment_file_bytes = 16 * ((16 << 10) + 4096);
    let st = unsafe { kvtier_manager_add_fs_tier(s.manager, &seg, &mut index) };
    assert_eq!(st, S::Ok, "{}", last_error());
    let segs = std::fs::read_dir(dir.path().join("segments"))
        .unwrap()
        .filter(|e| {
            e.as_ref()
                .unwrap()
                .file_name()
                .to_str()
                .unwrap()
                .ends_with(".kvs")
        })
        .count();
    assert_eq!(segs, 4, "64 records in files of 16");

    let old_dir = tempfile::tempdir().unwrap();
    let cold = CString::new(old_dir.path().to_str().unwrap()).unwrap();
    let mut old = o;
    old.directory = cold.as_ptr();
    old.struct_size = std::mem::offset_of!(kvtier_fs_options, segment_file_bytes);
    // Bytes past the old struct_size are not the caller's: whatever they
    // hold is not read.
    old.layout = 7;
    old.segment_file_bytes = 0;
    let st = unsafe { kvtier_manager_add_fs_tier(s.manager, &old, &mut index) };
    assert_eq!(st, S::Ok, "{}", last_error());
    assert!(
        !old_dir.path().join("segments").exists(),
        "the files layout"
    );
}

#[test]
fn attaches_a_tier_and_rejects_bad_arguments() {
    let s = Setup::new("attach");
    let dir = tempfile::tempdir().unwrap();
    let cdir = CString::new(dir.path().to_str().unwrap()).unwrap();
    let mut o = kvtier_fs_options_default();
    let mut index = 99usize;
    // No directory: the default options (NULL) have none either.
    for options in [&o as *const kvtier_fs_options, ptr::null()] {
        let st = unsafe { kvtier_manager_add_fs_tier(s.manager, options, &mut index) };
        assert_eq!(st, S::InvalidArgument);
        assert!(last_error().contains("directory"), "{}", last_error());
    }
    o.directory = cdir.as_ptr();
    // NULL handles and outputs.
    let st = unsafe { kvtier_manager_add_fs_tier(ptr::null_mut(), &o, &mut index) };
    assert_eq!(st, S::NullArgument);
    let st = unsafe { kvtier_manager_add_fs_tier(s.manager, &o, ptr::null_mut()) };
    assert_eq!(st, S::NullArgument);
    // Bad options: clear errors, nothing attached.
    let mut bad = o;
    bad.low_watermark = 2.0;
    let st = unsafe { kvtier_manager_add_fs_tier(s.manager, &bad, &mut index) };
    assert_eq!(st, S::InvalidArgument);
    assert!(last_error().contains("watermarks"), "{}", last_error());
    let mut bad = o;
    bad.locality = 7;
    let st = unsafe { kvtier_manager_add_fs_tier(s.manager, &bad, &mut index) };
    assert_eq!(st, S::InvalidArgument);
    assert!(last_error().contains("locality"), "{}", last_error());
    let missing = CString::new(dir.path().join("nope").to_str().unwrap()).unwrap();
    let mut bad = o;
    bad.directory = missing.as_ptr();
    bad.create_dir = false;
    let st = unsafe { kvtier_manager_add_fs_tier(s.manager, &bad, &mut index) };
    assert_eq!(st, S::NotFound);
    assert_eq!(index, 99, "nothing written on failure");
    // Attached: the first secondary tier.
    o.locality = KVTIER_LOCALITY_REMOTE;
    o.read_threads = 1;
    o.write_threads = 1;
    let st = unsafe { kvtier_manager_add_fs_tier(s.manager, &o, &mut index) };
    assert_eq!(st, S::Ok, "{}", last_error());
    assert_eq!(index, 1);
}

#[test]
fn a_region_with_fewer_slots_than_the_primary_tier_is_refused() {
    // The region has 8 slots; a manager of 16 would hand its tiers slot
    // ids 8..15, past the end of the mapping.
    let s = Setup::new("fewer-slots");
    let mut mo = kvtier_manager_options_default();
    mo.capacity = 16;
    let mut manager = ptr::null_mut();
    let st = unsafe { kvtier_manager_new(&mo, s.region, &mut manager) };
    assert_eq!(st, S::InvalidArgument, "{}", last_error());
    let e = last_error();
    assert!(e.contains("8 slots") && e.contains("16"), "{e}");
    assert!(manager.is_null(), "nothing written on failure");
    // A region with as many slots as the primary tier (or more) is accepted.
    mo.capacity = 8;
    assert_eq!(
        unsafe { kvtier_manager_new(&mo, s.region, &mut manager) },
        S::Ok
    );
    unsafe { kvtier_manager_free(manager) };
}

#[test]
fn a_manager_without_slot_memory_has_no_room_for_an_fs_tier() {
    let mut manager = ptr::null_mut();
    assert_eq!(
        unsafe { kvtier_manager_new(ptr::null(), ptr::null(), &mut manager) },
        S::Ok
    );
    let dir = tempfile::tempdir().unwrap();
    let cdir = CString::new(dir.path().to_str().unwrap()).unwrap();
    let mut o = kvtier_fs_options_default();
    o.directory = cdir.as_ptr();
    let mut index = 99usize;
    let st = unsafe { kvtier_manager_add_fs_tier(manager, &o, &mut index) };
    assert_eq!(st, S::InvalidArgument);
    let e = last_error();
    assert!(e.contains("slot memory") && e.contains("region"), "{e}");
    assert_eq!(index, 99, "nothing written on failure");
    unsafe { kvtier_manager_free(manager) };
}

/// The fs tier reports its jobs through its own polling: a result handed to
/// `kvtier_manager_complete_job` for its index is refused, nothing queued.
#[test]
fn complete_job_refuses_the_fs_tier() {
    use kvtier::tier::kvtier_job_result;
    let s = Setup::new("complete-job");
    let dir = tempfile::tempdir().unwrap();
    let cdir = CString::new(dir.path().to_str().unwrap()).unwrap();
    let o = small_options(&cdir);
    let mut index = 0usize;
    let st = unsafe { kvtier_manager_add_fs_tier(s.manager, &o, &mut index) };
    assert_eq!(st, S::Ok, "{}", last_error());
    let made_up = kvtier_job_result {
        id: 0,
        success: true,
        succeeded_keys: ptr::null(),
        succeeded_len: 0,
        bytes: 0,
        duration_ns: 0,
    };
    let st = unsafe { kvtier_manager_complete_job(s.manager, index, &made_up) };
    assert_eq!(st, S::InvalidArgument);
    let e = last_error();
    assert!(e.contains("\"fs\"") && e.contains("poll_finished"), "{e}");
    let mut pending = true;
    let st = unsafe { kvtier_manager_has_pending_work(s.manager, &mut pending) };
    assert_eq!(st, S::Ok, "{}", last_error());
    assert!(!pending, "nothing queued");
}
