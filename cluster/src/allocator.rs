//! How the store answers a report: the allocation both stores run, atomically per room. The
//! Redis store runs it as a Lua script (`sync.lua`, the same steps in the same order); this is
//! the in-process store's copy, and the two are checked against each other on the same
//! sequence of reports (`tests/stores_agree.rs`).
//!
//! Per host the store keeps its last report, what it granted, and two deadlines: `exp` (the
//! lease: until then its allowances stay reserved and it counts as present) and `gone` (until
//! then its allowance of active visitors stays reserved: it may still hold that many, see the
//! crate documentation).

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::protocol::{Params, Reply, Report};

/// One host's entry in a room's state.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Entry {
    /// Its last report.
    pub report: Report,
    /// The allowance of active visitors granted at that report.
    pub gt: u64,
    /// The allowance of admissions in the report's bucket granted.
    pub gm0: u64,
    /// The allowance of admissions in the bucket after granted.
    pub gm1: u64,
    /// Its reservation of admissions in the bucket before the report's (kept when a host moves
    /// on to a new bucket, for hosts whose clocks are still in the old one).
    pub prev: u64,
    /// End of its lease (store clock, ms).
    pub exp: u64,
    /// End of its reservation of active visitors (store clock, ms).
    pub gone: u64,
}

impl Entry {
    /// Active visitors this host may hold: what it holds or was granted, whichever is more.
    fn reserved_total(&self) -> u64 {
        self.report.at.max(self.gt)
    }

    /// Admissions in bucket `b` this host may make (or made).
    fn reserved_minute(&self, b: u64) -> u64 {
        let r = &self.report;
        if r.b == b {
            r.am0.max(self.gm0)
        } else if r.b.wrapping_add(1) == b {
            r.am1.max(self.gm1)
        } else if b.wrapping_add(1) == r.b {
            self.prev
        } else {
            0
        }
    }
}

/// A room's state in the store.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct RoomState {
    /// When the store started learning (store clock, ms): grants do not grow for a lease after
    /// that. Set when the state is made, and again when a host shows it holds a grant the
    /// state does not know (the store lost or rolled back its state).
    pub born: Option<u64>,
    /// The global FIFO frontier.
    pub frontier: u64,
    /// The last sequence number handed out (room-wide, increasing): a host reporting a higher
    /// one holds a grant this state never made.
    pub seq: u64,
    /// Hosts by store name (see `store_host`).
    pub entries: BTreeMap<String, Entry>,
}

/// Answers `host`'s `report` at store time `now`, updating `state`.
pub fn allocate(state: &mut RoomState, host: &str, r: &Report, p: &Params, now: u64) -> Reply {
    state.entries.retain(|h, e| h == host || e.gone >= now);
    let mine = state.entries.get(host);
    // A host holding a grant this state never made: the store lost its state (restarted, or
    // reloaded an old snapshot). Learn anew.
    let stale = r.seq > state.seq;
    let born = *state.born.get_or_insert(now);
    let born = if stale { now } else { born };
    state.born = Some(born);
    let learning = now.saturating_sub(born) < p.lease;
    let seq = state.seq.max(r.seq) + 1;
    state.seq = seq;
    let prev = mine.map_or(0, |e| e.reserved_minute(r.b.wrapping_sub(1)));
    let mut frontier = state.frontier;

    let (mut others, mut om0, mut om1) = (0u64, 0u64, 0u64);
    let (mut occupied, mut admitted, mut traffic) = (r.active, r.admitted, r.traffic);
    let mut live: BTreeMap<u64, u64> = BTreeMap::new();
    // Present hosts' unused allowance and waiters (for FIFO across hosts, below).
    let mut present: Vec<(u64, &[(u64, u64)])> = Vec::new();
    let (mut hosts, mut known, mut oldest_bucket) = (1, 1, r.b);
    for (h, e) in &state.entries {
        if h == host {
            continue;
        }
        known += 1;
        others += e.reserved_total();
        om0 += e.reserved_minute(r.b);
        om1 += e.reserved_minute(r.b.wrapping_add(1));
        occupied += e.report.active;
        if e.exp >= now {
            hosts += 1;
            oldest_bucket = oldest_bucket.min(e.report.b);
            if e.report.b == r.b {
                admitted += e.report.admitted;
            }
            traffic += e.report.traffic;
            for &(b, n) in &e.report.live {
                *live.entry(b).or_default() += n;
            }
            let headroom = e.reserved_total().saturating_sub(e.report.active).min(
                e.reserved_minute(e.report.b)
                    .saturating_sub(e.report.admitted),
            );
            present.push((headroom, &e.report.live));
        }
    }
    for &(b, n) in &r.live {
        *live.entry(b).or_default() += n;
    }

    // The frontier moves over arrival buckets, oldest first, while the waiters it lets in
    // fit in the room's free slots; past everyone when they all fit, but never past the
    // oldest bucket a present host is in (a host whose clock runs ahead cannot drag it).
    let free = p
        .total
        .saturating_sub(occupied)
        .min(p.minute.saturating_sub(admitted));
    let queued: u64 = live.values().sum();
    let mut ready: u64 = live.range(..=frontier).map(|(_, n)| n).sum();
    for (&b, &n) in live.range(frontier.saturating_add(1)..) {
        if ready >= free {
            break;
        }
        frontier = b;
        ready += n;
    }
    if ready < free {
        frontier = frontier.max(oldest_bucket);
    }
    let behind = queued - ready.min(queued);
    let own_queued: u64 = r.live.iter().map(|w| w.1).sum();
    let own_ready: u64 = r.live.iter().filter(|w| w.0 <= frontier).map(|w| w.1).sum();
    let own_behind = own_queued - own_ready;
    // Waiters of other hosts, older than bucket `j`, that their own host's unused allowance
    // does not cover: slots for them come first.
    let uncovered_before = |j: u64| -> u64 {
        present
            .iter()
            .map(|(headroom, live)| {
                let older: u64 = live.iter().filter(|w| w.0 < j).map(|w| w.1).sum();
                older.saturating_sub(*headroom)
            })
            .sum()
    };
    let uncovered = uncovered_before(u64::MAX);
    let room_total = p.total.saturating_sub(others).saturating_sub(r.active);

    // This host's waiters the frontier reached, oldest first, each after the older waiters
    // elsewhere; then its share of the free slots, following its traffic (evenly when nobody
    // had any), plus the chunk it asks for. New arrivals get nothing while anyone waits behind
    // the frontier, or waits elsewhere without an allowance for it. One headroom per bucket,
    // within both limits, so that no host holds room under one limit that the other leaves it
    // no use for.
    let mut ready_head = 0u64;
    for &(j, n) in r.live.iter().filter(|w| w.0 <= frontier) {
        let room = room_total
            .saturating_sub(uncovered_before(j))
            .saturating_sub(ready_head);
        ready_head += n.min(room);
    }
    let share = if traffic == 0 {
        free / hosts
    } else {
        ((u128::from(free) * u128::from(r.traffic)) / u128::from(traffic)) as u64
    };
    let blocked = behind > 0 || uncovered > 0;
    let want = ready_head + if blocked { 0 } else { share + r.demand };
    let head0 = want
        .min(room_total)
        .min(p.minute.saturating_sub(om0).saturating_sub(r.admitted));
    let head1 = want.min(room_total).min(p.minute.saturating_sub(om1));
    let (mut gt, mut gm0, mut gm1) = (r.active + head0.max(head1), r.admitted + head0, head1);
    if learning {
        gt = gt.min(r.at);
        gm0 = gm0.min(r.am0);
        gm1 = gm1.min(r.am1);
    }
    state.entries.insert(
        host.to_owned(),
        Entry {
            report: r.clone(),
            gt,
            gm0,
            gm1,
            prev,
            exp: now + p.lease,
            gone: now + p.lease + p.hold,
        },
    );
    state.frontier = frontier;
    Reply {
        seq,
        gt,
        b: r.b,
        gm0,
        gm1,
        frontier,
        behind: behind - own_behind.min(behind) + uncovered,
        hosts,
        known,
        learning: u64::from(learning),
        free,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const P: Params = Params {
        total: 200,
        minute: 200,
        lease: 1000,
        hold: 5000,
    };

    fn report(active: u64, at: u64, traffic: u64) -> Report {
        Report {
            b: 10,
            active,
            traffic,
            at,
            am0: at,
            am1: at,
            ..Report::default()
        }
    }

    /// Past learning: grants never add up to more than the limits, whoever asks first.
    #[test]
    fn grants_never_exceed_the_limits() {
        let mut s = RoomState::default();
        allocate(&mut s, "a", &report(0, 0, 0), &P, 0);
        let t = 2000;
        let mut total = 0;
        for (i, h) in ["a", "b", "c", "d"].iter().enumerate() {
            let mut r = report(0, 0, 50);
            r.demand = 100 * (i as u64 + 1);
            let reply = allocate(&mut s, h, &r, &P, t);
            total += reply.gt;
        }
        assert!(total <= 200, "granted {total}");
        assert_eq!(total, 200, "the room is handed out when asked for");
    }

    /// The seed's shares: with traffic 20 / 30 / 150 and 50 active, San Jose's share of the
    /// 150 free slots is 10 % (15), once the others' grants follow their traffic too (the
    /// first round hands the room to whoever asks first among those with traffic).
    #[test]
    fn shares_follow_traffic() {
        let mut s = RoomState::default();
        allocate(&mut s, "sj", &report(0, 0, 0), &P, 0);
        let mut sj = None;
        for t in [2000, 2100] {
            allocate(&mut s, "london", &report(0, 0, 30), &P, t);
            allocate(&mut s, "anywhere", &report(50, 50, 150), &P, t);
            sj = Some(allocate(&mut s, "sj", &report(0, 0, 20), &P, t));
        }
        let sj = sj.unwrap();
        assert_eq!(sj.free, 150);
        assert_eq!(sj.gt, 15);
        assert_eq!(sj.hosts, 3);
    }

    /// While learning, a host keeps what it reported and gets nothing more.
    #[test]
    fn learning_does_not_grow_grants() {
        let mut s = RoomState::default();
        let mut r = report(3, 7, 10);
        r.demand = 50;
        let reply = allocate(&mut s, "a", &r, &P, 100);
        assert_eq!(reply.learning, 1);
        assert_eq!(reply.gt, 7);
        let reply = allocate(&mut s, "a", &r, &P, 1200);
        assert_eq!(reply.learning, 0);
        assert_eq!(reply.gt, 200, "the whole room: the only host, with traffic");
    }

    /// A silent host's allowance stays reserved until `gone`, then returns.
    #[test]
    fn a_silent_host_is_held_then_released() {
        let mut s = RoomState::default();
        allocate(&mut s, "x", &report(0, 0, 0), &P, 0);
        let mut big = report(0, 0, 10);
        big.demand = 150;
        let got = allocate(&mut s, "a", &big, &P, 1500).gt;
        assert!(got >= 150);
        let mut b = report(0, 0, 10);
        b.demand = 200;
        assert_eq!(allocate(&mut s, "b", &b, &P, 3000).gt, 200 - got);
        assert_eq!(
            allocate(&mut s, "b", &b, &P, 1500 + 1000 + 5000 + 1).gt,
            200
        );
    }

    /// FIFO across hosts: the frontier stops at the bucket whose waiters fill the free slots,
    /// whichever host they wait at.
    #[test]
    fn frontier_is_global() {
        let mut s = RoomState::default();
        let t = 2000;
        let mut early = report(0, 0, 0);
        early.b = 0;
        allocate(&mut s, "a", &early, &P, 0);
        let mut a = report(200, 200, 10);
        a.live = vec![(3, 6)];
        assert_eq!(
            allocate(&mut s, "a", &a, &P, t).frontier,
            0,
            "full: nobody enters"
        );
        let mut b = report(0, 0, 10);
        b.live = vec![(4, 6), (5, 1)];
        assert_eq!(allocate(&mut s, "b", &b, &P, t).frontier, 0);
        (a.active, a.at, a.am0, a.am1) = (190, 190, 190, 190);
        let reply = allocate(&mut s, "a", &a, &P, t);
        assert_eq!((reply.free, reply.frontier), (10, 4));
        assert_eq!(
            reply.behind, 8,
            "b's seven wait with no allowance yet (one behind)"
        );
        let reply = allocate(&mut s, "b", &b, &P, t);
        assert_eq!(reply.frontier, 4);
        assert_eq!(
            reply.behind, 0,
            "a's six are covered; the one behind is b's own"
        );
        assert_eq!(
            reply.gt, 4,
            "a holds 6 for its older waiters: 4 left for b's"
        );
    }

    /// Counters made anew (a restarted host without a state file) are another host: the old
    /// holdings stay reserved until they lapse, whatever the new counters report.
    #[test]
    fn a_restarted_host_does_not_wipe_its_old_holdings() {
        let mut s = RoomState::default();
        allocate(&mut s, "x", &report(0, 0, 0), &P, 0);
        let old = allocate(&mut s, "a#00000001", &report(60, 60, 10), &P, 2000);
        assert!(old.gt >= 60);
        let mut fresh = report(0, 0, 10);
        fresh.demand = 500;
        let new = allocate(&mut s, "a#00000002", &fresh, &P, 2100);
        assert!(
            new.gt <= 200 - old.gt,
            "{} granted beside {}",
            new.gt,
            old.gt
        );
        assert_eq!(new.known, 3);
    }

    /// A host holding a grant newer than the store's record of it: the store lost or rolled
    /// back its state, and learns anew (grants do not grow for a lease).
    #[test]
    fn a_rolled_back_store_learns_anew() {
        let mut s = RoomState::default();
        allocate(&mut s, "a", &report(0, 0, 0), &P, 0);
        let mut r = report(5, 5, 10);
        r.demand = 50;
        let first = allocate(&mut s, "a", &r, &P, 2000);
        assert_eq!(first.learning, 0);
        let snapshot = s.clone();
        r.seq = allocate(&mut s, "a", &r, &P, 2100).seq;
        let mut rolled_back = snapshot;
        let reply = allocate(&mut rolled_back, "a", &r, &P, 2200);
        assert_eq!(reply.learning, 1);
        assert_eq!(reply.gt, r.at, "no growth while learning");
        assert!(reply.seq > r.seq, "sequence numbers go on from the host's");
    }

    /// A host whose clock moved on to the next bucket keeps its reservation for the bucket it
    /// left, for hosts still in it.
    #[test]
    fn moving_on_keeps_the_last_buckets_reservation() {
        let mut s = RoomState::default();
        allocate(&mut s, "x", &report(0, 0, 0), &P, 0);
        let mut a = report(0, 150, 10);
        (a.admitted, a.am0, a.am1) = (150, 150, 0);
        let held = allocate(&mut s, "a", &a, &P, 2000).gm0.max(150);
        a.b = 11;
        (a.admitted, a.am0) = (0, 0);
        allocate(&mut s, "a", &a, &P, 2100);
        let mut b = report(0, 0, 10);
        b.demand = 200;
        let reply = allocate(&mut s, "b", &b, &P, 2200);
        assert_eq!(
            reply.gm0,
            200 - held,
            "a's {held} in bucket 10 stay reserved"
        );
    }

    /// A host whose clock runs ahead cannot drag the frontier past the others' bucket.
    #[test]
    fn a_clock_ahead_does_not_drag_the_frontier() {
        let mut s = RoomState::default();
        let mut x = report(0, 0, 0);
        x.b = 0;
        allocate(&mut s, "x", &x, &P, 0);
        let mut late = report(0, 0, 10);
        late.b = 5;
        allocate(&mut s, "late", &late, &P, 2000);
        let mut ahead = report(0, 0, 10);
        ahead.b = 900;
        assert_eq!(allocate(&mut s, "ahead", &ahead, &P, 2000).frontier, 5);
    }

    /// A host coming back after its entry lapsed holds no grant newer than the room's
    /// sequence: it does not send the room into learning.
    #[test]
    fn a_returning_host_does_not_make_the_room_learn() {
        let mut s = RoomState::default();
        allocate(&mut s, "x", &report(0, 0, 0), &P, 0);
        let mut r = report(0, 0, 10);
        r.seq = allocate(&mut s, "a", &r, &P, 2000).seq;
        let back = allocate(&mut s, "a", &r, &P, 2000 + 1000 + 5000 + 10);
        assert_eq!(back.learning, 0);
    }
}
