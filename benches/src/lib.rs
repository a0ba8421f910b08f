//! Helpers shared by the benches in `benches/`.

use std::sync::Barrier;
use std::time::{Duration, Instant};

/// Runs `f(thread, call)` `iters` times on each of `threads` threads at once (`thread` counts
/// from 0, `call` from 0 on each thread); returns the mean wall time per thread, so the figure
/// reads as "time per call with N threads calling".
pub fn on_threads_indexed<F: Fn(usize, u64) + Sync>(threads: usize, iters: u64, f: F) -> Duration {
    let barrier = Barrier::new(threads);
    let times: Vec<Duration> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..threads)
            .map(|t| {
                let (f, barrier) = (&f, &barrier);
                s.spawn(move || {
                    barrier.wait();
                    let start = Instant::now();
                    for i in 0..iters {
                        f(t, i);
                    }
                    start.elapsed()
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().expect("a bench thread panicked"))
            .collect()
    });
    times.iter().sum::<Duration>() / threads as u32
}

/// [`on_threads_indexed`] for calls that do not need to know who they are.
pub fn on_threads<F: Fn() + Sync>(threads: usize, iters: u64, f: F) -> Duration {
    on_threads_indexed(threads, iters, |_, _| f())
}
