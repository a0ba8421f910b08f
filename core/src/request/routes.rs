//! Which room a request belongs to, over every room's `routes`: the most specific host
//! pattern a request's host matches (an exact host, then the longest wildcard, then every
//! host), then the longest path prefix under it (read every way the `routing` module reads a
//! target, the first reading that finds a room deciding).

use crate::config::Config;
use crate::request::host::{HostPattern, HostSeen};
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
        Ok(Self {
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
}
