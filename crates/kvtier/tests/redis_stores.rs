//! The redis tier's namespace over time, against a real `redis-server`:
//! the layout fingerprint key (adopted, matched, refused naming both),
//! max age under its JSON names, and clearing the namespace at shutdown.

#![cfg(feature = "redis-tier")]

use std::sync::Arc;
use std::time::{Duration, Instant};

use kvtier_core::Key;
use kvtier_core::region::SlotMemory;
use kvtier_core::request::RequestInfo;
use kvtier_core::tiering::{Direction, Job, JobId, SecondaryTier};
use kvtier_core::tiers::redis::{RedisTier, RedisTierConfig, layout_key, redis_key_name};
use kvtier_testkit::redis_server::{self, RedisServer};

const SLOT_BYTES: usize = 4096;
const GENEROUS: Duration = Duration::from_secs(30);

fn config(addr: String, namespace: &str, fingerprint: Option<&str>) -> RedisTierConfig {
    RedisTierConfig {
        nodes: vec![addr],
        namespace: namespace.into(),
        connections: 1,
        connect_timeout: GENEROUS,
        command_timeout: GENEROUS,
        layout_fingerprint: fingerprint.map(String::from),
        ..RedisTierConfig::default()
    }
}

fn key(i: u8) -> Key {
    Key::new(&[7, i]).unwrap()
}

fn store(tier: &mut RedisTier, keys: &[Key]) {
    let slots: Vec<u32> = (0..keys.len() as u32).collect();
    tier.submit_store(Arc::new(Job {
        id: JobId(1),
        direction: Direction::Store,
        keys: keys.to_vec(),
        slots,
        request: Arc::new(RequestInfo::default()),
    }));
    let deadline = Instant::now() + GENEROUS;
    let mut out = Vec::new();
    while out.is_empty() {
        tier.poll_finished(usize::MAX, &mut out);
        assert!(Instant::now() < deadline, "the store did not finish");
        std::thread::sleep(Duration::from_millis(2));
    }
    assert!(out[0].success, "{:?}", out[0]);
}

fn exists(server: &RedisServer, name: &str) -> bool {
    server.cli_text(&["EXISTS", name]) == "1"
}

#[test]
fn a_namespace_adopts_the_first_fingerprint_and_refuses_another() {
    let Some(server) = redis_server::or_skip(RedisServer::start()) else {
        return;
    };
    let mem = SlotMemory::anonymous(4, SLOT_BYTES).unwrap();
    let a = "org/m|bfloat16|16|NHD";
    let tier = RedisTier::new(config(server.addr(), "fp", Some(a)), mem.clone()).unwrap();
    assert_eq!(tier.layout_fingerprint(), Some(a));
    assert_eq!(server.cli_text(&["GET", &layout_key("fp")]), a);
    drop(tier);
    // The same fingerprint opens again; none at all is not checked.
    RedisTier::new(config(server.addr(), "fp", Some(a)), mem.clone()).unwrap();
    RedisTier::new(config(server.addr(), "fp", None), mem.clone()).unwrap();
    let e = RedisTier::new(
        config(server.addr(), "fp", Some("org/m|fp8|16|NHD")),
        mem.clone(),
    )
    .err()
    .unwrap()
    .to_string();
    assert!(
        e.contains(&format!("{a:?}")) && e.contains("\"org/m|fp8|16|NHD\""),
        "{e}"
    );
    assert!(e.contains("another namespace"), "{e}");
    assert_eq!(
        server.cli_text(&["GET", &layout_key("fp")]),
        a,
        "left as it was"
    );
    // Another namespace is another store.
    RedisTier::new(config(server.addr(), "fp2", Some("org/m|fp8|16|NHD")), mem).unwrap();
}

#[test]
fn max_age_is_the_expiry_under_either_json_name() {
    let a: RedisTierConfig = serde_json::from_str(r#"{"max_age_ms": 5000}"#).unwrap();
    let b: RedisTierConfig = serde_json::from_str(r#"{"ttl_ms": 5000}"#).unwrap();
    assert_eq!(a.ttl, Some(Duration::from_secs(5)));
    assert_eq!(a, b);
    assert!(serde_json::from_str::<RedisTierConfig>(r#"{"max_age_ms": 1, "ttl_ms": 1}"#).is_err());
    let Some(server) = redis_server::or_skip(RedisServer::start()) else {
        return;
    };
    let mem = SlotMemory::anonymous(4, SLOT_BYTES).unwrap();
    let mut cfg = config(server.addr(), "age", None);
    cfg.ttl = Some(Duration::from_secs(3600));
    let mut tier = RedisTier::new(cfg, mem).unwrap();
    store(&mut tier, &[key(1)]);
    let name = String::from_utf8(redis_key_name("age", &key(1))).unwrap();
    let pttl: i64 = server.cli_text(&["PTTL", &name]).parse().unwrap();
    assert!((3_000_000..=3_600_000).contains(&pttl), "PTTL {pttl}");
}

#[test]
fn clear_on_shutdown_deletes_the_namespace_but_its_layout_key() {
    let Some(server) = redis_server::or_skip(RedisServer::start()) else {
        return;
    };
    let mem = SlotMemory::anonymous(4, SLOT_BYTES).unwrap();
    server.cli_text(&["SET", "other:keep", "1"]);
    // A namespace with glob characters clears only itself.
    server.cli_text(&["SET", "cl?x:1", "1"]);
    let mut cfg = config(server.addr(), "cl?", Some("f"));
    cfg.clear_on_shutdown = true;
    let mut tier = RedisTier::new(cfg, mem.clone()).unwrap();
    let keys: Vec<Key> = (0..3).map(key).collect();
    store(&mut tier, &keys);
    let names: Vec<String> = keys
        .iter()
        .map(|k| String::from_utf8(redis_key_name("cl?", k)).unwrap())
        .collect();
    assert!(names.iter().all(|n| exists(&server, n)));
    tier.shutdown().unwrap();
    assert!(
        names.iter().all(|n| !exists(&server, n)),
        "the blocks are gone"
    );
    assert!(exists(&server, &layout_key("cl?")), "the layout key stays");
    assert!(exists(&server, "other:keep") && exists(&server, "cl?x:1"));
    // Off (the default): the blocks stay.
    let mut tier = RedisTier::new(config(server.addr(), "kept", None), mem).unwrap();
    store(&mut tier, &keys[..1]);
    tier.shutdown().unwrap();
    assert!(exists(
        &server,
        &String::from_utf8(redis_key_name("kept", &keys[0])).unwrap()
    ));
    // Refused on a cluster.
    let mut cfg = config("127.0.0.1:1".into(), "c", None);
    cfg.cluster = true;
    cfg.clear_on_shutdown = true;
    let e = cfg.check().unwrap_err().to_string();
    assert!(e.contains("clear_on_shutdown"), "{e}");
}
