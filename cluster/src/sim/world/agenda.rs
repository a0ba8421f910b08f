//! The simulation's events by the time they happen (virtual milliseconds), each time's in the
//! order they were scheduled: the order of a heap on (time, sequence).
//!
//! A timing wheel of [`SLOTS`] slots of [`SLOT_MS`] each (about two minutes ahead): scheduling
//! an event appends it to its slot's list, and when time reaches a slot, its list is sorted
//! by time (a stable sort: ties keep the order they were scheduled in) and taken in order;
//! events scheduled into the slot being taken are inserted in place. Lists keep their
//! capacity as the wheel turns, so nothing is allocated once it has come round. Events further
//! ahead (a visitor coming back in ten minutes) or, should one ever be scheduled, in the past
//! wait in an ordered map beside the wheel.
//!
//! A crowd of 100,000 visitors keeps hundreds of thousands of events scheduled, about one a
//! millisecond: an ordered map of every time cost a search, a queue allocated per distinct
//! time, and a cache miss or two per event; a wheel of one queue per millisecond still cost
//! two misses (the queue, its buffer). Here a slot's events lie together.

use std::collections::{BTreeMap, VecDeque};

/// Virtual milliseconds a slot spans.
const SLOT_MS: u64 = 64;
/// Slots on the wheel (a power of two).
const SLOTS: u64 = 2048;

/// Events by time; see the module documentation.
pub(crate) struct Agenda<E> {
    /// `wheel[s % SLOTS]` holds the events of slot `s` (times `s * SLOT_MS ..`) for `s` in
    /// `slot + 1 .. slot + SLOTS`, in the order they were scheduled.
    wheel: Vec<Vec<(u64, E)>>,
    /// The slot being taken.
    slot: u64,
    /// Its events left, last first: sorted by time descending, ties in the reverse of the
    /// order they were scheduled, so that the next event is popped off the end.
    current: Vec<(u64, E)>,
    /// Events on the wheel (not counting `current`).
    on_wheel: usize,
    /// Events scheduled outside the wheel's span when they were scheduled. At any time `t`
    /// they were scheduled before any of the wheel's at `t` (the wheel reached `t` later), so
    /// they come first.
    aside: BTreeMap<u64, VecDeque<E>>,
}

impl<E> Default for Agenda<E> {
    fn default() -> Self {
        Self {
            wheel: std::iter::repeat_with(Vec::new)
                .take(SLOTS as usize)
                .collect(),
            slot: 0,
            current: Vec::new(),
            on_wheel: 0,
            aside: BTreeMap::new(),
        }
    }
}

impl<E> Agenda<E> {
    /// Schedules `event` at `at`, after every event already scheduled at `at`.
    pub(crate) fn push(&mut self, at: u64, event: E) {
        let s = at / SLOT_MS;
        if s == self.slot {
            // Into the slot being taken: before (taken after) every event left at `at` or
            // earlier.
            let i = self.current.partition_point(|(t, _)| *t > at);
            self.current.insert(i, (at, event));
        } else if s > self.slot && s - self.slot < SLOTS {
            self.wheel[(s % SLOTS) as usize].push((at, event));
            self.on_wheel += 1;
        } else {
            self.aside.entry(at).or_default().push_back(event);
        }
    }

    /// The earliest event and its time (of several at one time, the first scheduled).
    pub(crate) fn pop(&mut self) -> Option<(u64, E)> {
        loop {
            let aside = self.aside.keys().next().copied();
            if let Some(&(at, _)) = self.current.last() {
                if aside.is_some_and(|a| a <= at) {
                    return self.pop_aside();
                }
                return self.current.pop();
            }
            // The slot is done: the next one with events, unless the map's earliest comes
            // before it.
            if self.on_wheel == 0 {
                let a = aside?;
                // Nothing on the wheel: it moves on to the map's earliest (a quiet hour is
                // not walked a slot at a time).
                self.turn_to((a / SLOT_MS).max(self.slot));
                return self.pop_aside();
            }
            let s = self.slot + 1;
            if aside.is_some_and(|a| a < s * SLOT_MS) {
                return self.pop_aside();
            }
            self.turn_to(s);
        }
    }

    /// Makes slot `s` (after the current one and within the wheel's span, or any slot when
    /// the wheel is empty) the one taken; the current one is done.
    fn turn_to(&mut self, s: u64) {
        if s == self.slot {
            return;
        }
        let mut list = std::mem::take(&mut self.wheel[(s % SLOTS) as usize]);
        self.on_wheel -= list.len();
        // Stable: ties stay in the order scheduled; reversed, the first is popped first.
        list.sort_by_key(|(at, _)| *at);
        list.reverse();
        // The spent list's capacity goes back on the wheel for a later turn.
        self.wheel[(s % SLOTS) as usize] = std::mem::replace(&mut self.current, list);
        self.slot = s;
    }

    /// The `n`-th event to be taken from now on (0: the next), if it is in the slot being
    /// taken (a hint for loading ahead what it will need; the map beside the wheel is not
    /// looked at).
    pub(crate) fn peek(&self, n: usize) -> Option<&E> {
        let i = self.current.len().checked_sub(n + 1)?;
        self.current.get(i).map(|(_, e)| e)
    }

    fn pop_aside(&mut self) -> Option<(u64, E)> {
        let mut first = self.aside.first_entry()?;
        let at = *first.key();
        let event = first.get_mut().pop_front();
        if first.get().is_empty() {
            first.remove();
        }
        event.map(|e| (at, e))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::{rngs::StdRng, Rng, SeedableRng};
    use std::cmp::Reverse;
    use std::collections::BinaryHeap;

    const SPAN: u64 = SLOT_MS * SLOTS;

    /// Against a heap on (time, sequence): pushes at the present, into the slot being taken,
    /// in the past, around the wheel's span and far beyond it, ties, quiet spans longer than
    /// the wheel; popped in the same order.
    #[test]
    fn pops_in_the_order_of_a_heap_on_time_and_sequence() {
        for seed in 0..20 {
            let mut rng = StdRng::seed_from_u64(seed);
            let mut agenda = Agenda::default();
            let mut heap = BinaryHeap::new();
            let (mut seq, mut now) = (0u64, 0u64);
            for _ in 0..20_000 {
                for _ in 0..rng.gen_range(0..4) {
                    let ahead = |rng: &mut StdRng, r: std::ops::Range<u64>| {
                        now.saturating_add(rng.gen_range(r))
                    };
                    let at = match rng.gen_range(0..200) {
                        0..20 => now,
                        20..40 => now.saturating_sub(rng.gen_range(0..5_000)),
                        40..60 => ahead(&mut rng, SPAN - 2 * SLOT_MS..SPAN + 2 * SLOT_MS),
                        60..80 => ahead(&mut rng, 0..10 * SPAN),
                        80..100 => ahead(&mut rng, 0..4),
                        100..120 => ahead(&mut rng, 0..2 * SLOT_MS),
                        // A time saturated at the end of the clock (`now + gap` in the world).
                        120 => u64::MAX - rng.gen_range(0..200),
                        _ => ahead(&mut rng, 0..30_000),
                    };
                    agenda.push(at, seq);
                    heap.push(Reverse((at, seq)));
                    seq += 1;
                }
                let got = agenda.pop();
                assert_eq!(got, heap.pop().map(|Reverse(p)| p), "seed {seed}");
                if let Some((at, _)) = got {
                    now = now.max(at);
                }
            }
            while let Some(Reverse(want)) = heap.pop() {
                assert_eq!(agenda.pop(), Some(want), "seed {seed}, draining");
            }
            assert_eq!(agenda.pop(), None);
        }
    }
}
