//! A try-lock in shared memory, held by one process at a time, never waited for.
//!
//! The lock is one word: the holder's process id (high 22 bits: Linux's pid limit is 2^22) and
//! the time it was taken, on the host's monotonic clock in milliseconds (low 42 bits: 139
//! years). Owner and time change together in one compare-and-swap, so a process that sees the
//! lock held always sees when it was taken (two words would let a process see a new owner with
//! its predecessor's time, and take a lock that was just won). The host's monotonic clock
//! (`CLOCK_MONOTONIC`) is the same for every process of a host; callers' clocks are never
//! used: they are arguments, and two processes may pass times minutes apart.
//!
//! A caller that finds the lock held gets `None` at once: nothing in velvet-rope waits for it
//! (attaching a region retries for a bounded time, see `directory`). It is taken over:
//! - at once when its holder is dead (`kill(pid, 0)` says no such process: a worker that
//!   crashed mid-tick does not stop the others' ticks);
//! - after [`LIVE_HOLDER_TIMEOUT_MS`] (a room's tick lock: after a second, see
//!   `TickBlock::try_lock`) even when a process of that id lives (a stopped process, or a new
//!   process that got the dead holder's id), or when the time it was taken lies in the future
//!   (a state file kept across a reboot). A holder that wakes up after that checks
//!   [`Held::still_held`] before each step two holders must not both take (an advance's
//!   grants): the sections guarded here take microseconds and are written so that an overlap
//!   cannot corrupt a ledger (see `admission::tick`).
//!
//! A [`Held`] lock is released when it is dropped, panics included.
//!
//! Process ids are only meaningful within one pid namespace: a process that shares a region
//! with processes of another namespace (another container) may take a live holder for dead.
//! Share a region between processes of one pid namespace.

use crate::sync::{AtomicU64, Ordering};

/// A lock held this long is taken over even if a process of the holder's id is alive.
pub(crate) const LIVE_HOLDER_TIMEOUT_MS: u64 = 30_000;

const TIME_BITS: u32 = 42;
const TIME_MASK: u64 = (1 << TIME_BITS) - 1;

/// A view over a lock word.
pub(crate) struct ProcessLock<'a> {
    word: &'a AtomicU64,
    private: bool,
    timeout_ms: u64,
}

/// A held [`ProcessLock`]; released when dropped.
#[must_use]
pub(crate) struct Held<'a> {
    word: &'a AtomicU64,
    token: u64,
}

impl Held<'_> {
    /// Whether this process still holds the lock (it was not taken over while it was
    /// stopped). Checked before each step that must not be repeated by two holders.
    pub(crate) fn still_held(&self) -> bool {
        self.word.load(Ordering::Acquire) == self.token
    }

    /// Leaves `value` in the lock word in place of this holder's mark (a lock word that ends
    /// as a state, such as "written"), if this process still holds it. Whether it did.
    pub(crate) fn publish(self, value: u64) -> bool {
        let ok = self
            .word
            .compare_exchange(self.token, value, Ordering::AcqRel, Ordering::Acquire)
            .is_ok();
        std::mem::forget(self);
        ok
    }
}

impl Drop for Held<'_> {
    fn drop(&mut self) {
        if crate::env::crashing() {
            // A crashed process releases nothing; its successor takes the lock over.
            return;
        }
        // Only our own token is released: a successor that took the lock over keeps it.
        let _ = self
            .word
            .compare_exchange(self.token, 0, Ordering::AcqRel, Ordering::Acquire);
    }
}

/// The lock word of process `pid` taking the lock at `now_ms` (never zero: pids are positive).
fn token(pid: u32, now_ms: u64) -> u64 {
    (u64::from(pid) << TIME_BITS) | (now_ms & TIME_MASK)
}

impl<'a> ProcessLock<'a> {
    /// Wraps the lock word of memory other processes may map.
    pub(crate) fn new(word: &'a AtomicU64) -> Self {
        Self {
            word,
            private: false,
            timeout_ms: LIVE_HOLDER_TIMEOUT_MS,
        }
    }

    /// The same lock, taken over from a live holder after `ms` (for sections that take
    /// microseconds, whose holder's stop would stall others: see `TickBlock::try_lock`).
    pub(crate) fn with_timeout(self, ms: u64) -> Self {
        Self {
            timeout_ms: ms,
            ..self
        }
    }

    /// Wraps the lock word of memory this process owns: no other process maps it, so a
    /// holder of another process id held it in the process this one was forked from, on a
    /// thread that does not exist here, and is taken over at once.
    pub(crate) fn private(word: &'a AtomicU64) -> Self {
        Self {
            word,
            private: true,
            timeout_ms: LIVE_HOLDER_TIMEOUT_MS,
        }
    }

    /// Takes the lock if it is free, or held by a dead process, or held for longer than
    /// [`LIVE_HOLDER_TIMEOUT_MS`], or (private memory) held by another process. Never waits.
    pub(crate) fn try_lock(&self) -> Option<Held<'a>> {
        self.try_lock_unless(0)
    }

    /// As [`ProcessLock::try_lock`], except that a word holding `done` (a value no lock mark
    /// takes, nonzero) is left alone: the lock guarded something that is finished.
    pub(crate) fn try_lock_unless(&self, done: u64) -> Option<Held<'a>> {
        let held = self.word.load(Ordering::Acquire);
        if done != 0 && held == done {
            return None;
        }
        let now_ms = monotonic_ms() & TIME_MASK;
        let me = crate::env::pid();
        if held != 0 {
            let taken = held & TIME_MASK;
            let holder = (held >> TIME_BITS) as u32;
            let expired = taken > now_ms || now_ms - taken >= self.timeout_ms;
            let forked = self.private && holder != me;
            if !expired && !forked && process_alive(holder) {
                return None;
            }
        }
        let mine = token(me, now_ms);
        self.word
            .compare_exchange(held, mine, Ordering::AcqRel, Ordering::Acquire)
            .ok()?;
        Some(Held {
            word: self.word,
            token: mine,
        })
    }
}

/// The host's monotonic clock, in milliseconds (shared by every process of the host).
pub(crate) fn monotonic_ms() -> u64 {
    crate::env::monotonic_ms()
}

/// Whether a process with this id exists (see `env::process_alive`).
fn process_alive(pid: u32) -> bool {
    crate::env::process_alive(pid)
}

#[cfg(all(test, not(velvet_rope_loom)))]
pub(crate) mod tests {
    use super::*;

    /// The pid of a process that has exited and been reaped.
    pub(crate) fn dead_pid() -> u32 {
        let mut child = std::process::Command::new("true").spawn().unwrap();
        let pid = child.id();
        child.wait().unwrap();
        pid
    }

    /// The lock word of `pid` taken `ago_ms` milliseconds ago.
    pub(crate) fn held_by(pid: u32, ago_ms: u64) -> u64 {
        token(pid, monotonic_ms() - ago_ms)
    }

    #[test]
    fn one_holder_at_a_time_released_on_drop() {
        let w = AtomicU64::new(0);
        let lock = ProcessLock::new(&w);
        let held = lock.try_lock().expect("free");
        assert!(lock.try_lock().is_none(), "held by a live process");
        drop(held);
        assert_eq!(w.load(Ordering::Relaxed), 0);
        let again = lock.try_lock();
        assert!(again.is_some());
    }

    /// A lock another live process has just won is not taken: its time came with it.
    #[test]
    fn a_lock_just_won_is_not_stolen() {
        let w = AtomicU64::new(0);
        // SAFETY: getppid has no preconditions.
        let parent = unsafe { libc::getppid() } as u32;
        w.store(held_by(parent, 0), Ordering::Relaxed);
        assert!(ProcessLock::new(&w).try_lock().is_none());
    }

    #[test]
    fn a_dead_holder_is_taken_over_at_once() {
        let w = AtomicU64::new(held_by(dead_pid(), 0));
        let lock = ProcessLock::new(&w);
        let held = lock.try_lock().expect("the holder is dead");
        assert_eq!(
            w.load(Ordering::Relaxed) >> TIME_BITS,
            u64::from(std::process::id())
        );
        drop(held);
        assert_eq!(w.load(Ordering::Relaxed), 0);
    }

    #[test]
    fn a_live_holder_is_taken_over_only_after_the_timeout() {
        // SAFETY: getppid has no preconditions.
        let parent = unsafe { libc::getppid() } as u32;
        let w = AtomicU64::new(held_by(parent, LIVE_HOLDER_TIMEOUT_MS - 5_000));
        assert!(ProcessLock::new(&w).try_lock().is_none());
        w.store(held_by(parent, LIVE_HOLDER_TIMEOUT_MS), Ordering::Relaxed);
        let next = ProcessLock::new(&w).try_lock();
        assert!(next.is_some(), "held too long");
        drop(next);
        // Taken "in the future": another boot's clock.
        w.store(token(parent, monotonic_ms() + 60_000), Ordering::Relaxed);
        assert!(ProcessLock::new(&w).try_lock().is_some());
    }

    /// A holder that was taken over does not release its successor's lock.
    #[test]
    fn a_stale_holder_cannot_release_its_successor() {
        let w = AtomicU64::new(0);
        let stale = Held {
            word: &w,
            token: held_by(dead_pid(), 0),
        };
        w.store(held_by(std::process::id(), 0), Ordering::Relaxed);
        let now = w.load(Ordering::Relaxed);
        drop(stale);
        assert_eq!(w.load(Ordering::Relaxed), now);
    }
}
