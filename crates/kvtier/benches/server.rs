//! The node server beside in-process managers, in one run: round trips of
//! one call, and workload replays from several engine processes.
//!
//!     cargo bench --bench server -- [--rounds R] [--secs S] [--spin-us U]
//!         [--transport ring|socket] [--workload FILE] [--no-lookups]
//!         [--no-replay] [--out FILE.json]
//!
//! Every engine is a process of its own (this binary, re-executed with
//! `--child`); the server is a thread of the benchmark's process (the
//! `Server` of `kvtierd`, on a Unix socket in a temporary directory).
//!
//! Lookups: each engine process starts one request and calls
//! `lookup_per_key` with the same 16 keys for S seconds (default 0.25),
//! timing every call; 1, 4 and 8 processes at once.  `hit`: the 16 keys
//! are stored (the full-hit path); `miss`: none is (the answer stops at
//! the first key).  Beside each, the same processes each with an
//! in-process manager of the same configuration.  Figures: the median and
//! 99th percentile of every call of every process, and the calls per
//! second of all processes together (all of them calling as fast as they
//! can: the saturation throughput).
//!
//! Replays (`server/replay.rs`): the `medium` workload split into N shards
//! (N = 1, 2, 4; by conversation, and by request), one engine process per
//! shard, against one server of 16,384 blocks, and against N in-process
//! managers of 16,384 / N blocks each.  Figures: blocks served (leading
//! hits loaded) per block asked for, and the wall time of the slowest
//! engine's replay loop.  The workload is `--workload FILE`, else
//! `kvtier-workload --preset medium` (from the same target directory,
//! built if missing).
//!
//! Every server case runs over each transport (`ring`: the shared-memory
//! carrier; `socket`: the Unix socket alone), or over the one
//! `--transport` names.
//!
//! The machine may be shared and small: every case runs in each of R
//! rounds (default 5), the cases interleaved, and each figure is the
//! median of its rounds; ratios are of those medians.

#[path = "server/replay.rs"]
mod replay;
#[path = "server/target.rs"]
mod target;

use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::time::{Duration, Instant};

use kvtier_core::Key;
use kvtier_core::config::Config;
use kvtier_core::primary::StorePlan;
use kvtier_core::server::{Client, ConnectOptions, DaemonConfig, Server, Transport};
use kvtier_core::tiering::{LookupResult, ManagerCalls, RequestParams};
use target::{Target, transport_name, transport_of};

/// Keys per lookup.
const LOOKUP_KEYS: usize = 16;
/// Engine processes of the lookup runs.
const CLIENTS: [usize; 3] = [1, 4, 8];
/// Slots of the lookup runs' manager.
const LOOKUP_CAPACITY: u32 = 4096;
/// Bytes per block, for every manager here.
const BLOCK_BYTES: u64 = 4096;

/// A well-mixed 64-bit value of `i` (splitmix64), standing in for a block hash.
fn mix(i: u64) -> u64 {
    let mut z = i.wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// Engine `engine`'s 16 keys (12 bytes, the workload's shape); `miss`
/// keys are never stored.
fn lookup_keys(engine: usize, miss: bool) -> Vec<Key> {
    let base = (engine * LOOKUP_KEYS) as u64 + if miss { 1 << 40 } else { 0 };
    (0..LOOKUP_KEYS as u64)
        .map(|i| {
            let mut b = [0u8; 12];
            b[..8].copy_from_slice(&mix(base + i).to_be_bytes());
            Key::new(&b).expect("12 bytes is a valid key")
        })
        .collect()
}

/// Stores `keys` in `m` as an engine does (one request: prepare, complete,
/// finish).
fn store(m: &dyn ManagerCalls, keys: &[Key]) {
    let r = m
        .request_begin("preload", RequestParams::default())
        .expect("request_begin")
        .id;
    let mut plan = StorePlan::default();
    m.prepare_store(r, keys.into(), &mut plan)
        .expect("prepare_store");
    assert_eq!(plan.to_store.len(), keys.len(), "every key stored");
    m.complete_store(r, keys.into(), true)
        .expect("complete_store");
    m.request_finished(r).expect("request_finished");
}

/// The manager's configuration document; `region` names the server's.
fn manager_json(capacity: u32, region: Option<(&str, &Path)>) -> String {
    let region = region.map_or(String::new(), |(name, dir)| {
        format!(
            r#""region": {{"name": "{name}", "directory": "{}"}},"#,
            dir.display()
        )
    });
    format!(
        r#"{{"block_bytes": {BLOCK_BYTES}, {region} "primary": {{"capacity": {capacity}}},
            "progress": {{"hold": false, "wait_steps": 0, "wait_ms": 0}}}}"#
    )
}

/// An in-process manager of the same configuration as the server's.
fn local_manager(capacity: u32) -> Box<dyn ManagerCalls> {
    let config = Config::from_json(&manager_json(capacity, None)).expect("configuration");
    Box::new(config.build().expect("building the manager"))
}

/// A server running on a thread of this process.
struct Running {
    stop: Arc<AtomicBool>,
    thread: Option<std::thread::JoinHandle<kvtier_core::Result<()>>>,
    socket: PathBuf,
    server: Arc<Server>,
}

impl Running {
    fn start(dir: &Path, capacity: u32) -> Running {
        static NEXT: AtomicU32 = AtomicU32::new(0);
        let n = NEXT.fetch_add(1, Ordering::Relaxed);
        let socket = dir.join(format!("kvtierd-{n}.sock"));
        let name = format!("kvtb{}s{n}", std::process::id());
        let json = manager_json(capacity, Some((&name, dir)));
        let config = DaemonConfig::from_json(&json).expect("server configuration");
        let server = Arc::new(Server::start(config, &socket).expect("starting the server"));
        let stop = Arc::new(AtomicBool::new(false));
        let (s, st) = (server.clone(), stop.clone());
        let thread = std::thread::spawn(move || s.run(&st));
        Running {
            stop,
            thread: Some(thread),
            socket,
            server,
        }
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            t.join()
                .expect("the server thread")
                .expect("the server stopped cleanly");
        }
    }
}

/// How clients connect: the default options, with the spin and the
/// transport given.
fn connect_options(spin_us: Option<u64>, transport: Transport) -> ConnectOptions {
    let mut o = ConnectOptions {
        transport,
        ..ConnectOptions::default()
    };
    if let Some(us) = spin_us {
        o.spin = Duration::from_micros(us);
    }
    o
}

// ---- engine processes ------------------------------------------------------

/// An engine process: told to go on its stdin, answers on its stdout.
struct Engine {
    child: std::process::Child,
}

impl Engine {
    fn spawn(args: &[String]) -> Engine {
        let exe = std::env::current_exe().expect("this benchmark's path");
        let child = Command::new(exe)
            .arg("--child")
            .args(args)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("starting an engine process");
        Engine { child }
    }

    fn wait_ready(&mut self) {
        let mut b = [0u8; 1];
        let out = self.child.stdout.as_mut().expect("piped");
        out.read_exact(&mut b).expect("an engine process got ready");
        assert_eq!(b[0], b'R', "an engine process's ready mark");
    }

    fn go(&mut self) {
        let inp = self.child.stdin.as_mut().expect("piped");
        inp.write_all(b"G").expect("telling an engine to go");
        inp.flush().expect("telling an engine to go");
    }

    /// The rest of its output, once it exited successfully.
    fn finish(mut self) -> Vec<u8> {
        let mut out = Vec::new();
        let mut stdout = self.child.stdout.take().expect("piped");
        stdout.read_to_end(&mut out).expect("an engine's output");
        let status = self.child.wait().expect("an engine process");
        assert!(status.success(), "an engine process failed: {status}");
        out
    }
}

/// Runs one engine per argument list at once: all get ready (connected,
/// loaded, warmed up), then all go together.  Returns each one's output
/// and the wall time from the go to the last one's end.
fn run_engines(args: &[Vec<String>]) -> (Vec<Vec<u8>>, f64) {
    let mut engines: Vec<Engine> = args.iter().map(|a| Engine::spawn(a)).collect();
    for e in &mut engines {
        e.wait_ready();
    }
    let t = Instant::now();
    for e in &mut engines {
        e.go();
    }
    let outs: Vec<Vec<u8>> = engines.into_iter().map(Engine::finish).collect();
    (outs, t.elapsed().as_secs_f64())
}

/// In an engine process: says it is ready, then waits for the go.
fn ready_then_wait() {
    let mut out = std::io::stdout().lock();
    out.write_all(b"R").expect("stdout");
    out.flush().expect("stdout");
    let mut b = [0u8; 1];
    std::io::stdin()
        .read_exact(&mut b)
        .expect("the go from the benchmark");
}

/// The value after `flag` in `args`.
fn value<'a>(args: &'a [String], flag: &str) -> Option<&'a str> {
    args.iter()
        .position(|a| a == flag)
        .and_then(|i| args.get(i + 1))
        .map(String::as_str)
}

fn parse<T: std::str::FromStr>(args: &[String], flag: &str) -> Option<T> {
    value(args, flag).map(|v| {
        v.parse()
            .unwrap_or_else(|_| panic!("{flag}: not a valid value: {v}"))
    })
}

/// The manager an engine process calls: connected to `--socket`, or its
/// own of `--capacity` blocks.
fn engine_manager(args: &[String]) -> Box<dyn ManagerCalls> {
    match value(args, "--socket") {
        Some(s) => {
            let t = transport_of(value(args, "--transport").expect("--transport"));
            let c = Client::connect(Path::new(s), &connect_options(parse(args, "--spin-us"), t))
                .expect("connecting to the server");
            assert_eq!(c.transport(), t, "the transport asked for");
            Box::new(c)
        }
        None => local_manager(parse(args, "--capacity").expect("--capacity or --socket")),
    }
}

// ---- lookups ---------------------------------------------------------------

/// Engine process of a lookup run: prints its call count, its time in ns
/// and then each call's ns, as little-endian u64 / u64 / u32s.
fn lookup_engine(args: &[String]) {
    let engine: usize = parse(args, "--engine").expect("--engine");
    let secs: f64 = parse(args, "--secs").expect("--secs");
    let miss = value(args, "--variant") == Some("miss");
    let m = engine_manager(args);
    let hit_keys = lookup_keys(engine, false);
    if value(args, "--socket").is_none() {
        store(&*m, &hit_keys);
    }
    let keys = if miss {
        lookup_keys(engine, true)
    } else {
        hit_keys
    };
    let want = if miss { 0 } else { LOOKUP_KEYS };
    let r = m
        .request_begin("lookups", RequestParams::default())
        .expect("request_begin")
        .id;
    let call = || {
        let a = m.lookup_per_key(r, (&keys).into()).expect("lookup");
        assert_eq!(a.hits, want, "hits of a lookup");
        assert_eq!(a.stop == LookupResult::Hit, !miss);
    };
    for _ in 0..2000 {
        call();
    }
    let mut ns: Vec<u32> = Vec::with_capacity((secs * 2e6) as usize);
    ready_then_wait();
    let start = Instant::now();
    let end = start + Duration::from_secs_f64(secs);
    loop {
        let t = Instant::now();
        if t >= end {
            break;
        }
        call();
        ns.push(t.elapsed().as_nanos().min(u32::MAX as u128) as u32);
    }
    let took = start.elapsed().as_nanos() as u64;
    m.request_finished(r).expect("request_finished");
    let mut out = Vec::with_capacity(16 + 4 * ns.len());
    out.extend_from_slice(&(ns.len() as u64).to_le_bytes());
    out.extend_from_slice(&took.to_le_bytes());
    for n in &ns {
        out.extend_from_slice(&n.to_le_bytes());
    }
    std::io::stdout().lock().write_all(&out).expect("stdout");
}

/// One lookup run's figures.
#[derive(Clone, Copy, Default)]
struct LookupFigures {
    median_ns: f64,
    p99_ns: f64,
    calls_per_s: f64,
}

fn percentile(sorted: &[u32], p: f64) -> f64 {
    let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    f64::from(sorted[i])
}

/// `clients` engine processes at once, on a server or each on its own
/// manager.
fn lookup_run(
    clients: usize,
    miss: bool,
    target: Target<'_>,
    secs: f64,
    spin_us: Option<u64>,
) -> LookupFigures {
    let args: Vec<Vec<String>> = (0..clients)
        .map(|engine| {
            let mut a = vec![
                "lookup".into(),
                "--engine".into(),
                engine.to_string(),
                "--secs".into(),
                secs.to_string(),
                "--variant".into(),
                if miss { "miss" } else { "hit" }.into(),
            ];
            a.extend(target.args(&["--capacity".into(), LOOKUP_CAPACITY.to_string()]));
            if let Some(us) = spin_us {
                a.extend(["--spin-us".into(), us.to_string()]);
            }
            a
        })
        .collect();
    let (outs, _) = run_engines(&args);
    let mut all: Vec<u32> = Vec::new();
    let mut calls = 0u64;
    let mut longest = 0u64;
    for o in &outs {
        let n = u64::from_le_bytes(o[..8].try_into().expect("8 bytes"));
        let took = u64::from_le_bytes(o[8..16].try_into().expect("8 bytes"));
        assert_eq!(o.len() as u64, 16 + 4 * n, "an engine's samples");
        calls += n;
        longest = longest.max(took);
        all.extend(
            o[16..]
                .chunks_exact(4)
                .map(|c| u32::from_le_bytes(c.try_into().expect("4 bytes"))),
        );
    }
    all.sort_unstable();
    LookupFigures {
        median_ns: percentile(&all, 0.5),
        p99_ns: percentile(&all, 0.99),
        calls_per_s: calls as f64 / (longest as f64 * 1e-9),
    }
}

fn median(v: &[f64]) -> f64 {
    let mut v = v.to_vec();
    v.sort_by(|a, b| a.partial_cmp(b).expect("no NaN"));
    let n = v.len();
    if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    }
}

/// The rounds of one lookup case, on the server over each transport and
/// in-process.
#[derive(Default)]
struct LookupCase {
    server: Vec<Vec<LookupFigures>>,
    local: Vec<LookupFigures>,
}

impl LookupCase {
    fn figure(v: &[LookupFigures], f: fn(&LookupFigures) -> f64) -> f64 {
        median(&v.iter().map(f).collect::<Vec<_>>())
    }
    fn medians(v: &[LookupFigures]) -> LookupFigures {
        LookupFigures {
            median_ns: Self::figure(v, |f| f.median_ns),
            p99_ns: Self::figure(v, |f| f.p99_ns),
            calls_per_s: Self::figure(v, |f| f.calls_per_s),
        }
    }
}

/// Every lookup case, `rounds` rounds interleaved.
fn lookups(
    dir: &Path,
    rounds: usize,
    secs: f64,
    spin_us: Option<u64>,
    transports: &[Transport],
) -> String {
    let running = Running::start(dir, LOOKUP_CAPACITY);
    let manager = running.server.manager().clone();
    for engine in 0..*CLIENTS.iter().max().expect("a count") {
        store(&*manager, &lookup_keys(engine, false));
    }
    let mut cases: Vec<(bool, usize, LookupCase)> = [false, true]
        .iter()
        .flat_map(|&miss| {
            CLIENTS.iter().map(move |&n| {
                let case = LookupCase {
                    server: vec![Vec::new(); transports.len()],
                    local: Vec::new(),
                };
                (miss, n, case)
            })
        })
        .collect();
    for round in 0..rounds {
        eprintln!("server bench: lookups, round {} of {rounds}", round + 1);
        for (miss, n, case) in &mut cases {
            for (i, &t) in transports.iter().enumerate() {
                let target = Target::Server(&running.socket, t);
                case.server[i].push(lookup_run(*n, *miss, target, secs, spin_us));
            }
            case.local
                .push(lookup_run(*n, *miss, Target::Local, secs, spin_us));
        }
    }
    drop(running);
    println!(
        "lookup_per_key of {LOOKUP_KEYS} keys, {rounds} rounds of {secs} s, medians of the rounds; \
         the server over each transport vs an in-process manager in each engine process"
    );
    println!(
        "{:<26} {:>10} {:>10} {:>12} {:>10} {:>10} {:>12} {:>8} {:>8}",
        "case",
        "srv med",
        "srv p99",
        "srv calls/s",
        "local med",
        "local p99",
        "local calls/s",
        "med x",
        "calls x"
    );
    let mut json = Vec::new();
    for ((miss, n, case), (i, &t)) in cases
        .iter()
        .flat_map(|c| std::iter::repeat(c).zip(transports.iter().enumerate()))
    {
        let s = LookupCase::medians(&case.server[i]);
        let l = LookupCase::medians(&case.local);
        let name = format!(
            "{}, {n} client{}, {}",
            if *miss { "miss" } else { "hit" },
            if *n == 1 { "" } else { "s" },
            transport_name(t)
        );
        println!(
            "{name:<26} {:>8.0}ns {:>8.0}ns {:>12.0} {:>8.0}ns {:>8.0}ns {:>12.0} {:>8.1} {:>8.3}",
            s.median_ns,
            s.p99_ns,
            s.calls_per_s,
            l.median_ns,
            l.p99_ns,
            l.calls_per_s,
            s.median_ns / l.median_ns,
            s.calls_per_s / l.calls_per_s,
        );
        let runs = |v: &[LookupFigures], f: fn(&LookupFigures) -> f64| {
            v.iter()
                .map(|x| format!("{:.0}", f(x)))
                .collect::<Vec<_>>()
                .join(",")
        };
        json.push(format!(
            "{{\"case\":\"{name}\",\"transport\":\"{}\",\"server_median_ns\":{:.0},\"server_p99_ns\":{:.0},\
             \"server_calls_per_s\":{:.0},\"local_median_ns\":{:.0},\"local_p99_ns\":{:.0},\
             \"local_calls_per_s\":{:.0},\"median_over_local\":{:.2},\
             \"calls_over_local\":{:.4},\"server_median_runs_ns\":[{}],\
             \"server_p99_runs_ns\":[{}],\"local_median_runs_ns\":[{}]}}",
            transport_name(t),
            s.median_ns,
            s.p99_ns,
            s.calls_per_s,
            l.median_ns,
            l.p99_ns,
            l.calls_per_s,
            s.median_ns / l.median_ns,
            s.calls_per_s / l.calls_per_s,
            runs(&case.server[i], |f| f.median_ns),
            runs(&case.server[i], |f| f.p99_ns),
            runs(&case.local, |f| f.median_ns),
        ));
    }
    json.join(",")
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if args.first().map(String::as_str) == Some("--child") {
        match args.get(1).map(String::as_str) {
            Some("lookup") => lookup_engine(&args[2..]),
            Some("replay") => replay::engine(&args[2..]),
            other => panic!("unknown engine role {other:?}"),
        }
        return;
    }
    // `cargo bench` passes `--bench`; nothing else of the harness applies.
    let rounds: usize = parse(&args, "--rounds").unwrap_or(5);
    let secs: f64 = parse(&args, "--secs").unwrap_or(0.25);
    let spin_us: Option<u64> = parse(&args, "--spin-us");
    let out = value(&args, "--out").map(str::to_owned);
    let transports = match value(&args, "--transport") {
        Some(t) => vec![transport_of(t)],
        None => vec![Transport::Ring, Transport::Socket],
    };
    let dir = tempfile::tempdir().expect("a temporary directory");

    let lookup_json = if args.iter().any(|a| a == "--no-lookups") {
        String::new()
    } else {
        lookups(dir.path(), rounds, secs, spin_us, &transports)
    };
    let replay_json = if args.iter().any(|a| a == "--no-replay") {
        String::new()
    } else {
        let workload = match value(&args, "--workload") {
            Some(w) => PathBuf::from(w),
            None => replay::generate_medium(dir.path()),
        };
        replay::replays(dir.path(), &workload, rounds.min(3), spin_us, &transports)
    };

    if let Some(path) = out {
        let spin = spin_us.map_or("null".to_string(), |s| s.to_string());
        let json = format!(
            "{{\"bench\":\"server\",\"rounds\":{rounds},\"secs\":{secs},\"spin_us\":{spin},\
             \"lookup_keys\":{LOOKUP_KEYS},\"lookups\":[{lookup_json}],\"replays\":[{replay_json}]}}\n"
        );
        std::fs::write(&path, json).expect("writing --out");
        println!("wrote {path}");
    }
}
