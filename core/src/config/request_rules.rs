//! Which traffic a room governs (`routes`) and what it does with some of it (`rules`), as the
//! configuration states them; compiled once, when the configuration loads, by
//! [`crate::request`].

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

/// One route of a room: requests to `host` (any host when absent) under the path prefix
/// `path` (every path when absent). Cloudflare's `host`/`path`/`additional_routes`, as a list.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RouteConfig {
    /// A host name (`shop.example.com`), a wildcard over its subdomains (`*.example.com`), or
    /// absent for every host. Compared without case, port or trailing dot.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub host: Option<String>,
    /// A path prefix starting with `/` (see `routing` for how it is matched); absent: `/`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub path: Option<String>,
}

/// What a rule does with the requests it matches.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RuleAction {
    /// Passed to the origin untouched: not decided, not counted (health checks, static
    /// files, staff, monitoring).
    Bypass,
    /// Decided by the room as usual; later rules are not looked at.
    Queue,
    /// Refused outright (403, problem details for JSON clients).
    Reject,
    /// Decided and counted as usual, but passed to the origin whatever the decision (the
    /// room's counters and tickets move as they would; "would have queued" is counted).
    CountOnly,
}

impl RuleAction {
    /// `bypass`, `queue`, `reject` or `count_only`.
    pub fn as_str(self) -> &'static str {
        match self {
            RuleAction::Bypass => "bypass",
            RuleAction::Queue => "queue",
            RuleAction::Reject => "reject",
            RuleAction::CountOnly => "count_only",
        }
    }

    /// Whether the action lets a request pass that the room would otherwise decide: such a
    /// rule matches a request only when every way of reading it matches (see
    /// `request::rule`).
    pub fn loosens(self) -> bool {
        matches!(self, RuleAction::Bypass | RuleAction::CountOnly)
    }
}

/// One of a room's `[[rooms.rules]]`: an action and conditions, all of which must hold (an
/// empty list holds for every request). Each list holds when any of its entries does.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RuleConfig {
    /// A name for the stats and for errors; default `rules[i]`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// What to do with a matching request.
    pub action: RuleAction,
    /// Request methods, exactly (`GET`, `HEAD`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub methods: Vec<String>,
    /// Hosts, as in routes (`api.example.com`, `*.example.com`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub hosts: Vec<String>,
    /// Path prefixes, as room prefixes are matched (normalised; see `routing`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub paths: Vec<String>,
    /// Query parameters: `name` (present) or `name=value` (exactly; both percent-decoded).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub query: Vec<String>,
    /// Request headers by name (any case), each value a pattern: `*` matches any run of
    /// characters (`*` alone: the header is present), everything else itself, with case.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub headers: BTreeMap<String, String>,
    /// Cookies by name, each value a pattern as for `headers`.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub cookies: BTreeMap<String, String>,
    /// Client addresses: CIDR blocks or single addresses, IPv4 or IPv6 (`10.0.0.0/8`,
    /// `2001:db8::/32`, `192.0.2.7`). The client is the address the front door says (nginx's
    /// realip result, Envoy's downstream address, the middleware's peer behind
    /// `settings.trusted_proxies`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub clients: Vec<String>,
}

/// Whether a room acts on its decisions or only counts them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RoomMode {
    /// Decisions are carried out.
    #[default]
    On,
    /// Every request is decided and counted, then passed whatever the decision ("would have
    /// queued" and "would have rejected" are counted): to size a room on live traffic.
    DryRun,
}

/// How paths are compared with route and rule prefixes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum PathCase {
    /// Byte for byte (Starlette, Flask, Fastify's default, nginx's `location`).
    Sensitive,
    /// Letters of any case alike (Express's default).
    Insensitive,
    /// Either (the default): a path either rule puts in a room (or under a rule that holds
    /// traffic back) is decided, and one passes a bypass only when both rules pass it. An
    /// application's routers need not agree (an Express app's `express.Router()`s compare
    /// case-insensitively whatever the app says), so no case of a path walks past a room;
    /// what it costs is a case variant that the application would answer with a 404 being
    /// decided too.
    #[default]
    Either,
}

impl PathCase {
    /// The router's case rule.
    pub(crate) fn rule(self) -> crate::routing::CaseRule {
        use crate::routing::CaseRule;
        match self {
            PathCase::Sensitive => CaseRule::Sensitive,
            PathCase::Insensitive => CaseRule::Insensitive,
            PathCase::Either => CaseRule::Either,
        }
    }
}
