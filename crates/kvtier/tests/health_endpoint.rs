//! `/healthz` and `/readyz` beside `/metrics`: what each answers for a
//! ready manager, for tiers that cannot be used (a Redis tier whose
//! circuit breaker opened against a killed `redis-server`, a file-system
//! tier whose directory is gone, a tier that says so itself), for a manager
//! that does not answer, is shut down, or is gone; `HEAD` like `GET`;
//! kvtierd's endpoint answers them for its manager.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::sync::Arc;
use std::sync::mpsc;
use std::time::{Duration, Instant};

use kvtier_core::Key;
use kvtier_core::config::Config;
use kvtier_core::error::Result;
use kvtier_core::request::Request;
use kvtier_core::serve::{HEALTH_TIMEOUT, MetricsServer};
use kvtier_core::tiering::{JobRef, JobResult, Manager, SecondaryTier, TierLookup, TierReadiness};

/// `method path` on `port` of 127.0.0.1: status and body.
fn ask(port: u16, method: &str, path: &str) -> (u16, String) {
    let mut s = TcpStream::connect(("127.0.0.1", port)).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    write!(s, "{method} {path} HTTP/1.1\r\nHost: a\r\n\r\n").unwrap();
    let mut raw = String::new();
    s.read_to_string(&mut raw).unwrap();
    let (head, body) = raw.split_once("\r\n\r\n").unwrap_or((&raw, ""));
    let status = head.split(' ').nth(1).and_then(|c| c.parse().ok()).unwrap();
    let length: usize = head
        .lines()
        .find_map(|l| l.strip_prefix("Content-Length: "))
        .and_then(|n| n.parse().ok())
        .unwrap();
    if method == "HEAD" {
        assert_eq!(body, "", "HEAD has no body");
    } else {
        assert_eq!(body.len(), length, "{raw}");
    }
    (status, body.to_string())
}

/// A manager of 4 slots and no secondary tier.
fn plain() -> Arc<Manager> {
    let json = r#"{"primary": {"capacity": 4}}"#;
    Arc::new(Config::from_json(json).unwrap().build().unwrap())
}

/// GET and HEAD of `path` agree on the status; the GET's.
fn probe(port: u16, path: &str) -> (u16, String) {
    let (status, body) = ask(port, "GET", path);
    assert_eq!(ask(port, "HEAD", path).0, status, "HEAD {path}");
    (status, body)
}

#[test]
fn a_ready_manager_answers_200_to_both_probes() {
    let m = plain();
    let server = MetricsServer::start("127.0.0.1:0", &m).unwrap();
    let port = server.address().port();
    assert_ne!(port, 0, "port 0 is reported as the port picked");
    assert_eq!(probe(port, "/healthz"), (200, "ok\n".to_string()));
    assert_eq!(probe(port, "/readyz"), (200, "ready\n".to_string()));
    assert_eq!(probe(port, "/readyz?verbose").0, 200);
    assert!(m.readiness().unwrap().is_ready());
    let (status, _) = ask(port, "POST", "/healthz");
    assert_eq!(status, 405);
}

#[test]
fn a_shut_down_manager_is_neither_healthy_nor_ready_and_a_gone_one_says_so() {
    let m = plain();
    let server = MetricsServer::start("127.0.0.1:0", &m).unwrap();
    let port = server.address().port();
    m.shutdown().unwrap();
    let (status, body) = probe(port, "/healthz");
    assert_eq!(status, 503);
    assert!(body.contains("shut down"), "{body}");
    assert_eq!(
        probe(port, "/readyz"),
        (503, "not ready:\nmanager: shut down\n".to_string())
    );
    drop(m);
    for path in ["/healthz", "/readyz", "/metrics"] {
        assert_eq!(
            probe(port, path),
            (503, "the manager is gone\n".to_string()),
            "{path}"
        );
    }
}

/// A tier that says it is not ready, and whose shutdown waits for a
/// signal (holding the manager's lock meanwhile).
struct Gate {
    release: mpsc::Receiver<()>,
}

impl SecondaryTier for Gate {
    fn name(&self) -> &str {
        "gate"
    }
    fn lookup(&mut self, _: &Key, _: &Request) -> TierLookup {
        TierLookup::Miss
    }
    fn submit_store(&mut self, _: JobRef) {}
    fn submit_load(&mut self, _: JobRef) {}
    fn poll_finished(&mut self, _: usize, _: &mut Vec<JobResult>) {}
    fn has_pending_work(&self) -> bool {
        false
    }
    fn drain(&mut self) -> Result<()> {
        Ok(())
    }
    fn shutdown(&mut self) -> Result<()> {
        let _ = self.release.recv();
        Ok(())
    }
    fn readiness(&self) -> TierReadiness {
        TierReadiness::NotReady("the gate is closed".into())
    }
}

#[test]
fn a_tier_that_is_not_ready_is_named_and_a_manager_that_does_not_answer_is_unhealthy() {
    let m = plain();
    let (release, wait) = mpsc::channel();
    m.add_tier(Box::new(Gate { release: wait })).unwrap();
    let server = MetricsServer::start("127.0.0.1:0", &m).unwrap();
    let port = server.address().port();
    assert_eq!(probe(port, "/healthz").0, 200);
    assert_eq!(
        probe(port, "/readyz"),
        (
            503,
            "not ready:\ntier 1 (gate): the gate is closed\n".to_string()
        )
    );
    // The tier's shutdown holds the manager's lock until released.
    let closing = {
        let m = m.clone();
        std::thread::spawn(move || m.shutdown())
    };
    let deadline = Instant::now() + Duration::from_secs(30);
    let body = loop {
        let (status, body) = ask(port, "GET", "/healthz");
        if status == 503 {
            break body;
        }
        assert!(
            Instant::now() < deadline,
            "the shutdown never took the lock"
        );
        std::thread::sleep(Duration::from_millis(20));
    };
    assert!(
        body.contains(&format!(
            "did not answer within {} ms",
            HEALTH_TIMEOUT.as_millis()
        )),
        "{body}"
    );
    release.send(()).unwrap();
    closing.join().unwrap().unwrap();
    let (status, body) = probe(port, "/healthz");
    assert_eq!(status, 503);
    assert!(body.contains("shut down"), "{body}");
}

#[test]
fn an_fs_tier_whose_directory_is_gone_is_not_ready() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("blocks");
    let json = format!(
        r#"{{"block_bytes": 4096, "primary": {{"capacity": 4}},
            "tiers": [{{"type": "fs", "options": {{"directory": "{}"}}}}]}}"#,
        root.display()
    );
    let m = Arc::new(Config::from_json(&json).unwrap().build().unwrap());
    let server = MetricsServer::start("127.0.0.1:0", &m).unwrap();
    let port = server.address().port();
    assert_eq!(probe(port, "/readyz").0, 200);
    std::fs::remove_dir_all(&root).unwrap();
    let (status, body) = probe(port, "/readyz");
    assert_eq!(status, 503, "{body}");
    assert!(
        body.starts_with("not ready:\ntier 1 (fs): directory ")
            && body.contains(&root.display().to_string()),
        "{body}"
    );
    assert_eq!(probe(port, "/healthz").0, 200, "alive all the same");
}

#[cfg(feature = "redis-tier")]
#[test]
fn a_redis_tier_whose_breaker_opened_is_not_ready() {
    use kvtier_core::tiering::RequestParams;
    use kvtier_testkit::common::store_filled;
    use kvtier_testkit::redis_server::{self, RedisServer};
    let Some(mut redis) = redis_server::or_skip(RedisServer::start()) else {
        return;
    };
    // One failure opens the breaker; no probe closes it during the test.
    let json = format!(
        r#"{{"block_bytes": 4096, "primary": {{"capacity": 4}},
            "tiers": [{{"type": "redis", "options": {{"nodes": ["{}"], "connections": 1,
                        "breaker_failures": 1, "breaker_cooldown_ms": 600000,
                        "connect_timeout_ms": 30000, "command_timeout_ms": 30000}}}}]}}"#,
        redis.addr()
    );
    let m = Arc::new(Config::from_json(&json).unwrap().build().unwrap());
    let server = MetricsServer::start("127.0.0.1:0", &m).unwrap();
    let port = server.address().port();
    assert_eq!(probe(port, "/readyz"), (200, "ready\n".to_string()));
    redis.kill();
    let r = m.request_begin("r", RequestParams::default()).unwrap().id;
    let keys: Vec<Key> = (1..=2u8).map(|i| Key::new(&[i; 8]).unwrap()).collect();
    store_filled(&m, r, &keys);
    // The cascade to the dead server fails, which opens the breaker.
    let deadline = Instant::now() + Duration::from_secs(60);
    while m.readiness().unwrap().is_ready() {
        assert!(Instant::now() < deadline, "the breaker never opened");
        m.schedule_end().unwrap();
        std::thread::sleep(Duration::from_millis(20));
    }
    let (status, body) = probe(port, "/readyz");
    assert_eq!(status, 503, "{body}");
    assert!(
        body.starts_with("not ready:\ntier 1 (redis): circuit breaker open for "),
        "{body}"
    );
    assert_eq!(probe(port, "/healthz").0, 200, "alive all the same");
}

#[test]
fn kvtierds_endpoint_answers_the_probes_for_its_manager() {
    let running = kvtier_testkit::server::start(4, r#", "metrics": {"listen": "127.0.0.1:0"}"#);
    let port = running.server.metrics_address().unwrap().port();
    assert_eq!(probe(port, "/healthz"), (200, "ok\n".to_string()));
    assert_eq!(probe(port, "/readyz"), (200, "ready\n".to_string()));
    running.server.manager().shutdown().unwrap();
    assert_eq!(
        probe(port, "/readyz"),
        (503, "not ready:\nmanager: shut down\n".to_string())
    );
    assert_eq!(probe(port, "/healthz").0, 503);
}
