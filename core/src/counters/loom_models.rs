//! loom models of every lock-free structure of the admission side.
//!
//! Run with `RUSTFLAGS="--cfg velvet_rope_loom" cargo test -p velvet-rope --lib --release loom`
//! (`make test-loom`). Each model explores every interleaving of its threads (within loom's
//! bounds) and asserts exact counts: no model allows an overshoot "by a few".

use crossbeam_utils::CachePadded;
use loom::sync::Arc;
use loom::thread;

use crate::admission::budget::{apply, claim_limit, Figures, Split};
use crate::counters::buckets::{Buckets, Claim, Renewal};
use crate::counters::queue_lanes::{Counted, QueueLanes};
use crate::counters::revocations::{Revocations, Revoked, GENERATIONS, HEADER_WORDS};
use crate::counters::slot_pool::SlotPool;
use crate::sync::{AtomicI64, AtomicU64, Ordering};

fn shards(n: usize) -> Arc<Vec<CachePadded<AtomicU64>>> {
    Arc::new(
        (0..n)
            .map(|_| CachePadded::new(AtomicU64::new(0)))
            .collect(),
    )
}

fn words(n: usize) -> Arc<Vec<AtomicU64>> {
    Arc::new((0..n).map(|_| AtomicU64::new(0)).collect())
}

fn signed(n: usize) -> Arc<Vec<AtomicI64>> {
    Arc::new((0..n).map(|_| AtomicI64::new(0)).collect())
}

/// A ring of 4 buckets with one guard word each.
#[derive(Clone)]
struct Ring {
    tags: Arc<Vec<AtomicU64>>,
    admitted: Arc<Vec<AtomicU64>>,
    moved: Arc<Vec<AtomicI64>>,
    guard: Arc<Vec<AtomicU64>>,
}

impl Ring {
    fn new() -> Self {
        Self {
            tags: words(4),
            admitted: words(4),
            moved: signed(4),
            guard: words(4),
        }
    }
    fn view(&self) -> Buckets<'_> {
        Buckets::new(&self.tags, &self.admitted, &self.moved, &self.guard, 1)
    }
}

/// One free slot, two claimants on different home shards: exactly one wins.
#[test]
fn loom_slot_pool_one_slot_two_claimants() {
    loom::model(|| {
        let s = shards(2);
        SlotPool::new(&s).grant(1, 0);
        let handles: Vec<_> = (0..2)
            .map(|home| {
                let s = s.clone();
                thread::spawn(move || SlotPool::new(&s).try_claim(home).is_some())
            })
            .collect();
        let wins = handles
            .into_iter()
            .map(|h| h.join().unwrap())
            .filter(|&w| w)
            .count();
        assert_eq!(wins, 1);
        assert_eq!(SlotPool::new(&s).free(), 0);
    });
}

/// Claims racing a revoke and a grant: every slot is claimed, revoked or still free, exactly
/// once, in every interleaving.
#[test]
fn loom_slot_pool_claims_race_revoke_and_grant() {
    loom::model(|| {
        let s = shards(2);
        SlotPool::new(&s).grant(2, 0);
        let claimer = {
            let s = s.clone();
            thread::spawn(move || {
                let pool = SlotPool::new(&s);
                u64::from(pool.try_claim(1).is_some()) + u64::from(pool.try_claim(0).is_some())
            })
        };
        let pool = SlotPool::new(&s);
        let revoked = pool.revoke(2);
        // The ledger is granted minus revoked, whatever the claimer has done so far.
        assert_eq!(u64::from(pool.ledger32()), 2 - revoked);
        pool.grant(1, 1);
        assert_eq!(u64::from(pool.ledger32()), 3 - revoked);
        let claimed = claimer.join().unwrap();
        assert_eq!(claimed + revoked + pool.free(), 3);
        assert_eq!(u64::from(pool.ledger32()), 3 - revoked);
    });
}

/// A slot given back (a sibling request admitted first) races a claim and a revoke: the
/// ledger does not move, and the slot is claimed, revoked or free exactly once.
#[test]
fn loom_slot_pool_unclaim_keeps_the_ledger() {
    loom::model(|| {
        let s = shards(2);
        SlotPool::new(&s).grant(1, 0);
        let shard = SlotPool::new(&s).try_claim(0).unwrap();
        let giver = {
            let s = s.clone();
            thread::spawn(move || SlotPool::new(&s).unclaim(shard))
        };
        let claimer = {
            let s = s.clone();
            thread::spawn(move || u64::from(SlotPool::new(&s).try_claim(1).is_some()))
        };
        let pool = SlotPool::new(&s);
        let revoked = pool.revoke(1);
        assert_eq!(u64::from(pool.ledger32()), 1 - revoked);
        giver.join().unwrap();
        let claimed = claimer.join().unwrap();
        assert_eq!(claimed + revoked + pool.free(), 1);
    });
}

/// The overshoot issue 8 reported, as a model: a room of 2 with 1 admitted, a claimer admitting
/// (claim, then book to the open bucket) while a tick folds the ring into the claim limit and
/// moves the ledger. However they interleave, claims never pass the limit: exactly 2 admitted.
#[test]
fn loom_tick_during_a_rush_never_over_admits() {
    loom::model(|| {
        let s = shards(2);
        let ring = Ring::new();
        let bucket_cell = Arc::new(AtomicU64::new(0));
        // State after a first tick and one admission.
        {
            let b = ring.view();
            b.prepare(5);
            b.prepare(6);
            bucket_cell.store(5, Ordering::Release);
            SlotPool::new(&s).grant(2, 0);
            assert!(SlotPool::new(&s).try_claim(0).is_some());
            assert!(b.book_admission(5));
        }
        let tick = |ring: &Ring, s: &[CachePadded<AtomicU64>]| {
            let b = ring.view();
            let (_, all) = b.admitted_before_and_all(0);
            let f = Figures {
                total_active_users: 2,
                new_users_per_minute: 100,
                new_users_next: 100,
                admitted_ever: all,
                admitted_departed: 0,
                admitted_current: b.admitted_in(5),
                admitted_next: b.admitted_in(6),
                moved_in_window: b.sums(0, 6).moved,
            };
            let limit = claim_limit(&f);
            let pool = SlotPool::new(s);
            let none = [CachePadded::new(AtomicU64::new(0))];
            let waiters = SlotPool::new(&none);
            // The ledger, from the pools: exact while the claimers run.
            let granted = u64::from(pool.ledger32());
            let held = pool.free();
            let free = crate::admission::budget::free_slots(limit, granted, held);
            let ledger = apply(
                waiters,
                pool,
                granted,
                limit,
                Split {
                    waiters: 0,
                    open: free,
                },
                1,
                || true,
            );
            assert_eq!(ledger, u64::from(pool.ledger32()));
        };
        let claimers: Vec<_> = (0..2)
            .map(|home| {
                let (s, ring, cell) = (s.clone(), ring.clone(), bucket_cell.clone());
                thread::spawn(move || {
                    if SlotPool::new(&s).try_claim(home).is_some() {
                        let opened = cell.load(Ordering::Acquire);
                        assert!(ring.view().book_admission(6.clamp(opened, opened + 1)));
                        1
                    } else {
                        0
                    }
                })
            })
            .collect();
        tick(&ring, &s);
        let admitted: u64 = claimers.into_iter().map(|h| h.join().unwrap()).sum();
        assert_eq!(1 + admitted, 2, "exactly the limit");
        // And the next tick, with everything booked, grants nothing more.
        tick(&ring, &s);
        assert_eq!(SlotPool::new(&s).free(), 0);
    });
}

/// A ticket renewed by two requests at once (a browser's parallel requests, or a replay):
/// exactly one moves it, and the visitor stays counted exactly once.
#[test]
fn loom_buckets_sibling_renewals_move_once() {
    loom::model(|| {
        let ring = Ring::new();
        {
            let b = ring.view();
            b.prepare(0);
            b.prepare(1);
            assert!(b.book_admission(0));
        }
        let handles: Vec<_> = (0..2)
            .map(|_| {
                let ring = ring.clone();
                thread::spawn(move || ring.view().renew(7, 0, 1))
            })
            .collect();
        let moved = handles
            .into_iter()
            .map(|h| h.join().unwrap())
            .filter(|r| *r == Renewal::Moved)
            .count();
        assert_eq!(moved, 1);
        let s = ring.view().sums(0, 1);
        assert_eq!(s.admitted as i64 + s.moved, 1);
    });
}

/// A move read by a tick summing the window oldest first: the sum is never one too low (a move
/// in flight may read one too high, never a visitor lost).
#[test]
fn loom_buckets_a_move_never_reads_low() {
    loom::model(|| {
        let ring = Ring::new();
        {
            let b = ring.view();
            b.prepare(0);
            b.prepare(1);
            b.book_admission(0);
        }
        let mover = {
            let ring = ring.clone();
            thread::spawn(move || ring.view().renew(9, 0, 1))
        };
        let s = ring.view().sums(0, 1);
        assert!(
            s.admitted as i64 + s.moved >= 1,
            "the visitor was lost mid-move"
        );
        assert_eq!(mover.join().unwrap(), Renewal::Moved);
        let s = ring.view().sums(0, 1);
        assert_eq!(s.admitted as i64 + s.moved, 1);
    });
}

/// A ticket of another incarnation presented twice at once: counted afresh exactly once.
#[test]
fn loom_buckets_afresh_counts_once() {
    loom::model(|| {
        let ring = Ring::new();
        ring.view().prepare(3);
        let handles: Vec<_> = (0..2)
            .map(|_| {
                let ring = ring.clone();
                thread::spawn(move || ring.view().count_afresh(11, 0, 3, false))
            })
            .collect();
        let counted = handles
            .into_iter()
            .map(|h| h.join().unwrap())
            .filter(|r| *r == Renewal::Counted)
            .count();
        assert_eq!(counted, 1);
        assert_eq!(ring.view().sums(3, 3).moved, 1);
    });
}

/// A ring with buckets 0 to 3 prepared, and `f` run at once for bucket 2 and for bucket 3 (two
/// requests whose clocks read either side of an edge): the ring, and each bucket's answer.
fn across_an_edge<T: Send + 'static>(f: fn(&Ring, u64) -> T) -> (Ring, Vec<(u64, T)>) {
    let ring = Ring::new();
    for b in 0..4 {
        ring.view().prepare(b);
    }
    let handles: Vec<_> = [2u64, 3]
        .into_iter()
        .map(|bucket| {
            let ring = ring.clone();
            thread::spawn(move || (bucket, f(&ring, bucket)))
        })
        .collect();
    let answers = handles.into_iter().map(|h| h.join().unwrap()).collect();
    (ring, answers)
}

/// One queued ticket presented at once by two requests whose clocks read either side of a
/// bucket's edge (booking to buckets 2 and 3): exactly one is admitted from the queue, and the
/// other's answer names the bucket the winner books to.
#[test]
fn loom_buckets_from_queue_across_an_edge_once() {
    loom::model(|| {
        let (_, answers) = across_an_edge(|ring, bucket| ring.view().claim_from_queue(11, bucket));
        let won: Vec<u64> = answers
            .iter()
            .filter(|(_, c)| *c == Claim::Won)
            .map(|(b, _)| *b)
            .collect();
        assert_eq!(won.len(), 1, "{answers:?}");
        for (_, c) in &answers {
            assert!(
                *c == Claim::Won || *c == Claim::Taken(won[0]),
                "{answers:?}"
            );
        }
    });
}

/// A ticket of another incarnation presented at once by two requests either side of a
/// bucket's edge (counting into buckets 2 and 3): counted afresh exactly once, and the other
/// request's answer names the bucket it is counted in.
#[test]
fn loom_buckets_afresh_across_an_edge_counts_once() {
    loom::model(|| {
        let (ring, answers) = across_an_edge(|ring, to| ring.view().count_afresh(11, 0, to, false));
        let counted = answers
            .iter()
            .filter(|(_, r)| *r == Renewal::Counted)
            .count();
        assert_eq!(counted, 1, "{answers:?}");
        assert_eq!(ring.view().sums(0, 3).moved, 1, "{answers:?}");
        // The other answer: it lost the claim to the winner (and names the winner's bucket),
        // or it came after the winner and moved the visitor on into its own bucket.
        let winner = answers
            .iter()
            .find(|(_, r)| *r == Renewal::Counted)
            .unwrap()
            .0;
        for (to, r) in &answers {
            match r {
                Renewal::Counted => {}
                Renewal::TakenFor(b) => assert_eq!(*b, winner, "{answers:?}"),
                Renewal::Moved => assert!(winner < *to, "{answers:?}"),
                other => panic!("{other:?} in {answers:?}"),
            }
        }
    });
}

/// A refresh racing with its own replay (or a browser's sibling request): the waiter is
/// counted once in every interleaving.
#[test]
fn loom_queue_lanes_moves_are_exact() {
    loom::model(|| {
        let counts = signed(3);
        let tags = words(3);
        let guards = words(3);
        let lanes = QueueLanes::new(1, 2, &counts, &tags, &guards, 1);
        lanes.prepare(4);
        lanes.prepare(5);
        assert_eq!(lanes.count(0, 4, 1), Counted::New);
        let refresh = |c: Arc<Vec<AtomicI64>>, t: Arc<Vec<AtomicU64>>, g: Arc<Vec<AtomicU64>>| {
            thread::spawn(move || {
                let lanes = QueueLanes::new(1, 2, &c, &t, &g, 1);
                if lanes.count(0, 5, 1) == Counted::New {
                    lanes.uncount(0, 4);
                }
            })
        };
        let mover = refresh(counts.clone(), tags.clone(), guards.clone());
        let replay = refresh(counts.clone(), tags.clone(), guards.clone());
        let arriver = {
            let (c, t, g) = (counts.clone(), tags.clone(), guards.clone());
            thread::spawn(move || {
                assert_eq!(
                    QueueLanes::new(1, 2, &c, &t, &g, 1).count(0, 5, 2),
                    Counted::New
                );
            })
        };
        mover.join().unwrap();
        replay.join().unwrap();
        arriver.join().unwrap();
        let lanes = QueueLanes::new(1, 2, &counts, &tags, &guards, 1);
        assert_eq!(
            lanes.live(0, 5),
            2,
            "a refresh and its replay count once, plus the arrival"
        );
    });
}

/// A revocation and a request with the revoked ticket: a request that sees the seat freed
/// (the count out, after the revocation) also sees the ticket revoked, in every interleaving;
/// and a ticket is never reported revoked before the revocation began.
#[test]
fn loom_revocations_are_seen_before_their_seat() {
    loom::model(|| {
        let (header, tables, outbox) = (words(HEADER_WORDS), words(GENERATIONS * 2), words(2));
        let moved = signed(1);
        let revoker = {
            let (h, t, o, m) = (
                header.clone(),
                tables.clone(),
                outbox.clone(),
                moved.clone(),
            );
            thread::spawn(move || {
                let r = Revocations::new(&h, &t, &o, 8, false);
                assert_eq!(r.revoke(7, 10, false), Ok(Revoked::Now));
                m[0].fetch_sub(1, Ordering::Release);
            })
        };
        let r = Revocations::new(&header, &tables, &outbox, 8, false);
        let freed = moved[0].load(Ordering::Acquire) == -1;
        let refused = r.is_revoked(7, 10, 10);
        assert!(!freed || refused, "a freed seat whose ticket still works");
        assert!(!r.is_revoked(8, 10, 10));
        revoker.join().unwrap();
        assert!(r.is_revoked(7, 10, 10));
    });
}

/// Two holders of the revocation lock recording one id, one stopped and taken over between
/// its look-up and its insert (so each inserts into its own generation's table: the next
/// one, or one further away after a longer stop): at most one frees the seat, in every
/// interleaving.
#[test]
fn loom_revocations_two_holders_free_a_seat_at_most_once() {
    two_holders(2);
    two_holders(3);
}

/// [`loom_revocations_two_holders_free_a_seat_at_most_once`] with the stopped holder in
/// generation 1 and its successor in generation `later`.
fn two_holders(later: u64) {
    loom::model(move || {
        let (header, tables, outbox) = (words(HEADER_WORDS), words(GENERATIONS * 2), words(2));
        {
            // Generations 1 and `later` tagged.
            let r = Revocations::new(&header, &tables, &outbox, 8, false);
            assert_eq!(r.receive(&[1], 15, |_| {}), Some(1));
            assert_eq!(r.receive(&[2], later * 8, |_| {}), Some(1));
        }
        let freed = words(1);
        let stopped = {
            let (h, t, o, f) = (
                header.clone(),
                tables.clone(),
                outbox.clone(),
                freed.clone(),
            );
            thread::spawn(move || {
                let r = Revocations::new(&h, &t, &o, 8, false);
                if r.record_and_look(7, 1) {
                    f[0].fetch_add(1, Ordering::Relaxed);
                }
            })
        };
        let r = Revocations::new(&header, &tables, &outbox, 8, false);
        if r.record_and_look(7, later) {
            freed[0].fetch_add(1, Ordering::Relaxed);
        }
        stopped.join().unwrap();
        assert!(freed[0].load(Ordering::Relaxed) <= 1, "a seat freed twice");
    });
}
