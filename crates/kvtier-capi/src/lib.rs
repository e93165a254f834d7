//! The C API of kvtier: every `extern "C"` item of the library lives in
//! this crate, which builds `libkvtier.so` and `libkvtier.a`; the header
//! `include/kvtier.h` is generated from it (`make header`).  The safe core
//! is the `kvtier` crate, here `kvtier_core`.
//!
//! Each file converts and checks arguments, then calls the safe core; no
//! behaviour is decided here.  Conventions: every
//! fallible export returns `kvtier_status`, runs inside the panic boundary,
//! NULL-checks every pointer, and documents ownership and thread safety.
//!
//! # Safety contract of the boundary
//!
//! Every `unsafe` block in this module relies on what the calling C code
//! promises in the export's `# Safety` section: pointers are NULL or valid
//! for the stated reads and writes and lengths, strings are NUL-terminated,
//! handles are live and of the named kind, and a handle the header takes
//! non-const is not used by another thread during the call.  Blocks that
//! rely on nothing more carry no comment of their own; a block that relies
//! on more (an invariant of its own, a lifetime beyond the call) says so in
//! a `// SAFETY:` comment.

#![warn(missing_docs)]
#![allow(clippy::undocumented_unsafe_blocks)]
// C names: `kvtier_manager`, `kvtier_status`, ... are the header's types.
#![allow(non_camel_case_types)]

pub(crate) mod boundary;
pub mod build;
pub mod config;
pub mod dialect;
pub mod events;
pub mod fs;
pub(crate) mod growth;
pub mod handles;
pub mod key;
pub mod log;
pub mod manager;
pub mod observe;
pub mod primary;
pub mod reclaim;
pub mod redis;
pub mod region;
pub mod report;
pub mod requests;
pub mod status;
mod store_out;
pub mod tier;
pub mod version;

// The crate's own name, for test support shared with the integration
// tests (tests/support/), which name the crate `kvtier`.
#[cfg(test)]
extern crate self as kvtier;
#[cfg(test)]
mod panic_tests;

pub use boundary::kvtier_last_error_message;
pub use key::kvtier_key;
pub use status::{kvtier_status, kvtier_status_str};
pub use version::kvtier_version;
