//! Cascades: ready blocks of the primary tier copied to the secondary
//! tiers, one store job per tier (each pinning the blocks it copies),
//! subject to each tier's back-pressure; and the keys a request-level
//! cascade parks while they are still being written, retried at the end
//! of each step.

use super::PrimaryBackend;
use super::{
    CompleteStoreReport, Direction, Key, PressurePolicy, PrimaryLookup, Request, RequestId, State,
    StorePlan,
};
use crate::key::{KeyBatch, KeyBytes, same_bytes};

impl<P: PrimaryBackend> State<P> {
    /// Cascades the keys of a store by request-level request `rid` that
    /// were resident before it (`keys` but those `plan` stores) to the
    /// tiers that asked for request-level offload: ready ones now, write
    /// pending ones parked until their write finishes (the keys it keeps
    /// are copied, those read in place included).
    pub(super) fn cascade_resident<K: KeyBytes>(
        &mut self,
        rid: RequestId,
        keys: &[K],
        plan: &StorePlan,
    ) {
        let Some(st) = self.reqs.get_mut(&rid) else {
            return;
        };
        let mut ready = std::mem::take(&mut self.keys_a);
        ready.clear();
        let was_parked = !st.parked.is_empty();
        let mut j = 0;
        for k in keys {
            if j < plan.to_store.len() && same_bytes(plan.to_store[j].as_bytes(), k.key_bytes()) {
                j += 1;
                continue;
            }
            let mut kept = k.keep_value();
            k.keep_finish(&mut kept);
            let k = &kept;
            match self.primary.lookup(k) {
                PrimaryLookup::Hit => ready.push(*k),
                // A repeat of a key this call stores was not resident
                // before the call: its own completion cascades it.
                PrimaryLookup::HitPending if plan.to_store.contains(k) => {}
                PrimaryLookup::HitPending => {
                    st.parked.push(*k);
                    self.c.parked_keys += 1;
                }
                PrimaryLookup::Miss => {}
            }
        }
        if !was_parked && !st.parked.is_empty() {
            self.parked_reqs.push(rid);
        }
        let mask = st.request_level;
        let info = st.info.clone();
        self.cascade_to(mask, &ready, &info);
        self.keys_a = ready;
    }

    /// Completes request `rid`'s store of `keys` in the primary tier and,
    /// on success, cascades the keys it made ready to every secondary
    /// tier, in one trip to the primary tier: its completion hands them
    /// back with their slots, already pinned once per tier that takes the
    /// cascade.  Which tiers take it is decided before the completion
    /// (each tier's back-pressure depends only on its own detector and
    /// stores in flight, which the completion does not change), with the
    /// same answers and counters as [`State::cascade_to`] after it.
    pub(super) fn complete_and_cascade(
        &mut self,
        rid: RequestId,
        keys: KeyBatch<'_>,
        success: bool,
        info: &Request,
    ) -> CompleteStoreReport {
        let mut taken = 0u64;
        if success {
            for t in 0..self.tiers.len() {
                if self.admits_cascade(t) {
                    taken |= 1 << t;
                }
            }
        }
        let mut ready = std::mem::take(&mut self.keys_b);
        let mut slots = std::mem::take(&mut self.slots_b);
        ready.clear();
        slots.clear();
        let report = self.primary.complete_store_pinned(
            rid,
            keys,
            success,
            taken.count_ones(),
            &mut ready,
            &mut slots,
        );
        if report.ready > 0 {
            for t in 0..self.tiers.len() {
                if taken & (1 << t) == 0 {
                    self.drop_cascade(t, report.ready);
                    continue;
                }
                let tier = &mut self.tiers[t];
                tier.c.cascade_jobs += 1;
                tier.c.cascade_blocks += report.ready as u64;
                self.submit(t, Direction::Store, &ready, &slots, info.clone());
            }
        }
        self.keys_b = ready;
        self.slots_b = slots;
        report
    }

    /// Whether secondary tier `t` takes a cascade now: always, unless its
    /// back-pressure detector reports pressure, when its policy drops
    /// every cascade, or throttles to one store in flight.
    fn admits_cascade(&self, t: usize) -> bool {
        let tier = &self.tiers[t];
        match &tier.detector {
            Some(d) if d.under_pressure() => match d.config().policy {
                PressurePolicy::Drop => false,
                PressurePolicy::Throttle => tier.stores_in_flight == 0,
            },
            _ => true,
        }
    }

    /// Counts a cascade of `blocks` blocks that tier `t` did not take.
    fn drop_cascade(&mut self, t: usize, blocks: usize) {
        let c = &mut self.tiers[t].c;
        c.dropped_cascade_jobs += 1;
        c.dropped_cascade_blocks += blocks as u64;
    }

    /// Cascades ready `keys` to every tier in `mask`: one store job per
    /// tier, pinning once per tier, subject to each tier's back-pressure.
    pub(super) fn cascade_to(&mut self, mask: u64, keys: &[Key], info: &Request) {
        if keys.is_empty() {
            return;
        }
        for t in 0..self.tiers.len() {
            if mask & (1 << t) == 0 {
                continue;
            }
            if !self.admits_cascade(t) {
                self.drop_cascade(t, keys.len());
                continue;
            }
            let mut slots = std::mem::take(&mut self.slots_c);
            slots.clear();
            if let Err(e) = self.primary.pin_for_transfer(keys, &mut slots) {
                self.slots_c = slots;
                self.c.internal_errors += 1;
                self.log(format!("internal error: pinning for a cascade failed: {e}"));
                continue;
            }
            let tier = &mut self.tiers[t];
            tier.c.cascade_jobs += 1;
            tier.c.cascade_blocks += keys.len() as u64;
            self.submit(t, Direction::Store, keys, &slots, info.clone());
            self.slots_c = slots;
        }
    }

    /// Cascades parked keys that became ready; drops those whose write
    /// failed; pushes requests left with nothing parked onto `done`.
    pub(super) fn retry_parked(&mut self, done: &mut Vec<RequestId>) {
        if self.parked_reqs.is_empty() {
            return;
        }
        let reqs = std::mem::take(&mut self.parked_reqs);
        let mut keep = Vec::with_capacity(reqs.len());
        let mut ready = std::mem::take(&mut self.keys_a);
        for rid in reqs {
            let Some(st) = self.reqs.get_mut(&rid) else {
                continue;
            };
            ready.clear();
            let primary = &self.primary;
            let mut dropped = 0;
            st.parked.retain(|k| match primary.lookup(k) {
                PrimaryLookup::Hit => {
                    ready.push(*k);
                    false
                }
                PrimaryLookup::HitPending => true,
                PrimaryLookup::Miss => {
                    dropped += 1;
                    false
                }
            });
            self.c.parked_keys_dropped += dropped;
            let mask = st.request_level;
            let info = st.info.clone();
            if st.parked.is_empty() {
                done.push(rid);
            } else {
                keep.push(rid);
            }
            self.cascade_to(mask, &ready, &info);
        }
        self.keys_a = ready;
        self.parked_reqs = keep;
    }
}
