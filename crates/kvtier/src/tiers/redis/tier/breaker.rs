//! The circuit breaker, kept on the caller's side (workers only read its
//! flag): failures that count open it after `breaker_failures` in a row;
//! while open, lookups answer MISS and transfers fail at once, and after
//! each cooldown a probe goes out, whose success alone closes it.

use std::sync::atomic::Ordering;
use std::time::Instant;

use super::super::outcome::Cause;
use super::super::worker::Task;
use super::RedisTier;
use crate::tiering::TierReadiness;

/// The circuit breaker, kept on the caller's side; workers only read the flag.
#[derive(Default)]
pub(super) struct Breaker {
    consecutive: u32,
    pub(super) open_since: Option<Instant>,
    pub(super) probe_in_flight: bool,
}

impl RedisTier {
    /// Whether the circuit breaker is open (work is not being sent).
    pub fn breaker_open(&self) -> bool {
        self.breaker.open_since.is_some()
    }

    /// The tier's readiness: not ready while shut down or while the
    /// breaker is open (as the last collected outcomes left it).
    pub(super) fn readiness_now(&self) -> TierReadiness {
        if self.closed {
            return TierReadiness::NotReady("shut down".to_string());
        }
        match self.breaker.open_since {
            Some(since) => TierReadiness::NotReady(format!(
                "circuit breaker open for {:.1} s ({}); lookups answer MISS and \
                 transfers fail until a probe succeeds",
                since.elapsed().as_secs_f64(),
                self.nodes
            )),
            None => TierReadiness::Ready,
        }
    }

    pub(super) fn record_failure(&mut self, cause: Cause) {
        self.counters.failures.count(cause);
        if !cause.counts_for_breaker() {
            return;
        }
        self.breaker.consecutive = self.breaker.consecutive.saturating_add(1);
        if self.breaker.open_since.is_none() && self.breaker.consecutive >= self.breaker_failures {
            self.breaker.open_since = Some(Instant::now());
            self.shared.breaker_open.store(true, Ordering::Release);
            self.counters.breaker_opens += 1;
            self.reporter.note(|| format!(
                "circuit breaker opened after {} failures in a row; lookups answer MISS and transfers fail at once until a probe succeeds",
                self.breaker.consecutive
            ));
        }
    }

    /// A task went through.  While the breaker is open this changes
    /// nothing: the task may have been sent before the failures that opened
    /// it, and only a probe closes the breaker.
    pub(super) fn record_success(&mut self) {
        if self.breaker.open_since.is_none() {
            self.breaker.consecutive = 0;
        }
    }

    pub(super) fn close_breaker(&mut self) {
        self.breaker.consecutive = 0;
        if self.breaker.open_since.take().is_some() {
            self.shared.breaker_open.store(false, Ordering::Release);
            self.counters.breaker_closes += 1;
        }
    }

    /// Sends a probe if the breaker has been open for its cooldown.
    pub(super) fn maybe_probe(&mut self) {
        if self.closed || self.breaker.probe_in_flight {
            return;
        }
        if let Some(since) = self.breaker.open_since
            && since.elapsed() >= self.breaker_cooldown
        {
            self.breaker.probe_in_flight = true;
            self.counters.probes += 1;
            self.enqueue(Task::Probe, true);
        }
    }
}
