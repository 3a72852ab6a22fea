//! Delta-t reliable transport, sans-IO: connection management by timers alone
//! (no handshake, no FIN), carried as UDP payloads.
//!
//! ```text
//!   driver (diodon-io)                       this crate
//!   ──────────────────                       ──────────
//!   UDP recv ──▶ Endpoint::handle_datagram(now, from, bytes)
//!   timer    ──▶ Endpoint::handle_timeout(now)
//!   app      ──▶ connect / listen / accept / write / read / shutdown / close
//!   UDP send ◀── Endpoint::poll_transmit(now)      sleep ◀── poll_timeout()
//!   app      ◀── Endpoint::poll_event()
//! ```
//!
//! Modules: [`wire`] (segment view and repr), [`seq`] (serial SNs),
//! [`config`] (Δt, timers, wall clock), [`rtt`] (RFC 6298), [`rack`] (loss
//! detection by time, RFC 8985), [`cc`]
//! (congestion control trait, `NewReno`), [`api`] (handles, errors, events,
//! counters the application sees), [`endpoint`] (demux and app calls);
//! the per-connection state machine (rules R1–R7) is private. The protocol is
//! specified in `PROTOCOL-DELTAT.md` at the repository root.
#![forbid(unsafe_code)]

pub mod api;
pub mod cc;
pub mod config;
mod conn;
pub mod endpoint;
#[cfg(feature = "fuzzing")]
#[doc(hidden)]
pub mod fuzzing;
pub mod rack;
pub mod rtt;
pub mod seq;
pub mod wire;

pub use api::{ConnHandle, ConnectionError, Error, Event, Stats};
pub use config::{Config, ConfigError, CongestionAlgorithm, WallClock};
pub use conn::RENDEZVOUS_OFFSET;
pub use endpoint::Endpoint;
pub use seq::Seq;
pub use wire::{Deadline, Flags, Lifetime, NakCode, Segment, SegmentRepr, SegmentType, WireError};
