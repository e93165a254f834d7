//! The library's version, for C callers to compare with the header's macros.

use std::ffi::c_char;

/// NUL-terminated version of the crate, as `c"MAJOR.MINOR.PATCH"`.
const VERSION: &std::ffi::CStr = match std::ffi::CStr::from_bytes_with_nul(
    concat!(env!("CARGO_PKG_VERSION"), "\0").as_bytes(),
) {
    Ok(v) => v,
    Err(_) => c"0.0.0",
};

/// Returns the version of the loaded library as a static string
/// `"MAJOR.MINOR.PATCH"`.  Compare it with `KVTIER_VERSION_MAJOR`,
/// `KVTIER_VERSION_MINOR` and `KVTIER_VERSION_PATCH` from the header to
/// detect a header/library mismatch (before 1.0 the minor version must
/// match too).
///
/// The string is static: never free it.  Safe to call from any thread.
#[unsafe(no_mangle)]
pub extern "C" fn kvtier_version() -> *const c_char {
    VERSION.as_ptr()
}
