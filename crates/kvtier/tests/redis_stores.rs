//! The redis tier's namespace over time, against a real `redis-server`:
//! the layout fingerprint key (adopted, matched, refused naming both),
//! max age under its JSON names, clearing the namespace at shutdown, and
//! dropping blocks by key prefix (exactly the matching keys of the
//! namespace go; the layout key and other namespaces' keys stay, glob
//! characters in the namespace included; an empty prefix empties the
//! namespace; the tier forgets what it knew; a cluster refuses; the
//! manager's drop reaches the tier).

#![cfg(feature = "redis-tier")]

use std::sync::Arc;
use std::time::{Duration, Instant};

use kvtier_core::config::Config;
use kvtier_core::region::SlotMemory;
use kvtier_core::request::{Request, RequestInfo};
use kvtier_core::tiering::{Direction, Job, JobId, RequestParams, SecondaryTier, TierLookup};
use kvtier_core::tiers::redis::{RedisTier, RedisTierConfig, layout_key, redis_key_name};
use kvtier_core::{Error, Key};
use kvtier_testkit::common::store_filled;
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

fn name(namespace: &str, key: &Key) -> String {
    String::from_utf8(redis_key_name(namespace, key)).unwrap()
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

#[test]
fn a_drop_removes_exactly_the_matching_keys_of_the_namespace() {
    let Some(server) = redis_server::or_skip(RedisServer::start()) else {
        return;
    };
    let mem = SlotMemory::anonymous(8, SLOT_BYTES).unwrap();
    let a = |i: u8| Key::new(&[0xa0, i]).unwrap();
    let b = |i: u8| Key::new(&[0xb0, i]).unwrap();
    let ours = [a(0), a(1), a(2), b(0), b(1)];
    // `d*` is a namespace with a glob character: unescaped, its pattern
    // would match the namespace `dx` too.
    let mut tier = RedisTier::new(config(server.addr(), "d*", Some("f")), mem.clone()).unwrap();
    store(&mut tier, &ours);
    let mut other = RedisTier::new(config(server.addr(), "dx", Some("f")), mem).unwrap();
    store(&mut other, &ours);
    let request: Request = Arc::new(RequestInfo::default());
    assert_eq!(tier.lookup(&a(0), &request), TierLookup::Hit);

    let got = tier.drop_blocks(&[0xa0]).unwrap();
    assert_eq!((got.dropped, got.kept), (3, 0));
    for k in [a(0), a(1), a(2)] {
        assert!(!exists(&server, &name("d*", &k)), "{k:?} dropped");
    }
    for k in [b(0), b(1)] {
        assert!(exists(&server, &name("d*", &k)), "{k:?} kept");
    }
    assert!(ours.iter().all(|k| exists(&server, &name("dx", k))));
    assert!(exists(&server, &layout_key("d*")));
    // What the tier knew of the dropped keys is forgotten: it asks again.
    assert_eq!(tier.lookup(&a(0), &request), TierLookup::Retry);
    assert_eq!(tier.lookup(&b(0), &request), TierLookup::Hit);

    // An empty prefix drops the whole namespace but its layout key.
    let all = tier.drop_blocks(&[]).unwrap();
    assert_eq!((all.dropped, all.kept), (2, 0));
    assert!(ours.iter().all(|k| !exists(&server, &name("d*", k))));
    assert!(exists(&server, &layout_key("d*")), "the layout key stays");
    assert!(ours.iter().all(|k| exists(&server, &name("dx", k))));
    assert!(exists(&server, &layout_key("dx")));
    // After shutdown nothing is dropped.
    other.shutdown().unwrap();
    assert_eq!(other.drop_blocks(&[]).unwrap().dropped, 0);
    assert!(ours.iter().all(|k| exists(&server, &name("dx", k))));
}

#[test]
fn a_cluster_tier_cannot_drop_blocks() {
    let mut cfg = config("127.0.0.1:1".into(), "c", Some("f"));
    cfg.cluster = true;
    cfg.layout_fingerprint = None;
    let mem = SlotMemory::anonymous(2, SLOT_BYTES).unwrap();
    let mut tier = RedisTier::new(cfg, mem).unwrap();
    let e = tier.drop_blocks(b"").unwrap_err();
    assert!(
        matches!(&e, Error::Unsupported(m) if m.contains("cluster")),
        "{e}"
    );
}

#[test]
fn a_manager_drop_reaches_the_redis_tier() {
    let Some(server) = redis_server::or_skip(RedisServer::start()) else {
        return;
    };
    let json = format!(
        r#"{{"block_bytes": {SLOT_BYTES}, "primary": {{"capacity": 4}},
            "tiers": [{{"type": "redis", "options": {{"nodes": ["{}"], "namespace": "mdrop",
                        "connections": 1, "connect_timeout_ms": 30000,
                        "command_timeout_ms": 30000}}}}]}}"#,
        server.addr(),
    );
    let m = Config::from_json(&json).unwrap().build().unwrap();
    let r = m.request_begin("r", RequestParams::default()).unwrap().id;
    let keys: Vec<Key> = (1..=4u8).map(|i| Key::new(&[i; 8]).unwrap()).collect();
    store_filled(&m, r, &keys);
    m.request_finished(r).unwrap();
    let deadline = Instant::now() + GENEROUS;
    while !keys.iter().all(|k| exists(&server, &name("mdrop", k))) {
        assert!(Instant::now() < deadline, "the blocks never reached redis");
        m.schedule_end().unwrap();
        std::thread::sleep(Duration::from_millis(5));
    }
    while m.has_pending_work().unwrap() {
        assert!(Instant::now() < deadline, "the stores never finished");
        m.schedule_end().unwrap();
        std::thread::sleep(Duration::from_millis(5));
    }
    let report = m.drop_blocks(&[1], None).unwrap();
    assert_eq!(report.unsupported_tiers, 0, "redis drops blocks");
    // Key 1 from both tiers (idle in the primary tier).
    assert_eq!((report.dropped, report.kept), (2, 0));
    assert!(!exists(&server, &name("mdrop", &keys[0])));
    assert!(keys[1..].iter().all(|k| exists(&server, &name("mdrop", k))));
}
