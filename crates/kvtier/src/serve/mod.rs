//! The optional `/metrics` endpoint, for engines that have no HTTP server
//! of their own: a thread of its own answers `GET /metrics` with the
//! manager's Prometheus text ([`crate::tiering::Manager::prometheus_text`]),
//! and two probes beside it:
//!
//! - `GET /healthz` (liveness): 200 `ok` while the manager is alive, not
//!   shut down, and answers within [`HEALTH_TIMEOUT`]
//!   ([`crate::tiering::Manager::health`]); otherwise 503 with the reason
//!   (`the manager is gone`, shut down, did not answer in time).
//! - `GET /readyz` (readiness): 200 `ready` when the manager and every one
//!   of its tiers can be used ([`crate::tiering::Manager::readiness`]);
//!   otherwise 503 with `not ready:` and one line per reason (a Redis
//!   tier's circuit breaker open, a file-system tier's directory gone, a
//!   tier whose back-pressure drops cascades, the manager shut down or
//!   gone).
//!
//! Off unless asked for (`"metrics": {"listen": "127.0.0.1:9400"}` in the
//! JSON configuration, or [`MetricsServer::start`]); port 0 picks a free
//! port, which [`MetricsServer::address`] reports.
//!
//! A small HTTP/1.1 server with fixed bounds, whatever its clients do: one
//! thread polls non-blocking sockets; at most 16 connections are open (a
//! new one beyond them replaces the oldest one still sending its request,
//! or is closed at once when every one is being answered); a request head
//! is at most 8192 bytes (431 beyond) and must arrive within 5 s of the
//! connection; its response must be taken within 10 s; one request per
//! connection (`Connection: close`).  `GET` and `HEAD` (the same status
//! and headers, no body) of `/metrics`, `/healthz` and `/readyz` only:
//! another path is 404, another method 405.  Requests are answered one at
//! a time, so a manager whose lock is held for long delays `/metrics` and
//! `/readyz` (and the requests behind them); `/healthz` gives up after
//! [`HEALTH_TIMEOUT`].  When the process is out of
//! descriptors, accepting pauses 100 ms at a time (waiting connections
//! stay in the kernel's backlog) and resumes by itself.  It holds the
//! manager weakly, so it never keeps a manager alive, and stopping it
//! (dropping the [`MetricsServer`]) wakes its thread through a socket pair
//! and waits for it, which takes no longer than one scrape.
//!
//! It sits above the manager ([`crate::tiering`]) and the exposition
//! ([`crate::metrics`]): nothing below imports it.

mod http;

use std::io::{ErrorKind, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream, ToSocketAddrs};
use std::os::fd::AsRawFd;
use std::os::unix::net::UnixStream;
use std::sync::{Arc, Weak};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crate::error::{Error, Result};
use crate::tiering::Readiness;
use http::{Answer, Request};

pub use http::CONTENT_TYPE;

/// Most connections open at once (the endpoint then holds at most this
/// many descriptors, plus its listening socket and a socket pair).
pub(crate) const MAX_CONNECTIONS: usize = 16;

/// Most bytes of a request head (request line and headers); a head not
/// ended within them is answered 431 and closed.
pub(crate) const MAX_HEAD_BYTES: usize = 8192;

/// Time from accepting a connection to the end of its request head; then
/// it is closed.
pub(crate) const REQUEST_TIMEOUT: Duration = Duration::from_secs(5);

/// Time from the end of a request head to the last byte of its response
/// taken by the client; then the connection is closed.
pub(crate) const WRITE_TIMEOUT: Duration = Duration::from_secs(10);

/// How long accepting pauses when the process (or system) is out of
/// descriptors or memory for a new connection.
pub(crate) const ACCEPT_BACKOFF: Duration = Duration::from_millis(100);

/// How long `/healthz` waits for the manager to answer before it reports
/// it unhealthy.
pub const HEALTH_TIMEOUT: Duration = Duration::from_secs(1);

/// Most connections accepted in one round (so a flood of new connections
/// cannot starve the ones being answered).
const ACCEPTS_PER_ROUND: usize = 64;

/// What a [`MetricsServer`] serves: the Prometheus text of a
/// [`Manager`](crate::tiering::Manager) (its
/// [`prometheus_text`](crate::tiering::Manager::prometheus_text)), read at
/// each scrape, and its health and readiness, read at each probe.  The
/// endpoint knows its source only through this trait, so what it serves
/// comes from the layer above it.
pub trait MetricsSource: Send + Sync {
    /// Every statistic in the Prometheus text format, now; an error is
    /// answered 503 with its text.
    fn prometheus_text(&self) -> Result<String>;

    /// Whether the source answers, for `/healthz` (200 `ok`, or 503 with
    /// the error's text).  By default it does while it exists.
    fn health(&self) -> Result<()> {
        Ok(())
    }

    /// Whether everything behind the source can be used, for `/readyz`
    /// (200 when ready, else 503 with the reasons).  By default it is
    /// ready while it exists.
    fn readiness(&self) -> Result<Readiness> {
        Ok(Readiness::default())
    }
}

/// What the endpoint serves: [`Manager::prometheus_text`](crate::tiering::Manager::prometheus_text),
/// [`Manager::health`](crate::tiering::Manager::health) within
/// [`HEALTH_TIMEOUT`] and [`Manager::readiness`](crate::tiering::Manager::readiness).
impl MetricsSource for crate::tiering::Manager {
    fn prometheus_text(&self) -> Result<String> {
        crate::tiering::Manager::prometheus_text(self)
    }

    fn health(&self) -> Result<()> {
        crate::tiering::Manager::health(self, HEALTH_TIMEOUT)
    }

    fn readiness(&self) -> Result<Readiness> {
        crate::tiering::Manager::readiness(self)
    }
}

/// A running `/metrics` endpoint; dropping it stops it.
pub struct MetricsServer {
    /// Dropped to wake the thread (its peer then reads end of file).
    wake: Option<UnixStream>,
    thread: Option<JoinHandle<()>>,
    address: SocketAddr,
}

impl std::fmt::Debug for MetricsServer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MetricsServer")
            .field("address", &self.address)
            .finish()
    }
}

/// The address `listen` names (`IP:port`, or `host:port` resolved now),
/// or an error that says what is wrong with it.
pub(crate) fn parse_listen(listen: &str) -> Result<SocketAddr> {
    let bad = |why: String| {
        Error::InvalidArgument(format!(
            "metrics.listen: {listen:?} {why} (give IP:port, e.g. \"127.0.0.1:9400\")"
        ))
    };
    let mut addrs = listen
        .to_socket_addrs()
        .map_err(|e| bad(format!("is not an address: {e}")))?;
    addrs
        .next()
        .ok_or_else(|| bad("names no address".to_string()))
}

fn io_error(context: &str) -> impl FnOnce(std::io::Error) -> Error + '_ {
    move |source| Error::Io {
        context: context.into(),
        source,
    }
}

impl MetricsServer {
    /// Listens on `listen` (`IP:port`, or `host:port` resolved now; port 0 picks a free
    /// port, see [`MetricsServer::address`]) and serves `manager`'s
    /// metrics from a thread of its own until dropped.  An address that
    /// cannot be listened on (in use, not this host's, not permitted) is
    /// an error naming it, and nothing keeps running.
    pub fn start<S: MetricsSource + 'static>(
        listen: &str,
        manager: &Arc<S>,
    ) -> Result<MetricsServer> {
        let address = parse_listen(listen)?;
        let listener = TcpListener::bind(address).map_err(|e| {
            Error::InvalidArgument(format!("metrics.listen: cannot listen on {address}: {e}"))
        })?;
        let address = listener
            .local_addr()
            .map_err(io_error("reading the metrics address"))?;
        listener
            .set_nonblocking(true)
            .map_err(io_error("making the metrics socket non-blocking"))?;
        let (wake, woken) = UnixStream::pair().map_err(io_error("making the metrics wake-up"))?;
        woken
            .set_nonblocking(true)
            .map_err(io_error("making the metrics wake-up non-blocking"))?;
        let source: Weak<S> = Arc::downgrade(manager);
        let endpoint = Endpoint::new(listener, woken, source);
        let thread = std::thread::Builder::new()
            .name("kvtier-metrics".into())
            .spawn(move || endpoint.run())
            .map_err(io_error("starting the metrics thread"))?;
        log::info!(target: "kvtier::metrics", "serving /metrics on http://{address}/metrics");
        Ok(MetricsServer {
            wake: Some(wake),
            thread: Some(thread),
            address,
        })
    }

    /// The address it listens on (with the port picked for port 0).
    pub fn address(&self) -> SocketAddr {
        self.address
    }
}

impl Drop for MetricsServer {
    fn drop(&mut self) {
        drop(self.wake.take());
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// The serving thread's state.
struct Endpoint {
    listener: TcpListener,
    /// Readable (end of file) once the [`MetricsServer`] is dropped.
    woken: UnixStream,
    manager: Weak<dyn MetricsSource>,
    connections: Vec<Connection>,
    /// Accepting pauses until then after running out of descriptors.
    paused_until: Option<Instant>,
}

/// One client connection: reading its request head, then writing the
/// response, each by a deadline.
struct Connection {
    stream: TcpStream,
    accepted: Instant,
    deadline: Instant,
    state: State,
}

enum State {
    /// The head read so far (at most [`MAX_HEAD_BYTES`]).
    Reading(Vec<u8>),
    /// The response and how much of it was sent.
    Writing(Vec<u8>, usize),
}

/// `poll(2)` interest in one descriptor (`fd` -1: none).
fn pollfd(fd: i32, events: i16) -> libc::pollfd {
    libc::pollfd {
        fd,
        events,
        revents: 0,
    }
}

impl Endpoint {
    fn new(listener: TcpListener, woken: UnixStream, manager: Weak<dyn MetricsSource>) -> Endpoint {
        Endpoint {
            listener,
            woken,
            manager,
            connections: Vec::with_capacity(MAX_CONNECTIONS),
            paused_until: None,
        }
    }

    /// Serves until woken.
    fn run(mut self) {
        let mut fds: Vec<libc::pollfd> = Vec::with_capacity(MAX_CONNECTIONS + 2);
        loop {
            let now = Instant::now();
            self.connections.retain(|c| c.deadline > now);
            if self.paused_until.is_some_and(|t| t <= now) {
                self.paused_until = None;
            }
            let accepting = self.paused_until.is_none();
            fds.clear();
            fds.push(pollfd(self.woken.as_raw_fd(), libc::POLLIN));
            let listen = if accepting { libc::POLLIN } else { 0 };
            fds.push(pollfd(self.listener.as_raw_fd(), listen));
            for c in &self.connections {
                let events = match c.state {
                    State::Reading(_) => libc::POLLIN,
                    State::Writing(..) => libc::POLLOUT,
                };
                fds.push(pollfd(c.stream.as_raw_fd(), events));
            }
            let next = self
                .connections
                .iter()
                .map(|c| c.deadline)
                .chain(self.paused_until)
                .min();
            // Rounded up, so a deadline has passed when poll returns.
            let timeout = next.map_or(-1, |t| {
                let ms = t.saturating_duration_since(now).as_micros().div_ceil(1000);
                i32::try_from(ms).unwrap_or(i32::MAX)
            });
            // SAFETY: `fds` is a valid array of `fds.len()` pollfds.
            let n = unsafe { libc::poll(fds.as_mut_ptr(), fds.len() as libc::nfds_t, timeout) };
            if n < 0 {
                // EINTR, or EAGAIN/ENOMEM: look again (after a pause for
                // the latter), the wake-up included.
                if std::io::Error::last_os_error().kind() != ErrorKind::Interrupted {
                    std::thread::sleep(ACCEPT_BACKOFF);
                }
                continue;
            }
            if fds[0].revents != 0 {
                return;
            }
            let now = Instant::now();
            let mut ready = fds[2..].iter().map(|p| p.revents != 0);
            let manager = &self.manager;
            self.connections
                .retain_mut(|c| !ready.next().unwrap_or(false) || c.progress(manager, now));
            if fds[1].revents != 0 {
                self.accept(now);
            }
        }
    }

    /// Takes the connections waiting, up to [`ACCEPTS_PER_ROUND`].
    fn accept(&mut self, now: Instant) {
        for _ in 0..ACCEPTS_PER_ROUND {
            match self.listener.accept() {
                Ok((stream, _)) => self.admit(stream, now),
                Err(e) if e.kind() == ErrorKind::WouldBlock => return,
                // Out of descriptors (EMFILE, ENFILE) or memory (ENOBUFS,
                // ENOMEM): leave the connection in the backlog and try
                // again after a pause.
                Err(e)
                    if matches!(
                        e.raw_os_error(),
                        Some(libc::EMFILE | libc::ENFILE | libc::ENOBUFS | libc::ENOMEM)
                    ) =>
                {
                    self.paused_until = Some(now + ACCEPT_BACKOFF);
                    return;
                }
                // A connection reset before it was taken, an interrupted
                // call: the next one may do.
                Err(_) => {}
            }
        }
    }

    /// Adds `stream`, making room if it is full: the oldest connection
    /// still sending its request goes, or else `stream` itself.
    fn admit(&mut self, stream: TcpStream, now: Instant) {
        if self.connections.len() >= MAX_CONNECTIONS {
            let oldest = self
                .connections
                .iter()
                .enumerate()
                .filter(|(_, c)| matches!(c.state, State::Reading(_)))
                .min_by_key(|(_, c)| c.accepted)
                .map(|(i, _)| i);
            match oldest {
                Some(i) => drop(self.connections.swap_remove(i)),
                None => return,
            }
        }
        if stream.set_nonblocking(true).is_err() {
            return;
        }
        self.connections.push(Connection {
            stream,
            accepted: now,
            deadline: now + REQUEST_TIMEOUT,
            state: State::Reading(Vec::new()),
        });
    }
}

impl Connection {
    /// Reads or writes what the socket allows now; false when the
    /// connection is done with (answered, closed by the client, failed).
    fn progress(&mut self, manager: &Weak<dyn MetricsSource>, now: Instant) -> bool {
        if let State::Reading(head) = &mut self.state {
            let request = match read_head(&mut self.stream, head) {
                Ok(Some(request)) => request,
                Ok(None) => return true,
                Err(()) => return false,
            };
            self.state = State::Writing(http::respond(request, || manager.upgrade()), 0);
            self.deadline = now + WRITE_TIMEOUT;
        }
        let State::Writing(out, sent) = &mut self.state else {
            return false;
        };
        while *sent < out.len() {
            match self.stream.write(&out[*sent..]) {
                Ok(0) => return false,
                Ok(n) => *sent += n,
                Err(e) if e.kind() == ErrorKind::Interrupted => {}
                Err(e) => return e.kind() == ErrorKind::WouldBlock,
            }
        }
        false
    }
}

/// Reads what `stream` has of its request head into `head`: the request
/// once the head is complete (or over [`MAX_HEAD_BYTES`]), `None` while it
/// is not, an error when the client closed or failed first.
fn read_head(
    stream: &mut TcpStream,
    head: &mut Vec<u8>,
) -> std::result::Result<Option<Request>, ()> {
    let mut chunk = [0u8; 2048];
    loop {
        if head.len() >= MAX_HEAD_BYTES {
            return Ok(Some(Request {
                answer: Answer::HeadTooLarge,
                body: true,
            }));
        }
        let room = (MAX_HEAD_BYTES - head.len()).min(chunk.len());
        match stream.read(&mut chunk[..room]) {
            Ok(0) => return Err(()),
            Ok(n) => {
                let from = head.len();
                head.extend_from_slice(&chunk[..n]);
                if let Some(end) = http::head_end(head, from) {
                    return Ok(Some(http::parse(&head[..end])));
                }
            }
            Err(e) if e.kind() == ErrorKind::Interrupted => {}
            Err(e) if e.kind() == ErrorKind::WouldBlock => return Ok(None),
            Err(_) => return Err(()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A source already gone (a dropped manager's place).
    fn gone() -> Weak<dyn MetricsSource> {
        struct Never;
        impl MetricsSource for Never {
            fn prometheus_text(&self) -> Result<String> {
                Ok(String::new())
            }
        }
        Weak::<Never>::new()
    }

    /// What /proc says descriptor `fd` of this process is.
    fn fd_target(fd: i32) -> Option<std::path::PathBuf> {
        std::fs::read_link(format!("/proc/self/fd/{fd}")).ok()
    }

    #[test]
    fn a_response_not_taken_by_its_deadline_is_cut_then() {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        listener.set_nonblocking(true).unwrap();
        let address = listener.local_addr().unwrap();
        let (wake, woken) = UnixStream::pair().unwrap();
        woken.set_nonblocking(true).unwrap();
        let mut endpoint = Endpoint::new(listener, woken, gone());
        let mut client = TcpStream::connect(address).unwrap();
        let deadline = Instant::now() + Duration::from_secs(10);
        while endpoint.connections.is_empty() && Instant::now() < deadline {
            endpoint.accept(Instant::now());
        }
        // A response far larger than the socket buffers, which the client
        // does not read.
        let big = 64 << 20;
        let c = &mut endpoint.connections[0];
        c.state = State::Writing(vec![b'x'; big], 0);
        let cut = Instant::now() + WRITE_TIMEOUT;
        c.deadline = cut;
        assert!(c.progress(&gone(), Instant::now()), "the rest waits");
        let fd = c.stream.as_raw_fd();
        let socket = fd_target(fd).unwrap();
        let serving = std::thread::spawn(move || endpoint.run());
        // Held until the deadline (the same socket at the same number)...
        while Instant::now() + Duration::from_secs(1) < cut {
            assert_eq!(fd_target(fd).as_ref(), Some(&socket), "closed early");
            std::thread::sleep(Duration::from_millis(200));
        }
        // ...and cut then: the client finds part of the response, then the
        // end.
        while Instant::now() < cut + Duration::from_secs(1) {
            std::thread::sleep(Duration::from_millis(100));
        }
        client
            .set_read_timeout(Some(Duration::from_secs(30)))
            .unwrap();
        let mut got = Vec::new();
        client.read_to_end(&mut got).unwrap();
        assert!(got.len() < big, "all {big} bytes arrived");
        drop(wake);
        serving.join().unwrap();
    }
}
