//! The Prometheus text of a manager with every built-in tier and a C tier:
//! each family once, with HELP and TYPE, named by the conventions; read by
//! the reference parser (`prometheus_client`) and passed by `promtool
//! check metrics` without a warning (both installed by `make test`; the
//! promtool test skips with a message where it is missing, or fails under
//! `KVTIER_REQUIRE_ALL=1`).

#[path = "support/exposition.rs"]
mod exposition;
#[path = "support/prometheus.rs"]
mod prometheus;

use exposition::{busy_manager, family_problems, promtool_check};
use prometheus::parse_with_prometheus_client;

fn text() -> String {
    let dir = tempfile::tempdir().unwrap();
    let m = busy_manager(dir.path());
    let text = m.prometheus_text().unwrap();
    m.shutdown().unwrap();
    text
}

#[test]
fn every_family_has_help_and_a_name_of_its_own() {
    let text = text();
    let problems = family_problems(&text);
    assert!(problems.is_empty(), "{problems:#?}\n{text}");
    // Only the C tier's own statistics are custom ones.
    for line in text.lines().filter(|l| l.starts_with("kvtier_custom_")) {
        assert!(line.contains("tier=\"ctier\""), "{line}");
    }
    for family in [
        "kvtier_custom_copies_total",
        "kvtier_custom_queue_depth",
        "kvtier_custom_evictions_total",
        "kvtier_custom_callback_errors_total",
        "kvtier_tier_callback_errors_total",
        "kvtier_fs_errors_total",
        "kvtier_primary_allocation_size_blocks",
    ] {
        assert!(
            text.contains(&format!("# TYPE {family} ")),
            "{family}:\n{text}"
        );
    }
    if cfg!(feature = "redis-tier") {
        assert!(
            text.contains("# TYPE kvtier_redis_failures_total counter\n"),
            "{text}"
        );
    }
    // The fs tier's failure causes are one family.
    assert_eq!(text.matches("# TYPE kvtier_fs_errors").count(), 1);
    assert!(
        text.contains(
            "kvtier_fs_errors_total{tier=\"fs\",medium=\"storage\",cause=\"checksum\"} 0\n"
        ),
        "{text}"
    );
}

#[test]
fn the_check_finds_a_family_without_help_and_two_families_of_one_name() {
    let good = "# HELP a_total A.\n# TYPE a_total counter\na_total 1\n";
    assert!(family_problems(good).is_empty());
    let no_help = "# TYPE a_total counter\na_total 1\n";
    assert_eq!(
        family_problems(no_help),
        ["family a_total has no HELP line"]
    );
    let twice = format!("{good}{good}");
    assert_eq!(family_problems(&twice), ["family a_total appears twice"]);
    let clash = format!("{good}# HELP a A.\n# TYPE a gauge\na 2\n");
    assert_eq!(
        family_problems(&clash),
        ["families a_total and a share the name a"]
    );
    let outside = "# HELP a_total A.\n# TYPE a_total counter\nb_total 1\n";
    assert_eq!(
        family_problems(outside),
        ["sample b_total is outside its family a_total"]
    );
}

#[test]
fn the_reference_parser_reads_every_family() {
    let text = text();
    let samples = parse_with_prometheus_client(&text);
    let has = |line: &str| samples.iter().any(|s| s == line);
    // Hit accounting: the primary tier's hits and the fs tier's
    // promotions are one family, beside the lookups they divide.
    assert!(
        has("kvtier_manager_lookup_hits_total|counter|[('tier', 'fs')]|1.0"),
        "{samples:#?}"
    );
    assert!(
        samples
            .iter()
            .any(|s| s
                .starts_with("kvtier_manager_lookup_hits_total|counter|[('tier', 'primary')]|")),
        "{samples:#?}"
    );
    assert!(
        has("kvtier_manager_lookup_misses_total|counter|[('reason', 'absent')]|1.0"),
        "{samples:#?}"
    );
    assert!(
        has(
            "kvtier_tier_jobs_total|counter|[('direction', 'store'), ('medium', 'cpu'), ('tier', 'ctier')]|2.0"
        ),
        "{samples:#?}"
    );
    assert!(
        has("kvtier_custom_queue_depth|gauge|[('medium', 'cpu'), ('tier', 'ctier')]|1.0"),
        "{samples:#?}"
    );
    // Two stores of 4 keys and the promotion's allocation of 1.
    assert!(
        has(
            "kvtier_primary_allocation_size_blocks_bucket|histogram|[('le', '+Inf'), ('medium', 'cpu'), ('tier', 'primary')]|3.0"
        ),
        "{samples:#?}"
    );
    // Every series once.
    let mut series: Vec<&str> = samples
        .iter()
        .map(|s| s.rsplit_once('|').unwrap().0)
        .collect();
    let all = series.len();
    series.sort();
    series.dedup();
    assert_eq!(series.len(), all, "{text}");
}

#[test]
fn promtool_passes_the_text_without_a_warning() {
    let text = text();
    let Some((ok, said)) = promtool_check(&text) else {
        return;
    };
    assert!(ok && said.trim().is_empty(), "promtool: {said}\n{text}");
    // And it does warn where the conventions are not followed.
    let (_, said) = promtool_check("# TYPE kvtier_x_ms counter\nkvtier_x_ms 1\n").unwrap();
    assert!(!said.trim().is_empty(), "promtool warned of nothing");
}
