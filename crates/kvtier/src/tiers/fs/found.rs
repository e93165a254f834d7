//! What a restart finds and hands the tier, in batches: the background
//! scan's blocks and free records, and the persisted index's entries as
//! its load reads them (`scan.rs`, `snapshot_load.rs`; taken in by
//! `rebuilding.rs`).

use std::time::SystemTime;

use super::index::Held;
use super::rebuild::RebuildReport;
use crate::key::Key;

/// Most blocks a files batch holds (a fan-out directory of more is sent
/// in several), so that taking one in is short.
pub(super) const BATCH: usize = 4096;

/// What the scan, or the persisted index's load, hands the tier.
#[derive(Debug)]
pub(super) enum Found {
    /// A fan-out directory's whole blocks, oldest first.
    Files(Vec<(SystemTime, Key)>),
    /// A run of records: its blocks as (key, record) in record order (a
    /// key as a digest only from a persisted index that kept digests),
    /// and its records that hold none.
    Records(Vec<(Held, u32)>, Vec<u32>),
    /// One thread's counts, at its end.
    Counts(RebuildReport),
    /// The persisted index was read whole: every entry sent (the last
    /// batch before this).
    Loaded,
    /// The persisted index turned out bad (why) after the batches before
    /// this; the scan follows.
    Rejected(String),
}

/// Sends `all` (least recent first) in batches of at most [`BATCH`], the
/// most recent batch first, each made a [`Found`] by `wrap`: the tier
/// puts each batch below the ones before.  False as soon as `send` is
/// (the tier is gone).
pub(super) fn send_newest_first<T>(
    mut all: Vec<T>,
    wrap: impl Fn(Vec<T>) -> Found,
    send: &mut dyn FnMut(Found) -> bool,
) -> bool {
    while !all.is_empty() {
        let batch = all.split_off(all.len().saturating_sub(BATCH));
        if !send(wrap(batch)) {
            return false;
        }
    }
    true
}
