//! The node server against bad peers: random frames, real calls captured
//! on the wire then damaged (bytes flipped, cut, extended, lengths
//! forged), huge announced lengths, more connections than allowed, a
//! peer that never reads its answers, one that never completes its
//! handshake.  After each, the bad connection alone is closed (and what
//! it held released), and a well-behaved engine, connected all along, is
//! served correctly.
//!
//! `KVTIER_FAULT_ROUNDS` scales the random runs (`make server-faults`),
//! `KVTIER_FAULT_SEED` repeats one.

use std::io::{Read, Write};
use std::os::unix::net::{UnixListener, UnixStream};
use std::sync::Arc;
use std::time::{Duration, Instant};

use kvtier_core::Error;
use kvtier_core::primary::StorePlan;
use kvtier_core::request::RequestId;
use kvtier_core::server::protocol::MAX_FRAME;
use kvtier_core::server::wire::Writer;
use kvtier_core::server::{Client, ConnectOptions, Transport};
use kvtier_core::tiering::{ManagerCalls, RequestParams};
use kvtier_testkit::fault_run;
use kvtier_testkit::rng::Rng;
use kvtier_testkit::server::{
    Raw, Running, clients, clients_when_room, error_text, eventually, frame, keys, load_checked,
    options, pattern, start, store,
};

/// A well-behaved engine holding a request with 2 pins and 2 planned
/// stores through every test.
struct Good {
    c: Client,
    r: RequestId,
    ready: Vec<kvtier_core::Key>,
    pending: Vec<kvtier_core::Key>,
    plan: StorePlan,
    checks: u32,
}

impl Good {
    fn new(s: &Running) -> Good {
        let c = Client::connect(&s.socket, &options("good")).unwrap();
        let ready = keys(1, 4);
        store(&c, "seed", &ready);
        let r = c
            .request_begin("held", RequestParams::default())
            .unwrap()
            .id;
        let mut slots = Vec::new();
        c.prepare_load(r, (&ready[..2]).into(), &mut slots).unwrap();
        let pending = keys(2, 2);
        let mut plan = StorePlan::default();
        c.prepare_store(r, (&pending).into(), &mut plan).unwrap();
        assert_eq!(plan.to_store.len(), 2);
        Good {
            c,
            r,
            ready,
            pending,
            plan,
            checks: 0,
        }
    }

    /// The bad connections are gone, everything they held released, and
    /// this engine is served as before.
    fn check(&mut self, s: &Running, what: &str) {
        let alone = eventually(Duration::from_secs(5), || {
            // A connection just closed may still hold its place a moment.
            let Some(list) = clients_when_room(&s.socket) else {
                return false;
            };
            list["clients"].as_array().unwrap().len() == 2
                && s.primary("pinned") == 2.0
                && s.primary("write_pending") == 2.0
        });
        assert!(
            alone,
            "{what}: a bad connection lives on or holds something: {} pinned {} pending {}",
            clients(&s.socket),
            s.primary("pinned"),
            s.primary("write_pending")
        );
        self.checks += 1;
        let fresh = keys(1000 + self.checks, 2);
        store(&self.c, "fresh", &fresh);
        assert_eq!(load_checked(&self.c, "fresh", &fresh), 2, "{what}");
        assert_eq!(load_checked(&self.c, "ready", &self.ready), 4, "{what}");
        let a = self
            .c
            .lookup_per_key(self.r, (&self.pending).into())
            .unwrap();
        assert_eq!(
            a.hits, 0,
            "{what}: its planned keys served before they are written"
        );
    }

    /// Completes what the request holds; its stores become hits.
    fn finish(self) {
        let mem = self.c.slot_memory().unwrap();
        for (k, s) in self.plan.to_store.iter().zip(&self.plan.slots) {
            mem.write(*s, 0, &pattern(k)).unwrap();
        }
        self.c
            .complete_store(self.r, (&self.pending).into(), true)
            .unwrap();
        self.c
            .complete_load(self.r, (&self.ready[..2]).into())
            .unwrap();
        self.c.request_finished(self.r).unwrap();
        assert_eq!(load_checked(&self.c, "end", &self.pending), 2);
    }
}

/// Whether `answer` is the refusal of a malformed message (the server
/// closes after it).
fn malformed(answer: &[u8]) -> bool {
    answer[0] == 1 && error_text(answer).contains("malformed")
}

/// The body of `request_begin(name)` with no parameters.
fn begin_body(name: &str) -> Vec<u8> {
    let mut body = Vec::new();
    Writer::new(&mut body).u8(2).str(name).u32(0).u8(0);
    body
}

/// A random call: pure noise, or a call of the right shape for its op
/// with random values (a request id, its own or not; keys of random
/// lengths, some invalid; positions; a flag), some cut or extended.
fn random_body(rng: &mut Rng, own: Option<u64>) -> Vec<u8> {
    let op = rng.below(24) as u8;
    let mut body = vec![op];
    if rng.chance(20) {
        for _ in 0..rng.below(48) {
            body.push(rng.next() as u8);
        }
        return body;
    }
    let mut w = Writer::new(&mut body);
    let id = match own {
        Some(id) if rng.chance(70) => id,
        _ => rng.below(8),
    };
    let n = rng.below(5) as u32;
    let keys = |w: &mut Writer<'_>, rng: &mut Rng| {
        w.u32(n);
        for _ in 0..n {
            let len = if rng.chance(90) {
                1 + rng.below(8)
            } else {
                rng.below(80)
            };
            w.u8(len as u8);
            for _ in 0..len {
                w.u8(b'a' + rng.below(3) as u8);
            }
        }
    };
    match op {
        2 => {
            w.str("r").u32(0).u8(rng.below(3) as u8);
        }
        3..=5 | 7..=9 => {
            w.u64(id);
            keys(&mut w, rng);
        }
        6 => {
            w.u64(id);
            keys(&mut w, rng);
            w.u32(n);
            for i in 0..n {
                w.u64(i as u64);
            }
        }
        10 => {
            w.u64(id);
            keys(&mut w, rng);
            w.u8(rng.below(3) as u8);
        }
        11 | 12 => {
            w.u64(id);
        }
        16 => {
            w.u64(rng.below(3));
        }
        19 => {
            w.str("no such message");
        }
        _ => {}
    }
    if rng.chance(15) {
        let cut = rng.below(body.len() as u64) as usize;
        body.truncate(cut.max(1));
    } else if rng.chance(10) {
        body.push(rng.next() as u8);
    }
    body
}

#[test]
fn random_frames_close_only_their_connection() {
    let rounds = fault_run::rounds(3) * 40;
    let seed = fault_run::seed();
    let mut rng = Rng(seed);
    let s = start(64, "");
    let mut good = Good::new(&s);
    let (mut answered, mut refused) = (0, 0);
    for round in 0..rounds {
        let handshake = rng.chance(90);
        let mut raw = if handshake {
            Raw::engine(&s.socket)
        } else {
            Raw::connect(&s.socket)
        };
        // Its first call begins a request, so that some later ones name
        // a request of its own.
        let mut own = None;
        for n in 0..1 + rng.below(8) {
            let body = if n == 0 && handshake {
                begin_body("mine")
            } else {
                random_body(&mut rng, own)
            };
            if !raw.try_send(&frame(&body)) {
                break;
            }
            let a = raw
                .answer()
                .unwrap_or_else(|| panic!("round {round} (seed {seed}): no answer"));
            assert!(
                a[0] <= 1,
                "round {round} (seed {seed}): answer status {}",
                a[0]
            );
            if n == 0 && handshake && a[0] == 0 {
                own = Some(u64::from_le_bytes(a[1..9].try_into().unwrap()));
                continue;
            }
            if !handshake || malformed(&a) {
                refused += 1;
                assert!(raw.closed(), "round {round} (seed {seed}): left open");
                break;
            }
            answered += 1;
        }
        drop(raw);
        if round % 10 == 9 || round + 1 == rounds {
            good.check(&s, &format!("round {round} (seed {seed})"));
        }
    }
    good.finish();
    println!(
        "fault-run server-random-frames rounds={rounds} answered={answered} refused={refused} \
         seed={seed}"
    );
}

/// Records what a real client sends on the socket: a proxy between it
/// and the server (which passes no descriptor: the socket carries all).
fn capture(s: &Running) -> Vec<Vec<u8>> {
    let proxy = s.dir.path().join("proxy.sock");
    let listener = UnixListener::bind(&proxy).unwrap();
    let upstream = s.socket.clone();
    let recorded = Arc::new(parking_lot::Mutex::new(Vec::new()));
    let rec = recorded.clone();
    let t = std::thread::spawn(move || {
        let (mut down, _) = listener.accept().unwrap();
        let mut up = UnixStream::connect(upstream).unwrap();
        let (mut up2, mut down2) = (up.try_clone().unwrap(), down.try_clone().unwrap());
        let back = std::thread::spawn(move || std::io::copy(&mut up2, &mut down2));
        let mut buf = [0u8; 65536];
        loop {
            let n = down.read(&mut buf).unwrap_or(0);
            if n == 0 {
                break;
            }
            rec.lock().extend_from_slice(&buf[..n]);
            up.write_all(&buf[..n]).unwrap();
        }
        let _ = up.shutdown(std::net::Shutdown::Both);
        let _ = back.join();
    });
    {
        let o = ConnectOptions {
            transport: Transport::Socket,
            ..options("captured")
        };
        let c = Client::connect(&proxy, &o).unwrap();
        let (ready, fresh) = (keys(1, 3), keys(3, 3));
        let r = c.request_begin("cap", RequestParams::default()).unwrap().id;
        c.lookup_prefix(r, (&ready).into()).unwrap();
        c.lookup_per_key(r, (&fresh).into()).unwrap();
        let mut slots = Vec::new();
        c.prepare_load(r, (&ready).into(), &mut slots).unwrap();
        c.set_positions(r, (&ready).into(), &[0, 1, 2]).unwrap();
        c.touch(r, (&ready).into()).unwrap();
        c.complete_load(r, (&ready).into()).unwrap();
        let mut plan = StorePlan::default();
        c.prepare_store(r, (&fresh).into(), &mut plan).unwrap();
        c.complete_store(r, (&fresh[..1]).into(), true).unwrap();
        c.request_state(r).unwrap();
        c.schedule_end().unwrap();
        c.has_pending_work().unwrap();
        c.manager_stats().unwrap();
        c.tier_stats(0).unwrap();
        c.prometheus_text().unwrap();
        c.take_error_if_dyn(&mut |_| (false, 0)).unwrap();
        c.complete_store(r, (&fresh[1..]).into(), false).unwrap();
        c.request_finished(r).unwrap();
        // A second request left holding a pin and a planned store.
        let r2 = c
            .request_begin("cap2", RequestParams::default())
            .unwrap()
            .id;
        c.prepare_load(r2, (&ready[..1]).into(), &mut slots)
            .unwrap();
        c.prepare_store(r2, (&keys(4, 1)).into(), &mut plan)
            .unwrap();
    }
    t.join().unwrap();
    let bytes = recorded.lock().clone();
    let mut frames = Vec::new();
    let mut at = 0;
    while at < bytes.len() {
        let len = u32::from_le_bytes(bytes[at..at + 4].try_into().unwrap()) as usize;
        frames.push(bytes[at + 4..at + 4 + len].to_vec());
        at += 4 + len;
    }
    assert_eq!(frames.len(), 22, "the calls above, one frame each");
    frames
}

/// Ops whose body starts with a request id after the op byte.
fn names_request(op: u8) -> bool {
    (3..=12).contains(&op)
}

#[test]
fn damaged_real_calls_close_only_their_connection_and_release_what_it_held() {
    let rounds = fault_run::rounds(3) * 40;
    let seed = fault_run::seed();
    let mut rng = Rng(seed);
    let s = start(64, "");
    let mut good = Good::new(&s);
    let frames = capture(&s);
    let (mut closed_early, mut longer) = (0, 0);
    for round in 0..rounds {
        let target = rng.below(frames.len() as u64) as usize;
        let kind = rng.below(5);
        let mut raw = Raw::connect(&s.socket);
        raw.stream
            .set_read_timeout(Some(Duration::from_secs(5)))
            .unwrap();
        // The requests this connection began, in the order the captured
        // calls began theirs.
        let mut ids: Vec<u64> = Vec::new();
        let mut old_ids: Vec<u64> = Vec::new();
        let mut ended = false;
        for (i, original) in frames.iter().enumerate() {
            let mut body = original.clone();
            // Point the calls at this connection's own requests.
            if names_request(body[0]) && body.len() >= 9 {
                let old = u64::from_le_bytes(body[1..9].try_into().unwrap());
                if !old_ids.contains(&old) {
                    old_ids.push(old);
                }
                let n = old_ids.iter().position(|x| *x == old).unwrap();
                if let Some(new) = ids.get(n) {
                    body[1..9].copy_from_slice(&new.to_le_bytes());
                }
            }
            let mut bytes = frame(&body);
            let mut wait_answer = true;
            if i == target {
                match kind {
                    0 => {
                        for _ in 0..1 + rng.below(3) {
                            let at = 4 + rng.below(body.len() as u64) as usize;
                            bytes[at] ^= 1 << rng.below(8);
                        }
                    }
                    1 => {
                        let cut = rng.below(body.len() as u64) as usize;
                        bytes = frame(&body[..cut]);
                    }
                    2 => {
                        let mut b = body.clone();
                        for _ in 0..1 + rng.below(16) {
                            b.push(rng.next() as u8);
                        }
                        bytes = frame(&b);
                    }
                    3 => {
                        // A length shorter than the body: the rest reads
                        // as the next frame.
                        let len = rng.below(body.len() as u64) as u32;
                        bytes[..4].copy_from_slice(&len.to_le_bytes());
                        wait_answer = false;
                    }
                    _ => {
                        // Longer than the body: the server waits for the rest.
                        let len = body.len() as u32 + 1 + rng.below(1000) as u32;
                        bytes[..4].copy_from_slice(&len.to_le_bytes());
                        wait_answer = false;
                        longer += 1;
                    }
                }
            }
            if !raw.try_send(&bytes) {
                ended = true;
                break;
            }
            if !wait_answer {
                break;
            }
            match raw.answer() {
                None => {
                    ended = true;
                    break;
                }
                Some(a) => {
                    if body[0] == 2 && a[0] == 0 && a.len() >= 9 {
                        ids.push(u64::from_le_bytes(a[1..9].try_into().unwrap()));
                    }
                    if (i == 0 && a[0] != 0) || malformed(&a) {
                        assert!(raw.closed(), "round {round} (seed {seed}): left open");
                        ended = true;
                        break;
                    }
                }
            }
        }
        if ended {
            closed_early += 1;
        }
        // However the connection ends, its holdings go with it.
        let _ = raw.stream.shutdown(std::net::Shutdown::Write);
        assert!(raw.closed(), "round {round} (seed {seed}): not closed");
        drop(raw);
        if round % 5 == 4 || round + 1 == rounds {
            good.check(&s, &format!("round {round} (seed {seed})"));
        }
    }
    good.finish();
    println!(
        "fault-run server-damaged-calls rounds={rounds} closed_early={closed_early} \
         longer={longer} seed={seed}"
    );
}

#[test]
fn a_huge_announced_length_closes_only_that_connection() {
    let s = start(64, "");
    let mut good = Good::new(&s);
    for len in [u32::MAX, MAX_FRAME as u32 + 1] {
        for handshake in [false, true] {
            let mut raw = if handshake {
                Raw::engine(&s.socket)
            } else {
                Raw::connect(&s.socket)
            };
            raw.send(&len.to_le_bytes());
            // The server may close before these arrive.
            let _ = raw.try_send(&[3; 100]);
            assert!(raw.closed(), "a frame of {len} bytes announced: left open");
            good.check(&s, &format!("length {len}"));
        }
    }
    // At the bound itself the server waits for the bytes, and a peer
    // that leaves half way is closed like any other.
    let mut raw = Raw::engine(&s.socket);
    raw.send(&(MAX_FRAME as u32).to_le_bytes());
    raw.send(&[0u8; 65536]);
    drop(raw);
    good.check(&s, "a frame cut short");
    good.finish();
}

#[test]
fn connections_past_max_clients_are_refused_and_the_others_served() {
    let s = start(64, r#", "server": {"max_clients": 4}"#);
    let mut good = Good::new(&s);
    // Idle connections, handshaken or not, count.
    let idle = [
        Raw::engine(&s.socket),
        Raw::connect(&s.socket),
        Raw::engine(&s.socket),
    ];
    // The server counts each once it has accepted it: wait for that.
    let full = eventually(Duration::from_secs(5), || {
        match Client::connect(&s.socket, &options("one more")) {
            Err(Error::NoSpace(m)) => {
                assert!(m.contains("server.max_clients"), "{m}");
                true
            }
            Err(e) => panic!("expected NoSpace, got {e}"),
            Ok(_) => false,
        }
    });
    assert!(full, "a fifth connection was admitted");
    let mut raw = Raw::connect(&s.socket);
    let a = raw.answer().expect("a refusal");
    assert!(error_text(&a).contains("server.max_clients"));
    assert!(raw.closed());
    // The admitted ones are served.
    let fresh = keys(7, 2);
    store(&good.c, "f", &fresh);
    assert_eq!(load_checked(&good.c, "f", &fresh), 2);
    // One leaves: room for another.
    drop(idle);
    let admitted = eventually(Duration::from_secs(5), || {
        Client::connect(&s.socket, &options("later")).is_ok()
    });
    assert!(admitted);
    good.check(&s, "after the idle ones left");
    good.finish();
}

#[test]
fn a_connection_that_never_handshakes_is_closed_after_the_handshake_timeout() {
    let s = start(64, r#", "server": {"handshake_timeout_ms": 200}"#);
    let mut good = Good::new(&s);
    let t = Instant::now();
    let mut silent = Raw::connect(&s.socket);
    assert!(silent.closed(), "a silent peer left open");
    assert!(t.elapsed() >= Duration::from_millis(200));
    // A peer that sends its handshake a byte at a time, each byte sooner
    // than the timeout but the whole slower, is closed too.
    let mut drip = Raw::connect(&s.socket);
    let hello = kvtier_testkit::server::hello_frame(1, 0, 0, "");
    assert!(hello.len() > 30);
    let t = Instant::now();
    let cut = hello[..hello.len() - 1].iter().any(|b| {
        std::thread::sleep(Duration::from_millis(100));
        drip.stream.write_all(&[*b]).is_err()
    });
    assert!(
        cut,
        "a dripping handshake kept its connection {:?}",
        t.elapsed()
    );
    good.check(&s, "after the handshake timeouts");
    good.finish();
}

#[test]
fn a_peer_that_never_reads_its_answers_is_closed_alone() {
    let s = start(64, r#", "server": {"send_timeout_ms": 500}"#);
    let mut good = Good::new(&s);
    let mut raw = Raw::engine(&s.socket);
    // A request of its own, holding a pin.
    let mut body = Vec::new();
    kvtier_core::server::wire::Writer::new(&mut body)
        .u8(2)
        .str("r")
        .u32(0)
        .u8(0);
    raw.send(&frame(&body));
    let a = raw.answer().unwrap();
    let id = u64::from_le_bytes(a[1..9].try_into().unwrap());
    let mut body = Vec::new();
    kvtier_core::server::wire::Writer::new(&mut body)
        .u8(5)
        .u64(id)
        .keys(&kvtier_core::key::KeyBatch::from(&good.ready[2..3]));
    raw.send(&frame(&body));
    assert_eq!(raw.answer().unwrap()[0], 0);
    assert_eq!(s.primary("pinned"), 3.0);
    // Then calls whose answers it never reads, until the server stops
    // reading them.
    raw.stream.set_nonblocking(true).unwrap();
    let call = frame(&[17]); // the Prometheus text: a large answer
    let mut stalled = 0;
    let t = Instant::now();
    while stalled < 50 && t.elapsed() < Duration::from_secs(5) {
        match raw.stream.write(&call) {
            Ok(n) if n == call.len() => stalled = 0,
            Ok(_) => break,
            Err(_) => {
                stalled += 1;
                std::thread::sleep(Duration::from_millis(2));
            }
        }
    }
    // Meanwhile the others are served.
    let fresh = keys(8, 2);
    store(&good.c, "f", &fresh);
    assert_eq!(load_checked(&good.c, "f", &fresh), 2);
    // The server gives up on it (its send timeout, 0.5 s here) and
    // releases its pin.
    let released = eventually(Duration::from_secs(20), || s.primary("pinned") == 2.0);
    assert!(released, "the silent reader's connection was never closed");
    raw.stream.set_nonblocking(false).unwrap();
    assert!(raw.closed());
    good.check(&s, "after the peer that never reads");
    good.finish();
}
