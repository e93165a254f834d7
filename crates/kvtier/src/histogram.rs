//! Fixed-bucket histograms in the Prometheus shape: for ascending upper
//! bounds ending at +Inf, the number of observations at most each bound
//! (cumulative buckets), their sum and their count.
//!
//! Recording allocates nothing, takes no lock (the owner serializes access,
//! as for its other counters) and costs a binary search over the bounds: a
//! few compares.  Every bucket, the sum and the count only grow: they are
//! counters, cumulative from the histogram's creation.

use std::borrow::Cow;

use crate::stats::{Stat, StatKind};

/// Whether `bounds` can be a histogram's upper bounds: at least one,
/// strictly ascending, none NaN, the last +Inf.  Meant for a compile-time
/// check beside each bounds constant:
/// `const _: () = assert!(bounds_are_valid(&MY_BOUNDS));`.
pub const fn bounds_are_valid(bounds: &[f64]) -> bool {
    let n = bounds.len();
    if n == 0 || bounds[n - 1] != f64::INFINITY {
        return false;
    }
    let mut i = 1;
    while i < n {
        let (below, above) = (bounds[i - 1], bounds[i]);
        if below.is_nan() || above.is_nan() || below >= above {
            return false;
        }
        i += 1;
    }
    true
}

/// Buckets of [`LATENCY_SECONDS_BOUNDS`].
pub const LATENCY_BUCKETS: usize = 18;

/// Upper bounds for latencies in seconds: 50 µs to 10 s, roughly 1-2.5-5
/// per decade, then +Inf.
pub static LATENCY_SECONDS_BOUNDS: [f64; LATENCY_BUCKETS] = [
    0.00005,
    0.0001,
    0.00025,
    0.0005,
    0.001,
    0.0025,
    0.005,
    0.01,
    0.025,
    0.05,
    0.1,
    0.25,
    0.5,
    1.0,
    2.5,
    5.0,
    10.0,
    f64::INFINITY,
];
const _: () = assert!(bounds_are_valid(&LATENCY_SECONDS_BOUNDS));

/// Buckets of [`JOB_SIZE_BLOCKS_BOUNDS`].
pub const JOB_SIZE_BUCKETS: usize = 12;

/// Upper bounds for job sizes in blocks: powers of 4 from 1 to 4096, then
/// +Inf (a job carries one request's blocks of one step).
pub static JOB_SIZE_BLOCKS_BOUNDS: [f64; JOB_SIZE_BUCKETS] = [
    1.0,
    2.0,
    4.0,
    8.0,
    16.0,
    32.0,
    64.0,
    128.0,
    256.0,
    1024.0,
    4096.0,
    f64::INFINITY,
];
const _: () = assert!(bounds_are_valid(&JOB_SIZE_BLOCKS_BOUNDS));

/// A histogram over `N` buckets with fixed upper bounds (the last +Inf).
#[derive(Clone, Copy, Debug)]
pub struct Histogram<const N: usize> {
    bounds: &'static [f64; N],
    /// Observations per bucket (not cumulative): `per_bucket[i]` counts
    /// those above `bounds[i - 1]` and at most `bounds[i]`.
    per_bucket: [u64; N],
    count: u64,
    sum: f64,
}

/// A histogram's values at one moment, buckets cumulative.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct HistogramSnapshot<const N: usize> {
    /// `cumulative[i]`: observations at most the `i`-th upper bound; the
    /// last (+Inf) equals `count`.
    pub cumulative: [u64; N],
    /// Sum of every observation.
    pub sum: f64,
    /// Number of observations.
    pub count: u64,
}

impl<const N: usize> Default for HistogramSnapshot<N> {
    fn default() -> Self {
        HistogramSnapshot {
            cumulative: [0; N],
            sum: 0.0,
            count: 0,
        }
    }
}

impl<const N: usize> Histogram<N> {
    /// An empty histogram over `bounds` (see [`bounds_are_valid`]).
    pub const fn new(bounds: &'static [f64; N]) -> Histogram<N> {
        Histogram {
            bounds,
            per_bucket: [0; N],
            count: 0,
            sum: 0.0,
        }
    }

    /// The upper bounds of the buckets, ascending, the last +Inf.
    pub fn bounds(&self) -> &'static [f64; N] {
        self.bounds
    }

    /// Records one observation of `value`: into the first bucket whose
    /// bound is at least `value` (a NaN goes to the last, +Inf, bucket and
    /// leaves the sum alone).
    #[inline]
    pub fn record(&mut self, value: f64) {
        let i = if value.is_nan() {
            N.saturating_sub(1)
        } else {
            self.bounds
                .partition_point(|&bound| bound < value)
                .min(N.saturating_sub(1))
        };
        if let Some(c) = self.per_bucket.get_mut(i) {
            *c += 1;
        }
        self.count += 1;
        if !value.is_nan() {
            self.sum += value;
        }
    }

    /// Number of observations.
    pub fn count(&self) -> u64 {
        self.count
    }

    /// Sum of the observations.
    pub fn sum(&self) -> f64 {
        self.sum
    }

    /// The values now, with cumulative buckets.
    pub fn snapshot(&self) -> HistogramSnapshot<N> {
        let mut cumulative = [0u64; N];
        let mut running = 0u64;
        for (c, n) in cumulative.iter_mut().zip(&self.per_bucket) {
            running += n;
            *c = running;
        }
        HistogramSnapshot {
            cumulative,
            sum: self.sum,
            count: self.count,
        }
    }

    /// Appends the histogram to a stats list as `N + 2` statistics named
    /// `name`: one [`StatKind::HistogramBucket`] per bound (cumulative),
    /// then [`StatKind::HistogramSum`] and [`StatKind::HistogramCount`].
    pub fn push_stats(&self, name: impl Into<Cow<'static, str>>, out: &mut Vec<Stat>) {
        self.snapshot().push_stats(self.bounds, name, out);
    }
}

impl<const N: usize> HistogramSnapshot<N> {
    /// Appends the values, taken over `bounds`, to a stats list as
    /// [`Histogram::push_stats`] does.
    pub fn push_stats(
        &self,
        bounds: &[f64; N],
        name: impl Into<Cow<'static, str>>,
        out: &mut Vec<Stat>,
    ) {
        let name = name.into();
        for (&le, &c) in bounds.iter().zip(&self.cumulative) {
            out.push(Stat {
                name: name.clone(),
                kind: StatKind::HistogramBucket { le },
                value: c as f64,
            });
        }
        out.push(Stat {
            name: name.clone(),
            kind: StatKind::HistogramSum,
            value: self.sum,
        });
        out.push(Stat {
            name,
            kind: StatKind::HistogramCount,
            value: self.count as f64,
        });
    }
}

impl<const N: usize> crate::stats::PushStats for Histogram<N> {
    fn push_stats(&self, name: &'static str, out: &mut Vec<Stat>) {
        Histogram::push_stats(self, name, out);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    static BOUNDS: [f64; 4] = [1.0, 4.0, 16.0, f64::INFINITY];
    const _: () = assert!(bounds_are_valid(&BOUNDS));

    #[test]
    fn bounds_must_ascend_and_end_at_infinity() {
        assert!(bounds_are_valid(&[f64::INFINITY]));
        assert!(!bounds_are_valid(&[]));
        assert!(!bounds_are_valid(&[1.0, 4.0]));
        assert!(!bounds_are_valid(&[4.0, 1.0, f64::INFINITY]));
        assert!(!bounds_are_valid(&[1.0, 1.0, f64::INFINITY]));
        assert!(!bounds_are_valid(&[f64::NAN, f64::INFINITY]));
    }

    #[test]
    fn an_observation_lands_in_the_first_bucket_whose_bound_holds_it() {
        let mut h = Histogram::new(&BOUNDS);
        for v in [0.0, 1.0, 1.5, 4.0, 4.5, 16.0, 17.0, 1e12] {
            h.record(v);
        }
        let s = h.snapshot();
        // <=1: 0, 1; <=4: + 1.5, 4; <=16: + 4.5, 16; +Inf: + 17, 1e12.
        assert_eq!(s.cumulative, [2, 4, 6, 8]);
        assert_eq!(s.count, 8);
        assert_eq!(s.sum, 0.0 + 1.0 + 1.5 + 4.0 + 4.5 + 16.0 + 17.0 + 1e12);
    }

    #[test]
    fn nan_counts_in_the_last_bucket_only() {
        let mut h = Histogram::new(&BOUNDS);
        h.record(f64::NAN);
        h.record(2.0);
        let s = h.snapshot();
        assert_eq!(s.cumulative, [0, 1, 1, 2]);
        assert_eq!((s.count, s.sum), (2, 2.0));
    }

    #[test]
    fn stats_are_buckets_then_sum_then_count() {
        let mut h = Histogram::new(&BOUNDS);
        h.record(3.0);
        h.record(20.0);
        let mut out = Vec::new();
        h.push_stats("sizes", &mut out);
        let got: Vec<(StatKind, f64)> = out.iter().map(|s| (s.kind, s.value)).collect();
        assert_eq!(
            got,
            [
                (StatKind::HistogramBucket { le: 1.0 }, 0.0),
                (StatKind::HistogramBucket { le: 4.0 }, 1.0),
                (StatKind::HistogramBucket { le: 16.0 }, 1.0),
                (StatKind::HistogramBucket { le: f64::INFINITY }, 2.0),
                (StatKind::HistogramSum, 23.0),
                (StatKind::HistogramCount, 2.0),
            ]
        );
        assert!(out.iter().all(|s| s.name == "sizes"));
    }

    #[test]
    fn a_default_snapshot_is_empty() {
        let s = HistogramSnapshot::<3>::default();
        assert_eq!((s.cumulative, s.sum, s.count), ([0; 3], 0.0, 0));
    }

    #[test]
    fn count_sum_and_bounds_read_back() {
        let mut h = Histogram::new(&BOUNDS);
        assert_eq!((h.count(), h.sum()), (0, 0.0));
        h.record(2.5);
        h.record(3.0);
        assert_eq!((h.count(), h.sum()), (2, 5.5));
        assert_eq!(h.bounds(), &BOUNDS);
    }
}
