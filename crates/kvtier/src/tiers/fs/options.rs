//! The fs tier's options: the layout and [`FsOptions`], with their
//! defaults and the checks a tier runs at open.

use std::path::PathBuf;
use std::time::Duration;

use super::format::file_len;
use crate::error::{Error, Result};
use crate::request::Locality;

/// Default size a segment file aims at (the last one may be smaller; a
/// record larger than this gets a segment of its own).
pub(crate) const SEGMENT_TARGET_BYTES: u64 = 1 << 30;

/// How the tier lays blocks out in its directory.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum FsLayout {
    /// A file per block (`<root>/<aa>/<key hex>.kvb`): any file system,
    /// and a directory several processes or hosts share.
    #[default]
    Files,
    /// Records in large preallocated segment files
    /// (`<root>/segments/`, see `segments.rs`): no file-system metadata
    /// work per block, for local storage used by one process; needs a
    /// capacity, and refuses `shared`.
    Segments,
}

/// Options of a file-system tier: the one set of them
/// (`kvtier_fs_options` and the `"options"` of a JSON tier of type `"fs"`
/// are read into it; JSON names the root `directory`, gives
/// `stale_temp_age_ms` in milliseconds and the locality as `"local"` or
/// `"remote"`).  Missing fields take [`Default`]'s values, whose directory
/// is empty: a tier cannot open until one is given.
#[derive(Clone, Debug, PartialEq, serde::Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct FsOptions {
    /// Directory holding the blocks.
    #[serde(rename = "directory")]
    pub root: PathBuf,
    /// A file per block, or segment files ([`FsLayout`]).
    pub layout: FsLayout,
    /// In the segments layout, the size each segment file aims at (the
    /// last one may be smaller; a block larger than this gets a file of its
    /// own).  Default 1 GiB.
    pub segment_file_bytes: u64,
    /// Create `root` (and its parents) if missing; if false, a missing
    /// directory is an error at open.
    pub create_dir: bool,
    /// Byte limit of the files (headers included); 0 means unbounded.
    pub capacity_bytes: u64,
    /// Fraction of the capacity above which a store evicts (0 < low <= high <= 1).
    pub high_watermark: f64,
    /// Fraction of the capacity eviction brings usage down to.
    pub low_watermark: f64,
    /// Read-priority worker threads (1..=256).
    pub read_threads: usize,
    /// Write-priority worker threads (1..=256).
    pub write_threads: usize,
    /// Use `O_DIRECT` where the file system supports it.
    pub direct_io: bool,
    /// Make each stored block durable before reporting it (fdatasync + directory fsync).
    pub durable: bool,
    /// Write each store as an unnamed file (`O_TMPFILE`) linked under its
    /// name once whole, where the file system supports it (a crash then
    /// leaves nothing behind); otherwise, or when false, a named temporary
    /// file is renamed.
    pub unnamed_temp_files: bool,
    /// Other processes use the directory too: look for keys missing from
    /// the local index on disk (off the caller's thread).
    pub shared: bool,
    /// Where the storage is, for request tier filters.
    #[serde(deserialize_with = "crate::serde_forms::locality")]
    pub locality: Locality,
    /// Temporary files older than this are removed at open even if their
    /// writer cannot be shown dead (a writer on another host).
    #[serde(
        rename = "stale_temp_age_ms",
        deserialize_with = "crate::serde_forms::millis"
    )]
    pub stale_temp_age: Duration,
    /// Permission bits of every file the tier creates (block, temporary,
    /// segment, lock and probe files), default `0o600`: a KV cache is
    /// derived from prompts.  Directories it creates get the same bits
    /// with search (x) added wherever read (r) is set (`0o600` gives
    /// `0o700`, `0o640` gives `0o750`).  Set with `fchmod` after creation,
    /// so the process umask does not narrow it (only the parents of the
    /// root that `create_dir` makes are left to the umask).  Must be
    /// within `0o777` and give the owner read and write.  JSON takes an
    /// octal string (`"0640"`) or a number.
    #[serde(deserialize_with = "crate::serde_forms::file_mode")]
    pub file_mode: u32,
    /// The block layout the directory's blocks belong to (1..=256
    /// printable ASCII bytes; see `marker.rs`): a directory without a
    /// marker adopts it, one marked with another is refused at open.
    /// `None` (the default): no check, unless the manager's
    /// `layout_fingerprint` is inherited.
    pub layout_fingerprint: Option<String>,
    /// A block stored longer ago than this is a miss and is removed (at
    /// lookup, and by the cleanup after each step); zero (the default):
    /// no limit.  JSON: `max_age_ms`.
    #[serde(rename = "max_age_ms", deserialize_with = "crate::serde_forms::millis")]
    pub max_age: Duration,
    /// At shutdown (after the transfers finish), remove every block the
    /// directory holds (block files, segment files), leaving the directory
    /// and its layout marker.  Default false.
    pub clear_on_shutdown: bool,
    /// Segments layout only: keep each key of more than 16 bytes in the
    /// index as a 16-byte digest (about 43 heap bytes a block instead of
    /// 59 for 32-byte keys); every load still checks the key in the
    /// record's header.  The tier then announces no events (its event
    /// capacity is taken as 0), a drop by a non-empty key prefix reads the
    /// header of each block kept as a digest, and a max age is refused.
    /// Default false.
    pub key_digests: bool,
}

impl Default for FsOptions {
    /// No directory (set one), a file per block, unbounded, 8 + 8 threads, `O_DIRECT`, no
    /// fsync, unnamed temporary files, not shared, local, watermarks
    /// 0.95 / 0.85, stale temporary files removed after 15 minutes, files
    /// `0600` (directories `0700`), no layout fingerprint, no age limit,
    /// blocks kept at shutdown, whole keys in the index.
    fn default() -> FsOptions {
        FsOptions {
            root: PathBuf::new(),
            layout: FsLayout::Files,
            segment_file_bytes: SEGMENT_TARGET_BYTES,
            create_dir: true,
            capacity_bytes: 0,
            high_watermark: 0.95,
            low_watermark: 0.85,
            read_threads: 8,
            write_threads: 8,
            direct_io: true,
            durable: false,
            unnamed_temp_files: true,
            shared: false,
            locality: Locality::Local,
            stale_temp_age: Duration::from_secs(15 * 60),
            file_mode: 0o600,
            layout_fingerprint: None,
            max_age: Duration::ZERO,
            clear_on_shutdown: false,
            key_digests: false,
        }
    }
}

impl FsOptions {
    /// [`Default`]'s options for a tier rooted at `root`.
    pub fn new(root: impl Into<PathBuf>) -> FsOptions {
        FsOptions {
            root: root.into(),
            ..FsOptions::default()
        }
    }

    pub(super) fn validate(&self, block_bytes: usize) -> Result<()> {
        let bad = |m: String| Err(Error::InvalidArgument(format!("fs tier: {m}")));
        if self.root.as_os_str().is_empty() {
            return bad("the directory is empty (give the path of a directory)".into());
        }
        if self.file_mode & !0o777 != 0 || self.file_mode & 0o600 != 0o600 {
            return bad(format!(
                "file_mode {:#o} must be within 0o777 and give the owner read and write (0o600)",
                self.file_mode
            ));
        }
        if let Some(f) = &self.layout_fingerprint {
            crate::tiers::layout::check_fingerprint("fs tier: layout_fingerprint", f)?;
        }
        let (lo, hi) = (self.low_watermark, self.high_watermark);
        if !(lo > 0.0 && lo <= hi && hi <= 1.0) {
            return bad(format!(
                "watermarks must satisfy 0 < low <= high <= 1 (got low {lo}, high {hi})"
            ));
        }
        for (what, n) in [("read", self.read_threads), ("write", self.write_threads)] {
            if n == 0 || n > 256 {
                return bad(format!("{what}_threads must be 1..=256 (got {n})"));
            }
        }
        let one = file_len(block_bytes);
        if self.layout == FsLayout::Segments {
            if self.capacity_bytes < one {
                return bad(format!(
                    "the segments layout needs capacity_bytes of at least one block of {one} bytes, header included (got {})",
                    self.capacity_bytes
                ));
            }
            if self.segment_file_bytes == 0 {
                return bad("segment_file_bytes must be positive".into());
            }
            if self.shared {
                return bad(
                    "the segments layout is for one process: shared needs the files layout".into(),
                );
            }
        }
        if self.key_digests && self.layout != FsLayout::Segments {
            return bad("key_digests needs the segments layout (the files layout names each file by its key)".into());
        }
        if self.key_digests && !self.max_age.is_zero() {
            return bad("key_digests and max_age_ms cannot go together (the age of a block is kept by its key)".into());
        }
        if self.capacity_bytes != 0 && (self.capacity_bytes as f64 * lo) < one as f64 {
            return bad(format!(
                "capacity {} bytes at low watermark {lo} holds no block of {one} bytes (header included)",
                self.capacity_bytes
            ));
        }
        Ok(())
    }
}
