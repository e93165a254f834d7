//! Unit tests: one or more per primary-tier rule (the module doc of
//! `primary/mod.rs` states them), for both policies.

use super::*;

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
        t.begin_request(R).unwrap();
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
        t.begin_request(R).unwrap();
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
        t.begin_request(R).unwrap();
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
        t.begin_request(R).unwrap();
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
        t.begin_request(R).unwrap();
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
        t.begin_request(R).unwrap();
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
        t.begin_request(R).unwrap();
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
        t.begin_request(R).unwrap();
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
        t.begin_request(R).unwrap();
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
fn events_stored_removed_cleared_and_unannounced_keys_are_never_removed() {
    for p in BOTH {
        let mut t = tier(2, p);
        t.begin_request(R).unwrap();
        let mut plan = StorePlan::default();
        t.prepare_store(R, &ks(&[1, 2]), &mut plan).unwrap();
        t.complete_store(R, &ks(&[1]), true);
        t.complete_store(R, &ks(&[2]), false);
        store(&mut t, R, &[3]);
        store(&mut t, R, &[4]); // evicts 1 (announced)
        let mut ev = Vec::new();
        t.take_events(&mut ev);
        let got: Vec<_> = ev.iter().map(|e| (e.kind, e.key.unwrap())).collect();
        assert_eq!(
            got,
            vec![
                (EventKind::Stored, k(1)),
                (EventKind::Stored, k(3)),
                (EventKind::Removed, k(1)),
                (EventKind::Stored, k(4)),
            ]
        );
        t.reset();
        t.take_events(&mut ev);
        assert_eq!(
            ev.last().unwrap(),
            &Event {
                kind: EventKind::Cleared,
                key: None
            }
        );
        assert_eq!(t.events_queued(), 0);
    }
}

#[test]
fn event_buffer_is_bounded_drops_new_events_and_counts_them() {
    let mut t = PrimaryTier::new(PrimaryConfig {
        capacity: 3,
        event_capacity: 2,
        ..Default::default()
    })
    .unwrap();
    t.begin_request(R).unwrap();
    store(&mut t, R, &[1, 2, 3]); // "stored 3" is dropped
    assert_eq!((t.events_queued(), t.stats().events_dropped), (2, 1));
    let mut ev = Vec::new();
    assert_eq!(t.take_events_up_to(1, &mut ev), 1);
    t.take_events(&mut ev);
    assert_eq!(ev.len(), 2);
    // Evicting 3 (never announced) emits nothing; evicting 1 emits "removed".
    let mut slots = Vec::new();
    t.prepare_load(R, &ks(&[2]), &mut slots).unwrap();
    t.touch(R, &ks(&[1])).unwrap(); // 3 is now least recent idle
    let plan = store(&mut t, R, &[4]);
    assert_eq!(plan.evicted, ks(&[3]));
    ev.clear();
    t.take_events(&mut ev);
    assert_eq!(
        ev,
        vec![Event {
            kind: EventKind::Stored,
            key: Some(k(4))
        }]
    );
    // Events off: nothing queued, nothing counted.
    let mut off = tier(4, PolicyKind::Lru);
    off.config.event_capacity = 0;
    off.begin_request(R).unwrap();
    store(&mut off, R, &[1, 2, 3]);
    assert_eq!((off.events_queued(), off.stats().events_dropped), (0, 0));
}

#[test]
fn stats_gauges_and_usage_fractions() {
    let mut t = tier(10, PolicyKind::Lru);
    t.begin_request(R).unwrap();
    store(&mut t, R, &[1, 2, 3]);
    let mut plan = StorePlan::default();
    t.prepare_store(R, &ks(&[4, 5]), &mut plan).unwrap();
    let mut slots = Vec::new();
    t.prepare_load(R, &ks(&[1]), &mut slots).unwrap();
    let s = t.stats();
    assert_eq!((s.capacity, s.used, s.allocated), (10, 5, 5));
    assert_eq!((s.write_pending, s.pinned, s.idle), (2, 1, 2));
    assert!((s.usage - 0.3).abs() < 1e-9);
    assert!((s.write_usage - 0.2).abs() < 1e-9);
    assert!((s.read_usage - 0.1).abs() < 1e-9);
    assert_eq!(s.loads, 1);
    let names: Vec<_> = t.stat_list().into_iter().map(|s| s.name).collect();
    assert!(names.iter().any(|n| n == "evictions") && !names.iter().any(|n| n == "arc_t1"));
}

#[test]
fn reset_forgets_every_key_whatever_its_state() {
    for p in BOTH {
        let mut t = tier(4, p);
        t.begin_request(R).unwrap();
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
        t.on_request_finished(R).unwrap();
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
        t.on_request_finished(R),
        Err(Error::UnknownRequest(_))
    ));
    t.begin_request(R).unwrap();
    assert!(matches!(
        t.begin_request(R),
        Err(Error::DuplicateRequest(_))
    ));
    t.on_request_finished(R).unwrap();
    assert!(matches!(
        t.on_request_finished(R),
        Err(Error::UnknownRequest(_))
    ));
}

#[test]
fn transfer_pins_protect_keys_and_are_not_accesses() {
    for p in BOTH {
        let mut t = tier(2, p);
        t.begin_request(R).unwrap();
        store(&mut t, R, &[1, 2]);
        t.on_request_finished(R).unwrap();
        assert_eq!(order(&t), ks(&[2, 1]));
        let mut slots = Vec::new();
        t.pin_for_transfer(&ks(&[2]), &mut slots).unwrap();
        assert_eq!(slots, vec![1]);
        let q = RequestId(2);
        t.begin_request(q).unwrap();
        let plan = store(&mut t, q, &[3]);
        assert_eq!(plan.evicted, ks(&[1]), "pinned 2 is not evictable");
        assert!(t.unpin_for_transfer(&ks(&[3])).is_err());
        t.unpin_for_transfer(&ks(&[2])).unwrap();
        assert!(t.unpin_for_transfer(&ks(&[2])).is_err());
        assert_eq!(order(&t)[0], k(2), "the pin did not change 2's rank");
        t.check_invariants().unwrap();
    }
}

// ---- lru [0.33] ----

#[test]
fn lru_new_keys_are_most_recent_in_batch_order() {
    let mut t = tier(8, PolicyKind::Lru);
    t.begin_request(R).unwrap();
    store(&mut t, R, &[1, 2, 3]);
    store(&mut t, R, &[4]);
    assert_eq!(order(&t), ks(&[1, 2, 3, 4]));
}

#[test]
fn lru_touch_reverses_the_batch_so_the_head_is_most_recent() {
    let mut t = tier(8, PolicyKind::Lru);
    t.begin_request(R).unwrap();
    store(&mut t, R, &[1, 2, 3, 4]);
    t.touch(R, &ks(&[1, 2, 9])).unwrap();
    assert_eq!(order(&t), ks(&[3, 4, 2, 1]));
}

#[test]
fn lru_pinned_keys_keep_their_recency_and_touching_them_counts() {
    let mut t = tier(3, PolicyKind::Lru);
    t.begin_request(R).unwrap();
    store(&mut t, R, &[1, 2, 3]);
    let mut slots = Vec::new();
    t.prepare_load(R, &ks(&[1]), &mut slots).unwrap();
    t.complete_load(R, &ks(&[1])).unwrap();
    // 1 became idle again at its old recency: it is evicted first.
    let plan = store(&mut t, R, &[4]);
    assert_eq!(plan.evicted, ks(&[1]));
    // touching a pinned key counts
    t.prepare_load(R, &ks(&[2]), &mut slots).unwrap();
    t.touch(R, &ks(&[2])).unwrap();
    t.complete_load(R, &ks(&[2])).unwrap();
    let plan = store(&mut t, R, &[5]);
    assert_eq!(plan.evicted, ks(&[3]));
}

#[test]
fn lru_request_finish_commits_accesses_head_most_recent() {
    let mut t = tier(8, PolicyKind::Lru);
    t.begin_request(R).unwrap();
    store(&mut t, R, &[1, 2, 3]);
    assert_eq!(order(&t), ks(&[1, 2, 3]));
    t.on_request_finished(R).unwrap();
    assert_eq!(order(&t), ks(&[3, 2, 1]));
    let q = RequestId(2);
    t.begin_request(q).unwrap();
    store(&mut t, q, &[4, 5]);
    // q presents 2 (ready, reused) then 4, 5 were stored: head order 4, 5, 2, 6
    let mut slots = Vec::new();
    t.prepare_load(q, &ks(&[2]), &mut slots).unwrap();
    t.complete_load(q, &ks(&[2])).unwrap();
    store(&mut t, q, &[6]);
    assert_eq!(order(&t), ks(&[3, 2, 1, 4, 5, 6]));
    t.on_request_finished(q).unwrap();
    assert_eq!(order(&t), ks(&[3, 1, 6, 2, 5, 4]));
}

#[test]
fn lru_write_pending_and_pinned_keys_are_skipped_by_eviction() {
    let mut t = tier(3, PolicyKind::Lru);
    t.begin_request(R).unwrap();
    let mut plan = StorePlan::default();
    t.prepare_store(R, &ks(&[1]), &mut plan).unwrap();
    store(&mut t, R, &[2, 3]);
    let mut slots = Vec::new();
    t.prepare_load(R, &ks(&[2]), &mut slots).unwrap();
    let plan = store(&mut t, R, &[4]);
    assert_eq!(plan.evicted, ks(&[3]));
}

// ---- arc ----

fn arc_stats(t: &PrimaryTier) -> (u32, u32, u32, u32, f64) {
    let s = t.stats();
    (s.arc_t1, s.arc_t2, s.arc_b1, s.arc_b2, s.arc_target)
}

#[test]
fn arc_new_keys_enter_t1_and_touch_moves_ready_ones_to_t2() {
    let mut t = tier(8, PolicyKind::Arc);
    t.begin_request(R).unwrap();
    store(&mut t, R, &[1, 2]);
    let mut plan = StorePlan::default();
    t.prepare_store(R, &ks(&[3]), &mut plan).unwrap(); // write pending
    assert_eq!(arc_stats(&t), (3, 0, 0, 0, 0.0));
    t.touch(R, &ks(&[1, 3])).unwrap();
    // 1 ready -> T2; 3 write pending -> refreshed within T1 (most recent)
    assert_eq!(arc_stats(&t), (2, 1, 0, 0, 0.0));
    assert_eq!(order(&t), ks(&[2, 3, 1]));
    t.touch(R, &ks(&[1])).unwrap();
    assert_eq!(arc_stats(&t).1, 1, "touching a T2 key refreshes it");
}

#[test]
fn arc_evicts_t1_at_or_above_target_into_b1_and_ghost_touch_adapts() {
    let mut t = tier(2, PolicyKind::Arc);
    t.begin_request(R).unwrap();
    store(&mut t, R, &[1, 2]);
    t.touch(R, &ks(&[2])).unwrap(); // T1=[1], T2=[2]
    let plan = store(&mut t, R, &[3]); // |T1|=1 >= target 0: evict 1 -> B1
    assert_eq!(plan.evicted, ks(&[1]));
    assert_eq!(arc_stats(&t), (1, 1, 1, 0, 0.0));
    t.touch(R, &ks(&[1])).unwrap(); // B1 hit: target += max(1, 0/1) = 1
    assert_eq!(arc_stats(&t).4, 1.0);
    // |T1| = 1 >= 1: T1 again (3 -> B1)
    let plan = store(&mut t, R, &[4]);
    assert_eq!(plan.evicted, ks(&[3]));
    t.touch(R, &ks(&[1, 3])).unwrap(); // two B1 hits: target capped at 2
    assert_eq!(arc_stats(&t).4, 2.0);
    // |T1| = 1 < 2: evict from T2 (2 -> B2)
    let plan = store(&mut t, R, &[5]);
    assert_eq!(plan.evicted, ks(&[2]));
    assert_eq!(arc_stats(&t), (2, 0, 2, 1, 2.0));
    t.touch(R, &ks(&[2])).unwrap(); // B2 hit: target -= max(1, 2/1) = 2
    assert_eq!(arc_stats(&t).4, 0.0);
    t.check_invariants().unwrap();
}

#[test]
fn arc_compares_with_the_truncated_target_and_falls_back_to_the_other_list() {
    let mut t = tier(4, PolicyKind::Arc);
    t.begin_request(R).unwrap();
    store(&mut t, R, &[1, 2, 3, 4]);
    t.touch(R, &ks(&[3, 4])).unwrap(); // T1=[1,2] T2=[4,3]
    store(&mut t, R, &[5]); // evicts 1 -> B1; T1=[2,5]
    store(&mut t, R, &[6]); // evicts 2 -> B1; T1=[5,6]
    t.touch(R, &ks(&[5, 6])).unwrap(); // T1=[], T2=[4,3,6,5]
    store(&mut t, R, &[7]); // |T1|=0 >= 0: T1 has nothing, falls back to T2: 4 -> B2
    assert_eq!(arc_stats(&t), (1, 3, 2, 1, 0.0));
    // B2 hits shrink, B1 hits grow by max(1, |B2|/|B1|) = max(1, 0.5) = 1
    t.touch(R, &ks(&[1])).unwrap();
    assert_eq!(arc_stats(&t).4, 1.0);
    t.touch(R, &ks(&[4])).unwrap(); // B2: -max(1, 2/1) -> 0 (floored)
    assert_eq!(arc_stats(&t).4, 0.0);
    t.check_invariants().unwrap();
}

#[test]
fn arc_store_offer_of_a_ghost_adapts_once_per_request_and_key_even_when_refused() {
    let mut t = tier(2, PolicyKind::Arc);
    t.begin_request(R).unwrap();
    store(&mut t, R, &[1, 2]);
    store(&mut t, R, &[3]); // 1 -> B1
    assert_eq!(arc_stats(&t), (2, 0, 1, 0, 0.0));
    let q = RequestId(2);
    t.begin_request(q).unwrap();
    let mut slots = Vec::new();
    t.prepare_load(q, &ks(&[2, 3]), &mut slots).unwrap(); // nothing evictable
    let mut plan = StorePlan::default();
    assert_eq!(
        t.prepare_store(q, &ks(&[1]), &mut plan).unwrap(),
        StoreOutcome::Refused
    );
    assert_eq!(arc_stats(&t).4, 1.0, "adapted although refused");
    assert_eq!(
        t.prepare_store(q, &ks(&[1]), &mut plan).unwrap(),
        StoreOutcome::Refused
    );
    assert_eq!(arc_stats(&t).4, 1.0, "once per request and key");
    let r3 = RequestId(3);
    t.begin_request(r3).unwrap();
    t.prepare_store(r3, &ks(&[1]), &mut plan).unwrap();
    assert_eq!(arc_stats(&t).4, 2.0, "another request adapts again");
    t.complete_load(q, &ks(&[2, 3])).unwrap();
    // Now the store goes through; the key leaves B1 and enters T1.
    t.prepare_store(r3, &ks(&[1]), &mut plan).unwrap();
    assert_eq!(plan.to_store, ks(&[1]));
    assert_eq!(arc_stats(&t).2, 1, "1 left B1; the evicted key entered it");
    t.check_invariants().unwrap();
}

#[test]
fn arc_ghost_lists_are_bounded_by_capacity_oldest_forgotten() {
    let mut t = tier(2, PolicyKind::Arc);
    t.begin_request(R).unwrap();
    for n in 1..=8 {
        store(&mut t, R, &[n]);
    }
    assert_eq!(arc_stats(&t), (2, 0, 2, 0, 0.0));
    t.touch(R, &ks(&[1])).unwrap(); // forgotten: no adaptation
    assert_eq!(arc_stats(&t).4, 0.0);
    t.touch(R, &ks(&[6])).unwrap(); // still a ghost
    assert_eq!(arc_stats(&t).4, 1.0);
}

#[test]
fn metadata_per_slot_counts_every_array() {
    // 1000 slots: ref counts 4 + flags 1 + index 4 x (2 x 1000 + 16) buckets
    // + list nodes 16 + list state 1, per slot; lru adds room for the rank
    // markers of 15 active requests (2 list entries each, 17 bytes).  Under
    // Miri, where the churn below takes minutes at 1000 slots, 16 slots:
    // 4 x (2 x 16 + 16) index bytes per 16 slots, markers of 1 request.
    let (capacity, lru_bytes, ranked_bytes, arc_bytes, arc_full_bytes) = if cfg!(miri) {
        (16, 34.0 + 2.125, 34.0 + 2.125 + 18.0, 38.0, 70.0)
    } else {
        (1000, 30.064 + 0.51, 30.064 + 0.51 + 16.48, 30.128, 62.128)
    };
    let mut lru = tier(capacity, PolicyKind::Lru);
    assert_eq!(lru.metadata_bytes_per_slot(), lru_bytes);
    // Once positions are in use, 16 bytes of rank per slot and marker.
    lru.begin_request(R).unwrap();
    lru.set_positions(R, &ks(&[1]), &[16]).unwrap();
    assert_eq!(lru.metadata_bytes_per_slot(), ranked_bytes);
    let mut arc = tier(capacity, PolicyKind::Arc);
    // ARC: an empty ghost index (16 buckets) until the first eviction.
    assert_eq!(arc.metadata_bytes_per_slot(), arc_bytes);
    // Churn until both ghost lists are full: new keys, half touched into T2.
    arc.begin_request(R).unwrap();
    for i in (0..8 * capacity).step_by(16) {
        let batch: Vec<u32> = (i..i + 16).collect();
        store(&mut arc, R, &batch);
        arc.touch(R, &ks(&batch[..8])).unwrap();
    }
    let s = arc.stats();
    assert_eq!((s.arc_b1, s.arc_b2), (capacity, capacity));
    // Plus the ghost index, 4 x (2 x 2000 + 16) buckets, and prev/next
    // links (8 bytes) of 2000 ghosts (2 x 16 under Miri).
    assert_eq!(arc.metadata_bytes_per_slot(), arc_full_bytes);
    arc.check_invariants().unwrap();
}

#[test]
fn arc_request_finish_promotes_reused_keys_and_refreshes_inserted_ones() {
    let mut t = tier(8, PolicyKind::Arc);
    t.begin_request(R).unwrap();
    store(&mut t, R, &[1, 2, 3]);
    t.on_request_finished(R).unwrap();
    assert_eq!(arc_stats(&t), (3, 0, 0, 0, 0.0), "inserted keys stay in T1");
    assert_eq!(order(&t), ks(&[3, 2, 1]), "head most recent");
    let q = RequestId(2);
    t.begin_request(q).unwrap();
    let mut slots = Vec::new();
    t.prepare_load(q, &ks(&[3]), &mut slots).unwrap();
    t.complete_load(q, &ks(&[3])).unwrap();
    let mut plan = StorePlan::default();
    t.prepare_store(q, &ks(&[2, 4]), &mut plan).unwrap(); // 2 found ready: reused
    assert_eq!(plan.to_store, ks(&[4]));
    t.on_request_finished(q).unwrap();
    assert_eq!(arc_stats(&t), (2, 2, 0, 0, 0.0));
    assert_eq!(order(&t), ks(&[1, 4, 2, 3]));
}

#[test]
fn arc_stat_list_names_the_lists_and_target() {
    let t = tier(2, PolicyKind::Arc);
    let names: Vec<_> = t.stat_list().into_iter().map(|s| s.name).collect();
    for n in ["arc_t1", "arc_t2", "arc_b1", "arc_b2", "arc_target"] {
        assert!(names.iter().any(|x| x == n), "{n}");
    }
}

// ---- admission threshold [0.33] ----

fn admitting(threshold: u32, table: usize) -> PrimaryTier {
    PrimaryTier::new(PrimaryConfig {
        capacity: 8,
        store_threshold: threshold,
        admission_table_size: table,
        ..Default::default()
    })
    .unwrap()
}

#[test]
fn admission_stores_a_key_at_its_threshold_th_offer() {
    let mut t = admitting(3, 16);
    t.begin_request(R).unwrap();
    let mut plan = StorePlan::default();
    t.prepare_store(R, &ks(&[1, 1]), &mut plan).unwrap();
    assert!(
        plan.to_store.is_empty(),
        "repeats in one call are one offer"
    );
    t.prepare_store(R, &ks(&[1]), &mut plan).unwrap();
    assert!(plan.to_store.is_empty());
    t.prepare_store(R, &ks(&[1, 2]), &mut plan).unwrap();
    assert_eq!(plan.to_store, ks(&[1]));
    assert_eq!(t.stats().admission_skips, 3);
    for threshold in [0, 1] {
        let mut t = admitting(threshold, 0);
        t.begin_request(R).unwrap();
        t.prepare_store(R, &ks(&[1]), &mut plan).unwrap();
        assert_eq!(plan.to_store, ks(&[1]));
    }
}

#[test]
fn admission_table_forgets_the_oldest_offer_but_not_one_from_the_same_call() {
    let mut t = admitting(2, 2);
    t.begin_request(R).unwrap();
    let mut plan = StorePlan::default();
    t.prepare_store(R, &ks(&[1]), &mut plan).unwrap();
    t.prepare_store(R, &ks(&[2]), &mut plan).unwrap();
    t.prepare_store(R, &ks(&[3]), &mut plan).unwrap(); // forgets 1
    assert_eq!(t.stats().admission_table_len, 2);
    t.prepare_store(R, &ks(&[1]), &mut plan).unwrap(); // first offer again, forgets 2
    assert!(plan.to_store.is_empty());
    // one call offering 4, 5, 6: 4 and 5 replace 3 and 1; 6 finds only same-call entries
    t.prepare_store(R, &ks(&[4, 5, 6]), &mut plan).unwrap();
    t.prepare_store(R, &ks(&[4, 5, 6]), &mut plan).unwrap();
    assert_eq!(plan.to_store, ks(&[4, 5]));
}

#[test]
fn long_batches_with_repeats_store_each_key_once_at_its_first_position() {
    for p in BOTH {
        let mut t = tier(64, p);
        t.begin_request(R).unwrap();
        let ns: Vec<u32> = (0..50).map(|i| i % 20).collect();
        let mut plan = StorePlan::default();
        t.prepare_store(R, &ks(&ns), &mut plan).unwrap();
        assert_eq!(plan.to_store, ks(&(0..20).collect::<Vec<_>>()));
        assert_eq!(plan.slots, (0..20).collect::<Vec<_>>());
        let mut pos = Vec::new();
        plan.positions_in(&ks(&ns), &mut pos);
        assert_eq!(pos, (0..20).collect::<Vec<_>>());
        t.check_invariants().unwrap();
    }
}

#[test]
fn the_tier_can_be_shared_and_sent_across_threads() {
    fn send_sync<T: Send + Sync>() {}
    send_sync::<PrimaryTier>();
    send_sync::<NamedPrimary>();
}

#[test]
fn call_stamps_wrap_around_without_confusing_the_admission_table() {
    let mut t = admitting(2, 2);
    t.begin_request(R).unwrap();
    let mut plan = StorePlan::default();
    t.slots.epoch = u32::MAX - 1;
    t.prepare_store(R, &ks(&[1]), &mut plan).unwrap(); // stamp u32::MAX
    t.prepare_store(R, &ks(&[2]), &mut plan).unwrap(); // wraps to 1, marks cleared
    assert_eq!(t.slots.epoch, 1);
    // The table is full (1, 2); a new key forgets 1, not refused as same-call.
    t.prepare_store(R, &ks(&[3]), &mut plan).unwrap();
    t.prepare_store(R, &ks(&[2, 3]), &mut plan).unwrap();
    assert_eq!(plan.to_store, ks(&[2, 3]));
    t.check_invariants().unwrap();
}

#[test]
fn pinned_write_pending_and_named_keys_are_all_passed_over_by_eviction() {
    for p in BOTH {
        let mut t = tier(6, p);
        t.begin_request(R).unwrap();
        store(&mut t, R, &[1, 2, 3, 4]);
        let mut plan = StorePlan::default();
        t.prepare_store(R, &ks(&[5, 6]), &mut plan).unwrap(); // pending, full
        let mut slots = Vec::new();
        t.prepare_load(R, &ks(&[1]), &mut slots).unwrap();
        // 1 pinned, 2 named, 5 and 6 pending: only 3 and 4 can go.
        t.prepare_store(R, &ks(&[2, 7, 8]), &mut plan).unwrap();
        assert_eq!(plan.evicted, ks(&[3, 4]));
        // Now 2 is the only idle key: naming it refuses, not naming it evicts it.
        assert_eq!(
            t.prepare_store(R, &ks(&[9, 2]), &mut plan).unwrap(),
            StoreOutcome::Refused
        );
        t.prepare_store(R, &ks(&[9]), &mut plan).unwrap();
        assert_eq!(plan.evicted, ks(&[2]));
        t.check_invariants().unwrap();
    }
}

#[test]
fn a_request_records_each_key_once_however_often_it_presents_it() {
    for p in BOTH {
        let mut t = tier(8, p);
        t.begin_request(R).unwrap();
        store(&mut t, R, &[1, 2, 3]);
        let mut slots = Vec::new();
        // A record per presentation would show as thousands of entries
        // (tens under Miri, a thousand times slower).
        let rounds = if cfg!(miri) { 10 } else { 1000 };
        for _ in 0..rounds {
            t.prepare_load(R, &ks(&[3, 2]), &mut slots).unwrap();
            t.complete_load(R, &ks(&[3, 2])).unwrap();
            store(&mut t, R, &[1, 3]);
        }
        let record = &t.requests[&R];
        assert_eq!(
            record.accesses.len(),
            3,
            "{p:?}: one entry per distinct key"
        );
        let seen: Vec<(Key, u32, bool)> = record
            .accesses
            .iter()
            .map(|a| (a.key, a.slot, a.reused))
            .collect();
        assert_eq!(
            seen,
            vec![(k(1), 0, false), (k(2), 1, false), (k(3), 2, false)],
            "{p:?}: first-presentation order, with the keys' slots; all were \
             stored by the request, so finding them ready later is no reuse"
        );
        t.on_request_finished(R).unwrap();
        if p == PolicyKind::Lru {
            // Head most recent: 1 (first presented), then 2, then 3.
            assert_eq!(order(&t), ks(&[3, 2, 1]));
        } else {
            assert_eq!(
                (arc_stats(&t).0, arc_stats(&t).1),
                (3, 0),
                "only inserted: refreshed in T1"
            );
            assert_eq!(order(&t), ks(&[3, 2, 1]));
        }
        t.check_invariants().unwrap();
    }
}

#[test]
fn busy_keys_passed_over_once_are_parked_and_come_back_at_their_recency() {
    for p in BOTH {
        let mut t = tier(100, p);
        t.begin_request(R).unwrap();
        let all: Vec<u32> = (0..100).collect();
        store(&mut t, R, &all);
        // Pin the 90 oldest keys: the first eviction passes over them once.
        let old = ks(&all[..90]);
        let mut slots = Vec::new();
        t.pin_for_transfer(&old, &mut slots).unwrap();
        let plan = store(&mut t, R, &[1000]);
        assert_eq!(plan.evicted, ks(&[90]), "{p:?}");
        assert_eq!(t.policy.candidate_order().len(), 10, "{p:?}: 90 parked");
        t.check_invariants().unwrap();
        // Later evictions meet no pinned key at all.
        let plan = store(&mut t, R, &[1001]);
        assert_eq!(plan.evicted, ks(&[91]), "{p:?}");
        // Unpinned, key 5 is a candidate again at its old recency: first.
        t.unpin_for_transfer(&ks(&[5])).unwrap();
        t.check_invariants().unwrap();
        let plan = store(&mut t, R, &[1002, 1003]);
        assert_eq!(plan.evicted, ks(&[5, 92]), "{p:?}");
        t.unpin_for_transfer(&ks(&all[..90])[..5]).unwrap();
        t.unpin_for_transfer(&ks(&all[6..90])).unwrap();
        t.check_invariants().unwrap();
        let plan = store(&mut t, R, &[1004, 1005, 1006]);
        assert_eq!(plan.evicted, ks(&[0, 1, 2]), "{p:?}");
        t.check_invariants().unwrap();
    }
}

#[test]
fn large_tiers_prefetch_and_keep_their_invariants() {
    // Tables beyond the CPU caches, where what batches read ahead matters.
    // Miri neither has caches nor gets through 2^16 keys in minutes: there
    // the same batches (longer than the read-ahead, evicting) run on a
    // small tier.
    let (n, evictions) = if cfg!(miri) {
        (64 + 16, 40)
    } else {
        ((1u32 << 16) + 64, 200)
    };
    for p in BOTH {
        let mut t = tier(n, p);
        t.begin_request(R).unwrap();
        let all: Vec<u32> = (0..n + evictions).collect();
        for chunk in all.chunks(40) {
            store(&mut t, R, chunk);
        }
        assert_eq!(t.stats().evictions, evictions as u64, "{p:?}");
        let mut slots = Vec::new();
        let some = ks(&all[n as usize..n as usize + 40]);
        t.prepare_load(R, &some, &mut slots).unwrap();
        assert_eq!(slots.len(), 40);
        t.complete_load(R, &some).unwrap();
        assert_eq!(t.lookup(&k(0)), PrimaryLookup::Miss);
        assert_eq!(t.lookup(&k(n + evictions - 1)), PrimaryLookup::Hit);
        t.on_request_finished(R).unwrap();
        t.check_invariants().unwrap();
    }
}

#[test]
fn same_key_agrees_with_key_equality_at_every_length() {
    let mut keys = Vec::new();
    for len in 1..=64usize {
        let bytes: Vec<u8> = (0..len as u8).collect();
        keys.push(Key::new(&bytes).unwrap());
        for flip in [0, len / 2, len - 1] {
            let mut other = bytes.clone();
            other[flip] ^= 0x80;
            keys.push(Key::new(&other).unwrap());
        }
    }
    // Every pair; under Miri, where the 65,536 pairs take minutes, each key
    // with the keys of its own and the adjacent lengths (within 7 places
    // of it: four keys per length, in length order).
    let near = if cfg!(miri) { 7 } else { keys.len() };
    for (i, a) in keys.iter().enumerate() {
        for b in &keys[i.saturating_sub(near)..(i + near + 1).min(keys.len())] {
            assert_eq!(slots::same_key(a, b), a == b, "{a:?} {b:?}");
        }
    }
}

#[test]
fn arc_ghosts_of_tiny_tiers_fit_their_index() {
    // Ghost lists of a 1..8-slot tier fill up to capacity ghosts each.
    for cap in 1..=8u32 {
        let mut t = tier(cap, PolicyKind::Arc);
        t.begin_request(R).unwrap();
        // Both ghost lists are full after 4 x cap - 2 stores; under Miri,
        // a thousand times slower, the churn stops two stores later.
        let stores = if cfg!(miri) { 4 * cap } else { 64 };
        for i in 0..stores {
            store(&mut t, R, &[i]);
            if i % 2 == 0 {
                t.touch(R, &ks(&[i])).unwrap();
            }
        }
        let s = t.stats();
        assert!(s.arc_b1 <= cap && s.arc_b2 <= cap, "{cap}: {s:?}");
        assert!(s.arc_b1 + s.arc_b2 > cap, "{cap}: both ghost lists used");
        t.check_invariants().unwrap();
    }
}

#[test]
fn batched_lookups_agree_with_single_lookups() {
    // Small and large tiers; batches across read-ahead distances,
    // with misses, write-pending and ready keys, and repeats.  Under Miri,
    // which has no caches and takes minutes to fill 2^16 slots, the
    // larger tier is 256 + 8 slots.
    let large = if cfg!(miri) { 256 + 8 } else { (1 << 16) + 8 };
    for n in [64u32, large] {
        let mut t = tier(n, PolicyKind::Lru);
        t.begin_request(R).unwrap();
        let ready: Vec<u32> = (0..n / 2).collect();
        for chunk in ready.chunks(40) {
            store(&mut t, R, chunk);
        }
        let mut plan = StorePlan::default();
        let pending = ks(&[n / 2, n / 2 + 1, n / 2 + 2]);
        t.prepare_store(R, &pending, &mut plan).unwrap();
        assert_eq!(plan.to_store.len(), 3);
        let mut probe: Vec<Key> = (0..40u32).map(|i| k(i * (n / 80) % (n / 2))).collect();
        probe.extend((0..13u32).map(|i| k(n + 1000 + i)));
        probe.extend(&pending);
        probe.push(probe[0]);
        let mut out = vec![PrimaryLookup::Miss; probe.len() + 2];
        out[probe.len()] = PrimaryLookup::Hit;
        t.lookup_batch(&probe, &mut out);
        for (key, got) in probe.iter().zip(&out) {
            assert_eq!(*got, t.lookup(key), "{n}: {key:?}");
        }
        assert_eq!(
            out[probe.len()],
            PrimaryLookup::Hit,
            "extra entries left alone"
        );
        let kinds = |want: PrimaryLookup| out[..probe.len()].iter().filter(|&&r| r == want).count();
        assert_eq!(
            [
                PrimaryLookup::Hit,
                PrimaryLookup::Miss,
                PrimaryLookup::HitPending
            ]
            .map(kinds),
            [41, 13, 3],
            "{n}"
        );
    }
}

#[test]
fn keys_read_ahead_are_resolved_against_the_table_at_their_turn() {
    // A key absent when its index line was read ahead, stored before its
    // turn, is found; a key released before its turn is absent.
    let mut s = slots::Slots::new(64).unwrap();
    let keys = ks(&[1, 2, 3, 4]);
    let put = |s: &mut slots::Slots, key: &Key| {
        let slot = s.allocate().unwrap();
        let h = s.hash(key);
        s.occupy(slot, key, h, 0);
        slot
    };
    let one = put(&mut s, &keys[0]);
    let two = put(&mut s, &keys[1]);
    let at = |j: usize| &keys[j];
    let mut ahead = slots::Lookahead::new(&s, keys.len(), at);
    let three = put(&mut s, &keys[2]);
    s.release(two, s.hash(&keys[1]));
    let found: Vec<u32> = (0..keys.len()).map(|i| ahead.find(&s, i, at).1).collect();
    assert_eq!(found, vec![one, NIL, three, NIL]);
}

#[test]
fn commits_find_keys_that_moved_since_they_were_recorded() {
    // A request records where each key was; keys evicted and stored again
    // elsewhere by other requests, or gone, are still committed correctly.
    let mut t = tier(4, PolicyKind::Lru);
    let other = RequestId(2);
    t.begin_request(R).unwrap();
    t.begin_request(other).unwrap();
    store(&mut t, R, &[1, 2]); // slots 0, 1
    store(&mut t, other, &[3, 4]); // slots 2, 3
    // Other evicts 1 and 2 (oldest), then stores 1 again: it lands in a freed slot.
    store(&mut t, other, &[5, 6]);
    assert_eq!(t.lookup(&k(1)), PrimaryLookup::Miss);
    store(&mut t, other, &[1]);
    let slot_of_1 = t.slot_of(&k(1)).unwrap();
    assert_eq!(
        t.slot_of(&k(5)),
        Some(1),
        "5 took 2's slot, 1's old slot went to 6"
    );
    assert_ne!(slot_of_1, 0);
    t.on_request_finished(R).unwrap();
    // R's commit made 1 most recent, at its new slot; 2 is gone, and the
    // slot it had (now 5's) was not committed in its place.
    assert_eq!(order(&t).last(), Some(&k(1)));
    assert_eq!(order(&t), ks(&[4, 5, 6, 1]));
    t.check_invariants().unwrap();
}

#[test]
fn sizes_beyond_their_limits_are_invalid_arguments() {
    let config = |admission_table_size| PrimaryConfig {
        capacity: 8,
        store_threshold: 2,
        admission_table_size,
        ..Default::default()
    };
    let e = PrimaryTier::new(config(MAX_ADMISSION_TABLE_SIZE + 1)).unwrap_err();
    assert!(matches!(e, Error::InvalidArgument(_)), "{e}");
    assert!(e.to_string().contains("admission_table_size"), "{e}");
    // At the limit the table allocates nothing up front: it grows with offers.
    let mut t = PrimaryTier::new(config(MAX_ADMISSION_TABLE_SIZE)).unwrap();
    t.begin_request(R).unwrap();
    let mut plan = StorePlan::default();
    t.prepare_store(R, &ks(&[1, 2]), &mut plan).unwrap();
    assert!(plan.to_store.is_empty(), "first offers are only counted");
    t.prepare_store(R, &ks(&[1, 2]), &mut plan).unwrap();
    assert_eq!(plan.to_store, ks(&[1, 2]));
    t.check_invariants().unwrap();
}

#[test]
fn a_completion_acts_only_on_keys_its_own_request_planned() {
    // r1 plans A (slot 0); r2 names [A, B] and plans only B; r2 completes
    // every key it named.  A stays write pending for r1: dropping it would
    // let a later store reuse slot 0 while r1 still writes A there, and
    // publishing it would make A readable before anyone wrote it.
    let (r1, r2, r3) = (RequestId(1), RequestId(2), RequestId(3));
    for p in BOTH {
        for success in [false, true] {
            let what = format!("{p:?} success {success}");
            let mut t = tier(2, p);
            for r in [r1, r2, r3] {
                t.begin_request(r).unwrap();
            }
            let mut plan = StorePlan::default();
            t.prepare_store(r1, &ks(&[1]), &mut plan).unwrap();
            assert_eq!(plan.slots, vec![0], "{what}");
            t.prepare_store(r2, &ks(&[1, 2]), &mut plan).unwrap();
            assert_eq!(
                (plan.to_store.clone(), plan.slots.clone()),
                (ks(&[2]), vec![1])
            );
            assert_eq!(
                (t.stores_pending(r1), t.stores_pending(r2)),
                (1, 1),
                "{what}"
            );
            let r = t.complete_store(r2, &ks(&[1, 2]), success);
            assert_eq!(
                r,
                CompleteStoreReport {
                    ready: success as usize,
                    dropped: !success as usize,
                    foreign: 1,
                    ..Default::default()
                },
                "{what}"
            );
            assert_eq!(
                t.ref_count(&k(1)),
                Some(-1),
                "{what}: A still write pending"
            );
            assert_eq!(t.slot_of(&k(1)), Some(0), "{what}");
            assert_eq!(
                (t.stores_pending(r1), t.stores_pending(r2)),
                (1, 0),
                "{what}"
            );
            // A's slot is neither free nor evictable.
            assert_eq!(
                t.prepare_store(r3, &ks(&[3, 4]), &mut plan).unwrap(),
                StoreOutcome::Refused,
                "{what}"
            );
            if !success {
                t.prepare_store(r3, &ks(&[3]), &mut plan).unwrap();
                assert_eq!(plan.slots, vec![1], "{what}: only B's slot was freed");
                t.complete_store(r3, &ks(&[3]), true);
            }
            let r = t.complete_store(r1, &ks(&[1]), true);
            assert_eq!((r.ready, r.foreign), (1, 0), "{what}");
            assert_eq!(t.lookup(&k(1)), PrimaryLookup::Hit, "{what}");
            assert_eq!(t.slot_of(&k(1)), Some(0), "{what}");
            assert_eq!(t.stats().foreign_completions, 1, "{what}");
            t.check_invariants().unwrap();
        }
    }
}

#[test]
fn a_store_completion_never_finishes_a_promotions_slot_nor_the_reverse() {
    let (r1, r2) = (RequestId(1), RequestId(2));
    for success in [false, true] {
        let what = format!("success {success}");
        let mut t = tier(4, PolicyKind::Lru);
        t.begin_request(r1).unwrap();
        t.begin_request(r2).unwrap();
        let mut plan = StorePlan::default();
        t.prepare_promotion(r1, &ks(&[9]), &mut plan).unwrap();
        assert_eq!(plan.slots, vec![0]);
        assert_eq!(t.stores_pending(r1), 0, "a promotion is not r1's store");
        t.prepare_store(r2, &ks(&[2]), &mut plan).unwrap();
        for r in [r1, r2] {
            let rep = t.complete_store(r, &ks(&[9, 2]), success);
            assert_eq!(rep.foreign, if r == r1 { 2 } else { 1 }, "{what}");
            assert_eq!(t.ref_count(&k(9)), Some(-1), "{what}: promotion left alone");
        }
        // A promotion's completion leaves a request's write-pending key alone.
        t.prepare_store(r2, &ks(&[5]), &mut plan).unwrap();
        let rep = t.complete_promotion(&ks(&[9, 5]), true);
        assert_eq!((rep.ready, rep.foreign), (1, 1), "{what}");
        assert_eq!(t.ref_count(&k(9)), Some(0), "{what}");
        assert_eq!(t.ref_count(&k(5)), Some(-1), "{what}");
        assert_eq!(t.stores_pending(r2), 1, "{what}");
        t.check_invariants().unwrap();
    }
}

#[test]
fn a_plan_may_be_completed_in_several_calls_and_after_its_request_finished() {
    let mut t = tier(4, PolicyKind::Lru);
    t.begin_request(R).unwrap();
    let mut plan = StorePlan::default();
    t.prepare_store(R, &ks(&[1, 2, 3]), &mut plan).unwrap();
    assert_eq!(t.stores_pending(R), 3);
    assert_eq!(t.complete_store(R, &ks(&[1]), true).ready, 1);
    assert_eq!(t.stores_pending(R), 2);
    t.on_request_finished(R).unwrap();
    let r = t.complete_store(R, &ks(&[2, 3]), true);
    assert_eq!(
        r.ready, 2,
        "completions may arrive after the request finished"
    );
    assert_eq!(t.stores_pending(R), 0);
    for n in 1..=3 {
        assert_eq!(t.lookup(&k(n)), PrimaryLookup::Hit);
    }
    t.check_invariants().unwrap();
}

#[test]
fn a_writer_is_forgotten_once_done_or_reset_and_never_confused_with_a_later_one() {
    let (r1, r2) = (RequestId(1), RequestId(2));
    let mut t = tier(4, PolicyKind::Lru);
    t.begin_request(r1).unwrap();
    t.begin_request(r2).unwrap();
    // r1 done: whatever stood for it may stand for r2 now, but r1's late
    // completion of r2's key is still foreign.
    store(&mut t, r1, &[1]);
    let mut plan = StorePlan::default();
    t.prepare_store(r2, &ks(&[2]), &mut plan).unwrap();
    assert_eq!(t.complete_store(r1, &ks(&[2]), true).foreign, 1);
    assert_eq!(t.ref_count(&k(2)), Some(-1));
    // A reset forgets every writer.
    t.prepare_store(r1, &ks(&[3]), &mut plan).unwrap();
    t.reset();
    assert_eq!((t.stores_pending(r1), t.stores_pending(r2)), (0, 0));
    assert_eq!(t.complete_store(r1, &ks(&[3]), true).ignored, 1);
    t.prepare_store(r2, &ks(&[3]), &mut plan).unwrap();
    assert_eq!(plan.slots, vec![0]);
    let r = t.complete_store(r1, &ks(&[3]), false);
    assert_eq!(
        (r.foreign, r.dropped),
        (1, 0),
        "r1's write of 3 ended at the reset"
    );
    assert_eq!(t.complete_store(r2, &ks(&[3]), true).ready, 1);
    t.check_invariants().unwrap();
}
