//! The messages between `kvtierd` and a connected manager (documented for
//! readers of the wire in `docs/server.md`).
//!
//! A frame is a 32-bit little-endian body length, then the body.  A call's
//! body starts with its [`Op`], an answer's with 0 (the call succeeded;
//! its results follow) or 1 (an [`Error`] follows, encoded by
//! [`put_error`] so the client rebuilds the same variant, and the C API
//! answers the same status as a local manager).  The first frame of a
//! connection is [`Op::Hello`]: [`MAGIC`] and [`VERSION`], which stay
//! where they are in every version, so a client or server of another
//! version is refused with a message saying which.

use std::io;

use super::wire::{Malformed, Reader, Writer};
use crate::Error;
use crate::primary::CompleteStoreReport;
use crate::request::{Locality, Medium, RequestState, TierFilter, TierMatcher};
use crate::tiering::{LookupAnswer, LookupResult, MissReason, OffloadPolicy, RequestParams};

/// The first bytes of every connection's first frame.
pub const MAGIC: [u8; 8] = *b"kvtierd\0";
/// The protocol version this build speaks; a peer of another is refused.
pub const VERSION: u32 = 1;
/// The largest frame body either side accepts (64 MiB: about a million
/// 64-byte keys); a longer announced length closes the connection.
pub const MAX_FRAME: usize = 64 << 20;
/// An answer's first byte when the call succeeded.
pub const ANSWER_OK: u8 = 0;
/// An answer's first byte when the call failed (an error follows).
pub const ANSWER_ERROR: u8 = 1;

/// What a frame asks for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
pub enum Op {
    /// The handshake: magic, version, layout, fingerprint, role, name.
    Hello = 1,
    /// `request_begin(name, params)` → id, policy.
    RequestBegin = 2,
    /// `lookup_prefix(id, keys)` → answer.
    LookupPrefix = 3,
    /// `lookup_per_key(id, keys)` → answer.
    LookupPerKey = 4,
    /// `prepare_load(id, keys)` → slots.
    PrepareLoad = 5,
    /// `set_positions(id, keys, positions)`.
    SetPositions = 6,
    /// `touch(id, keys)`.
    Touch = 7,
    /// `complete_load(id, keys)`.
    CompleteLoad = 8,
    /// `prepare_store(id, keys)` → outcome, keys to store, slots, evicted.
    PrepareStore = 9,
    /// `complete_store(id, keys, success)` → report.
    CompleteStore = 10,
    /// `request_finished(id)`.
    RequestFinished = 11,
    /// `request_state(id)` → state.
    RequestState = 12,
    /// `schedule_end()`.
    ScheduleEnd = 13,
    /// `has_pending_work()` → bool.
    HasPendingWork = 14,
    /// The manager's statistics → JSON.
    ManagerStats = 15,
    /// `tier_stats(tier)` → statistics.
    TierStats = 16,
    /// The Prometheus text of the server (every client's view).
    Prometheus = 17,
    /// The oldest message of the error log → optional string.
    PeekError = 18,
    /// Removes the oldest message of the error log if it is the one given.
    PopError = 19,
    /// The server's clients, their requests and pins → JSON (observers).
    Clients = 20,
    /// Asks to carry the following frames in shared memory → bool granted;
    /// when granted, the ring's memory file comes with the answer
    /// (`SCM_RIGHTS`; see [`ring`](super::ring)).
    Ring = 21,
}

impl Op {
    /// The op of code `b`, if any.
    pub fn from_u8(b: u8) -> Option<Op> {
        use Op::*;
        const ALL: [Op; 21] = [
            Hello,
            RequestBegin,
            LookupPrefix,
            LookupPerKey,
            PrepareLoad,
            SetPositions,
            Touch,
            CompleteLoad,
            PrepareStore,
            CompleteStore,
            RequestFinished,
            RequestState,
            ScheduleEnd,
            HasPendingWork,
            ManagerStats,
            TierStats,
            Prometheus,
            PeekError,
            PopError,
            Clients,
            Ring,
        ];
        ALL.into_iter().find(|op| *op as u8 == b)
    }
}

/// Who a connection is: an engine (makes requests) or an observer (reads
/// statistics and the client list, and holds nothing).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Role {
    /// An engine: a connected manager.
    Engine,
    /// A tool reading the server (`kvtier-inspect server`).
    Observer,
}

/// The handshake a client sends.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Hello {
    /// The protocol version the client speaks.
    pub version: u32,
    /// Bytes per block the engine means (0: whatever the server has).
    pub block_bytes: u64,
    /// Slot stride the engine means (0: whatever the server has).
    pub slot_stride: u64,
    /// The engine's model/layout fingerprint; must equal the server's.
    pub fingerprint: String,
    /// Engine or observer.
    pub role: Role,
    /// A label for logs and the client list.
    pub name: String,
}

impl Hello {
    /// Writes the frame body of `Op::Hello`.
    pub fn put(&self, w: &mut Writer<'_>) {
        w.u8(Op::Hello as u8);
        for b in MAGIC {
            w.u8(b);
        }
        w.u32(self.version)
            .u64(self.block_bytes)
            .u64(self.slot_stride)
            .str(&self.fingerprint)
            .u8(match self.role {
                Role::Engine => 0,
                Role::Observer => 1,
            })
            .str(&self.name);
    }

    /// Reads a `Hello` body (after its op byte).  The magic and version
    /// come first: a peer of another version gets `Ok(Err(version))`
    /// before the rest is read.
    pub fn get(r: &mut Reader<'_>) -> Result<Result<Hello, u32>, Malformed> {
        for b in MAGIC {
            if r.u8("the magic")? != b {
                return Err(Malformed("the magic: not a kvtier client"));
            }
        }
        let version = r.u32("the version")?;
        if version != VERSION {
            return Ok(Err(version));
        }
        let hello = Hello {
            version,
            block_bytes: r.u64("block bytes")?,
            slot_stride: r.u64("slot stride")?,
            fingerprint: r.str("fingerprint")?.to_owned(),
            role: match r.u8("role")? {
                0 => Role::Engine,
                1 => Role::Observer,
                _ => return Err(Malformed("role")),
            },
            name: r.str("name")?.to_owned(),
        };
        r.finish()?;
        Ok(Ok(hello))
    }
}

/// Writes a request's parameters (the tier parameters and filter; the
/// `user_data` pointer stays in the caller's process).
pub fn put_params(w: &mut Writer<'_>, p: &RequestParams) {
    w.u32(p.params.len() as u32);
    for (k, v) in &p.params {
        w.str(k).str(v);
    }
    match &p.filter {
        TierFilter::All => {
            w.u8(0);
        }
        TierFilter::Only(ms) => {
            w.u8(1).u32(ms.len() as u32);
            for m in ms {
                w.u8(match m.medium {
                    None => 0,
                    Some(Medium::Cpu) => 1,
                    Some(Medium::Storage) => 2,
                });
                w.u8(match m.locality {
                    None => 0,
                    Some(Locality::Local) => 1,
                    Some(Locality::Remote) => 2,
                });
            }
        }
    }
}

/// Reads what [`put_params`] wrote.
pub fn get_params(r: &mut Reader<'_>) -> Result<RequestParams, Malformed> {
    let n = r.count(8, "the parameters' count")?;
    let mut params = Vec::with_capacity(n);
    for _ in 0..n {
        let k = r.str("a parameter's name")?.to_owned();
        let v = r.str("a parameter's value")?.to_owned();
        params.push((k, v));
    }
    let filter = match r.u8("the filter")? {
        0 => TierFilter::All,
        1 => {
            let n = r.count(2, "the filter's count")?;
            let mut ms = Vec::with_capacity(n);
            for _ in 0..n {
                let medium = match r.u8("a medium")? {
                    0 => None,
                    1 => Some(Medium::Cpu),
                    2 => Some(Medium::Storage),
                    _ => return Err(Malformed("a medium")),
                };
                let locality = match r.u8("a locality")? {
                    0 => None,
                    1 => Some(Locality::Local),
                    2 => Some(Locality::Remote),
                    _ => return Err(Malformed("a locality")),
                };
                ms.push(TierMatcher { medium, locality });
            }
            TierFilter::Only(ms)
        }
        _ => return Err(Malformed("the filter")),
    };
    Ok(RequestParams {
        params,
        user_data: 0,
        filter,
    })
}

/// Writes an offload policy.
pub fn put_policy(w: &mut Writer<'_>, p: OffloadPolicy) {
    w.u8(match p {
        OffloadPolicy::BlockLevel => 0,
        OffloadPolicy::RequestLevel => 1,
    });
}

/// Reads an offload policy.
pub fn get_policy(r: &mut Reader<'_>) -> Result<OffloadPolicy, Malformed> {
    match r.u8("a policy")? {
        0 => Ok(OffloadPolicy::BlockLevel),
        1 => Ok(OffloadPolicy::RequestLevel),
        _ => Err(Malformed("a policy")),
    }
}

/// Writes a lookup's answer.
pub fn put_answer(w: &mut Writer<'_>, a: &LookupAnswer) {
    w.u64(a.hits as u64)
        .u64(a.pending as u64)
        .u64(a.end as u64)
        .u8(match a.stop {
            LookupResult::Miss => 0,
            LookupResult::Hit => 1,
            LookupResult::HitPending => 2,
            LookupResult::Retry => 3,
        })
        .u8(match a.reason {
            None => 0,
            Some(MissReason::Absent) => 1,
            Some(MissReason::NoRoom) => 2,
            Some(MissReason::TimedOut) => 3,
        });
}

/// Reads a lookup's answer.
pub fn get_answer(r: &mut Reader<'_>) -> Result<LookupAnswer, Malformed> {
    Ok(LookupAnswer {
        hits: r.usize("hits")?,
        pending: r.usize("pending")?,
        end: r.usize("end")?,
        stop: match r.u8("the stop")? {
            0 => LookupResult::Miss,
            1 => LookupResult::Hit,
            2 => LookupResult::HitPending,
            3 => LookupResult::Retry,
            _ => return Err(Malformed("the stop")),
        },
        reason: match r.u8("the reason")? {
            0 => None,
            1 => Some(MissReason::Absent),
            2 => Some(MissReason::NoRoom),
            3 => Some(MissReason::TimedOut),
            _ => return Err(Malformed("the reason")),
        },
    })
}

/// Writes a store completion's report.
pub fn put_report(w: &mut Writer<'_>, c: &CompleteStoreReport) {
    w.u64(c.ready as u64)
        .u64(c.dropped as u64)
        .u64(c.ignored as u64)
        .u64(c.foreign as u64)
        .u64(c.already_ready as u64);
}

/// Reads a store completion's report.
pub fn get_report(r: &mut Reader<'_>) -> Result<CompleteStoreReport, Malformed> {
    Ok(CompleteStoreReport {
        ready: r.usize("ready")?,
        dropped: r.usize("dropped")?,
        ignored: r.usize("ignored")?,
        foreign: r.usize("foreign")?,
        already_ready: r.usize("already ready")?,
    })
}

/// Writes a request's state.
pub fn put_state(w: &mut Writer<'_>, s: RequestState) {
    w.u8(match s {
        RequestState::NeverIssued => 0,
        RequestState::Active => 1,
        RequestState::Finishing => 2,
        RequestState::LoadsPinned => 3,
        RequestState::Gone => 4,
    });
}

/// Reads a request's state.
pub fn get_state(r: &mut Reader<'_>) -> Result<RequestState, Malformed> {
    Ok(match r.u8("a request state")? {
        0 => RequestState::NeverIssued,
        1 => RequestState::Active,
        2 => RequestState::Finishing,
        3 => RequestState::LoadsPinned,
        4 => RequestState::Gone,
        _ => return Err(Malformed("a request state")),
    })
}

/// Writes `e` so that [`get_error`] rebuilds the same variant with the
/// same fields (an I/O error keeps its OS error number).
pub fn put_error(w: &mut Writer<'_>, e: &Error) {
    match e {
        Error::InvalidArgument(m) => w.u8(1).str(m),
        Error::InvalidKey { index, reason } => w.u8(2).u64(*index as u64).str(reason),
        Error::KeyState { index, key, reason } => w.u8(3).u64(*index as u64).str(key).str(reason),
        Error::UnknownRequest(m) => w.u8(4).str(m),
        Error::DuplicateRequest(m) => w.u8(5).str(m),
        Error::UnknownJob { job, tier } => w.u8(6).u64(*job).str(tier),
        Error::Io { context, source } => w
            .u8(7)
            .str(context)
            .i32(source.raw_os_error().unwrap_or(0))
            .str(&source.to_string()),
        Error::NotFound(m) => w.u8(8).str(m),
        Error::AlreadyExists(m) => w.u8(9).str(m),
        Error::Timeout(m) => w.u8(10).str(m),
        Error::NoSpace(m) => w.u8(11).str(m),
        Error::PeerFailed(m) => w.u8(12).str(m),
        Error::Tier { tier, message } => w.u8(13).str(tier).str(message),
        Error::Reentrant(m) => w.u8(14).str(m),
        Error::Closed(m) => w.u8(15).str(m),
        Error::Unsupported(m) => w.u8(16).str(m),
        Error::OutOfMemory(m) => w.u8(17).str(m),
        Error::KeysIgnored { report, message } => {
            w.u8(18);
            put_report(w, report);
            w.str(message)
        }
        Error::BufferTooSmall { needed, given } => w.u8(19).u64(*needed as u64).u64(*given as u64),
        Error::Disconnected(m) => w.u8(20).str(m),
    };
}

/// Reads what [`put_error`] wrote.
pub fn get_error(r: &mut Reader<'_>) -> Result<Error, Malformed> {
    let s = |r: &mut Reader<'_>| r.str("an error's text").map(str::to_owned);
    Ok(match r.u8("an error's kind")? {
        1 => Error::InvalidArgument(s(r)?),
        2 => Error::InvalidKey {
            index: r.usize("a position")?,
            reason: s(r)?,
        },
        3 => Error::KeyState {
            index: r.usize("a position")?,
            key: s(r)?,
            reason: s(r)?,
        },
        4 => Error::UnknownRequest(s(r)?),
        5 => Error::DuplicateRequest(s(r)?),
        6 => Error::UnknownJob {
            job: r.u64("a job")?,
            tier: s(r)?,
        },
        7 => {
            let context = s(r)?;
            let errno = r.i32("an OS error")?;
            let text = s(r)?;
            let source = if errno != 0 {
                io::Error::from_raw_os_error(errno)
            } else {
                io::Error::other(text)
            };
            Error::Io { context, source }
        }
        8 => Error::NotFound(s(r)?),
        9 => Error::AlreadyExists(s(r)?),
        10 => Error::Timeout(s(r)?),
        11 => Error::NoSpace(s(r)?),
        12 => Error::PeerFailed(s(r)?),
        13 => Error::Tier {
            tier: s(r)?,
            message: s(r)?,
        },
        14 => Error::Reentrant(s(r)?),
        15 => Error::Closed(s(r)?),
        16 => Error::Unsupported(s(r)?),
        17 => Error::OutOfMemory(s(r)?),
        18 => Error::KeysIgnored {
            report: get_report(r)?,
            message: s(r)?,
        },
        19 => Error::BufferTooSmall {
            needed: r.usize("needed")?,
            given: r.usize("given")?,
        },
        20 => Error::Disconnected(s(r)?),
        _ => return Err(Malformed("an error's kind")),
    })
}

#[cfg(test)]
mod tests;
