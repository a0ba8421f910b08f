//! The waiting page through the engine: templates read from files next to the configuration,
//! read anew at a reload, refused with their place, and the visitor's language.

use std::path::PathBuf;

use velvet_rope::{Config, Decision, Engine, Outcome, PageRequest};

const T0: u64 = 1_800_000_000_000;

/// A fresh directory under the system's temporary one, removed on drop.
struct Dir(PathBuf);

impl Dir {
    fn new(name: &str) -> Dir {
        let dir = std::env::temp_dir().join(format!("vr-pages-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        Dir(dir)
    }

    fn write(&self, name: &str, text: &str) -> PathBuf {
        let path = self.0.join(name);
        std::fs::write(&path, text).unwrap();
        path
    }
}

impl Drop for Dir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

const ROOM: &str =
    "[[rooms]]\nname = \"shop\"\ntotal_active_users = 1\nnew_users_per_minute = 1000\n";

fn queued(e: &Engine) -> Decision {
    e.admit("shop", None, T0).unwrap();
    let d = e.admit("shop", None, T0).unwrap();
    assert_eq!(d.outcome, Outcome::Queue);
    d
}

fn html(e: &Engine, d: &Decision, accept_language: Option<&str>) -> String {
    let request = PageRequest {
        accept: Some("text/html"),
        accept_language,
        now_ms: T0,
        ticket: None,
    };
    e.render_page_for("shop", d, &request)
        .unwrap()
        .expect("a page")
        .body
}

#[test]
fn a_template_file_is_found_beside_the_configuration_and_read_anew_at_a_reload() {
    let dir = Dir::new("file");
    dir.write("page.html", "<p>#{{queuePosition}}</p>");
    let config = dir.write(
        "rooms.toml",
        &format!("{ROOM}custom_page_file = \"page.html\"\n"),
    );
    let e = Engine::new(Config::from_path(&config).unwrap(), T0).unwrap();
    let d = queued(&e);
    assert_eq!(html(&e, &d, None), "<p>#1</p>");
    dir.write("page.html", "<p>again {{queuePosition}}</p>");
    e.reload(Config::from_path(&config).unwrap()).unwrap();
    assert_eq!(html(&e, &d, None), "<p>again 1</p>");
}

#[test]
fn a_faulty_template_file_is_refused_with_its_name_and_place() {
    let dir = Dir::new("faulty");
    dir.write(
        "page.html",
        "<h1>Wait</h1>\n<p>{{#waitTimeKnown}}{{waitTime}}</p>\n",
    );
    let config = dir.write(
        "rooms.toml",
        &format!("{ROOM}custom_page_file = \"page.html\"\n"),
    );
    let err = Config::from_path(&config).unwrap_err().to_string();
    assert!(err.contains("rooms[0].custom_page_file"), "{err}");
    assert!(err.contains("page.html"), "{err}");
    assert!(err.contains("line 2, column 4"), "{err}");
    let missing = dir.write(
        "missing.toml",
        &format!("{ROOM}custom_page_file = \"nowhere.html\"\n"),
    );
    let err = Config::from_path(&missing).unwrap_err().to_string();
    assert!(
        err.contains("nowhere.html") && err.contains("cannot read"),
        "{err}"
    );
    // A reload to a faulty template is refused, and the running page stays.
    let e = Engine::from_text(&format!("{ROOM}custom_page = \"ok\"\n"), T0).unwrap();
    let bad = Config::from_text(&format!("{ROOM}custom_page = \"{{{{/x}}}}\"\n"));
    assert!(bad.unwrap_err().to_string().contains("line 1, column 1"));
    let d = queued(&e);
    assert_eq!(html(&e, &d, None), "ok");
}

#[test]
fn the_visitors_language_through_the_engine() {
    let e = Engine::from_text(&format!("{ROOM}accept_language = true\n"), T0).unwrap();
    let d = queued(&e);
    let german = html(&e, &d, Some("de-CH, en;q=0.8"));
    assert!(german.contains("lang=\"de-DE\""), "{german}");
    assert!(german.contains("Sie sind in der Warteschlange"), "{german}");
    let hebrew = html(&e, &d, Some("he"));
    assert!(hebrew.contains("lang=\"he-IL\" dir=\"rtl\""), "{hebrew}");
    // `render_page` keeps serving the room's language.
    let page = e
        .render_page("shop", &d, Some("text/html"))
        .unwrap()
        .unwrap();
    assert!(page.body.contains("lang=\"en-US\""));
    let err = Engine::from_text(
        &format!("{ROOM}default_template_language = \"de-AT\"\n"),
        T0,
    )
    .unwrap_err()
    .to_string();
    assert!(
        err.contains("default_template_language") && err.contains("de-DE"),
        "{err}"
    );
}
