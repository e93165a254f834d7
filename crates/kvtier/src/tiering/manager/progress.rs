//! Progress (kvtier's rule, beyond vLLM 0.33): what keeps every request moving
//! while its blocks come back from the secondary tiers.
//!
//! A request *waits* from the first lookup that leaves some of its keys on
//! their way (write pending, promotion started, or a tier asked to be
//! asked again) until a lookup finds nothing more on its way, its
//! `prepare_load`, its finish, or the wait bound.  While it waits:
//!
//! - **Holds** (`holds.rs`).  Blocks kept for it are *held*: pinned in
//!   the primary tier, so no eviction takes them.  A batched lookup that
//!   starts promotions holds the hits of the prefix before it starts them
//!   (so its own promotions never evict what it reported), and a block
//!   promoted for a waiting request is held when it arrives.  Holds end at
//!   the request's next `prepare_load` (whose pins take over the blocks it
//!   loads; the rest go back to the policy), its finish, a reset, or the
//!   bound counted from the first of them (whether or not the request
//!   still waits).  Without holds, other requests' promotions and stores
//!   evict the blocks a waiting request was promised, which then promotes
//!   them again: a livelock under a small primary tier.
//! - **No piecemeal promotions.**  A batched lookup promotes, in key
//!   order, as many of the prefix's missing blocks as the primary tier can
//!   take at once, and its prefix ends at the first it cannot take (MISS,
//!   no room).  While the request waits, its later lookups end its prefix
//!   there too: it never holds part of a prefix while waiting for room for
//!   the rest.
//! - **The bound.**  After `wait_steps` steps (`schedule_end` calls) or
//!   `wait_ms` milliseconds of waiting, the request's holds are released
//!   and its next lookup answers the first key not ready MISS
//!   ([`MissReason::TimedOut`](super::MissReason::TimedOut)): the engine
//!   loads what is ready and recomputes the rest.
//!
//! So every request's wait ends within the bound: its own promotions can
//! only run out of room (its prefix then ends), never be taken back, and
//! a tier that never answers is cut off by the bound; and no block stays
//! held past the bound.  With [`ProgressOptions::vllm`] (no holds, no
//! bound), [`Manager::lookup_per_key`](super::Manager::lookup_per_key)
//! follows vLLM 0.33 exactly; [`Manager::lookup_prefix`](super::Manager::lookup_prefix)
//! still holds its hits for the length of the call.

use std::time::{Duration, Instant};

use super::PrimaryBackend;
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
    /// A request waits at most this many steps (`schedule_end` calls);
    /// then its lookups answer MISS for what is not ready.  0: no bound in
    /// steps.  Default 16.
    pub wait_steps: u32,
    /// A request waits at most this many milliseconds.  0 (default): no
    /// bound in time.
    pub wait_ms: u64,
    /// Hold every lookup's hits for its request too, not only those of a
    /// waiting request, until its `prepare_load`, its finish or the bound
    /// (default false).  For a manager several engines share (`kvtierd`
    /// turns it on): another engine's store could otherwise evict a block
    /// between a request's lookup and its load.
    pub hold_hits: bool,
}

impl ProgressOptions {
    /// vLLM 0.33's behaviour: nothing held, no bound.
    pub const fn vllm() -> ProgressOptions {
        ProgressOptions {
            hold: false,
            wait_steps: 0,
            wait_ms: 0,
            hold_hits: false,
        }
    }

    /// Whether waits are bounded.
    pub(super) fn bounded(&self) -> bool {
        self.wait_steps > 0 || self.wait_ms > 0
    }
}

impl Default for ProgressOptions {
    fn default() -> Self {
        ProgressOptions {
            hold: true,
            wait_steps: 16,
            wait_ms: 0,
            hold_hits: false,
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
    if !beyond(bound, step, w.since_step, w.since) {
        return Passed::No;
    }
    w.expired = true;
    Passed::JustNow
}

/// Whether something that began at step `since_step`, at `since`, is past
/// `bound` at step `step`.
#[inline]
pub(super) fn beyond(bound: ProgressOptions, step: u64, since_step: u64, since: Instant) -> bool {
    let by_steps = bound.wait_steps > 0 && step - since_step >= u64::from(bound.wait_steps);
    let by_time = bound.wait_ms > 0 && since.elapsed() >= Duration::from_millis(bound.wait_ms);
    by_steps || by_time
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
    /// The step and time of the first of its holds still in place: the
    /// bound counts from there.
    pub(super) holds_since: Option<(u64, Instant)>,
    /// Whether it is in the list checked at each step's end.
    pub(super) tracked: bool,
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

impl<P: PrimaryBackend> State<P> {
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
            if self.opts.progress.bounded() {
                self.track(rid);
            }
        }
    }

    /// Puts `rid` on the list checked at each step's end, once.
    pub(super) fn track(&mut self, rid: RequestId) {
        let Some(st) = self.reqs.get_mut(&rid) else {
            return;
        };
        if st.progress.tracked {
            return;
        }
        if self.tracked_reqs.try_reserve(1).is_err() {
            self.c.internal_errors += 1;
            self.log(format!(
                "out of memory: request {rid}'s wait is not bounded"
            ));
            return;
        }
        st.progress.tracked = true;
        self.tracked_reqs.push(rid);
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

    /// At a step's end: expires the waits, and releases the holds, whose
    /// bound passed; forgets requests with neither a wait nor holds.
    pub(super) fn expire_waits(&mut self) {
        let (bound, step) = (self.opts.progress, self.steps);
        let mut ids = std::mem::take(&mut self.tracked_reqs);
        ids.retain(|&rid| {
            self.wait_expired(rid);
            let Some(st) = self.reqs.get_mut(&rid) else {
                return false;
            };
            let p = &mut st.progress;
            let holds_due = p
                .holds_since
                .is_some_and(|(since_step, since)| beyond(bound, step, since_step, since));
            if holds_due {
                self.release_holds(rid);
            }
            let Some(st) = self.reqs.get_mut(&rid) else {
                return false;
            };
            let p = &mut st.progress;
            p.tracked = p.waiting() || p.holds_since.is_some();
            p.tracked
        });
        self.tracked_reqs = ids;
    }

    /// Forgets every request's holds, waits and promotions (the primary
    /// tier was reset: its pins are gone); the waits count what they
    /// lasted.
    pub(super) fn forget_progress(&mut self) {
        let step = self.steps;
        for st in self.reqs.values_mut() {
            st.progress.held.clear();
            st.progress.holds_since = None;
            st.progress.tracked = false;
            if let Some(w) = st.progress.wait.take() {
                // A wait the reset cut short still counts what it lasted.
                st.tally.on_wait_ended(w.running(step));
            }
            st.progress.promoting = 0;
        }
        self.tracked_reqs.clear();
    }
}
