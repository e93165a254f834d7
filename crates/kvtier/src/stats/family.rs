//! Metric families: what a statistic is called in the Prometheus text,
//! its type, labels and help, and which statistic feeds which family.
//!
//! Each component declares its own families beside its statistics (see
//! [`stat_table!`](crate::stats)); the families every tier shares are
//! declared here.  The names follow the Prometheus conventions: a
//! `kvtier_` prefix, then the scope (`manager`, `tier` for a concept
//! every tier shares, `primary`, `fs`, `redis` for one tier's own), base
//! units as suffixes (`_seconds`, `_bytes`, `_blocks`, `_keys`), `_total`
//! on counters only, `_ratio` on ratios.  Values that differ only by a
//! reason, a cause or a direction share one family with a label saying
//! which.  Manager-level families carry no `tier` label (except
//! `kvtier_manager_lookup_hits_total` and
//! `kvtier_manager_request_blocks_served_total`, which partition the
//! manager's lookups and its requests' loaded blocks by the tier that had
//! them); tier-level families carry `tier` and `medium`, so no sum mixes
//! the two.

/// A family's type, as its `# TYPE` line says.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FamilyType {
    /// Cumulative count (the name ends in `_total`).
    Counter,
    /// Current level.
    Gauge,
    /// Cumulative buckets, sum and count.
    Histogram,
}

impl FamilyType {
    /// The word on the `# TYPE` line.
    pub fn as_str(self) -> &'static str {
        match self {
            FamilyType::Counter => "counter",
            FamilyType::Gauge => "gauge",
            FamilyType::Histogram => "histogram",
        }
    }
}

/// Which labels a family's series carry besides the entry's own.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Scope {
    /// The manager as a whole: no `tier` label.
    Manager,
    /// The manager's, split by the tier that answered: `tier` only.
    ManagerByTier,
    /// One tier's: `tier` and `medium`.
    Tier,
}

/// One metric family.
#[derive(Debug)]
pub struct Family {
    /// The family's name (counters end in `_total`).
    pub name: &'static str,
    /// Its type.
    pub ty: FamilyType,
    /// Which labels identify a tier.
    pub scope: Scope,
    /// The label an entry sets (`reason`, `cause`, `direction`, ...), if any.
    pub label: Option<&'static str>,
    /// The `# HELP` text.
    pub help: &'static str,
}

/// Which family one statistic feeds.
#[derive(Clone, Copy, Debug)]
pub struct Entry {
    /// The statistic's name (a histogram's name for its series).
    pub stat: &'static str,
    /// Its family.
    pub family: &'static Family,
    /// The value of the family's label for this statistic.
    pub label_value: Option<&'static str>,
    /// Factor from the statistic's unit to the family's (1e-6 for
    /// microseconds exposed as seconds).
    pub scale: f64,
}

/// The statistics of one source (a component's table) and their families.
pub type StatTable = &'static [Entry];

/// The entry for `stat` in `table`, if any.
pub fn find(table: StatTable, stat: &str) -> Option<&'static Entry> {
    table.iter().find(|e| e.stat == stat)
}

/// Declares a [`Family`]: `family! { ID, "name", Type, Scope, ["label",] "help" }`.
macro_rules! family {
    ($vis:vis $id:ident, $name:literal, $ty:ident, $scope:ident, $help:literal) => {
        #[doc = $help]
        $vis static $id: $crate::stats::Family = $crate::stats::Family {
            name: $name,
            ty: $crate::stats::FamilyType::$ty,
            scope: $crate::stats::Scope::$scope,
            label: None,
            help: $help,
        };
    };
    ($vis:vis $id:ident, $name:literal, $ty:ident, $scope:ident, $label:literal, $help:literal) => {
        #[doc = $help]
        $vis static $id: $crate::stats::Family = $crate::stats::Family {
            name: $name,
            ty: $crate::stats::FamilyType::$ty,
            scope: $crate::stats::Scope::$scope,
            label: Some($label),
            help: $help,
        };
    };
}
pub(crate) use family;

// Concepts every tier shares (the primary tier included).
family! {
    pub T_BLOCKS, "kvtier_tier_blocks", Gauge, Tier,
    "Blocks the tier holds: in the primary tier the slots holding a key (write pending included), in the fs tier the blocks stored and readable."
}
family! {
    pub T_CAPACITY_BLOCKS, "kvtier_tier_capacity_blocks", Gauge, Tier,
    "The tier's capacity in blocks (the primary tier's slots)."
}
family! {
    pub T_USED_BYTES, "kvtier_tier_used_bytes", Gauge, Tier,
    "Bytes the tier's blocks take on its medium."
}
family! {
    pub T_CAPACITY_BYTES, "kvtier_tier_capacity_bytes", Gauge, Tier,
    "The tier's capacity in bytes (0: no limit)."
}
family! {
    pub T_EVICTIONS, "kvtier_tier_evictions_total", Counter, Tier,
    "Blocks the tier evicted to make room."
}
family! {
    pub T_EVENTS_QUEUED, "kvtier_tier_events_queued", Gauge, Tier,
    "Cache events the tier queued that the manager has not gathered yet."
}
family! {
    pub T_EVENTS_DROPPED, "kvtier_tier_events_dropped_total", Counter, Tier,
    "Cache events the tier dropped because its queue was full."
}
