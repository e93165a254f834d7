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
