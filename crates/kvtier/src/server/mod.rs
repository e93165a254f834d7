//! The node server: one manager, its region and its tiers in `kvtierd`,
//! shared by every engine on the machine through a Unix socket.
//!
//! An engine connects with [`Client::connect`] (C:
//! `kvtier_manager_connect`) and gets a manager on which every call of
//! [`ManagerCalls`](crate::tiering::ManagerCalls) works as on a local
//! one; the server's region is mapped in the engine, so blocks are copied
//! to and from slots directly and only keys, slots and answers cross the
//! socket.  Blocks are shared (a block one engine stored is a hit for
//! every engine); requests, pins and write-pending keys belong to the
//! connection that made them ([`session`]).  The protocol is in
//! [`protocol`] and [`wire`], its framing in [`transport`] (or, for an
//! engine that asked, in shared memory: [`ring`]); the server in
//! [`daemon`] and [`connection`].  `docs/server.md` describes all of it
//! for operators and for readers of the wire.

pub mod client;
pub mod connection;
pub mod daemon;
mod metrics;
pub mod options;
pub mod protocol;
pub mod ring;
pub mod session;
mod state;
pub mod transport;
pub mod wire;

pub use client::{Client, ConnectOptions, Transport};
pub use daemon::Server;
pub use options::{DaemonConfig, ServerOptions};
pub use state::{Peer, ServerInfo};
