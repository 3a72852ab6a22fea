//! A timestamped test stream for latency and loss across a tunnel (the NODROP
//! paper's video case: 1316-byte datagrams, 7 × 188-byte MPEG-TS packets, at
//! 25 Mbit/s). This module owns the stamp at the front of each payload and
//! the receiver's tally (loss, duplicates, reordering, one-way latency
//! percentiles); the sockets and the pacing are in the `diodon-lab stream`
//! command.
//!
//! ```text
//!  payload: "DLST" | seq u64 BE | sent, Unix ns u64 BE | filler …
//!  sender ─► tunnel ─► diode ─► tunnel ─► receiver: latency = received − sent
//! ```
//!
//! Both ends read the same wall clock (`CLOCK_REALTIME`): namespaces on one
//! host share it, so the difference is the one-way latency with no offset to
//! estimate. Across two hosts it is only as good as their clock sync.

use std::fmt::Write as _;

/// The first bytes of every stamped payload.
pub const MAGIC: [u8; 4] = *b"DLST";
/// Bytes the stamp takes at the front of a payload.
pub const STAMP_LEN: usize = 4 + 8 + 8;

/// What the sender wrote into a payload.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Stamp {
    /// Position in the stream, from 0.
    pub seq: u64,
    /// When it was sent, nanoseconds since the Unix epoch.
    pub sent_unix_ns: u64,
}

impl Stamp {
    /// Writes the stamp at the front of `payload` and a filler pattern after
    /// it. Returns `false` (and writes nothing) if the payload is shorter than
    /// [`STAMP_LEN`].
    pub fn write(self, payload: &mut [u8]) -> bool {
        if payload.len() < STAMP_LEN {
            return false;
        }
        payload[..4].copy_from_slice(&MAGIC);
        payload[4..12].copy_from_slice(&self.seq.to_be_bytes());
        payload[12..20].copy_from_slice(&self.sent_unix_ns.to_be_bytes());
        for (i, b) in payload[STAMP_LEN..].iter_mut().enumerate() {
            *b = (self.seq as usize).wrapping_add(i) as u8;
        }
        true
    }

    /// Reads the stamp of a received payload; `None` if it is not one of ours
    /// (short, wrong magic).
    pub fn read(payload: &[u8]) -> Option<Stamp> {
        if payload.len() < STAMP_LEN || payload[..4] != MAGIC {
            return None;
        }
        let seq = u64::from_be_bytes(payload[4..12].try_into().ok()?);
        let sent_unix_ns = u64::from_be_bytes(payload[12..20].try_into().ok()?);
        Some(Stamp { seq, sent_unix_ns })
    }

    /// Whether the filler after the stamp is what [`Stamp::write`] put there
    /// (a payload damaged on the way fails this).
    pub fn filler_intact(self, payload: &[u8]) -> bool {
        payload.len() >= STAMP_LEN
            && payload[STAMP_LEN..]
                .iter()
                .enumerate()
                .all(|(i, &b)| b == (self.seq as usize).wrapping_add(i) as u8)
    }
}

/// The receiver's count of a stream.
#[derive(Clone, Debug, Default)]
pub struct Tally {
    seen: Vec<u64>,
    received: u64,
    duplicates: u64,
    reordered: u64,
    damaged: u64,
    foreign: u64,
    highest: Option<u64>,
    latencies_ns: Vec<u64>,
}

impl Tally {
    /// Counts one received payload, read at `now_unix_ns`.
    pub fn record(&mut self, payload: &[u8], now_unix_ns: u64) {
        let Some(stamp) = Stamp::read(payload) else {
            self.foreign += 1;
            return;
        };
        if !stamp.filler_intact(payload) {
            self.damaged += 1;
            return;
        }
        let word = usize::try_from(stamp.seq / 64).unwrap_or(usize::MAX);
        if word >= self.seen.len() {
            if word > 1 << 26 {
                // A sequence number no test stream reaches (a 4-billion
                // datagram stream): counted as foreign, not allocated for.
                self.foreign += 1;
                return;
            }
            self.seen.resize(word + 1, 0);
        }
        let bit = 1u64 << (stamp.seq % 64);
        if self.seen[word] & bit != 0 {
            self.duplicates += 1;
            return;
        }
        self.seen[word] |= bit;
        self.received += 1;
        match self.highest {
            Some(h) if stamp.seq < h => self.reordered += 1,
            _ => self.highest = Some(stamp.seq),
        }
        self.latencies_ns
            .push(now_unix_ns.saturating_sub(stamp.sent_unix_ns));
    }

    /// Distinct stamped payloads received.
    pub fn received(&self) -> u64 {
        self.received
    }

    /// The summary; `sent` (from the sender) turns the tally into a loss
    /// count, which the receiver alone cannot know for the stream's tail.
    pub fn summary(&self, sent: Option<u64>) -> Summary {
        let mut l = self.latencies_ns.clone();
        l.sort_unstable();
        let pct = |p: f64| -> f64 {
            if l.is_empty() {
                return 0.0;
            }
            let i = ((l.len() - 1) as f64 * p).round() as usize;
            l[i.min(l.len() - 1)] as f64 / 1e6
        };
        let missing_below_highest = self
            .highest
            .map_or(0, |h| (h + 1).saturating_sub(self.received));
        Summary {
            received: self.received,
            lost: sent.map_or(missing_below_highest, |s| s.saturating_sub(self.received)),
            duplicates: self.duplicates,
            reordered: self.reordered,
            damaged: self.damaged,
            foreign: self.foreign,
            latency_ms_p50: pct(0.50),
            latency_ms_p99: pct(0.99),
            latency_ms_max: pct(1.0),
            latency_ms_min: pct(0.0),
        }
    }
}

/// What the receiver prints.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Summary {
    /// Distinct payloads received intact.
    pub received: u64,
    /// Sent but never received (or, without the sender's count, the gaps
    /// below the highest sequence number seen).
    pub lost: u64,
    /// Payloads received again.
    pub duplicates: u64,
    /// Payloads that arrived after a later one.
    pub reordered: u64,
    /// Stamped payloads whose filler was changed on the way.
    pub damaged: u64,
    /// Datagrams that were not stamped payloads.
    pub foreign: u64,
    /// One-way latency, median, milliseconds.
    pub latency_ms_p50: f64,
    /// One-way latency, 99th percentile.
    pub latency_ms_p99: f64,
    /// One-way latency, largest.
    pub latency_ms_max: f64,
    /// One-way latency, smallest.
    pub latency_ms_min: f64,
}

impl Summary {
    /// One JSON object on one line (the bench scripts read it with `sed`).
    pub fn to_json(&self) -> String {
        let mut s = String::from("{\"side\":\"stream-recv\"");
        for (k, v) in [
            ("received", self.received),
            ("lost", self.lost),
            ("duplicates", self.duplicates),
            ("reordered", self.reordered),
            ("damaged", self.damaged),
            ("foreign", self.foreign),
        ] {
            let _ = write!(s, ",\"{k}\":{v}");
        }
        for (k, v) in [
            ("latency_ms_min", self.latency_ms_min),
            ("latency_ms_p50", self.latency_ms_p50),
            ("latency_ms_p99", self.latency_ms_p99),
            ("latency_ms_max", self.latency_ms_max),
        ] {
            let _ = write!(s, ",\"{k}\":{v:.3}");
        }
        s.push('}');
        s
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn payload(seq: u64, sent: u64) -> Vec<u8> {
        let mut p = vec![0u8; 1316];
        assert!(Stamp {
            seq,
            sent_unix_ns: sent
        }
        .write(&mut p));
        p
    }

    #[test]
    fn a_stamp_reads_back_and_a_short_or_foreign_payload_is_refused() {
        let p = payload(7, 123_456);
        assert_eq!(
            Stamp::read(&p),
            Some(Stamp {
                seq: 7,
                sent_unix_ns: 123_456
            })
        );
        assert_eq!(Stamp::read(&p[..STAMP_LEN - 1]), None);
        let mut q = p.clone();
        q[0] = b'X';
        assert_eq!(Stamp::read(&q), None);
        assert!(!Stamp {
            seq: 1,
            sent_unix_ns: 0
        }
        .write(&mut [0u8; 8]));
    }

    #[test]
    fn the_tally_counts_loss_duplicates_reordering_damage_and_latency() {
        let mut t = Tally::default();
        // Sent at 1000 ns each; seq 2 lost, seq 4 arrives before seq 3,
        // seq 0 twice, one payload damaged, one foreign datagram.
        t.record(&payload(0, 1_000), 2_001_000);
        t.record(&payload(1, 1_000), 3_001_000);
        t.record(&payload(4, 1_000), 4_001_000);
        t.record(&payload(3, 1_000), 5_001_000);
        t.record(&payload(0, 1_000), 6_001_000);
        let mut bad = payload(5, 1_000);
        bad[100] ^= 1;
        t.record(&bad, 7_000_000);
        t.record(b"hello", 7_000_000);
        let s = t.summary(Some(6));
        assert_eq!(s.received, 4);
        assert_eq!(s.lost, 2, "seq 2 and the damaged seq 5");
        assert_eq!(s.duplicates, 1);
        assert_eq!(s.reordered, 1);
        assert_eq!(s.damaged, 1);
        assert_eq!(s.foreign, 1);
        assert!((s.latency_ms_min - 2.0).abs() < 1e-9);
        assert!((s.latency_ms_max - 5.0).abs() < 1e-9);
        assert!((s.latency_ms_p50 - 4.0).abs() < 1e-9, "{s:?}");
        // Without the sender's count only the gap below the highest shows.
        assert_eq!(t.summary(None).lost, 1);
        let json = s.to_json();
        assert!(json.contains("\"lost\":2") && json.contains("\"latency_ms_max\":5.000"));
    }

    #[test]
    fn an_absurd_sequence_number_is_foreign_not_an_allocation() {
        let mut t = Tally::default();
        t.record(&payload(u64::MAX - 3, 0), 1);
        assert_eq!(t.summary(None).foreign, 1);
        assert_eq!(t.received(), 0);
    }
}
