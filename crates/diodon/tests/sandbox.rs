//! The receiver and the sender restrict themselves once set up: the real
//! binary, as root, over loopback. What is denied is shown by the binary's
//! own self-test hook (`DIODON_SANDBOX_SELFTEST`), which tries a write, a
//! read, a connection or an exec from a thread started after the sandbox,
//! as the pipeline's threads are; what is in force is read from
//! `/proc/PID/status` of the running process.
//!
//! ```text
//!  this test ─ DIODON_SANDBOX_SELFTEST=write:OUTSIDE,… ─► diodon recv --out DIR (root)
//!      │                                                   open socket, folder ─► sandbox
//!      │   ◄── stderr: "sandbox self-test: denied … errno=13" ──┘
//!      ├── /proc/PID/status: NoNewPrivs 1, Seccomp 2, CapEff 0, Uid
//!      └── diodon send FILE ──UDP 127.0.0.1──► DIR/FILE identical
//! ```

#![expect(clippy::unwrap_used, reason = "test helpers fail loudly")]

use diodon_io::sandbox::ProcStatus;
use diodon_testkit::selftest::{allowed, denied_with};
use std::io::{BufRead, BufReader, Read};
use std::net::{TcpListener, UdpSocket};
use std::os::unix::fs::MetadataExt;
use std::os::unix::process::ExitStatusExt;
use std::path::Path;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

const BIN: &str = env!("CARGO_BIN_EXE_diodon");
const SELFTEST: &str = "DIODON_SANDBOX_SELFTEST";

fn free_udp() -> String {
    let s = UdpSocket::bind("127.0.0.1:0").unwrap();
    s.local_addr().unwrap().to_string()
}

/// A running `diodon` whose stderr is collected line by line.
struct Running {
    child: Child,
    log: Arc<Mutex<String>>,
}

impl Running {
    fn start(args: &[&str], selftest: Option<&str>) -> Running {
        Self::start_in(args, selftest, None)
    }

    /// [`Running::start`] in the folder `cwd`.
    fn start_in(args: &[&str], selftest: Option<&str>, cwd: Option<&Path>) -> Running {
        let mut cmd = Command::new(BIN);
        if let Some(dir) = cwd {
            cmd.current_dir(dir);
        }
        cmd.args(args)
            .env("DIODON_LOG", "info")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped());
        match selftest {
            Some(s) => cmd.env(SELFTEST, s),
            None => cmd.env_remove(SELFTEST),
        };
        let mut child = cmd.spawn().unwrap();
        let log = Arc::new(Mutex::new(String::new()));
        let stderr = child.stderr.take().unwrap();
        let sink = Arc::clone(&log);
        std::thread::spawn(move || {
            for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                let mut l = sink.lock().unwrap();
                l.push_str(&line);
                l.push('\n');
            }
        });
        Running { child, log }
    }

    fn log(&self) -> String {
        self.log.lock().unwrap().clone()
    }

    /// Waits until the log holds `text`.
    #[expect(clippy::disallowed_methods, reason = "test harness deadline")]
    fn wait_for(&self, text: &str) -> String {
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            let log = self.log();
            if log.contains(text) {
                return log;
            }
            assert!(Instant::now() < deadline, "no {text:?} in:\n{log}");
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    fn status(&self) -> ProcStatus {
        ProcStatus::read(self.child.id()).unwrap()
    }

    #[expect(clippy::disallowed_methods, reason = "test harness deadline")]
    fn wait(mut self, limit: Duration) -> (ExitStatus, String) {
        let deadline = Instant::now() + limit;
        loop {
            if let Some(st) = self.child.try_wait().unwrap() {
                // The reader thread drains the pipe after the exit.
                std::thread::sleep(Duration::from_millis(100));
                return (st, self.log());
            }
            if Instant::now() > deadline {
                let _ = self.child.kill();
                panic!("still running after {limit:?}:\n{}", self.log());
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn random_file(path: &Path, len: usize) {
    let mut data = vec![0u8; len];
    std::fs::File::open("/dev/urandom")
        .unwrap()
        .read_exact(&mut data)
        .unwrap();
    std::fs::write(path, data).unwrap();
}

fn send(to: &str, paths: &[&Path], selftest: Option<&str>) -> (ExitStatus, String) {
    let mut args = vec!["send", "--to", to, "--rate", "200mbit"];
    args.extend(paths.iter().map(|p| p.to_str().unwrap()));
    Running::start(&args, selftest).wait(Duration::from_secs(60))
}

fn recv_files(listen: &str, out: &Path, extra: &[&str], selftest: Option<&str>) -> Running {
    let mut args = vec![
        "recv",
        "--listen",
        listen,
        "--out",
        out.to_str().unwrap(),
        "--rate",
        "200mbit",
    ];
    args.extend_from_slice(extra);
    Running::start(&args, selftest)
}

#[test]
fn a_sandboxed_receiver_running_as_root_is_denied_writes_outside_its_folder() {
    if !diodon_testkit::require_root(
        "a_sandboxed_receiver_running_as_root_is_denied_writes_outside_its_folder",
    ) {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("out");
    let outside = dir.path().join("escaped");
    let inside = out.join("inside");
    let spec = format!(
        "write:{},write:{},read:/etc/shadow,read:/proc/self/status",
        outside.display(),
        inside.display()
    );
    let rx = recv_files(&free_udp(), &out, &[], Some(&spec));
    let log = rx.wait_for("target=\"/proc/self/status\"");
    // Root, whom file modes do not stop, is stopped by Landlock: EACCES.
    denied_with(&log, "write", outside.to_str().unwrap(), libc::EACCES);
    denied_with(&log, "read", "/etc/shadow", libc::EACCES);
    assert!(!outside.exists(), "the write outside went through");
    // The folder itself and the process's own /proc stay usable.
    allowed(&log, "write", inside.to_str().unwrap());
    allowed(&log, "read", "/proc/self/status");
    assert!(
        log.contains(
            "sandbox: user unchanged (uid 0), capabilities dropped, no_new_privs, Landlock ABI"
        ),
        "{log}"
    );
}

#[test]
fn without_the_sandbox_the_same_write_goes_through() {
    if !diodon_testkit::require_root("without_the_sandbox_the_same_write_goes_through") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("out");
    let outside = dir.path().join("escaped");
    let spec = format!("write:{}", outside.display());
    let rx = recv_files(&free_udp(), &out, &["--no-sandbox"], Some(&spec));
    let log = rx.wait_for("sandbox self-test");
    // The probe is real: unrestricted, it writes (and removes) the file.
    allowed(&log, "write", outside.to_str().unwrap());
    let st = rx.status();
    assert!(!st.no_new_privs && st.seccomp == 0, "{st:?}");
    assert!(log.contains("Landlock off, seccomp off"), "{log}");
}

#[test]
fn a_running_receiver_has_no_new_privs_a_seccomp_filter_and_delivers_a_file() {
    if !diodon_testkit::require_root(
        "a_running_receiver_has_no_new_privs_a_seccomp_filter_and_delivers_a_file",
    ) {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("out");
    let src = dir.path().join("src");
    std::fs::create_dir_all(src.join("sub")).unwrap();
    random_file(&src.join("big.bin"), 3_000_000);
    random_file(&src.join("sub/small.bin"), 1000);
    let listen = free_udp();
    let rx = recv_files(&listen, &out, &["--once"], None);
    rx.wait_for("receiver listening");
    let st = rx.status();
    assert!(st.no_new_privs, "NoNewPrivs: {st:?}");
    assert_eq!(st.seccomp, 2, "Seccomp: {st:?}");
    assert_eq!(st.cap_eff, 0, "CapEff: {st:?}");
    let (sent, send_log) = send(&listen, &[&src], None);
    assert!(sent.success(), "{send_log}");
    assert!(send_log.contains("sandbox: "), "{send_log}");
    let (done, log) = rx.wait(Duration::from_secs(30));
    assert!(done.success(), "{log}");
    for f in ["big.bin", "sub/small.bin"] {
        assert_eq!(
            std::fs::read(out.join("src").join(f)).unwrap(),
            std::fs::read(src.join(f)).unwrap(),
            "{f}"
        );
    }
}

#[test]
fn user_nobody_drops_root_and_writes_the_folder_it_owns() {
    if !diodon_testkit::require_root("user_nobody_drops_root_and_writes_the_folder_it_owns") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("out");
    std::fs::create_dir(&out).unwrap();
    std::os::unix::fs::chown(&out, Some(65534), Some(65534)).unwrap();
    let src = dir.path().join("file.bin");
    random_file(&src, 500_000);
    let listen = free_udp();
    let rx = recv_files(&listen, &out, &["--once", "--user", "nobody"], None);
    let log = rx.wait_for("receiver listening");
    assert!(log.contains("sandbox: user nobody (uid 65534"), "{log}");
    let st = rx.status();
    assert_eq!(st.uid, 65534, "{st:?}");
    assert_eq!(st.cap_eff, 0, "{st:?}");
    assert!(st.no_new_privs && st.seccomp == 2, "{st:?}");
    let (sent, send_log) = send(&listen, &[&src], None);
    assert!(sent.success(), "{send_log}");
    let (done, log) = rx.wait(Duration::from_secs(30));
    assert!(done.success(), "{log}");
    let got = out.join("file.bin");
    assert_eq!(std::fs::read(&got).unwrap(), std::fs::read(&src).unwrap());
    assert_eq!(std::fs::metadata(&got).unwrap().uid(), 65534);
}

#[test]
fn exec_after_the_sandbox_kills_the_receiver() {
    if !diodon_testkit::require_root("exec_after_the_sandbox_kills_the_receiver") {
        return;
    }
    let rx = Running::start(
        &["recv", "--listen", &free_udp(), "--stdout"],
        Some("exec:/bin/true"),
    );
    let (st, log) = rx.wait(Duration::from_secs(20));
    assert_eq!(st.signal(), Some(libc::SIGSYS), "{st:?}\n{log}");
}

#[test]
fn a_tcp_forwarding_receiver_connects_only_to_its_port() {
    if !diodon_testkit::require_root("a_tcp_forwarding_receiver_connects_only_to_its_port") {
        return;
    }
    let dest = TcpListener::bind("127.0.0.1:0").unwrap();
    let other = TcpListener::bind("127.0.0.1:0").unwrap();
    let (dest, other) = (
        dest.local_addr().unwrap().to_string(),
        other.local_addr().unwrap().to_string(),
    );
    let dir = tempfile::tempdir().unwrap();
    let outside = dir.path().join("x");
    let spec = format!("connect:{dest},connect:{other},write:{}", outside.display());
    let rx = Running::start(
        &["recv", "--listen", &free_udp(), "--tcp-connect", &dest],
        Some(&spec),
    );
    let log = rx.wait_for(&format!("target=\"{}\"", outside.display()));
    allowed(&log, "connect", &dest);
    // Landlock: TCP connect to its own port only.
    denied_with(&log, "connect", &other, libc::EACCES);
    // This output writes no file: seccomp refuses the creating open.
    denied_with(&log, "write", outside.to_str().unwrap(), libc::EPERM);
}

#[test]
fn the_sender_reads_only_its_sources_and_writes_nothing() {
    if !diodon_testkit::require_root("the_sender_reads_only_its_sources_and_writes_nothing") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let src = dir.path().join("src");
    std::fs::create_dir(&src).unwrap();
    random_file(&src.join("a.bin"), 100_000);
    let beside = dir.path().join("beside");
    random_file(&beside, 10);
    let inside_new = src.join("new");
    let spec = format!(
        "read:{},read:{},write:{}",
        src.join("a.bin").display(),
        beside.display(),
        inside_new.display()
    );
    let out = dir.path().join("out");
    let listen = free_udp();
    let rx = recv_files(&listen, &out, &["--once"], None);
    rx.wait_for("receiver listening");
    let (sent, log) = send(&listen, &[&src], Some(&spec));
    assert!(sent.success(), "{log}");
    allowed(&log, "read", src.join("a.bin").to_str().unwrap());
    denied_with(&log, "read", beside.to_str().unwrap(), libc::EACCES);
    // Not even below its sources: seccomp refuses any creating open.
    denied_with(&log, "write", inside_new.to_str().unwrap(), libc::EPERM);
    let (done, rlog) = rx.wait(Duration::from_secs(30));
    assert!(done.success(), "{rlog}");
    assert_eq!(
        std::fs::read(out.join("src/a.bin")).unwrap(),
        std::fs::read(src.join("a.bin")).unwrap()
    );
}

#[test]
fn a_sandboxed_sync_writes_only_beside_its_database_and_still_watches() {
    if !diodon_testkit::require_root(
        "a_sandboxed_sync_writes_only_beside_its_database_and_still_watches",
    ) {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let src = dir.path().join("src");
    std::fs::create_dir(&src).unwrap();
    random_file(&src.join("a.bin"), 50_000);
    let state_dir = dir.path().join("state");
    std::fs::create_dir(&state_dir).unwrap();
    let beside = dir.path().join("beside");
    random_file(&beside, 10);
    let (in_state, in_src, outside) = (
        state_dir.join("probe"),
        src.join("new"),
        dir.path().join("outside"),
    );
    let spec = format!(
        "write:{},write:{},write:{},read:{}",
        in_state.display(),
        in_src.display(),
        outside.display(),
        beside.display()
    );
    let out = dir.path().join("out");
    let listen = free_udp();
    let rx = recv_files(&listen, &out, &[], None);
    rx.wait_for("receiver listening");
    // Relative, as the default `diodon-sync.sqlite` is.
    let args = [
        "sync",
        src.to_str().unwrap(),
        "--to",
        &listen,
        "--state",
        "state/sync.sqlite",
        "--once",
        "--passes",
        "1",
        "--settle",
        "0",
        "--rate",
        "200mbit",
    ];
    let (synced, log) =
        Running::start_in(&args, Some(&spec), Some(dir.path())).wait(Duration::from_secs(60));
    assert!(synced.success(), "{log}");
    assert!(log.contains("sandbox: "), "no sandbox line:\n{log}");
    // SQLite's database, WAL and shared memory live there.
    allowed(&log, "write", in_state.to_str().unwrap());
    // Sources are read, not written (no --after-send); nothing else is.
    denied_with(&log, "write", in_src.to_str().unwrap(), libc::EACCES);
    denied_with(&log, "write", outside.to_str().unwrap(), libc::EACCES);
    denied_with(&log, "read", beside.to_str().unwrap(), libc::EACCES);
    assert!(
        !log.contains("no file-system watch"),
        "inotify must work inside the sandbox:\n{log}"
    );
    // Up to 20 s for the receiver to place it.
    for _ in 0..400 {
        if out.join("src/a.bin").exists() {
            break;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    assert_eq!(
        std::fs::read(out.join("src/a.bin")).unwrap(),
        std::fs::read(src.join("a.bin")).unwrap()
    );
}
