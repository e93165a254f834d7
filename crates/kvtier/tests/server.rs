//! The node server in one process, through the real socket and the real
//! shared region: blocks are shared between engines, requests belong to
//! the connection that began them, and each client's bounds.

use kvtier_core::Error;
use kvtier_core::primary::StorePlan;
use kvtier_core::request::{RequestId, RequestState};
use kvtier_core::server::ServerOptions;
use kvtier_core::tiering::{ManagerCalls, RequestParams};
use kvtier_testkit::server::{clients, holds, keys, load_checked, pattern, start, store};

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
