//! Loss detection by time, after RACK (RFC 8985, without the tail loss
//! probe), for one send half: owns what the sender knows about the order in
//! which its segments were delivered — the delivered segment sent last, how
//! late reordered segments arrived, whether loss marks proved spurious — and
//! the reordering window derived from it. The connection keeps the
//! scoreboard and, per hole, when it learnt that the hole was passed; this
//! module says whether a hole was passed and how long to wait before it is
//! lost.
//!
//! ```text
//!   ack / SACK delivers s ──▶ on_delivered(s) ─┬─▶ latest: the delivered segment sent last
//!                                              ├─▶ s was passed at p and arrives now: it came
//!                                              │     late by now − p (reordering, not loss)
//!                                              └─▶ s marked lost yet delivered before resent, or
//!                                                  resent and acked sooner than the min RTT:
//!                                                  the mark was spurious ─▶ mult + 1
//!
//!   hole h (in flight, not delivered) is passed once latest was sent after h;
//!   the sender notes when it first learns that (p), and h is lost at p + reo_wnd
//!   reo_wnd = max(1 ms, min(srtt, max(srtt/4 · mult, 5/4 · late)))
//! ```
//!
//! Two departures from RFC 8985. The wait runs from when the sender learnt
//! that the hole was passed, not from the hole's send time plus the latest
//! round trip: a driver stamps a whole batch with the time it polled it, and
//! a batch held behind a full device queue leaves long after its stamp, so
//! send times are only good for ordering. And the window is never zero
//! (RFC 8985 drops it to zero while no reordering has been seen and
//! `DupThresh` segments are SACKed): loopback and multi-queue paths reorder
//! now and then without losing anything. Without DSACK, a spurious mark is
//! noticed when a segment marked lost is delivered before it was resent, or
//! when a retransmission is acked sooner than the minimum round trip after it
//! was sent (the original was acked).

use std::time::Duration;

use diodon_sansio::Timestamp;

use crate::seq::Seq;

/// Smallest reordering window (RFC 9002's timer granularity).
pub const MIN_REORDER_WINDOW: Duration = Duration::from_millis(1);
/// Recoveries without a spurious mark after which the window shrinks back.
const PERSIST_RECOVERIES: u32 = 16;

/// A transmission: when it was polled and the SN after its last octet.
/// Later means polled later, or at the same time with a higher end (RFC
/// 8985's `RACK_sent_after`; a batch's segments share one time).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Transmission {
    /// When it was (last) sent.
    pub xmit: Timestamp,
    /// SN after its last octet.
    pub end: Seq,
}

impl Transmission {
    /// Whether `self` was sent after `other`.
    pub fn sent_after(self, other: Transmission) -> bool {
        self.xmit > other.xmit || (self.xmit == other.xmit && other.end.before(self.end))
    }
}

/// A segment an ack newly delivered (cumulatively or by SACK).
#[derive(Debug, Clone, Copy)]
pub struct Delivered {
    /// Its last transmission.
    pub tx: Transmission,
    /// It was sent more than once (or was in flight at an RTO).
    pub retransmitted: bool,
    /// It was marked lost and not retransmitted since.
    pub marked_lost: bool,
    /// When the sender learnt that a segment sent after it was delivered.
    pub passed: Option<Timestamp>,
}

/// RACK's state for one send half.
#[derive(Debug, Clone)]
pub struct Rack {
    /// The delivered segment sent last, and its round trip (the window's
    /// base before the first RTT sample).
    latest: Option<(Transmission, Duration)>,
    /// Largest delay observed between a hole being passed and its arrival.
    late: Duration,
    /// Multiplier of the base window, raised by spurious marks.
    mult: u32,
    /// Recoveries left before `mult` and `late` are forgotten.
    persist: u32,
    /// No second raise before data sent after the last one is delivered.
    raised_until: Option<Seq>,
    /// Spurious loss marks noticed.
    spurious: u64,
}

impl Default for Rack {
    fn default() -> Self {
        Rack::new()
    }
}

impl Rack {
    /// Nothing delivered yet.
    pub fn new() -> Rack {
        Rack {
            latest: None,
            late: Duration::ZERO,
            mult: 1,
            persist: 0,
            raised_until: None,
            spurious: 0,
        }
    }

    /// The flight was forgotten (overrun, rendezvous, R7): SNs start over,
    /// the delivery order restarts; what was learnt about reordering stays.
    pub fn reset(&mut self) {
        self.latest = None;
        self.raised_until = None;
    }

    /// Spurious loss marks noticed so far.
    pub fn spurious_marks(&self) -> u64 {
        self.spurious
    }

    /// Records that the ack being processed at `now` delivered `d`;
    /// `min_rtt` is the path's smallest round trip, `nxt` the next SN to send.
    pub fn on_delivered(
        &mut self,
        now: Timestamp,
        d: Delivered,
        min_rtt: Option<Duration>,
        nxt: Seq,
    ) {
        let rtt = now.saturating_duration_since(d.tx.xmit);
        // A retransmission acked sooner than any round trip: the original
        // arrived, the loss mark was wrong, and the sample is ambiguous.
        let early = d.retransmitted && min_rtt.is_some_and(|m| rtt < m);
        if early || d.marked_lost {
            self.on_spurious(d.tx.end, nxt);
        }
        if let (Some(p), false) = (d.passed, d.retransmitted) {
            self.late = self.late.max(now.saturating_duration_since(p));
        }
        if early {
            return;
        }
        if self.latest.is_none_or(|(t, _)| d.tx.sent_after(t)) {
            self.latest = Some((d.tx, rtt));
        }
    }

    fn on_spurious(&mut self, end: Seq, nxt: Seq) {
        self.spurious += 1;
        if self.raised_until.is_some_and(|r| end.before(r)) {
            return;
        }
        self.raised_until = Some(nxt);
        self.mult = self.mult.saturating_add(1);
        self.persist = PERSIST_RECOVERIES;
    }

    /// A recovery episode started: after [`PERSIST_RECOVERIES`] of them
    /// without a spurious mark, the window returns to its base.
    pub fn on_recovery(&mut self) {
        if self.persist > 0 {
            self.persist -= 1;
            if self.persist == 0 {
                self.mult = 1;
                self.late = Duration::ZERO;
            }
        }
    }

    /// The reordering window for a smoothed RTT of `srtt` (the latest
    /// delivery's round trip before the first sample).
    pub fn reorder_window(&self, srtt: Option<Duration>) -> Duration {
        let Some(srtt) = srtt.or(self.latest.map(|(_, r)| r)) else {
            return MIN_REORDER_WINDOW;
        };
        let learnt = self.late + self.late / 4;
        (srtt / 4 * self.mult)
            .max(learnt)
            .min(srtt)
            .max(MIN_REORDER_WINDOW)
    }

    /// Whether a segment sent after `tx` was delivered.
    pub fn passed(&self, tx: Transmission) -> bool {
        self.latest.is_some_and(|(t, _)| t.sent_after(tx))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(v: u64) -> Duration {
        Duration::from_millis(v)
    }

    fn at(v: u64) -> Timestamp {
        Timestamp::from_millis(v)
    }

    fn tx(xmit: u64, end: u32) -> Transmission {
        Transmission {
            xmit: at(xmit),
            end: Seq(end),
        }
    }

    fn delivered(xmit: u64, end: u32) -> Delivered {
        Delivered {
            tx: tx(xmit, end),
            retransmitted: false,
            marked_lost: false,
            passed: None,
        }
    }

    #[test]
    fn a_hole_is_passed_by_a_segment_sent_after_it() {
        let mut r = Rack::new();
        assert!(!r.passed(tx(0, 1000)), "nothing delivered");
        r.on_delivered(at(40), delivered(0, 2000), None, Seq(5000));
        // Polled at the same time, lower end: sent before the delivered one.
        assert!(r.passed(tx(0, 1000)));
        assert!(!r.passed(tx(0, 2000)), "itself");
        assert!(!r.passed(tx(0, 3000)), "same time, higher end");
        assert!(!r.passed(tx(1, 1500)), "resent after it");
    }

    #[test]
    fn observed_lateness_widens_the_window_up_to_srtt() {
        let mut r = Rack::new();
        let srtt = Some(ms(40));
        assert_eq!(r.reorder_window(srtt), ms(10), "srtt / 4");
        r.on_delivered(at(40), delivered(0, 2000), None, Seq(9000));
        // 0:1000 was passed at 40 and arrives at 54.
        let late = Delivered {
            passed: Some(at(40)),
            ..delivered(0, 1000)
        };
        r.on_delivered(at(54), late, None, Seq(9000));
        assert_eq!(r.reorder_window(srtt), Duration::from_micros(17_500));
        let later = Delivered {
            passed: Some(at(100)),
            ..delivered(60, 3000)
        };
        r.on_delivered(at(200), later, None, Seq(9000));
        assert_eq!(r.reorder_window(srtt), ms(40), "never beyond srtt");
        assert_eq!(r.spurious_marks(), 0);
    }

    #[test]
    fn spurious_marks_raise_the_window_once_per_round_trip_until_forgotten() {
        let mut r = Rack::new();
        let srtt = Some(ms(40));
        r.on_delivered(at(40), delivered(0, 2000), Some(ms(40)), Seq(4000));
        let lost_then_delivered = Delivered {
            marked_lost: true,
            ..delivered(0, 1000)
        };
        r.on_delivered(at(41), lost_then_delivered, Some(ms(40)), Seq(4000));
        assert_eq!(r.reorder_window(srtt), ms(20));
        // Same round trip: no second raise.
        r.on_delivered(at(41), lost_then_delivered, Some(ms(40)), Seq(4000));
        assert_eq!(r.reorder_window(srtt), ms(20));
        // A retransmission acked 5 ms after it was sent: the original made it.
        let resent = Delivered {
            retransmitted: true,
            ..delivered(100, 4000)
        };
        r.on_delivered(at(105), resent, Some(ms(40)), Seq(8000));
        assert_eq!(r.reorder_window(srtt), ms(30));
        assert_eq!(r.spurious_marks(), 3);
        assert!(
            !r.passed(tx(50, 1500)),
            "an ambiguous ack does not move latest"
        );
        for _ in 0..PERSIST_RECOVERIES {
            r.on_recovery();
        }
        assert_eq!(r.reorder_window(srtt), ms(10));
    }

    #[test]
    fn the_window_has_a_floor_and_a_base_before_the_first_sample() {
        let mut r = Rack::new();
        assert_eq!(r.reorder_window(None), MIN_REORDER_WINDOW);
        assert_eq!(
            r.reorder_window(Some(Duration::from_micros(100))),
            MIN_REORDER_WINDOW
        );
        r.on_delivered(at(80), delivered(0, 1000), None, Seq(2000));
        assert_eq!(r.reorder_window(None), ms(20), "latest rtt / 4");
    }
}
