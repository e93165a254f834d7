//! The file-system tier's restart scan in the background, both layouts:
//! the tier serves and stores while the scan runs (held by a
//! `RebuildHold`, so nothing here depends on timing), the scan never
//! undoes what the tier did meanwhile (a store, a drop, an eviction),
//! new stores never land in a record the scan has not classified, the
//! segments scan reads only the records the live map marks, and shutdown
//! stops a scan at once (and persists no index).  A clean shutdown
//! persists the index, which the next open loads instead of scanning:
//! the directories here have theirs removed, so that the scan runs.

use std::path::Path;

use kvtier_core::region::SlotMemory;
use kvtier_core::tiering::{SecondaryTier, TierLookup, TierReadiness};
use kvtier_core::tiers::fs::format::HEADER_LEN;
use kvtier_core::tiers::fs::{FsLayout, FsOptions, FsTier};

use fs_blocks::{files, holds, key, load, request, stat, store};
use kvtier_testkit::fs_blocks;

const SLOT: usize = 4096;
const FILE: u64 = (HEADER_LEN + SLOT) as u64;
const LAYOUTS: [FsLayout; 2] = [FsLayout::Files, FsLayout::Segments];
/// The index a clean shutdown persists.
const INDEX: &str = "kvtier-index";

/// A tier of `blocks` blocks of capacity in `layout` (evicting only when
/// full), 2 + 2 threads.
fn opts(dir: &Path, layout: FsLayout, blocks: u64) -> FsOptions {
    let mut o = FsOptions::new(dir);
    o.layout = layout;
    o.capacity_bytes = blocks * FILE;
    o.high_watermark = 1.0;
    o.low_watermark = 1.0;
    o.read_threads = 2;
    o.write_threads = 2;
    o.direct_io = false;
    o
}

fn hit(tier: &mut FsTier, i: u32) -> bool {
    tier.lookup(&key(i), &request()) == TierLookup::Hit
}

/// Stores blocks `ids` (16 at a time), all of which must succeed.
fn store_all(tier: &mut FsTier, mem: &SlotMemory, ids: &[u32]) {
    for (n, chunk) in ids.chunks(16).enumerate() {
        let r = store(tier, mem, n as u64 + 100, chunk);
        assert!(r.success, "{r:?}");
    }
}

/// Whether block `i` loads whole with its own bytes.
fn loads(tier: &mut FsTier, mem: &SlotMemory, i: u32) -> bool {
    load(tier, 7, &[i], 0).success && holds(mem, 0, i)
}

/// Removes the index a clean shutdown persisted in `dir` (the next open
/// scans).
fn forget_index(dir: &Path) {
    std::fs::remove_file(dir.join(INDEX)).unwrap();
}

/// A directory holding blocks `ids`, written by a tier shut down cleanly,
/// its persisted index removed: the next open scans it.
fn filled(dir: &Path, mem: &SlotMemory, o: &FsOptions, ids: &[u32]) {
    let mut tier = fs_blocks::open_rebuilt(mem.clone(), o.clone()).unwrap();
    store_all(&mut tier, mem, ids);
    tier.shutdown().unwrap();
    if o.shared {
        assert!(!dir.join(INDEX).exists(), "none for a shared directory");
    } else {
        forget_index(dir);
    }
}

/// Opens the directory of `o`, shut down cleanly, twice, and runs `check`
/// on each tier: from the index persisted at that shutdown (read in the
/// background, waited for; no scan), then by the restart scan (the first
/// tier dropped without a shutdown, so no index is left and the live map
/// is as that shutdown wrote it).
fn reopened_both_ways(mem: &SlotMemory, o: &FsOptions, mut check: impl FnMut(&mut FsTier)) {
    let mut tier = fs_blocks::open_rebuilt(mem.clone(), o.clone()).unwrap();
    let r = tier.rebuild_report();
    assert!(r.index_loaded && !r.index_rejected, "{r:?}");
    check(&mut tier);
    drop(tier);
    assert!(!o.root.join(INDEX).exists(), "used once");
    let mut tier = fs_blocks::open_rebuilt(mem.clone(), o.clone()).unwrap();
    assert!(!tier.rebuild_report().index_loaded);
    check(&mut tier);
}

#[test]
fn a_lookup_during_the_rebuild_misses_then_hits_once_the_scan_found_it() {
    for layout in LAYOUTS {
        let dir = tempfile::tempdir().unwrap();
        let mem = SlotMemory::anonymous(16, SLOT).unwrap();
        let o = opts(dir.path(), layout, 16);
        filled(dir.path(), &mem, &o, &[0, 1, 2, 3]);
        let (mut tier, hold) = FsTier::open_held(mem.clone(), o).unwrap();
        assert!(tier.rebuilding(), "{layout:?}");
        // Not work a drain or a shutdown waits for.
        assert!(!tier.has_pending_work(), "{layout:?}");
        assert_eq!(stat(&tier, "rebuilding"), 1.0);
        let TierReadiness::NotReady(why) = tier.readiness() else {
            panic!("{layout:?}: ready while rebuilding");
        };
        assert!(why.starts_with("fs tier rebuilding"), "{why}");
        assert!(!hit(&mut tier, 0), "{layout:?}: not found yet");
        assert_eq!(tier.block_count(), 0);
        hold.release();
        let report = tier.wait_rebuilt();
        assert_eq!(report.blocks, 4, "{layout:?}");
        assert!(!tier.rebuilding());
        assert_eq!(tier.readiness(), TierReadiness::Ready);
        assert_eq!(stat(&tier, "rebuilding"), 0.0);
        assert_eq!(stat(&tier, "restart_blocks"), 4.0);
        assert!(hit(&mut tier, 0), "{layout:?}");
        assert!(loads(&mut tier, &mem, 3), "{layout:?}");
        assert_eq!(tier.bytes_used(), 4 * FILE);
    }
}

#[test]
fn the_scan_reports_what_it_finds_at_the_tiers_calls_without_waiting() {
    // No hold: the calls of an engine (step ends here) take the scan's
    // batches in, until readiness says the scan ended.
    for layout in LAYOUTS {
        let dir = tempfile::tempdir().unwrap();
        let mem = SlotMemory::anonymous(16, SLOT).unwrap();
        let o = opts(dir.path(), layout, 16);
        filled(dir.path(), &mem, &o, &[0, 1, 2]);
        let mut tier = FsTier::open(mem.clone(), o).unwrap();
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
        while tier.readiness() != TierReadiness::Ready {
            tier.on_schedule_end();
            assert!(std::time::Instant::now() < deadline, "the scan never ended");
            std::thread::sleep(std::time::Duration::from_micros(200));
        }
        assert!(!tier.rebuilding());
        assert_eq!(tier.rebuild_report().blocks, 3, "{layout:?}");
        assert!(hit(&mut tier, 2), "{layout:?}");
    }
}

#[test]
fn a_store_during_the_rebuild_wins_over_the_old_copy_and_counts_once() {
    for layout in LAYOUTS {
        let dir = tempfile::tempdir().unwrap();
        let mem = SlotMemory::anonymous(16, SLOT).unwrap();
        let o = opts(dir.path(), layout, 8);
        filled(dir.path(), &mem, &o, &[0, 1, 2, 3]);
        let (mut tier, hold) = FsTier::open_held(mem.clone(), o.clone()).unwrap();
        // Stores work from the first moment; block 0's old copy is not
        // found yet.
        store_all(&mut tier, &mem, &[0, 9]);
        assert_eq!(tier.block_count(), 2);
        drop(hold);
        let report = tier.wait_rebuilt();
        assert_eq!(tier.block_count(), 5, "{layout:?}: 0 once, 1-3, 9");
        assert_eq!(tier.bytes_used(), 5 * FILE, "{layout:?}");
        assert_eq!(report.blocks, 3, "{layout:?}: the scan's own");
        match layout {
            // The same file: not counted at all.
            FsLayout::Files => assert_eq!(report.skipped, 0),
            // The old record: a second copy, left free.
            FsLayout::Segments => assert_eq!(report.skipped, 1),
        }
        assert_eq!(stat(&tier, "restart_blocks"), 3.0);
        for i in [0, 1, 2, 3, 9] {
            assert!(loads(&mut tier, &mem, i), "{layout:?}: block {i}");
        }
        if layout == FsLayout::Files {
            assert_eq!(files(dir.path(), ".kvb").len(), 5);
        }
        // The old record went back to the free list: the capacity of 8
        // takes 3 more blocks without evicting.
        store_all(&mut tier, &mem, &[20, 21, 22]);
        assert_eq!(stat(&tier, "evictions"), 0.0, "{layout:?}");
        assert_eq!(tier.block_count(), 8, "{layout:?}");
        tier.shutdown().unwrap();
        drop(tier);
        reopened_both_ways(&mem, &o, |tier| {
            assert_eq!(tier.block_count(), 8, "{layout:?}");
            for i in [0, 1, 2, 3, 9, 20, 21, 22] {
                assert!(loads(tier, &mem, i), "{layout:?}: block {i}");
            }
        });
    }
}

#[test]
fn a_drop_during_the_rebuild_removes_what_the_scan_finds_later_but_not_a_new_store() {
    for layout in LAYOUTS {
        let dir = tempfile::tempdir().unwrap();
        let mem = SlotMemory::anonymous(16, SLOT).unwrap();
        let o = opts(dir.path(), layout, 16);
        filled(dir.path(), &mem, &o, &[1, 2, 10, 11, 12]);
        let (mut tier, hold) = FsTier::open_held(mem.clone(), o.clone()).unwrap();
        // Blocks 10-19 ("block-0000001*"): none is indexed yet.
        let dropped = tier.drop_blocks(key(10).as_bytes()[..13].as_ref()).unwrap();
        assert_eq!((dropped.dropped, dropped.kept), (0, 0));
        // Stored again after the drop: kept.
        store_all(&mut tier, &mem, &[12]);
        drop(hold);
        let report = tier.wait_rebuilt();
        assert_eq!(report.blocks, 2, "{layout:?}: 1 and 2");
        assert_eq!(tier.block_count(), 3, "{layout:?}");
        assert!(!hit(&mut tier, 10) && !hit(&mut tier, 11), "{layout:?}");
        assert!(loads(&mut tier, &mem, 12), "{layout:?}");
        if layout == FsLayout::Files {
            assert_eq!(files(dir.path(), ".kvb").len(), 3, "the dropped files went");
        }
        tier.shutdown().unwrap();
        drop(tier);
        reopened_both_ways(&mem, &o, |tier| {
            assert_eq!(tier.block_count(), 3, "{layout:?}: nothing came back");
            assert!(!hit(tier, 10) && !hit(tier, 11), "{layout:?}");
        });
    }
}

#[test]
fn eviction_during_the_rebuild_takes_only_indexed_blocks_and_the_end_trims_the_rest() {
    let dir = tempfile::tempdir().unwrap();
    let mem = SlotMemory::anonymous(16, SLOT).unwrap();
    // 8 blocks; watermarks of 6 and 4 blocks.
    let mut o = opts(dir.path(), FsLayout::Files, 8);
    o.high_watermark = 0.75;
    o.low_watermark = 0.5;
    filled(dir.path(), &mem, &o, &[0, 1, 2, 3, 4, 5]);
    let (mut tier, hold) = FsTier::open_held(mem.clone(), o).unwrap();
    // Seven new blocks: past the high watermark, eviction finds only
    // these (the old ones are not indexed), and leaves the old files.
    store_all(&mut tier, &mem, &[20, 21, 22, 23, 24, 25]);
    store_all(&mut tier, &mem, &[26]);
    let evicted = stat(&tier, "evictions") as u64;
    assert!(evicted > 0);
    let kept = tier.block_count() as u64;
    assert_eq!(kept + evicted, 7);
    assert_eq!(files(dir.path(), ".kvb").len() as u64, 6 + kept);
    for i in 0..6 {
        assert!(!hit(&mut tier, i), "block {i} not found yet");
    }
    assert!(hit(&mut tier, 26));
    drop(hold);
    // The scan adds the 6 old blocks (the least recent): over the high
    // watermark, they go first, down to the low one.
    let report = tier.wait_rebuilt();
    assert_eq!(tier.block_count(), 4);
    assert_eq!(tier.bytes_used(), 4 * FILE);
    assert_eq!(files(dir.path(), ".kvb").len(), 4, "disk as accounted");
    assert_eq!(report.evicted, 6 + kept - 4);
    assert_eq!(report.blocks, 6 - report.evicted.min(6));
    assert_eq!(stat(&tier, "evictions") as u64, evicted + report.evicted);
    assert!(hit(&mut tier, 26), "the newest stays");
}

#[test]
fn no_store_lands_in_a_segment_record_the_scan_has_not_classified() {
    let dir = tempfile::tempdir().unwrap();
    let mem = SlotMemory::anonymous(16, SLOT).unwrap();
    let o = opts(dir.path(), FsLayout::Segments, 8);
    filled(dir.path(), &mem, &o, &[0, 1, 2, 3, 4, 5]);
    let (mut tier, hold) = FsTier::open_held(mem.clone(), o).unwrap();
    // Records 6 and 7 are known free (the live map); 0-5 are not read
    // yet: a third new block finds no record.
    let r = store(&mut tier, &mem, 1, &[20, 21, 22]);
    assert!(!r.success);
    assert_eq!(stat(&tier, "stores_written"), 2.0);
    assert_eq!(stat(&tier, "stores_rejected_full"), 1.0);
    drop(hold);
    let report = tier.wait_rebuilt();
    assert_eq!((report.blocks, report.skipped), (6, 0));
    assert_eq!(tier.block_count(), 8);
    for i in [0, 1, 2, 3, 4, 5, 20, 21] {
        assert!(loads(&mut tier, &mem, i), "block {i} overwritten");
    }
}

#[test]
fn a_segments_directory_without_a_live_map_is_read_whole_and_stores_wait_for_it() {
    let dir = tempfile::tempdir().unwrap();
    let mem = SlotMemory::anonymous(16, SLOT).unwrap();
    let o = opts(dir.path(), FsLayout::Segments, 8);
    filled(dir.path(), &mem, &o, &[0, 1, 2]);
    // As written before the map existed.
    std::fs::remove_file(dir.path().join("segments/live")).unwrap();
    let (mut tier, hold) = FsTier::open_held(mem.clone(), o.clone()).unwrap();
    // Every record may hold a block: none is handed to a store.
    assert!(!store(&mut tier, &mem, 1, &[20]).success);
    assert_eq!(stat(&tier, "stores_rejected_full"), 1.0);
    drop(hold);
    assert_eq!(tier.wait_rebuilt().blocks, 3);
    assert!(store(&mut tier, &mem, 2, &[20]).success);
    assert!(dir.path().join("segments/live").exists(), "written again");
}

#[test]
fn the_segments_scan_reads_only_the_records_the_live_map_marks() {
    let dir = tempfile::tempdir().unwrap();
    let mem = SlotMemory::anonymous(16, SLOT).unwrap();
    let o = opts(dir.path(), FsLayout::Segments, 8);
    let mut tier = fs_blocks::open_rebuilt(mem.clone(), o.clone()).unwrap();
    store_all(&mut tier, &mem, &[0, 1, 2, 3, 10, 11, 12, 13]);
    // Blocks 10-13 dropped: their records are free, not erased.
    let dropped = tier.drop_blocks(key(10).as_bytes()[..13].as_ref()).unwrap();
    assert_eq!(dropped.dropped, 4);
    tier.shutdown().unwrap();
    drop(tier);
    forget_index(dir.path());
    // Damage every record of the dead blocks: a scan that read them would
    // count them skipped.
    let seg = dir.path().join("segments").join(format!("{FILE}-0.kvs"));
    let f = std::fs::OpenOptions::new().write(true).open(&seg).unwrap();
    use std::os::unix::fs::FileExt;
    for r in 4..8u64 {
        f.write_all_at(b"garbage!garbage!", r * FILE).unwrap();
    }
    let mut tier = fs_blocks::open_rebuilt(mem.clone(), o).unwrap();
    let report = tier.rebuild_report();
    assert_eq!((report.blocks, report.skipped), (4, 0), "{report:?}");
    for i in 10..14 {
        assert!(!hit(&mut tier, i), "dropped block {i} came back");
    }
    for i in 0..4 {
        assert!(loads(&mut tier, &mem, i), "block {i}");
    }
}

#[test]
fn after_a_crash_the_segments_scan_reads_more_records_never_fewer() {
    let dir = tempfile::tempdir().unwrap();
    let mem = SlotMemory::anonymous(16, SLOT).unwrap();
    let o = opts(dir.path(), FsLayout::Segments, 8);
    filled(dir.path(), &mem, &o, &[0, 1]);
    // A run that ends without a clean shutdown: the live map has every
    // record written since the last one, so 2 and 3 are found.
    let mut tier = fs_blocks::open_rebuilt(mem.clone(), o.clone()).unwrap();
    store_all(&mut tier, &mem, &[2, 3]);
    drop(tier);
    let mut tier = fs_blocks::open_rebuilt(mem.clone(), o.clone()).unwrap();
    assert_eq!(tier.block_count(), 4);
    for i in 0..4 {
        assert!(loads(&mut tier, &mem, i), "block {i}");
    }
    // Dropped, then a crash: the map still marks the records, which the
    // scan reads (whole blocks of their keys, as before the map).
    let dropped = tier.drop_blocks(key(2).as_bytes()).unwrap();
    assert_eq!(dropped.dropped, 1);
    drop(tier);
    let tier = fs_blocks::open_rebuilt(mem.clone(), o).unwrap();
    assert_eq!(tier.block_count(), 4);
}

#[test]
fn a_key_found_in_two_segment_records_is_indexed_once() {
    let dir = tempfile::tempdir().unwrap();
    let mem = SlotMemory::anonymous(16, SLOT).unwrap();
    let o = opts(dir.path(), FsLayout::Segments, 8);
    let mut tier = fs_blocks::open_rebuilt(mem.clone(), o.clone()).unwrap();
    store_all(&mut tier, &mem, &[0, 1]);
    // Both dropped (records free, not erased), then 0 stored again into
    // the record 1 had: two records hold block 0.
    assert_eq!(tier.drop_blocks(key(0).as_bytes()).unwrap().dropped, 1);
    assert_eq!(tier.drop_blocks(key(1).as_bytes()).unwrap().dropped, 1);
    store_all(&mut tier, &mem, &[0]);
    drop(tier); // no clean shutdown: both records stay marked
    let mut tier = fs_blocks::open_rebuilt(mem.clone(), o).unwrap();
    let report = tier.rebuild_report();
    // Block 1's record holds block 0 now: 0 is found twice, once indexed.
    assert_eq!((report.blocks, report.skipped), (1, 1), "{report:?}");
    assert_eq!(tier.block_count(), 1);
    assert_eq!(tier.bytes_used(), FILE);
    assert!(loads(&mut tier, &mem, 0));
}

#[test]
fn shutdown_or_drop_during_the_rebuild_stops_the_scan() {
    for layout in LAYOUTS {
        let dir = tempfile::tempdir().unwrap();
        let mem = SlotMemory::anonymous(16, SLOT).unwrap();
        let o = opts(dir.path(), layout, 16);
        filled(dir.path(), &mem, &o, &[0, 1, 2, 3]);
        // The hold is never released: shutdown and drop must not wait
        // for the scan.
        let (mut tier, hold) = FsTier::open_held(mem.clone(), o.clone()).unwrap();
        tier.shutdown().unwrap();
        // The index knew no block yet: none is persisted.
        assert!(!dir.path().join(INDEX).exists(), "{layout:?}");
        assert!(!tier.rebuilding());
        assert!(!tier.has_pending_work());
        assert_eq!(
            tier.readiness(),
            TierReadiness::NotReady("shut down".into())
        );
        assert_eq!(tier.wait_rebuilt().blocks, 0);
        drop(tier);
        drop(hold);
        let (tier, hold) = FsTier::open_held(mem.clone(), o.clone()).unwrap();
        drop(tier);
        drop(hold);
        // A scan stopped early leaves the directory as it was (in the
        // segments layout, the live map keeps every unread record).
        let tier = fs_blocks::open_rebuilt(mem.clone(), o).unwrap();
        assert!(!tier.rebuild_report().index_loaded, "{layout:?}");
        assert_eq!(tier.block_count(), 4, "{layout:?}");
    }
}

#[test]
fn damaged_files_found_by_the_parallel_scan_are_removed_as_before() {
    let dir = tempfile::tempdir().unwrap();
    let mem = SlotMemory::anonymous(16, SLOT).unwrap();
    let o = opts(dir.path(), FsLayout::Files, 0);
    let ids: Vec<u32> = (0..96).collect();
    filled(dir.path(), &mem, &o, &ids);
    let mut blocks = files(dir.path(), ".kvb");
    blocks.sort();
    // Across fan-out directories (read by several threads): three bad
    // headers, one truncated file, a symlink and a dead writer's
    // temporary file.
    for p in &blocks[..3] {
        use std::os::unix::fs::FileExt;
        let f = std::fs::OpenOptions::new().write(true).open(p).unwrap();
        f.write_all_at(b"not a header", 0).unwrap();
    }
    let f = std::fs::OpenOptions::new()
        .write(true)
        .open(&blocks[50])
        .unwrap();
    f.set_len(100).unwrap();
    let fan = blocks[90].parent().unwrap();
    std::os::unix::fs::symlink("/etc/passwd", fan.join(format!("{}.kvb", "ab".repeat(20))))
        .unwrap();
    std::fs::write(fan.join(".x.999999999.1.tmp"), b"x").unwrap();
    let mut tier = fs_blocks::open_rebuilt(mem.clone(), o).unwrap();
    let r = tier.rebuild_report();
    assert_eq!((r.blocks, r.skipped, r.removed), (92, 4, 4), "{r:?}");
    assert_eq!((r.foreign, r.foreign_kinds.symlinks), (1, 1), "{r:?}");
    assert_eq!(r.temp_removed, 1, "{r:?}");
    assert_eq!(files(dir.path(), ".kvb").len(), 92 + 1, "and the symlink");
    assert_eq!(tier.bytes_used(), 92 * FILE);
    assert_eq!(stat(&tier, "restart_removed_files"), 4.0);
    // Every whole block loads.
    let mut whole = 0;
    for i in ids {
        whole += u32::from(loads(&mut tier, &mem, i));
    }
    assert_eq!(whole, 92);
}

#[test]
fn in_a_shared_directory_a_lookup_during_the_rebuild_finds_the_block_once() {
    let dir = tempfile::tempdir().unwrap();
    let mem = SlotMemory::anonymous(16, SLOT).unwrap();
    let mut o = opts(dir.path(), FsLayout::Files, 16);
    o.shared = true;
    filled(dir.path(), &mem, &o, &[0, 1, 2, 3]);
    let (mut tier, hold) = FsTier::open_held(mem.clone(), o).unwrap();
    // Not found by the scan yet: the existence check answers (RETRY
    // until it has), and the block is adopted.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    let mut answers = Vec::new();
    loop {
        let a = tier.lookup(&key(0), &request());
        answers.push(a);
        if a != TierLookup::Retry {
            break;
        }
        assert!(std::time::Instant::now() < deadline, "never answered");
        tier.on_schedule_end();
        std::thread::sleep(std::time::Duration::from_micros(200));
    }
    assert_eq!(answers[0], TierLookup::Retry);
    assert_eq!(answers.last(), Some(&TierLookup::Hit));
    assert_eq!(stat(&tier, "blocks_adopted"), 1.0);
    drop(hold);
    // The scan's copy of block 0 is the adopted one: counted once.
    let report = tier.wait_rebuilt();
    assert_eq!(report.blocks, 3);
    assert_eq!(tier.block_count(), 4);
    assert_eq!(tier.bytes_used(), 4 * FILE);
    assert!(loads(&mut tier, &mem, 0));
}

#[test]
fn a_new_directory_has_nothing_to_scan_and_is_ready_at_once() {
    for layout in LAYOUTS {
        let dir = tempfile::tempdir().unwrap();
        let mem = SlotMemory::anonymous(16, SLOT).unwrap();
        let tier = FsTier::open(mem.clone(), opts(dir.path(), layout, 16)).unwrap();
        assert!(!tier.rebuilding(), "{layout:?}");
        assert_eq!(tier.readiness(), TierReadiness::Ready, "{layout:?}");
        assert_eq!(stat(&tier, "rebuilding"), 0.0);
    }
}

#[test]
fn damaged_records_found_by_the_parallel_segments_scan_are_left_free_as_before() {
    // Two runs of records (read by two threads): 4,150 blocks fill
    // records 0-4149, past the first run of 4,096.
    let dir = tempfile::tempdir().unwrap();
    let mem = SlotMemory::anonymous(16, SLOT).unwrap();
    let o = opts(dir.path(), FsLayout::Segments, 4200);
    let ids: Vec<u32> = (0..4150).collect();
    filled(dir.path(), &mem, &o, &ids);
    let seg = dir.path().join("segments").join(format!("{FILE}-0.kvs"));
    let f = std::fs::OpenOptions::new().write(true).open(&seg).unwrap();
    use std::os::unix::fs::FileExt;
    for r in [10u64, 4100] {
        f.write_all_at(b"garbage!garbage!", r * FILE).unwrap();
    }
    drop(f);
    let mut tier = fs_blocks::open_rebuilt(mem.clone(), o).unwrap();
    let r = tier.rebuild_report();
    assert_eq!((r.blocks, r.skipped), (4148, 2), "{r:?}");
    assert_eq!(tier.bytes_used(), 4148 * FILE);
    // Blocks were stored lowest record first: block i in record i.
    assert!(!hit(&mut tier, 10) && !hit(&mut tier, 4100));
    for i in [0, 4095, 4096, 4149] {
        assert!(loads(&mut tier, &mem, i), "block {i}");
    }
    // The damaged records are free: 52 stores fit without evicting.
    let new: Vec<u32> = (5000..5052).collect();
    store_all(&mut tier, &mem, &new);
    assert_eq!(stat(&tier, "evictions"), 0.0);
    assert_eq!(tier.block_count(), 4200);
}
