//! What the tier's calls answer: a lookup's finding, a store's plan and
//! outcome, a completion's report.

use super::slots;
use crate::error::{Error, Result};
use crate::key::{Key, KeyBatch, KeyBytes, with_keys};
use crate::request::RequestId;

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
    pub fn positions_in<'k>(&self, keys: impl Into<KeyBatch<'k>>, out: &mut Vec<usize>) {
        out.clear();
        out.resize(self.to_store.len(), 0);
        self.positions_into(keys, out);
    }

    /// [`StorePlan::positions_in`] into the first entries of `out` (one
    /// per key to store, as many as fit), which is not resized.
    pub fn positions_into<'k>(&self, keys: impl Into<KeyBatch<'k>>, out: &mut [usize]) {
        with_keys!(keys.into(), |k| self.positions_into_each(
            k.len(),
            |j| &k[j],
            out
        ))
    }

    /// [`StorePlan::positions_into`] of keys `key(0..n)`.
    pub(crate) fn positions_into_each<'k, K: KeyBytes + ?Sized + 'k>(
        &self,
        n: usize,
        key: impl Fn(usize) -> &'k K,
        out: &mut [usize],
    ) {
        let mut i = 0;
        for (stored, o) in self.to_store.iter().zip(out.iter_mut()) {
            while i < n && !slots::same_key(stored, key(i)) {
                i += 1;
            }
            *o = i;
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

pub use crate::store_report::CompleteStoreReport;

impl CompleteStoreReport {
    /// The answer of `request`'s store completion, the one rule of the
    /// manager's and the primary tier's: the report when every key named
    /// was acted on, else [`Error::KeysIgnored`] carrying it (the keys
    /// that were the request's to complete are completed either way).
    pub fn checked(self, request: RequestId) -> Result<CompleteStoreReport> {
        if self.left_alone() == 0 {
            return Ok(self);
        }
        let mut why = Vec::with_capacity(3);
        for (n, what) in [
            (self.ignored, "absent"),
            (self.foreign, "written by another request or a promotion"),
            (self.already_ready, "already ready"),
        ] {
            if n > 0 {
                why.push(format!("{n} {what}"));
            }
        }
        Err(Error::KeysIgnored {
            report: self,
            message: format!(
                "{} of the keys named were not write pending for {request} and were left alone ({}); {} completed",
                self.left_alone(),
                why.join(", "),
                self.ready + self.dropped,
            ),
        })
    }

    /// The answer of a completion of `named` keys for `request` when it
    /// has no store in flight (after a reset, or once every key it planned
    /// was completed): nothing is done, so every key named is left alone,
    /// [`Error::KeysIgnored`] with an all-zero report; naming no key is
    /// the all-zero report.
    pub fn nothing_in_flight(request: RequestId, named: usize) -> Result<CompleteStoreReport> {
        if named == 0 {
            return Ok(CompleteStoreReport::default());
        }
        Err(Error::KeysIgnored {
            report: CompleteStoreReport::default(),
            message: format!(
                "{request} has no store in flight (a reset voided it, or every key it planned was completed): the completion of {named} keys was ignored"
            ),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_report_that_left_keys_alone_is_an_error_carrying_it() {
        let clean = CompleteStoreReport {
            ready: 2,
            dropped: 1,
            ..Default::default()
        };
        assert_eq!(clean.checked(RequestId(3)).unwrap(), clean);
        for left in [
            CompleteStoreReport {
                ignored: 1,
                ..clean
            },
            CompleteStoreReport {
                foreign: 1,
                ..clean
            },
            CompleteStoreReport {
                already_ready: 1,
                ..clean
            },
        ] {
            match left.checked(RequestId(3)) {
                Err(Error::KeysIgnored { report, message }) => {
                    assert_eq!(report, left);
                    assert!(message.contains("request handle 3"), "{message}");
                    assert!(message.contains("3 completed"), "{message}");
                }
                other => panic!("{other:?}"),
            }
        }
        assert_eq!(
            CompleteStoreReport::nothing_in_flight(RequestId(4), 0).unwrap(),
            CompleteStoreReport::default(),
            "naming no key leaves none alone"
        );
        match CompleteStoreReport::nothing_in_flight(RequestId(4), 2) {
            Err(Error::KeysIgnored { report, message }) => {
                assert_eq!(report, CompleteStoreReport::default());
                assert!(
                    message.contains("request handle 4 has no store in flight"),
                    "{message}"
                );
            }
            other => panic!("{other:?}"),
        }
    }
}
