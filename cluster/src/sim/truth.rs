//! The ground truth a simulation checks the room against: every visitor's seat, read from the
//! tickets the engines hand out, and every first admission, by the bucket it was booked to.
//!
//! A visitor holds a seat from its admission until its last counted bucket leaves the
//! session window of its host's clock (what the engines count, and what its ticket's expiry
//! follows): the room holds the visitors whose seats are current. A returning visitor whose
//! ticket is re-issued moves its seat; one counted afresh after a restart keeps its one seat.

use std::collections::BTreeMap;

/// Seats and admissions.
pub(crate) struct Truth {
    session: u64,
    /// Seats per host by counted bucket.
    seats: Vec<BTreeMap<u64, u64>>,
    /// Each visitor's seat: host and counted bucket.
    seat_of: Vec<Option<(usize, u64)>>,
    /// First admissions by the bucket they were booked to.
    admissions: BTreeMap<u64, u64>,
}

impl Truth {
    pub(crate) fn new(hosts: usize, session: u32) -> Self {
        Self {
            session: u64::from(session),
            seats: vec![BTreeMap::new(); hosts],
            seat_of: Vec::new(),
            admissions: BTreeMap::new(),
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
        }
        let first = !self.seated(v, buckets);
        if let Some((oh, oc)) = self.seat_of[v] {
            if let Some(n) = self.seats[oh].get_mut(&oc) {
                *n -= 1;
                if *n == 0 {
                    self.seats[oh].remove(&oc);
                }
            }
        }
        self.seat_of[v] = Some((h, counted));
        *self.seats[h].entry(counted).or_default() += 1;
        if first {
            let n = self.admissions.entry(counted).or_default();
            *n += 1;
            Some(*n)
        } else {
            None
        }
    }

    /// Visitor `v`'s session was revoked: its seat is gone (the host counted it out).
    pub(crate) fn revoked(&mut self, v: usize) {
        if let Some((h, c)) = self.seat_of.get_mut(v).and_then(Option::take) {
            if let Some(n) = self.seats[h].get_mut(&c) {
                *n -= 1;
                if *n == 0 {
                    self.seats[h].remove(&c);
                }
            }
        }
    }

    /// Visitors holding a current seat, given each host's bucket now.
    pub(crate) fn active(&self, buckets: &[u64]) -> u64 {
        self.seats
            .iter()
            .zip(buckets)
            .map(|(s, &b)| {
                s.range(b.saturating_sub(self.session)..)
                    .map(|(_, n)| n)
                    .sum::<u64>()
            })
            .sum()
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
        for s in &mut self.seats {
            *s = s.split_off(&keep);
        }
        self.admissions = self.admissions.split_off(&keep);
    }
}
