//! The persisted index's file operations in the tier's root (see
//! `snapshot.rs`), done as the tier does everything in its directory
//! (`beneath.rs`): never through a symlink, never waiting on a FIFO, only
//! regular files of the tier's user, sizes checked before anything is
//! read, files replaced by a temporary file renamed over them.

use std::ffi::CStr;
use std::path::Path;
use std::time::Duration;

use super::beneath::{self, FOREIGN, Fd};
use super::snapshot_format::MAX_GENERATION_LEN;

/// The index file's name in the root.
pub(crate) const INDEX_NAME: &str = "kvtier-index";
pub(super) const INDEX_C: &CStr = c"kvtier-index";
/// The generation file's name in the root.
pub(crate) const GENERATION_NAME: &str = "kvtier-generation";
pub(super) const GENERATION_C: &CStr = c"kvtier-generation";

pub(super) fn root_fd(root: &Path) -> Result<Fd, i32> {
    beneath::open_root(&beneath::c_path(root)?)
}

/// Opens regular file `name` of `dir` for reading as the tier opens its
/// block files, and checks it is the tier user's and at most `max` bytes
/// long; `Ok(None)` when absent.
pub(super) fn open_checked(dir: &Fd, name: &CStr, max: u64) -> Result<Option<(Fd, u64)>, String> {
    let (fd, st) = match beneath::open_at(dir.0, name, libc::O_RDONLY, 0, false) {
        Ok(f) => f,
        Err(libc::ENOENT) => return Ok(None),
        Err(FOREIGN) => {
            let kind = beneath::lstat_at(dir.0, name)
                .map(|st| beneath::kind_name(st.st_mode))
                .unwrap_or("other");
            return Err(format!("a {kind}, not a regular file"));
        }
        Err(e) => return Err(std::io::Error::from_raw_os_error(e).to_string()),
    };
    // SAFETY: geteuid cannot fail.
    let me = unsafe { libc::geteuid() };
    if st.st_uid != me {
        return Err(format!("owned by user {}, not by {me}", st.st_uid));
    }
    let len = st.st_size.max(0) as u64;
    if len > max {
        return Err(format!("{len} bytes, more than {max}"));
    }
    Ok(Some((fd, len)))
}

/// Reads exactly `buf.len()` bytes at `offset`.
pub(super) fn read_exact(fd: &Fd, buf: &mut [u8], offset: u64) -> Result<(), String> {
    let mut done = 0;
    while done < buf.len() {
        let rest = &mut buf[done..];
        // SAFETY: reading into a live slice of an owned buffer.
        let n = unsafe {
            libc::pread(
                fd.0,
                rest.as_mut_ptr().cast(),
                rest.len(),
                (offset + done as u64) as libc::off_t,
            )
        };
        match n {
            0 => return Err("shorter than its header says".into()),
            n if n > 0 => done += n as usize,
            _ => match beneath::errno() {
                libc::EINTR => {}
                e => return Err(std::io::Error::from_raw_os_error(e).to_string()),
            },
        }
    }
    Ok(())
}

/// The directory's generation (0 without a generation file).
pub(super) fn read_generation(dir: &Fd) -> Result<u64, String> {
    let Some((fd, len)) = open_checked(dir, GENERATION_C, MAX_GENERATION_LEN as u64)? else {
        return Ok(0);
    };
    let mut buf = vec![0u8; len as usize];
    read_exact(&fd, &mut buf, 0)?;
    std::str::from_utf8(&buf)
        .ok()
        .and_then(|t| t.strip_suffix('\n'))
        .and_then(|t| t.parse().ok())
        .ok_or_else(|| "not a number and a newline".to_string())
}

/// Writes `bytes` to a new temporary file of `dir` (mode `mode`),
/// `fsync`s it when `sync`, and renames it over `name`.
pub(super) fn replace(
    dir: &Fd,
    name: &str,
    bytes: &[&[u8]],
    mode: u32,
    sync: bool,
) -> Result<(), i32> {
    static N: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let n = N.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let temp =
        std::ffi::CString::new(format!(".{name}.{}.{n}.tmp", std::process::id())).expect("no NUL");
    let target = std::ffi::CString::new(name).expect("no NUL");
    let flags = libc::O_WRONLY | libc::O_CREAT | libc::O_EXCL;
    let (fd, st) = beneath::open_at(dir.0, &temp, flags, mode, false)?;
    let written = bytes
        .iter()
        .try_for_each(|b| super::marker::write_all(fd.0, b))
        .and_then(|()| {
            // SAFETY: an open descriptor.
            if sync && unsafe { libc::fsync(fd.0) } != 0 {
                return Err(beneath::errno());
            }
            // SAFETY: NUL-terminated names relative to an open directory.
            match unsafe { libc::renameat(dir.0, temp.as_ptr(), dir.0, target.as_ptr()) } {
                0 => Ok(()),
                _ => Err(beneath::errno()),
            }
        });
    drop(fd);
    if written.is_err() {
        let _ = beneath::unlink_same(dir.0, &temp, &st);
    }
    written
}

/// `fsync` of directory `dir`.
pub(super) fn sync_dir(dir: &Fd) -> Result<(), i32> {
    // SAFETY: an open directory descriptor.
    match unsafe { libc::fsync(dir.0) } {
        0 => Ok(()),
        _ => Err(beneath::errno()),
    }
}

/// Removes the temporary files of index and generation writers that
/// are gone (dead on this host, or older than `max_age`).
pub(super) fn remove_dead_temps(dir: &Fd, max_age: Duration) {
    let Ok(names) = beneath::list(dir.0) else {
        return;
    };
    for name in names {
        let Some(pid) = name.to_str().and_then(temp_writer) else {
            continue;
        };
        let c = beneath::c_name(&name);
        if let Ok(st) = beneath::lstat_at(dir.0, &c)
            && beneath::is_regular(&st)
            && super::rebuild::stale_temp(&st, Some(pid), max_age)
        {
            let _ = beneath::unlink_same(dir.0, &c, &st);
        }
    }
}

/// The writer's pid in the name of a temporary index or generation file
/// (`.<name>.<pid>.<n>.tmp`).
pub(super) fn temp_writer(name: &str) -> Option<u32> {
    let rest = [INDEX_NAME, GENERATION_NAME]
        .iter()
        .find_map(|n| name.strip_prefix('.')?.strip_prefix(n)?.strip_prefix('.'))?;
    let mut parts = rest.split('.');
    let pid = parts.next()?.parse().ok()?;
    parts.next()?.parse::<u64>().ok()?;
    (parts.next() == Some("tmp") && parts.next().is_none()).then_some(pid)
}
