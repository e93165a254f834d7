//! Requests as the core sees them: a compact id plus what tiers may read.

use std::sync::Arc;

/// Compact id of one active request, assigned at `on_new_request`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct RequestId(pub u64);

/// What the medium of a secondary tier is.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Medium {
    /// Memory (a CPU tier on another host, a peer's RAM).
    Cpu,
    /// Storage (files, object stores, key-value servers).
    Storage,
}

/// Where a secondary tier keeps its data.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Locality {
    /// On this machine.
    Local,
    /// On another machine.
    Remote,
}

/// One matcher of a request's tier filter: an unset field matches anything.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct TierMatcher {
    /// Medium to match, or any.
    pub medium: Option<Medium>,
    /// Locality to match, or any.
    pub locality: Option<Locality>,
}

/// Which secondary tiers a request's lookups may use.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub enum TierFilter {
    /// Every tier (no filter given).
    #[default]
    All,
    /// Tiers matching any of these matchers; an empty list excludes every tier.
    Only(Vec<TierMatcher>),
}

/// A request as tiers see it: its name, the caller's parameters, and its filter.
///
/// Shared (`Arc`) between the manager and the jobs it hands to tiers.
#[derive(Debug, Default)]
pub struct RequestInfo {
    /// The id string the caller chose at `on_new_request`.
    pub name: String,
    /// Per-request parameters the caller attached (small key/value list).
    pub params: Vec<(String, String)>,
    /// An opaque value the caller attached (a C pointer, passed back as is).
    pub user_data: usize,
    /// Which secondary tiers lookups may use.
    pub filter: TierFilter,
}

/// Shared handle to a request's information.
pub type Request = Arc<RequestInfo>;
