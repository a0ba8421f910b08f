//! A request that might belong to several rooms (its target read several ways, two hosts that
//! disagree, a host that is not one or none) passes only when every one of those rooms lets
//! it pass: a `bypass` or `count_only` rule, a dry run, elsewhere than in the room whose
//! resource the application serves for it, is no way past that room. (Found by an adversarial
//! probe of `decide_request`: each case here passed before, in the other room.)

use velvet_rope::request::Request;
use velvet_rope::{Engine, Outcome};

const NOW: u64 = 1_800_000_000_000;

/// `shop` queues everyone under `/shop/`; `docs` (a host of its own) is a dry run; `static`
/// (a host of its own) bypasses every GET; `blog` (a path of its own) bypasses every GET.
const CONFIG: &str = r#"
[[rooms]]
name = "shop"
total_active_users = 10
new_users_per_minute = 10
queue_all = true
routes = [{ path = "/shop/" }, { host = "shop.example.com" }]

[[rooms]]
name = "docs"
total_active_users = 10
new_users_per_minute = 10
mode = "dry_run"
routes = [{ host = "docs.example.com" }]

[[rooms]]
name = "static"
total_active_users = 10
new_users_per_minute = 10
routes = [{ host = "static.example.com" }]

[[rooms.rules]]
action = "bypass"
methods = ["GET", "HEAD"]

[[rooms]]
name = "blog"
total_active_users = 10
new_users_per_minute = 10
routes = [{ path = "/blog/" }]

[[rooms.rules]]
action = "bypass"
methods = ["GET", "HEAD"]
"#;

fn engine() -> Engine {
    Engine::from_text(CONFIG, NOW).expect("a valid configuration")
}

/// The room and whether the request went on (admitted, bypassed or passed by a dry run).
fn verdict(engine: &Engine, target: &str, host: Option<&str>) -> (String, bool) {
    let r = routed(engine, target, host);
    (
        r.room.as_str().to_owned(),
        r.decision.outcome == Outcome::Admit,
    )
}

/// The room and decision of `GET target` with `host`, checked against the room
/// `room_for_request` names for it (deciding nothing): the one that decides, or none for a
/// refusal.
fn routed(engine: &Engine, target: &str, host: Option<&str>) -> velvet_rope::Routed {
    let r = Request {
        method: b"GET",
        target: target.as_bytes(),
        host: host.map(str::as_bytes),
        headers: &[],
        client: None,
    };
    let room = engine.room_for_request(&r, NOW);
    let routed = engine
        .decide_request(&r, NOW)
        .unwrap_or_else(|| panic!("{target} {host:?}: unrouted"));
    let expected = (!routed.decision.ambiguous).then_some(routed.room);
    assert_eq!(room, expected, "{target} {host:?}");
    routed
}

#[test]
fn a_host_that_is_not_one_or_none_is_decided_where_it_cannot_pass() {
    let e = engine();
    assert_eq!(
        verdict(&e, "/shop/checkout", Some("www.example.com")),
        ("shop".into(), false)
    );
    // Each matches every host pattern: `docs` (the longest) let them through as a dry run.
    for host in [Some("x:y"), Some("www.example.com:abc"), Some(""), None] {
        assert_eq!(
            verdict(&e, "/shop/checkout", host),
            ("shop".into(), false),
            "{host:?}"
        );
    }
}

#[test]
fn two_hosts_that_disagree_are_decided_where_it_cannot_pass() {
    let e = engine();
    // Express and Fastify route by the `Host` header, nginx by the target's: `static`'s
    // bypass does not let a request for the shop's host through.
    assert_eq!(
        verdict(
            &e,
            "http://static.example.com/checkout",
            Some("shop.example.com")
        ),
        ("shop".into(), false)
    );
    assert_eq!(
        verdict(
            &e,
            "http://shop.example.com/checkout",
            Some("static.example.com")
        ),
        ("shop".into(), false)
    );
    // Hosts that agree: the bypass stands.
    assert_eq!(
        verdict(
            &e,
            "http://static.example.com/app.css",
            Some("static.example.com")
        ),
        ("static".into(), true)
    );
}

#[test]
fn readings_in_two_rooms_are_decided_where_they_cannot_pass() {
    let e = engine();
    // Resolved, these are under `/blog/`; Express, Fastify and Starlette route them under
    // `/shop/` (a parameter `..` or `../blog`).
    for target in [
        "/shop/..%2fblog/x",
        "/shop/%2e%2e%2fblog/x",
        "/shop/%2e%2e/blog/x",
        "/shop/../blog/x",
    ] {
        assert_eq!(
            verdict(&e, target, Some("www.example.com")),
            ("shop".into(), false),
            "{target}"
        );
    }
    // One reading alone: the blog's bypass stands.
    assert_eq!(
        verdict(&e, "/blog/x", Some("www.example.com")),
        ("blog".into(), true)
    );
    assert_eq!(
        verdict(&e, "/blog/%78", Some("www.example.com")),
        ("blog".into(), true)
    );
}

#[test]
fn a_request_every_room_lets_pass_still_passes() {
    let e = engine();
    // The target's host and the `Host` header disagree, but both rooms bypass a GET.
    let both = Engine::from_text(
        &CONFIG.replace(
            "routes = [{ path = \"/blog/\" }]",
            "routes = [{ path = \"/blog/\" }, { host = \"blog.example.com\" }]",
        ),
        NOW,
    )
    .unwrap();
    assert_eq!(
        verdict(
            &both,
            "http://static.example.com/x",
            Some("blog.example.com")
        ),
        ("static".into(), true)
    );
    // A dry run and a bypass: both let it pass (in the routes' choice, the longer host).
    assert_eq!(
        verdict(&e, "http://docs.example.com/x", Some("static.example.com")),
        ("static".into(), true)
    );
}

/// The path case rule `either` (the default) reads `/BLOG/x` under `/blog/` without case and
/// under `/` with it (Fastify, Starlette and nginx route it so): the blog's dry run is no way
/// past the site. And a room that passes everyone still refuses what its `reject` rule
/// refuses, whichever reading another room might take. (Found by the review of the fix.)
#[test]
fn a_case_or_a_passthrough_room_is_no_way_past() {
    let e = Engine::from_text(
        r#"
[[rooms]]
name = "site"
total_active_users = 10
new_users_per_minute = 10
queue_all = true
routes = [{ path = "/" }]

[[rooms]]
name = "blog"
total_active_users = 10
new_users_per_minute = 10
mode = "dry_run"
routes = [{ path = "/blog/" }]

[[rooms]]
name = "api"
total_active_users = 10
new_users_per_minute = 10
queueing_method = "passthrough"
routes = [{ path = "/api/" }]

[[rooms.rules]]
action = "reject"
paths = ["/api/admin/"]
"#,
        NOW,
    )
    .unwrap();
    assert_eq!(verdict(&e, "/BLOG/x", None), ("site".into(), false));
    assert_eq!(verdict(&e, "/blog/x", None), ("blog".into(), true));
    assert_eq!(verdict(&e, "/Blog/%78", None), ("site".into(), false));
    let r = Request {
        method: b"GET",
        target: b"/%61pi/admin/x",
        host: None,
        headers: &[],
        client: None,
    };
    let routed = e.decide_request(&r, NOW).unwrap();
    assert_eq!(
        (routed.room.as_str(), routed.decision.outcome),
        ("api", Outcome::Reject)
    );
    assert_eq!(verdict(&e, "/api/x", None), ("api".into(), true));
}

/// `shop` queues everyone; `api` (a host of its own) and `blog` (a path of its own) admit
/// everyone: three rooms that each decide what they govern, none letting anything pass.
const ENFORCING: &str = r#"
[[rooms]]
name = "shop"
total_active_users = 10
new_users_per_minute = 10
queue_all = true
routes = [{ path = "/shop/" }, { host = "shop.example.com" }]

[[rooms]]
name = "api"
total_active_users = 100000
new_users_per_minute = 100000
routes = [{ host = "api.example.com" }]

[[rooms]]
name = "blog"
total_active_users = 100000
new_users_per_minute = 100000
routes = [{ path = "/blog/" }]
"#;

/// A request two deciding rooms might each govern is refused (400), not decided in the one
/// the routes chose: there the visitor could pick the emptier room by how it writes the
/// target (`GET http://api.example.com/shop/item` with `Host: www.example.com` was admitted
/// by `api`, where Express serves the shop's page), and no slot is taken in either room.
#[test]
fn a_request_two_deciding_rooms_might_govern_is_refused() {
    let e = Engine::from_text(ENFORCING, NOW).unwrap();
    let cases: [(&str, Option<&str>); 8] = [
        ("http://api.example.com/shop/item", Some("www.example.com")),
        ("http://www.example.com/shop/item", Some("api.example.com")),
        ("http://shop.example.com/x", Some("api.example.com")),
        ("/shop/..%2fblog/x", Some("www.example.com")),
        ("/shop/%2e%2e/blog/x", Some("www.example.com")),
        ("/blog/..%2Fshop/x", Some("www.example.com")),
        // No host, or one that is not one: any host's request (`shop`'s and `api`'s).
        ("/x", None),
        ("/x", Some("x:y")),
    ];
    for (target, host) in cases {
        let r = routed(&e, target, host);
        let d = &r.decision;
        assert_eq!(d.outcome, Outcome::Reject, "{target} {host:?}: {d:?}");
        assert!(d.ambiguous, "{target} {host:?}: {d:?}");
        assert!(
            d.set_cookie.is_none() && d.rule.is_none() && d.retry_after_secs.is_none(),
            "{d:?}"
        );
        assert!(!d.rejected_by_rule(), "{d:?}");
        // The page: 400, problem details for a JSON client.
        let room = r.room.as_str();
        let json = velvet_rope::PageRequest {
            accept: Some("application/json"),
            accept_language: None,
            now_ms: NOW,
            ticket: None,
        };
        let page = e.render_page_for(room, d, &json).unwrap().unwrap();
        assert_eq!(page.status, 400, "{}", page.body);
        assert_eq!(page.content_type, "application/problem+json");
        assert!(page.body.contains("ambiguous-request"), "{}", page.body);
        assert_eq!(page.retry_after_secs, None);
        let html = velvet_rope::PageRequest {
            accept: Some("text/html"),
            ..json
        };
        let page = e.render_page_for(room, d, &html).unwrap().unwrap();
        assert_eq!(page.status, 400);
        assert!(page.content_type.starts_with("text/html"), "{page:?}");
    }
    // Counted, each in the room the routes chose; no visitor admitted anywhere.
    assert_eq!(refused_total(&e), 8, "{}", e.metrics_text());
    for room in ["shop", "api", "blog"] {
        assert_eq!(e.stats(room).unwrap().admitted_total, 0, "{room}");
    }
}

/// Asking which room would decide a request decides nothing: no slot, no count.
#[test]
fn asking_for_the_room_decides_nothing() {
    let e = Engine::from_text(ENFORCING, NOW).unwrap();
    let r = Request {
        method: b"GET",
        target: b"/blog/x",
        host: Some(b"www.example.com"),
        headers: &[],
        client: None,
    };
    for _ in 0..3 {
        assert_eq!(e.room_for_request(&r, NOW).unwrap().as_str(), "blog");
    }
    let unrouted = Request {
        target: b"/elsewhere",
        ..r
    };
    assert_eq!(e.room_for_request(&unrouted, NOW), None);
    e.tick(NOW);
    assert_eq!(e.stats("blog").unwrap().admitted_total, 0);
    assert_eq!(refused_total(&e), 0);
}

/// What reads one way, or reads several ways into one room, is decided as before.
#[test]
fn a_request_one_room_governs_is_decided_there() {
    let e = Engine::from_text(ENFORCING, NOW).unwrap();
    for (target, host, room, admitted) in [
        ("/shop/item", Some("www.example.com"), "shop", false),
        ("/shop/Item-42", Some("www.example.com"), "shop", false),
        ("/shop/red%20shoes", Some("www.example.com"), "shop", false),
        ("/shop/a/../b", Some("www.example.com"), "shop", false),
        ("/blog/x", Some("www.example.com"), "blog", true),
        ("/blog/%78", Some("www.example.com"), "blog", true),
        (
            "http://api.example.com/x",
            Some("api.example.com"),
            "api",
            true,
        ),
        (
            "http://API.example.com/x",
            Some("api.example.com:443"),
            "api",
            true,
        ),
        ("/x", Some("api.example.com"), "api", true),
        ("/x", Some("shop.example.com"), "shop", false),
    ] {
        let r = routed(&e, target, host);
        assert!(!r.decision.ambiguous, "{target} {host:?}: {r:?}");
        assert_eq!(
            (r.room.as_str(), r.decision.outcome == Outcome::Admit),
            (room, admitted),
            "{target} {host:?}: {r:?}"
        );
    }
    assert_eq!(refused_total(&e), 0, "{}", e.metrics_text());
}

/// Requests refused as ambiguous, over every room (the metric's samples summed).
fn refused_total(engine: &Engine) -> u64 {
    let metrics = engine.metrics_text();
    let samples: Vec<u64> = metrics
        .lines()
        .filter(|l| l.starts_with("velvet_rope_room_ambiguous_refused_total{"))
        .map(|l| l.rsplit(' ').next().unwrap().parse::<u64>().unwrap())
        .collect();
    assert_eq!(samples.len(), 3, "one sample per room: {metrics}");
    samples.iter().sum()
}

/// Found by the review of the refusal: routes under two host patterns split a path by case
/// alone (`/SHOP/x` on `www`: the shop's without case, the site's with it), which the check
/// for ambiguity looked for only within one host pattern's routes.
#[test]
fn a_case_split_across_host_patterns_is_seen() {
    let config = |shop_mode: &str| {
        format!(
            r#"
[[rooms]]
name = "shop"
total_active_users = 10
new_users_per_minute = 10
mode = "{shop_mode}"
routes = [{{ host = "www.example.com", path = "/shop/" }}]

[[rooms]]
name = "site"
total_active_users = 10
new_users_per_minute = 10
queue_all = true
routes = [{{ path = "/" }}]
"#
        )
    };
    let e = Engine::from_text(&config("on"), NOW).unwrap();
    let r = routed(&e, "/SHOP/x", Some("www.example.com"));
    assert!(r.decision.ambiguous, "{r:?}");
    assert_eq!(
        routed(&e, "/shop/x", Some("www.example.com")).room.as_str(),
        "shop"
    );
    // The shop a dry run: the site decides (Fastify, case-sensitive, serves the site's page).
    let e = Engine::from_text(&config("dry_run"), NOW).unwrap();
    let r = routed(&e, "/SHOP/x", Some("www.example.com"));
    assert_eq!(
        (r.room.as_str(), r.decision.outcome, r.decision.ambiguous),
        ("site", Outcome::Queue, false)
    );
}

/// Found by the review of the refusal: a `Host` header written as no browser writes it
/// (upper case, a trailing dot, the default port, an empty port) was taken for its host by
/// the core, where Express, Fastify and Starlette route by its text and served the
/// site's page; userinfo (`x@host`, no `Host` header's) was stripped; and a host only in an
/// absolute-form target (HTTP/1.0 without `Host`) went to that host's room, where the
/// frameworks route by the header alone.
#[test]
fn host_forms_browsers_never_send_are_read_both_ways() {
    let e = Engine::from_text(
        r#"
[[rooms]]
name = "site"
total_active_users = 10
new_users_per_minute = 10
queue_all = true
routes = [{ path = "/" }]

[[rooms]]
name = "api"
total_active_users = 1000
new_users_per_minute = 1000
routes = [{ host = "api.example.com" }]
"#,
        NOW,
    )
    .unwrap();
    for host in [
        "x@api.example.com",
        "api.example.com.",
        "API.example.com",
        "api.example.com:80",
        "api.example.com:443",
        "api.example.com:",
    ] {
        let r = routed(&e, "/checkout", Some(host));
        assert!(r.decision.ambiguous, "{host}: {r:?}");
    }
    let r = routed(&e, "http://api.example.com/checkout", None);
    assert!(r.decision.ambiguous, "{r:?}");
    for host in ["API.example.com", "api.example.com:443"] {
        let r = routed(&e, "https://api.example.com/checkout", Some(host));
        assert!(r.decision.ambiguous, "{host}: {r:?}");
    }
    // As browsers send them: decided in the host's room.
    for (target, host) in [
        ("/checkout", Some("api.example.com")),
        ("/checkout", Some("api.example.com:8443")),
        ("https://api.example.com/checkout", Some("api.example.com")),
    ] {
        let r = routed(&e, target, host);
        assert_eq!(
            (r.room.as_str(), r.decision.outcome),
            ("api", Outcome::Admit),
            "{target} {host:?}: {r:?}"
        );
    }
}

/// Found by the second review: a `Host` header written as browsers do not write it misses an
/// exact host route in an application that compares its text, and falls through to a
/// wildcard route (Fastify's host constraints `'api.example.com'`, then `/.*\.example\.com/`):
/// every host pattern it matches is one of its rooms, not only the most specific.
#[test]
fn an_unusual_host_falls_through_to_a_wildcard() {
    let e = Engine::from_text(
        r#"
[[rooms]]
name = "api"
total_active_users = 1000
new_users_per_minute = 1000
routes = [{ host = "api.example.com" }]

[[rooms]]
name = "shop"
total_active_users = 10
new_users_per_minute = 10
queue_all = true
routes = [{ host = "*.example.com" }]
"#,
        NOW,
    )
    .unwrap();
    for host in [
        "API.example.com",
        "api.example.com:80",
        "api.example.com:443",
        "api.example.com.",
    ] {
        let r = routed(&e, "/x", Some(host));
        assert!(r.decision.ambiguous, "{host}: {r:?}");
    }
    let r = routed(&e, "/x", Some("api.example.com"));
    assert_eq!(
        (r.room.as_str(), r.decision.outcome),
        ("api", Outcome::Admit)
    );
    let r = routed(&e, "/x", Some("www.example.com"));
    assert_eq!(
        (r.room.as_str(), r.decision.outcome),
        ("shop", Outcome::Queue)
    );
}
