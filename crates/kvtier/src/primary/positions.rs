//! [0.33] Token positions and KV-cache groups of a request's keys, and the
//! order in which a request's finish commits its keys.
//!
//! A caller may give each key of an active request the end-token position
//! of its block ([`PrimaryTier::set_positions`](super::PrimaryTier::set_positions)):
//! one table per request, a later position replacing an earlier one for the
//! same key, kept until the request finishes (a reset keeps it: positions
//! describe the request, not the cache).  Positions are read when they are
//! used: when the request stores a key or first presents a resident one
//! (lru ranks such keys by position, see `lru.rs`), and at its finish.
//!
//! With the KV-group option on, a key ends with a 4-byte big-endian group
//! index (vLLM's `block_hash || u32_be(group)`); otherwise every key is in
//! group 0.
//!
//! Finish order, head first (the tier commits it from the tail, so the
//! head ends most recent): the keys in ascending group index, each group in
//! the order the request first presented its keys, or by position when
//! every key of the group has one; then, when every key of the request has
//! a position, all of them by position (equal positions keep the order
//! just described: ascending group, then first presentation).

use super::slots::key_hash;
use foldhash::fast::RandomState;

use super::slots;
use crate::error::{Error, Result};
use crate::key::{Key, KeyBytes};

/// Bytes of the group index at the end of a key (KV-group option on).
pub(crate) const GROUP_BYTES: usize = 4;

/// The KV-cache group of `key` under the KV-group option: its last 4 bytes,
/// big-endian (keys too short for one, which the tier refuses then, are in
/// group 0).
#[inline]
pub(crate) fn group_of(key: &[u8]) -> u32 {
    match key
        .len()
        .checked_sub(GROUP_BYTES)
        .and_then(|at| key.get(at..))
    {
        Some(&[a, b, c, d]) => u32::from_be_bytes([a, b, c, d]),
        _ => 0,
    }
}

/// With the KV-group option on (`kv_groups`), an error naming the first of
/// keys `key(0..n)` too short to end with a group index (at least one
/// byte and the index: 5 bytes or more); nothing otherwise.  The one rule
/// every call that takes keys applies, in the primary tier and the
/// manager alike.
pub(crate) fn check_group_keys<'k, K: KeyBytes + ?Sized + 'k>(
    kv_groups: bool,
    n: usize,
    key: impl Fn(usize) -> &'k K,
) -> Result<()> {
    if !kv_groups {
        return Ok(());
    }
    match (0..n).find(|&i| key(i).key_bytes().len() <= GROUP_BYTES) {
        Some(index) => Err(Error::InvalidKey {
            index,
            reason: format!(
                "key of {} bytes: with KV groups on, a key is at least 1 byte and a \
                 4-byte group index (5 bytes or more)",
                key(index).key_bytes().len()
            ),
        }),
        None => Ok(()),
    }
}

/// One request's token positions: key -> end-token position.
#[derive(Debug, Default)]
pub(crate) struct Positions {
    entries: Vec<(Key, u64)>,
    /// Indexes into `entries`, hashed over the key bytes (the tier's hasher).
    index: hashbrown::HashTable<u32>,
}

impl Positions {
    /// Whether no key has a position (the path without positions checks
    /// this once per call and does nothing more).
    #[inline]
    pub(crate) fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// The position of `key` (hash `h`), if it has one.
    #[inline]
    pub(crate) fn get(&self, key: &(impl KeyBytes + ?Sized), h: u64) -> Option<u64> {
        if self.entries.is_empty() {
            return None;
        }
        let entries = &self.entries;
        self.index
            .find(h, |&i| slots::same_key(&entries[i as usize].0, key))
            .map(|&i| entries[i as usize].1)
    }

    /// Makes room for `n` more keys, so that as many [`Positions::set`]
    /// calls allocate nothing; fails without changing anything.
    pub(crate) fn reserve(&mut self, hasher: &RandomState, n: usize) -> Result<()> {
        let no_room = |e| Error::OutOfMemory(format!("request positions: {e}"));
        self.entries.try_reserve(n).map_err(no_room)?;
        let entries = &self.entries;
        self.index
            .try_reserve(n, |&i| key_hash(hasher, entries[i as usize].0.as_bytes()))
            .map_err(|_| Error::OutOfMemory("request positions: the table cannot grow".into()))?;
        Ok(())
    }

    /// Gives `key` (hash `h`) `position`, replacing any earlier one.
    pub(crate) fn set(
        &mut self,
        hasher: &RandomState,
        key: &(impl KeyBytes + ?Sized),
        h: u64,
        position: u64,
    ) {
        let entries = &mut self.entries;
        match self
            .index
            .find(h, |&i| slots::same_key(&entries[i as usize].0, key))
        {
            Some(&i) => entries[i as usize].1 = position,
            None => {
                let i = entries.len() as u32;
                entries.push((key.keep_value(), position));
                if let Some(e) = entries.last_mut() {
                    key.keep_finish(&mut e.0);
                }
                let entries = &*entries;
                self.index.insert_unique(h, i, |&j| {
                    key_hash(hasher, entries[j as usize].0.as_bytes())
                });
            }
        }
    }

    /// Forgets every position, keeping buffers of a usual request's size.
    pub(crate) fn clear(&mut self) {
        const KEEP: usize = 4096;
        self.entries.clear();
        self.entries.shrink_to(KEEP);
        self.index.clear();
        if self.index.capacity() > KEEP {
            self.index = hashbrown::HashTable::with_capacity(KEEP);
        }
    }
}

/// One key in the finish order: its group, its position (if `positioned`)
/// and its place in first-presentation order.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Ordered {
    group: u32,
    positioned: bool,
    position: u64,
    /// Index into the request's accesses (first presentation order).
    pub(crate) index: u32,
}

/// Writes into `out` (cleared first) the finish order, head first, of a
/// request's `n` keys `key(0..n)` (in first-presentation order), from
/// `positions` and, if `kv_groups`, their group suffixes (see the module
/// docs).  Sorting allocates nothing: every sort key is unique (it ends
/// with the key's index), so an unstable sort gives the one order.
/// Fails, leaving `out` empty, only if `out` cannot grow to `n`.
pub(crate) fn commit_order<'k>(
    n: usize,
    key: impl Fn(usize) -> &'k Key,
    positions: &Positions,
    hasher: &RandomState,
    kv_groups: bool,
    out: &mut Vec<Ordered>,
) -> Result<()> {
    out.clear();
    out.try_reserve(n)
        .map_err(|e| Error::OutOfMemory(format!("request finish order: {e}")))?;
    let mut every = true;
    for i in 0..n {
        let k = key(i);
        let group = if kv_groups { group_of(k.as_bytes()) } else { 0 };
        let position = positions.get(k, key_hash(hasher, k.as_bytes()));
        every &= position.is_some();
        out.push(Ordered {
            group,
            positioned: position.is_some(),
            position: position.unwrap_or(0),
            index: i as u32,
        });
    }
    if every {
        out.sort_unstable_by_key(|o| (o.position, o.group, o.index));
        return Ok(());
    }
    if kv_groups {
        out.sort_unstable_by_key(|o| (o.group, o.index));
    }
    let mut start = 0;
    while start < out.len() {
        let group = out[start].group;
        let mut end = start;
        let mut all = true;
        while end < out.len() && out[end].group == group {
            all &= out[end].positioned;
            end += 1;
        }
        if all {
            out[start..end].sort_unstable_by_key(|o| (o.position, o.index));
        }
        start = end;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn gk(name: u8, group: u32) -> Key {
        let mut b = vec![name, name];
        b.extend_from_slice(&group.to_be_bytes());
        Key::new(&b).unwrap()
    }

    fn order(keys: &[Key], pos: &[(Key, u64)], groups: bool) -> Vec<Key> {
        let hasher = RandomState::default();
        let mut p = Positions::default();
        p.reserve(&hasher, pos.len()).unwrap();
        for (k, v) in pos {
            p.set(&hasher, k, key_hash(&hasher, k.as_bytes()), *v);
        }
        let mut out = Vec::new();
        commit_order(keys.len(), |i| &keys[i], &p, &hasher, groups, &mut out).unwrap();
        out.iter().map(|o| keys[o.index as usize]).collect()
    }

    #[test]
    fn group_index_is_the_last_four_bytes_big_endian() {
        assert_eq!(group_of(gk(1, 7).as_bytes()), 7);
        assert_eq!(group_of(&[9, 0, 0, 1, 0]), 256);
        assert_eq!(group_of(&[1, 2, 3]), 0);
    }

    #[test]
    fn a_later_position_replaces_an_earlier_one() {
        let hasher = RandomState::default();
        let mut p = Positions::default();
        let k = gk(1, 0);
        let h = key_hash(&hasher, k.as_bytes());
        p.reserve(&hasher, 2).unwrap();
        assert_eq!(p.get(&k, h), None);
        p.set(&hasher, &k, h, 16);
        p.set(&hasher, &k, h, 48);
        assert_eq!(p.get(&k, h), Some(48));
        p.clear();
        assert!(p.is_empty());
    }

    #[test]
    fn without_positions_or_groups_the_first_presentation_order_stays() {
        let keys = [gk(3, 1), gk(1, 0), gk(2, 1)];
        assert_eq!(order(&keys, &[], false), keys.to_vec());
        // One key without a position: no sort.
        let pos = [(keys[1], 16), (keys[2], 32)];
        assert_eq!(order(&keys, &pos, false), keys.to_vec());
    }

    #[test]
    fn every_key_positioned_sorts_by_position_across_groups_ties_by_group() {
        let (h0, t0, h1, t1) = (gk(1, 0), gk(2, 0), gk(3, 1), gk(4, 1));
        let keys = [t1, h1, t0, h0];
        let pos = [(h0, 16), (h1, 16), (t0, 32), (t1, 32)];
        assert_eq!(order(&keys, &pos, true), vec![h0, h1, t0, t1]);
        // Without the group option the tie keeps first presentation.
        assert_eq!(order(&keys, &pos, false), vec![h1, h0, t1, t0]);
    }

    #[test]
    fn groups_ascend_and_each_is_sorted_only_when_all_its_keys_have_positions() {
        let (a0, b0, a1, b1, c1) = (gk(1, 0), gk(2, 0), gk(3, 1), gk(4, 1), gk(5, 1));
        // Presented: group 1 first; group 0 fully positioned, group 1 not.
        let keys = [c1, a1, b0, b1, a0];
        let pos = [(a0, 16), (b0, 32), (a1, 16), (c1, 48)];
        assert_eq!(order(&keys, &pos, true), vec![a0, b0, c1, a1, b1]);
        // Group 1 fully positioned too: now every key is, so by position.
        let pos = [(a0, 16), (b0, 32), (a1, 16), (b1, 32), (c1, 48)];
        assert_eq!(order(&keys, &pos, true), vec![a0, a1, b0, b1, c1]);
    }
}
