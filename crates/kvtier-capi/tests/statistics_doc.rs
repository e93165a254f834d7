//! docs/statistics.md lists every statistic the library reports: the
//! manager's own, the primary tier's (lru and arc), the manager's counters
//! for a secondary tier, and the fs, redis and vtable tiers' own (as
//! reported, and as each component's table declares them);
//! docs/metrics.md every family of those tables; and the C stats structs
//! carry their component's statistics in the table's order.

#[path = "support/c_basics.rs"]
mod c_basics;

use c_basics::miss_every_key;
use std::ffi::{CStr, CString, c_void};
use std::ptr::{null, null_mut};

use kvtier::dialect::{KVTIER_LOCALITY_ANY, KVTIER_MEDIUM_ANY};
use kvtier::fs::*;
use kvtier::kvtier_status as S;
use kvtier::manager::*;
use kvtier::observe::*;
use kvtier::redis::*;
use kvtier::region::*;
use kvtier::tier::*;
use kvtier_core::tiering::ManagerStats;

fn doc() -> String {
    std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../docs/statistics.md"
    ))
    .unwrap()
}

/// Whether the page names `name` (a histogram series by its family and
/// its bucket bound).
fn listed(doc: &str, name: &str) -> bool {
    let quoted = |s: &str| doc.contains(&format!("`{s}`"));
    match name.split_once("_bucket_") {
        Some((family, bound)) => quoted(family) && quoted(bound),
        None => quoted(name),
    }
}

unsafe extern "C" fn accept(_: *mut c_void, _: *const kvtier_job) -> i32 {
    0
}

/// Names of every statistic of every tier of a manager with policy
/// `policy`, an fs tier, a redis tier (when built in) and a vtable tier
/// with back-pressure on.
fn tier_stat_names(policy: &CStr, dir: &std::path::Path) -> Vec<(usize, String)> {
    let name = CString::new(format!("kvtier-stats-doc-{}", std::process::id())).unwrap();
    let cdir = CString::new(dir.to_str().unwrap()).unwrap();
    let mut ro = kvtier_region_options_default();
    ro.name = name.as_ptr();
    ro.directory = cdir.as_ptr();
    ro.slot_count = 4;
    ro.slot_bytes = 4096;
    ro.prefault = KVTIER_REGION_PREFAULT_OFF;
    let mut region = null_mut();
    assert_eq!(unsafe { kvtier_region_new(&ro, &mut region) }, S::Ok);
    let mut mo = kvtier_manager_options_default();
    mo.capacity = 4;
    mo.policy = policy.as_ptr();
    let mut m = null_mut();
    assert_eq!(unsafe { kvtier_manager_new(&mo, region, &mut m) }, S::Ok);
    let fs_dir = CString::new(dir.join("fs").to_str().unwrap()).unwrap();
    let mut fo = kvtier_fs_options_default();
    fo.directory = fs_dir.as_ptr();
    fo.read_threads = 1;
    fo.write_threads = 1;
    fo.direct_io = false;
    let mut index = 0;
    assert_eq!(
        unsafe { kvtier_manager_add_fs_tier(m, &fo, &mut index) },
        S::Ok
    );
    if cfg!(feature = "redis-tier") {
        // Connects nothing until it is used.
        assert_eq!(
            unsafe { kvtier_manager_add_redis_tier(m, null(), &mut index) },
            S::Ok
        );
    }
    let vt = kvtier_tier_vtable {
        name: c"vtable".as_ptr(),
        medium: KVTIER_MEDIUM_ANY,
        locality: KVTIER_LOCALITY_ANY,
        lookup: Some(miss_every_key),
        submit_store: Some(accept),
        submit_load: Some(accept),
        ..kvtier_tier_vtable_default()
    };
    let mut to = kvtier_tier_options_default();
    to.backpressure = true;
    assert_eq!(
        unsafe { kvtier_manager_add_tier(m, &vt, &to, &mut index) },
        S::Ok
    );
    let mut out = Vec::new();
    for tier in 0..=index {
        let mut n = 0;
        assert_eq!(
            unsafe { kvtier_manager_read_tier_stats(m, tier, null_mut(), 0, &mut n) },
            S::BufferTooSmall
        );
        let mut buf = vec![unsafe { std::mem::zeroed::<kvtier_tier_stat>() }; n];
        assert_eq!(
            unsafe { kvtier_manager_read_tier_stats(m, tier, buf.as_mut_ptr(), n, &mut n) },
            S::Ok
        );
        for s in &buf {
            let name = unsafe { CStr::from_ptr(s.name.as_ptr()) }.to_str().unwrap();
            assert!(name.len() < s.name.len(), "{name} was cut short");
            out.push((tier, name.to_string()));
        }
    }
    unsafe { kvtier_manager_free(m) };
    unsafe { kvtier_region_free(region) };
    out
}

#[test]
fn every_statistic_the_library_reports_is_listed() {
    let doc = doc();
    let mut missing: Vec<String> = ManagerStats::default()
        .stat_list()
        .iter()
        .map(|s| s.series_name().into_owned())
        .filter(|n| !listed(&doc, n))
        .map(|n| format!("manager: {n}"))
        .collect();
    // The manager's histograms, beside the struct's fields.
    let primary = kvtier_core::primary::PrimaryTier::new(kvtier_core::primary::PrimaryConfig {
        capacity: 4,
        ..Default::default()
    })
    .unwrap();
    let m = kvtier_core::tiering::Manager::new(primary, Default::default());
    for s in m.stats().unwrap().iter().filter(|s| s.tier.is_none()) {
        let name = s.stat.series_name().into_owned();
        if !listed(&doc, &name) {
            missing.push(format!("manager: {name}"));
        }
    }
    for policy in [c"lru", c"arc"] {
        let dir = tempfile::tempdir().unwrap();
        let names = tier_stat_names(policy, dir.path());
        assert!(names.iter().any(|(t, n)| *t == 0 && n == "capacity"));
        assert!(names.iter().any(|(t, n)| *t == 1 && n == "bytes_used"));
        assert!(names.iter().any(|(_, n)| n == "callback_errors"));
        assert!(names.iter().any(|(_, n)| n == "store_latency_ema"));
        for (tier, name) in names {
            if !listed(&doc, &name) {
                missing.push(format!("tier {tier}: {name}"));
            }
        }
    }
    missing.sort();
    missing.dedup();
    assert!(
        missing.is_empty(),
        "statistics the library reports that docs/statistics.md does not list: {missing:?}"
    );
}

#[test]
fn the_check_finds_a_name_the_page_lacks() {
    let doc = doc();
    assert!(listed(&doc, "misses_no_room"));
    assert!(listed(&doc, "allocation_size_blocks_bucket_le_16384"));
    assert!(!listed(&doc, "allocation_size_blocks_bucket_le_3"));
    assert!(!listed(&doc, "no_such_statistic"));
}

fn metrics_doc() -> String {
    std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../docs/metrics.md"
    ))
    .unwrap()
}

/// The row docs/metrics.md must have for `family`: name, type, labels and
/// help (the `# HELP` text, word for word).
fn family_row(family: &kvtier_core::stats::Family) -> String {
    use kvtier_core::stats::Scope;
    let mut labels: Vec<&str> = match family.scope {
        Scope::Manager => vec![],
        Scope::ManagerByTier => vec!["tier"],
        Scope::Tier => vec!["tier", "medium"],
    };
    labels.extend(family.label);
    let labels: Vec<String> = labels.iter().map(|l| format!("`{l}`")).collect();
    let labels = if labels.is_empty() {
        "(none)".to_string()
    } else {
        labels.join(", ")
    };
    format!(
        "| `{}` | {} | {} | {} |",
        family.name,
        family.ty.as_str(),
        labels,
        family.help
    )
}

#[test]
fn every_metric_family_is_documented_with_its_type_labels_and_help() {
    let doc = metrics_doc();
    let mut missing = Vec::new();
    for table in kvtier_core::catalogue::TABLES {
        for e in table.iter() {
            let row = family_row(e.family);
            if !doc.contains(&row) && !missing.contains(&row) {
                missing.push(row);
            }
        }
    }
    assert!(
        missing.is_empty(),
        "families docs/metrics.md does not list (or lists with another type, labels or help):\n{}",
        missing.join("\n")
    );
}

#[test]
fn the_family_check_finds_a_wrong_row() {
    let doc = metrics_doc();
    let f = kvtier_core::catalogue::TABLES
        .iter()
        .flat_map(|t| t.iter())
        .find(|e| e.stat == "errors_checksum")
        .unwrap()
        .family;
    assert_eq!(f.name, "kvtier_fs_errors_total");
    assert!(doc.contains(&family_row(f)));
    assert!(!doc.contains("| `kvtier_fs_errors_total` | gauge |"));
    assert!(!doc.contains("| `kvtier_fs_errors_total` | counter | `tier`, `medium` |"));
    // Another help text is a wrong row too.
    assert!(family_row(f).ends_with(&format!(" {} |", f.help)));
    assert!(!doc.contains(
        "| `kvtier_fs_errors_total` | counter | `tier`, `medium`, `cause` | Failed fs-tier operations. |"
    ));
}

/// The fields of C struct `name` in the generated header, in order.
fn header_fields(name: &str) -> Vec<String> {
    let header = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../include/kvtier.h"
    ))
    .unwrap();
    let end = header
        .find(&format!("}} {name};"))
        .unwrap_or_else(|| panic!("{name} is not in the header"));
    let start = header[..end].rfind("typedef struct {").unwrap();
    let mut fields = Vec::new();
    let mut in_comment = false;
    for line in header[start..end].lines().skip(1) {
        let line = line.trim();
        if line.starts_with("/*") {
            in_comment = true;
        }
        if in_comment {
            in_comment = !line.ends_with("*/");
            continue;
        }
        if let Some(decl) = line.strip_suffix(';') {
            let field = decl.split_whitespace().last().unwrap();
            fields.push(field.split('[').next().unwrap().to_string());
        }
    }
    fields
}

/// Checks C struct `name` against its component's `table`: each field
/// (after `struct_size`) is a statistic of the table (a histogram's
/// `_buckets`, `_sum` and `_count` fields are that histogram's), in the
/// table's order within each layout (the struct grows at its end, so a
/// later layout's fields start over), with `layouts` layouts; the table's
/// statistics the struct does not carry are `not_in_struct`.
fn check_struct(
    name: &str,
    table: kvtier_core::stats::StatTable,
    layouts: usize,
    not_in_struct: &[&str],
) {
    use kvtier_core::stats::FamilyType;
    let fields = header_fields(name);
    assert_eq!(fields.first().map(String::as_str), Some("struct_size"));
    let mut positions = Vec::new();
    for field in &fields[1..] {
        let at = table.iter().position(|e| e.stat == field).or_else(|| {
            let stem = ["_buckets", "_sum", "_count"]
                .iter()
                .find_map(|s| field.strip_suffix(s))?;
            table.iter().position(|e| {
                e.family.ty == FamilyType::Histogram && e.stat.starts_with(&format!("{stem}_"))
            })
        });
        let at = at.unwrap_or_else(|| panic!("{name}.{field} is no statistic of its table"));
        if !positions.contains(&at) {
            positions.push(at);
        }
    }
    let runs = 1 + positions.windows(2).filter(|w| w[1] < w[0]).count();
    assert_eq!(
        runs, layouts,
        "{name}: the fields of each layout follow the table's order ({fields:?})"
    );
    let missing: Vec<&str> = table
        .iter()
        .enumerate()
        .filter(|(i, _)| !positions.contains(i))
        .map(|(_, e)| e.stat)
        .collect();
    assert_eq!(
        missing, not_in_struct,
        "{name}: the statistics of its table it does not carry"
    );
}

#[test]
fn the_c_stats_structs_carry_their_components_statistics_in_order() {
    // Both grew once, in 0.3, at their end.
    check_struct(
        "kvtier_manager_stats",
        kvtier_core::catalogue::MANAGER,
        2,
        &["promotion_wait_seconds"],
    );
    check_struct(
        "kvtier_primary_stats",
        kvtier_core::catalogue::PRIMARY,
        2,
        &["transfer_pins", "admission_table_len"],
    );
}

#[test]
fn the_struct_check_finds_a_field_out_of_order() {
    let fields = header_fields("kvtier_manager_stats");
    assert_eq!(fields[1], "lookups");
    assert!(fields.contains(&"request_wait_steps".to_string()));
    let result = std::panic::catch_unwind(|| {
        check_struct(
            "kvtier_manager_stats",
            kvtier_core::catalogue::MANAGER,
            1,
            &["promotion_wait_seconds"],
        )
    });
    assert!(
        result.is_err(),
        "0.3's fields do not follow 0.2's in the table"
    );
}

#[test]
fn every_statistic_of_every_table_is_listed() {
    let doc = doc();
    let missing: Vec<&str> = kvtier_core::catalogue::TABLES
        .iter()
        .flat_map(|t| t.iter())
        .map(|e| e.stat)
        .filter(|n| !listed(&doc, n))
        .collect();
    assert!(
        missing.is_empty(),
        "statistics the tables declare that docs/statistics.md does not list: {missing:?}"
    );
}

/// The statistic names the first column of docs/observability.md's table
/// of the manager's statistics gives.
fn observability_table_names() -> Vec<String> {
    let doc = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../docs/observability.md"
    ))
    .unwrap();
    let start = doc.find("| name | kind | meaning |").unwrap();
    doc[start..]
        .lines()
        .skip(2)
        .take_while(|l| l.starts_with('|'))
        .flat_map(|l| l.split('|').nth(1).unwrap().split(',').map(str::trim))
        .map(|n| n.trim_matches('`').to_string())
        .collect()
}

#[test]
fn the_manager_statistics_observability_md_names_exist() {
    let names = observability_table_names();
    assert!(names.contains(&"lookups".to_string()));
    assert!(names.contains(&"promotion_wait_seconds".to_string()));
    let stats = kvtier_core::catalogue::MANAGER;
    let missing: Vec<&String> = names
        .iter()
        .filter(|n| kvtier_core::stats::find(stats, n).is_none())
        .collect();
    assert!(
        missing.is_empty(),
        "docs/observability.md names statistics the manager does not declare: {missing:?}"
    );
}
