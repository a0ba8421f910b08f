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
//! counters in a file, so that they survive Envoy's restarts; `tick_interval_ms` (default
//! 1000, at most the bucket width and every room's refresh interval) how often the module's
//! ticker thread folds the counters.
//!
//! Filter configurations of one process that name the same configuration (the same file, or
//! the same inline text) and state file share one engine: several listeners, or a listener
//! update (which makes a new filter configuration while the old one drains), count one room
//! once, with one ticket key. A new configuration reloads the shared engine (rooms matched
//! by name, counts kept); one the engine's counters cannot serve is refused.

use std::sync::{Arc, Mutex, Weak};

use serde::Deserialize;
use velvet_rope::{Clock, CoarseSystemClock, Config, Engine};
use velvet_rope_cluster::Syncer;

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

/// An engine, its ticker and (with a `[cluster]` table) its sync loop, shared by the filter
/// configurations that name its source.
pub struct SharedEngine {
    /// The engine.
    pub engine: Arc<Engine>,
    _ticker: Ticker,
    sync: Mutex<Option<Syncer>>,
}

/// The cluster tier's sync loop for `engine`, if its configuration has a `[cluster]` table.
fn sync_loop(engine: &Arc<Engine>) -> Result<Option<Syncer>, String> {
    Syncer::from_engine(engine.clone()).map_err(|e| format!("cluster: {e}"))
}

/// The process's engines, by configuration source and state file (dead ones pruned as new
/// configurations come; configurations are made on Envoy's main thread, never per request).
static ENGINES: Mutex<Vec<(String, Weak<SharedEngine>)>> = Mutex::new(Vec::new());

/// A filter configuration, live from `config_new` to `config_destroy`.
pub struct FilterConfig {
    /// The engine deciding this filter's requests.
    pub engine: Arc<Engine>,
    /// The room.
    pub room: String,
    /// The filter's name in Envoy's configuration (for log lines).
    pub name: String,
    _shared: Arc<SharedEngine>,
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
        let (config, source) = match (&settings.config_path, &settings.config) {
            (Some(path), None) => {
                let canonical = std::fs::canonicalize(path)
                    .map(|p| p.display().to_string())
                    .unwrap_or_else(|_| path.clone());
                (Config::from_path(path), format!("path:{canonical}"))
            }
            (None, Some(text)) => (Config::from_text(text), format!("text:{text}")),
            _ => {
                return Err(format!(
                    "filter `{name}`: give exactly one of `config_path` and `config`"
                ))
            }
        };
        let config = config.map_err(|e| format!("filter `{name}`: {e}"))?;
        if !config.rooms.iter().any(|r| r.name == settings.room) {
            let rooms: Vec<&str> = config.rooms.iter().map(|r| r.name.as_str()).collect();
            return Err(format!(
                "filter `{name}`: no room named `{}` in the configuration (its rooms: {})",
                settings.room,
                rooms.join(", ")
            ));
        }
        let interval = settings.tick_interval_ms.unwrap_or(1000);
        let most = config
            .rooms
            .iter()
            .map(|r| u64::from(r.refresh_interval))
            .chain([u64::from(config.settings.bucket_width_secs)])
            .min()
            .unwrap_or(1)
            .saturating_mul(1000);
        if interval < 10 || interval > most {
            return Err(format!(
                "filter `{name}`: tick_interval_ms must be between 10 and {most} (the bucket \
                 width and every room's refresh interval)"
            ));
        }
        let key = format!(
            "{source}\0state:{}",
            settings.state_file.as_deref().unwrap_or("")
        );
        let shared = shared_engine(&key, config, settings.state_file.as_deref(), interval)
            .map_err(|e| format!("filter `{name}`: {e}"))?;
        Ok(Self {
            engine: shared.engine.clone(),
            room: settings.room,
            name: name.to_owned(),
            _shared: shared,
        })
    }
}

/// The engine of `key`: the live one, reloaded with `config`, or a new one.
fn shared_engine(
    key: &str,
    config: Config,
    state_file: Option<&str>,
    interval_ms: u64,
) -> Result<Arc<SharedEngine>, String> {
    let mut engines = ENGINES.lock().unwrap_or_else(|p| p.into_inner());
    engines.retain(|(_, w)| w.strong_count() > 0);
    if let Some(live) = engines
        .iter()
        .find(|(k, _)| k == key)
        .and_then(|(_, w)| w.upgrade())
    {
        let cluster_changed = live.engine.config().cluster != config.cluster;
        live.engine
            .reload(config)
            .map_err(|e| format!("the running engine cannot take this configuration: {e}"))?;
        if cluster_changed {
            // A new store, or new sync settings: the old loop stops (joined) first.
            let mut sync = live.sync.lock().unwrap_or_else(|p| p.into_inner());
            *sync = None;
            *sync = sync_loop(&live.engine)?;
        }
        return Ok(live);
    }
    let now = CoarseSystemClock.now_ms();
    let engine = match state_file {
        Some(path) => Engine::open_state_file(config, path, now),
        None => Engine::new(config, now),
    }
    .map_err(|e| e.to_string())?;
    let engine = Arc::new(engine);
    let shared = Arc::new(SharedEngine {
        _ticker: Ticker::start(engine.clone(), interval_ms)?,
        sync: Mutex::new(sync_loop(&engine)?),
        engine,
    });
    engines.push((key.to_owned(), Arc::downgrade(&shared)));
    Ok(shared)
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
    fn configurations_of_one_source_share_one_engine_and_reload_it() {
        let text = ROOMS.replace("name = \"shop\"", "name = \"shared\"");
        let a = FilterConfig::from_bytes(
            "a",
            &json(serde_json::json!({"config": text, "room": "shared"})),
        )
        .unwrap();
        let b = FilterConfig::from_bytes(
            "b",
            &json(serde_json::json!({"config": text, "room": "shared"})),
        )
        .unwrap();
        assert!(Arc::ptr_eq(&a.engine, &b.engine), "one source, one engine");
        let other = FilterConfig::from_bytes(
            "c",
            &json(serde_json::json!({"config": ROOMS, "room": "shop"})),
        )
        .unwrap();
        assert!(!Arc::ptr_eq(&a.engine, &other.engine));
        // A ticket of one configuration re-admits through the other (one key, one count).
        let now = CoarseSystemClock.now_ms();
        let d = a.engine.admit("shared", None, now).unwrap();
        let cookie = d.set_cookie.unwrap();
        let cookie = cookie.split(';').next().unwrap();
        let again = b.engine.admit("shared", Some(cookie), now).unwrap();
        assert!(again.set_cookie.is_none(), "the same engine's steady path");
        // When every configuration of a source is gone, the next one starts a new engine
        // (here with a new ephemeral key: the old ticket is refused).
        drop((a, b));
        let fresh = FilterConfig::from_bytes(
            "d",
            &json(serde_json::json!({"config": text, "room": "shared"})),
        )
        .unwrap();
        let d = fresh.engine.admit("shared", Some(cookie), now).unwrap();
        assert!(d.ticket_error.is_some(), "{d:?}");
    }

    #[test]
    fn a_changed_file_reloads_the_running_engine_or_is_refused() {
        let dir = std::env::temp_dir().join(format!("vr-envoy-reload-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("rooms.toml");
        let settings = json(serde_json::json!({"config_path": path, "room": "shop"}));
        std::fs::write(&path, ROOMS).unwrap();
        let old = FilterConfig::from_bytes("old", &settings).unwrap();
        std::fs::write(
            &path,
            ROOMS.replace("total_active_users = 2", "total_active_users = 3"),
        )
        .unwrap();
        let new = FilterConfig::from_bytes("new", &settings).unwrap();
        assert!(Arc::ptr_eq(&old.engine, &new.engine));
        assert_eq!(
            new.engine.config().rooms[0].total_active_users,
            3,
            "reloaded"
        );
        // The bucket width numbers the counters: the running engine cannot take it.
        std::fs::write(
            &path,
            format!("[settings]\nbucket_width_secs = 30\n{ROOMS}"),
        )
        .unwrap();
        match FilterConfig::from_bytes("bad", &settings) {
            Ok(_) => panic!("a layout change was taken"),
            Err(e) => assert!(e.contains("cannot take this configuration"), "{e}"),
        }
        assert_eq!(
            old.engine.config().rooms[0].total_active_users,
            3,
            "still serving"
        );
        let _ = std::fs::remove_dir_all(&dir);
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
            (
                // Longer than the room's refresh interval (20 s by default).
                json(
                    serde_json::json!({"config": ROOMS, "room": "shop", "tick_interval_ms": 30000}),
                ),
                "between 10 and 20000",
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
