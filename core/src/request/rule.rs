//! A room's `[[rooms.rules]]`, compiled: conditions that allocate nothing to evaluate.
//!
//! **Fail closed.** A request can be read more than one way: its path (see `routing`), its
//! host (an absolute-form target's and the `Host` header), its client (unknown when a trusted
//! proxy passed on garbage). A rule whose action lets traffic through unqueued (`bypass`,
//! `count_only`) matches only when every reading matches it: every reading of the path under
//! one of its prefixes, every host the request names among its hosts (and at least one named),
//! a known client in its blocks. A rule that holds traffic back (`queue`, `reject`) matches
//! when any reading does, a malformed host or path, and an unknown client or host included.

use std::cell::OnceCell;
use std::sync::atomic::{AtomicU64, Ordering};

use crate::admission::cookie_finder::{value_at_start, CookieFinder};
use crate::config::{PathCase, RuleAction, RuleConfig};
use crate::request::clients::{AddressKey, CidrSet};
use crate::request::cookie_names::{CookieNames, CookieRests};
use crate::request::glob::Glob;
use crate::request::host::{HostName, HostPattern, HostSeen};
use crate::request::query::{Params, QueryTerm};
use crate::request::Prepared;
use crate::routing::{Route, Router};

/// Most rules one room may hold.
pub const MAX_RULES: usize = 256;

/// One compiled rule.
pub(crate) struct Rule {
    /// Its name (or `rules[i]`).
    pub(crate) name: Box<str>,
    /// What it does.
    pub(crate) action: RuleAction,
    /// Its methods, as bits over the set's `methods` (0: any method).
    methods: u64,
    hosts: Box<[HostPattern]>,
    /// Its path prefixes: for a rule that lets pass, as bypass prefixes of a router with a
    /// default room (matched when the router bypasses); otherwise as room prefixes (matched
    /// when it finds the room).
    paths: Option<Router>,
    query: Box<[QueryTerm]>,
    /// Header conditions: the name's index in the set's `names`, and the value's pattern.
    headers: Box<[(usize, Glob)]>,
    /// Cookie conditions: the name's index in the set's `cookie_names` (`None`: past the
    /// names one pass reads), its search, and the value's pattern.
    cookies: Box<[(Option<usize>, CookieFinder, Glob)]>,
    clients: CidrSet,
}

impl std::fmt::Debug for Rule {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Rule")
            .field("name", &self.name)
            .field("action", &self.action)
            .finish_non_exhaustive()
    }
}

/// Most distinct header names a room's rules may read (`Cookie` included).
pub const MAX_HEADER_NAMES: usize = 16;

/// Headers of a request indexed by name (the first 64; a request with more is scanned).
const INDEXED_HEADERS: usize = 64;

/// The index of `Cookie` among a rule set's header names.
const COOKIE: usize = 0;

/// Most distinct methods a room's rules may name.
pub const MAX_METHODS: usize = 64;

/// A room's rules, in order, with a count of the requests each matched.
#[derive(Debug)]
pub(crate) struct RuleSet {
    rules: Box<[Rule]>,
    hits: Box<[AtomicU64]>,
    /// The header names the rules read, lower case (`cookie` first): a request's headers are
    /// matched against them once, not once per rule.
    names: Box<[Box<[u8]>]>,
    /// `by_len[n]`: bit `j` set when `names[j]` is `n` bytes long (the last entry: longer).
    by_len: [u16; 64],
    /// Whether any rule reads a header or a cookie.
    reads_headers: bool,
    /// The methods the rules name, each once: a request's method is compared with them
    /// once, and each rule tests a bit.
    methods: Box<[Box<[u8]>]>,
    /// The cookies the rules read, each once, and the room's ticket cookie when they read
    /// any: one pass over the `Cookie` header finds them all.
    cookie_names: CookieNames,
    /// The ticket cookie's index in `cookie_names` (`None`: the rules read no cookie, or
    /// past the names one pass reads).
    ticket: Option<usize>,
    /// Which of the first 64 rules a request may still match, by what is cheap to read once
    /// for all of them (only those are evaluated).
    filter: Filter,
}

/// Rules this many, the first, are filtered by [`Filter`] (bit `i`: rule `i`); the others
/// are evaluated one by one.
const FILTERED: usize = 64;

/// What rules out most rules of a set at once: each entry a mask of the (first 64) rules
/// that may still match, so that a request is read once for all of them and only the rules
/// left are evaluated. Every mask is a necessary condition of the rules it clears (a rule
/// evaluated in full still checks everything), so it changes which rules are evaluated,
/// never the answer.
#[derive(Debug, Clone)]
struct Filter {
    /// Entry `k`: the rules a request with the set's method `k` may match (the last entry:
    /// any other method).
    by_method: Box<[u64]>,
    /// The rules with client blocks.
    clients: u64,
    /// The rules with path conditions whose routers answer plain paths by their second byte
    /// (every prefix ASCII: see [`Router::plain_second_bytes`]).
    paths: u64,
    /// Entry `b`: the rules a plain path with second byte `b` may match (256: the path `/`).
    by_second: Box<[u64; 257]>,
    /// Entry `j`: the rules that read header `names[j]` (`Cookie` for cookie conditions),
    /// which a request without that header cannot match.
    needs: [u64; MAX_HEADER_NAMES],
    /// The rules that read any header (the union of `needs`).
    headers: u64,
}

impl Default for Filter {
    /// No rules.
    fn default() -> Self {
        Self {
            by_method: vec![0].into(),
            clients: 0,
            paths: 0,
            by_second: Box::new([u64::MAX; 257]),
            needs: [0; MAX_HEADER_NAMES],
            headers: 0,
        }
    }
}

impl Filter {
    /// The filter of `rules` (compiled), whose methods are `methods`.
    fn new(rules: &[Rule], methods: usize) -> Self {
        let mut f = Self {
            by_method: vec![0; methods + 1].into(),
            ..Self::default()
        };
        for (i, rule) in rules.iter().enumerate().take(FILTERED) {
            let bit = 1u64 << i;
            for (k, mask) in f.by_method.iter_mut().enumerate() {
                if rule.methods == 0 || (k < methods && rule.methods & (1 << k) != 0) {
                    *mask |= bit;
                }
            }
            if !rule.clients.is_empty() {
                f.clients |= bit;
            }
            if let Some(second) = rule.paths.as_ref().and_then(Router::plain_second_bytes) {
                f.paths |= bit;
                for (mask, may) in f.by_second.iter_mut().zip(second) {
                    if !may {
                        *mask &= !bit;
                    }
                }
            }
            for (j, _) in rule.headers.iter() {
                f.needs[*j] |= bit;
            }
            if !rule.cookies.is_empty() {
                f.needs[COOKIE] |= bit;
            }
        }
        f.headers = f.needs.iter().fold(0, |all, n| all | n);
        f
    }
}

impl Default for RuleSet {
    /// No rules.
    fn default() -> Self {
        Self {
            rules: Box::default(),
            hits: Box::default(),
            names: Box::default(),
            by_len: [0; 64],
            reads_headers: false,
            methods: Box::default(),
            cookie_names: CookieNames::default(),
            ticket: None,
            filter: Filter::default(),
        }
    }
}

/// What every rule set compiles into: the names and methods its rules share.
struct Shared {
    /// Header names, lower case (`cookie` first).
    headers: Vec<Box<[u8]>>,
    methods: Vec<Box<[u8]>>,
    cookie_names: CookieNames,
}

/// What the rules read of one request, worked out once (the cookies on first use).
struct Seen<'h> {
    /// The bit of the request's method among the set's methods (0: none of them).
    method: u64,
    client: Option<AddressKey>,
    /// What follows each `name=` of the rules' cookies (and the ticket's) in the request's
    /// one `Cookie` header (see [`CookieRests`]); `None` when the pass cannot answer (several
    /// headers, or a `,` in one): search name by name.
    cookies: OnceCell<Option<CookieRests<'h>>>,
    /// The query's parameters, split once for every query rule.
    query: OnceCell<Params<'h>>,
}

/// Which of a request's headers carry each name a rule set reads.
struct HeaderIndex {
    /// Bit `i` of `masks[j]`: header `i` is called `names[j]`.
    masks: [u64; MAX_HEADER_NAMES],
    /// More headers than are indexed: look names up by scanning.
    scan: bool,
}

impl HeaderIndex {
    /// No header indexed (for rules that read none).
    const NONE: Self = Self {
        masks: [0; MAX_HEADER_NAMES],
        scan: false,
    };

    /// The index of `headers` (see [`HeaderIndex::fill`]).
    #[cfg(all(test, not(velvet_rope_loom)))]
    fn new(headers: &[(&[u8], &[u8])], names: &[Box<[u8]>], by_len: &[u16; 64]) -> Self {
        let mut index = Self::NONE;
        index.fill(headers, names, by_len);
        index
    }

    /// Indexes `headers` into this index of none, in place (not returned: the masks would
    /// be copied twice). One pass: each name is compared only with the names of its length
    /// (`by_len`, see `RuleSet`); most headers have none.
    fn fill(&mut self, headers: &[(&[u8], &[u8])], names: &[Box<[u8]>], by_len: &[u16; 64]) {
        let indexed = &headers[..headers.len().min(INDEXED_HEADERS)];
        for (i, (n, _)) in indexed.iter().enumerate() {
            let mut candidates = by_len[n.len().min(63)];
            while candidates != 0 {
                let j = candidates.trailing_zeros() as usize;
                if eq_lower(n, &names[j]) {
                    self.masks[j] |= 1 << i;
                }
                candidates &= candidates - 1;
            }
        }
        self.scan = headers.len() > INDEXED_HEADERS;
    }

    /// Whether some header called `names[j]` has a value meeting `f`.
    #[inline(always)]
    fn any(
        &self,
        headers: &[(&[u8], &[u8])],
        names: &[Box<[u8]>],
        j: usize,
        mut f: impl FnMut(&[u8]) -> bool,
    ) -> bool {
        if self.scan {
            let name = &names[j];
            return headers.iter().any(|(n, v)| eq_lower(n, name) && f(v));
        }
        let mut mask = self.masks[j];
        while mask != 0 {
            let i = mask.trailing_zeros() as usize;
            if f(headers[i].1) {
                return true;
            }
            mask &= mask - 1;
        }
        false
    }
}

/// Whether the header name `name` is `lower` (lower case) in any case: a byte equals, or is
/// the upper case of a lower-case letter (cheaper than lowering both sides byte by byte).
#[inline]
fn eq_lower(name: &[u8], lower: &[u8]) -> bool {
    name.len() == lower.len()
        && name
            .iter()
            .zip(lower)
            .all(|(&a, &b)| a == b || (a | 0x20 == b && b.is_ascii_lowercase()))
}

impl RuleSet {
    /// Compiles `rules` of the room at `at` (`rooms[i]`), whose tickets come in the cookie
    /// `ticket_cookie`; the error names the rule and field.
    pub(crate) fn compile(
        rules: &[RuleConfig],
        case: PathCase,
        ticket_cookie: &str,
        at: &str,
    ) -> Result<Self, (String, String)> {
        if rules.len() > MAX_RULES {
            return Err((
                format!("{at}.rules"),
                format!("holds {} rules; at most {MAX_RULES}", rules.len()),
            ));
        }
        let mut out = Vec::with_capacity(rules.len());
        let mut names = std::collections::HashSet::new();
        let mut shared = Shared {
            headers: vec![b"cookie"[..].into()],
            methods: Vec::new(),
            cookie_names: CookieNames::default(),
        };
        for (i, cfg) in rules.iter().enumerate() {
            let rule = Rule::compile(cfg, case, &mut shared).map_err(|(field, why)| {
                let name = cfg
                    .name
                    .as_deref()
                    .map(|n| format!(" (`{n}`)"))
                    .unwrap_or_default();
                (
                    format!("{at}.rules[{i}].{field}"),
                    format!(
                        "{why}{}",
                        if name.is_empty() {
                            String::new()
                        } else {
                            format!(" in rule{name}")
                        }
                    ),
                )
            })?;
            let name = cfg.name.clone().unwrap_or_else(|| format!("rules[{i}]"));
            if !names.insert(name.clone()) {
                return Err((
                    format!("{at}.rules[{i}].name"),
                    format!("duplicates rule `{name}`"),
                ));
            }
            out.push(Rule {
                name: name.into(),
                ..rule
            });
        }
        // The pass that reads the rules' cookies finds the ticket too: its search is saved.
        let ticket = out
            .iter()
            .any(|r| !r.cookies.is_empty())
            .then(|| shared.cookie_names.index(ticket_cookie))
            .flatten();
        Ok(Self {
            ticket,
            filter: Filter::new(&out, shared.methods.len()),
            hits: out.iter().map(|_| AtomicU64::new(0)).collect(),
            reads_headers: out
                .iter()
                .any(|r| !r.headers.is_empty() || !r.cookies.is_empty()),
            rules: out.into(),
            by_len: {
                let mut by_len = [0u16; 64];
                for (j, name) in shared.headers.iter().enumerate() {
                    by_len[name.len().min(63)] |= 1 << j;
                }
                by_len
            },
            names: shared.headers.into(),
            methods: shared.methods.into(),
            cookie_names: shared.cookie_names,
        })
    }

    /// Takes over `previous`'s hit counts (the caller checked that it holds the same rules:
    /// a reload that left them alone keeps counting where it was).
    pub(crate) fn carry_from(&self, previous: &RuleSet) {
        for (mine, theirs) in self.hits.iter().zip(previous.hits.iter()) {
            mine.store(theirs.load(Ordering::Relaxed), Ordering::Relaxed);
        }
    }

    /// Whether there is no rule.
    #[inline]
    pub(crate) fn is_empty(&self) -> bool {
        self.rules.is_empty()
    }

    /// The first rule `request` matches, with its index (the caller counts it: see
    /// `Room::count_rule`). When the rules' pass over the `Cookie` header answered (see
    /// [`CookieNames::read`]), `ticket` is set to what follows the ticket cookie's `name=`
    /// there (`Some(None)`: no ticket cookie), else left alone (the pass did not run or
    /// could not answer, or the rules read so many cookies that the ticket has no place in
    /// it).
    #[inline]
    pub(crate) fn first_match<'h>(
        &self,
        request: &Prepared<'_, 'h>,
        ticket: &mut Option<Option<&'h [u8]>>,
    ) -> Option<(usize, &Rule)> {
        let req = request.request;
        let method = self.methods.iter().position(|m| **m == *req.method);
        let seen = Seen {
            method: method.map_or(0, |k| 1 << k),
            client: req.client.map(AddressKey::of),
            cookies: OnceCell::new(),
            query: OnceCell::new(),
        };
        let found = self.first_match_seen(request, &seen, method);
        if let (Some(t), Some(Some(rests))) = (self.ticket, seen.cookies.get()) {
            *ticket = Some(rests[t]);
        }
        found
    }

    /// [`RuleSet::first_match`] with what is read once worked out (`method`: the request's
    /// method's index among the set's).
    #[inline(always)]
    fn first_match_seen<'h>(
        &self,
        request: &Prepared<'_, 'h>,
        seen: &Seen<'h>,
        method: Option<usize>,
    ) -> Option<(usize, &Rule)> {
        let req = request.request;
        // The headers are indexed when the first rule that reads them comes up.
        let mut index = HeaderIndex::NONE;
        let mut indexed = false;
        let filter = &self.filter;
        let mut left = filter.by_method[method.unwrap_or(self.methods.len())];
        // Client blocks first (a few compares each), then the target's second byte; which
        // headers are present is read when the first rule that reads headers comes up.
        let mut blocks = left & filter.clients;
        while blocks != 0 {
            let k = blocks.trailing_zeros() as usize;
            let rule = &self.rules[k];
            if !rule.client_allows(seen.client, rule.action.loosens()) {
                left &= !(1 << k);
            }
            blocks &= blocks - 1;
        }
        if left & filter.paths != 0 {
            if let Some(path) = request.target().plain_path() {
                left &= filter.by_second[path.get(1).map_or(256, |&b| usize::from(b))];
            }
        }
        while left != 0 {
            let i = left.trailing_zeros() as usize;
            if !indexed && filter.headers & (1 << i) != 0 {
                index.fill(req.headers, &self.names, &self.by_len);
                indexed = true;
                if !index.scan {
                    let needs = &filter.needs[..self.names.len()];
                    for (needs, present) in needs.iter().zip(index.masks) {
                        if present == 0 {
                            left &= !needs;
                        }
                    }
                }
                // This rule again, if it is still left.
                continue;
            }
            let rule = &self.rules[i];
            // The index is read by header and cookie conditions alone (`Filter::headers`).
            debug_assert!(indexed || (rule.headers.is_empty() && rule.cookies.is_empty()));
            if rule.matches(request, seen, self, &index) {
                return Some((i, rule));
            }
            left &= left - 1;
        }
        let rest = self.rules.get(FILTERED..).unwrap_or_default();
        if !indexed && self.reads_headers && !rest.is_empty() {
            index.fill(req.headers, &self.names, &self.by_len);
        }
        let (i, rule) = rest
            .iter()
            .enumerate()
            .find(|(_, r)| r.matches(request, seen, self, &index))?;
        Some((FILTERED + i, rule))
    }

    /// Counts a request rule `i` matched, in this process's own count.
    pub(crate) fn count_here(&self, i: usize) {
        if let Some(h) = self.hits.get(i) {
            h.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// What follows each `name=` of the rules' cookies (and the ticket's), when one pass
    /// over the request's one `Cookie` header answers for them (see [`CookieNames::read`]).
    #[inline]
    fn cookie_rests<'h>(
        &self,
        headers: &[(&[u8], &'h [u8])],
        index: &HeaderIndex,
    ) -> Option<CookieRests<'h>> {
        let mask = index.masks[COOKIE];
        if index.scan || mask.count_ones() != 1 {
            return None;
        }
        self.cookie_names
            .read(headers[mask.trailing_zeros() as usize].1)
    }

    /// Each rule's name, action and the requests this process counted for it itself (see
    /// [`RuleSet::count_here`]).
    pub(crate) fn tallies(&self) -> impl Iterator<Item = (&str, RuleAction, u64)> {
        self.rules
            .iter()
            .zip(self.hits.iter())
            .map(|(r, h)| (&*r.name, r.action, h.load(Ordering::Relaxed)))
    }
}

impl Rule {
    /// Compiles one rule (its name is set by the caller); the error names the field.
    fn compile(
        cfg: &RuleConfig,
        case: PathCase,
        shared: &mut Shared,
    ) -> Result<Self, (String, String)> {
        fn field(f: &'static str) -> impl Fn(String) -> (String, String) {
            move |why| (f.to_owned(), why)
        }
        let mut methods = 0u64;
        for m in &cfg.methods {
            if m.is_empty()
                || !m
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b))
            {
                return Err(field("methods")(format!(
                    "`{m}` is not a method (a token such as `GET`)"
                )));
            }
            let i = match shared.methods.iter().position(|k| **k == *m.as_bytes()) {
                Some(i) => i,
                None if shared.methods.len() < MAX_METHODS => {
                    shared.methods.push(m.as_bytes().into());
                    shared.methods.len() - 1
                }
                None => {
                    return Err(field("methods")(format!(
                        "`{m}`: a room's rules may name at most {MAX_METHODS} methods"
                    )))
                }
            };
            methods |= 1 << i;
        }
        let hosts = cfg
            .hosts
            .iter()
            .map(|h| HostPattern::parse(h))
            .collect::<Result<Vec<_>, _>>()
            .map_err(field("hosts"))?;
        let case = case.rule();
        let paths = if cfg.paths.is_empty() {
            None
        } else if cfg.action.loosens() {
            Some(Router::new(
                [] as [(&str, &str); 0],
                Some("rule"),
                &cfg.paths,
                case,
            ))
        } else {
            Some(Router::new(
                cfg.paths.iter().map(|p| (p, "rule")),
                None,
                [] as [&str; 0],
                case,
            ))
        }
        .transpose()
        .map_err(|e| ("paths".to_owned(), e.to_string()))?;
        let query = cfg
            .query
            .iter()
            .map(|q| {
                if q.is_empty() || q.contains(['&', '#']) || q.chars().any(char::is_control) {
                    return Err(format!("`{q}` is not a parameter (`name` or `name=value`)"));
                }
                Ok(match q.split_once('=') {
                    Some((n, v)) => QueryTerm::new(n.as_bytes(), Some(v.as_bytes())),
                    None => QueryTerm::new(q.as_bytes(), None),
                })
            })
            .collect::<Result<Vec<_>, _>>()
            .map_err(field("query"))?;
        let mut headers = Vec::with_capacity(cfg.headers.len());
        for (name, pattern) in &cfg.headers {
            let token = |b: u8| b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b);
            if name.is_empty() || !name.bytes().all(token) {
                return Err(("headers".into(), format!("`{name}` is not a header name")));
            }
            let glob =
                Glob::new(pattern).map_err(|e| ("headers".to_owned(), format!("`{name}`: {e}")))?;
            let lower: Box<[u8]> = name.to_ascii_lowercase().into_bytes().into();
            let names = &mut shared.headers;
            let j = match names.iter().position(|n| *n == lower) {
                Some(j) => j,
                None if names.len() < MAX_HEADER_NAMES => {
                    names.push(lower);
                    names.len() - 1
                }
                None => {
                    return Err((
                        "headers".into(),
                        format!(
                            "`{name}`: a room's rules may read at most {} header names",
                            MAX_HEADER_NAMES - 1
                        ),
                    ))
                }
            };
            headers.push((j, glob));
        }
        let cookies = cfg
            .cookies
            .iter()
            .map(|(name, pattern)| {
                if name.is_empty() || name.bytes().any(|b| b <= b' ' || b"=;,\"\x7f".contains(&b)) {
                    return Err(format!("`{name}` is not a cookie name"));
                }
                Ok((
                    shared.cookie_names.index(name),
                    CookieFinder::new(name),
                    Glob::new(pattern).map_err(|e| format!("`{name}`: {e}"))?,
                ))
            })
            .collect::<Result<Vec<_>, _>>()
            .map_err(field("cookies"))?;
        let clients = CidrSet::parse(&cfg.clients).map_err(field("clients"))?;
        Ok(Self {
            name: "".into(),
            action: cfg.action,
            methods,
            hosts: hosts.into(),
            paths,
            query: query.into(),
            headers: headers.into(),
            cookies: cookies.into(),
            clients,
        })
    }

    /// Whether `request` meets every condition (see the module documentation for how a
    /// request read more than one way is matched).
    #[inline(always)]
    fn matches<'h>(
        &self,
        request: &Prepared<'_, 'h>,
        seen: &Seen<'h>,
        set: &RuleSet,
        index: &HeaderIndex,
    ) -> bool {
        let loose = self.action.loosens();
        let req = request.request;
        // The cheap conditions first: most rules fail on one of them.
        if self.methods != 0 && self.methods & seen.method == 0 {
            return false;
        }
        if !self.clients.is_empty() && !self.client_allows(seen.client, loose) {
            return false;
        }
        if !self.hosts.is_empty() && !self.hosts_match(request.hosts(), loose) {
            return false;
        }
        if let Some(router) = &self.paths {
            let route = router.route_target(request.target());
            let hit = if loose {
                route == Route::Bypass
            } else {
                matches!(route, Route::Room(_))
            };
            if !hit {
                return false;
            }
        }
        if !self.query.is_empty() {
            let target = request.target();
            // A `#` before the `?` makes what follows a fragment to most servers (Node,
            // gunicorn), a query to some (h11): it satisfies only a rule that holds back.
            if loose && target.fragment_before_query() {
                return false;
            }
            let query = seen
                .query
                .get_or_init(|| Params::split(target.query().unwrap_or_default()));
            if !self.query.iter().any(|t| query.has(t, loose)) {
                return false;
            }
        }
        let names = &set.names;
        for (j, glob) in self.headers.iter() {
            if !index.any(req.headers, names, *j, |v| glob.matches(v.trim_ascii())) {
                return false;
            }
        }
        for (slot, finder, glob) in self.cookies.iter() {
            let rests = seen
                .cookies
                .get_or_init(|| set.cookie_rests(req.headers, index));
            let found = match (slot, rests) {
                (Some(j), Some(rests)) => {
                    rests[*j].is_some_and(|r| glob.matches(value_at_start(r)))
                }
                _ => index.any(req.headers, names, COOKIE, |h| {
                    finder.find(h).is_some_and(|v| glob.matches(v))
                }),
            };
            if !found {
                return false;
            }
        }
        true
    }

    /// Whether its client blocks (not empty) hold `client` (see the module documentation).
    #[inline(always)]
    fn client_allows(&self, client: Option<AddressKey>, loose: bool) -> bool {
        match client {
            Some(key) => self.clients.contains_key(key),
            None => !loose,
        }
    }

    /// Whether the hosts a request names match (see the module documentation).
    fn hosts_match(&self, hosts: &[HostSeen<'_>; 2], loose: bool) -> bool {
        let named = |h: &HostName<'_>| self.hosts.iter().any(|p| p.matches(h));
        if loose {
            let mut any = false;
            for h in hosts {
                match h {
                    HostSeen::Absent => {}
                    HostSeen::Bad => return false,
                    HostSeen::Name(n) if named(n) => any = true,
                    HostSeen::Name(_) => return false,
                }
            }
            any
        } else {
            hosts.iter().all(|h| matches!(h, HostSeen::Absent))
                || hosts.iter().any(|h| match h {
                    HostSeen::Absent => false,
                    HostSeen::Bad => true,
                    HostSeen::Name(n) => named(n),
                })
        }
    }
}

#[cfg(all(test, not(velvet_rope_loom)))]
mod tests {
    use super::*;

    proptest::proptest! {
        /// Header names compare as `eq_ignore_ascii_case` with the lowered name does.
        #[test]
        fn eq_lower_is_ignoring_case(a in "[a-zA-Z_`@~^0-9-]{0,4}", b in "[a-z_`@~^0-9-]{0,4}") {
            proptest::prop_assert_eq!(
                eq_lower(a.as_bytes(), b.as_bytes()),
                a.as_bytes().eq_ignore_ascii_case(b.as_bytes())
            );
        }

    }

    /// The first rule `request` matches, every rule evaluated in order with every header
    /// indexed: what [`RuleSet::first_match`] answers with its filters.
    fn first_in_order(set: &RuleSet, request: &Prepared<'_, '_>) -> Option<usize> {
        let req = request.request;
        let index = HeaderIndex::new(req.headers, &set.names, &set.by_len);
        let seen = Seen {
            method: set
                .methods
                .iter()
                .position(|m| **m == *req.method)
                .map_or(0, |k| 1 << k),
            client: req.client.map(AddressKey::of),
            cookies: OnceCell::new(),
            query: OnceCell::new(),
        };
        set.rules
            .iter()
            .position(|r| r.matches(request, &seen, set, &index))
    }

    /// One rule of the filter's property test, from indexes into small vocabularies.
    fn rule_of(i: usize, pick: &[u8]) -> RuleConfig {
        const ACTIONS: [&str; 4] = ["bypass", "queue", "reject", "count_only"];
        const METHODS: [&str; 4] = ["GET", "POST", "HEAD", "PURGE"];
        const PATHS: [&str; 11] = [
            "/", "/a", "/a/", "/A/b", "/b/", "/%61", "/ab", "/b", "/é/", "/Ab", "/a/b/",
        ];
        const HOSTS: [&str; 3] = ["a.example", "*.b.example", "h"];
        const CLIENTS: [&str; 3] = ["10.0.0.0/8", "192.0.2.0/24", "2001:db8::/32"];
        const HEADERS: [(&str, &str); 4] = [
            ("user-agent", "*Bot*"),
            ("X-Key", "k-*"),
            ("accept", "*"),
            ("cookie", "*a=1*"),
        ];
        const COOKIES: [(&str, &str); 3] = [("a", "1"), ("b", "*"), ("staff", "s-*")];
        const QUERY: [&str; 3] = ["a", "a=1", "b=x"];
        let p = |k: usize| usize::from(pick[k % pick.len()]);
        let mut text = format!("name = \"r{i}\"\naction = \"{}\"\n", ACTIONS[p(0) % 4]);
        let list = |n: usize, of: &[&str]| -> String {
            let mut v: Vec<String> = (0..n)
                .map(|k| format!("{:?}", of[p(k + 7) % of.len()]))
                .collect();
            v.dedup();
            v.join(", ")
        };
        let kinds = p(1);
        if kinds & 1 != 0 {
            text += &format!("methods = [{}]\n", list(1 + p(2) % 2, &METHODS));
        }
        if kinds & 2 != 0 {
            text += &format!("paths = [{}]\n", list(1 + p(3) % 3, &PATHS));
        }
        if kinds & 4 != 0 {
            text += &format!("clients = [{}]\n", list(1, &CLIENTS));
        }
        if kinds & 8 != 0 {
            let (n, v) = HEADERS[p(4) % HEADERS.len()];
            let (m, w) = HEADERS[p(6) % HEADERS.len()];
            // One header condition, or two (of distinct names).
            if kinds & 64 != 0 && !n.eq_ignore_ascii_case(m) {
                text += &format!("headers = {{ {n:?} = {v:?}, {m:?} = {w:?} }}\n");
            } else {
                text += &format!("headers = {{ {n:?} = {v:?} }}\n");
            }
        }
        if kinds & 16 != 0 {
            let (n, v) = COOKIES[p(5) % COOKIES.len()];
            text += &format!("cookies = {{ {n:?} = {v:?} }}\n");
        }
        if kinds & 128 != 0 {
            text += &format!("hosts = [{}]\n", list(1 + p(3) % 2, &HOSTS));
        }
        if kinds & 32 != 0 {
            text += &format!("query = [{}]\n", list(1, &QUERY));
        }
        toml::from_str(&text).unwrap()
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig::with_cases(400))]

        /// The filters change which rules are evaluated, never the answer: the first match
        /// is the one evaluating every rule in order finds, for sets shorter and longer
        /// than the filtered 64, every case rule, and requests read more than one way.
        #[test]
        fn filters_never_change_the_first_match(
            picks in proptest::collection::vec(proptest::collection::vec(0u8..=255, 12), 1..80),
            case in proptest::sample::select(vec![PathCase::Sensitive, PathCase::Insensitive, PathCase::Either]),
            method in proptest::sample::select(vec!["GET", "POST", "HEAD", "DELETE"]),
            target in proptest::sample::select(vec![
                "/", "/a", "/a/", "/A/b", "/ab?a=1", "/b/c?b=x&a", "/%61/x", "//a", "/x/../a/",
                "http://h/a/", "/é/x", "/\u{c9}/x", "?a", "*", "/a#x?a=1", "/c;a", "/b", "/Ab/x", "/a/b/c", "/AB",
                "http://a.example/a", "http://x.b.example/b/",
            ]),
            headers in proptest::collection::vec(
                (proptest::sample::select(vec!["User-Agent", "x-key", "Cookie", "accept", "host"]),
                 proptest::sample::select(vec![
                     "a=1", "Bot", "k-1", "b=2; a=1", "staff=s-1", "x,a=1", "", "a.example",
                     "x.b.example", "H", " a=2 ;a=1", "b=1;staff=s-2, a=3", "t=1; a=1",
                     "a=1; t=2,t=3", "x,t=4; b=*", "t=\"5\" ;staff=s-3",
                 ])),
                0..5,
            ),
            // More headers than are indexed: the rules search them by name.
            padded in proptest::bool::weighted(0.2),
            ticket in proptest::sample::select(vec!["a", "t"]),
            client in proptest::sample::select(vec![None, Some("10.1.2.3"), Some("192.0.2.9"), Some("2001:db8::1"), Some("100.64.0.1")]),
        ) {
            let rules: Vec<RuleConfig> = picks.iter().enumerate().map(|(i, p)| rule_of(i, p)).collect();
            // The ticket cookie: one the rules read too (`a`), or one of its own (`t`).
            let set = RuleSet::compile(&rules, case, ticket, "rooms[0]").unwrap();
            let filler: Vec<String> = (0..INDEXED_HEADERS).map(|i| format!("x-filler-{i}")).collect();
            let mut headers: Vec<(&[u8], &[u8])> =
                headers.iter().map(|(n, v)| (n.as_bytes(), v.as_bytes())).collect();
            if padded {
                let at = headers.len() / 2;
                headers.splice(at..at, filler.iter().map(|n| (n.as_bytes(), &b"1"[..])));
            }
            let request = crate::request::Request {
                method: method.as_bytes(),
                target: target.as_bytes(),
                host: None,
                headers: &headers,
                client: client.map(|c| c.parse().unwrap()),
            };
            let mut read = None;
            let filtered = set.first_match(&Prepared::new(&request), &mut read).map(|(i, _)| i);
            proptest::prop_assert_eq!(filtered, first_in_order(&set, &Prepared::new(&request)));
            // A ticket the rules' pass found is the one the ticket's own search finds.
            if let Some(rest) = read {
                proptest::prop_assert_eq!(
                    rest.map(crate::admission::cookie_finder::ticket_value),
                    CookieFinder::new(ticket).find_ticket_in_lines(request.cookie_headers())
                );
            }
        }
    }

    /// Cookie conditions past the names one pass reads, and headers the pass cannot
    /// answer (a `,`, two `Cookie` lines), are searched name by name, with the same answers.
    #[test]
    fn cookie_conditions_past_the_pass_and_joined_headers() {
        let rules: Vec<RuleConfig> = (0..crate::request::cookie_names::MAX_COOKIE_NAMES + 2)
            .map(|i| {
                toml::from_str(&format!(
                    "name = \"c{i}\"\naction = \"bypass\"\ncookies = {{ \"c{i}\" = \"yes\" }}"
                ))
                .unwrap()
            })
            .collect();
        let set = RuleSet::compile(&rules, PathCase::Sensitive, "__vr", "rooms[0]").unwrap();
        let first = |cookies: &[&str]| {
            let headers: Vec<(&[u8], &[u8])> = cookies
                .iter()
                .map(|c| (&b"Cookie"[..], c.as_bytes()))
                .collect();
            let request = crate::request::Request {
                method: b"GET",
                target: b"/",
                host: None,
                headers: &headers,
                client: None,
            };
            set.first_match(&Prepared::new(&request), &mut None)
                .map(|(_, r)| r.name.to_string())
        };
        let last = crate::request::cookie_names::MAX_COOKIE_NAMES + 1;
        assert_eq!(
            first(&[&format!("a=1; c{last}=yes")]),
            Some(format!("c{last}"))
        );
        assert_eq!(first(&["a=1; c3=yes; c2=yes"]), Some("c2".into()));
        assert_eq!(first(&["a=1; c3=no"]), None);
        assert_eq!(first(&["a=1,c4=yes"]), Some("c4".into()));
        assert_eq!(first(&["a=1", "c5=yes"]), Some("c5".into()));
        assert_eq!(first(&["c6=yes,c1=yes"]), Some("c1".into()));
        assert_eq!(first(&["c6=\"x,c1=yes\""]), None);
    }

    #[test]
    fn errors_name_the_rule_and_the_field() {
        let rule = |toml: &str| -> RuleConfig { toml::from_str(toml).unwrap() };
        let bad = [
            (
                "action = \"bypass\"\nclients = [\"10.0.0.0/33\"]",
                "rules[0].clients",
                "10.0.0.0/33",
            ),
            (
                "action = \"bypass\"\npaths = [\"static\"]",
                "rules[0].paths",
                "must start with `/`",
            ),
            (
                "action = \"reject\"\nmethods = [\"G T\"]",
                "rules[0].methods",
                "G T",
            ),
            (
                "action = \"queue\"\nhosts = [\"a.com:80\"]",
                "rules[0].hosts",
                "a.com:80",
            ),
            (
                "action = \"queue\"\nheaders = { \"x y\" = \"1\" }",
                "rules[0].headers",
                "x y",
            ),
            (
                "name = \"staff\"\naction = \"bypass\"\ncookies = { \"a;b\" = \"1\" }",
                "rules[0].cookies",
                "staff",
            ),
            (
                "action = \"bypass\"\nquery = [\"a&b\"]",
                "rules[0].query",
                "a&b",
            ),
        ];
        for (text, field, why) in bad {
            let (f, w) = RuleSet::compile(&[rule(text)], PathCase::Sensitive, "__vr", "rooms[0]")
                .unwrap_err();
            assert_eq!(f, format!("rooms[0].{field}"), "{text}");
            assert!(w.contains(why), "{text}: {w}");
        }
        let twice = [
            rule("name = \"a\"\naction = \"bypass\""),
            rule("name = \"a\"\naction = \"queue\""),
        ];
        assert!(
            RuleSet::compile(&twice, PathCase::Sensitive, "__vr", "rooms[0]")
                .unwrap_err()
                .1
                .contains("duplicates")
        );
    }
}
