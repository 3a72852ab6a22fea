//! What a receiving pipeline says about each channel: its key across
//! sessions ([`ChannelKey`]) and its final word ([`ChannelOutcome`] with a
//! [`Verdict`]). A leaf: the pipeline, the sinks, the status and the
//! reports all speak of channels in these types (re-exported by `recv`).

use diodon_proto::{ChannelId, SessionId};

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
