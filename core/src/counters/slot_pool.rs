//! The sharded, exact slot pool: how many visitors may still be admitted.
//!
//! Each shard is one `AtomicU64` on its own cache line holding a number of free slots. A claim
//! takes one slot from the caller's home shard with a compare-and-swap that never takes the
//! count below zero; a caller whose shard is empty steals from the others before giving up. So
//! a slot is taken only where one is free (nothing is over-admitted), and nobody is refused
//! while a slot is free anywhere in the pool (when no grant or revoke runs at the same time).
//!
//! The pool is a *ledger*, never a target that is written back. `tick`, the only writer besides
//! claimers, changes it in two ways only:
//! - [`SlotPool::grant`] adds slots (a `fetch_add` per shard): it cannot take anything from a
//!   claim in flight.
//! - [`SlotPool::revoke`] takes back slots that are free (a compare-and-swap per shard, never
//!   below zero): a slot is either claimed or revoked, never both.
//!
//! So at every instant `claims made so far <= slots granted - slots revoked`, whatever claims run
//! concurrently with a tick. The tick moves the ledger towards a target computed from figures
//! that no racing claim can make wrong (see `admission::budget`); that is what makes the room's
//! limits exact under concurrent ticks. The previous design wrote each shard's new share one
//! by one and took claims made meanwhile back as debt, which could not always be repaid: a
//! tick during a rush over-admitted.
//!
//! **The ledger lives in the shards.** Each shard's word holds two counts: its free slots (low
//! 32 bits) and the claims made from it (high 32 bits, modulo 2^32). A claim moves one from the
//! first to the second in its one compare-and-swap, and a slot given back moves it back, so
//! `free + claims` of a shard changes only when a tick grants or revokes, and by exactly that:
//! the sum over the shards (modulo 2^32; [`SlotPool::ledger32`]) is the pool's ledger,
//! granted minus revoked, read exactly whatever claims run meanwhile. A grant and its record
//! are one atomic add, so a process that dies in the middle of a tick leaves a ledger that
//! says what it really granted (a ledger kept in a word of its own, written before or after
//! the grant, would be wrong by what the dead tick was granting: slots handed out twice, or
//! lost for good).
//!
//! Memory orders: a successful claim is `AcqRel`. Its acquire half synchronises with the
//! `Release` of the grant or revoke that last wrote the shard, so a claimer that took a slot a
//! tick granted also sees everything that tick wrote before granting (the bucket it opened,
//! which the claimer then books the admission to). Grants and revokes are `AcqRel` for the same
//! reason in the other direction. Each shard is otherwise an independent counter: exactness
//! rests on the modification order of each shard alone, not on any order between shards.

use crossbeam_utils::CachePadded;

use crate::sync::{AtomicU64, Ordering};

/// A view over the shards of one pool.
#[derive(Clone, Copy)]
pub(crate) struct SlotPool<'a> {
    shards: &'a [CachePadded<AtomicU64>],
}

impl<'a> SlotPool<'a> {
    /// Wraps shards (at least one).
    pub(crate) fn new(shards: &'a [CachePadded<AtomicU64>]) -> Self {
        debug_assert!(!shards.is_empty());
        Self { shards }
    }

    /// Takes one slot: from shard `home` (modulo the shard count) if it has one, else from the
    /// first other shard that has one, in [`probe`] order. Returns the shard it came from (to
    /// give it back with [`SlotPool::unclaim`]). Lock-free; exact.
    #[inline]
    pub(crate) fn try_claim(&self, home: usize) -> Option<usize> {
        let n = self.shards.len();
        let home = home % n;
        if claim_from(&self.shards[home]) {
            return Some(home);
        }
        self.steal(home, n)
    }

    /// The rest of [`SlotPool::try_claim`]: every other shard, in [`probe`] order. Not cold:
    /// the tick spreads slots over every shard, and shards outnumber the callers (twice the
    /// CPUs by default), so callers steal about half the time.
    #[inline]
    fn steal(&self, home: usize, n: usize) -> Option<usize> {
        for k in 1..n {
            let i = probe(home, k, n);
            if claim_from(&self.shards[i]) {
                return Some(i);
            }
        }
        None
    }

    /// Gives back a slot claimed from `shard` that was not used after all (a sibling request
    /// with the same ticket was admitted first).
    pub(crate) fn unclaim(&self, shard: usize) {
        self.shards[shard % self.shards.len()].fetch_add(UNCLAIM, Ordering::AcqRel);
    }

    /// Adds `n` free slots, spread evenly over the shards starting at shard `start`. Each
    /// shard's part is one atomic add, its record in the ledger included; `go_on` is asked
    /// before each (an advance that lost its lock while stopped stops granting).
    pub(crate) fn grant_while(&self, n: u64, start: usize, mut go_on: impl FnMut() -> bool) -> u64 {
        let len = self.shards.len() as u64;
        let (each, extra) = (n / len, n % len);
        let mut granted = 0;
        for k in 0..len {
            let add = (each + u64::from(k < extra)).min(MAX_SHARD_GRANT);
            if add > 0 {
                if !go_on() {
                    break;
                }
                let i = ((start as u64 + k) % len) as usize;
                self.shards[i].fetch_add(add, Ordering::AcqRel);
                granted += add;
            }
        }
        granted
    }

    /// Adds `n` free slots, spread evenly over the shards starting at shard `start`.
    pub(crate) fn grant(&self, n: u64, start: usize) {
        self.grant_while(n, start, || true);
    }

    /// The pool's ledger, modulo 2^32: slots granted minus slots revoked since the shards were
    /// zero. Exact at any instant: claims and slots given back do not change it.
    pub(crate) fn ledger32(&self) -> u32 {
        self.shards.iter().fold(0u32, |sum, s| {
            sum.wrapping_add(shard_ledger(s.load(Ordering::Acquire)))
        })
    }

    /// Takes back up to `n` free slots; returns how many it took. Slots claimed meanwhile are
    /// not taken (they are spent), so the result can be smaller than `n`.
    pub(crate) fn revoke(&self, n: u64) -> u64 {
        let mut taken = 0;
        loop {
            let before = taken;
            for shard in self.shards {
                if taken == n {
                    return taken;
                }
                let mut cur = shard.load(Ordering::Acquire);
                loop {
                    let take = (cur & FREE).min(n - taken);
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
                            taken += take;
                            break;
                        }
                        Err(actual) => cur = actual,
                    }
                }
            }
            // A pass that found nothing: everything left was claimed. (Slots given back by
            // `unclaim` during the pass are caught by the next pass.)
            if taken == before {
                return taken;
            }
        }
    }

    /// Free slots across all shards (a racy sum: exact when nothing runs concurrently).
    pub(crate) fn free(&self) -> u64 {
        self.shards
            .iter()
            .map(|s| s.load(Ordering::Acquire) & FREE)
            .sum()
    }
}

/// The most one grant adds to one shard: free counts stay far below 2^32 (a room's limits are
/// at most 2^20 visitors, a `passthrough` room keeps 2^30 free over all its shards).
const MAX_SHARD_GRANT: u64 = 1 << 31;

/// The 64-bit ledger that `observed` (a pool's [`SlotPool::ledger32`], or the sum of several)
/// continues from `previous` (the 64-bit ledger as last known): the one congruent to it
/// modulo 2^32 nearest `previous`. Exact while the ledger moved by less than 2^31 since
/// `previous` was read (a tick moves it by at most a room's limits).
pub(crate) fn widen_ledger(previous: u64, observed: u32) -> u64 {
    let delta = observed.wrapping_sub(previous as u32) as i32;
    previous.wrapping_add(delta as i64 as u64)
}

/// The `k`-th shard a caller whose home is `home` tries, of `n`. With `n` a power of two (the
/// default), the caller XORs its home with `k` bit-reversed: the homes of neighbouring callers
/// (threads number their homes consecutively) are the last they steal from, and each falls back
/// first on the shard halfway round, which no neighbour calls home, then a quarter, and so on.
/// Two threads over four shards then each drain their home and one shard nobody else takes
/// from, and never meet on a cache line while both have slots. Any other `n`: home, home + 1,
/// and so on. Either way every shard is tried once.
#[inline]
fn probe(home: usize, k: usize, n: usize) -> usize {
    if n.is_power_of_two() {
        let bits = n.trailing_zeros();
        let reversed = if bits == 0 {
            0
        } else {
            k.reverse_bits() >> (usize::BITS - bits)
        };
        home ^ reversed
    } else if home + k >= n {
        home + k - n
    } else {
        home + k
    }
}

/// The free slots of a shard's word (low half).
const FREE: u64 = 0xFFFF_FFFF;
/// Added to a shard's word by a claim: one free slot less, one claim more (the free count is
/// at least one, so nothing borrows; the claims wrap modulo 2^32 out of the word).
const CLAIM: u64 = (1 << 32) - 1;
/// Added by a slot given back: one free slot more, one claim less.
const UNCLAIM: u64 = CLAIM.wrapping_neg();

/// A shard word's ledger: its free slots plus the claims made from it (modulo 2^32).
#[inline]
fn shard_ledger(word: u64) -> u32 {
    ((word & FREE) as u32).wrapping_add((word >> 32) as u32)
}

/// One claim from one shard: a compare-and-swap that takes a slot if there is one.
#[inline]
fn claim_from(shard: &AtomicU64) -> bool {
    let mut cur = shard.load(Ordering::Relaxed);
    loop {
        if cur & FREE == 0 {
            return false;
        }
        match shard.compare_exchange_weak(
            cur,
            cur.wrapping_add(CLAIM),
            Ordering::AcqRel,
            Ordering::Relaxed,
        ) {
            Ok(_) => return true,
            Err(actual) => cur = actual,
        }
    }
}

/// A slot pool that owns its shards: the engine's exact, sharded counter of free slots, for
/// use on its own (benches, or any "at most N until refilled" budget).
pub struct OwnedSlotPool {
    shards: Box<[CachePadded<AtomicU64>]>,
}

impl std::fmt::Debug for OwnedSlotPool {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("OwnedSlotPool")
            .field("shards", &self.shards.len())
            .field("free", &self.free())
            .finish()
    }
}

impl OwnedSlotPool {
    /// A pool of `shards` shards (at least one), holding no slots.
    pub fn new(shards: usize) -> Self {
        Self {
            shards: (0..shards.max(1))
                .map(|_| CachePadded::new(AtomicU64::new(0)))
                .collect(),
        }
    }

    /// Takes one slot, from the calling thread's home shard or, failing that, any other.
    #[inline]
    pub fn try_claim(&self) -> bool {
        SlotPool::new(&self.shards)
            .try_claim(home_shard())
            .is_some()
    }

    /// Adds `n` free slots.
    pub fn grant(&self, n: u64) {
        SlotPool::new(&self.shards).grant(n, home_shard());
    }

    /// Takes back up to `n` free slots; returns how many were taken.
    pub fn revoke(&self, n: u64) -> u64 {
        SlotPool::new(&self.shards).revoke(n)
    }

    /// Free slots (a racy sum).
    pub fn free(&self) -> u64 {
        SlotPool::new(&self.shards).free()
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

    /// Every shard is tried once, whatever the home; neighbours steal from each other last.
    #[test]
    fn probe_orders_are_permutations() {
        for n in [1usize, 2, 3, 4, 6, 8, 64] {
            for home in 0..n {
                let mut seen: Vec<usize> = (0..n).map(|k| probe(home, k, n)).collect();
                assert_eq!(seen[0], home);
                seen.sort_unstable();
                assert_eq!(seen, (0..n).collect::<Vec<_>>(), "n {n} home {home}");
            }
        }
        let order = |home| (0..4).map(|k| probe(home, k, 4)).collect::<Vec<_>>();
        assert_eq!(order(0), [0, 2, 1, 3]);
        assert_eq!(order(1), [1, 3, 0, 2]);
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
            // SAFETY: `child` is 8 readable bytes; `_exit` ends the child at once, without
            // running the harness's exit handlers a second time.
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
        pool.grant(3, 0);
        // Shard 3 holds nothing (3 slots over 4 shards from shard 0), yet its callers still
        // get slots: halfway round first (shard 1), then the rest.
        assert_eq!(pool.try_claim(3), Some(1));
        assert!(pool.try_claim(3).is_some());
        assert!(pool.try_claim(3).is_some());
        assert_eq!(pool.try_claim(3), None);
        assert_eq!(pool.try_claim(0), None);
        assert_eq!(pool.free(), 0);
    }

    #[test]
    fn revoke_takes_only_what_is_free_and_unclaim_gives_back() {
        let s = shards(3);
        let pool = SlotPool::new(&s);
        pool.grant(5, 1);
        let a = pool.try_claim(0).unwrap();
        pool.try_claim(0).unwrap();
        assert_eq!(pool.revoke(10), 3, "two of five are spent");
        assert_eq!(pool.free(), 0);
        pool.unclaim(a);
        assert_eq!(pool.free(), 1);
        assert_eq!(pool.revoke(1), 1);
        assert_eq!(pool.revoke(1), 0);
    }

    /// Both cores, claims against grants and revokes: the claims never exceed what was granted
    /// and not revoked, and they account for every slot exactly (granted = claimed + revoked +
    /// still free). Contention really happened: claimers raced the revokes.
    #[test]
    fn stress_ledger_is_exact_under_contention() {
        let s = shards(4);
        let pool = SlotPool::new(&s);
        let claimed = AtomicUsize::new(0);
        let stop = std::sync::atomic::AtomicBool::new(false);
        let (mut granted, mut revoked) = (0u64, 0u64);
        let mut raced = 0;
        std::thread::scope(|scope| {
            for t in 0..3 {
                let (pool, claimed, stop) = (&pool, &claimed, &stop);
                scope.spawn(move || {
                    while !stop.load(Ordering::Relaxed) {
                        if pool.try_claim(t).is_some() {
                            claimed.fetch_add(1, Ordering::Relaxed);
                        }
                    }
                });
            }
            // At least 50,000 rounds, and on until the claimers have really raced them.
            let mut round = 0u64;
            while round < 50_000 || (claimed.load(Ordering::Relaxed) < 20_000 && round < 50_000_000)
            {
                round += 1;
                let n = 1 + round % 7;
                pool.grant(n, round as usize);
                granted += n;
                // Every third round takes back all it saw free a moment ago: claims racing
                // that revoke leave it short.
                let want = if round % 3 == 0 {
                    pool.free()
                } else {
                    round % 5
                };
                let got = pool.revoke(want);
                if got < want {
                    raced += 1;
                }
                revoked += got;
            }
            stop.store(true, Ordering::Relaxed);
        });
        let claimed = claimed.load(Ordering::Relaxed) as u64;
        assert_eq!(granted, claimed + revoked + pool.free());
        assert!(claimed > 10_000, "claimers ran: {claimed}");
        assert!(raced > 0, "no revoke ever lost a slot to a claim");
    }
}
