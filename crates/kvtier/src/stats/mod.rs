//! Statistics as named values, so every tier reports in one shape and the
//! manager can merge and label them.
//!
//! # Counters never go back
//!
//! Every counter (and every part of a histogram) is cumulative from the
//! creation of whatever reports it and never decreases; gauges are current
//! values.  A reset of a tier's contents does not reset its counters.  The
//! manager holds each secondary tier to this: a counter a tier stops
//! reporting keeps its last value in the merged statistics, and one a tier
//! reports smaller than before keeps its previous value and counts as a
//! tier bug (see [`crate::tiering::Manager::stats`]).
//!
//! A caller that wants per-interval numbers (vLLM's statistics are deltas
//! since the previous read) keeps the previous read and subtracts: for a
//! counter or a histogram bucket, sum or count, `delta = now - before`
//! (never negative); gauges are used as read.  Two reads of the same
//! series, for example a histogram's `_count`, give the number of
//! observations in between.
//!
//! # One declaration per statistic
//!
//! Each component declares its statistics once, in a table
//! (`stat_table!`, in `table.rs`) beside the code that counts them: the
//! primary tier's in `primary/stats.rs`, the manager's in
//! `tiering/manager/stat_lists.rs` and `counters.rs`, each built-in tier's
//! in its `stats.rs`.  The table gives each statistic its name, kind and
//! [`Family`] (`family.rs`), and writes the struct and the named-value list
//! the component reports; the Prometheus exposition reads the table the
//! source hands it.

use std::borrow::Cow;

mod family;
mod table;

pub(crate) use family::family;
pub use family::{
    Entry, Family, FamilyType, Scope, StatTable, T_BLOCKS, T_CAPACITY_BLOCKS, T_CAPACITY_BYTES,
    T_EVENTS_DROPPED, T_EVENTS_QUEUED, T_EVICTIONS, T_USED_BYTES, find,
};
#[cfg(test)]
pub(crate) use table::assert_listed;
pub(crate) use table::{
    CounterValue, GaugeValue, PushStats, join_entries, push_stat, stat_label, stat_name, stat_rows,
    stat_scale, stat_table,
};

/// What a value is: a counter, a gauge, or one series of a histogram.
///
/// Counters and the histogram series are cumulative from creation and
/// never decrease; a gauge is a current level.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum StatKind {
    /// Monotonic count since creation (Prometheus `_total`).
    Counter,
    /// Current level (sizes, usage fractions).
    Gauge,
    /// One cumulative bucket of the histogram named by the stat: the
    /// observations at most `le` since creation (a counter).
    HistogramBucket {
        /// The bucket's upper bound (`f64::INFINITY` for the last).
        le: f64,
    },
    /// The sum of the histogram's observations since creation (a counter
    /// for the non-negative observations kvtier records).
    HistogramSum,
    /// The number of the histogram's observations since creation (a counter).
    HistogramCount,
}

impl StatKind {
    /// Whether values of this kind are cumulative and never decrease
    /// (everything but [`StatKind::Gauge`]).
    pub fn is_cumulative(self) -> bool {
        !matches!(self, StatKind::Gauge)
    }

    /// Whether this is one series of a histogram.
    pub fn is_histogram(self) -> bool {
        matches!(
            self,
            StatKind::HistogramBucket { .. } | StatKind::HistogramSum | StatKind::HistogramCount
        )
    }
}

/// One named statistic of one tier.
///
/// The series of a histogram share its `name` and differ by `kind`; see
/// [`Stat::series_name`] for the one name per series that flat lists (the
/// C stats calls) use.
#[derive(Clone, Debug, PartialEq)]
pub struct Stat {
    /// Snake-case name without tier prefix, for example `evictions` or `bytes_used`.
    pub name: Cow<'static, str>,
    /// Counter, gauge or histogram series.
    pub kind: StatKind,
    /// The value.
    pub value: f64,
}

impl Stat {
    /// A counter named `name`.
    pub fn counter(name: impl Into<Cow<'static, str>>, value: u64) -> Stat {
        Stat {
            name: name.into(),
            kind: StatKind::Counter,
            value: value as f64,
        }
    }

    /// A gauge named `name`.
    pub fn gauge(name: impl Into<Cow<'static, str>>, value: f64) -> Stat {
        Stat {
            name: name.into(),
            kind: StatKind::Gauge,
            value,
        }
    }

    /// The name of this one series: `name` for counters and gauges; for a
    /// histogram named `h`, `h_bucket_le_<bound>` per bucket (the bound in
    /// decimal with `.` written `_`, `inf` for +Inf: `h_bucket_le_4`,
    /// `h_bucket_le_0_005`, `h_bucket_le_inf`), `h_sum` and `h_count`.
    pub fn series_name(&self) -> Cow<'_, str> {
        match self.kind {
            StatKind::Counter | StatKind::Gauge => Cow::Borrowed(&self.name),
            StatKind::HistogramBucket { le } => {
                let bound = if le == f64::INFINITY {
                    "inf".to_string()
                } else {
                    format!("{le}")
                        .chars()
                        .map(|c| if c.is_ascii_alphanumeric() { c } else { '_' })
                        .collect()
                };
                Cow::Owned(format!("{}_bucket_le_{bound}", self.name))
            }
            StatKind::HistogramSum => Cow::Owned(format!("{}_sum", self.name)),
            StatKind::HistogramCount => Cow::Owned(format!("{}_count", self.name)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn histogram_series_have_one_name_each() {
        let part = |kind| Stat {
            name: "allocation_size_blocks".into(),
            kind,
            value: 0.0,
        };
        let names: Vec<String> = [
            StatKind::HistogramBucket { le: 4.0 },
            StatKind::HistogramBucket { le: 0.005 },
            StatKind::HistogramBucket { le: f64::INFINITY },
            StatKind::HistogramSum,
            StatKind::HistogramCount,
        ]
        .into_iter()
        .map(|k| part(k).series_name().into_owned())
        .collect();
        assert_eq!(
            names,
            [
                "allocation_size_blocks_bucket_le_4",
                "allocation_size_blocks_bucket_le_0_005",
                "allocation_size_blocks_bucket_le_inf",
                "allocation_size_blocks_sum",
                "allocation_size_blocks_count",
            ]
        );
        assert_eq!(Stat::counter("evictions", 1).series_name(), "evictions");
    }

    #[test]
    fn only_gauges_may_go_down() {
        assert!(StatKind::Counter.is_cumulative());
        assert!(StatKind::HistogramSum.is_cumulative());
        assert!(StatKind::HistogramBucket { le: 1.0 }.is_cumulative());
        assert!(!StatKind::Gauge.is_cumulative());
        assert!(!StatKind::Counter.is_histogram());
        assert!(StatKind::HistogramCount.is_histogram());
    }
}
