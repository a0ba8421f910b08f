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
    /// Cluster tier (see `admission::cluster`): the allowance written by the last sync is
    /// good until this time (ms, the engine's clock); 0 when no sync has written one.
    GrantUntil,
    /// Cluster: the allowance of active visitors (stands for `total_active_users`).
    GrantTotal,
    /// Cluster: the bucket `GrantMinute` is for (`GrantMinuteNext` is for the one after).
    GrantBucket,
    /// Cluster: the allowance of admissions in `GrantBucket` (stands for `new_users_per_minute`).
    GrantMinute,
    /// Cluster: the allowance of admissions in the bucket after `GrantBucket`.
    GrantMinuteNext,
    /// Cluster: the room's global FIFO frontier.
    GrantFrontier,
    /// Cluster: live waiters behind the global frontier at other hosts.
    GrantBehind,
    /// Cluster: share of the limits, in millionths, to admit on once the allowance lapsed.
    FallbackPpm,
    /// Published (cluster): the allowance of active visitors the last advance enforced.
    AppliedTotal,
    /// Published (cluster): the bucket of the last advance (`AppliedMinute` is for it).
    AppliedBucket,
    /// Published (cluster): the allowance of admissions in `AppliedBucket` enforced.
    AppliedMinute,
    /// Published (cluster): the allowance of admissions in the bucket after enforced.
    AppliedMinuteNext,
    /// Published: admissions booked to the bucket before the current one (traffic history).
    AdmittedLastMinute,
    /// Cluster: when (the engine's clock, ms, plus one) a process last took its turn
    /// to sync the room with the store: one process of the host syncs per interval, and
    /// another takes over when it stops (see `admission::cluster::sync_turn`).
    SyncTurn,
    /// Cluster: the store's sequence number of the grant in the `Grant*` cells (a grant with
    /// a lower one arrived late and is dropped; reported, so a store that lost or rolled back
    /// its state is found out).
    GrantSeq,
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
}

impl TickBlock<'_> {
    /// Swaps cell `c` from `current` to `new`; whether it held `current`.
    pub(crate) fn compare_exchange(&self, c: Cell, current: u64, new: u64) -> bool {
        self.cells[c as usize]
            .compare_exchange(current, new, Ordering::AcqRel, Ordering::Acquire)
            .is_ok()
    }
}

/// Number of cells reserved (room to grow without a layout change).
pub(crate) const CELLS: usize = 48;

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

    /// Takes the advance lock, or `None` at once if another live process holds it. Released
    /// when the returned value is dropped.
    pub(crate) fn try_lock(&self) -> Option<Held<'a>> {
        let word = &self.cells[Cell::Lock as usize];
        if self.private {
            ProcessLock::private(word).try_lock()
        } else {
            ProcessLock::new(word).try_lock()
        }
    }
}
