//! Lease benches: `RateLimiter::try_acquire` against governor's direct limiter (1 and 2
//! threads on one limiter), gauge acquire + release against tokio's semaphore, and
//! `fair_share` on 10, 1,000 and 100,000 clients.

use std::hint::black_box;
use std::num::NonZeroU32;
use std::sync::{Arc, Barrier};
use std::time::{Duration, Instant};

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use governor::{Quota, RateLimiter as Governor};
use velvet_rope::lease::algorithm::{fair_share, Demand};
use velvet_rope::lease::{Gauge, RateLimiter};

/// Runs `op` `iters` times on each of `threads` threads at once; returns the wall time.
fn run_threads<F: Fn() + Send + Sync + 'static>(
    threads: usize,
    iters: u64,
    op: Arc<F>,
) -> Duration {
    let barrier = Arc::new(Barrier::new(threads + 1));
    let handles: Vec<_> = (0..threads)
        .map(|_| {
            let (op, barrier) = (op.clone(), barrier.clone());
            std::thread::spawn(move || {
                barrier.wait();
                for _ in 0..iters {
                    op();
                }
            })
        })
        .collect();
    barrier.wait();
    let start = Instant::now();
    for h in handles {
        h.join().expect("bench thread");
    }
    start.elapsed()
}

fn rate_limiters(c: &mut Criterion) {
    let mut g = c.benchmark_group("lease/try_acquire");
    g.throughput(Throughput::Elements(1));
    // A huge rate so that the measurement is the fast path, not denials (both libraries).
    let rate = 1_000_000_000u32;
    let ours = RateLimiter::new(f64::from(rate));
    g.bench_function("velvet_rope/1_thread", |b| {
        b.iter(|| black_box(ours.try_acquire()))
    });
    let gov = Governor::direct(Quota::per_second(NonZeroU32::new(rate).expect("non-zero")));
    g.bench_function("governor/1_thread", |b| {
        b.iter(|| black_box(gov.check().is_ok()))
    });
    // Two threads on one limiter: time per operation per thread.
    let ours = Arc::new(RateLimiter::new(f64::from(rate)));
    g.bench_function("velvet_rope/2_threads", |b| {
        b.iter_custom(|iters| {
            let rl = ours.clone();
            run_threads(
                2,
                iters,
                Arc::new(move || {
                    black_box(rl.try_acquire());
                }),
            )
        })
    });
    let gov = Arc::new(Governor::direct(Quota::per_second(
        NonZeroU32::new(rate).expect("non-zero"),
    )));
    g.bench_function("governor/2_threads", |b| {
        b.iter_custom(|iters| {
            let gov = gov.clone();
            run_threads(
                2,
                iters,
                Arc::new(move || {
                    black_box(gov.check().is_ok());
                }),
            )
        })
    });
    // Denial path (limiter exhausted).
    let empty = RateLimiter::new(0.001);
    let _ = empty.try_acquire();
    g.bench_function("velvet_rope/denied", |b| {
        b.iter(|| black_box(empty.try_acquire()))
    });
    g.finish();
}

fn gauges(c: &mut Criterion) {
    let mut g = c.benchmark_group("lease/gauge_acquire_release");
    g.throughput(Throughput::Elements(1));
    let gauge = Gauge::new(1_000);
    g.bench_function("velvet_rope", |b| {
        b.iter(|| drop(black_box(gauge.try_acquire())))
    });
    let sem = tokio::sync::Semaphore::new(1_000);
    g.bench_function("tokio_semaphore", |b| {
        b.iter(|| drop(black_box(sem.try_acquire())))
    });
    g.finish();
}

fn fair_share_sizes(c: &mut Criterion) {
    let mut g = c.benchmark_group("lease/fair_share");
    for n in [10usize, 1_000, 100_000] {
        let demands: Vec<Demand> = (0..n)
            .map(|i| Demand {
                wants: ((i * 7919) % 1000) as f64 + 1.0,
                subclients: (i % 4) as u32 + 1,
                priority: 0,
            })
            .collect();
        let capacity = 250.0 * n as f64;
        g.throughput(Throughput::Elements(n as u64));
        g.bench_with_input(BenchmarkId::from_parameter(n), &demands, |b, d| {
            b.iter(|| black_box(fair_share(capacity, black_box(d))))
        });
    }
    g.finish();
}

criterion_group!(benches, rate_limiters, gauges, fair_share_sizes);
criterion_main!(benches);
