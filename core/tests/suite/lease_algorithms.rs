//! The allocation algorithms: worked examples and property tests.

use proptest::prelude::*;
use velvet_rope::lease::algorithm::{
    fair_share, none, proportional_share, reserved_plus_shared, static_share, Demand,
};

fn demands(wants: &[f64]) -> Vec<Demand> {
    wants.iter().map(|&w| Demand::new(w)).collect()
}

fn round2(v: &[f64]) -> Vec<f64> {
    v.iter().map(|x| (x * 100.0).round() / 100.0).collect()
}

#[test]
fn doorman_doc_fair_share() {
    assert_eq!(
        fair_share(120.0, &demands(&[1000.0, 50.0, 10.0])),
        vec![60.0, 50.0, 10.0]
    );
}

#[test]
fn doorman_doc_proportional_share() {
    let g = proportional_share(120.0, &demands(&[1000.0, 50.0, 10.0]));
    assert_eq!(round2(&g), vec![69.69, 40.31, 10.0]);
    assert!(g.iter().sum::<f64>() <= 120.0);
}

#[test]
fn doorman_doc_static_and_none() {
    assert_eq!(
        static_share(120.0, &demands(&[50.0, 200.0, 300.0])),
        vec![50.0, 120.0, 120.0]
    );
    assert_eq!(
        none(&demands(&[100.0, 10.0, 1000.0])),
        vec![100.0, 10.0, 1000.0]
    );
}

/// Doorman's two-round fair share gives the client wanting 31 only 30 here. The wants sum to
/// 99 <= 100, so the exact water-fill gives everyone what they want.
#[test]
fn doorman_under_assignment_case_is_exact() {
    let g = fair_share(100.0, &demands(&[21.0, 14.0, 28.0, 31.0, 5.0]));
    assert_eq!(g, vec![21.0, 14.0, 28.0, 31.0, 5.0]);
    // Same demands over a tighter capacity: level 27 after 5, 14, 21 are satisfied? No:
    // 90 - 5 - 14 - 21 = 50 over two clients -> 25 each, below 28 and 31.
    let g = fair_share(90.0, &demands(&[21.0, 14.0, 28.0, 31.0, 5.0]));
    assert_eq!(g, vec![21.0, 14.0, 25.0, 25.0, 5.0]);
}

#[test]
fn weighted_by_subclients() {
    let d = |w, s| Demand {
        wants: w,
        subclients: s,
        priority: 0,
    };
    let g = fair_share(120.0, &[d(1000.0, 6), d(500.0, 4), d(200.0, 2)]);
    assert_eq!(g, vec![60.0, 40.0, 20.0]);
    let g = fair_share(1000.0, &[d(2000.0, 10), d(500.0, 10), d(700.0, 30)]);
    assert_eq!(g, vec![200.0, 200.0, 600.0]);
}

fn arb_demands() -> impl Strategy<Value = Vec<Demand>> {
    prop::collection::vec(
        (0.0f64..1000.0, 1u32..6, 0u32..3, prop::bool::weighted(0.1)).prop_map(
            |(wants, subclients, priority, zero)| Demand {
                wants: if zero { 0.0 } else { wants },
                subclients,
                priority,
            },
        ),
        1..40,
    )
}

fn basic_checks(name: &str, g: &[f64], d: &[Demand], capacity: f64) -> Result<(), TestCaseError> {
    let sum: f64 = g.iter().sum();
    prop_assert!(sum <= capacity, "{name}: sum {sum} > capacity {capacity}");
    for (x, dm) in g.iter().zip(d) {
        prop_assert!(*x >= 0.0, "{name}: negative grant {x}");
        prop_assert!(*x <= dm.wants, "{name}: grant {x} above wants {}", dm.wants);
    }
    Ok(())
}

const EPS: f64 = 1e-9;

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2000))]

    #[test]
    fn fair_share_is_weighted_max_min(d in arb_demands(), capacity in 0.1f64..5000.0) {
        let g = fair_share(capacity, &d);
        basic_checks("fair_share", &g, &d, capacity)?;
        // Efficient: hands out min(capacity, total wants).
        let total: f64 = d.iter().map(|x| x.wants).sum();
        let sum: f64 = g.iter().sum();
        prop_assert!(sum >= capacity.min(total) * (1.0 - EPS) - EPS, "sum {sum} capacity {capacity} total {total}");
        // Max-min optimal: a client short of its wants has the highest level (grant per
        // subclient) in its band, so it could only gain by taking from a client whose level is
        // less or equal; and a lower band gets nothing while a higher band is short.
        for (i, di) in d.iter().enumerate() {
            if g[i] < di.wants * (1.0 - EPS) - EPS {
                let li = g[i] / f64::from(di.subclients);
                for (j, dj) in d.iter().enumerate() {
                    let lj = g[j] / f64::from(dj.subclients);
                    if dj.priority == di.priority {
                        prop_assert!(lj <= li * (1.0 + EPS) + EPS,
                            "client {i} (level {li}) is short while client {j} has level {lj}");
                    } else if dj.priority < di.priority {
                        prop_assert!(g[j] <= EPS, "band {} served while band {} is short", dj.priority, di.priority);
                    }
                }
            }
        }
    }

    #[test]
    fn proportional_share_guarantees_equal_share(d in arb_demands(), capacity in 0.1f64..5000.0) {
        let g = proportional_share(capacity, &d);
        basic_checks("proportional_share", &g, &d, capacity)?;
        // With one band everyone gets at least min(wants, equal share).
        let one: Vec<Demand> = d.iter().map(|x| Demand { priority: 0, ..*x }).collect();
        let g = proportional_share(capacity, &one);
        let weights: f64 = one.iter().map(|x| f64::from(x.subclients)).sum();
        for (x, dm) in g.iter().zip(&one) {
            let equal = capacity * f64::from(dm.subclients) / weights;
            prop_assert!(*x >= dm.wants.min(equal) * (1.0 - EPS) - EPS);
        }
        let total: f64 = one.iter().map(|x| x.wants).sum();
        prop_assert!(g.iter().sum::<f64>() >= capacity.min(total) * (1.0 - EPS) - EPS);
    }

    #[test]
    fn reserved_plus_shared_bounds(d in arb_demands(), capacity in 0.1f64..5000.0, reserved in 0.0f64..50.0) {
        let g = reserved_plus_shared(capacity, reserved, &d);
        basic_checks("reserved_plus_shared", &g, &d, capacity)?;
        let one: Vec<Demand> = d.iter().map(|x| Demand { priority: 0, ..*x }).collect();
        let claims: f64 = one.iter().map(|x| x.wants.min(reserved * f64::from(x.subclients))).sum();
        if claims <= capacity {
            let g = reserved_plus_shared(capacity, reserved, &one);
            for (x, dm) in g.iter().zip(&one) {
                let claim = dm.wants.min(reserved * f64::from(dm.subclients));
                prop_assert!(*x >= claim * (1.0 - EPS) - EPS, "reservation {claim} not honoured: {x}");
            }
        }
    }

    #[test]
    fn static_caps_each_client(d in arb_demands(), capacity in 0.1f64..500.0) {
        let g = static_share(capacity, &d);
        for (x, dm) in g.iter().zip(&d) {
            prop_assert_eq!(*x, dm.wants.min(capacity));
        }
    }
}
