//! Opening a tier: its directory made or checked, what the file system
//! supports probed, the workers started, and the index either loaded from
//! the file a clean shutdown persisted (`snapshot.rs`) or, without a
//! trusted one, rebuilt by the restart scan started in the background
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
use super::rebuild::{self, RebuildReport};
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
    /// `slots.slot_bytes()` bytes.  After a clean shutdown the index it
    /// persisted is loaded (once, and only when it can be trusted): the
    /// tier is whole and ready at once.  Otherwise the index is rebuilt
    /// from what is there in the background: this returns after the cheap
    /// checks (the root, the layout marker, the options; in the segments
    /// layout, the segment files and their live map), without reading a
    /// block; the tier serves what its scan has found so far, and stores
    /// work at once ([`FsTier::rebuilding`], [`FsTier::wait_rebuilt`]).
    pub fn open(slots: SlotMemory, opts: FsOptions) -> Result<FsTier> {
        FsTier::open_with(slots, opts, false).map(|(tier, _)| tier)
    }

    /// [`FsTier::open`], with the restart scan held before it reads
    /// anything until the returned [`RebuildHold`] is released (or
    /// dropped): for tests and tools that act on a tier before its scan
    /// has found anything.  The tier serves meanwhile, as while any scan
    /// runs.  When the persisted index was loaded no scan runs, and the
    /// hold holds nothing.
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
        let mut ages = Ages::new(opts.max_age);
        let mut rebuild = RebuildReport::default();
        let segments = match opts.layout {
            FsLayout::Files => None,
            FsLayout::Segments => {
                let (segments, report) = Segments::open(root, block_bytes, &opts, direct)?;
                rebuild = report;
                Some(segments)
            }
        };
        // Taken (and made unusable again) only once the segments lock is
        // held: an open refused for the lock or the segment files leaves
        // the index file for the next one.
        let mut persisted = Persisted::open(root, &opts, block_bytes)?;
        // The one place the index comes from: the one persisted at the
        // last clean shutdown, if it is trusted (whole: no scan), else the
        // restart scan, started.
        let loaded = persisted.load(
            &layout,
            &opts,
            block_bytes,
            segments.as_ref(),
            &mut ages,
            &mut rebuild,
        );
        let (index, scan, hold) = match loaded {
            Some(index) => {
                rebuild::remove_dead_probes_of(&layout, &opts, &mut rebuild);
                (index, None, held.then(RebuildHold::idle))
            }
            None => rebuilding::start(
                &layout,
                &opts,
                block_bytes,
                segments.as_ref(),
                &mut rebuild,
                held,
            )?,
        };
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
            events: Announcer::new(DEFAULT_TIER_EVENT_CAPACITY),
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
        if tier.rebuild.index_loaded {
            // The loaded blocks are announced, oldest first, as a scan
            // announces what it finds, so a router learns of them.
            let mut keys = Vec::new();
            tier.index.ready_keys(&mut keys);
            for key in keys {
                tier.announce_stored(key);
            }
        }
        Ok((tier, hold))
    }

    /// Stops a running restart scan (shutdown); whether the index knows
    /// every block on disk: the scan had ended, or none ran (the persisted
    /// index was loaded, or there was nothing to read).
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
    /// ended, or it was loaded), records in the live map exactly the
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

    /// What the restart found: the persisted index loaded
    /// ([`RebuildReport::index_loaded`], final at once), or what the
    /// restart scan found so far (final once [`FsTier::rebuilding`] is
    /// false; [`FsTier::wait_rebuilt`] waits for that).
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
