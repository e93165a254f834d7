//! `kvtier_manager_add_redis_tier`: the built-in redis tier, from C.
//!
//! Converts the options and checks pointers, then builds the redis tier
//! (`crate::tiers::redis::RedisTier`) over the region's slots and attaches
//! it to the manager.  Without the `redis-tier` cargo feature the call
//! exists but answers `KVTIER_STATUS_UNSUPPORTED`, so the header is the same
//! in every build.

use std::ffi::c_char;

use super::boundary::{Failure, enter, ffi_call, in_str, out_ref};
use super::manager::kvtier_manager;
use super::region::kvtier_region;
use super::status::kvtier_status;

/// Options of `kvtier_manager_add_redis_tier`; start from
/// `kvtier_redis_options_default()`.  Strings are NUL-terminated, read
/// during the call only; NULL means the default stated for each.
#[repr(C)]
#[allow(non_camel_case_types)]
#[derive(Debug, Clone, Copy)]
pub struct kvtier_redis_options {
    /// Tier name in stats and errors; NULL: "redis".
    pub name: *const c_char,
    /// Comma-separated `host:port` list: the server, or cluster seed nodes;
    /// NULL: "127.0.0.1:6379".
    pub nodes: *const c_char,
    /// Whether `nodes` are Redis Cluster nodes.
    pub cluster: bool,
    /// Key prefix (`namespace:hex(key)`); one per block layout; NULL: "kvtier".
    pub key_namespace: *const c_char,
    /// ACL user for AUTH; NULL: none.
    pub username: *const c_char,
    /// Password for AUTH; NULL: none.
    pub password: *const c_char,
    /// Database number (standalone only; default 0): 0 to `INT32_MAX`.
    pub db: i64,
    /// TLS to the server (needs a build with the `redis-tls` feature).
    pub tls: bool,
    /// PEM file of the CA(s) to trust for TLS; NULL: the system's.
    pub tls_ca_file: *const c_char,
    /// Expiry of stored blocks in milliseconds; 0: none; at most 2^62
    /// (longer cannot work: Redis refuses such an expiry).
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
}

/// Returns the default redis tier options: standalone `127.0.0.1:6379`,
/// namespace "kvtier", no AUTH, no TLS, no TTL, 4 connections, 1 s connect
/// and 2 s command timeouts, breaker after 3 failures with a 1 s cool-down.
/// Safe to call from any thread.
#[unsafe(no_mangle)]
pub extern "C" fn kvtier_redis_options_default() -> kvtier_redis_options {
    kvtier_redis_options {
        name: std::ptr::null(),
        nodes: std::ptr::null(),
        cluster: false,
        key_namespace: std::ptr::null(),
        username: std::ptr::null(),
        password: std::ptr::null(),
        db: 0,
        tls: false,
        tls_ca_file: std::ptr::null(),
        ttl_ms: 0,
        connect_timeout_ms: 1000,
        command_timeout_ms: 2000,
        connections: 4,
        pipeline_bytes: 4 << 20,
        pipeline_ops: 256,
        breaker_failures: 3,
        breaker_cooldown_ms: 1000,
        miss_cache_ms: 500,
        max_known_keys: 1 << 18,
        events: true,
    }
}

unsafe fn opt_str<'a>(p: *const c_char, name: &'static str) -> Result<Option<&'a str>, Failure> {
    if p.is_null() {
        Ok(None)
    } else {
        unsafe { in_str(p, name) }.map(Some)
    }
}

/// Creates a redis tier that copies blocks between `region`'s slots and
/// Redis, and attaches it to `manager` as its next secondary tier; writes
/// its tier index (1 for the first secondary tier) to `*tier_index_out`.
/// Allowed until the first request starts.  Connects nothing during the
/// call (the tier's threads connect on their first transfer), so an
/// unreachable server shows later as failed jobs and MISS answers.
///
/// `manager` and `region` must be live handles, the manager's primary
/// slots being the region's slots (its capacity at most the region's slot
/// count, else `KVTIER_STATUS_INVALID_ARGUMENT`); `options` NULL (defaults) or initialized with
/// `kvtier_redis_options_default()`.  On success the manager owns the tier
/// (shut down by `kvtier_manager_shutdown` or `_free`), and the tier keeps
/// the region's mapping alive until then, even if the region handle is
/// freed first.  On failure nothing is attached.  Without the `redis-tier`
/// build feature: `KVTIER_STATUS_UNSUPPORTED`.  Internally synchronized
/// like the manager.
///
/// # Safety
/// `manager`, `region` live handles; `options` NULL or valid, with its
/// strings NULL or NUL-terminated; `tier_index_out` valid for writes.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn kvtier_manager_add_redis_tier(
    manager: *mut kvtier_manager,
    region: *const kvtier_region,
    options: *const kvtier_redis_options,
    tier_index_out: *mut usize,
) -> kvtier_status {
    ffi_call!({
        // The manager first: a NULL or poisoned manager builds no tier.
        let m = unsafe { enter::<kvtier_manager>(manager) }?;
        let region = unsafe { enter::<kvtier_region>(region) }?;
        let index_out = unsafe { out_ref(tier_index_out, "tier_index_out") }?;
        let o = unsafe { options.as_ref() }
            .copied()
            .unwrap_or_else(|| kvtier_redis_options_default());
        let name = unsafe { opt_str(o.name, "options->name") }?.unwrap_or("redis");
        let nodes = unsafe { opt_str(o.nodes, "options->nodes") }?;
        let namespace = unsafe { opt_str(o.key_namespace, "options->key_namespace") }?;
        let username = unsafe { opt_str(o.username, "options->username") }?;
        let password = unsafe { opt_str(o.password, "options->password") }?;
        let ca = unsafe { opt_str(o.tls_ca_file, "options->tls_ca_file") }?;
        m.check_slots(&region.slots())?;
        let tier = build(
            name,
            &o,
            nodes,
            namespace,
            username,
            password,
            ca,
            region.slots(),
        )?;
        let tier_options = crate::tiering::TierOptions {
            events: o.events,
            ..Default::default()
        };
        *index_out = m.add_tier_with(tier, tier_options)?;
        Ok(())
    })
}

#[cfg(feature = "redis-tier")]
#[allow(clippy::too_many_arguments)]
fn build(
    name: &str,
    o: &kvtier_redis_options,
    nodes: Option<&str>,
    namespace: Option<&str>,
    username: Option<&str>,
    password: Option<&str>,
    ca: Option<&str>,
    slots: crate::region::SlotMemory,
) -> Result<Box<dyn crate::tiering::SecondaryTier>, Failure> {
    use crate::tiers::redis::{RedisTier, RedisTierConfig};
    use std::time::Duration;
    let d = RedisTierConfig::default();
    let ms = |v: u32| Duration::from_millis(v as u64);
    let config = RedisTierConfig {
        nodes: match nodes {
            Some(n) => n
                .split(',')
                .map(str::trim)
                .filter(|s| !s.is_empty())
                .map(String::from)
                .collect(),
            None => d.nodes,
        },
        cluster: o.cluster,
        namespace: namespace.map(String::from).unwrap_or(d.namespace),
        username: username.map(String::from),
        password: password.map(String::from),
        db: o.db,
        tls: o.tls,
        tls_ca_file: ca.map(Into::into),
        ttl: (o.ttl_ms > 0).then(|| Duration::from_millis(o.ttl_ms)),
        connect_timeout: ms(o.connect_timeout_ms),
        command_timeout: ms(o.command_timeout_ms),
        connections: o.connections as usize,
        pipeline_bytes: o.pipeline_bytes,
        pipeline_ops: o.pipeline_ops as usize,
        breaker_failures: o.breaker_failures,
        breaker_cooldown: ms(o.breaker_cooldown_ms),
        miss_cache: ms(o.miss_cache_ms),
        max_known_keys: o.max_known_keys,
    };
    Ok(Box::new(RedisTier::new(name, config, slots)?))
}

#[cfg(not(feature = "redis-tier"))]
#[allow(clippy::too_many_arguments)]
fn build(
    _name: &str,
    _o: &kvtier_redis_options,
    _nodes: Option<&str>,
    _namespace: Option<&str>,
    _username: Option<&str>,
    _password: Option<&str>,
    _ca: Option<&str>,
    _slots: crate::region::SlotMemory,
) -> Result<Box<dyn crate::tiering::SecondaryTier>, Failure> {
    Err(crate::Error::Unsupported(
        "the redis tier needs kvtier built with the `redis-tier` cargo feature".into(),
    )
    .into())
}
