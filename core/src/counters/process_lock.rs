//! A try-lock in shared memory, held by one process at a time, never waited for.
//!
//! The lock word holds the holder's process id (high 32 bits) and a random tag (low 32 bits,
//! never zero), so a holder that lost the lock cannot release its successor's; a second word
//! holds when it was taken, on the host's monotonic clock (`CLOCK_MONOTONIC`, the same for every
//! process of a host, and never the callers' clocks: those are arguments, and two processes may
//! pass times minutes apart). A caller that finds the lock held gets `None` at once: nothing in
//! velvet-rope ever waits for it. It is taken over:
//! - at once when its holder is dead (`kill(pid, 0)` says no such process: a worker that
//!   crashed mid-tick does not stop the others' ticks);
//! - after [`LIVE_HOLDER_TIMEOUT_MS`] even when the holder lives (a stopped process), or when the
//!   time it was taken lies in the future (a state file kept across a reboot). A holder that
//!   wakes up after that may overlap with its successor for the rest of its critical section;
//!   the sections guarded here take microseconds, so that needs a process stopped for half a
//!   minute in the middle of one.
//!
//! Process ids are only meaningful within one pid namespace: a process that shares a region
//! with processes of another namespace (another container) may take a live holder for dead.
//! Share a region between processes of one pid namespace.

use crate::sync::{AtomicU64, Ordering};

/// A lock held this long is taken over even if its holder is alive.
pub(crate) const LIVE_HOLDER_TIMEOUT_MS: u64 = 30_000;

/// A view over a lock word and its time word.
pub(crate) struct ProcessLock<'a> {
    word: &'a AtomicU64,
    since: &'a AtomicU64,
}

/// Proof of holding a [`ProcessLock`]: give it back with [`ProcessLock::unlock`].
#[must_use]
pub(crate) struct Held(u64);

impl<'a> ProcessLock<'a> {
    /// Wraps the two words.
    pub(crate) fn new(word: &'a AtomicU64, since: &'a AtomicU64) -> Self {
        Self { word, since }
    }

    /// Takes the lock if it is free, or held by a dead process, or held for longer than
    /// [`LIVE_HOLDER_TIMEOUT_MS`]. Never waits.
    pub(crate) fn try_lock(&self) -> Option<Held> {
        let held = self.word.load(Ordering::Acquire);
        let now_ms = monotonic_ms();
        if held != 0 {
            let taken = self.since.load(Ordering::Acquire);
            let expired = taken > now_ms || now_ms - taken >= LIVE_HOLDER_TIMEOUT_MS;
            if !expired && process_alive((held >> 32) as u32) {
                return None;
            }
        }
        let token = (u64::from(std::process::id()) << 32) | u64::from(tag());
        self.word
            .compare_exchange(held, token, Ordering::AcqRel, Ordering::Acquire)
            .ok()?;
        self.since.store(now_ms, Ordering::Release);
        Some(Held(token))
    }

    /// Releases the lock if `held` still holds it.
    pub(crate) fn unlock(&self, held: Held) {
        let _ = self
            .word
            .compare_exchange(held.0, 0, Ordering::AcqRel, Ordering::Acquire);
    }

    /// Whether the lock is held right now (by anyone, alive or not).
    #[cfg(test)]
    pub(crate) fn is_held(&self) -> bool {
        self.word.load(Ordering::Acquire) != 0
    }
}

/// The host's monotonic clock, in milliseconds (shared by every process of the host).
pub(crate) fn monotonic_ms() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid, writable timespec; CLOCK_MONOTONIC is always available on Linux.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    (ts.tv_sec as u64) * 1000 + (ts.tv_nsec as u64) / 1_000_000
}

/// A random non-zero tag.
fn tag() -> u32 {
    (crate::random::u64() as u32).max(1)
}

/// Whether a process with this id exists (or might: any answer but "no such process" counts
/// as alive, so a process of another user is never taken for dead).
fn process_alive(pid: u32) -> bool {
    if pid == std::process::id() {
        return true;
    }
    let Ok(pid) = libc::pid_t::try_from(pid) else {
        return false;
    };
    if pid <= 0 {
        return false;
    }
    // SAFETY: signal 0 only checks that the process exists; nothing is sent.
    let r = unsafe { libc::kill(pid, 0) };
    r == 0 || std::io::Error::last_os_error().raw_os_error() != Some(libc::ESRCH)
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

    #[test]
    fn one_holder_at_a_time_and_no_waiting() {
        let (w, t) = (AtomicU64::new(0), AtomicU64::new(0));
        let lock = ProcessLock::new(&w, &t);
        let held = lock.try_lock().expect("free");
        assert!(lock.try_lock().is_none(), "held by a live process");
        lock.unlock(held);
        assert!(!lock.is_held());
        assert!(lock.try_lock().is_some());
    }

    #[test]
    fn a_dead_holder_is_taken_over_at_once() {
        let (w, t) = (AtomicU64::new(0), AtomicU64::new(0));
        w.store((u64::from(dead_pid()) << 32) | 5, Ordering::Relaxed);
        t.store(monotonic_ms(), Ordering::Relaxed);
        let lock = ProcessLock::new(&w, &t);
        let held = lock.try_lock().expect("the holder is dead");
        // The dead holder's token no longer releases it.
        lock.unlock(Held((u64::from(dead_pid()) << 32) | 5));
        assert!(lock.is_held());
        lock.unlock(held);
        assert!(!lock.is_held());
    }

    #[test]
    fn a_live_holder_is_taken_over_only_after_the_timeout() {
        let (w, t) = (AtomicU64::new(0), AtomicU64::new(0));
        let lock = ProcessLock::new(&w, &t);
        let _stuck = lock.try_lock().unwrap();
        assert!(lock.try_lock().is_none());
        // As if taken half a minute ago, then as if taken in the future (another boot).
        t.store(monotonic_ms() - LIVE_HOLDER_TIMEOUT_MS, Ordering::Relaxed);
        let _next = lock.try_lock().expect("held too long");
        t.store(monotonic_ms() + 60_000, Ordering::Relaxed);
        assert!(lock.try_lock().is_some(), "taken in the future");
    }
}
