//! A byte region holding a room's counters as plain `#[repr(C)]` atomics.
//!
//! No pointers live inside the region, only integers at fixed offsets, so the same code works
//! on memory the engine owns (today) and on memory a host maps into several processes (an nginx
//! shared-memory zone, a mapped file). All-zero bytes are a valid state for every atomic, so a
//! fresh zeroed mapping needs no initialisation beyond the header.

use std::ptr::NonNull;

use crossbeam_utils::CachePadded;

use crate::error::{Error, Result};
use crate::sync::{AtomicI64, AtomicU64};

/// Alignment of the region and of every block inside it (one cache-line pair).
pub(crate) const ALIGN: usize = 128;

#[repr(C, align(128))]
struct Block([u8; ALIGN]);

/// Owned or borrowed, 128-byte aligned, zero-initialised memory.
pub(crate) struct Region {
    base: NonNull<u8>,
    len: usize,
    _owned: Option<Box<[Block]>>,
}

// SAFETY: the region only hands out shared references to atomics, which are Sync; the memory
// itself is either owned by this value or guaranteed by the creator of a borrowed region to
// outlive it (see `Region::borrowed`).
unsafe impl Send for Region {}
// SAFETY: as above: all access goes through atomics.
unsafe impl Sync for Region {}

impl Region {
    /// Allocates `len` zeroed bytes (rounded up to the alignment).
    pub(crate) fn owned(len: usize) -> Self {
        let blocks = len.div_ceil(ALIGN).max(1);
        let mut owned: Box<[Block]> = (0..blocks).map(|_| Block([0; ALIGN])).collect();
        let base = NonNull::from(&mut owned[0]).cast::<u8>();
        Self {
            base,
            len: blocks * ALIGN,
            _owned: Some(owned),
        }
    }

    /// Wraps memory owned by someone else (e.g. shared memory mapped by the host).
    ///
    /// # Safety
    /// `ptr` must be valid for reads and writes of `len` bytes for the whole life of the
    /// returned region, aligned to [`ALIGN`], and only ever accessed through atomics (by this
    /// and other processes) while the region lives.
    #[allow(dead_code)]
    pub(crate) unsafe fn borrowed(ptr: *mut u8, len: usize) -> Result<Self> {
        let base = NonNull::new(ptr).ok_or_else(|| Error::Region("null pointer".into()))?;
        if (ptr as usize) % ALIGN != 0 {
            return Err(Error::Region(format!("not aligned to {ALIGN} bytes")));
        }
        Ok(Self {
            base,
            len,
            _owned: None,
        })
    }

    /// Whether this process owns the memory (no other process maps it; a forked child has a
    /// copy of its own).
    pub(crate) fn is_owned(&self) -> bool {
        self._owned.is_some()
    }

    /// Length in bytes.
    pub(crate) fn len(&self) -> usize {
        self.len
    }

    fn check(&self, offset: usize, bytes: usize, align: usize) {
        assert!(
            offset % align == 0 && offset.checked_add(bytes).is_some_and(|end| end <= self.len),
            "region access out of bounds: offset {offset} + {bytes} > {}",
            self.len
        );
    }

    /// `n` `AtomicU64`s at `offset`.
    pub(crate) fn u64s(&self, offset: usize, n: usize) -> &[AtomicU64] {
        self.check(offset, n * 8, 8);
        // SAFETY: in bounds and 8-aligned (checked above; the base is 128-aligned); AtomicU64 has
        // the size and alignment of u64 and any bit pattern (zero included) is valid; the slice
        // borrows `self`, which keeps the memory alive; all access is atomic.
        unsafe { std::slice::from_raw_parts(self.base.as_ptr().add(offset).cast(), n) }
    }

    /// `n` `AtomicI64`s at `offset`.
    pub(crate) fn i64s(&self, offset: usize, n: usize) -> &[AtomicI64] {
        self.check(offset, n * 8, 8);
        // SAFETY: as for `u64s`; AtomicI64 has the layout of i64.
        unsafe { std::slice::from_raw_parts(self.base.as_ptr().add(offset).cast(), n) }
    }

    /// `n` cache-padded `AtomicU64`s at `offset`.
    pub(crate) fn padded_u64s(&self, offset: usize, n: usize) -> &[CachePadded<AtomicU64>] {
        let size = std::mem::size_of::<CachePadded<AtomicU64>>();
        let align = std::mem::align_of::<CachePadded<AtomicU64>>();
        self.check(offset, n * size, align);
        // SAFETY: in bounds and aligned to CachePadded's alignment (checked); CachePadded is a
        // transparent-layout wrapper of the atomic plus padding, valid for all-zero bytes.
        unsafe { std::slice::from_raw_parts(self.base.as_ptr().add(offset).cast(), n) }
    }
}

/// Rounds `n` up to the region alignment.
pub(crate) const fn round_up(n: usize) -> usize {
    n.div_ceil(ALIGN) * ALIGN
}
