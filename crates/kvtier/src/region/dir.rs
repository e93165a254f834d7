//! A directory that may hold anything: its entries are looked at, opened
//! and removed relative to one descriptor of it, never through a path, so
//! a directory renamed or replaced meanwhile cannot redirect a removal.
//! Nothing here follows a symlink or blocks on a FIFO.

use std::ffi::{CStr, CString, OsStr, OsString};
use std::fs::File;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::ffi::{OsStrExt, OsStringExt};
use std::path::Path;

use super::sys::FileId;

/// An open directory.
pub(crate) struct Dir {
    fd: OwnedFd,
}

/// What `lstat` says of an entry.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Entry {
    /// Device and inode.
    pub(crate) id: FileId,
    /// `st_mode`.
    pub(crate) mode: libc::mode_t,
    /// Owner.
    pub(crate) uid: libc::uid_t,
    /// Links (0: removed, for an open file).
    pub(crate) links: u64,
    /// Size in bytes.
    pub(crate) bytes: u64,
}

impl Entry {
    // `dev_t`, `ino_t` and `nlink_t` are 64 bits on some targets only.
    #[allow(clippy::unnecessary_cast)]
    fn of(s: &libc::stat) -> Entry {
        Entry {
            id: (s.st_dev as u64, s.st_ino as u64),
            mode: s.st_mode,
            uid: s.st_uid,
            links: s.st_nlink as u64,
            bytes: u64::try_from(s.st_size).unwrap_or(0),
        }
    }

    /// Whether it is a regular file.
    pub(crate) fn is_regular(&self) -> bool {
        self.mode & libc::S_IFMT == libc::S_IFREG
    }

    /// What kind of file it is, in words.
    pub(crate) fn kind(&self) -> &'static str {
        match self.mode & libc::S_IFMT {
            libc::S_IFREG => "regular file",
            libc::S_IFDIR => "directory",
            libc::S_IFLNK => "symlink",
            libc::S_IFIFO => "FIFO",
            libc::S_IFSOCK => "socket",
            libc::S_IFCHR => "character device",
            libc::S_IFBLK => "block device",
            _ => "file of unknown type",
        }
    }
}

fn c_name(name: &OsStr) -> io::Result<CString> {
    CString::new(name.as_bytes()).map_err(|_| io::Error::from(io::ErrorKind::InvalidInput))
}

/// Retries `f` while it fails with `EINTR`; -1 is failure.
fn retry(mut f: impl FnMut() -> libc::c_int) -> io::Result<libc::c_int> {
    loop {
        let r = f();
        if r >= 0 {
            return Ok(r);
        }
        let e = io::Error::last_os_error();
        if e.raw_os_error() != Some(libc::EINTR) {
            return Err(e);
        }
    }
}

impl Dir {
    /// Opens the directory at `path` (a symlink to a directory is followed:
    /// the path is the caller's choice; its entries are not).
    pub(crate) fn open(path: &Path) -> io::Result<Dir> {
        let c = c_name(path.as_os_str())?;
        let flags = libc::O_RDONLY | libc::O_DIRECTORY | libc::O_CLOEXEC;
        // SAFETY: `c` is NUL-terminated; the descriptor returned is ours.
        let fd = retry(|| unsafe { libc::open(c.as_ptr(), flags) })?;
        // SAFETY: a fresh descriptor owned by nothing else.
        let fd = unsafe { OwnedFd::from_raw_fd(fd) };
        Ok(Dir { fd })
    }

    /// The names of its entries, `.` and `..` left out, in no order.
    pub(crate) fn names(&self) -> io::Result<Vec<OsString>> {
        // A descriptor of its own: closedir closes it.
        // SAFETY: duplicating a descriptor we own.
        let dup = retry(|| unsafe { libc::fcntl(self.fd.as_raw_fd(), libc::F_DUPFD_CLOEXEC, 0) })?;
        // SAFETY: `dup` is an open directory descriptor; from here on the
        // stream owns it.
        let stream = unsafe { libc::fdopendir(dup) };
        if stream.is_null() {
            let e = io::Error::last_os_error();
            // SAFETY: fdopendir failed, so `dup` is still ours to close.
            unsafe { libc::close(dup) };
            return Err(e);
        }
        // The duplicate shares the directory's offset: start from the top.
        // SAFETY: `stream` is a live directory stream.
        unsafe { libc::rewinddir(stream) };
        let mut names = Vec::new();
        let result = loop {
            // SAFETY: errno is this thread's; readdir signals an error only
            // through it.
            unsafe { *libc::__errno_location() = 0 };
            // SAFETY: `stream` is live; the entry is read before the next call.
            let d = unsafe { libc::readdir(stream) };
            if d.is_null() {
                let e = io::Error::last_os_error();
                break match e.raw_os_error() {
                    Some(0) | None => Ok(()),
                    Some(_) => Err(e),
                };
            }
            // SAFETY: `d_name` is NUL-terminated inside the entry.
            let name = unsafe { CStr::from_ptr((*d).d_name.as_ptr()) }.to_bytes();
            if name != b"." && name != b".." {
                names.push(OsString::from_vec(name.to_vec()));
            }
        };
        // SAFETY: the stream is live and closed once.
        unsafe { libc::closedir(stream) };
        result.map(|()| names)
    }

    /// `lstat` of `name`: a symlink is described, not followed.
    pub(crate) fn lstat(&self, name: &OsStr) -> io::Result<Entry> {
        let c = c_name(name)?;
        // SAFETY: stat is plain data, valid when zeroed.
        let mut s: libc::stat = unsafe { std::mem::zeroed() };
        // SAFETY: `c` is NUL-terminated and `s` a valid out-parameter.
        retry(|| unsafe {
            libc::fstatat(
                self.fd.as_raw_fd(),
                c.as_ptr(),
                &mut s,
                libc::AT_SYMLINK_NOFOLLOW,
            )
        })?;
        Ok(Entry::of(&s))
    }

    /// Opens `name` for reading without following a symlink (`ELOOP`),
    /// blocking on a FIFO, or taking a terminal.
    pub(crate) fn open_file(&self, name: &OsStr) -> io::Result<File> {
        let c = c_name(name)?;
        let flags =
            libc::O_RDONLY | libc::O_NOFOLLOW | libc::O_NONBLOCK | libc::O_NOCTTY | libc::O_CLOEXEC;
        // SAFETY: `c` is NUL-terminated; the descriptor returned is ours.
        let fd = retry(|| unsafe { libc::openat(self.fd.as_raw_fd(), c.as_ptr(), flags) })?;
        // SAFETY: a fresh descriptor owned by nothing else.
        Ok(unsafe { File::from_raw_fd(fd) })
    }

    /// Removes the entry `name` (not a directory).
    pub(crate) fn unlink(&self, name: &OsStr) -> io::Result<()> {
        let c = c_name(name)?;
        // SAFETY: `c` is NUL-terminated.
        retry(|| unsafe { libc::unlinkat(self.fd.as_raw_fd(), c.as_ptr(), 0) }).map(|_| ())
    }
}

/// `fstat` of an open file.
pub(crate) fn fstat(file: &File) -> io::Result<Entry> {
    // SAFETY: stat is plain data, valid when zeroed.
    let mut s: libc::stat = unsafe { std::mem::zeroed() };
    // SAFETY: the descriptor is open and `s` a valid out-parameter.
    retry(|| unsafe { libc::fstat(file.as_raw_fd(), &mut s) })?;
    Ok(Entry::of(&s))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn entries_are_described_not_followed_and_removed_by_name() {
        let t = tempfile::tempdir().unwrap();
        std::fs::write(t.path().join("plain"), b"abc").unwrap();
        std::os::unix::fs::symlink(t.path().join("plain"), t.path().join("link")).unwrap();
        std::fs::create_dir(t.path().join("sub")).unwrap();
        let d = Dir::open(t.path()).unwrap();
        let mut names = d.names().unwrap();
        names.sort();
        assert_eq!(names, ["link", "plain", "sub"]);
        // A second listing starts from the top again.
        assert_eq!(d.names().unwrap().len(), 3);
        let plain = d.lstat(OsStr::new("plain")).unwrap();
        assert!(plain.is_regular() && plain.bytes == 3 && plain.links == 1);
        assert_eq!(d.lstat(OsStr::new("link")).unwrap().kind(), "symlink");
        assert_eq!(d.lstat(OsStr::new("sub")).unwrap().kind(), "directory");
        let e = d.open_file(OsStr::new("link")).unwrap_err();
        assert_eq!(e.raw_os_error(), Some(libc::ELOOP));
        let f = d.open_file(OsStr::new("plain")).unwrap();
        assert_eq!(fstat(&f).unwrap().id, plain.id);
        d.unlink(OsStr::new("plain")).unwrap();
        assert_eq!(fstat(&f).unwrap().links, 0);
        let e = d.lstat(OsStr::new("plain")).unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::NotFound);
    }

    #[test]
    fn every_kind_of_entry_is_named() {
        for (format, kind) in [
            (libc::S_IFREG, "regular file"),
            (libc::S_IFDIR, "directory"),
            (libc::S_IFLNK, "symlink"),
            (libc::S_IFIFO, "FIFO"),
            (libc::S_IFSOCK, "socket"),
            (libc::S_IFCHR, "character device"),
            (libc::S_IFBLK, "block device"),
            (0, "file of unknown type"),
        ] {
            let e = Entry {
                id: (1, 2),
                mode: format | 0o4755,
                uid: 0,
                links: 1,
                bytes: 0,
            };
            assert_eq!(e.kind(), kind, "{format:o}");
            assert_eq!(e.is_regular(), format == libc::S_IFREG, "{format:o}");
        }
    }

    #[test]
    fn only_a_directory_opens_as_one() {
        let t = tempfile::tempdir().unwrap();
        let plain = t.path().join("plain");
        std::fs::write(&plain, b"").unwrap();
        let e = Dir::open(&plain)
            .err()
            .expect("a regular file opened as a directory");
        assert_eq!(e.raw_os_error(), Some(libc::ENOTDIR));
        assert!(Dir::open(t.path()).is_ok());
    }

    #[test]
    fn a_file_opens_without_blocking_and_closes_on_exec() {
        let t = tempfile::tempdir().unwrap();
        std::fs::write(t.path().join("plain"), b"").unwrap();
        let fifo = CString::new(t.path().join("fifo").into_os_string().into_vec()).unwrap();
        // SAFETY: `fifo` is NUL-terminated.
        assert_eq!(unsafe { libc::mkfifo(fifo.as_ptr(), 0o600) }, 0);
        let d = Dir::open(t.path()).unwrap();
        let f = d.open_file(OsStr::new("plain")).unwrap();
        // SAFETY: plain fcntl queries of an open descriptor.
        let (status, fd) = unsafe {
            (
                libc::fcntl(f.as_raw_fd(), libc::F_GETFL),
                libc::fcntl(f.as_raw_fd(), libc::F_GETFD),
            )
        };
        assert_eq!(status & libc::O_NONBLOCK, libc::O_NONBLOCK);
        assert_eq!(status & libc::O_ACCMODE, libc::O_RDONLY);
        assert_eq!(fd & libc::FD_CLOEXEC, libc::FD_CLOEXEC);
        // A FIFO without a writer opens at once.
        d.open_file(OsStr::new("fifo")).unwrap();
    }
}
