//! `diodon send --udp-listen`: settings of the UDP-flow source (the
//! listening socket's buffer is sized like the receiver's, so a burst from
//! the source waits in the kernel while the link catches up).
//!
//! ```text
//!  --udp-listen ADDR ─► UdpSourceOptions { socket: rcvbuf = rate × 250 ms, idle }
//! ```

use crate::config::{rcvbuf_for, Link};
use diodon_apps::udp_flow::UdpSourceOptions;
use diodon_io::UdpConfig;
use std::net::SocketAddr;
use std::time::Duration;

/// The UDP source's options for `--udp-listen addr`.
pub fn source_options(addr: SocketAddr, link: &Link, idle_ms: u64) -> UdpSourceOptions {
    let mut udp = UdpConfig::new(addr);
    udp.rcvbuf = Some(rcvbuf_for(link.rate, Duration::from_millis(250)));
    udp.gro = false;
    UdpSourceOptions {
        udp,
        idle: Duration::from_millis(idle_ms.max(1)),
    }
}
