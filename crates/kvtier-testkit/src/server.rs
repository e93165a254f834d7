//! Node servers for tests: a server on a thread of the test's process
//! (or in a child process, for `kill -9`), connected managers, blocks of
//! known bytes stored and loaded through the shared region, and the
//! protocol spoken by hand on a raw socket.

use std::io::{Read, Write};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use kvtier_core::Key;
use kvtier_core::primary::StorePlan;
use kvtier_core::region::SlotMemory;
use kvtier_core::server::protocol::{ANSWER_ERROR, ANSWER_OK, Hello, Role, VERSION};
use kvtier_core::server::wire::Writer;
use kvtier_core::server::{Client, ConnectOptions, DaemonConfig, Server, Transport};
use kvtier_core::stats::Stat;
use kvtier_core::tiering::{LookupResult, ManagerCalls, RequestParams};

/// Bytes per block of the test servers.
pub const BLOCK: usize = 4096;

/// The configuration of a test server in `dir`: 4 KiB blocks, a region
/// in `dir`, `capacity` slots, and `extra` (`, "server": {...}` and the
/// like) appended to the document.
pub fn config_json(dir: &Path, capacity: u32, extra: &str) -> String {
    let name = format!("srvtest{}", std::process::id());
    format!(
        r#"{{"block_bytes": {BLOCK}, "region": {{"name": "{name}", "directory": "{}"}},
            "primary": {{"capacity": {capacity}}} {extra}}}"#,
        dir.display()
    )
}

/// A server running on a thread of this process; stopped when dropped.
pub struct Running {
    /// The server (its manager is the one the clients reach).
    pub server: Arc<Server>,
    /// Its socket.
    pub socket: PathBuf,
    stop: Arc<AtomicBool>,
    thread: Option<std::thread::JoinHandle<kvtier_core::Result<()>>>,
    /// The directory of its socket and region.
    pub dir: tempfile::TempDir,
}

impl Running {
    /// Stops the server (as `SIGTERM` would) and waits for it.
    pub fn stop(mut self) -> kvtier_core::Result<()> {
        self.stop.store(true, Ordering::Relaxed);
        self.thread
            .take()
            .expect("running")
            .join()
            .expect("server thread")
    }

    /// A connected engine with default options.
    pub fn connect(&self) -> Client {
        connect(&self.socket)
    }

    /// The value of the primary tier's statistic `name`, read in the server.
    pub fn primary(&self, name: &str) -> f64 {
        stat(&self.server.manager().tier_stats(0).unwrap(), name)
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// A server with `capacity` slots and `extra` in its configuration.
pub fn start(capacity: u32, extra: &str) -> Running {
    let dir = tempfile::tempdir().unwrap();
    let json = config_json(dir.path(), capacity, extra);
    start_with(dir, &json)
}

/// A server from the document `json`, its socket in `dir`.
pub fn start_with(dir: tempfile::TempDir, json: &str) -> Running {
    let socket = dir.path().join("kvtierd.sock");
    let config = DaemonConfig::from_json(json).unwrap();
    let server = Arc::new(Server::start(config, &socket).unwrap());
    let stop = Arc::new(AtomicBool::new(false));
    let (s2, srv) = (stop.clone(), server.clone());
    let thread = std::thread::spawn(move || srv.run(&s2));
    Running {
        server,
        socket,
        stop,
        thread: Some(thread),
        dir,
    }
}

/// Connect options with a short call timeout (a test never waits long),
/// over the transport [`transport`] names.
pub fn options(name: &str) -> ConnectOptions {
    ConnectOptions {
        name: name.into(),
        call_timeout: Duration::from_secs(5),
        transport: transport(),
        ..ConnectOptions::default()
    }
}

/// The transport the tests' clients ask for: `KVTIER_TEST_TRANSPORT`
/// (`socket` or `ring`), else the default.
pub fn transport() -> Transport {
    match std::env::var("KVTIER_TEST_TRANSPORT").as_deref() {
        Ok("socket") => Transport::Socket,
        Ok("ring") => Transport::Ring,
        _ => ConnectOptions::default().transport,
    }
}

/// A connected engine.
pub fn connect(socket: &Path) -> Client {
    Client::connect(socket, &options("test")).unwrap()
}

/// The value of statistic `name` in `stats` (panics if absent).
pub fn stat(stats: &[Stat], name: &str) -> f64 {
    stats
        .iter()
        .find(|s| s.name == name)
        .unwrap_or_else(|| panic!("no statistic {name}"))
        .value
}

/// `n` keys of family `family`, distinct from every other family's.
pub fn keys(family: u32, n: usize) -> Vec<Key> {
    (0..n as u32)
        .map(|i| {
            let mut b = [0u8; 12];
            b[..4].copy_from_slice(&family.to_le_bytes());
            b[4..8].copy_from_slice(&i.to_le_bytes());
            b[8..].copy_from_slice(b"blk!");
            Key::new(&b).unwrap()
        })
        .collect()
}

/// The bytes a slot holding `key` holds in these tests.
pub fn pattern(key: &Key) -> Vec<u8> {
    let seed = key
        .as_bytes()
        .iter()
        .fold(0xcbf2_9ce4_8422_2325u64, |h, &b| {
            (h ^ b as u64).wrapping_mul(0x100_0000_01b3)
        });
    (0..BLOCK)
        .map(|i| (seed >> ((i % 8) * 8)) as u8 ^ (i / 8) as u8)
        .collect()
}

/// Whether slot `slot` holds `key`'s bytes.
pub fn holds(mem: &SlotMemory, slot: u32, key: &Key) -> bool {
    let mut out = vec![0u8; BLOCK];
    mem.read(slot, 0, &mut out).unwrap();
    out == pattern(key)
}

/// Stores `keys` (all planned) through `c`'s region under request
/// `name`, writing each key's bytes, and finishes the request.
pub fn store(c: &dyn ManagerCalls, name: &str, keys: &[Key]) {
    let r = c.request_begin(name, RequestParams::default()).unwrap().id;
    let mut plan = StorePlan::default();
    c.prepare_store(r, keys.into(), &mut plan).unwrap();
    assert_eq!(plan.to_store.len(), keys.len(), "every key planned");
    let mem = c.slot_memory().expect("a mapped region");
    for (k, s) in plan.to_store.iter().zip(&plan.slots) {
        mem.write(*s, 0, &pattern(k)).unwrap();
    }
    let report = c.complete_store(r, keys.into(), true).unwrap();
    assert_eq!(report.ready, keys.len());
    c.request_finished(r).unwrap();
}

/// Looks `keys` up under request `name` (again while the answer is
/// RETRY, calling `schedule_end` between tries, for up to 5 s) and
/// answers how many are hits; when all are, loads them and checks their
/// bytes in `c`'s region.
pub fn load_checked(c: &dyn ManagerCalls, name: &str, keys: &[Key]) -> usize {
    let r = c.request_begin(name, RequestParams::default()).unwrap().id;
    let t = Instant::now();
    let answer = loop {
        let a = c.lookup_prefix(r, keys.into()).unwrap();
        if a.stop != LookupResult::Retry && a.stop != LookupResult::HitPending
            || t.elapsed() > Duration::from_secs(5)
        {
            break a;
        }
        c.schedule_end().unwrap();
        std::thread::sleep(Duration::from_millis(2));
    };
    if answer.hits == keys.len() {
        let mut slots = Vec::new();
        c.prepare_load(r, keys.into(), &mut slots).unwrap();
        let mem = c.slot_memory().expect("a mapped region");
        for (k, s) in keys.iter().zip(&slots) {
            assert!(holds(mem, *s, k), "slot {s} does not hold {k:?}");
        }
        c.complete_load(r, keys.into()).unwrap();
    }
    c.request_finished(r).unwrap();
    answer.hits
}

/// Polls `f` every 5 ms until it is true or `limit` passes; answers
/// whether it became true.
pub fn eventually(limit: Duration, mut f: impl FnMut() -> bool) -> bool {
    let t = Instant::now();
    loop {
        if f() {
            return true;
        }
        if t.elapsed() > limit {
            return false;
        }
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// The server's client list (`Client::clients_json`), parsed.
pub fn clients(socket: &Path) -> serde_json::Value {
    let o = Client::observe(socket, &options("observer")).unwrap();
    serde_json::from_str(&o.clients_json().unwrap()).unwrap()
}

/// [`clients`], or `None` while the server is at its `max_clients` (the
/// observer's own connection is refused until closed ones are released).
pub fn clients_when_room(socket: &Path) -> Option<serde_json::Value> {
    match Client::observe(socket, &options("observer")) {
        Err(kvtier_core::Error::NoSpace(_)) => None,
        o => Some(serde_json::from_str(&o.unwrap().clients_json().unwrap()).unwrap()),
    }
}

/// A raw connection speaking the protocol by hand.
pub struct Raw {
    /// The socket.
    pub stream: UnixStream,
}

impl Raw {
    /// Connects to `socket` (no handshake yet); reads time out after 5 s.
    pub fn connect(socket: &Path) -> Raw {
        let stream = UnixStream::connect(socket).unwrap();
        stream
            .set_read_timeout(Some(Duration::from_secs(5)))
            .unwrap();
        Raw { stream }
    }

    /// Connects and completes an engine's handshake.
    pub fn engine(socket: &Path) -> Raw {
        let mut r = Raw::connect(socket);
        r.send(&hello_frame(VERSION, 0, 0, ""));
        let a = r.answer().expect("an answer to the handshake");
        assert_eq!(a[0], ANSWER_OK, "handshake refused");
        r
    }

    /// Writes `bytes` as they are.
    pub fn send(&mut self, bytes: &[u8]) {
        self.stream.write_all(bytes).unwrap();
    }

    /// Writes `bytes` as they are; false if the server closed already.
    pub fn try_send(&mut self, bytes: &[u8]) -> bool {
        self.stream.write_all(bytes).is_ok()
    }

    /// The next answer's body; `None` at the end of the connection (or a
    /// reset, or no answer within the read timeout).
    pub fn answer(&mut self) -> Option<Vec<u8>> {
        let mut len = [0u8; 4];
        self.stream.read_exact(&mut len).ok()?;
        let mut body = vec![0u8; u32::from_le_bytes(len) as usize];
        self.stream.read_exact(&mut body).ok()?;
        Some(body)
    }

    /// Whether the server closed the connection (an end of file, after
    /// any answers still queued), within the read timeout.
    pub fn closed(&mut self) -> bool {
        let mut buf = [0u8; 4096];
        loop {
            match self.stream.read(&mut buf) {
                Ok(0) => return true,
                Ok(_) => continue,
                Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset => return true,
                Err(_) => return false,
            }
        }
    }
}

/// An answer's error text (the status byte, then the error as
/// `put_error` writes it), for refusal messages.
pub fn error_text(answer: &[u8]) -> String {
    assert_eq!(answer[0], ANSWER_ERROR, "not an error answer");
    let mut r = kvtier_core::server::wire::Reader::new(&answer[1..]);
    kvtier_core::server::protocol::get_error(&mut r)
        .expect("a well-formed error")
        .to_string()
}

/// A whole frame (length prefix and body) of the body `body`.
pub fn frame(body: &[u8]) -> Vec<u8> {
    let mut f = (body.len() as u32).to_le_bytes().to_vec();
    f.extend_from_slice(body);
    f
}

/// A whole handshake frame of an engine.
pub fn hello_frame(version: u32, block_bytes: u64, slot_stride: u64, fingerprint: &str) -> Vec<u8> {
    let mut body = Vec::new();
    Hello {
        version,
        block_bytes,
        slot_stride,
        fingerprint: fingerprint.into(),
        role: Role::Engine,
        name: "raw".into(),
    }
    .put(&mut Writer::new(&mut body));
    frame(&body)
}

/// A child process: this test binary again, running only the ignored
/// test `test`, with `envs` set.
pub fn child(test: &str, envs: &[(&str, String)]) -> std::process::Command {
    let mut c = std::process::Command::new(std::env::current_exe().unwrap());
    c.args([
        "--ignored",
        "--exact",
        test,
        "--test-threads=1",
        "--quiet",
        "--nocapture",
    ]);
    for (k, v) in envs {
        c.env(k, v);
    }
    c
}

/// Sends `SIGKILL` to `child` and reaps it.
pub fn kill(child: &mut std::process::Child) {
    // SAFETY: kill has no memory preconditions.
    unsafe { libc::kill(child.id() as i32, libc::SIGKILL) };
    let _ = child.wait();
}
