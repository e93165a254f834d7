//! Finding and removing the files of regions no process maps any more.
//!
//! A region's files are replaced when some process opens the same name
//! again (see `setup.rs`); a caller whose names change at every start (the
//! vLLM layer's hold the engine id) never does, so the files of a process
//! killed before it removed them stay until something sweeps the directory.
//! [`reclaim_stale`] is that sweep; [`survey`] looks without removing.
//!
//! The rules, for every name under `directory` that starts with `prefix`:
//!
//! - Names are grouped by region: `<name>.seg<N>` (N from 1, no leading
//!   zero) is segment N of region `<name>`; any other name is a region's
//!   first file.  Only regions whose name starts with the prefix count.
//! - The directory is hostile.  Every entry is looked at with `lstat`
//!   relative to one descriptor of the directory, opened with
//!   `O_NOFOLLOW | O_NONBLOCK` only once it is known to be a regular file,
//!   and taken only if the open file is the file looked at.  Symlinks,
//!   directories, FIFOs, sockets and devices are never opened, followed
//!   or removed; nor are files of another user (also as root).
//! - A first file must begin with a region's layout header (the magic
//!   `KVTIERRG`, any format version).  One without it is kept: a creator
//!   writes the header while the file is one page long and before any
//!   segment exists, so what a creator killed earlier leaves is at most a
//!   page, and nothing tells it from another program's file of the same
//!   prefix.  (The region's own set-up replaces it if its name is opened
//!   again.)
//! - Every process mapping a region holds a shared `flock` on each of its
//!   files, so a region is stale when this call gets an exclusive `flock`
//!   (without waiting) on its first file and on every segment.  A region
//!   any of whose files is held, not a regular file, or another user's is
//!   kept whole.
//! - Segments whose first file is gone (removed by hand: kvtier removes a
//!   region's segments before its first file) are removed under the same
//!   rules but the header, which segments do not have: no process can map
//!   them (a joiner needs the first file, and a creator of that name
//!   replaces unheld segments as it goes), and each is a gigabyte or more.
//!   The first file's absence is checked again once they are locked.
//! - A file is removed only while its name still names the file that was
//!   locked; segments go first, highest number first, then the first
//!   file, the order in which kvtier itself removes a region.
//!
//! The exclusive probe is the one the region's own set-up uses on a file
//! it finds existing: a live region's files are held, so the probe fails
//! at once and disturbs nobody.  A creator opening a stale region of the
//! same name while this call holds it waits for the lock; if this call
//! removes the region, the creator finds the name gone and starts over (if
//! it keeps it, because a segment is held, the creator joins it).  One
//! that creates an orphan segment's region at that instant may find the
//! segment still locked here and fail with [`Error::AlreadyExists`] (`in
//! use by another process`); a retry succeeds.

use std::ffi::{OsStr, OsString};
use std::fs::File;
use std::io;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::FileExt;
use std::path::Path;

use super::dir::{self, Dir, Entry};
use super::header;
use super::sys::{self, FileId};
use crate::error::{Error, Result};

/// One backing file found.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RegionFile {
    /// Its name in the directory.
    pub name: OsString,
    /// Its size in bytes (a symlink's: the length of its target).
    pub bytes: u64,
    /// Device and inode, as `lstat` saw them.
    pub id: (u64, u64),
}

/// Why a region's files were kept.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Kept {
    /// A process holds `file` (it maps the region, or is setting it up).
    Held {
        /// The file held.
        file: OsString,
    },
    /// `file` is not a regular file.
    NotRegular {
        /// The entry.
        file: OsString,
        /// What it is: `symlink`, `directory`, `FIFO`, `socket`, ...
        kind: &'static str,
    },
    /// `file` belongs to another user.
    OtherUser {
        /// The file.
        file: OsString,
        /// Its owner.
        uid: u32,
    },
    /// The first file does not begin with a region's layout header.
    NoHeader {
        /// What it begins with instead.
        why: String,
    },
    /// `file` was removed or replaced while it was looked at, or (for
    /// segments without a first file) the first file appeared.
    Changed {
        /// The file.
        file: OsString,
    },
    /// Looking at `file` or removing it failed.
    Failed {
        /// The file.
        file: OsString,
        /// The error.
        error: String,
    },
}

impl std::fmt::Display for Kept {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Kept::Held { file } => write!(f, "{} is held by a process", Path::new(file).display()),
            Kept::NotRegular { file, kind } => {
                write!(
                    f,
                    "{} is a {kind}, not a regular file",
                    Path::new(file).display()
                )
            }
            Kept::OtherUser { file, uid } => {
                write!(
                    f,
                    "{} belongs to another user (uid {uid})",
                    Path::new(file).display()
                )
            }
            Kept::NoHeader { why } => write!(f, "no region header: {why}"),
            Kept::Changed { file } => write!(
                f,
                "{} was removed, replaced or created while it was looked at",
                Path::new(file).display()
            ),
            Kept::Failed { file, error } => write!(f, "{}: {error}", Path::new(file).display()),
        }
    }
}

/// A region found under the prefix: its first file and segment files.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FoundRegion {
    /// The region's name: its first file's name.
    pub name: OsString,
    /// The first file; `None` when only segments were found.
    pub first: Option<RegionFile>,
    /// Segment files found, by number.
    pub segments: Vec<RegionFile>,
    /// Whether [`reclaim_stale`] removed its files.
    pub removed: bool,
    /// Why its files were kept; `None` when removed, or (by [`survey`])
    /// when only a process holding them would keep them.
    pub kept: Option<Kept>,
}

impl FoundRegion {
    /// Bytes of its files found.
    pub fn bytes(&self) -> u64 {
        self.first
            .iter()
            .chain(&self.segments)
            .map(|f| f.bytes)
            .sum()
    }

    /// Every file found, the first one first.
    pub fn files(&self) -> impl Iterator<Item = &RegionFile> {
        self.first.iter().chain(&self.segments)
    }
}

/// What a sweep found, region by region in name order.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ReclaimReport {
    /// The regions whose name starts with the prefix.
    pub regions: Vec<FoundRegion>,
}

impl ReclaimReport {
    /// The regions removed.
    pub fn removed(&self) -> impl Iterator<Item = &FoundRegion> {
        self.regions.iter().filter(|r| r.removed)
    }
}

/// Removes the files of every stale region under `directory` whose name
/// starts with `prefix` (non-empty, no `/`), by the rules of this module,
/// and reports every region found: removed, or kept and why.  A directory
/// that does not exist holds none.  Errors: a bad prefix, a directory that
/// cannot be opened or listed; a file that cannot be looked at or removed
/// is reported as [`Kept::Failed`] and the sweep goes on.
pub fn reclaim_stale(directory: &Path, prefix: &str) -> Result<ReclaimReport> {
    sweep(directory, prefix, true)
}

/// Looks at the regions [`reclaim_stale`] would consider, taking no lock
/// and removing nothing: each is reported with the reason it would be kept
/// for, or none when only a process holding it would keep it (which this
/// cannot tell without the probe; [`crate::region::inspect::holders_of`]
/// names the processes that have its files open or mapped).
pub fn survey(directory: &Path, prefix: &str) -> Result<ReclaimReport> {
    sweep(directory, prefix, false)
}

/// Splits `<region>.seg<N>` into the region's name and N.
fn segment_of(name: &[u8]) -> Option<(&[u8], u32)> {
    let at = name.windows(4).rposition(|w| w == b".seg")?;
    let digits = &name[at + 4..];
    if at == 0 || digits.is_empty() || digits[0] == b'0' {
        return None;
    }
    if !digits.iter().all(u8::is_ascii_digit) {
        return None;
    }
    let n = std::str::from_utf8(digits).ok()?.parse().ok()?;
    Some((&name[..at], n))
}

fn sweep(directory: &Path, prefix: &str, remove: bool) -> Result<ReclaimReport> {
    if prefix.is_empty() || prefix.contains('/') || prefix.contains('\0') {
        return Err(Error::InvalidArgument(format!(
            "prefix {prefix:?}: expected the non-empty start of a file name (no '/')"
        )));
    }
    let dir = match Dir::open(directory) {
        Ok(d) => d,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(ReclaimReport::default()),
        Err(e) => return Err(Error::io(format!("opening {}", directory.display()), e)),
    };
    let names = dir
        .names()
        .map_err(|e| Error::io(format!("listing {}", directory.display()), e))?;
    let mut regions = group(&dir, names, prefix.as_bytes());
    for r in &mut regions {
        match examine(&dir, r) {
            Ok(files) if remove => match reclaim(&dir, r, &files) {
                Ok(()) => r.removed = true,
                Err(kept) => r.kept = Some(kept),
            },
            Ok(_) => {}
            Err(kept) => r.kept = Some(kept),
        }
    }
    Ok(ReclaimReport { regions })
}

/// The regions among `names`, in name order, each with the files `lstat`
/// still finds (a name gone since the listing is left out).
fn group(dir: &Dir, names: Vec<OsString>, prefix: &[u8]) -> Vec<FoundRegion> {
    let mut firsts = std::collections::BTreeMap::<OsString, FoundRegion>::new();
    let mut segments = Vec::new();
    for name in names {
        if !name.as_bytes().starts_with(prefix) {
            continue;
        }
        let Ok(e) = dir.lstat(&name) else { continue };
        let file = RegionFile {
            bytes: e.bytes,
            id: e.id,
            name,
        };
        match segment_of(file.name.as_bytes()) {
            Some((region, n)) if region.starts_with(prefix) => {
                segments.push((OsStr::from_bytes(region).to_owned(), n, file));
            }
            _ => {
                let name = file.name.clone();
                firsts.insert(
                    name.clone(),
                    FoundRegion {
                        name,
                        first: Some(file),
                        segments: Vec::new(),
                        removed: false,
                        kept: None,
                    },
                );
            }
        }
    }
    segments.sort_by_key(|s| s.1);
    for (region, _, file) in segments {
        firsts
            .entry(region.clone())
            .or_insert_with(|| FoundRegion {
                name: region,
                first: None,
                segments: Vec::new(),
                removed: false,
                kept: None,
            })
            .segments
            .push(file);
    }
    firsts.into_values().collect()
}

/// Opens `file` if it is a regular file of this user, and checks that
/// the open file is the one looked at.
fn open_checked(dir: &Dir, file: &RegionFile) -> std::result::Result<(File, Entry), Kept> {
    let named = |f: &RegionFile| f.name.clone();
    let e = match dir.lstat(&file.name) {
        Ok(e) => e,
        Err(e) if e.kind() == io::ErrorKind::NotFound => {
            return Err(Kept::Changed { file: named(file) });
        }
        Err(e) => return Err(failed(file, "looking at it", e)),
    };
    if !e.is_regular() {
        return Err(Kept::NotRegular {
            file: named(file),
            kind: e.kind(),
        });
    }
    // SAFETY: geteuid has no preconditions.
    let me = unsafe { libc::geteuid() };
    if e.uid != me {
        return Err(Kept::OtherUser {
            file: named(file),
            uid: e.uid,
        });
    }
    let f = match dir.open_file(&file.name) {
        Ok(f) => f,
        Err(e) if e.kind() == io::ErrorKind::NotFound => {
            return Err(Kept::Changed { file: named(file) });
        }
        Err(e) if e.raw_os_error() == Some(libc::ELOOP) => {
            return Err(Kept::NotRegular {
                file: named(file),
                kind: "symlink",
            });
        }
        Err(e) => return Err(failed(file, "opening it", e)),
    };
    let open = dir::fstat(&f).map_err(|e| failed(file, "looking at it", e))?;
    if open.id != e.id || open.id != file.id || !open.is_regular() {
        return Err(Kept::Changed { file: named(file) });
    }
    Ok((f, open))
}

fn failed(file: &RegionFile, doing: &str, e: io::Error) -> Kept {
    Kept::Failed {
        file: file.name.clone(),
        error: format!("{doing}: {e}"),
    }
}

/// Why a first file of `bytes` bytes open on `f` is not a region's, if so.
fn header_missing(f: &File, file: &RegionFile, bytes: u64) -> std::result::Result<(), Kept> {
    if bytes < 8 {
        return Err(Kept::NoHeader {
            why: format!("it has {bytes} bytes, too few for a layout header"),
        });
    }
    let mut magic = [0u8; 8];
    f.read_exact_at(&mut magic, 0)
        .map_err(|e| failed(file, "reading its header", e))?;
    match u64::from_le_bytes(magic) {
        header::MAGIC => Ok(()),
        0 => Err(Kept::NoHeader {
            why: "its layout header was never written (a creator that died during set-up, \
                  or not a region)"
                .into(),
        }),
        _ => Err(Kept::NoHeader {
            why: "it does not begin with a kvtier region's layout header".into(),
        }),
    }
}

/// Every check but the lock: the region's files, open, in order (the first
/// file first), or why it is kept.
fn examine(dir: &Dir, r: &FoundRegion) -> std::result::Result<Vec<File>, Kept> {
    let mut files = Vec::new();
    if let Some(first) = &r.first {
        let (f, e) = open_checked(dir, first)?;
        header_missing(&f, first, e.bytes)?;
        files.push(f);
    }
    for s in &r.segments {
        files.push(open_checked(dir, s)?.0);
    }
    Ok(files)
}

/// Whether `name` names the open file `id` right now.
fn still_named(dir: &Dir, name: &OsStr, file: &File, id: FileId) -> bool {
    let linked = dir::fstat(file).is_ok_and(|e| e.links > 0);
    linked && dir.lstat(name).is_ok_and(|e| e.id == id)
}

/// Locks the region's files exclusively, checks them again, and removes
/// them: segments from the highest number down, then the first file.
fn reclaim(dir: &Dir, r: &FoundRegion, files: &[File]) -> std::result::Result<(), Kept> {
    let found: Vec<&RegionFile> = r.files().collect();
    for (f, file) in files.iter().zip(&found) {
        match sys::try_flock(f, libc::LOCK_EX, Path::new(&file.name)) {
            Ok(true) => {}
            Ok(false) => {
                return Err(Kept::Held {
                    file: file.name.clone(),
                });
            }
            Err(e) => {
                return Err(Kept::Failed {
                    file: file.name.clone(),
                    error: e.to_string(),
                });
            }
        }
    }
    if r.first.is_none() {
        match dir.lstat(&r.name) {
            Err(e) if e.kind() == io::ErrorKind::NotFound => {}
            _ => {
                return Err(Kept::Changed {
                    file: r.name.clone(),
                });
            }
        }
    }
    for (f, file) in files.iter().zip(&found) {
        if !still_named(dir, &file.name, f, file.id) {
            return Err(Kept::Changed {
                file: file.name.clone(),
            });
        }
    }
    for (f, file) in files.iter().zip(&found).rev() {
        if !still_named(dir, &file.name, f, file.id) {
            return Err(Kept::Changed {
                file: file.name.clone(),
            });
        }
        dir.unlink(&file.name)
            .map_err(|e| failed(file, "removing it", e))?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn segment_names_split_into_region_and_number() {
        assert_eq!(segment_of(b"r.seg1"), Some((&b"r"[..], 1)));
        assert_eq!(segment_of(b"a.seg2.seg12"), Some((&b"a.seg2"[..], 12)));
        for not in [
            &b"r.seg"[..],
            b"r.seg0",
            b"r.seg01",
            b"r.seg1x",
            b".seg1",
            b"r.sg1",
            b"r.seg99999999999",
            b"r",
        ] {
            assert_eq!(segment_of(not), None, "{}", String::from_utf8_lossy(not));
        }
    }

    #[test]
    fn a_bad_prefix_is_refused_and_a_missing_directory_holds_nothing() {
        let t = tempfile::tempdir().unwrap();
        for bad in ["", "a/b", "a\0"] {
            let e = reclaim_stale(t.path(), bad).unwrap_err();
            assert!(matches!(e, Error::InvalidArgument(_)), "{bad:?}: {e}");
        }
        let r = reclaim_stale(&t.path().join("absent"), "p").unwrap();
        assert!(r.regions.is_empty());
        let file = t.path().join("plain");
        std::fs::write(&file, b"").unwrap();
        let e = reclaim_stale(&file, "p").unwrap_err();
        assert!(e.to_string().contains("plain"), "{e}");
    }

    /// The entry `name` of `d`, as a listing finds it.
    fn listed(d: &Dir, name: &str) -> RegionFile {
        let e = d.lstat(OsStr::new(name)).unwrap();
        RegionFile {
            name: name.into(),
            bytes: e.bytes,
            id: e.id,
        }
    }

    #[test]
    fn a_name_is_a_segment_only_when_its_region_has_the_prefix() {
        let t = tempfile::tempdir().unwrap();
        std::fs::write(t.path().join("p.seg1"), [0u8; 4096]).unwrap();
        // Under "p.s", "p.seg1" is no segment of "p" (not under the prefix)
        // but a first file of its own, which needs a header.
        let r = reclaim_stale(t.path(), "p.s").unwrap();
        assert_eq!(r.regions.len(), 1, "{r:#?}");
        assert_eq!(r.regions[0].name, "p.seg1");
        assert!(
            matches!(r.regions[0].kept, Some(Kept::NoHeader { .. })),
            "{r:#?}"
        );
        // Under "p" it is a segment of "p" without its first file.
        let r = reclaim_stale(t.path(), "p").unwrap();
        assert_eq!(r.regions[0].name, "p");
        assert!(
            r.regions[0].removed && r.regions[0].first.is_none(),
            "{r:#?}"
        );
    }

    #[test]
    fn a_file_is_taken_only_while_it_is_the_one_listed() {
        let t = tempfile::tempdir().unwrap();
        std::fs::write(t.path().join("f"), b"abc").unwrap();
        let d = Dir::open(t.path()).unwrap();
        let f = listed(&d, "f");
        let (_, open) = open_checked(&d, &f).unwrap();
        assert_eq!((open.id, open.bytes), (f.id, 3));
        // Another file under the name since the listing.
        let replaced = RegionFile {
            id: (f.id.0, f.id.1 ^ 1),
            ..f.clone()
        };
        let changed = |n: &str| Kept::Changed { file: n.into() };
        assert_eq!(open_checked(&d, &replaced).unwrap_err(), changed("f"));
        // Removed since the listing.
        let gone = RegionFile {
            name: "gone".into(),
            ..f.clone()
        };
        assert_eq!(open_checked(&d, &gone).unwrap_err(), changed("gone"));
        // A name that cannot be looked at is a failure, not a change.
        let bad = RegionFile {
            name: "a\0b".into(),
            ..f
        };
        assert!(
            matches!(
                open_checked(&d, &bad).unwrap_err(),
                Kept::Failed { ref error, .. } if error.starts_with("looking at it")
            ),
            "{:?}",
            open_checked(&d, &bad)
        );
    }

    #[test]
    fn a_first_file_is_a_regions_when_its_first_8_bytes_are_the_magic() {
        let t = tempfile::tempdir().unwrap();
        let d = Dir::open(t.path()).unwrap();
        let why = |bytes: &[u8]| {
            std::fs::write(t.path().join("f"), bytes).unwrap();
            let file = listed(&d, "f");
            let (f, e) = open_checked(&d, &file).unwrap();
            match header_missing(&f, &file, e.bytes) {
                Ok(()) => None,
                Err(Kept::NoHeader { why }) => Some(why),
                Err(k) => panic!("{k}"),
            }
        };
        let magic = header::MAGIC.to_le_bytes();
        assert_eq!(why(&magic), None, "8 bytes: the magic alone");
        assert!(why(&magic[..7]).unwrap().contains("too few"));
        assert!(why(&[0; 8]).unwrap().contains("never written"));
        assert!(why(b"KVTIERXX").unwrap().contains("does not begin"));
    }

    #[test]
    fn a_name_still_names_an_open_file_only_while_linked_to_it() {
        let t = tempfile::tempdir().unwrap();
        let p = |n: &str| t.path().join(n);
        std::fs::write(p("a"), b"a").unwrap();
        let d = Dir::open(t.path()).unwrap();
        let id = listed(&d, "a").id;
        let f = File::open(p("a")).unwrap();
        let (a, b) = (OsStr::new("a"), OsStr::new("b"));
        assert!(still_named(&d, a, &f, id));
        // Renamed, and another file under its old name: still linked, but
        // not by that name.
        std::fs::rename(p("a"), p("b")).unwrap();
        std::fs::write(p("a"), b"new").unwrap();
        assert!(!still_named(&d, a, &f, id));
        assert!(still_named(&d, b, &f, id));
        std::fs::remove_file(p("a")).unwrap();
        assert!(!still_named(&d, a, &f, id));
        // Removed: no name at all.
        std::fs::remove_file(p("b")).unwrap();
        assert!(!still_named(&d, b, &f, id));
    }
}
