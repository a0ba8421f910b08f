//! `wants` estimated from observed demand.
//!
//! Fed a cumulative count of requested units (e.g. [`RateLimiter::demand`]
//! (super::RateLimiter::demand)), the estimator measures the demand rate per window and keeps
//! an exponentially weighted average. It rises at once (the latest window counts if higher)
//! and decays smoothly, with a headroom factor so a client asks for a little more than it
//! used and can grow.

use crate::clock::Millis;

/// Estimates a demand rate (units per second) from a cumulative counter.
#[derive(Debug, Clone)]
pub struct DemandEstimator {
    window_ms: u64,
    alpha: f64,
    headroom: f64,
    last: Option<(u64, Millis)>,
    ewma: Option<f64>,
    latest: f64,
}

impl DemandEstimator {
    /// Windows of `window_ms` (at least 1), smoothing 0.3, headroom 10 %.
    pub fn new(window_ms: u64) -> Self {
        Self::with_params(window_ms, 0.3, 0.1)
    }

    /// Windows of `window_ms`, EWMA weight `alpha` of the newest window (clamped to
    /// `(0, 1]`), and `headroom` added on top (e.g. 0.1 = 10 %).
    pub fn with_params(window_ms: u64, alpha: f64, headroom: f64) -> Self {
        let alpha = if alpha.is_finite() {
            alpha.clamp(1e-6, 1.0)
        } else {
            0.3
        };
        let headroom = if headroom.is_finite() {
            headroom.max(0.0)
        } else {
            0.0
        };
        Self {
            window_ms: window_ms.max(1),
            alpha,
            headroom,
            last: None,
            ewma: None,
            latest: 0.0,
        }
    }

    /// Feeds the cumulative count at `now`; updates the estimate when a window has passed.
    /// Returns the current estimate.
    pub fn observe(&mut self, total: u64, now: Millis) -> Option<f64> {
        match self.last {
            None => self.last = Some((total, now)),
            Some((count, at)) if now >= at.saturating_add(self.window_ms) => {
                let elapsed_s = (now - at) as f64 / 1000.0;
                let rate = total.saturating_sub(count) as f64 / elapsed_s;
                self.latest = rate;
                self.ewma = Some(match self.ewma {
                    None => rate,
                    Some(e) => e + self.alpha * (rate - e),
                });
                self.last = Some((total, now));
            }
            Some(_) => {}
        }
        self.wants()
    }

    /// The estimated wants (per second, with headroom), once one window has been measured.
    pub fn wants(&self) -> Option<f64> {
        self.ewma
            .map(|e| e.max(self.latest) * (1.0 + self.headroom))
    }
}

#[cfg(all(test, not(velvet_rope_loom)))]
mod tests {
    use super::*;

    #[test]
    fn rises_at_once_decays_smoothly() {
        let mut d = DemandEstimator::with_params(1000, 0.5, 0.0);
        assert_eq!(d.observe(0, 0), None);
        assert_eq!(d.observe(50, 500), None);
        assert_eq!(d.observe(100, 1000), Some(100.0));
        assert_eq!(d.observe(300, 2000), Some(200.0));
        // demand stops: the average decays by half per window.
        assert_eq!(d.observe(300, 3000), Some(75.0));
    }
}
