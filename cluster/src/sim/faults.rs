//! The faults a simulation injects, given or drawn by the seed.

use rand::rngs::StdRng;
use rand::Rng;

use super::{RandomFaults, Scenario};

/// Where a process fault strikes: one of the engine's fault points (the advance of a room's
/// counters, a sync, the writing of a shared ticket key).
pub type Point = velvet_rope::env::FaultPoint;

/// What happens to a process at a fault point.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ProcessFault {
    /// It dies there (it releases nothing); it is started again a little later.
    Crash,
    /// It stops there for this many ms (SIGSTOP, a page-fault storm), then goes on.
    Stop {
        /// How long.
        ms: u64,
    },
}

/// One fault, at a time (ms from the start of the run).
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Fault {
    /// The store refuses connections for `ms` (killed, or a network outage that resets).
    StoreDown {
        /// When.
        at: u64,
        /// How long.
        ms: u64,
    },
    /// The store stalls for `ms` (SIGSTOP): requests wait in its sockets and are applied when
    /// it resumes; their senders have given up by then.
    StoreStall {
        /// When.
        at: u64,
        /// How long.
        ms: u64,
    },
    /// The store restarts without its data.
    StoreWipe {
        /// When.
        at: u64,
    },
    /// The store fails over to its replica, which has the writes it received so far.
    StoreFailover {
        /// When.
        at: u64,
    },
    /// Replication lags by `lag` ms for `ms`.
    ReplicaLag {
        /// When.
        at: u64,
        /// How long.
        ms: u64,
        /// By how much.
        lag: u64,
    },
    /// The store's clock steps by `by` ms.
    StoreClockStep {
        /// When.
        at: u64,
        /// By how much (negative: back).
        by: i64,
    },
    /// Host `host` cannot reach the store for `ms` (its calls time out).
    HostPartition {
        /// When.
        at: u64,
        /// Which host.
        host: usize,
        /// How long.
        ms: u64,
    },
    /// Host `host`'s clock steps by `by` ms.
    HostClockStep {
        /// When.
        at: u64,
        /// Which host.
        host: usize,
        /// By how much.
        by: i64,
    },
    /// From `at` on, the next time process `process` of host `host` reaches `point`, `fault`.
    Process {
        /// When it is armed.
        at: u64,
        /// Which host.
        host: usize,
        /// Which of its processes.
        process: usize,
        /// Where.
        point: Point,
        /// What.
        fault: ProcessFault,
    },
    /// Every process of host `host` restarts with counters made anew (no state file).
    HostRestart {
        /// When.
        at: u64,
        /// Which host.
        host: usize,
    },
}

impl Fault {
    /// When it strikes (or is armed).
    pub fn at(&self) -> u64 {
        match *self {
            Fault::StoreDown { at, .. }
            | Fault::StoreStall { at, .. }
            | Fault::StoreWipe { at }
            | Fault::StoreFailover { at }
            | Fault::ReplicaLag { at, .. }
            | Fault::StoreClockStep { at, .. }
            | Fault::HostPartition { at, .. }
            | Fault::HostClockStep { at, .. }
            | Fault::Process { at, .. }
            | Fault::HostRestart { at, .. } => at,
        }
    }
}

const POINTS: [Point; 9] = [
    Point::AdvanceRead,
    Point::AdvanceRevoked,
    Point::AdvanceGranted,
    Point::AdvancePublished,
    Point::RecordWritten,
    Point::SyncReported,
    Point::SyncSending,
    Point::SyncAnswered,
    Point::SyncGranted,
];

/// The faults a seed adds to `s`'s own.
pub(crate) fn draw(s: &Scenario, rng: &mut StdRng) -> Vec<Fault> {
    let any = match s.random_faults {
        RandomFaults::None => return Vec::new(),
        RandomFaults::WithinGuarantee => false,
        RandomFaults::Any => true,
    };
    let warm = 1500;
    let span = s.run_ms.saturating_sub(warm + 2000).max(1);
    // Within the guarantee a host may go a lease and a session without a sync; a fault that
    // silences it is kept well inside that (the intervals around it, a process's restart).
    let quiet_most = s
        .hold_ms()
        .saturating_sub(4 * s.sync_interval_ms + 3 * s.timeout_ms + 800);
    let silence = |rng: &mut StdRng| {
        if any && rng.gen_bool(0.3) {
            rng.gen_range(s.hold_ms()..3 * s.hold_ms())
        } else {
            rng.gen_range(50..quiet_most.max(51))
        }
    };
    let n = rng.gen_range(1..=6);
    let mut faults = Vec::new();
    let mut store_steps = 0;
    for _ in 0..n {
        let at = warm + rng.gen_range(0..span);
        let host = rng.gen_range(0..s.hosts);
        let fault = match rng.gen_range(0..100) {
            0..=9 => Fault::StoreDown {
                at,
                ms: silence(rng),
            },
            10..=21 => Fault::StoreStall {
                at,
                ms: silence(rng),
            },
            22..=33 => Fault::HostPartition {
                at,
                host,
                ms: silence(rng),
            },
            34..=39 => Fault::StoreFailover { at },
            40..=45 => Fault::ReplicaLag {
                at,
                ms: rng.gen_range(100..3000),
                lag: rng.gen_range(20..2000),
            },
            46..=51 => {
                store_steps += 1;
                if store_steps > 1 && !any {
                    continue;
                }
                Fault::StoreClockStep {
                    at,
                    by: rng.gen_range(-20_000..20_000),
                }
            }
            52..=55 if any => Fault::HostClockStep {
                at,
                host,
                by: rng.gen_range(-10_000..10_000),
            },
            56..=59 => Fault::HostRestart { at, host },
            60..=63 => Fault::StoreWipe { at },
            _ => Fault::Process {
                at,
                host,
                process: rng.gen_range(0..s.processes),
                point: POINTS[rng.gen_range(0..POINTS.len())],
                fault: if rng.gen_bool(0.5) {
                    ProcessFault::Crash
                } else if any && rng.gen_bool(0.1) {
                    // Past the tick lock's takeover: the stopped holder wakes up to a lock
                    // taken over.
                    ProcessFault::Stop {
                        ms: rng.gen_range(30_000..32_000),
                    }
                } else {
                    ProcessFault::Stop {
                        ms: rng.gen_range(10..quiet_most.max(11)),
                    }
                },
            },
        };
        faults.push(fault);
    }
    faults
}
