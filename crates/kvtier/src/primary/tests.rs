//! Unit tests: one or more per primary-tier rule (the module doc of
//! `primary/mod.rs` states them), for both policies.  Here the rules every
//! call follows; in the submodules (files under `primary/tests/`) the
//! eviction policies and the admission threshold (`policies`), what
//! batches meet (`batches`), store completions and their writers
//! (`writers`), loads completed after their request finished
//! (`finished_loads`), transfer pins (`transfer_pins`), events and stats
//! (`observe`), hints (`hints`).

use super::*;

mod batches;
mod finished_loads;
mod hints;
mod observe;
mod policies;
mod transfer_pins;
mod writers;

fn k(n: u32) -> Key {
    Key::new(&n.to_be_bytes()).unwrap()
}

fn ks(ns: &[u32]) -> Vec<Key> {
    ns.iter().map(|&n| k(n)).collect()
}

fn tier(capacity: u32, policy: PolicyKind) -> PrimaryTier {
    PrimaryTier::new(PrimaryConfig {
        capacity,
        policy,
        event_capacity: 1024,
        ..Default::default()
    })
    .unwrap()
}

const R: RequestId = RequestId(1);
const BOTH: [PolicyKind; 2] = [PolicyKind::Lru, PolicyKind::Arc];

/// Stores and completes `ns` for request `req` (which must be active).
fn store(t: &mut PrimaryTier, req: RequestId, ns: &[u32]) -> StorePlan {
    let mut plan = StorePlan::default();
    assert_eq!(
        t.prepare_store(req, &ks(ns), &mut plan).unwrap(),
        StoreOutcome::Planned
    );
    t.complete_store(req, &plan.to_store, true);
    plan
}

fn evicted(plan: &StorePlan) -> Vec<Key> {
    plan.evicted.clone()
}

fn order(t: &PrimaryTier) -> Vec<Key> {
    t.eviction_order()
}

/// ARC's list sizes and target: (T1, T2, B1, B2, target).
fn arc_stats(t: &PrimaryTier) -> (u32, u32, u32, u32, f64) {
    let s = t.stats();
    (s.arc_t1, s.arc_t2, s.arc_b1, s.arc_b2, s.arc_target)
}

#[test]
fn config_is_checked_and_policy_names_parse() {
    assert!(
        PrimaryTier::new(PrimaryConfig {
            capacity: 0,
            ..Default::default()
        })
        .is_err()
    );
    assert!(
        PrimaryTier::new(PrimaryConfig {
            store_threshold: 2,
            admission_table_size: 0,
            ..Default::default()
        })
        .is_err()
    );
    let e = PrimaryTier::new(PrimaryConfig {
        capacity: arc::MAX_CAPACITY + 1,
        policy: PolicyKind::Arc,
        ..Default::default()
    })
    .unwrap_err()
    .to_string();
    assert!(e.contains("too large for arc"), "{e}");
    assert_eq!("lru".parse::<PolicyKind>().unwrap(), PolicyKind::Lru);
    assert_eq!("arc".parse::<PolicyKind>().unwrap(), PolicyKind::Arc);
    let e = "lfu".parse::<PolicyKind>().unwrap_err().to_string();
    assert!(
        e.contains("\"lru\"") && e.contains("\"arc\"") && e.contains("lfu"),
        "{e}"
    );
    assert_eq!(
        PrimaryTier::new(PrimaryConfig::default())
            .unwrap()
            .capacity(),
        1024
    );
}

#[test]
fn lookup_reports_the_three_states_and_changes_nothing() {
    for p in BOTH {
        let mut t = tier(4, p);
        t.request_begin(R).unwrap();
        let mut plan = StorePlan::default();
        t.prepare_store(R, &ks(&[1, 2]), &mut plan).unwrap();
        assert_eq!(t.lookup(&k(1)), PrimaryLookup::HitPending);
        t.complete_store(R, &ks(&[1]), true);
        assert_eq!(t.lookup(&k(1)), PrimaryLookup::Hit);
        assert_eq!(t.lookup(&k(2)), PrimaryLookup::HitPending);
        assert_eq!(t.lookup(&k(3)), PrimaryLookup::Miss);
        let before = (t.stats(), order(&t));
        for _ in 0..3 {
            t.lookup(&k(1));
            t.lookup(&k(9));
        }
        assert_eq!((t.stats(), order(&t)), before);
    }
}

#[test]
fn slots_are_fresh_upward_then_most_recently_freed_first() {
    for p in BOTH {
        let mut t = tier(4, p);
        t.request_begin(R).unwrap();
        let plan = store(&mut t, R, &[1, 2, 3]);
        assert_eq!(plan.slots, vec![0, 1, 2]);
        // Free slot 1 then slot 0 via failed stores of fresh keys.
        let mut plan = StorePlan::default();
        t.prepare_store(R, &ks(&[4]), &mut plan).unwrap();
        assert_eq!(plan.slots, vec![3], "the last fresh slot before reuse");
        t.complete_store(R, &ks(&[4]), false);
        t.reset();
        let plan = store(&mut t, R, &[5, 6]);
        assert_eq!(plan.slots, vec![0, 1], "reset restarts allocation at 0");
        let mut plan = StorePlan::default();
        t.prepare_store(R, &ks(&[7, 8]), &mut plan).unwrap();
        assert_eq!(plan.slots, vec![2, 3]);
        t.complete_store(R, &ks(&[8]), false); // frees 3
        t.complete_store(R, &ks(&[7]), false); // frees 2, most recent
        t.prepare_store(R, &ks(&[9, 10]), &mut plan).unwrap();
        assert_eq!(plan.slots, vec![2, 3], "most recently freed first");
        t.check_invariants().unwrap();
    }
}

#[test]
fn prepare_load_pins_in_key_order_and_misuse_changes_nothing() {
    for p in BOTH {
        let mut t = tier(4, p);
        t.request_begin(R).unwrap();
        store(&mut t, R, &[1, 2]);
        let mut plan = StorePlan::default();
        t.prepare_store(R, &ks(&[3]), &mut plan).unwrap();
        let mut slots = vec![99];
        t.prepare_load(R, &ks(&[2, 1]), &mut slots).unwrap();
        assert_eq!(slots, vec![1, 0]);
        assert_eq!((t.stats().pinned, t.stats().idle), (2, 0));
        let before = (t.stats(), order(&t));
        let e = t.prepare_load(R, &ks(&[1, 3]), &mut slots).unwrap_err();
        assert!(matches!(e, Error::KeyState { index: 1, .. }), "{e}");
        assert!(e.to_string().contains("write pending"), "{e}");
        assert!(slots.is_empty(), "{slots:?}");
        slots.push(99);
        let e = t.prepare_load(R, &ks(&[1, 1, 7]), &mut slots).unwrap_err();
        assert!(matches!(e, Error::KeyState { index: 2, .. }), "{e}");
        assert!(slots.is_empty(), "{slots:?}");
        assert_eq!((t.stats(), order(&t)), before);
        assert!(matches!(
            t.prepare_load(RequestId(9), &ks(&[1]), &mut slots),
            Err(Error::UnknownRequest(_))
        ));
        t.check_invariants().unwrap();
    }
}

#[test]
fn complete_load_unpins_and_misuse_names_the_position_and_changes_nothing() {
    for p in BOTH {
        let mut t = tier(4, p);
        t.request_begin(R).unwrap();
        store(&mut t, R, &[1, 2]);
        let mut slots = Vec::new();
        t.prepare_load(R, &ks(&[1, 1, 2]), &mut slots).unwrap();
        assert_eq!(t.stats().pinned, 2);
        let before = t.stats();
        // 2 is pinned once: the second unpin of 2 in one batch is misuse.
        let e = t.complete_load(R, &ks(&[1, 2, 2])).unwrap_err();
        assert!(matches!(e, Error::KeyState { index: 2, .. }), "{e}");
        let e = t.complete_load(R, &ks(&[1, 9])).unwrap_err();
        assert!(matches!(e, Error::KeyState { index: 1, .. }), "{e}");
        assert_eq!(t.stats(), before);
        t.complete_load(R, &ks(&[1, 2])).unwrap();
        assert_eq!((t.stats().pinned, t.stats().idle), (1, 1));
        t.complete_load(R, &ks(&[1])).unwrap();
        assert_eq!((t.stats().pinned, t.stats().idle), (0, 2));
        let e = t.complete_load(R, &ks(&[1])).unwrap_err();
        assert!(e.to_string().contains("not pinned"), "{e}");
        t.check_invariants().unwrap();
    }
}

#[test]
fn store_skips_resident_keys_and_an_empty_plan_is_a_plan() {
    for p in BOTH {
        let mut t = tier(2, p);
        t.request_begin(R).unwrap();
        let mut plan = StorePlan::default();
        t.prepare_store(R, &ks(&[1]), &mut plan).unwrap();
        // 1 write pending, 2 new
        t.prepare_store(R, &ks(&[1, 2, 2]), &mut plan).unwrap();
        assert_eq!(
            (plan.to_store.clone(), plan.slots.clone()),
            (ks(&[2]), vec![1])
        );
        // full of pending keys, nothing new: an empty plan, not a refusal
        assert_eq!(
            t.prepare_store(R, &ks(&[2, 1]), &mut plan).unwrap(),
            StoreOutcome::Planned
        );
        assert!(plan.to_store.is_empty() && plan.slots.is_empty() && plan.evicted.is_empty());
        assert_eq!(
            t.prepare_store(R, &[], &mut plan).unwrap(),
            StoreOutcome::Planned
        );
        assert_eq!(t.stats().refusals, 0);
    }
}

#[test]
fn refusal_is_atomic_and_counted() {
    for p in BOTH {
        let mut t = tier(3, p);
        t.request_begin(R).unwrap();
        store(&mut t, R, &[1, 2]);
        let mut slots = Vec::new();
        t.prepare_load(R, &ks(&[1]), &mut slots).unwrap();
        let mut plan = StorePlan::default();
        t.prepare_store(R, &ks(&[3]), &mut plan).unwrap(); // pending
        let mut events = Vec::new();
        t.take_events(&mut events);
        let before = (order(&t), t.stats().used, t.stats().idle);
        // needs 2 evictions, only key 2 is idle
        plan.evicted.push(k(77));
        assert_eq!(
            t.prepare_store(R, &ks(&[4, 5]), &mut plan).unwrap(),
            StoreOutcome::Refused
        );
        assert_eq!(plan, StorePlan::default());
        assert_eq!((order(&t), t.stats().used, t.stats().idle), before);
        assert_eq!(t.stats().refusals, 1);
        assert_eq!(t.events_queued(), 0);
        assert_eq!(t.lookup(&k(4)), PrimaryLookup::Miss);
        // one eviction is possible
        t.prepare_store(R, &ks(&[4]), &mut plan).unwrap();
        assert_eq!(plan.evicted, ks(&[2]));
        t.check_invariants().unwrap();
    }
}

#[test]
fn never_evicts_a_key_named_in_the_same_call() {
    for p in BOTH {
        let mut t = tier(2, p);
        t.request_begin(R).unwrap();
        store(&mut t, R, &[1, 2]);
        let mut plan = StorePlan::default();
        // 1 is the LRU key (and in T1 for ARC) but named: 2 goes instead.
        t.prepare_store(R, &ks(&[1, 3]), &mut plan).unwrap();
        assert_eq!(plan.evicted, ks(&[2]));
        assert_eq!(plan.to_store, ks(&[3]));
        // both resident keys named, one new: refusal
        assert_eq!(
            t.prepare_store(R, &ks(&[1, 3, 4]), &mut plan).unwrap(),
            StoreOutcome::Refused
        );
    }
}

#[test]
fn eviction_takes_exactly_the_shortfall_and_reports_in_order() {
    for p in BOTH {
        let mut t = tier(4, p);
        t.request_begin(R).unwrap();
        store(&mut t, R, &[1, 2, 3]);
        let plan = store(&mut t, R, &[4, 5, 6]);
        assert_eq!(evicted(&plan), ks(&[1, 2]));
        assert_eq!(
            plan.slots,
            vec![3, 1, 0],
            "fresh slot, then most recently freed"
        );
        assert_eq!(t.stats().evictions, 2);
        t.check_invariants().unwrap();
    }
}

#[test]
fn complete_store_success_failure_and_late_completions() {
    for p in BOTH {
        let mut t = tier(4, p);
        t.request_begin(R).unwrap();
        let mut plan = StorePlan::default();
        t.prepare_store(R, &ks(&[1, 2, 3]), &mut plan).unwrap();
        let r = t.complete_store(R, &ks(&[1, 9]), true);
        assert_eq!(
            r,
            CompleteStoreReport {
                ready: 1,
                ignored: 1,
                ..Default::default()
            }
        );
        let r = t.complete_store(R, &ks(&[1, 2]), false);
        assert_eq!(
            r,
            CompleteStoreReport {
                dropped: 1,
                already_ready: 1,
                ..Default::default()
            }
        );
        assert_eq!(
            t.lookup(&k(1)),
            PrimaryLookup::Hit,
            "ready keys are left alone"
        );
        assert_eq!(t.lookup(&k(2)), PrimaryLookup::Miss);
        let r = t.complete_store(R, &ks(&[2, 3, 3]), true);
        assert_eq!(
            r,
            CompleteStoreReport {
                ready: 1,
                ignored: 1,
                already_ready: 1,
                ..Default::default()
            }
        );
        t.reset();
        let r = t.complete_store(R, &ks(&[1, 3]), true);
        assert_eq!(r.ignored, 2);
        let s = t.stats();
        assert_eq!(
            (
                s.stores_completed,
                s.stores_failed,
                s.late_completions,
                s.already_ready_completions,
                s.foreign_completions
            ),
            (2, 1, 4, 2, 0)
        );
        t.check_invariants().unwrap();
    }
}

#[test]
fn reset_forgets_every_key_whatever_its_state() {
    for p in BOTH {
        let mut t = tier(4, p);
        t.request_begin(R).unwrap();
        store(&mut t, R, &[1, 2, 3, 4]);
        store(&mut t, R, &[5]);
        let mut slots = Vec::new();
        t.prepare_load(R, &ks(&[2]), &mut slots).unwrap();
        let mut plan = StorePlan::default();
        t.prepare_store(R, &ks(&[6]), &mut plan).unwrap();
        t.reset();
        let s = t.stats();
        assert_eq!(
            (s.used, s.write_pending, s.pinned, s.idle, s.allocated),
            (0, 0, 0, 0, 0)
        );
        assert_eq!(
            (s.arc_t1, s.arc_t2, s.arc_b1, s.arc_b2, s.arc_target),
            (0, 0, 0, 0, 0.0)
        );
        assert!(t.complete_load(R, &ks(&[2])).is_err());
        assert!(t.is_active(R), "requests stay active");
        t.request_finished(R).unwrap();
        t.check_invariants().unwrap();
    }
}

#[test]
fn requests_must_be_begun_once_and_finished_once() {
    let mut t = tier(4, PolicyKind::Lru);
    assert!(matches!(
        t.touch(R, &ks(&[1])),
        Err(Error::UnknownRequest(_))
    ));
    assert!(matches!(
        t.complete_load(R, &[]),
        Err(Error::UnknownRequest(_))
    ));
    let mut plan = StorePlan::default();
    assert!(matches!(
        t.prepare_store(R, &ks(&[1]), &mut plan),
        Err(Error::UnknownRequest(_))
    ));
    assert!(matches!(
        t.request_finished(R),
        Err(Error::UnknownRequest(_))
    ));
    t.request_begin(R).unwrap();
    assert!(matches!(
        t.request_begin(R),
        Err(Error::DuplicateRequest(_))
    ));
    t.request_finished(R).unwrap();
    assert!(matches!(
        t.request_finished(R),
        Err(Error::UnknownRequest(_))
    ));
}
