//! `velvet-rope import-cloudflare`: a Cloudflare waiting room, and its events, as the
//! Cloudflare API returns them, converted into a velvet-rope configuration.
//!
//! The room is the `result` of `GET /zones/{zone_id}/waiting_rooms/{id}` (the response as it
//! is, or its `result` alone); the events are the `result` of
//! `GET /zones/{zone_id}/waiting_rooms/{id}/events` (likewise, one file a page). Settings with
//! no counterpart here, and the choices made for the others, are printed to stderr and
//! written as comments at the top of the output. The output is loaded before it is written,
//! so what is written loads.

use std::io::Read;

use serde_json::{Map, Value};
use velvet_rope::Config;

mod event;
mod fields;
mod render;
mod report;
mod room;

use report::Report;

/// Arguments of `import-cloudflare`.
#[derive(Debug, Clone, clap::Args)]
pub struct ImportArgs {
    /// The waiting room as Cloudflare's API returns it (`GET
    /// /zones/{zone_id}/waiting_rooms/{id}`): the whole response or its `result`; `-` reads
    /// stdin.
    pub room: String,
    /// The room's events as Cloudflare's API returns them (`GET .../waiting_rooms/{id}/events`):
    /// the whole response or its `result` array. Give it once a page.
    #[arg(long)]
    pub events: Vec<String>,
    /// Write the configuration here rather than to stdout.
    #[arg(short = 'o', long)]
    pub output: Option<String>,
}

/// Runs the import; `Err` is a one-line message for stderr (exit 2).
pub fn run(args: &ImportArgs) -> Result<(), String> {
    let (text, notes) = convert(args)?;
    match &args.output {
        Some(path) => {
            std::fs::write(path, &text).map_err(|e| format!("cannot write `{path}`: {e}"))?
        }
        None => print!("{text}"),
    }
    let to = args.output.as_deref().unwrap_or("stdout");
    eprintln!("import-cloudflare: wrote the configuration to {to}");
    if notes.is_empty() {
        eprintln!("import-cloudflare: every Cloudflare setting was carried over as it was");
    } else {
        eprintln!(
            "import-cloudflare: Cloudflare settings without a counterpart here, or carried over \
             with a choice made:"
        );
        for n in &notes {
            eprintln!("  - {}", n.line());
        }
    }
    for line in render::keygen_hint(args.output.as_deref()) {
        eprintln!("import-cloudflare: {line}");
    }
    Ok(())
}

/// The configuration text and the notes, checked to load.
pub fn convert(args: &ImportArgs) -> Result<(String, Vec<report::Note>), String> {
    let mut report = Report::default();
    let room_json = payload(&args.room, read_json(&args.room)?)?.0;
    let room_obj = single_room(&args.room, room_json)?;
    let mut imported = room::map_room(room_obj, &mut report)?;
    let mut items = Vec::new();
    let mut announced = 0;
    for path in &args.events {
        let (json, total) = payload(path, read_json(path)?)?;
        match json {
            Value::Array(list) => items.extend(list),
            obj @ Value::Object(_) => items.push(obj),
            other => {
                return Err(format!(
                    "`{path}` holds {}, not a list of Cloudflare waiting-room events",
                    kind(&other)
                ))
            }
        }
        announced = announced.max(total.unwrap_or(0));
    }
    if announced > items.len() as u64 {
        report.note(
            "events".into(),
            None,
            format!(
                "Cloudflare lists {announced} events and the files hold {}: give each page \
                 with its own --events (or ask for more per_page)",
                items.len()
            ),
        );
    }
    imported.room.events = event::map_events(items, &mut report)?;
    let header = render::Header {
        source: &args.room,
        room_id: imported.id.as_deref(),
        cloudflare_name: &imported.cloudflare_name,
        description: imported.description.as_deref(),
        output: args.output.as_deref(),
    };
    let text = render::render(&imported.room, &header, &report.notes);
    let loaded = Config::from_toml(&text)
        .map_err(|e| format!("the converted configuration does not load: {e}"))?;
    if loaded.rooms.first() != Some(&imported.room) {
        return Err("internal error: the written room reads back differently".into());
    }
    Ok((text, report.notes))
}

fn read_json(path: &str) -> Result<Value, String> {
    let text = if path == "-" {
        let mut s = String::new();
        std::io::stdin()
            .read_to_string(&mut s)
            .map_err(|e| format!("cannot read stdin: {e}"))?;
        s
    } else {
        std::fs::read_to_string(path).map_err(|e| format!("cannot read `{path}`: {e}"))?
    };
    serde_json::from_str(&text).map_err(|e| format!("`{path}` is not valid JSON: {e}"))
}

/// What a JSON value is, for messages.
fn kind(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

/// The `result` of a Cloudflare API response, with its `result_info.total_count`; a value
/// that is not a response is its own payload.
fn payload(path: &str, v: Value) -> Result<(Value, Option<u64>), String> {
    let Value::Object(mut obj) = v else {
        return Ok((v, None));
    };
    if !obj.contains_key("result") {
        return Ok((Value::Object(obj), None));
    }
    if obj.get("success") == Some(&Value::Bool(false)) {
        return Err(format!(
            "`{path}` is a failed Cloudflare API response: {}",
            api_errors(&obj)
        ));
    }
    let total = event::total_count(&obj);
    let result = obj.remove("result").unwrap_or(Value::Null);
    Ok((result, total))
}

/// The `errors` of a failed response, on one line.
fn api_errors(obj: &Map<String, Value>) -> String {
    let list: Vec<String> = obj
        .get("errors")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .map(
            |e| match (e.get("code"), e.get("message").and_then(Value::as_str)) {
                (Some(code), Some(m)) => format!("{m} (code {code})"),
                (None, Some(m)) => m.to_owned(),
                _ => fields::show(e),
            },
        )
        .collect();
    if list.is_empty() {
        "no errors listed".into()
    } else {
        list.join("; ")
    }
}

/// The one room object of the room file (a list response of one room will do).
fn single_room(path: &str, v: Value) -> Result<Map<String, Value>, String> {
    match v {
        Value::Object(obj) => Ok(obj),
        Value::Array(mut list) if list.len() == 1 => match list.pop() {
            Some(Value::Object(obj)) => Ok(obj),
            _ => Err(format!(
                "`{path}` holds a list whose item is not a room object"
            )),
        },
        Value::Array(list) => {
            let names: Vec<String> = list
                .iter()
                .map(|r| r.get("name").map_or("?".into(), fields::show))
                .collect();
            Err(format!(
                "`{path}` lists {} waiting rooms ({}); give one, e.g. `jq '.result[0]' {path}`",
                list.len(),
                names.join(", ")
            ))
        }
        other => Err(format!(
            "`{path}` holds {}, not a Cloudflare waiting room object",
            kind(&other)
        )),
    }
}
