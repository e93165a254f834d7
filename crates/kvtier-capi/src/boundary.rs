//! The panic boundary, the thread-local last error, and typed handle casts.
//!
//! Every export wraps its body in [`ffi_call!`]: the body returns
//! `Result<(), Failure>`; a failure sets the thread's last error and returns
//! its status; a panic is caught, never unwinds into C, never prints, and
//! returns `KVTIER_STATUS_PANIC` (poisoning the handle that was in use).

use std::cell::{Cell, RefCell};
use std::ffi::{CString, c_char};
use std::ops::{Deref, DerefMut};
use std::sync::Once;
use std::sync::atomic::{AtomicBool, Ordering};

use super::status::{kvtier_status, status_of};
use kvtier_core::error::Error;

/// Why an export failed, before it is turned into a status and a message.
#[derive(Debug)]
pub(crate) enum Failure {
    /// A required pointer argument was NULL; the argument's name.
    Null(&'static str),
    /// The handle panicked in an earlier call.
    Poisoned(&'static str),
    /// A core error.
    Core(Error),
}

impl From<Error> for Failure {
    fn from(e: Error) -> Failure {
        Failure::Core(e)
    }
}

impl Failure {
    fn status(&self) -> kvtier_status {
        match self {
            Failure::Null(_) => kvtier_status::NullArgument,
            Failure::Poisoned(_) => kvtier_status::Poisoned,
            Failure::Core(e) => status_of(e),
        }
    }

    fn message(&self) -> String {
        match self {
            Failure::Null(name) => format!("argument `{name}` is NULL"),
            Failure::Poisoned(name) => format!(
                "this {name} handle is poisoned: an earlier call on it panicked; free it and create a new one"
            ),
            Failure::Core(e) => e.to_string(),
        }
    }
}

thread_local! {
    static LAST_ERROR: RefCell<CString> = RefCell::new(CString::default());
    static IN_BOUNDARY: Cell<u32> = const { Cell::new(0) };
    static PANIC_MESSAGE: RefCell<Option<String>> = const { RefCell::new(None) };
}

/// Records `message` as this thread's last error.
pub(crate) fn set_last_error(message: &str) {
    let c = CString::new(message.replace('\0', "\\0")).unwrap_or_default();
    LAST_ERROR.with(|slot| *slot.borrow_mut() = c);
}

/// Turns a body's result into a status, recording the message of a failure.
pub(crate) fn finish(result: Result<(), Failure>) -> kvtier_status {
    match result {
        Ok(()) => kvtier_status::Ok,
        Err(failure) => {
            set_last_error(&failure.message());
            failure.status()
        }
    }
}

static HOOK: Once = Once::new();

/// Installs, once per process, a panic hook that stays silent for panics
/// raised inside a kvtier call (their text becomes the last error) and on
/// kvtier's own worker threads (named `kvtier-*`; their text goes to the
/// log, and the thread's owner reports the failure), and defers to the
/// previous hook for every other panic in the process.
fn install_quiet_hook() {
    HOOK.call_once(|| {
        let previous = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            let on_worker = std::thread::current()
                .name()
                .is_some_and(|n| n.starts_with("kvtier-"));
            if on_worker && IN_BOUNDARY.with(Cell::get) == 0 {
                let location = info
                    .location()
                    .map(|l| format!(" at {}:{}", l.file(), l.line()))
                    .unwrap_or_default();
                log::error!(target: "kvtier::panic", "worker thread panicked: {}{location}", panic_text(info));
            } else if IN_BOUNDARY.with(Cell::get) > 0 {
                let text = panic_text(info);
                let location = info
                    .location()
                    .map(|l| format!(" at {}:{}", l.file(), l.line()))
                    .unwrap_or_default();
                PANIC_MESSAGE.with(|m| *m.borrow_mut() = Some(format!("{text}{location}")));
            } else {
                previous(info);
            }
        }));
    });
}

fn panic_text(info: &std::panic::PanicHookInfo<'_>) -> String {
    if let Some(s) = info.payload().downcast_ref::<&str>() {
        (*s).to_string()
    } else if let Some(s) = info.payload().downcast_ref::<String>() {
        s.clone()
    } else {
        "unknown panic".to_string()
    }
}

/// Runs `body` inside the panic boundary.  Used through [`ffi_call!`].
#[inline]
pub(crate) fn run<F>(body: F) -> kvtier_status
where
    F: FnOnce() -> Result<(), Failure>,
{
    install_quiet_hook();
    IN_BOUNDARY.with(|d| d.set(d.get() + 1));
    let outcome = std::panic::catch_unwind(std::panic::AssertUnwindSafe(body));
    IN_BOUNDARY.with(|d| d.set(d.get() - 1));
    match outcome {
        Ok(result) => finish(result),
        Err(_) => {
            let text = PANIC_MESSAGE
                .with(|m| m.borrow_mut().take())
                .unwrap_or_else(|| "unknown panic".to_string());
            set_last_error(&format!(
                "internal error (panic) in kvtier: {text}; the handle is poisoned"
            ));
            kvtier_status::Panic
        }
    }
}

/// Wraps an export's body: `ffi_call!({ ...; Ok(()) })`.  The body may use
/// `?` on `Result<_, Error>` and `Result<_, Failure>`.
macro_rules! ffi_call {
    ($body:block) => {
        $crate::boundary::run(move || -> Result<(), $crate::boundary::Failure> { $body })
    };
}
pub(crate) use ffi_call;

/// Returns this thread's last error message: the text describing the most
/// recent call on this thread that returned a status other than
/// `KVTIER_STATUS_OK`, or an empty string if none failed yet.
///
/// The string is owned by kvtier and stays valid until the next kvtier call
/// on the same thread; copy it to keep it.  Never returns NULL.  Each thread
/// has its own message, so this is safe to call from any thread.
#[unsafe(no_mangle)]
pub extern "C" fn kvtier_last_error_message() -> *const c_char {
    LAST_ERROR.with(|slot| slot.borrow().as_ptr())
}

/// A Rust value behind an opaque C handle, with its poison flag.
pub(crate) struct Handle<T> {
    poisoned: AtomicBool,
    value: T,
}

/// Maps an opaque C handle type to the Rust type it stands for.
pub(crate) trait Castable {
    /// The Rust type behind the handle.
    type Rust;
    /// The handle's name in messages ("region", "primary", ...).
    const NAME: &'static str;
}

/// Shared access to a handle's value (from [`enter`]); poisons the handle
/// if a panic unwinds through it.
pub(crate) struct Entered<'a, T> {
    handle: &'a Handle<T>,
}

impl<T> Deref for Entered<'_, T> {
    type Target = T;
    fn deref(&self) -> &T {
        &self.handle.value
    }
}

impl<T> Drop for Entered<'_, T> {
    fn drop(&mut self) {
        if std::thread::panicking() {
            self.handle.poisoned.store(true, Ordering::Relaxed);
        }
    }
}

/// Exclusive access to a handle's value (from [`enter_mut`]); poisons the
/// handle if a panic unwinds through it.
pub(crate) struct EnteredMut<'a, T> {
    handle: &'a mut Handle<T>,
}

impl<T> Deref for EnteredMut<'_, T> {
    type Target = T;
    fn deref(&self) -> &T {
        &self.handle.value
    }
}

impl<T> DerefMut for EnteredMut<'_, T> {
    fn deref_mut(&mut self) -> &mut T {
        &mut self.handle.value
    }
}

impl<T> Drop for EnteredMut<'_, T> {
    fn drop(&mut self) {
        if std::thread::panicking() {
            self.handle.poisoned.store(true, Ordering::Relaxed);
        }
    }
}

/// Moves `value` (or what it converts into) to the heap and returns the
/// opaque handle for it.
pub(crate) fn into_handle<C: Castable>(value: impl Into<C::Rust>) -> *mut C {
    Box::into_raw(Box::new(Handle {
        poisoned: AtomicBool::new(false),
        value: value.into(),
    }))
    .cast::<C>()
}

/// Shared access to the value behind `ptr`, checking NULL and poison.
///
/// # Safety
/// `ptr` must be NULL or a live handle of type `C` made by [`into_handle`].
pub(crate) unsafe fn enter<'a, C: Castable>(
    ptr: *const C,
) -> Result<Entered<'a, C::Rust>, Failure> {
    // SAFETY: the caller passes NULL or a live handle of type `C`.
    let handle = unsafe { ptr.cast::<Handle<C::Rust>>().as_ref() }.ok_or(Failure::Null(C::NAME))?;
    if handle.poisoned.load(Ordering::Relaxed) {
        return Err(Failure::Poisoned(C::NAME));
    }
    Ok(Entered { handle })
}

/// Exclusive access to the value behind `ptr`, checking NULL and poison.
///
/// # Safety
/// `ptr` must be NULL or a live handle of type `C` made by [`into_handle`],
/// not used by any other thread during the call.
pub(crate) unsafe fn enter_mut<'a, C: Castable>(
    ptr: *mut C,
) -> Result<EnteredMut<'a, C::Rust>, Failure> {
    // SAFETY: the caller passes NULL or a live handle of type `C` that no
    // other thread uses during the call.
    let handle = unsafe { ptr.cast::<Handle<C::Rust>>().as_mut() }.ok_or(Failure::Null(C::NAME))?;
    if handle.poisoned.load(Ordering::Relaxed) {
        return Err(Failure::Poisoned(C::NAME));
    }
    Ok(EnteredMut { handle })
}

/// Frees the handle made by [`into_handle`]; NULL is ignored.
///
/// # Safety
/// `ptr` must be NULL or a live handle of type `C`, not used afterwards.
pub(crate) unsafe fn free_handle<C: Castable>(ptr: *mut C) {
    if !ptr.is_null() {
        drop(unsafe { Box::from_raw(ptr.cast::<Handle<C::Rust>>()) });
    }
}

/// Frees the handle made by [`into_handle`] and returns its value, for
/// calls that consume a handle and report on the release.  NULL is
/// `Failure::Null` naming the handle; a poisoned handle is freed (as
/// `_free` would) and is `Failure::Poisoned`.
///
/// # Safety
/// `ptr` must be NULL or a live handle of type `C`, not used afterwards.
pub(crate) unsafe fn take_handle<C: Castable>(ptr: *mut C) -> Result<C::Rust, Failure> {
    if ptr.is_null() {
        return Err(Failure::Null(C::NAME));
    }
    let handle = unsafe { Box::from_raw(ptr.cast::<Handle<C::Rust>>()) };
    if handle.poisoned.load(Ordering::Relaxed) {
        drop(handle);
        return Err(Failure::Poisoned(C::NAME));
    }
    Ok(handle.value)
}

/// Checks an output pointer and returns it as a mutable reference.
///
/// # Safety
/// `ptr` must be NULL or valid for writes of one `T`.
pub(crate) unsafe fn out_ref<'a, T>(ptr: *mut T, name: &'static str) -> Result<&'a mut T, Failure> {
    unsafe { ptr.as_mut() }.ok_or(Failure::Null(name))
}

/// Borrows a C array of `len` items; NULL is allowed only when `len` is 0.
///
/// # Safety
/// `ptr` must be valid for reads of `len` items for the borrow's lifetime.
pub(crate) unsafe fn in_slice<'a, T>(
    ptr: *const T,
    len: usize,
    name: &'static str,
) -> Result<&'a [T], Failure> {
    if len == 0 {
        return Ok(&[]);
    }
    if ptr.is_null() {
        return Err(Failure::Null(name));
    }
    check_extent(ptr as usize, len, std::mem::size_of::<T>(), name)?;
    Ok(unsafe { std::slice::from_raw_parts(ptr, len) })
}

/// Borrows a writable C array of `len` items; NULL is allowed only when `len` is 0.
///
/// # Safety
/// `ptr` must be valid for writes of `len` items for the borrow's lifetime.
pub(crate) unsafe fn out_slice<'a, T>(
    ptr: *mut T,
    len: usize,
    name: &'static str,
) -> Result<&'a mut [T], Failure> {
    if len == 0 {
        return Ok(&mut []);
    }
    if ptr.is_null() {
        return Err(Failure::Null(name));
    }
    check_extent(ptr as usize, len, std::mem::size_of::<T>(), name)?;
    Ok(unsafe { std::slice::from_raw_parts_mut(ptr, len) })
}

/// An error unless `len` items of `size` bytes at address `start` can be
/// real memory: at most `isize::MAX` bytes, ending inside the address
/// space.  A length past that is a caller's mistake (an uninitialized or
/// negative count), reported as an invalid argument instead of being
/// trusted.
pub(crate) fn check_extent(
    start: usize,
    len: usize,
    size: usize,
    name: &str,
) -> Result<(), Failure> {
    let fits = len
        .checked_mul(size)
        .filter(|&bytes| bytes <= isize::MAX as usize)
        .and_then(|bytes| start.checked_add(bytes))
        .is_some();
    if fits {
        return Ok(());
    }
    Err(Failure::Core(Error::InvalidArgument(format!(
        "`{name}` has {len} entries of {size} bytes at {start:#x}: more than the address space holds"
    ))))
}

/// Borrows a NUL-terminated UTF-8 string argument.
///
/// # Safety
/// `ptr` must be NULL or a valid NUL-terminated string for the borrow's lifetime.
pub(crate) unsafe fn in_str<'a>(
    ptr: *const c_char,
    name: &'static str,
) -> Result<&'a str, Failure> {
    if ptr.is_null() {
        return Err(Failure::Null(name));
    }
    let c = unsafe { std::ffi::CStr::from_ptr(ptr) };
    c.to_str().map_err(|_| {
        Failure::Core(Error::InvalidArgument(format!(
            "`{name}` is not valid UTF-8"
        )))
    })
}

/// A string option: NULL is `None`.
///
/// # Safety
/// `p` NULL or NUL-terminated.
pub(crate) unsafe fn opt_str<'a>(
    p: *const c_char,
    what: &'static str,
) -> Result<Option<&'a str>, Failure> {
    if p.is_null() {
        Ok(None)
    } else {
        unsafe { in_str(p, what) }.map(Some)
    }
}

/// Writes `text` and its NUL under the buffer idiom: `*written` is the
/// size needed; `BufferTooSmall` (nothing written to `out`) when it does
/// not fit.
pub(crate) fn write_text(text: &str, out: &mut [u8], written: &mut usize) -> Result<(), Failure> {
    let needed = text.len() + 1;
    *written = needed;
    if out.len() < needed {
        return Err(Error::BufferTooSmall {
            needed,
            given: out.len(),
        }
        .into());
    }
    out[..text.len()].copy_from_slice(text.as_bytes());
    out[text.len()] = 0;
    Ok(())
}
