//! `Region`: one mmap'd buffer shared by the scheduler and every worker
//! process, created by the first process and joined by the rest.
//!
//! How the backing files are created or joined is in `setup.rs`; this
//! file maps them back to back into one reserved address range, pre-faults
//! them, and hands out addresses and views.

use std::fs::File;
use std::io;
use std::path::PathBuf;
use std::ptr::NonNull;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex};

use super::options::{Geometry, Prefault, RegionOptions, Role, geometry};
use super::setup::{Opened, open_files, segment_paths};
use super::slots::{SlotMemory, SlotOwner};
use super::sys::{self, FileId, PrefaultMethod, Span};
use crate::error::{Error, Result};

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
// SAFETY: as for Send: no Rust reference into the span is handed out that
// another thread could invalidate.
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
    header_bytes: usize,
    prefaulted: PrefaultMethod,
    closed: bool,
}

// SAFETY: see `Mapping`; the remaining fields are plain data.
unsafe impl Send for Region {}
// SAFETY: see `Mapping`; the remaining fields are plain data.
unsafe impl Sync for Region {}

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
        for (i, ((file, len), path)) in opened
            .files
            .iter()
            .zip(&geo.segments)
            .zip(&paths)
            .enumerate()
        {
            // Slot 0 follows the layout header in the first file.
            let file_offset = if i == 0 { geo.header } else { 0 };
            span.map_file(offset, *len, file, file_offset, path)?;
            offset += len;
        }
        let ranges = prefault_ranges(o, &geo)?;
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
            header_bytes: geo.header,
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

    /// Bytes of the layout header at the start of the first backing file
    /// (one page); slot 0 follows it.  Later backing files hold slots only.
    pub fn header_bytes(&self) -> usize {
        self.header_bytes
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

impl SlotOwner for Region {
    fn slot_count(&self) -> u32 {
        Region::slot_count(self)
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
fn prefault_ranges(o: &RegionOptions, g: &Geometry) -> Result<Vec<(usize, usize)>> {
    let Some(share) = o.prefault_share else {
        return Ok(vec![(0, g.total)]);
    };
    let page = g.page;
    let rows = if o.worker_bytes > 0 {
        o.slot_count as usize
    } else {
        1
    };
    let mut out: Vec<(usize, usize)> =
        crate::fallible::with_capacity(rows, "the ranges of a pre-fault share")?;
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
    Ok(out)
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
        assert_eq!(prefault_ranges(&o, &g).unwrap(), vec![(0, 40 * page)]);
        // Contiguous shares: 10 rows in 4 shares of 3, 3, 3 and 1 rows.
        o.prefault_share = Some(crate::region::Share { index: 3, count: 4 });
        assert_eq!(
            prefault_ranges(&o, &g).unwrap(),
            vec![(36 * page, 4 * page)]
        );
        o.prefault_share = Some(crate::region::Share { index: 0, count: 4 });
        assert_eq!(prefault_ranges(&o, &g).unwrap(), vec![(0, 12 * page)]);
        // Per-worker areas: worker 1's page of every row; unaligned areas
        // widen to whole pages and merge when they touch.
        o.worker_bytes = page;
        o.prefault_share = Some(crate::region::Share { index: 1, count: 4 });
        let r = prefault_ranges(&o, &g).unwrap();
        assert_eq!(r.len(), 10);
        assert_eq!(r[2], (2 * 4 * page + page, page));
        o.worker_bytes = 2 * page + 100;
        o.prefault_share = Some(crate::region::Share { index: 0, count: 1 });
        let r = prefault_ranges(&o, &g).unwrap();
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
