//! The command's help and errors, run as a user runs them.

use std::io::Write;
use std::process::{Command, Output, Stdio};

fn run(args: &[&str], stdin: &str) -> Output {
    let mut child = Command::new(env!("CARGO_BIN_EXE_velvet-rope"))
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run velvet-rope");
    child
        .stdin
        .take()
        .unwrap()
        .write_all(stdin.as_bytes())
        .unwrap();
    child.wait_with_output().unwrap()
}

fn text(o: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

const ROOM: &str = "[[rooms]]\nname = \"shop\"\ntotal_active_users = 5\nnew_users_per_minute = 5\n";
const KEY: &str =
    "[[tickets.keys]]\nid = 1\nsecret = \"MDEyMzQ1Njc4OWFiY2RlZjAxMjM0NTY3ODlhYmNkZWY\"\n";

#[test]
fn help_names_every_command() {
    let out = text(&run(&["--help"], ""));
    for c in [
        "demo",
        "check-config",
        "allocate",
        "keygen",
        "inspect",
        "import-cloudflare",
    ] {
        assert!(out.contains(c), "`{c}` missing from --help:\n{out}");
    }
}

#[test]
fn allocate_help_documents_its_algorithms() {
    let out = text(&run(&["allocate", "--help"], ""));
    for a in [
        "none",
        "static",
        "proportional_share",
        "fair_share",
        "reserved_plus_shared",
    ] {
        assert!(out.contains(a), "`{a}` missing:\n{out}");
    }
    let o = run(
        &["allocate"],
        r#"{"algorithm":"fair_share","capacity":100,"clients":[{"id":"a","wants":80},{"id":"b","wants":40}]}"#,
    );
    assert!(o.status.success(), "{}", text(&o));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(v["grants"]["a"], 60.0);
    assert_eq!(v["grants"]["b"], 40.0);
}

#[test]
fn check_config_refuses_an_empty_file_and_names_methods_as_configured() {
    let o = run(&["check-config", "-"], "");
    assert_eq!(o.status.code(), Some(2));
    assert!(text(&o).contains("defines nothing"), "{}", text(&o));
    let o = run(&["check-config", "-"], ROOM);
    assert!(o.status.success(), "{}", text(&o));
    assert!(text(&o).contains("fifo queue"), "{}", text(&o));
}

#[test]
fn inspect_names_an_unknown_room_and_reads_a_real_ticket() {
    let dir = std::env::temp_dir().join(format!("vr-cli-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("rooms.toml");
    std::fs::write(&path, format!("{KEY}{ROOM}")).unwrap();
    let p = path.to_str().unwrap();
    let o = run(&["inspect", "--config", p, "--room", "nope", "x"], "");
    assert_eq!(o.status.code(), Some(2));
    assert!(
        text(&o).contains("no room `nope`") && text(&o).contains("shop"),
        "{}",
        text(&o)
    );
    // A ticket the engine sealed with the same configuration.
    let e = velvet_rope::Engine::from_path(&path, 1_800_000_000_000).unwrap();
    let cookie = e
        .admit("shop", None, 1_800_000_000_000)
        .unwrap()
        .set_cookie
        .unwrap();
    let pair = cookie.split(';').next().unwrap();
    let o = run(&["inspect", "--config", p, "--room", "shop", pair], "");
    assert!(o.status.success(), "{}", text(&o));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(v["state"], "admitted");
    assert_eq!(v["room"], "shop");
    std::fs::remove_dir_all(dir).unwrap();
}
