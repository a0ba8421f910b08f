//! The in-process coordinator: learning mode, expiry, release, bands, safe capacity, config.
//! Every step of every test goes through `step`, which checks the invariants.

use proptest::prelude::*;
use velvet_rope::clock::Millis;
use velvet_rope::lease::algorithm::{fair_share, Demand};
use velvet_rope::lease::{
    AlgorithmKind, Coordinator, Lease, LeaseConfig, LeaseError, LeaseRequest, ResourceTemplate,
    TemplateSet, Upstream,
};

fn coordinator(template: ResourceTemplate, now: Millis) -> Coordinator {
    Coordinator::new(TemplateSet::from_templates(vec![template]).unwrap(), now)
}

fn template(capacity: f64, kind: AlgorithmKind, lease_s: f64, learning_s: f64) -> ResourceTemplate {
    let mut t = ResourceTemplate::new("*", capacity, kind);
    t.algorithm.lease_length = lease_s;
    t.algorithm.refresh_interval = lease_s.min(5.0);
    t.algorithm.learning_mode_duration = Some(learning_s);
    t
}

/// One request, followed by the invariant check (sum of unexpired grants <= capacity for
/// pooled algorithms, no grant negative) and the per-grant clamp.
fn step(c: &Coordinator, client: &str, resource: &str, wants: f64, now: Millis) -> Lease {
    step_with(c, &LeaseRequest::new(client, resource, wants, 0), now)
}

fn step_with(c: &Coordinator, req: &LeaseRequest<'_>, now: Millis) -> Lease {
    let others: f64 = c
        .grants(req.resource, now)
        .iter()
        .filter(|(id, _)| id != req.client_id)
        .map(|(_, g)| g.has)
        .sum();
    let t = c.template(req.resource).unwrap().clone();
    let lease = c.request_with(req, now).unwrap();
    assert!(lease.capacity >= 0.0);
    if t.algorithm.kind.shares_capacity() {
        assert!(
            lease.capacity <= (t.capacity - others).max(0.0),
            "grant {} above capacity {} - others {others}",
            lease.capacity,
            t.capacity
        );
        assert!(c.sum_granted(req.resource, now) <= t.capacity);
    }
    c.check_invariants(now).unwrap();
    lease
}

#[test]
fn learning_mode_gives_back_what_clients_hold() {
    let c = coordinator(
        template(100.0, AlgorithmKind::ProportionalShare, 2.0, 2.0),
        0,
    );
    assert!(c.in_learning_mode("r", 0).unwrap());
    let req = |client, wants, has| LeaseRequest {
        has,
        ..LeaseRequest::new(client, "r", wants, 0)
    };
    // Doorman's TestLearningMode: reports has 20 wants 30 -> 20.
    assert_eq!(step_with(&c, &req("a", 30.0, 20.0), 0).capacity, 20.0);
    // A new client holding nothing gets nothing while learning.
    assert_eq!(step_with(&c, &req("b", 50.0, 0.0), 100).capacity, 0.0);
    // Doorman over-assigns here (gives 90); we give back at most what is free.
    assert_eq!(step_with(&c, &req("c", 90.0, 90.0), 200).capacity, 80.0);
    // After one lease length the algorithm decides; a's lease (from t=0) has lapsed, c
    // still holds 80 until 2.2 s, so b gets the 20 that are free.
    assert!(!c.in_learning_mode("r", 2_000).unwrap());
    assert_eq!(step_with(&c, &req("b", 50.0, 0.0), 2_000).capacity, 20.0);
    // Once c's lease lapses too, b gets its proportional share of the whole capacity.
    assert_eq!(step_with(&c, &req("b", 50.0, 0.0), 2_200).capacity, 50.0);
}

/// The learning period's start and end are events the host drains, once each per template
/// (the end when a drain comes after it, dated when it ended); grants say whether they were
/// made learning; a template without a learning period logs nothing.
#[test]
fn learning_mode_is_logged_as_events() {
    let with = template(100.0, AlgorithmKind::FairShare, 2.0, 2.0);
    let mut without = template(100.0, AlgorithmKind::FairShare, 2.0, 0.0);
    without.identifier_glob = "quiet".into();
    let set = TemplateSet::from_templates(vec![without, with]).unwrap();
    let c = Coordinator::new(set, 1_000);
    let lines = |now| -> Vec<String> { c.drain_events(now).iter().map(|e| e.to_json()).collect() };
    assert_eq!(
        lines(1_500),
        [
            r#"{"event":"lease_learning_started","at_ms":1000,"resource":"*","source":"coordinator","until_ms":"3000"}"#
        ]
    );
    assert!(c.request("a", "r", 10.0, 0, 1_500).unwrap().learning);
    assert!(!c.request("a", "quiet", 10.0, 0, 1_500).unwrap().learning);
    assert!(lines(2_999).is_empty());
    assert!(!c.request("a", "r", 10.0, 0, 3_000).unwrap().learning);
    // The C ABI's way: one at a time, left when the caller's buffer is too small.
    assert!(c.next_event_if(3_500, |_| false).is_none());
    let ended = c.next_event_if(3_500, |_| true).unwrap();
    assert_eq!(
        ended.to_json(),
        r#"{"event":"lease_learning_ended","at_ms":3000,"resource":"*","source":"coordinator"}"#
    );
    assert!(!ended.kind.is_warning());
    assert!(lines(10_000).is_empty(), "each logged once");
    assert_eq!(c.events_dropped(), 0);
}

#[test]
fn expiry_and_release_free_capacity() {
    let c = coordinator(template(100.0, AlgorithmKind::FairShare, 10.0, 0.0), 0);
    assert_eq!(step(&c, "a", "db", 100.0, 0).capacity, 100.0);
    // Nothing is free while a's lease runs.
    assert_eq!(step(&c, "b", "db", 100.0, 1_000).capacity, 0.0);
    // a's lease expires at 10 s without refresh: its capacity is free.
    assert_eq!(c.sum_granted("db", 10_000), 0.0);
    assert_eq!(step(&c, "b", "db", 100.0, 10_000).capacity, 100.0);
    assert!(c.release("b", "db").unwrap());
    assert!(!c.release("b", "db").unwrap());
    assert_eq!(step(&c, "a", "db", 60.0, 10_001).capacity, 60.0);
}

#[test]
fn refreshing_clients_converge_to_fair_share() {
    let c = coordinator(template(120.0, AlgorithmKind::FairShare, 30.0, 0.0), 0);
    let wants = [("a", 1000.0), ("b", 50.0), ("c", 10.0)];
    let mut now = 0;
    for _round in 0..4 {
        for (id, w) in wants {
            step(&c, id, "r", w, now);
            now += 1_000;
        }
    }
    let g: Vec<f64> = c.grants("r", now).iter().map(|(_, g)| g.has).collect();
    assert_eq!(g, vec![60.0, 50.0, 10.0]);
    assert!(c.sum_granted("r", now) >= 0.99 * 120.0);
}

#[test]
fn priority_bands_are_served_highest_first() {
    let c = coordinator(template(100.0, AlgorithmKind::FairShare, 30.0, 0.0), 0);
    let req = |id, wants, priority| LeaseRequest::new(id, "r", wants, priority);
    let mut now = 0;
    for _ in 0..3 {
        step_with(&c, &req("low", 80.0, 0), now);
        step_with(&c, &req("high", 70.0, 5), now + 1);
        now += 1_000;
    }
    let g = c.grants("r", now);
    assert_eq!(g[0].0, "high");
    assert_eq!(g[0].1.has, 70.0);
    assert_eq!(g[1].1.has, 30.0);
}

#[test]
fn safe_capacity_dynamic_and_configured() {
    let c = coordinator(template(100.0, AlgorithmKind::FairShare, 30.0, 0.0), 0);
    step(&c, "a", "r", 10.0, 0);
    let l = step(&c, "b", "r", 10.0, 0);
    assert_eq!(l.safe_capacity, 50.0);
    let mut t = template(100.0, AlgorithmKind::FairShare, 30.0, 0.0);
    t.safe_capacity = Some(10.0);
    let c = coordinator(t, 0);
    assert_eq!(step(&c, "a", "r", 10.0, 0).safe_capacity, 10.0);
}

#[test]
fn lease_timing_and_upstream_ceiling() {
    let mut t = template(100.0, AlgorithmKind::FairShare, 342.0, 0.0);
    t.algorithm.refresh_interval = 5.0;
    let c = coordinator(t, 0);
    let l = step(&c, "a", "r", 10.0, 1_000);
    assert_eq!(l.expires_at, 343_000);
    assert_eq!(l.refresh_interval_secs, 5.0);
    c.set_upstream_expiry(Some(60_000));
    assert_eq!(step(&c, "a", "r", 10.0, 2_000).expires_at, 60_000);
}

#[test]
fn errors_name_resource_and_field() {
    let set = TemplateSet::from_templates(vec![ResourceTemplate::new(
        "db-*",
        10.0,
        AlgorithmKind::FairShare,
    )])
    .unwrap();
    let c = Coordinator::new(set, 0);
    let e = c.request("a", "cache", 1.0, 0, 0).unwrap_err();
    assert!(matches!(e, LeaseError::UnknownResource { .. }));
    assert!(e.to_string().contains("cache"));
    let e = c.request("a", "db-1", -1.0, 0, 0).unwrap_err();
    assert!(e.to_string().contains("wants"), "{e}");
    let e = c.request("a", "db-1", f64::NAN, 0, 0).unwrap_err();
    assert!(e.to_string().contains("wants"), "{e}");
    let e = c.request("", "db-1", 1.0, 0, 0).unwrap_err();
    assert!(e.to_string().contains("client_id"), "{e}");
}

#[test]
fn config_from_toml_and_json() {
    let toml = r#"
        [[resources]]
        identifier_glob = "mysql-shard-7"
        capacity = 50
        description = "the hot shard"
        algorithm = { kind = "proportional_share", lease_length = 20, refresh_interval = 2 }

        [[resources]]
        identifier_glob = "*"
        capacity = 500.0
        safe_capacity = 5.0
        [resources.algorithm]
        kind = "reserved_plus_shared"
        lease_length = 60
        refresh_interval = 5
        learning_mode_duration = 0
        parameters = { reserved = 2.5 }
    "#;
    let from_toml = LeaseConfig::from_toml(toml).unwrap();
    let json = serde_json::to_string(&from_toml).unwrap();
    let from_json = LeaseConfig::from_json(&json).unwrap();
    assert_eq!(from_toml, from_json);
    let set = TemplateSet::new(&from_toml).unwrap();
    assert_eq!(set.lookup("mysql-shard-7").unwrap().capacity, 50.0);
    let star = set.lookup("anything").unwrap();
    assert_eq!(star.algorithm.kind, AlgorithmKind::ReservedPlusShared);
    assert_eq!(star.algorithm.reserved(), 2.5);
    assert_eq!(star.algorithm.learning_mode_ms(), 0);
    // Defaults.
    let c =
        LeaseConfig::from_json(r#"{"resources":[{"identifier_glob":"x","capacity":1}]}"#).unwrap();
    assert_eq!(c.resources[0].algorithm.kind, AlgorithmKind::FairShare);
    assert_eq!(c.resources[0].algorithm.learning_mode_ms(), 60_000);
}

#[test]
fn config_errors_name_the_field() {
    let cases = [
        (
            r#"{"resources":[{"identifier_glob":"x","capacity":-1}]}"#,
            "resources[0].capacity",
        ),
        (
            r#"{"resources":[{"identifier_glob":"x","capacity":1},{"identifier_glob":"y","capacity":1,"algorithm":{"lease_length":0}}]}"#,
            "resources[1].algorithm.lease_length",
        ),
        (
            r#"{"resources":[{"identifier_glob":"x","capacity":1,"algorithm":{"lease_length":5,"refresh_interval":10}}]}"#,
            "resources[0].algorithm.refresh_interval",
        ),
        (
            r#"{"resources":[{"identifier_glob":"x","capacity":1,"safe_capacity":2}]}"#,
            "resources[0].safe_capacity",
        ),
        (
            r#"{"resources":[{"identifier_glob":"x","capacity":1,"algorithm":{"parameters":{"reserved":1}}}]}"#,
            "resources[0].algorithm.parameters.reserved",
        ),
        (
            r#"{"resources":[{"identifier_glob":"*","capacity":1},{"identifier_glob":"y","capacity":1}]}"#,
            "resources[0].identifier_glob",
        ),
        (
            r#"{"resources":[{"identifier_glob":"","capacity":1}]}"#,
            "resources[0].identifier_glob",
        ),
        (
            r#"{"resources":[{"identifier_glob":"x","capacity":1,"kind":"fair_share"}]}"#,
            "kind",
        ),
        (
            r#"{"resources":[{"identifier_glob":"x","capacity":1,"algorithm":{"kind":"fastest"}}]}"#,
            "fastest",
        ),
    ];
    for (text, field) in cases {
        let e = LeaseConfig::from_json(text).unwrap_err();
        assert!(e.to_string().contains(field), "{text}: {e}");
    }
    let e = LeaseConfig::from_toml("[[resources]]\nidentifier_glob = 3").unwrap_err();
    assert!(e.to_string().contains("toml"), "{e}");
}

#[derive(Debug, Clone)]
enum Op {
    Request {
        client: u8,
        wants: f64,
        subclients: u32,
        priority: u32,
    },
    Release {
        client: u8,
    },
    Advance(u64),
}

fn arb_op() -> impl Strategy<Value = Op> {
    prop_oneof![
        6 => (0u8..6, 0.0f64..200.0, 1u32..4, 0u32..2).prop_map(|(client, wants, subclients, priority)| Op::Request { client, wants, subclients, priority }),
        1 => (0u8..6).prop_map(|client| Op::Release { client }),
        2 => (0u64..15_000).prop_map(Op::Advance),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(300))]

    /// Random sequences: invariants after every step, and every grant is at least the
    /// max-min fair target capped by what is still available.
    #[test]
    fn random_sequences_keep_invariants(
        ops in prop::collection::vec(arb_op(), 1..80),
        capacity in 1.0f64..500.0,
        kind in prop_oneof![Just(AlgorithmKind::FairShare), Just(AlgorithmKind::ProportionalShare), Just(AlgorithmKind::ReservedPlusShared)],
        learning in prop_oneof![Just(0.0), Just(10.0)],
    ) {
        let mut t = template(capacity, kind, 10.0, learning);
        if kind == AlgorithmKind::ReservedPlusShared {
            t.algorithm.parameters.insert("reserved".into(), 3.0);
        }
        let c = coordinator(t, 0);
        let mut now = 0;
        let names = ["c0", "c1", "c2", "c3", "c4", "c5"];
        for op in ops {
            match op {
                Op::Advance(ms) => now += ms,
                Op::Release { client } => { c.release(names[client as usize], "r").unwrap(); }
                Op::Request { client, wants, subclients, priority } => {
                    let id = names[client as usize];
                    let before = c.grants("r", now);
                    let others: f64 = before.iter().filter(|(n, _)| n != id).map(|(_, g)| g.has).sum();
                    let req = LeaseRequest { subclients, ..LeaseRequest::new(id, "r", wants, priority) };
                    let learning_now = c.in_learning_mode("r", now).unwrap();
                    let lease = step_with(&c, &req, now);
                    prop_assert!(lease.capacity <= wants);
                    if kind == AlgorithmKind::FairShare && !learning_now {
                        let mut demands: Vec<Demand> = before.iter().filter(|(n, _)| n != id)
                            .map(|(_, g)| Demand { wants: g.wants, subclients: g.subclients, priority: g.priority }).collect();
                        demands.push(Demand { wants, subclients, priority });
                        let target = *fair_share(capacity, &demands).last().unwrap();
                        let floor = target.min((capacity - others).max(0.0));
                        prop_assert!(lease.capacity >= floor * (1.0 - 1e-12) - 1e-9,
                            "grant {} below fair target {target} capped by available {}", lease.capacity, capacity - others);
                    }
                }
            }
            c.check_invariants(now).unwrap();
        }
    }
}

/// A leaf hands out only what its upstream granted it (nothing before), never for longer
/// than its own lease, and reports what its clients ask for together.
#[test]
fn a_leaf_hands_out_its_upstream_grant_only() {
    let c = coordinator(template(90.0, AlgorithmKind::FairShare, 60.0, 0.0), 0);
    c.make_leaf();
    assert_eq!(
        step(&c, "a1", "db", 100.0, 10).capacity,
        0.0,
        "no grant yet"
    );
    let agg = c.aggregates(20);
    assert_eq!(agg.len(), 1);
    assert_eq!((agg[0].1.wants, agg[0].1.subclients), (100.0, 1));
    let up = Upstream {
        capacity: 60.0,
        expires_at: 5_000,
        fallback: 0.0,
    };
    c.set_upstream("db", Some(up));
    let l1 = step(&c, "a1", "db", 100.0, 30);
    assert_eq!((l1.capacity, l1.expires_at), (60.0, 5_000));
    step(&c, "a2", "db", 100.0, 40);
    let l1 = step(&c, "a1", "db", 100.0, 50);
    let l2 = step(&c, "a2", "db", 100.0, 60);
    assert_eq!((l1.capacity, l2.capacity), (30.0, 30.0));
    assert_eq!(c.aggregates(70)[0].1.wants, 200.0);
    // The upstream lease ends: nothing more is handed out, in short leases.
    let late = step(&c, "a3", "db", 100.0, 5_000);
    assert_eq!(late.capacity, 0.0, "upstream lease over");
    assert!(late.expires_at > 5_000 && late.expires_at <= 10_000);
    c.set_upstream("db", None);
    assert_eq!(
        step(&c, "a4", "db", 100.0, 80).capacity,
        0.0,
        "grant withdrawn"
    );
}

/// Times past `MAX_NOW_MS` (2106) are refused, not granted: microseconds passed for
/// milliseconds (a common mistake) would otherwise grant a lease that never ends in real
/// time, holding its capacity for good.
#[test]
fn times_past_2106_are_refused() {
    use velvet_rope::clock::MAX_NOW_MS;
    let now = 1_800_000_000_000;
    let c = coordinator(template(100.0, AlgorithmKind::FairShare, 60.0, 0.0), now);
    for bad in [now * 1000, MAX_NOW_MS + 1, u64::MAX] {
        let e = c.request("a", "db", 80.0, 0, bad).unwrap_err();
        assert!(
            matches!(&e, LeaseError::InvalidRequest { field: "now", .. }),
            "{bad}: {e:?}"
        );
        assert!(e.to_string().contains("2106"), "{e}");
    }
    assert_eq!(c.sum_granted("db", now), 0.0, "nothing was granted");
    assert_eq!(step(&c, "b", "db", 80.0, now).capacity, 80.0);
    assert!(
        c.request("a", "db", 10.0, 0, MAX_NOW_MS).is_ok(),
        "the last time taken"
    );
    let config = LeaseConfig {
        resources: vec![template(1.0, AlgorithmKind::Static, 60.0, 0.0)],
    };
    let e = Coordinator::from_config(&config, now * 1000).unwrap_err();
    assert!(e.to_string().contains("2106"), "{e}");
}

/// Found by `velvet-rope simulate scenarios/doorman-seven.toml` (a root, regions, data centres
/// and clients): a leaf whose grant shrank still had clients holding leases issued under the
/// larger one, and the root handed the difference to another leaf at once: the tree's clients
/// held 500.08 of 500 for a second (Doorman's "shortfall"). A leaf's shrunk grant now stays
/// reserved while its old lease runs; a client using its grant itself gives it up at once.
#[test]
fn a_leafs_shrunk_grant_stays_reserved_while_its_old_lease_runs() {
    for leaf in [true, false] {
        let c = coordinator(template(100.0, AlgorithmKind::FairShare, 30.0, 0.0), 0);
        let ask = |wants, now| {
            step_with(
                &c,
                &LeaseRequest {
                    leaf,
                    ..LeaseRequest::new("leaf", "r", wants, 0)
                },
                now,
            )
        };
        assert_eq!(ask(100.0, 0).capacity, 100.0);
        assert_eq!(step(&c, "b", "r", 100.0, 1_000).capacity, 0.0, "all held");
        // Fair share now: the leaf's grant shrinks to 50 (its lease from 0 runs to 30 s).
        assert_eq!(ask(100.0, 2_000).capacity, 50.0);
        let b = step(&c, "b", "r", 100.0, 3_000).capacity;
        if leaf {
            assert_eq!(b, 0.0, "the leaf's clients may still hold 100 until 30 s");
            assert!(c.check_invariants(3_000).is_ok());
            // Its old lease has ended: the other half is free.
            assert_eq!(step(&c, "b", "r", 100.0, 30_001).capacity, 50.0);
        } else {
            assert_eq!(b, 50.0, "a client honours its smaller grant at once");
        }
    }
}

/// From the second review: a leaf whose grant keeps shrinking kept its largest grant reserved,
/// the end pushed out at every shrink, for as long as the shrinking went on. Each earlier grant
/// now ends on its own lease's end.
#[test]
fn a_leafs_earlier_grants_each_end_on_time() {
    let c = coordinator(template(100.0, AlgorithmKind::FairShare, 30.0, 0.0), 0);
    let ask = |wants, now| {
        step_with(
            &c,
            &LeaseRequest {
                leaf: true,
                ..LeaseRequest::new("leaf", "r", wants, 0)
            },
            now,
        )
        .capacity
    };
    assert_eq!(ask(100.0, 0), 100.0);
    assert_eq!(step(&c, "b", "r", 100.0, 1_000).capacity, 0.0);
    // 50 from 5 s (the 100 runs to 30 s), then a little less every 5 s.
    assert_eq!(ask(100.0, 5_000), 50.0);
    let mut wants = 49.0;
    for now in (10_000..=60_000).step_by(5_000) {
        assert_eq!(ask(wants, now), wants);
        wants -= 1.0;
    }
    // At 61 s the grants issued before 31 s have ended (the 100 at 30 s, the 50 at 35 s,
    // 49 to 45 at 40 to 60 s); the largest still running is the 44 issued at 35 s (until 65 s).
    // b gets the rest, though the leaf's grant kept shrinking (with one reservation pushed out
    // at every shrink it got nothing until the shrinking stopped).
    let b = step(&c, "b", "r", 100.0, 61_000).capacity;
    assert_eq!(b, 56.0);
    assert!(c.check_invariants(61_000).is_ok());
}
