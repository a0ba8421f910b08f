//! What routes and rules cost a decision: a returning visitor (one of 10,000, each with its
//! own admission ticket, taken in turn) decided through `Engine::admit_header_bytes` (the
//! `Cookie` header alone, as before rules existed) and through `Engine::decide_request_in`
//! with the whole request (method, target, host, ten headers, the client's address) in a
//! room without rules, in one of 20 rules none of which matches, and in one of 20 rules
//! over the method, host, path and client alone (none matching either); then
//! `Engine::decide_request`, the room chosen by host and path routes.
//!
//! `cargo bench -p velvet-rope-benches --bench rules`.

use std::hint::black_box;
use std::net::IpAddr;
use std::time::Duration;

use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use velvet_rope::request::Request;
use velvet_rope::{Engine, Outcome};
use velvet_rope_benches::{KEYS, T0};

/// Visitors, each with its own ticket: what users live through, not one cookie replayed.
const VISITORS: usize = 10_000;

use velvet_rope_benches::rules_config::{headers, ROOMS};

/// `VISITORS` tickets of `room`, each as the `name=value` its cookie sends.
fn tickets(engine: &Engine, room: &str) -> Vec<String> {
    (0..VISITORS)
        .map(|_| {
            let d = engine.admit(room, None, T0).unwrap();
            assert_eq!(d.outcome, Outcome::Admit);
            d.set_cookie.unwrap().split(';').next().unwrap().to_owned()
        })
        .collect()
}

fn rules(c: &mut Criterion) {
    let mut g = c.benchmark_group("rules");
    g.throughput(Throughput::Elements(1));
    let engine = Engine::from_text(&format!("{KEYS}{ROOMS}"), T0).unwrap();
    // A client in none of the rules' blocks.
    let client: Option<IpAddr> = Some("100.64.1.2".parse().unwrap());
    let target: &[u8] = b"/products/shoes/running-42?color=blue&size=9";
    for (room, host) in [
        ("plain", "plain.example.com"),
        ("rules", "shop.example.com"),
        ("structural", "api.example.com"),
    ] {
        let all: Vec<Vec<(&'static [u8], Vec<u8>)>> = tickets(&engine, room)
            .iter()
            .map(|t| headers(host, t))
            .collect();
        let cookies: Vec<&[u8]> = all.iter().map(|h| &h[9].1[..]).collect();
        let views: Vec<Vec<(&[u8], &[u8])>> = all
            .iter()
            .map(|h| h.iter().map(|(n, v)| (*n, &v[..])).collect())
            .collect();
        let request = |i: usize| Request {
            method: b"GET",
            target,
            host: None,
            headers: &views[i],
            client,
        };
        // Every visitor is steady (counted this minute) before measuring.
        for i in 0..VISITORS {
            let d = engine
                .decide_request_in(room.as_bytes(), &request(i), T0 + 1)
                .unwrap();
            assert!(
                d.outcome == Outcome::Admit && d.rule.is_none() && d.set_cookie.is_none(),
                "{d:?}"
            );
        }
        if room == "plain" {
            let mut i = 0;
            g.bench_function("cookie_header_only", |b| {
                b.iter(|| {
                    i = (i + 1) % VISITORS;
                    black_box(
                        engine
                            .admit_header_bytes(b"plain", Some(cookies[i]), T0 + 1)
                            .unwrap(),
                    )
                })
            });
        }
        let mut i = 0;
        g.bench_function(format!("whole_request/{room}"), |b| {
            b.iter(|| {
                i = (i + 1) % VISITORS;
                black_box(
                    engine
                        .decide_request_in(room.as_bytes(), &request(i), T0 + 1)
                        .unwrap(),
                )
            })
        });
        let mut i = 0;
        g.bench_function(format!("routed/{room}"), |b| {
            b.iter(|| {
                i = (i + 1) % VISITORS;
                black_box(engine.decide_request(&request(i), T0 + 1).unwrap())
            })
        });
    }
    g.finish();
}

criterion_group! {
    name = benches;
    config = Criterion::default()
        .warm_up_time(Duration::from_millis(500))
        .measurement_time(Duration::from_secs(3));
    targets = rules
}
criterion_main!(benches);
