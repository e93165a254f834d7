//! File-system tier throughput next to a plain baseline, in the same run.
//!
//! For each file system (tmpfs under /dev/shm, and the disk under target/)
//! and each block size (256 KiB, 2 MiB): store 1 GiB from a region through
//! the tier (jobs of 16 blocks, submitted at once) and load it back, and do
//! the same bytes with plain `pwrite`/`pread`, one file per block, from the
//! same number of threads with the same open flags (`O_DIRECT` where the
//! tier uses it).  Each figure is the best of three rounds, baseline and tier
//! alternating.
//!
//!     cargo bench --bench fs_tier -- [--out FILE.json] [--gib N] [--threads R,W] [--dirs A,B]

use std::ffi::CString;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use kvtier::Key;
use kvtier::region::SlotMemory;
use kvtier::request::RequestInfo;
use kvtier::tiering::{Direction, Job, JobId, SecondaryTier};
use kvtier::tiers::fs::{FsOptions, FsTier};

const JOB_BLOCKS: usize = 16;

struct Args {
    out: Option<PathBuf>,
    bytes: usize,
    read_threads: usize,
    write_threads: usize,
    dirs: Vec<PathBuf>,
}

fn parse() -> Args {
    let mut a = Args {
        out: None,
        bytes: 1 << 30,
        read_threads: 2,
        write_threads: 2,
        dirs: vec![
            PathBuf::from("/dev/shm"),
            PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("target"),
        ],
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

/// Plain one-file-per-block copies from `threads` threads.
fn baseline(mem: &SlotMemory, dir: &Path, threads: usize, direct: bool, store: bool) -> Duration {
    let n = mem.slot_count() as usize;
    let len = mem.slot_bytes();
    let next = AtomicUsize::new(0);
    let start = Instant::now();
    std::thread::scope(|s| {
        for _ in 0..threads {
            s.spawn(|| {
                loop {
                    let i = next.fetch_add(1, Ordering::Relaxed);
                    if i >= n {
                        break;
                    }
                    let p =
                        CString::new(dir.join(format!("{i}.blk")).as_os_str().as_bytes()).unwrap();
                    let mut flags = libc::O_CLOEXEC;
                    if direct {
                        flags |= libc::O_DIRECT;
                    }
                    flags |= if store {
                        libc::O_WRONLY | libc::O_CREAT | libc::O_TRUNC
                    } else {
                        libc::O_RDONLY
                    };
                    let ptr = mem.slot_ptr(i as u32).unwrap().as_ptr();
                    // SAFETY: the slot is ours for the duration of the copy.
                    unsafe {
                        let fd = libc::open(p.as_ptr(), flags, 0o644 as libc::c_uint);
                        assert!(fd >= 0, "open: {}", std::io::Error::last_os_error());
                        let r = if store {
                            libc::pwrite(fd, ptr.cast(), len, 0)
                        } else {
                            libc::pread(fd, ptr.cast(), len, 0)
                        };
                        assert_eq!(r as usize, len, "{}", std::io::Error::last_os_error());
                        libc::close(fd);
                    }
                }
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
        tier.poll_finished(&mut out);
        std::thread::sleep(Duration::from_micros(50));
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

struct Row {
    fs: String,
    block: usize,
    direct: bool,
    base_store: f64,
    tier_store: f64,
    base_load: f64,
    tier_load: f64,
}

fn run(args: &Args, parent: &Path, block: usize) -> Row {
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
    let mut best = [0f64; 4];
    let mut direct = false;
    for round in 0..3u64 {
        let base_dir = root.path().join("base");
        std::fs::create_dir_all(&base_dir).unwrap();
        let tier_dir = root.path().join("tier");
        let mut o = FsOptions::new(&tier_dir);
        o.read_threads = args.read_threads;
        o.write_threads = args.write_threads;
        let mut tier = FsTier::open(mem.clone(), o).unwrap();
        direct = tier.direct_io();
        let d = baseline(&mem, &base_dir, threads, direct, true);
        best[0] = best[0].max(gbps(total, d));
        let d = through_tier(&mut tier, &mem, true, round * 1_000_000);
        best[1] = best[1].max(gbps(total, d));
        let d = baseline(&mem, &base_dir, threads, direct, false);
        best[2] = best[2].max(gbps(total, d));
        let d = through_tier(&mut tier, &mem, false, round * 1_000_000 + 500_000);
        best[3] = best[3].max(gbps(total, d));
        tier.shutdown().unwrap();
        drop(tier);
        std::fs::remove_dir_all(&base_dir).unwrap();
        std::fs::remove_dir_all(&tier_dir).unwrap();
    }
    Row {
        fs: parent.display().to_string(),
        block,
        direct,
        base_store: best[0],
        tier_store: best[1],
        base_load: best[2],
        tier_load: best[3],
    }
}

fn main() {
    let args = parse();
    let started = Instant::now();
    let mut rows = Vec::new();
    println!(
        "fs tier vs plain pwrite/pread, {:.2} GiB per run, {}+{} threads (baseline: {} threads), best of 3",
        args.bytes as f64 / (1u64 << 30) as f64,
        args.read_threads,
        args.write_threads,
        args.read_threads + args.write_threads
    );
    println!(
        "{:<28} {:>8} {:>6} | {:>9} {:>9} {:>6} | {:>9} {:>9} {:>6}",
        "file system",
        "block",
        "direct",
        "base st",
        "tier st",
        "ratio",
        "base ld",
        "tier ld",
        "ratio"
    );
    for dir in &args.dirs {
        for block in [256usize << 10, 2 << 20] {
            let r = run(&args, dir, block);
            println!(
                "{:<28} {:>7}K {:>6} | {:>9.2} {:>9.2} {:>5.0}% | {:>9.2} {:>9.2} {:>5.0}%",
                r.fs,
                r.block >> 10,
                r.direct,
                r.base_store,
                r.tier_store,
                100.0 * r.tier_store / r.base_store,
                r.base_load,
                r.tier_load,
                100.0 * r.tier_load / r.base_load
            );
            rows.push(r);
        }
    }
    println!("(GB/s; wall {:.1} s)", started.elapsed().as_secs_f64());
    if let Some(out) = &args.out {
        let runs: Vec<String> = rows
            .iter()
            .map(|r| {
                format!(
                    concat!(
                        "{{\"fs\":\"{}\",\"block_bytes\":{},\"direct_io\":{},",
                        "\"baseline_store_gbps\":{:.3},\"tier_store_gbps\":{:.3},\"store_ratio\":{:.3},",
                        "\"baseline_load_gbps\":{:.3},\"tier_load_gbps\":{:.3},\"load_ratio\":{:.3}}}"
                    ),
                    r.fs,
                    r.block,
                    r.direct,
                    r.base_store,
                    r.tier_store,
                    r.tier_store / r.base_store,
                    r.base_load,
                    r.tier_load,
                    r.tier_load / r.base_load
                )
            })
            .collect();
        let json = format!(
            "{{\"bench\":\"fs_tier\",\"bytes_per_run\":{},\"read_threads\":{},\"write_threads\":{},\"runs\":[{}]}}\n",
            args.bytes,
            args.read_threads,
            args.write_threads,
            runs.join(",")
        );
        std::fs::write(out, json).expect("writing --out");
    }
}
