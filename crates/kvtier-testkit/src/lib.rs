//! Test support shared by the tests of `kvtier` (the core) and
//! `kvtier-capi` (the C API); a dev-dependency only, never part of the
//! library.
//!
//! - [`common`]: a scriptable in-memory secondary tier and managers over
//!   the reference model of the primary tier.
//! - [`model`]: that reference model.
//! - [`probe`]: a manager whose primary tier a test looks into between
//!   calls (the real tier or the model).
//! - [`block_damage`]: the ways the fault runs damage a stored block file.
//! - [`fs_blocks`]: blocks with known bytes for file-system tier tests.
//! - [`fault_run`]: rounds and seeds of the fault runs.
//! - [`own_main`]: the test loop of a test binary with its own `main`.
//! - [`redis_server`]: real `redis-server` processes (and clusters) on
//!   loopback.
//! - [`region_files`]: a region's file as a creator leaves it part way.
//! - [`require`]: tests that need a tool: skipped, or failed under
//!   `KVTIER_REQUIRE_ALL=1`.
//! - [`rng`]: a small deterministic random generator.
//! - [`server`]: node servers, connected managers and the raw protocol.
//! - [`tmpfs`]: a small tmpfs of its own, for full-disk tests.

pub mod block_damage;
pub mod common;
pub mod fault_run;
pub mod fs_blocks;
pub mod model;
pub mod own_main;
pub mod probe;
pub mod redis_server;
pub mod region_files;
pub mod require;
pub mod rng;
pub mod server;
pub mod tmpfs;
