//! kvtier-inspect: looks at what kvtier keeps outside a process.
//!
//! ```text
//! kvtier-inspect fs DIR [--verify [--repair]] [--mode MODE] [--json] [--quiet]
//! kvtier-inspect clear DIR --fingerprint F [--json]
//! kvtier-inspect region NAME [--directory DIR] [--json]
//! kvtier-inspect regions [--directory DIR] [--prefix P] [--reclaim] [--json]
//! kvtier-inspect server SOCKET [--json]
//! ```
//!
//! `fs DIR`: the blocks and bytes an fs-tier directory holds and their
//! ages; `--verify` reads every block back and checks its header, length
//! and checksum, listing the bad ones; `--repair` also removes them (the
//! only way this tool writes anything; in a segments-layout directory it
//! clears a bad record's header, under the directory's lock).  Only blocks
//! proven bad are removed: one that cannot be read is listed and left.
//! Symlinks, FIFOs, sockets and devices under the tier's names are listed
//! as foreign, never followed nor opened.  Files more open than `--mode`
//! (octal, the tier's `file_mode`; default `0600`, directories `0700`)
//! are listed as too open; the layout fingerprint the directory's marker
//! names is shown.  `clear DIR --fingerprint F`: removes the directory's
//! blocks (block, temporary and segment files; the directory and its
//! marker stay) only when its layout marker names `F`, refusing, with
//! nothing removed, a directory of another fingerprint (naming both), one
//! without a marker, and one whose segments a running tier holds: the
//! offline way to drop one model's blocks at an upgrade.  `region NAME`: the layout a
//! region's header records and the processes holding it.  `regions`: every
//! region whose name starts with `--prefix` (default `vllm_kvtier_`, the
//! vLLM layer's names) in `--directory` (default `/dev/shm`): its files,
//! their size, the processes that have them open or mapped, and whether
//! it is stale; `--reclaim` removes the stale ones
//! (`kvtier_core::region::reclaim_stale`, the rules of docs/region.md) and
//! lists what it removed and what it kept, and why.  `server SOCKET`:
//! connects to the node server `kvtierd` listening at `SOCKET` as an
//! observer (it holds nothing and maps no region) and lists the server's
//! region, layout and fingerprint, its counts of ended and refused
//! connections, and each connection with its name, process, user, and the
//! requests, pins, stores in flight and calls it has made (the observer's
//! own connection included).  `--json` prints one
//! JSON object instead of text.  Progress of long scans goes to standard
//! error (once a second) unless `--quiet`.
//!
//! Exit status: 0, 1 when the verify pass found bad blocks or a region's
//! files could not be looked at or removed, 2 for a usage error or a
//! failure (a server that cannot be reached or refuses the connection
//! included).

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use kvtier_core::region::inspect::{Holder, RegionReport, holders_of, inspect};
use kvtier_core::region::reclaim::{FoundRegion, Kept, ReclaimReport, reclaim_stale, survey};
use kvtier_core::server::{Client, ConnectOptions};
use kvtier_core::tiers::fs::clear_layout;
use kvtier_core::tiers::fs::inspect::{ScanOptions, scan};
use serde_json::json;

mod fs;

use fs::{fs_json, print_fs};

const USAGE: &str =
    "usage: kvtier-inspect fs DIR [--verify [--repair]] [--mode MODE] [--json] [--quiet]
       kvtier-inspect clear DIR --fingerprint F [--json]
       kvtier-inspect region NAME [--directory DIR] [--json]
       kvtier-inspect regions [--directory DIR] [--prefix P] [--reclaim] [--json]
       kvtier-inspect server SOCKET [--json]";

/// The names the vLLM layer gives its regions start with this
/// (`python/kvtier/vllm/region.py`).
const VLLM_PREFIX: &str = "vllm_kvtier_";

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    match run(&args) {
        Ok(code) => code,
        Err(message) => {
            eprintln!("kvtier-inspect: {message}");
            ExitCode::from(2)
        }
    }
}

struct Flags {
    json: bool,
    quiet: bool,
    verify: bool,
    repair: bool,
    mode: Option<u32>,
    directory: Option<PathBuf>,
    prefix: Option<String>,
    reclaim: bool,
    fingerprint: Option<String>,
    positional: Vec<String>,
}

fn flags(args: &[String]) -> Result<Flags, String> {
    let mut f = Flags {
        json: false,
        quiet: false,
        verify: false,
        repair: false,
        mode: None,
        directory: None,
        prefix: None,
        reclaim: false,
        fingerprint: None,
        positional: Vec::new(),
    };
    let mut it = args.iter();
    while let Some(a) = it.next() {
        match a.as_str() {
            "--json" => f.json = true,
            "--quiet" => f.quiet = true,
            "--verify" => f.verify = true,
            "--repair" => f.repair = true,
            "--reclaim" => f.reclaim = true,
            "--prefix" => {
                let p = it.next().ok_or("--prefix needs the start of a file name")?;
                f.prefix = Some(p.clone());
            }
            "--mode" => {
                let m = it.next().ok_or("--mode needs an octal mode such as 0600")?;
                let digits = m.strip_prefix("0o").unwrap_or(m);
                let mode = u32::from_str_radix(digits, 8)
                    .ok()
                    .filter(|m| *m <= 0o777)
                    .ok_or_else(|| format!("--mode {m} is not an octal mode such as 0600"))?;
                f.mode = Some(mode);
            }
            "--fingerprint" => {
                let v = it
                    .next()
                    .ok_or("--fingerprint needs the layout fingerprint")?;
                f.fingerprint = Some(v.clone());
            }
            "--directory" => {
                let d = it.next().ok_or("--directory needs a directory")?;
                f.directory = Some(PathBuf::from(d));
            }
            "-h" | "--help" => return Err(USAGE.to_string()),
            s if s.starts_with('-') => return Err(format!("unknown option {s}\n{USAGE}")),
            s => f.positional.push(s.to_string()),
        }
    }
    Ok(f)
}

fn run(args: &[String]) -> Result<ExitCode, String> {
    let f = flags(args)?;
    let is_regions = f.positional.first().is_some_and(|w| w == "regions");
    if !is_regions && (f.reclaim || f.prefix.is_some()) {
        return Err(format!("--prefix and --reclaim are for regions\n{USAGE}"));
    }
    let is_clear = f.positional.first().is_some_and(|w| w == "clear");
    if is_clear != f.fingerprint.is_some() {
        return Err(format!(
            "clear needs --fingerprint, and only clear takes it\n{USAGE}"
        ));
    }
    match f.positional.as_slice() {
        [what, dir] if what == "clear" => {
            if f.verify || f.repair || f.mode.is_some() || f.directory.is_some() {
                return Err(format!("clear takes --fingerprint and --json\n{USAGE}"));
            }
            let fingerprint = f.fingerprint.as_deref().unwrap_or_default();
            let r = clear_layout(&PathBuf::from(dir), fingerprint).map_err(|e| e.to_string())?;
            if f.json {
                println!(
                    "{}",
                    json!({"directory": dir, "fingerprint": fingerprint,
                           "files_removed": r.files_removed, "left": r.left})
                );
            } else {
                println!(
                    "fs tier directory {dir}: removed {} files of layout {fingerprint:?}; {} entries left in place",
                    r.files_removed, r.left
                );
            }
            Ok(ExitCode::SUCCESS)
        }
        [what, dir] if what == "fs" => {
            if f.repair && !f.verify {
                return Err("--repair needs --verify".into());
            }
            if f.directory.is_some() {
                return Err(format!("--directory is for regions\n{USAGE}"));
            }
            let quiet = f.quiet;
            let report = scan(
                &PathBuf::from(dir),
                ScanOptions {
                    verify: f.verify,
                    repair: f.repair,
                    file_mode: f.mode,
                },
                |done, total| {
                    if !quiet {
                        eprintln!("kvtier-inspect: {done} of {total} files scanned");
                    }
                },
            )
            .map_err(|e| e.to_string())?;
            if f.json {
                println!("{}", fs_json(&report, f.verify));
            } else {
                print_fs(&report, f.verify);
            }
            Ok(if report.bad.is_empty() {
                ExitCode::SUCCESS
            } else {
                ExitCode::from(1)
            })
        }
        [what, name] if what == "region" => {
            if f.verify || f.repair || f.mode.is_some() {
                return Err(format!(
                    "--verify and --mode are for fs directories\n{USAGE}"
                ));
            }
            let dir = f.directory.unwrap_or_else(|| PathBuf::from("/dev/shm"));
            let report = inspect(&dir, name).map_err(|e| e.to_string())?;
            if f.json {
                println!("{}", region_json(&report));
            } else {
                print_region(&report);
            }
            Ok(ExitCode::SUCCESS)
        }
        [what] if what == "regions" => {
            if f.verify || f.repair || f.mode.is_some() || f.quiet {
                return Err(format!(
                    "--verify, --repair, --mode and --quiet are for fs directories\n{USAGE}"
                ));
            }
            let dir = f.directory.unwrap_or_else(|| PathBuf::from("/dev/shm"));
            let prefix = f.prefix.as_deref().unwrap_or(VLLM_PREFIX);
            let report = if f.reclaim {
                reclaim_stale(&dir, prefix)
            } else {
                survey(&dir, prefix)
            }
            .map_err(|e| e.to_string())?;
            let listed = regions_listed(&report);
            if f.json {
                println!("{}", regions_json(&dir, prefix, f.reclaim, &listed));
            } else {
                print_regions(&dir, prefix, f.reclaim, &listed);
            }
            let failed = listed
                .iter()
                .any(|(r, _)| matches!(r.kept, Some(Kept::Failed { .. })));
            Ok(if failed {
                ExitCode::from(1)
            } else {
                ExitCode::SUCCESS
            })
        }
        [what, socket] if what == "server" => {
            if f.verify || f.repair || f.mode.is_some() || f.quiet || f.directory.is_some() {
                return Err(format!("server takes only --json\n{USAGE}"));
            }
            let client = Client::observe(
                &PathBuf::from(socket),
                &ConnectOptions {
                    name: "kvtier-inspect".into(),
                    call_timeout: Duration::from_secs(5),
                    ..ConnectOptions::default()
                },
            )
            .map_err(|e| e.to_string())?;
            let text = client.clients_json().map_err(|e| e.to_string())?;
            if f.json {
                println!("{text}");
            } else {
                let doc: serde_json::Value = serde_json::from_str(&text)
                    .map_err(|e| format!("the server's client list: {e}"))?;
                print_server(socket, &doc);
            }
            Ok(ExitCode::SUCCESS)
        }
        _ => Err(USAGE.to_string()),
    }
}

/// The client list of `kvtierd` (its JSON, as the server wrote it) as text.
fn print_server(socket: &str, doc: &serde_json::Value) {
    let info = &doc["server"];
    let text = |v: &serde_json::Value| v.as_str().unwrap_or("?").to_string();
    println!(
        "server {socket}: kvtier {}, protocol {}",
        text(&info["version"]),
        info["protocol"]
    );
    println!(
        "  region {} in {}: {} slots of {} bytes (stride {}), primary capacity {}",
        text(&info["region_name"]),
        text(&info["region_directory"]),
        info["slot_count"],
        info["slot_bytes"],
        info["slot_stride"],
        info["capacity"]
    );
    println!("  fingerprint: {:?}", text(&info["fingerprint"]));
    let empty = Vec::new();
    let clients = doc["clients"].as_array().unwrap_or(&empty);
    println!(
        "  clients: {} (connections ended: {}, refused: {})",
        clients.len(),
        doc["disconnects"],
        doc["refused"]
    );
    if clients.is_empty() {
        return;
    }
    println!(
        "  {:>6}  {:<24} {:<8} {:>8} {:>6} {:>6} {:>8} {:>6} {:>6} {:>10}",
        "id", "name", "role", "pid", "uid", "gid", "requests", "pins", "stores", "calls"
    );
    for c in clients {
        let role = if c["engine"].as_bool() == Some(true) {
            "engine"
        } else {
            "observer"
        };
        let name = text(&c["name"]);
        println!(
            "  {:>6}  {:<24} {:<8} {:>8} {:>6} {:>6} {:>8} {:>6} {:>6} {:>10}",
            c["id"].to_string(),
            if name.is_empty() { "-" } else { &name },
            role,
            c["peer"]["pid"].to_string(),
            c["peer"]["uid"].to_string(),
            c["peer"]["gid"].to_string(),
            c["requests"].to_string(),
            c["pins"].to_string(),
            c["stores"].to_string(),
            c["calls"].to_string()
        );
    }
}

/// Each region found with the processes that have one of its files open
/// or mapped (none for the regions removed), one entry per process.
fn regions_listed(report: &ReclaimReport) -> Vec<(&FoundRegion, Vec<Holder>)> {
    let ids: Vec<(u64, u64)> = report
        .regions
        .iter()
        .filter(|r| !r.removed)
        .flat_map(|r| r.files().map(|f| f.id))
        .collect();
    let mut per_file = holders_of(&ids).into_iter();
    report
        .regions
        .iter()
        .map(|r| {
            let mut holders: Vec<Holder> = Vec::new();
            if !r.removed {
                for _ in r.files() {
                    for h in per_file.next().unwrap_or_default() {
                        match holders.iter_mut().find(|o| o.pid == h.pid) {
                            Some(o) => {
                                o.descriptors += h.descriptors;
                                o.maps |= h.maps;
                            }
                            None => holders.push(h),
                        }
                    }
                }
            }
            holders.sort_by_key(|h| h.pid);
            (r, holders)
        })
        .collect()
}

/// One word for where a region stands.
fn region_state(r: &FoundRegion, holders: &[Holder]) -> &'static str {
    match &r.kept {
        None if r.removed => "removed",
        None if holders.is_empty() => "stale",
        None => "held",
        Some(Kept::Held { .. }) => "held",
        Some(Kept::NotRegular { .. }) => "not_regular",
        Some(Kept::OtherUser { .. }) => "other_user",
        Some(Kept::NoHeader { .. }) => "no_header",
        Some(Kept::Changed { .. }) => "changed",
        Some(Kept::Failed { .. }) => "failed",
    }
}

fn lossy(name: &std::ffi::OsStr) -> String {
    name.to_string_lossy().into_owned()
}

fn regions_json(
    dir: &std::path::Path,
    prefix: &str,
    reclaim: bool,
    listed: &[(&FoundRegion, Vec<Holder>)],
) -> serde_json::Value {
    let regions: Vec<serde_json::Value> = listed
        .iter()
        .map(|(r, holders)| {
            json!({
                "name": lossy(&r.name),
                "first_file": r.first.is_some(),
                "bytes": r.bytes(),
                "segments": r.segments.iter().map(|s| json!({"name": lossy(&s.name), "bytes": s.bytes})).collect::<Vec<_>>(),
                "state": region_state(r, holders),
                "reason": r.kept.as_ref().map(|k| k.to_string()),
                "holders": holders.iter().map(|h| json!({"pid": h.pid, "command": h.command, "descriptors": h.descriptors, "maps": h.maps})).collect::<Vec<_>>(),
            })
        })
        .collect();
    let count = |state: &str| {
        listed
            .iter()
            .filter(|(r, h)| region_state(r, h) == state)
            .count()
    };
    json!({
        "directory": dir,
        "prefix": prefix,
        "reclaim": reclaim,
        "regions": regions,
        "removed": count("removed"),
        "stale": count("stale"),
    })
}

fn print_regions(
    dir: &std::path::Path,
    prefix: &str,
    reclaim: bool,
    listed: &[(&FoundRegion, Vec<Holder>)],
) {
    let removed = listed.iter().filter(|(r, _)| r.removed).count();
    print!(
        "regions in {} named {prefix}*: {}",
        dir.display(),
        listed.len()
    );
    if reclaim {
        println!(", {removed} removed");
    } else {
        println!();
    }
    for (r, holders) in listed {
        let segments = match r.segments.len() {
            0 => String::new(),
            1 => ", 1 segment file".to_string(),
            n => format!(", {n} segment files"),
        };
        let first = if r.first.is_some() {
            ""
        } else {
            " (segments only)"
        };
        let state = match (&r.kept, region_state(r, holders)) {
            (_, "removed") => "removed".to_string(),
            (_, "stale") => "stale: no process has it open or mapped \
                             (--reclaim removes it)"
                .to_string(),
            (Some(k), _) => format!("kept: {k}"),
            (None, _) => "held".to_string(),
        };
        println!(
            "  {}{first}: {} bytes{segments}: {state}",
            lossy(&r.name),
            r.bytes()
        );
        for h in holders {
            println!(
                "    pid {} ({}): {} descriptors{}",
                h.pid,
                h.command,
                h.descriptors,
                if h.maps { ", mapped" } else { "" }
            );
        }
    }
}

fn region_json(r: &RegionReport) -> serde_json::Value {
    let layout = match &r.layout {
        Ok(l) => json!({
            "header_bytes": l.header_bytes,
            "slot_count": l.slot_count,
            "slot_bytes": l.slot_bytes,
            "worker_bytes": l.worker_bytes,
            "segments": l.segments,
            "total_bytes": l.total_bytes,
        }),
        Err(why) => json!({"error": why}),
    };
    let holders: Vec<serde_json::Value> = r
        .holders
        .iter()
        .map(|h| json!({"pid": h.pid, "command": h.command, "descriptors": h.descriptors, "maps": h.maps}))
        .collect();
    json!({"path": r.path, "file_bytes": r.file_bytes, "layout": layout, "holders": holders})
}

fn print_region(r: &RegionReport) {
    println!("region {} ({} bytes)", r.path.display(), r.file_bytes);
    match &r.layout {
        Ok(l) => println!(
            "  layout: {} slots of {} bytes ({} per worker), {} backing files, {} slot bytes, header {} bytes",
            l.slot_count, l.slot_bytes, l.worker_bytes, l.segments, l.total_bytes, l.header_bytes
        ),
        Err(why) => println!("  layout: unreadable: {why}"),
    }
    println!("  holders: {}", r.holders.len());
    for h in &r.holders {
        println!(
            "    pid {} ({}): {} descriptors{}",
            h.pid,
            h.command,
            h.descriptors,
            if h.maps { ", mapped" } else { "" }
        );
    }
}
