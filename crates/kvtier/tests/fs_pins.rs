//! Pin sets in the fs tier: held blocks survive the watermark eviction,
//! drops and their max age until released; through the manager, the bound
//! is the share of the tier's capacity in blocks, and a refused set
//! changes nothing.

use std::path::Path;
use std::time::{Duration, Instant};

use kvtier_core::Error;
use kvtier_core::key::Key;
use kvtier_core::primary::{PrimaryConfig, PrimaryTier, StorePlan};
use kvtier_core::region::SlotMemory;
use kvtier_core::tiering::{
    Manager, ManagerOptions, PinOutcome, PinningOptions, SecondaryTier, TierLookup,
};
use kvtier_core::tiers::fs::format::file_len;
use kvtier_core::tiers::fs::{FsOptions, FsTier};

use fs_blocks::{key, request, stat, store};
use kvtier_testkit::fs_blocks;

const SLOT: usize = 4096;

/// Options for a directory of `blocks` blocks (0: unbounded) that evicts
/// only when a store would not fit.
fn opts(dir: &Path, blocks: u64) -> FsOptions {
    let mut o = FsOptions::new(dir);
    o.read_threads = 1;
    o.write_threads = 1;
    o.capacity_bytes = blocks * file_len(SLOT);
    o.high_watermark = 1.0;
    o.low_watermark = 1.0;
    o
}

fn present(tier: &mut FsTier, i: u32) -> bool {
    tier.lookup(&key(i), &request()) == TierLookup::Hit
}

#[test]
fn held_blocks_survive_eviction_and_drops_until_released() {
    let dir = tempfile::tempdir().unwrap();
    let mem = SlotMemory::anonymous(4, SLOT).unwrap();
    let mut tier = fs_blocks::open_rebuilt(mem.clone(), opts(dir.path(), 4)).unwrap();
    assert_eq!(tier.capacity_blocks(), Some(4));
    assert!(store(&mut tier, &mem, 1, &[1, 2, 3, 4]).success);
    let held = tier.hold(&[key(1), key(2), key(9)]).unwrap();
    assert_eq!(held, [true, true, false], "key 9 is absent");
    assert_eq!(stat(&tier, "held_blocks"), 2.0);
    // Key 1 is the least recent: without the hold it would go first.
    assert!(store(&mut tier, &mem, 2, &[5, 6]).success);
    assert!(present(&mut tier, 1) && present(&mut tier, 2));
    assert!(!present(&mut tier, 3) && !present(&mut tier, 4));
    // A drop keeps the held blocks and counts them.
    let d = tier.drop_blocks(b"block-").unwrap();
    assert_eq!((d.dropped, d.kept), (2, 2));
    assert!(present(&mut tier, 1) && present(&mut tier, 2));
    // Released, they are evictable again (the most recent, 2 before 1).
    tier.release_hold(&[key(1), key(2)]);
    assert_eq!(stat(&tier, "held_blocks"), 0.0);
    assert!(store(&mut tier, &mem, 3, &[7, 8, 10]).success);
    assert_eq!(tier.block_count(), 4);
    assert!(!present(&mut tier, 1) && present(&mut tier, 2));
    let d = tier.drop_blocks(b"").unwrap();
    assert_eq!((d.dropped, d.kept), (4, 0));
    assert_eq!(stat(&tier, "evictions"), 3.0);
}

#[test]
fn a_held_block_outlives_its_max_age_and_goes_when_released() {
    let dir = tempfile::tempdir().unwrap();
    let mem = SlotMemory::anonymous(4, SLOT).unwrap();
    let mut o = opts(dir.path(), 0);
    o.max_age = Duration::from_millis(1);
    let mut tier = fs_blocks::open_rebuilt(mem.clone(), o).unwrap();
    assert_eq!(tier.capacity_blocks(), None, "unbounded");
    assert!(store(&mut tier, &mem, 1, &[1, 2]).success);
    assert_eq!(tier.hold(&[key(1)]).unwrap(), [true]);
    std::thread::sleep(Duration::from_millis(20));
    tier.on_schedule_end();
    assert_eq!(tier.block_count(), 1, "key 2 expired");
    assert!(present(&mut tier, 1), "the held block is served");
    assert_eq!(tier.hold(&[key(2)]).unwrap(), [false]);
    tier.release_hold(&[key(1)]);
    assert_eq!(tier.block_count(), 0, "released past its max age, it goes");
    assert_eq!(stat(&tier, "expired"), 2.0);
    assert!(!present(&mut tier, 1));
}

#[test]
fn a_block_past_its_max_age_is_not_held_even_before_a_sweep() {
    let dir = tempfile::tempdir().unwrap();
    let mem = SlotMemory::anonymous(4, SLOT).unwrap();
    let mut o = opts(dir.path(), 0);
    o.max_age = Duration::from_millis(1);
    let mut tier = fs_blocks::open_rebuilt(mem.clone(), o).unwrap();
    assert!(store(&mut tier, &mem, 1, &[1]).success);
    std::thread::sleep(Duration::from_millis(20));
    // No step has ended: the block is still indexed, but past its age.
    assert_eq!(tier.hold(&[key(1)]).unwrap(), [false]);
    assert_eq!(stat(&tier, "held_blocks"), 0.0);
    assert!(!present(&mut tier, 1));
}

#[test]
fn a_shut_down_tier_holds_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let mem = SlotMemory::anonymous(4, SLOT).unwrap();
    let mut tier = fs_blocks::open_rebuilt(mem.clone(), opts(dir.path(), 4)).unwrap();
    assert!(store(&mut tier, &mem, 1, &[1, 2]).success);
    tier.shutdown().unwrap();
    assert_eq!(tier.hold(&[key(1), key(2)]).unwrap(), [false, false]);
}

fn k(i: u8) -> Key {
    Key::new(&[b'k', i]).unwrap()
}

/// A manager of 16 primary slots over an fs tier of `fs_blocks` blocks
/// holding blocks `0..n` (stored, cascaded, idle).
fn manager_with_fs(dir: &Path, fs_blocks: u64, n: u8) -> Manager {
    manager_with_layouts(dir, fs_blocks, n, None, None)
}

/// [`manager_with_fs`] with layout fingerprints for the primary tier (the
/// manager's) and the fs tier.
fn manager_with_layouts(
    dir: &Path,
    fs_blocks: u64,
    n: u8,
    primary_layout: Option<&str>,
    fs_layout: Option<&str>,
) -> Manager {
    let mem = SlotMemory::anonymous(16, SLOT).unwrap();
    let primary = PrimaryTier::new(PrimaryConfig {
        capacity: 16,
        ..Default::default()
    })
    .unwrap();
    let m = Manager::new(
        primary,
        ManagerOptions {
            pinning: PinningOptions { max_share: 0.25 },
            layout_fingerprint: primary_layout.map(String::from),
            ..Default::default()
        },
    );
    m.set_slot_memory(mem.clone()).unwrap();
    let mut o = opts(dir, fs_blocks);
    o.layout_fingerprint = fs_layout.map(String::from);
    m.add_tier(Box::new(fs_blocks::open_rebuilt(mem, o).unwrap()))
        .unwrap();
    let r = m.request_begin("r", Default::default()).unwrap().id;
    let keys: Vec<Key> = (0..n).map(k).collect();
    let mut plan = StorePlan::default();
    m.prepare_store(r, &keys, &mut plan).unwrap();
    m.complete_store(r, &plan.to_store, true).unwrap();
    m.request_finished(r).unwrap();
    let deadline = Instant::now() + Duration::from_secs(30);
    while m.has_pending_work().unwrap() {
        assert!(Instant::now() < deadline, "cascades did not finish");
        m.schedule_end().unwrap();
        std::thread::sleep(Duration::from_millis(1));
    }
    m
}

#[test]
fn a_manager_pin_set_in_the_fs_tier_is_bounded_by_its_capacity_in_blocks() {
    let dir = tempfile::tempdir().unwrap();
    // 8 blocks: at most 2 held (0.25).
    let m = manager_with_fs(dir.path(), 8, 4);
    let got = m.pin_set("a", &[k(0), k(1), k(0), k(9)], 1).unwrap();
    assert_eq!(
        got,
        PinOutcome {
            pinned: 2,
            absent: 1
        }
    );
    assert_eq!(m.pin_sets().unwrap()[0].tier, 1);
    // A third block passes the bound: refused, and nothing changes.
    let e = m.pin_set("b", &[k(2)], 1).unwrap_err();
    assert!(
        matches!(&e, Error::NoSpace(msg) if msg.contains("pinning.max_share")),
        "{e}"
    );
    assert_eq!(m.pin_sets().unwrap().len(), 1);
    // Only keys 0 and 1 are held in the fs tier (the primary tier holds
    // nothing): a drop of everything keeps exactly those two.
    let d = m.drop_blocks(b"", None).unwrap();
    assert_eq!((d.dropped, d.kept), (4 + 2, 2));
    // Unpinned, they go too.
    assert_eq!(m.unpin_set("a").unwrap(), 2);
    let d = m.drop_blocks(b"", None).unwrap();
    assert_eq!((d.dropped, d.kept), (2, 0));
}

#[test]
fn a_drop_by_fingerprint_reaches_only_the_tiers_of_that_layout() {
    let dir = tempfile::tempdir().unwrap();
    // Blocks 0..4 are in both tiers: the primary tier's layout is "A",
    // the fs tier's "B".
    let m = manager_with_layouts(dir.path(), 16, 4, Some("A"), Some("B"));
    let d = m.drop_blocks(b"", Some("C")).unwrap();
    assert_eq!((d.dropped, d.kept, d.unsupported_tiers), (0, 0, 0));
    let d = m.drop_blocks(b"", Some("B")).unwrap();
    assert_eq!((d.dropped, d.kept), (4, 0), "the fs tier's blocks only");
    let d = m.drop_blocks(b"", Some("A")).unwrap();
    assert_eq!(
        (d.dropped, d.kept),
        (4, 0),
        "the primary tier's blocks only"
    );
    let d = m.drop_blocks(b"", None).unwrap();
    assert_eq!((d.dropped, d.kept), (0, 0), "nothing is left in either");
}

#[test]
fn replacing_a_set_in_the_fs_tier_keeps_the_common_keys_and_a_reset_releases_them() {
    let dir = tempfile::tempdir().unwrap();
    let m = manager_with_fs(dir.path(), 16, 4);
    m.pin_set("a", &[k(0), k(1)], 1).unwrap();
    // Bound 4: {0, 1} then {1, 2, 3} is 3 keys, never 4 at once counted.
    let got = m.pin_set("a", &[k(1), k(2), k(3)], 1).unwrap();
    assert_eq!(
        got,
        PinOutcome {
            pinned: 3,
            absent: 0
        }
    );
    let d = m.drop_blocks(&[b'k', 0], None).unwrap();
    assert_eq!((d.dropped, d.kept), (2, 0), "key 0 was released");
    m.reset_cache().unwrap();
    assert!(m.pin_sets().unwrap().is_empty());
    let d = m.drop_blocks(b"", None).unwrap();
    assert_eq!((d.dropped, d.kept), (3, 0), "the reset released the holds");
}

#[test]
fn a_tier_without_holds_refuses_a_pin_set_with_nothing_changed() {
    let m = Manager::new(
        PrimaryTier::new(PrimaryConfig {
            capacity: 4,
            ..Default::default()
        })
        .unwrap(),
        ManagerOptions::default(),
    );
    m.add_tier(Box::new(kvtier_testkit::common::TestTier::new("t").0))
        .unwrap();
    let e = m.pin_set("a", &[k(0)], 1).unwrap_err();
    assert!(matches!(e, Error::Unsupported(_)), "{e}");
    assert!(m.pin_sets().unwrap().is_empty());
}
