//! `drop_blocks` of the fs tier, in both layouts: the matching idle
//! blocks leave the index (announced as removed) and the disk, the others
//! stay.

use super::{FsLayout, FsOptions, FsTier};
use crate::key::Key;
use crate::region::SlotMemory;
use crate::request::Request;
use crate::tiering::{SecondaryTier, TierLookup};

fn key(a: u8, b: u8) -> Key {
    Key::new(&[a, b]).unwrap()
}

fn store(t: &mut FsTier, keys: &[Key]) {
    assert!(t.store_and_wait(keys).success);
}

fn written(t: &FsTier) -> f64 {
    t.stats()
        .iter()
        .find(|s| s.name == "stores_written")
        .unwrap()
        .value
}

#[test]
fn a_drop_removes_the_matching_blocks_from_index_and_disk() {
    for layout in [FsLayout::Files, FsLayout::Segments] {
        let dir = tempfile::tempdir().unwrap();
        let slots = SlotMemory::anonymous(8, 4096).unwrap();
        let opts = FsOptions {
            layout,
            capacity_bytes: 8 * super::format::file_len(4096),
            ..FsOptions::new(dir.path())
        };
        let mut t = FsTier::open(slots, opts).unwrap();
        t.set_event_capacity(64);
        store(&mut t, &[key(1, 0), key(1, 1), key(2, 0)]);
        let mut events = Vec::new();
        t.take_events(64, &mut events);
        let c = t.drop_blocks(&[1]).unwrap();
        assert_eq!((c.dropped, c.kept), (2, 0), "{layout:?}");
        assert_eq!(t.block_count(), 1, "{layout:?}");
        let r = Request::default();
        assert_eq!(t.lookup(&key(1, 0), &r), TierLookup::Miss, "{layout:?}");
        assert_eq!(t.lookup(&key(2, 0), &r), TierLookup::Hit, "{layout:?}");
        events.clear();
        t.take_events(64, &mut events);
        let removed: Vec<Option<Key>> = events
            .iter()
            .filter(|e| e.kind == crate::events::EventKind::Removed)
            .map(|e| e.key)
            .collect();
        assert_eq!(removed.len(), 2, "{layout:?}: {events:?}");
        assert!(removed.contains(&Some(key(1, 0))), "{layout:?}");
        // The block is gone from the disk too: storing it writes it again.
        let before = written(&t);
        store(&mut t, &[key(1, 0)]);
        assert_eq!(written(&t), before + 1.0, "{layout:?}");
        let all = t.drop_blocks(&[]).unwrap();
        assert_eq!((all.dropped, all.kept), (2, 0), "{layout:?}");
        assert_eq!(t.block_count(), 0, "{layout:?}");
        t.shutdown().unwrap();
    }
}
