//! The front-door conformance table (`conformance/front_doors.{toml,json}`) against the core,
//! and what routes, rules, header tickets and dry runs do beyond it.

use std::net::IpAddr;

use velvet_rope::request::Request;
use velvet_rope::{Decision, Engine, Outcome, PageRequest};

const NOW: u64 = 1_800_000_000_000;
const CONFIG: &str = include_str!("../../../conformance/front_doors.toml");
const TABLE: &str = include_str!("../../../conformance/front_doors.json");

/// One row of the table.
#[derive(serde::Deserialize)]
struct Case {
    name: String,
    method: String,
    target: String,
    host: String,
    headers: Vec<(String, String)>,
    client: String,
    expect: String,
    room: Option<String>,
}

/// What a routed decision is called in the table.
fn verdict(routed: Option<(&str, &Decision)>) -> (String, Option<String>) {
    match routed {
        None => ("unrouted".into(), None),
        Some((room, d)) => {
            let what = if d.bypassed {
                "bypass"
            } else if d.would_have.is_some() {
                "pass"
            } else {
                match d.outcome {
                    Outcome::Admit => "admit",
                    Outcome::Queue => "queue",
                    Outcome::Reject => "reject",
                }
            };
            (what.into(), Some(room.to_owned()))
        }
    }
}

fn cases() -> Vec<Case> {
    let table: serde_json::Value = serde_json::from_str(TABLE).unwrap();
    serde_json::from_value(table["cases"].clone()).unwrap()
}

#[test]
fn every_row_of_the_conformance_table() {
    let engine = Engine::from_text(CONFIG, NOW).unwrap();
    let mut failures = Vec::new();
    for case in cases() {
        let headers: Vec<(&[u8], &[u8])> = case
            .headers
            .iter()
            .map(|(n, v)| (n.as_bytes(), v.as_bytes()))
            .collect();
        let request = Request {
            method: case.method.as_bytes(),
            target: case.target.as_bytes(),
            host: Some(case.host.as_bytes()),
            headers: &headers,
            client: Some(case.client.parse::<IpAddr>().unwrap()),
        };
        let routed = engine.decide_request(&request, NOW);
        let got = verdict(routed.as_ref().map(|r| (r.room.as_str(), &r.decision)));
        if got != (case.expect.clone(), case.room.clone()) {
            failures.push(format!(
                "{}: {} {} (host {}): expected {} in {:?}, got {} in {:?}",
                case.name,
                case.method,
                case.target,
                case.host,
                case.expect,
                case.room,
                got.0,
                got.1
            ));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

fn engine(extra: &str) -> Engine {
    let text = format!(
        "[[rooms]]\nname = \"shop\"\ntotal_active_users = 2\nnew_users_per_minute = 100\n\
         routes = [{{ path = \"/\" }}]\n{extra}"
    );
    Engine::from_text(&text, NOW).unwrap()
}

fn get(target: &str) -> Request<'_> {
    Request {
        method: b"GET",
        target: target.as_bytes(),
        host: Some(b"example.com"),
        headers: &[],
        client: None,
    }
}

fn stats(engine: &Engine) -> serde_json::Value {
    let all: serde_json::Value = serde_json::from_str(&engine.stats_json()).unwrap();
    all["rooms"]["shop"].clone()
}

#[test]
fn a_header_ticket_holds_a_place_and_counts_once() {
    let engine = engine("ticket_header = true\nqueueing_method = \"fifo\"");
    // Two visitors fill the room; each keeps its seat with the header alone.
    let mut tickets = Vec::new();
    for _ in 0..2 {
        let d = engine.decide_request(&get("/"), NOW).unwrap().decision;
        assert_eq!(d.outcome, Outcome::Admit);
        assert!(d.ticket_header);
        tickets.push(d.ticket().unwrap().to_owned());
    }
    for t in &tickets {
        let headers = [(&b"Velvet-Rope-Ticket"[..], t.as_bytes())];
        let r = Request {
            headers: &headers,
            ..get("/")
        };
        assert_eq!(
            engine.decide_request(&r, NOW).unwrap().decision.outcome,
            Outcome::Admit
        );
    }
    // A third waits, and its JSON page carries its ticket; sent back, the ticket keeps its place.
    let third = engine.decide_request(&get("/"), NOW).unwrap().decision;
    assert_eq!(third.outcome, Outcome::Queue);
    assert_eq!(third.position, Some(1));
    let page = engine
        .render_page_for(
            "shop",
            &third,
            &PageRequest {
                accept: Some("application/json"),
                now_ms: NOW,
                ..Default::default()
            },
        )
        .unwrap()
        .unwrap();
    let json: serde_json::Value = serde_json::from_str(&page.body).unwrap();
    let ticket = json["ticket"].as_str().unwrap().to_owned();
    assert_eq!(Some(ticket.as_str()), third.ticket());
    // The third refreshes with its header ticket (it stays live); a fourth arrives a minute
    // later; the third is still first.
    let headers = [(&b"Velvet-Rope-Ticket"[..], ticket.as_bytes())];
    let refresh = engine
        .decide_request(
            &Request {
                headers: &headers,
                ..get("/")
            },
            NOW + 40_000,
        )
        .unwrap()
        .decision;
    assert_eq!(
        (refresh.outcome, refresh.ticket_error),
        (Outcome::Queue, None)
    );
    let ticket = refresh.ticket().map_or(ticket, str::to_owned);
    let fourth = engine
        .decide_request(&get("/"), NOW + 60_000)
        .unwrap()
        .decision;
    assert_eq!(fourth.outcome, Outcome::Queue);
    engine.tick(NOW + 61_000);
    let headers = [(&b"velvet-rope-ticket"[..], ticket.as_bytes())];
    let again = engine
        .decide_request(
            &Request {
                headers: &headers,
                ..get("/")
            },
            NOW + 62_000,
        )
        .unwrap()
        .decision;
    assert_eq!(again.outcome, Outcome::Queue);
    assert_eq!(again.ticket_error, None);
    assert_eq!(
        again.position,
        Some(1),
        "the header ticket kept its place ahead of the fourth"
    );
    // The room counted the two admitted visitors exactly once each.
    engine.tick(NOW + 63_000);
    assert_eq!(engine.stats("shop").unwrap().active_users, 2);
    assert_eq!(engine.stats("shop").unwrap().admitted_total, 2);
}

#[test]
fn a_header_ticket_is_ignored_unless_the_room_takes_it() {
    let engine = engine("");
    let first = engine.decide_request(&get("/"), NOW).unwrap().decision;
    let ticket = first.ticket().unwrap().to_owned();
    assert!(!first.ticket_header);
    let headers = [(&b"Velvet-Rope-Ticket"[..], ticket.as_bytes())];
    let r = Request {
        headers: &headers,
        ..get("/")
    };
    // Counted as a new visitor: a second seat.
    engine.decide_request(&r, NOW).unwrap();
    engine.tick(NOW + 1000);
    assert_eq!(engine.stats("shop").unwrap().active_users, 2);
}

#[test]
fn the_cookie_wins_over_the_header() {
    let engine = engine("ticket_header = true");
    let a = engine.decide_request(&get("/"), NOW).unwrap().decision;
    let b = engine.decide_request(&get("/"), NOW).unwrap().decision;
    let cookie = format!("__vr_shop={}", a.ticket().unwrap());
    let headers = [
        (&b"Cookie"[..], cookie.as_bytes()),
        (&b"Velvet-Rope-Ticket"[..], b.ticket().unwrap().as_bytes()),
    ];
    let d = engine
        .decide_request(
            &Request {
                headers: &headers,
                ..get("/")
            },
            NOW,
        )
        .unwrap();
    assert_eq!(d.decision.outcome, Outcome::Admit);
    assert!(
        d.decision.set_cookie.is_none(),
        "a's cookie, counted this minute: steady"
    );
}

#[test]
fn a_dry_run_decides_counts_and_passes() {
    let engine = engine("mode = \"dry_run\"");
    let mut passed = 0;
    for _ in 0..5 {
        let d = engine.decide_request(&get("/"), NOW).unwrap().decision;
        assert_eq!(d.outcome, Outcome::Admit);
        if d.would_have == Some(Outcome::Queue) {
            passed += 1;
            assert!(
                d.set_cookie.is_some(),
                "the queued ticket is handed out as it would be"
            );
        }
    }
    assert_eq!(passed, 3, "two seats: three would have queued");
    engine.tick(NOW + 1000);
    let s = stats(&engine);
    assert_eq!(s["mode"], "dry_run");
    assert_eq!(s["would_have_queued"], 3);
    assert_eq!(s["would_have_rejected"], 0);
    assert_eq!(
        s["active_users"], 2,
        "only the two it would have admitted count"
    );
    let reject = engine_with_reject("mode = \"dry_run\"");
    for _ in 0..4 {
        assert_eq!(
            reject
                .decide_request(&get("/"), NOW)
                .unwrap()
                .decision
                .outcome,
            Outcome::Admit
        );
    }
    assert_eq!(stats(&reject)["would_have_rejected"], 2);
}

fn engine_with_reject(extra: &str) -> Engine {
    engine(&format!("queueing_method = \"reject\"\n{extra}"))
}

#[test]
fn rules_are_counted_by_name() {
    let engine = engine(
        "[[rooms.rules]]\nname = \"health\"\naction = \"bypass\"\npaths = [\"/health\"]\n\
         [[rooms.rules]]\naction = \"reject\"\nmethods = [\"DELETE\"]\n",
    );
    for _ in 0..3 {
        let d = engine
            .decide_request(&get("/health"), NOW)
            .unwrap()
            .decision;
        assert!(d.bypassed);
        assert_eq!(d.rule, Some(0));
    }
    let del = Request {
        method: b"DELETE",
        ..get("/x")
    };
    let d = engine.decide_request(&del, NOW).unwrap().decision;
    assert_eq!(d.outcome, Outcome::Reject);
    assert!(d.rejected_by_rule());
    engine.decide_request(&get("/x"), NOW).unwrap();
    let s = stats(&engine);
    assert_eq!(s["rules"][0]["name"], "health");
    assert_eq!(s["rules"][0]["matched"], 3);
    assert_eq!(s["rules"][1]["name"], "rules[1]");
    assert_eq!(s["rules"][1]["action"], "reject");
    assert_eq!(s["rules"][1]["matched"], 1);
}

#[test]
fn rejections_are_problem_details() {
    let engine = engine(
        "queueing_method = \"reject\"\n[[rooms.rules]]\nname = \"bots\"\naction = \"reject\"\n\
         headers = { \"user-agent\" = \"*bot*\" }\n",
    );
    let json = PageRequest {
        accept: Some("application/json"),
        now_ms: NOW,
        ..Default::default()
    };
    let ua = [(&b"User-Agent"[..], &b"a bot"[..])];
    let by_rule = engine
        .decide_request(
            &Request {
                headers: &ua,
                ..get("/")
            },
            NOW,
        )
        .unwrap();
    let page = engine
        .render_page_for("shop", &by_rule.decision, &json)
        .unwrap()
        .unwrap();
    assert_eq!(
        (page.status, page.content_type),
        (403, "application/problem+json")
    );
    assert_eq!(page.retry_after_secs, None);
    let body: serde_json::Value = serde_json::from_str(&page.body).unwrap();
    assert_eq!(body["status"], 403);
    assert_eq!(body["type"], "urn:velvet-rope:problem:refused-by-rule");
    let html = engine
        .render_page_for(
            "shop",
            &by_rule.decision,
            &PageRequest {
                now_ms: NOW,
                ..Default::default()
            },
        )
        .unwrap()
        .unwrap();
    assert_eq!(html.status, 403);
    assert!(html.body.contains("Forbidden"));
    // A full room: 429, Retry-After, problem details with the retry.
    for _ in 0..2 {
        engine.decide_request(&get("/"), NOW).unwrap();
    }
    let full = engine.decide_request(&get("/"), NOW).unwrap().decision;
    assert_eq!(full.outcome, Outcome::Reject);
    assert!(!full.rejected_by_rule());
    let page = engine
        .render_page_for("shop", &full, &json)
        .unwrap()
        .unwrap();
    assert_eq!(
        (page.status, page.content_type),
        (429, "application/problem+json")
    );
    let body: serde_json::Value = serde_json::from_str(&page.body).unwrap();
    assert_eq!(body["status"], 429);
    assert_eq!(body["retry_after_secs"], 20);
    assert_eq!(page.retry_after_secs, Some(20));
    assert!(page
        .headers(None)
        .iter()
        .any(|(k, v)| *k == "Retry-After" && v == "20"));
}

#[test]
fn configuration_errors_name_the_rule_and_the_field() {
    let bad = [
        (
            "[[rooms.rules]]\nname = \"staff\"\naction = \"bypass\"\nclients = [\"10.0.0.0/33\"]\n",
            "rooms[0].rules[0].clients",
            "staff",
        ),
        (
            "[[rooms.rules]]\naction = \"bypass\"\npaths = [\"static\"]\n",
            "rooms[0].rules[0].paths",
            "must start with `/`",
        ),
        (
            "[[rooms.rules]]\naction = \"bypass\"\nwhatever = 1\n",
            "",
            "whatever",
        ),
        ("[[rooms.rules]]\naction = \"maybe\"\n", "", "maybe"),
    ];
    for (extra, field, why) in bad {
        let text = format!(
            "[[rooms]]\nname = \"shop\"\ntotal_active_users = 2\nnew_users_per_minute = 2\n{extra}"
        );
        let e = Engine::from_text(&text, NOW).unwrap_err().to_string();
        assert!(e.contains(field) && e.contains(why), "{extra}: {e}");
    }
    let two = "[[rooms]]\nname = \"a\"\ntotal_active_users = 2\nnew_users_per_minute = 2\n\
               routes = [{ host = \"x.com\", path = \"/p\" }]\n\
               [[rooms]]\nname = \"b\"\ntotal_active_users = 2\nnew_users_per_minute = 2\n\
               routes = [{ host = \"X.com\", path = \"/p\" }]\n";
    let e = Engine::from_text(two, NOW).unwrap_err().to_string();
    assert!(
        e.contains("rooms[1].routes[0].path") && e.contains("room `a`"),
        "{e}"
    );
    let proxies = "[settings]\ntrusted_proxies = [\"nope\"]\n[[rooms]]\nname = \"a\"\n\
                   total_active_users = 2\nnew_users_per_minute = 2\n";
    let e = Engine::from_text(proxies, NOW).unwrap_err().to_string();
    assert!(
        e.contains("settings.trusted_proxies") && e.contains("nope"),
        "{e}"
    );
}

#[test]
fn the_most_specific_host_then_the_longest_path() {
    let text = r#"
        [[rooms]]
        name = "any"
        total_active_users = 9
        new_users_per_minute = 9
        routes = [{ path = "/checkout/express" }]
        [[rooms]]
        name = "wild"
        total_active_users = 9
        new_users_per_minute = 9
        routes = [{ host = "*.example.com", path = "/" }]
        [[rooms]]
        name = "exact"
        total_active_users = 9
        new_users_per_minute = 9
        routes = [{ host = "shop.example.com", path = "/checkout" }]
        [[rooms]]
        name = "exact-deeper"
        total_active_users = 9
        new_users_per_minute = 9
        routes = [{ host = "shop.example.com", path = "/checkout/gift" }]
    "#;
    let engine = Engine::from_text(text, NOW).unwrap();
    let room = |host: &'static str, target: &'static str| {
        let r = Request {
            host: Some(host.as_bytes()),
            ..get(target)
        };
        engine
            .decide_request(&r, NOW)
            .map(|r| r.room.as_str().to_owned())
    };
    assert_eq!(
        room("shop.example.com", "/checkout/gift/1").as_deref(),
        Some("exact-deeper")
    );
    assert_eq!(
        room("shop.example.com", "/checkout/express").as_deref(),
        Some("exact")
    );
    assert_eq!(room("shop.example.com", "/about").as_deref(), Some("wild"));
    assert_eq!(
        room("blog.example.com", "/checkout/express").as_deref(),
        Some("wild")
    );
    assert_eq!(
        room("other.org", "/checkout/express").as_deref(),
        Some("any")
    );
    assert_eq!(room("other.org", "/about"), None);
    // An absolute-form target's host counts as well as the Host header.
    assert_eq!(
        room("other.org", "http://shop.example.com/checkout/x").as_deref(),
        Some("exact")
    );
    // A host that is no host name is decided in the most specific room its path allows.
    assert_eq!(
        room("shop.example.com\u{0}", "/checkout/gift").as_deref(),
        Some("exact-deeper")
    );
    assert!(engine.has_routes());
}

#[test]
fn rules_that_let_pass_match_only_when_every_reading_does() {
    let engine = engine(
        "[[rooms.rules]]\nname = \"cdn\"\naction = \"bypass\"\nhosts = [\"cdn.example.com\"]\n\
         [[rooms.rules]]\nname = \"office\"\naction = \"bypass\"\nclients = [\"10.0.0.0/8\"]\n\
         [[rooms.rules]]\nname = \"block\"\naction = \"reject\"\nhosts = [\"evil.example.com\"]\n",
    );
    let with_host = |host: Option<&'static [u8]>, target: &'static str| {
        let r = Request {
            host,
            ..get(target)
        };
        let d = engine.decide_request(&r, NOW).unwrap().decision;
        if d.bypassed {
            "bypass"
        } else if d.outcome == Outcome::Reject {
            "reject"
        } else {
            "decided"
        }
    };
    assert_eq!(with_host(Some(b"CDN.example.com:443"), "/x"), "bypass");
    // The absolute form names another host: not every host is the CDN's.
    assert_eq!(
        with_host(Some(b"cdn.example.com"), "http://shop.example.com/x"),
        "decided"
    );
    // A host that is not one, or none: not the CDN's, and possibly the blocked one.
    assert_eq!(with_host(Some(b"cdn.example.com\x01"), "/x"), "reject");
    assert_eq!(with_host(None, "/x"), "reject");
    // A rule that holds back matches on any host named, and on a host that is not one.
    assert_eq!(
        with_host(Some(b"shop.example.com"), "http://evil.example.com/x"),
        "reject"
    );
    assert_eq!(with_host(Some(b"evil.example.com\x01"), "/x"), "reject");
    // An unknown client is no one's office.
    let unknown = Request {
        client: None,
        ..get("/x")
    };
    assert!(
        !engine
            .decide_request(&unknown, NOW)
            .unwrap()
            .decision
            .bypassed
    );
    let office = Request {
        client: Some("::ffff:10.9.8.7".parse().unwrap()),
        ..get("/x")
    };
    assert!(
        engine
            .decide_request(&office, NOW)
            .unwrap()
            .decision
            .bypassed
    );
}

#[test]
fn the_client_behind_trusted_proxies() {
    let text = "[settings]\ntrusted_proxies = [\"127.0.0.1\", \"10.0.0.0/8\"]\n\
                [[rooms]]\nname = \"a\"\ntotal_active_users = 2\nnew_users_per_minute = 2\n";
    let engine = Engine::from_text(text, NOW).unwrap();
    let peer: IpAddr = "127.0.0.1".parse().unwrap();
    let xff = [&b"203.0.113.9, 10.0.0.3"[..]];
    assert_eq!(
        engine.client_address(peer, xff.into_iter()),
        Some("203.0.113.9".parse().unwrap())
    );
    let outsider: IpAddr = "192.0.2.1".parse().unwrap();
    assert_eq!(
        engine.client_address(outsider, xff.into_iter()),
        Some(outsider)
    );
}

#[test]
fn decide_request_in_a_named_room_applies_its_rules() {
    let engine = Engine::from_text(
        "[[rooms]]\nname = \"shop\"\ntotal_active_users = 1\nnew_users_per_minute = 9\n\
         [[rooms.rules]]\naction = \"bypass\"\npaths = [\"/static/\"]\n",
        NOW,
    )
    .unwrap();
    assert!(!engine.has_routes());
    assert!(
        engine.decide_request(&get("/static/x"), NOW).is_none(),
        "no routes: nothing placed"
    );
    let d = engine
        .decide_request_in(b"shop", &get("/static/x"), NOW)
        .unwrap();
    assert!(d.bypassed);
    let d = engine
        .decide_request_in(b"shop", &get("/static/../x"), NOW)
        .unwrap();
    assert!(!d.bypassed);
    assert_eq!(d.outcome, Outcome::Admit);
    assert!(engine.decide_request_in(b"nope", &get("/"), NOW).is_err());
}

/// `admit_plain_header_bytes` decides as `admit_header_bytes` in a room that reads only the
/// `Cookie` header (a dry run's pass too), and decides nothing (no seat taken) in one that
/// reads more: rules, or header tickets.
#[test]
fn the_plain_admit_decides_only_in_rooms_that_read_the_cookie_alone() {
    for extra in ["", "mode = \"dry_run\""] {
        let plain = engine(extra);
        let twin = engine(extra);
        let cookie = |d: &Decision| {
            d.set_cookie
                .as_deref()
                .map(|c| c.split(';').next().unwrap().to_owned())
        };
        let mut cookies = Vec::new();
        for i in 0..4 {
            let a = plain.admit_plain_header_bytes(b"shop", None, NOW).unwrap();
            let b = twin.admit_header_bytes(b"shop", None, NOW).unwrap();
            let a = a.expect("a room without rules decides");
            assert_eq!(
                (a.outcome, a.would_have, a.set_cookie.is_some()),
                (b.outcome, b.would_have, b.set_cookie.is_some()),
                "{extra:?}: visitor {i}"
            );
            cookies.push((cookie(&a).unwrap(), cookie(&b).unwrap()));
        }
        // Returning visitors (two admitted, two waiting), then the counts, alike.
        for (i, (a, b)) in cookies.iter().enumerate() {
            let a = plain
                .admit_plain_header_bytes(b"shop", Some(a.as_bytes()), NOW + 1)
                .unwrap()
                .unwrap();
            let b = twin
                .admit_header_bytes(b"shop", Some(b.as_bytes()), NOW + 1)
                .unwrap();
            assert_eq!(
                (a.outcome, a.would_have, a.position),
                (b.outcome, b.would_have, b.position),
                "{extra:?}: returning visitor {i}"
            );
        }
        plain.tick(NOW + 1000);
        twin.tick(NOW + 1000);
        assert_eq!(stats(&plain), stats(&twin), "{extra:?}");
    }
    let rules = "[[rooms.rules]]\nname = \"health\"\naction = \"bypass\"\npaths = [\"/health\"]\n";
    for extra in [rules, "ticket_header = true"] {
        let reads = engine(extra);
        for _ in 0..3 {
            assert!(reads
                .admit_plain_header_bytes(b"shop", None, NOW)
                .unwrap()
                .is_none());
        }
        reads.tick(NOW + 1000);
        assert_eq!(
            stats(&reads)["active_users"],
            0,
            "{extra:?}: nothing decided"
        );
    }
    assert!(engine("")
        .admit_plain_header_bytes(b"nope", None, NOW)
        .is_err());
}

/// Several `Cookie` lines are read as their join with `; ` (HTTP/2's crumbs; servers join
/// repeated lines so): a cookie of the ticket's name after a `,` in an earlier line (another
/// cookie's unquoted value) does not shadow the visitor's ticket starting a later line. The
/// whole-request path and the `Cookie`-header path agree.
#[test]
fn a_ticket_in_a_later_cookie_line_is_not_shadowed() {
    let engine = engine("");
    let first = engine.admit_header_bytes(b"shop", None, NOW).unwrap();
    let cookie = first
        .set_cookie
        .unwrap()
        .split(';')
        .next()
        .unwrap()
        .to_owned();
    let name = cookie.split('=').next().unwrap().to_owned();
    // The room (two seats) fills.
    engine.admit_header_bytes(b"shop", None, NOW).unwrap();
    let planted = format!(
        "pref=x,{name}={}",
        "A".repeat(velvet_rope::ticket::ENCODED_LEN)
    );
    let headers: [(&[u8], &[u8]); 2] = [
        (b"cookie", planted.as_bytes()),
        (b"cookie", cookie.as_bytes()),
    ];
    let request = Request {
        headers: &headers,
        ..get("/")
    };
    let d = engine
        .decide_request_in(b"shop", &request, NOW + 1)
        .unwrap();
    assert_eq!((d.outcome, d.ticket_error), (Outcome::Admit, None));
    let joined = format!("{planted}; {cookie}");
    let d = engine
        .admit_header_bytes(b"shop", Some(joined.as_bytes()), NOW + 1)
        .unwrap();
    assert_eq!((d.outcome, d.ticket_error), (Outcome::Admit, None));
    // The planted value alone is taken (and refused): a new visitor, and the room is full.
    let alone: [(&[u8], &[u8]); 1] = [(b"cookie", planted.as_bytes())];
    let request = Request {
        headers: &alone,
        ..get("/")
    };
    let d = engine
        .decide_request_in(b"shop", &request, NOW + 1)
        .unwrap();
    assert_eq!(d.outcome, Outcome::Queue);
    assert!(d.ticket_error.is_some());
}
