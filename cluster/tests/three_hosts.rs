//! Three engines as three hosts sharing one room through a real `redis-server`.

mod common;

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use velvet_rope::Outcome;

use common::{host_config, now, Host, RedisServer, LEARNING_MS};

/// Skewed traffic (70 / 20 / 10 %) of 300 new visitors against a room of 30, waiters
/// refreshing as browsers do: exactly 30 are admitted across the hosts (directly or from the
/// queue), never more at any time, and the store's keys are one hash with a hash tag that
/// expires by itself.
#[test]
fn skewed_traffic_admits_exactly_the_limit() {
    let redis = RedisServer::start();
    let room = "total_active_users = 30\nnew_users_per_minute = 100000\nsession_duration = 600";
    let hosts: Vec<Arc<Host>> = ["a", "b", "c"]
        .iter()
        .map(|h| Arc::new(Host::new(&host_config(&redis.url(), h, room, ""))))
        .collect();
    // The store starts learning (it knows nobody's holdings): nothing grows meanwhile.
    std::thread::sleep(Duration::from_millis(LEARNING_MS));

    let admitted = Arc::new(AtomicU64::new(0));
    let queued = Arc::new(AtomicU64::new(0));
    let waiters = Arc::new(Mutex::new(Vec::<(usize, String)>::new()));
    // Admissions when the first visitor was queued: the room's slots free elsewhere then are
    // what the sync interval costs (allowances follow traffic a sync late).
    let at_first_queue = Arc::new(AtomicU64::new(u64::MAX));
    let arrivals = [210u64, 60, 30];
    let started = Instant::now();
    let threads: Vec<_> = hosts
        .iter()
        .zip(arrivals)
        .enumerate()
        .map(|(i, (h, n))| {
            let (h, admitted, queued) = (h.clone(), admitted.clone(), queued.clone());
            let (waiters, at_first_queue) = (waiters.clone(), at_first_queue.clone());
            std::thread::spawn(move || {
                // Spread over about three seconds.
                let pause = Duration::from_micros(3_000_000 / n);
                for _ in 0..n {
                    match h.arrive() {
                        (Outcome::Admit, _) => admitted.fetch_add(1, Ordering::SeqCst),
                        (Outcome::Queue, Some(cookie)) => {
                            let ahead = queued.fetch_add(1, Ordering::SeqCst);
                            if ahead == 0 {
                                let n = admitted.load(Ordering::SeqCst);
                                at_first_queue.store(n, Ordering::SeqCst);
                            }
                            waiters.lock().unwrap().push((i, cookie));
                            ahead
                        }
                        other => panic!("a fifo room queues with a ticket: {other:?}"),
                    };
                    std::thread::sleep(pause);
                }
            })
        })
        .collect();
    let mut most = 0;
    while threads.iter().any(|t| !t.is_finished()) {
        let active: u64 = hosts.iter().map(|h| h.active()).sum();
        most = most.max(active);
        assert!(admitted.load(Ordering::SeqCst) <= 30);
        std::thread::sleep(Duration::from_millis(10));
    }
    for t in threads {
        t.join().unwrap();
    }
    let direct = admitted.load(Ordering::SeqCst);
    // Waiters refresh (every 100 ms here) until the room is full, then a second more.
    let mut full_at = None;
    let until = Instant::now() + Duration::from_secs(15);
    while Instant::now() < until {
        let mut ws = waiters.lock().unwrap();
        let mut still = Vec::new();
        for (i, cookie) in ws.drain(..) {
            match hosts[i].again(&cookie) {
                (Outcome::Admit, _) => {
                    admitted.fetch_add(1, Ordering::SeqCst);
                }
                (_, set) => still.push((i, set.unwrap_or(cookie))),
            }
        }
        *ws = still;
        drop(ws);
        let active: u64 = hosts.iter().map(|h| h.active()).sum();
        most = most.max(active);
        let n = admitted.load(Ordering::SeqCst);
        assert!(n <= 30, "{n} admitted");
        match full_at {
            None if n == 30 => full_at = Some(Instant::now()),
            Some(t) if t.elapsed() > Duration::from_secs(1) => break,
            _ => {}
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    let took = full_at.map(|t| t - started);
    assert_eq!(admitted.load(Ordering::SeqCst), 30, "full after {took:?}");
    eprintln!(
        "30 admitted ({direct} on arrival, the rest from the queue) {took:?} after the first \
         of 300 arrivals"
    );
    assert_eq!(queued.load(Ordering::SeqCst), 300 - direct);
    // Slots free elsewhere when the first visitor queued: allowances follow traffic a sync
    // late, and a host's unused one returns at its next sync, so they are what two sync
    // intervals of arrivals explain (100 new visitors a second, 100 ms syncs: 20).
    let at_first = at_first_queue.load(Ordering::SeqCst);
    eprintln!("the first visitor queued with {at_first} of 30 admitted");
    assert!(at_first >= 30 - 20, "queued with {at_first} of 30 admitted");
    assert!(most <= 30, "at most {most} active");
    for h in &hosts {
        let s = h.sync.status();
        assert!(s.syncs > 20 && s.failures == 0, "{s:?}");
        assert_eq!(s.hosts, 3);
    }
    let mut conn = redis.connection();
    let mut keys: Vec<String> = redis::cmd("KEYS").arg("*").query(&mut conn).unwrap();
    keys.sort();
    assert_eq!(
        keys,
        ["{vr:r}:d", "{vr:r}:s"],
        "the room's deadlines and state"
    );
    for key in &keys {
        let ttl: i64 = redis::cmd("PTTL").arg(key).query(&mut conn).unwrap();
        assert!(ttl > 0, "{key} expires by itself");
    }
}

/// FIFO across hosts: waiters who arrived earlier at one host are admitted before waiters
/// who arrived later at another, even when the later one's host has allowance to spare.
/// The store's FIFO covers the waiters it has seen: a host reports its waiters at its next
/// sync, and another host admits on the allowance it holds until its own next sync after
/// that (see the crate documentation). So each group arrives once the previous host has
/// synced twice since its group arrived (one sync may have read its report just before),
/// and then this host twice (its grant written, then ticked in).
#[test]
fn fifo_holds_across_hosts() {
    let redis = RedisServer::start();
    let room = "total_active_users = 4\nnew_users_per_minute = 100000\nsession_duration = 2";
    let hosts: Vec<Arc<Host>> = ["a", "b", "c"]
        .iter()
        .map(|h| Arc::new(Host::new(&host_config(&redis.url(), h, room, ""))))
        .collect();
    std::thread::sleep(Duration::from_millis(LEARNING_MS));

    // Arrival bucket and host of each visitor, and when it got in.
    struct Visitor {
        bucket: u64,
        host: usize,
        cookie: Option<String>,
        arrived_at: Instant,
        admitted_at: Option<Instant>,
    }
    fn describe(vs: &[Visitor], start: Instant) -> String {
        vs.iter()
            .map(|v| {
                format!(
                    "bucket {} at host {}: arrived at {:?}, admitted at {:?}",
                    v.bucket,
                    v.host,
                    v.arrived_at - start,
                    v.admitted_at.map(|t| t - start)
                )
            })
            .collect::<Vec<_>>()
            .join("\n")
    }
    let visitors = Arc::new(Mutex::new(Vec::<Visitor>::new()));
    let start = Instant::now();
    let timeline = {
        let visitors = visitors.clone();
        move || describe(&visitors.lock().unwrap(), start)
    };
    // Everyone polls every 100 ms; admitted visitors then go quiet (their sessions end).
    let poll = {
        let (visitors, hosts) = (visitors.clone(), hosts.clone());
        move || {
            let mut vs = visitors.lock().unwrap();
            for v in vs.iter_mut().filter(|v| v.admitted_at.is_none()) {
                let cookie = v.cookie.clone().expect("a waiter holds a ticket");
                let (outcome, set) = hosts[v.host].again(&cookie);
                if let Some(c) = set {
                    v.cookie = Some(c);
                }
                if outcome == Outcome::Admit {
                    v.admitted_at = Some(Instant::now());
                }
            }
        }
    };
    let syncs = |host: usize| hosts[host].sync.status().syncs;
    // Polls until `done`, or fails with the visitors' timeline.
    let poll_until = |what: &str, done: &dyn Fn() -> bool| {
        let deadline = Instant::now() + Duration::from_secs(30);
        while !done() {
            assert!(
                Instant::now() < deadline,
                "timed out waiting for {what}; the visitors:\n{}",
                timeline()
            );
            poll();
            std::thread::sleep(Duration::from_millis(100));
        }
    };
    let mut reported_from = 0;
    for (host, at) in hosts.iter().enumerate() {
        if host > 0 {
            poll_until("the previous host to report its waiters", &|| {
                syncs(host - 1) >= reported_from + 2
            });
            let learned_from = syncs(host);
            poll_until("this host to learn of them", &|| {
                syncs(host) >= learned_from + 2
            });
        }
        // Four visitors per host, in a bucket of its own: a, then b, then c.
        let bucket = now() / 1000;
        for _ in 0..4 {
            let (outcome, cookie) = at.arrive();
            let arrived_at = Instant::now();
            visitors.lock().unwrap().push(Visitor {
                bucket,
                host,
                cookie,
                arrived_at,
                admitted_at: (outcome == Outcome::Admit).then_some(arrived_at),
            });
        }
        reported_from = syncs(host);
        let next = (bucket + 1) * 1000 + 50;
        poll_until("the next bucket", &|| now() >= next);
    }
    poll_until("every waiter to be admitted", &|| {
        visitors
            .lock()
            .unwrap()
            .iter()
            .all(|v| v.admitted_at.is_some())
    });
    let vs = visitors.lock().unwrap();
    let slack = Duration::from_millis(250);
    let mut contested = 0;
    for v in vs.iter() {
        for earlier in vs.iter().filter(|e| e.bucket < v.bucket) {
            let (e_in, v_in) = (earlier.admitted_at.unwrap(), v.admitted_at.unwrap());
            if v.arrived_at < e_in {
                contested += 1;
            }
            assert!(
                e_in <= v_in + slack,
                "a visitor of bucket {} at host {} got in {:?} before one of bucket {} at host {}; \
                 the visitors:\n{}",
                v.bucket,
                v.host,
                e_in - v_in,
                earlier.bucket,
                earlier.host,
                describe(&vs, start)
            );
        }
    }
    // Some later visitor arrived while an earlier one still waited: the order was at stake.
    assert!(contested > 0, "nobody waited when a later group arrived");
}
