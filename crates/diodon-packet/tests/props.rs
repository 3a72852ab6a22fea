//! Property tests of the packet logic: GSO super-packets of TCP and UDP over
//! IPv4 and IPv6 become valid packets that carry exactly the original
//! payload, in order; partial checksums are finished correctly; no input
//! makes any function panic (the fuzz target's invariants on random bytes).

use diodon_packet::csum;
use diodon_packet::vnet::{GsoType, VnetHdr, F_NEEDS_CSUM};
use diodon_packet::{inspect, segment};
use proptest::prelude::*;

/// A super-packet: IP header (v4 or v6), TCP (20 B) or UDP (8 B) header,
/// payload; lengths set, checksums left for the reader (pseudo-header sum in
/// the field, as the kernel does for `CHECKSUM_PARTIAL`).
fn super_packet(v6: bool, tcp: bool, payload: &[u8]) -> (Vec<u8>, usize) {
    let ip = if v6 { 40 } else { 20 };
    let l4h = if tcp { 20 } else { 8 };
    let mut p = vec![0u8; ip + l4h];
    let proto = if tcp { 6 } else { 17 };
    if v6 {
        p[0] = 0x60;
        p[6] = proto;
        p[7] = 64;
        p[8] = 0xfd;
        p[23] = 1;
        p[24] = 0xfd;
        p[39] = 2;
    } else {
        p[0] = 0x45;
        p[8] = 64;
        p[9] = proto;
        p[12..16].copy_from_slice(&[10, 0, 0, 1]);
        p[16..20].copy_from_slice(&[239, 0, 0, 9]);
    }
    p[ip..ip + 2].copy_from_slice(&4000u16.to_be_bytes());
    p[ip + 2..ip + 4].copy_from_slice(&5004u16.to_be_bytes());
    if tcp {
        p[ip + 12] = 5 << 4;
        p[ip + 13] = 0x18;
    }
    p.extend_from_slice(payload);
    let len = p.len();
    if v6 {
        p[4..6].copy_from_slice(&((len - 40) as u16).to_be_bytes());
    } else {
        p[2..4].copy_from_slice(&(len as u16).to_be_bytes());
    }
    if !tcp {
        p[ip + 4..ip + 6].copy_from_slice(&((len - ip) as u16).to_be_bytes());
    }
    (p, ip)
}

fn l4_valid(seg: &[u8], l4: usize, proto: u8) -> bool {
    let acc = csum::pseudo(seg, proto, seg.len() - l4);
    csum::finish(csum::sum(acc, &seg[l4..])) == 0
}

proptest! {
    #[test]
    fn segments_carry_the_payload_in_order(
        v6 in any::<bool>(),
        tcp in any::<bool>(),
        payload in prop::collection::vec(any::<u8>(), 1..6000),
        mss in 1usize..1500,
    ) {
        let (p, ip) = super_packet(v6, tcp, &payload);
        let proto = if tcp { 6 } else { 17 };
        let l4h = if tcp { 20 } else { 8 };
        let gso_type = match (tcp, v6) {
            (true, false) => GsoType::TcpV4,
            (true, true) => GsoType::TcpV6,
            (false, _) => GsoType::UdpL4,
        };
        let hdr = VnetHdr {
            flags: F_NEEDS_CSUM,
            gso_type,
            ecn: false,
            hdr_len: (ip + l4h) as u16,
            gso_size: mss as u16,
            csum_start: ip as u16,
            csum_offset: if tcp { 16 } else { 6 },
        };
        let mut joined = Vec::new();
        let mut ok = true;
        let n = segment(&hdr, &p, &mut Vec::new(), |s| {
            ok &= inspect(s).is_ok() && s.len() <= ip + l4h + mss && l4_valid(s, ip, proto);
            if !v6 {
                ok &= csum::ipv4_header(&s[..20]) == u16::from_be_bytes([s[10], s[11]]);
            }
            joined.extend_from_slice(&s[ip + l4h..]);
        }).unwrap();
        prop_assert!(ok);
        prop_assert_eq!(n, payload.len().div_ceil(mss));
        prop_assert_eq!(joined, payload);
    }

    #[test]
    fn a_partial_checksum_is_finished(v6 in any::<bool>(), payload in prop::collection::vec(any::<u8>(), 0..3000)) {
        let (mut p, ip) = super_packet(v6, false, &payload);
        // CHECKSUM_PARTIAL: the field holds the folded pseudo-header sum.
        let partial = !csum::finish(csum::pseudo(&p, 17, p.len() - ip));
        p[ip + 6..ip + 8].copy_from_slice(&partial.to_be_bytes());
        let hdr = VnetHdr { flags: F_NEEDS_CSUM, csum_start: ip as u16, csum_offset: 6, ..VnetHdr::PLAIN };
        let mut out = Vec::new();
        segment(&hdr, &p, &mut Vec::new(), |s| out = s.to_vec()).unwrap();
        prop_assert!(l4_valid(&out, ip, 17));
    }

    #[test]
    fn no_input_panics(hdr in prop::collection::vec(any::<u8>(), 10), packet in prop::collection::vec(any::<u8>(), 0..300)) {
        diodon_packet::fuzz(&[hdr, packet].concat());
    }
}
