//! Helpers shared by the benches in `benches/`.

use std::sync::Barrier;

/// The benches' clock: milliseconds since the epoch, on a minute boundary.
pub const T0: u64 = 1_800_000_000_000;

/// A configured ticket key (tickets stay valid across the engines a bench makes), to put
/// before a bench's rooms.
pub const KEYS: &str = r#"
[[tickets.keys]]
id = 1
secret = "MDEyMzQ1Njc4OWFiY2RlZjAxMjM0NTY3ODlhYmNkZWY"
"#;
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
pub mod rules_config;
