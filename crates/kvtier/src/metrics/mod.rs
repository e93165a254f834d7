//! Prometheus text exposition (format 0.0.4) of a manager's statistics.
//!
//! Every statistic kvtier knows has a family in [`catalogue`]: a name that
//! follows the Prometheus conventions, a type, a `# HELP` text, and the
//! labels that tell its series apart (`tier` and `medium` for a tier's,
//! `reason`, `cause`, `direction`, ... where one concept has several
//! values).  Statistics a tier reports that kvtier does not know (a C or
//! C++ tier's own, or a Rust tier's from outside the crate) keep their
//! names under the `kvtier_custom_` prefix, so they never collide with a
//! built-in family.  Every family is listed in the project's
//! docs/metrics.md.
//!
//! Where things are: this file decides which family and labels each
//! statistic gets ([`exposition`]); `text.rs` writes the text format
//! (each family and series once, escapes); [`catalogue`] holds the
//! families and the tables that map statistics to them; `server.rs` and
//! `http.rs` the HTTP endpoint that serves the text.

pub mod catalogue;
mod http;
pub mod server;
mod text;

use std::borrow::Cow;
use std::fmt::Write;
use std::sync::Arc;

use catalogue::{Entry, Family, FamilyType, Scope};
use text::{Builder, escape_label};

use crate::request::Medium;
use crate::stats::{Stat, StatKind};

/// The prefix of the families of statistics kvtier does not know.
pub const CUSTOM_PREFIX: &str = "kvtier_custom_";

/// Which built-in statistics a secondary tier's own report holds, so the
/// exposition can give them their families ([`catalogue::FS`],
/// [`catalogue::REDIS`], [`catalogue::VTABLE`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BuiltinStats {
    /// The built-in fs tier's.
    Fs,
    /// The built-in redis tier's.
    Redis,
    /// A tier behind the C vtable: its `callback_errors` and
    /// `events_rejected`, then whatever its own `stats` callback reports
    /// (under [`CUSTOM_PREFIX`]).
    Vtable,
}

/// Where a group of statistics comes from, which decides their families.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StatSource {
    /// The manager's own ([`crate::tiering::ManagerStats`] and its
    /// histograms).
    Manager,
    /// The primary tier's.
    Primary,
    /// The manager's counters for one secondary tier.
    TierManaged,
    /// A secondary tier's own report: built-in statistics if it says
    /// which, anything else under [`CUSTOM_PREFIX`].
    TierOwn(Option<BuiltinStats>),
}

/// One source's statistics, with the tier they belong to.
#[derive(Clone, Debug)]
pub struct MetricGroup {
    /// Where they come from.
    pub source: StatSource,
    /// The tier's number (0 the primary tier), `None` for the manager's own.
    pub tier: Option<usize>,
    /// The tier's name ("primary" for the primary tier, "manager" for the
    /// manager's own).
    pub tier_name: Arc<str>,
    /// The tier's medium, if it declared one (the primary tier is CPU memory).
    pub medium: Option<Medium>,
    /// The statistics.
    pub stats: Vec<Stat>,
}

/// The value of the `medium` label: `cpu`, `storage`, or `any` for a
/// tier that declared none.
pub(crate) fn medium_label(medium: Option<Medium>) -> &'static str {
    match medium {
        Some(Medium::Cpu) => "cpu",
        Some(Medium::Storage) => "storage",
        None => "any",
    }
}

fn family_type(kind: StatKind) -> FamilyType {
    match kind {
        StatKind::Counter => FamilyType::Counter,
        StatKind::Gauge => FamilyType::Gauge,
        StatKind::HistogramBucket { .. } | StatKind::HistogramSum | StatKind::HistogramCount => {
            FamilyType::Histogram
        }
    }
}

/// `kvtier_custom_<name>`, characters outside `[a-zA-Z0-9_]` written `_`,
/// counters ending in `_total` (once).
fn custom_family_name(name: &str, ty: FamilyType) -> String {
    let mut family = String::with_capacity(CUSTOM_PREFIX.len() + name.len() + 6);
    family.push_str(CUSTOM_PREFIX);
    for c in name.chars() {
        family.push(if c.is_ascii_alphanumeric() || c == '_' {
            c
        } else {
            '_'
        });
    }
    if ty == FamilyType::Counter && !family.ends_with("_total") {
        family.push_str("_total");
    }
    family
}

/// The labels of one series: the tier's (by the family's scope), then the
/// family's own label.
fn series_labels(family: &Family, label_value: Option<&str>, tier: &str, medium: &str) -> String {
    let mut labels = String::new();
    match family.scope {
        Scope::Manager => {}
        Scope::ManagerByTier => {
            let _ = write!(
                labels,
                "tier=\"{}\"",
                escape_label(label_value.unwrap_or(tier))
            );
            return labels;
        }
        Scope::Tier => {
            let _ = write!(
                labels,
                "tier=\"{}\",medium=\"{medium}\"",
                escape_label(tier)
            );
        }
    }
    if let (Some(name), Some(value)) = (family.label, label_value) {
        if !labels.is_empty() {
            labels.push(',');
        }
        let _ = write!(labels, "{name}=\"{}\"", escape_label(value));
    }
    labels
}

fn table_of(source: StatSource) -> Option<&'static [Entry]> {
    match source {
        StatSource::Manager => Some(catalogue::MANAGER),
        StatSource::Primary => Some(catalogue::PRIMARY),
        StatSource::TierManaged => Some(catalogue::TIER_MANAGED),
        StatSource::TierOwn(Some(BuiltinStats::Fs)) => Some(catalogue::FS),
        StatSource::TierOwn(Some(BuiltinStats::Redis)) => Some(catalogue::REDIS),
        StatSource::TierOwn(Some(BuiltinStats::Vtable)) => Some(catalogue::VTABLE),
        StatSource::TierOwn(None) => None,
    }
}

/// The `tier` label of each group: the tier's name, or `name#index` when
/// two tiers share a name.
fn tier_labels(groups: &[MetricGroup]) -> Vec<Cow<'_, str>> {
    groups
        .iter()
        .map(|g| {
            let shared = groups
                .iter()
                .any(|o| o.tier != g.tier && o.tier.is_some() && o.tier_name == g.tier_name);
            match g.tier {
                Some(t) if shared => Cow::Owned(format!("{}#{t}", g.tier_name)),
                _ => Cow::Borrowed(g.tier_name.as_ref()),
            }
        })
        .collect()
}

/// Writes `groups` in the Prometheus text format (version 0.0.4): per
/// family, in the order families first appear, a `# HELP` and a `# TYPE`
/// line, then its samples (a histogram's cumulative `_bucket{le=...}`
/// samples up to `le="+Inf"`, then `_sum` and `_count`, per tier).
///
/// A statistic kvtier knows goes to its family in [`catalogue`] (only its
/// first occurrence in a group: a C tier's own statistic named like one of
/// the vtable's built-in ones is the tier's); any other goes to
/// `kvtier_custom_<name>` (`_total` for a counter) with `tier` and
/// `medium` labels.  A custom statistic whose family would take a name
/// another family has, or repeat a series already written, is left out
/// (it stays readable with `kvtier_manager_read_tier_stats`).  So every
/// family name is unique, and so is every series.
pub fn exposition(groups: &[MetricGroup]) -> String {
    let labels = tier_labels(groups);
    let mut b = Builder::default();
    for (g, tier) in groups.iter().zip(&labels) {
        let medium = match g.source {
            StatSource::Primary => "cpu",
            _ => medium_label(g.medium),
        };
        let table = table_of(g.source);
        let mut used: Vec<&'static str> = Vec::new();
        for stat in &g.stats {
            let ty = family_type(stat.kind);
            let known = table
                .and_then(|t| catalogue::find(t, &stat.name))
                .filter(|e| e.family.ty == ty)
                .filter(|e| {
                    // A histogram's series share one entry.
                    ty == FamilyType::Histogram || !used.contains(&e.stat)
                });
            if let Some(e) = known {
                if ty != FamilyType::Histogram {
                    used.push(e.stat);
                }
                let Some(f) = b.family(Cow::Borrowed(e.family.name), ty, || {
                    Cow::Borrowed(e.family.help)
                }) else {
                    continue;
                };
                let l = series_labels(e.family, e.label_value, tier, medium);
                let (kind, value) = scaled(stat, e.scale);
                b.sample(f, l, kind, value);
                continue;
            }
            let name = custom_family_name(&stat.name, ty);
            let Some(f) = b.family(Cow::Owned(name), ty, || {
                Cow::Owned(format!(
                    "Statistic \"{}\" the tier reports itself (see the tier's documentation).",
                    stat.name
                ))
            }) else {
                continue;
            };
            let l = format!("tier=\"{}\",medium=\"{medium}\"", escape_label(tier));
            b.sample(f, l, stat.kind, stat.value);
        }
    }
    b.render()
}

/// The stat's kind and value in the family's unit (a bucket's bound
/// scales with its values; its count does not).
fn scaled(stat: &Stat, scale: f64) -> (StatKind, f64) {
    if scale == 1.0 {
        return (stat.kind, stat.value);
    }
    match stat.kind {
        StatKind::HistogramBucket { le } => {
            (StatKind::HistogramBucket { le: le * scale }, stat.value)
        }
        StatKind::HistogramCount => (stat.kind, stat.value),
        _ => (stat.kind, stat.value * scale),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    fn group(source: StatSource, tier: Option<usize>, name: &str, stats: Vec<Stat>) -> MetricGroup {
        MetricGroup {
            source,
            tier,
            tier_name: Arc::from(name),
            medium: Some(Medium::Storage),
            stats,
        }
    }

    #[test]
    fn every_family_has_help_and_type_and_known_statistics_their_names() {
        let text = exposition(&[
            group(
                StatSource::Manager,
                None,
                "manager",
                vec![
                    Stat::counter("lookups", 3),
                    Stat::counter("misses_no_room", 1),
                ],
            ),
            group(
                StatSource::Primary,
                Some(0),
                "primary",
                vec![Stat::counter("evictions", 5), Stat::gauge("usage", 0.5)],
            ),
            group(
                StatSource::TierOwn(Some(BuiltinStats::Fs)),
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
                StatSource::Manager,
                None,
                "manager",
                vec![Stat::counter("primary_hits", 7)],
            ),
            group(
                StatSource::TierManaged,
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
                StatSource::TierOwn(Some(BuiltinStats::Vtable)),
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
                StatSource::TierOwn(None),
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
                StatSource::TierManaged,
                Some(1),
                "fs",
                vec![Stat::counter("lookups", 1)],
            ),
            group(
                StatSource::TierManaged,
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
            group(StatSource::Primary, Some(0), "primary", primary),
            group(StatSource::TierOwn(None), Some(1), "mem", other),
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
        let text = exposition(&[group(StatSource::TierOwn(None), Some(1), "t", stats)]);
        assert_eq!(text.matches("# TYPE ").count(), 1, "{text}");
        assert!(!text.contains(" 5\n"), "{text}");
    }

    #[test]
    fn names_are_sanitized_help_escaped_and_special_values_spelled() {
        let s = vec![
            Stat::gauge("read-latency.ms\\x", f64::NAN),
            Stat::gauge("x", f64::INFINITY),
        ];
        let text = exposition(&[group(StatSource::TierOwn(None), Some(1), "t", s)]);
        assert!(
            text.contains("kvtier_custom_read_latency_ms_x{tier=\"t\",medium=\"storage\"} NaN"),
            "{text}"
        );
        assert!(
            text.contains(
                "# HELP kvtier_custom_read_latency_ms_x Statistic \"read-latency.ms\\\\x\""
            ),
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
        for table in catalogue::TABLES {
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
}
