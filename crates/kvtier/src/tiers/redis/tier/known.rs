//! What the tier knows about keys in Redis without asking: the keys it
//! stored or found (with their expiry under a TTL, at most `max_known` of
//! them, the oldest forgotten first) and the keys found absent (for the
//! miss cache's time), and the stored and removed events that knowing and
//! forgetting announce.

use std::time::Instant;

use super::RedisTier;
use crate::key::Key;

/// What this instance knows about a key in Redis.
#[derive(Clone, Copy)]
pub(super) struct Known {
    /// When the value expires (TTL), if it does.
    pub(super) expires: Option<Instant>,
    /// When this instance learnt of it (matches its entry in `order`).
    since: Instant,
    /// Whether this instance announced it with a "stored" event.
    pub(super) announced: bool,
}

impl RedisTier {
    pub(super) fn remember(&mut self, key: Key, announce: bool) {
        let now = Instant::now();
        let expires = self.ttl.map(|t| now + t);
        let entry = self.known.entry(key).or_insert(Known {
            expires,
            since: now,
            announced: false,
        });
        entry.expires = expires;
        entry.since = now;
        let announce = announce && !entry.announced;
        if announce && self.events.stored(key) {
            if let Some(e) = self.known.get_mut(&key) {
                e.announced = true;
            }
        }
        self.order.push_back((key, now));
    }

    pub(super) fn forget(&mut self, key: &Key) {
        if let Some(k) = self.known.remove(key) {
            self.events.removed(*key, k.announced);
        }
    }

    pub(super) fn mark_absent(&mut self, key: Key) {
        let until = Instant::now() + self.miss_cache;
        self.absent.insert(key, until);
        self.absent_order.push_back((key, until));
    }

    pub(super) fn prune(&mut self) {
        let now = Instant::now();
        while let Some(&(k, since)) = self.order.front() {
            let expired = self.ttl.is_some_and(|t| since + t <= now);
            let over =
                self.known.len() > self.max_known || self.order.len() > 2 * self.max_known.max(1);
            if !expired && !over {
                break;
            }
            self.order.pop_front();
            if self.known.get(&k).is_some_and(|e| e.since == since) {
                if expired {
                    self.counters.expired += 1;
                    self.forget(&k);
                } else {
                    // Still in Redis: a later lookup asks the server again.
                    self.known.remove(&k);
                    self.counters.known_forgotten += 1;
                }
            }
        }
        while let Some(&(k, at)) = self.absent_order.front() {
            if at > now {
                break;
            }
            self.absent_order.pop_front();
            if self.absent.get(&k).is_some_and(|x| *x <= now) {
                self.absent.remove(&k);
            }
        }
    }
}
