//! The sweep for region files no process maps (`kvtier_core::region::reclaim`):
//! a creator killed with SIGKILL leaves files that the core call, the C
//! call and `kvtier-inspect regions --reclaim` remove, while live regions,
//! half-created ones and anything that is not a region file of this user
//! stay.
//!
//! This test binary has its own `main` (harness = false) so that it can
//! re-execute itself as the process that creates a region and is killed:
//! with `KVTIER_RECLAIM_CHILD` set it plays that part.  Without it, it
//! runs every test below (or those whose name contains an argument).

use c_basics::last_error;
use std::ffi::{CStr, CString, c_void};
use std::os::fd::AsRawFd;
use std::path::Path;
use std::process::Command;
use std::ptr::{null, null_mut};

#[path = "support/c_basics.rs"]
mod c_basics;
#[path = "support/killed_region.rs"]
mod killed_region;

use killed_region::{CHILD_VAR, Holder, PAGE, child_main, killed, opts};
use kvtier::kvtier_status as S;
use kvtier::reclaim::*;
use kvtier_core::region::Region;
use kvtier_core::region::reclaim::{FoundRegion, Kept, reclaim_stale, survey};

const P: &str = "kvtier_reclaim_";

// ----------------------------------------------------------------- helpers

fn names(dir: &Path) -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    v.sort();
    v
}

fn found<'a>(regions: &'a [FoundRegion], name: &str) -> &'a FoundRegion {
    regions
        .iter()
        .find(|r| r.name == name)
        .unwrap_or_else(|| panic!("{name} not found in {regions:#?}"))
}

fn flocked(path: &Path, op: libc::c_int) -> std::fs::File {
    let f = std::fs::File::open(path).unwrap();
    assert_eq!(unsafe { libc::flock(f.as_raw_fd(), op | libc::LOCK_NB) }, 0);
    f
}

fn inspect(args: &[&str]) -> (i32, serde_json::Value) {
    let out = Command::new(env!("CARGO_BIN_EXE_kvtier-inspect"))
        .args(args)
        .output()
        .unwrap();
    let text = String::from_utf8(out.stdout).unwrap();
    let v = serde_json::from_str(&text).unwrap_or_else(|e| panic!("{e}: {text}"));
    (out.status.code().unwrap_or(-1), v)
}

// ------------------------------------------------------------------- tests

fn a_killed_creators_region_is_reclaimed_and_a_live_ones_kept() {
    let t = tempfile::tempdir().unwrap();
    let dead = killed(t.path(), &format!("{P}dead"));
    let live = Holder::spawn("hold", t.path(), &format!("{P}live"));
    let r = reclaim_stale(t.path(), P).unwrap();
    assert_eq!(r.regions.len(), 2, "{r:#?}");
    let d = found(&r.regions, &format!("{P}dead"));
    assert!(d.removed && d.kept.is_none(), "{d:#?}");
    assert_eq!(
        d.bytes(),
        (PAGE + 4 * 2 * PAGE) as u64,
        "header page and slots"
    );
    let l = found(&r.regions, &format!("{P}live"));
    assert!(!l.removed, "{l:#?}");
    assert_eq!(
        l.kept,
        Some(Kept::Held {
            file: format!("{P}live").into()
        })
    );
    assert!(!dead.exists());
    assert_eq!(names(t.path()), [format!("{P}live")]);
    // The next start in that directory maps its own region as usual, and
    // a second sweep finds nothing to remove.
    let next = Region::create_or_join(&opts(t.path(), &format!("{P}next"))).unwrap();
    assert_eq!(reclaim_stale(t.path(), P).unwrap().removed().count(), 0);
    next.close().unwrap();
    live.kill();
    let r = reclaim_stale(t.path(), P).unwrap();
    assert_eq!(r.removed().count(), 1);
    assert!(names(t.path()).is_empty());
}

fn kvtier_inspect_lists_and_reclaims_a_killed_creators_region() {
    let t = tempfile::tempdir().unwrap();
    let d = t.path().to_str().unwrap();
    killed(t.path(), &format!("{P}dead"));
    let live = Holder::spawn("hold", t.path(), &format!("{P}live"));
    std::fs::write(t.path().join(format!("{P}plain")), b"not a region").unwrap();
    let (code, v) = inspect(&["regions", "--directory", d, "--prefix", P, "--json"]);
    assert_eq!(code, 0, "{v}");
    let state = |v: &serde_json::Value, name: &str| {
        let r = v["regions"]
            .as_array()
            .unwrap()
            .iter()
            .find(|r| r["name"] == format!("{P}{name}"))
            .unwrap_or_else(|| panic!("{name} not listed: {v}"))
            .clone();
        (r["state"].as_str().unwrap().to_string(), r)
    };
    assert_eq!(state(&v, "dead").0, "stale", "{v}");
    let (s, l) = state(&v, "live");
    assert_eq!(s, "held", "{v}");
    assert!(
        l["holders"]
            .as_array()
            .unwrap()
            .iter()
            .any(|h| h["pid"] == live.pid() && h["maps"] == true),
        "the live creator maps it: {v}"
    );
    let (s, p) = state(&v, "plain");
    assert_eq!(s, "no_header", "{v}");
    assert!(
        p["reason"].as_str().unwrap().contains("region header"),
        "{v}"
    );
    assert_eq!(
        (v["stale"].clone(), v["removed"].clone()),
        (1.into(), 0.into())
    );
    assert_eq!(names(t.path()).len(), 3, "listing removes nothing");

    let (code, v) = inspect(&[
        "regions",
        "--directory",
        d,
        "--prefix",
        P,
        "--reclaim",
        "--json",
    ]);
    assert_eq!(code, 0, "{v}");
    assert_eq!(state(&v, "dead").0, "removed", "{v}");
    assert_eq!(state(&v, "live").0, "held", "{v}");
    assert_eq!(state(&v, "plain").0, "no_header", "{v}");
    assert_eq!(v["removed"], 1, "{v}");
    assert_eq!(names(t.path()), [format!("{P}live"), format!("{P}plain")]);
    live.kill();

    // The default prefix is the vLLM layer's; text output names each state.
    killed(t.path(), "vllm_kvtier_engine");
    let out = Command::new(env!("CARGO_BIN_EXE_kvtier-inspect"))
        .args(["regions", "--directory", d, "--reclaim"])
        .output()
        .unwrap();
    let text = String::from_utf8(out.stdout).unwrap();
    assert_eq!(out.status.code(), Some(0), "{text}");
    assert!(text.contains("vllm_kvtier_engine: "), "{text}");
    assert!(text.contains(": removed\n"), "{text}");
    assert!(!t.path().join("vllm_kvtier_engine").exists());
    assert!(
        t.path().join(format!("{P}live")).exists(),
        "other prefixes untouched"
    );
}

fn a_creator_killed_before_its_header_leaves_a_page_that_is_kept() {
    let t = tempfile::tempdir().unwrap();
    let name = format!("{P}half");
    let creator = Holder::spawn("start", t.path(), &name);
    let r = reclaim_stale(t.path(), P).unwrap();
    assert!(
        matches!(&r.regions[0].kept, Some(Kept::NoHeader { .. })),
        "a live creator's file before its header: {r:#?}"
    );
    creator.kill();
    let r = reclaim_stale(t.path(), P).unwrap();
    let h = found(&r.regions, &name);
    assert!(!h.removed && h.bytes() == PAGE as u64, "{h:#?}");
    let Some(Kept::NoHeader { why }) = &h.kept else {
        panic!("{h:#?}")
    };
    assert!(why.contains("never written"), "{why}");
    assert!(t.path().join(&name).exists());
    // Opening that name again replaces it, as for any stale file.
    let again = Region::create_or_join(&opts(t.path(), &name)).unwrap();
    again.close().unwrap();
    assert!(names(t.path()).is_empty());
}

fn hostile_entries_are_never_opened_followed_or_removed() {
    let elsewhere = tempfile::tempdir().unwrap();
    let target = killed(elsewhere.path(), &format!("{P}target"));
    let t = tempfile::tempdir().unwrap();
    let at = |n: &str| t.path().join(format!("{P}{n}"));
    std::os::unix::fs::symlink(&target, at("link")).unwrap();
    std::os::unix::fs::symlink("/nonexistent", at("dangling")).unwrap();
    let fifo = CString::new(at("fifo").to_str().unwrap()).unwrap();
    assert_eq!(unsafe { libc::mkfifo(fifo.as_ptr(), 0o600) }, 0);
    std::fs::create_dir(at("dir")).unwrap();
    let _socket = std::os::unix::net::UnixListener::bind(at("socket")).unwrap();
    std::fs::write(at("short"), b"KVTIER").unwrap();
    std::fs::write(at("foreign"), [0x5a; PAGE]).unwrap();
    std::fs::write(at("empty"), b"").unwrap();
    // A killed creator's region under another prefix is not this sweep's.
    let other = killed(t.path(), "other_dead");
    let before = names(t.path());

    let r = reclaim_stale(t.path(), P).unwrap();
    let kept = |n: &str| found(&r.regions, &format!("{P}{n}")).kept.clone();
    let not_regular = |n: &str, kind: &'static str| {
        Some(Kept::NotRegular {
            file: format!("{P}{n}").into(),
            kind,
        })
    };
    assert_eq!(kept("link"), not_regular("link", "symlink"));
    assert_eq!(kept("dangling"), not_regular("dangling", "symlink"));
    assert_eq!(kept("fifo"), not_regular("fifo", "FIFO"));
    assert_eq!(kept("dir"), not_regular("dir", "directory"));
    assert_eq!(kept("socket"), not_regular("socket", "socket"));
    for n in ["short", "foreign", "empty"] {
        assert!(
            matches!(kept(n), Some(Kept::NoHeader { .. })),
            "{n}: {:?}",
            kept(n)
        );
    }
    assert_eq!(r.regions.len(), 8, "{r:#?}");
    assert_eq!(r.removed().count(), 0);
    assert_eq!(names(t.path()), before);
    assert!(target.exists() && other.exists());
    // The symlink's target is a region of its own directory's sweep.
    assert_eq!(
        reclaim_stale(elsewhere.path(), P)
            .unwrap()
            .removed()
            .count(),
        1
    );
}

fn another_users_files_are_kept() {
    if !kvtier_testkit::require::require_root("giving a file to another user") {
        return;
    }
    let t = tempfile::tempdir().unwrap();
    let theirs = killed(t.path(), &format!("{P}theirs"));
    std::os::unix::fs::chown(&theirs, Some(65534), Some(65534)).unwrap();
    // A region of ours with a segment of theirs is kept whole.
    let mixed = killed(t.path(), &format!("{P}mixed"));
    let segment = t.path().join(format!("{P}mixed.seg1"));
    std::fs::write(&segment, [0u8; PAGE]).unwrap();
    std::os::unix::fs::chown(&segment, Some(65534), Some(65534)).unwrap();
    let r = reclaim_stale(t.path(), P).unwrap();
    assert_eq!(
        found(&r.regions, &format!("{P}theirs")).kept,
        Some(Kept::OtherUser {
            file: format!("{P}theirs").into(),
            uid: 65534
        })
    );
    assert_eq!(
        found(&r.regions, &format!("{P}mixed")).kept,
        Some(Kept::OtherUser {
            file: format!("{P}mixed.seg1").into(),
            uid: 65534
        })
    );
    assert!(theirs.exists() && mixed.exists() && segment.exists());
}

fn segments_go_with_their_region_and_a_held_one_keeps_it_whole() {
    let t = tempfile::tempdir().unwrap();
    let name = format!("{P}seg");
    let first = killed(t.path(), &name);
    // Segment files are created like a creator's (slots only, no header).
    for n in [1, 2, 10] {
        std::fs::write(t.path().join(format!("{name}.seg{n}")), [0u8; PAGE]).unwrap();
    }
    let held = flocked(&t.path().join(format!("{name}.seg2")), libc::LOCK_SH);
    let r = reclaim_stale(t.path(), P).unwrap();
    assert_eq!(r.regions.len(), 1, "{r:#?}");
    let s = &r.regions[0];
    let numbers: Vec<String> = s
        .segments
        .iter()
        .map(|f| f.name.to_string_lossy().into_owned())
        .collect();
    assert_eq!(
        numbers,
        [
            format!("{name}.seg1"),
            format!("{name}.seg2"),
            format!("{name}.seg10")
        ]
    );
    assert_eq!(
        s.kept,
        Some(Kept::Held {
            file: format!("{name}.seg2").into()
        })
    );
    assert_eq!(names(t.path()).len(), 4, "kept whole");
    drop(held);
    let r = reclaim_stale(t.path(), P).unwrap();
    assert!(r.regions[0].removed, "{r:#?}");
    assert!(!first.exists());
    assert!(names(t.path()).is_empty());
}

fn segments_without_their_first_file_are_removed_unless_held_or_not_regular() {
    let t = tempfile::tempdir().unwrap();
    let at = |n: &str| t.path().join(format!("{P}{n}"));
    std::fs::write(at("gone.seg1"), [0u8; PAGE]).unwrap();
    std::fs::write(at("gone.seg2"), [0u8; PAGE]).unwrap();
    std::fs::write(at("held.seg1"), [0u8; PAGE]).unwrap();
    let _held = flocked(&at("held.seg1"), libc::LOCK_SH);
    std::os::unix::fs::symlink(at("gone.seg1"), at("link.seg1")).unwrap();
    // Not segment names: first files, which need a header.
    std::fs::write(at("zero.seg01"), [0u8; PAGE]).unwrap();
    let r = reclaim_stale(t.path(), P).unwrap();
    let gone = found(&r.regions, &format!("{P}gone"));
    assert!(
        gone.removed && gone.first.is_none() && gone.segments.len() == 2,
        "{gone:#?}"
    );
    assert_eq!(gone.bytes(), 2 * PAGE as u64);
    assert_eq!(
        found(&r.regions, &format!("{P}held")).kept,
        Some(Kept::Held {
            file: format!("{P}held.seg1").into()
        })
    );
    assert!(matches!(
        found(&r.regions, &format!("{P}link")).kept,
        Some(Kept::NotRegular {
            kind: "symlink",
            ..
        })
    ));
    assert!(matches!(
        found(&r.regions, &format!("{P}zero.seg01")).kept,
        Some(Kept::NoHeader { .. })
    ));
    assert_eq!(
        names(t.path()),
        [
            format!("{P}held.seg1"),
            format!("{P}link.seg1"),
            format!("{P}zero.seg01")
        ]
    );
}

fn a_survey_removes_nothing_and_keeps_for_the_same_reasons() {
    let t = tempfile::tempdir().unwrap();
    killed(t.path(), &format!("{P}dead"));
    std::fs::write(t.path().join(format!("{P}plain")), b"x").unwrap();
    let before = names(t.path());
    let s = survey(t.path(), P).unwrap();
    assert_eq!(names(t.path()), before);
    let dead = found(&s.regions, &format!("{P}dead"));
    assert!(!dead.removed && dead.kept.is_none(), "{dead:#?}");
    let r = reclaim_stale(t.path(), P).unwrap();
    assert_eq!(
        found(&s.regions, &format!("{P}plain")).kept,
        found(&r.regions, &format!("{P}plain")).kept
    );
    assert!(found(&r.regions, &format!("{P}dead")).removed);
}

fn a_file_that_cannot_be_opened_is_reported_and_the_sweep_goes_on() {
    let t = tempfile::tempdir().unwrap();
    let at = |n: &str| t.path().join(format!("{P}{n}"));
    for n in ["a.seg1", "a.seg2", "b.seg1"] {
        std::fs::write(at(n), [0u8; PAGE]).unwrap();
    }
    // The sweep holds a descriptor of the directory and those of one
    // region's files at once (and one for listing the directory before).
    // Allowed two descriptors more than this process has, it opens "a"'s
    // first segment but not its second (EMFILE), then "b"'s one segment.
    let free: Vec<std::fs::File> = (0..3)
        .map(|_| std::fs::File::open("/dev/null").unwrap())
        .collect();
    let limit = free[2].as_raw_fd() as libc::rlim_t;
    drop(free);
    let mut old = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    assert_eq!(unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut old) }, 0);
    let low = libc::rlimit {
        rlim_cur: limit,
        rlim_max: old.rlim_max,
    };
    assert_eq!(unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &low) }, 0);
    let r = reclaim_stale(t.path(), P);
    assert_eq!(unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &old) }, 0);
    let r = r.unwrap();
    let a = found(&r.regions, &format!("{P}a"));
    match &a.kept {
        Some(Kept::Failed { file, error })
            if *file == *format!("{P}a.seg2") && error.starts_with("opening it") => {}
        _ => panic!("{a:#?}"),
    }
    assert!(found(&r.regions, &format!("{P}b")).removed, "{r:#?}");
    assert_eq!(
        names(t.path()),
        [format!("{P}a.seg1"), format!("{P}a.seg2")]
    );
    // With descriptors enough, the next sweep removes them.
    assert_eq!(reclaim_stale(t.path(), P).unwrap().removed().count(), 1);
    assert!(names(t.path()).is_empty());
}

struct Seen {
    name: String,
    reason: String,
    outcome: kvtier_region_reclaim_outcome,
    bytes: u64,
    segments: u32,
    first: bool,
}

unsafe extern "C" fn collect(user_data: *mut c_void, e: *const kvtier_region_reclaim_entry) {
    let seen = unsafe { &mut *(user_data as *mut Vec<Seen>) };
    let e = unsafe { &*e };
    seen.push(Seen {
        name: unsafe { CStr::from_ptr(e.name) }
            .to_string_lossy()
            .into_owned(),
        reason: unsafe { CStr::from_ptr(e.reason) }
            .to_string_lossy()
            .into_owned(),
        outcome: e.outcome,
        bytes: e.bytes,
        segments: e.segment_files,
        first: e.first_file,
    });
}

fn the_c_call_reports_every_region_to_its_callback() {
    let t = tempfile::tempdir().unwrap();
    let d = CString::new(t.path().to_str().unwrap()).unwrap();
    let prefix = CString::new(P).unwrap();
    killed(t.path(), &format!("{P}dead"));
    std::fs::write(t.path().join(format!("{P}dead.seg1")), [0u8; PAGE]).unwrap();
    std::fs::write(t.path().join(format!("{P}plain")), b"x").unwrap();
    std::fs::write(t.path().join(format!("{P}orphan.seg3")), [0u8; PAGE]).unwrap();
    let live = Holder::spawn("hold", t.path(), &format!("{P}live"));
    let mut seen: Vec<Seen> = Vec::new();
    let mut removed = usize::MAX;
    let st = unsafe {
        kvtier_region_reclaim_stale(
            d.as_ptr(),
            prefix.as_ptr(),
            Some(collect),
            (&mut seen as *mut Vec<Seen>).cast(),
            &mut removed,
        )
    };
    assert_eq!(st, S::Ok, "{}", last_error());
    assert_eq!(removed, 2);
    let by_name: Vec<(&str, kvtier_region_reclaim_outcome)> =
        seen.iter().map(|s| (s.name.as_str(), s.outcome)).collect();
    assert_eq!(
        by_name,
        [
            (format!("{P}dead").as_str(), KVTIER_REGION_RECLAIM_REMOVED),
            (format!("{P}live").as_str(), KVTIER_REGION_RECLAIM_HELD),
            (format!("{P}orphan").as_str(), KVTIER_REGION_RECLAIM_REMOVED),
            (
                format!("{P}plain").as_str(),
                KVTIER_REGION_RECLAIM_NO_HEADER
            ),
        ]
    );
    let dead = &seen[0];
    assert_eq!(
        (dead.bytes, dead.segments, dead.first, dead.reason.as_str()),
        ((PAGE + 8 * PAGE + PAGE) as u64, 1, true, "")
    );
    assert_eq!((seen[2].segments, seen[2].first), (1, false));
    assert!(
        seen[1].reason.contains("held by a process"),
        "{}",
        seen[1].reason
    );
    assert!(
        seen[3].reason.contains("region header"),
        "{}",
        seen[3].reason
    );
    live.kill();

    // The callback and the count may be NULL.
    let st = unsafe {
        kvtier_region_reclaim_stale(d.as_ptr(), prefix.as_ptr(), None, null_mut(), null_mut())
    };
    assert_eq!(st, S::Ok, "{}", last_error());
    assert_eq!(names(t.path()), [format!("{P}plain")]);
    // Bad arguments: nothing written.
    let mut removed = 7usize;
    let st =
        unsafe { kvtier_region_reclaim_stale(d.as_ptr(), null(), None, null_mut(), &mut removed) };
    assert_eq!(st, S::NullArgument);
    assert!(last_error().contains("`prefix`"), "{}", last_error());
    for bad in [c"", c"a/b"] {
        let st = unsafe {
            kvtier_region_reclaim_stale(d.as_ptr(), bad.as_ptr(), None, null_mut(), &mut removed)
        };
        assert_eq!(st, S::InvalidArgument, "{bad:?}");
    }
    let file = CString::new(t.path().join(format!("{P}plain")).to_str().unwrap()).unwrap();
    let st = unsafe {
        kvtier_region_reclaim_stale(
            file.as_ptr(),
            prefix.as_ptr(),
            None,
            null_mut(),
            &mut removed,
        )
    };
    assert_eq!(st, S::Io, "{}", last_error());
    assert_eq!(removed, 7, "written on failure");
    // NULL is /dev/shm.
    if Path::new("/dev/shm").is_dir() {
        let mine = format!("kvtier_reclaim_test_{}_", std::process::id());
        killed(Path::new("/dev/shm"), &format!("{mine}dead"));
        let mine_c = CString::new(mine.clone()).unwrap();
        let st = unsafe {
            kvtier_region_reclaim_stale(null(), mine_c.as_ptr(), None, null_mut(), &mut removed)
        };
        assert_eq!((st, removed), (S::Ok, 1), "{}", last_error());
        assert!(!Path::new("/dev/shm").join(format!("{mine}dead")).exists());
    }
}

fn main() {
    if let Ok(spec) = std::env::var(CHILD_VAR) {
        std::process::exit(child_main(&spec));
    }
    let tests: &[(&str, fn())] = &[
        (
            "a_killed_creators_region_is_reclaimed_and_a_live_ones_kept",
            a_killed_creators_region_is_reclaimed_and_a_live_ones_kept,
        ),
        (
            "kvtier_inspect_lists_and_reclaims_a_killed_creators_region",
            kvtier_inspect_lists_and_reclaims_a_killed_creators_region,
        ),
        (
            "a_creator_killed_before_its_header_leaves_a_page_that_is_kept",
            a_creator_killed_before_its_header_leaves_a_page_that_is_kept,
        ),
        (
            "hostile_entries_are_never_opened_followed_or_removed",
            hostile_entries_are_never_opened_followed_or_removed,
        ),
        ("another_users_files_are_kept", another_users_files_are_kept),
        (
            "segments_go_with_their_region_and_a_held_one_keeps_it_whole",
            segments_go_with_their_region_and_a_held_one_keeps_it_whole,
        ),
        (
            "segments_without_their_first_file_are_removed_unless_held_or_not_regular",
            segments_without_their_first_file_are_removed_unless_held_or_not_regular,
        ),
        (
            "a_survey_removes_nothing_and_keeps_for_the_same_reasons",
            a_survey_removes_nothing_and_keeps_for_the_same_reasons,
        ),
        (
            "a_file_that_cannot_be_opened_is_reported_and_the_sweep_goes_on",
            a_file_that_cannot_be_opened_is_reported_and_the_sweep_goes_on,
        ),
        (
            "the_c_call_reports_every_region_to_its_callback",
            the_c_call_reports_every_region_to_its_callback,
        ),
    ];
    kvtier_testkit::own_main::run_tests("region reclaim", tests);
}
