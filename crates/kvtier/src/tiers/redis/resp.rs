//! A pipelined RESP2 connection to one standalone server over a plain TCP
//! socket: the data path of the standalone, non-TLS tier.
//!
//! The redis crate's reply parser copies each bulk reply into a fresh
//! `Vec` and re-reads it through an 8 KiB buffer, which caps a connection
//! at about 385 MB/s for 64 KiB values on the benchmark machine, a third of
//! what the socket delivers.  Here replies are read into one reused buffer
//! and handed out as borrowed slices, so a loaded block is copied once,
//! from the socket buffer into its slot.  Cluster and TLS connections keep
//! using the redis crate.

use std::io::{self, IoSlice, Read, Write};
use std::net::{TcpStream, ToSocketAddrs};
use std::time::Duration;

use super::outcome::{Cause, Failure, Reply};

/// Size of a fresh read buffer: room for a pipeline of 16 blocks of 64 KiB
/// with their headers, so replies rarely have to be moved.
const INITIAL_BUFFER: usize = 2 << 20;

/// Where and how to connect.
#[derive(Clone, Debug)]
pub(super) struct RawParams {
    /// `host:port`.
    pub addr: String,
    /// ACL user, if any.
    pub username: Option<String>,
    /// Password, if any.
    pub password: Option<String>,
    /// Database to SELECT (0 is the default and sends nothing).
    pub db: i64,
    /// Bound on connecting.
    pub connect_timeout: Duration,
    /// Bound on each read and write.
    pub command_timeout: Duration,
}

/// One open connection with its reused read buffer.
pub(super) struct RawConn {
    sock: TcpStream,
    buf: Vec<u8>,
    start: usize,
    end: usize,
}

fn io_cause(e: &io::Error) -> Cause {
    match e.kind() {
        io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut => Cause::Timeout,
        io::ErrorKind::ConnectionRefused | io::ErrorKind::HostUnreachable => Cause::ServerDown,
        _ => Cause::ConnectionReset,
    }
}

fn broken(cause: Cause) -> Failure {
    Failure {
        cause,
        drop_conn: true,
    }
}

/// Classifies an error reply (`-CODE message`).
pub(super) fn error_cause(line: &[u8]) -> Cause {
    if line.starts_with(b"OOM") {
        Cause::OutOfMemory
    } else {
        Cause::ServerError
    }
}

impl RawConn {
    /// Connects, authenticates and selects the database.
    pub(super) fn connect(p: &RawParams) -> Result<RawConn, Failure> {
        let addrs = p
            .addr
            .to_socket_addrs()
            .map_err(|_| broken(Cause::ServerDown))?;
        let mut last = Cause::ServerDown;
        let mut sock = None;
        for a in addrs {
            match TcpStream::connect_timeout(&a, p.connect_timeout) {
                Ok(s) => {
                    sock = Some(s);
                    break;
                }
                Err(e) => {
                    last = match io_cause(&e) {
                        Cause::Timeout => Cause::Timeout,
                        _ => Cause::ServerDown,
                    }
                }
            }
        }
        let sock = sock.ok_or_else(|| broken(last))?;
        let setup = |s: &TcpStream| -> io::Result<()> {
            s.set_nodelay(true)?;
            s.set_read_timeout(Some(p.command_timeout))?;
            s.set_write_timeout(Some(p.command_timeout))
        };
        setup(&sock).map_err(|e| broken(io_cause(&e)))?;
        let mut c = RawConn {
            sock,
            buf: vec![0; INITIAL_BUFFER],
            start: 0,
            end: 0,
        };
        let mut hello = Vec::new();
        let mut n = 0;
        if let Some(pw) = &p.password {
            let mut args: Vec<&[u8]> = vec![b"AUTH"];
            if let Some(u) = &p.username {
                args.push(u.as_bytes());
            }
            args.push(pw.as_bytes());
            encode_args(&mut hello, &args);
            n += 1;
        }
        if p.db != 0 {
            let db = p.db.to_string();
            encode_args(&mut hello, &[b"SELECT", db.as_bytes()]);
            n += 1;
        }
        if n > 0 {
            let mut failed = None;
            c.round_trip(&hello, n, &mut |_, r| {
                if let Reply::Error(cause) = r {
                    failed.get_or_insert(cause);
                }
            })?;
            if let Some(cause) = failed {
                return Err(broken(cause));
            }
        }
        Ok(c)
    }

    /// Sends `packed` (holding `count` commands) and hands each reply, in
    /// order, to `f`.
    pub(super) fn round_trip(
        &mut self,
        packed: &[u8],
        count: usize,
        f: &mut dyn FnMut(usize, Reply<'_>),
    ) -> Result<(), Failure> {
        self.sock
            .write_all(packed)
            .map_err(|e| broken(io_cause(&e)))?;
        self.replies(count, f)
    }

    /// Like [`RawConn::round_trip`], with the commands given as pieces
    /// (`writev`), so block payloads go from their slots to the socket
    /// without being copied into a buffer first.
    pub(super) fn round_trip_parts(
        &mut self,
        parts: &mut [IoSlice<'_>],
        count: usize,
        f: &mut dyn FnMut(usize, Reply<'_>),
    ) -> Result<(), Failure> {
        let mut bufs = parts;
        while !bufs.is_empty() {
            match self.sock.write_vectored(bufs) {
                Ok(0) => return Err(broken(Cause::ConnectionReset)),
                Ok(n) => IoSlice::advance_slices(&mut bufs, n),
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(broken(io_cause(&e))),
            }
        }
        self.replies(count, f)
    }

    fn replies(
        &mut self,
        count: usize,
        f: &mut dyn FnMut(usize, Reply<'_>),
    ) -> Result<(), Failure> {
        for i in 0..count {
            self.reply(i, f)?;
        }
        // A very large reply grew the buffer: do not keep it.
        if self.buf.len() > 64 << 20 && self.start == self.end {
            self.buf = vec![0; INITIAL_BUFFER];
            self.start = 0;
            self.end = 0;
        }
        Ok(())
    }

    /// Makes sure `n` unread bytes are buffered.
    fn fill(&mut self, n: usize) -> Result<(), Failure> {
        if self.end - self.start >= n {
            return Ok(());
        }
        if self.start == self.end {
            // Everything read was consumed: start over at the front, so a
            // round trip's replies usually fit without moving any bytes.
            self.start = 0;
            self.end = 0;
        }
        if self.start + n > self.buf.len() {
            self.buf.copy_within(self.start..self.end, 0);
            self.end -= self.start;
            self.start = 0;
            if n > self.buf.len() {
                // The length comes from the server: a reply too large for
                // memory breaks the connection instead of aborting.
                let want = n.checked_next_power_of_two().unwrap_or(n);
                if self.buf.try_reserve_exact(want - self.buf.len()).is_err() {
                    return Err(broken(Cause::Other));
                }
                self.buf.resize(want, 0);
            }
        }
        while self.end - self.start < n {
            match self.sock.read(&mut self.buf[self.end..]) {
                Ok(0) => return Err(broken(Cause::ConnectionReset)),
                Ok(k) => self.end += k,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(broken(io_cause(&e))),
            }
        }
        Ok(())
    }

    /// Reads one `\r\n`-terminated line; returns its range (without CRLF).
    fn line(&mut self) -> Result<(usize, usize), Failure> {
        let mut scanned = 0;
        loop {
            let avail = &self.buf[self.start + scanned..self.end];
            if let Some(pos) = avail.iter().position(|&b| b == b'\n') {
                let nl = self.start + scanned + pos;
                if nl == self.start || self.buf[nl - 1] != b'\r' {
                    return Err(broken(Cause::Other));
                }
                let r = (self.start, nl - 1);
                self.start = nl + 1;
                return Ok(r);
            }
            scanned = self.end - self.start;
            if scanned > 4096 {
                return Err(broken(Cause::Other));
            }
            self.fill(scanned + 1)?;
        }
    }

    fn reply(&mut self, i: usize, f: &mut dyn FnMut(usize, Reply<'_>)) -> Result<(), Failure> {
        let (a, b) = self.line()?;
        if a == b {
            return Err(broken(Cause::Other));
        }
        let kind = self.buf[a];
        let rest = a + 1..b;
        match kind {
            b'+' => f(i, Reply::Ok),
            b'-' => f(i, Reply::Error(error_cause(&self.buf[rest]))),
            b':' => {
                let n = parse_int(&self.buf[rest]).ok_or_else(|| broken(Cause::Other))?;
                f(i, Reply::Int(n))
            }
            b'$' => {
                let n = parse_int(&self.buf[rest]).ok_or_else(|| broken(Cause::Other))?;
                if n < 0 {
                    f(i, Reply::Nil)
                } else {
                    let n = usize::try_from(n).map_err(|_| broken(Cause::Other))?;
                    self.fill(n.checked_add(2).ok_or_else(|| broken(Cause::Other))?)?;
                    let s = self.start;
                    if &self.buf[s + n..s + n + 2] != b"\r\n" {
                        return Err(broken(Cause::Other));
                    }
                    self.start += n + 2;
                    f(i, Reply::Bulk(&self.buf[s..s + n]))
                }
            }
            // The tier sends no command whose reply is an array.
            _ => return Err(broken(Cause::Other)),
        }
        Ok(())
    }
}

fn parse_int(s: &[u8]) -> Option<i64> {
    std::str::from_utf8(s).ok()?.parse().ok()
}

/// Encodes one command of plain arguments.
pub(super) fn encode_args(buf: &mut Vec<u8>, args: &[&[u8]]) {
    let _ = write!(buf, "*{}\r\n", args.len());
    for a in args {
        let _ = write!(buf, "${}\r\n", a.len());
        buf.extend_from_slice(a);
        buf.extend_from_slice(b"\r\n");
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::TcpListener;

    /// A one-shot server on loopback: reads `expect` bytes, then writes
    /// `reply` in small pieces (so replies arrive split), then closes.
    fn serve(expect: usize, reply: Vec<u8>) -> RawParams {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = l.local_addr().unwrap().to_string();
        std::thread::spawn(move || {
            let (mut s, _) = l.accept().unwrap();
            let mut got = vec![0u8; expect];
            s.read_exact(&mut got).unwrap();
            for piece in reply.chunks(7) {
                s.write_all(piece).unwrap();
                s.flush().unwrap();
            }
        });
        params(addr)
    }

    /// Plain connection parameters for `addr`: no login, database 0, a
    /// minute for connecting and for each command (only a hung server
    /// thread runs into it, however loaded the machine).
    fn params(addr: String) -> RawParams {
        RawParams {
            addr,
            username: None,
            password: None,
            db: 0,
            connect_timeout: Duration::from_secs(60),
            command_timeout: Duration::from_secs(60),
        }
    }

    #[derive(Debug, PartialEq)]
    enum Owned {
        Nil,
        Ok,
        Int(i64),
        Bulk(Vec<u8>),
        Error(Cause),
    }

    fn collect(c: &mut RawConn, packed: &[u8], n: usize) -> Result<Vec<Owned>, Failure> {
        let mut out = Vec::new();
        c.round_trip(packed, n, &mut |_, r| {
            out.push(match r {
                Reply::Nil => Owned::Nil,
                Reply::Ok => Owned::Ok,
                Reply::Int(i) => Owned::Int(i),
                Reply::Bulk(b) => Owned::Bulk(b.to_vec()),
                Reply::Error(c) => Owned::Error(c),
            })
        })?;
        Ok(out)
    }

    #[test]
    fn parses_every_reply_kind_across_split_reads() {
        let big = vec![b'x'; 300_000];
        let mut reply =
            b"+OK\r\n:42\r\n$-1\r\n-OOM command not allowed\r\n-ERR wrong\r\n$5\r\nhello\r\n"
                .to_vec();
        reply.extend_from_slice(format!("${}\r\n", big.len()).as_bytes());
        reply.extend_from_slice(&big);
        reply.extend_from_slice(b"\r\n");
        let mut packed = Vec::new();
        encode_args(&mut packed, &[b"PING"]);
        let p = serve(packed.len(), reply);
        let mut c = RawConn::connect(&p).unwrap();
        let got = collect(&mut c, &packed, 7).unwrap();
        assert_eq!(
            got,
            vec![
                Owned::Ok,
                Owned::Int(42),
                Owned::Nil,
                Owned::Error(Cause::OutOfMemory),
                Owned::Error(Cause::ServerError),
                Owned::Bulk(b"hello".to_vec()),
                Owned::Bulk(big),
            ]
        );
    }

    #[test]
    fn a_closed_or_garbled_connection_is_a_failure_that_drops_it() {
        let mut packed = Vec::new();
        encode_args(&mut packed, &[b"GET", b"k"]);
        // The server closes after half a reply.
        let p = serve(packed.len(), b"$10\r\nabc".to_vec());
        let mut c = RawConn::connect(&p).unwrap();
        let e = collect(&mut c, &packed, 1).unwrap_err();
        assert_eq!(e.cause, Cause::ConnectionReset);
        assert!(e.drop_conn);
        // A reply that is not RESP.
        let p = serve(packed.len(), b"hello\r\n".to_vec());
        let mut c = RawConn::connect(&p).unwrap();
        assert_eq!(collect(&mut c, &packed, 1).unwrap_err().cause, Cause::Other);
        // A reply claiming more bytes than memory holds, or than a length
        // can say: the connection breaks, the process does not abort.
        for huge in [i64::MAX as u64, 1 << 50] {
            let p = serve(packed.len(), format!("${huge}\r\nabc").into_bytes());
            let mut c = RawConn::connect(&p).unwrap();
            let e = collect(&mut c, &packed, 1).unwrap_err();
            assert_eq!(e.cause, Cause::Other, "${huge}");
            assert!(e.drop_conn);
        }
        // Nothing listens: the server is down.
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = l.local_addr().unwrap().to_string();
        drop(l);
        let p = params(addr);
        assert_eq!(RawConn::connect(&p).err().unwrap().cause, Cause::ServerDown);
    }

    #[test]
    fn encodes_resp_arrays_of_bulk_strings() {
        let mut b = Vec::new();
        encode_args(&mut b, &[b"SET", b"k", b""]);
        assert_eq!(b, b"*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$0\r\n\r\n");
    }
}
