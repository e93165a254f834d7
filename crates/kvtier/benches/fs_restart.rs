//! Restarting a file-system tier with a cold page cache, next to what the
//! device reads in the same time.
//!
//! For each layout (a file per block; segment files; segment files with
//! key digests, `digests`), block size (4 KiB,
//! 64 KiB) and block count (10^4, 10^5; up to `KVTIER_BENCH_RESTART_MAX`,
//! e.g. 1000000, when set): fill a directory with that many blocks through
//! the tier and shut it down; then, each round, with the page cache of
//! those files dropped before each step (`fs_restart/cold.rs`):
//!
//! - clean restart: a fresh process opens the tier after a clean
//!   shutdown and measures, apart, the time until `FsTier::open` returns
//!   (the engine is blocked this long) and the time until the index is
//!   complete (`FsTier::wait_rebuilt` returned: the restart scan, or
//!   whatever else the tier does to rebuild its index, has ended), then
//!   exits without shutting down (a crash);
//! - crash restart: a fresh process opens that directory, measures the
//!   same, and shuts down cleanly (for the next round);
//! - in both, the heap the index holds per block once complete (and at
//!   its peak while opening), counted by this benchmark's allocator with
//!   the tier's event queue turned off and an empty tier's heap
//!   subtracted;
//! - references: one thread reads every file front to back (as `cat`
//!   does); 8 threads read one 4 KiB header per block (`O_DIRECT`).
//!
//! The directories live under `target/` (the disk, not tmpfs) unless
//! `--dir` names another; each is removed when its case is done.  A case
//! that would leave less than 15 GB free is skipped.  Medians of the
//! rounds; the largest count of each kind is extrapolated linearly to 10^8
//! blocks (the times until the index is complete and the references; the
//! time until `open` returns is given as measured).
//!
//!     cargo bench -p kvtier --bench fs_restart -- [--out FILE.json] [--dir DIR] [--counts N,N] [--blocks KIB,KIB] [--layouts files,segments,digests] [--rounds N]

use std::alloc::{GlobalAlloc, Layout, System};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use kvtier_core::Key;
use kvtier_core::region::SlotMemory;
use kvtier_core::request::RequestInfo;
use kvtier_core::tiering::{Direction, Job, JobId, SecondaryTier};
use kvtier_core::tiers::fs::format::file_len;
use kvtier_core::tiers::fs::{FsLayout, FsOptions, FsTier};

/// A tier's layout as this benchmark names it: the segments layout with
/// key digests (`FsOptions::key_digests`) is a third.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Kind {
    Files,
    Segments,
    /// Segments, keys kept as digests in the index.
    Digests,
}

impl Kind {
    fn layout(self) -> FsLayout {
        match self {
            Kind::Files => FsLayout::Files,
            Kind::Segments | Kind::Digests => FsLayout::Segments,
        }
    }
}

#[path = "fs_restart/cold.rs"]
mod cold;
#[path = "fs_restart/report.rs"]
mod report;

use report::{Case, TARGET_BLOCKS};

/// Threads of the header-read reference.
const HEADER_THREADS: usize = 8;
/// Free space a case must leave on the disk.
const KEEP_FREE: u64 = 15_000_000_000;
/// Blocks per store job while filling, and jobs in flight.
const FILL_JOB: usize = 128;
const FILL_IN_FLIGHT: usize = 16;
/// Files whose pages `mincore` checks after each drop.
const CACHE_SAMPLE: usize = 64;

// ---- heap accounting ----------------------------------------------------

/// The system allocator, counting the bytes live and their peak, so a
/// child process can tell what the opened tier holds.
struct Counting;

static LIVE: AtomicUsize = AtomicUsize::new(0);
static PEAK: AtomicUsize = AtomicUsize::new(0);

// SAFETY: every call goes to the system allocator unchanged.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, l: Layout) -> *mut u8 {
        // SAFETY: as the caller promised.
        let p = unsafe { System.alloc(l) };
        if !p.is_null() {
            let now = LIVE.fetch_add(l.size(), Ordering::Relaxed) + l.size();
            PEAK.fetch_max(now, Ordering::Relaxed);
        }
        p
    }
    unsafe fn dealloc(&self, p: *mut u8, l: Layout) {
        // SAFETY: as the caller promised.
        unsafe { System.dealloc(p, l) };
        LIVE.fetch_sub(l.size(), Ordering::Relaxed);
    }
    unsafe fn realloc(&self, p: *mut u8, l: Layout, new: usize) -> *mut u8 {
        // SAFETY: as the caller promised.
        let q = unsafe { System.realloc(p, l, new) };
        if !q.is_null() {
            LIVE.fetch_sub(l.size(), Ordering::Relaxed);
            let now = LIVE.fetch_add(new, Ordering::Relaxed) + new;
            PEAK.fetch_max(now, Ordering::Relaxed);
        }
        q
    }
}

#[global_allocator]
static ALLOC: Counting = Counting;

// ---- arguments ----------------------------------------------------------

struct Args {
    out: Option<PathBuf>,
    dir: PathBuf,
    counts: Vec<u64>,
    blocks: Vec<usize>,
    layouts: Vec<Kind>,
    rounds: usize,
}

/// 10^4 and 10^5, then each power of ten up to `KVTIER_BENCH_RESTART_MAX`.
fn default_counts() -> Vec<u64> {
    let max = std::env::var("KVTIER_BENCH_RESTART_MAX")
        .ok()
        .map(|v| {
            v.parse::<u64>()
                .expect("KVTIER_BENCH_RESTART_MAX: a block count")
        })
        .unwrap_or(100_000);
    let mut counts = vec![10_000];
    while counts.last().unwrap() * 10 <= max.max(100_000) {
        counts.push(counts.last().unwrap() * 10);
    }
    counts
}

fn parse() -> Args {
    let mut a = Args {
        out: None,
        dir: PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/../../target")),
        counts: default_counts(),
        blocks: vec![4 << 10, 64 << 10],
        layouts: vec![Kind::Files, Kind::Segments, Kind::Digests],
        rounds: 2,
    };
    let mut it = std::env::args().skip(1);
    while let Some(arg) = it.next() {
        let mut list = |what: &str| -> Vec<String> {
            let v = it.next().unwrap_or_else(|| panic!("{arg} {what}"));
            v.split(',').map(str::to_string).collect()
        };
        match arg.as_str() {
            "--out" => a.out = Some(PathBuf::from(&list("FILE")[0])),
            "--dir" => a.dir = PathBuf::from(&list("DIR")[0]),
            "--counts" => {
                a.counts = list("N,N")
                    .iter()
                    .map(|n| n.parse().expect("a count"))
                    .collect()
            }
            "--blocks" => {
                a.blocks = list("KIB,KIB")
                    .iter()
                    .map(|k| k.parse::<usize>().expect("a block size in KiB") << 10)
                    .collect()
            }
            "--layouts" => {
                a.layouts = list("files,segments,digests")
                    .iter()
                    .map(|l| layout_of(l))
                    .collect()
            }
            "--rounds" => a.rounds = list("N")[0].parse().expect("a round count"),
            // Flags cargo passes to every bench target.
            "--bench" => {}
            other => panic!("unknown argument {other}"),
        }
    }
    a
}

fn layout_of(name: &str) -> Kind {
    match name {
        "files" => Kind::Files,
        "segments" => Kind::Segments,
        "digests" => Kind::Digests,
        other => panic!("unknown layout {other}"),
    }
}

fn layout_name(l: Kind) -> &'static str {
    match l {
        Kind::Files => "files",
        Kind::Segments => "segments",
        Kind::Digests => "digests",
    }
}

// ---- the tier -----------------------------------------------------------

/// A 32-byte key (the size of a block hash), distinct per `i`.
fn key(i: u64) -> Key {
    let mut b = [0u8; 32];
    for (k, c) in b.chunks_mut(8).enumerate() {
        let v = i.wrapping_add(k as u64).wrapping_mul(0x9e37_79b9_7f4a_7c15) ^ i;
        c.copy_from_slice(&v.to_le_bytes());
    }
    Key::new(&b).unwrap()
}

/// The options of every open of one case: the segments sized for exactly
/// `blocks` blocks (nothing evicted).
fn options(dir: &Path, kind: Kind, block: usize, blocks: u64) -> FsOptions {
    let mut o = FsOptions::new(dir);
    o.layout = kind.layout();
    o.key_digests = kind == Kind::Digests;
    if o.layout == FsLayout::Segments {
        o.capacity_bytes = blocks * file_len(block);
        o.high_watermark = 1.0;
        o.low_watermark = 1.0;
    }
    o
}

/// Stores `blocks` blocks through the tier and shuts it down cleanly.
fn fill(dir: &Path, layout: Kind, block: usize, blocks: u64) -> Duration {
    let mem = SlotMemory::anonymous(FILL_JOB as u32, block).unwrap();
    for s in 0..FILL_JOB as u32 {
        mem.write(s, 0, &vec![s as u8 ^ 0x5a; block]).unwrap();
    }
    let start = Instant::now();
    let mut tier = FsTier::open(mem, options(dir, layout, block, blocks)).unwrap();
    let request = Arc::new(RequestInfo::default());
    let (mut next, mut in_flight, mut id) = (0u64, 0usize, 0u64);
    let mut out = Vec::new();
    while next < blocks || in_flight > 0 {
        while next < blocks && in_flight < FILL_IN_FLIGHT {
            let n = (blocks - next).min(FILL_JOB as u64);
            tier.submit_store(Arc::new(Job {
                id: JobId(id),
                direction: Direction::Store,
                keys: (next..next + n).map(key).collect(),
                slots: (0..n as u32).collect(),
                request: request.clone(),
            }));
            (next, in_flight, id) = (next + n, in_flight + 1, id + 1);
        }
        out.clear();
        tier.poll_finished(usize::MAX, &mut out);
        assert!(out.iter().all(|r| r.success), "a store failed");
        in_flight -= out.len();
        if out.is_empty() {
            std::thread::sleep(Duration::from_millis(1));
        }
    }
    assert_eq!(tier.block_count() as u64, blocks, "every block stored");
    tier.shutdown().unwrap();
    drop(tier);
    start.elapsed()
}

/// What a child process measured in one open.
struct Opened {
    open_s: f64,
    rebuilt_s: f64,
    heap_per_block: f64,
    peak_per_block: f64,
    base_bytes: f64,
}

/// Heap an open tier with no block holds (its workers, queues and empty
/// tables), the index's fixed part: measured on an empty directory beside
/// `dir` with the case's layout and block size, once to warm up whatever
/// the first open allocates for good and once counted.
fn empty_tier_heap(dir: &Path, layout: Kind, block: usize) -> usize {
    let empty = dir.with_extension("empty");
    let mut base = 0;
    for _ in 0..2 {
        let _ = std::fs::remove_dir_all(&empty);
        let mem = SlotMemory::anonymous(16, block).unwrap();
        let before = LIVE.load(Ordering::Relaxed);
        let mut tier = FsTier::open(mem, options(&empty, layout, block, 1)).unwrap();
        tier.set_event_capacity(0);
        tier.wait_rebuilt();
        base = LIVE.load(Ordering::Relaxed).saturating_sub(before);
        tier.shutdown().unwrap();
        drop(tier);
    }
    std::fs::remove_dir_all(&empty).expect("removing the empty tier's directory");
    base
}

/// The child process: opens the tier, waits for its restart scan to end
/// (`FsTier::wait_rebuilt`), prints what it measured, then shuts it down
/// (`clean`) or exits without (`crash`).
///
/// The heap figures are the index's: the tier's event queue is turned off
/// as soon as `open` returns (so the "stored" events announcing each block
/// found take no room), and the heap of an empty tier of the same layout
/// ([`empty_tier_heap`]) is subtracted.
fn child(args: &[String]) {
    let [dir, layout, block, blocks, exit] = args else {
        panic!("--child DIR LAYOUT BLOCK BLOCKS clean|crash");
    };
    let (block, blocks): (usize, u64) = (block.parse().unwrap(), blocks.parse().unwrap());
    let (dir, layout) = (Path::new(dir), layout_of(layout));
    let base = empty_tier_heap(dir, layout, block);
    let mem = SlotMemory::anonymous(16, block).unwrap();
    let opts = options(dir, layout, block, blocks);
    let before = LIVE.load(Ordering::Relaxed);
    PEAK.store(before, Ordering::Relaxed);
    let start = Instant::now();
    let mut tier = FsTier::open(mem, opts).unwrap();
    let open_s = start.elapsed().as_secs_f64();
    tier.set_event_capacity(0);
    let report = tier.wait_rebuilt();
    let rebuilt_s = start.elapsed().as_secs_f64();
    assert!(!tier.rebuilding(), "the scan ended");
    assert_eq!(
        tier.block_count() as u64,
        blocks,
        "the restart found every block ({report:?})"
    );
    let live = LIVE.load(Ordering::Relaxed).saturating_sub(before + base);
    let peak = PEAK.load(Ordering::Relaxed).saturating_sub(before + base);
    let per = |b: usize| b as f64 / blocks as f64;
    let mut stdout = std::io::stdout().lock();
    writeln!(
        stdout,
        "{open_s} {rebuilt_s} {} {} {base}",
        per(live),
        per(peak)
    )
    .unwrap();
    stdout.flush().unwrap();
    match exit.as_str() {
        // SAFETY: ends the process at once: no destructor, no shutdown.
        "crash" => unsafe { libc::_exit(0) },
        _ => tier.shutdown().unwrap(),
    }
}

/// Opens the tier in a fresh process (see [`child`]).
fn open_in_child(dir: &Path, layout: Kind, block: usize, blocks: u64, crash: bool) -> Opened {
    let out = Command::new(std::env::current_exe().expect("this benchmark's path"))
        .arg("--child")
        .arg(dir)
        .args([
            layout_name(layout).to_string(),
            block.to_string(),
            blocks.to_string(),
            if crash { "crash" } else { "clean" }.to_string(),
        ])
        .stderr(Stdio::inherit())
        .output()
        .expect("starting the opening process");
    assert!(
        out.status.success(),
        "the opening process failed: {}",
        out.status
    );
    let text = String::from_utf8(out.stdout).expect("the opening process's figures");
    let v: Vec<f64> = text
        .split_whitespace()
        .map(|x| x.parse().expect("a figure"))
        .collect();
    let [open_s, rebuilt_s, heap, peak, base] = v[..] else {
        panic!("the opening process printed {text:?}");
    };
    Opened {
        open_s,
        rebuilt_s,
        heap_per_block: heap,
        peak_per_block: peak,
        base_bytes: base,
    }
}

// ---- one case -----------------------------------------------------------

/// The files' pages dropped from the cache; the `mincore` check added to `c`.
fn cold(dir: &Path, c: &mut Case) -> Vec<PathBuf> {
    let files = cold::list_files(dir);
    let failed = cold::drop_cache(&files);
    assert_eq!(failed, 0, "could not drop the cache of {failed} files");
    let (cached, sampled) = cold::cached_pages(&files, CACHE_SAMPLE);
    c.cached_pages += cached;
    c.sampled_pages += sampled;
    files
}

/// Where each block's header is, in this layout.
fn headers(files: &[PathBuf], layout: Kind, block: usize) -> cold::Headers {
    let ext = |p: &Path, e: &str| p.extension().is_some_and(|x| x == e);
    let named = |e: &str| {
        files
            .iter()
            .filter(|p| ext(p, e))
            .cloned()
            .collect::<Vec<_>>()
    };
    match layout {
        Kind::Files => cold::Headers::Files(named("kvb")),
        Kind::Segments | Kind::Digests => {
            let record = file_len(block);
            let segs = named("kvs");
            let at = segs
                .iter()
                .enumerate()
                .flat_map(|(f, p)| {
                    let len = std::fs::metadata(p).expect("a segment file's size").len();
                    (0..len / record).map(move |r| (f, r * record))
                })
                .collect();
            cold::Headers::Records { files: segs, at }
        }
    }
}

fn run_case(root: &Path, layout: Kind, block: usize, blocks: u64, rounds: usize) -> Case {
    let dir = root.join(format!("{}-{}k-{blocks}", layout_name(layout), block >> 10));
    let _ = std::fs::remove_dir_all(&dir);
    let mut c = Case {
        layout: layout_name(layout).to_string(),
        block_bytes: block as u64,
        blocks,
        header_threads: HEADER_THREADS,
        fill_s: fill(&dir, layout, block, blocks).as_secs_f64(),
        ..Case::default()
    };
    let (mut heap, mut peak, mut base) = (Vec::new(), Vec::new(), Vec::new());
    for _ in 0..rounds {
        // The directory as a clean shutdown left it; the child exits
        // without one, so the next open is a crash restart.
        cold(&dir, &mut c);
        let o = open_in_child(&dir, layout, block, blocks, true);
        c.clean_open_s.push(o.open_s);
        c.clean_rebuilt_s.push(o.rebuilt_s);
        heap.push(o.heap_per_block);
        peak.push(o.peak_per_block);
        base.push(o.base_bytes);
        cold(&dir, &mut c);
        let o = open_in_child(&dir, layout, block, blocks, false);
        c.crash_open_s.push(o.open_s);
        c.crash_rebuilt_s.push(o.rebuilt_s);
        heap.push(o.heap_per_block);
        peak.push(o.peak_per_block);
        base.push(o.base_bytes);
        let files = cold(&dir, &mut c);
        let (bytes, d) = cold::sequential_read(&files);
        c.seq_read_s.push(d.as_secs_f64());
        c.seq_read_bytes = bytes;
        // Every file, read whole.
        c.bytes_on_disk = bytes;
        let h = headers(&files, layout, block);
        assert_eq!(h.len() as u64, blocks, "a header per block");
        cold(&dir, &mut c);
        c.header_read_s
            .push(cold::header_reads(&h, HEADER_THREADS).as_secs_f64());
    }
    c.index_bytes_per_block = Some(report::median(&heap));
    c.index_peak_bytes_per_block = peak.iter().copied().reduce(f64::max);
    c.empty_tier_bytes = Some(report::median(&base));
    std::fs::remove_dir_all(&dir).expect("removing the case's directory");
    c
}

fn main() {
    let argv: Vec<String> = std::env::args().skip(1).collect();
    if argv.first().map(String::as_str) == Some("--child") {
        child(&argv[1..]);
        return;
    }
    let args = parse();
    let started = Instant::now();
    let root = args.dir.join("kvtier-fs-restart");
    std::fs::create_dir_all(&root).expect("the benchmark's directory");
    let root = root.canonicalize().expect("the benchmark's directory");
    println!(
        "fs tier restart under {}, cold page cache, median of {} rounds; times until open returned / every block indexed",
        root.display(),
        args.rounds
    );
    println!("{}", report::case_header());
    let mut cases = Vec::new();
    for &layout in &args.layouts {
        for &block in &args.blocks {
            for &blocks in &args.counts {
                let need = blocks * file_len(block);
                let free = cold::free_bytes(&root);
                if free < need + KEEP_FREE {
                    println!(
                        "{} {}K {blocks}: skipped, needs {:.1} GB with {:.1} GB free",
                        layout_name(layout),
                        block >> 10,
                        need as f64 / 1e9,
                        free as f64 / 1e9
                    );
                    continue;
                }
                let c = run_case(&root, layout, block, blocks, args.rounds);
                println!("{}", report::case_line(&c));
                cases.push(c);
            }
        }
    }
    let _ = std::fs::remove_dir(&root);
    let (cached, sampled): (u64, u64) = cases.iter().fold((0, 0), |(a, b), c| {
        (a + c.cached_pages, b + c.sampled_pages)
    });
    println!(
        "page cache after each drop: {cached} of {sampled} sampled pages still cached{}",
        if cached > 0 {
            " (the cache was NOT fully dropped)"
        } else {
            ""
        }
    );
    for line in report::extrapolation_lines(&cases, TARGET_BLOCKS) {
        println!("{line}");
    }
    println!("(wall {:.1} s)", started.elapsed().as_secs_f64());
    if let Some(out) = &args.out {
        let v = report::result_json(&root.display().to_string(), args.rounds, &cases);
        std::fs::write(out, format!("{v}\n")).expect("writing --out");
    }
}
