//! Congestion control behind a trait, with `NewReno` (RFC 5681 slow start and
//! congestion avoidance, RFC 6582 fast recovery driven by the connection).
//!
//! ```text
//!   ack ──▶ on_ack ──┐            3 dup acks ──▶ on_congestion_event ──▶ ssthresh = flight/2
//!                    ▼                          RTO ──▶ on_retransmission_timeout ──▶ cwnd = 1 MSS
//!   cwnd < ssthresh: +acked (slow start)  else +MSS·MSS/cwnd (avoidance)
//! ```

use std::fmt;

use diodon_proto::Timestamp;

/// A congestion controller: the connection reports acks and losses, and never
/// lets more than [`CongestionControl::window`] bytes be in flight.
pub trait CongestionControl: fmt::Debug + Send {
    /// Bytes allowed in flight.
    fn window(&self) -> usize;
    /// `acked` new bytes were cumulatively acknowledged (outside recovery).
    fn on_ack(&mut self, now: Timestamp, acked: usize);
    /// Loss detected by duplicate acks; entering fast recovery.
    fn on_congestion_event(&mut self, now: Timestamp, bytes_in_flight: usize);
    /// Fast recovery finished (the recovery point was acked).
    fn on_recovery_end(&mut self, now: Timestamp);
    /// The retransmission timer expired.
    fn on_retransmission_timeout(&mut self, now: Timestamp, bytes_in_flight: usize);
}

/// `NewReno`.
#[derive(Debug, Clone)]
pub struct NewReno {
    mss: usize,
    cwnd: usize,
    ssthresh: usize,
    acked_in_avoidance: usize,
}

impl NewReno {
    /// Initial window of `initial_segments` segments of `mss` bytes.
    pub fn new(mss: usize, initial_segments: usize) -> NewReno {
        NewReno {
            mss,
            cwnd: mss * initial_segments.max(1),
            ssthresh: usize::MAX,
            acked_in_avoidance: 0,
        }
    }
}

impl CongestionControl for NewReno {
    fn window(&self) -> usize {
        self.cwnd
    }

    fn on_ack(&mut self, _now: Timestamp, acked: usize) {
        if self.cwnd < self.ssthresh {
            self.cwnd += acked.min(self.mss);
        } else {
            self.acked_in_avoidance += acked;
            if self.acked_in_avoidance >= self.cwnd {
                self.acked_in_avoidance -= self.cwnd;
                self.cwnd += self.mss;
            }
        }
    }

    fn on_congestion_event(&mut self, _now: Timestamp, bytes_in_flight: usize) {
        self.ssthresh = (bytes_in_flight / 2).max(2 * self.mss);
        self.cwnd = self.ssthresh;
        self.acked_in_avoidance = 0;
    }

    fn on_recovery_end(&mut self, _now: Timestamp) {
        self.cwnd = self.ssthresh.max(self.mss);
    }

    fn on_retransmission_timeout(&mut self, _now: Timestamp, bytes_in_flight: usize) {
        self.ssthresh = (bytes_in_flight / 2).max(2 * self.mss);
        self.cwnd = self.mss;
        self.acked_in_avoidance = 0;
    }
}

/// No congestion control: an unbounded window.
#[derive(Debug, Clone, Default)]
pub struct Unlimited;

impl CongestionControl for Unlimited {
    fn window(&self) -> usize {
        usize::MAX
    }
    fn on_ack(&mut self, _now: Timestamp, _acked: usize) {}
    fn on_congestion_event(&mut self, _now: Timestamp, _bytes_in_flight: usize) {}
    fn on_recovery_end(&mut self, _now: Timestamp) {}
    fn on_retransmission_timeout(&mut self, _now: Timestamp, _bytes_in_flight: usize) {}
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slow_start_then_halving_then_rto() {
        let t = Timestamp::ZERO;
        let mut cc = NewReno::new(1000, 4);
        assert_eq!(cc.window(), 4000);
        for _ in 0..4 {
            cc.on_ack(t, 1000);
        }
        assert_eq!(cc.window(), 8000, "slow start doubles per RTT");
        cc.on_congestion_event(t, 8000);
        assert_eq!(cc.window(), 4000);
        cc.on_ack(t, 1000);
        cc.on_ack(t, 1000);
        cc.on_ack(t, 1000);
        assert_eq!(cc.window(), 4000, "avoidance grows by one MSS per window");
        cc.on_ack(t, 1000);
        assert_eq!(cc.window(), 5000);
        cc.on_retransmission_timeout(t, 5000);
        assert_eq!(cc.window(), 1000);
    }
}
