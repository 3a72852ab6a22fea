//! `--encrypt` on the real binary over loopback, with the test itself on
//! the wire: every datagram passes a relay in this test that keeps a copy.
//! An encrypted file arrives verified and none of its bytes (nor its name)
//! is on the wire; a key rollover in the middle of a file loses nothing,
//! timed or by key files read again on SIGHUP (which also retires the old
//! key at the receiver, and keeps the keys when the new file has a typo); a
//! wrong key and a sender that does not encrypt are one sentence each in
//! the receiver's log.

#![expect(clippy::unwrap_used, reason = "test helpers fail loudly")]

use serde_json::Value;
use std::net::{SocketAddr, UdpSocket};
use std::path::Path;
use std::process::{Child, Command, Output, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

const BIN: &str = env!("CARGO_BIN_EXE_diodon");
const KEY_A: &str = "00112233445566778899aabbccddeeff00112233445566778899aabbccddeeff";
const KEY_B: &str = "ffeeddccbbaa99887766554433221100ffeeddccbbaa99887766554433221100";

/// A UDP relay on loopback that forwards every datagram to `to` and keeps
/// a copy: what a capture of the link would show.
struct Tap {
    addr: SocketAddr,
    stop: Arc<AtomicBool>,
    thread: JoinHandle<Vec<Vec<u8>>>,
}

impl Tap {
    fn new(to: SocketAddr) -> Self {
        let socket = UdpSocket::bind("127.0.0.1:0").unwrap();
        socket
            .set_read_timeout(Some(Duration::from_millis(50)))
            .unwrap();
        let addr = socket.local_addr().unwrap();
        let stop = Arc::new(AtomicBool::new(false));
        let flag = Arc::clone(&stop);
        let thread = std::thread::spawn(move || {
            let mut seen = Vec::new();
            let mut buf = vec![0u8; 65_536];
            while !flag.load(Ordering::Relaxed) {
                if let Ok((n, _)) = socket.recv_from(&mut buf) {
                    socket.send_to(&buf[..n], to).unwrap();
                    seen.push(buf[..n].to_vec());
                }
            }
            seen
        });
        Tap { addr, stop, thread }
    }

    fn captured(self) -> Vec<Vec<u8>> {
        self.stop.store(true, Ordering::Relaxed);
        self.thread.join().unwrap()
    }
}

fn diodon(args: &[&str]) -> Command {
    let mut c = Command::new(BIN);
    c.args(["--log-format", "json"]).args(args);
    c
}

/// One sender run through a tap to a `recv --once`: the receiver's exit
/// code, summary and log lines, and the captured datagrams.
fn transfer(
    recv_args: &[&str],
    send_args: &[&str],
    file: &Path,
    out: &Path,
) -> (Option<i32>, Value, Vec<Value>, Vec<Vec<u8>>) {
    let listen = diodon_testkit::free_udp();
    let tap = Tap::new(listen);
    let listen_s = listen.to_string();
    let out_s = out.to_str().unwrap();
    let mut args = vec![
        "recv",
        "--listen",
        &listen_s,
        "--out",
        out_s,
        "--once",
        "--timeout",
        "6",
        "--json",
    ];
    args.extend_from_slice(recv_args);
    let rx: Child = diodon(&args)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    std::thread::sleep(Duration::from_millis(300));
    let to = tap.addr.to_string();
    let mut send = vec!["send", "--to", &to];
    send.extend_from_slice(send_args);
    let st = diodon(&send)
        .arg(file)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .unwrap();
    assert!(st.code().is_some(), "sender ended by a signal");
    let Output {
        status,
        stdout,
        stderr,
    } = rx.wait_with_output().unwrap();
    let summary: Value = String::from_utf8_lossy(&stdout)
        .lines()
        .rev()
        .find_map(|l| serde_json::from_str(l).ok())
        .unwrap_or_else(|| panic!("no summary; stderr: {}", String::from_utf8_lossy(&stderr)));
    let logs: Vec<Value> = String::from_utf8_lossy(&stderr)
        .lines()
        .filter_map(|l| serde_json::from_str(l).ok())
        .collect();
    (status.code(), summary, logs, tap.captured())
}

/// Text that is easy to find: numbered lines.
fn plaintext(bytes: usize) -> Vec<u8> {
    let mut v = Vec::with_capacity(bytes + 64);
    let mut i = 0u64;
    while v.len() < bytes {
        v.extend_from_slice(format!("line {i:08} of the secret report\n").as_bytes());
        i += 1;
    }
    v.truncate(bytes);
    v
}

fn write(dir: &Path, name: &str, text: &str) -> String {
    let p = dir.join(name);
    std::fs::write(&p, text).unwrap();
    p.to_str().unwrap().to_owned()
}

fn warnings<'a>(logs: &'a [Value], needle: &str) -> Vec<&'a str> {
    logs.iter()
        .filter(|l| l["level"] == "WARN")
        .filter_map(|l| l["fields"]["message"].as_str())
        .filter(|m| m.contains(needle))
        .collect()
}

#[test]
fn a_signed_link_uses_aes_gmac_unless_told_blake3_and_the_receiver_takes_both() {
    let dir = tempfile::tempdir().unwrap();
    let data = plaintext(300_000);
    let file = dir.path().join("signed.txt");
    std::fs::write(&file, &data).unwrap();
    let key = write(dir.path(), "link.key", KEY_A);
    for (mac, flags) in [
        (None, [0u8, 5]),
        (Some("blake3"), [0, 1]),
        (Some("aes-gmac"), [0, 5]),
    ] {
        let out = dir.path().join(format!("out-{}", mac.unwrap_or("default")));
        let keyed = ["--key-file", key.as_str()];
        let mut send = keyed.to_vec();
        send.extend_from_slice(&["--rate", "100mbit"]);
        if let Some(m) = mac {
            send.extend_from_slice(&["--mac", m]);
        }
        let (code, summary, _, wire) = transfer(&keyed, &send, &file, &out);
        assert_eq!(code, Some(0), "{mac:?}: {summary:#}");
        let got = std::fs::read(out.join("signed.txt")).unwrap();
        assert!(got == data, "{mac:?}: the received file differs");
        assert!(wire.len() > 200, "{} datagrams captured", wire.len());
        assert!(
            wire.iter().all(|d| d[2..4] == flags),
            "{mac:?}: every datagram's flags are {flags:?}"
        );
        assert_eq!(summary["core"]["bad_check"], 0, "{mac:?}: {summary:#}");
    }
}

#[test]
fn an_encrypted_file_arrives_verified_and_its_bytes_are_not_on_the_wire() {
    let dir = tempfile::tempdir().unwrap();
    let data = plaintext(400_000);
    let file = dir.path().join("quarterly-secret-report.txt");
    std::fs::write(&file, &data).unwrap();
    let key = write(dir.path(), "link.key", KEY_A);
    let out = dir.path().join("out");
    let keyed = ["--key-file", key.as_str(), "--encrypt"];
    let mut send = keyed.to_vec();
    send.extend_from_slice(&["--rate", "100mbit"]);
    let (code, summary, _, wire) = transfer(&keyed, &send, &file, &out);
    assert_eq!(code, Some(0), "{summary:#}");
    let got = std::fs::read(out.join("quarterly-secret-report.txt")).unwrap();
    assert!(got == data, "the received file differs");
    assert!(wire.len() > 250, "{} datagrams captured", wire.len());
    assert!(
        wire.iter().all(|d| d[2..4] == [0, 3]),
        "flags: encrypted, key id 0"
    );
    let all = wire.concat();
    for probe in [
        &b"of the secret report"[..],
        &data[123_456..123_472],
        &b"quarterly-secret"[..],
    ] {
        assert!(
            !all.windows(probe.len()).any(|w| w == probe),
            "{:?} is on the wire",
            String::from_utf8_lossy(probe)
        );
    }
}

#[test]
fn a_key_rollover_in_the_middle_of_a_file_loses_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let data = plaintext(6_000_000);
    let file = dir.path().join("big.txt");
    std::fs::write(&file, &data).unwrap();
    let ring = write(
        dir.path(),
        "ring.key",
        &format!("# rollover\ncurrent 1 {KEY_A}\nnext 2 {KEY_B}\n"),
    );
    let out = dir.path().join("out");
    let recv = ["--key-file", ring.as_str(), "--encrypt"];
    // 6 MB at 24 Mbit/s: two seconds; the key changes after one.
    let send = [
        "--key-file",
        ring.as_str(),
        "--encrypt",
        "--next-key-after",
        "1s",
        "--rate",
        "24mbit",
    ];
    let (code, summary, _, wire) = transfer(&recv, &send, &file, &out);
    assert_eq!(code, Some(0), "{summary:#}");
    assert!(
        std::fs::read(out.join("big.txt")).unwrap() == data,
        "file differs"
    );
    let ids: Vec<u8> = wire.iter().map(|d| d[2]).collect();
    let switch = ids
        .iter()
        .position(|&id| id == 2)
        .expect("the sender switched");
    assert!(ids[..switch].iter().all(|&id| id == 1), "key 1 before");
    assert!(ids[switch..].iter().all(|&id| id == 2), "key 2 after");
    let data_ids: Vec<u8> = wire.iter().filter(|d| d[1] == 0).map(|d| d[2]).collect();
    assert!(
        data_ids.contains(&1) && data_ids.contains(&2),
        "the file's own symbols went under both keys"
    );
    assert_eq!(summary["link"]["bad_check"].as_u64().unwrap_or(0), 0);
}

#[test]
fn a_wrong_key_and_a_sender_that_does_not_encrypt_are_sentences() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("f.bin");
    std::fs::write(&file, vec![7u8; 300_000]).unwrap();
    let a = write(dir.path(), "a.key", KEY_A);
    let b = write(dir.path(), "b.key", KEY_B);
    let rate = ["--rate", "100mbit"];

    let recv = ["--key-file", a.as_str(), "--encrypt"];
    let send = ["--key-file", b.as_str(), "--encrypt", rate[0], rate[1]];
    let (code, summary, logs, _) = transfer(&recv, &send, &file, &dir.path().join("o1"));
    assert_eq!(code, Some(4), "nothing valid arrived: {summary:#}");
    let w = warnings(&logs, "wrong key");
    assert_eq!(w.len(), 1, "{logs:#?}");
    assert!(
        w[0].contains("did not decrypt") && w[0].contains("--key-file"),
        "{}",
        w[0]
    );
    assert!(!w[0].contains('{') && !w[0].contains("Secret"), "{}", w[0]);

    let send = ["--key-file", a.as_str(), rate[0], rate[1]];
    let (code, summary, logs, _) = transfer(&recv, &send, &file, &dir.path().join("o2"));
    assert_eq!(code, Some(4), "{summary:#}");
    let w = warnings(&logs, "configuration mismatch");
    assert_eq!(w.len(), 1, "{logs:#?}");
    assert!(w[0].contains("requires encryption"), "{}", w[0]);
    assert!(!w[0].contains("datagram_encrypted"), "{}", w[0]);
}

/// `GET /metrics` of a running side: the value of the sample `name` (with
/// its labels, as written), 0 when absent.
fn metric(addr: &str, name: &str) -> u64 {
    use std::io::{Read, Write};
    let mut s = std::net::TcpStream::connect(addr).unwrap();
    s.write_all(b"GET /metrics HTTP/1.0\r\nHost: x\r\n\r\n")
        .unwrap();
    let mut page = String::new();
    s.read_to_string(&mut page).unwrap();
    page.lines()
        .find_map(|l| l.strip_prefix(name)?.strip_prefix(' ')?.parse().ok())
        .unwrap_or(0)
}

/// Replaces `path` the way editors and deployment tools do: a new file
/// renamed over the old one (a new inode).
fn replace(path: &Path, text: &str) {
    let tmp = path.with_extension("tmp");
    std::fs::write(&tmp, text).unwrap();
    std::fs::rename(&tmp, path).unwrap();
}

fn hangup(child: &Child) {
    let pid = libc::pid_t::try_from(child.id()).unwrap();
    // SAFETY: kill(2) on a child this test started.
    #[expect(unsafe_code, reason = "kill(2)")]
    let rc = unsafe { libc::kill(pid, libc::SIGHUP) };
    assert_eq!(rc, 0);
}

/// Waits until `path` holds `data` (a receiver that runs on).
fn arrives(path: &Path, data: &[u8], within: Duration) -> bool {
    let step = Duration::from_millis(50);
    for _ in 0..within.as_millis() / step.as_millis() {
        if std::fs::read(path).is_ok_and(|got| got == data) {
            return true;
        }
        std::thread::sleep(step);
    }
    false
}

#[test]
#[expect(clippy::too_many_lines, reason = "one rollover, step by step")]
fn keys_read_again_on_sighup_roll_a_running_mac_link_over_and_retire_the_old_key() {
    let dir = tempfile::tempdir().unwrap();
    let (ring, only_a, only_b) = (
        format!("current 1 {KEY_A}\nnext 2 {KEY_B}\n"),
        format!("current 1 {KEY_A}\n"),
        format!("current 2 {KEY_B}\n"),
    );
    let recv_key = dir.path().join("recv.key");
    let send_key = dir.path().join("send.key");
    let old_key = dir.path().join("old.key");
    std::fs::write(&recv_key, &ring).unwrap();
    std::fs::write(&send_key, &only_a).unwrap();
    std::fs::write(&old_key, &only_a).unwrap();
    let out = dir.path().join("out");
    let listen = diodon_testkit::free_udp();
    let metrics = diodon_testkit::free_tcp().to_string();
    let tap = Tap::new(listen);
    let rx = diodon(&[
        "recv",
        "--listen",
        &listen.to_string(),
        "--out",
        out.to_str().unwrap(),
        "--key-file",
        recv_key.to_str().unwrap(),
        "--metrics",
        &metrics,
        "--json",
    ])
    .stdout(Stdio::piped())
    .stderr(Stdio::piped())
    .spawn()
    .unwrap();
    std::thread::sleep(Duration::from_millis(300));
    let to = tap.addr.to_string();
    let send = |key: &Path, file: &Path, rate: &str| {
        diodon(&["send", "--to", &to, "--rate", rate, "--key-file"])
            .arg(key)
            .arg(file)
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap()
    };

    // 1. A 6 MB file at 24 Mbit/s (two seconds); after one, the sender's
    //    key file says `current 2 B` and it gets SIGHUP.
    let data = plaintext(6_000_000);
    let big = dir.path().join("big.txt");
    std::fs::write(&big, &data).unwrap();
    let tx = send(&send_key, &big, "24mbit");
    std::thread::sleep(Duration::from_secs(1));
    replace(&send_key, &only_b);
    hangup(&tx);
    let tx = tx.wait_with_output().unwrap();
    assert_eq!(tx.status.code(), Some(0));
    let tx_log = String::from_utf8_lossy(&tx.stderr);
    assert!(
        tx_log.contains("key file read again: sealing with key id 2"),
        "{tx_log}"
    );
    assert!(arrives(
        &out.join("big.txt"),
        &data,
        Duration::from_secs(10)
    ));
    let used = |id: u8| {
        metric(
            &metrics,
            &format!("diodon_receiver_key_datagrams_total{{key_id=\"{id}\"}}"),
        )
    };
    let (one, two) = (used(1), used(2));
    assert!(
        one > 500 && two > 500,
        "datagrams per key id: 1 → {one}, 2 → {two}"
    );

    // 2. The receiver's key file says `current 2 B`, SIGHUP: a sender still
    //    on key A is refused, one on B delivers.
    replace(&recv_key, &only_b);
    hangup(&rx);
    std::thread::sleep(Duration::from_millis(400));
    let bad_check = || metric(&metrics, "diodon_receiver_bad_check_total");
    let before = bad_check();
    let small = dir.path().join("small.txt");
    std::fs::write(&small, plaintext(50_000)).unwrap();
    let old = send(&old_key, &small, "100mbit")
        .wait_with_output()
        .unwrap();
    assert_eq!(old.status.code(), Some(0));
    std::thread::sleep(Duration::from_millis(300));
    assert!(bad_check() > before, "key id 1 is no longer accepted");
    assert!(
        !out.join("small.txt").exists(),
        "delivered under a retired key"
    );
    assert_eq!(
        used(1),
        one,
        "no datagram of key id 1 counted after it was retired"
    );

    // 3. A key file with a typo, SIGHUP: one sentence, and the keys in force stay.
    replace(&recv_key, &format!("current 3 {}\n", &KEY_B[..60]));
    hangup(&rx);
    std::thread::sleep(Duration::from_millis(400));
    let b = send(&send_key, &small, "100mbit")
        .wait_with_output()
        .unwrap();
    assert_eq!(b.status.code(), Some(0));
    assert!(arrives(
        &out.join("small.txt"),
        &plaintext(50_000),
        Duration::from_secs(5)
    ));
    assert!(used(2) > two);

    // SIGINT: the receiver ends and reports.
    // SAFETY: kill(2) on a child this test started.
    #[expect(unsafe_code, reason = "kill(2)")]
    let rc = unsafe { libc::kill(libc::pid_t::try_from(rx.id()).unwrap(), libc::SIGINT) };
    assert_eq!(rc, 0);
    let rx = rx.wait_with_output().unwrap();
    let summary: Value = String::from_utf8_lossy(&rx.stdout)
        .lines()
        .rev()
        .find_map(|l| serde_json::from_str(l).ok())
        .unwrap();
    assert_eq!(summary["keys"]["1"].as_u64(), Some(one), "{summary:#}");
    assert!(summary["keys"]["2"].as_u64().unwrap() > two, "{summary:#}");
    let logs: Vec<Value> = String::from_utf8_lossy(&rx.stderr)
        .lines()
        .filter_map(|l| serde_json::from_str(l).ok())
        .collect();
    let infos: Vec<&str> = logs
        .iter()
        .filter_map(|l| l["fields"]["message"].as_str())
        .filter(|m| m.contains("key file read again"))
        .collect();
    assert_eq!(
        infos,
        ["key file read again: accepting key ids 2"],
        "{logs:#?}"
    );
    let w = warnings(&logs, "the keys in force stay");
    assert_eq!(w.len(), 1, "{logs:#?}");
    assert!(
        w[0].contains("line 1") && w[0].contains("64 hex characters"),
        "{}",
        w[0]
    );
    let wire = tap.captured();
    // 5: keyed with AES-GMAC, the default MAC (PROTOCOL.md § 3).
    let mac: Vec<&Vec<u8>> = wire.iter().filter(|d| d[3] == 5).collect();
    assert_eq!(
        mac.len(),
        wire.len(),
        "every datagram signed with AES-GMAC, none encrypted"
    );
}
