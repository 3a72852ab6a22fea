//! Diodon's seeded link simulator: the one owner of impairment (loss,
//! bursts, buffers, delay, reordering, duplication, corruption, rate limits,
//! MTU) and of stepping endpoints in virtual time.
//!
//! ```text
//!   nodes ──▶ Link (one direction: a chain of nodes) ──▶ DuplexLink (one Link per direction)
//!                                                           │
//!   SimEndpoint (adapters: proto Sender / Receiver,         ▼
//!                deltat Endpoint) ──────────────▶ Pair: the simulator loop, virtual time
//!                                                           │
//!             transfer: the in-memory one-way run ◀─────────┘   (benches, inmem_throughput)
//!   Impairment: the usual chain as one value (Delta-t tests; the real-time relay in diodon-lab)
//! ```
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
//! Two endpoints of either protocol, stepped by the loop ([`Pair`]):
//!
//! ```
//! use std::time::Duration;
//! use diodon_proto::wire::ChannelMeta;
//! use diodon_proto::{Receiver, ReceiverConfig, Sender, SenderConfig, SessionId, Timestamp};
//! use diodon_sim::{Bernoulli, DuplexLink, Link, Pair, Seed, SeedReport};
//!
//! let seed = Seed::from_env_or(7);
//! let _report = SeedReport::new("doc_example", &seed);
//! let now = Timestamp::from_millis(1);
//! let mut sender = Sender::new(SenderConfig::default(), SessionId(1), now).unwrap();
//! let ch = sender.open_channel(ChannelMeta::file("f", 100_000)).unwrap();
//! assert_eq!(sender.write(now, ch, &[7u8; 100_000]).unwrap(), 100_000);
//! sender.finish(now, ch).unwrap();
//! let link = DuplexLink::one_way(Link::new().with(Bernoulli::new(0.01, seed.derive(0))));
//! let receiver = Receiver::new(ReceiverConfig::default(), now);
//! let mut pair = Pair::new(sender, receiver, link).starting_at(now).with_seed(seed);
//! let limit = now + Duration::from_secs(10);
//! assert!(pair.run_until(limit, |p| p.b.stats().channels_complete == 1));
//! ```
#![forbid(unsafe_code)]

pub mod adapters;
pub mod clock;
pub mod duplex;
pub mod endpoint;
pub mod impairment;
pub mod link;
pub mod node;
pub mod nodes;
pub mod pair;
pub mod seed;
pub mod transfer;

pub use clock::VirtualClock;
pub use duplex::DuplexLink;
pub use endpoint::{Side, SimEndpoint, Transmit};
pub use impairment::Impairment;
pub use link::Link;
pub use node::{LinkNode, NodeStats};
pub use nodes::{
    Bernoulli, Bursts, Corrupt, Delay, Duplicate, GilbertElliott, Mtu, Outage, RateLimit, Reorder,
    TailDropBuffer,
};
pub use pair::{Pair, ADDR_A, ADDR_B};
pub use seed::{ParseSeedError, Seed, SeedReport};

pub use diodon_sansio::Timestamp;
