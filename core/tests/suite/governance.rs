//! One configuration governs a room's shared counters at a time: the newest engine to attach
//! them. Two applications on one state file with other limits used to refill the pools in
//! turn, each with its own limits (a room of 2 beside a room of 6 admitted 6 however it was
//! read); now the room follows one of them exactly, and the other engine knows it does not
//! govern.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;

use velvet_rope::{Config, Engine, Outcome};

const T0: u64 = 1_800_000_000_000;

fn config(limit: u64) -> Config {
    Config::from_text(&format!(
        "[settings]\nbucket_width_secs = 1\n[[tickets.keys]]\nid = 1\nsecret = \
         \"MDEyMzQ1Njc4OWFiY2RlZjAxMjM0NTY3ODlhYmNkZWY\"\n[[rooms]]\nname = \"r\"\n\
         total_active_users = {limit}\nnew_users_per_minute = 1000\nsession_duration = 600\n\
         refresh_interval = 1\n[rooms.cookie]\nsecure = false\n"
    ))
    .unwrap()
}

/// Both engines tick and admit at once, from two threads each, for a while: exactly `limit`
/// visitors get in.
fn crowd(a: &Arc<Engine>, b: &Arc<Engine>) -> u64 {
    let admitted = Arc::new(AtomicU64::new(0));
    let stop = Arc::new(AtomicBool::new(false));
    std::thread::scope(|s| {
        for e in [a, b, a, b] {
            let (e, admitted, stop) = (e.clone(), admitted.clone(), stop.clone());
            s.spawn(move || {
                let mut t = T0 + 10;
                while !stop.load(Ordering::Relaxed) {
                    e.tick(t);
                    for _ in 0..5 {
                        if e.admit("r", None, t).unwrap().outcome == Outcome::Admit {
                            admitted.fetch_add(1, Ordering::Relaxed);
                        }
                    }
                    t += 1;
                }
            });
        }
        std::thread::sleep(std::time::Duration::from_millis(300));
        stop.store(true, Ordering::Relaxed);
    });
    admitted.load(Ordering::Relaxed)
}

#[test]
fn the_newest_configuration_governs_a_shared_room() {
    for (first, second) in [(2, 6), (6, 2)] {
        let dir = std::env::temp_dir().join(format!(
            "vr-governance-{}-{first}-{second}",
            std::process::id()
        ));
        let _ = std::fs::remove_file(&dir);
        let a = Arc::new(Engine::open_state_file(config(first), &dir, T0).unwrap());
        let b = Arc::new(Engine::open_state_file(config(second), &dir, T0).unwrap());
        assert!(!a.governs("r").unwrap() && b.governs("r").unwrap());
        assert_eq!(
            crowd(&a, &b),
            second,
            "a room of {first} beside a room of {second}: the newest holds"
        );
        assert!(
            a.stats_json().contains("\"governing\":false"),
            "{}",
            a.stats_json()
        );
        // A reload is an attach: the reloaded engine governs now (and the room keeps who is
        // in: nobody more gets in under the smaller limit).
        a.reload(config(first)).unwrap();
        assert!(a.governs("r").unwrap() && !b.governs("r").unwrap());
        // The governing engine goes away: the other takes the room over once it has not
        // been advanced for three tick periods (3 s here).
        drop(a);
        std::thread::sleep(std::time::Duration::from_millis(3200));
        b.tick(T0 + 5000);
        assert!(b.governs("r").unwrap(), "an orphaned room is taken over");
        let _ = std::fs::remove_file(&dir);
    }
}
