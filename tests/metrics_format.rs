//! The Prometheus text kvtier writes is accepted by the reference Python
//! parser (`prometheus_client`), which `make test` installs if missing.

use std::io::Write;
use std::process::{Command, Stdio};

use kvtier::metrics::{TierStats, prometheus_text};
use kvtier::stats::Stat;

/// Parses `text` with prometheus_client and returns "name|labels|value" lines.
pub fn parse_with_prometheus_client(text: &str) -> Vec<String> {
    let script = r#"
import sys
from prometheus_client.parser import text_string_to_metric_families
for fam in text_string_to_metric_families(sys.stdin.read()):
    for s in fam.samples:
        print(f"{s.name}|{fam.type}|{sorted(s.labels.items())}|{float(s.value)!r}")
"#;
    let mut child = Command::new("python3")
        .args(["-c", script])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("python3 runs");
    child
        .stdin
        .take()
        .unwrap()
        .write_all(text.as_bytes())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "prometheus_client rejected the text (install it with `python3 -m pip install prometheus-client`):\n{}\n---\n{text}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .map(str::to_string)
        .collect()
}

#[test]
fn reference_parser_accepts_every_shape_we_emit() {
    let primary = [
        Stat::counter("evictions", 12),
        Stat::gauge("usage", 0.25),
        Stat::counter("stores_refused_total", 1),
    ];
    let fs = [
        Stat::counter("evictions", 3),
        Stat::gauge("bytes_used", 1.5e9),
    ];
    let text = prometheus_text(&[
        TierStats {
            tier: "primary",
            stats: &primary,
        },
        TierStats {
            tier: "fs\\0 \"quoted\"",
            stats: &fs,
        },
    ]);
    let samples = parse_with_prometheus_client(&text);
    assert!(
        samples.contains(&"kvtier_evictions_total|counter|[('tier', 'primary')]|12.0".to_string()),
        "{samples:?}"
    );
    assert!(
        samples.contains(
            &"kvtier_evictions_total|counter|[('tier', 'fs\\\\0 \"quoted\"')]|3.0".to_string()
        ),
        "{samples:?}"
    );
    assert!(
        samples.contains(&"kvtier_usage|gauge|[('tier', 'primary')]|0.25".to_string()),
        "{samples:?}"
    );
    assert!(
        samples
            .contains(&"kvtier_stores_refused_total|counter|[('tier', 'primary')]|1.0".to_string()),
        "{samples:?}"
    );
    assert!(
        samples.contains(
            &"kvtier_bytes_used|gauge|[('tier', 'fs\\\\0 \"quoted\"')]|1500000000.0".to_string()
        ),
        "{samples:?}"
    );
    assert_eq!(samples.len(), 5);
}
