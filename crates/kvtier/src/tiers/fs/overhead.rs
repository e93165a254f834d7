//! The bytes a stored block costs beyond its data, and the warning a tier
//! logs at open when they are a large share of its capacity.
//!
//! Both layouts store a block behind the same [`HEADER_LEN`]-byte header
//! (a block file is header then data; a segment record is a block file's
//! bytes), and both count header and data against `capacity_bytes`: the
//! share of the capacity spent on headers is `HEADER_LEN / (HEADER_LEN +
//! block_bytes)` whichever the layout, half of it at 4 KiB blocks, a fifth
//! at 16 KiB, under 1% from 512 KiB.  The header is part of the on-disk
//! format and does not change with the block size; larger blocks are what
//! makes it small.  What the segments layout saves over a file per block
//! is the file system's own cost of each file (an inode, a directory entry,
//! the creation and link of every store), not the header.  The table and
//! the rule of thumb are in docs/tiers.md ("Space per block").

use std::path::Path;

use super::FsLayout;
use super::format::{HEADER_LEN, file_len};

/// Share of a stored block's bytes taken by its header above which a tier
/// warns when it opens.
pub(super) const WARN_ABOVE: f64 = 0.10;

/// The share of each stored block's bytes (header included) that is its
/// header, in either layout.
pub(super) fn header_share(block_bytes: usize) -> f64 {
    HEADER_LEN as f64 / file_len(block_bytes) as f64
}

/// The warning for blocks of `block_bytes` in `layout` under `root`, if
/// their headers take more than [`WARN_ABOVE`] of each block's bytes.
fn warning(root: &Path, layout: FsLayout, block_bytes: usize) -> Option<String> {
    let share = header_share(block_bytes);
    if share <= WARN_ABOVE {
        return None;
    }
    // The smallest block whose header is at most WARN_ABOVE of it: 9 headers.
    let enough = HEADER_LEN * 9;
    let (unit, advice) = match layout {
        FsLayout::Files => (
            "block file",
            "; the segments layout (\"layout\": \"segments\") has the same header but \
             spares each block its own file (inode, directory entry, creation), for a \
             directory one process uses (docs/tiers.md, \"Space per block\")",
        ),
        FsLayout::Segments => ("record", " (docs/tiers.md, \"Space per block\")"),
    };
    Some(format!(
        "fs tier {}: each block of {block_bytes} bytes is stored with a {HEADER_LEN}-byte \
         header, {:.1}% of every {unit} and of capacity_bytes; blocks of {enough} bytes or \
         more keep it at {:.0}% or less{advice}",
        root.display(),
        share * 100.0,
        WARN_ABOVE * 100.0,
    ))
}

/// Logs (at warn, through the engine's log sink if it installed one) that
/// headers take a large share of the capacity, when they do.
pub(super) fn warn_if_costly(root: &Path, layout: FsLayout, block_bytes: usize) {
    if let Some(w) = warning(root, layout, block_bytes) {
        log::warn!(target: "kvtier::fs", "{w}");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_header_share_by_block_size() {
        assert_eq!(header_share(4096), 0.5);
        assert_eq!(header_share(16 << 10), 0.2);
        assert_eq!(header_share(36 << 10), 0.1);
        assert!(header_share(2 << 20) < 0.002);
    }

    #[test]
    fn small_blocks_warn_with_the_share_and_large_ones_do_not() {
        let root = Path::new("/nvme/kv");
        let files = warning(root, FsLayout::Files, 16 << 10).unwrap();
        assert!(files.starts_with("fs tier /nvme/kv: "), "{files}");
        assert!(files.contains("16384 bytes"), "{files}");
        assert!(
            files.contains("4096-byte header, 20.0% of every block file"),
            "{files}"
        );
        assert!(files.contains("blocks of 36864 bytes or more keep it at 10% or less"));
        assert!(files.contains("\"layout\": \"segments\""), "{files}");
        let records = warning(root, FsLayout::Segments, 32 << 10).unwrap();
        assert!(records.contains("11.1% of every record"), "{records}");
        assert!(!records.contains("\"layout\""), "{records}");
        // At 10% exactly, and above it, nothing.
        for layout in [FsLayout::Files, FsLayout::Segments] {
            assert_eq!(warning(root, layout, 36 << 10), None);
            assert_eq!(warning(root, layout, 64 << 10), None);
            assert_eq!(warning(root, layout, 2 << 20), None);
        }
        assert!(warning(root, FsLayout::Files, (36 << 10) - 1).is_some());
    }
}
