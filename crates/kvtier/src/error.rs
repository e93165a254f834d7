//! The one error type of the safe core.
//!
//! Every fallible core operation returns [`Error`]; its message says what was
//! wrong in words an engine developer can act on.  The C boundary maps each
//! variant to a `kvtier_status` in one place (`crates/kvtier-capi/src/status.rs`).

use std::io;

/// What went wrong.  Every variant leaves the object it came from unchanged
/// unless its documentation says otherwise.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// An argument is out of range or inconsistent (sizes, counts, names, options).
    #[error("invalid argument: {0}")]
    InvalidArgument(String),

    /// A key in a batch is empty or longer than 64 bytes.
    #[error("invalid key at position {index}: {reason}")]
    InvalidKey {
        /// Position of the key in its batch.
        index: usize,
        /// Why it was rejected.
        reason: String,
    },

    /// A key is not in the state the operation needs (absent, write pending, not pinned).
    #[error("key at position {index} ({key}): {reason}")]
    KeyState {
        /// Position of the key in its batch.
        index: usize,
        /// The key, as hex.
        key: String,
        /// What state it was in and what was needed.
        reason: String,
    },

    /// An operation named a request it does not take: the text names the
    /// request and says why (never started, finished, or finished and let
    /// go, where the caller knows which).
    #[error("unknown request: {0}")]
    UnknownRequest(String),

    /// A request was started twice.
    #[error("request {0:?} is already active")]
    DuplicateRequest(String),

    /// A tier reported a job id that it was not given, or reported it twice.
    #[error("unknown job {job} reported by tier {tier:?}")]
    UnknownJob {
        /// The job id reported.
        job: u64,
        /// The tier that reported it.
        tier: String,
    },

    /// An operating-system call failed.
    #[error("{context}: {source}")]
    Io {
        /// What was being done, with the path or name involved.
        context: String,
        /// The OS error.
        #[source]
        source: io::Error,
    },

    /// Something named does not exist (a region name, a directory, a tier type).
    #[error("not found: {0}")]
    NotFound(String),

    /// Something named exists already and may not be replaced.
    #[error("already exists: {0}")]
    AlreadyExists(String),

    /// A bounded wait ran out.
    #[error("timed out: {0}")]
    Timeout(String),

    /// Not enough room (file system, memory, capacity).
    #[error("no space: {0}")]
    NoSpace(String),

    /// Another process taking part failed (for example a region's creator).
    #[error("peer failed: {0}")]
    PeerFailed(String),

    /// A secondary tier misbehaved or failed an operation.
    #[error("tier {tier:?}: {message}")]
    Tier {
        /// The tier's name.
        tier: String,
        /// What it did.
        message: String,
    },

    /// A callback called back into the object that called it.
    #[error("re-entrant call: {0}")]
    Reentrant(String),

    /// The object was shut down or released.
    #[error("closed: {0}")]
    Closed(String),

    /// The node server a connected manager talks to is gone (it closed
    /// the connection, died, or did not answer within the call timeout):
    /// this call and every later one on the connection fail so; connect
    /// again.  Whether the call reached the server is unknown.
    #[error("disconnected: {0}")]
    Disconnected(String),

    /// The operation is not supported here (kernel, file system, build).
    #[error("unsupported: {0}")]
    Unsupported(String),

    /// Memory sized by the caller (a capacity, a batch of keys) could not
    /// be allocated.  Nothing changed; a smaller size may succeed.
    #[error("out of memory: {0}")]
    OutOfMemory(String),

    /// A store completion named keys it did not act on (keys another
    /// request or a promotion is writing, ready keys, absent keys; every
    /// key named when its request had no store in flight).  Unlike every other variant this
    /// one does not mean "nothing changed": the call did all it validly
    /// could (the request's own write-pending keys named were completed),
    /// and `report` says what happened to the keys named.
    #[error("keys ignored: {message}")]
    KeysIgnored {
        /// What the completion did with each key named.
        report: crate::store_report::CompleteStoreReport,
        /// Which keys were left alone, and why.
        message: String,
    },

    /// A caller-provided output buffer is too small; `needed` is the size that fits.
    #[error("buffer too small: {needed} needed, {given} given")]
    BufferTooSmall {
        /// Size that would have been enough.
        needed: usize,
        /// Size the caller gave.
        given: usize,
    },
}

impl Error {
    /// An [`Error::Io`] from the last OS error, with `context`.
    pub fn last_os(context: impl Into<String>) -> Error {
        Error::Io {
            context: context.into(),
            source: io::Error::last_os_error(),
        }
    }

    /// The same error with `what` in front of its message (`what: ...`),
    /// so a caller can say which part failed without changing the kind of
    /// failure (and so its status).  Errors that carry a name or a number
    /// rather than a message (an unknown request or job, a buffer size)
    /// come back as they were.
    pub fn within(self, what: &str) -> Error {
        let prefixed = |m: String| format!("{what}: {m}");
        match self {
            Error::InvalidArgument(m) => Error::InvalidArgument(prefixed(m)),
            Error::InvalidKey { index, reason } => Error::InvalidKey {
                index,
                reason: prefixed(reason),
            },
            Error::KeyState { index, key, reason } => Error::KeyState {
                index,
                key,
                reason: prefixed(reason),
            },
            Error::Io { context, source } => Error::Io {
                context: prefixed(context),
                source,
            },
            Error::NotFound(m) => Error::NotFound(prefixed(m)),
            Error::AlreadyExists(m) => Error::AlreadyExists(prefixed(m)),
            Error::Timeout(m) => Error::Timeout(prefixed(m)),
            Error::NoSpace(m) => Error::NoSpace(prefixed(m)),
            Error::PeerFailed(m) => Error::PeerFailed(prefixed(m)),
            Error::Tier { tier, message } => Error::Tier {
                tier,
                message: prefixed(message),
            },
            Error::Reentrant(m) => Error::Reentrant(prefixed(m)),
            Error::Closed(m) => Error::Closed(prefixed(m)),
            Error::Unsupported(m) => Error::Unsupported(prefixed(m)),
            Error::OutOfMemory(m) => Error::OutOfMemory(prefixed(m)),
            Error::Disconnected(m) => Error::Disconnected(prefixed(m)),
            Error::KeysIgnored { report, message } => Error::KeysIgnored {
                report,
                message: prefixed(message),
            },
            e @ (Error::UnknownRequest(_)
            | Error::DuplicateRequest(_)
            | Error::UnknownJob { .. }
            | Error::BufferTooSmall { .. }) => e,
        }
    }

    /// An [`Error::Io`] from `source`, with `context`.
    pub fn io(context: impl Into<String>, source: io::Error) -> Error {
        Error::Io {
            context: context.into(),
            source,
        }
    }
}

/// Result with the core [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;

#[cfg(test)]
mod tests {
    use super::*;

    fn every_kind() -> Vec<Error> {
        let m = || "m".to_string();
        vec![
            Error::InvalidArgument(m()),
            Error::InvalidKey {
                index: 1,
                reason: m(),
            },
            Error::KeyState {
                index: 2,
                key: "6b".into(),
                reason: m(),
            },
            Error::UnknownRequest("r".into()),
            Error::DuplicateRequest("r".into()),
            Error::UnknownJob {
                job: 3,
                tier: "t".into(),
            },
            Error::io("m", io::Error::from_raw_os_error(libc::ENOSPC)),
            Error::NotFound(m()),
            Error::AlreadyExists(m()),
            Error::Timeout(m()),
            Error::NoSpace(m()),
            Error::PeerFailed(m()),
            Error::Tier {
                tier: "t".into(),
                message: m(),
            },
            Error::Reentrant(m()),
            Error::Closed(m()),
            Error::Unsupported(m()),
            Error::OutOfMemory(m()),
            Error::KeysIgnored {
                report: Default::default(),
                message: m(),
            },
            Error::BufferTooSmall {
                needed: 2,
                given: 1,
            },
        ]
    }

    #[test]
    fn within_keeps_the_kind_and_names_the_part_in_every_message() {
        for e in every_kind() {
            let before = e.to_string();
            let kind = std::mem::discriminant(&e);
            let carries_a_message = !matches!(
                e,
                Error::UnknownRequest(_)
                    | Error::DuplicateRequest(_)
                    | Error::UnknownJob { .. }
                    | Error::BufferTooSmall { .. }
            );
            let e = e.within("tiers[2]");
            assert_eq!(std::mem::discriminant(&e), kind, "{e}");
            if carries_a_message {
                assert!(e.to_string().contains("tiers[2]: m"), "{e}");
            } else {
                assert_eq!(e.to_string(), before);
            }
        }
    }
}
