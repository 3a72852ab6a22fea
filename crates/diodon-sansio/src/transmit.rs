//! [`Transmit`]: what a core's `poll_transmit(now, max_datagrams, buf)`
//! wrote into the driver's buffer — one datagram, or several of
//! `segment_size` bytes back to back (the last may be shorter) for one GSO
//! `sendmsg`. Both protocol cores use this one contract, so one driver
//! pattern and the simulator serve both.
//!
//! ```text
//!   buf: [ d0 (segment_size) | d1 (segment_size) | … | dN-1 (≤ segment_size) ]
//!         └──────────────────────────── size ────────────────────────────────┘
//! ```
//!
//! The core writes from the start of the buffer (it clears it first) and
//! never allocates per datagram: the driver's buffer is reused call after
//! call.

use std::net::SocketAddr;

/// Most bytes a core writes for one transmit: one GSO `sendmsg` carries at
/// most 65,535 bytes of IP packet, so the datagrams of a batch stay below
/// that with room for the IP and UDP headers.
pub const MAX_TRANSMIT_BYTES: usize = 65_000;

/// What one `poll_transmit` call wrote into the caller's buffer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Transmit {
    /// Where the datagrams go; `None` for a core that has no addresses (the
    /// one-way sender: whatever the driver's socket is pointed at).
    pub destination: Option<SocketAddr>,
    /// Bytes written into the buffer (every datagram, back to back).
    pub size: usize,
    /// Size of each datagram but the last (GSO segment size); `None`: the
    /// buffer holds one datagram of `size` bytes.
    pub segment_size: Option<usize>,
}

impl Transmit {
    /// The size of each datagram (the whole transmit when it is one).
    pub fn segment_len(&self) -> usize {
        self.segment_size.unwrap_or(self.size)
    }

    /// How many datagrams the transmit holds.
    pub fn datagram_count(&self) -> usize {
        let segment = self.segment_len().max(1);
        self.size.div_ceil(segment)
    }

    /// The datagrams in `buf` (the buffer this transmit was written into).
    pub fn datagrams<'a>(&self, buf: &'a [u8]) -> impl Iterator<Item = &'a [u8]> + 'a {
        let buf = &buf[..self.size.min(buf.len())];
        let segment = self.segment_size.unwrap_or(buf.len()).max(1);
        buf.chunks(segment)
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
        assert_eq!((t.segment_len(), t.datagram_count()), (2, 3));
        let one = Transmit {
            segment_size: None,
            size: 3,
            ..t
        };
        assert_eq!(one.datagrams(&buf).collect::<Vec<_>>(), [&[1u8, 1, 2][..]]);
        assert_eq!((one.segment_len(), one.datagram_count()), (3, 1));
    }
}
