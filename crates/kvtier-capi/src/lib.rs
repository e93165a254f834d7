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

// The modules in the order a user builds things, which is the order the
// generated header declares them in (rustfmt.toml keeps it): status and
// errors, the region, the manager, its secondary tiers, requests,
// observation, the primary tier alone.  Internal modules sit beside their
// first user.

// Status and errors.
pub mod status;
pub(crate) mod boundary;
pub mod version;
pub(crate) mod growth;
// The region and the sweep for regions no process maps.
pub mod region;
pub mod reclaim;
// The manager: its options, its handle and the tiers added to it, its JSON
// configuration.
pub mod manager;
pub mod config;
pub mod server;
// Secondary tiers: foreign tiers (the vtable, the per-tier options), the
// built-in fs and redis tiers.
pub mod tier;
pub mod fs;
pub mod redis;
// Requests: keys, the answers every object gives, the manager's calls.
pub mod key;
pub mod dialect;
pub mod requests;
pub mod pins;
pub mod handles;
mod store_out;
// Observation: statistics, events, request reports, logging.
pub mod observe;
pub mod health;
pub mod events;
pub mod report;
pub mod log;
// The primary tier alone.
pub mod primary;

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
