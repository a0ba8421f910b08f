//! One filter configuration: the engine it decides with (shared by all of Envoy's worker
//! threads: exact across them with no shared memory), the room, and the ticker.
//!
//! The filter's `filter_config` is JSON (a `google.protobuf.StringValue` in Envoy's
//! configuration, or a `Struct`, which Envoy hands over as JSON):
//!
//! ```json
//! {"config_path": "/etc/velvet-rope.toml", "room": "shop"}
//! {"config": "[[rooms]]\nname = \"shop\"\n...", "room": "shop", "state_file": "/run/vr.state"}
//! ```
//!
//! `config_path` or `config` (inline TOML or JSON) gives the engine's configuration; `room`
//! the room that decides the requests through this filter; `state_file` (optional) keeps the
//! counters in a file, so that they survive Envoy's restarts and are shared with the engine
//! of a replacement configuration (a listener update makes a new filter configuration while
//! the old one drains); `tick_interval_ms` (default 1000) how often the module's ticker
//! thread folds the counters.

use std::sync::Arc;

use serde::Deserialize;
use velvet_rope::{Clock, CoarseSystemClock, Config, Engine};

use crate::ticker::Ticker;

/// The filter configuration's fields.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct Settings {
    config_path: Option<String>,
    config: Option<String>,
    room: String,
    state_file: Option<String>,
    tick_interval_ms: Option<u64>,
}

/// A filter configuration, live from `config_new` to `config_destroy`.
pub struct FilterConfig {
    /// The engine deciding this filter's requests.
    pub engine: Arc<Engine>,
    /// The room.
    pub room: String,
    /// The filter's name in Envoy's configuration (for log lines).
    pub name: String,
    _ticker: Ticker,
}

impl FilterConfig {
    /// Builds a configuration from the filter's `filter_config` bytes; an error says what is
    /// wrong in words an operator can act on.
    pub fn from_bytes(name: &str, bytes: &[u8]) -> Result<Self, String> {
        let settings: Settings = serde_json::from_slice(bytes).map_err(|e| {
            format!(
                "filter `{name}`: filter_config must be JSON like \
                 {{\"config_path\": \"/etc/velvet-rope.toml\", \"room\": \"shop\"}}: {e}"
            )
        })?;
        let config = match (&settings.config_path, &settings.config) {
            (Some(path), None) => Config::from_path(path),
            (None, Some(text)) => Config::from_text(text),
            _ => {
                return Err(format!(
                    "filter `{name}`: give exactly one of `config_path` and `config`"
                ))
            }
        }
        .map_err(|e| format!("filter `{name}`: {e}"))?;
        let now = CoarseSystemClock.now_ms();
        let engine = match &settings.state_file {
            Some(path) => Engine::open_state_file(config, path, now),
            None => Engine::new(config, now),
        }
        .map_err(|e| format!("filter `{name}`: {e}"))?;
        if !engine.rooms().contains(&settings.room) {
            return Err(format!(
                "filter `{name}`: no room named `{}` in the configuration (its rooms: {})",
                settings.room,
                engine.rooms().join(", ")
            ));
        }
        let interval = settings.tick_interval_ms.unwrap_or(1000);
        if !(10..=60_000).contains(&interval) {
            return Err(format!(
                "filter `{name}`: tick_interval_ms must be between 10 and 60000"
            ));
        }
        let engine = Arc::new(engine);
        Ok(Self {
            _ticker: Ticker::start(engine.clone(), interval),
            engine,
            room: settings.room,
            name: name.to_owned(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const ROOMS: &str = "[[rooms]]\nname = \"shop\"\ntotal_active_users = 2\n\
                         new_users_per_minute = 100\n";

    fn json(v: serde_json::Value) -> Vec<u8> {
        v.to_string().into_bytes()
    }

    #[test]
    fn inline_configuration_and_room() {
        let c = FilterConfig::from_bytes(
            "f",
            &json(serde_json::json!({"config": ROOMS, "room": "shop"})),
        )
        .unwrap();
        assert_eq!(c.room, "shop");
        let d = c
            .engine
            .admit("shop", None, CoarseSystemClock.now_ms())
            .unwrap();
        assert!(d.set_cookie.is_some());
    }

    #[test]
    fn mistakes_are_named() {
        let cases = [
            (b"not json".to_vec(), "must be JSON"),
            (json(serde_json::json!({"room": "shop"})), "exactly one of"),
            (
                json(serde_json::json!({"config": ROOMS, "config_path": "/x", "room": "shop"})),
                "exactly one of",
            ),
            (
                json(serde_json::json!({"config": ROOMS, "room": "nope"})),
                "no room named `nope`",
            ),
            (
                json(serde_json::json!({"config": ROOMS, "room": "shop", "extra": 1})),
                "unknown field",
            ),
            (
                json(serde_json::json!({"config": "[[rooms]]\nname = 3", "room": "shop"})),
                "filter `f`",
            ),
            (
                json(serde_json::json!({"config_path": "/nonexistent/vr.toml", "room": "shop"})),
                "/nonexistent/vr.toml",
            ),
            (
                json(serde_json::json!({"config": ROOMS, "room": "shop", "tick_interval_ms": 0})),
                "tick_interval_ms",
            ),
        ];
        for (bytes, want) in cases {
            match FilterConfig::from_bytes("f", &bytes) {
                Ok(_) => panic!("accepted {}", String::from_utf8_lossy(&bytes)),
                Err(e) => assert!(e.contains(want), "{e:?} lacks {want:?}"),
            }
        }
    }
}
