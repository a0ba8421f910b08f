//! `velvet-rope import-cloudflare`, run as a user runs it, on Cloudflare API responses shaped
//! as Cloudflare documents them (`tests/data/cloudflare_*.json`, see `tests/data/README.md`).

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use serde_json::{json, Value};
use velvet_rope::config::Instant;
use velvet_rope::{Config, QueueingMethod};

fn data(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/data")
        .join(name)
}

/// A fresh directory of this test's own.
fn scratch(test: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("vr-import-{}-{test}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

fn write_json(dir: &Path, name: &str, v: &Value) -> String {
    let path = dir.join(name);
    std::fs::write(&path, serde_json::to_string_pretty(v).unwrap()).unwrap();
    path.to_str().unwrap().to_owned()
}

fn fixture(name: &str) -> Value {
    serde_json::from_str(&std::fs::read_to_string(data(name)).unwrap()).unwrap()
}

fn velvet(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_velvet-rope"))
        .args(args)
        .output()
        .expect("run velvet-rope")
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

/// Imports, expecting success; the configuration printed on stdout and the report.
fn import(args: &[&str]) -> (String, String) {
    let mut all = vec!["import-cloudflare"];
    all.extend_from_slice(args);
    let o = velvet(&all);
    assert!(o.status.success(), "{args:?} failed:\n{}", stderr(&o));
    (stdout(&o), stderr(&o))
}

/// Imports, expecting exit code 2; the message.
fn refused(args: &[&str]) -> String {
    let mut all = vec!["import-cloudflare"];
    all.extend_from_slice(args);
    let o = velvet(&all);
    assert_eq!(o.status.code(), Some(2), "{args:?}:\n{}", stderr(&o));
    assert!(o.stdout.is_empty(), "nothing is written on failure");
    let err = stderr(&o);
    assert!(err.starts_with("velvet-rope: "), "{err}");
    err
}

fn at(s: &str) -> Instant {
    Instant::parse(s).unwrap()
}

#[test]
fn a_full_room_and_its_events_convert_field_by_field() {
    let dir = scratch("full");
    let out = dir.join("room.toml");
    let room = data("cloudflare_room.json");
    let events = data("cloudflare_events.json");
    let (printed, report) = import(&[
        room.to_str().unwrap(),
        "--events",
        events.to_str().unwrap(),
        "-o",
        out.to_str().unwrap(),
    ]);
    assert!(printed.is_empty(), "-o writes the file, not stdout");
    let text = std::fs::read_to_string(&out).unwrap();
    let cfg = Config::from_toml(&text).unwrap();
    assert_eq!(cfg.rooms.len(), 1);
    assert!(cfg.tickets.keys.is_empty());
    let r = &cfg.rooms[0];
    assert_eq!(r.name, "production_webinar");
    assert_eq!(r.total_active_users, 200);
    assert_eq!(r.new_users_per_minute, 200);
    assert_eq!(r.session_duration, 1);
    assert_eq!(r.queueing_method, QueueingMethod::Fifo);
    assert!(r.queue_all);
    assert!(!r.disable_session_renewal);
    assert_eq!(r.queueing_status_code, 202);
    assert!(!r.json_response_enabled);
    assert_eq!(r.cookie_suffix, "abcd");
    assert_eq!(r.cookie_name(), "__vr_abcd");
    assert_eq!(r.refresh_interval, 20, "Cloudflare has none: our default");
    assert!(r.suspended);
    assert_eq!(r.default_template_language, "es-ES");
    assert_eq!(
        r.custom_page.as_deref(),
        Some(
            "{{#waitTimeKnown}} {{waitTime}} mins {{/waitTimeKnown}} {{^waitTimeKnown}} Queue \
             all enabled {{/waitTimeKnown}}"
        )
    );
    assert_eq!(r.custom_page_file, None);
    // `auto` for both cookie attributes: Secure, SameSite=Lax.
    assert_eq!(r.cookie.path, "/");
    assert_eq!(r.cookie.domain, None);
    assert!(r.cookie.secure);
    assert!(r.cookie.http_only);
    assert_eq!(r.cookie.same_site, "Lax");
    // The room's host and path and its additional route are its routes; revoke is enabled.
    let routes: Vec<(Option<&str>, Option<&str>)> = r
        .routes
        .iter()
        .map(|r| (r.host.as_deref(), r.path.as_deref()))
        .collect();
    assert_eq!(
        routes,
        [
            (Some("shop.example.com"), Some("/shop/checkout")),
            (Some("shop2.example.com"), Some("/shop2/checkout"))
        ]
    );
    assert!(r.revocable());

    assert_eq!(r.events.len(), 2);
    let e = &r.events[0];
    assert_eq!(e.name, "production_webinar_event");
    assert_eq!(
        e.description.as_deref(),
        Some("Production event - DO NOT MODIFY")
    );
    assert_eq!(e.prequeue_start, Some(at("2021-09-28T15:00:00Z")));
    assert_eq!(e.event_start, at("2021-09-28T15:30:00Z"));
    assert_eq!(e.event_end, at("2021-09-28T17:00:00Z"));
    assert!(e.shuffle_at_event_start);
    assert!(e.suspended);
    assert_eq!(e.total_active_users, Some(200));
    assert_eq!(e.new_users_per_minute, Some(200));
    assert_eq!(e.session_duration, Some(1));
    assert_eq!(e.disable_session_renewal, Some(true));
    assert_eq!(e.queueing_method, Some(QueueingMethod::Random));
    assert_eq!(
        e.custom_page.as_deref(),
        Some(
            "{{#waitTimeKnown}} {{waitTime}} mins {{/waitTimeKnown}} {{^waitTimeKnown}} Event \
             is prequeueing / Queue all enabled {{/waitTimeKnown}}"
        )
    );
    // The second event's nulls inherit the room's settings; its empty description is none.
    let e = &r.events[1];
    assert_eq!(e.name, "evening_restock");
    assert_eq!(e.description, None);
    assert_eq!(e.prequeue_start, None);
    assert_eq!(e.event_start, at("2021-09-29T18:00:00Z"));
    assert_eq!(e.event_end, at("2021-09-29T19:30:00Z"));
    assert!(!e.shuffle_at_event_start);
    assert!(!e.suspended);
    assert_eq!(e.total_active_users, Some(1000));
    assert_eq!(e.new_users_per_minute, Some(500));
    assert_eq!(e.session_duration, None);
    assert_eq!(e.disable_session_renewal, None);
    assert_eq!(e.queueing_method, None);
    assert_eq!(e.custom_page, None);

    // What has no counterpart, with its value and what was done, on stderr and in the file.
    let comments: String = text
        .lines()
        .take_while(|l| l.starts_with('#') || l.is_empty())
        .collect::<Vec<_>>()
        .join("\n");
    for needle in [
        "`room.description` = \"Production - DO NOT MODIFY\"",
        "`room.turnstile_mode` = \"off\"",
        "`room.turnstile_action` = \"log\"",
        "`room.cookie_attributes.secure` = \"auto\"",
        "set `cookie.secure = true`",
        "`room.cookie_attributes.samesite` = \"auto\"",
        "set `cookie.same_site = \"Lax\"`",
        "`room.cookie_suffix` = \"abcd\"",
        &format!("velvet-rope keygen >> {}", out.display()),
    ] {
        assert!(
            report.contains(needle),
            "stderr lacks {needle:?}:\n{report}"
        );
        assert!(
            comments.contains(needle),
            "comments lack {needle:?}:\n{comments}"
        );
    }
    // Bookkeeping fields are not settings and are not reported.
    for quiet in ["created_on", "modified_on", "next_event", "`events["] {
        assert!(!report.contains(quiet), "{quiet} reported:\n{report}");
    }
}

#[test]
fn bare_objects_and_envelopes_give_the_same_configuration() {
    let dir = scratch("forms");
    let room = fixture("cloudflare_room.json");
    let events = fixture("cloudflare_events.json");
    let enveloped = (
        write_json(&dir, "room-envelope.json", &room),
        write_json(&dir, "events-envelope.json", &events),
    );
    let bare = (
        write_json(&dir, "room.json", &room["result"]),
        write_json(&dir, "events.json", &events["result"]),
    );
    // A list response holding the one room, and one event per file (the response of
    // GET .../events/{id}), are read too.
    let listed = write_json(
        &dir,
        "rooms.json",
        &json!({"success": true, "errors": [], "messages": [], "result": [room["result"]]}),
    );
    let one = write_json(
        &dir,
        "event0.json",
        &json!({"success": true, "result": events["result"][0]}),
    );
    let two = write_json(&dir, "event1.json", &events["result"][1]);

    let load = |args: &[&str]| Config::from_toml(&import(args).0).unwrap();
    let want = load(&[&enveloped.0, "--events", &enveloped.1]);
    assert_eq!(want.rooms[0].events.len(), 2);
    assert_eq!(load(&[&bare.0, "--events", &bare.1]), want);
    assert_eq!(load(&[&listed, "--events", &one, "--events", &two]), want);
    // Without events: the same room, no events.
    let alone = load(&[&bare.0]);
    assert!(alone.rooms[0].events.is_empty());
    let mut without = want.rooms[0].clone();
    without.events.clear();
    assert_eq!(alone.rooms[0], without);
}

#[test]
fn a_name_with_spaces_and_unknown_fields_are_reported() {
    let dir = scratch("names");
    let mut room = fixture("cloudflare_room.json")["result"].clone();
    room["name"] = json!("Black Friday sale!");
    room["cookie_suffix"] = json!("bf 2026");
    room["queueing_status_code"] = json!(418);
    room["waiting_room_tier"] = json!("gold");
    let mut events = fixture("cloudflare_events.json");
    events["result"][1]["name"] = json!("restock\tnight");
    events["result"][1]["launch_codes"] = json!([1, 2]);
    let room = write_json(&dir, "room.json", &room);
    let events = write_json(&dir, "events.json", &events);
    let (text, report) = import(&[&room, "--events", &events]);
    let cfg = Config::from_toml(&text).unwrap();
    let r = &cfg.rooms[0];
    assert_eq!(r.name, "Black-Friday-sale-");
    assert_eq!(r.cookie_suffix, "bf-2026");
    assert_eq!(r.queueing_status_code, 200);
    assert_eq!(r.events[1].name, "restock-night");
    for needle in [
        "`room.name` = \"Black Friday sale!\": room names here are 1-64 of [A-Za-z0-9_-]: named \
         `Black-Friday-sale-`",
        "`room.cookie_suffix` = \"bf 2026\"",
        "`room.queueing_status_code` = 418: not one of velvet-rope's 200, 202, 429, 503: set to 200",
        "`room.waiting_room_tier` = \"gold\": not a setting this importer knows: not imported",
        "`events[1].name` = \"restock\\tnight\"",
        "`events[1].launch_codes` = [1,2]: not a setting this importer knows",
    ] {
        assert!(report.contains(needle), "stderr lacks {needle:?}:\n{report}");
        assert!(text.contains(needle), "output lacks {needle:?}:\n{text}");
    }
}

#[test]
fn text_from_cloudflare_cannot_break_out_of_a_comment() {
    let dir = scratch("inject");
    let mut room = fixture("cloudflare_room.json")["result"].clone();
    room["description"] = json!("line one\n[[rooms]]\nname = \"evil\"\r\n\u{7f}");
    room["path"] = json!("/a\" }, ] [settings] shards = 999 x = [ { \"");
    room["custom_page_html"] = json!("<p>'''\"\"\"\n{{waitTime}}</p>\n");
    let path = write_json(&dir, "room.json", &room);
    let (text, _) = import(&[&path]);
    let cfg = Config::from_toml(&text).unwrap();
    assert_eq!(cfg.rooms.len(), 1);
    assert_eq!(cfg.settings.shards, 0);
    assert_eq!(
        cfg.rooms[0].routes[0].path.as_deref(),
        Some("/a\" }, ] [settings] shards = 999 x = [ { \"")
    );
    // A host that is not a host name is refused, naming the route.
    room["host"] = json!("a.example\n[settings]\nshards = 999");
    let err = refused(&[&write_json(&dir, "host.json", &room)]);
    assert!(err.contains("`rooms[0].routes[0].host`"), "{err}");
    assert_eq!(
        cfg.rooms[0].custom_page.as_deref(),
        Some("<p>'''\"\"\"\n{{waitTime}}</p>\n")
    );
}

#[test]
fn bad_input_is_refused_with_exit_code_2() {
    let dir = scratch("bad");
    let broken = dir.join("broken.json");
    std::fs::write(
        &broken,
        "{\"name\": \"shop\", \"total_active_users\": 200,,}",
    )
    .unwrap();
    let err = refused(&[broken.to_str().unwrap()]);
    assert!(
        err.contains("is not valid JSON") && err.contains("line 1 column"),
        "{err}"
    );

    let err = refused(&[dir.join("missing.json").to_str().unwrap()]);
    assert!(err.contains("cannot read"), "{err}");

    let failed = write_json(
        &dir,
        "failed.json",
        &json!({
            "success": false,
            "errors": [{"code": 1000, "message": "Invalid API Token"}],
            "messages": [],
            "result": null
        }),
    );
    let err = refused(&[&failed]);
    assert!(
        err.contains("failed Cloudflare API response: Invalid API Token (code 1000)"),
        "{err}"
    );

    let mut room = fixture("cloudflare_room.json")["result"].clone();
    room.as_object_mut().unwrap().remove("total_active_users");
    let err = refused(&[&write_json(&dir, "no-total.json", &room)]);
    assert!(
        err.contains("`room.total_active_users` is missing"),
        "{err}"
    );

    room["total_active_users"] = json!("lots");
    let err = refused(&[&write_json(&dir, "text-total.json", &room)]);
    assert!(
        err.contains("`room.total_active_users` must be a whole number"),
        "{err}"
    );

    let two = write_json(
        &dir,
        "two.json",
        &json!({"result": [{"name": "a"}, {"name": "b"}], "success": true}),
    );
    let err = refused(&[&two]);
    assert!(
        err.contains("lists 2 waiting rooms (\"a\", \"b\")"),
        "{err}"
    );

    // Events that overlap load nowhere: the check names the events.
    let room = data("cloudflare_room.json");
    let mut events = fixture("cloudflare_events.json");
    events["result"][1]["event_start_time"] = json!("2021-09-28T16:00:00.000Z");
    let overlap = write_json(&dir, "overlap.json", &events);
    let err = refused(&[room.to_str().unwrap(), "--events", &overlap]);
    assert!(
        err.contains("does not load") && err.contains("overlap"),
        "{err}"
    );

    let mut events = fixture("cloudflare_events.json");
    events["result"][0]["event_end_time"] = json!("half past five");
    let bad_time = write_json(&dir, "bad-time.json", &events);
    let err = refused(&[room.to_str().unwrap(), "--events", &bad_time]);
    assert!(err.contains("`events[0].event_end_time`"), "{err}");
}

#[test]
fn a_partial_page_of_events_is_reported() {
    let dir = scratch("pages");
    let mut events = fixture("cloudflare_events.json");
    events["result_info"]["total_count"] = json!(7);
    let events = write_json(&dir, "page1.json", &events);
    let room = data("cloudflare_room.json");
    let (_, report) = import(&[room.to_str().unwrap(), "--events", &events]);
    assert!(
        report.contains("Cloudflare lists 7 events and the files hold 2"),
        "{report}"
    );
}

#[test]
fn check_config_accepts_the_output_and_a_key_appended_by_keygen() {
    let dir = scratch("check");
    let out = dir.join("room.toml");
    let room = data("cloudflare_room.json");
    let events = data("cloudflare_events.json");
    import(&[
        room.to_str().unwrap(),
        "--events",
        events.to_str().unwrap(),
        "-o",
        out.to_str().unwrap(),
    ]);
    let o = velvet(&["check-config", out.to_str().unwrap()]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(stdout(&o).contains("ok: 1 room(s)"), "{}", stdout(&o));
    assert!(stdout(&o).contains("production_webinar"), "{}", stdout(&o));

    // The hint in the header works as written.
    let key = velvet(&["keygen"]);
    assert!(key.status.success());
    let mut text = std::fs::read_to_string(&out).unwrap();
    text.push_str(&stdout(&key));
    std::fs::write(&out, text).unwrap();
    let o = velvet(&["check-config", out.to_str().unwrap()]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(stdout(&o).contains("1 ticket key(s)"), "{}", stdout(&o));
}
