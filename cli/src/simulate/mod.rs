//! `velvet-rope simulate <scenario.toml>`: a room through the real engine in virtual time,
//! with the crowd, hosts and faults a scenario file describes, measured and plotted.
//!
//! The run is the cluster tier's deterministic simulation (the one its exactness tests use):
//! real engines over shared counters, one per simulated worker process, real tickets, ticks
//! and syncs through the in-process store; what it replaces is time, the network and the
//! store's server. The figures come from the simulation's own visitors and the ground truth
//! of seats, not from the engines' stats. The same scenario and seed repeat exactly.

mod lease_file;
mod plot;
mod scenario;

use std::path::PathBuf;
use std::time::Instant;

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use serde::Serialize;
use velvet_rope_cluster::sim::{
    run_leases, run_with_progress, Distribution, LeaseMeasured, Measured,
};

use lease_file::LeaseFile;
pub use scenario::ScenarioFile;

/// `simulate`'s arguments.
#[derive(Debug, Clone, clap::Args)]
pub struct SimulateArgs {
    /// The scenario file (TOML; see scenarios/ and docs/simulate.md).
    pub scenario: PathBuf,
    /// Print one JSON object instead of the table.
    #[arg(long)]
    pub json: bool,
    /// Draw the run into this file (.svg or .png).
    #[arg(long)]
    pub plot: Option<PathBuf>,
    /// The seed (the scenario's own unless given).
    #[arg(long)]
    pub seed: Option<u64>,
    /// Simulate this many minutes instead of the scenario's.
    #[arg(long)]
    pub minutes: Option<f64>,
    /// Share the room among the hosts this way instead of the scenario's: `store`
    /// (velvet-rope's), or the seed's `division` or `curve`, to compare on one crowd.
    #[arg(long)]
    pub sharing: Option<String>,
}

/// What `--json` prints.
#[derive(Debug, Serialize)]
struct Report<'a> {
    scenario: &'a str,
    /// How the hosts shared the room.
    sharing: &'a str,
    description: &'a str,
    seed: u64,
    hosts: usize,
    processes: usize,
    minutes: f64,
    /// Wall-clock seconds the run took.
    took_secs: f64,
    /// Events the simulation stepped through.
    steps: u64,
    /// The first broken invariant of the room (more visitors than the limit in force
    /// without a fault beyond the guarantee to excuse it), if any.
    violation: Option<String>,
    syncs: u64,
    sync_failures: u64,
    faults: Vec<String>,
    /// The event's `new_users_per_minute`, if it has one.
    event_per_minute: Option<u64>,
    #[serde(flatten)]
    measured: &'a Measured,
}

/// Runs `simulate`: a room's scenario, or a lease's (a file with a `[lease]` table).
pub fn run(args: &SimulateArgs) -> Result<(), String> {
    let text = std::fs::read_to_string(&args.scenario)
        .map_err(|e| format!("{}: {e}", args.scenario.display()))?;
    if args.minutes.is_some_and(|m| !scenario::minutes_in_range(m)) {
        return Err("--minutes: more than 0, at most two weeks (20160)".into());
    }
    let is_lease = text
        .parse::<toml::Table>()
        .is_ok_and(|t| t.contains_key("lease"));
    if is_lease {
        return run_lease(args, &text);
    }
    let file = ScenarioFile::parse_with(&text, args.sharing.as_deref())
        .map_err(|e| format!("{}: {e}", args.scenario.display()))?;
    let seed = args.seed.unwrap_or(file.seed);
    let minutes = args.minutes.unwrap_or(file.minutes);
    let scenario = file.to_scenario(args.minutes);
    file.check_size(&scenario)?;
    // The hosts' and the store's warm-up before the crowd (not measured, not shown).
    let warm = scenario.crowd.as_ref().map_or(0, |c| c.start_ms);
    let mut progress = Progress::new((scenario.run_ms - warm) / 1000)?;
    let outcome = run_with_progress(&scenario, seed, &mut |ms| {
        progress.at(ms.saturating_sub(warm) / 1000);
    })?;
    progress.bar.finish_and_clear();
    let took = progress.started.elapsed().as_secs_f64();
    let measured = outcome
        .measured
        .clone()
        .ok_or("the simulation measured nothing")?;

    if let Some(path) = &args.plot {
        let title = format!("{} (seed {seed})", file.name);
        plot::plot(path, &title, &measured.series)?;
    }
    let report = Report {
        scenario: &file.name,
        sharing: &file.hosts.sharing,
        description: file.description.trim(),
        seed,
        hosts: scenario.hosts,
        processes: scenario.processes,
        minutes,
        took_secs: took,
        steps: outcome.steps,
        violation: outcome.violation.clone(),
        syncs: outcome.syncs,
        sync_failures: outcome.sync_failures,
        faults: file.faults_within(minutes),
        event_per_minute: scenario
            .event
            .map(|e| e.per_minute.unwrap_or(scenario.per_minute)),
        measured: &measured,
    };
    if args.json {
        println!(
            "{}",
            serde_json::to_string(&report).map_err(|e| e.to_string())?
        );
    } else {
        print!("{}", table(&report));
        if let Some(path) = &args.plot {
            println!("plot                    {}", path.display());
        }
    }
    if let Some(v) = &outcome.violation {
        return Err(format!("the room's limits did not hold: {v}"));
    }
    Ok(())
}

/// Minutes as written: whole ones without decimals.
fn trim(minutes: f64) -> String {
    let s = format!("{minutes:.3}");
    s.trim_end_matches('0').trim_end_matches('.').to_string()
}

/// A bar on stderr once a run takes longer than a second (on a terminal only), over
/// `seconds` virtual seconds.
struct Progress {
    bar: ProgressBar,
    started: Instant,
    shown: bool,
}

impl Progress {
    fn new(seconds: u64) -> Result<Self, String> {
        let bar = ProgressBar::with_draw_target(Some(seconds), ProgressDrawTarget::hidden());
        bar.set_style(
            ProgressStyle::with_template(
                "simulating {bar:40} {pos}/{len} virtual seconds ({elapsed}, {eta} left)",
            )
            .map_err(|e| e.to_string())?,
        );
        Ok(Self {
            bar,
            started: Instant::now(),
            shown: false,
        })
    }

    fn at(&mut self, second: u64) {
        if !self.shown && self.started.elapsed().as_secs_f64() > 1.0 {
            self.shown = true;
            self.bar.set_draw_target(ProgressDrawTarget::stderr());
        }
        self.bar.set_position(second);
    }
}

/// What `--json` prints for a lease scenario.
#[derive(Debug, Serialize)]
struct LeaseReport<'a> {
    scenario: &'a str,
    description: &'a str,
    seed: u64,
    minutes: f64,
    took_secs: f64,
    #[serde(flatten)]
    measured: &'a LeaseMeasured,
}

/// Runs a lease scenario.
fn run_lease(args: &SimulateArgs, text: &str) -> Result<(), String> {
    let file = LeaseFile::parse(text).map_err(|e| format!("{}: {e}", args.scenario.display()))?;
    if args.sharing.is_some() {
        return Err("--sharing: rooms only (a lease scenario has its own tree)".into());
    }
    let seed = args.seed.unwrap_or(file.seed);
    let minutes = args.minutes.unwrap_or(file.minutes);
    file.check_cost(minutes)?;
    let scenario = file.to_scenario(args.minutes);
    let mut progress = Progress::new(scenario.run_ms / 1000)?;
    let m = run_leases(&scenario, seed, &mut |ms| progress.at(ms / 1000))?;
    progress.bar.finish_and_clear();
    let took = progress.started.elapsed().as_secs_f64();
    if let Some(path) = &args.plot {
        plot::plot_leases(path, &format!("{} (seed {seed})", file.name), &m)?;
    }
    let report = LeaseReport {
        scenario: &file.name,
        description: file.description.trim(),
        seed,
        minutes,
        took_secs: took,
        measured: &m,
    };
    if args.json {
        println!(
            "{}",
            serde_json::to_string(&report).map_err(|e| e.to_string())?
        );
        return Ok(());
    }
    let mut t = String::new();
    let mut row = |k: &str, v: String| t.push_str(&format!("{k:<24}{v}\n"));
    row("scenario", file.name.clone());
    row(
        "run",
        format!(
            "seed {seed}, {} clients (tree {:?}), {} minutes in {took:.2} s",
            m.clients,
            scenario.tree,
            trim(minutes)
        ),
    );
    row(
        "resource",
        format!(
            "capacity {}, {}, leases of {} s refreshed every {} s",
            m.capacity, scenario.algorithm, scenario.lease_secs, scenario.refresh_secs
        ),
    );
    row(
        "allocated",
        format!(
            "{:.1} % of what could be granted on average; {} after convergence",
            m.allocated_mean * 100.0,
            m.allocated_after_convergence
                .map_or("-".to_string(), |a| format!("{:.2} %", a * 100.0))
        ),
    );
    row(
        "above capacity",
        format!(
            "{} times, {} s in all, peak {:.2} % of the capacity",
            m.times_above_capacity, m.seconds_above_capacity, m.peak_percent
        ),
    );
    row(
        "convergence",
        match &m.convergence {
            Some(d) => format!(
                "mean {:.1} s, max {:.1} s after a change ({} changes)",
                d.mean, d.max, d.samples
            ),
            None => "- (no change converged)".into(),
        },
    );
    row(
        "failed requests",
        format!("{} (the root down)", m.failed_requests),
    );
    print!("{t}");
    if let Some(path) = &args.plot {
        println!("plot                    {}", path.display());
    }
    Ok(())
}

fn pct(part: u64, whole: u64) -> String {
    if whole == 0 {
        "-".into()
    } else {
        format!("{:.1} %", part as f64 * 100.0 / whole as f64)
    }
}

fn clock(seconds: u64) -> String {
    format!(
        "{}:{:02}:{:02}",
        seconds / 3600,
        seconds / 60 % 60,
        seconds % 60
    )
}

fn seconds(d: &Option<Distribution>, signed: bool) -> String {
    let Some(d) = d else {
        return "- (nobody let in after waiting)".into();
    };
    let f = |x: f64| {
        if signed {
            format!("{x:+.0} s")
        } else {
            format!("{x:.0} s")
        }
    };
    let mut s = format!(
        "mean {}, p50 {}, p90 {}, p99 {}, max {} ({} samples)",
        f(d.mean),
        f(d.p50),
        f(d.p90),
        f(d.p99),
        f(d.max),
        d.samples
    );
    if signed {
        s += &format!(", mean |error| {:.0} s", d.mean_abs);
    }
    s
}

/// The report as a table.
fn table(r: &Report) -> String {
    let m = r.measured;
    let mut t = String::new();
    let mut row = |k: &str, v: String| t.push_str(&format!("{k:<24}{v}\n"));
    row("scenario", r.scenario.to_string());
    row(
        "run",
        format!(
            "seed {}, {} host(s) x {} process(es) sharing by {}, {} minutes in {:.2} s ({} steps)",
            r.seed,
            r.hosts,
            r.processes,
            r.sharing,
            trim(r.minutes),
            r.took_secs,
            r.steps
        ),
    );
    row(
        "room",
        format!(
            "{} active users, {} new users per minute",
            m.limit, m.per_minute
        ),
    );
    row(
        "visitors",
        format!(
            "{} arrived, {} admitted ({} after waiting), {} queued on arrival, {} seats \
             lapsed and taken again",
            m.visitors, m.admitted, m.admitted_from_queue, m.queued, m.readmitted
        ),
    );
    row(
        "gave up",
        format!(
            "{} visitors ({} came back), {} still waiting at the end",
            m.gave_up, m.came_back, m.waiting_at_end
        ),
    );
    row(
        "peak active",
        format!(
            "{} of {} in force then (at {})",
            m.peak_active,
            m.limit_at_peak,
            clock(m.peak_active_at)
        ),
    );
    row(
        "above the limit",
        format!(
            "{} s (seconds holding more than the limit in force)",
            m.seconds_above_limit
        ),
    );
    row(
        "admissions, a minute",
        format!(
            "peak {} (limit {}{})",
            m.peak_admissions_in_a_minute,
            m.per_minute,
            r.event_per_minute
                .map_or(String::new(), |e| format!("; {e} during the event"))
        ),
    );
    row(
        "queued early",
        format!(
            "{} ({} of the queued): a seat for them even after every waiter had one",
            m.queued_early,
            pct(m.queued_early, m.queued)
        ),
    );
    if let Some(fill) = m.queueing_began_at {
        row(
            "queueing began",
            format!(
                "with the room {:.1} % full (seats held and waiters)",
                fill * 100.0
            ),
        );
    }
    row(
        "use while waiting",
        match m.utilisation_while_waiting {
            Some(u) => format!(
                "{:.1} % of the seats held, over {} s with waiters",
                u * 100.0,
                m.seconds_with_waiters
            ),
            None => "- (nobody waited)".into(),
        },
    );
    row("wait", seconds(&m.wait, false));
    row(
        "FIFO inversions",
        format!(
            "{} (waiters let in a refresh or more before one of an earlier minute); {} \
             newcomers let straight in past such a waiter",
            m.fifo_inversions, m.newcomers_past_waiters
        ),
    );
    row(
        "estimate error",
        format!(
            "{} (wait minus first promise, of those let in); {} not let in had waited past \
             their promise",
            seconds(&m.estimate_error, true),
            m.promises_overrun_unadmitted
        ),
    );
    row(
        "cluster",
        format!("{} syncs, {} failed", r.syncs, r.sync_failures),
    );
    if !r.faults.is_empty() {
        row("faults", r.faults.join("; "));
    }
    row(
        "limits",
        match &r.violation {
            None => "held (checked against the ground truth after every step)".into(),
            Some(v) => format!("BROKEN: {v}"),
        },
    );
    t
}
