//! The IO layer across a real (software) diode: `scripts/testbed.sh` builds
//! two namespaces joined by a veth pair; 10 000 datagrams go tx → rx with GSO
//! (every byte compared), and a send rx → tx is dropped and counted by the
//! nftables guard. Needs root and `ip netns`; skips with a message otherwise,
//! fails instead when `CI=true`.

mod common;

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::Command;
use std::sync::atomic::AtomicU64;
use std::sync::Arc;
use std::time::Duration;

use common::{receive_all, send_all};
use diodon_io::netns;
use diodon_io::{BatchReceiver, BatchSender, UdpConfig, UdpSnmp};
use diodon_testkit::require_netns;

const COUNT: u32 = 10_000;

/// A testbed that is torn down when dropped, even if the test panics.
struct Testbed {
    name: String,
}

impl Testbed {
    fn script() -> PathBuf {
        PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../scripts/testbed.sh")
    }

    fn run(name: &str, args: &[&str]) -> String {
        let out = Command::new("bash")
            .arg(Self::script())
            .args(args)
            .env("DIODON_TB", name)
            .output()
            .expect("run testbed.sh");
        assert!(
            out.status.success(),
            "testbed.sh {args:?} failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    fn up(name: &str, args: &[&str]) -> Self {
        let mut full = vec!["up"];
        full.extend_from_slice(args);
        let tb = Testbed {
            name: name.to_owned(),
        };
        Self::run(name, &full);
        tb
    }

    fn ns(&self, side: &str) -> String {
        format!("{}-{side}", self.name)
    }

    /// Packets counted by the named nft counter on `side`.
    fn counter(&self, side: &str, counter: &str) -> u64 {
        let status = Self::run(&self.name, &["status"]);
        status
            .lines()
            .find_map(|l| {
                let f: Vec<&str> = l.split_whitespace().collect();
                (f.len() == 7 && f[0] == "counter" && f[1] == side && f[2] == counter)
                    .then(|| f[4].parse().expect("packet count"))
            })
            .unwrap_or_else(|| panic!("no counter {side} {counter} in:\n{status}"))
    }
}

impl Drop for Testbed {
    fn drop(&mut self) {
        let _ = Command::new("bash")
            .arg(Self::script())
            .arg("down")
            .env("DIODON_TB", &self.name)
            .status();
    }
}

fn unique_name() -> String {
    format!("dio{}", std::process::id())
}

#[test]
fn testbed_carries_one_way_and_guards_the_return_path() {
    if !require_netns("testbed_carries_one_way_and_guards_the_return_path") {
        return;
    }
    let tb = Testbed::up(&unique_name(), &[]);
    let rx_addr: SocketAddr = "10.77.0.2:7000".parse().expect("address");
    let progress = Arc::new(AtomicU64::new(0));

    // Receiver thread: lives in the rx namespace until it ends.
    let (ready_tx, ready_rx) = std::sync::mpsc::channel();
    let rx_progress = Arc::clone(&progress);
    let receiver = netns::spawn_in(&tb.ns("rx"), move || {
        let mut cfg = UdpConfig::new(rx_addr);
        cfg.rcvbuf = Some(16 << 20);
        cfg.device = Some("rx0".into());
        let mut rx = BatchReceiver::open(&cfg).expect("open receiver in rx namespace");
        let before = UdpSnmp::read().expect("snmp in rx namespace");
        ready_tx.send(()).expect("signal ready");
        let got = receive_all(&mut rx, COUNT, &rx_progress, Duration::from_secs(5));
        let snmp = UdpSnmp::read().expect("snmp").delta(&before);
        (got, rx.counters(), snmp)
    })
    .expect("spawn rx thread");
    ready_rx
        .recv_timeout(Duration::from_secs(10))
        .expect("receiver ready");

    // Sender thread in the tx namespace.
    let tx_progress = Arc::clone(&progress);
    let sender = netns::spawn_in(&tb.ns("tx"), move || {
        let mut cfg = UdpConfig::new("10.77.0.1:0".parse().expect("address"));
        cfg.sndbuf = Some(4 << 20);
        let mut tx = BatchSender::open(&cfg).expect("open sender in tx namespace");
        // 1472 = 1500 − 20 (IPv4) − 8 (UDP): full-size, never fragmented.
        send_all(&mut tx, rx_addr, COUNT, 1472, 64, &tx_progress, 4_000);
        // Too big for the path: refused (DF), never fragmented.
        let oversize = tx.send(rx_addr, &[0u8; 1473], 1473);
        (tx.counters(), tx.gso_enabled(), oversize.is_err())
    })
    .expect("spawn tx thread");

    let (tx_counters, gso, oversize_refused) = sender
        .join()
        .expect("tx thread")
        .expect("enter tx namespace");
    let (got, rx_counters, snmp) = receiver
        .join()
        .expect("rx thread")
        .expect("enter rx namespace");
    eprintln!("tx: gso {gso} {tx_counters:?}");
    eprintln!("rx: {rx_counters:?}; rx namespace Udp delta {snmp:?}");
    assert!(
        oversize_refused,
        "a 1473-byte datagram on a 1500 MTU link must fail"
    );
    assert_eq!(tx_counters.datagrams, u64::from(COUNT));
    assert_eq!(got, u64::from(COUNT), "datagrams lost across the testbed");
    // The namespace's own MIB (read via /proc/thread-self). With GRO the
    // kernel counts a super-packet as ONE InDatagram, not one per datagram.
    assert!(
        snmp.in_datagrams >= rx_counters.gro_packets.max(1),
        "thread-self snmp: {snmp:?}"
    );
    assert_eq!(rx_counters.socket_drops, 0);

    // The return path: the rx namespace tries to send back; the guard drops it.
    let dropped_before = tb.counter("rx", "egress_dropped");
    let backward = netns::spawn_in(&tb.ns("rx"), || {
        let mut cfg = UdpConfig::new("10.77.0.2:0".parse().expect("address"));
        cfg.send_stall_timeout = Duration::from_millis(100);
        let mut tx = BatchSender::open(&cfg).expect("open rx-side sender");
        // The netdev egress drop reaches the sender as ENOBUFS (IP_RECVERR),
        // which it retries until the stall timeout; the inet output fallback
        // refuses with EPERM. Either way the send fails loudly and nft counts.
        for _ in 0..3 {
            let r = tx.send("10.77.0.1:7001".parse().expect("address"), b"backward", 8);
            eprintln!("backward send: {r:?}");
            assert!(r.is_err(), "a send back from rx must not succeed");
        }
    })
    .expect("spawn backward thread");
    backward
        .join()
        .expect("backward thread")
        .expect("enter rx namespace");
    let dropped = tb.counter("rx", "egress_dropped") - dropped_before;
    assert!(dropped >= 3, "guard counted {dropped} backward packets");
    assert_eq!(
        tb.counter("tx", "ingress_dropped"),
        0,
        "nothing may reach tx"
    );
}

#[test]
fn testbed_loss_is_counted_by_nft() {
    if !require_netns("testbed_loss_is_counted_by_nft") {
        return;
    }
    let tb = Testbed::up(&format!("{}l", unique_name()), &["--loss", "10"]);
    let rx_addr: SocketAddr = "10.77.0.2:7000".parse().expect("address");
    let (ready_tx, ready_rx) = std::sync::mpsc::channel();
    let receiver = netns::spawn_in(&tb.ns("rx"), move || {
        let mut rx = BatchReceiver::open(&UdpConfig::new(rx_addr)).expect("receiver");
        ready_tx.send(()).expect("ready");
        let mut got = 0u64;
        loop {
            let b = rx
                .recv_batch(Some(Duration::from_millis(500)))
                .expect("recv");
            if b.is_empty() {
                break got;
            }
            got += b.len() as u64;
        }
    })
    .expect("spawn rx");
    ready_rx
        .recv_timeout(Duration::from_secs(10))
        .expect("ready");
    let sender = netns::spawn_in(&tb.ns("tx"), move || {
        let mut cfg = UdpConfig::new("10.77.0.1:0".parse().expect("address"));
        cfg.gso = false; // one skb per datagram, so nft sees every datagram
        let mut tx = BatchSender::open(&cfg).expect("sender");
        for _ in 0..20 {
            tx.send(rx_addr, &[7u8; 100 * 100], 100).expect("send");
            std::thread::sleep(Duration::from_millis(2));
        }
    })
    .expect("spawn tx");
    sender.join().expect("tx").expect("netns tx");
    let got = receiver.join().expect("rx").expect("netns rx");
    let lost = tb.counter("rx", "loss_dropped");
    eprintln!("loss 10 %: sent 2000, received {got}, nft loss_dropped {lost}");
    assert_eq!(got + lost, 2_000);
    assert!((100..=320).contains(&lost), "lost {lost} of 2000 at 10 %");
}

#[test]
fn testbed_burst_loss_drops_runs_of_the_given_length() {
    if !require_netns("testbed_burst_loss_drops_runs_of_the_given_length") {
        return;
    }
    // 10 % in bursts of 20: datagrams 0-19, 200-219, ... are dropped.
    let tb = Testbed::up(
        &format!("{}b", unique_name()),
        &["--loss", "10", "--loss-burst", "20"],
    );
    let rx_addr: SocketAddr = "10.77.0.2:7001".parse().expect("address");
    let (ready_tx, ready_rx) = std::sync::mpsc::channel();
    let receiver = netns::spawn_in(&tb.ns("rx"), move || {
        let mut rx = BatchReceiver::open(&UdpConfig::new(rx_addr)).expect("receiver");
        ready_tx.send(()).expect("ready");
        let mut got = Vec::new();
        loop {
            let b = rx
                .recv_batch(Some(Duration::from_millis(500)))
                .expect("recv");
            if b.is_empty() {
                break got;
            }
            for d in b {
                got.push(u32::from_be_bytes(d.data[..4].try_into().expect("4 bytes")));
            }
        }
    })
    .expect("spawn rx");
    ready_rx
        .recv_timeout(Duration::from_secs(10))
        .expect("ready");
    let sender = netns::spawn_in(&tb.ns("tx"), move || {
        let mut cfg = UdpConfig::new("10.77.0.1:0".parse().expect("address"));
        cfg.gso = false; // one skb per datagram, so nft sees every datagram
        let mut tx = BatchSender::open(&cfg).expect("sender");
        for batch in 0..20u32 {
            let mut buf = Vec::with_capacity(100 * 100);
            for i in 0..100u32 {
                let mut p = [0u8; 100];
                p[..4].copy_from_slice(&(batch * 100 + i).to_be_bytes());
                buf.extend_from_slice(&p);
            }
            tx.send(rx_addr, &buf, 100).expect("send");
            std::thread::sleep(Duration::from_millis(2));
        }
    })
    .expect("spawn tx");
    sender.join().expect("tx").expect("netns tx");
    let mut got = receiver.join().expect("rx").expect("netns rx");
    got.sort_unstable();
    let lost = tb.counter("rx", "loss_dropped");
    let expected: Vec<u32> = (0..2000).filter(|i| i % 200 >= 20).collect();
    eprintln!(
        "burst loss: received {}, nft loss_dropped {lost}",
        got.len()
    );
    assert_eq!(lost, 200, "ten bursts of 20");
    assert_eq!(
        got, expected,
        "exactly the first 20 of every 200 are missing"
    );
}
