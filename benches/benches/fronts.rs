//! What a front door does per request before the decision: find the ticket cookie in the
//! `Cookie` header (through `Engine::admit`, the path every request takes) and choose the
//! request's room (`velvet_rope::routing::Router`).
//!
//! `cargo bench -p velvet-rope-benches --bench fronts`.

use std::hint::black_box;
use std::time::Duration;

use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use velvet_rope::routing::{CaseRule, Router};
use velvet_rope::{Engine, Outcome};
use velvet_rope_benches::{KEYS, T0};

const ROOMS: &str = r#"
[[rooms]]
name = "shop"
total_active_users = 100000
new_users_per_minute = 4000000000
"#;

/// The ticket of an admitted visitor, alone and with a browser's other cookies around it
/// (one of them holding the ticket's name in its value), and the same cookies as a server
/// joining two `Cookie` lines with `,` (gunicorn) hands them over.
fn headers(engine: &Engine) -> [(&'static str, String); 4] {
    let d = engine.admit("shop", None, T0).unwrap();
    assert_eq!(d.outcome, Outcome::Admit);
    let ticket = d.set_cookie.unwrap().split(';').next().unwrap().to_owned();
    let before = "_ga=GA1.1.1234567890.1700000000; _gid=GA1.1.987654321.1700000000; \
                  session=3f9a1c0e5b7d4e2a8c6b0d1f2e3a4b5c; consent=analytics%3Dtrue";
    [
        ("ticket_alone", ticket.clone()),
        (
            "ticket_among_cookies",
            format!("{before}; {ticket}; theme=dark; lang=en"),
        ),
        (
            "ticket_after_a_lookalike",
            format!("ref=x{ticket}; {before}; {ticket}"),
        ),
        (
            "ticket_in_comma_joined_lines",
            format!("{before},{ticket},theme=dark"),
        ),
    ]
}

fn cookies(c: &mut Criterion) {
    let mut g = c.benchmark_group("cookie");
    g.throughput(Throughput::Elements(1));
    let engine = Engine::from_text(&format!("{KEYS}{ROOMS}"), T0).unwrap();
    for (name, header) in headers(&engine) {
        let d = engine.admit("shop", Some(&header), T0 + 1).unwrap();
        assert!(
            d.outcome == Outcome::Admit && d.set_cookie.is_none(),
            "{name}: {d:?}"
        );
        g.bench_function(name, |b| {
            b.iter(|| {
                black_box(
                    engine
                        .admit("shop", Some(black_box(&header)), T0 + 1)
                        .unwrap(),
                )
            })
        });
    }
    g.finish();
}

fn routing(c: &mut Criterion) {
    let mut g = c.benchmark_group("routing");
    g.throughput(Throughput::Elements(1));
    for (case, rule) in [
        ("sensitive", CaseRule::Sensitive),
        ("insensitive", CaseRule::Insensitive),
    ] {
        let router = Router::new(
            [
                ("/shop", "shop"),
                ("/checkout", "checkout"),
                ("/api/v2/cart", "cart"),
            ],
            Some("site"),
            ["/static/", "/health", "/favicon.ico"],
            rule,
        )
        .unwrap();
        for (name, target) in [
            (
                "plain",
                &b"/products/shoes/running-42?color=blue&size=9"[..],
            ),
            ("plain_bypassed", b"/static/js/app.3f9a1c0e.js"),
            ("escaped", b"/static/my%20file%20name.css"),
            ("dot_segments", b"/static/../checkout/pay"),
        ] {
            g.bench_function(format!("{case}/{name}"), |b| {
                b.iter(|| black_box(router.route(black_box(target))))
            });
        }
    }
    g.finish();
}

criterion_group! {
    name = benches;
    config = Criterion::default()
        .warm_up_time(Duration::from_millis(500))
        .measurement_time(Duration::from_secs(2));
    targets = cookies, routing
}
criterion_main!(benches);
