//! What a store or load is handed to the workers with: refusals of a
//! whole job, the keys a store skips (already in the tier, or named twice),
//! the room it makes (eviction under the watermarks) and the keys it
//! admits, each reserved in the index once; a load's readers and records.

use std::sync::Arc;

use super::index::State;
use super::pool::JobState;
use super::{Cause, FsTier, Key};
use crate::tiering::JobRef;
use crate::tiers::kit::KeyOutcome;

impl FsTier {
    /// Why a job is failed whole before it starts, if it is.
    fn refusal(&self, job: &JobRef) -> Option<Cause> {
        if self.closed {
            Some(Cause::Closed)
        } else if job.slots.len() != job.keys.len() {
            Some(Cause::BadSlot)
        } else {
            None
        }
    }

    /// Reports every key of `job` failed with `cause` (at the next poll).
    fn fail_job(&mut self, job: JobRef, cause: Cause) {
        let n = job.keys.len() as u64;
        self.counts.errors.count_n(cause, n);
        self.pool.submit(Arc::new(JobState::failed(job, cause)));
    }

    /// Whether blocks live in segment records.
    pub(super) fn segmented(&self) -> bool {
        self.pool.shared().disk.in_records()
    }

    /// Queues the keys of store `job` that are new to the tier and fit.
    pub(super) fn admit_store(&mut self, job: JobRef) {
        if let Some(cause) = self.refusal(&job) {
            self.fail_job(job, cause);
            return;
        }
        // Which keys are new: absent from the index, first named here (in
        // the tier's scratch, so no key allocates).
        let mut outcomes = vec![KeyOutcome::Skipped; job.keys.len()];
        let (mut new, mut named) = std::mem::take(&mut self.store_scratch);
        new.clear();
        named.clear();
        for (i, key) in job.keys.iter().enumerate() {
            match self.index.get(key) {
                Some((State::Ready, _)) => {
                    self.counts.stores_skipped.add(1);
                    self.index.touch(key);
                }
                Some(_) => self.counts.stores_skipped.add(1),
                None if !named.insert(*key) => self.counts.stores_skipped.add(1),
                None => new.push(i),
            }
        }
        // Expired blocks' files go first, as eviction victims do.
        let mut victims = self.ages.take_doomed();
        let admitted = self.make_room(new.len(), &mut victims);
        let segmented = self.segmented();
        let mut records = Vec::with_capacity(if segmented { admitted } else { 0 });
        let mut queued = 0;
        for &i in &new {
            let key = job.keys[i];
            if queued < admitted && self.index.insert(key, State::Writing) {
                self.note_live(&key);
                if segmented {
                    // The capacity bounds the keys to the records, so one
                    // is free for each admitted key, once the restart scan
                    // has classified every record (until then, only those
                    // known free are handed out).
                    let Some(record) = self.index.assign_record(&key) else {
                        debug_assert!(self.rebuilding(), "no free record for an admitted store");
                        self.index.remove(&key);
                        outcomes[i] = KeyOutcome::RejectedFull;
                        self.counts.stores_rejected_full.add(1);
                        continue;
                    };
                    records.push(record);
                }
                outcomes[i] = KeyOutcome::Queued;
                queued += 1;
            } else {
                outcomes[i] = KeyOutcome::RejectedFull;
                self.counts.stores_rejected_full.add(1);
            }
        }
        self.store_scratch = (new, named);
        self.pool
            .submit(Arc::new(JobState::new(job, outcomes, victims, records)));
    }

    /// Queues the keys of load `job` that are in the tier, each with a
    /// reader (so eviction leaves it); the others fail as not present.
    pub(super) fn admit_load(&mut self, job: JobRef) {
        if let Some(cause) = self.refusal(&job) {
            self.fail_job(job, cause);
            return;
        }
        let n = job.keys.len();
        let mut outcomes = vec![KeyOutcome::Failed(Cause::NotPresent); n];
        let segmented = self.segmented();
        let mut records = Vec::with_capacity(if segmented { n } else { 0 });
        let mut absent = 0;
        for (i, key) in job.keys.iter().enumerate() {
            // In the segments layout a key is read from its record (every
            // Ready key has one; one without is not present).
            let record = if segmented {
                match self.index.record(key) {
                    Some(r) => Some(r),
                    None => {
                        absent += 1;
                        continue;
                    }
                }
            } else {
                None
            };
            if self.index.add_reader(key) {
                outcomes[i] = KeyOutcome::Queued;
                records.extend(record);
            } else {
                absent += 1;
            }
        }
        self.counts.errors.count_n(Cause::NotPresent, absent);
        self.pool
            .submit(Arc::new(JobState::new(job, outcomes, Vec::new(), records)));
    }

    /// Evicts LRU blocks so `new` more blocks fit under the watermarks;
    /// returns how many of them may be admitted.  In the files layout the
    /// victims' files are removed by the store's tasks (into `victims`);
    /// a segment record is free at once.
    fn make_room(&mut self, new: usize, victims: &mut Vec<Key>) -> usize {
        let cap = self.opts.capacity_bytes;
        if cap == 0 || new == 0 {
            return new;
        }
        let one = self.index.file_bytes();
        let high = (cap as f64 * self.opts.high_watermark) as u64;
        let low = (cap as f64 * self.opts.low_watermark) as u64;
        let need = one * new as u64;
        if self.index.used() + need > high {
            while self.index.used() + need > low {
                let Some(victim) = self.index.evict_one(true) else {
                    break;
                };
                self.counts.evictions.add(1);
                let announced = self.index.announced(&victim);
                self.events.removed(victim, announced);
                if self.segmented() {
                    // The record is free at once: the next store
                    // overwrites it, nothing to remove.
                    self.index.remove(&victim);
                } else {
                    // The file goes before the job's new blocks are written.
                    victims.push(victim);
                }
            }
        }
        let room = cap.saturating_sub(self.index.used()) / one;
        new.min(room as usize)
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::super::format::file_len;
    use super::super::{FsLayout, FsOptions, FsTier};
    use crate::key::Key;
    use crate::region::SlotMemory;
    use crate::tiering::{Direction, Job, JobId, JobResult, SecondaryTier};

    fn key(i: u8) -> Key {
        Key::new(&[i]).unwrap()
    }

    fn stat(t: &FsTier, name: &str) -> f64 {
        t.stats().iter().find(|s| s.name == name).unwrap().value
    }

    /// Stores `keys` (slot i for key i) and waits for the job's result.
    fn store(t: &mut FsTier, keys: &[u8]) -> JobResult {
        let keys: Vec<Key> = keys.iter().map(|&i| key(i)).collect();
        t.store_and_wait(&keys)
    }

    #[test]
    fn a_store_the_index_has_no_room_for_is_rejected_as_full() {
        for layout in [FsLayout::Files, FsLayout::Segments] {
            let dir = tempfile::tempdir().unwrap();
            let slots = SlotMemory::anonymous(8, 4096).unwrap();
            let opts = FsOptions {
                layout,
                capacity_bytes: 16 * file_len(4096),
                ..FsOptions::new(dir.path())
            };
            let mut t = FsTier::open(slots, opts).unwrap();
            t.index.limit_nodes(2);
            let r = store(&mut t, &[1, 2, 3]);
            assert!(!r.success, "{layout:?}: one key was refused");
            assert_eq!(stat(&t, "stores_written"), 2.0, "{layout:?}");
            assert_eq!(stat(&t, "stores_rejected_full"), 1.0, "{layout:?}");
            assert_eq!(t.block_count(), 2, "{layout:?}");
            assert_eq!(t.bytes_used(), 2 * file_len(4096), "{layout:?}");
        }
    }

    #[test]
    fn a_key_named_twice_in_one_store_is_written_once() {
        let dir = tempfile::tempdir().unwrap();
        let slots = SlotMemory::anonymous(8, 4096).unwrap();
        let mut t = FsTier::open(slots, FsOptions::new(dir.path())).unwrap();
        let r = store(&mut t, &[1, 2, 1]);
        assert!(r.success);
        assert_eq!(stat(&t, "stores_written"), 2.0);
        assert_eq!(stat(&t, "stores_skipped"), 1.0);
        assert_eq!(t.block_count(), 2);
    }

    #[test]
    fn a_store_beyond_the_capacity_admits_what_fits_and_rejects_the_rest() {
        for layout in [FsLayout::Files, FsLayout::Segments] {
            let dir = tempfile::tempdir().unwrap();
            let slots = SlotMemory::anonymous(8, 4096).unwrap();
            let opts = FsOptions {
                layout,
                capacity_bytes: 4 * file_len(4096),
                ..FsOptions::new(dir.path())
            };
            let mut t = FsTier::open(slots, opts).unwrap();
            let r = store(&mut t, &[1, 2, 3, 4, 5, 6]);
            assert!(!r.success, "{layout:?}");
            assert_eq!(stat(&t, "stores_written"), 4.0, "{layout:?}");
            assert_eq!(stat(&t, "stores_rejected_full"), 2.0, "{layout:?}");
            assert_eq!(stat(&t, "jobs_failed"), 1.0, "{layout:?}");
            assert_eq!(t.block_count(), 4, "{layout:?}");
            assert_eq!(t.bytes_used(), 4 * file_len(4096), "{layout:?}");
            let mut errors = Vec::new();
            t.take_errors(&mut errors);
            assert_eq!(errors.len(), 2, "{errors:?}");
            assert!(
                errors[0].ends_with(
                    "store of key 05 failed: no room (every block is being read or written)"
                ),
                "{}",
                errors[0]
            );
        }
    }

    fn job(direction: Direction, keys: &[u8]) -> Arc<Job> {
        Arc::new(Job {
            id: JobId(2),
            direction,
            keys: keys.iter().map(|&i| key(i)).collect(),
            slots: (0..keys.len() as u32).collect(),
            request: Default::default(),
        })
    }

    /// Loads `keys` (slot i for key i) and waits for the job's result.
    fn load(t: &mut FsTier, keys: &[u8]) -> JobResult {
        t.submit_load(job(Direction::Load, keys));
        t.drain().unwrap();
        let mut out = Vec::new();
        t.poll_finished(16, &mut out);
        out.pop().expect("the job finished")
    }

    #[test]
    fn a_store_of_a_key_still_being_written_skips_it() {
        let dir = tempfile::tempdir().unwrap();
        let slots = SlotMemory::anonymous(8, 4096).unwrap();
        let mut t = FsTier::open(slots, FsOptions::new(dir.path())).unwrap();
        t.submit_store(job(Direction::Store, &[1]));
        // Key 1 is written until its job settles.
        t.submit_store(job(Direction::Store, &[1, 2]));
        assert_eq!(stat(&t, "stores_skipped"), 1.0);
        t.drain().unwrap();
        let mut out = Vec::new();
        t.poll_finished(16, &mut out);
        assert!(out.iter().all(|r| r.success));
        assert_eq!(stat(&t, "stores_written"), 2.0);
        assert_eq!(stat(&t, "stores_skipped"), 1.0);
    }

    #[test]
    fn a_load_counts_the_keys_not_in_the_tier() {
        for layout in [FsLayout::Files, FsLayout::Segments] {
            let dir = tempfile::tempdir().unwrap();
            let slots = SlotMemory::anonymous(8, 4096).unwrap();
            let opts = FsOptions {
                layout,
                capacity_bytes: 8 * file_len(4096),
                ..FsOptions::new(dir.path())
            };
            let mut t = FsTier::open(slots, opts).unwrap();
            assert!(store(&mut t, &[1]).success, "{layout:?}");
            let r = load(&mut t, &[2, 1, 3]);
            assert!(!r.success, "{layout:?}");
            assert_eq!(r.succeeded_keys, Some(vec![key(1)]), "{layout:?}");
            assert_eq!(stat(&t, "errors_not_present"), 2.0, "{layout:?}");
            assert_eq!(stat(&t, "loads"), 1.0, "{layout:?}");
        }
    }

    /// A tier of 8 blocks of 4096 bytes whose watermarks are exact in
    /// binary: 6 blocks (high) and 4 (low).
    fn watermarked(layout: FsLayout, dir: &std::path::Path) -> FsTier {
        let slots = SlotMemory::anonymous(8, 4096).unwrap();
        let opts = FsOptions {
            layout,
            capacity_bytes: 8 * file_len(4096),
            high_watermark: 0.75,
            low_watermark: 0.5,
            ..FsOptions::new(dir)
        };
        FsTier::open(slots, opts).unwrap()
    }

    #[test]
    fn a_store_of_several_blocks_makes_room_for_all_of_them() {
        // Watermarks of 6 and 4 blocks of 8: 4 stored, then 3 more cross
        // the high one, so the low one must leave room for all 3.
        for layout in [FsLayout::Files, FsLayout::Segments] {
            let dir = tempfile::tempdir().unwrap();
            let mut t = watermarked(layout, dir.path());
            assert!(store(&mut t, &[1, 2, 3, 4]).success, "{layout:?}");
            assert!(store(&mut t, &[5, 6, 7]).success, "{layout:?}");
            assert_eq!(stat(&t, "evictions"), 3.0, "{layout:?}");
            assert_eq!(t.block_count(), 4, "{layout:?}");
        }
    }

    #[test]
    fn a_store_evicts_only_above_the_high_watermark_and_down_to_the_low_one() {
        // Watermarks that are exact in binary: 6 and 4 blocks of 8.
        for layout in [FsLayout::Files, FsLayout::Segments] {
            let dir = tempfile::tempdir().unwrap();
            let mut t = watermarked(layout, dir.path());
            assert!(store(&mut t, &[1, 2, 3, 4]).success, "{layout:?}");
            // Up to the high watermark exactly: nothing evicted.
            assert!(store(&mut t, &[5, 6]).success, "{layout:?}");
            assert_eq!(t.block_count(), 6, "{layout:?}");
            assert_eq!(stat(&t, "evictions"), 0.0, "{layout:?}");
            // Beyond it (by one block, below the capacity): down to the
            // low watermark less the new block.
            assert!(store(&mut t, &[7]).success, "{layout:?}");
            assert_eq!(stat(&t, "evictions"), 3.0, "{layout:?}");
            assert_eq!(t.block_count(), 4, "{layout:?}");
            assert_eq!(t.bytes_used(), 4 * file_len(4096), "{layout:?}");
            // An evicted key is gone from the index: it can be stored again.
            let r = store(&mut t, &[1]);
            assert!(r.success, "{layout:?}");
            assert_eq!(stat(&t, "stores_written"), 8.0, "{layout:?}");
            assert_eq!(t.block_count(), 5, "{layout:?}");
        }
    }
}
