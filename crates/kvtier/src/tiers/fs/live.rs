//! The live map of the segments layout (`<root>/segments/live`): a bit
//! per record, set where the record may hold a block, so that a restart
//! reads the headers of those records only.
//!
//! The one rule that keeps it sound: **a record's bit is set on disk
//! before a block is written into it** (`mark`, on the worker, before the
//! record's write; with `durable`, `fdatasync`ed first).  Bits are never
//! cleared while the tier runs (an evicted record keeps its bit, so
//! storing into it again costs nothing); a clean shutdown rewrites the map
//! with exactly the records the index holds (`save`: a new file renamed
//! over the old one).  After a crash the map says "maybe live" of every
//! record that held a block at the last clean shutdown or was written
//! since: the scan reads more than the live records, never fewer, and
//! every record it reads is checked as before (header, key, size; the
//! data's checksum at its first load), so a dead record is never trusted
//! because of its bit.
//!
//! A mark sets its record's whole 64-bit word (the records after it are
//! the next ones the free list hands out), so a run of first stores costs
//! one 8-byte write per 64 records.
//!
//! A map that is missing, torn, or made for another record size or count
//! is not trusted: every record is read, as before the map existed, and
//! a new map is written before the tier opens.  When every segment file
//! was made by this open (the first open, or the old ones cleared away)
//! no record holds a block, and the map, whatever it says, marks none.

use std::ffi::CStr;
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};

use parking_lot::Mutex;

use super::beneath::{self, Fd, errno};
use super::file::{pread_exact, pwrite_all};
use crate::error::{Error, Result};

/// Name of the live map in the segments directory.
pub(crate) const LIVE_NAME: &str = "live";
/// Name it is written under before being renamed into place.
pub(crate) const LIVE_TEMP_NAME: &str = "live.tmp";
const MAGIC: [u8; 8] = *b"KVLIVE01";
/// Magic, record bytes, record count.
const HEADER_LEN: usize = 24;

fn c(name: &str) -> std::ffi::CString {
    std::ffi::CString::new(name).expect("no NUL")
}

/// A segments directory's live map, shared by the tier and its workers.
pub(super) struct LiveMap {
    /// The segments directory (for the rename of `save`).
    dir: Fd,
    /// The map file, read-write.
    file: Mutex<Fd>,
    words: Vec<AtomicU64>,
    record_bytes: u64,
    records: u32,
    durable: bool,
}

impl std::fmt::Debug for LiveMap {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LiveMap")
            .field("records", &self.records)
            .finish()
    }
}

fn word_count(records: u32) -> usize {
    (records as usize).div_ceil(64)
}

/// The bits of word `w` that name records (the last word's high bits do
/// not).
fn valid_bits(records: u32, w: usize) -> u64 {
    let left = records as usize - w * 64;
    if left >= 64 {
        u64::MAX
    } else {
        (1u64 << left) - 1
    }
}

fn encode(record_bytes: u64, records: u32, words: &[u64]) -> Vec<u8> {
    let mut out = Vec::with_capacity(HEADER_LEN + words.len() * 8);
    out.extend_from_slice(&MAGIC);
    out.extend_from_slice(&record_bytes.to_le_bytes());
    out.extend_from_slice(&u64::from(records).to_le_bytes());
    for w in words {
        out.extend_from_slice(&w.to_le_bytes());
    }
    out
}

/// The words of a map file's bytes, if they are a whole map for these
/// records.
fn decode(bytes: &[u8], record_bytes: u64, records: u32) -> Option<Vec<u64>> {
    let n = word_count(records);
    if bytes.len() != HEADER_LEN + n * 8 || bytes[..8] != MAGIC {
        return None;
    }
    let num = |at: usize| u64::from_le_bytes(bytes[at..at + 8].try_into().expect("8 bytes"));
    if num(8) != record_bytes || num(16) != u64::from(records) {
        return None;
    }
    Some((0..n).map(|w| num(HEADER_LEN + w * 8)).collect())
}

/// Reads file `name` of `dir` whole, if it is a regular file of at most
/// `max` bytes.
fn read_small(dir: i32, name: &CStr, max: usize) -> Option<Vec<u8>> {
    let (fd, st) = beneath::open_at(dir, name, libc::O_RDONLY, 0, false).ok()?;
    let len = st.st_size as usize;
    if len > max {
        return None;
    }
    let mut buf = vec![0u8; len];
    pread_exact(fd.0, buf.as_mut_ptr(), len, 0)
        .ok()
        .filter(|&whole| whole)?;
    Some(buf)
}

impl LiveMap {
    /// Opens the live map of the segments directory `seg` (shown as
    /// `shown`) for `records` records of `record_bytes`: with `fresh`
    /// (every segment file was made by this open) one marking no record;
    /// else a valid map as it is, or one marking every record; a map not
    /// read is written out before this returns.  Files it makes get mode
    /// `mode`.
    pub(super) fn open(
        seg: &Fd,
        shown: &Path,
        record_bytes: u64,
        records: u32,
        fresh: bool,
        mode: u32,
        durable: bool,
    ) -> Result<LiveMap> {
        let fail = |what: &str, e: i32| {
            Error::io(
                format!("fs tier: {what} {}", shown.join(LIVE_NAME).display()),
                std::io::Error::from_raw_os_error(e),
            )
        };
        // SAFETY: an open descriptor.
        let dir = unsafe { libc::fcntl(seg.0, libc::F_DUPFD_CLOEXEC, 0) };
        if dir < 0 {
            return Err(fail("opening", errno()));
        }
        let dir = Fd(dir);
        let max = HEADER_LEN + word_count(records) * 8;
        // New segment files hold no block, whatever an old map says.
        let found = (!fresh)
            .then(|| read_small(dir.0, &c(LIVE_NAME), max))
            .flatten()
            .and_then(|b| decode(&b, record_bytes, records));
        let trusted = found.is_some();
        let words = found.unwrap_or_else(|| {
            let fill = if fresh { 0 } else { u64::MAX };
            (0..word_count(records))
                .map(|w| fill & valid_bits(records, w))
                .collect()
        });
        let map = LiveMap {
            file: Mutex::new(Fd(-1)),
            dir,
            words: words.iter().map(|&w| AtomicU64::new(w)).collect(),
            record_bytes,
            records,
            durable,
        };
        if trusted {
            let (fd, _) = beneath::open_at(map.dir.0, &c(LIVE_NAME), libc::O_RDWR, 0, false)
                .map_err(|e| fail("opening", e))?;
            *map.file.lock() = fd;
        } else {
            map.write_whole(&words, mode)
                .map_err(|e| fail("writing", e))?;
        }
        Ok(map)
    }

    /// Writes `words` as a new map file and renames it over the map; the
    /// map's descriptor is the new file afterwards.
    fn write_whole(&self, words: &[u64], mode: u32) -> std::result::Result<(), i32> {
        let bytes = encode(self.record_bytes, self.records, words);
        let tmp = c(LIVE_TEMP_NAME);
        // SAFETY: NUL-terminated name in an open directory.
        unsafe { libc::unlinkat(self.dir.0, tmp.as_ptr(), 0) };
        let (fd, _) = beneath::open_at(
            self.dir.0,
            &tmp,
            libc::O_RDWR | libc::O_CREAT | libc::O_EXCL,
            mode,
            false,
        )?;
        pwrite_all(fd.0, bytes.as_ptr(), bytes.len(), 0)?;
        // SAFETY: an open descriptor.
        if self.durable && unsafe { libc::fdatasync(fd.0) } != 0 {
            return Err(errno());
        }
        let live = c(LIVE_NAME);
        // SAFETY: NUL-terminated names in an open directory.
        if unsafe { libc::renameat(self.dir.0, tmp.as_ptr(), self.dir.0, live.as_ptr()) } != 0 {
            return Err(errno());
        }
        if self.durable {
            // SAFETY: an open descriptor.
            unsafe { libc::fsync(self.dir.0) };
        }
        *self.file.lock() = fd;
        Ok(())
    }

    /// The bits as they are now, a word per 64 records: set where a record
    /// may hold a block.
    pub(super) fn snapshot(&self) -> Vec<u64> {
        self.words
            .iter()
            .map(|w| w.load(Ordering::Acquire))
            .collect()
    }

    /// Marks `record` (and the rest of its word) maybe live, on disk,
    /// before a block is written into it.  An error (the errno) leaves the
    /// bits as they were: the block must not be written.
    pub(super) fn mark(&self, record: u32) -> std::result::Result<(), i32> {
        let w = record as usize / 64;
        let bit = 1u64 << (record % 64);
        if self.words[w].load(Ordering::Acquire) & bit != 0 {
            return Ok(());
        }
        let file = self.file.lock();
        let old = self.words[w].load(Ordering::Acquire);
        if old & bit != 0 {
            return Ok(());
        }
        let new = valid_bits(self.records, w);
        let bytes = new.to_le_bytes();
        let at = (HEADER_LEN + w * 8) as u64;
        pwrite_all(file.0, bytes.as_ptr(), 8, at)?;
        // SAFETY: an open descriptor.
        if self.durable && unsafe { libc::fdatasync(file.0) } != 0 {
            return Err(errno());
        }
        self.words[w].store(new, Ordering::Release);
        Ok(())
    }

    /// Rewrites the map with exactly the records `live` (a clean
    /// shutdown: nothing writes a record any more).
    pub(super) fn save(&self, live: &[u32], mode: u32) -> std::result::Result<(), i32> {
        let mut words = vec![0u64; word_count(self.records)];
        for &r in live.iter().filter(|&&r| r < self.records) {
            words[r as usize / 64] |= 1 << (r % 64);
        }
        self.write_whole(&words, mode)?;
        for (w, &bits) in self.words.iter().zip(&words) {
            w.store(bits, Ordering::Release);
        }
        Ok(())
    }
}

/// The records whose bit is set in `words`, from `start` to before `end`,
/// in ascending order, into `out`.
pub(super) fn set_records(words: &[u64], start: u32, end: u32, out: &mut Vec<u32>) {
    let mut r = start;
    while r < end {
        let w = words[r as usize / 64] >> (r % 64);
        if w == 0 {
            r = (r / 64 + 1) * 64;
            continue;
        }
        r += w.trailing_zeros();
        if r < end {
            out.push(r);
        }
        r += 1;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn seg(dir: &Path) -> Fd {
        beneath::open_root(&beneath::c_path(dir).unwrap()).unwrap()
    }

    #[test]
    fn set_records_lists_the_set_bits_of_a_range() {
        let words = [0b1010_0001u64, 0, 1 << 63 | 1];
        let mut out = Vec::new();
        set_records(&words, 0, 192, &mut out);
        assert_eq!(out, [0, 5, 7, 128, 191]);
        out.clear();
        set_records(&words, 1, 129, &mut out);
        assert_eq!(out, [5, 7, 128]);
        out.clear();
        set_records(&words, 6, 7, &mut out);
        assert!(out.is_empty());
    }

    #[test]
    fn a_missing_map_trusts_nothing_unless_the_segments_are_new() {
        let d = tempfile::tempdir().unwrap();
        let m = LiveMap::open(&seg(d.path()), d.path(), 8192, 70, false, 0o600, false).unwrap();
        assert_eq!(m.snapshot(), [u64::MAX, (1 << 6) - 1]);
        let d = tempfile::tempdir().unwrap();
        let m = LiveMap::open(&seg(d.path()), d.path(), 8192, 70, true, 0o600, false).unwrap();
        assert_eq!(m.snapshot(), [0, 0]);
        assert!(d.path().join(LIVE_NAME).exists(), "written at open");
        m.mark(1).unwrap();
        drop(m);
        // New segment files (the old ones cleared away): the map is not read.
        let m = LiveMap::open(&seg(d.path()), d.path(), 8192, 70, true, 0o600, false).unwrap();
        assert_eq!(m.snapshot(), [0, 0]);
    }

    #[test]
    fn marks_reach_the_file_and_a_save_keeps_exactly_the_live_records() {
        let d = tempfile::tempdir().unwrap();
        let open = |fresh| LiveMap::open(&seg(d.path()), d.path(), 8192, 130, fresh, 0o600, false);
        let m = open(true).unwrap();
        m.mark(3).unwrap();
        m.mark(129).unwrap();
        drop(m);
        // Reopened (as after a crash): the marked words, whole.
        let m = open(false).unwrap();
        assert_eq!(m.snapshot(), [u64::MAX, 0, 0b11]);
        m.save(&[5, 70], 0o600).unwrap();
        m.mark(5).unwrap();
        drop(m);
        let m = open(false).unwrap();
        assert_eq!(m.snapshot(), [1 << 5, 1 << 6, 0]);
        assert!(!d.path().join(LIVE_TEMP_NAME).exists());
    }

    #[test]
    fn a_map_of_other_records_or_a_torn_one_is_not_trusted() {
        let d = tempfile::tempdir().unwrap();
        let m = LiveMap::open(&seg(d.path()), d.path(), 8192, 64, true, 0o600, false).unwrap();
        m.save(&[1], 0o600).unwrap();
        drop(m);
        // Another record size, another count: every record maybe live.
        let m = LiveMap::open(&seg(d.path()), d.path(), 4096, 64, false, 0o600, false).unwrap();
        assert_eq!(m.snapshot(), [u64::MAX]);
        drop(m);
        let m = LiveMap::open(&seg(d.path()), d.path(), 4096, 64, false, 0o600, false).unwrap();
        m.save(&[1], 0o600).unwrap();
        drop(m);
        let path = d.path().join(LIVE_NAME);
        let bytes = std::fs::read(&path).unwrap();
        std::fs::write(&path, &bytes[..bytes.len() - 1]).unwrap();
        let m = LiveMap::open(&seg(d.path()), d.path(), 4096, 64, false, 0o600, false).unwrap();
        assert_eq!(m.snapshot(), [u64::MAX], "torn");
    }

    #[test]
    fn a_durable_map_marks_and_saves_like_any_other() {
        let d = tempfile::tempdir().unwrap();
        let open = |fresh| LiveMap::open(&seg(d.path()), d.path(), 4096, 128, fresh, 0o600, true);
        let m = open(true).unwrap();
        m.mark(70).unwrap();
        assert_eq!(m.snapshot(), [0, u64::MAX]);
        m.save(&[2], 0o600).unwrap();
        drop(m);
        assert_eq!(open(false).unwrap().snapshot(), [1 << 2, 0]);
    }

    #[test]
    fn a_save_ignores_records_the_map_does_not_have() {
        let d = tempfile::tempdir().unwrap();
        let m = LiveMap::open(&seg(d.path()), d.path(), 4096, 64, true, 0o600, false).unwrap();
        m.save(&[3, 64, u32::MAX], 0o600).unwrap();
        assert_eq!(m.snapshot(), [1 << 3]);
    }

    #[test]
    fn a_huge_map_file_is_refused_without_reading_it() {
        let d = tempfile::tempdir().unwrap();
        let m = LiveMap::open(&seg(d.path()), d.path(), 4096, 64, true, 0o600, false).unwrap();
        m.save(&[1], 0o600).unwrap();
        drop(m);
        // A sparse terabyte under the map's name: reading it whole would
        // take the memory of the machine; the size alone refuses it.
        let f = std::fs::OpenOptions::new()
            .write(true)
            .open(d.path().join(LIVE_NAME))
            .unwrap();
        f.set_len(1 << 40).unwrap();
        drop(f);
        let m = LiveMap::open(&seg(d.path()), d.path(), 4096, 64, false, 0o600, false).unwrap();
        assert_eq!(m.snapshot(), [u64::MAX], "not trusted");
    }
}
