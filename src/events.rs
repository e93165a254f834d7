//! Cache events for KV-aware routers: which keys became readable in a tier,
//! which left it, and when a tier was cleared.

use crate::key::Key;

/// What happened to a key in a tier.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum EventKind {
    /// The key became ready (readable) in the tier.
    Stored,
    /// The key left the tier (evicted or deleted); only keys announced as stored.
    Removed,
    /// The tier forgot every key (a reset); the event carries no key.
    Cleared,
}

/// One event: a kind and, except for `Cleared`, one key.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Event {
    /// What happened.
    pub kind: EventKind,
    /// The key concerned (`None` only for `Cleared`).
    pub key: Option<Key>,
}
