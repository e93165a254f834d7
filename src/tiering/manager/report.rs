//! What the manager records per request, and the manager-wide histogram
//! it feeds: the time a request waits for its promotions, from the first
//! lookup that started one to the lookup that found the blocks ready.
//!
//! Recording allocates nothing and takes no lock beyond the manager's own,
//! which every call already holds.

use std::time::{Duration, Instant};

use super::{LookupAnswer, LookupResult, RequestId, State};
use crate::histogram::{Histogram, LATENCY_BUCKETS, LATENCY_SECONDS_BOUNDS};
use crate::stats::Stat;

/// Name of the promotion-wait histogram among the manager's statistics.
pub const PROMOTION_WAIT_STAT: &str = "promotion_wait_seconds";

/// The manager's histograms that are not a tier's.
#[derive(Debug)]
pub(super) struct Observations {
    /// Seconds from the first lookup of a request that started a promotion
    /// to its first later lookup that stopped at a HIT or a MISS (its
    /// blocks were ready, or gone), one observation per wait.
    promotion_wait: Histogram<LATENCY_BUCKETS>,
}

impl Default for Observations {
    fn default() -> Self {
        Observations {
            promotion_wait: Histogram::new(&LATENCY_SECONDS_BOUNDS),
        }
    }
}

impl Observations {
    /// Appends the histograms to the manager's statistics.
    pub(super) fn push_stats(&self, out: &mut Vec<Stat>) {
        self.promotion_wait.push_stats(PROMOTION_WAIT_STAT, out);
    }
}

/// What happened to one request so far.
#[derive(Debug, Default)]
pub(super) struct RequestTally {
    /// When the wait for promotions began (the first lookup that started
    /// one), while it lasts.
    wait_since: Option<Instant>,
    /// Time spent waiting for promotions, waits that ended summed.
    waited: Duration,
}

impl State {
    /// Notes a lookup call of `request` that answered `answer` and started
    /// a promotion (`started`): a wait begins at the first such call and
    /// ends at the first later call that stops at a HIT or a MISS.
    #[inline]
    pub(super) fn note_lookup(&mut self, request: RequestId, answer: &LookupAnswer, started: bool) {
        let settled = matches!(answer.stop, LookupResult::Hit | LookupResult::Miss);
        if !started && !settled {
            return;
        }
        let Some(st) = self.reqs.get_mut(&request) else {
            return;
        };
        let t = &mut st.tally;
        if started {
            t.wait_since.get_or_insert_with(Instant::now);
        } else if let Some(since) = t.wait_since.take() {
            let waited = since.elapsed();
            t.waited += waited;
            self.obs.promotion_wait.record(waited.as_secs_f64());
        }
    }
}
