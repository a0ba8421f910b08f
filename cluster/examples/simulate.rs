//! Three hosts, one room, the same arrivals, three ways of sharing the room's limits, in
//! virtual time (`make bench-cluster`; figures in BENCHMARKS.md):
//!
//! - `store`: this crate (allowances from the in-process store, synced every second);
//! - `division`: each host enforces its active visitors plus a third of the free slots, from
//!   the figures every host published at the last sync (the seed's per-worker division);
//! - `curve`: the same with the seed's utilisation curve (`free / (hosts * utilisation)`).
//!
//! Two crowds: a sale (20 new visitors a second for two minutes, then 3 a second) and an
//! opening (2,000 a second for two seconds, then 3 a second), spread over the hosts 60/30/10 for
//! five minutes, then 10/30/60. An admitted visitor comes back every 30
//! s for one to four minutes; a waiter refreshes every 20 s. Reported per way: admissions,
//! the most the room held over its limits (active visitors, admissions in a minute), and new
//! visitors queued early: while the room had free slots and nobody waited (as the hosts last
//! published: the figures every host sees a second late).

use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::sync::Arc;
use std::time::Duration;

use rand::{Rng, SeedableRng};
use velvet_rope::shares::{per_decider, per_decider_curve};
use velvet_rope::{Config, Engine, FakeClock, Outcome};
use velvet_rope_cluster::{MemoryStore, SyncOptions, SyncRound};

const T0: u64 = 1_800_000_000_000;
const LIMIT: u64 = 1000;
const PER_MINUTE: u64 = 600;
const HOSTS: usize = 3;
const RUN_MS: u64 = 610_000;
/// Steps (of 100 ms) before the first visitor.
const WARM_UP: u64 = 100;

#[derive(Clone, Copy, PartialEq)]
enum Way {
    Store,
    Division,
    Curve,
}

fn config(host: usize, way: Way, total: u64, minute: u64) -> Config {
    let cluster = if way == Way::Store {
        format!(
            "[cluster]\nredis_url = \"redis://unused\"\nhost_id = \"h{host}\"\n\
             sync_interval_ms = 1000\nlease_ms = 5000\n"
        )
    } else {
        String::new()
    };
    Config::from_text(&format!(
        "[[tickets.keys]]\nid = 1\nsecret = \"MDEyMzQ1Njc4OWFiY2RlZjAxMjM0NTY3ODlhYmNkZWY\"\n\
         {cluster}[[rooms]]\nname = \"sale\"\ntotal_active_users = {total}\n\
         new_users_per_minute = {minute}\nsession_duration = 3\nrefresh_interval = 20\n\
         [rooms.cookie]\nsecure = false\n"
    ))
    .expect("a valid configuration")
}

struct Visitor {
    host: usize,
    cookie: Option<String>,
    admitted: bool,
    /// Admitted: when it leaves. Waiting: when it gives up.
    until: u64,
    arrived: u64,
}

#[derive(Default, Debug)]
struct Figures {
    admitted: u64,
    from_queue: u64,
    over_active: u64,
    over_minute: u64,
    queued_early: u64,
    queued: u64,
    wait_ms: u64,
}

fn run(way: Way, rush_per_sec: u64, rush_steps: u64) -> Figures {
    let clock = Arc::new(FakeClock::new(T0));
    let engines: Vec<Arc<Engine>> = (0..HOSTS)
        .map(|h| Arc::new(Engine::new(config(h, way, LIMIT, PER_MINUTE), T0).unwrap()))
        .collect();
    let store = MemoryStore::with_clock(Duration::from_millis(500), clock.clone());
    let mut rounds: Vec<SyncRound> = engines
        .iter()
        .enumerate()
        .map(|(h, e)| {
            let options = SyncOptions {
                host_id: format!("h{h}"),
                interval: Duration::from_secs(1),
                lease: Duration::from_secs(5),
                timeout: Duration::from_millis(500),
                fallback_share: None,
                clock: clock.clone(),
                log: Arc::new(|_| {}),
            };
            SyncRound::new(e.clone(), Box::new(store.clone()), options)
        })
        .collect();
    let mut rng = rand::rngs::StdRng::seed_from_u64(42);
    let mut visitors: Vec<Visitor> = Vec::new();
    let mut due: BinaryHeap<Reverse<(u64, usize)>> = BinaryHeap::new();
    let mut f = Figures::default();
    let (mut active, mut minute, mut waiting) = (0u64, 0u64, 0u64);

    for step in 0..RUN_MS / 100 {
        let now = T0 + step * 100;
        clock.set(now);
        // New visitors this step.
        // Ten quiet seconds first: hosts and store are up before the crowd (a store that knows
        // nobody grants nothing new for a lease).
        let rate = match step {
            0..WARM_UP => 0,
            s if s < WARM_UP + rush_steps => rush_per_sec,
            _ => 3,
        };
        let arrivals = rate / 10 + u64::from(rng.gen_bool((rate % 10) as f64 / 10.0));
        for _ in 0..arrivals {
            let weights = if step < 3000 {
                [0.6, 0.3, 0.1]
            } else {
                [0.1, 0.3, 0.6]
            };
            let x: f64 = rng.gen();
            let host = if x < weights[0] {
                0
            } else if x < weights[0] + weights[1] {
                1
            } else {
                2
            };
            visitors.push(Visitor {
                host,
                cookie: None,
                admitted: false,
                until: now + 600_000,
                arrived: now,
            });
            due.push(Reverse((now, visitors.len() - 1)));
        }
        // Requests due now.
        while let Some(&Reverse((t, i))) = due.peek() {
            if t > now {
                break;
            }
            due.pop();
            let v = &mut visitors[i];
            if now > v.until {
                continue;
            }
            let first = v.cookie.is_none();
            let d = engines[v.host]
                .admit("sale", v.cookie.as_deref(), now)
                .unwrap();
            if let Some(c) = &d.set_cookie {
                v.cookie = Some(c.split(';').next().unwrap_or_default().to_owned());
            }
            match d.outcome {
                Outcome::Admit => {
                    if !v.admitted {
                        v.admitted = true;
                        v.until = now + rng.gen_range(60_000..240_000);
                        f.admitted += 1;
                        if !first {
                            f.from_queue += 1;
                            f.wait_ms += now - v.arrived;
                        }
                    }
                    due.push(Reverse((now + 30_000, i)));
                }
                _ => {
                    if first {
                        f.queued += 1;
                        let free = LIMIT
                            .saturating_sub(active)
                            .min(PER_MINUTE.saturating_sub(minute));
                        f.queued_early += u64::from(free > 0 && waiting == 0);
                    }
                    due.push(Reverse((now + 20_000, i)));
                }
            }
        }
        // Each host syncs (and ticks) once a second, a third of a second apart.
        for h in 0..HOSTS {
            if (step + 3 * h as u64) % 10 != 0 {
                continue;
            }
            match way {
                Way::Store => rounds[h].round(),
                Way::Division | Way::Curve => {
                    // What every host published at its last tick (one clock: one bucket).
                    let stats: Vec<_> = engines.iter().map(|e| e.stats("sale").unwrap()).collect();
                    let all_active: u64 = stats.iter().map(|s| s.active_users).sum();
                    let all_minute: u64 = stats.iter().map(|s| s.admitted_this_minute).sum();
                    let free = LIMIT
                        .saturating_sub(all_active)
                        .min(PER_MINUTE.saturating_sub(all_minute));
                    let part = if way == Way::Division {
                        per_decider(free, HOSTS as u64)
                    } else {
                        per_decider_curve(free, HOSTS as u64, all_active, LIMIT, 1.0)
                    };
                    let total = (stats[h].active_users + part).clamp(1, LIMIT);
                    let minute = (stats[h].admitted_this_minute + part).clamp(1, PER_MINUTE);
                    engines[h].reload(config(h, way, total, minute)).unwrap();
                    engines[h].tick(now);
                }
            }
        }
        {
            let stats: Vec<_> = engines.iter().map(|e| e.stats("sale").unwrap()).collect();
            active = stats.iter().map(|s| s.active_users).sum();
            minute = stats.iter().map(|s| s.admitted_this_minute).sum();
            waiting = stats.iter().map(|s| s.queue_length).sum();
            f.over_active = f.over_active.max(active.saturating_sub(LIMIT));
            f.over_minute = f.over_minute.max(minute.saturating_sub(PER_MINUTE));
        }
    }
    f
}

fn main() {
    println!(
        "3 hosts, 1 s sync, a room of {LIMIT} active / {PER_MINUTE} a minute, 10 virtual minutes"
    );
    for (title, rate, steps) in [
        ("sale: 20 new visitors/s for 2 min, then 3/s", 20, 1200),
        ("opening: 2,000 new visitors/s for 2 s, then 3/s", 2000, 20),
    ] {
        println!("\n{title}");
        println!(
            "{:<9} {:>9} {:>11} {:>12} {:>12} {:>8} {:>13} {:>14}",
            "way",
            "admitted",
            "from queue",
            "over active",
            "over minute",
            "queued",
            "queued early",
            "mean wait (s)"
        );
        for (name, way) in [
            ("store", Way::Store),
            ("division", Way::Division),
            ("curve", Way::Curve),
        ] {
            let f = run(way, rate, steps);
            println!(
                "{:<9} {:>9} {:>11} {:>12} {:>12} {:>8} {:>13} {:>14.1}",
                name,
                f.admitted,
                f.from_queue,
                f.over_active,
                f.over_minute,
                f.queued,
                f.queued_early,
                f.wait_ms as f64 / 1000.0 / f.from_queue.max(1) as f64
            );
        }
    }
}
