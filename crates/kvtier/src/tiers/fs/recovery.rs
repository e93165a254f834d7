//! Keeping the index true to the disk while the tier runs: blocks the
//! workers proved gone (a missing root or fan-out directory), blocks other
//! processes stored in a shared directory (existence checks, which lookups
//! start), and the events that knowing and forgetting a block announce.

use super::index::State;
use super::{FsTier, Key};
use crate::tiering::TierLookup;

impl FsTier {
    /// Announces Ready `key` as stored, remembering whether it was.
    pub(super) fn announce_stored(&mut self, key: Key) {
        if self.events.stored(key) {
            self.index.set_announced(&key);
        }
    }

    /// Removes `key` from the index, announcing it as removed if it was
    /// announced as stored.
    pub(super) fn forget(&mut self, key: &Key) {
        let announced = self.index.announced(key);
        self.index.remove(key);
        self.events.removed(*key, announced);
    }

    /// Takes out of the index the Ready blocks that the workers proved
    /// gone: all of them if the root directory was missing, else those of
    /// every fan-out directory that had to be made again.
    fn drop_lost(&mut self) {
        let (root, fanouts) = self.pool.shared().disk.take_lost();
        if !root && fanouts == [0; 4] {
            return;
        }
        let mut lost = std::mem::take(&mut self.lost_buf);
        if root {
            self.index.drop_ready(None, &mut lost);
        }
        for (word, bits) in fanouts.iter().enumerate() {
            let mut bits = *bits;
            while bits != 0 {
                let bit = bits.trailing_zeros();
                bits &= bits - 1;
                self.index
                    .drop_ready(Some((word * 64) as u8 + bit as u8), &mut lost);
            }
        }
        self.counts.blocks_found_missing.add(lost.len() as u64);
        for (key, announced) in lost.drain(..) {
            self.events.removed(key, announced);
        }
        self.lost_buf = lost;
    }

    /// Takes in what the workers finished: lost directories, existence
    /// checks answered (a block found is adopted) and finished jobs (kept
    /// for `poll_finished` to settle).
    pub(super) fn absorb(&mut self) {
        let mut jobs = std::mem::take(&mut self.finished_buf);
        let mut checks = std::mem::take(&mut self.checked_buf);
        self.pool.take(&mut jobs, &mut checks);
        // Before the jobs just taken are settled: a store among them may
        // have written its block after the directory came back.
        self.drop_lost();
        for (key, found) in checks.drain(..) {
            if self.checks.get(&key) != Some(&true) {
                continue;
            }
            self.pending_checks -= 1;
            if !found {
                self.checks.insert(key, false);
                self.absent.push(key);
                continue;
            }
            self.checks.remove(&key);
            if self.index.get(&key).is_none() && self.index.insert(key, State::Ready) {
                self.note_live(&key);
                self.ages.stored(key, std::time::SystemTime::now());
                self.counts.blocks_adopted.add(1);
                self.announce_stored(key);
            }
        }
        self.checked_buf = checks;
        self.finished_buf = jobs;
    }

    /// A lookup: from the index, or, in a shared directory, by an
    /// existence check on disk (RETRY until it is answered).
    pub(super) fn look_up(&mut self, key: &Key) -> TierLookup {
        if self.closed {
            return TierLookup::Miss;
        }
        if self.opts.shared {
            self.absorb();
        }
        match self.index.get(key) {
            Some((State::Ready, _)) if self.expire_if_old(key) => {
                self.counts.misses.add(1);
                return TierLookup::Miss;
            }
            Some((State::Ready, _)) => {
                self.counts.hits.add(1);
                return TierLookup::Hit;
            }
            Some(_) => {
                self.counts.misses.add(1);
                return TierLookup::Miss;
            }
            None => {}
        }
        if !self.opts.shared {
            self.counts.misses.add(1);
            return TierLookup::Miss;
        }
        match self.checks.get(key) {
            Some(true) => {
                self.counts.lookup_retries.add(1);
                TierLookup::Retry
            }
            Some(false) => {
                self.counts.misses.add(1);
                TierLookup::Miss
            }
            None => {
                self.checks.insert(*key, true);
                self.pending_checks += 1;
                self.pool.check(*key);
                self.counts.lookup_retries.add(1);
                TierLookup::Retry
            }
        }
    }

    /// The end of a scheduler step: keys answered absent in it are
    /// forgotten (a later lookup checks again).
    pub(super) fn end_step(&mut self) {
        self.sweep_expired();
        if self.opts.shared {
            self.absorb();
            for key in self.absent.drain(..) {
                self.checks.remove(&key);
            }
        }
    }
}
