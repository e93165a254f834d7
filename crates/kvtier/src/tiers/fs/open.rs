//! Opening a tier: its directory made or checked, what the file system
//! supports probed, the index rebuilt from what is on disk (in the layout's
//! own way), the workers started and the blocks found announced; and what
//! the tier tells of itself afterwards.

use std::fs;
use std::sync::Arc;

use super::age::Ages;
use super::cause::Cause;
use super::file;
use super::files::Files;
use super::format::{Layout, file_len};
use super::index::Index;
use super::io::{BlockIo, OnDisk};
use super::pool::Pool;
use super::rebuild::{self, RebuildReport};
use super::snapshot::Persisted;
use super::stats::FsStats;
use super::{FsLayout, FsOptions, FsTier, beneath, marker};
use crate::error::{Error, Result};
use crate::region::SlotMemory;
use crate::tiering::DEFAULT_TIER_EVENT_CAPACITY;
use crate::tiers::kit::{Announcer, Reporter};

impl FsTier {
    /// Opens (or creates) the tier's directory for blocks of
    /// `slots.slot_bytes()` bytes, rebuilding the index from what is there.
    /// Blocks the caller while it scans the directory.
    pub fn open(slots: SlotMemory, opts: FsOptions) -> Result<FsTier> {
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
        let mut persisted = Persisted::open(root, &opts, block_bytes)?;
        let (index, rebuild, segments) = match opts.layout {
            FsLayout::Files => {
                let mut index = Index::new(file_len(block_bytes));
                let rebuild = match persisted.restore_files(&layout, &opts, &mut index, &mut ages) {
                    Some(loaded) => loaded,
                    None => rebuild::rebuild(&layout, block_bytes, &opts, &mut index, &mut ages)?,
                };
                (index, rebuild, None)
            }
            FsLayout::Segments => {
                let (segments, found, mut rebuild) =
                    persisted.open_segments(root, block_bytes, &opts, direct)?;
                // The probe files of a process killed while opening.
                if let Ok(c) = beneath::c_path(root)
                    && let Ok(fd) = beneath::open_root(&c)
                {
                    rebuild::remove_dead_probes(&fd, opts.stale_temp_age, &mut rebuild);
                }
                let mut index =
                    Index::with_records(file_len(block_bytes), segments.records(), &found)?;
                // As the files layout's rebuild does; an evicted record is
                // only freed.
                rebuild.evicted = rebuild::evict_over_capacity(&opts, &mut index, |_| ());
                rebuild.blocks -= rebuild.evicted;
                // Records keep no store time: their age counts from now.
                let now = std::time::SystemTime::now();
                for &(key, _) in &found {
                    ages.stored(key, now);
                }
                (index, rebuild, Some(segments))
            }
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
        tier.note_skipped_at_open();
        super::overhead::warn_if_costly(&tier.opts.root, tier.opts.layout, block_bytes);
        // The rebuilt blocks are announced, oldest first, so a router learns of them.
        let mut keys = Vec::new();
        tier.index.ready_keys(&mut keys);
        for key in keys {
            tier.announce_stored(key);
        }
        Ok(tier)
    }

    /// Reports (in the error log the manager takes) what the opening scan
    /// skipped and left on disk: foreign entries and unreadable blocks.
    fn note_skipped_at_open(&mut self) {
        self.note_index_at_open();
        let r = self.rebuild;
        if r.foreign > 0 {
            self.errors.note(|| format!(
                "skipped {} foreign entries under the tier's names at open ({}); never followed, left in place",
                r.foreign,
                r.foreign_kinds
            ));
        }
        if r.unreadable > 0 {
            self.errors.note(|| format!(
                "skipped {} block files that could not be read at open (permission or I/O error); left in place",
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

    /// What the restart scan found.
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
