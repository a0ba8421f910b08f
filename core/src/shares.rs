//! Slot shares across deciders that share no counter: the cluster tier's arithmetic.
//!
//! Pure functions of the seed's worked example (DESIGN section 3). A host ("data centre")
//! gets the fraction of the free slots that its traffic was of the last minute's; the rest
//! ("Anywhere") is shared by every decider. Deciders that share no counter divide their share
//! plainly, or with the utilisation curve, which gives each decider more room when the room is
//! far from full.

/// Free slots for new users: `min(total_active_users - active, new_users_per_minute -
/// admitted_this_minute)`, never negative.
pub fn free_slots(
    total_active_users: u64,
    active_users: u64,
    new_users_per_minute: u64,
    admitted_this_minute: u64,
) -> u64 {
    total_active_users
        .saturating_sub(active_users)
        .min(new_users_per_minute.saturating_sub(admitted_this_minute))
}

/// A host's share of `free` slots given its traffic and the room's total traffic last minute
/// (rounded down, so shares never add up to more than `free`).
pub fn host_share(free: u64, host_traffic: u64, total_traffic: u64) -> u64 {
    if total_traffic == 0 {
        return 0;
    }
    ((free as u128 * host_traffic as u128) / total_traffic as u128) as u64
}

/// The "Anywhere" part of `free`: the fraction of traffic no host's own share covers, rounded
/// half up as in the seed (75 % of 150 = 112.5 -> 113).
pub fn anywhere_share(free: u64, anywhere_traffic: u64, total_traffic: u64) -> u64 {
    if total_traffic == 0 {
        return 0;
    }
    let num = free as u128 * anywhere_traffic as u128;
    let den = total_traffic as u128;
    ((2 * num + den) / (2 * den)) as u64
}

/// Plain division of a share among `deciders`.
pub fn per_decider(share: u64, deciders: u64) -> u64 {
    share.checked_div(deciders).unwrap_or(0)
}

/// Division with the utilisation curve: `workers * utilization ^ curve_factor` adapted
/// deciders (at least one), where `utilization = active_users / total_active_users`.
pub fn per_decider_curve(
    share: u64,
    deciders: u64,
    active_users: u64,
    total_active_users: u64,
    curve_factor: f64,
) -> u64 {
    if deciders == 0 || total_active_users == 0 {
        return 0;
    }
    let utilization = (active_users as f64 / total_active_users as f64).clamp(0.0, 1.0);
    let adapted = (deciders as f64 * utilization.powf(curve_factor)).max(1.0);
    (share as f64 / adapted).floor() as u64
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The seed's worked example, number for number.
    #[test]
    fn seed_worked_example() {
        let free = free_slots(200, 50, 200, 0);
        assert_eq!(free, 150);
        let san_jose = host_share(free, 20, 200);
        assert_eq!(san_jose, 15);
        assert_eq!(per_decider(san_jose, 3), 5);
        let anywhere = anywhere_share(free, 150, 200);
        assert_eq!(anywhere, 113);
        assert_eq!(per_decider(anywhere, 10), 11);
        assert_eq!(per_decider(san_jose, 3) + per_decider(anywhere, 10), 16);
        assert_eq!(per_decider_curve(anywhere, 10, 50, 200, 1.0), 45);
    }

    #[test]
    fn edges() {
        assert_eq!(free_slots(10, 12, 5, 0), 0);
        assert_eq!(free_slots(10, 2, 5, 7), 0);
        assert_eq!(host_share(10, 1, 0), 0);
        assert_eq!(per_decider(10, 0), 0);
        assert_eq!(
            per_decider_curve(100, 4, 0, 100, 1.0),
            100,
            "empty room: one adapted decider"
        );
    }
}
