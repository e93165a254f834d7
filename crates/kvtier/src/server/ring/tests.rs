use super::*;
use crate::server::transport;
use std::os::unix::net::UnixStream;

/// A server's ring and a client's mapping of the same file, with a
/// socket pair standing for the connection.
fn pair() -> (Ring, Ring, UnixStream, UnixStream) {
    let (server, fd) = Ring::create().unwrap();
    let client = Ring::map(&fd).unwrap();
    let (a, b) = UnixStream::pair().unwrap();
    (server, client, a, b)
}

const LONG: Duration = Duration::from_secs(10);

#[test]
fn calls_and_answers_cross_in_order_spinning_or_sleeping() {
    let (mut server, mut client, s_sock, c_sock) = pair();
    let t = std::thread::spawn(move || {
        let mut buf = Vec::new();
        for i in 0..300u32 {
            // A third of the calls find the server asleep on the futex.
            let spin = if i % 3 == 0 {
                Duration::ZERO
            } else {
                Duration::from_micros(50)
            };
            let got = server
                .wait_call(s_sock.as_raw_fd(), spin, &mut buf)
                .unwrap();
            assert_eq!(got, Arrived::Ring);
            assert_eq!(buf, i.to_le_bytes());
            let mut answer = buf.clone();
            answer.extend_from_slice(b"ok");
            assert!(!server.send_answer(&answer));
        }
        s_sock
    });
    let mut into = Vec::new();
    for i in 0..300u32 {
        if i % 3 == 0 {
            std::thread::sleep(Duration::from_millis(1));
        }
        assert!(!client.send_call(&i.to_le_bytes()));
        let spin = if i % 2 == 0 {
            Duration::ZERO
        } else {
            Duration::from_micros(50)
        };
        let at = client
            .wait_answer(c_sock.as_raw_fd(), spin, Instant::now() + LONG, &mut into)
            .unwrap();
        assert_eq!(at, Arrived::Ring);
        assert_eq!(&into[..4], i.to_le_bytes());
        assert_eq!(&into[4..], b"ok");
    }
    t.join().unwrap();
}

#[test]
fn frames_larger_than_an_area_are_announced_as_on_the_socket() {
    let (mut server, mut client, s_sock, c_sock) = pair();
    let mut buf = Vec::new();
    assert!(client.send_call(&vec![1u8; AREA + 1]));
    let got = server.wait_call(s_sock.as_raw_fd(), LONG, &mut buf);
    assert_eq!(got.unwrap(), Arrived::Socket);
    assert!(server.send_answer(&vec![2u8; AREA + 1]));
    let got = client.wait_answer(c_sock.as_raw_fd(), LONG, Instant::now() + LONG, &mut buf);
    assert_eq!(got.unwrap(), Arrived::Socket);
    // A frame of exactly an area fits.
    assert!(!client.send_call(&vec![3u8; AREA]));
    assert_eq!(
        server
            .wait_call(s_sock.as_raw_fd(), LONG, &mut buf)
            .unwrap(),
        Arrived::Ring
    );
    assert_eq!(buf.len(), AREA);
    assert!(buf.iter().all(|&b| b == 3));
}

#[test]
fn a_hostile_length_ends_the_wait_with_an_error_and_the_file_cannot_be_resized() {
    let (mut server, fd) = Ring::create().unwrap();
    let client = Ring::map(&fd).unwrap();
    let (s_sock, _c_sock) = UnixStream::pair().unwrap();
    let mut buf = Vec::new();
    for len in [AREA as u32 + 1, u32::MAX - 1, 1 << 31] {
        client.word(REQ_LEN).store(len, Ordering::Relaxed);
        let seq = client.word(REQ_SEQ).load(Ordering::Relaxed);
        client.word(REQ_SEQ).store(seq ^ 0x5555, Ordering::Release);
        let e = server
            .wait_call(s_sock.as_raw_fd(), LONG, &mut buf)
            .unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::InvalidData);
        assert!(buf.capacity() <= AREA, "nothing copied for a bad length");
    }
    // Any change of sequence is a call: no order is assumed.
    client.word(REQ_LEN).store(3, Ordering::Relaxed);
    client.word(REQ_SEQ).store(7, Ordering::Release);
    assert_eq!(
        server
            .wait_call(s_sock.as_raw_fd(), LONG, &mut buf)
            .unwrap(),
        Arrived::Ring
    );
    assert_eq!(buf.len(), 3);
    // Sealed: a client cannot shrink the file under the server's mapping.
    // SAFETY: plain call on an owned descriptor.
    let r = unsafe { libc::ftruncate(fd.as_raw_fd(), 4096) };
    assert_ne!(r, 0);
    // A file that could shrink, or of another size, is refused at mapping.
    for (size, seal) in [(BYTES, false), (4096, true)] {
        let flags = libc::MFD_CLOEXEC | libc::MFD_ALLOW_SEALING;
        // SAFETY: a NUL-terminated name; the descriptor is owned below.
        let other = unsafe { libc::memfd_create(c"x".as_ptr(), flags) };
        // SAFETY: just opened.
        let other = unsafe { OwnedFd::from_raw_fd(other) };
        // SAFETY: plain calls on an owned descriptor.
        unsafe {
            assert_eq!(libc::ftruncate(other.as_raw_fd(), size as libc::off_t), 0);
            if seal {
                assert_eq!(
                    libc::fcntl(other.as_raw_fd(), libc::F_ADD_SEALS, libc::F_SEAL_SHRINK),
                    0
                );
            }
        }
        assert!(Ring::map(&other).is_err(), "size {size}, sealed {seal}");
    }
}

#[test]
fn a_client_that_closes_its_socket_ends_the_servers_wait() {
    let (mut server, _client, s_sock, c_sock) = pair();
    let closer = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(100));
        drop(c_sock);
    });
    let t = Instant::now();
    let got = server.wait_call(s_sock.as_raw_fd(), Duration::ZERO, &mut Vec::new());
    assert_eq!(got.unwrap(), Arrived::SocketOnly);
    assert!(t.elapsed() < Duration::from_secs(5));
    closer.join().unwrap();
}

#[test]
fn a_server_that_closes_its_socket_ends_the_clients_wait_before_the_deadline() {
    let (_server, mut client, s_sock, c_sock) = pair();
    client.send_call(b"x");
    let closer = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(100));
        drop(s_sock);
    });
    let t = Instant::now();
    let e = client
        .wait_answer(
            c_sock.as_raw_fd(),
            Duration::from_micros(50),
            t + Duration::from_secs(30),
            &mut Vec::new(),
        )
        .unwrap_err();
    assert_eq!(e.kind(), io::ErrorKind::UnexpectedEof);
    assert!(t.elapsed() < Duration::from_secs(5));
    closer.join().unwrap();
}

#[test]
fn a_silent_server_times_out_at_the_deadline() {
    let (_server, mut client, _s_sock, c_sock) = pair();
    client.send_call(b"x");
    let t = Instant::now();
    let e = client
        .wait_answer(
            c_sock.as_raw_fd(),
            Duration::ZERO,
            t + Duration::from_millis(100),
            &mut Vec::new(),
        )
        .unwrap_err();
    assert_eq!(e.kind(), io::ErrorKind::TimedOut);
    assert!(t.elapsed() >= Duration::from_millis(100));
}

#[test]
fn a_frame_and_its_descriptor_cross_together() {
    let (a, b) = UnixStream::pair().unwrap();
    let (_ring, fd) = Ring::create().unwrap();
    let mut buf = Vec::new();
    transport::begin(&mut buf);
    buf.extend_from_slice(&[0, 1]);
    send_frame_with_fd(&a, &mut buf, &fd, None).unwrap();
    let (frame, got) = recv_frame_with_fd(&b, Instant::now() + LONG).unwrap();
    assert_eq!(frame, [0, 1]);
    Ring::map(&got.unwrap()).unwrap();
    // Without a descriptor: the frame alone.
    transport::begin(&mut buf);
    buf.push(9);
    transport::send(&a, &mut buf, None).unwrap();
    let (frame, got) = recv_frame_with_fd(&b, Instant::now() + LONG).unwrap();
    assert_eq!(frame, [9]);
    assert!(got.is_none());
    drop(a);
    let e = recv_frame_with_fd(&b, Instant::now() + LONG).unwrap_err();
    assert_eq!(e.kind(), io::ErrorKind::UnexpectedEof);
}
