//! One waiting room's configuration.

use serde::{Deserialize, Serialize};

use crate::config::event::EventConfig;
use crate::config::request_rules::{RoomMode, RouteConfig, RuleConfig};
use crate::error::{Error, Result};

/// Longest `cookie.path`, in bytes.
pub const MAX_COOKIE_PATH: usize = 256;
/// Longest `cookie.domain`, in bytes (a DNS name's limit).
pub const MAX_COOKIE_DOMAIN: usize = 253;

/// How a room orders its queue.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "snake_case")]
pub enum QueueingMethod {
    /// First in, first out by arrival bucket.
    #[default]
    Fifo,
    /// Every live waiter has the same chance each refresh, whatever its arrival.
    Random,
    /// Everyone passes; the room only counts.
    Passthrough,
    /// No queue: visitors over the limit are rejected with a retry-after.
    Reject,
}

impl QueueingMethod {
    /// The name the configuration uses: `fifo`, `random`, `passthrough` or `reject`.
    pub fn as_str(self) -> &'static str {
        match self {
            QueueingMethod::Fifo => "fifo",
            QueueingMethod::Random => "random",
            QueueingMethod::Passthrough => "passthrough",
            QueueingMethod::Reject => "reject",
        }
    }
}

/// Cookie attributes of a room's ticket cookie.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct CookieConfig {
    /// `Path` attribute. Default `/`.
    pub path: String,
    /// `Domain` attribute, if any.
    pub domain: Option<String>,
    /// `Secure` attribute. Default true.
    pub secure: bool,
    /// `HttpOnly` attribute. Default true.
    pub http_only: bool,
    /// `SameSite` attribute: `Lax`, `Strict` or `None`. Default `Lax`.
    pub same_site: String,
}

impl Default for CookieConfig {
    fn default() -> Self {
        Self {
            path: "/".into(),
            domain: None,
            secure: true,
            http_only: true,
            same_site: "Lax".into(),
        }
    }
}

/// One waiting room.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RoomConfig {
    /// Room name: 1-64 characters of `[A-Za-z0-9_-]`.
    pub name: String,
    /// Most visitors active at once.
    pub total_active_users: u64,
    /// Most visitors admitted for the first time per minute (bucket).
    pub new_users_per_minute: u64,
    /// Minutes (buckets) a visitor stays active after their last request. Default 5.
    #[serde(default = "default_session")]
    pub session_duration: u32,
    /// Queue order. Default `fifo`.
    #[serde(default)]
    pub queueing_method: QueueingMethod,
    /// Queue everyone, admit nobody (e.g. before a sale opens).
    #[serde(default)]
    pub queue_all: bool,
    /// Sessions end `session_duration` after admission, whatever the visitor does.
    #[serde(default)]
    pub disable_session_renewal: bool,
    /// HTTP status of the waiting page. Default 200.
    #[serde(default = "default_status")]
    pub queueing_status_code: u16,
    /// Serve JSON to clients that ask for `application/json`. Default true.
    #[serde(default = "default_true")]
    pub json_response_enabled: bool,
    /// Ticket cookie name is `__vr_<suffix>`, or `__vr_<room name>` when empty.
    #[serde(default)]
    pub cookie_suffix: String,
    /// Seconds between refreshes of the waiting page. Default 20.
    #[serde(default = "default_refresh")]
    pub refresh_interval: u32,
    /// A waiter that misses this many refreshes stops counting as live. Default 2.
    #[serde(default = "default_grace")]
    pub waiter_grace_refreshes: u32,
    /// Cookie attributes.
    #[serde(default)]
    pub cookie: CookieConfig,
    /// Most live waiters the queue's replay guard is sized for (per refresh epoch). Beyond it
    /// replays of queued tickets can make the queue look longer (never admit more). Default
    /// 32,768 (256 KiB per refresh epoch tracked).
    #[serde(default = "default_max_live_waiters")]
    pub max_live_waiters: u32,
    /// Number of arrival buckets the FIFO queue tracks; older waiters share the oldest. Default 1024.
    #[serde(default = "default_queue_buckets")]
    pub queue_buckets: u32,
    /// Title of the waiting page.
    #[serde(default = "default_title")]
    pub page_title: String,
    /// Learn for one session after the room's counters are made anew (a restart without a
    /// state file, a new state file, a room added by a reload): visitors holding a valid
    /// admission ticket are counted in as they come back, and everyone else waits, so that the
    /// room never holds its returning visitors plus a roomful of new ones (Doorman's learning
    /// mode). A brand-new room learns too: its first visitors wait one session. Default false.
    #[serde(default)]
    pub restart_learning: bool,
    /// The room is switched off: every request passes untouched and nothing is counted.
    #[serde(default)]
    pub suspended: bool,
    /// The waiting page as a Mustache template with Cloudflare's variables (see `page`);
    /// the built-in page when neither this nor `custom_page_file` is set.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub custom_page: Option<String>,
    /// A file holding the page template, read when the configuration loads (relative paths
    /// from the configuration file's directory, or the working directory for text).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub custom_page_file: Option<String>,
    /// Language of the built-in pages (a BCP 47 tag such as `en-US` or `de-DE`). Default
    /// `en-US`.
    #[serde(default = "default_language")]
    pub default_template_language: String,
    /// Serve the built-in pages in the language the visitor's `Accept-Language` prefers,
    /// when it is one of the built-in languages. Default false (always
    /// `default_template_language`, as Cloudflare does).
    #[serde(default)]
    pub accept_language: bool,
    /// Scheduled events, in any order; their spans (pre-queue included) may not overlap.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub events: Vec<EventConfig>,
    /// The requests this room decides when a front door asks the core which room (C, Python
    /// and Node without a room named): the most specific host, then the longest path prefix,
    /// over every room's routes. None: the room is reached by name only (nginx locations,
    /// Envoy routes, a middleware's `room=`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub routes: Vec<RouteConfig>,
    /// Ordered rules: the first that matches a request says what happens to it; a request no
    /// rule matches is decided.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub rules: Vec<RuleConfig>,
    /// `on` (default) or `dry_run` (decide and count, let everyone through).
    #[serde(default)]
    pub mode: RoomMode,
    /// Accept the ticket from a `Velvet-Rope-Ticket` request header when the request has no
    /// ticket cookie (clients without cookies: mobile apps, API callers); the JSON waiting
    /// response and admitted responses carry the ticket to send back. Default false.
    #[serde(default)]
    pub ticket_header: bool,
    /// Commands the origin may give in a `Velvet-Rope-Command` response header (Cloudflare's
    /// `enabled_origin_commands`). `["revoke"]`: the origin ends the visitor's session (its
    /// seat is freed, its ticket refused from then on). Default none.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub enabled_origin_commands: Vec<OriginCommand>,
    /// How many revocations the room keeps at once: made within any `session_duration + 3`
    /// minutes (the longest a revoked ticket could still be presented). Revocations past it
    /// are refused (the session goes on until it ends by itself) and counted. 0 (default):
    /// `total_active_users`, at least 1024 (rounded up to a power of two). Fixed memory: six
    /// words per revocation (five generation tables and the cluster outbox), 48 KiB per 1,024.
    #[serde(default)]
    pub max_revocations: u32,
}

/// A command the origin may give in a response header.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum OriginCommand {
    /// End the visitor's session: its seat is freed and its ticket refused from then on.
    Revoke,
}

fn default_session() -> u32 {
    5
}
fn default_status() -> u16 {
    200
}
fn default_true() -> bool {
    true
}
fn default_refresh() -> u32 {
    20
}
fn default_grace() -> u32 {
    2
}
fn default_max_live_waiters() -> u32 {
    32_768
}
fn default_queue_buckets() -> u32 {
    1024
}
fn default_language() -> String {
    "en-US".into()
}
fn default_title() -> String {
    "You are in line".into()
}

impl RoomConfig {
    /// A room with the given limits and every other field at its default.
    pub fn new(name: &str, total_active_users: u64, new_users_per_minute: u64) -> Self {
        Self {
            name: name.into(),
            total_active_users,
            new_users_per_minute,
            session_duration: default_session(),
            queueing_method: QueueingMethod::default(),
            queue_all: false,
            disable_session_renewal: false,
            queueing_status_code: default_status(),
            json_response_enabled: true,
            cookie_suffix: String::new(),
            refresh_interval: default_refresh(),
            waiter_grace_refreshes: default_grace(),
            cookie: CookieConfig::default(),
            queue_buckets: default_queue_buckets(),
            max_live_waiters: default_max_live_waiters(),
            page_title: default_title(),
            restart_learning: false,
            suspended: false,
            custom_page: None,
            custom_page_file: None,
            default_template_language: default_language(),
            accept_language: false,
            events: Vec::new(),
            routes: Vec::new(),
            rules: Vec::new(),
            mode: RoomMode::On,
            ticket_header: false,
            enabled_origin_commands: Vec::new(),
            max_revocations: 0,
        }
    }

    /// The name of this room's ticket cookie.
    pub fn cookie_name(&self) -> String {
        if self.cookie_suffix.is_empty() {
            format!("__vr_{}", self.name)
        } else {
            format!("__vr_{}", self.cookie_suffix)
        }
    }

    pub(super) fn validate(&self, at: &str) -> Result<()> {
        let f = |name: &str| format!("{at}.{name}");
        let token_ok = |s: &str| {
            s.bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
        };
        if self.name.is_empty() || self.name.len() > 64 || !token_ok(&self.name) {
            return Err(Error::invalid(
                f("name"),
                "must be 1-64 characters of A-Z, a-z, 0-9, `_` or `-`",
            ));
        }
        if self.total_active_users == 0 || self.total_active_users > 1 << 20 {
            return Err(Error::invalid(
                f("total_active_users"),
                "must be between 1 and 1048576",
            ));
        }
        if self.max_live_waiters < 1024 || self.max_live_waiters > 1 << 22 {
            return Err(Error::invalid(
                f("max_live_waiters"),
                "must be between 1024 and 4194304",
            ));
        }
        if self.new_users_per_minute == 0 || self.new_users_per_minute > u32::MAX as u64 {
            return Err(Error::invalid(
                f("new_users_per_minute"),
                "must be between 1 and 4294967295",
            ));
        }
        if self.session_duration == 0 || self.session_duration > 1440 {
            return Err(Error::invalid(
                f("session_duration"),
                "must be between 1 and 1440 minutes",
            ));
        }
        if !matches!(self.queueing_status_code, 200 | 202 | 429 | 503) {
            return Err(Error::invalid(
                f("queueing_status_code"),
                "must be one of 200, 202, 429, 503",
            ));
        }
        if self.cookie_suffix.len() > 64 || !token_ok(&self.cookie_suffix) {
            return Err(Error::invalid(
                f("cookie_suffix"),
                "must be at most 64 characters of A-Z, a-z, 0-9, `_` or `-`",
            ));
        }
        if self.refresh_interval == 0 || self.refresh_interval > 3600 {
            return Err(Error::invalid(
                f("refresh_interval"),
                "must be between 1 and 3600 seconds",
            ));
        }
        if self.waiter_grace_refreshes == 0 || self.waiter_grace_refreshes > 16 {
            return Err(Error::invalid(
                f("waiter_grace_refreshes"),
                "must be between 1 and 16",
            ));
        }
        if self.queue_buckets < 2 || self.queue_buckets > 65536 {
            return Err(Error::invalid(
                f("queue_buckets"),
                "must be between 2 and 65536",
            ));
        }
        let c = &self.cookie;
        let attr_ok = |s: &str| !s.bytes().any(|b| b < 0x20 || b == b';' || b == 0x7f);
        if c.path.is_empty()
            || c.path.len() > MAX_COOKIE_PATH
            || !c.path.starts_with('/')
            || !attr_ok(&c.path)
        {
            return Err(Error::invalid(
                f("cookie.path"),
                format!(
                    "must start with `/`, take at most {MAX_COOKIE_PATH} bytes and hold no `;` \
                     or control characters"
                ),
            ));
        }
        if c.domain
            .as_deref()
            .is_some_and(|d| d.is_empty() || d.len() > MAX_COOKIE_DOMAIN || !attr_ok(d))
        {
            return Err(Error::invalid(
                f("cookie.domain"),
                format!(
                    "must take 1 to {MAX_COOKIE_DOMAIN} bytes and hold no `;` or control \
                     characters"
                ),
            ));
        }
        if !matches!(c.same_site.as_str(), "Lax" | "Strict" | "None") {
            return Err(Error::invalid(
                f("cookie.same_site"),
                "must be `Lax`, `Strict` or `None`",
            ));
        }
        if c.same_site == "None" && !c.secure {
            return Err(Error::invalid(
                f("cookie.same_site"),
                "`None` needs `secure = true` (browsers refuse it otherwise)",
            ));
        }
        if self.page_title.len() > 200 {
            return Err(Error::invalid(f("page_title"), "must be at most 200 bytes"));
        }
        if self.custom_page.is_some() && self.custom_page_file.is_some() {
            return Err(Error::invalid(
                f("custom_page_file"),
                "give `custom_page` or `custom_page_file`, not both",
            ));
        }
        if self.max_revocations > 1 << 20 {
            return Err(Error::invalid(
                f("max_revocations"),
                "must be at most 1048576 (0: total_active_users, at least 1024)",
            ));
        }
        self.validate_events(at)?;
        debug_assert!(self.max_set_cookie_len() <= crate::MAX_SET_COOKIE_LEN);
        Ok(())
    }

    /// Checks each event, then that no two spans (pre-queue included) overlap.
    fn validate_events(&self, at: &str) -> Result<()> {
        for (i, e) in self.events.iter().enumerate() {
            e.validate(&format!("{at}.events[{i}]"))?;
            let event = |name: &str, v: u64, ok: bool, what: &str| {
                if ok {
                    Ok(())
                } else {
                    Err(Error::invalid(
                        format!("{at}.events[{i}].{name}"),
                        format!("{v}: {what}"),
                    ))
                }
            };
            if let Some(v) = e.total_active_users {
                event(
                    "total_active_users",
                    v,
                    (1..=1 << 20).contains(&v),
                    "must be between 1 and 1048576",
                )?;
            }
            if let Some(v) = e.new_users_per_minute {
                event(
                    "new_users_per_minute",
                    v,
                    (1..=u64::from(u32::MAX)).contains(&v),
                    "must be between 1 and 4294967295",
                )?;
            }
            if let Some(v) = e.session_duration {
                event(
                    "session_duration",
                    v.into(),
                    (1..=1440).contains(&v),
                    "must be between 1 and 1440 minutes",
                )?;
            }
        }
        let shuffled = self
            .events
            .iter()
            .any(|e| e.shuffle_at_event_start && e.prequeue_start.is_some());
        if shuffled && u64::from(self.queue_buckets) < 2 * crate::config::SHUFFLE_LANES {
            return Err(Error::invalid(
                format!("{at}.queue_buckets"),
                format!(
                    "must be at least {} in a room whose events shuffle their pre-queue",
                    2 * crate::config::SHUFFLE_LANES
                ),
            ));
        }
        let mut spans: Vec<&EventConfig> = self.events.iter().collect();
        spans.sort_by_key(|e| e.opens());
        for w in spans.windows(2) {
            if w[1].opens() < w[0].event_end {
                return Err(Error::invalid(
                    format!("{at}.events"),
                    format!(
                        "events `{}` ({} to {}) and `{}` ({} to {}) overlap",
                        w[0].name,
                        w[0].opens().to_rfc3339(),
                        w[0].event_end.to_rfc3339(),
                        w[1].name,
                        w[1].opens().to_rfc3339(),
                        w[1].event_end.to_rfc3339()
                    ),
                ));
            }
        }
        Ok(())
    }

    /// The longest `Set-Cookie` value this room can hand out (every attribute at its longest,
    /// the longest `Max-Age`): at most [`crate::MAX_SET_COOKIE_LEN`] for a valid room.
    pub fn max_set_cookie_len(&self) -> usize {
        let c = &self.cookie;
        self.cookie_name().len()
            + "=".len()
            + crate::ticket::ENCODED_LEN
            + "; Max-Age=4294967295".len()
            + "; Path=".len()
            + c.path.len()
            + c.domain.as_ref().map_or(0, |d| "; Domain=".len() + d.len())
            + "; Secure".len()
            + "; HttpOnly".len()
            + "; SameSite=Strict".len()
    }
}
