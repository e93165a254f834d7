//! The tier kit: what every built-in secondary tier needs besides its own
//! I/O, written once.
//!
//! - [`Announcer`] (in `crate::events`, which the primary tier shares): the
//!   bounded event queue and its rule, that a key whose "stored" event was
//!   dropped is never announced as removed.
//! - [`JobLedger`] (`ledger.rs`): one submitted job as the workers and the
//!   tier see it, a typed [`KeyOutcome`] per key (queued, done, already
//!   present, skipped, rejected for room, or failed with a cause), and the
//!   job's result once settled ([`settled`]).
//! - [`TierCause`], [`tier_causes!`], [`CauseCounters`] and [`Reporter`]
//!   (`causes.rs`): a tier's failure causes (declared from one line per
//!   cause), a counter per cause (each a statistic of its own), and descriptions of failures for the manager's error log,
//!   bounded and, per kind, rate limited.
//! - [`WorkerPool`] (`pool.rs`): worker threads over a queue whose order the
//!   tier decides ([`WorkQueue`]), waiting for idleness, stopping, and the
//!   manager's wake-up signal.
//!
//! A new tier (an object store, a peer) then is its options, its I/O (what
//! a worker does with one queued item), its index of keys, and its
//! `SecondaryTier` calls gluing these together: see docs/internals.md,
//! "The tier kit".

mod causes;
mod ledger;
mod pool;

pub(crate) use crate::events::Announcer;
#[cfg(all(test, feature = "redis-tier"))]
pub(crate) use causes::REPORT_INTERVAL;
pub(crate) use causes::{CauseCounters, Reporter, TierCause, tier_causes};
#[cfg(feature = "redis-tier")]
pub(crate) use ledger::settled;
pub(crate) use ledger::{JobLedger, KeyOutcome};
pub(crate) use pool::{PoolCore, Wake, WorkQueue, WorkerPool};
