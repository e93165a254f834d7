//! Blocks with known bytes for file-system tier tests: keys, jobs, the
//! byte pattern each block carries, polling for results, and child
//! processes that re-run the test binary.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use kvtier_core::Key;
use kvtier_core::region::SlotMemory;
use kvtier_core::request::{Request, RequestInfo};
use kvtier_core::tiering::{Direction, Job, JobId, JobResult, SecondaryTier};
use kvtier_core::tiers::fs::FsTier;

/// Opens a tier as [`FsTier::open`] does and waits for its restart scan
/// to end ([`FsTier::wait_rebuilt`]): the index is whole, as the tests of
/// what a restart finds need it.
pub fn open_rebuilt(
    slots: SlotMemory,
    opts: kvtier_core::tiers::fs::FsOptions,
) -> kvtier_core::Result<FsTier> {
    let mut tier = FsTier::open(slots, opts)?;
    tier.wait_rebuilt();
    Ok(tier)
}

/// A request for jobs and lookups.
pub fn request() -> Request {
    Arc::new(RequestInfo {
        name: "req".into(),
        ..Default::default()
    })
}

/// The key of block `i`.
pub fn key(i: u32) -> Key {
    Key::new(format!("block-{i:08}").as_bytes()).unwrap()
}

/// A job moving blocks `ids` through `slots`.
pub fn job(id: u64, direction: Direction, ids: &[u32], slots: &[u32]) -> Arc<Job> {
    Arc::new(Job {
        id: JobId(id),
        direction,
        keys: ids.iter().map(|&i| key(i)).collect(),
        slots: slots.to_vec(),
        request: request(),
    })
}

/// The bytes block `i` carries.
pub fn pattern(i: u32, out: &mut [u8]) {
    let mut x = (i as u64).wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
    for chunk in out.chunks_mut(8) {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        let b = x.to_le_bytes();
        chunk.copy_from_slice(&b[..chunk.len()]);
    }
}

/// Writes block `i`'s bytes into `slot`.
pub fn fill(mem: &SlotMemory, slot: u32, i: u32) {
    let mut buf = vec![0u8; mem.slot_bytes()];
    pattern(i, &mut buf);
    mem.write(slot, 0, &buf).unwrap();
}

/// Whether `slot` holds block `i`'s bytes exactly.
pub fn holds(mem: &SlotMemory, slot: u32, i: u32) -> bool {
    let mut want = vec![0u8; mem.slot_bytes()];
    pattern(i, &mut want);
    let mut got = vec![0u8; mem.slot_bytes()];
    mem.read(slot, 0, &mut got).unwrap();
    got == want
}

/// Fills `slot` with one byte value, so bytes a load did not deliver show.
pub fn poison(mem: &SlotMemory, slot: u32) {
    mem.write(slot, 0, &vec![0xa5u8; mem.slot_bytes()]).unwrap();
}

/// Polls until `n` jobs have been reported.
pub fn wait(tier: &mut FsTier, n: usize) -> Vec<JobResult> {
    let mut out = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(60);
    while out.len() < n {
        tier.poll_finished(usize::MAX, &mut out);
        assert!(Instant::now() < deadline, "jobs did not finish: {out:?}");
        std::thread::sleep(Duration::from_micros(200));
    }
    out
}

/// The keys a finished load reports delivered.
pub fn delivered(r: &JobResult, keys: &[Key]) -> Vec<Key> {
    if r.success {
        keys.to_vec()
    } else {
        r.succeeded_keys.clone().unwrap_or_default()
    }
}

/// Every file under `dir` whose name ends with `ext`.
pub fn files(dir: &Path, ext: &str) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        let Ok(rd) = std::fs::read_dir(&d) else {
            continue;
        };
        for e in rd.flatten() {
            let p = e.path();
            if p.is_dir() {
                stack.push(p);
            } else if p.to_str().unwrap().ends_with(ext) {
                out.push(p);
            }
        }
    }
    out
}

/// A statistic of the tier by name.
pub fn stat(tier: &FsTier, name: &str) -> f64 {
    tier.stats()
        .into_iter()
        .find(|s| s.name == name)
        .unwrap_or_else(|| panic!("no stat {name}"))
        .value
}

/// This test binary again, running only the ignored test `test`, with
/// `envs` set (the child reads its orders from them).
pub fn child(test: &str, envs: &[(&str, String)]) -> Command {
    let mut c = Command::new(std::env::current_exe().unwrap());
    c.args(["--ignored", "--exact", test, "--test-threads=1", "--quiet"]);
    for (k, v) in envs {
        c.env(k, v);
    }
    c.stdout(Stdio::null());
    c
}

/// Stores blocks `ids` through slots 0.. as one job, and waits for it.
pub fn store(tier: &mut FsTier, mem: &SlotMemory, id: u64, ids: &[u32]) -> JobResult {
    let slots: Vec<u32> = (0..ids.len() as u32).collect();
    for (s, &i) in slots.iter().zip(ids) {
        fill(mem, *s, i);
    }
    tier.submit_store(job(id, Direction::Store, ids, &slots));
    wait(tier, 1).remove(0)
}

/// Loads blocks `ids` into slots starting at `first`, and waits.
pub fn load(tier: &mut FsTier, id: u64, ids: &[u32], first: u32) -> JobResult {
    let slots: Vec<u32> = (first..first + ids.len() as u32).collect();
    tier.submit_load(job(id, Direction::Load, ids, &slots));
    wait(tier, 1).remove(0)
}
