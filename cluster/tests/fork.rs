//! An engine with a `[cluster]` table and its sync loop, built before a fork: the child drops
//! the parent's loop without touching the parent's thread, and starts one of its own.
//! (Before: the child panicked joining a thread that does not exist there.)

mod common;

use std::sync::Arc;
use std::time::Duration;

use velvet_rope::{Clock, Engine};
use velvet_rope_cluster::{MemoryStore, SyncOptions, Syncer};

const CONFIG: &str = r#"
[cluster]
redis_url = "redis://127.0.0.1:1"
host_id = "fork"
sync_interval_ms = 20
lease_ms = 600
timeout_ms = 100
[[rooms]]
name = "r"
total_active_users = 10
new_users_per_minute = 100
"#;

#[test]
fn a_child_drops_its_parents_sync_loop_and_runs_its_own() {
    let engine = Arc::new(Engine::from_text(CONFIG, velvet_rope::SystemClock.now_ms()).unwrap());
    let c = engine.config().cluster.clone().unwrap();
    let store = MemoryStore::new(Duration::from_millis(100));
    let sync = Syncer::start(
        engine.clone(),
        Box::new(store.clone()),
        SyncOptions::from_config(&c),
    );
    std::thread::sleep(Duration::from_millis(100));
    assert!(sync.running_here());
    // SAFETY: the child drops the loop, starts another on the same store and leaves with
    // `_exit`.
    let pid = unsafe { libc::fork() };
    assert!(pid >= 0);
    if pid == 0 {
        // SAFETY: alarm(2) only arms a timer that ends this child if it hangs.
        unsafe { libc::alarm(10) };
        let code = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            if sync.running_here() {
                return 2;
            }
            drop(sync);
            let own = Syncer::start(
                engine.clone(),
                Box::new(store.clone()),
                SyncOptions::from_config(&c),
            );
            std::thread::sleep(Duration::from_millis(200));
            if !own.running_here() || own.status().syncs == 0 {
                return 3;
            }
            drop(own);
            0
        }))
        .unwrap_or(9);
        // SAFETY: ends the child at once.
        unsafe { libc::_exit(code) };
    }
    let mut status = 0;
    // SAFETY: `pid` is our child.
    unsafe { libc::waitpid(pid, &mut status, 0) };
    assert!(
        libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0,
        "the child failed: wait status {status}"
    );
    assert!(sync.status().syncs > 0, "the parent's loop goes on");
}

/// New visitors (no cookie) for `dur`, ticking as a front door would: how many were admitted.
fn crowd(engine: &Engine, dur: Duration) -> u64 {
    let mut admitted = 0;
    let until = std::time::Instant::now() + dur;
    while std::time::Instant::now() < until {
        engine.tick(velvet_rope::SystemClock.now_ms());
        if engine
            .admit("r", None, velvet_rope::SystemClock.now_ms())
            .unwrap()
            .outcome
            == velvet_rope::Outcome::Admit
        {
            admitted += 1;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    admitted
}

/// An engine whose counters live in its own memory, forked (gunicorn `--preload` without a
/// state file): the child's counters are a copy of the parent's, the same incarnation and the
/// same grant. Before, parent and child went to the store as one host with two sets of
/// counters, and each enforced the same reservation in full: 20 in a room of 10 with no fault
/// at all (found by an adversarial review). The child's first tick makes the copy its own:
/// another incarnation (another host to the store), no free slots, no grant; until then it
/// claims nothing.
#[test]
fn a_forked_engine_with_its_own_counters_is_another_host() {
    let redis = common::RedisServer::start();
    let config = common::host_config(
        &redis.url(),
        "preload",
        "total_active_users = 10\nnew_users_per_minute = 1000\nsession_duration = 30\n\
         queueing_method = \"reject\"",
        "",
    );
    let now = || velvet_rope::SystemClock.now_ms();
    let engine = Arc::new(Engine::from_text(&config, now()).unwrap());
    let sync = Syncer::from_engine(engine.clone()).unwrap().unwrap();
    std::thread::sleep(Duration::from_millis(common::LEARNING_MS + 500));
    let mut fds = [0; 2];
    // SAFETY: pipe(2) into a two-element array.
    assert_eq!(unsafe { libc::pipe(fds.as_mut_ptr()) }, 0);
    let (read, write) = (fds[0], fds[1]);
    // SAFETY: the child uses the engine and a sync loop of its own, then leaves with `_exit`.
    let pid = unsafe { libc::fork() };
    assert!(pid >= 0);
    if pid == 0 {
        // SAFETY: alarm(2) ends the child if it hangs.
        unsafe { libc::alarm(20) };
        let n = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            // Before its first tick the copy claims nothing.
            if engine.admit("r", None, now()).unwrap().outcome == velvet_rope::Outcome::Admit {
                return 100;
            }
            drop(sync);
            let _own = Syncer::from_engine(engine.clone()).unwrap().unwrap();
            crowd(&engine, Duration::from_secs(4))
        }))
        .unwrap_or(999);
        let bytes = n.to_le_bytes();
        // SAFETY: writing 8 bytes from a live buffer to our pipe, then leaving at once.
        unsafe {
            libc::write(write, bytes.as_ptr().cast(), 8);
            libc::_exit(0);
        }
    }
    let parent = crowd(&engine, Duration::from_secs(4));
    let mut bytes = [0u8; 8];
    // SAFETY: reading 8 bytes into a live buffer from our pipe; `pid` is our child.
    unsafe {
        libc::read(read, bytes.as_mut_ptr().cast(), 8);
        let mut status = 0;
        libc::waitpid(pid, &mut status, 0);
        libc::close(read);
        libc::close(write);
    }
    let child = u64::from_le_bytes(bytes);
    drop(sync);
    assert!(
        parent + child <= 10,
        "parent admitted {parent}, child {child}: {} in a room of 10",
        parent + child
    );
    assert!(parent + child >= 8, "the room fills: {parent} + {child}");
}
