//! `kvtier_status`, `kvtier_status_str`, and the one mapping from core
//! errors to statuses.

use std::ffi::c_char;

use kvtier_core::error::Error;

/// Result of every fallible kvtier call.  `KVTIER_STATUS_OK` is 0; values are
/// explicit and never reused.  On any other value,
/// `kvtier_last_error_message()` describes what went wrong.
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum kvtier_status {
    /// Success.
    Ok = 0,
    /// A required pointer argument was NULL.
    NullArgument = 1,
    /// An argument is out of range or inconsistent.
    InvalidArgument = 2,
    /// A key is empty or longer than 64 bytes.
    InvalidKey = 3,
    /// A key is not in the state the call needs (absent, write pending, not pinned).
    KeyState = 4,
    /// The request was never started or is already finished.
    UnknownRequest = 5,
    /// The request was started twice.
    DuplicateRequest = 6,
    /// A tier reported a job id it was not given, or reported it twice.
    UnknownJob = 7,
    /// An operating-system call failed.
    Io = 8,
    /// Something named does not exist.
    NotFound = 9,
    /// Something named exists already.
    AlreadyExists = 10,
    /// A bounded wait ran out.
    Timeout = 11,
    /// Not enough room.
    NoSpace = 12,
    /// Another process taking part failed.
    PeerFailed = 13,
    /// A secondary tier failed or misbehaved.
    Tier = 14,
    /// A callback called back into the handle that called it.
    Reentrant = 15,
    /// The handle was shut down.
    Closed = 16,
    /// Not supported on this system or build.
    Unsupported = 17,
    /// An output buffer is too small; the call reports the size needed.
    BufferTooSmall = 18,
    /// An earlier call on this handle panicked; only `_free` works now.
    Poisoned = 19,
    /// A bug inside kvtier was caught at the boundary; the handle is poisoned.
    Panic = 20,
    /// Memory the call needed (sized by its arguments: a capacity, a key
    /// count) could not be allocated; nothing changed and the handle stays
    /// usable.
    OutOfMemory = 21,
    /// A store completion named keys it did not act on (another request's
    /// or a promotion's, ready, or absent keys; every key named when its
    /// request had no store in flight): the call completed the request's
    /// own write-pending keys it named, and wrote what happened to every
    /// key to its `result_out`.  Not a failure of the call, a mistake of the caller's
    /// (or a completion that arrived after a reset) made visible.
    KeysIgnored = 22,
    /// The node server of a manager made by `kvtier_manager_connect` is
    /// gone (closed the connection, died, or did not answer within the
    /// call timeout); every later call on the handle answers this too.
    /// Free the handle and connect again.  Since 0.3.
    Disconnected = 23,
}

impl kvtier_status {
    /// The static, NUL-terminated name of the status.
    pub(crate) fn as_cstr(self) -> &'static std::ffi::CStr {
        match self {
            kvtier_status::Ok => c"KVTIER_STATUS_OK",
            kvtier_status::NullArgument => c"KVTIER_STATUS_NULL_ARGUMENT",
            kvtier_status::InvalidArgument => c"KVTIER_STATUS_INVALID_ARGUMENT",
            kvtier_status::InvalidKey => c"KVTIER_STATUS_INVALID_KEY",
            kvtier_status::KeyState => c"KVTIER_STATUS_KEY_STATE",
            kvtier_status::UnknownRequest => c"KVTIER_STATUS_UNKNOWN_REQUEST",
            kvtier_status::DuplicateRequest => c"KVTIER_STATUS_DUPLICATE_REQUEST",
            kvtier_status::UnknownJob => c"KVTIER_STATUS_UNKNOWN_JOB",
            kvtier_status::Io => c"KVTIER_STATUS_IO",
            kvtier_status::NotFound => c"KVTIER_STATUS_NOT_FOUND",
            kvtier_status::AlreadyExists => c"KVTIER_STATUS_ALREADY_EXISTS",
            kvtier_status::Timeout => c"KVTIER_STATUS_TIMEOUT",
            kvtier_status::NoSpace => c"KVTIER_STATUS_NO_SPACE",
            kvtier_status::PeerFailed => c"KVTIER_STATUS_PEER_FAILED",
            kvtier_status::Tier => c"KVTIER_STATUS_TIER",
            kvtier_status::Reentrant => c"KVTIER_STATUS_REENTRANT",
            kvtier_status::Closed => c"KVTIER_STATUS_CLOSED",
            kvtier_status::Unsupported => c"KVTIER_STATUS_UNSUPPORTED",
            kvtier_status::BufferTooSmall => c"KVTIER_STATUS_BUFFER_TOO_SMALL",
            kvtier_status::Poisoned => c"KVTIER_STATUS_POISONED",
            kvtier_status::Panic => c"KVTIER_STATUS_PANIC",
            kvtier_status::OutOfMemory => c"KVTIER_STATUS_OUT_OF_MEMORY",
            kvtier_status::KeysIgnored => c"KVTIER_STATUS_KEYS_IGNORED",
            kvtier_status::Disconnected => c"KVTIER_STATUS_DISCONNECTED",
        }
    }

    /// Converts a status returned by a C callback, totally: values that are
    /// not a known status are `None` (the caller treats them as a tier error).
    pub(crate) fn from_i32(value: i32) -> Option<kvtier_status> {
        use kvtier_status::*;
        const ALL: [kvtier_status; 24] = [
            Ok,
            NullArgument,
            InvalidArgument,
            InvalidKey,
            KeyState,
            UnknownRequest,
            DuplicateRequest,
            UnknownJob,
            Io,
            NotFound,
            AlreadyExists,
            Timeout,
            NoSpace,
            PeerFailed,
            Tier,
            Reentrant,
            Closed,
            Unsupported,
            BufferTooSmall,
            Poisoned,
            Panic,
            OutOfMemory,
            KeysIgnored,
            Disconnected,
        ];
        ALL.into_iter().find(|s| *s as i32 == value)
    }
}

/// The status each core error maps to: the one place where this is decided.
pub(crate) fn status_of(error: &Error) -> kvtier_status {
    match error {
        Error::InvalidArgument(_) => kvtier_status::InvalidArgument,
        Error::InvalidKey { .. } => kvtier_status::InvalidKey,
        Error::KeyState { .. } => kvtier_status::KeyState,
        Error::UnknownRequest(_) => kvtier_status::UnknownRequest,
        Error::DuplicateRequest(_) => kvtier_status::DuplicateRequest,
        Error::UnknownJob { .. } => kvtier_status::UnknownJob,
        Error::Io { .. } => kvtier_status::Io,
        Error::NotFound(_) => kvtier_status::NotFound,
        Error::AlreadyExists(_) => kvtier_status::AlreadyExists,
        Error::Timeout(_) => kvtier_status::Timeout,
        Error::NoSpace(_) => kvtier_status::NoSpace,
        Error::PeerFailed(_) => kvtier_status::PeerFailed,
        Error::Tier { .. } => kvtier_status::Tier,
        Error::Reentrant(_) => kvtier_status::Reentrant,
        Error::Closed(_) => kvtier_status::Closed,
        Error::Unsupported(_) => kvtier_status::Unsupported,
        Error::BufferTooSmall { .. } => kvtier_status::BufferTooSmall,
        Error::OutOfMemory(_) => kvtier_status::OutOfMemory,
        Error::KeysIgnored { .. } => kvtier_status::KeysIgnored,
        Error::Disconnected(_) => kvtier_status::Disconnected,
    }
}

/// Returns the name of `status` as a static NUL-terminated string, for
/// example `"KVTIER_STATUS_INVALID_KEY"`.
///
/// `status` may be any integer: values that are not a known status give
/// `"KVTIER_STATUS_UNKNOWN"`.  The string is static: never free it.  Safe to
/// call from any thread at any time.
#[unsafe(no_mangle)]
pub extern "C" fn kvtier_status_str(status: i32) -> *const c_char {
    match kvtier_status::from_i32(status) {
        Some(s) => s.as_cstr().as_ptr(),
        None => c"KVTIER_STATUS_UNKNOWN".as_ptr(),
    }
}
