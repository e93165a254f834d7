//! What the manager records per request, and what it feeds: the
//! manager-wide histogram of the time requests wait for promotions (from
//! the first lookup that started one to the lookup that found the blocks
//! ready), and, when an engine asks for them, one [`RequestReport`] per
//! finished request (keys looked up, hits per tier, blocks loaded, stored,
//! promoted, failed, time waiting for promotions), for a JSONL trace or
//! OpenTelemetry spans.
//!
//! Recording allocates nothing and takes no lock beyond the manager's own,
//! which every call already holds.  A lookup that neither started a
//! promotion nor ended a wait touches no request state unless reports are
//! on.

use std::time::{Duration, Instant};

use super::{Error, Job, LookupAnswer, LookupResult, Manager, ReqState, RequestId, Result, State};
use crate::histogram::{Histogram, LATENCY_BUCKETS, LATENCY_SECONDS_BOUNDS};
use crate::primary::CompleteStoreReport;
use crate::stats::Stat;

/// Name of the promotion-wait histogram among the manager's statistics.
pub const PROMOTION_WAIT_STAT: &str = "promotion_wait_seconds";

/// What happened to one finished request, handed to the listener of
/// [`Manager::set_request_report_listener`] once, when the manager lets
/// the request go (after `on_request_finished`, once no store of it is in
/// flight and none of its promotions is staged).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RequestReport<'a> {
    /// The request's handle.
    pub id: RequestId,
    /// The request's name.
    pub name: &'a str,
    /// Keys its lookups looked at (a batched lookup counts the keys up to
    /// the one it stopped at).
    pub lookups: u64,
    /// Keys its lookups found, by tier number: `[0]` in the primary tier
    /// (answered HIT), `[t]` in secondary tier `t` (a promotion started).
    /// One entry per tier, the primary tier's included.
    pub tier_hits: &'a [u64],
    /// Keys its `prepare_load` calls pinned for loads to the GPU.
    pub loaded: u64,
    /// Keys its stores made ready in the primary tier.
    pub stored: u64,
    /// Keys promoted for it that arrived in the primary tier.
    pub promoted: u64,
    /// Keys of its stores that failed (dropped) and of its promotions
    /// that failed.
    pub failed: u64,
    /// Time it waited for promotions: each wait runs from a lookup that
    /// started a promotion to its first later lookup that stopped at a
    /// HIT or a MISS; a wait still running when it finished counts up to
    /// then.
    pub promotion_wait: Duration,
}

/// Receives the report of each finished request, on the thread of the
/// manager call that let the request go, with the manager's lock held: it
/// must not call the manager (such calls fail with
/// [`crate::Error::Reentrant`]) and should return quickly.
pub type RequestReportListener = Box<dyn FnMut(&RequestReport<'_>) + Send>;

/// The manager's histograms that are not a tier's, and the report listener.
pub(super) struct Observations {
    /// Seconds from the first lookup of a request that started a promotion
    /// to its first later lookup that stopped at a HIT or a MISS, one
    /// observation per wait.
    promotion_wait: Histogram<LATENCY_BUCKETS>,
    listener: Option<RequestReportListener>,
    /// The tier (number) the last promotion a lookup started came from.
    promoted_from: usize,
    /// The hits per tier of the report being delivered (reused).
    hits: Vec<u64>,
}

impl Default for Observations {
    fn default() -> Self {
        Observations {
            promotion_wait: Histogram::new(&LATENCY_SECONDS_BOUNDS),
            listener: None,
            promoted_from: 0,
            hits: Vec::new(),
        }
    }
}

impl std::fmt::Debug for Observations {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Observations")
            .field("promotion_wait", &self.promotion_wait)
            .field("reporting", &self.listener.is_some())
            .finish()
    }
}

impl Observations {
    /// Appends the histograms to the manager's statistics.
    pub(super) fn push_stats(&self, out: &mut Vec<Stat>) {
        self.promotion_wait.push_stats(PROMOTION_WAIT_STAT, out);
    }

    /// Whether requests are tallied for reports.
    #[inline]
    fn reporting(&self) -> bool {
        self.listener.is_some()
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
    lookups: u64,
    primary_hits: u64,
    /// Promotions started per secondary tier (`[t - 1]` for tier `t`),
    /// grown on the first.
    promotions: Vec<u64>,
    loaded: u64,
    stored: u64,
    promoted: u64,
    failed: u64,
}

impl RequestTally {
    /// Whether a wait for promotions is running.
    #[inline]
    pub(super) fn waiting(&self) -> bool {
        self.wait_since.is_some()
    }

    /// Counts a store completion of the request.
    #[inline]
    pub(super) fn on_store(&mut self, report: &CompleteStoreReport) {
        self.stored += report.ready as u64;
        self.failed += report.dropped as u64;
    }
}

impl Manager {
    /// Installs `listener` to receive a [`RequestReport`] for each request
    /// the manager lets go from now on, or removes it (`None`).  Counting
    /// per request starts with the listener: a request already running
    /// reports only what happened since.  The promotion-wait histogram is
    /// kept either way.
    pub fn set_request_report_listener(
        &self,
        listener: Option<RequestReportListener>,
    ) -> Result<()> {
        let mut s = self.enter("set_request_report_listener")?;
        s.obs.listener = listener;
        Ok(())
    }
}

impl State {
    /// Whether `id` names a started request that is not finished (else
    /// [`Error::UnknownRequest`], as [`State::active`]), and if so whether
    /// it is waiting for promotions.
    #[inline]
    pub(super) fn active_waiting(&self, id: RequestId) -> Result<bool> {
        match self.reqs.get(&id) {
            Some(st) if !st.finished => Ok(st.tally.waiting()),
            _ => Err(Error::UnknownRequest(id.to_string())),
        }
    }

    /// Notes a lookup call of `request` that answered `answer`, started a
    /// promotion (`started`: from tier `obs.promoted_from`), and found the
    /// request `waiting` for promotions before: a wait begins at the first
    /// such call and ends at the first later call that stops at a HIT or
    /// a MISS.
    #[inline]
    pub(super) fn note_lookup(
        &mut self,
        request: RequestId,
        answer: &LookupAnswer,
        started: bool,
        waiting: bool,
    ) {
        let settled = matches!(answer.stop, LookupResult::Hit | LookupResult::Miss);
        let reporting = self.obs.reporting();
        if !(started || reporting || settled && waiting) {
            return;
        }
        let Some(st) = self.reqs.get_mut(&request) else {
            return;
        };
        let t = &mut st.tally;
        if reporting {
            t.lookups += answer.looked_up() as u64;
            t.primary_hits += answer.hits as u64;
            if started {
                let i = self.obs.promoted_from.saturating_sub(1);
                if t.promotions.len() <= i {
                    t.promotions.resize(i + 1, 0);
                }
                t.promotions[i] += 1;
            }
        }
        if started {
            t.wait_since.get_or_insert_with(Instant::now);
        } else if settled && let Some(since) = t.wait_since.take() {
            let waited = since.elapsed();
            t.waited += waited;
            self.obs.promotion_wait.record(waited.as_secs_f64());
        }
    }

    /// Notes that a lookup started a promotion from secondary tier `t`
    /// (internal index).
    #[inline]
    pub(super) fn note_promotion_from(&mut self, t: usize) {
        self.obs.promoted_from = t + 1;
    }

    /// Counts `keys` pinned for a load to the GPU by `request`.
    pub(super) fn note_loaded(&mut self, request: RequestId, keys: usize) {
        if self.obs.reporting()
            && let Some(st) = self.reqs.get_mut(&request)
        {
            st.tally.loaded += keys as u64;
        }
    }

    /// Counts the keys of finished promotion `job` that arrived
    /// (`arrived`) and that did not, for the request it was started for
    /// (if that request is still there).
    pub(super) fn note_promotion_done(&mut self, job: &Job, arrived: usize) {
        if !self.obs.reporting() {
            return;
        }
        let Ok(id) = self.names.get(&job.request.name) else {
            return;
        };
        if let Some(st) = self.reqs.get_mut(&id)
            && std::sync::Arc::ptr_eq(&st.info, &job.request)
        {
            st.tally.promoted += arrived as u64;
            st.tally.failed += (job.keys.len() - arrived.min(job.keys.len())) as u64;
        }
    }

    /// Hands the report of `st`, which the manager just let go, to the
    /// listener.
    pub(super) fn report_finished(&mut self, st: &ReqState) {
        let Some(listener) = self.obs.listener.as_mut() else {
            return;
        };
        let t = &st.tally;
        let hits = &mut self.obs.hits;
        hits.clear();
        hits.push(t.primary_hits);
        hits.extend((0..self.tiers.len()).map(|i| t.promotions.get(i).copied().unwrap_or(0)));
        let report = RequestReport {
            id: st.id,
            name: &st.info.name,
            lookups: t.lookups,
            tier_hits: hits,
            loaded: t.loaded,
            stored: t.stored,
            promoted: t.promoted,
            failed: t.failed,
            promotion_wait: t.waited + t.wait_since.map_or(Duration::ZERO, |s| s.elapsed()),
        };
        listener(&report);
    }
}
