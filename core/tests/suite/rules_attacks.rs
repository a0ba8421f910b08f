//! Adversarial review of routes and rules (commits 8bf59c4, 13553d2): each test is a request
//! that the promise says a room decides (or a count the promise says is kept), and that the
//! engine as committed gets wrong. Against the conformance configuration where it can be.

use std::net::IpAddr;

use velvet_rope::request::Request;
use velvet_rope::{Config, Engine, Outcome};

const NOW: u64 = 1_800_000_000_000;
const CONFIG: &str = include_str!("../../../conformance/front_doors.toml");

fn conformance() -> Engine {
    Engine::from_text(CONFIG, NOW).unwrap()
}

fn client() -> Option<IpAddr> {
    Some("198.51.100.7".parse().unwrap())
}

/// A request to the shop's host from an ordinary client.
fn shop(target: &str) -> Request<'_> {
    Request {
        method: b"GET",
        target: target.as_bytes(),
        host: Some(b"shop.example.com"),
        headers: &[],
        client: client(),
    }
}

/// `(room, bypassed, outcome)`, or `None` for unrouted.
fn verdict(engine: &Engine, r: &Request<'_>) -> Option<(String, bool, Outcome)> {
    engine.decide_request(r, NOW).map(|x| {
        (
            x.room.as_str().to_owned(),
            x.decision.bypassed,
            x.decision.outcome,
        )
    })
}

/// `GET /cart#?preview=yes`: everything after `#` is a fragment. Express (`req.query` is `{}`;
/// the `/cart` route runs), gunicorn (`PATH_INFO=/cart`, `QUERY_STRING=` empty) and httptools
/// read no query at all, but `Target::query` cuts the path at the first `?` only, so the
/// `preview=yes` bypass rule sees `preview=yes` and lets the real `/cart` through undecided.
#[test]
fn a_query_after_a_fragment_does_not_satisfy_a_bypass_rule() {
    let engine = conformance();
    for target in [
        "/cart#?preview=yes",
        "/cart#x?preview=yes",
        "/cart#/?a=1&preview=yes",
    ] {
        let got = verdict(&engine, &shop(target));
        assert_eq!(
            got,
            Some(("shop".into(), false, Outcome::Queue)),
            "{target}: the app sees `/cart` with no query, so it must be decided"
        );
    }
}

/// `?preview=no&preview=yes`: a bypass rule must match only when every reading does, but
/// `query_has` matches when *any* piece does. Express hands the app `["no", "yes"]`, Django's
/// `QueryDict.get` and PHP read the last value, Flask's `args.get` the first: whichever one
/// the app reads, one order of the two makes the app serve the real page while the rule
/// bypasses the room.
#[test]
fn a_repeated_query_key_bypasses_only_when_every_value_matches() {
    let engine = conformance();
    for target in [
        "/cart?preview=no&preview=yes",
        "/cart?preview=yes&preview=no",
        "/cart?preview&preview=yes",
    ] {
        let got = verdict(&engine, &shop(target));
        assert_eq!(
            got,
            Some(("shop".into(), false, Outcome::Queue)),
            "{target}: one reading of `preview` is not `yes`"
        );
    }
    // The plain case still bypasses.
    assert_eq!(
        verdict(&engine, &shop("/cart?preview=yes&x=1")),
        Some(("shop".into(), true, Outcome::Admit))
    );
}

/// `GET /cart HTTP/1.0` with no `Host` header (Node, uvicorn, gunicorn all accept it; WSGI
/// has no `HTTP_HOST`, Node's `req.headers.host` is undefined) reaches the application just
/// the same. `RouteTable::room_for` treats an absent host as matching no host pattern, so a
/// room routed by host (`shop.example.com`) lets it through undecided, although the rules
/// module treats an unknown host as matching whatever holds traffic back (and a route is
/// exactly that).
#[test]
fn a_request_without_any_host_is_not_let_through_by_host_routes() {
    let engine = conformance();
    let r = Request {
        host: None,
        ..shop("/cart")
    };
    assert!(
        engine.decide_request(&r, NOW).is_some(),
        "no Host header: the origin serves it, so a host-routed room must decide it"
    );
}

/// A `reject` rule in a `mode = "dry_run"` room refuses the request for real (403), and is not
/// counted in `would_have_rejected`: the room's mode says "decide and count, let everyone
/// through" and `would_have` exists to say what a rule or the room would have done.
#[test]
fn a_reject_rule_in_a_dry_run_room_passes_and_is_counted() {
    let engine = Engine::from_text(
        "[[rooms]]\nname = \"shop\"\ntotal_active_users = 100\nnew_users_per_minute = 100\n\
         mode = \"dry_run\"\nroutes = [{ path = \"/\" }]\n\
         [[rooms.rules]]\nname = \"bots\"\naction = \"reject\"\nmethods = [\"DELETE\"]\n",
        NOW,
    )
    .unwrap();
    let r = Request {
        method: b"DELETE",
        host: Some(b"example.com"),
        ..shop("/x")
    };
    let d = engine.decide_request(&r, NOW).unwrap().decision;
    assert_eq!(
        (d.outcome, d.would_have),
        (Outcome::Admit, Some(Outcome::Reject)),
        "a dry run passes everyone"
    );
    let stats: serde_json::Value = serde_json::from_str(&engine.stats_json()).unwrap();
    assert_eq!(stats["rooms"]["shop"]["would_have_rejected"], 1);
}

/// A bad route path is reported against the first route of its host group, not the route
/// that holds it (`rooms[0].routes[1].path` here).
#[test]
fn a_route_error_names_the_route_that_is_wrong() {
    let text = "[[rooms]]\nname = \"shop\"\ntotal_active_users = 1\nnew_users_per_minute = 1\n\
                routes = [{ path = \"/ok\" }, { path = \"bad\" }]\n";
    let err = Config::from_toml(text)
        .and_then(|c| c.validate())
        .unwrap_err()
        .to_string();
    assert!(err.contains("rooms[0].routes[1].path"), "{err}");
}

/// A reload that changes a room's capacity but not its rules zeroes the rules' hit counts
/// (and the dry-run tallies): the room is rebuilt with fresh counters for them although its
/// admission counters are carried over. A reload that changes nothing keeps them.
#[test]
fn rule_hit_counts_survive_a_reload_that_leaves_the_rules_alone() {
    let cfg = |seats: u32| {
        format!(
            "[[rooms]]\nname = \"shop\"\ntotal_active_users = {seats}\nnew_users_per_minute = 100\n\
             routes = [{{ path = \"/\" }}]\n\
             [[rooms.rules]]\nname = \"health\"\naction = \"bypass\"\npaths = [\"/health\"]\n"
        )
    };
    let engine = Engine::from_text(&cfg(2), NOW).unwrap();
    let health = Request {
        host: Some(b"example.com"),
        ..shop("/health")
    };
    for _ in 0..5 {
        assert!(
            engine
                .decide_request(&health, NOW)
                .unwrap()
                .decision
                .bypassed
        );
    }
    let matched = |e: &Engine| {
        let s: serde_json::Value = serde_json::from_str(&e.stats_json()).unwrap();
        s["rooms"]["shop"]["rules"][0]["matched"].clone()
    };
    engine.reload(Config::from_toml(&cfg(2)).unwrap()).unwrap();
    assert_eq!(matched(&engine), 5);
    engine.reload(Config::from_toml(&cfg(3)).unwrap()).unwrap();
    assert_eq!(
        matched(&engine),
        5,
        "the rule did not change; only the room's capacity did"
    );
}
