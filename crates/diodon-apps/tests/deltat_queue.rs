//! A Delta-t sender's own burst into a full device queue is held and sent
//! once the queue drains, not lost: in a fresh network namespace, loopback
//! gets a `tbf` qdisc (20 Mbit/s, 30 kB queue) so slow start overflows it;
//! the send then reports `ENOBUFS` (the socket has `IP_RECVERR`), the
//! socket layer waits for the queue to drain and sends again, and the
//! transfer completes without a single retransmission. Without the wait
//! the kernel would drop the datagrams silently (`SndbufErrors`) and the
//! core would have to retransmit them.
//! The queue is shared with the ACKs on loopback, and on a busy machine an
//! ACK held behind data now and then makes the core retransmit although
//! nothing was lost; the transfer is therefore tried up to three times and
//! must come through once without a retransmission. A sender that drops
//! on a full queue retransmits in every attempt, so it still fails.
//! Needs root and `ip netns`; skips with a message otherwise, fails instead
//! when `CI=true`.

use std::io::{Read, Write};
use std::time::Duration;

use diodon_apps::deltat::{DeltatListener, DeltatStream, DEFAULT_PORT};
use diodon_deltat::Config;
use diodon_io::netns;
use diodon_testkit::{require_netns, run, Namespace};

const TOTAL: usize = 3_000_000;

#[test]
fn a_full_device_queue_holds_datagrams_instead_of_dropping_them() {
    if !require_netns("a_full_device_queue_holds_datagrams_instead_of_dropping_them") {
        return;
    }
    let mut attempts = Vec::new();
    for attempt in 1..=3 {
        let (stats, retries) = transfer(attempt);
        assert!(
            retries > 0,
            "the 30 kB queue never overflowed: the test proves nothing ({stats:?})"
        );
        if stats.retransmissions == 0 {
            return;
        }
        attempts.push(format!(
            "attempt {attempt}: {} retransmissions, {retries} holds: {stats:?}",
            stats.retransmissions
        ));
    }
    panic!(
        "held datagrams must not be lost: every attempt retransmitted\n{}",
        attempts.join("\n")
    );
}

/// One 3 MB transfer through the full queue in a fresh namespace: the
/// sender's counters and how often it held a datagram.
fn transfer(attempt: u32) -> (diodon_deltat::Stats, u64) {
    let name = format!("dtq-{}-{attempt}", std::process::id());
    let ns = Namespace::new(&name);
    run(&[
        "tc",
        "-n",
        ns.name(),
        "qdisc",
        "add",
        "dev",
        "lo",
        "root",
        "tbf",
        "rate",
        "20mbit",
        "burst",
        "15k",
        "limit",
        "30k",
    ]);
    let data: Vec<u8> = (0..TOTAL).map(|i| (i * 7 % 251) as u8).collect();
    let expected = data.clone();
    let handle = netns::spawn_in(ns.name(), move || {
        let listener = DeltatListener::bind_with(
            "127.0.0.1:0".parse().expect("addr"),
            DEFAULT_PORT,
            Config::default(),
        )
        .expect("bind");
        let addr = listener.local_addr().expect("addr");
        // Spawned from a thread inside the namespace: inherits it.
        let receiver = std::thread::spawn(move || {
            let (mut s, _) = listener.accept().expect("accept");
            s.set_read_timeout(Some(Duration::from_secs(60)));
            let mut got = vec![0u8; TOTAL];
            s.read_exact(&mut got).expect("read all");
            assert!(got == expected, "bytes differ");
            s.write_all(&[1]).expect("verdict");
            s.flush().expect("verdict acked");
        });
        let mut s = DeltatStream::connect(addr).expect("connect");
        s.set_write_timeout(Some(Duration::from_secs(60)));
        s.set_read_timeout(Some(Duration::from_secs(60)));
        s.write_all(&data).expect("write");
        let mut verdict = [0u8; 1];
        s.read_exact(&mut verdict).expect("verdict");
        receiver.join().expect("receiver thread");
        (s.stats(), s.send_retries())
    })
    .expect("spawn in namespace");
    handle
        .join()
        .expect("namespace thread")
        .expect("enter namespace")
}
