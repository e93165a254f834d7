//! The layout marker: the file `kvtier-layout` in the tier's root holding
//! the layout fingerprint the directory's blocks belong to (the
//! fingerprint and a newline).
//!
//! A tier opened with a fingerprint adopts the directory when it has no
//! marker (writes one: a temporary file linked under the name, so a
//! concurrent opener finds the whole file or none, and the first of two
//! racing openers wins), and refuses it when the marker names another
//! fingerprint.  The marker is read the way the tier reads everything in
//! its directory (`beneath.rs`): never through a symlink, never waiting on
//! a FIFO; a marker that is not a regular file of the tier's user, is
//! larger than a fingerprint can be, or does not hold one is refused
//! with an error saying so, never taken for a match.

use std::path::Path;

use super::beneath::{self, FOREIGN, Fd};
use crate::error::{Error, Result};
use crate::tiers::layout::{MAX_FINGERPRINT_LEN, check_fingerprint, mismatch};

/// The marker's name in the root.
pub const MARKER_NAME: &str = "kvtier-layout";
const MARKER_C: &std::ffi::CStr = c"kvtier-layout";

fn io(what: String, errno: i32) -> Error {
    Error::io(what, std::io::Error::from_raw_os_error(errno))
}

fn root_fd(root: &Path) -> Result<Fd> {
    let c =
        beneath::c_path(root).map_err(|e| io(format!("fs tier: opening {}", root.display()), e))?;
    beneath::open_root(&c).map_err(|e| io(format!("fs tier: opening {}", root.display()), e))
}

/// The fingerprint the marker of `root` names, `None` without a marker.
pub fn read(root: &Path) -> Result<Option<String>> {
    read_at(&root_fd(root)?, root)
}

fn read_at(dir: &Fd, root: &Path) -> Result<Option<String>> {
    let path = root.join(MARKER_NAME);
    let refuse = |why: String| {
        Err(Error::InvalidArgument(format!(
            "fs tier: layout marker {}: {why}; remove it if the directory is the tier's",
            path.display()
        )))
    };
    let (fd, st) = match beneath::open_at(dir.0, MARKER_C, libc::O_RDONLY, 0, false) {
        Ok(f) => f,
        Err(libc::ENOENT) => return Ok(None),
        Err(FOREIGN) => {
            let kind = beneath::lstat_at(dir.0, MARKER_C)
                .map(|st| beneath::kind_name(st.st_mode))
                .unwrap_or("other");
            return refuse(format!("a {kind}, not a regular file"));
        }
        Err(e) => return Err(io(format!("fs tier: opening {}", path.display()), e)),
    };
    // SAFETY: geteuid cannot fail.
    let me = unsafe { libc::geteuid() };
    if st.st_uid != me {
        return refuse(format!(
            "owned by user {}, not by this process's user {me}",
            st.st_uid
        ));
    }
    let limit = MAX_FINGERPRINT_LEN + 1;
    if st.st_size as u64 > limit as u64 {
        return refuse(format!(
            "{} bytes, more than a fingerprint can be",
            st.st_size
        ));
    }
    let mut buf = vec![0u8; limit + 1];
    let mut len = 0;
    while len < buf.len() {
        // SAFETY: reading into the unfilled tail of an owned buffer.
        let n = unsafe { libc::read(fd.0, buf[len..].as_mut_ptr().cast(), buf.len() - len) };
        match n {
            0 => break,
            n if n > 0 => len += n as usize,
            _ => match beneath::errno() {
                libc::EINTR => {}
                e => return Err(io(format!("fs tier: reading {}", path.display()), e)),
            },
        }
    }
    let text = match buf[..len].strip_suffix(b"\n").map(std::str::from_utf8) {
        Some(Ok(t)) if check_fingerprint("", t).is_ok() => t,
        _ => return refuse("not a layout fingerprint and a newline".into()),
    };
    Ok(Some(text.to_string()))
}

/// Checks `root` against `fingerprint`: adopts a directory without a
/// marker (writes one, with `file_mode`), accepts the same fingerprint,
/// refuses another naming both.
pub(super) fn settle(root: &Path, fingerprint: &str, file_mode: u32) -> Result<()> {
    let dir = root_fd(root)?;
    let refused = |stored: &str| {
        mismatch(
            &format!("fs tier directory {}", root.display()),
            stored,
            fingerprint,
            "directory, or remove its blocks with `kvtier-inspect clear DIR --fingerprint OLD`",
        )
    };
    if let Some(stored) = read_at(&dir, root)? {
        return if stored == fingerprint {
            Ok(())
        } else {
            Err(refused(&stored))
        };
    }
    write(&dir, root, fingerprint, file_mode)?;
    // Another opener may have won the race: what is there now is the rule.
    match read_at(&dir, root)? {
        Some(stored) if stored == fingerprint => Ok(()),
        Some(stored) => Err(refused(&stored)),
        None => Err(Error::InvalidArgument(format!(
            "fs tier: the layout marker of {} vanished while it was written",
            root.display()
        ))),
    }
}

/// Writes the marker if none is there: a temporary file, written whole,
/// then linked under the marker's name (which fails if one appeared).
fn write(dir: &Fd, root: &Path, fingerprint: &str, file_mode: u32) -> Result<()> {
    static N: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let n = N.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let temp = std::ffi::CString::new(format!(".{MARKER_NAME}.{}.{n}.tmp", std::process::id()))
        .expect("no NUL");
    let what = || format!("fs tier: writing the layout marker of {}", root.display());
    let flags = libc::O_WRONLY | libc::O_CREAT | libc::O_EXCL;
    let (fd, st) =
        beneath::open_at(dir.0, &temp, flags, file_mode, false).map_err(|e| io(what(), e))?;
    let text = format!("{fingerprint}\n");
    let written = write_all(fd.0, text.as_bytes()).and_then(|()| {
        // SAFETY: an open descriptor.
        if unsafe { libc::fsync(fd.0) } != 0 {
            return Err(beneath::errno());
        }
        // SAFETY: NUL-terminated names relative to an open directory.
        match unsafe { libc::linkat(dir.0, temp.as_ptr(), dir.0, MARKER_C.as_ptr(), 0) } {
            0 => Ok(()),
            _ if beneath::errno() == libc::EEXIST => Ok(()),
            _ => Err(beneath::errno()),
        }
    });
    drop(fd);
    let _ = beneath::unlink_same(dir.0, &temp, &st);
    written.map_err(|e| io(what(), e))?;
    // SAFETY: an open directory descriptor.
    unsafe { libc::fsync(dir.0) };
    Ok(())
}

pub(super) fn write_all(fd: i32, mut bytes: &[u8]) -> std::result::Result<(), i32> {
    while !bytes.is_empty() {
        // SAFETY: writing from a live slice.
        let n = unsafe { libc::write(fd, bytes.as_ptr().cast(), bytes.len()) };
        if n < 0 {
            match beneath::errno() {
                libc::EINTR => continue,
                e => return Err(e),
            }
        }
        bytes = &bytes[n as usize..];
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn dir(name: &str) -> std::path::PathBuf {
        let d = std::env::temp_dir().join(format!("kvtier-marker-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).unwrap();
        d
    }

    #[test]
    fn the_first_fingerprint_is_adopted_and_another_refused() {
        let d = dir("adopt");
        assert_eq!(read(&d).unwrap(), None);
        settle(&d, "m|bf16|16", 0o600).unwrap();
        assert_eq!(read(&d).unwrap().as_deref(), Some("m|bf16|16"));
        settle(&d, "m|bf16|16", 0o600).unwrap();
        let e = settle(&d, "m|fp8|16", 0o600).unwrap_err().to_string();
        assert!(
            e.contains("\"m|bf16|16\"") && e.contains("\"m|fp8|16\""),
            "{e}"
        );
        // No temporary file is left, and the marker has the tier's mode.
        let names: Vec<_> = std::fs::read_dir(&d)
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert_eq!(names, [MARKER_NAME]);
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(d.join(MARKER_NAME))
            .unwrap()
            .permissions()
            .mode();
        assert_eq!(mode & 0o777, 0o600);
        std::fs::remove_dir_all(&d).unwrap();
    }

    #[test]
    fn garbage_and_oversized_markers_are_refused() {
        let d = dir("garbage");
        std::fs::write(d.join(MARKER_NAME), b"no newline").unwrap();
        let e = settle(&d, "x", 0o600).unwrap_err().to_string();
        assert!(e.contains("not a layout fingerprint"), "{e}");
        std::fs::write(d.join(MARKER_NAME), vec![b'a'; 4096]).unwrap();
        let e = read(&d).unwrap_err().to_string();
        assert!(e.contains("4096 bytes"), "{e}");
        std::fs::write(d.join(MARKER_NAME), b"\x01\x02\n").unwrap();
        assert!(read(&d).is_err());
        std::fs::remove_dir_all(&d).unwrap();
    }
}
