//! docs/statistics.md lists every statistic the library reports: the
//! manager's own, the primary tier's (lru and arc), the manager's counters
//! for a secondary tier, and the fs, redis and vtable tiers' own.

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

/// The row docs/metrics.md must have for `family`: name, type, labels.
fn family_row(family: &kvtier_core::metrics::catalogue::Family) -> String {
    use kvtier_core::metrics::catalogue::Scope;
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
        "| `{}` | {} | {} |",
        family.name,
        family.ty.as_str(),
        labels
    )
}

#[test]
fn every_metric_family_is_documented_with_its_type_and_labels() {
    let doc = metrics_doc();
    let mut missing = Vec::new();
    for table in kvtier_core::metrics::catalogue::TABLES {
        for e in table.iter() {
            let row = family_row(e.family);
            if !doc.contains(&row) && !missing.contains(&row) {
                missing.push(row);
            }
        }
    }
    assert!(
        missing.is_empty(),
        "families docs/metrics.md does not list (or lists with another type or labels):\n{}",
        missing.join("\n")
    );
}

#[test]
fn the_family_check_finds_a_wrong_row() {
    let doc = metrics_doc();
    let f = &kvtier_core::metrics::catalogue::FS_ERRORS;
    assert!(doc.contains(&family_row(f)));
    assert!(!doc.contains("| `kvtier_fs_errors_total` | gauge |"));
    assert!(!doc.contains("| `kvtier_fs_errors_total` | counter | `tier`, `medium` |"));
}
