//! What a test needs beyond the toolchain: redis-server, openssl,
//! Prometheus and promtool, a tmpfs of its own, root.
//!
//! A test whose prerequisite is missing goes through [`skip_or_fail`]:
//! by default it prints `SKIPPED: <why>` and the test returns (and so
//! passes); with `KVTIER_REQUIRE_ALL=1` in the environment (`make test`
//! and CI set it) the test fails instead, so that a machine that lacks a
//! tool cannot pass the whole suite without running every test.

use std::fmt::Display;
use std::path::PathBuf;

/// The environment variable that turns a skip into a failure (`1`).
pub const REQUIRE_ALL_VAR: &str = "KVTIER_REQUIRE_ALL";

/// Whether every prerequisite is required (`KVTIER_REQUIRE_ALL=1`).
pub fn all_required() -> bool {
    std::env::var_os(REQUIRE_ALL_VAR).is_some_and(|v| v == "1")
}

/// A test cannot run here for `why`: prints `SKIPPED: <why>` (the caller
/// then returns), or panics when [`all_required`].
#[track_caller]
pub fn skip_or_fail(why: impl Display) {
    if all_required() {
        panic!("{why}, and {REQUIRE_ALL_VAR}=1 requires every test to run");
    }
    println!("SKIPPED: {why}");
}

/// An executable on PATH (or, where PATH is unset, in the usual Debian
/// places).
pub fn find_tool(name: &str) -> Option<PathBuf> {
    let dirs: Vec<PathBuf> = match std::env::var_os("PATH") {
        Some(p) => std::env::split_paths(&p).collect(),
        None => ["/usr/local/bin", "/usr/bin", "/usr/sbin", "/bin"]
            .map(PathBuf::from)
            .into(),
    };
    dirs.into_iter().map(|d| d.join(name)).find(|p| p.is_file())
}

/// [`find_tool`], or [`skip_or_fail`] with what installs it (`install`,
/// e.g. "apt-get install -y redis-server") and `None`.
#[track_caller]
pub fn require_tool(name: &str, install: &str) -> Option<PathBuf> {
    let found = find_tool(name);
    if found.is_none() {
        skip_or_fail(format!(
            "{name} is not installed (Debian: {install}; `make test` installs it)"
        ));
    }
    found
}

/// Whether this process runs as root; else [`skip_or_fail`] with `what`
/// (what the test does that needs root) and `false`.
#[track_caller]
pub fn require_root(what: &str) -> bool {
    let root = unsafe { libc::geteuid() } == 0;
    if !root {
        skip_or_fail(format!("{what} needs root"));
    }
    root
}
