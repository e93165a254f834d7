//! How a manager is built: its options ([`Config`]), the slot memory it
//! copies blocks through, its primary tier and its built-in secondary
//! tiers.  `kvtier_manager_new` (C options and a region), and
//! `kvtier_manager_new_from_json` (one JSON document, in the spirit of
//! vLLM's `kv_connector_extra_config`) both come here, to
//! [`Config::build_with`].
//!
//! The options are one set of types, each with its defaults in its
//! [`Default`] and read from JSON with serde: [`Config`] (the manager's),
//! [`PrimaryConfig`], [`RegionOptions`], [`TierConfig`] with
//! [`BackpressureConfig`], [`FsOptions`] and [`RedisTierConfig`].  The C
//! `_default()` functions are built from the same defaults.
//!
//! JSON parsing is strict: unknown fields and wrong types are errors whose
//! message starts with the field's path (`tiers[1].options.capacity_bytes:
//! invalid type: ...`).  Every field has a default except a region's
//! `name` and an fs tier's `directory`; docs/configuration.md
//! documents them all.  Tiers implemented in C or C++ are added afterwards
//! with `kvtier_manager_add_tier`, behind the configured ones.

use serde::Deserialize;

use crate::error::{Error, Result};
use crate::primary::{PrimaryConfig, PrimaryTier};
use crate::region::{Region, RegionOptions, SlotMemory};
use crate::tiering::{
    BackpressureConfig, Manager, ManagerOptions, PinningOptions, ProgressOptions, PromotionAnswer,
    TierOptions,
};
use crate::tiers::fs::{FsOptions, FsTier};
use crate::tiers::redis::RedisTierConfig;

/// A manager's options: `kvtier_manager_options` in C (which has no
/// `region` or `tiers`: C passes a region handle and adds tiers by call),
/// and the whole JSON document.  Missing fields take [`Default`]'s values,
/// which come from [`ManagerOptions`] and [`PrimaryConfig`].
///
/// In JSON, `primary.capacity_bytes` may replace `primary.capacity`: the
/// slot count is then `capacity_bytes / block_bytes`.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Config {
    /// Bytes per block (one primary slot).  From JSON: 0 means the manager
    /// has no slot memory of its own unless a region is given (only C
    /// tiers, which bring their own); above 0 without a region, private
    /// anonymous memory.  It is also the block size back-pressure measures
    /// latency per byte with (0: per block).  Default 0.
    pub block_bytes: u64,
    /// A shared region holding the slots (JSON only; its slot count and
    /// slot size are the primary capacity and `block_bytes`).
    pub region: Option<RegionOptions>,
    /// The primary tier.
    pub primary: PrimaryConfig,
    /// What a lookup that starts a promotion answers.
    pub promotion_answer: PromotionAnswer,
    /// How many messages the error log keeps.
    pub error_log_capacity: usize,
    /// Holds and the wait bound that keep waiting requests moving
    /// (`"progress": {"hold": true, "wait_steps": 16, "wait_ms": 0}`;
    /// `{"hold": false, "wait_steps": 0}` follows vLLM 0.33).
    pub progress: ProgressOptions,
    /// The bound of pin sets (`"pinning": {"max_share": 0.25}`: the most
    /// share of a tier's capacity pin sets may hold, 0.0 to 1.0).
    pub pinning: PinningOptions,
    /// Built-in secondary tiers, in lookup order (JSON only).
    pub tiers: Vec<TierConfig>,
    /// The `/metrics` endpoint (JSON only; none by default).
    pub metrics: Option<MetricsConfig>,
    /// The engine's block layout fingerprint
    /// ([`ManagerOptions::layout_fingerprint`]): the primary tier's, which
    /// block drops select tiers by, and the one the fs and redis tiers
    /// that give none of their own take.
    pub layout_fingerprint: Option<String>,
}

/// The optional `/metrics` endpoint of a manager built from JSON:
/// `"metrics": {"listen": "127.0.0.1:9400"}` serves the manager's
/// Prometheus text over HTTP from a thread of its own (see
/// [`crate::serve`]).
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MetricsConfig {
    /// `IP:port` (or `host:port`) to listen on; port 0 picks a free one.
    pub listen: String,
}

impl Default for Config {
    fn default() -> Config {
        let m = ManagerOptions::default();
        Config {
            block_bytes: m.block_bytes,
            region: None,
            primary: PrimaryConfig::default(),
            promotion_answer: m.promotion_answer,
            error_log_capacity: m.error_log_capacity,
            progress: m.progress,
            pinning: m.pinning,
            tiers: Vec::new(),
            metrics: None,
            layout_fingerprint: m.layout_fingerprint,
        }
    }
}

/// Built-in tier types.
#[derive(Debug, Clone, Copy, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum TierType {
    /// File-system tier ([`crate::tiers::fs`]).
    Fs,
    /// Redis or Valkey tier ([`crate::tiers::redis`]; without the cargo
    /// feature `redis-tier` the type is known but refused with a message
    /// saying so).
    Redis,
}

/// One built-in secondary tier of a JSON configuration: its type, the
/// options every tier has ([`TierOptions`]), and the type's own options
/// (checked once the type is known, so errors name `tiers[i].options.x`).
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TierConfig {
    /// The tier's type.
    #[serde(rename = "type")]
    pub kind: TierType,
    /// Back-pressure for cascades to this tier (absent: never dropped).
    #[serde(default = "default_backpressure")]
    pub backpressure: Option<BackpressureConfig>,
    /// Whether the tier's events reach the engine; its queue holds at most
    /// `primary.event_capacity` events (so 0, the default capacity, turns
    /// every tier's events off).
    #[serde(default = "default_events")]
    pub events: bool,
    /// The type's options (an object): [`FsOptions`] or [`RedisTierConfig`].
    #[serde(default = "empty_object")]
    pub options: serde_json::Value,
}

fn default_backpressure() -> Option<BackpressureConfig> {
    TierOptions::default().backpressure
}
fn default_events() -> bool {
    TierOptions::default().events
}
fn empty_object() -> serde_json::Value {
    serde_json::Value::Object(Default::default())
}

/// A built-in tier's own options, by type.
#[derive(Debug, Clone, PartialEq)]
pub enum BuiltinTier {
    /// A file-system tier.
    Fs(FsOptions),
    /// A redis tier.
    Redis(RedisTierConfig),
}

/// Where a manager's slots are, and what keeps them mapped.
pub enum SlotSource {
    /// No slot memory: only tiers that bring their own (C vtable tiers).
    None,
    /// Memory someone else owns (a caller's region, private anonymous
    /// memory): the manager keeps a view of it mapped.
    View(SlotMemory),
    /// A region the manager owns from now on (released with it).
    Owned(Region),
}

/// Parses `de` as `T`, prefixing errors with `prefix` and the path inside.
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
        configuration(format!("{path}: {}", e.inner()))
    })
}

fn configuration(message: String) -> Error {
    Error::InvalidArgument(format!("configuration: {message}"))
}

impl Config {
    /// Parses a configuration document (UTF-8 JSON) and checks every
    /// tier's options; builds nothing.
    pub fn from_json(text: &str) -> Result<Config> {
        let mut doc: serde_json::Value =
            serde_json::from_str(text).map_err(|e| configuration(format!("(document): {e}")))?;
        // `primary.capacity_bytes` is a JSON convenience for the capacity.
        let mut capacity_bytes = None;
        if let Some(p) = doc.get_mut("primary").and_then(|p| p.as_object_mut()) {
            let with_capacity = p.contains_key("capacity");
            if let Some(v) = p.remove("capacity_bytes").filter(|v| !v.is_null()) {
                if with_capacity {
                    return Err(configuration(
                        "primary: give capacity (slots) or capacity_bytes, not both".into(),
                    ));
                }
                capacity_bytes = Some(typed::<u64>("primary.capacity_bytes", &v)?);
            }
        }
        let mut config: Config = typed("", &doc)?;
        if let Some(bytes) = capacity_bytes {
            config.primary.capacity = config.slots_in(bytes)?;
        }
        if config.region.as_ref().is_some_and(|r| r.name.is_empty()) {
            return Err(configuration(
                "region.name: missing (processes giving the same name share the region)".into(),
            ));
        }
        if let Some(f) = &config.layout_fingerprint {
            crate::tiers::layout::check_fingerprint("layout_fingerprint", f)
                .map_err(|e| e.within("configuration"))?;
        }
        for (i, t) in config.tiers.iter().enumerate() {
            // Every tier's options are checked before anything is built.
            t.builtin(i)?;
        }
        if let Some(m) = &config.metrics {
            crate::serve::parse_listen(&m.listen).map_err(|e| e.within("configuration"))?;
        }
        Ok(config)
    }

    /// Number of slots of `bytes` bytes of `block_bytes`-byte slots.
    fn slots_in(&self, bytes: u64) -> Result<u32> {
        if self.block_bytes == 0 {
            return Err(configuration(
                "primary.capacity_bytes: needs block_bytes (the slot size)".into(),
            ));
        }
        let n = bytes / self.block_bytes;
        if n == 0 || n > u32::MAX as u64 - 1 {
            return Err(configuration(format!(
                "primary.capacity_bytes: {bytes} bytes make {n} slots of {} bytes (need 1..=4294967294)",
                self.block_bytes
            )));
        }
        Ok(n as u32)
    }

    /// The manager's own options (the rest builds its tiers).
    pub fn manager_options(&self) -> ManagerOptions {
        ManagerOptions {
            promotion_answer: self.promotion_answer,
            block_bytes: self.block_bytes,
            error_log_capacity: self.error_log_capacity,
            kv_groups: self.primary.kv_groups,
            progress: self.progress,
            pinning: self.pinning,
            layout_fingerprint: self.layout_fingerprint.clone(),
        }
    }

    /// The pinning bound checked: an error naming the field if it is out
    /// of range.
    fn check_pinning(&self) -> Result<()> {
        let share = self.pinning.max_share;
        if !(0.0..=1.0).contains(&share) {
            return Err(configuration(format!(
                "pinning.max_share: {share} (must be 0.0 to 1.0)"
            )));
        }
        Ok(())
    }

    /// Builds the manager the way a JSON document describes it: slot memory
    /// from `region` (created or joined), else private memory when
    /// `block_bytes` > 0, else none; then [`Config::build_with`].  Errors
    /// start with `configuration:`.  On error nothing is left behind (a
    /// region this call created is removed again).
    pub fn build(&self) -> Result<Manager> {
        let in_config = |e: Error| e.within("configuration");
        let block_bytes = usize::try_from(self.block_bytes)
            .map_err(|_| configuration("block_bytes: too large".into()))?;
        let slots = match &self.region {
            Some(r) => {
                if block_bytes == 0 {
                    return Err(configuration(
                        "region: needs block_bytes (the slot size)".into(),
                    ));
                }
                let options = RegionOptions {
                    slot_count: self.primary.capacity,
                    slot_bytes: block_bytes,
                    ..r.clone()
                };
                let region =
                    Region::create_or_join(&options).map_err(|e| in_config(e.within("region")))?;
                SlotSource::Owned(region)
            }
            None if block_bytes > 0 => SlotSource::View(
                SlotMemory::anonymous(self.primary.capacity, block_bytes).map_err(in_config)?,
            ),
            None => SlotSource::None,
        };
        self.build_with(slots).map_err(in_config)
    }

    /// Builds the manager the way a JSON document describes it, over slot
    /// memory the caller made (a region's slots): the document must not
    /// name a region of its own, and `block_bytes` keeps only its meaning
    /// for back-pressure.  Errors start with `configuration:`.
    pub fn build_over(&self, slots: SlotMemory) -> Result<Manager> {
        if self.region.is_some() {
            return Err(configuration(
                "region: the document names a region and the caller gives one; give one of them"
                    .into(),
            ));
        }
        self.build_with(SlotSource::View(slots))
            .map_err(|e| e.within("configuration"))
    }

    /// Builds the manager over `slots`: the primary tier, the manager, its
    /// slot memory (which must hold every primary slot), then `tiers` in
    /// order.  The one way every manager is made.  Errors name the part
    /// that failed (`primary: ...`, `tiers[1]: ...`).
    pub fn build_with(&self, slots: SlotSource) -> Result<Manager> {
        self.check_pinning()?;
        let primary = PrimaryTier::new(self.primary.clone()).map_err(|e| e.within("primary"))?;
        let manager = Manager::new(primary, self.manager_options());
        match slots {
            SlotSource::None => {}
            SlotSource::View(s) => {
                manager.set_slot_memory(s.clone())?;
                manager.attach_region(s)?;
            }
            SlotSource::Owned(r) => {
                manager.set_slot_memory(r.slots())?;
                manager.attach_region(r)?;
            }
        }
        for (i, t) in self.tiers.iter().enumerate() {
            let tier = t.builtin(i)?.inherit(self.layout_fingerprint.as_deref());
            add_builtin_tier(&manager, tier, t.tier_options())
                .map_err(|e| e.within(&format!("tiers[{i}]")))?;
        }
        log::info!(
            target: "kvtier::config",
            "manager built: {} primary slots, blocks of {} bytes, {} built-in secondary tiers",
            self.primary.capacity,
            self.block_bytes,
            self.tiers.len()
        );
        Ok(manager)
    }
}

impl TierConfig {
    /// The options every tier has.
    pub fn tier_options(&self) -> TierOptions {
        TierOptions {
            backpressure: self.backpressure,
            events: self.events,
        }
    }

    /// The type's own options, read from `options` (tier `index` of the
    /// document, for error paths).
    pub fn builtin(&self, index: usize) -> Result<BuiltinTier> {
        let prefix = format!("tiers[{index}].options");
        Ok(match self.kind {
            TierType::Fs => {
                let o: FsOptions = typed(&prefix, &self.options)?;
                if o.root.as_os_str().is_empty() {
                    return Err(configuration(format!(
                        "{prefix}.directory: missing (the directory of the blocks)"
                    )));
                }
                BuiltinTier::Fs(o)
            }
            TierType::Redis => BuiltinTier::Redis(typed(&prefix, &self.options)?),
        })
    }
}

impl BuiltinTier {
    /// The tier with the manager's layout fingerprint when it has none of
    /// its own.
    pub fn inherit(mut self, fingerprint: Option<&str>) -> BuiltinTier {
        let own = match &mut self {
            BuiltinTier::Fs(o) => &mut o.layout_fingerprint,
            BuiltinTier::Redis(o) => &mut o.layout_fingerprint,
        };
        if own.is_none() {
            *own = fingerprint.map(str::to_string);
        }
        self
    }

    /// Opens the tier over `slots` (an fs tier starts rebuilding its index
    /// from the files already there in the background, serving meanwhile;
    /// a redis tier starts its workers and connects later).
    pub fn open(self, slots: SlotMemory) -> Result<Box<dyn crate::tiering::SecondaryTier>> {
        match self {
            BuiltinTier::Fs(o) => Ok(Box::new(FsTier::open(slots, o)?)),
            BuiltinTier::Redis(o) => open_redis(o, slots),
        }
    }
}

/// Opens a built-in tier over `manager`'s slot memory and adds it behind
/// the others; returns its tier index (1 for the first secondary tier).
/// A manager without slot memory is an invalid argument that says how to
/// give it some.  The one way built-in tiers are added, from C and JSON.
pub fn add_builtin_tier(
    manager: &Manager,
    tier: BuiltinTier,
    options: TierOptions,
) -> Result<usize> {
    let slots = manager.slot_memory().cloned().ok_or_else(|| {
        Error::InvalidArgument(
            "a built-in tier needs the manager's slot memory, and this manager has none: \
             give kvtier_manager_new a region, or the JSON configuration block_bytes (the slot size)"
                .into(),
        )
    })?;
    manager.add_tier_with(tier.open(slots)?, options)
}

#[cfg(feature = "redis-tier")]
fn open_redis(
    o: RedisTierConfig,
    slots: SlotMemory,
) -> Result<Box<dyn crate::tiering::SecondaryTier>> {
    Ok(Box::new(crate::tiers::redis::RedisTier::new(o, slots)?))
}

#[cfg(not(feature = "redis-tier"))]
fn open_redis(_: RedisTierConfig, _: SlotMemory) -> Result<Box<dyn crate::tiering::SecondaryTier>> {
    Err(Error::Unsupported(
        "the redis tier needs kvtier built with the cargo feature `redis-tier`".into(),
    ))
}

#[cfg(test)]
mod tests;
