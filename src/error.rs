//! The one error type of the safe core.
//!
//! Every fallible core operation returns [`Error`]; its message says what was
//! wrong in words an engine developer can act on.  The C boundary maps each
//! variant to a `kvtier_status` in one place (`src/ffi/status.rs`).

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

    /// An operation named a request that was never started or is already finalized.
    #[error("unknown request {0:?}: never started, or already finished")]
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

    /// The operation is not supported here (kernel, file system, build).
    #[error("unsupported: {0}")]
    Unsupported(String),

    /// Memory sized by the caller (a capacity, a batch of keys) could not
    /// be allocated.  Nothing changed; a smaller size may succeed.
    #[error("out of memory: {0}")]
    OutOfMemory(String),

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
