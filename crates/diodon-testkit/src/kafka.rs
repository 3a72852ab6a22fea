//! A real Kafka broker for a test: [`require_kafka`] (the skip policy: Java
//! and the broker fetched by `scripts/kafka.sh fetch`, or skip visibly, or
//! fail under `CI=true`) and [`KafkaBroker`], a single-node KRaft broker
//! that `scripts/kafka.sh` starts in a network namespace and stops when it
//! is dropped, even by a panic. No mock: the script owns how a broker is
//! fetched, configured, started and stopped; this module only drives it.
//!
//! ```text
//!  test ─► KafkaBroker::start(ns, addr) ─► scripts/kafka.sh start --netns NS ─► PID
//!       ◄─ bootstrap "ADDR:PORT" (reachable inside NS)
//!  drop ─► scripts/kafka.sh stop --pid PID; the broker's directory removed
//! ```
//!
//! Also the two small helpers every Kafka test needs: [`block_on`] for the
//! admin client's futures and [`KafkaBroker::log_tail`] for a failure's
//! message.

use crate::{ci, require_netns, Namespace};
use std::io::Write;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicU64, Ordering};

/// `scripts/kafka.sh` of this workspace.
pub fn kafka_script() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../scripts/kafka.sh")
}

/// Whether this test may start a Kafka broker in a namespace: root and
/// namespaces ([`require_netns`]), `java`, and the broker fetched
/// (`scripts/kafka.sh fetch`, which `scripts/setup.sh` runs for the tests).
/// Prints why not and returns `false` (skip) — unless `CI=true`, where it
/// panics instead.
pub fn require_kafka(test: &str) -> bool {
    if !require_netns(test) {
        return false;
    }
    let reason = match Command::new(kafka_script()).arg("classpath").output() {
        Ok(out) if out.status.success() => match Command::new("java").arg("-version").output() {
            Ok(java) if java.status.success() => return true,
            Ok(_) | Err(_) => "no `java` on PATH".to_owned(),
        },
        Ok(out) => String::from_utf8_lossy(&out.stderr).trim().to_owned(),
        Err(e) => format!("cannot run scripts/kafka.sh: {e}"),
    };
    assert!(
        !ci(),
        "{test}: {reason}; CI=true, so this test must run (scripts/setup.sh with DIODON_SETUP=tests installs Java and fetches Kafka)"
    );
    let _ = writeln!(
        std::io::stderr(),
        "SKIPPED {test}: {reason} (DIODON_SETUP=tests scripts/setup.sh installs Java and fetches Kafka)"
    );
    false
}

/// A single-node Kafka broker (KRaft, broker and controller in one JVM)
/// listening inside a namespace; stopped and its log directory removed
/// when dropped. Its log stays readable through [`KafkaBroker::log`] while
/// it runs.
#[derive(Debug)]
pub struct KafkaBroker {
    pid: u32,
    bootstrap: SocketAddr,
    dir: PathBuf,
    netns: String,
}

impl KafkaBroker {
    /// Starts a broker in `ns` on `listen` (its controller takes the next
    /// port); returns once the listener accepts. Panics with the script's
    /// message when the broker does not come up.
    pub fn start(ns: &Namespace, listen: SocketAddr) -> KafkaBroker {
        static BROKERS: AtomicU64 = AtomicU64::new(0);
        let n = BROKERS.fetch_add(1, Ordering::Relaxed);
        let dir = std::env::temp_dir().join(format!("diodon-kafka-{}-{n}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let mut broker = KafkaBroker {
            pid: 0,
            bootstrap: listen,
            dir,
            netns: ns.name().to_owned(),
        };
        broker.launch(false);
        broker
    }

    /// Stops the broker and keeps its data (topics, records, offsets);
    /// [`KafkaBroker::start_again`] brings it back.
    pub fn stop(&mut self) {
        let out = Command::new(kafka_script())
            .args(["stop", "--pid", &self.pid.to_string()])
            .output()
            .unwrap_or_else(|e| panic!("scripts/kafka.sh stop: {e}"));
        assert!(
            out.status.success(),
            "scripts/kafka.sh stop: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }

    /// Starts the stopped broker again on its address, with its data.
    pub fn start_again(&mut self) {
        self.launch(true);
    }

    fn launch(&mut self, again: bool) {
        let mut cmd = Command::new(kafka_script());
        cmd.args(["start", "--netns", &self.netns, "--listen"])
            .arg(self.bootstrap.to_string())
            .arg("--dir")
            .arg(&self.dir);
        if again {
            cmd.arg("--again");
        }
        let out = cmd
            .output()
            .unwrap_or_else(|e| panic!("scripts/kafka.sh start: {e}"));
        assert!(
            out.status.success(),
            "scripts/kafka.sh start: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        self.pid = String::from_utf8_lossy(&out.stdout)
            .trim()
            .parse()
            .unwrap_or_else(|e| panic!("scripts/kafka.sh start printed no PID ({e})"));
    }

    /// The broker's address for a client's `bootstrap.servers` (reachable
    /// from inside its namespace).
    pub fn bootstrap(&self) -> SocketAddr {
        self.bootstrap
    }

    /// The broker JVM's process id.
    pub fn pid(&self) -> u32 {
        self.pid
    }

    /// What the broker logged so far (for a failing test's message).
    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.join("broker.log")).unwrap_or_default()
    }

    /// The last 40 lines of the broker's log, for a failure's message.
    pub fn log_tail(&self) -> String {
        let log = self.log();
        let lines: Vec<&str> = log.lines().collect();
        lines[lines.len().saturating_sub(40)..].join("\n")
    }
}

impl Drop for KafkaBroker {
    fn drop(&mut self) {
        let stopped = Command::new(kafka_script())
            .args(["stop", "--pid", &self.pid.to_string()])
            .status();
        if !stopped.is_ok_and(|s| s.success()) {
            let _ = writeln!(
                std::io::stderr(),
                "KafkaBroker: scripts/kafka.sh stop --pid {} failed; {} kept",
                self.pid,
                self.dir.display()
            );
            return;
        }
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// Runs a future to its end on this thread: rdkafka's admin client
/// completes its futures from its own thread, so no runtime is needed.
pub fn block_on<F: std::future::Future>(f: F) -> F::Output {
    use std::sync::Arc;
    use std::task::{Context, Poll, Wake, Waker};
    struct Unpark(std::thread::Thread);
    impl Wake for Unpark {
        fn wake(self: Arc<Self>) {
            self.0.unpark();
        }
    }
    let waker = Waker::from(Arc::new(Unpark(std::thread::current())));
    let mut cx = Context::from_waker(&waker);
    let mut f = std::pin::pin!(f);
    loop {
        if let Poll::Ready(out) = f.as_mut().poll(&mut cx) {
            return out;
        }
        std::thread::park_timeout(std::time::Duration::from_millis(100));
    }
}
