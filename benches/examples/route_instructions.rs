//! `Router::route` on one of the `fronts` bench's targets, N times: for counting instructions
//! with callgrind, which repeat where wall time on a shared machine does not.
//! `cargo run --release -p velvet-rope-benches --example route_instructions -- <target> <N>
//! [insensitive]`.

use velvet_rope::routing::{CaseRule, Route, Router};

fn main() {
    let mut args = std::env::args().skip(1);
    let target = args
        .next()
        .unwrap_or_else(|| "/products/shoes/running-42?color=blue".into());
    let n: u64 = args
        .next()
        .map_or(1_000_000, |s| s.parse().expect("a count"));
    let case = match args.next().as_deref() {
        Some("insensitive") => CaseRule::Insensitive,
        _ => CaseRule::Sensitive,
    };
    let router = Router::new(
        [
            ("/shop", "shop"),
            ("/checkout", "checkout"),
            ("/api/v2/cart", "cart"),
        ],
        Some("site"),
        ["/static/", "/health", "/favicon.ico"],
        case,
    )
    .unwrap();
    let mut rooms = 0u64;
    for _ in 0..n {
        if let Route::Room(_) = router.route(std::hint::black_box(target.as_bytes())) {
            rooms += 1;
        }
    }
    println!("{target}: {rooms} of {n} in a room");
}
