//! The tier's numbers, each declared once: [`PrimaryStats`], read by
//! [`PrimaryTier::stats`], the same numbers as named stats
//! ([`PrimaryTier::stat_list`]), and their metric families
//! ([`PRIMARY_STATS`]).

use super::allocation_sizes::{ALLOCATION_SIZE_STAT, AllocationSizes};
use super::policy::Policy;
use super::{PolicyKind, PrimaryTier};
use crate::stats::{
    Stat, T_BLOCKS, T_CAPACITY_BLOCKS, T_EVENTS_DROPPED, T_EVENTS_QUEUED, T_EVICTIONS, family,
    stat_table,
};

stat_table! {
    /// The families of the primary tier's statistics.
    pub(crate) static PRIMARY_STATS;

    /// The tier's numbers.
    ///
    /// Counters (and the histogram) are cumulative from the tier's creation and
    /// never decrease, not even at [`PrimaryTier::reset`]; gauges (the sizes,
    /// usages, queue lengths and ARC lists) are current values.  For numbers
    /// per interval, subtract two reads (see [`crate::stats`]).
    #[derive(Clone, Copy, Debug, Default, PartialEq)]
    pub struct PrimaryStats {
        /// Number of slots.
        gauge capacity: u32 => T_CAPACITY_BLOCKS,
        /// Slots holding a key (any state).
        gauge used: u32 => T_BLOCKS,
        /// Slots handed out fresh since creation or the last reset (high-water mark).
        gauge allocated: u32 => P_ALLOCATED,
        /// Keys write pending.
        gauge write_pending: u32 => P_WRITE_PENDING,
        /// Keys ready and pinned (by loads or transfers, or held by a pin set).
        gauge pinned: u32 => P_PINNED,
        /// Keys ready and idle (evictable).
        gauge idle: u32 => P_IDLE,
        /// (write pending + pinned) / capacity: slots neither free nor idle.
        gauge usage: f64 => P_USAGE,
        /// write pending / capacity.
        gauge write_usage: f64 => P_WRITE_USAGE,
        /// pinned / capacity.
        gauge read_usage: f64 => P_READ_USAGE,
        /// Keys evicted.
        counter evictions: u64 => T_EVICTIONS,
        /// `prepare_store` calls refused for lack of evictable keys.
        counter refusals: u64 => P_REFUSALS,
        /// [0.33] Keys not stored because they were offered fewer than `store_threshold` times.
        counter admission_skips: u64 => P_ADMISSION_SKIPS,
        /// Keys `prepare_store` planned to store.
        counter stores_planned: u64 => P_STORES_PLANNED,
        /// Write-pending keys made ready by `complete_store`.
        counter stores_completed: u64 => P_STORES_COMPLETED,
        /// Write-pending keys dropped by a failed `complete_store`.
        counter stores_failed: u64 => P_STORES_FAILED,
        /// Absent keys in `complete_store` (late completions), ignored.
        counter late_completions: u64 => P_IGNORED_COMPLETIONS["late"],
        /// Keys in `complete_store` write pending for another writer (another
        /// request, or a promotion), left alone.
        counter foreign_completions: u64 => P_IGNORED_COMPLETIONS["foreign"],
        /// Keys in `complete_store` already ready, left alone.
        counter already_ready_completions: u64 => P_IGNORED_COMPLETIONS["already_ready"],
        /// Keys a finished request's late `complete_load` named whose pin
        /// other requests' unpins had already taken (beyond their own pins):
        /// nothing released.
        counter spent_load_completions: u64 => P_SPENT_LOAD_COMPLETIONS,
        /// Keys pinned by `prepare_load`.
        counter loads: u64 => P_LOADS,
        /// Keys pinned by `pin_for_transfer`.
        counter transfer_pins: u64 => P_TRANSFER_PINS,
        /// Events waiting in the buffer.
        gauge events_queued: u32 => T_EVENTS_QUEUED,
        /// Events dropped because the buffer was full.
        counter events_dropped: u64 => T_EVENTS_DROPPED,
        /// Keys in the recent-offers table.
        gauge admission_table_len: u32 => P_ADMISSION_TABLE,
        /// ARC: resident keys seen once (0 for lru).
        gauge arc_t1: u32 => P_ARC_LISTS["t1"],
        /// ARC: resident keys reused (0 for lru).
        gauge arc_t2: u32 => P_ARC_LISTS["t2"],
        /// ARC: ghosts of keys evicted from T1.
        gauge arc_b1: u32 => P_ARC_LISTS["b1"],
        /// ARC: ghosts of keys evicted from T2.
        gauge arc_b2: u32 => P_ARC_LISTS["b2"],
        /// ARC: the adaptive T1 target.
        gauge arc_target: f64 => P_ARC_TARGET,
        /// [0.33] Allocation sizes: one observation per `prepare_store` with
        /// keys to store (refused ones included), of their number; buckets
        /// bounded by [`ALLOCATION_SIZE_BOUNDS`](super::ALLOCATION_SIZE_BOUNDS).
        histogram allocation_sizes: AllocationSizes as ALLOCATION_SIZE_STAT => P_ALLOCATION_SIZES,
    }
}

/// The prefix of the statistics only policy `arc` reports.
const ARC_PREFIX: &str = "arc_";

impl PrimaryTier {
    /// The tier's numbers.
    pub fn stats(&self) -> PrimaryStats {
        let cap = self.config.capacity as f64;
        let p = self.policy.stats();
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
            events_queued: self.events.len() as u32,
            events_dropped: self.events.dropped(),
            admission_table_len: self.admission.as_ref().map_or(0, |a| a.len() as u32),
            arc_t1: p.t1,
            arc_t2: p.t2,
            arc_b1: p.b1,
            arc_b2: p.b2,
            arc_target: p.target,
            allocation_sizes: self.allocation_sizes.snapshot(),
            ..self.counters
        }
    }

    /// The same numbers as named stats, in [`PrimaryStats`]'s order
    /// (counters, gauges, and the allocation sizes as the histogram
    /// [`ALLOCATION_SIZE_STAT`]); the ARC lists (`arc_*`) only under
    /// policy `arc`.
    pub fn stat_list(&self) -> Vec<Stat> {
        let mut v = self.stats().stat_list();
        if self.config.policy != PolicyKind::Arc {
            v.retain(|s| !s.name.starts_with(ARC_PREFIX));
        }
        v
    }
}

// The primary tier's own families.
family! {
    P_ALLOCATED, "kvtier_primary_allocated_blocks", Gauge, Tier,
    "Slots handed out fresh since creation or the last reset (a high-water mark)."
}
family! {
    P_WRITE_PENDING, "kvtier_primary_write_pending_blocks", Gauge, Tier,
    "Keys being written into the primary tier."
}
family! {
    P_PINNED, "kvtier_primary_pinned_blocks", Gauge, Tier,
    "Ready keys pinned by loads or transfers, or held by a pin set."
}
family! {
    P_IDLE, "kvtier_primary_idle_blocks", Gauge, Tier,
    "Ready keys nobody pins (evictable)."
}
family! {
    P_USAGE, "kvtier_primary_usage_ratio", Gauge, Tier,
    "(write pending + pinned) / capacity: the share of slots neither free nor evictable."
}
family! {
    P_WRITE_USAGE, "kvtier_primary_write_usage_ratio", Gauge, Tier,
    "write pending / capacity."
}
family! {
    P_READ_USAGE, "kvtier_primary_read_usage_ratio", Gauge, Tier,
    "pinned / capacity."
}
family! {
    P_REFUSALS, "kvtier_primary_store_refusals_total", Counter, Tier,
    "prepare_store calls the primary tier refused for lack of evictable keys."
}
family! {
    P_ADMISSION_SKIPS, "kvtier_primary_admission_skips_total", Counter, Tier,
    "Keys not stored because they were offered fewer times than the admission threshold."
}
family! {
    P_STORES_PLANNED, "kvtier_primary_stores_planned_total", Counter, Tier,
    "Keys prepare_store planned to store."
}
family! {
    P_STORES_COMPLETED, "kvtier_primary_stores_completed_total", Counter, Tier,
    "Write-pending keys complete_store made ready."
}
family! {
    P_STORES_FAILED, "kvtier_primary_stores_failed_total", Counter, Tier,
    "Write-pending keys a failed complete_store dropped."
}
family! {
    P_IGNORED_COMPLETIONS, "kvtier_primary_ignored_completions_total", Counter, Tier, "reason",
    "Keys named in complete_store and left alone, by reason: late (absent), foreign (write pending for another writer), already_ready."
}
family! {
    P_LOADS, "kvtier_primary_loads_total", Counter, Tier,
    "Keys prepare_load pinned for a load to the GPU."
}
family! {
    P_SPENT_LOAD_COMPLETIONS, "kvtier_primary_spent_load_completions_total", Counter, Tier,
    "Keys a finished request's late complete_load named whose pin other requests' unpins had already taken: nothing released."
}
family! {
    P_TRANSFER_PINS, "kvtier_primary_transfer_pins_total", Counter, Tier,
    "Keys pinned for cascades to secondary tiers."
}
family! {
    P_ADMISSION_TABLE, "kvtier_primary_admission_table_keys", Gauge, Tier,
    "Keys in the admission threshold's table of recent offers."
}
family! {
    P_ARC_LISTS, "kvtier_primary_arc_list_keys", Gauge, Tier, "list",
    "Keys in each ARC list (policy \"arc\"): t1 resident and seen once, t2 resident and reused, b1 and b2 ghosts of keys evicted from t1 and t2."
}
family! {
    P_ARC_TARGET, "kvtier_primary_arc_target_keys", Gauge, Tier,
    "ARC's adaptive target size of t1 (policy \"arc\")."
}
family! {
    P_ALLOCATION_SIZES, "kvtier_primary_allocation_size_blocks", Histogram, Tier,
    "Keys to store per prepare_store call that had any (refused calls included)."
}

#[cfg(test)]
mod tests {
    use super::super::{PrimaryConfig, PrimaryTier};
    use super::*;

    #[test]
    fn every_statistic_of_either_policy_is_in_the_table_with_a_family_of_its_kind() {
        for policy in [PolicyKind::Lru, PolicyKind::Arc] {
            let t = PrimaryTier::new(PrimaryConfig {
                capacity: 4,
                policy,
                ..Default::default()
            })
            .unwrap();
            let list = t.stat_list();
            crate::stats::assert_listed(&list, PRIMARY_STATS);
            assert_eq!(
                list.iter().any(|s| s.name == "arc_t1"),
                policy == PolicyKind::Arc
            );
        }
    }
}
