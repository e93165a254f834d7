//! Every table of statistics the library's components declare, so the
//! families kvtier exposes can be listed in one place (docs/metrics.md and
//! the C structs are checked against them).  Each component declares its
//! statistics and their families itself (see [`crate::stats`]); this
//! module only gathers them, above every component.

use crate::stats::StatTable;

/// The manager's own statistics ([`crate::tiering::ManagerStats`] and its
/// histogram).
pub static MANAGER: StatTable = crate::tiering::MANAGER_STATS;
/// The primary tier's ([`crate::primary::PrimaryStats`]).
pub static PRIMARY: StatTable = crate::primary::PRIMARY_STATS;
/// The manager's counters for each secondary tier.
pub static TIER_MANAGED: StatTable = crate::tiering::TIER_MANAGED_STATS;
/// An adapted foreign tier's ([`crate::tiering::AdapterStats`]).
pub static ADAPTER: StatTable = crate::tiering::ADAPTER_STATS;
/// The fs tier's own.
pub static FS: StatTable = crate::tiers::fs::FS_STATS;
/// The redis tier's own.
#[cfg(feature = "redis-tier")]
pub static REDIS: StatTable = crate::tiers::redis::REDIS_STATS;

/// Every table above.
pub static TABLES: &[StatTable] = &[
    MANAGER,
    PRIMARY,
    TIER_MANAGED,
    ADAPTER,
    FS,
    #[cfg(feature = "redis-tier")]
    REDIS,
];

#[cfg(test)]
mod tests;
