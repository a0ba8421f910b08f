//! Client-side enforcement of a concurrency lease.
//!
//! One `AtomicU64` holds `capacity` (high 32 bits) and `in_use` (low 32 bits), so every
//! decision reads both in one snapshot. Acquire is a CAS loop that never lets `in_use` pass
//! `capacity`; release is one `fetch_sub` (the guard holds what it subtracts, so the low half
//! never borrows from the high half).
//!
//! **Memory orders.** A successful acquire is `Acquire` and a release is `Release`: whatever a
//! holder did before releasing happens-before the next holder's work, so a gauge of capacity 1
//! is a mutex. Capacity changes are `Relaxed` (self-contained values).

use std::sync::Arc;
use std::time::Duration;

use super::coordinator::Lease;
use super::error::LeaseError;
use crate::sync::{AtomicU64, Ordering};

const LOW: u64 = 0xFFFF_FFFF;

#[inline]
fn split(word: u64) -> (u64, u64) {
    (word >> 32, word & LOW)
}

/// The pure acquire decision: with `word` = (capacity, in_use), may `n` more be taken?
#[inline]
pub fn decide_acquire(word: u64, n: u64) -> Option<u64> {
    let (capacity, in_use) = split(word);
    if in_use + n <= capacity {
        Some(word + n)
    } else {
        None
    }
}

#[derive(Debug)]
#[repr(align(128))]
struct Inner {
    state: AtomicU64,
}

/// A concurrency limiter over a leased capacity; clones share it.
#[derive(Debug, Clone)]
pub struct Gauge {
    inner: Arc<Inner>,
}

/// Holds permits of a [`Gauge`]; releases them when dropped.
#[derive(Debug)]
#[must_use = "the permits are released as soon as the guard is dropped"]
pub struct GaugeGuard<'a> {
    gauge: &'a Gauge,
    n: u32,
}

/// Like [`GaugeGuard`] but owning a handle on the gauge (for `'static` tasks).
#[derive(Debug)]
#[must_use = "the permits are released as soon as the guard is dropped"]
pub struct OwnedGaugeGuard {
    gauge: Gauge,
    n: u32,
}

/// Converts a leased capacity to whole units (floor, clamped to `u32`).
pub fn units(capacity: f64) -> u32 {
    if capacity.is_nan() || capacity <= 0.0 {
        0
    } else if capacity >= f64::from(u32::MAX) {
        u32::MAX
    } else {
        capacity.floor() as u32
    }
}

impl Gauge {
    /// A gauge allowing `capacity` concurrent units.
    pub fn new(capacity: u32) -> Self {
        Self {
            inner: Arc::new(Inner {
                state: AtomicU64::new(u64::from(capacity) << 32),
            }),
        }
    }

    /// A gauge at the capacity granted by `lease` (rounded down).
    pub fn from_lease(lease: &Lease) -> Self {
        Self::new(units(lease.capacity))
    }

    /// Changes the capacity; holders keep their permits, new acquires see the new capacity.
    pub fn set_capacity(&self, capacity: u32) {
        let mut cur = self.inner.state.load(Ordering::Relaxed);
        loop {
            let next = (u64::from(capacity) << 32) | (cur & LOW);
            match self.inner.state.compare_exchange_weak(
                cur,
                next,
                Ordering::Relaxed,
                Ordering::Relaxed,
            ) {
                Ok(_) => return,
                Err(actual) => cur = actual,
            }
        }
    }

    /// The current capacity.
    pub fn capacity(&self) -> u32 {
        split(self.inner.state.load(Ordering::Relaxed)).0 as u32
    }

    /// Units currently held.
    pub fn in_use(&self) -> u32 {
        split(self.inner.state.load(Ordering::Relaxed)).1 as u32
    }

    /// Takes `n` units if available now, without a guard (for bindings that pair it with
    /// [`release_permits`](Self::release_permits)). Lock-free, no allocation.
    #[inline]
    pub fn try_acquire_permits(&self, n: u32) -> bool {
        let n = u64::from(n);
        let mut cur = self.inner.state.load(Ordering::Relaxed);
        loop {
            let Some(next) = decide_acquire(cur, n) else {
                return false;
            };
            match self.inner.state.compare_exchange_weak(
                cur,
                next,
                Ordering::Acquire,
                Ordering::Relaxed,
            ) {
                Ok(_) => return true,
                Err(actual) => cur = actual,
            }
        }
    }

    /// Returns `n` units taken with [`try_acquire_permits`](Self::try_acquire_permits).
    /// Releasing more than is held is refused (and changes nothing).
    pub fn release_permits(&self, n: u32) -> Result<(), LeaseError> {
        let n = u64::from(n);
        let mut cur = self.inner.state.load(Ordering::Relaxed);
        loop {
            let held = cur & LOW;
            if n > held {
                return Err(LeaseError::ReleaseUnderflow { released: n, held });
            }
            match self.inner.state.compare_exchange_weak(
                cur,
                cur - n,
                Ordering::Release,
                Ordering::Relaxed,
            ) {
                Ok(_) => return Ok(()),
                Err(actual) => cur = actual,
            }
        }
    }

    #[inline]
    fn release_held(&self, n: u32) {
        // The caller holds `n` units, so `in_use >= n` and the low half cannot borrow.
        self.inner.state.fetch_sub(u64::from(n), Ordering::Release);
    }

    /// Takes one unit if available now.
    #[inline]
    pub fn try_acquire(&self) -> Option<GaugeGuard<'_>> {
        self.try_acquire_n(1)
    }

    /// Takes `n` units if available now.
    #[inline]
    pub fn try_acquire_n(&self, n: u32) -> Option<GaugeGuard<'_>> {
        // `then`, not `then_some`: building a guard eagerly would release on drop.
        self.try_acquire_permits(n)
            .then(|| GaugeGuard { gauge: self, n })
    }

    /// Takes `n` units if available now, with a guard that owns a handle on the gauge.
    pub fn try_acquire_owned(&self, n: u32) -> Option<OwnedGaugeGuard> {
        self.try_acquire_permits(n).then(|| OwnedGaugeGuard {
            gauge: self.clone(),
            n,
        })
    }

    fn check_fits(&self, n: u32) -> Result<(), LeaseError> {
        let capacity = self.capacity();
        if n > capacity && capacity > 0 {
            return Err(LeaseError::ExceedsLimit {
                requested: u64::from(n),
                limit: u64::from(capacity),
            });
        }
        Ok(())
    }

    /// Blocks until `n` units are taken (backing off from 50 us to 5 ms between tries). Fails
    /// if `n` is above a non-zero capacity; waits through a zero lease.
    pub fn acquire(&self, n: u32) -> Result<GaugeGuard<'_>, LeaseError> {
        let mut backoff = Duration::from_micros(50);
        loop {
            self.check_fits(n)?;
            if let Some(g) = self.try_acquire_n(n) {
                return Ok(g);
            }
            std::thread::sleep(backoff);
            backoff = (backoff * 2).min(Duration::from_millis(5));
        }
    }

    /// [`acquire`](Self::acquire) for a caller that must notice something while it waits (a
    /// signal, such as Python's Ctrl-C; a shutdown): asks `interrupted` at least every `every`
    /// of waiting and stops when it answers true. `Ok(Some(guard))`: the units are held;
    /// `Ok(None)`: interrupted, nothing held.
    pub fn acquire_interruptibly(
        &self,
        n: u32,
        every: Duration,
        mut interrupted: impl FnMut() -> bool,
    ) -> Result<Option<GaugeGuard<'_>>, LeaseError> {
        let mut backoff = Duration::from_micros(50);
        let mut waited = Duration::ZERO;
        loop {
            self.check_fits(n)?;
            if let Some(g) = self.try_acquire_n(n) {
                return Ok(Some(g));
            }
            std::thread::sleep(backoff);
            waited += backoff;
            backoff = (backoff * 2).min(Duration::from_millis(5));
            if waited >= every {
                waited = Duration::ZERO;
                if interrupted() {
                    return Ok(None);
                }
            }
        }
    }

    /// Waits asynchronously, on any executor, until `n` units are taken.
    pub async fn acquire_async(&self, n: u32) -> Result<GaugeGuard<'_>, LeaseError> {
        let mut backoff = Duration::from_micros(50);
        loop {
            self.check_fits(n)?;
            if let Some(g) = self.try_acquire_n(n) {
                return Ok(g);
            }
            super::timer::sleep(backoff).await;
            backoff = (backoff * 2).min(Duration::from_millis(5));
        }
    }
}

impl GaugeGuard<'_> {
    /// Units held by this guard.
    pub fn permits(&self) -> u32 {
        self.n
    }
}

impl Drop for GaugeGuard<'_> {
    fn drop(&mut self) {
        self.gauge.release_held(self.n);
    }
}

impl OwnedGaugeGuard {
    /// Units held by this guard.
    pub fn permits(&self) -> u32 {
        self.n
    }
}

impl Drop for OwnedGaugeGuard {
    fn drop(&mut self) {
        self.gauge.release_held(self.n);
    }
}

#[cfg(all(test, not(velvet_rope_loom)))]
mod tests {
    use super::*;

    #[test]
    fn guard_releases_on_drop() {
        let g = Gauge::new(2);
        let a = g.try_acquire().unwrap();
        let b = g.try_acquire().unwrap();
        assert!(g.try_acquire().is_none());
        drop(a);
        assert_eq!(g.in_use(), 1);
        let c = g.try_acquire_owned(1).unwrap();
        drop((b, c));
        assert_eq!(g.in_use(), 0);
    }

    #[test]
    fn shrink_keeps_holders_and_blocks_new() {
        let g = Gauge::new(3);
        let held = g.try_acquire_n(3).unwrap();
        g.set_capacity(1);
        assert!(g.try_acquire().is_none());
        drop(held);
        assert!(g.try_acquire().is_some());
        assert!(matches!(g.acquire(2), Err(LeaseError::ExceedsLimit { .. })));
    }

    #[test]
    fn raw_permits_refuse_underflow() {
        let g = Gauge::new(5);
        assert!(g.try_acquire_permits(2));
        assert!(matches!(
            g.release_permits(3),
            Err(LeaseError::ReleaseUnderflow {
                released: 3,
                held: 2
            })
        ));
        g.release_permits(2).unwrap();
        assert_eq!(units(2.9), 2);
        assert_eq!(units(-1.0), 0);
    }

    /// A wait that must notice something asks at least every `every` of waiting, stops when
    /// told to, and holds nothing then.
    #[test]
    fn an_interruptible_wait_asks_and_stops() {
        let g = Gauge::new(0);
        let mut asked = 0;
        let held = g
            .acquire_interruptibly(1, Duration::from_millis(2), || {
                asked += 1;
                asked == 3
            })
            .unwrap();
        assert!(held.is_none() && asked == 3);
        assert_eq!(g.in_use(), 0);
        let g = Gauge::new(1);
        let guard = g
            .acquire_interruptibly(1, Duration::from_millis(2), || true)
            .unwrap();
        assert_eq!(guard.map(|g| g.permits()), Some(1));
        assert_eq!(g.in_use(), 0, "released on drop");
        assert!(g
            .acquire_interruptibly(2, Duration::from_millis(2), || true)
            .is_err());
    }
}

#[cfg(all(test, velvet_rope_loom))]
mod loom_tests {
    use super::*;
    use loom::sync::Arc as LoomArc;

    /// Threads acquire and release under a capacity that another thread shrinks: the number
    /// of holders inside never exceeds the capacity they acquired under, nothing leaks.
    #[test]
    fn never_exceeds_capacity() {
        loom::model(|| {
            let gauge = Gauge::new(1);
            let inside = LoomArc::new(AtomicU64::new(0));
            let handles: Vec<_> = (0..2)
                .map(|_| {
                    let gauge = gauge.clone();
                    let inside = inside.clone();
                    loom::thread::spawn(move || {
                        if let Some(g) = gauge.try_acquire() {
                            let was = inside.fetch_add(1, Ordering::Relaxed);
                            assert_eq!(was, 0, "two holders of a capacity-1 gauge");
                            inside.fetch_sub(1, Ordering::Relaxed);
                            drop(g);
                        }
                    })
                })
                .collect();
            for h in handles {
                h.join().unwrap();
            }
            assert_eq!(gauge.in_use(), 0);
        });
    }

    #[test]
    fn shrink_races_with_acquire() {
        loom::model(|| {
            let gauge = Gauge::new(2);
            let shrink = {
                let gauge = gauge.clone();
                loom::thread::spawn(move || gauge.set_capacity(1))
            };
            let take = {
                let gauge = gauge.clone();
                loom::thread::spawn(move || {
                    let a = gauge.try_acquire_owned(1);
                    let b = gauge.try_acquire_owned(1);
                    (a.is_some() as u32) + (b.is_some() as u32)
                })
            };
            shrink.join().unwrap();
            let taken = take.join().unwrap();
            assert!((1..=2).contains(&taken));
            assert_eq!(gauge.in_use(), 0);
            assert_eq!(gauge.capacity(), 1);
            let _one = gauge.try_acquire().unwrap();
            assert!(gauge.try_acquire().is_none());
        });
    }
}
