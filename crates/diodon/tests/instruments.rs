//! End-to-end tests of the gateway's measuring instruments on the software
//! diode of `scripts/testbed.sh`: `diodon guard` and `diodon stats` (the trial
//! harness, `diodon-lab trial`, is tested in crates/diodon-lab/tests).
//!
//! ```text
//!  testbed up (own name) ─► diodon guard apply tx/rx ─► UDP both ways via setns threads
//!                        ─► guard counters, verify, tamper, verify again
//!  diodon stats --watch  ─► N datagrams ─► delta == N at every measuring point
//!  diodon stats --diodon ─► recv --metrics on loopback ─► its counters' deltas == the transfer
//! ```
//!
//! The namespace tests need root: without it each prints why and passes,
//! except under `CI=true`, where it fails. The `--diodon` tests use loopback
//! only and run anywhere. One at a time (a lock).

#![expect(clippy::unwrap_used, reason = "test helpers fail loudly")]

use diodon_io::netns::spawn_in;
use serde_json::Value;
use std::fs;
use std::net::UdpSocket;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::sync::{Mutex, MutexGuard};
use std::time::Duration;

const BIN: &str = env!("CARGO_BIN_EXE_diodon");
const PEER: &str = "10.77.0.2:7700";
static LOCK: Mutex<()> = Mutex::new(());

fn testbed_script() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../scripts/testbed.sh")
}

fn ci() -> bool {
    std::env::var("CI").as_deref() == Ok("true")
}

fn skip(why: &str) {
    assert!(!ci(), "required under CI=true: {why}");
    eprintln!("SKIP: {why}; run as root with network namespaces");
}

fn unavailable() -> Option<String> {
    let uid = Command::new("id").arg("-u").output().ok()?;
    if String::from_utf8_lossy(&uid.stdout).trim() != "0" {
        return Some("not root".into());
    }
    None
}

/// The namespace tests' lock (one at a time: their counters must see only
/// their own datagrams), or `None` after saying why they cannot run here
/// (the test is skipped).
fn lab() -> Option<MutexGuard<'static, ()>> {
    let lock = LOCK
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    if let Some(why) = unavailable() {
        skip(&why);
        return None;
    }
    Some(lock)
}

/// A testbed for one test; torn down on drop.
struct Testbed {
    name: String,
    _lock: MutexGuard<'static, ()>,
}

impl Testbed {
    fn up() -> Option<Testbed> {
        let lock = lab()?;
        let tb = Testbed {
            name: format!("dlab{}", std::process::id()),
            _lock: lock,
        };
        let out = Command::new("bash")
            .arg(testbed_script())
            .arg("up")
            .env("DIODON_TB", &tb.name)
            .output()
            .unwrap();
        if !out.status.success() {
            skip(&format!(
                "testbed up failed: {}",
                String::from_utf8_lossy(&out.stderr)
            ));
            return None;
        }
        Some(tb)
    }

    fn ns(&self, side: &str) -> String {
        format!("{}-{side}", self.name)
    }

    #[expect(clippy::unused_self, reason = "reads as tb.diodon(...)")]
    fn diodon(&self, args: &[&str]) -> Output {
        let out = Command::new(BIN).args(args).output().unwrap();
        eprintln!(
            "diodon {}: exit {:?}\n{}{}",
            args.join(" "),
            out.status.code(),
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        out
    }

    fn guard(&self, action: &str, side: &str) -> Output {
        let (iface, role) = if side == "tx" {
            ("tx0", "sender")
        } else {
            ("rx0", "receiver")
        };
        let ns = self.ns(side);
        self.diodon(&[
            "guard",
            action,
            "--ns",
            &ns,
            "--if",
            iface,
            "--role",
            role,
            "--peer",
            PEER,
            "--source",
            "10.77.0.1",
        ])
    }

    fn counters(&self, side: &str) -> Value {
        let out = self.diodon(&["guard", "counters", "--ns", &self.ns(side), "--json"]);
        assert!(out.status.success());
        serde_json::from_slice(&out.stdout).unwrap()
    }
}

impl Drop for Testbed {
    fn drop(&mut self) {
        let _ = Command::new("bash")
            .arg(testbed_script())
            .arg("down")
            .env("DIODON_TB", &self.name)
            .output();
    }
}

/// Sends `n` datagrams of `len` bytes from `from` to `to`, inside namespace `ns`
/// (plain `sendto`, no GSO: one skb per datagram).
fn send_udp(ns: &str, from: &str, to: &str, n: usize, len: usize) {
    let (from, to) = (from.to_owned(), to.to_owned());
    spawn_in(ns, move || {
        let s = UdpSocket::bind(&from).unwrap();
        for _ in 0..n {
            s.send_to(&vec![0x5a; len], &to).unwrap();
            // Stay well under the receiver's socket buffer.
            std::thread::sleep(Duration::from_micros(200));
        }
    })
    .unwrap()
    .join()
    .unwrap()
    .unwrap();
}

/// A socket bound in `ns` that counts datagrams until `quiet` passes without one.
fn receiver(ns: &str, addr: &str, quiet: Duration) -> std::thread::JoinHandle<usize> {
    let addr = addr.to_owned();
    let (ready_tx, ready_rx) = std::sync::mpsc::channel();
    let h = std::thread::spawn({
        let ns = ns.to_owned();
        move || {
            spawn_in(&ns, move || {
                let s = UdpSocket::bind(&addr).unwrap();
                s.set_read_timeout(Some(quiet)).unwrap();
                ready_tx.send(()).unwrap();
                let mut buf = [0u8; 2048];
                let mut n = 0;
                while s.recv(&mut buf).is_ok() {
                    n += 1;
                }
                n
            })
            .unwrap()
            .join()
            .unwrap()
            .unwrap()
        }
    });
    ready_rx.recv_timeout(Duration::from_secs(5)).unwrap();
    h
}

fn pkts(v: &Value, counter: &str) -> u64 {
    v[counter]["packets"].as_u64().unwrap()
}

#[test]
fn guard_drops_backward_passes_allowed_and_verify_catches_tampering() {
    let Some(tb) = Testbed::up() else { return };
    assert_eq!(tb.guard("apply", "tx").status.code(), Some(0));
    assert_eq!(tb.guard("apply", "rx").status.code(), Some(0));
    assert_eq!(tb.guard("verify", "tx").status.code(), Some(0));
    assert_eq!(tb.guard("verify", "rx").status.code(), Some(0));
    let rx_ns = tb.ns("rx");
    let tx_ns = tb.ns("tx");
    for side in ["tx", "rx"] {
        assert!(tb
            .diodon(&["guard", "reset", "--ns", &tb.ns(side)])
            .status
            .success());
    }

    // Backward: the receiving host tries to send to the sender.
    let back = receiver(&tx_ns, "10.77.0.1:7700", Duration::from_millis(800));
    send_udp(&rx_ns, "10.77.0.2:0", "10.77.0.1:7700", 5, 64);
    assert_eq!(back.join().unwrap(), 0, "a datagram went backward");
    let rx = tb.counters("rx");
    let tx = tb.counters("tx");
    assert!(
        pkts(&rx, "dropped_out") >= 5,
        "backward datagrams dropped and counted on rx egress: {rx}"
    );
    assert_eq!(
        pkts(&tx, "dropped_in"),
        0,
        "nothing reached the sender: {tx}"
    );

    // Forward, allowed flow: counted on both ends and delivered.
    let fwd = receiver(&rx_ns, PEER, Duration::from_millis(800));
    send_udp(&tx_ns, "10.77.0.1:0", PEER, 10, 100);
    // Forward to another port: the sender's guard stops it.
    send_udp(&tx_ns, "10.77.0.1:0", "10.77.0.2:7701", 3, 100);
    assert_eq!(fwd.join().unwrap(), 10);
    let rx = tb.counters("rx");
    let tx = tb.counters("tx");
    assert_eq!(pkts(&tx, "accepted"), 10, "{tx}");
    assert_eq!(pkts(&rx, "accepted"), 10, "{rx}");
    assert_eq!(
        tx["accepted"]["bytes"].as_u64().unwrap(),
        10 * (14 + 20 + 8 + 100)
    );
    assert!(pkts(&tx, "dropped_out") >= 3, "{tx}");

    // Reset zeroes.
    assert!(tb
        .diodon(&["guard", "reset", "--ns", &rx_ns])
        .status
        .success());
    assert_eq!(pkts(&tb.counters("rx"), "accepted"), 0);

    // Tamper: delete the allowing rule by hand.
    let list = Command::new("ip")
        .args(["netns", "exec", &rx_ns, "nft", "-a", "-j", "list", "chain"])
        .args(["netdev", "diodon_diode", "ingress"])
        .output()
        .unwrap();
    let v: Value = serde_json::from_slice(&list.stdout).unwrap();
    let handle = v["nftables"]
        .as_array()
        .unwrap()
        .iter()
        .find_map(|o| o.get("rule").map(|r| r["handle"].as_u64().unwrap()))
        .unwrap();
    let del = Command::new("ip")
        .args(["netns", "exec", &rx_ns, "nft", "delete", "rule"])
        .args(["netdev", "diodon_diode", "ingress", "handle"])
        .arg(handle.to_string())
        .status()
        .unwrap();
    assert!(del.success());
    let out = tb.guard("verify", "rx");
    assert_eq!(
        out.status.code(),
        Some(1),
        "verify must fail after tampering"
    );
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("chain \"ingress\": rule 1"),
        "precise message: {err}"
    );
    // The sender side is untouched.
    assert_eq!(tb.guard("verify", "tx").status.code(), Some(0));
    // Removed: verify says the table is missing.
    assert!(tb
        .diodon(&["guard", "remove", "--ns", &rx_ns])
        .status
        .success());
    let out = tb.guard("verify", "rx");
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("is missing"));
}

#[test]
fn stats_deltas_match_datagrams_sent() {
    const N: u64 = 500;
    let Some(tb) = Testbed::up() else { return };
    assert_eq!(tb.guard("apply", "tx").status.code(), Some(0));
    assert_eq!(tb.guard("apply", "rx").status.code(), Some(0));
    let watch = |side: &str, iface: &str| {
        Command::new(BIN)
            .args(["stats", "--ns", &tb.ns(side), "--if", iface, "--json"])
            .args(["--watch", "2.5", "--count", "1"])
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap()
    };
    let rx_watch = watch("rx", "rx0");
    let tx_watch = watch("tx", "tx0");
    std::thread::sleep(Duration::from_millis(400));
    let r = receiver(&tb.ns("rx"), PEER, Duration::from_millis(700));
    send_udp(&tb.ns("tx"), "10.77.0.1:0", PEER, N as usize, 512);
    assert_eq!(r.join().unwrap() as u64, N);
    let delta = |child: std::process::Child| -> Value {
        let out = child.wait_with_output().unwrap();
        assert!(out.status.success());
        let text = String::from_utf8_lossy(&out.stdout).into_owned();
        let line = text
            .lines()
            .find(|l| l.contains("\"kind\":\"delta\""))
            .unwrap_or_else(|| panic!("no delta line in {text}"));
        serde_json::from_str(line).unwrap()
    };
    let rx = delta(rx_watch);
    let tx = delta(tx_watch);
    eprintln!("rx delta {rx}\ntx delta {tx}");
    assert_eq!(rx["udp"]["in_datagrams"], N);
    assert_eq!(rx["udp"]["rcvbuf_errors"], 0);
    assert_eq!(rx["udp"]["in_errors"], 0);
    assert_eq!(rx["guard"]["accepted"]["packets"], N);
    assert!(rx["link"]["rx_packets"].as_u64().unwrap() >= N);
    assert_eq!(tx["udp"]["out_datagrams"], N);
    assert_eq!(tx["udp"]["sndbuf_errors"], 0);
    assert_eq!(tx["guard"]["accepted"]["packets"], N);
    assert!(tx["link"]["tx_packets"].as_u64().unwrap() >= N);

    // Plain one-shot snapshot, human format.
    let out = tb.diodon(&["stats", "--ns", &tb.ns("rx"), "--if", "rx0"]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("udp   in_datagrams"), "{text}");
    assert!(text.contains("link  rx0"), "{text}");
    assert!(text.contains("guard accepted"), "{text}");
}

fn free_port(kind: &str) -> String {
    if kind == "tcp" {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap().to_string()
    } else {
        let s = UdpSocket::bind("127.0.0.1:0").unwrap();
        s.local_addr().unwrap().to_string()
    }
}

/// A long-running `diodon recv --metrics` on loopback; killed (by PID) on drop.
struct LoopbackReceiver {
    child: std::process::Child,
    udp: String,
    metrics: String,
    _dir: tempfile::TempDir,
}

impl LoopbackReceiver {
    fn start(extra: &[&str]) -> LoopbackReceiver {
        let dir = tempfile::tempdir().unwrap();
        let (udp, metrics) = (free_port("udp"), free_port("tcp"));
        let child = Command::new(BIN)
            .args([
                "recv",
                "--listen",
                &udp,
                "--metrics",
                &metrics,
                "--no-fsync",
            ])
            .args(extra)
            .arg("--out")
            .arg(dir.path())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        // Owned at once, so a failing start still kills it (Drop).
        let rx = LoopbackReceiver {
            child,
            udp,
            metrics,
            _dir: dir,
        };
        for _ in 0..100 {
            if std::net::TcpStream::connect(&rx.metrics).is_ok() {
                return rx;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        panic!("no metrics endpoint on {}", rx.metrics);
    }

    /// `diodon send FILE` to it; the sender's JSON summary.
    fn send(&self, file: &Path, rate: &str) -> Value {
        let out = Command::new(BIN)
            .args(["send", "--to", &self.udp, "--rate", rate, "--json"])
            .arg(file)
            .stderr(Stdio::null())
            .output()
            .unwrap();
        serde_json::from_slice(&out.stdout).unwrap()
    }

    /// `diodon stats --diodon` watching one delta of `secs` around `during`.
    fn delta_around(&self, secs: &str, during: impl FnOnce()) -> Value {
        use std::io::BufRead;
        let mut watch = Command::new(BIN)
            .args(["stats", "--diodon", &self.metrics, "--json"])
            .args(["--watch", secs, "--count", "1"])
            .stdout(Stdio::piped())
            .spawn()
            .unwrap();
        let mut lines = std::io::BufReader::new(watch.stdout.take().unwrap()).lines();
        // The baseline snapshot is printed before anything is sent.
        let first: Value = serde_json::from_str(&lines.next().unwrap().unwrap()).unwrap();
        assert_eq!(first["kind"], "snapshot");
        assert_eq!(first["diodon"]["endpoint"], self.metrics.as_str());
        during();
        let delta: Value = serde_json::from_str(&lines.next().unwrap().unwrap()).unwrap();
        assert!(watch.wait().unwrap().success());
        assert_eq!(delta["kind"], "delta");
        delta
    }
}

impl Drop for LoopbackReceiver {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn counter(v: &Value, subsystem: &str, field: &str) -> u64 {
    v["diodon"]["counters"][subsystem][field]
        .as_u64()
        .unwrap_or_else(|| panic!("no Diodon counter {subsystem}.{field} in {v}"))
}

/// `diodon stats --diodon ADDR` against a real receiver on loopback: a paced
/// transfer shows up in the delta exactly (every datagram the sender sent was
/// read from the socket, one file verified, nothing missing or dropped).
#[test]
fn stats_reads_a_running_diodon_and_its_deltas_match_a_transfer() {
    // Alone: an unpaced loopback blast would disturb the other tests' counts.
    let _lock = LOCK
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    let rx = LoopbackReceiver::start(&[]);
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("f.bin");
    let data: Vec<u8> = (0..3_000_000u32).map(|i| (i * 7 + i / 251) as u8).collect();
    fs::write(&file, &data).unwrap();
    let mut sent = Value::Null;
    let delta = rx.delta_around("4", || {
        sent = rx.send(&file, "100mbit");
        // The sender exits after its linger; give the receiver's published
        // counters (refreshed every 100 ms) time to catch up.
        std::thread::sleep(Duration::from_millis(400));
    });
    eprintln!("sender {sent}\ndelta {delta}");
    let n = sent["core"]["datagrams_sent"].as_u64().unwrap();
    assert!(n > 2000, "{sent}");
    assert_eq!(counter(&delta, "receiver_socket", "datagrams"), n);
    assert_eq!(counter(&delta, "receiver", "accepted"), n);
    assert_eq!(counter(&delta, "receiver_socket", "dropped_packets"), 0);
    assert_eq!(counter(&delta, "receiver", "missing"), 0);
    assert_eq!(counter(&delta, "receiver", "blocks_lost"), 0);
    assert_eq!(counter(&delta, "receiver", "channels_complete"), 1);
    assert_eq!(counter(&delta, "receiver", "channels_failed"), 0);
    assert_eq!(counter(&delta, "receiver", "bytes_delivered"), 3_000_000);
    assert_eq!(counter(&delta, "receiver", "sessions"), 1);

    // A second transfer moves the absolute counters on; the text view names them.
    let before = Command::new(BIN)
        .args(["stats", "--diodon", &rx.metrics])
        .output()
        .unwrap();
    assert!(before.status.success());
    let text = String::from_utf8_lossy(&before.stdout);
    let line = format!("diodon {} receiver", rx.metrics);
    assert!(text.contains(&line), "{text}");
    assert!(text.contains(" channels_complete 1 "), "{text}");
    let socket = format!("diodon {} receiver_socket ", rx.metrics);
    let socket_line = text
        .lines()
        .find(|l| l.starts_with(&socket))
        .unwrap_or_else(|| panic!("no receiver_socket line: {text}"));
    for field in [" batches ", " datagrams ", " dropped_packets 0"] {
        assert!(socket_line.contains(field), "{field:?} in {socket_line}");
    }

    // An endpoint nobody serves is an error (exit 3), not a silent zero.
    let gone = free_port("tcp");
    let out = Command::new(BIN)
        .args(["stats", "--diodon", &gone])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(3), "{out:?}");
    assert!(String::from_utf8_lossy(&out.stderr).contains("Diodon metrics at"));
}

/// Socket drops (`SO_RXQ_OVFL`) reach `stats`: an unpaced sender against a
/// receiver with a tiny socket buffer overflows it, and the drops Diodon
/// counts on its socket are drops the kernel counts as `RcvbufErrors`.
#[test]
fn stats_shows_a_running_diodons_socket_drops() {
    // Alone: an unpaced loopback blast would disturb the other tests' counts.
    let _lock = LOCK
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    let rx = LoopbackReceiver::start(&["--rcvbuf", "8192"]);
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("big.bin");
    let data: Vec<u8> = (0..20_000_000u32).map(|i| (i ^ (i >> 9)) as u8).collect();
    fs::write(&file, &data).unwrap();
    let delta = rx.delta_around("4", || {
        let sent = rx.send(&file, "0");
        eprintln!("sender {sent}");
        std::thread::sleep(Duration::from_millis(400));
    });
    eprintln!("delta {delta}");
    let drops = counter(&delta, "receiver_socket", "dropped_packets");
    assert!(drops > 0, "an 8 KiB buffer overflows: {delta}");
    // This (host) namespace's kernel counter includes ours.
    assert!(
        delta["udp"]["rcvbuf_errors"].as_u64().unwrap() >= drops,
        "{delta}"
    );
    assert!(counter(&delta, "receiver", "missing") > 0, "{delta}");
    assert_eq!(
        counter(&delta, "receiver", "channels_complete")
            + counter(&delta, "receiver", "channels_failed"),
        1,
        "the file was decided: {delta}"
    );
}
