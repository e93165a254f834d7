//! Holds: the blocks a waiting request was promised, pinned in the primary
//! tier for it (see `progress.rs` for when they are taken and how long they
//! last), and the blocks promoted for a request, remembered for the served
//! counts of its load.
//!
//! A hold is a pin without an owner in the primary tier (a transfer pin),
//! recorded here per request: each key once.  Another request's
//! `complete_load` of a key it never loaded takes a pin, as in vLLM, and it
//! may take a hold's: releasing that hold then finds nothing to release,
//! and the rest of the request's holds are released all the same.  Every
//! allocation a lookup's holds need is made before the lookup changes
//! anything ([`State::reserve_for_holds`]).

use std::time::Instant;

use super::PrimaryBackend;
use super::progress::Held;
use super::{Key, RequestId, Result, State};
use crate::fallible;

impl<P: PrimaryBackend> State<P> {
    /// Room for `n` more holds of `rid` and for the lists that take and
    /// release them, so that a lookup of `n` keys that fails for lack of
    /// memory fails before it changes anything.
    pub(super) fn reserve_for_holds(&mut self, rid: RequestId, n: usize) -> Result<()> {
        let held = self.reqs.get(&rid).map_or(0, |st| st.progress.held.len());
        fallible::reserve(&mut self.found, n, "a lookup's keys")?;
        fallible::reserve(&mut self.keys_a, n, "a lookup's hits")?;
        fallible::reserve(&mut self.slots_b, n, "the slots of a lookup's hits")?;
        fallible::reserve(&mut self.keys_b, n + held, "the holds of a request")?;
        fallible::reserve(&mut self.slots_c, n + held, "the holds of a request")?;
        if let Some(st) = self.reqs.get_mut(&rid) {
            st.progress.held.try_reserve(n).map_err(|_| {
                crate::Error::OutOfMemory(format!("the holds of request {rid} ({n} more)"))
            })?;
        }
        Ok(())
    }

    /// Holds `keys` (ready in the primary tier) for `rid`, which come
    /// from tier `from` (0: hits): pins each once per request (a key it
    /// holds already is left as it is).  False if nothing was held (the
    /// primary tier did not pin them, or no memory was left for them).
    pub(super) fn hold(&mut self, rid: RequestId, keys: &[Key], from: usize) -> bool {
        if self.reserve_for_holds(rid, keys.len()).is_err() {
            self.c.internal_errors += 1;
            self.log(format!(
                "out of memory: {} blocks promoted for request {rid} are not held",
                keys.len()
            ));
            return false;
        }
        let mut slots = std::mem::take(&mut self.slots_b);
        if let Err(e) = self.primary.pin_for_transfer(keys, &mut slots) {
            self.c.internal_errors += 1;
            self.log(format!(
                "internal error: holding blocks for request {rid} failed: {e}"
            ));
            self.slots_b = slots;
            return false;
        }
        let mut extra = std::mem::take(&mut self.keys_b);
        let mut extra_slots = std::mem::take(&mut self.slots_c);
        extra.clear();
        extra_slots.clear();
        let step = self.steps;
        match self.reqs.get_mut(&rid) {
            Some(st) => {
                let p = &mut st.progress;
                for (key, &slot) in keys.iter().zip(&slots) {
                    let h = p.held.entry(*key).or_insert(Held { slot: None, from });
                    if h.slot.is_some() {
                        extra.push(*key);
                        extra_slots.push(slot);
                    } else {
                        h.slot = Some(slot);
                        p.holds_since.get_or_insert((step, Instant::now()));
                    }
                }
            }
            None => {
                extra.extend_from_slice(keys);
                extra_slots.extend_from_slice(&slots);
            }
        }
        self.unpin_quietly(&extra, &extra_slots);
        self.keys_b = extra;
        self.slots_c = extra_slots;
        self.slots_b = slots;
        if self.opts.progress.bounded() {
            self.track(rid);
        }
        true
    }

    /// Holds keys `key(0..hits)`, a lookup's leading hits, for `rid`
    /// ([`ProgressOptions::hold_hits`](super::ProgressOptions::hold_hits)):
    /// keys it holds already stay as they are.  A hold that cannot be
    /// taken (no memory) is logged and the lookup's answer stands.
    pub(super) fn hold_leading<'k>(
        &mut self,
        rid: RequestId,
        hits: usize,
        key: &impl Fn(usize) -> &'k [u8],
    ) {
        let mut keys = std::mem::take(&mut self.keys_a);
        keys.clear();
        let filled = fallible::reserve(&mut keys, hits, "a lookup's hits").and_then(|()| {
            for j in 0..hits {
                keys.push(Key::at(key(j), j)?);
            }
            Ok(())
        });
        match filled {
            Ok(()) => {
                self.hold(rid, &keys, 0);
            }
            Err(e) => {
                self.c.internal_errors += 1;
                self.log(format!("the hits of request {rid} are not held: {e}"));
            }
        }
        self.keys_a = keys;
    }

    /// Remembers that `keys` arrived in the primary tier by a promotion
    /// from tier `from` started for `rid`, and holds them if the request
    /// still waits and holds are on.
    pub(super) fn on_promoted_for(&mut self, rid: RequestId, keys: &[Key], from: usize) {
        let hold = self.opts.progress.hold;
        let Some(st) = self.reqs.get_mut(&rid) else {
            return;
        };
        if st.finished {
            return;
        }
        if hold && st.progress.waiting() {
            self.hold(rid, keys, from);
            return;
        }
        if st.progress.held.try_reserve(keys.len()).is_err() {
            // Only the served counts lose them.
            return;
        }
        for key in keys {
            st.progress
                .held
                .entry(*key)
                .or_insert(Held { slot: None, from });
        }
    }

    /// Releases every hold of `rid`; the blocks promoted for it stay
    /// remembered (unpinned), for the served counts of its load.
    pub(super) fn release_holds(&mut self, rid: RequestId) {
        let Some(st) = self.reqs.get_mut(&rid) else {
            return;
        };
        st.progress.holds_since = None;
        if st.progress.held.is_empty() {
            return;
        }
        let mut keys = std::mem::take(&mut self.keys_b);
        let mut slots = std::mem::take(&mut self.slots_c);
        keys.clear();
        slots.clear();
        // Room for every entry (a release must not fail): the keys pinned
        // were reserved for when they were held.
        let fits = fallible::reserve(&mut keys, st.progress.held.len(), "released holds")
            .and_then(|()| fallible::reserve(&mut slots, st.progress.held.len(), "released holds"));
        st.progress.held.retain(|key, h| {
            if let Some(slot) = h.slot.take()
                && fits.is_ok()
            {
                keys.push(*key);
                slots.push(slot);
            }
            h.from > 0
        });
        self.unpin_quietly(&keys, &slots);
        self.keys_b = keys;
        self.slots_c = slots;
    }

    /// Releases the holds of `rid` on `keys` (those it holds).
    pub(super) fn release_keys(&mut self, rid: RequestId, keys: &[Key]) {
        let Some(st) = self.reqs.get_mut(&rid) else {
            return;
        };
        let mut unpin = std::mem::take(&mut self.keys_b);
        let mut slots = std::mem::take(&mut self.slots_c);
        unpin.clear();
        slots.clear();
        let p = &mut st.progress;
        for key in keys {
            if let Some(h) = p.held.get_mut(key)
                && let Some(slot) = h.slot.take()
            {
                unpin.push(*key);
                slots.push(slot);
                if h.from == 0 {
                    p.held.remove(key);
                }
            }
        }
        if p.held.values().all(|h| h.slot.is_none()) {
            p.holds_since = None;
        }
        self.unpin_quietly(&unpin, &slots);
        self.keys_b = unpin;
        self.slots_c = slots;
    }

    /// Releases every hold of `rid` and forgets the blocks promoted for
    /// it (it loaded, or finished).
    pub(super) fn forget_holds(&mut self, rid: RequestId) {
        self.release_holds(rid);
        if let Some(st) = self.reqs.get_mut(&rid) {
            st.progress.held.clear();
        }
    }

    /// Unpins held blocks.  A pin another call took already (an unpin of
    /// a key its caller never pinned) is passed over: the others are
    /// released all the same, one by one.
    fn unpin_quietly(&mut self, keys: &[Key], slots: &[u32]) {
        if keys.is_empty() || self.primary.unpin_for_transfer_in(keys, slots).is_ok() {
            return;
        }
        let mut gone = 0;
        for (key, &slot) in keys.iter().zip(slots) {
            let one = std::slice::from_ref(key);
            if self.primary.unpin_for_transfer_in(one, &[slot]).is_err() {
                gone += 1;
            }
        }
        if gone > 0 {
            self.log(format!(
                "{gone} held blocks had lost their pin to another call (an unpin of keys its caller never pinned)"
            ));
        }
    }

    /// After `rid`'s `prepare_load` pinned keys `key(0..n)`: counts where
    /// each loaded block came from, releases every hold of the request
    /// (the load's pins take over), and ends its wait.
    pub(super) fn on_loaded<'k>(
        &mut self,
        rid: RequestId,
        n: usize,
        key: impl Fn(usize) -> &'k [u8],
    ) {
        let Some(st) = self.reqs.get_mut(&rid) else {
            return;
        };
        let held = &mut st.progress.held;
        let t = &mut st.tally;
        t.loaded += n as u64;
        if held.is_empty() && st.progress.wait.is_none() {
            return;
        }
        let any_held = !held.is_empty();
        for j in (0..n).filter(|_| any_held) {
            let Ok(k) = Key::at(key(j), j) else {
                continue;
            };
            if let Some(h) = held.get_mut(&k)
                && h.from > 0
            {
                t.served_from(h.from);
                // Counted once, even if the batch names it again.
                h.from = 0;
            }
        }
        self.forget_holds(rid);
        self.end_wait(rid);
    }
}

#[cfg(test)]
mod tests {
    use super::super::lookup::LookupKind;
    use crate::primary::{PrimaryConfig, PrimaryTier};
    use crate::tiering::{Manager, ManagerOptions, RequestParams};

    /// A prefix lookup too large to get room for its holds fails with
    /// `OutOfMemory` before it looks anything up or counts anything.
    #[test]
    fn a_lookup_without_room_for_its_holds_fails_before_it_changes_anything() {
        let primary = PrimaryTier::new(PrimaryConfig {
            capacity: 4,
            ..Default::default()
        })
        .unwrap();
        let m = Manager::new(primary, ManagerOptions::default());
        let r = m.request_begin("r", RequestParams::default()).unwrap().id;
        let before = m.manager_stats().unwrap();
        let n = isize::MAX as usize / 8;
        let e = m
            .lookup_of(LookupKind::Prefix, r, n, |_| b"k".as_slice())
            .unwrap_err();
        assert!(matches!(e, crate::Error::OutOfMemory(_)), "{e}");
        let after = m.manager_stats().unwrap();
        assert_eq!(
            (after.lookups, after.primary_hits),
            (before.lookups, before.primary_hits)
        );
        // The manager goes on.
        let a = m
            .lookup_of(LookupKind::Prefix, r, 1, |_| b"k".as_slice())
            .unwrap();
        assert_eq!((a.hits, a.end), (0, 0));
    }
}
