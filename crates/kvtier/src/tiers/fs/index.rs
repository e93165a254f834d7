//! The tier's in-memory view of its directory: which keys it holds, in which
//! state, how many bytes they take, and their recency (an intrusive LRU list
//! over a slab, so touching and evicting allocate nothing).
//!
//! Owned by the scheduler-side tier object; workers never see it.

use hashbrown::HashMap;

use super::format::Layout;
use crate::key::Key;

/// State of one key in the index.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum State {
    /// A store is writing it; not readable yet, not evictable.
    Writing,
    /// Whole and readable; evictable when no load reads it.
    Ready,
    /// Evicted; its file is being removed by the store job that needed the
    /// room.  Not readable; a new store of it is skipped until removal ends.
    Removing,
}

const NIL: u32 = u32::MAX;

#[derive(Debug)]
struct Node {
    key: Key,
    state: State,
    readers: u32,
    prev: u32,
    next: u32,
    /// Number of the key's fan-out directory.
    fanout: u8,
    /// Whether a "stored" event announced the key.
    announced: bool,
    /// The key's segment record (segments layout), or [`NO_RECORD`].
    record: u32,
}

/// A node without a segment record (files layout, or not assigned yet).
const NO_RECORD: u32 = u32::MAX;

/// Keys, states, byte accounting and LRU order.
#[derive(Debug)]
pub(super) struct Index {
    map: HashMap<Key, u32, foldhash::fast::RandomState>,
    nodes: Vec<Node>,
    free: Vec<u32>,
    /// Most recently used Ready key.
    head: u32,
    /// Least recently used Ready key.
    tail: u32,
    /// Bytes of every key not yet removed from the index (writing, ready,
    /// or removing but not yet accounted as freed).
    used: u64,
    ready: usize,
    /// Ready keys per fan-out directory.
    ready_in_fanout: [u32; 256],
    file_bytes: u64,
    /// Segment records no key holds (segments layout; empty otherwise).
    free_records: Vec<u32>,
}

impl Index {
    /// An empty index where every block file takes `file_bytes`.
    pub(super) fn new(file_bytes: u64) -> Index {
        Index {
            map: HashMap::default(),
            nodes: Vec::new(),
            free: Vec::new(),
            head: NIL,
            tail: NIL,
            used: 0,
            ready: 0,
            ready_in_fanout: [0; 256],
            file_bytes,
            free_records: Vec::new(),
        }
    }

    /// An index over `records` segment records of `file_bytes` each, holding
    /// the blocks a restart found, as (key, record) pairs in record order
    /// (which becomes their recency, the last most recent); every other
    /// record is free.  Fails only when the free list cannot be allocated.
    pub(super) fn with_records(
        file_bytes: u64,
        records: u32,
        found: &[(Key, u32)],
    ) -> crate::Result<Index> {
        debug_assert!(found.windows(2).all(|w| w[0].1 < w[1].1));
        let mut index = Index::new(file_bytes);
        let free = records as usize - found.len();
        index.free_records.try_reserve_exact(free).map_err(|_| {
            crate::Error::OutOfMemory(format!("fs tier: a free list of {free} records"))
        })?;
        for &(key, record) in found {
            index.insert(key, State::Ready);
            let i = index.map[&key];
            index.nodes[i as usize].record = record;
        }
        // Every record between the found ones, highest first, so the
        // lowest numbers go out first.
        let mut taken = found.iter().rev().map(|&(_, r)| r).peekable();
        for r in (0..records).rev() {
            if taken.next_if_eq(&r).is_none() {
                index.free_records.push(r);
            }
        }
        Ok(index)
    }

    /// Gives Writing `key` a free segment record and returns it; `None` if
    /// the key has one already, is not Writing, or no record is free.
    pub(super) fn assign_record(&mut self, key: &Key) -> Option<u32> {
        let &i = self.map.get(key)?;
        let n = &self.nodes[i as usize];
        if n.state != State::Writing || n.record != NO_RECORD {
            return None;
        }
        let record = self.free_records.pop()?;
        self.nodes[i as usize].record = record;
        Some(record)
    }

    /// `key`'s segment record, if it has one.
    pub(super) fn record(&self, key: &Key) -> Option<u32> {
        let &i = self.map.get(key)?;
        Some(self.nodes[i as usize].record).filter(|&r| r != NO_RECORD)
    }

    /// Number of free segment records.
    #[cfg(test)]
    pub(crate) fn free_records(&self) -> usize {
        self.free_records.len()
    }

    /// Returns node `i`'s record, if any, to the free list.
    fn release_record(&mut self, i: u32) {
        let n = &mut self.nodes[i as usize];
        if n.record != NO_RECORD {
            self.free_records.push(n.record);
            n.record = NO_RECORD;
        }
    }

    /// Bytes accounted to the directory.
    pub(super) fn used(&self) -> u64 {
        self.used
    }

    /// Number of Ready keys.
    pub(super) fn ready_count(&self) -> usize {
        self.ready
    }

    /// Bytes of one block file.
    pub(super) fn file_bytes(&self) -> u64 {
        self.file_bytes
    }

    /// State and reader count of `key`.
    pub(super) fn get(&self, key: &Key) -> Option<(State, u32)> {
        self.map.get(key).map(|&i| {
            let n = &self.nodes[i as usize];
            (n.state, n.readers)
        })
    }

    /// Counts node `i` in or out of the Ready keys.
    fn count_ready(&mut self, i: u32, ready: bool) {
        let f = self.nodes[i as usize].fanout as usize;
        if ready {
            self.ready += 1;
            self.ready_in_fanout[f] += 1;
        } else {
            self.ready -= 1;
            self.ready_in_fanout[f] -= 1;
        }
    }

    fn unlink(&mut self, i: u32) {
        let (prev, next) = {
            let n = &self.nodes[i as usize];
            (n.prev, n.next)
        };
        if prev == NIL {
            self.head = next;
        } else {
            self.nodes[prev as usize].next = next;
        }
        if next == NIL {
            self.tail = prev;
        } else {
            self.nodes[next as usize].prev = prev;
        }
        let n = &mut self.nodes[i as usize];
        n.prev = NIL;
        n.next = NIL;
    }

    fn push_head(&mut self, i: u32) {
        let old = self.head;
        {
            let n = &mut self.nodes[i as usize];
            n.prev = NIL;
            n.next = old;
        }
        if old == NIL {
            self.tail = i;
        } else {
            self.nodes[old as usize].prev = i;
        }
        self.head = i;
    }

    /// Adds `key` (absent) in `state`, accounting its bytes; a Ready key
    /// becomes the most recent.
    pub(super) fn insert(&mut self, key: Key, state: State) {
        debug_assert!(!self.map.contains_key(&key));
        let node = Node {
            key,
            state,
            readers: 0,
            prev: NIL,
            next: NIL,
            fanout: Layout::fanout_index(&key),
            announced: false,
            record: NO_RECORD,
        };
        let i = match self.free.pop() {
            Some(i) => {
                self.nodes[i as usize] = node;
                i
            }
            None => {
                self.nodes.push(node);
                (self.nodes.len() - 1) as u32
            }
        };
        self.map.insert(key, i);
        self.used += self.file_bytes;
        if state == State::Ready {
            self.count_ready(i, true);
            self.push_head(i);
        }
    }

    /// A Writing key became Ready (most recent).  False if it was not Writing.
    pub(super) fn set_ready(&mut self, key: &Key) -> bool {
        let Some(&i) = self.map.get(key) else {
            return false;
        };
        if self.nodes[i as usize].state != State::Writing {
            return false;
        }
        self.nodes[i as usize].state = State::Ready;
        self.count_ready(i, true);
        self.push_head(i);
        true
    }

    /// Forgets `key`, freeing its bytes (unless already freed at eviction);
    /// returns the state it was in.
    pub(super) fn remove(&mut self, key: &Key) -> Option<State> {
        let i = self.map.remove(key)?;
        let state = self.nodes[i as usize].state;
        match state {
            State::Ready => {
                self.unlink(i);
                self.count_ready(i, false);
                self.used -= self.file_bytes;
            }
            State::Writing => self.used -= self.file_bytes,
            State::Removing => {}
        }
        self.release_record(i);
        self.free.push(i);
        Some(state)
    }

    /// Makes Ready `key` the most recent; other keys are ignored.
    pub(super) fn touch(&mut self, key: &Key) {
        if let Some(&i) = self.map.get(key) {
            if self.nodes[i as usize].state == State::Ready && self.head != i {
                self.unlink(i);
                self.push_head(i);
            }
        }
    }

    /// Adds a reader (a load in flight) to Ready `key`; false if not Ready.
    pub(super) fn add_reader(&mut self, key: &Key) -> bool {
        match self.map.get(key) {
            Some(&i) if self.nodes[i as usize].state == State::Ready => {
                self.nodes[i as usize].readers += 1;
                true
            }
            _ => false,
        }
    }

    /// Drops a reader of `key` (if it is still indexed).
    pub(super) fn drop_reader(&mut self, key: &Key) {
        if let Some(&i) = self.map.get(key) {
            let n = &mut self.nodes[i as usize];
            n.readers = n.readers.saturating_sub(1);
        }
    }

    /// Evicts the least recently used Ready key that no load reads: it
    /// becomes Removing (when `keep_removing`) or is forgotten, and its
    /// bytes are freed.  Walks past keys being read.
    pub(super) fn evict_one(&mut self, keep_removing: bool) -> Option<Key> {
        let mut i = self.tail;
        while i != NIL && self.nodes[i as usize].readers > 0 {
            i = self.nodes[i as usize].prev;
        }
        if i == NIL {
            return None;
        }
        self.unlink(i);
        self.count_ready(i, false);
        self.used -= self.file_bytes;
        let key = self.nodes[i as usize].key;
        if keep_removing {
            self.nodes[i as usize].state = State::Removing;
        } else {
            self.map.remove(&key);
            self.release_record(i);
            self.free.push(i);
        }
        Some(key)
    }

    /// The Ready keys starting with `prefix` that no load reads, into
    /// `idle`; returns how many other indexed keys match (being read or
    /// written: a drop keeps them).  Keys being removed are neither.
    pub(super) fn with_prefix(&self, prefix: &[u8], idle: &mut Vec<Key>) -> u64 {
        let mut busy = 0;
        for n in self.map.values().map(|&i| &self.nodes[i as usize]) {
            if !n.key.as_bytes().starts_with(prefix) {
                continue;
            }
            match n.state {
                State::Ready if n.readers == 0 => idle.push(n.key),
                State::Ready | State::Writing => busy += 1,
                State::Removing => {}
            }
        }
        busy
    }

    /// Makes Ready `key` Removing, its bytes freed, as eviction does, if no
    /// load reads it; false (and nothing changed) otherwise.
    pub(super) fn retire(&mut self, key: &Key) -> bool {
        let Some(&i) = self.map.get(key) else {
            return false;
        };
        if self.nodes[i as usize].state != State::Ready || self.nodes[i as usize].readers > 0 {
            return false;
        }
        self.unlink(i);
        self.count_ready(i, false);
        self.used -= self.file_bytes;
        self.nodes[i as usize].state = State::Removing;
        true
    }

    /// Records that a "stored" event announced `key`.
    pub(super) fn set_announced(&mut self, key: &Key) {
        if let Some(&i) = self.map.get(key) {
            self.nodes[i as usize].announced = true;
        }
    }

    /// Whether a "stored" event announced `key` (false if absent).
    pub(super) fn announced(&self, key: &Key) -> bool {
        self.map
            .get(key)
            .is_some_and(|&i| self.nodes[i as usize].announced)
    }

    /// Forgets that `key` was announced (its "stored" event was dropped).
    pub(super) fn clear_announced(&mut self, key: &Key) {
        if let Some(&i) = self.map.get(key) {
            self.nodes[i as usize].announced = false;
        }
    }

    /// Appends the Ready keys to `out`, least recently used first.
    pub(super) fn ready_keys(&self, out: &mut Vec<Key>) {
        let mut i = self.tail;
        while i != NIL {
            out.push(self.nodes[i as usize].key);
            i = self.nodes[i as usize].prev;
        }
    }

    /// Forgets every Ready key, or those in fan-out directory `fanout`
    /// (their files are known to be gone), freeing their bytes; appends
    /// each with whether it was announced to `out`.  Costs nothing when no
    /// Ready key is concerned, a walk of the Ready keys otherwise.
    pub(super) fn drop_ready(&mut self, fanout: Option<u8>, out: &mut Vec<(Key, bool)>) {
        let concerned = match fanout {
            None => self.ready,
            Some(f) => self.ready_in_fanout[f as usize] as usize,
        };
        if concerned == 0 {
            return;
        }
        let mut i = self.tail;
        while i != NIL {
            let prev = self.nodes[i as usize].prev;
            let n = &self.nodes[i as usize];
            if fanout.is_none_or(|f| n.fanout == f) {
                let (key, announced) = (n.key, n.announced);
                self.remove(&key);
                out.push((key, announced));
            }
            i = prev;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn k(i: u8) -> Key {
        Key::new(&[i]).unwrap()
    }

    #[test]
    fn lru_order_touch_and_readers() {
        let mut ix = Index::new(10);
        for i in 0..4 {
            ix.insert(k(i), State::Ready);
        }
        assert_eq!(ix.used(), 40);
        ix.touch(&k(0));
        assert!(ix.add_reader(&k(1)));
        assert_eq!(ix.evict_one(true), Some(k(2)), "1 is being read");
        assert_eq!(ix.get(&k(2)), Some((State::Removing, 0)));
        assert_eq!(ix.used(), 30);
        assert_eq!(ix.remove(&k(2)), Some(State::Removing));
        assert_eq!(ix.used(), 30);
        assert_eq!(ix.evict_one(false), Some(k(3)));
        assert_eq!(ix.evict_one(false), Some(k(0)));
        assert_eq!(ix.evict_one(false), None, "only the read key is left");
        ix.drop_reader(&k(1));
        assert_eq!(ix.evict_one(false), Some(k(1)));
        assert_eq!((ix.used(), ix.ready_count()), (0, 0));
    }

    #[test]
    fn with_prefix_parts_idle_keys_from_busy_ones() {
        let mut ix = Index::new(10);
        let ab = |a: u8, b: u8| Key::new(&[a, b]).unwrap();
        for i in 0..4 {
            ix.insert(ab(1, i), State::Ready);
        }
        ix.insert(ab(1, 9), State::Writing);
        ix.insert(ab(2, 0), State::Ready);
        assert!(ix.add_reader(&ab(1, 1)));
        assert_eq!(ix.evict_one(true), Some(ab(1, 0)), "1.0 is least recent");
        let mut idle = Vec::new();
        // 1.0 is being removed (neither), 1.1 read and 1.9 written (busy).
        assert_eq!(ix.with_prefix(&[1], &mut idle), 2);
        idle.sort_unstable();
        assert_eq!(idle, vec![ab(1, 2), ab(1, 3)]);
        idle.clear();
        assert_eq!(ix.with_prefix(&[], &mut idle), 2);
        assert_eq!(idle.len(), 3);
    }

    #[test]
    fn dropping_a_fanout_forgets_only_its_ready_keys() {
        let mut ix = Index::new(10);
        let keys: Vec<Key> = (0..40).map(k).collect();
        let f = Layout::fanout_index(&keys[0]);
        for key in &keys {
            ix.insert(*key, State::Ready);
        }
        ix.set_announced(&keys[0]);
        let writing = (0..=255u8)
            .map(|i| Key::new(&[i, 1]).unwrap())
            .find(|key| Layout::fanout_index(key) == f)
            .unwrap();
        ix.insert(writing, State::Writing);
        let in_f = keys
            .iter()
            .filter(|key| Layout::fanout_index(key) == f)
            .count();
        let mut out = Vec::new();
        ix.drop_ready(Some(f), &mut out);
        assert_eq!(out.len(), in_f);
        assert!(out.contains(&(keys[0], true)));
        assert!(out.iter().all(|(key, _)| Layout::fanout_index(key) == f));
        assert_eq!(ix.ready_count(), 40 - in_f);
        assert_eq!(ix.get(&writing), Some((State::Writing, 0)));
        assert_eq!(ix.used(), (40 - in_f as u64 + 1) * 10);
        out.clear();
        ix.drop_ready(Some(f), &mut out);
        assert!(out.is_empty());
        ix.drop_ready(None, &mut out);
        assert_eq!(out.len(), 40 - in_f);
        assert_eq!((ix.ready_count(), ix.used()), (0, 10));
    }

    #[test]
    fn writing_keys_are_not_evictable_until_ready() {
        let mut ix = Index::new(5);
        ix.insert(k(1), State::Writing);
        assert_eq!(ix.used(), 5);
        assert_eq!(ix.evict_one(false), None);
        assert!(!ix.add_reader(&k(1)));
        assert!(ix.set_ready(&k(1)));
        assert!(!ix.set_ready(&k(1)));
        assert_eq!(ix.evict_one(false), Some(k(1)));
        ix.insert(k(2), State::Writing);
        assert_eq!(ix.remove(&k(2)), Some(State::Writing));
        assert_eq!(ix.used(), 0);
    }

    #[test]
    fn records_found_at_restart_stay_theirs_and_the_others_go_out_lowest_first() {
        let mut ix = Index::with_records(100, 6, &[(k(1), 1), (k(2), 4)]).unwrap();
        assert_eq!((ix.record(&k(1)), ix.record(&k(2))), (Some(1), Some(4)));
        assert_eq!(ix.free_records(), 4);
        let mut got = Vec::new();
        for n in 10..14 {
            ix.insert(k(n), State::Writing);
            got.push(ix.assign_record(&k(n)).unwrap());
        }
        assert_eq!(got, [0, 2, 3, 5]);
        ix.insert(k(20), State::Writing);
        assert_eq!(ix.assign_record(&k(20)), None, "no record left");
        // A Ready key, or one that has a record, gets none.
        assert_eq!(ix.assign_record(&k(1)), None);
        assert_eq!(ix.assign_record(&k(10)), None);
        // Removing and evicting give records back.
        ix.remove(&k(11));
        assert_eq!(ix.free_records(), 1);
        assert_eq!(ix.assign_record(&k(10)), None, "one record per key");
        assert_eq!(ix.free_records(), 1);
        assert_eq!(
            ix.evict_one(false),
            Some(k(1)),
            "the least recent found block"
        );
        assert_eq!(ix.free_records(), 2);
        assert_eq!(ix.record(&k(1)), None);
    }
}
