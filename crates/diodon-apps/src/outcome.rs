//! What a receiving pipeline says about each channel: its key across
//! sessions ([`ChannelKey`]) and its final word ([`ChannelOutcome`] with a
//! [`Verdict`]). A leaf: the pipeline, the sinks, the status and the
//! reports all speak of channels in these types (re-exported by `recv`).

use diodon_proto::{ChannelId, SessionId};
use std::collections::VecDeque;

/// A channel across sessions (channel ids restart with each sender session).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ChannelKey {
    /// Session.
    pub session: SessionId,
    /// Channel within it.
    pub channel: ChannelId,
}

impl std::fmt::Display for ChannelKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}/{}", self.session, self.channel)
    }
}

/// The final word on a channel.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(tag = "verdict", rename_all = "snake_case")]
pub enum Verdict {
    /// Delivered and verified.
    Verified {
        /// BLAKE3, hex.
        blake3: String,
    },
    /// Failed.
    Failed {
        /// Why.
        reason: String,
    },
}

/// One channel's outcome as the sink saw it.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct ChannelOutcome {
    /// Session id, hex.
    pub session: String,
    /// Channel id.
    pub channel: u32,
    /// Name as announced (possibly hostile; display only).
    pub name: String,
    /// Bytes written.
    pub bytes: u64,
    /// Where it ended up (final path, quarantine path, destination).
    pub location: String,
    /// Verdict.
    #[serde(flatten)]
    pub verdict: Verdict,
}

impl ChannelOutcome {
    /// The outcome of channel `key`, delivered to `location`.
    pub fn new(
        key: ChannelKey,
        name: String,
        bytes: u64,
        location: &str,
        verdict: Verdict,
    ) -> Self {
        ChannelOutcome {
            session: key.session.to_string(),
            channel: key.channel.0,
            name,
            bytes,
            location: location.to_owned(),
            verdict,
        }
    }
}

/// Every outcome counted, the last `limit` kept for the summary: a receiver
/// that runs for months reports its totals exactly and lists only its most
/// recent channels (each one was logged when it was decided).
#[derive(Debug, Clone, Default)]
pub struct OutcomeTally {
    limit: usize,
    /// The most recent outcomes, oldest first.
    pub listed: VecDeque<ChannelOutcome>,
    /// Channels verified.
    pub verified: u64,
    /// Channels failed.
    pub failed: u64,
    /// Bytes of the verified channels.
    pub verified_bytes: u64,
    /// Outcomes dropped from the list to keep it at `limit`.
    pub unlisted: u64,
}

impl OutcomeTally {
    /// Keeps at most `limit` outcomes listed.
    pub fn new(limit: usize) -> Self {
        OutcomeTally {
            limit,
            ..OutcomeTally::default()
        }
    }

    /// Counts `o` and lists it, dropping the oldest listed one if full.
    pub fn add(&mut self, o: ChannelOutcome) {
        match o.verdict {
            Verdict::Verified { .. } => {
                self.verified += 1;
                self.verified_bytes += o.bytes;
            }
            Verdict::Failed { .. } => self.failed += 1,
        }
        if self.limit == 0 {
            self.unlisted += 1;
            return;
        }
        if self.listed.len() == self.limit {
            self.listed.pop_front();
            self.unlisted += 1;
        }
        self.listed.push_back(o);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn outcome(i: u32, ok: bool) -> ChannelOutcome {
        let key = ChannelKey {
            session: SessionId(1),
            channel: ChannelId(i),
        };
        let verdict = if ok {
            Verdict::Verified {
                blake3: String::new(),
            }
        } else {
            Verdict::Failed {
                reason: "lost".into(),
            }
        };
        ChannelOutcome::new(key, format!("f{i}"), 10, "", verdict)
    }

    #[test]
    fn the_tally_counts_everything_and_lists_the_last() {
        let mut t = OutcomeTally::new(3);
        for i in 0..10 {
            t.add(outcome(i, i % 5 != 0));
        }
        assert_eq!((t.verified, t.failed, t.verified_bytes), (8, 2, 80));
        assert_eq!(t.unlisted, 7);
        let names: Vec<&str> = t.listed.iter().map(|o| o.name.as_str()).collect();
        assert_eq!(names, ["f7", "f8", "f9"]);
        let mut none = OutcomeTally::new(0);
        none.add(outcome(1, true));
        assert_eq!((none.listed.len(), none.unlisted, none.verified), (0, 1, 1));
    }
}
