//! `kvtier_primary_stats`: the primary tier's numbers as
//! `kvtier_primary_read_stats` writes them, under the growth rule.

use crate::growth::Grows;
use kvtier_core::primary::PrimaryStats;

/// Number of buckets of the primary tier's allocation-size histogram
/// (`kvtier_primary_stats.allocation_size_buckets`), the +Inf bucket included.
pub const KVTIER_ALLOCATION_SIZE_BUCKETS: usize = 11;
const _: () =
    assert!(KVTIER_ALLOCATION_SIZE_BUCKETS == kvtier_core::primary::ALLOCATION_SIZE_BUCKETS);

/// The tier's numbers, as `kvtier_primary_read_stats` fills them.
/// Counters (the allocation-size histogram included) are cumulative from
/// the tier's creation and never decrease, not even at
/// `kvtier_primary_reset`; the rest are current values.  For numbers per
/// interval, keep the previous read and subtract (`now - before`).
///
/// Under the growth rule: set `struct_size` to `sizeof(kvtier_primary_stats)`
/// before the call; the library fills only the fields inside it, so a
/// program built against an older, shorter layout gets the fields it knows.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct kvtier_primary_stats {
    /// `sizeof(kvtier_primary_stats)` as the caller was compiled with: set
    /// it before the call; the library keeps it.
    pub struct_size: usize,
    /// Number of slots.
    pub capacity: u32,
    /// Slots holding a key (any state).
    pub used: u32,
    /// Slots handed out fresh since creation or the last reset.
    pub allocated: u32,
    /// Keys being written.
    pub write_pending: u32,
    /// Keys ready and pinned.
    pub pinned: u32,
    /// Keys ready and idle (evictable).
    pub idle: u32,
    /// (write pending + pinned) / capacity.
    pub usage: f64,
    /// write pending / capacity.
    pub write_usage: f64,
    /// pinned / capacity.
    pub read_usage: f64,
    /// Keys evicted.
    pub evictions: u64,
    /// prepare_store calls refused.
    pub refusals: u64,
    /// Keys not stored because offered fewer than `store_threshold` times.
    pub admission_skips: u64,
    /// Keys prepare_store planned to store.
    pub stores_planned: u64,
    /// Keys made ready by complete_store.
    pub stores_completed: u64,
    /// Keys dropped by a failed complete_store.
    pub stores_failed: u64,
    /// Absent keys in complete_store (late completions), ignored.
    pub late_completions: u64,
    /// Keys in complete_store being written for another request (or a
    /// promotion), left alone.
    pub foreign_completions: u64,
    /// Keys in complete_store already readable, left alone.
    pub already_ready_completions: u64,
    /// Keys pinned by prepare_load.
    pub loads: u64,
    /// Events waiting to be taken.
    pub events_queued: u32,
    /// Events dropped because the buffer was full.
    pub events_dropped: u64,
    /// ARC: resident keys seen once (0 for lru).
    pub arc_t1: u32,
    /// ARC: resident keys reused (0 for lru).
    pub arc_t2: u32,
    /// ARC: ghosts of keys evicted from T1.
    pub arc_b1: u32,
    /// ARC: ghosts of keys evicted from T2.
    pub arc_b2: u32,
    /// ARC: the adaptive T1 target.
    pub arc_target: f64,
    /// Allocation sizes, cumulative buckets: `allocation_size_buckets[i]`
    /// counts the prepare_store calls that had at most the i-th bound of
    /// 1, 4, 16, 64, 256, 1024, 4096, 16384, 65536, 262144, +Inf keys to
    /// store (the last equals `allocation_size_count`).  As vLLM 0.33, one
    /// observation per call with keys to store (absent, distinct, admitted),
    /// refused calls included; none for a call with nothing to store.
    pub allocation_size_buckets: [u64; KVTIER_ALLOCATION_SIZE_BUCKETS],
    /// Allocation sizes: total keys over every observation.
    pub allocation_size_sum: u64,
    /// Allocation sizes: number of observations.
    pub allocation_size_count: u64,
    /// Keys a finished request's late complete_load named whose pin other
    /// requests' unpins had already taken (beyond their own pins): nothing
    /// released, the call succeeded.
    pub spent_load_completions: u64,
}

impl From<PrimaryStats> for kvtier_primary_stats {
    fn from(s: PrimaryStats) -> Self {
        kvtier_primary_stats {
            struct_size: std::mem::size_of::<kvtier_primary_stats>(),
            capacity: s.capacity,
            used: s.used,
            allocated: s.allocated,
            write_pending: s.write_pending,
            pinned: s.pinned,
            idle: s.idle,
            usage: s.usage,
            write_usage: s.write_usage,
            read_usage: s.read_usage,
            evictions: s.evictions,
            refusals: s.refusals,
            admission_skips: s.admission_skips,
            stores_planned: s.stores_planned,
            stores_completed: s.stores_completed,
            stores_failed: s.stores_failed,
            late_completions: s.late_completions,
            foreign_completions: s.foreign_completions,
            already_ready_completions: s.already_ready_completions,
            loads: s.loads,
            events_queued: s.events_queued,
            events_dropped: s.events_dropped,
            arc_t1: s.arc_t1,
            arc_t2: s.arc_t2,
            arc_b1: s.arc_b1,
            arc_b2: s.arc_b2,
            arc_target: s.arc_target,
            allocation_size_buckets: s.allocation_sizes.cumulative,
            allocation_size_sum: s.allocation_sizes.sum as u64,
            allocation_size_count: s.allocation_sizes.count,
            spent_load_completions: s.spent_load_completions,
        }
    }
}

impl Default for kvtier_primary_stats {
    /// Zeroes, with `struct_size` this library's size: ready for
    /// `kvtier_primary_read_stats`.
    fn default() -> Self {
        PrimaryStats::default().into()
    }
}

impl Grows for kvtier_primary_stats {
    const NAME: &'static str = "kvtier_primary_stats";
    /// 0.2's layout ended with `allocation_size_count`.
    const FIRST_LAYOUT_SIZE: usize =
        std::mem::offset_of!(kvtier_primary_stats, spent_load_completions);
}
