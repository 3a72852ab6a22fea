//! End-to-end tests of the trial harness, `diodon-lab trial`, on the
//! software diode of `scripts/testbed.sh` (and on a given diode), running
//! the `diodon` gateway binary it finds next to itself.
//!
//! ```text
//!  diodon-lab trial plan     ─► CSV (all columns), testresults.txt, summary, PNG; killed
//!                               receiver = failed; Diodon, netcat, pydiode r1/r2; MTU 9000
//!                               with 1 % injected loss
//!  diodon-lab trial --resume ─► a killed run's journal + more rounds; overwrite / other plan refused
//!  diodon-lab trial on a given diode (link.testbed = false) ─► namespaces and operator's guard
//!                               (`diodon guard apply`) as found
//!  diodon-lab killed (SIGKILL) ─► the next run undoes it; two runs never overlap
//!  no `diodon` binary          ─► refused with where it looked
//! ```
//!
//! `cargo test --workspace` builds `diodon` next to `diodon-lab`; `cargo
//! test -p diodon-lab` alone does not, and then [`diodon_bin`] builds it
//! (same profile, same target directory) before the first trial. The
//! namespace tests need root: without it each prints why and passes, except
//! under `CI=true`, where it fails. One at a time (a lock).

#![expect(clippy::unwrap_used, reason = "test helpers fail loudly")]
#![expect(
    clippy::disallowed_methods,
    reason = "the trial test bounds its own wall-clock duration"
)]

use serde_json::Value;
use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::sync::{Mutex, MutexGuard, OnceLock};
use std::time::{Duration, Instant};

/// The lab's binary.
const LAB: &str = env!("CARGO_BIN_EXE_diodon-lab");
const PEER: &str = "10.77.0.2:7700";
static LOCK: Mutex<()> = Mutex::new(());

fn testbed_script() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../scripts/testbed.sh")
}

/// The `diodon` gateway binary the trials run, where the harness looks for
/// it: next to `diodon-lab`. Built here (once, in the profile and target
/// directory of this test) when `cargo test -p diodon-lab` ran without it.
fn diodon_bin() -> &'static Path {
    static BIN: OnceLock<PathBuf> = OnceLock::new();
    BIN.get_or_init(|| {
        let lab = Path::new(LAB);
        let bin = lab.with_file_name(format!("diodon{}", std::env::consts::EXE_SUFFIX));
        if !bin.is_file() {
            // `cargo test` writes its `test` profile into target/debug.
            let profile = match lab
                .parent()
                .and_then(Path::file_name)
                .and_then(|n| n.to_str())
            {
                Some("debug") | None => "test",
                Some(other) => other,
            };
            eprintln!("building {} (profile {profile})", bin.display());
            let status = Command::new(env!("CARGO"))
                .args([
                    "build",
                    "-p",
                    "diodon",
                    "--bin",
                    "diodon",
                    "--profile",
                    profile,
                ])
                .current_dir(env!("CARGO_MANIFEST_DIR"))
                .status()
                .unwrap();
            assert!(status.success(), "cargo build of the diodon binary failed");
            assert!(bin.is_file(), "{} not built where expected", bin.display());
        }
        bin
    })
}

/// Runs `diodon-lab trial PLAN --out OUT_DIR` on a testbed named `name`,
/// echoing its output (shown when the test fails).
fn run_trial(plan: &Path, out_dir: &Path, name: &str) -> std::process::Output {
    run_trial_with(plan, out_dir, name, &[])
}

/// [`run_trial`] with extra arguments.
fn run_trial_with(plan: &Path, out_dir: &Path, name: &str, extra: &[&str]) -> Output {
    let out = Command::new(LAB)
        .arg("trial")
        .arg(plan)
        .arg("--out")
        .arg(out_dir)
        .arg("--testbed")
        .arg(testbed_script())
        .args(["--name", name])
        .args(extra)
        .output()
        .unwrap();
    eprintln!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    out
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

/// The lab's lock (one test at a time: they share `net.core.rmem_*`), or
/// `None` after saying why the lab cannot run here (the test is skipped).
fn lab() -> Option<MutexGuard<'static, ()>> {
    let lock = LOCK
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    if let Some(why) = unavailable() {
        skip(&why);
        return None;
    }
    diodon_bin();
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
            name: format!("dlt{}", std::process::id()),
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
        let out = Command::new(diodon_bin()).args(args).output().unwrap();
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

fn pkts(v: &Value, counter: &str) -> u64 {
    v[counter]["packets"].as_u64().unwrap()
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

/// pydiode from `PyPI`, installed by the project's own script when missing.
fn ensure_pydiode() -> bool {
    let have = || {
        Command::new("sh")
            .args(["-c", "pydiode --help"])
            .output()
            .is_ok_and(|o| o.status.success())
    };
    if !have() {
        let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../scripts/install-pydiode.sh");
        let _ = Command::new("bash").arg(script).status();
    }
    have()
}

fn rmem() -> (String, String) {
    (
        fs::read_to_string("/proc/sys/net/core/rmem_max").unwrap(),
        fs::read_to_string("/proc/sys/net/core/rmem_default").unwrap(),
    )
}

/// `ip netns list`.
fn netns_list() -> String {
    let out = Command::new("ip").args(["netns", "list"]).output().unwrap();
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// A run's `trials.csv`: its header and rows, read by column name.
struct TrialRows {
    header: Vec<String>,
    rows: Vec<Vec<String>>,
}

impl TrialRows {
    fn load(out_dir: &Path) -> TrialRows {
        let csv = fs::read_to_string(out_dir.join("trials.csv")).unwrap();
        let mut lines = csv
            .lines()
            .map(|l| l.split(',').map(str::to_owned).collect::<Vec<String>>());
        TrialRows {
            header: lines.next().unwrap(),
            rows: lines.collect(),
        }
    }

    fn col<'r>(&self, row: &'r [String], name: &str) -> &'r str {
        &row[self.header.iter().position(|h| h == name).unwrap()]
    }

    fn num(&self, row: &[String], name: &str) -> u64 {
        self.col(row, name).parse().unwrap()
    }
}

#[test]
#[expect(
    clippy::too_many_lines,
    reason = "one scenario, checked output by output"
)]
fn trial_plan_writes_every_output_and_a_killed_receiver_fails() {
    let Some(_lock) = lab() else { return };
    if !ensure_netcat() {
        return skip("no `nc` (Debian package netcat-openbsd)");
    }
    if !ensure_pydiode() {
        return skip("no `pydiode` (scripts/install-pydiode.sh could not install it)");
    }
    let dir = tempfile::tempdir().unwrap();
    let plan = dir.path().join("plan.toml");
    fs::write(
        &plan,
        "tools = [\"diodon\", \"netcat\", \"pydiode-r1\", \"pydiode-r2\"]\nbitrates_mbps = [200]\ntrials = 3\nrcvbuf = [2097152]\ntimeout_s = 20\n[file]\nsize = 5000000\n[fault]\nkill_receiver_trial = 2\nkill_receiver_after_ms = 50\n",
    )
    .unwrap();
    let out_dir = dir.path().join("out");
    let before = rmem();
    let name = format!("dtl{}", std::process::id());
    let started = std::time::Instant::now();
    let out = run_trial(&plan, &out_dir, &name);
    assert_eq!(rmem(), before, "net.core.rmem_* restored");
    assert_eq!(out.status.code(), Some(0));
    assert!(started.elapsed() < Duration::from_secs(150), "kept fast");

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
    assert_eq!(rows.len(), 12, "4 tools x 3 trials");
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
            // The receiver exits when the file is verified, not after the
            // link's silence timer: 5 MB at 200 Mbit/s is ~0.25 s on the wire.
            let t: f64 = col(r, "Xfer_time").parse().unwrap();
            assert!(t < 1.2, "Diodon's Xfer_time is the transfer: {r:?}");
        } else if let Some(red) = tool.strip_prefix("pydiode-r") {
            // pydiode's 65507-byte datagrams: one 100-datagram chunk for
            // 5 MB, each chunk sent `red` times, then the end-of-file chunk.
            assert_eq!(col(r, "Xfer_success"), "True", "{r:?}");
            assert_eq!(col(r, "receiver_rc"), "0", "{r:?}");
            assert_eq!(col(r, "out_file_size"), "5000000");
            let red: u64 = red.parse().unwrap();
            assert_eq!(col(r, "dtgrms_sent"), (200 * red).to_string(), "{r:?}");
            assert_eq!(col(r, "repair_ratio"), (red - 1).to_string());
            assert_eq!(col(r, "snmp_ReasmFails"), "0", "{r:?}");
        }
    }
    for cfg in [
        "diodon_rcvbuf-2MiB_mtu-1500_loss-0",
        "netcat_rcvbuf-2MiB_mtu-1500_loss-0",
        "pydiode-r1_rcvbuf-2MiB_mtu-1500_loss-0",
        "pydiode-r2_rcvbuf-2MiB_mtu-1500_loss-0",
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

/// MTU 9000 and injected-loss cells: the testbed is built with that MTU and
/// drops 1 % of what reaches the receiver (and is rebuilt before every trial,
/// so one trial's half-reassembled fragments cannot starve the next); Diodon
/// recovers what was lost, and every column says what happened.
#[test]
fn trial_runs_mtu_9000_with_injected_loss() {
    let Some(_lock) = lab() else { return };
    if !ensure_pydiode() {
        return skip("no `pydiode` (scripts/install-pydiode.sh could not install it)");
    }
    let dir = tempfile::tempdir().unwrap();
    let plan = dir.path().join("plan.toml");
    fs::write(
        &plan,
        "tools = [\"diodon\", \"pydiode-r2\"]\nbitrates_mbps = [300]\ntrials = 2\nmtu = [9000]\nloss = [1.0]\ntimeout_s = 20\n[file]\nsize = 5000000\n",
    )
    .unwrap();
    let out_dir = dir.path().join("out");
    let name = format!("dtm{}", std::process::id());
    let out = run_trial(&plan, &out_dir, &name);
    assert_eq!(out.status.code(), Some(0));
    let netns = netns_list();
    assert!(!netns.contains(&name), "testbed left behind: {netns}");
    let t = TrialRows::load(&out_dir);
    assert_eq!(t.rows.len(), 4);
    let col = |r: &Vec<String>, name: &str| t.col(r, name).to_owned();
    let mut diodon_lost = 0;
    for r in &t.rows {
        assert_eq!(col(r, "mtu"), "9000");
        assert_eq!(col(r, "injected_loss"), "1");
        assert!(col(r, "snmp_ReasmFails").parse::<u64>().is_ok(), "{r:?}");
        if col(r, "tool") == "diodon" {
            assert_eq!(
                col(r, "Xfer_success"),
                "True",
                "1 % loss is within 10 % repair: {r:?}"
            );
            let sent: u64 = col(r, "dtgrms_sent").parse().unwrap();
            let got: u64 = col(r, "dtgrms_received").parse().unwrap();
            // 8972-byte datagrams: 5 MB + 10 % repair is about 620 of them.
            assert!(
                (550..800).contains(&sent),
                "no IP fragmentation at MTU 9000: {r:?}"
            );
            diodon_lost += sent - got;
            // Diodon's own count of what the link took matches the guards'.
            assert!(
                col(r, "missing").parse::<u64>().unwrap() <= sent - got,
                "{r:?}"
            );
        } else {
            assert!(
                col(r, "Xfer_success") == "True" || !col(r, "reason").is_empty(),
                "a failed trial says why: {r:?}"
            );
        }
    }
    // About 12 expected over two trials; none at all would mean no loss was injected.
    assert!(diodon_lost > 0, "the 1 % loss rule dropped nothing");
}

/// A given diode (`link.testbed = false`, e.g. two NICs of a real diode in
/// two namespaces): the harness runs in namespaces it did not make, counts
/// with its own guard table, and leaves the namespaces and the operator's
/// guard (`diodon guard apply`) exactly as it found them. A namespace that
/// is not there is refused before anything changes.
#[test]
fn trial_on_a_given_diode_leaves_it_and_the_operators_guard_as_found() {
    let Some(tb) = Testbed::up() else { return };
    for side in ["tx", "rx"] {
        assert_eq!(tb.guard("apply", side).status.code(), Some(0));
        assert!(tb
            .diodon(&["guard", "reset", "--ns", &tb.ns(side)])
            .status
            .success());
    }
    let (tx_ns, rx_ns) = (tb.ns("tx"), tb.ns("rx"));
    let dir = tempfile::tempdir().unwrap();
    // The operator's guard lets PEER's port through; the trial uses it.
    let plan_text = |rx: &str| {
        format!(
            "tools = [\"diodon\"]\nbitrates_mbps = [200]\ntrials = 2\ntimeout_s = 20\n\
             [file]\nsize = 2000000\n\
             [link]\ntestbed = false\ntx_ns = \"{tx_ns}\"\nrx_ns = \"{rx}\"\nport = 7700\n"
        )
    };
    let missing = dir.path().join("missing.toml");
    fs::write(&missing, plan_text(&format!("{rx_ns}-gone"))).unwrap();
    let out = run_trial(&missing, &dir.path().join("missing-out"), "unused");
    assert_eq!(out.status.code(), Some(3));
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("does not exist"),
        "names the missing namespace"
    );

    let plan = dir.path().join("plan.toml");
    fs::write(&plan, plan_text(&rx_ns)).unwrap();
    let out_dir = dir.path().join("out");
    let before = rmem();
    let out = run_trial(&plan, &out_dir, "unused");
    assert_eq!(out.status.code(), Some(0));
    assert_eq!(rmem(), before, "net.core.rmem_* restored");

    let t = TrialRows::load(&out_dir);
    assert_eq!(t.rows.len(), 2);
    let mut received = 0;
    for r in &t.rows {
        assert_eq!(t.col(r, "Xfer_success"), "True", "{r:?}");
        let sent = t.num(r, "dtgrms_sent");
        // 2 MB + 10 % repair in 1472-byte datagrams: about 1550.
        assert!(sent > 1400, "counted by the harness's own guard: {r:?}");
        assert_eq!(t.num(r, "dtgrms_received"), sent, "{r:?}");
        received += sent;
    }

    // As found: both namespaces, the operator's guard intact (and it saw
    // the trials' datagrams too), the harness's own table gone.
    let netns = netns_list();
    assert!(netns.contains(&tx_ns) && netns.contains(&rx_ns), "{netns}");
    for side in ["tx", "rx"] {
        assert_eq!(tb.guard("verify", side).status.code(), Some(0), "{side}");
        let ns = tb.ns(side);
        let trial_table = Command::new("ip")
            .args(["netns", "exec", &ns, "nft", "list", "table", "netdev"])
            .arg(diodon_lab::diode::TRIAL_TABLE)
            .stderr(Stdio::null())
            .status()
            .unwrap();
        assert!(!trial_table.success(), "trial table left in {ns}");
    }
    assert!(pkts(&tb.counters("rx"), "accepted") >= received);
}

/// PIDs in network namespace `ns`.
fn netns_pids(ns: &str) -> Vec<u32> {
    let out = Command::new("ip")
        .args(["netns", "pids", ns])
        .output()
        .unwrap();
    String::from_utf8_lossy(&out.stdout)
        .split_whitespace()
        .filter_map(|p| p.parse().ok())
        .collect()
}

/// Polls `cond` every 50 ms for up to `secs`.
fn wait_for(secs: u64, mut cond: impl FnMut() -> bool) -> bool {
    let end = Instant::now() + Duration::from_secs(secs);
    while Instant::now() < end {
        if cond() {
            return true;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    cond()
}

/// A harness this test started; killed (by its PID) if the test fails.
struct Harness(std::process::Child);

impl Drop for Harness {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// A harness killed outright (SIGKILL: no chance to restore anything) takes
/// its tools with it, and the next `diodon-lab trial` puts back what it left:
/// its `net.core.rmem_*` value and its testbed. While a run is going, a
/// second one is refused and changes nothing.
#[test]
fn a_killed_trial_run_is_undone_by_the_next_and_runs_never_overlap() {
    let Some(_lock) = lab() else { return };
    let dir = tempfile::tempdir().unwrap();
    let before = rmem();
    // A receive buffer no machine has by default: unmistakably the run's.
    let odd = "4200000";
    assert_ne!(before.0.trim(), odd);
    let long = dir.path().join("long.toml");
    fs::write(
        &long,
        format!(
            "tools = [\"diodon\"]\nbitrates_mbps = [50]\ntrials = 1\ntimeout_s = 120\n\
             rcvbuf = [{odd}]\n[file]\nsize = 100000000\n"
        ),
    )
    .unwrap();
    let short = dir.path().join("short.toml");
    fs::write(
        &short,
        "tools = [\"diodon\"]\nbitrates_mbps = [200]\ntrials = 1\ntimeout_s = 30\n\
         [file]\nsize = 1000000\n",
    )
    .unwrap();
    let (tx, rx) = ("dtrkill-tx", "dtrkill-rx");
    let mut harness = Harness(
        Command::new(LAB)
            .arg("trial")
            .arg(&long)
            .arg("--out")
            .arg(dir.path().join("killed"))
            .arg("--testbed")
            .arg(testbed_script())
            .args(["--name", "dtrkill", "--quiet"])
            .stdout(Stdio::null())
            .spawn()
            .unwrap(),
    );
    let pid = harness.0.id();
    let record = Path::new(diodon_lab::recovery::DEFAULT_DIR).join(format!("{pid}.run"));
    assert!(
        wait_for(60, || rmem().0.trim() == odd
            && netns_pids(rx).len() == 1
            && netns_pids(tx).len() == 1),
        "the run did not get to its transfer: rmem {:?}, rx {:?}, tx {:?}",
        rmem(),
        netns_pids(rx),
        netns_pids(tx)
    );
    assert!(record.is_file(), "no record {}", record.display());

    // Meanwhile a second run is refused before it changes anything.
    let out = run_trial(&short, &dir.path().join("refused"), "dtrother");
    assert_eq!(out.status.code(), Some(3));
    assert!(
        String::from_utf8_lossy(&out.stderr)
            .contains(&format!("another trial run is going (pid {pid}")),
        "says which run is going"
    );
    assert_eq!(rmem().0.trim(), odd);
    assert!(!netns_list().contains("dtrother"));

    // SIGKILL: the harness restores nothing, but its tools die with it.
    harness.0.kill().unwrap();
    harness.0.wait().unwrap();
    assert!(
        wait_for(5, || netns_pids(rx).is_empty() && netns_pids(tx).is_empty()),
        "the killed harness's receiver/sender still run: rx {:?} tx {:?}",
        netns_pids(rx),
        netns_pids(tx)
    );
    assert_eq!(rmem().0.trim(), odd, "left by the killed run");
    assert!(netns_list().contains(rx), "left by the killed run");
    assert!(record.is_file());

    // The next run undoes it first, then runs as usual.
    let out = run_trial(&short, &dir.path().join("next"), "dtrnext");
    assert_eq!(out.status.code(), Some(0));
    let said = String::from_utf8_lossy(&out.stderr);
    assert!(said.contains("testbed dtrkill taken down"), "{said}");
    assert!(
        said.contains(&format!("net.core.rmem_max {odd} -> {}", before.0.trim())),
        "{said}"
    );
    assert_eq!(
        rmem(),
        before,
        "net.core.rmem_* back to what the killed run found"
    );
    let netns = netns_list();
    assert!(
        !netns.contains("dtrkill") && !netns.contains("dtrnext"),
        "{netns}"
    );
    assert!(!record.exists(), "the killed run's record is cleared");
    assert_eq!(TrialRows::load(&dir.path().join("next")).rows.len(), 1);
}

/// `diodon-lab trial --resume`: a run in pieces. A finished 1-trial run, plus
/// the journal a killed second run left (one row, marked by its time), is
/// resumed with `trials = 2`: the earlier rows are kept as they were, the
/// journal's row is not run again, only the missing trial runs, and the
/// journal is folded into trials.csv. A plain rerun into the same directory
/// and a resume with a different plan are refused (exit 2) and change nothing.
/// `--report-only` then rewrites the same reports from trials.csv alone.
#[test]
fn trial_resume_adds_only_missing_trials_and_refuses_to_overwrite() {
    let Some(_lock) = lab() else { return };
    let dir = tempfile::tempdir().unwrap();
    let plan_text = |trials: u32, rates: &str| {
        format!("tools = [\"diodon\"]\nbitrates_mbps = [{rates}]\ntrials = {trials}\ntimeout_s = 20\n[file]\nsize = 2000000\n")
    };
    let plan = dir.path().join("plan.toml");
    fs::write(&plan, plan_text(1, "200, 400")).unwrap();
    let out_dir = dir.path().join("out");
    let name = format!("dtz{}", std::process::id());
    let out = run_trial(&plan, &out_dir, &name);
    assert_eq!(out.status.code(), Some(0));
    let first = fs::read_to_string(out_dir.join("trials.csv")).unwrap();
    let mut first_lines = first.lines();
    let header = first_lines.next().unwrap().to_owned();
    let round1: Vec<String> = first_lines.map(str::to_owned).collect();
    assert_eq!(round1.len(), 2, "{first}");
    assert!(round1.iter().all(|l| l.contains(",True,")), "{first}");

    // A plain rerun would overwrite hours of trials: refused.
    let again = run_trial(&plan, &out_dir, &name);
    assert_eq!(again.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&again.stderr).contains("--resume"));
    assert_eq!(
        fs::read_to_string(out_dir.join("trials.csv")).unwrap(),
        first
    );

    // The journal of a killed run: trial 2 at 200 Mbit/s done (time 9.999),
    // and the first half of the line it was writing when killed.
    let journaled = round1
        .iter()
        .find(|l| l.starts_with("diodon,0,1500,200,1,"))
        .unwrap()
        .replacen(",200,1,", ",200,2,", 1);
    let mut fields: Vec<&str> = journaled.split(',').collect();
    fields[7] = "9.999";
    let journaled = fields.join(",");
    fs::write(
        out_dir.join("journal.csv"),
        format!("{header}\n{journaled}\ndiodon,0,1500,400,2,0,"),
    )
    .unwrap();

    // Resuming with another measurement (other bitrates) is refused.
    fs::write(&plan, plan_text(2, "200, 300")).unwrap();
    let other = run_trial_with(&plan, &out_dir, &name, &["--resume"]);
    assert_eq!(other.status.code(), Some(2));
    assert!(
        String::from_utf8_lossy(&other.stderr).contains("`bitrates_mbps`"),
        "says what differs"
    );

    fs::write(&plan, plan_text(2, "200, 400")).unwrap();
    let resumed = run_trial_with(&plan, &out_dir, &name, &["--resume"]);
    assert_eq!(resumed.status.code(), Some(0));
    assert!(!out_dir.join("journal.csv").exists(), "journal folded in");
    let all = fs::read_to_string(out_dir.join("trials.csv")).unwrap();
    let rows: Vec<&str> = all.lines().skip(1).collect();
    assert_eq!(rows.len(), 4, "{all}");
    assert_eq!(&rows[..2], &round1[..], "round 1 kept as it was");
    assert!(
        rows.contains(&journaled.as_str()),
        "the journal's trial kept: {all}"
    );
    let new = rows
        .iter()
        .find(|l| l.starts_with("diodon,0,1500,400,2,"))
        .unwrap();
    assert!(new.contains(",True,"), "the missing trial ran: {new}");
    let summary = fs::read_to_string(out_dir.join("summary.txt")).unwrap();
    assert!(
        summary.lines().filter(|l| l.contains(" 2 ")).count() >= 2,
        "the summary counts 2 trials per cell: {summary}"
    );

    // --report-only rebuilds the reports from the trials, running none.
    let table = fs::read_to_string(out_dir.join("table.md")).unwrap();
    fs::remove_file(out_dir.join("summary.txt")).unwrap();
    fs::remove_file(out_dir.join("table.md")).unwrap();
    let report = run_trial_with(&plan, &out_dir, &name, &["--report-only"]);
    assert_eq!(report.status.code(), Some(0));
    assert_eq!(fs::read_to_string(out_dir.join("trials.csv")).unwrap(), all);
    assert_eq!(
        fs::read_to_string(out_dir.join("summary.txt")).unwrap(),
        summary
    );
    assert_eq!(fs::read_to_string(out_dir.join("table.md")).unwrap(), table);
    assert!(
        table.contains("| 0 % | 1500 | default buffer | 100 % (4/4, 51–100) |"),
        "{table}"
    );
    let empty = out_dir.with_file_name("empty-report");
    let none = run_trial_with(&plan, &empty, &name, &["--report-only"]);
    assert_eq!(none.status.code(), Some(2), "nothing to report");
}

/// Without the `diodon` binary a plan with the `diodon` tool is refused
/// before anything is changed, with one sentence saying where the harness
/// looked and how to give it.
#[test]
fn a_plan_without_the_diodon_binary_is_refused_with_where_it_looked() {
    let dir = tempfile::tempdir().unwrap();
    let plan = dir.path().join("plan.toml");
    fs::write(
        &plan,
        "tools = [\"diodon\"]\nbitrates_mbps = [100]\ntrials = 1\n",
    )
    .unwrap();
    let gone = dir.path().join("no-such-diodon");
    let out = run_trial_with(
        &plan,
        &dir.path().join("out"),
        "unused",
        &["--diodon", gone.to_str().unwrap()],
    );
    assert_eq!(out.status.code(), Some(3));
    let said = String::from_utf8_lossy(&out.stderr);
    assert!(
        said.contains(&format!("not found at {}", gone.display())) && said.contains("--diodon"),
        "{said}"
    );
    assert!(!dir.path().join("out/trials.csv").exists());
}
