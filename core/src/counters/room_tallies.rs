//! A room's running tallies for its metrics, shared by every process attached to its counters:
//! admissions by kind, the waiting and refusal decisions, and how long the waiters admitted
//! from the queue waited, against what they were promised.
//!
//! Only decisions off the steady path are counted: the request of a visitor already admitted
//! and counted writes no shared memory at all, and counting it would make it (a few
//! nanoseconds for an atomic add, and a cache line written by every thread of a shard). Its
//! admission is counted once, by kind, when it was made or renewed. A request a rule matched
//! is counted every time (a bypassed request is never decided: its count is all there is).
//!
//! Also the requests each rule matched and those a dry run let through, so that every process
//! reports the host's figures. A rule's count is found by its name and action (not its
//! place: processes running an older and a newer configuration at once, during a reload,
//! count the same rule together): a table of [`RULE_SLOTS`] keys after the shards gives each
//! (name, action) met over the region's life a slot, claimed once with a compare-and-swap.
//! Past that many, a rule is counted by each process on its own (see `Room::rule_tallies`).
//!
//! The tallies are sharded like the slot pools: each shard is a run of [`STRIDE`] words on
//! cache lines of its own, and a thread counts into its home shard (see `home_shard`), so
//! threads and processes counting at once rarely share a line. A reader sums the shards; each
//! word only grows, so a sum read while others count is a count at some moment between the
//! first word read and the last (never a lost or doubled event).

use crate::admission::decision::Outcome;
use crate::sync::{AtomicU64, Ordering};

/// What an admission was.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum AdmissionKind {
    /// A visitor without a (valid) ticket, let straight in.
    New = 0,
    /// A waiter let in from the queue.
    FromQueue = 1,
    /// An admitted visitor's session renewed into a later bucket.
    Renewed = 2,
    /// An admitted visitor these counters had not counted (a ticket of another incarnation: a
    /// restart without kept counters, counters laid out anew) counted afresh.
    Recounted = 3,
}

impl AdmissionKind {
    /// Every kind, in word order, with its label.
    pub(crate) const ALL: [(AdmissionKind, &'static str); 4] = [
        (AdmissionKind::New, "new"),
        (AdmissionKind::FromQueue, "queue"),
        (AdmissionKind::Renewed, "renewed"),
        (AdmissionKind::Recounted, "recounted"),
    ];
}

/// Upper bounds (seconds, inclusive) of the buckets of the real-wait histogram; a last bucket
/// takes the rest.
pub(crate) const WAIT_BOUNDS: [u64; 11] = [5, 15, 30, 60, 120, 300, 600, 1200, 1800, 3600, 7200];

/// Upper bounds (seconds, inclusive) of the buckets of the histogram of the real wait minus
/// the promised one (positive: later than promised); a last bucket takes the rest.
pub(crate) const ERROR_BOUNDS: [i64; 13] = [
    -600, -300, -120, -60, -30, -10, 0, 10, 30, 60, 120, 300, 600,
];

/// Word offsets within a shard.
const ADMISSIONS: usize = 0;
const DECISIONS: usize = 4;
const WAIT_BUCKETS: usize = 8;
const WAIT_SUM: usize = WAIT_BUCKETS + WAIT_BOUNDS.len() + 1;
const ERROR_BUCKETS: usize = WAIT_SUM + 1;
const SYNCS: usize = ERROR_BUCKETS + ERROR_BOUNDS.len() + 1;
const OUTAGES: usize = SYNCS + 2;
const WOULD_HAVE: usize = OUTAGES + 1;
const AMBIGUOUS: usize = WOULD_HAVE + 2;
const USED: usize = AMBIGUOUS + 1;
/// Where a shard's rule counts begin (the words from `USED` up to it are spare, zero); also
/// the words per shard of regions laid out before rule counts, which count everything else.
pub(crate) const RULES: usize = 48;

/// Rules (by name and action) a room's region can count for every process at once.
pub(crate) const RULE_SLOTS: usize = 256;

/// Words of one shard: 19 128-byte lines.
pub(crate) const STRIDE: usize = RULES + RULE_SLOTS;
const _: () = assert!(USED <= RULES && (STRIDE * 8) % 128 == 0);

/// Words of the table of rule keys after the shards (in a region whose shards hold rule
/// counts). Fixed for good: a release that wanted more would need another layout, as
/// processes probing tables of two sizes would give one rule two slots.
pub(crate) const KEY_WORDS: usize = RULE_SLOTS;

/// The key of a rule named `name` with action `action` (its label): never zero, the same in
/// every process and release.
pub(crate) fn rule_key(name: &str, action: &str) -> u64 {
    // FNV-1a over the action, a separator no name holds, and the name; then mixed.
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in action.bytes().chain([0]).chain(name.bytes()) {
        h = (h ^ u64::from(b)).wrapping_mul(0x0000_0100_0000_01b3);
    }
    crate::hash::mix64(h).max(1)
}

/// The sums of every shard's tallies.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct TallySums {
    /// Admissions by [`AdmissionKind`].
    pub(crate) admissions: [u64; 4],
    /// Decisions to queue and to reject.
    pub(crate) decisions: [u64; 2],
    /// Waiters admitted from the queue per bucket of [`WAIT_BOUNDS`] (not cumulative).
    pub(crate) wait_buckets: [u64; WAIT_BOUNDS.len() + 1],
    /// Seconds those waiters waited, in all.
    pub(crate) wait_sum: u64,
    /// Those that had been promised a wait, per bucket of [`ERROR_BOUNDS`] (not cumulative).
    pub(crate) error_buckets: [u64; ERROR_BOUNDS.len() + 1],
    /// The cluster tier's syncs of the room that got an answer, and that failed.
    pub(crate) syncs: [u64; 2],
    /// Outages of the cluster's store the syncs ran into.
    pub(crate) outages: u64,
    /// Requests a dry run (or a `count_only` rule) let through that it would have queued,
    /// and rejected.
    pub(crate) would_have: [u64; 2],
    /// Requests refused as ones several deciding rooms might govern.
    pub(crate) ambiguous: u64,
}

/// The tallies of a room: shards of `stride` words (`STRIDE` or, in a region a later release
/// laid out, more: this release uses the first `STRIDE` of each; `RULES` in a region laid
/// out before rule counts, which then has no key table and counts no rule), and the rules'
/// keys.
#[derive(Clone, Copy)]
pub(crate) struct RoomTallies<'a> {
    words: &'a [AtomicU64],
    keys: &'a [AtomicU64],
    stride: usize,
}

impl<'a> RoomTallies<'a> {
    /// Tallies over `words`, a whole number of shards of `stride` words, with the table of
    /// rule keys `keys` ([`KEY_WORDS`] words, or none in a region without rule counts).
    pub(crate) fn new(words: &'a [AtomicU64], keys: &'a [AtomicU64], stride: usize) -> Self {
        debug_assert!(stride >= RULES && !words.is_empty() && words.len() % stride == 0);
        debug_assert!(if stride >= STRIDE {
            keys.len() == KEY_WORDS
        } else {
            keys.is_empty()
        });
        Self {
            words,
            keys,
            stride,
        }
    }

    /// The slot counting rule `key` (see [`rule_key`]): the one it was given before, or a
    /// free one claimed now; `None` once the table is full of other rules (or in a region
    /// without one).
    pub(crate) fn rule_slot(&self, key: u64) -> Option<u16> {
        self.probe(key, true)
    }

    /// The slot rule `key` was given, if any (none is claimed).
    pub(crate) fn find_rule(&self, key: u64) -> Option<u16> {
        self.probe(key, false)
    }

    fn probe(&self, key: u64, claim: bool) -> Option<u16> {
        let n = self.keys.len();
        let start = (key % n.max(1) as u64) as usize;
        for i in 0..n {
            let slot = (start + i) % n;
            let found = if claim {
                self.keys[slot].compare_exchange(0, key, Ordering::AcqRel, Ordering::Acquire)
            } else {
                Err(self.keys[slot].load(Ordering::Acquire))
            };
            match found {
                Ok(_) => return u16::try_from(slot).ok(),
                Err(k) if k == key => return u16::try_from(slot).ok(),
                // Keys are never removed: a free slot ends the search.
                Err(0) => return None,
                Err(_) => {}
            }
        }
        None
    }

    /// Counts one request matched by the rule of slot `slot` (from [`RoomTallies::rule_slot`]).
    #[inline]
    pub(crate) fn rule_matched(&self, slot: u16) {
        if let Some(w) = self.shard().get(RULES + usize::from(slot)) {
            w.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// The requests the rule of slot `slot` matched, in every process.
    pub(crate) fn rule_matches(&self, slot: u16) -> u64 {
        let at = RULES + usize::from(slot);
        (0..self.words.len() / self.stride)
            .filter_map(|i| self.shard_at(i).get(at))
            .map(|w| w.load(Ordering::Relaxed))
            .fold(0, u64::wrapping_add)
    }

    /// Counts a request passed that would have been queued or rejected (`outcome`).
    pub(crate) fn would_have(&self, outcome: Outcome) {
        let i = usize::from(outcome == Outcome::Reject);
        self.shard()[WOULD_HAVE + i].fetch_add(1, Ordering::Relaxed);
    }

    /// Counts a request refused as one several deciding rooms might govern.
    pub(crate) fn refused_ambiguous(&self) {
        self.shard()[AMBIGUOUS].fetch_add(1, Ordering::Relaxed);
    }

    /// Shard `i`'s words of this release (without rule counts in a region laid out before
    /// them).
    fn shard_at(&self, i: usize) -> &'a [AtomicU64] {
        &self.words[i * self.stride..i * self.stride + self.stride.min(STRIDE)]
    }

    /// The calling thread's shard.
    #[inline]
    fn shard(&self) -> &'a [AtomicU64] {
        let shards = self.words.len() / self.stride;
        self.shard_at(crate::counters::slot_pool::home_shard() % shards)
    }

    /// Counts one admission of `kind`.
    #[inline]
    pub(crate) fn admitted(&self, kind: AdmissionKind) {
        self.shard()[ADMISSIONS + kind as usize].fetch_add(1, Ordering::Relaxed);
    }

    /// Counts one decision to queue or to reject (an admission is counted by kind).
    #[inline]
    pub(crate) fn decided(&self, outcome: Outcome) {
        let i = match outcome {
            Outcome::Queue => 0,
            Outcome::Reject => 1,
            Outcome::Admit => return,
        };
        self.shard()[DECISIONS + i].fetch_add(1, Ordering::Relaxed);
    }

    /// Counts a waiter admitted from the queue after `waited` seconds, promised entry
    /// `late_by` seconds before it got in (negative: it got in earlier than promised), if it
    /// was promised a time at all.
    pub(crate) fn waited(&self, waited: u64, late_by: Option<i64>) {
        let shard = self.shard();
        let i = WAIT_BOUNDS.partition_point(|&b| b < waited);
        shard[WAIT_BUCKETS + i].fetch_add(1, Ordering::Relaxed);
        shard[WAIT_SUM].fetch_add(waited, Ordering::Relaxed);
        if let Some(late) = late_by {
            let i = ERROR_BOUNDS.partition_point(|&b| b < late);
            shard[ERROR_BUCKETS + i].fetch_add(1, Ordering::Relaxed);
        }
    }

    /// Counts a sync of the room through the cluster tier: answered (`ok`) or failed, and
    /// whether it began an outage.
    pub(crate) fn synced(&self, ok: bool, outage_began: bool) {
        let shard = self.shard();
        shard[SYNCS + usize::from(!ok)].fetch_add(1, Ordering::Relaxed);
        if outage_began {
            shard[OUTAGES].fetch_add(1, Ordering::Relaxed);
        }
    }

    /// Every shard's tallies summed.
    pub(crate) fn sums(&self) -> TallySums {
        let mut s = TallySums::default();
        for shard in (0..self.words.len() / self.stride).map(|i| self.shard_at(i)) {
            let add = |into: &mut [u64], from: usize| {
                for (k, v) in into.iter_mut().enumerate() {
                    *v = v.wrapping_add(shard[from + k].load(Ordering::Relaxed));
                }
            };
            add(&mut s.admissions, ADMISSIONS);
            add(&mut s.decisions, DECISIONS);
            add(&mut s.wait_buckets, WAIT_BUCKETS);
            s.wait_sum = s
                .wait_sum
                .wrapping_add(shard[WAIT_SUM].load(Ordering::Relaxed));
            add(&mut s.error_buckets, ERROR_BUCKETS);
            add(&mut s.syncs, SYNCS);
            s.outages = s
                .outages
                .wrapping_add(shard[OUTAGES].load(Ordering::Relaxed));
            add(&mut s.would_have, WOULD_HAVE);
            s.ambiguous = s
                .ambiguous
                .wrapping_add(shard[AMBIGUOUS].load(Ordering::Relaxed));
        }
        s
    }
}

#[cfg(all(test, not(velvet_rope_loom)))]
mod tests {
    use super::*;

    /// `rule_key("health", "bypass")`, as the first release with rule keys computed it.
    const RULE_KEY_HEALTH_BYPASS: u64 = 0xd88c_c858_d1e0_5fd9;

    #[test]
    fn buckets_take_their_upper_bound_and_the_last_takes_the_rest() {
        let words: Vec<AtomicU64> = (0..STRIDE * 4).map(|_| AtomicU64::new(0)).collect();
        let keys: Vec<AtomicU64> = (0..KEY_WORDS).map(|_| AtomicU64::new(0)).collect();
        let t = RoomTallies::new(&words, &keys, STRIDE);
        for (waited, late) in [
            (0, Some(-601)),
            (5, Some(-599)),
            (6, Some(0)),
            (7200, Some(1)),
            (7201, Some(601)),
            (9, None),
        ] {
            t.waited(waited, late);
        }
        let s = t.sums();
        assert_eq!(s.wait_buckets, [2, 2, 0, 0, 0, 0, 0, 0, 0, 0, 1, 1]);
        assert_eq!(s.wait_sum, 5 + 6 + 7200 + 7201 + 9);
        assert_eq!(s.error_buckets, [1, 1, 0, 0, 0, 0, 1, 1, 0, 0, 0, 0, 0, 1]);
    }

    /// Threads counting into shards at once: the sums are exact.
    #[test]
    fn concurrent_counts_sum_exactly() {
        let words: Vec<AtomicU64> = (0..STRIDE * 2).map(|_| AtomicU64::new(0)).collect();
        let keys: Vec<AtomicU64> = (0..KEY_WORDS).map(|_| AtomicU64::new(0)).collect();
        let t = RoomTallies::new(&words, &keys, STRIDE);
        std::thread::scope(|s| {
            for _ in 0..8 {
                s.spawn(|| {
                    // Each thread finds the rules' slots itself, as each process does.
                    let a = t.rule_slot(rule_key("health", "bypass")).unwrap();
                    let b = t.rule_slot(rule_key("health", "reject")).unwrap();
                    for i in 0..10_000u64 {
                        t.rule_matched(if i % 4 == 0 { b } else { a });
                        if i % 5 == 0 {
                            t.would_have([Outcome::Queue, Outcome::Reject][(i % 2) as usize]);
                        }
                        t.admitted(AdmissionKind::ALL[(i % 4) as usize].0);
                        t.decided(
                            [Outcome::Admit, Outcome::Queue, Outcome::Reject][(i % 3) as usize],
                        );
                        t.waited(i % 100, (i % 2 == 0).then_some(i as i64 % 50 - 25));
                    }
                });
            }
        });
        let s = t.sums();
        assert_eq!(s.admissions, [20_000; 4]);
        assert_eq!(s.decisions, [26_664, 26_664]);
        assert_eq!(s.wait_buckets.iter().sum::<u64>(), 80_000);
        assert_eq!(s.wait_sum, 8 * 100 * (0..100).sum::<u64>());
        assert_eq!(s.error_buckets.iter().sum::<u64>(), 40_000);
        assert_eq!(s.would_have, [8_000, 8_000]);
        let slot = |name, action| t.rule_slot(rule_key(name, action)).unwrap();
        assert_ne!(slot("health", "bypass"), slot("health", "reject"));
        assert_eq!(t.rule_matches(slot("health", "bypass")), 60_000);
        assert_eq!(t.rule_matches(slot("health", "reject")), 20_000);
    }

    /// A rule's key is kept in state files and shared by processes of different releases:
    /// it must never change.
    #[test]
    fn rule_keys_are_pinned() {
        assert_eq!(rule_key("health", "bypass"), RULE_KEY_HEALTH_BYPASS);
    }

    /// Rules found by name and action: the same slot again; a full table gives none.
    #[test]
    fn rule_slots_are_found_by_name_and_action_until_the_table_is_full() {
        let words: Vec<AtomicU64> = (0..STRIDE).map(|_| AtomicU64::new(0)).collect();
        let keys: Vec<AtomicU64> = (0..KEY_WORDS).map(|_| AtomicU64::new(0)).collect();
        let t = RoomTallies::new(&words, &keys, STRIDE);
        let slots: Vec<u16> = (0..RULE_SLOTS)
            .map(|i| t.rule_slot(rule_key(&format!("r{i}"), "bypass")).unwrap())
            .collect();
        let mut distinct = slots.clone();
        distinct.sort_unstable();
        distinct.dedup();
        assert_eq!(distinct.len(), RULE_SLOTS);
        assert_eq!(t.rule_slot(rule_key("r7", "bypass")), Some(slots[7]));
        assert_eq!(t.rule_slot(rule_key("one more", "bypass")), None);
        assert_ne!(rule_key("a", "bypass"), rule_key("a", "queue"));
        assert_ne!(rule_key("ab", "c"), rule_key("a", "bc"));
    }
}
