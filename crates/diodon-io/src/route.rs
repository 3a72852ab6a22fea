//! Which interface carries traffic to a peer: the longest matching prefix in
//! the kernel's routing tables (`/proc/net/route`, `/proc/net/ipv6_route`)
//! of the calling thread's network namespace. The metrics exporter uses it
//! to name the link's interface.

use std::net::IpAddr;

/// The interface the kernel would use to reach `peer` (longest prefix in
/// `/proc/net/route` or `/proc/net/ipv6_route`); for a local or unspecified
/// address the first interface that is not `lo` with a matching route.
pub fn route_interface(peer: IpAddr) -> Option<String> {
    if peer.is_loopback() {
        return Some("lo".into());
    }
    match peer {
        IpAddr::V4(a) => {
            let text = std::fs::read_to_string("/proc/net/route").ok()?;
            let ip = u32::from(a);
            let mut best: Option<(u32, String)> = None;
            for line in text.lines().skip(1) {
                let f: Vec<&str> = line.split_whitespace().collect();
                if f.len() < 8 {
                    continue;
                }
                // The kernel prints the network-order word as a native u32.
                let word = |h: &str| {
                    u32::from_str_radix(h, 16)
                        .ok()
                        .map(|v| u32::from_be_bytes(v.to_ne_bytes()))
                };
                let (Some(dest), Some(mask)) = (word(f[1]), word(f[7])) else {
                    continue;
                };
                if (ip & mask == dest || a.is_unspecified())
                    && best
                        .as_ref()
                        .is_none_or(|(m, _)| mask.count_ones() > m.count_ones())
                    && f[0] != "lo"
                {
                    best = Some((mask, f[0].to_owned()));
                }
            }
            best.map(|(_, n)| n)
        }
        IpAddr::V6(a) => {
            let text = std::fs::read_to_string("/proc/net/ipv6_route").ok()?;
            let ip = u128::from(a);
            let mut best: Option<(u32, String)> = None;
            for line in text.lines() {
                let f: Vec<&str> = line.split_whitespace().collect();
                if f.len() < 10 || f[9] == "lo" {
                    continue;
                }
                let dest = u128::from_str_radix(f[0], 16).ok()?;
                let plen = u32::from_str_radix(f[1], 16).ok()?;
                let mask = if plen == 0 {
                    0
                } else {
                    u128::MAX << (128 - plen.min(128))
                };
                if (ip & mask == dest || a.is_unspecified())
                    && best.as_ref().is_none_or(|(p, _)| plen > *p)
                {
                    best = Some((plen, f[9].to_owned()));
                }
            }
            best.map(|(_, n)| n)
        }
    }
}
