//! [`Link`]: a chain of [`LinkNode`]s that datagrams traverse in order, in
//! virtual time.
//!
//! ```text
//!   send(t, d) ─▶ heap₀ ─▶ node₀ ─▶ heap₁ ─▶ node₁ ─▶ … ─▶ node_n-1 ─▶ out heap ─▶ poll_deliver(now)
//!                 │                                                     │
//!                 └── every heap is keyed by (time, insertion counter) ─┘
//! ```
//!
//! Advancing to `now` (done by [`Link::send`] up to the send time, and by
//! [`Link::poll_deliver`]) takes every entry due at or before `now` out of
//! stage 0's heap, in
//! (time, insertion) order, offers it to node 0 at its time and pushes the
//! outputs into stage 1's heap; then does the same for stage 1, and so on.
//! Outputs are never earlier than their input, so when stage `i` runs, all of
//! its inputs up to `now` are already there: each node is offered datagrams
//! in non-decreasing time order, even behind a node like [`Delay`] with
//! jitter or [`Reorder`] that emits them out of order.
//!
//! [`Delay`]: crate::Delay
//! [`Reorder`]: crate::Reorder

use std::cmp::Ordering;
use std::collections::BinaryHeap;
use std::fmt;

use diodon_sansio::Timestamp;

use crate::node::{LinkNode, NodeStats};

/// A chain of link nodes between a sender and a receiver.
///
/// Drive it with [`send`](Link::send) at the sender's virtual times, and
/// [`next_delivery`](Link::next_delivery) / [`poll_deliver`](Link::poll_deliver)
/// on the receiving side: call `poll_deliver(now)` until it returns `None`,
/// then sleep (in virtual time) until `next_delivery()`.
///
/// **Time never goes backward.** The link remembers the latest `now` passed to
/// `send` or `poll_deliver`; a `send` with an earlier `now` is treated as
/// sent at that latest time (it is not rejected), so nodes still see
/// non-decreasing times. Passing non-decreasing times is the caller's job;
/// the clamp only keeps a misbehaving test deterministic.
pub struct Link {
    stages: Vec<Stage>,
    /// Datagrams that have left the last node, awaiting delivery.
    output: BinaryHeap<Entry>,
    /// Insertion counter: breaks time ties in FIFO order.
    next_seq: u64,
    /// The latest `now` seen by `send` or `poll_deliver`.
    frontier: Timestamp,
    /// Scratch buffer for node outputs (kept to avoid reallocating).
    scratch: Vec<(Timestamp, Vec<u8>)>,
    sent: u64,
    delivered: u64,
}

struct Stage {
    node: Box<dyn LinkNode>,
    input: BinaryHeap<Entry>,
    /// The last time this node was offered a datagram.
    clock: Timestamp,
}

impl Link {
    /// A perfect link: every datagram is delivered at the time it is sent.
    pub fn new() -> Link {
        Link {
            stages: Vec::new(),
            output: BinaryHeap::new(),
            next_seq: 0,
            frontier: Timestamp::ZERO,
            scratch: Vec::new(),
            sent: 0,
            delivered: 0,
        }
    }

    /// Builder: appends `node` to the end of the chain.
    #[must_use]
    pub fn with(mut self, node: impl LinkNode + 'static) -> Link {
        self.push(Box::new(node));
        self
    }

    /// Appends an already boxed node to the end of the chain.
    pub fn push(&mut self, node: Box<dyn LinkNode>) {
        self.stages.push(Stage {
            node,
            input: BinaryHeap::new(),
            clock: Timestamp::ZERO,
        });
    }

    /// Offers `datagram` to the link at virtual time `now`.
    ///
    /// `now` should be non-decreasing across calls (and not earlier than the
    /// last `poll_deliver`); an earlier `now` is clamped to the latest time
    /// the link has seen (see the type's doc).
    pub fn send(&mut self, now: Timestamp, datagram: Vec<u8>) {
        let at = now.max(self.frontier);
        self.frontier = at;
        self.sent += 1;
        let entry = Entry {
            at,
            seq: self.next_seq,
            datagram,
        };
        self.next_seq += 1;
        match self.stages.first_mut() {
            Some(stage) => stage.input.push(entry),
            None => self.output.push(entry),
        }
        // Take it through every node it reaches by `at` now, so
        // `next_delivery` says when it arrives, not when it was sent.
        self.advance(at);
    }

    /// A wake-up hint: the earliest time anything is pending anywhere in the
    /// chain, or `None` if the link is empty.
    ///
    /// It is a lower bound on the next delivery, exact when the earliest
    /// pending datagram has already left the last node. It may be earlier
    /// (a datagram due at a middle stage may still be dropped or delayed), in
    /// which case `poll_deliver` at the hint returns `None` but makes
    /// progress: it processes that datagram, so a loop of
    /// `next_delivery` + `poll_deliver` always terminates, and never
    /// delivers anything early.
    pub fn next_delivery(&self) -> Option<Timestamp> {
        self.stages
            .iter()
            .filter_map(|s| s.input.peek())
            .chain(self.output.peek())
            .map(|e| e.at)
            .min()
    }

    /// Pops the next datagram whose delivery time is `<= now`, with that
    /// delivery time; in delivery-time order, ties in send order.
    pub fn poll_deliver(&mut self, now: Timestamp) -> Option<(Timestamp, Vec<u8>)> {
        self.frontier = self.frontier.max(now);
        self.advance(now);
        if self.output.peek().is_some_and(|e| e.at <= now) {
            let entry = self.output.pop()?;
            self.delivered += 1;
            return Some((entry.at, entry.datagram));
        }
        None
    }

    /// Delivers everything still in flight, in order, advancing virtual time
    /// as far as needed. Returns the `(delivery time, datagram)` pairs.
    pub fn drain(&mut self) -> Vec<(Timestamp, Vec<u8>)> {
        let mut delivered = Vec::new();
        while let Some(t) = self.next_delivery() {
            while let Some(d) = self.poll_deliver(t) {
                delivered.push(d);
            }
        }
        delivered
    }

    /// Datagrams inside the link (queued before some node or awaiting
    /// delivery). Nodes hold nothing themselves, so this is everything sent
    /// but neither delivered nor dropped (duplicates count).
    pub fn in_flight(&self) -> usize {
        self.stages.iter().map(|s| s.input.len()).sum::<usize>() + self.output.len()
    }

    /// Datagrams offered with [`send`](Link::send) so far.
    pub fn sent(&self) -> u64 {
        self.sent
    }

    /// Datagrams returned by [`poll_deliver`](Link::poll_deliver) so far.
    pub fn delivered(&self) -> u64 {
        self.delivered
    }

    /// Each node's name and counters, in chain order.
    pub fn stats(&self) -> Vec<(&'static str, NodeStats)> {
        self.stages
            .iter()
            .map(|s| (s.node.name(), s.node.stats()))
            .collect()
    }

    /// The counters of all nodes added up: what the chain as a whole did
    /// (`dropped` is every datagram lost anywhere in it).
    pub fn totals(&self) -> NodeStats {
        let mut t = NodeStats::default();
        for s in &self.stages {
            let n = s.node.stats();
            t.offered += n.offered;
            t.passed += n.passed;
            t.dropped += n.dropped;
            t.duplicated += n.duplicated;
            t.corrupted += n.corrupted;
            t.reordered += n.reordered;
        }
        t
    }

    /// Whether the chain has no nodes: a perfect, zero-delay link.
    pub fn is_perfect(&self) -> bool {
        self.stages.is_empty()
    }

    /// Moves every entry due at or before `now` through the chain, stage by
    /// stage, in (time, insertion) order.
    fn advance(&mut self, now: Timestamp) {
        for i in 0..self.stages.len() {
            let (head, tail) = self.stages.split_at_mut(i + 1);
            let Some(stage) = head.last_mut() else {
                continue;
            };
            let next = match tail.first_mut() {
                Some(s) => &mut s.input,
                None => &mut self.output,
            };
            while stage.input.peek().is_some_and(|e| e.at <= now) {
                let Some(entry) = stage.input.pop() else {
                    break;
                };
                let at = entry.at.max(stage.clock);
                stage.clock = at;
                stage.node.offer(at, entry.datagram, &mut self.scratch);
                for (out_at, datagram) in self.scratch.drain(..) {
                    next.push(Entry {
                        at: out_at.max(at),
                        seq: self.next_seq,
                        datagram,
                    });
                    self.next_seq += 1;
                }
            }
        }
    }
}

impl Default for Link {
    fn default() -> Link {
        Link::new()
    }
}

impl fmt::Debug for Link {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Link")
            .field(
                "nodes",
                &self
                    .stages
                    .iter()
                    .map(|s| s.node.name())
                    .collect::<Vec<_>>(),
            )
            .field("in_flight", &self.in_flight())
            .field("sent", &self.sent)
            .field("delivered", &self.delivered)
            .finish_non_exhaustive()
    }
}

/// A datagram waiting at a stage; the heap pops the smallest `(at, seq)`.
struct Entry {
    at: Timestamp,
    seq: u64,
    datagram: Vec<u8>,
}

impl PartialEq for Entry {
    fn eq(&self, other: &Entry) -> bool {
        (self.at, self.seq) == (other.at, other.seq)
    }
}

impl Eq for Entry {}

impl PartialOrd for Entry {
    fn partial_cmp(&self, other: &Entry) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for Entry {
    /// Reversed, so `BinaryHeap` (a max-heap) pops the earliest entry.
    fn cmp(&self, other: &Entry) -> Ordering {
        (other.at, other.seq).cmp(&(self.at, self.seq))
    }
}

#[cfg(test)]
mod tests;
