//! `diodon-blast`, the benchmark's floors, on loopback: `send-file` reads
//! the whole file, digests exactly its bytes and sends every byte once plus
//! the asked share of each block again, and the sink counts what came.
//! `scripts/bench-link.sh` reads the send targets of issue 18 against this
//! floor, so a floor that skipped bytes or sent too few would flatter every
//! figure read against it.
//!
//! ```text
//!  file (300,000 B) ─► send-file 127.0.0.1:P 1000 FILE 10 ─► sink 127.0.0.1:P
//!     blake3 == b3(file), file_bytes == 300,000, sent == received == 330,000 B
//! ```

#![expect(clippy::unwrap_used, reason = "test helpers fail loudly")]

use serde_json::Value;
use std::process::{Command, Stdio};

const BLAST: &str = env!("CARGO_BIN_EXE_diodon-blast");

fn last_json(out: &[u8]) -> Value {
    let text = String::from_utf8_lossy(out);
    let line = text.lines().rfind(|l| l.starts_with('{')).unwrap();
    serde_json::from_str(line).unwrap()
}

#[test]
fn send_file_digests_and_sends_every_byte_and_its_repair_share() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("in.bin");
    // Not a multiple of the block (224 × 1,000 B): a short last block.
    let data: Vec<u8> = (0..300_000u32)
        .map(|i| (i.wrapping_mul(2_654_435_761) >> 13) as u8)
        .collect();
    std::fs::write(&file, &data).unwrap();
    let port = std::net::UdpSocket::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let addr = format!("127.0.0.1:{port}");
    let sink = Command::new(BLAST)
        .args(["sink", &addr, "500"])
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    std::thread::sleep(std::time::Duration::from_millis(300));
    let sent = Command::new(BLAST)
        .args(["send-file", &addr, "1000", file.to_str().unwrap(), "10"])
        .output()
        .unwrap();
    assert!(sent.status.success(), "{sent:?}");
    let sent = last_json(&sent.stdout);
    let got = last_json(&sink.wait_with_output().unwrap().stdout);

    assert_eq!(sent["file_bytes"], 300_000);
    assert_eq!(
        sent["blake3"].as_str().unwrap(),
        blake3::hash(&data).to_hex().as_str()
    );
    // Block 1: 224,000 B + 22,400 again; block 2: 76,000 + 7,600.
    assert_eq!(sent["bytes"], 330_000);
    assert_eq!(sent["datagrams"], 224 + 23 + 76 + 8);
    assert_eq!(got["bytes"], 330_000, "the sink: {got}");
    assert_eq!(got["datagrams"], 331, "the sink: {got}");
    assert!(sent["cpu_s"].as_f64().unwrap() >= 0.0);
}

#[test]
fn send_file_says_what_is_wrong_with_its_arguments() {
    let out = Command::new(BLAST)
        .args(["send-file", "127.0.0.1:9", "1000", "/nonexistent/x", "10"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("/nonexistent/x"), "{err}");
    let out = Command::new(BLAST)
        .args(["send-file", "127.0.0.1:9", "1000", "/dev/null", "101"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("REPAIR% at most 100"),
        "{out:?}"
    );
}
