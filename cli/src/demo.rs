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
    /// A ticket drop: the room gets a scheduled event (a pre-queue from minute 2, the start
    /// at minute 5 with the pre-queue shuffled, twice the room and half the new-user rate
    /// until minute 20).
    #[arg(long)]
    pub event: bool,
}

/// Minutes (from the demo's start) of the `--event` schedule: pre-queue, start, end.
const EVENT_MINUTES: (u64, u64, u64) = (2, 5, 20);

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
    /// Arrival order among all visitors.
    global: u64,
    /// Arrived during an event's pre-queue.
    prequeued: bool,
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
    phase: &'static str,
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
    /// Seconds in which visitors were let in while the room held more than the
    /// `total_active_users` in force, and minutes that admitted more than the
    /// `new_users_per_minute` in force (the room's, or its event's): both must be 0.
    over_limits_in_force: u64,
    /// Visitors who arrived during the pre-queue (`--event`).
    prequeued: u64,
    /// Rank correlation between the pre-queued visitors' arrival and admission orders: about
    /// 0 when the start shuffles them, 1 for first come, first served.
    prequeue_order_correlation: Option<f64>,
}

impl Summary {
    /// Whether the ground truth stayed within both limits all run long.
    pub fn limits_held(&self) -> bool {
        self.max_active_users <= self.total_active_users
            && self.max_admitted_in_a_minute <= self.new_users_per_minute
            && self.over_limits_in_force == 0
    }
}

/// The `--event` schedule on `room`, in the demo's virtual time.
fn add_event(room: &mut RoomConfig, minute_ms: u64) {
    let at = |m: u64| velvet_rope::config::Instant::from_millis(T0 + m * minute_ms);
    let (pre, start, end) = EVENT_MINUTES;
    room.events.push(velvet_rope::config::EventConfig {
        name: "ticket-drop".into(),
        description: Some("the demo's scheduled drop".into()),
        prequeue_start: Some(at(pre)),
        event_start: at(start),
        event_end: at(end),
        shuffle_at_event_start: true,
        suspended: false,
        total_active_users: Some(room.total_active_users * 2),
        new_users_per_minute: Some((room.new_users_per_minute / 2).max(1)),
        session_duration: None,
        disable_session_renewal: None,
        queueing_method: None,
        custom_page: None,
        custom_page_file: None,
    });
}

/// Spearman's rank correlation of `(x, y)` pairs (ties take their mean rank).
fn rank_correlation(pairs: &[(u64, u64)]) -> Option<f64> {
    if pairs.len() < 3 {
        return None;
    }
    let ranks = |key: &dyn Fn(&(u64, u64)) -> u64| {
        let mut idx: Vec<usize> = (0..pairs.len()).collect();
        idx.sort_by_key(|&i| key(&pairs[i]));
        let mut r = vec![0.0; pairs.len()];
        let mut i = 0;
        while i < idx.len() {
            let k = key(&pairs[idx[i]]);
            let j = i + idx[i..]
                .iter()
                .take_while(|&&x| key(&pairs[x]) == k)
                .count();
            for &x in &idx[i..j] {
                r[x] = (i + j - 1) as f64 / 2.0;
            }
            i = j;
        }
        r
    };
    let (a, b) = (ranks(&|p| p.0), ranks(&|p| p.1));
    let n = a.len() as f64;
    let mean = (n - 1.0) / 2.0;
    let cov: f64 = a.iter().zip(&b).map(|(x, y)| (x - mean) * (y - mean)).sum();
    let var = |v: &[f64]| v.iter().map(|x| (x - mean).powi(2)).sum::<f64>();
    let d = (var(&a) * var(&b)).sqrt();
    (d > 0.0).then(|| cov / d)
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
    if args.event {
        let minute_ms = u64::from(config.settings.bucket_width_secs) * 1000;
        let room = config
            .rooms
            .first_mut()
            .ok_or("the configuration has no room")?;
        add_event(room, minute_ms);
    }
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
        // The largest limits of the schedule (those in force are checked second by second).
        total_active_users: room.largest_total(),
        new_users_per_minute: room
            .events
            .iter()
            .filter_map(|e| e.new_users_per_minute)
            .fold(room.new_users_per_minute, u64::max),
        session_minutes: room.session_duration,
        threads,
        minutes: args.minutes,
        over_limits_in_force: 0,
        prequeued: 0,
        prequeue_order_correlation: None,
    });
    let prequeue_order: Mutex<Vec<(u64, u64)>> = Mutex::new(Vec::new());
    let room_ref = &room;
    let name = room.name.as_str();
    let renews = !room.disable_session_renewal;
    let per_minute = args.arrivals_per_minute;
    let seconds_per_minute = minute_ms / 1000;
    std::thread::scope(|scope| {
        for t in 0..threads {
            let (engine, tallies, barrier, rows, summary, prequeue_order) = (
                &engine,
                &tallies,
                &barrier,
                &rows,
                &summary,
                &prequeue_order,
            );
            scope.spawn(move || {
                let mut rng = rand::rngs::StdRng::seed_from_u64(args.seed * 1000 + t as u64);
                let mut visitors: Vec<Visitor> = Vec::new();
                // (arrival order, admission time) of the pre-queue's visitors, and their number.
                let mut admitted_from_prequeue: Vec<(u64, u64)> = Vec::new();
                let mut prequeued = 0u64;
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
                                    global,
                                    prequeued: room_ref.rules_at(now, minute_ms).prequeue,
                                });
                                prequeued += u64::from(room_ref.rules_at(now, minute_ms).prequeue);
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
                                    if v.prequeued {
                                        admitted_from_prequeue.push((v.global, at));
                                    }
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
                        // Anyone let in this second while the room held more than the limit
                        // in force?
                        let in_force = room_ref.rules_at(now, minute_ms);
                        if sum(|t| &t.admitted) > sm.admitted
                            && total_active > in_force.total_active_users
                        {
                            sm.over_limits_in_force += 1;
                        }
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
                            let minute = s / seconds_per_minute;
                            let rules = room_ref.rules_at(T0 + minute * minute_ms, minute_ms);
                            if admitted - minute_acc[1] > rules.new_users_per_minute {
                                sm.over_limits_in_force += 1;
                            }
                            let row = MinuteRow {
                                minute,
                                phase: match (rules.event, rules.prequeue) {
                                    (None, _) => "room",
                                    (Some(_), true) => "pre-queue",
                                    (Some(_), false)
                                        if rules.shuffle_lanes.is_some()
                                            && minute
                                                == (rules_start(room_ref) - T0) / minute_ms =>
                                    {
                                        "shuffled start"
                                    }
                                    (Some(_), false) => "event",
                                },
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
                let mut order = prequeue_order.lock().unwrap_or_else(|p| p.into_inner());
                order.extend(admitted_from_prequeue);
                let mut sm = summary.lock().unwrap_or_else(|p| p.into_inner());
                sm.prequeued += prequeued;
            });
        }
    });
    let rows = rows.into_inner().map(|r| r.0).unwrap_or_default();
    let mut summary = summary.into_inner().map_err(|_| "a demo thread panicked")?;
    let order = prequeue_order.into_inner().unwrap_or_default();
    summary.prequeue_order_correlation = rank_correlation(&order);
    print_table(&rows, &room, args, minute_ms);
    print_summary(&summary, &room);
    if args.json {
        println!(
            "{}",
            serde_json::to_string(&summary).map_err(|e| e.to_string())?
        );
    }
    Ok(summary)
}

/// When the first event of `room` starts (ms), or `u64::MAX`.
fn rules_start(room: &RoomConfig) -> u64 {
    room.events
        .first()
        .map_or(u64::MAX, |e| e.event_start.millis())
}

fn print_table(rows: &[MinuteRow], room: &RoomConfig, args: &DemoArgs, minute_ms: u64) {
    println!(
        "A flash sale through the real engine, in virtual time: room `{}`, total_active_users {}, \
         new_users_per_minute {}, sessions of {} min, {} queue.",
        room.name,
        room.total_active_users,
        room.new_users_per_minute,
        room.session_duration,
        room.queueing_method.as_str()
    );
    for e in &room.events {
        let minute = |i: velvet_rope::config::Instant| i.millis().saturating_sub(T0) / minute_ms;
        println!(
            "Scheduled event `{}`: pre-queue from minute {}, start at minute {}{}, end at minute {}; \
             total_active_users {} and new_users_per_minute {} during it.",
            e.name,
            e.prequeue_start.map_or(minute(e.event_start), minute),
            minute(e.event_start),
            if e.shuffle_at_event_start {
                " with the pre-queue shuffled"
            } else {
                ""
            },
            minute(e.event_end),
            e.total_active_users.unwrap_or(room.total_active_users),
            e.new_users_per_minute.unwrap_or(room.new_users_per_minute)
        );
    }
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
        "{:>6} {:<14} {:>8} {:>8} {:>7} {:>7} {:>13} {:>8} {:>14}",
        "minute",
        "phase",
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
            "{:>6} {:<14} {:>8} {:>8} {:>7} {:>7} {:>13} {:>8} {:>14}",
            r.minute,
            r.phase,
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
    println!(
        "  phase           the rules in force: the room's own, or its event's (pre-queue: everyone waits;"
    );
    println!(
        "                  shuffled start: the pre-queue is let in in a random order; event: its limits)"
    );
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
    if let Some(rho) = s.prequeue_order_correlation {
        println!(
            "Shuffle: the {} visitors who arrived in the pre-queue were let in in an order unrelated to \
             their arrival: rank correlation {rho:.2} (first come, first served would be 1.00).",
            s.prequeued
        );
    }
    let held = s.limits_held();
    let first = match s.first_queued_at_active_users {
        Some(n) => format!(
            "the first visitor queued at {n} of {} active users ({} %)",
            room.total_active_users,
            n * 100 / room.total_active_users.max(1)
        ),
        None => "nobody had to queue".to_owned(),
    };
    let schedule = if room.events.is_empty() {
        String::new()
    } else {
        format!(
            ", nobody let in over the limits in force{}",
            if s.over_limits_in_force == 0 {
                String::new()
            } else {
                format!(" BUT {} TIMES OVER", s.over_limits_in_force)
            }
        )
    };
    println!(
        "Verdict: {} (at most {} active of {}, at most {} admitted in a minute of {}{schedule}); {}.",
        if held { "limits held" } else { "LIMITS BROKEN" },
        s.max_active_users,
        s.total_active_users,
        s.max_admitted_in_a_minute,
        s.new_users_per_minute,
        first
    );
}
