//! The layout header at the start of a region's first backing file.
//!
//! Two processes can ask for different layouts of the same total size (128
//! slots of 8 KiB and 256 of 4 KiB are both 1 MiB), which the file size
//! cannot tell apart; a joiner that took such a region would address other
//! processes' slots.  So the creator writes the layout into the first page
//! of the first backing file, before the slots (which follow it, so rows
//! stay page-aligned), and a joiner compares it with its own and refuses a
//! mismatch, naming both.  Later segment files hold slots only: their
//! number and sizes are part of the layout.
//!
//! The header is written through a shared mapping (hugetlbfs has no
//! `write`), body first and the magic number last with release ordering;
//! a reader loads the magic with acquire ordering, so once it sees the
//! magic it sees the whole body.  All fields are little-endian:
//!
//! | bytes  | field                                                  |
//! |--------|--------------------------------------------------------|
//! | 0..8   | magic `KVTIERRG`                                       |
//! | 8..12  | format version ([`FORMAT_VERSION`])                    |
//! | 12..16 | zero                                                   |
//! | 16..24 | header bytes (the page size: where slot 0 starts)      |
//! | 24..32 | slot count                                             |
//! | 32..40 | slot bytes (the row stride)                            |
//! | 40..48 | worker area bytes (0: rows not split per worker)       |
//! | 48..56 | number of backing files                                |
//! | 56..64 | total slot bytes                                       |
//! | 64..72 | FNV-1a 64 of bytes 8..64                               |

use std::fs::File;
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};

use super::options::{Geometry, RegionOptions};
use crate::error::{Error, Result};

/// The first eight bytes of a region file of this format.
pub(crate) const MAGIC: u64 = u64::from_le_bytes(*b"KVTIERRG");

/// Version of the header's format; a file of another version is refused.
pub(crate) const FORMAT_VERSION: u32 = 1;

/// Bytes of the header that carry data (the rest of its page is zero).
pub(crate) const LEN: usize = 72;

/// What every process of one region must agree on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Layout {
    /// Bytes before slot 0 in the first file (one page).
    pub(crate) header_bytes: u64,
    /// Number of slots (rows).
    pub(crate) slot_count: u64,
    /// Bytes per slot, the row stride.
    pub(crate) slot_bytes: u64,
    /// Bytes of each worker's area in a row; 0 when rows are not split.
    pub(crate) worker_bytes: u64,
    /// Number of backing files.
    pub(crate) segments: u64,
    /// Bytes of all slots.
    pub(crate) total: u64,
}

impl Layout {
    /// The layout these options and their geometry ask for.
    pub(crate) fn of(o: &RegionOptions, g: &Geometry) -> Layout {
        Layout {
            header_bytes: g.header as u64,
            slot_count: o.slot_count as u64,
            slot_bytes: o.slot_bytes as u64,
            worker_bytes: o.worker_bytes as u64,
            segments: g.segments.len() as u64,
            total: g.total as u64,
        }
    }

    fn body(&self) -> [u8; LEN - 8] {
        let mut b = [0u8; LEN - 8];
        b[0..4].copy_from_slice(&FORMAT_VERSION.to_le_bytes());
        let fields = [
            self.header_bytes,
            self.slot_count,
            self.slot_bytes,
            self.worker_bytes,
            self.segments,
            self.total,
        ];
        for (i, v) in fields.iter().enumerate() {
            b[8 + 8 * i..16 + 8 * i].copy_from_slice(&v.to_le_bytes());
        }
        let sum = fnv1a(&b[..56]);
        b[56..64].copy_from_slice(&sum.to_le_bytes());
        b
    }
}

impl std::fmt::Display for Layout {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{} slots of {} bytes, ",
            self.slot_count, self.slot_bytes
        )?;
        if self.worker_bytes == 0 {
            write!(f, "no worker areas")?;
        } else {
            write!(f, "worker areas of {} bytes", self.worker_bytes)?;
        }
        write!(
            f,
            ", {} backing file(s), a {}-byte header",
            self.segments, self.header_bytes
        )
    }
}

fn fnv1a(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |h, &b| {
        (h ^ b as u64).wrapping_mul(0x0100_0000_01b3)
    })
}

fn u64_at(b: &[u8], at: usize) -> u64 {
    let mut v = [0u8; 8];
    v.copy_from_slice(&b[at..at + 8]);
    u64::from_le_bytes(v)
}

/// What the start of an existing first backing file holds.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Found {
    /// No magic yet: its creator has not written the header (or the file
    /// is not a region file of this format, if it is already larger).
    NotWritten,
    /// A header that cannot be read as one of this format; why.
    Foreign(String),
    /// A header of this format.
    Layout(Layout),
}

/// Maps the first `bytes` bytes of `file` shared and writable.
fn map(file: &File, bytes: usize, path: &Path) -> Result<memmap2::MmapMut> {
    // SAFETY: the mapping is only read and written through the atomic
    // magic and plain byte copies, as the protocol above describes; other
    // processes writing it concurrently cannot break memory safety here.
    unsafe { memmap2::MmapOptions::new().len(bytes).map_mut(file) }.map_err(|e| {
        Error::io(
            format!("mapping the layout header of {}", path.display()),
            e,
        )
    })
}

fn magic(m: &memmap2::MmapMut) -> &AtomicU64 {
    // SAFETY: a mapping starts on a page boundary, so its first 8 bytes are
    // aligned for an `AtomicU64`, and they stay mapped while `m` lives.
    unsafe { AtomicU64::from_ptr(m.as_ptr() as *mut u64) }
}

/// Writes `layout` into the first `layout.header_bytes` of `file`, which
/// is that long and zero: the body, then the magic with release ordering.
pub(crate) fn write(file: &File, path: &Path, layout: &Layout) -> Result<()> {
    let mut m = map(file, layout.header_bytes as usize, path)?;
    m[8..LEN].copy_from_slice(&layout.body());
    magic(&m).store(MAGIC, Ordering::Release);
    Ok(())
}

/// Reads the header at the start of `file`, at least `bytes` (a page) long.
pub(crate) fn read(file: &File, path: &Path, bytes: usize) -> Result<Found> {
    let m = map(file, bytes, path)?;
    let seen = magic(&m).load(Ordering::Acquire);
    Ok(parse(seen, &m[..LEN]))
}

/// The header whose magic is `seen` and whose first [`LEN`] bytes are
/// `b` (read after the magic).
pub(crate) fn parse(seen: u64, b: &[u8]) -> Found {
    if seen == 0 {
        return Found::NotWritten;
    }
    if seen != MAGIC {
        return Found::Foreign("it does not start with a kvtier region's layout header".into());
    }
    let version = u32::from_le_bytes([b[8], b[9], b[10], b[11]]);
    if version != FORMAT_VERSION {
        return Found::Foreign(format!(
            "its layout header is of format version {version}, and this kvtier reads version {FORMAT_VERSION}"
        ));
    }
    if fnv1a(&b[8..64]) != u64_at(b, 64) {
        return Found::Foreign("its layout header is damaged (checksum mismatch)".into());
    }
    Found::Layout(Layout {
        header_bytes: u64_at(b, 16),
        slot_count: u64_at(b, 24),
        slot_bytes: u64_at(b, 32),
        worker_bytes: u64_at(b, 40),
        segments: u64_at(b, 48),
        total: u64_at(b, 56),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn layout() -> Layout {
        Layout {
            header_bytes: 4096,
            slot_count: 128,
            slot_bytes: 8192,
            worker_bytes: 0,
            segments: 1,
            total: 1 << 20,
        }
    }

    fn file_with(bytes: &[u8]) -> (tempfile::NamedTempFile, File) {
        let t = tempfile::NamedTempFile::new().unwrap();
        let f = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .open(t.path())
            .unwrap();
        f.set_len(4096).unwrap();
        use std::os::unix::fs::FileExt;
        f.write_all_at(bytes, 0).unwrap();
        (t, f)
    }

    #[test]
    fn a_written_header_reads_back_and_damage_is_caught() {
        let (t, f) = file_with(&[]);
        assert_eq!(read(&f, t.path(), 4096).unwrap(), Found::NotWritten);
        write(&f, t.path(), &layout()).unwrap();
        assert_eq!(read(&f, t.path(), 4096).unwrap(), Found::Layout(layout()));
        use std::os::unix::fs::FileExt;
        let mut page = vec![0u8; 4096];
        f.read_exact_at(&mut page, 0).unwrap();
        assert_eq!(&page[..8], b"KVTIERRG");
        assert!(page[LEN..].iter().all(|&b| b == 0));
        // Every field is covered by the checksum; the version is checked.
        for at in [16, 24, 39, 40, 48, 63, 64] {
            let mut bad = page.clone();
            bad[at] ^= 1;
            let (t, f) = file_with(&bad);
            assert!(
                matches!(read(&f, t.path(), 4096).unwrap(), Found::Foreign(m) if m.contains("damaged")),
                "byte {at}"
            );
        }
        let mut other = page.clone();
        other[8] = 2;
        let (t, f) = file_with(&other);
        let Found::Foreign(m) = read(&f, t.path(), 4096).unwrap() else {
            panic!("version 2 read as this format")
        };
        assert!(m.contains("format version 2"), "{m}");
        let (t, f) = file_with(b"not a region");
        assert!(matches!(
            read(&f, t.path(), 4096).unwrap(),
            Found::Foreign(_)
        ));
    }

    #[test]
    fn layouts_describe_themselves() {
        let mut l = layout();
        assert_eq!(
            l.to_string(),
            "128 slots of 8192 bytes, no worker areas, 1 backing file(s), a 4096-byte header"
        );
        l.worker_bytes = 4096;
        assert!(l.to_string().contains("worker areas of 4096 bytes"));
    }
}
