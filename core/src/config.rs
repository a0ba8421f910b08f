//! The configuration schema shared by every front door: TOML, or the same structure in JSON.
//!
//! Room fields use Cloudflare's waiting-room names. A "minute" in a room (its
//! `new_users_per_minute`, its `session_duration`) is one time bucket, whose width is
//! `settings.bucket_width_secs` (60 unless set), so an end-to-end test can run a whole session
//! lifecycle in seconds without any test-only clock in production code.

use std::path::Path;

use base64::Engine as _;
use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};

/// The whole configuration of an engine.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Config {
    /// Engine-wide settings.
    #[serde(default)]
    pub settings: Settings,
    /// Ticket keys. With no keys, an ephemeral random key is made at start-up: fine for one
    /// process, but tickets then do not survive a restart nor verify in another process.
    #[serde(default)]
    pub tickets: TicketKeys,
    /// The waiting rooms.
    #[serde(default)]
    pub rooms: Vec<RoomConfig>,
    /// Lease templates for downstream resources (matched exact first, then globs in order).
    #[serde(default)]
    pub resources: Vec<crate::lease::ResourceTemplate>,
}

/// Engine-wide settings.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Settings {
    /// Width of a time bucket ("minute") in seconds. Default 60.
    pub bucket_width_secs: u32,
    /// Number of shards of each slot pool; 0 picks one from the machine's CPUs (twice their
    /// number, rounded up to a power of two, at most 64; the same in every process of a host).
    pub shards: u32,
    /// Tolerated clock skew, in seconds, for tickets stamped in the future. Default 30.
    pub max_clock_skew_secs: u32,
}

impl Default for Settings {
    fn default() -> Self {
        Self {
            bucket_width_secs: 60,
            shards: 0,
            max_clock_skew_secs: 30,
        }
    }
}

/// Ticket keys: several verification keys, one signing key.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TicketKeys {
    /// Id of the key that seals new tickets. Defaults to the highest id.
    #[serde(default)]
    pub signing_key: Option<u8>,
    /// All keys that may open tickets (the signing key among them).
    #[serde(default)]
    pub keys: Vec<KeySpec>,
}

/// One ticket key.
#[derive(Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct KeySpec {
    /// Key id, carried in every ticket sealed with this key.
    pub id: u8,
    /// 32 bytes of key material, base64 (standard or URL-safe, padding optional).
    #[serde(default)]
    pub secret: Option<String>,
    /// A file holding the same, instead of `secret`.
    #[serde(default)]
    pub secret_file: Option<String>,
}

impl std::fmt::Debug for KeySpec {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("KeySpec")
            .field("id", &self.id)
            .field("secret", &self.secret.as_ref().map(|_| "<redacted>"))
            .field("secret_file", &self.secret_file)
            .finish()
    }
}

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
fn default_title() -> String {
    "You are in line".into()
}

/// The configuration `make demo` and `velvet-rope demo` run on when given none.
pub const EMBEDDED_DEFAULT: &str = r#"
[settings]
bucket_width_secs = 60

[[rooms]]
name = "flash-sale"
total_active_users = 200
new_users_per_minute = 200
session_duration = 5
queueing_method = "fifo"
refresh_interval = 20
"#;

impl Config {
    /// Parses and validates TOML text.
    pub fn from_toml(text: &str) -> Result<Self> {
        let cfg: Config = toml::from_str(text).map_err(|e| Error::Parse(e.to_string()))?;
        cfg.validate()?;
        Ok(cfg)
    }

    /// Parses and validates JSON text of the same structure.
    pub fn from_json(text: &str) -> Result<Self> {
        let cfg: Config = serde_json::from_str(text).map_err(|e| Error::Parse(e.to_string()))?;
        cfg.validate()?;
        Ok(cfg)
    }

    /// Parses text that is either JSON (first non-blank character `{`) or TOML.
    pub fn from_text(text: &str) -> Result<Self> {
        if text.trim_start().starts_with('{') {
            Self::from_json(text)
        } else {
            Self::from_toml(text)
        }
    }

    /// Reads a file: JSON when its name ends in `.json`, TOML otherwise.
    pub fn from_path(path: impl AsRef<Path>) -> Result<Self> {
        let path = path.as_ref();
        let text = std::fs::read_to_string(path).map_err(|source| Error::Io {
            path: path.display().to_string(),
            source,
        })?;
        if path.extension().is_some_and(|e| e == "json") {
            Self::from_json(&text)
        } else {
            Self::from_toml(&text)
        }
    }

    /// The embedded default configuration.
    pub fn embedded_default() -> Self {
        // The embedded text is a constant checked by a unit test.
        Self::from_toml(EMBEDDED_DEFAULT).unwrap_or_else(|_| Self {
            settings: Settings::default(),
            tickets: TicketKeys::default(),
            rooms: Vec::new(),
            resources: Vec::new(),
        })
    }

    /// Checks every field; the error names the first bad one.
    pub fn validate(&self) -> Result<()> {
        let s = &self.settings;
        if s.bucket_width_secs == 0 || s.bucket_width_secs > 3600 {
            return Err(Error::invalid(
                "settings.bucket_width_secs",
                "must be between 1 and 3600",
            ));
        }
        if s.shards > 256 {
            return Err(Error::invalid(
                "settings.shards",
                "must be at most 256 (0 = automatic)",
            ));
        }
        let mut ids = std::collections::HashSet::new();
        for (i, k) in self.tickets.keys.iter().enumerate() {
            let field = format!("tickets.keys[{i}]");
            if !ids.insert(k.id) {
                return Err(Error::invalid(
                    format!("{field}.id"),
                    format!("duplicates key id {}", k.id),
                ));
            }
            k.material(&field)?;
        }
        if let Some(id) = self.tickets.signing_key {
            if !ids.contains(&id) {
                return Err(Error::invalid(
                    "tickets.signing_key",
                    format!("names key id {id}, which is not among tickets.keys"),
                ));
            }
        }
        crate::lease::LeaseConfig::validate_templates(&self.resources)
            .map_err(|e| Error::Lease(Box::new(e)))?;
        let mut names = std::collections::HashSet::new();
        for (i, r) in self.rooms.iter().enumerate() {
            r.validate(&format!("rooms[{i}]"))?;
            if !names.insert(r.name.as_str()) {
                return Err(Error::invalid(
                    format!("rooms[{i}].name"),
                    format!("duplicates room `{}`", r.name),
                ));
            }
        }
        Ok(())
    }
}

impl KeySpec {
    /// The 32 bytes of key material, read from `secret` or `secret_file`.
    pub(crate) fn material(&self, field: &str) -> Result<[u8; 32]> {
        let text = match (&self.secret, &self.secret_file) {
            (Some(s), None) => s.clone(),
            (None, Some(path)) => std::fs::read_to_string(path).map_err(|source| Error::Io {
                path: path.clone(),
                source,
            })?,
            _ => {
                return Err(Error::invalid(
                    field,
                    "needs exactly one of `secret` or `secret_file`",
                ))
            }
        };
        let text = text.trim().trim_end_matches('=');
        let bytes = base64::engine::general_purpose::URL_SAFE_NO_PAD
            .decode(text)
            .or_else(|_| base64::engine::general_purpose::STANDARD_NO_PAD.decode(text))
            .map_err(|_| Error::invalid(format!("{field}.secret"), "is not base64"))?;
        <[u8; 32]>::try_from(bytes.as_slice()).map_err(|_| {
            Error::invalid(
                format!("{field}.secret"),
                format!("must decode to 32 bytes, not {}", bytes.len()),
            )
        })
    }
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

    fn validate(&self, at: &str) -> Result<()> {
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
        if c.path.is_empty() || !c.path.starts_with('/') || !attr_ok(&c.path) {
            return Err(Error::invalid(
                f("cookie.path"),
                "must start with `/` and hold no `;` or control characters",
            ));
        }
        if c.domain
            .as_deref()
            .is_some_and(|d| d.is_empty() || !attr_ok(d))
        {
            return Err(Error::invalid(
                f("cookie.domain"),
                "must be non-empty and hold no `;` or control characters",
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
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn embedded_default_parses() {
        let cfg = Config::from_toml(EMBEDDED_DEFAULT).unwrap();
        assert_eq!(cfg.rooms[0].name, "flash-sale");
        assert_eq!(cfg.rooms[0].total_active_users, 200);
    }

    #[test]
    fn json_and_toml_are_one_schema() {
        let toml_cfg = Config::from_toml(EMBEDDED_DEFAULT).unwrap();
        let json = serde_json::to_string(&toml_cfg).unwrap();
        assert_eq!(Config::from_json(&json).unwrap(), toml_cfg);
        assert_eq!(Config::from_text(&json).unwrap(), toml_cfg);
    }

    #[test]
    fn errors_name_the_field() {
        let bad = EMBEDDED_DEFAULT.replace("total_active_users = 200", "total_active_users = 0");
        let err = Config::from_toml(&bad).unwrap_err().to_string();
        assert!(err.contains("rooms[0].total_active_users"), "{err}");
        let err = Config::from_toml(
            "[[rooms]]\nname = \"a b\"\ntotal_active_users = 1\nnew_users_per_minute = 1\n",
        )
        .unwrap_err()
        .to_string();
        assert!(err.contains("rooms[0].name"), "{err}");
        let err = Config::from_toml("[[rooms]]\nname = \"a\"\ntotal_active_users = 1\nnew_users_per_minute = 1\nbogus = 3\n")
            .unwrap_err()
            .to_string();
        assert!(err.contains("bogus"), "{err}");
    }

    #[test]
    fn keys_are_checked() {
        let cfg = "[tickets]\nsigning_key = 2\n[[tickets.keys]]\nid = 1\nsecret = \"AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA\"\n";
        let err = Config::from_toml(cfg).unwrap_err().to_string();
        assert!(err.contains("tickets.signing_key"), "{err}");
        let cfg = "[[tickets.keys]]\nid = 1\nsecret = \"AAAA\"\n";
        let err = Config::from_toml(cfg).unwrap_err().to_string();
        assert!(err.contains("tickets.keys[0].secret"), "{err}");
        assert!(err.contains("32 bytes"), "{err}");
    }
}
