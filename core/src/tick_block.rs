//! The state `tick` carries from one tick to the next, kept in the room's region so that every
//! process sharing the region (nginx workers, say) continues where another left off.
//!
//! One process at a time advances a room: it takes the block's try-lock (a compare-and-swap of
//! the time it started, so a lock left by a process that died mid-tick is taken over after
//! [`STALE_LOCK_MS`]), folds the counters, moves the frontier, writes the pools' new targets and
//! publishes the figures every process's snapshot reads. Others that call `tick` meanwhile skip
//! the advance, wait (briefly, bounded) for the one in progress to publish, and read that.

use crate::slot_pool::PoolReading;
use crate::sync::{AtomicU64, Ordering};

/// A tick lock older than this is assumed abandoned (its process died) and taken over.
pub(crate) const STALE_LOCK_MS: u64 = 5_000;

/// Fixed cells of the block.
#[derive(Clone, Copy)]
#[repr(usize)]
pub(crate) enum Cell {
    Lock = 0,
    Frontier,
    AdmittedTotal,
    RateBits,
    LastTick,
    Active,
    AdmittedThisMinute,
    QueueLength,
    WaiterTarget,
    OpenTarget,
    DrawThreshold,
}

/// Number of fixed cells reserved (room to grow without a layout change).
pub(crate) const CELLS: usize = 16;

/// A view over a room's tick block.
pub(crate) struct TickBlock<'a> {
    cells: &'a [AtomicU64],
    open_seen: &'a [AtomicU64],
    waiter_seen: &'a [AtomicU64],
    admitted: &'a [AtomicU64],
}

impl<'a> TickBlock<'a> {
    /// Wraps the cells, the per-shard claim readings of both pools, and the admitted ring
    /// (`2 x buckets` cells: tag, count).
    pub(crate) fn new(
        cells: &'a [AtomicU64],
        open_seen: &'a [AtomicU64],
        waiter_seen: &'a [AtomicU64],
        admitted: &'a [AtomicU64],
    ) -> Self {
        Self {
            cells,
            open_seen,
            waiter_seen,
            admitted,
        }
    }

    pub(crate) fn get(&self, c: Cell) -> u64 {
        self.cells[c as usize].load(Ordering::Acquire)
    }

    pub(crate) fn set(&self, c: Cell, v: u64) {
        self.cells[c as usize].store(v, Ordering::Release);
    }

    /// Takes the advance lock at `now`, or takes over one older than [`STALE_LOCK_MS`].
    /// Returns the token to unlock with: the lock word holds the taker's time in its high bits
    /// and a random tag in its low 16, so a stalled holder whose lock was taken over cannot
    /// release the new holder's lock.
    pub(crate) fn try_lock(&self, now: u64) -> Option<u64> {
        let lock = &self.cells[Cell::Lock as usize];
        let held = lock.load(Ordering::Acquire);
        if held != 0 && (held >> 16).saturating_add(STALE_LOCK_MS) > now {
            return None;
        }
        let token = (now << 16) | (crate::random::u64() & 0xFFFF) | 1;
        lock.compare_exchange(held, token, Ordering::AcqRel, Ordering::Acquire)
            .ok()
            .map(|_| token)
    }

    /// Releases the advance lock if `token` still holds it.
    pub(crate) fn unlock(&self, token: u64) {
        let _ = self.cells[Cell::Lock as usize].compare_exchange(
            token,
            0,
            Ordering::AcqRel,
            Ordering::Acquire,
        );
    }

    /// Waits, at most `limit`, until the advance lock held at the call is released (or taken
    /// over), so that the figures read next include that advance. Called from `tick`, never
    /// from `admit`.
    pub(crate) fn wait_unlocked(&self, limit: std::time::Duration) {
        let lock = &self.cells[Cell::Lock as usize];
        let held = lock.load(Ordering::Acquire);
        if held == 0 {
            return;
        }
        let until = std::time::Instant::now() + limit;
        while lock.load(Ordering::Acquire) == held && std::time::Instant::now() < until {
            std::thread::yield_now();
        }
    }

    /// The pools' claim counters as of the last advance.
    pub(crate) fn readings(&self) -> (PoolReading, PoolReading) {
        let read = |cells: &[AtomicU64]| {
            PoolReading::from_claimed(
                cells
                    .iter()
                    .map(|c| c.load(Ordering::Acquire) as u32)
                    .collect(),
            )
        };
        (read(self.open_seen), read(self.waiter_seen))
    }

    /// Records the pools' claim counters of this advance.
    pub(crate) fn set_readings(&self, open: &PoolReading, waiters: &PoolReading) {
        for (cell, v) in self.open_seen.iter().zip(open.claimed()) {
            cell.store(u64::from(*v), Ordering::Release);
        }
        for (cell, v) in self.waiter_seen.iter().zip(waiters.claimed()) {
            cell.store(u64::from(*v), Ordering::Release);
        }
    }

    fn ring(&self) -> usize {
        self.admitted.len() / 2
    }

    /// Adds `n` admissions to `bucket` and returns the bucket's total.
    pub(crate) fn add_admitted(&self, bucket: u64, n: u64) -> u64 {
        let i = (bucket % self.ring() as u64) as usize * 2;
        if self.admitted[i].load(Ordering::Acquire) != bucket + 1 {
            self.admitted[i + 1].store(0, Ordering::Release);
            self.admitted[i].store(bucket + 1, Ordering::Release);
        }
        self.admitted[i + 1].fetch_add(n, Ordering::AcqRel) + n
    }

    /// Admissions counted in buckets `first..=last`.
    pub(crate) fn admitted_in(&self, first: u64, last: u64) -> u64 {
        (0..self.ring())
            .filter_map(|slot| {
                let tag = self.admitted[slot * 2].load(Ordering::Acquire);
                (tag != 0 && (first..=last).contains(&(tag - 1)))
                    .then(|| self.admitted[slot * 2 + 1].load(Ordering::Acquire))
            })
            .sum()
    }
}
