//! The index's tables at both widths: finding, inserting and removing by
//! backward shift under collisions and churn, batched finds agreeing with
//! single ones, and what tags and recorded displacements spare.

use super::*;

/// Both widths at `max`.
fn both(max: usize) -> [TagIndex; 2] {
    [
        TagIndex::new(max).unwrap(),
        TagIndex::new_wide(max).unwrap(),
    ]
}

#[test]
fn width_follows_the_ids() {
    assert!(matches!(
        TagIndex::new(10_000_000).unwrap(),
        TagIndex::Narrow(_)
    ));
    assert!(matches!(
        TagIndex::new((1 << 26) - 1).unwrap(),
        TagIndex::Narrow(_)
    ));
    assert!(matches!(TagIndex::new(1 << 26).unwrap(), TagIndex::Wide(_)));
    assert!(matches!(TagIndex::new(0).unwrap(), TagIndex::Narrow(_)));
    let narrow = TagIndex::new(1000).unwrap();
    assert_eq!(narrow.bytes(), 4 * (2 * 1000 + 16));
    assert!(narrow.has_room_for(1000) && !narrow.has_room_for(1001));
    assert!(matches!(&narrow, TagIndex::Narrow(t) if t.bits == 10));
    assert!(!TagIndex::new(0).unwrap().has_room_for(5));
    let wide = TagIndex::new_wide(1000).unwrap();
    assert_eq!(wide.bytes(), 8 * (2 * 1000 + 16));
    assert!(wide.has_room_for(1000) && !wide.has_room_for(1001));
}

#[test]
fn insert_find_and_backward_shift_removal_under_collisions() {
    for mut ix in both(64) {
        // Five distinct hashes: equal hashes collide fully; ids tell them apart.
        let h = |i: u64| i % 5;
        let hash_of = |id: u32| h(id as u64);
        for i in 0..64u64 {
            ix.insert(h(i), i as u32);
        }
        assert_eq!(ix.len(), 64);
        for i in 0..64u64 {
            assert_eq!(ix.find(h(i), |id| id == i as u32), Some(i as u32));
        }
        for i in (0..64u64).step_by(3) {
            ix.remove(h(i), i as u32, hash_of);
            ix.remove(h(i), i as u32, hash_of);
        }
        for i in 0..64u64 {
            let want = (i % 3 != 0).then_some(i as u32);
            assert_eq!(ix.find(h(i), |id| id == i as u32), want, "{i}");
        }
        assert_eq!(ix.len(), 64 - 22);
        assert_eq!(ix.peek(h(1)).map(|id| id % 5), Some(1));
        assert_eq!(ix.find(7, |_| true), None);
        ix.clear();
        assert_eq!((ix.len(), ix.find(h(1), |_| true)), (0, None));
    }
}

#[test]
fn find_each_agrees_with_find_over_batches_of_every_length() {
    // Ids 0..300 present; keys 300..400 absent.  Under Miri, where
    // checking the longest batch takes a minute, 48 and 64.
    let (present, total) = if cfg!(miri) { (48, 64) } else { (300, 400) };
    for mut ix in both(present as usize) {
        // Few distinct hashes for some keys (false tag matches, long
        // runs), well mixed for the rest.
        let h = |k: u32| {
            if k % 4 == 0 {
                (k % 3) as u64
            } else {
                (k as u64 + 1)
                    .wrapping_mul(0xd6e8_feb8_6659_fd93)
                    .rotate_left(29)
            }
        };
        for id in 0..present {
            ix.insert(h(id), id);
        }
        for n in [0, 1, READ_AHEAD / 2 - 1, READ_AHEAD, READ_AHEAD + 1, total] {
            // A batch of `n` keys, present and absent mixed, repeats included.
            let keys: Vec<u32> = (0..n as u32)
                .map(|j| (j * 37 + n as u32) % total as u32)
                .collect();
            let requested = std::cell::RefCell::new(Vec::new());
            let mut got = vec![u32::MAX - 1; n];
            ix.find_each(
                n,
                |j| h(keys[j]),
                |j, id| requested.borrow_mut().push((j, id)),
                |j, id| id == keys[j],
                |j, id, hj| {
                    assert_eq!(hj, h(keys[j]));
                    got[j] = id;
                },
            );
            for (j, &k) in keys.iter().enumerate() {
                let want = ix.find(h(k), |id| id == k).unwrap_or(u32::MAX);
                assert_eq!(got[j], want, "n {n}, key {j} ({k})");
            }
            // Every key with a tag match had its likely id requested,
            // in key order, each once.
            let requested = requested.into_inner();
            let positions: Vec<usize> = requested.iter().map(|&(j, _)| j).collect();
            assert!(positions.windows(2).all(|w| w[0] < w[1]), "{positions:?}");
            for (j, &k) in keys.iter().enumerate().filter(|&(_, &k)| k < present) {
                assert!(
                    positions.contains(&j),
                    "n {n}: present key {j} ({k}) not requested"
                );
            }
        }
    }
}

#[test]
fn tags_spare_key_compares_and_displacements_spare_rehashes() {
    // Well-mixed hashes: a probe compares keys almost only for its own id.
    for mut ix in both(1000) {
        let h = |i: u32| {
            (i as u64 + 1)
                .wrapping_mul(0xd6e8_feb8_6659_fd93)
                .rotate_left(29)
        };
        for i in 0..1000 {
            ix.insert(h(i), i);
        }
        let mut compares = 0;
        for i in 0..1000 {
            let found = ix.find(h(i), |id| {
                compares += 1;
                id == i
            });
            assert_eq!(found, Some(i));
        }
        assert!(compares < 1100, "{compares} key compares for 1000 finds");
        // A removal seldom needs another entry's key (narrow entries
        // record displacements up to 2), a wide one never.
        let rehashes = std::cell::Cell::new(0);
        for i in 0..1000 {
            ix.remove(h(i), i, |id| {
                rehashes.set(rehashes.get() + 1);
                h(id)
            });
            assert_eq!(ix.find(h(i), |id| id == i), None);
        }
        assert_eq!(ix.len(), 0);
        let narrow = matches!(ix, TagIndex::Narrow(_));
        assert!(
            rehashes.get() < if narrow { 200 } else { 1 },
            "{}",
            rehashes.get()
        );
    }
}

/// The home bucket of hash `h` in `ix`.
fn home(ix: &TagIndex, h: u64) -> usize {
    with_table!(ix, t => t.home((mix(h) >> 32) as u32))
}

/// Whether some entry of `t` sits before its home bucket: its run
/// wrapped around the end of the table.  `hash` gives each id's hash.
fn some_run_wraps<E: Entry>(t: &Table<E>, hash: &[u64]) -> bool {
    t.slots
        .iter()
        .enumerate()
        .any(|(i, &e)| e != E::ZERO && i < t.home((mix(hash[e.id(t.bits) as usize]) >> 32) as u32))
}

#[test]
fn churn_never_loses_entries() {
    // The table is as full as it gets (100 entries) after a few hundred
    // steps; under Miri, a thousand times slower, the churn stops sooner.
    let steps = if cfg!(miri) { 1_000 } else { 20_000 };
    for mut ix in both(100) {
        let mut rng = 0x1234_5678_u64;
        // Ids below 100 are reused as entries come and go; few distinct
        // hashes make long runs, and the last one's home is the table's
        // last bucket, so its run wraps around to the first buckets.
        let last = with_table!(&ix, t => t.slots.len() - 1);
        let wrapping = (0..).find(|&h| home(&ix, h) == last).unwrap();
        let hashes = [0, 1, 2, 3, 4, 5, wrapping];
        let mut hash = [0u64; 100];
        let mut free: Vec<u32> = (0..100).rev().collect();
        let mut live: Vec<u32> = Vec::new();
        let mut wrapped = false;
        for step in 0..steps {
            rng ^= rng << 13;
            rng ^= rng >> 7;
            rng ^= rng << 17;
            if !free.is_empty() && (live.is_empty() || rng % 3 != 0) {
                let id = free.pop().unwrap();
                hash[id as usize] = hashes[(rng % 7) as usize];
                ix.insert(hash[id as usize], id);
                live.push(id);
            } else {
                let id = live.swap_remove((rng % live.len() as u64) as usize);
                ix.remove(hash[id as usize], id, |i| hash[i as usize]);
                free.push(id);
            }
            if step % 97 == 0 {
                for &id in &live {
                    assert_eq!(ix.find(hash[id as usize], |x| x == id), Some(id));
                }
                wrapped |= with_table!(&ix, t => some_run_wraps(t, &hash));
            }
        }
        assert_eq!(ix.len(), live.len());
        assert!(wrapped, "no run wrapped around the table");
    }
}
