//! A planned crowd in the simulated world (`velvet-rope simulate`): arrivals from the crowd's
//! rate and spikes, what each visitor does after each answer, and what the run measures of
//! it (see [`Recorder`]). The fault tests' own crowd is in `world.rs` (`arrival`, `request`).

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use velvet_rope::Outcome as Decided;

use super::{exponential, pick_host, Event, Mood, World};
use crate::sim::measure::{overran, Recorder, Waiter};

/// What a planned crowd's run follows of one visitor.
#[derive(Debug, Clone, Copy, Default)]
pub(super) struct Track {
    /// Its first request (virtual ms).
    arrived: u64,
    /// It came during a pre-queue that the event's start shuffles.
    shuffled: bool,
    /// Counted waiting now.
    waiting: bool,
    /// It waited at some point.
    queued: bool,
    /// The wait first promised, seconds.
    promised: Option<u64>,
    /// Admitted at some point.
    admitted: bool,
    /// Gave up at some point.
    gave_up: bool,
    /// Came back at some point.
    came_back: bool,
    /// Draws made from its own stream (see `World::behave`).
    draws: u32,
}

impl World {
    /// An exponential draw of mean `mean` for visitor `v`'s behaviour (how long it browses,
    /// its pages, its patience, whether and when it comes back), from a stream of its own:
    /// the same visitor behaves the same whichever way the hosts share the room, and whatever
    /// else the run draws in between.
    fn behave(&mut self, v: usize, mean: f64) -> f64 {
        let u = self.uniform(v);
        -(1.0 - u).ln() * mean
    }

    /// A uniform draw in [0, 1) from visitor `v`'s own stream.
    fn uniform(&mut self, v: usize) -> f64 {
        let t = &mut self.visitors[v].track;
        let n = u64::from(t.draws);
        t.draws = t.draws.wrapping_add(1);
        let key = self.out.seed
            ^ (v as u64).wrapping_mul(0x9e37_79b9_7f4a_7c15)
            ^ n.wrapping_mul(0xc2b2_ae3d_27d4_eb4f);
        StdRng::seed_from_u64(key).gen()
    }

    /// What the run follows of a visitor arriving now.
    pub(super) fn track_new(&mut self) -> Track {
        let now = self.now;
        let shuffled = self.s.event.is_some_and(|e| {
            e.shuffle && e.prequeue_ms.is_some_and(|p| now >= p) && now < e.start_ms
        });
        if let Some(r) = &mut self.recorder {
            r.arrived();
        }
        Track {
            arrived: now,
            shuffled,
            ..Track::default()
        }
    }

    /// Schedules the crowd: its arrivals, its spikes and the samples, from its start.
    pub(super) fn plan_crowd(&mut self) {
        let Some(c) = self.s.crowd.clone() else {
            return;
        };
        self.schedule(c.start_ms, Event::PlannedWake);
        for (i, spike) in c.spikes.iter().enumerate() {
            if spike.visitors > 0 {
                let at = c.start_ms.saturating_add(spike.at_ms);
                self.schedule(at, Event::Spike(i, spike.visitors - 1));
            }
        }
        self.schedule(c.start_ms + 1000, Event::Sample);
    }

    /// A planned crowd's next arrival from now: a Poisson stream at the rate of the moment,
    /// looked at again at least once a second (the rate moves).
    pub(super) fn next_planned(&mut self) {
        let Some(crowd) = &self.s.crowd else { return };
        let rate = crowd.per_sec_at(self.now.saturating_sub(crowd.start_ms));
        if rate <= 0.0 {
            self.schedule(self.now + 1000, Event::PlannedWake);
            return;
        }
        let gap = exponential(&mut self.arrivals, 1000.0 / rate);
        if gap >= 1000.0 {
            self.schedule(self.now + 1000, Event::PlannedWake);
        } else {
            self.schedule(self.now + gap as u64, Event::Planned);
        }
    }

    /// Spike `i`'s next visitor; `left` more after it.
    pub(super) fn spike(&mut self, i: usize, left: u64) {
        let Some(spike) = self.s.crowd.as_ref().map(|c| c.spikes[i]) else {
            return;
        };
        let host = match spike.host {
            Some(h) => h.min(self.hosts.len() - 1),
            None => pick_host(&self.weights, &mut self.arrivals),
        };
        self.new_visitor(host);
        if left > 0 {
            let gap = if spike.over_ms == 0 {
                0.0
            } else {
                exponential(
                    &mut self.arrivals,
                    spike.over_ms as f64 / spike.visitors as f64,
                )
            };
            self.schedule(self.now + gap as u64, Event::Spike(i, left - 1));
        }
    }

    /// The limits in force now: `total_active_users` and `new_users_per_minute` (the event's
    /// during it).
    pub(super) fn limits_in_force(&self) -> (u64, u64) {
        self.limits_at(self.now)
    }

    fn limits_at(&self, t: u64) -> (u64, u64) {
        match self.s.event {
            Some(e) if t >= e.start_ms && t < e.end_ms => {
                (e.total, e.per_minute.unwrap_or(self.s.per_minute))
            }
            _ => (self.s.total, self.s.per_minute),
        }
    }

    /// The limits the engine enforces now: the lowest in force within a lease and a session
    /// (a grant covers its lease and the sessions it lets in, so an event lowering the room is
    /// enforced that far ahead).
    fn limits_enforced(&self) -> (u64, u64) {
        let (mut total, mut minute) = self.limits_in_force();
        let ahead = self.now + self.s.hold_ms();
        if let Some(e) = self.s.event {
            for t in [e.start_ms, e.end_ms] {
                if t > self.now && t <= ahead {
                    let (a, b) = self.limits_at(t);
                    total = total.min(a);
                    minute = minute.min(b);
                }
            }
        }
        (total, minute)
    }

    pub(super) fn sample(&mut self) {
        let active = self.truth.active(&self.buckets());
        let in_force = self.limits_in_force();
        let (enforced, _) = self.limits_enforced();
        let start = self.s.crowd.as_ref().map_or(0, |c| c.start_ms);
        let second = (self.now - start) / 1000;
        if let Some(r) = &mut self.recorder {
            r.sample(second, active, in_force, enforced);
        }
        self.schedule(self.now + 1000, Event::Sample);
    }

    fn waiter(&self, v: usize) -> Waiter {
        let t = self.visitors[v].track;
        Waiter {
            visitor: v,
            arrived: t.arrived,
            promised: t.promised,
            shuffled: t.shuffled,
        }
    }

    /// What a planned crowd's visitor `v` does after the answer `d` at host `h`
    /// (`new_seat`: the answer gave it a seat it did not hold).
    pub(super) fn planned_next(
        &mut self,
        v: usize,
        h: usize,
        d: &velvet_rope::Decision,
        new_seat: bool,
    ) {
        let Some(crowd) = self.s.crowd.as_ref() else {
            return;
        };
        let (pages_per_minute, session_minutes, patience_minutes, come_back, come_back_minutes) = (
            crowd.pages_per_minute,
            crowd.session_minutes,
            crowd.patience_minutes,
            crowd.come_back,
            crowd.come_back_minutes,
        );
        let now = self.now;
        match d.outcome {
            Decided::Admit => {
                if new_seat {
                    let t = self.visitors[v].track;
                    let waiter = t.queued.then(|| self.waiter(v));
                    if let Some(r) = &mut self.recorder {
                        if t.admitted {
                            r.readmitted(t.waiting);
                        } else {
                            r.admitted(now, waiter, t.waiting);
                        }
                    }
                    let track = &mut self.visitors[v].track;
                    track.admitted = true;
                    track.waiting = false;
                }
                // A visitor let in from the queue (or on arrival) starts browsing; one still
                // browsing whose seat had lapsed goes on with its pages.
                if matches!(self.visitors[v].mood, Mood::Waiting { .. }) {
                    let session_ms = self.behave(v, session_minutes * 60_000.0);
                    let pages = (session_ms / 60_000.0 * pages_per_minute).round() as u32;
                    self.visitors[v].mood = Mood::Admitted {
                        visits: pages.saturating_add(1),
                    };
                }
                let Mood::Admitted { visits } = self.visitors[v].mood else {
                    return;
                };
                if visits > 1 && pages_per_minute > 0.0 {
                    self.visitors[v].mood = Mood::Admitted { visits: visits - 1 };
                    let gap = self.behave(v, 60_000.0 / pages_per_minute);
                    self.schedule(now.saturating_add(gap.max(1.0) as u64), Event::Request(v));
                }
            }
            Decided::Queue | Decided::Reject => {
                if !self.visitors[v].track.waiting {
                    let t = self.visitors[v].track;
                    let first = !t.queued && !t.admitted;
                    let back = matches!(self.visitors[v].mood, Mood::Waiting { until: 1 });
                    let track = &mut self.visitors[v].track;
                    track.waiting = true;
                    if first {
                        track.queued = true;
                        track.promised = d.estimated_wait_secs;
                    }
                    if first {
                        let (early, fill) = self.queued_early(h);
                        let w = self.waiter(v);
                        if let Some(r) = &mut self.recorder {
                            r.queued(w, early, fill);
                        }
                    } else if back {
                        let first_return = !t.came_back && t.queued;
                        self.visitors[v].track.came_back = true;
                        if let Some(r) = &mut self.recorder {
                            r.came_back(first_return);
                        }
                    } else if let Some(r) = &mut self.recorder {
                        // An admitted visitor whose seat lapsed queues anew.
                        r.requeued();
                    }
                    let patience = if patience_minutes > 0.0 {
                        self.behave(v, patience_minutes * 60_000.0) as u64
                    } else {
                        u64::MAX / 2
                    };
                    // (0 marks a visitor yet to be answered, 1 one coming back.)
                    self.visitors[v].mood = Mood::Waiting {
                        until: now.saturating_add(patience).max(2),
                    };
                }
                let Mood::Waiting { until } = self.visitors[v].mood else {
                    return;
                };
                if now < until {
                    // The waiting page refreshes when the answer says (a tenth of jitter).
                    let every = d.retry_after_secs.unwrap_or(u64::from(self.s.refresh_secs));
                    let gap = every.max(1) * 1000;
                    let gap = self.rng.gen_range(gap * 9 / 10..=gap * 11 / 10);
                    self.schedule(now + gap, Event::Request(v));
                    return;
                }
                // It gives up, and may come back later with the cookie it had.
                let w = self.waiter(v);
                // (Visitors, not times; and those who queued on arrival: an admitted visitor
                // whose seat lapsed and who leaves is not a waiter who gave up.)
                let first = !self.visitors[v].track.gave_up && self.visitors[v].track.queued;
                let track = &mut self.visitors[v].track;
                track.gave_up = true;
                track.waiting = false;
                if let Some(r) = &mut self.recorder {
                    r.gave_up(w, first, now);
                }
                if self.uniform(v) < come_back.clamp(0.0, 1.0) {
                    self.visitors[v].mood = Mood::Waiting { until: 1 };
                    let back = self.behave(v, come_back_minutes * 60_000.0);
                    self.schedule(
                        now.saturating_add(back.max(1000.0) as u64),
                        Event::Request(v),
                    );
                }
            }
        }
    }

    /// Whether a new visitor queued now at host `h` was queued early (the room had a seat for
    /// it even if everyone waiting got one first), and how full the room was (seats held and
    /// waiters over the limit, or the same for the minute's admissions, whichever is fuller;
    /// `None` in a pre-queue, which queues everyone by design).
    fn queued_early(&self, h: usize) -> (bool, Option<f64>) {
        if self
            .s
            .event
            .is_some_and(|e| e.prequeue_ms.is_some_and(|p| self.now >= p) && self.now < e.start_ms)
        {
            return (false, None);
        }
        let (limit, per_minute) = self.limits_enforced();
        let buckets = self.buckets();
        let active = self.truth.active(&buckets);
        let waiting = self.recorder.as_ref().map_or(0, Recorder::waiting);
        // (This visitor is not counted waiting yet.)
        let admitted = self.truth.admissions_in(buckets[h]);
        let fill = ((active + waiting) as f64 / limit.max(1) as f64)
            .max((admitted + waiting) as f64 / per_minute.max(1) as f64);
        (
            active + waiting < limit && admitted + waiting < per_minute,
            Some(fill),
        )
    }

    /// The measurements, at the end of a planned crowd's run.
    pub(super) fn finish_planned(&mut self) {
        let Some(r) = self.recorder.take() else {
            return;
        };
        let now = self.now;
        let overrun = (0..self.visitors.len())
            .filter(|&v| self.visitors[v].track.waiting && self.visitors[v].track.queued)
            .filter(|&v| overran(self.waiter(v), now))
            .count() as u64;
        self.out.measured = Some(r.finish(self.out.max_per_bucket, overrun));
    }
}
