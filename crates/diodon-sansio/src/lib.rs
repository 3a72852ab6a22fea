//! The contract between Diodon's sans-IO protocol cores (`diodon-proto`,
//! `diodon-deltat`) and whatever drives them (the drivers in `diodon-apps`,
//! the simulator in `diodon-sim`). It knows no protocol and does no IO.
//!
//! ```text
//!            driver (sockets, clock)                         core (pure state machine)
//!   now = clock.now() ─── Timestamp ──────────────────────▶ handle_datagram / handle_timeout
//!   buf (reused Vec) ──── poll_transmit(now, max, &mut buf) ─▶ writes datagrams into buf
//!   sendmsg/GSO ◀──────── Transmit { destination, size, segment_size }
//!   sleep until ◀──────── poll_timeout() -> Option<Timestamp> (min over TimerTable / Deadlines)
//! ```
//!
//! Modules: [`time`] (the instant a driver passes in, timer slots, deadline
//! queues), [`net`] (header overhead per IP version) and [`transmit`] (what one transmit call wrote into the driver's
//! buffer). `diodon-io`'s clock produces [`Timestamp`]s, so the IO crate
//! depends on this one and on no protocol.
#![forbid(unsafe_code)]

pub mod net;
pub mod time;
pub mod transmit;

pub use net::IpVersion;
pub use time::{Deadlines, TimerSlot, TimerTable, Timestamp, MAX_TIMER_SLOTS};
pub use transmit::{Transmit, MAX_TRANSMIT_BYTES};
