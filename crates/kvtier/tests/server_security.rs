//! Who may connect to the node server, and what it leaves on disk: the
//! protocol version and the layout checked at the handshake, the peer's
//! credentials (`SO_PEERCRED`), the socket's and the region's modes, and
//! a socket path already taken.

use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::Path;
use std::process::Stdio;

use kvtier_core::Error;
use kvtier_core::server::protocol::get_error;
use kvtier_core::server::wire::Reader;
use kvtier_core::server::{Client, ConnectOptions, DaemonConfig, Server};
use kvtier_testkit::require::require_root;
use kvtier_testkit::server::{
    BLOCK, Raw, child, config_json, frame, hello_frame, keys, load_checked, options, start, store,
};

/// The error a refused handshake answers, after which the server closes.
fn refusal(raw: &mut Raw) -> Error {
    let a = raw.answer().expect("an answer");
    assert_eq!(a[0], 1, "not refused");
    let e = get_error(&mut Reader::new(&a[1..])).unwrap();
    assert!(raw.closed(), "the connection stays open after a refusal");
    e
}

#[test]
fn a_client_of_another_protocol_version_is_refused_naming_both_versions() {
    let s = start(64, "");
    for tail in [&b""[..], b"\x01\x02 a future version's fields"] {
        let mut raw = Raw::connect(&s.socket);
        let mut f = hello_frame(2, BLOCK as u64, 0, "");
        // A version 2 hello may carry anything after its version.
        f.truncate(4 + 1 + 8 + 4);
        f.extend_from_slice(tail);
        let len = (f.len() - 4) as u32;
        f[..4].copy_from_slice(&len.to_le_bytes());
        raw.send(&f);
        match refusal(&mut raw) {
            Error::Unsupported(m) => {
                assert!(m.contains("version 2") && m.contains("version 1"), "{m}")
            }
            e => panic!("expected Unsupported, got {e:?}"),
        }
    }
    // A frame that is not a kvtier hello at all.
    let mut raw = Raw::connect(&s.socket);
    raw.send(&frame(b"\x01GET / HTTP/1.1"));
    assert!(matches!(refusal(&mut raw), Error::InvalidArgument(_)));
    // The server serves a client of its own version all the same.
    let c = s.connect();
    store(&c, "s", &keys(1, 2));
    assert_eq!(load_checked(&c, "l", &keys(1, 2)), 2);
}

#[test]
fn a_different_layout_is_refused_naming_the_difference() {
    let s = start(64, r#", "server": {"fingerprint": "model-a/tp2"}"#);
    let stride = s.server.info().slot_stride;
    let refused = |o: ConnectOptions, expect: &str| match Client::connect(&s.socket, &o) {
        Err(Error::InvalidArgument(m)) => assert!(m.contains(expect), "{m}"),
        other => panic!("expected a refusal naming {expect}, got {:?}", other.err()),
    };
    let good = || ConnectOptions {
        fingerprint: "model-a/tp2".into(),
        ..options("layout")
    };
    refused(
        ConnectOptions {
            block_bytes: 8192,
            ..good()
        },
        "block bytes 8192 (the server's: 4096)",
    );
    refused(
        ConnectOptions {
            slot_stride: stride + 64,
            ..good()
        },
        &format!("slot stride {} (the server's: {stride})", stride + 64),
    );
    refused(
        ConnectOptions {
            fingerprint: "model-b/tp2".into(),
            ..good()
        },
        r#"fingerprint "model-b/tp2" (the server's: "model-a/tp2")"#,
    );
    refused(options("no fingerprint"), r#"fingerprint "" (the server's"#);
    // Every difference at once is named at once.
    let o = ConnectOptions {
        block_bytes: 1,
        slot_stride: 2,
        fingerprint: "x".into(),
        ..good()
    };
    match Client::connect(&s.socket, &o) {
        Err(Error::InvalidArgument(m)) => {
            assert!(
                m.contains("block bytes 1") && m.contains("slot stride 2") && m.contains("\"x\""),
                "{m}"
            )
        }
        other => panic!("expected a refusal, got {:?}", other.err()),
    }
    // The same layout, given in full or left to the server, connects.
    let exact = ConnectOptions {
        block_bytes: BLOCK as u64,
        slot_stride: stride,
        ..good()
    };
    let c = Client::connect(&s.socket, &exact).unwrap();
    store(&c, "s", &keys(1, 2));
    let d = Client::connect(&s.socket, &good()).unwrap();
    assert_eq!(load_checked(&d, "l", &keys(1, 2)), 2);
}

#[test]
fn a_uid_not_allowed_is_refused_and_an_allowed_uid_or_gid_connects() {
    // SAFETY: getuid and getgid have no preconditions.
    let (uid, gid) = unsafe { (libc::getuid(), libc::getgid()) };
    let other = uid.wrapping_add(1);
    let s = start(
        64,
        &format!(
            r#", "server": {{"allowed_uids": [{other}], "allowed_gids": [{}]}}"#,
            gid + 1
        ),
    );
    match Client::connect(&s.socket, &options("me")) {
        Err(Error::PeerFailed(m)) => assert!(
            m.contains(&format!("uid {uid}")) && m.contains("server.allowed_uids"),
            "{m}"
        ),
        other => panic!("expected PeerFailed, got {:?}", other.err()),
    }
    // Refused at accept: an observer too.
    assert!(matches!(
        Client::observe(&s.socket, &options("me")),
        Err(Error::PeerFailed(_))
    ));
    drop(s);
    let s = start(
        64,
        &format!(r#", "server": {{"allowed_uids": [{other}, {uid}]}}"#),
    );
    s.connect();
    drop(s);
    let s = start(64, &format!(r#", "server": {{"allowed_gids": [{gid}]}}"#));
    s.connect();
}

/// Child: as uid and gid 65534, connects to `KVTIER_SRV_SOCKET` and
/// prints what it got.
#[test]
#[ignore = "run by as_root_another_user_is_refused_by_a_default_server"]
fn child_other_user() {
    let socket = std::env::var("KVTIER_SRV_SOCKET").unwrap();
    // SAFETY: plain system calls; the process is this child alone.
    unsafe {
        assert_eq!(libc::setgroups(0, std::ptr::null()), 0);
        assert_eq!(libc::setgid(65534), 0);
        assert_eq!(libc::setuid(65534), 0);
    }
    match Client::connect(Path::new(&socket), &options("nobody")) {
        Ok(_) => println!("outcome: connected"),
        Err(e) => println!("outcome: {e:?}"),
    }
}

fn as_nobody(socket: &Path) -> String {
    let out = child(
        "child_other_user",
        &[("KVTIER_SRV_SOCKET", socket.display().to_string())],
    )
    .stderr(Stdio::inherit())
    .output()
    .unwrap();
    assert!(out.status.success());
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    text.lines()
        .find_map(|l| l.strip_prefix("outcome: "))
        .unwrap_or_else(|| panic!("the child said nothing: {text}"))
        .to_string()
}

#[test]
fn as_root_another_user_is_refused_by_a_default_server() {
    if !require_root("connecting as another user") {
        return;
    }
    // The socket world-writable, so that only the credential check stands
    // in the way.
    let s = start(64, r#", "server": {"mode": 438}"#);
    std::fs::set_permissions(s.dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let outcome = as_nobody(&s.socket);
    assert!(
        outcome.starts_with("PeerFailed") && outcome.contains("uid 65534"),
        "{outcome}"
    );
    drop(s);
    // With the default mode (0600) the socket itself keeps it out.
    let s = start(64, "");
    std::fs::set_permissions(s.dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let outcome = as_nobody(&s.socket);
    assert!(outcome.contains("PermissionDenied"), "{outcome}");
    // Allowed by uid, it connects (and maps the region: mode 0666).
    drop(s);
    let s = start(64, r#", "server": {"mode": 438, "allowed_uids": [65534]}"#);
    std::fs::set_permissions(s.dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    assert_eq!(as_nobody(&s.socket), "connected");
}

/// The region's files of server `s`.
fn region_files(dir: &Path, region: &str) -> Vec<std::path::PathBuf> {
    let files: Vec<_> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.file_name().unwrap().to_string_lossy().starts_with(region))
        .collect();
    assert!(!files.is_empty(), "no file of region {region}");
    files
}

#[test]
fn the_socket_and_the_region_files_take_the_configured_mode_and_group() {
    let s = start(64, "");
    let mode = |p: &Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode(&s.socket), 0o600);
    for f in region_files(s.dir.path(), &s.server.info().region_name) {
        assert_eq!(mode(&f), 0o600, "{}", f.display());
    }
    drop(s);
    let group = if unsafe { libc::geteuid() } == 0 {
        ", \"group\": 65534"
    } else {
        ""
    };
    let s = start(64, &format!(r#", "server": {{"mode": 416 {group}}}"#));
    assert_eq!(mode(&s.socket), 0o640);
    let files = region_files(s.dir.path(), &s.server.info().region_name);
    for f in files.iter().chain([&s.socket]) {
        assert_eq!(mode(f), 0o640, "{}", f.display());
        if !group.is_empty() {
            assert_eq!(
                std::fs::metadata(f).unwrap().gid(),
                65534,
                "{}",
                f.display()
            );
        }
    }
    s.connect();
}

fn second_server(socket: &Path) -> kvtier_core::Result<Server> {
    let dir = tempfile::tempdir().unwrap();
    let json = config_json(dir.path(), 64, "");
    Server::start(DaemonConfig::from_json(&json).unwrap(), socket)
}

#[test]
fn a_socket_a_live_server_listens_on_is_already_exists() {
    let s = start(64, "");
    let c = s.connect();
    match second_server(&s.socket) {
        Err(Error::AlreadyExists(m)) => assert!(m.contains("listening"), "{m}"),
        other => panic!("expected AlreadyExists, got {:?}", other.err()),
    }
    // The first server goes on serving on it.
    store(&c, "s", &keys(1, 2));
    assert_eq!(load_checked(&s.connect(), "l", &keys(1, 2)), 2);
}

#[test]
fn a_regular_file_at_the_socket_path_is_an_error_and_left_untouched() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("kvtierd.sock");
    std::fs::write(&path, b"precious").unwrap();
    match second_server(&path) {
        Err(Error::AlreadyExists(m)) => assert!(m.contains("not a socket"), "{m}"),
        other => panic!("expected AlreadyExists, got {:?}", other.err()),
    }
    assert_eq!(std::fs::read(&path).unwrap(), b"precious");
    // A directory as well.
    let sub = dir.path().join("d");
    std::fs::create_dir(&sub).unwrap();
    assert!(second_server(&sub).is_err());
    assert!(sub.is_dir());
}

#[test]
fn a_stale_socket_is_replaced_unless_another_user_owns_it() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("kvtierd.sock");
    drop(std::os::unix::net::UnixListener::bind(&path).unwrap());
    let server = second_server(&path).unwrap();
    drop(server);
    if unsafe { libc::geteuid() } != 0 {
        return;
    }
    let _ = std::fs::remove_file(&path);
    drop(std::os::unix::net::UnixListener::bind(&path).unwrap());
    std::os::unix::fs::lchown(&path, Some(65534), None).unwrap();
    match second_server(&path) {
        Err(Error::AlreadyExists(m)) => assert!(m.contains("uid 65534"), "{m}"),
        other => panic!("expected AlreadyExists, got {:?}", other.err()),
    }
    assert_eq!(std::fs::metadata(&path).unwrap().uid(), 65534);
}
