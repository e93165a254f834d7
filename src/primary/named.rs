//! [`NamedPrimary`]: a primary tier whose requests are named by caller
//! strings, as the C API names them.
//!
//! A request's name stays known after it finished for as long as keys it
//! planned are still write pending, so that their completions (which name
//! the request) still find it; meanwhile the name cannot start a new
//! request, as with the tiering manager.

use std::collections::HashMap;

use super::{CompleteStoreReport, PrimaryConfig, PrimaryTier, StoreOutcome, StorePlan};
use crate::error::{Error, Result};
use crate::key::{Key, KeyBytes};
use crate::request::{RequestId, RequestNames};

/// A [`PrimaryTier`] plus the map from request id strings to request ids.
#[derive(Debug)]
pub struct NamedPrimary {
    /// The tier itself (lookups, completions, stats, events need no request).
    pub tier: PrimaryTier,
    names: RequestNames,
    /// Finished requests with keys still write pending for them.
    finishing: HashMap<String, RequestId>,
}

impl NamedPrimary {
    /// A tier built from `config`, with no active request.
    pub fn new(config: PrimaryConfig) -> Result<NamedPrimary> {
        Ok(NamedPrimary {
            tier: PrimaryTier::new(config)?,
            names: RequestNames::default(),
            finishing: HashMap::new(),
        })
    }

    fn id(&self, name: &str) -> Result<RequestId> {
        self.names.get(name)
    }

    /// Starts request `name`; an active name, or a finished one whose
    /// stores are still in flight, is `DuplicateRequest`.
    pub fn begin(&mut self, name: &str) -> Result<()> {
        if let Some(&old) = self.finishing.get(name) {
            if self.tier.stores_pending(old) > 0 {
                return Err(Error::DuplicateRequest(name.to_string()));
            }
            self.finishing.remove(name);
        }
        let id = self.names.insert(name)?;
        if let Err(e) = self.tier.begin_request(id) {
            let _ = self.names.remove(name);
            return Err(e);
        }
        Ok(())
    }

    /// Commits request `name`'s accesses and ends it; its name stays
    /// known to [`NamedPrimary::complete_store`] until every key it
    /// planned was completed.
    pub fn finish(&mut self, name: &str) -> Result<()> {
        let id = self.id(name)?;
        self.tier.on_request_finished(id)?;
        self.names.remove(name)?;
        if self.tier.stores_pending(id) > 0 {
            self.finishing.insert(name.to_string(), id);
        }
        Ok(())
    }

    /// [`PrimaryTier::reset`], forgetting finished requests' names too
    /// (their stores are no longer in flight).
    pub fn reset(&mut self) {
        self.tier.reset();
        self.finishing.clear();
    }

    /// [`PrimaryTier::prepare_load`] for request `name`.
    pub fn prepare_load(&mut self, name: &str, keys: &[Key], slots: &mut Vec<u32>) -> Result<()> {
        self.prepare_load_each(name, keys.len(), |j| &keys[j], slots)
    }

    /// [`NamedPrimary::prepare_load`] of keys `key(0..n)`: [`Key`]s, or
    /// checked bytes read in place.
    pub(crate) fn prepare_load_each<'k, K: KeyBytes + ?Sized + 'k>(
        &mut self,
        name: &str,
        n: usize,
        key: impl Fn(usize) -> &'k K,
        slots: &mut Vec<u32>,
    ) -> Result<()> {
        let id = self.id(name)?;
        self.tier.prepare_load_each(id, n, key, slots)
    }

    /// [`PrimaryTier::set_positions`] for request `name`.
    pub fn set_positions(&mut self, name: &str, keys: &[Key], positions: &[u64]) -> Result<()> {
        let id = self.id(name)?;
        self.tier.set_positions(id, keys, positions)
    }

    /// [`NamedPrimary::set_positions`] of keys `key(0..n)` (checked bytes
    /// read in place) with positions `position(0..n)`.
    pub(crate) fn set_positions_each<'k, K: KeyBytes + ?Sized + 'k>(
        &mut self,
        name: &str,
        n: usize,
        key: impl Fn(usize) -> &'k K,
        position: impl Fn(usize) -> u64,
    ) -> Result<()> {
        let id = self.id(name)?;
        self.tier.set_positions_each(id, n, key, position)
    }

    /// [`PrimaryTier::touch`] for request `name`.
    pub fn touch(&mut self, name: &str, keys: &[Key]) -> Result<()> {
        self.touch_each(name, keys.len(), |j| &keys[j])
    }

    /// [`NamedPrimary::touch`] of keys `key(0..n)`: [`Key`]s, or checked
    /// bytes read in place.
    pub(crate) fn touch_each<'k, K: KeyBytes + ?Sized + 'k>(
        &mut self,
        name: &str,
        n: usize,
        key: impl Fn(usize) -> &'k K + Copy,
    ) -> Result<()> {
        let id = self.id(name)?;
        self.tier.touch_each(id, n, key)
    }

    /// [`PrimaryTier::complete_load`] for request `name`.
    pub fn complete_load(&mut self, name: &str, keys: &[Key]) -> Result<()> {
        self.complete_load_each(name, keys.len(), |j| &keys[j])
    }

    /// [`NamedPrimary::complete_load`] of keys `key(0..n)`: [`Key`]s, or
    /// checked bytes read in place.
    pub(crate) fn complete_load_each<'k, K: KeyBytes + ?Sized + 'k>(
        &mut self,
        name: &str,
        n: usize,
        key: impl Fn(usize) -> &'k K,
    ) -> Result<()> {
        let id = self.id(name)?;
        self.tier.complete_load_each(id, n, key)
    }

    /// [`PrimaryTier::prepare_store`] for request `name`.
    pub fn prepare_store(
        &mut self,
        name: &str,
        keys: &[Key],
        plan: &mut StorePlan,
    ) -> Result<StoreOutcome> {
        self.prepare_store_each(name, keys.len(), |j| &keys[j], plan)
    }

    /// [`NamedPrimary::prepare_store`] of keys `key(0..n)`: [`Key`]s, or
    /// checked bytes read in place.
    pub(crate) fn prepare_store_each<'k, K: KeyBytes + ?Sized + 'k>(
        &mut self,
        name: &str,
        n: usize,
        key: impl Fn(usize) -> &'k K,
        plan: &mut StorePlan,
    ) -> Result<StoreOutcome> {
        plan.clear();
        let id = self.id(name)?;
        self.tier.prepare_store_each(id, n, key, plan)
    }

    /// [`PrimaryTier::complete_store`] for request `name` (active, or
    /// finished with keys still write pending).
    pub fn complete_store(
        &mut self,
        name: &str,
        keys: &[Key],
        success: bool,
    ) -> Result<CompleteStoreReport> {
        self.complete_store_each(name, keys.len(), |j| &keys[j], success)
    }

    /// [`NamedPrimary::complete_store`] of keys `key(0..n)`: [`Key`]s, or
    /// checked bytes read in place.
    pub(crate) fn complete_store_each<'k, K: KeyBytes + ?Sized + 'k>(
        &mut self,
        name: &str,
        n: usize,
        key: impl Fn(usize) -> &'k K,
        success: bool,
    ) -> Result<CompleteStoreReport> {
        if let Ok(id) = self.names.get(name) {
            return Ok(self.tier.complete_store_each(id, n, key, success));
        }
        let Some(&id) = self.finishing.get(name) else {
            return Err(Error::UnknownRequest(name.to_string()));
        };
        let report = self.tier.complete_store_each(id, n, key, success);
        if self.tier.stores_pending(id) == 0 {
            self.finishing.remove(name);
        }
        Ok(report)
    }

    /// Number of active requests.
    pub fn active_requests(&self) -> usize {
        self.names.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Error;

    #[test]
    fn names_map_to_requests_and_unknown_names_are_errors() {
        let mut p = NamedPrimary::new(PrimaryConfig {
            capacity: 4,
            ..Default::default()
        })
        .unwrap();
        let k = Key::new(b"a").unwrap();
        let mut plan = StorePlan::default();
        assert!(matches!(
            p.prepare_store("r", &[k], &mut plan),
            Err(Error::UnknownRequest(n)) if n == "r"
        ));
        p.begin("r").unwrap();
        assert!(matches!(p.begin("r"), Err(Error::DuplicateRequest(_))));
        assert_eq!(
            p.prepare_store("r", &[k], &mut plan).unwrap(),
            StoreOutcome::Planned
        );
        assert_eq!(plan.slots, vec![0]);
        p.finish("r").unwrap();
        assert!(matches!(p.finish("r"), Err(Error::UnknownRequest(_))));
        assert_eq!(p.active_requests(), 0);
        p.complete_store("r", &[k], true).unwrap();
        p.begin("r").unwrap();
        assert_eq!(p.active_requests(), 1);
    }

    #[test]
    fn a_finished_request_completes_its_stores_and_its_name_waits_for_them() {
        let mut p = NamedPrimary::new(PrimaryConfig {
            capacity: 4,
            ..Default::default()
        })
        .unwrap();
        let (a, b) = (Key::new(b"a").unwrap(), Key::new(b"b").unwrap());
        let mut plan = StorePlan::default();
        p.begin("r").unwrap();
        p.prepare_store("r", &[a, b], &mut plan).unwrap();
        p.finish("r").unwrap();
        assert!(
            matches!(p.begin("r"), Err(Error::DuplicateRequest(_))),
            "its stores are in flight"
        );
        assert_eq!(p.complete_store("r", &[a], true).unwrap().ready, 1);
        assert_eq!(p.complete_store("r", &[b], false).unwrap().dropped, 1);
        assert!(matches!(
            p.complete_store("r", &[a], true),
            Err(Error::UnknownRequest(_))
        ));
        p.begin("r").unwrap();
        p.prepare_store("r", &[b], &mut plan).unwrap();
        p.finish("r").unwrap();
        p.reset();
        assert!(matches!(
            p.complete_store("r", &[b], true),
            Err(Error::UnknownRequest(_))
        ));
        p.begin("r").unwrap();
    }
}
