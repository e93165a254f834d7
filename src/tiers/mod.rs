//! Built-in secondary tiers, each a [`crate::tiering::SecondaryTier`]; a
//! tier that needs outside crates sits behind its own cargo feature.
//!
//! - [`fs`]: blocks as verified files under a directory (local disk, tmpfs,
//!   or a file system shared by several processes).
//! - `redis` (feature `redis-tier`): blocks in Redis or Valkey.

pub mod fs;
#[cfg(feature = "redis-tier")]
pub mod redis;
