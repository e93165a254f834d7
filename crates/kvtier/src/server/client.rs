//! A manager in a node server, reached through its socket: [`Client`]
//! implements [`ManagerCalls`] by sending each call as one frame and
//! reading its answer, and maps the server's region so the engine copies
//! blocks to and from slots itself (no block byte crosses the socket).
//!
//! Calls are serialized on the connection (one in flight at a time, as a
//! local manager serializes them under its lock).  A call waits for its
//! answer at most the call timeout; a server that closed the connection,
//! died, or did not answer in time makes this call and every later one
//! [`Error::Disconnected`].

use std::os::fd::AsRawFd;
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use parking_lot::Mutex;

use super::connection::get_stats;
use super::protocol::{self as p, ANSWER_ERROR, ANSWER_OK, Hello, Op, Role};
pub use super::ring::Transport;
use super::ring::{self, Arrived, Ring};
use super::state::ServerInfo;
use super::transport::{self, FrameReader, PREFIX, Waiting};
use super::wire::{Malformed, Reader, Writer};
use crate::key::KeyBatch;
use crate::primary::{CompleteStoreReport, StoreOutcome, StorePlan};
use crate::region::{OpenMode, Prefault, Region, RegionOptions, SlotMemory};
use crate::request::{RequestId, RequestState};
use crate::stats::Stat;
use crate::tiering::{LookupAnswer, ManagerCalls, ManagerStats, RequestParams, StartedRequest};
use crate::{Error, Result};

/// How a client connects.
#[derive(Clone, Debug)]
pub struct ConnectOptions {
    /// Bytes per block the engine means; 0: whatever the server has.
    pub block_bytes: u64,
    /// Slot stride the engine means; 0: whatever the server has.
    pub slot_stride: u64,
    /// The engine's model/layout fingerprint (must equal the server's).
    pub fingerprint: String,
    /// A label for the server's logs, metrics and client list.
    pub name: String,
    /// Longest wait for one answer before the server is taken as gone
    /// (default 10 s).
    pub call_timeout: Duration,
    /// How long a call polls the socket before sleeping for its answer
    /// (default 50 µs: an answer usually comes sooner, and a sleep and
    /// wake-up cost more than the spin).
    pub spin: Duration,
    /// Map the server's region (default true; an observer does not).
    pub map_region: bool,
    /// What carries the calls' frames (default [`Transport::Ring`]: the
    /// socket when the server does not grant a ring).
    pub transport: Transport,
}

impl Default for ConnectOptions {
    fn default() -> Self {
        ConnectOptions {
            block_bytes: 0,
            slot_stride: 0,
            fingerprint: String::new(),
            name: String::new(),
            call_timeout: Duration::from_secs(10),
            spin: Duration::from_micros(50),
            map_region: true,
            transport: Transport::Ring,
        }
    }
}

/// The socket and its buffers, one call at a time.
struct Link {
    stream: UnixStream,
    reader: FrameReader,
    out: Vec<u8>,
    /// The shared-memory carrier, once granted.
    ring: Option<Ring>,
    /// An answer copied out of the ring.
    from_ring: Vec<u8>,
    /// Why the connection is gone, once it is.
    gone: Option<String>,
    /// Whether [`ManagerCalls::shutdown`] closed it.
    shut_down: bool,
}

/// A manager served by `kvtierd`, through its socket.
pub struct Client {
    link: Mutex<Link>,
    info: ServerInfo,
    socket: PathBuf,
    timeout: Duration,
    spin: Duration,
    /// The server's region, mapped here (kept for as long as the client).
    region: Option<Region>,
    slots: Option<SlotMemory>,
}

impl Client {
    /// Connects to the server at `socket` as an engine.
    pub fn connect(socket: &Path, options: &ConnectOptions) -> Result<Client> {
        Client::connect_as(socket, options, Role::Engine)
    }

    /// Connects to the server at `socket` as an observer (statistics and
    /// the client list; no requests, no region).
    pub fn observe(socket: &Path, options: &ConnectOptions) -> Result<Client> {
        let o = ConnectOptions {
            map_region: false,
            transport: Transport::Socket,
            ..options.clone()
        };
        Client::connect_as(socket, &o, Role::Observer)
    }

    fn connect_as(socket: &Path, o: &ConnectOptions, role: Role) -> Result<Client> {
        if o.call_timeout.is_zero() {
            return Err(Error::InvalidArgument(
                "connect options: call_timeout must be above 0".into(),
            ));
        }
        let stream = UnixStream::connect(socket).map_err(|e| {
            let what = format!("connecting to kvtierd at {}", socket.display());
            match e.kind() {
                std::io::ErrorKind::NotFound | std::io::ErrorKind::ConnectionRefused => {
                    Error::Disconnected(format!("{what}: no server listens there ({e})"))
                }
                _ => Error::io(what, e),
            }
        })?;
        let mut link = Link {
            stream,
            reader: FrameReader::default(),
            out: Vec::new(),
            ring: None,
            from_ring: Vec::new(),
            gone: None,
            shut_down: false,
        };
        transport::begin(&mut link.out);
        Hello {
            version: p::VERSION,
            block_bytes: o.block_bytes,
            slot_stride: o.slot_stride,
            fingerprint: o.fingerprint.clone(),
            role,
            name: o.name.clone(),
        }
        .put(&mut Writer::new(&mut link.out));
        let deadline = Instant::now() + o.call_timeout;
        let json = exchange(&mut link, socket, o.spin, deadline, |r| {
            r.str("the server's information").map(str::to_owned)
        })?;
        let info: ServerInfo = serde_json::from_str(&json).map_err(|e| {
            Error::InvalidArgument(format!("server protocol: the server's information: {e}"))
        })?;
        if o.transport == Transport::Ring && role == Role::Engine {
            link.ring = ask_ring(&mut link, socket, deadline)?;
        }
        let (region, slots) = if o.map_region {
            let mut ro = RegionOptions::new(
                info.region_name.clone(),
                info.slot_count,
                usize::try_from(info.slot_stride).unwrap_or(usize::MAX),
            );
            ro.directory = info.region_directory.clone();
            ro.worker_bytes = usize::try_from(info.worker_bytes).unwrap_or(usize::MAX);
            ro.open = OpenMode::Join;
            ro.prefault = Prefault::Off;
            let region = Region::create_or_join(&ro).map_err(|e| {
                e.within(&format!(
                    "mapping the region {} of kvtierd",
                    info.region_name
                ))
            })?;
            let slots = region.slots();
            (Some(region), Some(slots))
        } else {
            (None, None)
        };
        Ok(Client {
            link: Mutex::new(link),
            info,
            socket: socket.to_path_buf(),
            timeout: o.call_timeout,
            spin: o.spin,
            region,
            slots,
        })
    }

    /// What the server said at connect: its region, layout and block size.
    pub fn info(&self) -> &ServerInfo {
        &self.info
    }

    /// What carries this connection's calls: [`Transport::Ring`] when
    /// asked for and granted, else [`Transport::Socket`].
    pub fn transport(&self) -> Transport {
        if self.link.lock().ring.is_some() {
            Transport::Ring
        } else {
            Transport::Socket
        }
    }

    /// The region mapped from the server, if mapped.
    pub fn region(&self) -> Option<&Region> {
        self.region.as_ref()
    }

    /// The server and its clients, as JSON (see `docs/server.md`).
    pub fn clients_json(&self) -> Result<String> {
        self.call(
            Op::Clients,
            |_| {},
            |r| r.str("the client list").map(str::to_owned),
        )
    }

    /// Sends call `op` with the arguments `args` writes; reads the answer
    /// with `read` (after its status byte), or its error.
    fn call<T>(
        &self,
        op: Op,
        args: impl FnOnce(&mut Writer<'_>),
        read: impl FnOnce(&mut Reader<'_>) -> std::result::Result<T, Malformed>,
    ) -> Result<T> {
        let mut link = self.link.lock();
        if link.shut_down {
            return Err(Error::Closed("manager: shut down".into()));
        }
        if let Some(why) = &link.gone {
            return Err(Error::Disconnected(why.clone()));
        }
        transport::begin(&mut link.out);
        {
            let mut w = Writer::new(&mut link.out);
            w.u8(op as u8);
            args(&mut w);
        }
        let deadline = Instant::now() + self.timeout;
        exchange(&mut link, &self.socket, self.spin, deadline, read)
    }

    fn keys_call<T>(
        &self,
        op: Op,
        request: RequestId,
        keys: &KeyBatch<'_>,
        more: impl FnOnce(&mut Writer<'_>),
        read: impl FnOnce(&mut Reader<'_>) -> std::result::Result<T, Malformed>,
    ) -> Result<T> {
        self.call(
            op,
            |w| {
                w.u64(request.0).keys(keys);
                more(w);
            },
            read,
        )
    }
}

/// Asks the server for the ring; `None`: not granted (the socket carries
/// on).
fn ask_ring(link: &mut Link, socket: &Path, deadline: Instant) -> Result<Option<Ring>> {
    ring::ask(&link.stream, &mut link.out, deadline).map_err(|why| {
        let why = format!(
            "kvtierd at {}: asking for the ring: {why}",
            socket.display()
        );
        let _ = link.stream.shutdown(std::net::Shutdown::Both);
        link.gone = Some(why.clone());
        Error::Disconnected(why)
    })
}

/// Sends the frame `link.out` holds and reads the answer.  A transport
/// failure or a malformed answer marks the link gone: the server's state
/// after it is unknown, so no later call is made on it.
fn exchange<T>(
    link: &mut Link,
    socket: &Path,
    spin: Duration,
    deadline: Instant,
    read: impl FnOnce(&mut Reader<'_>) -> std::result::Result<T, Malformed>,
) -> Result<T> {
    let gone = |link: &mut Link, why: String| {
        let why = format!("kvtierd at {}: {why}", socket.display());
        let _ = link.stream.shutdown(std::net::Shutdown::Both);
        link.gone = Some(why.clone());
        Error::Disconnected(why)
    };
    // With a ring, the call goes there, or is announced there and sent on
    // the socket when too large.
    let in_ring = link
        .ring
        .as_mut()
        .map(|r| !r.send_call(&link.out[PREFIX..]));
    if in_ring != Some(true) {
        if let Err(e) = transport::send(&link.stream, &mut link.out, Some(deadline)) {
            // A server that refuses a connection at accept answers and closes
            // before reading the handshake: its answer is here already.
            let now = Waiting::Poll {
                spin: Duration::ZERO,
                deadline: Instant::now(),
            };
            if let Ok(Some(frame)) = link.reader.next(&link.stream, now) {
                let mut r = Reader::new(frame);
                if r.u8("the answer's status") == Ok(ANSWER_ERROR) {
                    if let Ok(refusal) = p::get_error(&mut r) {
                        gone(link, format!("refused: {refusal}"));
                        return Err(refusal);
                    }
                }
            }
            return Err(gone(link, format!("sending a call: {e}")));
        }
    }
    let frame = match receive(link, spin, deadline) {
        Ok(f) => f,
        Err(why) => return Err(gone(link, why)),
    };
    let mut r = Reader::new(frame);
    let decoded = match r.u8("the answer's status") {
        Ok(ANSWER_OK) => read(&mut r).map(Ok),
        Ok(ANSWER_ERROR) => p::get_error(&mut r).map(Err),
        Ok(_) => Err(Malformed("the answer's status")),
        Err(m) => Err(m),
    }
    .and_then(|v| r.finish().map(|()| v));
    match decoded {
        Ok(v) => v,
        Err(m) => Err(gone(link, format!("a malformed answer ({})", m.0))),
    }
}

/// The answer to the call just sent: from the ring when there is one
/// (unless it says the answer is on the socket), else from the socket.
/// `Err`: why the connection is gone.
fn receive(
    link: &mut Link,
    spin: Duration,
    deadline: Instant,
) -> std::result::Result<&[u8], String> {
    let mut how = Waiting::Poll { spin, deadline };
    if let Some(r) = &mut link.ring {
        match r.wait_answer(link.stream.as_raw_fd(), spin, deadline, &mut link.from_ring) {
            Ok(Arrived::Ring) => return Ok(&link.from_ring),
            Ok(Arrived::Socket | Arrived::SocketOnly) => {
                how = Waiting::Poll {
                    spin: Duration::ZERO,
                    deadline,
                };
            }
            Err(e) => return Err(why_gone(e)),
        }
    }
    match link.reader.next(&link.stream, how) {
        Ok(Some(f)) => Ok(f),
        Ok(None) => Err("the server closed the connection".into()),
        Err(e) => Err(why_gone(e)),
    }
}

fn why_gone(e: std::io::Error) -> String {
    match e.kind() {
        std::io::ErrorKind::TimedOut => "no answer within the call timeout".into(),
        std::io::ErrorKind::UnexpectedEof => "the server closed the connection".into(),
        _ => format!("reading an answer: {e}"),
    }
}

impl Drop for Client {
    /// Unmaps the region; when the server is gone, removes the region's
    /// files if no process holds them any more (this client was the last
    /// to map them), so a server's death leaves nothing behind once its
    /// engines let go.
    fn drop(&mut self) {
        self.slots = None;
        let Some(region) = self.region.take() else {
            return;
        };
        drop(region);
        let gone = {
            let link = self.link.lock();
            link.gone.is_some() && !link.shut_down
        };
        if gone {
            let _ =
                crate::region::reclaim_stale(&self.info.region_directory, &self.info.region_name);
        }
    }
}

impl ManagerCalls for Client {
    fn request_begin(&self, name: &str, params: RequestParams) -> Result<StartedRequest> {
        self.call(
            Op::RequestBegin,
            |w| {
                w.str(name);
                p::put_params(w, &params);
            },
            |r| {
                Ok(StartedRequest {
                    id: RequestId(r.u64("a request id")?),
                    policy: p::get_policy(r)?,
                })
            },
        )
    }
    fn lookup_prefix(&self, request: RequestId, keys: KeyBatch<'_>) -> Result<LookupAnswer> {
        self.keys_call(Op::LookupPrefix, request, &keys, |_| {}, p::get_answer)
    }
    fn lookup_per_key(&self, request: RequestId, keys: KeyBatch<'_>) -> Result<LookupAnswer> {
        self.keys_call(Op::LookupPerKey, request, &keys, |_| {}, p::get_answer)
    }
    fn prepare_load(
        &self,
        request: RequestId,
        keys: KeyBatch<'_>,
        slots_out: &mut Vec<u32>,
    ) -> Result<()> {
        let n = keys.len();
        self.keys_call(
            Op::PrepareLoad,
            request,
            &keys,
            |_| {},
            |r| {
                let got = r.u32s(slots_out)?;
                if slots_out.len() != n {
                    return Err(Malformed("a slot per key"));
                }
                Ok(got)
            },
        )?
    }
    fn set_positions(
        &self,
        request: RequestId,
        keys: KeyBatch<'_>,
        positions: &[u64],
    ) -> Result<()> {
        self.keys_call(
            Op::SetPositions,
            request,
            &keys,
            |w| {
                w.u64s(positions);
            },
            |_| Ok(()),
        )
    }
    fn touch(&self, request: RequestId, keys: KeyBatch<'_>) -> Result<()> {
        self.keys_call(Op::Touch, request, &keys, |_| {}, |_| Ok(()))
    }
    fn complete_load(&self, request: RequestId, keys: KeyBatch<'_>) -> Result<()> {
        self.keys_call(Op::CompleteLoad, request, &keys, |_| {}, |_| Ok(()))
    }
    fn prepare_store(
        &self,
        request: RequestId,
        keys: KeyBatch<'_>,
        plan: &mut StorePlan,
    ) -> Result<StoreOutcome> {
        self.keys_call(
            Op::PrepareStore,
            request,
            &keys,
            |_| {},
            |r| {
                let planned = r.bool("the outcome")?;
                let a = r.keys(&mut plan.to_store)?;
                let b = r.u32s(&mut plan.slots)?;
                let c = r.keys(&mut plan.evicted)?;
                if plan.slots.len() != plan.to_store.len() {
                    return Err(Malformed("a slot per key to store"));
                }
                Ok(a.and(b).and(c).map(|()| {
                    if planned {
                        StoreOutcome::Planned
                    } else {
                        StoreOutcome::Refused
                    }
                }))
            },
        )?
    }
    fn complete_store(
        &self,
        request: RequestId,
        keys: KeyBatch<'_>,
        success: bool,
    ) -> Result<CompleteStoreReport> {
        self.keys_call(
            Op::CompleteStore,
            request,
            &keys,
            |w| {
                w.bool(success);
            },
            p::get_report,
        )
    }
    fn request_finished(&self, request: RequestId) -> Result<()> {
        self.call(
            Op::RequestFinished,
            |w| {
                w.u64(request.0);
            },
            |_| Ok(()),
        )
    }
    fn request_state(&self, request: RequestId) -> Result<RequestState> {
        self.call(
            Op::RequestState,
            |w| {
                w.u64(request.0);
            },
            p::get_state,
        )
    }
    fn schedule_end(&self) -> Result<()> {
        self.call(Op::ScheduleEnd, |_| {}, |_| Ok(()))
    }
    fn has_pending_work(&self) -> Result<bool> {
        self.call(Op::HasPendingWork, |_| {}, |r| r.bool("a boolean"))
    }
    fn manager_stats(&self) -> Result<ManagerStats> {
        let json = self.call(
            Op::ManagerStats,
            |_| {},
            |r| r.str("statistics").map(str::to_owned),
        )?;
        serde_json::from_str(&json)
            .map_err(|e| Error::InvalidArgument(format!("server protocol: statistics: {e}")))
    }
    fn tier_stats(&self, tier: usize) -> Result<Vec<Stat>> {
        self.call(
            Op::TierStats,
            |w| {
                w.u64(tier as u64);
            },
            get_stats,
        )
    }
    fn prometheus_text(&self) -> Result<String> {
        self.call(
            Op::Prometheus,
            |_| {},
            |r| r.str("the exposition").map(str::to_owned),
        )
    }
    fn take_error_if_dyn(
        &self,
        accept: &mut dyn FnMut(&str) -> (bool, usize),
    ) -> Result<Option<usize>> {
        let oldest = self.call(
            Op::PeekError,
            |_| {},
            |r| {
                Ok(if r.bool("a flag")? {
                    Some(r.str("a message")?.to_owned())
                } else {
                    None
                })
            },
        )?;
        let Some(message) = oldest else {
            return Ok(None);
        };
        let (take, value) = accept(&message);
        if take {
            // Removed only if it is still the oldest: another engine may
            // have taken it meanwhile.
            self.call(
                Op::PopError,
                |w| {
                    w.str(&message);
                },
                |r| r.bool("a flag"),
            )?;
        }
        Ok(Some(value))
    }
    fn slot_memory(&self) -> Option<&SlotMemory> {
        self.slots.as_ref()
    }
    fn shutdown(&self) -> Result<()> {
        let mut link = self.link.lock();
        let _ = link.stream.shutdown(std::net::Shutdown::Both);
        link.shut_down = true;
        Ok(())
    }
}
