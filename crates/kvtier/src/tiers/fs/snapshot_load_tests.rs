//! The persisted index read in the background by a tier: a body bad in
//! one chunk hands on the chunks read before it, and the restart scan
//! finds the rest, every block once.

use super::super::snapshot::INDEX_NAME;
use super::super::snapshot_format::{BodyWriter, HEADER, Header, check_chunk};
use super::super::{FsLayout, FsOptions, FsTier};
use crate::events::EventKind;
use crate::key::Key;
use crate::region::SlotMemory;
use crate::request::Request;
use crate::tiering::{SecondaryTier, TierLookup};

const BLOCKS: u8 = 24;

fn key(i: u8) -> Key {
    Key::new(&[i; 8]).unwrap()
}

fn store(t: &mut FsTier, keys: &[Key]) {
    assert!(t.store_and_wait(keys).success);
}

/// Rewrites the one-chunk index file of `dir` in chunks of at most
/// `limit` bytes of entries, then `spoil`s its body.
fn rechunk(dir: &std::path::Path, limit: usize, spoil: impl FnOnce(&mut [u8])) -> u64 {
    let p = dir.join(INDEX_NAME);
    let bytes = std::fs::read(&p).unwrap();
    let h = Header::decode(bytes[..HEADER].try_into().unwrap()).unwrap();
    assert_eq!(h.chunks, 1);
    let mut entries = Vec::new();
    check_chunk(0, &bytes[HEADER..], &mut entries).unwrap();
    let mut w = BodyWriter::with_chunk(limit);
    for (key, record, at) in entries {
        w.push(&key, record, at);
    }
    let (mut body, entries, chunks) = w.finish();
    spoil(&mut body);
    let h = Header {
        entries,
        body_len: body.len() as u64,
        chunks,
        ..h
    };
    let mut out = h.encode().to_vec();
    out.extend_from_slice(&body);
    std::fs::write(&p, out).unwrap();
    chunks
}

#[test]
fn a_body_bad_in_its_first_chunk_is_scanned_for_and_every_block_found_once() {
    for layout in [FsLayout::Files, FsLayout::Segments] {
        let dir = tempfile::tempdir().unwrap();
        let slots = SlotMemory::anonymous(BLOCKS as u32, 4096).unwrap();
        let opts = FsOptions {
            layout,
            capacity_bytes: 64 * super::super::format::file_len(4096),
            ..FsOptions::new(dir.path())
        };
        let mut t = FsTier::open(slots.clone(), opts.clone()).unwrap();
        let keys: Vec<Key> = (0..BLOCKS).map(key).collect();
        store(&mut t, &keys);
        t.shutdown().unwrap();
        drop(t);
        // Chunks of four entries; the first (the least recent, read
        // last) flipped.
        let chunks = rechunk(dir.path(), 4 * (1 + 8 + 12), |b| b[3] ^= 1);
        assert_eq!(chunks, 6, "{layout:?}");
        let (mut t, hold) = FsTier::open_held(slots, opts).unwrap();
        t.set_event_capacity(1024);
        assert!(t.rebuilding(), "{layout:?}");
        drop(hold);
        let r = t.wait_rebuilt();
        assert!(r.index_rejected && !r.index_loaded, "{layout:?}: {r:?}");
        assert_eq!(
            (r.blocks, r.skipped),
            (u64::from(BLOCKS), 0),
            "{layout:?}: {r:?}"
        );
        assert_eq!(t.block_count(), usize::from(BLOCKS), "{layout:?}");
        let mut errors = Vec::new();
        t.take_errors(&mut errors);
        assert!(errors.iter().any(|e| e.contains("checksum")), "{errors:?}");
        // Announced once each: the scan did not find again what the load
        // handed on.
        let mut events = Vec::new();
        t.take_events(1024, &mut events);
        assert!(events.iter().all(|e| e.kind == EventKind::Stored));
        let mut announced: Vec<Key> = events.iter().map(|e| e.key.unwrap()).collect();
        announced.sort_unstable_by_key(|k| *k.as_bytes().first().unwrap());
        assert_eq!(announced, keys, "{layout:?}");
        let req = Request::default();
        for k in &keys {
            assert_eq!(t.lookup(k, &req), TierLookup::Hit, "{layout:?}");
        }
        // Its restart ended: a clean shutdown persists a whole index again.
        t.shutdown().unwrap();
        assert!(dir.path().join(INDEX_NAME).is_file(), "{layout:?}");
    }
}

#[test]
fn a_key_digest_in_an_index_of_whole_keys_is_refused_and_scanned_for() {
    use super::super::index::Held;
    let dir = tempfile::tempdir().unwrap();
    let slots = SlotMemory::anonymous(4, 4096).unwrap();
    let opts = FsOptions {
        layout: FsLayout::Segments,
        capacity_bytes: 64 * super::super::format::file_len(4096),
        ..FsOptions::new(dir.path())
    };
    let mut t = FsTier::open(slots.clone(), opts.clone()).unwrap();
    let keys: Vec<Key> = (0..4).map(|i| Key::new(&[i; 32]).unwrap()).collect();
    store(&mut t, &keys);
    t.shutdown().unwrap();
    drop(t);
    // The same file, its first entry given as a digest (the header still
    // says whole keys, its checksums right).
    let p = dir.path().join(INDEX_NAME);
    let bytes = std::fs::read(&p).unwrap();
    let h = Header::decode(bytes[..HEADER].try_into().unwrap()).unwrap();
    assert_eq!(h.digest_seed, 0);
    let mut entries = Vec::new();
    check_chunk(0, &bytes[HEADER..], &mut entries).unwrap();
    entries[0].0 = Held::Digest([9; 16]);
    let mut w = BodyWriter::default();
    for (key, record, at) in &entries {
        w.push(key, *record, *at);
    }
    let (body, _, _) = w.finish();
    let mut out = Header {
        body_len: body.len() as u64,
        ..h
    }
    .encode()
    .to_vec();
    out.extend_from_slice(&body);
    std::fs::write(&p, out).unwrap();
    let mut t = FsTier::open(slots, opts).unwrap();
    let r = t.wait_rebuilt();
    assert!(r.index_rejected && r.blocks == 4, "{r:?}");
    let mut errors = Vec::new();
    t.take_errors(&mut errors);
    assert!(
        errors
            .iter()
            .any(|e| e.contains("a key digest in an index of whole keys")),
        "{errors:?}"
    );
    let req = Request::default();
    assert!(keys.iter().all(|k| t.lookup(k, &req) == TierLookup::Hit));
}
