//! File-system calls that stay beneath the tier's directory.
//!
//! The directory the user names is opened by its path (symlinks in that
//! path are the user's choice); everything inside it is reached from a
//! descriptor of its parent directory, one path component at a time, with
//! `O_NOFOLLOW`: no symlink inside the directory is ever followed, so
//! nothing outside it is opened, created, resized, written or removed.
//! Every file is opened with `O_NONBLOCK` and checked with `fstat` to be a
//! regular file before anything reads or writes it: a FIFO, socket, device
//! or symlink under a tier name is *foreign*, skipped and counted, never
//! waited on.  Files and directories the tier creates get the options'
//! mode with `fchmod`, so the process umask does not narrow it.

use std::ffi::{CStr, CString, OsString};
use std::os::unix::ffi::{OsStrExt, OsStringExt};
use std::path::Path;

/// The calling thread's `errno`.
pub(super) fn errno() -> i32 {
    std::io::Error::last_os_error()
        .raw_os_error()
        .unwrap_or(libc::EIO)
}

/// A file descriptor closed on drop.
pub(super) struct Fd(pub(super) i32);

impl Drop for Fd {
    fn drop(&mut self) {
        // SAFETY: we own the descriptor.
        unsafe { libc::close(self.0) };
    }
}

/// The errno-like code of an entry that is not what the tier expects
/// there (a symlink, FIFO, socket or device where a regular file or a
/// directory belongs).  `EMEDIUMTYPE` ("wrong medium type") is never
/// returned by the calls the tier makes, so it cannot be confused.
pub(crate) const FOREIGN: i32 = libc::EMEDIUMTYPE;

/// The mode of directories the tier creates for files of `file_mode`:
/// search permission (x) added wherever read permission (r) is set.
pub(super) fn dir_mode_of(file_mode: u32) -> u32 {
    let m = file_mode & 0o777;
    m | ((m & 0o444) >> 2)
}

/// Kind of a foreign entry, for reports.
pub(super) fn kind_name(mode: libc::mode_t) -> &'static str {
    match mode & libc::S_IFMT {
        libc::S_IFLNK => "symlink",
        libc::S_IFIFO => "fifo",
        libc::S_IFSOCK => "socket",
        libc::S_IFCHR => "char_device",
        libc::S_IFBLK => "block_device",
        libc::S_IFDIR => "directory",
        libc::S_IFREG => "file",
        _ => "other",
    }
}

/// A path as a C string (`EINVAL` if it holds a NUL).
pub(super) fn c_path(p: &Path) -> Result<CString, i32> {
    CString::new(p.as_os_str().as_bytes()).map_err(|_| libc::EINVAL)
}

/// `fstat` of an open descriptor.
pub(super) fn fstat(fd: i32) -> Result<libc::stat, i32> {
    // SAFETY: stat is plain data, valid when zeroed.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    // SAFETY: a valid out-parameter.
    if unsafe { libc::fstat(fd, &mut st) } != 0 {
        return Err(errno());
    }
    Ok(st)
}

/// `fstatat` of `name` in `dir`, not following a symlink.
pub(super) fn lstat_at(dir: i32, name: &CStr) -> Result<libc::stat, i32> {
    // SAFETY: stat is plain data, valid when zeroed.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    // SAFETY: NUL-terminated name and a valid out-parameter.
    if unsafe { libc::fstatat(dir, name.as_ptr(), &mut st, libc::AT_SYMLINK_NOFOLLOW) } != 0 {
        return Err(errno());
    }
    Ok(st)
}

/// Whether `st` is a regular file.
pub(super) fn is_regular(st: &libc::stat) -> bool {
    st.st_mode & libc::S_IFMT == libc::S_IFREG
}

/// Opens the directory the user named (following the symlinks of its
/// path, which are the user's), without blocking on whatever sits there.
pub(super) fn open_root(path: &CStr) -> Result<Fd, i32> {
    let flags = libc::O_RDONLY | libc::O_DIRECTORY | libc::O_CLOEXEC | libc::O_NONBLOCK;
    // SAFETY: NUL-terminated path.
    let fd = unsafe { libc::open(path.as_ptr(), flags) };
    if fd < 0 {
        return Err(errno());
    }
    Ok(Fd(fd))
}

fn open_dir_at(dir: i32, name: &CStr) -> Result<Fd, i32> {
    let flags =
        libc::O_RDONLY | libc::O_DIRECTORY | libc::O_NOFOLLOW | libc::O_CLOEXEC | libc::O_NONBLOCK;
    // SAFETY: NUL-terminated name.
    let fd = unsafe { libc::openat(dir, name.as_ptr(), flags) };
    if fd >= 0 {
        return Ok(Fd(fd));
    }
    match errno() {
        // A symlink (or, with O_DIRECTORY, anything but a directory):
        // tell a symlink or special file from a plain file in the way.
        e @ (libc::ELOOP | libc::ENOTDIR) => match lstat_at(dir, name) {
            Ok(st) if is_regular(&st) => Err(libc::ENOTDIR),
            Ok(st) if st.st_mode & libc::S_IFMT == libc::S_IFDIR => Err(e),
            Ok(_) => Err(FOREIGN),
            Err(e) => Err(e),
        },
        e => Err(e),
    }
}

/// Opens subdirectory `name` of `dir` without following a symlink; with
/// `create`, makes it (mode `create`, set with `fchmod`) when missing and
/// calls `made` if this call made it.  A symlink, FIFO, socket or device
/// in its place is [`FOREIGN`]; a regular file `ENOTDIR`.
pub(super) fn subdir(
    dir: i32,
    name: &CStr,
    create: Option<u32>,
    made: impl FnOnce(),
) -> Result<Fd, i32> {
    match open_dir_at(dir, name) {
        Err(libc::ENOENT) if create.is_some() => {}
        r => return r,
    }
    let mode = create.unwrap_or(0o700);
    // SAFETY: NUL-terminated name.
    if unsafe { libc::mkdirat(dir, name.as_ptr(), mode as libc::mode_t) } != 0 {
        let e = errno();
        if e != libc::EEXIST {
            return Err(e);
        }
        return open_dir_at(dir, name);
    }
    made();
    let fd = open_dir_at(dir, name)?;
    // SAFETY: an open descriptor.
    unsafe { libc::fchmod(fd.0, mode as libc::mode_t) };
    Ok(fd)
}

/// Opens regular file `name` of `dir` with `flags` (`O_NOFOLLOW`,
/// `O_NONBLOCK`, `O_CLOEXEC` and `O_NOCTTY` added; `O_DIRECT` when
/// `direct`, dropped again where the file system refuses it).  A file this
/// call creates (`O_CREAT | O_EXCL`, or `O_TMPFILE` with `name` ".") gets
/// `mode` with `fchmod`.  Anything but a regular file is [`FOREIGN`], and
/// never read, written or waited on.  Returns the file and its `fstat`.
/// (`O_DIRECT` given in `flags` itself is kept: `EINVAL` then.)
pub(super) fn open_at(
    dir: i32,
    name: &CStr,
    mut flags: libc::c_int,
    mode: u32,
    direct: bool,
) -> Result<(Fd, libc::stat), i32> {
    flags |= libc::O_NOFOLLOW | libc::O_NONBLOCK | libc::O_CLOEXEC | libc::O_NOCTTY;
    if direct {
        flags |= libc::O_DIRECT;
    }
    let mut may_drop_direct = direct;
    let fd = loop {
        // SAFETY: NUL-terminated name.
        let fd = unsafe { libc::openat(dir, name.as_ptr(), flags, mode as libc::c_uint) };
        if fd >= 0 {
            break Fd(fd);
        }
        match errno() {
            libc::EINVAL if may_drop_direct => {
                flags &= !libc::O_DIRECT;
                may_drop_direct = false;
            }
            libc::EINTR => {}
            libc::ELOOP => return Err(FOREIGN),
            // A FIFO opened for writing with no reader.
            libc::ENXIO => return Err(FOREIGN),
            e => return Err(e),
        }
    };
    let st = fstat(fd.0)?;
    if !is_regular(&st) {
        return Err(FOREIGN);
    }
    let created = flags & (libc::O_CREAT | libc::O_EXCL) == libc::O_CREAT | libc::O_EXCL
        || flags & libc::O_TMPFILE == libc::O_TMPFILE;
    if created {
        // SAFETY: an open descriptor.
        unsafe { libc::fchmod(fd.0, mode as libc::mode_t) };
    }
    Ok((fd, st))
}

/// Opens (or creates, mode `mode`) regular file `name` of `dir` read-write;
/// says whether this call created it.
pub(super) fn open_or_create(
    dir: i32,
    name: &CStr,
    mode: u32,
    direct: bool,
) -> Result<(Fd, bool), i32> {
    loop {
        match open_at(dir, name, libc::O_RDWR, mode, direct) {
            Err(libc::ENOENT) => {}
            r => return r.map(|(fd, _)| (fd, false)),
        }
        match open_at(
            dir,
            name,
            libc::O_RDWR | libc::O_CREAT | libc::O_EXCL,
            mode,
            direct,
        ) {
            Err(libc::EEXIST) => continue,
            r => return r.map(|(fd, _)| (fd, true)),
        }
    }
}

/// Removes `name` from `dir` if it is still the file `st` describes (same
/// device and inode): what was checked is what goes, never an entry put in
/// its place meanwhile.  `Ok(false)` if it was replaced or is gone.
pub(super) fn unlink_same(dir: i32, name: &CStr, st: &libc::stat) -> Result<bool, i32> {
    match lstat_at(dir, name) {
        Ok(now) if now.st_dev == st.st_dev && now.st_ino == st.st_ino => {}
        Ok(_) | Err(libc::ENOENT) => return Ok(false),
        Err(e) => return Err(e),
    }
    // SAFETY: NUL-terminated name.
    if unsafe { libc::unlinkat(dir, name.as_ptr(), 0) } != 0 {
        let e = errno();
        return if e == libc::ENOENT { Ok(false) } else { Err(e) };
    }
    Ok(true)
}

/// Removes `name` from `dir` if it is a regular file; `Ok(false)` if it is
/// missing, [`FOREIGN`] if it is something else (left alone).
pub(super) fn unlink_regular(dir: i32, name: &CStr) -> Result<bool, i32> {
    match lstat_at(dir, name) {
        Ok(st) if is_regular(&st) => unlink_same(dir, name, &st),
        Ok(_) => Err(FOREIGN),
        Err(libc::ENOENT) => Ok(false),
        Err(e) => Err(e),
    }
}

/// The names in directory `dir` (an open descriptor, left open), without
/// `.` and `..`.
pub(super) fn list(dir: i32) -> Result<Vec<OsString>, i32> {
    // SAFETY: duplicating an open descriptor; fdopendir owns the copy.
    let copy = unsafe { libc::fcntl(dir, libc::F_DUPFD_CLOEXEC, 0) };
    if copy < 0 {
        return Err(errno());
    }
    // SAFETY: an open directory descriptor, owned by the stream from here.
    let stream = unsafe { libc::fdopendir(copy) };
    if stream.is_null() {
        let e = errno();
        // SAFETY: the copy is still ours.
        unsafe { libc::close(copy) };
        return Err(e);
    }
    // SAFETY: a fresh stream; rewinding makes a reused offset harmless.
    unsafe { libc::rewinddir(stream) };
    let mut names = Vec::new();
    loop {
        // SAFETY: a live stream; the entry stays valid until the next call.
        let ent = unsafe { libc::readdir(stream) };
        if ent.is_null() {
            break;
        }
        // SAFETY: d_name is NUL-terminated.
        let name = unsafe { CStr::from_ptr((*ent).d_name.as_ptr()) };
        let bytes = name.to_bytes();
        if bytes == b"." || bytes == b".." {
            continue;
        }
        names.push(OsString::from_vec(bytes.to_vec()));
    }
    // SAFETY: closes the stream and its descriptor.
    unsafe { libc::closedir(stream) };
    Ok(names)
}

/// A name as a C string (directory entries hold no NUL).
pub(super) fn c_name(name: &std::ffi::OsStr) -> CString {
    CString::new(name.as_bytes()).unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::symlink;

    fn c(s: &str) -> CString {
        CString::new(s).unwrap()
    }

    #[test]
    fn directory_modes_add_search_where_read_is_set() {
        assert_eq!(dir_mode_of(0o600), 0o700);
        assert_eq!(dir_mode_of(0o640), 0o750);
        assert_eq!(dir_mode_of(0o644), 0o755);
        assert_eq!(dir_mode_of(0o660), 0o770);
        // Search already given stays.
        assert_eq!(dir_mode_of(0o750), 0o750);
    }

    #[test]
    fn foreign_kinds_are_named() {
        let names: Vec<&str> = [
            libc::S_IFLNK,
            libc::S_IFIFO,
            libc::S_IFSOCK,
            libc::S_IFCHR,
            libc::S_IFBLK,
            libc::S_IFDIR,
            libc::S_IFREG,
        ]
        .into_iter()
        .map(|m| kind_name(m | 0o644))
        .collect();
        assert_eq!(
            names,
            [
                "symlink",
                "fifo",
                "socket",
                "char_device",
                "block_device",
                "directory",
                "file"
            ]
        );
    }

    #[test]
    fn symlinks_fifos_and_files_in_the_way_are_told_apart() {
        let dir = tempfile::tempdir().unwrap();
        let outside = tempfile::tempdir().unwrap();
        std::fs::write(outside.path().join("f"), b"outside").unwrap();
        symlink(outside.path(), dir.path().join("ld")).unwrap();
        symlink(outside.path().join("f"), dir.path().join("lf")).unwrap();
        std::fs::write(dir.path().join("plain"), b"x").unwrap();
        let fifo = c(dir.path().join("fifo").to_str().unwrap());
        // SAFETY: NUL-terminated path.
        assert_eq!(unsafe { libc::mkfifo(fifo.as_ptr(), 0o600) }, 0);
        let root = open_root(&c_path(dir.path()).unwrap()).unwrap();
        assert_eq!(
            subdir(root.0, &c("ld"), Some(0o700), || ()).err(),
            Some(FOREIGN)
        );
        assert_eq!(subdir(root.0, &c("fifo"), None, || ()).err(), Some(FOREIGN));
        assert_eq!(
            subdir(root.0, &c("plain"), None, || ()).err(),
            Some(libc::ENOTDIR)
        );
        assert_eq!(
            subdir(root.0, &c("none"), None, || ()).err(),
            Some(libc::ENOENT)
        );
        for name in ["lf", "fifo"] {
            for flags in [libc::O_RDONLY, libc::O_RDWR, libc::O_WRONLY] {
                let r = open_at(root.0, &c(name), flags, 0o600, false);
                assert_eq!(r.err(), Some(FOREIGN), "{name}");
            }
        }
        assert!(open_or_create(root.0, &c("lf"), 0o600, false).is_err());
        assert_eq!(unlink_regular(root.0, &c("lf")), Err(FOREIGN));
        assert_eq!(std::fs::read(outside.path().join("f")).unwrap(), b"outside");
        assert!(dir.path().join("lf").symlink_metadata().is_ok());
        // A directory made here gets the mode asked for, whatever the umask.
        let mut made = false;
        let d = subdir(root.0, &c("new"), Some(0o750), || made = true).unwrap();
        assert!(made);
        assert_eq!(fstat(d.0).unwrap().st_mode & 0o777, 0o750);
        let (f, created) = open_or_create(d.0, &c("f"), 0o640, false).unwrap();
        assert!(created);
        assert_eq!(fstat(f.0).unwrap().st_mode & 0o777, 0o640);
        let mut names = list(root.0).unwrap();
        names.sort();
        let names: Vec<_> = names.iter().map(|n| n.to_str().unwrap()).collect();
        assert_eq!(names, ["fifo", "ld", "lf", "new", "plain"]);
    }

    #[test]
    fn the_root_must_be_a_directory_and_is_never_waited_on() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("plain"), b"x").unwrap();
        let plain = c_path(&dir.path().join("plain")).unwrap();
        assert_eq!(open_root(&plain).err(), Some(libc::ENOTDIR));
        let missing = c_path(&dir.path().join("missing")).unwrap();
        assert_eq!(open_root(&missing).err(), Some(libc::ENOENT));
        // A FIFO is refused at once: a blocking open would wait for a
        // writer (the bound only ends a hang).
        let fifo = c(dir.path().join("fifo").to_str().unwrap());
        // SAFETY: NUL-terminated path.
        assert_eq!(unsafe { libc::mkfifo(fifo.as_ptr(), 0o600) }, 0);
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || tx.send(open_root(&fifo).err()));
        let fifo_open = rx.recv_timeout(std::time::Duration::from_secs(60));
        assert_eq!(fifo_open, Ok(Some(libc::ENOTDIR)));
        let root = open_root(&c_path(dir.path()).unwrap()).unwrap();
        // SAFETY: an open descriptor.
        let fd_flags = unsafe { libc::fcntl(root.0, libc::F_GETFD) };
        assert_eq!(fd_flags & libc::FD_CLOEXEC, libc::FD_CLOEXEC);
    }

    #[test]
    fn a_directory_that_cannot_be_made_says_why() {
        // sysfs makes no directories: mkdir fails (EPERM; EROFS where it
        // is mounted read-only) after the open found nothing (ENOENT).
        let sys = open_root(c"/sys").unwrap();
        let r = subdir(sys.0, c"kvtier-not-here", Some(0o700), || panic!("made")).err();
        assert!(
            matches!(r, Some(libc::EPERM | libc::EROFS | libc::EACCES)),
            "{r:?}"
        );
    }

    #[test]
    fn direct_io_is_dropped_only_where_refused_and_only_when_the_tier_added_it() {
        // procfs refuses O_DIRECT (EINVAL): the open goes on without it.
        let proc_self = open_root(c"/proc/self").unwrap();
        let (f, st) = open_at(proc_self.0, c"status", libc::O_RDONLY, 0, true).unwrap();
        assert!(is_regular(&st));
        // SAFETY: an open descriptor.
        let fl = unsafe { libc::fcntl(f.0, libc::F_GETFL) };
        assert_eq!(fl & libc::O_DIRECT, 0);
        // O_DIRECT in the caller's own flags is kept: EINVAL.
        let flags = libc::O_RDONLY | libc::O_DIRECT;
        let r = open_at(proc_self.0, c"status", flags, 0, false);
        assert_eq!(r.err(), Some(libc::EINVAL));
        // With `direct`, the caller's flags still hold.
        let dir = tempfile::tempdir().unwrap();
        let root = open_root(&c_path(dir.path()).unwrap()).unwrap();
        let flags = libc::O_RDWR | libc::O_CREAT | libc::O_EXCL;
        let (f, st) = open_at(root.0, c"f", flags, 0o600, true).unwrap();
        assert!(is_regular(&st));
        // SAFETY: an open descriptor.
        let fl = unsafe { libc::fcntl(f.0, libc::F_GETFL) };
        assert_eq!(fl & libc::O_ACCMODE, libc::O_RDWR);
    }

    #[test]
    fn a_file_replaced_after_its_check_is_not_removed() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("a"), b"1").unwrap();
        let root = open_root(&c_path(dir.path()).unwrap()).unwrap();
        let st = lstat_at(root.0, &c("a")).unwrap();
        // Made while the first exists: another inode.
        std::fs::write(dir.path().join("b"), b"2").unwrap();
        std::fs::rename(dir.path().join("b"), dir.path().join("a")).unwrap();
        assert_eq!(unlink_same(root.0, &c("a"), &st), Ok(false));
        assert!(dir.path().join("a").exists());
        let st = lstat_at(root.0, &c("a")).unwrap();
        assert_eq!(unlink_same(root.0, &c("a"), &st), Ok(true));
        assert!(!dir.path().join("a").exists());
    }
}
