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

/// Where a request handle stands, as the object that handed it out sees
/// it.  Handles are never 0 and never reused, so a handle that was never
/// handed out is told apart from one that is gone without remembering
/// every old handle.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum RequestState {
    /// Never handed out by this object (0, or past the last handle handed
    /// out): a mistyped handle, or another object's.  No call takes it.
    NeverIssued,
    /// Started and not finished: every call of a request takes it.
    Active,
    /// Finished, but its stores in flight (or, in a manager, its parked
    /// keys or staged promotions) keep it: `complete_store` takes it, and
    /// `complete_load` of the pins its loads still hold.
    Finishing,
    /// Finished and let go of all but pins its loads still hold: only
    /// `complete_load` of those pins takes it, until the last is released.
    LoadsPinned,
    /// Finished and let go: no call takes it.
    Gone,
}

impl RequestState {
    /// Why `id` in this state is unknown to a call that needs it active
    /// (or, past [`RequestState::Finishing`], finishing): the text of its
    /// [`Error::UnknownRequest`](crate::Error::UnknownRequest).  `owner`
    /// names the object ("manager", "primary tier").
    pub fn why_unknown(self, id: RequestId, owner: &str) -> String {
        match self {
            RequestState::NeverIssued => format!("{id} was never issued by this {owner}"),
            RequestState::Active => format!("{id} is active"),
            RequestState::Finishing => format!(
                "{id} has finished; until its stores in flight are completed only complete_store, and complete_load of the pins its loads hold, take it"
            ),
            RequestState::LoadsPinned => format!(
                "{id} has finished; only complete_load of the pins its loads still hold takes it"
            ),
            RequestState::Gone => format!("{id} finished and was let go"),
        }
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
    /// The name the caller gave at `request_begin`: the request's label
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
/// Ids start at 1 and are never reused within one registry.  The one
/// registry of requests: the manager's and the standalone primary
/// tier's ([`NamedPrimary`](crate::primary::NamedPrimary)).
#[derive(Debug, Default)]
pub(crate) struct RequestNames {
    /// Hashed with foldhash (seeded per registry): one hash of the name
    /// per call.
    ids: hashbrown::HashMap<String, RequestId, foldhash::fast::RandomState>,
    /// Ids handed out so far (the next id is one more).
    issued: u64,
}

impl RequestNames {
    /// Registers `name` under the next id once `start` took that id; a
    /// name that is active, or an error of `start`, registers nothing and
    /// hands out no id.
    pub(crate) fn insert(
        &mut self,
        name: &str,
        start: impl FnOnce(RequestId) -> crate::Result<()>,
    ) -> crate::Result<RequestId> {
        match self.ids.entry_ref(name) {
            hashbrown::hash_map::EntryRef::Occupied(_) => {
                Err(crate::Error::DuplicateRequest(name.to_string()))
            }
            hashbrown::hash_map::EntryRef::Vacant(slot) => {
                let id = RequestId(self.issued + 1);
                start(id)?;
                self.issued += 1;
                slot.insert(id);
                Ok(id)
            }
        }
    }

    /// The id of active request `name`, if any (no error made).
    #[inline]
    pub(crate) fn id_of(&self, name: &str) -> Option<RequestId> {
        self.ids.get(name).copied()
    }

    /// The id of active request `name`.
    pub(crate) fn get(&self, name: &str) -> crate::Result<RequestId> {
        self.ids.get(name).copied().ok_or_else(|| {
            crate::Error::UnknownRequest(format!("{name:?} names no active request"))
        })
    }

    /// Forgets `name`, returning its id.
    pub(crate) fn remove(&mut self, name: &str) -> crate::Result<RequestId> {
        self.ids.remove(name).ok_or_else(|| {
            crate::Error::UnknownRequest(format!("{name:?} names no active request"))
        })
    }

    /// Whether `id` was handed out by this registry (whatever became of it).
    pub(crate) fn was_issued(&self, id: RequestId) -> bool {
        id.0 >= 1 && id.0 <= self.issued
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_map_to_fresh_ids_and_misuse_is_an_error() {
        let mut names = RequestNames::default();
        let a = names.insert("a", |_| Ok(())).unwrap();
        let b = names.insert("b", |_| Ok(())).unwrap();
        assert_ne!(a, b);
        assert_eq!(a, RequestId(1), "ids start at 1: 0 is never a handle");
        assert!(matches!(
            names.insert("a", |_| Ok(())),
            Err(crate::Error::DuplicateRequest(_))
        ));
        let refused = names.insert("c", |id| {
            assert_eq!(id, RequestId(3), "the next id is offered");
            Err(crate::Error::InvalidArgument("refused".into()))
        });
        assert!(matches!(refused, Err(crate::Error::InvalidArgument(_))));
        assert!(names.get("c").is_err(), "a refused start registers nothing");
        assert_eq!(names.get("a").unwrap(), a);
        assert_eq!(names.remove("a").unwrap(), a);
        assert!(matches!(
            names.get("a"),
            Err(crate::Error::UnknownRequest(_))
        ));
        assert_eq!(
            names.insert("a", |_| Ok(())).unwrap(),
            RequestId(3),
            "ids are not reused, and a refused start took none"
        );
        assert!(
            names.was_issued(a) && names.was_issued(b),
            "issued, gone or not"
        );
        assert!(!names.was_issued(RequestId(0)));
        assert!(!names.was_issued(RequestId(4)), "only 3 were handed out");
    }
}
