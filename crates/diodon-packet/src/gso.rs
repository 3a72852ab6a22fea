//! What the kernel leaves to a TUN reader that took offloads: finishing a
//! partial checksum, and cutting a GSO super-packet (TCP or UDP, IPv4 or
//! IPv6) into the packets it stands for, each with its own lengths, IPv4
//! identification, TCP sequence number and flags, and full checksums.
//!
//! ```text
//!  [IP hdr][L4 hdr][payload ................................]   gso_size = s
//!     ▼ segment
//!  [IP'][L4'][payload 0..s]  [IP'][L4'][payload s..2s]  …  [IP'][L4'][rest]
//!   TCP: seq + i·s; FIN/PSH only on the last, CWR only on the first
//!   IPv4: total length, id + i, header checksum; IPv6: payload length
//! ```
//!
//! Every input is untrusted: offsets outside the packet, zero segment
//! sizes and unknown GSO kinds are errors, never panics (fuzzed).

use crate::csum;
use crate::ip::{inspect, PacketError, IPV4_MIN_HEADER, IPV6_HEADER};
use crate::vnet::{GsoType, VnetHdr};
use thiserror::Error;

const TCP: u8 = 6;
const UDP: u8 = 17;

/// Why a packet from the TUN could not be finished or segmented.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Error)]
pub enum GsoError {
    /// The IP header is not valid.
    #[error(transparent)]
    Ip(#[from] PacketError),
    /// A GSO kind the tunnel never asks for (UFO) or does not know.
    #[error("unsupported GSO type {0}")]
    Unsupported(u8),
    /// Checksum or header offsets outside the packet.
    #[error("checksum or header offsets outside the packet")]
    Offsets,
    /// A super-packet with a segment size of 0.
    #[error("GSO segment size 0")]
    ZeroSegment,
}

/// Turns what one TUN read returned (header parsed, packet after it) into
/// finished IP packets, handing each to `each` (built in `scratch`, reused).
/// Returns the number of packets.
pub fn segment(
    hdr: &VnetHdr,
    packet: &[u8],
    scratch: &mut Vec<u8>,
    mut each: impl FnMut(&[u8]),
) -> Result<usize, GsoError> {
    let (proto, l4_min) = match hdr.gso_type {
        GsoType::None => {
            let info = inspect(packet)?;
            if !hdr.needs_csum() {
                each(packet);
                return Ok(1);
            }
            let start = usize::from(hdr.csum_start);
            let field = start + usize::from(hdr.csum_offset);
            // The checksum lies in the transport header: never inside the IP
            // header, which writing it there would break.
            if start < info.header_len || field + 2 > packet.len() {
                return Err(GsoError::Offsets);
            }
            scratch.clear();
            scratch.extend_from_slice(packet);
            let mut c = csum::finish(csum::sum(0, &scratch[start..]));
            if c == 0 && is_udp(packet) {
                c = 0xffff;
            }
            scratch[field..field + 2].copy_from_slice(&c.to_be_bytes());
            each(scratch);
            return Ok(1);
        }
        GsoType::TcpV4 | GsoType::TcpV6 => (TCP, 20),
        GsoType::UdpL4 => (UDP, 8),
        GsoType::Udp => return Err(GsoError::Unsupported(3)),
        GsoType::Unknown(x) => return Err(GsoError::Unsupported(x)),
    };
    let info = inspect(packet)?;
    let l4 = usize::from(hdr.csum_start);
    if l4 < info.header_len || l4 + l4_min > packet.len() {
        return Err(GsoError::Offsets);
    }
    let l4_hdr = if proto == TCP {
        let thl = usize::from(packet[l4 + 12] >> 4) * 4;
        if thl < 20 || l4 + thl > packet.len() {
            return Err(GsoError::Offsets);
        }
        thl
    } else {
        8
    };
    let hdrs = l4 + l4_hdr;
    let mss = usize::from(hdr.gso_size);
    if mss == 0 {
        return Err(GsoError::ZeroSegment);
    }
    let payload = &packet[hdrs..];
    let count = payload.len().div_ceil(mss).max(1);
    let seq0 = if proto == TCP {
        u32::from_be_bytes([
            packet[l4 + 4],
            packet[l4 + 5],
            packet[l4 + 6],
            packet[l4 + 7],
        ])
    } else {
        0
    };
    let id0 = u16::from_be_bytes([packet[4], packet[5]]);
    for i in 0..count {
        let chunk = &payload[(i * mss).min(payload.len())..((i + 1) * mss).min(payload.len())];
        scratch.clear();
        scratch.extend_from_slice(&packet[..hdrs]);
        scratch.extend_from_slice(chunk);
        let len = scratch.len();
        if info.version == 4 {
            scratch[2..4].copy_from_slice(&(len as u16).to_be_bytes());
            scratch[4..6].copy_from_slice(&id0.wrapping_add(i as u16).to_be_bytes());
            scratch[10..12].copy_from_slice(&[0, 0]);
            let c = csum::ipv4_header(&scratch[..info.header_len.max(IPV4_MIN_HEADER)]);
            scratch[10..12].copy_from_slice(&c.to_be_bytes());
        } else {
            scratch[4..6].copy_from_slice(&((len - IPV6_HEADER) as u16).to_be_bytes());
        }
        let field = if proto == TCP {
            let seq = seq0.wrapping_add((i * mss) as u32);
            scratch[l4 + 4..l4 + 8].copy_from_slice(&seq.to_be_bytes());
            let flags = &mut scratch[l4 + 13];
            if i + 1 < count {
                *flags &= !(0x01 | 0x08); // FIN, PSH only on the last
            }
            if i > 0 {
                *flags &= !0x80; // CWR only on the first
            }
            16
        } else {
            let ulen = (len - l4) as u16;
            scratch[l4 + 4..l4 + 6].copy_from_slice(&ulen.to_be_bytes());
            6
        };
        let (ip, l4_bytes) = scratch.split_at(l4);
        let c = csum::l4(ip, proto, l4_bytes, field);
        scratch[l4 + field..l4 + field + 2].copy_from_slice(&c.to_be_bytes());
        each(scratch);
    }
    Ok(count)
}

fn is_udp(packet: &[u8]) -> bool {
    inspect(packet).is_ok_and(|i| i.protocol == UDP)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::vnet::F_NEEDS_CSUM;

    fn tcp_v4(payload: &[u8]) -> Vec<u8> {
        let mut p = vec![0u8; 40];
        p[0] = 0x45;
        p[4..6].copy_from_slice(&0x1234u16.to_be_bytes());
        p[8] = 64;
        p[9] = TCP;
        p[12..16].copy_from_slice(&[10, 0, 0, 1]);
        p[16..20].copy_from_slice(&[10, 0, 0, 2]);
        p[20..22].copy_from_slice(&5000u16.to_be_bytes());
        p[22..24].copy_from_slice(&80u16.to_be_bytes());
        p[24..28].copy_from_slice(&0xffff_fff0u32.to_be_bytes());
        p[32] = 5 << 4;
        p[33] = 0x80 | 0x10 | 0x08 | 0x01; // CWR ACK PSH FIN
        p.extend_from_slice(payload);
        let len = p.len() as u16;
        p[2..4].copy_from_slice(&len.to_be_bytes());
        p
    }

    fn verify_l4(seg: &[u8], l4: usize, proto: u8) {
        let acc = csum::pseudo(seg, proto, seg.len() - l4);
        assert_eq!(csum::finish(csum::sum(acc, &seg[l4..])), 0, "L4 checksum");
    }

    #[test]
    fn a_tcp_super_packet_becomes_its_segments() {
        let payload: Vec<u8> = (0..3000u32).map(|i| i as u8).collect();
        let p = tcp_v4(&payload);
        let hdr = VnetHdr {
            flags: F_NEEDS_CSUM,
            gso_type: GsoType::TcpV4,
            ecn: false,
            hdr_len: 40,
            gso_size: 1400,
            csum_start: 20,
            csum_offset: 16,
        };
        let mut segs = Vec::new();
        let n = segment(&hdr, &p, &mut Vec::new(), |s| segs.push(s.to_vec())).unwrap();
        assert_eq!(n, 3);
        let mut joined = Vec::new();
        for (i, s) in segs.iter().enumerate() {
            inspect(s).unwrap();
            assert_eq!(
                csum::ipv4_header(&s[..20]),
                u16::from_be_bytes([s[10], s[11]])
            );
            verify_l4(s, 20, TCP);
            let seq = u32::from_be_bytes([s[24], s[25], s[26], s[27]]);
            assert_eq!(seq, 0xffff_fff0u32.wrapping_add(1400 * i as u32));
            assert_eq!(s[33] & 0x01 != 0, i == 2, "FIN on the last only");
            assert_eq!(s[33] & 0x80 != 0, i == 0, "CWR on the first only");
            joined.extend_from_slice(&s[40..]);
        }
        assert_eq!(joined, payload);
    }

    #[test]
    fn nonsense_is_an_error() {
        let p = tcp_v4(&[1; 100]);
        let mut hdr = VnetHdr {
            gso_type: GsoType::TcpV4,
            gso_size: 0,
            csum_start: 20,
            ..VnetHdr::PLAIN
        };
        assert_eq!(
            segment(&hdr, &p, &mut Vec::new(), |_| {}),
            Err(GsoError::ZeroSegment)
        );
        hdr.gso_size = 10;
        hdr.csum_start = 200;
        assert_eq!(
            segment(&hdr, &p, &mut Vec::new(), |_| {}),
            Err(GsoError::Offsets)
        );
        hdr.gso_type = GsoType::Udp;
        assert_eq!(
            segment(&hdr, &p, &mut Vec::new(), |_| {}),
            Err(GsoError::Unsupported(3))
        );
    }
}
