//! The tier while its restart scan runs (`scan.rs`), or its persisted
//! index is read in the background (`snapshot_load.rs`, which sends the
//! same batches): what the scan finds (or the load reads) taken into the
//! index at the tier's calls, without waiting, and the races with the
//! live tier settled so that the scan never undoes what the tier did
//! meanwhile.
//!
//! - The load's entries are taken in as blocks the scan found.  When its
//!   body turns out bad midway, the scan follows; it does not read again
//!   what the load handed on (segments: those records), and a key the
//!   load handed on is not indexed again (files: told apart by a 64-bit
//!   digest, kept while the load runs, as in the segments layout).
//!
//! - A key the tier indexed since it opened (a store admitted it, or a
//!   shared directory's check adopted it) is the tier's: a copy the scan
//!   finds later is not indexed again (in the files layout it is the same
//!   file; in the segments layout an older record, left free and counted
//!   skipped).  So a key stored, dropped or evicted before the scan
//!   reaches its old copy is neither resurrected nor counted twice.
//! - A copy the scan finds of a key whose prefix was dropped meanwhile
//!   (and not stored again since) is removed (its file; its record freed),
//!   as the drop would have removed it.
//! - Segments: a key found in two records is indexed once (the first
//!   found); the other record is free.  Keys are told apart by a 64-bit
//!   digest while the scan runs (a collision frees a record: a block
//!   lost, never a wrong one served).
//! - Segments: only records known to hold no block (clear in the live
//!   map, or read by the scan and found free) are handed to stores; until
//!   the scan has freed some, a store that finds none is refused as full.
//! - With key digests, keys are compared as the index holds them (a key
//!   of more than 16 bytes by its digest), and an entry the load hands on
//!   as a digest is checked against the prefixes dropped meanwhile by
//!   reading its record's header (only when a non-empty one was).
//! - Blocks found are less recent than every block the tier stored or
//!   used since it opened; they are announced as found.
//! - When the scan ends, a directory over the capacity's high watermark is
//!   brought down to the low one (least recently used first), and the
//!   report and the `restart_*` statistics are final.

use hashbrown::HashSet;

use super::format::{Layout, file_len};
use super::found::Found;
use super::index::{Held, Index, State};
use super::rebuild::{self, RebuildReport};
use super::scan::{RebuildHold, Scanner, Work};
use super::segments::Segments;
use super::snapshot_load::Load;
use super::{FsOptions, FsTier, Key, file};
use crate::error::Result;

/// Most batches one call of the tier takes in (each of at most 4096
/// blocks or records).
const BATCHES_PER_CALL: usize = 4;

/// The tier's side of a running restart scan.
#[derive(Debug)]
pub(super) struct Rebuilding {
    scanner: Scanner,
    /// Keys the tier indexed since it opened (as the index holds them).
    live: HashSet<Held, foldhash::fast::RandomState>,
    /// Key prefixes dropped since it opened.
    dropped: Vec<Vec<u8>>,
    /// Digests of the keys found in records (segments layout), and of
    /// the keys the load handed on (files layout).
    seen: HashSet<u64, foldhash::fast::RandomState>,
    /// Whether the persisted index's body is still being read (the
    /// batches are its entries).
    loading: bool,
}

impl Rebuilding {
    pub(super) fn new(scanner: Scanner, loading: bool) -> Rebuilding {
        Rebuilding {
            scanner,
            live: HashSet::default(),
            dropped: Vec::new(),
            seen: HashSet::default(),
            loading,
        }
    }

    /// Whether the persisted index's body is still being read.
    pub(super) fn loading(&self) -> bool {
        self.loading
    }

    /// Stops the scan (each of its threads at its next read).
    pub(super) fn stop(&mut self) {
        self.scanner.stop();
    }

    fn was_dropped(&self, key: &Key) -> bool {
        self.dropped.iter().any(|p| key.as_bytes().starts_with(p))
    }

    /// Whether the block of segment record `record`, found as a digest,
    /// is under a prefix dropped meanwhile: its key is read from the
    /// record's header only when a non-empty prefix was (a block whose
    /// header cannot be read is not one to keep).
    fn digest_was_dropped(&self, read_key: impl FnOnce() -> Option<Key>) -> bool {
        if self.dropped.is_empty() {
            return false;
        }
        if self.dropped.iter().any(|p| p.is_empty()) {
            return true;
        }
        read_key().is_none_or(|k| self.was_dropped(&k))
    }
}

/// Starts rebuilding the index of the directory of `layout` (whose
/// segments, in that layout, are `segments`) for blocks of `block_bytes`:
/// the index before anything was found (in the segments layout, with the
/// records the live map leaves clear free), and the running load of the
/// persisted index's body `load` (then the scan only if that body turns
/// out bad) or scan (held until the hold is released, when `held`), or
/// none when there is nothing to read (no index body, no fan-out
/// directory, no record marked).  What opening removes (probe files of
/// writers that are gone) is counted in `report`.  The one way `open.rs`
/// gets its index.
pub(super) fn start(
    layout: &Layout,
    opts: &FsOptions,
    block_bytes: usize,
    segments: Option<&Segments>,
    report: &mut RebuildReport,
    load: Option<Load>,
    held: bool,
) -> Result<(Index, Option<Rebuilding>, Option<RebuildHold>)> {
    let mut index = if opts.key_digests {
        // The persisted index's seed, for its digests; else a new one.
        let seed = load.as_ref().map_or(0, Load::digest_seed);
        Index::with_digests(
            file_len(block_bytes),
            if seed != 0 { seed } else { new_seed() },
        )
    } else {
        Index::new(file_len(block_bytes))
    };
    let mut seen = HashSet::default();
    if let Some(load) = &load {
        // Room for the entries at once, rather than the table grown (and
        // moved whole) at a tier call; without it, it grows as for a scan.
        let n = usize::try_from(load.entries()).unwrap_or(usize::MAX);
        let _ = index.reserve(n);
        let _ = seen.try_reserve(n);
    }
    let work = match segments {
        None => {
            let root = rebuild::open_and_tidy(layout, opts, report)?;
            let fanouts = rebuild::list_fanouts(layout, &root)?;
            Work::Files {
                root,
                fanouts,
                stale_temp_age: opts.stale_temp_age,
            }
        }
        Some(segments) => {
            // The probe files of a process killed while opening.
            rebuild::remove_dead_probes_of(layout, opts, report);
            // The records the live map leaves clear are free at once
            // (lowest first); the scan reads the others.
            let maybe_live = segments.live.snapshot();
            let free: Vec<u32> = (0..segments.records())
                .rev()
                .filter(|&r| maybe_live[r as usize / 64] & (1 << (r % 64)) == 0)
                .collect();
            index.add_free_records(&free);
            Work::Segments {
                geometry: segments.geometry(),
                maybe_live,
            }
        }
    };
    if work.is_empty() && load.is_none() && !held {
        return Ok((index, None, None));
    }
    let loading = load.is_some();
    let (scanner, hold) = Scanner::start(work, load, block_bytes, held)?;
    let mut r = Rebuilding::new(scanner, loading);
    r.seen = seen;
    Ok((index, Some(r), hold))
}

/// A 64-bit digest of `key` as the index holds it.
fn digest(key: &Held) -> u64 {
    twox_hash::XxHash3_64::oneshot(key.bytes())
}

/// A seed for the key digests of a directory that has none yet.
fn new_seed() -> u64 {
    use std::hash::BuildHasher;
    std::collections::hash_map::RandomState::new().hash_one(std::process::id())
}

impl FsTier {
    /// Whether the index is still being rebuilt: the persisted index's
    /// body still read in the background, or the restart scan still runs
    /// (or either has batches not yet taken).
    pub fn rebuilding(&self) -> bool {
        self.rebuild_state.is_some()
    }

    /// Waits until the index is complete (the persisted index read whole,
    /// or the restart scan ended) and takes in everything found: afterwards
    /// [`FsTier::rebuild_report`] is final.  Returns at once when nothing
    /// runs.  Blocks the caller (tools and tests; an engine need not call
    /// it: the tier takes what was found at its other calls).
    pub fn wait_rebuilt(&mut self) -> RebuildReport {
        while let Some(r) = &self.rebuild_state {
            match r.scanner.next() {
                Some(found) => self.take_in(found),
                None => self.end_rebuild(),
            }
        }
        self.rebuild
    }

    /// Notes that the tier indexed `key` (while the scan runs).
    pub(super) fn note_live(&mut self, key: &Key) {
        if let Some(r) = &mut self.rebuild_state {
            r.live.insert(self.index.held(key));
        }
    }

    /// Notes that blocks under `prefix` were dropped (while the scan runs).
    pub(super) fn note_dropped(&mut self, prefix: &[u8]) {
        if let Some(r) = &mut self.rebuild_state {
            r.dropped.push(prefix.to_vec());
        }
    }

    /// Takes in what the scan found so far, without waiting: a few
    /// batches at most (the next call takes the rest), so that one call
    /// stays short however far the scan is ahead.
    pub(super) fn take_found(&mut self) {
        let mut batches = 0;
        while let Some(r) = &self.rebuild_state {
            if batches == BATCHES_PER_CALL {
                return;
            }
            match r.scanner.try_next() {
                Ok(Some(found)) => self.take_in(found),
                Ok(None) => return,
                Err(()) => self.end_rebuild(),
            }
            batches += 1;
        }
    }

    fn take_in(&mut self, found: Found) {
        match found {
            Found::Files(blocks) => self.take_files(blocks),
            Found::Records(blocks, free) => {
                self.index.add_free_records(&free);
                self.take_records(blocks);
            }
            Found::Loaded => {
                let r = self.rebuild_state.as_mut().expect("loading");
                r.loading = false;
                r.seen = HashSet::default();
                self.rebuild.index_loaded = true;
            }
            Found::Rejected(why) => {
                let r = self.rebuild_state.as_mut().expect("loading");
                r.loading = false;
                self.persisted.reject(why);
                self.note_index_at_open();
            }
            Found::Counts(c) => {
                let r = &mut self.rebuild;
                r.skipped += c.skipped;
                r.removed += c.removed;
                r.temp_removed += c.temp_removed;
                r.unreadable += c.unreadable;
                r.foreign += c.foreign;
                let (k, n) = (&mut r.foreign_kinds, c.foreign_kinds);
                k.symlinks += n.symlinks;
                k.fifos += n.fifos;
                k.sockets += n.sockets;
                k.devices += n.devices;
                k.other += n.other;
            }
        }
        self.counts.set_restart(&self.rebuild);
    }

    /// One fan-out directory's whole blocks, oldest first.
    fn take_files(&mut self, blocks: Vec<(std::time::SystemTime, Key)>) {
        let mut scratch = file::Scratch::new();
        // Newest first, each below the ones before: oldest least recent.
        for &(mtime, key) in blocks.iter().rev() {
            let r = self.rebuild_state.as_mut().expect("scanning");
            // Handed on by the load before (listed twice, or found again
            // by the scan after a load that turned out bad).
            let held = Held::Key(key);
            let again = if r.loading {
                !r.seen.insert(digest(&held))
            } else {
                !r.seen.is_empty() && r.seen.contains(&digest(&held))
            };
            if again || r.live.contains(&held) || self.index.get(&key).is_some() {
                continue;
            }
            if r.was_dropped(&key) {
                if self.pool.shared().disk.remove(&key, &mut scratch).is_err() {
                    self.counts.removal_errors.add(1);
                }
                continue;
            }
            if !self.index.insert_found(key, None) {
                // No room in the index: the block goes, as a drop's would.
                self.rebuild.skipped += 1;
                if self.pool.shared().disk.remove(&key, &mut scratch).is_err() {
                    self.counts.removal_errors.add(1);
                }
                continue;
            }
            self.ages.stored(key, mtime);
            self.rebuild.blocks += 1;
            self.announce_stored(key);
        }
    }

    /// A run of records' blocks, in record order.
    fn take_records(&mut self, blocks: Vec<(Held, u32)>) {
        let now = std::time::SystemTime::now();
        let mut scratch = file::Scratch::new();
        for &(found, record) in blocks.iter().rev() {
            // As the index holds it (a whole key becomes a digest there).
            let held = match found {
                Held::Key(key) => self.index.held(&key),
                digest => digest,
            };
            let r = self.rebuild_state.as_ref().expect("scanning");
            let dropped = match found {
                Held::Key(key) => r.was_dropped(&key),
                Held::Digest(_) => {
                    let shared = self.pool.shared();
                    r.digest_was_dropped(|| {
                        shared.disk.record_key(&shared.io, record, &mut scratch)
                    })
                }
            };
            let r = self.rebuild_state.as_mut().expect("scanning");
            let first = r.seen.insert(digest(&held));
            let known = r.live.contains(&held) || self.index.held_state(&held).is_some();
            if !first || known || dropped {
                // Another copy of a key known already, or of one dropped:
                // the record is free.
                self.index.add_free_records(&[record]);
                if !dropped {
                    self.rebuild.skipped += 1;
                }
                continue;
            }
            if !self.index.insert_found_held(&held, Some(record)) {
                // No room in the index: the record is free, its block lost.
                self.index.add_free_records(&[record]);
                self.rebuild.skipped += 1;
                continue;
            }
            self.rebuild.blocks += 1;
            if let Held::Key(key) = found {
                self.ages.stored(key, now);
                self.announce_stored(key);
            }
        }
    }

    /// The scan ended: a directory over the capacity is brought down to
    /// the low watermark, and the report is final.
    fn end_rebuild(&mut self) {
        self.rebuild_state = None;
        let segmented = self.segmented();
        let mut scratch = file::Scratch::new();
        let FsTier {
            opts,
            index,
            events,
            pool,
            counts,
            ..
        } = self;
        let evicted = rebuild::evict_over_capacity(opts, index, |index, victim| {
            let announced = index.announced(&victim);
            events.removed(victim, announced);
            if !segmented && pool.shared().disk.remove(&victim, &mut scratch).is_err() {
                counts.removal_errors.add(1);
            }
            debug_assert_eq!(index.get(&victim).map(|s| s.0), Some(State::Removing));
            index.remove(&victim);
        });
        self.rebuild.evicted += evicted;
        self.rebuild.blocks -= evicted.min(self.rebuild.blocks);
        self.counts.evictions.add(evicted);
        self.counts.set_restart(&self.rebuild);
        let r = self.rebuild;
        log::info!(
            target: "kvtier::fs",
            "fs tier {}: restart scan done: {} blocks, {} skipped, {} removed, {} evicted",
            self.opts.root.display(),
            r.blocks,
            r.skipped,
            r.removed,
            r.evicted
        );
        self.note_skipped_at_open();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn k(i: u8) -> Key {
        Key::new(&[i]).unwrap()
    }

    #[test]
    fn blocks_found_are_less_recent_than_the_tiers_own_in_the_order_found() {
        let mut index = Index::new(8192);
        assert!(index.insert(k(1), State::Ready));
        assert!(index.insert_found(k(2), None));
        assert!(index.insert(k(3), State::Ready));
        assert!(index.insert_found(k(4), Some(7)));
        assert_eq!(index.record(&k(4)), Some(7));
        assert_eq!(index.used(), 4 * 8192);
        let order: Vec<Key> = std::iter::from_fn(|| index.evict_one(false)).collect();
        assert_eq!(order, [k(4), k(2), k(1), k(3)]);
    }

    #[test]
    fn a_dropped_prefix_covers_the_keys_under_it_only() {
        let d = tempfile::tempdir().unwrap();
        let root =
            super::super::beneath::open_root(&super::super::beneath::c_path(d.path()).unwrap())
                .unwrap();
        let work = super::super::scan::Work::Files {
            root,
            fanouts: Vec::new(),
            stale_temp_age: std::time::Duration::from_secs(1),
        };
        let (scanner, _) = Scanner::start(work, None, 4096, false).unwrap();
        let mut r = Rebuilding::new(scanner, false);
        r.dropped.push(b"ab".to_vec());
        assert!(r.was_dropped(&Key::new(b"abc").unwrap()));
        assert!(r.was_dropped(&Key::new(b"ab").unwrap()));
        assert!(!r.was_dropped(&Key::new(b"a").unwrap()));
        assert!(!r.was_dropped(&Key::new(b"xab").unwrap()));
    }

    #[test]
    fn blocks_found_without_room_in_the_index_are_removed_or_their_records_freed() {
        use crate::region::SlotMemory;

        use super::super::{FsLayout, FsOptions};

        for layout in [FsLayout::Files, FsLayout::Segments] {
            let dir = tempfile::tempdir().unwrap();
            let opts = FsOptions {
                layout,
                capacity_bytes: 8 * file_len(4096),
                ..FsOptions::new(dir.path())
            };
            let slots = || SlotMemory::anonymous(8, 4096).unwrap();
            {
                let mut t = FsTier::open(slots(), opts.clone()).unwrap();
                let keys: Vec<Key> = (1..=4).map(k).collect();
                assert!(t.store_and_wait(&keys).success);
                // Dropped without a shutdown, as a crash: the next open scans.
            }
            let (mut t, hold) = FsTier::open_held(slots(), opts.clone()).unwrap();
            t.index.limit_nodes(2);
            hold.release();
            let report = t.wait_rebuilt();
            assert_eq!((report.blocks, t.block_count()), (2, 2), "{layout:?}");
            assert_eq!(report.skipped, 2, "{layout:?}");
            let found: Vec<Key> = (1..=4)
                .map(k)
                .filter(|key| t.index.get(key).is_some())
                .collect();
            if layout == FsLayout::Segments {
                // The two records are free again (beside the four never used).
                assert_eq!(t.index.free_records(), 6, "{layout:?}");
            }
            drop(t);
            // With room, the next scan finds in the files layout the two
            // left on disk; in segments the freed records still hold their
            // blocks until a store reuses them, and are found again.
            let mut t = FsTier::open(slots(), opts).unwrap();
            let report = t.wait_rebuilt();
            let again: Vec<Key> = (1..=4)
                .map(k)
                .filter(|key| t.index.get(key).is_some())
                .collect();
            match layout {
                FsLayout::Files => assert_eq!(again, found, "the others' files were removed"),
                FsLayout::Segments => assert_eq!(report.blocks, 4),
            }
        }
    }
}
