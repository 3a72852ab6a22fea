//! Frames made to order: the one place that writes Ethernet/VLAN/IP/L4
//! headers, for the property tests, the end-to-end tests and the trace
//! generator of the benchmark. IPv4 header checksums are correct (so the
//! frames survive a kernel that checks them); L4 checksums are zero (UDP:
//! "none"; TCP: tools that verify it will say so, capture does not care).
//!
//! ```text
//!  Synth { macs, vlans[], l3: V4/V6 { src, dst, proto, frag, ext headers }, ports, payload }
//!     └─► emit() ─► dst | src | [tpid tci]* | type | IP header [| ext…] [| ports…] | payload
//! ```

use crate::frame::{ethertype, proto, Mac};

/// Layer 3 of a synthetic frame.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SynthL3 {
    /// A non-IP payload under this EtherType.
    Raw(u16),
    /// IPv4.
    V4 {
        /// Source.
        src: [u8; 4],
        /// Destination.
        dst: [u8; 4],
    },
    /// IPv6, with `hop_by_hop` 8-byte extension headers before the rest.
    V6 {
        /// Source.
        src: [u8; 16],
        /// Destination.
        dst: [u8; 16],
        /// Hop-by-hop/destination-option headers to put first.
        ext: u8,
    },
}

/// One frame to build.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Synth {
    /// Destination MAC.
    pub dst_mac: Mac,
    /// Source MAC.
    pub src_mac: Mac,
    /// VLAN tags, outer first (802.1ad for the outer of two, 802.1Q otherwise).
    pub vlans: Vec<u16>,
    /// Layer 3.
    pub l3: SynthL3,
    /// IP protocol (ignored for `Raw`).
    pub proto: u8,
    /// Ports (written when the protocol has ports and this is no later fragment).
    pub ports: (u16, u16),
    /// Fragment: (offset in 8-byte units, more fragments).
    pub frag: Option<(u16, bool)>,
    /// Payload bytes after the headers (filled with a pattern).
    pub payload: usize,
    /// A byte mixed into the payload pattern (to tell frames apart).
    pub tag: u64,
}

impl Synth {
    /// A UDP/IPv4 frame.
    pub fn udp4(src: [u8; 4], dst: [u8; 4], sport: u16, dport: u16, payload: usize) -> Synth {
        Synth {
            dst_mac: Mac([0x02, 0, 0, 0, 0x01, 0x02]),
            src_mac: Mac([0x02, 0, 0, 0, 0x01, 0x01]),
            vlans: Vec::new(),
            l3: SynthL3::V4 { src, dst },
            proto: proto::UDP,
            ports: (sport, dport),
            frag: None,
            payload,
            tag: 0,
        }
    }

    /// The frame's bytes.
    pub fn emit(&self) -> Vec<u8> {
        let mut f = Vec::with_capacity(64 + self.payload);
        f.extend_from_slice(&self.dst_mac.0);
        f.extend_from_slice(&self.src_mac.0);
        for (i, v) in self.vlans.iter().enumerate() {
            let tpid = if i == 0 && self.vlans.len() > 1 {
                ethertype::QINQ
            } else {
                ethertype::VLAN
            };
            f.extend_from_slice(&tpid.to_be_bytes());
            f.extend_from_slice(&(v & 0x0fff).to_be_bytes());
        }
        let later = self.frag.is_some_and(|(off, _)| off != 0);
        let l4 = if proto::has_ports(self.proto) && !later {
            let mut h = Vec::with_capacity(20);
            h.extend_from_slice(&self.ports.0.to_be_bytes());
            h.extend_from_slice(&self.ports.1.to_be_bytes());
            match self.proto {
                proto::TCP => {
                    h.extend_from_slice(&[
                        0, 0, 0, 1, 0, 0, 0, 0, 0x50, 0x18, 0xff, 0xff, 0, 0, 0, 0,
                    ]);
                }
                proto::UDP | proto::UDPLITE => {
                    let len = (8 + self.payload).min(65_535) as u16;
                    h.extend_from_slice(&len.to_be_bytes());
                    h.extend_from_slice(&[0, 0]);
                }
                _ => h.extend_from_slice(&[0, 0, 0, 0]),
            }
            h
        } else {
            Vec::new()
        };
        let payload = |f: &mut Vec<u8>| {
            for i in 0..self.payload {
                f.push((i as u64 ^ self.tag ^ (self.tag >> 8)) as u8);
            }
        };
        match &self.l3 {
            SynthL3::Raw(t) => {
                f.extend_from_slice(&t.to_be_bytes());
                payload(&mut f);
            }
            SynthL3::V4 { src, dst } => {
                f.extend_from_slice(&ethertype::IPV4.to_be_bytes());
                let total = (20 + l4.len() + self.payload).min(65_535) as u16;
                let (off, more) = self.frag.unwrap_or((0, false));
                let flags = (off & 0x1fff) | if more { 0x2000 } else { 0 };
                let mut ip = [0u8; 20];
                ip[0] = 0x45;
                ip[2..4].copy_from_slice(&total.to_be_bytes());
                ip[4..6].copy_from_slice(&(self.tag as u16).to_be_bytes());
                ip[6..8].copy_from_slice(&flags.to_be_bytes());
                ip[8] = 64;
                ip[9] = self.proto;
                ip[12..16].copy_from_slice(src);
                ip[16..20].copy_from_slice(dst);
                let sum = checksum(&ip);
                ip[10..12].copy_from_slice(&sum.to_be_bytes());
                f.extend_from_slice(&ip);
                f.extend_from_slice(&l4);
                payload(&mut f);
            }
            SynthL3::V6 { src, dst, ext } => {
                f.extend_from_slice(&ethertype::IPV6.to_be_bytes());
                let frag_len = if self.frag.is_some() { 8 } else { 0 };
                let plen = usize::from(*ext) * 8 + frag_len + l4.len() + self.payload;
                let mut ip = [0u8; 40];
                ip[0] = 0x60;
                ip[4..6].copy_from_slice(&(plen.min(65_535) as u16).to_be_bytes());
                ip[7] = 64;
                ip[8..24].copy_from_slice(src);
                ip[24..40].copy_from_slice(dst);
                // The chain: ext × hop-by-hop/dest-opts, [fragment], upper layer.
                let mut chain: Vec<u8> = (0..*ext).map(|i| if i == 0 { 0 } else { 60 }).collect();
                if self.frag.is_some() {
                    chain.push(44);
                }
                chain.push(self.proto);
                ip[6] = chain[0];
                f.extend_from_slice(&ip);
                for (i, &h) in chain.iter().enumerate().take(chain.len() - 1) {
                    let next = chain[i + 1];
                    if h == 44 {
                        let (off, more) = self.frag.unwrap_or((0, false));
                        let v = (off << 3) | u16::from(more);
                        f.extend_from_slice(&[next, 0]);
                        f.extend_from_slice(&v.to_be_bytes());
                        f.extend_from_slice(&(self.tag as u32).to_be_bytes());
                    } else {
                        f.extend_from_slice(&[next, 0, 1, 4, 0, 0, 0, 0]);
                    }
                }
                f.extend_from_slice(&l4);
                payload(&mut f);
            }
        }
        f
    }
}

/// The Internet checksum of `data`.
pub fn checksum(data: &[u8]) -> u16 {
    let mut sum = 0u32;
    for c in data.chunks(2) {
        let w = u16::from_be_bytes([c[0], c.get(1).copied().unwrap_or(0)]);
        sum += u32::from(w);
    }
    while sum > 0xffff {
        sum = (sum & 0xffff) + (sum >> 16);
    }
    !(sum as u16)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::frame::{Fragment, Headers, L3};

    #[test]
    fn synthetic_frames_parse_back() {
        // The thesis's 574-byte frame (its 14 + 20 + 512 does not add up to
        // 574; the benchmark keeps the 574 bytes: UDP payload 532).
        let mut s = Synth::udp4([10, 0, 0, 1], [10, 0, 1, 1], 1000, 53, 532);
        assert_eq!(s.emit().len(), 574);
        s.vlans = vec![10, 20];
        s.proto = proto::TCP;
        let h = Headers::parse(&s.emit()).unwrap();
        assert_eq!(
            (h.vlan, h.tags, h.proto, h.ports),
            (Some(10), 2, Some(6), Some((1000, 53)))
        );
        s.l3 = SynthL3::V6 {
            src: [1; 16],
            dst: [2; 16],
            ext: 2,
        };
        s.frag = Some((0, true));
        let h = Headers::parse(&s.emit()).unwrap();
        assert_eq!(
            h.l3,
            L3::V6 {
                src: [1; 16],
                dst: [2; 16]
            }
        );
        assert_eq!((h.fragment, h.ports), (Fragment::First, Some((1000, 53))));
        s.frag = Some((100, false));
        let h = Headers::parse(&s.emit()).unwrap();
        assert_eq!(
            (h.fragment, h.proto, h.ports),
            (Fragment::Later, Some(6), None)
        );
        let ip = &Synth::udp4([10, 0, 0, 1], [10, 0, 1, 1], 1, 2, 0).emit()[14..34];
        assert_eq!(checksum(ip), 0, "a valid IPv4 header checksum");
    }
}
