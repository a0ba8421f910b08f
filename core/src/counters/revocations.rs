//! Revoked ticket ids, kept in fixed memory for as long as a revoked ticket could still be
//! presented (see `admission::revoke` for what a revocation does to the counts).
//!
//! Tickets carry no state the engine keeps, so refusing one means remembering its id. Ids are
//! kept as 32-bit fingerprints (see `fingerprint_set`) in one table per *generation* of
//! `span` buckets (the room's bucket ring: its longest session plus three), in a ring of five
//! tables, each tagged with its generation plus one:
//!
//! - a revocation is *filed* under the bucket that starts the session window of the bucket the
//!   room has opened (`opened - longest_session`, see `admission::revoke`): the room's clock,
//!   not the revoker's, so a revoker whose clock runs ahead or behind files where everyone
//!   looks. Every ticket of the id that can still be presented was counted in a bucket `c`
//!   from that bucket minus one (older ones have ended) to `opened + 3` (tickets are booked at
//!   most a bucket past the opened one; a renewal that read "not revoked" and stalled over a
//!   tick or two before it issued its ticket): the filing bucket lies in `c - span ..= c + 1`;
//! - a ticket counted in `c` (a queued ticket: the bucket it was last refreshed in; a ticket
//!   admitted uncounted: the bucket it is presented in), presented in bucket `b`, is looked up
//!   in the generations of `min(b, c) - span ..= max(b, c) + 1`, which hold that range: two
//!   generations, three at a boundary;
//! - the tables alive at any time are those of the generation filed into now, the two before
//!   it and the next one: the fifth is free, and is cleared and tagged by the first revocation
//!   of a new generation. A table tagged for another generation than the one filed into is
//!   cleared (a clock that jumped ahead tagged it, and the room was re-opened since).
//!
//! A table holds at most `words` revocations (two fingerprints per word: at most half full),
//! so a false "revoked" needs another id with the same fingerprint among the few entries
//! probed (about 1 in 10^9). A revocation past that is refused: the session goes on and ends
//! by itself, its seat still counted (never a freed seat whose ticket still works).
//!
//! Revocations are rare (an origin's command, not a request's path) and are made one at a time
//! under a lock in the region, so that one id is revoked once however many generations it
//! spans and however many processes revoke it at once; lookups take no lock. The revocations
//! made here are also appended to an outbox, a ring the cluster sync sends to the store from
//! (so that every host refuses the ticket); a revocation that would overwrite an entry not
//! yet sent is refused.

use crate::counters::fingerprint_set::{contains, fingerprint, insert_if_absent};
use crate::counters::process_lock::{Held, ProcessLock};
use crate::sync::{fence, AtomicU64, Ordering};

/// Tables in the ring of generations.
pub(crate) const GENERATIONS: usize = 5;

/// Words of the block's header.
pub(crate) const HEADER_WORDS: usize = 24;

/// Header cells.
#[derive(Clone, Copy)]
#[repr(usize)]
enum H {
    /// The revocation lock (see [`ProcessLock`]).
    Lock = 0,
    /// Tags of the tables (generation plus one; zero: never used), `GENERATIONS` words.
    Tags = 1,
    /// Entries of each table, `GENERATIONS` words.
    Counts = 6,
    /// Revocations ever appended to the outbox.
    Written = 11,
    /// Outbox entries the cluster sync has sent.
    Sent = 12,
    /// Revocations refused (a table or the outbox full, the lock held too long).
    Refused = 13,
    /// Revocations made here.
    Made = 14,
    /// Revocations received from other hosts.
    Received = 15,
    /// Where this host has read the store's log of revocations up to (two words: the
    /// store's position is a pair, see `velvet-rope-cluster`).
    Cursor = 16,
}

/// How long a revoker waits for the lock before it gives up (ms): the section it guards takes
/// microseconds (a millisecond to clear a table of a million words).
const LOCK_WAIT_MS: u64 = 20;

/// What a revocation did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Revoked {
    /// The id is revoked from now on; the caller frees the seat.
    Now,
    /// It already was (by another request, process or host): nothing changed.
    Already,
}

/// Why a revocation was refused (the session goes on; nothing changed).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RevokeRefused {
    /// The room keeps `max_revocations` revocations at once, and has that many.
    Full,
    /// Revocations not yet sent to the cluster's store fill the outbox (the store has been
    /// out of reach for a while).
    Unsent,
    /// Another process held the revocation lock too long (or took it over from this one).
    Busy,
}

impl RevokeRefused {
    /// A stable snake_case name, for logs and metrics.
    pub fn as_str(self) -> &'static str {
        match self {
            RevokeRefused::Full => "full",
            RevokeRefused::Unsent => "unsent",
            RevokeRefused::Busy => "busy",
        }
    }
}

/// Counts for the stats.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct RevocationCounts {
    /// Made here.
    pub(crate) made: u64,
    /// Received from other hosts.
    pub(crate) received: u64,
    /// Refused.
    pub(crate) refused: u64,
    /// Kept now (in the tables alive).
    pub(crate) kept: u64,
}

/// A view over one room's revocation block.
pub(crate) struct Revocations<'a> {
    header: &'a [AtomicU64],
    tables: &'a [AtomicU64],
    outbox: &'a [AtomicU64],
    words: usize,
    span: u64,
    private: bool,
}

impl<'a> Revocations<'a> {
    /// Wraps a block: `header` of [`HEADER_WORDS`], `tables` of `GENERATIONS * words`, an
    /// outbox of `words`; generations of `span` buckets. `private`: memory this process owns.
    pub(crate) fn new(
        header: &'a [AtomicU64],
        tables: &'a [AtomicU64],
        outbox: &'a [AtomicU64],
        span: u64,
        private: bool,
    ) -> Self {
        let words = outbox.len();
        debug_assert_eq!(header.len(), HEADER_WORDS);
        debug_assert_eq!(tables.len(), GENERATIONS * words);
        debug_assert!(words.is_power_of_two() && span > 0);
        Self {
            header,
            tables,
            outbox,
            words,
            span,
            private,
        }
    }

    fn cell(&self, h: H) -> &AtomicU64 {
        &self.header[h as usize]
    }

    fn tag(&self, i: usize) -> &AtomicU64 {
        &self.header[H::Tags as usize + i]
    }

    fn count(&self, i: usize) -> &AtomicU64 {
        &self.header[H::Counts as usize + i]
    }

    fn table(&self, i: usize) -> &[AtomicU64] {
        &self.tables[i * self.words..(i + 1) * self.words]
    }

    /// The table of generation `g`, if it is tagged for it.
    fn of(&self, g: u64) -> Option<&[AtomicU64]> {
        let i = (g % GENERATIONS as u64) as usize;
        (self.tag(i).load(Ordering::Acquire) == g + 1).then(|| self.table(i))
    }

    /// Whether ticket `id`, counted in bucket `counted` (0: not counted, looked up as of
    /// `bucket`), presented in bucket `bucket`, is revoked. No lock, no write; a table without
    /// entries is not probed.
    #[inline]
    pub(crate) fn is_revoked(&self, id: u64, counted: u64, bucket: u64) -> bool {
        let counted = if counted == 0 { bucket } else { counted };
        let lo = counted.min(bucket).saturating_sub(self.span) / self.span;
        let hi = (counted.max(bucket) + 1) / self.span;
        let (start, fp) = fingerprint(id, self.words);
        (lo..=hi.min(lo + 3)).any(|g| {
            let i = (g % GENERATIONS as u64) as usize;
            self.count(i).load(Ordering::Acquire) != 0
                && self.of(g).is_some_and(|t| contains(t, start, fp))
        })
    }

    /// Whether `id` is in any table alive at bucket `bucket`.
    fn kept(&self, id: u64, bucket: u64) -> bool {
        let g = bucket / self.span;
        let (start, fp) = fingerprint(id, self.words);
        (g.saturating_sub(2)..=g + 1).any(|g| self.of(g).is_some_and(|t| contains(t, start, fp)))
    }

    /// Whether `id` (its fingerprint `start`, `fp`) is in a table of any generation but `g`:
    /// after an insert into `g`'s table, behind a `SeqCst` fence, by a holder that may have
    /// been stopped and taken over. Of two holders that each inserted the id into a table of
    /// their own generation and then look, at least one finds the other's (both may): who
    /// finds it frees no seat (never twice, at worst not at all). An id found in a table
    /// older than [`Revocations::kept`] reads was revoked long enough ago that its tickets
    /// and counts are over: nothing to free either.
    fn kept_elsewhere(&self, g: u64, start: usize, fp: u64) -> bool {
        fence(Ordering::SeqCst);
        // Every table tagged for another generation (a holder stopped for longer than a
        // generation files under one further away than its neighbours).
        (0..GENERATIONS).any(|i| {
            let tag = self.tag(i).load(Ordering::Acquire);
            tag != 0 && tag != g + 1 && contains(self.table(i), start, fp)
        })
    }

    /// What a holder of the lock does with `id` once it found it kept nowhere, in generation
    /// `g` (whose table is tagged): records it there and looks in the others; whether it frees
    /// the seat (for the loom model of two holders, one stopped and taken over).
    #[cfg(velvet_rope_loom)]
    pub(crate) fn record_and_look(&self, id: u64, g: u64) -> bool {
        let (start, fp) = fingerprint(id, self.words);
        let table = self.of(g).expect("a tagged generation");
        insert_if_absent(table, start, fp) && !self.kept_elsewhere(g, start, fp)
    }

    /// Takes the revocation lock, waiting a bounded [`LOCK_WAIT_MS`].
    fn lock(&self) -> Option<Held<'a>> {
        let lock = if self.private {
            ProcessLock::private(&self.header[H::Lock as usize])
        } else {
            ProcessLock::new(&self.header[H::Lock as usize])
        };
        let deadline = std::time::Instant::now() + std::time::Duration::from_millis(LOCK_WAIT_MS);
        loop {
            if let Some(held) = lock.try_lock() {
                return Some(held);
            }
            if std::time::Instant::now() >= deadline {
                return None;
            }
            std::thread::yield_now();
        }
    }

    /// The table of generation `g`, cleared and tagged for it if it held another one (an
    /// older one, or a later one a clock that jumped ahead tagged). Under the lock, `held`.
    fn prepare(&self, g: u64, held: &Held<'_>) -> Result<usize, RevokeRefused> {
        let i = (g % GENERATIONS as u64) as usize;
        let tag = self.tag(i).load(Ordering::Acquire);
        if tag == g + 1 {
            return Ok(i);
        }
        // Nobody looks this table up any more (see the module documentation): it is cleared
        // under readers that would only find it untagged. A holder that was stopped and
        // taken over must not clear what its successor wrote.
        if !held.still_held() {
            return Err(RevokeRefused::Busy);
        }
        self.tag(i).store(0, Ordering::Release);
        self.count(i).store(0, Ordering::Release);
        for w in self.table(i) {
            w.store(0, Ordering::Relaxed);
        }
        if !held.still_held() {
            return Err(RevokeRefused::Busy);
        }
        self.tag(i).store(g + 1, Ordering::Release);
        Ok(i)
    }

    /// Revokes `id`, filed under bucket `bucket` (see the module documentation). With
    /// `outbox`, the revocation is also queued for the cluster's store.
    pub(crate) fn revoke(
        &self,
        id: u64,
        bucket: u64,
        outbox: bool,
    ) -> Result<Revoked, RevokeRefused> {
        let refused = |why| {
            self.cell(H::Refused).fetch_add(1, Ordering::Relaxed);
            Err(why)
        };
        let Some(held) = self.lock() else {
            return refused(RevokeRefused::Busy);
        };
        if self.kept(id, bucket) {
            return Ok(Revoked::Already);
        }
        let i = match self.prepare(bucket / self.span, &held) {
            Ok(i) => i,
            Err(why) => return refused(why),
        };
        if self.count(i).load(Ordering::Acquire) >= self.words as u64 {
            return refused(RevokeRefused::Full);
        }
        let written = self.cell(H::Written).load(Ordering::Acquire);
        let sent = self.cell(H::Sent).load(Ordering::Acquire);
        if outbox && written.saturating_sub(sent) >= self.words as u64 {
            return refused(RevokeRefused::Unsent);
        }
        // A holder stopped since it checked the tables (and taken over) might revoke twice.
        if !held.still_held() {
            return refused(RevokeRefused::Busy);
        }
        let (start, fp) = fingerprint(id, self.words);
        if !insert_if_absent(self.table(i), start, fp) {
            return Ok(Revoked::Already);
        }
        self.count(i).fetch_add(1, Ordering::Release);
        self.cell(H::Made).fetch_add(1, Ordering::Relaxed);
        // (A holder stopped here and taken over would write over its successor's entry: it
        // leaves its id unsent instead, refused here all the same.)
        if outbox && held.still_held() {
            self.outbox[(written % self.words as u64) as usize].store(id, Ordering::Relaxed);
            self.cell(H::Written).store(written + 1, Ordering::Release);
        }
        // Kept in another generation's table as well, by a holder stopped and taken over
        // meanwhile: its seat is that holder's to free, or nobody's.
        if self.kept_elsewhere(bucket / self.span, start, fp) {
            return Ok(Revoked::Already);
        }
        Ok(Revoked::Now)
    }

    /// Adds revocations another host made (from the cluster's store), filed under bucket
    /// `bucket`, calling `added_one` with each id once it is kept (the caller frees a seat this
    /// host counted for it: after the id is kept, so that a process that dies in between
    /// frees nothing rather than twice); nothing to send on. Ids already kept are skipped;
    /// those that do not fit are dropped and counted as refused. How many were added, or
    /// `None` when the lock could not be had (nothing added: the caller reads them again).
    pub(crate) fn receive(
        &self,
        ids: &[u64],
        bucket: u64,
        mut added_one: impl FnMut(u64),
    ) -> Option<usize> {
        if ids.is_empty() {
            return Some(0);
        }
        let held = self.lock()?;
        let g = bucket / self.span;
        let i = self.prepare(g, &held).ok()?;
        let mut added = 0;
        for &id in ids {
            if self.kept(id, bucket) {
                continue;
            }
            if self.count(i).load(Ordering::Acquire) >= self.words as u64 {
                self.cell(H::Refused).fetch_add(1, Ordering::Relaxed);
                continue;
            }
            // A holder stopped and taken over records no more: `None` leaves the cursor where
            // it was, and the next sync reads these ids again (those kept are skipped).
            if !held.still_held() {
                self.cell(H::Received)
                    .fetch_add(added as u64, Ordering::Relaxed);
                return None;
            }
            let (start, fp) = fingerprint(id, self.words);
            if insert_if_absent(self.table(i), start, fp) {
                self.count(i).fetch_add(1, Ordering::Release);
                added += 1;
                if !self.kept_elsewhere(g, start, fp) {
                    added_one(id);
                }
            }
        }
        self.cell(H::Received)
            .fetch_add(added as u64, Ordering::Relaxed);
        Some(added)
    }

    /// Revocations made here and not yet sent to the store, at most `limit` (the oldest):
    /// the outbox position after them and their ids, oldest first.
    pub(crate) fn unsent(&self, limit: usize) -> (u64, Vec<u64>) {
        let written = self.cell(H::Written).load(Ordering::Acquire);
        let sent = self.cell(H::Sent).load(Ordering::Acquire).min(written);
        let upto = written.min(sent.saturating_add(limit as u64));
        let ids = (sent..upto)
            .map(|n| self.outbox[(n % self.words as u64) as usize].load(Ordering::Relaxed))
            .collect();
        (upto, ids)
    }

    /// Records that the outbox up to position `upto` reached the store (never past what was
    /// written: a stale position changes nothing it should not).
    pub(crate) fn mark_sent(&self, upto: u64) {
        let written = self.cell(H::Written).load(Ordering::Acquire);
        self.cell(H::Sent)
            .fetch_max(upto.min(written), Ordering::AcqRel);
    }

    /// Where this host has read the store's log of revocations up to.
    pub(crate) fn cursor(&self) -> [u64; 2] {
        let c = H::Cursor as usize;
        [
            self.header[c].load(Ordering::Acquire),
            self.header[c + 1].load(Ordering::Acquire),
        ]
    }

    /// Records where this host has read the store's log up to (under the lock: two
    /// processes' syncs never interleave their two words).
    pub(crate) fn set_cursor(&self, cursor: [u64; 2]) -> bool {
        let Some(_held) = self.lock() else {
            return false;
        };
        let c = H::Cursor as usize;
        self.header[c].store(cursor[0], Ordering::Release);
        self.header[c + 1].store(cursor[1], Ordering::Release);
        true
    }

    /// Counts for the stats, the tables alive at bucket `bucket` included.
    pub(crate) fn counts(&self, bucket: u64) -> RevocationCounts {
        let g = bucket / self.span;
        let kept = (g.saturating_sub(2)..=g + 1)
            .filter(|&g| self.of(g).is_some())
            .map(|g| {
                self.count((g % GENERATIONS as u64) as usize)
                    .load(Ordering::Acquire)
            })
            .sum();
        RevocationCounts {
            made: self.cell(H::Made).load(Ordering::Relaxed),
            received: self.cell(H::Received).load(Ordering::Relaxed),
            refused: self.cell(H::Refused).load(Ordering::Relaxed),
            kept,
        }
    }
}

#[cfg(all(test, not(velvet_rope_loom)))]
mod tests {
    use super::*;

    struct Block {
        header: Vec<AtomicU64>,
        tables: Vec<AtomicU64>,
        outbox: Vec<AtomicU64>,
    }

    impl Block {
        fn new(words: usize) -> Self {
            let zeros = |n: usize| (0..n).map(|_| AtomicU64::new(0)).collect();
            Self {
                header: zeros(HEADER_WORDS),
                tables: zeros(GENERATIONS * words),
                outbox: zeros(words),
            }
        }
        fn view(&self, span: u64) -> Revocations<'_> {
            Revocations::new(&self.header, &self.tables, &self.outbox, span, true)
        }
    }

    #[test]
    fn revoked_once_and_found_for_the_ticket_lifetime() {
        let b = Block::new(16);
        let r = b.view(8);
        assert!(!r.is_revoked(7, 10, 10));
        assert_eq!(r.revoke(7, 10, false), Ok(Revoked::Now));
        assert_eq!(r.revoke(7, 12, false), Ok(Revoked::Already));
        // Into the next generation (16..24) too: still one revocation.
        assert_eq!(r.revoke(7, 17, false), Ok(Revoked::Already));
        // Every ticket that could still be presented is refused: counted up to a span before
        // the revocation (or a bucket after it: a clock ahead), presented from a bucket before
        // the revocation (a clock behind) to a span after its own bucket.
        for counted in 2..=11 {
            for bucket in counted.max(9)..=counted + 8 {
                assert!(r.is_revoked(7, counted, bucket), "{counted} at {bucket}");
            }
        }
        assert!(!r.is_revoked(8, 10, 10));
        assert_eq!(r.counts(10).made, 1);
    }

    /// A holder of the lock stopped between its look-up and its insert, and taken over: its
    /// successor files the id under the next generation and frees the seat; the stopped one,
    /// resuming, inserts into its own generation's table, finds the other's and frees
    /// nothing (review: the seat was freed twice). `revoke` looks the same way after its
    /// insert.
    #[test]
    fn an_id_kept_in_two_generations_frees_one_seat() {
        let b = Block::new(16);
        let r = b.view(8);
        // Generation 1 (buckets 8..16) tagged, as the stopped holder saw it.
        assert_eq!(r.receive(&[5], 15, |_| {}), Some(1));
        let mut freed = Vec::new();
        assert_eq!(r.receive(&[7], 16, |id| freed.push(id)), Some(1));
        assert_eq!(freed, [7], "the successor, in generation 2");
        // The stopped holder resumes: its insert into generation 1's table succeeds.
        let (start, fp) = fingerprint(7, r.words);
        assert!(insert_if_absent(r.of(1).unwrap(), start, fp));
        assert!(r.kept_elsewhere(1, start, fp), "so it frees nothing");
        let (start, fp) = fingerprint(9, r.words);
        assert!(!r.kept_elsewhere(2, start, fp), "an id kept nowhere else");
    }

    #[test]
    fn generations_recycle_and_full_tables_refuse() {
        let b = Block::new(4);
        let r = b.view(2);
        for id in 0..4 {
            assert_eq!(r.revoke(100 + id, 0, false), Ok(Revoked::Now));
        }
        assert_eq!(r.revoke(200, 1, false), Err(RevokeRefused::Full));
        assert_eq!(r.counts(0).refused, 1);
        // Five generations later the table of generation 0 is cleared for generation 5.
        assert_eq!(r.revoke(300, 10, false), Ok(Revoked::Now));
        assert!(!r.is_revoked(100, 0, 0), "generation 0 is gone");
        assert!(r.is_revoked(300, 10, 10));
        // A table tagged for a later generation (a clock that jumped ahead) is taken back.
        assert_eq!(r.revoke(400, 0, false), Ok(Revoked::Now));
        assert!(r.is_revoked(400, 1, 1));
    }

    #[test]
    fn outbox_holds_what_was_not_sent_and_refuses_past_it() {
        let b = Block::new(2);
        let r = b.view(100);
        assert_eq!(r.revoke(1, 0, true), Ok(Revoked::Now));
        assert_eq!(r.revoke(2, 0, true), Ok(Revoked::Now));
        assert_eq!(r.unsent(10), (2, vec![1, 2]));
        assert_eq!(r.unsent(1), (1, vec![1]));
        // A third would overwrite an unsent one; a receive does not go to the outbox.
        assert_eq!(r.revoke(3, 100, true), Err(RevokeRefused::Unsent));
        r.mark_sent(7);
        assert_eq!(
            r.unsent(10),
            (2, vec![]),
            "never marked past what was written"
        );
        assert_eq!(r.revoke(3, 100, true), Ok(Revoked::Now));
        assert_eq!(r.unsent(10), (3, vec![3]));
        assert_eq!(r.receive(&[3, 9], 100, |_| {}), Some(1));
        assert!(r.is_revoked(9, 100, 100));
        assert_eq!(r.counts(100).received, 1);
    }

    /// Many threads revoke overlapping ids at once: each id is revoked exactly once.
    #[test]
    fn concurrent_revokers_revoke_each_id_once() {
        let b = Block::new(1024);
        let r = b.view(4);
        let now = std::sync::atomic::AtomicU64::new(0);
        std::thread::scope(|s| {
            for t in 0..4u64 {
                let (r, now) = (&r, &now);
                s.spawn(move || {
                    for id in 0..400u64 {
                        if r.revoke(id, 6 + (id + t) % 4, false) == Ok(Revoked::Now) {
                            now.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                        }
                    }
                });
            }
        });
        assert_eq!(now.load(std::sync::atomic::Ordering::Relaxed), 400);
        assert_eq!(r.counts(8).made, 400);
    }
}
