//! [`NamedPrimary`]: a primary tier whose requests are started by name and
//! then driven by handle, as the C API drives them.
//!
//! [`NamedPrimary::request_begin`] hands out a [`RequestId`]: 1 for the first
//! request, then one more each time, never reused by the same tier, so 0
//! and every finished request's id are never active.  The id is all a
//! later call needs: the tier checks it as it works (one lookup of an
//! integer), and no name is read or hashed on the way.  Names stay unique
//! among active requests and are kept as their labels.
//!
//! A finished request's id stays valid for [`NamedPrimary::complete_store`]
//! for as long as keys it planned are still write pending, so that their
//! completions (which name the request) still find it.

use std::collections::{HashMap, HashSet};

use super::{CompleteStoreReport, PrimaryConfig, PrimaryTier};
use crate::error::{Error, Result};
use crate::key::{KeyBatch, KeyBytes, with_keys};
use crate::request::{RequestId, RequestNames, RequestState};

/// A [`PrimaryTier`] plus its requests' names and ids.
#[derive(Debug)]
pub struct NamedPrimary {
    /// The tier itself: every call of an active request goes to it with the
    /// request's id (and lookups, stats and events need no request).
    pub tier: PrimaryTier,
    /// Active requests' names and ids, and the ids handed out: the
    /// manager's registry.
    names: RequestNames,
    /// Each active request's name (its label).
    labels: HashMap<RequestId, String>,
    /// Finished requests with keys still write pending for them.
    finishing: HashSet<RequestId>,
}

impl NamedPrimary {
    /// A tier built from `config`, with no active request.
    pub fn new(config: PrimaryConfig) -> Result<NamedPrimary> {
        Ok(NamedPrimary {
            tier: PrimaryTier::new(config)?,
            names: RequestNames::default(),
            labels: HashMap::new(),
            finishing: HashSet::new(),
        })
    }

    /// Starts a request labelled `name` and returns its id; a name already
    /// active is `DuplicateRequest` (a finished request's name is free
    /// again at once, even with its stores still in flight).
    pub fn request_begin(&mut self, name: &str) -> Result<RequestId> {
        if self.names.get(name).is_ok() {
            return Err(Error::DuplicateRequest(name.to_string()));
        }
        let mut label = String::new();
        label
            .try_reserve_exact(name.len())
            .map_err(|_| crate::fallible::out_of_memory::<u8>("a request's name", name.len()))?;
        label.push_str(name);
        let tier = &mut self.tier;
        let id = self.names.insert(name, |id| tier.request_begin(id))?;
        self.labels.insert(id, label);
        Ok(id)
    }

    /// Commits request `id`'s accesses and ends it; its id stays known to
    /// [`NamedPrimary::complete_store`] until every key it planned was
    /// completed.  An id that is not active is `UnknownRequest`.
    pub fn request_finished(&mut self, id: RequestId) -> Result<()> {
        self.tier.request_finished(id)?;
        if let Some(name) = self.labels.remove(&id) {
            let _ = self.names.remove(&name);
        }
        if self.tier.stores_pending(id) > 0 {
            self.finishing.insert(id);
        }
        Ok(())
    }

    /// The name request `id` was started with, while it is active.
    pub fn name(&self, id: RequestId) -> Option<&str> {
        self.labels.get(&id).map(String::as_str)
    }

    /// [`PrimaryTier::reset`], forgetting finished requests too (their
    /// stores are no longer in flight).
    pub fn reset(&mut self) {
        self.tier.reset();
        self.finishing.clear();
    }

    /// [`PrimaryTier::complete_store`] for request `id` (active, or finished
    /// with keys still write pending); any other id is `UnknownRequest`.
    /// A key named that was left alone (absent, another writer's, ready)
    /// makes the answer `KeysIgnored`, carrying the report, the other keys
    /// completed all the same ([`CompleteStoreReport::checked`]).
    /// With KV groups on, a key too short for its group index is
    /// `InvalidKey` (see [`PrimaryTier::check_keys`]), nothing changed.
    pub fn complete_store<'k>(
        &mut self,
        id: RequestId,
        keys: impl Into<KeyBatch<'k>>,
        success: bool,
    ) -> Result<CompleteStoreReport> {
        with_keys!(keys.into(), |k| self.complete_store_each(
            id,
            k.len(),
            |j| &k[j],
            success
        ))
    }

    /// [`NamedPrimary::complete_store`] of keys `key(0..n)`.
    fn complete_store_each<'k, K: KeyBytes + ?Sized + 'k>(
        &mut self,
        id: RequestId,
        n: usize,
        key: impl Fn(usize) -> &'k K,
        success: bool,
    ) -> Result<CompleteStoreReport> {
        if !self.tier.is_active(id) && !self.finishing.contains(&id) {
            return Err(self.unknown(id));
        }
        self.tier.check_group_keys(n, &key)?;
        if self.tier.is_active(id) {
            return self
                .tier
                .complete_store_each(id, n, key, success)
                .checked(id);
        }
        if !self.finishing.contains(&id) {
            return Err(self.unknown(id));
        }
        let report = self.tier.complete_store_each(id, n, key, success);
        if self.tier.stores_pending(id) == 0 {
            self.finishing.remove(&id);
        }
        report.checked(id)
    }

    /// Where request `id` stands: never handed out by this tier, active,
    /// finished with keys it planned still write pending
    /// ([`RequestState::Finishing`]; its loads may hold pins too),
    /// finished with only pins its loads took still held, or gone.
    pub fn request_state(&self, id: RequestId) -> RequestState {
        if !self.names.was_issued(id) {
            RequestState::NeverIssued
        } else if self.tier.is_active(id) {
            RequestState::Active
        } else if self.finishing.contains(&id) {
            RequestState::Finishing
        } else if self.tier.holds_finished_loads(id) {
            RequestState::LoadsPinned
        } else {
            RequestState::Gone
        }
    }

    /// The `UnknownRequest` of a call that does not take `id`, saying
    /// where it stands.
    pub fn unknown(&self, id: RequestId) -> Error {
        Error::UnknownRequest(self.request_state(id).why_unknown(id, "primary tier"))
    }

    /// Number of active requests.
    pub fn active_requests(&self) -> usize {
        self.labels.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Error;
    use crate::key::{Key, KeyRef};
    use crate::primary::{PrimaryLookup, StoreOutcome, StorePlan};

    fn tier() -> NamedPrimary {
        NamedPrimary::new(PrimaryConfig {
            capacity: 4,
            ..Default::default()
        })
        .unwrap()
    }

    #[test]
    fn ids_start_at_one_are_never_reused_and_names_are_unique_while_active() {
        let mut p = tier();
        let k = Key::new(b"a").unwrap();
        let mut plan = StorePlan::default();
        assert!(matches!(
            p.tier.prepare_store(RequestId(0), &[k], &mut plan),
            Err(Error::UnknownRequest(_))
        ));
        let r = p.request_begin("r").unwrap();
        assert_eq!(r, RequestId(1));
        assert_eq!(p.name(r), Some("r"));
        assert!(matches!(p.request_begin("r"), Err(Error::DuplicateRequest(n)) if n == "r"));
        let s = p.request_begin("s").unwrap();
        assert_eq!(s, RequestId(2), "a refused begin uses no id");
        assert_eq!(
            p.tier.prepare_store(r, &[k], &mut plan).unwrap(),
            StoreOutcome::Planned
        );
        p.request_finished(r).unwrap();
        assert!(matches!(
            p.request_finished(r),
            Err(Error::UnknownRequest(_))
        ));
        assert_eq!(p.name(r), None);
        assert_eq!(p.active_requests(), 1);
        // The name is free again (its store still in flight): a new id.
        let again = p.request_begin("r").unwrap();
        assert_eq!(again, RequestId(3));
        assert!(matches!(
            p.tier.touch(r, &[k]),
            Err(Error::UnknownRequest(_))
        ));
        // Only the finished request completes the key it planned.
        assert!(matches!(
            p.complete_store(again, &[k], true),
            Err(Error::KeysIgnored { report, .. }) if report.foreign == 1 && report.ready == 0
        ));
        assert_eq!(p.complete_store(r, &[k], true).unwrap().ready, 1);
        assert!(matches!(
            p.complete_store(r, &[k], true),
            Err(Error::UnknownRequest(_))
        ));
    }

    #[test]
    fn keys_read_in_place_find_the_keys_of_the_same_bytes() {
        let mut p = tier();
        let (a, b) = (Key::new(b"a").unwrap(), Key::new(b"bcd").unwrap());
        let mut plan = StorePlan::default();
        let r = p.request_begin("r").unwrap();
        p.tier.prepare_store(r, &[a, b], &mut plan).unwrap();
        let refs = [KeyRef::new(b"bcd").unwrap(), KeyRef::new(b"a").unwrap()];
        assert_eq!(p.complete_store(r, &refs[..], true).unwrap().ready, 2);
        let mut found = [PrimaryLookup::Miss; 3];
        let asked = [refs[0], refs[1], KeyRef::new(b"bc").unwrap()];
        p.tier.lookup_batch(&asked[..], &mut found);
        assert_eq!(
            found,
            [PrimaryLookup::Hit, PrimaryLookup::Hit, PrimaryLookup::Miss]
        );
    }

    #[test]
    fn every_handle_has_one_state_and_unknown_ones_say_which() {
        let mut p = tier();
        let (a, b) = (Key::new(b"a").unwrap(), Key::new(b"b").unwrap());
        let mut plan = StorePlan::default();
        assert_eq!(p.request_state(RequestId(0)), RequestState::NeverIssued);
        assert_eq!(p.request_state(RequestId(1)), RequestState::NeverIssued);
        let r = p.request_begin("r").unwrap();
        assert_eq!(p.request_state(r), RequestState::Active);
        assert_eq!(p.request_state(RequestId(2)), RequestState::NeverIssued);
        p.tier.prepare_store(r, &[a, b], &mut plan).unwrap();
        p.complete_store(r, &[a], true).unwrap();
        let mut slots = Vec::new();
        p.tier.prepare_load(r, &[a], &mut slots).unwrap();
        p.request_finished(r).unwrap();
        assert_eq!(p.request_state(r), RequestState::Finishing, "b in flight");
        p.complete_store(r, &[b], true).unwrap();
        assert_eq!(
            p.request_state(r),
            RequestState::LoadsPinned,
            "a still pinned"
        );
        p.tier.complete_load(r, &[a]).unwrap();
        assert_eq!(p.request_state(r), RequestState::Gone);
        match p.complete_store(r, &[a], true) {
            Err(Error::UnknownRequest(m)) => {
                assert_eq!(m, "request handle 1 finished and was let go")
            }
            other => panic!("{other:?}"),
        }
        match p.complete_store(RequestId(9), &[a], true) {
            Err(Error::UnknownRequest(m)) => {
                assert_eq!(m, "request handle 9 was never issued by this primary tier")
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn a_finished_request_completes_its_stores_until_none_is_left_or_a_reset() {
        let mut p = tier();
        let (a, b) = (Key::new(b"a").unwrap(), Key::new(b"b").unwrap());
        let mut plan = StorePlan::default();
        let r = p.request_begin("r").unwrap();
        p.tier.prepare_store(r, &[a, b], &mut plan).unwrap();
        p.request_finished(r).unwrap();
        assert_eq!(p.complete_store(r, &[a], true).unwrap().ready, 1);
        assert_eq!(p.complete_store(r, &[b], false).unwrap().dropped, 1);
        assert!(matches!(
            p.complete_store(r, &[a], true),
            Err(Error::UnknownRequest(_))
        ));
        let r = p.request_begin("r").unwrap();
        p.tier.prepare_store(r, &[b], &mut plan).unwrap();
        p.request_finished(r).unwrap();
        p.reset();
        assert!(matches!(
            p.complete_store(r, &[b], true),
            Err(Error::UnknownRequest(_))
        ));
        // A request finished with nothing in flight is unknown at once.
        let q = p.request_begin("q").unwrap();
        p.request_finished(q).unwrap();
        assert!(matches!(
            p.complete_store(q, &[a], true),
            Err(Error::UnknownRequest(_))
        ));
    }
}
