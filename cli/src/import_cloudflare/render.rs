//! The imported room as TOML text, the report at its top as comments.

use std::fmt::Display;

use velvet_rope::config::EventConfig;
use velvet_rope::RoomConfig;

use super::report::Note;

/// What the comments at the top of the output say besides the notes.
pub struct Header<'a> {
    /// Where the room's JSON came from.
    pub source: &'a str,
    /// Cloudflare's id of the room.
    pub room_id: Option<&'a str>,
    /// The room's name as Cloudflare had it.
    pub cloudflare_name: &'a str,
    /// Cloudflare's description of the room.
    pub description: Option<&'a str>,
    /// The output file, for the `keygen` hint (None: stdout).
    pub output: Option<&'a str>,
}

/// A TOML string (basic or multi-line, as the `toml` crate picks) holding `s`.
fn quoted(s: &str) -> String {
    toml::Value::String(s.to_owned()).to_string()
}

/// `s` quoted on one line, as JSON writes it (for comments).
fn one_line(s: &str) -> String {
    serde_json::Value::String(s.to_owned()).to_string()
}

/// TOML text being written.
#[derive(Default)]
struct Out(String);

impl Out {
    /// A comment line; control characters become spaces so it stays one line.
    fn comment(&mut self, text: &str) {
        self.0.push('#');
        if !text.is_empty() {
            self.0.push(' ');
            self.0
                .extend(text.chars().map(|c| if c.is_control() { ' ' } else { c }));
        }
        self.0.push('\n');
    }

    /// A line as it is.
    fn line(&mut self, text: &str) {
        self.0.push_str(text);
        self.0.push('\n');
    }

    /// `key = value`, the value written by `Display` (numbers, booleans).
    fn value(&mut self, key: &str, v: impl Display) {
        self.line(&format!("{key} = {v}"));
    }

    /// `key = "text"`.
    fn string(&mut self, key: &str, text: &str) {
        self.value(key, quoted(text));
    }
}

/// The hint on ticket keys, one line a string.
pub fn keygen_hint(output: Option<&str>) -> [String; 2] {
    [
        "Ticket keys are not in Cloudflare's JSON: without [[tickets.keys]] each engine makes an \
         ephemeral key, and tickets neither survive a restart nor verify in another process."
            .into(),
        format!(
            "Add a key with:  velvet-rope keygen >> {}",
            output.unwrap_or("THIS_FILE")
        ),
    ]
}

/// The whole output: header comments, then the room and its events.
pub fn render(room: &RoomConfig, header: &Header, notes: &[Note]) -> String {
    let mut out = Out::default();
    out.comment(
        "velvet-rope configuration imported from a Cloudflare waiting room by \
         `velvet-rope import-cloudflare`.",
    );
    let id = header
        .room_id
        .map_or(String::new(), |i| format!(", id {i}"));
    out.comment(&format!(
        "Source: {} (Cloudflare room {}{id}).",
        header.source,
        one_line(header.cloudflare_name)
    ));
    if let Some(d) = header.description {
        out.comment(&format!("Cloudflare's description: {}", one_line(d)));
    }
    out.comment("");
    for line in keygen_hint(header.output) {
        out.comment(&line);
    }
    out.comment("");
    if notes.is_empty() {
        out.comment("Every Cloudflare setting was carried over as it was.");
    } else {
        out.comment(
            "Cloudflare settings without a counterpart here, or carried over with a choice made:",
        );
        for n in notes {
            out.comment(&format!("  - {}", n.line()));
        }
    }
    out.line("");
    render_room(&mut out, room);
    out.0
}

fn render_room(out: &mut Out, r: &RoomConfig) {
    out.line("[[rooms]]");
    out.string("name", &r.name);
    out.value("total_active_users", r.total_active_users);
    out.value("new_users_per_minute", r.new_users_per_minute);
    out.value("session_duration", r.session_duration);
    out.string("queueing_method", r.queueing_method.as_str());
    out.value("queue_all", r.queue_all);
    out.value("disable_session_renewal", r.disable_session_renewal);
    out.value("queueing_status_code", r.queueing_status_code);
    out.value("json_response_enabled", r.json_response_enabled);
    out.string("cookie_suffix", &r.cookie_suffix);
    out.value("suspended", r.suspended);
    out.string("default_template_language", &r.default_template_language);
    out.comment("refresh_interval: Cloudflare has no such setting; velvet-rope's default applies.");
    if let Some(p) = &r.custom_page {
        out.string("custom_page", p);
    }
    if !r.routes.is_empty() {
        out.line("routes = [");
        for route in &r.routes {
            let mut parts = Vec::new();
            if let Some(h) = &route.host {
                parts.push(format!("host = {}", quoted(h)));
            }
            if let Some(p) = &route.path {
                parts.push(format!("path = {}", quoted(p)));
            }
            out.line(&format!("    {{ {} }},", parts.join(", ")));
        }
        out.line("]");
    }
    if r.revocable() {
        out.comment(
            "The origin ends a visitor's session by answering `Velvet-Rope-Command: revoke`.",
        );
        out.line("enabled_origin_commands = [\"revoke\"]");
    }
    let c = &r.cookie;
    out.line("");
    out.line("[rooms.cookie]");
    out.string("path", &c.path);
    if let Some(d) = &c.domain {
        out.string("domain", d);
    }
    out.value("secure", c.secure);
    out.value("http_only", c.http_only);
    out.string("same_site", &c.same_site);
    for e in &r.events {
        render_event(out, e);
    }
}

fn render_event(out: &mut Out, e: &EventConfig) {
    out.line("");
    out.line("[[rooms.events]]");
    out.string("name", &e.name);
    if let Some(d) = &e.description {
        out.string("description", d);
    }
    if let Some(p) = e.prequeue_start {
        out.string("prequeue_start", &p.to_rfc3339());
    }
    out.string("event_start", &e.event_start.to_rfc3339());
    out.string("event_end", &e.event_end.to_rfc3339());
    out.value("shuffle_at_event_start", e.shuffle_at_event_start);
    out.value("suspended", e.suspended);
    if let Some(v) = e.total_active_users {
        out.value("total_active_users", v);
    }
    if let Some(v) = e.new_users_per_minute {
        out.value("new_users_per_minute", v);
    }
    if let Some(v) = e.session_duration {
        out.value("session_duration", v);
    }
    if let Some(v) = e.disable_session_renewal {
        out.value("disable_session_renewal", v);
    }
    if let Some(m) = e.queueing_method {
        out.string("queueing_method", m.as_str());
    }
    if let Some(p) = &e.custom_page {
        out.string("custom_page", p);
    }
}
