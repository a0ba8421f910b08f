//! A millisecond clock read with one atomic load.
//!
//! `SystemTime::now()` costs about 40 ns here, twice the whole budget of a `try_acquire`. A
//! [`CoarseClock`] keeps the current time in an atomic that a background thread refreshes
//! every millisecond; reading it is a relaxed load. It is monotonic (derived from `Instant`)
//! and lags real time by at most about one tick, which only makes a rate limiter stricter.
//!
//! A thread does not survive `fork`: in a child of the process that started the clock (a
//! pre-fork server's worker) the clock reads the system clock instead, so it never stands
//! still.

use std::sync::{Arc, OnceLock, Weak};
use std::time::{Duration, Instant};

use crate::clock::{Clock, Millis, SystemClock};
use crate::sync::{AtomicU64, Ordering};

#[derive(Debug)]
struct Inner {
    now: AtomicU64,
    /// The fork generation the ticker thread runs in.
    generation: u64,
}

/// A monotonic millisecond clock refreshed by a background thread.
#[derive(Debug, Clone)]
pub struct CoarseClock {
    inner: Arc<Inner>,
}

impl CoarseClock {
    /// The process-wide coarse clock (its thread starts on first use, ticks every 1 ms).
    pub fn global() -> Self {
        static GLOBAL: OnceLock<CoarseClock> = OnceLock::new();
        GLOBAL
            .get_or_init(|| CoarseClock::start(Duration::from_millis(1)))
            .clone()
    }

    /// Starts a clock ticking every `resolution`; its thread ends when the last clone drops.
    pub fn start(resolution: Duration) -> Self {
        let base = SystemClock.now_ms();
        let origin = Instant::now();
        let inner = Arc::new(Inner {
            now: AtomicU64::new(base),
            generation: crate::random::fork_generation(),
        });
        let weak: Weak<Inner> = Arc::downgrade(&inner);
        let tick = resolution.max(Duration::from_micros(100));
        let spawned = std::thread::Builder::new()
            .name("velvet-rope-clock".into())
            .spawn(move || loop {
                std::thread::sleep(tick);
                let Some(inner) = weak.upgrade() else { return };
                let now = base.saturating_add(origin.elapsed().as_millis() as u64);
                inner.now.fetch_max(now, Ordering::Relaxed);
            });
        if spawned.is_err() {
            // No thread: the clock would stand still, so fall back to a clock that is
            // refreshed on every read by `now_ms` (marked by the sentinel below).
            inner.now.store(STOPPED, Ordering::Relaxed);
        }
        Self { inner }
    }
}

/// Marks a clock whose ticker thread could not be started.
const STOPPED: u64 = u64::MAX;

impl Clock for CoarseClock {
    #[inline]
    fn now_ms(&self) -> Millis {
        // Relaxed: the value is self-contained; no other memory is published through it.
        let now = self.inner.now.load(Ordering::Relaxed);
        if now == STOPPED || crate::random::fork_generation() != self.inner.generation {
            SystemClock.now_ms()
        } else {
            now
        }
    }
}

impl Default for CoarseClock {
    fn default() -> Self {
        Self::global()
    }
}

/// A clock shared by handle, e.g. one [`FakeClock`](crate::clock::FakeClock) driving several
/// limiters and threads in a test.
#[derive(Debug, Default)]
pub struct SharedClock<C>(pub Arc<C>);

impl<C> Clone for SharedClock<C> {
    fn clone(&self) -> Self {
        Self(Arc::clone(&self.0))
    }
}

impl<C: Clock> SharedClock<C> {
    /// Shares `clock`.
    pub fn new(clock: C) -> Self {
        Self(Arc::new(clock))
    }
}

impl<C: Clock> Clock for SharedClock<C> {
    #[inline]
    fn now_ms(&self) -> Millis {
        self.0.now_ms()
    }
}

impl<C> std::ops::Deref for SharedClock<C> {
    type Target = C;

    fn deref(&self) -> &C {
        &self.0
    }
}

#[cfg(all(test, not(velvet_rope_loom)))]
mod tests {
    use super::*;

    /// In a forked child (no ticker thread there) the clock still moves.
    #[test]
    fn the_clock_moves_in_a_forked_child() {
        let clock = CoarseClock::start(Duration::from_millis(1));
        let _ = clock.now_ms();
        let mut pipe = [0i32; 2];
        // SAFETY: creating a pipe into a local array.
        assert_eq!(unsafe { libc::pipe(pipe.as_mut_ptr()) }, 0);
        // SAFETY: the child reads the clock, sleeps, writes 8 bytes and exits without unwinding.
        let pid = unsafe { libc::fork() };
        assert!(pid >= 0);
        if pid == 0 {
            let before = clock.now_ms();
            std::thread::sleep(Duration::from_millis(30));
            let moved = clock.now_ms().saturating_sub(before).to_le_bytes();
            // SAFETY: writing 8 bytes to the pipe, then leaving at once.
            unsafe {
                libc::write(pipe[1], moved.as_ptr().cast(), 8);
                libc::_exit(0);
            }
        }
        let mut moved = [0u8; 8];
        // SAFETY: reading 8 bytes into a local buffer; reaping the child; closing the pipe.
        unsafe {
            assert_eq!(libc::read(pipe[0], moved.as_mut_ptr().cast(), 8), 8);
            libc::waitpid(pid, std::ptr::null_mut(), 0);
            libc::close(pipe[0]);
            libc::close(pipe[1]);
        }
        assert!(
            u64::from_le_bytes(moved) >= 20,
            "the child's clock stood still"
        );
    }
}
