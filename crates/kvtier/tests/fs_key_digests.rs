//! The file-system tier with key digests (`FsOptions::key_digests`,
//! segments layout): keys of 32 bytes, kept in the index as 16-byte
//! digests, are stored and served whole; found again after a clean
//! shutdown (the persisted index lists digests) and after a crash (the
//! scan reads the keys from the records); dropped by prefix (their keys
//! read from the records); and an index written with digests is not
//! trusted by a tier without them (it scans).

use std::path::Path;
use std::sync::Arc;

use kvtier_core::Key;
use kvtier_core::events::Event;
use kvtier_core::region::SlotMemory;
use kvtier_core::tiering::{Direction, Job, JobId, JobResult, SecondaryTier, TierLookup};
use kvtier_core::tiers::fs::{FsLayout, FsOptions, FsTier};

use fs_blocks::{fill, holds, request, wait};
use kvtier_testkit::fs_blocks;

const SLOT: usize = 4096;
const SLOTS: u32 = 16;
const INDEX: &str = "kvtier-index";

/// A segments tier with key digests, room for 256 blocks.
fn opts(dir: &Path) -> FsOptions {
    let mut o = FsOptions::new(dir);
    o.read_threads = 2;
    o.write_threads = 2;
    o.layout = FsLayout::Segments;
    o.capacity_bytes = 256 * (4096 + SLOT as u64);
    o.segment_file_bytes = 32 * (4096 + SLOT as u64);
    o.key_digests = true;
    o
}

/// The 32-byte key of block `i` of family `f` (its first byte).
fn long_key(f: u8, i: u32) -> Key {
    let mut b = [f; 32];
    b[1..5].copy_from_slice(&i.to_le_bytes());
    b[5..].copy_from_slice(&[i as u8 ^ 0x5a; 27]);
    Key::new(&b).unwrap()
}

/// The block number block `key` carries in its bytes.
fn id(f: u8, i: u32) -> u32 {
    u32::from(f) << 24 | i
}

fn job(id: u64, direction: Direction, keys: &[Key], first: u32) -> Arc<Job> {
    Arc::new(Job {
        id: JobId(id),
        direction,
        keys: keys.to_vec(),
        slots: (first..first + keys.len() as u32).collect(),
        request: request(),
    })
}

/// Stores blocks (family, number) of `blocks`, at most [`SLOTS`] a job.
fn store(tier: &mut FsTier, mem: &SlotMemory, blocks: &[(u8, u32)]) {
    for chunk in blocks.chunks(SLOTS as usize) {
        for (s, &(f, i)) in chunk.iter().enumerate() {
            fill(mem, s as u32, id(f, i));
        }
        let keys: Vec<Key> = chunk.iter().map(|&(f, i)| long_key(f, i)).collect();
        tier.submit_store(job(1, Direction::Store, &keys, 0));
        let r = wait(tier, 1).remove(0);
        assert!(r.success, "{r:?}");
    }
}

/// Loads the blocks of `blocks` and asserts each came back whole and right.
fn serves(tier: &mut FsTier, mem: &SlotMemory, blocks: &[(u8, u32)]) {
    for chunk in blocks.chunks(SLOTS as usize) {
        let keys: Vec<Key> = chunk.iter().map(|&(f, i)| long_key(f, i)).collect();
        tier.submit_load(job(2, Direction::Load, &keys, 0));
        let r: JobResult = wait(tier, 1).remove(0);
        assert!(r.success && r.succeeded_keys.is_none(), "{r:?}");
        for (s, &(f, i)) in chunk.iter().enumerate() {
            assert!(
                holds(mem, s as u32, id(f, i)),
                "block {f}/{i} came back wrong"
            );
        }
    }
}

fn hit(tier: &mut FsTier, f: u8, i: u32) -> bool {
    tier.lookup(&long_key(f, i), &request()) == TierLookup::Hit
}

fn family(f: u8, n: u32) -> Vec<(u8, u32)> {
    (0..n).map(|i| (f, i)).collect()
}

#[test]
fn long_keys_are_served_and_found_again_after_a_clean_shutdown_and_a_crash() {
    let dir = tempfile::tempdir().unwrap();
    let mem = SlotMemory::anonymous(SLOTS, SLOT).unwrap();
    let o = opts(dir.path());
    let first = family(b'a', 40);
    let mut tier = fs_blocks::open_rebuilt(mem.clone(), o.clone()).unwrap();
    store(&mut tier, &mem, &first);
    serves(&mut tier, &mem, &first);
    assert!(!hit(&mut tier, b'b', 0), "a key never stored");
    tier.shutdown().unwrap();
    drop(tier);
    assert!(dir.path().join(INDEX).is_file());

    // Clean: the persisted digests, loaded.
    let mut tier = fs_blocks::open_rebuilt(mem.clone(), o.clone()).unwrap();
    let r = tier.rebuild_report();
    assert!(r.index_loaded && r.blocks == 40, "{r:?}");
    assert_eq!(tier.block_count(), 40);
    serves(&mut tier, &mem, &first);
    let more = family(b'b', 10);
    store(&mut tier, &mem, &more);
    // A crash: no shutdown, no index.
    drop(tier);
    assert!(!dir.path().join(INDEX).exists());

    let mut tier = fs_blocks::open_rebuilt(mem.clone(), o.clone()).unwrap();
    let r = tier.rebuild_report();
    assert!(!r.index_loaded && r.blocks == 50, "{r:?}");
    serves(&mut tier, &mem, &first);
    serves(&mut tier, &mem, &more);
    tier.shutdown().unwrap();
}

#[test]
fn a_prefix_drop_reads_the_keys_kept_as_digests_and_drops_only_those_under_it() {
    let dir = tempfile::tempdir().unwrap();
    let mem = SlotMemory::anonymous(SLOTS, SLOT).unwrap();
    let mut tier = fs_blocks::open_rebuilt(mem.clone(), opts(dir.path())).unwrap();
    let (a, b) = (family(b'a', 20), family(b'b', 12));
    store(&mut tier, &mem, &a);
    store(&mut tier, &mem, &b);
    let d = tier.drop_blocks(b"a").unwrap();
    assert_eq!((d.dropped, d.kept), (20, 0));
    assert!((0..20).all(|i| !hit(&mut tier, b'a', i)));
    serves(&mut tier, &mem, &b);
    // Under a prefix longer than the digest, too.
    let k = long_key(b'b', 3);
    let d = tier.drop_blocks(&k.as_bytes()[..20]).unwrap();
    assert_eq!(d.dropped, 1);
    assert!(!hit(&mut tier, b'b', 3) && hit(&mut tier, b'b', 4));
    // The empty prefix drops every one without reading a record.
    let d = tier.drop_blocks(b"").unwrap();
    assert_eq!(d.dropped, 11);
    assert_eq!(tier.block_count(), 0);
}

#[test]
fn a_prefix_dropped_during_the_load_of_digests_takes_the_blocks_under_it() {
    let dir = tempfile::tempdir().unwrap();
    let mem = SlotMemory::anonymous(SLOTS, SLOT).unwrap();
    let o = opts(dir.path());
    let (a, b) = (family(b'a', 20), family(b'b', 20));
    let mut tier = fs_blocks::open_rebuilt(mem.clone(), o.clone()).unwrap();
    store(&mut tier, &mem, &a);
    store(&mut tier, &mem, &b);
    tier.shutdown().unwrap();
    drop(tier);
    let (mut tier, hold) = FsTier::open_held(mem.clone(), o.clone()).unwrap();
    tier.drop_blocks(b"a").unwrap();
    drop(hold);
    let r = tier.wait_rebuilt();
    assert!(r.index_loaded, "{r:?}");
    assert_eq!(tier.block_count(), 20);
    assert!((0..20).all(|i| !hit(&mut tier, b'a', i)));
    serves(&mut tier, &mem, &b);
}

#[test]
fn an_index_of_digests_is_scanned_for_without_digests_and_one_of_keys_is_loaded_with_them() {
    let dir = tempfile::tempdir().unwrap();
    let mem = SlotMemory::anonymous(SLOTS, SLOT).unwrap();
    let with = opts(dir.path());
    let without = FsOptions {
        key_digests: false,
        ..with.clone()
    };
    let blocks = family(b'c', 24);
    let mut tier = fs_blocks::open_rebuilt(mem.clone(), with.clone()).unwrap();
    store(&mut tier, &mem, &blocks);
    tier.shutdown().unwrap();
    drop(tier);

    let mut tier = fs_blocks::open_rebuilt(mem.clone(), without.clone()).unwrap();
    let r = tier.rebuild_report();
    assert!(
        r.index_rejected && !r.index_loaded && r.blocks == 24,
        "{r:?}"
    );
    serves(&mut tier, &mem, &blocks);
    tier.shutdown().unwrap();
    drop(tier);

    let mut tier = fs_blocks::open_rebuilt(mem.clone(), with).unwrap();
    let r = tier.rebuild_report();
    assert!(r.index_loaded && r.blocks == 24, "{r:?}");
    serves(&mut tier, &mem, &blocks);
}

#[test]
fn with_key_digests_the_tier_announces_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let mem = SlotMemory::anonymous(SLOTS, SLOT).unwrap();
    let mut tier = fs_blocks::open_rebuilt(mem.clone(), opts(dir.path())).unwrap();
    tier.set_event_capacity(64);
    store(&mut tier, &mem, &family(b'a', 4));
    tier.drop_blocks(b"").unwrap();
    let mut events: Vec<Event> = Vec::new();
    tier.take_events(64, &mut events);
    assert!(events.is_empty(), "{events:?}");
}

#[test]
fn key_digests_need_the_segments_layout_and_no_max_age() {
    let dir = tempfile::tempdir().unwrap();
    let mem = SlotMemory::anonymous(SLOTS, SLOT).unwrap();
    let files = FsOptions {
        layout: FsLayout::Files,
        ..opts(dir.path())
    };
    let e = FsTier::open(mem.clone(), files).unwrap_err().to_string();
    assert!(e.contains("key_digests needs the segments layout"), "{e}");
    let aged = FsOptions {
        max_age: std::time::Duration::from_secs(60),
        ..opts(dir.path())
    };
    let e = FsTier::open(mem, aged).unwrap_err().to_string();
    assert!(e.contains("key_digests and max_age_ms"), "{e}");
}
