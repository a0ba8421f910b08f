//! One returning visitor's request decided N times, for counting instructions (callgrind:
//! N = 10,000 minus N = 0, per call), which repeat where wall time on a shared machine does
//! not. Modes: `cookie` (`admit_header_bytes`, the `Cookie` header alone), `plain` and
//! `rules` (`decide_request_in` with the whole request, in a room without rules and in one of
//! the `rules` bench's 20 rules), `structural` (the same, in a room of 20 rules over the
//! method, host, path and client alone), `routed` (`decide_request`, the room by host and
//! path: the one with 20 rules), `routed_plain` (the same, to the room without rules),
//! `routed_escaped` (the same, its path a percent-escaped UTF-8 slug, as browsers send one:
//! read every way to find the rooms it might belong to), `routed_no_query` (the same, a
//! path without a query, as a browser's page request mostly is),
//! `bypass` (`decide_request_in`, a request the first of those rules bypasses: matched and
//! counted).
//! `cargo run --release -p velvet-rope-benches --example rules_instructions -- <mode> <N>`.

use std::net::IpAddr;

use velvet_rope::request::Request;
use velvet_rope::{Engine, Outcome};
use velvet_rope_benches::{KEYS, T0};

use velvet_rope_benches::rules_config;

fn main() {
    let mut args = std::env::args().skip(1);
    let mode = args.next().unwrap_or_else(|| "rules".into());
    let n: u64 = args
        .next()
        .map_or(1_000_000, |s| s.parse().expect("a count"));
    let engine = Engine::from_text(&format!("{KEYS}{}", rules_config::ROOMS), T0).unwrap();
    let (room, host) = match mode.as_str() {
        "cookie" | "plain" | "routed_plain" | "routed_escaped" | "routed_no_query" => {
            ("plain", "plain.example.com")
        }
        "rules" | "routed" | "bypass" => ("rules", "shop.example.com"),
        "structural" => ("structural", "api.example.com"),
        other => panic!("unknown mode {other}"),
    };
    let d = engine.admit(room, None, T0).unwrap();
    let ticket = d.set_cookie.unwrap().split(';').next().unwrap().to_owned();
    let owned = rules_config::headers(host, &ticket);
    let headers: Vec<(&[u8], &[u8])> = owned.iter().map(|(k, v)| (*k, &v[..])).collect();
    let client: Option<IpAddr> = Some("100.64.1.2".parse().unwrap());
    let request = Request {
        method: b"GET",
        target: match mode.as_str() {
            "bypass" => &b"/static/js/app.3f9a1c0e.js"[..],
            "routed_escaped" => &b"/products/%E9%9D%B4/running-42?color=blue&size=9"[..],
            "routed_no_query" => &b"/products/shoes/running-42"[..],
            _ => &b"/products/shoes/running-42?color=blue&size=9"[..],
        },
        host: None,
        headers: &headers,
        client,
    };
    let cookie = &owned[9].1[..];
    let mut steady = 0u64;
    for _ in 0..n {
        let r = std::hint::black_box(&request);
        let d = match mode.as_str() {
            "cookie" => engine
                .admit_header_bytes(b"plain", Some(cookie), T0 + 1)
                .unwrap(),
            "routed" | "routed_plain" | "routed_escaped" | "routed_no_query" => {
                engine.decide_request(r, T0 + 1).unwrap().decision
            }
            _ => engine
                .decide_request_in(room.as_bytes(), r, T0 + 1)
                .unwrap(),
        };
        steady += u64::from(d.outcome == Outcome::Admit && d.set_cookie.is_none());
        debug_assert!(mode != "bypass" || d.bypassed);
    }
    println!("{mode}: {steady} of {n} steady");
}
