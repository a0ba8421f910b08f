//! Replays every algorithm sequence of Doorman's tests (and the worked examples of its
//! algorithm document) through the coordinator.
//!
//! Doorman's tests preload a lease store with every client (has 0, wants known) and then
//! run one request per step. We preload through learning mode, which is exactly that: a client
//! reporting `has = 0` is recorded with its wants and granted 0. The steps then run after
//! learning mode. Doorman's algorithm config in these tests has lease length 0 (its store never
//! expires during a test); we use 300 s, like its preload, so nothing lapses mid-sequence.
//!
//! Where our grant differs from Doorman's, the difference must be named with its step and
//! reason, and the only accepted reasons are Doorman's two-round fair share under-assigning
//! and Doorman handing out a negative grant. Every fair-share step must give at least the
//! max-min fair target capped by what is still available.

use std::path::PathBuf;

use serde_json::Value;
use velvet_rope::lease::algorithm::{fair_share, Demand};
use velvet_rope::lease::{AlgorithmKind, Coordinator, LeaseRequest, ResourceTemplate, TemplateSet};

fn vectors() -> Value {
    // A copy kept in the repository (origin in tests/data/README.md).
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/data/doorman_vectors.json");
    let text = std::fs::read_to_string(&path)
        .unwrap_or_else(|e| panic!("cannot read {}: {e}", path.display()));
    serde_json::from_str(&text).unwrap()
}

fn kind(name: &str) -> AlgorithmKind {
    serde_json::from_value(Value::String(name.into())).unwrap()
}

fn num(v: &Value, key: &str) -> f64 {
    v[key]
        .as_f64()
        .unwrap_or_else(|| panic!("missing number `{key}` in {v}"))
}

#[derive(Debug)]
struct Difference {
    step: String,
    doorman: f64,
    ours: f64,
    reason: &'static str,
}

struct Replay {
    c: Coordinator,
    capacity: f64,
    kind: AlgorithmKind,
    now: u64,
}

const LEARNING_MS: u64 = 1_000;

impl Replay {
    fn new(algorithm: &str, capacity: f64, lease_s: f64, refresh_s: f64, learning: bool) -> Self {
        let kind = kind(algorithm);
        let mut t = ResourceTemplate::new("*", capacity, kind);
        t.algorithm.lease_length = lease_s;
        t.algorithm.refresh_interval = refresh_s;
        t.algorithm.learning_mode_duration = Some(if learning { 1.0 } else { 0.0 });
        let c = Coordinator::new(TemplateSet::from_templates(vec![t]).unwrap(), 0);
        Self {
            c,
            capacity,
            kind,
            now: 0,
        }
    }

    fn preload(&mut self, client: &Value) {
        let id = client["id"].as_str().unwrap();
        let req = LeaseRequest {
            has: num(client, "has"),
            subclients: client["subclients"].as_u64().unwrap_or(1) as u32,
            ..LeaseRequest::new(id, "resource", num(client, "wants"), 0)
        };
        assert!(self.c.in_learning_mode("resource", self.now).unwrap());
        let lease = self.c.request_with(&req, self.now).unwrap();
        assert_eq!(lease.capacity, 0.0, "preloading {id} must grant nothing");
        self.c.check_invariants(self.now).unwrap();
    }

    /// Runs one step; returns our grant after checking invariants and the fair floor.
    fn step(&mut self, name: &str, request: &Value) -> f64 {
        self.now = self.now.max(LEARNING_MS) + 1;
        let id = request["client"].as_str().unwrap();
        let wants = num(request, "wants");
        let subclients = request["subclients"].as_u64().unwrap_or(1) as u32;
        let before = self.c.grants("resource", self.now);
        let others: f64 = before
            .iter()
            .filter(|(n, _)| n != id)
            .map(|(_, g)| g.has)
            .sum();
        let req = LeaseRequest {
            has: num(request, "has"),
            subclients,
            ..LeaseRequest::new(id, "resource", wants, 0)
        };
        let ours = self.c.request_with(&req, self.now).unwrap().capacity;
        self.c.check_invariants(self.now).unwrap();
        assert!(ours >= 0.0, "{name}: negative grant");
        if self.kind.shares_capacity() {
            assert!(
                self.c.sum_granted("resource", self.now) <= self.capacity,
                "{name}: sum of grants above capacity"
            );
        }
        if self.kind == AlgorithmKind::FairShare {
            let mut demands: Vec<Demand> = before
                .iter()
                .filter(|(n, _)| n != id)
                .map(|(_, g)| Demand {
                    wants: g.wants,
                    subclients: g.subclients,
                    priority: 0,
                })
                .collect();
            demands.push(Demand {
                wants,
                subclients,
                priority: 0,
            });
            let target = *fair_share(self.capacity, &demands).last().unwrap();
            let floor = target.min((self.capacity - others).max(0.0));
            assert!(
                ours >= floor - 1e-9,
                "{name}: {ours} is below the max-min fair target {target} capped by the available {}",
                self.capacity - others
            );
        }
        ours
    }
}

fn compare(name: String, algorithm: &str, doorman: f64, ours: f64, diffs: &mut Vec<Difference>) {
    if (doorman - ours).abs() <= 1e-9 * doorman.abs().max(1.0) {
        return;
    }
    let reason = if doorman < 0.0 {
        "Doorman hands out a negative grant"
    } else if algorithm == "FAIR_SHARE" && doorman < ours {
        "Doorman's two-round fair share under-assigns; ours is the exact water-fill"
    } else {
        panic!("{name}: Doorman gives {doorman}, we give {ours}, and no accepted reason applies");
    };
    diffs.push(Difference {
        step: name,
        doorman,
        ours,
        reason,
    });
}

#[test]
fn doorman_algorithm_vectors() {
    let v = vectors();
    let mut diffs = Vec::new();
    let mut steps = 0;
    for vector in v["algorithm_vectors"].as_array().unwrap() {
        let id = vector["id"].as_str().unwrap();
        let algorithm = vector["algorithm"].as_str().unwrap();
        let capacity = num(vector, "capacity");
        let cfg = &vector["algorithm_config"];
        let timing = vector["kind"] == "lease_timing";
        let (lease_s, refresh_s) = if timing {
            (num(cfg, "lease_length_s"), num(cfg, "refresh_interval_s"))
        } else {
            (300.0, 5.0)
        };
        let preload = vector["preload_store"].as_bool().unwrap();
        let mut r = Replay::new(algorithm, capacity, lease_s, refresh_s, preload);
        for client in vector["preload"].as_array().unwrap() {
            r.preload(client);
        }
        for s in vector["steps"].as_array().unwrap() {
            let name = format!("{id} step {}", s["case"]);
            let ours = r.step(&name, &s["request"]);
            steps += 1;
            let expected = &s["expected"];
            if timing {
                let lease =
                    r.c.request_with(
                        &LeaseRequest::new(
                            s["request"]["client"].as_str().unwrap(),
                            "resource",
                            num(&s["request"], "wants"),
                            0,
                        ),
                        r.now,
                    )
                    .unwrap();
                let left = (lease.expires_at - r.now) as f64 / 1000.0;
                assert!(
                    (left - num(expected, "expiry_minus_now_s")).abs()
                        <= num(expected, "expiry_tolerance_s"),
                    "{name}"
                );
                assert_eq!(
                    lease.refresh_interval_secs,
                    num(expected, "refresh_interval_s"),
                    "{name}"
                );
            }
            if let Some(gets) = expected["gets"].as_f64() {
                compare(name, algorithm, gets, ours, &mut diffs);
            }
        }
        if let Some(sum) = vector["expected_final"]["sum_has"].as_f64() {
            assert_eq!(r.c.sum_granted("resource", r.now), sum, "{id}: final sum");
        }
    }
    assert_eq!(steps, 30, "every algorithm step replayed");
    for d in &diffs {
        eprintln!(
            "{}: Doorman {} / ours {}: {}",
            d.step, d.doorman, d.ours, d.reason
        );
    }
    // Every step of these vectors agrees with Doorman: its under-assignment does not show in
    // its own tests (see `doorman_under_assignment_case` for the case where it does).
    assert!(diffs.is_empty(), "unexpected differences: {diffs:?}");
}

#[test]
fn doorman_doc_examples() {
    let v = vectors();
    for ex in v["doc_examples_not_tests"].as_array().unwrap() {
        let id = ex["id"].as_str().unwrap();
        let algorithm = ex["algorithm"].as_str().unwrap();
        let capacity = ex["capacity"].as_f64().unwrap_or(0.0);
        let mut r = Replay::new(algorithm, capacity, 300.0, 5.0, true);
        let wants = ex["wants"].as_object().unwrap();
        let mut ids: Vec<&String> = wants.keys().collect();
        ids.sort();
        for id in &ids {
            r.preload(&serde_json::json!({"id": id, "has": 0, "wants": wants[*id]}));
        }
        for cid in &ids {
            let ours = r.step(
                &format!("{id} {cid}"),
                &serde_json::json!({"client": cid, "has": 0, "wants": wants[*cid], "subclients": 1}),
            );
            let doc = ex["gets"][cid.as_str()].as_f64().unwrap();
            // The document's values are rounded.
            assert!(
                (ours - doc).abs() < 1e-6,
                "{id} {cid}: doc {doc}, ours {ours}"
            );
        }
    }
}

/// DESIGN section 4: with capacity 100 and wants 21, 14, 28, 31, 5 Doorman's fair share gives
/// the client wanting 31 only 30. Replayed Doorman-style (preloaded store, one request per
/// client in order); ours gives every client what it wants, since the wants sum to 99.
#[test]
fn doorman_under_assignment_case() {
    let mut r = Replay::new("FAIR_SHARE", 100.0, 300.0, 5.0, true);
    let wants = [21.0, 14.0, 28.0, 31.0, 5.0];
    for (i, w) in wants.iter().enumerate() {
        r.preload(&serde_json::json!({"id": format!("c{i}"), "has": 0, "wants": w}));
    }
    let mut diffs = Vec::new();
    for (i, w) in wants.iter().enumerate() {
        let name = format!("capacity 100 case, request c{i}");
        let ours = r.step(
            &name,
            &serde_json::json!({"client": format!("c{i}"), "has": 0, "wants": w}),
        );
        let doorman = if *w == 31.0 { 30.0 } else { *w };
        compare(name, "FAIR_SHARE", doorman, ours, &mut diffs);
    }
    assert_eq!(diffs.len(), 1);
    assert_eq!(diffs[0].step, "capacity 100 case, request c3");
    assert_eq!((diffs[0].doorman, diffs[0].ours), (30.0, 31.0));
    assert!(r.c.sum_granted("resource", r.now) <= 100.0);
}
