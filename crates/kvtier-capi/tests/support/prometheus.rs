//! The reference Prometheus text parser (`prometheus_client`, which
//! `make test` installs if missing), run on text kvtier wrote.

#![allow(dead_code)]

use std::io::Write;
use std::process::{Command, Stdio};

/// Parses `text` with prometheus_client; returns "name|type|labels|value"
/// lines.  Fails the test when the parser rejects the text.
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
