//! Which room decides a request: one decision, made here, for every front door.
//!
//! A [`Router`] is built once from path prefixes mapped to rooms, an optional default room,
//! bypass prefixes (paths that never wait: health checks, static files) and a case rule; per
//! request, [`Router::route`] takes the request target as the server received it and answers
//! with a room, or none.
//!
//! ```
//! use velvet_rope::routing::{CaseRule, Route, Router};
//!
//! let router = Router::new(
//!     [("/shop", "shop")],
//!     None,
//!     ["/static/"],
//!     CaseRule::Insensitive,
//! ).unwrap();
//! assert_eq!(router.room_for(b"/shop/item?x=1"), Some("shop"));
//! assert_eq!(router.room_for(b"http://example.com/SHOP/item"), Some("shop"));
//! assert_eq!(router.room_for(b"/%73hop/item"), Some("shop"));
//! assert_eq!(router.route(b"/static/app.css"), Route::Bypass);
//! assert_eq!(router.room_for(b"/static/../shop/item"), Some("shop"));
//! assert_eq!(router.route(b"/about"), Route::Unrouted);
//! ```
//!
//! # Prefixes
//!
//! A prefix matches a path that starts with it, character for character (`/shop` matches
//! `/shop/item` and `/shopping`; write `/shop/` for the first only). A room prefix ending in
//! `/` also matches the path without that `/` (`/shop/` matches `/shop`, which Express without
//! strict routing and Fastify with `ignoreTrailingSlash` route as `/shop/`); a bypass prefix
//! does not (`/static/` does not bypass `/static`). The longest room prefix that matches
//! names the room; a path no room prefix matches goes to the default room, or is unrouted
//! without one. A path under a bypass prefix is not decided.
//!
//! # Normalisation: why a request is read more than one way
//!
//! Servers and frameworks do not agree on what path a target names. Express routes on the
//! target as written (`/%73hop` is not `/shop` to it; `http://x/shop/i` is); Fastify routes
//! on it percent-decoded except for reserved characters such as `%2F`; uvicorn and gunicorn
//! hand the application the path fully decoded (`%2F` becomes `/`); static file handlers
//! (`send`, Starlette's `StaticFiles`, Werkzeug's `safe_join`) then resolve `..`; WHATWG URL
//! parsing (`new URL(req.url, base)`) reads `\` as `/` and `%2e` as `.`; a handler may decode
//! a parameter its router decoded already (`%252e` becomes `.`). One canonical form
//! is not enough to be safe: if `%2F` is decoded, `/static%2Fx` looks bypassed while Express
//! routes it to `/:page`; if it is not, `/static/..%2Fvault.html` looks bypassed while
//! `express.static` serves `/vault.html`. So the router reads the target each of those ways
//! (the readings are listed in `reading.rs`, with who reads a target that way) and:
//!
//! - **decides it in a room if any reading puts it there**: under a room prefix (or, with a
//!   default room, under no prefix) and under no bypass prefix. A room prefix names the room
//!   before the default room does (`/static\..\checkout` is `/checkout` to a WHATWG parser:
//!   it goes to the checkout room, not the default one); the canonical reading is tried
//!   first, then the others in a fixed order, and the first room prefix found wins;
//! - bypasses it only if **every** reading is under a bypass prefix (or unrouted).
//!
//! The canonical reading: an absolute-form target (`http://user@host:port/path`) reduced to
//! its path; query and fragment dropped; percent-escapes decoded, `%2F` included; runs of
//! `/` merged (as `path.normalize` and `os.path.normpath` do); dot segments removed as RFC
//! 3986 says, never above the root. A plain target (`/` then letters, digits and
//! punctuation, no `%`, `\`, `#`, `;`, empty or dot segment) reads the same every way: that
//! common case is one pass over the bytes and allocates nothing.
//!
//! **Case.** [`CaseRule::Sensitive`] compares byte for byte. [`CaseRule::Insensitive`] (for
//! a framework that routes case-insensitively: Express by default, Fastify with
//! `caseSensitive: false`) compares under each fold such frameworks use (ASCII; Unicode
//! lowercase, as find-my-way's `toLowerCase`; Unicode uppercase-then-lowercase) and decides
//! if any fold puts the request in a room. [`CaseRule::Either`] (for an application whose
//! routers need not agree: an Express app's `express.Router()`s are case-insensitive whatever
//! the app says) compares byte for byte and under those folds: a request either rule puts in
//! a room is decided, and only one every fold bypasses passes.
//!
//! **Fail closed.** A target that cannot be normalised (a `%` not followed by two hex digits,
//! a control character such as NUL, tab or CR, raw or decoded, or bytes that are not UTF-8,
//! raw or decoded: overlong encodings of `.` and `/` among them) is never bypassed: its
//! readings are matched against the room prefixes and the default room only, so it goes to
//! the room its raw form or one of its normalisations names, else the default room, else
//! nowhere. `;` path parameters are ordinary characters (no framework served here strips
//! them), also read as a delimiter (Fastify's `useSemicolonDelimiter`).

mod fold;
pub(crate) use fold::has_ascii_upper;
mod reading;

use fold::Fold;
use reading::{scan, READINGS};

/// A request target scanned once (see [`Router::route_target`]).
#[derive(Debug, Clone, Copy)]
pub struct Target<'a> {
    bytes: &'a [u8],
    features: reading::Features,
}

impl<'a> Target<'a> {
    /// `bytes` (a request-target as received, or a path), scanned.
    #[inline]
    pub fn new(bytes: &'a [u8]) -> Self {
        Self {
            bytes,
            features: scan(bytes),
        }
    }

    /// The target as given.
    pub fn bytes(&self) -> &'a [u8] {
        self.bytes
    }

    /// Whether a `#` comes before the first `?` (what follows is a fragment to most servers).
    pub fn fragment_before_query(&self) -> bool {
        self.features.hash
    }

    /// The path (before any `?`) when every reading reads it as written (the routers' fast
    /// path; see [`Router::plain_second_bytes`]).
    #[inline]
    pub(crate) fn plain_path(&self) -> Option<&'a [u8]> {
        self.features
            .plain()
            .then(|| &self.bytes[..self.features.path_len])
    }

    /// The query string as received (after the first `?`, before any `#`), if any.
    pub fn query(&self) -> Option<&'a [u8]> {
        let rest = self.bytes.get(self.features.path_len..)?;
        let rest = rest.strip_prefix(b"?")?;
        Some(rest.split(|&b| b == b'#').next().unwrap_or(rest))
    }
}

/// Whether prefixes are compared with case or without.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CaseRule {
    /// Byte for byte: `/SHOP` is not `/shop` (Fastify's default, Starlette, Flask).
    Sensitive,
    /// Letters of any case alike (Express's default, Fastify with `caseSensitive: false`).
    Insensitive,
    /// Either of the two: decided when either rule puts the request in a room, passed only
    /// when both pass it (an application whose routers do not all compare alike).
    Either,
}

/// Where a request goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Route {
    /// Decided in the room with this index in [`Router::rooms`].
    Room(usize),
    /// Under a bypass prefix: never decided.
    Bypass,
    /// Under no room prefix, and there is no default room: not decided.
    Unrouted,
}

/// A router that cannot be built: the message names the prefix and the problem.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum RouteError {
    /// A prefix that cannot match a normalised path.
    #[error("path prefix `{prefix}` {problem}")]
    BadPrefix {
        /// The prefix as given.
        prefix: String,
        /// What is wrong with it.
        problem: &'static str,
    },
    /// Neither a default room nor a room prefix: nothing would ever be decided.
    #[error("give `room` (every path) or `rooms` (path prefix -> room)")]
    NoRoom,
}

/// The prefixes under one fold.
#[derive(Debug)]
struct Table {
    fold: Fold,
    /// Room prefixes, folded, longest first, each with its room's index.
    rooms: Vec<(Box<[u8]>, usize)>,
    /// Bypass prefixes, folded.
    bypass: Vec<Box<[u8]>>,
}

/// Which room decides a request (see the module's documentation): built once, then shared
/// by every thread (it is immutable).
#[derive(Debug)]
pub struct Router {
    /// Distinct room names, in order of first mention (default room first).
    names: Vec<String>,
    default: Option<usize>,
    /// One table per fold of the case rule.
    tables: Vec<Table>,
    /// Whether a plain (ASCII) path can be matched under the first folds alone (see
    /// `Fold::plain`): every prefix is ASCII, so the other folds read it as the last of those.
    ascii: bool,
    /// How many of `tables` answer for a plain path when `ascii` (see `Fold::plain`).
    plain: usize,
    /// Whether a path may be put in different rooms under different folds (see
    /// [`Router::folds_may_differ`]).
    folds_differ: bool,
}

impl Router {
    /// A router sending paths under each prefix of `rooms` to its room (the longest prefix
    /// wins; of equal ones, the first), the others to `default_room` (none: not decided), and
    /// never deciding paths under a prefix of `bypass`. Prefixes start with `/` and hold no
    /// `?`, `#` or control characters.
    pub fn new<P, R, B>(
        rooms: impl IntoIterator<Item = (P, R)>,
        default_room: Option<&str>,
        bypass: impl IntoIterator<Item = B>,
        case: CaseRule,
    ) -> Result<Self, RouteError>
    where
        P: AsRef<str>,
        R: AsRef<str>,
        B: AsRef<str>,
    {
        let mut names: Vec<String> = Vec::new();
        let mut index = |name: &str| match names.iter().position(|n| n == name) {
            Some(i) => i,
            None => {
                names.push(name.to_owned());
                names.len() - 1
            }
        };
        let default = default_room.map(&mut index);
        let mut by_prefix = Vec::new();
        for (prefix, room) in rooms {
            let prefix = checked(prefix.as_ref())?;
            by_prefix.push((prefix.to_owned(), index(room.as_ref())));
        }
        let bypass = bypass
            .into_iter()
            .map(|b| checked(b.as_ref()).map(str::to_owned))
            .collect::<Result<Vec<_>, _>>()?;
        if default.is_none() && by_prefix.is_empty() {
            return Err(RouteError::NoRoom);
        }
        // Longest first; a stable sort keeps the first of equal ones first.
        by_prefix.sort_by_key(|(p, _)| std::cmp::Reverse(p.len()));
        let ascii =
            by_prefix.iter().all(|(p, _)| p.is_ascii()) && bypass.iter().all(|b| b.is_ascii());
        let tables: Vec<Table> = Fold::all(case)
            .iter()
            .map(|&fold| {
                let mut rooms: Vec<(Box<[u8]>, usize)> = by_prefix
                    .iter()
                    .map(|(p, room)| (fold.prefix(p), *room))
                    .collect();
                // Folding can change lengths (`ß` and `ss`): longest first again.
                rooms.sort_by_key(|(p, _)| std::cmp::Reverse(p.len()));
                Table {
                    fold,
                    rooms,
                    bypass: bypass.iter().map(|b| fold.prefix(b)).collect(),
                }
            })
            .collect();
        // The folds of `Either` differ on a prefix with an upper-case letter (a path's upper
        // case is the caller's to look at: `RouteTable::may_be_ambiguous`); every other fold
        // reads an ASCII path alike, and a prefix that is not ASCII matches one only when a
        // fold makes it ASCII (`K`, the Kelvin sign, is `k`).
        let folds_differ = tables.len() > 1
            && ((case == CaseRule::Either
                && by_prefix
                    .iter()
                    .any(|(p, _)| p.bytes().any(|b| b.is_ascii_uppercase())))
                || by_prefix.iter().any(|(p, _)| {
                    !p.is_ascii() && Fold::all(case).iter().any(|f| f.prefix(p).is_ascii())
                }));
        Ok(Self {
            names,
            default,
            tables,
            ascii,
            plain: Fold::plain(case),
            folds_differ,
        })
    }

    /// Which plain paths (see [`Target::plain_path`]) may fall under one of its prefixes, by
    /// their second byte: entry `b` for a path whose second byte is `b`, entry 256 for the
    /// path `/`. A path whose entry is false is under none of them (a rule's paths use this to
    /// skip the rule). `None` when a prefix is not ASCII (it may fold to ASCII: plain paths
    /// are then compared under every fold, and no such table answers for them).
    pub(crate) fn plain_second_bytes(&self) -> Option<[bool; 257]> {
        if !self.ascii {
            return None;
        }
        let mut out = [false; 257];
        for table in &self.tables[..self.plain] {
            let mut allow = |form: &[u8]| match form.get(1) {
                // `/` (or `/` bare): every path.
                None => out = [true; 257],
                Some(&p) => {
                    for b in 0..=u8::MAX {
                        let read = match table.fold {
                            Fold::Exact => b,
                            _ => b.to_ascii_lowercase(),
                        };
                        if read == p {
                            out[usize::from(b)] = true;
                        }
                    }
                }
            };
            // Bypass prefixes match as written; room prefixes also bare (see `classify_by`).
            for b in &table.bypass {
                allow(b);
            }
            for (p, _) in &table.rooms {
                allow(p);
                if let Some(bare) = p.strip_suffix(b"/") {
                    allow(bare);
                }
            }
        }
        Some(out)
    }

    /// The rooms this router sends requests to: [`Route::Room`] indexes this list.
    pub fn rooms(&self) -> &[String] {
        &self.names
    }

    /// Whether every request goes to the default room (no prefixes, no bypass), so that a
    /// caller need not read the target at all.
    pub fn every_path(&self) -> bool {
        self.default.is_some()
            && self
                .tables
                .iter()
                .all(|t| t.rooms.is_empty() && t.bypass.is_empty())
    }

    /// The room of the request with `target` (its request-target as received: origin form
    /// `/path?query`, or absolute form `http://host/path`; a path such as ASGI's
    /// `scope["path"]` or WSGI's `PATH_INFO` does as well), or none.
    pub fn room_for(&self, target: &[u8]) -> Option<&str> {
        match self.route(target) {
            Route::Room(i) => Some(&self.names[i]),
            Route::Bypass | Route::Unrouted => None,
        }
    }

    /// Where the request with `target` goes (see the module's documentation).
    pub fn route(&self, target: &[u8]) -> Route {
        self.route_target(&Target::new(target))
    }

    /// [`Router::route`] for a target scanned already (several routers may read one target:
    /// the scan is done once).
    #[inline]
    pub fn route_target(&self, target: &Target<'_>) -> Route {
        let features = target.features;
        let target = target.bytes;
        if !features.plain() {
            return self.route_slowly(target, features);
        }
        let path = &target[..features.path_len];
        let tables = if self.ascii {
            &self.tables[..self.plain]
        } else {
            &self.tables[..]
        };
        let mut outcome = Outcome::default();
        for table in tables {
            let class = self.classify(table, path, true);
            let bypassed = matches!(class, Class::Bypass);
            if let Some(room) = outcome.add(class) {
                return Route::Room(room);
            }
            // With ASCII prefixes, a plain path's later folds (`Either`'s exact one) match
            // some of the prefixes the first matches: only a bypass may read otherwise there.
            // (A prefix that is not ASCII may fold to ASCII, `K` to `k`: every fold is read.)
            if self.ascii && !bypassed {
                break;
            }
        }
        outcome.finish(self.default)
    }

    /// Calls `f` with every path `target` may name, until it answers `true` (then `true`):
    /// each reading of it (see the module's documentation), in the order they are tried (a
    /// reading may repeat another); a plain target's path alone, without copying. For
    /// asking which rooms a request might belong to ([`Router::prefix_room`] of each).
    #[inline]
    pub(crate) fn any_reading(target: &Target<'_>, mut f: impl FnMut(&[u8]) -> bool) -> bool {
        if let Some(path) = target.plain_path() {
            return f(path);
        }
        // A UTF-8 slug's escapes: two readings, not every one (its others repeat them).
        if let Some(decoded) = reading::high_escapes_decoded(target.bytes, &target.features) {
            return f(&target.bytes[..target.features.path_len]) || f(&decoded);
        }
        each_reading(target.bytes, target.features, |view, _| {
            f(view).then_some(())
        })
        .is_some()
    }

    /// The longest of its room prefixes, in bytes, under any fold: bytes of a path past it
    /// never change which room prefix the path is under.
    pub(crate) fn longest_prefix(&self) -> usize {
        self.tables
            .iter()
            .flat_map(|t| t.rooms.iter().map(|(p, _)| p.len()))
            .max()
            .unwrap_or(0)
    }

    /// How many folds of its case rule it compares paths under ([`Router::prefix_room`]).
    pub(crate) fn folds(&self) -> usize {
        self.tables.len()
    }

    /// The room whose prefix `path` (one of [`Router::readings`]) is under when compared
    /// under fold `fold` (below [`Router::folds`]), bypass prefixes and the default room
    /// aside.
    pub(crate) fn prefix_room(&self, path: &[u8], fold: usize) -> Option<usize> {
        match self.classify(self.tables.get(fold)?, path, false) {
            Class::Prefix(room) => Some(room),
            Class::Bypass | Class::Default | Class::Unrouted => None,
        }
    }

    /// Whether a plain path can be put in different rooms under different folds, whatever
    /// its case: the case rule is `Either` and a prefix holds an upper-case letter (`/SHOP/x`
    /// and `/shop` put `/shop/X` in two rooms), or a prefix that is not ASCII folds to ASCII
    /// (`/K`, the Kelvin sign, is `/k` under the folds without case).
    pub(crate) fn folds_may_differ(&self) -> bool {
        self.folds_differ
    }

    /// [`Router::route`] for a target that not every reading reads alike.
    #[cold]
    fn route_slowly(&self, target: &[u8], features: reading::Features) -> Route {
        let mut outcome = Outcome::default();
        let room = each_reading(target, features, |view, features| {
            // The canonical reading decodes everything: after it, `malformed` is final.
            let may_bypass = !features.malformed;
            self.tables
                .iter()
                .find_map(|table| outcome.add(self.classify(table, view, may_bypass)))
        });
        match room {
            Some(room) => Route::Room(room),
            None => outcome.finish(self.default),
        }
    }

    /// Where one reading of a path goes under one fold.
    #[inline]
    fn classify(&self, table: &Table, path: &[u8], may_bypass: bool) -> Class {
        // One comparison loop per fold, the fold chosen once (the common two inline).
        match table.fold {
            Fold::Exact => self.classify_by(table, may_bypass, |p, bare| {
                fold::exact_starts_with(path, p, bare)
            }),
            Fold::Ascii => self.classify_by(table, may_bypass, |p, bare| {
                fold::ascii_starts_with(path, p, bare)
            }),
            fold => self.classify_by(table, may_bypass, |p, bare| fold.starts_with(path, p, bare)),
        }
    }

    #[inline(always)]
    fn classify_by(
        &self,
        table: &Table,
        may_bypass: bool,
        under: impl Fn(&[u8], bool) -> bool,
    ) -> Class {
        // A bypass prefix is matched as written; a room prefix ending in `/` also by the path
        // without that `/` (`/shop` is `/shop/` to routers that ignore a trailing slash).
        if may_bypass && table.bypass.iter().any(|b| under(b, false)) {
            return Class::Bypass;
        }
        for (prefix, room) in &table.rooms {
            if under(prefix, true) {
                return Class::Prefix(*room);
            }
        }
        if self.default.is_some() {
            Class::Default
        } else {
            Class::Unrouted
        }
    }
}

/// Calls `f` with each reading of `target` (see [`READINGS`]) in the order they are tried,
/// and the features as that reading left them, until it answers; its answer. (The readings
/// the scan's `features` say are relevant only; the first two always.)
#[inline(always)]
fn each_reading<T>(
    target: &[u8],
    mut features: reading::Features,
    mut f: impl FnMut(&[u8], &reading::Features) -> Option<T>,
) -> Option<T> {
    let room = target.len() + 8;
    let (mut scratch, mut view) = (Vec::with_capacity(room), Vec::with_capacity(room));
    for (n, reading) in READINGS.iter().enumerate() {
        if n > 1 && !reading.relevant(&features) {
            continue;
        }
        reading.read(target, &mut scratch, &mut view, &mut features);
        if let Some(answer) = f(&view, &features) {
            return Some(answer);
        }
    }
    None
}

/// Where one reading goes under one fold.
#[derive(Debug, Clone, Copy)]
enum Class {
    /// Under a bypass prefix.
    Bypass,
    /// Under this room's prefix.
    Prefix(usize),
    /// Under no prefix: the default room's.
    Default,
    /// Under no prefix, and there is no default room.
    Unrouted,
}

/// The readings seen so far: a room prefix in any of them names the room (the first such);
/// failing that, the default room, if any reading was not bypassed; failing that, the first
/// reading's answer.
#[derive(Debug, Default)]
struct Outcome {
    first: Option<Route>,
    default: bool,
}

impl Outcome {
    /// Records one reading's class; the room, when it settles the question.
    #[inline]
    fn add(&mut self, class: Class) -> Option<usize> {
        let route = match class {
            Class::Prefix(room) => return Some(room),
            Class::Default => {
                self.default = true;
                return None;
            }
            Class::Bypass => Route::Bypass,
            Class::Unrouted => Route::Unrouted,
        };
        self.first.get_or_insert(route);
        None
    }

    fn finish(self, default: Option<usize>) -> Route {
        match default {
            Some(room) if self.default => Route::Room(room),
            _ => self.first.unwrap_or(Route::Unrouted),
        }
    }
}

/// `prefix` if it can match a normalised path.
fn checked(prefix: &str) -> Result<&str, RouteError> {
    let bad = |problem| RouteError::BadPrefix {
        prefix: prefix.to_owned(),
        problem,
    };
    if !prefix.starts_with('/') {
        return Err(bad("must start with `/`"));
    }
    if prefix.contains(['?', '#']) {
        return Err(bad("must not hold `?` or `#` (a path prefix, not a URL)"));
    }
    if prefix.chars().any(char::is_control) {
        return Err(bad("must not hold control characters"));
    }
    Ok(prefix)
}

#[cfg(all(test, not(velvet_rope_loom)))]
mod tests {
    use super::*;

    #[test]
    fn refuses_bad_prefixes_and_no_room() {
        let none: [(&str, &str); 0] = [];
        let no_bypass: [&str; 0] = [];
        assert_eq!(
            Router::new(none, None, no_bypass, CaseRule::Sensitive).unwrap_err(),
            RouteError::NoRoom
        );
        for bad in ["shop", "/a?b", "/a#b", "/a\0", ""] {
            let e = Router::new([(bad, "r")], None, no_bypass, CaseRule::Sensitive).unwrap_err();
            assert!(e.to_string().contains("path prefix"), "{bad:?}: {e}");
            assert!(Router::new(none, Some("r"), [bad], CaseRule::Sensitive).is_err());
        }
    }

    #[test]
    fn longest_prefix_then_default_then_nothing() {
        let r = Router::new(
            [("/a", "x"), ("/a/b", "y")],
            Some("d"),
            ["/a/b/c"],
            CaseRule::Sensitive,
        )
        .unwrap();
        assert_eq!(r.rooms(), ["d", "x", "y"]);
        assert_eq!(r.room_for(b"/a/z"), Some("x"));
        assert_eq!(r.room_for(b"/a/b/z"), Some("y"));
        assert_eq!(r.route(b"/a/b/c/z"), Route::Bypass);
        assert_eq!(r.room_for(b"/z"), Some("d"));
        assert!(!r.every_path());
        let every = Router::new(
            [] as [(&str, &str); 0],
            Some("d"),
            [] as [&str; 0],
            CaseRule::Insensitive,
        )
        .unwrap();
        assert!(every.every_path());
        assert_eq!(every.room_for(b"anything at all \0"), Some("d"));
    }

    #[test]
    fn malformed_targets_are_never_bypassed() {
        let r = Router::new(
            [("/shop", "shop")],
            Some("d"),
            ["/static/"],
            CaseRule::Sensitive,
        )
        .unwrap();
        assert_eq!(r.route(b"/static/x.css"), Route::Bypass);
        for t in [
            &b"/static/100%.png"[..],
            b"/static/%zz",
            b"/static/a\0b",
            b"/static/%00",
            b"/static/%c0%ae%c0%ae/shop",
            b"/static/\xff",
            b"/static/a\tb",
        ] {
            assert_ne!(r.route(t), Route::Bypass, "{}", String::from_utf8_lossy(t));
        }
        assert_eq!(r.room_for(b"/static/%c0%ae%c0%ae/shop"), Some("d"));
        assert_eq!(r.room_for(b"/shop/%zz"), Some("shop"));
        assert_eq!(r.room_for(b"/%73hop/%zz"), Some("shop"));
    }

    /// A plain ASCII path is read under every fold when a prefix is not ASCII: the Kelvin
    /// sign folds to `k`, the long s to `s` (found by review: the fast path stopped after the
    /// ASCII fold).
    #[test]
    fn a_plain_path_meets_a_prefix_that_folds_to_ascii() {
        for case in [CaseRule::Insensitive, CaseRule::Either] {
            let r = Router::new(
                [("/\u{212a}/", "k"), ("/\u{17f}hop/", "s")],
                Some("d"),
                [] as [&str; 0],
                case,
            )
            .unwrap();
            assert_eq!(r.room_for(b"/k/x"), Some("k"), "{case:?}");
            assert_eq!(r.room_for(b"/%6b/x"), Some("k"), "{case:?}");
            assert_eq!(r.room_for(b"/shop/x"), Some("s"), "{case:?}");
        }
    }

    /// `Either` decides what either rule decides, and passes only what both pass.
    #[test]
    fn either_case_rule_decides_what_either_decides() {
        let with_default = Router::new(
            [("/shop/", "shop")],
            Some("site"),
            ["/static/"],
            CaseRule::Either,
        )
        .unwrap();
        let rooms_only = Router::new(
            [("/shop/", "shop")],
            None,
            ["/shop/free/"],
            CaseRule::Either,
        )
        .unwrap();
        let nested = Router::new(
            [("/", "site"), ("/shop/", "shop"), ("/shop/vip/", "vip")],
            None,
            [] as [&str; 0],
            CaseRule::Either,
        )
        .unwrap();
        for (router, target, route) in [
            // The sensitive rule does not bypass it: the default room decides.
            (&with_default, "/STATIC/x", Some("site")),
            (&with_default, "/static/x", None),
            // The insensitive rule puts it under the room's prefix.
            (&with_default, "/SHOP/x", Some("shop")),
            // The longest prefix by either rule, not the sensitive rule's shorter one.
            (&nested, "/shop/VIP/x", Some("vip")),
            (&nested, "/SHOP/x", Some("shop")),
            (&nested, "/Other", Some("site")),
            (&rooms_only, "/SHOP/x", Some("shop")),
            // In no room by the sensitive rule, bypassed by the insensitive one: passed.
            (&rooms_only, "/Shop/Free/x", None),
            (&rooms_only, "/shop/free/x", None),
            (&rooms_only, "/other", None),
            // Not plain: every reading, under every fold.
            (&rooms_only, "/%53HOP/x", Some("shop")),
            (&with_default, "/%53TATIC/x", Some("site")),
        ] {
            assert_eq!(router.room_for(target.as_bytes()), route, "{target}");
        }
        let second = rooms_only.plain_second_bytes().unwrap();
        assert!(second[usize::from(b's')] && second[usize::from(b'S')]);
        assert!(!second[usize::from(b'o')] && !second[256]);
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig::with_cases(4096))]

        /// A plain target reads alike every way: the fast path answers as every reading would.
        #[test]
        fn the_fast_path_answers_as_every_reading(
            pieces in proptest::collection::vec(
                proptest::sample::select(vec![
                    "/", "shop", "SHOP", "static", "x", "a.b", "-", "?", "?/../", "%", "\u{e9}",
                    "\u{212a}", ".", "//", "k", "K", "s", "ss", "hop",
                ]),
                0..10,
            ),
            case in proptest::sample::select(vec![CaseRule::Sensitive, CaseRule::Insensitive, CaseRule::Either]),
        ) {
            let target = format!("/{}", pieces.concat());
            let features = scan(target.as_bytes());
            for router in [
                Router::new([("/shop", "shop"), ("/static/x", "x")], Some("d"), ["/static/"], case),
                Router::new([("/sh", "sh"), ("/\u{212a}", "k")], None, ["/x"], case),
                // Prefixes that are not ASCII but fold to ASCII: a plain path reads every fold.
                Router::new([("/\u{17f}hop/", "s"), ("/\u{212a}/", "k")], Some("d"), ["/\u{df}/"], case),
            ] {
                let router = router.unwrap();
                let fast = router.route(target.as_bytes());
                let every = router.route_slowly(target.as_bytes(), features);
                if features.plain() {
                    proptest::prop_assert_eq!(fast, every, "{:?}", target);
                }
            }
        }

        /// A target whose escapes are all of bytes 128-255 (a UTF-8 slug) and that is
        /// otherwise plain: its two readings (as written, decoded) put it in the rooms every
        /// reading does, under every fold.
        #[test]
        fn a_slug_reads_as_every_reading(
            pieces in proptest::collection::vec(
                proptest::sample::select(vec![
                    "/", "shop", "SHOP", "caf", "%C3%A9", "%C3%89", "%E2%84%AA", "%E9", "%FF",
                    "x", "-", "k", "s", "%C5%BF", "?q=%2e%2e/", "?", "%",
                ]),
                0..10,
            ),
            case in proptest::sample::select(vec![CaseRule::Sensitive, CaseRule::Insensitive, CaseRule::Either]),
        ) {
            let target = format!("/{}", pieces.concat());
            let t = Target::new(target.as_bytes());
            for router in [
                Router::new([("/shop", "shop"), ("/caf\u{e9}/", "cafe"), ("/k", "k")], Some("d"), ["/static/"], case),
                Router::new([("/\u{17f}hop/", "s"), ("/\u{212a}/", "k"), ("/caf%C3%A9", "raw")], None, ["/x"], case),
            ] {
                let router = router.unwrap();
                let rooms = |every: bool| {
                    let mut seen = std::collections::BTreeSet::new();
                    let mut add = |view: &[u8]| {
                        for fold in 0..router.folds() {
                            seen.insert(router.prefix_room(view, fold));
                        }
                    };
                    if every {
                        each_reading(t.bytes, t.features, |view, _| {
                            add(view);
                            None::<()>
                        });
                    } else {
                        Router::any_reading(&t, |view| {
                            add(view);
                            false
                        });
                    }
                    seen
                };
                if reading::high_escapes_decoded(t.bytes, &t.features).is_some() {
                    proptest::prop_assert_eq!(rooms(false), rooms(true), "{:?}", target);
                }
            }
        }
    }
}
