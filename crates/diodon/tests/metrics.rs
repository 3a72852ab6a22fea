//! `--metrics ADDR` on both sides, scraped during a transfer over loopback
//! (no namespaces, no root needed).
//!
//! ```text
//!  diodon recv --metrics A ◄── UDP 127.0.0.1 ── diodon send --metrics B
//!        ▲ GET /metrics (twice, during the transfer)      ▲
//!        └──────────────── this test ─────────────────────┘
//! ```

#![expect(clippy::unwrap_used, reason = "test helpers fail loudly")]

use std::collections::HashMap;
use std::io::{Read, Write};
use std::net::TcpStream;
use std::process::{Command, Stdio};
use std::time::Duration;

const BIN: &str = env!("CARGO_BIN_EXE_diodon");

/// `name{labels}` → value of every sample of a scrape.
fn scrape(addr: &str) -> HashMap<String, u64> {
    let mut c = TcpStream::connect(addr).unwrap();
    c.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    c.write_all(b"GET /metrics HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        .unwrap();
    let mut text = String::new();
    c.read_to_string(&mut text).unwrap();
    let (head, body) = text.split_once("\r\n\r\n").unwrap();
    assert!(head.starts_with("HTTP/1.1 200"), "{head}");
    assert!(head.contains("text/plain; version=0.0.4"), "{head}");
    body.lines()
        .filter(|l| !l.starts_with('#') && !l.is_empty())
        .map(|l| {
            let (k, v) = l.rsplit_once(' ').unwrap();
            (k.to_owned(), v.parse().unwrap())
        })
        .collect()
}

/// Scrapes `addr` until it answers (the process is starting).
fn scrape_when_up(addr: &str) -> HashMap<String, u64> {
    for _ in 0..50 {
        if TcpStream::connect(addr).is_ok() {
            return scrape(addr);
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    panic!("no metrics server on {addr}");
}

#[test]
fn metrics_are_served_and_move_during_a_transfer() {
    let dir = tempfile::tempdir().unwrap();
    let src = dir.path().join("m.bin");
    std::fs::write(&src, vec![0x5a_u8; 40_000_000]).unwrap();
    let udp = diodon_testkit::free_udp().to_string();
    let (rx_m, tx_m) = (
        diodon_testkit::free_tcp().to_string(),
        diodon_testkit::free_tcp().to_string(),
    );
    let rx = Command::new(BIN)
        .args([
            "recv",
            "--listen",
            &udp,
            "--once",
            "--json",
            "--metrics",
            &rx_m,
        ])
        .arg("--out")
        .arg(dir.path().join("out"))
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let r0 = scrape_when_up(&rx_m);
    // 40 MB at 200 Mbit/s: about 1.8 s, long enough to scrape twice.
    let tx = Command::new(BIN)
        .args([
            "send",
            "--to",
            &udp,
            "--rate",
            "200mbit",
            "--metrics",
            &tx_m,
            "--json",
        ])
        .arg(&src)
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let t1 = scrape_when_up(&tx_m);
    std::thread::sleep(Duration::from_millis(600));
    let (t2, r2) = (scrape(&tx_m), scrape(&rx_m));
    let (tx_out, rx_out) = (
        tx.wait_with_output().unwrap(),
        rx.wait_with_output().unwrap(),
    );
    assert!(tx_out.status.success());
    assert!(rx_out.status.success());
    one_schema_for_both_summaries(&tx_out.stdout, &rx_out.stdout);

    for name in [
        "diodon_sender_datagrams_sent_total",
        "diodon_sender_accepted_bytes_total",
        "diodon_sender_socket_enobufs_retries_total",
        "kernel_udp_out_datagrams_total{scope=\"netns\"}",
        "kernel_udp_sndbuf_errors_total{scope=\"netns\"}",
        "kernel_link_tx_dropped_total{interface=\"lo\",scope=\"netns\"}",
        "diodon_interface_in_use{interface=\"lo\"}",
    ] {
        assert!(t2.contains_key(name), "sender lacks {name}");
    }
    for name in [
        "diodon_receiver_datagrams_total",
        "diodon_receiver_missing_total",
        "diodon_receiver_socket_dropped_packets_total",
        "kernel_udp_in_datagrams_total{scope=\"netns\"}",
        "kernel_udp_in_errors_total{scope=\"netns\"}",
        "kernel_udp_rcvbuf_errors_total{scope=\"netns\"}",
        "kernel_udp_sndbuf_errors_total{scope=\"netns\"}",
        "kernel_udp_in_csum_errors_total{scope=\"netns\"}",
        "kernel_link_rx_dropped_total{interface=\"lo\",scope=\"netns\"}",
        "kernel_link_rx_errors_total{interface=\"lo\",scope=\"netns\"}",
        "kernel_link_tx_errors_total{interface=\"lo\",scope=\"netns\"}",
    ] {
        assert!(r2.contains_key(name), "receiver lacks {name}");
    }
    let moved = |a: &HashMap<String, u64>, b: &HashMap<String, u64>, k: &str| {
        assert!(b[k] > a[k], "{k} did not move: {} -> {}", a[k], b[k]);
    };
    moved(&t1, &t2, "diodon_sender_datagrams_sent_total");
    moved(&t1, &t2, "diodon_sender_accepted_bytes_total");
    moved(&t1, &t2, "kernel_udp_out_datagrams_total{scope=\"netns\"}");
    moved(&r0, &r2, "diodon_receiver_datagrams_total");
    moved(&r0, &r2, "diodon_receiver_socket_datagrams_total");
    moved(&r0, &r2, "kernel_udp_in_datagrams_total{scope=\"netns\"}");
    moved(
        &r0,
        &r2,
        "kernel_link_rx_packets_total{interface=\"lo\",scope=\"netns\"}",
    );
    // The link's state: down before the sender, up during the transfer.
    assert_eq!(r0["diodon_link_up"], 0);
    assert_eq!(r2["diodon_link_up"], 1);
    assert!(r2["diodon_link_session_started_seconds"] > 1_700_000_000);
    assert!(r2["diodon_link_since_last_datagram_seconds"] <= 1);
    assert_eq!(r2["diodon_link_alarms_silent_total"], 0);
}

/// Both sides' summaries carry schema 2 and write the channel the same way
/// (docs/json.md).
fn one_schema_for_both_summaries(tx_stdout: &[u8], rx_stdout: &[u8]) {
    let last_json = |out: &[u8]| -> serde_json::Value {
        String::from_utf8_lossy(out)
            .lines()
            .rev()
            .find_map(|l| serde_json::from_str(l).ok())
            .unwrap()
    };
    let (ts, rs) = (last_json(tx_stdout), last_json(rx_stdout));
    assert_eq!((&ts["schema"], &rs["schema"]), (&2.into(), &2.into()));
    let (tc, rc) = (&ts["channels"][0], &rs["channels"][0]);
    assert_eq!(tc["verdict"], "sent", "{tc}");
    assert_eq!(rc["verdict"], "verified", "{rc}");
    assert_eq!(tc["blake3"].as_str().map(str::len), Some(64), "{tc}");
    assert_eq!(tc["blake3"], rc["blake3"]);
    assert_eq!((&tc["name"], &tc["bytes"]), (&rc["name"], &rc["bytes"]));
}
