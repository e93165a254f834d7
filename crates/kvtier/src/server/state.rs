//! What the server's threads share: the manager, the configuration,
//! what clients are told at connect, and the list of connections with
//! what each holds (read by the client list and the metrics).

use std::collections::HashMap;
use std::os::unix::net::UnixStream;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize};

use parking_lot::Mutex;

use super::options::DaemonConfig;
use crate::tiering::Manager;

/// What the server tells a client at connect: where the region is and
/// what a block means (the handshake's answer, JSON).
#[derive(Clone, Debug, serde::Serialize, serde::Deserialize, PartialEq)]
pub struct ServerInfo {
    /// The protocol version.
    pub protocol: u32,
    /// The server's kvtier version.
    pub version: String,
    /// The id the server gave this connection (request names and logs).
    pub client_id: u64,
    /// The region's file name.
    pub region_name: String,
    /// The directory holding the region's files.
    pub region_directory: PathBuf,
    /// Number of slots.
    pub slot_count: u32,
    /// Bytes per slot (the block size).
    pub slot_bytes: u64,
    /// Bytes from one slot to the next.
    pub slot_stride: u64,
    /// Bytes of each worker's area within a slot (the per-worker layout);
    /// 0 when slots are not split per worker.
    pub worker_bytes: u64,
    /// Slots of the primary tier.
    pub capacity: u32,
    /// The model/layout fingerprint engines must pass.
    pub fingerprint: String,
}

/// State every connection thread shares.
pub(crate) struct Shared {
    pub(crate) manager: Arc<Manager>,
    pub(crate) config: DaemonConfig,
    pub(crate) info: ServerInfo,
    pub(crate) clients: Mutex<HashMap<u64, ClientEntry>>,
    pub(crate) next_id: AtomicU64,
    pub(crate) connected: AtomicUsize,
    pub(crate) disconnects: AtomicU64,
    pub(crate) refused: AtomicU64,
    pub(crate) own_uid: u32,
}

/// Who is on the other end of a connection (`SO_PEERCRED`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
pub struct Peer {
    /// Process id.
    pub pid: i32,
    /// User id.
    pub uid: u32,
    /// Group id.
    pub gid: u32,
}

/// What the client list shows of a connection.
pub(crate) struct ClientEntry {
    /// Its credentials.
    pub(crate) peer: Peer,
    /// The name it gave at the handshake.
    pub(crate) name: String,
    /// Whether it is an engine (an observer holds nothing).
    pub(crate) engine: bool,
    /// What it holds, kept current by its thread.
    pub(crate) status: Arc<ClientStatus>,
    /// A second handle on its socket, to close it at shutdown.
    pub(crate) closer: UnixStream,
}

/// What a connection holds, updated after every call.
#[derive(Default)]
pub(crate) struct ClientStatus {
    /// Requests held.
    pub(crate) requests: AtomicUsize,
    /// Pins held.
    pub(crate) pins: AtomicUsize,
    /// Write-pending keys of stores in flight.
    pub(crate) stores: AtomicUsize,
    /// Calls answered.
    pub(crate) calls: AtomicUsize,
}
