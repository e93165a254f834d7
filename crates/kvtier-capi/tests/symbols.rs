//! The shared library exports only `kvtier_*` symbols and carries its SONAME.

use std::path::PathBuf;
use std::process::Command;

/// The cdylib of this build (`target/<profile>/libkvtier.so`, which
/// `make test` builds with `cargo build` first), else the release one.
fn shared_library() -> PathBuf {
    let exe = std::env::current_exe().expect("test binary path");
    let profile_dir = exe
        .parent()
        .and_then(|deps| deps.parent())
        .expect("target/<profile>/deps/<test>");
    let candidates = [
        profile_dir.join("libkvtier.so"),
        profile_dir.join("../release/libkvtier.so"),
    ];
    candidates
        .iter()
        .find(|p| p.exists())
        .cloned()
        .unwrap_or_else(|| {
            panic!(
                "{} not built: run `cargo build` (or `make`) before this test",
                candidates[0].display()
            )
        })
}

#[test]
fn exports_only_kvtier_symbols() {
    let lib = shared_library();
    let out = Command::new("nm")
        .args(["-D", "--defined-only"])
        .arg(&lib)
        .output()
        .expect("nm runs (binutils)");
    assert!(out.status.success(), "nm failed: {:?}", out);
    let text = String::from_utf8_lossy(&out.stdout);
    let names: Vec<&str> = text
        .lines()
        .filter_map(|l| l.split_whitespace().nth(2))
        .collect();
    assert!(
        names.contains(&"kvtier_version"),
        "kvtier_version missing from {names:?}"
    );
    let foreign: Vec<&&str> = names.iter().filter(|n| !n.starts_with("kvtier_")).collect();
    assert!(foreign.is_empty(), "non-kvtier exports: {foreign:?}");
}

#[test]
fn has_soname_with_major_and_minor() {
    let lib = shared_library();
    let out = Command::new("readelf")
        .arg("-d")
        .arg(&lib)
        .output()
        .expect("readelf runs (binutils)");
    let text = String::from_utf8_lossy(&out.stdout);
    let expected = format!("[libkvtier.so.0.{}]", env!("CARGO_PKG_VERSION_MINOR"));
    assert!(
        text.lines()
            .any(|l| l.contains("SONAME") && l.contains(&expected)),
        "no SONAME {expected} in:\n{text}"
    );
}
