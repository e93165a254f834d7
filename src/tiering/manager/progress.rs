//! Progress (kvtier's rule, beyond vLLM 0.33): what keeps every request moving
//! while its blocks come back from the secondary tiers.
//!
//! A request *waits* from the first lookup that leaves some of its keys on
//! their way (write pending, promotion started, or a tier asked to be
//! asked again) until a lookup finds nothing more on its way, its
//! `prepare_load`, its finish, or the wait bound.  While it waits:
//!
//! - **Holds.**  Blocks kept for it are *held*: pinned in the primary
//!   tier, so no eviction takes them.  A batched lookup that starts
//!   promotions holds the hits of the prefix before it starts them (so its
//!   own promotions never evict what it reported), and a block promoted
//!   for a waiting request is held when it arrives.  Holds end at the
//!   request's next `prepare_load` (whose pins take over the blocks it
//!   loads; the rest go back to the policy), its finish, the bound, or a
//!   reset.  Without holds, other requests' promotions and stores evict
//!   the blocks a waiting request was promised, which then promotes them
//!   again: a livelock under a small primary tier.
//! - **No piecemeal promotions.**  A batched lookup promotes, in key
//!   order, as many of the prefix's missing blocks as the primary tier can
//!   take at once, and its prefix ends at the first it cannot take (MISS,
//!   no room).  While the request waits, its later lookups end its prefix
//!   there too: it never holds part of a prefix while waiting for room for
//!   the rest.
//! - **The bound.**  After `wait_steps` steps (`on_schedule_end` calls) or
//!   `wait_ms` milliseconds of waiting, the request's holds are released
//!   and its next lookup answers the first key not ready MISS
//!   ([`MissReason::TimedOut`](super::MissReason::TimedOut)): the engine
//!   loads what is ready and recomputes the rest.
//!
//! So every request's wait ends within the bound: its own promotions can
//! only run out of room (its prefix then ends), never be taken back, and
//! a tier that never answers is cut off by the bound.  With
//! [`ProgressOptions::vllm`] (no holds, no bound) the manager follows
//! vLLM 0.33 exactly.

use std::time::{Duration, Instant};

use super::{FastMap, Key, RequestId, State};

/// How the manager guarantees that waiting requests progress: see
/// [`Manager::lookup_prefix`](super::Manager::lookup_prefix) and the
/// progress rule in `docs/design.md`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ProgressOptions {
    /// Hold the blocks a waiting request was promised (its lookup's hits
    /// and the blocks promoted for it) until it loads them, finishes, or
    /// the bound passes.  Default true.
    pub hold: bool,
    /// A request waits at most this many steps (`on_schedule_end` calls);
    /// then its lookups answer MISS for what is not ready.  0: no bound in
    /// steps.  Default 16.
    pub wait_steps: u32,
    /// A request waits at most this many milliseconds.  0 (default): no
    /// bound in time.
    pub wait_ms: u64,
}

impl ProgressOptions {
    /// vLLM 0.33's behaviour: nothing held, no bound.
    pub const fn vllm() -> ProgressOptions {
        ProgressOptions {
            hold: false,
            wait_steps: 0,
            wait_ms: 0,
        }
    }

    /// Whether waits are bounded.
    fn bounded(&self) -> bool {
        self.wait_steps > 0 || self.wait_ms > 0
    }
}

impl Default for ProgressOptions {
    fn default() -> Self {
        ProgressOptions {
            hold: true,
            wait_steps: 16,
            wait_ms: 0,
        }
    }
}

/// A request's wait for keys on their way.
#[derive(Clone, Copy, Debug)]
pub(super) struct Wait {
    /// The step count when it began.
    since_step: u64,
    /// When it began.
    since: Instant,
    /// Its prefixes end here (a lookup met no room here): keys from this
    /// one on are answered MISS, no room, without promoting them.
    pub(super) cap: usize,
    /// The bound passed: the holds are released, and the next lookup
    /// answers MISS for the first key not ready.
    pub(super) expired: bool,
}

/// Whether a wait passed its bound.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Passed {
    No,
    /// At an earlier check.
    Before,
    /// At this check: it is marked expired now.
    JustNow,
}

/// Whether `wait` passed `bound` at step `step`, marking it expired when it
/// passed just now.
#[inline]
fn bound_passed(bound: ProgressOptions, step: u64, wait: Option<&mut Wait>) -> Passed {
    let Some(w) = wait else {
        return Passed::No;
    };
    if w.expired {
        return Passed::Before;
    }
    let by_steps = bound.wait_steps > 0 && step - w.since_step >= u64::from(bound.wait_steps);
    let by_time = bound.wait_ms > 0 && w.since.elapsed() >= Duration::from_millis(bound.wait_ms);
    if !(by_steps || by_time) {
        return Passed::No;
    }
    w.expired = true;
    Passed::JustNow
}

/// A block held for a request, or promoted for it.
#[derive(Clone, Copy, Debug)]
pub(super) struct Held {
    /// Its primary slot while pinned (a hold); `None`: a promotion that
    /// arrived for the request, remembered without a hold, for the
    /// served counts.
    pub(super) slot: Option<u32>,
    /// Where it came from: 0 the primary tier (a hit), `t` secondary tier
    /// `t` (a promotion).
    pub(super) from: usize,
}

/// A request's progress state.
#[derive(Debug, Default)]
pub(super) struct RequestProgress {
    pub(super) wait: Option<Wait>,
    /// Blocks held or promoted for it, by key.
    pub(super) held: FastMap<Key, Held>,
    /// Keys of its promotions staged or in flight.
    pub(super) promoting: u64,
}

impl Wait {
    /// What it came to so far, at step `step`.
    pub(super) fn running(&self, step: u64) -> WaitEnded {
        WaitEnded {
            time: self.since.elapsed(),
            steps: step - self.since_step,
        }
    }
}

/// What a request's wait came to when it ended.
#[derive(Clone, Copy, Debug, Default)]
pub(super) struct WaitEnded {
    pub(super) time: Duration,
    pub(super) steps: u64,
}

impl RequestProgress {
    /// Whether it waits and its bound has not passed.
    #[inline]
    pub(super) fn waiting(&self) -> bool {
        self.wait.is_some_and(|w| !w.expired)
    }

    /// Where its prefixes end (keys from there on are answered MISS, no
    /// room), or `usize::MAX`.
    #[inline]
    pub(super) fn cap(&self) -> usize {
        self.wait.map_or(usize::MAX, |w| w.cap)
    }
}

impl State {
    /// Begins `rid`'s wait at this step, unless it waits already.
    pub(super) fn begin_wait(&mut self, rid: RequestId) {
        let step = self.steps;
        let Some(st) = self.reqs.get_mut(&rid) else {
            return;
        };
        if st.progress.wait.is_none() {
            st.progress.wait = Some(Wait {
                since_step: step,
                since: Instant::now(),
                cap: usize::MAX,
                expired: false,
            });
            if self.opts.progress.bounded() || self.opts.progress.hold {
                self.waiting_reqs.push(rid);
            }
        }
    }

    /// Ends `rid`'s wait, if it waits: what it lasted, for the counters.
    pub(super) fn end_wait(&mut self, rid: RequestId) -> Option<WaitEnded> {
        let step = self.steps;
        let st = self.reqs.get_mut(&rid)?;
        let ended = st.progress.wait.take()?.running(step);
        st.tally.on_wait_ended(ended);
        self.obs.record_wait(ended);
        Some(ended)
    }

    /// Whether `rid`'s wait passed its bound; if it passed just now, its
    /// holds are released and the timeout counted.
    pub(super) fn wait_expired(&mut self, rid: RequestId) -> bool {
        let (bound, step) = (self.opts.progress, self.steps);
        let passed = match self.reqs.get_mut(&rid) {
            Some(st) => bound_passed(bound, step, st.progress.wait.as_mut()),
            None => Passed::No,
        };
        self.on_passed(rid, passed)
    }

    /// `rid`, if it names an active request (else the error of
    /// [`State::active`](super::State)), and whether it waits: a lookup
    /// checks the bound ([`State::wait_expired`]) only then.
    #[inline]
    pub(super) fn active_waits(&self, rid: RequestId) -> crate::Result<bool> {
        match self.reqs.get(&rid) {
            Some(st) if !st.finished => Ok(st.progress.wait.is_some()),
            _ => Err(self.unknown_request(rid)),
        }
    }

    /// Whether a wait passed its bound; if it did just now, counts the
    /// timeout and releases `rid`'s holds.
    #[inline]
    fn on_passed(&mut self, rid: RequestId, passed: Passed) -> bool {
        match passed {
            Passed::No => false,
            Passed::Before => true,
            Passed::JustNow => {
                self.c.wait_timeouts += 1;
                self.release_holds(rid);
                true
            }
        }
    }

    /// At a step's end: releases the holds of waits whose bound passed,
    /// and forgets requests that no longer wait.
    pub(super) fn expire_waits(&mut self) {
        let mut ids = std::mem::take(&mut self.waiting_reqs);
        ids.retain(|&rid| {
            let expired = self.wait_expired(rid);
            !expired
                && self
                    .reqs
                    .get(&rid)
                    .is_some_and(|st| st.progress.wait.is_some())
        });
        self.waiting_reqs = ids;
    }

    /// Holds `keys` (ready in the primary tier) for `rid`, which come
    /// from tier `from` (0: hits): pins each once per request (a key it
    /// holds already is left as it is).  False if the primary tier did
    /// not pin them (nothing changed then).
    pub(super) fn hold(&mut self, rid: RequestId, keys: &[Key], from: usize) -> bool {
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
        let held = self.reqs.get_mut(&rid).map(|st| &mut st.progress.held);
        match held {
            Some(held) => {
                for (key, &slot) in keys.iter().zip(&slots) {
                    let h = held.entry(*key).or_insert(Held { slot: None, from });
                    if h.slot.is_some() {
                        extra.push(*key);
                        extra_slots.push(slot);
                    } else {
                        h.slot = Some(slot);
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
        true
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
        if st.progress.held.is_empty() {
            return;
        }
        let mut keys = std::mem::take(&mut self.keys_b);
        let mut slots = std::mem::take(&mut self.slots_c);
        keys.clear();
        slots.clear();
        st.progress.held.retain(|key, h| {
            if let Some(slot) = h.slot.take() {
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
        for key in keys {
            if let Some(h) = st.progress.held.get_mut(key)
                && let Some(slot) = h.slot.take()
            {
                unpin.push(*key);
                slots.push(slot);
                if h.from == 0 {
                    st.progress.held.remove(key);
                }
            }
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

    /// Unpins blocks this module pinned; a failure is an internal error,
    /// logged and counted.
    fn unpin_quietly(&mut self, keys: &[Key], slots: &[u32]) {
        if keys.is_empty() {
            return;
        }
        if let Err(e) = self.primary.unpin_for_transfer_in(keys, slots) {
            self.c.internal_errors += 1;
            self.log(format!("internal error: releasing held blocks failed: {e}"));
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

    /// Forgets every request's holds, waits and promotions (the primary
    /// tier was reset: its pins are gone); the waits count what they
    /// lasted.
    pub(super) fn forget_progress(&mut self) {
        let step = self.steps;
        for st in self.reqs.values_mut() {
            st.progress.held.clear();
            if let Some(w) = st.progress.wait.take() {
                // A wait the reset cut short still counts what it lasted.
                st.tally.on_wait_ended(w.running(step));
            }
            st.progress.promoting = 0;
        }
        self.waiting_reqs.clear();
    }
}
