//! Removing a directory's blocks: every block file and temporary file
//! under the fan-out directories (which go too, once empty) and every
//! segment file, and the index persisted at shutdown (it would describe
//! blocks no longer there), leaving the root, its layout marker, the
//! segments lock and anything that is not the tier's.  The tier does it at shutdown with
//! `clear_on_shutdown`; `kvtier-inspect clear` does it offline, after
//! checking the layout fingerprint.  Like every walk of the directory it
//! stays beneath the root (`beneath.rs`): no symlink is followed, and a
//! symlink, FIFO or other foreign entry under a tier name is left in
//! place and counted.

use std::path::Path;

use super::beneath::{self, FOREIGN};
use super::marker;
use super::segments::{SEGMENTS_DIR, lock_dir};
use crate::error::{Error, Result};
use crate::tiers::layout::{check_fingerprint, mismatch};

/// What a clear did.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ClearReport {
    /// Block, segment and temporary files removed.
    pub files_removed: u64,
    /// Entries under the tier's names left in place: not regular files
    /// (symlinks, FIFOs, ...), or files that could not be removed.
    pub left: u64,
}

fn is_fanout(name: &[u8]) -> bool {
    name.len() == 2 && name.iter().all(|b| b.is_ascii_hexdigit())
}

/// Removes the regular files of `dir` whose names `ours` accepts.
fn clear_in(dir: i32, ours: impl Fn(&[u8]) -> bool, report: &mut ClearReport) -> Result<(), i32> {
    for name in beneath::list(dir)? {
        if !ours(name.as_encoded_bytes()) {
            continue;
        }
        match beneath::unlink_regular(dir, &beneath::c_name(&name)) {
            Ok(true) => report.files_removed += 1,
            Ok(false) => {}
            Err(_) => report.left += 1,
        }
    }
    Ok(())
}

/// Removes the blocks of the tier directory `root` (see the module docs).
pub fn clear_blocks(root: &Path) -> Result<ClearReport> {
    let fail = |e: i32| {
        Error::io(
            format!("fs tier: clearing {}", root.display()),
            std::io::Error::from_raw_os_error(e),
        )
    };
    let c = beneath::c_path(root).map_err(fail)?;
    let dir = beneath::open_root(&c).map_err(fail)?;
    let mut report = ClearReport::default();
    // Not counted: it is no block.
    let index = std::ffi::CString::new(super::snapshot::INDEX_NAME).expect("no NUL");
    match beneath::unlink_regular(dir.0, &index) {
        Ok(_) => {}
        Err(FOREIGN) => report.left += 1,
        Err(e) => return Err(fail(e)),
    }
    let block = |n: &[u8]| n.ends_with(b".kvb") || n.ends_with(b".tmp");
    for name in beneath::list(dir.0).map_err(fail)? {
        let bytes = name.as_encoded_bytes();
        let segments = bytes == SEGMENTS_DIR.as_bytes();
        if !segments && !is_fanout(bytes) {
            continue;
        }
        let c_name = beneath::c_name(&name);
        let sub = match beneath::subdir(dir.0, &c_name, None, || ()) {
            Ok(sub) => sub,
            Err(libc::ENOENT | libc::ENOTDIR) => continue,
            Err(FOREIGN) => {
                report.left += 1;
                continue;
            }
            Err(e) => return Err(fail(e)),
        };
        if segments {
            clear_in(sub.0, |n| n.ends_with(b".kvs"), &mut report).map_err(fail)?;
        } else {
            clear_in(sub.0, block, &mut report).map_err(fail)?;
            drop(sub);
            // Gone once empty; something of someone else's keeps it.
            // SAFETY: NUL-terminated name relative to an open directory.
            unsafe { libc::unlinkat(dir.0, c_name.as_ptr(), libc::AT_REMOVEDIR) };
        }
    }
    Ok(report)
}

/// Removes the blocks of `root` (as [`clear_blocks`]) only if its layout
/// marker names `fingerprint`: the offline way to drop one layout's blocks
/// (at a model upgrade, say).  Refused, with nothing removed, for a
/// directory marked with another fingerprint (naming both), one without a
/// marker, and one whose segments a running tier holds.
pub fn clear_layout(root: &Path, fingerprint: &str) -> Result<ClearReport> {
    check_fingerprint("--fingerprint", fingerprint)?;
    match marker::read(root)? {
        Some(f) if f == fingerprint => {}
        Some(f) => {
            return Err(mismatch(
                &format!("fs tier directory {}", root.display()),
                &f,
                fingerprint,
                "--fingerprint (the directory's own) to clear it",
            ));
        }
        None => {
            return Err(Error::InvalidArgument(format!(
                "fs tier directory {} has no layout marker ({}): the layout of its blocks is unknown, so nothing is removed",
                root.display(),
                marker::MARKER_NAME
            )));
        }
    }
    // A tier running on the segments layout holds their lock: refused.
    let seg_path = root.join(SEGMENTS_DIR);
    let _lock = match std::fs::symlink_metadata(&seg_path) {
        Ok(m) if m.is_dir() => {
            let fail = |e: i32| {
                Error::io(
                    format!("fs tier: opening {}", seg_path.display()),
                    std::io::Error::from_raw_os_error(e),
                )
            };
            let c = beneath::c_path(root).map_err(fail)?;
            let dir = beneath::open_root(&c).map_err(fail)?;
            let seg = beneath::subdir(dir.0, c"segments", None, || ()).map_err(fail)?;
            Some(lock_dir(&seg, &seg_path, 0o600)?)
        }
        _ => None,
    };
    clear_blocks(root)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn blocks_go_and_the_marker_and_foreign_entries_stay() {
        let d = std::env::temp_dir().join(format!("kvtier-clear-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(d.join("ab")).unwrap();
        std::fs::create_dir_all(d.join("cd")).unwrap();
        std::fs::create_dir_all(d.join("segments")).unwrap();
        std::fs::write(d.join("ab/00.kvb"), b"x").unwrap();
        std::fs::write(d.join("ab/.00.1.2.tmp"), b"x").unwrap();
        std::fs::write(d.join("cd/11.kvb"), b"x").unwrap();
        std::fs::write(d.join("cd/notes.txt"), b"mine").unwrap();
        std::os::unix::fs::symlink("/etc/passwd", d.join("cd/22.kvb")).unwrap();
        std::fs::write(d.join("segments/4096-0.kvs"), b"x").unwrap();
        std::fs::write(d.join("segments/lock"), b"").unwrap();
        std::fs::write(d.join("kvtier-layout"), b"f\n").unwrap();
        std::fs::write(d.join("kvtier-index"), b"x").unwrap();
        let r = clear_blocks(&d).unwrap();
        assert_eq!(
            r,
            ClearReport {
                files_removed: 4,
                left: 1
            }
        );
        assert!(!d.join("ab").exists(), "an emptied fan-out directory goes");
        assert!(d.join("cd/notes.txt").exists() && d.join("segments/lock").exists());
        assert!(std::fs::symlink_metadata(d.join("cd/22.kvb")).is_ok());
        assert!(std::path::Path::new("/etc/passwd").exists());
        assert!(d.join("kvtier-layout").exists());
        assert!(!d.join("kvtier-index").exists(), "the persisted index goes");
        std::fs::remove_dir_all(&d).unwrap();
    }

    #[test]
    fn clearing_by_layout_needs_the_matching_marker() {
        let d = std::env::temp_dir().join(format!("kvtier-clear-layout-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(d.join("ab")).unwrap();
        std::fs::write(d.join("ab/00.kvb"), b"x").unwrap();
        let e = clear_layout(&d, "old").unwrap_err().to_string();
        assert!(e.contains("no layout marker"), "{e}");
        std::fs::write(d.join(marker::MARKER_NAME), b"old\n").unwrap();
        let e = clear_layout(&d, "new").unwrap_err().to_string();
        assert!(e.contains("\"old\"") && e.contains("\"new\""), "{e}");
        assert!(d.join("ab/00.kvb").exists());
        assert_eq!(clear_layout(&d, "old").unwrap().files_removed, 1);
        assert!(!d.join("ab").exists() && d.join(marker::MARKER_NAME).exists());
        std::fs::remove_dir_all(&d).unwrap();
    }
}
