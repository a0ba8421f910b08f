//! A room whose rules read cookies finds its ticket in the same pass over the `Cookie` header
//! (no second search): it must read every visitor's ticket as a room without rules does,
//! whatever the header holds around it (other cookies, the rules' own cookies, joined lines,
//! quotes, blanks, several `Cookie` lines, a rule that matches first).

use velvet_rope::request::Request;
use velvet_rope::{Decision, Engine, Outcome};

const NOW: u64 = 1_800_000_000_000;

const KEYS: &str = r#"
[[tickets.keys]]
id = 1
secret = "MDEyMzQ1Njc4OWFiY2RlZjAxMjM0NTY3ODlhYmNkZWY"
"#;

/// The room `shop` of a few seats, with `rules` (TOML array or empty).
fn engine(rules: &str) -> Engine {
    let text = format!(
        "{KEYS}\n[[rooms]]\nname = \"shop\"\ntotal_active_users = 3\n\
         new_users_per_minute = 1000\nrules = {rules}\n"
    );
    Engine::from_text(&text, NOW).unwrap()
}

/// Rules that read cookies (none matching the visitors below but `staff=st-1`), and a query
/// rule first: a request matching none of them reads every cookie condition.
const COOKIE_RULES: &str = r#"[
  { name = "debug", action = "reject", query = ["debug"] },
  { name = "staff", action = "bypass", cookies = { staff = "st-*" } },
  { name = "beta", action = "queue", cookies = { beta = "1" } },
  { name = "preview", action = "bypass", cookies = { preview = "yes" } },
]"#;

/// `request` to `shop`'s `/` with these `Cookie` lines.
fn decide(engine: &Engine, cookies: &[&str]) -> Decision {
    let headers: Vec<(&[u8], &[u8])> = cookies
        .iter()
        .map(|c| (&b"Cookie"[..], c.as_bytes()))
        .collect();
    let request = Request {
        method: b"GET",
        target: b"/",
        host: Some(b"shop.example.com"),
        headers: &headers,
        client: None,
    };
    engine
        .decide_request_in(b"shop", &request, NOW + 1)
        .unwrap()
}

/// Two visitors' tickets (`name=value`) of `engine`'s `shop`, taking two of its three seats;
/// a third visitor takes the last.
fn fill(engine: &Engine) -> (String, String) {
    let mut t: Vec<String> = (0..3)
        .map(|_| {
            let d = engine.admit("shop", None, NOW).unwrap();
            assert_eq!(d.outcome, Outcome::Admit);
            d.set_cookie.unwrap().split(';').next().unwrap().to_owned()
        })
        .collect();
    t.truncate(2);
    let other = t.pop().unwrap();
    (t.pop().unwrap(), other)
}

/// `Cookie` lines around ticket `t` (`name=value`), `other` another visitor's ticket.
fn cases(t: &str, other: &str) -> Vec<Vec<String>> {
    let (name, value) = t.split_once('=').unwrap();
    let other = &other[name.len() + 1..];
    vec![
        vec![t.into()],
        vec![format!("a=1; {t}; b=2")],
        vec![format!("beta=0; {t}; staff=no")],
        vec![format!("{t}; beta=0; preview=no")],
        vec![format!("staff=x;{t};beta=2")],
        vec![format!("  {t}  ;x=1")],
        vec![format!("\t{t}")],
        vec![format!("{name}=\"{value}\"; a=1")],
        vec![format!("{name}={value}x; a=1")],
        vec![format!("{name}=; {t}")],
        vec![format!("{t}; {name}={other}")],
        vec![format!("ref=x{t}; {t}")],
        // A `,` the pass does not read past: the ticket is searched for by itself.
        vec![format!("a=1,{t}")],
        vec![format!("a=1,b=2; {t}")],
        vec![format!("{t},staff=no")],
        vec![format!("staff=x,{name}={other}; {t}")],
        // Several lines: read as their join.
        vec!["a=1".into(), t.into()],
        vec![format!("a=1,{name}={other}"), t.into()],
        vec![],
        vec![format!("{name}=garbage; beta=1")],
    ]
}

#[test]
fn a_ticket_is_read_alike_with_and_without_cookie_rules() {
    let plain = engine("[]");
    let ruled = engine(COOKIE_RULES);
    // Every seat taken: a visitor whose ticket is not read would queue.
    let (pt, po) = fill(&plain);
    let (rt, ro) = fill(&ruled);
    for (a_lines, b_lines) in cases(&pt, &po).iter().zip(cases(&rt, &ro)) {
        let a_lines: Vec<&str> = a_lines.iter().map(String::as_str).collect();
        let b_lines: Vec<&str> = b_lines.iter().map(String::as_str).collect();
        let (a, b) = (decide(&plain, &a_lines), decide(&ruled, &b_lines));
        let beta = b_lines.iter().any(|l| l.contains("beta=1"));
        assert_eq!(
            (
                b.outcome,
                b.set_cookie.is_some(),
                b.bypassed,
                b.rule.is_some()
            ),
            (a.outcome, a.set_cookie.is_some(), false, beta),
            "{b_lines:?}"
        );
    }
    // The steady visitor is admitted without a new ticket, in a full room.
    let steady = decide(&ruled, &[&format!("a=1; {rt}; b=2")]);
    assert_eq!(
        (steady.outcome, steady.set_cookie.is_none()),
        (Outcome::Admit, true)
    );
    // A rule that matches first lets pass before any ticket is read.
    let staff = decide(&ruled, &[&format!("staff=st-1; {rt}")]);
    assert!(staff.bypassed);
}
