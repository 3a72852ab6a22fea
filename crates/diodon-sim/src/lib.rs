//! Diodon's seeded in-memory link simulator: a virtual clock and a chain of
//! composable link elements (loss, bursts, buffers, delay, reordering,
//! duplication, corruption, rate limits, MTU) between a sans-IO sender and
//! receiver.
//!
//! Protocol tests drive it like a real network, but in virtual time and
//! reproducibly: every random element draws from its own
//! [`ChaCha8Rng`](rand_chacha::ChaCha8Rng) seeded from a [`Seed`], and every
//! test that uses randomness takes its seed from [`Seed::from_env_or`] and
//! holds a [`SeedReport`], so a failure prints the `SIM_SEED=…` that replays it.
//!
//! ```text
//!                 Link (chain of LinkNodes, one input heap per stage)
//!            ┌──────────────────────────────────────────────────────────┐
//!  send(t) ──┼─▶ [heap 0] ─▶ node 0 ─▶ [heap 1] ─▶ node 1 ─▶ … ─▶ [out] ─┼─▶ poll_deliver(now)
//!            │     e.g.      Bernoulli            TailDropBuffer         │
//!            └──────────────────────────────────────────────────────────┘
//!   each heap is ordered by (time, insertion counter); a node is offered the
//!   entries of its heap in that order, never earlier than their time, so
//!   every node sees non-decreasing `now` even behind Delay or Reorder.
//! ```
//!
//! A minimal driving loop:
//!
//! ```
//! use std::time::Duration;
//! use diodon_proto::Timestamp;
//! use diodon_sim::{Bernoulli, Delay, Link, Seed, SeedReport};
//!
//! let seed = Seed::from_env_or(7);
//! let _report = SeedReport::new("doc_example", &seed);
//! let mut link = Link::new()
//!     .with(Bernoulli::new(0.1, seed.derive(0)))
//!     .with(Delay::new(Duration::from_millis(5)));
//! for i in 0..100u8 {
//!     link.send(Timestamp::from_millis(u64::from(i)), vec![i]);
//! }
//! let mut received = 0;
//! while let Some(t) = link.next_delivery() {
//!     while let Some((_at, _datagram)) = link.poll_deliver(t) {
//!         received += 1;
//!     }
//! }
//! assert_eq!(received + link.stats()[0].1.dropped, 100);
//! ```
#![forbid(unsafe_code)]

pub mod clock;
pub mod link;
pub mod node;
pub mod nodes;
pub mod seed;

pub use clock::VirtualClock;
pub use link::Link;
pub use node::{LinkNode, NodeStats};
pub use nodes::{
    Bernoulli, Corrupt, Delay, Duplicate, GilbertElliott, Mtu, Outage, RateLimit, Reorder,
    TailDropBuffer,
};
pub use seed::{ParseSeedError, Seed, SeedReport};

pub use diodon_proto::Timestamp;
