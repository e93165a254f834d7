//! The batched lookup engines use: one call looks a request's keys up,
//! starts the promotions of the whole prefix the tiers hold, and says how
//! many leading keys are ready, how many more are on their way, and where
//! the prefix ends.  A request whose blocks sit in a secondary tier is
//! served in two steps: this step starts every promotion, the next finds
//! them ready.  See `progress.rs` for the holds and the bound that make
//! every request's wait end.

use super::PrimaryBackend;
use super::lookup::{LookupKind, TierAnswer};
use super::{
    Key, LookupAnswer, LookupResult, Manager, MissReason, PrimaryLookup, RequestId, Result, State,
};
use crate::fallible;
use crate::key::{KeyBatch, KeyBytes, KeyRef, with_keys};

/// Keys whose primary-tier answers are read in one call.
const READ_TOGETHER: usize = 32;

/// What the scan found for a key after the leading hits.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Found {
    /// Ready in the primary tier.
    Hit,
    /// Being written into the primary tier.
    Pending,
    /// A tier asked to be asked again.
    Retry,
    /// Secondary tier `t` (internal index) has it: to promote.
    Promote(usize),
}

impl<P: PrimaryBackend> Manager<P> {
    /// Looks `keys` up for `request` as a prefix, in one call: the
    /// leading keys ready in the primary tier are `hits`; after them the
    /// scan goes on past keys that are not ready (as vLLM's connector does
    /// with one lookup per key) and ends at the first key no tier has,
    /// starting, in key order, the promotion of every key of the prefix
    /// that a secondary tier has and the primary tier lacks.  Before it
    /// starts them it holds the prefix's hits, so that its own promotions
    /// never evict a hit it reports.  If the primary tier cannot take a
    /// promotion, the prefix ends there (MISS, no room) and no later key
    /// is promoted.
    ///
    /// The answer: `hits` ready now; `pending` more on their way before
    /// `end`, where the prefix ends (`reason` says why, when it ends
    /// before the last key); `stop` the answer of key `hits` as
    /// [`Manager::lookup`] would give it.  An engine waits a step while
    /// `pending` > 0, then loads `hits` keys and computes the rest.  With
    /// holds on ([`ProgressOptions`](super::ProgressOptions), the default)
    /// the request waits at most the bound, its hits and arrived
    /// promotions are held for it until its `prepare_load`, and while it
    /// waits its prefix never grows past a key that found no room.  Empty
    /// `keys`: zero hits, stop HIT, nothing polled.
    pub fn lookup_prefix<'k>(
        &self,
        request: RequestId,
        keys: impl Into<KeyBatch<'k>>,
    ) -> Result<LookupAnswer> {
        with_keys!(keys.into(), |k| {
            self.lookup_of(LookupKind::Prefix, request, k.len(), |j| k[j].key_bytes())
        })
    }
}

impl<P: PrimaryBackend> State<P> {
    /// The lookup of [`Manager::lookup_prefix`], counted: each key up
    /// to the one that ends the prefix counts as looked up.
    pub(super) fn lookup_whole_prefix<'k>(
        &mut self,
        request: RequestId,
        n: usize,
        key: &impl Fn(usize) -> &'k [u8],
        expired: bool,
    ) -> Result<LookupAnswer> {
        let (hits, first) = self.leading_hits(request, n, key);
        if first == PrimaryLookup::Hit {
            return Ok(LookupAnswer::all_hits(n));
        }
        let cap = self
            .reqs
            .get(&request)
            .map_or(usize::MAX, |st| st.progress.cap());
        if expired || hits >= cap {
            let reason = if expired {
                MissReason::TimedOut
            } else {
                MissReason::NoRoom
            };
            return Ok(self.miss_after_hits(hits, reason));
        }
        let limit = n.min(cap);
        let mut found = std::mem::take(&mut self.found);
        found.clear();
        let scanned = fallible::reserve(&mut found, limit - hits, "a lookup's keys")
            .and_then(|()| self.scan(request, hits, limit, key, &mut found));
        let answer = scanned.and_then(|end| {
            let reason = if end < limit {
                // An absent key (counted by the scan).
                Some(MissReason::Absent)
            } else if limit < n {
                // The request's cap.
                self.c.lookups += 1;
                self.count_miss(MissReason::NoRoom);
                Some(MissReason::NoRoom)
            } else {
                None
            };
            self.promote_prefix(request, hits, end, reason, key, &found)
        });
        self.found = found;
        answer
    }

    /// Scans keys `hits..limit` (key `hits` is not a hit), recording what
    /// each is in `found`; returns where the prefix ends: the first key no
    /// tier has (counted as a miss), or `limit`.
    fn scan<'k>(
        &mut self,
        request: RequestId,
        hits: usize,
        limit: usize,
        key: &impl Fn(usize) -> &'k [u8],
        found: &mut Vec<(usize, Found)>,
    ) -> Result<usize> {
        let mut views = [KeyRef::FILLER; READ_TOGETHER];
        let mut answers = [PrimaryLookup::Miss; READ_TOGETHER];
        let mut i = hits;
        while i < limit {
            let m = (limit - i).min(READ_TOGETHER);
            for (j, v) in views[..m].iter_mut().enumerate() {
                *v = KeyRef::checked(key(i + j));
            }
            self.primary.lookup_batch(&views[..m], &mut answers[..m]);
            for j in 0..m {
                self.c.lookups += 1;
                let what = match answers[j] {
                    PrimaryLookup::Hit => {
                        self.c.primary_hits += 1;
                        Found::Hit
                    }
                    PrimaryLookup::HitPending => {
                        self.c.primary_hit_pending += 1;
                        Found::Pending
                    }
                    PrimaryLookup::Miss => {
                        let k = Key::from(views[j]);
                        match self.ask_tiers(request, &k) {
                            TierAnswer::Has(t) => Found::Promote(t),
                            TierAnswer::Retry => Found::Retry,
                            TierAnswer::Absent => {
                                self.count_miss(MissReason::Absent);
                                return Ok(i + j);
                            }
                        }
                    }
                };
                found.push((i + j, what));
            }
            i += m;
        }
        Ok(limit)
    }

    /// Starts the promotions `found` lists before `end` in key order,
    /// after holding the prefix's hits (keys `0..hits` and the hits in
    /// `found`); the prefix ends at the first the primary tier does not
    /// take.  Then answers: holds beyond the prefix are released, and,
    /// with holds off, all of this call's.
    fn promote_prefix<'k>(
        &mut self,
        request: RequestId,
        hits: usize,
        mut end: usize,
        mut reason: Option<MissReason>,
        key: &impl Fn(usize) -> &'k [u8],
        found: &[(usize, Found)],
    ) -> Result<LookupAnswer> {
        let promoting = found.iter().any(|(_, f)| matches!(f, Found::Promote(_)));
        let mut held_now = false;
        if promoting {
            held_now = self.hold_hits(request, hits, key, found)?;
            for &(i, what) in found {
                let Found::Promote(t) = what else {
                    continue;
                };
                let k = Key::at(key(i), i)?;
                if !self.promote(t, request, &k) {
                    end = i;
                    reason = Some(MissReason::NoRoom);
                    self.count_miss(MissReason::NoRoom);
                    break;
                }
            }
        }
        let pending = found
            .iter()
            .take_while(|&&(i, _)| i < end)
            .filter(|(_, f)| *f != Found::Hit)
            .count();
        if held_now {
            self.release_hits_beyond(request, end, key, found)?;
            if !self.opts.progress.hold {
                self.release_holds(request);
            }
        }
        let stop = match found.first() {
            _ if end == hits => LookupResult::Miss,
            Some((_, Found::Pending)) => LookupResult::HitPending,
            Some((_, Found::Retry)) => LookupResult::Retry,
            Some((_, Found::Promote(_))) => self.promotion_answer(),
            Some((_, Found::Hit)) | None => LookupResult::Hit,
        };
        Ok(LookupAnswer {
            hits,
            pending,
            end,
            stop,
            reason,
        })
    }

    /// The answer whose prefix ends right after its `hits` leading hits,
    /// for `reason`, before any scan: the key there counted as looked up
    /// and missed.
    fn miss_after_hits(&mut self, hits: usize, reason: MissReason) -> LookupAnswer {
        self.c.lookups += 1;
        self.count_miss(reason);
        LookupAnswer {
            hits,
            pending: 0,
            end: hits,
            stop: LookupResult::Miss,
            reason: Some(reason),
        }
    }

    /// Holds the prefix's hits (keys `0..hits`, and those `found` lists)
    /// for `request` before its promotions start.  False if the primary
    /// tier did not pin them (logged; the promotions start unprotected).
    fn hold_hits<'k>(
        &mut self,
        request: RequestId,
        hits: usize,
        key: &impl Fn(usize) -> &'k [u8],
        found: &[(usize, Found)],
    ) -> Result<bool> {
        let mut keys = std::mem::take(&mut self.keys_a);
        keys.clear();
        let extra = found.iter().filter(|(_, f)| *f == Found::Hit).count();
        let filled = fallible::reserve(&mut keys, hits + extra, "a lookup's hits").and_then(|()| {
            for j in 0..hits {
                keys.push(Key::at(key(j), j)?);
            }
            for &(i, what) in found {
                if what == Found::Hit {
                    keys.push(Key::at(key(i), i)?);
                }
            }
            Ok(())
        });
        let held = filled.map(|()| !keys.is_empty() && self.hold(request, &keys, 0));
        self.keys_a = keys;
        held
    }

    /// Releases the holds of `request` on hits `found` lists at or beyond
    /// `end` (the prefix ended before them).
    fn release_hits_beyond<'k>(
        &mut self,
        request: RequestId,
        end: usize,
        key: &impl Fn(usize) -> &'k [u8],
        found: &[(usize, Found)],
    ) -> Result<()> {
        if found.iter().all(|&(i, f)| i < end || f != Found::Hit) {
            return Ok(());
        }
        let mut keys = std::mem::take(&mut self.keys_a);
        keys.clear();
        for &(i, what) in found {
            if i >= end && what == Found::Hit {
                keys.push(Key::at(key(i), i)?);
            }
        }
        self.release_keys(request, &keys);
        self.keys_a = keys;
        Ok(())
    }
}
