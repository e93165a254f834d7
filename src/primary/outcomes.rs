//! What the tier's calls answer: a lookup's finding, a store's plan and
//! outcome, a completion's report.

use super::slots;
use crate::key::{Key, KeyBytes};

/// What `lookup` found.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PrimaryLookup {
    /// Not resident.
    Miss,
    /// Resident, write pending (not readable yet).
    HitPending,
    /// Resident and ready.
    Hit,
}

/// The plan `prepare_store` fills: reused across calls, cleared by each call.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct StorePlan {
    /// Keys to store, in call order.
    pub to_store: Vec<Key>,
    /// Their slots (co-indexed with `to_store`).
    pub slots: Vec<u32>,
    /// Keys evicted to make room, in eviction order.
    pub evicted: Vec<Key>,
}

impl StorePlan {
    /// Empties the plan, keeping its buffers.
    pub fn clear(&mut self) {
        self.to_store.clear();
        self.slots.clear();
        self.evicted.clear();
    }

    /// Writes into `out` (cleared first) the position in `keys` (the batch
    /// given to `prepare_store`) of each key to store: its first occurrence.
    pub fn positions_in(&self, keys: &[Key], out: &mut Vec<usize>) {
        self.positions_in_each(keys.len(), |j| &keys[j], out)
    }

    /// [`StorePlan::positions_in`] a batch of `n` keys `key(0..n)`
    /// ([`Key`]s, or checked bytes read in place).
    pub(crate) fn positions_in_each<'k, K: KeyBytes + ?Sized + 'k>(
        &self,
        n: usize,
        key: impl Fn(usize) -> &'k K,
        out: &mut Vec<usize>,
    ) {
        out.clear();
        let mut i = 0;
        for stored in &self.to_store {
            while i < n && !slots::same_key(stored, key(i)) {
                i += 1;
            }
            out.push(i);
            i += 1;
        }
    }
}

/// Whether `prepare_store` planned the store or refused it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StoreOutcome {
    /// The plan is filled (possibly with nothing to store).
    Planned,
    /// Not enough idle keys to evict: no key, slot or event changed (the
    /// request recorded its offer), the plan is empty.
    Refused,
}

/// What `complete_store` did with its keys.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CompleteStoreReport {
    /// Write-pending keys that became ready (success).
    pub ready: usize,
    /// Write-pending keys dropped and their slots freed (failure).
    pub dropped: usize,
    /// Absent keys ignored (late completions).
    pub ignored: usize,
    /// Keys write pending for another writer (another request, or a
    /// promotion), left alone.
    pub foreign: usize,
    /// Keys already ready, left alone.
    pub already_ready: usize,
}
