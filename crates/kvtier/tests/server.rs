//! The node server in one process, through the real socket and the real
//! shared region: blocks are shared between engines, requests belong to
//! the connection that began them, and each client's bounds.

use kvtier_core::Error;
use kvtier_core::primary::StorePlan;
use kvtier_core::request::{RequestId, RequestState};
use kvtier_core::server::ServerOptions;
use kvtier_core::tiering::{ManagerCalls, RequestParams};
use kvtier_testkit::server::{
    clients, eventually, holds, keys, load_checked, pattern, start, store,
};

fn begin(c: &dyn ManagerCalls, name: &str) -> RequestId {
    c.request_begin(name, RequestParams::default()).unwrap().id
}

fn unknown<T: std::fmt::Debug>(r: kvtier_core::Result<T>) {
    match r {
        Err(Error::UnknownRequest(_)) => {}
        other => panic!("expected UnknownRequest, got {other:?}"),
    }
}

fn no_space<T: std::fmt::Debug>(r: kvtier_core::Result<T>, option: &str) {
    match r {
        Err(Error::NoSpace(m)) => assert!(m.contains(option), "{m}"),
        other => panic!("expected NoSpace naming {option}, got {other:?}"),
    }
}

/// The client list's row of the engine named `name`.
fn holdings(socket: &std::path::Path, name: &str) -> (u64, u64, u64) {
    let list = clients(socket);
    let rows: Vec<_> = list["clients"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|c| c["name"] == name)
        .collect();
    assert_eq!(rows.len(), 1, "one client named {name}: {list}");
    let n = |f: &str| rows[0][f].as_u64().unwrap();
    (n("requests"), n("pins"), n("stores"))
}

#[test]
fn a_block_one_engine_stored_is_a_hit_for_another_with_its_bytes() {
    let s = start(64, "");
    let a = s.connect();
    let b = s.connect();
    let ks = keys(1, 8);
    store(&a, "r", &ks);
    // Read in b's own mapping of the region, byte for byte.
    assert_eq!(load_checked(&b, "r", &ks), 8);
    // And in a third engine, connected after the store.
    let c = s.connect();
    assert_eq!(load_checked(&c, "x", &ks), 8);
    // The two mappings are one memory: what b writes, a reads.
    let rb = begin(&b, "w");
    let fresh = keys(2, 1);
    let mut plan = StorePlan::default();
    b.prepare_store(rb, (&fresh).into(), &mut plan).unwrap();
    b.slot_memory()
        .unwrap()
        .write(plan.slots[0], 0, &pattern(&fresh[0]))
        .unwrap();
    assert!(holds(a.slot_memory().unwrap(), plan.slots[0], &fresh[0]));
    b.complete_store(rb, (&fresh).into(), true).unwrap();
    b.request_finished(rb).unwrap();
    assert_eq!(load_checked(&a, "y", &fresh), 1);
}

#[test]
fn every_call_on_another_connections_request_is_refused_and_changes_nothing() {
    let s = start(64, "");
    let a =
        kvtier_core::server::Client::connect(&s.socket, &kvtier_testkit::server::options("owner"))
            .unwrap();
    let b = s.connect();
    let ready = keys(1, 8);
    store(&a, "seed", &ready);
    let ra = begin(&a, "held");
    let mut slots = Vec::new();
    a.prepare_load(ra, (&ready[..4]).into(), &mut slots)
        .unwrap();
    let pending = keys(2, 4);
    let mut plan = StorePlan::default();
    a.prepare_store(ra, (&pending).into(), &mut plan).unwrap();
    let _rb = begin(&b, "other");

    let state = a.request_state(ra).unwrap();
    let primary = s.server.manager().tier_stats(0).unwrap();
    let manager = s.server.manager().manager_stats().unwrap();
    assert_eq!(holdings(&s.socket, "owner"), (1, 4, 4));
    assert_eq!(
        (s.primary("pinned"), s.primary("write_pending")),
        (4.0, 4.0)
    );

    unknown(b.lookup_prefix(ra, (&ready).into()));
    unknown(b.lookup_per_key(ra, (&ready).into()));
    unknown(b.prepare_load(ra, (&ready).into(), &mut slots));
    unknown(b.set_positions(ra, (&ready[..2]).into(), &[0, 1]));
    unknown(b.touch(ra, (&ready).into()));
    unknown(b.complete_load(ra, (&ready[..4]).into()));
    unknown(b.prepare_store(ra, (&keys(3, 2)).into(), &mut plan));
    unknown(b.complete_store(ra, (&pending).into(), true));
    unknown(b.complete_store(ra, (&pending).into(), false));
    unknown(b.request_finished(ra));
    assert_eq!(b.request_state(ra).unwrap(), RequestState::NeverIssued);

    // Nothing changed: the manager's and the primary tier's numbers, the
    // owner's holdings and its request's state.
    assert_eq!(s.server.manager().tier_stats(0).unwrap(), primary);
    assert_eq!(s.server.manager().manager_stats().unwrap(), manager);
    assert_eq!(holdings(&s.socket, "owner"), (1, 4, 4));
    assert_eq!(a.request_state(ra).unwrap(), state);
    // The pending keys are still the owner's to complete: they become hits.
    for (k, slot) in plan.to_store.iter().zip(&plan.slots) {
        a.slot_memory()
            .unwrap()
            .write(*slot, 0, &pattern(k))
            .unwrap();
    }
    let report = a.complete_store(ra, (&pending).into(), true).unwrap();
    assert_eq!(report.ready, 4);
    a.complete_load(ra, (&ready[..4]).into()).unwrap();
    a.request_finished(ra).unwrap();
    assert_eq!(holdings(&s.socket, "owner"), (0, 0, 0));
    // Let go, it reads as gone, as on a local manager (to either engine:
    // ids come in sequence, that tells nothing).
    assert_eq!(a.request_state(ra).unwrap(), RequestState::Gone);
    assert_eq!(b.request_state(ra).unwrap(), RequestState::Gone);
    assert_eq!(
        b.request_state(RequestId(1 << 40)).unwrap(),
        RequestState::NeverIssued
    );
    assert_eq!(load_checked(&b, "check", &pending), 4);
    assert_eq!(
        (s.primary("pinned"), s.primary("write_pending")),
        (0.0, 0.0)
    );
}

#[test]
fn the_same_request_name_in_two_engines_is_two_requests() {
    let s = start(64, "");
    let a = s.connect();
    let b = s.connect();
    let ra = begin(&a, "same");
    let rb = begin(&b, "same");
    assert_ne!(ra, rb);
    // Within one engine a name is still unique, as on a local manager.
    match a.request_begin("same", RequestParams::default()) {
        Err(Error::DuplicateRequest(_)) => {}
        other => panic!("expected DuplicateRequest, got {other:?}"),
    }
    let (ka, kb) = (keys(1, 3), keys(2, 3));
    let mut plan = StorePlan::default();
    a.prepare_store(ra, (&ka).into(), &mut plan).unwrap();
    for (k, slot) in plan.to_store.iter().zip(&plan.slots) {
        a.slot_memory()
            .unwrap()
            .write(*slot, 0, &pattern(k))
            .unwrap();
    }
    a.complete_store(ra, (&ka).into(), true).unwrap();
    a.request_finished(ra).unwrap();
    // b's request of the same name lives on, and stores its own keys.
    assert_eq!(b.request_state(rb).unwrap(), RequestState::Active);
    b.prepare_store(rb, (&kb).into(), &mut plan).unwrap();
    for (k, slot) in plan.to_store.iter().zip(&plan.slots) {
        b.slot_memory()
            .unwrap()
            .write(*slot, 0, &pattern(k))
            .unwrap();
    }
    assert_eq!(b.complete_store(rb, (&kb).into(), true).unwrap().ready, 3);
    b.request_finished(rb).unwrap();
    // The name is free again in a once its request is let go.
    let again = begin(&a, "same");
    a.request_finished(again).unwrap();
    let c = s.connect();
    assert_eq!(load_checked(&c, "same", &ka), 3);
    assert_eq!(load_checked(&c, "same", &kb), 3);
}

#[test]
fn the_request_bound_answers_no_space_and_changes_nothing() {
    let s = start(64, r#", "server": {"max_requests_per_client": 3}"#);
    let a = kvtier_core::server::Client::connect(
        &s.socket,
        &kvtier_testkit::server::options("bounded"),
    )
    .unwrap();
    let ids: Vec<_> = (0..3).map(|i| begin(&a, &format!("r{i}"))).collect();
    let stats = s.server.manager().manager_stats().unwrap();
    no_space(
        a.request_begin("r3", RequestParams::default()),
        "server.max_requests_per_client",
    );
    assert_eq!(s.server.manager().manager_stats().unwrap(), stats);
    assert_eq!(holdings(&s.socket, "bounded"), (3, 0, 0));
    for id in &ids {
        assert_eq!(a.request_state(*id).unwrap(), RequestState::Active);
    }
    // The bound is per client.
    let b = s.connect();
    for i in 0..3 {
        begin(&b, &format!("r{i}"));
    }
    // A request let go makes room.
    a.request_finished(ids[0]).unwrap();
    let r3 = begin(&a, "r3");
    assert_eq!(a.request_state(r3).unwrap(), RequestState::Active);
}

#[test]
fn the_pin_bound_answers_no_space_and_changes_nothing() {
    // 64 slots x 0.25: 16 pins per client.
    let s = start(64, r#", "server": {"max_pinned_share": 0.25}"#);
    let a = s.connect();
    let b = s.connect();
    let ks = keys(1, 20);
    store(&a, "seed", &ks);
    let ra = begin(&a, "load");
    let mut slots = vec![7];
    no_space(
        a.prepare_load(ra, (&ks[..17]).into(), &mut slots),
        "server.max_pinned_share",
    );
    assert_eq!(s.primary("pinned"), 0.0);
    assert_eq!(s.primary("loads"), 0.0);
    a.prepare_load(ra, (&ks[..16]).into(), &mut slots).unwrap();
    assert_eq!(slots.len(), 16);
    let primary = s.server.manager().tier_stats(0).unwrap();
    no_space(
        a.prepare_load(ra, (&ks[16..17]).into(), &mut slots),
        "server.max_pinned_share",
    );
    assert_eq!(s.server.manager().tier_stats(0).unwrap(), primary);
    // Another client has a bound of its own.
    let rb = begin(&b, "load");
    b.prepare_load(rb, (&ks[4..20]).into(), &mut slots).unwrap();
    // Released pins make room again.
    a.complete_load(ra, (&ks[..4]).into()).unwrap();
    a.prepare_load(ra, (&ks[16..20]).into(), &mut slots)
        .unwrap();
    a.complete_load(ra, (&ks[4..20]).into()).unwrap();
    b.complete_load(rb, (&ks[4..20]).into()).unwrap();
    assert_eq!(s.primary("pinned"), 0.0);
}

#[test]
fn the_store_bound_answers_no_space_and_changes_nothing() {
    // 64 slots x 0.25: 16 keys of stores in flight per client.
    let s = start(64, r#", "server": {"max_store_share": 0.25}"#);
    let a = s.connect();
    let ks = keys(1, 40);
    let ra = begin(&a, "store");
    let mut plan = StorePlan::default();
    no_space(
        a.prepare_store(ra, (&ks[..17]).into(), &mut plan),
        "server.max_store_share",
    );
    assert_eq!(s.primary("write_pending"), 0.0);
    assert_eq!(s.primary("stores_planned"), 0.0);
    a.prepare_store(ra, (&ks[..16]).into(), &mut plan).unwrap();
    assert_eq!(plan.to_store.len(), 16);
    let primary = s.server.manager().tier_stats(0).unwrap();
    no_space(
        a.prepare_store(ra, (&ks[16..17]).into(), &mut plan),
        "server.max_store_share",
    );
    assert_eq!(s.server.manager().tier_stats(0).unwrap(), primary);
    // A completed store makes room.
    a.complete_store(ra, (&ks[..16]).into(), false).unwrap();
    a.prepare_store(ra, (&ks[16..32]).into(), &mut plan)
        .unwrap();
    assert_eq!(s.primary("write_pending"), 16.0);
}

#[test]
fn the_documented_defaults_bound_each_client() {
    let o = ServerOptions::default();
    assert_eq!(
        (
            o.mode,
            o.max_clients,
            o.max_requests_per_client,
            o.max_pinned_share,
            o.max_store_share,
            o.handshake_timeout_ms
        ),
        (0o600, 64, 4096, 0.5, 0.5, 5000)
    );
    assert!(o.allowed_uids.is_empty() && o.allowed_gids.is_empty() && o.group.is_none());
    // 64 slots: 32 pins, 32 keys of stores, 4096 requests per client.
    let s = start(64, "");
    let a = s.connect();
    let ks = keys(1, 40);
    store(&a, "seed", &ks[..32]);
    let r = begin(&a, "r");
    let mut slots = Vec::new();
    no_space(
        a.prepare_load(r, (&ks[..33]).into(), &mut slots),
        "server.max_pinned_share",
    );
    a.prepare_load(r, (&ks[..32]).into(), &mut slots).unwrap();
    a.complete_load(r, (&ks[..32]).into()).unwrap();
    let mut plan = StorePlan::default();
    let fresh = keys(2, 33);
    no_space(
        a.prepare_store(r, (&fresh).into(), &mut plan),
        "server.max_store_share",
    );
    a.request_finished(r).unwrap();
    for i in 0..4096 {
        begin(&a, &format!("q{i}"));
    }
    no_space(
        a.request_begin("one more", RequestParams::default()),
        "server.max_requests_per_client",
    );
    assert_eq!(s.primary("loads"), 32.0);
}

/// One step of the differential run, as each side answered it.
fn answer<T: std::fmt::Debug>(r: kvtier_core::Result<T>) -> String {
    match r {
        Ok(v) => format!("Ok({v:?})"),
        // The variant: messages name requests by their server-side names.
        Err(e) => format!(
            "Err({})",
            format!("{e:?}").split(['(', ' ']).next().unwrap()
        ),
    }
}

/// A random run of calls on a local manager and on a connected one, side
/// by side: every answer the same (errors by kind).  Two differences are
/// by design and kept out of the run: a client's bounds answer before the
/// manager (they are set as wide as the tier here), and a request's
/// unpins release only pins of its own connection (here each request
/// releases pins it took).
#[test]
fn a_connected_manager_answers_as_a_local_one() {
    let seed = kvtier_testkit::fault_run::seed();
    let steps = kvtier_testkit::fault_run::rounds(3) * 300;
    let mut rng = kvtier_testkit::rng::Rng(seed);
    // The client's bounds as wide as the tier, so that only the manager answers.
    let s = start(
        64,
        r#", "server": {"max_pinned_share": 1.0, "max_store_share": 1.0}"#,
    );
    let remote = s.connect();
    let local = kvtier_core::config::Config::from_json(
        r#"{"block_bytes": 4096, "primary": {"capacity": 64}}"#,
    )
    .unwrap()
    .build()
    .unwrap();
    let sides: [&dyn ManagerCalls; 2] = [&local, &remote];
    let pool = keys(1, 24);
    let names = ["a", "b", "c"];
    let mut ids: [Vec<Option<RequestId>>; 2] = [vec![None; 3], vec![None; 3]];
    // The pins each request took and has not released, by position.
    let mut pinned: Vec<Vec<usize>> = vec![Vec::new(); 3];
    // Pins of requests finished before they released them (held still).
    let mut orphans = 0;
    let mut log = Vec::new();
    for step in 0..steps {
        let mut op = rng.below(13);
        // Requests mostly release their pins before they finish, and loads
        // take pins no further than half the bound (past it the client's
        // bound answers, before the manager).
        let who = rng.below(3) as usize;
        if op == 9 && !pinned[who].is_empty() && rng.chance(75) {
            op = 6;
        }
        if op == 3 && orphans + pinned.iter().map(Vec::len).sum::<usize>() >= 32 {
            op = 6;
        }
        let n = 1 + rng.below(4) as usize;
        let first = rng.below((pool.len() - n) as u64) as usize;
        let mut ks = &pool[first..first + n];
        let own: Vec<_>;
        if op == 6 && !pinned[who].is_empty() && rng.chance(90) {
            let take = 1 + rng.below(pinned[who].len() as u64) as usize;
            own = pinned[who][..take].iter().map(|i| pool[*i]).collect();
            ks = &own;
        }
        let success = rng.chance(70);
        let bogus = rng.chance(5);
        let mut got = Vec::new();
        for (side, c) in sides.iter().enumerate() {
            let id = match (bogus, ids[side][who]) {
                (false, Some(id)) => id,
                _ => RequestId(999_999),
            };
            let a = match op {
                0 => {
                    let r = c.request_begin(names[who], RequestParams::default());
                    if let Ok(st) = &r {
                        ids[side][who] = Some(st.id);
                    }
                    answer(r.map(|st| st.policy))
                }
                1 => answer(c.lookup_prefix(id, ks.into())),
                2 => answer(c.lookup_per_key(id, ks.into())),
                3 => {
                    let mut slots = Vec::new();
                    answer(c.prepare_load(id, ks.into(), &mut slots).map(|()| slots))
                }
                4 => {
                    let pos: Vec<u64> = (0..n as u64).collect();
                    answer(c.set_positions(id, ks.into(), &pos))
                }
                5 => answer(c.touch(id, ks.into())),
                6 => answer(c.complete_load(id, ks.into())),
                7 => {
                    let mut plan = StorePlan::default();
                    let r = c.prepare_store(id, ks.into(), &mut plan);
                    if let Some(mem) = c.slot_memory() {
                        for (k, slot) in plan.to_store.iter().zip(&plan.slots) {
                            mem.write(*slot, 0, &pattern(k)).unwrap();
                        }
                    }
                    answer(r.map(|o| (o, plan.to_store, plan.slots, plan.evicted)))
                }
                8 => answer(c.complete_store(id, ks.into(), success)),
                9 => answer(c.request_finished(id)),
                10 => answer(c.request_state(id)),
                11 => answer(c.schedule_end()),
                _ => answer(c.has_pending_work()),
            };
            got.push(a);
        }
        if got[0].starts_with("Ok") {
            let at: Vec<usize> = ks
                .iter()
                .map(|k| pool.iter().position(|p| p == k).unwrap())
                .collect();
            match op {
                0 => orphans += std::mem::take(&mut pinned[who]).len(),
                3 => pinned[who].extend(at),
                6 => {
                    // Its own pins first, then another request's.
                    for i in at {
                        let mut order = vec![who];
                        order.extend((0..3).filter(|w| *w != who));
                        for w in order {
                            if let Some(j) = pinned[w].iter().position(|x| *x == i) {
                                pinned[w].remove(j);
                                break;
                            }
                        }
                    }
                }
                _ => {}
            }
        }
        log.push(format!(
            "{step}: op {op} request {who} keys {first}..{} -> {}",
            first + n,
            got[0]
        ));
        assert_eq!(
            got[0],
            got[1],
            "step {step} (seed {seed}): the local manager (left) and the connected one differ; \
             the run:\n{}\nthe server's clients: {}\npinned {} write pending {}",
            log[log.len().saturating_sub(30)..].join("\n"),
            clients(&s.socket),
            s.primary("pinned"),
            s.primary("write_pending"),
        );
    }
}

#[test]
fn pins_a_request_took_from_another_of_its_connection_do_not_keep_the_rest_at_its_end() {
    let s = start(64, "");
    let a = s.connect();
    let b = s.connect();
    let ks = keys(1, 4);
    store(&a, "seed", &ks);
    let ra = begin(&a, "reader");
    let mut slots = Vec::new();
    a.prepare_load(ra, (&ks).into(), &mut slots).unwrap();
    // b's second request releases a pin of its first (a local manager's
    // unpins go beyond their own pins).
    let rb = begin(&b, "first");
    b.prepare_load(rb, (&ks[..2]).into(), &mut slots).unwrap();
    let rb2 = begin(&b, "second");
    b.complete_load(rb2, (&ks[..1]).into()).unwrap();
    a.complete_load(ra, (&ks).into()).unwrap();
    assert_eq!(s.primary("pinned"), 1.0);
    // b leaves: its first request's pin of ks[1] is released although its
    // pin of ks[0] is gone already.
    drop(b);
    assert!(eventually(std::time::Duration::from_secs(5), || {
        s.primary("pinned") == 0.0
    }));
}

#[test]
fn the_pin_bound_counts_the_pins_a_connection_still_holds() {
    // 64 slots x 0.25: 16 pins per client.
    let s = start(64, r#", "server": {"max_pinned_share": 0.25}"#);
    let a = s.connect();
    let ks = keys(1, 17);
    store(&a, "seed", &ks);
    let r1 = begin(&a, "first");
    let mut slots = Vec::new();
    a.prepare_load(r1, (&ks[..16]).into(), &mut slots).unwrap();
    // A second request releases them (unpins beyond its own pins take
    // the first's, as on a local manager): the client holds none.
    let r2 = begin(&a, "second");
    a.complete_load(r2, (&ks[..16]).into()).unwrap();
    assert_eq!(s.primary("pinned"), 0.0);
    let r3 = begin(&a, "third");
    a.prepare_load(r3, (&ks[..16]).into(), &mut slots).unwrap();
    no_space(
        a.prepare_load(r3, (&ks[16..]).into(), &mut slots),
        "server.max_pinned_share",
    );
}

#[test]
fn a_finished_request_is_unknown_to_a_plan_even_at_the_bounds() {
    // 64 slots x 0.25: 16 pins and 16 keys of stores per client.
    let s = start(
        64,
        r#", "server": {"max_pinned_share": 0.25, "max_store_share": 0.25}"#,
    );
    let a = s.connect();
    let ks = keys(1, 17);
    store(&a, "seed", &ks[..16]);
    store(&a, "seed2", &ks[16..]);
    let r = begin(&a, "r");
    let mut slots = Vec::new();
    a.prepare_load(r, (&ks[..16]).into(), &mut slots).unwrap();
    let mut plan = StorePlan::default();
    a.prepare_store(r, (&keys(2, 16)).into(), &mut plan)
        .unwrap();
    a.request_finished(r).unwrap();
    // As a local manager answers: the request is finished, not the
    // client out of room.
    unknown(a.prepare_load(r, (&ks[16..]).into(), &mut slots));
    unknown(a.prepare_store(r, (&keys(3, 1)).into(), &mut plan));
    assert_eq!(a.request_state(r).unwrap(), RequestState::Finishing);
}

#[test]
fn an_engine_cannot_release_another_engines_pins() {
    let s = start(64, "");
    let a = s.connect();
    let b = s.connect();
    let ks = keys(2, 3);
    store(&a, "seed", &ks);
    let ra = begin(&a, "reader");
    let mut slots = Vec::new();
    a.prepare_load(ra, (&ks).into(), &mut slots).unwrap();
    assert_eq!(s.primary("pinned"), 3.0);
    // b's request took no pin of these: its unpin is refused whole.
    let rb = begin(&b, "thief");
    let e = b.complete_load(rb, (&ks).into()).unwrap_err();
    assert!(
        matches!(&e, Error::KeyState { index: 0, reason, .. } if reason.contains("this connection")),
        "{e}"
    );
    // Naming a key twice needs two pins of this connection.
    let mut one = Vec::new();
    b.prepare_load(rb, (&ks[..1]).into(), &mut one).unwrap();
    let twice = [ks[0], ks[0]];
    let e = b.complete_load(rb, (&twice).into()).unwrap_err();
    assert!(matches!(e, Error::KeyState { index: 1, .. }), "{e}");
    assert_eq!(s.primary("pinned"), 3.0, "three slots, ks[0] pinned twice");
    // Every pin is still there to release: each of these would fail on a
    // pin the refused calls had taken.
    b.complete_load(rb, (&ks[..1]).into()).unwrap();
    assert_eq!(s.primary("pinned"), 3.0, "ks[0] still a's");
    a.complete_load(ra, (&ks).into()).unwrap();
    assert_eq!(s.primary("pinned"), 0.0);
    // A request this connection no longer holds answers as a local
    // manager does, whatever keys it names.
    b.request_finished(rb).unwrap();
    unknown(b.complete_load(rb, (&ks).into()));
}

#[test]
fn an_engine_releases_exactly_the_pins_its_loads_took() {
    let s = start(64, "");
    let a = s.connect();
    let b = s.connect();
    let ks = keys(3, 1);
    store(&a, "seed", &ks);
    let (r1, r2) = (begin(&a, "one"), begin(&a, "two"));
    let mut slots = Vec::new();
    // Two pins of one key, by two requests of a: two unpins are a's.
    a.prepare_load(r1, (&ks).into(), &mut slots).unwrap();
    a.prepare_load(r2, (&ks).into(), &mut slots).unwrap();
    a.complete_load(r1, (&ks).into()).unwrap();
    a.complete_load(r1, (&ks).into()).unwrap();
    // None left: a third is refused, and b's pin is not a's to take.
    let rb = begin(&b, "other");
    b.prepare_load(rb, (&ks).into(), &mut slots).unwrap();
    let e = a.complete_load(r2, (&ks).into()).unwrap_err();
    assert!(matches!(e, Error::KeyState { .. }), "{e}");
    assert_eq!(s.primary("pinned"), 1.0, "b's pin stays");
    b.complete_load(rb, (&ks).into()).unwrap();
    assert_eq!(s.primary("pinned"), 0.0);
}

#[test]
fn an_engine_that_leaves_has_its_unfinished_requests_finished() {
    let s = start(64, "");
    let a = s.connect();
    let b = s.connect();
    let ra = begin(&a, "left-open");
    assert_eq!(b.request_state(ra).unwrap(), RequestState::NeverIssued);
    drop(a);
    assert!(
        eventually(std::time::Duration::from_secs(5), || {
            b.request_state(ra).unwrap() == RequestState::Gone
        }),
        "the request of an engine that left is still live"
    );
    let (requests, pins, stores) = holdings(&s.socket, "test");
    assert_eq!((requests, pins, stores), (0, 0, 0), "b holds nothing");
}
