//! [0.33] The primary tier's allocation-size histogram: one observation per
//! `prepare_store` whose keys to store (absent, distinct, admitted by the
//! threshold) are not empty, of their number.  As vLLM 0.33's CPU manager,
//! the observation is made before the eviction check, so a store refused
//! for lack of evictable keys is observed too; a call with nothing to store
//! (every key resident, or none admitted) is not.

use crate::histogram::{Histogram, HistogramSnapshot, bounds_are_valid};

/// Number of buckets of the allocation-size histogram, +Inf included.
pub const ALLOCATION_SIZE_BUCKETS: usize = 11;

/// Upper bounds of the allocation-size buckets, in keys (blocks): vLLM
/// 0.33's `CPU_ALLOCATION_SIZE` buckets, then +Inf.
pub static ALLOCATION_SIZE_BOUNDS: [f64; ALLOCATION_SIZE_BUCKETS] = [
    1.0,
    4.0,
    16.0,
    64.0,
    256.0,
    1024.0,
    4096.0,
    16384.0,
    65536.0,
    262144.0,
    f64::INFINITY,
];
const _: () = assert!(bounds_are_valid(&ALLOCATION_SIZE_BOUNDS));

/// Name of the histogram in the tier's stats list (Prometheus family
/// `kvtier_allocation_size_blocks`).
pub const ALLOCATION_SIZE_STAT: &str = "allocation_size_blocks";

/// The allocation-size histogram's values at one moment.
pub type AllocationSizes = HistogramSnapshot<ALLOCATION_SIZE_BUCKETS>;

impl crate::stats::PushStats for AllocationSizes {
    fn push_stats(&self, name: &'static str, out: &mut Vec<crate::stats::Stat>) {
        HistogramSnapshot::push_stats(self, &ALLOCATION_SIZE_BOUNDS, name, out);
    }
}

/// An empty allocation-size histogram.
pub(super) fn new_histogram() -> Histogram<ALLOCATION_SIZE_BUCKETS> {
    Histogram::new(&ALLOCATION_SIZE_BOUNDS)
}

#[cfg(test)]
mod tests {
    use super::super::*;
    use crate::stats::StatKind;

    fn k(n: u32) -> Key {
        Key::new(&n.to_be_bytes()).unwrap()
    }

    fn ks(ns: impl IntoIterator<Item = u32>) -> Vec<Key> {
        ns.into_iter().map(k).collect()
    }

    fn tier(capacity: u32, policy: PolicyKind, threshold: u32) -> PrimaryTier {
        let t = PrimaryTier::new(PrimaryConfig {
            capacity,
            policy,
            store_threshold: threshold,
            admission_table_size: if threshold >= 2 { 64 } else { 0 },
            ..Default::default()
        });
        let mut t = t.unwrap();
        t.request_begin(R).unwrap();
        t
    }

    const R: RequestId = RequestId(1);
    const BOTH: [PolicyKind; 2] = [PolicyKind::Lru, PolicyKind::Arc];

    fn prepare(t: &mut PrimaryTier, keys: &[Key]) -> (StoreOutcome, StorePlan) {
        let mut plan = StorePlan::default();
        let outcome = t.prepare_store(R, keys, &mut plan).unwrap();
        (outcome, plan)
    }

    fn count_and_sum(t: &PrimaryTier) -> (u64, f64) {
        let a = t.stats().allocation_sizes;
        (a.count, a.sum)
    }

    /// Mirrors vLLM's `test_cpu_manager_reports_allocation_size_histogram`:
    /// stores of [1, 2] then [1, 2, 3] allocate 2 and 1 keys: two
    /// observations summing to 3.  vLLM's second read reports no new
    /// observation; here counters are cumulative, so a second read shows
    /// the same values (a difference of zero).
    #[test]
    fn one_observation_per_call_of_the_keys_it_allocates() {
        for p in BOTH {
            let mut t = tier(4, p, 1);
            let (_, plan) = prepare(&mut t, &ks([1, 2]));
            t.complete_store(R, &plan.to_store, true);
            let (outcome, plan) = prepare(&mut t, &ks([1, 2, 3]));
            assert_eq!((outcome, plan.to_store.len()), (StoreOutcome::Planned, 1));
            assert_eq!(count_and_sum(&t), (2, 3.0), "{p:?}");
            let before = t.stats().allocation_sizes;
            assert_eq!(
                t.stats().allocation_sizes,
                before,
                "reading changes nothing"
            );
            assert_eq!(before.cumulative[0], 1, "the 1-key call, at most 1");
            assert_eq!(before.cumulative[1], 2, "the 2-key call, at most 4");
        }
    }

    /// Mirrors vLLM's `test_cpu_manager_reports_allocation_size_on_eviction_failure`:
    /// one slot, write pending (not evictable); storing another key is
    /// refused, and is still observed (vLLM observes before the eviction
    /// check).  vLLM reads a delta (1 observation of 1) after a first
    /// read; here the cumulative values go from (1, 1) to (2, 2).
    #[test]
    fn a_refused_store_is_observed_as_vllm_does() {
        for p in BOTH {
            let mut t = tier(1, p, 1);
            assert_eq!(prepare(&mut t, &ks([1])).0, StoreOutcome::Planned);
            assert_eq!(count_and_sum(&t), (1, 1.0));
            assert_eq!(prepare(&mut t, &ks([2])).0, StoreOutcome::Refused);
            assert_eq!(count_and_sum(&t), (2, 2.0), "{p:?}");
            assert_eq!(t.stats().refusals, 1);
        }
    }

    #[test]
    fn a_call_with_nothing_to_store_is_not_observed() {
        for p in BOTH {
            let mut t = tier(4, p, 1);
            let (_, plan) = prepare(&mut t, &ks([1, 2]));
            assert_eq!(count_and_sum(&t), (1, 2.0));
            // Empty call; every key resident (one still write pending).
            prepare(&mut t, &[]);
            t.complete_store(R, &plan.to_store[..1], true);
            assert_eq!(prepare(&mut t, &ks([1, 2])).1.to_store.len(), 0);
            assert_eq!(count_and_sum(&t), (1, 2.0), "{p:?}");
        }
        // Keys the admission threshold turns away are not allocated.
        let mut t = tier(4, PolicyKind::Lru, 2);
        assert_eq!(prepare(&mut t, &ks([1, 2])).1.to_store.len(), 0);
        assert_eq!(count_and_sum(&t), (0, 0.0));
        assert_eq!(prepare(&mut t, &ks([1, 2, 3])).1.to_store.len(), 2);
        assert_eq!(count_and_sum(&t), (1, 2.0), "only the admitted keys");
    }

    #[test]
    fn a_key_repeated_in_a_call_is_allocated_once() {
        let mut t = tier(4, PolicyKind::Lru, 1);
        assert_eq!(prepare(&mut t, &ks([1, 2, 1])).1.to_store.len(), 2);
        assert_eq!(count_and_sum(&t), (1, 2.0));
    }

    #[test]
    #[cfg_attr(
        miri,
        ignore = "the top bucket's bound is 262,144 keys: a store that large is too slow under Miri"
    )]
    fn bucket_edges_hold_their_bound() {
        let sizes = [1u32, 2, 4, 5, 262_144, 262_145];
        let total: u32 = sizes.iter().sum();
        let mut t = tier(total, PolicyKind::Lru, 1);
        let mut next = 0u32;
        for n in sizes {
            let keys = ks(next..next + n);
            next += n;
            let (outcome, plan) = prepare(&mut t, &keys);
            assert_eq!(
                (outcome, plan.to_store.len()),
                (StoreOutcome::Planned, n as usize)
            );
        }
        let a = t.stats().allocation_sizes;
        // Bounds 1, 4, 16, 64, 256, 1024, 4096, 16384, 65536, 262144, +Inf.
        assert_eq!(a.cumulative, [1, 3, 4, 4, 4, 4, 4, 4, 4, 5, 6]);
        assert_eq!((a.count, a.sum), (6, total as f64));
    }

    #[test]
    fn the_stats_list_carries_the_histogram_and_reset_keeps_it() {
        let mut t = tier(4, PolicyKind::Arc, 1);
        prepare(&mut t, &ks([1, 2, 3]));
        t.reset();
        let list = t.stat_list();
        let series: Vec<(StatKind, f64)> = list
            .iter()
            .filter(|s| s.name == ALLOCATION_SIZE_STAT)
            .map(|s| (s.kind, s.value))
            .collect();
        let mut expected: Vec<(StatKind, f64)> = ALLOCATION_SIZE_BOUNDS
            .iter()
            .map(|&le| {
                (
                    StatKind::HistogramBucket { le },
                    if le < 3.0 { 0.0 } else { 1.0 },
                )
            })
            .collect();
        expected.push((StatKind::HistogramSum, 3.0));
        expected.push((StatKind::HistogramCount, 1.0));
        assert_eq!(series, expected);
    }
}
