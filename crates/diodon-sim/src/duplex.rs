//! [`DuplexLink`]: a bidirectional link, one [`Link`] (node chain) per
//! direction, each with its own seed.
//!
//! ```text
//!            ┌──────────── a_to_b: Link (own nodes, own seed) ───────────┐
//!   A ──────▶│ node ─▶ node ─▶ …                                         │──────▶ B
//!   A ◀──────│ … ◀─ node ◀─ node                                          │◀────── B
//!            └──────────── b_to_a: Link (own nodes, own seed) ───────────┘
//! ```

use diodon_sansio::Timestamp;

use crate::endpoint::Side;
use crate::impairment::Impairment;
use crate::link::Link;
use crate::node::NodeStats;
use crate::seed::Seed;

/// Two independent node chains, one per direction.
#[derive(Debug, Default)]
pub struct DuplexLink {
    /// What A sends, on its way to B.
    pub a_to_b: Link,
    /// What B sends, on its way to A.
    pub b_to_a: Link,
}

impl DuplexLink {
    /// A link from the two directions' chains.
    pub fn new(a_to_b: Link, b_to_a: Link) -> DuplexLink {
        DuplexLink { a_to_b, b_to_a }
    }

    /// Perfect in both directions: every datagram arrives when it is sent.
    pub fn perfect() -> DuplexLink {
        DuplexLink::default()
    }

    /// `a_to_b` for what A sends; a perfect return direction (a one-way
    /// receiver never uses it).
    pub fn one_way(a_to_b: Link) -> DuplexLink {
        DuplexLink::new(a_to_b, Link::new())
    }

    /// The same impairments both ways, drawn independently: A → B from
    /// `seed.derive(0)`, B → A from `seed.derive(1)`.
    pub fn symmetric(impairment: &Impairment, seed: Seed) -> DuplexLink {
        DuplexLink::asymmetric(impairment, impairment, seed)
    }

    /// `forward` impairs A → B (seeded `seed.derive(0)`), `backward` B → A
    /// (`seed.derive(1)`).
    pub fn asymmetric(forward: &Impairment, backward: &Impairment, seed: Seed) -> DuplexLink {
        DuplexLink::new(forward.link(seed.derive(0)), backward.link(seed.derive(1)))
    }

    /// The direction that carries what `side` sends.
    pub fn from_side(&mut self, side: Side) -> &mut Link {
        match side {
            Side::A => &mut self.a_to_b,
            Side::B => &mut self.b_to_a,
        }
    }

    /// The earlier of the two directions' wake-up hints
    /// (see [`Link::next_delivery`]).
    pub fn next_delivery(&self) -> Option<Timestamp> {
        match (self.a_to_b.next_delivery(), self.b_to_a.next_delivery()) {
            (Some(x), Some(y)) => Some(x.min(y)),
            (x, y) => x.or(y),
        }
    }

    /// Datagrams inside the link, both directions.
    pub fn in_flight(&self) -> usize {
        self.a_to_b.in_flight() + self.b_to_a.in_flight()
    }

    /// The counters of every node of both directions, added up.
    pub fn totals(&self) -> NodeStats {
        let (f, b) = (self.a_to_b.totals(), self.b_to_a.totals());
        NodeStats {
            offered: f.offered + b.offered,
            passed: f.passed + b.passed,
            dropped: f.dropped + b.dropped,
            duplicated: f.duplicated + b.duplicated,
            corrupted: f.corrupted + b.corrupted,
            reordered: f.reordered + b.reordered,
        }
    }
}
