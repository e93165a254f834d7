//! Built-in secondary tiers, each a [`crate::tiering::SecondaryTier`].
//!
//! - [`fs`]: blocks as verified files under a directory (local disk, tmpfs,
//!   or a file system shared by several processes).

pub mod fs;
