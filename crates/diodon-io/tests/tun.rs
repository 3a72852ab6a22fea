//! TUN devices in a throwaway network namespace: multi-queue with the
//! virtio-net header and offloads, the interface's drop counter when nobody
//! reads (every packet routed in is either read or counted in `tx_dropped`),
//! and the backpressure probe. Needs root and `ip netns`; skips with a
//! message otherwise, fails instead when `CI=true`.

use diodon_io::netns;
use diodon_io::tun::{self, Backpressure, Offload, Tun, TunConfig, VNET_HDR_LEN};
use diodon_testkit::{require_netns, run, Namespace};
use std::net::UdpSocket;
use std::time::Duration;

fn namespace(tag: &str) -> Namespace {
    let ns = Namespace::new(&format!("dtun-{tag}-{}", std::process::id()));
    run(&[
        "ip",
        "netns",
        "exec",
        ns.name(),
        "sysctl",
        "-q",
        "-w",
        "net.ipv6.conf.default.disable_ipv6=1",
    ]);
    ns
}

#[test]
fn every_packet_routed_into_a_starved_tun_is_read_or_counted_as_dropped() {
    if !require_netns("every_packet_routed_into_a_starved_tun_is_read_or_counted_as_dropped") {
        return;
    }
    let ns = namespace("drop");
    let name = ns.name().to_owned();
    let handle = netns::spawn_in(&name.clone(), move || {
        assert!(Tun::features().unwrap().multi_queue());
        let queues = Tun::open_queues(&TunConfig {
            name: "dt0".into(),
            queues: 2,
            vnet_hdr: true,
            offload: Offload::ALL,
        })
        .unwrap();
        assert_eq!(queues.len(), 2);
        assert!(queues[0]
            .offload()
            .contains(Offload::CSUM.with(Offload::TSO4)));
        tun::set_txqueuelen("dt0", 8).unwrap();
        assert_eq!(tun::txqueuelen("dt0").unwrap(), 8);
        tun::set_mtu("dt0", 1400).unwrap();
        run(&[
            "ip",
            "-n",
            &name,
            "addr",
            "add",
            "10.99.0.1/24",
            "dev",
            "dt0",
        ]);
        tun::set_up("dt0").unwrap();
        let before = tun::tx_dropped("dt0").unwrap();
        let sock = UdpSocket::bind("10.99.0.1:0").unwrap();
        let sent = 200u64;
        for i in 0..sent {
            sock.send_to(&i.to_be_bytes(), "10.99.0.2:9").unwrap();
        }
        let mut read = 0u64;
        let mut buf = vec![0u8; tun::MAX_READ];
        for q in &queues {
            while let Some(n) = q.recv(&mut buf, Duration::from_millis(100)).unwrap() {
                assert!(n > VNET_HDR_LEN + 20, "header and packet");
                read += 1;
            }
        }
        let dropped = tun::tx_dropped("dt0").unwrap() - before;
        (sent, read, dropped, tun::probe_backpressure("dprobe0"))
    })
    .unwrap();
    let (sent, read, dropped, probe) = handle.join().unwrap().unwrap();
    eprintln!("sent {sent}, read {read}, tx_dropped {dropped}, probe {probe:?}");
    assert_eq!(read + dropped, sent, "nothing vanishes uncounted");
    let probe = probe.unwrap();
    if probe == Backpressure::Drops {
        assert!(dropped > 0, "a ring of 8 cannot hold 200 packets");
        assert!(read <= 16, "two rings of 8 at most");
    } else {
        assert_eq!(dropped, 0);
    }
}
