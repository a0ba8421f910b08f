//! Loops the valid-ticket admit path, for profilers (`valgrind --tool=callgrind`).
//! Arguments: iterations (default 1,000,000), other cookies in the header (default 3), and
//! `new` to loop new visitors instead (no ticket: a slot claim and a new ticket each), or
//! `cold` to loop 4,096 admitted visitors in turn (more than a thread's cache of opened
//! tickets: every admit opens its ticket).

use std::hint::black_box;

fn main() {
    let now = 1_800_000_000_000;
    let engine = velvet_rope::Engine::from_text(
        "[[rooms]]\nname = \"shop\"\ntotal_active_users = 1000000\n\
         new_users_per_minute = 1000000\n",
        now,
    )
    .expect("valid configuration");
    let ticket = || {
        let d = engine.admit("shop", None, now).expect("room exists");
        let cookie = d.set_cookie.expect("a new visitor gets a ticket");
        cookie.split(';').next().unwrap_or_default().to_owned()
    };
    let mut args = std::env::args().skip(1);
    let n: u64 = args
        .next()
        .and_then(|a| a.parse().ok())
        .unwrap_or(1_000_000);
    let others: usize = args.next().and_then(|a| a.parse().ok()).unwrap_or(3);
    let mode = args.next();
    let visitors = match mode.as_deref() {
        Some("new") => 0,
        Some("cold") => 4096,
        _ => 1,
    };
    // Other cookies before and after the ticket, as browsers send them.
    let other = |i: usize| format!("_c{i}=GA1.2.{}", 1_000_000 + i);
    let header = |ticket: Option<String>| {
        (0..others.div_ceil(2))
            .map(other)
            .chain(ticket)
            .chain((others.div_ceil(2)..others).map(other))
            .collect::<Vec<_>>()
            .join("; ")
    };
    let headers: Vec<String> = if visitors == 0 {
        vec![header(None)]
    } else {
        (0..visitors).map(|_| header(Some(ticket()))).collect()
    };
    let start = std::time::Instant::now();
    for i in 0..n as usize {
        black_box(
            engine
                .admit(
                    "shop",
                    Some(black_box(&headers[i % headers.len()])),
                    now + 1,
                )
                .expect("room exists"),
        );
    }
    println!(
        "{:.1} ns per admit ({} bytes of Cookie header, {} distinct)",
        start.elapsed().as_nanos() as f64 / n as f64,
        headers[0].len(),
        headers.len()
    );
}
