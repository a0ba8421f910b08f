//! Whole requests through routes and rules (`velvet_rope::request`, the conformance table's
//! configuration): any method, target, host, headers and client, never a panic; a request
//! a room's routes place is decided or passed by a rule of that room, never lost.
#![no_main]

use std::net::IpAddr;
use std::sync::OnceLock;

use libfuzzer_sys::fuzz_target;
use velvet_rope::request::Request;
use velvet_rope::Engine;

const NOW: u64 = 1_800_000_000_000;

fn engine() -> &'static Engine {
    static E: OnceLock<Engine> = OnceLock::new();
    E.get_or_init(|| {
        Engine::from_text(include_str!("../../conformance/front_doors.toml"), NOW)
            .expect("the conformance configuration is valid")
    })
}

fuzz_target!(|data: &[u8]| {
    // Fields split at 0xff bytes: method, target, host, then header names and values.
    let mut parts = data.split(|&b| b == 0xff);
    let method = parts.next().unwrap_or_default();
    let target = parts.next().unwrap_or_default();
    let host = parts.next();
    let rest: Vec<&[u8]> = parts.collect();
    let headers: Vec<(&[u8], &[u8])> = rest.chunks_exact(2).map(|p| (p[0], p[1])).collect();
    let client = data.first().map(|&b| IpAddr::from([10, b, 0, 1]));
    let request = Request { method, target, host, headers: &headers, client };
    if let Some(routed) = engine().decide_request(&request, NOW) {
        let d = routed.decision;
        assert!(!(d.bypassed && d.rule.is_none()), "a bypass names its rule");
    }
    for room in [&b"shop"[..], b"api", b"dry"] {
        engine().decide_request_in(room, &request, NOW).expect("a configured room");
    }
});
