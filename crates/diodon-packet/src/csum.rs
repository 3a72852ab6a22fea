//! The Internet checksum (RFC 1071) and the pseudo-headers of TCP and UDP
//! over IPv4 and IPv6.

/// One's-complement sum of `data` (big-endian 16-bit words, odd byte padded)
/// added to `acc`, not folded.
pub fn sum(mut acc: u64, data: &[u8]) -> u64 {
    let mut chunks = data.chunks_exact(2);
    for c in &mut chunks {
        acc += u64::from(u16::from_be_bytes([c[0], c[1]]));
    }
    if let [last] = chunks.remainder() {
        acc += u64::from(*last) << 8;
    }
    acc
}

/// Folds a sum to 16 bits and complements it.
pub fn finish(mut acc: u64) -> u16 {
    while acc >> 16 != 0 {
        acc = (acc & 0xffff) + (acc >> 16);
    }
    !(acc as u16)
}

/// The IPv4 header checksum of `header` (its checksum field is skipped).
pub fn ipv4_header(header: &[u8]) -> u16 {
    let acc = sum(sum(0, &header[..10]), &header[12..]);
    finish(acc)
}

/// Sum of the pseudo-header of an L4 segment of `l4_len` bytes, protocol
/// `proto`, inside the IP packet whose header starts `packet`.
pub fn pseudo(packet: &[u8], proto: u8, l4_len: usize) -> u64 {
    let acc = if packet[0] >> 4 == 4 {
        sum(0, &packet[12..20])
    } else {
        sum(0, &packet[8..40])
    };
    acc + u64::from(proto) + l4_len as u64
}

/// The full L4 checksum of `l4` (checksum field at `field` zeroed in the
/// sum) for the packet whose IP header starts `packet`.
pub fn l4(packet: &[u8], proto: u8, l4: &[u8], field: usize) -> u16 {
    let acc = pseudo(packet, proto, l4.len());
    let acc = sum(sum(acc, &l4[..field]), &l4[field + 2..]);
    let c = finish(acc);
    // UDP sends a computed 0 as 0xffff (0 means "no checksum").
    if proto == 17 && c == 0 {
        0xffff
    } else {
        c
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rfc1071_example() {
        // RFC 1071 § 3: 0001 f203 f4f5 f6f7 sums to ddf2 (complement 220d).
        assert_eq!(
            finish(sum(0, &[0x00, 0x01, 0xf2, 0x03, 0xf4, 0xf5, 0xf6, 0xf7])),
            0x220d
        );
        assert_eq!(finish(sum(0, &[0xff])), !0xff00);
    }
}
