//! The cluster tier under deterministic fault simulation (see `velvet_rope_cluster::sim`):
//! hosts with several processes each, on a virtual clock, through a simulated store with a
//! replica; every step checked against the ground truth of the visitors' seats.
//!
//! - `SIM_SEEDS=<n>` sets how many seeds the random sweeps run (`make soak` runs many);
//! - `SIM_SEED=<n>` replays one seed of every sweep, with `SIM_TRACE=<events>` of trace.
//!
//! The named schedules reproduce what the exactness review found: each failed before its fix
//! (the review's items are in the names), and each was checked to fail again with its fix
//! taken out.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;

use velvet_rope_cluster::sim::{run, Fault, Outcome, Point, ProcessFault, RandomFaults, Scenario};

/// The seeds a sweep runs: `SIM_SEED` alone, or `SIM_SEEDS` of them (else `default`).
fn seeds(default: u64) -> Vec<u64> {
    if let Some(s) = std::env::var("SIM_SEED").ok().and_then(|s| s.parse().ok()) {
        return vec![s];
    }
    let n = std::env::var("SIM_SEEDS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(default);
    (0..n).collect()
}

fn traced(s: &Scenario) -> Scenario {
    let mut s = s.clone();
    if let Some(n) = std::env::var("SIM_TRACE").ok().and_then(|s| s.parse().ok()) {
        s.trace = n;
    }
    s
}

/// Runs `s` over the seeds on every core; fails with the first violating seed's report.
/// Returns (seeds, seeds that stayed within the guarantee, the fullest of those).
fn sweep(s: &Scenario, default: u64) -> (u64, u64, Outcome) {
    let s = traced(s);
    let seeds = seeds(default);
    let next = AtomicU64::new(0);
    let finished = AtomicU64::new(0);
    let step = (seeds.len() as u64 / 20).max(500);
    let exact = AtomicU64::new(0);
    let failed: Mutex<Option<Outcome>> = Mutex::new(None);
    let fullest: Mutex<Option<Outcome>> = Mutex::new(None);
    let workers = std::thread::available_parallelism().map_or(2, |n| n.get().min(4));
    std::thread::scope(|scope| {
        for _ in 0..workers {
            scope.spawn(|| loop {
                let i = next.fetch_add(1, Ordering::SeqCst) as usize;
                if i >= seeds.len() || failed.lock().unwrap().is_some() {
                    return;
                }
                let o = run(&s, seeds[i]);
                let done = finished.fetch_add(1, Ordering::SeqCst) + 1;
                if done % step == 0 {
                    eprintln!("  {done} of {} schedules checked", seeds.len());
                }
                if o.violation.is_some() {
                    failed.lock().unwrap().get_or_insert(o);
                    return;
                }
                if o.bound != 0 {
                    continue;
                }
                exact.fetch_add(1, Ordering::SeqCst);
                let mut f = fullest.lock().unwrap();
                if !f.as_ref().is_some_and(|w| w.max_active >= o.max_active) {
                    *f = Some(o);
                }
            });
        }
    });
    if let Some(o) = failed.into_inner().unwrap() {
        panic!("{}", o.report());
    }
    let fullest = fullest.into_inner().unwrap().unwrap_or_default();
    (seeds.len() as u64, exact.into_inner(), fullest)
}

/// One schedule: the outcome, or the report of its violation.
fn once(s: &Scenario, seed: u64) -> Outcome {
    let o = run(&traced(s), seed);
    assert!(o.violation.is_none(), "{}", o.report());
    o
}

/// Any schedule of faults the guarantee covers (outages, stalls and partitions within a
/// lease and a session, failovers with `replicas`, wipes heard from, one clock step of the
/// store, host restarts, process crashes and stops at every fault point): the room never
/// holds one visitor more than its limit, and no bucket admits one more than its limit.
#[test]
fn random_schedules_within_the_guarantee_never_overshoot() {
    let (n, exact, fullest) = sweep(&Scenario::default(), 500);
    eprintln!(
        "{n} schedules within the guarantee: {exact} exact throughout (the rest went beyond \
         it and kept the bound); the fullest of those held {} of 30",
        fullest.max_active
    );
    assert!(
        exact * 20 >= n * 19,
        "most schedules must stay within the guarantee"
    );
    assert!(
        fullest.max_active == 30 || n < 10,
        "the room fills: {}",
        fullest.report()
    );
}

/// Any schedule at all (partitions and outages longer than a lease and a session, failovers
/// without `replicas`, host clocks stepping, stops past the tick lock's takeover): never more
/// than the stated bound over the limit.
#[test]
fn random_schedules_beyond_the_guarantee_keep_the_stated_bound() {
    let s = Scenario {
        random_faults: RandomFaults::Any,
        replicas: 0,
        run_ms: 40_000,
        ..Scenario::default()
    };
    let (n, exact, fullest) = sweep(&s, 200);
    eprintln!(
        "{n} schedules beyond the guarantee: {exact} stayed within it (the fullest of those \
         held {} of 30); the others kept the bound",
        fullest.max_active
    );
}

/// A seed replays exactly: the same schedule, the same decisions, the same trace.
#[test]
fn a_seed_replays_exactly() {
    let s = Scenario {
        random_faults: RandomFaults::Any,
        trace: 200,
        ..Scenario::default()
    };
    for seed in [3, 14, 56] {
        let (a, b) = (run(&s, seed), run(&s, seed));
        assert_eq!(
            (
                a.steps,
                a.admitted,
                a.queued,
                a.max_active,
                a.crashes,
                &a.trace
            ),
            (
                b.steps,
                b.admitted,
                b.queued,
                b.max_active,
                b.crashes,
                &b.trace
            ),
            "seed {seed}"
        );
    }
}

/// Item 1: the store stalls (SIGSTOP) 2.5 s against a 0.6 s lease, room of 20. Before, each
/// host fell back to its share of the limit when its grant lapsed, while the store still
/// reserved its last grant for it and handed the others the rest: 29 in a room of 20 against
/// a real Redis. (Checked: with hosts falling back at the lease's end, 70 of these 120
/// schedules overshoot.)
#[test]
fn item1_store_stalled_past_the_lease() {
    for seed in 0..40 {
        for at in [4000, 6000, 9000] {
            let s = Scenario {
                total: 20,
                arrivals_per_sec: 20.0,
                faults: vec![Fault::StoreStall { at, ms: 2500 }],
                random_faults: RandomFaults::None,
                ..Scenario::default()
            };
            let o = once(&s, seed);
            assert_eq!(o.bound, 0, "within the guarantee: {}", o.report());
        }
    }
}

/// Item 2: the store fails over to a replica that missed its last writes. With `replicas =
/// 1` a host applies only grants the replica acknowledged (WAIT): exact, however the
/// replication lags. Without, the stated bound holds (a roomful: what the lost grants can
/// give out again), and hosts whose grants the store forgot make it learn.
#[test]
fn item2_failover_to_a_replica_that_missed_writes() {
    for seed in 0..30 {
        // Replication lags by less than WAIT waits (the grants are applied), then by more
        // for a second (they are not), with failovers in both.
        let faults = vec![
            Fault::ReplicaLag {
                at: 3000,
                ms: 4000,
                lag: 80,
            },
            Fault::StoreFailover { at: 5000 },
            Fault::ReplicaLag {
                at: 8000,
                ms: 1500,
                lag: 400,
            },
            Fault::StoreFailover { at: 9000 },
            Fault::ReplicaLag {
                at: 10_000,
                ms: 4000,
                lag: 60,
            },
            Fault::StoreFailover { at: 11_000 },
        ];
        let exact = Scenario {
            faults: faults.clone(),
            random_faults: RandomFaults::None,
            ..Scenario::default()
        };
        let o = once(&exact, seed);
        assert_eq!(o.bound, 0, "{}", o.report());
        let unreplicated = Scenario {
            replicas: 0,
            ..exact
        };
        once(&unreplicated, seed);
    }
}

/// Item 3: two processes of one host sync at once. One reads its report, stalls past its
/// turn (2.2 s, against a turn of 1.3 s), the other syncs and uses a larger grant, then the
/// stalled one sends its old report. Before, the store replaced the host's reservation with
/// the smaller one (189 in a room of 100 in the review). Now a report older than the host's
/// last grant is answered with what the store already reserves. (This schedule overshoots
/// with that answer taken out.)
#[test]
fn item3_a_stalled_process_sends_an_old_report() {
    let s = Scenario {
        hosts: 2,
        processes: 2,
        total: 20,
        arrivals_per_sec: 25.0,
        faults: (0..2)
            .map(|process| Fault::Process {
                at: 3300,
                host: 0,
                process,
                point: Point::SyncReported,
                fault: ProcessFault::Stop { ms: 2200 },
            })
            .collect(),
        random_faults: RandomFaults::None,
        ..Scenario::default()
    };
    let o = once(&s, 44);
    assert!(o.stale_reports > 0, "the schedule sends stale reports");
    assert_eq!(o.bound, 0);
}

/// Item 4: processes crash mid-advance, right after granting slots to a pool. Before, the
/// ledger was written after the pools, so the next advance granted the same slots again (10
/// claims in a room of 5). The pools are the ledger now. (With a separate ledger written after
/// the grant, every one of these schedules overshoots.)
#[test]
fn item4_crashes_mid_advance() {
    for seed in 0..20 {
        for point in [
            Point::AdvanceRevoked,
            Point::AdvanceGranted,
            Point::AdvanceRead,
        ] {
            let s = Scenario {
                total: 20,
                arrivals_per_sec: 20.0,
                faults: (0..10)
                    .map(|k| Fault::Process {
                        at: 2000 + k * 1500,
                        host: (k % 3) as usize,
                        process: (k % 2) as usize,
                        point,
                        fault: ProcessFault::Crash,
                    })
                    .collect(),
                random_faults: RandomFaults::None,
                ..Scenario::default()
            };
            let o = once(&s, seed);
            assert!(o.crashes > 0);
        }
    }
}

/// Item 6: the store's clock jumps an hour ahead while a host is partitioned. Before, every
/// silent host's reservation was dropped at once, without learning. The store's effective
/// clock moves at most a lease per call, and a margin of a lease covers it. (With the raw
/// clock, every one of these schedules overshoots.)
#[test]
fn item6_the_stores_clock_jumps_ahead() {
    for seed in 0..40 {
        for at in [4000, 6000, 9000] {
            let s = Scenario {
                total: 20,
                arrivals_per_sec: 20.0,
                faults: vec![
                    Fault::HostPartition {
                        at,
                        host: (seed % 3) as usize,
                        ms: 3000,
                    },
                    Fault::StoreClockStep {
                        at: at + 1000,
                        by: 3_600_000,
                    },
                ],
                random_faults: RandomFaults::None,
                ..Scenario::default()
            };
            assert_eq!(once(&s, seed).bound, 0);
        }
    }
}

/// A host restarts without a state file (counters made anew: another host to the store)
/// while its visitors keep coming back; the store is wiped while every host is connected.
#[test]
fn restarts_without_state_and_a_wiped_store() {
    for seed in 0..20 {
        let s = Scenario {
            faults: vec![
                Fault::HostRestart { at: 3000, host: 0 },
                Fault::StoreWipe { at: 10_000 },
                Fault::HostRestart {
                    at: 12_000,
                    host: 2,
                },
            ],
            random_faults: RandomFaults::None,
            ..Scenario::default()
        };
        assert_eq!(once(&s, seed).bound, 0);
    }
}

/// A process stopped mid-advance for half a minute (past the tick lock's takeover, a second)
/// wakes up to a lock its host's other process took over: it grants nothing more, and its
/// host went on reporting meanwhile.
#[test]
fn a_process_stopped_past_the_lock_takeover() {
    for seed in 0..10 {
        for point in [
            Point::AdvanceRead,
            Point::AdvanceRevoked,
            Point::AdvanceGranted,
        ] {
            let s = Scenario {
                session: 40,
                run_ms: 45_000,
                faults: vec![Fault::Process {
                    at: 4000,
                    host: 1,
                    process: 0,
                    point,
                    fault: ProcessFault::Stop { ms: 31_000 },
                }],
                random_faults: RandomFaults::None,
                ..Scenario::default()
            };
            assert_eq!(once(&s, seed).bound, 0);
        }
    }
}

/// A process stopped for longer than a lease and a session right before it sends its report
/// (its lease's start read), while its host's other process goes on syncing: when it
/// resumes, the store answers its old report with the host's reservation under a newer
/// sequence number, and a lease that started long ago. Before, that grant replaced the host's
/// fresh one and the host fell back at once (30 in a room of 20 with a fallback share of a
/// half: found by an adversarial review). A grant never shortens the lease it replaces; the
/// simulation checks that a host's lease never goes back.
#[test]
fn a_process_stopped_before_sending_does_not_shorten_its_hosts_lease() {
    for seed in 0..30 {
        let s = Scenario {
            total: 20,
            per_minute: 20,
            fallback_share: 0.5,
            arrivals_per_sec: 40.0,
            faults: vec![
                Fault::Process {
                    at: 4000,
                    host: 0,
                    process: 0,
                    point: Point::SyncSending,
                    fault: ProcessFault::Stop { ms: 6000 },
                },
                Fault::StoreDown {
                    at: 10_050,
                    ms: 800,
                },
            ],
            random_faults: RandomFaults::None,
            ..Scenario::default()
        };
        assert_eq!(once(&s, seed).bound, 0);
    }
}

/// The store is wiped, its clock steps forward less than a lease right after, and a host
/// partitioned across the wipe first reports within the learning period: the store learns a
/// lease longer on its effective clock, so the step cannot end learning before the host is
/// heard (found by an adversarial review: 21 in a room of 20).
#[test]
fn a_store_clock_step_while_it_relearns() {
    for seed in 0..40 {
        let s = Scenario {
            total: 20,
            per_minute: 40,
            arrivals_per_sec: 40.0,
            faults: vec![
                Fault::HostPartition {
                    at: 9_900,
                    host: 2,
                    ms: 1_150,
                },
                Fault::StoreWipe { at: 10_000 },
                Fault::StoreClockStep {
                    at: 10_050,
                    by: 590,
                },
            ],
            random_faults: RandomFaults::None,
            ..Scenario::default()
        };
        assert_eq!(once(&s, seed).bound, 0);
    }
}

/// Processes crash after filling the new slot of a grant (or of what an advance applied) and
/// before making it current: the record stays whole, the old one (found by an adversarial
/// review: a grant written cell by cell, torn by a crash, was enforced).
#[test]
fn crashes_while_writing_a_grant_or_what_an_advance_applied() {
    for seed in 0..20 {
        let s = Scenario {
            total: 20,
            arrivals_per_sec: 20.0,
            faults: (0..12)
                .map(|k| Fault::Process {
                    at: 2000 + k * 1200,
                    host: (k % 3) as usize,
                    process: (k % 2) as usize,
                    point: Point::RecordWritten,
                    fault: ProcessFault::Crash,
                })
                .collect(),
            random_faults: RandomFaults::None,
            ..Scenario::default()
        };
        let o = once(&s, seed);
        assert!(o.crashes > 0);
    }
}

/// A scheduled event lowers the room from 30 to 12 for a while, then the room's own limit
/// returns: at the switch down no host lets anyone in while the room holds 12 or more (the
/// store's grants come from the strictest limits over a grant's lease and hold, and a host
/// never enforces more than the limits in force), under any schedule within the guarantee.
#[test]
fn an_event_lowering_the_limit_is_exact_across_hosts() {
    use velvet_rope_cluster::sim::SimEvent;
    let s = Scenario {
        run_ms: 24_000,
        event: Some(SimEvent {
            start_ms: 9_000,
            end_ms: 16_000,
            total: 12,
            per_minute: None,
            prequeue_ms: None,
            shuffle: false,
        }),
        ..Scenario::default()
    };
    let (n, exact, fullest) = sweep(&s, 150);
    eprintln!(
        "{n} schedules with an event (30 -> 12 -> 30): {exact} within the guarantee, the \
         fullest held {}",
        fullest.max_active
    );
}

/// Origin commands under faults: the origin revokes about one admitted request in twenty,
/// a third of the revoked visitors replay their old ticket. Every replay at the revoking host
/// is refused, the seats revocations free count once (the room never holds one visitor more
/// than its limit), whatever the schedule within the guarantee does.
#[test]
fn revocations_under_faults_free_each_seat_once() {
    let s = Scenario {
        revocations: 0.05,
        ..Scenario::default()
    };
    let revoked = AtomicU64::new(0);
    let (n, exact, fullest) = sweep(&s, 150);
    for seed in seeds(3).into_iter().take(3) {
        revoked.fetch_add(once(&s, seed).revoked, Ordering::SeqCst);
    }
    eprintln!(
        "{n} schedules with revocations: {exact} exact throughout; the fullest held {} of 30",
        fullest.max_active
    );
    assert!(revoked.load(Ordering::SeqCst) > 0, "sessions were revoked");
    assert!(
        exact * 20 >= n * 19,
        "most schedules must stay within the guarantee"
    );
    // Beyond the guarantee (partitions, failovers without replicas, host clocks stepping):
    // the stated bound holds, and replays of revoked tickets are refused all the same.
    let beyond = Scenario {
        random_faults: RandomFaults::Any,
        replicas: 0,
        ..s
    };
    let (n, exact, _) = sweep(&beyond, 100);
    eprintln!("{n} schedules with revocations beyond the guarantee: {exact} stayed within it");
}

/// Origin commands behind a load balancer without affinity: half of each visitor's requests go
/// to any host, which counts it afresh; a revocation reaches those hosts through the store and
/// they count the visitor out there too (a replay of the revoked ticket at a host it has not
/// reached yet is counted afresh, then out). The room never holds one visitor more than its
/// limit, whatever the schedule within the guarantee does. (About a quarter of the ids a host
/// receives find a count afresh to free. The counts of a visitor that moved overlap for a
/// session at the hosts it left, so this sweep would not tell one seat freed twice from
/// once: the unit tests and the loom model do.)
#[test]
fn revocations_without_affinity_free_remote_seats() {
    let s = Scenario {
        revocations: 0.05,
        affinity: 0.5,
        ..Scenario::default()
    };
    let (n, exact, fullest) = sweep(&s, 150);
    let revoked: u64 = seeds(3)
        .into_iter()
        .take(3)
        .map(|seed| once(&s, seed).revoked)
        .sum();
    eprintln!(
        "{n} schedules with revocations, no affinity: {exact} exact throughout; the fullest \
         held {} of 30",
        fullest.max_active
    );
    assert!(revoked > 0, "sessions were revoked");
    assert!(
        exact * 20 >= n * 19,
        "most schedules must stay within the guarantee"
    );
}
