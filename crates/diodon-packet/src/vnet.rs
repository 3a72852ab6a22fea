//! The virtio-net header a TUN with `IFF_VNET_HDR` puts in front of every
//! packet (`struct virtio_net_hdr`, little-endian on the hosts Diodon runs
//! on): whether the checksum is left to the reader and whether the packet is
//! a GSO super-packet.
//!
//! ```text
//!  0        1          2            4            6              8              10
//!  | flags  | gso_type | hdr_len    | gso_size   | csum_start   | csum_offset  |
//!  flags: 1 NEEDS_CSUM, 2 DATA_VALID    gso_type: 0 none, 1 TCPv4, 3 UDP (UFO),
//!                                       4 TCPv6, 5 UDP_L4 (USO); | 0x80 ECN
//! ```

/// Bytes of the header.
pub const VNET_HDR_LEN: usize = 10;

/// `VIRTIO_NET_HDR_F_NEEDS_CSUM`: the reader must finish the checksum.
pub const F_NEEDS_CSUM: u8 = 1;
/// `VIRTIO_NET_HDR_F_DATA_VALID`.
pub const F_DATA_VALID: u8 = 2;

/// GSO kinds (without the ECN bit).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GsoType {
    /// A single packet.
    None,
    /// TCP over IPv4.
    TcpV4,
    /// UDP fragmentation offload (obsolete; never asked for).
    Udp,
    /// TCP over IPv6.
    TcpV6,
    /// UDP segmentation (USO), either IP version.
    UdpL4,
    /// Anything else.
    Unknown(u8),
}

impl GsoType {
    fn from_wire(b: u8) -> GsoType {
        match b & 0x7f {
            0 => GsoType::None,
            1 => GsoType::TcpV4,
            3 => GsoType::Udp,
            4 => GsoType::TcpV6,
            5 => GsoType::UdpL4,
            x => GsoType::Unknown(x),
        }
    }

    fn to_wire(self) -> u8 {
        match self {
            GsoType::None => 0,
            GsoType::TcpV4 => 1,
            GsoType::Udp => 3,
            GsoType::TcpV6 => 4,
            GsoType::UdpL4 => 5,
            GsoType::Unknown(x) => x,
        }
    }
}

/// A parsed virtio-net header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct VnetHdr {
    /// `F_NEEDS_CSUM`, `F_DATA_VALID`.
    pub flags: u8,
    /// What kind of super-packet, if any.
    pub gso_type: GsoType,
    /// The ECN bit of `gso_type`.
    pub ecn: bool,
    /// Bytes of the headers (L3 + L4) of a super-packet (a hint).
    pub hdr_len: u16,
    /// Payload bytes per segment.
    pub gso_size: u16,
    /// Where the checksummed part starts (the L4 header).
    pub csum_start: u16,
    /// Where, from `csum_start`, the checksum field is.
    pub csum_offset: u16,
}

impl VnetHdr {
    /// A header for a plain packet (nothing to finish).
    pub const PLAIN: VnetHdr = VnetHdr {
        flags: 0,
        gso_type: GsoType::None,
        ecn: false,
        hdr_len: 0,
        gso_size: 0,
        csum_start: 0,
        csum_offset: 0,
    };

    /// Reads the header from the front of `buf`; `None` if it is shorter.
    pub fn parse(buf: &[u8]) -> Option<VnetHdr> {
        let b = buf.get(..VNET_HDR_LEN)?;
        let le = |i: usize| u16::from_le_bytes([b[i], b[i + 1]]);
        Some(VnetHdr {
            flags: b[0],
            gso_type: GsoType::from_wire(b[1]),
            ecn: b[1] & 0x80 != 0,
            hdr_len: le(2),
            gso_size: le(4),
            csum_start: le(6),
            csum_offset: le(8),
        })
    }

    /// Writes the header.
    pub fn emit(&self) -> [u8; VNET_HDR_LEN] {
        let mut b = [0u8; VNET_HDR_LEN];
        b[0] = self.flags;
        b[1] = self.gso_type.to_wire() | if self.ecn { 0x80 } else { 0 };
        b[2..4].copy_from_slice(&self.hdr_len.to_le_bytes());
        b[4..6].copy_from_slice(&self.gso_size.to_le_bytes());
        b[6..8].copy_from_slice(&self.csum_start.to_le_bytes());
        b[8..10].copy_from_slice(&self.csum_offset.to_le_bytes());
        b
    }

    /// Whether the reader must finish the checksum.
    pub fn needs_csum(&self) -> bool {
        self.flags & F_NEEDS_CSUM != 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_header_round_trips() {
        let h = VnetHdr {
            flags: F_NEEDS_CSUM,
            gso_type: GsoType::TcpV6,
            ecn: true,
            hdr_len: 74,
            gso_size: 1428,
            csum_start: 40,
            csum_offset: 16,
        };
        assert_eq!(VnetHdr::parse(&h.emit()), Some(h));
        assert_eq!(VnetHdr::parse(&[0; 9]), None);
        assert_eq!(VnetHdr::parse(&[0; 10]), Some(VnetHdr::PLAIN));
    }
}
