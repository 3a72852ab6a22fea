//! The receiver's live status, for `GET /api/status` and the dashboard at
//! `/`: throughput and loss over the last minutes (one sample a second),
//! the channels in flight with their progress, and the last channels
//! decided with their verdict. Every list is bounded: a receiver that runs
//! for months keeps the last [`HISTORY_SECONDS`] samples and the last
//! [`RECENT_CHANNELS`] outcomes, nothing more.
//!
//! ```text
//!  decoder thread ── sample(now, core stats) once a second ─► history
//!                 ── opened / data / decided ───────────────► in flight
//!  writer thread  ── decided(outcome) ──────────────────────► recent
//!                                     StatusBoard ◄── metrics::serve (/api/status)
//! ```

use crate::health::LinkHealth;
use crate::outcome::{ChannelKey, ChannelOutcome};
use diodon_proto::ReceiverStats;
use std::collections::{BTreeMap, VecDeque};
use std::sync::Mutex;

/// Seconds of throughput and loss history kept.
pub const HISTORY_SECONDS: usize = 300;
/// Decided channels kept for the status.
pub const RECENT_CHANNELS: usize = 50;
/// Channels in flight shown (the oldest first; the rest are counted).
pub const IN_FLIGHT_SHOWN: usize = 50;

/// Cumulative counters at one second.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
struct Cumulative {
    at_unix_ms: u64,
    bytes: u64,
    datagrams: u64,
    missing: u64,
    recovered: u64,
    blocks_lost: u64,
    socket_drops: u64,
}

/// One second of the link, as rates over the second before `at_unix_ms`.
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Second {
    /// End of the second, Unix ms.
    pub at_unix_ms: u64,
    /// Channel bytes delivered, as Mbit/s.
    pub mbps: f64,
    /// Datagrams accepted or rejected by the core.
    pub datagrams: u64,
    /// Datagrams never received (sequence gaps).
    pub missing: u64,
    /// Source symbols rebuilt by FEC.
    pub recovered: u64,
    /// Blocks that could not be recovered.
    pub blocks_lost: u64,
    /// Packets the kernel dropped on the socket.
    pub socket_drops: u64,
}

/// A channel being received.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct InFlight {
    /// Session, hex.
    pub session: String,
    /// Channel id.
    pub channel: u32,
    /// Name as announced (display only).
    pub name: String,
    /// Announced size, when known.
    pub size: Option<u64>,
    /// Bytes delivered so far.
    pub bytes: u64,
    /// When its open arrived, Unix ms.
    pub opened_unix_ms: u64,
}

/// A decided channel.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Decided {
    /// When the verdict was reached, Unix ms.
    pub at_unix_ms: u64,
    /// The outcome (name, bytes, location, verdict and reason).
    #[serde(flatten)]
    pub outcome: ChannelOutcome,
}

/// Totals since the start.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Totals {
    /// Datagrams handed to the core.
    pub datagrams: u64,
    /// Datagrams accepted.
    pub accepted: u64,
    /// Datagrams never received.
    pub missing: u64,
    /// Source symbols rebuilt by FEC.
    pub recovered_symbols: u64,
    /// Blocks that could not be recovered.
    pub blocks_lost: u64,
    /// Channel bytes delivered.
    pub bytes_delivered: u64,
    /// Channels verified.
    pub channels_complete: u64,
    /// Channels failed.
    pub channels_failed: u64,
    /// Packets the kernel dropped on the receiving socket.
    pub socket_dropped_packets: u64,
}

/// Channels in flight: the first [`IN_FLIGHT_SHOWN`] and how many in all.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct InFlightList {
    /// How many channels are open.
    pub count: usize,
    /// The oldest of them.
    pub channels: Vec<InFlight>,
}

/// The live state behind `/api/status`.
#[derive(Debug, Default)]
pub struct StatusBoard {
    last: Mutex<Option<Cumulative>>,
    history: Mutex<VecDeque<Second>>,
    totals: Mutex<Totals>,
    in_flight: Mutex<BTreeMap<(u64, u32), InFlight>>,
    recent: Mutex<VecDeque<Decided>>,
}

impl StatusBoard {
    /// Records the counters at `now_unix_ms` (the decoder calls this about
    /// once a second); the second before becomes one history entry.
    pub fn sample(&self, now_unix_ms: u64, stats: &ReceiverStats, socket_drops: u64) {
        let now = Cumulative {
            at_unix_ms: now_unix_ms,
            bytes: stats.bytes_delivered,
            datagrams: stats.datagrams,
            missing: stats.missing,
            recovered: stats.recovered_symbols,
            blocks_lost: stats.blocks_lost,
            socket_drops,
        };
        if let Ok(mut t) = self.totals.lock() {
            *t = Totals {
                datagrams: stats.datagrams,
                accepted: stats.accepted,
                missing: stats.missing,
                recovered_symbols: stats.recovered_symbols,
                blocks_lost: stats.blocks_lost,
                bytes_delivered: stats.bytes_delivered,
                channels_complete: stats.channels_complete,
                channels_failed: stats.channels_failed,
                socket_dropped_packets: socket_drops,
            };
        }
        let Ok(mut last) = self.last.lock() else {
            return;
        };
        if let Some(before) = last.replace(now) {
            let ms = now.at_unix_ms.saturating_sub(before.at_unix_ms).max(1);
            let second = Second {
                at_unix_ms: now.at_unix_ms,
                mbps: now.bytes.saturating_sub(before.bytes) as f64 * 8.0 / (ms as f64 * 1000.0),
                datagrams: now.datagrams.saturating_sub(before.datagrams),
                missing: now.missing.saturating_sub(before.missing),
                recovered: now.recovered.saturating_sub(before.recovered),
                blocks_lost: now.blocks_lost.saturating_sub(before.blocks_lost),
                socket_drops: now.socket_drops.saturating_sub(before.socket_drops),
            };
            if let Ok(mut h) = self.history.lock() {
                if h.len() == HISTORY_SECONDS {
                    h.pop_front();
                }
                h.push_back(second);
            }
        }
    }

    /// A channel opened.
    pub fn opened(&self, key: ChannelKey, name: &str, size: Option<u64>, now_unix_ms: u64) {
        if let Ok(mut m) = self.in_flight.lock() {
            m.insert(
                (key.session.0, key.channel.0),
                InFlight {
                    session: key.session.to_string(),
                    channel: key.channel.0,
                    name: name.to_owned(),
                    size,
                    bytes: 0,
                    opened_unix_ms: now_unix_ms,
                },
            );
        }
    }

    /// Bytes of an open channel delivered.
    pub fn progressed(&self, key: ChannelKey, bytes: u64) {
        if let Ok(mut m) = self.in_flight.lock() {
            if let Some(c) = m.get_mut(&(key.session.0, key.channel.0)) {
                c.bytes += bytes;
            }
        }
    }

    /// A channel's verdict reached the core (it is no longer in flight).
    pub fn closed(&self, key: ChannelKey) {
        if let Ok(mut m) = self.in_flight.lock() {
            m.remove(&(key.session.0, key.channel.0));
        }
    }

    /// The writer decided a channel: it joins the recent list.
    pub fn decided(&self, outcome: &ChannelOutcome, now_unix_ms: u64) {
        if let Ok(mut r) = self.recent.lock() {
            if r.len() == RECENT_CHANNELS {
                r.pop_front();
            }
            r.push_back(Decided {
                at_unix_ms: now_unix_ms,
                outcome: outcome.clone(),
            });
        }
    }

    /// Seconds of history, oldest first.
    pub fn history(&self) -> Vec<Second> {
        self.history
            .lock()
            .map(|h| h.iter().copied().collect())
            .unwrap_or_default()
    }

    /// Totals as of the last sample.
    pub fn totals(&self) -> Totals {
        self.totals.lock().map(|t| *t).unwrap_or_default()
    }

    /// The channels in flight (oldest first, at most [`IN_FLIGHT_SHOWN`]).
    pub fn in_flight(&self) -> InFlightList {
        self.in_flight
            .lock()
            .map(|m| {
                let mut v: Vec<InFlight> = m.values().cloned().collect();
                v.sort_by_key(|c| c.opened_unix_ms);
                let count = v.len();
                v.truncate(IN_FLIGHT_SHOWN);
                InFlightList { count, channels: v }
            })
            .unwrap_or_default()
    }

    /// The last decided channels, newest first.
    pub fn recent(&self) -> Vec<Decided> {
        self.recent
            .lock()
            .map(|r| r.iter().rev().cloned().collect())
            .unwrap_or_default()
    }
}

/// The body of `GET /api/status` (the dashboard's only data source).
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct StatusDocument {
    /// Schema version of this document.
    pub schema: u32,
    /// `recv`.
    pub side: String,
    /// Diodon's version.
    pub version: String,
    /// When it was made, Unix ms.
    pub now_unix_ms: u64,
    /// Link state and recent alarms.
    pub link: crate::health::LinkStatus,
    /// Alarm counters and link gauges (`diodon_link_*`).
    pub link_counters: diodon_counters::Snapshot,
    /// Totals since the start.
    pub totals: Totals,
    /// The last seconds, oldest first.
    pub history: Vec<Second>,
    /// Channels being received.
    pub in_flight: InFlightList,
    /// The last channels decided, newest first.
    pub recent: Vec<Decided>,
    /// The kernel's UDP counters: totals of the whole network namespace
    /// since boot, not of this run (other sockets count there too).
    pub kernel_namespace_udp: diodon_counters::Snapshot,
}

/// The schema version of [`StatusDocument`].
pub const STATUS_SCHEMA: u32 = 1;

impl StatusDocument {
    /// The document for a receiver now, from its link health and board.
    pub fn of(health: &LinkHealth, board: &StatusBoard, now_unix_ms: u64) -> Self {
        use diodon_counters::CounterSet;
        StatusDocument {
            schema: STATUS_SCHEMA,
            side: "recv".into(),
            version: env!("CARGO_PKG_VERSION").into(),
            now_unix_ms,
            link: health.status(),
            link_counters: health.counters(now_unix_ms).snapshot(),
            totals: board.totals(),
            history: board.history(),
            in_flight: board.in_flight(),
            recent: board.recent(),
            kernel_namespace_udp: diodon_io::UdpSnmp::read()
                .map(|u| u.snapshot())
                .unwrap_or_default(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::outcome::Verdict;
    use diodon_proto::{ChannelId, SessionId};

    fn key(c: u32) -> ChannelKey {
        ChannelKey {
            session: SessionId(1),
            channel: ChannelId(c),
        }
    }

    #[test]
    fn history_is_rates_per_second_and_bounded() {
        let b = StatusBoard::default();
        let mut s = ReceiverStats::default();
        b.sample(1_000, &s, 0);
        assert!(b.history().is_empty(), "one sample is no second yet");
        s.bytes_delivered = 125_000_000;
        s.missing = 7;
        b.sample(2_000, &s, 3);
        let h = b.history();
        assert_eq!(h.len(), 1);
        assert!((h[0].mbps - 1000.0).abs() < 1e-9, "{h:?}");
        assert_eq!((h[0].missing, h[0].socket_drops), (7, 3));
        for i in 0..(HISTORY_SECONDS as u64 + 20) {
            b.sample(3_000 + i * 1000, &s, 3);
        }
        assert_eq!(b.history().len(), HISTORY_SECONDS);
        assert_eq!(b.totals().missing, 7);
    }

    #[test]
    fn channels_move_from_in_flight_to_recent_and_recent_is_bounded() {
        let b = StatusBoard::default();
        b.opened(key(1), "a.bin", Some(100), 10);
        b.opened(key(2), "b.bin", None, 20);
        b.progressed(key(1), 60);
        let f = b.in_flight();
        assert_eq!(f.count, 2);
        assert_eq!(
            (f.channels[0].name.as_str(), f.channels[0].bytes),
            ("a.bin", 60)
        );
        b.closed(key(1));
        assert_eq!(b.in_flight().count, 1);
        for i in 0..(RECENT_CHANNELS as u32 + 5) {
            let o = ChannelOutcome::new(
                key(i),
                format!("f{i}"),
                1,
                "here",
                Verdict::Failed {
                    reason: "digest mismatch".into(),
                },
            );
            b.decided(&o, u64::from(i));
        }
        let r = b.recent();
        assert_eq!(r.len(), RECENT_CHANNELS);
        assert_eq!(
            r[0].outcome.name,
            format!("f{}", RECENT_CHANNELS + 4),
            "newest first"
        );
    }
}
