//! The ways hosts share a room that a simulation can run, to compare them on one crowd:
//! the store (this crate), and the two ways of the seed's first designs, which divide the
//! free seats among the deciders from the figures each published at the last sync.

/// How the hosts of a simulation share the room's limits.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum Sharing {
    /// This crate: allowances from the store, synced every interval (exact within the
    /// guarantee).
    #[default]
    Store,
    /// Per-host division: at every sync a host may hold what it holds plus an even share of
    /// the room's free seats (and of the minute's free admissions), as every host published
    /// them at its last sync.
    Division,
    /// The utilisation curve: the same, divided by `hosts x utilisation` deciders (at least
    /// one), so that a quiet room gives each host nearly all of its free seats.
    Curve,
}

impl Sharing {
    /// Its name in a scenario (`store`, `division`, `curve`).
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Store => "store",
            Self::Division => "division",
            Self::Curve => "curve",
        }
    }

    /// The one named `name`.
    pub fn parse(name: &str) -> Option<Self> {
        [Self::Store, Self::Division, Self::Curve]
            .into_iter()
            .find(|s| s.as_str() == name)
    }

    /// A host's part of `free` seats (or admissions), with `hosts` hosts and `active` of
    /// `limit` seats held in the room (for the curve).
    pub fn part(self, free: u64, hosts: u64, active: u64, limit: u64) -> u64 {
        use velvet_rope::shares::{per_decider, per_decider_curve};
        match self {
            Self::Store => free,
            Self::Division => per_decider(free, hosts),
            Self::Curve => per_decider_curve(free, hosts, active, limit, 1.0),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_quiet_room_gives_the_curve_nearly_everything_and_division_a_share() {
        // 10 free seats, 8 hosts, 1 of 100 held: division 1 each, the curve all 10 each.
        assert_eq!(Sharing::Division.part(10, 8, 1, 100), 1);
        assert_eq!(Sharing::Curve.part(10, 8, 1, 100), 10);
        // A full room: the curve is division.
        assert_eq!(Sharing::Curve.part(16, 8, 100, 100), 2);
        assert_eq!(Sharing::parse("curve"), Some(Sharing::Curve));
        assert_eq!(Sharing::parse("redis"), None);
    }
}
