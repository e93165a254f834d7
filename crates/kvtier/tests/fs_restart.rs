//! Restarting the file-system tier from the index persisted at a clean
//! shutdown: loaded instead of a scan (read in the background, waited
//! for here; `fs_index_load.rs` tests the tier during the load) and used
//! once; after a crash, or when the index file is torn, damaged, stale,
//! another tier's, or not a regular file, the background scan runs
//! (waited for here) and no block is lost.  No index is persisted while
//! the scan still runs, and in the segments layout the live map and the
//! loaded index agree.

use std::path::Path;

use kvtier_core::Key;
use kvtier_core::config::Config;
use kvtier_core::events::{Event, EventKind};
use kvtier_core::primary::StorePlan;
use kvtier_core::region::SlotMemory;
use kvtier_core::tiering::{Manager, RequestParams};
use kvtier_core::tiering::{SecondaryTier, TierLookup, TierReadiness};
use kvtier_core::tiers::fs::{FsLayout, FsOptions, FsTier};

use fs_blocks::{holds, key, load, request, stat, store};
use kvtier_testkit::fs_blocks;

const SLOT: usize = 4096;
const SLOTS: u32 = 16;
const INDEX: &str = "kvtier-index";
const GENERATION: &str = "kvtier-generation";

fn opts(dir: &Path) -> FsOptions {
    let mut o = FsOptions::new(dir);
    o.read_threads = 2;
    o.write_threads = 2;
    o
}

fn open(dir: &Path, mem: &SlotMemory) -> FsTier {
    FsTier::open(mem.clone(), opts(dir)).unwrap()
}

/// Opens `dir` and waits for its restart scan, if one runs, to end.
fn open_scanned(dir: &Path, mem: &SlotMemory) -> FsTier {
    fs_blocks::open_rebuilt(mem.clone(), opts(dir)).unwrap()
}

/// Waits for `tier` to read its persisted index, and asserts that it
/// loaded it whole: no scan runs, and it is ready.
fn loaded_whole(tier: &mut FsTier) {
    let r = tier.wait_rebuilt();
    assert!(r.index_loaded && !r.index_rejected, "{r:?}");
    assert!(!tier.rebuilding());
    assert_eq!(stat(tier, "rebuilding"), 0.0);
    assert_eq!(tier.readiness(), TierReadiness::Ready);
}

/// Options of the segments layout with room for `records` blocks.
fn segments(dir: &Path, records: u64) -> FsOptions {
    let mut o = opts(dir);
    o.layout = FsLayout::Segments;
    o.capacity_bytes = records * (4096 + SLOT as u64);
    o.segment_file_bytes = 8 * (4096 + SLOT as u64);
    o
}

fn events(tier: &mut FsTier) -> Vec<Event> {
    let mut out = Vec::new();
    tier.take_events(usize::MAX, &mut out);
    out
}

/// Stores blocks `ids` in jobs of at most the slot count.
fn store_all(tier: &mut FsTier, mem: &SlotMemory, ids: &[u32]) {
    for (n, chunk) in ids.chunks(SLOTS as usize).enumerate() {
        let r = store(tier, mem, 100 + n as u64, chunk);
        assert!(r.success, "{r:?}");
    }
}

/// Asserts that the tier serves exactly blocks `ids` of `0..upto`, each
/// loaded whole and right.
fn serves_exactly(tier: &mut FsTier, mem: &SlotMemory, ids: &[u32], upto: u32) {
    let req = request();
    for i in 0..upto {
        let want = if ids.contains(&i) {
            TierLookup::Hit
        } else {
            TierLookup::Miss
        };
        assert_eq!(tier.lookup(&key(i), &req), want, "block {i}");
    }
    assert_eq!(tier.block_count(), ids.len());
    for (n, chunk) in ids.chunks(SLOTS as usize).enumerate() {
        let r = load(tier, 1000 + n as u64, chunk, 0);
        assert!(r.success && r.succeeded_keys.is_none(), "{r:?}");
        for (s, &i) in chunk.iter().enumerate() {
            assert!(holds(mem, s as u32, i), "block {i} came back wrong");
        }
    }
}

#[test]
fn a_clean_restart_loads_the_index_and_serves_every_block() {
    let dir = tempfile::tempdir().unwrap();
    let mem = SlotMemory::anonymous(SLOTS, SLOT).unwrap();
    let ids: Vec<u32> = (0..40).collect();
    let mut tier = open(dir.path(), &mem);
    store_all(&mut tier, &mem, &ids);
    tier.shutdown().unwrap();
    assert!(dir.path().join(INDEX).is_file());

    let mut tier = open(dir.path(), &mem);
    loaded_whole(&mut tier);
    assert_eq!(tier.rebuild_report().blocks, 40);
    assert_eq!(stat(&tier, "restart_blocks"), 40.0);
    // Used once: gone before the tier serves anything.
    assert!(!dir.path().join(INDEX).exists());
    // The blocks are announced as a scan would announce them.
    let ev = events(&mut tier);
    assert_eq!(ev.len(), 40);
    assert!(ev.iter().all(|e| e.kind == EventKind::Stored));
    serves_exactly(&mut tier, &mem, &ids, 50);
    let again: Vec<u32> = (40..42).collect();
    store_all(&mut tier, &mem, &again);
    tier.shutdown().unwrap();

    let mut tier = open(dir.path(), &mem);
    loaded_whole(&mut tier);
    let all: Vec<u32> = (0..42).collect();
    serves_exactly(&mut tier, &mem, &all, 50);
    let bytes = tier.bytes_used();
    tier.shutdown().unwrap();
    // What the scan finds is what the index said.
    std::fs::remove_file(dir.path().join(INDEX)).unwrap();
    let mut tier = open_scanned(dir.path(), &mem);
    assert!(!tier.rebuild_report().index_loaded);
    assert_eq!((tier.block_count(), tier.bytes_used()), (42, bytes));
    serves_exactly(&mut tier, &mem, &all, 50);
}

#[test]
fn a_restart_after_a_crash_scans() {
    let dir = tempfile::tempdir().unwrap();
    let mem = SlotMemory::anonymous(SLOTS, SLOT).unwrap();
    let ids: Vec<u32> = (0..20).collect();
    let mut tier = open(dir.path(), &mem);
    store_all(&mut tier, &mem, &ids);
    // No shutdown: as if the process died.
    drop(tier);
    assert!(!dir.path().join(INDEX).exists());
    let mut tier = open_scanned(dir.path(), &mem);
    let r = tier.rebuild_report();
    assert!(!r.index_loaded && !r.index_rejected, "{r:?}");
    serves_exactly(&mut tier, &mem, &ids, 30);
}

#[test]
fn a_store_after_a_loaded_index_then_a_crash_never_trusts_the_old_index() {
    let dir = tempfile::tempdir().unwrap();
    let mem = SlotMemory::anonymous(SLOTS, SLOT).unwrap();
    let first: Vec<u32> = (0..20).collect();
    let mut tier = open(dir.path(), &mem);
    store_all(&mut tier, &mem, &first);
    tier.shutdown().unwrap();
    let old = std::fs::read(dir.path().join(INDEX)).unwrap();

    let mut tier = open(dir.path(), &mem);
    assert!(tier.wait_rebuilt().index_loaded);
    let more: Vec<u32> = (20..30).collect();
    store_all(&mut tier, &mem, &more);
    // Block 0 is dropped (its file removed).
    let d = tier.drop_blocks(key(0).as_bytes()).unwrap();
    assert_eq!(d.dropped, 1);
    drop(tier);
    // Even the old index put back (a copy that survived) is not trusted.
    std::fs::write(dir.path().join(INDEX), &old).unwrap();
    let mut tier = open_scanned(dir.path(), &mem);
    let r = tier.rebuild_report();
    assert!(!r.index_loaded && r.index_rejected, "{r:?}");
    let now: Vec<u32> = (1..30).collect();
    serves_exactly(&mut tier, &mem, &now, 40);
}

/// Stores 24 blocks, shuts down cleanly, lets `spoil` change the index
/// file, and checks that the next open scans, reports the file, and serves
/// every block.
fn spoiled(spoil: impl FnOnce(&Path)) {
    let dir = tempfile::tempdir().unwrap();
    let mem = SlotMemory::anonymous(SLOTS, SLOT).unwrap();
    let ids: Vec<u32> = (0..24).collect();
    let mut tier = open(dir.path(), &mem);
    store_all(&mut tier, &mem, &ids);
    tier.shutdown().unwrap();
    spoil(dir.path());
    let mut tier = open_scanned(dir.path(), &mem);
    let r = tier.rebuild_report();
    assert!(!r.index_loaded && r.index_rejected, "{r:?}");
    assert_eq!(r.blocks, 24);
    let mut log = Vec::new();
    tier.take_errors(&mut log);
    assert!(log.iter().any(|l| l.contains(INDEX)), "{log:?}");
    serves_exactly(&mut tier, &mem, &ids, 30);
}

fn edit(dir: &Path, f: impl FnOnce(&mut Vec<u8>)) {
    let p = dir.join(INDEX);
    let mut bytes = std::fs::read(&p).unwrap();
    f(&mut bytes);
    std::fs::write(&p, bytes).unwrap();
}

#[test]
fn a_torn_or_flipped_index_file_is_refused_and_the_scan_loses_nothing() {
    spoiled(|d| edit(d, |b| b.truncate(b.len() / 2)));
    spoiled(|d| edit(d, |b| b.truncate(10)));
    spoiled(|d| edit(d, |b| *b.last_mut().unwrap() ^= 0x10));
    spoiled(|d| edit(d, |b| b[20] ^= 1));
}

#[test]
fn a_stale_or_foreign_index_file_is_refused_and_the_scan_loses_nothing() {
    // Stale: the directory's generation moved on without it.
    spoiled(|d| {
        let g: u64 =
            std::fs::read_to_string(d.join(GENERATION)).map_or(0, |t| t.trim().parse().unwrap());
        std::fs::write(d.join(GENERATION), format!("{}\n", g + 1)).unwrap();
    });
    // Written by a tier of another block size, at the same generation.
    spoiled(|d| {
        let other = tempfile::tempdir().unwrap();
        let mem = SlotMemory::anonymous(SLOTS, 2 * SLOT).unwrap();
        let mut tier = FsTier::open(mem.clone(), opts(other.path())).unwrap();
        store_all(&mut tier, &mem, &[1, 2]);
        tier.shutdown().unwrap();
        std::fs::copy(other.path().join(INDEX), d.join(INDEX)).unwrap();
    });
    // A FIFO in its place (never opened for a wait), and a symlink (never
    // followed) to a good index.
    spoiled(|d| {
        std::fs::remove_file(d.join(INDEX)).unwrap();
        let c = std::ffi::CString::new(d.join(INDEX).into_os_string().into_encoded_bytes());
        // SAFETY: a NUL-terminated path.
        assert_eq!(unsafe { libc::mkfifo(c.unwrap().as_ptr(), 0o600) }, 0);
    });
    spoiled(|d| {
        std::fs::rename(d.join(INDEX), d.join("saved")).unwrap();
        std::os::unix::fs::symlink(d.join("saved"), d.join(INDEX)).unwrap();
    });
}

#[test]
fn the_segments_layout_restarts_from_its_index() {
    let dir = tempfile::tempdir().unwrap();
    let mem = SlotMemory::anonymous(SLOTS, SLOT).unwrap();
    let o = segments(dir.path(), 128);
    let ids: Vec<u32> = (0..40).collect();
    let mut tier = FsTier::open(mem.clone(), o.clone()).unwrap();
    store_all(&mut tier, &mem, &ids);
    tier.shutdown().unwrap();
    drop(tier);

    let mut tier = FsTier::open(mem.clone(), o.clone()).unwrap();
    loaded_whole(&mut tier);
    assert_eq!(tier.rebuild_report().blocks, 40);
    assert!(!dir.path().join(INDEX).exists());
    serves_exactly(&mut tier, &mem, &ids, 50);
    // New blocks take free records, never a listed one.
    let more: Vec<u32> = (40..64).collect();
    store_all(&mut tier, &mem, &more);
    let all: Vec<u32> = (0..64).collect();
    serves_exactly(&mut tier, &mem, &all, 70);
    tier.shutdown().unwrap();
    drop(tier);

    // A smaller capacity: the index lists records past it, so the records
    // are read instead, and the bound holds.
    let small = segments(dir.path(), 32);
    let tier = fs_blocks::open_rebuilt(mem.clone(), small).unwrap();
    let r = tier.rebuild_report();
    assert!(!r.index_loaded && r.index_rejected, "{r:?}");
    assert!(tier.block_count() <= 32);
    drop(tier);

    // A crash (no shutdown) leaves no index: the records are read.
    let mut tier = fs_blocks::open_rebuilt(mem.clone(), o.clone()).unwrap();
    let r = tier.rebuild_report();
    assert!(!r.index_loaded && !r.index_rejected, "{r:?}");
    let kept: Vec<u32> = (0..64)
        .filter(|&i| tier.lookup(&key(i), &request()) == TierLookup::Hit)
        .collect();
    serves_exactly(&mut tier, &mem, &kept, 70);
}

#[test]
fn a_files_layout_index_is_refused_by_a_segments_tier() {
    let dir = tempfile::tempdir().unwrap();
    let mem = SlotMemory::anonymous(SLOTS, SLOT).unwrap();
    let o = segments(dir.path(), 32);
    let ids: Vec<u32> = (0..10).collect();
    let mut tier = FsTier::open(mem.clone(), o.clone()).unwrap();
    store_all(&mut tier, &mem, &ids);
    tier.shutdown().unwrap();
    drop(tier);
    // The files layout's index is not the segments layout's.
    let other = tempfile::tempdir().unwrap();
    let mut t = open(other.path(), &mem);
    store_all(&mut t, &mem, &[1]);
    t.shutdown().unwrap();
    std::fs::copy(other.path().join(INDEX), dir.path().join(INDEX)).unwrap();
    let mut tier = fs_blocks::open_rebuilt(mem.clone(), o).unwrap();
    let r = tier.rebuild_report();
    assert!(!r.index_loaded && r.index_rejected, "{r:?}");
    serves_exactly(&mut tier, &mem, &ids, 20);
}

/// A manager over an fs tier in `dir` (4 KiB blocks, 8 primary slots).
fn manager(dir: &Path) -> Manager {
    let json = format!(
        r#"{{"block_bytes": {SLOT}, "primary": {{"capacity": 8}},
            "tiers": [{{"type": "fs", "options": {{"directory": "{}", "read_threads": 1,
                        "write_threads": 1, "direct_io": false}}}}]}}"#,
        dir.display()
    );
    Config::from_json(&json).unwrap().build().unwrap()
}

fn tier_stat(m: &Manager, name: &str) -> f64 {
    let stats = m.tier_stats(1).unwrap();
    stats.iter().find(|s| s.name == name).unwrap().value
}

/// Drives the manager's scheduler until the fs tier's index is rebuilt
/// (it takes in what its background load found at its calls).
fn rebuilt(m: &Manager) {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    while tier_stat(m, "rebuilding") != 0.0 {
        assert!(std::time::Instant::now() < deadline, "still rebuilding");
        m.schedule_end().unwrap();
        std::thread::sleep(std::time::Duration::from_millis(1));
    }
}

/// Stores keys `[i; 8]` for `ids` through the manager, until the fs tier
/// has them.
fn store_through(m: &Manager, ids: std::ops::RangeInclusive<u8>) {
    let r = m.request_begin("r", RequestParams::default()).unwrap().id;
    let keys: Vec<Key> = ids.map(|i| Key::new(&[i; 8]).unwrap()).collect();
    let mut plan = StorePlan::default();
    m.prepare_store(r, &keys, &mut plan).unwrap();
    let done = plan.to_store.clone();
    m.complete_store(r, &done, true).unwrap();
    m.request_finished(r).unwrap();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    loop {
        m.schedule_end().unwrap();
        if !m.has_pending_work().unwrap() {
            return;
        }
        assert!(std::time::Instant::now() < deadline, "work still pending");
        std::thread::sleep(std::time::Duration::from_millis(2));
    }
}

#[test]
fn a_managers_shutdown_or_drop_persists_the_index_for_the_next_manager() {
    let dir = tempfile::tempdir().unwrap();
    let m = manager(dir.path());
    store_through(&m, 1..=3);
    assert_eq!(tier_stat(&m, "blocks"), 3.0);
    m.shutdown().unwrap();
    drop(m);
    assert!(dir.path().join(INDEX).is_file());

    let m = manager(dir.path());
    assert!(!dir.path().join(INDEX).exists(), "used once");
    rebuilt(&m);
    assert_eq!(tier_stat(&m, "restart_blocks"), 3.0);
    store_through(&m, 4..=5);
    // Dropped without a shutdown call: the manager shuts its tiers down.
    drop(m);
    assert!(dir.path().join(INDEX).is_file());
    let m = manager(dir.path());
    rebuilt(&m);
    assert_eq!(tier_stat(&m, "restart_blocks"), 5.0);
    assert_eq!(tier_stat(&m, "restart_removed_files"), 0.0);
}

#[test]
fn a_shutdown_while_the_restart_scan_runs_persists_no_index() {
    for layout in [FsLayout::Files, FsLayout::Segments] {
        let dir = tempfile::tempdir().unwrap();
        let mem = SlotMemory::anonymous(SLOTS, SLOT).unwrap();
        // Room past the live map's first word (64 records, all marked by
        // the first store), so that a store during the scan finds a
        // record known free.
        let mut o = segments(dir.path(), 128);
        o.layout = layout;
        let ids: Vec<u32> = (0..12).collect();
        let mut tier = FsTier::open(mem.clone(), o.clone()).unwrap();
        store_all(&mut tier, &mem, &ids);
        // A crash: no index, the next open scans.
        drop(tier);
        let (mut tier, hold) = FsTier::open_held(mem.clone(), o.clone()).unwrap();
        assert!(tier.rebuilding(), "{layout:?}");
        // A block stored meanwhile: known to the index, the others not.
        store_all(&mut tier, &mem, &[20]);
        tier.shutdown().unwrap();
        drop(hold);
        assert!(!dir.path().join(INDEX).exists(), "{layout:?}");
        drop(tier);
        // The next open scans and finds every block, the new one too.
        let mut tier = fs_blocks::open_rebuilt(mem.clone(), o.clone()).unwrap();
        let r = tier.rebuild_report();
        assert!(!r.index_loaded && !r.index_rejected, "{layout:?}: {r:?}");
        let all: Vec<u32> = (0..12).chain([20]).collect();
        serves_exactly(&mut tier, &mem, &all, 24);
        // Its scan ended: this shutdown persists the index.
        tier.shutdown().unwrap();
        assert!(dir.path().join(INDEX).is_file(), "{layout:?}");
    }
}

#[test]
fn after_a_loaded_index_the_live_map_saved_at_shutdown_holds_exactly_its_blocks() {
    let dir = tempfile::tempdir().unwrap();
    let mem = SlotMemory::anonymous(SLOTS, SLOT).unwrap();
    let o = segments(dir.path(), 16);
    // Stored lowest record first: block i in record i.
    let first: Vec<u32> = (0..8).collect();
    let mut tier = FsTier::open(mem.clone(), o.clone()).unwrap();
    store_all(&mut tier, &mem, &first);
    tier.shutdown().unwrap();
    drop(tier);

    let mut tier = FsTier::open(mem.clone(), o.clone()).unwrap();
    loaded_whole(&mut tier);
    // Records the index does not name take stores at once.
    let more: Vec<u32> = (8..12).collect();
    store_all(&mut tier, &mem, &more);
    assert_eq!(stat(&tier, "stores_rejected_full"), 0.0);
    // Blocks 0-3 dropped: their records are free, not erased.
    for i in 0..4 {
        assert_eq!(tier.drop_blocks(key(i).as_bytes()).unwrap().dropped, 1);
    }
    tier.shutdown().unwrap();
    drop(tier);

    // Scanned instead (the index file gone): the map marks the records of
    // blocks 4-11 and no other, so the damaged records of the dropped
    // blocks are not even read.
    std::fs::remove_file(dir.path().join(INDEX)).unwrap();
    let record = (4096 + SLOT) as u64;
    let seg = dir.path().join("segments").join(format!("{record}-0.kvs"));
    let f = std::fs::OpenOptions::new().write(true).open(&seg).unwrap();
    use std::os::unix::fs::FileExt;
    for r in 0..4u64 {
        f.write_all_at(b"garbage!garbage!", r * record).unwrap();
    }
    drop(f);
    let mut tier = fs_blocks::open_rebuilt(mem.clone(), o).unwrap();
    let r = tier.rebuild_report();
    assert!(!r.index_loaded, "{r:?}");
    assert_eq!((r.blocks, r.skipped), (8, 0), "{r:?}");
    let kept: Vec<u32> = (4..12).collect();
    serves_exactly(&mut tier, &mem, &kept, 16);
}

#[test]
fn a_segments_index_over_segment_files_made_anew_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let mem = SlotMemory::anonymous(SLOTS, SLOT).unwrap();
    let o = segments(dir.path(), 16);
    let ids: Vec<u32> = (0..10).collect();
    let mut tier = FsTier::open(mem.clone(), o.clone()).unwrap();
    store_all(&mut tier, &mem, &ids);
    tier.shutdown().unwrap();
    drop(tier);
    // The segment files (and their live map) removed by hand, the index
    // left: it names records of files that hold nothing now.
    std::fs::remove_dir_all(dir.path().join("segments")).unwrap();
    let mut tier = FsTier::open(mem.clone(), o).unwrap();
    let r = tier.wait_rebuilt();
    assert!(!r.index_loaded && r.index_rejected, "{r:?}");
    let mut log = Vec::new();
    tier.take_errors(&mut log);
    assert!(log.iter().any(|l| l.contains("live map")), "{log:?}");
    // Nothing to scan either: empty.
    assert!(!tier.rebuilding());
    serves_exactly(&mut tier, &mem, &[], 12);
    store_all(&mut tier, &mem, &[0]);
    serves_exactly(&mut tier, &mem, &[0], 12);
}

#[test]
fn a_segments_open_refused_for_the_lock_leaves_the_index_to_the_next_open() {
    let dir = tempfile::tempdir().unwrap();
    let mem = SlotMemory::anonymous(SLOTS, SLOT).unwrap();
    let o = segments(dir.path(), 16);
    let ids: Vec<u32> = (0..6).collect();
    let mut tier = FsTier::open(mem.clone(), o.clone()).unwrap();
    store_all(&mut tier, &mem, &ids);
    tier.shutdown().unwrap();
    // Shut down but not dropped: it still holds the directory's lock.
    assert!(FsTier::open(mem.clone(), o.clone()).is_err());
    assert!(dir.path().join(INDEX).is_file(), "left for the next open");
    drop(tier);
    let mut tier = FsTier::open(mem.clone(), o).unwrap();
    loaded_whole(&mut tier);
    serves_exactly(&mut tier, &mem, &ids, 8);
}
