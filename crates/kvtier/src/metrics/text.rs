//! Writing the text format: each family once, with the sample names it
//! writes (and those parsers give it) reserved so no other family takes
//! them, each series once, samples grouped under their family's `# HELP`
//! and `# TYPE` lines, help texts, label values and special values
//! escaped and spelled as the format wants.  Which family a statistic goes
//! to is decided above, in the module's `exposition`.

use std::borrow::Cow;
use std::collections::{HashMap, HashSet};
use std::fmt::Write;

use crate::stats::FamilyType;
use crate::stats::StatKind;

/// A family being written: a built-in one, or one made for a statistic
/// kvtier does not know.
struct FamilyOut {
    name: Cow<'static, str>,
    ty: FamilyType,
    help: Cow<'static, str>,
}

struct Sample {
    family: usize,
    labels: String,
    kind: StatKind,
    value: f64,
}

/// Collects the families and samples of an exposition.
#[derive(Default)]
pub(super) struct Builder {
    families: Vec<FamilyOut>,
    by_name: HashMap<String, usize>,
    /// Every sample name (a family's name, and a histogram's `_bucket`,
    /// `_sum`, `_count`; a counter's name without `_total`) taken, with the
    /// family that took it.
    taken: HashMap<String, usize>,
    series: HashSet<(usize, String, u64)>,
    samples: Vec<Sample>,
}

/// The sample names a family of `name` and `ty` writes or that parsers
/// give it.
fn reserved_names(name: &str, ty: FamilyType) -> Vec<String> {
    match ty {
        FamilyType::Counter => {
            let base = name.strip_suffix("_total").unwrap_or(name);
            vec![base.to_string(), format!("{base}_total")]
        }
        FamilyType::Gauge => vec![name.to_string()],
        FamilyType::Histogram => vec![
            name.to_string(),
            format!("{name}_bucket"),
            format!("{name}_sum"),
            format!("{name}_count"),
        ],
    }
}

impl Builder {
    /// The index of family `name`, registering it; `None` when its name,
    /// or a sample name it would write, belongs to another family or the
    /// family exists with another type.
    pub(super) fn family(
        &mut self,
        name: Cow<'static, str>,
        ty: FamilyType,
        help: impl FnOnce() -> Cow<'static, str>,
    ) -> Option<usize> {
        if let Some(&i) = self.by_name.get(name.as_ref()) {
            return (self.families[i].ty == ty).then_some(i);
        }
        let reserved = reserved_names(&name, ty);
        if reserved.iter().any(|n| self.taken.contains_key(n)) {
            return None;
        }
        let i = self.families.len();
        for n in reserved {
            self.taken.insert(n, i);
        }
        self.by_name.insert(name.to_string(), i);
        self.families.push(FamilyOut {
            name,
            ty,
            help: help(),
        });
        Some(i)
    }

    /// Adds one sample; a series written already (same family, labels and
    /// histogram part) is left out.
    pub(super) fn sample(&mut self, family: usize, labels: String, kind: StatKind, value: f64) {
        let part = match kind {
            StatKind::HistogramBucket { le } => le.to_bits(),
            StatKind::HistogramSum => 1,
            StatKind::HistogramCount => 2,
            StatKind::Counter | StatKind::Gauge => 0,
        };
        if !self.series.insert((family, labels.clone(), part)) {
            return;
        }
        self.samples.push(Sample {
            family,
            labels,
            kind,
            value,
        });
    }

    pub(super) fn render(mut self) -> String {
        let mut out = String::with_capacity(self.samples.len() * 64 + self.families.len() * 160);
        self.samples.sort_by_key(|s| s.family);
        let mut next = 0;
        for (i, f) in self.families.iter().enumerate() {
            let _ = writeln!(out, "# HELP {} {}", f.name, escape_help(&f.help));
            let _ = writeln!(out, "# TYPE {} {}", f.name, f.ty.as_str());
            while next < self.samples.len() && self.samples[next].family == i {
                let s = &self.samples[next];
                next += 1;
                let (suffix, le) = match s.kind {
                    StatKind::HistogramBucket { le } => ("_bucket", Some(le)),
                    StatKind::HistogramSum => ("_sum", None),
                    StatKind::HistogramCount => ("_count", None),
                    StatKind::Counter | StatKind::Gauge => ("", None),
                };
                out.push_str(&f.name);
                out.push_str(suffix);
                match (s.labels.is_empty(), le) {
                    (true, None) => {}
                    (false, None) => {
                        let _ = write!(out, "{{{}}}", s.labels);
                    }
                    (true, Some(le)) => {
                        let _ = write!(out, "{{le=\"{}\"}}", format_value(le));
                    }
                    (false, Some(le)) => {
                        let _ = write!(out, "{{{},le=\"{}\"}}", s.labels, format_value(le));
                    }
                }
                let _ = writeln!(out, " {}", format_value(s.value));
            }
        }
        out
    }
}

fn escape_help(text: &str) -> Cow<'_, str> {
    if !text.contains(['\\', '\n']) {
        return Cow::Borrowed(text);
    }
    Cow::Owned(text.replace('\\', "\\\\").replace('\n', "\\n"))
}

pub(super) fn escape_label(value: &str) -> Cow<'_, str> {
    if !value.contains(['\\', '"', '\n']) {
        return Cow::Borrowed(value);
    }
    let mut out = String::with_capacity(value.len() + 2);
    for c in value.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '"' => out.push_str("\\\""),
            '\n' => out.push_str("\\n"),
            c => out.push(c),
        }
    }
    Cow::Owned(out)
}

fn format_value(v: f64) -> String {
    if v.is_nan() {
        "NaN".into()
    } else if v.is_infinite() {
        if v > 0.0 { "+Inf" } else { "-Inf" }.into()
    } else {
        format!("{v}")
    }
}
