//! The tier's numbers: [`PrimaryStats`], read by [`PrimaryTier::stats`],
//! and the same numbers as named stats ([`PrimaryTier::stat_list`]).

use super::allocation_sizes::{ALLOCATION_SIZE_STAT, AllocationSizes};
use super::policy::Policy;
use super::{PolicyKind, PrimaryTier};
use crate::stats::Stat;

/// The tier's numbers.
///
/// Counters (and the histogram) are cumulative from the tier's creation and
/// never decrease, not even at [`PrimaryTier::reset`]; gauges (the sizes,
/// usages, queue lengths and ARC lists) are current values.  For numbers
/// per interval, subtract two reads (see [`crate::stats`]).
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct PrimaryStats {
    /// Number of slots.
    pub capacity: u32,
    /// Slots holding a key (any state).
    pub used: u32,
    /// Slots handed out fresh since creation or the last reset (high-water mark).
    pub allocated: u32,
    /// Keys write pending.
    pub write_pending: u32,
    /// Keys ready and pinned.
    pub pinned: u32,
    /// Keys ready and idle (evictable).
    pub idle: u32,
    /// (write pending + pinned) / capacity: slots neither free nor idle.
    pub usage: f64,
    /// write pending / capacity.
    pub write_usage: f64,
    /// pinned / capacity.
    pub read_usage: f64,
    /// Keys evicted.
    pub evictions: u64,
    /// `prepare_store` calls refused for lack of evictable keys.
    pub refusals: u64,
    /// [0.33] Keys not stored because they were offered fewer than `store_threshold` times.
    pub admission_skips: u64,
    /// Keys `prepare_store` planned to store.
    pub stores_planned: u64,
    /// Write-pending keys made ready by `complete_store`.
    pub stores_completed: u64,
    /// Write-pending keys dropped by a failed `complete_store`.
    pub stores_failed: u64,
    /// Absent keys in `complete_store` (late completions), ignored.
    pub late_completions: u64,
    /// Keys in `complete_store` write pending for another writer (another
    /// request, or a promotion), left alone.
    pub foreign_completions: u64,
    /// Keys in `complete_store` already ready, left alone.
    pub already_ready_completions: u64,
    /// Keys a finished request's late `complete_load` named whose pin
    /// other requests' unpins had already taken (beyond their own pins):
    /// nothing released.
    pub spent_load_completions: u64,
    /// Keys pinned by `prepare_load`.
    pub loads: u64,
    /// Keys pinned by `pin_for_transfer`.
    pub transfer_pins: u64,
    /// Events waiting in the buffer.
    pub events_queued: u32,
    /// Events dropped because the buffer was full.
    pub events_dropped: u64,
    /// Keys in the recent-offers table.
    pub admission_table_len: u32,
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
    /// [0.33] Allocation sizes: one observation per `prepare_store` with
    /// keys to store (refused ones included), of their number; buckets
    /// bounded by [`ALLOCATION_SIZE_BOUNDS`](super::ALLOCATION_SIZE_BOUNDS).
    pub allocation_sizes: AllocationSizes,
}

impl PrimaryTier {
    /// The tier's numbers.
    pub fn stats(&self) -> PrimaryStats {
        let cap = self.config.capacity as f64;
        let p = self.policy.stats();
        let c = &self.counters;
        PrimaryStats {
            capacity: self.config.capacity,
            used: self.config.capacity - self.slots.free_count() as u32,
            allocated: self.slots.fresh,
            write_pending: self.write_pending,
            pinned: self.pinned,
            idle: self.idle,
            usage: (self.write_pending + self.pinned) as f64 / cap,
            write_usage: self.write_pending as f64 / cap,
            read_usage: self.pinned as f64 / cap,
            evictions: c.evictions,
            refusals: c.refusals,
            admission_skips: c.admission_skips,
            stores_planned: c.stores_planned,
            stores_completed: c.stores_completed,
            stores_failed: c.stores_failed,
            late_completions: c.late_completions,
            foreign_completions: c.foreign_completions,
            already_ready_completions: c.already_ready_completions,
            spent_load_completions: c.spent_load_completions,
            loads: c.loads,
            transfer_pins: c.transfer_pins,
            events_queued: self.events.len() as u32,
            events_dropped: self.events.dropped(),
            admission_table_len: self.admission.as_ref().map_or(0, |a| a.len() as u32),
            arc_t1: p.t1,
            arc_t2: p.t2,
            arc_b1: p.b1,
            arc_b2: p.b2,
            arc_target: p.target,
            allocation_sizes: self.allocation_sizes.snapshot(),
        }
    }

    /// The same numbers as named stats (counters, gauges, and the
    /// allocation sizes as the histogram [`ALLOCATION_SIZE_STAT`]).
    pub fn stat_list(&self) -> Vec<Stat> {
        let s = self.stats();
        let mut v = vec![
            Stat::gauge("capacity", s.capacity as f64),
            Stat::gauge("used", s.used as f64),
            Stat::gauge("allocated", s.allocated as f64),
            Stat::gauge("write_pending", s.write_pending as f64),
            Stat::gauge("pinned", s.pinned as f64),
            Stat::gauge("idle", s.idle as f64),
            Stat::gauge("usage", s.usage),
            Stat::gauge("write_usage", s.write_usage),
            Stat::gauge("read_usage", s.read_usage),
            Stat::counter("evictions", s.evictions),
            Stat::counter("refusals", s.refusals),
            Stat::counter("admission_skips", s.admission_skips),
            Stat::counter("stores_planned", s.stores_planned),
            Stat::counter("stores_completed", s.stores_completed),
            Stat::counter("stores_failed", s.stores_failed),
            Stat::counter("late_completions", s.late_completions),
            Stat::counter("foreign_completions", s.foreign_completions),
            Stat::counter("already_ready_completions", s.already_ready_completions),
            Stat::counter("spent_load_completions", s.spent_load_completions),
            Stat::counter("loads", s.loads),
            Stat::counter("transfer_pins", s.transfer_pins),
            Stat::gauge("events_queued", s.events_queued as f64),
            Stat::counter("events_dropped", s.events_dropped),
            Stat::gauge("admission_table_len", s.admission_table_len as f64),
        ];
        if self.config.policy == PolicyKind::Arc {
            v.extend([
                Stat::gauge("arc_t1", s.arc_t1 as f64),
                Stat::gauge("arc_t2", s.arc_t2 as f64),
                Stat::gauge("arc_b1", s.arc_b1 as f64),
                Stat::gauge("arc_b2", s.arc_b2 as f64),
                Stat::gauge("arc_target", s.arc_target),
            ]);
        }
        self.allocation_sizes
            .push_stats(ALLOCATION_SIZE_STAT, &mut v);
        v
    }
}
