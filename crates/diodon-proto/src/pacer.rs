//! A pure token bucket: how many bytes may leave now, and when the next
//! datagram of a given size is due. The sender asks it before every datagram;
//! the driver sleeps until [`Pacer::next_send_time`].
//!
//! Tokens are bytes on the wire (UDP payload plus the IP/UDP header overhead
//! the caller adds), refilled at `rate / 8` bytes per second. The bucket
//! has two sizes. While the sender is *idle* (nothing to send) it holds at
//! most `burst` bytes (one batch), so an idle period never turns into a
//! line-rate spike larger than that. While the sender is *backlogged*
//! (datagrams wait for tokens) it holds up to `slack` bytes: a driver that
//! wakes late, or a core thread that waited for a CPU, sends what came in
//! meanwhile at once, and the rate over any second stays the configured one.
//! What a late wake-up costs beyond that is counted: tokens that overflow
//! the backlogged bucket are rate the link could have carried and did not
//! ([`Pacer::credit_lost_bytes`]).

use crate::types::Rate;
use diodon_sansio::Timestamp;
use std::time::Duration;

/// Token bucket state.
#[derive(Debug, Clone)]
pub struct Pacer {
    rate: Rate,
    burst: u64,
    slack: u64,
    backlogged: bool,
    /// Tokens in nano-bytes (bytes × 1e9) for exact integer arithmetic.
    tokens_nb: u128,
    /// Tokens that overflowed the bucket while backlogged, in nano-bytes.
    lost_nb: u128,
    last: Timestamp,
}

const NANO: u128 = 1_000_000_000;

impl Pacer {
    /// A bucket for `rate` holding at most `burst` bytes while idle and
    /// `slack` (at least `burst`) while backlogged; idle and full at `now`.
    pub fn new(rate: Rate, burst: u64, slack: u64, now: Timestamp) -> Self {
        Pacer {
            rate,
            burst,
            slack: slack.max(burst),
            backlogged: false,
            tokens_nb: u128::from(burst) * NANO,
            lost_nb: 0,
            last: now,
        }
    }

    /// Tells the bucket whether datagrams wait for tokens (`true`) or
    /// nothing is left to send (`false`), from `now` on; what came in
    /// before `now` is counted with the state it came in under.
    pub fn set_backlogged(&mut self, now: Timestamp, backlogged: bool) {
        self.refill(now);
        self.backlogged = backlogged;
    }

    /// The configured rate.
    pub fn rate(&self) -> Rate {
        self.rate
    }

    fn refill(&mut self, now: Timestamp) {
        if now <= self.last {
            return;
        }
        let elapsed_ns = u128::from(now.as_nanos() - self.last.as_nanos());
        // bytes/s = bps / 8; nano-bytes gained = elapsed_ns × bps / 8.
        let gained = elapsed_ns * u128::from(self.rate.bps()) / 8;
        let cap = if self.backlogged {
            self.slack
        } else {
            self.burst
        };
        let filled = self.tokens_nb + gained;
        let cap_nb = u128::from(cap) * NANO;
        if filled > cap_nb && self.backlogged {
            self.lost_nb += filled - cap_nb;
        }
        self.tokens_nb = filled.min(cap_nb);
        self.last = now;
    }

    /// Bytes of rate lost since the start: tokens that came in while
    /// datagrams waited and overflowed the backlogged bucket, because the
    /// sender came back later than the bucket covers. Credit an idle
    /// sender does not use is not counted: nothing was waiting for it.
    pub fn credit_lost_bytes(&self) -> u64 {
        u64::try_from(self.lost_nb / NANO).unwrap_or(u64::MAX)
    }

    /// Whether `bytes` may be sent at `now`.
    pub fn can_send(&mut self, now: Timestamp, bytes: usize) -> bool {
        if self.rate.is_unlimited() {
            return true;
        }
        self.refill(now);
        self.tokens_nb >= bytes as u128 * NANO
    }

    /// Takes `bytes` tokens (call after `can_send` said yes).
    pub fn consume(&mut self, now: Timestamp, bytes: usize) {
        if self.rate.is_unlimited() {
            return;
        }
        self.refill(now);
        self.tokens_nb = self.tokens_nb.saturating_sub(bytes as u128 * NANO);
    }

    /// The earliest time `bytes` may be sent (`now` if already allowed).
    pub fn next_send_time(&mut self, now: Timestamp, bytes: usize) -> Timestamp {
        if self.can_send(now, bytes) {
            return now;
        }
        let missing_nb = bytes as u128 * NANO - self.tokens_nb;
        // missing bytes × 8 / bps seconds = missing_nb × 8 / bps nanoseconds.
        let ns = (missing_nb * 8).div_ceil(u128::from(self.rate.bps()));
        now + Duration::from_nanos(u64::try_from(ns).unwrap_or(u64::MAX))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rate_is_exact_over_a_second() {
        // 1 Gbit/s, 1500-byte datagrams: 83 333 datagrams per second.
        let mut p = Pacer::new(
            Rate::bits_per_sec(1_000_000_000),
            1500,
            1500,
            Timestamp::ZERO,
        );
        let mut now = Timestamp::ZERO;
        let mut sent = 0u64;
        while now < Timestamp::from_millis(1000) {
            if p.can_send(now, 1500) {
                p.consume(now, 1500);
                sent += 1;
            } else {
                now = p.next_send_time(now, 1500);
            }
        }
        let bits = sent * 1500 * 8;
        assert!(
            (999_000_000..=1_001_000_000).contains(&bits),
            "sent {bits} bits"
        );
    }

    #[test]
    fn burst_caps_idle_credit() {
        let mut p = Pacer::new(Rate::bits_per_sec(8_000), 3000, 3000, Timestamp::ZERO);
        p.consume(Timestamp::ZERO, 3000);
        // After an hour idle, only `burst` bytes are available.
        let later = Timestamp::from_millis(3_600_000);
        assert!(p.can_send(later, 3000));
        p.consume(later, 3000);
        assert!(!p.can_send(later, 1));
        // 1000 bytes/s: 1 byte needs 1 ms.
        let t = p.next_send_time(later, 1);
        assert!(
            t > later && t <= later + Duration::from_micros(1001),
            "{t:?}"
        );
    }

    #[test]
    fn only_a_backlog_keeps_more_than_the_idle_burst() {
        // 8 kbit/s: 1000 bytes per second. Idle cap 100, backlogged cap 400.
        let mut p = Pacer::new(Rate::bits_per_sec(8_000), 100, 400, Timestamp::ZERO);
        p.consume(Timestamp::ZERO, 100);
        // Idle for a second: only the idle burst is kept.
        let t1 = Timestamp::from_millis(1000);
        assert!(p.can_send(t1, 100) && !p.can_send(t1, 101));
        p.consume(t1, 100);
        // Backlogged, and the driver wakes 300 ms late: all of it is kept.
        p.set_backlogged(t1, true);
        let t2 = Timestamp::from_millis(1300);
        assert!(p.can_send(t2, 300) && !p.can_send(t2, 301));
        // A second late: capped at the slack.
        let t3 = Timestamp::from_millis(2300);
        assert!(p.can_send(t3, 400) && !p.can_send(t3, 401));
        // Idle again: what came in while backlogged stays, nothing more.
        p.set_backlogged(t3, false);
        let t4 = Timestamp::from_millis(5000);
        assert!(p.can_send(t4, 100) && !p.can_send(t4, 101));
        // Only the backlogged second past the slack was lost: 1000 bytes
        // came in from t2 to t3 onto 300 kept, 400 fit (the idle hours
        // before t1 and after t3 were not waited for).
        assert_eq!(p.credit_lost_bytes(), 900);
    }

    #[test]
    fn unlimited_never_waits() {
        let mut p = Pacer::new(Rate::UNLIMITED, 0, 0, Timestamp::ZERO);
        assert!(p.can_send(Timestamp::ZERO, 65_000));
        assert_eq!(p.next_send_time(Timestamp::ZERO, 65_000), Timestamp::ZERO);
    }
}
