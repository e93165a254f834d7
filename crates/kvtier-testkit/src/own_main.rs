//! The test loop of a test binary with its own `main` (`harness = false`
//! in Cargo.toml): such a binary re-executes itself as the other
//! processes of a test (a region's joiner, a creator to kill), so it
//! cannot use the standard harness, which runs tests on threads.

use std::time::Instant;

/// Runs `tests` one after another (those whose name contains an argument,
/// if any; their names with `--list`, as the standard harness lists
/// them), each caught apart, and exits 1 if one failed.  `label` names
/// the binary in the summary line.
pub fn run_tests(label: &str, tests: &[(&str, fn())]) {
    if std::env::args().any(|a| a == "--list") {
        for (name, _) in tests {
            println!("{name}: test");
        }
        return;
    }
    let filters: Vec<String> = std::env::args()
        .skip(1)
        .filter(|a| !a.starts_with('-'))
        .collect();
    let mut failed = Vec::new();
    let mut ran = 0;
    for (name, test) in tests {
        if !filters.is_empty() && !filters.iter().any(|f| name.contains(f.as_str())) {
            continue;
        }
        ran += 1;
        eprintln!("test {name} ...");
        let t = Instant::now();
        match std::panic::catch_unwind(test) {
            Ok(()) => eprintln!("test {name} ... ok ({:?})", t.elapsed()),
            Err(_) => {
                eprintln!("test {name} ... FAILED");
                failed.push(*name);
            }
        }
    }
    eprintln!(
        "\n{label} tests: {} passed, {} failed",
        ran - failed.len(),
        failed.len()
    );
    if !failed.is_empty() {
        eprintln!("failed: {failed:?}");
        std::process::exit(1);
    }
}
