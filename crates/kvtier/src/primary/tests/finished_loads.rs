//! Unit tests of loads that outlive their request: a request that finishes
//! with keys still pinned by its `prepare_load` (an aborted request whose
//! asynchronous load is in flight) releases them later with
//! `complete_load`, and only them.

use super::*;

const OTHER: RequestId = RequestId(2);

/// A tier holding keys 1..=4 (ready, idle), with requests `R` and `OTHER`
/// active.
fn loaded_tier(p: PolicyKind) -> PrimaryTier {
    let mut t = tier(4, p);
    t.request_begin(R).unwrap();
    t.request_begin(OTHER).unwrap();
    store(&mut t, OTHER, &[1, 2, 3, 4]);
    t
}

fn unknown_request(r: Result<()>) -> bool {
    matches!(r, Err(Error::UnknownRequest(_)))
}

#[test]
fn a_finished_request_completes_only_the_loads_it_still_holds() {
    for p in BOTH {
        let mut t = loaded_tier(p);
        let mut slots = Vec::new();
        // R pins 1 (twice) and 2; OTHER pins 1 and 3.
        t.prepare_load(R, &ks(&[1, 2, 1]), &mut slots).unwrap();
        t.prepare_load(OTHER, &ks(&[1, 3]), &mut slots).unwrap();
        t.request_finished(R).unwrap();
        assert!(!t.is_active(R), "{p:?}: a finished request is not active");
        t.check_invariants().unwrap();

        // Every other call of R is an unknown request, changing nothing.
        let before = (t.stats(), order(&t));
        assert!(unknown_request(t.touch(R, &ks(&[1]))));
        assert!(unknown_request(t.prepare_load(R, &ks(&[4]), &mut slots)));
        assert!(unknown_request(t.set_positions(R, &ks(&[1]), &[16])));
        assert!(unknown_request(t.request_finished(R)));
        let mut plan = StorePlan::default();
        assert!(matches!(
            t.prepare_store(R, &ks(&[5]), &mut plan),
            Err(Error::UnknownRequest(_))
        ));
        // Keys R does not hold are refused, naming the position: OTHER's
        // key 3, an idle key, an absent key; a batch asking more pins of
        // a key than R holds.
        for (keys, index) in [
            (vec![3], 0),
            (vec![2, 4], 1),
            (vec![9], 0),
            (vec![1, 1, 1], 2),
            (vec![2, 2], 1),
        ] {
            let e = t.complete_load(R, &ks(&keys)).unwrap_err();
            assert!(
                matches!(&e, Error::KeyState { index: i, .. } if *i == index),
                "{p:?} {keys:?}: {e}"
            );
            assert!(e.to_string().contains("this request"), "{e}");
        }
        assert_eq!((t.stats(), order(&t)), before, "{p:?}: nothing changed");
        assert_eq!(
            [1, 2, 3].map(|n| t.ref_count(&k(n))),
            [Some(3), Some(1), Some(1)]
        );

        // R's own pins, in as many calls as it likes.
        t.complete_load(R, &ks(&[1, 2])).unwrap();
        assert_eq!(
            [1, 2, 3].map(|n| t.ref_count(&k(n))),
            [Some(2), Some(0), Some(1)]
        );
        let e = t.complete_load(R, &ks(&[2])).unwrap_err();
        assert!(matches!(e, Error::KeyState { index: 0, .. }), "{e}");
        t.check_invariants().unwrap();
        t.complete_load(R, &ks(&[1])).unwrap();
        assert_eq!(t.ref_count(&k(1)), Some(1), "{p:?}: OTHER's pin stays");
        // The last pin released: R is forgotten.
        assert!(unknown_request(t.complete_load(R, &ks(&[1]))));
        assert_eq!(t.ref_count(&k(1)), Some(1));
        // OTHER still releases its own.
        t.complete_load(OTHER, &ks(&[1, 3])).unwrap();
        assert_eq!(t.stats().pinned, 0);
        t.check_invariants().unwrap();
    }
}

#[test]
fn a_refused_unpin_of_a_finished_request_keeps_its_pins() {
    // R holds a pin of 1 that a cascade's unpin released (misuse the tier
    // cannot tell, cascades' pins being nobody's): R's release of 1 fails
    // at the unpin itself, and R keeps the pins of the batch.
    for p in BOTH {
        let mut t = loaded_tier(p);
        let mut slots = Vec::new();
        t.prepare_load(R, &ks(&[1, 2]), &mut slots).unwrap();
        t.unpin_for_transfer(&ks(&[1])).unwrap();
        t.request_finished(R).unwrap();
        let e = t.complete_load(R, &ks(&[2, 1])).unwrap_err();
        assert!(matches!(e, Error::KeyState { index: 1, .. }), "{e}");
        assert!(e.to_string().contains("not pinned"), "{e}");
        assert_eq!(t.ref_count(&k(2)), Some(1), "{p:?}: nothing changed");
        t.complete_load(R, &ks(&[2])).unwrap();
        assert_eq!(t.ref_count(&k(2)), Some(0));
        // Only a reset forgets the pin that can no longer be released.
        t.reset();
        assert!(unknown_request(t.complete_load(R, &ks(&[1]))));
        t.check_invariants().unwrap();
    }
}

#[test]
fn a_finish_commits_at_once_whatever_loads_are_still_pinned() {
    // The same calls with the loads completed before or after the finish
    // leave the same recency: the finish commits, the late completion
    // only unpins.
    for p in BOTH {
        let run = |late: bool| {
            let mut t = loaded_tier(p);
            let mut slots = Vec::new();
            t.prepare_load(R, &ks(&[3, 1]), &mut slots).unwrap();
            if !late {
                t.complete_load(R, &ks(&[3, 1])).unwrap();
            }
            t.request_finished(R).unwrap();
            let at_finish = order(&t);
            if late {
                t.complete_load(R, &ks(&[1])).unwrap();
                t.complete_load(R, &ks(&[3])).unwrap();
            }
            t.check_invariants().unwrap();
            (at_finish, order(&t), t.stats())
        };
        let (early, late) = (run(false), run(true));
        assert_eq!(early.0, late.0, "{p:?}: the finish commits the same");
        assert_eq!((early.1, early.2), (late.1, late.2), "{p:?}");
    }
}

#[test]
fn a_reset_forgets_finished_requests_and_their_id_is_busy_until_then() {
    for p in BOTH {
        let mut t = loaded_tier(p);
        let mut slots = Vec::new();
        t.prepare_load(R, &ks(&[1]), &mut slots).unwrap();
        t.request_finished(R).unwrap();
        // The id still names the finished request's loads.
        assert!(matches!(
            t.request_begin(R),
            Err(Error::DuplicateRequest(_))
        ));
        t.reset();
        assert!(unknown_request(t.complete_load(R, &ks(&[1]))));
        t.request_begin(R).unwrap();
        t.check_invariants().unwrap();
    }
}

#[test]
fn a_reset_also_forgets_the_pins_an_active_request_holds() {
    // After a reset an active request holds no pin: finishing it forgets
    // it at once.
    for p in BOTH {
        let mut t = loaded_tier(p);
        let mut slots = Vec::new();
        t.prepare_load(R, &ks(&[1]), &mut slots).unwrap();
        t.reset();
        t.request_finished(R).unwrap();
        assert!(unknown_request(t.complete_load(R, &ks(&[1]))));
        t.request_begin(R).unwrap();
        t.check_invariants().unwrap();
    }
}

/// The tier of `loaded_tier` with request `T` active too.
const T: RequestId = RequestId(3);

#[test]
fn a_late_completion_never_releases_a_pin_another_request_took() {
    // R pins 1 and finishes; OTHER pins 1 and unpins it twice (an active
    // request may unpin any pinned key, as in vLLM): its second unpin
    // took R's pin.  T pins 1; R's late completion must not release T's
    // pin, or T's slot would be handed to a store while T loads from it.
    for p in BOTH {
        let mut t = tier(1, p);
        for r in [R, OTHER, T] {
            t.request_begin(r).unwrap();
        }
        store(&mut t, OTHER, &[1]);
        let mut slots = Vec::new();
        t.prepare_load(R, &ks(&[1]), &mut slots).unwrap();
        t.request_finished(R).unwrap();
        t.prepare_load(OTHER, &ks(&[1]), &mut slots).unwrap();
        t.complete_load(OTHER, &ks(&[1])).unwrap();
        t.complete_load(OTHER, &ks(&[1])).unwrap();
        assert_eq!(t.ref_count(&k(1)), Some(0));
        t.prepare_load(T, &ks(&[1]), &mut slots).unwrap();
        let loading = slots[0];
        // R's late completion succeeds (as in vLLM) and releases nothing.
        let before = t.stats().spent_load_completions;
        t.complete_load(R, &ks(&[1])).unwrap();
        assert_eq!(t.ref_count(&k(1)), Some(1), "{p:?}: T's pin stays");
        assert_eq!(t.stats().spent_load_completions, before + 1, "{p:?}");
        assert!(unknown_request(t.complete_load(R, &ks(&[1]))), "{p:?}");
        t.check_invariants().unwrap();
        // T's slot is not handed to a store while T loads from it.
        let mut plan = StorePlan::default();
        assert_eq!(
            t.prepare_store(OTHER, &ks(&[2]), &mut plan).unwrap(),
            StoreOutcome::Refused,
            "{p:?}: slot {loading} is T's"
        );
        t.complete_load(T, &ks(&[1])).unwrap();
        assert_eq!(t.ref_count(&k(1)), Some(0));
        t.check_invariants().unwrap();
    }
}

#[test]
fn a_pin_taken_while_its_request_was_active_is_not_released_after_its_finish() {
    // OTHER's extra unpin takes R's pin while R is still active; R
    // finishes holding it on record; T pins 1; R's late completion
    // releases nothing.
    for p in BOTH {
        let mut t = tier(2, p);
        for r in [R, OTHER, T] {
            t.request_begin(r).unwrap();
        }
        store(&mut t, OTHER, &[1, 2]);
        let mut slots = Vec::new();
        t.prepare_load(R, &ks(&[1, 2]), &mut slots).unwrap();
        t.complete_load(OTHER, &ks(&[1])).unwrap();
        t.request_finished(R).unwrap();
        t.prepare_load(T, &ks(&[1]), &mut slots).unwrap();
        // Key 2's pin is R's own: released; key 1's was taken.
        t.complete_load(R, &ks(&[2, 1])).unwrap();
        assert_eq!(
            [1, 2].map(|n| t.ref_count(&k(n))),
            [Some(1), Some(0)],
            "{p:?}"
        );
        assert_eq!(t.stats().spent_load_completions, 1, "{p:?}");
        assert!(unknown_request(t.complete_load(R, &ks(&[1]))), "{p:?}");
        t.check_invariants().unwrap();
    }
}

#[test]
fn a_taken_pin_is_charged_once_and_a_key_never_pinned_is_still_refused() {
    for p in BOTH {
        let mut t = loaded_tier(p);
        t.request_begin(T).unwrap();
        let mut slots = Vec::new();
        // R pins 1 twice and 2 once; OTHER takes one pin of 1.
        t.prepare_load(R, &ks(&[1, 1, 2]), &mut slots).unwrap();
        t.complete_load(OTHER, &ks(&[1])).unwrap();
        t.request_finished(R).unwrap();
        t.prepare_load(T, &ks(&[1]), &mut slots).unwrap();
        assert_eq!(t.ref_count(&k(1)), Some(2));
        // Key 3 R never pinned: refused, nothing changed.
        let before = (t.stats(), order(&t));
        let e = t.complete_load(R, &ks(&[1, 3])).unwrap_err();
        assert!(matches!(e, Error::KeyState { index: 1, .. }), "{e}");
        assert_eq!((t.stats(), order(&t)), before, "{p:?}: nothing changed");
        // Two completions of 1: one charged, one released.
        t.complete_load(R, &ks(&[1, 1])).unwrap();
        assert_eq!(t.ref_count(&k(1)), Some(1), "{p:?}: T's pin stays");
        assert_eq!(t.stats().spent_load_completions, 1);
        t.complete_load(R, &ks(&[2])).unwrap();
        assert!(unknown_request(t.complete_load(R, &ks(&[2]))), "{p:?}");
        t.complete_load(T, &ks(&[1])).unwrap();
        assert_eq!(t.stats().pinned, 0);
        t.check_invariants().unwrap();
    }
}

#[test]
fn a_refused_late_completion_gives_back_the_spent_pins_it_charged() {
    // OTHER's unpin took R's pin of 1; a cascade's unpin took R's pin of 2
    // (misuse the tier cannot tell).  R's completion of [1, 2] charges 1,
    // then fails at 2's unpin: the charge is given back, so a later
    // completion of 1 alone is charged (nothing released) and succeeds.
    for p in BOTH {
        let mut t = loaded_tier(p);
        let mut slots = Vec::new();
        t.prepare_load(R, &ks(&[1, 2]), &mut slots).unwrap();
        t.complete_load(OTHER, &ks(&[1])).unwrap();
        t.unpin_for_transfer(&ks(&[2])).unwrap();
        t.request_finished(R).unwrap();
        let e = t.complete_load(R, &ks(&[1, 2])).unwrap_err();
        assert!(matches!(e, Error::KeyState { index: 1, .. }), "{p:?}: {e}");
        assert_eq!(t.stats().spent_load_completions, 0, "{p:?}");
        t.check_invariants().unwrap();
        t.complete_load(R, &ks(&[1])).unwrap();
        assert_eq!(t.stats().spent_load_completions, 1, "{p:?}");
        assert_eq!(t.ref_count(&k(1)), Some(0), "{p:?}");
        t.check_invariants().unwrap();
    }
}

#[test]
fn a_refused_unpin_of_an_active_request_keeps_its_pins_and_spends_nothing() {
    // R's completion of [1 (its own), 3 (OTHER's), 9 (absent)] fails at
    // 9: R still holds its pin of 1 on record, and no pin of 3 was spent,
    // so OTHER's late completion of 3 releases it.
    for p in BOTH {
        let mut t = loaded_tier(p);
        let mut slots = Vec::new();
        t.prepare_load(R, &ks(&[1]), &mut slots).unwrap();
        t.prepare_load(OTHER, &ks(&[3]), &mut slots).unwrap();
        t.request_finished(OTHER).unwrap();
        let e = t.complete_load(R, &ks(&[1, 3, 9])).unwrap_err();
        assert!(matches!(e, Error::KeyState { index: 2, .. }), "{p:?}: {e}");
        t.check_invariants().unwrap();
        t.complete_load(OTHER, &ks(&[3])).unwrap();
        assert_eq!(t.ref_count(&k(3)), Some(0), "{p:?}: released, not charged");
        assert_eq!(t.stats().spent_load_completions, 0, "{p:?}");
        t.request_finished(R).unwrap();
        t.complete_load(R, &ks(&[1])).unwrap();
        assert_eq!(t.ref_count(&k(1)), Some(0), "{p:?}: R's own pin, late");
        assert!(unknown_request(t.complete_load(R, &ks(&[1]))), "{p:?}");
        t.check_invariants().unwrap();
    }
}
