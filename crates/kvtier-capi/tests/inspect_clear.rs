//! kvtier-inspect and the layout fingerprint of an fs-tier directory: the
//! summary shows the fingerprint the manager's configuration gave the
//! tier, and `clear` removes the blocks only for the matching fingerprint.

#[path = "support/exposition.rs"]
mod exposition;

use std::path::Path;
use std::process::Command;

use kvtier_core::Key;
use kvtier_core::config::Config;
use kvtier_core::primary::StorePlan;
use kvtier_core::tiering::RequestParams;

const BLOCK: usize = 4096;

fn inspect(args: &[&str]) -> (i32, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_kvtier-inspect"))
        .args(args)
        .output()
        .unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8(out.stdout).unwrap(),
        String::from_utf8(out.stderr).unwrap(),
    )
}

/// A manager whose configuration gives `fingerprint` at the top level
/// (the fs tier has none of its own) stores 3 blocks in `dir`.
fn fill(dir: &Path, fingerprint: &str) {
    let json = format!(
        r#"{{"block_bytes": {BLOCK}, "primary": {{"capacity": 8}}, "layout_fingerprint": "{fingerprint}",
            "tiers": [{{"type": "fs", "options": {{"directory": "{}", "read_threads": 1,
                        "write_threads": 1, "direct_io": false}}}}]}}"#,
        dir.display()
    );
    let m = Config::from_json(&json).unwrap().build().unwrap();
    let r = m.request_begin("r", RequestParams::default()).unwrap().id;
    let keys: Vec<Key> = (1..=3u8).map(|i| Key::new(&[i; 8]).unwrap()).collect();
    let mut plan = StorePlan::default();
    m.prepare_store(r, &keys, &mut plan).unwrap();
    let done = plan.to_store.clone();
    m.complete_store(r, &done, true).unwrap();
    exposition::settle(&m);
    m.request_finished(r).unwrap();
    m.shutdown().unwrap();
}

#[test]
fn the_summary_shows_the_fingerprint_the_configuration_gave() {
    let dir = tempfile::tempdir().unwrap();
    fill(dir.path(), "m|bf16|16");
    let d = dir.path().to_str().unwrap();
    let (code, out, _) = inspect(&["fs", d, "--json"]);
    assert_eq!(code, 0, "{out}");
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v["layout_fingerprint"], "m|bf16|16", "{v}");
    assert_eq!(v["blocks"], 3, "{v}");
    assert_eq!(v["other_files"], 0, "the marker is not an other file: {v}");
    let (_, text, _) = inspect(&["fs", d]);
    assert!(text.contains("layout fingerprint: \"m|bf16|16\""), "{text}");
}

#[test]
fn clear_removes_the_blocks_only_for_the_matching_fingerprint() {
    let dir = tempfile::tempdir().unwrap();
    fill(dir.path(), "m|bf16|16");
    let d = dir.path().to_str().unwrap();
    let (code, _, err) = inspect(&["clear", d, "--fingerprint", "m|fp8|16"]);
    assert_eq!(code, 2);
    assert!(
        err.contains("\"m|bf16|16\"") && err.contains("\"m|fp8|16\""),
        "{err}"
    );
    let (_, out, _) = inspect(&["fs", d, "--json"]);
    assert!(out.contains("\"blocks\":3"), "nothing removed: {out}");
    let (code, _, err) = inspect(&["clear", d]);
    assert_eq!(code, 2, "clear needs --fingerprint: {err}");
    let (code, out, err) = inspect(&["clear", d, "--fingerprint", "m|bf16|16", "--json"]);
    assert_eq!(code, 0, "{err}");
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v["files_removed"], 3, "{v}");
    let (_, out, _) = inspect(&["fs", d, "--json"]);
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(
        (v["blocks"].as_u64(), v["layout_fingerprint"].as_str()),
        (Some(0), Some("m|bf16|16"))
    );
    // A manager of another layout now refuses it still (the marker stays)...
    let json = format!(
        r#"{{"block_bytes": {BLOCK}, "layout_fingerprint": "m|fp8|16",
            "tiers": [{{"type": "fs", "options": {{"directory": "{d}"}}}}]}}"#
    );
    let e = Config::from_json(&json)
        .unwrap()
        .build()
        .err()
        .unwrap()
        .to_string();
    assert!(e.contains("tiers[0]") && e.contains("\"m|bf16|16\""), "{e}");
    // ... unless the tier names its own fingerprint, which wins.
    let json = format!(
        r#"{{"block_bytes": {BLOCK}, "layout_fingerprint": "m|fp8|16",
            "tiers": [{{"type": "fs", "options": {{"directory": "{d}", "layout_fingerprint": "m|bf16|16"}}}}]}}"#
    );
    let m = Config::from_json(&json).unwrap().build().unwrap();
    assert_eq!(m.tier_count(), 1);
}

#[test]
fn a_bad_top_level_fingerprint_is_a_configuration_error() {
    let e = Config::from_json(r#"{"layout_fingerprint": ""}"#)
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("configuration") && e.contains("layout_fingerprint"),
        "{e}"
    );
    let long = "x".repeat(257);
    assert!(Config::from_json(&format!(r#"{{"layout_fingerprint": "{long}"}}"#)).is_err());
    let c = Config::from_json(r#"{"layout_fingerprint": "a b"}"#).unwrap();
    assert_eq!(
        c.manager_options().layout_fingerprint.as_deref(),
        Some("a b")
    );
}
