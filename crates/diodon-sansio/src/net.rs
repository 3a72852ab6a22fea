//! [`IpVersion`]: what a datagram costs on the wire besides its payload
//! (IP + UDP headers), which every core needs to size its datagrams for a
//! path MTU without fragmenting (DESIGN principle 5) and its pacer to count
//! wire bytes.

use std::net::SocketAddr;

/// IP version of the path, which fixes the IP + UDP header overhead.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum IpVersion {
    /// 20-byte IP header + 8-byte UDP header.
    V4,
    /// 40-byte IP header + 8-byte UDP header.
    V6,
}

impl IpVersion {
    /// The version of the headers a datagram to `addr` carries.
    pub fn of(addr: SocketAddr) -> IpVersion {
        if addr.is_ipv6() {
            IpVersion::V6
        } else {
            IpVersion::V4
        }
    }

    /// IP + UDP header bytes.
    pub fn overhead(self) -> usize {
        match self {
            IpVersion::V4 => 28,
            IpVersion::V6 => 48,
        }
    }

    /// The largest UDP payload that crosses a path of `mtu` bytes unfragmented
    /// (`None` if the MTU leaves no room).
    pub fn max_payload(self, mtu: usize) -> Option<usize> {
        mtu.checked_sub(self.overhead()).filter(|p| *p > 0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn overhead_follows_the_address_family() {
        let v4: SocketAddr = "192.0.2.1:9".parse().expect("test");
        let v6: SocketAddr = "[2001:db8::1]:9".parse().expect("test");
        assert_eq!(IpVersion::of(v4).max_payload(1500), Some(1472));
        assert_eq!(IpVersion::of(v6).max_payload(1500), Some(1452));
        assert_eq!(IpVersion::V4.max_payload(28), None);
    }
}
