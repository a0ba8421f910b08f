//! What a planned crowd's run measures (see [`Measured`]): from the simulation's own
//! visitors and the ground truth of seats, never read back from the engines, so the figures
//! check the engines.

use std::collections::BTreeSet;

use serde::Serialize;

/// One second of a run.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct Sample {
    /// Seconds from the run's start.
    pub second: u64,
    /// Visitors holding a seat (ground truth).
    pub active: u64,
    /// `total_active_users` in force.
    pub limit: u64,
    /// `new_users_per_minute` in force.
    pub per_minute: u64,
    /// Visitors waiting (queued, not given up).
    pub waiting: u64,
    /// First admissions within this second.
    pub admitted: u64,
}

/// Summary of a distribution of seconds.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize)]
pub struct Distribution {
    /// How many samples.
    pub samples: u64,
    /// Their mean.
    pub mean: f64,
    /// The mean of their absolute values.
    pub mean_abs: f64,
    /// Median.
    pub p50: f64,
    /// 90th percentile.
    pub p90: f64,
    /// 99th percentile.
    pub p99: f64,
    /// Largest.
    pub max: f64,
}

impl Distribution {
    /// The summary of `values` (`None` when empty).
    pub fn of(values: &mut [f64]) -> Option<Self> {
        if values.is_empty() {
            return None;
        }
        values.sort_by(f64::total_cmp);
        let n = values.len();
        let at = |q: f64| values[((q * n as f64).ceil() as usize).clamp(1, n) - 1];
        Some(Self {
            samples: n as u64,
            mean: values.iter().sum::<f64>() / n as f64,
            mean_abs: values.iter().map(|v| v.abs()).sum::<f64>() / n as f64,
            p50: at(0.50),
            p90: at(0.90),
            p99: at(0.99),
            max: values[n - 1],
        })
    }
}

/// What a run with a planned crowd measured.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct Measured {
    /// Seconds simulated.
    pub seconds: u64,
    /// `total_active_users` (outside an event).
    pub limit: u64,
    /// `new_users_per_minute` (outside an event).
    pub per_minute: u64,
    /// New visitors that arrived.
    pub visitors: u64,
    /// Visitors admitted (each once, at its first admission).
    pub admitted: u64,
    /// Of those, admitted after waiting in the queue (also those who gave up, came back and
    /// were let in).
    pub admitted_from_queue: u64,
    /// Admissions of visitors admitted before, whose seat had lapsed (a gap between pages
    /// longer than the session): a seat again, not a visitor more.
    pub readmitted: u64,
    /// Visitors queued on their first request.
    pub queued: u64,
    /// Visitors who gave up waiting (at least once).
    pub gave_up: u64,
    /// Of those, who came back later (at least once).
    pub came_back: u64,
    /// Visitors still waiting at the end.
    pub waiting_at_end: u64,
    /// The most visitors holding a seat at once.
    pub peak_active: u64,
    /// When (seconds from the start).
    pub peak_active_at: u64,
    /// `total_active_users` in force then (an event's, during it).
    pub limit_at_peak: u64,
    /// Seconds in which the room held more than the limit in force.
    pub seconds_above_limit: u64,
    /// The most first admissions booked to one minute.
    pub peak_admissions_in_a_minute: u64,
    /// New visitors queued while the room had a seat for them even if everyone waiting got
    /// one first (seats held plus waiters under the limit the engine enforces, and the same
    /// for the minute's admissions): queued early. The limit enforced is the lowest in force
    /// within a lease and a session (an event lowering the room is enforced that far ahead).
    /// An event's pre-queue queues everyone by design: none of its visitors is early.
    pub queued_early: u64,
    /// How full the room was when the first new visitor was queued: seats held and waiters
    /// over the limit enforced (or the same for the minute's admissions, whichever is
    /// fuller). Below 1.0, queueing began early (an event's pre-queue left out).
    pub queueing_began_at: Option<f64>,
    /// Seconds in which somebody waited.
    pub seconds_with_waiters: u64,
    /// Seats in use over seats enforced (as for `queued_early`), over the seconds in which
    /// somebody waited (1.0: the room was full whenever people waited).
    pub utilisation_while_waiting: Option<f64>,
    /// Seconds from the first request to the admission, of visitors who waited.
    pub wait: Option<Distribution>,
    /// Waiters admitted more than a refresh (and a tenth, and two seconds) before one who
    /// arrived in an earlier minute (an earlier arrival bucket: the queue's order) and kept
    /// waiting: first come, first served broken. Within a minute the order is whoever
    /// refreshes first, by design; so is a shuffled pre-queue's. Waiters who gave up or came
    /// back are left out.
    pub fifo_inversions: u64,
    /// New visitors let straight in while a waiter who arrived in an earlier minute had kept
    /// waiting longer than a refresh (and a tenth, and two seconds): first come, first served
    /// broken by a newcomer (another host admitting on its allowance before the store has
    /// seen the waiter, or while the waiter's own host has no seat for it yet). A shuffled
    /// pre-queue's waiters are left out.
    pub newcomers_past_waiters: u64,
    /// The wait minus the wait first promised (`estimated_wait_secs` of the first waiting
    /// answer), seconds: positive when the estimate was short. Of waiters let in only: those
    /// who gave up or still wait are in `promises_overrun_unadmitted` when they had waited
    /// longer than promised.
    pub estimate_error: Option<Distribution>,
    /// Waiters not let in (who gave up, or still wait at the end) who had waited longer than
    /// their first promise: estimates known to be short that `estimate_error` cannot hold.
    pub promises_overrun_unadmitted: u64,
    /// Second by second.
    #[serde(skip)]
    pub series: Vec<Sample>,
}

/// Collects [`Measured`] during a run.
#[derive(Debug, Default)]
pub(crate) struct Recorder {
    m: Measured,
    /// Arrival bucket width and a refresh's slack, ms.
    bucket_ms: u64,
    slack_ms: u64,
    /// Waiters in FIFO order: (first request, visitor), shuffled pre-queue excluded.
    waiting: BTreeSet<(u64, usize)>,
    /// Those admitted: (arrival bucket, when admitted).
    order: Vec<(u64, u64)>,
    /// Every waiter, pre-queue included.
    waiters: u64,
    waits: Vec<f64>,
    errors: Vec<f64>,
    admitted_this_second: u64,
    limit_seconds: (u64, u64),
}

/// A waiter as the recorder knows it.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Waiter {
    pub(crate) visitor: usize,
    /// Its first request (ms).
    pub(crate) arrived: u64,
    /// The wait first promised, seconds.
    pub(crate) promised: Option<u64>,
    /// It came during a pre-queue that the event's start shuffles.
    pub(crate) shuffled: bool,
}

impl Recorder {
    /// A recorder for a room with these limits, arrival buckets `bucket_ms` wide, whose
    /// waiters refresh every `refresh_ms`.
    pub(crate) fn new(limit: u64, per_minute: u64, bucket_ms: u64, refresh_ms: u64) -> Self {
        // (Buckets are counted from the virtual clock's start, a whole minute.)
        Self {
            m: Measured {
                limit,
                per_minute,
                ..Measured::default()
            },
            bucket_ms: bucket_ms.max(1),
            slack_ms: refresh_ms * 11 / 10 + 2000,
            ..Self::default()
        }
    }

    /// Visitors waiting now.
    pub(crate) fn waiting(&self) -> u64 {
        self.waiters
    }

    pub(crate) fn arrived(&mut self) {
        self.m.visitors += 1;
    }

    /// A new visitor's first request was queued (`early`: with a seat for it even after
    /// every waiter had one).
    pub(crate) fn queued(&mut self, w: Waiter, early: bool, fill: Option<f64>) {
        self.m.queued += 1;
        if self.m.queueing_began_at.is_none() {
            self.m.queueing_began_at = fill;
        }
        self.m.queued_early += u64::from(early);
        self.waiters += 1;
        if !w.shuffled {
            self.waiting.insert((w.arrived, w.visitor));
        }
    }

    /// A waiter gave up at `now` (`first`: for the first time).
    pub(crate) fn gave_up(&mut self, w: Waiter, first: bool, now: u64) {
        self.waiters -= 1;
        self.waiting.remove(&(w.arrived, w.visitor));
        if first {
            self.m.gave_up += 1;
            self.m.promises_overrun_unadmitted += u64::from(overran(w, now));
        }
    }

    /// An admitted visitor whose seat lapsed was queued again.
    pub(crate) fn requeued(&mut self) {
        self.waiters += 1;
    }

    /// A waiter who gave up came back and was queued (`first`: for the first time). It keeps
    /// the place its ticket holds, the engine's business: it is left out of the order
    /// measured.
    pub(crate) fn came_back(&mut self, first: bool) {
        self.m.came_back += u64::from(first);
        self.waiters += 1;
    }

    /// A visitor's first admission at `now`: `queued_before`, when it waited at some point;
    /// `waiting_now`, when it was counted waiting (not when it came back and went straight
    /// in).
    pub(crate) fn admitted(&mut self, now: u64, queued_before: Option<Waiter>, waiting_now: bool) {
        self.m.admitted += 1;
        self.admitted_this_second += 1;
        if waiting_now {
            self.waiters -= 1;
        }
        let Some(w) = queued_before else {
            // A newcomer let straight in while someone from an earlier minute kept waiting
            // (longer than `fifo_inversions` allows: a refresh, a tenth and two seconds).
            if let Some(&(arrived, _)) = self.waiting.first() {
                if arrived / self.bucket_ms < now / self.bucket_ms
                    && now.saturating_sub(arrived) > self.slack_ms
                {
                    self.m.newcomers_past_waiters += 1;
                }
            }
            return;
        };
        self.m.admitted_from_queue += 1;
        let waited = now.saturating_sub(w.arrived) as f64 / 1000.0;
        self.waits.push(waited);
        if let Some(p) = w.promised {
            self.errors.push(waited - p as f64);
        }
        if self.waiting.remove(&(w.arrived, w.visitor)) {
            self.order.push((w.arrived / self.bucket_ms, now));
        }
    }

    /// A visitor admitted before was admitted again (its seat had lapsed).
    pub(crate) fn readmitted(&mut self, waiting_now: bool) {
        self.m.readmitted += 1;
        if waiting_now {
            self.waiters -= 1;
        }
    }

    /// A second ended: `active` seats held, with these limits in force (`total_active_users`
    /// and `new_users_per_minute`) and `enforced` seats enforced.
    pub(crate) fn sample(
        &mut self,
        second: u64,
        active: u64,
        (limit, per_minute): (u64, u64),
        enforced: u64,
    ) {
        let waiting = self.waiters;
        if active > self.m.peak_active {
            self.m.peak_active = active;
            self.m.peak_active_at = second;
            self.m.limit_at_peak = limit;
        }
        self.m.seconds_above_limit += u64::from(active > limit);
        if waiting > 0 {
            self.m.seconds_with_waiters += 1;
            self.limit_seconds.0 += active.min(enforced);
            self.limit_seconds.1 += enforced;
        }
        self.m.series.push(Sample {
            second,
            active,
            limit,
            per_minute,
            waiting,
            admitted: std::mem::take(&mut self.admitted_this_second),
        });
        self.m.seconds = second;
    }

    /// The measurements, given the most admissions booked to a minute and the waiters still
    /// waiting who had waited longer than promised.
    pub(crate) fn finish(mut self, peak_per_minute: u64, overrun_waiting: u64) -> Measured {
        self.m.peak_admissions_in_a_minute = peak_per_minute;
        self.m.promises_overrun_unadmitted += overrun_waiting;
        self.m.waiting_at_end = self.waiters;
        if self.limit_seconds.1 > 0 {
            self.m.utilisation_while_waiting =
                Some(self.limit_seconds.0 as f64 / self.limit_seconds.1 as f64);
        }
        // Those still waiting were passed by everyone admitted after their bucket.
        let still: Vec<(u64, u64)> = self
            .waiting
            .iter()
            .map(|&(arrived, _)| (arrived / self.bucket_ms, u64::MAX))
            .collect();
        self.order.extend(still);
        self.m.fifo_inversions = inversions(&mut self.order, self.slack_ms);
        self.m.wait = Distribution::of(&mut self.waits);
        self.m.estimate_error = Distribution::of(&mut self.errors);
        self.m
    }
}

/// Whether waiter `w` had waited longer than first promised by `now`.
pub(crate) fn overran(w: Waiter, now: u64) -> bool {
    w.promised
        .is_some_and(|p| now.saturating_sub(w.arrived) > p.saturating_mul(1000))
}

/// Admissions (bucket, at) made more than `slack` ms before an admission (or none: `MAX`) of
/// an earlier bucket.
fn inversions(order: &mut [(u64, u64)], slack: u64) -> u64 {
    order.sort_unstable();
    let (mut n, mut i) = (0, 0);
    // The latest admission of every bucket before the current one.
    let mut latest_before = 0u64;
    while i < order.len() {
        let bucket = order[i].0;
        let mut j = i;
        let mut latest = 0u64;
        while j < order.len() && order[j].0 == bucket {
            let at = order[j].1;
            n += u64::from(at != u64::MAX && latest_before > at.saturating_add(slack));
            latest = latest.max(at);
            j += 1;
        }
        latest_before = latest_before.max(latest);
        i = j;
    }
    n
}

#[cfg(test)]
mod tests {
    use super::*;

    fn waiter(visitor: usize, arrived: u64) -> Waiter {
        Waiter {
            visitor,
            arrived,
            promised: Some(10),
            shuffled: false,
        }
    }

    #[test]
    fn percentiles_are_nearest_rank() {
        let mut v: Vec<f64> = (1..=100).map(f64::from).collect();
        let d = Distribution::of(&mut v).unwrap();
        assert_eq!((d.p50, d.p90, d.p99, d.max), (50.0, 90.0, 99.0, 100.0));
        assert_eq!(d.mean, 50.5);
        assert!(Distribution::of(&mut []).is_none());
    }

    #[test]
    fn an_admission_a_refresh_before_an_earlier_minute_is_an_inversion() {
        // Buckets of a minute, refreshes every 10 s: slack 13 s.
        let mut r = Recorder::new(10, 10, 60_000, 10_000);
        r.queued(waiter(1, 1000), false, None);
        r.queued(waiter(2, 2000), false, None);
        r.queued(waiter(3, 61_000), false, None);
        r.queued(waiter(4, 62_000), false, None);
        r.queued(waiter(5, 63_000), false, None);
        // Within a minute, any order.
        r.admitted(100_000, Some(waiter(2, 2000)), true);
        // Within a refresh of the earlier minute's last: in order.
        r.admitted(105_000, Some(waiter(3, 61_000)), true);
        r.admitted(110_000, Some(waiter(1, 1000)), true);
        // Passed waiter 1 by more than a refresh.
        r.admitted(90_000, Some(waiter(4, 62_000)), true);
        let m = r.finish(2, 0);
        // Waiter 4 passed waiter 1; waiter 5 still waits, passed by nobody later.
        assert_eq!(m.fifo_inversions, 1);
        assert_eq!(m.admitted_from_queue, 4);
        let e = m.estimate_error.unwrap();
        // Waited 98, 44, 109 and 28 s, each promised 10.
        assert_eq!((e.samples, e.max, e.mean), (4, 99.0, 59.75));
    }

    #[test]
    fn a_newcomer_let_in_past_a_long_waiter_of_an_earlier_minute_is_counted() {
        // Buckets of a minute, refreshes every 10 s: slack 13 s.
        let mut r = Recorder::new(10, 10, 60_000, 10_000);
        r.queued(waiter(1, 55_000), false, None);
        // The same minute, or a waiter who had no time to come back: not counted.
        r.admitted(58_000, None, false);
        r.admitted(61_000, None, false);
        assert_eq!(r.m.newcomers_past_waiters, 0);
        r.admitted(70_000, None, false);
        assert_eq!(r.m.newcomers_past_waiters, 1);
        // Once the waiter is in, newcomers pass nobody.
        r.admitted(71_000, Some(waiter(1, 55_000)), true);
        r.admitted(72_000, None, false);
        assert_eq!(r.m.newcomers_past_waiters, 1);
    }

    #[test]
    fn a_waiter_still_waiting_was_passed_by_later_minutes() {
        let mut r = Recorder::new(10, 10, 60_000, 10_000);
        r.queued(waiter(1, 1000), false, None);
        r.queued(waiter(2, 61_000), false, None);
        r.admitted(100_000, Some(waiter(2, 61_000)), true);
        assert_eq!(r.finish(1, 0).fifo_inversions, 1);
    }

    #[test]
    fn a_waiter_who_gave_up_is_no_longer_ahead() {
        let mut r = Recorder::new(10, 10, 60_000, 10_000);
        r.queued(waiter(1, 1000), false, None);
        r.queued(waiter(2, 62_000), false, None);
        r.gave_up(waiter(1, 1000), true, 5_000);
        r.admitted(90_000, Some(waiter(2, 62_000)), true);
        r.sample(1, 10, (10, 10), 10);
        let m = r.finish(1, 0);
        assert_eq!((m.fifo_inversions, m.gave_up, m.waiting_at_end), (0, 1, 0));
        assert_eq!(m.series[0].admitted, 1);
    }
}
