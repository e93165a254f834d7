//! Starts real `redis-server` processes on loopback for tests and
//! benchmarks: a free port, a private directory, no persistence; stopped
//! (and the directory removed) when dropped.

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

/// How a start error begins when the server is not installed at all (the
/// one case in which a test skips instead of failing, unless
/// `KVTIER_REQUIRE_ALL=1`: see [`or_skip`]).
pub const NOT_INSTALLED: &str = "redis-server is not installed";

/// A started server (or cluster), or `None` after
/// [`crate::require::skip_or_fail`] when redis-server is not
/// installed (the test then returns); any other start error panics.
#[track_caller]
pub fn or_skip<T>(started: Result<T, String>) -> Option<T> {
    match started {
        Ok(s) => Some(s),
        Err(why) if why.starts_with(NOT_INSTALLED) => {
            crate::require::skip_or_fail(format!("cannot start a redis server: {why}"));
            None
        }
        Err(why) => panic!("starting redis failed: {why}"),
    }
}

/// One running server.
pub struct RedisServer {
    child: Option<Child>,
    /// Its port on 127.0.0.1.
    pub port: u16,
    dir: PathBuf,
    extra: Vec<String>,
    /// TLS only (no plain port): readiness is a TCP connect, not PING.
    tls: bool,
}

pub use crate::require::find_tool;

fn port_free(port: u16) -> bool {
    TcpListener::bind(("127.0.0.1", port)).is_ok()
}

/// A port on 127.0.0.1 that is free now, whose cluster bus port (+10000)
/// is free too.
pub fn free_port() -> u16 {
    for _ in 0..200 {
        let l = TcpListener::bind(("127.0.0.1", 0)).expect("binding an ephemeral port");
        let port = l.local_addr().unwrap().port();
        drop(l);
        if port < 55000 && port_free(port) && port_free(port + 10000) {
            return port;
        }
    }
    panic!("no free port pair found on 127.0.0.1");
}

/// Sends one inline command and returns the first reply line.
pub fn raw_command(port: u16, cmd: &str) -> Option<String> {
    let mut s = TcpStream::connect_timeout(
        &format!("127.0.0.1:{port}").parse().unwrap(),
        Duration::from_millis(200),
    )
    .ok()?;
    s.set_read_timeout(Some(Duration::from_millis(500))).ok()?;
    s.write_all(format!("{cmd}\r\n").as_bytes()).ok()?;
    let mut buf = [0u8; 256];
    let n = s.read(&mut buf).ok()?;
    Some(String::from_utf8_lossy(&buf[..n]).trim().to_string())
}

impl RedisServer {
    /// Starts a standalone server, or says why it cannot (then the caller
    /// skips, printing the reason).
    pub fn start() -> Result<RedisServer, String> {
        Self::start_with(&[])
    }

    /// Starts a server with extra `--option value` arguments.
    pub fn start_with(extra: &[&str]) -> Result<RedisServer, String> {
        let exe = find_tool("redis-server").ok_or_else(|| {
            format!("{NOT_INSTALLED} (apt-get install -y redis-server; `make test` does this)")
        })?;
        // A port found free may be taken by a parallel test before the
        // server binds it: then try another.
        let mut last = String::new();
        for _ in 0..5 {
            let port = free_port();
            let dir =
                std::env::temp_dir().join(format!("kvtier-redis-{}-{port}", std::process::id()));
            std::fs::create_dir_all(&dir)
                .map_err(|e| format!("creating {}: {e}", dir.display()))?;
            let mut s = RedisServer {
                child: None,
                port,
                dir,
                extra: extra.iter().map(|s| s.to_string()).collect(),
                tls: false,
            };
            match s.spawn(&exe) {
                Ok(()) => return Ok(s),
                Err(e) if e.contains("Address already in use") => last = e,
                Err(e) => return Err(e),
            }
        }
        Err(last)
    }

    /// Starts a TLS-only server with a fresh CA and a server certificate
    /// for 127.0.0.1 (made with the `openssl` tool); the CA's PEM file is
    /// at [`RedisServer::ca_file`].
    pub fn start_tls() -> Result<RedisServer, String> {
        let exe = find_tool("redis-server")
            .ok_or_else(|| format!("{NOT_INSTALLED} (apt-get install -y redis-server)"))?;
        let openssl =
            find_tool("openssl").ok_or_else(|| format!("{NOT_INSTALLED}: openssl is missing"))?;
        let port = free_port();
        let dir =
            std::env::temp_dir().join(format!("kvtier-redis-tls-{}-{port}", std::process::id()));
        std::fs::create_dir_all(&dir).map_err(|e| e.to_string())?;
        let run = |args: &[&str]| -> Result<(), String> {
            let out = Command::new(&openssl)
                .args(args)
                .current_dir(&dir)
                .output()
                .map_err(|e| e.to_string())?;
            if out.status.success() {
                Ok(())
            } else {
                Err(format!(
                    "openssl {args:?}: {}",
                    String::from_utf8_lossy(&out.stderr)
                ))
            }
        };
        run(&[
            "req",
            "-x509",
            "-newkey",
            "rsa:2048",
            "-nodes",
            "-days",
            "2",
            "-subj",
            "/CN=kvtier test CA",
            "-keyout",
            "ca.key",
            "-out",
            "ca.crt",
        ])?;
        run(&[
            "req",
            "-newkey",
            "rsa:2048",
            "-nodes",
            "-subj",
            "/CN=127.0.0.1",
            "-keyout",
            "server.key",
            "-out",
            "server.csr",
        ])?;
        std::fs::write(
            dir.join("san.ext"),
            "subjectAltName=IP:127.0.0.1,DNS:localhost\n",
        )
        .map_err(|e| e.to_string())?;
        run(&[
            "x509",
            "-req",
            "-in",
            "server.csr",
            "-CA",
            "ca.crt",
            "-CAkey",
            "ca.key",
            "-CAcreateserial",
            "-days",
            "2",
            "-extfile",
            "san.ext",
            "-out",
            "server.crt",
        ])?;
        let d = dir.display().to_string();
        let mut s = RedisServer {
            child: None,
            port,
            dir,
            extra: vec![
                "--tls-cert-file".into(),
                format!("{d}/server.crt"),
                "--tls-key-file".into(),
                format!("{d}/server.key"),
                "--tls-ca-cert-file".into(),
                format!("{d}/ca.crt"),
                "--tls-auth-clients".into(),
                "no".into(),
            ],
            tls: true,
        };
        s.spawn(&exe)?;
        Ok(s)
    }

    /// The CA file of a TLS server.
    pub fn ca_file(&self) -> PathBuf {
        self.dir.join("ca.crt")
    }

    fn spawn(&mut self, exe: &Path) -> Result<(), String> {
        let log = self.dir.join("redis.log");
        let mut cmd = Command::new(exe);
        let (plain, tls) = if self.tls {
            (0, self.port)
        } else {
            (self.port, 0)
        };
        cmd.arg("--port")
            .arg(plain.to_string())
            .arg("--tls-port")
            .arg(tls.to_string())
            .args(["--bind", "127.0.0.1", "--save", "", "--appendonly", "no"])
            .args(["--protected-mode", "no", "--daemonize", "no"])
            .arg("--dir")
            .arg(&self.dir)
            .arg("--logfile")
            .arg(&log)
            .args(&self.extra)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null());
        let child = cmd
            .spawn()
            .map_err(|e| format!("starting {}: {e}", exe.display()))?;
        self.child = Some(child);
        // A minute: a loaded machine may start it slowly; only a server
        // that never answers runs into it.
        let deadline = Instant::now() + Duration::from_secs(60);
        while Instant::now() < deadline {
            let ready = if self.tls {
                TcpStream::connect(("127.0.0.1", self.port)).is_ok()
            } else {
                raw_command(self.port, "PING")
                    .is_some_and(|r| r.contains("PONG") || r.contains("NOAUTH"))
            };
            if ready {
                return Ok(());
            }
            if let Some(Ok(Some(status))) = self.child.as_mut().map(|c| c.try_wait()) {
                let log = std::fs::read_to_string(&log).unwrap_or_default();
                return Err(format!("redis-server exited with {status}: {log}"));
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let log = std::fs::read_to_string(&log).unwrap_or_default();
        Err(format!(
            "redis-server on port {} did not become ready: {log}",
            self.port
        ))
    }

    /// `127.0.0.1:port`.
    pub fn addr(&self) -> String {
        format!("127.0.0.1:{}", self.port)
    }

    /// Kills the server at once (SIGKILL), as a crash would.
    pub fn kill(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    /// Starts the server again on the same port (empty: no persistence).
    pub fn restart(&mut self) -> Result<(), String> {
        self.kill();
        let exe = find_tool("redis-server").ok_or("redis-server vanished")?;
        self.spawn(&exe)
    }

    /// Runs `redis-cli -p PORT args...`.
    pub fn cli(&self, args: &[&str]) -> Output {
        let exe = find_tool("redis-cli").expect("redis-cli is installed with redis-server");
        Command::new(exe)
            .args(["-h", "127.0.0.1", "-p", &self.port.to_string()])
            .args(args)
            .output()
            .expect("running redis-cli")
    }

    /// `redis-cli` output as trimmed text.
    pub fn cli_text(&self, args: &[&str]) -> String {
        String::from_utf8_lossy(&self.cli(args).stdout)
            .trim()
            .to_string()
    }
}

impl Drop for RedisServer {
    fn drop(&mut self) {
        self.kill();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// Three cluster-enabled servers joined into one Redis Cluster (no replicas).
pub struct RedisCluster {
    /// The nodes.
    pub nodes: Vec<RedisServer>,
}

impl RedisCluster {
    /// Starts three nodes and creates the cluster, or says why it cannot.
    pub fn start() -> Result<RedisCluster, String> {
        let mut nodes = Vec::new();
        for _ in 0..3 {
            nodes.push(RedisServer::start_with(&[
                "--cluster-enabled",
                "yes",
                "--cluster-config-file",
                "nodes.conf",
                "--cluster-node-timeout",
                "2000",
            ])?);
        }
        let cli = find_tool("redis-cli")
            .ok_or_else(|| format!("{NOT_INSTALLED}: redis-cli is missing"))?;
        let out = Command::new(cli)
            .arg("--cluster")
            .arg("create")
            .args(nodes.iter().map(|n| n.addr()))
            .args(["--cluster-replicas", "0", "--cluster-yes"])
            .output()
            .map_err(|e| format!("running redis-cli --cluster create: {e}"))?;
        if !out.status.success() {
            return Err(format!(
                "redis-cli --cluster create failed: {}{}",
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            ));
        }
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            let ok = nodes.iter().all(|n| {
                n.cli_text(&["cluster", "info"])
                    .contains("cluster_state:ok")
            });
            if ok {
                return Ok(RedisCluster { nodes });
            }
            if Instant::now() > deadline {
                return Err("the cluster did not reach cluster_state:ok".into());
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}
