//! A tier's failure causes: the trait its cause type implements, the
//! macro that declares a cause type from one line per cause, a counter per
//! cause, and descriptions of failures for the manager's error log.
//!
//! Failures repeat (a server down, a full disk), so the [`Reporter`] keeps
//! at most a bounded number of descriptions between two `take_errors`
//! calls, and describes each kind of failure at most once per
//! [`REPORT_INTERVAL`] when asked to rate limit; the next description of a
//! kind says how many were left out meanwhile.  The counters keep every
//! failure.

// The rate-limited descriptions (and the causes' words they use) serve the
// redis tier; without it only the fs tier's bounded form is built in.
#![cfg_attr(not(feature = "redis-tier"), allow(dead_code))]
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use crate::stats::Stat;

/// Why a tier's transfer failed: one of a fixed list of causes, each with
/// a counter (a statistic) of its own.
pub(crate) trait TierCause: Copy + Eq + std::fmt::Debug + Send + Sync + 'static {
    /// Every cause, in statistics order.
    const ALL: &'static [Self];

    /// Position in [`TierCause::ALL`].
    fn index(self) -> usize;

    /// The name of the cause's counter.
    fn stat_name(self) -> &'static str;

    /// Words for the cause, in a sentence ("... failed: <words>").
    fn describe(self) -> &'static str;
}

/// Declares a tier's failure causes from one line per cause:
///
/// ```text
/// tier_causes! {
///     /// Docs of the enum.
///     #[derive(Hash)]
///     pub enum Cause: "errors_" => FAMILY {
///         /// Docs of the cause.
///         NoSpace = "no_space", "no space";
///     }
/// }
/// ```
///
/// It writes the enum (`Clone, Copy, Debug, PartialEq, Eq` derived), its
/// `ALL` (every cause, in the order declared: the statistics order),
/// `index`, `stat_name` (the prefix, then the label: `errors_no_space`),
/// `describe` (the words) and `STAT_ROWS` (a row per cause for the tier's
/// `stat_table!`: its counter, in family `FAMILY` with the label as the
/// family's label value), with the enum's visibility (`STAT_ROWS`
/// crate-wide), and implements [`TierCause`] with them.
macro_rules! tier_causes {
    (
        $(#[$meta:meta])*
        $vis:vis enum $name:ident : $prefix:literal => $family:path {
            $(
                $(#[$cmeta:meta])*
                $cause:ident = $label:literal, $words:literal;
            )*
        }
    ) => {
        $(#[$meta])*
        #[derive(Clone, Copy, Debug, PartialEq, Eq)]
        $vis enum $name {
            $( $(#[$cmeta])* $cause, )*
        }

        impl $name {
            /// Every cause, in statistics order (the order declared).
            $vis const ALL: [$name; [$(stringify!($cause)),*].len()] = [$($name::$cause),*];

            /// Position in `ALL`.
            $vis fn index(self) -> usize {
                self as usize
            }

            /// The name of the cause's counter (a row of the tier's table).
            $vis fn stat_name(self) -> &'static str {
                match self {
                    $( $name::$cause => concat!($prefix, $label), )*
                }
            }

            /// Words for the cause, in a sentence (after "... failed: ").
            $vis fn describe(self) -> &'static str {
                match self {
                    $( $name::$cause => $words, )*
                }
            }

            /// The rows of the causes' counters in the tier's table, in
            /// `ALL`'s order.
            pub(crate) const STAT_ROWS: [$crate::stats::Entry; [$(stringify!($cause)),*].len()] = [
                $(
                    $crate::stats::Entry {
                        stat: concat!($prefix, $label),
                        family: &$family,
                        label_value: Some($label),
                        scale: 1.0,
                    },
                )*
            ];
        }

        impl $crate::tiers::kit::TierCause for $name {
            const ALL: &'static [$name] = &$name::ALL;

            fn index(self) -> usize {
                $name::index(self)
            }

            fn stat_name(self) -> &'static str {
                $name::stat_name(self)
            }

            fn describe(self) -> &'static str {
                $name::describe(self)
            }
        }
    };
}
pub(crate) use tier_causes;

/// A counter per cause, shared by a tier and its workers.
pub(crate) struct CauseCounters<C> {
    counts: Box<[AtomicU64]>,
    cause: std::marker::PhantomData<fn() -> C>,
}

impl<C: TierCause> Default for CauseCounters<C> {
    fn default() -> Self {
        CauseCounters {
            counts: C::ALL.iter().map(|_| AtomicU64::new(0)).collect(),
            cause: std::marker::PhantomData,
        }
    }
}

impl<C: TierCause> CauseCounters<C> {
    /// Counts one failure of `cause`.
    pub(crate) fn count(&self, cause: C) {
        self.count_n(cause, 1);
    }

    /// Counts `n` failures of `cause`.
    pub(crate) fn count_n(&self, cause: C, n: u64) {
        self.counts[cause.index()].fetch_add(n, Ordering::Relaxed);
    }

    /// Failures of `cause` counted so far.
    pub(crate) fn get(&self, cause: C) -> u64 {
        self.counts[cause.index()].load(Ordering::Relaxed)
    }

    /// Appends a counter per cause, in [`TierCause::ALL`]'s order, to `out`.
    pub(crate) fn push_stats(&self, out: &mut Vec<Stat>) {
        for &cause in C::ALL {
            out.push(Stat::counter(cause.stat_name(), self.get(cause)));
        }
    }
}

/// Least time between two descriptions of one kind of failure.
pub(crate) const REPORT_INTERVAL: Duration = Duration::from_secs(1);

/// Most descriptions kept between two `take_errors` calls.
const MAX_PENDING: usize = 64;

/// A tier's descriptions of failures, waiting for the manager's
/// `take_errors`: each starts with the tier's prefix.
pub(crate) struct Reporter {
    prefix: String,
    pending: Vec<String>,
    last: Vec<Option<Instant>>,
    left_out: Vec<u64>,
}

impl Reporter {
    /// A reporter whose descriptions start with `prefix` (`fs tier
    /// /data`), with `kinds` kinds of rate-limited failure (numbered from
    /// 0; a tier's causes are kinds `0..C::ALL.len()` by their index).
    pub(crate) fn new(prefix: String, kinds: usize) -> Reporter {
        Reporter {
            prefix,
            pending: Vec::new(),
            last: vec![None; kinds],
            left_out: vec![0; kinds],
        }
    }

    /// Describes a failure of kind `kind`, unless one of that kind was
    /// described less than [`REPORT_INTERVAL`] ago or too many wait: then
    /// it is left out, and counted in the next description of its kind.
    pub(crate) fn limited(&mut self, kind: usize, what: impl FnOnce() -> String) {
        self.limited_at(kind, Instant::now(), what);
    }

    /// As [`Reporter::limited`], for a failure at `now`.
    fn limited_at(&mut self, kind: usize, now: Instant, what: impl FnOnce() -> String) {
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

    /// `n` failures of kind `kind` were left out without being offered.
    pub(crate) fn left_out(&mut self, kind: usize, n: u64) {
        self.left_out[kind] += n;
    }

    /// A task failed with `cause` (rate limited by cause); `what` names
    /// the task ("store of 4 blocks").
    pub(crate) fn failed<C: TierCause>(&mut self, what: impl FnOnce() -> String, cause: C) {
        self.limited(cause.index(), || {
            format!("{} failed: {}", what(), cause.describe())
        });
    }

    /// A description that is not rate limited (a rare state change, or one
    /// per failed key), kept while fewer than the bound wait.
    pub(crate) fn note(&mut self, text: impl FnOnce() -> String) {
        if self.pending.len() < MAX_PENDING {
            self.pending.push(format!("{}: {}", self.prefix, text()));
        }
    }

    /// Moves the descriptions, oldest first, into `out`.
    pub(crate) fn take(&mut self, out: &mut Vec<String>) {
        out.append(&mut self.pending);
    }

    /// Holds kind `kind` as described at `at` (tests: the interval then
    /// runs from `at`, however slowly the test runs).
    #[cfg(test)]
    pub(crate) fn described_at(&mut self, kind: usize, at: Instant) {
        self.last[kind] = Some(at);
    }

    /// When kind `kind` was last described (tests).
    #[cfg(test)]
    pub(crate) fn last_described(&self, kind: usize) -> Option<Instant> {
        self.last[kind]
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    #[derive(Clone, Copy, Debug, PartialEq, Eq)]
    pub(crate) enum Why {
        Lost,
        Broken,
    }

    impl TierCause for Why {
        const ALL: &'static [Why] = &[Why::Lost, Why::Broken];
        fn index(self) -> usize {
            self as usize
        }
        fn stat_name(self) -> &'static str {
            ["errors_lost", "errors_broken"][self as usize]
        }
        fn describe(self) -> &'static str {
            ["it was lost", "it broke"][self as usize]
        }
    }

    #[test]
    fn counters_count_per_cause_in_stats_order() {
        let c = CauseCounters::<Why>::default();
        c.count(Why::Broken);
        c.count_n(Why::Broken, 2);
        let mut s = Vec::new();
        c.push_stats(&mut s);
        let got: Vec<_> = s.iter().map(|s| (s.name.to_string(), s.value)).collect();
        assert_eq!(
            got,
            vec![
                ("errors_lost".to_string(), 0.0),
                ("errors_broken".to_string(), 3.0)
            ]
        );
        assert_eq!(c.get(Why::Lost), 0);
    }

    #[test]
    fn notes_are_bounded_not_rate_limited() {
        let mut r = Reporter::new("t".into(), 0);
        for i in 0..MAX_PENDING + 5 {
            r.note(|| format!("n{i}"));
        }
        let mut out = Vec::new();
        r.take(&mut out);
        assert_eq!(out.len(), MAX_PENDING);
        assert_eq!(out[1], "t: n1");
    }

    #[test]
    fn repeats_within_the_interval_are_counted_not_described() {
        let mut r = Reporter::new("t".into(), Why::ALL.len());
        r.failed(|| "store".into(), Why::Lost);
        let at = r.last_described(0).expect("the first one is described");
        r.described_at(0, at + Duration::from_secs(3600));
        r.failed(|| "store".into(), Why::Lost);
        r.failed(|| "load".into(), Why::Broken);
        let mut out = Vec::new();
        r.take(&mut out);
        assert_eq!(
            out,
            vec!["t: store failed: it was lost", "t: load failed: it broke"]
        );
        r.described_at(0, Instant::now() - REPORT_INTERVAL);
        r.failed(|| "store".into(), Why::Lost);
        r.take(&mut out);
        assert_eq!(
            out[2],
            "t: store failed: it was lost (1 more like it since the last report)"
        );
    }

    #[test]
    fn failures_left_out_unoffered_are_counted_in_the_next_description() {
        let mut r = Reporter::new("t".into(), Why::ALL.len());
        r.left_out(1, 2);
        r.left_out(1, 1);
        r.failed(|| "load".into(), Why::Broken);
        r.failed(|| "store".into(), Why::Lost);
        let mut out = Vec::new();
        r.take(&mut out);
        assert_eq!(
            out,
            vec![
                "t: load failed: it broke (3 more like it since the last report)",
                "t: store failed: it was lost"
            ]
        );
    }

    #[test]
    fn a_kind_is_described_again_once_the_interval_has_passed() {
        let mut r = Reporter::new("t".into(), 1);
        let at = Instant::now();
        r.limited_at(0, at, || "first".into());
        r.limited_at(0, at + REPORT_INTERVAL - Duration::from_nanos(1), || {
            "too soon".into()
        });
        r.limited_at(0, at + REPORT_INTERVAL, || "again".into());
        let mut out = Vec::new();
        r.take(&mut out);
        assert_eq!(
            out,
            vec![
                "t: first",
                "t: again (1 more like it since the last report)"
            ]
        );
    }
}
