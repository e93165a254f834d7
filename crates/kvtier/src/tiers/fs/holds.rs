//! Pin sets in the fs tier: a held block is out of the watermark
//! eviction's reach (`index.rs`), does not expire while held (`age.rs`),
//! and a drop keeps it.  Only this tier's own removals pass over it: a
//! block found gone from disk (removed behind the tier's back, another
//! process of a shared directory) leaves the index held or not.

use super::FsTier;
use super::index::State;
use crate::key::Key;

impl FsTier {
    /// Holds each of `keys` that is Ready (and not past the max age);
    /// whether each is held now.  After shutdown nothing is held.
    pub(super) fn hold_keys(&mut self, keys: &[Key]) -> crate::Result<Vec<bool>> {
        let mut held: Vec<bool> = crate::fallible::with_capacity(keys.len(), "fs tier holds")?;
        for key in keys {
            let ready = !self.closed
                && self.index.get(key).map(|s| s.0) == Some(State::Ready)
                && !self.expire_if_old(key);
            held.push(ready && self.index.hold(key));
        }
        Ok(held)
    }

    /// Releases the holds of `keys`; a block a sweep found past the max
    /// age while it was held goes now.
    pub(super) fn release_keys(&mut self, keys: &[Key]) {
        for key in keys {
            self.index.release_hold(key);
            self.expire_released(key);
        }
    }

    /// The capacity in blocks (whole block files, headers included);
    /// `None` when unbounded.
    pub(super) fn capacity_in_blocks(&self) -> Option<u64> {
        let cap = self.opts.capacity_bytes;
        (cap > 0).then(|| cap / self.index.file_bytes().max(1))
    }
}
