//! A Cloudflare waiting room (the `result` of `GET /zones/{zone_id}/waiting_rooms/{id}`) as a
//! velvet-rope room.

use serde_json::{Map, Value};
use velvet_rope::config::{CookieConfig, OriginCommand, RouteConfig};
use velvet_rope::{QueueingMethod, RoomConfig};

use super::fields::Fields;
use super::report::Report;

/// Most `total_active_users` a velvet-rope room takes.
pub const MAX_TOTAL_ACTIVE_USERS: u64 = 1 << 20;

/// The HTTP statuses a velvet-rope waiting page may answer with.
const STATUSES: [u64; 4] = [200, 202, 429, 503];

/// A room as imported, with what the configuration has no field for.
#[derive(Debug)]
pub struct ImportedRoom {
    /// The room (without events).
    pub room: RoomConfig,
    /// Cloudflare's id of the room, if the JSON had one.
    pub id: Option<String>,
    /// The room's name as Cloudflare had it.
    pub cloudflare_name: String,
    /// Cloudflare's description of the room (no field here: kept as a comment).
    pub description: Option<String>,
}

/// A room name velvet-rope accepts: every character outside `[A-Za-z0-9_-]` becomes `-`, and
/// the name is cut after 64 characters.
pub fn room_name(cloudflare: &str) -> String {
    cloudflare
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '_' || c == '-' {
                c
            } else {
                '-'
            }
        })
        .take(64)
        .collect()
}

/// A queueing method by Cloudflare's name (the same names as here).
pub fn queueing_method(name: &str) -> Option<QueueingMethod> {
    match name {
        "fifo" => Some(QueueingMethod::Fifo),
        "random" => Some(QueueingMethod::Random),
        "passthrough" => Some(QueueingMethod::Passthrough),
        "reject" => Some(QueueingMethod::Reject),
        _ => None,
    }
}

/// Reads `queueing_method` of `f`: None when absent.
pub fn take_method(f: &mut Fields) -> Result<Option<QueueingMethod>, String> {
    match f.string("queueing_method")? {
        None => Ok(None),
        Some(m) => queueing_method(&m).map(Some).ok_or_else(|| {
            format!(
                "`{}` is `{m}`; Cloudflare's (and velvet-rope's) methods are fifo, random, \
                 passthrough and reject",
                f.path("queueing_method")
            )
        }),
    }
}

/// `total_active_users` within velvet-rope's limit: a larger figure is lowered to it, and
/// noted.
pub fn total_active_users(f: &Fields, v: u64, report: &mut Report) -> u64 {
    if v > MAX_TOTAL_ACTIVE_USERS {
        report.note(
            f.path("total_active_users"),
            Some(&v.into()),
            format!(
                "above velvet-rope's limit for one room: lowered to {MAX_TOTAL_ACTIVE_USERS} \
                 (fewer visitors are active at once)"
            ),
        );
        MAX_TOTAL_ACTIVE_USERS
    } else {
        v
    }
}

/// Maps the room object `obj`, noting in `report` what has no counterpart.
pub fn map_room(obj: Map<String, Value>, report: &mut Report) -> Result<ImportedRoom, String> {
    let mut f = Fields::new("room", obj);
    let id = f.string("id")?;
    let cloudflare_name = f.required("name", Fields::string)?;
    if cloudflare_name.is_empty() {
        return Err("`room.name` is empty".into());
    }
    let name = room_name(&cloudflare_name);
    if name != cloudflare_name {
        report.note(
            f.path("name"),
            Some(&cloudflare_name.clone().into()),
            format!(
                "room names here are 1-64 of [A-Za-z0-9_-]: named `{name}` (each other \
                 character became `-`)"
            ),
        );
    }
    let total = f.required("total_active_users", Fields::uint)?;
    let mut room = RoomConfig::new(
        &name,
        total_active_users(&f, total, report),
        f.required("new_users_per_minute", Fields::uint)?,
    );
    // Cloudflare's defaults where the JSON leaves a field out.
    room.session_duration = match f.uint("session_duration")? {
        None => 5,
        Some(m) => u32::try_from(m)
            .map_err(|_| format!("`room.session_duration` = {m} minutes is out of range"))?,
    };
    room.queueing_method = take_method(&mut f)?.unwrap_or(QueueingMethod::Fifo);
    room.queue_all = f.bool("queue_all")?.unwrap_or(false);
    room.disable_session_renewal = f.bool("disable_session_renewal")?.unwrap_or(false);
    room.json_response_enabled = f.bool("json_response_enabled")?.unwrap_or(false);
    room.suspended = f.bool("suspended")?.unwrap_or(false);
    room.queueing_status_code = status(&mut f, report)?;
    room.cookie_suffix = cookie_suffix(&mut f, report)?;
    room.cookie = cookie(&mut f, report)?;
    room.custom_page = f.string("custom_page_html")?.filter(|p| !p.is_empty());
    if let Some(lang) = f.string("default_template_language")? {
        room.default_template_language = lang;
    }
    let description = f.string("description")?.filter(|d| !d.is_empty());
    if let Some(d) = &description {
        report.note(
            f.path("description"),
            Some(&d.clone().into()),
            "rooms have no description here: kept as a comment only",
        );
    }
    room.routes = routes(&mut f)?;
    room.enabled_origin_commands = origin_commands(&mut f, report)?;
    unsupported(&mut f, report);
    // Read-only bookkeeping of Cloudflare's, nothing to configure.
    for key in [
        "created_on",
        "modified_on",
        "next_event_prequeue_start_time",
        "next_event_start_time",
    ] {
        f.take(key);
    }
    unknown(f, report);
    Ok(ImportedRoom {
        room,
        id,
        cloudflare_name,
        description,
    })
}

/// `queueing_status_code`: 200, 202, 429 and 503 are kept (Cloudflare's are 200, 202, 429);
/// anything else becomes 200.
fn status(f: &mut Fields, report: &mut Report) -> Result<u16, String> {
    let code = f.uint("queueing_status_code")?.unwrap_or(200);
    if STATUSES.contains(&code) {
        return Ok(code as u16);
    }
    report.note(
        f.path("queueing_status_code"),
        Some(&code.into()),
        "not one of velvet-rope's 200, 202, 429, 503: set to 200",
    );
    Ok(200)
}

/// `cookie_suffix`, with the characters velvet-rope refuses replaced.
fn cookie_suffix(f: &mut Fields, report: &mut Report) -> Result<String, String> {
    let Some(cf) = f.string("cookie_suffix")?.filter(|s| !s.is_empty()) else {
        return Ok(String::new());
    };
    let suffix = room_name(&cf);
    let action = if suffix == cf {
        format!(
            "kept: the cookie is `__vr_{suffix}` (Cloudflare's was `__cf_waitingroom_{cf}`), so \
             visitors' Cloudflare cookies do not carry over"
        )
    } else {
        format!(
            "suffixes here are up to 64 of [A-Za-z0-9_-]: set to `{suffix}`, so the cookie is \
             `__vr_{suffix}`"
        )
    };
    report.note(f.path("cookie_suffix"), Some(&cf.into()), action);
    Ok(suffix)
}

/// `cookie_attributes`: `samesite` (auto, lax, none, strict) and `secure` (auto, always,
/// never), both `auto` when left out.
fn cookie(f: &mut Fields, report: &mut Report) -> Result<CookieConfig, String> {
    let attrs = match f.take("cookie_attributes") {
        None => Map::new(),
        Some(Value::Object(m)) => m,
        Some(v) => {
            return Err(format!(
                "`room.cookie_attributes` must be an object, not {}",
                super::fields::show(&v)
            ))
        }
    };
    let mut a = Fields::new("room.cookie_attributes", attrs);
    let secure = secure(&mut a, report)?;
    let same_site = same_site(&mut a, report)?;
    let cookie = CookieConfig {
        // Browsers refuse SameSite=None without Secure (Cloudflare refuses the pair too).
        secure: secure || same_site == "None",
        same_site: same_site.into(),
        ..CookieConfig::default()
    };
    if cookie.secure != secure {
        report.note(
            a.path("secure"),
            Some(&"never".into()),
            "SameSite=None needs Secure (browsers refuse the cookie otherwise): set \
             `cookie.secure = true`",
        );
    }
    unknown(a, report);
    Ok(cookie)
}

/// `cookie_attributes.secure`: `always` and `never` as they are; `auto` is Secure.
fn secure(a: &mut Fields, report: &mut Report) -> Result<bool, String> {
    let value = a.string("secure")?.unwrap_or_else(|| "auto".into());
    match value.as_str() {
        "always" => Ok(true),
        "never" => Ok(false),
        "auto" => {
            report.note(
                a.path("secure"),
                Some(&value.into()),
                "Cloudflare sets Secure when the zone has Always Use HTTPS, which this JSON \
                 does not show: set `cookie.secure = true` (make it false if the site also \
                 answers over plain HTTP)",
            );
            Ok(true)
        }
        other => Err(format!(
            "`{}` is `{other}`; Cloudflare's values are auto, always and never",
            a.path("secure")
        )),
    }
}

/// `cookie_attributes.samesite`: `lax`, `strict` and `none` as they are; `auto` is `Lax`.
fn same_site(a: &mut Fields, report: &mut Report) -> Result<&'static str, String> {
    let value = a.string("samesite")?.unwrap_or_else(|| "auto".into());
    match value.as_str() {
        "lax" => Ok("Lax"),
        "strict" => Ok("Strict"),
        "none" => Ok("None"),
        "auto" => {
            report.note(
                a.path("samesite"),
                Some(&value.into()),
                "Cloudflare picks lax, or none with Always Use HTTPS: set \
                 `cookie.same_site = \"Lax\"` (make it \"None\" if the site is embedded in \
                 another site's iframe)",
            );
            Ok("Lax")
        }
        other => Err(format!(
            "`{}` is `{other}`; Cloudflare's values are auto, lax, none and strict",
            a.path("samesite")
        )),
    }
}

/// `host` and `path` (Cloudflare's default path is `/`), then `additional_routes`, as routes.
fn routes(f: &mut Fields) -> Result<Vec<RouteConfig>, String> {
    let text = |v: Option<&Value>, at: String| match v {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(s)) if s.is_empty() => Ok(None),
        Some(Value::String(s)) => Ok(Some(s.clone())),
        Some(other) => Err(format!("`{at}` is {other}, not a string")),
    };
    let mut routes = Vec::new();
    let host = f.take("host");
    let path = f.take("path");
    let host = text(host.as_ref(), f.path("host"))?;
    let path = text(path.as_ref(), f.path("path"))?;
    if host.is_some() || path.is_some() {
        routes.push(RouteConfig { host, path });
    }
    if let Some(more) = f.take("additional_routes") {
        let at = f.path("additional_routes");
        let list = match more {
            Value::Null => Vec::new(),
            Value::Array(list) => list,
            other => return Err(format!("`{at}` is {other}, not a list")),
        };
        for (i, r) in list.iter().enumerate() {
            let at = format!("{at}[{i}]");
            let Some(r) = r.as_object() else {
                return Err(format!("`{at}` is {r}, not an object"));
            };
            routes.push(RouteConfig {
                host: text(r.get("host"), format!("{at}.host"))?,
                path: text(r.get("path"), format!("{at}.path"))?,
            });
        }
    }
    Ok(routes)
}

/// `enabled_origin_commands`: `revoke` is carried over; anything else is noted.
fn origin_commands(f: &mut Fields, report: &mut Report) -> Result<Vec<OriginCommand>, String> {
    let Some(v) = f.take("enabled_origin_commands") else {
        return Ok(Vec::new());
    };
    let at = f.path("enabled_origin_commands");
    let list = match &v {
        Value::Null => return Ok(Vec::new()),
        Value::Array(list) => list,
        other => return Err(format!("`{at}` is {other}, not a list")),
    };
    let mut commands = Vec::new();
    for c in list {
        match c.as_str() {
            Some("revoke") => commands.push(OriginCommand::Revoke),
            _ => report.note(
                at.clone(),
                Some(c),
                "not an origin command velvet-rope knows (only `revoke`): not imported",
            ),
        }
    }
    Ok(commands)
}

/// The room's settings that have no counterpart here.
fn unsupported(f: &mut Fields, report: &mut Report) {
    let mode = f.take("turnstile_mode");
    let off = mode.as_ref().map_or(true, |m| m == "off");
    if let Some(m) = &mode {
        let action = if off {
            "Turnstile is off: nothing to carry over"
        } else {
            "no Turnstile bot check here: not imported (bots wait in the queue like everyone)"
        };
        report.note(f.path("turnstile_mode"), Some(m), action);
    }
    if let Some(a) = f.take("turnstile_action") {
        let action = if off {
            "acts only with Turnstile on: nothing to carry over"
        } else {
            "no Turnstile bot check here: not imported"
        };
        report.note(f.path("turnstile_action"), Some(&a), action);
    }
}

/// Notes every field left in `f`: settings this importer does not know.
pub fn unknown(f: Fields, report: &mut Report) {
    let at = f.path("");
    for (key, v) in f.rest() {
        report.note(
            format!("{at}{key}"),
            Some(&v),
            "not a setting this importer knows: not imported",
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn room(extra: Value) -> (ImportedRoom, Report) {
        let mut obj =
            json!({"name": "shop", "total_active_users": 300, "new_users_per_minute": 200});
        obj.as_object_mut()
            .unwrap()
            .extend(extra.as_object().unwrap().clone());
        let mut report = Report::default();
        let r = map_room(obj.as_object().unwrap().clone(), &mut report).unwrap();
        (r, report)
    }

    #[test]
    fn names_keep_allowed_characters_and_lose_the_rest() {
        assert_eq!(room_name("Black Friday: shoes"), "Black-Friday--shoes");
        assert_eq!(room_name("ok_name-1"), "ok_name-1");
        assert_eq!(room_name("Äpfel"), "-pfel");
        assert_eq!(room_name(&"x".repeat(70)).len(), 64);
    }

    #[test]
    fn cloudflare_defaults_fill_what_the_json_leaves_out() {
        let (r, report) = room(json!({}));
        assert_eq!(r.room.session_duration, 5);
        assert_eq!(r.room.queueing_method, QueueingMethod::Fifo);
        assert!(
            !r.room.json_response_enabled,
            "Cloudflare's default is false"
        );
        assert_eq!(r.room.queueing_status_code, 200);
        assert_eq!(r.room.default_template_language, "en-US");
        assert!(r.room.cookie.secure);
        assert_eq!(r.room.cookie.same_site, "Lax");
        // The two `auto` cookie attributes are the only notes.
        let fields: Vec<&str> = report.notes.iter().map(|n| n.field.as_str()).collect();
        assert_eq!(
            fields,
            [
                "room.cookie_attributes.secure",
                "room.cookie_attributes.samesite"
            ]
        );
    }

    #[test]
    fn cookie_attributes_map_one_to_one_and_none_forces_secure() {
        for (samesite, secure, want_site, want_secure) in [
            ("lax", "never", "Lax", false),
            ("strict", "always", "Strict", true),
            ("none", "always", "None", true),
            ("none", "never", "None", true),
        ] {
            let (r, _) =
                room(json!({"cookie_attributes": {"samesite": samesite, "secure": secure}}));
            assert_eq!(r.room.cookie.same_site, want_site, "{samesite}/{secure}");
            assert_eq!(r.room.cookie.secure, want_secure, "{samesite}/{secure}");
        }
        let mut report = Report::default();
        let bad = json!({"name": "a", "total_active_users": 1, "new_users_per_minute": 1,
                         "cookie_attributes": {"samesite": "sometimes"}});
        let err = map_room(bad.as_object().unwrap().clone(), &mut report).unwrap_err();
        assert!(err.contains("room.cookie_attributes.samesite"), "{err}");
    }

    #[test]
    fn big_rooms_are_lowered_to_the_limit_and_odd_statuses_to_200() {
        let (r, report) =
            room(json!({"total_active_users": 5_000_000, "queueing_status_code": 418}));
        assert_eq!(r.room.total_active_users, MAX_TOTAL_ACTIVE_USERS);
        assert_eq!(r.room.queueing_status_code, 200);
        assert!(report
            .notes
            .iter()
            .any(|n| n.field == "room.total_active_users"));
        assert!(report
            .notes
            .iter()
            .any(|n| n.field == "room.queueing_status_code"));
    }
}
