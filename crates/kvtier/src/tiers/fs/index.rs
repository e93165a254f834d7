//! The tier's in-memory view of its directory: which keys it holds, in which
//! state, how many bytes they take, and their recency (an intrusive LRU list
//! over the nodes, so touching and evicting allocate nothing, and a store
//! reuses a freed node of its key's size class).  Its restart
//! side (the blocks the persisted index's load or the background scan
//! finds) is in `index_fill.rs`.
//!
//! Each key is kept once, in its node: the hash table holds only node
//! numbers (a `u32` and a control byte per bucket) and hashes a node's key
//! again when it grows.  A node is a 16-byte header (list links, segment
//! record, reader count, state and flags, fan-out directory) and the key
//! in a slot of its size class (`index_slab.rs`): 32 bytes for a key of 9
//! to 16 bytes, 48 for 25 to 32.  With the table's 5 bytes a bucket, 10^6
//! keys cost 34.6 heap bytes each at 8 bytes a key, 42.6 at 16, 58.7 at
//! 32 and 90.8 at 64 (see `Index::heap_bytes`).
//!
//! With key digests (`FsOptions::key_digests`, segments layout only), a
//! key of more than 16 bytes is kept as its 16-byte digest (xxh3-128
//! under a seed the directory keeps in its persisted index), in a 32-byte
//! node: 42.6 heap bytes a block at 10^6 whatever the key's length.  The
//! key itself is in its record's header, which every load checks, so a
//! digest shared by two keys (about 2^-128 a pair) costs a miss, never a
//! wrong block.  Such a node is never announced (the tier has no events
//! then), is forgotten at once when evicted (its record is free), and a
//! drop by a non-empty prefix reads its record's header
//! (`index_held.rs`: how a key is held, found, and parted by prefix).
//!
//! A Ready key held by a pin set leaves the LRU list for a list of its own
//! while held: eviction never meets it (and never walks past it), expiry
//! and drops pass over it, and released it is the most recent again.
//!
//! Owned by the scheduler-side tier object; workers never see it.

use std::hash::{BuildHasher, Hasher as _};

use hashbrown::HashTable;

use super::format::Layout;
use crate::key::{Key, KeyRef};

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

/// What [`Index::insert_new`] did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Added {
    /// The key is indexed now.
    Yes,
    /// It was indexed already (nothing changed).
    Present,
    /// No node could be had for it (nothing changed): its size class
    /// holds 2^29 - 1 keys (about 536 million), or a chunk of nodes more
    /// could not be allocated.  The tier treats it as full.
    NoRoom,
}

const NIL: u32 = u32::MAX;

/// The state's bits of [`Node::flags`] (the flags' four low bits are
/// the index's; the slab keeps a key's length in the others).
const STATE_MASK: u8 = 0b11;
/// A "stored" event announced the key.
const ANNOUNCED: u8 = 1 << 2;
/// Held by a pin set (Ready only): in the held list, not the LRU one.
const HELD: u8 = 1 << 3;

/// A node's header, read out of its slab and written back (its key stays
/// there).
#[derive(Clone, Copy, Debug)]
struct Node {
    prev: u32,
    next: u32,
    /// The key's segment record (segments layout), or [`NO_RECORD`].
    record: u32,
    /// Loads in flight; at most `u16::MAX` (see [`Index::add_reader`]).
    readers: u16,
    /// The state (`STATE_MASK`), `ANNOUNCED` and `HELD`.
    flags: u8,
    /// Number of the key's fan-out directory.
    fanout: u8,
}

impl Node {
    /// A header for `key` in `state`, outside both lists, reading nothing.
    fn new(key: &Held, state: State, record: u32) -> Node {
        let mut node = Node {
            prev: NIL,
            next: NIL,
            record,
            readers: 0,
            flags: 0,
            fanout: key.fanout(),
        };
        node.set_state(state);
        node
    }

    fn state(&self) -> State {
        match self.flags & STATE_MASK {
            0 => State::Writing,
            1 => State::Ready,
            _ => State::Removing,
        }
    }

    fn set_state(&mut self, state: State) {
        let bits = match state {
            State::Writing => 0,
            State::Ready => 1,
            State::Removing => 2,
        };
        self.flags = (self.flags & !STATE_MASK) | bits;
    }

    fn flag(&self, f: u8) -> bool {
        self.flags & f != 0
    }

    fn set_flag(&mut self, f: u8, on: bool) {
        if on {
            self.flags |= f;
        } else {
            self.flags &= !f;
        }
    }

    /// 0 for the LRU list, 1 for the held one.
    fn list(&self) -> usize {
        self.flag(HELD) as usize
    }
}

/// A node without a segment record (files layout, or not assigned yet).
const NO_RECORD: u32 = u32::MAX;

type Hasher = foldhash::fast::RandomState;

/// The hash of a key of `bytes` (as `Key`'s `Hash` writes it).
#[inline(always)]
fn hash_of(hasher: &Hasher, bytes: &[u8]) -> u64 {
    let mut h = hasher.build_hasher();
    h.write(bytes);
    h.finish()
}

/// The key of `bytes`, read out of a node.
fn key_of(bytes: &[u8]) -> Key {
    Key::from(KeyRef::checked(bytes))
}

/// Keys, states, byte accounting and LRU order.
#[derive(Debug)]
pub(super) struct Index {
    /// Node numbers, found by their node's key.
    map: HashTable<u32>,
    hasher: Hasher,
    nodes: slab::Slabs,
    /// Most recently used Ready key of the LRU list (`[0]`) and most
    /// recently held key of the held list (`[1]`).
    heads: [u32; 2],
    /// Least recently used Ready key, and first held key.
    tails: [u32; 2],
    /// Keys held by pin sets.
    held: usize,
    /// Bytes of every key not yet removed from the index (writing, ready,
    /// or removing but not yet accounted as freed).
    used: u64,
    ready: usize,
    /// Ready keys per fan-out directory.
    ready_in_fanout: [u32; 256],
    file_bytes: u64,
    /// Segment records no key holds (segments layout; empty otherwise).
    free_records: Vec<u32>,
    /// With key digests: the seed of every digest.
    digest_seed: Option<u64>,
}

impl Index {
    /// An empty index where every block file takes `file_bytes`.
    pub(super) fn new(file_bytes: u64) -> Index {
        Index {
            map: HashTable::new(),
            hasher: Hasher::default(),
            nodes: slab::Slabs::new(),
            heads: [NIL; 2],
            tails: [NIL; 2],
            held: 0,
            used: 0,
            ready: 0,
            ready_in_fanout: [0; 256],
            file_bytes,
            free_records: Vec::new(),
            digest_seed: None,
        }
    }

    /// Node `i`'s header.
    #[inline(always)]
    fn node(&self, i: u32) -> Node {
        self.nodes.node(i)
    }

    /// Changes node `i`'s header with `f`.
    #[inline(always)]
    fn edit(&mut self, i: u32, f: impl FnOnce(&mut Node)) {
        let mut n = self.nodes.node(i);
        f(&mut n);
        self.nodes.set(i, n);
    }

    /// Gives Writing `key` a free segment record and returns it; `None` if
    /// the key has one already, is not Writing, or no record is free.
    pub(super) fn assign_record(&mut self, key: &Key) -> Option<u32> {
        let i = self.find(key)?;
        let n = self.node(i);
        if n.state() != State::Writing || n.record != NO_RECORD {
            return None;
        }
        let record = self.free_records.pop()?;
        self.edit(i, |n| n.record = record);
        Some(record)
    }

    /// `key`'s segment record, if it has one.
    pub(super) fn record(&self, key: &Key) -> Option<u32> {
        let i = self.find(key)?;
        Some(self.node(i).record).filter(|&r| r != NO_RECORD)
    }

    /// Number of free segment records.
    #[cfg(test)]
    pub(crate) fn free_records(&self) -> usize {
        self.free_records.len()
    }

    /// Returns node `i`'s record, if any, to the free list.
    fn release_record(&mut self, i: u32) {
        let record = self.node(i).record;
        if record != NO_RECORD {
            self.free_records.push(record);
            self.edit(i, |n| n.record = NO_RECORD);
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
        self.find(key).map(|i| {
            let n = self.node(i);
            (n.state(), n.readers.into())
        })
    }

    /// Counts node `i` in or out of the Ready keys.
    fn count_ready(&mut self, i: u32, ready: bool) {
        let f = self.node(i).fanout as usize;
        if ready {
            self.ready += 1;
            self.ready_in_fanout[f] += 1;
        } else {
            self.ready -= 1;
            self.ready_in_fanout[f] -= 1;
        }
    }

    /// Takes node `i` out of its list (the held one if it is held).
    fn unlink(&mut self, i: u32) {
        let n = self.node(i);
        let (prev, next, list) = (n.prev, n.next, n.list());
        if prev == NIL {
            self.heads[list] = next;
        } else {
            self.edit(prev, |p| p.next = next);
        }
        if next == NIL {
            self.tails[list] = prev;
        } else {
            self.edit(next, |n| n.prev = prev);
        }
        self.edit(i, |n| {
            n.prev = NIL;
            n.next = NIL;
        });
    }

    /// Puts node `i` at the head of its list (the held one if it is held).
    fn push_head(&mut self, i: u32) {
        let list = self.node(i).list();
        let old = self.heads[list];
        self.edit(i, |n| {
            n.prev = NIL;
            n.next = old;
        });
        if old == NIL {
            self.tails[list] = i;
        } else {
            self.edit(old, |n| n.prev = i);
        }
        self.heads[list] = i;
    }

    /// Takes node `i` out of the table (its key still in the node).
    fn unmap(&mut self, i: u32) {
        let h = hash_of(&self.hasher, self.nodes.key(i));
        if let Ok(entry) = self.map.find_entry(h, |&j| j == i) {
            entry.remove();
        }
    }

    /// Adds `key` (absent) in `state`, accounting its bytes; a Ready key
    /// becomes the most recent.  False, and nothing changed, if no node
    /// can be had for it (see [`Added::NoRoom`]).
    #[must_use]
    pub(super) fn insert(&mut self, key: Key, state: State) -> bool {
        let added = self.insert_new(key, state);
        debug_assert!(added != Added::Present, "the key was indexed already");
        added == Added::Yes
    }

    /// [`Index::insert`] if `key` is absent (one probe of the table);
    /// nothing changed if it is indexed already or no node can be had.
    pub(super) fn insert_new(&mut self, key: Key, state: State) -> Added {
        let held = self.held(&key);
        self.insert_held(&held, state)
    }

    /// [`Index::insert_new`] of a key as this index holds it.
    pub(super) fn insert_held(&mut self, held: &Held, state: State) -> Added {
        let (bytes, digest) = (held.bytes(), held.is_digest());
        debug_assert!(
            !matches!(held, Held::Key(k) if self.digest_seed.is_some() && k.len() > DIGEST_LEN),
            "a key this index keeps as a digest, given whole"
        );
        let h = hash_of(&self.hasher, bytes);
        let Index {
            map, nodes, hasher, ..
        } = self;
        let entry = map.entry(
            h,
            |&i| nodes.key(i) == bytes && nodes.is_digest(i) == digest,
            |&i| hash_of(hasher, nodes.key(i)),
        );
        let hashbrown::hash_table::Entry::Vacant(slot) = entry else {
            return Added::Present;
        };
        let Some(i) = nodes.alloc(bytes, digest, Node::new(held, state, NO_RECORD)) else {
            return Added::NoRoom;
        };
        slot.insert(i);
        self.used += self.file_bytes;
        if state == State::Ready {
            self.count_ready(i, true);
            self.push_head(i);
        }
        Added::Yes
    }

    /// A Writing key became Ready (most recent).  False if it was not Writing.
    pub(super) fn set_ready(&mut self, key: &Key) -> bool {
        let Some(i) = self.find(key) else {
            return false;
        };
        if self.node(i).state() != State::Writing {
            return false;
        }
        self.edit(i, |n| n.set_state(State::Ready));
        self.count_ready(i, true);
        self.push_head(i);
        true
    }

    /// Forgets `key`, freeing its bytes (unless already freed at eviction);
    /// returns the state it was in.
    pub(super) fn remove(&mut self, key: &Key) -> Option<State> {
        let i = self.find(key)?;
        Some(self.remove_node(i))
    }

    fn remove_node(&mut self, i: u32) -> State {
        self.unmap(i);
        let state = self.node(i).state();
        match state {
            State::Ready => {
                self.unlink(i);
                self.count_ready(i, false);
                self.used -= self.file_bytes;
            }
            State::Writing => self.used -= self.file_bytes,
            State::Removing => {}
        }
        if self.node(i).flag(HELD) {
            self.held -= 1;
        }
        self.release_record(i);
        self.nodes.release(i);
        state
    }

    /// Makes Ready `key` the most recent; other keys (and held ones) are
    /// ignored.
    pub(super) fn touch(&mut self, key: &Key) {
        if let Some(i) = self.find(key) {
            let n = self.node(i);
            if n.state() == State::Ready && !n.flag(HELD) && self.heads[0] != i {
                self.unlink(i);
                self.push_head(i);
            }
        }
    }

    /// Adds a reader (a load in flight) to Ready `key`; false if not
    /// Ready, or if it has `u16::MAX` readers already (the load then
    /// takes the key as absent, as for a key not Ready).
    pub(super) fn add_reader(&mut self, key: &Key) -> bool {
        match self.find(key) {
            Some(i) => {
                let n = self.node(i);
                if n.state() != State::Ready || n.readers == u16::MAX {
                    return false;
                }
                self.edit(i, |n| n.readers += 1);
                true
            }
            None => false,
        }
    }

    /// Drops a reader of `key` (if it is still indexed).
    pub(super) fn drop_reader(&mut self, key: &Key) {
        if let Some(i) = self.find(key) {
            self.edit(i, |n| n.readers = n.readers.saturating_sub(1));
        }
    }

    /// Evicts the least recently used Ready key that no load reads and no
    /// pin set holds: it becomes Removing (when `keep_removing`) or is
    /// forgotten, and its bytes are freed.  Walks past keys being read.
    /// A key kept as a digest is forgotten at once (its segment record is
    /// free; nothing is left to remove) and comes back as a key of the
    /// digest's bytes, never announced.
    pub(super) fn evict_one(&mut self, keep_removing: bool) -> Option<Key> {
        let mut i = self.tails[0];
        while i != NIL {
            let n = self.node(i);
            if n.readers == 0 {
                break;
            }
            i = n.prev;
        }
        if i == NIL {
            return None;
        }
        self.unlink(i);
        self.count_ready(i, false);
        self.used -= self.file_bytes;
        let key = key_of(self.nodes.key(i));
        if keep_removing && !self.nodes.is_digest(i) {
            self.edit(i, |n| n.set_state(State::Removing));
        } else {
            self.unmap(i);
            self.release_record(i);
            self.nodes.release(i);
        }
        Some(key)
    }

    /// Makes Ready `key` Removing, its bytes freed, as eviction does, if no
    /// load reads it and no pin set holds it; false (and nothing changed)
    /// otherwise.
    pub(super) fn retire(&mut self, key: &Key) -> bool {
        let Some(i) = self.find(key) else {
            return false;
        };
        let n = self.node(i);
        if n.state() != State::Ready || n.readers > 0 || n.flag(HELD) {
            return false;
        }
        self.unlink(i);
        self.count_ready(i, false);
        self.used -= self.file_bytes;
        self.edit(i, |n| n.set_state(State::Removing));
        true
    }

    /// Holds Ready `key` for a pin set (out of eviction's reach): true if
    /// it is held now (also when it already was), false if it is not
    /// Ready (nothing changed).
    pub(super) fn hold(&mut self, key: &Key) -> bool {
        let Some(i) = self.find(key) else {
            return false;
        };
        let n = self.node(i);
        if n.state() != State::Ready {
            return false;
        }
        if !n.flag(HELD) {
            self.unlink(i);
            self.edit(i, |n| n.set_flag(HELD, true));
            self.push_head(i);
            self.held += 1;
        }
        true
    }

    /// Releases a pin set's hold of `key`: it is the most recent Ready key
    /// again.  True if it was held.
    pub(super) fn release_hold(&mut self, key: &Key) -> bool {
        let Some(i) = self.find(key) else {
            return false;
        };
        if !self.node(i).flag(HELD) {
            return false;
        }
        self.unlink(i);
        self.edit(i, |n| n.set_flag(HELD, false));
        self.push_head(i);
        self.held -= 1;
        true
    }

    /// Whether a pin set holds `key`.
    pub(super) fn is_held(&self, key: &Key) -> bool {
        self.find(key).is_some_and(|i| self.node(i).flag(HELD))
    }

    /// Number of keys pin sets hold.
    pub(super) fn held_count(&self) -> usize {
        self.held
    }

    /// Records that a "stored" event announced `key`.
    pub(super) fn set_announced(&mut self, key: &Key) {
        if let Some(i) = self.find(key) {
            self.edit(i, |n| n.set_flag(ANNOUNCED, true));
        }
    }

    /// Whether a "stored" event announced `key` (false if absent).
    pub(super) fn announced(&self, key: &Key) -> bool {
        self.find(key).is_some_and(|i| self.node(i).flag(ANNOUNCED))
    }

    /// Forgets that `key` was announced (its "stored" event was dropped).
    pub(super) fn clear_announced(&mut self, key: &Key) {
        if let Some(i) = self.find(key) {
            self.edit(i, |n| n.set_flag(ANNOUNCED, false));
        }
    }

    /// Whether a key is being written or removed (its file may be half
    /// there, or still there though the index let it go).
    pub(super) fn any_in_flight(&self) -> bool {
        self.map.len() > self.ready
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
        // Held keys too: their files are gone all the same.
        for list in 0..2 {
            let mut i = self.tails[list];
            while i != NIL {
                let n = self.node(i);
                if fanout.is_none_or(|f| n.fanout == f) {
                    let key = key_of(self.nodes.key(i));
                    self.remove_node(i);
                    out.push((key, n.flag(ANNOUNCED)));
                }
                i = n.prev;
            }
        }
    }
}

#[path = "index_fill.rs"]
mod fill;

#[path = "index_held.rs"]
mod held;
#[cfg(test)]
use held::digest_of;
pub(super) use held::{DIGEST_LEN, Held};

#[path = "index_slab.rs"]
mod slab;

#[cfg(test)]
#[path = "index_tests.rs"]
mod tests;

#[cfg(test)]
#[path = "index_digest_tests.rs"]
mod digest_tests;
