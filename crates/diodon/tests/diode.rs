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

    /// A guard counter from `testbed.sh status`: (packets, bytes).
    fn guard_counter(&self, side: &str, name: &str) -> (u64, u64) {
        let out = self.script(&["status"]);
        String::from_utf8_lossy(&out.stdout)
            .lines()
            .find_map(|l| {
                let f: Vec<&str> = l.split_whitespace().collect();
                (f.len() >= 7 && f[0] == "counter" && f[1] == side && f[2] == name)
                    .then(|| (f[4].parse().unwrap(), f[6].parse().unwrap()))
            })
            .unwrap_or((0, 0))
    }

    /// The guard's own count of everything rx0 tried to send.
    fn rx_egress_dropped(&self) -> u64 {
        self.guard_counter("rx", "egress_dropped").0
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
    // With GSO: the testbed segments super-packets before the link, so the
    // loss rule drops single datagrams as a wire would.
    let tx = tb.send(&[&src], &["--rate", "1gbit", "--repair", "10"]);
    let tx = finish(tx, Duration::from_secs(60), "send");
    let rx = finish(rx, Duration::from_secs(30), "recv");
    assert_eq!(tx.status.code(), Some(0));
    assert_eq!(rx.status.code(), Some(0));
    assert_eq!(summary(&tx)["gso"], true, "the sender used GSO");
    let (lost_packets, lost_bytes) = tb.guard_counter("rx", "loss_dropped");
    assert!(lost_packets > 0, "the loss rule dropped nothing");
    assert!(
        lost_bytes / lost_packets <= 1514,
        "the loss rule saw super-packets ({lost_bytes} bytes in {lost_packets} packets): \
         GSO is not segmented before the link"
    );
    let s = summary(&rx);
    assert_eq!(sha256(&src), sha256(&out.join("big.bin")));
    assert!(
        s["core"]["missing"].as_u64().unwrap() > 0,
        "1 % loss must show as missing: {s}"
    );
    assert!(
        s["core"]["recovered_symbols"].as_u64().unwrap() > 0,
        "FEC must have repaired: {s}"
    );
    assert_eq!(s["channels_complete"], 1);
    // The whole blocks were encoded by the thread that read them; the core
    // encoded only the file's short last block and the whole ones of its
    // group (fewer than the interleave depth of 4), which the tail's bytes
    // join.
    let sent = summary(&tx);
    let blocks = sent["core"]["blocks"].as_u64().unwrap();
    let by_source = sent["core"]["blocks_encoded_by_source"].as_u64().unwrap();
    assert!(
        by_source < blocks && by_source >= blocks - 4,
        "{by_source} of {blocks} blocks encoded by the reader: {sent}"
    );
    // Both sides coded on what this CPU has: GFNI where it has it.
    let flags = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
    let has = |f: &str| flags.split_whitespace().any(|w| w == f);
    let decode = match (has("gfni"), has("avx512f"), has("avx2")) {
        (true, true, _) => "GFNI on AVX-512",
        (true, false, true) => "GFNI on AVX2",
        _ => "the codec library's multiply (no GFNI)",
    };
    let log = String::from_utf8_lossy(&rx.stderr);
    assert!(
        log.contains(&format!("decode=\"{decode}\"")),
        "the receiver's start line names {decode:?}: {log}"
    );
    let log = String::from_utf8_lossy(&tx.stderr);
    assert!(
        log.contains(&format!("encode=\"{decode}\"")),
        "the sender's start line names {decode:?}: {log}"
    );
    tb.assert_one_way();
}

#[test]
fn a_paced_transfer_is_read_in_batches_not_as_each_datagram_arrives() {
    // At 1 Gbit/s a receiver that reads whatever has arrived got 17
    // datagrams per batch on this testbed (each batch a wake-up of the net
    // thread and of the decoder); one that lets the socket gather for 1 ms
    // once it emptied it gets about 47.
    let Some(tb) = Testbed::up(&[]) else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let src = dir.path().join("paced.bin");
    random_file(&src, 60_000_000);
    let out = dir.path().join("out");
    let rx = tb.recv(&out, &["--once"]);
    let tx = tb.send(&[&src], &["--rate", "1gbit"]);
    let tx = finish(tx, Duration::from_secs(60), "send");
    let rx = finish(rx, Duration::from_secs(30), "recv");
    assert_eq!(tx.status.code(), Some(0));
    assert_eq!(rx.status.code(), Some(0));
    assert_eq!(sha256(&src), sha256(&out.join("paced.bin")));
    let s = summary(&rx);
    let (datagrams, batches) = (
        s["socket"]["datagrams"].as_u64().unwrap(),
        s["socket"]["batches"].as_u64().unwrap(),
    );
    eprintln!(
        "{datagrams} datagrams in {batches} batches ({:.1} per batch)",
        datagrams as f64 / batches as f64
    );
    assert!(
        datagrams >= 30 * batches,
        "{datagrams} datagrams in {batches} batches: the receiver reads them as they arrive"
    );
    assert_eq!(s["socket"]["dropped_packets"], 0, "{}", s["socket"]);
    tb.assert_one_way();
}

/// Bytes the receiver's interface received so far (its IP packets plus
/// their Ethernet headers).
fn rx_link_bytes(tb: &Testbed) -> u64 {
    let out = tb.cmd("rx", "cat").arg("/proc/net/dev").output().unwrap();
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .find_map(|l| {
            let (name, rest) = l.split_once(':')?;
            (name.trim() == "rx0").then(|| rest.split_whitespace().next()?.parse().ok())?
        })
        .expect("rx0 in /proc/net/dev")
}

#[test]
#[expect(
    clippy::disallowed_methods,
    reason = "the test samples the link once a second"
)]
fn a_paced_send_holds_its_rate_within_one_percent_over_every_second() {
    // The pacer counts each datagram with its IP and UDP headers; the
    // interface also counts 14 bytes of Ethernet header per packet, so a
    // full 1500-byte datagram is 1514 bytes here.
    let Some(tb) = Testbed::up(&[]) else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let src = dir.path().join("paced.bin");
    random_file(&src, 200_000_000);
    let out = dir.path().join("out");
    let rx = tb.recv(&out, &["--once"]);
    let tx = tb.send(&[&src], &["--rate", "200mbit"]);
    let start = std::time::Instant::now();
    let mut samples = Vec::new();
    // 200 MB with 10 % repair at 200 Mbit/s: about 8.9 s on the wire.
    while start.elapsed() < Duration::from_secs(8) {
        samples.push((std::time::Instant::now(), rx_link_bytes(&tb)));
        std::thread::sleep(Duration::from_secs(1));
    }
    let tx = finish(tx, Duration::from_secs(60), "send");
    let rx = finish(rx, Duration::from_secs(30), "recv");
    assert_eq!(tx.status.code(), Some(0));
    assert_eq!(rx.status.code(), Some(0));
    assert_eq!(sha256(&src), sha256(&out.join("paced.bin")));
    let want = 200e6 / 8.0 * 1514.0 / 1500.0;
    // The first second holds the start; every later full second counts.
    let rates: Vec<f64> = samples[1..]
        .windows(2)
        .map(|w| (w[1].1 - w[0].1) as f64 / (w[1].0 - w[0].0).as_secs_f64())
        .collect();
    let errors: Vec<String> = rates
        .iter()
        .map(|r| format!("{:+.2} %", (r / want - 1.0) * 100.0))
        .collect();
    eprintln!("rate per second against 200 Mbit/s: {errors:?}");
    assert!(rates.len() >= 5, "{samples:?}");
    assert!(
        rates.iter().all(|r| (r / want - 1.0).abs() < 0.01),
        "a second off by more than 1 %: {errors:?}"
    );
    tb.assert_one_way();
}

#[test]
fn bursts_of_64_lost_datagrams_at_1_percent_are_repaired_and_the_file_is_identical() {
    // A receive-ring overflow or a lost GSO super-packet takes out tens of
    // consecutive datagrams: here 1 % of the link, lost 64 at a time. The
    // defaults (224 + 23 symbols, 4 blocks interleaved) spread a burst of
    // 64 over four blocks, 16 each, under their 23 repair symbols
    // (PROTOCOL.md § 8: any isolated burst up to 92 is repaired).
    let Some(tb) = Testbed::up(&["--loss", "1", "--loss-burst", "64"]) else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let src = dir.path().join("bursts.bin");
    random_file(&src, 250_000_000);
    let out = dir.path().join("out");
    let rx = tb.recv(&out, &["--once"]);
    // Paced at 1 Gbit/s so the receiver keeps up on a loaded machine: its
    // own socket drops, on top of the bursts, are not what this test is of.
    let tx = tb.send(&[&src], &["--rate", "1gbit", "--repair", "10"]);
    let tx = finish(tx, Duration::from_secs(90), "send");
    let rx = finish(rx, Duration::from_secs(30), "recv");
    let (lost_packets, _) = tb.guard_counter("rx", "loss_dropped");
    let s = summary(&rx);
    assert_eq!(tx.status.code(), Some(0));
    assert_eq!(rx.status.code(), Some(0), "receiver: {s}");
    eprintln!(
        "bursts: nft dropped {lost_packets}, missing {}, recovered {}",
        s["core"]["missing"], s["core"]["recovered_symbols"]
    );
    assert!(lost_packets >= 64 * 20, "at least twenty bursts of 64");
    assert_eq!(sha256(&src), sha256(&out.join("bursts.bin")));
    assert!(s["core"]["missing"].as_u64().unwrap() >= lost_packets - 64);
    assert!(s["core"]["recovered_symbols"].as_u64().unwrap() > 0);
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
        integrity: Integrity::mac(key),
        ..SenderConfig::default()
    };
    let mut s = Sender::new(cfg, SessionId(0xF0F0), Timestamp::ZERO).unwrap();
    let mut buf = Vec::new();
    let t = s
        .poll_transmit(Timestamp::ZERO, 1, &mut buf)
        .expect("a beacon is due at start");
    buf.truncate(t.size);
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
    assert_eq!(s["core"]["bad_check"], 5, "{s}");
    assert_eq!(s["channels_complete"], 1);
    assert_eq!(sha256(&src), sha256(&out.join("doc.txt")));
    tb.assert_one_way();
}

/// Length of datagram `seq` of a test flow (5..=1204 bytes, varied).
fn flow_len(seq: u32) -> usize {
    5 + (seq as usize * 7919) % 1200
}

/// Payload `seq` of flow `flow`: flow id, sequence number, filler.
fn flow_payload(flow: u8, seq: u32) -> Vec<u8> {
    let mut p = vec![flow ^ (seq as u8); flow_len(seq)];
    p[0] = flow;
    p[1..5].copy_from_slice(&seq.to_be_bytes());
    p
}

/// Datagrams a test destination collected: (source, payload) in arrival order.
type Collected = Vec<(std::net::SocketAddr, Vec<u8>)>;

/// Collects `total` datagrams on `addr` inside namespace `ns` (gives up after
/// 90 s); returns them and the socket's kernel drop count.
#[expect(clippy::disallowed_methods, reason = "test harness deadline")]
fn collect_datagrams(
    ns: &str,
    addr: &'static str,
    total: u64,
) -> std::thread::JoinHandle<Result<(Collected, u64), diodon_io::netns::NetnsError>> {
    diodon_io::netns::spawn_in(ns, move || {
        let mut cfg = diodon_io::UdpConfig::new(addr.parse().unwrap());
        cfg.rcvbuf = Some(64 << 20);
        cfg.gro = false;
        let mut sock = diodon_io::BatchReceiver::open(&cfg).unwrap();
        let mut got = Vec::new();
        let deadline = std::time::Instant::now() + Duration::from_secs(90);
        while (got.len() as u64) < total && std::time::Instant::now() < deadline {
            let batch = sock.recv_batch(Some(Duration::from_millis(200))).unwrap();
            got.extend(batch.iter().map(|d| (d.src, d.data.to_vec())));
        }
        (got, sock.socket_drops_now().unwrap())
    })
    .unwrap()
}

/// Sends `per_flow` datagrams from each of `flows` sockets (interleaved) to
/// `dest` inside namespace `ns`, paced to `bps`; returns the time it took.
#[expect(clippy::disallowed_methods, reason = "test source pacing")]
fn send_flows(ns: &str, dest: &'static str, flows: u8, per_flow: u32, bps: f64) -> Duration {
    diodon_io::netns::spawn_in(ns, move || {
        let socks: Vec<UdpSocket> = (0..flows)
            .map(|_| UdpSocket::bind("127.0.0.1:0").unwrap())
            .collect();
        let start = std::time::Instant::now();
        let mut bytes = 0u64;
        for seq in 0..per_flow {
            for (flow, s) in socks.iter().enumerate() {
                let p = flow_payload(flow as u8, seq);
                bytes += p.len() as u64;
                s.send_to(&p, dest).unwrap();
            }
            if seq % 64 == 0 {
                let due = Duration::from_secs_f64(bytes as f64 * 8.0 / bps);
                if let Some(wait) = due.checked_sub(start.elapsed()) {
                    std::thread::sleep(wait);
                }
            }
        }
        start.elapsed()
    })
    .unwrap()
    .join()
    .unwrap()
    .unwrap()
}

#[test]
fn udp_flows_arrive_complete_in_order_with_boundaries() {
    const PER_FLOW: u32 = 50_000;
    const FLOWS: u8 = 2;
    let Some(tb) = Testbed::up(&[]) else { return };
    let total = u64::from(PER_FLOW) * u64::from(FLOWS);
    let dest = collect_datagrams(&tb.ns("rx"), "127.0.0.1:7800", total);
    std::thread::sleep(Duration::from_millis(200));
    let rx = tb
        .cmd("rx", BIN)
        .args([
            "recv",
            "--listen",
            RX_ADDR,
            "--udp-forward",
            "127.0.0.1:7800",
        ])
        .args(["--once", "--json", "--rate", "1gbit"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let tx = tb
        .cmd("tx", BIN)
        .args(["send", "--to", RX_ADDR, "--udp-listen", "127.0.0.1:7900"])
        .args(["--udp-idle", "1000", "--rate", "500mbit", "--json"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    std::thread::sleep(Duration::from_millis(500));
    // Two flows interleaved at ~200 Mbit/s, well under the link's 500 Mbit/s.
    let took = send_flows(&tb.ns("tx"), "127.0.0.1:7900", FLOWS, PER_FLOW, 200e6);
    eprintln!("source: {total} datagrams in {took:?}");
    let (got, dest_drops) = dest.join().unwrap().unwrap();
    // The flows finish after 1 s of silence; then stop the (listening) sender.
    std::thread::sleep(Duration::from_secs(2));
    let _ = Command::new("kill").arg(tx.id().to_string()).status();
    let tx = finish(tx, Duration::from_secs(10), "send");
    let rx = finish(rx, Duration::from_secs(30), "recv");
    assert_eq!(dest_drops, 0, "the test's destination socket overflowed");
    assert_eq!(rx.status.code(), Some(0));
    let r = summary(&rx);
    assert_eq!(r["channels_complete"], u64::from(FLOWS), "{r}");
    assert_eq!(r["udp_forward"]["datagrams"], total, "{r}");
    let t = summary(&tx);
    assert_eq!(t["udp_source"]["datagrams"], total, "{t}");
    assert_eq!(t["udp_source"]["flows"], u64::from(FLOWS), "{t}");
    assert_eq!(t["udp_source"]["socket_drops"], 0, "{t}");
    assert_eq!(got.len() as u64, total, "every datagram delivered");
    // Per flow: one forwarding socket each, every datagram in order, its
    // length and content intact.
    let mut next = vec![0u32; usize::from(FLOWS)];
    let mut src_of: Vec<Option<std::net::SocketAddr>> = vec![None; usize::from(FLOWS)];
    for (src, data) in &got {
        let flow = usize::from(data[0]);
        let seq = u32::from_be_bytes(data[1..5].try_into().unwrap());
        assert_eq!(seq, next[flow], "flow {flow} out of order");
        assert_eq!(data, &flow_payload(data[0], seq), "flow {flow} seq {seq}");
        assert_eq!(
            *src_of[flow].get_or_insert(*src),
            *src,
            "one socket per flow"
        );
        next[flow] += 1;
    }
    assert_ne!(
        src_of[0], src_of[1],
        "flows are told apart at the destination"
    );
    tb.assert_one_way();
}

/// Size of test connection `i` of 20: 1 KB … 200 MB, log-spaced.
fn conn_size(i: u64) -> u64 {
    (1000.0 * 200_000f64.powf(i as f64 / 19.0)).round() as u64
}

/// The bytes of connection `i` after its 8-byte index header (xorshift).
struct ConnBytes(u64);

impl ConnBytes {
    fn new(i: u64) -> Self {
        ConnBytes((i + 1).wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1)
    }
    fn fill(&mut self, buf: &mut [u8]) {
        for chunk in buf.chunks_mut(8) {
            self.0 ^= self.0 << 13;
            self.0 ^= self.0 >> 7;
            self.0 ^= self.0 << 17;
            chunk.copy_from_slice(&self.0.to_le_bytes()[..chunk.len()]);
        }
    }
}

/// Reads one destination connection: (index, bytes, identical).
fn check_conn(mut c: std::net::TcpStream) -> (u64, u64, bool) {
    use std::io::Read;
    let mut head = [0u8; 8];
    if c.read_exact(&mut head).is_err() {
        return (u64::MAX, 0, false);
    }
    let i = u64::from_be_bytes(head);
    let mut gen = ConnBytes::new(i);
    let (mut buf, mut want) = (vec![0u8; 1 << 16], vec![0u8; 1 << 16]);
    let (mut n, mut same) = (8u64, true);
    // Compare in 8-byte-aligned steps so the generator stays in phase.
    let mut pending: Vec<u8> = Vec::new();
    loop {
        let k = match c.read(&mut buf) {
            Ok(0) | Err(_) => break,
            Ok(k) => k,
        };
        n += k as u64;
        pending.extend_from_slice(&buf[..k]);
        let whole = pending.len() / 8 * 8;
        if whole > 0 {
            want.resize(whole, 0);
            gen.fill(&mut want);
            same &= pending[..whole] == want[..];
            pending.drain(..whole);
        }
    }
    if !pending.is_empty() {
        want.resize(pending.len(), 0);
        gen.fill(&mut want);
        same &= pending == want;
    }
    (i, n, same && n == conn_size(i))
}

#[test]
fn twenty_concurrent_tcp_connections_arrive_identical() {
    const CONNS: u64 = 20;
    let Some(tb) = Testbed::up(&[]) else { return };
    // The destination: one thread per connection (the receiver writes to
    // all of them concurrently).
    let dest = diodon_io::netns::spawn_in(&tb.ns("rx"), || {
        let l = std::net::TcpListener::bind("127.0.0.1:7802").unwrap();
        let readers: Vec<_> = (0..CONNS)
            .map(|_| {
                let (c, _) = l.accept().unwrap();
                std::thread::spawn(move || check_conn(c))
            })
            .collect();
        readers
            .into_iter()
            .map(|h| h.join().unwrap())
            .collect::<Vec<_>>()
    })
    .unwrap();
    let rx = tb
        .cmd("rx", BIN)
        .args([
            "recv",
            "--listen",
            RX_ADDR,
            "--tcp-connect",
            "127.0.0.1:7802",
        ])
        .args(["--once", "--json", "--rate", "1gbit"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let tx = tb
        .cmd("tx", BIN)
        .args(["send", "--to", RX_ADDR, "--tcp-listen", "127.0.0.1:7901"])
        .args(["--rate", "1gbit", "--json"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    std::thread::sleep(Duration::from_millis(500));
    let sources = diodon_io::netns::spawn_in(&tb.ns("tx"), || {
        let writers: Vec<_> = (0..CONNS)
            .map(|i| {
                std::thread::spawn(move || {
                    use std::io::Write;
                    let mut c = std::net::TcpStream::connect("127.0.0.1:7901").unwrap();
                    c.write_all(&i.to_be_bytes()).unwrap();
                    let mut gen = ConnBytes::new(i);
                    let mut left = conn_size(i) - 8;
                    let mut buf = vec![0u8; 1 << 16];
                    while left > 0 {
                        let k = (left as usize).min(buf.len());
                        gen.fill(&mut buf[..k]);
                        c.write_all(&buf[..k]).unwrap();
                        left -= k as u64;
                    }
                })
            })
            .collect();
        for w in writers {
            w.join().unwrap();
        }
    })
    .unwrap();
    sources.join().unwrap().unwrap();
    let results = dest.join().unwrap().unwrap();
    // Every connection is decided; stop the (listening) sender.
    std::thread::sleep(Duration::from_millis(500));
    let _ = Command::new("kill").arg(tx.id().to_string()).status();
    let tx = finish(tx, Duration::from_secs(10), "send");
    let rx = finish(rx, Duration::from_secs(30), "recv");
    let total: u64 = (0..CONNS).map(conn_size).sum();
    eprintln!("{CONNS} connections, {total} bytes");
    let mut seen: Vec<u64> = results.iter().map(|r| r.0).collect();
    seen.sort_unstable();
    assert_eq!(seen, (0..CONNS).collect::<Vec<_>>(), "{results:?}");
    for (i, n, same) in &results {
        assert!(
            same,
            "connection {i}: {n} of {} bytes, identical {same}",
            conn_size(*i)
        );
    }
    assert_eq!(rx.status.code(), Some(0));
    let r = summary(&rx);
    assert_eq!(r["channels_complete"], CONNS, "{r}");
    assert_eq!(summary(&tx)["channels_sent"], CONNS);
    tb.assert_one_way();
}

/// `RcvbufErrors` of /proc/net/snmp in the testbed's `side` namespace.
fn rcvbuf_errors(tb: &Testbed, side: &str) -> u64 {
    let out = tb.cmd(side, "cat").arg("/proc/net/snmp").output().unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    let mut udp = text.lines().filter(|l| l.starts_with("Udp:"));
    let (names, values) = (udp.next().unwrap(), udp.next().unwrap());
    let i = names
        .split_whitespace()
        .position(|w| w == "RcvbufErrors")
        .unwrap();
    values.split_whitespace().nth(i).unwrap().parse().unwrap()
}

/// With segmentation offload left on, the veth carries whole GSO
/// super-packets and a full socket buffer drops them whole: the kernel's
/// count (and the summary's `dropped_packets`) is in packets, the
/// datagrams lost are `missing`, and both say which they are.
#[test]
fn socket_drops_are_counted_in_kernel_packets_and_lost_datagrams_exactly() {
    let Some(tb) = Testbed::up(&[]) else { return };
    let on = tb
        .cmd("tx", "ethtool")
        .args(["-K", "tx0", "tx-udp-segmentation", "on"])
        .status()
        .unwrap();
    assert!(on.success(), "ethtool -K tx0 tx-udp-segmentation on");
    let dir = tempfile::tempdir().unwrap();
    let src = dir.path().join("burst.bin");
    random_file(&src, 30_000_000);
    let out = dir.path().join("out");
    let before = rcvbuf_errors(&tb, "rx");
    let rx = tb.recv(&out, &["--once", "--rcvbuf", "65536"]);
    let tx = tb.send(&[&src], &["--rate", "unlimited"]);
    let _ = finish(tx, Duration::from_secs(60), "send");
    let rx = finish(rx, Duration::from_secs(30), "recv");
    let after = rcvbuf_errors(&tb, "rx");
    let s = summary(&rx);
    let packets = s["socket"]["dropped_packets"].as_u64().unwrap();
    let missing = s["core"]["missing"].as_u64().unwrap();
    eprintln!(
        "dropped packets {packets}, missing datagrams {missing}, RcvbufErrors {}",
        after - before
    );
    assert!(
        packets > 0,
        "a 64 KiB buffer must overflow under an unpaced sender: {s}"
    );
    assert_eq!(packets, after - before, "the kernel's unit: {s}");
    assert!(
        missing > packets,
        "super-packets held several datagrams each, so more datagrams are missing than packets were dropped: {s}"
    );
    let text = String::from_utf8_lossy(&rx.stderr);
    assert!(
        text.contains(&format!(
            "kernel dropped {packets} packets (a GRO super-packet counts once"
        )),
        "the human summary names the unit: {text}"
    );
}

#[test]
fn unpaced_jumbo_file_is_identical_and_drops_match_the_kernel() {
    let Some(tb) = Testbed::up(&["--mtu", "9000"]) else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let src = dir.path().join("jumbo.bin");
    random_file(&src, 125_000_000);
    let out = dir.path().join("out");
    let before = rcvbuf_errors(&tb, "rx");
    let rx = tb
        .cmd("rx", BIN)
        .args(["recv", "--listen", RX_ADDR, "--once", "--json"])
        .args(["--rate", "unlimited", "--mtu", "9000", "--out"])
        .arg(&out)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    std::thread::sleep(Duration::from_millis(300));
    let tx = tb.send(&[&src], &["--rate", "unlimited", "--mtu", "9000"]);
    let tx = finish(tx, Duration::from_secs(60), "send");
    let rx = finish(rx, Duration::from_secs(30), "recv");
    let after = rcvbuf_errors(&tb, "rx");
    assert_eq!(tx.status.code(), Some(0));
    let s = summary(&rx);
    eprintln!(
        "goodput {} Mbit/s, socket drops {}, RcvbufErrors delta {}",
        s["goodput_mbps"],
        s["socket"]["dropped_packets"],
        after - before
    );
    assert_eq!(
        s["socket"]["dropped_packets"].as_u64().unwrap(),
        after - before,
        "the summary's socket drops must equal the kernel's RcvbufErrors delta: {s}"
    );
    assert_eq!(
        s["kernel"]["rcvbuf_errors"].as_u64().unwrap(),
        after - before,
        "{s}"
    );
    assert_eq!(rx.status.code(), Some(0), "{s}");
    assert_eq!(sha256(&src), sha256(&out.join("jumbo.bin")));
    tb.assert_one_way();
}

#[test]
fn a_full_disk_frees_its_space_and_the_next_file_that_fits_is_delivered() {
    let Some(tb) = Testbed::up(&[]) else { return };
    let dir = tempfile::tempdir().unwrap();
    let big = dir.path().join("big.bin");
    random_file(&big, 40_000_000);
    let small = dir.path().join("small.bin");
    random_file(&small, 6_000_000);
    let out = dir.path().join("out");
    let _disk = diodon_testkit::SmallFs::mount_at(&out, 24);
    let rx = tb.recv(&out, &["--channels", "3"]);
    // A stream of unknown length larger than the disk: it fails while it is
    // written, and its partial bytes must not stay on the disk.
    let tx = tb
        .cmd("tx", BIN)
        .args(["send", "--to", RX_ADDR, "--json", "-"])
        .stdin(fs::File::open(&big).unwrap())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let tx = finish(tx, Duration::from_secs(30), "send stdin");
    assert_eq!(tx.status.code(), Some(0));
    // A file announcing more than the disk holds (refused before its first
    // byte), then one that fits.
    let tx = finish(
        tb.send(&[&big, &small], &[]),
        Duration::from_secs(30),
        "send files",
    );
    let rx = finish(rx, Duration::from_secs(30), "recv");
    assert_eq!(tx.status.code(), Some(0));
    assert_eq!(rx.status.code(), Some(1), "two channels failed");
    let s = summary(&rx);
    let channel = |name: &str| {
        s["channels"]
            .as_array()
            .unwrap()
            .iter()
            .find(|c| c["name"] == name)
            .unwrap_or_else(|| panic!("{name} not reported: {s}"))
            .clone()
    };
    for name in ["stdin", "big.bin"] {
        let c = channel(name);
        assert_eq!(c["verdict"], "failed", "{c}");
        assert!(
            c["reason"].as_str().unwrap().contains("output disk full"),
            "{c}"
        );
    }
    assert_eq!(channel("small.bin")["verdict"], "verified", "{s}");
    assert_eq!(sha256(&small), sha256(&out.join("small.bin")));
    let mut reasons = 0;
    for e in fs::read_dir(out.join(".diodon-quarantine")).unwrap() {
        let e = e.unwrap();
        let len = e.metadata().unwrap().len();
        if e.file_name().to_string_lossy().ends_with(".reason") {
            assert!(len > 0, "empty reason record {:?}", e.file_name());
            reasons += 1;
        } else {
            panic!("quarantine keeps {len} bytes of {:?}", e.file_name());
        }
    }
    assert_eq!(reasons, 2);
    assert_eq!(staging_files(&out), 0);
    assert_eq!(s["file_sink"]["no_space"], 2, "{s}");
    tb.assert_one_way();
}
