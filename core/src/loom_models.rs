//! loom models of every lock-free structure of the admission side.
//!
//! Run with `RUSTFLAGS="--cfg velvet_rope_loom" cargo test -p velvet-rope --lib --release loom`.
//! Each model explores every interleaving of its threads (within loom's bounds).

use crossbeam_utils::CachePadded;
use loom::sync::Arc;
use loom::thread;

use crate::active_counts::{ActiveCounts, Renewal};
use crate::queue_lanes::{Counted, QueueLanes};
use crate::slot_pool::SlotPool;
use crate::sync::{AtomicI64, AtomicU64};

fn shards(n: usize) -> Arc<Vec<CachePadded<AtomicU64>>> {
    Arc::new(
        (0..n)
            .map(|_| CachePadded::new(AtomicU64::new(0)))
            .collect(),
    )
}

/// One free slot, two claimants on different home shards: exactly one wins, and the claim is
/// counted exactly once.
#[test]
fn slot_pool_one_slot_two_claimants() {
    loom::model(|| {
        let s = shards(2);
        {
            let pool = SlotPool::new(&s);
            let r = pool.read();
            pool.set_target(1, &r);
        }
        let before = SlotPool::new(&s).read();
        let handles: Vec<_> = (0..2)
            .map(|home| {
                let s = s.clone();
                thread::spawn(move || SlotPool::new(&s).try_claim(home))
            })
            .collect();
        let wins = handles
            .into_iter()
            .map(|h| h.join().unwrap())
            .filter(|&w| w)
            .count();
        assert_eq!(wins, 1);
        let after = SlotPool::new(&s).read();
        assert_eq!(after.claims_since(&before), 1);
        assert_eq!(after.free, 0);
    });
}

/// A claim racing with a refill: whatever the interleaving, the claims made after the reading
/// never exceed the new target plus what `set_target` reports as owed, and nothing is lost.
#[test]
fn slot_pool_claim_races_refill() {
    loom::model(|| {
        let s = shards(2);
        {
            let pool = SlotPool::new(&s);
            let r = pool.read();
            pool.set_target(2, &r);
        }
        let reading = SlotPool::new(&s).read();
        let claimer = {
            let s = s.clone();
            thread::spawn(move || {
                let pool = SlotPool::new(&s);
                u64::from(pool.try_claim(0)) + u64::from(pool.try_claim(1))
            })
        };
        let over = SlotPool::new(&s).set_target(1, &reading);
        let claimed = claimer.join().unwrap();
        let after = SlotPool::new(&s).read();
        let since = after.claims_since(&reading);
        assert_eq!(since, claimed, "every claim counted");
        assert!(since <= 1 + over, "claimed {since}, target 1, owed {over}");
        assert!(
            since + after.free <= 2,
            "no slot created: {since} + {}",
            after.free
        );
    });
}

/// A ticket renewed by two requests at once (a browser's parallel requests, or a replay):
/// exactly one moves it, and the visitor stays counted exactly once.
#[test]
fn active_counts_sibling_renewals_move_once() {
    loom::model(|| {
        let tags: Arc<Vec<AtomicU64>> = Arc::new((0..4).map(|_| AtomicU64::new(0)).collect());
        let counts: Arc<Vec<AtomicI64>> = Arc::new((0..4).map(|_| AtomicI64::new(0)).collect());
        let guard: Arc<Vec<AtomicU64>> = Arc::new((0..4).map(|_| AtomicU64::new(0)).collect());
        {
            let a = ActiveCounts::new(&tags, &counts, &guard, 1);
            a.prepare(0);
            a.prepare(1);
            assert!(a.add(0));
        }
        let handles: Vec<_> = (0..2)
            .map(|_| {
                let (t, c, g) = (tags.clone(), counts.clone(), guard.clone());
                thread::spawn(move || ActiveCounts::new(&t, &c, &g, 1).renew(7, 0, 1))
            })
            .collect();
        let moved = handles
            .into_iter()
            .map(|h| h.join().unwrap())
            .filter(|r| *r == Renewal::Moved)
            .count();
        assert_eq!(moved, 1);
        let a = ActiveCounts::new(&tags, &counts, &guard, 1);
        assert_eq!(a.sum(0, 1), 1);
        assert_eq!(a.sum(1, 1), 1);
    });
}

/// A new admission racing with another visitor's move: the sum is exact in every interleaving.
#[test]
fn active_counts_add_races_move() {
    loom::model(|| {
        let tags: Arc<Vec<AtomicU64>> = Arc::new((0..4).map(|_| AtomicU64::new(0)).collect());
        let counts: Arc<Vec<AtomicI64>> = Arc::new((0..4).map(|_| AtomicI64::new(0)).collect());
        let guard: Arc<Vec<AtomicU64>> = Arc::new((0..4).map(|_| AtomicU64::new(0)).collect());
        {
            let a = ActiveCounts::new(&tags, &counts, &guard, 1);
            a.prepare(0);
            a.prepare(1);
            a.add(0);
        }
        let mover = {
            let (t, c, g) = (tags.clone(), counts.clone(), guard.clone());
            thread::spawn(move || ActiveCounts::new(&t, &c, &g, 1).renew(9, 0, 1))
        };
        let adder = {
            let (t, c, g) = (tags.clone(), counts.clone(), guard.clone());
            thread::spawn(move || ActiveCounts::new(&t, &c, &g, 1).add(1))
        };
        assert_eq!(mover.join().unwrap(), Renewal::Moved);
        assert!(adder.join().unwrap());
        assert_eq!(ActiveCounts::new(&tags, &counts, &guard, 1).sum(0, 1), 2);
    });
}

/// A refresh racing with its own replay (or a browser's sibling request): the waiter is
/// counted once in every interleaving.
#[test]
fn queue_lanes_moves_are_exact() {
    loom::model(|| {
        let counts: Arc<Vec<AtomicI64>> = Arc::new((0..3).map(|_| AtomicI64::new(0)).collect());
        let tags: Arc<Vec<AtomicU64>> = Arc::new((0..3).map(|_| AtomicU64::new(0)).collect());
        let guards: Arc<Vec<AtomicU64>> = Arc::new((0..3).map(|_| AtomicU64::new(0)).collect());
        let lanes = QueueLanes::new(1, 2, &counts, &tags, &guards, 1);
        lanes.prepare(4);
        lanes.prepare(5);
        assert_eq!(lanes.count(0, 4, 1), Counted::New);
        let mover = {
            let (c, t, g) = (counts.clone(), tags.clone(), guards.clone());
            thread::spawn(move || {
                let lanes = QueueLanes::new(1, 2, &c, &t, &g, 1);
                if lanes.count(0, 5, 1) == Counted::New {
                    lanes.uncount(0, 4);
                }
            })
        };
        let replay = {
            let (c, t, g) = (counts.clone(), tags.clone(), guards.clone());
            thread::spawn(move || {
                let lanes = QueueLanes::new(1, 2, &c, &t, &g, 1);
                if lanes.count(0, 5, 1) == Counted::New {
                    lanes.uncount(0, 4);
                }
            })
        };
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
