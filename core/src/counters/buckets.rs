//! Active users, counted exactly with no per-user state: per-bucket admissions, move counting,
//! and replay guards.
//!
//! Time is cut into buckets ("minutes"). A ring of `session_duration + 3` slots holds, per
//! bucket:
//! - `admitted[b]`: admissions booked to bucket `b`. Every admission takes a slot from the
//!   room's pool and is then booked here (see `admission::decide` for which bucket);
//! - `moved[b]`: visitors moved into `b` minus visitors moved out of it, plus visitors counted
//!   afresh in `b` (tickets from another incarnation of the counters, after a restart);
//! - a guard: a set of ticket-id fingerprints that makes every count happen once per ticket.
//!
//! A visitor is counted once, in the bucket of its last check-in: a new admission books it in
//! the current bucket, and its first request in a later bucket *moves* it (one more in the new
//! bucket, one less in the old one; the ticket is re-issued naming the new bucket). Active
//! users = `sum over the session window of (admitted + moved)`; visitors drop out when their
//! bucket leaves the window.
//!
//! Why not distinct counting (a HyperLogLog per bucket)? It is replay-proof by construction, but
//! two visitors in one register are indistinguishable, so at a few hundred visitors it already
//! undercounts by one or two, and the room overshoots its limit by as much; at 10^4 its error
//! is about 1 %. Move counting is exact for every honest client.
//!
//! The guard holds three kinds of keys, each inserted with an insert-if-absent that exactly one
//! of several concurrent requests wins (see `fingerprint_set`):
//! - *moved out* of bucket `b`: a client that ignores Set-Cookie and replays a ticket counted in
//!   `b` would otherwise move itself again on every request, draining `b` and inflating the
//!   current bucket;
//! - *admitted from the queue* in `b`: a queued ticket admits once;
//! - *counted afresh* in `b`: a ticket the counters did not count (another incarnation) is
//!   counted once, and its replays find where it was counted and move it from there, or not at
//!   all if it already moved on.
//!
//! Each key is a 32-bit fingerprint; a false positive needs another id with the same fingerprint
//! among the few entries probed (about 1 in 10^9). Every key in a bucket's guard belongs to a
//! visitor counted in that bucket at some point (at most two keys each), and while the room
//! keeps its limit a bucket counts at most `total_active_users` visitors, so the guard (four
//! lanes per possible visitor) is at most half full. Two cases can fill it: a `passthrough`
//! room (it admits everyone; its guards are sized by `total_active_users` all the same) and a
//! room holding a roomful too many after a restart. A full guard reports every key as new
//! (`fingerprint_set`): replays then count again, which makes the room look fuller than it is
//! (fewer admissions, never more), and a queued ticket can admit again (each admission still
//! takes a slot: the limit holds, one ticket's fairness does not).
//!
//! Memory orders: a move adds to the new bucket (`Relaxed`) *before* it subtracts from the old
//! one (`Release`), and `tick` reads buckets oldest first (`Acquire`): a tick that sees the
//! subtraction also sees the addition, so a move in flight can make the sum one too high, never
//! one too low. Each slot has a tag (its bucket plus one; zero = empty). Only `tick` clears and
//! re-tags a slot, always one that holds no bucket of the session window, so counts in the
//! window are never cleared under a writer.

use crate::counters::fingerprint_set::{contains, fingerprint, insert_if_absent};
use crate::sync::{AtomicI64, AtomicU64, Ordering};

/// How a renewal went.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Renewal {
    /// Moved from the old bucket to the new one.
    Moved,
    /// This ticket already moved out of its bucket (a sibling request, or a replay): nothing
    /// changed.
    AlreadyMoved,
    /// Counted afresh in the new bucket (the ticket's holder was not counted here before).
    Counted,
    /// Counted afresh earlier by a sibling request or a replay: nothing changed.
    AlreadyCounted,
    /// The old bucket is not tracked: the caller should count the ticket afresh.
    Untracked,
    /// The new bucket is not prepared yet (tick is late): nothing changed.
    NotReady,
}

/// A view over the ring of one room.
pub(crate) struct Buckets<'a> {
    tags: &'a [AtomicU64],
    admitted: &'a [AtomicU64],
    moved: &'a [AtomicI64],
    guard: &'a [AtomicU64],
    words: usize,
}

/// Guard words per bucket for a room of `total_active_users` (at most 2^20, the largest room
/// the configuration allows): a power of two, two words (four lanes) per possible visitor.
pub(crate) fn guard_words(total_active_users: u64) -> usize {
    (total_active_users.clamp(16, 1 << 20) as usize).next_power_of_two() * 2
}

/// Salt that keeps "admitted from the queue" keys apart from "moved out" keys in a guard.
const FROM_QUEUE: u64 = 0x51_7c_c1_b7_27_22_0a_95;
/// Salt of "counted afresh" keys.
const AFRESH: u64 = 0x2f_c9_03_5e_a1_64_d8_3b;

/// Sums over a range of buckets.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct WindowSums {
    /// Admissions booked to the buckets.
    pub(crate) admitted: u64,
    /// Moves in minus moves out plus afresh counts.
    pub(crate) moved: i64,
}

impl<'a> Buckets<'a> {
    /// Wraps a ring of `tags.len()` buckets with `words` guard words each.
    pub(crate) fn new(
        tags: &'a [AtomicU64],
        admitted: &'a [AtomicU64],
        moved: &'a [AtomicI64],
        guard: &'a [AtomicU64],
        words: usize,
    ) -> Self {
        debug_assert_eq!(tags.len(), admitted.len());
        debug_assert_eq!(tags.len(), moved.len());
        debug_assert_eq!(guard.len(), tags.len() * words);
        debug_assert!(words.is_power_of_two());
        Self {
            tags,
            admitted,
            moved,
            guard,
            words,
        }
    }

    /// The slot of `bucket`, if it is prepared for it.
    #[inline]
    fn slot(&self, bucket: u64) -> Option<usize> {
        let slot = (bucket % self.tags.len() as u64) as usize;
        (self.tags[slot].load(Ordering::Acquire) == bucket + 1).then_some(slot)
    }

    fn guard_of(&self, slot: usize) -> &[AtomicU64] {
        &self.guard[slot * self.words..(slot + 1) * self.words]
    }

    /// Books one admission to `bucket`. False if the bucket is not prepared.
    #[inline]
    pub(crate) fn book_admission(&self, bucket: u64) -> bool {
        match self.slot(bucket) {
            Some(s) => {
                self.admitted[s].fetch_add(1, Ordering::Release);
                true
            }
            None => false,
        }
    }

    /// Moves ticket `id` from bucket `from` (where its ticket says it was counted) to `to`
    /// (`from < to`).
    #[inline]
    pub(crate) fn renew(&self, id: u64, from: u64, to: u64) -> Renewal {
        debug_assert!(from < to);
        let Some(to_slot) = self.slot(to) else {
            return Renewal::NotReady;
        };
        let Some(from_slot) = self.slot(from) else {
            return Renewal::Untracked;
        };
        self.move_once(id, from_slot, to_slot)
    }

    fn move_once(&self, id: u64, from_slot: usize, to_slot: usize) -> Renewal {
        let (start, fp) = fingerprint(id, self.words);
        if !insert_if_absent(self.guard_of(from_slot), start, fp) {
            return Renewal::AlreadyMoved;
        }
        self.moved[to_slot].fetch_add(1, Ordering::Relaxed);
        self.moved[from_slot].fetch_sub(1, Ordering::Release);
        Renewal::Moved
    }

    /// Counts one visitor counted in `bucket` out of it (its session was revoked): one less
    /// in the bucket, as a move out would. False if the bucket is not tracked (nothing to
    /// count out). The caller makes sure it happens once per visitor (see `revocations`).
    pub(crate) fn count_out(&self, bucket: u64) -> bool {
        match self.slot(bucket) {
            Some(s) => {
                self.moved[s].fetch_sub(1, Ordering::Release);
                true
            }
            None => false,
        }
    }

    /// Counts ticket `id` in bucket `to` although the counters did not count it (a ticket of
    /// another incarnation, or one whose bucket is no longer tracked), once: if it was counted
    /// afresh in an earlier bucket of `first..to`, it is moved from there (or not at all if it
    /// already moved on). When it is counted: with `claimed` (the caller took a slot of the
    /// room's pool for it) the visitor is booked as an admission, the seat it holds no longer
    /// free for anyone else; without, it is counted as a move in (the room holds one more than
    /// the pool knew of until the next tick). A caller that claimed gives its slot back unless
    /// the answer is `Counted`.
    pub(crate) fn count_afresh(&self, id: u64, first: u64, to: u64, claimed: bool) -> Renewal {
        let Some(to_slot) = self.slot(to) else {
            return Renewal::NotReady;
        };
        let (start, fp) = fingerprint(id ^ AFRESH, self.words);
        for b in first..to {
            if let Some(s) = self.slot(b) {
                if contains(self.guard_of(s), start, fp) {
                    return self.move_once(id, s, to_slot);
                }
            }
        }
        if !insert_if_absent(self.guard_of(to_slot), start, fp) {
            return Renewal::AlreadyCounted;
        }
        if claimed {
            self.admitted[to_slot].fetch_add(1, Ordering::Release);
        } else {
            self.moved[to_slot].fetch_add(1, Ordering::Release);
        }
        Renewal::Counted
    }

    /// The first of buckets `first..=last` in which ticket `id` was counted afresh (see
    /// [`Buckets::count_afresh`]), if any.
    pub(crate) fn counted_afresh(&self, id: u64, first: u64, last: u64) -> Option<u64> {
        let (start, fp) = fingerprint(id ^ AFRESH, self.words);
        (first..=last).find(|&b| {
            self.slot(b)
                .is_some_and(|s| contains(self.guard_of(s), start, fp))
        })
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

    /// Makes the slot of `bucket` empty and tagged for it, unless it already is. Returns the
    /// admissions booked to the bucket the slot held before (zero if none), for the caller to
    /// keep in its running total. `tick` only, and only for buckets after the session window.
    pub(crate) fn prepare(&self, bucket: u64) -> u64 {
        let slot = (bucket % self.tags.len() as u64) as usize;
        let tag = self.tags[slot].load(Ordering::Acquire);
        if tag == bucket + 1 {
            return 0;
        }
        self.tags[slot].store(0, Ordering::Release);
        // A slot never used holds zero; one whose preparation was cut short (its process died)
        // holds the admissions of the bucket it held before, which are as old as any recycled.
        let folded = self.admitted[slot].swap(0, Ordering::AcqRel);
        self.moved[slot].store(0, Ordering::Relaxed);
        for w in self.guard_of(slot) {
            w.store(0, Ordering::Relaxed);
        }
        self.tags[slot].store(bucket + 1, Ordering::Release);
        folded
    }

    /// Sums of buckets `first..=last`, oldest first (untracked buckets count zero).
    pub(crate) fn sums(&self, first: u64, last: u64) -> WindowSums {
        let mut sums = WindowSums::default();
        for b in first..=last {
            if let Some(s) = self.slot(b) {
                sums.moved += self.moved[s].load(Ordering::Acquire);
                sums.admitted += self.admitted[s].load(Ordering::Acquire);
            }
        }
        sums
    }

    /// Admissions booked to every tracked bucket before `before`, and to every tracked bucket.
    pub(crate) fn admitted_before_and_all(&self, before: u64) -> (u64, u64) {
        let (mut old, mut all) = (0, 0);
        for (tag, admitted) in self.tags.iter().zip(self.admitted) {
            let tag = tag.load(Ordering::Acquire);
            if tag != 0 {
                let n = admitted.load(Ordering::Acquire);
                all += n;
                if tag - 1 < before {
                    old += n;
                }
            }
        }
        (old, all)
    }

    /// Admissions booked to `bucket` (zero if it is not tracked).
    pub(crate) fn admitted_in(&self, bucket: u64) -> u64 {
        self.slot(bucket)
            .map_or(0, |s| self.admitted[s].load(Ordering::Acquire))
    }
}

#[cfg(all(test, not(velvet_rope_loom)))]
mod tests {
    use super::*;
    use crate::hash::mix64;

    pub(crate) struct Ring {
        tags: Vec<AtomicU64>,
        admitted: Vec<AtomicU64>,
        moved: Vec<AtomicI64>,
        guard: Vec<AtomicU64>,
        words: usize,
    }

    impl Ring {
        fn new(slots: usize, words: usize) -> Self {
            Self {
                tags: (0..slots).map(|_| AtomicU64::new(0)).collect(),
                admitted: (0..slots).map(|_| AtomicU64::new(0)).collect(),
                moved: (0..slots).map(|_| AtomicI64::new(0)).collect(),
                guard: (0..slots * words).map(|_| AtomicU64::new(0)).collect(),
                words,
            }
        }
        fn view(&self) -> Buckets<'_> {
            Buckets::new(
                &self.tags,
                &self.admitted,
                &self.moved,
                &self.guard,
                self.words,
            )
        }
    }

    fn active(a: &Buckets<'_>, first: u64, last: u64) -> i64 {
        let s = a.sums(first, last);
        s.admitted as i64 + s.moved
    }

    #[test]
    fn moves_keep_one_count_per_visitor() {
        let r = Ring::new(8, 16);
        let a = r.view();
        for b in 0..3 {
            a.prepare(b);
        }
        assert!(a.book_admission(0));
        assert!(a.book_admission(0));
        assert_eq!(a.renew(1, 0, 1), Renewal::Moved);
        assert_eq!(a.renew(1, 1, 2), Renewal::Moved);
        assert_eq!(active(&a, 0, 2), 2);
        assert_eq!(active(&a, 2, 2), 1);
        assert_eq!(active(&a, 0, 0), 1);
    }

    #[test]
    fn replays_and_siblings_move_once() {
        let r = Ring::new(8, 16);
        let a = r.view();
        a.prepare(0);
        a.prepare(1);
        a.book_admission(0);
        assert_eq!(a.renew(42, 0, 1), Renewal::Moved);
        for _ in 0..1000 {
            assert_eq!(a.renew(42, 0, 1), Renewal::AlreadyMoved);
        }
        assert_eq!(active(&a, 0, 1), 1);
    }

    #[test]
    fn untracked_or_unprepared_buckets() {
        let r = Ring::new(4, 16);
        let a = r.view();
        assert!(!a.book_admission(3));
        assert_eq!(a.renew(1, 2, 3), Renewal::NotReady);
        a.prepare(3);
        assert_eq!(a.renew(1, 2, 3), Renewal::Untracked);
        assert_eq!(active(&a, 0, 3), 0, "untracked changes nothing");
    }

    /// A ticket counted afresh (after a restart) counts once however often it is replayed, in
    /// the bucket it came in and in later ones; once its holder moved on with the re-issued
    /// ticket, the old one counts nothing.
    #[test]
    fn afresh_counts_once_per_ticket_across_buckets() {
        let r = Ring::new(8, 16);
        let a = r.view();
        for b in 0..4 {
            a.prepare(b);
        }
        assert_eq!(a.count_afresh(7, 0, 1, false), Renewal::Counted);
        for _ in 0..10 {
            assert_eq!(a.count_afresh(7, 0, 1, true), Renewal::AlreadyCounted);
        }
        assert_eq!(active(&a, 0, 3), 1);
        // The old ticket again in bucket 2: moved from 1, not counted twice.
        assert_eq!(a.count_afresh(7, 0, 2, true), Renewal::Moved);
        assert_eq!(a.count_afresh(7, 0, 3, true), Renewal::AlreadyMoved);
        assert_eq!(active(&a, 0, 3), 1);
        assert_eq!(active(&a, 2, 3), 1);
        // With a slot, a ticket counted afresh is booked as an admission.
        assert_eq!(a.count_afresh(8, 0, 3, true), Renewal::Counted);
        assert_eq!(a.admitted_in(3), 1);
        assert_eq!(active(&a, 0, 3), 2);
    }

    #[test]
    fn prepare_folds_the_bucket_it_recycles() {
        let r = Ring::new(3, 16);
        let a = r.view();
        a.prepare(0);
        a.book_admission(0);
        a.book_admission(0);
        assert_eq!(a.prepare(1), 0);
        assert_eq!(a.admitted_before_and_all(1), (2, 2));
        assert_eq!(a.prepare(3), 2, "bucket 3 takes bucket 0's slot");
        assert_eq!(a.admitted_in(3), 0);
        assert_eq!(a.admitted_before_and_all(5), (0, 0));
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
                a.book_admission(0);
                assert_eq!(a.renew(mix64(id), 0, 1), Renewal::Moved, "id {id}");
                assert!(a.mark_admitted_from_queue(mix64(id), 0));
            }
            for id in 0..total {
                assert_eq!(a.renew(mix64(id), 0, 1), Renewal::AlreadyMoved);
            }
            assert_eq!(a.sums(0, 0).moved, -(total as i64));
            assert_eq!(active(&a, 0, 1), total as i64);
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
