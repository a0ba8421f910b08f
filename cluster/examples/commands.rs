//! Redis commands a host sends per second, at 10 and at 100,000 admissions a second
//! (`make bench-cluster` starts a redis-server and passes its URL; figures in BENCHMARKS.md).
//!
//! One host with one room syncs every second through the real Redis store while new visitors
//! are admitted at the given rate for ten seconds; the server's own count of commands
//! (`INFO commandstats`) is read before and after: the commands the host sent (script calls)
//! and all the server ran (the script's own reads and writes included).

use std::sync::Arc;
use std::time::{Duration, Instant};

use velvet_rope::{Clock, Engine, Outcome, SystemClock};
use velvet_rope_cluster::Syncer;

const SECS: u64 = 10;

/// Commands the server counted: those clients sent (script calls and loads), and all it ran
/// (the script's own commands included).
fn commands(conn: &mut redis::Connection) -> (u64, u64) {
    let info: String = redis::cmd("INFO").arg("commandstats").query(conn).unwrap();
    let mut sent = 0;
    let mut ran = 0;
    for line in info.lines().filter(|l| l.starts_with("cmdstat_")) {
        let name = line.split(':').next().unwrap_or_default();
        if name == "cmdstat_info" {
            continue;
        }
        let calls = line
            .split("calls=")
            .nth(1)
            .and_then(|rest| rest.split(',').next())
            .and_then(|n| n.parse::<u64>().ok())
            .unwrap_or(0);
        ran += calls;
        if matches!(name, "cmdstat_evalsha" | "cmdstat_eval" | "cmdstat_script") {
            sent += calls;
        }
    }
    (sent, ran)
}

fn run(url: &str, rate: u64) -> (f64, f64, f64) {
    let config = format!(
        "[cluster]\nredis_url = \"{url}\"\nhost_id = \"bench\"\nkey_prefix = \"bench{rate}\"\n\
         [[rooms]]\nname = \"r\"\ntotal_active_users = 1048576\n\
         new_users_per_minute = 4000000000\nsession_duration = 1\n"
    );
    let engine = Arc::new(Engine::from_text(&config, SystemClock.now_ms()).unwrap());
    let client = redis::Client::open(url).unwrap();
    let mut conn = client.get_connection().unwrap();
    let sync = Syncer::from_engine(engine.clone()).unwrap().unwrap();
    // A store that knows nobody grants nothing new for a lease (5 s): start after it.
    std::thread::sleep(Duration::from_secs(6));
    let before = commands(&mut conn);
    let started = Instant::now();
    let mut admitted = 0u64;
    let mut sent = 0u64;
    while started.elapsed() < Duration::from_secs(SECS) {
        // Paced in 1 ms steps.
        let due = (started.elapsed().as_micros() as u64 * rate) / 1_000_000;
        let now = SystemClock.now_ms();
        while sent < due {
            sent += 1;
            admitted += u64::from(engine.admit("r", None, now).unwrap().outcome == Outcome::Admit);
        }
        std::thread::sleep(Duration::from_millis(1));
    }
    let after = commands(&mut conn);
    let secs = started.elapsed().as_secs_f64();
    drop(sync);
    (
        admitted as f64 / secs,
        (after.0 - before.0) as f64 / secs,
        (after.1 - before.1) as f64 / secs,
    )
}

fn main() {
    let url = std::env::args()
        .nth(1)
        .unwrap_or_else(|| "redis://127.0.0.1:6379".to_owned());
    println!("one host, one room, 1 s sync, {SECS} s per rate, against {url}");
    println!(
        "{:>20} {:>20} {:>24} {:>24}",
        "arrivals per second",
        "admitted per second",
        "commands sent per second",
        "commands run per second"
    );
    for rate in [10, 100_000] {
        let (admitted, sent, ran) = run(&url, rate);
        println!("{rate:>20} {admitted:>20.0} {sent:>24.2} {ran:>24.2}");
    }
}
