//! A frame with a descriptor attached (`SCM_RIGHTS`): how the server hands
//! the ring's memory file to the client, with the answer granting it.

use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::time::Instant;

use super::super::protocol::{ANSWER_OK, Op};
use super::super::transport::{self, PREFIX};
use super::super::wire::{Reader, Writer};
use super::Ring;

/// Client: asks for the ring ([`Op::Ring`]) on `socket` (no call in
/// flight), with `buf` for the frame.  `Ok(None)`: not granted.  `Err`:
/// why the connection is unusable.
pub fn ask(
    socket: &impl AsRawFd,
    buf: &mut Vec<u8>,
    deadline: Instant,
) -> Result<Option<Ring>, String> {
    transport::begin(buf);
    Writer::new(buf).u8(Op::Ring as u8);
    transport::send(socket, buf, Some(deadline)).map_err(|e| e.to_string())?;
    let (frame, fd) = recv_frame_with_fd(socket, deadline).map_err(|e| e.to_string())?;
    let mut r = Reader::new(&frame);
    let granted = match (r.u8("the answer's status"), r.bool("a flag"), r.finish()) {
        (Ok(ANSWER_OK), Ok(g), Ok(())) => g,
        _ => return Err("a malformed answer".into()),
    };
    match (granted, fd) {
        (false, _) => Ok(None),
        (true, Some(fd)) => Ring::map(&fd)
            .map(Some)
            .map_err(|e| format!("mapping it: {e}")),
        (true, None) => Err("granted without its memory".into()),
    }
}

/// The longest answer [`recv_frame_with_fd`] takes (a grant, or an error).
const MAX_GRANT: usize = 64 << 10;

/// Sends the frame `buf` holds (begun with [`transport::begin`]) with
/// `fd` attached to its first byte.
pub fn send_frame_with_fd(
    socket: &impl AsRawFd,
    buf: &mut [u8],
    fd: &OwnedFd,
    deadline: Option<Instant>,
) -> io::Result<()> {
    let body = buf.len() - PREFIX;
    buf[..PREFIX].copy_from_slice(&(body as u32).to_le_bytes());
    let raw = fd.as_raw_fd();
    // SAFETY: CMSG_SPACE is a pure computation.
    let space = unsafe { libc::CMSG_SPACE(std::mem::size_of::<libc::c_int>() as u32) } as usize;
    let mut control = vec![0u8; space];
    let mut iov = libc::iovec {
        iov_base: buf.as_mut_ptr().cast(),
        iov_len: buf.len(),
    };
    // SAFETY: zero is a valid msghdr; its pointers are set below.
    let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
    msg.msg_iov = &mut iov;
    msg.msg_iovlen = 1;
    msg.msg_control = control.as_mut_ptr().cast();
    msg.msg_controllen = space as _;
    // SAFETY: `control` holds one header with room for one descriptor.
    let n = unsafe {
        let c = libc::CMSG_FIRSTHDR(&msg);
        (*c).cmsg_level = libc::SOL_SOCKET;
        (*c).cmsg_type = libc::SCM_RIGHTS;
        (*c).cmsg_len = libc::CMSG_LEN(std::mem::size_of::<libc::c_int>() as u32) as _;
        std::ptr::write_unaligned(libc::CMSG_DATA(c).cast::<libc::c_int>(), raw);
        libc::sendmsg(socket.as_raw_fd(), &msg, libc::MSG_NOSIGNAL)
    };
    if n < 0 {
        return Err(io::Error::last_os_error());
    }
    let n = n as usize;
    if n < buf.len() {
        // A short write (a full socket): the rest follows.
        send_rest(socket, &buf[n..], deadline)?;
    }
    Ok(())
}

fn send_rest(socket: &impl AsRawFd, mut rest: &[u8], deadline: Option<Instant>) -> io::Result<()> {
    while !rest.is_empty() {
        if deadline.is_some_and(|d| Instant::now() >= d) {
            return Err(io::Error::new(io::ErrorKind::TimedOut, "no room in time"));
        }
        // SAFETY: within `rest`.
        let n = unsafe {
            libc::send(
                socket.as_raw_fd(),
                rest.as_ptr().cast(),
                rest.len(),
                libc::MSG_NOSIGNAL,
            )
        };
        if n < 0 {
            let e = io::Error::last_os_error();
            match e.kind() {
                io::ErrorKind::Interrupted => continue,
                io::ErrorKind::WouldBlock => {
                    std::thread::yield_now();
                    continue;
                }
                _ => return Err(e),
            }
        }
        rest = &rest[n as usize..];
    }
    Ok(())
}

/// Reads one frame (at most 64 KiB) and the descriptor sent
/// with it, if any, waiting up to `deadline`.  The caller's frame reader
/// must hold no bytes (nothing is sent to a client between its calls).
pub fn recv_frame_with_fd(
    socket: &impl AsRawFd,
    deadline: Instant,
) -> io::Result<(Vec<u8>, Option<OwnedFd>)> {
    let mut buf = vec![0u8; PREFIX];
    let mut filled = 0;
    let mut fd = None;
    // SAFETY: CMSG_SPACE is a pure computation.
    let space = unsafe { libc::CMSG_SPACE(std::mem::size_of::<libc::c_int>() as u32) } as usize;
    let mut control = vec![0u8; space];
    loop {
        if filled == PREFIX && buf.len() == PREFIX {
            let len = u32::from_le_bytes(buf[..PREFIX].try_into().expect("4 bytes")) as usize;
            if len > MAX_GRANT {
                return Err(io::Error::new(io::ErrorKind::InvalidData, "a long grant"));
            }
            buf.resize(PREFIX + len, 0);
        }
        if filled == buf.len() {
            buf.drain(..PREFIX);
            return Ok((buf, fd));
        }
        transport::wait_readable(socket.as_raw_fd(), Some(deadline))?;
        let mut iov = libc::iovec {
            iov_base: buf[filled..].as_mut_ptr().cast(),
            iov_len: buf.len() - filled,
        };
        // SAFETY: zero is a valid msghdr; its pointers are set below.
        let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
        msg.msg_iov = &mut iov;
        msg.msg_iovlen = 1;
        msg.msg_control = control.as_mut_ptr().cast();
        msg.msg_controllen = space as _;
        // SAFETY: the buffers are valid for the call.
        let n = unsafe {
            libc::recvmsg(
                socket.as_raw_fd(),
                &mut msg,
                libc::MSG_DONTWAIT | libc::MSG_CMSG_CLOEXEC,
            )
        };
        if n < 0 {
            let e = io::Error::last_os_error();
            match e.kind() {
                io::ErrorKind::Interrupted | io::ErrorKind::WouldBlock => continue,
                _ => return Err(e),
            }
        }
        if n == 0 {
            return Err(io::Error::new(
                io::ErrorKind::UnexpectedEof,
                "the server closed the connection",
            ));
        }
        filled += n as usize;
        // SAFETY: walking the control headers the kernel wrote.
        unsafe {
            let mut c = libc::CMSG_FIRSTHDR(&msg);
            while !c.is_null() {
                if (*c).cmsg_level == libc::SOL_SOCKET && (*c).cmsg_type == libc::SCM_RIGHTS {
                    let data = libc::CMSG_DATA(c).cast::<libc::c_int>();
                    let count = ((*c).cmsg_len as usize - libc::CMSG_LEN(0) as usize)
                        / std::mem::size_of::<libc::c_int>();
                    for i in 0..count {
                        let got = OwnedFd::from_raw_fd(std::ptr::read_unaligned(data.add(i)));
                        if fd.is_none() {
                            fd = Some(got);
                        }
                    }
                }
                c = libc::CMSG_NXTHDR(&msg, c);
            }
        }
    }
}
