//! Intrusive doubly linked lists over dense `u32` ids.
//!
//! Every id belongs to at most one of `N` lists; links and the list tag live
//! in three parallel arrays indexed by id (4 + 4 + 1 bytes per id), so moving
//! an id between lists or to a list's back is O(1) and allocates nothing.

/// The "no id" link value.
pub(crate) const NIL: u32 = u32::MAX;
/// The tag of an id that is in no list.
pub(crate) const NO_LIST: u8 = u8::MAX;

/// `N` doubly linked lists sharing one set of link arrays.
#[derive(Debug, Clone)]
pub(crate) struct Lists<const N: usize> {
    prev: Vec<u32>,
    next: Vec<u32>,
    tag: Vec<u8>,
    head: [u32; N],
    tail: [u32; N],
    len: [u32; N],
}

impl<const N: usize> Lists<N> {
    /// Lists over ids `0..ids`, all empty.
    pub(crate) fn new(ids: usize) -> Self {
        Lists {
            prev: vec![NIL; ids],
            next: vec![NIL; ids],
            tag: vec![NO_LIST; ids],
            head: [NIL; N],
            tail: [NIL; N],
            len: [0; N],
        }
    }

    /// Makes room for ids below `ids` (amortized O(1) per new id), never
    /// reserving room for more than `max` ids.
    pub(crate) fn grow_to(&mut self, ids: usize, max: usize) {
        if ids > self.tag.len() {
            if ids > self.tag.capacity() {
                let want = (self.tag.capacity() * 2).clamp(ids, max.max(ids));
                let extra = want - self.tag.len();
                self.prev.reserve_exact(extra);
                self.next.reserve_exact(extra);
                self.tag.reserve_exact(extra);
            }
            self.prev.resize(ids, NIL);
            self.next.resize(ids, NIL);
            self.tag.resize(ids, NO_LIST);
        }
    }

    /// The list holding `id`, if any.
    #[inline]
    pub(crate) fn list_of(&self, id: u32) -> Option<usize> {
        let t = self.tag[id as usize];
        (t != NO_LIST).then_some(t as usize)
    }

    /// Number of ids in `list`.
    #[inline]
    pub(crate) fn len(&self, list: usize) -> usize {
        self.len[list] as usize
    }

    /// Oldest id of `list` (front), or [`NIL`].
    #[inline]
    pub(crate) fn front(&self, list: usize) -> u32 {
        self.head[list]
    }

    /// The id after `id` towards the back, or [`NIL`].
    #[inline]
    pub(crate) fn next_of(&self, id: u32) -> u32 {
        self.next[id as usize]
    }

    /// Appends `id` (in no list) at the back (most recent end) of `list`.
    #[inline]
    pub(crate) fn push_back(&mut self, list: usize, id: u32) {
        debug_assert_eq!(self.tag[id as usize], NO_LIST);
        let i = id as usize;
        let t = self.tail[list];
        self.prev[i] = t;
        self.next[i] = NIL;
        self.tag[i] = list as u8;
        if t == NIL {
            self.head[list] = id;
        } else {
            self.next[t as usize] = id;
        }
        self.tail[list] = id;
        self.len[list] += 1;
    }

    /// Removes `id` from its list; an id in no list is left alone.
    #[inline]
    pub(crate) fn unlink(&mut self, id: u32) {
        let i = id as usize;
        let t = self.tag[i];
        if t == NO_LIST {
            return;
        }
        let list = t as usize;
        let (p, n) = (self.prev[i], self.next[i]);
        if p == NIL {
            self.head[list] = n;
        } else {
            self.next[p as usize] = n;
        }
        if n == NIL {
            self.tail[list] = p;
        } else {
            self.prev[n as usize] = p;
        }
        self.prev[i] = NIL;
        self.next[i] = NIL;
        self.tag[i] = NO_LIST;
        self.len[list] -= 1;
    }

    /// Moves `id` (in any list or none) to the back of `list`.
    #[inline]
    pub(crate) fn move_to_back(&mut self, list: usize, id: u32) {
        if self.tail[list] == id {
            return;
        }
        self.unlink(id);
        self.push_back(list, id);
    }

    /// Removes and returns the front id of `list`.
    #[inline]
    pub(crate) fn pop_front(&mut self, list: usize) -> Option<u32> {
        let h = self.head[list];
        if h == NIL {
            return None;
        }
        self.unlink(h);
        Some(h)
    }

    /// Empties every list, touching only the ids that were in one.
    pub(crate) fn clear(&mut self) {
        for list in 0..N {
            while self.pop_front(list).is_some() {}
        }
    }

    /// Bytes of link and tag storage.
    pub(crate) fn bytes(&self) -> usize {
        self.prev.capacity() * 4 + self.next.capacity() * 4 + self.tag.capacity()
    }

    /// The ids of `list`, front (oldest) to back; for tests and checks.
    #[allow(dead_code)]
    pub(crate) fn collect(&self, list: usize) -> Vec<u32> {
        let mut out = Vec::with_capacity(self.len(list));
        let mut id = self.head[list];
        while id != NIL {
            out.push(id);
            id = self.next[id as usize];
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn push_move_unlink_and_pop_keep_order_and_lengths() {
        let mut l: Lists<2> = Lists::new(5);
        for id in 0..4 {
            l.push_back(0, id);
        }
        l.move_to_back(0, 1);
        assert_eq!(l.collect(0), vec![0, 2, 3, 1]);
        l.move_to_back(1, 2);
        assert_eq!(l.collect(0), vec![0, 3, 1]);
        assert_eq!(l.collect(1), vec![2]);
        assert_eq!(l.list_of(2), Some(1));
        l.unlink(0);
        l.unlink(0);
        assert_eq!(l.list_of(0), None);
        assert_eq!(l.pop_front(0), Some(3));
        assert_eq!((l.len(0), l.len(1)), (1, 1));
        l.grow_to(8, 8);
        l.push_back(1, 7);
        assert_eq!(l.collect(1), vec![2, 7]);
        l.clear();
        assert_eq!((l.len(0), l.len(1), l.front(0)), (0, 0, NIL));
        assert_eq!(l.list_of(7), None);
    }
}
