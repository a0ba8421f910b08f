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
//! decrements the lane the waiter was counted in. Each lane also holds a set of the ticket ids
//! counted in it (see `fingerprint_set`), so a waiter is counted at most once per epoch: a
//! client that replays a queued ticket, however old, counts at most once in each epoch of the
//! window (`grace` at once, where an honest waiter counts once). The set is sized
//! by the room's `max_live_waiters`; beyond that many waiters in one epoch it stops refusing
//! repeats, which can only make the queue look longer than it is (fewer admissions, never
//! more).
//!
//! There are `grace + 1` lanes: the `grace` epochs of the window and the next one, which `tick`
//! zeroes and tags ahead of its start. Writers check a lane's tag before touching it, so a lane
//! is never written while it is being zeroed.

use crate::counters::fingerprint_set::{fingerprint, insert_if_absent};
use crate::sync::{AtomicI64, AtomicU64, Ordering};

/// How counting a waiter went.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Counted {
    /// Counted now, for the first time in this epoch.
    New,
    /// This ticket was already counted in this epoch.
    Already,
    /// The epoch's lane is not prepared yet (tick is late).
    NotReady,
}

/// A view over the lane table of one room.
pub(crate) struct QueueLanes<'a> {
    slots: usize,
    grace: u64,
    counts: &'a [AtomicI64],
    lane_tags: &'a [AtomicU64],
    guards: &'a [AtomicU64],
    guard_words: usize,
}

impl<'a> QueueLanes<'a> {
    /// Wraps a table of `slots * (grace + 1)` counters, `grace + 1` lane tags and `grace + 1`
    /// id sets of `guard_words` words each.
    pub(crate) fn new(
        slots: usize,
        grace: u64,
        counts: &'a [AtomicI64],
        lane_tags: &'a [AtomicU64],
        guards: &'a [AtomicU64],
        guard_words: usize,
    ) -> Self {
        debug_assert_eq!(lane_tags.len() as u64, grace + 1);
        debug_assert_eq!(counts.len(), slots * lane_tags.len());
        debug_assert_eq!(guards.len(), guard_words * lane_tags.len());
        debug_assert!(guard_words.is_power_of_two());
        Self {
            slots,
            grace,
            counts,
            lane_tags,
            guards,
            guard_words,
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

    /// Counts waiter `id` of `slot` as live in `epoch`, unless it already is.
    pub(crate) fn count(&self, slot: usize, epoch: u64, id: u64) -> Counted {
        let Some(lane) = self.lane_of(epoch) else {
            return Counted::NotReady;
        };
        let (start, fp) = fingerprint(id, self.guard_words);
        let set = &self.guards[lane * self.guard_words..(lane + 1) * self.guard_words];
        if !insert_if_absent(set, start, fp) {
            return Counted::Already;
        }
        self.cell(slot, lane).fetch_add(1, Ordering::Relaxed);
        Counted::New
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
        for w in &self.guards[lane * self.guard_words..(lane + 1) * self.guard_words] {
            w.store(0, Ordering::Relaxed);
        }
        self.lane_tags[lane].store(epoch + 1, Ordering::Release);
    }

    /// Live waiters of `slot` as of `epoch`: the sum over the window's lanes, at least zero.
    /// (Passes over many slots take the [`window`](Self::window) once.)
    #[cfg(test)]
    pub(crate) fn live(&self, slot: usize, epoch: u64) -> u64 {
        self.live_in(&self.window(epoch), slot)
    }

    /// The window's lanes as of `epoch`, their tags read once: for a pass over many slots
    /// (a tick reads every arrival bucket's, twice), which would otherwise read the tags and
    /// divide for every slot.
    pub(crate) fn window(&self, epoch: u64) -> Window {
        let first = epoch.saturating_sub(self.grace - 1);
        let mut w = Window {
            lanes: [0; MAX_LANES],
            len: 0,
        };
        for lane in (first..=epoch).filter_map(|e| self.lane_of(e)) {
            w.lanes[w.len] = lane;
            w.len += 1;
        }
        w
    }

    /// Live waiters of `slot` in `window` (see [`live`](Self::live)).
    pub(crate) fn live_in(&self, window: &Window, slot: usize) -> u64 {
        let base = (slot % self.slots) * self.lanes();
        let sum: i64 = window.lanes[..window.len]
            .iter()
            .map(|&lane| self.counts[base + lane].load(Ordering::Relaxed))
            .sum();
        sum.max(0) as u64
    }
}

/// The most epochs a live window spans (`waiter_grace_refreshes` is at most 16).
const MAX_LANES: usize = 16;

/// The lanes of a live window, as of one epoch (see [`QueueLanes::window`]).
#[derive(Debug, Clone, Copy)]
pub(crate) struct Window {
    lanes: [usize; MAX_LANES],
    len: usize,
}

#[cfg(all(test, not(velvet_rope_loom)))]
mod tests {
    use super::*;

    struct Table(Vec<AtomicI64>, Vec<AtomicU64>, Vec<AtomicU64>);

    fn table(slots: usize, grace: u64) -> Table {
        let lanes = grace as usize + 1;
        Table(
            (0..slots * lanes).map(|_| AtomicI64::new(0)).collect(),
            (0..lanes).map(|_| AtomicU64::new(0)).collect(),
            (0..lanes * 64).map(|_| AtomicU64::new(0)).collect(),
        )
    }

    impl Table {
        fn view(&self, slots: usize, grace: u64) -> QueueLanes<'_> {
            QueueLanes::new(slots, grace, &self.0, &self.1, &self.2, 64)
        }
    }

    #[test]
    fn a_waiter_that_stops_refreshing_stops_counting_after_grace() {
        let t = table(4, 2);
        let q = t.view(4, 2);
        q.prepare(10);
        q.prepare(11);
        assert_eq!(q.count(1, 10, 7), Counted::New);
        assert_eq!(q.live(1, 10), 1);
        assert_eq!(q.live(1, 11), 1);
        q.prepare(12);
        assert_eq!(q.live(1, 12), 0, "gone after 2 epochs without a refresh");
    }

    #[test]
    fn refresh_moves_and_admission_removes() {
        let t = table(4, 2);
        let q = t.view(4, 2);
        q.prepare(10);
        q.prepare(11);
        q.count(2, 10, 5);
        // Refresh in epoch 11: counted in 11, removed from 10.
        assert_eq!(q.count(2, 11, 5), Counted::New);
        q.uncount(2, 10);
        // Replays of the same ticket in the same epoch count nothing.
        for _ in 0..100 {
            assert_eq!(q.count(2, 11, 5), Counted::Already);
        }
        q.prepare(12);
        assert_eq!(q.live(2, 11), 1);
        q.uncount(2, 11);
        assert_eq!(q.live(2, 11), 0);
    }

    #[test]
    fn unprepared_lane_is_not_written() {
        let t = table(2, 2);
        let q = t.view(2, 2);
        assert_eq!(q.count(0, 5, 1), Counted::NotReady);
        assert_eq!(q.live(0, 5), 0);
    }
}
