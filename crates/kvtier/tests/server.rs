//! The node server in one process: a server thread and connected
//! managers, through the real socket and the real shared region.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use kvtier_core::Error;
use kvtier_core::Key;
use kvtier_core::primary::StorePlan;
use kvtier_core::request::RequestId;
use kvtier_core::server::{Client, ConnectOptions, DaemonConfig, Server};
use kvtier_core::tiering::{LookupResult, ManagerCalls, RequestParams};

struct Running {
    stop: Arc<AtomicBool>,
    thread: Option<std::thread::JoinHandle<kvtier_core::Result<()>>>,
    socket: PathBuf,
    _dir: tempfile::TempDir,
}

impl Drop for Running {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

fn start(extra: &str) -> Running {
    let dir = tempfile::tempdir().unwrap();
    let socket = dir.path().join("kvtierd.sock");
    let name = format!("srvtest{}", std::process::id());
    let json = format!(
        r#"{{"block_bytes": 4096, "region": {{"name": "{name}", "directory": "{}"}},
            "primary": {{"capacity": 64}} {extra}}}"#,
        dir.path().display()
    );
    let config = DaemonConfig::from_json(&json).unwrap();
    let server = Server::start(config, &socket).unwrap();
    let stop = Arc::new(AtomicBool::new(false));
    let s2 = stop.clone();
    let thread = std::thread::spawn(move || server.run(&s2));
    Running {
        stop,
        thread: Some(thread),
        socket,
        _dir: dir,
    }
}

fn connect(path: &Path) -> Client {
    Client::connect(path, &ConnectOptions::default()).unwrap()
}

fn keys(prefix: u8, n: usize) -> Vec<Key> {
    (0..n)
        .map(|i| Key::new(&[prefix, i as u8, 7, 7]).unwrap())
        .collect()
}

#[test]
fn a_block_one_engine_stored_is_a_hit_for_another_with_its_bytes() {
    let s = start("");
    let a = connect(&s.socket);
    let b = connect(&s.socket);
    let ks = keys(1, 8);
    let ra = a.request_begin("r", RequestParams::default()).unwrap().id;
    let mut plan = StorePlan::default();
    a.prepare_store(ra, (&ks).into(), &mut plan).unwrap();
    assert_eq!(plan.to_store.len(), 8);
    let sm = a.slot_memory().unwrap();
    for (i, slot) in plan.slots.iter().enumerate() {
        sm.write(*slot, 0, &[i as u8 + 100; 4096]).unwrap();
    }
    a.complete_store(ra, (&ks).into(), true).unwrap();
    a.request_finished(ra).unwrap();
    // Same name in another engine: no clash.
    let rb = b.request_begin("r", RequestParams::default()).unwrap().id;
    let ans = b.lookup_prefix(rb, (&ks).into()).unwrap();
    assert_eq!((ans.hits, ans.stop), (8, LookupResult::Hit));
    let mut slots = Vec::new();
    b.prepare_load(rb, (&ks).into(), &mut slots).unwrap();
    let smb = b.slot_memory().unwrap();
    for (i, slot) in slots.iter().enumerate() {
        let mut out = vec![0u8; 4096];
        smb.read(*slot, 0, &mut out).unwrap();
        assert!(out.iter().all(|&x| x == i as u8 + 100));
    }
    // Another engine's request is unknown here.
    let e = a.complete_load(rb, (&ks).into()).unwrap_err();
    assert!(matches!(e, Error::UnknownRequest(_)), "{e}");
    b.complete_load(rb, (&ks).into()).unwrap();
    b.request_finished(rb).unwrap();
    let _ = RequestId(0);
}
