//! The receiver's alarms, each raised by the condition it names, on the
//! real binary: the link cut by an nftables rule (and restored), the sender
//! killed and restarted, a sender with another key, a sender with a key the
//! receiver lacks, a longer Δt at the sender, a channel the receiver's
//! output refuses; and `recv --timeout` ending a receiver that hears
//! nothing with its own exit code. Each alarm is one sentence in the log
//! (never a debug value), one count in the summary's `link` counters and
//! one entry in its `alarms` list.

#![expect(clippy::unwrap_used, reason = "test helpers fail loudly")]

use serde_json::Value;
use std::path::Path;
use std::process::{Child, Command, Output, Stdio};
use std::time::Duration;

const BIN: &str = env!("CARGO_BIN_EXE_diodon");
const KEY_A: &str = "00112233445566778899aabbccddeeff00112233445566778899aabbccddeeff";
const KEY_B: &str = "ffeeddccbbaa99887766554433221100ffeeddccbbaa99887766554433221100";

/// `diodon ARGS`, inside namespace `ns` when given.
fn diodon(ns: Option<&str>, args: &[&str]) -> Command {
    let mut c = match ns {
        Some(ns) => {
            let mut c = Command::new("ip");
            c.args(["netns", "exec", ns, BIN]);
            c
        }
        None => Command::new(BIN),
    };
    c.args(["--log-format", "json"]).args(args);
    c
}

fn spawn_receiver(ns: Option<&str>, args: &[&str]) -> Child {
    diodon(ns, args)
        .args(["--json"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap()
}

fn interrupt(child: &Child) {
    let pid = i32::try_from(child.id()).unwrap();
    // SIGINT: the receiver ends cleanly and prints its summary.
    Command::new("kill")
        .args(["-INT", &pid.to_string()])
        .status()
        .unwrap();
}

/// The summary (last JSON line of stdout) and the log lines of stderr.
fn finish(child: Child) -> (Option<i32>, Value, Vec<Value>) {
    let Output {
        status,
        stdout,
        stderr,
    } = child.wait_with_output().unwrap();
    let summary: Value = String::from_utf8_lossy(&stdout)
        .lines()
        .rev()
        .find_map(|l| serde_json::from_str(l).ok())
        .unwrap_or_else(|| panic!("no summary; stderr: {}", String::from_utf8_lossy(&stderr)));
    let logs: Vec<Value> = String::from_utf8_lossy(&stderr)
        .lines()
        .filter_map(|l| serde_json::from_str(l).ok())
        .collect();
    (status.code(), summary, logs)
}

fn link(summary: &Value, field: &str) -> u64 {
    summary["link"][field].as_u64().unwrap_or(0)
}

fn alarm_kinds(summary: &Value) -> Vec<String> {
    summary["alarms"]
        .as_array()
        .map(|a| {
            a.iter()
                .map(|x| x["kind"].as_str().unwrap_or_default().to_owned())
                .collect()
        })
        .unwrap_or_default()
}

/// The WARN lines that say `needle`.
fn warnings<'a>(logs: &'a [Value], needle: &str) -> Vec<&'a str> {
    logs.iter()
        .filter(|l| l["level"] == "WARN")
        .filter_map(|l| l["fields"]["message"].as_str())
        .filter(|m| m.contains(needle))
        .collect()
}

/// Kills the processes it holds when the test ends, even by a panic (a
/// process inside a namespace outlives the namespace's deletion).
struct KillOnDrop(Vec<u32>);

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        for pid in &self.0 {
            let _ = Command::new("kill")
                .args(["-KILL", &pid.to_string()])
                .stderr(Stdio::null())
                .status();
        }
    }
}

/// Runs an nftables script inside namespace `ns`.
fn nft(ns: &str, script: &str) {
    use std::io::Write;
    let st = Command::new("ip")
        .args(["netns", "exec", ns, "nft", "-f", "-"])
        .stdin(Stdio::piped())
        .spawn()
        .and_then(|mut c| {
            c.stdin.take().unwrap().write_all(script.as_bytes())?;
            c.wait()
        })
        .unwrap();
    assert!(st.success(), "nft {script}");
}

fn sleep(ms: u64) {
    std::thread::sleep(Duration::from_millis(ms));
}

fn key_file(dir: &Path, name: &str, hex: &str) -> String {
    let p = dir.join(name);
    std::fs::write(&p, hex).unwrap();
    p.to_str().unwrap().to_owned()
}

#[test]
fn a_cut_link_and_a_restarted_sender_raise_their_alarms() {
    let test = "a_cut_link_and_a_restarted_sender_raise_their_alarms";
    if !diodon_testkit::require_netns(test) || !diodon_testkit::require_tools(test, &["nft"]) {
        return;
    }
    let ns = diodon_testkit::Namespace::new("dalarm");
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("out");
    let (data, flows) = ("127.0.0.1:47801", "127.0.0.1:47802");
    let rx = spawn_receiver(
        Some(ns.name()),
        &[
            "recv",
            "--listen",
            data,
            "--out",
            out.to_str().unwrap(),
            "--alarm-silence",
            "1",
        ],
    );
    let mut reaper = KillOnDrop(vec![rx.id()]);
    sleep(500);
    // A sender killed in the middle of a file: the next session fails the
    // unfinished channel, and that is the restart alarm.
    let big = dir.path().join("big.bin");
    std::fs::write(&big, vec![9u8; 2_000_000]).unwrap();
    let mut slow = diodon(
        Some(ns.name()),
        &[
            "send",
            "--to",
            data,
            "--rate",
            "1mbit",
            big.to_str().unwrap(),
        ],
    )
    .stdout(Stdio::null())
    .stderr(Stdio::null())
    .spawn()
    .unwrap();
    reaper.0.push(slow.id());
    sleep(1500);
    slow.kill().unwrap();
    slow.wait().unwrap();
    // An idle long-running sender: it beacons, so the link stays up.
    let mut tx = diodon(
        Some(ns.name()),
        &[
            "send",
            "--to",
            data,
            "--udp-listen",
            flows,
            "--rate",
            "10mbit",
        ],
    )
    .stdout(Stdio::null())
    .stderr(Stdio::null())
    .spawn()
    .unwrap();
    reaper.0.push(tx.id());
    sleep(1500);
    // Cut the link for 3 s: every datagram to the receiver dropped.
    let nft = |script: &str| nft(ns.name(), script);
    nft("table inet diodon_cut {\n chain input {\n  type filter hook input priority 0;\n  udp dport 47801 drop\n }\n}\n");
    sleep(3000);
    nft("delete table inet diodon_cut");
    sleep(1500);
    interrupt(&rx);
    let (_, summary, logs) = finish(rx);
    tx.kill().unwrap();
    tx.wait().unwrap();

    assert_eq!(link(&summary, "alarms_silent"), 1, "{summary:#}");
    assert_eq!(link(&summary, "alarms_sender_restarted"), 1, "{summary:#}");
    assert_eq!(link(&summary, "alarms_channel_failed"), 1, "{summary:#}");
    assert_eq!(link(&summary, "up"), 1, "{summary:#}");
    assert_eq!(
        alarm_kinds(&summary),
        [
            "channel_failed",
            "sender_restarted",
            "link_silent",
            "link_up"
        ],
        "{summary:#}"
    );
    let silent = warnings(&logs, "link silent");
    assert_eq!(silent.len(), 1, "{logs:#?}");
    assert!(
        silent[0].contains("the link or the sender is down"),
        "{}",
        silent[0]
    );
    let restarted = warnings(&logs, "sender restarted");
    assert_eq!(restarted.len(), 1, "logged once: {logs:#?}");
    assert!(
        restarted[0].contains("whose 1 unfinished channel(s) failed"),
        "{}",
        restarted[0]
    );
    assert_eq!(summary["sessions"].as_array().map(Vec::len), Some(2));
}

/// A receiver for one sender run on loopback; returns its summary and logs.
fn one_shot(
    recv_args: &[&str],
    send_args: &[&str],
    file: &Path,
) -> (Option<i32>, Value, Vec<Value>) {
    let data = diodon_testkit::free_udp().to_string();
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("out");
    let mut args = vec![
        "recv",
        "--listen",
        &data,
        "--once",
        "--timeout",
        "4",
        "--alarm-silence",
        "30",
    ];
    args.extend_from_slice(recv_args);
    let out_s = out.to_str().unwrap().to_owned();
    if !recv_args.contains(&"--udp-forward") {
        args.extend_from_slice(&["--out", &out_s]);
    }
    let rx = spawn_receiver(None, &args);
    sleep(300);
    let mut send = vec!["send", "--to", &data, "--rate", "100mbit"];
    send.extend_from_slice(send_args);
    let st = diodon(None, &send)
        .arg(file)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .unwrap();
    assert!(st.code().is_some(), "sender ended by a signal");
    finish(rx)
}

#[test]
fn a_wrong_key_a_missing_key_and_a_longer_delta_t_are_sentences() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("f.bin");
    std::fs::write(&file, vec![7u8; 300_000]).unwrap();
    let (a, b) = (
        key_file(dir.path(), "a.key", KEY_A),
        key_file(dir.path(), "b.key", KEY_B),
    );

    // Another key: every datagram fails its MAC; nothing valid arrives.
    let (code, summary, logs) = one_shot(&["--key-file", &a], &["--key-file", &b], &file);
    assert_eq!(code, Some(4), "nothing valid arrived: {summary:#}");
    assert_eq!(link(&summary, "alarms_wrong_key"), 1, "{summary:#}");
    let w = warnings(&logs, "wrong key");
    assert_eq!(w.len(), 1, "{logs:#?}");
    assert!(w[0].contains("--key-file"), "{}", w[0]);
    assert_eq!(summary["nothing_arrived"], true);

    // A key at the sender only.
    let (code, summary, logs) = one_shot(&[], &["--key-file", &b], &file);
    assert_eq!(code, Some(4), "{summary:#}");
    assert_eq!(link(&summary, "alarms_config_mismatch"), 1, "{summary:#}");
    let w = warnings(&logs, "configuration mismatch");
    assert_eq!(w.len(), 1, "{logs:#?}");
    assert!(
        w[0].contains("signs its datagrams with a key and this receiver has none"),
        "{}",
        w[0]
    );
    let m = summary["mismatches"][0].as_str().unwrap_or_default();
    assert!(!m.contains('{') && m.contains("--key-file"), "{m}");

    // A longer Δt at the sender: state would be freed too early here.
    let (code, summary, logs) = one_shot(&["--delta-t", "2000"], &["--delta-t", "9000"], &file);
    assert_eq!(code, Some(0), "the file still arrives: {summary:#}");
    assert_eq!(link(&summary, "alarms_config_mismatch"), 1, "{summary:#}");
    let w = warnings(&logs, "configuration mismatch");
    assert!(
        w.len() == 1 && w[0].contains("9000 ms") && w[0].contains("--delta-t"),
        "{logs:#?}"
    );
}

#[test]
fn a_refused_channel_is_an_alarm_logged_once() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("f.bin");
    std::fs::write(&file, vec![1u8; 10_000]).unwrap();
    let sink = diodon_testkit::free_udp().to_string();
    // A file reaching a UDP forwarder is refused: the channel fails.
    let (code, summary, logs) = one_shot(&["--udp-forward", &sink], &[], &file);
    assert_eq!(code, Some(1), "{summary:#}");
    assert_eq!(link(&summary, "alarms_channel_failed"), 1, "{summary:#}");
    assert_eq!(alarm_kinds(&summary), ["channel_failed"]);
    let lines: Vec<&Value> = logs
        .iter()
        .filter(|l| {
            l["fields"]["message"]
                .as_str()
                .is_some_and(|m| m.contains("channel failed"))
        })
        .collect();
    assert_eq!(lines.len(), 1, "one line per failure: {lines:#?}");
}

#[test]
fn timeout_ends_a_receiver_that_hears_nothing_with_exit_4() {
    let dir = tempfile::tempdir().unwrap();
    let data = diodon_testkit::free_udp().to_string();
    let out = dir.path().join("out");
    let rx = spawn_receiver(
        None,
        &[
            "recv",
            "--listen",
            &data,
            "--once",
            "--timeout",
            "1",
            "--alarm-silence",
            "0.5",
            "--out",
            out.to_str().unwrap(),
        ],
    );
    let (code, summary, logs) = finish(rx);
    assert_eq!(code, Some(4), "{summary:#}");
    assert_eq!(summary["nothing_arrived"], true);
    assert_eq!(link(&summary, "alarms_silent"), 1, "{summary:#}");
    assert_eq!(link(&summary, "up"), 0);
    let w = warnings(&logs, "is a sender running");
    assert_eq!(w.len(), 1, "{logs:#?}");
    assert_eq!(warnings(&logs, "nothing arrived").len(), 1, "{logs:#?}");
}

#[test]
fn a_receiver_that_falls_behind_says_so_once() {
    // The receiver is stopped (SIGSTOP) for half a second while the sender
    // goes on at 200 Mbit/s: its 256 KiB socket buffer overflows and the
    // kernel drops what does not fit. That is one overrun episode: one
    // alarm, one sentence that names the cure.
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("f.bin");
    std::fs::write(&file, vec![3u8; 30_000_000]).unwrap();
    let data = diodon_testkit::free_udp().to_string();
    let out = dir.path().join("out");
    let rx = spawn_receiver(
        None,
        &[
            "recv",
            "--listen",
            &data,
            "--once",
            "--timeout",
            "10",
            "--alarm-silence",
            "30",
            "--rcvbuf",
            "262144",
            "--out",
            out.to_str().unwrap(),
        ],
    );
    let mut reaper = KillOnDrop(vec![rx.id()]);
    sleep(300);
    let mut tx = diodon(None, &["send", "--to", &data, "--rate", "200mbit"])
        .arg(&file)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    reaper.0.push(tx.id());
    sleep(200);
    let pid = rx.id().to_string();
    let signal = |sig: &str| {
        assert!(Command::new("kill")
            .args([sig, &pid])
            .status()
            .unwrap()
            .success());
    };
    signal("-STOP");
    sleep(500);
    signal("-CONT");
    assert!(
        tx.wait().unwrap().code().is_some(),
        "sender ended by a signal"
    );
    let (_, summary, logs) = finish(rx);
    assert!(
        summary["socket"]["dropped_packets"].as_u64().unwrap_or(0) > 0,
        "the kernel dropped nothing: {summary:#}"
    );
    assert_eq!(link(&summary, "alarms_receiver_overrun"), 1, "{summary:#}");
    assert!(alarm_kinds(&summary).contains(&"receiver_overrun".to_owned()));
    let w = warnings(&logs, "receiver overrun");
    assert_eq!(w.len(), 1, "{logs:#?}");
    assert!(
        w[0].contains("262144") || w[0].contains("524288"),
        "the buffer the kernel granted: {}",
        w[0]
    );
    assert!(
        w[0].contains("--rate") && w[0].contains("--rcvbuf"),
        "{}",
        w[0]
    );
}
