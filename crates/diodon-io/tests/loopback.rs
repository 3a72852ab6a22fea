//! Batched UDP on loopback (IPv4 and IPv6): 10 000 datagrams with GSO and with
//! the forced `sendmmsg` fallback, every byte compared; GRO super-packets
//! split back into datagrams; `SO_RXQ_OVFL` counting receive-buffer drops.

mod common;

use std::net::SocketAddr;
use std::time::Duration;

use common::{payload, transfer, verify};
use diodon_io::{BatchReceiver, BatchSender, UdpConfig, UdpSnmp};

const COUNT: u32 = 10_000;

fn config(addr: &str) -> UdpConfig {
    let mut cfg = UdpConfig::new(addr.parse::<SocketAddr>().expect("address"));
    cfg.rcvbuf = Some(8 << 20);
    cfg.sndbuf = Some(4 << 20);
    cfg
}

fn pair(addr: &str, gso: bool, gro: bool) -> (BatchSender, BatchReceiver) {
    let mut tx_cfg = config(addr);
    tx_cfg.gso = gso;
    let mut rx_cfg = config(addr);
    rx_cfg.gro = gro;
    let tx = BatchSender::open(&tx_cfg).expect("open sender");
    let rx = BatchReceiver::open(&rx_cfg).expect("open receiver");
    for w in tx.setup().warnings.iter().chain(&rx.setup().warnings) {
        eprintln!("setup warning: {w}");
    }
    (tx, rx)
}

fn report(name: &str, t: &common::Transfer) {
    eprintln!(
        "{name}: {} datagrams in {:.3} s = {:.0} datagrams/s; gso_calls {} sendmmsg_calls {} \
         retries {} gro_packets {} socket_drops {}",
        t.received,
        t.seconds,
        t.received as f64 / t.seconds,
        t.gso_calls,
        t.sendmmsg_calls,
        t.retries,
        t.gro_packets,
        t.socket_drops
    );
}

#[test]
fn ipv4_gso_10k_datagrams_every_byte() {
    let (tx, rx) = pair("127.0.0.1:0", true, true);
    let t = transfer(tx, rx, COUNT, 1200, 64);
    report("ipv4 gso", &t);
    assert_eq!(t.sent, u64::from(COUNT));
    assert_eq!(t.received, u64::from(COUNT));
    assert!(t.gso_calls > 0, "GSO was not used");
    assert_eq!(t.sendmmsg_calls, 0);
}

#[test]
fn ipv4_sendmmsg_fallback_10k_datagrams_every_byte() {
    let (tx, rx) = pair("127.0.0.1:0", false, false);
    assert!(!tx.gso_enabled());
    let t = transfer(tx, rx, COUNT, 1200, 64);
    report("ipv4 sendmmsg", &t);
    assert_eq!(t.received, u64::from(COUNT));
    assert_eq!(t.gso_calls, 0);
    assert!(t.sendmmsg_calls > 0);
    assert_eq!(t.gro_packets, 0);
}

#[test]
fn ipv4_large_buffers_are_split_per_call() {
    // 200 datagrams per buffer: more than one GSO call (≤ 64 segments) each.
    let (tx, rx) = pair("127.0.0.1:0", true, true);
    let t = transfer(tx, rx, 2_000, 1000, 200);
    assert_eq!(t.received, 2_000);
    assert!(t.gso_calls >= 2_000 / 64, "{t:?}");
}

#[test]
fn ipv6_gso_and_sendmmsg() {
    for gso in [true, false] {
        let (tx, rx) = pair("[::1]:0", gso, gso);
        let t = transfer(tx, rx, COUNT, 1200, 64);
        report(if gso { "ipv6 gso" } else { "ipv6 sendmmsg" }, &t);
        assert_eq!(t.received, u64::from(COUNT));
        assert_eq!(t.gso_calls > 0, gso);
    }
}

#[test]
fn datagrams_gathered_from_pieces_arrive_whole() {
    for gso in [true, false] {
        let (mut tx, mut rx) = pair("127.0.0.1:0", gso, gso);
        // 100 datagrams of 1000 bytes (the last 500), each cut in three
        // pieces where they lie: more than one GSO call, and every shape
        // of piece (an empty middle, an empty tail).
        let mut whole = Vec::new();
        for seq in 0..100 {
            payload(seq, if seq == 99 { 500 } else { 1000 }, &mut whole);
        }
        let mut pieces: Vec<&[u8]> = Vec::new();
        for (i, d) in whole.chunks(1000).enumerate() {
            let (head, rest) = d.split_at(50);
            let cut = match i % 3 {
                0 => rest.len() - 4,
                1 => 0,
                _ => rest.len(),
            };
            let (middle, tail) = rest.split_at(cut);
            pieces.extend([head, middle, tail]);
        }
        let dest = rx.local_addr();
        let report = tx.send_pieces(dest, &pieces, 3, 1000).expect("send");
        assert_eq!(report.datagrams, 100);
        assert_eq!(report.bytes, whole.len() as u64);
        let mut got = 0;
        while got < 100 {
            let batch = rx.recv_batch(Some(Duration::from_secs(2))).expect("recv");
            assert!(!batch.is_empty(), "timed out after {got} datagrams");
            for (i, d) in batch.iter().enumerate() {
                let seq = got + i;
                let want = &whole[seq * 1000..whole.len().min((seq + 1) * 1000)];
                assert_eq!(d.data, want, "datagram {seq} (gso {gso})");
            }
            got += batch.len();
        }
        assert_eq!(tx.counters().gso_calls > 0, gso);
    }
}

#[test]
fn an_uneven_batch_is_refused_before_anything_is_sent() {
    let (mut tx, rx) = pair("127.0.0.1:0", true, true);
    let short = [0u8; 900];
    let full = [0u8; 1000];
    let pieces: Vec<&[u8]> = vec![&full, &short, &full];
    let err = tx
        .send_pieces(rx.local_addr(), &pieces, 1, 1000)
        .expect_err("a short datagram before the last");
    assert!(
        err.to_string()
            .contains("datagram 1 of the batch is 900 bytes, not the segment size 1000"),
        "{err}"
    );
    assert_eq!(tx.counters().datagrams, 0);
}

#[test]
fn gro_super_packets_are_split() {
    let (mut tx, mut rx) = pair("127.0.0.1:0", true, true);
    assert!(rx.setup().gro, "UDP_GRO refused: {:?}", rx.setup().warnings);
    let mut buf = Vec::new();
    for seq in 0..64 {
        payload(seq, if seq == 63 { 500 } else { 1000 }, &mut buf);
    }
    let dest = rx.local_addr();
    tx.send(dest, &buf, 1000).expect("send");
    let mut got = 0;
    while got < 64 {
        let batch = rx.recv_batch(Some(Duration::from_secs(2))).expect("recv");
        assert!(!batch.is_empty(), "timed out after {got} datagrams");
        for (i, d) in batch.iter().enumerate() {
            assert_eq!(verify(d.data), got + i as u32);
            assert_eq!(d.src, tx.local_addr());
        }
        got += batch.len() as u32;
    }
    let c = rx.counters();
    eprintln!("gro: {c:?}");
    assert!(c.gro_packets >= 1, "no GRO super-packet arrived: {c:?}");
    assert_eq!(c.datagrams, 64);
    assert_eq!(c.bytes, buf.len() as u64);
}

#[test]
fn recv_batch_times_out_empty() {
    let (_tx, mut rx) = pair("127.0.0.1:0", true, true);
    assert!(rx
        .recv_batch(Some(Duration::ZERO))
        .expect("recv")
        .is_empty());
    assert!(rx
        .recv_batch(Some(Duration::from_millis(20)))
        .expect("recv")
        .is_empty());
}

#[test]
fn rxq_ovfl_counts_receive_buffer_drops() {
    let mut rx_cfg = UdpConfig::new("127.0.0.1:0".parse().expect("address"));
    rx_cfg.rcvbuf = Some(4096);
    rx_cfg.gro = false;
    let mut rx = BatchReceiver::open(&rx_cfg).expect("receiver");
    assert!(rx.setup().rxq_ovfl);
    let mut tx_cfg = UdpConfig::new("127.0.0.1:0".parse().expect("address"));
    tx_cfg.gso = false;
    let mut tx = BatchSender::open(&tx_cfg).expect("sender");
    let dest = rx.local_addr();
    let before = UdpSnmp::read().expect("snmp");

    // Overflow: 2000 datagrams into a ~4 KiB buffer nobody reads.
    let mut buf = Vec::new();
    for seq in 0..2_000 {
        payload(seq, 1000, &mut buf);
    }
    tx.send(dest, &buf, 1000).expect("send");
    let kernel_drops = rx.socket_drops_now().expect("SO_MEMINFO");
    let mut delivered = 0;
    loop {
        let batch = rx
            .recv_batch(Some(Duration::from_millis(50)))
            .expect("recv");
        if batch.is_empty() {
            break;
        }
        delivered += batch.len() as u64;
    }
    // The drop count rides on the next datagram that gets through.
    buf.clear();
    payload(2_000, 100, &mut buf);
    tx.send(dest, &buf, 100).expect("send");
    let batch = rx.recv_batch(Some(Duration::from_secs(2))).expect("recv");
    assert_eq!(batch.len(), 1);
    let after = UdpSnmp::read().expect("snmp");
    let drops = rx.socket_drops();
    eprintln!(
        "rcvbuf {} B: delivered {delivered}, SO_RXQ_OVFL drops {drops}, SO_MEMINFO drops {kernel_drops}, \
         RcvbufErrors +{}",
        rx.setup().rcvbuf,
        after.delta(&before).rcvbuf_errors
    );
    assert!(drops > 0, "SO_RXQ_OVFL reported no drops");
    assert_eq!(
        delivered + drops,
        2_000,
        "every datagram is delivered or counted"
    );
    assert_eq!(drops, kernel_drops);
    assert!(after.delta(&before).rcvbuf_errors >= drops);
}

#[test]
fn buffer_requests_report_effective_size() {
    let mut cfg = UdpConfig::new("127.0.0.1:0".parse().expect("address"));
    cfg.rcvbuf = Some(64 << 20); // above the usual rmem_max: only forced with CAP_NET_ADMIN
    let rx = BatchReceiver::open(&cfg).expect("receiver");
    let s = rx.setup();
    eprintln!(
        "rcvbuf requested 64 MiB, effective {} B, warnings {:?}",
        s.rcvbuf, s.warnings
    );
    if s.rcvbuf < 64 << 20 {
        assert!(s.warnings.iter().any(|w| w
            .to_string()
            .contains("sysctl -w net.core.rmem_max=67108864")));
    } else {
        assert!(s.warnings.is_empty());
    }
}

/// Throughput probe, not a pass/fail test: `cargo test -p diodon-io --test
/// loopback -- --ignored --nocapture throughput`.
#[test]
#[ignore = "measurement; run by hand"]
fn throughput_gso_vs_sendmmsg() {
    for (name, gso) in [("gso+gro", true), ("sendmmsg", false)] {
        let (tx, rx) = pair("127.0.0.1:0", gso, gso);
        let t = transfer(tx, rx, 200_000, 1472, 64);
        report(name, &t);
        eprintln!(
            "{name}: {:.2} Gbit/s payload",
            t.received as f64 * 1472.0 * 8.0 / t.seconds / 1e9
        );
        assert_eq!(t.received, 200_000);
    }
}
