//! Descriptions of the redis tier's failures for the manager's error log
//! (and so for the log callback), through `SecondaryTier::take_errors`,
//! the way the fs tier reports its own.
//!
//! Failures repeat while a server is down or refuses the tier's
//! credentials, so each kind (a cause, or failing to connect) is described
//! at most once per [`REPORT_INTERVAL`]; the next description says how many
//! were left out meanwhile.  The counters keep every failure.

use std::time::{Duration, Instant};

use super::outcome::Cause;

/// Least time between two descriptions of one kind of failure.
pub(super) const REPORT_INTERVAL: Duration = Duration::from_secs(1);

/// Most descriptions kept between two `take_errors` calls.
const MAX_PENDING: usize = 64;

/// Kinds: one per cause, then failing to connect.
const KINDS: usize = Cause::ALL.len() + 1;
const CONNECT: usize = Cause::ALL.len();

/// Words for a cause, in a sentence.
pub(super) fn describe(cause: Cause) -> &'static str {
    match cause {
        Cause::ServerDown => "the server could not be reached",
        Cause::Timeout => "a timeout ran out",
        Cause::ConnectionReset => "the connection broke",
        Cause::OutOfMemory => "the server is out of memory (OOM)",
        Cause::ServerError => "the server answered an error",
        Cause::Other => "a protocol or client error",
        Cause::BreakerOpen => "the circuit breaker is open",
        Cause::Cancelled => "it was cancelled",
    }
}

/// Rate-limited failure descriptions of one tier.
pub(super) struct Reporter {
    prefix: String,
    pending: Vec<String>,
    last: [Option<Instant>; KINDS],
    left_out: [u64; KINDS],
}

impl Reporter {
    /// A reporter whose descriptions start with `redis tier <name>`.
    pub(super) fn new(name: &str) -> Reporter {
        Reporter {
            prefix: format!("redis tier {name:?}"),
            pending: Vec::new(),
            last: [None; KINDS],
            left_out: [0; KINDS],
        }
    }

    fn report(&mut self, kind: usize, what: impl FnOnce() -> String) {
        let now = Instant::now();
        if self.last[kind].is_some_and(|t| now.duration_since(t) < REPORT_INTERVAL)
            || self.pending.len() >= MAX_PENDING
        {
            self.left_out[kind] += 1;
            return;
        }
        self.last[kind] = Some(now);
        let mut text = format!("{}: {}", self.prefix, what());
        let n = std::mem::take(&mut self.left_out[kind]);
        if n > 0 {
            text.push_str(&format!(" ({n} more like it since the last report)"));
        }
        self.pending.push(text);
    }

    /// A task failed with `cause`; `what` names the task ("store of 4 blocks").
    pub(super) fn failed(&mut self, what: impl FnOnce() -> String, cause: Cause) {
        self.report(cause.index(), || {
            format!("{} failed: {}", what(), describe(cause))
        });
    }

    /// Workers failed `n` more times to connect, the last time with `cause`.
    pub(super) fn connect_failed(&mut self, nodes: &str, n: u64, cause: Cause) {
        if n > 1 {
            self.left_out[CONNECT] += n - 1;
        }
        self.report(CONNECT, || {
            let hint = if cause == Cause::ServerError {
                " (the server refused AUTH or SELECT: check the user, password and db)"
            } else {
                ""
            };
            format!("connecting to {nodes} failed: {}{hint}", describe(cause))
        });
    }

    /// A message that is not rate limited (a rare state change).
    pub(super) fn note(&mut self, text: String) {
        if self.pending.len() < MAX_PENDING {
            self.pending.push(format!("{}: {text}", self.prefix));
        }
    }

    /// Moves the descriptions, oldest first, into `out`.
    pub(super) fn take(&mut self, out: &mut Vec<String>) {
        out.append(&mut self.pending);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn repeats_within_the_interval_are_counted_not_described() {
        let mut r = Reporter::new("r");
        r.failed(|| "store of 1 block".into(), Cause::Timeout);
        // The interval runs from the last description: held an hour ahead,
        // the repeats fall within it however slowly this thread runs.
        let described = r.last[Cause::Timeout.index()].expect("the first one is described");
        r.last[Cause::Timeout.index()] = Some(described + Duration::from_secs(3600));
        for _ in 0..4 {
            r.failed(|| "store of 1 block".into(), Cause::Timeout);
        }
        r.failed(|| "load of 2 blocks".into(), Cause::OutOfMemory);
        r.connect_failed("127.0.0.1:1", 3, Cause::ServerError);
        let mut out = Vec::new();
        r.take(&mut out);
        assert_eq!(out.len(), 3, "{out:?}");
        assert_eq!(
            out[0],
            "redis tier \"r\": store of 1 block failed: a timeout ran out"
        );
        assert!(out[2].contains("AUTH"), "{}", out[2]);
        assert!(out[2].ends_with("(2 more like it since the last report)"));
        assert_eq!(r.left_out[Cause::Timeout.index()], 4);
        // Once the interval has passed, the next one says how many were left out.
        r.last[Cause::Timeout.index()] = Some(Instant::now() - REPORT_INTERVAL);
        r.failed(|| "store of 1 block".into(), Cause::Timeout);
        r.take(&mut out);
        assert!(
            out[3].ends_with("(4 more like it since the last report)"),
            "{}",
            out[3]
        );
    }
}
