//! `RegionOptions`: what a process asks for when it creates or joins a region.

use std::path::PathBuf;
use std::time::Duration;

use crate::error::{Error, Result};

/// Whether this process may create the region, join it, or either
/// (`"create_or_join"`, `"create"` or `"join"` in JSON).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum OpenMode {
    /// Create it if nobody has, else join it (the usual choice: every
    /// process passes the same options and the first one creates).
    #[default]
    CreateOrJoin,
    /// Create it; fail if a live region of that name exists.
    Create,
    /// Join it; wait (up to the join timeout) for it to appear.
    Join,
}

/// How pages are faulted in when the region is mapped (`"off"`, `"auto"`
/// or `"touch"` in JSON).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Prefault {
    /// Leave pages to fault on first use (the creator reserves their room
    /// on the file system all the same, so a first use never fails).
    Off,
    /// `MADV_POPULATE_WRITE` where the kernel has it, else touch each page.
    #[default]
    Auto,
    /// Always touch each page (one atomic add of zero, which keeps bytes a
    /// peer may already have written).
    Touch,
}

/// Whether this process created the region or joined it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    /// Created (and sized) the backing files; removes them at cleanup.
    Creator,
    /// Joined a region another process created.
    Joiner,
}

/// A share of the region for one of `count` processes: index `index`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Share {
    /// Which share, `0..count`.
    pub index: u32,
    /// How many shares the region is split into.
    pub count: u32,
}

/// Options for [`Region::create_or_join`](super::Region::create_or_join).
/// Every process of one region passes the same layout (slot count, slot
/// bytes, worker bytes, segments): the creator records it in the first
/// backing file, and a joiner whose layout differs gets an error naming
/// both.
///
/// This is the one set of region options: `kvtier_region_options` is read
/// into it, and so is the `"region"` object of a JSON configuration, where
/// durations are milliseconds (`join_timeout_ms`) and the geometry
/// (`slot_count`, `slot_bytes`) comes from the manager's capacity and
/// `block_bytes` instead.  Missing fields take [`Default`]'s values.
#[derive(Debug, Clone, PartialEq, serde::Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct RegionOptions {
    /// File name of the region (no `/`), unique per engine instance.
    pub name: String,
    /// Directory holding the backing files; `/dev/shm` by default
    /// (hugetlbfs or a DAX mount are valid choices).
    pub directory: PathBuf,
    /// Number of slots (rows).
    #[serde(skip)]
    pub slot_count: u32,
    /// Bytes per slot, which is also the row stride: a multiple of the page size.
    #[serde(skip)]
    pub slot_bytes: usize,
    /// Bytes of each worker's area within a row, for the per-worker layout;
    /// 0 when rows are not split per worker.
    pub worker_bytes: usize,
    /// Create, join, or either.
    pub open: OpenMode,
    /// How long a joiner waits for the region to appear and be sized.
    #[serde(
        rename = "join_timeout_ms",
        deserialize_with = "crate::serde_forms::millis"
    )]
    pub join_timeout: Duration,
    /// Number of backing files (each at least 1 GiB); 0 and 1 mean one file.
    pub segments: u32,
    /// How pages are faulted in after mapping.
    pub prefault: Prefault,
    /// Pre-fault only this share of the region: this worker's area of every
    /// row under the per-worker layout, else one of `count` contiguous
    /// ranges of rows.  `None`: the whole region.
    pub prefault_share: Option<Share>,
    /// Threads that pre-fault in parallel (0 and 1: the calling thread).
    pub prefault_threads: u32,
    /// Permission bits of the backing files (default 0600); applied
    /// exactly, whatever the umask.
    pub mode: u32,
    /// What a creator does with a backing file that no process holds (left
    /// by a crashed run): replace it (`true`, the default) or fail.
    pub replace_stale: bool,
}

impl Default for RegionOptions {
    fn default() -> Self {
        RegionOptions {
            name: String::new(),
            directory: PathBuf::from("/dev/shm"),
            slot_count: 0,
            slot_bytes: 0,
            worker_bytes: 0,
            open: OpenMode::default(),
            join_timeout: RegionOptions::DEFAULT_JOIN_TIMEOUT,
            segments: 1,
            prefault: Prefault::default(),
            prefault_share: None,
            prefault_threads: 1,
            mode: RegionOptions::DEFAULT_MODE,
            replace_stale: true,
        }
    }
}

/// cbindgen:ignore
impl RegionOptions {
    /// Smallest size of a segment when a region is split over several files.
    pub const MIN_SEGMENT_BYTES: usize = 1 << 30;
    /// Default join timeout: how long a joiner waits for the creator to size the file.
    pub const DEFAULT_JOIN_TIMEOUT: Duration = Duration::from_secs(30);
    /// Default permission bits of backing files: owner read and write only.
    pub const DEFAULT_MODE: u32 = 0o600;
    /// Longest region name, leaving room for segment suffixes within `NAME_MAX`.
    pub const MAX_NAME_LEN: usize = 200;

    /// Defaults with a name and a geometry.
    pub fn new(name: impl Into<String>, slot_count: u32, slot_bytes: usize) -> RegionOptions {
        RegionOptions {
            name: name.into(),
            slot_count,
            slot_bytes,
            ..RegionOptions::default()
        }
    }
}

/// Sizes derived from validated options.
#[derive(Debug, Clone)]
pub(crate) struct Geometry {
    pub(crate) total: usize,
    pub(crate) page: usize,
    /// Bytes of the layout header before slot 0 in the first file: one page.
    pub(crate) header: usize,
    /// Length of each segment, in mapping order.
    pub(crate) segments: Vec<usize>,
}

/// Checks the name: not empty, no `/`, no NUL, not `.` or `..`, not too long.
pub(crate) fn check_name(name: &str) -> Result<()> {
    let bad = |why: &str| {
        Err(Error::InvalidArgument(format!(
            "region name {name:?} {why}"
        )))
    };
    if name.is_empty() {
        return bad("is empty");
    }
    if name.contains('/') {
        return bad("contains '/': a region name is one file name, not a path");
    }
    if name.contains('\0') {
        return bad("contains a NUL byte");
    }
    if name == "." || name == ".." {
        return bad("is not a file name");
    }
    if name.len() > RegionOptions::MAX_NAME_LEN {
        return bad(&format!(
            "is longer than {} bytes",
            RegionOptions::MAX_NAME_LEN
        ));
    }
    Ok(())
}

/// Validates everything that does not need the file system except the
/// page size, and derives the geometry.
pub(crate) fn geometry(o: &RegionOptions, page: usize) -> Result<Geometry> {
    check_name(&o.name)?;
    let inv = |m: String| Err(Error::InvalidArgument(m));
    if o.slot_count == 0 || o.slot_bytes == 0 {
        return inv(format!(
            "a region needs at least one slot of at least one page (got {} slots of {} bytes)",
            o.slot_count, o.slot_bytes
        ));
    }
    if o.slot_bytes % page != 0 {
        return inv(format!(
            "slot size {} bytes is not a multiple of the page size {page} bytes (round it up to {})",
            o.slot_bytes,
            o.slot_bytes.div_ceil(page) * page
        ));
    }
    let total = (o.slot_count as usize)
        .checked_mul(o.slot_bytes)
        .filter(|t| *t <= isize::MAX as usize)
        .ok_or_else(|| {
            Error::InvalidArgument(format!(
                "{} slots of {} bytes overflow the address space",
                o.slot_count, o.slot_bytes
            ))
        })?;
    if o.worker_bytes > o.slot_bytes {
        return inv(format!(
            "worker area of {} bytes is larger than the slot size {} bytes",
            o.worker_bytes, o.slot_bytes
        ));
    }
    if o.mode & !0o777 != 0 || o.mode & 0o600 != 0o600 {
        return inv(format!(
            "file mode {:o} must be permission bits (at most 0777) including owner read and write (0600)",
            o.mode
        ));
    }
    if let Some(s) = o.prefault_share {
        if s.count == 0 || s.index >= s.count {
            return inv(format!(
                "pre-fault share {} of {} is out of range (index must be below count)",
                s.index, s.count
            ));
        }
        if o.worker_bytes > 0 && (s.count as usize).saturating_mul(o.worker_bytes) > o.slot_bytes {
            return inv(format!(
                "pre-fault share count {} times the worker area {} bytes exceeds the slot size {} bytes",
                s.count, o.worker_bytes, o.slot_bytes
            ));
        }
        if o.worker_bytes == 0 && s.count > o.slot_count {
            return inv(format!(
                "pre-fault share count {} exceeds the slot count {}",
                s.count, o.slot_count
            ));
        }
    }
    let n = o.segments.max(1) as usize;
    let segments = if n == 1 {
        vec![total]
    } else {
        let per = total.div_ceil(n).div_ceil(page) * page;
        let last = total.saturating_sub(per * (n - 1));
        if last < RegionOptions::MIN_SEGMENT_BYTES {
            return inv(format!(
                "{n} segments split the {total}-byte region into pieces of {per} bytes (the last {last}); \
                 every segment must be at least {} bytes (1 GiB): use at most {} segments",
                RegionOptions::MIN_SEGMENT_BYTES,
                (total / RegionOptions::MIN_SEGMENT_BYTES).max(1)
            ));
        }
        let mut v = vec![per; n - 1];
        v.push(last);
        v
    };
    Ok(Geometry {
        total,
        page,
        header: page,
        segments,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_checked() {
        assert!(check_name("kv_0").is_ok());
        for bad in ["", "a/b", "/x", ".", "..", "a\0b"] {
            assert!(check_name(bad).is_err(), "{bad:?}");
        }
        assert!(check_name(&"x".repeat(RegionOptions::MAX_NAME_LEN + 1)).is_err());
    }

    #[test]
    fn segments_are_at_least_one_gib_and_cover_the_region() {
        let mut o = RegionOptions::new("g", 2048, 1 << 20);
        o.segments = 2;
        let g = geometry(&o, 4096).unwrap();
        assert_eq!(g.segments, vec![1 << 30, 1 << 30]);
        o.segments = 3;
        let e = geometry(&o, 4096).unwrap_err().to_string();
        assert!(e.contains("at least 1073741824 bytes"), "{e}");
        // Uneven: 3 pages over 2 GiB + a page, split in two.
        let mut o = RegionOptions::new("g", 174_763, 12288);
        o.segments = 2;
        let g = geometry(&o, 4096).unwrap();
        assert_eq!(g.segments.iter().sum::<usize>(), g.total);
        assert!(
            g.segments
                .iter()
                .all(|s| *s >= RegionOptions::MIN_SEGMENT_BYTES && s % 4096 == 0)
        );
    }

    #[test]
    fn sizes_and_modes_are_checked() {
        let page = 4096;
        let ok = RegionOptions::new("g", 4, page);
        assert!(geometry(&ok, page).is_ok());
        let e = geometry(&RegionOptions::new("g", 4, 100), page).unwrap_err();
        assert!(
            e.to_string().contains("not a multiple of the page size"),
            "{e}"
        );
        assert!(geometry(&RegionOptions::new("g", 0, page), page).is_err());
        assert!(geometry(&RegionOptions::new("g", 4, 0), page).is_err());
        let mut o = ok.clone();
        o.mode = 0o400;
        assert!(geometry(&o, page).is_err());
        let mut o = ok.clone();
        o.worker_bytes = 2 * page;
        assert!(geometry(&o, page).is_err());
        let mut o = ok;
        o.prefault_share = Some(Share { index: 2, count: 2 });
        assert!(geometry(&o, page).is_err());
    }
}
