//! The store stalled (SIGSTOP), killed (SIGKILL) and restarted empty, mid-run: nothing
//! crashes, no request waits, the outage is logged once, and counts recover with no
//! over-allocation.

mod common;

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use velvet_rope::admission::EventKind;
use velvet_rope::{Engine, Outcome};
use velvet_rope_cluster::{RedisStore, SyncOptions, Syncer};

use common::{cookie_value, host_config, now, wait_for, RedisServer};

struct LoggedHost {
    engine: Arc<Engine>,
    sync: Syncer,
    log: Arc<Mutex<Vec<String>>>,
}

fn host(url: &str, id: &str) -> LoggedHost {
    let room = "total_active_users = 20\nnew_users_per_minute = 100000\nsession_duration = 600";
    let text = host_config(url, id, room, "")
        .replace("timeout_ms = 200", "timeout_ms = 200\nfallback_share = 0.0");
    let engine = Arc::new(Engine::from_text(&text, now()).unwrap());
    let config = engine.config();
    let c = config.cluster.as_ref().unwrap();
    let log = Arc::new(Mutex::new(Vec::new()));
    let mut options = SyncOptions::from_config(c);
    let sink = log.clone();
    options.log = Arc::new(move |line: &str| sink.lock().unwrap().push(line.to_owned()));
    let store = RedisStore::new(
        &c.redis_url,
        &c.key_prefix,
        Duration::from_millis(c.timeout_ms),
    )
    .unwrap();
    let sync = Syncer::start(engine.clone(), Box::new(store), options);
    LoggedHost { engine, sync, log }
}

/// Arrivals at every host, round robin, for `dur`; the admissions, and the slowest decision.
/// New visitors at every host, round robin, for `dur`; queued ones come back with their
/// ticket every 100 ms, as the waiting page makes browsers do (visitors who never came back
/// would hold their places and keep the room's newcomers queued behind them). The admissions,
/// and the slowest decision.
fn arrivals(
    hosts: &[LoggedHost],
    waiting: &mut Vec<(usize, String)>,
    dur: Duration,
) -> (u64, Duration) {
    let (mut admitted, mut slowest) = (0, Duration::ZERO);
    let until = Instant::now() + dur;
    let mut last_poll = Instant::now();
    while Instant::now() < until {
        let mut decide = |i: usize, cookie: Option<&str>| {
            let t = Instant::now();
            let d = hosts[i].engine.admit("r", cookie, now()).unwrap();
            slowest = slowest.max(t.elapsed());
            d
        };
        for i in 0..hosts.len() {
            let d = decide(i, None);
            match (d.outcome, d.set_cookie) {
                (Outcome::Admit, _) => admitted += 1,
                (_, Some(c)) => waiting.push((i, cookie_value(c))),
                _ => {}
            }
        }
        if last_poll.elapsed() >= Duration::from_millis(100) {
            last_poll = Instant::now();
            let mut still = Vec::new();
            for (i, cookie) in waiting.drain(..) {
                let d = decide(i, Some(&cookie));
                if d.outcome == Outcome::Admit {
                    admitted += 1;
                } else {
                    still.push((i, d.set_cookie.map(cookie_value).unwrap_or(cookie)));
                }
            }
            *waiting = still;
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    (admitted, slowest)
}

#[test]
fn stalled_killed_and_restarted_store() {
    let mut redis = RedisServer::start();
    let hosts: Vec<LoggedHost> = ["a", "b", "c"]
        .iter()
        .map(|h| host(&redis.url(), h))
        .collect();
    std::thread::sleep(Duration::from_millis(common::LEARNING_MS));
    let mut waiting = Vec::new();
    let mut total = 0;
    // Half the room fills while the store answers.
    let until = Instant::now() + Duration::from_secs(10);
    while total < 10 && Instant::now() < until {
        for h in &hosts {
            if total < 10 && h.engine.admit("r", None, now()).unwrap().outcome == Outcome::Admit {
                total += 1;
            }
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    assert_eq!(total, 10);

    // Stalled: requests go on being decided, on the last grants, then on the fallback share
    // (none here: exactness over availability); the outage is logged once per host.
    redis.pause();
    let (got, slowest) = arrivals(&hosts, &mut waiting, Duration::from_millis(1500));
    total += got;
    assert!(
        slowest < Duration::from_millis(200),
        "a decision took {slowest:?}"
    );
    for h in &hosts {
        let s = h.sync.status();
        assert!(s.in_outage && s.outages == 1, "{s:?}");
        assert!(
            s.last_error
                .as_deref()
                .unwrap_or("")
                .contains("did not answer"),
            "{s:?}"
        );
        assert_eq!(
            h.log.lock().unwrap().len(),
            1,
            "{:?}",
            h.log.lock().unwrap()
        );
    }
    assert!(total <= 20);
    // The engine's events carry it too, for the host's logger: one line per host.
    let outage_events = |kind: EventKind| {
        hosts
            .iter()
            .map(|h| {
                h.engine
                    .drain_events()
                    .into_iter()
                    .filter(|e| e.kind == kind)
                    .count()
            })
            .collect::<Vec<_>>()
    };
    assert_eq!(
        outage_events(EventKind::ClusterOutageBegan),
        vec![1; hosts.len()]
    );
    redis.resume();
    wait_for(10, "syncs to resume", || {
        hosts.iter().all(|h| !h.sync.status().in_outage)
    });
    assert_eq!(
        outage_events(EventKind::ClusterOutageEnded),
        vec![1; hosts.len()]
    );

    // Killed and restarted empty: the store learns (another run_id), then hands out the rest.
    redis.kill();
    let (got, slowest) = arrivals(&hosts, &mut waiting, Duration::from_millis(500));
    total += got;
    assert!(
        slowest < Duration::from_millis(200),
        "a decision took {slowest:?}"
    );
    let port = redis.port;
    let redis = RedisServer::start_on(port);
    let until = Instant::now() + Duration::from_secs(15);
    while total < 20 && Instant::now() < until {
        total += arrivals(&hosts, &mut waiting, Duration::from_millis(100)).0;
    }
    // A little longer: nothing more gets in.
    total += arrivals(&hosts, &mut waiting, Duration::from_millis(700)).0;
    assert_eq!(total, 20, "exactly the room, across a stall and a restart");
    let active: u64 = hosts
        .iter()
        .map(|h| h.engine.stats("r").unwrap().active_users)
        .sum();
    assert!(active <= 20, "{active} active");
    for h in &hosts {
        assert_eq!(h.sync.status().outages, 2, "{:?}", h.log.lock().unwrap());
        // The room's metrics count them too, with the syncs by outcome.
        let text = h.engine.metrics_text();
        let sample = |line: &str| {
            text.lines()
                .find(|l| l.starts_with(line))
                .and_then(|l| l.rsplit(' ').next())
                .map(|v| v.parse::<f64>().unwrap())
                .unwrap_or_else(|| panic!("no {line} in\n{text}"))
        };
        assert_eq!(
            sample("velvet_rope_cluster_outages_total{room=\"r\"} "),
            2.0
        );
        let status = h.sync.status();
        assert_eq!(
            sample("velvet_rope_cluster_syncs_total{room=\"r\",outcome=\"failed\"} "),
            status.failures as f64
        );
        assert_eq!(
            sample("velvet_rope_cluster_syncs_total{room=\"r\",outcome=\"ok\"} "),
            status.syncs as f64
        );
    }
    drop(redis);
}
