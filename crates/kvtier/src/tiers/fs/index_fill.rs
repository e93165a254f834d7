//! The fs index's restart side: room made ahead, the blocks the
//! background restart scan (or the persisted index's load) finds and the
//! records it frees, the keys in recency order and the records in use at
//! a clean shutdown, and what the index takes on the heap.

use super::{Held, Index, NIL, NO_RECORD, State, hash_of, key_of};
use crate::key::Key;

/// Buckets of a hash table of capacity `cap`: its capacity is 7/8 of
/// them (one less than their number below 8).
fn buckets(cap: usize) -> usize {
    match cap {
        0 => 0,
        1..7 => cap + 1,
        _ => cap / 7 * 8,
    }
}

impl Index {
    /// Makes room in the table for `more` keys beyond those indexed, so
    /// that inserting them never grows (rehashes) it: a restart that knows
    /// how many it will insert.  Their nodes are allocated as they come, a
    /// chunk of a few KiB at a time, never moved (a size class's slab has
    /// at most one chunk partly used).  Fails only when the room cannot be
    /// allocated.
    pub(in crate::tiers::fs) fn reserve(&mut self, more: usize) -> crate::Result<()> {
        let oom = || crate::Error::OutOfMemory(format!("fs tier: an index of {more} more keys"));
        let (nodes, hasher) = (&self.nodes, &self.hasher);
        self.map
            .try_reserve(more, |&i| hash_of(hasher, nodes.key(i)))
            .map_err(|_| oom())
    }

    /// Bytes the index takes on the heap: the capacities of its table and
    /// vectors (not the fixed part of the struct).
    pub(in crate::tiers::fs) fn heap_bytes(&self) -> usize {
        self.heap_parts().iter().sum()
    }

    /// `Index::heap_bytes` by part: the table, the nodes' chunks (they
    /// never move), the lists of chunks and the free list of records.
    pub(in crate::tiers::fs) fn heap_parts(&self) -> [usize; 4] {
        use std::mem::size_of;
        // Each bucket is a u32 and a control byte, and a group of 16
        // control bytes more mirrors the first.
        let buckets = buckets(self.map.capacity());
        let table = if buckets == 0 {
            0
        } else {
            buckets * (size_of::<u32>() + 1) + 16
        };
        let (chunks, lists) = self.nodes.heap_parts();
        [
            table,
            chunks,
            lists,
            self.free_records.capacity() * size_of::<u32>(),
        ]
    }
}

/// What the background restart scan needs of the index (`rebuilding.rs`),
/// and what a clean shutdown persists (the index file, and the segments
/// layout's live map).
impl Index {
    /// Adds `key` (absent) as Ready, found by the restart scan (in segment
    /// record `record`, which the scan never also hands out as free), as
    /// the least recently used key: older than every key stored or used
    /// since the tier opened.  False, and nothing changed, if no node can
    /// be had for it (`Added::NoRoom`).
    #[must_use]
    pub(in crate::tiers::fs) fn insert_found(&mut self, key: Key, record: Option<u32>) -> bool {
        let held = self.held(&key);
        self.insert_found_held(&held, record)
    }

    /// [`Index::insert_found`] of a key as this index holds it (absent).
    #[must_use]
    pub(in crate::tiers::fs) fn insert_found_held(
        &mut self,
        held: &Held,
        record: Option<u32>,
    ) -> bool {
        let added = self.insert_held(held, State::Ready);
        debug_assert!(
            added != super::Added::Present,
            "the key was indexed already"
        );
        if added != super::Added::Yes {
            return false;
        }
        // A Ready key is inserted at the head of the LRU list.
        let i = self.heads[0];
        debug_assert!(self.nodes.key(i) == held.bytes());
        if let Some(r) = record {
            self.edit(i, |n| n.record = r);
        }
        if self.tails[0] != i {
            self.unlink(i);
            let old = self.tails[0];
            self.edit(i, |n| n.prev = old);
            self.edit(old, |n| n.next = i);
            self.tails[0] = i;
        }
        true
    }

    /// Adds segment records known to hold no block to the free list.
    pub(in crate::tiers::fs) fn add_free_records(&mut self, records: &[u32]) {
        self.free_records.extend_from_slice(records);
    }

    /// Appends the Ready keys to `out`, least recently used first (held
    /// keys last).
    #[cfg(test)]
    pub(in crate::tiers::fs) fn ready_keys(&self, out: &mut Vec<Key>) {
        self.ready_walk(|held, _| {
            if let Held::Key(key) = held {
                out.push(*key)
            }
        });
    }

    /// Calls `f` with each Ready key as the index holds it and its segment
    /// record (if any), least recently used first (held keys last).
    pub(in crate::tiers::fs) fn ready_walk(&self, mut f: impl FnMut(&Held, Option<u32>)) {
        for list in 0..2 {
            let mut i = self.tails[list];
            while i != NIL {
                let n = self.node(i);
                let bytes = self.nodes.key(i);
                let held = if self.nodes.is_digest(i) {
                    Held::Digest(bytes.try_into().expect("a digest's bytes"))
                } else {
                    Held::Key(key_of(bytes))
                };
                f(&held, Some(n.record).filter(|&r| r != NO_RECORD));
                i = n.prev;
            }
        }
    }

    /// The segment records of every indexed key, into `out`.
    pub(in crate::tiers::fs) fn records_in_use(&self, out: &mut Vec<u32>) {
        out.extend(
            self.map
                .iter()
                .map(|&i| self.node(i).record)
                .filter(|&r| r != NO_RECORD),
        );
    }
}

#[cfg(test)]
impl Index {
    /// Lets each key size class hold at most `limit` keys, as if its
    /// 2^29 - 1 were reached (tests of a full index).
    pub(in crate::tiers::fs) fn limit_nodes(&mut self, limit: u32) {
        self.nodes.set_limit(limit);
    }
}
