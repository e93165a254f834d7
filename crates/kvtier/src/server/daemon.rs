//! The node server: owns the region, the manager and its tiers, and
//! serves engines on a Unix socket, one thread per connection.
//!
//! Start: sweep regions of this server's name that no process holds (a
//! server killed before), create a fresh region `NAME-PID` (mode and
//! group from the options), build the manager over it, bind the socket
//! (a socket file no server listens on is replaced; a live one, or a path
//! that is not a socket, is an error).  Accept: check the peer with
//! `SO_PEERCRED`, bound the number of connections, give each a thread.
//! Stop (the flag given to [`Server::run`], which `kvtierd` sets on
//! `SIGTERM`): stop accepting, close every connection (each releases what
//! its requests hold), shut the manager down (draining its tiers), remove
//! the region's names and the socket.

use std::collections::HashMap;
use std::os::fd::AsRawFd;
use std::os::unix::fs::{FileTypeExt, MetadataExt};
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::thread::JoinHandle;
use std::time::Duration;

use parking_lot::Mutex;

use super::connection;
use super::options::DaemonConfig;
use super::state::{ClientEntry, ClientStatus, ServerInfo, Shared};
use crate::config::SlotSource;
use crate::region::{OpenMode, Region};
use crate::tiering::Manager;
use crate::{Error, Result};

/// A running node server.
pub struct Server {
    shared: Arc<Shared>,
    listener: UnixListener,
    socket: PathBuf,
    region: Arc<Region>,
    threads: Mutex<Vec<JoinHandle<()>>>,
    /// The `/metrics` endpoint, when configured (stopped first).
    metrics: Mutex<Option<crate::serve::MetricsServer>>,
}

impl Server {
    /// Builds the region, the manager and its tiers from `config`, and
    /// binds `socket` (mode and group from the options).
    pub fn start(config: DaemonConfig, socket: &Path) -> Result<Server> {
        let mut config = config;
        let mut region_options = config
            .manager
            .region
            .take()
            .ok_or_else(|| Error::InvalidArgument("configuration: region: missing".into()))?;
        let base_name = region_options.name.clone();
        if let Err(e) =
            crate::region::reclaim_stale(&region_options.directory, &format!("{base_name}-"))
        {
            log::warn!("kvtierd: sweeping stale regions of {base_name}: {e}");
        }
        let block_bytes = config.manager.block_bytes;
        if block_bytes == 0 {
            return Err(Error::InvalidArgument(
                "configuration: block_bytes: kvtierd needs the block size (the region's slot size)"
                    .into(),
            ));
        }
        region_options.name = format!("{base_name}-{}", std::process::id());
        region_options.open = OpenMode::Create;
        region_options.mode = config.server.mode;
        region_options.slot_count = config.manager.primary.capacity;
        region_options.slot_bytes = usize::try_from(block_bytes)
            .map_err(|_| Error::InvalidArgument("configuration: block_bytes: too large".into()))?;
        let listener = bind(socket)?;
        let region = Arc::new(Region::create_or_join(&region_options).inspect_err(|_| {
            let _ = std::fs::remove_file(socket);
        })?);
        let cleanup = |e: Error| {
            let _ = region.unlink();
            let _ = std::fs::remove_file(socket);
            e
        };
        set_owner(socket, region.paths(), &config.server).map_err(cleanup)?;
        let manager = config
            .manager
            .build_with(SlotSource::View(region.slots()))
            .map_err(cleanup)?;
        let info = ServerInfo {
            protocol: super::protocol::VERSION,
            version: env!("CARGO_PKG_VERSION").to_string(),
            client_id: 0,
            region_name: region.name().to_string(),
            region_directory: region_options.directory.clone(),
            slot_count: region.slot_count(),
            slot_bytes: block_bytes,
            slot_stride: region.stride() as u64,
            worker_bytes: region.worker_bytes() as u64,
            capacity: config.manager.primary.capacity,
            fingerprint: config.server.fingerprint.clone(),
        };
        // SAFETY: getuid has no preconditions.
        let own_uid = unsafe { libc::getuid() };
        let listen = config.manager.metrics.as_ref().map(|m| m.listen.clone());
        let shared = Arc::new(Shared {
            manager: Arc::new(manager),
            config,
            info,
            clients: Mutex::new(HashMap::new()),
            next_id: AtomicU64::new(1),
            connected: AtomicUsize::new(0),
            disconnects: AtomicU64::new(0),
            refused: AtomicU64::new(0),
            own_uid,
        });
        let metrics = match listen {
            Some(l) => Some(crate::serve::MetricsServer::start(&l, &shared).map_err(cleanup)?),
            None => None,
        };
        Ok(Server {
            shared,
            listener,
            socket: socket.to_path_buf(),
            region,
            threads: Mutex::new(Vec::new()),
            metrics: Mutex::new(metrics),
        })
    }

    /// The `/metrics` endpoint's address, when configured.
    pub fn metrics_address(&self) -> Option<std::net::SocketAddr> {
        self.metrics.lock().as_ref().map(|m| m.address())
    }

    /// What clients are told at connect.
    pub fn info(&self) -> &ServerInfo {
        &self.shared.info
    }

    /// The manager the server serves.
    pub fn manager(&self) -> &Arc<Manager> {
        &self.shared.manager
    }

    /// Accepts and serves connections until `stop` is set (checked every
    /// 100 ms), then stops as the module documentation says.
    pub fn run(&self, stop: &AtomicBool) -> Result<()> {
        self.listener
            .set_nonblocking(true)
            .map_err(|e| Error::io("kvtierd: the listening socket", e))?;
        while !stop.load(Ordering::Relaxed) {
            match self.listener.accept() {
                Ok((stream, _)) => self.admit(stream),
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                    let mut p = libc::pollfd {
                        fd: self.listener.as_raw_fd(),
                        events: libc::POLLIN,
                        revents: 0,
                    };
                    // SAFETY: one valid pollfd.
                    unsafe { libc::poll(&mut p, 1, 100) };
                }
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(e) => {
                    // Out of descriptors and the like: wait and go on.
                    log::warn!("kvtierd: accept: {e}");
                    std::thread::sleep(Duration::from_millis(50));
                }
            }
            self.threads.lock().retain(|t| !t.is_finished());
        }
        self.finish()
    }

    fn admit(&self, stream: UnixStream) {
        let shared = &self.shared;
        let peer = match connection::peer_of(&stream) {
            Ok(p) => p,
            Err(e) => {
                log::warn!("kvtierd: refused a connection: {e}");
                return;
            }
        };
        if let Err(why) = connection::allowed(&shared.config.server, shared.own_uid, peer) {
            shared.refused.fetch_add(1, Ordering::Relaxed);
            log::warn!("kvtierd: refused pid {} uid {}: {why}", peer.pid, peer.uid);
            connection::refuse(&stream, &Error::PeerFailed(why));
            return;
        }
        if shared.connected.load(Ordering::Relaxed) >= shared.config.server.max_clients {
            shared.refused.fetch_add(1, Ordering::Relaxed);
            let why = format!(
                "the server serves {} connections, its bound (server.max_clients)",
                shared.config.server.max_clients
            );
            log::warn!("kvtierd: refused pid {}: {why}", peer.pid);
            connection::refuse(&stream, &Error::NoSpace(why));
            return;
        }
        let id = shared.next_id.fetch_add(1, Ordering::Relaxed);
        let closer = match stream.try_clone() {
            Ok(s) => s,
            Err(e) => {
                log::warn!("kvtierd: a connection: {e}");
                return;
            }
        };
        let status = Arc::new(ClientStatus::default());
        shared.clients.lock().insert(
            id,
            ClientEntry {
                peer,
                name: String::new(),
                engine: false,
                status: status.clone(),
                closer,
            },
        );
        shared.connected.fetch_add(1, Ordering::Relaxed);
        let thread_shared = shared.clone();
        let spawned = std::thread::Builder::new()
            .name(format!("kvtierd-c{id}"))
            .spawn(move || {
                connection::serve(&thread_shared, stream, id, peer, &status);
                thread_shared.clients.lock().remove(&id);
                thread_shared.connected.fetch_sub(1, Ordering::Relaxed);
                thread_shared.disconnects.fetch_add(1, Ordering::Relaxed);
            });
        match spawned {
            Ok(t) => self.threads.lock().push(t),
            Err(e) => {
                log::warn!("kvtierd: no thread for a connection: {e}");
                shared.clients.lock().remove(&id);
                shared.connected.fetch_sub(1, Ordering::Relaxed);
            }
        }
    }

    fn finish(&self) -> Result<()> {
        self.metrics.lock().take();
        for c in self.shared.clients.lock().values() {
            let _ = c.closer.shutdown(std::net::Shutdown::Both);
        }
        for t in self.threads.lock().drain(..) {
            let _ = t.join();
        }
        let drained = self.shared.manager.shutdown();
        let _ = self.region.unlink();
        let _ = std::fs::remove_file(&self.socket);
        drained
    }
}

/// Binds `path`, replacing a socket file no server listens on; a live
/// server's socket, or a path that is something else, is an error.
fn bind(path: &Path) -> Result<UnixListener> {
    match std::fs::symlink_metadata(path) {
        Ok(m) if m.file_type().is_socket() => {
            if UnixStream::connect(path).is_ok() {
                return Err(Error::AlreadyExists(format!(
                    "socket {}: a server is listening there already",
                    path.display()
                )));
            }
            // SAFETY: geteuid has no preconditions.
            if m.uid() != unsafe { libc::geteuid() } {
                return Err(Error::AlreadyExists(format!(
                    "socket {}: a stale socket of another user (uid {}); remove it",
                    path.display(),
                    m.uid()
                )));
            }
            std::fs::remove_file(path)
                .map_err(|e| Error::io(format!("removing stale socket {}", path.display()), e))?;
        }
        Ok(_) => {
            return Err(Error::AlreadyExists(format!(
                "{}: exists and is not a socket",
                path.display()
            )));
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => return Err(Error::io(format!("checking {}", path.display()), e)),
    }
    UnixListener::bind(path).map_err(|e| Error::io(format!("binding {}", path.display()), e))
}

/// Applies the options' mode and group to the socket and region files.
fn set_owner(socket: &Path, region: &[PathBuf], o: &super::ServerOptions) -> Result<()> {
    use std::os::unix::fs::PermissionsExt;
    for p in std::iter::once(socket).chain(region.iter().map(PathBuf::as_path)) {
        if let Some(gid) = o.group {
            std::os::unix::fs::lchown(p, None, Some(gid))
                .map_err(|e| Error::io(format!("giving {} to group {gid}", p.display()), e))?;
        }
        std::fs::set_permissions(p, std::fs::Permissions::from_mode(o.mode))
            .map_err(|e| Error::io(format!("setting the mode of {}", p.display()), e))?;
    }
    Ok(())
}
