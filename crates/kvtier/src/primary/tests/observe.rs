//! Unit tests of what the tier reports: its events (stored, removed,
//! cleared; never a removal of a key it did not announce) in a bounded
//! buffer, and its stats (gauges and usage fractions).

use super::*;
use crate::events::EventKind;

#[test]
fn events_stored_removed_cleared_and_unannounced_keys_are_never_removed() {
    for p in BOTH {
        let mut t = tier(2, p);
        t.request_begin(R).unwrap();
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
    t.request_begin(R).unwrap();
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
    let mut off = PrimaryTier::new(PrimaryConfig {
        capacity: 4,
        event_capacity: 0,
        ..Default::default()
    })
    .unwrap();
    off.request_begin(R).unwrap();
    store(&mut off, R, &[1, 2, 3]);
    assert_eq!((off.events_queued(), off.stats().events_dropped), (0, 0));
}

#[test]
fn stats_gauges_and_usage_fractions() {
    let mut t = tier(10, PolicyKind::Lru);
    t.request_begin(R).unwrap();
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
fn the_loads_counter_counts_every_key_of_every_load() {
    let mut t = tier(8, PolicyKind::Lru);
    t.request_begin(R).unwrap();
    store(&mut t, R, &[1, 2, 3, 4]);
    let mut slots = Vec::new();
    t.prepare_load(R, &ks(&[1, 2, 3]), &mut slots).unwrap();
    assert_eq!(t.stats().loads, 3);
    // A key presented twice counts twice; a refused load counts nothing,
    // nor does a transfer's pin.
    t.prepare_load(R, &ks(&[4, 2, 2]), &mut slots).unwrap();
    assert_eq!(t.stats().loads, 6);
    assert!(t.prepare_load(R, &ks(&[1, 9]), &mut slots).is_err());
    t.pin_for_transfer(&ks(&[1]), &mut slots).unwrap();
    assert_eq!(t.stats().loads, 6);
    t.prepare_load(R, &ks(&[3]), &mut slots).unwrap();
    assert_eq!(t.stats().loads, 7);
}
