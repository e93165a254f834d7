//! Hints (`hints.rs`): a request's calls after its lookup answer exactly
//! as without hints, whatever came or went in between and whichever keys
//! they name.

use super::*;

/// A small deterministic generator (xorshift64*).
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

/// One tier whose lookups leave hints, one whose lookups do not: every
/// call goes to both, and both must answer alike.
struct Pair {
    hinted: PrimaryTier,
    plain: PrimaryTier,
}

impl Pair {
    fn new(capacity: u32, policy: PolicyKind) -> Pair {
        Pair {
            hinted: tier(capacity, policy),
            plain: tier(capacity, policy),
        }
    }

    fn lookup(&mut self, req: RequestId, keys: &[Key]) -> PrefixLookup {
        // In two parts, as the manager may ask.
        let cut = keys.len() / 2;
        let first = self
            .hinted
            .lookup_prefix_for(req, 0, cut, |j| keys[j].as_bytes());
        let a = if first.hits < cut {
            first
        } else {
            let rest = self
                .hinted
                .lookup_prefix_for(req, cut, keys.len() - cut, |j| keys[cut + j].as_bytes());
            PrefixLookup {
                hits: cut + rest.hits,
                stop: rest.stop,
            }
        };
        assert_eq!(a, self.plain.lookup_prefix(keys));
        a
    }

    fn check(&self, what: &str) {
        assert_eq!(
            self.hinted.eviction_order(),
            self.plain.eviction_order(),
            "{what}"
        );
        self.hinted.check_invariants().unwrap();
    }
}

/// Compares two results by success and, on success, value.
fn same<T: PartialEq + std::fmt::Debug>(a: Result<T>, b: Result<T>, what: &str) {
    match (a, b) {
        (Ok(a), Ok(b)) => assert_eq!(a, b, "{what}"),
        (Err(a), Err(b)) => assert_eq!(a.to_string(), b.to_string(), "{what}"),
        (a, b) => panic!("{what}: {a:?} vs {b:?}"),
    }
}

#[test]
fn calls_after_a_lookup_answer_as_without_hints() {
    // Under Miri, a few short runs (the interpreter is slow).
    let (seeds, steps) = if cfg!(miri) { (2, 60) } else { (20, 400) };
    for policy in BOTH {
        for seed in 1..=seeds {
            let mut rng = Rng(seed * 0x9e37_79b9);
            let mut p = Pair::new(24, policy);
            let mut plan = StorePlan::default();
            let mut active: Vec<(RequestId, Vec<Key>, usize)> = Vec::new();
            let mut next_req = 1;
            for step in 0..steps {
                let what = format!("{policy:?} seed {seed} step {step}");
                match rng.below(6) {
                    // A request begins and looks up a chain of keys.
                    0 | 1 if active.len() < 4 => {
                        let req = RequestId(next_req);
                        next_req += 1;
                        p.hinted.request_begin(req).unwrap();
                        p.plain.request_begin(req).unwrap();
                        let start = rng.below(40) as u32;
                        let keys =
                            ks(&(start..start + 1 + rng.below(12) as u32).collect::<Vec<_>>());
                        let found = p.lookup(req, &keys);
                        active.push((req, keys, found.hits));
                    }
                    // A load of the hits, or of other keys (shifted, or
                    // the whole chain), then its touch and unpin.
                    2 if !active.is_empty() => {
                        let (req, keys, hits) =
                            active[rng.below(active.len() as u64) as usize].clone();
                        let from = if rng.below(4) == 0 { 1 } else { 0 };
                        let to = if rng.below(4) == 0 { keys.len() } else { hits };
                        let named = &keys[from.min(to)..to];
                        let (mut a, mut b) = (Vec::new(), Vec::new());
                        let pinned = p.hinted.prepare_load(req, named, &mut a);
                        let plain = p.plain.prepare_load(req, named, &mut b);
                        let ok = pinned.is_ok();
                        same(pinned, plain, &what);
                        assert_eq!(a, b, "{what}");
                        same(p.hinted.touch(req, named), p.plain.touch(req, named), &what);
                        if ok && rng.below(2) == 0 {
                            same(
                                p.hinted.complete_load(req, named),
                                p.plain.complete_load(req, named),
                                &what,
                            );
                        }
                    }
                    // A store of the chain's misses: keys come and go.
                    3 if !active.is_empty() => {
                        let (req, keys, hits) =
                            active[rng.below(active.len() as u64) as usize].clone();
                        let rest = &keys[hits..];
                        let a = p.hinted.prepare_store(req, rest, &mut plan);
                        let mut other = StorePlan::default();
                        let b = p.plain.prepare_store(req, rest, &mut other);
                        same(a, b, &what);
                        assert_eq!(plan, other, "{what}");
                        let done = plan.to_store.clone();
                        let ok = rng.below(4) != 0;
                        assert_eq!(
                            p.hinted.complete_store(req, &done, ok),
                            p.plain.complete_store(req, &done, ok),
                            "{what}"
                        );
                    }
                    // A request finishes (its pins stay: a later unpin of
                    // an absent or unpinned key is an error for both).
                    4 if !active.is_empty() => {
                        let (req, _, _) = active.remove(rng.below(active.len() as u64) as usize);
                        same(
                            p.hinted.request_finished(req),
                            p.plain.request_finished(req),
                            &what,
                        );
                    }
                    // A lookup again, of another chain.
                    _ if !active.is_empty() => {
                        let i = rng.below(active.len() as u64) as usize;
                        let start = rng.below(40) as u32;
                        let keys =
                            ks(&(start..start + 1 + rng.below(12) as u32).collect::<Vec<_>>());
                        let found = p.lookup(active[i].0, &keys);
                        active[i] = (active[i].0, keys, found.hits);
                    }
                    _ => {}
                }
                p.check(&what);
            }
        }
    }
}

#[test]
fn a_hint_whose_slot_now_holds_another_key_is_not_trusted() {
    for policy in BOTH {
        let mut p = Pair::new(4, policy);
        let (q, r, s) = (RequestId(1), RequestId(2), RequestId(3));
        for t in [&mut p.hinted, &mut p.plain] {
            for req in [q, r, s] {
                t.request_begin(req).unwrap();
            }
            store(t, q, &[0, 1, 2, 3]);
        }
        assert_eq!(p.lookup(r, &ks(&[0, 1])).hits, 2);
        // Key 0 leaves, key 9 takes its slot: the hint of position 0 now
        // names a slot holding another key, whose hash is not the hint's.
        for t in [&mut p.hinted, &mut p.plain] {
            let mut plan = StorePlan::default();
            t.prepare_store(s, &ks(&[9]), &mut plan).unwrap();
            t.complete_store(s, &plan.to_store, true);
            // Positions are found by hash: a wrong one would leave key 9
            // out of the request's rank at its first access (lru).
            t.set_positions(r, &ks(&[9, 1]), &[16, 32]).unwrap();
        }
        for named in [ks(&[9, 1]), ks(&[0, 1]), ks(&[1, 0])] {
            let (mut a, mut b) = (Vec::new(), Vec::new());
            same(
                p.hinted.prepare_load(r, &named, &mut a),
                p.plain.prepare_load(r, &named, &mut b),
                "load",
            );
            assert_eq!(a, b);
            p.check("after the load");
            same(p.hinted.touch(r, &named), p.plain.touch(r, &named), "touch");
            same(
                p.hinted.complete_load(r, &named),
                p.plain.complete_load(r, &named),
                "unpin",
            );
        }
        same(
            p.hinted.request_finished(r),
            p.plain.request_finished(r),
            "finish",
        );
        p.check("after the finish");
    }
}

#[test]
fn hinted_loads_reading_ahead_answer_as_without_reading_ahead() {
    // A request's load, touch and unpin after its lookup, on a tier that
    // reads ahead and one that does not: batches shorter than, as long as
    // and longer than the read-ahead distance, found at their hints or
    // (after keys came and went) by hash, get the same slots and leave the
    // same order.
    use crate::primary::hints::RECORD_AHEAD;
    let longest = 2 * RECORD_AHEAD + 3;
    let capacity = 2 * longest as u32 + 4;
    // Under Miri (a thousand times slower), the lengths around the
    // distance and the longest.
    let lens: Vec<usize> = if cfg!(miri) {
        vec![1, RECORD_AHEAD, RECORD_AHEAD + 1, longest]
    } else {
        (1..=longest).collect()
    };
    for policy in BOTH {
        for &len in &lens {
            for moved in [false, true] {
                let what = format!("{policy:?}, {len} keys, moved {moved}");
                let mut tiers = [tier(capacity, policy), tier(capacity, policy)];
                tiers[0].set_read_ahead(true);
                tiers[1].set_read_ahead(false);
                let mut seen = [Vec::new(), Vec::new()];
                for (t, out) in tiers.iter_mut().zip(&mut seen) {
                    let other = RequestId(2);
                    t.request_begin(R).unwrap();
                    t.request_begin(other).unwrap();
                    let all: Vec<u32> = (0..longest as u32).collect();
                    store(t, other, &all);
                    let keys = ks(&all[..len]);
                    let found = t.lookup_prefix_for(R, 0, len, |j| keys[j].as_bytes());
                    assert_eq!(found.hits, len, "{what}");
                    if moved {
                        // Keys come and go: the hints' hashes are not used.
                        store(t, other, &[1000, 1001]);
                    }
                    let mut slots = Vec::new();
                    t.prepare_load(R, &keys, &mut slots).unwrap();
                    t.touch(R, &keys).unwrap();
                    t.complete_load(R, &keys).unwrap();
                    out.push(format!("{slots:?} {:?}", order(t)));
                    t.request_finished(R).unwrap();
                    out.push(format!("{:?} {:?}", order(t), t.stats().pinned));
                    t.check_invariants().unwrap();
                }
                assert_eq!(seen[0], seen[1], "{what}");
            }
        }
    }
}
