//! Store and load throughput of the redis tier against `redis-benchmark`
//! SET/GET with the same value size, connections and pipelining, on the
//! same freshly started server in the same run.
//!
//!     cargo bench --features redis-tier --bench redis_tier -- [--out FILE.json]
//!         [--block-kib 64] [--blocks 4096] [--pipeline 16] [--connections 4] [--runs 5]
//!
//! Each run measures redis-benchmark and then the tier back to back; the
//! ratio is taken per run and the medians are reported, so load from other
//! work on the machine affects both sides of a ratio alike.

use kvtier_testkit::redis_server;

use std::process::Command;
use std::sync::Arc;
use std::time::{Duration, Instant};

use kvtier_core::Key;
use kvtier_core::region::SlotMemory;
use kvtier_core::request::RequestInfo;
use kvtier_core::tiering::{Direction, Job, JobId, SecondaryTier};
use kvtier_core::tiers::redis::{RedisTier, RedisTierConfig, header_len};
use redis_server::{RedisServer, find_tool};

struct Args {
    out: Option<String>,
    block_kib: usize,
    blocks: usize,
    pipeline: usize,
    connections: usize,
    runs: usize,
}

fn args() -> Args {
    let mut a = Args {
        out: None,
        block_kib: 64,
        blocks: 4096,
        pipeline: 16,
        connections: 4,
        runs: 5,
    };
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        let mut num = |name: &str| -> usize {
            it.next()
                .and_then(|v| v.parse().ok())
                .unwrap_or_else(|| panic!("{name} takes a number"))
        };
        match flag.as_str() {
            "--out" => a.out = it.next(),
            "--block-kib" => a.block_kib = num("--block-kib"),
            "--blocks" => a.blocks = num("--blocks"),
            "--pipeline" => a.pipeline = num("--pipeline"),
            "--connections" => a.connections = num("--connections"),
            "--runs" => a.runs = num("--runs"),
            "--bench" => {}
            other => panic!("unknown flag {other}"),
        }
    }
    a
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(|a, b| a.partial_cmp(b).unwrap());
    v[v.len() / 2]
}

/// redis-benchmark's requests per second for `test` ("set" or "get").
fn redis_benchmark(
    server: &RedisServer,
    a: &Args,
    value_bytes: usize,
    test: &str,
    requests: usize,
    random_keys: bool,
) -> f64 {
    let exe = find_tool("redis-benchmark").expect("redis-benchmark is installed with redis-server");
    let mut cmd = Command::new(exe);
    cmd.args(["-h", "127.0.0.1", "-p", &server.port.to_string()])
        .args(["-t", test, "--csv"])
        .args(["-n", &requests.to_string()])
        .args(["-d", &value_bytes.to_string()])
        .args(["-P", &a.pipeline.to_string()])
        .args(["-c", &a.connections.to_string()]);
    if random_keys {
        cmd.args(["-r", &a.blocks.to_string()]);
    }
    let out = cmd.output().expect("running redis-benchmark");
    let text = String::from_utf8_lossy(&out.stdout);
    let name = format!("\"{}\"", test.to_uppercase());
    text.lines()
        .find(|l| l.starts_with(&name))
        .and_then(|l| l.split(',').nth(1))
        .and_then(|v| v.trim_matches('"').parse().ok())
        .unwrap_or_else(|| panic!("no {name} line in redis-benchmark output:\n{text}"))
}

/// SET over distinct random keys (new values, like the tier's stores), then
/// GET of one key set beforehand (every GET returns a whole value; with
/// random keys some would name keys never set and return nil).
fn redis_benchmark_set_get(server: &RedisServer, a: &Args, value_bytes: usize) -> (f64, f64) {
    let set = redis_benchmark(server, a, value_bytes, "set", a.blocks, true);
    redis_benchmark(server, a, value_bytes, "set", 1, false);
    let get = redis_benchmark(server, a, value_bytes, "get", a.blocks, false);
    (set, get)
}

fn tier(server: &RedisServer, a: &Args, mem: &SlotMemory) -> RedisTier {
    let cfg = RedisTierConfig {
        nodes: vec![server.addr()],
        namespace: "bench".into(),
        connections: a.connections,
        pipeline_ops: a.pipeline,
        pipeline_bytes: usize::MAX,
        ..RedisTierConfig::default()
    };
    RedisTier::new(cfg, mem.clone()).expect("creating the tier")
}

/// Submits `keys` in jobs of `pipeline * 4` blocks and waits for all.
fn run_jobs(t: &mut RedisTier, dir: Direction, keys: &[Key], per_job: usize) -> Duration {
    let req = Arc::new(RequestInfo::default());
    let t0 = Instant::now();
    let mut n = 0;
    for (j, chunk) in keys.chunks(per_job).enumerate() {
        let first = (j * per_job) as u32;
        let job = Job {
            id: JobId(j as u64),
            direction: dir,
            keys: chunk.to_vec(),
            slots: (first..first + chunk.len() as u32).collect(),
            request: req.clone(),
        };
        match dir {
            Direction::Store => t.submit_store(Arc::new(job)),
            Direction::Load => t.submit_load(Arc::new(job)),
        }
        n += 1;
    }
    let mut out = Vec::new();
    while out.len() < n {
        t.poll_finished(usize::MAX, &mut out);
        std::thread::sleep(Duration::from_micros(500));
    }
    let el = t0.elapsed();
    assert!(
        out.iter().all(|r| r.success),
        "a {dir:?} job failed: {:?}",
        t.stats()
    );
    el
}

fn main() {
    let a = args();
    let block = a.block_kib << 10;
    let server = match RedisServer::start() {
        Ok(s) => s,
        Err(why) => {
            println!("skipped: cannot start redis-server: {why}");
            return;
        }
    };
    let mem = SlotMemory::anonymous(a.blocks as u32, block).expect("slot memory");
    let keys: Vec<Key> = (0..a.blocks as u64)
        .map(|i| Key::new(&i.to_be_bytes()).unwrap())
        .collect();
    for (i, k) in keys.iter().enumerate() {
        let mut buf = vec![(i % 251) as u8; block];
        buf[..8].copy_from_slice(k.as_bytes());
        mem.write(i as u32, 0, &buf).unwrap();
    }
    // The tier's values carry a header; redis-benchmark gets the same value size.
    let value_bytes = block + header_len(&keys[0]);
    let per_job = a.pipeline * 4;
    let mb = (a.blocks * block) as f64 / 1e6;

    let (mut b_set, mut b_get, mut t_store, mut t_load) = (vec![], vec![], vec![], vec![]);
    let (mut r_store, mut r_load) = (vec![], vec![]);
    for _ in 0..a.runs {
        server.cli(&["FLUSHALL"]);
        let (set, get) = redis_benchmark_set_get(&server, &a, value_bytes);
        b_set.push(set * block as f64 / 1e6);
        b_get.push(get * block as f64 / 1e6);
        server.cli(&["FLUSHALL"]);
        let mut t = tier(&server, &a, &mem);
        let el = run_jobs(&mut t, Direction::Store, &keys, per_job);
        t_store.push(mb / el.as_secs_f64());
        let el = run_jobs(&mut t, Direction::Load, &keys, per_job);
        t_load.push(mb / el.as_secs_f64());
        t.shutdown().unwrap();
        r_store.push(t_store.last().unwrap() / b_set.last().unwrap());
        r_load.push(t_load.last().unwrap() / b_get.last().unwrap());
    }
    let (rs, rl) = (median(r_store), median(r_load));
    let (bs, bg, ts, tl) = (
        median(b_set),
        median(b_get),
        median(t_store),
        median(t_load),
    );
    println!(
        "redis tier vs redis-benchmark: {} blocks of {} KiB, pipeline {}, {} connections, median of {} runs",
        a.blocks, a.block_kib, a.pipeline, a.connections, a.runs
    );
    println!(
        "{:<8} {:>14} {:>18} {:>8}",
        "op", "tier MB/s", "redis-bench MB/s", "ratio"
    );
    println!(
        "{:<8} {:>14.0} {:>18.0} {:>7.0}%",
        "store",
        ts,
        bs,
        100.0 * rs
    );
    println!(
        "{:<8} {:>14.0} {:>18.0} {:>7.0}%",
        "load",
        tl,
        bg,
        100.0 * rl
    );
    println!("(MB/s: medians over the runs; ratio: median of the per-run ratios)");
    if let Some(path) = a.out {
        let json = format!(
            "{{\"block_bytes\":{block},\"blocks\":{},\"pipeline\":{},\"connections\":{},\"runs\":{},\
             \"tier_store_mb_s\":{ts:.1},\"tier_load_mb_s\":{tl:.1},\
             \"redis_benchmark_set_mb_s\":{bs:.1},\"redis_benchmark_get_mb_s\":{bg:.1},\
             \"store_ratio\":{:.3},\"load_ratio\":{:.3}}}\n",
            a.blocks, a.pipeline, a.connections, a.runs, rs, rl
        );
        std::fs::write(&path, json).expect("writing --out");
    }
}
