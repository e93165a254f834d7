//! The exposition of the catalogue's families: which family and labels
//! each component's statistics get, and the families' own rules.

use std::collections::HashMap;
use std::sync::Arc;

use super::TABLES;
use crate::metrics::{CUSTOM_PREFIX, MetricGroup, exposition};
use crate::primary::PRIMARY_STATS;
use crate::request::Medium;
use crate::stats::{Family, FamilyType, Scope, Stat, StatTable};
use crate::tiering::{ADAPTER_STATS, MANAGER_STATS, TIER_MANAGED_STATS};
use crate::tiers::fs::FS_STATS;
fn group(
    table: Option<StatTable>,
    tier: Option<usize>,
    name: &str,
    stats: Vec<Stat>,
) -> MetricGroup {
    MetricGroup {
        table,
        tier,
        tier_name: Arc::from(name),
        // As the manager does: the primary tier is CPU memory.
        medium: Some(if name == "primary" {
            Medium::Cpu
        } else {
            Medium::Storage
        }),
        stats,
    }
}

#[test]
fn every_family_has_help_and_type_and_known_statistics_their_names() {
    let text = exposition(&[
        group(
            Some(MANAGER_STATS),
            None,
            "manager",
            vec![
                Stat::counter("lookups", 3),
                Stat::counter("misses_no_room", 1),
            ],
        ),
        group(
            Some(PRIMARY_STATS),
            Some(0),
            "primary",
            vec![Stat::counter("evictions", 5), Stat::gauge("usage", 0.5)],
        ),
        group(
            Some(FS_STATS),
            Some(1),
            "fs \"a\"",
            vec![
                Stat::counter("evictions", 2),
                Stat::counter("read_time_us", 1500),
            ],
        ),
    ]);
    let expected = "\
# HELP kvtier_manager_lookups_total Keys looked up (a batched lookup counts the keys it looked at, up to the one it stopped at).
# TYPE kvtier_manager_lookups_total counter
kvtier_manager_lookups_total 3
# HELP kvtier_manager_lookup_misses_total Keys a lookup answered MISS, by reason: absent (no tier has the key, or none was asked), no_room (a secondary tier has it, but the primary tier did not take its promotion) or timed_out (the request waited past the bound for it).
# TYPE kvtier_manager_lookup_misses_total counter
kvtier_manager_lookup_misses_total{reason=\"no_room\"} 1
# HELP kvtier_tier_evictions_total Blocks the tier evicted to make room.
# TYPE kvtier_tier_evictions_total counter
kvtier_tier_evictions_total{tier=\"primary\",medium=\"cpu\"} 5
kvtier_tier_evictions_total{tier=\"fs \\\"a\\\"\",medium=\"storage\"} 2
# HELP kvtier_primary_usage_ratio (write pending + pinned) / capacity: the share of slots neither free nor evictable.
# TYPE kvtier_primary_usage_ratio gauge
kvtier_primary_usage_ratio{tier=\"primary\",medium=\"cpu\"} 0.5
# HELP kvtier_fs_io_seconds_total Time the fs tier's workers spent reading and writing block files, by op.
# TYPE kvtier_fs_io_seconds_total counter
kvtier_fs_io_seconds_total{tier=\"fs \\\"a\\\"\",medium=\"storage\",op=\"read\"} 0.0015
";
    assert_eq!(text, expected);
}

#[test]
fn lookup_hits_are_one_family_by_tier() {
    let text = exposition(&[
        group(
            Some(MANAGER_STATS),
            None,
            "manager",
            vec![Stat::counter("primary_hits", 7)],
        ),
        group(
            Some(TIER_MANAGED_STATS),
            Some(1),
            "fs",
            vec![Stat::counter("promotions_started", 2)],
        ),
    ]);
    assert!(
        text.contains("kvtier_manager_lookup_hits_total{tier=\"primary\"} 7\n"),
        "{text}"
    );
    assert!(
        text.contains("kvtier_manager_lookup_hits_total{tier=\"fs\"} 2\n"),
        "{text}"
    );
    assert_eq!(
        text.matches("# TYPE kvtier_manager_lookup_hits_total")
            .count(),
        1
    );
}

#[test]
fn a_tiers_own_statistics_kvtier_does_not_know_go_under_their_own_prefix() {
    let text = exposition(&[
        group(
            Some(ADAPTER_STATS),
            Some(1),
            "c",
            vec![
                Stat::counter("callback_errors", 1),
                Stat::counter("events_rejected", 0),
                // The tier's own, named like a built-in one.
                Stat::counter("callback_errors", 9),
                Stat::gauge("queue.depth", 4.0),
                // A counter and a gauge of one name: the second is left out.
                Stat::counter("hits", 3),
                Stat::gauge("hits", 1.0),
                Stat::counter("hits_total", 8),
            ],
        ),
        group(
            None,
            Some(2),
            "rust",
            vec![Stat::gauge("hits", 2.0), Stat::counter("hits", 5)],
        ),
    ]);
    assert!(
        text.contains("kvtier_tier_callback_errors_total{tier=\"c\",medium=\"storage\"} 1\n"),
        "{text}"
    );
    assert!(
        text.contains("kvtier_custom_callback_errors_total{tier=\"c\",medium=\"storage\"} 9\n"),
        "{text}"
    );
    assert!(
        text.contains("kvtier_custom_queue_depth{tier=\"c\",medium=\"storage\"} 4\n"),
        "{text}"
    );
    assert!(
        text.contains("kvtier_custom_hits_total{tier=\"c\",medium=\"storage\"} 3\n"),
        "{text}"
    );
    assert!(
        text.contains("kvtier_custom_hits_total{tier=\"rust\",medium=\"storage\"} 5\n"),
        "{text}"
    );
    assert!(!text.contains("kvtier_custom_hits{"), "{text}");
    assert!(!text.contains("} 8\n"), "{text}");
    assert_eq!(text.matches("# TYPE ").count(), 5, "{text}");
    assert_eq!(text.matches("# HELP ").count(), 5, "{text}");
}

#[test]
fn tiers_sharing_a_name_are_told_apart_by_number() {
    let text = exposition(&[
        group(
            Some(TIER_MANAGED_STATS),
            Some(1),
            "fs",
            vec![Stat::counter("lookups", 1)],
        ),
        group(
            Some(TIER_MANAGED_STATS),
            Some(2),
            "fs",
            vec![Stat::counter("lookups", 2)],
        ),
    ]);
    assert!(
        text.contains("{tier=\"fs#1\",medium=\"storage\"} 1\n"),
        "{text}"
    );
    assert!(
        text.contains("{tier=\"fs#2\",medium=\"storage\"} 2\n"),
        "{text}"
    );
}

fn histogram(name: &'static str, sizes: &[f64]) -> Vec<Stat> {
    static BOUNDS: [f64; 3] = [1.0, 4.0, f64::INFINITY];
    let mut h = crate::histogram::Histogram::new(&BOUNDS);
    for &v in sizes {
        h.record(v);
    }
    let mut out = Vec::new();
    h.push_stats(name, &mut out);
    out
}

#[test]
fn a_histogram_is_one_family_with_buckets_sum_and_count_per_tier() {
    let mut primary = histogram("allocation_size_blocks", &[1.0, 3.0, 9.0]);
    primary.push(Stat::counter("evictions", 2));
    let other = histogram("sizes", &[2.0]);
    let text = exposition(&[
        group(Some(PRIMARY_STATS), Some(0), "primary", primary),
        group(None, Some(1), "mem", other),
    ]);
    let expected = "\
# HELP kvtier_primary_allocation_size_blocks Keys to store per prepare_store call that had any (refused calls included).
# TYPE kvtier_primary_allocation_size_blocks histogram
kvtier_primary_allocation_size_blocks_bucket{tier=\"primary\",medium=\"cpu\",le=\"1\"} 1
kvtier_primary_allocation_size_blocks_bucket{tier=\"primary\",medium=\"cpu\",le=\"4\"} 2
kvtier_primary_allocation_size_blocks_bucket{tier=\"primary\",medium=\"cpu\",le=\"+Inf\"} 3
kvtier_primary_allocation_size_blocks_sum{tier=\"primary\",medium=\"cpu\"} 13
kvtier_primary_allocation_size_blocks_count{tier=\"primary\",medium=\"cpu\"} 3
# HELP kvtier_tier_evictions_total Blocks the tier evicted to make room.
# TYPE kvtier_tier_evictions_total counter
kvtier_tier_evictions_total{tier=\"primary\",medium=\"cpu\"} 2
# HELP kvtier_custom_sizes Statistic \"sizes\" the tier reports itself (see the tier's documentation).
# TYPE kvtier_custom_sizes histogram
kvtier_custom_sizes_bucket{tier=\"mem\",medium=\"storage\",le=\"1\"} 0
kvtier_custom_sizes_bucket{tier=\"mem\",medium=\"storage\",le=\"4\"} 1
kvtier_custom_sizes_bucket{tier=\"mem\",medium=\"storage\",le=\"+Inf\"} 1
kvtier_custom_sizes_sum{tier=\"mem\",medium=\"storage\"} 2
kvtier_custom_sizes_count{tier=\"mem\",medium=\"storage\"} 1
";
    assert_eq!(text, expected);
}

#[test]
fn a_custom_gauge_cannot_take_a_histograms_sample_name() {
    let mut stats = histogram("sizes", &[2.0]);
    stats.push(Stat::gauge("sizes_count", 5.0));
    let text = exposition(&[group(None, Some(1), "t", stats)]);
    assert_eq!(text.matches("# TYPE ").count(), 1, "{text}");
    assert!(!text.contains(" 5\n"), "{text}");
}

#[test]
fn names_are_sanitized_help_escaped_and_special_values_spelled() {
    let s = vec![
        Stat::gauge("read-latency.ms\\x", f64::NAN),
        Stat::gauge("x", f64::INFINITY),
    ];
    let text = exposition(&[group(None, Some(1), "t", s)]);
    assert!(
        text.contains("kvtier_custom_read_latency_ms_x{tier=\"t\",medium=\"storage\"} NaN"),
        "{text}"
    );
    assert!(
        text.contains("# HELP kvtier_custom_read_latency_ms_x Statistic \"read-latency.ms\\\\x\""),
        "{text}"
    );
    assert!(
        text.contains("kvtier_custom_x{tier=\"t\",medium=\"storage\"} +Inf"),
        "{text}"
    );
}

#[test]
fn catalogue_families_are_unique_and_typed_by_their_names() {
    let mut seen: HashMap<&str, &Family> = HashMap::new();
    for table in TABLES {
        for e in table.iter() {
            let f = e.family;
            if let Some(other) = seen.insert(f.name, f) {
                assert!(std::ptr::eq(other, f), "two families named {}", f.name);
            }
            assert!(f.name.starts_with("kvtier_"), "{}", f.name);
            assert!(!f.name.starts_with(CUSTOM_PREFIX), "{}", f.name);
            assert_eq!(
                f.name.ends_with("_total"),
                f.ty == FamilyType::Counter,
                "{}: _total on counters only",
                f.name
            );
            assert!(!f.help.is_empty(), "{}", f.name);
            assert_eq!(
                f.label.is_some(),
                e.label_value.is_some() && f.scope != Scope::ManagerByTier,
                "{} ({}): a labelled family's entries say its label",
                f.name,
                e.stat
            );
        }
        for (i, e) in table.iter().enumerate() {
            assert!(
                table[..i].iter().all(|o| o.stat != e.stat),
                "{} listed twice",
                e.stat
            );
        }
    }
}
