//! Which room a request belongs to, over every room's `routes`: the most specific host
//! pattern a request's host matches (an exact host, then the longest wildcard, then every
//! host), then the longest path prefix under it (read every way the `routing` module reads a
//! target, the first reading that finds a room deciding).

use crate::config::Config;
use crate::request::host::{HostName, HostPattern, HostSeen};
use crate::request::Prepared;
use crate::routing::{Route, Router};

/// The path prefixes under one host pattern.
#[derive(Debug)]
struct HostGroup {
    pattern: HostPattern,
    router: Router,
    /// The configuration's room index of each of `router`'s rooms.
    rooms: Box<[usize]>,
}

/// A path prefix of a room's route: the prefix, the room's index, and where the
/// configuration says so (`rooms[i].routes[j]`).
type PathRoute = (String, usize, String);

/// Every room's routes, compiled.
#[derive(Debug, Default)]
pub(crate) struct RouteTable {
    /// Most specific host pattern first.
    groups: Box<[HostGroup]>,
    /// Whether a route names a host (else a request's hosts never choose its room).
    hosts_matter: bool,
    /// Whether a path may be put in different rooms by different folds of the path case
    /// rule (see `Router::folds_may_differ`).
    folds_differ: bool,
    /// Whether the path case rule is `Either` and the routes lead to two rooms or more
    /// (under one host pattern or several a host may match): a path with an upper-case
    /// letter may then be in one room compared without case and in another compared with
    /// it (`/BLOG/x`: `/blog/`'s, or `/`'s).
    either_split: bool,
    /// The longest room prefix of any host pattern's routes, in bytes, plus one (the byte
    /// after a prefix): case past it never changes a plain path's room.
    case_reach: usize,
}

impl RouteTable {
    /// Compiles the routes of `config`'s rooms; the error names the field and what is wrong.
    pub(crate) fn compile(config: &Config) -> Result<Self, (String, String)> {
        let case = config.settings.path_case.rule();
        // Each host pattern's routes, in order of first mention.
        let mut by_host: Vec<(HostPattern, Vec<PathRoute>)> = Vec::new();
        for (r, room) in config.rooms.iter().enumerate() {
            for (i, route) in room.routes.iter().enumerate() {
                let at = format!("rooms[{r}].routes[{i}]");
                let pattern = match &route.host {
                    None => HostPattern::Any,
                    Some(h) => HostPattern::parse(h).map_err(|e| (format!("{at}.host"), e))?,
                };
                let path = route.path.clone().unwrap_or_else(|| "/".into());
                // Checked alone first, so that an error names this route.
                Router::new([(path.as_str(), "room")], None, [] as [&str; 0], case)
                    .map_err(|e| (format!("{at}.path"), e.to_string()))?;
                let group = match by_host.iter_mut().position(|(p, _)| *p == pattern) {
                    Some(g) => &mut by_host[g].1,
                    None => {
                        by_host.push((pattern, Vec::new()));
                        &mut by_host.last_mut().expect("just pushed").1
                    }
                };
                if let Some((_, other, other_at)) = group.iter().find(|(p, _, _)| *p == path) {
                    return Err((
                        format!("{at}.path"),
                        format!(
                            "`{path}` on this host is a route of room `{}` already ({other_at})",
                            config.rooms[*other].name
                        ),
                    ));
                }
                group.push((path, r, at));
            }
        }
        let mut groups = by_host
            .into_iter()
            .map(|(pattern, routes)| {
                let router = Router::new(
                    routes
                        .iter()
                        .map(|(p, r, _)| (p.as_str(), config.rooms[*r].name.as_str())),
                    None,
                    [] as [&str; 0],
                    case,
                )
                .map_err(|e| {
                    let at = routes
                        .first()
                        .map(|(_, _, at)| at.clone())
                        .unwrap_or_default();
                    (format!("{at}.path"), e.to_string())
                })?;
                let rooms = router
                    .rooms()
                    .iter()
                    .map(|name| {
                        config
                            .rooms
                            .iter()
                            .position(|r| r.name == *name)
                            .unwrap_or(0)
                    })
                    .collect();
                Ok(HostGroup {
                    pattern,
                    router,
                    rooms,
                })
            })
            .collect::<Result<Vec<_>, (String, String)>>()?;
        groups.sort_by_key(|g| std::cmp::Reverse(g.pattern.specificity()));
        let either = case == crate::routing::CaseRule::Either;
        let mut rooms: Vec<usize> = groups
            .iter()
            .flat_map(|g| g.rooms.iter().copied())
            .collect();
        rooms.sort_unstable();
        rooms.dedup();
        Ok(Self {
            either_split: either && rooms.len() > 1,
            case_reach: groups
                .iter()
                .map(|g| g.router.longest_prefix())
                .max()
                .unwrap_or(0)
                + 1,
            hosts_matter: groups.iter().any(|g| g.pattern != HostPattern::Any),
            folds_differ: groups.iter().any(|g| g.router.folds_may_differ()),
            groups: groups.into(),
        })
    }

    /// Whether no room has routes.
    pub(crate) fn is_empty(&self) -> bool {
        self.groups.is_empty()
    }

    /// The configuration's index of the room `request` belongs to, if any. A host that is
    /// not a host name, or none at all, matches every host pattern (it is decided, not let
    /// through).
    pub(crate) fn room_for(&self, request: &Prepared<'_, '_>) -> Option<usize> {
        // A request naming no host at all (HTTP/1.0) is served by the origin all the same:
        // like one naming a host that is not one, it matches every host pattern.
        let unnamed = self.groups.iter().any(|g| g.pattern != HostPattern::Any)
            && request
                .hosts()
                .iter()
                .all(|h| matches!(h, HostSeen::Absent));
        for group in self.groups.iter() {
            let applies = match group.pattern {
                HostPattern::Any => true,
                _ if unnamed => true,
                _ => request.hosts().iter().any(|h| match h {
                    HostSeen::Absent => false,
                    HostSeen::Bad => true,
                    HostSeen::Name(n) => group.pattern.matches(n),
                }),
            };
            if !applies {
                continue;
            }
            if let Route::Room(i) = group.router.route_target(request.target()) {
                return Some(group.rooms[i]);
            }
        }
        None
    }

    /// Whether `request` might belong to another room than [`RouteTable::room_for`]'s: its
    /// target reads several ways, or the path case rule may read its path in two (see
    /// `either_split`), or (where routes name hosts) it names two different hosts, a host
    /// that is not one, none, or a host only in its target (an application routes by the
    /// `Host` header), or writes its `Host` header as browsers never do (see
    /// `host::Form::Unusual`). What `room_for` worked out already: nothing more is read.
    #[inline]
    pub(crate) fn may_be_ambiguous(&self, request: &Prepared<'_, '_>) -> bool {
        let Some(path) = request.target().plain_path() else {
            return true;
        };
        // Case past the longest prefix (and the byte after it) puts the path in no other room.
        let reach = &path[..path.len().min(self.case_reach)];
        if self.folds_differ || (self.either_split && crate::routing::has_ascii_upper(reach)) {
            return true;
        }
        if !self.hosts_matter {
            return false;
        }
        match request.hosts() {
            [HostSeen::Bad, _] | [_, HostSeen::Bad] | [_, HostSeen::Absent] => true,
            [HostSeen::Name(a), HostSeen::Name(b)] => {
                !same_host(a, b) || request.host_header_unusual()
            }
            [HostSeen::Absent, HostSeen::Name(_)] => request.host_header_unusual(),
        }
    }

    /// Calls `f` with every room `request` might belong to, until it answers `true` (then
    /// `true`): for each reading of its hosts (see [`HostReading`]) and each reading of its
    /// path under each fold, the room of the first group (most specific host pattern first)
    /// that has a route for it; for a host that may be any, the room of every group that
    /// has. A room may come more than once. Allocates nothing for a plain target (its other
    /// readings are copies).
    pub(crate) fn any_candidate(
        &self,
        request: &Prepared<'_, '_>,
        mut f: impl FnMut(usize) -> bool,
    ) -> bool {
        let folds = self
            .groups
            .iter()
            .map(|g| g.router.folds())
            .max()
            .unwrap_or(0);
        for host in HostReading::of(request).into_iter().flatten() {
            let found = Router::any_reading(request.target(), |path| {
                (0..folds).any(|fold| {
                    let mut rooms = self.groups.iter().filter_map(|group| {
                        let applies = match (&group.pattern, host) {
                            (HostPattern::Any, _) | (_, HostReading::Any) => true,
                            (_, HostReading::Unnamed) => false,
                            (pattern, HostReading::Named(name) | HostReading::Loosely(name)) => {
                                pattern.matches(&name)
                            }
                        };
                        if !applies {
                            return None;
                        }
                        group.router.prefix_room(path, fold).map(|i| group.rooms[i])
                    });
                    // A host named (or none recognised): its most specific group with a
                    // route. Any host, or a host loosely named: each group's room.
                    let take = match host {
                        HostReading::Any | HostReading::Loosely(_) => usize::MAX,
                        HostReading::Named(_) | HostReading::Unnamed => 1,
                    };
                    rooms.by_ref().take(take).any(&mut f)
                })
            });
            if found {
                return true;
            }
        }
        false
    }
}

/// A way an application may take a request's host, for the rooms it might belong to.
#[derive(Debug, Clone, Copy)]
enum HostReading<'a> {
    /// As this host (most specific pattern first).
    Named(HostName<'a>),
    /// As any host: a host that is not one, or none named at all (nginx's default server may
    /// be any host's).
    Any,
    /// As no host its routes name (a router that finds no `Host` header): the routes
    /// without a host.
    Unnamed,
    /// As this host by some routes and not by others (a `Host` header written as browsers
    /// do not write it, which an exact match on its text misses and a pattern or a router
    /// without case may take): every host pattern it matches, and the routes without a host.
    Loosely(HostName<'a>),
}

impl<'a> HostReading<'a> {
    /// The ways `request`'s hosts may be taken: each host it names (a host that is not one:
    /// any); none named: any; a host only in its target: also as no host (an application
    /// routes by the `Host` header); a `Host` header written as browsers do not write it:
    /// loosely (see [`HostReading::Loosely`]).
    fn of(request: &Prepared<'_, 'a>) -> [Option<Self>; 3] {
        let read = |h: &HostSeen<'a>| match h {
            HostSeen::Absent => None,
            HostSeen::Bad => Some(HostReading::Any),
            HostSeen::Name(n) => Some(HostReading::Named(*n)),
        };
        let [target, header] = request.hosts();
        let header = match header {
            HostSeen::Name(n) if request.host_header_unusual() => Some(HostReading::Loosely(*n)),
            other => read(other),
        };
        let unnamed = match (target, header) {
            (HostSeen::Absent, None) => Some(HostReading::Any),
            (_, None) => Some(HostReading::Unnamed),
            _ => None,
        };
        [read(target), header, unnamed]
    }
}

/// Whether two host names are one (compared as their ASCII lower case).
fn same_host(a: &HostName<'_>, b: &HostName<'_>) -> bool {
    let (HostName::Lower(a) | HostName::Upper(a)) = *a;
    let (HostName::Lower(b) | HostName::Upper(b)) = *b;
    a.eq_ignore_ascii_case(b)
}
