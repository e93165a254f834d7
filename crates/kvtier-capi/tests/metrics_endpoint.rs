//! The optional `/metrics` endpoint: served from JSON configuration on a
//! loopback port until the manager is freed, bad addresses and ports in
//! use refused at creation, and a real Prometheus server (Debian's
//! `prometheus` package, installed by `make test`; the test skips with a
//! message without it, or fails under `KVTIER_REQUIRE_ALL=1`) scraping it
//! and answering queries for a counter and a histogram quantile.

#[path = "support/exposition.rs"]
mod exposition;

use exposition::c_basics::last_error;
use std::io::{Read, Write};
use std::net::TcpStream;
use std::process::{Child, Command, Stdio};
use std::ptr::null_mut;
use std::sync::Arc;
use std::time::{Duration, Instant};

use exposition::{busy_manager, closed_port};
use kvtier::config::kvtier_manager_new_from_json;
use kvtier::health::{kvtier_manager_metrics_address, kvtier_manager_readiness};
use kvtier::kvtier_status as S;
use kvtier::manager::{kvtier_manager_free, kvtier_manager_shutdown};
use kvtier_core::serve::{CONTENT_TYPE, MetricsServer};
use kvtier_testkit::require::require_tool;

/// `GET path` on `port` of 127.0.0.1: status, headers, body.
fn get(port: u16, path: &str) -> std::io::Result<(u16, String, String)> {
    let mut s = TcpStream::connect(("127.0.0.1", port))?;
    s.set_read_timeout(Some(Duration::from_secs(10)))?;
    write!(s, "GET {path} HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n")?;
    let mut raw = String::new();
    s.read_to_string(&mut raw)?;
    let (head, body) = raw.split_once("\r\n\r\n").unwrap_or((&raw, ""));
    let status = head
        .split(' ')
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or(0);
    Ok((status, head.to_string(), body.to_string()))
}

fn new_from_json(json: &str) -> Result<*mut kvtier::manager::kvtier_manager, String> {
    let mut m = null_mut();
    match unsafe { kvtier_manager_new_from_json(json.as_ptr().cast(), json.len(), &mut m) } {
        S::Ok => Ok(m),
        s => Err(format!("{s:?}: {}", last_error())),
    }
}

#[test]
fn json_metrics_listen_serves_metrics_until_the_manager_is_freed() {
    let port = closed_port();
    let json =
        format!(r#"{{"primary": {{"capacity": 4}}, "metrics": {{"listen": "127.0.0.1:{port}"}}}}"#);
    let m = new_from_json(&json).unwrap();
    let (status, head, body) = get(port, "/metrics").unwrap();
    assert_eq!(status, 200, "{head}");
    assert!(
        head.to_ascii_lowercase()
            .contains(&format!("content-type: {CONTENT_TYPE}")),
        "{head}"
    );
    assert!(
        body.contains("# TYPE kvtier_manager_lookups_total counter\n"),
        "{body}"
    );
    let (status, _, _) = get(port, "/metrics?x=1").unwrap();
    assert_eq!(status, 200);
    let (status, _, _) = get(port, "/").unwrap();
    assert_eq!(status, 404);
    unsafe { kvtier_manager_free(m) };
    assert!(
        get(port, "/metrics").is_err(),
        "the endpoint stops with the manager"
    );
}

/// `kvtier_manager_metrics_address` with `capacity` bytes (filled with
/// 0x7f first): the status, the size written, the buffer.
fn metrics_address(
    m: *mut kvtier::manager::kvtier_manager,
    capacity: usize,
) -> (S, usize, Vec<u8>) {
    let mut buf = vec![0x7fu8; capacity];
    let mut written = 0usize;
    let s = unsafe {
        kvtier_manager_metrics_address(m, buf.as_mut_ptr().cast(), capacity, &mut written)
    };
    (s, written, buf)
}

#[test]
fn port_0_is_reported_by_metrics_address_under_the_buffer_idiom() {
    let m = new_from_json(r#"{"primary": {"capacity": 4}, "metrics": {"listen": "127.0.0.1:0"}}"#)
        .unwrap();
    let (s, needed, _) = metrics_address(m, 0);
    assert_eq!(s, S::BufferTooSmall, "{}", last_error());
    let (s, written, buf) = metrics_address(m, needed - 1);
    assert_eq!((s, written), (S::BufferTooSmall, needed));
    assert!(
        buf.iter().all(|&b| b == 0x7f),
        "nothing written when too small"
    );
    let (s, written, buf) = metrics_address(m, needed);
    assert_eq!((s, written), (S::Ok, needed), "{}", last_error());
    assert_eq!(buf[needed - 1], 0, "NUL-terminated");
    let text = std::str::from_utf8(&buf[..needed - 1]).unwrap();
    let address: std::net::SocketAddr = text.parse().unwrap();
    assert!(
        text.starts_with("127.0.0.1:") && address.port() != 0,
        "{text}"
    );
    let (status, _, body) = get(address.port(), "/healthz").unwrap();
    assert_eq!((status, body.as_str()), (200, "ok\n"));
    let (status, _, body) = get(address.port(), "/readyz").unwrap();
    assert_eq!((status, body.as_str()), (200, "ready\n"));
    unsafe { kvtier_manager_free(m) };
    // Without an endpoint: NOT_FOUND, nothing written.
    let m = new_from_json(r#"{"primary": {"capacity": 4}}"#).unwrap();
    let (s, written, buf) = metrics_address(m, 64);
    assert_eq!(s, S::NotFound);
    assert!(
        last_error().contains("no /metrics endpoint"),
        "{}",
        last_error()
    );
    assert_eq!(written, 0);
    assert!(buf.iter().all(|&b| b == 0x7f));
    unsafe { kvtier_manager_free(m) };
}

#[test]
fn an_ipv6_endpoint_is_written_in_brackets() {
    let Ok(m) = new_from_json(r#"{"primary": {"capacity": 4}, "metrics": {"listen": "[::1]:0"}}"#)
    else {
        eprintln!("skipped: this host cannot listen on [::1]");
        return;
    };
    let (s, written, buf) = metrics_address(m, 64);
    assert_eq!(s, S::Ok);
    let text = std::str::from_utf8(&buf[..written - 1]).unwrap();
    assert!(
        text.starts_with("[::1]:") && !text.ends_with(":0"),
        "{text}"
    );
    unsafe { kvtier_manager_free(m) };
}

/// `kvtier_manager_readiness` into `capacity` bytes.
fn readiness(m: *mut kvtier::manager::kvtier_manager, capacity: usize) -> (S, usize, Vec<u8>) {
    let mut buf = vec![0x7fu8; capacity];
    let mut written = 0usize;
    let s = unsafe { kvtier_manager_readiness(m, buf.as_mut_ptr().cast(), capacity, &mut written) };
    (s, written, buf)
}

#[test]
fn readiness_is_empty_when_ready_and_the_reasons_when_not() {
    let m = new_from_json(r#"{"primary": {"capacity": 4}}"#).unwrap();
    let (s, written, buf) = readiness(m, 1);
    assert_eq!((s, written, buf[0]), (S::Ok, 1, 0), "ready: the empty text");
    let (s, written, _) = readiness(m, 0);
    assert_eq!((s, written), (S::BufferTooSmall, 1));
    assert_eq!(unsafe { kvtier_manager_shutdown(m) }, S::Ok);
    let want = "manager: shut down\n";
    let (s, needed, _) = readiness(m, 0);
    assert_eq!((s, needed), (S::BufferTooSmall, want.len() + 1));
    let (s, _, buf) = readiness(m, needed - 1);
    assert_eq!(s, S::BufferTooSmall);
    assert!(
        buf.iter().all(|&b| b == 0x7f),
        "nothing written when too small"
    );
    let (s, written, buf) = readiness(m, needed);
    assert_eq!((s, written), (S::Ok, needed));
    assert_eq!(&buf[..needed], format!("{want}\0").as_bytes());
    unsafe { kvtier_manager_free(m) };
}

/// `request` sent as is on a fresh connection to `port`; everything the
/// server sends back until it closes.
fn exchange(port: u16, request: &str) -> String {
    let mut s = TcpStream::connect(("127.0.0.1", port)).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    s.write_all(request.as_bytes()).unwrap();
    let mut raw = String::new();
    s.read_to_string(&mut raw).unwrap();
    raw
}

#[test]
fn head_has_the_length_but_no_body_other_methods_are_405_and_garbage_400() {
    let m = Arc::new(
        kvtier_core::config::Config::from_json(r#"{"primary": {"capacity": 4}}"#)
            .unwrap()
            .build()
            .unwrap(),
    );
    let server = MetricsServer::start("127.0.0.1:0", &m).unwrap();
    let port = server.address().port();
    let (_, _, body) = get(port, "/metrics").unwrap();
    let head = exchange(port, "HEAD /metrics HTTP/1.1\r\nHost: a\r\n\r\n");
    assert!(head.starts_with("HTTP/1.1 200 OK\r\n"), "{head}");
    assert!(
        head.contains(&format!("\r\nContent-Length: {}\r\n", body.len())),
        "{head}"
    );
    assert!(head.ends_with("\r\nConnection: close\r\n\r\n"), "{head}");
    let post = exchange(port, "POST /metrics HTTP/1.1\r\nContent-Length: 0\r\n\r\n");
    assert!(post.starts_with("HTTP/1.1 405 "), "{post}");
    assert!(post.contains("\r\nAllow: GET, HEAD\r\n"), "{post}");
    let garbage = exchange(port, "hello\r\n\r\n");
    assert!(garbage.starts_with("HTTP/1.1 400 "), "{garbage}");
    // A client that closes before its request ends costs nothing.
    drop(TcpStream::connect(("127.0.0.1", port)).unwrap());
    let (status, _, _) = get(port, "/metrics").unwrap();
    assert_eq!(status, 200);
}

#[test]
fn bad_addresses_and_ports_in_use_are_errors_at_creation() {
    let json = |listen: &str| {
        format!(r#"{{"primary": {{"capacity": 4}}, "metrics": {{"listen": "{listen}"}}}}"#)
    };
    let e = new_from_json(&json("9400")).unwrap_err();
    assert!(
        e.starts_with("InvalidArgument") && e.contains("metrics.listen") && e.contains("\"9400\""),
        "{e}"
    );
    let e = new_from_json(&json("127.0.0.1:99999")).unwrap_err();
    assert!(e.contains("metrics.listen"), "{e}");
    let e = new_from_json(r#"{"metrics": {"listen": "127.0.0.1:1", "port": 2}}"#).unwrap_err();
    assert!(e.contains("metrics") && e.contains("port"), "{e}");
    // A port in use.
    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = taken.local_addr().unwrap().port();
    let e = new_from_json(&json(&format!("127.0.0.1:{port}"))).unwrap_err();
    assert!(
        e.contains(&format!("cannot listen on 127.0.0.1:{port}")),
        "{e}"
    );
    // No metrics section: no endpoint.
    let m = new_from_json(r#"{"primary": {"capacity": 4}}"#).unwrap();
    unsafe { kvtier_manager_free(m) };
}

/// A Prometheus server, killed when dropped.
struct Prometheus {
    child: Child,
    port: u16,
    _dir: tempfile::TempDir,
}

impl Drop for Prometheus {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Starts Prometheus scraping `target` every second; `None` when it is
/// not installed (after [`require_tool`]: the test skips, or fails under
/// `KVTIER_REQUIRE_ALL=1`).
fn start_prometheus(target: std::net::SocketAddr) -> Option<Prometheus> {
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("prometheus.yml");
    std::fs::write(
        &config,
        format!(
            "global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\n\
             scrape_configs:\n  - job_name: kvtier\n    static_configs:\n      - targets: ['{target}']\n"
        ),
    )
    .unwrap();
    let port = closed_port();
    let exe = require_tool("prometheus", "apt-get install -y prometheus")?;
    let child = Command::new(exe)
        .arg(format!("--config.file={}", config.display()))
        .arg(format!(
            "--storage.tsdb.path={}",
            dir.path().join("data").display()
        ))
        .arg(format!("--web.listen-address=127.0.0.1:{port}"))
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .ok()?;
    Some(Prometheus {
        child,
        port,
        _dir: dir,
    })
}

/// `query` percent-encoded for a URL.
fn encode(query: &str) -> String {
    query
        .bytes()
        .map(|b| {
            if b.is_ascii_alphanumeric() || b"-_.~".contains(&b) {
                (b as char).to_string()
            } else {
                format!("%{b:02X}")
            }
        })
        .collect()
}

/// The value of the single result of instant query `query`, once
/// Prometheus has one (at most 60 s).
fn query_value(p: &Prometheus, query: &str) -> f64 {
    let deadline = Instant::now() + Duration::from_secs(60);
    let mut last = String::new();
    while Instant::now() < deadline {
        if let Ok((200, _, body)) = get(p.port, &format!("/api/v1/query?query={}", encode(query))) {
            let v: serde_json::Value = serde_json::from_str(&body).unwrap();
            if let Some(value) = v["data"]["result"][0]["value"][1].as_str() {
                return value.parse().unwrap();
            }
            last = body;
        }
        std::thread::sleep(Duration::from_millis(250));
    }
    panic!("Prometheus never answered {query}: {last}");
}

#[test]
fn a_real_prometheus_scrapes_the_endpoint_and_answers_queries() {
    let dir = tempfile::tempdir().unwrap();
    let m = Arc::new(busy_manager(dir.path()));
    let server = MetricsServer::start("127.0.0.1:0", &m).unwrap();
    let Some(p) = start_prometheus(server.address()) else {
        return;
    };
    let lookups = m.manager_stats().unwrap().lookups as f64;
    assert!(lookups > 0.0);
    assert_eq!(
        query_value(&p, "kvtier_manager_lookups_total"),
        lookups,
        "the counter as the manager counts it"
    );
    assert_eq!(
        query_value(&p, "kvtier_manager_lookup_hits_total{tier=\"fs\"}"),
        1.0
    );
    let median = query_value(
        &p,
        "histogram_quantile(0.5, kvtier_tier_job_duration_seconds_bucket{tier=\"fs\",direction=\"store\"})",
    );
    assert!(
        median > 0.0 && median <= 10.0,
        "the median fs store took {median} s"
    );
    let up = query_value(&p, "up{job=\"kvtier\"}");
    assert_eq!(up, 1.0, "the scrape succeeded");
    drop(p);
    drop(server);
    m.shutdown().unwrap();
}
