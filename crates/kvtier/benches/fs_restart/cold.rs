//! A cold page cache without root, and the device-speed references read
//! through it: the files of a tier's directory listed, their cached pages
//! dropped (`sync`, then `posix_fadvise(POSIX_FADV_DONTNEED)` on each) and
//! checked gone (`mincore` on a sample), every byte read by one thread, and
//! one header per block read from several threads.
//!
//! Inodes and directory blocks stay cached (only `drop_caches`, as root,
//! drops those), so a listing after a drop costs less than after a reboot.

use std::ffi::CString;
use std::fs::File;
use std::io::Read;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{FileExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

/// A block's header: the first page of a block file or record.
pub const HEADER_BYTES: usize = 4096;

/// Every regular file under `root` (any depth), in path order.  The entry
/// types come with the directory's listing: no file is opened or stat'ed.
pub fn list_files(root: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let mut dirs = vec![root.to_path_buf()];
    while let Some(d) = dirs.pop() {
        for e in std::fs::read_dir(&d).expect("listing the tier's directory") {
            let e = e.expect("a directory entry");
            let t = e.file_type().expect("an entry's type");
            if t.is_dir() {
                dirs.push(e.path());
            } else if t.is_file() {
                out.push(e.path());
            }
        }
    }
    out.sort();
    out
}

/// Writes everything back, then asks the kernel to drop the cached pages
/// of every file.  The number of files it could not open or advise.
pub fn drop_cache(files: &[PathBuf]) -> usize {
    // SAFETY: no arguments.
    unsafe { libc::sync() };
    let mut failed = 0;
    for p in files {
        match File::open(p) {
            Ok(f) => {
                use std::os::fd::AsRawFd;
                // SAFETY: an open descriptor; the whole file.
                let r =
                    unsafe { libc::posix_fadvise(f.as_raw_fd(), 0, 0, libc::POSIX_FADV_DONTNEED) };
                failed += usize::from(r != 0);
            }
            Err(_) => failed += 1,
        }
    }
    failed
}

/// Pages still cached, of those looked at, in up to `sample` files spread
/// over `files` (every page of each).
pub fn cached_pages(files: &[PathBuf], sample: usize) -> (u64, u64) {
    let page = page_size();
    let step = (files.len() / sample.max(1)).max(1);
    let (mut cached, mut total) = (0u64, 0u64);
    for p in files.iter().step_by(step).take(sample) {
        let Ok(f) = File::open(p) else { continue };
        let len = f.metadata().map_or(0, |m| m.len()) as usize;
        if len == 0 {
            continue;
        }
        use std::os::fd::AsRawFd;
        // SAFETY: a read-only shared mapping of an open file's length.
        let addr = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ,
                libc::MAP_SHARED,
                f.as_raw_fd(),
                0,
            )
        };
        if addr == libc::MAP_FAILED {
            continue;
        }
        let pages = len.div_ceil(page);
        let mut vec = vec![0u8; pages];
        // SAFETY: `vec` has a byte per page of the mapping.
        let r = unsafe { libc::mincore(addr, len, vec.as_mut_ptr()) };
        // SAFETY: the mapping made above.
        unsafe { libc::munmap(addr, len) };
        if r == 0 {
            cached += vec.iter().filter(|&&b| b & 1 != 0).count() as u64;
            total += pages as u64;
        }
    }
    (cached, total)
}

fn page_size() -> usize {
    // SAFETY: no arguments.
    unsafe { libc::sysconf(libc::_SC_PAGESIZE) as usize }
}

/// One thread reads every file front to back in 128 KiB reads (as `cat`
/// does): the bytes read and the time.
pub fn sequential_read(files: &[PathBuf]) -> (u64, Duration) {
    let mut buf = vec![0u8; 128 << 10];
    let mut bytes = 0u64;
    let start = Instant::now();
    for p in files {
        let mut f = File::open(p).expect("opening a file to read");
        loop {
            let n = f.read(&mut buf).expect("reading a file");
            if n == 0 {
                break;
            }
            bytes += n as u64;
        }
    }
    (bytes, start.elapsed())
}

/// Where each block's header is: a file of its own (opened for the read),
/// or a record at an offset of a segment file (opened once).
pub enum Headers {
    Files(Vec<PathBuf>),
    Records {
        files: Vec<PathBuf>,
        /// (index into `files`, offset).
        at: Vec<(usize, u64)>,
    },
}

impl Headers {
    pub fn len(&self) -> usize {
        match self {
            Headers::Files(f) => f.len(),
            Headers::Records { at, .. } => at.len(),
        }
    }
}

/// A 4 KiB-aligned page for `O_DIRECT` reads.
#[repr(C, align(4096))]
struct Page([u8; HEADER_BYTES]);

fn open_direct(p: &Path) -> File {
    std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_DIRECT)
        .open(p)
        .or_else(|_| File::open(p))
        .expect("opening a file to read its headers")
}

/// Reads every header once, `threads` threads taking the next one in turn,
/// each a positioned 4 KiB read with `O_DIRECT` where the file system takes
/// it (no read-ahead: the device's random-read speed).
pub fn header_reads(headers: &Headers, threads: usize) -> Duration {
    let next = AtomicUsize::new(0);
    let opened: Vec<File> = match headers {
        Headers::Records { files, .. } => files.iter().map(|p| open_direct(p)).collect(),
        Headers::Files(_) => Vec::new(),
    };
    let start = Instant::now();
    std::thread::scope(|s| {
        for _ in 0..threads {
            let (next, opened) = (&next, &opened);
            s.spawn(move || {
                let mut page = Box::new(Page([0; HEADER_BYTES]));
                loop {
                    let i = next.fetch_add(1, Ordering::Relaxed);
                    if i >= headers.len() {
                        break;
                    }
                    let n = match headers {
                        Headers::Files(files) => open_direct(&files[i]).read_at(&mut page.0, 0),
                        Headers::Records { at, .. } => {
                            let (f, off) = at[i];
                            opened[f].read_at(&mut page.0, off)
                        }
                    };
                    assert_eq!(n.expect("reading a header"), HEADER_BYTES, "a whole header");
                }
            });
        }
    });
    start.elapsed()
}

/// Free bytes on the file system holding `dir`.
pub fn free_bytes(dir: &Path) -> u64 {
    let c = CString::new(dir.as_os_str().as_bytes()).expect("a path without NUL");
    // SAFETY: statvfs fills the struct.
    let mut st: libc::statvfs = unsafe { std::mem::zeroed() };
    // SAFETY: a NUL-terminated path and a struct to fill.
    if unsafe { libc::statvfs(c.as_ptr(), &mut st) } != 0 {
        return 0;
    }
    st.f_bavail as u64 * st.f_frsize as u64
}
