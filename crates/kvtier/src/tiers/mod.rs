//! Built-in secondary tiers, each a [`crate::tiering::SecondaryTier`]; a
//! tier that needs outside crates sits behind its own cargo feature.
//!
//! - [`fs`]: blocks as verified files under a directory (local disk, tmpfs,
//!   or a file system shared by several processes).
//! - [`redis`]: blocks in Redis or Valkey (the tier needs the feature
//!   `redis-tier`; its options exist in every build).

pub mod fs;
pub mod redis;
