//! The module's own timer: a thread per engine that ticks it every interval, so no Envoy
//! worker ever spends time ticking, and a tick never waits on a request (the engine's tick is
//! lock-free towards decisions). Stopped and joined when the engine's last filter
//! configuration is destroyed.

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::mpsc::{channel, RecvTimeoutError, Sender};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

use velvet_rope::{Clock, CoarseSystemClock, Engine};

/// A running ticker; dropping it stops the thread and waits for it.
pub struct Ticker {
    stop: Option<Sender<()>>,
    thread: Option<JoinHandle<()>>,
}

impl Ticker {
    /// Ticks `engine` every `interval_ms` until dropped. An error if the thread cannot start
    /// (the room's figures would never move: the configuration must be refused).
    pub fn start(engine: Arc<Engine>, interval_ms: u64) -> Result<Self, String> {
        let (stop, stopped) = channel::<()>();
        let interval = Duration::from_millis(interval_ms);
        let thread = std::thread::Builder::new()
            .name("velvet-rope-tick".into())
            .spawn(move || {
                let mut reported = false;
                loop {
                    let ticked =
                        catch_unwind(AssertUnwindSafe(|| engine.tick(CoarseSystemClock.now_ms())));
                    if ticked.is_err() && !reported {
                        // Logged once; the next interval tries again.
                        crate::abi::log(
                            crate::abi::LOG_ERROR,
                            "velvet-rope: a tick panicked; ticking goes on",
                        );
                        reported = true;
                    }
                    match stopped.recv_timeout(interval) {
                        Err(RecvTimeoutError::Timeout) => continue,
                        _ => return,
                    }
                }
            })
            .map_err(|e| format!("could not start the ticker thread: {e}"))?;
        Ok(Self {
            stop: Some(stop),
            thread: Some(thread),
        })
    }
}

impl Drop for Ticker {
    fn drop(&mut self) {
        drop(self.stop.take());
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ticks_until_dropped_and_stops_at_once() {
        let engine = Arc::new(
            Engine::from_text(
                "[[rooms]]\nname = \"r\"\ntotal_active_users = 1\nnew_users_per_minute = 10\n",
                CoarseSystemClock.now_ms(),
            )
            .unwrap(),
        );
        let now = CoarseSystemClock.now_ms();
        engine.admit("r", None, now).unwrap();
        assert_eq!(engine.stats("r").unwrap().active_users, 0, "not folded yet");
        let ticker = Ticker::start(engine.clone(), 10).unwrap();
        let deadline = std::time::Instant::now() + Duration::from_secs(5);
        while engine.stats("r").unwrap().active_users != 1 {
            assert!(std::time::Instant::now() < deadline, "never ticked");
            std::thread::sleep(Duration::from_millis(5));
        }
        let start = std::time::Instant::now();
        drop(ticker);
        assert!(
            start.elapsed() < Duration::from_secs(1),
            "stopping waited a whole interval"
        );
    }
}
