//! The redis tier's descriptions of failures for the manager's error log
//! (and so for the log callback), through `SecondaryTier::take_errors`:
//! the kit's [`Reporter`], each cause (and failing to connect) described
//! at most once per interval, the next description saying how many were
//! left out meanwhile.  The counters keep every failure.

use super::outcome::Cause;
use crate::tiers::kit::{Reporter, TierCause};

/// The kind of failing to connect, after one kind per cause.
const CONNECT: usize = Cause::ALL.len();

/// A reporter whose descriptions start with `redis tier "<name>"`.
pub(super) fn reporter(name: &str) -> Reporter {
    Reporter::new(format!("redis tier {name:?}"), Cause::ALL.len() + 1)
}

/// Workers failed `n` more times to connect to `nodes`, the last time
/// with `cause`.
pub(super) fn connect_failed(r: &mut Reporter, nodes: &str, n: u64, cause: Cause) {
    if n > 1 {
        r.left_out(CONNECT, n - 1);
    }
    r.limited(CONNECT, || {
        let hint = if cause == Cause::ServerError {
            " (the server refused AUTH or SELECT: check the user, password and db)"
        } else {
            ""
        };
        format!(
            "connecting to {nodes} failed: {}",
            TierCause::describe(cause)
        ) + hint
    });
}

#[cfg(test)]
mod tests {
    use std::time::{Duration, Instant};

    use super::*;
    use crate::tiers::kit::REPORT_INTERVAL;

    #[test]
    fn repeats_within_the_interval_are_counted_not_described() {
        let mut r = reporter("r");
        r.failed(|| "store of 1 block".into(), Cause::Timeout);
        // The interval runs from the last description: held an hour ahead,
        // the repeats fall within it however slowly this thread runs.
        let t = Cause::Timeout.index();
        let described = r.last_described(t).expect("the first one is described");
        r.described_at(t, described + Duration::from_secs(3600));
        for _ in 0..4 {
            r.failed(|| "store of 1 block".into(), Cause::Timeout);
        }
        r.failed(|| "load of 2 blocks".into(), Cause::OutOfMemory);
        connect_failed(&mut r, "127.0.0.1:1", 3, Cause::ServerError);
        let mut out = Vec::new();
        r.take(&mut out);
        assert_eq!(out.len(), 3, "{out:?}");
        assert_eq!(
            out[0],
            "redis tier \"r\": store of 1 block failed: a timeout ran out"
        );
        assert!(out[2].contains("AUTH"), "{}", out[2]);
        assert!(out[2].ends_with("(2 more like it since the last report)"));
        // Once the interval has passed, the next one says how many were left out.
        r.described_at(t, Instant::now() - REPORT_INTERVAL);
        r.failed(|| "store of 1 block".into(), Cause::Timeout);
        r.take(&mut out);
        assert!(
            out[3].ends_with("(4 more like it since the last report)"),
            "{}",
            out[3]
        );
    }
}
