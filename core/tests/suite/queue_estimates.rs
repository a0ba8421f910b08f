//! The place and wait a queued visitor is shown: never worse on a later refresh, in the order
//! the queue is served, and how far the promised wait is from the real one (measured with a
//! known arrival and service pattern, printed with `--nocapture`).

use velvet_rope::{Decision, Engine, Outcome};

const T0: u64 = 1_800_000_000_000;
const SEC: u64 = 1000;

fn cookie_of(d: &Decision, had: Option<String>) -> Option<String> {
    d.set_cookie
        .as_ref()
        .map(|c| c.split(';').next().unwrap().to_owned())
        .or(had)
}

/// A small xorshift generator for the visitors' refresh phases.
fn test_rng(seed: u64) -> impl FnMut() -> u64 {
    let mut x = seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
    move || {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x
    }
}

struct Waiter {
    cookie: Option<String>,
    arrived: u64,
    next: u64,
    shown: Vec<(u64, u64, u64)>,
    admitted: Option<u64>,
}

fn percentile(sorted: &[f64], p: f64) -> f64 {
    sorted[((sorted.len() - 1) as f64 * p).round() as usize]
}

/// Spearman's rank correlation (no ties expected in `b`'s use here; ties get mean ranks).
fn rank_correlation(a: &[f64], b: &[f64]) -> f64 {
    let ranks = |v: &[f64]| {
        let mut idx: Vec<usize> = (0..v.len()).collect();
        idx.sort_by(|&i, &j| v[i].partial_cmp(&v[j]).unwrap());
        let mut r = vec![0.0; v.len()];
        let mut i = 0;
        while i < idx.len() {
            let j = i + idx[i..].iter().take_while(|&&k| v[k] == v[idx[i]]).count();
            for &k in &idx[i..j] {
                r[k] = (i + j - 1) as f64 / 2.0;
            }
            i = j;
        }
        r
    };
    let (ra, rb) = (ranks(a), ranks(b));
    let n = ra.len() as f64;
    let m = (n - 1.0) / 2.0;
    let cov: f64 = ra.iter().zip(&rb).map(|(x, y)| (x - m) * (y - m)).sum();
    let var = |r: &[f64]| r.iter().map(|x| (x - m).powi(2)).sum::<f64>();
    cov / (var(&ra) * var(&rb)).sqrt()
}

/// Visitors arrive at 3 a second for 100 s into a room that lets in 10 per 10-s bucket; each
/// waiter's page refreshes every 5 s (at its own phase). Every place and wait a visitor is
/// shown is no worse than the one before; places agree with the order of service; and the
/// error of the promised wait against the real one is reported.
#[test]
fn places_never_go_back_follow_the_service_order_and_the_wait_error_is_measured() {
    let text = "[settings]\nbucket_width_secs = 10\n\
                [[rooms]]\nname = \"r\"\ntotal_active_users = 100000\nnew_users_per_minute = 10\n\
                session_duration = 60\nrefresh_interval = 5\n\
                [rooms.cookie]\nsecure = false\n";
    let engine = Engine::from_text(text, T0).unwrap();
    let mut rng = test_rng(3);
    let mut waiters: Vec<Waiter> = Vec::new();
    let mut snapshot: Vec<(usize, u64)> = Vec::new();
    for s in 0..600u64 {
        let now = T0 + s * SEC + 1;
        engine.tick(now);
        if s < 100 {
            for _ in 0..3 {
                let d = engine.admit("r", None, now).unwrap();
                let mut w = Waiter {
                    cookie: cookie_of(&d, None),
                    arrived: now,
                    next: now + 5 * SEC - (rng() % 2000),
                    shown: Vec::new(),
                    admitted: None,
                };
                if d.outcome == Outcome::Admit {
                    w.admitted = Some(now);
                } else {
                    w.shown
                        .push((now, d.position.unwrap(), d.estimated_wait_secs.unwrap()));
                }
                waiters.push(w);
            }
        }
        for w in waiters.iter_mut().filter(|w| w.admitted.is_none()) {
            if w.next > now {
                continue;
            }
            w.next = now + 5 * SEC;
            let d = engine.admit("r", w.cookie.as_deref(), now).unwrap();
            w.cookie = cookie_of(&d, w.cookie.take());
            if d.outcome == Outcome::Admit {
                w.admitted = Some(now);
            } else {
                w.shown
                    .push((now, d.position.unwrap(), d.estimated_wait_secs.unwrap()));
            }
        }
        if s == 120 {
            // Everyone waiting now, with the last place shown.
            snapshot = waiters
                .iter()
                .enumerate()
                .filter(|(_, w)| w.admitted.is_none() && !w.shown.is_empty())
                .map(|(i, w)| (i, w.shown.last().unwrap().1))
                .collect();
        }
    }
    assert!(
        waiters.iter().all(|w| w.admitted.is_some()),
        "everyone got in"
    );
    let queued: Vec<&Waiter> = waiters.iter().filter(|w| !w.shown.is_empty()).collect();
    assert!(queued.len() > 200, "most visitors waited");

    // Never worse on a later refresh: place and wait.
    for (i, w) in queued.iter().enumerate() {
        for pair in w.shown.windows(2) {
            assert!(
                pair[1].1 <= pair[0].1,
                "visitor {i}: place went back: {:?}",
                w.shown
            );
            assert!(
                pair[1].2 <= pair[0].2,
                "visitor {i}: wait went back: {:?}",
                w.shown
            );
        }
    }

    // The places shown at one instant against the order of admission.
    let places: Vec<f64> = snapshot.iter().map(|&(_, p)| p as f64).collect();
    let served: Vec<f64> = snapshot
        .iter()
        .map(|&(i, _)| waiters[i].admitted.unwrap() as f64)
        .collect();
    let rho = rank_correlation(&places, &served);

    // The promised wait against the real one, at every showing.
    let mut errors: Vec<f64> = Vec::new();
    let mut first_errors: Vec<f64> = Vec::new();
    let mut signed: Vec<f64> = Vec::new();
    for w in &queued {
        let admitted = w.admitted.unwrap();
        for (k, &(at, _, wait)) in w.shown.iter().enumerate() {
            let real = (admitted - at) as f64 / 1000.0;
            let e = wait as f64 - real;
            signed.push(e);
            errors.push(e.abs());
            if k == 0 {
                first_errors.push(e.abs());
            }
        }
    }
    errors.sort_by(|a, b| a.partial_cmp(b).unwrap());
    signed.sort_by(|a, b| a.partial_cmp(b).unwrap());
    println!(
        "promised wait - real wait, every showing: p10 {:.1} s, median {:.1} s, p90 {:.1} s",
        percentile(&signed, 0.1),
        percentile(&signed, 0.5),
        percentile(&signed, 0.9)
    );
    first_errors.sort_by(|a, b| a.partial_cmp(b).unwrap());
    let real_waits: Vec<f64> = {
        let mut v: Vec<f64> = queued
            .iter()
            .map(|w| (w.admitted.unwrap() - w.arrived) as f64 / 1000.0)
            .collect();
        v.sort_by(|a, b| a.partial_cmp(b).unwrap());
        v
    };
    println!(
        "{} visitors waited (median {:.0} s, p90 {:.0} s); places at one instant against the \
         order of service: rank correlation {rho:.3}; promised wait - real wait, every showing: \
         median |error| {:.1} s, p90 {:.1} s; on arrival: median {:.1} s, p90 {:.1} s",
        queued.len(),
        percentile(&real_waits, 0.5),
        percentile(&real_waits, 0.9),
        percentile(&errors, 0.5),
        percentile(&errors, 0.9),
        percentile(&first_errors, 0.5),
        percentile(&first_errors, 0.9),
    );
    assert!(rho > 0.95, "places follow the order of service: {rho}");
    assert!(
        percentile(&errors, 0.5) < 0.25 * percentile(&real_waits, 0.5),
        "the median error is a small part of the median wait"
    );
}
