//! Client side: rate limiter windows under threads with a fake clock, gauge stress, lease
//! refresh and the failure modes.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use velvet_rope::clock::{Clock, FakeClock, Millis};
use velvet_rope::lease::{
    AlgorithmKind, ClientOptions, ClientStatus, Coordinator, Gauge, Lease, LeaseClient, LeaseError,
    LeaseRequest, LeaseSource, RateLimiter, RefreshFailureMode, ResourceTemplate, SharedClock,
    TemplateSet, Wants,
};

/// Checks every window [t, t + w) starting at a grant: permits < rate * w + burst.
fn check_windows(grants: &mut [(Millis, u64)], rate: f64, burst: u64) -> u64 {
    grants.sort_unstable();
    let mut worst = 0;
    for w in [1u64, 5, 10, 50, 100, 250, 500, 1000, 2000] {
        let bound = rate * w as f64 / 1000.0 + burst as f64;
        let (mut j, mut sum) = (0usize, 0u64);
        for i in 0..grants.len() {
            while j < grants.len() && grants[j].0 < grants[i].0 + w {
                sum += grants[j].1;
                j += 1;
            }
            assert!(
                (sum as f64) < bound + 1e-9,
                "window [{}, +{w}) holds {sum} permits, bound {bound}",
                grants[i].0
            );
            worst = worst.max(sum);
            sum -= grants[i].1;
        }
    }
    worst
}

fn hammer(rate: f64, slices: u32, threads: usize, sizes: &[u32]) -> (Vec<(Millis, u64)>, u64) {
    let clock = SharedClock::new(FakeClock::new(1_000_000));
    let rl = RateLimiter::with_clock(rate, slices, clock.clone());
    let burst = rl.params().burst;
    let done = Arc::new(AtomicBool::new(false));
    let attempts = Arc::new(AtomicU64::new(0));
    let workers: Vec<_> = (0..threads)
        .map(|t| {
            let rl = rl.clone();
            let done = done.clone();
            let attempts = attempts.clone();
            let sizes = sizes.to_vec();
            std::thread::spawn(move || {
                let mut log = Vec::new();
                let mut k = t;
                while !done.load(Ordering::Relaxed) {
                    let n = sizes[k % sizes.len()];
                    k += 1;
                    let now = rl.clock().now_ms();
                    if rl.check_at(n, now).is_ok() {
                        log.push((now, u64::from(n)));
                    }
                    attempts.fetch_add(1, Ordering::Relaxed);
                }
                log
            })
        })
        .collect();
    // Advance the fake clock 1 ms at a time, only once the threads made a few attempts in the
    // current millisecond, so the limiter is saturated whatever the scheduler does.
    for _ in 0..3_000 {
        let seen = attempts.load(Ordering::Relaxed);
        while attempts.load(Ordering::Relaxed) < seen + 4 * threads as u64 {
            std::thread::yield_now();
        }
        clock.advance(1);
    }
    done.store(true, Ordering::Relaxed);
    let mut all = Vec::new();
    for w in workers {
        all.extend(w.join().unwrap());
    }
    (all, burst)
}

#[test]
fn rate_limiter_never_exceeds_lease_over_any_window() {
    let rate = 500.0;
    let (mut grants, burst) = hammer(rate, 10, 4, &[1, 2, 3]);
    assert_eq!(burst, 50);
    check_windows(&mut grants, rate, burst);
    // Not vacuous: the limiter was saturated and handed out nearly the whole lease.
    let total: u64 = grants.iter().map(|g| g.1).sum();
    assert!(
        total as f64 >= 0.9 * rate * 3.0,
        "only {total} permits in 3 s"
    );
    assert!(total as f64 <= rate * 3.0 + burst as f64);
}

#[test]
fn burst_one_is_strict_per_second() {
    // One slice per permit: every 1 s window holds at most `rate` single permits.
    let rate = 200.0;
    let (mut grants, burst) = hammer(rate, 200, 3, &[1]);
    assert_eq!(burst, 1);
    let worst = check_windows(&mut grants, rate, burst);
    assert!(worst <= 200 * 2, "{worst}");
    grants.sort_unstable();
    let mut j = 0;
    for i in 0..grants.len() {
        while j < grants.len() && grants[j].0 < grants[i].0 + 1000 {
            j += 1;
        }
        assert!(
            j - i <= 200,
            "{} permits in the second from {}",
            j - i,
            grants[i].0
        );
    }
}

#[test]
fn shrinking_lease_takes_effect_for_every_thread_at_once() {
    let clock = SharedClock::new(FakeClock::new(10_000));
    let rl = RateLimiter::with_clock(1000.0, 10, clock.clone());
    let copies: Vec<_> = (0..4).map(|_| rl.clone()).collect();
    assert!(copies.iter().all(|c| c.try_acquire()));
    rl.set_rate(0.0);
    let handles: Vec<_> = copies
        .into_iter()
        .map(|c| std::thread::spawn(move || (0..1000).filter(|_| c.try_acquire()).count()))
        .collect();
    for h in handles {
        assert_eq!(h.join().unwrap(), 0);
    }
}

#[test]
fn gauge_never_exceeds_capacity_under_contention() {
    // Two permits, takers of one or two: on two cores a taker of two finds one held often.
    const CAP: u32 = 2;
    const ITERS: usize = 200_000;
    let gauge = Gauge::new(CAP);
    let inside = Arc::new(AtomicU64::new(0));
    let max_inside = Arc::new(AtomicU64::new(0));
    let acquired = Arc::new(AtomicU64::new(0));
    let refused = Arc::new(AtomicU64::new(0));
    let barrier = Arc::new(std::sync::Barrier::new(4));
    let handles: Vec<_> = (0..4)
        .map(|t| {
            let (gauge, inside, max_inside, acquired, refused, barrier) = (
                gauge.clone(),
                inside.clone(),
                max_inside.clone(),
                acquired.clone(),
                refused.clone(),
                barrier.clone(),
            );
            std::thread::spawn(move || {
                barrier.wait();
                // At least ITERS attempts, and on until some attempt found the gauge full
                // (bounded), so the test proves contention happened.
                let mut i = 0;
                while i < ITERS || (refused.load(Ordering::Relaxed) == 0 && i < 100 * ITERS) {
                    let n = if (i + t) % 7 == 0 { 2 } else { 1 };
                    i += 1;
                    match gauge.try_acquire_n(n) {
                        Some(g) => {
                            let now =
                                inside.fetch_add(u64::from(n), Ordering::SeqCst) + u64::from(n);
                            max_inside.fetch_max(now, Ordering::SeqCst);
                            assert!(now <= u64::from(CAP), "{now} holders of a gauge of {CAP}");
                            acquired.fetch_add(u64::from(n), Ordering::Relaxed);
                            // Hold the permits a moment, as a real user of a gauge would.
                            for _ in 0..20 {
                                std::hint::spin_loop();
                            }
                            inside.fetch_sub(u64::from(n), Ordering::SeqCst);
                            drop(g);
                        }
                        None => {
                            refused.fetch_add(1, Ordering::Relaxed);
                        }
                    }
                }
            })
        })
        .collect();
    for h in handles {
        h.join().unwrap();
    }
    assert_eq!(gauge.in_use(), 0, "every permit came back");
    assert!(max_inside.load(Ordering::SeqCst) <= u64::from(CAP));
    let acquired = acquired.load(Ordering::Relaxed);
    assert!(acquired > 0);
    // Contention happened: some attempts found the gauge full.
    assert!(
        refused.load(Ordering::Relaxed) > 0,
        "no contention observed"
    );
}

/// A lease source that can be switched to fail.
struct Flaky {
    inner: Coordinator,
    failing: AtomicBool,
    requests: Mutex<Vec<f64>>,
}

impl LeaseSource for Flaky {
    fn request_lease(&self, req: &LeaseRequest<'_>, now: Millis) -> Result<Lease, LeaseError> {
        self.requests.lock().unwrap().push(req.wants);
        if self.failing.load(Ordering::SeqCst) {
            return Err(LeaseError::RefreshFailed {
                resource: req.resource.into(),
                message: "unreachable".into(),
            });
        }
        self.inner.request_with(req, now)
    }

    fn release_lease(&self, client_id: &str, resource: &str) -> Result<bool, LeaseError> {
        self.inner.release(client_id, resource)
    }
}

fn flaky(capacity: f64, safe: Option<f64>) -> Arc<Flaky> {
    let mut t = ResourceTemplate::new("*", capacity, AlgorithmKind::FairShare);
    t.algorithm.lease_length = 10.0;
    t.algorithm.refresh_interval = 2.0;
    t.algorithm.learning_mode_duration = Some(0.0);
    t.safe_capacity = safe;
    Arc::new(Flaky {
        inner: Coordinator::new(TemplateSet::from_templates(vec![t]).unwrap(), 0),
        failing: AtomicBool::new(false),
        requests: Mutex::new(Vec::new()),
    })
}

fn options(mode: RefreshFailureMode, wants: Wants) -> ClientOptions {
    ClientOptions {
        wants,
        on_failure: mode,
        retry_ms: 500,
        ..ClientOptions::default()
    }
}

#[test]
fn refreshes_before_expiry_and_updates_the_limiter() {
    let src = flaky(100.0, None);
    let clock = SharedClock::new(FakeClock::new(0));
    let rl = RateLimiter::with_clock(0.0, 10, clock.clone());
    let mut client = LeaseClient::new(
        src.clone(),
        rl.clone(),
        "p1",
        "db",
        options(RefreshFailureMode::Safe, Wants::Fixed(40.0)),
    );
    assert!(matches!(client.tick(0), ClientStatus::Refreshed(l) if l.capacity == 40.0));
    assert_eq!(rl.params().rate(), 40.0);
    assert_eq!(client.next_refresh_at(), 2_000);
    assert_eq!(client.tick(1_999), ClientStatus::Idle);
    for now in (2_000..60_000).step_by(2_000) {
        let status = client.tick(now);
        assert!(
            matches!(status, ClientStatus::Refreshed(_)),
            "{now}: {status:?}"
        );
        let lease = *client.lease().unwrap();
        assert!(
            lease.expires_at > client.next_refresh_at(),
            "refresh is due before expiry"
        );
        src.inner.check_invariants(now).unwrap();
    }
    assert!(client.release().unwrap());
    assert_eq!(rl.params().rate(), 0.0);
}

#[test]
fn failure_modes_apply_after_expiry() {
    for (mode, expected) in [
        (RefreshFailureMode::Pessimistic, 0.0),
        (RefreshFailureMode::Optimistic, 70.0),
        (RefreshFailureMode::Safe, 100.0 / 2.0),
    ] {
        let src = flaky(100.0, None);
        src.inner.request("other", "db", 10.0, 0, 0).unwrap();
        let gauge = Gauge::new(0);
        let mut client = LeaseClient::new(
            src.clone(),
            gauge.clone(),
            "p1",
            "db",
            options(mode, Wants::Fixed(70.0)),
        );
        assert!(matches!(client.tick(0), ClientStatus::Refreshed(_)));
        assert_eq!(gauge.capacity(), 70);
        src.failing.store(true, Ordering::SeqCst);
        // The lease (10 s) stays in force while refreshes fail.
        assert_eq!(client.tick(2_000), ClientStatus::RefreshFailedLeaseValid);
        assert_eq!(client.effective_capacity(), 70.0);
        let mut now = 2_000;
        while now < 10_000 {
            now = client.next_refresh_at();
            client.tick(now);
            assert!(client.next_refresh_at() > now);
        }
        assert_eq!(
            client.tick(10_000),
            ClientStatus::Degraded(mode),
            "{mode:?}"
        );
        assert_eq!(client.effective_capacity(), expected, "{mode:?}");
        assert_eq!(gauge.capacity(), expected as u32);
        // Recovery.
        src.failing.store(false, Ordering::SeqCst);
        let now = client.next_refresh_at();
        assert!(matches!(client.tick(now), ClientStatus::Refreshed(_)));
    }
}

#[test]
fn configured_safe_capacity_and_no_lease_fallback() {
    let src = flaky(100.0, Some(7.0));
    let mut client = LeaseClient::new(
        src.clone(),
        Gauge::new(0),
        "p1",
        "db",
        options(RefreshFailureMode::Safe, Wants::Fixed(70.0)),
    );
    client.tick(0);
    src.failing.store(true, Ordering::SeqCst);
    assert_eq!(
        client.tick(10_000),
        ClientStatus::Degraded(RefreshFailureMode::Safe)
    );
    assert_eq!(client.effective_capacity(), 7.0);
    let src = flaky(100.0, None);
    src.failing.store(true, Ordering::SeqCst);
    let mut opts = options(RefreshFailureMode::Safe, Wants::Fixed(70.0));
    opts.fallback_safe_capacity = 3.0;
    let mut client = LeaseClient::new(src, Gauge::new(0), "p1", "db", opts);
    assert_eq!(
        client.tick(0),
        ClientStatus::Degraded(RefreshFailureMode::Safe)
    );
    assert_eq!(client.effective_capacity(), 3.0);
}

#[test]
fn wants_follow_observed_demand() {
    let src = flaky(1000.0, None);
    let clock = SharedClock::new(FakeClock::new(0));
    let rl = RateLimiter::with_clock(0.0, 10, clock.clone());
    let mut client = LeaseClient::new(
        src.clone(),
        rl.clone(),
        "p1",
        "db",
        options(RefreshFailureMode::Safe, Wants::Estimated { initial: 5.0 }),
    );
    client.tick(0);
    assert_eq!(src.requests.lock().unwrap().last().copied(), Some(5.0));
    // The application tries 200 permits per second (most denied at the small lease).
    for ms in 1..=6_000u64 {
        clock.set(ms);
        if ms % 5 == 0 {
            rl.try_acquire();
        }
        client.tick(ms);
    }
    let last = src.requests.lock().unwrap().last().copied().unwrap();
    assert!((200.0..=240.0).contains(&last), "wants {last}");
    assert!(client.lease().unwrap().capacity >= 200.0);
}
