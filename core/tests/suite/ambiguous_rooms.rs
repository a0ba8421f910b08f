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
    let r = Request {
        method: b"GET",
        target: target.as_bytes(),
        host: host.map(str::as_bytes),
        headers: &[],
        client: None,
    };
    let routed = engine
        .decide_request(&r, NOW)
        .unwrap_or_else(|| panic!("{target} {host:?}: unrouted"));
    (
        routed.room.as_str().to_owned(),
        routed.decision.outcome == Outcome::Admit,
    )
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
