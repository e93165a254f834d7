//! The fs tier's statistics, each declared once with its family: the
//! counters the tier and its workers count into, the table the tier hands
//! the Prometheus exposition
//! ([`SecondaryTier::stat_table`](crate::tiering::SecondaryTier::stat_table)),
//! and the list [`SecondaryTier::stats`](crate::tiering::SecondaryTier::stats)
//! reports.

use std::sync::atomic::{AtomicU64, Ordering};

use super::{Cause, FsTier};
use crate::stats::{
    CounterValue, GaugeValue, Stat, T_BLOCKS, T_CAPACITY_BYTES, T_EVENTS_DROPPED, T_EVENTS_QUEUED,
    T_EVICTIONS, T_USED_BYTES, family, stat_table,
};
use crate::tiers::kit::CauseCounters;

/// One statistic the tier and its workers count into (relaxed: each is
/// read on its own).
#[derive(Debug, Default)]
pub(super) struct Count(AtomicU64);

impl Count {
    /// Adds `n`.
    pub(super) fn add(&self, n: u64) {
        self.0.fetch_add(n, Ordering::Relaxed);
    }

    /// Sets the value (a gauge, or what the opening scan found).
    pub(super) fn set(&self, value: u64) {
        self.0.store(value, Ordering::Relaxed);
    }

    /// The value.
    pub(super) fn get(&self) -> u64 {
        self.0.load(Ordering::Relaxed)
    }
}

impl CounterValue for Count {
    fn counter_value(&self) -> u64 {
        self.get()
    }
}

impl GaugeValue for Count {
    fn gauge_value(&self) -> f64 {
        self.get() as f64
    }
}

/// Time the workers count in nanoseconds, reported in whole microseconds
/// (of the total, so no rounding adds up).
#[derive(Debug, Default)]
pub(super) struct Nanos(Count);

impl Nanos {
    /// Adds `ns` nanoseconds.
    pub(super) fn add(&self, ns: u64) {
        self.0.add(ns);
    }
}

impl CounterValue for Nanos {
    fn counter_value(&self) -> u64 {
        self.0.get() / 1000
    }
}

stat_table! {
    /// The families of the fs tier's statistics.
    pub(crate) static FS_STATS;

    /// The fs tier's statistics (then, per cause, its failures), shared
    /// by the tier and its workers: each counts into its own; the gauges
    /// and the event queue's drops are set when read, what the opening
    /// scan found when the tier opens.
    #[derive(Default)]
    pub(super) struct FsStats {
        /// Bytes the blocks take on disk.
        gauge bytes_used: Count => T_USED_BYTES,
        /// The capacity in bytes (0: no limit).
        gauge capacity_bytes: Count => T_CAPACITY_BYTES,
        /// Blocks stored and readable.
        gauge blocks: Count => T_BLOCKS,
        /// 1 with O_DIRECT, else 0.
        gauge direct_io: Count => FS_DIRECT_IO,
        /// Blocks pin sets hold (kept from eviction, max age and drops).
        gauge held_blocks: Count => FS_HELD_BLOCKS,
        /// Lookups answered HIT.
        counter hits: Count => FS_LOOKUP_RESULTS["hit"],
        /// Lookups answered MISS.
        counter misses: Count => FS_LOOKUP_RESULTS["miss"],
        /// Lookups answered RETRY.
        counter lookup_retries: Count => FS_LOOKUP_RESULTS["retry"],
        /// Checks on disk of keys another instance may have written.
        counter existence_checks: Count => FS_EXISTENCE_CHECKS,
        /// Blocks another instance wrote, taken into the index.
        counter blocks_adopted: Count => FS_ADOPTED,
        /// Blocks written.
        counter stores_written: Count => FS_STORES["written"],
        /// Blocks the tier already had.
        counter stores_already_present: Count => FS_STORES["already_present"],
        /// Blocks skipped.
        counter stores_skipped: Count => FS_STORES["skipped"],
        /// Blocks refused because the tier was full.
        counter stores_rejected_full: Count => FS_STORES["rejected_full"],
        /// Blocks loaded.
        counter loads: Count => FS_LOADS,
        /// Jobs reported failed.
        counter jobs_failed: Count => FS_JOBS_FAILED,
        /// Blocks evicted (the opening scan's included).
        counter evictions: Count => T_EVICTIONS,
        /// Damaged block files removed.
        counter corrupt_blocks_removed: Count => FS_CORRUPT_REMOVED,
        /// Blocks dropped from the index because they could not be read.
        counter unreadable_blocks_dropped: Count => FS_UNREADABLE_DROPPED,
        /// Blocks whose file had disappeared when read.
        counter blocks_found_missing: Count => FS_FOUND_MISSING,
        /// Blocks removed because they were older than the max age.
        counter expired: Count => FS_EXPIRED,
        /// Events dropped because the queue was full.
        counter events_dropped: Count => T_EVENTS_DROPPED,
        /// Events queued.
        gauge events_queued: Count => T_EVENTS_QUEUED,
        /// Block files the tier failed to remove.
        counter removal_errors: Count => FS_REMOVAL_ERRORS,
        /// Bytes read.
        counter read_bytes: Count => FS_IO_BYTES["read"],
        /// Microseconds spent reading (counted in nanoseconds).
        counter read_time_us: Nanos => FS_IO_SECONDS["read"] * 1e-6,
        /// Bytes written.
        counter write_bytes: Count => FS_IO_BYTES["write"],
        /// Microseconds spent writing (counted in nanoseconds).
        counter write_time_us: Nanos => FS_IO_SECONDS["write"] * 1e-6,
        /// Blocks found at restart: loaded from the persisted index, or
        /// found by the restart scan.
        counter restart_blocks: Count => FS_RESTART_BLOCKS,
        /// Files the opening scan skipped.
        counter restart_skipped_files: Count => FS_RESTART_FILES["skipped"],
        /// Damaged files the opening scan removed.
        counter restart_removed_files: Count => FS_RESTART_FILES["removed"],
        /// Unfinished writes the opening scan removed.
        counter restart_temp_removed: Count => FS_RESTART_FILES["temp_removed"],
        /// Files the opening scan could not read.
        counter restart_unreadable_files: Count => FS_RESTART_FILES["unreadable"],
        /// Entries that are no regular files.
        counter restart_foreign_entries: Count => FS_RESTART_FILES["foreign"],
        /// 1 while the index is rebuilt (loaded or scanned), else 0.
        gauge rebuilding: Count => FS_REBUILDING,
    }
    plain {
        /// Failures per cause.
        errors: CauseCounters<Cause>,
    }
    rows Cause::STAT_ROWS;
}

impl FsStats {
    /// Statistics with what the opening scan found (`rebuild`): its blocks,
    /// the files it did not take, and its evictions.
    pub(super) fn opened(rebuild: &super::RebuildReport) -> FsStats {
        let s = FsStats::default();
        s.evictions.set(rebuild.evicted);
        s.set_restart(rebuild);
        s
    }

    /// Sets what the restart scan found so far (`rebuild`).
    pub(super) fn set_restart(&self, rebuild: &super::RebuildReport) {
        self.restart_blocks.set(rebuild.blocks);
        self.restart_skipped_files.set(rebuild.skipped);
        self.restart_removed_files.set(rebuild.removed);
        self.restart_temp_removed.set(rebuild.temp_removed);
        self.restart_unreadable_files.set(rebuild.unreadable);
        self.restart_foreign_entries.set(rebuild.foreign);
    }
}

impl FsTier {
    /// The tier's statistics: [`FsStats`], then the failures per cause.
    pub(super) fn stat_list(&self) -> Vec<Stat> {
        let c = &self.counts;
        c.bytes_used.set(self.index.used());
        c.capacity_bytes.set(self.opts.capacity_bytes);
        c.blocks.set(self.index.ready_count() as u64);
        c.direct_io.set(u64::from(self.direct_io()));
        c.held_blocks.set(self.index.held_count() as u64);
        c.rebuilding.set(u64::from(self.rebuilding()));
        c.events_dropped.set(self.events.dropped());
        c.events_queued.set(self.events.len() as u64);
        let mut v = c.stat_list();
        c.errors.push_stats(&mut v);
        v
    }
}

// The fs tier's own families.
family! {
    FS_REBUILDING, "kvtier_fs_rebuilding", Gauge, Tier,
    "1 while the fs tier rebuilds its index at restart (reads its persisted index, or scans the directory; it serves what it has found so far), else 0."
}
family! {
    FS_DIRECT_IO, "kvtier_fs_direct_io", Gauge, Tier,
    "1 when the fs tier reads and writes with O_DIRECT, else 0."
}
family! {
    FS_HELD_BLOCKS, "kvtier_fs_held_blocks", Gauge, Tier,
    "Blocks of the fs tier that pin sets hold: out of eviction, max age and drops until released."
}
family! {
    FS_LOOKUP_RESULTS, "kvtier_fs_lookup_results_total", Counter, Tier, "result",
    "The fs tier's answers to lookups: hit, miss, or retry (while a shared directory is checked)."
}
family! {
    FS_EXISTENCE_CHECKS, "kvtier_fs_existence_checks_total", Counter, Tier,
    "Checks on disk of keys another instance may have written into a shared directory."
}
family! {
    FS_ADOPTED, "kvtier_fs_blocks_adopted_total", Counter, Tier,
    "Blocks another instance wrote into a shared directory, taken into this tier's index."
}
family! {
    FS_STORES, "kvtier_fs_stores_total", Counter, Tier, "result",
    "Blocks the fs tier was asked to store, by result: written, already_present, skipped, rejected_full."
}
family! {
    FS_LOADS, "kvtier_fs_loads_total", Counter, Tier,
    "Blocks the fs tier loaded."
}
family! {
    FS_JOBS_FAILED, "kvtier_fs_jobs_failed_total", Counter, Tier,
    "Jobs the fs tier reported failed."
}
family! {
    FS_CORRUPT_REMOVED, "kvtier_fs_corrupt_blocks_removed_total", Counter, Tier,
    "Block files removed because they were damaged (truncated, bad header, bad checksum)."
}
family! {
    FS_UNREADABLE_DROPPED, "kvtier_fs_unreadable_blocks_dropped_total", Counter, Tier,
    "Blocks dropped from the index because they could not be read (permission denied, an I/O error, a foreign entry under the block's name); their files stay on disk untouched."
}
family! {
    FS_FOUND_MISSING, "kvtier_fs_blocks_found_missing_total", Counter, Tier,
    "Blocks whose file had disappeared when they were read."
}
family! {
    FS_EXPIRED, "kvtier_fs_blocks_expired_total", Counter, Tier,
    "Blocks removed because they were stored longer ago than the tier's max_age_ms."
}
family! {
    FS_REMOVAL_ERRORS, "kvtier_fs_removal_errors_total", Counter, Tier,
    "Block files the fs tier failed to remove."
}
family! {
    FS_IO_BYTES, "kvtier_fs_io_bytes_total", Counter, Tier, "op",
    "Bytes the fs tier read and wrote, by op."
}
family! {
    FS_IO_SECONDS, "kvtier_fs_io_seconds_total", Counter, Tier, "op",
    "Time the fs tier's workers spent reading and writing block files, by op."
}
family! {
    FS_RESTART_BLOCKS, "kvtier_fs_restart_blocks_total", Counter, Tier,
    "Blocks found in the directory at restart: loaded from the index persisted at the last clean shutdown, or found by the restart scan (it runs in the background after the tier opens)."
}
family! {
    FS_RESTART_FILES, "kvtier_fs_restart_files_total", Counter, Tier, "action",
    "Files the restart scan did not take as blocks, by action: skipped, removed (damaged), temp_removed (unfinished writes), unreadable (left on disk), foreign (symlinks, FIFOs, sockets, devices under the tier's names: never followed, left alone)."
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::super::FsOptions;
    use super::super::format::file_len;
    use super::*;
    use crate::key::Key;
    use crate::region::SlotMemory;
    use crate::tiering::{Direction, Job, JobId, SecondaryTier};

    #[test]
    fn time_is_counted_in_nanoseconds_and_reported_in_whole_microseconds() {
        let t = Nanos::default();
        assert_eq!(t.counter_value(), 0);
        t.add(2_500_000);
        assert_eq!(t.counter_value(), 2_500);
        t.add(999);
        assert_eq!(t.counter_value(), 2_500, "the total is rounded down");
        t.add(1);
        assert_eq!(t.counter_value(), 2_501);
    }

    #[test]
    fn an_opened_tier_starts_from_what_its_opening_scan_found() {
        let scan = super::super::RebuildReport {
            blocks: 11,
            skipped: 12,
            removed: 13,
            temp_removed: 14,
            evicted: 15,
            unreadable: 16,
            foreign: 17,
            ..Default::default()
        };
        let s = FsStats::opened(&scan);
        let got: Vec<(String, f64)> = s
            .stat_list()
            .into_iter()
            .map(|st| (st.name.to_string(), st.value))
            .filter(|(_, v)| *v != 0.0)
            .collect();
        let got: Vec<(&str, f64)> = got.iter().map(|(n, v)| (n.as_str(), *v)).collect();
        assert_eq!(
            got,
            [
                ("evictions", 15.0),
                ("restart_blocks", 11.0),
                ("restart_skipped_files", 12.0),
                ("restart_removed_files", 13.0),
                ("restart_temp_removed", 14.0),
                ("restart_unreadable_files", 16.0),
                ("restart_foreign_entries", 17.0),
            ]
        );
    }

    #[test]
    fn each_statistic_reports_its_own_source() {
        let dir = tempfile::tempdir().unwrap();
        let slots = SlotMemory::anonymous(8, 4096).unwrap();
        let opts = FsOptions {
            capacity_bytes: 100 * file_len(4096),
            ..FsOptions::new(dir.path())
        };
        let mut t = FsTier::open(slots, opts).unwrap();
        t.set_event_capacity(1);
        t.submit_store(Arc::new(Job {
            id: JobId(1),
            direction: Direction::Store,
            keys: (0..2u8).map(|i| Key::new(&[i]).unwrap()).collect(),
            slots: vec![0, 1],
            request: Default::default(),
        }));
        t.drain().unwrap();
        t.poll_finished(16, &mut Vec::new());
        // The gauges are read from their sources whenever the statistics
        // are: stale values left in the counters are overwritten.
        let c = &t.counts;
        for gauge in [&c.bytes_used, &c.capacity_bytes, &c.blocks, &c.direct_io] {
            gauge.set(999);
        }
        c.events_dropped.set(999);
        c.events_queued.set(999);
        let got: Vec<(String, f64)> = t
            .stats()
            .iter()
            .map(|s| (s.name.to_string(), s.value))
            .collect();
        let value = |name: &str| {
            got.iter()
                .find(|(n, _)| n == name)
                .unwrap_or_else(|| panic!("{name} missing"))
                .1
        };
        let expected = [
            ("bytes_used", (2 * file_len(4096)) as f64),
            ("capacity_bytes", (100 * file_len(4096)) as f64),
            ("blocks", 2.0),
            ("direct_io", if t.direct_io() { 1.0 } else { 0.0 }),
            ("events_dropped", 1.0),
            ("events_queued", 1.0),
            ("stores_written", 2.0),
            ("write_bytes", (2 * 4096) as f64),
        ];
        for (name, v) in expected {
            assert_eq!(value(name), v, "{name}");
        }
        // Then a counter per cause, named as the table declares it.
        let causes: Vec<&str> = got[got.len() - Cause::ALL.len()..]
            .iter()
            .map(|(n, _)| n.as_str())
            .collect();
        let declared: Vec<&str> = FS_STATS[FS_STATS.len() - Cause::ALL.len()..]
            .iter()
            .map(|e| e.stat)
            .collect();
        assert_eq!(causes, declared);
    }
}
