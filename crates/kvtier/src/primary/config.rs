//! How to build a [`PrimaryTier`](super::PrimaryTier): its size, eviction policy, admission
//! threshold, event buffer and key layout.

use super::policy_kind::PolicyKind;

/// The largest `admission_table_size`: the table numbers its keys with
/// 32-bit ids, one value kept for "none".
pub const MAX_ADMISSION_TABLE_SIZE: usize = u32::MAX as usize - 1;

/// How to build a [`PrimaryTier`](super::PrimaryTier): the one set of
/// primary-tier options (`kvtier_primary_options` and the `"primary"`
/// section of a JSON configuration read into it; missing fields take
/// [`Default`]'s values).
#[derive(Clone, Debug, PartialEq, Eq, serde::Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct PrimaryConfig {
    /// Number of slots (1 ..= u32::MAX - 1; for arc 1 ..= 2^31 - 1).
    pub capacity: u32,
    /// Eviction policy.
    pub policy: PolicyKind,
    /// [0.33] Store a key only at its `store_threshold`-th offer; 0 or 1 =
    /// at the first.  Every key a `prepare_store` names is an offer,
    /// resident or not; a call's offers are all counted before the table
    /// forgets any entry, and never one offered in the same call.
    pub store_threshold: u32,
    /// Bound of the recent-offers table (used when `store_threshold` >= 2;
    /// must then be > 0), at most [`MAX_ADMISSION_TABLE_SIZE`].
    pub admission_table_size: usize,
    /// Bound of the event buffer; 0 turns events off.  When the buffer is
    /// full, new events are dropped and counted (`events_dropped`); a key
    /// whose "stored" event was dropped is never announced as removed.
    pub event_capacity: usize,
    /// [0.33] Keys end with a 4-byte big-endian KV-cache group index
    /// (vLLM's `block_hash || u32_be(group)`): a request's finish commits
    /// its keys group by group, ascending.  Calls that take a request's
    /// keys and return a `Result` (`prepare_store`, `prepare_load`,
    /// `touch`, `complete_load`, `set_positions`) then refuse keys shorter
    /// than 5 bytes (see `PrimaryTier::check_keys`).  Off (default): one
    /// group.
    pub kv_groups: bool,
}

impl Default for PrimaryConfig {
    fn default() -> Self {
        PrimaryConfig {
            capacity: 1024,
            policy: PolicyKind::Lru,
            store_threshold: 0,
            admission_table_size: 64_000,
            event_capacity: 0,
            kv_groups: false,
        }
    }
}
