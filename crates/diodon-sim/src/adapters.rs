//! [`SimEndpoint`] for the two protocol cores: the one-way
//! [`diodon_proto::Sender`] and [`diodon_proto::Receiver`], and the Delta-t
//! [`diodon_deltat::Endpoint`]. This is the only module of the simulator
//! that calls the cores' transmit and timer APIs; a change of their
//! contracts is adapted here and nowhere else.
//!
//! ```text
//!   Sender    poll_transmit(now, max, buf) ──────▶ Transmit { None, size, segment_size } (the core's own)
//!             (no input: datagrams reaching it are ignored, a diode has no return path)
//!   Receiver  handle_datagram(now, bytes) ◀─────── datagram (the source address is not used)
//!             (never transmits)
//!   Endpoint  poll_transmit(now, max, buf) ──────▶ Transmit { Some(to), size, segment_size } (the core's own)
//!             handle_datagram(now, from, bytes) ◀── datagram
//! ```

use std::net::SocketAddr;

use diodon_proto::{Receiver, Sender, Timestamp};

use crate::endpoint::{SimEndpoint, Transmit};

impl SimEndpoint for Sender {
    /// A one-way sender takes no input; a datagram reaching it is ignored.
    fn handle_datagram(&mut self, _now: Timestamp, _from: SocketAddr, _datagram: &[u8]) {}

    fn handle_timeout(&mut self, now: Timestamp) {
        Sender::handle_timeout(self, now);
    }

    fn poll_transmit(
        &mut self,
        now: Timestamp,
        max_datagrams: usize,
        buf: &mut Vec<u8>,
    ) -> Option<Transmit> {
        Sender::poll_transmit(self, now, max_datagrams, buf)
    }

    fn poll_timeout(&self) -> Option<Timestamp> {
        Sender::poll_timeout(self)
    }
}

impl SimEndpoint for Receiver {
    fn handle_datagram(&mut self, now: Timestamp, _from: SocketAddr, datagram: &[u8]) {
        Receiver::handle_datagram(self, now, datagram);
    }

    fn handle_timeout(&mut self, now: Timestamp) {
        Receiver::handle_timeout(self, now);
    }

    /// A one-way receiver never transmits.
    fn poll_transmit(&mut self, _: Timestamp, _: usize, _: &mut Vec<u8>) -> Option<Transmit> {
        None
    }

    fn poll_timeout(&self) -> Option<Timestamp> {
        Receiver::poll_timeout(self)
    }
}

impl SimEndpoint for diodon_deltat::Endpoint {
    fn handle_datagram(&mut self, now: Timestamp, from: SocketAddr, datagram: &[u8]) {
        diodon_deltat::Endpoint::handle_datagram(self, now, from, datagram);
    }

    fn handle_timeout(&mut self, now: Timestamp) {
        diodon_deltat::Endpoint::handle_timeout(self, now);
    }

    fn poll_transmit(
        &mut self,
        now: Timestamp,
        max_datagrams: usize,
        buf: &mut Vec<u8>,
    ) -> Option<Transmit> {
        diodon_deltat::Endpoint::poll_transmit(self, now, max_datagrams, buf)
    }

    fn poll_timeout(&self) -> Option<Timestamp> {
        diodon_deltat::Endpoint::poll_timeout(self)
    }

    fn check_invariants(&self) {
        self.assert_consistent();
    }
}
