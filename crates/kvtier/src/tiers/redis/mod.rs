//! The built-in `"redis"` secondary tier: KV blocks as values in Redis or
//! Valkey, standalone or Redis Cluster, shared by every engine instance that
//! uses the same server and namespace.
//!
//! - Each block is stored under `namespace:hex(key)` as `header || slot
//!   bytes`; the header (`header`) binds the value to its key and carries
//!   checksums, verified on every load.  A value that fails verification is
//!   never copied into a slot: the load reports the keys that did arrive
//!   (partial promotion), and the bad value is counted and deleted.  A
//!   sound block of another size (another layout in the same namespace) is
//!   counted and not served, but left in place.
//! - Stores and loads run on the tier's own worker threads, one connection
//!   each (so the connection count is bounded), pipelined: many blocks per
//!   round trip, bounded in bytes and commands.
//! - A lookup of a key this instance does not know answers RETRY and queues
//!   an existence check; the checks gathered in one scheduler step go out
//!   together at `on_schedule_end`, and later lookups answer HIT or MISS.
//! - Failures (server down, timeouts, OOM replies, connection resets) fail
//!   the jobs they hit with a counted cause.  After `breaker_failures`
//!   consecutive failures a circuit breaker opens: lookups answer MISS at
//!   once, stores are dropped (reported failed, counted) and loads fail at
//!   once; after `breaker_cooldown` a worker probes the server, and the
//!   breaker closes when it answers.
//! - Failures also reach the manager's error log (and the log callback)
//!   through `take_errors`, each kind at most once a second (`report`):
//!   a refused AUTH shows there, not only in a counter.
//! - Events ("stored", "removed") go to a queue bounded by the capacity the
//!   manager gives ([`SecondaryTier::set_event_capacity`]); when it is full
//!   new events are dropped and counted (`events_dropped`), and a key whose
//!   "stored" event was dropped is never announced as removed.
//! - Nothing but [`SecondaryTier::drain`] and [`SecondaryTier::shutdown`]
//!   blocks the caller's thread: the other methods queue work and read
//!   finished work from a channel without waiting.
//!
//! [`SecondaryTier::set_event_capacity`]: crate::tiering::SecondaryTier::set_event_capacity
//! [`SecondaryTier::drain`]: crate::tiering::SecondaryTier::drain
//! [`SecondaryTier::shutdown`]: crate::tiering::SecondaryTier::shutdown
//!
//! The options ([`RedisTierConfig`]) exist in every build, so a JSON configuration
//! and the C options read the same way with or without the tier; the tier
//! itself needs the `redis-tier` cargo feature.

#[cfg(feature = "redis-tier")]
mod admin;
mod config;
#[cfg(feature = "redis-tier")]
mod conn;
#[cfg(feature = "redis-tier")]
mod header;
#[cfg(feature = "redis-tier")]
mod outcome;
#[cfg(feature = "redis-tier")]
mod report;
#[cfg(feature = "redis-tier")]
mod resp;
#[cfg(feature = "redis-tier")]
mod stats;
#[cfg(feature = "redis-tier")]
mod tier;
#[cfg(feature = "redis-tier")]
mod worker;

#[cfg(feature = "redis-tier")]
pub use admin::layout_key;
pub use config::{MAX_TTL_MS, RedisTierConfig};
#[cfg(feature = "redis-tier")]
pub use header::header_len;
#[cfg(feature = "redis-tier")]
pub(crate) use stats::REDIS_STATS;
#[cfg(feature = "redis-tier")]
pub use tier::{RedisTier, redis_key_name};
