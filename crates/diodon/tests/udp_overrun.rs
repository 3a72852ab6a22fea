//! A UDP source faster than the configured link rate: the only admissible
//! loss of `--udp-listen`. It must be counted exactly (the kernel's drops on
//! the listening socket) and everything read must still arrive. Loopback
//! only, no root needed.
//!
//! ```text
//!  blaster ──20 000 datagrams, unpaced──► diodon send --udp-listen (20 Mbit/s)
//!      read + socket_drops == 20 000      ──► diodon recv --udp-forward ──► counter
//! ```

#![expect(clippy::unwrap_used, reason = "test helpers fail loudly")]

use serde_json::Value;
use std::net::UdpSocket;
use std::process::{Command, Output, Stdio};
use std::time::Duration;

const BIN: &str = env!("CARGO_BIN_EXE_diodon");
const SENT: u64 = 20_000;

fn summary(out: &Output) -> Value {
    let text = String::from_utf8_lossy(&out.stdout);
    let line = text.lines().rev().find(|l| l.starts_with('{')).unwrap();
    serde_json::from_str(line).unwrap()
}

#[test]
fn a_source_faster_than_the_link_loses_only_what_is_counted() {
    let (link, listen) = (
        diodon_testkit::free_udp().to_string(),
        diodon_testkit::free_udp().to_string(),
    );
    let mut cfg = diodon_io::UdpConfig::new("127.0.0.1:0".parse().unwrap());
    cfg.rcvbuf = Some(32 << 20);
    cfg.gro = false;
    let mut dest = diodon_io::BatchReceiver::open(&cfg).unwrap();
    let dest_addr = dest.local_addr().to_string();
    let rx = Command::new(BIN)
        .args(["recv", "--listen", &link, "--udp-forward", &dest_addr])
        .args(["--once", "--json", "--rcvbuf", "33554432"])
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let tx = Command::new(BIN)
        .args(["send", "--to", &link, "--udp-listen", &listen])
        // The flow stays open until SIGTERM, which must finish it (not abort).
        .args(["--rate", "20mbit", "--udp-idle", "60000", "--json"])
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    std::thread::sleep(Duration::from_millis(500));
    let src = UdpSocket::bind("127.0.0.1:0").unwrap();
    let payload = [0xA5u8; 1000];
    for _ in 0..SENT {
        src.send_to(&payload, &listen).unwrap();
    }
    // Count what reaches the destination until it has been quiet a while.
    let (mut got, mut quiet) = (0u64, 0);
    while quiet < 6 {
        let batch = dest.recv_batch(Some(Duration::from_millis(500))).unwrap();
        if batch.is_empty() {
            quiet += 1;
        }
        for d in batch {
            assert_eq!(d.data.len(), payload.len(), "boundaries kept");
            got += 1;
            quiet = 0;
        }
    }
    assert_eq!(
        dest.socket_drops_now().unwrap(),
        0,
        "the test's destination overflowed"
    );
    let _ = Command::new("kill").arg(tx.id().to_string()).status();
    let tx = tx.wait_with_output().unwrap();
    let rx = rx.wait_with_output().unwrap();
    let t = summary(&tx);
    let r = summary(&rx);
    let read = t["udp_source"]["datagrams"].as_u64().unwrap();
    let drops = t["udp_source"]["socket_drops"].as_u64().unwrap();
    eprintln!("sent {SENT}, read {read}, dropped {drops}, delivered {got}");
    assert!(drops > 0, "an unpaced source must outrun 20 Mbit/s: {t}");
    assert_eq!(
        read + drops,
        SENT,
        "every datagram is read or counted as dropped: {t}"
    );
    assert_eq!(r["udp_forward"]["datagrams"].as_u64().unwrap(), read, "{r}");
    assert_eq!(got, read, "everything read was delivered");
    assert_eq!(
        r["channels_complete"], 1,
        "a stopped sender finishes its flows: {r}"
    );
    assert_eq!(rx.status.code(), Some(0));
}
