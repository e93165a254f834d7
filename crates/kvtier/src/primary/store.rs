//! Planning a store: `prepare_store` (written by the request) and
//! `prepare_promotion` (written by a promotion).  A call classifies its
//! keys, applies the admission threshold and ARC's store-miss adaptation,
//! records the request's accesses, evicts exactly the shortfall or
//! refuses, then inserts the keys to store, write pending for their
//! writer.  Their completion is in `completion.rs`.

use super::lists::NIL;
use super::policy::Policy;
use super::slots::{self, ANNOUNCED, HELD, Lookahead, NAMED};
use super::writers;
use super::{PolicyKind, PrimaryTier, StoreOutcome, StorePlan};
use crate::error::{Error, Result};
use crate::fallible;
use crate::key::{Key, KeyBatch, KeyBytes, with_keys};
use crate::request::RequestId;

/// `scratch_keys` kinds: what the key was at the start of `prepare_store`
/// (`STORED`: absent, and stored by this call at this first position).
const ABSENT: u8 = 0;
const FOUND_READY: u8 = 1;
const FOUND_PENDING: u8 = 2;
const STORED: u8 = 3;
/// Like `STORED`, and a ghost when the call began.
const STORED_GHOST: u8 = 4;

/// Batches up to this size find repeated keys by a linear scan, larger ones by a table.
const SMALL_BATCH: usize = 32;

impl PrimaryTier {
    /// Plans storing `keys` for `req` into `plan` (cleared first).
    ///
    /// Resident keys (any state) are not stored again; the rest, admitted by
    /// the threshold, are stored.  If free slots are short, exactly the
    /// shortfall is evicted from idle keys not named in this call; if that
    /// many are not available the call is refused and changes no key, slot
    /// or event: only counters (the allocation-size histogram included:
    /// vLLM observes a refused call), admission offers, ARC's store-miss
    /// adaptation and [0.33] the request's record.  The request records,
    /// before any eviction and refused or not, the keys to store and the
    /// ready keys found, in call order (as vLLM 0.33 does); with lru, a
    /// ready key with a position that the request presents for the first
    /// time is raised to the request's rank, and keys stored with a
    /// position rank within it (see [`PrimaryTier::set_positions`]).
    /// The keys to store are write pending for `req`: only its own
    /// [`PrimaryTier::complete_store`] finishes them.  (A request can plan
    /// keys while fewer than 2^31 - 1 other requests have writes in
    /// flight; beyond, its store is refused.)
    pub fn prepare_store<'k>(
        &mut self,
        req: RequestId,
        keys: impl Into<KeyBatch<'k>>,
        plan: &mut StorePlan,
    ) -> Result<StoreOutcome> {
        with_keys!(keys.into(), |k| self.plan_each(
            req,
            true,
            k.len(),
            |j| &k[j],
            plan
        ))
    }

    /// Plans a promotion of `keys` (blocks a secondary tier will copy in)
    /// for `req`: like [`PrimaryTier::prepare_store`], an access of `req`,
    /// but the keys to store are written by the promotion, not by `req`:
    /// only [`PrimaryTier::complete_promotion`] finishes them, never a
    /// request's store completion.
    pub fn prepare_promotion(
        &mut self,
        req: RequestId,
        keys: &[Key],
        plan: &mut StorePlan,
    ) -> Result<StoreOutcome> {
        self.plan_each(req, false, keys.len(), |j| &keys[j], plan)
    }

    /// Plans a store of keys `at(0..n)` for `req`, written by `req` itself
    /// (`by_request`) or by a promotion: every key classified, the
    /// admission threshold applied, ARC's store-miss adaptation, the
    /// request's accesses recorded, the shortfall evicted or the call
    /// refused, then the keys to store inserted (the steps below, in
    /// that order).  The steps are one function's parts, named for
    /// reading: each is inlined here.
    fn plan_each<'k, K: KeyBytes + ?Sized + 'k>(
        &mut self,
        req: RequestId,
        by_request: bool,
        n: usize,
        at: impl Fn(usize) -> &'k K,
        plan: &mut StorePlan,
    ) -> Result<StoreOutcome> {
        plan.clear();
        self.reserve_record(req, n)?;
        self.reserve_store(n, plan)?;
        self.check_group_keys(n, &at)?;
        self.next_epoch();

        let mut scratch = std::mem::take(&mut self.scratch_keys);
        let mut fresh = std::mem::take(&mut self.scratch_new);
        scratch.clear();
        fresh.clear();
        let named_idle = self.classify(n, &at, &mut scratch, &mut fresh);
        self.admit(&at, &mut scratch, &fresh, plan);
        self.adapt_to_store_misses(req, &mut scratch, &fresh);

        // [0.33] One allocation-size observation per call with keys to
        // store, made before the eviction check as vLLM does (a refused
        // call is observed too).
        if !plan.to_store.is_empty() {
            self.allocation_sizes.record(plan.to_store.len() as f64);
        }
        let mut stored_at = std::mem::take(&mut self.scratch_stored);
        stored_at.clear();
        self.record_accesses(req, &at, &scratch, &mut stored_at);
        let (refused, no_room) = self.evict_or_refuse(req, by_request, named_idle, plan);

        // Named keys are protected only during this call.
        for &(_, kind, s) in &scratch {
            if kind == FOUND_READY || kind == FOUND_PENDING {
                *self.slots.flags_mut(s) &= !NAMED;
            }
        }

        if let Some(e) = no_room {
            self.scratch_keys = scratch;
            self.scratch_new = fresh;
            return Err(e);
        }
        if !refused {
            self.insert_planned(req, by_request, &mut scratch, &stored_at, plan);
        }
        self.scratch_stored = stored_at;
        self.scratch_keys = scratch;
        self.scratch_new = fresh;
        Ok(if refused {
            StoreOutcome::Refused
        } else {
            StoreOutcome::Planned
        })
    }

    /// Step 1: classifies every key into `scratch` (hash, kind and slot,
    /// in call order); flags resident ones as named (protected from
    /// eviction); collects the distinct absent keys in `fresh` (key, hash
    /// and first position, in call order).  Returns how many idle keys it
    /// named.
    #[inline(always)]
    fn classify<'k, K: KeyBytes + ?Sized + 'k>(
        &mut self,
        n: usize,
        at: impl Fn(usize) -> &'k K,
        scratch: &mut Vec<(u64, u8, u32)>,
        fresh: &mut Vec<(Key, u64, u32)>,
    ) -> u32 {
        let use_table = n > SMALL_BATCH;
        let mut named_idle = 0u32;
        if use_table {
            self.scratch_dedup.clear();
        }
        let mut ahead = Lookahead::new(&self.slots, n, &at);
        for pos in 0..n {
            let key = at(pos);
            let (h, slot) = ahead.find(&self.slots, pos, &at);
            match (slot != NIL).then_some(slot) {
                Some(s) => {
                    let r = self.slots.refs(s);
                    let f = self.slots.flags_mut(s);
                    if *f & (NAMED | HELD) == 0 && r == 0 {
                        named_idle += 1;
                    }
                    *f |= NAMED;
                    let kind = if r < 0 { FOUND_PENDING } else { FOUND_READY };
                    scratch.push((h, kind, s));
                }
                None => {
                    // Asked below (ARC: whether it is a ghost).
                    if self.slots.read_ahead {
                        self.policy.prefetch_history(h);
                    }
                    scratch.push((h, ABSENT, NIL));
                    let seen = if use_table {
                        self.scratch_dedup
                            .find(h, |&i| slots::same_key(&fresh[i as usize].0, key))
                            .is_some()
                    } else {
                        fresh
                            .iter()
                            .any(|(k, fh, _)| *fh == h && slots::same_key(k, key))
                    };
                    if seen {
                        continue;
                    }
                    if use_table {
                        let n = fresh.len() as u32;
                        self.scratch_dedup
                            .insert_unique(h, n, |&i| fresh[i as usize].1);
                    }
                    fresh.push((key.keep_value(), h, pos as u32));
                    if let Some(f) = fresh.last_mut() {
                        key.keep_finish(&mut f.0);
                    }
                }
            }
        }
        named_idle
    }

    /// Step 2, [0.33] the admission threshold: every key the call names is
    /// an offer, all counted before any is judged (see `admission`).
    /// Admitted keys go to the plan and are marked STORED in `scratch` at
    /// their first position.
    #[inline(always)]
    fn admit<'k, K: KeyBytes + ?Sized + 'k>(
        &mut self,
        at: impl Fn(usize) -> &'k K,
        scratch: &mut [(u64, u8, u32)],
        fresh: &[(Key, u64, u32)],
        plan: &mut StorePlan,
    ) {
        let epoch = self.slots.epoch;
        let threshold = self.config.store_threshold;
        if let Some(a) = self.admission.as_mut() {
            for (pos, &(h, _, _)) in scratch.iter().enumerate() {
                a.count_known(at(pos), h, epoch);
            }
            for (pos, &(h, _, _)) in scratch.iter().enumerate() {
                a.record_new(at(pos), h, epoch);
            }
        }
        for (key, h, pos) in fresh {
            let admitted = self
                .admission
                .as_ref()
                .is_none_or(|a| a.offers(key, *h) >= threshold);
            if admitted {
                plan.to_store.push(*key);
                scratch[*pos as usize].1 = STORED;
            } else {
                self.counters.admission_skips += 1;
            }
        }
    }

    /// Step 3, [0.33] ARC store-miss adaptation: the admitted keys, last
    /// to first; those this request offers for the first time adapt (if
    /// ghosts) and are remembered for it.  Ghosts become STORED_GHOST for
    /// the insertion below.
    #[inline(always)]
    fn adapt_to_store_misses(
        &mut self,
        req: RequestId,
        scratch: &mut [(u64, u8, u32)],
        fresh: &[(Key, u64, u32)],
    ) {
        if self.policy.learns_from_store_misses() {
            for (key, h, pos) in fresh.iter().rev() {
                let kind = &mut scratch[*pos as usize].1;
                if *kind != STORED {
                    continue;
                }
                let first = self.adapted.insert((req, *key));
                if first {
                    if let Some(r) = self.requests.get_mut(&req) {
                        r.adapted.push(*key);
                    }
                }
                if self.policy.store_miss(key, *h, first) {
                    *kind = STORED_GHOST;
                }
            }
        }
    }

    /// Step 4, [0.33]: records the request's accesses, in call order,
    /// before any eviction (a refused store records them too): every ready
    /// key found (reused) and the first occurrence of every key to store.
    /// If some are new to the request, it gets its rank, and the new
    /// resident ones with positions are raised to it.  The record index of
    /// each key to store goes to `stored_at`, in plan order.
    #[inline(always)]
    fn record_accesses<'k, K: KeyBytes + ?Sized + 'k>(
        &mut self,
        req: RequestId,
        at: impl Fn(usize) -> &'k K,
        scratch: &[(u64, u8, u32)],
        stored_at: &mut Vec<u32>,
    ) {
        let mut raises = std::mem::take(&mut self.scratch_raises);
        raises.clear();
        if let Some(record) = self.requests.get_mut(&req) {
            let positioned = !record.positions.is_empty();
            let mut any_new = false;
            for (pos, &(h, kind, s)) in scratch.iter().enumerate() {
                let key = at(pos);
                match kind {
                    FOUND_READY => {
                        let (_, new) = record.record(key, h, s, true);
                        any_new |= new;
                        if new && positioned {
                            if let Some(p) = record.positions.get(key, h) {
                                raises.push((s, p));
                            }
                        }
                    }
                    STORED | STORED_GHOST => {
                        let (i, new) = record.record(key, h, NIL, false);
                        any_new |= new;
                        stored_at.push(i);
                    }
                    _ => {}
                }
            }
            if any_new {
                self.policy.request_access(&mut record.rank);
                for &(slot, p) in &raises {
                    self.policy.raise(&self.slots, slot, &mut record.rank, p);
                }
            }
        }
        self.scratch_raises = raises;
    }

    /// Step 5: evicts the shortfall, or refuses.  Returns whether the call
    /// is refused, and the error if there is no room for what the
    /// evictions remember (then nothing was evicted either).
    #[inline(always)]
    fn evict_or_refuse(
        &mut self,
        req: RequestId,
        by_request: bool,
        named_idle: u32,
        plan: &mut StorePlan,
    ) -> (bool, Option<Error>) {
        let need = plan.to_store.len().saturating_sub(self.slots.free_count());
        let mut victims = std::mem::take(&mut self.scratch_victims);
        // Fewer evictable keys than needed: refuse without looking at the
        // policy's lists (no scan).  Otherwise enough exist, and the policy
        // finds them passing over only pinned, pending and named keys.
        let evictable = (self.idle - named_idle) as usize;
        let no_writer_id = by_request && !plan.to_store.is_empty() && !self.writers.can_plan(req);
        let refused = no_writer_id
            || need > 0
                && (evictable < need
                    || !self
                        .policy
                        .select_victims(&mut self.slots, need, &mut victims));
        // Room for what the evictions remember (ARC's ghosts); without it
        // the call fails as a refusal would, before evicting anything.
        let no_room = if refused || need == 0 {
            None
        } else {
            self.policy.reserve_evictions(need).err()
        };
        if refused || no_room.is_some() {
            if refused {
                self.counters.refusals += 1;
            }
            plan.clear();
        } else if need > 0 {
            // Every victim's index line and policy lines load together.
            let mut hashes = std::mem::take(&mut self.scratch_hashes);
            hashes.clear();
            let read_ahead = self.slots.read_ahead;
            for &slot in &victims {
                let h = self.slots.hash(self.slots.key(slot));
                if read_ahead {
                    self.slots.index.prefetch(h);
                    self.policy.prefetch_eviction(slot, h);
                }
                hashes.push(h);
            }
            for (&slot, &h) in victims.iter().zip(&hashes) {
                let key = *self.slots.key(slot);
                self.policy.evict(&self.slots, slot, h);
                self.events
                    .removed(key, self.slots.flags(slot) & ANNOUNCED != 0);
                self.slots.release(slot, h);
                self.idle -= 1;
                self.counters.evictions += 1;
                plan.evicted.push(key);
            }
            self.scratch_hashes = hashes;
        }
        victims.clear();
        self.scratch_victims = victims;
        (refused, no_room)
    }

    /// Step 6: allocates and inserts the keys to store, in call order (the
    /// last key most recent; [0.33] keys with a position at their place
    /// within the request's rank), write pending for their writer, and
    /// marks them inserted by the request.
    #[inline(always)]
    fn insert_planned(
        &mut self,
        req: RequestId,
        by_request: bool,
        scratch: &mut [(u64, u8, u32)],
        stored_at: &[u32],
        plan: &mut StorePlan,
    ) {
        let writer = if by_request && !plan.to_store.is_empty() {
            self.writers.id_for(req)
        } else {
            writers::PROMOTION
        };
        let mut record = self.requests.get_mut(&req);
        let positioned = record.as_ref().is_some_and(|r| !r.positions.is_empty());
        for (h, kind, s) in scratch.iter_mut() {
            let (h, kind) = (*h, *kind);
            if kind != STORED && kind != STORED_GHOST {
                continue;
            }
            // Enough slots are free now: the shortfall was evicted.
            let Some(slot) = self.slots.allocate() else {
                break;
            };
            *s = slot;
            let planned = plan.slots.len();
            let key = &plan.to_store[planned];
            self.slots.occupy(slot, key, h, writer);
            let ghost = kind == STORED_GHOST;
            match record.as_deref_mut() {
                Some(r) => {
                    match positioned.then(|| r.positions.get(key, h)).flatten() {
                        Some(p) => self.policy.insert_positioned(
                            &self.slots,
                            slot,
                            h,
                            ghost,
                            &mut r.rank,
                            p,
                        ),
                        None => self.policy.insert(&self.slots, slot, h, ghost),
                    }
                    if let Some(a) = stored_at
                        .get(planned)
                        .and_then(|&i| r.accesses.get_mut(i as usize))
                    {
                        a.inserted = true;
                        a.slot = slot;
                    }
                }
                None => self.policy.insert(&self.slots, slot, h, ghost),
            }
            plan.slots.push(slot);
        }
        self.write_pending += plan.slots.len() as u32;
        self.counters.stores_planned += plan.slots.len() as u64;
        if writer != writers::PROMOTION {
            self.writers.planned(req, plan.slots.len() as u32);
        }
    }

    /// Makes room, fallibly, for everything `prepare_store` of `n` keys may
    /// add to the scratch buffers, the plan and the admission table, so
    /// the call never fails halfway for lack of memory.
    fn reserve_store(&mut self, n: usize, plan: &mut StorePlan) -> Result<()> {
        let what = "planning a store";
        fallible::reserve(&mut self.scratch_keys, n, what)?;
        fallible::reserve(&mut self.scratch_new, n, what)?;
        fallible::reserve(&mut self.scratch_victims, n, what)?;
        fallible::reserve(&mut self.scratch_hashes, n, what)?;
        if n > SMALL_BATCH {
            // Cleared before use: nothing to rehash.
            self.scratch_dedup.clear();
            fallible::reserve_table(&mut self.scratch_dedup, n, |_| 0, what)?;
        }
        fallible::reserve(&mut plan.to_store, n, what)?;
        fallible::reserve(&mut plan.slots, n, what)?;
        fallible::reserve(&mut plan.evicted, n, what)?;
        if let Some(a) = self.admission.as_mut() {
            a.reserve(n)?;
        }
        if self.config.policy == PolicyKind::Arc {
            self.adapted
                .try_reserve(n)
                .map_err(|_| fallible::out_of_memory::<(RequestId, Key)>(what, n))?;
        }
        Ok(())
    }
}
