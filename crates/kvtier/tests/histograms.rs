//! The manager's histograms: per tier, how long each finished load and
//! store took and how many blocks it carried; per manager, how long
//! requests waited for their promotions.  All cumulative, in the
//! Prometheus shape.

use kvtier_testkit::common;

use std::time::Duration;

use common::*;
use kvtier_core::primary::StorePlan;
use kvtier_core::request::RequestId;
use kvtier_core::tiering::PrimaryBackend;
use kvtier_core::tiering::{JobResult, LookupResult, Manager, ManagerOptions, RequestParams};

/// Series `series` (as the flat C stats name it) of tier `tier`
/// (`None`: the manager's own).
fn series<P: PrimaryBackend>(m: &Manager<P>, tier: Option<usize>, series: &str) -> f64 {
    m.stats()
        .unwrap()
        .iter()
        .find(|s| s.tier == tier && s.stat.series_name() == series)
        .unwrap_or_else(|| panic!("no series {series} for {tier:?}"))
        .stat
        .value
}

/// Ends the step, then an empty one, so finished jobs are collected even
/// when a store spent the step's polling gate.
fn collect<P: PrimaryBackend>(m: &Manager<P>) {
    m.schedule_end().unwrap();
    m.schedule_end().unwrap();
}

fn start<P: PrimaryBackend>(m: &Manager<P>, name: &str) -> RequestId {
    m.request_begin(name, RequestParams::default()).unwrap().id
}

/// Finishes every job the tier holds, each reported as taking `took`.
fn finish_held(script: &parking_lot::Mutex<Script>, took: Duration) {
    let mut s = script.lock();
    let held = std::mem::take(&mut s.held);
    for job in held {
        if job.direction == kvtier_core::tiering::Direction::Store {
            s.stored.extend(job.keys.iter().copied());
        }
        let mut r = JobResult::new(job.id, true);
        r.duration = Some(took);
        s.ready.push(r);
    }
}

fn manager() -> (
    Manager<impl PrimaryBackend>,
    std::sync::Arc<parking_lot::Mutex<Script>>,
) {
    let m = model_manager(8, ManagerOptions::default());
    let (tier, script) = TestTier::new("t");
    script.lock().auto_finish = false;
    m.add_tier(rust(tier)).unwrap();
    (m.into_manager(), script)
}

#[test]
fn each_finished_job_is_one_observation_of_its_duration_and_size_by_direction() {
    let (m, script) = manager();
    let r = start(&m, "r");
    let mut plan = StorePlan::default();
    m.prepare_store(r, &keys(0..3), &mut plan).unwrap();
    m.complete_store(r, &plan.to_store, true).unwrap();
    finish_held(&script, Duration::from_millis(3));
    collect(&m);
    assert_eq!(series(&m, Some(1), "store_size_blocks_count"), 1.0);
    assert_eq!(series(&m, Some(1), "store_size_blocks_sum"), 3.0);
    assert_eq!(series(&m, Some(1), "store_size_blocks_bucket_le_2"), 0.0);
    assert_eq!(series(&m, Some(1), "store_size_blocks_bucket_le_4"), 1.0);
    assert_eq!(
        series(&m, Some(1), "store_duration_seconds_bucket_le_0_0025"),
        0.0
    );
    assert_eq!(
        series(&m, Some(1), "store_duration_seconds_bucket_le_0_005"),
        1.0
    );
    assert!((series(&m, Some(1), "store_duration_seconds_sum") - 0.003).abs() < 1e-9);
    assert_eq!(series(&m, Some(1), "load_duration_seconds_count"), 0.0);

    // A load of one block taking 20 ms.
    script.lock().stored.insert(k(100));
    assert_eq!(m.lookup(r, &k(100)).unwrap(), LookupResult::Retry);
    m.schedule_end().unwrap();
    finish_held(&script, Duration::from_millis(20));
    m.schedule_end().unwrap();
    m.schedule_end().unwrap();
    assert_eq!(series(&m, Some(1), "load_size_blocks_bucket_le_1"), 1.0);
    assert_eq!(
        series(&m, Some(1), "load_duration_seconds_bucket_le_0_01"),
        0.0
    );
    assert_eq!(
        series(&m, Some(1), "load_duration_seconds_bucket_le_0_025"),
        1.0
    );
    assert_eq!(
        series(&m, Some(1), "load_duration_seconds_bucket_le_inf"),
        1.0
    );
    let text = m.prometheus_text().unwrap();
    assert!(
        text.contains(
            "kvtier_tier_job_duration_seconds_bucket{tier=\"t\",medium=\"any\",direction=\"load\",le=\"0.025\"} 1\n"
        ),
        "{text}"
    );
    assert!(
        text.contains(
            "kvtier_tier_job_size_blocks_sum{tier=\"t\",medium=\"any\",direction=\"store\"} 3\n"
        ),
        "{text}"
    );
}

#[test]
fn a_wait_for_promotions_runs_from_the_lookup_that_started_one_to_the_one_that_found_it_ready() {
    let (m, script) = manager();
    let r = start(&m, "r");
    script.lock().stored.extend([k(1), k(2)]);
    // Nothing waited yet: lookups that hit or miss record nothing.
    assert_eq!(m.lookup(r, &k(50)).unwrap(), LookupResult::Miss);
    assert_eq!(series(&m, None, "promotion_wait_seconds_count"), 0.0);
    // The first lookup starts the wait; asking again while the load runs
    // (HIT_PENDING) goes on waiting, and so does a lookup that finds the
    // block ready but starts another promotion for the next key.
    let before = std::time::Instant::now();
    assert_eq!(m.lookup(r, &k(1)).unwrap(), LookupResult::Retry);
    m.schedule_end().unwrap();
    std::thread::sleep(Duration::from_millis(30));
    assert_eq!(m.lookup(r, &k(1)).unwrap(), LookupResult::HitPending);
    finish_held(&script, Duration::from_millis(1));
    collect(&m);
    let answer = m.lookup_per_key(r, &[k(1), k(2)]).unwrap();
    assert_eq!((answer.hits, answer.stop), (1, LookupResult::Retry));
    assert_eq!(series(&m, None, "promotion_wait_seconds_count"), 0.0);
    m.schedule_end().unwrap();
    finish_held(&script, Duration::from_millis(1));
    collect(&m);
    let answer = m.lookup_per_key(r, &[k(1), k(2), k(60)]).unwrap();
    let span = before.elapsed().as_secs_f64();
    assert_eq!((answer.hits, answer.stop), (2, LookupResult::Miss));
    assert_eq!(series(&m, None, "promotion_wait_seconds_count"), 1.0);
    // Within the lookups that started and ended it, which include the
    // 30 ms sleep: no wall-clock guess at how long the rest took.
    let waited = series(&m, None, "promotion_wait_seconds_sum");
    assert!(
        waited >= 0.03 && waited <= span,
        "waited {waited} s, {span} s from the first lookup to the last"
    );
    assert_eq!(
        series(&m, None, "promotion_wait_seconds_bucket_le_0_025"),
        0.0
    );
    // Later hits are no new wait.
    assert_eq!(m.lookup(r, &k(1)).unwrap(), LookupResult::Hit);
    assert_eq!(series(&m, None, "promotion_wait_seconds_count"), 1.0);

    // A wait that ends in a MISS (the promotion failed and the tier lost
    // the key) is a wait too.
    script.lock().stored.insert(k(3));
    assert_eq!(m.lookup(r, &k(3)).unwrap(), LookupResult::Retry);
    m.schedule_end().unwrap();
    {
        let mut s = script.lock();
        s.stored.clear();
        s.finish_all(false);
    }
    collect(&m);
    assert_eq!(m.lookup(r, &k(3)).unwrap(), LookupResult::Miss);
    assert_eq!(series(&m, None, "promotion_wait_seconds_count"), 2.0);
    let text = m.prometheus_text().unwrap();
    assert!(
        text.contains("kvtier_manager_promotion_wait_seconds_count 2\n"),
        "{text}"
    );
}
