//! System calls behind the region: locks, identity checks, free space,
//! address-space reservation, and pre-faulting.  Each wrapper turns an OS
//! failure into an [`Error`] naming what was being done.

use std::fs::File;
use std::io;
use std::os::fd::AsRawFd;
use std::os::unix::fs::MetadataExt;
use std::path::Path;
use std::ptr::NonNull;
use std::sync::atomic::{AtomicU8, Ordering};
use std::time::{Duration, Instant};

use crate::error::{Error, Result};

/// `MADV_POPULATE_WRITE` (Linux 5.14): fault pages in writable without
/// touching their bytes.  Spelled out because older libc headers lack it.
pub(crate) const MADV_POPULATE_WRITE: libc::c_int = 23;

/// `HUGETLBFS_MAGIC` from `statfs(2)`: on hugetlbfs the page is the huge page.
const HUGETLBFS_MAGIC: i64 = 0x9584_58f6;

/// The system page size.
pub(crate) fn system_page_size() -> usize {
    // SAFETY: sysconf has no memory-safety preconditions.
    let n = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    if n > 0 { n as usize } else { 4096 }
}

/// The page size that backing files in `dir` are mapped with: the huge
/// page size on hugetlbfs, else the system page size.
pub(crate) fn page_size_for(dir: &Path) -> Result<usize> {
    let c = cpath(dir)?;
    // SAFETY: statfs is plain data, valid when zeroed.
    let mut s: libc::statfs = unsafe { std::mem::zeroed() };
    // SAFETY: `c` is NUL-terminated and `s` is a valid out-parameter.
    if unsafe { libc::statfs(c.as_ptr(), &mut s) } != 0 {
        return Err(Error::last_os(format!("statfs {}", dir.display())));
    }
    if s.f_type as i64 == HUGETLBFS_MAGIC && s.f_bsize > 0 {
        Ok(s.f_bsize as usize)
    } else {
        Ok(system_page_size())
    }
}

/// Bytes available to unprivileged users on the file system holding `dir`.
pub(crate) fn free_bytes(dir: &Path) -> Result<u64> {
    let c = cpath(dir)?;
    // SAFETY: statvfs is plain data, valid when zeroed.
    let mut s: libc::statvfs = unsafe { std::mem::zeroed() };
    // SAFETY: `c` is NUL-terminated and `s` is a valid out-parameter.
    if unsafe { libc::statvfs(c.as_ptr(), &mut s) } != 0 {
        return Err(Error::last_os(format!("statvfs {}", dir.display())));
    }
    Ok((s.f_bavail as u64).saturating_mul(s.f_frsize as u64))
}

fn cpath(p: &Path) -> Result<std::ffi::CString> {
    use std::os::unix::ffi::OsStrExt;
    std::ffi::CString::new(p.as_os_str().as_bytes())
        .map_err(|_| Error::InvalidArgument(format!("path {} contains a NUL byte", p.display())))
}

/// Tries to take a `flock` of kind `op` (`LOCK_SH` or `LOCK_EX`) without
/// blocking: `Ok(true)` if taken, `Ok(false)` if another holder conflicts.
pub(crate) fn try_flock(file: &File, op: libc::c_int, path: &Path) -> Result<bool> {
    loop {
        // SAFETY: the descriptor is open for the duration of the call.
        if unsafe { libc::flock(file.as_raw_fd(), op | libc::LOCK_NB) } == 0 {
            return Ok(true);
        }
        let e = io::Error::last_os_error();
        match e.raw_os_error() {
            Some(libc::EINTR) => continue,
            Some(libc::EWOULDBLOCK) => return Ok(false),
            _ => return Err(Error::io(format!("locking {}", path.display()), e)),
        }
    }
}

/// Takes a shared lock, waiting (until `deadline`) while a process that is
/// checking or replacing a stale file holds it exclusively.
pub(crate) fn lock_shared(file: &File, path: &Path, deadline: Instant) -> Result<()> {
    loop {
        if try_flock(file, libc::LOCK_SH, path)? {
            return Ok(());
        }
        if Instant::now() >= deadline {
            return Err(Error::Timeout(format!(
                "{} stayed locked exclusively by another process",
                path.display()
            )));
        }
        std::thread::sleep(Duration::from_millis(1));
    }
}

fn setup_lock_request(kind: libc::c_short) -> libc::flock {
    // SAFETY: `flock` is plain data; zero is a valid starting value.
    let mut fl: libc::flock = unsafe { std::mem::zeroed() };
    fl.l_type = kind;
    fl.l_whence = libc::SEEK_SET as libc::c_short;
    fl.l_start = 0;
    fl.l_len = 1;
    fl
}

/// Marks `file` as being set up by this process: an open-file-description
/// write lock on its first byte, released when the descriptor closes (also
/// when the process dies).  Independent of the `flock` locks.
pub(crate) fn lock_setup(file: &File, path: &Path) -> Result<()> {
    let fl = setup_lock_request(libc::F_WRLCK as libc::c_short);
    // SAFETY: the descriptor is open and `fl` is a valid lock description.
    if unsafe { libc::fcntl(file.as_raw_fd(), libc::F_OFD_SETLK, &fl) } != 0 {
        return Err(Error::last_os(format!(
            "marking {} as being set up",
            path.display()
        )));
    }
    Ok(())
}

/// Whether some process holds the set-up mark of `file` (its creator is
/// alive).  `None` when the file system cannot tell.
pub(crate) fn setup_in_progress(file: &File) -> Option<bool> {
    let mut fl = setup_lock_request(libc::F_WRLCK as libc::c_short);
    // SAFETY: the descriptor is open and `fl` is a valid lock description.
    if unsafe { libc::fcntl(file.as_raw_fd(), libc::F_OFD_GETLK, &mut fl) } != 0 {
        return None;
    }
    Some(fl.l_type != libc::F_UNLCK as libc::c_short)
}

/// Device and inode of an open file: its identity, independent of names.
pub(crate) type FileId = (u64, u64);

/// The identity of `file`, and whether it still has a name.
pub(crate) fn file_id(file: &File, path: &Path) -> Result<(FileId, bool)> {
    let m = file
        .metadata()
        .map_err(|e| Error::io(format!("fstat {}", path.display()), e))?;
    Ok(((m.dev(), m.ino()), m.nlink() > 0))
}

/// Whether `path` names the file with identity `id` right now.
pub(crate) fn path_is(path: &Path, id: FileId) -> Result<bool> {
    match std::fs::symlink_metadata(path) {
        Ok(m) => Ok((m.dev(), m.ino()) == id),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(false),
        Err(e) => Err(Error::io(format!("stat {}", path.display()), e)),
    }
}

/// Whether `file` is still the file named `path` (not removed or replaced
/// since it was opened).
pub(crate) fn still_named(file: &File, path: &Path) -> Result<bool> {
    let (id, linked) = file_id(file, path)?;
    Ok(linked && path_is(path, id)?)
}

/// Removes `path` if it still names the file `id`; `Ok(true)` if removed.
pub(crate) fn unlink_if(path: &Path, id: FileId) -> Result<bool> {
    if !path_is(path, id)? {
        return Ok(false);
    }
    match std::fs::remove_file(path) {
        Ok(()) => Ok(true),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(false),
        Err(e) => Err(Error::io(format!("removing {}", path.display()), e)),
    }
}

/// Sets the file's length.
pub(crate) fn set_len(file: &File, len: usize, path: &Path) -> Result<()> {
    file.set_len(len as u64)
        .map_err(|e| Error::io(format!("sizing {} to {len} bytes", path.display()), e))
}

/// Reserves `len` bytes of `file` at `offset` on its file system
/// (`fallocate`, mode 0: the file grows to `offset + len` if shorter), so
/// that touching them later can never fail for lack of room (a SIGBUS).
/// `Ok(false)` where the file system cannot reserve (the caller sizes the
/// file instead); a full file system is [`Error::NoSpace`].
pub(crate) fn allocate(file: &File, offset: usize, len: usize, path: &Path) -> Result<bool> {
    let (Ok(off), Ok(n)) = (libc::off_t::try_from(offset), libc::off_t::try_from(len)) else {
        return Err(Error::InvalidArgument(format!(
            "{} bytes at offset {offset} of {} exceed the largest file offset",
            len,
            path.display()
        )));
    };
    loop {
        // SAFETY: the descriptor is open for the duration of the call.
        if unsafe { libc::fallocate(file.as_raw_fd(), 0, off, n) } == 0 {
            return Ok(true);
        }
        let e = io::Error::last_os_error();
        match e.raw_os_error() {
            // Interrupted: what was allocated stays; allocate the rest.
            Some(libc::EINTR) => continue,
            Some(libc::EOPNOTSUPP) | Some(libc::ENOSYS) => return Ok(false),
            Some(libc::ENOSPC) => {
                return Err(Error::NoSpace(format!(
                    "reserving {len} bytes of {}: the file system is full \
                     (other regions or files took the room)",
                    path.display()
                )));
            }
            _ => {
                return Err(Error::io(
                    format!("reserving {len} bytes of {}", path.display()),
                    e,
                ));
            }
        }
    }
}

/// Sets the file's permission bits exactly (the process umask does not apply).
pub(crate) fn set_mode(file: &File, mode: u32, path: &Path) -> Result<()> {
    // SAFETY: the descriptor is open for the duration of the call.
    if unsafe { libc::fchmod(file.as_raw_fd(), mode as libc::mode_t) } != 0 {
        return Err(Error::last_os(format!(
            "setting mode {mode:o} on {}",
            path.display()
        )));
    }
    Ok(())
}

/// A range of address space: reserved inaccessible, then filled with file
/// mappings back to back.  Unmapped on drop unless [`Span::leak`] was called.
pub(crate) struct Span {
    pub(crate) base: NonNull<u8>,
    pub(crate) len: usize,
}

impl Span {
    /// Reserves `len` bytes of address space aligned to `align`, with no
    /// access and no memory behind it.
    pub(crate) fn reserve(len: usize, align: usize) -> Result<Span> {
        let extra = if align > system_page_size() { align } else { 0 };
        let total = len.checked_add(extra).ok_or_else(|| {
            Error::InvalidArgument(format!("a region of {len} bytes does not fit in memory"))
        })?;
        // SAFETY: a fresh anonymous mapping chosen by the kernel.
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                total,
                libc::PROT_NONE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_NORESERVE,
                -1,
                0,
            )
        };
        if p == libc::MAP_FAILED {
            return Err(Error::last_os(format!(
                "reserving {len} bytes of address space"
            )));
        }
        let start = p as usize;
        let aligned = if extra > 0 {
            start.div_ceil(align) * align
        } else {
            start
        };
        // SAFETY: trimming the parts of our own reservation outside [aligned, aligned+len).
        unsafe {
            if aligned > start {
                libc::munmap(p, aligned - start);
            }
            let end = aligned + len;
            if start + total > end {
                libc::munmap(end as *mut libc::c_void, start + total - end);
            }
        }
        Ok(Span {
            base: NonNull::new(aligned as *mut u8).expect("mmap never returns NULL"),
            len,
        })
    }

    /// Maps `len` bytes of `file`, from byte `file_offset` (page-aligned)
    /// on, shared and writable at `offset` within the span, replacing the
    /// reservation there.
    pub(crate) fn map_file(
        &self,
        offset: usize,
        len: usize,
        file: &File,
        file_offset: usize,
        path: &Path,
    ) -> Result<()> {
        assert!(offset + len <= self.len);
        // SAFETY: the target range lies inside our own reservation, so
        // MAP_FIXED replaces nothing but it.
        let p = unsafe {
            libc::mmap(
                self.base.as_ptr().add(offset).cast(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED | libc::MAP_FIXED,
                file.as_raw_fd(),
                file_offset as libc::off_t,
            )
        };
        if p == libc::MAP_FAILED {
            return Err(Error::last_os(format!(
                "mapping {len} bytes of {} at offset {offset} of the region",
                path.display()
            )));
        }
        Ok(())
    }
}

impl Drop for Span {
    fn drop(&mut self) {
        // SAFETY: the span is ours; nothing refers to it after drop.
        unsafe { libc::munmap(self.base.as_ptr().cast(), self.len) };
    }
}

/// How pages were pre-faulted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PrefaultMethod {
    /// Not pre-faulted.
    None,
    /// `madvise(MADV_POPULATE_WRITE)`.
    Populate,
    /// One atomic read-modify-write per page that leaves every byte as it was.
    Touch,
}

/// Probes whether the kernel has `MADV_POPULATE_WRITE` on the first page
/// of `base` (which it then pre-faults).
pub(crate) fn populate_supported(base: NonNull<u8>, page: usize) -> Result<bool> {
    match populate(base.as_ptr() as usize, page) {
        Ok(()) => Ok(true),
        Err(e) if e.raw_os_error() == Some(libc::EINVAL) => Ok(false),
        Err(e) => Err(Error::io(
            "pre-faulting the region (MADV_POPULATE_WRITE)",
            e,
        )),
    }
}

fn populate(addr: usize, len: usize) -> io::Result<()> {
    loop {
        // SAFETY: the range is inside a live shared mapping of ours; the
        // advice only faults pages in.
        let r = unsafe { libc::madvise(addr as *mut libc::c_void, len, MADV_POPULATE_WRITE) };
        if r == 0 {
            return Ok(());
        }
        let e = io::Error::last_os_error();
        match e.raw_os_error() {
            Some(libc::EINTR) | Some(libc::EAGAIN) => continue,
            _ => return Err(e),
        }
    }
}

fn touch(addr: usize, len: usize, page: usize) {
    let mut p = addr;
    while p < addr + len {
        // SAFETY: `p` is a page inside a live, writable mapping; an atomic
        // add of zero faults it in writable and keeps whatever a peer wrote.
        // The zero is hidden from the optimizer, which would otherwise turn
        // the idempotent add into a plain load (a read fault, or nothing).
        unsafe { AtomicU8::from_ptr(p as *mut u8) }
            .fetch_add(std::hint::black_box(0), Ordering::Relaxed);
        p += page;
    }
}

/// Pre-faults the byte ranges `ranges` (offsets from `base`, page-aligned)
/// with `method`, spread over `threads` threads.
pub(crate) fn prefault(
    base: NonNull<u8>,
    ranges: &[(usize, usize)],
    method: PrefaultMethod,
    threads: usize,
    page: usize,
) -> Result<()> {
    let base = base.as_ptr() as usize;
    let run = |work: &[(usize, usize)]| -> io::Result<()> {
        for &(off, len) in work {
            match method {
                PrefaultMethod::None => {}
                PrefaultMethod::Populate => populate(base + off, len)?,
                PrefaultMethod::Touch => touch(base + off, len, page),
            }
        }
        Ok(())
    };
    let fail = |e: io::Error| Error::io(format!("pre-faulting the region ({method:?})"), e);
    let threads = threads.max(1);
    if threads == 1 {
        return run(ranges).map_err(fail);
    }
    // Split into at least `threads` pieces so every thread has work.
    let total: usize = ranges.iter().map(|r| r.1).sum();
    let piece = (total.div_ceil(threads)).div_ceil(page).max(1) * page;
    let mut pieces = Vec::new();
    for &(off, len) in ranges {
        let mut o = off;
        while o < off + len {
            let l = piece.min(off + len - o);
            pieces.push((o, l));
            o += l;
        }
    }
    let per = pieces.len().div_ceil(threads);
    std::thread::scope(|s| -> Result<()> {
        let mut handles = Vec::new();
        for chunk in pieces.chunks(per.max(1)) {
            let h = std::thread::Builder::new()
                .name("kvtier-prefault".into())
                .spawn_scoped(s, move || run(chunk))
                .map_err(|e| Error::io("starting a pre-fault thread", e))?;
            handles.push(h);
        }
        for h in handles {
            match h.join() {
                Ok(r) => r.map_err(fail)?,
                Err(_) => {
                    return Err(Error::Io {
                        context: "pre-fault thread".into(),
                        source: io::Error::other("panicked"),
                    });
                }
            }
        }
        Ok(())
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn allocate_reserves_room_and_a_full_file_system_is_no_space() {
        // A tmpfs of 1 MiB of its own (needs the right to mount; skipped
        // otherwise).
        let dir = tempfile::tempdir().unwrap();
        let target = cpath(dir.path()).unwrap();
        // SAFETY: plain system call with NUL-terminated arguments.
        let mounted = unsafe {
            libc::mount(
                c"tmpfs".as_ptr(),
                target.as_ptr(),
                c"tmpfs".as_ptr(),
                0,
                c"size=1m".as_ptr().cast(),
            )
        } == 0;
        if !mounted {
            eprintln!("skipped: cannot mount a tmpfs here");
            return;
        }
        let path = dir.path().join("f");
        let f = std::fs::File::create_new(&path).unwrap();
        let half = 512 << 10;
        assert!(allocate(&f, 4096, half, &path).unwrap());
        let m = f.metadata().unwrap();
        assert_eq!(m.len(), 4096 + half as u64, "the file grows to the end");
        assert!(m.blocks() * 512 >= half as u64, "the room is taken");
        let e = allocate(&f, 0, 2 << 20, &path).unwrap_err();
        assert!(matches!(e, Error::NoSpace(_)), "{e}");
        assert!(e.to_string().contains("file system is full"), "{e}");
        drop(f);
        // SAFETY: as above.
        unsafe { libc::umount2(target.as_ptr(), libc::MNT_DETACH) };
    }
}
