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
//! The guard holds four kinds of keys, each inserted with an insert-if-absent that exactly one
//! of several concurrent requests wins (see `fingerprint_set`):
//! - *moved out* of bucket `b`: a client that ignores Set-Cookie and replays a ticket counted in
//!   `b` would otherwise move itself again on every request, draining `b` and inflating the
//!   current bucket;
//! - *admitted from the queue* for `b`: a queued ticket admits once;
//! - *claimed afresh* for `b` and *counted afresh* in `b`: a ticket the counters did not count
//!   (another incarnation) is counted once, and its replays find where it was counted and move
//!   it from there, or not at all if it already moved on.
//!
//! "Admitted from the queue" and "claimed afresh" are claims (see [`Buckets::claim`]): two
//! requests with one ticket whose clocks read either side of a bucket's edge book to two
//! buckets, so a key in the booking bucket's guard alone would let both win. A claim for `b`
//! inserts its key in the guards of `b - 1` and then `b`: a claim for `b` and one for `b + 1`
//! both try `b`'s, and exactly one request wins.
//!
//! Each key is a 32-bit fingerprint; a false positive needs another id with the same fingerprint
//! among the few entries probed (about 1 in 10^9 in a half-full guard, 1 in 10^8 at three
//! quarters). A bucket's guard holds the keys of the visitors counted in it (moved out, and
//! either admitted from the queue, or claimed and counted afresh: at most three each) and the
//! first key of each claim for the bucket after it. While the room keeps its limit a bucket
//! counts at most `total_active_users` visitors, so the guard (four lanes per possible
//! visitor) is at most about three quarters full (half when nobody is counted afresh). Three
//! cases can fill it: a `passthrough` room (it admits everyone; its guards are sized by
//! `total_active_users` all the same), a room holding a roomful too many after a restart, and
//! a roomful counted afresh in one bucket followed by another roomful claimed in the next. A
//! full guard reports every key as new (`fingerprint_set`): replays then count again, which
//! makes the room look fuller than it is (fewer admissions, never more), and a queued ticket
//! can admit again (each admission still takes a slot: the limit holds, one ticket's fairness
//! does not); claims meeting in a full guard each win, each counting where it claimed.
//!
//! Memory orders: a move adds to the new bucket (`Relaxed`) *before* it subtracts from the old
//! one (`Release`), and `tick` reads buckets oldest first (`Acquire`): a tick that sees the
//! subtraction also sees the addition, so a move in flight can make the sum one too high, never
//! one too low. Each slot has a tag (its bucket plus one; zero = empty). Only `tick` clears and
//! re-tags a slot, always one that holds no bucket of the session window, so counts in the
//! window are never cleared under a writer.

use crate::counters::fingerprint_set::{
    contains, find, fingerprint, insert, insert_if_absent, Insert,
};
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
    /// Being counted afresh at once by a sibling request (this one lost the claim): nothing
    /// changed here. The sibling counts it in this bucket (the lowest it can be in, see
    /// [`Claim::Taken`]).
    TakenFor(u64),
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
/// Salt of "claimed afresh" keys.
const AFRESH_CLAIM: u64 = 0xc4_1d_6a_93_0b_7e_f2_58;

/// How a claim went (see [`Buckets::claim`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Claim {
    /// This request claimed the ticket: it counts it, in the bucket it claimed for.
    Won,
    /// Another request with the same ticket claimed it, at once or earlier. Of two claims at
    /// once (for one bucket, or for two beside each other) the loser names the winner's
    /// bucket; of more, a bucket no later than the winner's. (A ticket naming an earlier
    /// bucket than the one its visitor was counted in makes the room look one fuller until
    /// that bucket ends: fewer admissions, never more.)
    Taken(u64),
    /// The bucket is not prepared.
    NotReady,
}

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
    ///
    /// Of several requests at once with one ticket, for one bucket or two beside each other,
    /// one counts it; the others answer `TakenFor` the bucket it is counted in. The count is
    /// made before it is recorded as counted afresh, so a request that finds the record (and
    /// moves the visitor from there) never moves a count that is not there yet.
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
        if contains(self.guard_of(to_slot), start, fp) {
            return Renewal::AlreadyCounted;
        }
        match self.claim(id ^ AFRESH_CLAIM, to) {
            Claim::Won => {}
            Claim::Taken(b) => return Renewal::TakenFor(b),
            Claim::NotReady => return Renewal::NotReady,
        }
        if claimed {
            self.admitted[to_slot].fetch_add(1, Ordering::Release);
        } else {
            self.moved[to_slot].fetch_add(1, Ordering::Release);
        }
        insert_if_absent(self.guard_of(to_slot), start, fp);
        Renewal::Counted
    }

    /// Claims `key` for bucket `bucket`, once: inserts it in the guard of `bucket - 1` (when
    /// that bucket is tracked) and then in `bucket`'s, and wins if it inserted both.
    ///
    /// Of claims at once for `b` and `b + 1`, all try `b`'s guard, and exactly one inserts
    /// there: a claim for `b + 1` that does goes on alone to `b + 1`'s guard (any other claim
    /// for `b + 1` tries `b` first); one for `b` that does got there first through `b - 1`'s.
    /// So a loser can tell where the winner counts:
    /// - it lost in `bucket`'s guard, after inserting in `b - 1`'s: no other claim for `bucket`
    ///   got past `b - 1`, so a claim for `bucket + 1` won;
    /// - it lost in `bucket - 1`'s guard: to a claim for `bucket - 1` (which inserted in
    ///   `bucket - 2`'s guard first) or to one for `bucket` (which won, or lost to one for
    ///   `bucket + 1`): `bucket - 1` if the key is in `bucket - 2`'s guard (or that bucket is not
    ///   tracked, or its guard is too full to tell), else `bucket`.
    ///
    /// A guard too full to take the key orders nothing: a claim that finds `bucket - 1`'s full
    /// goes on as if that bucket were not tracked (and a loser then names `bucket`, no later
    /// than the winner's), and one that finds `bucket`'s full wins, as a full guard's insert
    /// does (see the module documentation). With three claims or more at once for two
    /// buckets, a loser names a bucket no later than the winner's. Claims at once for buckets
    /// further apart (clocks of one visitor's requests more than a bucket apart) share no
    /// key: each may win.
    pub(crate) fn claim(&self, key: u64, bucket: u64) -> Claim {
        let Some(slot) = self.slot(bucket) else {
            return Claim::NotReady;
        };
        let (start, fp) = fingerprint(key, self.words);
        // Whether this claim went through the guard below (a full one orders nothing: the
        // claim then stands on its own bucket's, as with no bucket below).
        let mut through_below = false;
        if let Some(below) = bucket.checked_sub(1).and_then(|b| self.slot(b)) {
            match insert(self.guard_of(below), start, fp) {
                Insert::Inserted => through_below = true,
                Insert::Full => {}
                Insert::Present => {
                    // A claim for the bucket below went through `bucket - 2`'s guard first.
                    // Not tracked, or full: it may have.
                    let by_a_claim_below = bucket
                        .checked_sub(2)
                        .and_then(|b| self.slot(b))
                        .map_or(true, |s| find(self.guard_of(s), start, fp) != Some(false));
                    return Claim::Taken(if by_a_claim_below { bucket - 1 } else { bucket });
                }
            }
        }
        match insert(self.guard_of(slot), start, fp) {
            // (Full: it cannot tell, and errs as a full guard does: see the module docs.)
            Insert::Inserted | Insert::Full => Claim::Won,
            Insert::Present if through_below => Claim::Taken(bucket + 1),
            // Not ordered below: a claim for this bucket or the next won.
            Insert::Present => Claim::Taken(bucket),
        }
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

    /// [`Buckets::counted_afresh`] for freeing the seat (a revocation): the bucket must hold
    /// both of the count's records, the claim's and the count's (two fingerprints, so that a
    /// false match, which would free a seat nobody holds, needs two at once).
    pub(crate) fn counted_afresh_surely(&self, id: u64, first: u64, last: u64) -> Option<u64> {
        let b = self.counted_afresh(id, first, last)?;
        let (start, fp) = fingerprint(id ^ AFRESH_CLAIM, self.words);
        self.slot(b)
            .is_some_and(|s| contains(self.guard_of(s), start, fp))
            .then_some(b)
    }

    /// Whether ticket `id` was admitted from the queue in any of buckets `first..=last`.
    pub(crate) fn admitted_from_queue(&self, id: u64, first: u64, last: u64) -> bool {
        let (start, fp) = fingerprint(id ^ FROM_QUEUE, self.words);
        (first..=last)
            .filter_map(|b| self.slot(b))
            .any(|s| contains(self.guard_of(s), start, fp))
    }

    /// Claims the admission from the queue of ticket `id`, to be booked to `bucket` (see
    /// [`Buckets::claim`]): `Won` once per ticket, whichever buckets requests at once book to.
    pub(crate) fn claim_from_queue(&self, id: u64, bucket: u64) -> Claim {
        self.claim(id ^ FROM_QUEUE, bucket)
    }

    /// Makes the slot of `bucket` empty and tagged for it, unless it already is. Returns the
    /// admissions booked to the bucket the slot held before (zero if none), for the caller to
    /// keep in its running total. `tick` only, and only for buckets after the session window
    /// (or, through [`Buckets::prepare_unused`], slots holding no bucket).
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

    /// [`Buckets::prepare`] for a slot the ring never tagged (or whose preparation was cut
    /// short); zero, and nothing done, for any other.
    pub(crate) fn prepare_unused(&self, bucket: u64) -> u64 {
        let slot = (bucket % self.tags.len() as u64) as usize;
        if self.tags[slot].load(Ordering::Acquire) == 0 {
            self.prepare(bucket)
        } else {
            0
        }
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

    /// A revocation frees the seat a count afresh took only where both of the count's
    /// records are (review: one fingerprint alone, matched falsely, would free a seat nobody
    /// holds), and after the visitor moved on, from the bucket it was counted afresh in.
    #[test]
    fn a_count_afresh_is_found_surely_by_its_two_records() {
        let r = Ring::new(8, 16);
        let a = r.view();
        for b in 0..4 {
            a.prepare(b);
        }
        assert_eq!(a.count_afresh(7, 0, 1, false), Renewal::Counted);
        assert_eq!(a.counted_afresh_surely(7, 0, 3), Some(1));
        assert_eq!(a.renew(7, 1, 2), Renewal::Moved);
        assert_eq!(
            a.counted_afresh_surely(7, 0, 3),
            Some(1),
            "found where it was counted"
        );
        assert!(a.count_out(1));
        assert_eq!(
            active(&a, 0, 3),
            0,
            "the visitor counts no more while both buckets do"
        );
        // The count's own record alone (as a false match would look): not sure, nothing.
        let (start, fp) = fingerprint(9 ^ AFRESH, a.words);
        insert_if_absent(a.guard_of(a.slot(2).unwrap()), start, fp);
        assert_eq!(a.counted_afresh(9, 0, 3), Some(2));
        assert_eq!(a.counted_afresh_surely(9, 0, 3), None);
        assert_eq!(a.counted_afresh_surely(8, 0, 3), None, "never counted");
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

    /// Claims made one after another: the first wins; a later one for the same bucket or the
    /// bucket beside it names the winner's bucket, whichever order they come in.
    #[test]
    fn a_claims_loser_names_the_winners_bucket() {
        for (first, second) in [(3, 3), (3, 4), (4, 3)] {
            let r = Ring::new(8, 16);
            let a = r.view();
            for b in 0..6 {
                a.prepare(b);
            }
            assert_eq!(a.claim(9, first), Claim::Won);
            assert_eq!(
                a.claim(9, second),
                Claim::Taken(first),
                "{first} then {second}"
            );
            // A third (the loser's key below may mislead it): never later than the winner's.
            assert!(matches!(a.claim(9, first), Claim::Taken(b) if b <= first));
        }
    }

    /// Three claims for two buckets beside each other, in every order: one wins, and no
    /// loser names a bucket later than the winner's (a ticket naming a later bucket than its
    /// count would make the room look one emptier when the count's bucket ends).
    #[test]
    fn with_three_claims_a_loser_never_names_a_later_bucket() {
        for order in 0..8u64 {
            let buckets: Vec<u64> = (0..3).map(|i| 3 + (order >> i & 1)).collect();
            let r = Ring::new(8, 16);
            let a = r.view();
            for b in 0..6 {
                a.prepare(b);
            }
            let answers: Vec<_> = buckets.iter().map(|&b| a.claim(5, b)).collect();
            assert_eq!(answers[0], Claim::Won, "{buckets:?}: {answers:?}");
            for c in &answers[1..] {
                assert!(
                    matches!(c, Claim::Taken(b) if *b <= buckets[0]),
                    "{buckets:?}: {answers:?}"
                );
            }
        }
    }

    /// A guard too full to take a key (a roomful too many after a restart) must not make a
    /// loser name a bucket later than the winner's: a full guard below orders nothing.
    #[test]
    fn a_full_guard_never_makes_a_loser_name_a_later_bucket() {
        let r = Ring::new(8, 16);
        let a = r.view();
        for b in 0..6 {
            a.prepare(b);
        }
        // Fill bucket 2's guard with moved-out keys.
        for id in 0..64 {
            a.renew(mix64(id), 2, 3);
        }
        assert_eq!(a.claim(9, 3), Claim::Won);
        assert!(
            matches!(a.claim(9, 3), Claim::Taken(b) if b <= 3),
            "same bucket"
        );
        assert!(
            matches!(a.claim(9, 4), Claim::Taken(b) if b <= 3),
            "the next bucket"
        );
        // Claims for buckets 2 and 3 meeting in a full bucket 2's guard cannot be ordered:
        // both win, and each counts where it claimed (one seat too many, never one too few).
        assert_eq!(a.claim(10, 2), Claim::Won);
        assert_eq!(a.claim(10, 3), Claim::Won);
    }

    /// Without the bucket below tracked (a new ring), a claim stands on its own bucket and
    /// its losers name no later bucket than the winner's.
    #[test]
    fn claims_without_the_buckets_below() {
        let r = Ring::new(8, 16);
        let a = r.view();
        a.prepare(0);
        a.prepare(1);
        assert_eq!(a.claim(9, 0), Claim::Won);
        assert_eq!(a.claim(9, 0), Claim::Taken(0));
        assert_eq!(a.claim(9, 1), Claim::Taken(0));
        assert_eq!(a.claim(10, 1), Claim::Won);
        assert_eq!(a.claim(10, 0), Claim::Taken(0), "named early: safe");
        assert_eq!(a.claim(11, 2), Claim::NotReady);
    }

    /// Two threads claim every id at once, one for bucket 3 and one for bucket 4 (a barrier
    /// per id): exactly one wins each, and the other names the winner's bucket.
    #[test]
    fn claims_across_an_edge_at_once_are_exact() {
        let r = Ring::new(8, guard_words(4096));
        let a = r.view();
        for b in 0..6 {
            a.prepare(b);
        }
        let barrier = std::sync::Barrier::new(2);
        let run = |bucket: u64| {
            (0..4000u64)
                .map(|id| {
                    barrier.wait();
                    a.claim(mix64(id), bucket)
                })
                .collect::<Vec<_>>()
        };
        let (low, high) = std::thread::scope(|s| {
            let low = s.spawn(|| run(3));
            let high = s.spawn(|| run(4));
            (low.join().unwrap(), high.join().unwrap())
        });
        for (id, (l, h)) in low.iter().zip(&high).enumerate() {
            match (l, h) {
                (Claim::Won, Claim::Taken(3)) | (Claim::Taken(4), Claim::Won) => {}
                other => panic!("id {id}: {other:?}"),
            }
        }
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
                assert_eq!(a.claim_from_queue(mix64(id), 0), Claim::Won);
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
