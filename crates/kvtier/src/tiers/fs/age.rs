//! Max age: a block stored longer ago than the options' `max_age` is a
//! miss, and is removed the way an evicted block is (its file by the next
//! store's tasks, a segment record freed at once).  Lookups check the age
//! of the key they ask for; the end of each scheduler step sweeps the
//! oldest blocks, so blocks nobody asks for go too.
//!
//! When a block was stored: at the store's settling for blocks this tier
//! wrote; the file's modification time for blocks of the files layout
//! found by the restart scan, and the time the persisted index recorded
//! for those it lists; the time the tier found or loaded it for blocks of
//! the segments layout (records keep no time) and for blocks another
//! process stored in a shared directory.
//!
//! A block a pin set holds does not expire while held: lookups serve it,
//! and a sweep that finds it past the max age sets it aside; released, it
//! is removed at once (by the next sweep if a load reads it then).

use std::collections::VecDeque;
use std::time::{Duration, SystemTime};

use hashbrown::HashMap;

use super::index::State;
use super::{FsTier, Key};

/// Store times of the tier's blocks, kept only under a max age.
#[derive(Debug, Default)]
pub(super) struct Ages {
    max_age: Duration,
    born: HashMap<Key, SystemTime, foldhash::fast::RandomState>,
    /// (time, key) in the order they were noted; an entry whose time no
    /// longer matches `born` is stale.
    order: VecDeque<(SystemTime, Key)>,
    /// Expired keys whose files the next store removes.
    doomed: Vec<Key>,
    /// Keys a sweep found past the max age while a pin set held them,
    /// with their store time: removed when released.
    overdue: HashMap<Key, SystemTime, foldhash::fast::RandomState>,
}

impl Ages {
    pub(super) fn new(max_age: Duration) -> Ages {
        Ages {
            max_age,
            ..Ages::default()
        }
    }

    /// Notes that `key` was stored at `at` (nothing without a max age).
    pub(super) fn stored(&mut self, key: Key, at: SystemTime) {
        if self.max_age.is_zero() {
            return;
        }
        self.overdue.remove(&key);
        self.born.insert(key, at);
        self.order.push_back((at, key));
    }

    /// When `key` was stored, if noted (only under a max age).
    pub(super) fn born(&self, key: &Key) -> Option<SystemTime> {
        self.born.get(key).copied()
    }

    /// Notes `key` again with its time `at`, to be looked at first by the
    /// next sweep (a block a load was reading when it expired).
    fn retry(&mut self, key: Key, at: SystemTime) {
        self.born.insert(key, at);
        self.order.push_front((at, key));
    }

    fn too_old(&self, at: SystemTime, now: SystemTime) -> bool {
        now.duration_since(at).unwrap_or_default() > self.max_age
    }

    /// Whether `key` was stored more than the max age before `now`.
    pub(super) fn expired(&self, key: &Key, now: SystemTime) -> bool {
        !self.max_age.is_zero() && self.born.get(key).is_some_and(|&t| self.too_old(t, now))
    }

    /// The oldest noted key past the max age, if any, forgotten.
    fn next_expired(&mut self, now: SystemTime) -> Option<(SystemTime, Key)> {
        while let Some(&(t, key)) = self.order.front() {
            if self.born.get(&key) != Some(&t) {
                self.order.pop_front();
                continue;
            }
            if !self.too_old(t, now) {
                return None;
            }
            self.order.pop_front();
            self.born.remove(&key);
            return Some((t, key));
        }
        None
    }

    /// The files the next store removes first.
    pub(super) fn take_doomed(&mut self) -> Vec<Key> {
        std::mem::take(&mut self.doomed)
    }
}

impl FsTier {
    /// Whether `key`'s block is past the max age; such a block is removed
    /// (or, while a load reads it, left to a later sweep).  A held block
    /// is not past it.
    pub(super) fn expire_if_old(&mut self, key: &Key) -> bool {
        if self.ages.max_age.is_zero() {
            return false; // no max age: no clock read on the lookup path
        }
        let now = SystemTime::now();
        if !self.ages.expired(key, now) || self.index.is_held(key) {
            return false;
        }
        if !self.retire(key) {
            return true;
        }
        self.ages.born.remove(key);
        true
    }

    /// Removes the blocks past the max age, oldest first.
    pub(super) fn sweep_expired(&mut self) {
        if self.ages.max_age.is_zero() {
            return;
        }
        let now = SystemTime::now();
        let mut busy = Vec::new();
        while let Some((t, key)) = self.ages.next_expired(now) {
            if self.index.is_held(&key) {
                self.ages.overdue.insert(key, t);
            } else if !self.retire(&key) && self.index.get(&key).map(|s| s.0) == Some(State::Ready)
            {
                busy.push((t, key));
            }
        }
        // Blocks a load reads go at a later step.
        for (t, key) in busy {
            self.ages.retry(key, t);
        }
    }

    /// After a pin set released `key`: removes it if a sweep found it past
    /// the max age while it was held (or, while a load reads it, leaves it
    /// to the next sweep).
    pub(super) fn expire_released(&mut self, key: &Key) {
        let Some(t) = self.ages.overdue.remove(key) else {
            return;
        };
        if !self.retire(key) && self.index.get(key).map(|s| s.0) == Some(State::Ready) {
            self.ages.retry(*key, t);
        }
    }

    /// Removes Ready `key` unless a load reads it: a segment record is freed
    /// at once, a file goes with the next store's tasks (the key is
    /// Removing until then).  False if it was not removed.
    fn retire(&mut self, key: &Key) -> bool {
        if !self.index.retire(key) {
            return false;
        }
        self.counts.expired.add(1);
        let announced = self.index.announced(key);
        self.events.removed(*key, announced);
        if self.segmented() {
            self.index.remove(key);
        } else {
            self.ages.doomed.push(*key);
        }
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn k(i: u8) -> Key {
        Key::new(&[i]).unwrap()
    }

    #[test]
    fn keys_expire_oldest_first_and_a_new_store_renews_a_key() {
        let t0 = SystemTime::UNIX_EPOCH + Duration::from_secs(1000);
        let s = Duration::from_secs(1);
        let mut a = Ages::new(Duration::from_secs(10));
        a.stored(k(1), t0);
        a.stored(k(2), t0 + s);
        a.stored(k(1), t0 + 5 * s);
        assert!(!a.expired(&k(1), t0 + 11 * s));
        assert!(a.expired(&k(2), t0 + 12 * s));
        assert_eq!(a.next_expired(t0 + 12 * s), Some((t0 + s, k(2))));
        assert_eq!(a.next_expired(t0 + 12 * s), None);
        assert_eq!(a.next_expired(t0 + 16 * s), Some((t0 + 5 * s, k(1))));
    }

    #[test]
    fn a_block_put_back_is_the_next_sweeps_first() {
        let t0 = SystemTime::UNIX_EPOCH + Duration::from_secs(1000);
        let s = Duration::from_secs(1);
        let mut a = Ages::new(Duration::from_secs(10));
        a.stored(k(1), t0);
        a.stored(k(2), t0 + 5 * s);
        let now = t0 + 12 * s;
        assert_eq!(a.next_expired(now), Some((t0, k(1))));
        a.retry(k(1), t0);
        // Not behind key 2, which has not expired yet.
        assert_eq!(a.next_expired(now), Some((t0, k(1))));
        assert_eq!(a.next_expired(now), None);
    }

    #[test]
    fn without_a_max_age_nothing_is_noted() {
        let mut a = Ages::new(Duration::ZERO);
        a.stored(k(1), SystemTime::UNIX_EPOCH);
        assert!(!a.expired(&k(1), SystemTime::now()));
        assert!(a.born.is_empty() && a.order.is_empty());
    }
}
