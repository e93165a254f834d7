//! kvtierd: the node server, one kvtier cache for every engine on a
//! machine (docs/server.md).
//!
//! ```text
//! kvtierd --config FILE --socket PATH [--log-level error|warn|info|debug]
//! ```
//!
//! Reads the configuration (the manager's JSON document, which must name
//! a `region` and `block_bytes`, plus an optional `"server"` object),
//! creates the region, the manager and its tiers, and serves engines on
//! the Unix socket `PATH` until `SIGTERM` or `SIGINT`; then closes every
//! connection (releasing what their requests held), drains the tiers and
//! removes the region's names and the socket.  Runs in the foreground and
//! logs to standard error.  Engines connect with `kvtier_manager_connect`
//! (Python `kvtier.Manager.connect`, C++ `kvtier::manager::connect`).
//!
//! Exit status: 0 after a clean stop, 1 when the server failed while
//! running or stopping, 2 for a usage or configuration error (a socket
//! path in use included).

use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::atomic::{AtomicBool, Ordering};

use kvtier_core::server::{DaemonConfig, Server};
use log::LevelFilter;

const USAGE: &str =
    "usage: kvtierd --config FILE --socket PATH [--log-level error|warn|info|debug]";

/// Set by the signal handler; the accept loop checks it.
static STOP: AtomicBool = AtomicBool::new(false);

extern "C" fn on_signal(_: libc::c_int) {
    STOP.store(true, Ordering::Relaxed);
}

struct Args {
    config: PathBuf,
    socket: PathBuf,
    level: LevelFilter,
}

fn parse(args: &[String]) -> Result<Args, String> {
    let (mut config, mut socket, mut level) = (None, None, LevelFilter::Info);
    let mut it = args.iter();
    while let Some(a) = it.next() {
        let mut value = || {
            it.next()
                .ok_or_else(|| format!("{a} needs a value\n{USAGE}"))
        };
        match a.as_str() {
            "--config" => config = Some(PathBuf::from(value()?)),
            "--socket" => socket = Some(PathBuf::from(value()?)),
            "--log-level" => {
                level = match value()?.as_str() {
                    "error" => LevelFilter::Error,
                    "warn" => LevelFilter::Warn,
                    "info" => LevelFilter::Info,
                    "debug" => LevelFilter::Debug,
                    other => return Err(format!("--log-level {other}: unknown level\n{USAGE}")),
                }
            }
            "-h" | "--help" => return Err(USAGE.to_string()),
            other => return Err(format!("{other}: unknown argument\n{USAGE}")),
        }
    }
    Ok(Args {
        config: config.ok_or_else(|| format!("--config is required\n{USAGE}"))?,
        socket: socket.ok_or_else(|| format!("--socket is required\n{USAGE}"))?,
        level,
    })
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let args = match parse(&args) {
        Ok(a) => a,
        Err(message) => {
            eprintln!("kvtierd: {message}");
            return ExitCode::from(2);
        }
    };
    let _ = kvtier_core::logging::set_sink(
        Some(Box::new(|level, target, message| {
            eprintln!("kvtierd: {level} {target}: {message}");
        })),
        args.level,
    );
    let text = match std::fs::read_to_string(&args.config) {
        Ok(t) => t,
        Err(e) => {
            eprintln!("kvtierd: reading {}: {e}", args.config.display());
            return ExitCode::from(2);
        }
    };
    let server = match DaemonConfig::from_json(&text).and_then(|c| Server::start(c, &args.socket)) {
        Ok(s) => s,
        Err(e) => {
            eprintln!("kvtierd: {e}");
            return ExitCode::from(2);
        }
    };
    for sig in [libc::SIGTERM, libc::SIGINT] {
        // SAFETY: the handler only stores to an atomic.
        unsafe {
            libc::signal(
                sig,
                on_signal as extern "C" fn(libc::c_int) as libc::sighandler_t,
            )
        };
    }
    let info = server.info();
    eprintln!(
        "kvtierd: serving {} on {}: region {} in {} ({} slots of {} bytes)",
        info.version,
        args.socket.display(),
        info.region_name,
        info.region_directory.display(),
        info.slot_count,
        info.slot_bytes
    );
    match server.run(&STOP) {
        Ok(()) => {
            eprintln!("kvtierd: stopped");
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("kvtierd: stopping: {e}");
            ExitCode::from(1)
        }
    }
}
