//! The [`LinkNode`] trait every link element implements, and the
//! [`NodeStats`] counters each one keeps.
//!
//! ```text
//!   offer(now, datagram) ──▶ node ──▶ out: [(deliver_at >= now, datagram), …]
//!                             │        (0 outputs = dropped, 2 = duplicated)
//!                             └──▶ stats(): offered, passed, dropped, …
//! ```

use diodon_sansio::Timestamp;

/// A link element: offered one datagram at a time, it pushes zero or more
/// `(deliver_at, datagram)` outputs.
///
/// Contract (which [`Link`](crate::Link) upholds for its nodes):
/// - `now` is non-decreasing across calls;
/// - outputs are never earlier than `now` (a [`Link`](crate::Link) clamps an
///   earlier time to `now`);
/// - a node never holds datagrams itself: anything it delays is pushed with a
///   future `deliver_at`, so nothing needs flushing.
pub trait LinkNode {
    /// Handles `datagram`, arriving at `now`; pushes what leaves the node, and
    /// when, onto `out` (appending; never clearing it).
    fn offer(&mut self, now: Timestamp, datagram: Vec<u8>, out: &mut Vec<(Timestamp, Vec<u8>)>);

    /// Counters of what this node did, for test reports.
    fn stats(&self) -> NodeStats;

    /// A short name for reports. Defaults to the type's name.
    fn name(&self) -> &'static str {
        std::any::type_name::<Self>()
    }
}

/// What a node did. For every node,
/// `passed == offered - dropped + duplicated`; `corrupted` and `reordered`
/// count datagrams that were passed on modified or held back.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct NodeStats {
    /// Datagrams offered to the node.
    pub offered: u64,
    /// Datagrams the node emitted (duplicates included).
    pub passed: u64,
    /// Datagrams the node discarded.
    pub dropped: u64,
    /// Extra copies the node emitted.
    pub duplicated: u64,
    /// Datagrams passed on with flipped bits or truncated.
    pub corrupted: u64,
    /// Datagrams held back by an extra delay so later ones may overtake them.
    pub reordered: u64,
}

impl NodeStats {
    /// Whether the counters obey `passed == offered - dropped + duplicated`.
    pub fn is_consistent(&self) -> bool {
        self.offered
            .checked_sub(self.dropped)
            .and_then(|n| n.checked_add(self.duplicated))
            == Some(self.passed)
    }
}
