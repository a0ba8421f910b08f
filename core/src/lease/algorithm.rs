//! Allocation algorithms as pure functions over the clients' demands.
//!
//! Every function returns one grant per demand, in input order, and serves priority bands
//! from the highest down: a higher band is served fully (as far as capacity allows) before a
//! lower band sees what is left. Within a band the algorithm's own rule applies. The outputs
//! of the pooled algorithms (`proportional_share`, `fair_share`, `reserved_plus_shared`) never
//! sum above `capacity` (summed in input order), are never negative and never above `wants`.

use super::config::AlgorithmKind;

/// One client's demand as the algorithms see it.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Demand {
    /// What the client wants (negative or NaN is treated as 0).
    pub wants: f64,
    /// Number of subclients: the client's weight (0 counts as 1).
    pub subclients: u32,
    /// Priority band; higher is served first.
    pub priority: u32,
}

impl Demand {
    /// A demand with one subclient in band 0.
    pub fn new(wants: f64) -> Self {
        Self {
            wants,
            subclients: 1,
            priority: 0,
        }
    }

    fn wants(&self) -> f64 {
        if self.wants > 0.0 {
            self.wants
        } else {
            0.0
        }
    }

    fn weight(&self) -> f64 {
        f64::from(self.subclients.max(1))
    }
}

/// The steady-state allocation of `kind` (the grants every client converges to).
/// `reserved` is the per-subclient reservation of `reserved_plus_shared` (ignored otherwise).
pub fn allocate(kind: AlgorithmKind, capacity: f64, reserved: f64, demands: &[Demand]) -> Vec<f64> {
    match kind {
        AlgorithmKind::None => none(demands),
        AlgorithmKind::Static => static_share(capacity, demands),
        AlgorithmKind::ProportionalShare => proportional_share(capacity, demands),
        AlgorithmKind::FairShare => fair_share(capacity, demands),
        AlgorithmKind::ReservedPlusShared => reserved_plus_shared(capacity, reserved, demands),
    }
}

/// `none`: everyone gets what they want.
pub fn none(demands: &[Demand]) -> Vec<f64> {
    demands.iter().map(Demand::wants).collect()
}

/// `static`: everyone gets `min(wants, capacity)`; `capacity` is per client.
pub fn static_share(capacity: f64, demands: &[Demand]) -> Vec<f64> {
    let cap = capacity.max(0.0);
    demands.iter().map(|d| d.wants().min(cap)).collect()
}

/// `proportional_share`: below capacity everyone gets their wants; above, everyone gets at
/// least its equal share (weighted by subclients) if it wants it, and the capacity left by
/// those under their equal share goes to those over it in proportion to their excess demand.
pub fn proportional_share(capacity: f64, demands: &[Demand]) -> Vec<f64> {
    by_bands(capacity, demands, proportional_band)
}

/// `fair_share`: exact weighted max-min fairness (water-filling). Above capacity, finds the
/// level `L` with `sum(min(wants_i, L * subclients_i)) = capacity` and gives each
/// `min(wants_i, L * subclients_i)`.
pub fn fair_share(capacity: f64, demands: &[Demand]) -> Vec<f64> {
    by_bands(capacity, demands, fair_band)
}

/// `reserved_plus_shared`: each client first gets up to `reserved * subclients` of its wants
/// (fair-shared if even the reservations do not fit), then the rest of the capacity is
/// fair-shared over the demand above the reservations.
pub fn reserved_plus_shared(capacity: f64, reserved: f64, demands: &[Demand]) -> Vec<f64> {
    let reserved = if reserved > 0.0 { reserved } else { 0.0 };
    by_bands(capacity, demands, |cap, demands, idx, out| {
        reserved_band(cap, reserved, demands, idx, out)
    })
}

/// Splits the demands into priority bands, highest first, and hands each band the capacity
/// the higher bands left.
fn by_bands(
    capacity: f64,
    demands: &[Demand],
    mut band: impl FnMut(f64, &[Demand], &mut [usize], &mut [f64]),
) -> Vec<f64> {
    let mut out = vec![0.0; demands.len()];
    let mut idx: Vec<usize> = (0..demands.len()).collect();
    let first = demands.first().map(|d| d.priority);
    if demands.iter().all(|d| Some(d.priority) == first) {
        band(capacity.max(0.0), demands, &mut idx, &mut out);
        clamp_sum(&mut out, capacity.max(0.0));
        return out;
    }
    idx.sort_by_key(|&i| std::cmp::Reverse(demands[i].priority));
    let mut left = capacity.max(0.0);
    let mut start = 0;
    while start < idx.len() {
        let p = demands[idx[start]].priority;
        let end = start + idx[start..].partition_point(|&i| demands[i].priority == p);
        let members = &mut idx[start..end];
        band(left, demands, members, &mut out);
        let used: f64 = members.iter().map(|&i| out[i]).sum();
        left = (left - used).max(0.0);
        start = end;
    }
    clamp_sum(&mut out, capacity.max(0.0));
    out
}

/// Weighted water-filling over `idx` (reordered in place).
fn fair_band(capacity: f64, demands: &[Demand], idx: &mut [usize], out: &mut [f64]) {
    water_fill(
        capacity,
        idx,
        out,
        |i| demands[i].wants(),
        |i| demands[i].weight(),
    );
}

fn water_fill(
    capacity: f64,
    idx: &mut [usize],
    out: &mut [f64],
    wants: impl Fn(usize) -> f64,
    weight: impl Fn(usize) -> f64,
) {
    let total: f64 = idx.iter().map(|&i| wants(i)).sum();
    if total <= capacity {
        for &i in idx.iter() {
            out[i] = wants(i);
        }
        return;
    }
    idx.sort_by(|&a, &b| (wants(a) / weight(a)).total_cmp(&(wants(b) / weight(b))));
    let mut left = capacity;
    let mut weight_left: f64 = idx.iter().map(|&i| weight(i)).sum();
    for (k, &i) in idx.iter().enumerate() {
        let level = if weight_left > 0.0 {
            left / weight_left
        } else {
            0.0
        };
        if wants(i) <= level * weight(i) {
            out[i] = wants(i);
            left = (left - wants(i)).max(0.0);
            weight_left -= weight(i);
        } else {
            for &j in &idx[k..] {
                out[j] = (level * weight(j)).min(wants(j)).max(0.0);
            }
            return;
        }
    }
}

fn proportional_band(capacity: f64, demands: &[Demand], idx: &mut [usize], out: &mut [f64]) {
    let total: f64 = idx.iter().map(|&i| demands[i].wants()).sum();
    if total <= capacity {
        for &i in idx.iter() {
            out[i] = demands[i].wants();
        }
        return;
    }
    let weights: f64 = idx.iter().map(|&i| demands[i].weight()).sum();
    let per_weight = capacity / weights;
    let mut left = capacity;
    let mut excess_total = 0.0;
    for &i in idx.iter() {
        let equal = per_weight * demands[i].weight();
        let w = demands[i].wants();
        let base = w.min(equal);
        out[i] = base;
        left -= base;
        excess_total += w - base;
    }
    let left = left.max(0.0);
    if excess_total > 0.0 && left > 0.0 {
        for &i in idx.iter() {
            let excess = demands[i].wants() - out[i];
            if excess > 0.0 {
                out[i] = (out[i] + left * (excess / excess_total)).min(demands[i].wants());
            }
        }
    }
}

fn reserved_band(
    capacity: f64,
    reserved: f64,
    demands: &[Demand],
    idx: &mut [usize],
    out: &mut [f64],
) {
    let claim = |i: usize| demands[i].wants().min(reserved * demands[i].weight());
    let claims: f64 = idx.iter().map(|&i| claim(i)).sum();
    if claims >= capacity {
        water_fill(capacity, idx, out, claim, |i| demands[i].weight());
        return;
    }
    let mut shared = vec![0.0; out.len()];
    water_fill(
        capacity - claims,
        idx,
        &mut shared,
        |i| demands[i].wants() - claim(i),
        |i| demands[i].weight(),
    );
    for &i in idx.iter() {
        out[i] = (claim(i) + shared[i]).min(demands[i].wants());
    }
}

/// Makes the grants sum (in index order) to at most `capacity`, taking the floating-point
/// rounding excess (a few ulps) from the largest grants.
fn clamp_sum(out: &mut [f64], capacity: f64) {
    for _ in 0..64 {
        let total: f64 = out.iter().sum();
        if total <= capacity {
            return;
        }
        let Some(largest) = out
            .iter()
            .enumerate()
            .max_by(|a, b| a.1.total_cmp(b.1))
            .map(|(i, _)| i)
        else {
            return;
        };
        let excess = total - capacity;
        out[largest] = next_down((out[largest] - excess).max(0.0)).max(0.0);
    }
}

/// The largest `f64` below `x` (for finite positive `x`); `f64::next_down` needs Rust 1.86.
pub(crate) fn next_down(x: f64) -> f64 {
    if x.is_nan() || x <= 0.0 || x.is_infinite() {
        return x.max(0.0);
    }
    f64::from_bits(x.to_bits() - 1)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn d(wants: f64, subclients: u32, priority: u32) -> Demand {
        Demand {
            wants,
            subclients,
            priority,
        }
    }

    #[test]
    fn bands_highest_first() {
        let g = fair_share(100.0, &[d(80.0, 1, 0), d(70.0, 1, 2), d(50.0, 1, 1)]);
        assert_eq!(g, vec![0.0, 70.0, 30.0]);
        let g = proportional_share(100.0, &[d(80.0, 1, 0), d(20.0, 1, 1)]);
        assert_eq!(g, vec![80.0, 20.0]);
    }

    #[test]
    fn reserved_then_shared() {
        // reserved 10 each: a gets 10, b 10, c 5; 75 left fair-shared over 90, 40, 0.
        let g = reserved_plus_shared(100.0, 10.0, &[d(100.0, 1, 0), d(50.0, 1, 0), d(5.0, 1, 0)]);
        assert_eq!(g, vec![47.5, 47.5, 5.0]);
        // reservations alone exceed capacity: fair share of the reservations.
        let g = reserved_plus_shared(12.0, 10.0, &[d(100.0, 1, 0), d(50.0, 1, 0)]);
        assert_eq!(g, vec![6.0, 6.0]);
    }

    #[test]
    fn clamp_removes_rounding_excess() {
        let mut v = vec![0.1, 0.2, 0.3000000000000001];
        clamp_sum(&mut v, 0.6);
        assert!(v.iter().sum::<f64>() <= 0.6);
        assert!(v.iter().all(|&x| x >= 0.0));
    }

    #[test]
    fn degenerate_inputs() {
        assert_eq!(fair_share(10.0, &[]), Vec::<f64>::new());
        assert_eq!(
            fair_share(10.0, &[d(-5.0, 0, 0), d(f64::NAN, 1, 0)]),
            vec![0.0, 0.0]
        );
        assert_eq!(fair_share(0.0, &[d(5.0, 1, 0)]), vec![0.0]);
    }
}
