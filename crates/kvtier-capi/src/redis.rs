//! `kvtier_manager_add_redis_tier`: the built-in redis tier, from C.
//!
//! `kvtier_redis_options` is read into the core [`RedisTierConfig`] (whose
//! `Default` gives the C defaults too), then [`add_builtin_tier`] builds
//! the tier over the manager's slot memory, the same path a JSON
//! configuration takes.  Without the `redis-tier` cargo feature the call
//! exists but answers `KVTIER_STATUS_UNSUPPORTED`, so the header is the same
//! in every build.

use std::ffi::c_char;
use std::time::Duration;

use super::boundary::opt_str;
use super::boundary::{Failure, enter, ffi_call, out_ref};
use super::growth::{Grows, read_grown};
use super::manager::kvtier_manager;
use super::status::kvtier_status;
use kvtier_core::config::{BuiltinTier, add_builtin_tier};
use kvtier_core::tiering::TierOptions;
use kvtier_core::tiers::redis::RedisTierConfig;

/// Options of `kvtier_manager_add_redis_tier`.  Initialize with
/// `kvtier_redis_options_default()` (growth rule).  Strings are
/// NUL-terminated, read during the call only; NULL means the default
/// stated for each.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct kvtier_redis_options {
    /// `sizeof(kvtier_redis_options)` as the caller was compiled with.
    pub struct_size: usize,
    /// Tier name in stats and errors; NULL: "redis".
    pub name: *const c_char,
    /// Comma-separated `host:port` list: the server, or cluster seed nodes;
    /// NULL: "127.0.0.1:6379".
    pub nodes: *const c_char,
    /// Whether `nodes` are Redis Cluster nodes (default false).
    pub cluster: bool,
    /// Key prefix (`namespace:hex(key)`); one per block layout; NULL: "kvtier".
    pub key_namespace: *const c_char,
    /// ACL user for AUTH; NULL: none.
    pub username: *const c_char,
    /// Password for AUTH; NULL: none.
    pub password: *const c_char,
    /// Database number (standalone only; default 0): 0 to `INT32_MAX`.
    pub db: i64,
    /// TLS to the server (needs a build with the `redis-tls` feature;
    /// default false).
    pub tls: bool,
    /// PEM file of the CA(s) to trust for TLS; NULL: the system's.
    pub tls_ca_file: *const c_char,
    /// Max age of stored blocks in milliseconds (the expiry Redis removes
    /// them at; JSON `max_age_ms`, formerly `ttl_ms`); 0 (default): none;
    /// at most 2^62 (longer cannot work: Redis refuses such an expiry).
    pub ttl_ms: u64,
    /// Bound on opening a connection, in milliseconds (default 1000).
    pub connect_timeout_ms: u32,
    /// Bound on one round trip's reads and writes, in milliseconds (default 2000).
    pub command_timeout_ms: u32,
    /// Worker threads, one connection each (default 4).
    pub connections: u32,
    /// Most value bytes per pipelined round trip (default 4 MiB).
    pub pipeline_bytes: usize,
    /// Most commands per pipelined round trip (default 256).
    pub pipeline_ops: u32,
    /// Consecutive failures that open the circuit breaker (default 3).
    pub breaker_failures: u32,
    /// Milliseconds the breaker stays open before a probe (default 1000).
    pub breaker_cooldown_ms: u32,
    /// Milliseconds a negative existence check answers MISS (default 500).
    pub miss_cache_ms: u32,
    /// Most keys the tier remembers as present (default 262144, about
    /// 200 bytes each); older ones are checked with the server again.
    pub max_known_keys: usize,
    /// Whether the tier's events ("stored", "removed") reach
    /// `kvtier_manager_take_events` (default true); its queue holds at most
    /// the manager's `event_capacity` events.
    pub events: bool,
    /// The block layout the namespace's blocks belong to (1..=256
    /// printable ASCII bytes, NUL-terminated), kept in the key
    /// `NAMESPACE:layout`: a namespace without it adopts it, one holding
    /// another is refused with `KVTIER_STATUS_INVALID_ARGUMENT` naming both
    /// (the check connects to the server once, bounded by the timeouts).
    /// NULL (default): no check.  Since 0.3.
    pub layout_fingerprint: *const c_char,
    /// At manager shutdown (after the transfers finish), delete every key
    /// of the namespace but its layout key (standalone servers only;
    /// default false).  Since 0.3.
    pub clear_on_shutdown: bool,
}

impl Grows for kvtier_redis_options {
    const NAME: &'static str = "kvtier_redis_options";
    /// The 0.2 layout ended with `events` (its size, padding included, is
    /// where the fields added in 0.3 begin).
    const FIRST_LAYOUT_SIZE: usize = std::mem::offset_of!(Self, layout_fingerprint);
}

/// Milliseconds of `d` for a 32-bit C field, saturating.
fn ms_u32(d: Duration) -> u32 {
    u32::try_from(d.as_millis()).unwrap_or(u32::MAX)
}

/// Returns the default redis tier options (the core defaults: standalone
/// `127.0.0.1:6379`, namespace "kvtier", no AUTH, no TLS, no TTL, 4
/// connections, 1 s connect and 2 s command timeouts, breaker after 3
/// failures with a 1 s cool-down), the strings NULL (their defaults), and
/// `struct_size` set.  Safe to call from any thread.
#[unsafe(no_mangle)]
pub extern "C" fn kvtier_redis_options_default() -> kvtier_redis_options {
    let d = RedisTierConfig::default();
    kvtier_redis_options {
        struct_size: std::mem::size_of::<kvtier_redis_options>(),
        name: std::ptr::null(),
        nodes: std::ptr::null(),
        cluster: d.cluster,
        key_namespace: std::ptr::null(),
        username: std::ptr::null(),
        password: std::ptr::null(),
        db: d.db,
        tls: d.tls,
        tls_ca_file: std::ptr::null(),
        ttl_ms: d
            .ttl
            .map_or(0, |t| u64::try_from(t.as_millis()).unwrap_or(u64::MAX)),
        connect_timeout_ms: ms_u32(d.connect_timeout),
        command_timeout_ms: ms_u32(d.command_timeout),
        connections: u32::try_from(d.connections).unwrap_or(u32::MAX),
        pipeline_bytes: d.pipeline_bytes,
        pipeline_ops: u32::try_from(d.pipeline_ops).unwrap_or(u32::MAX),
        breaker_failures: d.breaker_failures,
        breaker_cooldown_ms: ms_u32(d.breaker_cooldown),
        miss_cache_ms: ms_u32(d.miss_cache),
        max_known_keys: d.max_known_keys,
        events: TierOptions::default().events,
        layout_fingerprint: std::ptr::null(),
        clear_on_shutdown: d.clear_on_shutdown,
    }
}

/// The core options of the caller's `kvtier_redis_options` (NULL: the
/// defaults), and whether the tier's events are on.
///
/// # Safety
/// `options` NULL or valid for its `struct_size`, its strings NULL or
/// NUL-terminated.
pub(crate) unsafe fn redis_options_of(
    options: *const kvtier_redis_options,
) -> Result<(RedisTierConfig, TierOptions), Failure> {
    let o = unsafe { read_grown(options, kvtier_redis_options_default()) }?;
    let d = RedisTierConfig::default();
    let text = |p, what| unsafe { opt_str(p, what) }.map(|s| s.map(String::from));
    let millis = |v: u32| Duration::from_millis(v as u64);
    let config = RedisTierConfig {
        name: text(o.name, "options->name")?.unwrap_or(d.name),
        nodes: match unsafe { opt_str(o.nodes, "options->nodes") }? {
            Some(n) => n
                .split(',')
                .map(str::trim)
                .filter(|s| !s.is_empty())
                .map(String::from)
                .collect(),
            None => d.nodes,
        },
        cluster: o.cluster,
        namespace: text(o.key_namespace, "options->key_namespace")?.unwrap_or(d.namespace),
        username: text(o.username, "options->username")?,
        password: text(o.password, "options->password")?,
        db: o.db,
        tls: o.tls,
        tls_ca_file: text(o.tls_ca_file, "options->tls_ca_file")?.map(Into::into),
        ttl: (o.ttl_ms > 0).then(|| Duration::from_millis(o.ttl_ms)),
        connect_timeout: millis(o.connect_timeout_ms),
        command_timeout: millis(o.command_timeout_ms),
        connections: o.connections as usize,
        pipeline_bytes: o.pipeline_bytes,
        pipeline_ops: o.pipeline_ops as usize,
        breaker_failures: o.breaker_failures,
        breaker_cooldown: millis(o.breaker_cooldown_ms),
        miss_cache: millis(o.miss_cache_ms),
        max_known_keys: o.max_known_keys,
        layout_fingerprint: text(o.layout_fingerprint, "options->layout_fingerprint")?,
        clear_on_shutdown: o.clear_on_shutdown,
    };
    let tier = TierOptions {
        events: o.events,
        ..TierOptions::default()
    };
    Ok((config, tier))
}

/// Creates a redis tier that copies blocks between the manager's slot
/// memory and Redis, and adds it as the manager's next secondary tier;
/// writes its tier index (1 for the first secondary tier) to `*index_out`.
/// Allowed until the first request starts.  Connects nothing during the
/// call (the tier's threads connect on their first transfer), so an
/// unreachable server shows later as failed jobs and MISS answers.
///
/// The manager must have slot memory (made by `kvtier_manager_new` with a
/// region, or from JSON with `block_bytes`), else
/// `KVTIER_STATUS_INVALID_ARGUMENT` saying so.  `options` NULL (defaults)
/// or initialized with `kvtier_redis_options_default()` (growth rule);
/// options that cannot work are `KVTIER_STATUS_INVALID_ARGUMENT`.  On
/// success the manager owns the tier (shut down by
/// `kvtier_manager_shutdown` or `_free`).  On failure nothing is added.
/// Without the `redis-tier` build feature: `KVTIER_STATUS_UNSUPPORTED`.
/// Internally synchronized like the manager.
///
/// # Safety
/// `manager` a live handle; `options` NULL or valid for its `struct_size`,
/// with its strings NULL or NUL-terminated; `index_out` valid for writes.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn kvtier_manager_add_redis_tier(
    manager: *const kvtier_manager,
    options: *const kvtier_redis_options,
    index_out: *mut usize,
) -> kvtier_status {
    ffi_call!({
        // The manager first: a NULL or poisoned manager builds no tier.
        let m = unsafe { enter::<kvtier_manager>(manager) }?;
        let out = unsafe { out_ref(index_out, "index_out") }?;
        let (config, tier) = unsafe { redis_options_of(options) }?;
        *out = add_builtin_tier(
            m.local("kvtier_manager_add_redis_tier")?,
            BuiltinTier::Redis(config),
            tier,
        )?;
        Ok(())
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn c_defaults_are_the_core_defaults() {
        let (c, tier) = unsafe { redis_options_of(&kvtier_redis_options_default()) }.unwrap();
        assert_eq!(c, RedisTierConfig::default());
        assert_eq!(tier, TierOptions::default());
        let json: RedisTierConfig = serde_json::from_str("{}").unwrap();
        assert_eq!(json, RedisTierConfig::default());
        let (null, _) = unsafe { redis_options_of(std::ptr::null()) }.unwrap();
        assert_eq!(null, RedisTierConfig::default());
    }

    #[test]
    fn strings_and_durations_reach_the_core_options() {
        let mut o = kvtier_redis_options_default();
        o.name = c"cache".as_ptr();
        o.nodes = c" a:1, b:2 ,".as_ptr();
        o.ttl_ms = 5;
        o.miss_cache_ms = 7;
        let (c, _) = unsafe { redis_options_of(&o) }.unwrap();
        let json: RedisTierConfig = serde_json::from_str(
            r#"{"name": "cache", "nodes": ["a:1", "b:2"], "ttl_ms": 5, "miss_cache_ms": 7}"#,
        )
        .unwrap();
        assert_eq!(c, json);
        assert_eq!(c.ttl, Some(Duration::from_millis(5)));
    }
}
