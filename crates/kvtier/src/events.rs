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

/// One event with the tier it happened in: 0 the primary tier, 1.. the
/// secondary tiers in the order they were added to the manager.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TierEvent {
    /// Tier index.
    pub tier: usize,
    /// The event.
    pub event: Event,
}

/// A tier's announcer: its queue of events waiting to be taken, and the
/// one place of the rule every tier (the primary one and each built-in
/// secondary one) announces by.
///
/// - The queue is bounded by the event capacity the tier is given: when it
///   is full, new events are dropped and counted ([`Announcer::dropped`]);
///   capacity 0 turns events off (nothing is queued or counted).
/// - A key counts as announced only when its "stored" event was queued
///   ([`Announcer::stored`] answers whether; the tier keeps the answer
///   beside the key), and only an announced key is announced as removed
///   ([`Announcer::removed`]).  So a key whose "stored" event was dropped
///   is never announced as removed.
/// - Lowering the capacity drops the newest events beyond it; the keys of
///   the "stored" ones among them are handed back to be unannounced.
#[derive(Debug, Default)]
pub(crate) struct Announcer {
    events: std::collections::VecDeque<Event>,
    capacity: usize,
    dropped: u64,
}

impl Announcer {
    /// An empty queue holding at most `capacity` events.
    pub(crate) fn new(capacity: usize) -> Announcer {
        Announcer {
            events: std::collections::VecDeque::new(),
            capacity,
            dropped: 0,
        }
    }

    /// As [`Announcer::new`], with room made for up to 4096 events at
    /// once, so that queueing them allocates nothing.
    pub(crate) fn preallocated(capacity: usize) -> Announcer {
        Announcer {
            events: std::collections::VecDeque::with_capacity(capacity.min(4096)),
            capacity,
            dropped: 0,
        }
    }

    fn push(&mut self, kind: EventKind, key: Option<Key>) -> bool {
        if self.capacity == 0 {
            return false;
        }
        if self.events.len() >= self.capacity {
            self.dropped += 1;
            return false;
        }
        self.events.push_back(Event { kind, key });
        true
    }

    /// Announces `key` as stored; true if the event was queued, and then
    /// the key counts as announced (keep the answer with the key).  False
    /// if it was dropped (the queue is full: counted) or events are off.
    pub(crate) fn stored(&mut self, key: Key) -> bool {
        self.push(EventKind::Stored, Some(key))
    }

    /// Announces `key` as removed if it was `announced` as stored (what
    /// [`Announcer::stored`] answered for it); a key never announced is
    /// left unsaid.
    pub(crate) fn removed(&mut self, key: Key, announced: bool) {
        if announced {
            self.push(EventKind::Removed, Some(key));
        }
    }

    /// The tier forgot every key: drops the queued events (not counted)
    /// and queues one "cleared" event.
    pub(crate) fn cleared(&mut self) {
        self.events.clear();
        self.push(EventKind::Cleared, None);
    }

    /// Moves up to `max` events, oldest first, to `out`; returns how many.
    pub(crate) fn take(&mut self, max: usize, out: &mut Vec<Event>) -> usize {
        let n = max.min(self.events.len());
        // Copied as the queue's two slices, not event by event.
        let (front, back) = self.events.as_slices();
        let first = n.min(front.len());
        out.extend_from_slice(&front[..first]);
        out.extend_from_slice(&back[..n - first]);
        self.events.drain(..n);
        n
    }

    /// Moves up to `max` events, oldest first, onto the back of `out`, each
    /// as tier `tier`'s; returns how many.  Copied once, straight from the
    /// queue.
    pub(crate) fn take_tagged(
        &mut self,
        max: usize,
        tier: usize,
        out: &mut std::collections::VecDeque<TierEvent>,
    ) -> usize {
        let n = max.min(self.events.len());
        // The queue's two slices, each extending `out` in one piece (a
        // slice's length is known: room is made once, not per event).
        let (front, back) = self.events.as_slices();
        let first = n.min(front.len());
        for part in [&front[..first], &back[..n - first]] {
            out.extend(part.iter().map(|&event| TierEvent { tier, event }));
        }
        self.events.drain(..n);
        n
    }

    /// The queued events, oldest first.
    pub(crate) fn iter(&self) -> impl Iterator<Item = &Event> {
        self.events.iter()
    }

    /// Sets the capacity; events beyond it, newest first, are dropped
    /// (counted unless the new capacity is 0), and the key of each dropped
    /// "stored" event is handed to `unannounce`: the tier forgets that it
    /// was announced.
    pub(crate) fn set_capacity(&mut self, capacity: usize, mut unannounce: impl FnMut(Key)) {
        self.capacity = capacity;
        while self.events.len() > capacity {
            let Some(e) = self.events.pop_back() else {
                break;
            };
            if let (EventKind::Stored, Some(key)) = (e.kind, e.key) {
                unannounce(key);
            }
            if capacity > 0 {
                self.dropped += 1;
            }
        }
    }

    /// Events waiting.
    pub(crate) fn len(&self) -> usize {
        self.events.len()
    }

    /// Events dropped because the queue was full, since creation.
    pub(crate) fn dropped(&self) -> u64 {
        self.dropped
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(i: u8) -> Key {
        Key::new(&[i]).unwrap()
    }

    #[test]
    fn a_full_queue_drops_and_counts_and_capacity_zero_queues_nothing() {
        let mut q = Announcer::new(2);
        assert!(q.stored(key(1)));
        assert!(q.stored(key(2)));
        assert!(!q.stored(key(3)));
        assert_eq!((q.len(), q.dropped()), (2, 1));
        let mut out = Vec::new();
        q.take(1, &mut out);
        assert_eq!(out[0].key, Some(key(1)));
        assert_eq!(q.len(), 1);
        let mut off = Announcer::new(0);
        assert!(!off.stored(key(1)));
        off.cleared();
        assert_eq!((off.len(), off.dropped()), (0, 0));
    }

    #[test]
    fn takes_hand_out_events_oldest_first_across_the_queue_wrapping() {
        // Pushes and takes interleaved so the queue's ring wraps: every
        // take hands out the oldest events, in order, whatever its slices.
        let mut q = Announcer::preallocated(5);
        let (mut next, mut expected) = (0u8, 0u8);
        let mut out = Vec::new();
        for round in 0..20 {
            while q.len() < 5 {
                assert!(q.stored(key(next)));
                next += 1;
            }
            out.clear();
            let n = q.take(1 + round % 4, &mut out);
            assert_eq!(n, out.len());
            for e in &out {
                assert_eq!(e.key, Some(key(expected)), "round {round}");
                expected += 1;
            }
        }
        while q.len() < 5 {
            assert!(q.stored(key(next)));
            next += 1;
        }
        out.clear();
        assert_eq!(q.take(usize::MAX, &mut out), 5);
        assert_eq!(out[0].key, Some(key(expected)));
        assert_eq!(out.last().and_then(|e| e.key), Some(key(next - 1)));
        assert_eq!(q.len(), 0);
    }

    #[test]
    fn a_tagged_take_hands_out_what_a_plain_take_would_each_with_its_tier() {
        // Two queues fed alike, the ring wrapping: each tagged take appends
        // the events a plain take of the same bound hands out, in order,
        // after what `out` held, each with the tier given.
        let (mut plain, mut tagged) = (Announcer::preallocated(5), Announcer::preallocated(5));
        let mut next = 0u8;
        let mut out = std::collections::VecDeque::new();
        let mut expected = Vec::new();
        for round in 0..12 {
            while plain.len() < 5 {
                assert!(plain.stored(key(next)) && tagged.stored(key(next)));
                next += 1;
            }
            let max = round % 7;
            let mut taken = Vec::new();
            let n = plain.take(max, &mut taken);
            assert_eq!(tagged.take_tagged(max, round, &mut out), n, "round {round}");
            expected.extend(
                taken
                    .into_iter()
                    .map(|event| TierEvent { tier: round, event }),
            );
            assert_eq!(tagged.len(), plain.len(), "round {round}");
        }
        assert_eq!(out.into_iter().collect::<Vec<_>>(), expected);
    }

    #[test]
    fn shrinking_drops_the_newest_and_unannounces_them() {
        let mut q = Announcer::new(4);
        for i in 1..=3 {
            assert!(q.stored(key(i)));
        }
        q.removed(key(1), true);
        let mut gone = Vec::new();
        q.set_capacity(2, |k| gone.push(k));
        assert_eq!(gone, vec![key(3)], "only a stored event unannounces");
        assert_eq!((q.len(), q.dropped()), (2, 2));
        q.set_capacity(0, |_| {});
        assert_eq!(
            (q.len(), q.dropped()),
            (0, 2),
            "turning events off is no drop"
        );
        assert_eq!(q.len(), 0);
    }
}

#[cfg(test)]
mod rule_tests {
    use super::*;

    fn key(i: u8) -> Key {
        Key::new(&[i]).unwrap()
    }

    #[test]
    fn a_key_whose_stored_event_was_dropped_is_never_announced_removed() {
        let mut q = Announcer::new(1);
        let first = q.stored(key(1));
        let second = q.stored(key(2));
        assert_eq!((first, second), (true, false));
        let mut out = Vec::new();
        q.take(usize::MAX, &mut out);
        q.removed(key(2), second);
        q.removed(key(1), first);
        q.take(usize::MAX, &mut out);
        let kinds: Vec<_> = out.iter().map(|e| (e.kind, e.key)).collect();
        assert_eq!(
            kinds,
            vec![
                (EventKind::Stored, Some(key(1))),
                (EventKind::Removed, Some(key(1)))
            ]
        );
        assert_eq!(q.dropped(), 1);
    }

    #[test]
    fn clearing_drops_the_queue_uncounted_and_queues_one_cleared_event() {
        let mut q = Announcer::preallocated(2);
        assert!(q.stored(key(1)));
        assert!(q.stored(key(2)));
        q.cleared();
        assert_eq!(q.dropped(), 0);
        let e: Vec<_> = q.iter().copied().collect();
        assert_eq!(
            e,
            vec![Event {
                kind: EventKind::Cleared,
                key: None
            }]
        );
    }
}
