//! The router (`velvet_rope::routing`): the shared table of request targets every front door
//! runs, and a property test against an independent normaliser.

use std::collections::BTreeMap;
use std::path::Path;

use proptest::prelude::*;
use serde::Deserialize;
use velvet_rope::routing::{CaseRule, Route, Router};

#[derive(Deserialize)]
struct Vectors {
    configs: BTreeMap<String, RouterConfig>,
    cases: Vec<(String, String, Option<String>, String)>,
}

#[derive(Deserialize)]
struct RouterConfig {
    rooms: BTreeMap<String, String>,
    default_room: Option<String>,
    bypass: Vec<String>,
    case_sensitive: bool,
}

impl RouterConfig {
    fn router(&self) -> Router {
        Router::new(
            &self.rooms,
            self.default_room.as_deref(),
            &self.bypass,
            if self.case_sensitive {
                CaseRule::Sensitive
            } else {
                CaseRule::Insensitive
            },
        )
        .expect("a valid router")
    }
}

fn data(path: &str) -> String {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    std::fs::read_to_string(root.join(path)).unwrap_or_else(|e| panic!("{path}: {e}"))
}

#[test]
fn every_vector_goes_to_its_room() {
    let vectors: Vectors =
        serde_json::from_str(&data("core/tests/data/routing_vectors.json")).unwrap();
    let routers: BTreeMap<&str, Router> = vectors
        .configs
        .iter()
        .map(|(name, c)| (name.as_str(), c.router()))
        .collect();
    let mut wrong = Vec::new();
    for (config, target, want, why) in &vectors.cases {
        let got = routers[config.as_str()].room_for(target.as_bytes());
        if got != want.as_deref() {
            wrong.push(format!(
                "{config} {target:?}: {got:?}, want {want:?} ({why})"
            ));
        }
    }
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
    assert!(vectors.cases.len() >= 90);
}

/// The Python and Node packages' copies of the vectors are this file, byte for byte.
#[test]
fn the_packages_copies_are_identical() {
    let original = data("core/tests/data/routing_vectors.json");
    for copy in [
        "python/tests/data/routing_vectors.json",
        "node/test/data/routing_vectors.json",
    ] {
        assert!(
            data(copy) == original,
            "{copy} differs from core/tests/data/routing_vectors.json: copy it again"
        );
    }
}

/// An independent canonical form, written plainly: the absolute form's path, cut at `?` and
/// `#`, percent-decoded, then `/`-separated segments with empty and `.` ones dropped and `..`
/// removing the one before. `None` when it cannot be normalised (a bad escape, a control
/// character, bytes that are not UTF-8).
fn reference(target: &str) -> Option<String> {
    let mut rest = target;
    if let Some(i) = rest.find("://") {
        let scheme = &rest[..i];
        if !scheme.is_empty()
            && scheme.starts_with(|c: char| c.is_ascii_alphabetic())
            && scheme
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || "+-.".contains(c))
        {
            let after = &rest[i + 3..];
            rest = &after[after.find(['/', '?', '#']).unwrap_or(after.len())..];
        }
    }
    let path = &rest[..rest.find(['?', '#']).unwrap_or(rest.len())];
    let mut bytes = Vec::new();
    let raw = path.as_bytes();
    let mut i = 0;
    while i < raw.len() {
        if raw[i] == b'%' {
            let hex = raw.get(i + 1..i + 3)?;
            bytes.push(u8::from_str_radix(std::str::from_utf8(hex).ok()?, 16).ok()?);
            i += 3;
        } else {
            bytes.push(raw[i]);
            i += 1;
        }
    }
    let decoded = String::from_utf8(bytes).ok()?;
    if decoded.chars().any(char::is_control) || path.chars().any(char::is_control) {
        return None;
    }
    let mut out: Vec<&str> = Vec::new();
    let segments: Vec<&str> = decoded.split('/').collect();
    let mut trailing = false;
    for (n, seg) in segments.iter().enumerate() {
        let last = n + 1 == segments.len();
        match *seg {
            "" | "." => trailing = last,
            ".." => {
                out.pop();
                trailing = last;
            }
            s => {
                out.push(s);
                trailing = false;
            }
        }
    }
    let mut canonical = format!("/{}", out.join("/"));
    if trailing && !out.is_empty() {
        canonical.push('/');
    }
    Some(canonical)
}

/// Whether `path` is under `prefix` by `case` (`Either`: by either rule, so under a room
/// prefix when the insensitive rule says so; see `bypassed` for bypass prefixes).
fn under(path: &str, prefix: &str, case: CaseRule) -> bool {
    match case {
        CaseRule::Sensitive => path.starts_with(prefix),
        CaseRule::Insensitive | CaseRule::Either => path
            .get(..prefix.len())
            .is_some_and(|head| head.eq_ignore_ascii_case(prefix)),
    }
}

/// Whether `path` is under the bypass `prefix` by `case` (`Either`: by both rules, so by the
/// sensitive one).
fn bypassed(path: &str, prefix: &str, case: CaseRule) -> bool {
    match case {
        CaseRule::Either => under(path, prefix, CaseRule::Sensitive),
        case => under(path, prefix, case),
    }
}

#[test]
fn the_reference_agrees_on_simple_cases() {
    assert_eq!(reference("/a/./b/../c?x#y").as_deref(), Some("/a/c"));
    assert_eq!(reference("http://h/static/%2e%2e/x").as_deref(), Some("/x"));
    assert_eq!(reference("/a//b/").as_deref(), Some("/a/b/"));
    assert_eq!(reference("/a/%zz"), None);
    assert_eq!(reference("/a/%00"), None);
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(20_000))]

    /// No target whose canonical form is under a room (and under no bypass prefix) is ever
    /// bypassed or left unrouted; no target that cannot be normalised is ever bypassed; and
    /// the router never panics, whatever the bytes.
    #[test]
    fn nothing_under_a_room_escapes_it(
        pieces in proptest::collection::vec(
            proptest::sample::select(vec![
                "/", "//", ".", "..", "%2e", "%2E", "%2f", "%2F", "%5c", "\\", "static", "shop",
                "SHOP", "Shop", "vault", "x", "?", "#", ";", "%", "%zz", "%73", "%53", "%25",
                "http://h", "http://u@h:1", "%00", "\t", "\u{17f}", "\u{212a}", "%c0%ae", "%ff",
                "%C3%A9", "*", ":", "@",
            ]),
            0..14,
        ),
        case in proptest::sample::select(vec![CaseRule::Sensitive, CaseRule::Insensitive, CaseRule::Either]),
        with_default in any::<bool>(),
    ) {
        let rooms = [("/shop", "shop"), ("/vault", "vault")];
        let bypass = ["/static/", "/x"];
        let router = Router::new(rooms, with_default.then_some("site"), bypass, case).unwrap();
        let target = pieces.concat();
        let route = router.route(target.as_bytes());
        match reference(&target) {
            Some(canonical) => {
                let bypassed = bypass.iter().any(|b| bypassed(&canonical, b, case));
                let roomed = with_default || rooms.iter().any(|(p, _)| under(&canonical, p, case));
                if roomed && !bypassed {
                    prop_assert!(matches!(route, Route::Room(_)),
                        "{target:?} (canonical {canonical:?}) was {route:?}");
                }
            }
            None => prop_assert_ne!(route, Route::Bypass, "{:?} cannot be normalised", target),
        }
    }

    /// Arbitrary bytes: an answer, never a panic; a room only among the router's.
    #[test]
    fn any_bytes_get_an_answer(target in proptest::collection::vec(any::<u8>(), 0..64)) {
        let router = Router::new([("/a", "a")], Some("d"), ["/b"], CaseRule::Insensitive).unwrap();
        if let Route::Room(i) = router.route(&target) {
            prop_assert!(i < router.rooms().len());
        }
    }
}

/// A `\` only a second decoding makes (`%255c`, `%25%35%63`), read as `/` by a handler that
/// decodes again on a server that splits on `\`: the reading that decodes twice and reads `\`
/// apart must run, as it does for `%252e` (found by review: it ran only for a raw `\` or a
/// `%5c`, so these left a bypassed prefix or went unrouted).
#[test]
fn a_backslash_made_by_a_second_decoding_leaves_no_bypass() {
    let with_site = Router::new(
        [("/shop", "shop")],
        Some("site"),
        ["/static/", "/health"],
        CaseRule::Either,
    )
    .unwrap();
    for target in [
        "/static/..%255ccheckout",
        "/static/..%255Ccheckout",
        "/static/%252e%252e%255ccheckout",
        "/health%255c..%255ccheckout",
        "/static/..%25%35%63checkout",
        "/static/..%25%35%43checkout",
    ] {
        assert!(
            matches!(with_site.route(target.as_bytes()), Route::Room(_)),
            "{target}"
        );
    }
    let shop_only = Router::new([("/shop", "shop")], None, ["/static/"], CaseRule::Either).unwrap();
    for target in ["/static/..%255cshop/item", "/x/..%255cshop/item"] {
        assert_eq!(
            shop_only.route(target.as_bytes()),
            Route::Room(0),
            "{target}"
        );
    }
}
