//! The file-system tier while it reads the index persisted at a clean
//! shutdown in the background, both layouts: `open` returns before the
//! body is read (held by a `RebuildHold` here, so nothing depends on
//! timing), the tier serves and stores meanwhile, what it did meanwhile
//! (a store, a drop, an eviction) is not undone by the load, the loaded
//! index is whole afterwards, and a crash during the load leaves no index
//! that is trusted again.

use std::path::Path;

use kvtier_core::region::SlotMemory;
use kvtier_core::tiering::{SecondaryTier, TierLookup, TierReadiness};
use kvtier_core::tiers::fs::{FsLayout, FsOptions, FsTier};

use fs_blocks::{holds, key, load, request, stat, store};
use kvtier_testkit::fs_blocks;

const SLOT: usize = 4096;
const SLOTS: u32 = 16;
const INDEX: &str = "kvtier-index";
const LAYOUTS: [FsLayout; 2] = [FsLayout::Files, FsLayout::Segments];

/// Options of `layout` with room for `blocks` blocks (segments of 8).
fn opts(dir: &Path, layout: FsLayout, blocks: u64) -> FsOptions {
    let mut o = FsOptions::new(dir);
    o.read_threads = 2;
    o.write_threads = 2;
    o.layout = layout;
    o.capacity_bytes = blocks * (4096 + SLOT as u64);
    o.segment_file_bytes = 8 * (4096 + SLOT as u64);
    o
}

fn store_all(tier: &mut FsTier, mem: &SlotMemory, ids: &[u32]) {
    for (n, chunk) in ids.chunks(SLOTS as usize).enumerate() {
        let r = store(tier, mem, 100 + n as u64, chunk);
        assert!(r.success, "{r:?}");
    }
}

fn hit(tier: &mut FsTier, i: u32) -> bool {
    tier.lookup(&key(i), &request()) == TierLookup::Hit
}

/// Asserts that each of `ids` is served whole and right.
fn serves(tier: &mut FsTier, mem: &SlotMemory, ids: &[u32]) {
    for (n, chunk) in ids.chunks(SLOTS as usize).enumerate() {
        let r = load(tier, 1000 + n as u64, chunk, 0);
        assert!(r.success && r.succeeded_keys.is_none(), "{r:?}");
        for (s, &i) in chunk.iter().enumerate() {
            assert!(holds(mem, s as u32, i), "block {i} came back wrong");
        }
    }
}

/// A directory of blocks `ids` shut down cleanly (its index persisted).
fn persisted(o: &FsOptions, mem: &SlotMemory, ids: &[u32]) {
    let mut tier = fs_blocks::open_rebuilt(mem.clone(), o.clone()).unwrap();
    store_all(&mut tier, mem, ids);
    tier.shutdown().unwrap();
    assert!(o.root.join(INDEX).is_file());
}

#[test]
fn open_returns_before_the_load_and_the_tier_serves_and_stores_meanwhile() {
    for layout in LAYOUTS {
        let dir = tempfile::tempdir().unwrap();
        let mem = SlotMemory::anonymous(SLOTS, SLOT).unwrap();
        let o = opts(dir.path(), layout, 64);
        let ids: Vec<u32> = (0..24).collect();
        persisted(&o, &mem, &ids);
        let (mut tier, hold) = FsTier::open_held(mem.clone(), o.clone()).unwrap();
        // Used once: gone (its body read from the descriptor kept).
        assert!(!dir.path().join(INDEX).exists(), "{layout:?}");
        assert!(tier.rebuilding(), "{layout:?}");
        assert_eq!(stat(&tier, "rebuilding"), 1.0);
        let TierReadiness::NotReady(why) = tier.readiness() else {
            panic!("{layout:?}: ready while loading");
        };
        assert!(
            why.contains("fs tier rebuilding") && why.contains("persisted index"),
            "{why}"
        );
        let r = tier.rebuild_report();
        assert!(
            !r.index_loaded && !r.index_rejected && r.blocks == 0,
            "{r:?}"
        );
        // Nothing read yet: a miss, and stores work.
        assert!(!hit(&mut tier, 0), "{layout:?}");
        store_all(&mut tier, &mem, &[30, 31]);
        serves(&mut tier, &mem, &[30, 31]);
        drop(hold);
        let r = tier.wait_rebuilt();
        assert!(r.index_loaded && !r.index_rejected, "{layout:?}: {r:?}");
        assert_eq!((r.blocks, r.skipped), (24, 0), "{layout:?}: {r:?}");
        assert!(!tier.rebuilding());
        assert_eq!(tier.readiness(), TierReadiness::Ready);
        assert_eq!(tier.block_count(), 26);
        let all: Vec<u32> = (0..24).chain([30, 31]).collect();
        serves(&mut tier, &mem, &all);
        // The load ended: this shutdown persists the whole index again.
        tier.shutdown().unwrap();
        drop(tier);
        let mut tier = fs_blocks::open_rebuilt(mem.clone(), o).unwrap();
        assert!(tier.rebuild_report().index_loaded, "{layout:?}");
        assert_eq!(tier.block_count(), 26);
        serves(&mut tier, &mem, &all);
    }
}

#[test]
fn a_store_drop_or_eviction_during_the_load_is_not_undone_by_it() {
    for layout in LAYOUTS {
        let dir = tempfile::tempdir().unwrap();
        let mem = SlotMemory::anonymous(SLOTS, SLOT).unwrap();
        // 40 blocks; watermarks of 20 and 10 blocks.
        let mut o = opts(dir.path(), layout, 40);
        o.high_watermark = 0.5;
        o.low_watermark = 0.25;
        persisted(&o, &mem, &[0, 1, 2, 3, 4, 5]);
        let (mut tier, hold) = FsTier::open_held(mem.clone(), o.clone()).unwrap();
        // Dropped before the load reached it.
        let d = tier.drop_blocks(key(2).as_bytes()).unwrap();
        assert_eq!((d.dropped, d.kept), (0, 0), "{layout:?}: not indexed yet");
        // Stored again, then evicted (the least recent of the tier's).
        store_all(&mut tier, &mem, &[5]);
        let more: Vec<u32> = (20..40).collect();
        store_all(&mut tier, &mem, &more);
        assert!(stat(&tier, "evictions") > 0.0, "{layout:?}");
        assert!(!hit(&mut tier, 5), "{layout:?}: evicted");
        // Stored again: the tier's copy, not the listed one.
        store_all(&mut tier, &mem, &[1]);
        let kept: Vec<u32> = (20..40).filter(|&i| hit(&mut tier, i)).collect();
        drop(hold);
        let r = tier.wait_rebuilt();
        assert!(r.index_loaded, "{layout:?}: {r:?}");
        // Loaded: 0, 3 and 4; 1 and 5 were the tier's, 2 dropped.
        assert_eq!(r.blocks, 3, "{layout:?}: {r:?}");
        assert!(!hit(&mut tier, 2), "{layout:?}: the drop holds");
        assert!(!hit(&mut tier, 5), "{layout:?}: the eviction holds");
        let mut want = vec![0, 1, 3, 4];
        want.extend(&kept);
        assert_eq!(tier.block_count(), want.len(), "{layout:?}");
        serves(&mut tier, &mem, &want);
        if layout == FsLayout::Files {
            // The dropped and the evicted block's files are gone too.
            assert_eq!(fs_blocks::files(dir.path(), ".kvb").len(), want.len());
        }
        // What the next open finds (by a scan: the index dropped) agrees.
        tier.shutdown().unwrap();
        drop(tier);
        std::fs::remove_file(dir.path().join(INDEX)).unwrap();
        let mut tier = fs_blocks::open_rebuilt(mem.clone(), o).unwrap();
        assert_eq!(tier.block_count(), want.len(), "{layout:?}");
        assert!(!hit(&mut tier, 2) && !hit(&mut tier, 5), "{layout:?}");
        serves(&mut tier, &mem, &want);
    }
}

#[test]
fn a_crash_or_a_shutdown_during_the_load_leaves_no_index_and_the_next_open_scans() {
    for layout in LAYOUTS {
        let dir = tempfile::tempdir().unwrap();
        let mem = SlotMemory::anonymous(SLOTS, SLOT).unwrap();
        let o = opts(dir.path(), layout, 64);
        let ids: Vec<u32> = (0..12).collect();
        persisted(&o, &mem, &ids);
        // A crash while the load is held: no shutdown.
        let (mut tier, hold) = FsTier::open_held(mem.clone(), o.clone()).unwrap();
        store_all(&mut tier, &mem, &[20]);
        drop(tier);
        drop(hold);
        assert!(!dir.path().join(INDEX).exists(), "{layout:?}");
        let (mut tier, hold) = FsTier::open_held(mem.clone(), o.clone()).unwrap();
        let TierReadiness::NotReady(why) = tier.readiness() else {
            panic!("{layout:?}: ready while scanning");
        };
        assert!(why.contains("restart scan"), "{why}");
        drop(hold);
        let r = tier.wait_rebuilt();
        assert!(!r.index_loaded && !r.index_rejected, "{layout:?}: {r:?}");
        let all: Vec<u32> = (0..12).chain([20]).collect();
        assert_eq!(tier.block_count(), all.len(), "{layout:?}");
        serves(&mut tier, &mem, &all);
        tier.shutdown().unwrap();
        drop(tier);
        // A shutdown while the load is held persists no index.
        let (mut tier, hold) = FsTier::open_held(mem.clone(), o.clone()).unwrap();
        assert!(tier.rebuilding(), "{layout:?}");
        tier.shutdown().unwrap();
        drop(hold);
        drop(tier);
        assert!(!dir.path().join(INDEX).exists(), "{layout:?}");
        let mut tier = fs_blocks::open_rebuilt(mem.clone(), o.clone()).unwrap();
        let r = tier.rebuild_report();
        assert!(!r.index_loaded && !r.index_rejected, "{layout:?}: {r:?}");
        serves(&mut tier, &mem, &all);
    }
}
