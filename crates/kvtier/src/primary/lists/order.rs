//! [`OrderLists`]: the recency lists of resident slots that the eviction
//! policies keep, each with a sub-list of eviction candidates in the same
//! order, and how a busy id leaves the candidates and comes back at its
//! place (see the type's docs).

use super::NIL;
use crate::error::Result;
use crate::primary::huge;
use crate::primary::prefetch::prefetch_read;

/// Links of one id in [`OrderLists`]: its place in the full order and in
/// the candidate order, kept together (16 bytes, four to a cache line) so
/// one line serves an update of either.
#[derive(Debug, Clone, Copy)]
struct Node {
    prev: u32,
    next: u32,
    cprev: u32,
    cnext: u32,
}

const EMPTY_NODE: Node = Node {
    prev: NIL,
    next: NIL,
    cprev: NIL,
    cnext: NIL,
};

/// [`OrderLists`] state bits of an id: its list in the low bits
/// ([`OUT`] when in none), plus [`CANDIDATE`].
const LIST_BITS: u8 = 0x7f;
/// The state of an id that is in no list.
const OUT: u8 = LIST_BITS;
/// State flag: the id is in its list's candidate sub-list.
const CANDIDATE: u8 = 0x80;

/// `N` recency lists, each with a candidate sub-list for eviction.
///
/// The full list of `list` holds its ids in recency order; the candidate
/// list holds a subset of them in the same order: every idle id, plus busy
/// (pinned or write-pending) ids that no eviction has passed over yet.  An
/// eviction walk drops the busy ids it meets ([`OrderLists::park`]), so
/// each busy id is passed over at most once per busy period, and a later
/// walk never meets it again; when it becomes idle,
/// [`OrderLists::restore`] puts it back at its place in the order (after
/// the nearest older candidate), so it keeps its recency.
///
/// Per id: a 16-byte [`Node`] of links and one state byte (its list and
/// whether it is a candidate: a candidate is always in its own list's
/// candidates), 17 bytes.
#[derive(Debug, Clone)]
pub(crate) struct OrderLists<const N: usize> {
    nodes: Vec<Node>,
    state: Vec<u8>,
    head: [u32; N],
    tail: [u32; N],
    len: [u32; N],
    chead: [u32; N],
    ctail: [u32; N],
}

impl<const N: usize> OrderLists<N> {
    /// Lists over ids `0..ids`, all empty.
    /// An out-of-memory error if the links cannot be had.
    pub(crate) fn new(ids: usize) -> Result<Self> {
        const { assert!(N < OUT as usize) };
        Ok(OrderLists {
            nodes: huge::filled(ids, EMPTY_NODE, "recency list links")?,
            state: huge::filled(ids, OUT, "recency list states")?,
            head: [NIL; N],
            tail: [NIL; N],
            len: [0; N],
            chead: [NIL; N],
            ctail: [NIL; N],
        })
    }

    /// The list holding `id`, if any.
    #[inline]
    pub(crate) fn list_of(&self, id: u32) -> Option<usize> {
        let list = self.state[id as usize] & LIST_BITS;
        (list != OUT).then_some(list as usize)
    }

    /// Requests the links and state of `id` (a hint, for a move soon).
    #[inline]
    pub(crate) fn prefetch(&self, id: u32) {
        if let (Some(n), Some(s)) = (self.nodes.get(id as usize), self.state.get(id as usize)) {
            prefetch_read(n);
            prefetch_read(s);
        }
    }

    /// Requests the links of `id`'s neighbours, in both orders (a hint; reads
    /// `id`'s own links, requested earlier by [`OrderLists::prefetch`]).
    #[inline]
    pub(crate) fn prefetch_neighbours(&self, id: u32) {
        if let Some(n) = self.nodes.get(id as usize) {
            for other in [n.prev, n.next, n.cprev, n.cnext] {
                if let Some(o) = self.nodes.get(other as usize) {
                    prefetch_read(o);
                }
            }
        }
    }

    /// Number of ids the lists have room for (`0..ids()`).
    #[inline]
    pub(crate) fn ids(&self) -> usize {
        self.state.len()
    }

    /// Makes room for ids below `ids` (nothing if there is room already);
    /// an allocation failure changes nothing.
    pub(crate) fn grow_to(&mut self, ids: usize) -> Result<(), std::collections::TryReserveError> {
        if ids <= self.state.len() {
            return Ok(());
        }
        let extra = ids - self.state.len();
        self.nodes.try_reserve_exact(extra)?;
        self.state.try_reserve_exact(extra)?;
        self.nodes.resize(ids, EMPTY_NODE);
        self.state.resize(ids, OUT);
        Ok(())
    }

    /// The id after `id` in its list (towards the back), or [`NIL`].
    #[inline]
    pub(crate) fn next(&self, id: u32) -> u32 {
        self.nodes[id as usize].next
    }

    /// The id before `id` in its list (towards the front), or [`NIL`].
    #[inline]
    pub(crate) fn prev(&self, id: u32) -> u32 {
        self.nodes[id as usize].prev
    }

    /// Whether `id` is a candidate (in its list's candidate sub-list).
    #[inline]
    pub(crate) fn is_candidate(&self, id: u32) -> bool {
        self.state[id as usize] & CANDIDATE != 0
    }

    /// Number of ids in `list` (candidates or not).
    #[inline]
    pub(crate) fn len(&self, list: usize) -> usize {
        self.len[list] as usize
    }

    /// Oldest id of `list` (front), or [`NIL`].
    #[inline]
    pub(crate) fn front(&self, list: usize) -> u32 {
        self.head[list]
    }

    /// Oldest candidate of `list`, or [`NIL`].
    #[inline]
    pub(crate) fn candidate_front(&self, list: usize) -> u32 {
        self.chead[list]
    }

    /// The candidate after `id` towards the back, or [`NIL`].
    #[inline]
    pub(crate) fn candidate_next(&self, id: u32) -> u32 {
        self.nodes[id as usize].cnext
    }

    /// Appends `id` (in no list) at the back of `list`, as a candidate.
    #[inline]
    pub(crate) fn push_back(&mut self, list: usize, id: u32) {
        let i = id as usize;
        debug_assert_eq!(self.state[i], OUT);
        let t = self.tail[list];
        let ct = self.ctail[list];
        self.nodes[i] = Node {
            prev: t,
            next: NIL,
            cprev: ct,
            cnext: NIL,
        };
        self.state[i] = list as u8 | CANDIDATE;
        match self.nodes.get_mut(t as usize) {
            Some(last) => last.next = id,
            None => self.head[list] = id,
        }
        self.tail[list] = id;
        self.len[list] += 1;
        self.clink_back(list, id, ct);
    }

    /// Links `id` (in no list) into `list` right after `after` (an id of
    /// `list`), not as a candidate: [`OrderLists::restore`] makes it one
    /// at its place.
    #[inline]
    pub(crate) fn insert_after(&mut self, list: usize, after: u32, id: u32) {
        let i = id as usize;
        debug_assert_eq!(self.state[i], OUT);
        debug_assert_eq!(self.list_of(after), Some(list));
        let next = self.nodes[after as usize].next;
        self.nodes[i] = Node {
            prev: after,
            next,
            cprev: NIL,
            cnext: NIL,
        };
        self.state[i] = list as u8;
        self.nodes[after as usize].next = id;
        if next == NIL {
            self.tail[list] = id;
        } else {
            self.nodes[next as usize].prev = id;
        }
        self.len[list] += 1;
    }

    #[inline]
    fn clink_back(&mut self, list: usize, id: u32, ct: u32) {
        match self.nodes.get_mut(ct as usize) {
            Some(t) => t.cnext = id,
            None => self.chead[list] = id,
        }
        self.ctail[list] = id;
    }

    /// Removes `id` from the candidates (it stays in its list); an id that
    /// is no candidate is left alone.
    #[inline]
    pub(crate) fn park(&mut self, id: u32) {
        let i = id as usize;
        let s = self.state[i];
        if s & CANDIDATE == 0 {
            return;
        }
        let list = (s & LIST_BITS) as usize;
        let n = self.nodes[i];
        if n.cprev == NIL {
            self.chead[list] = n.cnext;
        } else {
            self.nodes[n.cprev as usize].cnext = n.cnext;
        }
        if n.cnext == NIL {
            self.ctail[list] = n.cprev;
        } else {
            self.nodes[n.cnext as usize].cprev = n.cprev;
        }
        let node = &mut self.nodes[i];
        node.cprev = NIL;
        node.cnext = NIL;
        self.state[i] = s & LIST_BITS;
    }

    /// Makes `id` (in a list) a candidate again at its place in the order:
    /// after the nearest older candidate of its list.  Costs one step per
    /// parked id between them (busy ids an eviction passed over), never a
    /// walk over idle ids.
    pub(crate) fn restore(&mut self, id: u32) {
        let i = id as usize;
        let s = self.state[i];
        if s & CANDIDATE != 0 || s == OUT {
            return;
        }
        let list = s as usize;
        let mut p = self.nodes[i].prev;
        while p != NIL && !self.is_candidate(p) {
            p = self.nodes[p as usize].prev;
        }
        let next = if p == NIL {
            self.chead[list]
        } else {
            self.nodes[p as usize].cnext
        };
        {
            let node = &mut self.nodes[i];
            node.cprev = p;
            node.cnext = next;
        }
        self.state[i] = s | CANDIDATE;
        if p == NIL {
            self.chead[list] = id;
        } else {
            self.nodes[p as usize].cnext = id;
        }
        if next == NIL {
            self.ctail[list] = id;
        } else {
            self.nodes[next as usize].cprev = id;
        }
    }

    /// Removes `id` from its list (and the candidates); an id in no list is left alone.
    #[inline]
    pub(crate) fn unlink(&mut self, id: u32) {
        let i = id as usize;
        let s = self.state[i];
        if s == OUT {
            return;
        }
        let list = (s & LIST_BITS) as usize;
        let n = self.nodes[i];
        self.detach(list, n, s & CANDIDATE != 0);
        self.nodes[i] = EMPTY_NODE;
        self.state[i] = OUT;
        self.len[list] -= 1;
    }

    /// Takes the id whose links are `n` out of `list`'s order and, if it
    /// is a `candidate`, out of the candidates; its own node and state
    /// are left for the caller to rewrite.
    #[inline(always)]
    fn detach(&mut self, list: usize, n: Node, candidate: bool) {
        // A neighbour is a node, or NIL (past every node): one bounds check
        // tells them apart.
        match self.nodes.get_mut(n.prev as usize) {
            Some(p) => p.next = n.next,
            None => self.head[list] = n.next,
        }
        match self.nodes.get_mut(n.next as usize) {
            Some(x) => x.prev = n.prev,
            None => self.tail[list] = n.prev,
        }
        if candidate {
            match self.nodes.get_mut(n.cprev as usize) {
                Some(p) => p.cnext = n.cnext,
                None => self.chead[list] = n.cnext,
            }
            match self.nodes.get_mut(n.cnext as usize) {
                Some(x) => x.cprev = n.cprev,
                None => self.ctail[list] = n.cprev,
            }
        }
    }

    /// Moves `id` (in a list) to the back of `list`; a candidate stays one
    /// (at the back of `list`'s candidates), a parked id stays parked.
    /// One pass over the id's links and its neighbours': the move of
    /// every touch and request commit.
    #[inline(always)]
    pub(crate) fn move_to_back(&mut self, list: usize, id: u32) {
        if self.tail[list] == id {
            return;
        }
        let i = id as usize;
        let s = self.state[i];
        let candidate = s & CANDIDATE != 0;
        if s == OUT {
            self.push_back(list, id);
            self.park(id);
            return;
        }
        let old = (s & LIST_BITS) as usize;
        let n = self.nodes[i];
        self.detach(old, n, candidate);
        if old != list {
            self.len[old] -= 1;
            self.len[list] += 1;
        }
        let t = self.tail[list];
        match self.nodes.get_mut(t as usize) {
            Some(last) => last.next = id,
            None => self.head[list] = id,
        }
        self.tail[list] = id;
        if candidate {
            let ct = self.ctail[list];
            self.clink_back(list, id, ct);
            self.nodes[i] = Node {
                prev: t,
                next: NIL,
                cprev: ct,
                cnext: NIL,
            };
            self.state[i] = list as u8 | CANDIDATE;
        } else {
            self.nodes[i] = Node {
                prev: t,
                ..EMPTY_NODE
            };
            self.state[i] = list as u8;
        }
    }

    /// Empties every list, touching only the ids that were in one.
    pub(crate) fn clear(&mut self) {
        for list in 0..N {
            let mut id = self.head[list];
            while id != NIL {
                let next = self.nodes[id as usize].next;
                self.nodes[id as usize] = EMPTY_NODE;
                self.state[id as usize] = OUT;
                id = next;
            }
            self.head[list] = NIL;
            self.tail[list] = NIL;
            self.len[list] = 0;
            self.chead[list] = NIL;
            self.ctail[list] = NIL;
        }
    }

    /// Bytes of link and state storage.
    pub(crate) fn bytes(&self) -> usize {
        self.nodes.capacity() * std::mem::size_of::<Node>() + self.state.capacity()
    }

    /// The ids of `list`, front (oldest) to back; for tests and checks.
    pub(crate) fn collect(&self, list: usize) -> Vec<u32> {
        let mut out = Vec::with_capacity(self.len(list));
        let mut id = self.head[list];
        while id != NIL {
            out.push(id);
            id = self.nodes[id as usize].next;
        }
        out
    }

    /// The candidates of `list`, front to back; for tests and checks.
    pub(crate) fn collect_candidates(&self, list: usize) -> Vec<u32> {
        let mut out = Vec::new();
        let mut id = self.chead[list];
        while id != NIL {
            out.push(id);
            id = self.nodes[id as usize].cnext;
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parked_ids_are_restored_at_their_place_in_the_order() {
        let mut l: OrderLists<2> = OrderLists::new(8).unwrap();
        for id in 0..6 {
            l.push_back(0, id);
        }
        l.park(1);
        l.park(2);
        l.park(4);
        assert_eq!(l.collect_candidates(0), vec![0, 3, 5]);
        l.move_to_back(0, 2); // parked: moves in the order, stays parked
        assert_eq!(l.collect(0), vec![0, 1, 3, 4, 5, 2]);
        assert_eq!(l.collect_candidates(0), vec![0, 3, 5]);
        l.restore(4);
        l.restore(4);
        assert_eq!(l.collect_candidates(0), vec![0, 3, 4, 5]);
        l.unlink(0);
        l.restore(1);
        assert_eq!(l.collect_candidates(0), vec![1, 3, 4, 5]);
        l.restore(2);
        assert_eq!(l.collect_candidates(0), vec![1, 3, 4, 5, 2]);
        l.move_to_back(1, 3);
        assert_eq!(l.collect_candidates(1), vec![3]);
        assert_eq!((l.len(0), l.len(1)), (4, 1));
        l.clear();
        assert_eq!(l.collect_candidates(0), Vec::<u32>::new());
        assert_eq!(l.list_of(3), None);
    }
}
