//! The tiering manager's rules (as `crates/kvtier/src/tiering/manager.rs`
//! documents them, one test or more per rule), with a test tier over the
//! reference primary model, registered as a Rust tier and again behind the
//! C vtable (so the rules hold through the foreign-tier path too).  The managers follow vLLM 0.33's rules
//! ([`ProgressOptions::vllm`]: nothing held, no wait bound); the progress
//! rule has its own tests (`manager_progress.rs`).

#[path = "support/c_bridge.rs"]
mod c_bridge;

use c_bridge::via_c;
use kvtier_testkit::common;
use kvtier_testkit::probe::{Probed, Shared};

use parking_lot::Mutex;
use std::sync::Arc;

use common::*;
use kvtier_core::Error;
use kvtier_core::events::EventKind;
use kvtier_core::primary::{StoreOutcome, StorePlan};
use kvtier_core::request::{Medium, RequestId, TierFilter, TierMatcher};
use kvtier_core::tiering::PrimaryBackend;
use kvtier_core::tiering::{
    BackpressureConfig, Direction, JobResult, LookupResult, Manager, ManagerOptions, OffloadPolicy,
    PressurePolicy, ProgressOptions, PromotionAnswer, RequestParams, TierOptions,
};

/// Manager options with vLLM 0.33's rules.
fn vllm() -> ManagerOptions {
    ManagerOptions {
        progress: ProgressOptions::vllm(),
        ..ManagerOptions::default()
    }
}

/// Ends the step, then ends an empty one, so finished jobs are collected
/// even when a prepare_store spent the step's polling gate.
fn collect<P: PrimaryBackend>(m: &Manager<P>) {
    m.schedule_end().unwrap();
    m.schedule_end().unwrap();
}

/// Starts request `name`; its handle.
fn start<P: PrimaryBackend>(m: &Manager<P>, name: &str) -> RequestId {
    m.request_begin(name, RequestParams::default()).unwrap().id
}

/// Stores `keys` through the manager for `req` and completes the store.
fn store<P: PrimaryBackend>(
    m: &Manager<P>,
    req: RequestId,
    keys: &[kvtier_core::Key],
) -> StorePlan {
    let mut plan = StorePlan::default();
    assert_eq!(
        m.prepare_store(req, keys, &mut plan).unwrap(),
        StoreOutcome::Planned
    );
    m.complete_store(req, &plan.to_store, true).unwrap();
    plan
}

fn polling_gate_once_per_step_prepare_store_always_polls(wrap: Wrap) {
    let m = model_manager(8, vllm());
    let (t, s) = TestTier::new("t");
    m.add_tier(wrap(t)).unwrap();
    let r = start(&m, "r");
    m.lookup(r, &k(1)).unwrap();
    m.lookup(r, &k(2)).unwrap();
    m.prepare_load(r, &[], &mut Vec::new()).unwrap();
    assert_eq!(
        s.lock().polls,
        1,
        "first lookup polls, the rest of the step does not"
    );
    let mut plan = StorePlan::default();
    m.prepare_store(r, &[k(3)], &mut plan).unwrap();
    m.prepare_store(r, &[k(4)], &mut plan).unwrap();
    assert_eq!(s.lock().polls, 3, "prepare_store always polls");
    m.schedule_end().unwrap();
    assert_eq!(
        s.lock().polls,
        3,
        "gate spent by prepare_store: on_schedule_end does not poll"
    );
    m.schedule_end().unwrap();
    assert_eq!(s.lock().polls, 4, "gate re-armed: on_schedule_end polls");
    m.lookup(r, &k(1)).unwrap();
    assert_eq!(
        s.lock().polls,
        5,
        "the gate on_schedule_end re-armed: the next step's first lookup polls"
    );
}

fn promotion_reserves_a_slot_at_once_and_batches_one_load_per_tier_and_request(wrap: Wrap) {
    let m = model_manager(8, vllm());
    let (t, s) = TestTier::new("t");
    m.add_tier(wrap(t)).unwrap();
    s.lock().stored.extend(keys(10..14));
    let a = start(&m, "a");
    let b = start(&m, "b");
    assert_eq!(m.lookup(a, &k(10)).unwrap(), LookupResult::Retry);
    assert_eq!(
        model_refs(&m, &k(10)),
        Some(-1),
        "slot reserved write pending"
    );
    assert_eq!(
        m.lookup(b, &k(10)).unwrap(),
        LookupResult::HitPending,
        "no second promotion"
    );
    assert_eq!(m.lookup(b, &k(12)).unwrap(), LookupResult::Retry);
    assert_eq!(m.lookup(a, &k(11)).unwrap(), LookupResult::Retry);
    assert!(
        s.lock().submitted.is_empty(),
        "load deferred to on_schedule_end"
    );
    m.schedule_end().unwrap();
    {
        let s = s.lock();
        assert_eq!(s.submitted.len(), 2, "one load job per (tier, request)");
        assert_eq!(s.submitted[0].request.name, "a", "in start order");
        assert_eq!(s.submitted[0].keys, vec![k(10), k(11)]);
        assert_eq!(s.submitted[1].keys, vec![k(12)]);
        let slots: Vec<u32> = s.submitted[0].slots.clone();
        assert_eq!(slots.len(), 2);
    }
    // the tier finished at submit; the next step's first lookup polls
    assert_eq!(m.lookup(a, &k(10)).unwrap(), LookupResult::Hit);
    assert_eq!(model_refs(&m, &k(12)), Some(0));
    assert_eq!(stat(&m, Some(1), "promotion_jobs"), 2.0);
    assert_eq!(stat(&m, Some(1), "promotion_blocks"), 3.0);
    assert_eq!(stat(&m, Some(1), "hits"), 3.0);
}

fn promotion_answer_hit_pending_option(wrap: Wrap) {
    let opts = ManagerOptions {
        promotion_answer: PromotionAnswer::HitPending,
        ..vllm()
    };
    let m = model_manager(8, opts);
    let (t, s) = TestTier::new("t");
    m.add_tier(wrap(t)).unwrap();
    s.lock().stored.insert(k(1));
    let r = start(&m, "r");
    assert_eq!(m.lookup(r, &k(1)).unwrap(), LookupResult::HitPending);
}

fn full_primary_answers_miss(wrap: Wrap) {
    let m = model_manager(1, vllm());
    let (t, s) = TestTier::new("t");
    m.add_tier(wrap(t)).unwrap();
    let r = start(&m, "r");
    store(&m, r, &[k(1)]);
    let mut slots = Vec::new();
    m.prepare_load(r, &[k(1)], &mut slots).unwrap();
    s.lock().stored.insert(k(2));
    m.schedule_end().unwrap(); // the cascade of k(1) finishes; k(1) stays pinned by the load
    assert_eq!(m.lookup(r, &k(2)).unwrap(), LookupResult::Miss);
    assert_eq!(stat(&m, None, "allocation_failures"), 1.0);
}

fn tier_retry_answers_retry_and_misses_miss(wrap: Wrap) {
    let m = model_manager(4, vllm());
    let (t, s) = TestTier::new("t");
    m.add_tier(wrap(t)).unwrap();
    let r = start(&m, "r");
    assert_eq!(m.lookup(r, &k(1)).unwrap(), LookupResult::Miss);
    s.lock().retry_lookups = true;
    assert_eq!(m.lookup(r, &k(1)).unwrap(), LookupResult::Retry);
}

fn cascade_pins_once_per_tier_and_unpins_when_jobs_finish(wrap: Wrap) {
    let m = model_manager(8, vllm());
    let (t1, s1) = TestTier::new("one");
    let (t2, s2) = TestTier::new("two");
    assert_eq!(m.add_tier(wrap(t1)).unwrap(), 1);
    assert_eq!(m.add_tier(wrap(t2)).unwrap(), 2);
    s1.lock().auto_finish = false;
    s2.lock().auto_finish = false;
    let r = start(&m, "r");
    store(&m, r, &keys(0..3));
    assert_eq!(model_refs(&m, &k(0)), Some(2), "pinned once per tier");
    assert_eq!(s1.lock().submitted.len(), 1);
    assert_eq!(s2.lock().submitted[0].keys, keys(0..3));
    s1.lock().finish_all(true);
    collect(&m);
    assert_eq!(model_refs(&m, &k(0)), Some(1));
    s2.lock().finish_all(false);
    collect(&m);
    assert_eq!(
        model_refs(&m, &k(0)),
        Some(0),
        "a failed cascade unpins and keeps the primary copy"
    );
    assert_eq!(stat(&m, Some(2), "cascade_failures"), 1.0);
    assert!(!m.has_pending_work().unwrap());
}

fn finalization_waits_for_stores_in_flight(wrap: Wrap) {
    let m = model_manager(8, vllm());
    let (t, s) = TestTier::new("t");
    m.add_tier(wrap(t)).unwrap();
    let r = start(&m, "r");
    let mut plan = StorePlan::default();
    m.prepare_store(r, &[k(1)], &mut plan).unwrap();
    m.request_finished(r).unwrap();
    assert!(!s.lock().log.iter().any(|l| l == "finished r"));
    assert!(
        matches!(m.lookup(r, &k(1)), Err(Error::UnknownRequest(_))),
        "finished request"
    );
    m.complete_store(r, &[k(1)], true).unwrap();
    let log = s.lock().log.clone();
    let cascade = log.iter().position(|l| l.starts_with("store")).unwrap();
    let fin = log.iter().position(|l| l == "finished r").unwrap();
    assert!(
        cascade < fin,
        "cascade submitted before the tier hears the request finished: {log:?}"
    );
    assert!(matches!(
        m.complete_store(r, &[k(1)], true),
        Err(Error::UnknownRequest(_))
    ));
    // the name can be reused once finalized, as a new request
    let r = start(&m, "r");
    store(&m, r, &[k(2)]);
    m.request_finished(r).unwrap();
    assert_eq!(
        s.lock().log.iter().filter(|l| *l == "finished r").count(),
        2
    );
}

fn finalization_waits_for_staged_promotions(wrap: Wrap) {
    let m = model_manager(8, vllm());
    let (t, s) = TestTier::new("t");
    m.add_tier(wrap(t)).unwrap();
    s.lock().stored.insert(k(5));
    let r = start(&m, "r");
    assert_eq!(m.lookup(r, &k(5)).unwrap(), LookupResult::Retry);
    m.request_finished(r).unwrap();
    assert!(!s.lock().log.iter().any(|l| l == "finished r"));
    m.schedule_end().unwrap();
    let log = s.lock().log.clone();
    let load = log.iter().position(|l| l.starts_with("load")).unwrap();
    let fin = log.iter().position(|l| l == "finished r").unwrap();
    assert!(load < fin, "load submitted before finalization: {log:?}");
}

fn request_level_cascades_resident_ready_keys_and_parks_write_pending_ones(wrap: Wrap) {
    let m = model_manager(16, vllm());
    let (t, s) = TestTier::new("rl");
    m.add_tier(wrap(t)).unwrap();
    s.lock().policy = Some(OffloadPolicy::RequestLevel);
    s.lock().auto_finish = false;
    let a = m.request_begin("a", RequestParams::default()).unwrap();
    let b = m.request_begin("b", RequestParams::default()).unwrap();
    assert_eq!(a.policy, OffloadPolicy::RequestLevel);
    assert_eq!(b.policy, OffloadPolicy::RequestLevel);
    let (a, b) = (a.id, b.id);
    store(&m, a, &keys(0..2)); // ready, cascaded (block-level path)
    let mut plan_a = StorePlan::default();
    m.prepare_store(a, &[k(7)], &mut plan_a).unwrap(); // k7 write pending
    let before = s.lock().submitted.len();
    let mut plan = StorePlan::default();
    m.prepare_store(b, &[k(0), k(1), k(7), k(9)], &mut plan)
        .unwrap();
    assert_eq!(plan.to_store, vec![k(9)]);
    {
        let sc = s.lock();
        assert_eq!(
            sc.submitted.len(),
            before + 1,
            "resident ready keys cascaded at once"
        );
        assert_eq!(sc.submitted.last().unwrap().keys, vec![k(0), k(1)]);
        assert_eq!(sc.submitted.last().unwrap().request.name, "b");
    }
    assert_eq!(model_refs(&m, &k(0)), Some(2), "pinned by both cascades");
    m.request_finished(b).unwrap();
    m.complete_store(b, &[k(9)], true).unwrap();
    assert!(
        !s.lock().log.iter().any(|l| l == "finished b"),
        "k7 still parked"
    );
    assert!(m.has_pending_work().unwrap());
    m.complete_store(a, &[k(7)], true).unwrap();
    m.schedule_end().unwrap();
    let sc = s.lock();
    let last = sc.submitted.last().unwrap();
    assert_eq!(
        (last.keys.clone(), last.request.name.as_str()),
        (vec![k(7)], "b"),
        "parked key cascaded when ready"
    );
    assert!(sc.log.iter().any(|l| l == "finished b"));
}

fn parked_key_whose_write_failed_is_dropped(wrap: Wrap) {
    let m = model_manager(16, vllm());
    let (t, s) = TestTier::new("rl");
    m.add_tier(wrap(t)).unwrap();
    s.lock().policy = Some(OffloadPolicy::RequestLevel);
    let a = start(&m, "a");
    let b = start(&m, "b");
    let mut plan = StorePlan::default();
    m.prepare_store(a, &[k(1)], &mut plan).unwrap();
    m.prepare_store(b, &[k(1)], &mut plan).unwrap();
    m.complete_store(a, &[k(1)], false).unwrap();
    m.request_finished(b).unwrap();
    m.schedule_end().unwrap();
    assert_eq!(stat(&m, None, "parked_keys_dropped"), 1.0);
    assert!(s.lock().log.iter().any(|l| l == "finished b"));
    assert!(!m.has_pending_work().unwrap());
}

fn partial_promotion_and_bad_lists(wrap: Wrap) {
    let m = model_manager(8, vllm());
    let (t, s) = TestTier::new("t");
    m.add_tier(wrap(t)).unwrap();
    s.lock().stored.extend(keys(0..3));
    s.lock().auto_finish = false;
    let r = start(&m, "r");
    for i in 0..3 {
        m.lookup(r, &k(i)).unwrap();
    }
    m.schedule_end().unwrap();
    let id = s.lock().held[0].id;
    s.lock().held.clear();
    s.lock().ready.push(JobResult {
        succeeded_keys: Some(vec![k(0), k(2)]),
        ..JobResult::new(id, false)
    });
    m.schedule_end().unwrap();
    assert_eq!(model_refs(&m, &k(0)), Some(0));
    assert_eq!(model_refs(&m, &k(1)), None, "the rest dropped");
    assert_eq!(model_refs(&m, &k(2)), Some(0));
    assert_eq!(stat(&m, Some(1), "partial_promotions"), 1.0);

    // a list naming a key not in the job: the whole job fails, logged as a tier bug
    m.lookup(r, &k(1)).unwrap();
    m.schedule_end().unwrap();
    let id = s.lock().held[0].id;
    s.lock().held.clear();
    s.lock().ready.push(JobResult {
        succeeded_keys: Some(vec![k(1), k(99)]),
        ..JobResult::new(id, false)
    });
    m.schedule_end().unwrap();
    assert_eq!(model_refs(&m, &k(1)), None);
    assert_eq!(stat(&m, Some(1), "tier_bugs"), 1.0);
    // a success is a success whatever keys it lists
    m.lookup(r, &k(1)).unwrap();
    m.schedule_end().unwrap();
    let id = s.lock().held[0].id;
    s.lock().held.clear();
    s.lock().ready.push(JobResult {
        succeeded_keys: Some(vec![k(42)]),
        ..JobResult::new(id, true)
    });
    m.schedule_end().unwrap();
    assert_eq!(model_refs(&m, &k(1)), Some(0));
    let mut errs = Vec::new();
    m.take_errors(&mut errs).unwrap();
    assert_eq!(errs.len(), 1);
    assert!(errs[0].contains("not in the job"), "{errs:?}");
}

fn unknown_and_repeated_job_ids_are_logged_tier_bugs(wrap: Wrap) {
    let m = model_manager(8, vllm());
    let (t1, s1) = TestTier::new("one");
    let (t2, s2) = TestTier::new("two");
    m.add_tier(wrap(t1)).unwrap();
    m.add_tier(wrap(t2)).unwrap();
    s2.lock().auto_finish = false;
    let r = start(&m, "r");
    store(&m, r, &[k(1)]);
    m.schedule_end().unwrap();
    let done = s1.lock().submitted[0].id;
    let other = s2.lock().submitted[0].id;
    s1.lock().ready.push(JobResult::new(done, true)); // twice
    s1.lock()
        .ready
        .push(JobResult::new(kvtier_core::tiering::JobId(777), true)); // never given
    s1.lock().ready.push(JobResult::new(other, true)); // another tier's
    m.schedule_end().unwrap();
    assert_eq!(stat(&m, Some(1), "tier_bugs"), 3.0);
    assert_eq!(stat(&m, None, "tier_bugs"), 3.0);
    assert_eq!(
        model_refs(&m, &k(1)),
        Some(1),
        "tier two's job still holds its pin"
    );
    let mut errs = Vec::new();
    m.take_errors(&mut errs).unwrap();
    assert_eq!(errs.len(), 3);
    assert!(
        errs[0].contains("unknown job") && errs[0].contains("\"one\""),
        "{errs:?}"
    );
    assert!(errs[2].contains("belongs to tier \"two\""), "{errs:?}");
    s2.lock().finish_all(true);
    m.schedule_end().unwrap();
    assert_eq!(model_refs(&m, &k(1)), Some(0));
}

fn complete_job_from_another_thread(wrap: Wrap) {
    let m = model_manager(8, vllm());
    let m = Arc::new(m);
    let (t, s) = TestTier::new("t");
    let idx = m.add_tier(wrap(t)).unwrap();
    s.lock().auto_finish = false;
    let r = start(&m, "r");
    store(&m, r, &keys(0..4));
    let id = s.lock().held.pop().unwrap().id;
    let m2 = m.clone();
    std::thread::spawn(move || m2.complete_job(idx, JobResult::new(id, true)).unwrap())
        .join()
        .unwrap();
    assert!(m.has_pending_work().unwrap());
    collect(&m);
    assert_eq!(model_refs(&m, &k(0)), Some(0));
    assert!(matches!(
        m.complete_job(0, JobResult::new(id, true)),
        Err(Error::InvalidArgument(_))
    ));
    assert!(matches!(
        m.complete_job(2, JobResult::new(id, true)),
        Err(Error::InvalidArgument(_))
    ));
}

fn reset_cache_semantics_and_promotion_hold(wrap: Wrap) {
    let m = model_manager(8, vllm());
    let (t, s) = TestTier::new("t");
    m.add_tier(wrap(t)).unwrap();
    s.lock().stored.insert(k(50));
    let live = start(&m, "live");
    let done = start(&m, "done");
    let mut plan = StorePlan::default();
    m.prepare_store(done, &[k(1)], &mut plan).unwrap();
    m.request_finished(done).unwrap();
    m.prepare_store(live, &[k(2)], &mut plan).unwrap();
    assert_eq!(m.lookup(live, &k(50)).unwrap(), LookupResult::Retry); // staged
    m.reset_cache().unwrap();
    {
        let sc = s.lock();
        assert_eq!(sc.drains, 1);
        assert!(
            !sc.log.iter().any(|l| l.starts_with("load")),
            "staged promotion dropped"
        );
        assert!(
            sc.log.iter().any(|l| l == "finished done"),
            "finished request finalized"
        );
        assert!(sc.stored.contains(&k(50)), "secondary data kept");
    }
    assert_eq!(
        with_model(&m, |model| model.entries.len()),
        0,
        "primary reset"
    );
    // the live request keeps its state; its store count was cleared
    let late = m.complete_store(live, &[k(2)], true);
    assert!(ignored_keys(&late), "{late:?}");
    assert_eq!(report_of(late), Default::default());
    assert_eq!(stat(&m, None, "ignored_store_completions"), 1.0);
    // promotions held until reset_flushed
    assert_eq!(m.lookup(live, &k(50)).unwrap(), LookupResult::Miss);
    assert_eq!(stat(&m, None, "held_misses"), 1.0);
    m.schedule_end().unwrap();
    m.reset_flushed().unwrap();
    assert_eq!(m.lookup(live, &k(50)).unwrap(), LookupResult::Retry);
    let mut ev = Vec::new();
    m.take_events(&mut ev).unwrap();
    assert!(
        ev.iter()
            .any(|e| e.tier == 0 && e.event.kind == EventKind::Cleared)
    );
    m.request_finished(live).unwrap();
    m.schedule_end().unwrap();
    assert!(s.lock().log.iter().any(|l| l == "finished live"));
}

#[test]
fn reset_without_secondary_tiers_does_not_hold() {
    let m = model_manager(4, vllm());
    let r = start(&m, "r");
    store(&m, r, &[k(1)]);
    m.reset_cache().unwrap();
    assert_eq!(stat(&m, None, "promotions_held"), 0.0);
    assert_eq!(m.lookup(r, &k(1)).unwrap(), LookupResult::Miss);
}

#[test]
fn slot_memory_with_fewer_slots_than_the_primary_tier_is_refused_everywhere() {
    use kvtier_core::region::SlotMemory;
    use kvtier_core::tiers::fs::{FsOptions, FsTier};
    let m = model_manager(8, vllm());
    let small = SlotMemory::anonymous(4, 4096).unwrap();
    let e = m.set_slot_memory(small.clone()).unwrap_err();
    assert!(matches!(e, Error::InvalidArgument(_)), "{e}");
    assert!(
        e.to_string().contains("4 slots") && e.to_string().contains("8"),
        "{e}"
    );
    assert!(m.slot_memory().is_none());
    assert!(matches!(
        m.attach_region(small.clone()),
        Err(Error::InvalidArgument(_))
    ));
    assert!(m.check_slots(&small).is_err());
    // A tier copying through too few slots is refused when added.
    let dir = tempfile::tempdir().unwrap();
    let mut o = FsOptions::new(dir.path());
    o.read_threads = 1;
    o.write_threads = 1;
    let tier = FsTier::open(small, o.clone()).unwrap();
    let e = m.add_tier(Box::new(tier)).unwrap_err();
    assert!(e.to_string().contains("tier \"fs\""), "{e}");
    assert_eq!(m.tier_count(), 0);
    // As many slots as the primary tier, or more, are accepted.
    let big = SlotMemory::anonymous(16, 4096).unwrap();
    m.set_slot_memory(big.clone()).unwrap();
    m.attach_region(big.clone()).unwrap();
    m.add_tier(Box::new(FsTier::open(big, o).unwrap())).unwrap();
    m.shutdown().unwrap();
}

fn job_never_finished_blocks_nothing_but_is_reported_at_reset(wrap: Wrap) {
    let m = model_manager(4, vllm());
    let (t, s) = TestTier::new("stuck");
    m.add_tier(wrap(t)).unwrap();
    s.lock().auto_finish = false;
    let r = start(&m, "r");
    store(&m, r, &[k(1)]);
    for _ in 0..3 {
        m.schedule_end().unwrap();
    }
    assert!(m.has_pending_work().unwrap());
    assert_eq!(model_refs(&m, &k(1)), Some(1));
    m.reset_cache().unwrap();
    let mut errs = Vec::new();
    m.take_errors(&mut errs).unwrap();
    assert!(
        errs.iter().any(|e| e.contains("not reported after drain")),
        "{errs:?}"
    );
    // its late completion is ignored: the slots belong to the new epoch
    store(&m, r, &[k(2)]);
    s.lock().finish_all(true);
    collect(&m);
    assert_eq!(stat(&m, None, "stale_completions"), 1.0);
    assert_eq!(model_refs(&m, &k(2)), Some(0));
}

fn every_job_failing_leaks_no_slot(wrap: Wrap) {
    let m = model_manager(4, vllm());
    let (t, s) = TestTier::new("bad");
    m.add_tier(wrap(t)).unwrap();
    s.lock().fail_all = true;
    s.lock().stored.extend(keys(100..104));
    let r = start(&m, "r");
    for round in 0..5u32 {
        store(&m, r, &[k(round)]);
        m.lookup(r, &k(100 + round % 4)).unwrap();
        m.schedule_end().unwrap();
        m.schedule_end().unwrap();
    }
    with_model(&m, |model| {
        assert!(
            model.entries.values().all(|e| e.refs == 0),
            "{:?}",
            model.entries
        );
        model.check().unwrap();
    });
}

fn back_pressure_drops_cascades_not_loads_and_reset_clears_it(wrap: Wrap) {
    let m = model_manager(32, vllm());
    let (t, s) = TestTier::new("slow");
    let bp = BackpressureConfig {
        max_consecutive_failures: 2,
        policy: PressurePolicy::Drop,
        ..Default::default()
    };
    m.add_tier_with(
        wrap(t),
        TierOptions {
            backpressure: Some(bp),
            ..Default::default()
        },
    )
    .unwrap();
    s.lock().fail_all = true;
    let r = start(&m, "r");
    store(&m, r, &[k(1)]);
    store(&m, r, &[k(2)]);
    collect(&m); // both failures collected
    assert_eq!(stat(&m, Some(1), "under_pressure"), 1.0);
    store(&m, r, &keys(3..6));
    assert_eq!(stat(&m, Some(1), "dropped_cascade_jobs"), 1.0);
    assert_eq!(stat(&m, Some(1), "dropped_cascade_blocks"), 3.0);
    // loads are never dropped
    s.lock().stored.insert(k(77));
    s.lock().fail_all = false;
    m.lookup(r, &k(77)).unwrap();
    m.schedule_end().unwrap();
    assert_eq!(stat(&m, Some(1), "promotion_jobs"), 1.0);
    m.reset_cache().unwrap();
    assert_eq!(stat(&m, Some(1), "under_pressure"), 0.0);
}

fn back_pressure_throttle_admits_one_store_at_a_time(wrap: Wrap) {
    let m = model_manager(32, vllm());
    let (t, s) = TestTier::new("slow");
    let bp = BackpressureConfig {
        max_consecutive_failures: 1,
        policy: PressurePolicy::Throttle,
        ..Default::default()
    };
    m.add_tier_with(
        wrap(t),
        TierOptions {
            backpressure: Some(bp),
            ..Default::default()
        },
    )
    .unwrap();
    s.lock().fail_all = true;
    let r = start(&m, "r");
    store(&m, r, &[k(1)]);
    m.schedule_end().unwrap();
    s.lock().auto_finish = false;
    store(&m, r, &[k(2)]); // admitted: nothing in flight
    store(&m, r, &[k(3)]); // dropped: one in flight
    assert_eq!(stat(&m, Some(1), "cascade_jobs"), 2.0);
    assert_eq!(stat(&m, Some(1), "dropped_cascade_jobs"), 1.0);
}

fn back_pressure_with_drop_makes_the_tier_not_ready(wrap: Wrap) {
    for policy in [PressurePolicy::Drop, PressurePolicy::Throttle] {
        let m = model_manager(32, vllm());
        let (t, s) = TestTier::new("slow");
        let bp = BackpressureConfig {
            max_consecutive_failures: 1,
            policy,
            ..Default::default()
        };
        m.add_tier_with(
            wrap(t),
            TierOptions {
                backpressure: Some(bp),
                ..Default::default()
            },
        )
        .unwrap();
        assert!(m.readiness().unwrap().is_ready());
        s.lock().fail_all = true;
        let r = start(&m, "r");
        store(&m, r, &[k(1)]);
        collect(&m); // the failure collected
        assert_eq!(stat(&m, Some(1), "under_pressure"), 1.0);
        let reasons = m.readiness().unwrap().reasons;
        if policy == PressurePolicy::Drop {
            assert_eq!(
                reasons,
                ["tier 1 (slow): under back-pressure, cascades to it are dropped"]
            );
        } else {
            assert!(
                reasons.is_empty(),
                "a throttled tier still takes stores: {reasons:?}"
            );
        }
    }
}

fn tier_filter_affects_lookups_only(wrap: Wrap) {
    let m = model_manager(8, vllm());
    let (t, s) = TestTier::new("disk");
    s.lock().medium = Some(Medium::Storage);
    m.add_tier(wrap(t)).unwrap();
    s.lock().stored.insert(k(9));
    let only_cpu = TierFilter::Only(vec![TierMatcher {
        medium: Some(Medium::Cpu),
        locality: None,
    }]);
    let f = m
        .request_begin(
            "f",
            RequestParams {
                filter: only_cpu,
                ..Default::default()
            },
        )
        .unwrap()
        .id;
    let none = m
        .request_begin(
            "none",
            RequestParams {
                filter: TierFilter::Only(vec![]),
                ..Default::default()
            },
        )
        .unwrap()
        .id;
    let all = start(&m, "all");
    assert_eq!(m.lookup(f, &k(9)).unwrap(), LookupResult::Miss);
    assert_eq!(m.lookup(none, &k(9)).unwrap(), LookupResult::Miss);
    assert_eq!(s.lock().lookups, 0);
    store(&m, f, &[k(1)]);
    assert_eq!(s.lock().submitted.len(), 1, "cascades ignore the filter");
    assert_eq!(m.lookup(all, &k(9)).unwrap(), LookupResult::Retry);
}

fn reentrant_call_from_a_tier_is_an_error_not_a_deadlock(wrap: Wrap) {
    let m = model_manager(8, vllm());
    let m = Arc::new(m);
    let (t, s) = TestTier::new("t");
    m.add_tier(wrap(t)).unwrap();
    let seen = Arc::new(Mutex::new(None));
    let r = start(&m, "r");
    let (weak, seen2) = (Arc::downgrade(&m), seen.clone());
    s.lock().on_lookup = Some(Box::new(move || {
        let m = weak.upgrade().unwrap();
        *seen2.lock() = Some(m.lookup(r, &k(1)).map_err(|e| e.to_string()));
        // the thread-safe completion call is allowed from a callback
        assert!(
            m.complete_job(1, JobResult::new(kvtier_core::tiering::JobId(5), true))
                .is_ok()
        );
    }));
    assert_eq!(m.lookup(r, &k(1)).unwrap(), LookupResult::Miss);
    let got = seen.lock().take().unwrap();
    assert!(
        matches!(&got, Err(e) if e.contains("re-entrant")),
        "{got:?}"
    );
    // the manager is still usable from this thread and others
    s.lock().on_lookup = None;
    collect(&m);
    assert_eq!(stat(&m, Some(1), "tier_bugs"), 1.0, "job 5 was never given");
}

fn events_are_labelled_and_tiers_own_theirs(wrap: Wrap) {
    let m = model_manager(1, vllm());
    let (t, s) = TestTier::new("t");
    m.add_tier(wrap(t)).unwrap();
    let r = start(&m, "r");
    store(&m, r, &[k(1)]);
    m.schedule_end().unwrap();
    m.schedule_end().unwrap();
    store(&m, r, &[k(2)]); // evicts k1
    s.lock().events.push(kvtier_core::events::Event {
        kind: EventKind::Stored,
        key: Some(k(1)),
    });
    let mut got = Vec::new();
    // Batches: (0, stored k1), (0, removed k1), then the rest.
    let (n, more) = m
        .take_event_batches(2, |t| {
            for b in t.batches {
                for key in t.keys_of(b) {
                    got.push(kvtier_core::tiering::TierEvent {
                        tier: b.tier,
                        event: kvtier_core::events::Event {
                            kind: b.kind,
                            key: Some(*key),
                        },
                    });
                }
            }
            (t.batches.len(), t.more)
        })
        .unwrap();
    assert_eq!((n, more), (2, true));
    m.take_events(&mut got).unwrap();
    let kinds: Vec<(usize, EventKind)> = got.iter().map(|e| (e.tier, e.event.kind)).collect();
    assert_eq!(
        kinds,
        vec![
            (0, EventKind::Stored),
            (0, EventKind::Removed),
            (0, EventKind::Stored),
            (1, EventKind::Stored)
        ]
    );
}

fn shutdown_tries_every_tier_and_keeps_the_region_if_one_failed(wrap: Wrap) {
    struct Flag(Arc<Mutex<bool>>);
    impl Drop for Flag {
        fn drop(&mut self) {
            *self.0.lock() = true;
        }
    }
    impl kvtier_core::region::SlotOwner for Flag {
        fn slot_count(&self) -> u32 {
            4
        }
    }
    let m = model_manager(4, vllm());
    let (t1, s1) = TestTier::new("one");
    let (t2, s2) = TestTier::new("two");
    m.add_tier(wrap(t1)).unwrap();
    m.add_tier(wrap(t2)).unwrap();
    s1.lock().fail_shutdown = true;
    let released = Arc::new(Mutex::new(false));
    m.attach_region(Flag(released.clone())).unwrap();
    let e = m.shutdown().unwrap_err().to_string();
    assert!(e.contains("one") && e.contains("stays mapped"), "{e}");
    assert_eq!(s2.lock().shutdowns, 1, "every tier gets a try");
    assert!(matches!(
        m.lookup(RequestId(1), &k(1)),
        Err(Error::Closed(_))
    ));
    drop(m);
    assert!(
        !*released.lock(),
        "region kept mapped after a failed shutdown"
    );

    let m = model_manager(4, vllm());
    let released = Arc::new(Mutex::new(false));
    m.attach_region(Flag(released.clone())).unwrap();
    m.shutdown().unwrap();
    assert!(*released.lock());
}

fn misuse_is_an_error_with_no_side_effect(wrap: Wrap) {
    let m = model_manager(4, vllm());
    let (t, s) = TestTier::new("t");
    m.add_tier(wrap(t)).unwrap();
    let nope = RequestId(1);
    assert!(matches!(
        m.lookup(nope, &k(1)),
        Err(Error::UnknownRequest(_))
    ));
    let mut plan = StorePlan::default();
    assert!(matches!(
        m.prepare_store(nope, &[k(1)], &mut plan),
        Err(Error::UnknownRequest(_))
    ));
    assert_eq!(
        with_model(&m, |model| model.entries.len()),
        0,
        "no slot allocated for an unknown request"
    );
    let r = start(&m, "r");
    assert_eq!(r, nope, "the first handle is 1");
    assert!(matches!(
        m.request_begin("r", RequestParams::default()),
        Err(Error::DuplicateRequest(_))
    ));
    assert!(matches!(
        m.prepare_load(r, &[k(1)], &mut Vec::new()),
        Err(Error::KeyState { .. })
    ));
    let (t2, _) = TestTier::new("late");
    assert!(matches!(
        m.add_tier(wrap(t2)),
        Err(Error::InvalidArgument(_))
    ));
    m.request_finished(r).unwrap();
    assert!(matches!(
        m.request_finished(r),
        Err(Error::UnknownRequest(_))
    ));
    assert_eq!(
        s.lock().log.iter().filter(|l| *l == "finished r").count(),
        1
    );
}

fn touch_reaches_every_tier_and_has_pending_work_sees_tiers(wrap: Wrap) {
    let m = model_manager(4, vllm());
    let (t, s) = TestTier::new("t");
    m.add_tier(wrap(t)).unwrap();
    let r = start(&m, "r");
    m.touch(r, &[k(1)]).unwrap();
    assert_eq!(s.lock().touches, 1);
    assert!(!m.has_pending_work().unwrap());
    s.lock()
        .ready
        .push(JobResult::new(kvtier_core::tiering::JobId(3), true));
    assert!(m.has_pending_work().unwrap(), "the tier says so");
    m.schedule_end().unwrap();
    assert_eq!(s.lock().schedule_ends, 1);
}

/// Position of the first log line equal to `what` at or after `from`.
fn at(log: &[String], from: usize, what: &str) -> usize {
    log[from..]
        .iter()
        .position(|l| l == what || l.starts_with(&format!("{what} ")))
        .map(|p| p + from)
        .unwrap_or_else(|| panic!("no {what:?} after {from} in {log:?}"))
}

fn polling_gate_prepare_load_polls_first_and_other_calls_never_poll(wrap: Wrap) {
    let m = model_manager(8, vllm());
    let (t, s) = TestTier::new("t");
    m.add_tier(wrap(t)).unwrap();
    let r = start(&m, "r");
    m.prepare_load(r, &[], &mut Vec::new()).unwrap();
    assert_eq!(s.lock().polls, 1, "prepare_load first in the step polls");
    m.lookup(r, &k(1)).unwrap();
    assert_eq!(s.lock().polls, 1, "gate spent by prepare_load");
    m.schedule_end().unwrap();
    assert_eq!(
        s.lock().polls,
        1,
        "gate spent: on_schedule_end does not poll"
    );
    // the gate is armed now: none of these may spend it or poll
    m.touch(r, &[]).unwrap();
    m.complete_load(r, &[]).unwrap();
    m.has_pending_work().unwrap();
    m.stats().unwrap();
    m.take_events(&mut Vec::new()).unwrap();
    let q = start(&m, "q");
    m.request_finished(q).unwrap();
    assert_eq!(
        s.lock().polls,
        1,
        "only lookup, prepare_load, prepare_store and on_schedule_end poll"
    );
    m.lookup(r, &k(1)).unwrap();
    assert_eq!(s.lock().polls, 2, "the gate was still armed");
    // reset_cache collects unconditionally and re-arms the gate
    m.reset_cache().unwrap();
    assert_eq!(s.lock().polls, 3);
    m.prepare_load(r, &[], &mut Vec::new()).unwrap();
    assert_eq!(s.lock().polls, 4, "gate re-armed by reset_cache");
}

fn on_schedule_end_order_of_work(wrap: Wrap) {
    let m = model_manager(16, vllm());
    let (t, s) = TestTier::new("rl");
    m.add_tier(wrap(t)).unwrap();
    s.lock().policy = Some(OffloadPolicy::RequestLevel);
    s.lock().auto_finish = false;
    s.lock().stored.extend([k(50), k(60), k(70)]);
    let a = start(&m, "a");
    let b = start(&m, "b");
    // step 1: a promotes k50
    m.lookup(a, &k(50)).unwrap();
    m.schedule_end().unwrap();
    // step 2: b names k50 (write pending): parked; b finishes, waiting on it
    let mut plan = StorePlan::default();
    m.prepare_store(b, &[k(50)], &mut plan).unwrap();
    assert!(plan.to_store.is_empty());
    m.request_finished(b).unwrap();
    m.schedule_end().unwrap();
    s.lock().finish_all(true); // the promotion of k50 is done
    // step 3, nothing else called: the end-of-step poll must come before
    // the parked retry, which must come before finalization, before the
    // tiers hear of the step end
    let mark = s.lock().log.len();
    m.schedule_end().unwrap();
    {
        let log = s.lock().log.clone();
        let poll = at(&log, mark, "poll");
        let store = at(&log, mark, "store");
        let fin = at(&log, mark, "finished b");
        let end = at(&log, mark, "end");
        assert!(
            poll < store && store < fin && fin < end,
            "{:?}",
            &log[mark..]
        );
        assert!(log[store].ends_with(" b"), "{}", log[store]);
    }
    // step 4: c promotes k60 (staged) and parks k70 behind a's promotion
    let c = start(&m, "c");
    m.lookup(a, &k(70)).unwrap();
    m.schedule_end().unwrap();
    m.prepare_store(c, &[k(70)], &mut plan).unwrap();
    m.schedule_end().unwrap();
    s.lock().finish_all(true);
    let mark = s.lock().log.len();
    m.lookup(c, &k(60)).unwrap(); // polls (k70 ready) and stages k60
    m.request_finished(c).unwrap();
    m.schedule_end().unwrap();
    let log = s.lock().log.clone();
    let load = at(&log, mark, "load");
    let store = at(&log, mark, "store");
    let fin = at(&log, mark, "finished c");
    let end = at(&log, mark, "end");
    assert!(
        load < store && store < fin && fin < end,
        "staged loads, then parked cascades, then finalization, then the tiers: {:?}",
        &log[mark..]
    );
}

fn retry_from_one_tier_and_hit_from_a_later_one(wrap: Wrap) {
    let m = model_manager(1, vllm());
    let (t1, s1) = TestTier::new("busy");
    let (t2, s2) = TestTier::new("has");
    let (t3, s3) = TestTier::new("last");
    m.add_tier(wrap(t1)).unwrap();
    m.add_tier(wrap(t2)).unwrap();
    m.add_tier(wrap(t3)).unwrap();
    s1.lock().retry_lookups = true;
    s2.lock().stored.insert(k(1));
    s2.lock().stored.insert(k(2));
    s2.lock().auto_finish = false;
    s3.lock().retry_lookups = true;
    let r = start(&m, "r");
    assert_eq!(
        m.lookup(r, &k(1)).unwrap(),
        LookupResult::Retry,
        "a RETRY before the HIT does not stop the search"
    );
    assert_eq!(s3.lock().lookups, 0, "the first HIT ends the search");
    m.schedule_end().unwrap();
    assert!(s1.lock().submitted.is_empty());
    assert_eq!(
        s2.lock().submitted.len(),
        1,
        "promoted from the tier that hit"
    );
    assert_eq!(stat(&m, Some(1), "retries"), 1.0);
    assert_eq!(stat(&m, Some(2), "hits"), 1.0);
    // the only slot holds k1, write pending: a HIT that cannot be promoted is
    // a MISS, even though other tiers answered RETRY
    assert_eq!(m.lookup(r, &k(2)).unwrap(), LookupResult::Miss);
    assert_eq!(s3.lock().lookups, 0);
    // no HIT anywhere, one RETRY: RETRY
    assert_eq!(m.lookup(r, &k(3)).unwrap(), LookupResult::Retry);
    assert_eq!(s3.lock().lookups, 1, "every tier asked when none hits");
}

fn tier_filter_unset_fields_and_undeclared_tiers_match(wrap: Wrap) {
    use kvtier_core::request::Locality;
    let m = model_manager(8, vllm());
    let mut scripts = Vec::new();
    for (name, medium, locality) in [
        ("any", None, None),
        ("ssd", Some(Medium::Storage), Some(Locality::Local)),
        ("net", Some(Medium::Storage), Some(Locality::Remote)),
        ("cpu", Some(Medium::Cpu), None),
    ] {
        let (t, s) = TestTier::new(name);
        s.lock().medium = medium;
        s.lock().locality = locality;
        m.add_tier(wrap(t)).unwrap();
        scripts.push(s);
    }
    let matcher = |medium, locality| TierMatcher { medium, locality };
    let cases: Vec<(TierFilter, [u32; 4])> = vec![
        (TierFilter::All, [1, 1, 1, 1]),
        (TierFilter::Only(vec![matcher(None, None)]), [1, 1, 1, 1]),
        (
            TierFilter::Only(vec![matcher(None, Some(Locality::Local))]),
            [1, 1, 0, 1],
        ),
        (
            TierFilter::Only(vec![matcher(Some(Medium::Cpu), None)]),
            [1, 0, 0, 1],
        ),
        (
            TierFilter::Only(vec![matcher(Some(Medium::Storage), Some(Locality::Remote))]),
            [1, 0, 1, 0],
        ),
        (
            TierFilter::Only(vec![
                matcher(Some(Medium::Cpu), Some(Locality::Local)),
                matcher(None, Some(Locality::Remote)),
            ]),
            [1, 0, 1, 1],
        ),
        (TierFilter::Only(vec![]), [0, 0, 0, 0]),
    ];
    for (i, (filter, want)) in cases.into_iter().enumerate() {
        let name = format!("r{i}");
        let r = m
            .request_begin(
                &name,
                RequestParams {
                    filter: filter.clone(),
                    ..Default::default()
                },
            )
            .unwrap()
            .id;
        let before: Vec<u32> = scripts.iter().map(|s| s.lock().lookups).collect();
        assert_eq!(m.lookup(r, &k(1)).unwrap(), LookupResult::Miss);
        let asked: Vec<u32> = scripts
            .iter()
            .zip(&before)
            .map(|(s, b)| s.lock().lookups - b)
            .collect();
        assert_eq!(asked, want.to_vec(), "filter {filter:?}");
    }
}

fn has_pending_work_sees_staged_promotions_and_parked_keys(wrap: Wrap) {
    let m = model_manager(8, vllm());
    let (t, s) = TestTier::new("rl");
    m.add_tier(wrap(t)).unwrap();
    s.lock().policy = Some(OffloadPolicy::RequestLevel);
    s.lock().stored.insert(k(9));
    let a = start(&m, "a");
    let b = start(&m, "b");
    assert!(!m.has_pending_work().unwrap());
    m.lookup(a, &k(9)).unwrap();
    assert!(m.has_pending_work().unwrap(), "a staged promotion");
    collect(&m);
    assert!(!m.has_pending_work().unwrap());
    let mut plan = StorePlan::default();
    m.prepare_store(a, &[k(1)], &mut plan).unwrap();
    m.prepare_store(b, &[k(1)], &mut plan).unwrap(); // k1 parked for b
    assert!(s.lock().held.is_empty() && s.lock().ready.is_empty());
    assert!(m.has_pending_work().unwrap(), "a parked key");
    m.complete_store(a, &[k(1)], true).unwrap();
    collect(&m);
    collect(&m);
    assert!(!m.has_pending_work().unwrap());
}

fn reset_cache_drains_then_collects_and_a_failed_drain_resets_nothing(wrap: Wrap) {
    let m = model_manager(8, vllm());
    let (t, s) = TestTier::new("t");
    m.add_tier(wrap(t)).unwrap();
    s.lock().auto_finish = false;
    s.lock().stored.insert(k(40));
    let r = start(&m, "r");
    store(&m, r, &[k(1)]);
    assert_eq!(model_refs(&m, &k(1)), Some(1));
    s.lock().fail_drain = true;
    assert!(m.reset_cache().is_err());
    assert_eq!(model_refs(&m, &k(1)), Some(1), "nothing reset");
    assert_eq!(stat(&m, None, "promotions_held"), 0.0);
    assert_eq!(stat(&m, None, "resets"), 0.0);
    s.lock().fail_drain = false;
    s.lock().finish_on_drain = true;
    let mark = s.lock().log.len();
    m.reset_cache().unwrap();
    {
        let log = s.lock().log.clone();
        assert!(at(&log, mark, "drain") < at(&log, mark, "poll"), "{log:?}");
    }
    let mut errs = Vec::new();
    m.take_errors(&mut errs).unwrap();
    assert!(
        !errs.iter().any(|e| e.contains("not reported")),
        "jobs finished by the drain are collected: {errs:?}"
    );
    assert_eq!(stat(&m, None, "jobs_in_flight"), 0.0);
    assert_eq!(stat(&m, None, "stale_completions"), 0.0);
    // held: a key absent from the primary tier is a MISS without asking the tier
    let asked = s.lock().lookups;
    assert_eq!(m.lookup(r, &k(40)).unwrap(), LookupResult::Miss);
    assert_eq!(s.lock().lookups, asked, "tiers not asked while held");
    m.reset_flushed().unwrap();
    assert_eq!(m.lookup(r, &k(40)).unwrap(), LookupResult::Retry);
}

fn a_tier_with_more_finished_jobs_than_one_poll_takes_reports_them_over_several(wrap: Wrap) {
    let max = kvtier_core::tiering::MAX_FINISHED_PER_POLL;
    let n = max as u32 + 76;
    let m = model_manager(2 * n, vllm());
    let (t, s) = TestTier::new("t");
    m.add_tier(wrap(t)).unwrap();
    s.lock().auto_finish = false;
    let r = start(&m, "r");
    for i in 0..n {
        store(&m, r, &[k(i)]);
    }
    s.lock().finish_all(true);
    collect(&m);
    assert_eq!(stat(&m, Some(1), "poll_limit_reached"), 1.0);
    assert_eq!(stat(&m, None, "jobs_in_flight"), 76.0, "the rest wait");
    m.schedule_end().unwrap();
    assert_eq!(stat(&m, None, "jobs_in_flight"), 0.0);
    // A reset polls as often as the drained jobs need.
    for i in n..2 * n {
        store(&m, r, &[k(i)]);
    }
    s.lock().finish_on_drain = true;
    m.reset_cache().unwrap();
    assert_eq!(stat(&m, None, "jobs_in_flight"), 0.0);
    assert_eq!(stat(&m, Some(1), "tier_bugs"), 0.0);
    assert_eq!(stat(&m, Some(1), "poll_limit_reached"), 2.0);
}

fn back_pressure_drops_request_level_cascades_too(wrap: Wrap) {
    let m = model_manager(32, vllm());
    let (t, s) = TestTier::new("rl");
    let bp = BackpressureConfig {
        max_consecutive_failures: 1,
        policy: PressurePolicy::Drop,
        ..Default::default()
    };
    m.add_tier_with(
        wrap(t),
        TierOptions {
            backpressure: Some(bp),
            ..Default::default()
        },
    )
    .unwrap();
    s.lock().policy = Some(OffloadPolicy::RequestLevel);
    s.lock().fail_all = true;
    let a = start(&m, "a");
    let b = start(&m, "b");
    store(&m, a, &keys(0..2));
    collect(&m);
    assert_eq!(stat(&m, Some(1), "under_pressure"), 1.0);
    let jobs = s.lock().submitted.len();
    let mut plan = StorePlan::default();
    m.prepare_store(b, &keys(0..3), &mut plan).unwrap();
    assert_eq!(plan.to_store, vec![k(2)]);
    assert_eq!(
        s.lock().submitted.len(),
        jobs,
        "request-level cascade dropped"
    );
    assert_eq!(stat(&m, Some(1), "dropped_cascade_jobs"), 1.0);
    assert_eq!(stat(&m, Some(1), "dropped_cascade_blocks"), 2.0);
}

fn destroy_runs_once_after_the_last_callback(wrap: Wrap) {
    let m = model_manager(4, vllm());
    let (t, s) = TestTier::new("t");
    m.add_tier(wrap(t)).unwrap();
    let r = start(&m, "r");
    store(&m, r, &[k(1)]);
    drop(m);
    let log = s.lock().log.clone();
    assert_eq!(log.iter().filter(|l| *l == "dropped").count(), 1, "{log:?}");
    assert_eq!(log.last().map(String::as_str), Some("dropped"), "{log:?}");
    assert_eq!(log[log.len() - 2], "shutdown", "{log:?}");
}

fn complete_store_cascades_only_ready_keys(wrap: Wrap) {
    let m = model_manager(8, vllm());
    let (t1, s1) = TestTier::new("one");
    let (t2, s2) = TestTier::new("two");
    m.add_tier(wrap(t1)).unwrap();
    m.add_tier(wrap(t2)).unwrap();
    let r = start(&m, "r");
    let mut plan = StorePlan::default();
    m.prepare_store(r, &keys(0..3), &mut plan).unwrap();
    // k9 was never planned: absent from the primary tier, left alone
    let done = m.complete_store(r, &[k(0), k(1), k(2), k(9)], true);
    assert!(ignored_keys(&done), "{done:?}");
    let done = report_of(done);
    assert_eq!((done.ready, done.ignored), (3, 1));
    for s in [&s1, &s2] {
        let sc = s.lock();
        assert_eq!(sc.submitted.len(), 1, "one store job per tier");
        assert_eq!(sc.submitted[0].keys, keys(0..3));
    }
    assert_eq!(stat(&m, None, "internal_errors"), 0.0);
    let q = start(&m, "q");
    m.prepare_store(q, &keys(10..12), &mut plan).unwrap();
    let done = report_of(m.complete_store(q, &[k(10), k(11), k(12)], true));
    assert_eq!((done.ready, done.ignored), (2, 1), "k12 was never planned");
    assert_eq!(
        s1.lock().submitted[1].keys,
        keys(10..12),
        "a key absent from the primary tier is not cascaded"
    );
    let p = start(&m, "p");
    m.prepare_store(p, &[k(0), k(20)], &mut plan).unwrap();
    let done = report_of(m.complete_store(p, &[k(0), k(20)], true));
    assert_eq!((done.ready, done.already_ready), (1, 1), "k0 was ready");
    assert_eq!(
        s1.lock().submitted[2].keys,
        vec![k(20)],
        "only the keys this completion made ready are cascaded, not r's ready k0 again"
    );
    assert_eq!(stat(&m, None, "internal_errors"), 0.0);
}

fn request_level_duplicate_key_in_one_store_is_not_parked(wrap: Wrap) {
    let m = model_manager(8, vllm());
    let (t, s) = TestTier::new("rl");
    m.add_tier(wrap(t)).unwrap();
    s.lock().policy = Some(OffloadPolicy::RequestLevel);
    let a = start(&m, "a");
    let mut plan = StorePlan::default();
    m.prepare_store(a, &[k(1), k(2), k(1)], &mut plan).unwrap();
    assert_eq!(plan.to_store, vec![k(1), k(2)]);
    assert_eq!(
        stat(&m, None, "parked_keys"),
        0.0,
        "k1 was not resident before the call"
    );
    m.complete_store(a, &plan.to_store, true).unwrap();
    collect(&m);
    let sc = s.lock();
    let stored: Vec<_> = sc.submitted.iter().map(|j| j.keys.clone()).collect();
    assert_eq!(stored, vec![vec![k(1), k(2)]], "one cascade per key");
}

fn request_level_if_any_tier_asks_and_only_those_tiers_get_resident_keys(wrap: Wrap) {
    let m = model_manager(8, vllm());
    let (t1, s1) = TestTier::new("blk");
    let (t2, s2) = TestTier::new("rl");
    m.add_tier(wrap(t1)).unwrap();
    m.add_tier(wrap(t2)).unwrap();
    s2.lock().policy = Some(OffloadPolicy::RequestLevel);
    let a = m.request_begin("a", RequestParams::default()).unwrap();
    assert_eq!(
        a.policy,
        OffloadPolicy::RequestLevel,
        "any tier asking is enough"
    );
    let a = a.id;
    s2.lock().policy = None;
    let c = m.request_begin("c", RequestParams::default()).unwrap();
    assert_eq!(c.policy, OffloadPolicy::BlockLevel);
    let c = c.id;
    store(&m, a, &keys(0..2));
    let (n1, n2) = (s1.lock().submitted.len(), s2.lock().submitted.len());
    assert_eq!((n1, n2), (1, 1), "complete_store cascades to every tier");
    let b = start(&m, "b"); // asks again: block-level everywhere now
    let mut plan = StorePlan::default();
    m.prepare_store(a, &keys(0..3), &mut plan).unwrap();
    assert_eq!(
        s1.lock().submitted.len(),
        1,
        "the block-level tier gets no resident keys"
    );
    assert_eq!(s2.lock().submitted.len(), 2);
    assert_eq!(s2.lock().submitted[1].keys, keys(0..2));
    m.prepare_store(c, &keys(0..2), &mut plan).unwrap();
    m.prepare_store(b, &keys(0..2), &mut plan).unwrap();
    assert_eq!(
        s2.lock().submitted.len(),
        2,
        "the policy is per request, remembered at on_new_request"
    );
}

fn reset_cache_clears_parked_keys_and_finalizes_requests_waiting_on_them(wrap: Wrap) {
    let m = model_manager(8, vllm());
    let (t, s) = TestTier::new("rl");
    m.add_tier(wrap(t)).unwrap();
    s.lock().policy = Some(OffloadPolicy::RequestLevel);
    let a = start(&m, "a");
    let b = start(&m, "b");
    let mut plan = StorePlan::default();
    m.prepare_store(a, &[k(1)], &mut plan).unwrap();
    m.prepare_store(b, &[k(1)], &mut plan).unwrap(); // parked for b
    m.request_finished(b).unwrap();
    m.schedule_end().unwrap();
    assert!(!s.lock().log.iter().any(|l| l == "finished b"));
    m.reset_cache().unwrap();
    assert!(
        s.lock().log.iter().any(|l| l == "finished b"),
        "finalized by the reset"
    );
    assert!(!m.has_pending_work().unwrap(), "nothing parked any more");
    let jobs = s.lock().submitted.len();
    m.schedule_end().unwrap();
    assert_eq!(
        s.lock().submitted.len(),
        jobs,
        "no parked cascade after the reset"
    );
    assert!(matches!(
        m.complete_store(b, &[k(1)], true),
        Err(Error::UnknownRequest(_))
    ));
}

fn refused_store_cascades_nothing_and_adds_no_store_in_flight(wrap: Wrap) {
    let m = model_manager(1, vllm());
    let (t, s) = TestTier::new("rl");
    m.add_tier(wrap(t)).unwrap();
    s.lock().policy = Some(OffloadPolicy::RequestLevel);
    let a = start(&m, "a");
    store(&m, a, &[k(0)]);
    collect(&m);
    m.prepare_load(a, &[k(0)], &mut Vec::new()).unwrap(); // k0 pinned: no room left
    let b = start(&m, "b");
    let jobs = s.lock().submitted.len();
    let mut plan = StorePlan::default();
    assert_eq!(
        m.prepare_store(b, &[k(0), k(5)], &mut plan).unwrap(),
        StoreOutcome::Refused
    );
    assert_eq!(s.lock().submitted.len(), jobs, "nothing cascaded");
    assert_eq!(stat(&m, None, "store_refusals"), 1.0);
    m.request_finished(b).unwrap();
    assert!(
        s.lock().log.iter().any(|l| l == "finished b"),
        "no store in flight: finalized at once"
    );
}

fn every_call_naming_an_unknown_or_finalized_request_fails_with_no_side_effect(wrap: Wrap) {
    let m = model_manager(4, vllm());
    let (t, s) = TestTier::new("t");
    m.add_tier(wrap(t)).unwrap();
    s.lock().stored.insert(k(9));
    let gone = start(&m, "gone");
    store(&m, gone, &[k(1)]);
    m.request_finished(gone).unwrap();
    collect(&m);
    assert!(s.lock().log.iter().any(|l| l == "finished gone"));
    let before = |s: &Arc<Mutex<common::Script>>| {
        let s = s.lock();
        (
            s.polls,
            s.lookups,
            s.touches,
            s.submitted.len(),
            s.log.len(),
        )
    };
    let snapshot = before(&s);
    let entries = with_model(&m, |model| model.entries.len());
    let never = RequestId(gone.0 + 1000);
    for (name, why) in [
        (never, "was never issued by this manager"),
        (gone, "finished and was let go"),
    ] {
        // The message names the handle and says where it stands.
        let unknown = |r: kvtier_core::Result<()>| {
            assert!(
                matches!(&r, Err(Error::UnknownRequest(n)) if *n == format!("{name} {why}")),
                "{name}: {r:?}"
            )
        };
        assert!(
            matches!(m.lookup(name, &k(9)), Err(Error::UnknownRequest(n)) if n.starts_with(&name.to_string()))
        );
        unknown(m.prepare_load(name, &[k(1)], &mut Vec::new()));
        unknown(m.touch(name, &[k(1)]));
        unknown(m.complete_load(name, &[k(1)]));
        unknown(
            m.prepare_store(name, &[k(2)], &mut StorePlan::default())
                .map(|_| ()),
        );
        unknown(m.complete_store(name, &[k(1)], true).map(|_| ()));
        unknown(m.request_finished(name));
    }
    assert_eq!(before(&s), snapshot, "no tier saw anything");
    assert_eq!(with_model(&m, |model| model.entries.len()), entries);
    assert_eq!(model_refs(&m, &k(1)), Some(0));
    assert_eq!(stat(&m, None, "lookups"), 0.0);
    assert_eq!(stat(&m, None, "ignored_store_completions"), 0.0);
}

/// Only a tier that reports through `complete_job` may be completed
/// through it: the fs tier reports through `poll_finished`, so a made-up
/// result for its index (which could make a key readable while its slot
/// holds another block) is refused and nothing is queued.
#[test]
fn complete_job_refuses_a_tier_that_reports_through_poll_finished() {
    use kvtier_core::tiering::JobId;
    use kvtier_core::tiers::fs::{FsOptions, FsTier};
    let m = model_manager(8, vllm());
    let dir = tempfile::tempdir().unwrap();
    let mut o = FsOptions::new(dir.path());
    o.read_threads = 1;
    o.write_threads = 1;
    let mem = kvtier_core::region::SlotMemory::anonymous(8, 4096).unwrap();
    let fs = m.add_tier(Box::new(FsTier::open(mem, o).unwrap())).unwrap();
    let (t, _) = TestTier::new("t");
    let test_tier = m.add_tier(rust(t)).unwrap();
    start(&m, "r");
    assert!(!m.has_pending_work().unwrap());
    let e = m
        .complete_job(fs, JobResult::new(JobId(0), true))
        .unwrap_err();
    assert!(
        matches!(&e, Error::InvalidArgument(msg)
            if msg.contains("\"fs\"") && msg.contains("poll_finished")),
        "{e}"
    );
    assert!(!m.has_pending_work().unwrap(), "nothing queued");
    // A tier that reports through `complete_job` is still completed through it.
    m.complete_job(test_tier, JobResult::new(JobId(0), true))
        .unwrap();
    assert!(m.has_pending_work().unwrap(), "queued for the next poll");
}

/// Runs `check` on a manager over the real primary tier, then on one over
/// the reference model; `refs` answers a key's ref count in the primary
/// tier (-1 write pending, `None` absent).
fn on_real_and_model(
    capacity: u32,
    check: impl Fn(&Manager<Shared>, &dyn Fn(&kvtier_core::Key) -> Option<i32>),
) {
    use kvtier_core::primary::{PrimaryConfig, PrimaryTier};
    let real = PrimaryTier::new(PrimaryConfig {
        capacity,
        event_capacity: 64,
        ..Default::default()
    })
    .unwrap();
    let m = Probed::new(real, vllm());
    check(&m, &|key| m.primary().ref_count(key));
    let m = model_manager(capacity, vllm());
    check(&m, &|key| model_refs(&m, key));
}

/// r1 plans A (slot 0); r2 names [A, B] and plans only B; r2 completes
/// every key it named.  A stays write pending for r1 (neither dropped,
/// which would let a later store reuse slot 0 while r1 still writes it,
/// nor published before r1 wrote it), A's slot cannot be handed out, and
/// r1's own completion makes A ready.
#[test]
fn a_completion_leaves_another_requests_write_pending_key_alone() {
    for success in [false, true] {
        on_real_and_model(2, |m, refs| {
            let what = format!("success {success}");
            let r1 = start(m, "r1");
            let r2 = start(m, "r2");
            let mut plan = StorePlan::default();
            m.prepare_store(r1, &[k(1)], &mut plan).unwrap();
            assert_eq!(plan.slots, vec![0], "{what}");
            m.prepare_store(r2, &[k(1), k(2)], &mut plan).unwrap();
            assert_eq!(plan.to_store, vec![k(2)], "{what}");
            let r = m.complete_store(r2, &[k(1), k(2)], success);
            assert!(ignored_keys(&r), "{what}: A is not r2's to complete: {r:?}");
            let r = report_of(r);
            assert_eq!(
                refs(&k(1)),
                Some(-1),
                "{what}: A still write pending for r1"
            );
            assert_eq!(
                (r.ready, r.dropped, r.foreign),
                (success as usize, !success as usize, 1),
                "{what}: only B acted on, A counted"
            );
            assert_eq!(
                m.lookup(r2, &k(1)).unwrap(),
                LookupResult::HitPending,
                "{what}"
            );
            let r3 = start(m, "r3");
            assert_eq!(
                m.prepare_store(r3, &[k(3), k(4)], &mut plan).unwrap(),
                StoreOutcome::Refused,
                "{what}: A's slot is not free and A is not evictable"
            );
            let r = m.complete_store(r1, &[k(1)], true).unwrap();
            assert_eq!((r.ready, r.foreign), (1, 0), "{what}");
            assert_eq!(refs(&k(1)), Some(0), "{what}: r1's completion made A ready");
        });
    }
}

/// [0.33] A request may finish with its loads still in flight (an abort):
/// the finish commits and finalizes it as usual (the tiers hear of it at
/// once), and its handle stays valid for `complete_load` of the pins its
/// loads still hold, and nothing else, until the last goes or a reset.
#[test]
fn a_finished_request_completes_the_loads_it_still_holds() {
    on_real_and_model(4, |m, refs| {
        let (t, s) = TestTier::new("t");
        m.add_tier(rust(t)).unwrap();
        let other = start(m, "other");
        store(m, other, &[k(1), k(2), k(3)]);
        collect(m);
        assert_eq!(refs(&k(1)), Some(0), "the cascades finished");
        let r = start(m, "r");
        let mut slots = Vec::new();
        m.prepare_load(r, &[k(1), k(2)], &mut slots).unwrap();
        m.prepare_load(other, &[k(1), k(3)], &mut slots).unwrap();
        m.request_finished(r).unwrap();
        assert!(
            s.lock().log.iter().any(|l| l == "finished r"),
            "finalized at once, loads in flight or not"
        );
        assert_eq!(stat(m, None, "active_requests"), 1.0);
        let unknown =
            |e: Error| matches!(&e, Error::UnknownRequest(n) if n.starts_with(&r.to_string()));
        assert!(unknown(m.touch(r, &[k(1)]).unwrap_err()));
        assert!(unknown(m.prepare_load(r, &[k(1)], &mut slots).unwrap_err()));
        assert!(unknown(m.lookup(r, &k(1)).unwrap_err()));
        assert!(unknown(m.request_finished(r).unwrap_err()));
        // Another request's pin cannot be released through the handle.
        let e = m.complete_load(r, &[k(3)]).unwrap_err();
        assert!(matches!(e, Error::KeyState { index: 0, .. }), "{e}");
        assert_eq!(refs(&k(3)), Some(1));
        m.complete_load(r, &[k(1)]).unwrap();
        assert_eq!(refs(&k(1)), Some(1), "the other request's pin stays");
        let e = m.complete_load(r, &[k(2), k(1)]).unwrap_err();
        assert!(matches!(e, Error::KeyState { index: 1, .. }), "{e}");
        assert_eq!(refs(&k(2)), Some(1), "a refused batch changes nothing");
        m.complete_load(r, &[k(2)]).unwrap();
        assert_eq!(refs(&k(2)), Some(0));
        // The last pin released: the handle is unknown to complete_load too.
        assert!(unknown(m.complete_load(r, &[k(1)]).unwrap_err()));
        assert_eq!(refs(&k(1)), Some(1));
        m.complete_load(other, &[k(1), k(3)]).unwrap();
        // A reset forgets the pins of a finished request.
        let late = start(m, "late");
        m.prepare_load(late, &[k(2)], &mut slots).unwrap();
        m.request_finished(late).unwrap();
        m.reset_cache().unwrap();
        assert!(matches!(
            m.complete_load(late, &[k(2)]),
            Err(Error::UnknownRequest(_))
        ));
    });
}

/// R pins A and finishes; S pins A and unpins it twice (an active request
/// may unpin any pinned key, as in vLLM: its second unpin took R's pin);
/// T pins A.  R's late `complete_load` succeeds and releases nothing, so
/// T's slot is not handed to a store while T loads from it.
#[test]
fn a_late_completion_never_releases_a_pin_another_request_took() {
    on_real_and_model(1, |m, refs| {
        let a = k(1);
        let w = start(m, "w");
        store(m, w, &[a]);
        collect(m);
        let (r, s, t) = (start(m, "r"), start(m, "s"), start(m, "t"));
        let mut slots = Vec::new();
        m.prepare_load(r, &[a], &mut slots).unwrap();
        m.request_finished(r).unwrap();
        m.prepare_load(s, &[a], &mut slots).unwrap();
        m.complete_load(s, &[a]).unwrap();
        m.complete_load(s, &[a]).unwrap();
        assert_eq!(refs(&a), Some(0));
        m.prepare_load(t, &[a], &mut slots).unwrap();
        m.complete_load(r, &[a]).unwrap();
        assert_eq!(refs(&a), Some(1), "T's pin stays");
        assert!(matches!(
            m.complete_load(r, &[a]),
            Err(Error::UnknownRequest(_))
        ));
        let mut plan = StorePlan::default();
        assert_eq!(
            m.prepare_store(w, &[k(2)], &mut plan).unwrap(),
            StoreOutcome::Refused,
            "T's slot is not handed to a store"
        );
        m.complete_load(t, &[a]).unwrap();
        assert_eq!(refs(&a), Some(0));
    });
    // The real tier counts the completion that released nothing.
    let m = Manager::new(
        kvtier_core::primary::PrimaryTier::new(kvtier_core::primary::PrimaryConfig {
            capacity: 1,
            ..Default::default()
        })
        .unwrap(),
        vllm(),
    );
    let (w, r, s) = (start(&m, "w"), start(&m, "r"), start(&m, "s"));
    store(&m, w, &[k(1)]);
    let mut slots = Vec::new();
    m.prepare_load(r, &[k(1)], &mut slots).unwrap();
    m.request_finished(r).unwrap();
    m.complete_load(s, &[k(1)]).unwrap();
    assert_eq!(stat(&m, Some(0), "spent_load_completions"), 0.0);
    m.complete_load(r, &[k(1)]).unwrap();
    assert_eq!(stat(&m, Some(0), "spent_load_completions"), 1.0);
}

/// With KV groups on, a key too short for its group index is refused as
/// `InvalidKey`, naming its position, by every call that takes keys, on
/// the real primary tier and the model alike: a lookup of one a secondary
/// tier holds is no MISS "no room" and no internal error.
#[test]
fn with_kv_groups_every_call_refuses_a_key_too_short_for_its_group() {
    let real = kvtier_core::primary::PrimaryTier::new(kvtier_core::primary::PrimaryConfig {
        capacity: 2,
        ..Default::default()
    })
    .unwrap();
    let opts = ManagerOptions {
        kv_groups: true,
        ..vllm()
    };
    for m in [
        Probed::new(real, opts.clone()).into_manager(),
        model_manager(2, opts).into_manager(),
    ] {
        let (t, s) = TestTier::new("t");
        let tiny = kvtier_core::Key::new(b"tiny").unwrap();
        s.lock().stored.insert(tiny);
        m.add_tier(rust(t)).unwrap();
        let good = kvtier_core::Key::new(b"good\0\0\0\0").unwrap();
        let r = start(&m, "r");
        store(&m, r, &[good]);
        collect(&m);
        let keys = [good, tiny];
        let invalid = |e: Error| matches!(e, Error::InvalidKey { index: 1, .. });
        for _ in 0..3 {
            assert!(invalid(m.lookup_prefix(r, &keys).unwrap_err()));
            m.schedule_end().unwrap();
        }
        assert!(matches!(
            m.lookup(r, &tiny),
            Err(Error::InvalidKey { index: 0, .. })
        ));
        let mut slots = Vec::new();
        assert!(invalid(m.prepare_load(r, &keys, &mut slots).unwrap_err()));
        assert!(invalid(m.touch(r, &keys).unwrap_err()));
        assert!(invalid(m.complete_load(r, &keys).unwrap_err()));
        let mut plan = StorePlan::default();
        assert!(invalid(m.prepare_store(r, &keys, &mut plan).unwrap_err()));
        assert!(invalid(m.complete_store(r, &keys, true).unwrap_err()));
        assert!(invalid(m.set_positions(r, &keys, &[16, 32]).unwrap_err()));
        assert_eq!(stat(&m, None, "internal_errors"), 0.0);
        assert_eq!(stat(&m, None, "misses_no_room"), 0.0);
        assert_eq!(stat(&m, Some(1), "promotions_started"), 0.0);
    }
}

/// A store completion never publishes or drops the slot a promotion
/// reserved: only the promotion's own load job finishes it.
#[test]
fn a_store_completion_leaves_a_promotions_reserved_slot_alone() {
    for success in [false, true] {
        on_real_and_model(4, |m, refs| {
            let what = format!("success {success}");
            let (t, s) = TestTier::new("t");
            s.lock().auto_finish = false;
            s.lock().stored.insert(k(9));
            m.add_tier(rust(t)).unwrap();
            let r1 = start(m, "r1");
            let r2 = start(m, "r2");
            assert_eq!(m.lookup(r1, &k(9)).unwrap(), LookupResult::Retry);
            assert_eq!(refs(&k(9)), Some(-1), "{what}: slot reserved");
            let mut plan = StorePlan::default();
            m.prepare_store(r2, &[k(9), k(2)], &mut plan).unwrap();
            assert_eq!(plan.to_store, vec![k(2)], "{what}");
            m.prepare_store(r1, &[k(3)], &mut plan).unwrap();
            for r in [r1, r2] {
                let rep = report_of(m.complete_store(r, &[k(9), k(2), k(3)], success));
                assert_eq!(rep.foreign, if r == r1 { 2 } else { 1 }, "{what} {r}");
                assert_eq!(
                    refs(&k(9)),
                    Some(-1),
                    "{what}: {r} left the promotion alone"
                );
            }
            m.schedule_end().unwrap();
            let mut sc = s.lock();
            let load = sc.held.iter().find(|j| j.direction == Direction::Load);
            let load = load.unwrap().id;
            sc.finish(load, true);
            drop(sc);
            collect(m);
            assert_eq!(refs(&k(9)), Some(0), "{what}: the load made it ready");
        });
    }
}

/// A plan may be completed in several calls: the request keeps a store in
/// flight (and is not finalized) until every planned key was completed.
#[test]
fn a_plan_completed_in_two_calls_completes_every_key() {
    on_real_and_model(2, |m, refs| {
        let (t, s) = TestTier::new("t");
        m.add_tier(rust(t)).unwrap();
        let r = start(m, "r");
        let r2 = start(m, "r2");
        let mut plan = StorePlan::default();
        m.prepare_store(r, &[k(1), k(2)], &mut plan).unwrap();
        assert_eq!(m.complete_store(r, &[k(1)], true).unwrap().ready, 1);
        m.request_finished(r).unwrap();
        assert!(
            !s.lock().log.iter().any(|l| l == "finished r"),
            "B is still in flight: not finalized"
        );
        assert_eq!(m.complete_store(r, &[k(2)], true).unwrap().ready, 1);
        for key in [k(1), k(2)] {
            assert!(
                refs(&key) >= Some(0),
                "ready (pinned by its cascade, maybe)"
            );
            assert_eq!(m.lookup(r2, &key).unwrap(), LookupResult::Hit);
        }
        assert!(s.lock().log.iter().any(|l| l == "finished r"), "finalized");
        assert_eq!(stat(m, None, "ignored_store_completions"), 0.0);
        // Nothing leaked: once the cascades finished, a full-size store
        // evicts both and is planned.
        collect(m);
        assert_eq!(
            m.prepare_store(r2, &[k(3), k(4)], &mut plan).unwrap(),
            StoreOutcome::Planned
        );
        // A reset ends the stores in flight: the rest of a part-completed
        // plan is counted and ignored, and the request finalizes at once.
        assert_eq!(m.complete_store(r2, &[k(3)], true).unwrap().ready, 1);
        m.reset_cache().unwrap();
        let late = m.complete_store(r2, &[k(4)], true);
        assert!(ignored_keys(&late), "{late:?}");
        assert_eq!(report_of(late), Default::default());
        assert_eq!(stat(m, None, "ignored_store_completions"), 1.0);
        m.request_finished(r2).unwrap();
        assert!(s.lock().log.iter().any(|l| l == "finished r2"));
    });
}

/// Every rule above, once with the Rust tier and once with the same tier
/// behind the C vtable adapter.
macro_rules! both_tiers {
    ($($name:ident),* $(,)?) => {
        mod rust_tier {
            $(#[test] fn $name() { super::$name(super::rust) })*
        }
        mod c_tier {
            $(#[test] fn $name() { super::$name(super::via_c) })*
        }
    };
}

both_tiers!(
    polling_gate_once_per_step_prepare_store_always_polls,
    promotion_reserves_a_slot_at_once_and_batches_one_load_per_tier_and_request,
    promotion_answer_hit_pending_option,
    full_primary_answers_miss,
    tier_retry_answers_retry_and_misses_miss,
    cascade_pins_once_per_tier_and_unpins_when_jobs_finish,
    finalization_waits_for_stores_in_flight,
    finalization_waits_for_staged_promotions,
    request_level_cascades_resident_ready_keys_and_parks_write_pending_ones,
    parked_key_whose_write_failed_is_dropped,
    partial_promotion_and_bad_lists,
    unknown_and_repeated_job_ids_are_logged_tier_bugs,
    complete_job_from_another_thread,
    reset_cache_semantics_and_promotion_hold,
    job_never_finished_blocks_nothing_but_is_reported_at_reset,
    every_job_failing_leaks_no_slot,
    back_pressure_drops_cascades_not_loads_and_reset_clears_it,
    back_pressure_throttle_admits_one_store_at_a_time,
    back_pressure_with_drop_makes_the_tier_not_ready,
    tier_filter_affects_lookups_only,
    reentrant_call_from_a_tier_is_an_error_not_a_deadlock,
    events_are_labelled_and_tiers_own_theirs,
    shutdown_tries_every_tier_and_keeps_the_region_if_one_failed,
    misuse_is_an_error_with_no_side_effect,
    touch_reaches_every_tier_and_has_pending_work_sees_tiers,
    polling_gate_prepare_load_polls_first_and_other_calls_never_poll,
    on_schedule_end_order_of_work,
    retry_from_one_tier_and_hit_from_a_later_one,
    tier_filter_unset_fields_and_undeclared_tiers_match,
    has_pending_work_sees_staged_promotions_and_parked_keys,
    reset_cache_drains_then_collects_and_a_failed_drain_resets_nothing,
    back_pressure_drops_request_level_cascades_too,
    a_tier_with_more_finished_jobs_than_one_poll_takes_reports_them_over_several,
    destroy_runs_once_after_the_last_callback,
    complete_store_cascades_only_ready_keys,
    request_level_duplicate_key_in_one_store_is_not_parked,
    request_level_if_any_tier_asks_and_only_those_tiers_get_resident_keys,
    reset_cache_clears_parked_keys_and_finalizes_requests_waiting_on_them,
    refused_store_cascades_nothing_and_adds_no_store_in_flight,
    every_call_naming_an_unknown_or_finalized_request_fails_with_no_side_effect,
);

/// Every rule written for both tiers (a function taking a `Wrap`, above)
/// is in the `both_tiers!` list, which alone runs it: one left out would
/// never run, and nothing else would say so.
#[test]
fn every_rule_for_both_tiers_is_in_the_list() {
    let source = include_str!("manager_rules.rs");
    let (rules, list) = source
        .split_once("\nboth_tiers!(\n")
        .expect("the both_tiers! list");
    let list = &list[..list.find(");").expect("the end of the both_tiers! list")];
    let listed: std::collections::BTreeSet<&str> = list
        .split(',')
        .map(str::trim)
        .filter(|n| !n.is_empty())
        .collect();
    // A function's parameters run from its name to the `{` of its body,
    // on one line or, for a long name, on several.
    let written: std::collections::BTreeSet<&str> = rules
        .split("\nfn ")
        .skip(1)
        .filter_map(|f| f.split_once('('))
        .filter(|(_, rest)| rest[..rest.find('{').unwrap_or(0)].contains("wrap: Wrap"))
        .map(|(name, _)| name)
        .collect();
    assert!(written.len() >= 30, "only {} rules found", written.len());
    let missing: Vec<_> = written.difference(&listed).collect();
    assert!(missing.is_empty(), "rules not in both_tiers!: {missing:?}");
    let unknown: Vec<_> = listed.difference(&written).collect();
    assert!(unknown.is_empty(), "both_tiers! names no rule: {unknown:?}");
}
