//! How the fs index holds a key: whole, or with key digests (a key of
//! more than [`DIGEST_LEN`] bytes as its digest), and the calls that
//! find a key or a digest, and part the keys under a prefix.

use super::{HELD, Index, Layout, NO_RECORD, State, hash_of, key_of};
use crate::key::Key;

/// Bytes of a key digest.
pub(in crate::tiers::fs) const DIGEST_LEN: usize = 16;

/// A key of more than [`DIGEST_LEN`] bytes as an index with key digests
/// keeps it.
pub(in crate::tiers::fs) type Digest = [u8; DIGEST_LEN];

/// The digest of `key` under `seed`: its 128-bit xxh3.
pub(in crate::tiers::fs) fn digest_of(seed: u64, key: &[u8]) -> Digest {
    twox_hash::XxHash3_128::oneshot_with_seed(seed, key).to_le_bytes()
}

/// A key as the index holds it: whole, or (with key digests, for a key
/// of more than [`DIGEST_LEN`] bytes) as its digest.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub(in crate::tiers::fs) enum Held {
    Key(Key),
    Digest(Digest),
}

impl Held {
    /// The bytes the index keeps: the key's, or the digest.
    pub(in crate::tiers::fs) fn bytes(&self) -> &[u8] {
        match self {
            Held::Key(k) => k.as_bytes(),
            Held::Digest(d) => d,
        }
    }

    pub(super) fn is_digest(&self) -> bool {
        matches!(self, Held::Digest(_))
    }

    /// Its fan-out directory (files layout, where keys are whole; 0 for
    /// a digest).
    pub(super) fn fanout(&self) -> u8 {
        match self {
            Held::Key(k) => Layout::fanout_index(k),
            Held::Digest(_) => 0,
        }
    }
}

impl Index {
    /// An empty index keeping keys of more than [`DIGEST_LEN`] bytes as
    /// their digests under `seed` (made odd: a persisted index says "no
    /// digests" with 0).
    pub(in crate::tiers::fs) fn with_digests(file_bytes: u64, seed: u64) -> Index {
        Index {
            digest_seed: Some(seed | 1),
            ..Index::new(file_bytes)
        }
    }

    /// The seed of the digests, if the index keeps them.
    pub(in crate::tiers::fs) fn digest_seed(&self) -> Option<u64> {
        self.digest_seed
    }

    /// The digest this index keeps for `key`, if it keeps one (with
    /// digests, for a key of more than [`DIGEST_LEN`] bytes).
    #[inline]
    fn digest_kept(&self, key: &Key) -> Option<Digest> {
        let seed = self.digest_seed?;
        (key.len() > DIGEST_LEN).then(|| digest_of(seed, key.as_bytes()))
    }

    /// `key` as this index holds it.
    #[inline]
    pub(in crate::tiers::fs) fn held(&self, key: &Key) -> Held {
        self.digest_kept(key).map_or(Held::Key(*key), Held::Digest)
    }

    /// Node number of `key`.
    #[inline]
    pub(super) fn find(&self, key: &Key) -> Option<u32> {
        match self.digest_kept(key) {
            Some(d) => self.find_bytes(&d, true),
            None => self.find_bytes(key.as_bytes(), false),
        }
    }

    /// Node number of the key held as `bytes` (a digest if `digest`).
    #[inline]
    pub(super) fn find_bytes(&self, bytes: &[u8], digest: bool) -> Option<u32> {
        let h = hash_of(&self.hasher, bytes);
        let nodes = &self.nodes;
        self.map
            .find(h, |&i| {
                nodes.key(i) == bytes && nodes.is_digest(i) == digest
            })
            .copied()
    }

    /// Node number of `held`.
    pub(super) fn find_held(&self, held: &Held) -> Option<u32> {
        self.find_bytes(held.bytes(), held.is_digest())
    }

    /// [`Index::remove`] of a key as this index holds it.
    pub(in crate::tiers::fs) fn remove_held(&mut self, held: &Held) -> Option<State> {
        let i = self.find_held(held)?;
        Some(self.remove_node(i))
    }

    /// State of the key held as `held`, and whether a load reads it or a
    /// pin set holds it.
    pub(in crate::tiers::fs) fn held_state(&self, held: &Held) -> Option<(State, bool)> {
        let n = self.node(self.find_held(held)?);
        Some((n.state(), n.readers > 0 || n.flag(HELD)))
    }

    /// The Ready keys starting with `prefix` that no load reads and no pin
    /// set holds, into `idle`; returns how many other indexed keys match
    /// (being read, written or held: a drop keeps them).  Keys being
    /// removed are neither.  A key kept as a digest matches an empty
    /// prefix only: under another, its Ready ones go to `unsure` (with
    /// their records), for the caller to read their keys from the records'
    /// headers (those being written are not counted).
    pub(in crate::tiers::fs) fn with_prefix(
        &self,
        prefix: &[u8],
        idle: &mut Vec<Held>,
        unsure: &mut Vec<(Digest, u32)>,
    ) -> u64 {
        let mut busy = 0;
        for &i in self.map.iter() {
            let bytes = self.nodes.key(i);
            let n = self.node(i);
            let held = if self.nodes.is_digest(i) {
                let d: Digest = bytes.try_into().expect("a digest's bytes");
                if !prefix.is_empty() {
                    if n.state() == State::Ready && n.record != NO_RECORD {
                        unsure.push((d, n.record));
                    }
                    continue;
                }
                Held::Digest(d)
            } else if bytes.starts_with(prefix) {
                Held::Key(key_of(bytes))
            } else {
                continue;
            };
            match n.state() {
                State::Ready if n.readers == 0 && !n.flag(HELD) => idle.push(held),
                State::Ready | State::Writing => busy += 1,
                State::Removing => {}
            }
        }
        busy
    }
}
