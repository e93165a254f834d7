//! Batched answers, as engines ask for them: a lookup of a request's keys in
//! order that stops at the first key not ready, and queued events taken as
//! runs of one kind.

use super::lists::NIL;
use super::slots::Lookahead;
use super::{PrimaryLookup, PrimaryTier};
use crate::events::EventKind;
use crate::key::{KeyBatch, KeyBytes, with_keys};
use crate::request::RequestId;

/// What [`PrimaryTier::lookup_prefix`] found.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PrefixLookup {
    /// Number of leading keys that are [`PrimaryLookup::Hit`].
    pub hits: usize,
    /// The answer of key `hits`: `Miss` or `HitPending`, or `Hit` when
    /// every key is a hit.
    pub stop: PrimaryLookup,
}

impl PrimaryTier {
    /// Looks `keys` up in order and stops at the first that is not
    /// [`PrimaryLookup::Hit`]: the keys after it are not read.  Changes
    /// nothing.  The same answer as [`PrimaryTier::lookup`] of each key
    /// until one is not a hit.
    pub fn lookup_prefix<'k>(&self, keys: impl Into<KeyBatch<'k>>) -> PrefixLookup {
        with_keys!(keys.into(), |k| self.lookup_prefix_each(k.len(), |j| &k[j]))
    }

    /// [`PrimaryTier::lookup_prefix`] of keys `key(0..n)`: [`Key`]s, or
    /// checked bytes read in place.
    pub(crate) fn lookup_prefix_each<'k, K: KeyBytes + ?Sized + 'k>(
        &self,
        n: usize,
        key: impl Fn(usize) -> &'k K,
    ) -> PrefixLookup {
        let slots = &self.slots;
        let mut ahead = Lookahead::new(slots, n, &key);
        for i in 0..n {
            let stop = match ahead.find(slots, i, &key) {
                (_, NIL) => PrimaryLookup::Miss,
                (_, s) if slots.refs(s) < 0 => PrimaryLookup::HitPending,
                _ => continue,
            };
            return PrefixLookup { hits: i, stop };
        }
        PrefixLookup {
            hits: n,
            stop: PrimaryLookup::Hit,
        }
    }

    /// [`PrimaryTier::lookup_prefix`] of keys `key(0..n)` for active
    /// request `req`, which are keys `first..first + n` of the request's
    /// lookup (`first` 0: a new lookup, after which a later part may
    /// follow): the same answer, and the request remembers where the hits
    /// are, so that its next calls on the same keys, from the lookup's
    /// first (a load's pin, its touch, its unpin), find them without a
    /// probe (`hints.rs`).  Changes nothing else; an unknown request gets
    /// the answer only.
    pub(crate) fn lookup_prefix_for<'k, K: KeyBytes + ?Sized + 'k>(
        &mut self,
        req: RequestId,
        first: usize,
        n: usize,
        key: impl Fn(usize) -> &'k K,
    ) -> PrefixLookup {
        let slots = &self.slots;
        let Some(record) = self.requests.get_mut(&req) else {
            return self.lookup_prefix_each(n, key);
        };
        let hints = &mut record.hints;
        let recording = hints.start(slots, first, n);
        let mut ahead = Lookahead::new(slots, n, &key);
        for i in 0..n {
            let stop = match ahead.find(slots, i, &key) {
                (_, NIL) => PrimaryLookup::Miss,
                (_, s) if slots.refs(s) < 0 => PrimaryLookup::HitPending,
                (h, s) => {
                    if recording {
                        hints.push(s, h);
                    }
                    continue;
                }
            };
            return PrefixLookup { hits: i, stop };
        }
        PrefixLookup {
            hits: n,
            stop: PrimaryLookup::Hit,
        }
    }

    /// How many of the oldest queued events make up at most `max_runs`
    /// runs: consecutive events of one kind, a "cleared" event (which has
    /// no key) always a run of its own.  Changes nothing; reads only the
    /// events counted (and the one after them).
    pub fn events_in_runs(&self, max_runs: usize) -> usize {
        let mut runs = 0;
        let mut last = None;
        for (i, e) in self.events.iter().enumerate() {
            if last != Some(e.kind) || e.kind == EventKind::Cleared {
                if runs == max_runs {
                    return i;
                }
                runs += 1;
                last = Some(e.kind);
            }
        }
        self.events.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::key::Key;
    use crate::primary::{PolicyKind, PrimaryConfig, StorePlan};
    use crate::request::RequestId;

    fn k(i: u8) -> Key {
        Key::new(&[i, 0xAB]).unwrap()
    }

    fn tier(capacity: u32) -> PrimaryTier {
        PrimaryTier::new(PrimaryConfig {
            capacity,
            policy: PolicyKind::Lru,
            event_capacity: 64,
            ..Default::default()
        })
        .unwrap()
    }

    #[test]
    fn a_prefix_lookup_stops_at_the_first_key_not_ready() {
        let mut t = tier(64);
        let r = RequestId(1);
        t.request_begin(r).unwrap();
        let mut plan = StorePlan::default();
        let ready: Vec<Key> = (0..40).map(k).collect();
        t.prepare_store(r, &ready, &mut plan).unwrap();
        t.complete_store(r, &ready, true);
        t.prepare_store(r, &[k(40)], &mut plan).unwrap();
        let ask = |keys: &[Key]| t.lookup_prefix(keys);
        assert_eq!(
            ask(&ready),
            PrefixLookup {
                hits: 40,
                stop: PrimaryLookup::Hit
            }
        );
        assert_eq!(
            ask(&[]),
            PrefixLookup {
                hits: 0,
                stop: PrimaryLookup::Hit
            }
        );
        // Past the read-ahead distance, then a pending key, then a miss.
        let mut keys = ready.clone();
        keys.push(k(40));
        keys.push(k(99));
        assert_eq!(
            ask(&keys),
            PrefixLookup {
                hits: 40,
                stop: PrimaryLookup::HitPending
            }
        );
        keys[3] = k(200);
        assert_eq!(
            ask(&keys),
            PrefixLookup {
                hits: 3,
                stop: PrimaryLookup::Miss
            }
        );
        // The same answers as single lookups, key by key.
        for n in 0..keys.len() {
            let want = keys[..n]
                .iter()
                .position(|key| t.lookup(key) != PrimaryLookup::Hit)
                .map_or(
                    PrefixLookup {
                        hits: n,
                        stop: PrimaryLookup::Hit,
                    },
                    |i| PrefixLookup {
                        hits: i,
                        stop: t.lookup(&keys[i]),
                    },
                );
            assert_eq!(ask(&keys[..n]), want, "{n} keys");
        }
    }

    #[test]
    fn events_are_counted_in_runs_of_one_kind() {
        let mut t = tier(2);
        let r = RequestId(1);
        t.request_begin(r).unwrap();
        let mut plan = StorePlan::default();
        assert_eq!(t.events_in_runs(5), 0);
        t.prepare_store(r, &[k(9)], &mut plan).unwrap();
        t.complete_store(r, &[k(9)], true);
        // A reset drops the queue and queues one "cleared".
        t.reset();
        t.prepare_store(r, &[k(0), k(1)], &mut plan).unwrap();
        t.complete_store(r, &[k(0), k(1)], true);
        t.prepare_store(r, &[k(2)], &mut plan).unwrap();
        t.complete_store(r, &[k(2)], true);
        // cleared | stored 0, 1 | removed one | stored 2.
        assert_eq!(t.events_queued(), 5);
        assert_eq!(t.events_in_runs(0), 0);
        assert_eq!(t.events_in_runs(1), 1);
        assert_eq!(t.events_in_runs(2), 3);
        assert_eq!(t.events_in_runs(3), 4);
        assert_eq!(t.events_in_runs(4), 5);
        assert_eq!(t.events_in_runs(usize::MAX), 5);
    }
}
