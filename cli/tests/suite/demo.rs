//! The demo, run as a user runs it: its ground truth must show the engine keeping the limits.

use std::process::Command;

fn demo(args: &[&str]) -> serde_json::Value {
    let out = Command::new(env!("CARGO_BIN_EXE_velvet-rope"))
        .arg("demo")
        .arg("--json")
        .args(args)
        .output()
        .expect("run the demo");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let stdout = String::from_utf8(out.stdout).unwrap();
    assert!(stdout.contains("minute"), "prints a table");
    serde_json::from_str(stdout.lines().last().unwrap()).unwrap()
}

#[test]
fn default_flash_sale_keeps_the_limits() {
    let s = demo(&["--minutes", "15"]);
    let total = s["total_active_users"].as_u64().unwrap();
    assert!(s["max_active_users"].as_u64().unwrap() <= total, "{s}");
    assert!(
        s["max_admitted_in_a_minute"].as_u64().unwrap()
            <= s["new_users_per_minute"].as_u64().unwrap()
    );
    let first = s["first_queued_at_active_users"]
        .as_u64()
        .expect("someone queued");
    // Queueing starts within 1 % of the limit (the seed's per-worker split: 20-30 % early).
    assert!(
        first * 100 >= total * 99,
        "first queued at {first} of {total}"
    );
    assert!(s["queued"].as_u64().unwrap() > 0);
    assert!(s["admitted"].as_u64().unwrap() >= total);
}

#[test]
fn many_threads_and_a_binding_new_user_rate() {
    let s = demo(&[
        "--threads",
        "4",
        "--total-active-users",
        "1000",
        "--new-users-per-minute",
        "150",
        "--arrivals-per-minute",
        "400",
        "--minutes",
        "9",
        "--session-minutes",
        "3",
    ]);
    assert!(s["max_active_users"].as_u64().unwrap() <= 1000, "{s}");
    assert_eq!(s["max_admitted_in_a_minute"].as_u64().unwrap(), 150, "{s}");
    // The first queue comes from the new-user rate: 150 admitted in minute 0.
    assert_eq!(
        s["first_queued_at_active_users"].as_u64().unwrap(),
        150,
        "{s}"
    );
}

#[test]
fn under_the_limits_nobody_queues() {
    let s = demo(&["--arrivals-per-minute", "20", "--minutes", "6"]);
    assert!(s["first_queued_at_active_users"].is_null(), "{s}");
    assert_eq!(s["queued"].as_u64().unwrap(), 0);
    assert_eq!(s["admitted"], s["arrivals"]);
}

#[test]
fn bad_flags_and_configs_fail_cleanly() {
    let out = Command::new(env!("CARGO_BIN_EXE_velvet-rope"))
        .args(["demo", "--total-active-users", "0"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("total_active_users"), "{err}");
    let out = Command::new(env!("CARGO_BIN_EXE_velvet-rope"))
        .args(["check-config", "/nonexistent.toml"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
}

/// One thread repeats exactly for a seed; the output names its columns and ends with a
/// verdict.
#[test]
fn one_thread_repeats_exactly_and_ends_with_a_verdict() {
    let args = ["--threads", "1", "--minutes", "12", "--seed", "7"];
    assert_eq!(demo(&args), demo(&args));
    let out = Command::new(env!("CARGO_BIN_EXE_velvet-rope"))
        .args(["demo", "--minutes", "6"])
        .output()
        .unwrap();
    let text = String::from_utf8(out.stdout).unwrap();
    for column in [
        "arrived",
        "admitted",
        "queued",
        "engine-active",
        "engine-waiting",
    ] {
        assert!(
            text.contains(column),
            "column `{column}` not named:\n{text}"
        );
    }
    let last = text.lines().last().unwrap();
    assert!(
        last.starts_with("Verdict: limits held") && last.contains("first visitor queued at"),
        "{last}"
    );
}

/// `--event`: a ticket drop with a pre-queue and a shuffled start. The table names each
/// minute's phase; nobody is let in during the pre-queue; the pre-queue is let in in an order
/// unrelated to arrival; the limits in force (the room's, then the event's) hold.
#[test]
fn a_scheduled_drop_with_a_shuffled_prequeue() {
    let s = demo(&["--event", "--minutes", "12"]);
    assert_eq!(s["over_limits_in_force"], 0, "{s}");
    assert!(s["prequeued"].as_u64().unwrap() >= 400, "{s}");
    let rho = s["prequeue_order_correlation"]
        .as_f64()
        .expect("someone got in");
    assert!(
        rho.abs() < 0.2,
        "arrival and admission orders correlate: {rho}"
    );
    let out = Command::new(env!("CARGO_BIN_EXE_velvet-rope"))
        .args(["demo", "--event", "--minutes", "8"])
        .output()
        .unwrap();
    let text = String::from_utf8(out.stdout).unwrap();
    let row = |minute: &str| {
        text.lines()
            .find(|l| l.split_whitespace().next() == Some(minute))
            .unwrap_or_else(|| panic!("no row for minute {minute}:\n{text}"))
            .to_owned()
    };
    for (minute, phase) in [
        ("0", "room"),
        ("2", "pre-queue"),
        ("5", "shuffled start"),
        ("6", "event"),
    ] {
        assert!(
            row(minute).contains(phase),
            "minute {minute}: {}",
            row(minute)
        );
    }
    // Nobody admitted in the pre-queue (minutes 2-4): the third number of the row.
    for minute in ["2", "3", "4"] {
        let r = row(minute);
        let admitted: u64 = r.split_whitespace().nth(3).unwrap().parse().unwrap();
        assert_eq!(admitted, 0, "{r}");
    }
    assert!(text.contains("Shuffle: the "), "{text}");
    assert!(text
        .lines()
        .last()
        .unwrap()
        .starts_with("Verdict: limits held"));
}
