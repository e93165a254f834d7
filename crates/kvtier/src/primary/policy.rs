//! The eviction-policy trait: what a policy is told and what it decides.
//!
//! The tier owns slots, reference counts and the key index; a policy owns
//! only its ordering (intrusive lists over slot ids) and any history (ARC's
//! ghosts).  A new policy is one new file implementing [`Policy`], one
//! variant of `AnyPolicy` and one arm in its constructor (both in
//! `any_policy.rs`, above the policies), and one [`PolicyKind`](super::PolicyKind)
//! (`policy_kind.rs`).

use super::slots::Slots;
use crate::error::Result;
use crate::key::Key;

/// Sizes a policy reports in the tier's stats (zero where meaningless).
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub(crate) struct PolicyStats {
    pub(crate) t1: u32,
    pub(crate) t2: u32,
    pub(crate) b1: u32,
    pub(crate) b2: u32,
    pub(crate) target: f64,
}

/// An eviction policy over the slots of one tier.
///
/// Every method costs O(1) per slot or key it is given; `select_victims`
/// costs O(n + named + parked): it passes over the call-named keys it meets
/// (at most the call's own keys) and parks each busy key it meets, which
/// no later walk meets again until the key turns idle.
pub(crate) trait Policy: Send + Sync + std::fmt::Debug {
    /// `slot` (key hash `h`) became resident, write pending; calls come in
    /// batch order, so the last key of a batch ends up most recent.
    /// `maybe_ghost` is false when the key is known not to be a ghost (it
    /// saves ARC a lookup).
    fn insert(&mut self, slots: &Slots, slot: u32, h: u64, maybe_ghost: bool);

    /// [0.33] Like [`Policy::insert`], for a key with token `position`
    /// stored by the active request whose rank handle is `rank` (see
    /// [`Policy::request_access`]).  Policies that rank by position (lru)
    /// place the key at `(request rank, -position)`; the others insert it
    /// as usual.
    fn insert_positioned(
        &mut self,
        slots: &Slots,
        slot: u32,
        h: u64,
        maybe_ghost: bool,
        _rank: &mut u32,
        _position: u64,
    ) {
        self.insert(slots, slot, h, maybe_ghost);
    }

    /// [0.33] An active request recorded keys it had not presented before:
    /// lru gives the request its rank if it has none in this cache
    /// generation.  `rank` is the request's handle, kept by the tier,
    /// [`NIL`](super::lists::NIL) while it has none (and after a reset).
    fn request_access(&mut self, _rank: &mut u32) {}

    /// [0.33] The active request with handle `rank` presents resident
    /// `slot`, which has token `position`, for the first time: lru raises
    /// the key's rank to `(request rank, -position)` if that is higher.
    fn raise(&mut self, _slots: &Slots, _slot: u32, _rank: &mut u32, _position: u64) {}

    /// The request with handle `rank` finished (after its commits): its
    /// rank is given back and the handle set to [`NIL`](super::lists::NIL).
    fn end_request(&mut self, rank: &mut u32) {
        *rank = super::lists::NIL;
    }

    /// Positions are given to the tier from now on (called before the
    /// first one is used); may allocate, and fails without changing
    /// anything.
    fn use_positions(&mut self) -> Result<()> {
        Ok(())
    }

    /// Makes room for the ranks of `active` active requests, so that
    /// giving one its rank never allocates; fails without changing anything.
    fn reserve_requests(&mut self, _active: usize) -> Result<()> {
        Ok(())
    }

    /// `slot` left without eviction (a failed store): no history is kept.
    fn remove(&mut self, slot: u32);

    /// `touch` of resident `slot`; the tier calls it in reversed batch order.
    fn touch(&mut self, slots: &Slots, slot: u32);

    /// `touch` of a key that is not resident (ARC learns from ghost hits).
    fn touch_absent(&mut self, _key: &[u8], _h: u64) {}

    /// Whether the policy learns from store candidates absent from the tier
    /// (ARC, from its ghosts): only then does the tier remember, per
    /// request, which candidates the request has offered.
    fn learns_from_store_misses(&self) -> bool {
        false
    }

    /// [0.33] A store candidate absent from the tier (hash `h`) that passed
    /// the admission threshold; `first`: this request offers it for the
    /// first time.  Returns whether the key is remembered in a ghost list;
    /// if it is and `first`, adapts as a ghost hit would and makes it the
    /// most recent of its ghost list.  The tier calls it for a call's
    /// candidates from the last to the first.
    fn store_miss(&mut self, _key: &Key, _h: u64, _first: bool) -> bool {
        false
    }

    /// Chooses `n` idle, unmarked slots to evict, in eviction order, into
    /// `out` (cleared first); false if fewer exist.  The order does not
    /// change; busy (pinned or write-pending) keys met on the way are taken
    /// out of the candidates and flagged [`PARKED`](super::slots::PARKED).
    fn select_victims(&mut self, slots: &mut Slots, n: usize, out: &mut Vec<u32>) -> bool;

    /// Parked `slot` turned idle: it becomes a candidate again at the
    /// recency it has (the tier clears the flag).
    fn became_idle(&mut self, slot: u32);

    /// Makes room, fallibly, for what evicting `n` keys will remember (ARC's
    /// ghosts), so that [`Policy::evict`] allocates nothing; called before
    /// the victims are evicted.
    fn reserve_evictions(&mut self, _n: usize) -> Result<()> {
        Ok(())
    }

    /// Evicts `slot` (chosen by `select_victims`, key hash `h`); the slot's
    /// key is still readable in `slots`.
    fn evict(&mut self, slots: &Slots, slot: u32, h: u64);

    /// One committed access of resident `slot` at request finish; the tier
    /// calls it from the request's tail to its head.  `reused`: the request
    /// loaded the key or found it ready at store before it inserted it
    /// itself; `inserted`: the request's store put the key in the tier.
    /// A key with neither (offered by a refused store, resident since) is
    /// still an access for lru.
    fn commit(&mut self, slots: &Slots, slot: u32, reused: bool, inserted: bool);

    /// Requests what asking whether an absent key (hash `h`) is remembered
    /// will read (a hint): ARC's ghost index line.
    fn prefetch_history(&self, _h: u64) {}

    /// Requests what evicting `slot` (key hash `h`) will read (a hint): its
    /// neighbours' links, and where ARC will remember it.
    fn prefetch_eviction(&self, _slot: u32, _h: u64) {}

    /// Requests what reordering `slot` will read (a hint): its own links.
    /// Any slot id is accepted, [`NIL`](super::lists::NIL) included.
    fn prefetch_links(&self, _slot: u32) {}

    /// Requests the links of `slot`'s neighbours (a hint, after
    /// [`Policy::prefetch_links`] of `slot` had time to arrive); any slot
    /// id is accepted, as for [`Policy::prefetch_links`].
    fn prefetch_neighbours(&self, _slot: u32) {}

    /// Forgets everything (reset).
    fn clear(&mut self);

    /// Sizes for the stats.
    fn stats(&self) -> PolicyStats;

    /// Bytes of metadata the policy keeps, for the per-block size figure.
    fn metadata_bytes(&self) -> usize;

    /// The resident slots in eviction-preference order (first evicted
    /// first, pinned ones included); for tests and checks, O(n).
    fn order(&self) -> Vec<u32>;

    /// The eviction candidates in the same order (every resident slot but
    /// the parked ones); for tests and checks, O(n).
    fn candidate_order(&self) -> Vec<u32>;

    /// Entries walked past to place keys by position (lru), for tests.
    #[cfg(test)]
    fn walked(&self) -> u64 {
        0
    }
}
