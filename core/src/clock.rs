//! Time, injected.
//!
//! Decision logic never reads a clock: every entry point takes `now` as milliseconds since the
//! Unix epoch. A [`Clock`] is only the source of that argument for callers that want one, so
//! tests and the simulator run in virtual time.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{SystemTime, UNIX_EPOCH};

/// Milliseconds since the Unix epoch.
pub type Millis = u64;

/// The latest time the engine takes (2106-02-07, the end of 32-bit seconds, which tickets
/// carry): later times are taken as this one. The C ABI refuses them instead, since a caller
/// passing microseconds where milliseconds are due (a common mistake) passes times far past it.
pub const MAX_NOW_MS: Millis = u32::MAX as u64 * 1000;

/// A source of the current time in milliseconds since the Unix epoch.
pub trait Clock: Send + Sync {
    /// The current time.
    fn now_ms(&self) -> Millis;
}

/// The wall clock.
#[derive(Debug, Default, Clone, Copy)]
pub struct SystemClock;

impl Clock for SystemClock {
    fn now_ms(&self) -> Millis {
        SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| d.as_millis() as u64)
            .unwrap_or(0)
    }
}

/// The wall clock at the kernel's tick resolution (`CLOCK_REALTIME_COARSE`: 1 to 4 ms here):
/// one vDSO read without the hardware clock, a few nanoseconds against about 30 for
/// [`SystemClock`]. Admission decisions count in seconds and minutes, so a per-request clock
/// can be this one. Falls back to [`SystemClock`] where the coarse clock is missing.
#[derive(Debug, Default, Clone, Copy)]
pub struct CoarseSystemClock;

impl Clock for CoarseSystemClock {
    #[inline]
    fn now_ms(&self) -> Millis {
        #[cfg(target_os = "linux")]
        {
            let mut ts = libc::timespec {
                tv_sec: 0,
                tv_nsec: 0,
            };
            // SAFETY: `ts` is a valid, writable timespec; clock_gettime only writes it.
            if unsafe { libc::clock_gettime(libc::CLOCK_REALTIME_COARSE, &mut ts) } == 0
                && ts.tv_sec >= 0
            {
                return ts.tv_sec as u64 * 1000 + ts.tv_nsec as u64 / 1_000_000;
            }
        }
        SystemClock.now_ms()
    }
}

/// A clock that only moves when told to: for tests, benches and simulations.
#[derive(Debug, Default)]
pub struct FakeClock {
    now: AtomicU64,
}

impl FakeClock {
    /// A fake clock that reads `start`.
    pub fn new(start: Millis) -> Self {
        Self {
            now: AtomicU64::new(start),
        }
    }

    /// Moves the clock forward by `ms`.
    pub fn advance(&self, ms: u64) {
        self.now.fetch_add(ms, Ordering::SeqCst);
    }

    /// Sets the clock to `ms`.
    pub fn set(&self, ms: Millis) {
        self.now.store(ms, Ordering::SeqCst);
    }
}

impl Clock for FakeClock {
    fn now_ms(&self) -> Millis {
        self.now.load(Ordering::SeqCst)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_coarse_clock_follows_the_system_clock() {
        for _ in 0..100 {
            let before = SystemClock.now_ms();
            let coarse = CoarseSystemClock.now_ms();
            let after = SystemClock.now_ms();
            // At most one kernel tick (4 ms at HZ=250, 10 ms at HZ=100) behind.
            assert!(coarse <= after, "{coarse} is ahead of {after}");
            assert!(
                coarse + 10 >= before,
                "{coarse} lags {before} by more than a tick"
            );
        }
    }
}
