//! An engine with a `[cluster]` table and its sync loop, built before a fork: the child drops
//! the parent's loop without touching the parent's thread, and starts one of its own.
//! (Before: the child panicked joining a thread that does not exist there.)

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
