//! Requests as the core sees them: a compact id plus what tiers may read.

use std::sync::Arc;

/// Compact id of one request, assigned when it starts: the handle every
/// later call of the request takes.  Ids start at 1 (0 is never an id) and
/// are never reused by the same registry.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct RequestId(pub u64);

impl std::fmt::Display for RequestId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "request handle {}", self.0)
    }
}

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
    /// The name the caller gave at `on_new_request`: the request's label
    /// (unique among active requests), not its handle.
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

/// Maps the id strings callers choose to compact [`RequestId`]s, for the
/// life of each request, so that names stay unique among active requests.
/// Ids start at 1 and are never reused within one registry.
#[derive(Debug, Default)]
pub struct RequestNames {
    /// Hashed with foldhash (seeded per registry): one hash of the name
    /// per call.
    ids: hashbrown::HashMap<String, RequestId, foldhash::fast::RandomState>,
    /// Ids handed out so far (the next id is one more).
    issued: u64,
}

impl RequestNames {
    /// Registers `name`; starting a request that is active is an error.
    pub fn insert(&mut self, name: &str) -> crate::Result<RequestId> {
        match self.ids.entry_ref(name) {
            hashbrown::hash_map::EntryRef::Occupied(_) => {
                Err(crate::Error::DuplicateRequest(name.to_string()))
            }
            hashbrown::hash_map::EntryRef::Vacant(slot) => {
                self.issued += 1;
                let id = RequestId(self.issued);
                slot.insert(id);
                Ok(id)
            }
        }
    }

    /// The id of active request `name`.
    pub fn get(&self, name: &str) -> crate::Result<RequestId> {
        self.ids
            .get(name)
            .copied()
            .ok_or_else(|| crate::Error::UnknownRequest(name.to_string()))
    }

    /// Forgets `name`, returning its id.
    pub fn remove(&mut self, name: &str) -> crate::Result<RequestId> {
        self.ids
            .remove(name)
            .ok_or_else(|| crate::Error::UnknownRequest(name.to_string()))
    }

    /// Number of active requests.
    pub fn len(&self) -> usize {
        self.ids.len()
    }

    /// Whether no request is active.
    pub fn is_empty(&self) -> bool {
        self.ids.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_map_to_fresh_ids_and_misuse_is_an_error() {
        let mut names = RequestNames::default();
        let a = names.insert("a").unwrap();
        let b = names.insert("b").unwrap();
        assert_ne!(a, b);
        assert_eq!(a, RequestId(1), "ids start at 1: 0 is never a handle");
        assert!(matches!(
            names.insert("a"),
            Err(crate::Error::DuplicateRequest(_))
        ));
        assert_eq!(names.get("a").unwrap(), a);
        assert_eq!(names.remove("a").unwrap(), a);
        assert!(matches!(
            names.get("a"),
            Err(crate::Error::UnknownRequest(_))
        ));
        assert_ne!(names.insert("a").unwrap(), a, "ids are not reused");
    }
}
