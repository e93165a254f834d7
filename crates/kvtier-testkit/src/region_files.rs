//! A region's backing file as a creator leaves it part way through, for
//! the tests of joiners and of reclaiming what killed processes left.

use std::fs::File;
use std::os::fd::AsRawFd;
use std::path::Path;

/// Does by hand what a creator does before it sizes the file: creates it
/// exclusively, marks it as being set up (a write lock on its first byte,
/// per open file description) and takes the shared lock every mapper
/// holds.  The marks last as long as the returned file is open.
pub fn start_creating_by_hand(path: &Path) -> File {
    let f = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .create_new(true)
        .open(path)
        .unwrap();
    // SAFETY: an all-zero flock is a valid value of the plain C struct.
    let mut fl: libc::flock = unsafe { std::mem::zeroed() };
    fl.l_type = libc::F_WRLCK as _;
    fl.l_whence = libc::SEEK_SET as _;
    fl.l_len = 1;
    // SAFETY: a descriptor this function owns and a valid flock.
    assert_eq!(
        unsafe { libc::fcntl(f.as_raw_fd(), libc::F_OFD_SETLK, &fl) },
        0
    );
    // SAFETY: a descriptor this function owns.
    assert_eq!(unsafe { libc::flock(f.as_raw_fd(), libc::LOCK_SH) }, 0);
    f
}
