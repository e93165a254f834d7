//! The tiering manager and the secondary-tier contract.

pub mod tier;

pub use tier::{
    Direction, Job, JobId, JobRef, JobResult, OffloadPolicy, SecondaryTier, TierLookup,
};
