//! The redis tier's options ([`RedisTierConfig`]) and their checks: options
//! that cannot work are refused when the tier is created, not discovered
//! as failed stores later.
//!
//! These are the only redis options: `kvtier_redis_options` (C) and the
//! `"options"` of a JSON tier of type `"redis"` are read into
//! [`RedisTierConfig`], and both take their defaults from its [`Default`].

use std::time::Duration;

use crate::error::{Error, Result};

/// Longest TTL a stored block may have, in milliseconds (2^62, about 146
/// million years).  Redis adds the current time to a `PX` expiry in a
/// signed 64-bit count of milliseconds and refuses a sum that overflows,
/// so a TTL near `i64::MAX` ms would fail every store.
pub const MAX_TTL_MS: u64 = 1 << 62;

/// How the redis tier connects and behaves.  `Default` gives a standalone
/// server on `127.0.0.1:6379` with conservative timeouts.
///
/// In JSON every duration is a whole number of milliseconds in a field
/// named after it with `_ms` (`max_age_ms`: 0 for none, also accepted
/// under its former name `ttl_ms`; `connect_timeout_ms`,
/// `command_timeout_ms`, `breaker_cooldown_ms`, `miss_cache_ms`); missing
/// fields take [`Default`]'s values.
#[derive(Clone, Debug, PartialEq, serde::Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct RedisTierConfig {
    /// The tier's name in stats, metrics and errors.
    pub name: String,
    /// `host:port` of the server, or of one or more cluster nodes.
    pub nodes: Vec<String>,
    /// Whether `nodes` are Redis Cluster nodes.
    pub cluster: bool,
    /// Prefix of every key (`namespace:hex`), so models or layouts sharing a
    /// server never collide: give each block layout its own namespace.
    pub namespace: String,
    /// ACL user name for AUTH, if any.
    pub username: Option<String>,
    /// Password for AUTH, if any.
    pub password: Option<String>,
    /// Database number (standalone only): 0 ..= `i32::MAX`, and below the
    /// server's `databases` setting (16 by default).
    pub db: i64,
    /// TLS to the server (needs the `redis-tls` cargo feature).
    pub tls: bool,
    /// PEM file of the CA(s) to trust for TLS instead of the system's.
    pub tls_ca_file: Option<std::path::PathBuf>,
    /// Max age: the expiry of every stored block, 1 ms ..= [`MAX_TTL_MS`]
    /// (the server removes a block that old); `None` keeps blocks until
    /// Redis evicts them.  JSON: `max_age_ms`, or `ttl_ms` (the same
    /// option under its former name).
    #[serde(
        rename = "max_age_ms",
        alias = "ttl_ms",
        deserialize_with = "crate::serde_forms::millis_or_none"
    )]
    pub ttl: Option<Duration>,
    /// Bound on opening one connection.
    #[serde(
        rename = "connect_timeout_ms",
        deserialize_with = "crate::serde_forms::millis"
    )]
    pub connect_timeout: Duration,
    /// Bound on one command round trip (read and write each).
    #[serde(
        rename = "command_timeout_ms",
        deserialize_with = "crate::serde_forms::millis"
    )]
    pub command_timeout: Duration,
    /// Worker threads, each with one connection.
    pub connections: usize,
    /// Most value bytes per pipelined round trip.
    pub pipeline_bytes: usize,
    /// Most commands per pipelined round trip.
    pub pipeline_ops: usize,
    /// Consecutive failed operations that open the circuit breaker.
    pub breaker_failures: u32,
    /// How long the breaker stays open before a probe.
    #[serde(
        rename = "breaker_cooldown_ms",
        deserialize_with = "crate::serde_forms::millis"
    )]
    pub breaker_cooldown: Duration,
    /// How long a negative existence check answers MISS without asking again.
    #[serde(
        rename = "miss_cache_ms",
        deserialize_with = "crate::serde_forms::millis"
    )]
    pub miss_cache: Duration,
    /// Most keys this instance remembers as present (about 200 bytes each);
    /// beyond it the oldest are forgotten (checked with the server again
    /// when looked up).
    pub max_known_keys: usize,
    /// The block layout the namespace's blocks belong to (1..=256 printable
    /// ASCII bytes), kept in the key `NAMESPACE:layout`: a namespace
    /// without it adopts it, one holding another is refused when the tier
    /// is created.  `None` (the default): no check, unless the manager's
    /// `layout_fingerprint` is inherited.
    pub layout_fingerprint: Option<String>,
    /// At shutdown (after the transfers finish), delete every key of the
    /// namespace but its layout key (`SCAN` and `UNLINK`).  Standalone
    /// servers only.  Default false.
    pub clear_on_shutdown: bool,
}

impl Default for RedisTierConfig {
    fn default() -> RedisTierConfig {
        RedisTierConfig {
            name: "redis".into(),
            nodes: vec!["127.0.0.1:6379".into()],
            cluster: false,
            namespace: "kvtier".into(),
            username: None,
            password: None,
            db: 0,
            tls: false,
            tls_ca_file: None,
            ttl: None,
            connect_timeout: Duration::from_millis(1000),
            command_timeout: Duration::from_millis(2000),
            connections: 4,
            pipeline_bytes: 4 << 20,
            pipeline_ops: 256,
            breaker_failures: 3,
            breaker_cooldown: Duration::from_millis(1000),
            miss_cache: Duration::from_millis(500),
            max_known_keys: 1 << 18,
            layout_fingerprint: None,
            clear_on_shutdown: false,
        }
    }
}

impl RedisTierConfig {
    /// Refuses options that cannot work, with a message naming the option.
    pub fn check(&self) -> Result<()> {
        let bad = |m: String| Err(Error::InvalidArgument(m));
        if self.namespace.is_empty() || self.namespace.len() > 256 {
            return bad(format!(
                "redis namespace must be 1 to 256 bytes (got {})",
                self.namespace.len()
            ));
        }
        if self.connections == 0 || self.connections > 256 {
            return bad(format!(
                "redis connections must be 1 to 256 (got {})",
                self.connections
            ));
        }
        if self.connect_timeout.is_zero() || self.command_timeout.is_zero() {
            return bad("redis connect and command timeouts must be above zero".into());
        }
        if self.pipeline_ops == 0 || self.pipeline_bytes == 0 {
            return bad("redis pipeline bounds must be above zero".into());
        }
        if self.breaker_failures == 0 {
            return bad("redis breaker_failures must be at least 1".into());
        }
        if let Some(ttl) = self.ttl {
            if ttl.as_millis() == 0 {
                return bad("redis ttl must be at least one millisecond (or none)".into());
            }
            if ttl.as_millis() > MAX_TTL_MS as u128 {
                return bad(format!(
                    "redis ttl of {} ms is beyond what Redis accepts for an expiry (at most {MAX_TTL_MS} ms)",
                    ttl.as_millis()
                ));
            }
        }
        if let Some(f) = &self.layout_fingerprint {
            crate::tiers::layout::check_fingerprint("redis layout_fingerprint", f)?;
        }
        if self.clear_on_shutdown && self.cluster {
            return bad(
                "redis clear_on_shutdown works on a standalone server, not a cluster".into(),
            );
        }
        if self.db < 0 || self.db > i32::MAX as i64 {
            return bad(format!(
                "redis db must be a database number from 0 to {} (got {})",
                i32::MAX,
                self.db
            ));
        }
        Ok(())
    }
}
