//! Built-in secondary tiers, each behind its own cargo feature where it
//! needs outside crates.

#[cfg(feature = "redis-tier")]
pub mod redis;
