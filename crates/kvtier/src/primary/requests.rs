//! What a request records, and its finish.  An active request records
//! each key it stores or loads once, at its first presentation (in
//! [`RequestRecord`], buffers reused by later requests); the token
//! positions the caller gives its keys are kept with it; at
//! [`PrimaryTier::request_finished`] its accesses are committed to the
//! policy, in the order positions and KV groups give.  The record also
//! counts, per key, the pins the request's loads hold: a request that
//! finishes with some keeps its record for their `complete_load`.

use super::slots::key_hash;

use super::access_index::AccessIndex;
use super::hints::Hints;
use super::lists::NIL;
use super::policy::Policy;
use super::reorder::LINKS_AHEAD;
#[cfg(doc)]
use super::reorder::{request_links_at, request_links_first};
use super::slots::{self, Slots};
use super::{PolicyKind, PrimaryTier, positions, unknown};
use crate::error::{Error, Result};
use crate::fallible;
use crate::key::{Key, KeyBatch, KeyBytes, with_keys};
use crate::request::RequestId;

/// One active request's accesses, committed at its finish.
#[derive(Debug)]
pub(super) struct RequestRecord {
    /// Distinct keys stored or loaded, in first-presentation order.
    pub(super) accesses: Vec<Access>,
    /// Positions in `accesses`, by key hash: each key is recorded once,
    /// so the log is bounded by the request's distinct keys however often
    /// it presents them.  Emptied in O(1) for the next request that reuses
    /// the record (`access_index.rs`).
    pub(super) seen: AccessIndex,
    /// Store candidates this request offered (the policy learns from each
    /// once per request: ARC's store-miss adaptation).
    pub(super) adapted: Vec<Key>,
    /// [0.33] The token positions the caller gave the request's keys.
    pub(super) positions: positions::Positions,
    /// The policy's handle on the request's rank ([`NIL`]: none in this
    /// cache generation).
    pub(super) rank: u32,
    /// Where the request's latest lookup found its hits.
    pub(super) hints: Hints,
    /// Pins its `prepare_load` calls took and its `complete_load` calls
    /// have not released yet (the sum of its accesses' `pins`): while any
    /// remain, a finished request is kept for its late `complete_load`.
    pub(super) pins: u64,
}

impl Default for RequestRecord {
    fn default() -> Self {
        RequestRecord {
            accesses: Vec::new(),
            seen: AccessIndex::default(),
            adapted: Vec::new(),
            positions: positions::Positions::default(),
            rank: NIL,
            hints: Hints::default(),
            pins: 0,
        }
    }
}

/// One key a request stored or loaded.
#[derive(Debug, Clone, Copy)]
pub(super) struct Access {
    pub(super) key: Key,
    /// The key's hash (the tier's hasher).
    pub(super) h: u64,
    /// The slot the key had at its latest presentation: where the commit
    /// looks first (checked there, as the key may have left since).
    pub(super) slot: u32,
    /// Loaded, or found ready at store, by a presentation before the
    /// request inserted the key itself.
    pub(super) reused: bool,
    /// Put in the tier by one of the request's stores.
    pub(super) inserted: bool,
    /// Pins of the key that the request's loads took and have not
    /// released yet.
    pub(super) pins: u32,
}

impl RequestRecord {
    /// Records one access of `key` (hash `h` under the tier's hasher, now in `slot`):
    /// appended at its first presentation, else its slot updated and, if
    /// `reused` and the request did not insert the key itself, marked
    /// reused.  Returns the entry's index and whether it is new.  O(1);
    /// allocates only when the request's distinct keys outgrow the
    /// record's buffers (which are reused by later requests).
    #[inline(always)]
    pub(super) fn record(
        &mut self,
        key: &(impl KeyBytes + ?Sized),
        h: u64,
        slot: u32,
        reused: bool,
    ) -> (u32, bool) {
        // One probe finds the key or the place to add it.  (The callers
        // reserved room for the call's keys: the probe never grows the
        // table.)
        let accesses = &mut self.accesses;
        match self
            .seen
            .find_or_place(h, |i| same_access(&accesses[i as usize], key, h))
        {
            Ok(i) => {
                let a = &mut accesses[i as usize];
                a.reused |= reused && !a.inserted;
                a.slot = slot;
                (i, false)
            }
            Err(at) => {
                let i = accesses.len() as u32;
                accesses.push(Access {
                    key: key.keep_value(),
                    h,
                    slot,
                    reused,
                    inserted: false,
                    pins: 0,
                });
                if let Some(a) = accesses.last_mut() {
                    key.keep_finish(&mut a.key);
                }
                self.seen.put(at, i);
                (i, true)
            }
        }
    }

    /// Counts one more pin of access `i`, taken by one of the request's loads.
    #[inline]
    pub(super) fn add_pin(&mut self, i: u32) {
        self.accesses[i as usize].pins += 1;
        self.pins += 1;
    }

    /// Releases one of the request's pins of `key` (hash `h`): false,
    /// nothing changed, if it holds none.  O(1).
    #[inline]
    pub(super) fn release_pin(&mut self, key: &(impl KeyBytes + ?Sized), h: u64) -> bool {
        let accesses = &mut self.accesses;
        match self
            .seen
            .find(h, |i| same_access(&accesses[i as usize], key, h))
        {
            Some(i) if accesses[i as usize].pins > 0 => {
                accesses[i as usize].pins -= 1;
                self.pins -= 1;
                true
            }
            _ => false,
        }
    }

    /// [`RequestRecord::release_pin`] that first tries access `*next`,
    /// then leaves in `*next` the index after the key's access: a load's
    /// keys were usually recorded one after another, in the order its
    /// completion names them, so the guess spares most keys a probe of
    /// the table, and the hash (`hash()`, asked only for a probe).  (A
    /// key has one access at most, so a guess holding the key is the
    /// access the table names.)  Returns the access whose pin it
    /// released, if any ([`RequestRecord::restore_at`] gives it back).
    #[inline]
    pub(super) fn release_pin_after(
        &mut self,
        key: &(impl KeyBytes + ?Sized),
        hash: impl FnOnce() -> u64,
        next: &mut usize,
    ) -> Option<u32> {
        let accesses = &mut self.accesses;
        let found = match accesses.get(*next) {
            Some(a) if slots::same_key(&a.key, key) => Some(*next),
            _ => {
                let h = hash();
                self.seen
                    .find(h, |i| same_access(&accesses[i as usize], key, h))
                    .map(|i| i as usize)
            }
        };
        let i = found?;
        *next = i + 1;
        match accesses.get_mut(i) {
            Some(a) if a.pins > 0 => {
                a.pins -= 1;
                self.pins -= 1;
                Some(i as u32)
            }
            _ => None,
        }
    }

    /// Gives back the pin of access `i` that
    /// [`RequestRecord::release_pin_after`] released.
    #[inline]
    pub(super) fn restore_at(&mut self, i: u32) {
        if let Some(a) = self.accesses.get_mut(i as usize) {
            a.pins += 1;
            self.pins += 1;
        }
    }

    /// Gives back a pin of `key` that [`RequestRecord::release_pin`]
    /// released.
    #[inline]
    pub(super) fn restore_pin(&mut self, key: &(impl KeyBytes + ?Sized), h: u64) {
        let accesses = &mut self.accesses;
        if let Some(i) = self
            .seen
            .find(h, |i| same_access(&accesses[i as usize], key, h))
        {
            accesses[i as usize].pins += 1;
            self.pins += 1;
        }
    }

    /// Forgets every access, keeping buffers of a usual request's size
    /// (one huge request must not make every later one carry its
    /// buffers), and the rank handle (the policy gave the rank back or
    /// forgot it).  Positions stay (see [`RequestRecord::clear`]).
    pub(super) fn forget_accesses(&mut self) {
        const KEEP: usize = 4096;
        self.accesses.clear();
        self.accesses.shrink_to(KEEP);
        self.seen.clear();
        self.adapted.clear();
        self.rank = NIL;
        self.hints.clear();
        self.pins = 0;
    }

    /// Forgets everything, positions included, for reuse by a later request.
    pub(super) fn clear(&mut self) {
        self.forget_accesses();
        self.positions.clear();
    }
}

/// Whether access `a` is of `key` (hash `h`): hashes first, then bytes.
#[inline(always)]
fn same_access(a: &Access, key: &(impl KeyBytes + ?Sized), h: u64) -> bool {
    a.h == h && slots::same_key(&a.key, key)
}

impl PrimaryTier {
    /// [0.33] Gives keys of active request `req` their token positions:
    /// `positions[i]` is the end-token position of the block of `keys[i]`
    /// (block `i` of a request of 16-token blocks ends at 16 x (i + 1)).  A
    /// later position replaces an earlier one for the same key.  Callable
    /// before the request's first call or between its calls; positions are
    /// read when used, and kept until the request finishes (a reset keeps
    /// them).  With lru, a key with a position that the request stores, or
    /// first presents while resident, ranks within the request's rank,
    /// tail below head; at the finish, positions order the commit (see
    /// [`PrimaryTier::request_finished`]).
    ///
    /// Errors, nothing changed: `UnknownRequest`; `InvalidArgument` if the
    /// slices differ in length; `InvalidKey` (with KV groups on) for a key
    /// too short to carry a group; `OutOfMemory` if memory runs out.  The first
    /// position given to the tier prepares it for positions once (lru: 16
    /// bytes more per slot, and one pass over its list).
    pub fn set_positions<'k>(
        &mut self,
        req: RequestId,
        keys: impl Into<KeyBatch<'k>>,
        positions: &[u64],
    ) -> Result<()> {
        let keys = keys.into();
        if keys.len() != positions.len() {
            return Err(Error::InvalidArgument(format!(
                "set_positions: {} keys but {} positions",
                keys.len(),
                positions.len()
            )));
        }
        with_keys!(keys, |k| self.set_positions_each(
            req,
            k.len(),
            |j| &k[j],
            |j| positions[j]
        ))
    }

    /// [`PrimaryTier::set_positions`] of keys `key(0..n)` with positions
    /// `position(0..n)`.
    fn set_positions_each<'k, K: KeyBytes + ?Sized + 'k>(
        &mut self,
        req: RequestId,
        n: usize,
        key: impl Fn(usize) -> &'k K,
        position: impl Fn(usize) -> u64,
    ) -> Result<()> {
        if !self.requests.contains_key(&req) {
            return Err(unknown(req));
        }
        self.check_group_keys(n, &key)?;
        if n == 0 {
            return Ok(());
        }
        self.policy.use_positions()?;
        let hasher = &self.slots.hasher;
        let record = self.requests.get_mut(&req).ok_or_else(|| unknown(req))?;
        record.positions.reserve(hasher, n)?;
        for j in 0..n {
            let k = key(j);
            let h = key_hash(hasher, k.key_bytes());
            record.positions.set(hasher, k, h, position(j));
        }
        Ok(())
    }

    /// Makes room, fallibly, in request `req`'s record for `n` more keys;
    /// an unknown request is an error.
    pub(super) fn reserve_record(&mut self, req: RequestId, n: usize) -> Result<()> {
        let arc = self.config.policy == PolicyKind::Arc;
        let r = self.requests.get_mut(&req).ok_or_else(|| unknown(req))?;
        let what = "the request's record of its keys";
        fallible::reserve(&mut r.accesses, n, what)?;
        let accesses = &r.accesses;
        let total = accesses.len().saturating_add(n);
        r.seen.reserve(total, |i| accesses[i as usize].h, what)?;
        if arc {
            fallible::reserve(&mut r.adapted, n, what)?;
        }
        Ok(())
    }

    /// [0.33] Commits `req`'s accesses and ends it: every key it stored or
    /// loaded that is still resident gets one access, its head most recent.
    ///
    /// Head to tail is the order in which the request first presented its
    /// keys, unless positions or KV groups say otherwise: the keys in
    /// ascending group index (with [`PrimaryConfig::kv_groups`](super::PrimaryConfig::kv_groups)), each
    /// group by position when every key of the group has one; and when
    /// every key of the request has a position, all of them by position
    /// (ties: ascending group, then first presentation).  lru gives the
    /// keys fresh ranks from the tail to the head; arc moves the keys the
    /// request reused (loaded, or found ready at store, before inserting
    /// them itself) to T2's most recent end, refreshes within its list a
    /// key the request only inserted, and leaves other keys alone.
    ///
    /// [0.33] Keys the request pinned with [`PrimaryTier::prepare_load`]
    /// and has not released stay pinned: an aborted request may finish
    /// while its load is still in flight.  Its id then stays known to
    /// [`PrimaryTier::complete_load`] alone, which releases those pins and
    /// no other, and is forgotten with the last of them (or at a reset);
    /// until then [`PrimaryTier::request_begin`] refuses the id.
    pub fn request_finished(&mut self, req: RequestId) -> Result<()> {
        let Some(r) = self.requests.get(&req) else {
            return Err(unknown(req));
        };
        let ordered = if r.positions.is_empty() && !self.config.kv_groups {
            false
        } else {
            let accesses = &r.accesses;
            positions::commit_order(
                accesses.len(),
                |i| &accesses[i].key,
                &r.positions,
                &self.slots.hasher,
                self.config.kv_groups,
                &mut self.scratch_order,
            )?;
            true
        };
        if r.pins > 0 {
            self.finished_loads.try_reserve(1).map_err(|_| {
                fallible::out_of_memory::<RequestRecord>("the finished requests' loads", 1)
            })?;
        }
        let mut record = self.requests.remove(&req).ok_or_else(|| unknown(req))?;
        // From the request's tail to its head.
        let accesses = &record.accesses;
        let n = accesses.len();
        let (slots, policy) = (&self.slots, &mut self.policy);
        if ordered {
            let order = &self.scratch_order[..n];
            let seq = order.iter().rev().map(|o| &accesses[o.index as usize]);
            commit_accesses(slots, &mut *policy, seq);
        } else {
            commit_accesses(slots, &mut *policy, accesses.iter().rev());
        }
        policy.end_request(&mut record.rank);
        for key in record.adapted.drain(..) {
            self.adapted.remove(&(req, key));
        }
        if record.pins > 0 {
            // Kept, for its `complete_load` only, until its last pin goes
            // (room reserved above).
            self.finished_loads.insert(req, record);
        } else {
            record.clear();
            self.spare_records.push(record);
        }
        Ok(())
    }
}

/// Commits the accesses `seq` yields (tail first) of a finishing
/// request: each key is looked for first in the slot it had when
/// recorded; on a table that reads ahead, that slot's record and policy
/// lines are requested ahead (as
/// [`request_links_first`] and [`request_links_at`] do, by position).
/// Iterators that walk ahead of the commit, rather than indexing, spare
/// the bounds checks of every look ahead.
#[inline]
fn commit_accesses<'a>(
    slots: &Slots,
    policy: &mut impl Policy,
    seq: impl Iterator<Item = &'a Access> + Clone,
) {
    if !slots.read_ahead {
        for a in seq {
            commit_access(slots, &mut *policy, a);
        }
        return;
    }
    for a in seq.clone().take(LINKS_AHEAD) {
        slots.prefetch_slot(a.slot, a.key.len());
    }
    for a in seq.clone().take(LINKS_AHEAD) {
        policy.prefetch_links(a.slot);
    }
    for a in seq.clone().take(LINKS_AHEAD / 2) {
        policy.prefetch_neighbours(a.slot);
    }
    let mut far = seq.clone().skip(LINKS_AHEAD);
    let mut near = seq.clone().skip(LINKS_AHEAD / 2);
    for a in seq {
        if let Some(b) = far.next() {
            slots.prefetch_slot(b.slot, b.key.len());
            policy.prefetch_links(b.slot);
        }
        if let Some(b) = near.next() {
            policy.prefetch_neighbours(b.slot);
        }
        commit_access(slots, &mut *policy, a);
    }
}

/// Commits access `a`: its key, looked for first in the slot it had when
/// recorded, gets its access if still resident.
#[inline(always)]
fn commit_access(slots: &Slots, policy: &mut impl Policy, a: &Access) {
    let s = if slots.holds(a.slot, &a.key) {
        a.slot
    } else {
        slots.find(&a.key, a.h).unwrap_or(NIL)
    };
    if s != NIL {
        policy.commit(slots, s, a.reused, a.inserted);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use foldhash::fast::RandomState;

    /// A record of keys 0..4, key `i` recorded at slot `i` with `i % 2 + 1`
    /// pins.
    /// Makes room in `r` for `n` more keys, as `reserve_record` does.
    fn room(r: &mut RequestRecord, n: usize) {
        let accesses = &r.accesses;
        let total = accesses.len() + n;
        r.seen
            .reserve(total, |i| accesses[i as usize].h, "test")
            .unwrap();
    }

    /// Records `keys` (key `i` at slot `i`), returning which were new.
    fn record_all(r: &mut RequestRecord, hasher: &RandomState, keys: &[Key]) -> Vec<bool> {
        room(r, keys.len());
        keys.iter()
            .enumerate()
            .map(|(i, k)| {
                r.record(k, key_hash(hasher, k.as_bytes()), i as u32, false)
                    .1
            })
            .collect()
    }

    fn pinned_record(hasher: &RandomState, keys: &[Key]) -> RequestRecord {
        let mut r = RequestRecord::default();
        room(&mut r, keys.len());
        for (i, k) in keys.iter().enumerate() {
            let (at, new) = r.record(k, key_hash(hasher, k.as_bytes()), i as u32, true);
            assert!(new);
            for _ in 0..i % 2 + 1 {
                r.add_pin(at);
            }
        }
        r
    }

    fn pins(r: &RequestRecord) -> (Vec<u32>, u64) {
        (r.accesses.iter().map(|a| a.pins).collect(), r.pins)
    }

    #[test]
    fn a_guessed_release_takes_the_pin_the_table_names() {
        let hasher = RandomState::default();
        let keys: Vec<Key> = (0..4u8).map(|i| Key::new(&[i, 7]).unwrap()).collect();
        let absent = Key::new(&[9, 9]).unwrap();
        // In recording order, reversed, skipping, repeating (past the
        // pins held), with a key never recorded (index 4).
        let orders: [&[usize]; 5] = [
            &[0, 1, 2, 3],
            &[3, 2, 1, 0],
            &[1, 3, 0],
            &[0, 0, 1, 1, 1, 2],
            &[4, 0, 4, 1, 3, 4],
        ];
        for order in orders {
            let mut guessed = pinned_record(&hasher, &keys);
            let mut probed = pinned_record(&hasher, &keys);
            let mut next = usize::MAX;
            for &j in order {
                let k = keys.get(j).unwrap_or(&absent);
                let h = key_hash(&hasher, k.as_bytes());
                assert_eq!(
                    guessed.release_pin_after(k, || h, &mut next).is_some(),
                    probed.release_pin(k, h),
                    "{order:?}: key {j}"
                );
                assert_eq!(pins(&guessed), pins(&probed), "{order:?}: key {j}");
            }
        }
    }

    #[test]
    fn a_key_presented_twice_is_recorded_once_at_its_latest_slot() {
        let hasher = RandomState::default();
        let keys: Vec<Key> = (0..6u8).map(|i| Key::new(&[i, 1]).unwrap()).collect();
        let mut r = RequestRecord::default();
        assert_eq!(record_all(&mut r, &hasher, &keys[..4]), [true; 4]);
        // Again, in one batch with a repeat, and beside new keys.
        let again = [&keys[2], &keys[4], &keys[2], &keys[0], &keys[5]].map(|k| *k);
        assert_eq!(
            record_all(&mut r, &hasher, &again),
            [false, true, false, false, true]
        );
        assert_eq!(r.accesses.len(), 6);
        let order: Vec<Key> = r.accesses.iter().map(|a| a.key).collect();
        assert_eq!(order, [0, 1, 2, 3, 4, 5].map(|i| keys[i]));
        // The latest presentation's slot: key 2 last came at position 2,
        // key 0 at 3.
        assert_eq!(r.accesses[2].slot, 2);
        assert_eq!(r.accesses[0].slot, 3);
    }

    #[test]
    fn a_reused_record_knows_nothing_of_the_request_before() {
        let hasher = RandomState::default();
        let keys: Vec<Key> = (0..40u8).map(|i| Key::new(&[i, 2]).unwrap()).collect();
        let mut r = RequestRecord::default();
        record_all(&mut r, &hasher, &keys);
        r.clear();
        assert!(r.accesses.is_empty());
        for k in &keys {
            let h = key_hash(&hasher, k.as_bytes());
            assert!(!r.release_pin(k, h));
        }
        // The next request presents some of the same keys: all new to it,
        // each once.
        assert_eq!(record_all(&mut r, &hasher, &keys[10..20]), [true; 10]);
        assert_eq!(record_all(&mut r, &hasher, &keys[15..25]), {
            let mut v = [true; 10];
            v[..5].fill(false);
            v
        });
        assert_eq!(r.accesses.len(), 15);
    }

    #[test]
    fn records_reused_past_the_generation_wrap_start_empty() {
        let hasher = RandomState::default();
        let keys: Vec<Key> = (0..8u8).map(|i| Key::new(&[i, 3]).unwrap()).collect();
        let mut r = RequestRecord::default();
        record_all(&mut r, &hasher, &keys[..4]);
        r.clear();
        // The generation before the wrap records keys 4..8, and the wrap
        // must not let either earlier generation answer.
        r.seen.set_generation(u32::MAX);
        record_all(&mut r, &hasher, &keys[4..]);
        r.clear();
        assert_eq!(record_all(&mut r, &hasher, &keys), [true; 8]);
        assert_eq!(r.accesses.len(), 8);
    }

    #[test]
    fn an_access_is_a_keys_only_when_hash_and_bytes_both_agree() {
        let k = |b: u8| Key::new(&[b; 12]).unwrap();
        let a = Access {
            key: k(1),
            h: 5,
            slot: 0,
            reused: false,
            inserted: false,
            pins: 0,
        };
        assert!(same_access(&a, &k(1), 5));
        assert!(!same_access(&a, &k(2), 5), "another key of the same hash");
        assert!(
            !same_access(&a, &k(1), 6),
            "the same bytes under another hash"
        );
    }
}
