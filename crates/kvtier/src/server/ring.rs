//! The shared-memory carrier: the same frames as over the socket, carried
//! through a memory file the server creates at the client's request
//! ([`Op::Ring`](super::protocol::Op::Ring)) and passes over the socket
//! (`SCM_RIGHTS`), so a call costs no `send`/`recv` while both ends are
//! awake.  The socket stays open: it carries the frames too large for an
//! area, and its close is how each end learns the other died.
//!
//! Layout: a control page, then the request area, then the answer area.
//! The client copies a call's body into the request area, stores its
//! length and bumps the request sequence; the server copies it out (the
//! client may still write there: nothing is decoded in place), answers
//! into the answer area and stores the request's sequence as the answer
//! sequence.  Each end waits by spinning (yielding the core), then on a
//! futex over the word it waits for, with a "sleeping" flag the other end
//! reads to know whether to wake it.  A body larger than its area crosses
//! the socket, announced by the length [`ON_SOCKET`].  The server trusts
//! nothing in the mapping: a length is read once and bounded, a sequence
//! is only "changed", and the file is sealed against resizing.

use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

/// Bytes of each area (request, answer).
pub const AREA: usize = 256 << 10;
/// Bytes of the control page.
const CONTROL: usize = 4096;
/// Bytes of the whole mapping.
pub const BYTES: usize = CONTROL + 2 * AREA;
/// The length that says the frame crosses the socket instead.
pub const ON_SOCKET: u32 = u32::MAX;

// Control words, each on its own cache line.
const REQ_SEQ: usize = 0;
const ANS_SEQ: usize = 64;
const SERVER_SLEEPS: usize = 128;
const CLIENT_SLEEPS: usize = 192;
const REQ_LEN: usize = 256;
const ANS_LEN: usize = 320;

/// Longest futex sleep between two looks at the socket (a peer's death).
const NAP: Duration = Duration::from_millis(20);

/// What carries a connection's frames after its handshake.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Transport {
    /// The Unix socket: each call a `send` and a `recv` at each end.
    Socket,
    /// Shared memory (this module), if the server grants it (else
    /// the socket): no system call per call while both ends are awake.
    Ring,
}

/// A mapping of the ring's memory file.
pub struct Ring {
    base: *mut u8,
    /// The last request sequence seen (server) or sent (client).
    seq: u32,
}

// SAFETY: the mapping is process-wide memory; only atomics and raw copies
// touch it.
unsafe impl Send for Ring {}

impl Drop for Ring {
    fn drop(&mut self) {
        // SAFETY: `base` was mapped with `BYTES` in `map`.
        unsafe { libc::munmap(self.base.cast(), BYTES) };
    }
}

/// Where a frame is.
#[derive(Debug, PartialEq, Eq)]
pub enum Arrived {
    /// In the ring, copied to the caller's buffer.
    Ring,
    /// Announced by the ring, on the socket.
    Socket,
    /// Not announced by the ring: the socket is readable (a frame sent
    /// without the ring, or its close).
    SocketOnly,
}

impl Ring {
    /// Creates the server's ring: a sealed memory file (its size fixed)
    /// and its mapping.
    pub fn create() -> io::Result<(Ring, OwnedFd)> {
        // SAFETY: a NUL-terminated name.
        let fd = unsafe {
            libc::memfd_create(
                c"kvtier-ring".as_ptr(),
                libc::MFD_CLOEXEC | libc::MFD_ALLOW_SEALING,
            )
        };
        if fd < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: a descriptor just opened, owned here.
        let fd = unsafe { OwnedFd::from_raw_fd(fd) };
        // SAFETY: plain calls on an owned descriptor.
        unsafe {
            if libc::ftruncate(fd.as_raw_fd(), BYTES as libc::off_t) != 0 {
                return Err(io::Error::last_os_error());
            }
            let seals = libc::F_SEAL_SHRINK | libc::F_SEAL_GROW | libc::F_SEAL_SEAL;
            if libc::fcntl(fd.as_raw_fd(), libc::F_ADD_SEALS, seals) != 0 {
                return Err(io::Error::last_os_error());
            }
        }
        Ok((Ring::map(&fd)?, fd))
    }

    /// Maps the ring of `fd` (the client's side), checking its size and
    /// that it is sealed against shrinking.
    pub fn map(fd: &OwnedFd) -> io::Result<Ring> {
        // SAFETY: `st` is written by fstat.
        let mut st: libc::stat = unsafe { std::mem::zeroed() };
        // SAFETY: valid descriptor and out pointer.
        if unsafe { libc::fstat(fd.as_raw_fd(), &mut st) } != 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: a plain call on a valid descriptor.
        let seals = unsafe { libc::fcntl(fd.as_raw_fd(), libc::F_GET_SEALS) };
        if seals < 0 || seals & libc::F_SEAL_SHRINK == 0 {
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                "a ring that could shrink under its mapping",
            ));
        }
        if st.st_size as u64 != BYTES as u64 {
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                format!("a ring of {} bytes, not {BYTES}", st.st_size),
            ));
        }
        // SAFETY: a shared mapping of the whole file.
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                BYTES,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED,
                fd.as_raw_fd(),
                0,
            )
        };
        if p == libc::MAP_FAILED {
            return Err(io::Error::last_os_error());
        }
        let base = p.cast::<u8>();
        // SAFETY: within the mapping, aligned.
        let seq = unsafe { &*base.add(REQ_SEQ).cast::<AtomicU32>() }.load(Ordering::Acquire);
        Ok(Ring { base, seq })
    }

    fn word(&self, at: usize) -> &AtomicU32 {
        // SAFETY: every control offset is within the page and 4-aligned;
        // the mapping lives as long as `self`.
        unsafe { &*self.base.add(at).cast::<AtomicU32>() }
    }

    /// Copies `len` bytes (bounded by the caller) of the area at `area`
    /// into `into`.
    fn copy_out(&self, area: usize, len: usize, into: &mut Vec<u8>) {
        into.clear();
        into.reserve(len);
        // SAFETY: `area + len` is within the mapping (len ≤ AREA); `into`
        // has room for `len` bytes, all written before `set_len`.
        unsafe {
            std::ptr::copy_nonoverlapping(self.base.add(area), into.as_mut_ptr(), len);
            into.set_len(len);
        }
    }

    fn copy_in(&self, area: usize, body: &[u8]) {
        debug_assert!(body.len() <= AREA);
        // SAFETY: within the mapping (body ≤ AREA).
        unsafe { std::ptr::copy_nonoverlapping(body.as_ptr(), self.base.add(area), body.len()) };
    }

    /// Client: publishes a call's body (into the area, or announced as on
    /// the socket when larger: the caller then sends it there) and wakes
    /// the server if it sleeps.  Whether the body is on the socket.
    pub fn send_call(&mut self, body: &[u8]) -> bool {
        let fits = body.len() <= AREA;
        if fits {
            self.copy_in(CONTROL, body);
            self.word(REQ_LEN)
                .store(body.len() as u32, Ordering::Relaxed);
        } else {
            self.word(REQ_LEN).store(ON_SOCKET, Ordering::Relaxed);
        }
        self.seq = self.seq.wrapping_add(1);
        self.word(REQ_SEQ).store(self.seq, Ordering::SeqCst);
        if self.word(SERVER_SLEEPS).load(Ordering::SeqCst) != 0 {
            wake(self.word(REQ_SEQ));
        }
        !fits
    }

    /// Client: waits for the answer to the last call (`spin`, then futex
    /// sleeps up to `deadline`, looking at the socket between them) and
    /// copies it into `into`; [`Arrived::Socket`] when the answer is on the
    /// socket.  A closed socket is `UnexpectedEof`, the deadline
    /// `TimedOut`, an answer length past the area `InvalidData`.
    pub fn wait_answer(
        &mut self,
        socket: RawFd,
        spin: Duration,
        deadline: Instant,
        into: &mut Vec<u8>,
    ) -> io::Result<Arrived> {
        let want = self.seq;
        let ready = |r: &Ring| r.word(ANS_SEQ).load(Ordering::Acquire) == want;
        if !spin_until(|| ready(self), spin) {
            loop {
                let now = Instant::now();
                if now >= deadline {
                    return Err(io::Error::new(io::ErrorKind::TimedOut, "no answer in time"));
                }
                if sleep_on(
                    self.word(ANS_SEQ),
                    self.word(CLIENT_SLEEPS),
                    |v| v == want,
                    (deadline - now).min(NAP),
                ) {
                    break;
                }
                if readable(socket)? && !ready(self) {
                    return Err(io::Error::new(
                        io::ErrorKind::UnexpectedEof,
                        "the server closed the connection",
                    ));
                }
            }
        }
        let len = self.word(ANS_LEN).load(Ordering::Acquire);
        if len == ON_SOCKET {
            return Ok(Arrived::Socket);
        }
        if len as usize > AREA {
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                "an answer longer than the ring",
            ));
        }
        self.copy_out(CONTROL + AREA, len as usize, into);
        Ok(Arrived::Ring)
    }

    /// Server: waits for the next call (`spin`, then futex sleeps, looking
    /// at the socket between them) and copies it into `into`.  A length
    /// past the area is `InvalidData` (the connection ends).
    pub fn wait_call(
        &mut self,
        socket: RawFd,
        spin: Duration,
        into: &mut Vec<u8>,
    ) -> io::Result<Arrived> {
        let seen = self.seq;
        let changed = |r: &Ring| r.word(REQ_SEQ).load(Ordering::Acquire) != seen;
        if !spin_until(|| changed(self), spin) {
            loop {
                if sleep_on(
                    self.word(REQ_SEQ),
                    self.word(SERVER_SLEEPS),
                    |v| v != seen,
                    NAP,
                ) {
                    break;
                }
                if readable(socket)? && !changed(self) {
                    return Ok(Arrived::SocketOnly);
                }
            }
        }
        // Only "changed" is trusted; the answer names what was read.
        self.seq = self.word(REQ_SEQ).load(Ordering::Acquire);
        let len = self.word(REQ_LEN).load(Ordering::Acquire);
        if len == ON_SOCKET {
            return Ok(Arrived::Socket);
        }
        if len as usize > AREA {
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                format!("a call announcing {len} bytes, over the ring's {AREA}"),
            ));
        }
        self.copy_out(CONTROL, len as usize, into);
        Ok(Arrived::Ring)
    }

    /// Server: publishes the answer to the last call (into the area, or
    /// announced as on the socket when larger: the caller then sends it
    /// there) and wakes the client if it sleeps.  Whether the body is on
    /// the socket.
    pub fn send_answer(&mut self, body: &[u8]) -> bool {
        let fits = body.len() <= AREA;
        if fits {
            self.copy_in(CONTROL + AREA, body);
            self.word(ANS_LEN)
                .store(body.len() as u32, Ordering::Relaxed);
        } else {
            self.word(ANS_LEN).store(ON_SOCKET, Ordering::Relaxed);
        }
        self.word(ANS_SEQ).store(self.seq, Ordering::SeqCst);
        if self.word(CLIENT_SLEEPS).load(Ordering::SeqCst) != 0 {
            wake(self.word(ANS_SEQ));
        }
        !fits
    }
}

/// Spins until `done` or `spin` passes: a few looks at the word, then a
/// yield of the core (the peer may need it: with more busy threads than
/// cores, longer runs of looks between yields made every call slower).
fn spin_until(mut done: impl FnMut() -> bool, spin: Duration) -> bool {
    let until = Instant::now() + spin;
    loop {
        for _ in 0..PAUSES {
            if done() {
                return true;
            }
            std::hint::spin_loop();
        }
        if Instant::now() >= until {
            return done();
        }
        // SAFETY: no preconditions.
        unsafe { libc::sched_yield() };
    }
}

/// Looks at the word between two yields while spinning (64 measured
/// slower than 8 with 4 and 8 engines on 2 cores, and no faster with 1).
const PAUSES: u32 = 8;

/// Sleeps on `word` up to `nap` unless `done` holds, with `flag` raised
/// meanwhile (the other end reads it after publishing: either it sees
/// the flag and wakes, or this end sees its value).  Whether `done`.
fn sleep_on(word: &AtomicU32, flag: &AtomicU32, done: impl Fn(u32) -> bool, nap: Duration) -> bool {
    flag.store(1, Ordering::SeqCst);
    let v = word.load(Ordering::SeqCst);
    if !done(v) {
        let ts = libc::timespec {
            tv_sec: nap.as_secs() as libc::time_t,
            tv_nsec: nap.subsec_nanos() as libc::c_long,
        };
        // SAFETY: a futex wait on a mapped, aligned word (shared: the
        // peer is another process), with a relative timeout.
        unsafe {
            libc::syscall(
                libc::SYS_futex,
                word.as_ptr(),
                libc::FUTEX_WAIT,
                v,
                &ts as *const libc::timespec,
                std::ptr::null::<u32>(),
                0,
            )
        };
    }
    flag.store(0, Ordering::SeqCst);
    done(word.load(Ordering::Acquire))
}

fn wake(word: &AtomicU32) {
    // SAFETY: a futex wake on a mapped, aligned word.
    unsafe {
        libc::syscall(
            libc::SYS_futex,
            word.as_ptr(),
            libc::FUTEX_WAKE,
            i32::MAX,
            std::ptr::null::<libc::timespec>(),
            std::ptr::null::<u32>(),
            0,
        )
    };
}

/// Whether `socket` has bytes or a close to read (without waiting).
fn readable(socket: RawFd) -> io::Result<bool> {
    let mut p = libc::pollfd {
        fd: socket,
        events: libc::POLLIN | libc::POLLRDHUP,
        revents: 0,
    };
    // SAFETY: one valid pollfd.
    let r = unsafe { libc::poll(&mut p, 1, 0) };
    if r < 0 {
        let e = io::Error::last_os_error();
        return if e.kind() == io::ErrorKind::Interrupted {
            Ok(false)
        } else {
            Err(e)
        };
    }
    Ok(r > 0)
}

mod fd;
pub use fd::{ask, recv_frame_with_fd, send_frame_with_fd};

#[cfg(test)]
mod tests;
