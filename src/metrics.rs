//! Prometheus text exposition of every tier's statistics.
//!
//! Names follow Prometheus conventions: a `kvtier_` prefix, snake case,
//! counters ending in `_total`, and a `tier` label naming the tier, so one
//! family holds the same statistic of every tier.

use std::fmt::Write;

use crate::stats::{Stat, StatKind};

/// One tier's statistics and the label value that names it.
#[derive(Debug, Clone, Copy)]
pub struct TierStats<'a> {
    /// The `tier` label value ("primary", "fs", ...).
    pub tier: &'a str,
    /// The tier's statistics.
    pub stats: &'a [Stat],
}

/// Renders `groups` in the Prometheus text format (version 0.0.4): one
/// `# TYPE` line per family, then each tier's samples, families in the
/// order they first appear.  A name used as a counter by one tier and a
/// gauge by another is emitted under two families (`_total` and plain).
/// A histogram (the [`StatKind::HistogramBucket`], [`StatKind::HistogramSum`]
/// and [`StatKind::HistogramCount`] series of one name) is one
/// `histogram` family: per tier, its cumulative `_bucket{le="..."}`
/// samples up to `le="+Inf"`, then `_sum` and `_count`.
pub fn prometheus_text(groups: &[TierStats<'_>]) -> String {
    let mut families: Vec<(String, StatKind)> = Vec::new();
    for group in groups {
        for stat in group.stats {
            let name = family_name(&stat.name, stat.kind);
            if !families.iter().any(|(n, _)| *n == name) {
                families.push((name, stat.kind));
            }
        }
    }
    let mut out = String::new();
    for (family, kind) in &families {
        let type_name = match kind {
            StatKind::Counter => "counter",
            StatKind::Gauge => "gauge",
            StatKind::HistogramBucket { .. }
            | StatKind::HistogramSum
            | StatKind::HistogramCount => "histogram",
        };
        let _ = writeln!(out, "# TYPE {family} {type_name}");
        for group in groups {
            for stat in group.stats {
                if family_name(&stat.name, stat.kind) != *family {
                    continue;
                }
                let tier = escape_label(group.tier);
                let value = format_value(stat.value);
                let _ = match stat.kind {
                    StatKind::Counter | StatKind::Gauge => {
                        writeln!(out, "{family}{{tier=\"{tier}\"}} {value}")
                    }
                    StatKind::HistogramBucket { le } => writeln!(
                        out,
                        "{family}_bucket{{tier=\"{tier}\",le=\"{}\"}} {value}",
                        format_value(le)
                    ),
                    StatKind::HistogramSum => {
                        writeln!(out, "{family}_sum{{tier=\"{tier}\"}} {value}")
                    }
                    StatKind::HistogramCount => {
                        writeln!(out, "{family}_count{{tier=\"{tier}\"}} {value}")
                    }
                };
            }
        }
    }
    out
}

/// Renders a manager's merged statistics ([`crate::tiering::Manager::stats`])
/// with [`prometheus_text`]: one `tier` label per source ("manager",
/// "primary", then each secondary tier's name).  Two secondary tiers with
/// the same name are told apart by their index (`fs#1`, `fs#2`), and a
/// tier's own statistic whose name the manager already uses for that tier
/// (the fs tier's `hits` beside the manager's `hits` for it) is renamed
/// `tier_<name>`, so every series is unique.
pub fn manager_prometheus_text(stats: &[crate::tiering::ManagerStat]) -> String {
    let mut labels: Vec<(Option<usize>, String)> = Vec::new();
    let mut ranges: Vec<(usize, usize)> = Vec::new();
    for (i, s) in stats.iter().enumerate() {
        match labels.last() {
            Some((tier, _)) if *tier == s.tier => {
                if let Some(r) = ranges.last_mut() {
                    r.1 = i + 1;
                }
            }
            _ => {
                labels.push((s.tier, s.tier_name.to_string()));
                ranges.push((i, i + 1));
            }
        }
    }
    let names: Vec<String> = labels
        .iter()
        .map(|(tier, name)| {
            let shared = labels.iter().filter(|(_, n)| n == name).count() > 1;
            match tier {
                Some(t) if shared => format!("{name}#{t}"),
                _ => name.clone(),
            }
        })
        .collect();
    let owned: Vec<Vec<Stat>> = ranges
        .iter()
        .map(|&(a, b)| {
            let mut group: Vec<Stat> = Vec::with_capacity(b - a);
            for s in &stats[a..b] {
                let mut stat = s.stat.clone();
                // The series of one histogram share its family name.
                let taken = |n: &str, kind: StatKind| {
                    group.iter().any(|g| {
                        family_name(&g.name, g.kind) == family_name(n, kind)
                            && !(g.name == n
                                && g.kind.is_histogram()
                                && kind.is_histogram()
                                && g.kind != kind)
                    })
                };
                if taken(&stat.name, stat.kind) {
                    stat.name = format!("tier_{}", stat.name).into();
                }
                group.push(stat);
            }
            group
        })
        .collect();
    let groups: Vec<TierStats<'_>> = names
        .iter()
        .zip(owned.iter())
        .map(|(tier, stats)| TierStats { tier, stats })
        .collect();
    prometheus_text(&groups)
}

/// `kvtier_<name>` with characters outside `[a-zA-Z0-9_]` replaced by `_`,
/// and `_total` appended to counters that lack it (a histogram's family
/// name is its samples' name without `_bucket`, `_sum` or `_count`).
fn family_name(name: &str, kind: StatKind) -> String {
    let mut family = String::with_capacity(name.len() + 13);
    family.push_str("kvtier_");
    for c in name.chars() {
        family.push(if c.is_ascii_alphanumeric() || c == '_' {
            c
        } else {
            '_'
        });
    }
    if kind == StatKind::Counter && !family.ends_with("_total") {
        family.push_str("_total");
    }
    family
}

fn escape_label(value: &str) -> String {
    let mut out = String::with_capacity(value.len());
    for c in value.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '"' => out.push_str("\\\""),
            '\n' => out.push_str("\\n"),
            c => out.push(c),
        }
    }
    out
}

fn format_value(v: f64) -> String {
    if v.is_nan() {
        "NaN".into()
    } else if v.is_infinite() {
        if v > 0.0 {
            "+Inf".into()
        } else {
            "-Inf".into()
        }
    } else {
        format!("{v}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn families_group_tiers_and_follow_conventions() {
        let primary = [Stat::counter("evictions", 5), Stat::gauge("usage", 0.5)];
        let fs = [
            Stat::counter("evictions", 2),
            Stat::gauge("bytes_used", 4096.0),
        ];
        let text = prometheus_text(&[
            TierStats {
                tier: "primary",
                stats: &primary,
            },
            TierStats {
                tier: "fs \"a\"",
                stats: &fs,
            },
        ]);
        let expected = "# TYPE kvtier_evictions_total counter\n\
kvtier_evictions_total{tier=\"primary\"} 5\n\
kvtier_evictions_total{tier=\"fs \\\"a\\\"\"} 2\n\
# TYPE kvtier_usage gauge\n\
kvtier_usage{tier=\"primary\"} 0.5\n\
# TYPE kvtier_bytes_used gauge\n\
kvtier_bytes_used{tier=\"fs \\\"a\\\"\"} 4096\n";
        assert_eq!(text, expected);
    }

    #[test]
    fn manager_stats_become_unique_series() {
        use crate::tiering::ManagerStat;
        use std::sync::Arc;
        let st = |tier: Option<usize>, name: &str, stat: Stat| ManagerStat {
            tier,
            tier_name: Arc::from(name),
            stat,
        };
        let stats = [
            st(None, "manager", Stat::counter("lookups", 3)),
            st(Some(0), "primary", Stat::counter("evictions", 1)),
            st(Some(1), "fs", Stat::counter("hits", 2)),
            st(Some(1), "fs", Stat::counter("hits", 5)),
            st(Some(2), "fs", Stat::counter("hits", 7)),
        ];
        let text = manager_prometheus_text(&stats);
        let expected = "# TYPE kvtier_lookups_total counter\n\
kvtier_lookups_total{tier=\"manager\"} 3\n\
# TYPE kvtier_evictions_total counter\n\
kvtier_evictions_total{tier=\"primary\"} 1\n\
# TYPE kvtier_hits_total counter\n\
kvtier_hits_total{tier=\"fs#1\"} 2\n\
kvtier_hits_total{tier=\"fs#2\"} 7\n\
# TYPE kvtier_tier_hits_total counter\n\
kvtier_tier_hits_total{tier=\"fs#1\"} 5\n";
        assert_eq!(text, expected);
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
        let other = histogram("allocation_size_blocks", &[2.0]);
        let text = prometheus_text(&[
            TierStats {
                tier: "primary",
                stats: &primary,
            },
            TierStats {
                tier: "mem",
                stats: &other,
            },
        ]);
        let expected = "# TYPE kvtier_allocation_size_blocks histogram\n\
kvtier_allocation_size_blocks_bucket{tier=\"primary\",le=\"1\"} 1\n\
kvtier_allocation_size_blocks_bucket{tier=\"primary\",le=\"4\"} 2\n\
kvtier_allocation_size_blocks_bucket{tier=\"primary\",le=\"+Inf\"} 3\n\
kvtier_allocation_size_blocks_sum{tier=\"primary\"} 13\n\
kvtier_allocation_size_blocks_count{tier=\"primary\"} 3\n\
kvtier_allocation_size_blocks_bucket{tier=\"mem\",le=\"1\"} 0\n\
kvtier_allocation_size_blocks_bucket{tier=\"mem\",le=\"4\"} 1\n\
kvtier_allocation_size_blocks_bucket{tier=\"mem\",le=\"+Inf\"} 1\n\
kvtier_allocation_size_blocks_sum{tier=\"mem\"} 2\n\
kvtier_allocation_size_blocks_count{tier=\"mem\"} 1\n\
# TYPE kvtier_evictions_total counter\n\
kvtier_evictions_total{tier=\"primary\"} 2\n";
        assert_eq!(text, expected);
    }

    #[test]
    fn a_histogram_series_is_renamed_only_when_another_stat_takes_its_family() {
        use crate::tiering::ManagerStat;
        use std::sync::Arc;
        let mut own = histogram("sizes", &[2.0]);
        own.insert(0, Stat::gauge("sizes", 1.0));
        let stats: Vec<ManagerStat> = own
            .into_iter()
            .map(|stat| ManagerStat {
                tier: Some(1),
                tier_name: Arc::from("t"),
                stat,
            })
            .collect();
        let text = manager_prometheus_text(&stats);
        assert!(text.contains("# TYPE kvtier_sizes gauge\n"), "{text}");
        assert!(
            text.contains("# TYPE kvtier_tier_sizes histogram\n"),
            "{text}"
        );
        assert_eq!(
            text.matches("kvtier_tier_sizes_bucket{").count(),
            3,
            "{text}"
        );
        assert!(
            text.contains("kvtier_tier_sizes_count{tier=\"t\"} 1\n"),
            "{text}"
        );
    }

    #[test]
    fn names_are_sanitized_and_special_values_spelled() {
        let s = [
            Stat::gauge("read-latency.ms", f64::NAN),
            Stat::gauge("x", f64::INFINITY),
        ];
        let text = prometheus_text(&[TierStats {
            tier: "t",
            stats: &s,
        }]);
        assert!(
            text.contains("kvtier_read_latency_ms{tier=\"t\"} NaN"),
            "{text}"
        );
        assert!(text.contains("kvtier_x{tier=\"t\"} +Inf"), "{text}");
    }
}
