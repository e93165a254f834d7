//! Store completions: the end of a write that `prepare_store` (or
//! `prepare_promotion`) planned.
//!
//! A completion acts only on the keys its writer planned and that are
//! still write pending for it: a request's completion on the keys its own
//! `prepare_store` planned, a promotion's on the slots promotions
//! reserved.  Any other key named is left alone and counted: a key
//! written by another request or by a promotion (`foreign_completions`),
//! a key already ready (`already_ready_completions`), an absent key
//! (`late_completions`: after a reset, or after its write failed).
//! Otherwise a request naming every key it gave `prepare_store` could
//! drop a key another request is still writing (its slot would be handed
//! out again while that write lands in it) or publish it before it was
//! written.  A plan may be completed in several calls, and after its
//! request finished.
//!
//! The writer of each write-pending slot is read from its ref count
//! (`writers.rs`), so the check costs nothing per key beyond the read a
//! completion makes anyway.

use super::lists::NIL;
use super::policy::Policy;
use super::slots::{self, ANNOUNCED, Lookahead};
use super::writers::{self, Writer};
use super::{CompleteStoreReport, PrimaryTier};
use crate::key::{Key, KeyBatch, KeyBytes, with_keys};
use crate::request::RequestId;

impl PrimaryTier {
    /// Finishes `req`'s writes of `keys`: on success the keys `req`
    /// planned that are still write pending for it become ready and idle
    /// ("stored" events); on failure they are dropped and their slots
    /// freed.  Every other key is left alone and counted (see the report).
    /// `req` need not be active: completions may arrive after it finished.
    pub fn complete_store<'k>(
        &mut self,
        req: RequestId,
        keys: impl Into<KeyBatch<'k>>,
        success: bool,
    ) -> CompleteStoreReport {
        with_keys!(keys.into(), |k| self.complete_store_each(
            req,
            k.len(),
            |j| &k[j],
            success
        ))
    }

    /// [`PrimaryTier::complete_store`] that hands back what it made
    /// ready, pinned for transfers, in the same pass: each key it made
    /// ready is appended to `made_ready`, its slot to `slots`, and it is
    /// pinned `pins` times, as that many [`PrimaryTier::pin_for_transfer`]
    /// calls over those keys would pin them (a manager pins once per
    /// secondary tier it cascades them to).  With `pins` 0 it is
    /// [`PrimaryTier::complete_store`] and hands back nothing (the report
    /// counts the keys it made ready).
    pub fn complete_store_pinned<'k>(
        &mut self,
        req: RequestId,
        keys: impl Into<KeyBatch<'k>>,
        success: bool,
        pins: u32,
        made_ready: &mut Vec<Key>,
        slots: &mut Vec<u32>,
    ) -> CompleteStoreReport {
        let keys = keys.into();
        if pins == 0 {
            return self.complete_store(req, keys, success);
        }
        with_keys!(keys, |k| self.complete_each(
            Writer::Request(req),
            k.len(),
            |j| &k[j],
            success,
            pins,
            |key, slot| {
                made_ready.push(*key);
                slots.push(slot);
            },
        ))
    }

    /// Finishes promotions' writes of `keys`: like
    /// [`PrimaryTier::complete_store`], acting only on slots that
    /// [`PrimaryTier::prepare_promotion`] reserved.
    pub fn complete_promotion(&mut self, keys: &[Key], success: bool) -> CompleteStoreReport {
        self.complete_each(
            Writer::Promotion,
            keys.len(),
            |j| &keys[j],
            success,
            0,
            |_, _| {},
        )
    }

    /// Number of keys `req` planned that are still write pending for it
    /// (0 once all were completed, and after a reset).
    pub fn stores_pending(&self, req: RequestId) -> u32 {
        self.writers.pending(req)
    }

    /// [`PrimaryTier::complete_store`] of keys `at(0..n)`.
    pub(crate) fn complete_store_each<'k, K: KeyBytes + ?Sized + 'k>(
        &mut self,
        req: RequestId,
        n: usize,
        at: impl Fn(usize) -> &'k K,
        success: bool,
    ) -> CompleteStoreReport {
        self.complete_each(Writer::Request(req), n, at, success, 0, |_, _| {})
    }

    /// Finishes `by`'s writes of keys `at(0..n)`, pinning each key made
    /// ready `pins` times for transfers and handing it and its slot to
    /// `on_ready`.
    fn complete_each<'k, K: KeyBytes + ?Sized + 'k>(
        &mut self,
        by: Writer,
        n: usize,
        at: impl Fn(usize) -> &'k K,
        success: bool,
        pins: u32,
        mut on_ready: impl FnMut(&Key, u32),
    ) -> CompleteStoreReport {
        let pins = i32::try_from(pins).unwrap_or(i32::MAX);
        let mut report = CompleteStoreReport::default();
        // The ref count a slot written by `by` has (none: `by` writes nothing).
        let own = match by {
            Writer::Promotion => Some(writers::PROMOTION),
            Writer::Request(req) => self.writers.id_of(req),
        }
        .map(slots::pending_for);
        let mut ahead = Lookahead::new(&self.slots, n, &at);
        for i in 0..n {
            // A failed store frees slots as it goes: each key is resolved
            // against the table as it is at its turn.
            let (h, slot) = ahead.find(&self.slots, i, &at);
            if slot == NIL {
                report.ignored += 1;
                continue;
            }
            let r = self.slots.refs(slot);
            if r >= 0 {
                report.already_ready += 1;
                continue;
            }
            if Some(r) != own {
                report.foreign += 1;
                continue;
            }
            self.write_pending -= 1;
            if success {
                self.slots.set_refs(slot, 0);
                self.became_idle(slot);
                if pins == 0 {
                    self.idle += 1;
                } else {
                    // Ready, then pinned for the transfers at once.
                    self.slots.set_refs(slot, pins);
                    self.pinned += 1;
                }
                report.ready += 1;
                let key = *self.slots.key(slot);
                on_ready(&key, slot);
                if self.events.stored(key) {
                    *self.slots.flags_mut(slot) |= ANNOUNCED;
                }
            } else {
                self.policy.remove(slot);
                self.slots.release(slot, h);
                report.dropped += 1;
            }
        }
        if let Writer::Request(req) = by {
            self.writers
                .completed(req, (report.ready + report.dropped) as u32);
        }
        let c = &mut self.counters;
        c.stores_completed += report.ready as u64;
        c.stores_failed += report.dropped as u64;
        c.late_completions += report.ignored as u64;
        c.foreign_completions += report.foreign as u64;
        c.already_ready_completions += report.already_ready as u64;
        c.transfer_pins += report.ready as u64 * pins as u64;
        report
    }
}
