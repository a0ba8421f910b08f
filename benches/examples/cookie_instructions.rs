//! `admit` with one of the `fronts` bench's cookie headers, N times: for counting instructions
//! (`perf stat -e instructions:u` or callgrind), which repeat where wall time on a shared
//! machine does not. `cargo run --release -p velvet-rope-benches --example cookie_instructions
//! -- <header kind> <N>` (`revocable`: the ticket alone, in a room with origin commands;
//! `cold`: 4,096 visitors' tickets alone in turn, more than a thread's cache of opened
//! tickets holds, so that every call opens its ticket).

use velvet_rope::{Engine, Outcome};
use velvet_rope_benches::{KEYS, T0};

fn main() {
    let mut args = std::env::args().skip(1);
    let kind = args.next().unwrap_or_else(|| "alone".into());
    let n: u64 = args
        .next()
        .map_or(1_000_000, |s| s.parse().expect("a count"));
    // `revocable`: a room whose origin may revoke sessions, 100 of them revoked (the ticket
    // looked up in its revocation tables on every request).
    let revocable = kind == "revocable";
    let config = format!(
        "{KEYS}[[rooms]]\nname = \"shop\"\ntotal_active_users = 100000\nnew_users_per_minute = 4000000000\n{}",
        if revocable { "enabled_origin_commands = [\"revoke\"]\n" } else { "" }
    );
    let engine = Engine::from_text(&config, T0).unwrap();
    if revocable {
        for _ in 0..100 {
            let d = engine.admit("shop", None, T0).unwrap();
            let t = d.ticket().unwrap().to_owned();
            engine.revoke("shop", t.as_bytes(), T0).unwrap();
        }
    }
    let d = engine.admit("shop", None, T0).unwrap();
    let ticket = d.set_cookie.unwrap().split(';').next().unwrap().to_owned();
    let before = "_ga=GA1.1.1234567890.1700000000; _gid=GA1.1.987654321.1700000000; \
                  session=3f9a1c0e5b7d4e2a8c6b0d1f2e3a4b5c; consent=analytics%3Dtrue";
    let cold: Vec<String> = if kind == "cold" {
        (0..4096)
            .map(|_| {
                let d = engine.admit("shop", None, T0).unwrap();
                d.set_cookie.unwrap().split(';').next().unwrap().to_owned()
            })
            .collect()
    } else {
        Vec::new()
    };
    let header = match kind.as_str() {
        "alone" | "revocable" | "cold" => ticket,
        "among" => format!("{before}; {ticket}; theme=dark; lang=en"),
        "lookalike" => format!("ref=x{ticket}; {before}; {ticket}"),
        "joined" => format!("{before},{ticket},theme=dark"),
        other => panic!("unknown header kind {other}"),
    };
    let mut admitted = 0u64;
    for i in 0..n {
        let header = cold.get(i as usize % 4096).unwrap_or(&header);
        let d = engine
            .admit("shop", Some(std::hint::black_box(header)), T0 + 1)
            .unwrap();
        admitted += u64::from(d.outcome == Outcome::Admit && d.set_cookie.is_none());
    }
    println!("{kind}: {admitted} of {n} re-admitted with nothing to set");
}
