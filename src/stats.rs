//! Statistics as named values, so every tier reports in one shape and the
//! manager can merge and label them.

use std::borrow::Cow;

/// Whether a value only grows (a counter) or goes up and down (a gauge).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StatKind {
    /// Monotonic count since creation (Prometheus `_total`).
    Counter,
    /// Current level (sizes, usage fractions).
    Gauge,
}

/// One named statistic of one tier.
#[derive(Clone, Debug, PartialEq)]
pub struct Stat {
    /// Snake-case name without tier prefix, for example `evictions` or `bytes_used`.
    pub name: Cow<'static, str>,
    /// Counter or gauge.
    pub kind: StatKind,
    /// The value.
    pub value: f64,
}

impl Stat {
    /// A counter named `name`.
    pub fn counter(name: impl Into<Cow<'static, str>>, value: u64) -> Stat {
        Stat {
            name: name.into(),
            kind: StatKind::Counter,
            value: value as f64,
        }
    }

    /// A gauge named `name`.
    pub fn gauge(name: impl Into<Cow<'static, str>>, value: f64) -> Stat {
        Stat {
            name: name.into(),
            kind: StatKind::Gauge,
            value,
        }
    }
}
