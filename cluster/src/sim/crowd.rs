//! A planned crowd: who arrives when, at which host, and how visitors behave once there (what
//! `velvet-rope simulate` runs). Without one, a simulation runs the fault tests' own crowd:
//! bursts whose shape the seed varies, waiters refreshing every second.

/// New visitors over time and what they do.
#[derive(Debug, Clone, PartialEq)]
pub struct Crowd {
    /// When the crowd starts (virtual ms): its rate's minutes, its spikes and the samples
    /// measured count from it. Before it the hosts and the store warm up: a store that
    /// starts empty learns what the hosts hold before it grants (every new visitor is
    /// queued meanwhile), which is not the sale's start that a scenario describes.
    pub start_ms: u64,
    /// New visitors per minute over time: `(minute, rate)` points, linear between them, the
    /// last one held (before the first, its rate). Empty: none but the spikes'.
    pub rate: Vec<(f64, f64)>,
    /// Bursts on top of the rate.
    pub spikes: Vec<Spike>,
    /// Relative share of the traffic each host gets (`None`: even).
    pub weights: Option<Vec<f64>>,
    /// Pages an admitted visitor asks for per minute (their requests' mean rate).
    pub pages_per_minute: f64,
    /// How long an admitted visitor browses, mean minutes (exponentially distributed).
    pub session_minutes: f64,
    /// How long a waiter waits before giving up, mean minutes (exponentially distributed);
    /// 0: nobody gives up.
    pub patience_minutes: f64,
    /// The chance that a waiter who gave up comes back (with the cookie it had).
    pub come_back: f64,
    /// How long after giving up it comes back, mean minutes.
    pub come_back_minutes: f64,
}

impl Default for Crowd {
    fn default() -> Self {
        Self {
            start_ms: 0,
            rate: vec![(0.0, 60.0)],
            spikes: Vec::new(),
            weights: None,
            pages_per_minute: 2.0,
            session_minutes: 5.0,
            patience_minutes: 0.0,
            come_back: 0.0,
            come_back_minutes: 10.0,
        }
    }
}

/// A burst of visitors: `visitors` arriving over `over_ms` from `at_ms` (a Poisson stream),
/// at one host or spread as the traffic is.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Spike {
    /// When it starts (ms from the crowd's start).
    pub at_ms: u64,
    /// How many arrive.
    pub visitors: u64,
    /// Over how long (0: all at once, in the same millisecond).
    pub over_ms: u64,
    /// The host they all reach (`None`: spread by the hosts' weights).
    pub host: Option<usize>,
}

impl Crowd {
    /// New visitors per second at `ms` from the crowd's start (from the rate points; spikes
    /// not included).
    pub fn per_sec_at(&self, ms: u64) -> f64 {
        let minute = ms as f64 / 60_000.0;
        let Some(&(m0, r0)) = self.rate.first() else {
            return 0.0;
        };
        if minute <= m0 {
            return r0 / 60.0;
        }
        for pair in self.rate.windows(2) {
            let ((a, ra), (b, rb)) = (pair[0], pair[1]);
            if minute < b {
                let f = if b > a { (minute - a) / (b - a) } else { 1.0 };
                return (ra + (rb - ra) * f) / 60.0;
            }
        }
        self.rate.last().map_or(0.0, |&(_, r)| r / 60.0)
    }

    /// Visitors the rate and the spikes bring within the first `ms` from the crowd's start
    /// (what a run of that length should see arrive, about).
    pub fn expected_visitors(&self, ms: u64) -> f64 {
        let seconds = ms / 1000;
        let from_rate: f64 = (0..seconds).map(|s| self.per_sec_at(s * 1000 + 500)).sum();
        let from_spikes: f64 = self
            .spikes
            .iter()
            .filter(|s| s.at_ms < ms)
            .map(|s| {
                if s.over_ms == 0 {
                    s.visitors as f64
                } else {
                    s.visitors as f64 * ((ms - s.at_ms).min(s.over_ms) as f64 / s.over_ms as f64)
                }
            })
            .sum();
        from_rate + from_spikes
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_rate_is_linear_between_points_and_held_after_the_last() {
        let c = Crowd {
            rate: vec![(0.0, 60.0), (10.0, 600.0), (20.0, 0.0)],
            ..Crowd::default()
        };
        assert_eq!(c.per_sec_at(0), 1.0);
        assert!((c.per_sec_at(300_000) - 5.5).abs() < 1e-9);
        assert_eq!(c.per_sec_at(600_000), 10.0);
        assert_eq!(c.per_sec_at(1_200_000), 0.0);
        assert_eq!(c.per_sec_at(9_000_000), 0.0);
        let none = Crowd {
            rate: Vec::new(),
            ..Crowd::default()
        };
        assert_eq!(none.per_sec_at(5), 0.0);
    }

    #[test]
    fn expected_visitors_count_the_rate_and_the_spikes() {
        let c = Crowd {
            rate: vec![(0.0, 60.0)],
            spikes: vec![Spike {
                at_ms: 10_000,
                visitors: 1000,
                over_ms: 20_000,
                host: None,
            }],
            ..Crowd::default()
        };
        assert!((c.expected_visitors(60_000) - 1060.0).abs() < 1e-6);
        assert!((c.expected_visitors(20_000) - 520.0).abs() < 1e-6);
    }
}
