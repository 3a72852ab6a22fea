//! One UDP socket for both directions, for a protocol with a return path
//! (Delta-t): [`open_duplex`] gives its sending half ([`BatchSender`]:
//! GSO, no-loss retry on a full queue, `IP_RECVERR`) and its receiving half
//! ([`BatchReceiver`]: `recvmmsg` + GRO, drop counter), each on its own
//! descriptor of the same socket so they can live on different threads.
//!
//! ```text
//!   socket (bound once) ──dup──▶ BatchSender   (app threads, under the driver's lock)
//!                       └──────▶ BatchReceiver (the driver thread)
//! ```
//!
//! With `IP_RECVERR` on, an ICMP error for something sent is reported by
//! the next receive; the receiving half reads it off the error queue,
//! counts it and carries on.

use super::config::{UdpConfig, UdpError};
use super::recv::{check_slots, BatchReceiver};
use super::send::BatchSender;
use super::sys::{open_socket, Role};

/// Opens and binds one socket for sending and receiving (every option of
/// both sides) and returns its two halves.
pub fn open_duplex(cfg: &UdpConfig) -> Result<(BatchSender, BatchReceiver), UdpError> {
    check_slots(cfg)?;
    let (fd, setup) = open_socket(cfg, Role::Duplex)?;
    let receiving = fd
        .try_clone()
        .map_err(|source| UdpError::Sys { op: "dup", source })?;
    let rx = BatchReceiver::from_socket(receiving, setup.clone(), cfg);
    Ok((BatchSender::from_socket(fd, setup, cfg), rx))
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    #[test]
    fn both_halves_share_one_address_and_reach_each_other() {
        let cfg = UdpConfig::new("127.0.0.1:0".parse().expect("test"));
        let (mut a_tx, mut a_rx) = open_duplex(&cfg).expect("duplex a");
        let (mut b_tx, mut b_rx) = open_duplex(&cfg).expect("duplex b");
        assert_eq!(a_tx.local_addr(), a_rx.local_addr());
        assert!(a_tx.setup().recverr && a_rx.setup().rxq_ovfl);
        a_tx.send(b_rx.local_addr(), b"ping", 4).expect("send");
        let got = b_rx.recv_batch(Some(Duration::from_secs(2))).expect("recv");
        let d = got.iter().next().expect("a datagram");
        assert_eq!((d.src, d.data), (a_tx.local_addr(), &b"ping"[..]));
        b_tx.send(d.src, b"pong", 4).expect("reply");
        let got = a_rx.recv_batch(Some(Duration::from_secs(2))).expect("recv");
        assert_eq!(got.iter().next().map(|d| d.data), Some(&b"pong"[..]));
    }

    #[test]
    fn an_icmp_error_is_read_off_and_counted_not_returned() {
        // A port nobody listens on: the kernel answers with ICMP port
        // unreachable, which IP_RECVERR reports to the next receive.
        let cfg = UdpConfig::new("127.0.0.1:0".parse().expect("test"));
        let (mut tx, mut rx) = open_duplex(&cfg).expect("duplex");
        let closed = {
            let (probe, _) = open_duplex(&cfg).expect("probe");
            probe.local_addr()
        };
        tx.send(closed, b"anyone?", 7).expect("send");
        std::thread::sleep(Duration::from_millis(50));
        let got = rx
            .recv_batch(Some(Duration::from_millis(100)))
            .expect("no error");
        assert!(got.is_empty());
        assert!(rx.counters().error_queue >= 1, "{:?}", rx.counters());
    }
}
