//! [`stat_table!`]: one declaration per statistic.  A component lists its
//! statistics once, each with its kind, its type, the words of its field
//! and the family it feeds; the macro writes the struct that carries them,
//! its named-value list, and the table of their families that the
//! Prometheus exposition reads.

use super::Stat;

/// The value a gauge field reports.
pub(crate) trait GaugeValue {
    /// As a number.
    fn gauge_value(&self) -> f64;
}

impl GaugeValue for u32 {
    fn gauge_value(&self) -> f64 {
        f64::from(*self)
    }
}

impl GaugeValue for u64 {
    fn gauge_value(&self) -> f64 {
        *self as f64
    }
}

impl GaugeValue for f64 {
    fn gauge_value(&self) -> f64 {
        *self
    }
}

/// The value a counter field reports.
pub(crate) trait CounterValue {
    /// As a count.
    fn counter_value(&self) -> u64;
}

impl CounterValue for u64 {
    fn counter_value(&self) -> u64 {
        *self
    }
}

/// A histogram field: appends its series (buckets, sum, count) named `name`.
pub(crate) trait PushStats {
    /// Appends the series to `out`.
    fn push_stats(&self, name: &'static str, out: &mut Vec<Stat>);
}

/// Declares a component's statistics once:
///
/// ```text
/// stat_table! {
///     /// Docs of the table.
///     pub static TABLE;
///     /// Docs of the struct.
///     #[derive(...)]
///     pub struct Stats {
///         /// Docs of the field.
///         counter evictions: u64 => T_EVICTIONS,
///         counter late: u64 => P_IGNORED["late"],
///         counter read_time_us: u64 => FS_IO_SECONDS["read"] * 1e-6,
///         gauge usage: f64 => P_USAGE,
///         histogram sizes: Sizes as "size_blocks" => P_SIZES,
///     }
///     plain { /* fields that are no statistics */ }
///     also { /* statistics reported beside the struct: a name constant each */
///         histogram WAIT = "wait_seconds" => M_WAIT,
///     }
/// }
/// ```
///
/// It writes the struct (fields in order, with the struct's visibility),
/// `stat_list`/`push_stats` (the fields as named values, in order: a
/// counter, a gauge, or a histogram's series), a name constant per `also`
/// statistic, and the table: one [`Entry`](super::Entry) per statistic,
/// fields first, then the `also` ones, then the `rows` (an array of
/// entries declared elsewhere: a tier's causes, see
/// `tiers::kit::tier_causes!`).
macro_rules! stat_table {
    (
        $(#[$tmeta:meta])*
        $tvis:vis static $table:ident;
        $(#[$smeta:meta])*
        $vis:vis struct $name:ident {
            $(
                $(#[$fmeta:meta])*
                $kind:ident $field:ident : $fty:ty $(as $sname:expr)?
                    => $family:ident $([$label:literal])? $(* $scale:literal)?
            ),* $(,)?
        }
        $(plain {
            $( $(#[$pmeta:meta])* $pfield:ident : $pty:ty ),* $(,)?
        })?
        $(also {
            $(
                $(#[$ameta:meta])*
                $akind:ident $aconst:ident = $aname:literal
                    => $afamily:ident $([$alabel:literal])? $(* $ascale:literal)?
            ),* $(,)?
        })?
        $(rows $rows:expr;)?
    ) => {
        $(#[$smeta])*
        $vis struct $name {
            $( $(#[$fmeta])* $vis $field: $fty, )*
            $($( $(#[$pmeta])* $vis $pfield: $pty, )*)?
        }

        impl $name {
            /// The statistics as named values, in field order.
            #[allow(dead_code)]
            $vis fn stat_list(&self) -> ::std::vec::Vec<$crate::stats::Stat> {
                let mut out = ::std::vec::Vec::new();
                self.push_stats(&mut out);
                out
            }

            /// Appends the statistics, as named values in field order, to `out`.
            #[allow(dead_code)]
            $vis fn push_stats(&self, out: &mut ::std::vec::Vec<$crate::stats::Stat>) {
                $(
                    $crate::stats::push_stat!(
                        $kind,
                        $crate::stats::stat_name!($field $(, $sname)?),
                        self.$field,
                        out
                    );
                )*
            }
        }

        $($( $(#[$ameta])* pub(crate) const $aconst: &str = $aname; )*)?

        $(#[$tmeta])*
        $tvis static $table: $crate::stats::StatTable = {
            const HEAD: &[$crate::stats::Entry] = &[
            $(
                $crate::stats::Entry {
                    stat: $crate::stats::stat_name!($field $(, $sname)?),
                    family: &$family,
                    label_value: $crate::stats::stat_label!($($label)?),
                    scale: $crate::stats::stat_scale!($($scale)?),
                },
            )*
            $($(
                $crate::stats::Entry {
                    stat: $aname,
                    family: &$afamily,
                    label_value: $crate::stats::stat_label!($($alabel)?),
                    scale: $crate::stats::stat_scale!($($ascale)?),
                },
            )*)?
            ];
            const ROWS: &[$crate::stats::Entry] = $crate::stats::stat_rows!($($rows)?);
            const TABLE: [$crate::stats::Entry; HEAD.len() + ROWS.len()] =
                $crate::stats::join_entries(HEAD, ROWS);
            &TABLE
        };
    };
}
pub(crate) use stat_table;

/// `head` then `rest`, as one array of `N` entries (`N` their lengths'
/// sum): a table with rows declared elsewhere.
pub(crate) const fn join_entries<const N: usize>(
    head: &[super::Entry],
    rest: &[super::Entry],
) -> [super::Entry; N] {
    assert!(head.len() + rest.len() == N);
    let mut out = [super::Entry {
        stat: "",
        family: &super::T_BLOCKS,
        label_value: None,
        scale: 1.0,
    }; N];
    let mut i = 0;
    while i < N {
        out[i] = if i < head.len() {
            head[i]
        } else {
            rest[i - head.len()]
        };
        i += 1;
    }
    out
}

/// The name of a field's statistic: the field's own, or the one it names.
macro_rules! stat_name {
    ($field:ident) => {
        stringify!($field)
    };
    ($field:ident, $name:expr) => {
        $name
    };
}
pub(crate) use stat_name;

/// A table's rows declared elsewhere, if any.
macro_rules! stat_rows {
    () => {
        &[]
    };
    ($rows:expr) => {
        &$rows
    };
}
pub(crate) use stat_rows;

/// An entry's label value.
macro_rules! stat_label {
    () => {
        None
    };
    ($label:literal) => {
        Some($label)
    };
}
pub(crate) use stat_label;

/// An entry's scale.
macro_rules! stat_scale {
    () => {
        1.0
    };
    ($scale:literal) => {
        $scale
    };
}
pub(crate) use stat_scale;

/// Appends one field's statistic by its kind.
macro_rules! push_stat {
    (counter, $name:expr, $value:expr, $out:ident) => {
        $out.push($crate::stats::Stat::counter(
            $name,
            $crate::stats::CounterValue::counter_value(&$value),
        ))
    };
    (gauge, $name:expr, $value:expr, $out:ident) => {
        $out.push($crate::stats::Stat::gauge(
            $name,
            $crate::stats::GaugeValue::gauge_value(&$value),
        ))
    };
    (histogram, $name:expr, $value:expr, $out:ident) => {
        $crate::stats::PushStats::push_stats(&$value, $name, $out)
    };
}
pub(crate) use push_stat;

/// Checks a component's statistics against its table: each is listed,
/// with a family of its kind, and each entry at most once.
#[cfg(test)]
pub(crate) fn assert_listed(stats: &[Stat], table: super::StatTable) {
    use super::{FamilyType, StatKind};
    for s in stats {
        let e =
            super::find(table, &s.name).unwrap_or_else(|| panic!("{} is not in the table", s.name));
        let ty = match s.kind {
            StatKind::Counter => FamilyType::Counter,
            StatKind::Gauge => FamilyType::Gauge,
            _ => FamilyType::Histogram,
        };
        assert_eq!(e.family.ty, ty, "{}: the family's type", s.name);
    }
    for (i, e) in table.iter().enumerate() {
        assert!(
            table[..i].iter().all(|o| o.stat != e.stat),
            "{} listed twice",
            e.stat
        );
    }
}

#[cfg(test)]
mod tests {
    use super::{CounterValue, GaugeValue};

    #[test]
    fn a_counter_reports_its_count() {
        for n in [0u64, 1, 2, 41, u64::MAX] {
            assert_eq!(n.counter_value(), n);
        }
    }

    #[test]
    fn a_gauge_reports_its_value_as_a_number() {
        assert_eq!(7u32.gauge_value(), 7.0);
        assert_eq!(u32::MAX.gauge_value(), 4_294_967_295.0);
        assert_eq!(9u64.gauge_value(), 9.0);
        assert_eq!(0.25f64.gauge_value(), 0.25);
        assert_eq!((-2.5f64).gauge_value(), -2.5);
    }
}
