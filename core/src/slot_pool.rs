//! The sharded, exact slot pool: how many visitors may still be admitted until the next tick.
//!
//! Each shard is one `AtomicU64` on its own cache line, packing two numbers so that one
//! compare-and-swap keeps them consistent:
//!
//! ```text
//!  63              32 31               0
//! +------------------+------------------+
//! | claimed (wraps)  | free slots       |
//! +------------------+------------------+
//! ```
//!
//! A claim takes one free slot from the caller's home shard and counts it as claimed in the
//! same CAS; a caller whose shard is empty steals from the others before giving up. So nothing
//! is ever over-admitted (a slot is taken only where one is free), and nobody is refused while a
//! slot is free anywhere in the pool. `tick` reads every shard (free and claimed), computes a new
//! target, and writes it back with a CAS per shard that subtracts whatever was claimed *after*
//! its reading: claims made between the reading and the write come out of the new budget, so
//! the total claimed after a reading never exceeds the target computed from that reading.
//!
//! Memory orders: each shard is an independent counter, and every claim is a read-modify-write
//! of one location, so the modification order of that location alone guarantees exactness;
//! `AcqRel` on success additionally orders a claim before the caller's later writes (its
//! HyperLogLog insert), which `tick` reads after `Acquire`-loading the shards.

use crossbeam_utils::CachePadded;

use crate::sync::{AtomicU64, Ordering};

const FREE_MASK: u64 = 0xFFFF_FFFF;

/// A view over the shards of one pool.
pub(crate) struct SlotPool<'a> {
    shards: &'a [CachePadded<AtomicU64>],
}

/// What `tick` read from a pool: per-shard claimed counters, and totals.
#[derive(Debug, Clone, Default)]
pub(crate) struct PoolReading {
    claimed: Vec<u32>,
    /// Free slots left in the pool at the reading.
    pub(crate) free: u64,
}

impl PoolReading {
    /// A reading made of per-shard claim counters saved earlier.
    pub(crate) fn from_claimed(claimed: Vec<u32>) -> Self {
        Self { claimed, free: 0 }
    }

    /// The per-shard claim counters.
    pub(crate) fn claimed(&self) -> &[u32] {
        &self.claimed
    }

    /// Slots claimed since `earlier` (wrapping arithmetic: exact while fewer than 2^32 claims
    /// happen between two readings).
    pub(crate) fn claims_since(&self, earlier: &PoolReading) -> u64 {
        if earlier.claimed.len() != self.claimed.len() {
            return 0;
        }
        self.claimed
            .iter()
            .zip(&earlier.claimed)
            .map(|(now, then)| now.wrapping_sub(*then) as u64)
            .sum()
    }
}

impl<'a> SlotPool<'a> {
    /// Wraps shards (at least one).
    pub(crate) fn new(shards: &'a [CachePadded<AtomicU64>]) -> Self {
        debug_assert!(!shards.is_empty());
        Self { shards }
    }

    /// Takes one slot: from shard `home` (modulo the shard count) if it has one, else from the
    /// first other shard that has one. Lock-free; exact.
    #[inline]
    pub(crate) fn try_claim(&self, home: usize) -> bool {
        let n = self.shards.len();
        let home = home % n;
        for k in 0..n {
            let i = home + k;
            let shard = &self.shards[if i >= n { i - n } else { i }];
            if claim_from(shard) {
                return true;
            }
        }
        false
    }

    /// Free slots across all shards (a racy sum, for statistics and quick checks).
    pub(crate) fn free(&self) -> u64 {
        self.shards
            .iter()
            .map(|s| s.load(Ordering::Relaxed) & FREE_MASK)
            .sum()
    }

    /// Reads every shard.
    pub(crate) fn read(&self) -> PoolReading {
        let mut reading = PoolReading {
            claimed: Vec::with_capacity(self.shards.len()),
            free: 0,
        };
        for s in self.shards {
            let v = s.load(Ordering::Acquire);
            reading.claimed.push((v >> 32) as u32);
            reading.free += v & FREE_MASK;
        }
        reading
    }

    /// Sets the pool to `target` free slots, as of `reading`: claims made since the reading are
    /// subtracted from the target. Returns the number of slots that were claimed since the
    /// reading beyond what the target allowed (zero unless the previous budget was larger than
    /// the new one and was spent during this call; reported so it is counted, never hidden).
    pub(crate) fn set_target(&self, target: u64, reading: &PoolReading) -> u64 {
        let n = self.shards.len() as u64;
        let target = target.min(FREE_MASK * n);
        let mut debt = 0u64;
        for (i, shard) in self.shards.iter().enumerate() {
            let share = target / n + u64::from((i as u64) < target % n);
            let seen = reading.claimed.get(i).copied();
            let mut cur = shard.load(Ordering::Acquire);
            loop {
                let claimed = (cur >> 32) as u32;
                let since = seen.map_or(0, |s| claimed.wrapping_sub(s) as u64);
                let owed = since + debt;
                let free = share.saturating_sub(owed);
                let new = (cur & !FREE_MASK) | free;
                match shard.compare_exchange_weak(cur, new, Ordering::AcqRel, Ordering::Acquire) {
                    Ok(_) => {
                        debt = owed.saturating_sub(share);
                        break;
                    }
                    Err(actual) => cur = actual,
                }
            }
        }
        // Claims beyond this shard's share are taken back from shards that still hold slots.
        for shard in self.shards {
            if debt == 0 {
                break;
            }
            let mut cur = shard.load(Ordering::Acquire);
            loop {
                let free = cur & FREE_MASK;
                let take = free.min(debt);
                if take == 0 {
                    break;
                }
                match shard.compare_exchange_weak(
                    cur,
                    cur - take,
                    Ordering::AcqRel,
                    Ordering::Acquire,
                ) {
                    Ok(_) => {
                        debt -= take;
                        break;
                    }
                    Err(actual) => cur = actual,
                }
            }
        }
        debt
    }
}

/// A slot pool that owns its shards: the engine's exact, sharded counter of free slots, for
/// use on its own (benches, or any "at most N until refilled" budget).
pub struct OwnedSlotPool {
    shards: Box<[CachePadded<AtomicU64>]>,
    reading: crate::sync::Mutex<PoolReading>,
}

impl std::fmt::Debug for OwnedSlotPool {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("OwnedSlotPool")
            .field("shards", &self.shards.len())
            .finish()
    }
}

impl OwnedSlotPool {
    /// A pool of `shards` shards (at least one), holding no slots.
    pub fn new(shards: usize) -> Self {
        let shards: Box<[CachePadded<AtomicU64>]> = (0..shards.max(1))
            .map(|_| CachePadded::new(AtomicU64::new(0)))
            .collect();
        let reading = SlotPool::new(&shards).read();
        Self {
            shards,
            reading: crate::sync::Mutex::new(reading),
        }
    }

    /// Takes one slot, from the calling thread's home shard or, failing that, any other.
    #[inline]
    pub fn try_claim(&self) -> bool {
        SlotPool::new(&self.shards).try_claim(home_shard())
    }

    /// Sets the number of free slots; returns the slots claimed since the previous call.
    pub fn refill(&self, free: u64) -> u64 {
        let pool = SlotPool::new(&self.shards);
        let mut last = self.reading.lock().unwrap_or_else(|p| p.into_inner());
        let now = pool.read();
        let claimed = now.claims_since(&last);
        pool.set_target(free, &now);
        *last = now;
        claimed
    }

    /// Free slots (a racy sum).
    pub fn free(&self) -> u64 {
        SlotPool::new(&self.shards).free()
    }
}

#[inline]
fn claim_from(shard: &AtomicU64) -> bool {
    let mut cur = shard.load(Ordering::Relaxed);
    loop {
        if cur & FREE_MASK == 0 {
            return false;
        }
        // One fewer free slot, one more claimed: free > 0, so the low half does not borrow.
        let new = cur.wrapping_add(1 << 32) - 1;
        match shard.compare_exchange_weak(cur, new, Ordering::AcqRel, Ordering::Relaxed) {
            Ok(_) => return true,
            Err(actual) => cur = actual,
        }
    }
}

/// The calling thread's home shard: the process id plus a number handed out once per thread,
/// round-robin, so threads of one process spread over the shards and so do processes sharing
/// a region (nginx workers forked from one master would otherwise all start at 0 and contend
/// on one cache line). Worked out again in a child after `fork`.
#[inline]
pub(crate) fn home_shard() -> usize {
    use std::cell::Cell;
    use std::sync::atomic::{AtomicUsize, Ordering as StdOrdering};
    static NEXT: AtomicUsize = AtomicUsize::new(0);
    thread_local! {
        static HOME: Cell<(u64, usize)> = const { Cell::new((u64::MAX, 0)) };
    }
    let generation = crate::random::fork_generation();
    HOME.with(|h| {
        let (g, v) = h.get();
        if g == generation {
            return v;
        }
        let v = (std::process::id() as usize).wrapping_add(NEXT.fetch_add(1, StdOrdering::Relaxed));
        h.set((generation, v));
        v
    })
}

#[cfg(all(test, not(velvet_rope_loom)))]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicUsize;

    fn shards(n: usize) -> Vec<CachePadded<AtomicU64>> {
        (0..n)
            .map(|_| CachePadded::new(AtomicU64::new(0)))
            .collect()
    }

    /// A forked child (an nginx worker from its master) does not inherit its parent's home
    /// shard: with it, every worker would claim from the same shard first.
    #[test]
    fn forked_child_gets_its_own_home_shard() {
        let parent = home_shard();
        let mut fds = [0i32; 2];
        // SAFETY: `fds` has room for the two descriptors `pipe` writes.
        assert_eq!(unsafe { libc::pipe(fds.as_mut_ptr()) }, 0);
        // SAFETY: the child only reads a thread-local, an atomic and its pid, writes to a
        // pipe and leaves with `_exit`; it takes no lock another thread could hold.
        let pid = unsafe { libc::fork() };
        assert!(pid >= 0, "fork failed");
        if pid == 0 {
            let child = home_shard().to_le_bytes();
            // SAFETY: `child` is 8 readable bytes; `_exit` leaves without the harness's atexit work.
            unsafe {
                libc::write(fds[1], child.as_ptr().cast(), child.len());
                libc::_exit(0);
            }
        }
        let mut buf = [0u8; 8];
        // SAFETY: `buf` is 8 writable bytes; `pid` is our child.
        unsafe {
            libc::close(fds[1]);
            assert_eq!(libc::read(fds[0], buf.as_mut_ptr().cast(), 8), 8);
            libc::close(fds[0]);
            libc::waitpid(pid, std::ptr::null_mut(), 0);
        }
        assert_ne!(usize::from_le_bytes(buf), parent);
        assert_eq!(home_shard(), parent, "the parent's thread keeps its shard");
    }

    #[test]
    fn claims_steal_before_giving_up() {
        let s = shards(4);
        let pool = SlotPool::new(&s);
        let r = pool.read();
        pool.set_target(3, &r);
        // Shard 3 holds nothing (3 slots over 4 shards), yet its callers still get slots.
        assert!(pool.try_claim(3));
        assert!(pool.try_claim(3));
        assert!(pool.try_claim(3));
        assert!(!pool.try_claim(3));
        assert!(!pool.try_claim(0));
        assert_eq!(pool.read().claims_since(&r), 3);
    }

    #[test]
    fn claims_between_reading_and_write_come_out_of_the_new_budget() {
        let s = shards(2);
        let pool = SlotPool::new(&s);
        let r0 = pool.read();
        pool.set_target(10, &r0);
        let r1 = pool.read();
        for _ in 0..4 {
            assert!(pool.try_claim(0));
        }
        // Target computed from r1 is 5: the 4 claims made since r1 leave 1.
        assert_eq!(pool.set_target(5, &r1), 0);
        assert_eq!(pool.free(), 1);
        // A target smaller than what was claimed since the reading leaves 0 and reports nothing
        // owed only if the extra claims fit; here 4 claims > target 2: 2 over, taken from none.
        let s2 = shards(2);
        let pool2 = SlotPool::new(&s2);
        let r = pool2.read();
        pool2.set_target(10, &r);
        let r = pool2.read();
        for _ in 0..4 {
            assert!(pool2.try_claim(1));
        }
        assert_eq!(pool2.set_target(2, &r), 2);
        assert_eq!(pool2.free(), 0);
    }

    /// Both cores, millions of claims against repeated refills: the number of successful claims
    /// equals exactly what the pool handed out, never more, and contention really happened (in
    /// some rounds more than one thread got slots out of the same refill).
    #[test]
    fn stress_exact_under_contention() {
        let s = shards(4);
        let pool = SlotPool::new(&s);
        let rounds = 200u64;
        let per_round = 5_000u64;
        let threads = 4usize;
        let successes = AtomicUsize::new(0);
        let shared_rounds = AtomicUsize::new(0);
        let mut last = pool.read();
        for _ in 0..rounds {
            let r = pool.read();
            assert_eq!(r.free, 0);
            assert_eq!(pool.set_target(per_round, &r), 0);
            last = r;
            let barrier = std::sync::Barrier::new(threads);
            let got: Vec<usize> = std::thread::scope(|scope| {
                let hs: Vec<_> = (0..threads)
                    .map(|t| {
                        let (pool, successes, barrier) = (&pool, &successes, &barrier);
                        scope.spawn(move || {
                            barrier.wait();
                            let mut mine = 0;
                            while pool.try_claim(t) {
                                mine += 1;
                            }
                            successes.fetch_add(mine, Ordering::Relaxed);
                            mine
                        })
                    })
                    .collect();
                hs.into_iter().map(|h| h.join().unwrap()).collect()
            });
            assert_eq!(got.iter().sum::<usize>() as u64, per_round);
            if got.iter().filter(|&&n| n > 0).count() > 1 {
                shared_rounds.fetch_add(1, Ordering::Relaxed);
            }
        }
        let total = successes.load(Ordering::Relaxed) as u64;
        assert_eq!(total, rounds * per_round);
        assert_eq!(pool.read().claims_since(&last), per_round);
        assert!(
            shared_rounds.load(Ordering::Relaxed) > 0,
            "no round had two threads claiming from the same refill"
        );
    }

    /// Refills racing with claims: the claims made after each reading never exceed the target
    /// computed from that reading plus what `set_target` reported as owed.
    #[test]
    fn stress_refill_races_claims() {
        let s = shards(4);
        let pool = SlotPool::new(&s);
        let stop = std::sync::atomic::AtomicBool::new(false);
        let claimed = AtomicUsize::new(0);
        let first = pool.read();
        std::thread::scope(|scope| {
            for t in 0..2 {
                let (pool, stop, claimed) = (&pool, &stop, &claimed);
                scope.spawn(move || {
                    while !stop.load(Ordering::Relaxed) {
                        if pool.try_claim(t) {
                            claimed.fetch_add(1, Ordering::Relaxed);
                        }
                    }
                });
            }
            let mut prev: Option<(PoolReading, u64, u64)> = None;
            // At least 20,000 refills, and on until the claimers have really raced them.
            let mut round = 0u64;
            while round < 20_000 || (claimed.load(Ordering::Relaxed) < 20_000 && round < 50_000_000)
            {
                round += 1;
                let r = pool.read();
                if let Some((prev_r, prev_target, prev_over)) = &prev {
                    let spent = r.claims_since(prev_r);
                    assert!(
                        spent <= prev_target + prev_over,
                        "round {round}: {spent} claims after a target of {prev_target}"
                    );
                }
                let target = 7 + (round % 3);
                let over = pool.set_target(target, &r);
                prev = Some((r, target, over));
            }
            stop.store(true, Ordering::Relaxed);
        });
        let total = pool.read().claims_since(&first);
        assert_eq!(total, claimed.load(Ordering::Relaxed) as u64);
        assert!(total >= 20_000, "claims raced the refills: {total}");
    }
}
