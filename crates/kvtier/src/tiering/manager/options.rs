//! What a caller passes in: the manager's options, each tier's options at
//! registration and a request's parameters, and the answer that starts a
//! request.  Plain data, with their defaults.

use super::{
    BackpressureConfig, OffloadPolicy, ProgressOptions, PromotionAnswer, RequestId, TierFilter,
};

/// A started request: the handle its later calls take, and the offload
/// policy the tiers asked for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct StartedRequest {
    /// The request's handle: never 0, never reused by the same manager.
    pub id: RequestId,
    /// Request-level if any tier asked for it, else block-level.
    pub policy: OffloadPolicy,
}

/// Options of a manager beyond its primary tier.
#[derive(Clone, Debug)]
pub struct ManagerOptions {
    /// Answer for a lookup that started a promotion.
    pub promotion_answer: PromotionAnswer,
    /// Bytes per block, used for back-pressure latency per byte when a tier
    /// reports no byte count (0: latency per block instead).
    pub block_bytes: u64,
    /// How many tier error messages the error log keeps (oldest dropped).
    pub error_log_capacity: usize,
    /// [0.33] Keys end with a 4-byte big-endian KV-cache group index: the
    /// manager turns its primary tier's KV-group option on (see
    /// [`PrimaryConfig::kv_groups`](crate::primary::PrimaryConfig::kv_groups));
    /// a primary tier built with the option keeps it either way.  Every
    /// call that takes keys (lookups included) then refuses a key shorter
    /// than 5 bytes as `InvalidKey`, before anything changes.
    pub kv_groups: bool,
    /// How waiting requests are kept moving: holds and the wait
    /// bound (default on; [`ProgressOptions::vllm()`] follows vLLM 0.33).
    pub progress: ProgressOptions,
    /// The bound of pin sets ([`Manager::pin_set`](super::Manager::pin_set)).
    pub pinning: PinningOptions,
    /// The block layout the engine's keys belong to (model id, dtype, block
    /// size, KV layout) as one string of 1..=256 printable ASCII bytes:
    /// the primary tier's fingerprint, which
    /// [`Manager::drop_blocks`](super::Manager::drop_blocks) selects tiers
    /// by, and the one the built-in tiers a configuration builds
    /// ([`crate::config::Config::build_with`]) without one of their own
    /// take (they refuse a store, directory or namespace, that holds
    /// another layout's blocks).  `None`: no check.
    pub layout_fingerprint: Option<String>,
}

/// The bound of pin sets (JSON `"pinning"`).
#[derive(Clone, Copy, Debug, PartialEq, serde::Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct PinningOptions {
    /// Most share of a tier's capacity (in blocks) that pin sets may hold
    /// together, 0.0 to 1.0 (default 0.25; 0 turns pinning off).
    pub max_share: f64,
}

impl Default for PinningOptions {
    fn default() -> Self {
        PinningOptions { max_share: 0.25 }
    }
}

impl Default for ManagerOptions {
    fn default() -> Self {
        ManagerOptions {
            promotion_answer: PromotionAnswer::Retry,
            block_bytes: 0,
            error_log_capacity: 64,
            kv_groups: false,
            progress: ProgressOptions::default(),
            pinning: PinningOptions::default(),
            layout_fingerprint: None,
        }
    }
}

/// Per-tier options given at registration.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct TierOptions {
    /// Back-pressure detector and policy for cascades to this tier (none: never dropped).
    pub backpressure: Option<BackpressureConfig>,
    /// Whether the tier's events reach
    /// [`Manager::take_events`](super::Manager::take_events) (default
    /// true).  The tier queues at most the primary tier's event capacity
    /// (so a capacity of 0 turns every tier's events off); false turns this
    /// tier's events off whatever the capacity: the tier queues none, and
    /// any a tier reports anyway are discarded.
    pub events: bool,
}

impl Default for TierOptions {
    fn default() -> Self {
        TierOptions {
            backpressure: None,
            events: true,
        }
    }
}

/// What the caller attaches to a request at `request_begin`.
#[derive(Clone, Debug, Default)]
pub struct RequestParams {
    /// Small key/value list tiers may read.
    pub params: Vec<(String, String)>,
    /// Opaque value passed back to tiers as is (a C pointer).
    pub user_data: usize,
    /// Which secondary tiers lookups may use.
    pub filter: TierFilter,
}
