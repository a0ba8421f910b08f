//! `velvet-rope simulate`, run as a user runs it: every shipped scenario on a short horizon,
//! the same numbers twice for one seed, plots that are SVG and PNG, clear errors.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

fn scenarios() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../scenarios")
}

fn simulate(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_velvet-rope"))
        .arg("simulate")
        .args(args)
        .output()
        .expect("run velvet-rope simulate")
}

/// The JSON report of `scenario` (a file of scenarios/), with more arguments.
fn report(scenario: &str, args: &[&str]) -> serde_json::Value {
    let path = scenarios().join(scenario);
    let mut all = vec![path.to_str().unwrap(), "--json"];
    all.extend_from_slice(args);
    let out = simulate(&all);
    assert!(
        out.status.success(),
        "{scenario}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).expect("one JSON object")
}

/// Every figure but the wall-clock time.
fn figures(mut r: serde_json::Value) -> serde_json::Value {
    r.as_object_mut().unwrap().remove("took_secs");
    r
}

#[test]
fn every_shipped_scenario_runs_on_a_short_horizon_within_the_limits() {
    let mut names: Vec<String> = std::fs::read_dir(scenarios())
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .filter(|n| n.ends_with(".toml"))
        .collect();
    names.sort();
    assert!(names.len() >= 6, "{names:?}");
    // (Many hosts take their own test: four minutes of 400 hosts take longer than the rest.)
    let quick = |n: &&String| !n.starts_with("doorman") && !n.starts_with("many-hosts");
    for name in names.iter().filter(quick) {
        let r = report(name, &["--minutes", "4"]);
        assert_eq!(r["violation"], serde_json::Value::Null, "{name}: {r}");
        assert!(r["steps"].as_u64().unwrap() > 0, "{name}");
        assert_eq!(
            r["seconds"].as_u64(),
            Some(240),
            "{name}: sampled every second"
        );
        assert_eq!(r["seconds_above_limit"].as_u64(), Some(0), "{name}: {r}");
        eprintln!(
            "{name}: {} visitors, {} admitted, {} queued, in {:.2} s",
            r["visitors"], r["admitted"], r["queued"], r["took_secs"]
        );
    }
}

#[test]
fn one_seed_gives_the_same_numbers_twice_and_another_seed_others() {
    let a = figures(report(
        "store-outage.toml",
        &["--minutes", "12", "--seed", "7"],
    ));
    let b = figures(report(
        "store-outage.toml",
        &["--minutes", "12", "--seed", "7"],
    ));
    assert_eq!(a, b);
    // The outage at minute 10 happened, and syncs failed through it.
    assert!(a["sync_failures"].as_u64().unwrap() > 0, "{a}");
    let c = figures(report(
        "store-outage.toml",
        &["--minutes", "12", "--seed", "8"],
    ));
    assert_ne!(a["visitors"], c["visitors"]);
}

#[test]
fn uneven_deciders_fifteen_visitors_for_ten_seats() {
    // Cloudflare's second case: 8 + 7 new visitors at two hosts, 10 seats: exactly ten in.
    let r = report("uneven-deciders-15.toml", &[]);
    assert_eq!(r["visitors"], 15, "{r}");
    assert_eq!(r["admitted"], 10, "{r}");
    assert_eq!(r["queued"], 5, "{r}");
    assert_eq!(r["peak_active"], 10, "{r}");
}

#[test]
fn uneven_deciders_seven_and_one_all_get_in() {
    // Cloudflare's first case: 7 + 1 for 10 seats: all eight get in, within the run (some
    // after a wait: see docs/simulate.md for what is measured).
    let r = report("uneven-deciders-7-1.toml", &[]);
    assert_eq!(r["visitors"], 8, "{r}");
    assert_eq!(r["admitted"], 8, "{r}");
    assert_eq!(r["waiting_at_end"], 0, "{r}");
}

#[test]
fn a_waiting_crowd_is_measured() {
    let r = report("flash-sale.toml", &["--minutes", "12"]);
    let m = |k: &str| r[k].as_u64().unwrap_or_else(|| panic!("{k}: {r}"));
    assert!(m("queued") > 0 && m("admitted_from_queue") > 0, "{r}");
    assert_eq!(m("peak_active"), 500, "the room fills: {r}");
    let wait = &r["wait"];
    assert_eq!(wait["samples"].as_u64(), Some(m("admitted_from_queue")));
    assert!(wait["p99"].as_f64() >= wait["p50"].as_f64());
    let u = r["utilisation_while_waiting"].as_f64().unwrap();
    assert!(u > 0.5 && u <= 1.0, "{u}");
    assert!(m("admitted") <= m("visitors"));
}

#[test]
fn plots_are_svg_or_png_by_their_extension() {
    let dir = std::env::temp_dir().join(format!("vr-sim-plot-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let scenario = scenarios().join("flash-sale.toml");
    for (file, magic) in [("run.svg", &b"<svg"[..]), ("run.png", &b"\x89PNG"[..])] {
        let path = dir.join(file);
        let out = simulate(&[
            scenario.to_str().unwrap(),
            "--minutes",
            "6",
            "--plot",
            path.to_str().unwrap(),
        ]);
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let bytes = std::fs::read(&path).unwrap();
        let head = &bytes[..bytes.len().min(200)];
        assert!(
            head.windows(magic.len()).any(|w| w == magic),
            "{file}: {:?}",
            String::from_utf8_lossy(head)
        );
        assert!(bytes.len() > 10_000, "{file}: {} bytes", bytes.len());
    }
    if let Ok(svg) = std::fs::read_to_string(dir.join("run.svg")) {
        assert!(svg.contains("active users"), "the panels are labelled");
    }
    let bad = simulate(&[
        scenario.to_str().unwrap(),
        "--minutes",
        "1",
        "--plot",
        dir.join("run.gif").to_str().unwrap(),
    ]);
    assert_eq!(bad.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&bad.stderr).contains(".svg or .png"));
    std::fs::remove_dir_all(&dir).ok();
}

#[test]
fn a_bad_scenario_is_refused_with_the_reason() {
    let dir = std::env::temp_dir().join(format!("vr-sim-bad-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let cases = [
        ("minutes = 5\nname = \"x\"\n[room]\ntotal_active_users = 10\n", "new_users_per_minute"),
        (
            "minutes = 5\nname = \"x\"\n[room]\ntotal_active_users = 10\nnew_users_per_minute = 5\nsurprise = 1\n",
            "surprise",
        ),
        (
            "minutes = 5\nname = \"x\"\n[room]\ntotal_active_users = 10\nnew_users_per_minute = 5\n[[faults]]\nkind = \"meteor\"\nat_minute = 1\n",
            "meteor",
        ),
        (
            "minutes = 5\nname = \"x\"\n[room]\ntotal_active_users = 10\nnew_users_per_minute = 5\n[hosts]\ncount = 2\nweights = [1]\n",
            "weights",
        ),
        (
            "minutes = -1\nname = \"x\"\n[room]\ntotal_active_users = 10\nnew_users_per_minute = 5\n",
            "minutes",
        ),
    ];
    for (i, (text, names)) in cases.iter().enumerate() {
        let path = dir.join(format!("bad{i}.toml"));
        std::fs::write(&path, text).unwrap();
        let out = simulate(&[path.to_str().unwrap()]);
        assert_eq!(out.status.code(), Some(2), "case {i}");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains(names), "case {i}: {err}");
    }
    let missing = simulate(&["/nonexistent/scenario.toml"]);
    assert_eq!(missing.status.code(), Some(2));
    std::fs::remove_dir_all(&dir).ok();
}

/// Runs a scenario given as text; returns the output.
fn simulate_text(name: &str, text: &str, args: &[&str]) -> Output {
    let dir = std::env::temp_dir().join(format!("vr-sim-{}-{name}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("s.toml");
    std::fs::write(&path, text).unwrap();
    let mut all = vec![path.to_str().unwrap()];
    all.extend_from_slice(args);
    let out = simulate(&all);
    std::fs::remove_dir_all(&dir).ok();
    out
}

fn json_of(name: &str, text: &str, args: &[&str]) -> serde_json::Value {
    let mut all = vec!["--json"];
    all.extend_from_slice(args);
    let out = simulate_text(name, text, &all);
    assert!(
        out.status.success(),
        "{name}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap()
}

const ROOM: &str =
    "name = \"x\"\nminutes = 2\n[room]\ntotal_active_users = 100\nnew_users_per_minute = 100\n";

#[test]
fn settings_out_of_range_are_errors_not_panics_or_hangs() {
    // Found by review: each of these panicked, wrapped time around, or ran without end.
    let cases: &[(&str, &str)] = &[
        ("refresh0", "refresh_interval = 0\n"),
        ("qb0", "queue_buckets = 0\n"),
        ("mlw0", "max_live_waiters = 0\n"),
        ("sess0", "session_duration = 0\n"),
        ("event_total0", "[room.event]\nstart_minute = 1\nend_minute = 2\ntotal_active_users = 0\n"),
        (
            "event_pm0",
            "[room.event]\nstart_minute = 1\nend_minute = 2\ntotal_active_users = 5\nnew_users_per_minute = 0\n",
        ),
        ("event_before", "[room.event]\nstart_minute = -5\nend_minute = -1\ntotal_active_users = 5\n"),
        ("event_empty", "[room.event]\nstart_minute = 1\nend_minute = 1.000001\ntotal_active_users = 5\n"),
        ("event_inf", "[room.event]\nstart_minute = 1\nend_minute = inf\ntotal_active_users = 5\n"),
        ("fallback2", "[hosts]\nfallback_share = 2.0\n"),
        ("fallback_nan", "[hosts]\nfallback_share = nan\n"),
        ("timeout0", "[hosts]\ntimeout_ms = 0\n"),
        ("lease_short", "[hosts]\nsync_interval_ms = 1000\nlease_ms = 2000\n"),
        ("sync10", "[hosts]\nsync_interval_ms = 10\nlease_ms = 100\n"),
        ("weights_huge", "[hosts]\ncount = 2\nweights = [1e308, 1e308]\n"),
        ("weights_zero", "[hosts]\ncount = 2\nweights = [0, 0]\n"),
        ("processes", "[hosts]\ncount = 1000\nprocesses = 16\n"),
        ("rate_huge", "[arrivals]\nrate = [[0, 1e15]]\n"),
        ("spike_huge", "[[arrivals.spikes]]\nat_minute = 0\nvisitors = 100000000\n"),
        ("spike_over_inf", "[[arrivals.spikes]]\nat_minute = 0\nvisitors = 10\nover_seconds = inf\n"),
        ("patience_inf", "[visitors]\npatience_minutes = inf\n"),
        ("come_back_inf", "[visitors]\npatience_minutes = 0.001\ncome_back = 1\ncome_back_minutes = inf\n"),
        ("pages_inf", "[visitors]\npages_per_minute = inf\n"),
        ("fault_long", "[[faults]]\nkind = \"store_down\"\nat_minute = 1\nseconds = 1e17\n"),
        ("fault_nan", "[[faults]]\nkind = \"store_down\"\nat_minute = 1\nseconds = nan\n"),
        ("fault_before", "[[faults]]\nkind = \"store_down\"\nat_minute = -1\nseconds = 5\n"),
    ];
    for (name, extra) in cases {
        // Keys without a table of their own are the room's (ROOM ends in its table).
        let text = format!("{ROOM}{extra}");
        let started = std::time::Instant::now();
        let out = simulate_text(name, &text, &[]);
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{name}: {err}");
        assert!(!err.contains("panicked"), "{name}: {err}");
        assert!(err.starts_with("velvet-rope: "), "{name}: {err}");
        assert!(
            started.elapsed().as_secs() < 20,
            "{name}: took {:?}",
            started.elapsed()
        );
    }
}

#[test]
fn each_visitor_is_admitted_once_however_often_its_seat_lapses() {
    // Sessions of a minute, pages every 3 minutes or so: seats lapse between pages.
    let r = json_of(
        "readmit",
        "name = \"readmit\"\nminutes = 8\n[room]\ntotal_active_users = 1000\n\
         new_users_per_minute = 1000\nsession_duration = 1\nrefresh_interval = 10\n\
         [arrivals]\nrate = [[0, 30]]\n[visitors]\npages_per_minute = 0.3\n\
         session_minutes = 60\n",
        &[],
    );
    let m = |k: &str| r[k].as_u64().unwrap_or_else(|| panic!("{k}: {r}"));
    assert!(m("admitted") <= m("visitors"), "{r}");
    assert!(m("readmitted") > 0, "{r}");
}

#[test]
fn a_waiter_who_gave_up_and_came_back_counts_as_a_waiter() {
    let r = json_of(
        "cb",
        "name = \"cb\"\nminutes = 4\n[room]\ntotal_active_users = 5\nnew_users_per_minute = 100\n\
         session_duration = 1\nrefresh_interval = 10\n[[arrivals.spikes]]\nat_minute = 0.5\n\
         visitors = 20\nover_seconds = 5\n[visitors]\npages_per_minute = 6\n\
         session_minutes = 0.1\npatience_minutes = 0.3\ncome_back = 1\ncome_back_minutes = 1.5\n",
        &[],
    );
    let m = |k: &str| r[k].as_u64().unwrap_or_else(|| panic!("{k}: {r}"));
    // Visitors, not events: nobody gives up who did not queue.
    assert!(m("gave_up") <= m("queued"), "{r}");
    assert!(m("came_back") <= m("gave_up"), "{r}");
    // Straight in: only those never queued.
    assert!(
        m("admitted") - m("admitted_from_queue") <= m("visitors") - m("queued"),
        "{r}"
    );
    assert_eq!(
        r["wait"]["samples"].as_u64(),
        Some(m("admitted_from_queue"))
    );
    assert!(m("came_back") > 0, "{r}");
}

#[test]
fn a_fresh_room_with_room_to_spare_queues_nobody() {
    // 300 a minute for two minutes into 1,000 seats: nobody waits (the store's learning
    // after it starts is over before the crowd: the hosts warm up first; without the warm-up
    // every visitor of the first 11 s or so was queued).
    let r = json_of(
        "cold",
        "name = \"cold\"\nminutes = 2\n[room]\ntotal_active_users = 1000\n\
         new_users_per_minute = 1000\n[arrivals]\nrate = [[0, 300]]\n",
        &[],
    );
    assert_eq!(r["queued"], 0, "{r}");
    assert_eq!(r["queued_early"], 0, "{r}");
    assert!(r["admitted"].as_u64().unwrap() > 500, "{r}");
}

#[test]
fn the_limits_measured_against_are_those_the_engine_enforces() {
    // An event lowering the room from 40 to 10 at minute 2: the engine holds the room to 10
    // a session ahead, so nobody queued then was queued early.
    let r = json_of(
        "lower",
        "name = \"lower\"\nminutes = 4\n[room]\ntotal_active_users = 40\nnew_users_per_minute = 100\n\
         session_duration = 5\n[room.event]\nstart_minute = 2\nend_minute = 10\n\
         total_active_users = 10\n[arrivals]\nrate = [[0, 60]]\n",
        &[],
    );
    assert_eq!(r["queued_early"], 0, "{r}");
    assert!(
        r["utilisation_while_waiting"].as_f64().unwrap() > 0.9,
        "{r}"
    );
    // An event raising it: the peak is told against the limit in force then.
    let r = json_of(
        "raise",
        "name = \"raise\"\nminutes = 3\n[room]\ntotal_active_users = 20\nnew_users_per_minute = 100\n\
         [room.event]\nstart_minute = 1\nend_minute = 100\ntotal_active_users = 40\n\
         [arrivals]\nrate = [[0, 60]]\n",
        &[],
    );
    assert_eq!(r["peak_active"], 40, "{r}");
    assert_eq!(r["limit_at_peak"], 40, "{r}");
}

#[test]
fn only_the_faults_that_happened_are_listed() {
    let r = report("store-outage.toml", &["--minutes", "12"]);
    let faults = r["faults"].as_array().unwrap();
    assert_eq!(faults.len(), 1, "{r}");
    assert_eq!(faults[0], "store_down at minute 10 for 120 s", "{r}");
}

#[test]
fn the_ways_of_sharing_rank_as_the_seed_says() {
    // Eight hosts, uneven traffic, a quiet room, then a spike: per-host division queues early
    // and leaves seats idle while people wait; the utilisation curve overshoots the room on
    // the spike; the store's allowances do neither as much (and never overshoot).
    let way = |w: &str| {
        report(
            "spike-after-quiet.toml",
            &["--minutes", "12", "--sharing", w],
        )
    };
    let (store, division, curve) = (way("store"), way("division"), way("curve"));
    let n = |r: &serde_json::Value, k: &str| r[k].as_u64().unwrap_or_else(|| panic!("{k}: {r}"));
    let f = |r: &serde_json::Value, k: &str| r[k].as_f64().unwrap_or_else(|| panic!("{k}: {r}"));
    assert_eq!(store["sharing"], "store");
    assert_eq!(n(&store, "seconds_above_limit"), 0, "{store}");
    assert!(n(&store, "peak_active") <= 200, "{store}");
    assert!(
        n(&curve, "peak_active") > 200,
        "the curve overshoots: {curve}"
    );
    assert!(n(&curve, "seconds_above_limit") > 0, "{curve}");
    assert!(
        n(&division, "queued_early") > n(&store, "queued_early"),
        "division queues earlier: {division} vs {store}"
    );
    assert!(
        f(&division, "utilisation_while_waiting") < f(&store, "utilisation_while_waiting"),
        "division leaves seats idle: {division} vs {store}"
    );
    let bad = simulate(&[
        scenarios().join("spike-after-quiet.toml").to_str().unwrap(),
        "--sharing",
        "gossip",
    ]);
    assert_eq!(bad.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&bad.stderr).contains("store, division or curve"));
}

#[test]
fn lease_scenarios_reach_capacity_and_never_pass_it() {
    for name in ["doorman-one.toml", "doorman-seven.toml"] {
        let r = report(name, &["--minutes", "20"]);
        assert_eq!(r["seconds_above_capacity"], 0, "{name}: {r}");
        assert!(
            r["peak_percent"].as_f64().unwrap() <= 100.0 + 1e-9,
            "{name}: {r}"
        );
        let after = r["allocated_after_convergence"].as_f64().unwrap();
        assert!(after >= 0.99, "{name}: {after} after convergence: {r}");
        assert!(
            r["convergence"]["samples"].as_u64().unwrap() > 0,
            "{name}: {r}"
        );
        let again = report(name, &["--minutes", "20"]);
        assert_eq!(figures(r), figures(again), "{name}: one seed, one run");
    }
    // The tree's root restarting empty (it learns) and then down for a while: within the
    // capacity throughout.
    let r = json_of(
        "lease-faults",
        "name = \"faults\"\nminutes = 6\n[lease]\ncapacity = 100\ntree = [2, 4]\nwants = 20\n\
         spread = 0.5\nchange_every_secs = 30\n[[lease.faults]]\nkind = \"root_restart\"\n\
         at_minute = 2\n[[lease.faults]]\nkind = \"root_down\"\nat_minute = 4\nseconds = 40\n",
        &[],
    );
    assert_eq!(r["seconds_above_capacity"], 0, "{r}");
    assert!(
        r["failed_requests"].as_u64().unwrap() > 0,
        "the root was down: {r}"
    );
    let plot = std::env::temp_dir().join(format!("vr-lease-{}.svg", std::process::id()));
    let out = simulate(&[
        scenarios().join("doorman-one.toml").to_str().unwrap(),
        "--minutes",
        "3",
        "--plot",
        plot.to_str().unwrap(),
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(std::fs::read_to_string(&plot).unwrap().contains("<svg"));
    std::fs::remove_file(&plot).ok();
    let bad = json_err(
        "lease-bad",
        "name = \"x\"\nminutes = 1\n[lease]\ncapacity = 100\ntree = []\nwants = 1\n",
    );
    assert!(bad.contains("lease.tree"), "{bad}");
}

/// The error a scenario given as text is refused with.
fn json_err(name: &str, text: &str) -> String {
    let out = simulate_text(name, text, &["--json"]);
    assert_eq!(out.status.code(), Some(2));
    String::from_utf8_lossy(&out.stderr).into_owned()
}

#[test]
fn lease_runs_count_each_refused_request_once_and_converge_after_an_outage() {
    // Five clients of the root, which is down from minute 1 for 60 s: each refreshes every
    // 5 s, so 12 requests each are refused.
    let r = json_of(
        "lease-down",
        "name = \"down\"\nminutes = 3\n[lease]\ncapacity = 500\ntree = [5]\nwants = 100\n\
         [[lease.faults]]\nkind = \"root_down\"\nat_minute = 1\nseconds = 60\n",
        &[],
    );
    assert_eq!(r["failed_requests"], 60, "{r}");
    // The outage's end is a change: the clients converge after it.
    assert!(r["convergence"]["samples"].as_u64().unwrap() >= 2, "{r}");
    // The cost of a run grows with the square of the clients: too large is refused.
    let big = json_err(
        "lease-big",
        "name = \"big\"\nminutes = 120\n[lease]\ncapacity = 500\ntree = [2000]\nwants = 1\n",
    );
    assert!(big.contains("too long to simulate"), "{big}");
    let bad = json_err(
        "lease-nan",
        "name = \"nan\"\nminutes = 1\n[lease]\ncapacity = 500\ntree = [5]\nwants = 1\nlease_secs = nan\n",
    );
    assert!(bad.contains("lease_secs"), "{bad}");
}

#[test]
fn divisions_take_no_store_faults() {
    let text = "name = \"x\"\nminutes = 2\n[room]\ntotal_active_users = 10\n\
                new_users_per_minute = 10\n[hosts]\ncount = 2\nsharing = \"division\"\n\
                [[faults]]\nkind = \"store_down\"\nat_minute = 1\nseconds = 10\n";
    let err = json_err("division-fault", text);
    assert!(err.contains("no store"), "{err}");
}

/// Many hosts, few seats each (issue 30): a visitor reaching a host whose allowance is spent
/// queues even while other hosts hold seats. With the seed's shares (by traffic alone, the
/// chunk on top of them, new arrivals halted while anyone waited elsewhere) 400 hosts queued
/// 21.6 % of the queued early and began queueing with the room 0.1 % full; 100 hosts, with
/// a tenth of the hosts' slots each, queue late and rarely early.
#[test]
fn many_hosts_queue_late() {
    let n = |r: &serde_json::Value, k: &str| r[k].as_u64().unwrap_or_else(|| panic!("{k}: {r}"));
    // The shipped scenario's first minute of arrivals: the room is far from full.
    let first = report("many-hosts-400.toml", &["--minutes", "2"]);
    assert_eq!(first["violation"], serde_json::Value::Null, "{first}");
    assert!(n(&first, "visitors") > 2500, "{first}");
    assert!(
        n(&first, "queued_early") * 200 <= n(&first, "visitors"),
        "at most 0.5 % of the visitors queued early: {first}"
    );
    // A hundred hosts, until the room is full and past it.
    let text = std::fs::read_to_string(scenarios().join("many-hosts-400.toml"))
        .unwrap()
        .replace("count = 400", "count = 100");
    let r = json_of("many100", &text, &[]);
    assert_eq!(r["seconds_above_limit"].as_u64(), Some(0), "{r}");
    assert_eq!(n(&r, "peak_active"), 4000, "the room filled: {r}");
    assert!(
        n(&r, "queued_early") * 50 <= n(&r, "queued"),
        "at most 2 % of the queued queued early: {r}"
    );
    let began = r["queueing_began_at"].as_f64().unwrap();
    assert!(
        began >= 0.9,
        "queueing began with the room {began} full: {r}"
    );
    // Those queued while the room had seats (at other hosts: here every waiter let in was
    // queued early) come back after two syncs, and their host has a slot for them by then:
    // let in within seconds, not a refresh (20 s). (Not quite all: one queued in the last
    // sync intervals before the room filled may find its seat taken by new arrivals at hosts
    // whose allowance was granted before the store heard of it, and waits for a departure.)
    let let_in = n(&r["wait"], "samples");
    let early = n(&r, "queued_early");
    assert!(
        let_in <= early && let_in + 1 >= early,
        "{let_in} of the {early} queued early let in: {r}"
    );
    let p99 = r["wait"]["p99"].as_f64().unwrap();
    assert!(p99 <= 5.0, "waits of those queued early, p99 {p99} s: {r}");
}
