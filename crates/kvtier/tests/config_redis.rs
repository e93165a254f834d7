//! A manager built from JSON with a `"redis"` tier, against a real
//! `redis-server` on loopback: blocks cascade, the redis workers' reports
//! wake the wake-up descriptor, evicted blocks come back with their bytes,
//! and the metrics name the tier.

#![cfg(feature = "redis-tier")]

use kvtier_testkit::redis_server;

use kvtier_core::Key;
use kvtier_core::config::Config;
use kvtier_core::tiering::{LookupResult, Manager, RequestParams};
use kvtier_testkit::common::store_filled;
use redis_server::RedisServer;

const BLOCK: usize = 4096;

fn readable(fd: i32, timeout_ms: i32) -> bool {
    let mut p = libc::pollfd {
        fd,
        events: libc::POLLIN,
        revents: 0,
    };
    (unsafe { libc::poll(&mut p, 1, timeout_ms) }) == 1 && p.revents & libc::POLLIN != 0
}

/// Ends the step, then runs empty steps, sleeping on the descriptor, until
/// nothing is pending.
fn settle(m: &Manager, fd: i32) {
    m.schedule_end().unwrap();
    for _ in 0..200 {
        m.schedule_end().unwrap();
        if !m.has_pending_work().unwrap() {
            return;
        }
        if readable(fd, 5000) {
            m.notifier().reset();
        }
    }
    panic!("work never finished");
}

#[test]
fn json_redis_tier_round_trips_and_wakes() {
    let Some(server) = redis_server::or_skip(RedisServer::start()) else {
        return;
    };
    let json = format!(
        r#"{{"block_bytes": {BLOCK}, "primary": {{"capacity": 4}},
            "tiers": [{{"type": "redis", "options": {{"nodes": ["{}"], "namespace": "cfg-{}",
                        "connections": 1, "connect_timeout_ms": 30000,
                        "command_timeout_ms": 30000}}}}]}}"#,
        server.addr(),
        std::process::id()
    );
    let m = Config::from_json(&json).unwrap().build().unwrap();
    assert_eq!(&*m.tier_name(1).unwrap(), "redis");
    let fd = m.notifier().fd().unwrap();
    let r = m.request_begin("r", RequestParams::default()).unwrap().id;
    let first: Vec<Key> = (1..=4u8).map(|i| Key::new(&[i; 8]).unwrap()).collect();
    store_filled(&m, r, &first);
    assert!(
        readable(fd, 60_000),
        "the redis worker's report wakes the fd"
    );
    settle(&m, fd);
    let second: Vec<Key> = (5..=8u8).map(|i| Key::new(&[i; 8]).unwrap()).collect();
    store_filled(&m, r, &second);
    settle(&m, fd);
    // Key 1 was evicted from the primary tier: it comes back from redis.
    let mut answer = m.lookup(r, &first[0]).unwrap();
    for _ in 0..50 {
        if answer == LookupResult::Hit {
            break;
        }
        assert_ne!(answer, LookupResult::Miss, "redis has the block");
        settle(&m, fd);
        answer = m.lookup(r, &first[0]).unwrap();
    }
    assert_eq!(answer, LookupResult::Hit);
    let mut slots = Vec::new();
    m.prepare_load(r, &first[..1], &mut slots).unwrap();
    let mut got = vec![0u8; BLOCK];
    m.slot_memory()
        .unwrap()
        .read(slots[0], 0, &mut got)
        .unwrap();
    assert!(
        got.iter().all(|&b| b == 1),
        "the promoted block has its bytes"
    );
    m.complete_load(r, &first[..1]).unwrap();
    let text = m.prometheus_text().unwrap();
    assert!(
        text.contains(
            "kvtier_tier_jobs_total{tier=\"redis\",medium=\"storage\",direction=\"load\"} 1"
        ),
        "{text}"
    );
    m.request_finished(r).unwrap();
    m.shutdown().unwrap();
}

#[test]
fn json_redis_options_redis_would_refuse_are_errors() {
    let err = |options: &str| {
        let json = format!(
            r#"{{"block_bytes": {BLOCK}, "tiers": [{{"type": "redis", "options": {options}}}]}}"#
        );
        match Config::from_json(&json).and_then(|c| c.build()) {
            Ok(_) => panic!("accepted: {options}"),
            Err(e) => e.to_string(),
        }
    };
    let e = err(r#"{"db": -1}"#);
    assert!(e.contains("tiers[0]") && e.contains("db"), "{e}");
    let e = err(r#"{"ttl_ms": 9223372036854775807}"#);
    assert!(e.contains("tiers[0]") && e.contains("ttl"), "{e}");
}

#[test]
fn a_refused_password_reaches_the_error_log() {
    let Some(server) = redis_server::or_skip(RedisServer::start_with(&[
        "--user", "default", "off", "--user", "kv", "on", ">s3cret", "~*", "&*", "+@all",
    ])) else {
        return;
    };
    let json = format!(
        r#"{{"block_bytes": {BLOCK}, "primary": {{"capacity": 64}},
            "tiers": [{{"type": "redis", "options": {{"nodes": ["{}"], "username": "kv",
                        "password": "wrong", "connections": 1, "breaker_failures": 1000}}}}]}}"#,
        server.addr()
    );
    let m = Config::from_json(&json).unwrap().build().unwrap();
    let fd = m.notifier().fd().unwrap();
    let r = m.request_begin("r", RequestParams::default()).unwrap().id;
    for i in 0..10u8 {
        store_filled(&m, r, &[Key::new(&[i; 8]).unwrap()]);
        settle(&m, fd);
    }
    let stats = m.stats().unwrap();
    let failed = stats
        .iter()
        .find(|s| s.tier == Some(1) && s.stat.name == "cascade_failures")
        .unwrap()
        .stat
        .value;
    assert_eq!(failed, 10.0);
    let mut errors = Vec::new();
    m.take_errors(&mut errors).unwrap();
    assert!(
        errors
            .iter()
            .any(|e| e.contains("connecting to") && e.contains("AUTH")),
        "{errors:?}"
    );
    // Repeats are counted, not all written out.
    assert!(errors.len() < 10, "{errors:?}");
}
