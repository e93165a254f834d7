//! The built-in redis tier against real `redis-server` processes on
//! loopback, driven directly through the `SecondaryTier` trait.

#![cfg(feature = "redis-tier")]

use kvtier_testkit::redis_server;

use std::sync::Arc;
use std::time::{Duration, Instant};

use kvtier_core::Key;
use kvtier_core::events::EventKind;
use kvtier_core::region::SlotMemory;
use kvtier_core::request::RequestInfo;
use kvtier_core::tiering::{Direction, Job, JobId, JobResult, SecondaryTier, TierLookup};
use kvtier_core::tiers::redis::{RedisTier, RedisTierConfig, redis_key_name};
use redis_server::{RedisCluster, RedisServer};

const SLOT_BYTES: usize = 16 << 10;

macro_rules! server_or_skip {
    ($e:expr) => {
        match redis_server::or_skip($e) {
            Some(s) => s,
            None => return,
        }
    };
}

fn key(ns: u32, i: u32) -> Key {
    let mut b = [0u8; 12];
    b[..4].copy_from_slice(&ns.to_be_bytes());
    b[8..].copy_from_slice(&i.to_be_bytes());
    Key::new(&b).unwrap()
}

/// Deterministic bytes derived from the key, so any mix-up shows.
fn pattern(k: &Key, out: &mut [u8]) {
    let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
    for b in k.as_bytes() {
        x = (x ^ *b as u64).wrapping_mul(0x100_0000_01b3);
    }
    for chunk in out.chunks_mut(8) {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        let bytes = x.to_le_bytes();
        chunk.copy_from_slice(&bytes[..chunk.len()]);
    }
}

fn fill(mem: &SlotMemory, slot: u32, k: &Key) {
    let mut buf = vec![0u8; mem.slot_bytes()];
    pattern(k, &mut buf);
    mem.write(slot, 0, &buf).unwrap();
}

fn holds(mem: &SlotMemory, slot: u32, k: &Key) -> bool {
    let mut want = vec![0u8; mem.slot_bytes()];
    pattern(k, &mut want);
    let mut got = vec![0u8; mem.slot_bytes()];
    mem.read(slot, 0, &mut got).unwrap();
    want == got
}

fn job(id: u64, direction: Direction, keys: Vec<Key>, slots: Vec<u32>) -> Arc<Job> {
    Arc::new(Job {
        id: JobId(id),
        direction,
        keys,
        slots,
        request: Arc::new(RequestInfo::default()),
    })
}

/// A tier on `addr` with generous timeouts: a live server on loopback is
/// never taken for a failed one because a loaded machine was slow to
/// schedule it (a killed server or a refused login fails at once anyway).
fn config(addr: String, namespace: &str) -> RedisTierConfig {
    RedisTierConfig {
        nodes: vec![addr],
        namespace: namespace.into(),
        connections: 2,
        connect_timeout: GENEROUS,
        command_timeout: GENEROUS,
        ..RedisTierConfig::default()
    }
}

/// A limit that only a hung server or a hung test runs into.
const GENEROUS: Duration = Duration::from_secs(30);

/// Polls until `n` results arrived (or panics after `timeout`).
fn wait_results(tier: &mut RedisTier, n: usize, timeout: Duration) -> Vec<JobResult> {
    let deadline = Instant::now() + timeout;
    let mut out = Vec::new();
    while out.len() < n {
        tier.poll_finished(usize::MAX, &mut out);
        assert!(
            Instant::now() < deadline,
            "only {} of {n} jobs finished in {timeout:?}",
            out.len()
        );
        std::thread::sleep(Duration::from_millis(2));
    }
    assert_eq!(out.len(), n, "more results than jobs");
    out
}

/// Looks `keys` up until none answers RETRY, ending a step between rounds.
fn settle(tier: &mut RedisTier, keys: &[Key]) -> Vec<TierLookup> {
    let req = Arc::new(RequestInfo::default());
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let answers: Vec<TierLookup> = keys.iter().map(|k| tier.lookup(k, &req)).collect();
        if !answers.contains(&TierLookup::Retry) {
            return answers;
        }
        assert!(Instant::now() < deadline, "lookups still RETRY after 10 s");
        tier.on_schedule_end();
        std::thread::sleep(Duration::from_millis(2));
    }
}

fn stat(tier: &RedisTier, name: &str) -> f64 {
    tier.stats()
        .into_iter()
        .find(|s| s.name == name)
        .unwrap_or_else(|| panic!("no stat {name}"))
        .value
}

/// Stores `keys` from slots 0.. of `mem` and checks the job succeeded.
fn store_all(tier: &mut RedisTier, mem: &SlotMemory, keys: &[Key], id: u64) {
    let slots: Vec<u32> = (0..keys.len() as u32).collect();
    for (k, s) in keys.iter().zip(&slots) {
        fill(mem, *s, k);
    }
    tier.submit_store(job(id, Direction::Store, keys.to_vec(), slots));
    let r = wait_results(tier, 1, Duration::from_secs(10));
    assert!(r[0].success, "store failed: {:?} {:?}", r[0], tier.stats());
    assert_eq!(r[0].id, JobId(id));
}

#[test]
fn stores_and_loads_verified_bytes_through_one_server() {
    let server = server_or_skip!(RedisServer::start());
    let mem = SlotMemory::anonymous(64, SLOT_BYTES).unwrap();
    let mut a = RedisTier::new(config(server.addr(), "basic"), mem.clone()).unwrap();
    assert_eq!(a.name(), "redis");
    let keys: Vec<Key> = (0..24).map(|i| key(1, i)).collect();
    store_all(&mut a, &mem, &keys, 1);
    assert_eq!(stat(&a, "blocks_stored"), 24.0);
    assert_eq!(stat(&a, "bytes_stored"), (24 * SLOT_BYTES) as f64);
    let mut ev = Vec::new();
    a.take_events(usize::MAX, &mut ev);
    assert_eq!(ev.len(), 24);
    assert!(ev.iter().all(|e| e.kind == EventKind::Stored));

    // Known locally: HIT at once; storing them again sends nothing.
    let req = Arc::new(RequestInfo::default());
    assert_eq!(a.lookup(&keys[3], &req), TierLookup::Hit);
    a.submit_store(job(
        2,
        Direction::Store,
        keys[..4].to_vec(),
        vec![0, 1, 2, 3],
    ));
    assert!(wait_results(&mut a, 1, GENEROUS)[0].success);
    assert_eq!(stat(&a, "blocks_skipped"), 4.0);

    // Load into other slots and compare.
    let slots: Vec<u32> = (32..56).collect();
    a.submit_load(job(3, Direction::Load, keys.clone(), slots.clone()));
    assert!(a.has_pending_work());
    let r = wait_results(&mut a, 1, Duration::from_secs(10));
    assert!(r[0].success && r[0].succeeded_keys.is_none(), "{:?}", r[0]);
    assert_eq!(r[0].bytes, (24 * SLOT_BYTES) as u64);
    for (k, s) in keys.iter().zip(&slots) {
        assert!(holds(&mem, *s, k), "slot {s} does not hold {k}");
    }
    assert!(!a.has_pending_work());

    // A second instance learns of the keys through batched existence checks.
    let mut b = RedisTier::new(config(server.addr(), "basic"), mem.clone()).unwrap();
    assert_eq!(b.lookup(&keys[0], &req), TierLookup::Retry);
    assert_eq!(b.lookup(&keys[0], &req), TierLookup::Retry, "still pending");
    let mut probe = keys.clone();
    probe.push(key(1, 999));
    let answers = settle(&mut b, &probe);
    assert!(answers[..24].iter().all(|a| *a == TierLookup::Hit));
    assert_eq!(answers[24], TierLookup::Miss);
    assert_eq!(stat(&b, "exists_batches"), 1.0, "one batch for the step");
    // Beyond max_known_keys the oldest keys are forgotten at the step's
    // end; looking one up asks the server again, which still has it.
    let mut cfg = config(server.addr(), "basic");
    cfg.max_known_keys = 8;
    let mut small = RedisTier::new(cfg, mem.clone()).unwrap();
    store_all(&mut small, &mem, &keys, 50);
    assert_eq!(small.lookup(&keys[0], &req), TierLookup::Hit);
    small.on_schedule_end();
    assert_eq!(stat(&small, "known_keys"), 8.0);
    assert_eq!(stat(&small, "known_forgotten"), 16.0);
    assert_eq!(small.lookup(&keys[0], &req), TierLookup::Retry);
    assert_eq!(settle(&mut small, &keys[..1]), vec![TierLookup::Hit]);
    // Another namespace sees nothing.
    let mut c = RedisTier::new(config(server.addr(), "other"), mem.clone()).unwrap();
    assert_eq!(settle(&mut c, &keys[..2]), vec![TierLookup::Miss; 2]);
    for t in [&mut a, &mut b, &mut c] {
        t.drain().unwrap();
        t.shutdown().unwrap();
        t.shutdown().unwrap();
    }
    // After shutdown jobs fail at once and lookups miss.
    a.submit_load(job(9, Direction::Load, keys[..1].to_vec(), vec![0]));
    let mut out = Vec::new();
    a.poll_finished(usize::MAX, &mut out);
    assert_eq!(out.len(), 1);
    assert!(!out[0].success);
    assert_eq!(a.lookup(&keys[0], &req), TierLookup::Miss);
}

const CHILD_ENV: &str = "KVTIER_REDIS_TEST_CHILD_ADDR";

/// Process B: finds A's blocks through the server, loads them, checks bytes.
fn child_loads(addr: String) {
    let mem = SlotMemory::anonymous(64, SLOT_BYTES).unwrap();
    let mut b = RedisTier::new(config(addr, "shared"), mem.clone()).unwrap();
    let keys: Vec<Key> = (0..40).map(|i| key(7, i)).collect();
    let answers = settle(&mut b, &keys);
    assert!(answers.iter().all(|a| *a == TierLookup::Hit), "{answers:?}");
    let slots: Vec<u32> = (0..40).rev().collect();
    b.submit_load(job(1, Direction::Load, keys.clone(), slots.clone()));
    let r = wait_results(&mut b, 1, Duration::from_secs(10));
    assert!(r[0].success, "{:?}", r[0]);
    for (k, s) in keys.iter().zip(&slots) {
        assert!(holds(&mem, *s, k), "slot {s} does not hold {k}");
    }
    b.shutdown().unwrap();
    println!("child verified {} blocks", keys.len());
}

#[test]
fn two_processes_share_blocks_through_one_server() {
    if let Ok(addr) = std::env::var(CHILD_ENV) {
        child_loads(addr);
        return;
    }
    let server = server_or_skip!(RedisServer::start());
    let mem = SlotMemory::anonymous(64, SLOT_BYTES).unwrap();
    let mut a = RedisTier::new(config(server.addr(), "shared"), mem.clone()).unwrap();
    let keys: Vec<Key> = (0..40).map(|i| key(7, i)).collect();
    store_all(&mut a, &mem, &keys, 1);
    a.shutdown().unwrap();

    let out = std::process::Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            "two_processes_share_blocks_through_one_server",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(CHILD_ENV, server.addr())
        .output()
        .unwrap();
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(out.status.success(), "child failed:\n{text}");
    assert!(
        text.contains("child verified 40 blocks"),
        "child did not run:\n{text}"
    );
}

#[test]
fn corrupted_values_are_never_served_and_are_deleted() {
    let server = server_or_skip!(RedisServer::start());
    let mem = SlotMemory::anonymous(16, SLOT_BYTES).unwrap();
    let mut t = RedisTier::new(config(server.addr(), "bad"), mem.clone()).unwrap();
    let keys: Vec<Key> = (0..4).map(|i| key(3, i)).collect();
    store_all(&mut t, &mem, &keys, 1);
    let mut ev = Vec::new();
    t.take_events(usize::MAX, &mut ev);

    let name = |k: &Key| String::from_utf8(redis_key_name("bad", k)).unwrap();
    // Flip one payload byte of key 1; put key 0's value under key 2's name.
    assert_eq!(
        server.cli_text(&["SETRANGE", &name(&keys[1]), "1000", "Z"]),
        (SLOT_BYTES + 44).to_string()
    );
    assert_eq!(
        server.cli_text(&["COPY", &name(&keys[0]), &name(&keys[2]), "REPLACE"]),
        "1"
    );

    let slots = vec![8, 9, 10, 11];
    for s in &slots {
        mem.write(*s, 0, &vec![0xEEu8; SLOT_BYTES]).unwrap();
    }
    t.submit_load(job(2, Direction::Load, keys.clone(), slots.clone()));
    let r = wait_results(&mut t, 1, Duration::from_secs(10));
    assert!(!r[0].success);
    let mut ok = r[0].succeeded_keys.clone().unwrap();
    ok.sort();
    assert_eq!(ok, vec![keys[0], keys[3]]);
    assert!(holds(&mem, 8, &keys[0]) && holds(&mem, 11, &keys[3]));
    let mut bad = vec![0u8; SLOT_BYTES];
    for s in [9, 10] {
        mem.read(s, 0, &mut bad).unwrap();
        assert!(
            bad.iter().all(|b| *b == 0xEE),
            "a rejected value reached slot {s}"
        );
    }
    assert_eq!(stat(&t, "blocks_corrupt"), 2.0);
    assert_eq!(stat(&t, "corrupt_deleted"), 2.0);
    assert_eq!(server.cli_text(&["EXISTS", &name(&keys[1])]), "0");
    assert_eq!(server.cli_text(&["EXISTS", &name(&keys[2])]), "0");
    ev.clear();
    t.take_events(usize::MAX, &mut ev);
    assert_eq!(ev.len(), 2);
    assert!(ev.iter().all(|e| e.kind == EventKind::Removed));
    // The tier forgot them: the next lookup asks the server, which has none.
    assert_eq!(settle(&mut t, &keys[1..3]), vec![TierLookup::Miss; 2]);
    assert_eq!(
        stat(&t, "breaker_open"),
        0.0,
        "bad data is not a server failure"
    );
}

#[test]
fn blocks_expire_after_their_ttl() {
    let server = server_or_skip!(RedisServer::start());
    let mem = SlotMemory::anonymous(16, SLOT_BYTES).unwrap();
    let req = Arc::new(RequestInfo::default());
    // The TTL reaches the server in milliseconds.  A TTL long enough that
    // it cannot run out while the test reads it back: an hour, of which
    // at most ten minutes may have passed.
    let mut cfg = config(server.addr(), "ttl-hour");
    cfg.ttl = Some(Duration::from_secs(3600));
    let mut hour = RedisTier::new(cfg, mem.clone()).unwrap();
    let kept = key(4, 100);
    store_all(&mut hour, &mem, &[kept], 1);
    let name = String::from_utf8(redis_key_name("ttl-hour", &kept)).unwrap();
    let pttl: i64 = server.cli_text(&["PTTL", &name]).parse().unwrap();
    assert!((3_000_000..=3_600_000).contains(&pttl), "PTTL {pttl}");
    assert_eq!(hour.lookup(&kept, &req), TierLookup::Hit);
    hour.shutdown().unwrap();

    // A short TTL runs out on the server and in the tier's memory of what
    // it stored: lookups then miss.  Waited for with a generous deadline
    // (a fixed sleep could end before a loaded machine got that far).
    let mut cfg = config(server.addr(), "ttl");
    cfg.ttl = Some(Duration::from_millis(400));
    let mut t = RedisTier::new(cfg, mem.clone()).unwrap();
    let keys: Vec<Key> = (0..4).map(|i| key(4, i)).collect();
    let started = Instant::now();
    store_all(&mut t, &mem, &keys, 1);
    let name = String::from_utf8(redis_key_name("ttl", &keys[0])).unwrap();
    let deadline = Instant::now() + GENEROUS;
    loop {
        t.on_schedule_end();
        let answers = settle(&mut t, &keys);
        if answers == vec![TierLookup::Miss; 4] {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "blocks still found {:?} after their 400 ms TTL: {answers:?}",
            started.elapsed()
        );
        std::thread::sleep(Duration::from_millis(10));
    }
    assert!(
        started.elapsed() >= Duration::from_millis(400),
        "missed before their TTL ran out"
    );
    assert_eq!(server.cli_text(&["EXISTS", &name]), "0");
    assert_eq!(stat(&t, "expired"), 4.0);
    let mut ev = Vec::new();
    t.take_events(usize::MAX, &mut ev);
    let removed = ev.iter().filter(|e| e.kind == EventKind::Removed).count();
    assert_eq!(removed, 4, "{ev:?}");
    // A load of an expired block fails cleanly.
    t.submit_load(job(2, Direction::Load, keys[..1].to_vec(), vec![5]));
    let r = wait_results(&mut t, 1, Duration::from_secs(10));
    assert!(!r[0].success);
    assert_eq!(r[0].succeeded_keys.as_deref(), Some(&[][..]));
    assert_eq!(stat(&t, "blocks_missing"), 1.0);
}

#[test]
fn server_killed_mid_run_opens_the_breaker_which_closes_after_restart() {
    let mut server = server_or_skip!(RedisServer::start());
    let mem = SlotMemory::anonymous(256, SLOT_BYTES).unwrap();
    let mut cfg = config(server.addr(), "crash");
    cfg.breaker_failures = 2;
    cfg.breaker_cooldown = Duration::from_millis(200);
    cfg.pipeline_ops = 8;
    let mut t = RedisTier::new(cfg, mem.clone()).unwrap();
    let req = Arc::new(RequestInfo::default());

    let old: Vec<Key> = (0..64).map(|i| key(5, i)).collect();
    store_all(&mut t, &mem, &old, 1);

    // Jobs in flight when the server dies.
    let mut id = 10;
    let mut loads = Vec::new();
    for c in 0..4u32 {
        let keys: Vec<Key> = old[(c * 16) as usize..((c + 1) * 16) as usize].to_vec();
        let slots: Vec<u32> = (0..16).map(|i| 100 + c * 16 + i).collect();
        t.submit_load(job(id, Direction::Load, keys.clone(), slots.clone()));
        loads.push((id, keys, slots));
        id += 1;
        let fresh: Vec<Key> = (0..16).map(|i| key(6, c * 16 + i)).collect();
        let slots: Vec<u32> = (0..16).map(|i| 170 + c * 16 + i).collect();
        for (k, s) in fresh.iter().zip(&slots) {
            fill(&mem, *s, k);
        }
        t.submit_store(job(id, Direction::Store, fresh, slots));
        id += 1;
    }
    server.kill();
    let results = wait_results(&mut t, 8, Duration::from_secs(20));
    // Whatever finished, no load ever leaves wrong bytes in a slot it reports.
    for r in &results {
        if let Some((_, keys, slots)) = loads.iter().find(|(i, _, _)| JobId(*i) == r.id) {
            let good: Vec<Key> = if r.success {
                keys.clone()
            } else {
                r.succeeded_keys.clone().unwrap()
            };
            for k in good {
                let s = slots[keys.iter().position(|x| *x == k).unwrap()];
                assert!(holds(&mem, s, &k), "slot {s} reported loaded but wrong");
            }
        }
    }

    // Keep working against the dead server until the breaker opens.
    let deadline = Instant::now() + Duration::from_secs(20);
    while !t.breaker_open() {
        assert!(
            Instant::now() < deadline,
            "breaker never opened: {:?}",
            t.stats()
        );
        let k = key(8, id as u32);
        fill(&mem, 0, &k);
        t.submit_store(job(id, Direction::Store, vec![k], vec![0]));
        id += 1;
        let r = wait_results(&mut t, 1, Duration::from_secs(10));
        assert!(!r[0].success, "a store to a dead server succeeded");
    }
    let down = stat(&t, "failures_server_down")
        + stat(&t, "failures_connection_reset")
        + stat(&t, "failures_timeout");
    assert!(down >= 2.0, "{:?}", t.stats());
    assert_eq!(stat(&t, "breaker_opens"), 1.0);
    assert_eq!(stat(&t, "breaker_open"), 1.0);

    // While open: MISS at once, stores dropped and counted, loads fail at
    // once.  "At once" is within the call: the answer is MISS, not RETRY,
    // and the failed store's result is there without any wait.
    let sent = stat(&t, "exists_checks");
    assert_eq!(t.lookup(&key(9, 1), &req), TierLookup::Miss);
    assert_eq!(stat(&t, "exists_checks"), sent, "a lookup asked the server");
    t.submit_store(job(id, Direction::Store, vec![key(9, 2)], vec![1]));
    let mut out = Vec::new();
    t.poll_finished(usize::MAX, &mut out);
    assert_eq!(
        out.len(),
        1,
        "the dropped store's failure is not ready at once"
    );
    assert!(!out[0].success);
    assert!(stat(&t, "stores_dropped") >= 1.0);
    id += 1;

    // The server comes back (empty); a probe closes the breaker.
    server.restart().unwrap();
    let deadline = Instant::now() + Duration::from_secs(20);
    while t.breaker_open() {
        assert!(
            Instant::now() < deadline,
            "breaker never closed: {:?}",
            t.stats()
        );
        t.on_schedule_end();
        std::thread::sleep(Duration::from_millis(10));
    }
    assert_eq!(stat(&t, "breaker_closes"), 1.0);
    assert!(stat(&t, "probes") >= 1.0);

    // Work flows again, with correct bytes.
    let fresh: Vec<Key> = (0..8).map(|i| key(10, i)).collect();
    store_all(&mut t, &mem, &fresh, id);
    id += 1;
    let slots: Vec<u32> = (200..208).collect();
    t.submit_load(job(id, Direction::Load, fresh.clone(), slots.clone()));
    let r = wait_results(&mut t, 1, Duration::from_secs(10));
    assert!(r[0].success, "{:?}", r[0]);
    for (k, s) in fresh.iter().zip(&slots) {
        assert!(holds(&mem, *s, k));
    }
    // Blocks lost with the old server are reported missing, never served.
    id += 1;
    t.submit_load(job(
        id,
        Direction::Load,
        old[..4].to_vec(),
        vec![210, 211, 212, 213],
    ));
    let r = wait_results(&mut t, 1, Duration::from_secs(10));
    assert!(!r[0].success);
    assert_eq!(r[0].succeeded_keys.as_deref(), Some(&[][..]));
    assert_eq!(stat(&t, "blocks_corrupt"), 0.0);
    t.shutdown().unwrap();
}

#[test]
fn out_of_memory_replies_fail_stores_with_their_cause() {
    let server = server_or_skip!(RedisServer::start_with(&[
        "--maxmemory",
        "2mb",
        "--maxmemory-policy",
        "noeviction",
    ]));
    let mem = SlotMemory::anonymous(256, SLOT_BYTES).unwrap();
    let mut cfg = config(server.addr(), "oom");
    cfg.breaker_failures = 100;
    let mut t = RedisTier::new(cfg, mem.clone()).unwrap();
    let keys: Vec<Key> = (0..256).map(|i| key(11, i)).collect();
    for (i, k) in keys.iter().enumerate() {
        fill(&mem, i as u32, k);
    }
    t.submit_store(job(1, Direction::Store, keys.clone(), (0..256).collect()));
    let r = wait_results(&mut t, 1, Duration::from_secs(10));
    assert!(!r[0].success, "4 MiB fit into a 2 MiB server?");
    assert!(stat(&t, "failures_oom") >= 1.0, "{:?}", t.stats());
    // What was stored before memory ran out is still served correctly.
    let stored = stat(&t, "blocks_stored") as usize;
    assert!(stored > 0 && stored < 256, "stored {stored}");
}

#[test]
fn auth_with_user_and_password() {
    let server = server_or_skip!(RedisServer::start_with(&[
        "--user", "default", "off", "--user", "kv", "on", ">s3cret", "~*", "&*", "+@all",
    ]));
    let mem = SlotMemory::anonymous(8, SLOT_BYTES).unwrap();
    let keys: Vec<Key> = (0..4).map(|i| key(12, i)).collect();

    let mut cfg = config(server.addr(), "auth");
    cfg.username = Some("kv".into());
    cfg.password = Some("wrong".into());
    cfg.breaker_failures = 100;
    let mut bad = RedisTier::new(cfg.clone(), mem.clone()).unwrap();
    for (i, k) in keys.iter().enumerate() {
        fill(&mem, i as u32, k);
    }
    bad.submit_store(job(1, Direction::Store, keys.clone(), vec![0, 1, 2, 3]));
    assert!(!wait_results(&mut bad, 1, Duration::from_secs(10))[0].success);

    cfg.password = Some("s3cret".into());
    let mut good = RedisTier::new(cfg, mem.clone()).unwrap();
    store_all(&mut good, &mem, &keys, 2);
    good.submit_load(job(3, Direction::Load, keys.clone(), vec![7, 6, 5, 4]));
    assert!(wait_results(&mut good, 1, Duration::from_secs(10))[0].success);
    assert!(holds(&mem, 7, &keys[0]) && holds(&mem, 4, &keys[3]));
}

#[test]
fn cluster_spreads_blocks_over_every_node() {
    let cluster = server_or_skip!(RedisCluster::start());
    let mem = SlotMemory::anonymous(128, SLOT_BYTES).unwrap();
    // Seeded with one node only: the client learns the others from it.
    let cfg = RedisTierConfig {
        nodes: vec![cluster.nodes[0].addr()],
        cluster: true,
        namespace: "cl".into(),
        connections: 2,
        ..RedisTierConfig::default()
    };
    let mut t = RedisTier::new(cfg.clone(), mem.clone()).unwrap();
    let keys: Vec<Key> = (0..60).map(|i| key(13, i)).collect();
    store_all(&mut t, &mem, &keys, 1);
    for n in &cluster.nodes {
        let size: u64 = n.cli_text(&["DBSIZE"]).parse().unwrap();
        assert!(size > 0, "node {} holds no block", n.port);
    }
    let slots: Vec<u32> = (64..124).collect();
    t.submit_load(job(2, Direction::Load, keys.clone(), slots.clone()));
    let r = wait_results(&mut t, 1, Duration::from_secs(10));
    assert!(r[0].success, "{:?}", r[0]);
    for (k, s) in keys.iter().zip(&slots) {
        assert!(holds(&mem, *s, k));
    }
    // A second instance seeded with another node finds them all.
    let mut cfg2 = cfg;
    cfg2.nodes = vec![cluster.nodes[2].addr()];
    let mut u = RedisTier::new(cfg2, mem.clone()).unwrap();
    let mut probe = keys.clone();
    probe.push(key(13, 1000));
    let answers = settle(&mut u, &probe);
    assert!(
        answers[..60].iter().all(|a| *a == TierLookup::Hit),
        "{answers:?}"
    );
    assert_eq!(answers[60], TierLookup::Miss);

    // Move a third of the slots (with their blocks) from node 0 to node 1:
    // the first tier's connections still route by the old map, get MOVED,
    // and follow.
    let id = |n: &RedisServer| n.cli_text(&["CLUSTER", "MYID"]);
    let (from, to) = (id(&cluster.nodes[0]), id(&cluster.nodes[1]));
    let before: u64 = cluster.nodes[1].cli_text(&["DBSIZE"]).parse().unwrap();
    let out = std::process::Command::new(redis_server::find_tool("redis-cli").unwrap())
        .args(["--cluster", "reshard", &cluster.nodes[0].addr()])
        .args(["--cluster-from", &from, "--cluster-to", &to])
        .args(["--cluster-slots", "2700", "--cluster-yes"])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stdout)
    );
    let after: u64 = cluster.nodes[1].cli_text(&["DBSIZE"]).parse().unwrap();
    assert!(after > before, "no block moved ({before} -> {after})");
    let slots: Vec<u32> = (0..60).collect();
    for s in &slots {
        mem.write(*s, 0, &vec![0u8; SLOT_BYTES]).unwrap();
    }
    t.submit_load(job(3, Direction::Load, keys.clone(), slots.clone()));
    let r = wait_results(&mut t, 1, Duration::from_secs(20));
    assert!(r[0].success, "{:?} {:?}", r[0], t.stats());
    for (k, s) in keys.iter().zip(&slots) {
        assert!(holds(&mem, *s, k));
    }
}

#[test]
fn misconfiguration_is_an_error_naming_the_problem() {
    let mem = SlotMemory::anonymous(4, 4096).unwrap();
    let bad = |f: &dyn Fn(&mut RedisTierConfig)| {
        let mut c = RedisTierConfig::default();
        f(&mut c);
        RedisTier::new(c, mem.clone()).err().unwrap().to_string()
    };
    assert!(bad(&|c| c.nodes.clear()).contains("at least one node"));
    assert!(bad(&|c| c.nodes = vec!["nohost".into()]).contains("host:port"));
    assert!(bad(&|c| c.nodes = vec!["h:port".into()]).contains("valid port"));
    assert!(bad(&|c| c.nodes = vec!["a:1".into(), "b:2".into()]).contains("exactly one"));
    assert!(bad(&|c| c.namespace.clear()).contains("namespace"));
    assert!(bad(&|c| c.connections = 0).contains("connections"));
    assert!(bad(&|c| c.ttl = Some(Duration::ZERO)).contains("ttl"));
    assert!(
        bad(&|c| {
            c.cluster = true;
            c.db = 2
        })
        .contains("database 0")
    );
    // A server that never answers (a listener that never accepts: the
    // kernel completes the connections, commands wait for replies), yet
    // creating a tier, a lookup and the end of a step do not wait for it.
    // Run on a thread, so that waiting fails the test instead of hanging it.
    let silent = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let c = RedisTierConfig {
        nodes: vec![silent.local_addr().unwrap().to_string()],
        connect_timeout: Duration::from_secs(3600),
        command_timeout: Duration::from_secs(3600),
        ..RedisTierConfig::default()
    };
    let (tx, rx) = std::sync::mpsc::channel();
    let m = mem.clone();
    std::thread::spawn(move || {
        let mut t = RedisTier::new(c, m).unwrap();
        let req = Arc::new(RequestInfo::default());
        let answer = t.lookup(&key(1, 1), &req);
        t.on_schedule_end();
        let _ = tx.send((t, answer));
    });
    let (mut t, answer) = rx
        .recv_timeout(GENEROUS)
        .expect("creating a tier, a lookup or ending a step waited on a server that never answers");
    assert_eq!(answer, TierLookup::Retry);
    // Closing the listener resets the connections it never accepted: the
    // worker's existence check fails, and the tier shuts down.
    drop(silent);
    t.shutdown().unwrap();
}

#[cfg(feature = "redis-tls")]
#[test]
fn tls_connections_verify_the_server_and_move_blocks() {
    let server = server_or_skip!(RedisServer::start_tls());
    let mem = SlotMemory::anonymous(8, SLOT_BYTES).unwrap();
    let keys: Vec<Key> = (0..4).map(|i| key(14, i)).collect();
    let mut cfg = config(server.addr(), "tls");
    cfg.tls = true;
    cfg.tls_ca_file = Some(server.ca_file());
    let mut t = RedisTier::new(cfg.clone(), mem.clone()).unwrap();
    store_all(&mut t, &mem, &keys, 1);
    t.submit_load(job(2, Direction::Load, keys.clone(), vec![7, 6, 5, 4]));
    assert!(wait_results(&mut t, 1, Duration::from_secs(10))[0].success);
    assert!(holds(&mem, 7, &keys[0]) && holds(&mem, 4, &keys[3]));
    // Without the test CA the server's certificate is not trusted.
    cfg.tls_ca_file = None;
    cfg.breaker_failures = 100;
    let mut u = RedisTier::new(cfg, mem.clone()).unwrap();
    u.submit_load(job(3, Direction::Load, keys.clone(), vec![0, 1, 2, 3]));
    assert!(!wait_results(&mut u, 1, Duration::from_secs(10))[0].success);
}

#[cfg(not(feature = "redis-tls"))]
#[test]
fn tls_without_the_feature_is_unsupported() {
    let mem = SlotMemory::anonymous(4, 4096).unwrap();
    let cfg = RedisTierConfig {
        tls: true,
        ..RedisTierConfig::default()
    };
    let e = RedisTier::new(cfg, mem).err().unwrap().to_string();
    assert!(e.contains("redis-tls"), "{e}");
}

#[test]
fn impossible_ttl_or_database_is_refused_at_creation() {
    let mem = SlotMemory::anonymous(4, 4096).unwrap();
    let bad = |f: &dyn Fn(&mut RedisTierConfig)| {
        let mut c = RedisTierConfig::default();
        f(&mut c);
        RedisTier::new(c, mem.clone())
            .err()
            .map(|e| e.to_string())
            .unwrap_or_default()
    };
    // Redis adds the current time to a PX expiry and refuses a sum past
    // i64::MAX ms: such a TTL would fail every store.
    let e = bad(&|c| c.ttl = Some(Duration::from_millis(i64::MAX as u64)));
    assert!(e.contains("ttl"), "{e:?}");
    assert!(bad(&|c| c.ttl = Some(Duration::from_millis(u64::MAX))).contains("ttl"));
    assert!(bad(&|c| c.ttl = Some(Duration::MAX)).contains("ttl"));
    let e = bad(&|c| c.db = -1);
    assert!(e.contains("db"), "{e:?}");
    assert!(bad(&|c| c.db = 1 << 40).contains("db"));
    assert_eq!(bad(&|c| c.ttl = Some(Duration::from_millis(1 << 62))), "");
}

#[test]
fn the_longest_ttl_accepted_works_with_a_server() {
    let server = server_or_skip!(RedisServer::start());
    let mem = SlotMemory::anonymous(4, SLOT_BYTES).unwrap();
    let mut cfg = config(server.addr(), "long-ttl");
    cfg.ttl = Some(Duration::from_millis(1 << 62));
    let mut t = RedisTier::new(cfg, mem.clone()).unwrap();
    store_all(&mut t, &mem, &[key(20, 1)], 1);
    let req = Arc::new(RequestInfo::default());
    assert_eq!(t.lookup(&key(20, 1), &req), TierLookup::Hit);
}

#[test]
fn events_stay_within_the_capacity_and_unannounced_keys_are_never_removed() {
    let server = server_or_skip!(RedisServer::start());
    let mem = SlotMemory::anonymous(16, SLOT_BYTES).unwrap();
    let mut t = RedisTier::new(config(server.addr(), "events"), mem.clone()).unwrap();
    t.set_event_capacity(4);
    let keys: Vec<Key> = (0..10).map(|i| key(21, i)).collect();
    store_all(&mut t, &mem, &keys, 1);
    assert_eq!(stat(&t, "events_queued"), 4.0);
    assert_eq!(stat(&t, "events_dropped"), 6.0);
    let mut ev = Vec::new();
    t.take_events(2, &mut ev);
    assert_eq!(ev.len(), 2, "a take gives at most what it is asked for");
    t.take_events(usize::MAX, &mut ev);
    assert_eq!(ev.len(), 4);
    assert!(ev.iter().all(|e| e.kind == EventKind::Stored));
    let announced = ev[0].key.unwrap();
    let silent = keys[9];
    assert!(!ev.iter().any(|e| e.key == Some(silent)));
    // Both leave Redis; loads find them gone.  Only the announced one is
    // announced as removed.
    let name = |k: &Key| String::from_utf8(redis_key_name("events", k)).unwrap();
    assert_eq!(
        server.cli_text(&["DEL", &name(&announced), &name(&silent)]),
        "2"
    );
    t.submit_load(job(
        2,
        Direction::Load,
        vec![announced, silent],
        vec![10, 11],
    ));
    assert!(!wait_results(&mut t, 1, Duration::from_secs(10))[0].success);
    ev.clear();
    t.take_events(usize::MAX, &mut ev);
    assert_eq!(
        ev,
        vec![kvtier_core::events::Event {
            kind: EventKind::Removed,
            key: Some(announced)
        }]
    );
}

#[test]
fn a_refused_password_is_described_for_the_error_log() {
    let server = server_or_skip!(RedisServer::start_with(&[
        "--user", "default", "off", "--user", "kv", "on", ">s3cret", "~*", "&*", "+@all",
    ]));
    let mem = SlotMemory::anonymous(8, SLOT_BYTES).unwrap();
    let mut cfg = config(server.addr(), "auth-log");
    cfg.username = Some("kv".into());
    cfg.password = Some("wrong".into());
    cfg.breaker_failures = 100;
    cfg.name = "cache".into();
    let mut t = RedisTier::new(cfg, mem.clone()).unwrap();
    let started = Instant::now();
    for i in 0..5 {
        t.submit_store(job(i, Direction::Store, vec![key(22, i as u32)], vec![0]));
        assert!(!wait_results(&mut t, 1, Duration::from_secs(10))[0].success);
    }
    let mut errors = Vec::new();
    t.take_errors(&mut errors);
    let took = started.elapsed();
    assert!(
        errors
            .iter()
            .any(|e| e.starts_with("redis tier \"cache\": connecting to") && e.contains("AUTH")),
        "{errors:?}"
    );
    assert!(errors.iter().any(|e| e.contains("store job")), "{errors:?}");
    // Five failures of each kind: a kind is described at most once a
    // second, so once each when they all fell within one second (as they
    // do unless the machine is very slow), never once per failure.
    let connects = errors
        .iter()
        .filter(|e| e.contains("connecting to"))
        .count();
    let stores = errors.iter().filter(|e| e.contains("store job")).count();
    let most = 1 + took.as_secs() as usize;
    assert_eq!(connects + stores, errors.len(), "{errors:?}");
    assert!(
        connects <= most && stores <= most,
        "more than one description a second within {took:?}: {errors:?}"
    );
}
