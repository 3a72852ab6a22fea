//! The diode trial harness (thesis ch. 4, Listing 4.2), as a library.
//!
//! ```text
//!  for round (trial number) × (mtu, loss): testbed up ─► guard apply (tx, rx)
//!   for tool × rcvbuf (net.core.rmem_* set, restored on drop) × bitrate:
//!     [loss > 0: testbed and guards anew] ─► start receiver (rx ns) ─► wait until bound
//!     ─► snapshot tx+rx ─► t0 ─► start sender (tx ns)
//!     ─► wait (grace after sender exit / timeout → kill, failed) ─► t1 = receiver exit
//!     ─► SHA-256 ─► snapshot ─► Row (Table A.1 + snmp_ReasmFails, missing, recovered,
//!        socket_drops, repair_ratio, injected_loss, app_rcvbuf, reason)
//! ```
//!
//! Processes are started through `ip netns exec`, which `exec`s the program,
//! so the child's PID is the tool itself and a kill reaches it. Only those
//! PIDs are ever signalled. They die with the harness, and what a run
//! changes on the machine is recorded before it is changed
//! ([`crate::recovery`]): a harness killed outright is undone by the next.
//!
//! `Xfer_time` is the thesis's (Listing 4.2): from just before the sender is
//! started to the moment the receiver has exited (seen within 2 ms). The
//! receiver is started first and the clock starts only once its socket is
//! bound (read from the namespace's `/proc/net/udp`), so its start-up is not
//! counted. What it covers per tool:
//!
//! ```text
//!  diodon   sender start-up, the paced transfer (data + repair + trailer), the
//!           receiver's BLAKE3 check and rename: `recv --channels 1` exits as
//!           soon as the one file is decided. Not the sender's 0.75 s linger
//!           of closing beacons (the harness waits for it between trials).
//!  pydiode  Python start-up of the sender, every chunk sent `r` times, up to
//!           the receiver's exit on the first end-of-file datagram (after its
//!           SHA-256 check); not the rest of the end-of-file chunk.
//!  netcat   the paced transfer plus the receiver's idle timeout (`nc -w 1`):
//!           UDP netcat has no end of file, so its times are the transfer + 1 s,
//!           as in the thesis (ch. 4.2.3).
//! ```
//!
//! A trial whose receiver is still running `receiver_grace_s` after its sender
//! exited fails (nothing more can arrive), and so does one still running at
//! `timeout_s`. With injected loss the testbed is rebuilt before every trial:
//! fragments of datagrams that lost a piece otherwise wait 30 s
//! (`net.ipv4.ipfrag_time`) in the reassembly queue and hold its memory.
//!
//! On a real diode (`link.testbed = false`) the harness counts with a guard
//! table of its own, [`TRIAL_TABLE`], and removes only that table afterwards:
//! the operator's guard (`diodon guard apply`, table `diodon_diode`) and the
//! namespaces are left as they were found. Without `link.guard` the
//! datagram columns come from the operator's guard, if one is loaded.

use crate::plan::{Content, DiodonRcvbuf, Plan, PlanError, Tool};
use crate::recovery::{self, Record, RecoveryError, RunRecord};
use crate::resume::{Journal, ResumeError, TrialKey};
use diodon_apps::guard::{self, GuardSpec, Role};
use diodon_apps::nft::{run as run_tool, ToolError};
use diodon_apps::stats::{Snapshot, StatsError, Target};
use diodon_io::netns::spawn_in;
use sha2::{Digest, Sha256};
use socket2::{Domain, Socket, Type};
use std::collections::HashSet;
use std::fs::{self, File};
use std::io::{self, BufWriter, Read, Write};
use std::net::{IpAddr, SocketAddr};
use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

/// Errors that stop a whole run (a failing trial is a row, not an error).
#[derive(Debug, thiserror::Error)]
pub enum TrialError {
    /// The plan.
    #[error(transparent)]
    Plan(#[from] PlanError),
    /// Files, processes.
    #[error("{what}: {source}")]
    Io {
        /// What was being done.
        what: String,
        /// The OS error.
        #[source]
        source: io::Error,
    },
    /// The testbed script, `ip`, `nft`.
    #[error(transparent)]
    Tool(#[from] ToolError),
    /// The guard.
    #[error(transparent)]
    Guard(#[from] guard::GuardError),
    /// Measuring points.
    #[error(transparent)]
    Stats(#[from] StatsError),
    /// Something the run needs is missing.
    #[error("{0}")]
    Missing(String),
    /// Another run is going, or a killed run's record is unreadable.
    #[error(transparent)]
    Recovery(#[from] RecoveryError),
    /// The journal, or an earlier run's rows.
    #[error(transparent)]
    Resume(#[from] ResumeError),
    /// Interrupted.
    #[error("interrupted")]
    Interrupted,
}

fn io_err(what: impl Into<String>) -> impl FnOnce(io::Error) -> TrialError {
    let what = what.into();
    move |source| TrialError::Io { what, source }
}

/// How to run (things not in the plan).
#[derive(Clone, Debug)]
pub struct RunOptions {
    /// The `diodon` binary.
    pub diodon_bin: PathBuf,
    /// `scripts/testbed.sh`.
    pub testbed_script: PathBuf,
    /// Output directory.
    pub out_dir: PathBuf,
    /// Testbed name (`DIODON_TB`).
    pub testbed_name: String,
    /// Set to stop after the current trial.
    pub stop: Arc<AtomicBool>,
    /// Progress lines on stderr.
    pub verbose: bool,
    /// Trials an earlier run already did (`--resume`): skipped.
    pub done: HashSet<TrialKey>,
    /// Append every finished row to `out_dir/journal.csv` (synced), so a
    /// killed run loses at most the trial it was in.
    pub journal: bool,
    /// Where the run records what it changes on the machine
    /// ([`recovery::DEFAULT_DIR`]), so a killed run is undone by the next.
    pub record_dir: PathBuf,
}

/// One configuration (everything but bitrate and trial number).
#[derive(Clone, Debug, PartialEq)]
pub struct Config {
    /// Tool.
    pub tool: Tool,
    /// `net.core.rmem_*` for the run (0: unchanged).
    pub rcvbuf: u64,
    /// MTU.
    pub mtu: u32,
    /// Injected loss, percent.
    pub loss: f64,
}

impl Config {
    /// A file-name-safe label.
    pub fn label(&self) -> String {
        let buf = if self.rcvbuf == 0 {
            "default".to_owned()
        } else if self.rcvbuf.is_multiple_of(1 << 20) {
            format!("{}MiB", self.rcvbuf >> 20)
        } else {
            self.rcvbuf.to_string()
        };
        format!(
            "{}_rcvbuf-{buf}_mtu-{}_loss-{}",
            self.tool, self.mtu, self.loss
        )
    }
}

/// One trial: the thesis's Table A.1 plus Diodon's columns.
#[derive(Clone, Debug, PartialEq)]
pub struct Row {
    /// Configuration.
    pub config: Config,
    /// Mbit/s.
    pub bitrate: f64,
    /// 1-based.
    pub trial: u32,
    /// Sender exit code (128+signal when killed; -1 not run).
    pub sender_rc: i32,
    /// Receiver exit code.
    pub receiver_rc: i32,
    /// Seconds from sender start to receiver exit.
    pub xfer_time: f64,
    /// SHA-256 matched and both exited 0.
    pub xfer_success: bool,
    /// Bytes.
    pub in_file_size: u64,
    /// Bytes (0 when absent).
    pub out_file_size: u64,
    /// Guard counters and link/SNMP deltas; `None` → `na`.
    pub dtgrms_sent: Option<u64>,
    /// Received (receiver guard, after the link's loss).
    pub dtgrms_received: Option<u64>,
    /// `InCsumErrors` + Diodon's failed per-datagram checks.
    pub dtgrms_corrupt: Option<u64>,
    /// Sender link.
    pub tx_errors: u64,
    /// Sender link.
    pub tx_dropped: u64,
    /// Receiver link.
    pub rx_errors: u64,
    /// Receiver link (dropped + missed).
    pub rx_dropped: u64,
    /// Sender UDP MIB.
    pub snmp_out_datagrams: u64,
    /// Sender UDP MIB.
    pub snmp_sndbuf_errors: u64,
    /// Receiver UDP MIB.
    pub snmp_in_datagrams: u64,
    /// Receiver UDP MIB.
    pub snmp_in_errors: u64,
    /// Receiver UDP MIB.
    pub snmp_rcvbuf_errors: u64,
    /// Receiver IP MIB: fragments whose datagram could not be reassembled
    /// (a fragment lost, or reassembly memory full); such datagrams never
    /// reach UDP (only tools that send datagrams larger than the MTU).
    pub snmp_reasm_fails: u64,
    /// Diodon: source symbols missing.
    pub missing: Option<u64>,
    /// Diodon: recovered by FEC.
    pub recovered: Option<u64>,
    /// Diodon: `SO_RXQ_OVFL` drops.
    pub socket_drops: Option<u64>,
    /// Repair overhead as a fraction of the data (pydiode: redundancy − 1).
    pub repair_ratio: Option<f64>,
    /// Receive buffer the receiving application ended up with (Diodon reports it).
    pub app_rcvbuf: Option<u64>,
    /// Why it failed (empty on success).
    pub reason: String,
}

/// The CSV header: configuration, Table A.1, extras.
pub const CSV_HEADER: &str = "tool,rcvbuf,mtu,bitrate,trial,sender_rc,receiver_rc,Xfer_time,Xfer_success,in_file_size,out_file_size,dtgrms_sent,dtgrms_received,dtgrms_corrupt,tx_errors,tx_dropped,rx_errors,rx_dropped,snmp_OutDatagrams,snmp_SndbufErrors,snmp_InDatagrams,snmp_InErrors,snmp_RcvbufErrors,snmp_ReasmFails,missing,recovered,socket_drops,repair_ratio,injected_loss,app_rcvbuf,reason";

fn na<T: ToString>(v: Option<T>) -> String {
    v.map_or_else(|| "na".to_owned(), |v| v.to_string())
}

impl Row {
    /// One CSV line (no newline).
    pub fn csv(&self) -> String {
        let c = &self.config;
        [
            c.tool.to_string(),
            c.rcvbuf.to_string(),
            c.mtu.to_string(),
            self.bitrate.to_string(),
            self.trial.to_string(),
            self.sender_rc.to_string(),
            self.receiver_rc.to_string(),
            format!("{:.3}", self.xfer_time),
            if self.xfer_success { "True" } else { "False" }.to_owned(),
            self.in_file_size.to_string(),
            self.out_file_size.to_string(),
            na(self.dtgrms_sent),
            na(self.dtgrms_received),
            na(self.dtgrms_corrupt),
            self.tx_errors.to_string(),
            self.tx_dropped.to_string(),
            self.rx_errors.to_string(),
            self.rx_dropped.to_string(),
            self.snmp_out_datagrams.to_string(),
            self.snmp_sndbuf_errors.to_string(),
            self.snmp_in_datagrams.to_string(),
            self.snmp_in_errors.to_string(),
            self.snmp_rcvbuf_errors.to_string(),
            self.snmp_reasm_fails.to_string(),
            na(self.missing),
            na(self.recovered),
            na(self.socket_drops),
            na(self.repair_ratio),
            c.loss.to_string(),
            na(self.app_rcvbuf),
            self.reason.replace([',', '\n', '"'], ";"),
        ]
        .join(",")
    }
}

impl Row {
    /// Parses a line written by [`Row::csv`] (the resumed run's rows). The
    /// `reason` comes back as written (commas had become `;`), `Xfer_time`
    /// to the millisecond.
    pub fn from_csv(line: &str) -> Result<Row, String> {
        let f: Vec<&str> = line.split(',').collect();
        let want = CSV_HEADER.split(',').count();
        if f.len() != want {
            return Err(format!("{} fields, not {want}", f.len()));
        }
        let name = |i: usize| CSV_HEADER.split(',').nth(i).unwrap_or("?");
        let num = |i: usize| -> Result<u64, String> {
            f[i].parse()
                .map_err(|_| format!("{}: {:?} is not a count", name(i), f[i]))
        };
        let int = |i: usize| -> Result<i32, String> {
            f[i].parse()
                .map_err(|_| format!("{}: {:?} is not an exit code", name(i), f[i]))
        };
        let real = |i: usize| -> Result<f64, String> {
            f[i].parse::<f64>()
                .ok()
                .filter(|v| v.is_finite())
                .ok_or_else(|| format!("{}: {:?} is not a number", name(i), f[i]))
        };
        let opt = |i: usize| -> Result<Option<u64>, String> {
            if f[i] == "na" {
                Ok(None)
            } else {
                num(i).map(Some)
            }
        };
        let tool = Tool::parse(f[0]).map_err(|e| format!("tool: {e}"))?;
        Ok(Row {
            config: Config {
                tool,
                rcvbuf: num(1)?,
                mtu: u32::try_from(num(2)?).map_err(|_| "mtu: out of range".to_owned())?,
                loss: real(28)?,
            },
            bitrate: real(3)?,
            trial: u32::try_from(num(4)?).map_err(|_| "trial: out of range".to_owned())?,
            sender_rc: int(5)?,
            receiver_rc: int(6)?,
            xfer_time: real(7)?,
            xfer_success: match f[8] {
                "True" => true,
                "False" => false,
                other => return Err(format!("Xfer_success: {other:?} is not True/False")),
            },
            in_file_size: num(9)?,
            out_file_size: num(10)?,
            dtgrms_sent: opt(11)?,
            dtgrms_received: opt(12)?,
            dtgrms_corrupt: opt(13)?,
            tx_errors: num(14)?,
            tx_dropped: num(15)?,
            rx_errors: num(16)?,
            rx_dropped: num(17)?,
            snmp_out_datagrams: num(18)?,
            snmp_sndbuf_errors: num(19)?,
            snmp_in_datagrams: num(20)?,
            snmp_in_errors: num(21)?,
            snmp_rcvbuf_errors: num(22)?,
            snmp_reasm_fails: num(23)?,
            missing: opt(24)?,
            recovered: opt(25)?,
            socket_drops: opt(26)?,
            repair_ratio: if f[27] == "na" { None } else { Some(real(27)?) },
            app_rcvbuf: opt(29)?,
            reason: f[30].to_owned(),
        })
    }
}

/// Sets `net.core.rmem_max` and `rmem_default` and puts the old values back
/// when dropped (also on error and on panic unwinding).
#[derive(Debug)]
pub struct RmemGuard {
    saved: Option<(String, String)>,
}

const RMEM_MAX: &str = "/proc/sys/net/core/rmem_max";
const RMEM_DEFAULT: &str = "/proc/sys/net/core/rmem_default";

/// The current `net.core.rmem_max` and `rmem_default`.
pub(crate) fn read_rmem() -> Result<(String, String), TrialError> {
    let max = fs::read_to_string(RMEM_MAX).map_err(io_err(RMEM_MAX))?;
    let def = fs::read_to_string(RMEM_DEFAULT).map_err(io_err(RMEM_DEFAULT))?;
    Ok((max.trim().to_owned(), def.trim().to_owned()))
}

/// Sets `net.core.rmem_max` and `rmem_default`.
pub(crate) fn write_rmem(max: &str, def: &str) -> Result<(), TrialError> {
    fs::write(RMEM_MAX, max).map_err(io_err(RMEM_MAX))?;
    fs::write(RMEM_DEFAULT, def).map_err(io_err(RMEM_DEFAULT))?;
    Ok(())
}

impl RmemGuard {
    /// Remembers the current values.
    pub fn new() -> Result<Self, TrialError> {
        Ok(RmemGuard {
            saved: Some(read_rmem()?),
        })
    }

    /// Sets both to `bytes`, or back to the saved values for 0.
    pub fn set(&self, bytes: u64) -> Result<(), TrialError> {
        let (max, def) = match (&self.saved, bytes) {
            (Some((m, d)), 0) => (m.clone(), d.clone()),
            (_, b) => (b.to_string(), b.to_string()),
        };
        write_rmem(&max, &def)
    }

    /// The values found at the start.
    pub fn saved(&self) -> Option<&(String, String)> {
        self.saved.as_ref()
    }
}

impl Drop for RmemGuard {
    fn drop(&mut self) {
        if let Some((max, def)) = self.saved.take() {
            if write_rmem(&max, &def).is_err() {
                eprintln!("trial: could not restore net.core.rmem_max={max} rmem_default={def}");
            }
        }
    }
}

/// A testbed for one MTU × loss; torn down on drop.
struct Testbed<'a> {
    opts: &'a RunOptions,
}

impl<'a> Testbed<'a> {
    fn up(opts: &'a RunOptions, mtu: u32, loss: f64) -> Result<Self, TrialError> {
        let mut c = Command::new("bash");
        c.arg(&opts.testbed_script)
            .args(["up", "--mtu", &mtu.to_string()])
            .env("DIODON_TB", &opts.testbed_name);
        if loss > 0.0 {
            c.args(["--loss", &loss.to_string()]);
        }
        run_tool(c, None)?;
        Ok(Testbed { opts })
    }
}

impl Drop for Testbed<'_> {
    fn drop(&mut self) {
        if let Err(e) = testbed_down(&self.opts.testbed_script, &self.opts.testbed_name) {
            eprintln!("trial: testbed down failed: {e}");
        }
    }
}

/// `scripts/testbed.sh down` for testbed `name` (fine if it is not up).
pub(crate) fn testbed_down(script: &Path, name: &str) -> Result<(), ToolError> {
    let mut c = Command::new("bash");
    c.arg(script).arg("down").env("DIODON_TB", name);
    run_tool(c, None).map(drop)
}

/// Why a receiver says it failed, fit for the CSV's `reason` column: the
/// failed channels' reasons from Diodon's JSON summary (with the datagrams it
/// refused as expired or late, if any), else the last line the receiver
/// wrote on stderr (netcat's and pydiode's errors, a Python traceback's
/// last line). Commas become `;` and line breaks spaces; at most 200 chars.
pub fn receiver_says(summary: Option<&serde_json::Value>, stderr: &str) -> Option<String> {
    let mut why: Vec<String> = summary
        .and_then(|s| s["channels"].as_array())
        .into_iter()
        .flatten()
        .filter(|c| c["verdict"] == "failed")
        .filter_map(|c| c["reason"].as_str().map(str::to_owned))
        .collect();
    if let Some(s) = summary {
        for k in ["expired", "late"] {
            if let Some(n) = s["core"][k].as_u64().filter(|&n| n > 0) {
                why.push(format!("{k} {n}"));
            }
        }
    }
    let text = if why.is_empty() {
        stderr
            .lines()
            .rev()
            .map(str::trim)
            .find(|l| !l.is_empty())?
            .to_owned()
    } else {
        why.join("; ")
    };
    let clean: String = text
        .chars()
        .map(|c| match c {
            ',' => ';',
            c if c.is_control() => ' ',
            c => c,
        })
        .take(200)
        .collect();
    Some(clean)
}

/// The guard table the harness loads for its own counting. Not the
/// operator's [`guard::DEFAULT_TABLE`], which it must never replace or remove.
pub const TRIAL_TABLE: &str = "diodon_trial";

/// Resolved link endpoints.
#[derive(Clone, Debug)]
struct Ends {
    tx_ns: String,
    rx_ns: String,
    tx_if: String,
    rx_if: String,
    tx_addr: IpAddr,
    rx_addr: IpAddr,
    port: u16,
    /// Where the `dtgrms_*` columns are read: [`TRIAL_TABLE`] when the plan
    /// loads guards, else the operator's [`guard::DEFAULT_TABLE`].
    guard_table: &'static str,
}

impl Ends {
    fn peer(&self) -> SocketAddr {
        SocketAddr::new(self.rx_addr, self.port)
    }

    /// On a given diode: both namespaces and both interfaces must be there
    /// before anything is changed (sysctls, guards).
    fn check_exist(&self) -> Result<(), TrialError> {
        for (ns, iface) in [(&self.tx_ns, &self.tx_if), (&self.rx_ns, &self.rx_if)] {
            if !diodon_io::netns::path_of(ns).exists() {
                return Err(TrialError::Missing(format!(
                    "network namespace {ns:?} (plan [link] tx_ns / rx_ns) does not exist"
                )));
            }
            diodon_apps::stats::read_link(Some(ns.as_str()), iface).map_err(|e| {
                TrialError::Missing(format!("interface {iface:?} in namespace {ns:?}: {e}"))
            })?;
        }
        Ok(())
    }
}

/// Writes the test file.
pub fn make_file(path: &Path, size: u64, content: Content) -> Result<(), TrialError> {
    let f = File::create(path).map_err(io_err(format!("creating {}", path.display())))?;
    let mut w = BufWriter::with_capacity(1 << 20, f);
    let mut x: u64 = 0x9E37_79B9_7F4A_7C15;
    let mut buf = vec![b'a'; 1 << 16];
    let mut left = size;
    while left > 0 {
        if content == Content::Random {
            for chunk in buf.chunks_mut(8) {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                chunk.copy_from_slice(&x.to_le_bytes()[..chunk.len()]);
            }
        }
        let n = left.min(buf.len() as u64) as usize;
        w.write_all(&buf[..n])
            .map_err(io_err(format!("writing {}", path.display())))?;
        left -= n as u64;
    }
    w.flush().map_err(io_err("flushing the test file"))?;
    Ok(())
}

/// SHA-256 of a file (hex) and its size.
pub fn sha256_file(path: &Path) -> io::Result<(String, u64)> {
    let mut f = File::open(path)?;
    let mut h = Sha256::new();
    let mut buf = vec![0u8; 1 << 20];
    let mut n_total = 0u64;
    loop {
        let n = f.read(&mut buf)?;
        if n == 0 {
            break;
        }
        n_total += n as u64;
        h.update(&buf[..n]);
    }
    Ok((hex(&h.finalize()), n_total))
}

fn hex(b: &[u8]) -> String {
    use std::fmt::Write as _;
    b.iter().fold(String::new(), |mut s, x| {
        let _ = write!(s, "{x:02x}");
        s
    })
}

fn which(program: &str) -> bool {
    std::env::var_os("PATH")
        .is_some_and(|p| std::env::split_paths(&p).any(|d| d.join(program).is_file()))
}

/// Exit status as a shell would show it.
fn rc(s: ExitStatus) -> i32 {
    s.code().unwrap_or_else(|| 128 + s.signal().unwrap_or(0))
}

/// How often the harness looks whether the sender or receiver exited (the
/// resolution of `Xfer_time`).
const POLL: Duration = Duration::from_millis(2);

/// How long a receiver may take to bind its socket.
const BIND_WAIT: Duration = Duration::from_secs(10);

/// Whether `/proc/net/udp` or `udp6` text lists a socket bound to local `port`.
pub fn udp_port_bound(proc_net_udp: &str, port: u16) -> bool {
    let want = format!("{port:04X}");
    proc_net_udp.lines().skip(1).any(|l| {
        l.split_whitespace()
            .nth(1)
            .and_then(|local| local.rsplit_once(':'))
            .is_some_and(|(_, p)| p == want)
    })
}

/// Waits until a UDP socket is bound to `port` in namespace `ns`; `false`
/// when `limit` passed or the receiver exited first.
#[expect(
    clippy::disallowed_methods,
    reason = "a wall-clock bound on the receiver's start-up"
)]
fn wait_bound(
    ns: &str,
    port: u16,
    receiver: &mut Child,
    limit: Duration,
) -> Result<bool, TrialError> {
    let start = Instant::now();
    loop {
        let bound = spawn_in(ns, move || {
            ["/proc/thread-self/net/udp", "/proc/thread-self/net/udp6"]
                .iter()
                .any(|p| fs::read_to_string(p).is_ok_and(|t| udp_port_bound(&t, port)))
        })
        .map_err(StatsError::from)?
        .join()
        .map_err(|_| TrialError::Missing("socket-table thread panicked".into()))?
        .map_err(StatsError::from)?;
        if bound {
            return Ok(true);
        }
        if start.elapsed() >= limit
            || receiver
                .try_wait()
                .map_err(io_err("waiting for the receiver"))?
                .is_some()
        {
            return Ok(false);
        }
        thread::sleep(Duration::from_millis(2));
    }
}

/// Sends `sig` (e.g. `-KILL`) to `pid`; whether it was delivered.
pub(crate) fn kill(pid: u32, sig: &str) -> bool {
    Command::new("kill")
        .args([sig, &pid.to_string()])
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

/// Runs every cell of `plan`; returns all rows. When `opts.stop` is set the
/// run ends after killing the current trial's processes and restoring the
/// system, and returns the rows of the trials that completed.
#[expect(
    clippy::too_many_lines,
    reason = "one nested loop over the plan's cells with setup and teardown"
)]
pub fn run(plan: &Plan, opts: &RunOptions) -> Result<Vec<Row>, TrialError> {
    let tools = plan.tool_list()?;
    for t in &tools {
        let (prog, pkg) = match t {
            Tool::Diodon => continue,
            Tool::Netcat => ("nc", "Debian package netcat-openbsd"),
            Tool::Pydiode(_) => ("pydiode", "`pip install pydiode`"),
        };
        if !which(prog) {
            return Err(TrialError::Missing(format!(
                "tool {t} needs `{prog}` on PATH ({pkg})"
            )));
        }
    }
    if tools.contains(&Tool::Diodon) && !opts.diodon_bin.is_file() {
        return Err(TrialError::Missing(format!(
            "diodon binary {} not found",
            opts.diodon_bin.display()
        )));
    }
    if plan.link.testbed && !opts.testbed_script.is_file() {
        return Err(TrialError::Missing(format!(
            "testbed script {} not found",
            opts.testbed_script.display()
        )));
    }
    let addr = |s: &str| -> Result<IpAddr, TrialError> {
        s.parse()
            .map_err(|_| TrialError::Plan(PlanError::Invalid(format!("bad address {s:?}"))))
    };
    let ends = Ends {
        tx_ns: plan
            .link
            .tx_ns
            .clone()
            .unwrap_or_else(|| format!("{}-tx", opts.testbed_name)),
        rx_ns: plan
            .link
            .rx_ns
            .clone()
            .unwrap_or_else(|| format!("{}-rx", opts.testbed_name)),
        tx_if: plan.link.tx_if.clone(),
        rx_if: plan.link.rx_if.clone(),
        tx_addr: addr(&plan.link.tx_addr)?,
        rx_addr: addr(&plan.link.rx_addr)?,
        port: plan.link.port,
        guard_table: if plan.link.guard {
            TRIAL_TABLE
        } else {
            guard::DEFAULT_TABLE
        },
    };
    if !plan.link.testbed {
        ends.check_exist()?;
    }
    // A run killed outright (SIGKILL) left sysctls, a testbed or guard
    // tables behind: undo that first; refuse while another run is going.
    for line in recovery::recover(&opts.record_dir)? {
        eprintln!("trial: {line}");
    }
    let sets_rmem = plan.rcvbuf.iter().any(|&b| b != 0);
    // Declared before everything it describes, so it is deleted last.
    let _record = RunRecord::create(
        &opts.record_dir,
        Record {
            rmem_found: if sets_rmem { Some(read_rmem()?) } else { None },
            rmem_set: plan.rcvbuf.iter().copied().filter(|&b| b != 0).collect(),
            testbed: plan.link.testbed.then(|| {
                let script = fs::canonicalize(&opts.testbed_script)
                    .unwrap_or_else(|_| opts.testbed_script.clone());
                (script, opts.testbed_name.clone())
            }),
            guard_ns: if plan.link.guard && !plan.link.testbed {
                vec![ends.tx_ns.clone(), ends.rx_ns.clone()]
            } else {
                Vec::new()
            },
            guard_table: TRIAL_TABLE.to_owned(),
            ..Record::default()
        },
    )?;
    let work = opts.out_dir.join("work");
    fs::create_dir_all(&work).map_err(io_err(format!("creating {}", work.display())))?;
    let input = work.join("input.bin");
    make_file(&input, plan.file.size, plan.file.content)?;
    let (in_sha, in_size) = sha256_file(&input).map_err(io_err("hashing the input"))?;
    let rmem = if sets_rmem {
        Some(RmemGuard::new()?)
    } else {
        None
    };
    let mut journal = if opts.journal {
        Some(Journal::open(&opts.out_dir)?)
    } else {
        None
    };
    let configs = |mtu: u32, loss: f64| {
        tools.iter().flat_map(move |&tool| {
            plan.rcvbuf.iter().map(move |&rcvbuf| Config {
                tool,
                rcvbuf,
                mtu,
                loss,
            })
        })
    };
    let mut rows = Vec::new();
    // An interruption ends the run after cleaning up and keeps the rows so
    // far; the caller sees `opts.stop` set.
    // Rounds: trial 1 of every cell, then trial 2 of every cell, ... so a
    // change of the machine's load during a long run spreads over all cells,
    // and an interrupted run leaves every cell with (nearly) as many trials.
    'all: for trial in 1..=plan.trials {
        for &mtu in &plan.mtu {
            for &loss in &plan.loss {
                let todo = |c: &Config, bitrate: f64| {
                    !opts.done.contains(&TrialKey::new(c, bitrate, trial))
                };
                // A group an earlier run finished needs no link at all.
                if !configs(mtu, loss).any(|c| plan.bitrates_mbps.iter().any(|&b| todo(&c, b))) {
                    continue;
                }
                let mut link = Some(LinkUp::new(plan, opts, &ends, mtu, loss)?);
                let mut fresh = true;
                for config in configs(mtu, loss) {
                    if !plan.bitrates_mbps.iter().any(|&b| todo(&config, b)) {
                        continue;
                    }
                    if let Some(r) = &rmem {
                        r.set(config.rcvbuf)?;
                    }
                    for &bitrate in &plan.bitrates_mbps {
                        if opts.stop.load(Ordering::Relaxed) {
                            break 'all;
                        }
                        if !todo(&config, bitrate) {
                            continue;
                        }
                        // With injected loss, fragments of datagrams that
                        // lost a piece wait net.ipv4.ipfrag_time (30 s) in
                        // the receiver's reassembly queue and hold its
                        // memory; a new testbed per trial keeps one
                        // trial's leftovers from starving the next.
                        if plan.link.testbed && loss > 0.0 && !fresh {
                            drop(link.take());
                            link = Some(LinkUp::new(plan, opts, &ends, mtu, loss)?);
                        }
                        fresh = false;
                        let ctx = TrialCtx {
                            plan,
                            opts,
                            ends: &ends,
                            input: &input,
                            in_sha: &in_sha,
                            in_size,
                            work: &work,
                        };
                        let row = match ctx.run_one(&config, bitrate, trial) {
                            Err(TrialError::Interrupted) => break 'all,
                            other => other?,
                        };
                        if opts.verbose {
                            eprintln!(
                                "trial {} {bitrate} Mbit/s #{trial}: {} in {:.2} s{}",
                                config.label(),
                                if row.xfer_success { "ok" } else { "FAILED" },
                                row.xfer_time,
                                if row.reason.is_empty() {
                                    String::new()
                                } else {
                                    format!(" ({})", row.reason)
                                }
                            );
                        }
                        if let Some(j) = journal.as_mut() {
                            j.append(&row)?;
                        }
                        rows.push(row);
                    }
                }
                drop(link);
            }
        }
    }
    drop(rmem);
    let _ = fs::remove_dir_all(&work);
    Ok(rows)
}

/// The link of one cell group: the testbed (when the plan builds one) and
/// the guards (when it loads them). Dropping it takes the testbed down, or
/// on a real diode removes the guards again.
struct LinkUp<'a> {
    testbed: Option<Testbed<'a>>,
    guards: Option<(GuardSpec, GuardSpec)>,
    keep_guards: bool,
}

impl<'a> LinkUp<'a> {
    fn new(
        plan: &Plan,
        opts: &'a RunOptions,
        ends: &Ends,
        mtu: u32,
        loss: f64,
    ) -> Result<Self, TrialError> {
        let testbed = if plan.link.testbed {
            Some(Testbed::up(opts, mtu, loss)?)
        } else {
            None
        };
        let guards = if plan.link.guard {
            let tx = GuardSpec::new(
                Some(ends.tx_ns.clone()),
                &ends.tx_if,
                Role::Sender,
                ends.peer(),
                Some(ends.tx_addr),
                TRIAL_TABLE,
            )?;
            let rx = GuardSpec {
                ns: Some(ends.rx_ns.clone()),
                iface: ends.rx_if.clone(),
                role: Role::Receiver,
                ..tx.clone()
            };
            guard::apply(&tx)?;
            guard::apply(&rx)?;
            Some((tx, rx))
        } else {
            None
        };
        Ok(LinkUp {
            testbed,
            guards,
            keep_guards: plan.link.testbed,
        })
    }
}

impl Drop for LinkUp<'_> {
    fn drop(&mut self) {
        if let (Some((tx, rx)), false) = (&self.guards, self.keep_guards) {
            let _ = guard::remove(tx.ns.as_deref(), &tx.table);
            let _ = guard::remove(rx.ns.as_deref(), &rx.table);
        }
        // The testbed (and with it the guards) goes down after this.
        drop(self.testbed.take());
    }
}

struct TrialCtx<'a> {
    plan: &'a Plan,
    opts: &'a RunOptions,
    ends: &'a Ends,
    input: &'a Path,
    in_sha: &'a str,
    in_size: u64,
    work: &'a Path,
}

/// A started sender: the child and, for netcat, the pacer feeding it.
struct Sender {
    child: Child,
    pacer: Option<thread::JoinHandle<io::Result<()>>>,
}

impl TrialCtx<'_> {
    /// `ip netns exec NS PROGRAM` (which `exec`s PROGRAM), killed when the
    /// harness dies.
    fn ns_cmd(ns: &str, program: &Path) -> Command {
        let mut c = Command::new("ip");
        c.args(["netns", "exec", ns]).arg(program);
        // A harness killed outright must not leave a receiver waiting or a
        // sender sending. The kernel ties this to the thread that starts
        // the child: `run` is called from one that outlives the run (the
        // CLI's main thread).
        diodon_io::child::die_with_parent(&mut c);
        c
    }

    fn start_receiver(&self, c: &Config, bitrate: f64, out: &Path) -> io::Result<Child> {
        let e = self.ends;
        let log = File::create(self.work.join("receiver.log"))?;
        match c.tool {
            Tool::Diodon => {
                let mut cmd = Self::ns_cmd(&e.rx_ns, &self.opts.diodon_bin);
                cmd.args(["recv", "--listen", &e.peer().to_string(), "--out"])
                    .arg(out)
                    // Exit as soon as the one file is verified (or failed),
                    // not after the link has been silent for a while.
                    .args(["--channels", "1", "--json", "--no-fsync"])
                    .args(["--rate", &format!("{}mbit", bitrate.ceil())])
                    .args(["--mtu", &c.mtu.to_string()]);
                // Held to the cell's buffer like the other tools, or (the
                // default) Diodon's own: it forces rate × 250 ms, at least
                // 4 MiB, whatever net.core.rmem_max says (app_rcvbuf).
                if c.rcvbuf != 0 && self.plan.diodon_rcvbuf == DiodonRcvbuf::Cell {
                    cmd.args(["--rcvbuf", &c.rcvbuf.to_string()]);
                }
                cmd.stdout(Stdio::piped()).stderr(log).spawn()
            }
            Tool::Netcat => {
                let file = File::create(out.join("out.bin"))?;
                Self::ns_cmd(&e.rx_ns, Path::new("nc"))
                    .args(["-u", "-l", "-n", "-w"])
                    .arg(self.plan.netcat_idle_s.to_string())
                    .arg(e.rx_addr.to_string())
                    .arg(e.port.to_string())
                    .stdin(Stdio::null())
                    .stdout(file)
                    .stderr(log)
                    .spawn()
            }
            Tool::Pydiode(_) => {
                let file = File::create(out.join("out.bin"))?;
                Self::ns_cmd(&e.rx_ns, Path::new("pydiode"))
                    .args(["receive", &e.rx_addr.to_string(), "--port"])
                    .arg(e.port.to_string())
                    .stdin(Stdio::null())
                    .stdout(file)
                    .stderr(log)
                    .spawn()
            }
        }
    }

    fn start_sender(&self, c: &Config, bitrate: f64) -> io::Result<Sender> {
        let e = self.ends;
        let log = File::create(self.work.join("sender.log"))?;
        match c.tool {
            Tool::Diodon => {
                let mut cmd = Self::ns_cmd(&e.tx_ns, &self.opts.diodon_bin);
                cmd.args(["send", "--to", &e.peer().to_string()])
                    .args(["--bind", &SocketAddr::new(e.tx_addr, 0).to_string()])
                    .args(["--rate", &format!("{bitrate}mbit")])
                    .args(["--mtu", &c.mtu.to_string()])
                    .args(["--repair", &self.plan.repair.to_string()])
                    .arg("--json");
                if !self.plan.diodon_gso || c.loss > 0.0 {
                    cmd.arg("--no-gso");
                }
                let child = cmd
                    .arg(self.input)
                    .stdin(Stdio::null())
                    .stdout(Stdio::null())
                    .stderr(log)
                    .spawn()?;
                Ok(Sender { child, pacer: None })
            }
            Tool::Netcat => {
                // Records on a SOCK_SEQPACKET pair: each read() of nc's returns
                // at most one record, so datagrams stay near the record size.
                // A record that does not fit the rest of nc's 16 KiB stdin
                // buffer is truncated by that read (its bytes are lost before
                // any socket): records of a power of two never straddle it.
                let (ours, theirs) = Socket::pair(Domain::UNIX, Type::SEQPACKET, None)?;
                let child = Self::ns_cmd(&e.tx_ns, Path::new("nc"))
                    .args(["-u", "-n", "-q", "0", "-s", &e.tx_addr.to_string()])
                    .arg(e.rx_addr.to_string())
                    .arg(e.port.to_string())
                    .stdin(Stdio::from(std::os::fd::OwnedFd::from(theirs)))
                    .stdout(Stdio::null())
                    .stderr(log)
                    .spawn()?;
                let room = c.mtu as usize - if e.rx_addr.is_ipv4() { 28 } else { 48 };
                let chunk = netcat_record(room);
                let input = self.input.to_owned();
                let stop = Arc::clone(&self.opts.stop);
                let pacer = thread::Builder::new()
                    .name("nc-pacer".into())
                    .spawn(move || pace(&input, ours, chunk, bitrate * 1e6, &stop))?;
                Ok(Sender {
                    child,
                    pacer: Some(pacer),
                })
            }
            Tool::Pydiode(r) => {
                let child = Self::ns_cmd(&e.tx_ns, Path::new("pydiode"))
                    .args(["send", &e.rx_addr.to_string(), &e.tx_addr.to_string()])
                    .args(["--port", &e.port.to_string()])
                    .args(["--max-bitrate", &format!("{}", (bitrate * 1e6) as u64)])
                    .args(["--redundancy", &r.to_string()])
                    .stdin(File::open(self.input)?)
                    .stdout(Stdio::null())
                    .stderr(log)
                    .spawn()?;
                Ok(Sender { child, pacer: None })
            }
        }
    }

    fn snapshots(&self) -> Result<(Snapshot, Snapshot), TrialError> {
        let t = |ns: &str, iface: &str| Target {
            ns: Some(ns.to_owned()),
            iface: Some(iface.to_owned()),
            guard_table: self.ends.guard_table.to_owned(),
            diodon: None,
        };
        Ok((
            Snapshot::read(&t(&self.ends.tx_ns, &self.ends.tx_if))?,
            Snapshot::read(&t(&self.ends.rx_ns, &self.ends.rx_if))?,
        ))
    }

    #[expect(
        clippy::too_many_lines,
        reason = "one linear trial: start, measure, wait, verify, measure"
    )]
    #[expect(
        clippy::disallowed_methods,
        reason = "the harness measures wall-clock transfer time, as the thesis did"
    )]
    fn run_one(&self, c: &Config, bitrate: f64, trial: u32) -> Result<Row, TrialError> {
        let out = self.work.join("out");
        let _ = fs::remove_dir_all(&out);
        fs::create_dir_all(&out).map_err(io_err("creating the output directory"))?;
        let mut reason = String::new();
        let mut receiver = self
            .start_receiver(c, bitrate, &out)
            .map_err(io_err(format!("starting the {} receiver", c.tool)))?;
        // Nothing is sent before the receiver's socket is bound (a fixed
        // sleep would either waste time or lose the first datagrams).
        if !wait_bound(&self.ends.rx_ns, self.ends.port, &mut receiver, BIND_WAIT)? {
            reason = format!(
                "receiver did not bind UDP port {} within {} s",
                self.ends.port,
                BIND_WAIT.as_secs()
            );
        }
        let (tx0, rx0) = self.snapshots()?;
        let t0 = Instant::now();
        let deadline = t0 + Duration::from_secs_f64(self.plan.timeout_s);
        let mut sender = if reason.is_empty() {
            match self.start_sender(c, bitrate) {
                Ok(s) => Some(s),
                Err(e) => {
                    reason = format!("sender did not start: {e}");
                    kill(receiver.id(), "-KILL");
                    None
                }
            }
        } else {
            kill(receiver.id(), "-KILL");
            None
        };
        let kill_at = self.plan.fault.as_ref().and_then(|f| {
            (f.kill_receiver_trial == trial)
                .then(|| t0 + Duration::from_millis(f.kill_receiver_after_ms))
        });
        let mut sender_rc = -1;
        let mut sender_done: Option<Instant> = None;
        let grace = Duration::from_secs_f64(self.plan.receiver_grace_s);
        let mut receiver_rc = None;
        let mut t1 = None;
        let mut killed_by_fault = false;
        loop {
            if let Some(s) = sender.as_mut() {
                if let Some(st) = s
                    .child
                    .try_wait()
                    .map_err(io_err("waiting for the sender"))?
                {
                    sender_rc = rc(st);
                    sender_done = Some(Instant::now());
                    if let Some(p) = s.pacer.take() {
                        if let Ok(Err(e)) = p.join() {
                            reason = format!("netcat pacer: {e}");
                        }
                    }
                    sender = None;
                }
            }
            if receiver_rc.is_none() {
                if let Some(st) = receiver
                    .try_wait()
                    .map_err(io_err("waiting for the receiver"))?
                {
                    receiver_rc = Some(rc(st));
                    t1 = Some(Instant::now());
                }
            }
            if receiver_rc.is_some() && sender.is_none() {
                break;
            }
            if self.opts.stop.load(Ordering::Relaxed) {
                if receiver_rc.is_none() {
                    kill(receiver.id(), "-KILL");
                    let _ = receiver.wait();
                }
                if let Some(mut s) = sender.take() {
                    kill(s.child.id(), "-KILL");
                    let _ = s.child.wait();
                    if let Some(p) = s.pacer.take() {
                        let _ = p.join();
                    }
                }
                return Err(TrialError::Interrupted);
            }
            let now = Instant::now();
            if kill_at.is_some_and(|k| now >= k) && receiver_rc.is_none() && !killed_by_fault {
                kill(receiver.id(), "-KILL");
                killed_by_fault = true;
            }
            if receiver_rc.is_none() && sender_done.is_some_and(|d| now >= d + grace) {
                kill(receiver.id(), "-KILL");
                let st = receiver.wait().map_err(io_err("reaping the receiver"))?;
                receiver_rc = Some(rc(st));
                t1 = Some(now);
                if reason.is_empty() {
                    reason = format!(
                        "receiver still running {} s after the sender exited",
                        self.plan.receiver_grace_s
                    );
                }
                break;
            }
            if now >= deadline {
                if receiver_rc.is_none() {
                    kill(receiver.id(), "-KILL");
                    let st = receiver.wait().map_err(io_err("reaping the receiver"))?;
                    receiver_rc = Some(rc(st));
                    if reason.is_empty() {
                        reason = format!("receiver still running after {} s", self.plan.timeout_s);
                    }
                }
                if let Some(mut s) = sender.take() {
                    kill(s.child.id(), "-KILL");
                    let st = s.child.wait().map_err(io_err("reaping the sender"))?;
                    sender_rc = rc(st);
                    if let Some(p) = s.pacer.take() {
                        let _ = p.join();
                    }
                    if reason.is_empty() {
                        reason = format!("sender still running after {} s", self.plan.timeout_s);
                    }
                }
                break;
            }
            thread::sleep(POLL);
        }
        let t1 = t1.unwrap_or_else(Instant::now);
        let receiver_rc = receiver_rc.unwrap_or(-1);
        let mut stdout = String::new();
        if let Some(mut o) = receiver.stdout.take() {
            let _ = o.read_to_string(&mut stdout);
        }
        let (tx1, rx1) = self.snapshots()?;
        let dtx = tx1.delta(&tx0);
        let drx = rx1.delta(&rx0);
        let out_file = match c.tool {
            Tool::Diodon => out.join(self.input.file_name().unwrap_or_default()),
            _ => out.join("out.bin"),
        };
        let (out_sha, out_size) = sha256_file(&out_file).unwrap_or_default();
        let same = out_sha == self.in_sha;
        let summary: Option<serde_json::Value> = stdout
            .lines()
            .rev()
            .find(|l| l.starts_with('{'))
            .and_then(|l| serde_json::from_str(l).ok());
        if killed_by_fault && reason.is_empty() {
            reason = format!("receiver killed (fault injection), exit {receiver_rc}");
        }
        if reason.is_empty() && receiver_rc != 0 {
            // With the receiver's own word on why, where it gave one.
            let log = fs::read_to_string(self.work.join("receiver.log")).unwrap_or_default();
            reason = match receiver_says(summary.as_ref(), &log) {
                Some(why) => format!("receiver exit {receiver_rc}: {why}"),
                None => format!("receiver exit {receiver_rc}"),
            };
        }
        if reason.is_empty() && sender_rc != 0 {
            reason = format!("sender exit {sender_rc}");
        }
        if reason.is_empty() && !same {
            reason = if out_size == 0 {
                "no output file".to_owned()
            } else {
                format!("SHA-256 differs ({out_size} of {} bytes)", self.in_size)
            };
        }
        let field = |k: &str| summary.as_ref().and_then(|s| s[k].as_u64());
        // The receiver's counters, as its summary declares them.
        let core = |k: &str| summary.as_ref().and_then(|s| s["core"][k].as_u64());
        let link_tx = dtx.link.unwrap_or_default();
        let link_rx = drx.link.unwrap_or_default();
        let corrupt = drx.udp.in_csum_errors + core("bad_check").unwrap_or(0);
        Ok(Row {
            config: c.clone(),
            bitrate,
            trial,
            sender_rc,
            receiver_rc,
            xfer_time: t1.duration_since(t0).as_secs_f64(),
            xfer_success: reason.is_empty(),
            in_file_size: self.in_size,
            out_file_size: out_size,
            dtgrms_sent: dtx.guard.as_ref().map(|g| g.accepted.packets),
            dtgrms_received: drx.guard.as_ref().map(|g| g.accepted.packets),
            dtgrms_corrupt: Some(corrupt),
            tx_errors: link_tx.tx_errors,
            tx_dropped: link_tx.tx_dropped,
            rx_errors: link_rx.rx_errors,
            rx_dropped: link_rx.rx_dropped + link_rx.rx_missed_errors,
            snmp_out_datagrams: dtx.udp.out_datagrams,
            snmp_sndbuf_errors: dtx.udp.sndbuf_errors,
            snmp_in_datagrams: drx.udp.in_datagrams,
            snmp_in_errors: drx.udp.in_errors,
            snmp_rcvbuf_errors: drx.udp.rcvbuf_errors,
            snmp_reasm_fails: drx.ip.reasm_fails,
            missing: core("missing"),
            recovered: core("recovered_symbols"),
            socket_drops: summary.as_ref().and_then(|s| s["socket"]["drops"].as_u64()),
            repair_ratio: match c.tool {
                Tool::Diodon => Some(f64::from(self.plan.repair) / 100.0),
                Tool::Netcat => Some(0.0),
                Tool::Pydiode(r) => Some(f64::from(r) - 1.0),
            },
            app_rcvbuf: field("rcvbuf"),
            reason,
        })
    }
}

/// The largest power of two that fits a datagram of `room` payload bytes
/// (1024 at MTU 1500, 8192 at MTU 9000): it divides nc's 16 KiB buffer.
fn netcat_record(room: usize) -> usize {
    if room < 2 {
        return 1;
    }
    1 << (usize::BITS - 1 - room.leading_zeros())
}

/// Feeds `input` in `chunk`-byte messages at `bits_per_s` (payload bits), like
/// the thesis's `regulator.py`.
#[expect(
    clippy::disallowed_methods,
    reason = "pacing against the wall clock is the point"
)]
#[expect(
    clippy::needless_pass_by_value,
    reason = "dropping the socket at the end is nc's end of file"
)]
fn pace(
    input: &Path,
    sock: Socket,
    chunk: usize,
    bits_per_s: f64,
    stop: &AtomicBool,
) -> io::Result<()> {
    let mut f = File::open(input)?;
    let mut buf = vec![0u8; chunk];
    let start = Instant::now();
    let mut sent = 0u64;
    loop {
        if stop.load(Ordering::Relaxed) {
            return Ok(());
        }
        let mut n = 0;
        while n < chunk {
            let r = f.read(&mut buf[n..])?;
            if r == 0 {
                break;
            }
            n += r;
        }
        if n == 0 {
            return Ok(()); // dropping `sock` is nc's EOF
        }
        let due = Duration::from_secs_f64(sent as f64 * 8.0 / bits_per_s);
        let elapsed = start.elapsed();
        if let Some(ahead) = due.checked_sub(elapsed) {
            if ahead > Duration::from_micros(200) {
                thread::sleep(ahead);
            }
        }
        match sock.send(&buf[..n]) {
            Ok(_) => {}
            // nc went away (killed): stop feeding.
            Err(e) if e.kind() == io::ErrorKind::BrokenPipe => return Ok(()),
            Err(e) => return Err(e),
        }
        sent += n as u64;
    }
}

/// A row for unit tests here and in `resume`.
#[cfg(test)]
pub(crate) mod tests_support {
    use super::*;

    pub(crate) fn row() -> Row {
        Row {
            config: Config {
                tool: Tool::Netcat,
                rcvbuf: 4 << 20,
                mtu: 1500,
                loss: 0.0,
            },
            bitrate: 100.0,
            trial: 1,
            sender_rc: 0,
            receiver_rc: 0,
            xfer_time: 1.5,
            xfer_success: true,
            in_file_size: 10,
            out_file_size: 10,
            dtgrms_sent: Some(3),
            dtgrms_received: None,
            dtgrms_corrupt: Some(0),
            tx_errors: 0,
            tx_dropped: 0,
            rx_errors: 0,
            rx_dropped: 0,
            snmp_out_datagrams: 3,
            snmp_sndbuf_errors: 0,
            snmp_in_datagrams: 3,
            snmp_in_errors: 0,
            snmp_rcvbuf_errors: 0,
            snmp_reasm_fails: 0,
            missing: None,
            recovered: None,
            socket_drops: None,
            repair_ratio: Some(0.0),
            app_rcvbuf: None,
            reason: "a, b".into(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::tests_support::row;
    use super::*;

    #[test]
    fn receiver_says_why_in_one_csv_field() {
        let diodon: serde_json::Value = serde_json::json!({
            "core": {"expired": 0, "late": 3},
            "channels": [
                {"name": "a", "verdict": "verified", "blake3": "00"},
                {"name": "b", "verdict": "failed", "reason": "block 37 lost (5 unrecoverable)"},
            ]
        });
        assert_eq!(
            receiver_says(Some(&diodon), "ignored\n").as_deref(),
            Some("block 37 lost (5 unrecoverable); late 3")
        );
        // No summary (or nothing in it): the last line on stderr, made
        // safe for the CSV.
        let py =
            "Traceback (most recent call last):\n  File x, line 3\nValueError: bad chunk, 2\n\n";
        assert_eq!(
            receiver_says(None, py).as_deref(),
            Some("ValueError: bad chunk; 2")
        );
        assert_eq!(
            receiver_says(Some(&serde_json::json!({})), "").as_deref(),
            None
        );
        let long = "x".repeat(500);
        assert_eq!(receiver_says(None, &long).map(|s| s.len()), Some(200));
    }

    #[test]
    fn csv_line_matches_header() {
        let r = row();
        let line = r.csv();
        assert_eq!(
            line.split(',').count(),
            CSV_HEADER.split(',').count(),
            "{line}"
        );
        assert!(line.starts_with("netcat,4194304,1500,100,1,0,0,1.500,True,10,10,3,na,0,"));
        assert!(line.ends_with(",na,na,na,0,0,na,a; b"), "{line}");
        assert_eq!(r.config.label(), "netcat_rcvbuf-4MiB_mtu-1500_loss-0");
    }

    #[test]
    fn netcat_records_divide_its_buffer() {
        assert_eq!(netcat_record(1472), 1024);
        assert_eq!(netcat_record(8972), 8192);
        assert_eq!(netcat_record(1024), 1024);
        assert_eq!(16384 % netcat_record(1452), 0);
    }

    #[test]
    fn finds_a_bound_udp_port() {
        let v4 = "   sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode ref pointer drops\n\
                  \x20 12: 02004D0A:1E6E 00000000:0000 07 00000000:00000000 00:00000000 00000000     0        0 4242 2 0000000000000000 0\n";
        assert!(udp_port_bound(v4, 7790));
        assert!(!udp_port_bound(v4, 7791));
        assert!(!udp_port_bound(v4, 0x4D0A), "the address is not the port");
        let v6 = "  sl  local_address                         remote_address                        st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode ref pointer drops\n\
                  \x20 5: 00000000000000000000000000000000:1E6E 00000000000000000000000000000000:0000 07 00000000:00000000 00:00000000 00000000     0        0 99 2 0000000000000000 0\n";
        assert!(udp_port_bound(v6, 7790));
        assert!(!udp_port_bound("", 7790));
    }

    #[test]
    fn test_file_content_and_hash() {
        let dir = tempfile::tempdir().expect("test");
        let p = dir.path().join("a.bin");
        make_file(&p, 100_000, Content::A).expect("test");
        let data = fs::read(&p).expect("test");
        assert_eq!(data.len(), 100_000);
        assert!(data.iter().all(|&b| b == b'a'));
        let (h, n) = sha256_file(&p).expect("test");
        assert_eq!(n, 100_000);
        assert_eq!(h.len(), 64);
        make_file(&p, 1000, Content::Random).expect("test");
        assert!(fs::read(&p).expect("test").iter().any(|&b| b != b'a'));
        let (empty, _) = {
            fs::write(&p, b"").expect("test");
            sha256_file(&p).expect("test")
        };
        assert_eq!(
            empty,
            "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"
        );
    }
}
