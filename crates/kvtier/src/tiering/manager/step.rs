//! The end of a scheduler step (staged promotions submitted, parked keys
//! retried, requests finalized), and the reset of the whole cache.

use super::PrimaryBackend;
use super::{Direction, Error, MAX_FINISHED_PER_POLL, Manager, RequestId, Result, State};

impl<P: PrimaryBackend> Manager<P> {
    /// Ends a scheduler step: polls (gated), re-arms the gate, submits the
    /// staged promotions (one load job per tier and request, in start
    /// order), retries parked cascades, finalizes requests that can be, and
    /// tells every tier.
    pub fn schedule_end(&self) -> Result<()> {
        let mut s = self.enter("schedule_end")?;
        let s = &mut *s;
        s.poll_gated(&self.queue);
        s.gate_spent = false;
        s.steps += 1;
        s.expire_waits();
        let mut ids = std::mem::take(&mut s.ids);
        ids.clear();
        let staged = std::mem::take(&mut s.staged);
        for e in staged {
            let Some(st) = s.reqs.get_mut(&e.req) else {
                continue;
            };
            st.staged -= 1;
            let info = st.info.clone();
            if st.can_finalize() {
                ids.push(e.req);
            }
            let entry = &mut s.tiers[e.tier];
            entry.c.promotion_jobs += 1;
            entry.c.promotion_blocks += e.keys.len() as u64;
            s.submit(e.tier, Direction::Load, &e.keys, &e.slots, info);
            s.recycle_staged(e.keys, e.slots);
        }
        s.retry_parked(&mut ids);
        for &rid in &ids {
            s.maybe_finalize(rid);
        }
        s.ids = ids;
        for t in &mut s.tiers {
            t.tier.on_schedule_end();
        }
        Ok(())
    }

    /// Drains every tier, collects their finished jobs, drops staged
    /// promotions, clears in-flight stores (the primary tier forgets who
    /// wrote what: later completions of those stores are counted and
    /// ignored) and parked keys, finalizes
    /// finished requests and resets the primary tier, forgetting every
    /// pin set (see [`Manager::pin_set`]).  With secondary
    /// tiers, promotions are then held until [`Manager::reset_flushed`].
    /// If a tier fails to drain, nothing is reset and the error says which.
    pub fn reset_cache(&self) -> Result<()> {
        let mut s = self.enter("reset_cache")?;
        let s = &mut *s;
        for t in &mut s.tiers {
            if let Err(e) = t.tier.drain() {
                return Err(Error::Tier {
                    tier: t.name.to_string(),
                    message: format!("drain failed, the cache was not reset: {e}"),
                });
            }
        }
        // Every drained job is reported now; a tier holding more than one
        // poll takes gets further polls, as many as its jobs need.
        let mut rounds = s.jobs.len() / MAX_FINISHED_PER_POLL + 1;
        while s.poll_now(&self.queue) && rounds > 0 {
            rounds -= 1;
        }
        if !s.jobs.is_empty() {
            let mut orphans: Vec<(usize, u64)> = s
                .jobs
                .iter()
                .filter(|(_, j)| j.epoch == s.epoch)
                .map(|(id, j)| (j.tier, id.0))
                .collect();
            orphans.sort_unstable();
            for (t, id) in orphans {
                let name = s.tiers[t].name.clone();
                s.tiers[t].c.tier_bugs += 1;
                s.tier_bug(
                    &name,
                    format!(
                        "job {id} was not reported after drain; its completion will be ignored"
                    ),
                );
            }
        }
        s.epoch += 1;
        for e in s.staged.drain(..) {
            if let Some(st) = s.reqs.get_mut(&e.req) {
                st.staged = 0;
            }
        }
        s.parked_reqs.clear();
        s.forget_progress();
        let mut ids = std::mem::take(&mut s.ids);
        ids.clear();
        for st in s.reqs.values_mut() {
            st.store_keys_pending = 0;
            st.parked.clear();
            st.staged = 0;
            if st.finished {
                ids.push(st.id);
            }
        }
        ids.sort_unstable();
        for &rid in &ids {
            s.maybe_finalize(rid);
        }
        s.ids = ids;
        s.primary.reset();
        s.forget_pin_sets();
        for t in &mut s.tiers {
            if let Some(d) = &mut t.detector {
                d.reset();
            }
        }
        s.gate_spent = false;
        s.held = !s.tiers.is_empty();
        s.c.resets += 1;
        Ok(())
    }

    /// Ends the promotion hold that follows `reset_cache` (late worker
    /// writes from before the reset are done).
    pub fn reset_flushed(&self) -> Result<()> {
        let mut s = self.enter("reset_flushed")?;
        s.held = false;
        Ok(())
    }
}

impl<P: PrimaryBackend> State<P> {
    pub(super) fn maybe_finalize(&mut self, rid: RequestId) {
        match self.reqs.get(&rid) {
            Some(st) if st.can_finalize() => {}
            _ => return,
        }
        let Some(st) = self.reqs.remove(&rid) else {
            return;
        };
        let _ = self.names.remove(&st.info.name);
        for t in &mut self.tiers {
            t.tier.on_request_finished(&st.info);
        }
        self.count_finished(&st);
        self.report_finished(&st);
    }
}
