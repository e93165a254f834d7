//! `SlotMemory`: the block-sized rows of a region, as secondary tiers see them.
//!
//! Tiers copy between their storage and primary slots; they never own the
//! mapping.  A `SlotMemory` keeps the mapping alive while any clone exists,
//! so a tier's worker thread can never write into unmapped address space.

use std::any::Any;
use std::ptr::NonNull;
use std::sync::Arc;

use crate::error::{Error, Result};

/// Shared view of a region's slots: `slot_count` rows of `slot_bytes` bytes,
/// row `r` at `base + r * stride`.  Cheap to clone; `Send + Sync`.
#[derive(Clone)]
pub struct SlotMemory {
    inner: Arc<Inner>,
}

struct Inner {
    base: NonNull<u8>,
    slot_count: u32,
    slot_bytes: usize,
    stride: usize,
    /// Whatever owns the mapping; dropped after the last clone.
    _backing: Box<dyn Any + Send + Sync>,
}

// SAFETY: the mapping is shared memory; access discipline (which slot may be
// read or written when) is the manager's pinning protocol, not Rust aliasing.
unsafe impl Send for Inner {}
// SAFETY: as for Send.
unsafe impl Sync for Inner {}

impl SlotMemory {
    /// Private anonymous memory of `slot_count` slots of `slot_bytes` each,
    /// for engines that run in one process and for tests.
    pub fn anonymous(slot_count: u32, slot_bytes: usize) -> Result<SlotMemory> {
        if slot_count == 0 || slot_bytes == 0 {
            return Err(Error::InvalidArgument(format!(
                "slot memory needs at least one slot of at least one byte (got {slot_count} x {slot_bytes})"
            )));
        }
        let len = (slot_count as usize)
            .checked_mul(slot_bytes)
            .filter(|&len| len <= isize::MAX as usize)
            .ok_or_else(|| {
                Error::InvalidArgument(format!(
                    "{slot_count} slots of {slot_bytes} bytes are more than the address space holds"
                ))
            })?;
        let mut map = memmap2::MmapMut::map_anon(len).map_err(|e| {
            if e.raw_os_error() == Some(libc::ENOMEM) {
                Error::OutOfMemory(format!(
                    "{slot_count} slots of {slot_bytes} bytes ({len} bytes of memory) could not be mapped"
                ))
            } else {
                Error::io(format!("mapping {len} bytes of anonymous memory"), e)
            }
        })?;
        let base = NonNull::new(map.as_mut_ptr()).expect("mmap never returns NULL");
        // SAFETY: `map` owns `len` bytes at `base` and is kept alive by `_backing`.
        Ok(
            unsafe {
                SlotMemory::from_raw(base, slot_count, slot_bytes, slot_bytes, Box::new(map))
            },
        )
    }

    /// Wraps an existing mapping.
    ///
    /// # Safety
    /// `base` must point to `slot_count * stride` bytes that stay mapped and
    /// writable for as long as `backing` lives, with `slot_bytes <= stride`.
    pub unsafe fn from_raw(
        base: NonNull<u8>,
        slot_count: u32,
        slot_bytes: usize,
        stride: usize,
        backing: Box<dyn Any + Send + Sync>,
    ) -> SlotMemory {
        debug_assert!(slot_bytes <= stride);
        SlotMemory {
            inner: Arc::new(Inner {
                base,
                slot_count,
                slot_bytes,
                stride,
                _backing: backing,
            }),
        }
    }

    /// Number of slots.
    pub fn slot_count(&self) -> u32 {
        self.inner.slot_count
    }

    /// Bytes in one slot.
    pub fn slot_bytes(&self) -> usize {
        self.inner.slot_bytes
    }

    /// Distance in bytes between the starts of two consecutive slots.
    pub fn stride(&self) -> usize {
        self.inner.stride
    }

    fn check(&self, slot: u32) -> Result<()> {
        if slot >= self.inner.slot_count {
            return Err(Error::InvalidArgument(format!(
                "slot {slot} out of range (the region has {} slots)",
                self.inner.slot_count
            )));
        }
        Ok(())
    }

    /// Address of slot `slot`, for system calls that copy straight into or
    /// out of the region (`pread`, `pwrite`, RDMA registration).
    pub fn slot_ptr(&self, slot: u32) -> Result<NonNull<u8>> {
        self.check(slot)?;
        // SAFETY: in bounds of the mapping, checked above.
        Ok(unsafe { self.inner.base.add(slot as usize * self.inner.stride) })
    }

    /// Borrows slot `slot` for reading.
    ///
    /// # Safety
    /// Nobody may write the slot while the borrow lives: the caller holds a
    /// pin on it (a store job's slots are pinned until the job finishes).
    pub unsafe fn slot(&self, slot: u32) -> Result<&[u8]> {
        let p = self.slot_ptr(slot)?;
        // SAFETY: `slot_ptr` checked the slot lies inside the mapping; the
        // caller guarantees nobody writes it while the borrow lives.
        Ok(unsafe { std::slice::from_raw_parts(p.as_ptr(), self.inner.slot_bytes) })
    }

    /// Borrows slot `slot` for writing.
    ///
    /// # Safety
    /// Nobody else may read or write the slot while the borrow lives: the
    /// caller holds it reserved (a load job's slots are write pending until
    /// the job finishes).
    #[allow(clippy::mut_from_ref)]
    pub unsafe fn slot_mut(&self, slot: u32) -> Result<&mut [u8]> {
        let p = self.slot_ptr(slot)?;
        // SAFETY: `slot_ptr` checked the slot lies inside the mapping; the
        // caller guarantees nobody else uses it while the borrow lives.
        Ok(unsafe { std::slice::from_raw_parts_mut(p.as_ptr(), self.inner.slot_bytes) })
    }

    /// Copies `data` into slot `slot` at `offset`.
    pub fn write(&self, slot: u32, offset: usize, data: &[u8]) -> Result<()> {
        self.check_range(offset, data.len())?;
        let p = self.slot_ptr(slot)?;
        // SAFETY: the range is inside the slot, checked above.
        unsafe { std::ptr::copy_nonoverlapping(data.as_ptr(), p.as_ptr().add(offset), data.len()) };
        Ok(())
    }

    /// Copies from slot `slot` at `offset` into `out`.
    pub fn read(&self, slot: u32, offset: usize, out: &mut [u8]) -> Result<()> {
        self.check_range(offset, out.len())?;
        let p = self.slot_ptr(slot)?;
        // SAFETY: the range is inside the slot, checked above.
        unsafe {
            std::ptr::copy_nonoverlapping(p.as_ptr().add(offset), out.as_mut_ptr(), out.len())
        };
        Ok(())
    }

    fn check_range(&self, offset: usize, len: usize) -> Result<()> {
        match offset.checked_add(len) {
            Some(end) if end <= self.inner.slot_bytes => Ok(()),
            _ => Err(Error::InvalidArgument(format!(
                "range {offset}+{len} exceeds the slot size {}",
                self.inner.slot_bytes
            ))),
        }
    }
}

/// Something that keeps the memory of a number of slots mapped: a
/// [`Region`](super::Region) or a [`SlotMemory`] view of one.  A manager
/// keeps one alive for its tiers, and checks that it holds every slot of
/// its primary tier.
pub trait SlotOwner: Any + Send {
    /// Number of slots in the memory.
    fn slot_count(&self) -> u32;
}

impl SlotOwner for SlotMemory {
    fn slot_count(&self) -> u32 {
        SlotMemory::slot_count(self)
    }
}

impl std::fmt::Debug for SlotMemory {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SlotMemory")
            .field("slot_count", &self.inner.slot_count)
            .field("slot_bytes", &self.inner.slot_bytes)
            .field("stride", &self.inner.stride)
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn anonymous_slots_round_trip_and_bounds() {
        let m = SlotMemory::anonymous(4, 4096).unwrap();
        m.write(3, 10, b"hello").unwrap();
        let mut out = [0u8; 5];
        m.read(3, 10, &mut out).unwrap();
        assert_eq!(&out, b"hello");
        assert!(m.slot_ptr(4).is_err());
        assert!(m.write(0, 4094, b"abc").is_err());
        assert!(SlotMemory::anonymous(0, 4096).is_err());
        let e = SlotMemory::anonymous(u32::MAX, usize::MAX / 2).unwrap_err();
        assert!(matches!(e, Error::InvalidArgument(_)), "{e}");
    }
}
