//! Holds a secondary tier's counters to "never go back" in the merged stats.
//!
//! A tier reports cumulative counters (see [`crate::stats`]), but a tier is
//! foreign code: it may stop reporting a counter, or report one smaller
//! than before (a restart, a bug).  [`CounterMemory`] remembers, per
//! counter series, the largest value shown so far and the last value the
//! tier reported:
//!
//! - a counter the tier did not report this time is shown at its last value;
//! - a counter reported below its previous report is a decrease: it is
//!   shown at the value shown before (never lower), and the decrease is
//!   returned so the manager counts a tier bug, once per decrease (a
//!   counter that then climbs again from its lower value is shown at the
//!   held value until it passes it).
//!
//! Gauges are current values and pass through untouched.  Memory grows
//! only when a tier reports a series for the first time; a call with known
//! names allocates nothing here and costs one table probe per counter.

use std::borrow::Cow;
use std::hash::BuildHasher;

use foldhash::fast::RandomState;
use hashbrown::HashTable;

use crate::stats::{Stat, StatKind};

/// One remembered counter series.
#[derive(Debug)]
struct Held {
    name: Cow<'static, str>,
    kind: StatKind,
    /// The largest value shown so far.
    shown: f64,
    /// The value of the tier's latest report of it.
    reported: f64,
    /// The [`CounterMemory::apply`] call that last saw it reported.
    round: u64,
}

/// A counter series' identity besides its name: the kind, and a bucket's
/// bound by its bits (so a NaN bound still matches itself).
fn series_id(kind: StatKind) -> (u8, u64) {
    match kind {
        StatKind::Counter => (0, 0),
        StatKind::Gauge => (1, 0),
        StatKind::HistogramBucket { le } => (2, le.to_bits()),
        StatKind::HistogramSum => (3, 0),
        StatKind::HistogramCount => (4, 0),
    }
}

/// One counter that a tier reported smaller than its previous report.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct Decrease {
    /// The series ([`Stat::series_name`]).
    pub series: String,
    /// The previous report.
    pub before: f64,
    /// This report.
    pub now: f64,
    /// The value shown instead.
    pub shown: f64,
}

/// The counters one tier has reported (see the module docs).
#[derive(Debug, Default)]
pub(crate) struct CounterMemory {
    held: Vec<Held>,
    /// Positions in `held`, by name and series.
    index: HashTable<u32>,
    hasher: RandomState,
    round: u64,
}

impl CounterMemory {
    fn hash(&self, name: &str, kind: StatKind) -> u64 {
        self.hasher.hash_one((name, series_id(kind)))
    }

    /// Applies the rules to one report of the tier, in place: counters
    /// below what was shown are raised to it, and every remembered counter
    /// missing from the report is appended at its last value (in the order
    /// the tier first reported them).  Each decrease is passed to
    /// `on_decrease`.  A series the report repeats is left as reported
    /// after its first occurrence.
    pub(crate) fn apply(&mut self, stats: &mut Vec<Stat>, mut on_decrease: impl FnMut(Decrease)) {
        self.round += 1;
        let round = self.round;
        for stat in stats.iter_mut() {
            if !stat.kind.is_cumulative() {
                continue;
            }
            let h = self.hash(&stat.name, stat.kind);
            let id = series_id(stat.kind);
            let held = &mut self.held;
            let found = self.index.find(h, |&i| {
                let e = &held[i as usize];
                e.name == stat.name && series_id(e.kind) == id
            });
            let Some(&i) = found else {
                let i = held.len() as u32;
                held.push(Held {
                    name: stat.name.clone(),
                    kind: stat.kind,
                    shown: stat.value,
                    reported: stat.value,
                    round,
                });
                let hasher = &self.hasher;
                self.index.insert_unique(h, i, |&j| {
                    let e = &held[j as usize];
                    hasher.hash_one((&*e.name, series_id(e.kind)))
                });
                continue;
            };
            let e = &mut held[i as usize];
            if e.round == round {
                continue;
            }
            e.round = round;
            let now = stat.value;
            if now < e.reported {
                on_decrease(Decrease {
                    series: stat.series_name().into_owned(),
                    before: e.reported,
                    now,
                    shown: e.shown.max(now),
                });
            }
            e.reported = now;
            if now >= e.shown {
                e.shown = now;
            } else if now < e.shown {
                stat.value = e.shown;
            }
        }
        for e in &self.held {
            if e.round != round {
                stats.push(Stat {
                    name: e.name.clone(),
                    kind: e.kind,
                    value: e.shown,
                });
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn apply(m: &mut CounterMemory, report: Vec<Stat>) -> (Vec<(String, f64)>, Vec<Decrease>) {
        let mut stats = report;
        let mut bugs = Vec::new();
        m.apply(&mut stats, |d| bugs.push(d));
        let shown = stats
            .iter()
            .map(|s| (s.series_name().into_owned(), s.value))
            .collect();
        (shown, bugs)
    }

    fn named(v: &[(&str, f64)]) -> Vec<(String, f64)> {
        v.iter().map(|&(n, x)| (n.to_string(), x)).collect()
    }

    #[test]
    fn a_counter_no_longer_reported_keeps_its_last_value() {
        let mut m = CounterMemory::default();
        let (shown, _) = apply(
            &mut m,
            vec![
                Stat::counter("hits", 5),
                Stat::gauge("used", 3.0),
                Stat::counter("misses", 2),
            ],
        );
        assert_eq!(
            shown,
            named(&[("hits", 5.0), ("used", 3.0), ("misses", 2.0)])
        );
        let (shown, bugs) = apply(&mut m, vec![Stat::counter("misses", 4)]);
        // The gauge is a current value: gone when not reported.
        assert_eq!(shown, named(&[("misses", 4.0), ("hits", 5.0)]));
        assert!(bugs.is_empty());
        let (shown, _) = apply(&mut m, vec![]);
        assert_eq!(shown, named(&[("hits", 5.0), ("misses", 4.0)]));
    }

    #[test]
    fn a_decreasing_counter_is_held_and_each_decrease_reported_once() {
        let mut m = CounterMemory::default();
        apply(&mut m, vec![Stat::counter("hits", 10)]);
        let (shown, bugs) = apply(&mut m, vec![Stat::counter("hits", 3)]);
        assert_eq!(shown, named(&[("hits", 10.0)]));
        assert_eq!(
            bugs,
            [Decrease {
                series: "hits".into(),
                before: 10.0,
                now: 3.0,
                shown: 10.0
            }]
        );
        // Climbing again from 3: held until it passes 10, no new bug.
        let (shown, bugs) = apply(&mut m, vec![Stat::counter("hits", 7)]);
        assert_eq!((shown, bugs.len()), (named(&[("hits", 10.0)]), 0));
        let (shown, bugs) = apply(&mut m, vec![Stat::counter("hits", 12)]);
        assert_eq!((shown, bugs.len()), (named(&[("hits", 12.0)]), 0));
        // Gone, then back lower: a decrease from the last report.
        apply(&mut m, vec![]);
        let (shown, bugs) = apply(&mut m, vec![Stat::counter("hits", 1)]);
        assert_eq!((shown, bugs.len()), (named(&[("hits", 12.0)]), 1));
    }

    #[test]
    fn gauges_may_go_down() {
        let mut m = CounterMemory::default();
        apply(&mut m, vec![Stat::gauge("used", 9.0)]);
        let (shown, bugs) = apply(&mut m, vec![Stat::gauge("used", 1.0)]);
        assert_eq!((shown, bugs.len()), (named(&[("used", 1.0)]), 0));
    }

    #[test]
    fn histogram_series_are_counters_of_their_own() {
        static BOUNDS: [f64; 2] = [1.0, f64::INFINITY];
        let mut h = crate::histogram::Histogram::new(&BOUNDS);
        h.record(1.0);
        h.record(5.0);
        let mut report = Vec::new();
        h.push_stats("sizes", &mut report);
        let mut m = CounterMemory::default();
        let (first, _) = apply(&mut m, report);
        let (shown, bugs) = apply(&mut m, vec![]);
        assert_eq!((shown, bugs.len()), (first.clone(), 0));
        assert_eq!(
            first,
            named(&[
                ("sizes_bucket_le_1", 1.0),
                ("sizes_bucket_le_inf", 2.0),
                ("sizes_sum", 6.0),
                ("sizes_count", 2.0),
            ])
        );
    }

    #[test]
    fn a_counter_and_a_gauge_of_one_name_are_told_apart() {
        let mut m = CounterMemory::default();
        apply(&mut m, vec![Stat::counter("x", 4), Stat::gauge("x", 9.0)]);
        let (shown, bugs) = apply(&mut m, vec![Stat::gauge("x", 1.0)]);
        assert_eq!((shown, bugs.len()), (named(&[("x", 1.0), ("x", 4.0)]), 0));
    }

    #[test]
    fn known_names_add_no_memory() {
        let mut m = CounterMemory::default();
        let report = || vec![Stat::counter("a", 1), Stat::counter("b", 2)];
        apply(&mut m, report());
        let cap = (m.held.capacity(), m.index.capacity());
        for _ in 0..100 {
            apply(&mut m, report());
        }
        assert_eq!(
            (m.held.len(), (m.held.capacity(), m.index.capacity())),
            (2, cap)
        );
    }

    #[test]
    fn a_counter_reported_unchanged_is_no_decrease() {
        let mut m = CounterMemory::default();
        apply(&mut m, vec![Stat::counter("hits", 5)]);
        let (shown, bugs) = apply(&mut m, vec![Stat::counter("hits", 5)]);
        assert_eq!((shown, bugs), (named(&[("hits", 5.0)]), vec![]));
    }

    #[test]
    fn many_counters_are_each_remembered_under_their_own_name() {
        // Enough series that the table grows several times and lookups of
        // one name meet entries of others.
        let mut m = CounterMemory::default();
        let report = || -> Vec<Stat> {
            (0..1000u64)
                .map(|i| Stat::counter(format!("c{i}"), i))
                .collect()
        };
        let expected: Vec<(String, f64)> =
            (0..1000u64).map(|i| (format!("c{i}"), i as f64)).collect();
        for _ in 0..2 {
            let (shown, bugs) = apply(&mut m, report());
            assert_eq!((shown, bugs.len()), (expected.clone(), 0));
        }
        let (shown, bugs) = apply(&mut m, vec![]);
        assert_eq!((shown, bugs.len()), (expected, 0));
    }
}
