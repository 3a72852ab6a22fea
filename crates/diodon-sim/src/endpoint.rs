//! [`SimEndpoint`]: what the simulator loop ([`Pair`](crate::Pair)) needs
//! from a sans-IO endpoint, the same four calls a real driver makes:
//!
//! ```text
//!            handle_datagram(now, from, bytes) ──▶ ┌──────────┐ ──▶ poll_transmit(now, max, buf) -> Transmit
//!            handle_timeout(now)               ──▶ │ endpoint │ ──▶ poll_timeout() -> next wake-up
//!                                                  └──────────┘
//! ```
//!
//! The cores implement it in [`adapters`](crate::adapters) (the one module
//! that calls into `diodon-proto` and `diodon-deltat`); a test wraps an
//! endpoint to add application work, e.g. writing more data whenever
//! `poll_transmit` is asked for the next datagram.

use std::net::SocketAddr;

use diodon_sansio::Timestamp;
pub use diodon_sansio::Transmit;

/// One of the two endpoints of a [`Pair`](crate::Pair).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Side {
    /// The first endpoint (`Pair::a`), e.g. the sender or the client.
    A,
    /// The second endpoint (`Pair::b`), e.g. the receiver or the server.
    B,
}

impl Side {
    /// The other endpoint.
    #[must_use]
    pub fn peer(self) -> Side {
        match self {
            Side::A => Side::B,
            Side::B => Side::A,
        }
    }
}

/// A sans-IO endpoint the simulator loop can drive in virtual time.
///
/// The loop calls these as a real driver would: datagrams as they arrive,
/// `handle_timeout` only once `poll_timeout` has passed, `poll_transmit`
/// until it returns `None`.
pub trait SimEndpoint {
    /// Takes one datagram that arrived at `now` from `from`.
    fn handle_datagram(&mut self, now: Timestamp, from: SocketAddr, datagram: &[u8]);

    /// Runs the timers due at `now`.
    fn handle_timeout(&mut self, now: Timestamp);

    /// Writes the next transmission, at most `max_datagrams` datagrams,
    /// into `buf` and says what it is, or returns `None` when nothing may
    /// leave at `now`.
    ///
    /// On entry `buf` holds unspecified bytes (it may be a recycled
    /// datagram, so that writing one needs no allocation and no zeroing):
    /// the endpoint writes from the start and leaves `buf.len()` equal to
    /// the transmit's `size` (`buf.clear()` first to append).
    fn poll_transmit(
        &mut self,
        now: Timestamp,
        max_datagrams: usize,
        buf: &mut Vec<u8>,
    ) -> Option<Transmit>;

    /// The earliest time `handle_timeout` has work, if any.
    fn poll_timeout(&self) -> Option<Timestamp>;

    /// Panics if the endpoint's internal bookkeeping is inconsistent; the
    /// loop calls it after every step. Does nothing by default.
    fn check_invariants(&self) {}
}

impl<T: SimEndpoint + ?Sized> SimEndpoint for &mut T {
    fn handle_datagram(&mut self, now: Timestamp, from: SocketAddr, datagram: &[u8]) {
        (**self).handle_datagram(now, from, datagram);
    }

    fn handle_timeout(&mut self, now: Timestamp) {
        (**self).handle_timeout(now);
    }

    fn poll_transmit(
        &mut self,
        now: Timestamp,
        max_datagrams: usize,
        buf: &mut Vec<u8>,
    ) -> Option<Transmit> {
        (**self).poll_transmit(now, max_datagrams, buf)
    }

    fn poll_timeout(&self) -> Option<Timestamp> {
        (**self).poll_timeout()
    }

    fn check_invariants(&self) {
        (**self).check_invariants();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sides_are_each_others_peer() {
        assert_eq!(Side::A.peer(), Side::B);
        assert_eq!(Side::B.peer(), Side::A);
    }
}
