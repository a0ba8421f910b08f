//! Client-side enforcement of a rate lease.
//!
//! A GCRA (generic cell rate algorithm, a token bucket kept as one "theoretical arrival time")
//! in a single `AtomicU64`, updated by one `compare_exchange_weak` loop around the pure
//! decision function [`decide`]. Permits are spread evenly: one every `1 s / rate`, with at
//! most one slice's share (`rate / slices_per_second`, at least 1) available at once.
//!
//! **Guarantee.** For every window `[t, t + W)` the permits granted at times in the window
//! sum to less than `rate * W + burst`, whatever the interleaving of threads; over a long run
//! the rate is at most the leased rate. With `slices_per_second >= rate` (burst 1) and single
//! permits, every window of one second holds at most `ceil(rate)` permits.
//!
//! **Lease changes** are one atomic store of a packed `(interval, burst)` word that every
//! clone reads on every call, so a shrinking lease takes effect on the next call everywhere.
//!
//! **Memory orders.** All accesses are `Relaxed`: the permit state is one location whose
//! read-modify-writes are totally ordered by the CAS (no two threads can both take the same
//! part of the budget), the configuration word is self-contained and read whole, and no other
//! memory is published through either.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use super::coarse_clock::CoarseClock;
use super::coordinator::Lease;
use super::error::LeaseError;
use crate::clock::{Clock, Millis};
use crate::sync::{AtomicU64, Ordering};

const NS_PER_MS: u64 = 1_000_000;
const NS_PER_SEC: f64 = 1e9;
const INTERVAL_BITS: u32 = 40;
const INTERVAL_MASK: u64 = (1 << INTERVAL_BITS) - 1;
/// Interval meaning "rate 0": no permit until the lease changes.
const ZERO_RATE: u64 = INTERVAL_MASK;
const BURST_BITS: u32 = 23;
/// The most permits one call can take at once.
pub const MAX_BURST: u64 = (1 << BURST_BITS) - 1;
const TRACK_BIT: u64 = 1 << 63;
/// Default number of slices per second the rate is spread over.
pub const DEFAULT_SLICES_PER_SECOND: u32 = 10;

/// Why a permit request was refused: an outcome, not an error.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Denied {
    /// Not enough budget yet; the request would succeed at this time (ms since the epoch) if
    /// nobody else takes permits first and the lease does not change.
    NotUntil(Millis),
    /// The current lease is 0: nothing until the lease changes.
    ZeroRate,
    /// More permits than can ever be granted at once under the current lease.
    ExceedsBurst {
        /// The most permits one call can take now.
        burst: u64,
    },
}

/// The pure GCRA decision: with the theoretical arrival time `tat` (ns), at `now` (ns), may `n`
/// permits be taken with one permit per `interval` ns and at most `burst` at once? Returns the
/// new `tat` or when to retry (ns).
#[inline]
pub fn decide(tat: u64, now: u64, n: u64, interval: u64, burst: u64) -> Result<u64, u64> {
    let start = if tat > now { tat } else { now };
    let new_tat = start.saturating_add(n.saturating_mul(interval));
    let horizon = now.saturating_add(burst.saturating_mul(interval));
    if new_tat <= horizon {
        Ok(new_tat)
    } else {
        Err(new_tat - burst.saturating_mul(interval))
    }
}

/// Rate parameters derived from a leased rate.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RateParams {
    /// Nanoseconds between permits (rounded up, so the effective rate never exceeds the lease).
    pub interval_ns: u64,
    /// Permits available at once.
    pub burst: u64,
}

impl RateParams {
    /// Parameters for `rate` permits per second spread over `slices_per_second` slices.
    /// Rates too small to represent (below one permit per 18 minutes), negative or NaN give 0.
    /// The burst is at least one millisecond's worth, the clock's resolution.
    pub fn new(rate: f64, slices_per_second: u32) -> Self {
        if rate.is_nan() || rate <= 0.0 {
            return Self::zero();
        }
        let interval = (NS_PER_SEC / rate).ceil();
        if interval >= ZERO_RATE as f64 {
            return Self::zero();
        }
        let interval_ns = (interval as u64).max(1);
        let slices = f64::from(slices_per_second.clamp(1, 1000));
        let per_slice = (rate / slices).floor();
        let per_ms = (rate / 1000.0).ceil();
        let burst = per_slice.max(per_ms).clamp(1.0, MAX_BURST as f64) as u64;
        Self { interval_ns, burst }
    }

    fn zero() -> Self {
        Self {
            interval_ns: ZERO_RATE,
            burst: 0,
        }
    }

    fn pack(self, track: bool) -> u64 {
        (self.interval_ns & INTERVAL_MASK)
            | (self.burst.min(MAX_BURST) << INTERVAL_BITS)
            | if track { TRACK_BIT } else { 0 }
    }

    fn unpack(word: u64) -> (Self, bool) {
        (
            Self {
                interval_ns: word & INTERVAL_MASK,
                burst: (word >> INTERVAL_BITS) & MAX_BURST,
            },
            word & TRACK_BIT != 0,
        )
    }

    /// The effective permits per second (0 for a zero lease).
    pub fn rate(self) -> f64 {
        if self.interval_ns == ZERO_RATE {
            0.0
        } else {
            NS_PER_SEC / self.interval_ns as f64
        }
    }
}

#[derive(Debug)]
#[repr(align(128))]
struct Shared {
    tat: AtomicU64,
    config: AtomicU64,
    demand: AtomicU64,
    slices_per_second: AtomicU64,
}

/// A rate limiter over a leased rate; clones share the budget and see lease changes at once.
#[derive(Debug, Clone)]
pub struct RateLimiter<C: Clock = CoarseClock> {
    shared: Arc<Shared>,
    clock: C,
}

impl RateLimiter<CoarseClock> {
    /// A limiter at `rate` permits per second, on the process-wide coarse clock.
    pub fn new(rate: f64) -> Self {
        Self::with_clock(rate, DEFAULT_SLICES_PER_SECOND, CoarseClock::global())
    }

    /// A limiter at the rate granted by `lease`.
    pub fn from_lease(lease: &Lease) -> Self {
        Self::new(lease.capacity)
    }
}

impl<C: Clock> RateLimiter<C> {
    /// A limiter at `rate` permits per second spread over `slices_per_second` slices, reading
    /// time from `clock`.
    pub fn with_clock(rate: f64, slices_per_second: u32, clock: C) -> Self {
        let params = RateParams::new(rate, slices_per_second);
        Self {
            shared: Arc::new(Shared {
                tat: AtomicU64::new(0),
                config: AtomicU64::new(params.pack(false)),
                demand: AtomicU64::new(0),
                slices_per_second: AtomicU64::new(u64::from(slices_per_second)),
            }),
            clock,
        }
    }

    /// Changes the leased rate; every clone sees it on its next call.
    pub fn set_rate(&self, rate: f64) {
        let slices = self.shared.slices_per_second.load(Ordering::Relaxed) as u32;
        let params = RateParams::new(rate, slices);
        let mut cur = self.shared.config.load(Ordering::Relaxed);
        loop {
            let track = cur & TRACK_BIT != 0;
            match self.shared.config.compare_exchange_weak(
                cur,
                params.pack(track),
                Ordering::Relaxed,
                Ordering::Relaxed,
            ) {
                Ok(_) => return,
                Err(actual) => cur = actual,
            }
        }
    }

    /// The current parameters.
    pub fn params(&self) -> RateParams {
        RateParams::unpack(self.shared.config.load(Ordering::Relaxed)).0
    }

    /// Starts or stops counting requested permits (for demand estimation, see
    /// [`demand`](Self::demand)). Off by default: it costs one more atomic add per call.
    pub fn set_demand_tracking(&self, on: bool) {
        if on {
            self.shared.config.fetch_or(TRACK_BIT, Ordering::Relaxed);
        } else {
            self.shared.config.fetch_and(!TRACK_BIT, Ordering::Relaxed);
        }
    }

    /// Total permits requested (granted or not) while demand tracking was on.
    pub fn demand(&self) -> u64 {
        self.shared.demand.load(Ordering::Relaxed)
    }

    /// The clock the limiter reads.
    pub fn clock(&self) -> &C {
        &self.clock
    }

    /// Takes one permit if the lease allows it now. Lock-free, no allocation.
    #[inline]
    pub fn try_acquire(&self) -> bool {
        self.check_at(1, self.clock.now_ms()).is_ok()
    }

    /// Takes `n` permits at once if the lease allows it now.
    #[inline]
    pub fn try_acquire_n(&self, n: u32) -> bool {
        self.check_at(n, self.clock.now_ms()).is_ok()
    }

    /// Takes `n` permits now or says why not and until when.
    #[inline]
    pub fn check(&self, n: u32) -> Result<(), Denied> {
        self.check_at(n, self.clock.now_ms())
    }

    /// Takes `n` permits at time `now` (ms) or says why not.
    #[inline]
    pub fn check_at(&self, n: u32, now: Millis) -> Result<(), Denied> {
        self.check_inner(u64::from(n), now, true)
    }

    #[inline]
    fn check_inner(&self, n: u64, now: Millis, count: bool) -> Result<(), Denied> {
        let (params, track) = RateParams::unpack(self.shared.config.load(Ordering::Relaxed));
        if track && count {
            self.shared.demand.fetch_add(n, Ordering::Relaxed);
        }
        if params.interval_ns == ZERO_RATE {
            return Err(Denied::ZeroRate);
        }
        if n > params.burst {
            return Err(Denied::ExceedsBurst {
                burst: params.burst,
            });
        }
        let now_ns = now.saturating_mul(NS_PER_MS);
        let mut tat = self.shared.tat.load(Ordering::Relaxed);
        loop {
            let new_tat = decide(tat, now_ns, n, params.interval_ns, params.burst)
                .map_err(|retry| Denied::NotUntil(retry.div_ceil(NS_PER_MS)))?;
            match self.shared.tat.compare_exchange_weak(
                tat,
                new_tat,
                Ordering::Relaxed,
                Ordering::Relaxed,
            ) {
                Ok(_) => return Ok(()),
                Err(actual) => tat = actual,
            }
        }
    }

    /// How long to wait after a denial, or the error that waiting cannot fix.
    fn wait_for(&self, n: u64, denied: Denied) -> Result<Duration, LeaseError> {
        match denied {
            Denied::NotUntil(at) => {
                let ms = at.saturating_sub(self.clock.now_ms()).clamp(1, 100);
                Ok(Duration::from_millis(ms))
            }
            Denied::ZeroRate => Ok(Duration::from_millis(10)),
            Denied::ExceedsBurst { burst } => Err(LeaseError::ExceedsLimit {
                requested: n,
                limit: burst,
            }),
        }
    }

    fn count_demand(&self, n: u64) {
        if self.shared.config.load(Ordering::Relaxed) & TRACK_BIT != 0 {
            self.shared.demand.fetch_add(n, Ordering::Relaxed);
        }
    }

    /// Blocks the thread until `n` permits are taken. Waits through a zero lease (until the
    /// lease changes); fails only if `n` is above the most one call can take. Sleeps in real
    /// time, so use it with a real clock.
    pub fn acquire(&self, n: u32) -> Result<(), LeaseError> {
        self.acquire_interruptibly(n, Duration::MAX, || false)
            .map(|_| ())
    }

    /// [`acquire`](Self::acquire) for a caller that must notice something while it waits (a
    /// signal, such as Python's Ctrl-C; a shutdown): sleeps at most `every` at a time, asks
    /// `interrupted` after each sleep, and stops waiting when it answers true. `Ok(true)`: the
    /// permits are taken; `Ok(false)`: interrupted, nothing taken.
    pub fn acquire_interruptibly(
        &self,
        n: u32,
        every: Duration,
        mut interrupted: impl FnMut() -> bool,
    ) -> Result<bool, LeaseError> {
        let n = u64::from(n);
        self.count_demand(n);
        loop {
            match self.check_inner(n, self.clock.now_ms(), false) {
                Ok(()) => return Ok(true),
                Err(d) => std::thread::sleep(self.wait_for(n, d)?.min(every)),
            }
            if interrupted() {
                return Ok(false);
            }
        }
    }

    /// Waits asynchronously until `n` permits are taken, on any executor (a shared timer
    /// thread wakes the task).
    pub async fn acquire_async(&self, n: u32) -> Result<(), LeaseError> {
        self.acquire_with(n, super::timer::sleep).await
    }

    /// Like [`acquire_async`](Self::acquire_async) with the executor's own sleep, e.g.
    /// `limiter.acquire_with(1, tokio::time::sleep)`.
    pub async fn acquire_with<S, F>(&self, n: u32, mut sleep: S) -> Result<(), LeaseError>
    where
        S: FnMut(Duration) -> F,
        F: Future<Output = ()>,
    {
        let n = u64::from(n);
        self.count_demand(n);
        loop {
            match self.check_inner(n, self.clock.now_ms(), false) {
                Ok(()) => return Ok(()),
                Err(d) => sleep(self.wait_for(n, d)?).await,
            }
        }
    }
}

#[cfg(all(test, not(velvet_rope_loom)))]
mod tests {
    use super::*;
    use crate::clock::FakeClock;

    #[test]
    fn params_never_exceed_rate() {
        for rate in [0.3, 1.0, 3.0, 7.0, 100.0, 999.9, 1e6, 3e9] {
            let p = RateParams::new(rate, 10);
            assert!(p.rate() <= rate, "{rate}: {p:?}");
            assert!(p.burst >= 1);
        }
        assert_eq!(RateParams::new(0.0, 10).rate(), 0.0);
        assert_eq!(RateParams::new(f64::NAN, 10).rate(), 0.0);
        assert_eq!(RateParams::new(-1.0, 10).rate(), 0.0);
    }

    #[test]
    fn spreads_over_slices() {
        // 100/s in 5 slices: 20 at once, then one every 10 ms ("20 every 200 ms").
        let clock = FakeClock::new(1_000);
        let rl = RateLimiter::with_clock(100.0, 5, clock);
        let granted = (0..50).filter(|_| rl.try_acquire()).count();
        assert_eq!(granted, 20);
        assert_eq!(rl.check(1), Err(Denied::NotUntil(1_010)));
        rl.clock().advance(200);
        assert_eq!((0..50).filter(|_| rl.try_acquire()).count(), 20);
        assert_eq!(rl.check(21), Err(Denied::ExceedsBurst { burst: 20 }));
    }

    #[test]
    fn lease_change_is_seen_by_clones() {
        let clock = crate::lease::SharedClock::new(FakeClock::new(5_000));
        let rl = RateLimiter::with_clock(100.0, 10, clock);
        let other = rl.clone();
        other.set_rate(0.0);
        assert_eq!(rl.check(1), Err(Denied::ZeroRate));
        other.set_rate(1000.0);
        assert!(rl.try_acquire());
    }

    #[test]
    fn demand_tracking() {
        let rl = RateLimiter::with_clock(1.0, 10, FakeClock::new(5_000));
        for _ in 0..5 {
            rl.try_acquire();
        }
        assert_eq!(rl.demand(), 0);
        rl.set_demand_tracking(true);
        for _ in 0..5 {
            rl.try_acquire();
        }
        assert_eq!(rl.demand(), 5);
        assert_eq!(rl.params().burst, 1);
    }

    #[test]
    fn blocking_and_async_acquire_wait_for_budget() {
        let rl = RateLimiter::with_clock(200.0, 200, crate::clock::SystemClock);
        let start = std::time::Instant::now();
        for _ in 0..5 {
            rl.acquire(1).unwrap();
        }
        // 1 at once, then one per 5 ms.
        assert!(
            start.elapsed() >= Duration::from_millis(15),
            "{:?}",
            start.elapsed()
        );
        assert!(matches!(
            rl.acquire(2),
            Err(LeaseError::ExceedsLimit {
                requested: 2,
                limit: 1
            })
        ));
        let fut = rl.acquire_async(1);
        block_on(fut).unwrap();
    }

    /// A minimal executor: proves `acquire_async` needs none in particular.
    fn block_on<F: Future>(fut: F) -> F::Output {
        use std::task::{Context, Poll, Wake, Waker};
        struct ThreadWaker(std::thread::Thread);
        impl Wake for ThreadWaker {
            fn wake(self: Arc<Self>) {
                self.0.unpark();
            }
        }
        let waker = Waker::from(Arc::new(ThreadWaker(std::thread::current())));
        let mut cx = Context::from_waker(&waker);
        let mut fut = std::pin::pin!(fut);
        loop {
            if let Poll::Ready(v) = fut.as_mut().poll(&mut cx) {
                return v;
            }
            std::thread::park();
        }
    }

    /// A wait that must notice something (Python's Ctrl-C) asks between slices of at most
    /// `every`, stops when told to, and takes nothing then; permits free in time are taken.
    #[test]
    fn an_interruptible_wait_asks_and_stops() {
        let rl = RateLimiter::new(0.0);
        let mut asked = 0;
        let start = std::time::Instant::now();
        let taken = rl
            .acquire_interruptibly(1, Duration::from_millis(2), || {
                asked += 1;
                asked == 3
            })
            .unwrap();
        assert!(!taken && asked == 3);
        assert!(start.elapsed() < Duration::from_secs(1));
        let rl = RateLimiter::new(1000.0);
        assert!(rl
            .acquire_interruptibly(1, Duration::from_millis(2), || true)
            .unwrap());
        assert!(rl
            .acquire_interruptibly(1_000_000, Duration::from_millis(2), || true)
            .is_err());
    }
}

#[cfg(all(test, velvet_rope_loom))]
mod loom_tests {
    use super::*;
    use crate::clock::FakeClock;
    use loom::sync::Arc as LoomArc;

    /// Two threads race for a burst of one: exactly one wins, and the CAS loop never loses or
    /// duplicates budget, also while the lease changes underneath.
    #[test]
    fn cas_never_double_spends() {
        loom::model(|| {
            let rl = LoomArc::new(RateLimiter::with_clock(10.0, 10, FakeClock::new(1_000)));
            // burst 1 at 10/s
            let wins = LoomArc::new(AtomicU64::new(0));
            let handles: Vec<_> = (0..2)
                .map(|_| {
                    let rl = rl.clone();
                    let wins = wins.clone();
                    loom::thread::spawn(move || {
                        if rl.try_acquire() {
                            wins.fetch_add(1, Ordering::Relaxed);
                        }
                    })
                })
                .collect();
            for h in handles {
                h.join().unwrap();
            }
            assert_eq!(wins.load(Ordering::Relaxed), 1);
        });
    }

    #[test]
    fn shrinking_lease_is_respected() {
        loom::model(|| {
            let rl = LoomArc::new(RateLimiter::with_clock(20.0, 10, FakeClock::new(1_000)));
            let setter = {
                let rl = rl.clone();
                loom::thread::spawn(move || rl.set_rate(0.0))
            };
            let taker = {
                let rl = rl.clone();
                loom::thread::spawn(move || (0..3).filter(|_| rl.try_acquire()).count())
            };
            setter.join().unwrap();
            let taken = taker.join().unwrap();
            // burst 2 at 20/s; once the zero lease is seen nothing more is granted.
            assert!(taken <= 2);
            assert!(!rl.try_acquire());
        });
    }
}
