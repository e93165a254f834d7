//! `kvtier_set_log_callback`: route kvtier's log records to the engine.

use std::ffi::{CString, c_char, c_void};

use super::boundary::{Failure, ffi_call};
use kvtier_core::error::Error;
use kvtier_core::logging::{self, LogSink};

/// Severity of a log record; a callback receives records at its maximum
/// level or more severe.
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum kvtier_log_level {
    /// Nothing is logged.
    Off = 0,
    /// Failures that lose work (a tier failing jobs, a misbehaving tier).
    Error = 1,
    /// Unexpected but handled events (late completions, back-pressure).
    Warn = 2,
    /// Lifecycle events (tiers attached, regions created, recoveries).
    Info = 3,
    /// Details for debugging.
    Debug = 4,
    /// Everything.
    Trace = 5,
}

/// Receives one log record.  `level` is a `kvtier_log_level` value;
/// `target` names the kvtier module that logged and `message` is the text,
/// both NUL-terminated and borrowed for the duration of the call only.
pub type kvtier_log_fn = Option<
    unsafe extern "C" fn(
        user_data: *mut c_void,
        level: i32,
        target: *const c_char,
        message: *const c_char,
    ),
>;

struct UserData(*mut c_void);
// SAFETY: the caller promises (see kvtier_set_log_callback) that the
// callback and its user data may be used from any thread.
unsafe impl Send for UserData {}
unsafe impl Sync for UserData {}

/// Installs `callback` to receive kvtier's log records at `max_level` or
/// more severe, replacing any previous callback; a NULL `callback` (or
/// `max_level` `KVTIER_LOG_LEVEL_OFF`) removes it.  Without a callback
/// kvtier prints nothing.
///
/// `max_level` must be a `kvtier_log_level` value.  `user_data` is passed
/// back to every call; kvtier never frees it; it must stay valid until the
/// callback is replaced or removed.  Strings passed to the callback live
/// for that call only.
///
/// The callback may be called from any thread that does kvtier work
/// (the scheduler thread, tiers' I/O threads), concurrently; it must be
/// thread-safe, must not call kvtier, and must not unwind (C++: noexcept).
/// This setting is process-wide.  Fails with `KVTIER_STATUS_UNSUPPORTED`
/// if the process already has a Rust `log` logger.
///
/// # Safety
/// `callback`, if not NULL, must be a valid function pointer that stays
/// valid, with `user_data`, until it is replaced or removed.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn kvtier_set_log_callback(
    callback: kvtier_log_fn,
    user_data: *mut c_void,
    max_level: i32,
) -> super::kvtier_status {
    ffi_call!({
        let filter = match max_level {
            0 => log::LevelFilter::Off,
            1 => log::LevelFilter::Error,
            2 => log::LevelFilter::Warn,
            3 => log::LevelFilter::Info,
            4 => log::LevelFilter::Debug,
            5 => log::LevelFilter::Trace,
            other => {
                return Err(Failure::Core(Error::InvalidArgument(format!(
                    "max_level {other} is not a kvtier_log_level (0 to 5)"
                ))));
            }
        };
        let sink: Option<LogSink> = match (callback, filter) {
            (None, _) | (_, log::LevelFilter::Off) => None,
            (Some(f), _) => {
                let data = UserData(user_data);
                Some(Box::new(
                    move |level: log::Level, target: &str, message: &str| {
                        let target = CString::new(target.replace('\0', " ")).unwrap_or_default();
                        let message = CString::new(message.replace('\0', " ")).unwrap_or_default();
                        let data = &data;
                        // SAFETY: the caller guaranteed the callback and user data.
                        unsafe { f(data.0, level as i32, target.as_ptr(), message.as_ptr()) };
                    },
                ))
            }
        };
        logging::set_sink(sink, filter)?;
        Ok(())
    })
}
