//! A small tmpfs of its own, for tests of what happens when a file system
//! is full.

/// A fresh tmpfs of `bytes` mounted on a new directory (mode 0700),
/// unmounted on drop.
pub struct SmallTmpfs(tempfile::TempDir);

impl SmallTmpfs {
    /// The mounted directory.
    pub fn path(&self) -> &std::path::Path {
        self.0.path()
    }

    /// Mounts one; `None` where this process may not mount (not root, or
    /// in a container that forbids it), after
    /// [`skip_or_fail`](crate::require::skip_or_fail): the test returns,
    /// or fails under `KVTIER_REQUIRE_ALL=1`.
    #[track_caller]
    pub fn mount(bytes: usize) -> Option<SmallTmpfs> {
        let dir = tempfile::tempdir().ok()?;
        let target = std::ffi::CString::new(dir.path().to_str()?).ok()?;
        let data = std::ffi::CString::new(format!("size={bytes},mode=0700")).ok()?;
        let r = unsafe {
            libc::mount(
                c"tmpfs".as_ptr(),
                target.as_ptr(),
                c"tmpfs".as_ptr(),
                0,
                data.as_ptr().cast(),
            )
        };
        if r != 0 {
            crate::require::skip_or_fail(format!(
                "mounting a tmpfs of {bytes} bytes failed ({})",
                std::io::Error::last_os_error()
            ));
            return None;
        }
        Some(SmallTmpfs(dir))
    }
}

impl Drop for SmallTmpfs {
    fn drop(&mut self) {
        let target = std::ffi::CString::new(self.0.path().to_str().unwrap()).unwrap();
        unsafe { libc::umount2(target.as_ptr(), libc::MNT_DETACH) };
    }
}
