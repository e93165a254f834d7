//! Ways to damage a stored block file, for the fault runs: every kind of
//! damage the damaged-file matrix applies, and how it is applied.

use std::path::{Path, PathBuf};

use kvtier_core::tiers::fs::format::{HEADER_LEN, Layout};

use crate::fs_blocks::key;
use crate::rng::Rng;

/// One kind of damage to a block file.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Damage {
    /// One bit flipped in the checked part of the header (bytes 0..112).
    HeaderFieldFlip,
    /// One bit flipped in the header's zero padding (112..4096), which no
    /// checksum covers: the block may still be served, with its own bytes.
    HeaderPaddingFlip,
    /// One bit flipped in the data.
    DataFlip,
    /// Cut inside the header.
    TruncatedInHeader,
    /// Cut inside the data.
    TruncatedInData,
    /// Cut to zero bytes.
    TruncatedToZero,
    /// Another key's file renamed over this one.
    RenamedOver,
    /// Contents exchanged with another key's file.
    Swapped,
    /// One page (header or data) zeroed.
    ZeroedPage,
    /// Garbage appended after the data: the block's own bytes may still be
    /// served.
    AppendedGarbage,
    /// Another magic, header checksum made consistent.
    WrongMagic,
    /// Another format version, header checksum made consistent.
    WrongVersion,
    /// Another key length, header checksum made consistent.
    WrongKeyLength,
    /// Another data length, header checksum made consistent.
    WrongDataLength,
    /// The whole file replaced by random bytes of the same length.
    RandomBytes,
}

/// Every kind of damage.
pub const DAMAGES: [Damage; 15] = [
    Damage::HeaderFieldFlip,
    Damage::HeaderPaddingFlip,
    Damage::DataFlip,
    Damage::TruncatedInHeader,
    Damage::TruncatedInData,
    Damage::TruncatedToZero,
    Damage::RenamedOver,
    Damage::Swapped,
    Damage::ZeroedPage,
    Damage::AppendedGarbage,
    Damage::WrongMagic,
    Damage::WrongVersion,
    Damage::WrongKeyLength,
    Damage::WrongDataLength,
    Damage::RandomBytes,
];

impl Damage {
    /// Whether the block's own, correct bytes may still be served: the
    /// damage touches nothing the block's bytes or identity depend on.
    pub fn harmless(self) -> bool {
        matches!(self, Damage::HeaderPaddingFlip | Damage::AppendedGarbage)
    }

    /// Whether the damage involves a second block's file.
    pub fn needs_partner(self) -> bool {
        matches!(self, Damage::RenamedOver | Damage::Swapped)
    }
}

pub fn path_of(root: &Path, i: u32) -> PathBuf {
    Layout::new(root.to_path_buf()).block_path(&key(i))
}

/// Rewrites the header's own checksum after a field was forged.
pub fn forge(bytes: &mut [u8], edit: impl FnOnce(&mut [u8])) {
    edit(bytes);
    let sum = twox_hash::XxHash3_64::oneshot(&bytes[..104]);
    bytes[104..112].copy_from_slice(&sum.to_le_bytes());
}

/// Damages block `target`'s file (and `partner`'s, for the kinds that
/// take two files).
pub fn damage(root: &Path, kind: Damage, target: u32, partner: u32, rng: &mut Rng) {
    let p = path_of(root, target);
    let q = path_of(root, partner);
    let mut b = std::fs::read(&p).unwrap();
    let len = b.len();
    let write = |b: &[u8]| std::fs::write(&p, b).unwrap();
    match kind {
        Damage::HeaderFieldFlip => {
            let at = rng.below(112) as usize;
            b[at] ^= 1 << rng.below(8);
            write(&b);
        }
        Damage::HeaderPaddingFlip => {
            let at = 112 + rng.below((HEADER_LEN - 112) as u64) as usize;
            b[at] ^= 1 << rng.below(8);
            write(&b);
        }
        Damage::DataFlip => {
            let at = HEADER_LEN + rng.below((len - HEADER_LEN) as u64) as usize;
            b[at] ^= 1 << rng.below(8);
            write(&b);
        }
        Damage::TruncatedInHeader => {
            let f = std::fs::OpenOptions::new().write(true).open(&p).unwrap();
            f.set_len(1 + rng.below(HEADER_LEN as u64 - 1)).unwrap();
        }
        Damage::TruncatedInData => {
            let f = std::fs::OpenOptions::new().write(true).open(&p).unwrap();
            f.set_len(HEADER_LEN as u64 + rng.below((len - HEADER_LEN) as u64))
                .unwrap();
        }
        Damage::TruncatedToZero => {
            let f = std::fs::OpenOptions::new().write(true).open(&p).unwrap();
            f.set_len(0).unwrap();
        }
        Damage::RenamedOver => std::fs::rename(&q, &p).unwrap(),
        Damage::Swapped => {
            let other = std::fs::read(&q).unwrap();
            std::fs::write(&q, &b).unwrap();
            write(&other);
        }
        Damage::ZeroedPage => {
            let page = rng.below((len / 4096) as u64) as usize;
            b[page * 4096..(page + 1) * 4096].fill(0);
            write(&b);
        }
        Damage::AppendedGarbage => {
            let n = 1 + rng.below(8192) as usize;
            b.extend((0..n).map(|_| rng.next() as u8));
            write(&b);
        }
        Damage::WrongMagic => {
            forge(&mut b, |h| h[rng.below(8) as usize] ^= 0x20);
            write(&b);
        }
        Damage::WrongVersion => {
            let v = [0u32, 2, 3, u32::MAX][rng.below(4) as usize];
            forge(&mut b, |h| h[8..12].copy_from_slice(&v.to_le_bytes()));
            write(&b);
        }
        Damage::WrongKeyLength => {
            let real = b[32];
            let mut l = rng.below(256) as u8;
            if l == real {
                l = real.wrapping_add(1);
            }
            forge(&mut b, |h| h[32] = l);
            write(&b);
        }
        Damage::WrongDataLength => {
            let real = u64::from_le_bytes(b[16..24].try_into().unwrap());
            let l = [0, real - 4096, real + 4096, real * 2][rng.below(4) as usize];
            forge(&mut b, |h| h[16..24].copy_from_slice(&l.to_le_bytes()));
            write(&b);
        }
        Damage::RandomBytes => {
            b.iter_mut().for_each(|x| *x = rng.next() as u8);
            write(&b);
        }
    }
}
