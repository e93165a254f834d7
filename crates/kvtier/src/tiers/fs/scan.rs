//! The restart scan in the background: a thread that reads the headers of
//! what the directory holds with many reads in flight (a pool of up to
//! [`SCAN_THREADS`] threads, each taking the next fan-out directory, or
//! the next run of segment records, until none is left) and hands what it
//! finds to the tier in batches over a channel, which the tier drains at
//! its calls (`rebuilding.rs`) without waiting.
//!
//! - Files layout: a unit is a fan-out directory; its batches are its
//!   whole blocks, oldest first within each, the newest batch first
//!   (`rebuild.rs` checks each file exactly as before: foreign entries,
//!   bad and temporary files).
//! - Segments layout: a unit is a run of [`RUN`] records, of those the
//!   live map says may hold a block (`live.rs`); its batch is its blocks
//!   and the records that hold none (free from then on).  Runs go from
//!   the highest records down, so that record order stays recency order
//!   when one thread reads them all.
//! - Each thread sends its counts (damaged, removed, unreadable, foreign
//!   entries) when it ends; the channel closing says the scan is done.
//! - A stop (shutdown, or the tier dropped) is seen between two reads.
//! - After a clean shutdown the persisted index's body is read first, on
//!   the scan's own thread, and sent as the same batches
//!   (`snapshot_load.rs`): when it is whole, that is all (then
//!   [`Found::Loaded`]); when it turns out bad midway, [`Found::Rejected`]
//!   and the scan of what the batches sent so far did not cover.
//! - The channel holds at most [`IN_FLIGHT`] batches: a scan (or a load)
//!   ahead of the tier waits, and its memory stays bounded.
//! - A [`RebuildHold`] keeps the scan (and the load) from reading anything
//!   until it is released (tests, tools that need the state before it).

use std::ffi::OsString;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::mpsc::SyncSender;
use std::sync::{Arc, mpsc};
use std::thread::JoinHandle;
use std::time::Duration;

use parking_lot::{Condvar, Mutex};

use super::beneath::Fd;
use super::file::Scratch;
use super::format::{HEADER_LEN, decode_header};
use super::found::{Found, send_newest_first};
use super::index::Held;
use super::live::set_records;
use super::rebuild::{self, RebuildReport};
use super::segments::Geometry;
use super::snapshot_load::{Load, Loaded, Records};
use crate::error::{Error, Result};
use crate::key::Key;

/// Most threads a scan reads with.
pub(super) const SCAN_THREADS: usize = 16;
/// Records a segments unit spans.
pub(super) const RUN: u32 = 4096;
/// Most batches sent and not yet taken in.
pub(super) const IN_FLIGHT: usize = 64;

/// What a scan reads.
pub(super) enum Work {
    /// The files layout: the root and its fan-out directories.
    Files {
        root: Fd,
        fanouts: Vec<OsString>,
        stale_temp_age: Duration,
    },
    /// The segments layout: the records, and the live map's bits as the
    /// tier opened (the records to read).
    Segments {
        geometry: Arc<Geometry>,
        maybe_live: Vec<u64>,
    },
}

impl Work {
    /// Whether there is nothing to read.
    pub(super) fn is_empty(&self) -> bool {
        match self {
            Work::Files { fanouts, .. } => fanouts.is_empty(),
            Work::Segments { maybe_live, .. } => maybe_live.iter().all(|&w| w == 0),
        }
    }

    /// Number of units.
    fn units(&self) -> usize {
        match self {
            Work::Files { fanouts, .. } => fanouts.len(),
            Work::Segments { geometry, .. } => geometry.records().div_ceil(RUN) as usize,
        }
    }

    /// Scans unit `u`, sending what it finds.
    fn scan(
        &self,
        u: usize,
        block_bytes: usize,
        scratch: &mut Scratch,
        report: &mut RebuildReport,
        gate: &Gate,
        tx: &SyncSender<Found>,
    ) {
        match self {
            Work::Files {
                root,
                fanouts,
                stale_temp_age,
            } => {
                let mut found = Vec::new();
                rebuild::scan_fanout(
                    root,
                    &fanouts[u],
                    block_bytes,
                    *stale_temp_age,
                    &mut found,
                    report,
                    &gate.stop,
                );
                send_newest_first(found, Found::Files, &mut |f| tx.send(f).is_ok());
            }
            Work::Segments {
                geometry,
                maybe_live,
            } => {
                // Highest runs first.
                let n = geometry.records().div_ceil(RUN);
                let run = n - 1 - u as u32;
                let start = run * RUN;
                let end = (start + RUN).min(geometry.records());
                let mut records = Vec::new();
                set_records(maybe_live, start, end, &mut records);
                if records.is_empty() {
                    return;
                }
                let mut found = (Vec::new(), Vec::new());
                read_headers(
                    geometry,
                    &records,
                    block_bytes,
                    scratch,
                    &mut found,
                    report,
                    &gate.stop,
                );
                if !gate.stop.load(Ordering::Relaxed) {
                    let _ = tx.send(Found::Records(found.0, found.1));
                }
            }
        }
    }
}

/// What a segment record holds, from its header.
#[derive(Debug, PartialEq, Eq)]
pub(super) enum RecordHolds {
    /// A whole block of this size, of this key.
    Block(Key),
    /// Nothing: never written, or unreadable now (a store rewrites it
    /// whole).
    Nothing,
    /// A damaged header, or one of another format or block size.
    Damaged,
    /// No such record (past the segments).
    Outside,
}

/// Reads record `r`'s header of `geometry` (blocks of `block_bytes`).
pub(super) fn record_holds(
    geometry: &Geometry,
    r: u32,
    block_bytes: usize,
    scratch: &mut Scratch,
) -> RecordHolds {
    let Some((fd, off)) = geometry.locate(r) else {
        return RecordHolds::Outside;
    };
    let page = scratch.page_mut();
    // SAFETY: the page is HEADER_LEN writable, aligned bytes.
    let n = unsafe { libc::pread(fd, page.as_mut_ptr().cast(), HEADER_LEN, off as i64) };
    if n != HEADER_LEN as isize || page[..8] == [0; 8] {
        return RecordHolds::Nothing;
    }
    match decode_header(&page[..]) {
        Ok(h) if h.data_len == block_bytes as u64 => RecordHolds::Block(h.key),
        _ => RecordHolds::Damaged,
    }
}

/// Reads the header of each of `records` (ascending) of `geometry`: the
/// whole blocks of `block_bytes` as (key, record) into `found.0`, the
/// records that hold none (never written, damaged, another version or
/// block size) into `found.1`, the damaged ones counted skipped in
/// `report`.  Stops
/// early (the rest unclassified) when `stop` says so.
fn read_headers(
    geometry: &Geometry,
    records: &[u32],
    block_bytes: usize,
    scratch: &mut Scratch,
    found: &mut (Vec<(Held, u32)>, Vec<u32>),
    report: &mut RebuildReport,
    stop: &std::sync::atomic::AtomicBool,
) {
    for &r in records {
        if stop.load(std::sync::atomic::Ordering::Relaxed) {
            return;
        }
        match record_holds(geometry, r, block_bytes, scratch) {
            RecordHolds::Outside => {}
            RecordHolds::Block(key) => found.0.push((Held::Key(key), r)),
            RecordHolds::Nothing => found.1.push(r),
            RecordHolds::Damaged => {
                report.skipped += 1;
                found.1.push(r);
            }
        }
    }
}

/// What the scan threads and the tier share: the stop flag and the hold.
#[derive(Debug, Default)]
pub(super) struct Gate {
    stop: AtomicBool,
    held: Mutex<bool>,
    wake: Condvar,
}

impl Gate {
    /// Waits while the scan is held and not stopped.
    fn wait_released(&self) {
        let mut held = self.held.lock();
        while *held && !self.stop.load(Ordering::Acquire) {
            self.wake.wait(&mut held);
        }
    }

    fn release(&self) {
        *self.held.lock() = false;
        self.wake.notify_all();
    }

    fn stop(&self) {
        self.stop.store(true, Ordering::Release);
        // Under the lock, so a waiter between its check and its wait
        // cannot miss the wake-up.
        let _held = self.held.lock();
        self.wake.notify_all();
    }
}

/// Keeps a tier's restart scan, or the load of its persisted index, from
/// reading anything until it is released (or dropped), while the tier
/// already serves: made by [`super::FsTier::open_held`], for tests and
/// tools that need to act on a tier before anything was found.
#[derive(Debug)]
pub struct RebuildHold(Arc<Gate>);

impl RebuildHold {
    /// Lets the scan run.
    pub fn release(self) {}
}

impl Drop for RebuildHold {
    fn drop(&mut self) {
        self.0.release();
    }
}

/// A running scan, from the tier's side.
#[derive(Debug)]
pub(super) struct Scanner {
    /// `None` once stopped (so that a thread waiting to send is let go).
    rx: Option<mpsc::Receiver<Found>>,
    gate: Arc<Gate>,
    thread: Option<JoinHandle<()>>,
}

impl Scanner {
    /// Starts scanning `work` for blocks of `block_bytes` on a thread of
    /// its own (which starts the others), after reading the persisted
    /// index's body `load` when there is one (then `work` is scanned only
    /// if the body turns out bad), held until the returned hold is
    /// released when `held`.
    pub(super) fn start(
        work: Work,
        load: Option<Load>,
        block_bytes: usize,
        held: bool,
    ) -> Result<(Scanner, Option<RebuildHold>)> {
        let gate = Arc::new(Gate {
            held: Mutex::new(held),
            ..Gate::default()
        });
        let (tx, rx) = mpsc::sync_channel(IN_FLIGHT);
        let g = Arc::clone(&gate);
        let thread = std::thread::Builder::new()
            .name("kvtier-fs-scan".into())
            .spawn(move || run(work, load, block_bytes, &g, tx))
            .map_err(|e| Error::io("fs tier: starting the restart scan".to_string(), e))?;
        let hold = held.then(|| RebuildHold(Arc::clone(&gate)));
        Ok((
            Scanner {
                rx: Some(rx),
                gate,
                thread: Some(thread),
            },
            hold,
        ))
    }

    /// The next batch if one is there: `Ok(None)` if none yet,
    /// `Err(())` once the scan is done and everything was taken.
    pub(super) fn try_next(&self) -> std::result::Result<Option<Found>, ()> {
        match self.rx.as_ref().map(mpsc::Receiver::try_recv) {
            Some(Ok(f)) => Ok(Some(f)),
            Some(Err(mpsc::TryRecvError::Empty)) => Ok(None),
            Some(Err(mpsc::TryRecvError::Disconnected)) | None => Err(()),
        }
    }

    /// The next batch, waiting for it; `None` once the scan is done.
    pub(super) fn next(&self) -> Option<Found> {
        self.rx.as_ref()?.recv().ok()
    }

    /// Stops the scan and waits for its threads (each ends at its next
    /// read, or at its next send).
    pub(super) fn stop(&mut self) {
        self.gate.stop();
        self.rx = None;
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

impl Drop for Scanner {
    fn drop(&mut self) {
        self.stop();
    }
}

/// The scan's own thread: waits out a hold, reads the persisted index's
/// body `load` if there is one (and ends there if it was whole), then
/// reads with up to [`SCAN_THREADS`] threads (itself among them) until no
/// unit is left.
fn run(mut work: Work, load: Option<Load>, block_bytes: usize, gate: &Gate, tx: SyncSender<Found>) {
    gate.wait_released();
    if let Some(load) = load {
        let records = match &mut work {
            Work::Files { .. } => None,
            Work::Segments {
                geometry,
                maybe_live,
            } => Some(Records {
                count: geometry.records(),
                maybe_live,
            }),
        };
        let stopped = || gate.stop.load(Ordering::Relaxed);
        let mut send = |f| tx.send(f).is_ok();
        match load.run(records, &stopped, &mut send) {
            Loaded::Whole => {
                let _ = tx.send(Found::Loaded);
                return;
            }
            Loaded::Stopped => return,
            Loaded::Rejected(why) => {
                if tx.send(Found::Rejected(why)).is_err() {
                    return;
                }
            }
        }
    }
    let units = work.units();
    let next = AtomicUsize::new(0);
    let worker = |tx: SyncSender<Found>| {
        let mut scratch = Scratch::new();
        let mut report = RebuildReport::default();
        loop {
            if gate.stop.load(Ordering::Relaxed) {
                return;
            }
            let u = next.fetch_add(1, Ordering::Relaxed);
            if u >= units {
                break;
            }
            work.scan(u, block_bytes, &mut scratch, &mut report, gate, &tx);
        }
        if report != RebuildReport::default() {
            let _ = tx.send(Found::Counts(report));
        }
    };
    let threads = units.clamp(1, SCAN_THREADS);
    std::thread::scope(|s| {
        for _ in 1..threads {
            let tx = tx.clone();
            // A thread that cannot start leaves its share to the others.
            let _ = std::thread::Builder::new()
                .name("kvtier-fs-scan".into())
                .spawn_scoped(s, || worker(tx));
        }
        worker(tx);
    });
}

#[cfg(test)]
mod tests {
    use super::super::beneath;
    use super::*;

    fn work(dir: &std::path::Path) -> Work {
        std::fs::create_dir_all(dir.join("ab")).unwrap();
        Work::Files {
            root: beneath::open_root(&beneath::c_path(dir).unwrap()).unwrap(),
            fanouts: vec!["ab".into()],
            stale_temp_age: Duration::from_secs(3600),
        }
    }

    #[test]
    fn a_held_scan_sends_nothing_and_a_stop_ends_it_unreleased() {
        let d = tempfile::tempdir().unwrap();
        let (mut s, hold) = Scanner::start(work(d.path()), None, 4096, true).unwrap();
        assert!(matches!(s.try_next(), Ok(None)), "held: not done");
        s.stop();
        assert!(s.next().is_none(), "stopped: done");
        drop(hold);
    }

    #[test]
    fn a_released_scan_runs_to_its_end() {
        let d = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(d.path().join("ab")).unwrap();
        // A dead writer's temporary file: counted when the scan runs.
        std::fs::write(d.path().join("ab/.x.999999999.1.tmp"), b"x").unwrap();
        let (s, hold) = Scanner::start(work(d.path()), None, 4096, true).unwrap();
        hold.unwrap().release();
        let mut removed = 0;
        while let Some(found) = s.next() {
            if let Found::Counts(c) = found {
                removed += c.temp_removed;
            }
        }
        assert_eq!(removed, 1);
        assert!(matches!(s.try_next(), Err(())));
    }
}
