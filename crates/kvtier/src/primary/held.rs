//! Holds of pin sets, and dropping blocks by key prefix.
//!
//! A pin set holds a ready key with the [`HELD`] flag, apart from its ref
//! count: eviction passes over a held key as over a pinned one (it is not
//! idle, `Slots::is_idle`), and no unpin of a load or transfer can release
//! the hold, since unpins only change ref counts.  A held key counts in the
//! `pinned` gauge (busy, ready), never in `idle`.  Which pin sets hold a key
//! is the manager's business: the tier only knows whether one does.  A
//! reset forgets every hold with every key.

use super::PrimaryTier;
use super::policy::Policy;
use super::slots::{ANNOUNCED, HELD, RESIDENT};

/// What a drop of blocks by key prefix did in one tier.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct DropCount {
    /// Blocks removed.
    pub dropped: u64,
    /// Blocks that matched but were kept: busy (a load or transfer in
    /// flight, write pending, or held by a pin set).
    pub kept: u64,
}

impl PrimaryTier {
    /// Holds ready `key` resident for a pin set: true if it is held now
    /// (also when it already was), false if it is absent or write pending
    /// (nothing changed).
    pub fn hold(&mut self, key: &crate::key::Key) -> bool {
        let Some(s) = self.slot_of(key) else {
            return false;
        };
        let r = self.slots.refs(s);
        if r < 0 {
            return false;
        }
        if self.slots.flags(s) & HELD == 0 {
            if r == 0 {
                self.idle -= 1;
                self.pinned += 1;
            }
            *self.slots.flags_mut(s) |= HELD;
            self.held += 1;
        }
        true
    }

    /// Releases a pin set's hold of `key`: true if it was held.  A key no
    /// load pins turns idle (evictable again at its recency).
    pub fn release_hold(&mut self, key: &crate::key::Key) -> bool {
        let Some(s) = self.slot_of(key) else {
            return false;
        };
        if self.slots.flags(s) & HELD == 0 {
            return false;
        }
        *self.slots.flags_mut(s) &= !HELD;
        self.held -= 1;
        if self.slots.refs(s) == 0 {
            self.pinned -= 1;
            self.idle += 1;
            self.became_idle(s);
        }
        true
    }

    /// Whether a pin set holds `key`.
    pub fn is_held(&self, key: &crate::key::Key) -> bool {
        self.slot_of(key)
            .is_some_and(|s| self.slots.flags(s) & HELD != 0)
    }

    /// Number of keys pin sets hold.
    pub fn held_count(&self) -> u32 {
        self.held
    }

    /// Removes every idle key that starts with `prefix` (every idle key
    /// for an empty one), as evictions without history: each announced
    /// key's removal is queued as an event.  Busy keys (pinned, write pending,
    /// held by a pin set) that match are kept and counted.  O(slots
    /// allocated).
    pub fn drop_prefix(&mut self, prefix: &[u8]) -> DropCount {
        let mut count = DropCount::default();
        for s in 0..self.slots.fresh {
            if self.slots.flags(s) & RESIDENT == 0
                || !self.slots.key(s).as_bytes().starts_with(prefix)
            {
                continue;
            }
            if !self.slots.is_idle(s) {
                count.kept += 1;
                continue;
            }
            let key = *self.slots.key(s);
            let h = self.slots.hash(&key);
            self.policy.remove(s);
            self.events
                .removed(key, self.slots.flags(s) & ANNOUNCED != 0);
            self.slots.release(s, h);
            self.idle -= 1;
            count.dropped += 1;
        }
        count
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::key::Key;
    use crate::primary::{PrimaryConfig, StorePlan};
    use crate::request::RequestId;

    fn tier(capacity: u32) -> PrimaryTier {
        PrimaryTier::new(PrimaryConfig {
            capacity,
            ..PrimaryConfig::default()
        })
        .unwrap()
    }

    fn k(b: &[u8]) -> Key {
        Key::new(b).unwrap()
    }

    /// Stores `keys` ready, for request `id`.
    fn store(t: &mut PrimaryTier, id: u64, keys: &[Key]) -> StorePlan {
        let req = RequestId(id);
        t.request_begin(req).unwrap();
        let mut plan = StorePlan::default();
        t.prepare_store(req, keys, &mut plan).unwrap();
        t.complete_store(req, &plan.to_store.clone(), true);
        t.request_finished(req).unwrap();
        plan
    }

    #[test]
    fn a_held_key_is_never_evicted_and_its_release_makes_it_evictable() {
        let mut t = tier(2);
        store(&mut t, 1, &[k(b"a"), k(b"b")]);
        assert!(t.hold(&k(b"a")));
        assert_eq!((t.stats().pinned, t.stats().idle), (1, 1));
        let plan = store(&mut t, 2, &[k(b"c")]);
        assert_eq!(plan.evicted, vec![k(b"b")]);
        let plan = store(&mut t, 3, &[k(b"d")]);
        assert_eq!(plan.evicted, vec![k(b"c")]);
        // Both keys held: nothing is evictable, the store is refused.
        assert!(t.hold(&k(b"d")));
        let plan = store(&mut t, 5, &[k(b"x")]);
        assert!(plan.to_store.is_empty());
        assert!(t.release_hold(&k(b"d")));
        t.check_invariants().unwrap();
        assert!(t.release_hold(&k(b"a")));
        assert_eq!((t.stats().pinned, t.stats().idle), (0, 2));
        let plan = store(&mut t, 4, &[k(b"e")]);
        assert_eq!(plan.evicted.len(), 1);
        t.check_invariants().unwrap();
    }

    #[test]
    fn a_loads_unpin_never_releases_a_hold() {
        let mut t = tier(1);
        store(&mut t, 1, &[k(b"a")]);
        assert!(t.hold(&k(b"a")));
        let req = RequestId(2);
        t.request_begin(req).unwrap();
        let mut slots = Vec::new();
        t.prepare_load(req, &[k(b"a")][..], &mut slots).unwrap();
        t.complete_load(req, &[k(b"a")][..]).unwrap();
        // A second unpin finds nothing to unpin: the hold is not a pin.
        assert!(t.complete_load(req, &[k(b"a")][..]).is_err());
        assert!(t.is_held(&k(b"a")));
        assert_eq!((t.stats().pinned, t.stats().idle), (1, 0));
        t.check_invariants().unwrap();
    }

    #[test]
    fn a_key_a_load_pins_can_be_held_and_stays_held_after_the_load() {
        let mut t = tier(1);
        store(&mut t, 1, &[k(b"a")]);
        let req = RequestId(2);
        t.request_begin(req).unwrap();
        let mut slots = Vec::new();
        t.prepare_load(req, &[k(b"a")][..], &mut slots).unwrap();
        assert!(
            t.hold(&k(b"a")),
            "a block being loaded is present: it can be held"
        );
        assert_eq!((t.stats().pinned, t.stats().idle), (1, 0));
        t.complete_load(req, &[k(b"a")][..]).unwrap();
        assert!(t.is_held(&k(b"a")));
        assert_eq!((t.stats().pinned, t.stats().idle), (1, 0));
        assert!(t.release_hold(&k(b"a")));
        assert_eq!((t.stats().pinned, t.stats().idle), (0, 1));
        assert_eq!(t.held_count(), 0);
        assert!(!t.is_held(&k(b"a")));
        t.check_invariants().unwrap();
    }

    #[test]
    fn a_key_being_written_is_not_held() {
        let mut t = tier(2);
        let req = RequestId(1);
        t.request_begin(req).unwrap();
        let mut plan = StorePlan::default();
        t.prepare_store(req, &[k(b"w")][..], &mut plan).unwrap();
        assert!(!t.hold(&k(b"w")), "a write-pending block is not ready");
        assert_eq!(t.held_count(), 0);
        t.check_invariants().unwrap();
    }

    #[test]
    fn releasing_a_present_key_no_set_holds_changes_nothing() {
        let mut t = tier(2);
        store(&mut t, 1, &[k(b"a"), k(b"b")]);
        assert!(t.hold(&k(b"b")));
        assert!(!t.release_hold(&k(b"a")), "a was never held");
        assert_eq!(t.held_count(), 1);
        assert_eq!((t.stats().pinned, t.stats().idle), (1, 1));
        assert!(t.is_held(&k(b"b")) && !t.is_held(&k(b"a")));
        t.check_invariants().unwrap();
    }

    #[test]
    fn a_drop_announces_the_removal_of_announced_keys_only() {
        // One event fits: "a"'s store is announced, "b"'s is dropped from
        // the full queue, so "b" was never announced.
        let mut t = PrimaryTier::new(PrimaryConfig {
            capacity: 4,
            event_capacity: 1,
            ..PrimaryConfig::default()
        })
        .unwrap();
        store(&mut t, 1, &[k(b"a"), k(b"b")]);
        let mut events = Vec::new();
        t.take_events(&mut events);
        assert_eq!(events.len(), 1);
        assert_eq!(events[0].key, Some(k(b"a")));
        events.clear();
        assert_eq!(t.drop_prefix(b"b").dropped, 1);
        t.take_events(&mut events);
        assert!(events.is_empty(), "{events:?}");
        assert_eq!(t.drop_prefix(b"a").dropped, 1);
        t.take_events(&mut events);
        assert_eq!(events.len(), 1, "{events:?}");
        assert_eq!(events[0].kind, crate::events::EventKind::Removed);
        assert_eq!(events[0].key, Some(k(b"a")));
    }

    #[test]
    fn absent_keys_are_not_held() {
        let mut t = tier(2);
        assert!(!t.hold(&k(b"x")));
        assert!(!t.release_hold(&k(b"x")));
        assert_eq!(t.held_count(), 0);
    }

    #[test]
    fn drop_prefix_removes_idle_matching_keys_and_keeps_busy_ones() {
        let mut t = tier(8);
        store(&mut t, 1, &[k(b"m1a"), k(b"m1b"), k(b"m1c"), k(b"m2a")]);
        assert!(t.hold(&k(b"m1b")));
        let req = RequestId(2);
        t.request_begin(req).unwrap();
        let mut slots = Vec::new();
        t.prepare_load(req, &[k(b"m1c")][..], &mut slots).unwrap();
        let c = t.drop_prefix(b"m1");
        assert_eq!(
            c,
            DropCount {
                dropped: 1,
                kept: 2
            }
        );
        assert_eq!(t.slot_of(&k(b"m1a")), None);
        assert!(t.slot_of(&k(b"m2a")).is_some());
        t.check_invariants().unwrap();
        assert_eq!(
            t.drop_prefix(b""),
            DropCount {
                dropped: 1,
                kept: 2
            }
        );
        t.check_invariants().unwrap();
    }
}
