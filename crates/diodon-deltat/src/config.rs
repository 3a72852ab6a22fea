//! Endpoint configuration and the two clocks the core is given: the monotonic
//! [`Timestamp`] passed to every call, and a [`WallClock`] mapping from that
//! timestamp to milliseconds since midnight UTC (the deadline field).
//!
//! ```text
//!   Δt = MPL + R + A   (rounded up to whole seconds, 1..=255: the lifetime field)
//!   Rtimer = 2·Δt      Stimer = 3·Δt
//!   restart: no new SN sent for 3·Δt, nothing accepted for Δt
//! ```

use std::time::Duration;

use diodon_sansio::Timestamp;

use crate::wire::{Deadline, Lifetime, HEADER_LEN, MAX_SCALED_WINDOW, MAX_SEGMENT_LEN};

/// Which congestion controller a connection uses.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum CongestionAlgorithm {
    /// RFC 5681 / RFC 6582 `NewReno`.
    #[default]
    NewReno,
    /// RFC 9438 CUBIC (the Linux default).
    Cubic,
    /// Model-based, after BBR v1: loss does not shrink the window.
    Bbr,
    /// No congestion control (the thesis implementation): only the peer's
    /// window limits the sender.
    Unlimited,
}

/// Tunables of an [`crate::Endpoint`].
#[derive(Debug, Clone)]
pub struct Config {
    /// MPL: worst-case time a segment may spend in the network.
    pub max_packet_lifetime: Duration,
    /// R: how long a segment is retransmitted at most, from its first send.
    pub max_retransmit_time: Duration,
    /// A: longest a receiver waits before acking (this core acks at once).
    pub max_ack_delay: Duration,
    /// Largest data payload per segment (the driver's datagram size − 20).
    pub max_payload: usize,
    /// Bytes the send buffer holds (unacked + unsent).
    pub send_buffer: usize,
    /// Receive buffer (also the largest advertised window). Up to 65 535 the
    /// window field counts octets (the thesis header); above it, up to
    /// 16 MiB, segments carry the `W` flag and the field counts 256 octets.
    pub recv_buffer: usize,
    /// RTO before the first RTT sample (RFC 6298: 1 s).
    pub initial_rto: Duration,
    /// Lower bound of the RTO.
    pub min_rto: Duration,
    /// Upper bound of the backed-off RTO (also bounded by R).
    pub max_rto: Duration,
    /// How far a peer's clock may be off: a segment is dropped as expired only
    /// when its deadline is more than this in the past.
    pub clock_skew_tolerance: Duration,
    /// SN of the first data octet of a fresh send state.
    pub initial_sn: u32,
    /// Connections a listener queues before `accept()`.
    pub backlog: usize,
    /// Duplicate acks that trigger fast retransmit, for a peer that sends no
    /// SACK blocks (with them, loss is found by time: [`crate::rack`]).
    pub dup_ack_threshold: u32,
    /// Congestion controller.
    pub congestion: CongestionAlgorithm,
    /// Initial congestion window in segments.
    pub initial_window_segments: usize,
    /// Send SACK blocks in acks (the sender always uses those it receives).
    pub sack: bool,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            max_packet_lifetime: Duration::from_secs(6),
            max_retransmit_time: Duration::from_secs(24),
            max_ack_delay: Duration::from_secs(2),
            max_payload: 1200,
            send_buffer: 8 << 20,
            recv_buffer: 4 << 20,
            initial_rto: Duration::from_secs(1),
            min_rto: Duration::from_millis(200),
            max_rto: Duration::from_secs(8),
            clock_skew_tolerance: Duration::from_millis(500),
            initial_sn: 0,
            backlog: 16,
            dup_ack_threshold: 3,
            congestion: CongestionAlgorithm::Cubic,
            initial_window_segments: 10,
            sack: true,
        }
    }
}

/// A configuration that cannot work.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ConfigError {
    /// Δt must be 1..=255 whole seconds (8-bit lifetime field).
    #[error("Δt = MPL + R + A = {0:?} does not fit the 8-bit lifetime field (1..=255 s)")]
    DeltaT(Duration),
    /// R must be shorter than Δt minus MPL, which it always is; but zero R is useless.
    #[error("max_retransmit_time must be non-zero")]
    ZeroRetransmitTime,
    /// Payload size out of range.
    #[error("max_payload {0} must be 1..={max}", max = MAX_SEGMENT_LEN - HEADER_LEN)]
    Payload(usize),
    /// Receive buffer must fit the (scaled) 16-bit window and hold at least one octet.
    #[error("recv_buffer {0} must be 1..={MAX_SCALED_WINDOW}")]
    RecvBuffer(usize),
    /// Send buffer must hold at least one octet.
    #[error("send_buffer must be non-zero")]
    SendBuffer,
    /// RTO bounds inconsistent.
    #[error("need 0 < min_rto <= initial_rto <= max_rto")]
    Rto,
}

/// A validated configuration with derived timer values.
#[derive(Debug, Clone)]
pub(crate) struct Settings {
    pub cfg: Config,
    /// Δt of our sending direction (lifetime field of data/rendezvous/reliable-ack).
    pub delta_t: Lifetime,
}

impl Settings {
    pub fn new(cfg: Config) -> Result<Settings, ConfigError> {
        let dt = cfg.max_packet_lifetime + cfg.max_retransmit_time + cfg.max_ack_delay;
        let secs = dt.as_secs() + u64::from(dt.subsec_nanos() > 0);
        let delta_t = u8::try_from(secs)
            .ok()
            .and_then(Lifetime::from_secs)
            .ok_or(ConfigError::DeltaT(dt))?;
        if cfg.max_retransmit_time.is_zero() {
            return Err(ConfigError::ZeroRetransmitTime);
        }
        if cfg.max_payload == 0 || cfg.max_payload > MAX_SEGMENT_LEN - HEADER_LEN {
            return Err(ConfigError::Payload(cfg.max_payload));
        }
        if cfg.recv_buffer == 0 || cfg.recv_buffer > MAX_SCALED_WINDOW {
            return Err(ConfigError::RecvBuffer(cfg.recv_buffer));
        }
        if cfg.send_buffer == 0 {
            return Err(ConfigError::SendBuffer);
        }
        if cfg.min_rto.is_zero() || cfg.min_rto > cfg.initial_rto || cfg.initial_rto > cfg.max_rto {
            return Err(ConfigError::Rto);
        }
        Ok(Settings { cfg, delta_t })
    }

    /// Whether our advertised windows carry `W` (256-octet units).
    pub fn scaled_window(&self) -> bool {
        self.cfg.recv_buffer > usize::from(u16::MAX)
    }

    /// Stimer = 3Δt.
    pub fn stimer(&self) -> Duration {
        3 * self.delta_t.duration()
    }
}

/// Maps the core's monotonic [`Timestamp`] to wall-clock milliseconds since
/// midnight UTC, for the deadline field. The driver reads the (NTP-synchronised)
/// wall clock once, at the instant it calls `Timestamp::ZERO`, and may update
/// the mapping later with [`crate::Endpoint::set_wall_clock`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct WallClock {
    /// Milliseconds since midnight UTC at `Timestamp::ZERO`.
    pub ms_since_midnight_at_origin: u32,
}

impl WallClock {
    /// Wall clock reading `ms` milliseconds after midnight at the origin.
    pub const fn at_origin(ms: u32) -> WallClock {
        WallClock {
            ms_since_midnight_at_origin: ms,
        }
    }

    /// Time of day at `now`.
    pub fn time_of_day(&self, now: Timestamp) -> Deadline {
        Deadline::wrapping(u64::from(self.ms_since_midnight_at_origin) + now.as_millis())
    }

    /// Deadline `lifetime` after `now`.
    pub fn deadline(&self, now: Timestamp, lifetime: Lifetime) -> Deadline {
        self.time_of_day(now).after(lifetime.duration())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn delta_t_is_sum_rounded_up() {
        let s = Settings::new(Config::default()).expect("default config is valid");
        assert_eq!(s.delta_t.secs(), 32);
        assert_eq!(s.stimer(), Duration::from_secs(96));
        let cfg = Config {
            max_ack_delay: Duration::from_millis(2500),
            ..Config::default()
        };
        assert_eq!(Settings::new(cfg).expect("valid").delta_t.secs(), 33);
    }

    #[test]
    fn out_of_range_delta_t_is_rejected() {
        let cfg = Config {
            max_retransmit_time: Duration::from_secs(300),
            ..Config::default()
        };
        assert!(matches!(Settings::new(cfg), Err(ConfigError::DeltaT(_))));
        let cfg = Config {
            max_packet_lifetime: Duration::ZERO,
            max_retransmit_time: Duration::ZERO,
            max_ack_delay: Duration::ZERO,
            ..Config::default()
        };
        assert!(matches!(Settings::new(cfg), Err(ConfigError::DeltaT(_))));
    }

    #[test]
    fn wall_clock_wraps_at_midnight() {
        let w = WallClock::at_origin(86_399_000);
        assert_eq!(w.time_of_day(Timestamp::from_millis(1500)).ms(), 500);
    }
}
