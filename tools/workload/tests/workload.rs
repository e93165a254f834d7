//! The workload generator (`kvtier-workload`) against the
//! reference generator (`../shared/bench/gen_workload.py`): byte-identical
//! output for every preset and a few seeds.  Runs only where the reference
//! and `python3` are present; otherwise it says why and passes.

use std::path::PathBuf;
use std::process::Command;

/// The reference generator, if the shared tree sits beside the repository.
fn reference() -> Option<PathBuf> {
    let p = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../../shared/bench/gen_workload.py");
    p.is_file().then_some(p)
}

fn python_available() -> bool {
    Command::new("python3")
        .arg("--version")
        .output()
        .map(|o| o.status.success())
        .unwrap_or(false)
}

fn run(cmd: &mut Command) -> Vec<u8> {
    let out = cmd.output().expect("generator starts");
    assert!(
        out.status.success(),
        "{cmd:?} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    out.stdout
}

fn compare(preset: &str, seed: &str) -> bool {
    let Some(reference) = reference() else {
        println!("skipped: ../shared/bench/gen_workload.py is not beside the repository");
        return false;
    };
    if !python_available() {
        println!("skipped: python3 is not installed");
        return false;
    }
    let ours = run(Command::new(env!("CARGO_BIN_EXE_kvtier-workload"))
        .args(["--preset", preset, "--seed", seed]));
    let theirs = run(Command::new("python3")
        .arg(&reference)
        .args(["--preset", preset, "--seed", seed]));
    assert!(ours.len() > 1000, "{preset}/{seed}: output too short");
    if ours != theirs {
        let at = ours
            .iter()
            .zip(&theirs)
            .position(|(a, b)| a != b)
            .unwrap_or(ours.len().min(theirs.len()));
        let line = ours[..at].iter().filter(|&&b| b == b'\n').count() + 1;
        panic!(
            "{preset}/{seed}: outputs differ at byte {at} (line {line}); lengths {} and {}",
            ours.len(),
            theirs.len()
        );
    }
    true
}

#[test]
fn small_matches_reference() {
    for seed in ["7", "0", "-3", "123456789012345678901"] {
        if !compare("small", seed) {
            return;
        }
    }
}

#[test]
fn medium_matches_reference() {
    for seed in ["7", "42"] {
        if !compare("medium", seed) {
            return;
        }
    }
}

#[test]
fn large_matches_reference() {
    compare("large", "7");
}

#[test]
fn generator_is_deterministic_and_seed_sensitive() {
    let gen_ = |seed: &str| {
        run(Command::new(env!("CARGO_BIN_EXE_kvtier-workload"))
            .args(["--preset", "small", "--seed", seed]))
    };
    let a = gen_("7");
    assert_eq!(a, gen_("7"));
    assert_ne!(a, gen_("8"));
    let text = String::from_utf8(a).unwrap();
    let mut lines = text.lines();
    assert_eq!(
        lines.next(),
        Some("# kvtier-workload v1 preset=small seed=7")
    );
    let mut requests = 0;
    for line in lines {
        let parts: Vec<&str> = line.split(' ').collect();
        assert_eq!(parts[0], "R");
        assert_eq!(parts[1], format!("r{requests}"));
        let n: usize = parts[2].parse().unwrap();
        assert_eq!(parts.len(), 3 + n);
        for key in &parts[3..] {
            assert_eq!(key.len(), 24);
            assert!(key.ends_with("00000000"));
        }
        requests += 1;
    }
    assert_eq!(requests, 696, "the README gives 696 requests for small");
}
