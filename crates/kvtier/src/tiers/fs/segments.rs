//! The segments layout: blocks in a few large, preallocated files instead
//! of a file per block.
//!
//! A file per block costs the file system a create, a directory entry and
//! a block allocation per store, which small blocks cannot hide (on ext4
//! with `O_DIRECT`, storing 256 KiB blocks one file each runs at a third of
//! plain `pwrite`).  Here the capacity is cut into fixed-size records, one
//! block each, laid end to end in segment files of about the options'
//! `segment_file_bytes` (default 1 GiB) made once, at open, with
//! `fallocate`; a store is one `pwritev` into its record, a load one
//! `preadv`.
//!
//! - A record is a block file's bytes: the same page-sized header (magic,
//!   version, key, length, the key-bound checksum, the header's own
//!   checksum), then the data ([`mod@super::format`]).  A load verifies
//!   header and checksum as for a block file, so a torn or stale record is
//!   never served.
//! - Which key lives in which record is the tier's index (in memory); a
//!   restart reads the headers of the records the live map (`live.rs`)
//!   says may hold a block to rebuild it, in the background
//!   (`scan.rs`).  A record whose header is damaged, of another version or
//!   block size, or repeats a key already found is left free and
//!   overwritten later.  A crash during a
//!   store leaves the record's old block, or a record whose checksum fails
//!   at its first load (reported failed, dropped): never a wrong block.
//! - An evicted block is not erased: its record goes back to the free list
//!   and the next store overwrites it.
//! - Segment files are `<root>/segments/<record bytes>-<n>.kvs`.  Files of
//!   another record size (another block size) and segments beyond the
//!   capacity are removed at open; a changed capacity resizes the last one.
//! - One process at a time: `<root>/segments/lock` is held with `flock` for
//!   the tier's lifetime, and a second tier opening the directory is
//!   refused.  A directory several processes share needs the files layout.

use std::ffi::CString;
use std::path::Path;

use super::beneath;
use super::beneath::{Fd, errno};
use super::format::{HEADER_LEN, file_len};
use super::live::LiveMap;
use super::rebuild::RebuildReport;
use crate::error::{Error, Result};

/// Name of the directory, under the tier's root, holding the segments.
pub(crate) const SEGMENTS_DIR: &str = "segments";

/// What opening the segments gives: the segments, and what opening them
/// removed.
pub(super) type Opened = (Segments, RebuildReport);

/// Where the records are: the segment files and their shape, shared by
/// the tier's workers and its restart scan.
pub(super) struct Geometry {
    files: Vec<Fd>,
    record_bytes: u64,
    per_segment: u32,
    records: u32,
}

/// The open segment files of a tier.
pub(super) struct Segments {
    geometry: std::sync::Arc<Geometry>,
    /// Which records may hold a block.
    pub(super) live: std::sync::Arc<LiveMap>,
    /// Whether the files were opened with `O_DIRECT`.
    direct: bool,
    /// Holds the directory's `flock` while the tier lives.
    _lock: Fd,
}

impl std::fmt::Debug for Segments {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Segments")
            .field("files", &self.geometry.files.len())
            .field("record_bytes", &self.geometry.record_bytes)
            .field("records", &self.geometry.records)
            .field("direct", &self.direct)
            .finish()
    }
}

/// What a segment file is called, for records of `record_bytes` bytes.
fn segment_name(record_bytes: u64, n: u32) -> String {
    format!("{record_bytes}-{n}.kvs")
}

/// The record size and number of a segment file's name.
pub(super) fn parse_segment_name(name: &str) -> Option<(u64, u32)> {
    let stem = name.strip_suffix(".kvs")?;
    let (bytes, n) = stem.split_once('-')?;
    Some((bytes.parse().ok()?, n.parse().ok()?))
}

fn io_error(what: String, errno: i32) -> Error {
    if errno == beneath::FOREIGN {
        return Error::InvalidArgument(format!(
            "{what}: a symlink, FIFO, socket or device is in the way (left alone; remove it)"
        ));
    }
    Error::io(what, std::io::Error::from_raw_os_error(errno))
}

fn c_name(name: &str) -> CString {
    CString::new(name).expect("segment names hold no NUL")
}

/// Opens segment file `name` of directory `dir` read-write, creating it
/// (mode `mode`), never through a symlink, with `O_DIRECT` when `direct`
/// (without it where the file system refuses it); says whether it has it
/// and whether this call created the file.
fn open_rw(
    dir: i32,
    name: &str,
    mode: u32,
    direct: bool,
    shown: &Path,
) -> Result<(Fd, bool, bool)> {
    let (fd, created) = beneath::open_or_create(dir, &c_name(name), mode, direct).map_err(|e| {
        io_error(
            format!("fs tier: opening {}", shown.join(name).display()),
            e,
        )
    })?;
    // SAFETY: an open descriptor.
    let got = unsafe { libc::fcntl(fd.0, libc::F_GETFL) };
    Ok((fd, got >= 0 && got & libc::O_DIRECT != 0, created))
}

/// Makes the file `fd` exactly `len` bytes long, its blocks allocated
/// (`fallocate`; `ftruncate` where the file system has no `fallocate`).
fn size_file(fd: &Fd, len: u64, path: &Path) -> Result<()> {
    // SAFETY: stat is plain data, valid when zeroed.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    // SAFETY: an open descriptor and a valid out-parameter.
    if unsafe { libc::fstat(fd.0, &mut st) } != 0 {
        return Err(io_error(
            format!("fs tier: stat {}", path.display()),
            errno(),
        ));
    }
    // SAFETY: an open descriptor.
    if st.st_size as u64 > len && unsafe { libc::ftruncate(fd.0, len as libc::off_t) } != 0 {
        return Err(io_error(
            format!("fs tier: resizing {}", path.display()),
            errno(),
        ));
    }
    // SAFETY: an open descriptor.
    if unsafe { libc::fallocate(fd.0, 0, 0, len as libc::off_t) } == 0 {
        return Ok(());
    }
    match errno() {
        libc::ENOSPC | libc::EDQUOT => Err(Error::NoSpace(format!(
            "fs tier: reserving {len} bytes for {}",
            path.display()
        ))),
        // SAFETY: an open descriptor.
        libc::EOPNOTSUPP if unsafe { libc::ftruncate(fd.0, len as libc::off_t) } == 0 => Ok(()),
        e => Err(io_error(
            format!("fs tier: reserving {}", path.display()),
            e,
        )),
    }
}

impl Segments {
    /// Opens (or makes) the segment files under `root` for the options'
    /// capacity of blocks of `block_bytes`, in files of about the options'
    /// `segment_file_bytes`, taking the directory's lock and reading its
    /// live map: returns the segments and what opening them removed.  No
    /// record is read (the restart scan does that, `scan.rs`).  `direct`:
    /// use `O_DIRECT` if the file system takes it.
    pub(super) fn open(
        root: &Path,
        block_bytes: usize,
        opts: &super::FsOptions,
        direct: bool,
    ) -> Result<Opened> {
        Segments::open_sized(
            root,
            block_bytes,
            opts.capacity_bytes,
            direct,
            opts.segment_file_bytes,
            opts.file_mode,
            opts.durable,
        )
    }

    /// [`Segments::open`] for `capacity_bytes` in files of about `target`
    /// bytes, creating files of mode `file_mode` (the live map's marks
    /// `fdatasync`ed when `durable`).  A failed open removes what it
    /// created (the segments directory, the lock file, segment files),
    /// and nothing else.
    #[allow(clippy::too_many_arguments)]
    fn open_sized(
        root: &Path,
        block_bytes: usize,
        capacity_bytes: u64,
        direct: bool,
        target: u64,
        file_mode: u32,
        durable: bool,
    ) -> Result<Opened> {
        let record_bytes = file_len(block_bytes);
        let records = u32::try_from(capacity_bytes / record_bytes).map_err(|_| {
            Error::InvalidArgument(format!(
                "fs tier: capacity {capacity_bytes} bytes makes more than {} records of {record_bytes} bytes",
                u32::MAX
            ))
        })?;
        if records == 0 {
            return Err(Error::InvalidArgument(format!(
                "fs tier: the segments layout needs a capacity of at least one record ({record_bytes} bytes), got {capacity_bytes}"
            )));
        }
        let dir = root.join(SEGMENTS_DIR);
        let root_c = beneath::c_path(root)
            .map_err(|e| io_error(format!("fs tier: opening {}", root.display()), e))?;
        let root_fd = beneath::open_root(&root_c)
            .map_err(|e| io_error(format!("fs tier: opening {}", root.display()), e))?;
        let mut made_dir = false;
        let seg = beneath::subdir(
            root_fd.0,
            &c_name(SEGMENTS_DIR),
            Some(beneath::dir_mode_of(file_mode)),
            || made_dir = true,
        )
        .map_err(|e| io_error(format!("fs tier: opening {}", dir.display()), e))?;
        let mut created = Vec::new();
        let opened = Segments::open_in(
            &seg,
            &dir,
            block_bytes,
            records,
            direct,
            target,
            (file_mode, durable),
            &mut created,
        );
        if opened.is_err() {
            // Segment files first, then the lock (still held), then the
            // directory if this open made it.
            for name in created.iter().rev() {
                // SAFETY: NUL-terminated name in an open directory.
                unsafe { libc::unlinkat(seg.0, name.as_ptr(), 0) };
            }
            if made_dir {
                // SAFETY: NUL-terminated name in an open directory.
                unsafe {
                    libc::unlinkat(root_fd.0, c_name(SEGMENTS_DIR).as_ptr(), libc::AT_REMOVEDIR)
                };
            }
        }
        opened
    }

    /// The body of [`Segments::open_sized`] in the open segments directory
    /// `seg` (shown as `dir`); the names of the files it creates go to
    /// `created`.
    #[allow(clippy::too_many_arguments)]
    fn open_in(
        seg: &Fd,
        dir: &Path,
        block_bytes: usize,
        records: u32,
        direct: bool,
        target: u64,
        (file_mode, durable): (u32, bool),
        created: &mut Vec<CString>,
    ) -> Result<Opened> {
        let (lock, made) = lock_dir(seg, dir, file_mode)?;
        let record_bytes = file_len(block_bytes);
        if made {
            created.push(c_name(LOCK_NAME));
        }
        let per_segment = ((target / record_bytes).max(1) as u32).min(records);
        let count = records.div_ceil(per_segment);
        let mut report = RebuildReport::default();
        remove_foreign(seg, dir, record_bytes, count, &mut report)?;
        let mut files = Vec::with_capacity(count as usize);
        let mut direct_all = direct && block_bytes % HEADER_LEN == 0;
        // Whether every segment file is new: then no record was written.
        let mut fresh = true;
        for n in 0..count {
            let name = segment_name(record_bytes, n);
            let (fd, is_direct, made) = open_rw(seg.0, &name, file_mode, direct_all, dir)?;
            if made {
                created.push(c_name(&name));
            }
            fresh &= made;
            direct_all &= is_direct;
            let in_this = (records - n * per_segment).min(per_segment);
            size_file(&fd, in_this as u64 * record_bytes, &dir.join(&name))?;
            files.push(fd);
        }
        if !direct_all {
            // One mode for every file: reopen any opened with O_DIRECT.
            for (n, fd) in files.iter_mut().enumerate() {
                let name = segment_name(record_bytes, n as u32);
                *fd = open_rw(seg.0, &name, file_mode, false, dir)?.0;
            }
        }
        if fresh {
            // A failed open removes the map it may have written.
            created.push(c_name(super::live::LIVE_NAME));
            created.push(c_name(super::live::LIVE_TEMP_NAME));
        }
        let live = LiveMap::open(seg, dir, record_bytes, records, fresh, file_mode, durable)?;
        let segments = Segments {
            geometry: std::sync::Arc::new(Geometry {
                files,
                record_bytes,
                per_segment,
                records,
            }),
            live: std::sync::Arc::new(live),
            direct: direct_all,
            _lock: lock,
        };
        Ok((segments, report))
    }

    /// Number of records.
    pub(super) fn records(&self) -> u32 {
        self.geometry.records
    }

    /// Where the records are, for the restart scan.
    pub(super) fn geometry(&self) -> std::sync::Arc<Geometry> {
        std::sync::Arc::clone(&self.geometry)
    }

    /// Whether the files are open with `O_DIRECT`.
    pub(super) fn direct(&self) -> bool {
        self.direct
    }

    /// The descriptor and byte offset of record `record`; `None` past the
    /// last record.
    pub(super) fn locate(&self, record: u32) -> Option<(i32, u64)> {
        self.geometry.locate(record)
    }
}

impl Geometry {
    /// Number of records.
    pub(super) fn records(&self) -> u32 {
        self.records
    }

    /// The descriptor and byte offset of record `record`; `None` past the
    /// last record.
    pub(super) fn locate(&self, record: u32) -> Option<(i32, u64)> {
        if record >= self.records {
            return None;
        }
        let file = (record / self.per_segment) as usize;
        let off = (record % self.per_segment) as u64 * self.record_bytes;
        Some((self.files[file].0, off))
    }
}

/// Name of the lock file in the segments directory.
pub(crate) const LOCK_NAME: &str = "lock";

/// Takes the `flock` of the lock file of the segments directory `seg`
/// (shown as `dir`), creating it (mode `mode`) if missing, or says which
/// process holds it; says whether this call created the file.  A lock
/// that is not a regular file (a symlink, FIFO, ...) is refused, untouched.
pub(super) fn lock_dir(seg: &Fd, dir: &Path, mode: u32) -> Result<(Fd, bool)> {
    let path = dir.join(LOCK_NAME);
    let (fd, made) = beneath::open_or_create(seg.0, &c_name(LOCK_NAME), mode, false)
        .map_err(|e| io_error(format!("fs tier: opening {}", path.display()), e))?;
    // SAFETY: an open descriptor.
    if unsafe { libc::flock(fd.0, libc::LOCK_EX | libc::LOCK_NB) } != 0 {
        let e = errno();
        if e == libc::EWOULDBLOCK {
            return Err(Error::AlreadyExists(format!(
                "fs tier: the segments of {} are in use by another tier (one process at a time; the files layout lets processes share a directory)",
                dir.display()
            )));
        }
        return Err(io_error(format!("fs tier: locking {}", path.display()), e));
    }
    Ok((fd, made))
}

/// Removes segment files of another record size, and those numbered
/// `count` or more (the capacity shrank): regular files only; anything
/// else under a segment name is counted foreign and left alone.
fn remove_foreign(
    seg: &Fd,
    dir: &Path,
    record_bytes: u64,
    count: u32,
    report: &mut RebuildReport,
) -> Result<()> {
    let names = beneath::list(seg.0)
        .map_err(|e| io_error(format!("fs tier: listing {}", dir.display()), e))?;
    for name in names {
        let Some((bytes, n)) = name.to_str().and_then(parse_segment_name) else {
            continue;
        };
        if bytes != record_bytes || n >= count {
            match beneath::unlink_regular(seg.0, &beneath::c_name(&name)) {
                Ok(true) => {
                    report.skipped += 1;
                    report.removed += 1;
                }
                Ok(false) => {}
                Err(beneath::FOREIGN) => report.foreign += 1,
                Err(_) => report.skipped += 1,
            }
        }
    }
    Ok(())
}

/// The segments directory of a tier rooted at `root`.
#[cfg(test)]
pub(crate) fn segments_dir(root: &Path) -> std::path::PathBuf {
    root.join(SEGMENTS_DIR)
}

#[cfg(test)]
mod tests {
    use super::super::options::SEGMENT_TARGET_BYTES;
    use super::*;
    use std::fs;

    #[test]
    fn segment_names_round_trip_and_reject_others() {
        assert_eq!(
            parse_segment_name(&segment_name(266240, 7)),
            Some((266240, 7))
        );
        assert_eq!(parse_segment_name("266240-7.kvb"), None);
        assert_eq!(parse_segment_name("lock"), None);
        assert_eq!(parse_segment_name("x-1.kvs"), None);
    }

    #[test]
    fn records_map_to_consecutive_offsets_within_each_segment() {
        let dir = tempfile::tempdir().unwrap();
        let block = 4096;
        let record = file_len(block);
        // Two records per segment: files of 2, 2 and 1 records.
        let (s, report) = Segments::open_sized(
            dir.path(),
            block,
            record * 5,
            false,
            record * 2,
            0o600,
            false,
        )
        .unwrap();
        assert_eq!(report.blocks, 0);
        assert_eq!(s.records(), 5);
        let at = |r| s.locate(r).unwrap();
        assert_eq!(s.locate(5), None, "past the last record");
        assert_eq!(at(0).0, at(1).0);
        assert_ne!(at(1).0, at(2).0);
        assert_ne!(at(3).0, at(4).0);
        let offsets: Vec<u64> = (0..5).map(|r| at(r).1).collect();
        assert_eq!(offsets, [0, record, 0, record, 0]);
        let len = |n| {
            fs::metadata(segments_dir(dir.path()).join(segment_name(record, n)))
                .unwrap()
                .len()
        };
        assert_eq!([len(0), len(1), len(2)], [2 * record, 2 * record, record]);
        drop(s);
        // A smaller capacity shortens the last file and drops the rest.
        let (s, _) = Segments::open_sized(
            dir.path(),
            block,
            record * 3,
            false,
            record * 2,
            0o600,
            false,
        )
        .unwrap();
        assert_eq!(s.records(), 3);
        assert_eq!([len(0), len(1)], [2 * record, record]);
        assert!(
            !segments_dir(dir.path())
                .join(segment_name(record, 2))
                .exists()
        );
    }

    #[test]
    fn a_second_open_of_the_same_directory_is_refused_while_the_first_lives() {
        let dir = tempfile::tempdir().unwrap();
        let block = 4096;
        let cap = file_len(block) * 4;
        let open = || {
            Segments::open_sized(
                dir.path(),
                block,
                cap,
                false,
                SEGMENT_TARGET_BYTES,
                0o600,
                false,
            )
        };
        let first = open().unwrap();
        let err = open().unwrap_err();
        assert!(matches!(err, Error::AlreadyExists(_)), "{err}");
        drop(first);
        open().unwrap();
    }

    #[test]
    fn other_record_sizes_and_segments_past_the_capacity_are_removed() {
        let dir = tempfile::tempdir().unwrap();
        let seg = segments_dir(dir.path());
        fs::create_dir_all(&seg).unwrap();
        let record = file_len(4096);
        fs::write(seg.join(segment_name(record + 4096, 0)), b"x").unwrap();
        fs::write(seg.join(segment_name(record, 3)), b"x").unwrap();
        fs::write(seg.join("unrelated"), b"x").unwrap();
        let (_s, report) = Segments::open_sized(
            dir.path(),
            4096,
            record * 2,
            false,
            SEGMENT_TARGET_BYTES,
            0o600,
            false,
        )
        .unwrap();
        assert_eq!((report.skipped, report.removed), (2, 2));
        assert!(!seg.join(segment_name(record + 4096, 0)).exists());
        assert!(!seg.join(segment_name(record, 3)).exists());
        assert!(seg.join("unrelated").exists());
    }

    #[test]
    fn every_segment_file_is_open_the_way_direct_says() {
        // Under target/ (a disk, where O_DIRECT usually works), then
        // asking for buffered files.
        let parent = std::path::Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/../../target"));
        for want in [true, false] {
            let dir = tempfile::tempdir_in(parent).unwrap();
            let record = file_len(4096);
            let (s, _) =
                Segments::open_sized(dir.path(), 4096, record * 4, want, record * 2, 0o600, false)
                    .unwrap();
            assert!(want || !s.direct());
            for fd in &s.geometry.files {
                // SAFETY: an open descriptor.
                let flags = unsafe { libc::fcntl(fd.0, libc::F_GETFL) };
                assert_eq!(flags & libc::O_DIRECT != 0, s.direct(), "want {want}");
            }
        }
    }

    #[test]
    fn a_capacity_below_one_record_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let err = Segments::open_sized(
            dir.path(),
            4096,
            100,
            false,
            SEGMENT_TARGET_BYTES,
            0o600,
            false,
        )
        .unwrap_err();
        assert!(matches!(err, Error::InvalidArgument(_)), "{err}");
    }
}
