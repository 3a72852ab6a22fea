//! Retransmission timeout estimation (RFC 6298): SRTT/RTTVAR from samples of
//! segments that were never retransmitted (Karn), exponential backoff bounded
//! by `max_rto` (and, by the caller, by R); also the smallest sample seen
//! (the path's min RTT, which RACK's loss detection uses).
//!
//! ```text
//!   first sample R:  SRTT = R, RTTVAR = R/2
//!   later:           RTTVAR = 3/4 RTTVAR + 1/4 |SRTT - R|,  SRTT = 7/8 SRTT + 1/8 R
//!   RTO = clamp(SRTT + max(G, 4 RTTVAR), min_rto, max_rto) << backoff
//! ```

use std::time::Duration;

/// Clock granularity G assumed by the estimator.
const GRANULARITY: Duration = Duration::from_millis(1);

/// RTT estimator and RTO.
#[derive(Debug, Clone)]
pub struct RttEstimator {
    srtt: Option<Duration>,
    min_rtt: Option<Duration>,
    rttvar: Duration,
    rto: Duration,
    min_rto: Duration,
    max_rto: Duration,
    backoff: u32,
}

impl RttEstimator {
    /// A fresh estimator.
    pub fn new(initial_rto: Duration, min_rto: Duration, max_rto: Duration) -> RttEstimator {
        RttEstimator {
            srtt: None,
            min_rtt: None,
            rttvar: Duration::ZERO,
            rto: initial_rto,
            min_rto,
            max_rto,
            backoff: 0,
        }
    }

    /// Feeds one sample (never from a retransmitted segment).
    pub fn on_sample(&mut self, r: Duration) {
        self.min_rtt = Some(self.min_rtt.map_or(r, |m| m.min(r)));
        match self.srtt {
            None => {
                self.srtt = Some(r);
                self.rttvar = r / 2;
            }
            Some(srtt) => {
                let delta = srtt.abs_diff(r);
                self.rttvar = (self.rttvar * 3 + delta) / 4;
                self.srtt = Some((srtt * 7 + r) / 8);
            }
        }
        let srtt = self.srtt.unwrap_or(r);
        self.rto = (srtt + GRANULARITY.max(self.rttvar * 4)).clamp(self.min_rto, self.max_rto);
        self.backoff = 0;
    }

    /// Smoothed RTT, once sampled.
    pub fn srtt(&self) -> Option<Duration> {
        self.srtt
    }

    /// The smallest sample so far, once sampled.
    pub fn min_rtt(&self) -> Option<Duration> {
        self.min_rtt
    }

    /// Current RTO including backoff.
    pub fn rto(&self) -> Duration {
        let factor = 1u32 << self.backoff.min(16);
        (self.rto * factor).min(self.max_rto)
    }

    /// Doubles the RTO (after a retransmission timeout).
    pub fn back_off(&mut self) {
        self.backoff = self.backoff.saturating_add(1);
    }

    /// Clears the backoff (new data acked).
    pub fn reset_backoff(&mut self) {
        self.backoff = 0;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(v: u64) -> Duration {
        Duration::from_millis(v)
    }

    #[test]
    fn rfc6298_first_and_second_sample() {
        let mut e = RttEstimator::new(ms(1000), ms(10), ms(60_000));
        assert_eq!(e.rto(), ms(1000));
        e.on_sample(ms(100));
        // SRTT 100, RTTVAR 50 → RTO 300
        assert_eq!(e.rto(), ms(300));
        e.on_sample(ms(200));
        // RTTVAR = 3/4*50 + 1/4*100 = 62.5; SRTT = 112.5; RTO = 112.5 + 250 = 362.5
        assert_eq!(e.rto(), Duration::from_micros(362_500));
        assert_eq!(e.min_rtt(), Some(ms(100)));
    }

    #[test]
    fn backoff_doubles_and_is_bounded() {
        let mut e = RttEstimator::new(ms(1000), ms(200), ms(5000));
        e.back_off();
        assert_eq!(e.rto(), ms(2000));
        e.back_off();
        e.back_off();
        assert_eq!(e.rto(), ms(5000));
        e.reset_backoff();
        assert_eq!(e.rto(), ms(1000));
        e.on_sample(ms(1));
        assert_eq!(e.rto(), ms(200), "clamped to min_rto");
    }
}
