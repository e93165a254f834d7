//! The Prometheus text kvtier writes is accepted by the reference Python
//! parser (`prometheus_client`), which `make test` installs if missing.

#[path = "support/prometheus.rs"]
mod prometheus;

use kvtier::metrics::{TierStats, prometheus_text};
use kvtier::stats::Stat;
use prometheus::parse_with_prometheus_client;

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
