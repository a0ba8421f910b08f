//! Active users, counted exactly with no per-user state: move counting with a replay guard.
//!
//! Time is cut into buckets ("minutes"). `counts[b]` is the number of admitted visitors whose
//! ticket says they were last counted in bucket `b`; active users are the sum over the session
//! window. A new admission adds one to the current bucket. A visitor's first request in a new
//! bucket *moves* it: one less in the bucket its ticket names, one more in the current one, and
//! the ticket is re-issued. Honest visitors are thus counted exactly once, in the bucket of
//! their last check-in, and drop out of the count when that bucket leaves the window.
//!
//! Why not distinct counting (a HyperLogLog per bucket)? It is replay-proof by construction, but
//! two visitors in one register are indistinguishable, so at a few hundred visitors it already
//! undercounts by one or two, and the room overshoots its limit by as much; at 10^4 its error
//! is about 1 %. Move counting is exact for every honest client.
//!
//! The replay guard: a client that ignores Set-Cookie and replays a ticket counted in bucket
//! `c` would otherwise move itself again on every request, draining `c` and inflating the
//! current bucket. Each bucket therefore carries a set of the ticket ids that have moved *out*
//! of it: an open-addressing table of 32-bit fingerprints, two per `AtomicU64` word, probed
//! linearly. Entries are only ever added (until `tick` clears the bucket), and every thread
//! probes the same words in the same order and claims a free lane with a compare-and-swap,
//! so of several requests carrying the same ticket (a replayer, or a browser's parallel
//! requests) exactly one inserts the fingerprint and moves; the others find it and change
//! nothing. A false positive needs another id with the same 32-bit fingerprint among the few
//! entries probed: about 1 in 10^9 moves. The table has one word (two lanes) per possible
//! visitor, so it is at most half full.
//!
//! Each ring slot has a tag (its bucket plus one; zero = empty). Only `tick` clears and
//! re-tags a slot, always the slot of the next bucket, so writers (current bucket, and buckets
//! of the window for the decrement and the filter) never race with a clear.

use crate::fingerprint_set::{contains, fingerprint, insert_if_absent};
use crate::sync::{AtomicI64, AtomicU64, Ordering};

/// How a renewal went.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Renewal {
    /// Moved from the old bucket to the new one.
    Moved,
    /// This ticket already moved out of its bucket (a sibling request, or a replay).
    AlreadyMoved,
    /// The old bucket is no longer tracked: counted afresh in the new one.
    Counted,
    /// The new bucket is not prepared yet (tick is late): nothing changed.
    NotReady,
}

/// A view over the ring of per-bucket counts and replay guards of one room.
pub(crate) struct ActiveCounts<'a> {
    tags: &'a [AtomicU64],
    counts: &'a [AtomicI64],
    guard: &'a [AtomicU64],
    words: usize,
}

/// Guard words per bucket for a room of `total_active_users` (at most 2^20, the largest room
/// the configuration allows): a power of two, two words (four lanes) per possible visitor,
/// since a bucket's guard holds both the visitors that moved out of it (at most the room) and
/// those admitted from the queue in it (at most the room again), and stays at most half full.
pub(crate) fn guard_words(total_active_users: u64) -> usize {
    (total_active_users.clamp(16, 1 << 20) as usize).next_power_of_two() * 2
}

/// Salt that keeps "admitted from the queue" keys apart from "moved out" keys in a guard.
const FROM_QUEUE: u64 = 0x51_7c_c1_b7_27_22_0a_95;

impl<'a> ActiveCounts<'a> {
    /// Wraps a ring of `tags.len()` buckets with `words` filter words each.
    pub(crate) fn new(
        tags: &'a [AtomicU64],
        counts: &'a [AtomicI64],
        guard: &'a [AtomicU64],
        words: usize,
    ) -> Self {
        debug_assert_eq!(tags.len(), counts.len());
        debug_assert_eq!(guard.len(), tags.len() * words);
        debug_assert!(words.is_power_of_two());
        Self {
            tags,
            counts,
            guard,
            words,
        }
    }

    #[inline]
    fn slot(&self, bucket: u64) -> Option<usize> {
        let slot = (bucket % self.tags.len() as u64) as usize;
        (self.tags[slot].load(Ordering::Acquire) == bucket + 1).then_some(slot)
    }

    /// Counts one new admission in `bucket`. False if the bucket is not prepared.
    #[inline]
    pub(crate) fn add(&self, bucket: u64) -> bool {
        match self.slot(bucket) {
            Some(s) => {
                self.counts[s].fetch_add(1, Ordering::Relaxed);
                true
            }
            None => false,
        }
    }

    /// Moves ticket `id` from bucket `from` (where its ticket says it was counted) to `to`.
    #[inline]
    pub(crate) fn renew(&self, id: u64, from: u64, to: u64) -> Renewal {
        let Some(to_slot) = self.slot(to) else {
            return Renewal::NotReady;
        };
        let Some(from_slot) = self.slot(from).filter(|_| from < to) else {
            self.counts[to_slot].fetch_add(1, Ordering::Relaxed);
            return Renewal::Counted;
        };
        let (start, fp) = fingerprint(id, self.words);
        if !insert_if_absent(self.guard_of(from_slot), start, fp) {
            return Renewal::AlreadyMoved;
        }
        self.counts[from_slot].fetch_sub(1, Ordering::Relaxed);
        self.counts[to_slot].fetch_add(1, Ordering::Relaxed);
        Renewal::Moved
    }

    fn guard_of(&self, slot: usize) -> &[AtomicU64] {
        &self.guard[slot * self.words..(slot + 1) * self.words]
    }

    /// Whether ticket `id` was admitted from the queue in any of buckets `first..=last`.
    pub(crate) fn admitted_from_queue(&self, id: u64, first: u64, last: u64) -> bool {
        let (start, fp) = fingerprint(id ^ FROM_QUEUE, self.words);
        (first..=last)
            .filter_map(|b| self.slot(b))
            .any(|s| contains(self.guard_of(s), start, fp))
    }

    /// Records that ticket `id` was admitted from the queue in `bucket`; false if it already
    /// was (a concurrent request with the same ticket) or the bucket is not prepared.
    pub(crate) fn mark_admitted_from_queue(&self, id: u64, bucket: u64) -> bool {
        let Some(s) = self.slot(bucket) else {
            return false;
        };
        let (start, fp) = fingerprint(id ^ FROM_QUEUE, self.words);
        insert_if_absent(self.guard_of(s), start, fp)
    }

    /// Makes the slot of `bucket` empty and tagged for it, unless it already is. `tick` only.
    pub(crate) fn prepare(&self, bucket: u64) {
        let slot = (bucket % self.tags.len() as u64) as usize;
        if self.tags[slot].load(Ordering::Acquire) == bucket + 1 {
            return;
        }
        self.tags[slot].store(0, Ordering::Release);
        self.counts[slot].store(0, Ordering::Relaxed);
        for w in &self.guard[slot * self.words..(slot + 1) * self.words] {
            w.store(0, Ordering::Relaxed);
        }
        self.tags[slot].store(bucket + 1, Ordering::Release);
    }

    /// Visitors counted in buckets `first..=last` (untracked buckets count zero; the sum is
    /// never negative).
    pub(crate) fn sum(&self, first: u64, last: u64) -> u64 {
        let total: i64 = (first..=last)
            .filter_map(|b| self.slot(b))
            .map(|s| self.counts[s].load(Ordering::Relaxed))
            .sum();
        total.max(0) as u64
    }
}

#[cfg(all(test, not(velvet_rope_loom)))]
mod tests {
    use super::*;
    use crate::hash::mix64;

    struct Ring {
        tags: Vec<AtomicU64>,
        counts: Vec<AtomicI64>,
        guard: Vec<AtomicU64>,
        words: usize,
    }

    impl Ring {
        fn new(slots: usize, words: usize) -> Self {
            Self {
                tags: (0..slots).map(|_| AtomicU64::new(0)).collect(),
                counts: (0..slots).map(|_| AtomicI64::new(0)).collect(),
                guard: (0..slots * words).map(|_| AtomicU64::new(0)).collect(),
                words,
            }
        }
        fn view(&self) -> ActiveCounts<'_> {
            ActiveCounts::new(&self.tags, &self.counts, &self.guard, self.words)
        }
    }

    #[test]
    fn moves_keep_one_count_per_visitor() {
        let r = Ring::new(8, 16);
        let a = r.view();
        for b in 0..3 {
            a.prepare(b);
        }
        assert!(a.add(0));
        assert!(a.add(0));
        assert_eq!(a.renew(1, 0, 1), Renewal::Moved);
        assert_eq!(a.renew(1, 1, 2), Renewal::Moved);
        assert_eq!(a.sum(0, 2), 2);
        assert_eq!(a.sum(2, 2), 1);
        assert_eq!(a.sum(0, 0), 1);
    }

    #[test]
    fn replays_and_siblings_move_once() {
        let r = Ring::new(8, 16);
        let a = r.view();
        a.prepare(0);
        a.prepare(1);
        a.add(0);
        assert_eq!(a.renew(42, 0, 1), Renewal::Moved);
        for _ in 0..1000 {
            assert_eq!(a.renew(42, 0, 1), Renewal::AlreadyMoved);
        }
        assert_eq!(a.sum(0, 1), 1);
    }

    #[test]
    fn untracked_or_unprepared_buckets() {
        let r = Ring::new(4, 16);
        let a = r.view();
        assert!(!a.add(3));
        assert_eq!(a.renew(1, 2, 3), Renewal::NotReady);
        a.prepare(3);
        assert_eq!(a.renew(1, 2, 3), Renewal::Counted);
        assert_eq!(a.sum(0, 3), 1);
    }

    /// The guard at its design load: `total_active_users` ids moved out of one bucket, then
    /// each inserted id is found again and fresh ids are not.
    #[test]
    fn guard_is_exact_at_design_load() {
        for total in [200u64, 10_000] {
            let words = guard_words(total);
            let r = Ring::new(2, words);
            let a = r.view();
            a.prepare(0);
            a.prepare(1);
            for id in 0..total {
                a.add(0);
                assert_eq!(a.renew(mix64(id), 0, 1), Renewal::Moved, "id {id}");
            }
            for id in 0..total {
                assert_eq!(a.renew(mix64(id), 0, 1), Renewal::AlreadyMoved);
            }
            assert_eq!(a.sum(0, 0), 0);
            assert_eq!(a.sum(1, 1), total);
            let fresh = (0..100_000u64)
                .filter(|i| {
                    let (start, fp) = fingerprint(mix64(i + (1 << 40)), words);
                    contains(&r.guard[..words], start, fp)
                })
                .count();
            assert_eq!(fresh, 0, "fresh ids taken for moved ones at {total}");
        }
    }
}
