//! The shared-memory carrier end to end: granted by default, refused when
//! the server turns it off (the socket carries on), frames larger than its
//! areas crossing the socket, and the same answers either way.

use kvtier_core::server::{Client, ConnectOptions, Transport};
use kvtier_core::tiering::{ManagerCalls, RequestParams};
use kvtier_testkit::server::{keys, options, start, store};

fn with(transport: Transport) -> ConnectOptions {
    ConnectOptions {
        transport,
        ..options("ring")
    }
}

#[test]
fn the_ring_is_granted_to_an_engine_that_asks_and_not_to_an_observer() {
    let s = start(64, "");
    let ring = Client::connect(&s.socket, &with(Transport::Ring)).unwrap();
    assert_eq!(ring.transport(), Transport::Ring);
    let socket = Client::connect(&s.socket, &with(Transport::Socket)).unwrap();
    assert_eq!(socket.transport(), Transport::Socket);
    let observer = Client::observe(&s.socket, &with(Transport::Ring)).unwrap();
    assert_eq!(observer.transport(), Transport::Socket);
    observer.clients_json().unwrap();
    // Blocks one stored are hits for the other, whatever carries them.
    let ks = keys(1, 4);
    store(&ring, "a", &ks);
    let r = socket
        .request_begin("b", RequestParams::default())
        .unwrap()
        .id;
    let a = socket.lookup_prefix(r, (&ks).into()).unwrap();
    assert_eq!(a.hits, 4);
    let r = ring
        .request_begin("c", RequestParams::default())
        .unwrap()
        .id;
    let b = ring.lookup_prefix(r, (&ks).into()).unwrap();
    assert_eq!(format!("{a:?}"), format!("{b:?}"));
}

#[test]
fn a_server_with_the_ring_off_answers_over_the_socket() {
    let s = start(64, r#", "server": {"ring": false}"#);
    let c = Client::connect(&s.socket, &with(Transport::Ring)).unwrap();
    assert_eq!(c.transport(), Transport::Socket);
    let ks = keys(2, 3);
    store(&c, "a", &ks);
    let r = c.request_begin("b", RequestParams::default()).unwrap().id;
    assert_eq!(c.lookup_prefix(r, (&ks).into()).unwrap().hits, 3);
}

#[test]
fn calls_larger_than_the_ring_cross_the_socket_and_the_ring_carries_on() {
    let s = start(64, "");
    let c = Client::connect(&s.socket, &with(Transport::Ring)).unwrap();
    assert_eq!(c.transport(), Transport::Ring);
    let small = keys(3, 2);
    store(&c, "small", &small);
    // 25 000 keys of 12 bytes: a call of about 325 kB, over an area.
    let many = keys(4, 25_000);
    for _ in 0..3 {
        let r = c.request_begin("big", RequestParams::default()).unwrap().id;
        let a = c.lookup_per_key(r, (&many).into()).unwrap();
        assert_eq!(a.hits, 0);
        c.request_finished(r).unwrap();
        let r = c
            .request_begin("small", RequestParams::default())
            .unwrap()
            .id;
        assert_eq!(c.lookup_prefix(r, (&small).into()).unwrap().hits, 2);
        c.request_finished(r).unwrap();
    }
    assert_eq!(c.transport(), Transport::Ring);
}

#[test]
fn an_answer_larger_than_the_ring_crosses_the_socket_and_the_ring_carries_on() {
    let s = start(64, "");
    // The client list names each client: a name of 300 kB makes an answer
    // over an area.
    let long = "n".repeat(300_000);
    let o = ConnectOptions {
        name: long.clone(),
        ..with(Transport::Ring)
    };
    let c = Client::connect(&s.socket, &o).unwrap();
    assert_eq!(c.transport(), Transport::Ring);
    for _ in 0..3 {
        let json = c.clients_json().unwrap();
        assert!(json.len() > 300_000 && json.contains(&long));
        c.has_pending_work().unwrap();
    }
    assert_eq!(c.transport(), Transport::Ring);
}
