//! Resident memory of the primary tier's metadata, per block.
//!
//!     cargo bench --bench memory -- [--out FILE.json]
//!
//! For each policy and each block count (10^6 and 10^7), a fresh child
//! process measures its resident set size (RSS), creates a primary tier of
//! that capacity, fills every slot with a distinct 12-byte key (one request
//! per batch of 16 keys: `prepare_store`, `complete_store`,
//! `on_request_finished`, as an engine does), and measures its RSS again.
//! The growth divided by the block count is the tier's resident cost per
//! block.  The tier keeps each key once, as a `Key` value (64 inline bytes
//! and a length: `size_of::<Key>()` bytes whatever the key's length); that
//! is reported apart, and "besides the key" is the rest.  The tier's own
//! estimate (`metadata_bytes_per_slot`) is printed next to the measurement.
//! No region is mapped: the figure is metadata only.
//!
//! Filling evicts nothing, so ARC has no ghosts there.  One more run
//! (`arc+ghosts`, 10^6 blocks) then stores `CHURN_ROUNDS` x blocks new keys,
//! touching half of each batch, until both ghost lists hold one key per
//! block (B1 and B2 full); ghost keys are `Key` values too, so "besides the
//! key" there subtracts three keys per block (the resident one and two
//! ghosts).

use std::io::Write;
use std::process::{Command, ExitCode};

use kvtier_core::Key;
use kvtier_core::primary::{PolicyKind, PrimaryConfig, PrimaryTier, StoreOutcome, StorePlan};
use kvtier_core::request::RequestId;

/// Keys are the workload's shape: an 8-byte hash, then a 4-byte group index.
const KEY_LEN: usize = 12;
/// Keys per request while filling.
const BATCH: usize = 16;
const COUNTS: [u32; 2] = [1_000_000, 10_000_000];
const POLICIES: [&str; 2] = ["lru", "arc"];
/// Blocks of the run with both ARC ghost lists full.
const CHURN_BLOCKS: u32 = 1_000_000;
/// Passes of `blocks` new keys after the fill in that run.
const CHURN_ROUNDS: u64 = 4;

/// The process's resident set size in bytes, from /proc/self/statm.
fn rss_bytes() -> u64 {
    let statm = std::fs::read_to_string("/proc/self/statm").expect("/proc/self/statm is readable");
    let pages: u64 = statm
        .split_whitespace()
        .nth(1)
        .and_then(|f| f.parse().ok())
        .expect("statm's second field is the resident page count");
    // SAFETY: sysconf has no preconditions.
    let page = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    pages * page as u64
}

/// A well-mixed 64-bit value of `i` (splitmix64), standing in for a block hash.
fn mix(i: u64) -> u64 {
    let mut z = i.wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

fn key_of(i: u64) -> Key {
    let mut bytes = [0u8; KEY_LEN];
    bytes[..8].copy_from_slice(&mix(i).to_be_bytes());
    Key::new(&bytes).expect("12 bytes is a valid key")
}

/// Child: fills a tier of `blocks` slots, then stores `rounds` x `blocks`
/// more new keys touching half of each batch (evicting as it goes), and
/// prints `rss_before rss_after fill_s estimate` (the tier's own estimate
/// of its metadata per slot).
fn child(blocks: u32, policy: &str, rounds: u64) -> Result<(), String> {
    let policy: PolicyKind = policy.parse().map_err(|e| format!("{e}"))?;
    let mut keys: Vec<Key> = Vec::with_capacity(BATCH);
    let mut plan = StorePlan::default();
    plan.to_store.reserve(BATCH);
    plan.slots.reserve(BATCH);
    plan.evicted.reserve(BATCH);
    let before = rss_bytes();
    let start = std::time::Instant::now();
    let mut tier = PrimaryTier::new(PrimaryConfig {
        capacity: blocks,
        policy,
        ..PrimaryConfig::default()
    })
    .map_err(|e| e.to_string())?;
    let mut next: u64 = 0;
    let mut request: u64 = 0;
    let filled = u64::from(blocks);
    let total = filled * (1 + rounds);
    while next < total {
        keys.clear();
        let n = (total - next).min(BATCH as u64);
        keys.extend((next..next + n).map(key_of));
        next += n;
        let req = RequestId(request);
        request += 1;
        tier.request_begin(req).map_err(|e| e.to_string())?;
        match tier
            .prepare_store(req, &keys, &mut plan)
            .map_err(|e| e.to_string())?
        {
            StoreOutcome::Planned => {}
            StoreOutcome::Refused => return Err(format!("store refused at block {next}")),
        }
        let want_evicted = if next <= filled { 0 } else { keys.len() };
        if plan.to_store.len() != keys.len() || plan.evicted.len() != want_evicted {
            return Err(format!(
                "storing new keys stored {} of {} keys and evicted {} (expected {want_evicted})",
                plan.to_store.len(),
                keys.len(),
                plan.evicted.len()
            ));
        }
        tier.complete_store(req, &plan.to_store, true);
        if rounds > 0 {
            tier.touch(req, &keys[..keys.len() / 2])
                .map_err(|e| e.to_string())?;
        }
        tier.request_finished(req).map_err(|e| e.to_string())?;
    }
    let s = tier.stats();
    if rounds > 0 && (s.arc_b1, s.arc_b2) != (blocks, blocks) {
        return Err(format!(
            "ghost lists not full after {rounds} rounds: B1 {}, B2 {}",
            s.arc_b1, s.arc_b2
        ));
    }
    let fill_s = start.elapsed().as_secs_f64();
    let after = rss_bytes();
    let estimate = tier.metadata_bytes_per_slot();
    std::hint::black_box(&tier);
    println!("{before} {after} {fill_s} {estimate}");
    Ok(())
}

struct Run {
    policy: &'static str,
    /// Ghost keys per block (0, or 2 with both ARC ghost lists full).
    ghosts: u32,
    blocks: u32,
    growth: u64,
    fill_s: f64,
    estimate: f64,
}

fn measure(policy: &'static str, blocks: u32, rounds: u64) -> Result<Run, String> {
    let exe = std::env::current_exe().map_err(|e| e.to_string())?;
    let out = Command::new(exe)
        .args(["--child", &blocks.to_string(), policy, &rounds.to_string()])
        .output()
        .map_err(|e| e.to_string())?;
    if !out.status.success() {
        return Err(format!(
            "child for {policy} {blocks} failed: {}",
            String::from_utf8_lossy(&out.stderr)
        ));
    }
    let text = String::from_utf8_lossy(&out.stdout);
    let f: Vec<&str> = text.split_whitespace().collect();
    let parse = |i: usize| -> Result<f64, String> {
        f.get(i)
            .and_then(|v| v.parse::<f64>().ok())
            .ok_or_else(|| format!("child printed {text:?}"))
    };
    let (before, after, fill_s, estimate) = (parse(0)?, parse(1)?, parse(2)?, parse(3)?);
    Ok(Run {
        policy,
        ghosts: if rounds > 0 { 2 } else { 0 },
        blocks,
        growth: (after - before).max(0.0) as u64,
        fill_s,
        estimate,
    })
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if let Some(i) = args.iter().position(|a| a == "--child") {
        let blocks = args.get(i + 1).and_then(|v| v.parse().ok());
        let policy = args.get(i + 2);
        let rounds = args.get(i + 3).and_then(|v| v.parse().ok());
        return match (blocks, policy, rounds) {
            (Some(b), Some(p), Some(r)) => match child(b, p, r) {
                Ok(()) => ExitCode::SUCCESS,
                Err(e) => {
                    eprintln!("memory: {e}");
                    ExitCode::FAILURE
                }
            },
            _ => {
                eprintln!("memory: --child needs a block count, a policy and a round count");
                ExitCode::FAILURE
            }
        };
    }
    let out = args
        .iter()
        .position(|a| a == "--out")
        .and_then(|i| args.get(i + 1).cloned());

    let key_inline = std::mem::size_of::<Key>();
    println!(
        "primary-tier metadata, resident bytes per block (keys of {KEY_LEN} bytes, kept as {key_inline}-byte Key values)"
    );
    println!(
        "{:<10} {:>10} {:>14} {:>10} {:>16} {:>9} {:>8}",
        "policy", "blocks", "rss growth", "per block", "besides the key", "estimate", "fill s"
    );
    let mut runs = Vec::new();
    let plan = POLICIES
        .iter()
        .flat_map(|&p| COUNTS.iter().map(move |&b| (p, b, 0)))
        .chain([("arc", CHURN_BLOCKS, CHURN_ROUNDS)]);
    for (policy, blocks, rounds) in plan {
        let run = match measure(policy, blocks, rounds) {
            Ok(r) => r,
            Err(e) => {
                eprintln!("memory: {e}");
                return ExitCode::FAILURE;
            }
        };
        let per = run.growth as f64 / f64::from(run.blocks);
        println!(
            "{:<10} {:>10} {:>14} {:>10.1} {:>16.1} {:>9.1} {:>8.2}",
            if run.ghosts > 0 {
                "arc+ghosts"
            } else {
                run.policy
            },
            run.blocks,
            run.growth,
            per,
            per - key_inline as f64 * f64::from(1 + run.ghosts),
            run.estimate,
            run.fill_s
        );
        runs.push(run);
    }

    if let Some(path) = out {
        let mut json = format!(
            "{{\"benchmark\": \"memory\", \"key_bytes\": {KEY_LEN}, \"key_type_bytes\": {key_inline}, \"goal_bytes_besides_key\": 64, \"runs\": ["
        );
        for (i, r) in runs.iter().enumerate() {
            let per = r.growth as f64 / f64::from(r.blocks);
            json.push_str(&format!(
                "{}{{\"policy\": \"{}\", \"ghost_keys_per_block\": {}, \"blocks\": {}, \"rss_growth_bytes\": {}, \"bytes_per_block\": {:.2}, \"bytes_per_block_besides_key\": {:.2}, \"estimate_bytes_besides_key\": {:.2}, \"fill_s\": {:.3}}}",
                if i > 0 { ", " } else { "" },
                r.policy,
                r.ghosts,
                r.blocks,
                r.growth,
                per,
                per - key_inline as f64 * f64::from(1 + r.ghosts),
                r.estimate,
                r.fill_s
            ));
        }
        json.push_str("]}\n");
        if let Err(e) = std::fs::File::create(&path).and_then(|mut f| f.write_all(json.as_bytes()))
        {
            eprintln!("memory: cannot write {path}: {e}");
            return ExitCode::FAILURE;
        }
    }
    ExitCode::SUCCESS
}
