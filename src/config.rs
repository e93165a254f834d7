//! A whole manager from one JSON document: the slot memory (an optional
//! shared region), the primary tier, and built-in secondary tiers by type,
//! in the spirit of vLLM's `kv_connector_extra_config`.
//!
//! Parsing is strict: unknown fields and wrong types are errors whose
//! message starts with the field's path (`tiers[1].options.capacity_bytes:
//! invalid type: ...`).  Every field has a default except a region's
//! `name` and an fs tier's `directory`; README.md ("JSON configuration")
//! documents them all.  Tiers implemented in C or C++ are added afterwards
//! with `kvtier_manager_add_tier`, behind the configured ones.

use std::path::PathBuf;
use std::time::Duration;

use serde::Deserialize;

use crate::error::{Error, Result};
use crate::primary::{PolicyKind, PrimaryConfig, PrimaryTier};
use crate::region::{OpenMode, Prefault, Region, RegionOptions, SlotMemory};
use crate::request::Locality;
use crate::tiering::{
    BackpressureConfig, Manager, ManagerOptions, PressurePolicy, PromotionAnswer, TierOptions,
};

/// The whole document.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Config {
    /// Bytes per block (one primary slot); 0 means the manager has no slot
    /// memory (only C tiers that bring their own).  Default 0.
    #[serde(default)]
    pub block_bytes: u64,
    /// A shared region holding the slots (absent: private anonymous
    /// memory when `block_bytes` > 0).
    #[serde(default)]
    pub region: Option<RegionConfig>,
    /// The primary tier.
    #[serde(default)]
    pub primary: PrimaryJson,
    /// `"retry"` (default) or `"hit_pending"`: what a lookup that starts a promotion answers.
    #[serde(default)]
    pub promotion_answer: PromotionJson,
    /// How many messages the error log keeps.  Default 64.
    #[serde(default = "default_error_log")]
    pub error_log_capacity: usize,
    /// Built-in secondary tiers, in lookup order.
    #[serde(default)]
    pub tiers: Vec<TierJson>,
}

fn default_error_log() -> usize {
    ManagerOptions::default().error_log_capacity
}

/// `promotion_answer` values.
#[derive(Debug, Clone, Copy, Default, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum PromotionJson {
    /// Ask again later (the seed's answer).
    #[default]
    Retry,
    /// The block is on its way (vLLM 0.33).
    HitPending,
}

/// The primary tier's settings.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PrimaryJson {
    /// Number of slots; give this or `capacity_bytes` (default 1024 slots).
    pub capacity: Option<u32>,
    /// Total bytes of slots, divided by `block_bytes` into slots.
    pub capacity_bytes: Option<u64>,
    /// `"lru"` (default) or `"arc"`.
    #[serde(default)]
    pub policy: PolicyJson,
    /// Store a key only at its n-th offer (0 or 1: at the first).
    #[serde(default)]
    pub store_threshold: u32,
    /// Bound of the recent-offers table.  Default 64000.
    #[serde(default = "default_admission_table")]
    pub admission_table_size: usize,
    /// Bound of each tier's event queue (the primary tier's and every
    /// secondary tier's); 0 (default) turns every tier's events off.
    #[serde(default)]
    pub event_capacity: usize,
    /// Keys end with a 4-byte big-endian KV-cache group index (vLLM's keys):
    /// a request's finish commits its keys group by group, and keys shorter
    /// than 5 bytes are refused.  Default false (one group).
    #[serde(default)]
    pub kv_groups: bool,
}

impl Default for PrimaryJson {
    fn default() -> Self {
        PrimaryJson {
            capacity: None,
            capacity_bytes: None,
            policy: PolicyJson::Lru,
            store_threshold: 0,
            admission_table_size: default_admission_table(),
            event_capacity: 0,
            kv_groups: false,
        }
    }
}

fn default_admission_table() -> usize {
    PrimaryConfig::default().admission_table_size
}

/// Eviction policy names.
#[derive(Debug, Clone, Copy, Default, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum PolicyJson {
    /// Least recently used.
    #[default]
    Lru,
    /// Adaptive replacement cache.
    Arc,
}

/// A shared region (see [`crate::region`]).
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RegionConfig {
    /// Region name (required): processes giving the same name share it.
    pub name: String,
    /// Directory of the backing files.  Default `/dev/shm`.
    #[serde(default = "default_directory")]
    pub directory: PathBuf,
    /// `"create_or_join"` (default), `"create"` or `"join"`.
    #[serde(default)]
    pub open: OpenJson,
    /// How long a joiner waits for the creator.  Default 30000.
    #[serde(default = "default_join_timeout")]
    pub join_timeout_ms: u64,
    /// Backing files the region is split into.  Default 1.
    #[serde(default = "one")]
    pub segments: u32,
    /// `"auto"` (default), `"off"` or `"touch"`.
    #[serde(default)]
    pub prefault: PrefaultJson,
    /// Threads pre-faulting the region.  Default 1.
    #[serde(default = "one")]
    pub prefault_threads: u32,
    /// Per-worker bytes of each row (0, default: no per-worker layout).
    #[serde(default)]
    pub worker_bytes: usize,
    /// File mode of the backing files.  Default 384 (0600).
    #[serde(default = "default_mode")]
    pub mode: u32,
    /// Replace files left by a dead creator.  Default true.
    #[serde(default = "yes")]
    pub replace_stale: bool,
}

fn default_directory() -> PathBuf {
    RegionOptions::default().directory
}
fn default_join_timeout() -> u64 {
    RegionOptions::DEFAULT_JOIN_TIMEOUT.as_millis() as u64
}
fn default_mode() -> u32 {
    RegionOptions::DEFAULT_MODE
}
fn one() -> u32 {
    1
}
fn yes() -> bool {
    true
}

/// Region open modes.
#[derive(Debug, Clone, Copy, Default, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum OpenJson {
    /// Create, or join if it exists.
    #[default]
    CreateOrJoin,
    /// Create; fail if it exists.
    Create,
    /// Join; fail if it does not exist.
    Join,
}

/// Region pre-faulting modes.
#[derive(Debug, Clone, Copy, Default, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum PrefaultJson {
    /// No pre-faulting.
    Off,
    /// The kernel's populate flags where they work, else touching.
    #[default]
    Auto,
    /// Touch every page.
    Touch,
}

/// Built-in tier types.
#[derive(Debug, Clone, Copy, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum TierType {
    /// File-system tier ([`crate::tiers::fs`]).
    Fs,
    /// Redis or Valkey tier (cargo feature `redis-tier`; without it the
    /// type is known but refused with a message saying so).
    Redis,
}

/// One secondary tier: its type, back-pressure, and type-specific options
/// (checked once the type is known, so errors name `tiers[i].options.x`).
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TierJson {
    /// The tier's type.
    #[serde(rename = "type")]
    pub kind: TierType,
    /// Back-pressure for cascades to this tier (absent: never dropped).
    #[serde(default)]
    pub backpressure: Option<BackpressureJson>,
    /// Whether the tier's events reach the engine.  Default true; the
    /// tier's queue holds at most `primary.event_capacity` events (so 0,
    /// the default capacity, turns every tier's events off).
    #[serde(default = "yes")]
    pub events: bool,
    /// The type's options (an object).
    #[serde(default = "empty_object")]
    pub options: serde_json::Value,
}

fn empty_object() -> serde_json::Value {
    serde_json::Value::Object(Default::default())
}

/// Back-pressure settings; defaults are [`BackpressureConfig::default`].
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct BackpressureJson {
    /// Weight of a new latency sample, in (0, 1].  Default 0.3.
    pub alpha: f64,
    /// Enter pressure above this store latency (ns per byte).  Default 1.0.
    pub high_ns_per_byte: f64,
    /// Leave pressure below this.  Default 0.5.
    pub low_ns_per_byte: f64,
    /// Samples before the detector may signal.  Default 3.
    pub warmup: u32,
    /// Enter pressure after this many failed stores in a row (0: never).  Default 3.
    pub max_consecutive_failures: u32,
    /// `"drop"` (default) or `"throttle"`.
    pub policy: PressureJson,
}

impl Default for BackpressureJson {
    fn default() -> Self {
        let d = BackpressureConfig::default();
        BackpressureJson {
            alpha: d.alpha,
            high_ns_per_byte: d.high_ns_per_byte,
            low_ns_per_byte: d.low_ns_per_byte,
            warmup: d.warmup,
            max_consecutive_failures: d.max_consecutive_failures,
            policy: PressureJson::Drop,
        }
    }
}

/// Back-pressure policies.
#[derive(Debug, Clone, Copy, Default, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum PressureJson {
    /// Drop every cascade while under pressure.
    #[default]
    Drop,
    /// Admit one cascade at a time while under pressure.
    Throttle,
}

/// Options of an `"fs"` tier; defaults are [`crate::tiers::fs::FsOptions::new`]'s.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FsJson {
    /// Directory holding the blocks (required).
    pub directory: PathBuf,
    /// Create the directory if missing.  Default true.
    #[serde(default = "yes")]
    pub create_dir: bool,
    /// Byte limit of the files; 0 (default) is unbounded.
    #[serde(default)]
    pub capacity_bytes: u64,
    /// Usage fraction above which a store evicts.  Default 0.95.
    #[serde(default = "default_high")]
    pub high_watermark: f64,
    /// Usage fraction eviction brings usage down to.  Default 0.85.
    #[serde(default = "default_low")]
    pub low_watermark: f64,
    /// Read-priority worker threads.  Default 8.
    #[serde(default = "eight")]
    pub read_threads: usize,
    /// Write-priority worker threads.  Default 8.
    #[serde(default = "eight")]
    pub write_threads: usize,
    /// Use `O_DIRECT` where supported.  Default true.
    #[serde(default = "yes")]
    pub direct_io: bool,
    /// fdatasync each block before reporting it.  Default false.
    #[serde(default)]
    pub durable: bool,
    /// Other processes use the directory too.  Default false.
    #[serde(default)]
    pub shared: bool,
    /// `"local"` (default) or `"remote"`.
    #[serde(default)]
    pub locality: LocalityJson,
    /// Age after which leftover temporary files are removed.  Default 900000.
    #[serde(default = "default_stale_ms")]
    pub stale_temp_age_ms: u64,
    /// Write stores as unnamed files (O_TMPFILE) linked in place where the
    /// file system allows.  Default true.
    #[serde(default = "yes")]
    pub unnamed_temp_files: bool,
}

fn default_high() -> f64 {
    0.95
}
fn default_low() -> f64 {
    0.85
}
fn eight() -> usize {
    8
}
fn default_stale_ms() -> u64 {
    15 * 60 * 1000
}

/// Options of a `"redis"` tier; defaults are `RedisTierConfig::default()`'s.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RedisJson {
    /// Name in stats, metrics and errors.  Default "redis".
    #[serde(default = "default_redis_name")]
    pub name: String,
    /// `host:port` of the server or of cluster nodes.  Default `["127.0.0.1:6379"]`.
    #[serde(default = "default_nodes")]
    pub nodes: Vec<String>,
    /// Whether `nodes` are Redis Cluster nodes.  Default false.
    #[serde(default)]
    pub cluster: bool,
    /// Key prefix; one per block layout.  Default "kvtier".
    #[serde(default = "default_namespace")]
    pub namespace: String,
    /// ACL user for AUTH.  Default none.
    #[serde(default)]
    pub username: Option<String>,
    /// Password for AUTH.  Default none.
    #[serde(default)]
    pub password: Option<String>,
    /// Database number (standalone), 0 to 2147483647.  Default 0.
    #[serde(default)]
    pub db: i64,
    /// TLS (needs the `redis-tls` feature).  Default false.
    #[serde(default)]
    pub tls: bool,
    /// PEM file of CAs to trust for TLS.  Default: the system's.
    #[serde(default)]
    pub tls_ca_file: Option<PathBuf>,
    /// Expiry of stored blocks in ms; 0 (default) keeps them; at most 2^62.
    #[serde(default)]
    pub ttl_ms: u64,
    /// Bound on opening a connection.  Default 1000.
    #[serde(default = "default_connect_ms")]
    pub connect_timeout_ms: u64,
    /// Bound on one round trip.  Default 2000.
    #[serde(default = "default_command_ms")]
    pub command_timeout_ms: u64,
    /// Worker threads, one connection each.  Default 4.
    #[serde(default = "default_connections")]
    pub connections: usize,
    /// Most value bytes per pipelined round trip.  Default 4194304.
    #[serde(default = "default_pipeline_bytes")]
    pub pipeline_bytes: usize,
    /// Most commands per pipelined round trip.  Default 256.
    #[serde(default = "default_pipeline_ops")]
    pub pipeline_ops: usize,
    /// Consecutive failures that open the circuit breaker.  Default 3.
    #[serde(default = "default_breaker_failures")]
    pub breaker_failures: u32,
    /// Time the breaker stays open before a probe.  Default 1000.
    #[serde(default = "default_breaker_cooldown")]
    pub breaker_cooldown_ms: u64,
    /// How long a negative existence check is trusted.  Default 500.
    #[serde(default = "default_miss_cache")]
    pub miss_cache_ms: u64,
    /// Most keys remembered as present (oldest forgotten first).  Default 262144.
    #[serde(default = "default_max_known")]
    pub max_known_keys: usize,
}

fn default_redis_name() -> String {
    "redis".into()
}
fn default_nodes() -> Vec<String> {
    vec!["127.0.0.1:6379".into()]
}
fn default_namespace() -> String {
    "kvtier".into()
}
fn default_connect_ms() -> u64 {
    1000
}
fn default_command_ms() -> u64 {
    2000
}
fn default_connections() -> usize {
    4
}
fn default_pipeline_bytes() -> usize {
    4 << 20
}
fn default_pipeline_ops() -> usize {
    256
}
fn default_breaker_failures() -> u32 {
    3
}
fn default_breaker_cooldown() -> u64 {
    1000
}
fn default_miss_cache() -> u64 {
    500
}
fn default_max_known() -> usize {
    1 << 18
}

/// Tier localities.
#[derive(Debug, Clone, Copy, Default, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum LocalityJson {
    /// This machine.
    #[default]
    Local,
    /// Another machine.
    Remote,
}

/// Parses `value` as `T`, prefixing errors with `prefix` and the path
/// inside `value`.
fn typed<'de, T: Deserialize<'de>>(
    prefix: &str,
    de: impl serde::Deserializer<'de, Error = serde_json::Error>,
) -> Result<T> {
    serde_path_to_error::deserialize(de).map_err(|e| {
        let inner = e.path().to_string();
        let path = match (prefix.is_empty(), inner == ".") {
            (true, true) => "(document)".to_string(),
            (true, false) => inner,
            (false, true) => prefix.to_string(),
            (false, false) => format!("{prefix}.{inner}"),
        };
        Error::InvalidArgument(format!("configuration: {path}: {}", e.inner()))
    })
}

impl Config {
    /// Parses a configuration document (UTF-8 JSON).
    pub fn from_json(text: &str) -> Result<Config> {
        let mut de = serde_json::Deserializer::from_str(text);
        let config: Config = typed("", &mut de)?;
        de.end().map_err(|e| {
            Error::InvalidArgument(format!("configuration: trailing characters: {e}"))
        })?;
        for (i, t) in config.tiers.iter().enumerate() {
            // Check every tier's options before anything is built.
            t.options_checked(i)?;
        }
        Ok(config)
    }

    /// Number of primary slots: `capacity`, `capacity_bytes / block_bytes`, or 1024.
    pub fn slot_count(&self) -> Result<u32> {
        let bad = |m: String| Err(Error::InvalidArgument(format!("configuration: {m}")));
        match (self.primary.capacity, self.primary.capacity_bytes) {
            (Some(_), Some(_)) => {
                bad("primary: give capacity (slots) or capacity_bytes, not both".into())
            }
            (Some(n), None) => Ok(n),
            (None, Some(bytes)) => {
                if self.block_bytes == 0 {
                    return bad("primary.capacity_bytes: needs block_bytes (the slot size)".into());
                }
                let n = bytes / self.block_bytes;
                if n == 0 || n > u32::MAX as u64 - 1 {
                    return bad(format!(
                        "primary.capacity_bytes: {bytes} bytes make {n} slots of {} bytes (need 1..=4294967294)",
                        self.block_bytes
                    ));
                }
                Ok(n as u32)
            }
            (None, None) => Ok(PrimaryConfig::default().capacity),
        }
    }

    /// Builds the manager: slot memory (the region, or anonymous memory
    /// when `block_bytes` > 0), the primary tier, then the tiers in order.
    /// On error nothing is left behind (a region this call created is
    /// removed again).
    pub fn build(&self) -> Result<Manager> {
        let capacity = self.slot_count()?;
        let block_bytes = usize::try_from(self.block_bytes)
            .map_err(|_| Error::InvalidArgument("configuration: block_bytes: too large".into()))?;
        let mut region = None;
        let slots = match &self.region {
            Some(r) => {
                if block_bytes == 0 {
                    return Err(Error::InvalidArgument(
                        "configuration: region: needs block_bytes (the slot size)".into(),
                    ));
                }
                let opts = r.options(capacity, block_bytes);
                let made = Region::create_or_join(&opts)
                    .map_err(|e| Error::InvalidArgument(format!("configuration: region: {e}")))?;
                let slots = made.slots();
                region = Some(made);
                Some(slots)
            }
            None if block_bytes > 0 => Some(SlotMemory::anonymous(capacity, block_bytes)?),
            None => None,
        };
        let primary = PrimaryTier::new(PrimaryConfig {
            capacity,
            policy: match self.primary.policy {
                PolicyJson::Lru => PolicyKind::Lru,
                PolicyJson::Arc => PolicyKind::Arc,
            },
            store_threshold: self.primary.store_threshold,
            admission_table_size: self.primary.admission_table_size,
            event_capacity: self.primary.event_capacity,
            kv_groups: self.primary.kv_groups,
        })
        .map_err(|e| match e {
            Error::OutOfMemory(m) => Error::OutOfMemory(format!("configuration: primary: {m}")),
            e => Error::InvalidArgument(format!("configuration: primary: {e}")),
        })?;
        let manager = Manager::new(
            primary,
            ManagerOptions {
                promotion_answer: match self.promotion_answer {
                    PromotionJson::Retry => PromotionAnswer::Retry,
                    PromotionJson::HitPending => PromotionAnswer::HitPending,
                },
                block_bytes: self.block_bytes,
                error_log_capacity: self.error_log_capacity,
                kv_groups: self.primary.kv_groups,
            },
        );
        if let Some(s) = &slots {
            manager.set_slot_memory(s.clone())?;
        }
        if let Some(r) = region {
            manager.attach_region(r)?;
        }
        for (i, t) in self.tiers.iter().enumerate() {
            let opts = TierOptions {
                backpressure: t.backpressure.as_ref().map(|b| BackpressureConfig {
                    alpha: b.alpha,
                    high_ns_per_byte: b.high_ns_per_byte,
                    low_ns_per_byte: b.low_ns_per_byte,
                    warmup: b.warmup,
                    max_consecutive_failures: b.max_consecutive_failures,
                    policy: match b.policy {
                        PressureJson::Drop => PressurePolicy::Drop,
                        PressureJson::Throttle => PressurePolicy::Throttle,
                    },
                }),
                events: t.events,
            };
            let tier = t
                .open(i, slots.as_ref())
                .map_err(|e| Error::InvalidArgument(format!("configuration: tiers[{i}]: {e}")))?;
            manager
                .add_tier_with(tier, opts)
                .map_err(|e| Error::InvalidArgument(format!("configuration: tiers[{i}]: {e}")))?;
        }
        log::info!(
            target: "kvtier::config",
            "manager built from configuration: {capacity} primary slots of {} bytes, {} secondary tiers",
            self.block_bytes,
            self.tiers.len()
        );
        Ok(manager)
    }
}

impl RegionConfig {
    fn options(&self, slot_count: u32, slot_bytes: usize) -> RegionOptions {
        RegionOptions {
            name: self.name.clone(),
            directory: self.directory.clone(),
            slot_count,
            slot_bytes,
            worker_bytes: self.worker_bytes,
            open: match self.open {
                OpenJson::CreateOrJoin => OpenMode::CreateOrJoin,
                OpenJson::Create => OpenMode::Create,
                OpenJson::Join => OpenMode::Join,
            },
            join_timeout: Duration::from_millis(self.join_timeout_ms),
            segments: self.segments,
            prefault: match self.prefault {
                PrefaultJson::Off => Prefault::Off,
                PrefaultJson::Auto => Prefault::Auto,
                PrefaultJson::Touch => Prefault::Touch,
            },
            prefault_share: None,
            prefault_threads: self.prefault_threads,
            mode: self.mode,
            replace_stale: self.replace_stale,
        }
    }
}

/// A tier's typed options.
enum TierOptionsJson {
    Fs(FsJson),
    Redis(RedisJson),
}

impl TierJson {
    fn options_checked(&self, index: usize) -> Result<TierOptionsJson> {
        let prefix = format!("tiers[{index}].options");
        Ok(match self.kind {
            TierType::Fs => TierOptionsJson::Fs(typed(&prefix, &self.options)?),
            TierType::Redis => TierOptionsJson::Redis(typed(&prefix, &self.options)?),
        })
    }

    fn open(
        &self,
        index: usize,
        slots: Option<&SlotMemory>,
    ) -> Result<Box<dyn crate::tiering::SecondaryTier>> {
        let need_slots = || {
            slots.cloned().ok_or_else(|| {
                Error::InvalidArgument(
                    "a built-in tier needs slot memory: set block_bytes (the slot size)".into(),
                )
            })
        };
        match self.options_checked(index)? {
            TierOptionsJson::Fs(o) => {
                let mut f = crate::tiers::fs::FsOptions::new(o.directory);
                f.create_dir = o.create_dir;
                f.capacity_bytes = o.capacity_bytes;
                f.high_watermark = o.high_watermark;
                f.low_watermark = o.low_watermark;
                f.read_threads = o.read_threads;
                f.write_threads = o.write_threads;
                f.direct_io = o.direct_io;
                f.durable = o.durable;
                f.shared = o.shared;
                f.locality = match o.locality {
                    LocalityJson::Local => Locality::Local,
                    LocalityJson::Remote => Locality::Remote,
                };
                f.stale_temp_age = Duration::from_millis(o.stale_temp_age_ms);
                f.unnamed_temp_files = o.unnamed_temp_files;
                Ok(Box::new(crate::tiers::fs::FsTier::open(need_slots()?, f)?))
            }
            TierOptionsJson::Redis(o) => open_redis(o, need_slots()?),
        }
    }
}

#[cfg(feature = "redis-tier")]
fn open_redis(o: RedisJson, slots: SlotMemory) -> Result<Box<dyn crate::tiering::SecondaryTier>> {
    use crate::tiers::redis::{RedisTier, RedisTierConfig};
    let ms = Duration::from_millis;
    let config = RedisTierConfig {
        nodes: o.nodes,
        cluster: o.cluster,
        namespace: o.namespace,
        username: o.username,
        password: o.password,
        db: o.db,
        tls: o.tls,
        tls_ca_file: o.tls_ca_file,
        ttl: (o.ttl_ms > 0).then(|| ms(o.ttl_ms)),
        connect_timeout: ms(o.connect_timeout_ms),
        command_timeout: ms(o.command_timeout_ms),
        connections: o.connections,
        pipeline_bytes: o.pipeline_bytes,
        pipeline_ops: o.pipeline_ops,
        breaker_failures: o.breaker_failures,
        breaker_cooldown: ms(o.breaker_cooldown_ms),
        miss_cache: ms(o.miss_cache_ms),
        max_known_keys: o.max_known_keys,
    };
    Ok(Box::new(RedisTier::new(&o.name, config, slots)?))
}

#[cfg(not(feature = "redis-tier"))]
fn open_redis(_: RedisJson, _: SlotMemory) -> Result<Box<dyn crate::tiering::SecondaryTier>> {
    Err(Error::Unsupported(
        "type \"redis\" needs kvtier built with the cargo feature `redis-tier`".into(),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn err(json: &str) -> String {
        match Config::from_json(json) {
            Ok(c) => match c.build() {
                Ok(_) => panic!("accepted: {json}"),
                Err(e) => e.to_string(),
            },
            Err(e) => e.to_string(),
        }
    }

    #[test]
    fn empty_document_takes_every_default() {
        let c = Config::from_json("{}").unwrap();
        assert_eq!(c.block_bytes, 0);
        assert_eq!(c.slot_count().unwrap(), 1024);
        assert_eq!(c.error_log_capacity, 64);
        assert_eq!(c.primary.policy, PolicyJson::Lru);
        assert!(c.tiers.is_empty() && c.region.is_none());
        let m = c.build().unwrap();
        assert_eq!(m.tier_count(), 0);
        assert!(m.slot_memory().is_none());
    }

    #[test]
    fn kv_groups_reach_the_primary_tier() {
        let c = Config::from_json(r#"{"primary": {"capacity": 4, "kv_groups": true}}"#).unwrap();
        assert!(c.primary.kv_groups);
        let m = c.build().unwrap();
        let r = m.on_new_request("r", Default::default()).unwrap().id;
        let short = crate::Key::new(b"tiny").unwrap();
        let mut plan = crate::tiering::backend::StorePlan::default();
        let e = m.prepare_store(r, &[short], &mut plan).unwrap_err();
        assert!(matches!(e, Error::InvalidKey { index: 0, .. }), "{e}");
        assert!(m.set_positions(r, &[short], &[16]).is_err());
        // Off by default: the same key is an ordinary key.
        let m = Config::from_json("{}").unwrap().build().unwrap();
        let r = m.on_new_request("r", Default::default()).unwrap().id;
        m.prepare_store(r, &[short], &mut plan).unwrap();
        m.set_positions(r, &[short], &[16]).unwrap();
    }

    #[test]
    fn errors_name_the_field_path() {
        let e = err(
            r#"{"block_bytes": 4096, "tiers": [{"type": "fs", "options": {"directory": "/tmp/x"}},
                {"type": "fs", "options": {"directory": "/tmp/y", "capacity_bytes": "big"}}]}"#,
        );
        assert!(
            e.contains("tiers[1].options.capacity_bytes: invalid type"),
            "{e}"
        );
        let e = err(r#"{"primary": {"capcity": 3}}"#);
        assert!(
            e.contains("primary") && e.contains("unknown field `capcity`"),
            "{e}"
        );
        let e = err(r#"{"tiers": [{"type": "tape"}]}"#);
        assert!(
            e.contains("tiers[0].type") && e.contains("unknown variant `tape`"),
            "{e}"
        );
        let e = err(r#"{"primary": {"policy": "mru"}}"#);
        assert!(e.contains("primary.policy"), "{e}");
        let e = err(r#"{"primary": {"capacity": 4, "capacity_bytes": 4096}}"#);
        assert!(e.contains("not both"), "{e}");
        let e = err(r#"{"tiers": [{"type": "fs", "options": {"directory": "/tmp/kvtier-x"}}]}"#);
        assert!(e.contains("tiers[0]") && e.contains("block_bytes"), "{e}");
        let e = err(r#"{"tiers": [{"type": "fs", "options": {}}]}"#);
        assert!(
            e.contains("tiers[0].options") && e.contains("directory"),
            "{e}"
        );
        let e = err(
            r#"{"block_bytes": 64, "tiers": [{"type": "redis", "options": {"nodes": "a:1"}}]}"#,
        );
        assert!(e.contains("tiers[0].options.nodes: invalid type"), "{e}");
        let e = err(r#"{} x"#);
        assert!(e.contains("trailing"), "{e}");
    }

    #[test]
    fn builds_anonymous_slots_and_an_fs_tier() {
        let dir = std::env::temp_dir().join(format!("kvtier-config-{}", std::process::id()));
        let json = format!(
            r#"{{"block_bytes": 4096, "primary": {{"capacity_bytes": 65536, "policy": "arc"}},
                "promotion_answer": "hit_pending",
                "tiers": [{{"type": "fs", "backpressure": {{"policy": "throttle"}},
                           "options": {{"directory": {:?}, "read_threads": 1, "write_threads": 1}}}}]}}"#,
            dir.display().to_string()
        );
        let c = Config::from_json(&json).unwrap();
        assert_eq!(c.slot_count().unwrap(), 16);
        let m = c.build().unwrap();
        assert_eq!(m.tier_count(), 1);
        let slots = m.slot_memory().unwrap();
        assert_eq!((slots.slot_count(), slots.slot_bytes()), (16, 4096));
        assert_eq!(&*m.tier_name(1).unwrap(), "fs");
        m.shutdown().unwrap();
        drop(m);
        let _ = std::fs::remove_dir_all(dir);
    }
}
