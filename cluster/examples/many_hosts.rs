//! What the cluster tier costs a real redis-server as hosts multiply (`make bench-cluster`,
//! figures in BENCHMARKS.md): 10, 100, 1,000 and 5,000 host identities, each syncing each of
//! ten rooms once a second through the production store (`RedisStore`, its Lua script),
//! played by one process.
//!
//! Each host reports a steady share of a busy room (its active visitors, admissions and
//! traffic; the allowance it holds is what the store last granted it, its sequence number the
//! store's last). Before each level is measured, every host's first sync registers it (the
//! store then knows all of them, as in production), and the paced syncs run unmeasured for a
//! warm-up (past the store's learning, with every host's lease current if the server keeps
//! the pace); then they run paced at one per host per second for the level's seconds, over
//! four connections: each host syncs all its rooms in one exchange (a pipeline of one script
//! call per room, as the syncer sends them), or one room per round trip with `--unbatched`.
//! Measured: the server's CPU (`INFO` `used_cpu_sys` + `used_cpu_user`, less what it spent
//! idle over as long just before) per second and per call (one room's sync), the commands it
//! ran per second (the script's own included), and each host's delay from when its sync was
//! due to its last answer (p50, p99: a server that cannot keep the pace shows as syncs
//! answered late, not hidden in a queue of the driver's), and where a call's time goes in the
//! server (`INFO commandstats`): the script's whole run per room, and of it the commands the
//! script runs (`redis.call`: HMGET, HSET, ZADD and the like); the rest is the script's own
//! Lua (MessagePack, numbers turned into arguments, its arithmetic). A level whose calls cannot
//! keep the pace says so (calls made of calls due); its hosts' leases then lapse, and the room
//! knows more hosts than are present.
//!
//! Usage: `many_hosts [redis-url] [--hosts 10,100,1000,5000] [--rooms 10] [--secs 10]
//! [--register-secs 120] [--unbatched]`.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use velvet_rope_cluster::{Params, RedisStore, Report, Store, SyncCall};

/// Connections (threads) the hosts are played over.
const CONNECTIONS: usize = 4;
/// Seconds of paced syncs before a level is measured: past the store's learning (a lease and
/// a learning period after it first saw the room) with every lease current.
const WARM_UP_SECS: u64 = 12;

struct Options {
    url: String,
    hosts: Vec<usize>,
    rooms: usize,
    secs: u64,
    register_secs: u64,
    unbatched: bool,
}

fn options() -> Options {
    let mut o = Options {
        url: "redis://127.0.0.1:6379".to_owned(),
        hosts: vec![10, 100, 1000, 5000],
        rooms: 10,
        secs: 10,
        register_secs: 120,
        unbatched: false,
    };
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        let mut value = || args.next().unwrap_or_else(|| panic!("{a} needs a value"));
        match a.as_str() {
            "--hosts" => {
                o.hosts = value()
                    .split(',')
                    .map(|n| n.trim().parse().expect("--hosts: numbers, comma-separated"))
                    .collect()
            }
            "--rooms" => o.rooms = value().parse().expect("--rooms: a number"),
            "--secs" => o.secs = value().parse().expect("--secs: a number"),
            "--register-secs" => {
                o.register_secs = value().parse().expect("--register-secs: a number")
            }
            "--unbatched" => o.unbatched = true,
            url if !url.starts_with('-') => o.url = url.to_owned(),
            other => panic!(
                "unknown option {other} (usage: many_hosts [redis-url] [--hosts 10,100,...] \
                 [--rooms N] [--secs N] [--register-secs N] [--unbatched])"
            ),
        }
    }
    assert!(
        !o.hosts.is_empty() && o.hosts.iter().all(|&h| (1..=100_000).contains(&h)),
        "--hosts: from 1 to 100,000 each"
    );
    assert!((1..=1000).contains(&o.rooms), "--rooms: from 1 to 1,000");
    assert!((1..=3600).contains(&o.secs), "--secs: from 1 to 3,600");
    assert!(o.register_secs <= 86_400, "--register-secs: at most 86,400");
    o
}

/// What the server counted so far (`INFO all`).
#[derive(Clone, Copy, Default)]
struct Counters {
    /// CPU seconds, system and user.
    cpu: f64,
    /// Commands run (the driver's own `INFO` aside).
    ran: u64,
    /// Microseconds in the sync script (`EVALSHA`, the commands it runs included).
    script_us: u64,
    /// Microseconds in the commands the script runs (every other command; the script's
    /// `INFO replication` included, the driver's few `INFO` calls with it).
    commands_us: u64,
}

/// One figure of an `INFO commandstats` line (`calls`, `usec`).
fn cmdstat(line: &str, name: &str) -> u64 {
    line.split(&format!("{name}="))
        .nth(1)
        .and_then(|rest| rest.split(',').next())
        .and_then(|n| n.parse::<u64>().ok())
        .unwrap_or(0)
}

/// The server's counters so far.
fn server_counters(conn: &mut redis::Connection) -> Counters {
    let info: String = redis::cmd("INFO").arg("all").query(conn).expect("INFO");
    let mut c = Counters::default();
    for line in info.lines() {
        if let Some(v) = line
            .strip_prefix("used_cpu_sys:")
            .or_else(|| line.strip_prefix("used_cpu_user:"))
        {
            c.cpu += v.trim().parse::<f64>().unwrap_or(0.0);
        }
        if !line.starts_with("cmdstat_") {
            continue;
        }
        if !line.starts_with("cmdstat_info:") {
            c.ran += cmdstat(line, "calls");
        }
        if line.starts_with("cmdstat_evalsha:") {
            c.script_us += cmdstat(line, "usec");
        } else {
            c.commands_us += cmdstat(line, "usec");
        }
    }
    c
}

fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .expect("a clock after 1970")
        .as_millis() as u64
}

/// One host's state for one room: what it holds from its last grant.
#[derive(Clone, Copy, Default)]
struct Held {
    seq: u64,
    total: u64,
    minute: u64,
    minute_next: u64,
}

/// The room's limits: 4 visitors per host and room on average, so every host holds a share.
fn params(hosts: usize) -> Params {
    Params {
        total: 4 * hosts as u64,
        minute: 2 * hosts as u64,
        lease: 5_000,
        hold: 600_000,
        learn: 0,
    }
}

/// Host `h`'s steady report on a room, holding `held`.
fn report(h: usize, held: &Held, bucket: u64) -> Report {
    // Hosts differ a little, as their traffic does.
    let active = 2 + (h as u64 % 5);
    Report {
        seq: held.seq,
        b: bucket,
        active,
        admitted: 1,
        traffic: 1 + (h as u64 % 3),
        demand: 1,
        at: held.total,
        am0: held.minute,
        am1: held.minute_next,
        live: Vec::new(),
        held: u64::from(held.seq > 0),
        rc: None,
        rv: Vec::new(),
    }
}

/// Host `h`'s sync of all its rooms, due at `due`: one exchange with the store (as the
/// syncer makes it), or one per room with `unbatched`. Microseconds from `due` to the last
/// answer.
fn sync_host(
    store: &mut RedisStore,
    o: &Options,
    hosts: usize,
    h: usize,
    held: &Mutex<Vec<Held>>,
    due: Instant,
) -> u64 {
    let bucket = now_ms() / 60_000;
    let host = format!("host{h}");
    let params = params(hosts);
    let names: Vec<String> = (0..o.rooms).map(|r| format!("room{r}")).collect();
    let reports: Vec<Report> = {
        let held = held.lock().expect("not poisoned");
        (0..o.rooms)
            .map(|r| report(h, &held[h * o.rooms + r], bucket))
            .collect()
    };
    let calls: Vec<SyncCall<'_>> = (0..o.rooms)
        .map(|r| SyncCall {
            room: &names[r],
            host: &host,
            report: &reports[r],
            params: &params,
        })
        .collect();
    let replies = if o.unbatched {
        calls
            .iter()
            .map(|c| store.sync(c.room, c.host, c.report, c.params))
            .collect()
    } else {
        store.sync_many(&calls)
    };
    let took = due.elapsed().as_micros() as u64;
    assert_eq!(replies.len(), o.rooms, "an answer per room");
    let mut held = held.lock().expect("not poisoned");
    for (r, reply) in replies.into_iter().enumerate() {
        let reply = reply.expect("the store answers");
        held[h * o.rooms + r] = Held {
            seq: reply.seq,
            total: reply.gt,
            minute: reply.gm0,
            minute_next: reply.gm1,
        };
    }
    took
}

struct Level {
    hosts: usize,
    registered: u64,
    due: u64,
    made: u64,
    secs: f64,
    cpu: f64,
    ran: u64,
    /// Microseconds in the script, and in the commands it ran.
    script_us: u64,
    commands_us: u64,
    latencies: Vec<u64>,
}

fn level(o: &Options, hosts: usize) -> Level {
    let prefix = format!("many{hosts}x{}", now_ms());
    let pairs = hosts * o.rooms;
    let held = Arc::new(Mutex::new(vec![Held::default(); pairs]));
    let stores: Vec<RedisStore> = (0..CONNECTIONS)
        .map(|_| RedisStore::new(&o.url, &prefix, Duration::from_secs(30)).expect("a Redis URL"))
        .collect();
    let client = redis::Client::open(o.url.as_str()).expect("a Redis URL");
    let mut conn = client.get_connection().expect("redis-server reachable");
    // What the server spends idle (its own timers), taken off the level's figure.
    let idle = server_counters(&mut conn).cpu;
    std::thread::sleep(Duration::from_secs(2));
    let idle_per_sec = (server_counters(&mut conn).cpu - idle) / 2.0;

    // Every host's first sync, in turn (not measured): the store then knows them all.
    let registered = Arc::new(AtomicU64::new(0));
    let give_up = Instant::now() + Duration::from_secs(o.register_secs);
    let stores: Vec<RedisStore> = std::thread::scope(|s| {
        let workers: Vec<_> = stores
            .into_iter()
            .enumerate()
            .map(|(c, mut store)| {
                let (held, registered) = (held.clone(), registered.clone());
                s.spawn(move || {
                    for h in (c..hosts).step_by(CONNECTIONS) {
                        if Instant::now() > give_up {
                            break;
                        }
                        sync_host(&mut store, o, hosts, h, &held, Instant::now());
                        registered.fetch_add(o.rooms as u64, Ordering::Relaxed);
                    }
                    store
                })
            })
            .collect();
        workers
            .into_iter()
            .map(|w| w.join().expect("a worker"))
            .collect()
    });
    let registered = registered.load(Ordering::Relaxed);

    // Paced syncs, first unmeasured, then measured.
    let (stores, _, _) = paced(stores, hosts, o, &held, WARM_UP_SECS);
    let before = server_counters(&mut conn);
    let started = Instant::now();
    let (_, made, mut latencies) = paced(stores, hosts, o, &held, o.secs);
    let made = made * o.rooms as u64;
    let secs = started.elapsed().as_secs_f64();
    let after = server_counters(&mut conn);
    latencies.sort_unstable();
    // The level's keys go (`RedisStore` puts the prefix in a hash tag: `{prefix:room}`), so
    // that the next level starts from an empty store.
    let keys: Vec<String> = redis::cmd("KEYS")
        .arg(format!("{{{prefix}:*"))
        .query(&mut conn)
        .unwrap_or_default();
    for k in keys {
        let _: Result<(), _> = redis::cmd("UNLINK").arg(k).query(&mut conn);
    }
    Level {
        hosts,
        registered,
        due: (pairs as u64) * o.secs,
        made,
        secs,
        cpu: (after.cpu - before.cpu - idle_per_sec * secs).max(0.0),
        ran: after.ran - before.ran,
        script_us: after.script_us.saturating_sub(before.script_us),
        commands_us: after.commands_us.saturating_sub(before.commands_us),
        latencies,
    }
}

/// `secs` seconds of syncs paced at one per host per second (host `h` due at `h / hosts` of
/// every second; each syncs all its rooms) over `stores`, one thread each, ending on time
/// whether or not they kept the pace. Returns the stores, the hosts' syncs made and each
/// one's delay from when it was due to its last answer (microseconds).
fn paced(
    stores: Vec<RedisStore>,
    hosts: usize,
    o: &Options,
    held: &Mutex<Vec<Held>>,
    secs: u64,
) -> (Vec<RedisStore>, u64, Vec<u64>) {
    let pairs = hosts as u64;
    let connections = stores.len() as u64;
    let started = Instant::now();
    let stop = AtomicBool::new(false);
    std::thread::scope(|s| {
        let workers: Vec<_> = stores
            .into_iter()
            .enumerate()
            .map(|(c, mut store)| {
                let stop = &stop;
                s.spawn(move || {
                    let mut delays = Vec::new();
                    let mut n = c as u64;
                    while !stop.load(Ordering::Relaxed) {
                        let due_at = Duration::from_micros(n * 1_000_000 / pairs);
                        if due_at >= Duration::from_secs(secs) {
                            break;
                        }
                        if let Some(wait) = due_at.checked_sub(started.elapsed()) {
                            std::thread::sleep(wait);
                        }
                        let h = (n % pairs) as usize;
                        delays.push(sync_host(&mut store, o, hosts, h, held, started + due_at));
                        n += connections;
                    }
                    (store, delays)
                })
            })
            .collect();
        // A level that cannot keep the pace ends on time all the same.
        while started.elapsed() < Duration::from_secs(secs) {
            std::thread::sleep(Duration::from_millis(20));
        }
        stop.store(true, Ordering::Relaxed);
        let mut stores = Vec::new();
        let mut delays = Vec::new();
        for w in workers {
            let (store, mine) = w.join().expect("a worker");
            stores.push(store);
            delays.extend(mine);
        }
        let made = delays.len() as u64;
        (stores, made, delays)
    })
}

fn percentile(sorted: &[u64], p: f64) -> u64 {
    if sorted.is_empty() {
        return 0;
    }
    sorted[((sorted.len() - 1) as f64 * p).round() as usize]
}

fn main() {
    let o = options();
    println!(
        "host identities syncing {} rooms once a second each against {} ({}), {} s per level \
         after {WARM_UP_SECS} s of warm-up, {CONNECTIONS} connections",
        o.rooms,
        o.url,
        if o.unbatched {
            "one round trip per room"
        } else {
            "one round trip per host"
        },
        o.secs
    );
    println!(
        "{:>6} {:>11} {:>17} {:>13} {:>16} {:>14} {:>13} {:>13} {:>17}",
        "hosts",
        "registered",
        "calls (of due)",
        "redis CPU %",
        "CPU us per call",
        "commands/s",
        "p50 delay us",
        "p99 delay us",
        "script us (cmds)"
    );
    for &hosts in &o.hosts {
        let l = level(&o, hosts);
        let pairs = (l.hosts * o.rooms) as u64;
        println!(
            "{:>6} {:>11} {:>17} {:>13.1} {:>16.1} {:>14.0} {:>13} {:>13} {:>17}",
            l.hosts,
            if l.registered == pairs {
                "all".to_owned()
            } else {
                format!("{} of {pairs}", l.registered)
            },
            format!("{} ({:.0} %)", l.made, 100.0 * l.made as f64 / l.due as f64),
            100.0 * l.cpu / l.secs,
            1e6 * l.cpu / l.made.max(1) as f64,
            l.ran as f64 / l.secs,
            percentile(&l.latencies, 0.50),
            percentile(&l.latencies, 0.99),
            format!(
                "{:.1} ({:.1})",
                l.script_us as f64 / l.made.max(1) as f64,
                l.commands_us as f64 / l.made.max(1) as f64
            ),
        );
    }
}
