//! [`SimEndpoint`] for the two protocol cores: the one-way
//! [`diodon_proto::Sender`] and [`diodon_proto::Receiver`], and the Delta-t
//! [`diodon_deltat::Endpoint`]. This is the only module of the simulator
//! that calls the cores' transmit and timer APIs; a change of their
//! contracts is adapted here and nowhere else.
//!
//! ```text
//!   Sender    poll_transmit(now, buf) (max 1) ───▶ Transmit { None, len, None }, written in place
//!             poll_batch(now, buf) (max > 1) ────▶ Transmit { None, len, segment_size }
//!             (no input: datagrams reaching it are ignored, a diode has no return path)
//!   Receiver  handle_datagram(now, bytes) ◀─────── datagram (the source address is not used)
//!             (never transmits)
//!   Endpoint  poll_transmit(now) -> (to, bytes) ──▶ Transmit { Some(to), len, None }
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

    /// One datagram written in place when `max_datagrams` is 1; otherwise
    /// one GSO batch of up to the sender's own `max_batch` datagrams.
    fn poll_transmit(
        &mut self,
        now: Timestamp,
        max_datagrams: usize,
        buf: &mut Vec<u8>,
    ) -> Option<Transmit> {
        if max_datagrams == 1 {
            let room = self.config().datagram_len();
            if buf.len() < room {
                buf.resize(room, 0);
            }
            let len = Sender::poll_transmit(self, now, buf)?;
            buf.truncate(len);
            return Some(Transmit {
                destination: None,
                size: len,
                segment_size: None,
            });
        }
        buf.clear();
        let batch = self.poll_batch(now, buf)?;
        Some(Transmit {
            destination: None,
            size: batch.len,
            segment_size: Some(batch.segment_size),
        })
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

    /// One datagram (Delta-t does not batch).
    fn poll_transmit(&mut self, now: Timestamp, _: usize, buf: &mut Vec<u8>) -> Option<Transmit> {
        let (to, datagram) = diodon_deltat::Endpoint::poll_transmit(self, now)?;
        // The core hands over its own buffer: take it instead of copying.
        *buf = datagram;
        Some(Transmit {
            destination: Some(to),
            size: buf.len(),
            segment_size: None,
        })
    }

    fn poll_timeout(&self) -> Option<Timestamp> {
        diodon_deltat::Endpoint::poll_timeout(self)
    }

    fn check_invariants(&self) {
        self.assert_consistent();
    }
}
