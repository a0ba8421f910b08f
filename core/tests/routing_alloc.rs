//! The router's common case allocates nothing: a plain target (`/` then letters, digits and
//! punctuation, no `%`, `\`, `#`, `;`, empty or dot segment), whatever its query. Counted with a
//! global allocator of this test binary's own.

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;

use velvet_rope::routing::{CaseRule, Route, Router};

struct Counting;

thread_local! {
    /// Allocations made by this thread (the tests run side by side: each counts its own).
    static ALLOCATIONS: Cell<usize> = const { Cell::new(0) };
}

/// Allocations this thread made so far.
fn allocations() -> usize {
    ALLOCATIONS.with(Cell::get)
}

// SAFETY: forwards to the system allocator unchanged; only counts calls.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        // A const thread-local without a destructor: reading it allocates nothing.
        let _ = ALLOCATIONS.try_with(|c| c.set(c.get() + 1));
        // SAFETY: the caller's contract is `System`'s.
        unsafe { System.alloc(layout) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: as above.
        unsafe { System.dealloc(ptr, layout) }
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

#[test]
fn plain_targets_allocate_nothing() {
    for case in [CaseRule::Sensitive, CaseRule::Insensitive, CaseRule::Either] {
        let router = Router::new(
            [("/shop", "shop"), ("/vault", "vault")],
            Some("site"),
            ["/static/", "/health"],
            case,
        )
        .unwrap();
        let targets: [&[u8]; 5] = [
            b"/shop/item",
            b"/static/app.css",
            b"/about/us.html?q=/../%zz",
            b"/SHOP/Item-42_x~y",
            b"/",
        ];
        let before = allocations();
        let mut rooms = 0;
        for _ in 0..100 {
            for t in targets {
                if matches!(router.route(t), Route::Room(_)) {
                    rooms += 1;
                }
            }
        }
        assert_eq!(allocations(), before, "{case:?}");
        assert!(rooms > 0);
    }
}

/// A whole request through a room's rules and routes allocates nothing either: a returning
/// visitor's plain request, bypassed, refused, counted only, or decided after 20 rules that do
/// not match it (headers, cookies, query, clients and paths read).
#[test]
fn rules_and_routes_allocate_nothing_for_plain_requests() {
    use velvet_rope::request::Request;
    use velvet_rope::Engine;
    const NOW: u64 = 1_800_000_000_000;
    let mut rules = String::new();
    for i in 0..16 {
        rules.push_str(&format!(
            "[[rooms.rules]]\nname = \"r{i}\"\naction = \"bypass\"\nheaders = {{ \"x-token-{}\" = \"t-*\" }}\n\
             cookies = {{ \"c{i}\" = \"*\" }}\nquery = [\"q{i}=1\"]\nclients = [\"192.0.2.{i}\"]\n",
            i % 8
        ));
    }
    let engine = Engine::from_text(
        &format!(
            "[[rooms]]\nname = \"shop\"\ntotal_active_users = 1000\nnew_users_per_minute = 1000\n\
             routes = [{{ host = \"shop.example.com\" }}, {{ host = \"*.example.org\", path = \"/x\" }}]\n\
             [[rooms.rules]]\nname = \"static\"\naction = \"bypass\"\npaths = [\"/static/\"]\n\
             [[rooms.rules]]\nname = \"bots\"\naction = \"reject\"\nheaders = {{ \"user-agent\" = \"*BadBot*\" }}\n\
             [[rooms.rules]]\nname = \"api\"\naction = \"count_only\"\npaths = [\"/api/\"]\nmethods = [\"POST\"]\n\
             [[rooms.rules]]\nname = \"office\"\naction = \"bypass\"\nclients = [\"10.0.0.0/8\"]\n{rules}"
        ),
        NOW,
    )
    .unwrap();
    let first = Request {
        method: b"GET",
        target: b"/cart?x=1",
        host: Some(b"shop.example.com"),
        headers: &[],
        client: None,
    };
    let ticket = engine
        .decide_request(&first, NOW)
        .unwrap()
        .decision
        .set_cookie
        .unwrap();
    let cookie = format!("a=1; {}; b=2", ticket.split(';').next().unwrap());
    let headers: [(&[u8], &[u8]); 5] = [
        (b"Host", b"shop.example.com"),
        (
            b"User-Agent",
            b"Mozilla/5.0 (X11; Linux x86_64) Chrome/131.0",
        ),
        (b"Accept", b"text/html"),
        (b"Cookie", cookie.as_bytes()),
        (b"X-Token-3", b"nope"),
    ];
    let client = Some("100.64.0.9".parse().unwrap());
    let requests = [
        (&b"GET"[..], &b"/products/shoes?color=blue"[..]),
        (b"GET", b"/static/app.css"),
        (b"POST", b"/api/cart"),
        (b"GET", b"/cart?q3=2&x=%41"),
    ];
    // Warm: a first call may set up thread-local caches.
    for (method, target) in requests {
        let r = Request {
            method,
            target,
            host: None,
            headers: &headers,
            client,
        };
        engine.decide_request(&r, NOW).unwrap();
    }
    let before = allocations();
    let mut decided = 0;
    for _ in 0..100 {
        for (method, target) in requests {
            let r = Request {
                method,
                target,
                host: None,
                headers: &headers,
                client,
            };
            let d = engine.decide_request(&r, NOW).unwrap().decision;
            assert!(d.set_cookie.is_none(), "{d:?}");
            decided += 1;
            let bot = [(&b"User-Agent"[..], &b"a BadBot"[..])];
            let refused = Request {
                method,
                target,
                host: Some(b"shop.example.com"),
                headers: &bot,
                client,
            };
            engine.decide_request_in(b"shop", &refused, NOW).unwrap();
        }
    }
    assert_eq!(allocations(), before, "{decided} decisions");
}

/// Asking whether a plain request might belong to another room allocates nothing: a path
/// with upper case under the default path case rule (`either`), which several rooms' routes
/// make worth asking about. (A target in absolute form, or with escapes or dot segments, is
/// read into copies already to be routed.)
#[test]
fn asking_for_other_rooms_allocates_nothing_for_plain_requests() {
    use velvet_rope::request::Request;
    use velvet_rope::Engine;
    const NOW: u64 = 1_800_000_000_000;
    let engine = Engine::from_text(
        "[[rooms]]\nname = \"shop\"\ntotal_active_users = 1000\nnew_users_per_minute = 1000\n\
         routes = [{ path = \"/shop/\" }, { host = \"shop.example.com\" }]\n\
         [[rooms]]\nname = \"site\"\ntotal_active_users = 1000\nnew_users_per_minute = 1000\n\
         routes = [{ path = \"/\" }]\n\
         [[rooms]]\nname = \"api\"\ntotal_active_users = 1000\nnew_users_per_minute = 1000\n\
         routes = [{ host = \"api.example.com\" }]\n",
        NOW,
    )
    .unwrap();
    let requests: [(&[u8], Option<&[u8]>); 4] = [
        (b"/shop/Item-42", Some(b"www.example.com")),
        (b"/About/Us", Some(b"www.example.com")),
        (b"/Docs/V2", Some(b"api.example.com")),
        (b"/X", Some(b"shop.example.com")),
    ];
    let decide = |(target, host): (&[u8], Option<&[u8]>), cookie: Option<&[u8]>| {
        let headers: Vec<(&[u8], &[u8])> =
            cookie.map(|c| (&b"Cookie"[..], c)).into_iter().collect();
        let r = Request {
            method: b"GET",
            target,
            host,
            headers: &headers,
            client: None,
        };
        engine.decide_request(&r, NOW).unwrap()
    };
    // Each request's ticket, from a first decision (the steady case then sets nothing).
    let cookies: Vec<Vec<u8>> = requests
        .iter()
        .map(|&r| {
            let d = decide(r, None).decision;
            assert!(!d.ambiguous, "{d:?}");
            let c = d.set_cookie.unwrap();
            c.split(';').next().unwrap().as_bytes().to_vec()
        })
        .collect();
    let headers: Vec<[(&[u8], &[u8]); 1]> =
        cookies.iter().map(|c| [(&b"Cookie"[..], &c[..])]).collect();
    let mut before = allocations();
    // The first round warms what a first steady decision of a thread sets up.
    for round in 0..101 {
        if round == 1 {
            before = allocations();
        }
        for ((target, host), headers) in requests.iter().zip(&headers) {
            let r = Request {
                method: b"GET",
                target,
                host: *host,
                headers,
                client: None,
            };
            let d = engine.decide_request(&r, NOW).unwrap().decision;
            assert!(d.set_cookie.is_none() && !d.ambiguous, "{d:?}");
        }
    }
    assert_eq!(allocations(), before);
}
