//! Pin sets (named sets of blocks a tier keeps resident whatever its
//! eviction wants), and dropping blocks by key prefix.
//!
//! The manager keeps the sets and counts, per tier and key, how many sets
//! hold the key; a tier is asked to hold a key when its count leaves 0 and
//! to release it when the count returns to 0, so holds never nest in a
//! tier.  The bound: the keys held in one tier, all sets together, are at
//! most `pinning.max_share` of its capacity (a secondary tier's
//! [`SecondaryTier::capacity_blocks`](crate::tiering::SecondaryTier::capacity_blocks)).
//! A reset forgets every set (the primary tier forgets the keys; the
//! secondary tiers, which keep theirs, are asked to release them).

use std::collections::BTreeMap;

use super::{Error, FastMap, Manager, PrimaryBackend, Result, State};
use crate::key::{Key, KeyBatch, with_keys};
use crate::primary::{DropCount, PrimaryLookup};

/// What [`Manager::pin_set`] did.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PinOutcome {
    /// Distinct keys the set holds now.
    pub pinned: usize,
    /// Distinct keys named that were not present (and readable) in the
    /// tier: not held.
    pub absent: usize,
}

/// One pin set as [`Manager::pin_sets`] lists it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PinSetInfo {
    /// The set's name.
    pub name: String,
    /// The tier holding it (0 the primary tier).
    pub tier: usize,
    /// Distinct keys it holds.
    pub keys: usize,
    /// Their bytes: keys × the manager's block size (0 when the block size
    /// is unknown).
    pub bytes: u64,
}

/// What [`Manager::drop_blocks`] did, all selected tiers together.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct DropReport {
    /// Blocks removed.
    pub dropped: u64,
    /// Blocks that matched but were kept: busy (a load or store in
    /// flight, write pending, held by a pin set).
    pub kept: u64,
    /// Selected tiers that cannot drop blocks (C tiers, a Redis tier on a
    /// cluster, tiers without the call): skipped.
    pub unsupported_tiers: u32,
}

/// Longest pin-set name, in bytes.
pub const MAX_PIN_SET_NAME: usize = 256;

#[derive(Default)]
pub(super) struct PinSets {
    sets: BTreeMap<String, (usize, Vec<Key>)>,
    /// How many sets hold each (tier, key).
    counts: FastMap<(usize, Key), u32>,
    /// Keys held per tier (distinct), indexed by tier number.
    held: Vec<u64>,
}

impl PinSets {
    fn held_in(&self, tier: usize) -> u64 {
        self.held.get(tier).copied().unwrap_or(0)
    }

    fn add_held(&mut self, tier: usize, delta: i64) {
        if self.held.len() <= tier {
            self.held.resize(tier + 1, 0);
        }
        self.held[tier] = (self.held[tier] as i64 + delta) as u64;
    }

    /// Keys held in tier `tier`, all sets together.
    pub(super) fn held_blocks(&self, tier: usize) -> u64 {
        self.held_in(tier)
    }

    /// Number of sets.
    pub(super) fn set_count(&self) -> usize {
        self.sets.len()
    }

    /// Forgets every set (the tiers' holds are gone or released by the caller).
    pub(super) fn clear(&mut self) {
        self.sets.clear();
        self.counts.clear();
        self.held.clear();
    }
}

fn check_name(name: &str) -> Result<()> {
    if name.is_empty() || name.len() > MAX_PIN_SET_NAME {
        return Err(Error::InvalidArgument(format!(
            "pin set name of {} bytes (must be 1 to {MAX_PIN_SET_NAME})",
            name.len()
        )));
    }
    Ok(())
}

impl<P: PrimaryBackend> Manager<P> {
    /// Holds the blocks of `keys` resident in tier `tier` (0 the primary
    /// tier) as the pin set `name`, whatever the tier's eviction wants,
    /// until [`Manager::unpin_set`].  Keys absent from the tier (or not
    /// readable yet) are counted in the outcome, not held; repeated keys
    /// count once.  A set of an existing name replaces it at once (keys in
    /// both stay held throughout).  The bound: all sets together hold at
    /// most `pinning.max_share` of the tier's capacity; past it the call is
    /// [`Error::NoSpace`] and nothing changes.  A name of 0 or more than
    /// 256 bytes, or a tier that does not exist, is
    /// [`Error::InvalidArgument`]; a secondary tier that keeps no pin sets
    /// (all but the fs tier) [`Error::Unsupported`], nothing changed; with
    /// KV groups on, a key too short for its group index
    /// [`Error::InvalidKey`].  Holds are not pins: a load's unpin never
    /// releases them.  A secondary tier's capacity is its
    /// [`SecondaryTier::capacity_blocks`](crate::tiering::SecondaryTier::capacity_blocks)
    /// (no bound for `None`); its holds are asked for before the bound is
    /// checked and released again when it refuses.
    pub fn pin_set<'k>(
        &self,
        name: &str,
        keys: impl Into<KeyBatch<'k>>,
        tier: usize,
    ) -> Result<PinOutcome> {
        let keys = keys.into();
        check_name(name)?;
        let mut s = self.enter("pin_set")?;
        let s = &mut *s;
        if tier > s.tiers.len() {
            return Err(Error::InvalidArgument(format!(
                "no tier {tier} (the manager has {} secondary tiers)",
                s.tiers.len()
            )));
        }
        with_keys!(keys, |k| s.check_keys(k.len(), |j| &k[j]))?;
        let mut distinct: Vec<Key> = crate::fallible::with_capacity(keys.len(), "pin set keys")?;
        distinct.extend(keys.iter().map(Key::from));
        distinct.sort_unstable();
        distinct.dedup();
        let named = distinct.len();
        // Keys a secondary tier was asked to hold by this call: released
        // again if the bound refuses the set.
        let mut fresh: Vec<Key> = Vec::new();
        if tier == 0 {
            distinct.retain(|k| s.primary.lookup(k) == PrimaryLookup::Hit);
        } else {
            fresh = s.hold_in_secondary(tier, &mut distinct)?;
        }
        let absent = named - distinct.len();
        if let Err(e) = s.check_pin_bound(name, tier, &distinct) {
            if !fresh.is_empty() {
                s.tiers[tier - 1].tier.release_hold(&fresh);
            }
            return Err(e);
        }
        // The new keys held first, then the old set's released: a key in
        // both never loses its hold.
        s.hold_pinned_keys(tier, &distinct)?;
        if let Some((old_tier, old)) = s.pins.sets.remove(name) {
            s.release_pinned_keys(old_tier, &old)?;
        }
        let pinned = distinct.len();
        s.pins.sets.insert(name.to_string(), (tier, distinct));
        Ok(PinOutcome { pinned, absent })
    }

    /// Releases pin set `name`: its keys that no other set holds become
    /// evictable again.  Returns how many keys the set held.  An unknown
    /// name is [`Error::NotFound`].
    pub fn unpin_set(&self, name: &str) -> Result<usize> {
        check_name(name)?;
        let mut s = self.enter("unpin_set")?;
        let Some((tier, keys)) = s.pins.sets.remove(name) else {
            return Err(Error::NotFound(format!("no pin set {name:?}")));
        };
        s.release_pinned_keys(tier, &keys)?;
        Ok(keys.len())
    }

    /// The pin sets, by name.
    pub fn pin_sets(&self) -> Result<Vec<PinSetInfo>> {
        let s = self.enter("pin_sets")?;
        let block = s.block_bytes();
        Ok(s.pins
            .sets
            .iter()
            .map(|(name, (tier, keys))| PinSetInfo {
                name: name.clone(),
                tier: *tier,
                keys: keys.len(),
                bytes: keys.len() as u64 * block,
            })
            .collect())
    }

    /// Drops every block whose key starts with `key_prefix` (every block
    /// for an empty prefix) from every tier whose layout fingerprint is
    /// `fingerprint` (every tier for `None`; the primary tier's is
    /// [`ManagerOptions::layout_fingerprint`](super::ManagerOptions::layout_fingerprint),
    /// a secondary tier's what [`SecondaryTier::layout_fingerprint`](crate::tiering::SecondaryTier::layout_fingerprint)
    /// says; a tier without one matches only `None`).  Busy blocks (a
    /// load or store in flight, write pending, held by a pin set) are
    /// kept and counted.  A selected tier that cannot drop blocks is
    /// skipped and counted; any other tier error ends the call with the
    /// error (the tiers before it dropped theirs).  Dropped primary blocks
    /// are announced as removed (events) like evictions.  A Redis tier
    /// deletes its blocks on the server here, on the caller's thread
    /// (network I/O bounded per command by its timeouts).
    pub fn drop_blocks(&self, key_prefix: &[u8], fingerprint: Option<&str>) -> Result<DropReport> {
        let mut s = self.enter("drop_blocks")?;
        let s = &mut *s;
        let mut report = DropReport::default();
        let add = |r: Result<DropCount>, report: &mut DropReport| match r {
            Ok(c) => {
                report.dropped += c.dropped;
                report.kept += c.kept;
                Ok(())
            }
            Err(Error::Unsupported(_)) => {
                report.unsupported_tiers += 1;
                Ok(())
            }
            Err(e) => Err(e),
        };
        if fingerprint.is_none() || s.opts.layout_fingerprint.as_deref() == fingerprint {
            add(s.primary.drop_prefix(key_prefix), &mut report)?;
        }
        for t in &mut s.tiers {
            if fingerprint.is_some() && t.tier.layout_fingerprint() != fingerprint {
                continue;
            }
            let name = t.name.clone();
            add(t.tier.drop_blocks(key_prefix), &mut report).map_err(|e| Error::Tier {
                tier: name.to_string(),
                message: format!("dropping blocks: {e}"),
            })?;
        }
        s.c.dropped_blocks += report.dropped;
        Ok(report)
    }
}

impl<P: PrimaryBackend> State<P> {
    /// Asks secondary tier `tier` to hold those of `keys` (sorted,
    /// distinct) that no set holds there yet, and keeps in `keys` the ones
    /// held now (those sets held, and those the tier could hold); returns
    /// the ones the tier was asked for and held.
    fn hold_in_secondary(&mut self, tier: usize, keys: &mut Vec<Key>) -> Result<Vec<Key>> {
        let pins = &self.pins;
        let ask: Vec<Key> = keys
            .iter()
            .filter(|k| !pins.counts.contains_key(&(tier, **k)))
            .copied()
            .collect();
        let t = &mut self.tiers[tier - 1];
        let held = t.tier.hold(&ask)?;
        if held.len() != ask.len() {
            t.tier.release_hold(&ask);
            return Err(Error::Tier {
                tier: t.name.to_string(),
                message: format!("hold answered {} of {} keys", held.len(), ask.len()),
            });
        }
        let fresh: Vec<Key> = ask
            .iter()
            .zip(&held)
            .filter(|(_, h)| **h)
            .map(|(k, _)| *k)
            .collect();
        keys.retain(|k| pins.counts.contains_key(&(tier, *k)) || fresh.binary_search(k).is_ok());
        Ok(fresh)
    }

    /// Releases every hold of the secondary tiers and forgets every set
    /// (at a reset: the primary tier has forgotten its keys).
    pub(super) fn forget_pin_sets(&mut self) {
        let mut per_tier: Vec<Vec<Key>> = vec![Vec::new(); self.tiers.len()];
        for &(tier, key) in self.pins.counts.keys() {
            if tier > 0 {
                per_tier[tier - 1].push(key);
            }
        }
        for (t, keys) in self.tiers.iter_mut().zip(&per_tier) {
            if !keys.is_empty() {
                t.tier.release_hold(keys);
            }
        }
        self.pins.clear();
    }

    /// [`Error::NoSpace`] if holding `keys` as set `name` in `tier`
    /// (replacing a set of that name) would take the tier past its bound.
    fn check_pin_bound(&self, name: &str, tier: usize, keys: &[Key]) -> Result<()> {
        let pins = &self.pins;
        let count = |k: &Key| pins.counts.get(&(tier, *k)).copied().unwrap_or(0);
        let mut after = pins.held_in(tier) as i64;
        let old = pins.sets.get(name).filter(|(t, _)| *t == tier);
        if let Some((_, old)) = old {
            after -= old
                .iter()
                .filter(|k| count(k) == 1 && keys.binary_search(k).is_err())
                .count() as i64;
        }
        let in_old = |k: &Key| old.is_some_and(|(_, o)| o.binary_search(k).is_ok());
        after += keys.iter().filter(|k| count(k) == 0 && !in_old(k)).count() as i64;
        let capacity = if tier == 0 {
            self.primary.capacity() as f64
        } else {
            match self.tiers[tier - 1].tier.capacity_blocks() {
                Some(c) => c as f64,
                None => return Ok(()),
            }
        };
        let bound = (self.opts.pinning.max_share * capacity).floor() as i64;
        if after > bound {
            return Err(Error::NoSpace(format!(
                "pin set {name:?} would hold {after} blocks in tier {tier}, beyond pinning.max_share {} of its {capacity} (at most {bound})",
                self.opts.pinning.max_share
            )));
        }
        Ok(())
    }

    /// Adds a hold of each of `keys` (sorted, distinct, present) in
    /// `tier`: the tier is asked to hold those no set held yet.
    fn hold_pinned_keys(&mut self, tier: usize, keys: &[Key]) -> Result<()> {
        for (i, k) in keys.iter().enumerate() {
            let c = self.pins.counts.entry((tier, *k)).or_insert(0);
            *c += 1;
            // A secondary tier's keys were held before the bound was
            // checked (`hold_in_secondary`).
            if *c == 1 && tier > 0 {
                self.pins.add_held(tier, 1);
            } else if *c == 1 {
                if let Err(e) = self.primary.hold(k) {
                    // A backend without holds: what this call took is given back.
                    self.pins.counts.remove(&(tier, *k));
                    self.release_pinned_keys(tier, &keys[..i])?;
                    return Err(e);
                }
                self.pins.add_held(tier, 1);
            }
        }
        Ok(())
    }

    /// Takes back one hold of each of `keys` in `tier`: the tier releases
    /// those no set holds any more.
    fn release_pinned_keys(&mut self, tier: usize, keys: &[Key]) -> Result<()> {
        let mut released = Vec::new();
        for k in keys {
            let Some(c) = self.pins.counts.get_mut(&(tier, *k)) else {
                continue;
            };
            *c -= 1;
            if *c == 0 {
                self.pins.counts.remove(&(tier, *k));
                if tier == 0 {
                    self.primary.release_hold(k)?;
                } else {
                    released.push(*k);
                }
                self.pins.add_held(tier, -1);
            }
        }
        if !released.is_empty() {
            self.tiers[tier - 1].tier.release_hold(&released);
        }
        Ok(())
    }

    /// Bytes per block for pin-set sizes: the manager's block size, else
    /// its slot memory's slot size, else 0.
    fn block_bytes(&self) -> u64 {
        self.opts.block_bytes
    }
}
