//! The state `tick` carries from one tick to the next, kept in the room's region so that every
//! process sharing the region (nginx workers, say) continues where another left off.
//!
//! One process at a time advances a room: it takes the block's [`ProcessLock`], opens the
//! current bucket and refresh epoch, folds the counters, moves the pools' ledger and the queue's
//! frontier, and publishes the figures every process reads. A process that finds the lock held
//! does not wait: it reads what was last published (at most one tick old).

use crate::counters::process_lock::{Held, ProcessLock};
use crate::sync::{AtomicU64, Ordering};

/// Fixed cells of the block.
#[derive(Clone, Copy, Debug)]
#[repr(usize)]
pub(crate) enum Cell {
    /// The advance lock (see [`ProcessLock`]).
    Lock = 0,
    /// The newest bucket opened for admissions (admissions are booked to it or the next one).
    Bucket,
    /// The newest refresh epoch opened.
    Epoch,
    /// Slots granted to the two pools, net of revokes, since the counters were made, as of
    /// the last advance. The pools themselves are the ledger (each shard counts what it
    /// granted, see `slot_pool`): this cell only carries the high bits their 32-bit sums
    /// cannot, so it may lag them by what a crashed advance granted.
    Granted,
    /// Admissions booked to buckets whose ring slots were recycled.
    AdmittedClosed,
    /// FIFO: the arrival bucket up to which waiters may enter.
    Frontier,
    /// Random: a waiter whose draw is below this may enter.
    DrawThreshold,
    /// Admission rate (visitors/s, f64 bits), exponentially weighted.
    RateBits,
    /// Time of the last advance (ms).
    LastTick,
    /// Admissions counted at the last advance.
    LastAdmittedTotal,
    /// Published: visitors active in the session window.
    Active,
    /// Published: admissions booked to the current bucket.
    AdmittedThisMinute,
    /// Published: admissions since the counters were made.
    AdmittedTotal,
    /// Published: live waiters.
    QueueLength,
    /// Published: slots free for new visitors until the next tick.
    FreeSlots,
    /// Published: admissions booked to the bucket before the current one (traffic history).
    AdmittedLastMinute,
    /// Cluster: when (the engine's clock, ms, plus one) a process last took its turn
    /// to sync the room with the store: one process of the host syncs per interval, and
    /// another takes over when it stops (see `admission::cluster::sync_turn`).
    SyncTurn,
    /// Cluster: the host's admissions since the counters were made, at its last sync (any
    /// process's): what the next sync's demand is measured from.
    SyncAdmitted,
    /// Cluster: when (engine clock, ms) that sync read them.
    SyncAt,
    /// Cluster: when (engine clock, ms) the room first advanced as a clustered room: before
    /// its first grant a host waits a lease and a session before it falls back.
    ClusterSince,
    /// A fingerprint of the configuration that governs the room (the newest to attach, see
    /// `admission::governance`): only engines of that configuration advance it.
    ConfigHash,
    /// When (the host's monotonic clock, ms) an engine of the governing configuration last
    /// advanced the room: a configuration whose engines all stopped is taken over.
    ConfigBeat,
    /// Until when (engine clock, ms) the room learns after its counters were made anew (the
    /// room's `restart_learning`): ticket holders are counted in, new visitors wait.
    LearnUntil,
    /// Until when (engine clock, ms; 0: no end) the slots the last advance left in the pools
    /// are good: the next switch of the room's schedule (see `admission::tick`).
    GrantsUntil,
    /// FIFO with a shuffled pre-queue: a waiter of the frontier's arrival bucket, when that is
    /// one of the shuffle's, may enter when its draw is below this (see `admission::decide`).
    FrontierDraw,
    /// The newest clock (ms) an advance took the room's rules at: an advance with a clock
    /// behind it (another process's cached time) grants under the rules of this one, so the
    /// rules never go back past a switch.
    RulesClock,
    /// The admission rate's exponentially weighted sum, before its correction (f64 bits).
    RateRawBits,
    /// The weight that sum has gathered since the room's first advance (f64 bits): the rate
    /// is the sum over it, so that a young room's rate is not pulled towards zero.
    RateWeightBits,
    /// Whether the room was queueing (2) or not (1; 0: never logged) when it was last logged
    /// (see `admission::events`): one line per change for the host, not per process.
    LoggedQueueing,
    /// The event phase an engine last logged (see `admission::events`): 0 none, else the
    /// event's start (ms) times 2, plus 1 in its pre-queue, plus 2.
    LoggedPhase,
    /// Since when (engine clock, ms; 0: not empty, or not logged as queueing) the room's queue
    /// has been empty while logged as queueing (see `admission::events`).
    QueueEmptySince,
    /// Cluster: the grant the last sync wrote, a [`Record`] of `GRANT_CELLS` (see
    /// `admission::cluster`): written whole or not at all.
    Grant = 32,
    /// Published (cluster): what the last advance enforced, a [`Record`] of `APPLIED_CELLS`.
    Applied = 32 + 1 + 2 * GRANT_CELLS,
    /// Cluster: the free slots of the whole room beyond its live waiters, as the store found
    /// them for the grant numbered [`Cell::ClusterSpareSeq`], plus one (0: not known). Paces
    /// waiters only (see `admission::cluster::allowance_retry_secs`); no limit reads it.
    ClusterSpare = 32 + 1 + 2 * GRANT_CELLS + 1 + 2 * APPLIED_CELLS,
    /// Cluster: the sequence number of the grant `ClusterSpare` came with (a grant written
    /// without one, by an older engine, leaves it behind: the spare is then not known).
    ClusterSpareSeq,
    /// Cluster: until when (engine clock, ms) `ClusterSpare` may be trusted: two sync
    /// intervals after the report that got it was sent.
    ClusterSpareUntil,
}

/// Cells of a grant record: sequence, until, total, bucket, minute, minute next, frontier,
/// waiting elsewhere, fallback (see `admission::cluster::Grant`).
pub(crate) const GRANT_CELLS: usize = 9;
/// Cells of an applied record: total, bucket, minute, minute next.
pub(crate) const APPLIED_CELLS: usize = 4;
const _: () =
    assert!(Cell::Applied as usize + 1 + 2 * APPLIED_CELLS <= Cell::ClusterSpare as usize);
const _: () = assert!((Cell::ClusterSpareUntil as usize) < CELLS);
const _: () = assert!((Cell::QueueEmptySince as usize) < (Cell::Grant as usize));

/// A record of `N` cells that a crash never leaves half written: two slots and a selector
/// (its parity says which slot is current). A writer (one at a time: the tick lock's holder)
/// fills the other slot, then bumps the selector: until that one store, readers see the old
/// record whole; after it, the new one. A writer that dies in between leaves the old record.
pub(crate) struct Record<'a, const N: usize> {
    cells: &'a [AtomicU64],
}

impl<const N: usize> Record<'_, N> {
    /// The current record.
    pub(crate) fn read(&self) -> [u64; N] {
        let slot = (self.cells[0].load(Ordering::Acquire) & 1) as usize;
        let base = 1 + slot * N;
        std::array::from_fn(|i| self.cells[base + i].load(Ordering::Acquire))
    }

    /// Replaces the record with `values`, whole.
    pub(crate) fn write(&self, values: [u64; N]) {
        let selector = self.cells[0].load(Ordering::Acquire);
        let next = selector.wrapping_add(1);
        let base = 1 + (next & 1) as usize * N;
        for (cell, v) in self.cells[base..base + N].iter().zip(values) {
            cell.store(v, Ordering::Release);
        }
        crate::env::fault_point(crate::env::FaultPoint::RecordWritten);
        self.cells[0].store(next, Ordering::Release);
    }
}

impl TickBlock<'_> {
    /// Swaps cell `c` from `current` to `new`; whether it held `current`.
    pub(crate) fn compare_exchange(&self, c: Cell, current: u64, new: u64) -> bool {
        self.cells[c as usize]
            .compare_exchange(current, new, Ordering::AcqRel, Ordering::Acquire)
            .is_ok()
    }
}

/// A live process that has held a room's tick lock this long is taken over: an advance takes
/// microseconds, and while the lock is held the host can neither report to the cluster's store
/// nor apply its grants (a resumed holder finds it lost the lock before its next grant).
pub const TICK_LOCK_TAKEOVER_MS: u64 = 1_000;

/// Number of cells reserved (room to grow without a layout change).
pub(crate) const CELLS: usize = 64;

/// A view over a room's tick block.
pub(crate) struct TickBlock<'a> {
    cells: &'a [AtomicU64],
    private: bool,
}

impl<'a> TickBlock<'a> {
    /// Wraps the cells; `private` when no other process maps them (see
    /// [`ProcessLock::private`]).
    pub(crate) fn new(cells: &'a [AtomicU64], private: bool) -> Self {
        debug_assert_eq!(cells.len(), CELLS);
        Self { cells, private }
    }

    /// One cell's value.
    #[inline]
    pub(crate) fn get(&self, c: Cell) -> u64 {
        self.cells[c as usize].load(Ordering::Acquire)
    }

    /// Sets one cell.
    pub(crate) fn set(&self, c: Cell, v: u64) {
        self.cells[c as usize].store(v, Ordering::Release);
    }

    /// Adds `delta` (two's complement for a decrease) to a cell; returns the new value.
    pub(crate) fn add(&self, c: Cell, delta: i64) -> u64 {
        self.cells[c as usize]
            .fetch_add(delta as u64, Ordering::AcqRel)
            .wrapping_add(delta as u64)
    }

    /// Clears the grant record (no grant: see `admission::cluster`), both slots.
    pub(crate) fn clear_grant(&self) {
        let at = Cell::Grant as usize;
        for cell in &self.cells[at..at + 1 + 2 * GRANT_CELLS] {
            cell.store(0, Ordering::Release);
        }
    }

    /// The two-slot record of `N` cells at `c` (see [`Record`]).
    pub(crate) fn record<const N: usize>(&self, c: Cell) -> Record<'a, N> {
        let at = c as usize;
        Record {
            cells: &self.cells[at..at + 1 + 2 * N],
        }
    }

    /// Takes the advance lock, or `None` at once if another live process holds it. Released
    /// when the returned value is dropped.
    pub(crate) fn try_lock(&self) -> Option<Held<'a>> {
        let word = &self.cells[Cell::Lock as usize];
        let lock = if self.private {
            ProcessLock::private(word)
        } else {
            ProcessLock::new(word)
        };
        lock.with_timeout(TICK_LOCK_TAKEOVER_MS).try_lock()
    }
}

#[cfg(all(test, not(velvet_rope_loom)))]
mod tests {
    use super::*;

    /// A record is read whole: a writer that stops (or dies) after filling the new slot and
    /// before making it current leaves the old record readable, never a mixture.
    #[test]
    fn a_record_is_read_whole() {
        let cells: Vec<AtomicU64> = (0..CELLS).map(|_| AtomicU64::new(0)).collect();
        let tb = TickBlock::new(&cells, true);
        let r = tb.record::<3>(Cell::Grant);
        r.write([1, 2, 3]);
        assert_eq!(r.read(), [1, 2, 3]);
        r.write([4, 5, 6]);
        assert_eq!(r.read(), [4, 5, 6]);
        // A writer that filled the other slot half and died: the old record stands.
        let at = Cell::Grant as usize;
        let selector = cells[at].load(Ordering::Relaxed);
        let other = 1 + ((selector + 1) & 1) as usize * 3;
        cells[at + other].store(7, Ordering::Relaxed);
        cells[at + other + 1].store(8, Ordering::Relaxed);
        assert_eq!(r.read(), [4, 5, 6]);
        r.write([7, 8, 9]);
        assert_eq!(r.read(), [7, 8, 9]);
    }
}
