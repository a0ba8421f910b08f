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
/// running, and joins it.
pub(crate) struct Periodic {
    stop: Arc<Stop>,
    thread: Option<JoinHandle<()>>,
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
        Self { stop, thread }
    }
}

impl Drop for Periodic {
    fn drop(&mut self) {
        *self.stop.stopped.lock().unwrap_or_else(|p| p.into_inner()) = true;
        self.stop.wake.notify_all();
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}
