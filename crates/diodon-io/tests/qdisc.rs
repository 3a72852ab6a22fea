//! The shaper in front of a TUN, on a real kernel in a throwaway network
//! namespace: installed over rtnetlink it is what `tc` shows, its drop
//! count is the kernel's, and with a limit above the sender's socket buffer
//! a burst into a short TUN ring is held and the sender blocks: nothing is
//! dropped anywhere. Needs root and `ip netns`; skips with a message
//! otherwise, fails instead when `CI=true`.
#![expect(clippy::unwrap_used, reason = "test helpers fail loudly")]

use diodon_io::netns;
use diodon_io::qdisc::{qdisc_stats, set_shaper, QdiscWatch, Shaper};
use diodon_io::tun::{self, Tun, TunConfig};
use diodon_testkit::{require_netns, run, Namespace};
use std::net::UdpSocket;
use std::process::Command;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

fn tun_in(ns: &str, txqueuelen: u32) -> Tun {
    // No IPv6 on the TUN: its router solicitations would be counted too.
    run(&[
        "ip",
        "netns",
        "exec",
        ns,
        "sysctl",
        "-q",
        "-w",
        "net.ipv6.conf.default.disable_ipv6=1",
    ]);
    let mut q = Tun::open_queues(&TunConfig {
        name: "dq0".into(),
        queues: 1,
        vnet_hdr: false,
        offload: tun::Offload::default(),
    })
    .unwrap();
    tun::set_txqueuelen("dq0", txqueuelen).unwrap();
    run(&["ip", "-n", ns, "addr", "add", "10.98.0.1/24", "dev", "dq0"]);
    tun::set_up("dq0").unwrap();
    q.remove(0)
}

fn tc_show(ns: &str) -> String {
    let out = Command::new("ip")
        .args([
            "netns", "exec", ns, "tc", "-s", "qdisc", "show", "dev", "dq0",
        ])
        .output()
        .unwrap();
    String::from_utf8_lossy(&out.stdout).into_owned()
}

#[test]
fn the_shaper_is_what_tc_shows_and_its_drops_are_the_kernels() {
    if !require_netns("the_shaper_is_what_tc_shows_and_its_drops_are_the_kernels") {
        return;
    }
    let ns = Namespace::new(&format!("dqd-{}", std::process::id()));
    let name = ns.name().to_owned();
    let (stats, sent, shown) = netns::spawn_in(&name.clone(), move || {
        let _tun = tun_in(&name, 8);
        // 1 Mbit/s, 3000 bytes back to back, 20 kB may wait: a 200 kB burst
        // from a socket whose buffer is larger than the limit overflows it.
        set_shaper(
            "dq0",
            Shaper {
                rate_bytes_per_sec: 125_000,
                burst_bytes: 3000,
                limit_bytes: 20_000,
            },
        )
        .unwrap();
        let sock = UdpSocket::bind("10.98.0.1:0").unwrap();
        let sent = 200u64;
        for i in 0..sent {
            let mut p = vec![0u8; 1000];
            p[..8].copy_from_slice(&i.to_be_bytes());
            sock.send_to(&p, "10.98.0.2:9").unwrap();
        }
        // Read while the TUN is open (it goes with its last descriptor).
        let stats = QdiscWatch::open("dq0").unwrap().read().unwrap();
        (stats, sent, tc_show(&name))
    })
    .unwrap()
    .join()
    .unwrap()
    .unwrap();
    eprintln!("{stats:?}\n{shown}");
    assert_eq!(stats.kind, "tbf");
    assert!(
        shown.contains("qdisc tbf") && shown.contains("rate 1Mbit"),
        "{shown}"
    );
    assert!(stats.drops > 100, "20 kB cannot hold 200 kB: {stats:?}");
    assert!(
        shown.contains(&format!("dropped {}", stats.drops)),
        "tc agrees on the drops: {shown}"
    );
    // Every datagram is passed on, waiting, or counted as dropped.
    let waiting = stats.backlog_bytes / 1028;
    assert_eq!(stats.packets + waiting + stats.drops, sent, "{stats:?}");
}

#[test]
fn a_burst_into_a_short_ring_waits_in_the_shaper_and_the_sender_blocks_instead_of_losing() {
    if !require_netns(
        "a_burst_into_a_short_ring_waits_in_the_shaper_and_the_sender_blocks_instead_of_losing",
    ) {
        return;
    }
    let ns = Namespace::new(&format!("dqb-{}", std::process::id()));
    let name = ns.name().to_owned();
    let (read, sent, tx_dropped, stats) = netns::spawn_in(&name.clone(), move || {
        let tun = tun_in(&name, 16);
        // 500 kB/s, two packets back to back, 4 MB may wait: more than the
        // socket's send buffer, so the socket fills first and blocks. The
        // ring of 16 then holds 32 ms of what the shaper lets through.
        set_shaper(
            "dq0",
            Shaper {
                rate_bytes_per_sec: 500_000,
                burst_bytes: 2100,
                limit_bytes: 4 << 20,
            },
        )
        .unwrap();
        let base = tun::tx_dropped("dq0").unwrap();
        let done = Arc::new(AtomicBool::new(false));
        let reader_done = Arc::clone(&done);
        let reader = std::thread::spawn(move || {
            let mut buf = vec![0u8; tun::MAX_READ];
            let mut read = 0u64;
            loop {
                match tun.recv(&mut buf, Duration::from_millis(200)).unwrap() {
                    Some(_) => read += 1,
                    None if reader_done.load(Ordering::Relaxed) => return read,
                    None => {}
                }
            }
        });
        // One burst of 400 datagrams (400 kB) into a ring of 16: the ring
        // alone holds 16 (tests/tun.rs shows it dropping the rest).
        let sock = UdpSocket::bind("10.98.0.1:0").unwrap();
        let sent = 400u64;
        for i in 0..sent {
            let mut p = vec![0u8; 1000];
            p[..8].copy_from_slice(&i.to_be_bytes());
            sock.send_to(&p, "10.98.0.2:9").unwrap();
        }
        std::thread::sleep(Duration::from_millis(300));
        // Read the counters while the reader still holds the TUN open.
        let stats = qdisc_stats("dq0").unwrap();
        let tx_dropped = tun::tx_dropped("dq0").unwrap() - base;
        done.store(true, Ordering::Relaxed);
        (reader.join().unwrap(), sent, tx_dropped, stats)
    })
    .unwrap()
    .join()
    .unwrap()
    .unwrap();
    eprintln!("read {read} of {sent}, TUN drops {tx_dropped}, {stats:?}");
    assert_eq!(stats.drops, 0, "the shaper held every packet");
    assert!(stats.overlimits > 0, "packets did wait for tokens");
    assert_eq!(read + tx_dropped, sent, "nothing vanishes uncounted");
    assert_eq!(stats.packets, sent, "all of it passed the shaper");
    // The ring overflows only if the reader thread is kept off the CPU for
    // more than 32 ms (a loaded test machine); never for most of the burst.
    assert!(tx_dropped <= sent / 20, "the ring overflowed: {read} read");
}
