//! The `/metrics` endpoint against clients that misbehave (an HTTP abuse
//! matrix): one that pipelines requests and never reads, a huge header
//! line, a client sending one byte a second, a thousand idle connections,
//! a process out of descriptors, scrapes while the manager is freed.  In
//! each, other scrapes are answered, the endpoint's threads, descriptors
//! and memory stay bounded, and `kvtier_manager_free` returns promptly.
//!
//! Own main (`harness = false`): the cases run one after another, so the
//! process's thread and descriptor counts are the endpoint's.  The
//! descriptor flood runs in a child (this binary re-executed with
//! `KVTIER_ABUSE_CHILD` set), because it lowers RLIMIT_NOFILE.  `cargo test
//! --test metrics_abuse -- WORD` runs the cases whose names contain WORD.

#[path = "support/exposition.rs"]
#[allow(unused)]
mod exposition;

use std::ffi::CStr;
use std::io::{ErrorKind, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::process::Command;
use std::ptr::null_mut;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use exposition::closed_port;
use kvtier::config::kvtier_manager_new_from_json;
use kvtier::kvtier_status as S;
use kvtier::manager::{kvtier_manager, kvtier_manager_free};
use kvtier_core::config::Config;
use kvtier_core::serve::MetricsServer;
use kvtier_core::tiering::Manager;

/// The documented bounds (docs/configuration.md, `metrics`).
const MAX_CONNECTIONS: usize = 16;
const MAX_HEAD_BYTES: usize = 8192;
const REQUEST_TIMEOUT: Duration = Duration::from_secs(5);
/// How long `kvtier_manager_free` may take, whatever the clients do (the
/// promise is a second; this leaves room for a loaded machine).
const FREE_BOUND: Duration = Duration::from_secs(2);
/// A scrape that takes this long is hung.
const HUNG: Duration = Duration::from_secs(30);

const CHILD_VAR: &str = "KVTIER_ABUSE_CHILD";

fn main() {
    if let Ok(case) = std::env::var(CHILD_VAR) {
        match case.as_str() {
            "descriptor_flood" => descriptor_flood_child(),
            other => panic!("no child case {other:?}"),
        }
        println!("child ok");
        return;
    }
    raise_descriptor_limit();
    let cases: [(&str, fn()); 7] = [
        (
            "a_client_that_pipelines_and_never_reads_blocks_no_one_and_free_returns_promptly",
            pipelining_client_that_never_reads,
        ),
        (
            "a_huge_header_line_is_cut_at_the_head_cap_and_memory_stays_bounded",
            huge_header_line,
        ),
        (
            "a_slowloris_client_is_dropped_at_its_deadline_while_others_are_served",
            slowloris,
        ),
        (
            "a_thousand_idle_connections_take_no_threads_and_at_most_the_cap_in_descriptors",
            thousand_idle_connections,
        ),
        (
            "a_descriptor_flood_pauses_accepting_and_serving_resumes_after_it",
            descriptor_flood,
        ),
        (
            "an_idle_endpoint_sleeps_until_a_client_or_a_deadline_wakes_it",
            idle_endpoint_sleeps,
        ),
        (
            "scrapes_during_free_are_answered_or_refused_and_free_returns_promptly",
            scrapes_during_free,
        ),
    ];
    let filters: Vec<String> = std::env::args()
        .skip(1)
        .filter(|a| !a.starts_with('-'))
        .collect();
    for (name, case) in cases {
        if filters.is_empty() || filters.iter().any(|f| name.contains(f.as_str())) {
            println!("case {name} ...");
            let start = Instant::now();
            case();
            println!("case {name} ok ({:.1} s)", start.elapsed().as_secs_f64());
        }
    }
}

/// 1,000 client sockets and the endpoint's must fit under the soft limit.
fn raise_descriptor_limit() {
    let mut l = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: a valid rlimit to fill, then to read.
    unsafe {
        assert_eq!(libc::getrlimit(libc::RLIMIT_NOFILE, &mut l), 0);
        l.rlim_cur = l.rlim_max.min(8192);
        assert_eq!(libc::setrlimit(libc::RLIMIT_NOFILE, &l), 0);
    }
    assert!(l.rlim_cur >= 1200, "RLIMIT_NOFILE hard limit {l:?} too low");
}

fn manager() -> Arc<Manager> {
    let json = r#"{"primary": {"capacity": 4}}"#;
    Arc::new(Config::from_json(json).unwrap().build().unwrap())
}

/// A manager made through the C API, serving `/metrics` on the returned
/// port.
fn c_manager() -> (*mut kvtier_manager, u16) {
    let port = closed_port();
    let json =
        format!(r#"{{"primary": {{"capacity": 4}}, "metrics": {{"listen": "127.0.0.1:{port}"}}}}"#);
    let mut m = null_mut();
    let s = unsafe { kvtier_manager_new_from_json(json.as_ptr().cast(), json.len(), &mut m) };
    assert_eq!(s, S::Ok, "{:?}", unsafe {
        CStr::from_ptr(kvtier::kvtier_last_error_message())
    });
    (m, port)
}

/// `kvtier_manager_free(m)` on a thread of its own: how long it took,
/// failing once it took longer than [`FREE_BOUND`] (the thread is left
/// stuck, and the process ends with the failure).
fn timed_free(m: *mut kvtier_manager) -> Duration {
    let m = m as usize;
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let start = Instant::now();
        unsafe { kvtier_manager_free(m as *mut kvtier_manager) };
        let _ = tx.send(start.elapsed());
    });
    let took = rx
        .recv_timeout(FREE_BOUND)
        .unwrap_or_else(|_| panic!("kvtier_manager_free still running after {FREE_BOUND:?}"));
    println!(
        "  kvtier_manager_free took {:.1} ms",
        took.as_secs_f64() * 1e3
    );
    took
}

/// `GET /metrics` from a fresh connection (HTTP/1.1, so the server may
/// keep it open; when it says it closes, after it has): the status and
/// body, or the error (a read that found nothing within [`HUNG`] is one).
fn scrape(port: u16) -> std::io::Result<(u16, String)> {
    let mut s = TcpStream::connect(("127.0.0.1", port))?;
    s.set_read_timeout(Some(HUNG))?;
    s.write_all(b"GET /metrics HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")?;
    let mut raw = Vec::new();
    let mut buf = [0u8; 65536];
    let complete = |raw: &[u8]| {
        let text = String::from_utf8_lossy(raw);
        let (head, body) = text.split_once("\r\n\r\n")?;
        let length = head.lines().find_map(|l| {
            let (name, value) = l.split_once(':')?;
            name.eq_ignore_ascii_case("content-length")
                .then(|| value.trim().parse::<usize>().ok())?
        })?;
        (body.len() >= length).then_some(())
    };
    while complete(&raw).is_none() {
        match s.read(&mut buf)? {
            0 => break,
            n => raw.extend_from_slice(&buf[..n]),
        }
    }
    // When the server closes after the response, until it has.
    if String::from_utf8_lossy(&raw)
        .to_ascii_lowercase()
        .contains("\r\nconnection: close\r\n")
    {
        s.read_to_end(&mut raw)?;
    }
    let raw = String::from_utf8_lossy(&raw).into_owned();
    let (head, body) = raw.split_once("\r\n\r\n").unwrap_or((&raw, ""));
    let status = head.split(' ').nth(1).and_then(|c| c.parse().ok());
    Ok((status.unwrap_or(0), body.to_string()))
}

/// Asserts `GET /metrics` answers 200 with the manager's text.
fn scrape_ok(port: u16, what: &str) {
    let start = Instant::now();
    let (status, body) = scrape(port).unwrap_or_else(|e| panic!("{what}: scrape failed: {e}"));
    assert_eq!(status, 200, "{what}: {body}");
    assert!(
        body.contains("# TYPE kvtier_manager_lookups_total counter\n"),
        "{what}: {body}"
    );
    println!(
        "  {what}: 200 in {:.1} ms",
        start.elapsed().as_secs_f64() * 1e3
    );
}

fn count_entries(dir: &str) -> usize {
    std::fs::read_dir(dir).unwrap().count()
}

fn threads() -> usize {
    count_entries("/proc/self/task")
}

fn descriptors() -> usize {
    count_entries("/proc/self/fd")
}

/// A field of /proc/self/status, in KiB.
fn status_kib(field: &str) -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap();
    let line = status
        .lines()
        .find(|l| l.starts_with(field))
        .unwrap_or_else(|| panic!("no {field} in /proc/self/status"));
    line.split_whitespace().nth(1).unwrap().parse().unwrap()
}

/// Whether the peer closed `s` (end of file or reset) within `within`;
/// false when it is still open then.
fn closed_by_peer(s: &mut TcpStream, within: Duration) -> bool {
    s.set_read_timeout(Some(within)).unwrap();
    let mut buf = [0u8; 4096];
    loop {
        match s.read(&mut buf) {
            Ok(0) => return true,
            Ok(_) => {}
            Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {
                return false;
            }
            Err(_) => return true,
        }
    }
}

fn pipelining_client_that_never_reads() {
    let (m, port) = c_manager();
    scrape_ok(port, "before");
    let mut pipeliner = TcpStream::connect(("127.0.0.1", port)).unwrap();
    pipeliner
        .set_write_timeout(Some(Duration::from_secs(2)))
        .unwrap();
    let chunk = b"GET /metrics HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n".repeat(1000);
    let mut sent = 0;
    while sent < 16 << 20 {
        match pipeliner.write(&chunk) {
            Ok(n) => sent += n,
            Err(_) => break,
        }
    }
    println!("  the pipeliner sent {sent} bytes of requests, reading nothing");
    for i in 0..3 {
        scrape_ok(port, &format!("scrape {i} beside the pipeliner"));
    }
    timed_free(m);
    drop(pipeliner);
}

fn huge_header_line() {
    let m = manager();
    let server = MetricsServer::start("127.0.0.1:0", &m).unwrap();
    let port = server.address().port();
    scrape_ok(port, "before");
    let rss_before = status_kib("VmRSS:");
    let mut s = TcpStream::connect(("127.0.0.1", port)).unwrap();
    s.set_write_timeout(Some(Duration::from_secs(10))).unwrap();
    s.write_all(b"GET /metrics HTTP/1.1\r\nX-Huge: ").unwrap();
    let mib = vec![b'a'; 1 << 20];
    let limit = 64usize << 20;
    let mut sent = 0;
    let mut refused = None;
    while sent < limit {
        match s.write(&mib) {
            Ok(n) => sent += n,
            Err(e) => {
                refused = Some(e);
                break;
            }
        }
    }
    let grown = status_kib("VmRSS:").saturating_sub(rss_before);
    println!("  the client got {refused:?} after {sent} bytes; resident memory grew {grown} KiB");
    assert!(
        refused.is_some() && sent < limit,
        "the endpoint took a {sent}-byte header line without closing the connection"
    );
    assert!(grown < 16 << 10, "resident memory grew {grown} KiB");
    drop(s);
    // The cap exactly: a head of MAX_HEAD_BYTES is answered, one byte more
    // is 431 (and the client reads it: it sent nothing the endpoint left
    // unread).
    let head = |len: usize, end: &str| {
        let start = "GET /metrics HTTP/1.1\r\nX-Pad: ";
        let pad = len - start.len() - end.len();
        format!("{start}{}{end}", "p".repeat(pad))
    };
    for (len, end, status) in [
        (MAX_HEAD_BYTES, "\r\n\r\n", "200"),
        (MAX_HEAD_BYTES, "", "431"),
    ] {
        let mut s = TcpStream::connect(("127.0.0.1", port)).unwrap();
        s.set_read_timeout(Some(HUNG)).unwrap();
        let request = head(len, end);
        assert_eq!(request.len(), len);
        s.write_all(request.as_bytes()).unwrap();
        let mut raw = Vec::new();
        s.read_to_end(&mut raw).unwrap();
        let raw = String::from_utf8_lossy(&raw);
        assert!(
            raw.starts_with(&format!("HTTP/1.1 {status} ")),
            "a {len}-byte head ending {end:?}: {raw}"
        );
    }
    scrape_ok(port, "after");
    drop(server);
}

fn slowloris() {
    let m = manager();
    let server = MetricsServer::start("127.0.0.1:0", &m).unwrap();
    let port = server.address().port();
    let start = Instant::now();
    let mut slow = TcpStream::connect(("127.0.0.1", port)).unwrap();
    let mut writer = slow.try_clone().unwrap();
    let stop = Arc::new(AtomicBool::new(false));
    let stop_writer = stop.clone();
    let dripping = std::thread::spawn(move || {
        for b in b"GET /metrics HTTP/1.1\r\nHost: 127.0.0.1\r\nUser-Agent: one byte a second\r\n" {
            if stop_writer.load(Ordering::Relaxed) || writer.write_all(&[*b]).is_err() {
                return;
            }
            std::thread::sleep(Duration::from_secs(1));
        }
    });
    let served = Arc::new(AtomicUsize::new(0));
    let scraping = {
        let (stop, served) = (stop.clone(), served.clone());
        std::thread::spawn(move || {
            while !stop.load(Ordering::Relaxed) {
                scrape_ok(port, "beside the slow client");
                served.fetch_add(1, Ordering::Relaxed);
                std::thread::sleep(Duration::from_millis(500));
            }
        })
    };
    let closed = closed_by_peer(&mut slow, Duration::from_secs(60));
    let after = start.elapsed();
    stop.store(true, Ordering::Relaxed);
    dripping.join().unwrap();
    scraping.join().unwrap();
    println!(
        "  the slow client was closed after {:.1} s; {} scrapes answered meanwhile",
        after.as_secs_f64(),
        served.load(Ordering::Relaxed)
    );
    assert!(closed, "the slow client is still connected after 60 s");
    assert!(
        after >= REQUEST_TIMEOUT,
        "closed after {after:?}, before the request deadline"
    );
    assert!(served.load(Ordering::Relaxed) >= 1);
    drop(server);
}

fn thousand_idle_connections() {
    let m = manager();
    let server = MetricsServer::start("127.0.0.1:0", &m).unwrap();
    let port = server.address().port();
    scrape_ok(port, "before");
    let (threads_before, fds_before) = (threads(), descriptors());
    let idle: Vec<TcpStream> = (0..1000)
        .map(|_| TcpStream::connect(("127.0.0.1", port)).unwrap())
        .collect();
    // Taken after the idle ones (the backlog is first come first served).
    for i in 0..3 {
        scrape_ok(port, &format!("scrape {i} beside 1,000 idle connections"));
    }
    let (threads_with, fds_with) = (threads(), descriptors());
    println!(
        "  threads {threads_before} -> {threads_with}, descriptors {fds_before} -> {fds_with} \
         (1,000 of them the idle clients')"
    );
    assert_eq!(threads_with, threads_before, "the endpoint started threads");
    let endpoint_fds = fds_with.saturating_sub(fds_before + idle.len());
    assert!(
        endpoint_fds <= MAX_CONNECTIONS,
        "the endpoint holds {endpoint_fds} more descriptors"
    );
    drop(idle);
    // The endpoint sees the idle connections closed and lets them go.
    let deadline = Instant::now() + HUNG;
    while descriptors() > fds_before && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(50));
    }
    assert_eq!(descriptors(), fds_before, "descriptors left open");
    drop(server);
}

fn descriptor_flood() {
    let out = Command::new(std::env::current_exe().unwrap())
        .env(CHILD_VAR, "descriptor_flood")
        .output()
        .unwrap();
    print!("{}", String::from_utf8_lossy(&out.stdout));
    eprint!("{}", String::from_utf8_lossy(&out.stderr));
    assert!(out.status.success(), "the child failed: {:?}", out.status);
}

/// The endpoint thread's /proc stat file.
fn endpoint_stat_path() -> std::path::PathBuf {
    for task in std::fs::read_dir("/proc/self/task").unwrap() {
        let dir = task.unwrap().path();
        let comm = std::fs::read_to_string(dir.join("comm")).unwrap_or_default();
        if comm.trim() == "kvtier-metrics" {
            return dir.join("stat");
        }
    }
    panic!("no kvtier-metrics thread");
}

/// The endpoint thread's /proc stat file, open (so it can be read again
/// without a new descriptor).
fn endpoint_stat() -> std::fs::File {
    std::fs::File::open(endpoint_stat_path()).unwrap()
}

/// CPU time (user and system) in clock ticks that `stat` shows so far.
fn cpu_ticks(stat: &std::fs::File) -> u64 {
    use std::os::unix::fs::FileExt;
    let mut buf = [0u8; 1024];
    let n = stat.read_at(&mut buf, 0).unwrap();
    let stat = String::from_utf8_lossy(&buf[..n]);
    // After the command's closing parenthesis: state is field 3, utime
    // and stime fields 14 and 15.
    let rest = &stat[stat.rfind(')').unwrap() + 2..];
    let f: Vec<&str> = rest.split(' ').collect();
    f[11].parse::<u64>().unwrap() + f[12].parse::<u64>().unwrap()
}

/// How often the endpoint's thread gave up the processor so far (each
/// wake-up from poll(2) ends in one).
fn endpoint_switches() -> u64 {
    let stat = endpoint_stat_path().with_file_name("status");
    let status = std::fs::read_to_string(stat).unwrap();
    let line = status
        .lines()
        .find(|l| l.starts_with("voluntary_ctxt_switches:"))
        .unwrap();
    line.split_whitespace().nth(1).unwrap().parse().unwrap()
}

fn idle_endpoint_sleeps() {
    let m = manager();
    let server = MetricsServer::start("127.0.0.1:0", &m).unwrap();
    scrape_ok(server.address().port(), "before");
    std::thread::sleep(Duration::from_millis(100));
    let before = endpoint_switches();
    std::thread::sleep(Duration::from_secs(2));
    let woke = endpoint_switches() - before;
    println!("  an idle endpoint woke {woke} times in 2 s");
    assert!(woke <= 4, "an idle endpoint woke {woke} times in 2 s");
    drop(server);
}

fn descriptor_flood_child() {
    let l = libc::rlimit {
        rlim_cur: 256,
        rlim_max: 256,
    };
    // SAFETY: a valid rlimit.
    assert_eq!(unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &l) }, 0);
    let m = manager();
    let server = MetricsServer::start("127.0.0.1:0", &m).unwrap();
    let address: SocketAddr = server.address();
    scrape_ok(address.port(), "before the flood");
    let stat = endpoint_stat();
    // Take every descriptor left, then give one back for a client.
    let mut flood = Vec::new();
    while let Ok(f) = std::fs::File::open("/dev/null") {
        flood.push(f);
    }
    println!("  the flood took {} descriptors", flood.len());
    flood.pop();
    let mut waiting = TcpStream::connect(address).unwrap();
    waiting
        .write_all(b"GET /metrics HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
        .unwrap();
    // The endpoint cannot take it now, and backs off rather than spinning.
    let ticks = cpu_ticks(&stat);
    waiting
        .set_read_timeout(Some(Duration::from_secs(2)))
        .unwrap();
    let mut buf = [0u8; 64];
    let got = waiting.read(&mut buf);
    let spent = cpu_ticks(&stat) - ticks;
    println!("  during 2 s of flood the endpoint's thread used {spent} clock ticks");
    assert!(
        matches!(&got, Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut)),
        "answered while out of descriptors: {got:?}"
    );
    // SAFETY: sysconf has no preconditions.
    let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) } as u64;
    assert!(spent < hz / 10, "the endpoint spun: {spent} ticks in 2 s");
    drop(flood);
    // The waiting client is answered, and new ones too.
    waiting.set_read_timeout(Some(HUNG)).unwrap();
    let mut raw = Vec::new();
    waiting.read_to_end(&mut raw).unwrap();
    let raw = String::from_utf8_lossy(&raw);
    assert!(raw.starts_with("HTTP/1.1 200 "), "{raw}");
    scrape_ok(address.port(), "after the flood");
    drop(server);
}

fn scrapes_during_free() {
    let threads_before = threads();
    let (m, port) = c_manager();
    let answered = Arc::new(AtomicUsize::new(0));
    let scrapers: Vec<_> = (0..4)
        .map(|_| {
            let answered = answered.clone();
            std::thread::spawn(move || {
                loop {
                    match scrape(port) {
                        Ok((200, _)) => {
                            answered.fetch_add(1, Ordering::Relaxed);
                        }
                        Ok((status, body)) => {
                            // Cut off by the endpoint stopping.
                            assert_eq!(status, 0, "{body}");
                        }
                        Err(e) if e.kind() == ErrorKind::ConnectionRefused => return,
                        Err(e) => assert!(
                            !matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut),
                            "a scrape hung: {e}"
                        ),
                    }
                }
            })
        })
        .collect();
    let deadline = Instant::now() + HUNG;
    while answered.load(Ordering::Relaxed) < 8 && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(10));
    }
    assert!(
        answered.load(Ordering::Relaxed) >= 8,
        "scrapes not answered"
    );
    timed_free(m);
    for s in scrapers {
        s.join().unwrap();
    }
    println!(
        "  {} scrapes answered before free; afterwards connections are refused",
        answered.load(Ordering::Relaxed)
    );
    assert!(scrape(port).is_err(), "the endpoint outlived the manager");
    // The thread that ran the free may still be ending.
    let deadline = Instant::now() + HUNG;
    while threads() > threads_before && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(10));
    }
    assert_eq!(threads(), threads_before, "a thread outlived the manager");
}
