//! A request as every front door hands it to the core: which room it belongs to (`routes`),
//! what the room's `rules` do with it, and who its client is.
//!
//! A front door builds a [`Request`] from what its server parsed (method, request-target,
//! host, headers, the client's address) and calls
//! [`Engine::decide_request`](crate::Engine::decide_request) (the core picks the room) or
//! [`Engine::decide_request_in`](crate::Engine::decide_request_in) (the server picked it: an
//! nginx location, an Envoy route). Either evaluates the room's rules, finds the ticket (a
//! cookie, or a `Velvet-Rope-Ticket` header where the room accepts one) and decides; nothing
//! is allocated on the way unless the target needs more than one reading (see `routing`).
//!
//! ```
//! use velvet_rope::{Engine, Outcome};
//! use velvet_rope::request::Request;
//!
//! let engine = Engine::from_text(r#"
//!     [[rooms]]
//!     name = "shop"
//!     total_active_users = 1
//!     new_users_per_minute = 1
//!     routes = [{ host = "shop.example.com" }]
//!     [[rooms.rules]]
//!     name = "health"
//!     action = "bypass"
//!     paths = ["/health"]
//! "#, 1_800_000_000_000).unwrap();
//! let get = |target: &'static str| Request {
//!     method: b"GET",
//!     target: target.as_bytes(),
//!     host: Some(b"Shop.Example.com:443"),
//!     headers: &[],
//!     client: None,
//! };
//! let now = 1_800_000_000_000;
//! let first = engine.decide_request(&get("/cart"), now).unwrap();
//! assert_eq!(first.room.as_str(), "shop");
//! assert_eq!(first.decision.outcome, Outcome::Admit);
//! let second = engine.decide_request(&get("/cart"), now).unwrap();
//! assert_eq!(second.decision.outcome, Outcome::Queue);
//! let health = engine.decide_request(&get("/health"), now).unwrap();
//! assert!(health.decision.bypassed);
//! let other = Request { host: Some(b"blog.example.com"), ..get("/cart") };
//! assert!(engine.decide_request(&other, now).is_none());
//! ```

use std::cell::OnceCell;
use std::net::IpAddr;

pub(crate) mod clients;
pub(crate) mod cookie_names;
pub(crate) mod glob;
pub(crate) mod host;
pub(crate) mod query;
pub(crate) mod routes;
pub(crate) mod rule;

pub use clients::{client_address, parse_peer, CidrSet};
pub use rule::MAX_RULES;

use crate::routing::Target;
use host::HostSeen;

/// The request header a room with `ticket_header = true` takes its ticket from, and the
/// response header that carries a new ticket back.
pub const TICKET_HEADER: &str = "Velvet-Rope-Ticket";

/// One request, as the front door's server parsed it. Borrowed: building one allocates
/// nothing.
#[derive(Debug, Clone, Copy)]
pub struct Request<'a> {
    /// The method (`GET`), as received.
    pub method: &'a [u8],
    /// The request-target as received (`/path?query`, or the absolute form
    /// `http://host/path`), or the path a framework hands over (ASGI's `path`, WSGI's
    /// `PATH_INFO` with its `QUERY_STRING` after a `?`).
    pub target: &'a [u8],
    /// The `Host` header (or HTTP/2's `:authority`); `None`: looked up in `headers`.
    pub host: Option<&'a [u8]>,
    /// Every request header, names in any case, in the order received (several `Cookie`
    /// headers are each read).
    pub headers: &'a [(&'a [u8], &'a [u8])],
    /// The client's address as the front door established it (its peer, or behind trusted
    /// proxies the address they vouch for: see [`client_address`]); `None`: unknown.
    pub client: Option<IpAddr>,
}

impl<'a> Request<'a> {
    /// The first header called `name` (ASCII case ignored).
    pub fn header(&self, name: &str) -> Option<&'a [u8]> {
        self.headers
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name.as_bytes()))
            .map(|(_, v)| *v)
    }

    /// Each `Cookie` header's value.
    pub fn cookie_headers(&self) -> impl Iterator<Item = &'a [u8]> + '_ {
        self.headers
            .iter()
            .filter(|(n, _)| n.eq_ignore_ascii_case(b"cookie"))
            .map(|(_, v)| *v)
    }

    /// The host it names: `host`, else its `Host` or `:authority` header.
    fn host_header(&self) -> Option<&'a [u8]> {
        self.host
            .or_else(|| {
                self.headers
                    .iter()
                    .find(|(n, _)| is_host(n))
                    .map(|(_, v)| *v)
            })
            .or_else(|| self.header(":authority"))
    }
}

/// Whether a header's name is `Host` in any case, compared as one word: `| 0x20` turns a
/// byte into `h`, `o`, `s` or `t` only from that letter in either case.
#[inline]
fn is_host(name: &[u8]) -> bool {
    match *name {
        [a, b, c, d] => {
            u32::from_le_bytes([a, b, c, d]) | 0x2020_2020 == u32::from_le_bytes(*b"host")
        }
        _ => false,
    }
}

/// A request with what several rules read, worked out once.
pub(crate) struct Prepared<'r, 'a> {
    /// The request.
    pub(crate) request: &'r Request<'a>,
    /// Its target, scanned (on first use: a room without path rules never scans it).
    target: OnceCell<Target<'a>>,
    /// The hosts it names: the absolute-form target's, and the `Host` header's; and whether
    /// the header writes its host as browsers never do (see `host::Form::Unusual`).
    hosts: OnceCell<([HostSeen<'a>; 2], bool)>,
}

impl<'r, 'a> Prepared<'r, 'a> {
    /// `request`, its target scanned.
    #[inline]
    pub(crate) fn new(request: &'r Request<'a>) -> Self {
        Self {
            request,
            target: OnceCell::new(),
            hosts: OnceCell::new(),
        }
    }

    /// The target, scanned (on first use).
    #[inline]
    pub(crate) fn target(&self) -> &Target<'a> {
        self.target.get_or_init(|| Target::new(self.request.target))
    }

    /// The hosts the request names (worked out on first use): its absolute-form target's,
    /// and its `Host` header's (userinfo there makes it no host).
    #[inline]
    pub(crate) fn hosts(&self) -> &[HostSeen<'a>; 2] {
        &self.read_hosts().0
    }

    /// Whether the `Host` header names its host in a form browsers never send for it (see
    /// `host::Form::Unusual`): an application may then not route it as that host.
    #[inline]
    pub(crate) fn host_header_unusual(&self) -> bool {
        self.read_hosts().1
    }

    fn read_hosts(&self) -> &([HostSeen<'a>; 2], bool) {
        self.hosts.get_or_init(|| {
            let seen = |raw: Option<&'a [u8]>| match raw {
                None => (HostSeen::Absent, host::Form::Usual),
                Some(raw) => match host::normalise_with_form(raw) {
                    Some((name, form)) => (HostSeen::Name(name), form),
                    None => (HostSeen::Bad, host::Form::Usual),
                },
            };
            let (target, _) = seen(host::authority_of(self.request.target));
            let (header, form) = match seen(self.request.host_header()) {
                // `user@host` is no `Host` header's value.
                (_, host::Form::Userinfo) => (HostSeen::Bad, host::Form::Usual),
                seen => seen,
            };
            ([target, header], form == host::Form::Unusual)
        })
    }
}

/// What a snapshot needs to place a request: the rooms' routes and the trusted proxies,
/// compiled with the configuration.
#[derive(Debug, Default)]
pub(crate) struct FrontDoor {
    /// Every room's routes.
    pub(crate) routes: routes::RouteTable,
    /// `settings.trusted_proxies`.
    pub(crate) trusted: clients::CidrSet,
}

impl FrontDoor {
    /// Compiles `config`'s routes and trusted proxies (validated already: an error here
    /// names the field all the same).
    pub(crate) fn compile(config: &crate::Config) -> crate::Result<Self> {
        Ok(Self {
            routes: routes::RouteTable::compile(config)
                .map_err(|(field, why)| crate::Error::invalid(field, why))?,
            trusted: clients::CidrSet::parse(&config.settings.trusted_proxies)
                .map_err(|why| crate::Error::invalid("settings.trusted_proxies", why))?,
        })
    }
}

#[cfg(all(test, not(velvet_rope_loom)))]
mod tests {
    use super::is_host;

    /// `is_host` answers as `eq_ignore_ascii_case` does: for every byte at every place of
    /// `host`, `HOST` and `HoSt`, and for names of other lengths.
    #[test]
    fn host_names_in_any_case_and_nothing_else() {
        for base in [b"host", b"HOST", b"HoSt"] {
            for at in 0..4 {
                for x in 0..=255u8 {
                    let mut name = *base;
                    name[at] = x;
                    assert_eq!(
                        is_host(&name),
                        name.eq_ignore_ascii_case(b"host"),
                        "{name:?}"
                    );
                }
            }
        }
        for name in [&b""[..], b"hos", b"hostt", b"x-host", b" host"] {
            assert!(!is_host(name), "{name:?}");
        }
    }
}
