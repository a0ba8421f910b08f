//! Revocations across hosts through a real `redis-server`: a session the origin ended at one
//! host is refused at every other host from its next sync, also after the store restarted
//! without its data; the host that revoked freed the seat, and a host that counted the visitor
//! afresh frees its own.

mod common;

use std::time::Duration;

use velvet_rope::{Outcome, Revocation, TicketError};

use common::{host_config, now, wait_for, Host, RedisServer, LEARNING_MS};

const ROOM: &str = "total_active_users = 10\nnew_users_per_minute = 100000\n\
                    session_duration = 600\nenabled_origin_commands = [\"revoke\"]";

/// The ticket value of a `name=value` cookie pair.
fn ticket(cookie: &str) -> &str {
    cookie.split_once('=').unwrap().1
}

fn refused_at(host: &Host, cookie: &str) -> bool {
    let d = host.engine.admit("r", Some(cookie), now()).unwrap();
    d.ticket_error == Some(TicketError::Revoked)
}

fn received(host: &Host) -> u64 {
    let stats: serde_json::Value = serde_json::from_str(&host.engine.stats_json()).unwrap();
    stats["rooms"]["r"]["revocations"]["received"]
        .as_u64()
        .unwrap()
}

#[test]
fn a_session_revoked_at_one_host_is_refused_at_the_others_within_a_sync() {
    let mut redis = RedisServer::start();
    let port = redis.port;
    let hosts: Vec<Host> = ["a", "b", "c"]
        .iter()
        .map(|h| Host::new(&host_config(&redis.url(), h, ROOM, "")))
        .collect();
    std::thread::sleep(Duration::from_millis(LEARNING_MS));
    let mut cookies = Vec::new();
    while cookies.len() < 2 {
        if let (Outcome::Admit, Some(c)) = hosts[0].arrive() {
            cookies.push(c);
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    // The visitor goes on to host b (a load balancer without affinity): welcome there, and
    // counted there afresh.
    let tick = |h: &Host| h.engine.tick(now());
    tick(&hosts[1]);
    let before = hosts[1].active();
    assert_eq!(hosts[1].again(&cookies[0]).0, Outcome::Admit);
    tick(&hosts[1]);
    assert_eq!(hosts[1].active(), before + 1, "counted afresh at b");
    assert_eq!(
        hosts[0]
            .engine
            .revoke("r", ticket(&cookies[0]).as_bytes(), now())
            .unwrap(),
        Revocation::Revoked
    );
    assert!(
        refused_at(&hosts[0], &cookies[0]),
        "at once where it was revoked"
    );
    // Syncs run every 100 ms: b and c learn of it within a few.
    wait_for(3, "b and c to receive the revocation", || {
        received(&hosts[1]) == 1 && received(&hosts[2]) == 1
    });
    // b counted the visitor afresh: the revocation frees that seat there too, at b's next
    // tick (c never counted it: nothing changes there). Checked before b refuses the ticket
    // (a refused visitor arrives anew: a new seat).
    tick(&hosts[1]);
    assert_eq!(
        hosts[1].active(),
        before,
        "b frees the seat it counted afresh"
    );
    assert!(refused_at(&hosts[1], &cookies[0]) && refused_at(&hosts[2], &cookies[0]));
    assert_eq!(
        received(&hosts[0]),
        0,
        "its own revocation does not come back"
    );
    // The other session goes on everywhere.
    for h in &hosts {
        let d = h.engine.admit("r", Some(&cookies[1]), now()).unwrap();
        assert_eq!((d.outcome, d.ticket_error), (Outcome::Admit, None));
    }

    // A revocation made while the store is down waits in the host's outbox; the store comes
    // back without its data, and the revocation still reaches everyone (the log's positions
    // are the server's clock: they go on past the hosts' cursors).
    redis.kill();
    assert_eq!(
        hosts[0]
            .engine
            .revoke("r", ticket(&cookies[1]).as_bytes(), now())
            .unwrap(),
        Revocation::Revoked
    );
    std::thread::sleep(Duration::from_millis(300));
    let _redis = RedisServer::start_on(port);
    wait_for(5, "b and c to refuse the second revoked ticket", || {
        refused_at(&hosts[1], &cookies[1]) && refused_at(&hosts[2], &cookies[1])
    });
    assert_eq!(received(&hosts[1]), 2);
}
