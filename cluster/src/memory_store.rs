//! A store in this process's memory, shared by clones: the cluster's semantics without a
//! server, with faults to inject (unreachable, slow, wiped as by a restart) for simulations.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use velvet_rope::{Clock, SystemClock};

use crate::allocator::{allocate, relay_revocations, RoomState};
use crate::protocol::{Params, Reply, Report};
use crate::store::{Store, StoreError};

struct Shared {
    rooms: Mutex<HashMap<String, RoomState>>,
    clock: Arc<dyn Clock>,
    down: AtomicBool,
    delay_ms: AtomicU64,
    /// Bumped by [`MemoryStore::wipe`]: the store's "run" (see `allocate`).
    runs: AtomicU64,
}

/// An in-process store. Clones share one state (one per simulated cluster); each clone counts
/// its own commands.
#[derive(Clone)]
pub struct MemoryStore {
    shared: Arc<Shared>,
    timeout: Duration,
    commands: u64,
}

impl std::fmt::Debug for MemoryStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MemoryStore")
            .field("commands", &self.commands)
            .finish()
    }
}

impl MemoryStore {
    /// An empty store on the wall clock whose calls give up after `timeout`.
    pub fn new(timeout: Duration) -> Self {
        Self::with_clock(timeout, Arc::new(SystemClock))
    }

    /// An empty store on `clock` (a simulation's virtual time).
    pub fn with_clock(timeout: Duration, clock: Arc<dyn Clock>) -> Self {
        Self {
            shared: Arc::new(Shared {
                rooms: Mutex::new(HashMap::new()),
                clock,
                down: AtomicBool::new(false),
                delay_ms: AtomicU64::new(0),
                runs: AtomicU64::new(0),
            }),
            timeout,
            commands: 0,
        }
    }

    /// Makes every call fail at once as unreachable (`true`), or answer again (`false`).
    pub fn set_down(&self, down: bool) {
        self.shared.down.store(down, Ordering::SeqCst);
    }

    /// Delays every answer by `delay` (a call gives up after its timeout, as with a stalled
    /// server).
    pub fn set_delay(&self, delay: Duration) {
        self.shared
            .delay_ms
            .store(delay.as_millis() as u64, Ordering::SeqCst);
    }

    /// A copy of `room`'s state (for simulations and tests).
    pub fn state(&self, room: &str) -> Option<RoomState> {
        self.lock().get(room).cloned()
    }

    /// Forgets everything, as a store restarted without persistence does (another run of the
    /// store).
    pub fn wipe(&self) {
        self.lock().clear();
        self.shared.runs.fetch_add(1, Ordering::SeqCst);
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, RoomState>> {
        self.shared.rooms.lock().unwrap_or_else(|p| p.into_inner())
    }
}

impl Store for MemoryStore {
    fn sync(
        &mut self,
        room: &str,
        host: &str,
        report: &Report,
        params: &Params,
    ) -> Result<Reply, StoreError> {
        self.commands += 1;
        if self.shared.down.load(Ordering::SeqCst) {
            return Err(StoreError::Unreachable(
                "the in-process store is down".into(),
            ));
        }
        let delay = Duration::from_millis(self.shared.delay_ms.load(Ordering::SeqCst));
        if delay > self.timeout {
            std::thread::sleep(self.timeout);
            return Err(StoreError::Timeout(self.timeout.as_millis() as u64));
        }
        std::thread::sleep(delay);
        let now = self.shared.clock.now_ms();
        let mut rooms = self.lock();
        let state = rooms.entry(room.to_owned()).or_default();
        let run = format!("memory-{}", self.shared.runs.load(Ordering::SeqCst));
        let mut reply = allocate(state, host, report, params, now, &run);
        (reply.rc, reply.rv) = relay_revocations(state, host, report, params, now);
        Ok(reply)
    }

    fn commands(&self) -> u64 {
        self.commands
    }
}
