//! kvtier-inspect, the command-line tool installed with the library: the
//! summary of an fs-tier directory, a verify pass that finds a block
//! damaged on disk (and removes it only with --repair), a region's
//! layout and holders, and the usage of `regions` (its listing and
//! reclaiming of killed creators' regions: crates/kvtier-capi/tests/region_reclaim.rs).

#[path = "support/exposition.rs"]
mod exposition;

use std::os::unix::fs::FileExt;
use std::path::Path;
use std::process::Command;

use kvtier_core::Key;
use kvtier_core::config::Config;
use kvtier_core::primary::StorePlan;
use kvtier_core::region::{Prefault, Region, RegionOptions};
use kvtier_core::tiering::RequestParams;

const BLOCK: usize = 4096;
const HEADER: u64 = 4096;

/// Runs kvtier-inspect with `args`: exit code and standard output.
fn inspect(args: &[&str]) -> (i32, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_kvtier-inspect"))
        .args(args)
        .output()
        .unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8(out.stdout).unwrap(),
    )
}

fn json(args: &[&str]) -> (i32, serde_json::Value) {
    let (code, out) = inspect(args);
    (
        code,
        serde_json::from_str(&out).unwrap_or_else(|e| panic!("{e}: {out}")),
    )
}

/// An fs tier in `dir` holding 4 blocks, filled with their key's first byte.
fn fill(dir: &Path) {
    fill_with(dir, "");
}

/// [`fill`] with more fs options (`extra`: JSON fields, each followed by a comma).
fn fill_with(dir: &Path, extra: &str) {
    let json = format!(
        r#"{{"block_bytes": {BLOCK}, "primary": {{"capacity": 8}},
            "tiers": [{{"type": "fs", "options": {{{extra} "directory": "{}", "read_threads": 1,
                        "write_threads": 1, "direct_io": false}}}}]}}"#,
        dir.display()
    );
    let m = Config::from_json(&json).unwrap().build().unwrap();
    let r = m.request_begin("r", RequestParams::default()).unwrap().id;
    let keys: Vec<Key> = (1..=4u8).map(|i| Key::new(&[i; 8]).unwrap()).collect();
    let mut plan = StorePlan::default();
    m.prepare_store(r, &keys, &mut plan).unwrap();
    for (k, s) in plan.to_store.iter().zip(&plan.slots) {
        m.slot_memory()
            .unwrap()
            .write(*s, 0, &[k.as_bytes()[0]; BLOCK])
            .unwrap();
    }
    let done = plan.to_store.clone();
    m.complete_store(r, &done, true).unwrap();
    exposition::settle(&m);
    m.request_finished(r).unwrap();
    m.shutdown().unwrap();
}

fn block_files(dir: &Path) -> Vec<std::path::PathBuf> {
    let mut out = Vec::new();
    for d in std::fs::read_dir(dir).unwrap().flatten() {
        if d.path().is_dir() {
            for f in std::fs::read_dir(d.path()).unwrap().flatten() {
                out.push(f.path());
            }
        }
    }
    out.sort();
    out
}

#[test]
fn the_summary_counts_blocks_bytes_and_ages() {
    let dir = tempfile::tempdir().unwrap();
    fill(dir.path());
    let d = dir.path().to_str().unwrap();
    let (code, v) = json(&["fs", d, "--json"]);
    assert_eq!(code, 0, "{v}");
    assert_eq!(v["blocks"], 4, "{v}");
    assert_eq!(v["bytes"], 4 * (HEADER + BLOCK as u64), "{v}");
    assert_eq!(v["data_bytes"], 4 * BLOCK as u64, "{v}");
    assert_eq!(v["ages"]["le_1m"], 4, "{v}");
    assert!(v["oldest_seconds"].as_f64().unwrap() < 60.0, "{v}");
    assert!(v.get("bad").is_none(), "no verify, no verdict: {v}");
    let (code, text) = inspect(&["fs", d]);
    assert_eq!(code, 0);
    assert!(text.contains("blocks: 4 ("), "{text}");
}

#[test]
fn verify_finds_a_block_damaged_on_disk_and_only_repair_removes_it() {
    let dir = tempfile::tempdir().unwrap();
    fill(dir.path());
    let d = dir.path().to_str().unwrap();
    let files = block_files(dir.path());
    assert_eq!(files.len(), 4);
    let (code, v) = json(&["fs", d, "--verify", "--json"]);
    assert_eq!(
        (code, v["verified"].clone(), v["bad"].clone()),
        (0, 4.into(), serde_json::json!([]))
    );

    // One data byte flipped, one file cut short.
    let damaged = &files[1];
    let f = std::fs::OpenOptions::new()
        .write(true)
        .open(damaged)
        .unwrap();
    let mut byte = [0u8; 1];
    f.read_exact_at(&mut byte, HEADER + 100).ok();
    f.write_all_at(&[byte[0] ^ 0xff], HEADER + 100).unwrap();
    drop(f);
    let cut = &files[2];
    std::fs::OpenOptions::new()
        .write(true)
        .open(cut)
        .unwrap()
        .set_len(HEADER + 10)
        .unwrap();
    let before = std::fs::read(damaged).unwrap();

    let (code, v) = json(&["fs", d, "--verify", "--json", "--quiet"]);
    assert_eq!(code, 1, "{v}");
    let mut bad: Vec<(String, String, bool)> = v["bad"]
        .as_array()
        .unwrap()
        .iter()
        .map(|b| {
            (
                b["path"].as_str().unwrap().to_string(),
                b["problem"].as_str().unwrap().to_string(),
                b["removed"].as_bool().unwrap(),
            )
        })
        .collect();
    bad.sort();
    let mut want = vec![
        (damaged.display().to_string(), "checksum".to_string(), false),
        (cut.display().to_string(), "wrong_length".to_string(), false),
    ];
    want.sort();
    assert_eq!(bad, want);
    assert_eq!(
        std::fs::read(damaged).unwrap(),
        before,
        "--verify wrote nothing"
    );
    let (_, text) = inspect(&["fs", d, "--verify"]);
    assert!(text.contains("verified: 4 blocks, 2 bad"), "{text}");
    assert!(text.contains(": checksum\n"), "{text}");

    let (code, v) = json(&["fs", d, "--verify", "--repair", "--json"]);
    assert_eq!(code, 1, "{v}");
    assert!(
        v["bad"]
            .as_array()
            .unwrap()
            .iter()
            .all(|b| b["removed"] == true),
        "{v}"
    );
    assert!(!damaged.exists() && !cut.exists());
    let (code, v) = json(&["fs", d, "--verify", "--json"]);
    assert_eq!((code, v["blocks"].clone()), (0, 2.into()), "{v}");
}

/// A segments-layout directory: its records are counted and verified, a
/// damaged record is reported by file and record number, and repair
/// clears its header (a tier reopening the directory no longer sees it).
#[test]
fn segment_records_are_counted_verified_and_repaired() {
    let dir = tempfile::tempdir().unwrap();
    let record = HEADER + BLOCK as u64;
    fill_with(
        dir.path(),
        &format!(
            r#""layout": "segments", "capacity_bytes": {},"#,
            16 * record
        ),
    );
    let d = dir.path().to_str().unwrap();
    let (code, v) = json(&["fs", d, "--verify", "--json"]);
    assert_eq!(code, 0, "{v}");
    assert_eq!(
        (v["blocks"].clone(), v["verified"].clone()),
        (4.into(), 4.into()),
        "{v}"
    );
    assert_eq!(v["bytes"], 4 * record, "{v}");
    assert_eq!(v["data_bytes"], 4 * BLOCK as u64, "{v}");
    assert_eq!(v["other_files"], 0, "the lock file is the tier's: {v}");
    let seg = std::fs::read_dir(dir.path().join("segments"))
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .find(|p| p.extension().is_some_and(|x| x == "kvs"))
        .unwrap();
    // A data byte of record 2 flipped.
    let f = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(&seg)
        .unwrap();
    let at = 2 * record + HEADER + 7;
    let mut byte = [0u8; 1];
    f.read_exact_at(&mut byte, at).unwrap();
    f.write_all_at(&[byte[0] ^ 0x01], at).unwrap();
    let (code, v) = json(&["fs", d, "--verify", "--json"]);
    assert_eq!(code, 1, "{v}");
    let bad = &v["bad"][0];
    assert_eq!(
        (
            bad["path"].as_str().unwrap(),
            bad["record"].clone(),
            bad["problem"].clone(),
            bad["removed"].clone()
        ),
        (
            seg.to_str().unwrap(),
            2.into(),
            "checksum".into(),
            false.into()
        ),
        "{v}"
    );
    let (_, text) = inspect(&["fs", d, "--verify"]);
    assert!(text.contains(" record 2: checksum"), "{text}");
    let (code, v) = json(&["fs", d, "--verify", "--repair", "--json"]);
    assert_eq!(
        (code, v["bad"][0]["removed"].clone()),
        (1, true.into()),
        "{v}"
    );
    let (code, v) = json(&["fs", d, "--verify", "--json"]);
    assert_eq!((code, v["blocks"].clone()), (0, 3.into()), "{v}");
    // The tier reopening the directory finds the other three.
    let m = Config::from_json(&format!(
        r#"{{"block_bytes": {BLOCK}, "primary": {{"capacity": 8}},
            "tiers": [{{"type": "fs", "options": {{"layout": "segments", "capacity_bytes": {},
                        "directory": "{d}", "read_threads": 1, "write_threads": 1, "direct_io": false}}}}]}}"#,
        16 * record
    ))
    .unwrap()
    .build()
    .unwrap();
    // While a tier holds the directory, repair is refused.
    let (code, _) = inspect(&["fs", d, "--verify", "--repair", "--quiet"]);
    assert_eq!(code, 2);
    m.shutdown().unwrap();
}

#[test]
fn a_regions_layout_and_holders() {
    let dir = tempfile::tempdir().unwrap();
    let name = format!("kvtier-inspect-{}", std::process::id());
    let mut o = RegionOptions::new(name.clone(), 16, 8192);
    o.directory = dir.path().to_path_buf();
    o.prefault = Prefault::Off;
    let region = Region::create_or_join(&o).unwrap();
    let (code, v) = json(&[
        "region",
        &name,
        "--directory",
        dir.path().to_str().unwrap(),
        "--json",
    ]);
    assert_eq!(code, 0, "{v}");
    assert_eq!(v["layout"]["slot_count"], 16, "{v}");
    assert_eq!(v["layout"]["slot_bytes"], 8192, "{v}");
    let me = std::process::id();
    assert!(
        v["holders"]
            .as_array()
            .unwrap()
            .iter()
            .any(|h| h["pid"] == me && h["maps"] == true),
        "this process holds it: {v}"
    );
    let (_, text) = inspect(&["region", &name, "--directory", dir.path().to_str().unwrap()]);
    assert!(text.contains("16 slots of 8192 bytes"), "{text}");
    drop(region);
}

/// The tool opens a region's files to look at them, and never lists
/// itself among their holders: not in `region`, not in `regions`.
#[test]
fn the_tool_is_not_a_holder_of_what_it_inspects() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path().to_str().unwrap();
    let name = format!("kvtier-inspect-self-{}", std::process::id());
    let mut o = RegionOptions::new(name.clone(), 4, 4096);
    o.directory = dir.path().to_path_buf();
    o.prefault = Prefault::Off;
    let region = Region::create_or_join(&o).unwrap();
    let me = std::process::id();
    let (code, one) = json(&["region", &name, "--directory", d, "--json"]);
    assert_eq!(code, 0, "{one}");
    let (code, all) = json(&["regions", "--directory", d, "--prefix", &name, "--json"]);
    assert_eq!(code, 0, "{all}");
    assert_eq!(all["regions"].as_array().unwrap().len(), 1, "{all}");
    for holders in [&one["holders"], &all["regions"][0]["holders"]] {
        let holders = holders.as_array().unwrap();
        assert!(holders.iter().any(|h| h["pid"] == me), "{holders:?}");
        assert!(
            !holders.iter().any(|h| h["command"] == "kvtier-inspect"),
            "the tool listed itself: {holders:?}"
        );
    }
    let (_, text) = inspect(&["region", &name, "--directory", d]);
    assert!(
        text.contains(&format!("pid {me} (")) && !text.contains("(kvtier-inspect)"),
        "{text}"
    );
    drop(region);
}

#[test]
fn usage_errors_exit_with_2() {
    assert_eq!(inspect(&[]).0, 2);
    assert_eq!(inspect(&["fs"]).0, 2);
    assert_eq!(inspect(&["fs", "/nonexistent-kvtier-dir"]).0, 2);
    assert_eq!(inspect(&["fs", "/tmp", "--repair"]).0, 2);
    assert_eq!(inspect(&["fs", "/tmp", "--reclaim"]).0, 2);
    assert_eq!(inspect(&["region", "x", "--prefix", "x"]).0, 2);
    assert_eq!(inspect(&["regions", "--verify"]).0, 2);
    assert_eq!(inspect(&["regions", "--prefix"]).0, 2);
    assert_eq!(inspect(&["regions", "--prefix", "a/b"]).0, 2);
    assert_eq!(inspect(&["regions", "extra"]).0, 2);
}

/// `regions` over an empty directory and one that does not exist: nothing
/// listed (the killed creators' regions it finds and removes are
/// crates/kvtier-capi/tests/region_reclaim.rs's).
#[test]
fn regions_in_an_empty_or_missing_directory() {
    let dir = tempfile::tempdir().unwrap();
    for d in [dir.path().to_path_buf(), dir.path().join("absent")] {
        let (code, v) = json(&["regions", "--directory", d.to_str().unwrap(), "--json"]);
        assert_eq!(code, 0, "{v}");
        assert_eq!(v["prefix"], "vllm_kvtier_", "{v}");
        assert_eq!(v["regions"], serde_json::json!([]), "{v}");
    }
}
