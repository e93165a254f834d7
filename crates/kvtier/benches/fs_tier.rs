//! File-system tier throughput next to a plain baseline, in the same run.
//!
//! For each file system (tmpfs under /dev/shm, and the disk under target/)
//! and each block size (16 KiB, 256 KiB, 2 MiB): store 1 GiB from a region
//! through the tier, in each of its layouts (a file per block; segment
//! files), in jobs of 16 blocks submitted at once, and load it back, and do
//! the same bytes with plain `pwrite`/`pread` from the same number of
//! threads with the same open flags (`O_DIRECT` where the tier uses it):
//! the baseline writes one file per thread (no metadata work at all); a
//! second reference writes one file per block in one directory.  Each
//! figure is the best of several rounds, the order rotating.
//!
//!     cargo bench --bench fs_tier -- [--out FILE.json] [--gib N] [--threads R,W] [--dirs A,B] [--blocks KIB,KIB] [--layouts files,segments] [--rounds N]

use std::ffi::CString;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use kvtier_core::Key;
use kvtier_core::region::SlotMemory;
use kvtier_core::request::RequestInfo;
use kvtier_core::tiering::{Direction, Job, JobId, SecondaryTier};
use kvtier_core::tiers::fs::format::file_len;
use kvtier_core::tiers::fs::{FsLayout, FsOptions, FsTier};

const JOB_BLOCKS: usize = 16;
/// Rounds per configuration on tmpfs and on disk; each figure is the best
/// round (the machine may be shared: the best round is the least disturbed).
const ROUNDS_MEMORY: u64 = 4;
const ROUNDS_DISK: u64 = 2;

struct Args {
    out: Option<PathBuf>,
    bytes: usize,
    read_threads: usize,
    write_threads: usize,
    dirs: Vec<PathBuf>,
    blocks: Vec<usize>,
    layouts: Vec<FsLayout>,
    /// Rounds per configuration, if not the defaults.
    rounds: Option<u64>,
}

fn parse() -> Args {
    let mut a = Args {
        out: None,
        bytes: 1 << 30,
        read_threads: 2,
        write_threads: 2,
        dirs: vec![
            PathBuf::from("/dev/shm"),
            PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/../../target")),
        ],
        blocks: vec![16 << 10, 256 << 10, 2 << 20],
        layouts: vec![FsLayout::Files, FsLayout::Segments],
        rounds: None,
    };
    let mut it = std::env::args().skip(1);
    while let Some(arg) = it.next() {
        match arg.as_str() {
            "--out" => a.out = it.next().map(PathBuf::from),
            "--gib" => {
                let g: f64 = it.next().and_then(|v| v.parse().ok()).expect("--gib N");
                a.bytes = (g * (1u64 << 30) as f64) as usize;
            }
            "--threads" => {
                let v = it.next().expect("--threads R,W");
                let (r, w) = v.split_once(',').expect("--threads R,W");
                a.read_threads = r.parse().expect("read threads");
                a.write_threads = w.parse().expect("write threads");
            }
            "--dirs" => {
                a.dirs = it
                    .next()
                    .expect("--dirs A,B")
                    .split(',')
                    .map(PathBuf::from)
                    .collect();
            }
            "--blocks" => {
                a.blocks = it
                    .next()
                    .expect("--blocks KIB,KIB")
                    .split(',')
                    .map(|k| k.parse::<usize>().expect("block size in KiB") << 10)
                    .collect();
            }
            "--rounds" => a.rounds = it.next().and_then(|v| v.parse().ok()),
            "--layouts" => {
                a.layouts = it
                    .next()
                    .expect("--layouts files,segments")
                    .split(',')
                    .map(|l| match l {
                        "files" => FsLayout::Files,
                        "segments" => FsLayout::Segments,
                        other => panic!("unknown layout {other}"),
                    })
                    .collect();
            }
            // Flags cargo passes to every bench target.
            "--bench" => {}
            other => panic!("unknown argument {other}"),
        }
    }
    a
}

fn key(i: usize) -> Key {
    Key::new(&(i as u64).to_le_bytes()).unwrap()
}

fn gbps(bytes: usize, d: Duration) -> f64 {
    bytes as f64 / d.as_secs_f64() / 1e9
}

/// How the plain baseline lays the bytes out.
#[derive(Clone, Copy, PartialEq)]
enum Plain {
    /// One file per thread, blocks at consecutive offsets: no file-system
    /// metadata work at all (the strict baseline).
    FilePerThread,
    /// One file per block in one directory, like the tier (open, copy, close).
    FilePerBlock,
}

/// Plain `pwrite`/`pread` copies of every slot from `threads` threads.
fn baseline(
    mem: &SlotMemory,
    dir: &Path,
    threads: usize,
    direct: bool,
    store: bool,
    plain: Plain,
) -> Duration {
    let n = mem.slot_count() as usize;
    let len = mem.slot_bytes();
    let next = AtomicUsize::new(0);
    let mut flags = libc::O_CLOEXEC;
    if direct {
        flags |= libc::O_DIRECT;
    }
    flags |= if store {
        libc::O_WRONLY | libc::O_CREAT
    } else {
        libc::O_RDONLY
    };
    let open = |name: String| {
        let p = CString::new(dir.join(name).as_os_str().as_bytes()).unwrap();
        // SAFETY: NUL-terminated path.
        let fd = unsafe { libc::open(p.as_ptr(), flags, 0o644 as libc::c_uint) };
        assert!(fd >= 0, "open: {}", std::io::Error::last_os_error());
        fd
    };
    let copy = |fd: i32, i: usize, off: usize| {
        let ptr = mem.slot_ptr(i as u32).unwrap().as_ptr();
        // SAFETY: the slot is ours for the duration of the copy.
        let r = unsafe {
            if store {
                libc::pwrite(fd, ptr.cast(), len, off as libc::off_t)
            } else {
                libc::pread(fd, ptr.cast(), len, off as libc::off_t)
            }
        };
        assert_eq!(r as usize, len, "{}", std::io::Error::last_os_error());
    };
    let start = Instant::now();
    std::thread::scope(|s| {
        for t in 0..threads {
            let (next, open, copy) = (&next, &open, &copy);
            s.spawn(move || match plain {
                Plain::FilePerThread => {
                    let fd = open(format!("thread-{t}.blk"));
                    for (k, i) in (t..n).step_by(threads).enumerate() {
                        copy(fd, i, k * len);
                    }
                    // SAFETY: our descriptor.
                    unsafe { libc::close(fd) };
                }
                Plain::FilePerBlock => loop {
                    let i = next.fetch_add(1, Ordering::Relaxed);
                    if i >= n {
                        break;
                    }
                    let fd = open(format!("{i}.blk"));
                    copy(fd, i, 0);
                    // SAFETY: our descriptor.
                    unsafe { libc::close(fd) };
                },
            });
        }
    });
    start.elapsed()
}

/// The same copies through the tier, in jobs of [`JOB_BLOCKS`] submitted at once.
fn through_tier(tier: &mut FsTier, mem: &SlotMemory, store: bool, first_id: u64) -> Duration {
    let n = mem.slot_count() as usize;
    let request = Arc::new(RequestInfo::default());
    let start = Instant::now();
    let mut jobs = 0;
    for (j, chunk) in (0..n).collect::<Vec<_>>().chunks(JOB_BLOCKS).enumerate() {
        tier_submit(
            tier,
            store,
            Job {
                id: JobId(first_id + j as u64),
                direction: if store {
                    Direction::Store
                } else {
                    Direction::Load
                },
                keys: chunk.iter().map(|&i| key(i)).collect(),
                slots: chunk.iter().map(|&i| i as u32).collect(),
                request: request.clone(),
            },
        );
        jobs += 1;
    }
    let mut out = Vec::new();
    while out.len() < jobs {
        tier.poll_finished(usize::MAX, &mut out);
        // An engine polls once per scheduler step; 1 ms keeps the polling
        // thread off the cores the transfers use.
        std::thread::sleep(Duration::from_millis(1));
    }
    let d = start.elapsed();
    assert!(out.iter().all(|r| r.success), "a job failed");
    d
}

fn tier_submit(tier: &mut FsTier, store: bool, job: Job) {
    if store {
        tier.submit_store(Arc::new(job));
    } else {
        tier.submit_load(Arc::new(job));
    }
}

/// Best GB/s of one contender: store, load.
#[derive(Clone, Copy, Default)]
struct Figures {
    store: f64,
    load: f64,
    /// Least CPU time (all threads, user + system) per GiB, in seconds.
    store_cpu: f64,
    load_cpu: f64,
}

/// CPU time of the whole process so far (user + system), in seconds.
fn cpu_seconds() -> f64 {
    // SAFETY: getrusage fills the struct.
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut ru) };
    let t = |tv: libc::timeval| tv.tv_sec as f64 + tv.tv_usec as f64 / 1e6;
    t(ru.ru_utime) + t(ru.ru_stime)
}

struct Row {
    fs: String,
    block: usize,
    layout: FsLayout,
    direct: bool,
    per_thread: Figures,
    per_block: Figures,
    tier: Figures,
    /// Median over rounds of tier / strict baseline, each pair measured back
    /// to back (steadier than a ratio of bests on a busy machine).
    store_ratio: f64,
    load_ratio: f64,
}

fn median(v: &mut [f64]) -> f64 {
    v.sort_by(f64::total_cmp);
    let n = v.len();
    if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    }
}

fn layout_name(l: FsLayout) -> &'static str {
    match l {
        FsLayout::Files => "files",
        FsLayout::Segments => "segments",
    }
}

/// One round trip of every contender for `block`-byte blocks under
/// `parent`: a row per tier layout, each beside the same baselines.
fn run(args: &Args, parent: &Path, block: usize) -> Vec<Row> {
    let slots = (args.bytes / block) as u32;
    let total = slots as usize * block;
    let mem = SlotMemory::anonymous(slots, block).unwrap();
    for s in 0..slots {
        let v = (s as u64).wrapping_mul(0x9e37_79b9_7f4a_7c15);
        let mut buf = vec![0u8; block];
        for (k, c) in buf.chunks_mut(8).enumerate() {
            c.copy_from_slice(&(v ^ k as u64).to_le_bytes());
        }
        mem.write(s, 0, &buf).unwrap();
    }
    let threads = args.read_threads + args.write_threads;
    let root = tempfile::Builder::new()
        .prefix("kvtier-fs-bench-")
        .tempdir_in(parent)
        .expect("bench directory");
    let layouts = &args.layouts;
    // 0: file per thread, 1: file per block, 2..: the tier in each layout.
    let contenders = 2 + layouts.len();
    let mut best = vec![Figures::default(); contenders];
    // Each layout over the strict baseline, measured back to back in each round.
    let mut store_ratios = vec![Vec::new(); layouts.len()];
    let mut load_ratios = vec![Vec::new(); layouts.len()];
    let mut direct = vec![false; layouts.len()];
    let rounds = args.rounds.unwrap_or(if parent.starts_with("/dev/shm") {
        ROUNDS_MEMORY
    } else {
        ROUNDS_DISK
    });
    for round in 0..rounds {
        let base_dir = root.path().join("base");
        std::fs::create_dir_all(&base_dir).unwrap();
        let mut tiers: Vec<(FsTier, PathBuf)> = layouts
            .iter()
            .map(|&layout| {
                let tier_dir = root.path().join(layout_name(layout));
                let mut o = FsOptions::new(&tier_dir);
                o.layout = layout;
                o.read_threads = args.read_threads;
                o.write_threads = args.write_threads;
                if layout == FsLayout::Segments {
                    // Room for every block: no eviction during the run.
                    o.capacity_bytes = slots as u64 * file_len(block);
                    o.high_watermark = 1.0;
                    o.low_watermark = 1.0;
                }
                (FsTier::open(mem.clone(), o).unwrap(), tier_dir)
            })
            .collect();
        for (l, (tier, _)) in tiers.iter().enumerate() {
            direct[l] = tier.direct_io();
        }
        // The baselines use O_DIRECT where the first tier does.
        let base_direct = direct[0];
        for store in [true, false] {
            // Rotate which goes first, so none always meets a warmer or
            // busier machine.
            let mut this_round = vec![0f64; contenders];
            for k in 0..contenders {
                let who = (round as usize + k) % contenders;
                let cpu0 = cpu_seconds();
                let d = match who {
                    0 => baseline(
                        &mem,
                        &base_dir,
                        threads,
                        base_direct,
                        store,
                        Plain::FilePerThread,
                    ),
                    1 => baseline(
                        &mem,
                        &base_dir,
                        threads,
                        base_direct,
                        store,
                        Plain::FilePerBlock,
                    ),
                    t => {
                        let id = round * 1_000_000 + if store { 0 } else { 500_000 };
                        through_tier(&mut tiers[t - 2].0, &mem, store, id)
                    }
                };
                let cpu = (cpu_seconds() - cpu0) / (total as f64 / (1u64 << 30) as f64);
                let f = &mut best[who];
                let g = gbps(total, d);
                this_round[who] = g;
                let least = |old: f64| if old == 0.0 { cpu } else { old.min(cpu) };
                if store {
                    f.store = f.store.max(g);
                    f.store_cpu = least(f.store_cpu);
                } else {
                    f.load = f.load.max(g);
                    f.load_cpu = least(f.load_cpu);
                }
            }
            for l in 0..layouts.len() {
                let ratio = this_round[2 + l] / this_round[0];
                if store {
                    store_ratios[l].push(ratio);
                } else {
                    load_ratios[l].push(ratio);
                }
            }
        }
        for (mut tier, dir) in tiers {
            tier.shutdown().unwrap();
            drop(tier);
            std::fs::remove_dir_all(&dir).unwrap();
        }
        std::fs::remove_dir_all(&base_dir).unwrap();
    }
    layouts
        .iter()
        .enumerate()
        .map(|(l, &layout)| Row {
            fs: parent.display().to_string(),
            block,
            layout,
            direct: direct[l],
            per_thread: best[0],
            per_block: best[1],
            tier: best[2 + l],
            store_ratio: median(&mut store_ratios[l]),
            load_ratio: median(&mut load_ratios[l]),
        })
        .collect()
}

fn main() {
    let args = parse();
    let started = Instant::now();
    let mut rows = Vec::new();
    let rounds = match args.rounds {
        Some(n) => format!("best of {n} rounds"),
        None => format!("best of {ROUNDS_MEMORY} rounds on /dev/shm, {ROUNDS_DISK} elsewhere"),
    };
    println!(
        "fs tier vs plain pwrite/pread: {:.2} GiB per run, tier {}+{} threads, baselines {} threads, {rounds}",
        args.bytes as f64 / (1u64 << 30) as f64,
        args.read_threads,
        args.write_threads,
        args.read_threads + args.write_threads
    );
    println!(
        "best GB/s; thr = plain, one file per thread (the baseline); blk = plain, one file per block"
    );
    println!("ratio = median over rounds of tier / baseline, each pair run back to back");
    println!(
        "{:<22} {:>6} {:>8} {:>6} | {:>7} {:>7} {:>7} {:>5} | {:>7} {:>7} {:>7} {:>5}",
        "file system",
        "block",
        "layout",
        "direct",
        "st thr",
        "st blk",
        "st tier",
        "ratio",
        "ld thr",
        "ld blk",
        "ld tier",
        "ratio"
    );
    for dir in &args.dirs {
        for &block in &args.blocks {
            for r in run(&args, dir, block) {
                println!(
                    "{:<22} {:>5}K {:>8} {:>6} | {:>7.2} {:>7.2} {:>7.2} {:>4.0}% | {:>7.2} {:>7.2} {:>7.2} {:>4.0}%",
                    r.fs,
                    r.block >> 10,
                    layout_name(r.layout),
                    r.direct,
                    r.per_thread.store,
                    r.per_block.store,
                    r.tier.store,
                    100.0 * r.store_ratio,
                    r.per_thread.load,
                    r.per_block.load,
                    r.tier.load,
                    100.0 * r.load_ratio
                );
                rows.push(r);
            }
        }
    }
    println!("CPU seconds per GiB (all threads, least of the rounds):");
    println!(
        "{:<22} {:>6} {:>8} | {:>7} {:>7} {:>7} | {:>7} {:>7} {:>7}",
        "file system",
        "block",
        "layout",
        "st thr",
        "st blk",
        "st tier",
        "ld thr",
        "ld blk",
        "ld tier"
    );
    for r in &rows {
        println!(
            "{:<22} {:>5}K {:>8} | {:>7.3} {:>7.3} {:>7.3} | {:>7.3} {:>7.3} {:>7.3}",
            r.fs,
            r.block >> 10,
            layout_name(r.layout),
            r.per_thread.store_cpu,
            r.per_block.store_cpu,
            r.tier.store_cpu,
            r.per_thread.load_cpu,
            r.per_block.load_cpu,
            r.tier.load_cpu
        );
    }
    println!("(wall {:.1} s)", started.elapsed().as_secs_f64());
    if let Some(out) = &args.out {
        let runs: Vec<String> = rows
            .iter()
            .map(|r| {
                format!(
                    concat!(
                        "{{\"fs\":\"{}\",\"block_bytes\":{},\"layout\":\"{}\",\"direct_io\":{},",
                        "\"plain_file_per_thread_store_gbps\":{:.3},\"plain_file_per_block_store_gbps\":{:.3},",
                        "\"tier_store_gbps\":{:.3},\"store_ratio\":{:.3},",
                        "\"plain_file_per_thread_load_gbps\":{:.3},\"plain_file_per_block_load_gbps\":{:.3},",
                        "\"tier_load_gbps\":{:.3},\"load_ratio\":{:.3},",
                        "\"cpu_s_per_gib\":{{\"store\":[{:.4},{:.4},{:.4}],\"load\":[{:.4},{:.4},{:.4}]}}}}"
                    ),
                    r.fs,
                    r.block,
                    layout_name(r.layout),
                    r.direct,
                    r.per_thread.store,
                    r.per_block.store,
                    r.tier.store,
                    r.store_ratio,
                    r.per_thread.load,
                    r.per_block.load,
                    r.tier.load,
                    r.load_ratio,
                    r.per_thread.store_cpu,
                    r.per_block.store_cpu,
                    r.tier.store_cpu,
                    r.per_thread.load_cpu,
                    r.per_block.load_cpu,
                    r.tier.load_cpu
                )
            })
            .collect();
        let json = format!(
            "{{\"bench\":\"fs_tier\",\"bytes_per_run\":{},\"read_threads\":{},\"write_threads\":{},\"rounds_memory\":{ROUNDS_MEMORY},\"rounds_disk\":{ROUNDS_DISK},\"runs\":[{}]}}\n",
            args.bytes,
            args.read_threads,
            args.write_threads,
            runs.join(",")
        );
        std::fs::write(out, json).expect("writing --out");
    }
}
