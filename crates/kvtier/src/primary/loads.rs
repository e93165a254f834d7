//! Pins and unpins: a request's loads (`prepare_load`, `complete_load`),
//! its touches, and the pins of a cascade (`pin_for_transfer`).  A batch
//! is checked whole before any count changes, so a refused call changes
//! nothing.  A request's loads may complete after it finished: it then
//! releases only the pins its own loads still hold.

use super::PrimaryTier;
use super::hints::Hints;
use super::lists::NIL;
use super::policy::Policy;
use super::reorder::{ReorderAhead, request_links_at, request_links_first};
use super::requests::RequestRecord;
use super::slots::HELD;
use super::{key_error, unknown};
use foldhash::fast::RandomState;

use crate::error::Result;
use crate::fallible;
use crate::key::{Key, KeyBatch, KeyBytes, with_keys};
use crate::request::RequestId;

/// In a batch's list of released accesses: the key's unpin released no pin
/// of the request's own.
const NO_PIN: u32 = u32::MAX;

impl PrimaryTier {
    /// Pins `keys` (all must be ready) and writes their slots, in key order,
    /// into `slots_out` (cleared first) and their hashes into
    /// `scratch_hashes`; on error nothing changes and `slots_out` is left
    /// empty.
    /// A request's pin (`req`) finds its keys at the hints of its latest
    /// lookup first.
    fn pin<'k, K: KeyBytes + ?Sized + 'k>(
        &mut self,
        req: Option<RequestId>,
        n: usize,
        at: impl Fn(usize) -> &'k K,
        slots_out: &mut Vec<u32>,
    ) -> Result<()> {
        slots_out.clear();
        self.scratch_hashes.clear();
        fallible::reserve(slots_out, n, "the slots of a batch")?;
        fallible::reserve(&mut self.scratch_hashes, n, "the hashes of a batch")?;
        let hashes = &mut self.scratch_hashes;
        let slots = &self.slots;
        match hints_covering(&self.requests, req, n) {
            Some(hints) => hints.resolve_each(slots, n, &at, |j, s, h| {
                slots_out.push(s);
                hashes.push(h.unwrap_or_else(|| slots.hash(at(j))));
            }),
            None => slots.resolve_each(n, &at, |_, s, h| {
                slots_out.push(s);
                hashes.push(h);
            }),
        }
        let refusal = slots_out.iter().enumerate().find_map(|(i, &slot)| {
            let r = if slot == NIL {
                0
            } else {
                self.slots.refs(slot)
            };
            let reason = if slot == NIL {
                "not resident (cannot pin an absent key)"
            } else if r < 0 {
                "write pending (not readable yet)"
            } else if r as i64 + n as i64 > i32::MAX as i64 {
                "pinned too many times"
            } else {
                return None;
            };
            Some((i, reason))
        });
        if let Some((i, reason)) = refusal {
            slots_out.clear();
            return Err(key_error(i, at(i), reason));
        }
        for &slot in slots_out.iter() {
            let r = self.slots.refs(slot);
            if r == 0 && self.slots.flags(slot) & HELD == 0 {
                self.idle -= 1;
                self.pinned += 1;
            }
            self.slots.set_refs(slot, r + 1);
        }
        Ok(())
    }

    /// Unpins `keys` (each must be pinned, counting repeats in the batch);
    /// on error every decrement already made is undone.
    /// Keys whose slots when pinned are `known` (at least `n` of them) are
    /// looked for there first; a request's unpin (`req`) finds its keys at
    /// the hints of its latest lookup first.
    fn unpin<'k, K: KeyBytes + ?Sized + 'k>(
        &mut self,
        req: Option<RequestId>,
        known: Option<&[u32]>,
        n: usize,
        at: impl Fn(usize) -> &'k K,
    ) -> Result<()> {
        fallible::reserve(&mut self.scratch_victims, n, "the slots of a batch")?;
        let mut done = std::mem::take(&mut self.scratch_victims);
        done.clear();
        let slots = &self.slots;
        match (known, hints_covering(&self.requests, req, n)) {
            (Some(known), _) if known.len() >= n => {
                slots.resolve_at(n, &at, known, |_, s| done.push(s))
            }
            (_, Some(hints)) => hints.resolve_each(slots, n, &at, |_, s, _| done.push(s)),
            _ => slots.resolve_each(n, &at, |_, s, _| done.push(s)),
        }
        let mut to_idle = 0u32;
        let mut failure = None;
        for (i, &s) in done.iter().enumerate() {
            if s == NIL {
                failure = Some((i, key_error(i, at(i), "not resident (nothing to unpin)")));
                break;
            }
            let r = self.slots.refs(s);
            if r <= 0 {
                let reason = if r == 0 {
                    "not pinned"
                } else {
                    "write pending, not pinned"
                };
                failure = Some((i, key_error(i, at(i), reason)));
                break;
            }
            self.slots.set_refs(s, r - 1);
            // A slot reaches 0 at most once per batch: counts only go down
            // here.  One a pin set holds stays busy.
            to_idle += (r == 1 && self.slots.flags(s) & HELD == 0) as u32;
        }
        if let Some((failed, e)) = failure {
            for &s in &done[..failed] {
                self.slots.set_refs(s, self.slots.refs(s) + 1);
            }
            done.clear();
            self.scratch_victims = done;
            return Err(e);
        }
        self.pinned -= to_idle;
        self.idle += to_idle;
        if to_idle > 0 {
            for &s in &done {
                self.became_idle(s);
            }
        }
        done.clear();
        self.scratch_victims = done;
        Ok(())
    }

    /// Pins `keys` for a load by `req` and writes their slots, in key order,
    /// into `slots_out` (cleared first).  Every key must be ready; otherwise
    /// an error naming the first bad key's position, nothing changed and
    /// `slots_out` left empty.
    pub fn prepare_load<'k>(
        &mut self,
        req: RequestId,
        keys: impl Into<KeyBatch<'k>>,
        slots_out: &mut Vec<u32>,
    ) -> Result<()> {
        with_keys!(keys.into(), |k| self.prepare_load_each(
            req,
            k.len(),
            |j| &k[j],
            slots_out
        ))
    }

    /// [`PrimaryTier::prepare_load`] of keys `key(0..n)`.
    fn prepare_load_each<'k, K: KeyBytes + ?Sized + 'k>(
        &mut self,
        req: RequestId,
        n: usize,
        key: impl Fn(usize) -> &'k K,
        slots_out: &mut Vec<u32>,
    ) -> Result<()> {
        self.reserve_record(req, n)?;
        self.check_group_keys(n, &key)?;
        self.pin(Some(req), n, &key, slots_out)?;
        self.counters.loads += n as u64;
        let record = self.requests.get_mut(&req).ok_or_else(|| unknown(req))?;
        let hashes = &self.scratch_hashes;
        let mut raises = std::mem::take(&mut self.scratch_raises);
        raises.clear();
        let positioned = !record.positions.is_empty();
        let mut any_new = false;
        for (i, (&slot, &h)) in slots_out.iter().zip(hashes).enumerate() {
            let (at, new) = record.record(key(i), h, slot, true);
            record.add_pin(at);
            any_new |= new;
            if new && positioned {
                if let Some(p) = record.positions.get(key(i), h) {
                    raises.push((slot, p));
                }
            }
        }
        if any_new {
            self.policy.request_access(&mut record.rank);
            for &(slot, p) in &raises {
                self.policy.raise(&self.slots, slot, &mut record.rank, p);
            }
        }
        self.scratch_raises = raises;
        Ok(())
    }

    /// Marks resident `keys` recently used (policy-specific, in reversed batch
    /// order so the first key ends most recent); absent keys are ignored,
    /// except that ARC learns from ghost hits.
    pub fn touch<'k>(&mut self, req: RequestId, keys: impl Into<KeyBatch<'k>>) -> Result<()> {
        with_keys!(keys.into(), |k| self.touch_each(req, k.len(), |j| &k[j]))
    }

    /// [`PrimaryTier::touch`] of keys `key(0..n)`.
    fn touch_each<'k, K: KeyBytes + ?Sized + 'k>(
        &mut self,
        req: RequestId,
        n: usize,
        key: impl Fn(usize) -> &'k K + Copy,
    ) -> Result<()> {
        let Some(record) = self.requests.get(&req) else {
            return Err(unknown(req));
        };
        self.check_group_keys(n, key)?;
        // Last key first, so that the first ends most recent.
        let at = move |j: usize| key(n - 1 - j);
        let (slots, policy) = (&self.slots, &mut self.policy);
        if record.hints.covers(n) {
            let hints = &record.hints;
            let hint_at = |j: usize| hints.slot_hint(n - 1 - j);
            let read_ahead = slots.read_ahead;
            if read_ahead {
                request_links_first(&*policy, n, hint_at);
            }
            for j in 0..n {
                if read_ahead {
                    request_links_at(&*policy, j, n, hint_at);
                }
                let (k, hint) = (at(j), hint_at(j));
                if slots.holds(hint, k) {
                    policy.touch(slots, hint);
                    continue;
                }
                let h = slots.hash(k);
                match slots.find(k, h) {
                    None => policy.touch_absent(k.key_bytes(), h),
                    Some(s) => policy.touch(slots, s),
                }
            }
            return Ok(());
        }
        let mut ahead = ReorderAhead::new(slots, &*policy, n, at);
        for j in 0..n {
            match ahead.find(slots, &*policy, j, at) {
                (h, NIL) => policy.touch_absent(at(j).key_bytes(), h),
                (_, s) => policy.touch(slots, s),
            }
        }
        Ok(())
    }

    /// Unpins `keys` after a load by `req`; a key that is absent or not
    /// pinned is an error naming its position, nothing changed.
    ///
    /// An active `req` may unpin any pinned key (vLLM does not check who
    /// pinned a key); each unpin releases one of its own pins of the key if
    /// it holds one, and otherwise takes another holder's, which is
    /// counted as spent (see `spent.rs`).
    ///
    /// [0.33] `req` may have finished with pins of its loads still held
    /// (see [`PrimaryTier::request_finished`]): it then releases only
    /// those, never another request's.  A key it holds no pin of (counting
    /// repeats in the batch) is an error naming its position, nothing
    /// changed.  A pin it holds of a key that other requests' unpins took
    /// pins of (beyond their own) is charged with one of those instead:
    /// nothing is released, the call succeeds as in vLLM, and the key is
    /// counted in [`PrimaryStats::spent_load_completions`](super::PrimaryStats::spent_load_completions).
    /// It is forgotten once it holds no pin.  Any other id is
    /// `UnknownRequest`.
    pub fn complete_load<'k>(
        &mut self,
        req: RequestId,
        keys: impl Into<KeyBatch<'k>>,
    ) -> Result<()> {
        with_keys!(keys.into(), |k| self.complete_load_each(
            req,
            k.len(),
            |j| &k[j]
        ))
    }

    /// [`PrimaryTier::complete_load`] of keys `key(0..n)`.
    fn complete_load_each<'k, K: KeyBytes + ?Sized + 'k>(
        &mut self,
        req: RequestId,
        n: usize,
        key: impl Fn(usize) -> &'k K,
    ) -> Result<()> {
        if self.config.kv_groups {
            if !self.requests.contains_key(&req) && !self.finished_loads.contains_key(&req) {
                return Err(unknown(req));
            }
            self.check_group_keys(n, &key)?;
        }
        let Some(r) = self.requests.get_mut(&req) else {
            return self.complete_finished_load(req, n, key);
        };
        // The request's own pins first, each key's access (or NO_PIN) in
        // `released`; then room for the unpins beyond them, then the
        // unpin; either refused, the pins released are given back.
        let mut released = std::mem::take(&mut self.scratch_released);
        released.clear();
        let mut beyond = n;
        if r.pins > 0 {
            if let Err(e) = fallible::reserve(&mut released, n, "the pins of a batch") {
                self.scratch_released = released;
                return Err(e);
            }
            let slots = &self.slots;
            let mut next = usize::MAX;
            beyond = 0;
            for j in 0..n {
                let k = key(j);
                let at = r.release_pin_after(k, || slots.hash(k), &mut next);
                beyond += at.is_none() as usize;
                released.push(at.unwrap_or(NO_PIN));
            }
        }
        let mut outcome = Ok(());
        if beyond > 0 {
            outcome = self.spent.reserve(&self.slots.hasher, beyond);
        }
        if outcome.is_ok() {
            outcome = self.unpin(Some(req), None, n, &key);
        }
        if outcome.is_err() && beyond < released.len() {
            if let Some(r) = self.requests.get_mut(&req) {
                released
                    .iter()
                    .filter(|&&i| i != NO_PIN)
                    .for_each(|&i| r.restore_at(i));
            }
        } else if outcome.is_ok() && beyond > 0 {
            let owns = !released.is_empty();
            for j in (0..n).filter(|&j| !owns || released[j] == NO_PIN) {
                let k = key(j);
                self.spent.add(&self.slots.hasher, k, self.slots.hash(k));
            }
        }
        self.scratch_released = released;
        outcome
    }

    /// [`PrimaryTier::complete_load`] for a request that is not active:
    /// one finished with pins of its loads still held releases some of
    /// them (or is charged with pins other unpins spent), and is
    /// forgotten with the last.
    fn complete_finished_load<'k, K: KeyBytes + ?Sized + 'k>(
        &mut self,
        req: RequestId,
        n: usize,
        key: impl Fn(usize) -> &'k K,
    ) -> Result<()> {
        if !self.finished_loads.contains_key(&req) {
            return Err(unknown(req));
        }
        // Which keys are charged with spent pins, which unpinned (by
        // position in the batch); allocated here: a late completion is
        // rare.
        let what = "the keys of a late load completion";
        let mut charged: Vec<usize> = fallible::with_capacity(n, what)?;
        let mut to_unpin: Vec<usize> = fallible::with_capacity(n, what)?;
        let slots = &self.slots;
        let record = self
            .finished_loads
            .get_mut(&req)
            .ok_or_else(|| unknown(req))?;
        let hash = |j: usize| slots.hash(key(j));
        // Its own pins first, then the charges and the unpin; any refused,
        // what was done so far is undone.
        if let Some(bad) = (0..n).find(|&j| !record.release_pin(key(j), hash(j))) {
            (0..bad).for_each(|j| record.restore_pin(key(j), hash(j)));
            return Err(key_error(
                bad,
                key(bad),
                "not pinned by this request (a finished request only releases its own loads)",
            ));
        }
        let pins_left = record.pins;
        for j in 0..n {
            if !self.spent.is_empty() && self.spent.charge(key(j), hash(j)) {
                charged.push(j);
            } else {
                to_unpin.push(j);
            }
        }
        if let Err(e) = self.unpin(None, None, to_unpin.len(), |i| key(to_unpin[i])) {
            let slots = &self.slots;
            if let Some(record) = self.finished_loads.get_mut(&req) {
                (0..n).for_each(|j| record.restore_pin(key(j), slots.hash(key(j))));
            }
            for &j in &charged {
                self.spent.give_back(key(j), slots.hash(key(j)));
            }
            // The error names the key's position in the caller's batch.
            return Err(match e {
                crate::error::Error::KeyState { index, reason, .. } => {
                    key_error(to_unpin[index], key(to_unpin[index]), reason)
                }
                other => other,
            });
        }
        for &j in &charged {
            self.spent.prune(key(j), self.slots.hash(key(j)));
        }
        self.counters.spent_load_completions += charged.len() as u64;
        if pins_left == 0 {
            if let Some(mut record) = self.finished_loads.remove(&req) {
                record.clear();
                self.spare_records.push(record);
            }
        }
        Ok(())
    }

    /// Pins ready `keys` for a cascade (primary -> secondary) and writes their
    /// slots into `slots_out`; not an access of any request.
    pub fn pin_for_transfer(&mut self, keys: &[Key], slots_out: &mut Vec<u32>) -> Result<()> {
        self.pin(None, keys.len(), |j| &keys[j], slots_out)?;
        self.counters.transfer_pins += keys.len() as u64;
        Ok(())
    }

    /// Unpins `keys` pinned by [`PrimaryTier::pin_for_transfer`].
    pub fn unpin_for_transfer(&mut self, keys: &[Key]) -> Result<()> {
        self.unpin(None, None, keys.len(), |j| &keys[j])
    }

    /// [`PrimaryTier::unpin_for_transfer`] of keys that were in `slots`
    /// when pinned (`slots[i]` the slot of `keys[i]`): each key is looked
    /// for there first, and in the index only if that slot no longer
    /// holds it (so the answer is the same whatever `slots` says); a
    /// pinned key stays in its slot, so its hash and index probe are
    /// spared.  `slots` shorter than `keys` is ignored.
    pub fn unpin_for_transfer_in(&mut self, keys: &[Key], slots: &[u32]) -> Result<()> {
        self.unpin(None, Some(slots), keys.len(), |j| &keys[j])
    }
}

/// The hints of active request `req`'s latest lookup, if there is one for
/// each of `n` keys.
#[inline]
fn hints_covering(
    requests: &hashbrown::HashMap<RequestId, RequestRecord, RandomState>,
    req: Option<RequestId>,
    n: usize,
) -> Option<&Hints> {
    let hints = &requests.get(&req?)?.hints;
    hints.covers(n).then_some(hints)
}
