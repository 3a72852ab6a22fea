//! Borrowed views over captured frames and the one summary the pre-filter
//! works on ([`Headers`]): Ethernet, 802.1Q / 802.1ad (QinQ) tags, IPv4,
//! IPv6 with its extension headers and fragments, and the ports of TCP,
//! UDP, SCTP, UDP-Lite and DCCP.
//!
//! ```text
//!  0            6            12      14 (+4 per VLAN tag)
//! +------------+------------+-------+---------------------------------------+
//! |  dst MAC   |  src MAC   | type  | payload (IPv4 / IPv6 / anything else)  |
//! +------------+------------+-------+---------------------------------------+
//!                           0x8100 / 0x88a8 / 0x9100: a tag (TCI = PCP|DEI|VID), then type again
//!
//!  IPv4: ver/IHL | … | flags+fragment offset (6..8) | … | proto (9) | src (12..16) | dst (16..20) | options
//!  IPv6: ver | … | next header (6) | … | src (8..24) | dst (24..40) | extension headers … | upper layer
//!  L4 (only in a first fragment or unfragmented): src port (0..2) | dst port (2..4)
//! ```
//!
//! Every view has `check_len`; after it succeeds no accessor panics.
//! [`Headers::parse`] never fails: a frame too short or inconsistent for a
//! layer stops the walk there and says so ([`L3::Malformed`], no ports), so
//! rules can decide what happens to it.

use std::fmt;

/// Length of an Ethernet header without tags.
pub const ETHERNET_HEADER_LEN: usize = 14;
/// Length of one 802.1Q tag.
pub const VLAN_TAG_LEN: usize = 4;
/// Tags walked at most (outer first); a frame with more is malformed.
pub const MAX_VLAN_TAGS: usize = 4;
/// IPv6 extension headers walked at most before the walk gives up.
pub const MAX_IPV6_EXTENSIONS: usize = 8;

/// EtherType values the views know.
pub mod ethertype {
    /// IPv4.
    pub const IPV4: u16 = 0x0800;
    /// ARP.
    pub const ARP: u16 = 0x0806;
    /// IPv6.
    pub const IPV6: u16 = 0x86dd;
    /// 802.1Q customer tag.
    pub const VLAN: u16 = 0x8100;
    /// 802.1ad service tag (QinQ outer).
    pub const QINQ: u16 = 0x88a8;
    /// The pre-standard QinQ tag some switches still send.
    pub const QINQ_OLD: u16 = 0x9100;
    /// The tap's default encapsulation EtherType (the thesis's marker).
    pub const TAP_ENCAP: u16 = 0xf1f0;

    /// Whether `t` introduces a VLAN tag.
    pub fn is_tag(t: u16) -> bool {
        matches!(t, VLAN | QINQ | QINQ_OLD)
    }
}

/// IP protocol numbers the views know.
pub mod proto {
    /// ICMP.
    pub const ICMP: u8 = 1;
    /// TCP.
    pub const TCP: u8 = 6;
    /// UDP.
    pub const UDP: u8 = 17;
    /// DCCP.
    pub const DCCP: u8 = 33;
    /// GRE.
    pub const GRE: u8 = 47;
    /// ESP.
    pub const ESP: u8 = 50;
    /// AH.
    pub const AH: u8 = 51;
    /// `ICMPv6`.
    pub const ICMPV6: u8 = 58;
    /// SCTP.
    pub const SCTP: u8 = 132;
    /// UDP-Lite.
    pub const UDPLITE: u8 = 136;

    /// Whether the protocol's header starts with source and destination ports.
    pub fn has_ports(p: u8) -> bool {
        matches!(p, TCP | UDP | DCCP | SCTP | UDPLITE)
    }
}

/// Why a view refused a buffer.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum FrameError {
    /// The buffer is shorter than the header says.
    #[error("truncated: {needed} bytes needed, {got} present")]
    Truncated {
        /// Bytes the header needs.
        needed: usize,
        /// Bytes present.
        got: usize,
    },
    /// A field has a value the format forbids (version, header length).
    #[error("malformed: {0}")]
    Malformed(&'static str),
}

fn need(buf: &[u8], n: usize) -> Result<(), FrameError> {
    if buf.len() < n {
        Err(FrameError::Truncated {
            needed: n,
            got: buf.len(),
        })
    } else {
        Ok(())
    }
}

fn be16(b: &[u8], at: usize) -> u16 {
    u16::from_be_bytes([b[at], b[at + 1]])
}

/// A 48-bit MAC address.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Default)]
pub struct Mac(pub [u8; 6]);

impl Mac {
    /// The address as the low 48 bits of an integer (for ranges).
    pub fn to_u64(self) -> u64 {
        let mut b = [0u8; 8];
        b[2..].copy_from_slice(&self.0);
        u64::from_be_bytes(b)
    }

    /// The address from the low 48 bits of `v`.
    pub fn from_u64(v: u64) -> Mac {
        let b = v.to_be_bytes();
        let mut m = [0u8; 6];
        m.copy_from_slice(&b[2..]);
        Mac(m)
    }
}

impl fmt::Display for Mac {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let m = self.0;
        write!(
            f,
            "{:02x}:{:02x}:{:02x}:{:02x}:{:02x}:{:02x}",
            m[0], m[1], m[2], m[3], m[4], m[5]
        )
    }
}

impl std::str::FromStr for Mac {
    type Err = ();
    fn from_str(s: &str) -> Result<Mac, ()> {
        let mut out = [0u8; 6];
        let mut n = 0;
        for part in s.split([':', '-']) {
            if n == 6 || part.is_empty() || part.len() > 2 {
                return Err(());
            }
            out[n] = u8::from_str_radix(part, 16).map_err(|_| ())?;
            n += 1;
        }
        if n == 6 {
            Ok(Mac(out))
        } else {
            Err(())
        }
    }
}

/// A view over an Ethernet frame (without the frame check sequence, as
/// captured).
#[derive(Debug, Clone, Copy)]
pub struct EthernetFrame<T: AsRef<[u8]>> {
    buf: T,
}

impl<T: AsRef<[u8]>> EthernetFrame<T> {
    /// Wraps `buf` after [`EthernetFrame::check_len`].
    pub fn new_checked(buf: T) -> Result<Self, FrameError> {
        let f = EthernetFrame { buf };
        f.check_len()?;
        Ok(f)
    }

    /// Whether the buffer holds the 14-byte header.
    pub fn check_len(&self) -> Result<(), FrameError> {
        need(self.buf.as_ref(), ETHERNET_HEADER_LEN)
    }

    /// Destination address.
    pub fn dst(&self) -> Mac {
        let mut m = [0u8; 6];
        m.copy_from_slice(&self.buf.as_ref()[0..6]);
        Mac(m)
    }

    /// Source address.
    pub fn src(&self) -> Mac {
        let mut m = [0u8; 6];
        m.copy_from_slice(&self.buf.as_ref()[6..12]);
        Mac(m)
    }

    /// The EtherType (or TPID of the first tag) at bytes 12..14.
    pub fn ethertype(&self) -> u16 {
        be16(self.buf.as_ref(), 12)
    }

    /// Everything after the 14-byte header.
    pub fn payload(&self) -> &[u8] {
        &self.buf.as_ref()[ETHERNET_HEADER_LEN..]
    }
}

/// A view over an 802.1Q tag's TCI and the EtherType that follows it
/// (the 4 bytes after a tag TPID).
#[derive(Debug, Clone, Copy)]
pub struct VlanTag<T: AsRef<[u8]>> {
    buf: T,
}

impl<T: AsRef<[u8]>> VlanTag<T> {
    /// Wraps `buf` (starting at the TCI) after [`VlanTag::check_len`].
    pub fn new_checked(buf: T) -> Result<Self, FrameError> {
        let v = VlanTag { buf };
        v.check_len()?;
        Ok(v)
    }

    /// Whether TCI and inner EtherType are present.
    pub fn check_len(&self) -> Result<(), FrameError> {
        need(self.buf.as_ref(), VLAN_TAG_LEN)
    }

    /// The VLAN id (12 bits).
    pub fn vid(&self) -> u16 {
        be16(self.buf.as_ref(), 0) & 0x0fff
    }

    /// The EtherType after the tag.
    pub fn ethertype(&self) -> u16 {
        be16(self.buf.as_ref(), 2)
    }
}

/// A view over an IPv4 header.
#[derive(Debug, Clone, Copy)]
pub struct Ipv4Packet<T: AsRef<[u8]>> {
    buf: T,
}

impl<T: AsRef<[u8]>> Ipv4Packet<T> {
    /// Wraps `buf` after [`Ipv4Packet::check_len`].
    pub fn new_checked(buf: T) -> Result<Self, FrameError> {
        let p = Ipv4Packet { buf };
        p.check_len()?;
        Ok(p)
    }

    /// Version 4, IHL ≥ 5 and the whole header (with options) present. The
    /// total length may exceed the buffer (a capture cut by its snap
    /// length); it must not be shorter than the header.
    pub fn check_len(&self) -> Result<(), FrameError> {
        let b = self.buf.as_ref();
        need(b, 20)?;
        if b[0] >> 4 != 4 {
            return Err(FrameError::Malformed("IPv4 version is not 4"));
        }
        let ihl = usize::from(b[0] & 0x0f) * 4;
        if ihl < 20 {
            return Err(FrameError::Malformed("IPv4 header length below 20"));
        }
        need(b, ihl)?;
        if usize::from(be16(b, 2)) < ihl {
            return Err(FrameError::Malformed("IPv4 total length below its header"));
        }
        Ok(())
    }

    /// Header length in bytes (with options).
    pub fn header_len(&self) -> usize {
        usize::from(self.buf.as_ref()[0] & 0x0f) * 4
    }

    /// The protocol field.
    pub fn protocol(&self) -> u8 {
        self.buf.as_ref()[9]
    }

    /// The fragment offset in 8-byte units.
    pub fn frag_offset(&self) -> u16 {
        be16(self.buf.as_ref(), 6) & 0x1fff
    }

    /// The more-fragments flag.
    pub fn more_fragments(&self) -> bool {
        self.buf.as_ref()[6] & 0x20 != 0
    }

    /// Source address.
    pub fn src(&self) -> [u8; 4] {
        let b = self.buf.as_ref();
        [b[12], b[13], b[14], b[15]]
    }

    /// Destination address.
    pub fn dst(&self) -> [u8; 4] {
        let b = self.buf.as_ref();
        [b[16], b[17], b[18], b[19]]
    }

    /// The bytes after the header that are present (up to the total length).
    pub fn payload(&self) -> &[u8] {
        let b = self.buf.as_ref();
        let end = usize::from(be16(b, 2)).min(b.len());
        &b[self.header_len()..end]
    }
}

/// A view over an IPv6 fixed header.
#[derive(Debug, Clone, Copy)]
pub struct Ipv6Packet<T: AsRef<[u8]>> {
    buf: T,
}

impl<T: AsRef<[u8]>> Ipv6Packet<T> {
    /// Wraps `buf` after [`Ipv6Packet::check_len`].
    pub fn new_checked(buf: T) -> Result<Self, FrameError> {
        let p = Ipv6Packet { buf };
        p.check_len()?;
        Ok(p)
    }

    /// Version 6 and the 40-byte header present.
    pub fn check_len(&self) -> Result<(), FrameError> {
        let b = self.buf.as_ref();
        need(b, 40)?;
        if b[0] >> 4 != 6 {
            return Err(FrameError::Malformed("IPv6 version is not 6"));
        }
        Ok(())
    }

    /// The first next-header field.
    pub fn next_header(&self) -> u8 {
        self.buf.as_ref()[6]
    }

    /// Source address.
    pub fn src(&self) -> [u8; 16] {
        let mut a = [0u8; 16];
        a.copy_from_slice(&self.buf.as_ref()[8..24]);
        a
    }

    /// Destination address.
    pub fn dst(&self) -> [u8; 16] {
        let mut a = [0u8; 16];
        a.copy_from_slice(&self.buf.as_ref()[24..40]);
        a
    }

    /// The bytes after the fixed header that are present (up to 40 + payload length).
    pub fn payload(&self) -> &[u8] {
        let b = self.buf.as_ref();
        let end = (40 + usize::from(be16(b, 4))).min(b.len());
        &b[40..end]
    }
}

/// What the frame carries at layer 3.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum L3 {
    /// Not IP (ARP, LLDP, anything whose EtherType is not IPv4/IPv6).
    NonIp,
    /// The EtherType says IPv4 or IPv6 but the header is cut short or
    /// inconsistent (or more tags than [`MAX_VLAN_TAGS`]).
    Malformed,
    /// IPv4.
    V4 {
        /// Source.
        src: [u8; 4],
        /// Destination.
        dst: [u8; 4],
    },
    /// IPv6.
    V6 {
        /// Source.
        src: [u8; 16],
        /// Destination.
        dst: [u8; 16],
    },
}

impl L3 {
    /// The kind as the classifier's `l3` dimension: 0 non-IP, 1 malformed,
    /// 4 IPv4, 6 IPv6.
    pub fn kind(&self) -> u8 {
        match self {
            L3::NonIp => 0,
            L3::Malformed => 1,
            L3::V4 { .. } => 4,
            L3::V6 { .. } => 6,
        }
    }

    /// Source and destination as integers (IPv4 in the low 32 bits), or
    /// zeros without IP.
    pub fn addrs(&self) -> (u128, u128) {
        match self {
            L3::V4 { src, dst } => (
                u128::from(u32::from_be_bytes(*src)),
                u128::from(u32::from_be_bytes(*dst)),
            ),
            L3::V6 { src, dst } => (u128::from_be_bytes(*src), u128::from_be_bytes(*dst)),
            L3::NonIp | L3::Malformed => (0, 0),
        }
    }
}

/// Where a packet sits in a fragmented datagram.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum Fragment {
    /// Not fragmented.
    #[default]
    No,
    /// The first fragment (offset 0, more to come): it carries the ports.
    First,
    /// A later fragment: no upper-layer header, no ports.
    Later,
}

/// Everything the pre-filter needs to know about one frame, parsed once.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Headers {
    /// Destination MAC.
    pub dst_mac: Mac,
    /// Source MAC.
    pub src_mac: Mac,
    /// The outer VLAN id, if tagged.
    pub vlan: Option<u16>,
    /// Tags present (0 untagged, 2 for QinQ).
    pub tags: u8,
    /// The EtherType after every tag.
    pub ethertype: u16,
    /// Layer 3.
    pub l3: L3,
    /// The upper-layer protocol (IPv4 protocol; IPv6's after its extension headers).
    pub proto: Option<u8>,
    /// Fragment position.
    pub fragment: Fragment,
    /// Source and destination ports (TCP, UDP, SCTP, UDP-Lite, DCCP; not in
    /// later fragments; absent when cut short).
    pub ports: Option<(u16, u16)>,
}

impl Headers {
    /// Parses what the frame holds. Never fails: `None` only when even the
    /// Ethernet header is missing.
    pub fn parse(frame: &[u8]) -> Option<Headers> {
        let eth = EthernetFrame::new_checked(frame).ok()?;
        let mut h = Headers {
            dst_mac: eth.dst(),
            src_mac: eth.src(),
            vlan: None,
            tags: 0,
            ethertype: eth.ethertype(),
            l3: L3::NonIp,
            proto: None,
            fragment: Fragment::No,
            ports: None,
        };
        let mut rest = eth.payload();
        while ethertype::is_tag(h.ethertype) {
            if usize::from(h.tags) == MAX_VLAN_TAGS {
                h.l3 = L3::Malformed;
                return Some(h);
            }
            let Ok(tag) = VlanTag::new_checked(rest) else {
                h.l3 = L3::Malformed;
                return Some(h);
            };
            if h.tags == 0 {
                h.vlan = Some(tag.vid());
            }
            h.tags += 1;
            h.ethertype = tag.ethertype();
            rest = &rest[VLAN_TAG_LEN..];
        }
        match h.ethertype {
            ethertype::IPV4 => h.parse_v4(rest),
            ethertype::IPV6 => h.parse_v6(rest),
            _ => {}
        }
        Some(h)
    }

    fn parse_v4(&mut self, buf: &[u8]) {
        let Ok(ip) = Ipv4Packet::new_checked(buf) else {
            self.l3 = L3::Malformed;
            return;
        };
        self.l3 = L3::V4 {
            src: ip.src(),
            dst: ip.dst(),
        };
        let p = ip.protocol();
        self.proto = Some(p);
        self.fragment = match (ip.frag_offset(), ip.more_fragments()) {
            (0, false) => Fragment::No,
            (0, true) => Fragment::First,
            _ => Fragment::Later,
        };
        if self.fragment != Fragment::Later {
            self.ports = ports(p, ip.payload());
        }
    }

    fn parse_v6(&mut self, buf: &[u8]) {
        let Ok(ip) = Ipv6Packet::new_checked(buf) else {
            self.l3 = L3::Malformed;
            return;
        };
        self.l3 = L3::V6 {
            src: ip.src(),
            dst: ip.dst(),
        };
        let mut next = ip.next_header();
        let mut rest = ip.payload();
        for _ in 0..=MAX_IPV6_EXTENSIONS {
            let len = match next {
                // Hop-by-hop, routing, destination options, mobility, HIP, shim6.
                0 | 43 | 60 | 135 | 139 | 140 => rest.get(1).map(|&l| (usize::from(l) + 1) * 8),
                // Authentication header: length in 4-byte units minus 2.
                proto::AH => rest.get(1).map(|&l| (usize::from(l) + 2) * 4),
                44 => {
                    // Fragment header: fixed 8 bytes.
                    if rest.len() < 8 {
                        None
                    } else {
                        let off = be16(rest, 2) >> 3;
                        let more = rest[3] & 1 != 0;
                        self.fragment = match (off, more) {
                            (0, false) => Fragment::No,
                            (0, true) => Fragment::First,
                            _ => Fragment::Later,
                        };
                        Some(8)
                    }
                }
                upper => {
                    self.proto = Some(upper);
                    if self.fragment != Fragment::Later {
                        self.ports = ports(upper, rest);
                    }
                    return;
                }
            };
            match len {
                Some(l) if l <= rest.len() => {
                    next = rest[0];
                    rest = &rest[l..];
                }
                // An extension header cut short: the upper layer is unknown.
                _ => return,
            }
        }
    }

    /// Whether the frame is a (first or later) fragment.
    pub fn is_fragment(&self) -> bool {
        self.fragment != Fragment::No
    }
}

fn ports(p: u8, l4: &[u8]) -> Option<(u16, u16)> {
    (proto::has_ports(p) && l4.len() >= 4).then(|| (be16(l4, 0), be16(l4, 2)))
}

/// Writes `frame` into `out` (cleared first) with an 802.1Q tag
/// (`tpid`, `tci`) inserted after the MAC addresses: the frame as it was on
/// the wire before a NIC or veth moved the tag into metadata. A frame
/// shorter than two addresses is copied unchanged.
pub fn insert_vlan_tag(frame: &[u8], tpid: u16, tci: u16, out: &mut Vec<u8>) {
    out.clear();
    if frame.len() < 12 {
        out.extend_from_slice(frame);
        return;
    }
    out.extend_from_slice(&frame[..12]);
    out.extend_from_slice(&tpid.to_be_bytes());
    out.extend_from_slice(&tci.to_be_bytes());
    out.extend_from_slice(&frame[12..]);
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Ethernet + IPv4 (no options) + UDP 1234 → 53, 4 bytes of payload.
    const UDP4: [u8; 50] = [
        0x02, 0, 0, 0, 0, 0x02, 0x02, 0, 0, 0, 0, 0x01, 0x08, 0x00, // eth
        0x45, 0, 0, 32, 0, 1, 0, 0, 64, 17, 0, 0, 10, 0, 0, 1, 10, 0, 1, 1, // ipv4
        0x04, 0xd2, 0, 53, 0, 12, 0, 0, // udp
        1, 2, 3, 4, 0, 0, 0, 0, // payload + padding
    ];

    #[test]
    fn udp_over_ipv4() {
        let h = Headers::parse(&UDP4).unwrap();
        assert_eq!(h.src_mac.to_string(), "02:00:00:00:00:01");
        assert_eq!(h.ethertype, ethertype::IPV4);
        assert_eq!(
            h.l3,
            L3::V4 {
                src: [10, 0, 0, 1],
                dst: [10, 0, 1, 1]
            }
        );
        assert_eq!(h.proto, Some(proto::UDP));
        assert_eq!(h.ports, Some((1234, 53)));
        assert_eq!(h.fragment, Fragment::No);
    }

    #[test]
    fn qinq_tags_and_the_outer_vid() {
        let mut f = UDP4[..12].to_vec();
        f.extend_from_slice(&[0x88, 0xa8, 0x00, 0x64, 0x81, 0x00, 0x00, 0xc8, 0x08, 0x00]);
        f.extend_from_slice(&UDP4[14..]);
        let h = Headers::parse(&f).unwrap();
        assert_eq!(h.vlan, Some(100));
        assert_eq!(h.tags, 2);
        assert_eq!(h.ports, Some((1234, 53)));
    }

    #[test]
    fn later_fragments_have_no_ports_and_first_ones_do() {
        let mut f = UDP4;
        f[20] = 0x20; // MF, offset 0
        let h = Headers::parse(&f).unwrap();
        assert_eq!((h.fragment, h.ports), (Fragment::First, Some((1234, 53))));
        f[20] = 0x00;
        f[21] = 0x10; // offset 16 × 8
        let h = Headers::parse(&f).unwrap();
        assert_eq!((h.fragment, h.ports), (Fragment::Later, None));
        assert_eq!(h.proto, Some(proto::UDP));
    }

    #[test]
    fn truncated_and_inconsistent_ip_is_malformed() {
        for cut in 14..34 {
            assert_eq!(Headers::parse(&UDP4[..cut]).unwrap().l3, L3::Malformed);
        }
        let h = Headers::parse(&UDP4[..36]).unwrap();
        assert!(matches!(h.l3, L3::V4 { .. }));
        assert_eq!(h.ports, None, "two bytes of UDP are not enough");
        let mut f = UDP4;
        f[14] = 0x44; // IHL 4
        assert_eq!(Headers::parse(&f).unwrap().l3, L3::Malformed);
        assert!(Headers::parse(&UDP4[..13]).is_none());
    }

    #[test]
    fn ipv6_extension_headers_and_fragments() {
        let mut f = vec![2, 0, 0, 0, 0, 2, 2, 0, 0, 0, 0, 1, 0x86, 0xdd];
        let mut ip = vec![0x60, 0, 0, 0, 0, 0, 0, 64];
        ip.extend_from_slice(&[0x20, 0x01, 0x0d, 0xb8, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1]);
        ip.extend_from_slice(&[0x20, 0x01, 0x0d, 0xb8, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 2]);
        // hop-by-hop (8 bytes) → fragment (first, more) → TCP 80 → 443
        let ext = [
            44, 0, 1, 4, 0, 0, 0, 0, // hop-by-hop, next = fragment
            6, 0, 0, 1, 0, 0, 0, 9, // fragment, next = TCP, offset 0, M
            0, 80, 1, 187, 0, 0, 0, 0, // TCP ports
        ];
        ip[6] = 0;
        ip[4..6].copy_from_slice(&(ext.len() as u16).to_be_bytes());
        ip.extend_from_slice(&ext);
        f.extend_from_slice(&ip);
        let h = Headers::parse(&f).unwrap();
        assert_eq!(h.l3.kind(), 6);
        assert_eq!(h.proto, Some(proto::TCP));
        assert_eq!(h.fragment, Fragment::First);
        assert_eq!(h.ports, Some((80, 443)));
        // Cut inside the fragment header: IPv6, upper layer unknown.
        let h = Headers::parse(&f[..14 + 40 + 12]).unwrap();
        assert_eq!((h.l3.kind(), h.proto, h.ports), (6, None, None));
    }

    #[test]
    fn a_restored_tag_reads_back() {
        let mut out = Vec::new();
        insert_vlan_tag(&UDP4, ethertype::VLAN, 0x2007, &mut out);
        assert_eq!(out.len(), UDP4.len() + 4);
        let h = Headers::parse(&out).unwrap();
        assert_eq!(h.vlan, Some(7));
        assert_eq!(h.ethertype, ethertype::IPV4);
    }

    #[test]
    fn macs_read_and_print() {
        let m: Mac = "02:1A:b3-04:05:ff".parse().unwrap();
        assert_eq!(m.to_string(), "02:1a:b3:04:05:ff");
        assert_eq!(Mac::from_u64(m.to_u64()), m);
        for bad in [
            "",
            "02:00:00:00:00",
            "02:00:00:00:00:00:00",
            "0g:00:00:00:00:00",
        ] {
            assert!(bad.parse::<Mac>().is_err(), "{bad}");
        }
    }
}
