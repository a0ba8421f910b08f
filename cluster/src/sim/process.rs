//! Simulated processes: what a process's environment answers (its id, which processes live,
//! the host's monotonic clock, bounded waits, fault points), the store as a process sees it,
//! and the threads that let a process stop mid-call while the others go on.
//!
//! A process's work (a sync round, an engine start) runs *inline* on the simulation's thread
//! when nothing in it can wait: no fault that stops it, no store call that hangs. Otherwise
//! it runs on the process's own thread, and every point where it would wait (a stop, a store
//! call that hangs, a bounded sleep) hands control back to the simulation, which resumes it at
//! the right virtual time. Either way exactly one thread runs at a time, so a run is a pure
//! function of its seed.

use std::cell::RefCell;
use std::collections::HashSet;
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};
use std::sync::mpsc::{Receiver, Sender};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use velvet_rope::simulation::{self, Crash, Hooks};
use velvet_rope::{Clock, Millis};

use super::faults::{Point, ProcessFault};
use super::network::{Network, Request};
use crate::protocol::{Params, Reply, Report};
use crate::store::{Store, StoreError};

/// The virtual clock every host reads (plus its own offset).
#[derive(Clone)]
pub(crate) struct VirtualTime {
    pub(crate) now: Arc<AtomicU64>,
}

impl VirtualTime {
    pub(crate) fn get(&self) -> u64 {
        self.now.load(Ordering::SeqCst)
    }
}

/// A host's clock: the virtual clock plus the host's offset, from `t0`.
pub(crate) struct HostClock {
    pub(crate) time: VirtualTime,
    pub(crate) t0: u64,
    pub(crate) offset: Arc<AtomicI64>,
}

impl Clock for HostClock {
    fn now_ms(&self) -> Millis {
        (self.t0 as i64 + self.time.get() as i64 + self.offset.load(Ordering::SeqCst)).max(0) as u64
    }
}

/// What the simulation tells a process blocked on a thread of its own.
pub(crate) enum Resume {
    /// Go on.
    Go,
    /// Crash where you are.
    Crash,
    /// The store's answer.
    Store(Result<Reply, StoreError>),
}

/// What a process on its own thread tells the simulation.
pub(crate) enum Yield {
    /// Its work is done.
    Done,
    /// It crashed.
    Crashed,
    /// Its work panicked (a bug): the message.
    Panicked(String),
    /// It waits `ms` (a bounded sleep, or a stop at a fault point).
    Wait(u64),
    /// It calls the store.
    Store(Box<Request>),
}

/// Work for a process.
pub(crate) type Work = Box<dyn FnOnce() + Send>;

/// Where a process's random bytes come from in a simulation.
pub(crate) type RandomSource = Arc<dyn Fn(&mut [u8]) + Send + Sync>;

/// A planned fault: at `point`, `fault`.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Plan {
    pub(crate) point: Point,
    pub(crate) fault: ProcessFault,
}

/// What the simulation shares with every process.
pub(crate) struct Shared {
    pub(crate) time: VirtualTime,
    pub(crate) dead: Mutex<HashSet<u32>>,
    pub(crate) network: Mutex<Network>,
}

/// The hooks of one process (see `velvet_rope::simulation`).
pub(crate) struct ProcessHooks {
    pub(crate) pid: u32,
    pub(crate) shared: Arc<Shared>,
    /// A fault armed for this process, struck at its point.
    pub(crate) plan: Mutex<Option<Plan>>,
    /// Where the plan struck (for the trace).
    pub(crate) struck: Mutex<Option<Plan>>,
    /// The simulation's random source.
    pub(crate) random: Option<RandomSource>,
}

thread_local! {
    /// The channels of the process running on this thread, when it runs on its own.
    static CHANNEL: RefCell<Option<(Sender<Yield>, Receiver<Resume>)>> = const { RefCell::new(None) };
}

/// Hands control to the simulation with `y`, and waits to be resumed (on a process thread).
fn yield_to_simulation(y: Yield) -> Resume {
    CHANNEL.with(|c| {
        let c = c.borrow();
        let (tx, rx) = c
            .as_ref()
            .expect("a process that waits runs on a thread of its own");
        if tx.send(y).is_err() {
            // The simulation is gone: end this thread's work as a crash.
            return Resume::Crash;
        }
        rx.recv().unwrap_or(Resume::Crash)
    })
}

fn on_own_thread() -> bool {
    CHANNEL.with(|c| c.borrow().is_some())
}

impl Hooks for ProcessHooks {
    fn pid(&self) -> u32 {
        self.pid
    }

    fn alive(&self, pid: u32) -> bool {
        !self
            .shared
            .dead
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .contains(&pid)
    }

    fn monotonic_ms(&self) -> u64 {
        self.shared.time.get()
    }

    fn sleep(&self, d: Duration) {
        assert!(
            on_own_thread(),
            "simulation: process {} waited inline (a case the simulation did not foresee)",
            self.pid
        );
        if let Resume::Crash = yield_to_simulation(Yield::Wait(d.as_millis().max(1) as u64)) {
            simulation::crash();
        }
    }

    fn random(&self, out: &mut [u8]) -> bool {
        match &self.random {
            Some(fill) => {
                fill(out);
                true
            }
            None => false,
        }
    }

    fn fault_point(&self, at: Point) {
        let plan = {
            let mut plan = self.plan.lock().unwrap_or_else(|p| p.into_inner());
            match *plan {
                Some(p) if p.point == at => plan.take(),
                _ => None,
            }
        };
        let Some(plan) = plan else {
            return;
        };
        *self.struck.lock().unwrap_or_else(|p| p.into_inner()) = Some(plan);
        match plan.fault {
            ProcessFault::Crash => simulation::crash(),
            ProcessFault::Stop { ms } => {
                if let Resume::Crash = yield_to_simulation(Yield::Wait(ms)) {
                    simulation::crash();
                }
            }
        }
    }
}

/// The store as a process sees it: calls go to the simulated network, answered at once when
/// the process runs inline, or when the simulation resumes it.
pub(crate) struct SimStore {
    pub(crate) shared: Arc<Shared>,
    pub(crate) host_index: usize,
    pub(crate) commands: u64,
}

impl Store for SimStore {
    fn sync(
        &mut self,
        room: &str,
        host: &str,
        report: &Report,
        params: &Params,
    ) -> Result<Reply, StoreError> {
        self.commands += 1;
        let request = Request {
            host_index: self.host_index,
            room: room.to_owned(),
            host: host.to_owned(),
            report: report.clone(),
            params: *params,
            sent: self.shared.time.get(),
        };
        if on_own_thread() {
            return match yield_to_simulation(Yield::Store(Box::new(request))) {
                Resume::Store(result) => result,
                Resume::Crash => simulation::crash(),
                Resume::Go => Err(StoreError::Protocol("resumed without an answer".into())),
            };
        }
        let now = self.shared.time.get();
        let delivery = self
            .shared
            .network
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .call(request, now);
        assert!(
            delivery.reply_at == now && !delivery.queued,
            "simulation: an inline store call would have waited"
        );
        delivery.result
    }

    fn commands(&self) -> u64 {
        self.commands
    }
}

/// A process's own thread: runs work sent to it with its hooks installed, reporting every
/// wait to the simulation. Ends when dropped (after the work it may be running).
pub(crate) struct ProcessThread {
    work: Sender<Work>,
    /// What the thread tells the simulation.
    pub(crate) yields: Receiver<Yield>,
    /// What the simulation tells the thread.
    pub(crate) resume: Sender<Resume>,
}

impl ProcessThread {
    /// Starts the thread of a process with `hooks`.
    pub(crate) fn start(hooks: Arc<ProcessHooks>) -> Self {
        let (work, work_rx) = std::sync::mpsc::channel::<Work>();
        let (yield_tx, yields) = std::sync::mpsc::channel();
        let (resume, resume_rx) = std::sync::mpsc::channel();
        std::thread::Builder::new()
            .name(format!("sim-process-{}", hooks.pid))
            .spawn(move || {
                let _installed = simulation::install(hooks);
                CHANNEL.with(|c| *c.borrow_mut() = Some((yield_tx.clone(), resume_rx)));
                while let Ok(work) = work_rx.recv() {
                    let outcome = std::panic::catch_unwind(std::panic::AssertUnwindSafe(work));
                    let message = match outcome {
                        Ok(()) => Yield::Done,
                        Err(p) if p.is::<Crash>() => {
                            simulation::recovered();
                            Yield::Crashed
                        }
                        Err(p) => Yield::Panicked(panic_message(&p)),
                    };
                    if yield_tx.send(message).is_err() {
                        break;
                    }
                }
            })
            .expect("a thread for a simulated process");
        Self {
            work,
            yields,
            resume,
        }
    }

    /// Sends `work` to the thread (the caller then waits on `yields`).
    pub(crate) fn run(&self, work: Work) {
        let _ = self.work.send(work);
    }
}

/// Runs `work` inline on this thread as process `hooks`: its outcome as a process thread
/// would report it.
pub(crate) fn run_inline(hooks: &Arc<ProcessHooks>, work: Work) -> Yield {
    let _installed = simulation::install(hooks.clone());
    match std::panic::catch_unwind(std::panic::AssertUnwindSafe(work)) {
        Ok(()) => Yield::Done,
        Err(p) if p.is::<Crash>() => {
            simulation::recovered();
            Yield::Crashed
        }
        Err(p) => Yield::Panicked(panic_message(&p)),
    }
}

fn panic_message(p: &Box<dyn std::any::Any + Send>) -> String {
    if let Some(s) = p.downcast_ref::<&str>() {
        (*s).to_owned()
    } else if let Some(s) = p.downcast_ref::<String>() {
        s.clone()
    } else {
        "a panic".to_owned()
    }
}
