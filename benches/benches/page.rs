//! The waiting page a queued visitor gets (the queue path, not the admitted one): the
//! built-in page in the room's language and in the visitor's `Accept-Language`, a Cloudflare
//! custom template, and JSON. Templates were compiled when the configuration loaded: each
//! iteration only renders.
//!
//! `cargo bench -p velvet-rope-benches --bench page`.

use std::hint::black_box;
use std::time::Duration;

use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use velvet_rope::{Decision, Engine, Outcome, PageRequest};
use velvet_rope_benches::{KEYS, T0};

const ROOMS: &str = r#"
[[rooms]]
name = "shop"
total_active_users = 1
new_users_per_minute = 1000
accept_language = true

[[rooms]]
name = "custom"
total_active_users = 1
new_users_per_minute = 1000
custom_page = """<!doctype html><html lang="{{locale}}"><title>{{pageTitle}}</title>
<p>{{#waitTimeKnown}}Your estimated wait is {{waitTimeFormatted}} ({{waitTime}} min).{{/waitTimeKnown}}
{{^waitTimeKnown}}Queue all enabled.{{/waitTimeKnown}}{{#queueIsFull}}Full.{{/queueIsFull}}
{{#isEventPrequeueing}}Starts in {{timeUntilEventStartFormatted}}.{{/isEventPrequeueing}}</p>"""
"#;

fn queued(engine: &Engine, room: &str) -> Decision {
    engine.admit(room, None, T0).unwrap();
    let d = engine.admit(room, None, T0).unwrap();
    assert_eq!(d.outcome, Outcome::Queue);
    d
}

fn pages(c: &mut Criterion) {
    let engine = Engine::from_text(&format!("{KEYS}{ROOMS}"), T0).unwrap();
    let shop = queued(&engine, "shop");
    let custom = queued(&engine, "custom");
    let request = |accept, accept_language| PageRequest {
        accept,
        accept_language,
        now_ms: T0,
        ticket: None,
    };
    let cases = [
        (
            "builtin_default_language",
            "shop",
            &shop,
            request(Some("text/html"), None),
        ),
        (
            "builtin_accept_language_de",
            "shop",
            &shop,
            request(Some("text/html"), Some("de-AT,de;q=0.9,en;q=0.8")),
        ),
        (
            "builtin_arabic",
            "shop",
            &shop,
            request(None, Some("ar-EG")),
        ),
        (
            "cloudflare_template",
            "custom",
            &custom,
            request(None, None),
        ),
        (
            "json",
            "shop",
            &shop,
            request(Some("application/json"), None),
        ),
    ];
    let mut g = c.benchmark_group("page");
    g.throughput(Throughput::Elements(1));
    for (name, room, decision, req) in cases {
        g.bench_function(name, |b| {
            b.iter(|| {
                black_box(engine.render_page_for(room, black_box(decision), &req))
                    .unwrap()
                    .unwrap()
            })
        });
    }
    g.finish();
}

criterion_group! {
    name = benches;
    config = Criterion::default()
        .warm_up_time(Duration::from_millis(500))
        .measurement_time(Duration::from_secs(2));
    targets = pages
}
criterion_main!(benches);
