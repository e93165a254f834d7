//! Wake-up for idle engines: a descriptor that becomes readable when a
//! tier finishes a job, so an engine with nothing to schedule can sleep in
//! `poll()` instead of spinning on `has_pending_work`.
//!
//! The manager owns one [`Notifier`] and hands a clone to every secondary
//! tier it adds ([`crate::tiering::SecondaryTier::set_notifier`]).  Tiers
//! with worker threads call [`Notifier::notify`] when a worker finishes a
//! job; reports through [`crate::tiering::Manager::complete_job`] notify on
//! their own.  The descriptor (a Linux `eventfd`) is created the first time
//! an engine asks for it; until then `notify` costs one atomic load.

use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::sync::{Arc, OnceLock};

use crate::error::{Error, Result};

#[derive(Default)]
struct Inner {
    fd: OnceLock<OwnedFd>,
}

/// Shared wake-up signal; cheap to clone, safe to use from any thread.
#[derive(Clone, Default)]
pub struct Notifier {
    inner: Arc<Inner>,
}

impl std::fmt::Debug for Notifier {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Notifier")
            .field("fd", &self.inner.fd.get().map(|fd| fd.as_raw_fd()))
            .finish()
    }
}

impl Notifier {
    /// A notifier with no descriptor yet.
    pub fn new() -> Notifier {
        Notifier::default()
    }

    /// Makes the descriptor readable (if one was created).  Never blocks
    /// and never fails: an eventfd counter that is already huge stays
    /// readable, which is all a waiter needs.
    pub fn notify(&self) {
        if let Some(fd) = self.inner.fd.get() {
            let one: u64 = 1;
            // SAFETY: writes 8 bytes from a live u64 to an owned descriptor.
            let _ = unsafe {
                libc::write(
                    fd.as_raw_fd(),
                    (&one as *const u64).cast(),
                    std::mem::size_of::<u64>(),
                )
            };
        }
    }

    /// The descriptor, created on first use (non-blocking, close-on-exec).
    /// It stays valid as long as the notifier (the manager) lives; callers
    /// must not close it.  Reading 8 bytes from it resets it.
    pub fn fd(&self) -> Result<RawFd> {
        if let Some(fd) = self.inner.fd.get() {
            return Ok(fd.as_raw_fd());
        }
        let fd = create_eventfd()?;
        // A concurrent caller may have won the race: its descriptor is kept
        // and ours is closed when dropped here.
        let _ = self.inner.fd.set(fd);
        Ok(self.inner.fd.get().map(|fd| fd.as_raw_fd()).unwrap_or(-1))
    }

    /// Resets the descriptor (consumes pending wake-ups) and says whether
    /// one was pending.  Without a descriptor, answers false.
    pub fn reset(&self) -> bool {
        let Some(fd) = self.inner.fd.get() else {
            return false;
        };
        let mut value: u64 = 0;
        // SAFETY: reads 8 bytes into a live u64 from an owned descriptor.
        let n = unsafe {
            libc::read(
                fd.as_raw_fd(),
                (&mut value as *mut u64).cast(),
                std::mem::size_of::<u64>(),
            )
        };
        n == std::mem::size_of::<u64>() as isize && value > 0
    }
}

#[cfg(target_os = "linux")]
fn create_eventfd() -> Result<OwnedFd> {
    // SAFETY: plain system call; the result is checked.
    let fd = unsafe { libc::eventfd(0, libc::EFD_NONBLOCK | libc::EFD_CLOEXEC) };
    if fd < 0 {
        return Err(Error::last_os("creating the wake-up eventfd"));
    }
    // SAFETY: `fd` is a fresh descriptor nobody else owns.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

#[cfg(not(target_os = "linux"))]
fn create_eventfd() -> Result<OwnedFd> {
    Err(Error::Unsupported(
        "the wake-up descriptor needs Linux eventfd".into(),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn readable(fd: RawFd, timeout_ms: i32) -> bool {
        let mut p = libc::pollfd {
            fd,
            events: libc::POLLIN,
            revents: 0,
        };
        // SAFETY: one valid pollfd.
        let n = unsafe { libc::poll(&mut p, 1, timeout_ms) };
        n == 1 && p.revents & libc::POLLIN != 0
    }

    #[test]
    fn notify_makes_readable_and_reset_clears() {
        let n = Notifier::new();
        n.notify(); // no descriptor yet: nothing to wake, nothing remembered
        let fd = n.fd().unwrap();
        assert_eq!(n.fd().unwrap(), fd, "one descriptor per notifier");
        assert!(!readable(fd, 0));
        let other = n.clone();
        let t = std::thread::spawn(move || {
            std::thread::sleep(std::time::Duration::from_millis(50));
            other.notify();
            other.notify();
        });
        // A minute: only a notify that never wakes poll runs into it.
        assert!(
            readable(fd, 60_000),
            "a notify from another thread wakes poll"
        );
        t.join().unwrap();
        assert!(n.reset());
        assert!(!readable(fd, 0), "reading resets it");
        assert!(!n.reset());
    }
}
