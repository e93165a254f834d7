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

#[test]
fn reference_parser_reads_the_allocation_size_histogram() {
    use kvtier::Key;
    use kvtier::primary::{PrimaryConfig, PrimaryTier};
    use kvtier::tiering::backend::StorePlan;
    use kvtier::tiering::{Manager, ManagerOptions, RequestParams};

    let primary = PrimaryTier::new(PrimaryConfig {
        capacity: 64,
        ..Default::default()
    })
    .unwrap();
    let m = Manager::new(primary, ManagerOptions::default());
    let r = m.on_new_request("r", RequestParams::default()).unwrap().id;
    let keys: Vec<Key> = (0u32..7)
        .map(|i| Key::new(&i.to_be_bytes()).unwrap())
        .collect();
    let mut plan = StorePlan::default();
    // Allocations of 2 and 5 keys.
    m.prepare_store(r, &keys[..2], &mut plan).unwrap();
    m.prepare_store(r, &keys, &mut plan).unwrap();
    let text = kvtier::metrics::manager_prometheus_text(&m.stats().unwrap());
    let samples = parse_with_prometheus_client(&text);
    let family = "kvtier_allocation_size_blocks";
    let histogram: Vec<&String> = samples
        .iter()
        .filter(|s| s.starts_with(&format!("{family}_")))
        .collect();
    let sample = |suffix: &str, le: Option<&str>, value: f64| {
        let labels = match le {
            Some(le) => format!("[('le', '{le}'), ('tier', 'primary')]"),
            None => "[('tier', 'primary')]".to_string(),
        };
        format!("{family}{suffix}|histogram|{labels}|{value:?}")
    };
    let mut expected = Vec::new();
    for (le, count) in [
        ("1", 0.0),
        ("4", 1.0),
        ("16", 2.0),
        ("64", 2.0),
        ("256", 2.0),
        ("1024", 2.0),
        ("4096", 2.0),
        ("16384", 2.0),
        ("65536", 2.0),
        ("262144", 2.0),
        ("+Inf", 2.0),
    ] {
        expected.push(sample("_bucket", Some(le), count));
    }
    expected.push(sample("_count", None, 2.0));
    expected.push(sample("_sum", None, 7.0));
    let mut got: Vec<String> = histogram.into_iter().cloned().collect();
    got.sort();
    expected.sort();
    assert_eq!(got, expected, "{text}");
}
