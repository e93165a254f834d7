//! Creating or joining a region's backing files: who creates, the locks,
//! the layout header, reserving the room, and waiting for the creator.
//!
//! Protocol (every process runs the same code with the same options):
//!
//! 1. Try to create the first backing file exclusively (`O_CREAT|O_EXCL`).
//!    The winner is the creator.  It takes a shared `flock`, checks that the
//!    file system has room, writes the layout header (one page, see
//!    `header.rs`), creates the other segments and reserves their room
//!    (`fallocate`, so that memory never faults in later for lack of it,
//!    pre-faulted or not), and reserves the first file's slots last: its
//!    full size is the signal that the region is ready.
//! 2. A process that finds the file existing opens it and tries an
//!    exclusive lock without blocking.  Getting it means no process holds
//!    the file, so it is left from a crashed run (whatever its format): it
//!    is removed (or the call fails, if so configured) and the process
//!    starts over.  Otherwise the process takes a shared lock and joins: it
//!    reads the layout header as soon as it is written and refuses a
//!    layout other than its own, naming both; then it polls the file until
//!    it has its full size.  If the file loses its last name meanwhile, the
//!    creator failed and cleaned up: the joiner fails at once.  The creator
//!    also holds a write lock on the first byte (an open-file-description
//!    lock, separate from `flock`) from the moment it creates the file; if
//!    that lock vanishes before the file is ready, the creator died (kill
//!    -9) and the joiner fails at once too.
//! 3. After any lock is taken the process checks that its descriptor is
//!    still the file under that name (a would-be replacer may have removed
//!    it in between) and starts over if not.
//!
//! Every process keeps its shared locks while it maps the region, so a
//! live region is never taken for a stale one.

use std::fs::{File, OpenOptions};
use std::io;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use super::header::{self, Found, Layout};
use super::options::{Geometry, OpenMode, RegionOptions, Role};
use super::sys::{self, FileId};
use crate::error::{Error, Result};

const POLL: Duration = Duration::from_millis(2);
/// Least time allowed for taking a lock that a stale-file check holds briefly.
const MIN_LOCK_WAIT: Duration = Duration::from_secs(1);
/// How long an empty file may go without a creator setting it up before a
/// joiner concludes that the creator died.  The creator marks the file
/// right after creating it; on a loaded machine (or under a sanitizer) it
/// can be descheduled between the two for tens of milliseconds, so the
/// grace is long enough never to declare a live creator dead, and short
/// beside the join timeout.
const CREATOR_GRACE: Duration = Duration::from_secs(1);

/// Files this process created, removed again unless set-up succeeds.
pub(crate) struct Created {
    pub(crate) files: Vec<(PathBuf, FileId)>,
}

impl Drop for Created {
    fn drop(&mut self) {
        // Later segments first, the first file (the one joiners watch) last.
        for (p, id) in self.files.iter().rev() {
            let _ = sys::unlink_if(p, *id);
        }
    }
}

/// The backing files, opened and locked, and this process's role.
pub(crate) struct Opened {
    pub(crate) role: Role,
    /// First file first.
    pub(crate) files: Vec<File>,
    pub(crate) ids: Vec<FileId>,
    /// What to remove if set-up fails from here on.
    pub(crate) created: Created,
}

/// Paths of the backing files: the name, then `name.seg1`, `name.seg2`...
pub(crate) fn segment_paths(o: &RegionOptions, n: usize) -> Vec<PathBuf> {
    (0..n)
        .map(|i| {
            if i == 0 {
                o.directory.join(&o.name)
            } else {
                o.directory.join(format!("{}.seg{i}", o.name))
            }
        })
        .collect()
}

fn create_new(path: &Path, mode: u32) -> io::Result<File> {
    OpenOptions::new()
        .read(true)
        .write(true)
        .create_new(true)
        .mode(mode)
        .open(path)
}

fn open_rw(path: &Path) -> io::Result<File> {
    OpenOptions::new().read(true).write(true).open(path)
}

fn gib(n: u64) -> String {
    format!("{:.2} GiB", n as f64 / (1u64 << 30) as f64)
}

/// Steps 1 to 3 of the protocol: decide the role, lock, and (creator)
/// write the header and reserve the room or (joiner) check the layout and
/// wait for the size.
pub(crate) fn open_files(o: &RegionOptions, g: &Geometry, paths: &[PathBuf]) -> Result<Opened> {
    let start = Instant::now();
    let deadline = start + o.join_timeout;
    let lock_deadline = start + o.join_timeout.max(MIN_LOCK_WAIT);
    let p0 = &paths[0];
    let mut first = true;
    loop {
        if !first && Instant::now() >= lock_deadline.max(deadline) && o.open != OpenMode::Join {
            return Err(Error::Timeout(format!(
                "region {:?}: the backing file {} kept being replaced by other processes",
                o.name,
                p0.display()
            )));
        }
        first = false;
        if o.open != OpenMode::Join {
            match create_new(p0, o.mode) {
                Ok(f) => {
                    let locked = sys::lock_setup(&f, p0)
                        .and_then(|()| sys::lock_shared(&f, p0, lock_deadline));
                    if let Err(e) = locked {
                        // Leave nothing behind: remove the file just created.
                        if let Ok((id, _)) = sys::file_id(&f, p0) {
                            let _ = sys::unlink_if(p0, id);
                        }
                        return Err(e);
                    }
                    if !sys::still_named(&f, p0)? {
                        continue; // a stale-file check removed it: start over
                    }
                    return create_rest(o, g, paths, f);
                }
                Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {}
                Err(e) => return Err(Error::io(format!("creating {}", p0.display()), e)),
            }
        }
        let f = match open_rw(p0) {
            Ok(f) => f,
            Err(e) if e.kind() == io::ErrorKind::NotFound => {
                if o.open == OpenMode::Join {
                    if Instant::now() >= deadline {
                        return Err(Error::Timeout(format!(
                            "region {:?} never appeared in {} within {:?}",
                            o.name,
                            o.directory.display(),
                            o.join_timeout
                        )));
                    }
                    std::thread::sleep(POLL);
                }
                continue;
            }
            Err(e) => return Err(Error::io(format!("opening {}", p0.display()), e)),
        };
        if sys::try_flock(&f, libc::LOCK_EX, p0)? {
            // Nobody holds it: left over from a crashed run.
            if !sys::still_named(&f, p0)? {
                continue;
            }
            if o.open == OpenMode::Join {
                drop(f);
                if Instant::now() >= deadline {
                    return Err(Error::Timeout(format!(
                        "region {:?}: only a stale backing file {} (held by no process) was found within {:?}, and no creator replaced it",
                        o.name,
                        p0.display(),
                        o.join_timeout
                    )));
                }
                std::thread::sleep(POLL);
                continue;
            }
            if !o.replace_stale {
                return Err(Error::AlreadyExists(format!(
                    "{} is a stale region file left by a crashed run (no process holds it); \
                     remove it, or allow replacing stale regions",
                    p0.display()
                )));
            }
            remove_stale(o, paths, &f)?;
            continue;
        }
        if o.open == OpenMode::Create {
            return Err(Error::AlreadyExists(format!(
                "region {:?} is live in {} (other processes have it mapped)",
                o.name,
                o.directory.display()
            )));
        }
        sys::lock_shared(&f, p0, lock_deadline)?;
        if !sys::still_named(&f, p0)? {
            continue;
        }
        return join_rest(o, g, paths, f, deadline);
    }
}

/// Removes a stale region's files while holding the first one exclusively:
/// later segments first, so no creator can start before they are gone.
fn remove_stale(o: &RegionOptions, paths: &[PathBuf], f0: &File) -> Result<()> {
    for p in &paths[1..] {
        if let Ok(f) = open_rw(p) {
            if !sys::try_flock(&f, libc::LOCK_EX, p)? {
                return Err(Error::AlreadyExists(format!(
                    "segment file {} of region {:?} is in use by another process",
                    p.display(),
                    o.name
                )));
            }
            let (id, _) = sys::file_id(&f, p)?;
            sys::unlink_if(p, id)?;
        }
    }
    let (id, _) = sys::file_id(f0, &paths[0])?;
    sys::unlink_if(&paths[0], id)?;
    Ok(())
}

/// Creator: checks the room, writes the layout header, creates later
/// segments and reserves their room, reserves the first file's slots last.
/// Anything created is removed again on failure.
fn create_rest(o: &RegionOptions, g: &Geometry, paths: &[PathBuf], f0: File) -> Result<Opened> {
    let p0 = &paths[0];
    let (id0, _) = sys::file_id(&f0, p0)?;
    let mut created = Created {
        files: vec![(p0.clone(), id0)],
    };
    sys::set_mode(&f0, o.mode, p0)?;
    let need = (g.header + g.total) as u64;
    let free = sys::free_bytes(&o.directory)?;
    if free < need {
        return Err(Error::NoSpace(format!(
            "region {:?} needs {} ({} bytes) but {} has only {} ({} bytes) free",
            o.name,
            gib(need),
            need,
            o.directory.display(),
            gib(free),
            free
        )));
    }
    sys::set_len(&f0, g.header, p0)?;
    header::write(&f0, p0, &Layout::of(o, g))?;
    let mut files = vec![f0];
    let mut ids = vec![id0];
    let lock_deadline = Instant::now() + o.join_timeout.max(MIN_LOCK_WAIT);
    for (p, len) in paths.iter().zip(&g.segments).skip(1) {
        let f = loop {
            match create_new(p, o.mode) {
                Ok(f) => break f,
                Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {
                    let old = match open_rw(p) {
                        Ok(f) => f,
                        Err(e) if e.kind() == io::ErrorKind::NotFound => continue,
                        Err(e) => return Err(Error::io(format!("opening {}", p.display()), e)),
                    };
                    if !sys::try_flock(&old, libc::LOCK_EX, p)? {
                        return Err(Error::AlreadyExists(format!(
                            "segment file {} is in use by another process",
                            p.display()
                        )));
                    }
                    if !o.replace_stale {
                        return Err(Error::AlreadyExists(format!(
                            "{} is a stale segment file left by a crashed run; remove it, or allow replacing stale regions",
                            p.display()
                        )));
                    }
                    let (id, _) = sys::file_id(&old, p)?;
                    sys::unlink_if(p, id)?;
                }
                Err(e) => return Err(Error::io(format!("creating {}", p.display()), e)),
            }
        };
        let (id, _) = sys::file_id(&f, p)?;
        created.files.push((p.clone(), id));
        sys::lock_shared(&f, p, lock_deadline)?;
        sys::set_mode(&f, o.mode, p)?;
        reserve(o, &f, 0, *len, p)?;
        files.push(f);
        ids.push(id);
    }
    // Sizing the first file publishes the region to joiners.
    reserve(o, &files[0], g.header, g.segments[0], p0)?;
    Ok(Opened {
        role: Role::Creator,
        files,
        ids,
        created,
    })
}

/// Reserves `len` bytes of `file` at `offset`, growing it to `offset +
/// len`; where the file system cannot reserve, only sizes it (the
/// free-space check before is then all there is).
fn reserve(o: &RegionOptions, file: &File, offset: usize, len: usize, path: &Path) -> Result<()> {
    match sys::allocate(file, offset, len, path) {
        Ok(true) => Ok(()),
        Ok(false) => sys::set_len(file, offset + len, path),
        Err(Error::NoSpace(m)) => Err(Error::NoSpace(format!(
            "region {:?} in {}: {m}",
            o.name,
            o.directory.display()
        ))),
        Err(e) => Err(e),
    }
}

/// The error for a first backing file that is not a region of this format.
fn foreign(o: &RegionOptions, path: &Path, why: &str) -> Error {
    Error::InvalidArgument(format!(
        "region {:?}: {} is in use but is not a kvtier region of layout format {}: {why}",
        o.name,
        path.display(),
        header::FORMAT_VERSION
    ))
}

/// Joiner: refuses a layout other than its own as soon as the creator has
/// written the header, waits until the first file has its full size (or
/// vanishes: the creator failed), then opens and checks the later segments.
fn join_rest(
    o: &RegionOptions,
    g: &Geometry,
    paths: &[PathBuf],
    f0: File,
    deadline: Instant,
) -> Result<Opened> {
    let p0 = &paths[0];
    let ours = Layout::of(o, g);
    let header_bytes = g.header as u64;
    let want = header_bytes + g.segments[0] as u64;
    let mut checked = false;
    let mut unowned_since: Option<Instant> = None;
    let id0 = loop {
        let m = f0
            .metadata()
            .map_err(|e| Error::io(format!("fstat {}", p0.display()), e))?;
        use std::os::unix::fs::MetadataExt;
        if m.nlink() == 0 {
            return Err(Error::PeerFailed(format!(
                "the creator of region {:?} failed during set-up and removed {}",
                o.name,
                p0.display()
            )));
        }
        let len = m.len();
        if len > 0 && !checked {
            // The creator writes the header while the file is one page long,
            // before it grows it: a longer file without one is not a region
            // of this format.
            let found = if len < header_bytes {
                Found::Foreign(format!("it has only {len} bytes"))
            } else {
                header::read(&f0, p0, g.header)?
            };
            match found {
                Found::NotWritten if len == header_bytes => {}
                Found::NotWritten => {
                    return Err(foreign(
                        o,
                        p0,
                        "it has no layout header (an older kvtier made it, or something else did)",
                    ));
                }
                Found::Foreign(why) => return Err(foreign(o, p0, &why)),
                Found::Layout(theirs) if theirs != ours => {
                    return Err(Error::InvalidArgument(format!(
                        "region {:?} in {} was created with {theirs}, but this process asks for {ours}: \
                         every process of a region must pass the same slot count, slot size, worker \
                         area size and segments (or another engine uses this name)",
                        o.name,
                        o.directory.display()
                    )));
                }
                Found::Layout(_) => checked = true,
            }
        }
        if checked && len == want {
            break (m.dev(), m.ino());
        }
        if checked && len > want {
            return Err(foreign(
                o,
                p0,
                &format!("it has {len} bytes, more than its layout's {want}"),
            ));
        }
        // Not ready: is its creator still setting it up?  (It marks the
        // file right after creating it; a short grace covers that instant.)
        if sys::setup_in_progress(&f0) == Some(false) {
            let since = *unowned_since.get_or_insert_with(Instant::now);
            if since.elapsed() >= CREATOR_GRACE {
                return Err(Error::PeerFailed(format!(
                    "the creator of region {:?} died during set-up: {} has {len} of its {want} bytes \
                     and no process is setting it up",
                    o.name,
                    p0.display()
                )));
            }
        } else {
            unowned_since = None;
        }
        if Instant::now() >= deadline {
            return Err(Error::Timeout(format!(
                "region {:?}: waited {:?} for its creator to size {} to {want} bytes (it has {len})",
                o.name,
                o.join_timeout,
                p0.display()
            )));
        }
        std::thread::sleep(POLL);
    };
    let mut files = vec![f0];
    let mut ids = vec![id0];
    let lock_deadline = Instant::now() + MIN_LOCK_WAIT;
    for (p, len) in paths.iter().zip(&g.segments).skip(1) {
        let f = match open_rw(p) {
            Ok(f) => f,
            Err(e) if e.kind() == io::ErrorKind::NotFound => {
                return Err(Error::PeerFailed(format!(
                    "segment file {} of region {:?} is missing: its creator failed or removed it",
                    p.display(),
                    o.name
                )));
            }
            Err(e) => return Err(Error::io(format!("opening {}", p.display()), e)),
        };
        sys::lock_shared(&f, p, lock_deadline)?;
        let m = f
            .metadata()
            .map_err(|e| Error::io(format!("fstat {}", p.display()), e))?;
        if m.len() != *len as u64 {
            return Err(Error::InvalidArgument(format!(
                "segment file {} of region {:?} has {} bytes, but these options need {len}",
                p.display(),
                o.name,
                m.len()
            )));
        }
        let (id, linked) = sys::file_id(&f, p)?;
        if !linked || !sys::path_is(p, id)? {
            return Err(Error::PeerFailed(format!(
                "segment file {} of region {:?} was removed while joining",
                p.display(),
                o.name
            )));
        }
        files.push(f);
        ids.push(id);
    }
    Ok(Opened {
        role: Role::Joiner,
        files,
        ids,
        created: Created { files: Vec::new() },
    })
}
