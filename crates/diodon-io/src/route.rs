//! Which interface carries traffic to a peer, and whether it can now: the
//! longest matching prefix in the kernel's routing tables
//! (`/proc/thread-self/net/route`, `…/ipv6_route`) of the calling thread's
//! network namespace, and that interface's flags (`IFF_UP`, `IFF_RUNNING`).
//! The metrics exporter uses it to name the link's interface; a sender
//! driving several links uses [`path_state`] to tell a link that is down.

use std::net::IpAddr;

/// Whether the path to a peer can carry datagrams now.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PathState {
    /// The interface is up and has a carrier.
    Up(String),
    /// No route leads to the peer.
    NoRoute,
    /// The interface is administratively down.
    Down(String),
    /// The interface is up but has no carrier (cable, peer or diode gone).
    NoCarrier(String),
    /// The interface is gone.
    Missing(String),
}

impl PathState {
    /// Whether datagrams can leave.
    pub fn is_up(&self) -> bool {
        matches!(self, PathState::Up(_))
    }
}

impl std::fmt::Display for PathState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            PathState::Up(i) => write!(f, "interface {i} is up"),
            PathState::NoRoute => f.write_str("no route leads to the receiver"),
            PathState::Down(i) => write!(f, "interface {i} is down"),
            PathState::NoCarrier(i) => write!(f, "interface {i} has no carrier"),
            PathState::Missing(i) => write!(f, "interface {i} is gone"),
        }
    }
}

/// The state of the path to `peer` in the calling thread's namespace: the
/// interface `device` names (a socket bound to one) or the one the routing
/// tables choose, and that interface's flags.
pub fn path_state(peer: IpAddr, device: Option<&str>) -> PathState {
    path_state_with(peer, device, crate::tun::interface_flags)
}

/// [`path_state`] with the flags read through `flags` (a sender asks
/// through its own socket: `BatchSender::path_state`).
pub(crate) fn path_state_with(
    peer: IpAddr,
    device: Option<&str>,
    flags: impl Fn(&str) -> std::io::Result<libc::c_int>,
) -> PathState {
    let Some(name) = device.map(str::to_owned).or_else(|| route_interface(peer)) else {
        return PathState::NoRoute;
    };
    match flags(&name) {
        Err(_) => PathState::Missing(name),
        Ok(flags) if flags & libc::IFF_UP == 0 => PathState::Down(name),
        Ok(flags) if flags & libc::IFF_RUNNING == 0 => PathState::NoCarrier(name),
        Ok(_) => PathState::Up(name),
    }
}

/// A routing table of the calling thread's namespace (`/proc/net` shows
/// the process leader's, which a thread that entered a namespace does not
/// share).
fn routing_table(file: &str) -> Option<String> {
    std::fs::read_to_string(format!("/proc/thread-self/net/{file}"))
        .or_else(|_| std::fs::read_to_string(format!("/proc/net/{file}")))
        .ok()
}

/// The interface the kernel would use to reach `peer` (longest prefix in
/// the `route` or `ipv6_route` table); for a local or unspecified
/// address the first interface that is not `lo` with a matching route.
pub fn route_interface(peer: IpAddr) -> Option<String> {
    if peer.is_loopback() {
        return Some("lo".into());
    }
    match peer {
        IpAddr::V4(a) => {
            let text = routing_table("route")?;
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
            let text = routing_table("ipv6_route")?;
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn loopback_is_up_and_a_missing_device_is_gone() {
        let lo: IpAddr = "127.0.0.1".parse().expect("address");
        assert_eq!(path_state(lo, None), PathState::Up("lo".into()));
        let gone = path_state(lo, Some("dd-nosuch0"));
        assert_eq!(gone, PathState::Missing("dd-nosuch0".into()));
        assert!(!gone.is_up());
        assert_eq!(gone.to_string(), "interface dd-nosuch0 is gone");
    }
}
