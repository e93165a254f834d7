//! Prometheus text exposition (format 0.0.4) of a manager's statistics.
//!
//! Every statistic kvtier knows has a family, declared by the component
//! that counts it (see [`crate::stats`]): a name that follows the
//! Prometheus conventions, a type, a `# HELP` text, and the labels that
//! tell its series apart (`tier` and `medium` for a tier's, `reason`,
//! `cause`, `direction`, ... where one concept has several values).  Each
//! group of statistics comes with its source's table of families
//! ([`StatTable`]); statistics a table does not list (a C or C++ tier's
//! own, or a Rust tier's from outside the crate) keep their names under
//! the `kvtier_custom_` prefix, so they never collide with a built-in
//! family.  Every family is listed in the project's docs/metrics.md.
//!
//! Where things are: this file decides which family and labels each
//! statistic gets ([`exposition`]); `text.rs` writes the text format
//! (each family and series once, escapes).  The HTTP endpoint that serves
//! the text is [`crate::serve`], above the manager.

mod text;

use std::borrow::Cow;
use std::fmt::Write;
use std::sync::Arc;

use text::{Builder, escape_label};

use crate::request::Medium;
use crate::stats::{Family, FamilyType, Scope, Stat, StatKind, StatTable};

/// The prefix of the families of statistics kvtier does not know.
pub const CUSTOM_PREFIX: &str = "kvtier_custom_";

/// One source's statistics, with the tier they belong to.
#[derive(Clone, Debug)]
pub struct MetricGroup {
    /// The families of the statistics their source declared (`None`: every
    /// statistic under [`CUSTOM_PREFIX`]).
    pub table: Option<StatTable>,
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
/// A statistic the group's table lists goes to its family (only its
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
        let medium = medium_label(g.medium);
        let table = g.table;
        let mut used: Vec<&'static str> = Vec::new();
        for stat in &g.stats {
            let ty = family_type(stat.kind);
            let known = table
                .and_then(|t| crate::stats::find(t, &stat.name))
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
