//! The module's own timer: a thread per engine that ticks it every interval, so no Envoy
//! worker ever spends time ticking, and a tick never waits on a request (the engine's tick is
//! lock-free towards decisions). The interval can change while it runs (it follows the live
//! filter configurations, see `filter_config`); the thread is stopped and joined when the
//! ticker is dropped. After each tick it writes the engine's events to Envoy's log and runs
//! its `after_tick` (the engine's cue for publishing its metrics into Envoy's stats, see
//! `metrics`).

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::{channel, RecvTimeoutError, Sender};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

use velvet_rope::{Clock, CoarseSystemClock, Engine};

/// Writes the engine's events (a room's queue starting or stopping, a scheduled event's
/// phases, a reload, the cluster store lost or found) to Envoy's log, one JSON line each: info,
/// or warning for a refusal or an outage (see `velvet_rope::admission::events`).
fn log_events(engine: &Engine) {
    for event in engine.drain_events() {
        let level = if event.kind.is_warning() {
            crate::abi::LOG_WARN
        } else {
            crate::abi::LOG_INFO
        };
        crate::abi::log(level, &format!("velvet-rope: event {}", event.to_json()));
    }
}

/// A running ticker; dropping it stops the thread and waits for it.
pub struct Ticker {
    interval_ms: Arc<AtomicU64>,
    /// Wakes the thread (a new interval); dropped to stop it.
    wake: Option<Sender<()>>,
    thread: Option<JoinHandle<()>>,
}

impl Ticker {
    /// Ticks `engine` at once, then every `interval_ms` until dropped, running `after_tick`
    /// after each tick (on the ticker's thread). An error if the thread cannot start (the
    /// room's figures would never move: the configuration must be refused).
    pub fn start(
        engine: Arc<Engine>,
        interval_ms: u64,
        after_tick: impl Fn() + Send + 'static,
    ) -> Result<Self, String> {
        let (wake, woken) = channel::<()>();
        let interval = Arc::new(AtomicU64::new(interval_ms.max(1)));
        let every = interval.clone();
        let thread = std::thread::Builder::new()
            .name("velvet-rope-tick".into())
            .spawn(move || {
                let mut reported = false;
                loop {
                    let ticked = catch_unwind(AssertUnwindSafe(|| {
                        engine.tick(CoarseSystemClock.now_ms());
                        log_events(&engine);
                        after_tick();
                    }));
                    if ticked.is_err() && !reported {
                        // Logged once; the next interval tries again.
                        crate::abi::log(
                            crate::abi::LOG_ERROR,
                            "velvet-rope: a tick panicked; ticking goes on",
                        );
                        reported = true;
                    }
                    // Relaxed: the interval is a value of its own, published with nothing else.
                    let wait = Duration::from_millis(every.load(Ordering::Relaxed));
                    match woken.recv_timeout(wait) {
                        // A new interval: tick now, then wait the new one.
                        Ok(()) | Err(RecvTimeoutError::Timeout) => continue,
                        Err(RecvTimeoutError::Disconnected) => return,
                    }
                }
            })
            .map_err(|e| format!("could not start the ticker thread: {e}"))?;
        Ok(Self {
            interval_ms: interval,
            wake: Some(wake),
            thread: Some(thread),
        })
    }

    /// The interval now.
    pub fn interval_ms(&self) -> u64 {
        self.interval_ms.load(Ordering::Relaxed)
    }

    /// Ticks every `interval_ms` from now on (the thread wakes at once to take it).
    pub fn set_interval(&self, interval_ms: u64) {
        let interval_ms = interval_ms.max(1);
        if self.interval_ms.swap(interval_ms, Ordering::Relaxed) != interval_ms {
            if let Some(w) = &self.wake {
                let _ = w.send(());
            }
        }
    }
}

impl Drop for Ticker {
    fn drop(&mut self) {
        drop(self.wake.take());
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn engine() -> Arc<Engine> {
        Arc::new(
            Engine::from_text(
                "[[rooms]]\nname = \"r\"\ntotal_active_users = 1\nnew_users_per_minute = 10\n",
                CoarseSystemClock.now_ms(),
            )
            .unwrap(),
        )
    }

    fn wait_for(what: &str, mut done: impl FnMut() -> bool) {
        let deadline = std::time::Instant::now() + Duration::from_secs(5);
        while !done() {
            assert!(std::time::Instant::now() < deadline, "{what}");
            std::thread::sleep(Duration::from_millis(5));
        }
    }

    #[test]
    fn ticks_until_dropped_and_stops_at_once() {
        let engine = engine();
        let now = CoarseSystemClock.now_ms();
        engine.admit("r", None, now).unwrap();
        assert_eq!(engine.stats("r").unwrap().active_users, 0, "not folded yet");
        let ticker = Ticker::start(engine.clone(), 10, || {}).unwrap();
        wait_for("never ticked", || {
            engine.stats("r").unwrap().active_users == 1
        });
        let start = std::time::Instant::now();
        drop(ticker);
        assert!(
            start.elapsed() < Duration::from_secs(1),
            "stopping waited a whole interval"
        );
    }

    #[test]
    fn a_new_interval_is_taken_at_once() {
        let engine = engine();
        // An hour between ticks: only the first tick, at start, would ever come.
        let ticker = Ticker::start(engine.clone(), 3_600_000, || {}).unwrap();
        std::thread::sleep(Duration::from_millis(50));
        engine.admit("r", None, CoarseSystemClock.now_ms()).unwrap();
        ticker.set_interval(10);
        assert_eq!(ticker.interval_ms(), 10);
        wait_for("the new interval was not taken", || {
            engine.stats("r").unwrap().active_users == 1
        });
        let start = std::time::Instant::now();
        drop(ticker);
        assert!(start.elapsed() < Duration::from_secs(1));
    }
}
