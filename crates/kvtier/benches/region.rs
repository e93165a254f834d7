//! Region creation with pre-faulting, next to a plain memset of the same
//! number of bytes, in the same run.
//!
//!     cargo bench --bench region -- [--gib N] [--reps R] [--out FILE.json]
//!
//! Each figure is bytes over wall time, in GiB/s, best and median of R runs:
//! - create + MADV_POPULATE_WRITE (1 and 2 threads; one file, and two
//!   segments of 1 GiB), and create + touching every page (the fallback):
//!   the whole `Region::create_or_join` call on a fresh name in /dev/shm;
//! - memset of fresh anonymous memory (page faults included), and memset of
//!   an already pre-faulted region (memory bandwidth alone).

use std::time::Instant;

use kvtier_core::region::{Prefault, PrefaultMethod, Region, RegionOptions};

const GIB: f64 = (1u64 << 30) as f64;

struct Row {
    name: &'static str,
    runs: Vec<f64>,
}

impl Row {
    fn best(&self) -> f64 {
        self.runs.iter().cloned().fold(0.0, f64::max)
    }
    fn median(&self) -> f64 {
        let mut v = self.runs.clone();
        v.sort_by(|a, b| a.partial_cmp(b).unwrap());
        v[v.len() / 2]
    }
}

fn options(bytes: usize, prefault: Prefault, threads: u32, tag: &str) -> RegionOptions {
    options_segments(bytes, prefault, threads, 1, tag)
}

fn options_segments(
    bytes: usize,
    prefault: Prefault,
    threads: u32,
    segments: u32,
    tag: &str,
) -> RegionOptions {
    let slot = 2 << 20;
    let mut o = RegionOptions::new(
        format!("kvtier-bench-{}-{tag}", std::process::id()),
        (bytes / slot) as u32,
        slot,
    );
    o.prefault = prefault;
    o.prefault_threads = threads;
    o.segments = segments;
    o
}

/// GiB/s of creating (and pre-faulting) a region; the region is released
/// outside the timed part.
fn create(bytes: usize, prefault: Prefault, threads: u32, segments: u32) -> (f64, PrefaultMethod) {
    let o = options_segments(bytes, prefault, threads, segments, "create");
    let t = Instant::now();
    let r = Region::create_or_join(&o).expect("creating the region");
    let s = t.elapsed().as_secs_f64();
    let method = r.prefault_method();
    r.close().expect("closing the region");
    (bytes as f64 / GIB / s, method)
}

fn memset_fresh(bytes: usize) -> f64 {
    let mut m = memmap2::MmapMut::map_anon(bytes).expect("anonymous memory");
    let t = Instant::now();
    unsafe { std::ptr::write_bytes(std::hint::black_box(m.as_mut_ptr()), 0x5a, bytes) };
    let s = t.elapsed().as_secs_f64();
    std::hint::black_box(&m);
    bytes as f64 / GIB / s
}

fn memset_prefaulted(bytes: usize) -> f64 {
    let o = options(bytes, Prefault::Auto, 1, "memset");
    let r = Region::create_or_join(&o).expect("creating the region");
    let p = r.base().as_ptr();
    let t = Instant::now();
    unsafe { std::ptr::write_bytes(std::hint::black_box(p), 0x5a, bytes) };
    let s = t.elapsed().as_secs_f64();
    r.close().expect("closing the region");
    bytes as f64 / GIB / s
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let value = |flag: &str| {
        args.iter()
            .position(|a| a == flag)
            .and_then(|i| args.get(i + 1))
            .cloned()
    };
    let gib: usize = value("--gib").map_or(2, |v| v.parse().expect("--gib N"));
    let reps: usize = value("--reps").map_or(3, |v| v.parse().expect("--reps R"));
    let out = value("--out");
    let bytes = gib << 30;

    let mut rows = vec![
        Row {
            name: "create + MADV_POPULATE_WRITE, 1 thread",
            runs: vec![],
        },
        Row {
            name: "create + MADV_POPULATE_WRITE, 2 threads",
            runs: vec![],
        },
        Row {
            name: "create + MADV_POPULATE_WRITE, 2 threads, 2 segments",
            runs: vec![],
        },
        Row {
            name: "create + touch each page, 1 thread",
            runs: vec![],
        },
        Row {
            name: "memset, fresh anonymous memory",
            runs: vec![],
        },
        Row {
            name: "memset, pre-faulted region",
            runs: vec![],
        },
    ];
    let mut auto_method = PrefaultMethod::None;
    for _ in 0..reps {
        let (g, m) = create(bytes, Prefault::Auto, 1, 1);
        auto_method = m;
        rows[0].runs.push(g);
        rows[1].runs.push(create(bytes, Prefault::Auto, 2, 1).0);
        let segments = if gib >= 2 { 2 } else { 1 };
        rows[2]
            .runs
            .push(create(bytes, Prefault::Auto, 2, segments).0);
        rows[3].runs.push(create(bytes, Prefault::Touch, 1, 1).0);
        rows[4].runs.push(memset_fresh(bytes));
        rows[5].runs.push(memset_prefaulted(bytes));
    }

    println!(
        "region creation with pre-faulting vs memset: {gib} GiB in /dev/shm, best/median of {reps}"
    );
    println!("(the kernel pre-faulted with {auto_method:?} when asked for MADV_POPULATE_WRITE)");
    println!("{:<52} {:>10} {:>10}", "operation", "best GiB/s", "median");
    for r in &rows {
        println!("{:<52} {:>10.2} {:>10.2}", r.name, r.best(), r.median());
    }

    if let Some(path) = out {
        let mut json = format!(
            "{{\"bench\":\"region\",\"bytes\":{bytes},\"reps\":{reps},\"populate_method\":\"{auto_method:?}\",\"results\":["
        );
        for (i, r) in rows.iter().enumerate() {
            if i > 0 {
                json.push(',');
            }
            json.push_str(&format!(
                "{{\"operation\":\"{}\",\"best_gib_s\":{:.3},\"median_gib_s\":{:.3},\"runs_gib_s\":[{}]}}",
                r.name,
                r.best(),
                r.median(),
                r.runs.iter().map(|g| format!("{g:.3}")).collect::<Vec<_>>().join(",")
            ));
        }
        json.push_str("]}\n");
        std::fs::write(&path, json).expect("writing --out");
        println!("wrote {path}");
    }
}
