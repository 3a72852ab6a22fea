//! End-to-end tests of `diodon send` / `diodon recv` across the software
//! diode of `scripts/testbed.sh` (two network namespaces, nftables guards).
//!
//! ```text
//!  test ─► testbed.sh up (own name per process) ─► diodon recv in NAME-rx
//!       ─► diodon send in NAME-tx ─► compare files, JSON summaries, guard counters
//! ```
//!
//! They need root and network namespaces: without them each test prints why
//! and passes, except under `CI=true`, where it fails. Tests run one at a
//! time (a shared lock): they measure a link that two cores share.

#![expect(clippy::unwrap_used, reason = "test helpers fail loudly")]

use serde_json::Value;
use std::fs;
use std::net::UdpSocket;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::sync::{Mutex, MutexGuard};
use std::time::Duration;

const BIN: &str = env!("CARGO_BIN_EXE_diodon");
const RX_ADDR: &str = "10.77.0.2:7700";
static LOCK: Mutex<()> = Mutex::new(());

fn testbed_script() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../scripts/testbed.sh")
}

/// Why the testbed cannot run here, if it cannot.
fn unavailable() -> Option<String> {
    let uid = Command::new("id").arg("-u").output().ok()?;
    if String::from_utf8_lossy(&uid.stdout).trim() != "0" {
        return Some("not root".into());
    }
    if Command::new("ip")
        .args(["netns", "list"])
        .output()
        .map_or(true, |o| !o.status.success())
        && Command::new("apt-get").arg("--version").output().is_err()
    {
        return Some("no `ip netns` and no apt-get to install iproute2".into());
    }
    None
}

/// A testbed for the duration of one test; torn down on drop (also on panic).
struct Testbed {
    name: String,
    _lock: MutexGuard<'static, ()>,
}

impl Testbed {
    /// Brings the testbed up, or returns `None` (skip) when it cannot run.
    fn up(args: &[&str]) -> Option<Testbed> {
        let lock = LOCK
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if let Some(why) = unavailable() {
            assert!(
                std::env::var("CI").as_deref() != Ok("true"),
                "testbed required under CI=true: {why}"
            );
            eprintln!("SKIP: testbed unavailable ({why}); run as root with network namespaces");
            return None;
        }
        let name = format!("dit{}", std::process::id());
        let tb = Testbed { name, _lock: lock };
        let out = tb.script(&[&["up"], args].concat());
        if !out.status.success() {
            let err = String::from_utf8_lossy(&out.stderr).into_owned();
            assert!(
                std::env::var("CI").as_deref() != Ok("true"),
                "testbed up failed under CI=true: {err}"
            );
            eprintln!("SKIP: testbed up failed: {err}");
            return None;
        }
        // Count UDP the receiver namespace puts on the link (the guard's
        // egress counter also sees the kernel's ICMP/MLD chatter).
        let nft = "table inet diodon_udp_guard {\n counter udp_out {}\n chain output {\n type filter hook output priority -10; policy accept;\n oifname \"rx0\" meta l4proto udp counter name \"udp_out\"\n }\n}\n";
        let mut child = tb
            .cmd("rx", "nft")
            .args(["-f", "-"])
            .stdin(Stdio::piped())
            .spawn()
            .unwrap();
        std::io::Write::write_all(&mut child.stdin.take().unwrap(), nft.as_bytes()).unwrap();
        assert!(child.wait().unwrap().success(), "nft udp guard");
        Some(tb)
    }

    fn script(&self, args: &[&str]) -> Output {
        Command::new("bash")
            .arg(testbed_script())
            .args(args)
            .env("DIODON_TB", &self.name)
            .output()
            .unwrap()
    }

    fn ns(&self, side: &str) -> String {
        format!("{}-{side}", self.name)
    }

    /// `ip netns exec NAME-side program`.
    fn cmd(&self, side: &str, program: &str) -> Command {
        let mut c = Command::new("ip");
        c.args(["netns", "exec", &self.ns(side), program]);
        c
    }

    fn recv(&self, out: &Path, extra: &[&str]) -> Child {
        let mut c = self.cmd("rx", BIN);
        c.args(["recv", "--listen", RX_ADDR, "--out"])
            .arg(out)
            .args(["--json", "--rate", "1gbit"])
            .args(extra);
        let child = c
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        std::thread::sleep(Duration::from_millis(300));
        child
    }

    fn send(&self, paths: &[&Path], extra: &[&str]) -> Child {
        let mut c = self.cmd("tx", BIN);
        c.args(["send", "--to", RX_ADDR, "--json"])
            .args(extra)
            .args(paths);
        c.stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap()
    }

    /// UDP packets the receiver namespace tried to send on the link.
    fn rx_udp_out(&self) -> u64 {
        let out = self
            .cmd("rx", "nft")
            .args(["list", "counter", "inet", "diodon_udp_guard", "udp_out"])
            .output()
            .unwrap();
        let text = String::from_utf8_lossy(&out.stdout);
        let words: Vec<&str> = text.split_whitespace().collect();
        let i = words
            .iter()
            .position(|w| *w == "packets")
            .expect("udp_out counter");
        words[i + 1].parse().unwrap()
    }

    /// The guard's own count of everything rx0 tried to send.
    fn rx_egress_dropped(&self) -> u64 {
        let out = self.script(&["status"]);
        String::from_utf8_lossy(&out.stdout)
            .lines()
            .find_map(|l| {
                let f: Vec<&str> = l.split_whitespace().collect();
                (f.len() >= 5 && f[0] == "counter" && f[1] == "rx" && f[2] == "egress_dropped")
                    .then(|| f[4].parse().unwrap())
            })
            .unwrap_or(0)
    }

    /// (e): after every test the receiver namespace sent nothing of ours.
    fn assert_one_way(&self) {
        assert_eq!(
            self.rx_udp_out(),
            0,
            "the receiver namespace put UDP on the link"
        );
        eprintln!(
            "guard: rx egress_dropped {} packets (kernel ICMP/MLD only), rx udp_out 0",
            self.rx_egress_dropped()
        );
    }
}

impl Drop for Testbed {
    fn drop(&mut self) {
        let _ = self.script(&["down"]);
    }
}

/// Waits for `child` (killing it after `limit`) and returns status + stdout + stderr.
fn finish(child: Child, limit: Duration, what: &str) -> Output {
    let pid = child.id();
    let ticks = limit.as_millis() / 100;
    let killer = std::thread::spawn(move || {
        for _ in 0..ticks {
            std::thread::sleep(Duration::from_millis(100));
            if !Path::new(&format!("/proc/{pid}")).exists() {
                return;
            }
        }
        let _ = Command::new("kill").arg(pid.to_string()).status();
    });
    let out = child.wait_with_output().unwrap();
    let _ = killer.join();
    eprintln!(
        "--- {what} (exit {:?}) ---\n{}",
        out.status.code(),
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

fn summary(out: &Output) -> Value {
    let text = String::from_utf8_lossy(&out.stdout);
    let line = text
        .lines()
        .rev()
        .find(|l| l.starts_with('{'))
        .unwrap_or_else(|| panic!("no JSON summary in {text:?}"));
    serde_json::from_str(line).unwrap()
}

fn random_file(path: &Path, len: usize) {
    let mut x: u64 = 0x9E37_79B9_7F4A_7C15 ^ (len as u64) ^ u64::from(std::process::id());
    let mut data = vec![0u8; len];
    for chunk in data.chunks_mut(8) {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        let bytes = x.to_le_bytes();
        chunk.copy_from_slice(&bytes[..chunk.len()]);
    }
    fs::write(path, data).unwrap();
}

fn sha256(path: &Path) -> String {
    let out = Command::new("sha256sum").arg(path).output().unwrap();
    String::from_utf8_lossy(&out.stdout)
        .split_whitespace()
        .next()
        .unwrap_or_default()
        .to_owned()
}

fn kill9(child: &Child) {
    let _ = Command::new("kill")
        .args(["-9", &child.id().to_string()])
        .status();
}

fn staging_files(out: &Path) -> usize {
    fs::read_dir(out.join(".diodon-staging")).map_or(0, Iterator::count)
}

#[test]
fn lossy_link_file_is_identical_and_repaired() {
    let Some(tb) = Testbed::up(&["--loss", "1"]) else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let src = dir.path().join("big.bin");
    random_file(&src, 125_000_000);
    let out = dir.path().join("out");
    let rx = tb.recv(&out, &["--once"]);
    // The testbed's nft loss rule sees a GSO super-packet as one packet and
    // would drop 32 datagrams at once (a wire segments first): send without GSO.
    let tx = tb.send(&[&src], &["--rate", "1gbit", "--repair", "10", "--no-gso"]);
    let tx = finish(tx, Duration::from_secs(60), "send");
    let rx = finish(rx, Duration::from_secs(30), "recv");
    assert_eq!(tx.status.code(), Some(0));
    assert_eq!(rx.status.code(), Some(0));
    let s = summary(&rx);
    assert_eq!(sha256(&src), sha256(&out.join("big.bin")));
    assert!(
        s["missing"].as_u64().unwrap() > 0,
        "1 % loss must show as missing: {s}"
    );
    assert!(
        s["recovered"].as_u64().unwrap() > 0,
        "FEC must have repaired: {s}"
    );
    assert_eq!(s["channels_complete"], 1);
    tb.assert_one_way();
}

#[test]
fn receiver_killed_mid_file_leaves_no_partial_file() {
    let Some(tb) = Testbed::up(&[]) else { return };
    let dir = tempfile::tempdir().unwrap();
    let src = dir.path().join("f.bin");
    random_file(&src, 40_000_000);
    let out = dir.path().join("out");
    let rx = tb.recv(&out, &[]);
    // 40 MB at 200 Mbit/s: about 1.8 s on the wire.
    let tx = tb.send(&[&src], &["--rate", "200mbit"]);
    std::thread::sleep(Duration::from_millis(900));
    kill9(&rx);
    let _ = finish(rx, Duration::from_secs(5), "recv (killed)");
    assert!(
        !out.join("f.bin").exists(),
        "a partial file appeared under its final name"
    );
    assert!(
        staging_files(&out) > 0,
        "the killed receiver was writing to staging"
    );
    let tx = finish(tx, Duration::from_secs(30), "send (receiver gone)");
    assert_eq!(
        tx.status.code(),
        Some(0),
        "a one-way sender never notices the receiver"
    );
    assert!(!out.join("f.bin").exists());

    let rx = tb.recv(&out, &["--once"]);
    assert_eq!(
        staging_files(&out),
        0,
        "restart removes unverified staging files"
    );
    let tx = finish(
        tb.send(&[&src], &["--rate", "1gbit"]),
        Duration::from_secs(30),
        "send again",
    );
    let rx = finish(rx, Duration::from_secs(30), "recv again");
    assert_eq!(tx.status.code(), Some(0));
    assert_eq!(rx.status.code(), Some(0));
    assert_eq!(sha256(&src), sha256(&out.join("f.bin")));
    tb.assert_one_way();
}

#[test]
fn sender_restart_fails_the_abandoned_channel_and_adopts_the_new_session() {
    let Some(tb) = Testbed::up(&[]) else { return };
    let dir = tempfile::tempdir().unwrap();
    let big = dir.path().join("abandoned.bin");
    random_file(&big, 40_000_000);
    let small = dir.path().join("after.bin");
    random_file(&small, 3_000_000);
    let out = dir.path().join("out");
    let rx = tb.recv(&out, &["--once"]);
    let tx = tb.send(&[&big], &["--rate", "200mbit"]);
    std::thread::sleep(Duration::from_millis(800));
    kill9(&tx);
    let _ = finish(tx, Duration::from_secs(5), "send (killed)");
    let tx = finish(
        tb.send(&[&small], &["--rate", "1gbit"]),
        Duration::from_secs(30),
        "send (restarted)",
    );
    let rx = finish(rx, Duration::from_secs(30), "recv");
    assert_eq!(tx.status.code(), Some(0));
    assert_eq!(
        rx.status.code(),
        Some(1),
        "a failed channel makes the exit code 1"
    );
    let s = summary(&rx);
    assert_eq!(s["sessions"].as_array().unwrap().len(), 2, "{s}");
    let channels = s["channels"].as_array().unwrap();
    let abandoned = channels
        .iter()
        .find(|c| c["name"] == "abandoned.bin")
        .expect("abandoned channel reported");
    assert_eq!(abandoned["verdict"], "failed");
    assert!(
        abandoned["reason"]
            .as_str()
            .unwrap()
            .contains("sender restarted"),
        "{abandoned}"
    );
    let after = channels.iter().find(|c| c["name"] == "after.bin").unwrap();
    assert_eq!(after["verdict"], "verified");
    assert!(!out.join("abandoned.bin").exists());
    assert_eq!(sha256(&small), sha256(&out.join("after.bin")));
    let quarantined = fs::read_dir(out.join(".diodon-quarantine"))
        .unwrap()
        .count();
    assert!(
        quarantined >= 1,
        "the abandoned channel has a quarantine reason file"
    );
    tb.assert_one_way();
}

/// A beacon datagram MAC'd with `key`.
fn forged_datagram(key: [u8; 32]) -> Vec<u8> {
    use diodon_proto::{Integrity, Sender, SenderConfig, SessionId, Timestamp};
    let cfg = SenderConfig {
        integrity: Integrity::Keyed(key),
        ..SenderConfig::default()
    };
    let mut s = Sender::new(cfg, SessionId(0xF0F0), Timestamp::ZERO).unwrap();
    let mut buf = Vec::new();
    let b = s
        .poll_batch(Timestamp::ZERO, &mut buf)
        .expect("a beacon is due at start");
    buf.truncate(b.segment_size);
    buf
}

#[test]
fn datagram_forged_with_a_wrong_key_is_counted_as_bad_check() {
    let Some(tb) = Testbed::up(&[]) else { return };
    let dir = tempfile::tempdir().unwrap();
    let key = dir.path().join("key");
    fs::write(&key, "11".repeat(32)).unwrap();
    let src = dir.path().join("doc.txt");
    random_file(&src, 100_000);
    let out = dir.path().join("out");
    let rx = tb.recv(&out, &["--once", "--key-file", key.to_str().unwrap()]);
    let forged = forged_datagram([0x22; 32]);
    let sent = diodon_io::netns::spawn_in(&tb.ns("tx"), move || {
        let s = UdpSocket::bind("10.77.0.1:0").unwrap();
        for _ in 0..5 {
            s.send_to(&forged, RX_ADDR).unwrap();
        }
    })
    .unwrap()
    .join()
    .unwrap();
    assert!(sent.is_ok(), "inject from the tx namespace");
    std::thread::sleep(Duration::from_millis(200));
    let tx = finish(
        tb.send(&[&src], &["--key-file", key.to_str().unwrap()]),
        Duration::from_secs(30),
        "send",
    );
    let rx = finish(rx, Duration::from_secs(30), "recv");
    assert_eq!(tx.status.code(), Some(0));
    assert_eq!(rx.status.code(), Some(0));
    let s = summary(&rx);
    assert_eq!(s["bad_check"], 5, "{s}");
    assert_eq!(s["channels_complete"], 1);
    assert_eq!(sha256(&src), sha256(&out.join("doc.txt")));
    tb.assert_one_way();
}
