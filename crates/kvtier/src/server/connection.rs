//! One connection, on its own thread: who the peer is and whether it may
//! connect, the handshake, then calls until the peer leaves.  A frame
//! that does not decode, an unknown op, a peer that stops reading
//! (send timeout) or leaves in the middle of a frame ends this connection
//! and nothing else; however it ends, its session releases what its
//! requests held.

use std::os::fd::AsRawFd;
use std::os::unix::net::UnixStream;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use super::options::ServerOptions;
use super::protocol::{self as p, ANSWER_ERROR, ANSWER_OK, Hello, Op, Role};
use super::ring::{self, Arrived, Ring};
use super::session::{Bounds, Session};
use super::state::{ClientStatus, Peer, ServerInfo, Shared};
use super::transport::{self, FrameReader, Waiting};
use super::wire::{Malformed, Reader, Writer};
use crate::key::{Key, KeyBatch};
use crate::primary::StorePlan;
use crate::request::RequestId;
use crate::stats::{Stat, StatKind};
use crate::{Error, Result};

/// The peer's credentials, from the kernel.
pub fn peer_of(stream: &UnixStream) -> std::io::Result<Peer> {
    let mut cred = libc::ucred {
        pid: 0,
        uid: 0,
        gid: 0,
    };
    let mut len = std::mem::size_of::<libc::ucred>() as libc::socklen_t;
    // SAFETY: `cred` and `len` are valid for the call.
    let r = unsafe {
        libc::getsockopt(
            stream.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_PEERCRED,
            (&raw mut cred).cast(),
            &mut len,
        )
    };
    if r != 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(Peer {
        pid: cred.pid,
        uid: cred.uid,
        gid: cred.gid,
    })
}

/// Whether `peer` may connect: its uid or gid listed, or, with no list,
/// the server's own user.
pub fn allowed(o: &ServerOptions, own_uid: u32, peer: Peer) -> std::result::Result<(), String> {
    let ok = if o.allowed_uids.is_empty() && o.allowed_gids.is_empty() {
        peer.uid == own_uid
    } else {
        o.allowed_uids.contains(&peer.uid) || o.allowed_gids.contains(&peer.gid)
    };
    if ok {
        Ok(())
    } else {
        Err(format!(
            "uid {} (gid {}) may not connect: not in server.allowed_uids or server.allowed_gids",
            peer.uid, peer.gid
        ))
    }
}

/// Sends `e` as the answer to a handshake that is refused (best effort:
/// the peer may be gone).
pub fn refuse(stream: &UnixStream, e: &Error) {
    let _ = stream.set_write_timeout(Some(Duration::from_secs(1)));
    let mut buf = Vec::new();
    transport::begin(&mut buf);
    Writer::new(&mut buf).u8(ANSWER_ERROR);
    p::put_error(&mut Writer::new(&mut buf), e);
    let _ = transport::send(stream, &mut buf, None);
}

/// How long a connection's thread polls for the next call after an answer
/// before it sleeps: an engine's calls come in bursts (a step's), and a
/// thread that slept must be woken, which costs more than the whole call
/// (the bench `server` measures both).
const NEXT_CALL_SPIN: Duration = Duration::from_micros(50);

/// Serves one connection until it ends.
pub(super) fn serve(
    shared: &Shared,
    stream: UnixStream,
    id: u64,
    peer: Peer,
    status: &ClientStatus,
) {
    let ms = shared.config.server.handshake_timeout_ms;
    let send_timeout = shared.config.server.send_timeout();
    let _ = stream.set_read_timeout(Some(Duration::from_millis(ms)));
    let _ = stream.set_write_timeout(Some(send_timeout));
    let mut reader = FrameReader::default();
    let hello = match handshake(shared, &stream, &mut reader, id) {
        Ok(h) => h,
        Err(why) => {
            log::info!(
                "kvtierd: client {id} (pid {}) not admitted: {why}",
                peer.pid
            );
            return;
        }
    };
    if let Some(c) = shared.clients.lock().get_mut(&id) {
        c.name = hello.name.clone();
        c.engine = hello.role == Role::Engine;
    }
    log::info!(
        "kvtierd: client {id} {:?} connected (pid {}, uid {}, {:?})",
        hello.name,
        peer.pid,
        peer.uid,
        hello.role
    );
    let _ = stream.set_read_timeout(None);
    let capacity = shared.info.capacity as f64;
    let o = &shared.config.server;
    let bounds = Bounds {
        requests: o.max_requests_per_client,
        pins: ((capacity * o.max_pinned_share) as usize).max(1),
        stores: ((capacity * o.max_store_share) as usize).max(1),
    };
    let mut calls = Calls {
        session: Session::new(shared.manager.clone(), id, bounds),
        shared,
        role: hello.role,
        keys: Vec::new(),
        slots: Vec::new(),
        positions: Vec::new(),
        plan: StorePlan::default(),
    };
    let mut out = Vec::new();
    // Once granted, calls come through the ring (or, too large for it,
    // announced there and sent on the socket); a frame sent on the socket
    // unannounced is still answered there.
    let mut ring: Option<Ring> = None;
    let mut from_ring = Vec::new();
    let ended = loop {
        let socket_wait = Waiting::Poll {
            spin: Duration::ZERO,
            deadline: Instant::now() + send_timeout,
        };
        let (got, via_ring) = match &mut ring {
            None => {
                let how = Waiting::SpinThenBlock {
                    spin: NEXT_CALL_SPIN,
                };
                (reader.next(&stream, how), false)
            }
            Some(r) => match r.wait_call(stream.as_raw_fd(), NEXT_CALL_SPIN, &mut from_ring) {
                Ok(Arrived::Ring) => (Ok(Some(&from_ring[..])), true),
                Ok(Arrived::Socket) => (reader.next(&stream, socket_wait), true),
                Ok(Arrived::SocketOnly) => (reader.next(&stream, socket_wait), false),
                Err(e) => break format!("{e}"),
            },
        };
        let frame = match got {
            Ok(Some(f)) => f,
            Ok(None) => break "closed the connection".to_string(),
            Err(e) => break format!("{e}"),
        };
        transport::begin(&mut out);
        let deadline = Instant::now() + send_timeout;
        if frame == [Op::Ring as u8] && ring.is_none() && o.ring && hello.role == Role::Engine {
            match Ring::create() {
                Ok((r, fd)) => {
                    Writer::new(&mut out).u8(ANSWER_OK).bool(true);
                    if let Err(e) = ring::send_frame_with_fd(&stream, &mut out, &fd, Some(deadline))
                    {
                        break format!("stopped reading its answers ({e})");
                    }
                    ring = Some(r);
                    continue;
                }
                // Answered "not granted" below: the socket carries on.
                Err(e) => log::warn!("kvtierd: client {id}: no ring ({e})"),
            }
        }
        if let Err(m) = calls.answer(frame, &mut out) {
            refuse(&stream, &Error::from(m));
            break format!("sent a malformed message ({})", m.0);
        }
        let h = calls.session.holdings();
        status.requests.store(h.requests, Ordering::Relaxed);
        status.pins.store(h.pins, Ordering::Relaxed);
        status.stores.store(h.stores, Ordering::Relaxed);
        status.calls.fetch_add(1, Ordering::Relaxed);
        let on_socket = match &mut ring {
            Some(r) if via_ring => r.send_answer(&out[transport::PREFIX..]),
            _ => true,
        };
        if on_socket {
            if let Err(e) = transport::send(&stream, &mut out, Some(deadline)) {
                break format!("stopped reading its answers ({e})");
            }
        }
    };
    let h = calls.session.holdings();
    calls.session.release_all();
    log::info!(
        "kvtierd: client {id} left ({ended}); released {} requests, {} pins, {} stores in flight",
        h.requests,
        h.pins,
        h.stores
    );
}

/// Reads the first frame and answers it: the server's information, or
/// why the client is refused.
fn handshake(
    shared: &Shared,
    stream: &UnixStream,
    reader: &mut FrameReader,
    id: u64,
) -> std::result::Result<Hello, String> {
    // One deadline for the whole handshake: a peer dripping its bytes
    // does not get a new timeout with each.
    let deadline =
        Instant::now() + Duration::from_millis(shared.config.server.handshake_timeout_ms);
    let how = Waiting::Poll {
        spin: Duration::ZERO,
        deadline,
    };
    let frame = match reader.next(stream, how) {
        Ok(Some(f)) => f,
        Ok(None) => return Err("closed before its handshake".into()),
        Err(e) => return Err(format!("no handshake: {e}")),
    };
    let mut r = Reader::new(frame);
    let refused = |e: Error| {
        let why = e.to_string();
        refuse(stream, &e);
        Err(why)
    };
    if r.u8("the op") != Ok(Op::Hello as u8) {
        return refused(Error::InvalidArgument(
            "server protocol: the first message must be the handshake".into(),
        ));
    }
    let hello = match Hello::get(&mut r) {
        Err(m) => return refused(m.into()),
        Ok(Err(version)) => {
            return refused(Error::Unsupported(format!(
                "server protocol version {version} (this kvtierd {} speaks version {})",
                env!("CARGO_PKG_VERSION"),
                p::VERSION
            )));
        }
        Ok(Ok(h)) => h,
    };
    let info = &shared.info;
    let mut differences = Vec::new();
    if hello.role == Role::Engine {
        if hello.block_bytes != 0 && hello.block_bytes != info.slot_bytes {
            differences.push(format!(
                "block bytes {} (the server's: {})",
                hello.block_bytes, info.slot_bytes
            ));
        }
        if hello.slot_stride != 0 && hello.slot_stride != info.slot_stride {
            differences.push(format!(
                "slot stride {} (the server's: {})",
                hello.slot_stride, info.slot_stride
            ));
        }
        if hello.fingerprint != info.fingerprint {
            differences.push(format!(
                "fingerprint {:?} (the server's: {:?})",
                hello.fingerprint, info.fingerprint
            ));
        }
    }
    if !differences.is_empty() {
        return refused(Error::InvalidArgument(format!(
            "layout differs from the server's: {}; blocks are shared only between engines \
             that mean the same bytes by the same key",
            differences.join(", ")
        )));
    }
    let answer = ServerInfo {
        client_id: id,
        ..info.clone()
    };
    let mut buf = Vec::new();
    transport::begin(&mut buf);
    let json = serde_json::to_string(&answer).map_err(|e| e.to_string())?;
    Writer::new(&mut buf).u8(ANSWER_OK).str(&json);
    let deadline = Instant::now() + shared.config.server.send_timeout();
    transport::send(stream, &mut buf, Some(deadline))
        .map_err(|e| format!("answering its handshake: {e}"))?;
    Ok(hello)
}

/// A connection's calls, with the buffers they reuse.
struct Calls<'a> {
    session: Session,
    shared: &'a Shared,
    role: Role,
    keys: Vec<Key>,
    slots: Vec<u32>,
    positions: Vec<u64>,
    plan: StorePlan,
}

impl Calls<'_> {
    /// Writes the answer to `frame` into `out` (a frame begun); a frame
    /// that does not decode is `Err`, and the connection ends.
    fn answer(&mut self, frame: &[u8], out: &mut Vec<u8>) -> std::result::Result<(), Malformed> {
        let mut r = Reader::new(frame);
        let op = Op::from_u8(r.u8("the op")?).ok_or(Malformed("an unknown op"))?;
        let engine_only = !matches!(
            op,
            Op::ManagerStats
                | Op::TierStats
                | Op::Prometheus
                | Op::Clients
                | Op::PeekError
                | Op::Ring
        );
        if op == Op::Hello || (self.role == Role::Observer && engine_only) {
            return Err(Malformed("an op this connection may not send"));
        }
        let at = out.len();
        out.push(ANSWER_OK);
        let result = self.call(op, &mut r, out)?;
        r.finish()?;
        if let Err(e) = result {
            out.truncate(at);
            let mut w = Writer::new(out);
            w.u8(ANSWER_ERROR);
            p::put_error(&mut w, &e);
        }
        Ok(())
    }

    /// Decodes `op`'s arguments, makes the call, and appends its results
    /// to `out` (its status byte written already).
    fn call(
        &mut self,
        op: Op,
        r: &mut Reader<'_>,
        out: &mut Vec<u8>,
    ) -> std::result::Result<Result<()>, Malformed> {
        let s = &mut self.session;
        let id = |r: &mut Reader<'_>| r.u64("a request id").map(RequestId);
        Ok(match op {
            Op::Hello => unreachable!("refused above"),
            Op::RequestBegin => {
                let name = r.str("a request name")?;
                let params = p::get_params(r)?;
                s.request_begin(name, params).map(|started| {
                    let mut w = Writer::new(out);
                    w.u64(started.id.0);
                    p::put_policy(&mut w, started.policy);
                })
            }
            Op::LookupPrefix | Op::LookupPerKey => {
                let id = id(r)?;
                let keys = r.keys(&mut self.keys)?;
                keys.and_then(|()| {
                    let m = s.manager_for(id)?;
                    let batch = KeyBatch::from(&self.keys);
                    let a = if op == Op::LookupPrefix {
                        m.lookup_prefix(id, batch)?
                    } else {
                        m.lookup_per_key(id, batch)?
                    };
                    p::put_answer(&mut Writer::new(out), &a);
                    Ok(())
                })
            }
            Op::PrepareLoad => {
                let id = id(r)?;
                let keys = r.keys(&mut self.keys)?;
                keys.and_then(|()| {
                    self.slots.clear();
                    s.prepare_load(id, &self.keys, &mut self.slots)?;
                    Writer::new(out).u32s(&self.slots);
                    Ok(())
                })
            }
            Op::SetPositions => {
                let id = id(r)?;
                let keys = r.keys(&mut self.keys)?;
                let positions = r.u64s(&mut self.positions)?;
                keys.and(positions).and_then(|()| {
                    s.manager_for(id)?.set_positions(
                        id,
                        KeyBatch::from(&self.keys),
                        &self.positions,
                    )
                })
            }
            Op::Touch => {
                let id = id(r)?;
                let keys = r.keys(&mut self.keys)?;
                keys.and_then(|()| s.manager_for(id)?.touch(id, KeyBatch::from(&self.keys)))
            }
            Op::CompleteLoad => {
                let id = id(r)?;
                let keys = r.keys(&mut self.keys)?;
                keys.and_then(|()| s.complete_load(id, &self.keys))
            }
            Op::PrepareStore => {
                let id = id(r)?;
                let keys = r.keys(&mut self.keys)?;
                keys.and_then(|()| {
                    self.plan.clear();
                    let outcome = s.prepare_store(id, &self.keys, &mut self.plan)?;
                    let mut w = Writer::new(out);
                    w.bool(outcome == crate::primary::StoreOutcome::Planned);
                    w.keys(&KeyBatch::from(&self.plan.to_store));
                    w.u32s(&self.plan.slots);
                    w.keys(&KeyBatch::from(&self.plan.evicted));
                    Ok(())
                })
            }
            Op::CompleteStore => {
                let id = id(r)?;
                let keys = r.keys(&mut self.keys)?;
                let success = r.bool("success")?;
                match keys.and_then(|()| s.complete_store(id, &self.keys, success)) {
                    Ok(report) => {
                        p::put_report(&mut Writer::new(out), &report);
                        Ok(())
                    }
                    Err(e) => Err(e),
                }
            }
            Op::RequestFinished => {
                let id = id(r)?;
                s.request_finished(id)
            }
            Op::RequestState => {
                let id = id(r)?;
                // A request this connection holds reads as in a local
                // manager.  Any other reads as never issued while it lives
                // (another connection's), and as gone once the manager let
                // it go, as a local manager answers for a request of its
                // own the connection let go (ids come in sequence: that
                // tells nothing).
                use crate::request::RequestState::{Gone, NeverIssued};
                let state = match s.manager_for(id) {
                    Ok(m) => m.request_state(id),
                    Err(_) => s
                        .manager()
                        .request_state(id)
                        .map(|st| if st == Gone { Gone } else { NeverIssued }),
                };
                state.map(|st| p::put_state(&mut Writer::new(out), st))
            }
            Op::ScheduleEnd => s.manager().schedule_end(),
            Op::HasPendingWork => s.manager().has_pending_work().map(|b| {
                Writer::new(out).bool(b);
            }),
            Op::ManagerStats => s.manager().manager_stats().and_then(|st| {
                let json = serde_json::to_string(&st)
                    .map_err(|e| Error::InvalidArgument(e.to_string()))?;
                Writer::new(out).str(&json);
                Ok(())
            }),
            Op::TierStats => {
                let tier = r.usize("a tier")?;
                s.manager().tier_stats(tier).map(|st| put_stats(out, &st))
            }
            Op::Prometheus => s.manager().prometheus_text().map(|mut text| {
                super::metrics::append(self.shared, &mut text);
                Writer::new(out).str(&text);
            }),
            Op::PeekError => s
                .manager()
                .take_error_if(|m| {
                    Writer::new(out).bool(true).str(m);
                    (false, ())
                })
                .map(|found| {
                    if found.is_none() {
                        Writer::new(out).bool(false);
                    }
                }),
            Op::PopError => {
                let expected = r.str("a message")?;
                s.manager()
                    .take_error_if(|m| (m == expected, m == expected))
                    .map(|taken| {
                        Writer::new(out).bool(taken == Some(true));
                    })
            }
            // Granted by `serve` where it may be; here: not granted (the
            // server's `ring` option off, an observer, a ring already).
            Op::Ring => {
                Writer::new(out).bool(false);
                Ok(())
            }
            Op::Clients => {
                let json = super::metrics::clients_json(self.shared);
                Writer::new(out).str(&json);
                Ok(())
            }
        })
    }
}

/// Writes statistics: count, then each name, kind and value.
pub(super) fn put_stats(out: &mut Vec<u8>, stats: &[Stat]) {
    let mut w = Writer::new(out);
    w.u32(stats.len() as u32);
    for s in stats {
        w.str(&s.name);
        match s.kind {
            StatKind::Counter => w.u8(0),
            StatKind::Gauge => w.u8(1),
            StatKind::HistogramBucket { le } => w.u8(2).f64(le),
            StatKind::HistogramSum => w.u8(3),
            StatKind::HistogramCount => w.u8(4),
        };
        w.f64(s.value);
    }
}

/// Reads what [`put_stats`] wrote.
pub(super) fn get_stats(r: &mut Reader<'_>) -> std::result::Result<Vec<Stat>, Malformed> {
    let n = r.count(13, "a count of statistics")?;
    let mut v = Vec::with_capacity(n);
    for _ in 0..n {
        let name = r.str("a statistic's name")?.to_owned();
        let kind = match r.u8("a statistic's kind")? {
            0 => StatKind::Counter,
            1 => StatKind::Gauge,
            2 => StatKind::HistogramBucket {
                le: r.f64("a bucket's bound")?,
            },
            3 => StatKind::HistogramSum,
            4 => StatKind::HistogramCount,
            _ => return Err(Malformed("a statistic's kind")),
        };
        let value = r.f64("a statistic's value")?;
        v.push(Stat {
            name: name.into(),
            kind,
            value,
        });
    }
    Ok(v)
}
