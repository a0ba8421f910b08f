//! Live waiters per arrival bucket, without per-waiter state.
//!
//! Time is cut into refresh epochs (one `refresh_interval` each). A waiter counts as live in
//! the epoch in which it last refreshed; a waiter is live while that epoch is one of the last
//! `grace` epochs, so one that stops refreshing stops holding its place in the queue after at
//! most `grace` refresh intervals, and the frontier moves past it.
//!
//! Counting is "move counting" on a small table: `counts[slot][lane]` is the number of waiters
//! of arrival slot `slot` whose ticket says they were last counted in the epoch of `lane`. A
//! refresh in a new epoch increments the new lane and decrements the old one; admission
//! decrements the lane the waiter was counted in. The ticket carries the epoch it was counted
//! in, so an honest waiter is counted once per epoch whatever its refresh rate. A client that
//! replays an old queued ticket can only distort the count of its own arrival slot (the table
//! clamps at zero when read); that can skew displayed positions and the frontier's pace, never
//! admission itself, which always takes an exact slot from the pool.
//!
//! There are `grace + 1` lanes: the `grace` epochs of the window and the next one, which `tick`
//! zeroes and tags ahead of its start. Writers check a lane's tag before touching it, so a lane
//! is never written while it is being zeroed.

use crate::sync::{AtomicI64, AtomicU64, Ordering};

/// A view over the lane table of one room.
pub(crate) struct QueueLanes<'a> {
    slots: usize,
    grace: u64,
    counts: &'a [AtomicI64],
    lane_tags: &'a [AtomicU64],
}

impl<'a> QueueLanes<'a> {
    /// Wraps a table of `slots * (grace + 1)` counters and `grace + 1` lane tags.
    pub(crate) fn new(
        slots: usize,
        grace: u64,
        counts: &'a [AtomicI64],
        lane_tags: &'a [AtomicU64],
    ) -> Self {
        debug_assert_eq!(lane_tags.len() as u64, grace + 1);
        debug_assert_eq!(counts.len(), slots * lane_tags.len());
        Self {
            slots,
            grace,
            counts,
            lane_tags,
        }
    }

    fn lanes(&self) -> usize {
        self.lane_tags.len()
    }

    fn lane_of(&self, epoch: u64) -> Option<usize> {
        let lane = (epoch % self.lanes() as u64) as usize;
        (self.lane_tags[lane].load(Ordering::Acquire) == epoch + 1).then_some(lane)
    }

    fn cell(&self, slot: usize, lane: usize) -> &AtomicI64 {
        &self.counts[(slot % self.slots) * self.lanes() + lane]
    }

    /// Whether `counted` is still inside the live window as seen from `epoch`.
    pub(crate) fn in_window(&self, counted: u64, epoch: u64) -> bool {
        counted <= epoch && counted + self.grace > epoch
    }

    /// Counts one waiter of `slot` as live in `epoch`. False if the lane is not ready yet.
    pub(crate) fn count(&self, slot: usize, epoch: u64) -> bool {
        match self.lane_of(epoch) {
            Some(lane) => {
                self.cell(slot, lane).fetch_add(1, Ordering::Relaxed);
                true
            }
            None => false,
        }
    }

    /// Removes one waiter of `slot` from `epoch`'s count, if that epoch is still tracked.
    pub(crate) fn uncount(&self, slot: usize, epoch: u64) {
        if let Some(lane) = self.lane_of(epoch) {
            self.cell(slot, lane).fetch_sub(1, Ordering::Relaxed);
        }
    }

    /// Makes the lane of `epoch` zero and tagged for it, unless it already is. `tick` only.
    pub(crate) fn prepare(&self, epoch: u64) {
        let lane = (epoch % self.lanes() as u64) as usize;
        if self.lane_tags[lane].load(Ordering::Acquire) == epoch + 1 {
            return;
        }
        self.lane_tags[lane].store(0, Ordering::Release);
        for slot in 0..self.slots {
            self.cell(slot, lane).store(0, Ordering::Relaxed);
        }
        self.lane_tags[lane].store(epoch + 1, Ordering::Release);
    }

    /// Live waiters of `slot` as of `epoch`: the sum over the window's lanes, at least zero.
    pub(crate) fn live(&self, slot: usize, epoch: u64) -> u64 {
        let first = epoch.saturating_sub(self.grace - 1);
        let sum: i64 = (first..=epoch)
            .filter_map(|e| self.lane_of(e))
            .map(|lane| self.cell(slot, lane).load(Ordering::Relaxed))
            .sum();
        sum.max(0) as u64
    }
}

#[cfg(all(test, not(velvet_rope_loom)))]
mod tests {
    use super::*;

    fn table(slots: usize, grace: u64) -> (Vec<AtomicI64>, Vec<AtomicU64>) {
        let lanes = grace as usize + 1;
        (
            (0..slots * lanes).map(|_| AtomicI64::new(0)).collect(),
            (0..lanes).map(|_| AtomicU64::new(0)).collect(),
        )
    }

    #[test]
    fn a_waiter_that_stops_refreshing_stops_counting_after_grace() {
        let (c, t) = table(4, 2);
        let q = QueueLanes::new(4, 2, &c, &t);
        q.prepare(10);
        q.prepare(11);
        assert!(q.count(1, 10));
        assert_eq!(q.live(1, 10), 1);
        assert_eq!(q.live(1, 11), 1);
        q.prepare(12);
        assert_eq!(q.live(1, 12), 0, "gone after 2 epochs without a refresh");
    }

    #[test]
    fn refresh_moves_and_admission_removes() {
        let (c, t) = table(4, 2);
        let q = QueueLanes::new(4, 2, &c, &t);
        q.prepare(10);
        q.prepare(11);
        q.count(2, 10);
        // Refresh in epoch 11: counted in 11, removed from 10.
        q.count(2, 11);
        q.uncount(2, 10);
        q.prepare(12);
        assert_eq!(q.live(2, 11), 1);
        q.uncount(2, 11);
        assert_eq!(q.live(2, 11), 0);
    }

    #[test]
    fn unprepared_lane_is_not_written() {
        let (c, t) = table(2, 2);
        let q = QueueLanes::new(2, 2, &c, &t);
        assert!(!q.count(0, 5));
        assert_eq!(q.live(0, 5), 0);
    }
}
