//! Unit tests of transfer pins (a job's pins, without an owning request):
//! they protect keys from eviction without being accesses, and the calls
//! that pin as a completion makes keys ready or unpin in stated slots
//! answer exactly as their plain forms.

use super::*;

#[test]
fn transfer_pins_protect_keys_and_are_not_accesses() {
    for p in BOTH {
        let mut t = tier(2, p);
        t.request_begin(R).unwrap();
        store(&mut t, R, &[1, 2]);
        t.request_finished(R).unwrap();
        assert_eq!(order(&t), ks(&[2, 1]));
        let mut slots = Vec::new();
        t.pin_for_transfer(&ks(&[2]), &mut slots).unwrap();
        assert_eq!(slots, vec![1]);
        let q = RequestId(2);
        t.request_begin(q).unwrap();
        let plan = store(&mut t, q, &[3]);
        assert_eq!(plan.evicted, ks(&[1]), "pinned 2 is not evictable");
        assert!(t.unpin_for_transfer(&ks(&[3])).is_err());
        t.unpin_for_transfer(&ks(&[2])).unwrap();
        assert!(t.unpin_for_transfer(&ks(&[2])).is_err());
        assert_eq!(order(&t)[0], k(2), "the pin did not change 2's rank");
        t.check_invariants().unwrap();
    }
}

/// A completion that pins what it made ready (`complete_store_pinned`)
/// leaves the tier exactly as the completion followed by as many
/// `pin_for_transfer` calls would: the same keys, slots, ref counts,
/// eviction order, events and stats, also for keys an eviction parked
/// while they were being written, and after the pins are undone.  With
/// no pin it is the plain completion and hands nothing back.
#[test]
fn a_pinning_completion_is_a_completion_then_transfer_pins() {
    for p in BOTH {
        for pins in [0u32, 1, 3] {
            let run = |pinned_at_once: bool| {
                let mut t = tier(3, p);
                t.request_begin(R).unwrap();
                let mut plan = StorePlan::default();
                // 2 and 3 are written first, then 1 stored: an eviction for
                // 4 meets 2 and 3 while they are write pending, then takes 1.
                t.prepare_store(R, &ks(&[2, 3]), &mut plan).unwrap();
                store(&mut t, R, &[1]);
                let q = RequestId(2);
                t.request_begin(q).unwrap();
                let evicted = store(&mut t, q, &[4]).evicted;
                assert_eq!(evicted, ks(&[1]));
                // 5 is not R's to complete: left alone and counted.
                let named = ks(&[2, 5, 3, 2]);
                let (mut ready, mut slots) = (Vec::new(), Vec::new());
                let report = if pinned_at_once {
                    t.complete_store_pinned(R, &named, true, pins, &mut ready, &mut slots)
                } else {
                    let report = t.complete_store(R, &named, true);
                    if pins > 0 {
                        ready = ks(&[2, 3]);
                    }
                    for _ in 0..pins {
                        t.pin_for_transfer(&ready, &mut slots).unwrap();
                    }
                    report
                };
                assert_eq!((report.ready, report.ignored), (2, 1));
                assert_eq!(report.already_ready, 1, "the repeat of 2");
                let refs: Vec<_> = ks(&[2, 3]).iter().map(|k| t.ref_count(k)).collect();
                t.check_invariants().unwrap();
                let before_unpin = (t.eviction_order(), t.stats());
                for _ in 0..pins {
                    t.unpin_for_transfer(&ready).unwrap();
                }
                t.check_invariants().unwrap();
                let mut events = Vec::new();
                t.take_events(&mut events);
                (
                    ready,
                    slots,
                    refs,
                    before_unpin,
                    t.eviction_order(),
                    t.stats(),
                    events,
                )
            };
            let at_once = run(true);
            let handed_back = if pins > 0 { ks(&[2, 3]) } else { Vec::new() };
            assert_eq!(at_once.0, handed_back, "{p:?} {pins}");
            assert_eq!(at_once.1.len(), handed_back.len(), "{p:?} {pins}");
            assert_eq!(at_once.2, vec![Some(pins as i32); 2], "{p:?} {pins}");
            assert_eq!(at_once, run(false), "{p:?} {pins}");
        }
    }
}

#[test]
fn an_unpin_for_transfer_in_stated_slots_gives_the_answers_of_one_without() {
    // Stated slots right, wrong (another key's, a free one, NIL, past the
    // end) or too few: every unpin has the same outcome, counts and error
    // as one without slots.
    for p in BOTH {
        let setup = || {
            let mut t = tier(8, p);
            t.request_begin(R).unwrap();
            store(&mut t, R, &[1, 2, 3]);
            let mut slots = Vec::new();
            t.pin_for_transfer(&ks(&[1, 2, 3]), &mut slots).unwrap();
            (t, slots)
        };
        let (_, pinned) = setup();
        let cases: [(Vec<u32>, Vec<u32>); 6] = [
            (vec![1, 2, 3], pinned.clone()),
            (vec![3, 1], vec![pinned[0], pinned[1]]),
            (vec![1, 2, 3], vec![7, NIL, u32::MAX - 1]),
            (vec![2, 2], pinned.clone()),
            (vec![1, 9], pinned.clone()),
            (vec![1, 2, 3], vec![pinned[0]]),
        ];
        for (ns, stated) in cases {
            let (mut with, _) = setup();
            let (mut without, _) = setup();
            let a = with.unpin_for_transfer_in(&ks(&ns), &stated);
            let b = without.unpin_for_transfer(&ks(&ns));
            assert_eq!(
                a.as_ref().map_err(ToString::to_string),
                b.as_ref().map_err(ToString::to_string),
                "{p:?} {ns:?} {stated:?}"
            );
            for n in [1, 2, 3, 9] {
                assert_eq!(
                    with.ref_count(&k(n)),
                    without.ref_count(&k(n)),
                    "{p:?} {ns:?}"
                );
            }
            assert_eq!(with.stats(), without.stats(), "{p:?} {ns:?}");
            with.check_invariants().unwrap();
        }
    }
}
