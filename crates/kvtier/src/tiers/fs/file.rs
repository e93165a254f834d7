//! Low-level file I/O under the fs tier's two layouts (a file per block,
//! and segment files): a worker's page-aligned scratch buffers, positioned
//! reads and writes that retry interrupted and short calls, syncing, and
//! what the file system supports (linking unnamed files, `O_DIRECT`).
//!
//! What both `io.rs` (moving blocks) and `segments.rs` (the segment
//! files) need, below both: `io.rs` uses `segments.rs` and this file,
//! `segments.rs` only this file, so imports go one way.

use std::ffi::{CStr, CString};
use std::io::Write as _;
use std::os::unix::ffi::OsStrExt;
use std::path::Path;

use super::beneath::{self, Fd, errno};
use super::format::HEADER_LEN;

/// A worker's reusable buffers: one page-aligned page for the header
/// (`O_DIRECT` needs aligned buffers) and the paths it builds, so moving a
/// block allocates nothing.
pub(super) struct Scratch {
    pub(super) page: Box<Page>,
    pub(super) path: Vec<u8>,
    pub(super) temp: Vec<u8>,
}

#[repr(C, align(4096))]
pub(super) struct Page(pub(super) [u8; HEADER_LEN]);

impl Scratch {
    /// Fresh buffers.
    pub(super) fn new() -> Scratch {
        Scratch {
            page: Box::new(Page([0; HEADER_LEN])),
            path: Vec::with_capacity(256),
            temp: Vec::with_capacity(256),
        }
    }
}

impl Scratch {
    /// The page-aligned header page.
    pub(super) fn page_mut(&mut self) -> &mut [u8; HEADER_LEN] {
        &mut self.page.0
    }
}

impl Default for Scratch {
    fn default() -> Self {
        Scratch::new()
    }
}

pub(super) const ALIGN: usize = 4096;

pub(super) fn cpath(p: &Path) -> CString {
    CString::new(p.as_os_str().as_bytes()).expect("tier paths hold no NUL")
}

/// A path built by the layout (NUL-terminated) as a `CStr`.
pub(super) fn cstr(bytes: &[u8]) -> &CStr {
    CStr::from_bytes_with_nul(bytes).expect("built NUL-terminated")
}

/// The two-part vector of a block file: the `HEADER_LEN`-byte header page,
/// then the `len` bytes of data at `data`.
pub(super) fn header_and_data(
    header: &mut [u8; HEADER_LEN],
    data: *mut u8,
    len: usize,
) -> [libc::iovec; 2] {
    [
        libc::iovec {
            iov_base: header.as_mut_ptr().cast(),
            iov_len: HEADER_LEN,
        },
        libc::iovec {
            iov_base: data.cast(),
            iov_len: len,
        },
    ]
}

/// Runs the system call `call` again while it fails with `EINTR`; returns
/// its last result.
pub(super) fn retrying_eintr(mut call: impl FnMut() -> isize) -> isize {
    loop {
        let n = call();
        if n < 0 && errno() == libc::EINTR {
            continue;
        }
        return n;
    }
}

pub(super) fn pwrite_all(
    fd: i32,
    mut ptr: *const u8,
    mut len: usize,
    mut off: u64,
) -> Result<(), i32> {
    while len > 0 {
        // SAFETY: `ptr..ptr+len` is readable memory owned by the caller.
        let n = unsafe { libc::pwrite(fd, ptr.cast(), len, off as libc::off_t) };
        if n < 0 {
            let e = errno();
            if e == libc::EINTR {
                continue;
            }
            return Err(e);
        }
        if n == 0 {
            return Err(libc::ENOSPC);
        }
        let n = n as usize;
        // SAFETY: n <= len.
        ptr = unsafe { ptr.add(n) };
        len -= n;
        off += n as u64;
    }
    Ok(())
}

/// Reads exactly `len` bytes; `Ok(false)` at a premature end of file.
pub(super) fn pread_exact(
    fd: i32,
    mut ptr: *mut u8,
    mut len: usize,
    mut off: u64,
) -> Result<bool, i32> {
    while len > 0 {
        // SAFETY: `ptr..ptr+len` is writable memory owned by the caller.
        let n = unsafe { libc::pread(fd, ptr.cast(), len, off as libc::off_t) };
        if n < 0 {
            let e = errno();
            if e == libc::EINTR {
                continue;
            }
            return Err(e);
        }
        if n == 0 {
            return Ok(false);
        }
        let n = n as usize;
        // SAFETY: n <= len.
        ptr = unsafe { ptr.add(n) };
        len -= n;
        off += n as u64;
    }
    Ok(true)
}

pub(super) fn sync_fd(fd: &Fd) -> Result<(), i32> {
    // SAFETY: open descriptor.
    if unsafe { libc::fsync(fd.0) } != 0 {
        return Err(errno());
    }
    Ok(())
}

/// How an unnamed file is given a name.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum LinkVia {
    /// `linkat(fd, "", ..., AT_EMPTY_PATH)` (needs `CAP_DAC_READ_SEARCH`
    /// on most kernels).
    EmptyPath,
    /// `linkat` of `/proc/self/fd/N` with `AT_SYMLINK_FOLLOW`.
    ProcFd,
}

/// Links open file `fd` as `name` in directory `dir`.
pub(super) fn link_fd(
    fd: i32,
    dir: i32,
    name: &CStr,
    via: LinkVia,
    scratch: &mut Vec<u8>,
) -> Result<(), i32> {
    let rc = match via {
        // SAFETY: NUL-terminated names; `fd` and `dir` are open.
        LinkVia::EmptyPath => unsafe {
            libc::linkat(fd, c"".as_ptr(), dir, name.as_ptr(), libc::AT_EMPTY_PATH)
        },
        LinkVia::ProcFd => {
            scratch.clear();
            // Writing into a Vec cannot fail.
            let _ = write!(scratch, "/proc/self/fd/{fd}\0");
            let src = cstr(scratch);
            // SAFETY: NUL-terminated names; `fd` and `dir` are open.  The
            // link followed is /proc's link to `fd` itself.
            unsafe {
                libc::linkat(
                    libc::AT_FDCWD,
                    src.as_ptr(),
                    dir,
                    name.as_ptr(),
                    libc::AT_SYMLINK_FOLLOW,
                )
            }
        }
    };
    if rc != 0 {
        return Err(errno());
    }
    Ok(())
}

/// How `dir` lets unnamed files (`O_TMPFILE`) be linked in, if it does
/// (local file systems do; NFS does not).  The probe file is created
/// beneath `dir` with `file_mode` and removed.
pub(super) fn probe_tmpfile(dir: &Path, file_mode: u32) -> Option<LinkVia> {
    let root = beneath::open_root(&beneath::c_path(dir).ok()?).ok()?;
    let name = CString::new(super::format::probe_name("tmpfile", std::process::id())).ok()?;
    let mut scratch = Vec::new();
    for via in [LinkVia::EmptyPath, LinkVia::ProcFd] {
        let flags = libc::O_TMPFILE | libc::O_WRONLY;
        let (fd, _) = beneath::open_at(root.0, c".", flags, file_mode, false).ok()?;
        if link_fd(fd.0, root.0, &name, via, &mut scratch).is_ok() {
            // SAFETY: NUL-terminated name in an open directory.
            unsafe { libc::unlinkat(root.0, name.as_ptr(), 0) };
            return Some(via);
        }
    }
    None
}

/// Whether `O_DIRECT` works in `dir`: writes one aligned page to a probe
/// file created beneath `dir` (never through a symlink) and removes it.
pub(super) fn probe_direct(dir: &Path, file_mode: u32) -> bool {
    let Ok(root) = beneath::c_path(dir).and_then(|c| beneath::open_root(&c)) else {
        return false;
    };
    let Ok(name) = CString::new(super::format::probe_name("odirect", std::process::id())) else {
        return false;
    };
    let flags = libc::O_WRONLY | libc::O_CREAT | libc::O_EXCL | libc::O_DIRECT;
    let Ok((fd, st)) = beneath::open_at(root.0, &name, flags, file_mode, false) else {
        return false;
    };
    let page = Scratch::new();
    let ok = pwrite_all(fd.0, page.page.0.as_ptr(), HEADER_LEN, 0).is_ok();
    drop(fd);
    let _ = beneath::unlink_same(root.0, &name, &st);
    ok
}
