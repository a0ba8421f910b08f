//! Cloudflare waiting-room events (the `result` of
//! `GET /zones/{zone_id}/waiting_rooms/{id}/events`) as `[[rooms.events]]`.

use serde_json::{Map, Value};
use velvet_rope::config::{EventConfig, Instant};

use super::fields::Fields;
use super::report::Report;
use super::room::{take_method, total_active_users, unknown};

/// Longest event name here, in characters.
const MAX_NAME: usize = 64;

/// Maps each event of `items` (Cloudflare's list, in its order), noting in `report` what has no
/// counterpart.
pub fn map_events(items: Vec<Value>, report: &mut Report) -> Result<Vec<EventConfig>, String> {
    items
        .into_iter()
        .enumerate()
        .map(|(i, item)| match item {
            Value::Object(obj) => map_event(Fields::new(format!("events[{i}]"), obj), report),
            other => Err(format!(
                "`events[{i}]` must be an event object, not {}",
                super::fields::show(&other)
            )),
        })
        .collect()
}

/// An event name velvet-rope accepts: control characters become `-`, cut after 64 characters.
pub fn event_name(cloudflare: &str) -> String {
    cloudflare
        .chars()
        .map(|c| if c.is_control() { '-' } else { c })
        .take(MAX_NAME)
        .collect()
}

fn instant(f: &mut Fields, key: &str) -> Result<Option<Instant>, String> {
    match f.string(key)? {
        None => Ok(None),
        Some(text) => Instant::parse(&text)
            .map(Some)
            .map_err(|e| format!("`{}`: {e}", f.path(key))),
    }
}

fn map_event(mut f: Fields, report: &mut Report) -> Result<EventConfig, String> {
    f.take("id");
    f.take("created_on");
    f.take("modified_on");
    let cloudflare_name = f.required("name", Fields::string)?;
    if cloudflare_name.is_empty() {
        return Err(format!("`{}` is empty", f.path("name")));
    }
    let name = event_name(&cloudflare_name);
    if name != cloudflare_name {
        report.note(
            f.path("name"),
            Some(&cloudflare_name.clone().into()),
            format!("event names here are 1-64 characters, none a control character: `{name}`"),
        );
    }
    let total = f
        .uint("total_active_users")?
        .map(|v| total_active_users(&f, v, report));
    let session_duration = match f.uint("session_duration")? {
        None => None,
        Some(m) => Some(u32::try_from(m).map_err(|_| {
            format!(
                "`{}` = {m} minutes is out of range",
                f.path("session_duration")
            )
        })?),
    };
    let event = EventConfig {
        name,
        description: f.string("description")?.filter(|d| !d.is_empty()),
        prequeue_start: instant(&mut f, "prequeue_start_time")?,
        event_start: f.required("event_start_time", instant)?,
        event_end: f.required("event_end_time", instant)?,
        shuffle_at_event_start: f.bool("shuffle_at_event_start")?.unwrap_or(false),
        suspended: f.bool("suspended")?.unwrap_or(false),
        total_active_users: total,
        new_users_per_minute: f.uint("new_users_per_minute")?,
        session_duration,
        disable_session_renewal: f.bool("disable_session_renewal")?,
        queueing_method: take_method(&mut f)?,
        // Cloudflare's `null` inherits the room's page; an empty page is no page either.
        custom_page: f.string("custom_page_html")?.filter(|p| !p.is_empty()),
        custom_page_file: None,
    };
    for key in ["turnstile_mode", "turnstile_action"] {
        if let Some(v) = f.take(key) {
            report.note(
                f.path(key),
                Some(&v),
                "no Turnstile bot check here: not imported",
            );
        }
    }
    unknown(f, report);
    Ok(event)
}

/// `total_count` of a list response's `result_info`, if the response has one.
pub fn total_count(envelope: &Map<String, Value>) -> Option<u64> {
    envelope.get("result_info")?.get("total_count")?.as_u64()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;
    use velvet_rope::QueueingMethod;

    #[test]
    fn nulls_inherit_and_times_are_read_with_their_offset() {
        let mut report = Report::default();
        let events = map_events(
            vec![json!({
                "name": "drop",
                "event_start_time": "2026-12-01T11:00:00+01:00",
                "event_end_time": "2026-12-01T11:30:00.000Z",
                "prequeue_start_time": null,
                "queueing_method": null,
                "total_active_users": null,
                "custom_page_html": null,
                "suspended": false
            })],
            &mut report,
        )
        .unwrap();
        let e = &events[0];
        assert_eq!(e.event_start.to_rfc3339(), "2026-12-01T10:00:00Z");
        assert_eq!(e.event_end.to_rfc3339(), "2026-12-01T11:30:00Z");
        assert_eq!(e.prequeue_start, None);
        assert_eq!(e.queueing_method, None);
        assert_eq!(e.total_active_users, None);
        assert_eq!(e.custom_page, None);
        assert!(report.notes.is_empty(), "{:?}", report.notes);
    }

    #[test]
    fn bad_times_and_methods_name_the_event() {
        let mut report = Report::default();
        let err = map_events(
            vec![json!({"name": "a", "event_start_time": "tomorrow", "event_end_time": "x"})],
            &mut report,
        )
        .unwrap_err();
        assert!(err.contains("`events[0].event_start_time`"), "{err}");
        let err = map_events(
            vec![
                json!({"name": "a", "event_start_time": "2026-01-01T00:00:00Z",
                        "event_end_time": "2026-01-01T01:00:00Z", "queueing_method": "lifo"}),
            ],
            &mut report,
        )
        .unwrap_err();
        assert!(
            err.contains("`events[0].queueing_method` is `lifo`"),
            "{err}"
        );
        let ok = map_events(
            vec![
                json!({"name": "a", "event_start_time": "2026-01-01T00:00:00Z",
                        "event_end_time": "2026-01-01T01:00:00Z", "queueing_method": "reject"}),
            ],
            &mut report,
        )
        .unwrap();
        assert_eq!(ok[0].queueing_method, Some(QueueingMethod::Reject));
    }
}
