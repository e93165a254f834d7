//! The file-system tier's segments layout, driven through the
//! `SecondaryTier` trait: round trips, the capacity as a number of records,
//! eviction that never overwrites a block being read, restart, damaged and
//! torn records, the one-process lock, and its options.

use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};

use kvtier_core::Error;
use kvtier_core::events::EventKind;
use kvtier_core::region::SlotMemory;
use kvtier_core::tiering::{Direction, SecondaryTier, TierLookup};
use kvtier_core::tiers::fs::Cause;
use kvtier_core::tiers::fs::format::{HEADER_LEN, file_len};
use kvtier_core::tiers::fs::{FsLayout, FsOptions, FsTier};

use fs_blocks::{files, fill, holds, job, key, load, request, stat, store, wait};
use kvtier_testkit::fs_blocks;

const SLOT: usize = 64 << 10;
const RECORD: u64 = (HEADER_LEN + SLOT) as u64;

/// Segments of `records` records, 2 + 2 threads.
fn opts(dir: &Path, records: u64) -> FsOptions {
    let mut o = FsOptions::new(dir);
    o.layout = FsLayout::Segments;
    o.capacity_bytes = records * RECORD;
    o.read_threads = 2;
    o.write_threads = 2;
    o
}

fn segment_files(dir: &Path) -> Vec<PathBuf> {
    files(&dir.join("segments"), ".kvs")
}

fn hit(tier: &mut FsTier, i: u32) -> bool {
    tier.lookup(&key(i), &request()) == TierLookup::Hit
}

/// The record holding block `i` (found by its header's key bytes).
fn record_of(dir: &Path, i: u32) -> (PathBuf, u64) {
    let k = key(i);
    for path in segment_files(dir) {
        let bytes = std::fs::read(&path).unwrap();
        for (r, rec) in bytes.chunks(RECORD as usize).enumerate() {
            if rec.len() >= 40 + k.len()
                && rec[0..8] == *b"KVTIERFS"
                && rec[40..40 + k.len()] == *k.as_bytes()
            {
                return (path, r as u64 * RECORD);
            }
        }
    }
    panic!("block {i} is in no record");
}

#[test]
fn blocks_round_trip_through_segment_records_without_a_file_per_block() {
    let dir = tempfile::tempdir().unwrap();
    let mem = SlotMemory::anonymous(16, SLOT).unwrap();
    let mut tier = fs_blocks::open_rebuilt(mem.clone(), opts(dir.path(), 32)).unwrap();
    assert_eq!(tier.layout(), FsLayout::Segments);
    // O_DIRECT wherever the files layout finds it in the same directory.
    let files_dir = tempfile::tempdir_in(dir.path()).unwrap();
    let files_tier =
        fs_blocks::open_rebuilt(mem.clone(), FsOptions::new(files_dir.path())).unwrap();
    assert_eq!(tier.direct_io(), files_tier.direct_io());
    drop(files_tier);
    let mut buffered = opts(&dir.path().join("buffered"), 4);
    buffered.direct_io = false;
    assert!(
        !fs_blocks::open_rebuilt(mem.clone(), buffered)
            .unwrap()
            .direct_io()
    );
    let ids: Vec<u32> = (0..8).collect();
    let r = store(&mut tier, &mem, 1, &ids);
    assert!(r.success, "{r:?}");
    assert_eq!(r.bytes, 8 * SLOT as u64);
    assert!(files(dir.path(), ".kvb").is_empty(), "no block files");
    assert_eq!(segment_files(dir.path()).len(), 1);
    let mut ev = Vec::new();
    tier.take_events(usize::MAX, &mut ev);
    assert_eq!(ev.len(), 8);
    assert!(ev.iter().all(|e| e.kind == EventKind::Stored));
    assert!(hit(&mut tier, 3) && !hit(&mut tier, 99));
    let r = load(&mut tier, 2, &ids, 8);
    assert!(r.success && r.succeeded_keys.is_none(), "{r:?}");
    for (n, &i) in ids.iter().enumerate() {
        assert!(holds(&mem, 8 + n as u32, i), "block {i} came back wrong");
    }
    // Storing again skips what the tier holds, and duplicates in a job.
    let r = store(&mut tier, &mem, 3, &[0, 1, 20, 20]);
    assert!(r.success);
    assert_eq!(r.bytes, SLOT as u64);
    assert_eq!(tier.block_count(), 9);
    assert_eq!(tier.bytes_used(), 9 * RECORD);
}

#[test]
fn the_capacity_is_a_number_of_records_and_the_least_recently_used_go_first() {
    let dir = tempfile::tempdir().unwrap();
    let mem = SlotMemory::anonymous(8, SLOT).unwrap();
    let mut o = opts(dir.path(), 10);
    o.high_watermark = 1.0;
    o.low_watermark = 1.0;
    let mut tier = fs_blocks::open_rebuilt(mem.clone(), o).unwrap();
    for b in 0..10u32 {
        assert!(store(&mut tier, &mem, b as u64, &[b]).success);
    }
    assert_eq!(tier.block_count(), 10);
    // Block 0 used again: block 1 is now the least recently used.
    tier.touch(&[key(0)], &request());
    for (n, b) in (10..14u32).enumerate() {
        assert!(store(&mut tier, &mem, 100 + n as u64, &[b]).success);
    }
    assert_eq!(tier.block_count(), 10);
    assert_eq!(stat(&tier, "evictions"), 4.0);
    // Each evicted block was announced as removed.
    let mut ev = Vec::new();
    tier.take_events(usize::MAX, &mut ev);
    let mut removed: Vec<_> = ev
        .iter()
        .filter(|e| e.kind == EventKind::Removed)
        .map(|e| e.key.unwrap())
        .collect();
    removed.sort();
    let mut want: Vec<_> = [1, 2, 3, 4].map(key).to_vec();
    want.sort();
    assert_eq!(removed, want);
    for gone in [1, 2, 3, 4] {
        assert!(!hit(&mut tier, gone), "block {gone} should be evicted");
    }
    let kept: Vec<u32> = [0].into_iter().chain(5..14).collect();
    for &b in &kept {
        assert!(hit(&mut tier, b), "block {b} should be kept");
    }
    // Evicted records were overwritten: every kept block reads back whole,
    // and the segment file never grew past the capacity.
    for chunk in kept.chunks(4) {
        let r = load(&mut tier, 200 + chunk[0] as u64, chunk, 4);
        assert!(r.success, "{r:?}");
        for (n, &b) in chunk.iter().enumerate() {
            assert!(holds(&mem, 4 + n as u32, b));
        }
    }
    let len: u64 = segment_files(dir.path())
        .iter()
        .map(|p| std::fs::metadata(p).unwrap().len())
        .sum();
    assert_eq!(len, 10 * RECORD);
}

#[test]
fn eviction_never_overwrites_a_record_being_read() {
    let dir = tempfile::tempdir().unwrap();
    let mem = SlotMemory::anonymous(8, SLOT).unwrap();
    let mut o = opts(dir.path(), 4);
    o.high_watermark = 1.0;
    o.low_watermark = 1.0;
    let mut tier = fs_blocks::open_rebuilt(mem.clone(), o).unwrap();
    assert!(store(&mut tier, &mem, 1, &[0, 1, 2, 3]).success);
    // Block 0, the least recently used, is being read while two stores
    // need room: blocks 1 and 2 go instead.
    tier.submit_load(job(2, Direction::Load, &[0], &[7]));
    for s in 0..2u32 {
        fill(&mem, s, 10 + s);
    }
    tier.submit_store(job(3, Direction::Store, &[10, 11], &[0, 1]));
    let results = wait(&mut tier, 2);
    assert!(results.iter().all(|r| r.success), "{results:?}");
    assert!(holds(&mem, 7, 0), "the block being read came back whole");
    assert!(hit(&mut tier, 0) && hit(&mut tier, 3));
    assert!(!hit(&mut tier, 1) && !hit(&mut tier, 2));
    // With every record being read, a store is refused, nothing overwritten.
    let mut o2 = opts(dir.path(), 1);
    o2.high_watermark = 1.0;
    o2.low_watermark = 1.0;
    drop(tier);
    let mut tier = fs_blocks::open_rebuilt(mem.clone(), o2).unwrap();
    assert_eq!(tier.block_count(), 1);
    let only = (0..12u32).find(|&b| hit(&mut tier, b)).unwrap();
    tier.submit_load(job(4, Direction::Load, &[only], &[7]));
    fill(&mem, 0, 30);
    tier.submit_store(job(5, Direction::Store, &[30], &[0]));
    let results = wait(&mut tier, 2);
    let stored = results.iter().find(|r| r.id.0 == 5).unwrap();
    let loaded = results.iter().find(|r| r.id.0 == 4).unwrap();
    assert!(!stored.success && loaded.success, "{results:?}");
    assert!(holds(&mem, 7, only));
    assert_eq!(stat(&tier, "stores_rejected_full"), 1.0);
}

#[test]
fn a_restart_finds_every_block_across_several_segment_files() {
    let dir = tempfile::tempdir().unwrap();
    let mem = SlotMemory::anonymous(16, SLOT).unwrap();
    let mut o = opts(dir.path(), 12);
    o.segment_file_bytes = 5 * RECORD;
    o.high_watermark = 1.0;
    o.low_watermark = 1.0;
    {
        let mut tier = fs_blocks::open_rebuilt(mem.clone(), o.clone()).unwrap();
        assert!(store(&mut tier, &mem, 1, &(0..11).collect::<Vec<_>>()).success);
        tier.shutdown().unwrap();
    }
    assert_eq!(segment_files(dir.path()).len(), 3, "5 + 5 + 2 records");
    let mut tier = fs_blocks::open_rebuilt(mem.clone(), o.clone()).unwrap();
    assert_eq!(tier.rebuild_report().blocks, 11);
    assert_eq!(tier.block_count(), 11);
    let mut ev = Vec::new();
    tier.take_events(usize::MAX, &mut ev);
    assert_eq!(ev.len(), 11, "rebuilt blocks are announced");
    let ids: Vec<u32> = (0..11).collect();
    let r = load(&mut tier, 2, &ids, 0);
    assert!(r.success, "{r:?}");
    for (n, &i) in ids.iter().enumerate() {
        assert!(holds(&mem, n as u32, i));
    }
    // More blocks fit after the restart (the free records are known).
    assert!(store(&mut tier, &mem, 3, &[40]).success);
    assert_eq!(tier.block_count(), 12);
    // That restart loaded the index the shutdown persisted; after a crash
    // (a drop: no index) the scan reads the records of all three files.
    assert!(tier.rebuild_report().index_loaded);
    drop(tier);
    let tier = fs_blocks::open_rebuilt(mem.clone(), o.clone()).unwrap();
    assert!(!tier.rebuild_report().index_loaded);
    assert_eq!(tier.rebuild_report().blocks, 12);
    drop(tier);
    // Another block size: the old segments are removed, nothing is served.
    let small = SlotMemory::anonymous(4, SLOT / 2).unwrap();
    let tier = fs_blocks::open_rebuilt(small, o).unwrap();
    assert_eq!(tier.block_count(), 0);
    assert_eq!(tier.rebuild_report().removed, 3);
}

#[test]
fn damaged_and_torn_records_are_detected_and_never_served() {
    let dir = tempfile::tempdir().unwrap();
    let mem = SlotMemory::anonymous(8, SLOT).unwrap();
    let o = opts(dir.path(), 8);
    let mut tier = fs_blocks::open_rebuilt(mem.clone(), o.clone()).unwrap();
    assert!(store(&mut tier, &mem, 1, &[1, 2, 3]).success);
    // One data bit of block 2; block 3's data replaced by block 1's (a
    // record whose new header landed but whose data did not).
    let (p2, off2) = record_of(dir.path(), 2);
    let f = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(&p2)
        .unwrap();
    let mut byte = [0u8];
    f.read_exact_at(&mut byte, off2 + HEADER_LEN as u64 + 777)
        .unwrap();
    f.write_all_at(&[byte[0] ^ 0x10], off2 + HEADER_LEN as u64 + 777)
        .unwrap();
    let (p1, off1) = record_of(dir.path(), 1);
    let (p3, off3) = record_of(dir.path(), 3);
    let mut data = vec![0u8; SLOT];
    std::fs::File::open(&p1)
        .unwrap()
        .read_exact_at(&mut data, off1 + HEADER_LEN as u64)
        .unwrap();
    let f3 = std::fs::OpenOptions::new().write(true).open(&p3).unwrap();
    f3.write_all_at(&data, off3 + HEADER_LEN as u64).unwrap();

    let r = load(&mut tier, 2, &[1, 2, 3], 4);
    assert!(!r.success);
    assert_eq!(
        r.succeeded_keys,
        Some(vec![key(1)]),
        "only the good block arrives"
    );
    assert!(holds(&mem, 4, 1));
    assert_eq!(tier.errors(Cause::Checksum), 2);
    assert!(!hit(&mut tier, 2) && !hit(&mut tier, 3));
    assert_eq!(stat(&tier, "corrupt_blocks_removed"), 2.0);
    // Their records are free again, and the blocks can be stored anew.
    assert!(store(&mut tier, &mem, 3, &[2, 3]).success);
    assert!(load(&mut tier, 4, &[2, 3], 4).success);
    assert!(holds(&mem, 4, 2) && holds(&mem, 5, 3));
    drop(tier);
    // A damaged header is skipped at restart; the record is reused.
    let (p, off) = record_of(dir.path(), 1);
    let f = std::fs::OpenOptions::new().write(true).open(&p).unwrap();
    f.write_all_at(&[0xff], off + 50).unwrap();
    let mut tier = fs_blocks::open_rebuilt(mem.clone(), o).unwrap();
    assert_eq!(tier.rebuild_report().skipped, 1);
    assert_eq!(tier.block_count(), 2);
    assert!(!hit(&mut tier, 1));
    assert!(load(&mut tier, 5, &[2, 3], 0).success);
}

#[test]
fn one_process_at_a_time_holds_a_segments_directory() {
    let dir = tempfile::tempdir().unwrap();
    let mem = SlotMemory::anonymous(4, SLOT).unwrap();
    let first = fs_blocks::open_rebuilt(mem.clone(), opts(dir.path(), 4)).unwrap();
    let err = fs_blocks::open_rebuilt(mem.clone(), opts(dir.path(), 4)).unwrap_err();
    assert!(matches!(err, Error::AlreadyExists(_)), "{err}");
    assert!(err.to_string().contains("files layout"), "{err}");
    drop(first);
    fs_blocks::open_rebuilt(mem, opts(dir.path(), 4)).unwrap();
}

#[test]
fn bad_segment_options_are_clear_errors() {
    let dir = tempfile::tempdir().unwrap();
    let mem = SlotMemory::anonymous(4, SLOT).unwrap();
    type Change = fn(&mut FsOptions);
    let cases: [(Change, &str); 3] = [
        (|o| o.capacity_bytes = 0, "capacity"),
        (|o| o.shared = true, "shared"),
        (|o| o.segment_file_bytes = 0, "segment_file_bytes"),
    ];
    for (change, word) in cases {
        let mut o = opts(dir.path(), 4);
        change(&mut o);
        let err = fs_blocks::open_rebuilt(mem.clone(), o).unwrap_err();
        assert!(matches!(err, Error::InvalidArgument(_)), "{err}");
        assert!(err.to_string().contains(word), "{err}");
    }
    assert!(
        !dir.path().join("segments").exists(),
        "nothing made on refusal"
    );
}

#[test]
fn the_json_form_names_the_layout() {
    let o: FsOptions = serde_json::from_str(
        r#"{"directory": "/x", "layout": "segments", "capacity_bytes": 1000000, "segment_file_bytes": 65536}"#,
    )
    .unwrap();
    assert_eq!(o.layout, FsLayout::Segments);
    assert_eq!(o.segment_file_bytes, 65536);
    assert!(serde_json::from_str::<FsOptions>(r#"{"layout": "tree"}"#).is_err());
    assert_eq!(FsOptions::default().layout, FsLayout::Files);
    assert_eq!(file_len(SLOT), RECORD);
}

#[test]
fn a_restart_over_the_high_watermark_evicts_down_to_the_low_one() {
    let dir = tempfile::tempdir().unwrap();
    let mem = SlotMemory::anonymous(10, SLOT).unwrap();
    let mut o = opts(dir.path(), 10);
    o.high_watermark = 1.0;
    o.low_watermark = 1.0;
    {
        let mut tier = fs_blocks::open_rebuilt(mem.clone(), o.clone()).unwrap();
        assert!(store(&mut tier, &mem, 1, &(0..10).collect::<Vec<_>>()).success);
    }
    o.high_watermark = 0.5;
    o.low_watermark = 0.3;
    let mut tier = fs_blocks::open_rebuilt(mem.clone(), o).unwrap();
    let report = tier.rebuild_report();
    assert_eq!((report.blocks, report.evicted), (3, 7), "{report:?}");
    assert_eq!(tier.block_count(), 3);
    assert_eq!(tier.bytes_used(), 3 * RECORD);
    // The newest records (highest numbers) stay; the freed ones take stores.
    for b in 7..10 {
        assert!(hit(&mut tier, b), "block {b}");
    }
    assert!(store(&mut tier, &mem, 2, &[20, 21]).success);
    assert_eq!(tier.block_count(), 5);
}
