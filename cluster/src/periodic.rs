//! A thread that runs a job every interval until it is dropped (the sync loop and a leaf's
//! upstream loop are two).

use std::sync::{Arc, Condvar, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

use crate::syncer::Log;

struct Stop {
    stopped: Mutex<bool>,
    wake: Condvar,
}

/// A running periodic job. Dropping it wakes the thread, which stops after the job it may be
/// running, and joins it. In a process forked after it started (a pre-fork server's worker)
/// the thread does not exist: dropping it there touches nothing the thread might have held at
/// the fork and joins nothing (see [`Periodic::running_here`]).
pub(crate) struct Periodic {
    stop: Arc<Stop>,
    thread: Option<JoinHandle<()>>,
    pid: u32,
}

impl Periodic {
    /// Runs `job` at once, then every `interval`, on a thread named `name`. A thread that
    /// cannot be started is said in `log` (nothing runs then).
    pub(crate) fn start(
        name: &str,
        interval: Duration,
        log: &Log,
        mut job: impl FnMut() + Send + 'static,
    ) -> Self {
        let stop = Arc::new(Stop {
            stopped: Mutex::new(false),
            wake: Condvar::new(),
        });
        let stop2 = stop.clone();
        let thread = std::thread::Builder::new()
            .name(name.into())
            .spawn(move || loop {
                job();
                let guard = stop2.stopped.lock().unwrap_or_else(|p| p.into_inner());
                let (guard, _) = stop2
                    .wake
                    .wait_timeout_while(guard, interval, |s| !*s)
                    .unwrap_or_else(|p| p.into_inner());
                if *guard {
                    return;
                }
            })
            .map_err(|e| {
                log(&format!(
                    "could not start thread {name}: {e}; it does not run"
                ))
            })
            .ok();
        Self {
            stop,
            thread,
            pid: std::process::id(),
        }
    }

    /// Whether the thread runs in this process (not in a process this one was forked from).
    pub(crate) fn running_here(&self) -> bool {
        self.pid == std::process::id() && self.thread.is_some()
    }
}

impl Drop for Periodic {
    fn drop(&mut self) {
        if self.pid != std::process::id() {
            // Forked: the thread (and whatever locks it held at the fork) belongs to the
            // parent. Leave all of it alone.
            if let Some(t) = self.thread.take() {
                std::mem::forget(t);
            }
            return;
        }
        *self.stop.stopped.lock().unwrap_or_else(|p| p.into_inner()) = true;
        self.stop.wake.notify_all();
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}
