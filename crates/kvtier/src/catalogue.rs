//! Every table of statistics the library's components declare, so the
//! families kvtier exposes can be listed in one place (docs/metrics.md is
//! checked against them).  Each component declares its statistics and
//! their families itself (see [`crate::stats`]); this list only gathers
//! them, above every component.

use crate::stats::StatTable;

/// Every table: the manager's own statistics, the primary tier's, the
/// manager's counters for each secondary tier, an adapted foreign tier's,
/// and the built-in tiers' own.
pub static TABLES: &[StatTable] = &[
    crate::tiering::MANAGER_STATS,
    crate::primary::PRIMARY_STATS,
    crate::tiering::TIER_MANAGED_STATS,
    crate::tiering::ADAPTER_STATS,
    crate::tiers::fs::FS_STATS,
    #[cfg(feature = "redis-tier")]
    crate::tiers::redis::REDIS_STATS,
];

#[cfg(test)]
mod tests;
