//! What a round trip to Redis can come back with: a reply, a failure and
//! its cause.  Both the client-library connection (`conn`) and the raw
//! RESP connection (`resp`) produce them, so they live below both.

use ::redis::RedisError;

use crate::stats::family;
use crate::tiers::kit::tier_causes;

tier_causes! {
    /// Why an operation failed, as counted in the tier's stats.
    pub(super) enum Cause: "failures_" => R_FAILURES {
        /// The server refused the connection or could not be reached.
        ServerDown = "server_down", "the server could not be reached";
        /// A connect or command timeout ran out.
        Timeout = "timeout", "a timeout ran out";
        /// The connection broke (reset, closed, half-read reply).
        ConnectionReset = "connection_reset", "the connection broke";
        /// Redis answered OOM (maxmemory reached with a no-eviction policy).
        OutOfMemory = "oom", "the server is out of memory (OOM)";
        /// Redis answered another error.
        ServerError = "server_error", "the server answered an error";
        /// Anything else (protocol errors, client errors).
        Other = "other", "a protocol or client error";
        /// The circuit breaker was open: nothing was sent.
        BreakerOpen = "breaker_open", "the circuit breaker is open";
        /// The job was still queued when the tier drained or shut down.
        Cancelled = "cancelled", "it was cancelled";
    }
}

impl Cause {
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

// The family the causes' counters are exported in (label `cause`).
family! {
    pub(super) R_FAILURES, "kvtier_redis_failures_total", Counter, Tier, "cause",
    "Failed Redis operations, by cause."
}
