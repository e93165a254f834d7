//! The `fs DIR` subcommand's output: a directory's report as JSON or text.

use std::time::Duration;

use kvtier_core::tiers::fs::inspect::{AGE_BOUNDS, DirReport};
use serde_json::json;

fn seconds(d: Option<Duration>) -> serde_json::Value {
    d.map_or(serde_json::Value::Null, |d| json!(d.as_secs_f64()))
}

pub(crate) fn fs_json(r: &DirReport, verify: bool) -> serde_json::Value {
    let mut ages = serde_json::Map::new();
    for (i, (name, _)) in AGE_BOUNDS.iter().enumerate() {
        ages.insert(format!("le_{name}"), json!(r.ages[i]));
    }
    ages.insert("older".into(), json!(r.ages[AGE_BOUNDS.len()]));
    let bad: Vec<serde_json::Value> = r
        .bad
        .iter()
        .map(|b| {
            json!({"path": b.path, "record": b.record, "problem": b.problem.as_str(), "removed": b.removed})
        })
        .collect();
    let mut v = json!({
        "directory": r.root,
        "layout_fingerprint": r.layout_fingerprint,
        "layout_marker_problem": r.layout_marker_problem,
        "blocks": r.blocks,
        "bytes": r.bytes,
        "data_bytes": r.data_bytes,
        "oldest_seconds": seconds(r.oldest),
        "newest_seconds": seconds(r.newest),
        "ages": ages,
        "temp_files": r.temp_files,
        "other_files": r.other_files,
        "vanished": r.vanished,
        "foreign": r.foreign.iter().map(|(p, kind)| json!({"path": p, "kind": kind})).collect::<Vec<_>>(),
        "mode": format!("{:04o}", r.file_mode),
        "too_open": r.too_open.iter().map(|(p, m)| json!({"path": p, "mode": format!("{m:04o}")})).collect::<Vec<_>>(),
    });
    if verify {
        v["verified"] = json!(r.verified);
        v["bad"] = json!(bad);
    }
    v
}

fn human_age(d: Duration) -> String {
    let s = d.as_secs();
    match s {
        0..=119 => format!("{s} s"),
        120..=7199 => format!("{} min", s / 60),
        7200..=172_799 => format!("{} h", s / 3600),
        _ => format!("{} d", s / 86400),
    }
}

pub(crate) fn print_fs(r: &DirReport, verify: bool) {
    println!("fs tier directory {}", r.root.display());
    match (&r.layout_fingerprint, &r.layout_marker_problem) {
        (_, Some(p)) => println!("  layout fingerprint: unreadable ({p})"),
        (Some(f), None) => println!("  layout fingerprint: {f:?}"),
        (None, None) => println!("  layout fingerprint: none (no marker)"),
    }
    println!(
        "  blocks: {} ({} bytes on disk, {} data bytes)",
        r.blocks, r.bytes, r.data_bytes
    );
    if let (Some(newest), Some(oldest)) = (r.newest, r.oldest) {
        let buckets: Vec<String> = AGE_BOUNDS
            .iter()
            .enumerate()
            .map(|(i, (name, _))| format!("<={name} {}", r.ages[i]))
            .chain([format!("older {}", r.ages[AGE_BOUNDS.len()])])
            .collect();
        println!(
            "  ages: newest {}, oldest {}; {}",
            human_age(newest),
            human_age(oldest),
            buckets.join(", ")
        );
    }
    println!(
        "  temporary files: {}, other files: {}",
        r.temp_files, r.other_files
    );
    println!(
        "  foreign entries (never followed nor opened): {}",
        r.foreign.len()
    );
    for (p, kind) in &r.foreign {
        println!("    {}: {kind}", p.display());
    }
    println!(
        "  more open than mode {:04o}: {}",
        r.file_mode,
        r.too_open.len()
    );
    for (p, m) in r.too_open.iter().take(20) {
        println!("    {}: {m:04o}", p.display());
    }
    if r.too_open.len() > 20 {
        println!("    ... and {} more", r.too_open.len() - 20);
    }
    if verify {
        println!("  verified: {} blocks, {} bad", r.verified, r.bad.len());
        for b in &r.bad {
            let removed = if b.removed { " (removed)" } else { "" };
            let record = b.record.map(|n| format!(" record {n}")).unwrap_or_default();
            println!(
                "    {}{record}: {}{removed}",
                b.path.display(),
                b.problem.as_str()
            );
        }
    }
}
