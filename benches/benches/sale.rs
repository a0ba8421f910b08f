//! Admission under a sale's traffic: many distinct visitors, not one cookie replayed.
//!
//! `cargo bench -p velvet-rope-benches --bench sale`. Each row serves a stream of requests
//! from N distinct visitors (10^3, 10^4, 10^5), at 1 and 2 threads, with the mix of a sale:
//! of every 20 requests, 18 come from returning admitted visitors (each visitor's whole
//! `Cookie` header, the ticket among a browser's other cookies, visitors in a scrambled
//! order), one from a new visitor (no ticket: a slot is claimed and a ticket sealed) and one
//! from a waiting visitor refreshing the waiting page (a full room's queued ticket). Each
//! thread walks the stream from its own offset, so both threads see different visitors.
//!
//! Returning visitors are far more than a thread's cache of 256 opened tickets, so their
//! tickets are cold (base64 + AEGIS-256) except when the same visitor comes back within 256
//! distinct tickets, as in life. Figures go to BENCHMARKS.md, first.

use std::hint::black_box;
use std::time::Duration;

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use velvet_rope::{Engine, Outcome};
use velvet_rope_benches::{on_threads_indexed, KEYS, T0};

/// The room under sale (`shop`), and a full room whose visitors wait (`sold_out`).
const ROOMS: &str = r#"

[[rooms]]
name = "shop"
total_active_users = 1000000
new_users_per_minute = 4000000000
session_duration = 5

[[rooms]]
name = "sold_out"
total_active_users = 1
new_users_per_minute = 4000000000
session_duration = 5
"#;
/// Seats of `shop` (see `ROOMS`).
const SEATS: u64 = 1_000_000;
/// Of every `MIX` requests, one is a new visitor and one a waiting visitor.
const MIX: u64 = 20;
/// Steps through the returning visitors in a scrambled order: a prime, coprime to every N.
const STRIDE: u64 = 7_919;

/// The browser's other cookies around the ticket.
fn header(ticket: &str) -> String {
    format!("_ga=GA1.2.1234567890.1800000000; {ticket}; theme=dark; session=3f2a9c")
}

/// The `name=value` of a decision's `Set-Cookie`.
fn cookie_of(set_cookie: Option<String>) -> String {
    let set_cookie = set_cookie.expect("the decision sets a ticket");
    set_cookie
        .split(';')
        .next()
        .expect("a Set-Cookie has a name=value")
        .to_owned()
}

/// An engine mid-sale: `visitors` admitted, and waiting visitors in the sold-out room.
struct Sale {
    engine: Engine,
    returning: Vec<String>,
    waiting: Vec<String>,
    /// New visitors the shop can still seat.
    seats_left: u64,
}

impl Sale {
    fn new(visitors: usize) -> Self {
        let engine = Engine::from_text(&format!("{KEYS}{ROOMS}"), T0)
            .expect("the bench's configuration is valid");
        let returning = (0..visitors)
            .map(|_| {
                let d = engine.admit("shop", None, T0).expect("shop");
                assert_eq!(d.outcome, Outcome::Admit);
                header(&cookie_of(d.set_cookie))
            })
            .collect();
        // The first visitor takes the sold-out room's seat; the others wait.
        let _ = engine.admit("sold_out", None, T0);
        let waiting = (0..(visitors / 20).max(16))
            .map(|_| {
                let d = engine.admit("sold_out", None, T0).expect("sold_out");
                assert_eq!(d.outcome, Outcome::Queue);
                header(&cookie_of(d.set_cookie))
            })
            .collect();
        Self {
            engine,
            returning,
            waiting,
            seats_left: SEATS - visitors as u64,
        }
    }

    /// The room and `Cookie` header of request `k` of the stream.
    #[inline]
    fn request(&self, k: u64) -> (&'static str, &str) {
        match k % MIX {
            0 => ("shop", NO_TICKET),
            10 => (
                "sold_out",
                &self.waiting[(k / MIX) as usize % self.waiting.len()],
            ),
            _ => {
                let n = self.returning.len() as u64;
                (
                    "shop",
                    &self.returning[(k.wrapping_mul(STRIDE) % n) as usize],
                )
            }
        }
    }

    /// Request `k` of the stream. The next request's header is prefetched first, as a
    /// server's request is in the cache when it decides (`recv` has just copied it in): with
    /// 10^4 and more visitors the stored headers outgrow the caches, and without this the
    /// rows would time the bench's own memory misses (about 110 ns a request at 10^4).
    #[inline]
    fn serve(&self, k: u64) -> Outcome {
        let (_, next) = self.request(k + 1);
        prefetch(next.as_bytes());
        let (room, header) = self.request(k);
        self.engine
            .admit(room, Some(header), T0 + 1_000)
            .expect("known rooms")
            .outcome
    }
}

/// Asks the CPU to bring `bytes` into its caches (no effect where there is no such hint).
#[inline]
fn prefetch(bytes: &[u8]) {
    #[cfg(target_arch = "x86_64")]
    for line in bytes.chunks(64) {
        // SAFETY: SSE is part of x86_64; a prefetch reads nothing and cannot fault.
        unsafe {
            std::arch::x86_64::_mm_prefetch::<{ std::arch::x86_64::_MM_HINT_T0 }>(
                line.as_ptr().cast(),
            )
        };
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = bytes;
}

/// A new visitor's header: other cookies, no ticket.
const NO_TICKET: &str = "_ga=GA1.2.1234567890.1800000000; theme=dark";

fn sale(c: &mut Criterion) {
    let mut g = c.benchmark_group("sale");
    g.throughput(Throughput::Elements(1));
    for visitors in [1_000usize, 10_000, 100_000] {
        let mut sale = Sale::new(visitors);
        for threads in [1usize, 2] {
            g.bench_with_input(
                BenchmarkId::new(format!("admit_mix_{visitors}_visitors"), threads),
                &threads,
                |b, &t| {
                    b.iter_custom(|iters| {
                        // Timed in chunks the shop can seat; a fresh sale is not timed.
                        let mut total = Duration::ZERO;
                        let mut left = iters;
                        while left > 0 {
                            let chunk = left.min(4_000_000 / t as u64);
                            let new_visitors = chunk.div_ceil(MIX) * t as u64;
                            if new_visitors + 1 >= sale.seats_left {
                                sale = Sale::new(visitors);
                            }
                            sale.seats_left -= new_visitors;
                            let sale = &sale;
                            // Each thread from its own offset (different visitors).
                            let base = left * 7_777;
                            total += on_threads_indexed(t, chunk, |thread, i| {
                                let k = base + i + thread as u64 * 1_000_003;
                                black_box(sale.serve(k));
                            });
                            left -= chunk;
                        }
                        total
                    })
                },
            );
        }
    }
    g.finish();
}

/// The stream's outcomes are what the bench says they are.
fn check_mix() {
    let sale = Sale::new(1_000);
    let outcomes: Vec<Outcome> = (0..(4 * MIX)).map(|k| sale.serve(k)).collect();
    for (k, o) in outcomes.iter().enumerate() {
        let want = if k as u64 % MIX == 10 {
            Outcome::Queue
        } else {
            Outcome::Admit
        };
        assert_eq!(*o, want, "request {k}");
    }
}

fn benches(c: &mut Criterion) {
    check_mix();
    sale(c);
}

criterion_group! {
    name = sale_benches;
    config = Criterion::default()
        .warm_up_time(Duration::from_millis(500))
        .measurement_time(Duration::from_secs(2));
    targets = benches
}
criterion_main!(sale_benches);
