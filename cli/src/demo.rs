//! `velvet-rope demo`: a flash sale driven through the real engine in virtual time.
//!
//! Visitors arrive, keep their cookies, browse for a while and leave; waiters refresh the
//! waiting page every `refresh_interval` and a few give up. `--threads` real threads call
//! `admit` concurrently, in lockstep seconds, and one of them ticks the engine between
//! seconds. The figures printed are ground truth counted by the demo from its own visitors
//! (admitted and session not yet expired), not read back from the engine, so the demo checks
//! the engine.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Barrier, Mutex};

use rand::{Rng, SeedableRng};
use serde::Serialize;
use velvet_rope::{Config, Engine, Outcome, RoomConfig};

/// Demo parameters.
#[derive(Debug, Clone, clap::Args)]
pub struct DemoArgs {
    /// Most visitors active at once.
    #[arg(long, default_value_t = 200)]
    pub total_active_users: u64,
    /// Most new visitors admitted per minute.
    #[arg(long, default_value_t = 200)]
    pub new_users_per_minute: u64,
    /// Minutes a visitor stays active after their last request.
    #[arg(long, default_value_t = 5)]
    pub session_minutes: u32,
    /// New visitors per minute during the sale (the first two thirds of the run).
    #[arg(long, default_value_t = 150)]
    pub arrivals_per_minute: u64,
    /// Minutes to simulate.
    #[arg(long, default_value_t = 30)]
    pub minutes: u64,
    /// Real threads calling `admit` concurrently. With more than one, which visitor gets a
    /// slot within a second depends on how the threads are scheduled, so the figures vary a
    /// little between runs (the limits hold in every run); `--threads 1` repeats exactly.
    #[arg(long, default_value_t = 2)]
    pub threads: usize,
    /// Seed of the visitors' random behaviour (arrivals, browsing, refreshes, giving up).
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// Print the summary as one JSON object on the last line.
    #[arg(long)]
    pub json: bool,
    /// Configuration file whose first room is used (limits from the flags are ignored).
    #[arg(long)]
    pub config: Option<String>,
}

/// Virtual start: a minute boundary (milliseconds since the Unix epoch).
const T0: u64 = 1_800_000_000_000;

#[derive(Debug, Clone, Copy, PartialEq)]
enum State {
    Waiting,
    Browsing,
    Gone,
}

struct Visitor {
    cookie: Option<String>,
    state: State,
    next_request: u64,
    leave_at: u64,
    give_up_at: u64,
    last_request: u64,
    admitted_at: u64,
}

/// Per-second figures one thread reports.
#[derive(Default)]
struct Tally {
    active: AtomicU64,
    waiting: AtomicU64,
    admitted: AtomicU64,
    queued_arrivals: AtomicU64,
    arrivals: AtomicU64,
    abandoned: AtomicU64,
    first_queue_second: AtomicU64,
}

/// One row of the per-minute table.
#[derive(Debug, Clone, Serialize)]
pub struct MinuteRow {
    minute: u64,
    arrivals: u64,
    admitted: u64,
    queued: u64,
    active_users: u64,
    engine_active_users: u64,
    queue_length: u64,
    engine_queue_length: u64,
}

/// The run's summary: ground truth from the demo's own visitors.
#[derive(Debug, Clone, Serialize)]
pub struct Summary {
    arrivals: u64,
    admitted: u64,
    queued: u64,
    abandoned: u64,
    max_active_users: u64,
    max_admitted_in_a_minute: u64,
    first_queued_at_active_users: Option<u64>,
    total_active_users: u64,
    new_users_per_minute: u64,
    session_minutes: u32,
    threads: usize,
    minutes: u64,
}

impl Summary {
    /// Whether the ground truth stayed within both limits all run long.
    pub fn limits_held(&self) -> bool {
        self.max_active_users <= self.total_active_users
            && self.max_admitted_in_a_minute <= self.new_users_per_minute
    }
}

/// Runs the demo, printing the table (and the JSON summary with `--json`).
pub fn run(args: &DemoArgs) -> Result<Summary, String> {
    let mut config = match &args.config {
        Some(path) => Config::from_path(path).map_err(|e| e.to_string())?,
        None => {
            let mut c = Config::embedded_default();
            let room = &mut c.rooms[0];
            room.total_active_users = args.total_active_users;
            room.new_users_per_minute = args.new_users_per_minute;
            room.session_duration = args.session_minutes;
            c
        }
    };
    config.validate().map_err(|e| e.to_string())?;
    let room: RoomConfig = config
        .rooms
        .first()
        .cloned()
        .ok_or("the configuration has no room")?;
    config.rooms.truncate(1);
    let minute_ms = u64::from(config.settings.bucket_width_secs) * 1000;
    let session_ms = u64::from(room.session_duration) * minute_ms;
    let refresh_ms = u64::from(room.refresh_interval) * 1000;
    let engine = Engine::new(config, T0).map_err(|e| e.to_string())?;
    let threads = args.threads.max(1);
    let seconds = args.minutes * minute_ms / 1000;
    let sale_seconds = seconds * 2 / 3;
    let tallies: Vec<Tally> = (0..threads).map(|_| Tally::default()).collect();
    for t in &tallies {
        t.first_queue_second.store(u64::MAX, Ordering::Relaxed);
    }
    let barrier = Barrier::new(threads);
    let rows: Mutex<(Vec<MinuteRow>, [u64; 3])> = Mutex::new((Vec::new(), [0; 3]));
    let summary = Mutex::new(Summary {
        arrivals: 0,
        admitted: 0,
        queued: 0,
        abandoned: 0,
        max_active_users: 0,
        max_admitted_in_a_minute: 0,
        first_queued_at_active_users: None,
        total_active_users: room.total_active_users,
        new_users_per_minute: room.new_users_per_minute,
        session_minutes: room.session_duration,
        threads,
        minutes: args.minutes,
    });
    let name = room.name.as_str();
    let renews = !room.disable_session_renewal;
    let per_minute = args.arrivals_per_minute;
    let seconds_per_minute = minute_ms / 1000;
    std::thread::scope(|scope| {
        for t in 0..threads {
            let (engine, tallies, barrier, rows, summary) =
                (&engine, &tallies, &barrier, &rows, &summary);
            scope.spawn(move || {
                let mut rng = rand::rngs::StdRng::seed_from_u64(args.seed * 1000 + t as u64);
                let mut visitors: Vec<Visitor> = Vec::new();
                let tally = &tallies[t];
                for s in 0..seconds {
                    let now = T0 + s * 1000;
                    // Arrivals this second, numbered globally and dealt round-robin.
                    if s < sale_seconds {
                        let before = per_minute * s / seconds_per_minute;
                        let after = per_minute * (s + 1) / seconds_per_minute;
                        for global in before..after {
                            if global % threads as u64 == t as u64 {
                                visitors.push(Visitor {
                                    cookie: None,
                                    state: State::Waiting,
                                    next_request: now + rng.gen_range(0..1000),
                                    leave_at: 0,
                                    give_up_at: if rng.gen_bool(0.1) {
                                        now + rng.gen_range(60_000..600_000)
                                    } else {
                                        u64::MAX
                                    },
                                    last_request: 0,
                                    admitted_at: 0,
                                });
                                tally.arrivals.fetch_add(1, Ordering::Relaxed);
                            }
                        }
                    }
                    let end = now + 1000;
                    for v in visitors.iter_mut() {
                        while v.state != State::Gone && v.next_request < end {
                            let at = v.next_request;
                            if v.state == State::Waiting && at >= v.give_up_at {
                                v.state = State::Gone;
                                tally.abandoned.fetch_add(1, Ordering::Relaxed);
                                break;
                            }
                            if v.state == State::Browsing && at >= v.leave_at {
                                v.state = State::Gone;
                                break;
                            }
                            let first = v.cookie.is_none();
                            let d = match engine.admit(name, v.cookie.as_deref(), at) {
                                Ok(d) => d,
                                Err(_) => break,
                            };
                            if let Some(c) = &d.set_cookie {
                                v.cookie = c.split(';').next().map(str::to_owned);
                            }
                            match (d.outcome, v.state) {
                                (Outcome::Admit, State::Waiting) => {
                                    v.state = State::Browsing;
                                    v.admitted_at = at;
                                    v.leave_at = at + rng.gen_range(60_000..=8 * 60_000);
                                    v.last_request = at;
                                    v.next_request = at + rng.gen_range(5_000..40_000);
                                    tally.admitted.fetch_add(1, Ordering::Relaxed);
                                }
                                (Outcome::Admit, _) => {
                                    v.last_request = at;
                                    v.next_request = at + rng.gen_range(5_000..40_000);
                                }
                                (_, State::Waiting) => {
                                    if first {
                                        tally.queued_arrivals.fetch_add(1, Ordering::Relaxed);
                                        tally.first_queue_second.fetch_min(s, Ordering::Relaxed);
                                    }
                                    v.next_request = at + refresh_ms + rng.gen_range(0..2_000);
                                }
                                (_, _) => {
                                    // Session lost while browsing: back to the waiting page.
                                    v.state = State::Waiting;
                                    v.next_request = at + refresh_ms;
                                }
                            }
                        }
                    }
                    // Ground truth at the end of this second.
                    let session_end = |v: &Visitor| {
                        if renews {
                            v.last_request + session_ms
                        } else {
                            v.admitted_at + session_ms
                        }
                    };
                    visitors.retain(|v| {
                        !(v.state == State::Gone && (v.admitted_at == 0 || session_end(v) <= end))
                    });
                    let active = visitors
                        .iter()
                        .filter(|v| {
                            v.state != State::Waiting && v.admitted_at > 0 && session_end(v) > end
                        })
                        .count() as u64;
                    let waiting = visitors
                        .iter()
                        .filter(|v| v.state == State::Waiting)
                        .count() as u64;
                    tally.active.store(active, Ordering::Relaxed);
                    tally.waiting.store(waiting, Ordering::Relaxed);
                    if barrier.wait().is_leader() {
                        let total_active: u64 = tallies
                            .iter()
                            .map(|t| t.active.load(Ordering::Relaxed))
                            .sum();
                        let total_waiting: u64 = tallies
                            .iter()
                            .map(|t| t.waiting.load(Ordering::Relaxed))
                            .sum();
                        let sum = |f: fn(&Tally) -> &AtomicU64| -> u64 {
                            tallies.iter().map(|t| f(t).load(Ordering::Relaxed)).sum()
                        };
                        let mut sm = summary.lock().unwrap_or_else(|p| p.into_inner());
                        sm.max_active_users = sm.max_active_users.max(total_active);
                        let first_q = tallies
                            .iter()
                            .map(|t| t.first_queue_second.load(Ordering::Relaxed))
                            .min()
                            .unwrap_or(u64::MAX);
                        if first_q == s && sm.first_queued_at_active_users.is_none() {
                            sm.first_queued_at_active_users = Some(total_active);
                        }
                        engine.tick(end);
                        if (s + 1) % seconds_per_minute == 0 {
                            let arrivals = sum(|t| &t.arrivals);
                            let admitted = sum(|t| &t.admitted);
                            let queued = sum(|t| &t.queued_arrivals);
                            let stats = engine.stats(name).ok();
                            let mut rows = rows.lock().unwrap_or_else(|p| p.into_inner());
                            let minute_acc = rows.1;
                            let row = MinuteRow {
                                minute: s / seconds_per_minute,
                                arrivals: arrivals - minute_acc[0],
                                admitted: admitted - minute_acc[1],
                                queued: queued - minute_acc[2],
                                active_users: total_active,
                                engine_active_users: stats.map_or(0, |s| s.active_users),
                                queue_length: total_waiting,
                                engine_queue_length: stats.map_or(0, |s| s.queue_length),
                            };
                            sm.max_admitted_in_a_minute =
                                sm.max_admitted_in_a_minute.max(row.admitted);
                            rows.1 = [arrivals, admitted, queued];
                            rows.0.push(row);
                        }
                        sm.arrivals = sum(|t| &t.arrivals);
                        sm.admitted = sum(|t| &t.admitted);
                        sm.queued = sum(|t| &t.queued_arrivals);
                        sm.abandoned = sum(|t| &t.abandoned);
                    }
                    barrier.wait();
                }
            });
        }
    });
    let rows = rows.into_inner().map(|r| r.0).unwrap_or_default();
    let summary = summary.into_inner().map_err(|_| "a demo thread panicked")?;
    print_table(&rows, &room, args);
    print_summary(&summary, &room);
    if args.json {
        println!(
            "{}",
            serde_json::to_string(&summary).map_err(|e| e.to_string())?
        );
    }
    Ok(summary)
}

fn print_table(rows: &[MinuteRow], room: &RoomConfig, args: &DemoArgs) {
    println!(
        "A flash sale through the real engine, in virtual time: room `{}`, total_active_users {}, \
         new_users_per_minute {}, sessions of {} min, {} queue.",
        room.name,
        room.total_active_users,
        room.new_users_per_minute,
        room.session_duration,
        room.queueing_method.as_str()
    );
    println!(
        "{} new visitors a minute for the first two thirds of {} minutes, on {} thread(s), seed {}{}.",
        args.arrivals_per_minute,
        args.minutes,
        args.threads.max(1),
        args.seed,
        if args.threads > 1 {
            " (with several threads the figures vary a little from run to run; --threads 1 repeats exactly)"
        } else {
            ""
        }
    );
    println!();
    println!(
        "{:>6} {:>8} {:>8} {:>7} {:>7} {:>13} {:>8} {:>14}",
        "minute",
        "arrived",
        "admitted",
        "queued",
        "active",
        "engine-active",
        "waiting",
        "engine-waiting"
    );
    for r in rows {
        println!(
            "{:>6} {:>8} {:>8} {:>7} {:>7} {:>13} {:>8} {:>14}",
            r.minute,
            r.arrivals,
            r.admitted,
            r.queued,
            r.active_users,
            r.engine_active_users,
            r.queue_length,
            r.engine_queue_length
        );
    }
    println!();
    println!("  arrived         new visitors that minute");
    println!(
        "  admitted        visitors let in that minute (new arrivals, and waiters whose turn came)"
    );
    println!("  queued          new visitors sent to the waiting page when they arrived");
    println!(
        "  active          visitors in the room at the minute's end, counted by the demo from its"
    );
    println!("                  own visitors (admitted, session not over): the ground truth");
    println!("  engine-active   the same as the engine counts it (stats: active_users)");
    println!("  waiting         visitors on the waiting page at the minute's end (ground truth)");
    println!(
        "  engine-waiting  live waiters as the engine counts them (stats: queue_length): a waiter \
         counts from its"
    );
    println!(
        "                  last refresh through the {} refresh intervals after it ({} s each). The demo's waiters",
        room.waiter_grace_refreshes, room.refresh_interval
    );
    println!(
        "                  refresh every {}-{} s, so each is counted; one that gave up stays counted until its",
        room.refresh_interval,
        room.refresh_interval + 2
    );
    println!(
        "                  grace runs out: the figure reads a little above the truth. It sizes the slots kept"
    );
    println!(
        "                  for the queue; a waiter keeps its place (its arrival minute) all the same."
    );
}

fn print_summary(s: &Summary, room: &RoomConfig) {
    println!();
    println!(
        "{} arrived, {} admitted, {} queued on arrival, {} abandoned (gave up waiting and left: \
         one visitor in ten does, after 1 to 10 minutes).",
        s.arrivals, s.admitted, s.queued, s.abandoned
    );
    let held = s.limits_held();
    let first = match s.first_queued_at_active_users {
        Some(n) => format!(
            "the first visitor queued at {n} of {} active users ({} %)",
            room.total_active_users,
            n * 100 / room.total_active_users.max(1)
        ),
        None => "nobody had to queue".to_owned(),
    };
    println!(
        "Verdict: {} (at most {} active of {}, at most {} admitted in a minute of {}); {}.",
        if held { "limits held" } else { "LIMITS BROKEN" },
        s.max_active_users,
        room.total_active_users,
        s.max_admitted_in_a_minute,
        room.new_users_per_minute,
        first
    );
}
