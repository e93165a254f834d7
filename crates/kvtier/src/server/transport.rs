//! Frames over a Unix stream socket, for both ends: a frame is written
//! with one `send` (`MSG_NOSIGNAL`: a peer that went away is an error,
//! never a `SIGPIPE` in the engine) and read into a reused buffer.  The
//! client waits for an answer by polling the socket for a short spin,
//! then sleeping in `poll` up to its deadline; the server waits for the
//! next call the same way, then blocks.  A spin yields the core between
//! its polls: on a machine with fewer cores than busy threads the peer
//! it waits for may need that core.

use std::io;
use std::os::fd::{AsRawFd, RawFd};
use std::time::{Duration, Instant};

use super::protocol::MAX_FRAME;

/// Bytes of a frame's length prefix.
pub const PREFIX: usize = 4;

/// Starts a frame in `buf` (cleared): room for the length prefix.
pub fn begin(buf: &mut Vec<u8>) {
    buf.clear();
    buf.extend_from_slice(&[0; PREFIX]);
}

/// Sends the frame `buf` holds (started with [`begin`]): patches its
/// length in and writes it whole.  `deadline` bounds the wait for room
/// in the socket (a peer that never reads); `None` waits as long as the
/// socket's own send timeout lets it.
pub fn send(fd: &impl AsRawFd, buf: &mut [u8], deadline: Option<Instant>) -> io::Result<()> {
    let body = buf.len() - PREFIX;
    if body > MAX_FRAME {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("a message of {body} bytes, over the protocol's {MAX_FRAME}"),
        ));
    }
    buf[..PREFIX].copy_from_slice(&(body as u32).to_le_bytes());
    let fd = fd.as_raw_fd();
    let mut at = 0;
    while at < buf.len() {
        // SAFETY: the pointer and length are within `buf`.
        let n = unsafe {
            libc::send(
                fd,
                buf[at..].as_ptr().cast(),
                buf.len() - at,
                libc::MSG_NOSIGNAL,
            )
        };
        if n >= 0 {
            at += n as usize;
            continue;
        }
        let e = io::Error::last_os_error();
        match e.kind() {
            io::ErrorKind::Interrupted => {}
            io::ErrorKind::WouldBlock => wait(fd, libc::POLLOUT, deadline)?,
            _ => return Err(e),
        }
    }
    Ok(())
}

/// Waits until `fd` has bytes (or a close) to read, or `deadline` passes
/// (then `TimedOut`).
pub fn wait_readable(fd: RawFd, deadline: Option<Instant>) -> io::Result<()> {
    wait(fd, libc::POLLIN, deadline)
}

/// Waits until `fd` is ready for `events` or `deadline` passes (then
/// `TimedOut`).
fn wait(fd: RawFd, events: i16, deadline: Option<Instant>) -> io::Result<()> {
    loop {
        let ms = match deadline {
            None => -1,
            Some(d) => {
                let left = d.saturating_duration_since(Instant::now());
                if left.is_zero() {
                    return Err(io::Error::new(io::ErrorKind::TimedOut, "no answer in time"));
                }
                left.as_millis().clamp(1, i32::MAX as u128) as i32
            }
        };
        let mut p = libc::pollfd {
            fd,
            events,
            revents: 0,
        };
        // SAFETY: one valid pollfd.
        let r = unsafe { libc::poll(&mut p, 1, ms) };
        if r > 0 {
            return Ok(());
        }
        if r < 0 {
            let e = io::Error::last_os_error();
            if e.kind() != io::ErrorKind::Interrupted {
                return Err(e);
            }
        }
    }
}

/// Reads frames from one socket into a reused buffer.
#[derive(Default)]
pub struct FrameReader {
    buf: Vec<u8>,
    /// Bytes of `buf` received.
    filled: usize,
    /// Bytes of `buf` handed out as frames already.
    used: usize,
}

/// How a reader waits for bytes.
#[derive(Clone, Copy, Debug)]
pub enum Waiting {
    /// Blocking `recv` (the socket's receive timeout, if any, applies).
    Block,
    /// Spin on non-blocking `recv` for `spin`, then blocking `recv` (as
    /// [`Waiting::Block`]).
    SpinThenBlock {
        /// How long to spin before sleeping.
        spin: Duration,
    },
    /// Spin on non-blocking `recv` for `spin`, then `poll` until `deadline`.
    Poll {
        /// How long to spin before sleeping.
        spin: Duration,
        /// When to give up (`TimedOut`).
        deadline: Instant,
    },
}

impl FrameReader {
    /// The next frame's body; `Ok(None)` when the peer closed the
    /// connection between frames.  A frame announcing more than
    /// [`MAX_FRAME`] bytes, or a close in the middle of a frame, is
    /// `InvalidData`/`UnexpectedEof`.
    pub fn next(&mut self, fd: &impl AsRawFd, how: Waiting) -> io::Result<Option<&[u8]>> {
        if self.used > 0 {
            self.buf.copy_within(self.used..self.filled, 0);
            self.filled -= self.used;
            self.used = 0;
        }
        let fd = fd.as_raw_fd();
        // Set while spinning: non-blocking `recv`s until then.
        let mut spin_until = match how {
            Waiting::Poll { spin, .. } | Waiting::SpinThenBlock { spin } => {
                Some(Instant::now() + spin)
            }
            Waiting::Block => None,
        };
        loop {
            if self.filled >= PREFIX {
                let len =
                    u32::from_le_bytes(self.buf[..PREFIX].try_into().expect("4 bytes")) as usize;
                if len > MAX_FRAME {
                    return Err(io::Error::new(
                        io::ErrorKind::InvalidData,
                        format!(
                            "a message announcing {len} bytes, over the protocol's {MAX_FRAME}"
                        ),
                    ));
                }
                if self.filled >= PREFIX + len {
                    self.used = PREFIX + len;
                    return Ok(Some(&self.buf[PREFIX..PREFIX + len]));
                }
                // Room grows with the bytes that came, not with the length
                // announced: a peer announcing the largest frame and sending
                // little costs little.
                let want = PREFIX + len;
                if self.filled == self.buf.len() {
                    let grown = want.min(self.buf.len().saturating_mul(2).max(4096));
                    self.buf.try_reserve(grown - self.buf.len()).map_err(|_| {
                        io::Error::new(io::ErrorKind::OutOfMemory, "a message's buffer")
                    })?;
                    self.buf.resize(grown, 0);
                }
            } else if self.buf.len() < 4096 {
                self.buf.resize(4096, 0);
            }
            let flags = match (how, spin_until) {
                (Waiting::Block, _) | (Waiting::SpinThenBlock { .. }, None) => 0,
                (Waiting::SpinThenBlock { .. }, Some(_)) | (Waiting::Poll { .. }, _) => {
                    libc::MSG_DONTWAIT
                }
            };
            // SAFETY: the pointer and length are within `buf`.
            let n = unsafe {
                libc::recv(
                    fd,
                    self.buf[self.filled..].as_mut_ptr().cast(),
                    self.buf.len() - self.filled,
                    flags,
                )
            };
            if n > 0 {
                self.filled += n as usize;
                continue;
            }
            if n == 0 {
                if self.filled == 0 {
                    return Ok(None);
                }
                return Err(io::Error::new(
                    io::ErrorKind::UnexpectedEof,
                    "the peer closed the connection in the middle of a message",
                ));
            }
            let e = io::Error::last_os_error();
            let spinning = spin_until.is_some_and(|s| Instant::now() < s);
            match (e.kind(), how) {
                (io::ErrorKind::Interrupted, _) => {}
                (
                    io::ErrorKind::WouldBlock,
                    Waiting::Poll { .. } | Waiting::SpinThenBlock { .. },
                ) if spinning => {
                    // SAFETY: sched_yield has no preconditions.
                    unsafe { libc::sched_yield() };
                }
                (io::ErrorKind::WouldBlock, Waiting::Poll { deadline, .. }) => {
                    wait(fd, libc::POLLIN, Some(deadline))?;
                }
                (io::ErrorKind::WouldBlock, Waiting::SpinThenBlock { .. })
                    if spin_until.is_some() =>
                {
                    spin_until = None;
                }
                (io::ErrorKind::WouldBlock, Waiting::Block | Waiting::SpinThenBlock { .. }) => {
                    return Err(io::Error::new(
                        io::ErrorKind::TimedOut,
                        "no message in time",
                    ));
                }
                _ => return Err(e),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::net::UnixStream;

    #[test]
    fn frames_cross_whole_in_any_split_and_a_close_between_frames_is_none() {
        let (a, b) = UnixStream::pair().unwrap();
        let mut buf = Vec::new();
        begin(&mut buf);
        buf.extend_from_slice(b"hello");
        send(&a, &mut buf, None).unwrap();
        begin(&mut buf);
        buf.extend(std::iter::repeat_n(7u8, 100_000));
        let big = buf.clone();
        let writer = std::thread::spawn(move || {
            let mut big = big;
            send(&a, &mut big, None).unwrap();
            drop(a);
        });
        let mut r = FrameReader::default();
        assert_eq!(r.next(&b, Waiting::Block).unwrap().unwrap(), b"hello");
        let f = r.next(&b, Waiting::Block).unwrap().unwrap();
        assert_eq!(f.len(), 100_000);
        assert!(f.iter().all(|&x| x == 7));
        writer.join().unwrap();
        assert!(r.next(&b, Waiting::Block).unwrap().is_none());
    }

    #[test]
    fn a_frame_larger_than_the_socket_buffer_crosses_whole_from_a_non_blocking_sender() {
        let (a, b) = UnixStream::pair().unwrap();
        a.set_nonblocking(true).unwrap();
        let body: Vec<u8> = (0..4_000_000u32).map(|i| (i % 251) as u8).collect();
        let expected = body.clone();
        let reader = std::thread::spawn(move || {
            let mut r = FrameReader::default();
            let f = r.next(&b, Waiting::Block).unwrap().unwrap().to_vec();
            assert!(r.next(&b, Waiting::Block).unwrap().is_none());
            f
        });
        let mut buf = Vec::new();
        begin(&mut buf);
        buf.extend_from_slice(&body);
        // Partial sends and waits for room: the frame arrives whole.
        send(&a, &mut buf, Some(Instant::now() + Duration::from_secs(60))).unwrap();
        drop(a);
        assert!(reader.join().unwrap() == expected, "the frame's bytes");
    }

    #[test]
    fn a_frame_over_the_protocols_bound_is_refused_and_one_at_it_is_sent() {
        let (a, b) = UnixStream::pair().unwrap();
        let reader = std::thread::spawn(move || {
            let mut r = FrameReader::default();
            let n = r.next(&b, Waiting::Block).unwrap().unwrap().len();
            (n, r.next(&b, Waiting::Block).unwrap().is_none())
        });
        let mut buf = Vec::new();
        begin(&mut buf);
        buf.resize(PREFIX + MAX_FRAME + 1, 0);
        let e = send(&a, &mut buf, None).unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::InvalidInput);
        buf.truncate(PREFIX + MAX_FRAME);
        send(&a, &mut buf, None).unwrap();
        drop(a);
        assert_eq!(
            reader.join().unwrap(),
            (MAX_FRAME, true),
            "nothing of the refused one"
        );
    }

    #[test]
    fn room_grows_with_the_bytes_received_not_the_length_announced() {
        let (a, b) = UnixStream::pair().unwrap();
        use std::io::Write;
        (&a).write_all(&(MAX_FRAME as u32).to_le_bytes()).unwrap();
        (&a).write_all(&[1u8; 10_000]).unwrap();
        drop(a);
        let mut r = FrameReader::default();
        let e = r.next(&b, Waiting::Block).unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::UnexpectedEof);
        assert!(
            r.buf.len() <= 32 * 1024,
            "{} bytes for 10 kB received",
            r.buf.len()
        );
    }

    #[test]
    fn a_huge_announced_length_and_a_cut_frame_are_errors() {
        let (a, b) = UnixStream::pair().unwrap();
        use std::io::Write;
        (&a).write_all(&u32::MAX.to_le_bytes()).unwrap();
        let mut r = FrameReader::default();
        let e = r.next(&b, Waiting::Block).unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::InvalidData);
        let (a, b) = UnixStream::pair().unwrap();
        (&a).write_all(&10u32.to_le_bytes()).unwrap();
        (&a).write_all(b"abc").unwrap();
        drop(a);
        let e = FrameReader::default().next(&b, Waiting::Block).unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::UnexpectedEof);
    }

    #[test]
    fn a_late_answer_wakes_a_reader_asleep_in_poll_and_a_late_frame_end_too() {
        let (a, b) = UnixStream::pair().unwrap();
        let writer = std::thread::spawn(move || {
            use std::io::Write;
            std::thread::sleep(Duration::from_millis(50));
            (&a).write_all(&5u32.to_le_bytes()).unwrap();
            (&a).write_all(b"ab").unwrap();
            std::thread::sleep(Duration::from_millis(50));
            (&a).write_all(b"cde").unwrap();
            a
        });
        let how = Waiting::Poll {
            spin: Duration::ZERO,
            deadline: Instant::now() + Duration::from_secs(60),
        };
        let mut r = FrameReader::default();
        assert_eq!(r.next(&b, how).unwrap().unwrap(), b"abcde");
        drop(writer.join().unwrap());
        let how = Waiting::Poll {
            spin: Duration::ZERO,
            deadline: Instant::now() + Duration::from_secs(60),
        };
        assert!(
            r.next(&b, how).unwrap().is_none(),
            "the close, not a timeout"
        );
    }

    #[test]
    fn a_silent_peer_times_out_at_the_deadline() {
        let (_a, b) = UnixStream::pair().unwrap();
        let t = Instant::now();
        let how = Waiting::Poll {
            spin: Duration::from_micros(50),
            deadline: t + Duration::from_millis(100),
        };
        let e = FrameReader::default().next(&b, how).unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::TimedOut);
        assert!(t.elapsed() >= Duration::from_millis(100));
        assert!(t.elapsed() < Duration::from_secs(5));
    }

    #[test]
    fn spin_then_block_reads_a_frame_sent_after_the_spin_and_keeps_the_timeout() {
        let (a, b) = UnixStream::pair().unwrap();
        let how = Waiting::SpinThenBlock {
            spin: Duration::from_micros(50),
        };
        let writer = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(50));
            let mut buf = Vec::new();
            begin(&mut buf);
            buf.extend_from_slice(b"late");
            send(&a, &mut buf, None).unwrap();
            a
        });
        let mut r = FrameReader::default();
        assert_eq!(r.next(&b, how).unwrap().unwrap(), b"late");
        let _a = writer.join().unwrap();
        // With a receive timeout on the socket, the blocking part times out.
        b.set_read_timeout(Some(Duration::from_millis(20))).unwrap();
        let e = r.next(&b, how).unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::TimedOut);
    }

    #[test]
    fn sending_to_a_closed_peer_is_an_error_not_a_signal() {
        let (a, b) = UnixStream::pair().unwrap();
        drop(b);
        let mut buf = Vec::new();
        begin(&mut buf);
        buf.push(1);
        assert!(send(&a, &mut buf, None).is_err());
    }
}
