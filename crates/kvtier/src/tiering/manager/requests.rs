//! A request's calls, from its start to its finish: start, loads to the
//! GPU, positions, touches, stores into the primary tier and their
//! completion (which cascades the stored keys), and the finish.  The rules
//! behind the stores and cascades are in `cascade.rs`; the waits and holds
//! in `progress.rs` and `holds.rs`.

use std::sync::Arc;

use super::PrimaryBackend;
use super::{
    CompleteStoreReport, Error, Key, Manager, OffloadPolicy, ReqState, Request, RequestId,
    RequestInfo, RequestParams, Result, StartedRequest, StoreOutcome, StorePlan, progress, report,
};
use crate::fallible;
use crate::key::{KeyBatch, KeyBytes, with_keys};

impl<P: PrimaryBackend> Manager<P> {
    /// Starts request `name` (unique among active requests: a name in use
    /// is [`Error::DuplicateRequest`]): asks every tier for its offload
    /// policy and answers request-level if any tier wants it.  The
    /// returned id is the handle every later call of the request takes;
    /// the name stays the request's label for tiers, events and logs.
    pub fn request_begin(&self, name: &str, params: RequestParams) -> Result<StartedRequest> {
        let mut s = self.enter("request_begin")?;
        let s = &mut *s;
        let primary = &mut s.primary;
        let id = s.names.insert(name, |id| primary.request_begin(id))?;
        s.started = true;
        let info: Request = Arc::new(RequestInfo {
            name: name.to_string(),
            params: params.params,
            user_data: params.user_data,
            filter: params.filter,
        });
        let mut request_level = 0u64;
        for (i, t) in s.tiers.iter_mut().enumerate() {
            if t.tier.on_new_request(&info) == OffloadPolicy::RequestLevel {
                request_level |= 1 << i;
            }
        }
        s.reqs.insert(
            id,
            ReqState {
                id,
                info,
                request_level,
                store_keys_pending: 0,
                finished: false,
                parked: Vec::new(),
                staged: 0,
                tally: report::RequestTally::default(),
                progress: progress::RequestProgress::default(),
            },
        );
        let policy = if request_level != 0 {
            OffloadPolicy::RequestLevel
        } else {
            OffloadPolicy::BlockLevel
        };
        Ok(StartedRequest { id, policy })
    }

    /// Pins `keys` (all ready) for a load to the GPU; `slots_out` gets
    /// their slots in key order.
    pub fn prepare_load<'k>(
        &self,
        request: RequestId,
        keys: impl Into<KeyBatch<'k>>,
        slots_out: &mut Vec<u32>,
    ) -> Result<()> {
        let keys = keys.into();
        let mut s = self.enter("prepare_load")?;
        s.active(request)?;
        with_keys!(keys, |k| s.check_keys(k.len(), |j| &k[j]))?;
        s.poll_gated(&self.queue);
        s.primary.prepare_load(request, keys, slots_out)?;
        with_keys!(keys, |k| s
            .on_loaded(request, k.len(), |j| k[j].key_bytes()));
        Ok(())
    }

    /// [0.33] Gives keys of active `request` their token positions in the
    /// primary tier: `positions[i]` is the end-token position of the block
    /// of `keys[i]`; a later position replaces an earlier one.  Callable
    /// before the request's first call or between its calls.  See
    /// [`PrimaryTier::set_positions`](crate::primary::PrimaryTier::set_positions):
    /// with lru an active request's keys rank by position, tail evicted
    /// before head, and its finish commits them head to tail by position.
    /// Errors, nothing changed: unknown request, slices of different
    /// lengths, a key too short for its group index (KV groups on).
    pub fn set_positions<'k>(
        &self,
        request: RequestId,
        keys: impl Into<KeyBatch<'k>>,
        positions: &[u64],
    ) -> Result<()> {
        let keys = keys.into();
        let mut s = self.enter("set_positions")?;
        s.active(request)?;
        with_keys!(keys, |k| s.check_keys(k.len(), |j| &k[j]))?;
        s.primary.set_positions(request, keys, positions)
    }

    /// Marks `keys` recently used in the primary tier and every secondary
    /// tier that acts on touches ([`SecondaryTier::wants_touches`]); keys
    /// read in place are copied only for those.
    ///
    /// [`SecondaryTier::wants_touches`]: crate::tiering::SecondaryTier::wants_touches
    pub fn touch<'k>(&self, request: RequestId, keys: impl Into<KeyBatch<'k>>) -> Result<()> {
        let keys = keys.into();
        let mut s = self.enter("touch")?;
        let s = &mut *s;
        s.active(request)?;
        with_keys!(keys, |k| s.check_keys(k.len(), |j| &k[j]))?;
        let wanted = s.tiers.iter().any(|t| t.tier.wants_touches());
        let mut copies = std::mem::take(&mut s.keys_a);
        copies.clear();
        // Room first: a call that fails changes nothing.
        let room = match keys {
            KeyBatch::Refs(r) if wanted => {
                fallible::reserve(&mut copies, r.len(), "the keys of a touch")
            }
            _ => Ok(()),
        };
        let touched = room.and_then(|()| s.primary.touch(request, keys));
        if touched.is_ok() && wanted {
            let keys: &[Key] = match keys {
                KeyBatch::Keys(k) => k,
                KeyBatch::Refs(r) => {
                    for &k in r {
                        copies.push(Key::FILLER);
                        if let Some(c) = copies.last_mut() {
                            c.set(k);
                        }
                    }
                    &copies
                }
            };
            let info = &s.reqs[&request].info;
            for t in &mut s.tiers {
                if t.tier.wants_touches() {
                    t.tier.touch(keys, info);
                }
            }
        }
        s.keys_a = copies;
        touched
    }

    /// Unpins `keys` after a load to the GPU.
    ///
    /// [0.33] As in vLLM, the load may complete after the request finished
    /// (an aborted request whose load was in flight): the handle of a
    /// request that finished with keys its [`Manager::prepare_load`] pinned
    /// still pinned stays valid here, for those pins alone (any other key
    /// is an error, nothing changed), until the last is released or the
    /// cache is reset; every other call takes it as unknown.  A pin of
    /// it that other requests' unpins took is not released again (see
    /// [`PrimaryTier::complete_load`](crate::primary::PrimaryTier::complete_load)).
    pub fn complete_load<'k>(
        &self,
        request: RequestId,
        keys: impl Into<KeyBatch<'k>>,
    ) -> Result<()> {
        let keys = keys.into();
        let mut s = self.enter("complete_load")?;
        // The primary tier knows both the active requests and the finished
        // ones whose loads still hold pins.
        with_keys!(keys, |k| s.check_keys(k.len(), |j| &k[j]))?;
        s.primary.complete_load(request, keys).map_err(|e| match e {
            Error::UnknownRequest(_) => s.unknown_request(request),
            other => other,
        })
    }

    /// Plans a store of `keys` into the primary tier (always polling first),
    /// and cascades the request's already resident ready keys to the tiers
    /// that asked for request-level offload (write-pending ones are parked).
    /// The keys to store are write pending for `request`: only its own
    /// [`Manager::complete_store`] finishes them.
    pub fn prepare_store<'k>(
        &self,
        request: RequestId,
        keys: impl Into<KeyBatch<'k>>,
        plan: &mut StorePlan,
    ) -> Result<StoreOutcome> {
        let keys = keys.into();
        let mut s = self.enter("prepare_store")?;
        let s = &mut *s;
        let rid = s.active(request)?;
        with_keys!(keys, |k| s.check_keys(k.len(), |j| &k[j]))?;
        let _ = s.poll_now(&self.queue);
        s.gate_spent = true;
        let outcome = s.primary.prepare_store(rid, keys, plan)?;
        if outcome == StoreOutcome::Refused {
            s.c.store_refusals += 1;
            return Ok(outcome);
        }
        let Some(st) = s.reqs.get_mut(&rid) else {
            return Ok(outcome);
        };
        st.store_keys_pending += plan.slots.len() as u64;
        if st.request_level != 0 {
            with_keys!(keys, |k| s.cascade_resident(rid, k, plan));
        }
        Ok(outcome)
    }

    /// Finishes (part of) `request`'s store of `keys` into the primary
    /// tier: only the keys its own `prepare_store` planned, and that are
    /// still write pending for it, become ready (success) or are dropped
    /// (failure); every other key named (another request's, a promotion's,
    /// a ready or an absent key) is left alone and counted in the primary
    /// tier's stats and in the report.  On success the keys it made ready
    /// cascade to every secondary tier.  A plan may be completed in several
    /// calls: the request has a store in flight, and is not finalized,
    /// until every key it planned was completed.  The request may already
    /// be finished (not yet finalized).
    ///
    /// The report comes back as `Ok` only when every key named was acted
    /// on.  A key left alone makes the answer [`Error::KeysIgnored`],
    /// carrying the report (the rest of the keys were completed all the
    /// same; see [`CompleteStoreReport::checked`]).  A completion for a
    /// request with no store in flight (after a reset) is counted
    /// (`ignored_store_completions`) and ignored: every key it names is
    /// left alone, [`Error::KeysIgnored`] with an all-zero report (none
    /// named: the all-zero report).
    pub fn complete_store<'k>(
        &self,
        request: RequestId,
        keys: impl Into<KeyBatch<'k>>,
        success: bool,
    ) -> Result<CompleteStoreReport> {
        let keys = keys.into();
        let mut s = self.enter("complete_store")?;
        let s = &mut *s;
        let rid = request;
        if !s.reqs.contains_key(&rid) {
            return Err(s.unknown_request(rid));
        }
        with_keys!(keys, |k| s.check_keys(k.len(), |j| &k[j]))?;
        let Some(st) = s.reqs.get_mut(&rid) else {
            return Err(Error::UnknownRequest(rid.to_string()));
        };
        if st.store_keys_pending == 0 {
            s.c.ignored_store_completions += 1;
            return CompleteStoreReport::nothing_in_flight(rid, keys.len());
        }
        let info = st.info.clone();
        let report = s.complete_and_cascade(rid, keys, success, &info);
        if let Some(st) = s.reqs.get_mut(&rid) {
            let done = (report.ready + report.dropped) as u64;
            st.store_keys_pending = st.store_keys_pending.saturating_sub(done);
            st.tally.on_store(&report);
        }
        s.maybe_finalize(rid);
        report.checked(rid)
    }

    /// Marks `request` finished; its state goes (and tiers hear of it) once
    /// no store is in flight, no key is parked and no promotion is staged.
    /// Its handle is then unknown to every call (but
    /// [`Manager::complete_load`] of keys its loads still pin); its name
    /// may be reused.
    pub fn request_finished(&self, request: RequestId) -> Result<()> {
        let mut s = self.enter("request_finished")?;
        let rid = s.active(request)?;
        s.primary.request_finished(rid)?;
        s.forget_holds(rid);
        s.end_wait(rid);
        if let Some(st) = s.reqs.get_mut(&rid) {
            st.finished = true;
        }
        s.maybe_finalize(rid);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use parking_lot::Mutex;

    use crate::key::{Key, KeyRef};
    use crate::primary::{PrimaryConfig, PrimaryTier};
    use crate::request::Request;
    use crate::tiering::{
        JobRef, JobResult, Manager, ManagerOptions, RequestParams, SecondaryTier, TierLookup,
    };

    /// A tier that keeps the touches it hears.
    struct Touched {
        wants: bool,
        heard: Arc<Mutex<Vec<Vec<Key>>>>,
    }

    impl SecondaryTier for Touched {
        fn name(&self) -> &str {
            "touched"
        }
        fn lookup(&mut self, _key: &Key, _request: &Request) -> TierLookup {
            TierLookup::Miss
        }
        fn submit_store(&mut self, _job: JobRef) {}
        fn submit_load(&mut self, _job: JobRef) {}
        fn poll_finished(&mut self, _max: usize, _out: &mut Vec<JobResult>) {}
        fn touch(&mut self, keys: &[Key], _request: &Request) {
            self.heard.lock().push(keys.to_vec());
        }
        fn wants_touches(&self) -> bool {
            self.wants
        }
        fn has_pending_work(&self) -> bool {
            false
        }
        fn drain(&mut self) -> crate::Result<()> {
            Ok(())
        }
        fn shutdown(&mut self) -> crate::Result<()> {
            Ok(())
        }
    }

    #[test]
    fn a_touch_reaches_the_tiers_that_want_it_whichever_kind_of_keys_it_takes() {
        for wants in [true, false] {
            let primary = PrimaryTier::new(PrimaryConfig {
                capacity: 8,
                ..Default::default()
            })
            .unwrap();
            let m = Manager::new(primary, ManagerOptions::default());
            let heard = Arc::new(Mutex::new(Vec::new()));
            m.add_tier(Box::new(Touched {
                wants,
                heard: heard.clone(),
            }))
            .unwrap();
            let r = m.request_begin("r", RequestParams::default()).unwrap().id;
            let keys = [Key::new(b"a").unwrap(), Key::new(b"bcd").unwrap()];
            let refs = [KeyRef::new(b"a").unwrap(), KeyRef::new(b"bcd").unwrap()];
            m.touch(r, &keys).unwrap();
            m.touch(r, &refs[..]).unwrap();
            let expected = if wants {
                vec![keys.to_vec(), keys.to_vec()]
            } else {
                Vec::new()
            };
            assert_eq!(*heard.lock(), expected, "wants touches: {wants}");
        }
    }
}
