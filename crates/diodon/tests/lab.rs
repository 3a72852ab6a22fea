//! End-to-end tests of the measuring instruments on the software diode of
//! `scripts/testbed.sh`: `diodon guard`, `diodon stats`, `diodon trial`.
//!
//! ```text
//!  testbed up (own name) ─► diodon guard apply tx/rx ─► UDP both ways via setns threads
//!                        ─► guard counters, verify, tamper, verify again
//!  diodon stats --watch  ─► N datagrams ─► delta == N at every measuring point
//!  diodon trial plan     ─► CSV (all columns), testresults.txt, summary, PNG; killed receiver = failed
//! ```
//!
//! They need root and network namespaces: without them each test prints why
//! and passes, except under `CI=true`, where it fails. One at a time (a lock).

#![expect(clippy::unwrap_used, reason = "test helpers fail loudly")]
#![expect(
    clippy::disallowed_methods,
    reason = "the trial test bounds its own wall-clock duration"
)]

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

/// A testbed for one test; torn down on drop.
struct Testbed {
    name: String,
    _lock: MutexGuard<'static, ()>,
}

impl Testbed {
    fn up() -> Option<Testbed> {
        let lock = LOCK
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if let Some(why) = unavailable() {
            skip(&why);
            return None;
        }
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
    assert_eq!(rx["udp"]["InDatagrams"], N);
    assert_eq!(rx["udp"]["RcvbufErrors"], 0);
    assert_eq!(rx["udp"]["InErrors"], 0);
    assert_eq!(rx["guard"]["accepted"]["packets"], N);
    assert!(rx["link"]["rx_packets"].as_u64().unwrap() >= N);
    assert_eq!(tx["udp"]["OutDatagrams"], N);
    assert_eq!(tx["udp"]["SndbufErrors"], 0);
    assert_eq!(tx["guard"]["accepted"]["packets"], N);
    assert!(tx["link"]["tx_packets"].as_u64().unwrap() >= N);

    // Plain one-shot snapshot, human format.
    let out = tb.diodon(&["stats", "--ns", &tb.ns("rx"), "--if", "rx0"]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("udp   InDatagrams"), "{text}");
    assert!(text.contains("link  rx0"), "{text}");
    assert!(text.contains("guard accepted"), "{text}");
}

fn ensure_netcat() -> bool {
    let have = || {
        Command::new("sh")
            .args(["-c", "command -v nc"])
            .output()
            .is_ok_and(|o| o.status.success())
    };
    if !have() {
        let _ = Command::new("apt-get")
            .args(["install", "-y", "-qq", "netcat-openbsd"])
            .env("DEBIAN_FRONTEND", "noninteractive")
            .status();
    }
    have()
}

fn rmem() -> (String, String) {
    (
        fs::read_to_string("/proc/sys/net/core/rmem_max").unwrap(),
        fs::read_to_string("/proc/sys/net/core/rmem_default").unwrap(),
    )
}

#[test]
#[expect(
    clippy::too_many_lines,
    reason = "one scenario, checked output by output"
)]
fn trial_plan_writes_every_output_and_a_killed_receiver_fails() {
    let _lock = LOCK
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    if let Some(why) = unavailable() {
        return skip(&why);
    }
    if !ensure_netcat() {
        return skip("no `nc` (Debian package netcat-openbsd)");
    }
    let dir = tempfile::tempdir().unwrap();
    let plan = dir.path().join("plan.toml");
    fs::write(
        &plan,
        "tools = [\"diodon\", \"netcat\"]\nbitrates_mbps = [200]\ntrials = 3\nrcvbuf = [2097152]\ntimeout_s = 20\n[file]\nsize = 5000000\n[fault]\nkill_receiver_trial = 2\nkill_receiver_after_ms = 50\n",
    )
    .unwrap();
    let out_dir = dir.path().join("out");
    let before = rmem();
    let name = format!("dtl{}", std::process::id());
    let started = std::time::Instant::now();
    let out = Command::new(BIN)
        .arg("trial")
        .arg(&plan)
        .arg("--out")
        .arg(&out_dir)
        .arg("--testbed")
        .arg(testbed_script())
        .args(["--name", &name])
        .output()
        .unwrap();
    eprintln!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(rmem(), before, "net.core.rmem_* restored");
    assert_eq!(out.status.code(), Some(0));
    assert!(started.elapsed() < Duration::from_secs(120), "kept fast");

    let csv = fs::read_to_string(out_dir.join("trials.csv")).unwrap();
    let mut lines = csv.lines();
    let header: Vec<&str> = lines.next().unwrap().split(',').collect();
    for col in [
        "bitrate",
        "trial",
        "sender_rc",
        "receiver_rc",
        "Xfer_time",
        "Xfer_success",
        "in_file_size",
        "out_file_size",
        "dtgrms_sent",
        "dtgrms_received",
        "dtgrms_corrupt",
        "tx_errors",
        "tx_dropped",
        "rx_errors",
        "rx_dropped",
        "snmp_OutDatagrams",
        "snmp_SndbufErrors",
        "snmp_InDatagrams",
        "snmp_InErrors",
        "snmp_RcvbufErrors",
        "missing",
        "recovered",
        "socket_drops",
        "repair_ratio",
        "injected_loss",
    ] {
        assert!(header.contains(&col), "column {col} missing: {header:?}");
    }
    let rows: Vec<Vec<&str>> = lines.map(|l| l.split(',').collect()).collect();
    assert_eq!(rows.len(), 6, "2 tools x 3 trials");
    let col = |r: &Vec<&str>, name: &str| -> String {
        r[header.iter().position(|h| *h == name).unwrap()].to_owned()
    };
    for r in &rows {
        assert_eq!(r.len(), header.len());
        let (tool, trial) = (col(r, "tool"), col(r, "trial"));
        if trial == "2" {
            assert_eq!(col(r, "Xfer_success"), "False", "{tool} killed trial");
            assert!(col(r, "reason").contains("killed"), "{r:?}");
            assert!(
                col(r, "Xfer_time").parse::<f64>().unwrap() < 20.0,
                "not hung"
            );
        } else if tool == "diodon" {
            assert_eq!(col(r, "Xfer_success"), "True", "{r:?}");
            assert_eq!(col(r, "out_file_size"), "5000000");
            let sent: u64 = col(r, "dtgrms_sent").parse().unwrap();
            assert!(sent > 3000, "{r:?}");
            assert_eq!(col(r, "snmp_OutDatagrams").parse::<u64>().unwrap(), sent);
            assert!(col(r, "missing").parse::<u64>().is_ok());
        }
    }
    for cfg in [
        "diodon_rcvbuf-2MiB_mtu-1500_loss-0",
        "netcat_rcvbuf-2MiB_mtu-1500_loss-0",
    ] {
        let t = fs::read_to_string(out_dir.join(cfg).join("testresults.txt")).unwrap();
        assert!(t.contains("Bitrate: 200000000 bits/second"), "{t}");
        assert!(t.contains("Success rate:"), "{t}");
        assert!(out_dir.join(cfg).join("200000000.csv").is_file());
    }
    let d = fs::read_to_string(out_dir.join("diodon_rcvbuf-2MiB_mtu-1500_loss-0/testresults.txt"))
        .unwrap();
    assert!(d.contains("Success rate: 66.7%"), "{d}");
    assert!(fs::read_to_string(out_dir.join("summary.txt"))
        .unwrap()
        .contains("netcat_rcvbuf-2MiB_mtu-1500_loss-0"));
    for png in ["cfr.png", "duration.png"] {
        let bytes = fs::read(out_dir.join(png)).unwrap();
        assert_eq!(&bytes[1..4], b"PNG", "{png}");
    }
    assert!(!out_dir.join("work").exists(), "scratch files removed");
}
