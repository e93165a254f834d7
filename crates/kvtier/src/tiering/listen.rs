//! Event listeners: cache events pushed to the engine as they happen (for
//! KV-aware routers), besides or instead of draining them with
//! [`crate::tiering::Manager::take_events`].
//!
//! Events are delivered at the end of the manager call that produced them
//! (the call that stored, evicted or reset), in the order draining would
//! give them, grouped: consecutive events of one tier and kind arrive as one
//! [`EventBatch`].  The listener runs with the manager's lock held: it must
//! not call the manager (such calls fail as re-entrant) and should be quick.

use crate::events::{EventKind, TierEvent};
use crate::key::Key;
use crate::request::{Locality, Medium};

/// Consecutive events of one tier and one kind.
#[derive(Debug, Clone, Copy)]
pub struct EventBatch<'a> {
    /// Tier index: 0 primary, 1.. secondary tiers in the order added.
    pub tier: usize,
    /// The tier's medium (the primary tier is CPU memory), if declared.
    pub medium: Option<Medium>,
    /// The tier's locality (the primary tier is local), if declared.
    pub locality: Option<Locality>,
    /// Stored, removed or cleared.
    pub kind: EventKind,
    /// The keys (empty for `Cleared`).
    pub keys: &'a [Key],
}

/// Receives event batches; called from whichever thread called the manager.
pub type EventListener = Box<dyn FnMut(&EventBatch<'_>) + Send>;

/// An installed listener and how events are shared with draining.
pub(crate) struct Listener {
    callback: EventListener,
    /// Whether delivered events also stay queued for `take_events`.
    pub(crate) also_queue: bool,
    keys: Vec<Key>,
}

impl Listener {
    pub(crate) fn new(callback: EventListener, also_queue: bool) -> Listener {
        Listener {
            callback,
            also_queue,
            keys: Vec::new(),
        }
    }

    /// Delivers `events` in batches; `describe(tier)` gives a tier's
    /// medium and locality.
    pub(crate) fn deliver<'e>(
        &mut self,
        events: impl Iterator<Item = &'e TierEvent>,
        describe: impl Fn(usize) -> (Option<Medium>, Option<Locality>),
    ) {
        let mut current: Option<(usize, EventKind)> = None;
        self.keys.clear();
        for e in events {
            let group = (e.tier, e.event.kind);
            let cleared = e.event.kind == EventKind::Cleared;
            if current != Some(group) || cleared {
                self.flush(current, &describe);
                current = Some(group);
            }
            if let Some(k) = e.event.key {
                self.keys.push(k);
            }
            if cleared {
                self.flush(current.take(), &describe);
            }
        }
        self.flush(current, &describe);
    }

    fn flush(
        &mut self,
        group: Option<(usize, EventKind)>,
        describe: &impl Fn(usize) -> (Option<Medium>, Option<Locality>),
    ) {
        let Some((tier, kind)) = group else {
            return;
        };
        let (medium, locality) = describe(tier);
        (self.callback)(&EventBatch {
            tier,
            medium,
            locality,
            kind,
            keys: &self.keys,
        });
        self.keys.clear();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::events::Event;
    use std::sync::{Arc, Mutex};

    fn ev(tier: usize, kind: EventKind, key: Option<u8>) -> TierEvent {
        TierEvent {
            tier,
            event: Event {
                kind,
                key: key.map(|b| Key::new(&[b]).unwrap()),
            },
        }
    }

    #[test]
    fn consecutive_events_of_one_tier_and_kind_form_one_batch() {
        let seen = Arc::new(Mutex::new(Vec::new()));
        let s = seen.clone();
        let mut l = Listener::new(
            Box::new(move |b: &EventBatch<'_>| {
                s.lock().unwrap().push((
                    b.tier,
                    b.kind,
                    b.keys.iter().map(|k| k.as_bytes()[0]).collect::<Vec<_>>(),
                    b.medium,
                ))
            }),
            false,
        );
        let events = [
            ev(0, EventKind::Stored, Some(1)),
            ev(0, EventKind::Stored, Some(2)),
            ev(0, EventKind::Removed, Some(1)),
            ev(1, EventKind::Stored, Some(1)),
            ev(0, EventKind::Cleared, None),
            ev(0, EventKind::Cleared, None),
        ];
        l.deliver(events.iter(), |t| {
            if t == 0 {
                (Some(Medium::Cpu), Some(Locality::Local))
            } else {
                (Some(Medium::Storage), None)
            }
        });
        let seen = seen.lock().unwrap();
        assert_eq!(
            *seen,
            vec![
                (0, EventKind::Stored, vec![1, 2], Some(Medium::Cpu)),
                (0, EventKind::Removed, vec![1], Some(Medium::Cpu)),
                (1, EventKind::Stored, vec![1], Some(Medium::Storage)),
                (0, EventKind::Cleared, vec![], Some(Medium::Cpu)),
                (0, EventKind::Cleared, vec![], Some(Medium::Cpu)),
            ]
        );
    }
}
