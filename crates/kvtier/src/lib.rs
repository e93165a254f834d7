//! kvtier: a multi-tier KV cache for LLM inference engines.
//!
//! When a GPU's KV cache is full, blocks of attention keys and values move
//! to a CPU tier in a shared memory region, and from there to disk or a
//! network store; when a later request shares a prefix, they come back
//! instead of being recomputed.  The behaviour follows vLLM's multi-tier KV
//! offloading (`vllm/v1/kv_offload/tiering`), natively and behind a C ABI.
//!
//! This crate is the safe core; the C API (`libkvtier.so`, `kvtier.h`) is
//! the `kvtier-capi` crate, a thin boundary that converts, checks and calls
//! it (docs/internals.md has the map).
//!
//! - [`key`]: the key type (1..=64 opaque bytes, inline).
//! - [`region`]: the shared mmap'd region and the slot view tiers use.
//! - [`primary`]: the CPU primary tier (slots, ref counts, LRU/ARC eviction).
//! - [`tiering`]: the tiering manager and the secondary-tier contract.
//! - [`tiers`]: built-in secondary tiers (the file-system tier; `redis` with the `redis-tier` feature).
//! - [`request`], [`events`], [`stats`], [`histogram`]: shared vocabulary.
//! - [`metrics`], [`logging`]: Prometheus text and log routing for engines;
//!   [`serve`]: the optional `/metrics` endpoint.
//! - [`catalogue`]: every statistic table, for listing every metric family.
//! - [`config`]: a whole manager from one JSON document.

#![warn(missing_docs)]
// `pub` means reachable from outside the crate; everything else says pub(crate).
#![warn(unreachable_pub)]
// Every unsafe block outside the C boundary says why it is sound.
#![warn(clippy::undocumented_unsafe_blocks)]

pub mod catalogue;
pub mod config;
pub mod error;
pub mod events;
pub mod fallible;
pub mod histogram;
pub mod key;
pub mod logging;
pub mod metrics;
pub mod primary;
pub mod region;
pub mod request;
pub(crate) mod serde_forms;
pub mod serve;
pub mod server;
pub mod stats;
mod store_report;
pub mod tiering;
pub mod tiers;

pub use error::{Error, Result};
pub use key::{Key, KeyBatch, KeyRef, MAX_KEY_LEN};
