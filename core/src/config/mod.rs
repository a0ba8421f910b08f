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

mod cluster;
mod event;
mod request_rules;
mod room;
mod rules;

pub use cluster::ClusterConfig;
pub use event::{event_at, next_switch, EventAt, EventConfig, EventPhase, Instant};
pub use request_rules::{PathCase, RoomMode, RouteConfig, RuleAction, RuleConfig};
pub use room::{
    CookieConfig, OriginCommand, QueueingMethod, RoomConfig, MAX_COOKIE_DOMAIN, MAX_COOKIE_PATH,
};
pub use rules::{Rules, SHUFFLE_LANES};

/// Most rooms one configuration may hold.
pub const MAX_ROOMS: usize = crate::counters::directory::MAX_ROOMS;

/// Most bytes of counters one room may take (its size is fixed by its configuration).
pub const MAX_ROOM_BYTES: usize = 256 << 20;

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
    /// Hosts sharing the rooms' limits through a store (see [`ClusterConfig`]); none by
    /// default (each host, or each set of processes sharing counters, is alone).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cluster: Option<ClusterConfig>,
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
    /// How route and rule path prefixes compare with paths: `either` (default: decided if
    /// either rule decides), `sensitive`, or `insensitive` (see [`PathCase`]).
    pub path_case: PathCase,
    /// Proxies whose `X-Forwarded-For` a middleware believes (CIDR blocks or addresses): the
    /// client is the last address before the first untrusted hop. Empty (default): the peer
    /// is the client. Servers say who the client is themselves (nginx's realip module,
    /// Envoy's `xff_num_trusted_hops`).
    pub trusted_proxies: Vec<String>,
}

impl Default for Settings {
    fn default() -> Self {
        Self {
            bucket_width_secs: 60,
            shards: 0,
            max_clock_skew_secs: 30,
            path_case: PathCase::Either,
            trusted_proxies: Vec::new(),
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
        let cfg = Self::parse_toml(text)?;
        cfg.validate()?;
        Ok(cfg)
    }

    /// Parses and validates JSON text of the same structure.
    pub fn from_json(text: &str) -> Result<Self> {
        let cfg = Self::parse_json(text)?;
        cfg.validate()?;
        Ok(cfg)
    }

    fn parse_toml(text: &str) -> Result<Self> {
        toml::from_str(text).map_err(|e| Error::Parse(e.to_string()))
    }

    fn parse_json(text: &str) -> Result<Self> {
        serde_json::from_str(text).map_err(|e| Error::Parse(e.to_string()))
    }

    /// Parses text that is either JSON (first non-blank character `{`) or TOML.
    pub fn from_text(text: &str) -> Result<Self> {
        if text.trim_start().starts_with('{') {
            Self::from_json(text)
        } else {
            Self::from_toml(text)
        }
    }

    /// Reads a file: JSON when its name ends in `.json`, TOML otherwise. Relative
    /// `custom_page_file` paths (of rooms and events) are taken from the file's directory,
    /// and written into the configuration as joined to it.
    pub fn from_path(path: impl AsRef<Path>) -> Result<Self> {
        let path = path.as_ref();
        let text = std::fs::read_to_string(path).map_err(|source| Error::Io {
            path: path.display().to_string(),
            source,
        })?;
        let mut cfg = if path.extension().is_some_and(|e| e == "json") {
            Self::parse_json(&text)?
        } else {
            Self::parse_toml(&text)?
        };
        if let Some(dir) = path.parent() {
            cfg.resolve_page_files(dir);
        }
        cfg.validate()?;
        Ok(cfg)
    }

    /// Joins each relative `custom_page_file` to `dir`.
    fn resolve_page_files(&mut self, dir: &Path) {
        let resolve = |file: &mut Option<String>| {
            if let Some(f) = file
                .as_mut()
                .filter(|f| Path::new(f.as_str()).is_relative())
            {
                *f = dir.join(f.as_str()).display().to_string();
            }
        };
        for room in &mut self.rooms {
            resolve(&mut room.custom_page_file);
            for event in &mut room.events {
                resolve(&mut event.custom_page_file);
            }
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
            cluster: None,
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
        if let Some(c) = &self.cluster {
            c.validate()?;
            if c.sync_interval_ms * 4 > u64::from(s.bucket_width_secs) * 1000 {
                return Err(Error::invalid(
                    "cluster.sync_interval_ms",
                    "must be at most a quarter of settings.bucket_width_secs (allowances are \
                     granted per bucket, a sync ahead)",
                ));
            }
        }
        if self.rooms.is_empty() && self.resources.is_empty() {
            return Err(Error::invalid(
                "rooms",
                "is empty, and so is `resources`: the configuration defines nothing",
            ));
        }
        if self.rooms.len() > MAX_ROOMS {
            return Err(Error::invalid(
                "rooms",
                format!("holds {} rooms; at most {MAX_ROOMS}", self.rooms.len()),
            ));
        }
        crate::request::clients::CidrSet::parse(&s.trusted_proxies)
            .map_err(|why| Error::invalid("settings.trusted_proxies", why))?;
        crate::request::routes::RouteTable::compile(self)
            .map_err(|(field, why)| Error::invalid(field, why))?;
        let mut names = std::collections::HashSet::new();
        let mut cookies = std::collections::HashMap::new();
        for (i, r) in self.rooms.iter().enumerate() {
            let at = format!("rooms[{i}]");
            r.validate(&at)?;
            crate::request::rule::RuleSet::compile(&r.rules, s.path_case, &r.cookie_name(), &at)
                .map_err(|(field, why)| Error::invalid(field, why))?;
            // Reads and compiles the room's templates: a faulty one is refused here.
            crate::page::RoomPages::compile(r, &at)?;
            if !names.insert(r.name.as_str()) {
                return Err(Error::invalid(
                    format!("{at}.name"),
                    format!("duplicates room `{}`", r.name),
                ));
            }
            if let Some(other) = cookies.insert(r.cookie_name(), r.name.as_str()) {
                return Err(Error::invalid(
                    format!("{at}.cookie_suffix"),
                    format!(
                        "gives cookie `{}`, which room `{other}` uses too (set `cookie_suffix`)",
                        r.cookie_name()
                    ),
                ));
            }
            let bytes = crate::counters::room_layout::RoomLayout::of(r, s).size();
            if bytes > MAX_ROOM_BYTES {
                return Err(Error::invalid(
                    at,
                    format!(
                        "needs {} MiB of counters (replay guards of {} buckets for {} users, \
                         queue tables for {} waiters); at most {} MiB: lower \
                         `total_active_users`, `session_duration` or `max_live_waiters`, or widen \
                         `settings.bucket_width_secs` and shorten the session in buckets",
                        bytes.div_ceil(1 << 20),
                        r.session_duration + 3,
                        r.total_active_users,
                        r.max_live_waiters,
                        MAX_ROOM_BYTES >> 20
                    ),
                ));
            }
        }
        Ok(())
    }
}

impl TicketKeys {
    /// The keyring of the configured keys, or `None` when none is configured (an engine then
    /// makes an ephemeral key).
    pub fn keyring(&self) -> Result<Option<crate::ticket::Keyring>> {
        if self.keys.is_empty() {
            return Ok(None);
        }
        let mut keys = Vec::with_capacity(self.keys.len());
        for (i, k) in self.keys.iter().enumerate() {
            keys.push((k.id, k.material(&format!("tickets.keys[{i}]"))?));
        }
        crate::ticket::Keyring::new(&keys, self.signing_key).map(Some)
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
