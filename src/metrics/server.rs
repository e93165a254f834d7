//! The optional `/metrics` endpoint, for engines that have no HTTP server
//! of their own: a thread of its own answers `GET /metrics` with the
//! manager's Prometheus text ([`crate::tiering::Manager::prometheus_text`]).
//! Off unless asked for (`"metrics": {"listen": "127.0.0.1:9400"}` in the
//! JSON configuration, or [`MetricsServer::start`]).
//!
//! The server is tiny_http's: one thread accepts and answers, one request
//! at a time (a scrape is a few milliseconds); anything but `GET` or `HEAD`
//! of `/metrics` is 404.  It holds the manager weakly, so it never keeps a
//! manager alive, and stopping it (dropping the [`MetricsServer`]) wakes
//! its thread and waits for it.

use std::net::{SocketAddr, ToSocketAddrs};
use std::sync::{Arc, Weak};
use std::thread::JoinHandle;

use crate::error::{Error, Result};
use crate::tiering::Manager;

/// The `Content-Type` of the Prometheus text format 0.0.4.
pub const CONTENT_TYPE: &str = "text/plain; version=0.0.4; charset=utf-8";

/// A running `/metrics` endpoint; dropping it stops it.
pub struct MetricsServer {
    server: Arc<tiny_http::Server>,
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
pub fn parse_listen(listen: &str) -> Result<SocketAddr> {
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

impl MetricsServer {
    /// Listens on `listen` (see [`parse_listen`]; port 0 picks a free
    /// port, see [`MetricsServer::address`]) and serves `manager`'s
    /// metrics from a thread of its own until dropped.  An address that
    /// cannot be listened on (in use, not this host's, not permitted) is
    /// an error naming it, and nothing keeps running.
    pub fn start(listen: &str, manager: &Arc<Manager>) -> Result<MetricsServer> {
        let address = parse_listen(listen)?;
        let server = tiny_http::Server::http(address).map_err(|e| {
            Error::InvalidArgument(format!("metrics.listen: cannot listen on {address}: {e}"))
        })?;
        let address = server
            .server_addr()
            .to_ip()
            .ok_or_else(|| Error::InvalidArgument("metrics.listen: not an IP address".into()))?;
        let server = Arc::new(server);
        let weak = Arc::downgrade(manager);
        let serving = server.clone();
        let thread = std::thread::Builder::new()
            .name("kvtier-metrics".into())
            .spawn(move || serve(&serving, &weak))
            .map_err(|e| Error::Io {
                context: "starting the metrics thread".into(),
                source: e,
            })?;
        log::info!(target: "kvtier::metrics", "serving /metrics on http://{address}/metrics");
        Ok(MetricsServer {
            server,
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
        self.server.unblock();
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// Answers requests until the server is unblocked.
fn serve(server: &tiny_http::Server, manager: &Weak<Manager>) {
    for request in server.incoming_requests() {
        let _ = answer(request, manager);
    }
}

fn answer(request: tiny_http::Request, manager: &Weak<Manager>) -> std::io::Result<()> {
    use tiny_http::{Header, Method, Response};
    let path = request.url().split('?').next().unwrap_or("");
    // tiny_http answers HEAD without the body.
    let method_ok = matches!(request.method(), Method::Get | Method::Head);
    if path != "/metrics" || !method_ok {
        let not_found = Response::from_string("not found: try GET /metrics\n");
        return request.respond(not_found.with_status_code(404));
    }
    let (status, text) = match manager.upgrade().map(|m| m.prometheus_text()) {
        Some(Ok(text)) => (200, text),
        Some(Err(e)) => (503, format!("metrics unavailable: {e}\n")),
        None => (503, "the manager is gone\n".to_string()),
    };
    let mut response = Response::from_string(text).with_status_code(status);
    if let Ok(h) = Header::from_bytes(&b"Content-Type"[..], CONTENT_TYPE.as_bytes()) {
        response = response.with_header(h);
    }
    request.respond(response)
}
