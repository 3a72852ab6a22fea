//! Link settings every front end resolves the same way: the
//! receive buffer a rate and a tolerated stall need, and the
//! socket of the UDP-flow source (sized like the receiver's, so a burst from
//! the source waits in the kernel while the link catches up).
//!
//! ```text
//!  --rate, --stall  ─► rcvbuf_for ─► SO_RCVBUF bytes (4 MiB ..= 1 GiB)
//!  --udp-listen     ─► udp_source_options ─► UdpSourceOptions (rcvbuf = rate × 250 ms)
//! ```

use crate::udp_flow::UdpSourceOptions;
use diodon_io::UdpConfig;
use diodon_proto::Rate;
use std::net::SocketAddr;
use std::time::Duration;

/// Receive buffer for `rate` and a tolerated stall, 4 MiB ..= 1 GiB
/// (unlimited rate counts as 10 Gbit/s).
pub fn rcvbuf_for(rate: Rate, stall: Duration) -> usize {
    let bps = if rate.is_unlimited() {
        10_000_000_000
    } else {
        rate.bps()
    };
    let bytes = (bps as f64 / 8.0 * stall.as_secs_f64()) as usize;
    bytes.clamp(4 << 20, 1 << 30)
}

/// The UDP-flow source's options for `--udp-listen addr` (GRO off: one
/// datagram per slot; a flow silent for `idle` is finished).
pub fn udp_source_options(addr: SocketAddr, rate: Rate, idle: Duration) -> UdpSourceOptions {
    let mut udp = UdpConfig::new(addr);
    udp.rcvbuf = Some(rcvbuf_for(rate, Duration::from_millis(250)));
    udp.gro = false;
    UdpSourceOptions {
        udp,
        idle: idle.max(Duration::from_millis(1)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rcvbuf_scales_with_rate() {
        let r = |s: &str| s.parse::<Rate>().expect("rate");
        assert_eq!(
            rcvbuf_for(r("1gbit"), Duration::from_millis(250)),
            31_250_000
        );
        assert_eq!(rcvbuf_for(r("10mbit"), Duration::from_millis(250)), 4 << 20);
        assert_eq!(rcvbuf_for(r("unlimited"), Duration::from_secs(10)), 1 << 30);
    }
}
