//! A pre-fork server (gunicorn `--preload`) builds the engine, starts a ticker thread, and
//! forks workers, whenever the ticker happens to be ticking: each child must tick, reload and
//! decide as if it had built the engine itself. (Before: a child forked mid-tick inherited the
//! tick's lock held by a thread that does not exist there; its ticks did nothing and `reload`
//! deadlocked, in 28 of 30 children.)

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use velvet_rope::{Engine, Outcome};

const T0: u64 = 1_800_000_000_000;
const MIN: u64 = 60_000;

fn config(per_minute: u64) -> String {
    format!(
        "[[rooms]]\nname = \"r\"\ntotal_active_users = 1000\nnew_users_per_minute = \
         {per_minute}\n[rooms.cookie]\nsecure = false\n"
    )
}

/// What a child does: tick into the next minute (the minute's admissions reset: one more is
/// admitted), reload, and decide. Its exit status says which step failed; an alarm ends a
/// child that hangs.
fn child(engine: &Engine) -> i32 {
    // SAFETY: alarm(2) only arms a timer; its default action ends this child if it hangs.
    unsafe { libc::alarm(10) };
    if engine.admit("r", None, T0 + 10).unwrap().outcome != Outcome::Queue {
        return 2;
    }
    engine.tick(T0 + MIN + 10);
    if engine.admit("r", None, T0 + MIN + 20).unwrap().outcome != Outcome::Admit {
        return 3;
    }
    let reloaded = velvet_rope::Config::from_text(&config(3)).unwrap();
    if engine.reload(reloaded).is_err() {
        return 4;
    }
    engine.tick(T0 + 2 * MIN + 10);
    if engine.admit("r", None, T0 + 2 * MIN + 20).unwrap().outcome != Outcome::Admit {
        return 5;
    }
    0
}

#[test]
fn children_forked_mid_tick_tick_and_reload() {
    let engine = Arc::new(Engine::from_text(&config(2), T0).unwrap());
    for _ in 0..2 {
        assert_eq!(engine.admit("r", None, T0).unwrap().outcome, Outcome::Admit);
    }
    // The ticker ticks as fast as it can, so that forks land mid-tick.
    let stop = Arc::new(AtomicBool::new(false));
    let ticker = {
        let (engine, stop) = (engine.clone(), stop.clone());
        std::thread::spawn(move || {
            while !stop.load(Ordering::Relaxed) {
                engine.tick(T0 + 5);
            }
        })
    };
    let mut failed = Vec::new();
    for i in 0..30 {
        std::thread::sleep(std::time::Duration::from_micros(300 + 37 * i));
        // SAFETY: the child only uses the engine (whose locks a child takes over) and leaves
        // with `_exit`, without running the parent's exit handlers.
        let pid = unsafe { libc::fork() };
        assert!(pid >= 0, "fork failed");
        if pid == 0 {
            let code = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| child(&engine)))
                .unwrap_or(9);
            // SAFETY: ends the child at once.
            unsafe { libc::_exit(code) };
        }
        let mut status = 0;
        // SAFETY: `pid` is our child.
        unsafe { libc::waitpid(pid, &mut status, 0) };
        let ok = libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0;
        if !ok {
            failed.push((i, status));
        }
    }
    stop.store(true, Ordering::Relaxed);
    ticker.join().unwrap();
    assert!(
        failed.is_empty(),
        "children that failed (index, wait status): {failed:?}"
    );
}
