//! Loops the valid-ticket admit path, for profilers (`valgrind --tool=callgrind`).

use std::hint::black_box;

fn main() {
    let now = 1_800_000_000_000;
    let engine = velvet_rope::Engine::from_text(
        "[[rooms]]\nname = \"shop\"\ntotal_active_users = 1000\nnew_users_per_minute = 1000\n",
        now,
    )
    .expect("valid configuration");
    let d = engine.admit("shop", None, now).expect("room exists");
    let cookie = d.set_cookie.expect("a new visitor gets a ticket");
    let cookie = cookie.split(';').next().unwrap_or_default().to_owned();
    let header = format!("_ga=GA1.2.3; theme=dark; {cookie}; lang=en");
    let n: u64 = std::env::args()
        .nth(1)
        .and_then(|a| a.parse().ok())
        .unwrap_or(1_000_000);
    let start = std::time::Instant::now();
    for _ in 0..n {
        black_box(
            engine
                .admit("shop", Some(black_box(&header)), now + 1)
                .expect("room exists"),
        );
    }
    println!(
        "{:.1} ns per admit",
        start.elapsed().as_nanos() as f64 / n as f64
    );
}
