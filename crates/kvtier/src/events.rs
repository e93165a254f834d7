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

/// A tier's queue of events waiting to be taken, bounded by the event
/// capacity the manager gives every tier: when it is full, new events are
/// dropped and counted; capacity 0 turns events off (nothing is queued or
/// counted).  A tier uses the answer of [`EventQueue::push`] to remember
/// which keys were announced as stored, so that a key whose "stored" event
/// was dropped is never announced as removed.
#[derive(Debug, Default)]
pub(crate) struct EventQueue {
    events: std::collections::VecDeque<Event>,
    capacity: usize,
    dropped: u64,
}

impl EventQueue {
    /// An empty queue holding at most `capacity` events.
    pub(crate) fn new(capacity: usize) -> EventQueue {
        EventQueue {
            events: std::collections::VecDeque::new(),
            capacity,
            dropped: 0,
        }
    }

    /// Queues an event of `kind` for `key`; false if it was dropped (the
    /// queue is full: counted) or events are off (not counted).
    pub(crate) fn push(&mut self, kind: EventKind, key: Key) -> bool {
        if self.capacity == 0 {
            return false;
        }
        if self.events.len() >= self.capacity {
            self.dropped += 1;
            return false;
        }
        self.events.push_back(Event {
            kind,
            key: Some(key),
        });
        true
    }

    /// Moves up to `max` events, oldest first, to `out`.
    pub(crate) fn take(&mut self, max: usize, out: &mut Vec<Event>) {
        let n = max.min(self.events.len());
        out.extend(self.events.drain(..n));
    }

    /// Sets the capacity; events beyond it, newest first, are dropped
    /// (counted unless the new capacity is 0), each handed to `unannounce`
    /// so the tier forgets that its key was announced.
    pub(crate) fn set_capacity(&mut self, capacity: usize, mut unannounce: impl FnMut(&Event)) {
        self.capacity = capacity;
        while self.events.len() > capacity {
            let Some(e) = self.events.pop_back() else {
                break;
            };
            unannounce(&e);
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
        let mut q = EventQueue::new(2);
        assert!(q.push(EventKind::Stored, key(1)));
        assert!(q.push(EventKind::Stored, key(2)));
        assert!(!q.push(EventKind::Stored, key(3)));
        assert_eq!((q.len(), q.dropped()), (2, 1));
        let mut out = Vec::new();
        q.take(1, &mut out);
        assert_eq!(out[0].key, Some(key(1)));
        assert_eq!(q.len(), 1);
        let mut off = EventQueue::new(0);
        assert!(!off.push(EventKind::Stored, key(1)));
        assert_eq!((off.len(), off.dropped()), (0, 0));
    }

    #[test]
    fn shrinking_drops_the_newest_and_unannounces_them() {
        let mut q = EventQueue::new(4);
        for i in 1..=4 {
            assert!(q.push(EventKind::Stored, key(i)));
        }
        let mut gone = Vec::new();
        q.set_capacity(2, |e| gone.push(e.key));
        assert_eq!(gone, vec![Some(key(4)), Some(key(3))]);
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
