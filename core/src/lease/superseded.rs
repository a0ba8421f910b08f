//! A leaf's earlier grants that still count: a leaf of Doorman's tree hands its grant out in
//! leases of its own, which its clients hold until they end, so a grant it was given stays
//! counted until its lease ends, whatever it was given since. Kept for the in-process
//! [`Coordinator`](super::Coordinator) and the cluster tier's Redis root alike.

use crate::clock::Millis;

/// The grants `(amount, end)` still running at `now`, without the covered ones: latest end
/// first, each kept only if it is larger than every later-ending one (while a grant at least
/// as large runs longer, a smaller one that ends sooner adds nothing). At most one entry per
/// distinct amount, so the list stays short.
pub fn still_running(
    grants: impl IntoIterator<Item = (f64, Millis)>,
    now: Millis,
) -> Vec<(f64, Millis)> {
    let mut all: Vec<(f64, Millis)> = grants
        .into_iter()
        .filter(|g| g.1 > now && g.0 > 0.0)
        .collect();
    all.sort_by_key(|g| std::cmp::Reverse(g.1));
    let mut kept: Vec<(f64, Millis)> = Vec::new();
    for g in all {
        if kept.iter().all(|k| g.0 > k.0) {
            kept.push(g);
        }
    }
    kept
}

/// The most of `grants` (0 when none).
pub fn largest(grants: &[(f64, Millis)]) -> f64 {
    grants.iter().map(|g| g.0).fold(0.0, f64::max)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_earlier_grant_ends_on_time() {
        // 100 until 30 s, 50 until 35 s, 49 until 40 s: at 31 s only 50 and 49 remain.
        let g = [(100.0, 30_000), (50.0, 35_000), (49.0, 40_000)];
        assert_eq!(
            still_running(g, 10_000),
            vec![(49.0, 40_000), (50.0, 35_000), (100.0, 30_000)]
        );
        assert_eq!(largest(&still_running(g, 31_000)), 50.0);
        assert_eq!(largest(&still_running(g, 36_000)), 49.0);
        assert!(still_running(g, 40_000).is_empty());
    }

    #[test]
    fn a_grant_covered_by_a_larger_longer_one_is_dropped() {
        let g = [(60.0, 30_000), (80.0, 40_000), (0.0, 50_000)];
        assert_eq!(still_running(g, 0), vec![(80.0, 40_000)]);
    }
}
