//! The ground truth a simulation checks the room against: every visitor's seat, read from the
//! tickets the engines hand out, and every first admission, by the bucket it was booked to.
//!
//! A visitor holds a seat from its admission until its last counted bucket leaves the
//! session window of its host's clock (what the engines count, and what its ticket's expiry
//! follows): the room holds the visitors whose seats are current. A returning visitor whose
//! ticket is re-issued moves its seat; one counted afresh after a restart keeps its one seat.

use std::cell::RefCell;
use std::collections::BTreeMap;

/// Seats and admissions.
pub(crate) struct Truth {
    session: u64,
    /// Seats per host by counted bucket.
    seats: Vec<BTreeMap<u64, u64>>,
    /// Each visitor's seat: host and counted bucket.
    seat_of: Vec<Option<(usize, u64)>>,
    /// Visitors whose seat is doomed (see [`Truth::doom`]): kept in `seat_of`, not in
    /// `seats`.
    doomed: Vec<bool>,
    /// First admissions by the bucket they were booked to.
    admissions: BTreeMap<u64, u64>,
    /// The last answer of [`Truth::active`] and the buckets it was for, until a seat changes
    /// (a run asks after every step; most steps are waiters, who change no seat).
    last_active: RefCell<Option<(Vec<u64>, u64)>>,
}

impl Truth {
    pub(crate) fn new(hosts: usize, session: u32) -> Self {
        Self {
            session: u64::from(session),
            seats: vec![BTreeMap::new(); hosts],
            seat_of: Vec::new(),
            doomed: Vec::new(),
            admissions: BTreeMap::new(),
            last_active: RefCell::new(None),
        }
    }

    /// Whether visitor `v`'s seat is current, given each host's bucket now.
    fn seated(&self, v: usize, buckets: &[u64]) -> bool {
        match self.seat_of.get(v).copied().flatten() {
            Some((h, c)) => c + self.session >= buckets[h],
            None => false,
        }
    }

    /// Visitor `v` holds an admission ticket counted in bucket `counted` at host `h`. Returns
    /// the bucket's admissions when it is a first admission (a new seat), else `None`.
    pub(crate) fn admitted(
        &mut self,
        v: usize,
        h: usize,
        counted: u64,
        buckets: &[u64],
    ) -> Option<u64> {
        if self.seat_of.len() <= v {
            self.seat_of.resize(v + 1, None);
            self.doomed.resize(v + 1, false);
        }
        let first = !self.seated(v, buckets);
        if let Some((oh, oc)) = self.seat_of[v] {
            if !self.doomed[v] {
                self.unseat(oh, oc);
            }
        }
        self.seat_of[v] = Some((h, counted));
        if !self.doomed[v] {
            *self.seats[h].entry(counted).or_default() += 1;
        }
        self.last_active.take();
        if first {
            let n = self.admissions.entry(counted).or_default();
            *n += 1;
            Some(*n)
        } else {
            None
        }
    }

    /// One seat less at host `h` in bucket `c`.
    fn unseat(&mut self, h: usize, c: u64) {
        if let Some(n) = self.seats[h].get_mut(&c) {
            *n -= 1;
            if *n == 0 {
                self.seats[h].remove(&c);
            }
        }
    }

    /// Visitor `v`'s session was revoked: its seat is gone (the host counted it out).
    pub(crate) fn revoked(&mut self, v: usize) {
        self.last_active.take();
        if let Some((h, c)) = self.seat_of.get_mut(v).and_then(Option::take) {
            if !std::mem::take(&mut self.doomed[v]) {
                self.unseat(h, c);
            }
        }
    }

    /// Visitor `v` holds a seat with a ticket already revoked elsewhere (a host restarted
    /// without its counters counted a replay of it afresh): the host counts it out when the
    /// revocation reaches it, and refuses the ticket from then on. Its seat counts no more
    /// (through its renewals too) until it is refused ([`Truth::revoked`]).
    pub(crate) fn doom(&mut self, v: usize) {
        self.last_active.take();
        if self.seat_of.len() <= v {
            self.seat_of.resize(v + 1, None);
            self.doomed.resize(v + 1, false);
        }
        // Doomed with no seat yet too (its replay answered before the booking bucket was
        // ready): the seat its next request takes is doomed from the start.
        let was = std::mem::replace(&mut self.doomed[v], true);
        if let (false, Some((h, c))) = (was, self.seat_of[v]) {
            self.unseat(h, c);
        }
    }

    /// Whether visitor `v`'s seat is doomed (see [`Truth::doom`]).
    pub(crate) fn is_doomed(&self, v: usize) -> bool {
        self.doomed.get(v).copied().unwrap_or(false)
    }

    /// Visitors holding a current seat, given each host's bucket now.
    pub(crate) fn active(&self, buckets: &[u64]) -> u64 {
        let mut last = self.last_active.borrow_mut();
        if let Some((b, n)) = &*last {
            if b[..] == *buckets {
                return *n;
            }
        }
        let n = self
            .seats
            .iter()
            .zip(buckets)
            .map(|(s, &b)| {
                s.range(b.saturating_sub(self.session)..)
                    .map(|(_, n)| n)
                    .sum::<u64>()
            })
            .sum();
        *last = Some((buckets.to_vec(), n));
        n
    }

    /// First admissions booked to `bucket`.
    pub(crate) fn admissions_in(&self, bucket: u64) -> u64 {
        self.admissions.get(&bucket).copied().unwrap_or(0)
    }

    /// Visitors holding a current seat at host `h`, whose bucket now is `bucket`.
    pub(crate) fn active_at(&self, h: usize, bucket: u64) -> u64 {
        self.seats[h]
            .range(bucket.saturating_sub(self.session)..)
            .map(|(_, n)| n)
            .sum()
    }

    /// Forgets seats and admissions older than every host's window (they can no longer
    /// count).
    pub(crate) fn prune(&mut self, buckets: &[u64]) {
        let Some(&oldest) = buckets.iter().min() else {
            return;
        };
        let keep = oldest.saturating_sub(self.session + 2);
        self.last_active.take();
        for s in &mut self.seats {
            *s = s.split_off(&keep);
        }
        self.admissions = self.admissions.split_off(&keep);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The count kept between steps is the count: after seats are taken, moved, revoked and
    /// pruned, and as hosts' buckets move on (or a host's clock steps back), `active` says
    /// what a truth counted from scratch says.
    #[test]
    fn the_kept_count_follows_every_change() {
        // From every visitor's seat, not from the kept counts.
        let afresh = |t: &Truth, buckets: &[u64]| -> u64 {
            t.seat_of
                .iter()
                .enumerate()
                .filter(|&(v, seat)| seat.is_some() && !t.is_doomed(v))
                .filter(|(_, seat)| {
                    let (h, c) = seat.unwrap();
                    c + t.session >= buckets[h]
                })
                .count() as u64
        };
        let mut t = Truth::new(2, 5);
        let mut buckets = vec![10, 10];
        let check = |t: &Truth, buckets: &[u64], want: u64| {
            assert_eq!(t.active(buckets), want);
            assert_eq!(t.active(buckets), afresh(t, buckets));
        };
        check(&t, &buckets, 0);
        t.admitted(0, 0, 10, &buckets);
        t.admitted(1, 1, 10, &buckets);
        check(&t, &buckets, 2);
        t.admitted(0, 1, 11, &buckets); // moved to the other host
        check(&t, &buckets, 2);
        t.revoked(1);
        check(&t, &buckets, 1);
        buckets = vec![16, 17]; // host 1's seat (bucket 11) left its window
        check(&t, &buckets, 0);
        buckets = vec![16, 15]; // host 1's clock stepped back: in its window again
        check(&t, &buckets, 1);
        t.prune(&buckets);
        check(&t, &buckets, 1);
        t.admitted(2, 0, 16, &buckets);
        check(&t, &buckets, 2);
        // A doomed seat counts no more, through a renewal too (which is no new admission),
        // until its ticket is refused and its visitor arrives anew.
        t.doom(2);
        check(&t, &buckets, 1);
        assert_eq!(t.admitted(2, 0, 17, &buckets), None, "a renewal");
        check(&t, &buckets, 1);
        t.revoked(2);
        assert!(!t.is_doomed(2));
        assert!(t.admitted(2, 0, 17, &buckets).is_some(), "a new arrival");
        check(&t, &buckets, 2);
    }
}
