//! The simulated world: hosts and their processes, the crowd, the faults, the checks, and the
//! scheduler that runs them in virtual time, one step at a time.

use std::collections::{HashSet, VecDeque};
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use rand::rngs::StdRng;
use rand::{Rng, RngCore, SeedableRng};
use smallvec::SmallVec;
use velvet_rope::admission::cluster::ClusterState;
use velvet_rope::ticket::{Keyring, RoomId, TicketState};
use velvet_rope::{Config, Engine, Outcome as Decided, Revocation};

use super::faults::{self, Fault, ProcessFault};
use super::measure::Recorder;
use super::network::Network;
use super::process::{
    run_inline, HostClock, Plan, ProcessHooks, ProcessThread, RandomSource, Resume, Shared,
    SimStore, VirtualTime, Work, Yield,
};
use super::truth::Truth;
use super::{Outcome, Scenario, Sharing};
use crate::syncer::{SyncOptions, SyncRound};

mod agenda;
mod planned;
mod sharing;
use agenda::Agenda;
use planned::Track;

/// The virtual clock's start: 2027-01-15, a whole number of minutes.
const T0: u64 = 1_800_000_000_000;
const ROOM: &str = "r";

/// 128-byte aligned memory for a host's counters.
#[repr(C, align(128))]
#[derive(Clone, Copy)]
struct Block([u8; 128]);

/// What a process is doing on its own thread.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Task {
    /// Starting (building its engine).
    Start,
    /// A sync round.
    Round,
    /// An origin's revocation (the front door's call: it ticks the room, through fault
    /// points).
    Revoke,
}

struct Process {
    hooks: Arc<ProcessHooks>,
    /// Bumped at every restart: events for an earlier life are dropped.
    life: u64,
    engine: Option<Arc<Engine>>,
    round: Option<Arc<Mutex<SyncRound>>>,
    thread: Option<ProcessThread>,
    /// Work in progress on its thread, waiting for a resume.
    busy: Option<Task>,
    /// Stopped at a fault point (it serves nothing meanwhile).
    stopped: bool,
    alive: bool,
    /// The engine a start is building.
    building: Arc<Mutex<Option<Arc<Engine>>>>,
}

struct Host {
    offset: Arc<AtomicI64>,
    region: Box<[Block]>,
    config: Config,
    processes: Vec<Process>,
    /// Beyond the guarantee (it admitted on its fallback share, or its clock stepped): what
    /// it may hold uncoordinated counts in the bound.
    beyond: bool,
    /// When it last restarted with counters made anew: until a lease and a session later,
    /// only the store remembers what its previous counters hold.
    restarted: Option<u64>,
    /// The latest lease end of a grant it applied (its clock): it relies on its grant until
    /// that and a session. A grant's lease never goes back (else it falls back early).
    applied_until: u64,
}

enum Event {
    Arrival,
    /// A planned crowd's next visitor (drawn from its rate).
    Planned,
    /// A planned crowd's rate looked at again (no visitor: the rate may have changed).
    PlannedWake,
    /// A spike's next visitor, and how many are left after it.
    Spike(usize, u64),
    /// A second of a planned crowd's run ends: a sample.
    Sample,
    Request(usize),
    Round(usize, usize, u64),
    Resume(usize, usize, u64, Box<Resume>),
    /// The store's answer to a write that waited for the replica (lost if the store failed
    /// over first).
    Reply(usize, usize, u64, Box<Resume>, u64),
    Restart(usize, usize),
    Fault(Fault),
    StallEnds,
    LearningCheck,
    Prune,
}

enum Mood {
    Waiting { until: u64 },
    Admitted { visits: u32 },
}

struct Visitor {
    host: usize,
    cookie: Option<String>,
    mood: Mood,
    /// The ticket cookie whose session the origin revoked, when this visitor replays it,
    /// when it was revoked, and at which host.
    revoked: Option<(String, u64, usize)>,
    /// What a planned crowd's run follows of it.
    track: Track,
}

/// The shared random source the processes draw from (ticket ids, nonces, incarnations).
struct Randomness(Mutex<StdRng>);

pub(crate) struct World {
    s: Scenario,
    rng: StdRng,
    now: u64,
    shared: Arc<Shared>,
    random: Arc<Randomness>,
    hosts: Vec<Host>,
    events: Agenda<Event>,
    next_pid: u32,
    visitors: Vec<Visitor>,
    truth: Truth,
    keyring: Option<Arc<Keyring>>,
    room_id: RoomId,
    /// Host traffic weights (moved around by the seed).
    weights: Vec<f64>,
    /// A store that lost writes hosts were using: a roomful in the bound.
    store_lost: bool,
    forward_steps: Vec<u64>,
    wiped_at: Option<u64>,
    /// The room's visitors (ground truth) at the last check.
    last_active: u64,
    out: Outcome,
    trace: VecDeque<String>,
    /// A planned crowd's measurements.
    recorder: Option<Recorder>,
    /// When `check` last looked at every host's grant.
    hosts_checked_at: u64,
    /// A planned crowd's arrivals draw from a stream of their own, so that a scenario run
    /// with other settings sees the same arrivals.
    arrivals: StdRng,
    /// Under the seed's divisions: each host's figures as it published them at its last sync
    /// (active users, admissions this minute).
    published: Vec<(u64, u64)>,
}

impl World {
    /// The world of `s` and `seed`; an error when a host's configuration is refused.
    pub(crate) fn new(s: &Scenario, seed: u64) -> Result<Self, String> {
        let mut rng = StdRng::seed_from_u64(seed);
        let mut faults = s.faults.clone();
        faults.extend(faults::draw(s, &mut rng));
        let time = VirtualTime {
            now: Arc::new(AtomicU64::new(0)),
        };
        let shared = Arc::new(Shared {
            time: time.clone(),
            dead: Mutex::new(HashSet::new()),
            network: Mutex::new(Network::new(s.hosts, s.replicas, s.timeout_ms, T0)),
        });
        let random = Arc::new(Randomness(Mutex::new(StdRng::seed_from_u64(
            seed ^ 0x5eed_5eed_5eed_5eed,
        ))));
        let configs = (0..s.hosts)
            .map(|h| Config::from_text(&host_config(s, h, sharing::first_limits(s))))
            .collect::<Result<Vec<_>, _>>()
            .map_err(|e| format!("the room's configuration: {e}"))?;
        let hosts = configs
            .into_iter()
            .map(|config| {
                let size = Engine::shared_region_size(&config).div_ceil(128);
                Host {
                    // Hosts' clocks differ by up to a fifth of a second.
                    offset: Arc::new(AtomicI64::new(rng.gen_range(-200..=200))),
                    region: vec![Block([0; 128]); size].into_boxed_slice(),
                    config,
                    processes: Vec::new(),
                    beyond: false,
                    restarted: None,
                    applied_until: 0,
                }
            })
            .collect();
        let mut w = Self {
            s: s.clone(),
            now: 0,
            shared,
            random,
            hosts,
            events: Agenda::default(),
            next_pid: 4_000_000,
            visitors: Vec::new(),
            truth: Truth::new(s.hosts, s.session),
            keyring: None,
            room_id: RoomId::new(ROOM),
            weights: vec![1.0; s.hosts],
            store_lost: false,
            last_active: 0,
            forward_steps: Vec::new(),
            wiped_at: None,
            out: Outcome {
                seed,
                ..Outcome::default()
            },
            trace: VecDeque::new(),
            recorder: s.crowd.as_ref().map(|_| {
                Recorder::new(
                    s.total,
                    s.per_minute,
                    u64::from(s.bucket_secs) * 1000,
                    u64::from(s.refresh_secs) * 1000,
                )
            }),
            hosts_checked_at: 0,
            arrivals: StdRng::seed_from_u64(seed ^ 0xa771_7a15_a771_7a15),
            published: Vec::new(),
            rng,
        };
        match &s.crowd {
            None => w.reweigh(),
            Some(c) => {
                if let Some(weights) = &c.weights {
                    for (w, &x) in w.weights.iter_mut().zip(weights) {
                        *w = x.max(0.0);
                    }
                }
            }
        }
        for f in faults {
            w.out.faults.push(format!("{f:?}"));
            w.schedule(f.at(), Event::Fault(f));
        }
        for h in 0..s.hosts {
            for p in 0..s.processes {
                let fresh = w.new_process();
                w.hosts[h].processes.push(fresh);
                w.start(h, p);
            }
        }
        match s.crowd.clone() {
            None => w.schedule(0, Event::Arrival),
            Some(_) => w.plan_crowd(),
        }
        w.schedule(5000, Event::Prune);
        Ok(w)
    }

    fn new_process(&mut self) -> Process {
        self.next_pid += 1;
        Process {
            hooks: Arc::new(ProcessHooks {
                pid: self.next_pid,
                shared: self.shared.clone(),
                plan: Mutex::new(None),
                struck: Mutex::new(None),
                random: Some(self.random_source()),
            }),
            life: 0,
            engine: None,
            round: None,
            thread: None,
            busy: None,
            stopped: false,
            alive: true,
            building: Arc::new(Mutex::new(None)),
        }
    }

    fn random_source(&self) -> RandomSource {
        let r = self.random.clone();
        Arc::new(move |out: &mut [u8]| {
            r.0.lock()
                .unwrap_or_else(|p| p.into_inner())
                .fill_bytes(out)
        })
    }

    fn schedule(&mut self, at: u64, event: Event) {
        self.events.push(at, event);
    }

    fn note(&mut self, line: String) {
        if self.s.trace == 0 {
            return;
        }
        if self.trace.len() == self.s.trace {
            self.trace.pop_front();
        }
        self.trace.push_back(format!("{:>7} ms  {line}", self.now));
    }

    fn host_now(&self, h: usize) -> u64 {
        (T0 as i64 + self.now as i64 + self.hosts[h].offset.load(Ordering::SeqCst)).max(0) as u64
    }

    fn buckets(&self) -> SmallVec<[u64; 8]> {
        let w = u64::from(self.s.bucket_secs) * 1000;
        (0..self.s.hosts).map(|h| self.host_now(h) / w).collect()
    }

    fn clock(&self, h: usize) -> Arc<HostClock> {
        Arc::new(HostClock {
            time: self.shared.time.clone(),
            t0: T0,
            offset: self.hosts[h].offset.clone(),
        })
    }

    /// Runs the simulation to its end, telling `progress` the virtual time reached once a
    /// simulated second.
    pub(crate) fn run(mut self, progress: &mut dyn FnMut(u64)) -> Outcome {
        let mut told = 0;
        while let Some((at, event)) = self.events.pop() {
            if at > self.s.run_ms || self.out.violation.is_some() {
                break;
            }
            self.now = at;
            self.shared.time.now.store(self.now, Ordering::SeqCst);
            self.out.steps += 1;
            self.load_ahead();
            self.step(event);
            self.check();
            if self.now >= told + 1000 {
                told = self.now;
                progress(self.now);
            }
        }
        self.finish()
    }

    /// Starts loading what the coming requests will read: the visitor's record of the fourth
    /// event from now, the cookie of the second (its record was loaded two steps ago). A
    /// crowd's size keeps both out of the caches; a hint with no effect on the run, which
    /// otherwise waits for each in turn.
    fn load_ahead(&self) {
        if let Some(&Event::Request(v)) = self.events.peek(3) {
            let record: *const Visitor = &self.visitors[v];
            prefetch(record.cast());
            prefetch(
                record
                    .cast::<u8>()
                    .wrapping_add(std::mem::size_of::<Visitor>() - 1),
            );
        }
        if let Some(&Event::Request(v)) = self.events.peek(1) {
            if let Some(cookie) = &self.visitors[v].cookie {
                for line in (0..cookie.len()).step_by(64) {
                    prefetch(cookie.as_ptr().wrapping_add(line));
                }
            }
        }
    }

    fn finish(mut self) -> Outcome {
        // Every process blocked mid-call is crashed out of it first (it holds its round).
        for h in 0..self.hosts.len() {
            for p in 0..self.hosts[h].processes.len() {
                if self.hosts[h].processes[p].busy.is_some() {
                    self.kill(h, p);
                }
            }
        }
        for host in &self.hosts {
            for p in &host.processes {
                if let Some(r) = &p.round {
                    if let Ok(r) = r.try_lock() {
                        let st = r.status();
                        self.out.syncs += st.syncs;
                        self.out.sync_failures += st.failures;
                    }
                }
            }
        }
        self.out.trace = self.trace.drain(..).collect();
        self.finish_planned();
        self.out.stale_reports = self
            .shared
            .network
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .stale_reports;
        let hosts = std::mem::take(&mut self.hosts);
        for mut host in hosts {
            for p in &mut host.processes {
                p.thread = None;
                p.round = None;
                p.engine = None;
            }
            host.processes.clear();
            drop(host.region);
        }
        self.out
    }

    fn step(&mut self, event: Event) {
        match event {
            Event::Arrival => self.arrival(),
            Event::Planned => {
                let host = pick_host(&self.weights, &mut self.arrivals);
                self.new_visitor(host);
                self.next_planned();
            }
            Event::PlannedWake => self.next_planned(),
            Event::Spike(i, left) => self.spike(i, left),
            Event::Sample => self.sample(),
            Event::Request(v) => self.request(v),
            Event::Round(h, p, life) => self.round(h, p, life),
            Event::Resume(h, p, life, r) => {
                if self.hosts[h].processes[p].life == life && self.hosts[h].processes[p].alive {
                    self.hosts[h].processes[p].stopped = false;
                    self.resume(h, p, *r);
                }
            }
            Event::Reply(h, p, life, r, write) => {
                if self.hosts[h].processes[p].life == life && self.hosts[h].processes[p].alive {
                    let survived = self
                        .shared
                        .network
                        .lock()
                        .unwrap_or_else(|e| e.into_inner())
                        .survived(write);
                    let r = if survived {
                        *r
                    } else {
                        Resume::Store(Err(crate::store::StoreError::Unreachable(
                            "the store failed over".into(),
                        )))
                    };
                    self.resume(h, p, r);
                }
            }
            Event::Restart(h, p) => {
                let fresh = self.new_process();
                let old = std::mem::replace(&mut self.hosts[h].processes[p], fresh);
                self.hosts[h].processes[p].life = old.life + 1;
                self.start(h, p);
            }
            Event::Fault(f) => self.fault(f),
            Event::StallEnds => {
                let n = self
                    .shared
                    .network
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .resume(self.now);
                self.note(format!("store resumes: {n} held requests applied"));
            }
            Event::LearningCheck => self.learning_check(),
            Event::Prune => {
                let b = self.buckets();
                self.truth.prune(&b);
                self.schedule(self.now + 5000, Event::Prune);
            }
        }
    }

    // ---- processes -------------------------------------------------------------------------

    /// Whether work of process `p` of host `h` must run on its own thread: a stop is armed
    /// for it, the store would keep it waiting, or a process of its host is stopped (it may
    /// hold a lock this one waits for).
    fn needs_thread(&self, h: usize, p: usize) -> bool {
        let proc = &self.hosts[h].processes[p];
        let stop_armed = matches!(
            *proc.hooks.plan.lock().unwrap_or_else(|e| e.into_inner()),
            Some(Plan {
                fault: ProcessFault::Stop { .. },
                ..
            })
        );
        let blocks = self
            .shared
            .network
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .would_block(h, self.now);
        let mate_stopped = self.hosts[h]
            .processes
            .iter()
            .any(|q| q.alive && (q.stopped || q.busy.is_some()));
        stop_armed || blocks || mate_stopped
    }

    fn dispatch(&mut self, h: usize, p: usize, task: Task, work: Work) {
        let threaded = task == Task::Start || self.needs_thread(h, p);
        let y = if threaded {
            let proc = &mut self.hosts[h].processes[p];
            let thread = proc
                .thread
                .get_or_insert_with(|| ProcessThread::start(proc.hooks.clone()));
            thread.run(work);
            let y = thread
                .yields
                .recv()
                .unwrap_or(Yield::Panicked("a process thread ended".to_owned()));
            proc.busy = Some(task);
            y
        } else {
            let hooks = self.hosts[h].processes[p].hooks.clone();
            self.hosts[h].processes[p].busy = Some(task);
            run_inline(&hooks, work)
        };
        self.on_yield(h, p, y);
    }

    fn resume(&mut self, h: usize, p: usize, r: Resume) {
        let Some(thread) = &self.hosts[h].processes[p].thread else {
            return;
        };
        if thread.resume.send(r).is_err() {
            return;
        }
        let y = thread
            .yields
            .recv()
            .unwrap_or(Yield::Panicked("a process thread ended".to_owned()));
        self.on_yield(h, p, y);
    }

    fn on_yield(&mut self, h: usize, p: usize, y: Yield) {
        let life = self.hosts[h].processes[p].life;
        let task = match y {
            Yield::Done | Yield::Crashed | Yield::Panicked(_) => {
                self.hosts[h].processes[p].busy.take()
            }
            _ => None,
        };
        match y {
            Yield::Done if task == Some(Task::Revoke) => {}
            Yield::Done => {
                if task == Some(Task::Start) {
                    self.started(h, p);
                }
                let phase = if task == Some(Task::Start) {
                    self.rng.gen_range(0..self.s.sync_interval_ms)
                } else {
                    self.s.sync_interval_ms
                };
                self.schedule(self.now + phase, Event::Round(h, p, life));
            }
            Yield::Crashed => {
                let pid = self.hosts[h].processes[p].hooks.pid;
                let at = *self.hosts[h].processes[p]
                    .hooks
                    .struck
                    .lock()
                    .unwrap_or_else(|e| e.into_inner());
                self.note(format!(
                    "host {h} process {p} (pid {pid}) crashed at {at:?}"
                ));
                self.out.crashes += 1;
                self.kill(h, p);
                let delay = self.rng.gen_range(200..1500);
                self.schedule(self.now + delay, Event::Restart(h, p));
            }
            Yield::Panicked(m) => {
                self.out.violation = Some(format!("host {h} process {p} panicked: {m}"));
            }
            Yield::Wait(ms) => {
                let stopped = self.hosts[h].processes[p]
                    .hooks
                    .struck
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .take();
                if let Some(plan) = stopped {
                    self.note(format!(
                        "host {h} process {p} stopped at {:?} for {ms} ms",
                        plan.point
                    ));
                    self.hosts[h].processes[p].stopped = true;
                }
                self.schedule(
                    self.now + ms,
                    Event::Resume(h, p, life, Box::new(Resume::Go)),
                );
            }
            Yield::Store(req) => {
                let sent = req.sent;
                let d = self
                    .shared
                    .network
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .call(*req, self.now);
                self.note(format!(
                    "host {h} process {p} sync sent at {sent}: {} reply at {} {:?}",
                    if d.queued {
                        "held by the stalled store,"
                    } else {
                        ""
                    },
                    d.reply_at,
                    d.result
                        .as_ref()
                        .map(|r| (r.seq, r.gt, r.learning, r.stale))
                ));
                let r = Resume::Store(d.result);
                if d.reply_at <= self.now {
                    self.resume(h, p, r);
                } else if let Some(write) = d.write {
                    self.schedule(d.reply_at, Event::Reply(h, p, life, Box::new(r), write));
                } else {
                    self.schedule(d.reply_at, Event::Resume(h, p, life, Box::new(r)));
                }
            }
        }
    }

    /// A process is gone: its pid dead, its thread (if blocked mid-call) crashed out.
    fn kill(&mut self, h: usize, p: usize) {
        let proc = &mut self.hosts[h].processes[p];
        if !proc.alive {
            return;
        }
        proc.alive = false;
        self.shared
            .dead
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(proc.hooks.pid);
        if proc.busy.take().is_some() {
            if let Some(t) = &proc.thread {
                // Blocked mid-call: it crashes out of it (and releases nothing).
                if t.resume.send(Resume::Crash).is_ok() {
                    let _ = t.yields.recv();
                }
            }
        }
        proc.thread = None;
        proc.round = None;
        proc.engine = None;
    }

    /// Starts process `p` of host `h`: an engine over the host's counters, and its sync loop.
    fn start(&mut self, h: usize, p: usize) {
        let config = self.hosts[h].config.clone();
        let base = self.hosts[h].region.as_mut_ptr().cast::<u8>() as usize;
        let len = self.hosts[h].region.len() * 128;
        let now = self.host_now(h);
        let slot = self.hosts[h].processes[p].building.clone();
        let work: Work = Box::new(move || {
            // SAFETY: the host's region is 128-byte aligned, `len` bytes, zeroed when made,
            // and outlives every engine over it (engines are dropped before their host's
            // region); only velvet-rope engines use it.
            let engine = unsafe { Engine::new_shared(config, now, base as *mut u8, len) }
                .expect("an engine over the host's counters");
            *slot.lock().unwrap_or_else(|e| e.into_inner()) = Some(Arc::new(engine));
        });
        self.dispatch(h, p, Task::Start, work);
    }

    fn started(&mut self, h: usize, p: usize) {
        let engine = self.hosts[h].processes[p]
            .building
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .take()
            .expect("a started engine");
        if self.keyring.is_none() {
            self.keyring = Some(engine.keyring());
        }
        if self.s.sharing != Sharing::Store {
            let proc = &mut self.hosts[h].processes[p];
            proc.engine = Some(engine);
            return;
        }
        let options = SyncOptions {
            host_id: format!("h{h}"),
            interval: Duration::from_millis(self.s.sync_interval_ms),
            lease: Duration::from_millis(self.s.lease_ms),
            timeout: Duration::from_millis(self.s.timeout_ms),
            fallback_share: Some(self.s.fallback_share),
            clock: self.clock(h),
            log: Arc::new(|_| {}),
        };
        let store = SimStore {
            shared: self.shared.clone(),
            host_index: h,
            commands: 0,
        };
        let round = SyncRound::new(engine.clone(), Box::new(store), options);
        let proc = &mut self.hosts[h].processes[p];
        proc.engine = Some(engine);
        proc.round = Some(Arc::new(Mutex::new(round)));
        let pid = proc.hooks.pid;
        self.note(format!("host {h} process {p} (pid {pid}) started"));
    }

    fn round(&mut self, h: usize, p: usize, life: u64) {
        let proc = &self.hosts[h].processes[p];
        if proc.life != life || !proc.alive {
            return;
        }
        if proc.busy.is_some() || proc.stopped {
            // Its sync thread is still in the last round: the next starts after it.
            self.schedule(self.now + self.s.sync_interval_ms, Event::Round(h, p, life));
            return;
        }
        if self.s.sharing != Sharing::Store {
            self.share_round(h, p);
            self.schedule(self.now + self.s.sync_interval_ms, Event::Round(h, p, life));
            return;
        }
        let Some(round) = proc.round.clone() else {
            return;
        };
        self.dispatch(
            h,
            p,
            Task::Round,
            Box::new(move || round.lock().unwrap_or_else(|e| e.into_inner()).round()),
        );
    }

    // ---- visitors --------------------------------------------------------------------------

    fn reweigh(&mut self) {
        for w in &mut self.weights {
            *w = self.rng.gen_range(0.05..1.0);
        }
    }

    /// A new visitor at host `h`, and its first request.
    fn new_visitor(&mut self, host: usize) {
        let track = self.track_new();
        self.visitors.push(Visitor {
            host,
            cookie: None,
            mood: Mood::Waiting { until: 0 },
            revoked: None,
            track,
        });
        self.request(self.visitors.len() - 1);
    }

    fn arrival(&mut self) {
        let host = pick_host(&self.weights, &mut self.rng);
        self.new_visitor(host);
        if self.rng.gen_bool(0.002) {
            self.reweigh();
        }
        // Bursts: the rate swings between a tenth and three times the scenario's.
        let phase = (self.now / 4000) % 4;
        let rate = self.s.arrivals_per_sec * [0.1, 1.0, 3.0, 0.6][phase as usize];
        let gap = (-(1.0 - self.rng.gen::<f64>()).ln() / rate * 1000.0).max(1.0) as u64;
        self.schedule(self.now + gap, Event::Arrival);
    }

    /// A serving process of host `h` (alive, started, not stopped), if any.
    fn server(&mut self, h: usize) -> Option<usize> {
        let serves = |q: &Process| q.alive && !q.stopped && q.engine.is_some();
        let n = self.hosts[h].processes.iter().filter(|q| serves(q)).count();
        if n == 0 {
            return None;
        }
        let k = self.rng.gen_range(0..n);
        self.hosts[h]
            .processes
            .iter()
            .enumerate()
            .filter(|(_, q)| serves(q))
            .nth(k)
            .map(|(i, _)| i)
    }

    fn request(&mut self, v: usize) {
        let mut h = self.visitors[v].host;
        if self.s.affinity < 1.0 && !self.rng.gen_bool(self.s.affinity.max(0.0)) {
            // A load balancer without affinity: this request goes to any host.
            h = pick_host(&self.weights, &mut self.rng);
        }
        let Some(p) = self.server(h) else {
            // Nobody answers: the browser tries again.
            self.schedule(self.now + 1000, Event::Request(v));
            return;
        };
        let engine = self.hosts[h].processes[p]
            .engine
            .clone()
            .expect("a serving process has an engine");
        let hooks = self.hosts[h].processes[p].hooks.clone();
        let now = self.host_now(h);
        // Taken, not copied (a crowd replays its tickets millions of times): it goes back
        // below unless the answer set a new one.
        let sent = self.visitors[v].cookie.take();
        let d = {
            let _installed = velvet_rope::simulation::install(hooks);
            engine
                .admit(ROOM, sent.as_deref(), now)
                .expect("the room exists")
        };
        let first_request = sent.is_none();
        // The one it sent, when a new one took its place (else it is the visitor's cookie).
        let replaced = match &d.set_cookie {
            Some(c) => {
                self.visitors[v].cookie = Some(c.split(';').next().unwrap_or_default().to_owned());
                Some(sent)
            }
            None => {
                self.visitors[v].cookie = sent;
                None
            }
        };
        let sent = |w: &Self| match &replaced {
            Some(sent) => sent.clone(),
            None => w.visitors[v].cookie.clone(),
        };
        // A doomed seat's ticket refused at last: the visitor arrives anew.
        if d.ticket_error.is_some() && self.truth.is_doomed(v) {
            self.truth.revoked(v);
        }
        let mut replayed = false;
        if let Some((old, at, by)) = self.visitors[v].revoked.take() {
            // A replay of a revoked ticket at the host that revoked it: refused, always,
            // unless the host restarted since with counters made anew (they forget
            // revocations as they forget counts: the ticket is counted afresh, and counted
            // out once the revocation reaches them again from the store). Another host
            // takes it back until the revocation reaches it, then counts it out the same.
            let restarted = self.hosts[h].restarted.is_some_and(|r| r >= at);
            let taken = sent(self).as_deref() == Some(old.as_str()) && d.ticket_error.is_none();
            replayed = taken && (restarted || h != by);
            // (Refused for another reason, say expired after a clock step, is refused too.)
            if taken && !restarted && h == by {
                self.out.violation = Some(format!(
                    "visitor {v}: host {h} took its revoked ticket back ({:?}, {:?})",
                    d.outcome, d.ticket_error
                ));
                return;
            }
        }
        match d.outcome {
            Decided::Admit => {
                if replayed {
                    self.truth.doom(v);
                }
                let first_admission = d.set_cookie.is_some() && self.seat(v, h, &engine);
                if self.s.revocations > 0.0
                    && self.rng.gen_bool(self.s.revocations)
                    && self.hosts[h].processes[p].busy.is_none()
                {
                    let carried = sent(self);
                    self.revoke(v, h, p, &engine, carried.as_deref(), d.ticket());
                    return;
                }
                if self.s.crowd.is_some() {
                    self.planned_next(v, h, &d, first_admission);
                    return;
                }
                let visits = match self.visitors[v].mood {
                    Mood::Admitted { visits } => visits,
                    Mood::Waiting { .. } => self.rng.gen_range(1..12),
                };
                if visits > 1 {
                    self.visitors[v].mood = Mood::Admitted { visits: visits - 1 };
                    let gap = self.rng.gen_range(300..1500);
                    self.schedule(self.now + gap, Event::Request(v));
                }
            }
            Decided::Queue | Decided::Reject => {
                if self.s.crowd.is_some() {
                    self.planned_next(v, h, &d, false);
                    return;
                }
                if first_request {
                    self.out.queued += 1;
                    let patience = self.rng.gen_range(3000..30_000);
                    self.visitors[v].mood = Mood::Waiting {
                        until: self.now + patience,
                    };
                }
                let until = match self.visitors[v].mood {
                    Mood::Waiting { until } => until,
                    Mood::Admitted { .. } => self.now + 10_000,
                };
                if self.now < until {
                    let gap = self.rng.gen_range(900..1100);
                    self.schedule(self.now + gap, Event::Request(v));
                }
            }
        }
    }

    /// The origin's answer to visitor `v`'s request at process `p` of host `h` ends its
    /// session: the front door revokes its newest ticket (`issued`, else the one it carried)
    /// and clears its cookie. It comes back later without a ticket, or replays the old one.
    fn revoke(
        &mut self,
        v: usize,
        h: usize,
        p: usize,
        engine: &Arc<Engine>,
        carried: Option<&str>,
        issued: Option<&str>,
    ) {
        let now = self.host_now(h);
        let slot: Arc<Mutex<Option<Result<Revocation, String>>>> = Arc::default();
        let work = {
            let (engine, slot) = (engine.clone(), slot.clone());
            let (carried, issued) = (carried.map(str::to_owned), issued.map(str::to_owned));
            Box::new(move || {
                let r = engine
                    .revoke_request(
                        ROOM.as_bytes(),
                        carried.as_deref().map(str::as_bytes),
                        None,
                        issued.as_deref().map(str::as_bytes),
                        now,
                    )
                    .map_err(|e| e.to_string());
                *slot.lock().unwrap_or_else(|e| e.into_inner()) = Some(r);
            })
        };
        // The call runs on the process (its tick passes fault points: it may stop or crash
        // there). Every fault point lies after the revocation was recorded and the seat
        // counted out, so a call that did not return has revoked all the same.
        self.dispatch(h, p, Task::Revoke, work);
        let r = slot
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .take()
            .unwrap_or(Ok(Revocation::Revoked));
        match r {
            Ok(r) if r.ended() => {
                self.truth.revoked(v);
                self.out.revoked += 1;
                self.note(format!(
                    "visitor {v}: session revoked at host {h} ({})",
                    r.as_str()
                ));
                let old = self.visitors[v].cookie.take();
                if self.rng.gen_bool(1.0 / 3.0) {
                    self.visitors[v].cookie = old.clone();
                    self.visitors[v].revoked = old.map(|c| (c, self.now, h));
                }
                self.visitors[v].mood = Mood::Waiting {
                    until: self.now + 20_000,
                };
                let gap = self.rng.gen_range(300..3000);
                self.schedule(self.now + gap, Event::Request(v));
            }
            Ok(r) => self.note(format!(
                "visitor {v}: revocation at host {h}: {}",
                r.as_str()
            )),
            Err(e) => self.out.violation = Some(format!("visitor {v}: revoke failed: {e}")),
        }
    }

    /// Visitor `v` was handed an admission ticket at host `h`: its seat, from the ticket.
    /// Whether it is a first admission (a new seat).
    fn seat(&mut self, v: usize, h: usize, engine: &Arc<Engine>) -> bool {
        let keyring = self.keyring.get_or_insert_with(|| engine.keyring()).clone();
        let Some(cookie) = self.visitors[v].cookie.as_deref() else {
            return false;
        };
        let value = cookie.split_once('=').map_or("", |(_, v)| v);
        let Ok(t) = keyring.open_any_time(value, &self.room_id) else {
            self.out.violation = Some(format!(
                "visitor {v}: the engine handed out a ticket it cannot open"
            ));
            return false;
        };
        if t.state != TicketState::Admitted {
            return false;
        }
        let buckets = self.buckets();
        if let Some(n) = self.truth.admitted(v, h, u64::from(t.counted), &buckets) {
            self.out.admitted += 1;
            self.out.max_per_bucket = self.out.max_per_bucket.max(n);
            // A host admitting on its fallback share is beyond the guarantee.
            if let Ok(Some(state)) = engine.cluster_state(ROOM, self.host_now(h)) {
                self.fallback_seen(h, &state);
            }
            self.bounds();
            let per_minute = self
                .s
                .event
                .and_then(|e| e.per_minute)
                .map_or(self.s.per_minute, |m| m.max(self.s.per_minute));
            // (The seed's divisions are measured, not held to the limits.)
            if n > per_minute + self.out.bound_per_bucket && self.s.sharing == Sharing::Store {
                self.out.violation = Some(format!(
                    "bucket {} admitted {n}, over {per_minute} (bound {})",
                    t.counted, self.out.bound_per_bucket
                ));
            }
            self.note(format!(
                "visitor {v} admitted at host {h} in bucket {}",
                t.counted
            ));
            return true;
        }
        false
    }

    fn fallback_seen(&mut self, h: usize, state: &ClusterState) {
        if state.fallback && !self.hosts[h].beyond {
            self.hosts[h].beyond = true;
            self.note(format!(
                "host {h} holds seats on its fallback share, its grant past what the store \
                 reserves (beyond the guarantee)"
            ));
        }
    }

    // ---- faults ----------------------------------------------------------------------------

    fn fault(&mut self, f: Fault) {
        self.note(format!("fault: {f:?}"));
        let now = self.now;
        let shared = self.shared.clone();
        let mut net = shared.network.lock().unwrap_or_else(|e| e.into_inner());
        match f {
            Fault::StoreDown { ms, .. } => {
                net.down_until = net.down_until.max(now + ms);
                drop(net);
            }
            Fault::StoreStall { ms, .. } => {
                let until = net.stalled_until.max(now + ms);
                net.stalled_until = until;
                drop(net);
                self.schedule(until, Event::StallEnds);
            }
            Fault::StoreWipe { .. } => {
                net.wipe();
                drop(net);
                self.wiped_at = Some(now);
                self.schedule(now + 1, Event::LearningCheck);
            }
            Fault::StoreFailover { .. } => {
                let lost = net.failover(now);
                drop(net);
                if lost > 0 && self.s.replicas == 0 {
                    self.note(format!(
                        "failover lost {lost} writes hosts may use (no replicas configured)"
                    ));
                    self.store_lost = true;
                }
            }
            Fault::ReplicaLag { ms, lag, .. } => {
                net.lag_until = now + ms;
                net.lag = lag;
                drop(net);
            }
            Fault::StoreClockStep { by, .. } => {
                net.clock_offset += by;
                drop(net);
                if by > 0 {
                    let window = self.s.lease_ms + self.s.hold_ms() + self.s.lease_ms;
                    self.forward_steps.retain(|&t| t + window > now);
                    self.forward_steps.push(now);
                    if self.forward_steps.len() > 1 {
                        self.note("two forward steps of the store's clock within a hold".into());
                        self.store_lost = true;
                    }
                }
            }
            Fault::HostPartition { host, ms, .. } => {
                let u = &mut net.partitioned_until[host];
                *u = (*u).max(now + ms);
                drop(net);
            }
            Fault::HostClockStep { host, by, .. } => {
                drop(net);
                self.hosts[host].offset.fetch_add(by, Ordering::SeqCst);
                self.hosts[host].beyond = true;
            }
            Fault::Process {
                host,
                process,
                point,
                fault,
                ..
            } => {
                drop(net);
                let proc = &self.hosts[host].processes[process];
                if proc.alive {
                    *proc.hooks.plan.lock().unwrap_or_else(|e| e.into_inner()) =
                        Some(Plan { point, fault });
                }
            }
            Fault::HostRestart { host, .. } => {
                drop(net);
                for p in 0..self.s.processes {
                    self.kill(host, p);
                }
                let len = self.hosts[host].region.len();
                self.hosts[host].region = vec![Block([0; 128]); len].into_boxed_slice();
                self.hosts[host].restarted = Some(now);
                self.hosts[host].applied_until = 0;
                for p in 0..self.s.processes {
                    let fresh = self.new_process();
                    let old = std::mem::replace(&mut self.hosts[host].processes[p], fresh);
                    self.hosts[host].processes[p].life = old.life + 1;
                    self.start(host, p);
                }
            }
        }
        self.bounds();
    }

    /// A lease after a wiped store relearned: every host serving visitors must have been
    /// heard by then, or what it holds may be handed out again.
    fn learning_check(&mut self) {
        if self.wiped_at.is_none() {
            return;
        }
        let learn = self.s.learn_ms();
        let (born, heard) = {
            let net = self
                .shared
                .network
                .lock()
                .unwrap_or_else(|e| e.into_inner());
            (net.born_at, net.heard_in_learning(learn, self.now))
        };
        let Some(heard) = heard else {
            // Learning has not started, or not ended: look again when it ends (just before
            // anything else then), or soon.
            let at = born.map_or(self.now + 10, |b| (b + learn - 1).max(self.now + 1));
            self.schedule(at, Event::LearningCheck);
            return;
        };
        let wiped = self.wiped_at.take().unwrap_or(0);
        // A host's previous counters (restarted without a state file in the last lease and
        // session, or since the wipe) have no process left to report them to the relearning
        // store: what their visitors hold is forgotten until their sessions end.
        let memory = 2 * self.s.lease_ms + self.s.hold_ms();
        for h in 0..self.hosts.len() {
            if self.hosts[h].restarted.is_some_and(|t| t + memory > wiped) {
                self.note(format!(
                    "host {h}'s previous counters lived only in the wiped store"
                ));
                self.hosts[h].beyond = true;
            }
        }
        for (h, heard) in heard.into_iter().enumerate() {
            let serving = self.hosts[h].processes.iter().any(|p| p.alive);
            if serving && !heard && !self.store_lost {
                self.note(format!(
                    "host {h} not heard within the wiped store's learning lease"
                ));
                self.store_lost = true;
            }
        }
        self.bounds();
    }

    /// The bound over the limits the faults so far allow.
    fn bounds(&mut self) {
        let part = |limit: u64| (limit as f64 * self.s.fallback_share).floor() as u64;
        let granted = self
            .shared
            .network
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .most_granted
            .clone();
        let (mut total, mut minute) = (0, 0);
        for (host, granted) in self.hosts.iter().zip(granted) {
            if host.beyond {
                total += granted.0.max(part(self.s.total));
                minute += granted.1.max(part(self.s.per_minute));
            }
        }
        if self.store_lost {
            total += self.s.total;
            minute += self.s.per_minute;
        }
        self.out.bound = total;
        self.out.bound_per_bucket = minute;
    }

    fn check(&mut self) {
        if self.out.violation.is_some() {
            return;
        }
        let buckets = self.buckets();
        // A host whose visitors hold seats past the time the store may have dropped its
        // reservation (a lease and a session after the last grant it applied) is beyond the
        // guarantee. A grant's lease that goes back is a bug (the host would fall back while
        // the store still reserves its grant). A planned crowd's run looks every 100 ms of
        // virtual time (a first admission on a fallback share is seen at once, in `seat`).
        let look = self.s.crowd.is_none() || self.now >= self.hosts_checked_at + 100;
        if look {
            self.hosts_checked_at = self.now;
        }
        for (h, &bucket) in buckets.iter().enumerate().filter(|_| look) {
            let engine = self.hosts[h]
                .processes
                .iter()
                .find_map(|p| p.engine.clone().filter(|_| p.alive));
            let Some(e) = engine else { continue };
            let Ok(Some(state)) = e.cluster_state(ROOM, self.host_now(h)) else {
                continue;
            };
            if state.until < self.hosts[h].applied_until {
                self.out.violation = Some(format!(
                    "host {h}'s grant lease went back from {} to {}: it would fall back while \
                     the store still reserves its grant",
                    self.hosts[h].applied_until, state.until
                ));
                return;
            }
            self.hosts[h].applied_until = state.until;
            if state.fallback && !self.hosts[h].beyond && self.truth.active_at(h, bucket) > 0 {
                self.fallback_seen(h, &state);
                self.bounds();
            }
        }
        let active = self.truth.active(&buckets);
        self.out.max_active = self.out.max_active.max(active);
        let largest = self
            .s
            .event
            .map_or(self.s.total, |e| e.total.max(self.s.total));
        let exact = self.s.sharing == Sharing::Store;
        if active > largest + self.out.bound && exact {
            self.out.violation = Some(format!(
                "{active} visitors in a room of {largest} (bound over it {})",
                self.out.bound
            ));
        }
        // The limit in force now (the event's during it): nobody let in while the room holds
        // it or more (visitors let in before a switch to a lower limit stay).
        let (in_force, _) = self.limits_in_force();
        if active > self.last_active && active > in_force + self.out.bound && exact {
            self.out.violation = Some(format!(
                "{active} visitors (from {}) with {in_force} in force at {} ms (bound over it \
                 {})",
                self.last_active, self.now, self.out.bound
            ));
        }
        self.last_active = active;
    }
}

/// The configuration of host `h`.
///
/// With `limits` (a way of sharing other than the store's): no cluster table, and those
/// limits (`total_active_users`, `new_users_per_minute`) for the host alone.
fn host_config(s: &Scenario, h: usize, limits: Option<(u64, u64)>) -> String {
    let cluster = if limits.is_some() {
        String::new()
    } else {
        format!(
            "[cluster]\nredis_url = \"redis://simulated\"\nhost_id = \"h{h}\"\n\
             sync_interval_ms = {}\nlease_ms = {}\ntimeout_ms = {}\nfallback_share = {}\n\
             replicas = {}\n",
            s.sync_interval_ms, s.lease_ms, s.timeout_ms, s.fallback_share, s.replicas
        )
    };
    let (total, minute) = limits.unwrap_or((s.total, s.per_minute));
    format!(
        r#"
[settings]
bucket_width_secs = {bucket}
shards = 2

[tickets]
keys = [{{ id = 1, secret = "MDEyMzQ1Njc4OWFiY2RlZjAxMjM0NTY3ODlhYmNkZWY=" }}]

{cluster}

[[rooms]]
name = "{ROOM}"
total_active_users = {total}
new_users_per_minute = {minute}
session_duration = {session}
refresh_interval = {refresh}
max_live_waiters = {waiters}
queue_buckets = {queue_buckets}
{commands}[rooms.cookie]
secure = false
{event}"#,
        bucket = s.bucket_secs,
        total = total,
        minute = minute,
        session = s.session,
        refresh = s.refresh_secs,
        waiters = s.max_live_waiters,
        queue_buckets = s.queue_buckets,
        commands = if s.revocations > 0.0 {
            "enabled_origin_commands = [\"revoke\"]\n"
        } else {
            ""
        },
        event = s.event.map_or(String::new(), |e| {
            let at = |ms: u64| velvet_rope::config::Instant::from_millis(T0 + ms).to_rfc3339();
            let mut t = format!(
                "[[rooms.events]]\nname = \"sim\"\nevent_start = \"{}\"\nevent_end = \"{}\"\n\
                 total_active_users = {}\n",
                at(e.start_ms),
                at(e.end_ms),
                e.total
            );
            if let Some(p) = e.prequeue_ms {
                t += &format!("prequeue_start = \"{}\"\n", at(p));
            }
            if e.shuffle {
                t += "shuffle_at_event_start = true\n";
            }
            if let Some(m) = e.per_minute {
                t += &format!("new_users_per_minute = {m}\n");
            }
            t
        }),
    )
}

/// An exponentially distributed draw with this mean.
fn exponential(rng: &mut StdRng, mean: f64) -> f64 {
    -(1.0 - rng.gen::<f64>()).ln() * mean
}

/// A host for a new visitor, by the hosts' traffic weights.
fn pick_host(weights: &[f64], rng: &mut StdRng) -> usize {
    let total: f64 = weights.iter().sum();
    if !(total > 0.0 && total.is_finite()) {
        return 0;
    }
    let mut x = rng.gen_range(0.0..total);
    let mut host = 0;
    for (h, w) in weights.iter().enumerate() {
        if x < *w {
            host = h;
            break;
        }
        x -= w;
    }
    host
}

/// Asks the processor to load the cache line at `p` (a hint: nothing is read that the program
/// sees, and no address faults).
#[inline]
fn prefetch(p: *const u8) {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: a prefetch reads nothing the program sees and never faults, whatever `p` is.
    unsafe {
        std::arch::x86_64::_mm_prefetch::<{ std::arch::x86_64::_MM_HINT_T0 }>(p.cast());
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = p;
}
