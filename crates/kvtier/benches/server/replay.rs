//! The replays of the server benchmark: the `medium` workload split into
//! shards, each replayed by an engine process of its own, against one
//! server or against an in-process manager per process.
//!
//! Shards, two ways.  By conversation: conversations are found from the
//! keys (a turn's keys begin with the whole previous turn of its
//! conversation, so a request continues the conversation of the earlier
//! request whose last key it holds), and conversation c goes to shard
//! c mod N, as a router that keeps a session on one engine does; across
//! shards only the system prompts are shared.  By request: request r goes
//! to shard r mod N, as a router that balances requests alone does; a
//! conversation's history is then shared across shards too.  N = 1 is
//! one engine with all the memory either way (the server's counts must
//! equal the in-process manager's there).
//!
//! A lookup's hits are not pinned until the load: on a server, another
//! engine's store may evict one in between, and the load then fails with
//! `KeyState`; the engine looks up again (at most 8 times, then it defers
//! the request; each failed load is counted in `load_races`), as an engine
//! must.
//!
//! Each engine process follows `tools/kvtier-replay.c`'s rules on its
//! shard, requests in file order, 16 per step: request_begin for each
//! request of the step; per request a per-key lookup, then, unless it
//! stopped at HIT_PENDING or RETRY (then the request is deferred: it loads
//! and stores nothing), prepare_load and touch of the h leading hits and,
//! on a MISS, prepare_store of the rest; schedule_end; per request
//! complete_load of its h keys, complete_store of the keys planned, and
//! request_finished.  After the last step, schedule_end while work is
//! pending (at most 10 times).  There are no secondary tiers and no events.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Instant;

use kvtier_core::primary::{StoreOutcome, StorePlan};
use kvtier_core::request::RequestId;
use kvtier_core::tiering::{LookupResult, ManagerCalls, RequestParams};
use kvtier_core::{Error, Key};

use super::target::{Target, transport_name};
use super::{Running, engine_manager, median, parse, ready_then_wait, run_engines, value};
use kvtier_core::server::Transport;

/// Primary capacity of the server; each of N in-process managers has 1/N.
const CAPACITY: u32 = 16384;
/// Requests per step.
const BATCH: usize = 16;
/// The cases: shard counts, by conversation (`false`) or by request.
const SHARDS: [(usize, bool); 5] = [(1, false), (2, false), (4, false), (2, true), (4, true)];

/// Writes the `medium` workload into `dir` with `kvtier-workload` (built
/// next to this benchmark, or built now).
pub(super) fn generate_medium(dir: &Path) -> PathBuf {
    let exe = std::env::current_exe().expect("this benchmark's path");
    // target/release/deps/server-HASH -> target/release/kvtier-workload
    let generator = exe
        .parent()
        .and_then(Path::parent)
        .expect("the target directory")
        .join("kvtier-workload");
    if !generator.exists() {
        let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
        let ok = Command::new(cargo)
            .args(["build", "-q", "--release", "-p", "kvtier-workload"])
            .status()
            .expect("running cargo");
        assert!(ok.success(), "building kvtier-workload");
    }
    let out = dir.join("medium.txt");
    let ok = Command::new(&generator)
        .args(["--preset", "medium", "--out"])
        .arg(&out)
        .status()
        .expect("running kvtier-workload");
    assert!(ok.success(), "kvtier-workload --preset medium");
    out
}

/// One request of the workload: its keys.
struct Request {
    keys: Vec<Key>,
}

/// The workload's requests in file order (`R <id> <n> <hex>...` lines).
fn load(path: &Path) -> Vec<Request> {
    let text = std::fs::read_to_string(path).expect("reading the workload");
    let hex = |s: &str| -> Key {
        let b: Vec<u8> = (0..s.len())
            .step_by(2)
            .map(|i| u8::from_str_radix(&s[i..i + 2], 16).expect("hex"))
            .collect();
        Key::new(&b).expect("a key of 1 to 64 bytes")
    };
    text.lines()
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
        .map(|l| {
            let mut f = l.split(' ');
            assert_eq!(f.next(), Some("R"), "a request line");
            let _id = f.next().expect("a request id");
            let n: usize = f.next().expect("a key count").parse().expect("a count");
            let keys: Vec<Key> = f.map(hex).collect();
            assert_eq!(keys.len(), n, "the key count");
            Request { keys }
        })
        .collect()
}

/// Each request's conversation, numbered in order of first appearance.
fn conversations(requests: &[Request]) -> Vec<usize> {
    let mut by_last_key: HashMap<&Key, usize> = HashMap::new();
    let mut next = 0;
    requests
        .iter()
        .map(|r| {
            let c = r
                .keys
                .iter()
                .rev()
                .find_map(|k| by_last_key.get(k).copied())
                .unwrap_or_else(|| {
                    next += 1;
                    next - 1
                });
            if let Some(last) = r.keys.last() {
                by_last_key.insert(last, c);
            }
            c
        })
        .collect()
}

/// What one engine's replay counted.
#[derive(Clone, Copy, Default, Debug)]
struct Counts {
    requests: u64,
    steps: u64,
    calls: u64,
    asked_blocks: u64,
    hit_blocks: u64,
    stops_miss: u64,
    stops_pending: u64,
    blocks_stored: u64,
    rejected_stores: u64,
    load_races: u64,
    wall_s: f64,
}

impl Counts {
    fn to_line(self) -> String {
        format!(
            "{} {} {} {} {} {} {} {} {} {} {}",
            self.requests,
            self.steps,
            self.calls,
            self.asked_blocks,
            self.hit_blocks,
            self.stops_miss,
            self.stops_pending,
            self.blocks_stored,
            self.rejected_stores,
            self.load_races,
            self.wall_s
        )
    }

    fn from_line(s: &str) -> Counts {
        let v: Vec<&str> = s.split_whitespace().collect();
        assert_eq!(v.len(), 11, "an engine's counts: {s:?}");
        let n = |i: usize| -> u64 { v[i].parse().expect("a count") };
        Counts {
            requests: n(0),
            steps: n(1),
            calls: n(2),
            asked_blocks: n(3),
            hit_blocks: n(4),
            stops_miss: n(5),
            stops_pending: n(6),
            blocks_stored: n(7),
            rejected_stores: n(8),
            load_races: n(9),
            wall_s: v[10].parse().expect("seconds"),
        }
    }

    fn add(&mut self, o: &Counts) {
        self.requests += o.requests;
        self.steps += o.steps;
        self.calls += o.calls;
        self.asked_blocks += o.asked_blocks;
        self.hit_blocks += o.hit_blocks;
        self.stops_miss += o.stops_miss;
        self.stops_pending += o.stops_pending;
        self.blocks_stored += o.blocks_stored;
        self.rejected_stores += o.rejected_stores;
        self.load_races += o.load_races;
        self.wall_s = self.wall_s.max(o.wall_s);
    }
}

/// Per request of a step: what it loaded and what it stores.
#[derive(Default)]
struct StepRequest {
    id: Option<RequestId>,
    hits: usize,
    store: Vec<Key>,
}

/// Lookups of one request again after its load found a hit gone: at most
/// this many, then the request is deferred.
const LOAD_RETRIES: usize = 8;

/// Replays `requests` (indices into `all`) on `m`, by the rules above.
fn replay(m: &dyn ManagerCalls, all: &[Request], requests: &[usize]) -> Counts {
    let mut c = Counts::default();
    let mut step: Vec<StepRequest> = (0..BATCH).map(|_| StepRequest::default()).collect();
    let mut slots = Vec::new();
    let mut plan = StorePlan::default();
    let start = Instant::now();
    for batch in requests.chunks(BATCH) {
        c.steps += 1;
        for (s, &r) in step.iter_mut().zip(batch) {
            let name = format!("r{r}");
            let started = m
                .request_begin(&name, RequestParams::default())
                .expect("request_begin");
            s.id = Some(started.id);
            c.calls += 1;
            c.requests += 1;
        }
        for (s, &r) in step.iter_mut().zip(batch) {
            let keys = &all[r].keys;
            let id = s.id.expect("begun");
            s.hits = 0;
            s.store.clear();
            c.asked_blocks += keys.len() as u64;
            let mut a = m.lookup_per_key(id, keys.into()).expect("lookup");
            c.calls += 1;
            // Another engine's store may evict a hit between the lookup
            // and the load (a shared server only): look up again.
            let mut retries = 0;
            let mut gave_up = false;
            loop {
                if matches!(a.stop, LookupResult::HitPending | LookupResult::Retry) {
                    break;
                }
                if a.hits == 0 {
                    break;
                }
                c.calls += 1;
                match m.prepare_load(id, keys[..a.hits].into(), &mut slots) {
                    Ok(()) => break,
                    Err(Error::KeyState { .. }) => {
                        c.load_races += 1;
                        if retries == LOAD_RETRIES {
                            gave_up = true;
                            break;
                        }
                        retries += 1;
                        a = m.lookup_per_key(id, keys.into()).expect("lookup");
                        c.calls += 1;
                    }
                    Err(e) => panic!("prepare_load: {e}"),
                }
            }
            if gave_up || matches!(a.stop, LookupResult::HitPending | LookupResult::Retry) {
                c.stops_pending += 1;
                continue;
            }
            let h = a.hits;
            if h > 0 {
                m.touch(id, keys[..h].into()).expect("touch");
                c.calls += 1;
                c.hit_blocks += h as u64;
                s.hits = h;
            }
            if a.stop == LookupResult::Miss {
                c.stops_miss += 1;
                plan.clear();
                let outcome = m
                    .prepare_store(id, keys[h..].into(), &mut plan)
                    .expect("prepare_store");
                c.calls += 1;
                match outcome {
                    StoreOutcome::Planned => {
                        s.store.extend_from_slice(&plan.to_store);
                        c.blocks_stored += plan.to_store.len() as u64;
                    }
                    StoreOutcome::Refused => c.rejected_stores += 1,
                }
            }
        }
        m.schedule_end().expect("schedule_end");
        c.calls += 1;
        for (s, &r) in step.iter_mut().zip(batch) {
            let id = s.id.take().expect("begun");
            if s.hits > 0 {
                m.complete_load(id, all[r].keys[..s.hits].into())
                    .expect("complete_load");
                c.calls += 1;
            }
            if !s.store.is_empty() {
                m.complete_store(id, (&s.store).into(), true)
                    .expect("complete_store");
                c.calls += 1;
            }
            m.request_finished(id).expect("request_finished");
            c.calls += 1;
        }
    }
    for _ in 0..10 {
        c.calls += 1;
        if !m.has_pending_work().expect("has_pending_work") {
            break;
        }
        c.calls += 1;
        m.schedule_end().expect("schedule_end");
    }
    c.wall_s = start.elapsed().as_secs_f64();
    c
}

/// Engine process of a replay: replays shard `--shard` of `--shards` of
/// `--workload` and prints its counts as one line.
pub(super) fn engine(args: &[String]) {
    let shard: usize = parse(args, "--shard").expect("--shard");
    let shards: usize = parse(args, "--shards").expect("--shards");
    let by_request = args.iter().any(|a| a == "--by-request");
    let all = load(Path::new(value(args, "--workload").expect("--workload")));
    let conv = conversations(&all);
    let mine: Vec<usize> = (0..all.len())
        .filter(|&r| {
            if by_request {
                r % shards == shard
            } else {
                conv[r] % shards == shard
            }
        })
        .collect();
    let m = engine_manager(args);
    ready_then_wait();
    let c = replay(&*m, &all, &mine);
    m.shutdown().expect("shutdown");
    println!("{}", c.to_line());
}

/// One setup's replay: the engines' counts added up, and the longest
/// engine's time in its replay loop (as `kvtier-replay`'s `wall_s`).
fn run(
    workload: &Path,
    (shards, by_request): (usize, bool),
    target: Target<'_>,
    spin_us: Option<u64>,
) -> Counts {
    let args: Vec<Vec<String>> = (0..shards)
        .map(|shard| {
            let mut a: Vec<String> = vec![
                "replay".into(),
                "--workload".into(),
                workload.display().to_string(),
                "--shard".into(),
                shard.to_string(),
                "--shards".into(),
                shards.to_string(),
            ];
            let capacity = (CAPACITY / shards as u32).to_string();
            a.extend(target.args(&["--capacity".into(), capacity]));
            if let Some(us) = spin_us {
                a.extend(["--spin-us".into(), us.to_string()]);
            }
            if by_request {
                a.push("--by-request".into());
            }
            a
        })
        .collect();
    let (outs, _) = run_engines(&args);
    let mut total = Counts::default();
    for o in &outs {
        total.add(&Counts::from_line(
            std::str::from_utf8(o).expect("an engine's counts"),
        ));
    }
    total
}

/// Every replay case, `rounds` rounds interleaved; prints a table and
/// returns the JSON entries.
pub(super) fn replays(
    dir: &Path,
    workload: &Path,
    rounds: usize,
    spin_us: Option<u64>,
    transports: &[Transport],
) -> String {
    // By transport, then by case.
    let mut server: Vec<Vec<Vec<Counts>>> = vec![vec![Vec::new(); SHARDS.len()]; transports.len()];
    let mut local: Vec<Vec<Counts>> = vec![Vec::new(); SHARDS.len()];
    for round in 0..rounds {
        eprintln!("server bench: replays, round {} of {rounds}", round + 1);
        for (i, &case) in SHARDS.iter().enumerate() {
            for (ti, &t) in transports.iter().enumerate() {
                let running = Running::start(dir, CAPACITY);
                let target = Target::Server(&running.socket, t);
                server[ti][i].push(run(workload, case, target, spin_us));
                drop(running);
            }
            local[i].push(run(workload, case, Target::Local, spin_us));
        }
    }
    println!(
        "replay of medium, sharded over N engine processes, batch {BATCH}, \
         {rounds} rounds (medians): one server of {CAPACITY} blocks vs N managers of \
         {CAPACITY}/N blocks; served: blocks loaded per block asked for; wall: the slowest \
         engine's replay loop; ns/call: an engine's time per call on the server"
    );
    println!(
        "{:<42} {:>11} {:>11} {:>10} {:>10} {:>8} {:>10} {:>10}",
        "case",
        "srv served",
        "loc served",
        "srv wall",
        "loc wall",
        "wall x",
        "srv calls",
        "ns/call"
    );
    let mut json = Vec::new();
    for ((i, &(n, by_request)), (ti, &t)) in SHARDS
        .iter()
        .enumerate()
        .flat_map(|c| std::iter::repeat(c).zip(transports.iter().enumerate()))
    {
        let (s, l) = (&server[ti][i], &local[i]);
        let name = format!(
            "medium, {n} shard{}{}, {}",
            if n == 1 { "" } else { "s" },
            if by_request {
                " by request"
            } else if n > 1 {
                " by conversation"
            } else {
                ""
            },
            transport_name(t)
        );
        // The counts of a setup may differ between rounds only through
        // the order the engines' calls reach the server in.
        let ratio = |v: &[Counts]| {
            median(
                &v.iter()
                    .map(|c| c.hit_blocks as f64 / c.asked_blocks as f64)
                    .collect::<Vec<_>>(),
            )
        };
        let wall = |v: &[Counts]| median(&v.iter().map(|c| c.wall_s).collect::<Vec<_>>());
        let (sr, lr, sw, lw) = (ratio(s), ratio(l), wall(s), wall(l));
        let calls = s[0].calls;
        println!(
            "{:<42} {:>11.4} {:>11.4} {:>9.3}s {:>9.3}s {:>8.2} {:>10} {:>10.0}",
            name,
            sr,
            lr,
            sw,
            lw,
            sw / lw,
            calls,
            sw * 1e9 / calls as f64 * n as f64
        );
        let last = |v: &[Counts]| *v.last().expect("a round");
        let (sc, lc) = (last(s), last(l));
        json.push(format!(
            "{{\"case\":\"{name}\",\"transport\":\"{}\",\"asked_blocks\":{},\
             \"server_served_per_asked\":{sr:.5},\"local_served_per_asked\":{lr:.5},\
             \"server_wall_s\":{sw:.4},\"local_wall_s\":{lw:.4},\"wall_over_local\":{:.3},\
             \"server_calls\":{},\"server_hit_blocks\":{},\"local_hit_blocks\":{},\
             \"server_stops_pending\":{},\"server_blocks_stored\":{},\"local_blocks_stored\":{},\
             \"server_rejected_stores\":{},\"local_rejected_stores\":{},\"server_load_races\":{},\
             \"server_wall_runs_s\":[{}],\"local_wall_runs_s\":[{}]}}",
            transport_name(t),
            sc.asked_blocks,
            sw / lw,
            sc.calls,
            sc.hit_blocks,
            lc.hit_blocks,
            sc.stops_pending,
            sc.blocks_stored,
            lc.blocks_stored,
            sc.rejected_stores,
            lc.rejected_stores,
            sc.load_races,
            s.iter()
                .map(|c| format!("{:.4}", c.wall_s))
                .collect::<Vec<_>>()
                .join(","),
            l.iter()
                .map(|c| format!("{:.4}", c.wall_s))
                .collect::<Vec<_>>()
                .join(","),
        ));
    }
    json.join(",")
}
