//! What a round trip to Redis can come back with: a reply, a failure and
//! its cause.  Both the client-library connection (`conn`) and the raw
//! RESP connection (`resp`) produce them, so they live below both.

use ::redis::RedisError;

use crate::tiers::kit::TierCause;

/// Why an operation failed, as counted in the tier's stats.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Cause {
    /// The server refused the connection or could not be reached.
    ServerDown,
    /// A connect or command timeout ran out.
    Timeout,
    /// The connection broke (reset, closed, half-read reply).
    ConnectionReset,
    /// Redis answered OOM (maxmemory reached with a no-eviction policy).
    OutOfMemory,
    /// Redis answered another error.
    ServerError,
    /// Anything else (protocol errors, client errors).
    Other,
    /// The circuit breaker was open: nothing was sent.
    BreakerOpen,
    /// The job was still queued when the tier drained or shut down.
    Cancelled,
}

impl Cause {
    /// Every cause, in stats order.
    pub(crate) const ALL: [Cause; 8] = [
        Cause::ServerDown,
        Cause::Timeout,
        Cause::ConnectionReset,
        Cause::OutOfMemory,
        Cause::ServerError,
        Cause::Other,
        Cause::BreakerOpen,
        Cause::Cancelled,
    ];

    /// Index into per-cause counters.
    pub(super) fn index(self) -> usize {
        self as usize
    }

    /// Whether the failure says something about the server's health (and
    /// so counts towards opening the circuit breaker).
    pub(super) fn counts_for_breaker(self) -> bool {
        !matches!(self, Cause::BreakerOpen | Cause::Cancelled)
    }

    /// Classifies a client error.
    pub(super) fn of(err: &RedisError) -> Cause {
        if err.is_timeout() {
            Cause::Timeout
        } else if err.is_connection_refusal() {
            Cause::ServerDown
        } else if err.is_connection_dropped() || err.is_io_error() {
            Cause::ConnectionReset
        } else if err.code() == Some("OOM") {
            Cause::OutOfMemory
        } else if err.code().is_some() {
            Cause::ServerError
        } else {
            Cause::Other
        }
    }

    /// Whether the connection should be dropped and made again after `err`.
    pub(super) fn breaks_connection(err: &RedisError) -> bool {
        err.is_timeout()
            || err.is_connection_refusal()
            || err.is_connection_dropped()
            || err.is_io_error()
            || err.code().is_none()
    }
}

impl TierCause for Cause {
    const ALL: &'static [Cause] = &Cause::ALL;

    fn index(self) -> usize {
        Cause::index(self)
    }

    fn stat_name(self) -> &'static str {
        Cause::stat_name(self)
    }

    fn describe(self) -> &'static str {
        match self {
            Cause::ServerDown => "the server could not be reached",
            Cause::Timeout => "a timeout ran out",
            Cause::ConnectionReset => "the connection broke",
            Cause::OutOfMemory => "the server is out of memory (OOM)",
            Cause::ServerError => "the server answered an error",
            Cause::Other => "a protocol or client error",
            Cause::BreakerOpen => "the circuit breaker is open",
            Cause::Cancelled => "it was cancelled",
        }
    }
}

/// One reply, borrowed from the connection's buffer.
#[derive(Debug)]
pub(super) enum Reply<'a> {
    /// Nil (an absent key).
    Nil,
    /// A status reply (`OK`).
    Ok,
    /// An integer.
    Int(i64),
    /// A bulk string.
    Bulk(&'a [u8]),
    /// An error reply, classified.
    Error(Cause),
}

/// A round trip that failed as a whole.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct Failure {
    /// Why.
    pub cause: Cause,
    /// Whether the connection must be dropped and made again.
    pub drop_conn: bool,
}

impl Failure {
    /// The failure of a client error.
    pub(crate) fn of(err: &RedisError) -> Failure {
        Failure {
            cause: Cause::of(err),
            drop_conn: Cause::breaks_connection(err),
        }
    }
}
