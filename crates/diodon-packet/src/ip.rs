//! IPv4 and IPv6 header validation: the checks a packet read from a TUN
//! must pass before the tunnel carries it (a truncated or inconsistent
//! header is counted and dropped, never carried).
//!
//! ```text
//!  IPv4  0      4      8             16            24            32
//!        | ver IHL| TOS  |      total length            |
//!        | identification        |flags| fragment offset|
//!        | TTL   | protocol      | header checksum      |
//!        | source address                               |
//!        | destination address                          |  (+ options: IHL > 5)
//!  IPv6  | ver | class | flow label                     |
//!        | payload length        | next header | hops   |
//!        | source address (16) | destination address (16) |
//! ```

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use thiserror::Error;

/// Bytes of an IPv4 header without options.
pub const IPV4_MIN_HEADER: usize = 20;
/// Bytes of the IPv6 fixed header.
pub const IPV6_HEADER: usize = 40;

/// Why bytes are not a well-formed IP packet. Each variant is one counter
/// reason of the tunnel.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Error)]
pub enum PacketError {
    /// Fewer bytes than the fixed header of the version.
    #[error("truncated header ({0} bytes)")]
    Truncated(usize),
    /// Neither 4 nor 6 in the version nibble.
    #[error("IP version {0}")]
    Version(u8),
    /// IPv4 header length below 20 bytes or beyond the packet.
    #[error("bad IPv4 header length {0}")]
    HeaderLength(usize),
    /// The length field disagrees with the bytes read.
    #[error("length field says {field}, packet has {actual} bytes")]
    Length {
        /// Total length the header announces.
        field: usize,
        /// Bytes there are.
        actual: usize,
    },
}

/// What the tunnel needs to know about a valid packet.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct IpInfo {
    /// 4 or 6.
    pub version: u8,
    /// Bytes of the IP header (IPv6: the fixed header only).
    pub header_len: usize,
    /// Bytes of the whole packet.
    pub total_len: usize,
    /// Protocol (IPv4) or first next-header (IPv6).
    pub protocol: u8,
    /// Source address.
    pub src: IpAddr,
    /// Destination address.
    pub dst: IpAddr,
}

/// Checks that `packet` is exactly one IPv4 or IPv6 packet: version, header
/// length, and a length field equal to the bytes there are. Never panics.
pub fn inspect(packet: &[u8]) -> Result<IpInfo, PacketError> {
    let Some(&first) = packet.first() else {
        return Err(PacketError::Truncated(0));
    };
    match first >> 4 {
        4 => inspect_v4(packet),
        6 => inspect_v6(packet),
        v => Err(PacketError::Version(v)),
    }
}

fn inspect_v4(p: &[u8]) -> Result<IpInfo, PacketError> {
    if p.len() < IPV4_MIN_HEADER {
        return Err(PacketError::Truncated(p.len()));
    }
    let ihl = usize::from(p[0] & 0x0f) * 4;
    if ihl < IPV4_MIN_HEADER || ihl > p.len() {
        return Err(PacketError::HeaderLength(ihl));
    }
    let total = usize::from(u16::from_be_bytes([p[2], p[3]]));
    if total != p.len() {
        return Err(PacketError::Length {
            field: total,
            actual: p.len(),
        });
    }
    Ok(IpInfo {
        version: 4,
        header_len: ihl,
        total_len: total,
        protocol: p[9],
        src: IpAddr::V4(Ipv4Addr::new(p[12], p[13], p[14], p[15])),
        dst: IpAddr::V4(Ipv4Addr::new(p[16], p[17], p[18], p[19])),
    })
}

fn inspect_v6(p: &[u8]) -> Result<IpInfo, PacketError> {
    if p.len() < IPV6_HEADER {
        return Err(PacketError::Truncated(p.len()));
    }
    let total = IPV6_HEADER + usize::from(u16::from_be_bytes([p[4], p[5]]));
    if total != p.len() {
        return Err(PacketError::Length {
            field: total,
            actual: p.len(),
        });
    }
    let addr = |at: usize| {
        let mut a = [0u8; 16];
        a.copy_from_slice(&p[at..at + 16]);
        IpAddr::V6(Ipv6Addr::from(a))
    };
    Ok(IpInfo {
        version: 6,
        header_len: IPV6_HEADER,
        total_len: total,
        protocol: p[6],
        src: addr(8),
        dst: addr(24),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn v4(total: u16, ihl: u8) -> Vec<u8> {
        let mut p = vec![0u8; usize::from(total)];
        p[0] = 0x40 | ihl;
        p[2..4].copy_from_slice(&total.to_be_bytes());
        p[9] = 17;
        p[12..16].copy_from_slice(&[10, 0, 0, 1]);
        p[16..20].copy_from_slice(&[239, 1, 2, 3]);
        p
    }

    #[test]
    fn valid_packets_are_described() {
        let i = inspect(&v4(48, 5)).unwrap();
        assert_eq!(
            (i.version, i.header_len, i.total_len, i.protocol),
            (4, 20, 48, 17)
        );
        assert_eq!(i.dst, "239.1.2.3".parse::<IpAddr>().unwrap());
        let mut p6 = vec![0u8; 48];
        p6[0] = 0x60;
        p6[5] = 8;
        p6[6] = 17;
        let i = inspect(&p6).unwrap();
        assert_eq!((i.version, i.total_len), (6, 48));
    }

    #[test]
    fn truncated_and_inconsistent_headers_are_refused() {
        assert_eq!(inspect(&[]), Err(PacketError::Truncated(0)));
        assert_eq!(inspect(&[0x45; 19]), Err(PacketError::Truncated(19)));
        assert_eq!(inspect(&[0x60; 39]), Err(PacketError::Truncated(39)));
        assert_eq!(inspect(&[0x20; 40]), Err(PacketError::Version(2)));
        assert_eq!(inspect(&v4(40, 4)), Err(PacketError::HeaderLength(16)));
        let mut short = v4(48, 5);
        short.truncate(30);
        assert_eq!(
            inspect(&short),
            Err(PacketError::Length {
                field: 48,
                actual: 30
            })
        );
        let mut p = v4(24, 15);
        p.resize(24, 0);
        assert_eq!(inspect(&p), Err(PacketError::HeaderLength(60)));
    }
}
