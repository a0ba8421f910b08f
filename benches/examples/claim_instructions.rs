//! New visitors admitted N times (each claims a slot from the room's pools, books it and is
//! handed a ticket), then a tick: for counting instructions (callgrind or `perf stat -e
//! instructions:u`), which repeat where wall time on a shared machine does not.
//! `cargo run --release -p velvet-rope-benches --example claim_instructions -- <N>`.

use velvet_rope::{Engine, Outcome};
use velvet_rope_benches::{KEYS, T0};

fn main() {
    let n: u64 = std::env::args()
        .nth(1)
        .map_or(1_000_000, |s| s.parse().expect("a count"));
    let config = format!(
        "{KEYS}[[rooms]]\nname = \"shop\"\ntotal_active_users = 1048576\nnew_users_per_minute = 4000000000\n"
    );
    let engine = Engine::from_text(&config, T0).unwrap();
    let mut admitted = 0u64;
    for _ in 0..n {
        let d = engine.admit("shop", None, T0 + 1).unwrap();
        admitted += u64::from(d.outcome == Outcome::Admit);
    }
    engine.tick(T0 + 2);
    println!("{admitted} of {n} new visitors admitted");
}
