//! Lookups: a request's keys, looked up in order until the first that is
//! not HIT, as engines do them.  A batch behaves exactly as looking its
//! keys up one call each until one is not HIT: the same answers, the same
//! promotions started, the same counters.  The answers' types are here
//! too.

use super::{Key, Manager, PrimaryLookup, RequestId, Result, State, TierLookup, filter_allows};
use crate::key::KeyBytes;

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

/// Why a lookup answered [`LookupResult::Miss`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MissReason {
    /// No tier has the key, or none was asked: there is no secondary tier,
    /// the request's filter excludes every tier, or promotions are held
    /// after a reset.  Counted in `misses_absent`.
    Absent,
    /// A secondary tier has the key, but the primary tier did not take its
    /// promotion: no free slot, or its admission threshold did not admit
    /// the key yet.  Asking again a step later may find it.  Counted in
    /// `misses_no_room`.
    NoRoom,
}

/// The answer of [`Manager::lookup_prefix`]: keys are looked up in order
/// until the first that is not HIT.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LookupAnswer {
    /// Number of leading keys that are HIT.
    pub hits: usize,
    /// The answer of key `hits` ([`LookupResult::Hit`] when every key is).
    pub stop: LookupResult,
    /// Why, when `stop` is [`LookupResult::Miss`].
    pub reason: Option<MissReason>,
}

impl LookupAnswer {
    /// The number of keys looked up: the hits and the key that stopped them.
    pub fn looked_up(&self) -> usize {
        self.hits + usize::from(self.stop != LookupResult::Hit)
    }
}

/// Keys whose primary-tier answers are read in one call: their memory
/// reads overlap, and the primary tier remembers where the hits are for
/// the request's next calls (a load's pin, touch and unpin).
const READ_TOGETHER: usize = 32;

impl Manager {
    /// Looks one key up for `request`: [`LookupResult::Hit`] and
    /// [`LookupResult::HitPending`] from the primary tier; on a primary
    /// miss, the first secondary tier that has the key starts a promotion
    /// (RETRY, or HIT_PENDING with that option); MISS if none does (see
    /// [`Manager::lookup_prefix`] for the reasons).
    pub fn lookup(&self, request: RequestId, key: &Key) -> Result<LookupResult> {
        Ok(self.lookup_prefix(request, std::slice::from_ref(key))?.stop)
    }

    /// Looks `keys` up for `request` in order and stops at the first that
    /// is not HIT, whose answer (and, for a MISS, its reason) the answer
    /// gives; the keys after it are not looked up.  Each key is answered
    /// as [`Manager::lookup`] answers it: HIT and HIT_PENDING from the
    /// primary tier; on a primary miss the first secondary tier that has
    /// the key (in order, those the request's filter allows) starts a
    /// promotion, answered RETRY or, with that option, HIT_PENDING; RETRY
    /// if a tier asked to be asked again; else MISS, with
    /// [`MissReason::NoRoom`] when a tier had the key but the primary
    /// tier did not take it, [`MissReason::Absent`] otherwise.  Empty
    /// `keys`: zero hits, stop HIT, nothing polled.
    pub fn lookup_prefix(&self, request: RequestId, keys: &[Key]) -> Result<LookupAnswer> {
        self.lookup_prefix_with(request, keys.len(), |j| keys[j].as_bytes())
    }

    /// [`Manager::lookup_prefix`] of the keys `key(0..n)`, read in place
    /// (as C passes them): each must be 1..=64 bytes.
    pub(crate) fn lookup_prefix_with<'k>(
        &self,
        request: RequestId,
        n: usize,
        key: impl Fn(usize) -> &'k [u8],
    ) -> Result<LookupAnswer> {
        let mut s = self.enter("lookup")?;
        let s = &mut *s;
        let waiting = s.active_waiting(request)?;
        s.check_keys(n, &key)?;
        let answer = LookupAnswer {
            hits: 0,
            stop: LookupResult::Hit,
            reason: None,
        };
        if n == 0 {
            return Ok(answer);
        }
        s.poll_gated(&self.queue);
        let started = s.c.promotions_started;
        let answer = s.lookup_keys(request, n, key, answer)?;
        let started = s.c.promotions_started != started;
        s.note_lookup(request, &answer, started, waiting);
        Ok(answer)
    }
}

impl State {
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

    /// The lookups of [`Manager::lookup_prefix_with`], counted.
    #[inline]
    fn lookup_keys<'k>(
        &mut self,
        request: RequestId,
        n: usize,
        key: impl Fn(usize) -> &'k [u8],
        mut answer: LookupAnswer,
    ) -> Result<LookupAnswer> {
        let s = self;
        let mut views: [&[u8]; READ_TOGETHER] = [&[]; READ_TOGETHER];
        let mut first = 0;
        while first < n {
            let m = (n - first).min(READ_TOGETHER);
            for (j, v) in views[..m].iter_mut().enumerate() {
                *v = key(first + j);
            }
            let found = s.primary.lookup_prefix_for(request, first, &views[..m]);
            s.c.lookups += found.hits as u64;
            s.c.primary_hits += found.hits as u64;
            answer.hits += found.hits;
            match found.stop {
                PrimaryLookup::Hit => {}
                PrimaryLookup::HitPending => {
                    s.c.lookups += 1;
                    s.c.primary_hit_pending += 1;
                    answer.stop = LookupResult::HitPending;
                    return Ok(answer);
                }
                PrimaryLookup::Miss => {
                    s.c.lookups += 1;
                    let j = found.hits;
                    let k = Key::at(views[j], first + j)?;
                    let (stop, reason) = s.lookup_secondary(request, &k);
                    match reason {
                        Some(MissReason::Absent) => s.c.misses_absent += 1,
                        Some(MissReason::NoRoom) => s.c.misses_no_room += 1,
                        None => {}
                    }
                    answer.stop = stop;
                    answer.reason = reason;
                    return Ok(answer);
                }
            }
            first += m;
        }
        Ok(answer)
    }

    /// Answers `key`, which the primary tier does not have, from the
    /// secondary tiers for active request `rid` (starting a promotion from
    /// the first that has it).
    fn lookup_secondary(
        &mut self,
        rid: RequestId,
        key: &Key,
    ) -> (LookupResult, Option<MissReason>) {
        const ABSENT: (LookupResult, Option<MissReason>) =
            (LookupResult::Miss, Some(MissReason::Absent));
        if self.tiers.is_empty() {
            return ABSENT;
        }
        if self.held {
            self.c.held_misses += 1;
            return ABSENT;
        }
        let Some(info) = self.reqs.get(&rid).map(|st| st.info.clone()) else {
            return ABSENT;
        };
        let mut any_retry = false;
        for t in 0..self.tiers.len() {
            let entry = &mut self.tiers[t];
            if !filter_allows(&info.filter, entry.medium, entry.locality) {
                continue;
            }
            entry.c.lookups += 1;
            match entry.tier.lookup(key, &info) {
                TierLookup::Hit => {
                    entry.c.hits += 1;
                    if !self.start_promotion(t, rid, key) {
                        return (LookupResult::Miss, Some(MissReason::NoRoom));
                    }
                    self.tiers[t].c.promotions_started += 1;
                    self.note_promotion_from(t);
                    let answer = match self.opts.promotion_answer {
                        PromotionAnswer::Retry => LookupResult::Retry,
                        PromotionAnswer::HitPending => LookupResult::HitPending,
                    };
                    return (answer, None);
                }
                TierLookup::Retry => {
                    entry.c.retries += 1;
                    any_retry = true;
                }
                TierLookup::Miss => {}
            }
        }
        if any_retry {
            (LookupResult::Retry, None)
        } else {
            ABSENT
        }
    }
}
