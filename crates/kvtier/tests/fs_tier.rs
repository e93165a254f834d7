//! The file-system tier, driven directly through the `SecondaryTier` trait:
//! round trips, verification, capacity, restart, crashes, sharing between
//! processes, and failure modes.
//!
//! Some tests re-run this test binary as a child process (an ignored test
//! selected with `--ignored --exact`, told what to do through environment
//! variables) to crash a writer, to share a directory, or to limit file
//! sizes for one process only.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use kvtier_core::events::{Event, EventKind};
use kvtier_core::region::SlotMemory;

use kvtier_core::tiering::{Direction, JobId, SecondaryTier, TierLookup};
use kvtier_core::tiers::fs::Cause;
use kvtier_core::tiers::fs::{FsOptions, FsTier};
use kvtier_core::{Error, Key};

use fs_blocks::{child, files, fill, holds, job, key, load, pattern, request, stat, store, wait};
use kvtier_testkit::fs_blocks;

const SLOT: usize = 64 << 10;

fn opts(dir: &Path) -> FsOptions {
    let mut o = FsOptions::new(dir);
    o.read_threads = 2;
    o.write_threads = 2;
    o
}

/// Options with unnamed temporary files (`O_TMPFILE`) on or off, so both
/// store paths are tested.
fn opts_mode(dir: &Path, unnamed: bool) -> FsOptions {
    let mut o = opts(dir);
    o.unnamed_temp_files = unnamed;
    o
}

/// The store path a child process is told to use.
fn child_mode() -> bool {
    std::env::var("KVTIER_FS_CHILD_UNNAMED").as_deref() != Ok("0")
}

fn mode_env(unnamed: bool) -> (&'static str, String) {
    (
        "KVTIER_FS_CHILD_UNNAMED",
        if unnamed { "1" } else { "0" }.to_string(),
    )
}

/// Bytes of the files under `dir` but the tier's own bookkeeping in its
/// root (the persisted index and its generation).
fn disk_bytes(dir: &Path) -> u64 {
    let own = [dir.join("kvtier-index"), dir.join("kvtier-generation")];
    files(dir, "")
        .iter()
        .filter(|p| !own.contains(p))
        .map(|p| std::fs::metadata(p).map(|m| m.len()).unwrap_or(0))
        .sum()
}

fn events(tier: &mut FsTier) -> Vec<Event> {
    let mut out = Vec::new();
    tier.take_events(usize::MAX, &mut out);
    out
}

#[test]
fn blocks_round_trip_with_events_and_stats() {
    for unnamed in [true, false] {
        round_trip(unnamed);
    }
}

fn round_trip(unnamed: bool) {
    let dir = tempfile::tempdir().unwrap();
    let mem = SlotMemory::anonymous(16, SLOT).unwrap();
    let mut tier = fs_blocks::open_rebuilt(mem.clone(), opts_mode(dir.path(), unnamed)).unwrap();
    if !unnamed {
        assert!(!tier.unnamed_temp_files());
    }
    let ids: Vec<u32> = (0..8).collect();
    let r = store(&mut tier, &mem, 1, &ids);
    assert!(r.success, "{r:?}");
    assert_eq!(r.bytes, 8 * SLOT as u64);
    assert_eq!(files(dir.path(), ".kvb").len(), 8);
    assert!(files(dir.path(), ".tmp").is_empty());
    let ev = events(&mut tier);
    assert_eq!(ev.len(), 8);
    assert!(ev.iter().all(|e| e.kind == EventKind::Stored));
    let req = request();
    assert_eq!(tier.lookup(&key(3), &req), TierLookup::Hit);
    assert_eq!(tier.lookup(&key(99), &req), TierLookup::Miss);

    let r = load(&mut tier, 2, &ids, 8);
    assert!(r.success && r.succeeded_keys.is_none(), "{r:?}");
    for (n, &i) in ids.iter().enumerate() {
        assert!(holds(&mem, 8 + n as u32, i), "block {i} came back wrong");
    }
    // Storing again skips what the tier has (and a duplicate within a job).
    let r = store(&mut tier, &mem, 3, &[0, 1, 20, 20]);
    assert!(r.success);
    assert_eq!(r.bytes, SLOT as u64);
    assert_eq!(stat(&tier, "stores_skipped"), 3.0);
    assert_eq!(stat(&tier, "blocks"), 9.0);
    assert_eq!(stat(&tier, "read_bytes"), (8 * SLOT) as f64);
    assert_eq!(stat(&tier, "write_bytes"), (9 * SLOT) as f64);
    assert_eq!(stat(&tier, "hits"), 1.0);
    assert_eq!(stat(&tier, "misses"), 1.0);
    assert!(!tier.has_pending_work());
    tier.shutdown().unwrap();
}

#[test]
fn durable_stores_round_trip_on_both_store_paths() {
    for unnamed in [true, false] {
        let dir = tempfile::tempdir().unwrap();
        let mem = SlotMemory::anonymous(8, SLOT).unwrap();
        let mut o = opts_mode(dir.path(), unnamed);
        o.durable = true;
        let mut tier = fs_blocks::open_rebuilt(mem.clone(), o.clone()).unwrap();
        assert!(store(&mut tier, &mem, 1, &[1, 2, 3]).success);
        drop(tier);
        let mut tier = fs_blocks::open_rebuilt(mem.clone(), o).unwrap();
        assert_eq!(tier.block_count(), 3);
        assert!(load(&mut tier, 2, &[1, 2, 3], 4).success);
        assert!(holds(&mem, 4, 1) && holds(&mem, 5, 2) && holds(&mem, 6, 3));
    }
}

#[test]
fn a_flipped_byte_or_damaged_header_is_detected_and_never_served() {
    let dir = tempfile::tempdir().unwrap();
    let mem = SlotMemory::anonymous(8, SLOT).unwrap();
    let mut tier = fs_blocks::open_rebuilt(mem.clone(), opts(dir.path())).unwrap();
    assert!(store(&mut tier, &mem, 1, &[1, 2, 3, 4]).success);
    events(&mut tier);
    let path_of = |i: u32| {
        files(dir.path(), ".kvb")
            .into_iter()
            .find(|p| {
                p.file_name()
                    .unwrap()
                    .to_str()
                    .unwrap()
                    .starts_with(&key(i).to_hex())
            })
            .unwrap()
    };
    let flip = |p: &Path, at: usize| {
        let mut b = std::fs::read(p).unwrap();
        b[at] ^= 0x01;
        std::fs::write(p, b).unwrap();
    };
    flip(&path_of(2), 4096 + 12345); // one data bit
    flip(&path_of(3), 50); // a key byte in the header
    let truncated = path_of(4);
    let f = std::fs::OpenOptions::new()
        .write(true)
        .open(&truncated)
        .unwrap();
    f.set_len(4096 + 100).unwrap();

    let r = load(&mut tier, 2, &[1, 2, 3, 4], 4);
    assert!(!r.success);
    assert_eq!(
        r.succeeded_keys,
        Some(vec![key(1)]),
        "only the good block arrives"
    );
    assert!(holds(&mem, 4, 1));
    assert_eq!(tier.errors(Cause::Checksum), 1);
    assert_eq!(tier.errors(Cause::BadHeader), 1);
    assert_eq!(tier.errors(Cause::Truncated), 1);
    assert_eq!(files(dir.path(), ".kvb").len(), 1, "bad files are removed");
    let req = request();
    for i in [2, 3, 4] {
        assert_eq!(tier.lookup(&key(i), &req), TierLookup::Miss);
    }
    let removed: Vec<Key> = events(&mut tier)
        .into_iter()
        .filter(|e| e.kind == EventKind::Removed)
        .map(|e| e.key.unwrap())
        .collect();
    assert_eq!(removed.len(), 3);
    assert_eq!(stat(&tier, "corrupt_blocks_removed"), 3.0);
    let mut errors = Vec::new();
    tier.take_errors(&mut errors);
    assert_eq!(errors.len(), 3);
    assert!(errors.iter().any(|e| e.contains("checksum")), "{errors:?}");
    // The tier keeps serving: the bad blocks can be stored again.
    assert!(store(&mut tier, &mem, 3, &[2, 3]).success);
    assert!(load(&mut tier, 4, &[2, 3], 4).success);
    assert!(holds(&mem, 4, 2) && holds(&mem, 5, 3));
}

#[test]
fn capacity_holds_with_watermarks_and_across_restart() {
    let dir = tempfile::tempdir().unwrap();
    let mem = SlotMemory::anonymous(8, SLOT).unwrap();
    let file = (4096 + SLOT) as u64;
    let mut o = opts(dir.path());
    o.capacity_bytes = 20 * file;
    o.high_watermark = 0.9; // 18 files
    o.low_watermark = 0.5; // 10 files
    let mut tier = fs_blocks::open_rebuilt(mem.clone(), o.clone()).unwrap();
    for j in 0..10u32 {
        let ids: Vec<u32> = (j * 4..j * 4 + 4).collect();
        assert!(store(&mut tier, &mem, j as u64, &ids).success);
        assert!(tier.bytes_used() <= o.capacity_bytes);
        assert!(
            disk_bytes(dir.path()) <= o.capacity_bytes,
            "disk over the bound"
        );
        assert_eq!(disk_bytes(dir.path()), tier.bytes_used());
    }
    // 40 stored: eviction started above 18 files and went down to 10.
    assert!(stat(&tier, "evictions") > 0.0);
    let kept = tier.block_count();
    assert!((10..=18).contains(&kept), "{kept} blocks");
    let req = request();
    // LRU: the newest blocks are there, the oldest went.
    assert_eq!(tier.lookup(&key(39), &req), TierLookup::Hit);
    assert_eq!(tier.lookup(&key(0), &req), TierLookup::Miss);
    let used = tier.bytes_used();
    tier.shutdown().unwrap();
    drop(tier);

    // Restart: same blocks, same accounting.
    let mut tier = fs_blocks::open_rebuilt(mem.clone(), o.clone()).unwrap();
    assert_eq!(tier.rebuild_report().blocks as usize, kept);
    assert_eq!(tier.bytes_used(), used);
    assert_eq!(tier.lookup(&key(39), &req), TierLookup::Hit);
    assert!(load(&mut tier, 50, &[39], 0).success);
    assert!(holds(&mem, 0, 39));
    drop(tier);

    // Restart with a smaller capacity: the bound holds at once.
    o.capacity_bytes = 8 * file;
    let tier = fs_blocks::open_rebuilt(mem.clone(), o.clone()).unwrap();
    assert!(tier.bytes_used() <= (o.capacity_bytes as f64 * 0.5) as u64);
    assert!(tier.rebuild_report().evicted > 0);
    assert_eq!(disk_bytes(dir.path()), tier.bytes_used());
}

#[test]
fn eviction_never_removes_a_block_being_read() {
    let dir = tempfile::tempdir().unwrap();
    let mem = SlotMemory::anonymous(16, SLOT).unwrap();
    let file = (4096 + SLOT) as u64;
    let mut o = opts(dir.path());
    o.capacity_bytes = 4 * file;
    o.high_watermark = 1.0;
    o.low_watermark = 1.0;
    let mut tier = fs_blocks::open_rebuilt(mem.clone(), o).unwrap();
    assert!(store(&mut tier, &mem, 1, &[0, 1, 2, 3]).success);
    // Block 0 is the least recently used; a load of it is in flight while
    // a store needs room for two blocks.
    tier.submit_load(job(2, Direction::Load, &[0], &[10]));
    for (s, i) in [(4u32, 4u32), (5, 5)] {
        fill(&mem, s, i);
    }
    tier.submit_store(job(3, Direction::Store, &[4, 5], &[4, 5]));
    let results = wait(&mut tier, 2);
    assert!(results.iter().all(|r| r.success), "{results:?}");
    assert!(holds(&mem, 10, 0));
    let req = request();
    assert_eq!(tier.lookup(&key(0), &req), TierLookup::Hit);
    assert_eq!(tier.lookup(&key(1), &req), TierLookup::Miss);
    assert_eq!(tier.lookup(&key(2), &req), TierLookup::Miss);
    assert_eq!(tier.block_count(), 4);
}

#[test]
fn a_full_tier_with_every_block_being_read_rejects_stores() {
    let dir = tempfile::tempdir().unwrap();
    let mem = SlotMemory::anonymous(8, SLOT).unwrap();
    let mut o = opts(dir.path());
    o.capacity_bytes = 2 * (4096 + SLOT) as u64;
    o.high_watermark = 1.0;
    o.low_watermark = 1.0;
    let mut tier = fs_blocks::open_rebuilt(mem.clone(), o).unwrap();
    assert!(store(&mut tier, &mem, 1, &[0, 1]).success);
    tier.submit_load(job(2, Direction::Load, &[0, 1], &[4, 5]));
    tier.submit_store(job(3, Direction::Store, &[7], &[2]));
    let results = wait(&mut tier, 2);
    let st = results.iter().find(|r| r.id == JobId(3)).unwrap();
    assert!(!st.success);
    assert_eq!(stat(&tier, "stores_rejected_full"), 1.0);
    assert_eq!(tier.block_count(), 2);
}

#[test]
fn touch_and_loads_refresh_recency() {
    let dir = tempfile::tempdir().unwrap();
    let mem = SlotMemory::anonymous(8, SLOT).unwrap();
    let mut o = opts(dir.path());
    o.capacity_bytes = 3 * (4096 + SLOT) as u64;
    o.high_watermark = 1.0;
    o.low_watermark = 1.0;
    let mut tier = fs_blocks::open_rebuilt(mem.clone(), o).unwrap();
    assert!(store(&mut tier, &mem, 1, &[0, 1, 2]).success);
    let req = request();
    tier.touch(&[key(0)], &req);
    assert!(store(&mut tier, &mem, 2, &[3]).success);
    assert_eq!(tier.lookup(&key(0), &req), TierLookup::Hit);
    assert_eq!(
        tier.lookup(&key(1), &req),
        TierLookup::Miss,
        "1 was the LRU"
    );
    assert!(load(&mut tier, 3, &[2], 5).success);
    assert!(store(&mut tier, &mem, 4, &[4]).success);
    assert_eq!(tier.lookup(&key(2), &req), TierLookup::Hit);
    assert_eq!(tier.lookup(&key(0), &req), TierLookup::Miss);
}

#[test]
fn loads_do_not_queue_behind_stores() {
    let dir = tempfile::tempdir().unwrap();
    let slot = 256 << 10;
    let mem = SlotMemory::anonymous(130, slot).unwrap();
    let mut o = FsOptions::new(dir.path());
    o.read_threads = 1;
    o.write_threads = 1;
    let mut tier = fs_blocks::open_rebuilt(mem.clone(), o).unwrap();
    let mut buf = vec![0u8; slot];
    pattern(1000, &mut buf);
    mem.write(129, 0, &buf).unwrap();
    tier.submit_store(job(1, Direction::Store, &[1000], &[129]));
    wait(&mut tier, 1);
    let ids: Vec<u32> = (0..128).collect();
    let slots: Vec<u32> = (0..128).collect();
    tier.submit_store(job(2, Direction::Store, &ids, &slots));
    tier.submit_load(job(3, Direction::Load, &[1000], &[128]));
    let order: Vec<JobId> = wait(&mut tier, 2).into_iter().map(|r| r.id).collect();
    assert_eq!(
        order,
        vec![JobId(3), JobId(2)],
        "the load waited for the stores"
    );
    assert!(holds(&mem, 128, 1000));
}

#[test]
fn drain_waits_and_shutdown_fails_later_jobs() {
    let dir = tempfile::tempdir().unwrap();
    let mem = SlotMemory::anonymous(64, SLOT).unwrap();
    let mut tier = fs_blocks::open_rebuilt(mem.clone(), opts(dir.path())).unwrap();
    for s in 0..64 {
        fill(&mem, s, s);
    }
    let ids: Vec<u32> = (0..64).collect();
    tier.submit_store(job(1, Direction::Store, &ids, &ids));
    assert!(tier.has_pending_work());
    tier.drain().unwrap();
    let mut out = Vec::new();
    tier.poll_finished(usize::MAX, &mut out);
    assert_eq!(out.len(), 1);
    assert!(out[0].success);
    assert!(!tier.has_pending_work());
    tier.shutdown().unwrap();
    tier.submit_store(job(2, Direction::Store, &[100], &[0]));
    tier.submit_load(job(3, Direction::Load, &[1], &[1]));
    let out = wait(&mut tier, 2);
    assert!(out.iter().all(|r| !r.success));
    assert_eq!(tier.errors(Cause::Closed), 2);
    assert_eq!(tier.lookup(&key(1), &request()), TierLookup::Miss);
    tier.shutdown().unwrap();
}

#[test]
fn jobs_naming_bad_slots_fail_without_harm() {
    let dir = tempfile::tempdir().unwrap();
    let mem = SlotMemory::anonymous(4, SLOT).unwrap();
    let mut tier = fs_blocks::open_rebuilt(mem.clone(), opts(dir.path())).unwrap();
    // More keys than slots, and a slot beyond the region.
    tier.submit_store(job(1, Direction::Store, &[1, 2], &[0]));
    tier.submit_store(job(2, Direction::Store, &[3, 4], &[1, 99]));
    let out = wait(&mut tier, 2);
    assert!(out.iter().all(|r| !r.success), "{out:?}");
    assert_eq!(tier.errors(Cause::BadSlot), 3);
    let req = request();
    assert_eq!(tier.lookup(&key(3), &req), TierLookup::Hit);
    assert_eq!(tier.lookup(&key(4), &req), TierLookup::Miss);
    assert!(files(dir.path(), ".tmp").is_empty());
    tier.submit_load(job(3, Direction::Load, &[3], &[42]));
    let r = wait(&mut tier, 1).remove(0);
    assert_eq!(r.succeeded_keys, Some(vec![]));
    assert_eq!(tier.errors(Cause::BadSlot), 4);
    assert!(!tier.has_pending_work());
}

/// Our rule, beyond vLLM's (which announces nothing for a job that
/// failed in part): a store job `[A, B]` whose B fails announces A, which
/// was stored and is served, and nothing for B.
#[test]
fn a_partly_failed_store_announces_the_keys_it_stored() {
    let dir = tempfile::tempdir().unwrap();
    let mem = SlotMemory::anonymous(4, SLOT).unwrap();
    let mut tier = fs_blocks::open_rebuilt(mem.clone(), opts(dir.path())).unwrap();
    fill(&mem, 1, 3);
    tier.submit_store(job(1, Direction::Store, &[3, 4], &[1, 99]));
    let out = wait(&mut tier, 1);
    assert!(!out[0].success, "{out:?}");
    let ev = events(&mut tier);
    assert_eq!(
        ev,
        vec![Event {
            kind: EventKind::Stored,
            key: Some(key(3))
        }],
        "stored announced for A alone"
    );
    let req = request();
    assert_eq!(tier.lookup(&key(3), &req), TierLookup::Hit);
    assert_eq!(tier.lookup(&key(4), &req), TierLookup::Miss);
}

#[test]
fn restart_skips_bad_files_and_removes_temp_files_of_dead_writers() {
    let dir = tempfile::tempdir().unwrap();
    let mem = SlotMemory::anonymous(8, SLOT).unwrap();
    let mut tier = fs_blocks::open_rebuilt(mem.clone(), opts(dir.path())).unwrap();
    assert!(store(&mut tier, &mem, 1, &[1, 2, 3]).success);
    drop(tier);
    let kvb = files(dir.path(), ".kvb");
    let fanout = kvb[0].parent().unwrap().to_path_buf();
    // A file of an older format version.
    let mut old = std::fs::read(&kvb[0]).unwrap();
    old[8..12].copy_from_slice(&0u32.to_le_bytes());
    std::fs::write(fanout.join(format!("{}.kvb", key(7).to_hex())), &old).unwrap();
    // Garbage under a block name, and a block of another size.
    std::fs::write(fanout.join(format!("{}.kvb", key(8).to_hex())), b"junk").unwrap();
    let mut short = std::fs::read(&kvb[1]).unwrap();
    short.truncate(4096 + 4096);
    std::fs::write(&kvb[1], &short).unwrap();
    // Temporary files: one of a dead writer, one of a live one (this process).
    let dead = {
        let mut c = Command::new("true").spawn().unwrap();
        let pid = c.id();
        c.wait().unwrap();
        pid
    };
    let dead_tmp = fanout.join(format!(".{}.{dead}.0.tmp", key(9).to_hex()));
    let live_tmp = fanout.join(format!(".{}.{}.0.tmp", key(9).to_hex(), std::process::id()));
    std::fs::write(&dead_tmp, b"partial").unwrap();
    std::fs::write(&live_tmp, b"partial").unwrap();
    // The probe files an open writes in the root, left by a process killed
    // while opening: the dead one's go, a live one's (the parent's: this
    // process's own are rewritten by the open) stay.
    let probes = |pid: u32| {
        ["odirect", "tmpfile"].map(|kind| dir.path().join(format!(".{kind}-probe.{pid}.tmp")))
    };
    let live = std::os::unix::process::parent_id();
    for p in probes(dead).iter().chain(&probes(live)) {
        std::fs::write(p, b"probe").unwrap();
    }

    let mut tier = fs_blocks::open_rebuilt(mem.clone(), opts(dir.path())).unwrap();
    let rep = tier.rebuild_report();
    assert_eq!(rep.blocks, 2);
    assert_eq!(rep.skipped, 3);
    assert_eq!(rep.temp_removed, 3);
    assert!(!dead_tmp.exists() && live_tmp.exists());
    assert!(probes(dead).iter().all(|p| !p.exists()));
    assert!(probes(live).iter().all(|p| p.exists()));
    assert_eq!(tier.bytes_used(), 2 * (4096 + SLOT) as u64);
    let req = request();
    assert_eq!(tier.lookup(&key(7), &req), TierLookup::Miss);
    assert_eq!(tier.lookup(&key(8), &req), TierLookup::Miss);
    // The rebuilt blocks are announced, so a router learns of them.
    assert_eq!(events(&mut tier).len(), 2);
    assert_eq!(stat(&tier, "restart_skipped_files"), 3.0);
}

#[test]
fn bad_options_are_clear_errors() {
    let dir = tempfile::tempdir().unwrap();
    let mem = SlotMemory::anonymous(2, SLOT).unwrap();
    let check = |o: FsOptions, needle: &str| {
        let e = fs_blocks::open_rebuilt(mem.clone(), o).unwrap_err();
        assert!(e.to_string().contains(needle), "{e}");
        e
    };
    let mut o = opts(dir.path());
    o.low_watermark = 0.99;
    check(o, "watermarks");
    let mut o = opts(dir.path());
    o.read_threads = 0;
    check(o, "read_threads");
    let mut o = opts(dir.path());
    o.capacity_bytes = 1000;
    check(o, "holds no block");
    check(opts(Path::new("")), "empty");
    let file = dir.path().join("a-file");
    std::fs::write(&file, b"x").unwrap();
    check(opts(&file), "not a directory");
    let mut o = opts(&dir.path().join("missing"));
    o.create_dir = false;
    assert!(matches!(check(o, "create_dir"), Error::NotFound(_)));
    // The default creates it.
    assert!(fs_blocks::open_rebuilt(mem.clone(), opts(&dir.path().join("made/here"))).is_ok());
}

#[test]
fn a_missing_directory_or_a_file_in_its_place_fails_stores_and_the_tier_keeps_serving() {
    for unnamed in [true, false] {
        missing_directory(unnamed);
    }
}

fn missing_directory(unnamed: bool) {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("cache");
    let mem = SlotMemory::anonymous(8, SLOT).unwrap();
    let mut tier = fs_blocks::open_rebuilt(mem.clone(), opts_mode(&root, unnamed)).unwrap();
    assert!(store(&mut tier, &mem, 1, &[1]).success);
    // A regular file where key 2's fan-out directory should be.
    let a = kvtier_core::tiers::fs::format::Layout::fanout(&key(2));
    let blocker = root.join(std::str::from_utf8(&a).unwrap());
    let other = (3..200)
        .find(|&i| kvtier_core::tiers::fs::format::Layout::fanout(&key(i)) != a)
        .unwrap();
    let _ = std::fs::remove_dir_all(&blocker);
    std::fs::write(&blocker, b"not a directory").unwrap();
    let r = store(&mut tier, &mem, 2, &[2, other]);
    assert!(!r.success);
    assert_eq!(tier.errors(Cause::MissingDir), 1);
    let req = request();
    assert_eq!(tier.lookup(&key(2), &req), TierLookup::Miss);
    assert_eq!(tier.lookup(&key(other), &req), TierLookup::Hit);
    assert!(files(&root, ".tmp").is_empty());
    // The whole directory goes away: stores fail, counted, and the failed
    // store takes the blocks out of the index; loads fail.
    std::fs::remove_dir_all(&root).unwrap();
    let r = store(&mut tier, &mem, 3, &[5]);
    assert!(!r.success);
    assert_eq!(tier.errors(Cause::MissingDir), 2);
    assert_eq!(tier.lookup(&key(1), &req), TierLookup::Miss);
    let r = load(&mut tier, 4, &[1], 4);
    assert!(!r.success);
    assert_eq!(tier.errors(Cause::NotPresent), 1);
    // It comes back: the tier serves again.
    std::fs::create_dir_all(&root).unwrap();
    assert!(store(&mut tier, &mem, 5, &[5]).success);
    assert!(load(&mut tier, 6, &[5], 4).success);
    assert!(holds(&mem, 4, 5));
}

#[test]
fn permission_denied_fails_stores_when_not_root() {
    // SAFETY: plain getter.
    if unsafe { libc::geteuid() } == 0 {
        // Root ignores directory permissions; the file-in-place-of-a-
        // directory and missing-directory test covers the same code path.
        return;
    }
    for unnamed in [true, false] {
        permission_denied(unnamed);
    }
}

fn permission_denied(unnamed: bool) {
    use std::os::unix::fs::PermissionsExt;
    let dir = tempfile::tempdir().unwrap();
    let mem = SlotMemory::anonymous(4, SLOT).unwrap();
    let mut tier = fs_blocks::open_rebuilt(mem.clone(), opts_mode(dir.path(), unnamed)).unwrap();
    assert!(store(&mut tier, &mem, 1, &[1]).success);
    // The directory and its fan-out directories become read-only.
    let mut dirs = vec![dir.path().to_path_buf()];
    dirs.extend(
        std::fs::read_dir(dir.path())
            .unwrap()
            .flatten()
            .map(|e| e.path())
            .filter(|p| p.is_dir()),
    );
    let set = |mode: u32| {
        for d in &dirs {
            std::fs::set_permissions(d, std::fs::Permissions::from_mode(mode)).unwrap();
        }
    };
    set(0o555);
    let r = store(&mut tier, &mem, 2, &[2]);
    set(0o755);
    assert!(!r.success);
    assert_eq!(tier.errors(Cause::Permission), 1);
    assert!(load(&mut tier, 3, &[1], 2).success);
}

/// Child: stores with RLIMIT_FSIZE below one block file, as a full disk.
#[test]
#[ignore = "run by disk_full_fails_stores_cleanly as a child process"]
fn child_disk_full() {
    let Ok(dir) = std::env::var("KVTIER_FS_CHILD_DIR") else {
        panic!("run only as a child process");
    };
    let mem = SlotMemory::anonymous(4, SLOT).unwrap();
    let mut tier =
        fs_blocks::open_rebuilt(mem.clone(), opts_mode(Path::new(&dir), child_mode())).unwrap();
    assert!(store(&mut tier, &mem, 1, &[1]).success);
    // SAFETY: ignoring SIGXFSZ makes an oversized write fail with EFBIG
    // instead of killing the process; then the file-size limit.
    unsafe {
        libc::signal(libc::SIGXFSZ, libc::SIG_IGN);
        let lim = libc::rlimit {
            rlim_cur: (SLOT / 2) as libc::rlim_t,
            rlim_max: libc::RLIM_INFINITY,
        };
        assert_eq!(libc::setrlimit(libc::RLIMIT_FSIZE, &lim), 0);
    }
    let r = store(&mut tier, &mem, 2, &[2, 3]);
    assert!(!r.success);
    assert_eq!(tier.errors(Cause::NoSpace), 2);
    assert!(
        files(Path::new(&dir), ".tmp").is_empty(),
        "partial files left"
    );
    assert_eq!(files(Path::new(&dir), ".kvb").len(), 1);
    let req = request();
    assert_eq!(tier.lookup(&key(2), &req), TierLookup::Miss);
    // Still serving what it has.
    let r = load(&mut tier, 3, &[1], 3);
    assert!(r.success);
    assert!(holds(&mem, 3, 1));
}

#[test]
fn disk_full_fails_stores_cleanly() {
    for unnamed in [true, false] {
        let dir = tempfile::tempdir().unwrap();
        let status = child(
            "child_disk_full",
            &[
                ("KVTIER_FS_CHILD_DIR", dir.path().display().to_string()),
                mode_env(unnamed),
            ],
        )
        .status()
        .unwrap();
        assert!(status.success(), "child failed: {status}");
    }
}

/// Child: stores blocks forever (until killed), in jobs of 8.
#[test]
#[ignore = "run by kill_9_mid_store_then_restart_serves_only_whole_blocks"]
fn child_writer() {
    let Ok(dir) = std::env::var("KVTIER_FS_CHILD_DIR") else {
        panic!("run only as a child process");
    };
    let mem = SlotMemory::anonymous(8, SLOT).unwrap();
    let mut o = opts_mode(Path::new(&dir), child_mode());
    o.write_threads = 4;
    let mut tier = fs_blocks::open_rebuilt(mem.clone(), o).unwrap();
    let mut next = 0u32;
    let mut out = Vec::new();
    for id in 0.. {
        let ids: Vec<u32> = (next..next + 8).collect();
        let slots: Vec<u32> = (0..8).collect();
        for (s, &i) in slots.iter().zip(&ids) {
            fill(&mem, *s, i);
        }
        tier.submit_store(job(id, Direction::Store, &ids, &slots));
        next += 8;
        // Slots are refilled for the next job only once this one is done.
        while tier.has_pending_work() {
            tier.poll_finished(usize::MAX, &mut out);
            std::thread::sleep(Duration::from_micros(100));
        }
    }
}

#[test]
fn kill_9_mid_store_then_restart_serves_only_whole_blocks() {
    for unnamed in [true, false] {
        kill_9_then_restart(unnamed);
    }
}

fn kill_9_then_restart(unnamed: bool) {
    let dir = tempfile::tempdir().unwrap();
    let mut proc = child(
        "child_writer",
        &[
            ("KVTIER_FS_CHILD_DIR", dir.path().display().to_string()),
            mode_env(unnamed),
        ],
    )
    .spawn()
    .unwrap();
    let deadline = Instant::now() + Duration::from_secs(30);
    while files(dir.path(), ".kvb").len() < 200 {
        assert!(Instant::now() < deadline, "the writer stored too little");
        std::thread::sleep(Duration::from_millis(5));
    }
    // SAFETY: SIGKILL to our own child.
    unsafe { libc::kill(proc.id() as libc::pid_t, libc::SIGKILL) };
    proc.wait().unwrap();

    let on_disk = files(dir.path(), ".kvb").len();
    let leftovers = files(dir.path(), ".tmp").len();
    let mem = SlotMemory::anonymous(8, SLOT).unwrap();
    let mut tier = fs_blocks::open_rebuilt(mem.clone(), opts_mode(dir.path(), unnamed)).unwrap();
    if tier.unnamed_temp_files() {
        assert_eq!(leftovers, 0, "unnamed files leave nothing behind");
    }
    let rep = tier.rebuild_report();
    assert_eq!(rep.temp_removed as usize, leftovers);
    assert_eq!(rep.blocks as usize, on_disk, "{rep:?}");
    assert_eq!(
        rep.skipped, 0,
        "a torn block was visible under its final name"
    );
    assert!(
        files(dir.path(), ".tmp").is_empty(),
        "crash leftovers not removed"
    );
    // Every indexed block is whole and verified.
    let req = request();
    let stored: Vec<u32> = (0..100_000)
        .filter(|&i| tier.lookup(&key(i), &req) == TierLookup::Hit)
        .collect();
    assert_eq!(stored.len(), on_disk);
    for chunk in stored.chunks(8) {
        let r = load(&mut tier, 1, chunk, 0);
        assert!(r.success, "{r:?}");
        for (s, &i) in chunk.iter().enumerate() {
            assert!(holds(&mem, s as u32, i), "block {i} is not what was stored");
        }
    }
}

/// Child: shares the directory; stores blocks 500..508, then loads blocks
/// 600..604 that the parent stored, found through existence checks.
#[test]
#[ignore = "run by two_processes_share_one_directory"]
fn child_sharer() {
    let Ok(dir) = std::env::var("KVTIER_FS_CHILD_DIR") else {
        panic!("run only as a child process");
    };
    let step = std::env::var("KVTIER_FS_CHILD_STEP").unwrap();
    let mem = SlotMemory::anonymous(8, SLOT).unwrap();
    let mut o = opts(Path::new(&dir));
    o.shared = true;
    let mut tier = fs_blocks::open_rebuilt(mem.clone(), o).unwrap();
    if step == "store" {
        let ids: Vec<u32> = (500..508).collect();
        assert!(store(&mut tier, &mem, 1, &ids).success);
        return;
    }
    let req = request();
    let ids: Vec<u32> = (600..604).collect();
    for &i in &ids {
        // A minute: only a hang waits that long.
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            match tier.lookup(&key(i), &req) {
                TierLookup::Hit => break,
                TierLookup::Retry => tier.on_schedule_end(),
                TierLookup::Miss => panic!("block {i} not found"),
            }
            assert!(
                Instant::now() < deadline,
                "block {i}'s existence check never settled"
            );
            std::thread::sleep(Duration::from_millis(1));
        }
    }
    let r = load(&mut tier, 2, &ids, 0);
    assert!(r.success, "{r:?}");
    for (s, &i) in ids.iter().enumerate() {
        assert!(holds(&mem, s as u32, i));
    }
}

fn lookup_settled(tier: &mut FsTier, k: Key) -> TierLookup {
    let req = request();
    // A minute: only a hang waits that long.
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let r = tier.lookup(&k, &req);
        if r != TierLookup::Retry {
            return r;
        }
        assert!(Instant::now() < deadline, "lookup kept answering RETRY");
        std::thread::sleep(Duration::from_millis(1));
    }
}

#[test]
fn two_processes_share_one_directory() {
    let dir = tempfile::tempdir().unwrap();
    let mem = SlotMemory::anonymous(16, SLOT).unwrap();
    let mut o = opts(dir.path());
    o.shared = true;
    let mut tier = fs_blocks::open_rebuilt(mem.clone(), o).unwrap();
    let req = request();
    // Before the other process stores, a check finds nothing.
    assert_eq!(tier.lookup(&key(500), &req), TierLookup::Retry);
    assert_eq!(lookup_settled(&mut tier, key(500)), TierLookup::Miss);
    tier.on_schedule_end();

    let env = |step: &str| {
        vec![
            ("KVTIER_FS_CHILD_DIR", dir.path().display().to_string()),
            ("KVTIER_FS_CHILD_STEP", step.to_string()),
        ]
    };
    let st = child("child_sharer", &env("store")).status().unwrap();
    assert!(st.success(), "{st}");
    // The other process's blocks: RETRY while the check runs, then HIT.
    assert_eq!(tier.lookup(&key(500), &req), TierLookup::Retry);
    assert_eq!(lookup_settled(&mut tier, key(500)), TierLookup::Hit);
    assert_eq!(stat(&tier, "blocks_adopted"), 1.0);
    let r = load(&mut tier, 1, &[500], 8);
    assert!(r.success, "{r:?}");
    assert!(holds(&mem, 8, 500));
    // Ours, found by the other process while this tier stays open.
    let ids: Vec<u32> = (600..604).collect();
    assert!(store(&mut tier, &mem, 2, &ids).success);
    let st = child("child_sharer", &env("load")).status().unwrap();
    assert!(st.success(), "{st}");
    assert!(stat(&tier, "existence_checks") >= 2.0);
}

/// Where block `i`'s file lives under `root`.
fn block_file(root: &Path, i: u32) -> PathBuf {
    kvtier_core::tiers::fs::format::Layout::new(root.to_path_buf()).block_path(&key(i))
}

#[test]
fn an_unreadable_block_fails_one_load_then_answers_miss() {
    for unnamed in [true, false] {
        let dir = tempfile::tempdir().unwrap();
        let mem = SlotMemory::anonymous(8, SLOT).unwrap();
        let mut tier =
            fs_blocks::open_rebuilt(mem.clone(), opts_mode(dir.path(), unnamed)).unwrap();
        assert!(store(&mut tier, &mem, 1, &[1, 2]).success);
        let _ = events(&mut tier);
        // A directory in place of block 1's file: not a regular file, so
        // never read (a foreign entry), and waiting will not change that.
        let path = block_file(dir.path(), 1);
        std::fs::remove_file(&path).unwrap();
        std::fs::create_dir(&path).unwrap();
        let req = request();
        assert_eq!(tier.lookup(&key(1), &req), TierLookup::Hit);
        let r = load(&mut tier, 2, &[1, 2], 4);
        assert!(!r.success);
        assert_eq!(r.succeeded_keys, Some(vec![key(2)]));
        assert!(holds(&mem, 5, 2));
        assert_eq!(tier.errors(Cause::Foreign), 1);
        assert!(path.is_dir(), "what is not a proven-bad block stays");
        // The block left the tier: the next lookup is a MISS, not another
        // promotion that fails the same way.
        assert_eq!(tier.lookup(&key(1), &req), TierLookup::Miss);
        assert_eq!(tier.lookup(&key(2), &req), TierLookup::Hit);
        assert_eq!(tier.block_count(), 1);
        assert_eq!(tier.bytes_used(), (4096 + SLOT) as u64);
        assert_eq!(stat(&tier, "unreadable_blocks_dropped"), 1.0);
        let ev = events(&mut tier);
        assert_eq!(
            ev,
            vec![Event {
                kind: EventKind::Removed,
                key: Some(key(1))
            }]
        );
        tier.shutdown().unwrap();
    }
}

#[test]
fn a_removed_directory_takes_its_blocks_out_of_the_index() {
    for unnamed in [true, false] {
        removed_directory(unnamed);
    }
}

fn removed_directory(unnamed: bool) {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("cache");
    let mem = SlotMemory::anonymous(8, SLOT).unwrap();
    let one = (4096 + SLOT) as u64;
    let mut tier = fs_blocks::open_rebuilt(mem.clone(), opts_mode(&root, unnamed)).unwrap();
    assert!(store(&mut tier, &mem, 1, &[1, 2, 3, 4]).success);
    assert_eq!((tier.block_count(), tier.bytes_used()), (4, 4 * one));
    let _ = events(&mut tier);
    // The whole directory goes: the first store that finds it gone drops
    // every block from the index, announcing each as removed.
    std::fs::remove_dir_all(&root).unwrap();
    assert!(!store(&mut tier, &mem, 2, &[5]).success);
    assert_eq!((tier.block_count(), tier.bytes_used()), (0, 0));
    assert_eq!(stat(&tier, "blocks_found_missing"), 4.0);
    let req = request();
    assert_eq!(tier.lookup(&key(1), &req), TierLookup::Miss);
    let removed = events(&mut tier)
        .iter()
        .filter(|e| e.kind == EventKind::Removed)
        .count();
    assert_eq!(removed, 4);
    // It comes back and fills again; then it is emptied behind the tier's
    // back and made anew between two stores.  The store that has to make a
    // fan-out directory again proves the blocks indexed there gone.
    std::fs::create_dir_all(&root).unwrap();
    let fan = kvtier_core::tiers::fs::format::Layout::fanout;
    let same = (7..400).find(|&i| fan(&key(i)) == fan(&key(6))).unwrap();
    let other = (7..400).find(|&i| fan(&key(i)) != fan(&key(6))).unwrap();
    assert!(store(&mut tier, &mem, 3, &[6, other]).success);
    assert_eq!(tier.block_count(), 2);
    std::fs::remove_dir_all(&root).unwrap();
    std::fs::create_dir_all(&root).unwrap();
    assert!(store(&mut tier, &mem, 4, &[same]).success);
    assert_eq!(tier.lookup(&key(6), &req), TierLookup::Miss);
    assert_eq!(tier.lookup(&key(same), &req), TierLookup::Hit);
    // A block in another fan-out directory is found gone when a load
    // reads it.
    assert!(!load(&mut tier, 5, &[other], 4).success);
    assert_eq!(tier.lookup(&key(other), &req), TierLookup::Miss);
    assert_eq!((tier.block_count(), tier.bytes_used()), (1, one));
    assert_eq!(tier.bytes_used(), disk_bytes(&root));
    tier.shutdown().unwrap();
}

#[test]
fn files_skipped_at_restart_are_removed_and_counted() {
    let dir = tempfile::tempdir().unwrap();
    let mem = SlotMemory::anonymous(8, SLOT).unwrap();
    let mut tier = fs_blocks::open_rebuilt(mem.clone(), opts(dir.path())).unwrap();
    assert!(store(&mut tier, &mem, 1, &[1, 2, 3]).success);
    drop(tier);
    // A truncated block, garbage under a block name, and a block file
    // whose header names another key.
    let mut short = std::fs::read(block_file(dir.path(), 1)).unwrap();
    short.truncate(4096 + 100);
    std::fs::write(block_file(dir.path(), 1), &short).unwrap();
    let junk = block_file(dir.path(), 8);
    std::fs::create_dir_all(junk.parent().unwrap()).unwrap();
    std::fs::write(&junk, b"junk").unwrap();
    let swapped = block_file(dir.path(), 9);
    std::fs::create_dir_all(swapped.parent().unwrap()).unwrap();
    std::fs::copy(block_file(dir.path(), 2), &swapped).unwrap();
    // A file that is not a block file is not the tier's to remove.
    let notes = dir.path().join("README.txt");
    std::fs::write(&notes, b"mine").unwrap();

    let tier = fs_blocks::open_rebuilt(mem.clone(), opts(dir.path())).unwrap();
    let rep = tier.rebuild_report();
    assert_eq!((rep.blocks, rep.skipped, rep.removed), (2, 3, 3));
    assert_eq!(stat(&tier, "restart_removed_files"), 3.0);
    assert!(!block_file(dir.path(), 1).exists());
    assert!(!junk.exists() && !swapped.exists() && notes.exists());
    // What the tier counts is what the directory holds (besides the note).
    assert_eq!(tier.bytes_used() + 4, disk_bytes(dir.path()));
}

#[test]
fn events_stay_within_the_capacity_when_nobody_takes_them() {
    use kvtier_core::primary::StorePlan;
    use kvtier_core::primary::{PrimaryConfig, PrimaryTier};
    use kvtier_core::tiering::{Manager, ManagerOptions, TierOptions};
    const CAP: usize = 16;
    const N: u32 = 100;
    let (d1, d2) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let mem = SlotMemory::anonymous(N, 4096).unwrap();
    let primary = PrimaryTier::new(PrimaryConfig {
        capacity: N,
        event_capacity: CAP,
        ..Default::default()
    })
    .unwrap();
    let m = Manager::new(primary, ManagerOptions::default());
    m.add_tier(Box::new(
        fs_blocks::open_rebuilt(mem.clone(), opts(d1.path())).unwrap(),
    ))
    .unwrap();
    // A second tier with its events turned off.
    let off = TierOptions {
        events: false,
        ..Default::default()
    };
    m.add_tier_with(
        Box::new(fs_blocks::open_rebuilt(mem.clone(), opts(d2.path())).unwrap()),
        off,
    )
    .unwrap();
    let r = m.request_begin("r", Default::default()).unwrap().id;
    let keys: Vec<Key> = (0..N).map(key).collect();
    for batch in keys.chunks(10) {
        let mut plan = StorePlan::default();
        m.prepare_store(r, batch, &mut plan).unwrap();
        m.complete_store(r, &plan.to_store, true).unwrap();
    }
    let deadline = Instant::now() + Duration::from_secs(30);
    while m.has_pending_work().unwrap() {
        assert!(Instant::now() < deadline, "cascades did not finish");
        m.schedule_end().unwrap();
        std::thread::sleep(Duration::from_millis(1));
    }
    let stats = m.stats().unwrap();
    let stat = |tier: usize, name: &str| {
        stats
            .iter()
            .find(|s| s.tier == Some(tier) && s.stat.name == name)
            .unwrap_or_else(|| panic!("no stat {name} for tier {tier}"))
            .stat
            .value
    };
    assert_eq!(stat(1, "blocks"), N as f64);
    assert_eq!(stat(1, "events_queued"), CAP as f64);
    assert_eq!(stat(1, "events_dropped"), (N as usize - CAP) as f64);
    assert_eq!(stat(0, "events_dropped"), (N as usize - CAP) as f64);
    assert_eq!(
        (stat(2, "events_queued"), stat(2, "events_dropped")),
        (0.0, 0.0)
    );
    let mut ev = Vec::new();
    m.take_events(&mut ev).unwrap();
    assert_eq!(ev.len(), 2 * CAP);
    assert_eq!(ev.iter().filter(|e| e.tier == 1).count(), CAP);
    assert!(
        ev.iter()
            .all(|e| e.tier < 2 && e.event.kind == EventKind::Stored)
    );
    ev.clear();
    m.take_events(&mut ev).unwrap();
    assert!(ev.is_empty());
}

#[test]
fn a_restart_indexes_only_blocks_in_fanout_directories() {
    let dir = tempfile::tempdir().unwrap();
    let mem = SlotMemory::anonymous(8, SLOT).unwrap();
    let mut tier = fs_blocks::open_rebuilt(mem.clone(), opts(dir.path())).unwrap();
    assert!(store(&mut tier, &mem, 1, &[1, 2, 3]).success);
    drop(tier);
    // Whole blocks moved under directories whose names are not fanout
    // names (two hex digits): not the tier's, neither indexed nor removed.
    let mut moved = Vec::new();
    for (i, sub) in [(2, "zz"), (3, "abc")] {
        let from = block_file(dir.path(), i);
        let to = dir.path().join(sub).join(from.file_name().unwrap());
        std::fs::create_dir(to.parent().unwrap()).unwrap();
        std::fs::rename(&from, &to).unwrap();
        moved.push(to);
    }
    let mut tier = fs_blocks::open_rebuilt(mem.clone(), opts(dir.path())).unwrap();
    let rep = tier.rebuild_report();
    assert_eq!((rep.blocks, rep.skipped, rep.removed), (1, 0, 0));
    assert!(moved.iter().all(|p| p.exists()));
    let req = request();
    assert_eq!(tier.lookup(&key(1), &req), TierLookup::Hit);
    assert_eq!(tier.lookup(&key(2), &req), TierLookup::Miss);
}

#[test]
fn a_restart_evicts_only_above_the_high_watermark_and_down_to_the_low_one() {
    let dir = tempfile::tempdir().unwrap();
    let mem = SlotMemory::anonymous(8, SLOT).unwrap();
    let file = (4096 + SLOT) as u64;
    let mut tier = fs_blocks::open_rebuilt(mem.clone(), opts(dir.path())).unwrap();
    assert!(store(&mut tier, &mem, 1, &[1, 2, 3]).success);
    drop(tier);
    let mut bounded = opts(dir.path());
    bounded.capacity_bytes = 4 * file;
    bounded.high_watermark = 0.75; // 3 files
    bounded.low_watermark = 0.5; // 2 files
    let counts = |tier: &FsTier| {
        let rep = tier.rebuild_report();
        (rep.blocks, rep.evicted)
    };
    // Exactly at the high watermark: nothing evicted.
    let tier = fs_blocks::open_rebuilt(mem.clone(), bounded.clone()).unwrap();
    assert_eq!(counts(&tier), (3, 0));
    drop(tier);
    // No capacity: nothing evicted.
    let mut tier = fs_blocks::open_rebuilt(mem.clone(), opts(dir.path())).unwrap();
    assert_eq!(counts(&tier), (3, 0));
    assert!(store(&mut tier, &mem, 2, &[4]).success);
    drop(tier);
    // Above it: evicted down to the low watermark, and no further.
    let tier = fs_blocks::open_rebuilt(mem.clone(), bounded).unwrap();
    assert_eq!(counts(&tier), (2, 2));
    assert_eq!(tier.bytes_used(), 2 * file);
    assert_eq!(disk_bytes(dir.path()), 2 * file);
}

#[test]
fn a_restart_removes_a_block_found_outside_its_own_fanout_directory() {
    let dir = tempfile::tempdir().unwrap();
    let mem = SlotMemory::anonymous(8, SLOT).unwrap();
    let mut tier = fs_blocks::open_rebuilt(mem.clone(), opts(dir.path())).unwrap();
    assert!(store(&mut tier, &mem, 1, &[1]).success);
    drop(tier);
    // A copy of the block under another fan-out directory: the tier never
    // looks for the key there, so the copy is not one of its blocks.
    let own = block_file(dir.path(), 1);
    let other = if own.parent().unwrap().ends_with("00") {
        "01"
    } else {
        "00"
    };
    let copy = dir.path().join(other).join(own.file_name().unwrap());
    std::fs::create_dir_all(copy.parent().unwrap()).unwrap();
    std::fs::copy(&own, &copy).unwrap();
    let mut tier = fs_blocks::open_rebuilt(mem.clone(), opts(dir.path())).unwrap();
    let rep = tier.rebuild_report();
    assert_eq!((rep.blocks, rep.skipped, rep.removed), (1, 1, 1));
    assert!(own.exists() && !copy.exists());
    assert_eq!(tier.bytes_used(), (4096 + SLOT) as u64);
    assert_eq!(tier.lookup(&key(1), &request()), TierLookup::Hit);
}

#[test]
fn a_restart_removes_temp_files_older_than_the_stale_age_even_of_live_writers() {
    let dir = tempfile::tempdir().unwrap();
    let mem = SlotMemory::anonymous(8, SLOT).unwrap();
    let mut tier = fs_blocks::open_rebuilt(mem.clone(), opts(dir.path())).unwrap();
    assert!(store(&mut tier, &mem, 1, &[1]).success);
    drop(tier);
    let fanout = block_file(dir.path(), 1).parent().unwrap().to_path_buf();
    // Both of a live writer (this process): one written an hour ago, one now.
    let me = std::process::id();
    let old = fanout.join(format!(".{}.{me}.0.tmp", key(2).to_hex()));
    let young = fanout.join(format!(".{}.{me}.0.tmp", key(3).to_hex()));
    std::fs::write(&old, b"partial").unwrap();
    std::fs::write(&young, b"partial").unwrap();
    let hour_ago = std::time::SystemTime::now() - Duration::from_secs(3600);
    std::fs::File::options()
        .write(true)
        .open(&old)
        .unwrap()
        .set_modified(hour_ago)
        .unwrap();
    let mut o = opts(dir.path());
    o.stale_temp_age = Duration::from_secs(600);
    let tier = fs_blocks::open_rebuilt(mem.clone(), o).unwrap();
    assert_eq!(tier.rebuild_report().temp_removed, 1);
    assert!(!old.exists() && young.exists());
}
