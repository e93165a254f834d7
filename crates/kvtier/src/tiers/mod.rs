//! Built-in secondary tiers, each a [`crate::tiering::SecondaryTier`]; a
//! tier that needs outside crates sits behind its own cargo feature.
//!
//! - [`fs`]: blocks as verified files under a directory (local disk, tmpfs,
//!   or a file system shared by several processes).
//! - [`redis`]: blocks in Redis or Valkey (the tier needs the feature
//!   `redis-tier`; its options exist in every build).
//!
//! Both are built from the tier kit (`kit/`): the event announcer, the
//! job ledger, the cause counters and error reporter, the worker pool.

pub mod fs;
mod kit;
pub mod layout;
pub mod redis;
