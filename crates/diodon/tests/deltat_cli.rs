//! `diodon deltat send/recv/echo` end to end on loopback, also through the
//! lab's impairment relay (`diodon-lab relay`, run in this process):
//! a file through a lossy, delaying relay arrives identical with a verified
//! verdict on both sides, over Delta-t and over TCP; the echo client gets its
//! messages back; a receiver given a directory writes the sender's name into
//! it; a receiver that cannot write refuses before any data flows, and one
//! whose disk fills tells the sender at once (one sentence each, counters
//! apart).

use diodon_lab::relay::{self, Direction, Impairment, RelayStats, Seed};
use std::net::SocketAddr;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::sleep;
use std::time::Duration;

const BIN: &str = env!("CARGO_BIN_EXE_diodon");

/// Kills the child on drop (a failing test leaves nothing running).
struct Guard(Option<Child>);

impl Guard {
    /// Waits for a successful exit and returns stdout.
    fn finish(mut self) -> String {
        let child = self.0.take().expect("child");
        let out = child.wait_with_output().expect("wait");
        assert!(out.status.success(), "exit {:?}", out.status);
        String::from_utf8_lossy(&out.stdout).into_owned()
    }
}

impl Drop for Guard {
    fn drop(&mut self) {
        if let Some(mut c) = self.0.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

/// The lab's impairment relay (`diodon-lab relay`), run in this process:
/// 5 ms each way, 5 % loss, 2 % reordered, seed 7. Stopped on drop.
struct Relay {
    stop: Arc<AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Relay {
    fn start(listen: SocketAddr, to: SocketAddr) -> Relay {
        let forward = Direction {
            impairment: Impairment {
                delay: Duration::from_millis(5),
                loss: 0.05,
                reorder: 0.02,
                reorder_gap: Duration::from_millis(5),
                ..Impairment::default()
            },
            seed: Seed(7),
        };
        let backward = Direction {
            seed: Seed(8),
            ..forward
        };
        let stop = Arc::new(AtomicBool::new(false));
        let s = Arc::clone(&stop);
        let thread = std::thread::spawn(move || {
            let stats = Arc::new(RelayStats::default());
            relay::run_udp(listen, to, (forward, backward), &stats, &s).expect("relay");
        });
        Relay {
            stop,
            thread: Some(thread),
        }
    }
}

impl Drop for Relay {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

fn spawn(args: &[&str]) -> Guard {
    Guard(Some(
        Command::new(BIN)
            .args(args)
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("spawn diodon"),
    ))
}

fn transfer(tcp: bool, via_relay: bool) {
    let dir = tempfile::tempdir().expect("tempdir");
    let input = dir.path().join("in.bin");
    let output = dir.path().join("out.bin");
    let data: Vec<u8> = (0..400_000u32)
        .map(|i| (i.wrapping_mul(2_654_435_761) >> 13) as u8)
        .collect();
    std::fs::write(&input, &data).expect("write input");
    let listen = if tcp {
        diodon_testkit::free_tcp()
    } else {
        diodon_testkit::free_udp()
    };
    let mut proto = vec![];
    if tcp {
        proto.push("--tcp");
    }
    let listen_s = listen.to_string();
    let mut recv_args = vec!["deltat", "recv", "--listen", &listen_s, "--timeout", "60"];
    recv_args.extend(&proto);
    let out_s = output.to_str().expect("utf8").to_owned();
    recv_args.extend(["--out", &out_s]);
    let recv = spawn(&recv_args);
    let _relay;
    let to = if via_relay {
        let front = diodon_testkit::free_udp();
        _relay = Some(Relay::start(front, listen));
        front
    } else {
        _relay = None;
        listen
    };
    sleep(Duration::from_millis(300));
    let to_s = to.to_string();
    let in_s = input.to_str().expect("utf8").to_owned();
    let mut send_args = vec!["deltat", "send", &in_s, "--to", &to_s, "--timeout", "60"];
    send_args.extend(&proto);
    let send = Command::new(BIN)
        .args(&send_args)
        .output()
        .expect("run send");
    let stdout = String::from_utf8_lossy(&send.stdout);
    assert!(
        send.status.success(),
        "send failed: {stdout} {}",
        String::from_utf8_lossy(&send.stderr)
    );
    assert!(stdout.contains("\"verified\":true"), "{stdout}");
    let recv_out = recv.finish();
    assert!(recv_out.contains("\"verified\":true"), "{recv_out}");
    assert_eq!(std::fs::read(&output).expect("output"), data);
}

#[test]
fn deltat_file_through_lossy_relay() {
    transfer(false, true);
}

#[test]
fn tcp_file_direct() {
    transfer(true, false);
}

#[test]
fn echo_client_gets_its_messages_back() {
    let listen = diodon_testkit::free_udp().to_string();
    let _server = spawn(&["deltat", "echo", "--listen", &listen]);
    sleep(Duration::from_millis(300));
    let out = Command::new(BIN)
        .args([
            "deltat", "echo", "--to", &listen, "--count", "5", "--size", "3000",
        ])
        .output()
        .expect("run echo client");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout} {}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(stdout.contains("\"messages\":5"), "{stdout}");
}

/// Runs `deltat recv` with `out` and `deltat send` of `data`; returns both
/// outputs (status, stdout, stderr) and how long the sender took.
fn exchange(
    out: &std::path::Path,
    data: &[u8],
) -> (std::process::Output, std::process::Output, Duration) {
    let dir = tempfile::tempdir().expect("tempdir");
    let input = dir.path().join("report.bin");
    std::fs::write(&input, data).expect("write input");
    let listen = diodon_testkit::free_udp().to_string();
    let out_s = out.to_str().expect("utf8").to_owned();
    let recv = Command::new(BIN)
        .args([
            "deltat",
            "recv",
            "--listen",
            &listen,
            "--timeout",
            "60",
            "--out",
            &out_s,
        ])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn recv");
    let recv = Guard(Some(recv));
    sleep(Duration::from_millis(300));
    let clock = diodon_io::MonotonicClock::new();
    let send = Command::new(BIN)
        .args([
            "deltat",
            "send",
            input.to_str().expect("utf8"),
            "--to",
            &listen,
            "--timeout",
            "60",
        ])
        .output()
        .expect("run send");
    let took = clock.elapsed_since(diodon_proto::Timestamp::ZERO);
    let mut recv = recv;
    let recv_out = recv
        .0
        .take()
        .expect("child")
        .wait_with_output()
        .expect("wait recv");
    (send, recv_out, took)
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

#[test]
fn a_directory_output_receives_the_senders_file_name() {
    let dir = tempfile::tempdir().expect("tempdir");
    let data = vec![7u8; 100_000];
    let (send, recv, _) = exchange(dir.path(), &data);
    assert!(
        send.status.success(),
        "{} {}",
        text(&send.stdout),
        text(&send.stderr)
    );
    assert!(recv.status.success(), "{}", text(&recv.stderr));
    assert!(text(&recv.stdout).contains("\"verified\":true"));
    assert_eq!(
        std::fs::read(dir.path().join("report.bin")).expect("delivered"),
        data
    );
}

#[test]
fn an_output_that_cannot_be_created_is_refused_before_any_data() {
    let dir = tempfile::tempdir().expect("tempdir");
    let blocker = dir.path().join("a-file");
    std::fs::write(&blocker, b"x").expect("blocker");
    // The parent of the output is a regular file: nothing can be created.
    let (send, recv, took) = exchange(&blocker.join("out.bin"), &vec![1u8; 2_000_000]);
    assert_eq!(send.status.code(), Some(1), "{}", text(&send.stderr));
    assert_eq!(recv.status.code(), Some(1), "{}", text(&recv.stderr));
    let err = text(&send.stderr);
    assert!(err.contains("the receiver refused \"report.bin\""), "{err}");
    assert!(err.contains("cannot create"), "{err}");
    assert!(!err.contains("Stats {"), "no debug dump: {err}");
    assert!(
        took < Duration::from_secs(10),
        "refused at once, took {took:?}"
    );
    // Not a byte of data crossed: the receiver saw only the header.
    let rerr = text(&recv.stderr);
    assert!(
        rerr.contains("bytes_received 24,") || rerr.contains("bytes_received 24\n"),
        "{rerr}"
    );
}

#[test]
fn a_receiver_whose_disk_fills_tells_the_sender_at_once() {
    if !diodon_testkit::require_root("a_receiver_whose_disk_fills_tells_the_sender_at_once") {
        return;
    }
    let fs = diodon_testkit::SmallFs::mount(1);
    let (send, recv, took) = exchange(fs.path(), &vec![3u8; 4_000_000]);
    assert_eq!(send.status.code(), Some(1), "{}", text(&send.stderr));
    assert_eq!(recv.status.code(), Some(1), "{}", text(&recv.stderr));
    let err = text(&send.stderr);
    assert!(err.contains("the receiver failed: cannot write"), "{err}");
    assert!(err.contains("No space left on device"), "{err}");
    assert!(
        took < Duration::from_secs(30),
        "told at once, took {took:?}"
    );
    let left: Vec<_> = std::fs::read_dir(fs.path()).expect("list").collect();
    assert!(left.is_empty(), "no partial file is left: {left:?}");
}
