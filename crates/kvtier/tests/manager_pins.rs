//! Pin sets and block drops through the manager: the bound, replacing a
//! set, unpinning, and a random run of pins, unpins, loads and evicting
//! stores in which no held block is ever evicted and the bound always
//! holds.

use kvtier_testkit::common::{k, keys};

use kvtier_core::Error;
use kvtier_core::key::Key;
use kvtier_core::primary::{PrimaryConfig, PrimaryTier, StorePlan};
use kvtier_core::request::RequestId;
use kvtier_core::tiering::{
    DropReport, Manager, ManagerOptions, PinOutcome, PinningOptions, ProgressOptions, RequestParams,
};

fn manager(capacity: u32, max_share: f64) -> Manager {
    let primary = PrimaryTier::new(PrimaryConfig {
        capacity,
        ..Default::default()
    })
    .unwrap();
    Manager::new(
        primary,
        ManagerOptions {
            progress: ProgressOptions::vllm(),
            pinning: PinningOptions { max_share },
            block_bytes: 100,
            layout_fingerprint: Some("model-a".into()),
            ..Default::default()
        },
    )
}

fn begin(m: &Manager) -> RequestId {
    m.request_begin("", RequestParams::default()).unwrap().id
}

/// Stores `keys` (ready when the store is not refused); the evicted keys.
fn store(m: &Manager, keys: &[Key]) -> Vec<Key> {
    let r = begin(m);
    let mut plan = StorePlan::default();
    m.prepare_store(r, keys, &mut plan).unwrap();
    let stored = plan.to_store.clone();
    m.complete_store(r, &stored, true).unwrap();
    m.request_finished(r).unwrap();
    plan.evicted
}

fn resident(m: &Manager, key: Key) -> bool {
    let r = begin(m);
    let hits = m.lookup_prefix(r, &[key][..]).unwrap().hits;
    m.request_finished(r).unwrap();
    hits == 1
}

#[test]
fn a_pin_set_holds_present_keys_and_reports_absent_ones() {
    let m = manager(8, 0.5);
    store(&m, &keys(0..8));
    let got = m.pin_set("sys", &[k(0), k(1), k(1), k(99)], 0).unwrap();
    assert_eq!(
        got,
        PinOutcome {
            pinned: 2,
            absent: 1
        }
    );
    // Eight more keys: everything but the held two is evicted.
    let evicted = store(&m, &keys(10..16));
    assert!(!evicted.contains(&k(0)) && !evicted.contains(&k(1)));
    assert!(resident(&m, k(0)) && resident(&m, k(1)));
    let sets = m.pin_sets().unwrap();
    assert_eq!(sets.len(), 1);
    assert_eq!((sets[0].tier, sets[0].keys, sets[0].bytes), (0, 2, 200));
    assert_eq!(m.manager_stats().unwrap().pinned_blocks_primary, 2);
    assert_eq!(m.unpin_set("sys").unwrap(), 2);
    assert!(matches!(m.unpin_set("sys"), Err(Error::NotFound(_))));
    assert_eq!(m.manager_stats().unwrap().pinned_blocks_primary, 0);
}

#[test]
fn past_the_bound_the_pin_is_no_space_and_nothing_changes() {
    let m = manager(8, 0.25); // at most 2 blocks
    store(&m, &keys(0..8));
    m.pin_set("a", &keys(0..2), 0).unwrap();
    let e = m.pin_set("b", &keys(2..3), 0).unwrap_err();
    assert!(matches!(&e, Error::NoSpace(msg) if msg.contains("pinning.max_share")));
    assert_eq!(m.pin_sets().unwrap().len(), 1);
    // Keys already held by another set cost nothing more.
    m.pin_set("b", &keys(1..2), 0).unwrap();
    // Replacing a set frees its own keys for the bound.
    m.pin_set("a", &keys(1..3), 0).unwrap();
    assert_eq!(m.manager_stats().unwrap().pinned_blocks_primary, 2);
    assert_eq!(m.manager_stats().unwrap().pin_sets, 2);
    m.unpin_set("b").unwrap();
    assert_eq!(m.manager_stats().unwrap().pin_sets, 1);
    assert!(matches!(
        m.pin_set("", &keys(0..1), 0),
        Err(Error::InvalidArgument(_))
    ));
    // Names are 1 to 256 bytes.
    let longest = "n".repeat(256);
    m.pin_set(&longest, &keys(1..2), 0).unwrap();
    m.unpin_set(&longest).unwrap();
    assert!(matches!(
        m.pin_set(&"n".repeat(257), &keys(1..2), 0),
        Err(Error::InvalidArgument(_))
    ));
    assert_eq!(m.manager_stats().unwrap().pin_sets, 1);
    assert!(matches!(
        m.pin_set("x", &keys(0..1), 5),
        Err(Error::InvalidArgument(_))
    ));
    let zero = manager(8, 0.0);
    store(&zero, &keys(0..1));
    assert!(matches!(
        zero.pin_set("x", &keys(0..1), 0),
        Err(Error::NoSpace(_))
    ));
}

#[test]
fn replacing_a_set_counts_a_key_another_set_holds_as_still_held() {
    let m = manager(8, 0.25); // at most 2 blocks
    store(&m, &keys(0..8));
    m.pin_set("a", &keys(0..2), 0).unwrap();
    m.pin_set("b", &keys(1..2), 0).unwrap();
    // "a" as {2, 3}: key 0 goes, key 1 stays held by "b", so 3 blocks.
    let e = m.pin_set("a", &keys(2..4), 0).unwrap_err();
    assert!(matches!(&e, Error::NoSpace(_)), "{e}");
    assert_eq!(m.manager_stats().unwrap().pinned_blocks_primary, 2);
    // "a" as {2}: 2 blocks, within the bound.
    m.pin_set("a", &keys(2..3), 0).unwrap();
    assert_eq!(m.manager_stats().unwrap().pinned_blocks_primary, 2);
}

#[test]
fn a_reset_forgets_every_pin_set() {
    let m = manager(8, 0.5);
    store(&m, &keys(0..4));
    m.pin_set("a", &keys(0..2), 0).unwrap();
    m.reset_cache().unwrap();
    assert!(m.pin_sets().unwrap().is_empty());
    assert_eq!(m.manager_stats().unwrap().pinned_blocks_primary, 0);
}

#[test]
fn drop_blocks_selects_by_prefix_and_fingerprint_and_keeps_held_blocks() {
    let m = manager(16, 0.5);
    let a = |i: u8| Key::new(&[b'a', i]).unwrap();
    let b = |i: u8| Key::new(&[b'b', i]).unwrap();
    store(&m, &[a(0), a(1), a(2), b(0), b(1)]);
    m.pin_set("keep", &[a(0)], 0).unwrap();
    let none = m.drop_blocks(b"a", Some("model-b")).unwrap();
    assert_eq!(none, DropReport::default());
    let got = m.drop_blocks(b"a", Some("model-a")).unwrap();
    assert_eq!((got.dropped, got.kept, got.unsupported_tiers), (2, 1, 0));
    assert!(resident(&m, a(0)) && !resident(&m, a(1)) && resident(&m, b(0)));
    let all = m.drop_blocks(b"", None).unwrap();
    assert_eq!((all.dropped, all.kept), (2, 1));
    assert_eq!(m.manager_stats().unwrap().dropped_blocks, 4);
}

#[test]
fn a_primary_backend_without_holds_refuses_pin_sets_and_drops_with_nothing_changed() {
    let m = Manager::with_backend(
        kvtier_testkit::model::ModelPrimary::new(4),
        ManagerOptions::default(),
    );
    let r = m.request_begin("", RequestParams::default()).unwrap().id;
    let mut plan = StorePlan::default();
    m.prepare_store(r, &keys(0..2), &mut plan).unwrap();
    m.complete_store(r, &keys(0..2), true).unwrap();
    // One block: within the bound (0.25 of 4), so the backend is asked.
    assert!(matches!(
        m.pin_set("a", &keys(0..1), 0),
        Err(Error::Unsupported(_))
    ));
    assert!(m.pin_sets().unwrap().is_empty());
    assert_eq!(m.manager_stats().unwrap().pinned_blocks_primary, 0);
    let d = m.drop_blocks(b"", None).unwrap();
    assert_eq!((d.dropped, d.unsupported_tiers), (0, 1));
}

/// A small deterministic generator (xorshift).
struct Rng(u64);
impl Rng {
    fn below(&mut self, n: u64) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0 % n
    }
}

#[test]
fn random_pins_unpins_loads_and_stores_never_evict_a_held_block_nor_pass_the_bound() {
    for seed in 1..=20u64 {
        let m = manager(16, 0.25); // at most 4 blocks held
        let mut rng = Rng(seed.wrapping_mul(0x9e37_79b9_7f4a_7c15));
        let names = ["a", "b", "c"];
        let mut model: std::collections::HashMap<&str, Vec<Key>> = Default::default();
        for _ in 0..300 {
            match rng.below(4) {
                0 => {
                    let n = rng.below(4) as u32;
                    let first = rng.below(40) as u32;
                    store(&m, &keys(first..first + n));
                }
                1 => {
                    let name = names[rng.below(3) as usize];
                    let n = rng.below(4) as u32;
                    let first = rng.below(40) as u32;
                    let asked = keys(first..first + n);
                    let present: Vec<Key> =
                        asked.iter().copied().filter(|&x| resident(&m, x)).collect();
                    let before = m.pin_sets().unwrap();
                    match m.pin_set(name, &asked, 0) {
                        Ok(o) => {
                            assert_eq!(o.pinned, present.len(), "seed {seed}");
                            model.insert(name, present);
                        }
                        Err(Error::NoSpace(_)) => {
                            assert_eq!(m.pin_sets().unwrap(), before, "seed {seed}")
                        }
                        Err(e) => panic!("seed {seed}: {e}"),
                    }
                }
                2 => {
                    let name = names[rng.below(3) as usize];
                    assert_eq!(m.unpin_set(name).is_ok(), model.remove(name).is_some());
                }
                _ => {
                    // A load of a resident key, unpinned twice over (the
                    // second unpin may not take a pin set's hold).
                    let key = k(rng.below(40) as u32);
                    let r = begin(&m);
                    let mut slots = Vec::new();
                    if m.prepare_load(r, &[key][..], &mut slots).is_ok() {
                        m.complete_load(r, &[key][..]).unwrap();
                        assert!(m.complete_load(r, &[key][..]).is_err());
                    }
                    m.request_finished(r).unwrap();
                }
            }
            let held = m.manager_stats().unwrap().pinned_blocks_primary;
            assert!(held <= 4, "seed {seed}: {held} held");
            let mut distinct: Vec<Key> = model.values().flatten().copied().collect();
            distinct.sort_unstable();
            distinct.dedup();
            assert_eq!(held as usize, distinct.len(), "seed {seed}");
            for &x in &distinct {
                assert!(resident(&m, x), "seed {seed}: held {x:?} was evicted");
            }
        }
    }
}
