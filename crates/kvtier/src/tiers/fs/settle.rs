//! Settling a finished job: each key's outcome taken into the index and
//! the counters (a stored block becomes Ready and is announced; a failed
//! store's reservation goes; a load whose file proved bad, unreadable or
//! gone takes its key out of the tier), failures described for the error
//! log, and the job's result.

use super::index::State;
use super::pool::JobState;
use super::{Cause, FsTier, Key};
use crate::tiering::{Direction, JobResult};
use crate::tiers::kit::KeyOutcome;

impl FsTier {
    /// Describes one key's failure for the error log (bounded).
    fn note_failure(&mut self, what: &str, key: &Key, outcome: KeyOutcome<Cause>) {
        let why = match outcome {
            KeyOutcome::Failed(cause) => cause.describe(),
            _ => "no room (every block is being read or written)",
        };
        self.errors
            .note(|| format!("{what} of key {key} failed: {why}"));
    }

    /// Takes finished job `state` into the index; its result.
    pub(super) fn settle(&mut self, state: &JobState) -> JobResult {
        let ledger = &state.ledger;
        let job = ledger.job();
        let what = match job.direction {
            Direction::Store => "store",
            Direction::Load => "load",
        };
        for (key, outcome) in ledger.outcomes() {
            if outcome.is_failure() {
                self.note_failure(what, key, outcome);
            }
        }
        let mut ok = true;
        match job.direction {
            Direction::Store => {
                for &i in ledger.work() {
                    let key = job.keys[i as usize];
                    match ledger.outcome(i as usize) {
                        KeyOutcome::Done | KeyOutcome::Present => {
                            if ledger.outcome(i as usize) == KeyOutcome::Done {
                                self.counts.stores_written.add(1);
                            } else {
                                self.counts.stores_already_present.add(1);
                            }
                            if self.index.set_ready(&key) {
                                self.ages.stored(key, std::time::SystemTime::now());
                                self.announce_stored(key);
                            }
                        }
                        _ => {
                            ok = false;
                            if self.index.get(&key).map(|s| s.0) == Some(State::Writing) {
                                self.index.remove(&key);
                            }
                        }
                    }
                }
                if ledger.outcomes().any(|(_, o)| o.is_failure()) {
                    ok = false;
                }
                for victim in &state.victims {
                    if self.index.get(victim).map(|s| s.0) == Some(State::Removing) {
                        self.index.remove(victim);
                    }
                }
            }
            Direction::Load => {
                for (key, outcome) in ledger.outcomes() {
                    if outcome == KeyOutcome::Done {
                        self.counts.loads.add(1);
                        self.index.drop_reader(key);
                        self.index.touch(key);
                        continue;
                    }
                    ok = false;
                    let KeyOutcome::Failed(cause) = outcome else {
                        continue;
                    };
                    if cause != Cause::NotPresent {
                        self.index.drop_reader(key);
                    }
                    // A bad, unreadable or vanished file is no longer in the tier.
                    if cause.loses_block() && self.index.get(key).map(|s| s.0) == Some(State::Ready)
                    {
                        if cause.is_corruption() {
                            self.counts.corrupt_blocks_removed.add(1);
                        } else if cause != Cause::Vanished {
                            self.counts.unreadable_blocks_dropped.add(1);
                        }
                        self.forget(key);
                    }
                }
            }
        }
        if !ok {
            self.counts.jobs_failed.add(1);
        }
        ledger.result(ok)
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::super::FsOptions;
    use super::*;
    use crate::region::SlotMemory;
    use crate::tiering::{Job, JobId, SecondaryTier};

    fn key(i: u8) -> Key {
        Key::new(&[i]).unwrap()
    }

    fn stat(t: &FsTier, name: &str) -> f64 {
        t.stats().iter().find(|s| s.name == name).unwrap().value
    }

    fn tier(dir: &std::path::Path) -> FsTier {
        let slots = SlotMemory::anonymous(8, 4096).unwrap();
        FsTier::open(slots, FsOptions::new(dir)).unwrap()
    }

    /// Settles a job of `direction` whose keys `keys` were all queued and
    /// finished with `outcomes`.
    fn settle(
        t: &mut FsTier,
        direction: Direction,
        keys: &[u8],
        outcomes: &[KeyOutcome<Cause>],
    ) -> JobResult {
        let job = Arc::new(Job {
            id: JobId(3),
            direction,
            keys: keys.iter().map(|&i| key(i)).collect(),
            slots: (0..keys.len() as u32).collect(),
            request: Default::default(),
        });
        let state = JobState::new(
            job,
            vec![KeyOutcome::Queued; keys.len()],
            Vec::new(),
            Vec::new(),
        );
        for (task, &o) in outcomes.iter().enumerate() {
            state.ledger.finish(task, o);
        }
        t.settle(&state)
    }

    /// A tier holding Ready keys `keys`, each with one reader (a load in
    /// flight).
    fn read_tier(dir: &std::path::Path, keys: &[u8]) -> FsTier {
        let mut t = tier(dir);
        for &i in keys {
            assert!(t.index.insert(key(i), State::Writing));
        }
        let stored = vec![KeyOutcome::Done; keys.len()];
        assert!(settle(&mut t, Direction::Store, keys, &stored).success);
        for &i in keys {
            assert!(t.index.add_reader(&key(i)));
        }
        t
    }

    #[test]
    fn a_store_counts_written_and_present_blocks_and_drops_failed_reservations() {
        let dir = tempfile::tempdir().unwrap();
        let mut t = tier(dir.path());
        for i in 1..=3 {
            assert!(t.index.insert(key(i), State::Writing));
        }
        let r = settle(
            &mut t,
            Direction::Store,
            &[1, 2, 3],
            &[
                KeyOutcome::Done,
                KeyOutcome::Present,
                KeyOutcome::Failed(Cause::Io),
            ],
        );
        assert!(!r.success);
        assert_eq!(r.succeeded_keys, None);
        assert_eq!(stat(&t, "stores_written"), 1.0);
        assert_eq!(stat(&t, "stores_already_present"), 1.0);
        assert_eq!(stat(&t, "jobs_failed"), 1.0);
        assert_eq!(t.index.get(&key(1)).map(|s| s.0), Some(State::Ready));
        assert_eq!(t.index.get(&key(2)).map(|s| s.0), Some(State::Ready));
        assert_eq!(
            t.index.get(&key(3)),
            None,
            "the failed key's reservation goes"
        );
        let mut errors = Vec::new();
        t.take_errors(&mut errors);
        assert_eq!(errors.len(), 1, "{errors:?}");
        assert!(
            errors[0].ends_with(&format!(
                "store of key {} failed: {}",
                key(3),
                Cause::Io.describe()
            )),
            "{}",
            errors[0]
        );
    }

    #[test]
    fn a_store_that_succeeded_counts_no_failed_job() {
        let dir = tempfile::tempdir().unwrap();
        let mut t = tier(dir.path());
        assert!(t.index.insert(key(1), State::Writing));
        assert!(settle(&mut t, Direction::Store, &[1], &[KeyOutcome::Done]).success);
        assert_eq!(stat(&t, "jobs_failed"), 0.0);
        assert_eq!(stat(&t, "stores_written"), 1.0);
    }

    #[test]
    fn a_load_settles_each_key_by_its_outcome() {
        let dir = tempfile::tempdir().unwrap();
        let mut t = read_tier(dir.path(), &[1, 2, 3, 4, 5, 6]);
        let r = settle(
            &mut t,
            Direction::Load,
            &[1, 2, 3, 4, 5, 6],
            &[
                KeyOutcome::Done,
                KeyOutcome::Failed(Cause::Checksum),
                KeyOutcome::Failed(Cause::Io),
                KeyOutcome::Failed(Cause::Permission),
                KeyOutcome::Failed(Cause::Vanished),
                KeyOutcome::Failed(Cause::Transient),
            ],
        );
        assert!(!r.success);
        assert_eq!(r.succeeded_keys, Some(vec![key(1)]));
        assert_eq!(stat(&t, "loads"), 1.0);
        assert_eq!(stat(&t, "corrupt_blocks_removed"), 1.0);
        assert_eq!(
            stat(&t, "unreadable_blocks_dropped"),
            2.0,
            "a vanished file is none"
        );
        assert_eq!(stat(&t, "jobs_failed"), 1.0);
        // The loaded key and the one that failed for a passing shortage
        // stay, their readers gone; the others left the tier.
        assert_eq!(t.index.get(&key(1)), Some((State::Ready, 0)));
        assert_eq!(t.index.get(&key(6)), Some((State::Ready, 0)));
        for i in 2..=5 {
            assert_eq!(t.index.get(&key(i)), None, "key {i}");
        }
    }

    #[test]
    fn a_load_that_succeeded_counts_no_failed_job() {
        let dir = tempfile::tempdir().unwrap();
        let mut t = read_tier(dir.path(), &[1]);
        let r = settle(&mut t, Direction::Load, &[1], &[KeyOutcome::Done]);
        assert!(r.success);
        assert_eq!(r.succeeded_keys, None);
        assert_eq!(stat(&t, "jobs_failed"), 0.0);
    }

    #[test]
    fn a_key_not_present_when_queued_keeps_the_readers_of_others() {
        // Not present: the load added no reader, so it drops none (a
        // reader of a concurrent load of the key stays).
        let dir = tempfile::tempdir().unwrap();
        let mut t = read_tier(dir.path(), &[1]);
        settle(
            &mut t,
            Direction::Load,
            &[1],
            &[KeyOutcome::Failed(Cause::NotPresent)],
        );
        assert_eq!(t.index.get(&key(1)), Some((State::Ready, 1)));
    }
}
