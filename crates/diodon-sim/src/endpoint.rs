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

/// What [`SimEndpoint::poll_transmit`] wrote into the caller's buffer: one
/// datagram, or several of `segment_size` bytes back to back (the last may
/// be shorter), as for a GSO send.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Transmit {
    /// Where the datagrams go; `None` for an endpoint that has no addresses
    /// (the one-way sender: whatever is at the other end of the link).
    pub destination: Option<SocketAddr>,
    /// Bytes written into the buffer.
    pub size: usize,
    /// Size of each datagram in the buffer; `None`: one datagram of `size`.
    pub segment_size: Option<usize>,
}

impl Transmit {
    /// The datagrams in `buf` (the buffer this transmit was written into).
    pub fn datagrams<'a>(&self, buf: &'a [u8]) -> impl Iterator<Item = &'a [u8]> + 'a {
        let buf = &buf[..self.size.min(buf.len())];
        let segment = self.segment_size.unwrap_or(buf.len()).max(1);
        buf.chunks(segment)
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
    fn transmit_splits_into_segments() {
        let buf = [1u8, 1, 2, 2, 3];
        let t = Transmit {
            destination: None,
            size: 5,
            segment_size: Some(2),
        };
        let d: Vec<&[u8]> = t.datagrams(&buf).collect();
        assert_eq!(d, [&[1u8, 1][..], &[2, 2], &[3]]);
        let one = Transmit {
            segment_size: None,
            size: 3,
            ..t
        };
        assert_eq!(one.datagrams(&buf).collect::<Vec<_>>(), [&[1u8, 1, 2][..]]);
        assert_eq!(Side::A.peer(), Side::B);
    }
}
