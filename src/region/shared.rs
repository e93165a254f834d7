//! `Region`: one mmap'd buffer shared by the scheduler and every worker
//! process, created by the first process and joined by the rest.
//!
//! Protocol (every process runs the same code with the same options):
//!
//! 1. Try to create the first backing file exclusively (`O_CREAT|O_EXCL`).
//!    The winner is the creator.  It takes a shared `flock`, checks that the
//!    file system has room, creates and sizes the other segments, and sizes
//!    the first file last: its full size is the signal that the region is
//!    ready.
//! 2. A process that finds the file existing opens it and tries an
//!    exclusive lock without blocking.  Getting it means no process holds
//!    the file, so it is left from a crashed run: it is removed (or the call
//!    fails, if so configured) and the process starts over.  Otherwise the
//!    process takes a shared lock and joins: it polls the file until it has
//!    its full size.  If the file loses its last name meanwhile, the creator
//!    failed and cleaned up: the joiner fails at once.  The creator also
//!    holds a write lock on the first byte (an open-file-description lock,
//!    separate from `flock`) from the moment it creates the file; if that
//!    lock vanishes while the file is still empty, the creator died (kill -9)
//!    and the joiner fails at once too.
//! 3. After any lock is taken the process checks that its descriptor is
//!    still the file under that name (a would-be replacer may have removed
//!    it in between) and starts over if not.
//! 4. Segments are mapped back to back into one reserved address range and
//!    pre-faulted.
//!
//! Every process keeps its shared locks while it maps the region, so a
//! live region is never taken for a stale one.

use std::fs::{File, OpenOptions};
use std::io;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::ptr::NonNull;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use super::options::{Geometry, OpenMode, Prefault, RegionOptions, geometry};
use super::slots::SlotMemory;
use super::sys::{self, FileId, PrefaultMethod, Span};
use crate::error::{Error, Result};

const POLL: Duration = Duration::from_millis(2);
/// Least time allowed for taking a lock that a stale-file check holds briefly.
const MIN_LOCK_WAIT: Duration = Duration::from_secs(1);
/// How long an empty file may go without a creator setting it up before a
/// joiner concludes that the creator died.
const CREATOR_GRACE: Duration = Duration::from_millis(50);

/// Whether this process created the region or joined it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    /// Created (and sized) the backing files; removes them at cleanup.
    Creator,
    /// Joined a region another process created.
    Joiner,
}

/// A strided view of the region: `rows` rows of `length` bytes, row `r` at
/// byte `offset + r * stride` from the base.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StridedView {
    /// Offset of row 0 from the region's base, in bytes.
    pub offset: usize,
    /// Distance between two rows, in bytes (the region's row stride).
    pub stride: usize,
    /// Bytes of each row that belong to the view.
    pub length: usize,
    /// Number of rows (the region's slot count).
    pub rows: u32,
}

/// What [`Region::close`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CloseReport {
    /// The mapping is kept for good because slots were declared lent out
    /// (a device may still write into it); descriptors are closed anyway.
    pub kept_mapping: bool,
    /// Slot views ([`Region::slots`]) are still alive: the mapping goes when
    /// the last of them is dropped (unless it is kept for good).
    pub views_alive: bool,
    /// This process removed backing-file names (it created them and they
    /// were still there).
    pub removed_names: bool,
}

/// The mapping and the locked files behind it, shared with slot views.
struct Mapping {
    span: Option<Span>,
    files: Mutex<Vec<File>>,
    lent: AtomicU32,
}

// SAFETY: the span is shared memory; who writes which bytes when is the
// callers' protocol (slot pinning), not Rust aliasing.
unsafe impl Send for Mapping {}
unsafe impl Sync for Mapping {}

impl Drop for Mapping {
    fn drop(&mut self) {
        if self.lent.load(Ordering::Acquire) > 0 {
            // A device may still write here: keep the address range mapped.
            std::mem::forget(self.span.take());
        }
    }
}

/// One shared offload region, mapped in this process.  See the module
/// documentation for the create-or-join protocol.
pub struct Region {
    mapping: Arc<Mapping>,
    base: NonNull<u8>,
    len: usize,
    role: Role,
    name: String,
    paths: Vec<PathBuf>,
    ids: Vec<FileId>,
    slot_count: u32,
    stride: usize,
    worker_bytes: usize,
    prefaulted: PrefaultMethod,
    closed: bool,
}

// SAFETY: see `Mapping`; the remaining fields are plain data.
unsafe impl Send for Region {}
unsafe impl Sync for Region {}

/// Files this process created, removed again unless set-up succeeds.
struct Created {
    files: Vec<(PathBuf, FileId)>,
}

impl Drop for Created {
    fn drop(&mut self) {
        // Later segments first, the first file (the one joiners watch) last.
        for (p, id) in self.files.iter().rev() {
            let _ = sys::unlink_if(p, *id);
        }
    }
}

struct Opened {
    role: Role,
    files: Vec<File>,
    ids: Vec<FileId>,
    created: Created,
}

fn segment_paths(o: &RegionOptions, n: usize) -> Vec<PathBuf> {
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

impl Region {
    /// Creates the region, or joins it if another process created it: see
    /// the module documentation.  On failure nothing this call created is
    /// left on disk.
    pub fn create_or_join(options: &RegionOptions) -> Result<Region> {
        let region = Region::setup(options)?;
        Ok(region)
    }

    /// Like [`Region::create_or_join`], then takes part in a barrier with
    /// the other processes of the region and removes the names once all
    /// have joined, so the memory is freed when the last process unmaps it,
    /// however the processes exit.
    ///
    /// `barrier` runs exactly once, whether set-up succeeded or not (it is
    /// told which), so peers are never left waiting for a process that
    /// failed.  A set-up error is returned as it was, whatever the barrier
    /// returns; a barrier error after a successful set-up is returned and
    /// the region is cleaned up.
    pub fn create_or_join_with_barrier(
        options: &RegionOptions,
        barrier: impl FnOnce(Result<(), &Error>) -> Result<()>,
    ) -> Result<Region> {
        let setup = Region::setup(options);
        let arrived = barrier(setup.as_ref().map(|_| ()));
        let region = setup?;
        arrived?;
        region.unlink()?;
        Ok(region)
    }

    fn setup(o: &RegionOptions) -> Result<Region> {
        match std::fs::metadata(&o.directory) {
            Ok(m) if m.is_dir() => {}
            Ok(_) => {
                return Err(Error::InvalidArgument(format!(
                    "region directory {} is not a directory",
                    o.directory.display()
                )));
            }
            Err(e) if e.kind() == io::ErrorKind::NotFound => {
                return Err(Error::NotFound(format!(
                    "region directory {} does not exist",
                    o.directory.display()
                )));
            }
            Err(e) => {
                return Err(Error::io(
                    format!("checking region directory {}", o.directory.display()),
                    e,
                ));
            }
        }
        crate::region::options::check_name(&o.name)?;
        let page = sys::page_size_for(&o.directory)?;
        let geo = geometry(o, page)?;
        let paths = segment_paths(o, geo.segments.len());
        let opened = open_files(o, &geo, &paths)?;

        let span = Span::reserve(geo.total, page)?;
        let mut offset = 0;
        for ((file, len), path) in opened.files.iter().zip(&geo.segments).zip(&paths) {
            span.map_file(offset, *len, file, path)?;
            offset += len;
        }
        let ranges = prefault_ranges(o, &geo);
        let method = match (o.prefault, ranges.first()) {
            (Prefault::Off, _) | (_, None) => PrefaultMethod::None,
            (Prefault::Touch, _) => PrefaultMethod::Touch,
            (Prefault::Auto, Some(&(first, _))) => {
                // Probe on a page this process pre-faults anyway.
                // SAFETY: `first` is a page offset inside the span.
                let probe = unsafe { span.base.add(first) };
                if sys::populate_supported(probe, page)? {
                    PrefaultMethod::Populate
                } else {
                    PrefaultMethod::Touch
                }
            }
        };
        if method != PrefaultMethod::None {
            sys::prefault(
                span.base,
                &ranges,
                method,
                o.prefault_threads as usize,
                page,
            )?;
        }

        let Opened {
            role,
            files,
            ids,
            mut created,
        } = opened;
        created.files.clear(); // set-up succeeded: the files stay
        Ok(Region {
            base: span.base,
            len: span.len,
            mapping: Arc::new(Mapping {
                span: Some(span),
                files: Mutex::new(files),
                lent: AtomicU32::new(0),
            }),
            role,
            name: o.name.clone(),
            paths,
            ids,
            slot_count: o.slot_count,
            stride: o.slot_bytes,
            worker_bytes: o.worker_bytes,
            prefaulted: method,
            closed: false,
        })
    }

    /// Whether this process created the region or joined it.
    pub fn role(&self) -> Role {
        self.role
    }

    /// The region's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Paths of the backing files, first segment first (they may have been
    /// removed already by [`Region::unlink`]).
    pub fn paths(&self) -> &[PathBuf] {
        &self.paths
    }

    /// Address of the first byte; the region is `len()` contiguous bytes.
    pub fn base(&self) -> NonNull<u8> {
        self.base
    }

    /// Size of the region in bytes (`slot_count * stride`).
    pub fn len(&self) -> usize {
        self.len
    }

    /// Always false: a region has at least one slot.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Row stride in bytes: slot `i` starts at `base + i * stride`.
    pub fn stride(&self) -> usize {
        self.stride
    }

    /// Number of slots (rows).
    pub fn slot_count(&self) -> u32 {
        self.slot_count
    }

    /// How this process pre-faulted its pages.
    pub fn prefault_method(&self) -> PrefaultMethod {
        self.prefaulted
    }

    /// Address of slot `slot`, bounds-checked.
    pub fn slot_ptr(&self, slot: u32) -> Result<NonNull<u8>> {
        if slot >= self.slot_count {
            return Err(Error::InvalidArgument(format!(
                "slot {slot} out of range (region {:?} has {} slots)",
                self.name, self.slot_count
            )));
        }
        // SAFETY: in bounds of the mapping, checked above.
        Ok(unsafe { self.base.add(slot as usize * self.stride) })
    }

    /// The slots as tiers see them; the view keeps the mapping alive.
    pub fn slots(&self) -> SlotMemory {
        // SAFETY: `slot_count * stride` bytes at `base` stay mapped while
        // the `Mapping` lives, which the backing box keeps alive.
        unsafe {
            SlotMemory::from_raw(
                self.base,
                self.slot_count,
                self.stride,
                self.stride,
                Box::new(Arc::clone(&self.mapping)),
            )
        }
    }

    /// Bytes of each worker's area per row (0: no per-worker layout).
    pub fn worker_bytes(&self) -> usize {
        self.worker_bytes
    }

    /// Number of worker areas that fit in a row (0: no per-worker layout).
    pub fn worker_count(&self) -> usize {
        self.stride.checked_div(self.worker_bytes).unwrap_or(0)
    }

    /// Per-worker layout: `length` bytes at `offset` within worker
    /// `worker`'s area of every row (worker `w` owns bytes
    /// `[w * worker_bytes, (w + 1) * worker_bytes)` of each row).
    pub fn worker_view(&self, worker: u32, offset: usize, length: usize) -> Result<StridedView> {
        if self.worker_bytes == 0 {
            return Err(Error::InvalidArgument(format!(
                "region {:?} has no per-worker layout (created with worker_bytes 0)",
                self.name
            )));
        }
        if worker as usize >= self.worker_count() {
            return Err(Error::InvalidArgument(format!(
                "worker {worker} out of range: rows of {} bytes hold {} worker areas of {} bytes",
                self.stride,
                self.worker_count(),
                self.worker_bytes
            )));
        }
        check_span(offset, length, self.worker_bytes, "worker area")?;
        Ok(StridedView {
            offset: worker as usize * self.worker_bytes + offset,
            stride: self.stride,
            length,
            rows: self.slot_count,
        })
    }

    /// Canonical layout: `length` bytes at `offset` of every row, the same
    /// bytes for every worker.
    pub fn canonical_view(&self, offset: usize, length: usize) -> Result<StridedView> {
        check_span(offset, length, self.stride, "row")?;
        Ok(StridedView {
            offset,
            stride: self.stride,
            length,
            rows: self.slot_count,
        })
    }

    /// Declares how many slots are lent out (registered with a GPU driver
    /// or a NIC).  While it is non-zero, cleanup keeps the mapping.
    pub fn set_lent_slots(&self, count: u32) {
        self.mapping.lent.store(count, Ordering::Release);
    }

    /// Slots currently declared lent out.
    pub fn lent_slots(&self) -> u32 {
        self.mapping.lent.load(Ordering::Acquire)
    }

    /// Removes the backing files' names if they still name this region's
    /// files (call it once every process has joined).  Mappings stay valid;
    /// the kernel frees the memory when the last one goes.  `Ok(true)` if
    /// this call removed a name.
    pub fn unlink(&self) -> Result<bool> {
        let mut removed = false;
        for (p, id) in self.paths.iter().zip(&self.ids).rev() {
            removed |= sys::unlink_if(p, *id)?;
        }
        Ok(removed)
    }

    /// Cleans up: removes the names this process created, closes the
    /// descriptors, and unmaps, except that while slots are lent out the
    /// mapping is kept for good (and reported).  Views from
    /// [`Region::slots`] keep the mapping until they are dropped.
    pub fn close(mut self) -> Result<CloseReport> {
        self.closed = true;
        let kept_mapping = self.lent_slots() > 0;
        let removed = if self.role == Role::Creator {
            self.unlink()
        } else {
            Ok(false)
        };
        if kept_mapping {
            let files =
                std::mem::take(&mut *self.mapping.files.lock().unwrap_or_else(|p| p.into_inner()));
            drop(files);
        }
        let views_alive = Arc::strong_count(&self.mapping) > 1;
        Ok(CloseReport {
            kept_mapping,
            views_alive,
            removed_names: removed?,
        })
    }
}

impl Drop for Region {
    fn drop(&mut self) {
        if !self.closed && self.role == Role::Creator {
            let _ = self.unlink();
        }
    }
}

impl std::fmt::Debug for Region {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Region")
            .field("name", &self.name)
            .field("role", &self.role)
            .field("slot_count", &self.slot_count)
            .field("stride", &self.stride)
            .field("worker_bytes", &self.worker_bytes)
            .field("segments", &self.paths.len())
            .finish()
    }
}

fn check_span(offset: usize, length: usize, limit: usize, what: &str) -> Result<()> {
    match offset.checked_add(length) {
        Some(end) if length > 0 && end <= limit => Ok(()),
        _ => Err(Error::InvalidArgument(format!(
            "view of {length} bytes at offset {offset} does not fit in a {what} of {limit} bytes (length must be at least 1)"
        ))),
    }
}

/// The byte ranges this process pre-faults, page-aligned and merged.
fn prefault_ranges(o: &RegionOptions, g: &Geometry) -> Vec<(usize, usize)> {
    let Some(share) = o.prefault_share else {
        return vec![(0, g.total)];
    };
    let page = g.page;
    let mut out: Vec<(usize, usize)> = Vec::new();
    let mut push = |start: usize, end: usize| {
        let s = start / page * page;
        let e = end.div_ceil(page) * page;
        match out.last_mut() {
            Some(last) if last.0 + last.1 >= s => last.1 = last.1.max(e - last.0),
            _ => out.push((s, e - s)),
        }
    };
    if o.worker_bytes > 0 {
        for row in 0..o.slot_count as usize {
            let start = row * o.slot_bytes + share.index as usize * o.worker_bytes;
            push(start, start + o.worker_bytes);
        }
    } else {
        let per = (o.slot_count as usize).div_ceil(share.count as usize);
        let first = (share.index as usize * per).min(o.slot_count as usize);
        let end = (first + per).min(o.slot_count as usize);
        if end > first {
            push(first * o.slot_bytes, end * o.slot_bytes);
        }
    }
    out
}

/// Steps 1 to 3 of the protocol: decide the role, lock, and (creator) size
/// or (joiner) wait for the size.
fn open_files(o: &RegionOptions, g: &Geometry, paths: &[PathBuf]) -> Result<Opened> {
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

/// Creator: checks the room, creates and sizes later segments, sizes the
/// first file last.  Anything created is removed again on failure.
fn create_rest(o: &RegionOptions, g: &Geometry, paths: &[PathBuf], f0: File) -> Result<Opened> {
    let p0 = &paths[0];
    let (id0, _) = sys::file_id(&f0, p0)?;
    let mut created = Created {
        files: vec![(p0.clone(), id0)],
    };
    sys::set_mode(&f0, o.mode, p0)?;
    let free = sys::free_bytes(&o.directory)?;
    if free < g.total as u64 {
        return Err(Error::NoSpace(format!(
            "region {:?} needs {} ({} bytes) but {} has only {} ({} bytes) free",
            o.name,
            gib(g.total as u64),
            g.total,
            o.directory.display(),
            gib(free),
            free
        )));
    }
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
        sys::set_len(&f, *len, p)?;
        files.push(f);
        ids.push(id);
    }
    // Sizing the first file publishes the region to joiners.
    sys::set_len(&files[0], g.segments[0], p0)?;
    Ok(Opened {
        role: Role::Creator,
        files,
        ids,
        created,
    })
}

/// Joiner: waits until the first file has its full size (or vanishes:
/// the creator failed), then opens and checks the later segments.
fn join_rest(
    o: &RegionOptions,
    g: &Geometry,
    paths: &[PathBuf],
    f0: File,
    deadline: Instant,
) -> Result<Opened> {
    let p0 = &paths[0];
    let want = g.segments[0] as u64;
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
        if m.len() == want {
            break (m.dev(), m.ino());
        }
        if m.len() != 0 {
            return Err(Error::InvalidArgument(format!(
                "region {:?} exists with {} bytes in {}, but these options need {want} \
                 ({} slots of {} bytes in {} segment(s)): another engine uses this name, or the options differ",
                o.name,
                m.len(),
                p0.display(),
                o.slot_count,
                o.slot_bytes,
                g.segments.len()
            )));
        }
        // Still empty: is its creator still setting it up?  (It marks the
        // file right after creating it; a short grace covers that instant.)
        if sys::setup_in_progress(&f0) == Some(false) {
            let since = *unowned_since.get_or_insert_with(Instant::now);
            if since.elapsed() >= CREATOR_GRACE {
                return Err(Error::PeerFailed(format!(
                    "the creator of region {:?} died during set-up: {} is still empty and no process is setting it up",
                    o.name,
                    p0.display()
                )));
            }
        } else {
            unowned_since = None;
        }
        if Instant::now() >= deadline {
            return Err(Error::Timeout(format!(
                "region {:?}: waited {:?} for its creator to size {} to {want} bytes",
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::region::options::geometry;

    #[test]
    fn prefault_ranges_cover_the_share_page_aligned() {
        let page = 4096;
        let mut o = RegionOptions::new("r", 10, 4 * page);
        let g = geometry(&o, page).unwrap();
        assert_eq!(prefault_ranges(&o, &g), vec![(0, 40 * page)]);
        // Contiguous shares: 10 rows in 4 shares of 3, 3, 3 and 1 rows.
        o.prefault_share = Some(crate::region::Share { index: 3, count: 4 });
        assert_eq!(prefault_ranges(&o, &g), vec![(36 * page, 4 * page)]);
        o.prefault_share = Some(crate::region::Share { index: 0, count: 4 });
        assert_eq!(prefault_ranges(&o, &g), vec![(0, 12 * page)]);
        // Per-worker areas: worker 1's page of every row; unaligned areas
        // widen to whole pages and merge when they touch.
        o.worker_bytes = page;
        o.prefault_share = Some(crate::region::Share { index: 1, count: 4 });
        let r = prefault_ranges(&o, &g);
        assert_eq!(r.len(), 10);
        assert_eq!(r[2], (2 * 4 * page + page, page));
        o.worker_bytes = 2 * page + 100;
        o.prefault_share = Some(crate::region::Share { index: 0, count: 1 });
        let r = prefault_ranges(&o, &g);
        assert!(r.iter().all(|(s, l)| s % page == 0 && l % page == 0));
        assert_eq!(r[1], (4 * page, 3 * page));
    }

    #[test]
    fn views_are_bounds_checked() {
        assert!(check_span(0, 1, 1, "row").is_ok());
        assert!(check_span(1, 1, 1, "row").is_err());
        assert!(check_span(usize::MAX, 2, 10, "row").is_err());
        assert!(check_span(0, 0, 10, "row").is_err());
    }
}
