//! Where the fs index keeps its nodes: one slab per key size class (keys
//! of 1 to 8 bytes, 9 to 16, ..., 57 to 64), each node a 16-byte header
//! ([`Node`]) followed by its key in a slot of the class's width, so a
//! lookup that finds a key has its node in the same place.  A slab is a
//! list of chunks of [`CHUNK_NODES`] nodes, allocated one at a time as
//! keys arrive: it never copies what it holds to grow, and it holds at
//! most one partly used chunk per class beyond its keys.  Freed nodes go
//! to a free list of their class, linked through their `next` field, and
//! are the first reused.
//!
//! A node number is the class (its top [`CLASS_BITS`] bits) and the
//! node's place in that class's slab: 2^29 - 1 nodes per class at most.

use super::{NIL, Node};

/// Bits of a node number naming its size class.
const CLASS_BITS: u32 = 3;
const CLASS_SHIFT: u32 = 32 - CLASS_BITS;
const CLASSES: usize = 1 << CLASS_BITS;
/// Node numbers of one class: below this (`NIL` is never one).
const PER_CLASS: u32 = 1 << CLASS_SHIFT;
/// Nodes in one chunk of a slab.
pub(super) const CHUNK_NODES: usize = 4096;
/// Bytes of a node before its key.
const HEADER: usize = 16;
/// Where the key's length (less one, modulo 8) lies in the flags byte.
const LEN_SHIFT: u32 = 4;
/// The flags' bits that belong to the index (not the length).
const FLAG_BITS: u8 = (1 << LEN_SHIFT) - 1;
/// The flags' bit saying that the node holds a key's digest, not the key.
const DIGEST_BIT: u8 = 1 << 7;

/// One size class: keys of `8 * c + 1` to `8 * c + 8` bytes.
struct Class {
    chunks: Vec<Box<[u8]>>,
    /// Nodes handed out so far (free ones included).
    len: u32,
    /// First free node of the class, or `NIL`.
    free: u32,
}

/// The nodes of every size class.
#[derive(Debug)]
pub(super) struct Slabs {
    classes: [Class; CLASSES],
    /// Most nodes one class hands out: `PER_CLASS - 1` (its last number
    /// would be `NIL`), lower in tests.
    limit: u32,
}

impl std::fmt::Debug for Class {
    /// The counts, not the bytes.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Class")
            .field("chunks", &self.chunks.len())
            .field("len", &self.len)
            .field("free", &self.free)
            .finish()
    }
}

/// Size class of a key of `len` bytes (1..=64).
#[inline(always)]
fn class_of(len: usize) -> usize {
    (len - 1) >> 3
}

/// Bytes of one node of class `c`: the header and an 8 * (c + 1)-byte slot.
#[inline(always)]
const fn width(c: usize) -> usize {
    HEADER + 8 * (c + 1)
}

impl Slabs {
    pub(super) fn new() -> Slabs {
        Slabs {
            classes: std::array::from_fn(|_| Class {
                chunks: Vec::new(),
                len: 0,
                free: NIL,
            }),
            limit: PER_CLASS - 1,
        }
    }

    /// Hands out at most `limit` nodes per class (tests of a full class).
    #[cfg(test)]
    pub(super) fn set_limit(&mut self, limit: u32) {
        self.limit = limit.min(PER_CLASS - 1);
    }

    /// Node `i`'s header and key slot.
    #[inline(always)]
    fn bytes(&self, i: u32) -> &[u8] {
        let c = (i >> CLASS_SHIFT) as usize;
        let n = (i & (PER_CLASS - 1)) as usize;
        let w = width(c);
        let at = n % CHUNK_NODES * w;
        &self.classes[c].chunks[n / CHUNK_NODES][at..at + w]
    }

    #[inline(always)]
    fn bytes_mut(&mut self, i: u32) -> &mut [u8] {
        let c = (i >> CLASS_SHIFT) as usize;
        let n = (i & (PER_CLASS - 1)) as usize;
        let w = width(c);
        let at = n % CHUNK_NODES * w;
        &mut self.classes[c].chunks[n / CHUNK_NODES][at..at + w]
    }

    /// Node `i`'s header.
    #[inline(always)]
    pub(super) fn node(&self, i: u32) -> Node {
        let b = self.bytes(i);
        let word = |at: usize| u32::from_le_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]]);
        Node {
            prev: word(0),
            next: word(4),
            record: word(8),
            readers: u16::from_le_bytes([b[12], b[13]]),
            flags: b[14] & FLAG_BITS,
            fanout: b[15],
        }
    }

    /// Writes node `i`'s header (its key stays).
    #[inline(always)]
    pub(super) fn set(&mut self, i: u32, n: Node) {
        debug_assert!(n.flags & !FLAG_BITS == 0);
        let b = &mut self.bytes_mut(i)[..HEADER];
        b[0..4].copy_from_slice(&n.prev.to_le_bytes());
        b[4..8].copy_from_slice(&n.next.to_le_bytes());
        b[8..12].copy_from_slice(&n.record.to_le_bytes());
        b[12..14].copy_from_slice(&n.readers.to_le_bytes());
        b[14] = (b[14] & !FLAG_BITS) | n.flags;
        b[15] = n.fanout;
    }

    /// Node `i`'s key.
    #[inline(always)]
    pub(super) fn key(&self, i: u32) -> &[u8] {
        let b = self.bytes(i);
        let len = ((i >> CLASS_SHIFT) as usize) << 3 | ((b[14] >> LEN_SHIFT) as usize & 7);
        &b[HEADER..HEADER + len + 1]
    }

    /// Whether node `i` holds a key's digest rather than the key.
    #[inline(always)]
    pub(super) fn is_digest(&self, i: u32) -> bool {
        self.bytes(i)[14] & DIGEST_BIT != 0
    }

    /// A node for `key` (1..=64 bytes; a key's digest if `digest`) with
    /// header `n`: a free one of its class, else a new one.  `None` if its
    /// class has no room left and a chunk more cannot be allocated (or the
    /// class holds 2^29 - 1 nodes).
    pub(super) fn alloc(&mut self, key: &[u8], digest: bool, n: Node) -> Option<u32> {
        let c = class_of(key.len());
        let free = self.classes[c].free;
        let i = if free != NIL {
            self.classes[c].free = self.node(free).next;
            free
        } else {
            let class = &mut self.classes[c];
            let n = class.len;
            if n == self.limit {
                return None;
            }
            if n as usize == class.chunks.len() * CHUNK_NODES {
                let mut chunk = Vec::new();
                chunk.try_reserve_exact(CHUNK_NODES * width(c)).ok()?;
                chunk.resize(CHUNK_NODES * width(c), 0);
                class.chunks.try_reserve(1).ok()?;
                class.chunks.push(chunk.into_boxed_slice());
            }
            class.len += 1;
            (c as u32) << CLASS_SHIFT | n
        };
        let b = self.bytes_mut(i);
        b[14] = ((key.len() - 1) as u8 & 7) << LEN_SHIFT | if digest { DIGEST_BIT } else { 0 };
        b[HEADER..HEADER + key.len()].copy_from_slice(key);
        self.set(i, n);
        Some(i)
    }

    /// Frees node `i` (its key with it): the next of its class handed out.
    pub(super) fn release(&mut self, i: u32) {
        let c = (i >> CLASS_SHIFT) as usize;
        let next = self.classes[c].free;
        let mut n = self.node(i);
        n.next = next;
        n.prev = NIL;
        n.flags = 0;
        self.set(i, n);
        self.classes[c].free = i;
    }

    /// Heap bytes: the chunks, and the lists of chunks.
    pub(super) fn heap_parts(&self) -> (usize, usize) {
        let mut chunks = 0;
        let mut lists = 0;
        for (c, class) in self.classes.iter().enumerate() {
            chunks += class.chunks.len() * CHUNK_NODES * width(c);
            lists += class.chunks.capacity() * size_of::<Box<[u8]>>();
        }
        (chunks, lists)
    }
}
