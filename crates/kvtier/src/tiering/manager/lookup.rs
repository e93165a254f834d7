//! vLLM 0.33's per-key lookups, the answers' types, and what both kinds
//! of lookup share (the leading hits, asking the secondary tiers,
//! starting a promotion).  The batched lookup that promotes a whole
//! prefix is in `prefix.rs`.

use super::PrimaryBackend;
use super::{Key, Manager, PrimaryLookup, RequestId, Result, State, TierLookup, filter_allows};
use crate::key::{KeyBatch, KeyBytes, KeyRef, with_keys};

/// What `lookup` answers for a key whose promotion it just started
/// (`"retry"` or `"hit_pending"` in JSON).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum PromotionAnswer {
    /// vLLM's answer before 0.33 (the default): ask again later.
    #[default]
    Retry,
    /// vLLM 0.33's answer: the block is on its way (write pending).
    HitPending,
}

/// The manager's answer to a lookup.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LookupResult {
    /// Not readable, and nothing is on its way: see [`MissReason`].
    Miss,
    /// Ready in the primary tier.
    Hit,
    /// Coming into the primary tier (write pending).
    HitPending,
    /// Ask again later (a promotion started, or a tier is busy).
    Retry,
}

/// Why a lookup answered [`LookupResult::Miss`], or why a batched
/// lookup's prefix ends before its last key.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MissReason {
    /// No tier has the key, or none was asked: there is no secondary tier,
    /// the request's filter excludes every tier, or promotions are held
    /// after a reset.  Counted in `misses_absent`.
    Absent,
    /// A secondary tier has the key, but the primary tier did not take its
    /// promotion: no free slot, or its admission threshold did not admit
    /// the key yet.  Asking again a step later may find it (but not while
    /// the request waits: see [`ProgressOptions`](super::ProgressOptions)).
    /// Counted in `misses_no_room`.
    NoRoom,
    /// The request waited for its blocks longer than the wait
    /// bound ([`ProgressOptions`](super::ProgressOptions)): load what is
    /// ready, recompute the rest.  Counted in `misses_timed_out`.
    TimedOut,
}

/// The answer of a batched lookup ([`Manager::lookup_prefix`], or
/// [`Manager::lookup_per_key`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LookupAnswer {
    /// Number of leading keys that are HIT: ready in the primary tier now.
    pub hits: usize,
    /// Keys after the hits, before `end`, that are not ready yet but on
    /// their way: being written into the primary tier (a store, or a
    /// promotion started now or earlier), or in a tier that asked to be
    /// asked again.  0 exactly when `hits == end`: nothing to wait for.
    pub pending: usize,
    /// Where the prefix ends: the first key no tier has (or that the
    /// primary tier could not take, or that the request waited for too
    /// long: see `reason`), or the number of keys.  Keys from `hits` to
    /// `end` are ready or on their way.
    pub end: usize,
    /// The answer of key `hits` ([`LookupResult::Hit`] when every key is
    /// a hit): what a lookup of that one key would have answered, or MISS
    /// where the prefix ends at it (`end == hits`: a waiting request's
    /// prefix that found no room earlier, or the bound).
    pub stop: LookupResult,
    /// Why the prefix ends at `end`, when `end` is before the last key
    /// (for [`Manager::lookup_per_key`]: when `stop` is MISS).
    pub reason: Option<MissReason>,
}

impl LookupAnswer {
    /// Every key of `n` is a hit.
    pub(super) fn all_hits(n: usize) -> LookupAnswer {
        LookupAnswer {
            hits: n,
            pending: 0,
            end: n,
            stop: LookupResult::Hit,
            reason: None,
        }
    }

    /// The number of keys [`Manager::lookup_per_key`] looked up: the
    /// hits and the key that stopped them.
    pub fn looked_up(&self) -> usize {
        self.hits + usize::from(self.stop != LookupResult::Hit)
    }

    /// Whether there is nothing to wait for: every key of the prefix is
    /// ready (`hits == end`).
    pub fn settled(&self) -> bool {
        self.pending == 0
    }
}

/// Keys whose primary-tier answers are read in one call: their memory
/// reads overlap, and the primary tier remembers where the hits are for
/// the request's next calls (a load's pin, touch and unpin).
const READ_TOGETHER: usize = 32;

impl<P: PrimaryBackend> Manager<P> {
    /// Looks one key up for `request`, as vLLM 0.33's `lookup` does:
    /// [`LookupResult::Hit`] and [`LookupResult::HitPending`] from the
    /// primary tier; on a primary miss, the first secondary tier that has
    /// the key starts a promotion (RETRY, or HIT_PENDING with that
    /// option); MISS if none does (see [`Manager::lookup_per_key`] for the
    /// reasons).
    pub fn lookup(&self, request: RequestId, key: &Key) -> Result<LookupResult> {
        Ok(self
            .lookup_per_key(request, std::slice::from_ref(key))?
            .stop)
    }

    /// vLLM 0.33's per-key answers: looks `keys` up for `request` in
    /// order, one as [`Manager::lookup`] answers it, and stops at the
    /// first that is not HIT, whose answer (and, for a MISS, its reason)
    /// the answer gives; the keys after it are not looked up.  The same
    /// answers, promotions and counters as one call of vLLM's `lookup` per
    /// key up to that one: HIT and HIT_PENDING from the primary tier; on a
    /// primary miss the first secondary tier that has the key (in order,
    /// those the request's filter allows) starts a promotion, answered
    /// RETRY or, with that option, HIT_PENDING; RETRY if a tier asked to
    /// be asked again; else MISS, with [`MissReason::NoRoom`] when a tier
    /// had the key but the primary tier did not take it,
    /// [`MissReason::TimedOut`] when the request waited past the bound,
    /// [`MissReason::Absent`] otherwise.  `pending` is 1 when the stop is
    /// HIT_PENDING or RETRY, and `end` is `hits + pending`.  Empty `keys`:
    /// zero hits, stop HIT, nothing polled.
    ///
    /// An engine that scans on past a RETRY (as vLLM's connector does)
    /// calls this one key at a time; [`Manager::lookup_prefix`] does the
    /// whole scan in one call.
    pub fn lookup_per_key<'k>(
        &self,
        request: RequestId,
        keys: impl Into<KeyBatch<'k>>,
    ) -> Result<LookupAnswer> {
        with_keys!(keys.into(), |k| {
            self.lookup_of(LookupKind::PerKey, request, k.len(), |j| k[j].key_bytes())
        })
    }

    /// A lookup of `kind` of the keys `key(0..n)` (each 1..=64 bytes).
    pub(super) fn lookup_of<'k>(
        &self,
        kind: LookupKind,
        request: RequestId,
        n: usize,
        key: impl Fn(usize) -> &'k [u8],
    ) -> Result<LookupAnswer> {
        let mut s = self.enter("lookup")?;
        let s = &mut *s;
        let waits = s.active_waits(request)?;
        s.check_keys(n, &key)?;
        if n == 0 {
            return Ok(LookupAnswer::all_hits(0));
        }
        if kind == LookupKind::Prefix {
            // Every allocation its holds need, before anything changes.
            s.reserve_for_holds(request, n)?;
        }
        s.poll_gated(&self.queue);
        let expired = waits && s.wait_expired(request);
        let answer = match kind {
            LookupKind::PerKey => s.lookup_keys(request, n, &key, expired)?,
            LookupKind::Prefix => s.lookup_whole_prefix(request, n, &key, expired)?,
        };
        if s.opts.progress.hold_hits && answer.hits > 0 {
            s.hold_leading(request, answer.hits, &key);
        }
        s.note_lookup(request, n, &answer, kind);
        Ok(answer)
    }
}

/// Which of the two batched lookups a call is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum LookupKind {
    /// [`Manager::lookup_per_key`]: vLLM's answers, key by key, up to the
    /// first key not HIT.
    PerKey,
    /// [`Manager::lookup_prefix`]: the whole prefix, its promotions
    /// started at once, with the progress rule.
    Prefix,
}

/// What the secondary tiers answered for a key the primary tier lacks.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum TierAnswer {
    /// Secondary tier `t` (internal index) has it.
    Has(usize),
    /// None has it, but one asked to be asked again.
    Retry,
    /// None has it, or none was asked.
    Absent,
}

impl<P: PrimaryBackend> State<P> {
    /// With KV groups on, `InvalidKey` naming the first of keys
    /// `key(0..n)` too short for its group index (the primary tier's rule,
    /// [`crate::primary::PrimaryTier::check_keys`]): every call that takes
    /// a request's keys refuses them before anything changes (a lookup
    /// would otherwise promote one a secondary tier holds into a tier that
    /// cannot take it, answering MISS "no room" on every step).
    #[inline]
    pub(super) fn check_keys<'k, K: KeyBytes + ?Sized + 'k>(
        &self,
        n: usize,
        key: impl Fn(usize) -> &'k K,
    ) -> Result<()> {
        crate::primary::check_group_keys(self.opts.kv_groups, n, key)
    }

    /// The leading hits of keys `key(0..n)` for `request`, read together
    /// (the primary tier remembers where they are, for the request's next
    /// calls): their number, and the primary tier's answer of the key
    /// after them.  Counted as looked up and hit.
    #[inline]
    pub(super) fn leading_hits<'k>(
        &mut self,
        request: RequestId,
        n: usize,
        key: &impl Fn(usize) -> &'k [u8],
    ) -> (usize, PrimaryLookup) {
        let mut views = [KeyRef::FILLER; READ_TOGETHER];
        let mut first = 0;
        while first < n {
            let m = (n - first).min(READ_TOGETHER);
            for (j, v) in views[..m].iter_mut().enumerate() {
                *v = KeyRef::checked(key(first + j));
            }
            let found = self.primary.lookup_prefix_for(request, first, &views[..m]);
            self.c.lookups += found.hits as u64;
            self.c.primary_hits += found.hits as u64;
            if found.stop != PrimaryLookup::Hit {
                return (first + found.hits, found.stop);
            }
            first += m;
        }
        (n, PrimaryLookup::Hit)
    }

    /// Counts a lookup's answer MISS for `reason`.
    #[inline]
    pub(super) fn count_miss(&mut self, reason: MissReason) {
        match reason {
            MissReason::Absent => self.c.misses_absent += 1,
            MissReason::NoRoom => self.c.misses_no_room += 1,
            MissReason::TimedOut => self.c.misses_timed_out += 1,
        }
    }

    /// What a lookup that starts a promotion answers.
    #[inline]
    pub(super) fn promotion_answer(&self) -> LookupResult {
        match self.opts.promotion_answer {
            PromotionAnswer::Retry => LookupResult::Retry,
            PromotionAnswer::HitPending => LookupResult::HitPending,
        }
    }

    /// The lookups of [`Manager::lookup_per_key`], counted; with the
    /// request's wait `expired`, the first key not ready answers MISS
    /// (timed out) and nothing is promoted.
    #[inline]
    fn lookup_keys<'k>(
        &mut self,
        request: RequestId,
        n: usize,
        key: &impl Fn(usize) -> &'k [u8],
        expired: bool,
    ) -> Result<LookupAnswer> {
        let (hits, stop) = self.leading_hits(request, n, key);
        if stop == PrimaryLookup::Hit {
            return Ok(LookupAnswer::all_hits(n));
        }
        self.c.lookups += 1;
        let (stop, reason) = if expired {
            (LookupResult::Miss, Some(MissReason::TimedOut))
        } else if stop == PrimaryLookup::HitPending {
            self.c.primary_hit_pending += 1;
            (LookupResult::HitPending, None)
        } else {
            let k = Key::at(key(hits), hits)?;
            match self.ask_tiers(request, &k) {
                TierAnswer::Has(t) if self.promote(t, request, &k) => {
                    (self.promotion_answer(), None)
                }
                TierAnswer::Has(_) => (LookupResult::Miss, Some(MissReason::NoRoom)),
                TierAnswer::Retry => (LookupResult::Retry, None),
                TierAnswer::Absent => (LookupResult::Miss, Some(MissReason::Absent)),
            }
        };
        if let Some(reason) = reason {
            self.count_miss(reason);
        }
        let pending = usize::from(stop != LookupResult::Miss);
        Ok(LookupAnswer {
            hits,
            pending,
            end: hits + pending,
            stop,
            reason,
        })
    }

    /// Asks the secondary tiers (in order, those the request's filter
    /// allows) for `key`, which the primary tier does not have, for
    /// active request `rid`; counts their answers.
    pub(super) fn ask_tiers(&mut self, rid: RequestId, key: &Key) -> TierAnswer {
        if self.tiers.is_empty() {
            return TierAnswer::Absent;
        }
        if self.held {
            self.c.held_misses += 1;
            return TierAnswer::Absent;
        }
        let Some(st) = self.reqs.get(&rid) else {
            return TierAnswer::Absent;
        };
        let info = &st.info;
        let mut any_retry = false;
        for (t, entry) in self.tiers.iter_mut().enumerate() {
            if !filter_allows(&info.filter, entry.medium, entry.locality) {
                continue;
            }
            entry.c.lookups += 1;
            match entry.tier.lookup(key, info) {
                TierLookup::Hit => {
                    entry.c.hits += 1;
                    return TierAnswer::Has(t);
                }
                TierLookup::Retry => {
                    entry.c.retries += 1;
                    any_retry = true;
                }
                TierLookup::Miss => {}
            }
        }
        if any_retry {
            TierAnswer::Retry
        } else {
            TierAnswer::Absent
        }
    }

    /// Starts the promotion of `key` from secondary tier `t` for `rid`;
    /// false if the primary tier did not take it.
    pub(super) fn promote(&mut self, t: usize, rid: RequestId, key: &Key) -> bool {
        if !self.start_promotion(t, rid, key) {
            return false;
        }
        self.tiers[t].c.promotions_started += 1;
        let reporting = self.obs.reporting();
        if let Some(st) = self.reqs.get_mut(&rid) {
            st.progress.promoting += 1;
            if reporting {
                st.tally.promotion_from(t);
            }
        }
        true
    }
}
