//! Opening a tier: its directory made or checked, what the file system
//! supports probed, the workers started, and the index rebuilt in the
//! background, either from the file a clean shutdown persisted
//! (`snapshot.rs`: its header checked here, its body read by
//! `snapshot_load.rs`) or, without a trusted one, by the restart scan
//! (`scan.rs`, over what the layout lists: fan-out directories, or the
//! records the live map may hold blocks in); and what the tier tells of
//! itself afterwards.

use std::fs;
use std::sync::Arc;

use super::age::Ages;
use super::cause::Cause;
use super::file;
use super::files::Files;
use super::format::Layout;
use super::io::{BlockIo, OnDisk};
use super::pool::Pool;
use super::rebuild::RebuildReport;
use super::rebuilding;
use super::scan::RebuildHold;
use super::segments::Segments;
use super::snapshot::Persisted;
use super::stats::FsStats;
use super::{FsLayout, FsOptions, FsTier, beneath, marker};
use crate::error::{Error, Result};
use crate::region::SlotMemory;
use crate::tiering::DEFAULT_TIER_EVENT_CAPACITY;
use crate::tiers::kit::{Announcer, Reporter};

impl FsTier {
    /// Opens (or creates) the tier's directory for blocks of
    /// `slots.slot_bytes()` bytes.  Returns after the cheap checks (the
    /// root, the layout marker, the options; in the segments layout, the
    /// segment files and their live map; the persisted index file's
    /// header), without reading a block or the index file's body, and the
    /// index is rebuilt in the background: after a clean shutdown from the
    /// index it persisted (once, and only what checks out), otherwise from
    /// what is there.  The tier serves what was found so far, and stores
    /// work at once ([`FsTier::rebuilding`], [`FsTier::wait_rebuilt`]).
    pub fn open(slots: SlotMemory, opts: FsOptions) -> Result<FsTier> {
        FsTier::open_with(slots, opts, false).map(|(tier, _)| tier)
    }

    /// [`FsTier::open`], with the rebuild (the persisted index's load, or
    /// the restart scan) held before it reads anything until the returned
    /// [`RebuildHold`] is released (or dropped): for tests and tools that
    /// act on a tier before anything was found.  The tier serves
    /// meanwhile, as while any scan runs.
    pub fn open_held(slots: SlotMemory, opts: FsOptions) -> Result<(FsTier, RebuildHold)> {
        let (tier, hold) = FsTier::open_with(slots, opts, true)?;
        Ok((tier, hold.expect("held")))
    }

    fn open_with(
        slots: SlotMemory,
        opts: FsOptions,
        held: bool,
    ) -> Result<(FsTier, Option<RebuildHold>)> {
        let block_bytes = slots.slot_bytes();
        opts.validate(block_bytes)?;
        let root = &opts.root;
        match fs::metadata(root) {
            Ok(m) if m.is_dir() => {}
            Ok(_) => {
                return Err(Error::InvalidArgument(format!(
                    "fs tier: {} is not a directory",
                    root.display()
                )));
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound && opts.create_dir => {
                use std::os::unix::fs::{DirBuilderExt, PermissionsExt};
                let mode = beneath::dir_mode_of(opts.file_mode);
                fs::DirBuilder::new()
                    .recursive(true)
                    .mode(mode)
                    .create(root)
                    .and_then(|()| fs::set_permissions(root, fs::Permissions::from_mode(mode)))
                    .map_err(|e| {
                        Error::io(format!("fs tier: creating directory {}", root.display()), e)
                    })?;
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                return Err(Error::NotFound(format!(
                    "fs tier directory {} (create_dir is off)",
                    root.display()
                )));
            }
            Err(e) => {
                return Err(Error::io(format!("fs tier: opening {}", root.display()), e));
            }
        }
        if let Some(f) = &opts.layout_fingerprint {
            marker::settle(root, f, opts.file_mode)?;
        }
        let direct = opts.direct_io && file::probe_direct(root, opts.file_mode);
        let layout = Layout::new(root.clone());
        let ages = Ages::new(opts.max_age);
        let mut rebuild = RebuildReport::default();
        let segments = match opts.layout {
            FsLayout::Files => None,
            FsLayout::Segments => {
                let (segments, report) = Segments::open(root, block_bytes, &opts, direct)?;
                rebuild = report;
                Some(segments)
            }
        };
        let events = Announcer::new(super::event_capacity(&opts, DEFAULT_TIER_EVENT_CAPACITY));
        // Taken (and made unusable again) only once the segments lock is
        // held: an open refused for the lock or the segment files leaves
        // the index file for the next one.
        let mut persisted = Persisted::open(root, &opts, block_bytes)?;
        // The one place the index comes from: the body of the one
        // persisted at the last clean shutdown, if its header is trusted,
        // read in the background (and the restart scan only if it turns
        // out bad), else the restart scan.
        let (index, scan, hold) = rebuilding::start(
            &layout,
            &opts,
            block_bytes,
            segments.as_ref(),
            &mut rebuild,
            persisted.take_load(),
            held,
        )?;
        let (disk, direct): (Box<dyn OnDisk>, bool) = match segments {
            Some(segments) => {
                let direct = segments.direct();
                (Box::new(segments), direct)
            }
            None => {
                let link = if opts.unnamed_temp_files {
                    file::probe_tmpfile(root, opts.file_mode)
                } else {
                    None
                };
                (Box::new(Files::new(&layout, opts.shared, link)), direct)
            }
        };
        let io = BlockIo {
            slots,
            direct,
            durable: opts.durable,
            file_mode: opts.file_mode,
        };
        let counts = Arc::new(FsStats::opened(&rebuild));
        let pool = Pool::start(
            io,
            disk,
            opts.read_threads,
            opts.write_threads,
            Arc::clone(&counts),
        )?;
        let errors = Reporter::new(format!("fs tier {}", opts.root.display()), 0);
        let mut tier = FsTier {
            opts,
            pool,
            index,
            checks: Default::default(),
            pending_checks: 0,
            absent: Vec::new(),
            events,
            counts,
            rebuild,
            rebuild_state: scan.map(Box::new),
            outstanding: 0,
            closed: false,
            finished_buf: Vec::new(),
            checked_buf: Vec::new(),
            lost_buf: Vec::new(),
            store_scratch: Default::default(),
            errors,
            ages,
            persisted,
        };
        tier.note_index_at_open();
        super::overhead::warn_if_costly(&tier.opts.root, tier.opts.layout, block_bytes);
        Ok((tier, hold))
    }

    /// Stops a running restart scan or index load (shutdown); whether the
    /// index knows every block on disk: the load or scan had ended, or
    /// nothing ran (there was nothing to read).
    pub(super) fn stop_rebuild(&mut self) -> bool {
        match self.rebuild_state.take() {
            Some(mut r) => {
                r.stop();
                false
            }
            None => true,
        }
    }

    /// At a clean shutdown when the index knows every block (its scan
    /// or load ended), records in the live map exactly the
    /// records the index holds (segments layout).
    pub(super) fn save_live_records(&mut self) {
        if !self.segmented() {
            return;
        }
        let mut live = Vec::new();
        self.index.records_in_use(&mut live);
        if let Err(e) = self
            .pool
            .shared()
            .disk
            .save_live(&live, self.opts.file_mode)
        {
            log::warn!(
                target: "kvtier::fs",
                "fs tier {}: saving the live map at shutdown failed ({}); the next open reads more records",
                self.opts.root.display(),
                std::io::Error::from_raw_os_error(e)
            );
        }
    }

    /// Reports (in the error log the manager takes) what the restart scan
    /// skipped and left on disk: foreign entries and unreadable blocks.
    pub(super) fn note_skipped_at_open(&mut self) {
        let r = self.rebuild;
        if r.foreign > 0 {
            self.errors.note(|| format!(
                "skipped {} foreign entries under the tier's names at the restart scan ({}); never followed, left in place",
                r.foreign,
                r.foreign_kinds
            ));
        }
        if r.unreadable > 0 {
            self.errors.note(|| format!(
                "skipped {} block files that could not be read at the restart scan (permission or I/O error); left in place",
                r.unreadable
            ));
        }
    }

    /// The options the tier runs with.
    pub fn options(&self) -> &FsOptions {
        &self.opts
    }

    /// Whether stores write unnamed files and link them (the probe at open
    /// succeeded and the option is on).
    pub fn unnamed_temp_files(&self) -> bool {
        self.pool.shared().disk.links_unnamed()
    }

    /// Whether `O_DIRECT` is in use (the probe at open succeeded).
    pub fn direct_io(&self) -> bool {
        self.pool.shared().io.direct
    }

    /// The layout in use.
    pub fn layout(&self) -> FsLayout {
        self.opts.layout
    }

    /// What the restart found so far: the blocks of the persisted index
    /// ([`RebuildReport::index_loaded`] once it was read whole), or of the
    /// restart scan; final once [`FsTier::rebuilding`] is false
    /// ([`FsTier::wait_rebuilt`] waits for that).
    pub fn rebuild_report(&self) -> RebuildReport {
        self.rebuild
    }

    /// Bytes the tier accounts to its directory.
    pub fn bytes_used(&self) -> u64 {
        self.index.used()
    }

    /// Number of whole, readable blocks.
    pub fn block_count(&self) -> usize {
        self.index.ready_count()
    }

    /// Failures counted for `cause` so far.
    pub fn errors(&self, cause: Cause) -> u64 {
        self.counts.errors.get(cause)
    }
}
