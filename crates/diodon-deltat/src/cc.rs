//! Congestion control behind a trait: `NewReno` (RFC 5681 slow start and
//! congestion avoidance; fast recovery is driven by the connection), `Cubic`
//! (RFC 9438, the Linux default), `Bbr` (model-based, after BBR v1: window =
//! gain · bottleneck bandwidth · min RTT, random loss ignored) and `Unlimited`
//! (the thesis implementation).
//!
//! ```text
//!   ack ──▶ on_ack ──┐       loss (dup acks / SACK) ──▶ on_congestion_event ──▶ ssthresh = β·flight
//!                    ▼                          RTO ──▶ on_retransmission_timeout ──▶ cwnd = 1 MSS
//!   cwnd < ssthresh: +acked (slow start)  else avoidance:
//!       NewReno  +MSS per cwnd acked (β = 1/2)
//!       CUBIC    toward W(t) = C·(t − K)³ + W_max, never below the Reno-friendly estimate (β = 0.7)
//! ```

use std::collections::VecDeque;
use std::fmt;
use std::time::Duration;

use diodon_sansio::Timestamp;

/// A congestion controller: the connection reports acks and losses, and never
/// lets more than [`CongestionControl::window`] bytes be in flight.
pub trait CongestionControl: fmt::Debug + Send {
    /// Bytes allowed in flight.
    fn window(&self) -> usize;
    /// `acked` new bytes were cumulatively acknowledged (outside recovery);
    /// `srtt` is the smoothed round-trip time once there is a sample.
    fn on_ack(&mut self, now: Timestamp, acked: usize, srtt: Option<Duration>);
    /// Loss detected by duplicate acks; entering fast recovery.
    fn on_congestion_event(&mut self, now: Timestamp, bytes_in_flight: usize);
    /// Fast recovery finished (the recovery point was acked).
    fn on_recovery_end(&mut self, now: Timestamp);
    /// The retransmission timer expired.
    fn on_retransmission_timeout(&mut self, now: Timestamp, bytes_in_flight: usize);
    /// An ack delivered new data (cumulatively or by SACK), in or out of
    /// recovery. Model-based controllers grow their window here.
    fn on_delivered(&mut self, _now: Timestamp, _sample: &DeliverySample) {}
}

/// What one ack delivered: a delivery-rate sample (after
/// draft-cheng-iccrg-delivery-rate-estimation) for model-based controllers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DeliverySample {
    /// Octets this ack newly delivered (acked or `SACKed`).
    pub newly_delivered: usize,
    /// Octets delivered between the sending of the most recently sent
    /// segment this ack covers and now ...
    pub delivered: u64,
    /// ... over this interval (the rate is `delivered / interval`).
    pub interval: Duration,
    /// Round trip of that segment, unless it was retransmitted (ambiguous).
    pub rtt: Option<Duration>,
    /// Total octets delivered when that segment was sent (round counting).
    pub prior_delivered: u64,
    /// Total octets delivered on this connection, this ack included.
    pub total_delivered: u64,
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

    fn on_ack(&mut self, _now: Timestamp, acked: usize, _srtt: Option<Duration>) {
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

/// RFC 9438 CUBIC: window growth as a cubic function of the time since the
/// last congestion event, independent of the RTT, with a Reno-friendly floor
/// and fast convergence. Slow start is RFC 5681's (no `HyStart`).
#[derive(Debug, Clone)]
pub struct Cubic {
    mss: usize,
    cwnd: usize,
    ssthresh: usize,
    /// Window (segments) just before the last reduction.
    w_max: f64,
    /// Previous `w_max`, for fast convergence.
    w_last_max: f64,
    /// Start of the current avoidance epoch and its `K` (seconds).
    epoch: Option<(Timestamp, f64)>,
    /// Reno-friendly estimate (segments).
    w_est: f64,
}

/// CUBIC's scaling constant C (segments / s³).
const CUBIC_C: f64 = 0.4;
/// CUBIC's multiplicative decrease factor β.
const CUBIC_BETA: f64 = 0.7;

impl Cubic {
    /// Initial window of `initial_segments` segments of `mss` bytes.
    pub fn new(mss: usize, initial_segments: usize) -> Cubic {
        Cubic {
            mss,
            cwnd: mss * initial_segments.max(1),
            ssthresh: usize::MAX,
            w_max: 0.0,
            w_last_max: 0.0,
            epoch: None,
            w_est: 0.0,
        }
    }

    fn segments(&self, bytes: usize) -> f64 {
        bytes as f64 / self.mss as f64
    }

    fn reduce(&mut self, bytes_in_flight: usize) {
        let cwnd_seg = self.segments(self.cwnd);
        // Fast convergence: release bandwidth to newer flows.
        self.w_max = if cwnd_seg < self.w_last_max {
            cwnd_seg * (1.0 + CUBIC_BETA) / 2.0
        } else {
            cwnd_seg
        };
        self.w_last_max = cwnd_seg;
        let base = bytes_in_flight.max(self.mss);
        self.ssthresh = ((base as f64 * CUBIC_BETA) as usize).max(2 * self.mss);
        self.epoch = None;
    }
}

impl CongestionControl for Cubic {
    fn window(&self) -> usize {
        self.cwnd
    }

    fn on_ack(&mut self, now: Timestamp, acked: usize, srtt: Option<Duration>) {
        if self.cwnd < self.ssthresh {
            self.cwnd += acked.min(self.mss);
            return;
        }
        let cwnd_seg = self.segments(self.cwnd);
        let (start, k) = *self.epoch.get_or_insert_with(|| {
            let k = if self.w_max > cwnd_seg {
                ((self.w_max - cwnd_seg) / CUBIC_C).cbrt()
            } else {
                0.0
            };
            (now, k)
        });
        if self.w_max < cwnd_seg {
            self.w_max = cwnd_seg;
        }
        if self.w_est < 1.0 {
            self.w_est = cwnd_seg;
        }
        let rtt = srtt.unwrap_or(Duration::from_millis(100)).as_secs_f64();
        let t = now.saturating_duration_since(start).as_secs_f64() + rtt;
        let target = (CUBIC_C * (t - k).powi(3) + self.w_max).clamp(cwnd_seg, 1.5 * cwnd_seg);
        let acked_seg = self.segments(acked);
        let alpha = 3.0 * (1.0 - CUBIC_BETA) / (1.0 + CUBIC_BETA);
        self.w_est += alpha * acked_seg / cwnd_seg;
        let grow_seg = if target < self.w_est {
            self.w_est - cwnd_seg
        } else {
            (target - cwnd_seg) / cwnd_seg * acked_seg
        };
        self.cwnd += (grow_seg.max(0.0) * self.mss as f64) as usize;
    }

    fn on_congestion_event(&mut self, _now: Timestamp, bytes_in_flight: usize) {
        self.reduce(bytes_in_flight);
        self.cwnd = self.ssthresh;
        self.w_est = self.segments(self.cwnd);
    }

    fn on_recovery_end(&mut self, _now: Timestamp) {
        self.cwnd = self.ssthresh.max(self.mss);
    }

    fn on_retransmission_timeout(&mut self, _now: Timestamp, bytes_in_flight: usize) {
        self.reduce(bytes_in_flight);
        self.cwnd = self.mss;
        self.w_est = 0.0;
    }
}

/// BBR's `ProbeRTT` interval: the min-RTT estimate expires after this.
const BBR_MIN_RTT_WINDOW: Duration = Duration::from_secs(10);
/// Rounds the bottleneck-bandwidth max filter spans.
const BBR_BW_ROUNDS: u64 = 10;
/// Window gain while the pipe is being filled (2/ln 2, as BBR's startup).
const BBR_STARTUP_GAIN: f64 = 2.885;
/// Window gain once the pipe is full.
const BBR_CWND_GAIN: f64 = 2.0;

/// Model-based congestion control after BBR v1 (Cardwell et al. 2016), for
/// the window only (the driver does not pace): the window is
/// `gain · max delivery rate (last 10 rounds) · min RTT (last 10 s)`, grown by
/// what each ack delivers. Loss does not shrink it, so random loss on the link
/// (the thesis's scenarios) costs only the retransmissions; a retransmission
/// timeout drops it to one segment, and it regrows at once from the model.
/// `ProbeRTT` (4 segments for 200 ms) refreshes an expired min-RTT estimate.
#[derive(Debug, Clone)]
pub struct Bbr {
    mss: usize,
    cwnd: usize,
    initial: usize,
    /// Per-round maxima of the delivery rate (octets/s), newest last.
    bw: VecDeque<(u64, f64)>,
    round: u64,
    next_round_delivered: u64,
    min_rtt: Option<Duration>,
    min_rtt_stamp: Timestamp,
    full_bw: f64,
    full_bw_rounds: u32,
    filled_pipe: bool,
    /// `ProbeRTT` until this time, then back to this window.
    probe_rtt: Option<(Timestamp, usize)>,
}

impl Bbr {
    /// Initial window of `initial_segments` segments of `mss` bytes.
    pub fn new(mss: usize, initial_segments: usize) -> Bbr {
        let initial = mss * initial_segments.max(1);
        Bbr {
            mss,
            cwnd: initial,
            initial,
            bw: VecDeque::new(),
            round: 0,
            next_round_delivered: 0,
            min_rtt: None,
            min_rtt_stamp: Timestamp::ZERO,
            full_bw: 0.0,
            full_bw_rounds: 0,
            filled_pipe: false,
            probe_rtt: None,
        }
    }

    /// Bottleneck bandwidth estimate, octets per second.
    pub fn bandwidth(&self) -> f64 {
        self.bw.iter().map(|&(_, b)| b).fold(0.0, f64::max)
    }

    /// Whether startup is over (the bandwidth stopped growing for 3 rounds).
    pub fn filled_pipe(&self) -> bool {
        self.filled_pipe
    }

    fn update_bw(&mut self, rate: f64) {
        match self.bw.back_mut() {
            Some((r, b)) if *r == self.round => *b = b.max(rate),
            _ => self.bw.push_back((self.round, rate)),
        }
        while self
            .bw
            .front()
            .is_some_and(|&(r, _)| r + BBR_BW_ROUNDS <= self.round)
        {
            self.bw.pop_front();
        }
    }
}

impl CongestionControl for Bbr {
    fn window(&self) -> usize {
        self.cwnd
    }

    fn on_ack(&mut self, _now: Timestamp, _acked: usize, _srtt: Option<Duration>) {}

    fn on_congestion_event(&mut self, _now: Timestamp, _bytes_in_flight: usize) {}

    fn on_recovery_end(&mut self, _now: Timestamp) {}

    fn on_retransmission_timeout(&mut self, _now: Timestamp, _bytes_in_flight: usize) {
        self.cwnd = self.mss;
    }

    fn on_delivered(&mut self, now: Timestamp, s: &DeliverySample) {
        let round_start = s.prior_delivered >= self.next_round_delivered;
        if round_start {
            self.next_round_delivered = s.total_delivered;
            self.round += 1;
        }
        if !s.interval.is_zero() {
            self.update_bw(s.delivered as f64 / s.interval.as_secs_f64());
        }
        let expired = now.saturating_duration_since(self.min_rtt_stamp) > BBR_MIN_RTT_WINDOW;
        if let Some(rtt) = s.rtt {
            if self.min_rtt.is_none_or(|m| rtt <= m) || (expired && self.probe_rtt.is_none()) {
                self.min_rtt = Some(rtt);
                self.min_rtt_stamp = now;
            }
        }
        let bw = self.bandwidth();
        if !self.filled_pipe && round_start {
            if bw >= self.full_bw * 1.25 {
                self.full_bw = bw;
                self.full_bw_rounds = 0;
            } else {
                self.full_bw_rounds += 1;
                self.filled_pipe = self.full_bw_rounds >= 3;
            }
        }
        let floor = 4 * self.mss;
        match self.probe_rtt {
            Some((until, prior)) if now >= until => {
                self.probe_rtt = None;
                self.min_rtt_stamp = now;
                self.cwnd = self.cwnd.max(prior);
            }
            Some(_) => {
                self.cwnd = floor;
                return;
            }
            None if expired && self.min_rtt.is_some() => {
                let hold = self
                    .min_rtt
                    .unwrap_or_default()
                    .max(Duration::from_millis(200));
                self.probe_rtt = Some((now + hold, self.cwnd));
                self.cwnd = floor;
                return;
            }
            None => {}
        }
        let bdp = bw * self.min_rtt.unwrap_or_default().as_secs_f64();
        let gain = if self.filled_pipe {
            BBR_CWND_GAIN
        } else {
            BBR_STARTUP_GAIN
        };
        let target = (gain * bdp) as usize + 3 * self.mss;
        if self.filled_pipe {
            self.cwnd = (self.cwnd + s.newly_delivered).min(target);
        } else if self.cwnd < target || s.total_delivered < self.initial as u64 {
            self.cwnd += s.newly_delivered;
        }
        self.cwnd = self.cwnd.max(floor);
    }
}

/// No congestion control: an unbounded window.
#[derive(Debug, Clone, Default)]
pub struct Unlimited;

impl CongestionControl for Unlimited {
    fn window(&self) -> usize {
        usize::MAX
    }
    fn on_ack(&mut self, _now: Timestamp, _acked: usize, _srtt: Option<Duration>) {}
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
            cc.on_ack(t, 1000, None);
        }
        assert_eq!(cc.window(), 8000, "slow start doubles per RTT");
        cc.on_congestion_event(t, 8000);
        assert_eq!(cc.window(), 4000);
        cc.on_ack(t, 1000, None);
        cc.on_ack(t, 1000, None);
        cc.on_ack(t, 1000, None);
        assert_eq!(cc.window(), 4000, "avoidance grows by one MSS per window");
        cc.on_ack(t, 1000, None);
        assert_eq!(cc.window(), 5000);
        cc.on_retransmission_timeout(t, 5000);
        assert_eq!(cc.window(), 1000);
    }

    /// Acks a full window per RTT for `rtts` round trips; returns cwnd (segments).
    fn run_cubic(cc: &mut Cubic, start: Timestamp, rtt: Duration, rtts: u32) -> usize {
        let mut now = start;
        for _ in 0..rtts {
            let segs = cc.window() / 1000;
            for _ in 0..segs {
                cc.on_ack(now, 1000, Some(rtt));
            }
            now += rtt;
        }
        cc.window() / 1000
    }

    #[test]
    fn cubic_reduces_by_beta_and_regrows_to_w_max_around_k() {
        let t0 = Timestamp::ZERO;
        let rtt = Duration::from_millis(100);
        let mut cc = Cubic::new(1000, 10);
        for _ in 0..90 {
            cc.on_ack(t0, 1000, Some(rtt));
        }
        assert_eq!(cc.window(), 100_000, "slow start");
        cc.on_congestion_event(t0, 100_000);
        assert_eq!(cc.window(), 70_000, "β = 0.7");
        cc.on_recovery_end(t0);
        // K = cbrt(100·0.3/0.4) ≈ 4.2 s: concave growth back to W_max = 100.
        let at_2s = run_cubic(&mut cc, t0, rtt, 20);
        assert!((85..100).contains(&at_2s), "concave phase: {at_2s}");
        let at_5s = run_cubic(&mut cc, t0 + Duration::from_secs(2), rtt, 30);
        assert!((99..=115).contains(&at_5s), "plateau near W_max: {at_5s}");
        let at_9s = run_cubic(&mut cc, t0 + Duration::from_secs(5), rtt, 40);
        assert!(at_9s > 140, "convex probing beyond W_max: {at_9s}");
    }

    #[test]
    fn cubic_fast_convergence_and_rto() {
        let t0 = Timestamp::ZERO;
        let mut cc = Cubic::new(1000, 100);
        cc.on_congestion_event(t0, 100_000);
        assert!((cc.w_max - 100.0).abs() < 1e-9);
        cc.on_congestion_event(t0, 70_000);
        // Second loss below the previous maximum: W_max = 70·(1+β)/2 = 59.5.
        assert!((cc.w_max - 59.5).abs() < 1e-9, "{}", cc.w_max);
        cc.on_retransmission_timeout(t0, 49_000);
        assert_eq!(cc.window(), 1000);
    }

    /// Feeds `rounds` round trips over a path of `rate` octets/s and `rtt`,
    /// each delivering what the window allowed (capped by the path).
    fn run_bbr(cc: &mut Bbr, rate: f64, rtt: Duration, rounds: u32, loss_every: usize) -> usize {
        let mut now = Timestamp::ZERO + Duration::from_secs(1);
        let mut total = 0u64;
        for _ in 0..rounds {
            let deliverable = (rate * rtt.as_secs_f64()) as usize;
            let sent = cc.window().min(deliverable * 3);
            let delivered = sent.min(deliverable);
            let prior = total;
            let segments = delivered / 1000;
            for i in 0..segments {
                if loss_every > 0 && i % loss_every == 0 {
                    continue;
                }
                total += 1000;
                cc.on_delivered(
                    now,
                    &DeliverySample {
                        newly_delivered: 1000,
                        delivered: total - prior,
                        interval: rtt,
                        rtt: Some(rtt),
                        prior_delivered: prior,
                        total_delivered: total,
                    },
                );
            }
            now += rtt;
        }
        cc.window()
    }

    #[test]
    fn bbr_window_settles_near_two_bdp_and_ignores_random_loss() {
        let rtt = Duration::from_millis(50);
        let rate = 10_000_000.0; // 80 Mbit/s: BDP 500 000 octets
        let mut cc = Bbr::new(1000, 10);
        let w = run_bbr(&mut cc, rate, rtt, 30, 0);
        assert!(cc.filled_pipe(), "startup ended");
        assert!((900_000..=1_100_000).contains(&w), "cwnd {w}");
        let mut lossy = Bbr::new(1000, 10);
        // 5 % of the segments lost every round: the window still follows the model.
        let w = run_bbr(&mut lossy, rate, rtt, 30, 20);
        assert!((800_000..=1_100_000).contains(&w), "cwnd with loss {w}");
        lossy.on_congestion_event(Timestamp::ZERO, w);
        assert_eq!(lossy.window(), w, "loss does not shrink the window");
        lossy.on_retransmission_timeout(Timestamp::ZERO, w);
        assert_eq!(lossy.window(), 1000);
    }
}
