//! The trial plan (TOML): which tools, bitrates, buffers, MTUs and injected
//! loss to measure, how many trials per cell, and where the diode is.
//!
//! ```toml
//! tools = ["diodon", "netcat", "pydiode-r1", "pydiode-r2"]
//! bitrates_mbps = [100, 500, 1000]
//! trials = 10
//! rcvbuf = [0, 4194304]     # 0: leave net.core.rmem_* as they are
//! mtu = [1500]
//! loss = [0.0]              # percent, dropped at random on the receiver's ingress
//! repair = 10               # Diodon repair symbols, percent of source symbols
//! diodon_rcvbuf = "own"     # Diodon's own buffer, or "cell": held to rcvbuf like the others
//! timeout_s = 60
//! receiver_grace_s = 5      # receiver still running 5 s after the sender exited: failed
//! [file]
//! size = 125000000
//! content = "a"             # or "random"
//! ```

use serde::{Deserialize, Serialize};
use std::fmt;
use std::path::{Path, PathBuf};

/// Errors loading a plan.
#[derive(Debug, thiserror::Error)]
pub enum PlanError {
    /// The file could not be read.
    #[error("cannot read plan {path}: {source}")]
    Read {
        /// The plan file.
        path: PathBuf,
        /// The OS error.
        #[source]
        source: std::io::Error,
    },
    /// TOML syntax or unknown keys.
    #[error("plan {path}: {message}")]
    Parse {
        /// The plan file.
        path: PathBuf,
        /// What is wrong.
        message: String,
    },
    /// A value out of range.
    #[error("plan: {0}")]
    Invalid(String),
}

/// A data transfer tool under test.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Tool {
    /// `diodon send` / `diodon recv --once`.
    Diodon,
    /// OpenBSD netcat (`nc -u`), paced by the harness.
    Netcat,
    /// pydiode with this redundancy (1: every chunk once, 2: twice).
    Pydiode(u8),
}

impl Tool {
    /// Parses `diodon`, `netcat`/`nc`, `pydiode-r1`, `pydiode-r2`.
    pub fn parse(s: &str) -> Result<Tool, PlanError> {
        match s {
            "diodon" => Ok(Tool::Diodon),
            "netcat" | "nc" => Ok(Tool::Netcat),
            _ => s
                .strip_prefix("pydiode-r")
                .and_then(|r| r.parse::<u8>().ok())
                .filter(|r| (1..=10).contains(r))
                .map(Tool::Pydiode)
                .ok_or_else(|| {
                    PlanError::Invalid(format!(
                        "unknown tool {s:?} (diodon, netcat, pydiode-r1, pydiode-r2)"
                    ))
                }),
        }
    }
}

impl fmt::Display for Tool {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Tool::Diodon => f.write_str("diodon"),
            Tool::Netcat => f.write_str("netcat"),
            Tool::Pydiode(r) => write!(f, "pydiode-r{r}"),
        }
    }
}

/// Which receive buffer Diodon's receiver uses in a cell.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Deserialize, Serialize, Default)]
#[serde(rename_all = "lowercase")]
pub enum DiodonRcvbuf {
    /// Its own choice, as deployed (`diodon recv` without `--rcvbuf`).
    #[default]
    Own,
    /// The cell's `rcvbuf` (`--rcvbuf BYTES`), the same as the other tools get.
    Cell,
}

/// Test file content.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Deserialize, Serialize, Default)]
#[serde(rename_all = "lowercase")]
pub enum Content {
    /// Only `a` bytes, as in the thesis.
    #[default]
    A,
    /// Pseudo-random bytes (fixed seed).
    Random,
}

/// The test file.
#[derive(Clone, Debug, PartialEq, Eq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct FileSpec {
    /// Bytes (default 125,000,000: 1 Gbit).
    #[serde(default = "default_size")]
    pub size: u64,
    /// `a` or `random`.
    #[serde(default)]
    pub content: Content,
}

impl Default for FileSpec {
    fn default() -> Self {
        FileSpec {
            size: default_size(),
            content: Content::A,
        }
    }
}

fn default_size() -> u64 {
    125_000_000
}

/// Where the diode is.
#[derive(Clone, Debug, PartialEq, Eq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct LinkSpec {
    /// Build the software diode with `scripts/testbed.sh` (one per MTU × loss).
    #[serde(default = "yes")]
    pub testbed: bool,
    /// Sender namespace (default: the testbed's).
    pub tx_ns: Option<String>,
    /// Receiver namespace.
    pub rx_ns: Option<String>,
    /// Sender's diode interface.
    #[serde(default = "tx_if")]
    pub tx_if: String,
    /// Receiver's diode interface.
    #[serde(default = "rx_if")]
    pub rx_if: String,
    /// Sender's address.
    #[serde(default = "tx_addr")]
    pub tx_addr: String,
    /// Receiver's address.
    #[serde(default = "rx_addr")]
    pub rx_addr: String,
    /// UDP port.
    #[serde(default = "port")]
    pub port: u16,
    /// Load the one-way guard on both ends (gives `dtgrms_sent/received`).
    #[serde(default = "yes")]
    pub guard: bool,
}

impl Default for LinkSpec {
    fn default() -> Self {
        LinkSpec {
            testbed: true,
            tx_ns: None,
            rx_ns: None,
            tx_if: tx_if(),
            rx_if: rx_if(),
            tx_addr: tx_addr(),
            rx_addr: rx_addr(),
            port: port(),
            guard: true,
        }
    }
}

fn yes() -> bool {
    true
}
fn tx_if() -> String {
    "tx0".into()
}
fn rx_if() -> String {
    "rx0".into()
}
fn tx_addr() -> String {
    "10.77.0.1".into()
}
fn rx_addr() -> String {
    "10.77.0.2".into()
}
fn port() -> u16 {
    7790
}

/// Fault injection, for testing the harness itself.
#[derive(Clone, Debug, PartialEq, Eq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct Fault {
    /// SIGKILL the receiver of this trial number (1-based, every cell) ...
    pub kill_receiver_trial: u32,
    /// ... this many milliseconds after the sender started.
    #[serde(default)]
    pub kill_receiver_after_ms: u64,
}

/// A trial plan.
#[derive(Clone, Debug, PartialEq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct Plan {
    /// A label for the summary.
    #[serde(default)]
    pub name: String,
    /// Tools (`diodon`, `netcat`, `pydiode-r1`, `pydiode-r2`).
    pub tools: Vec<String>,
    /// Bitrates in Mbit/s.
    pub bitrates_mbps: Vec<f64>,
    /// Trials per cell.
    pub trials: u32,
    /// The test file.
    #[serde(default)]
    pub file: FileSpec,
    /// Receive buffer sizes (bytes) for `net.core.rmem_max`/`rmem_default`; 0 leaves them.
    #[serde(default = "zero_vec")]
    pub rcvbuf: Vec<u64>,
    /// MTUs (testbed only).
    #[serde(default = "mtu_vec")]
    pub mtu: Vec<u32>,
    /// Injected random loss in percent (testbed only).
    #[serde(default = "loss_vec")]
    pub loss: Vec<f64>,
    /// Diodon repair ratio, percent of source symbols.
    #[serde(default = "repair")]
    pub repair: u32,
    /// Per-trial limit in seconds; a trial still running then fails.
    #[serde(default = "timeout")]
    pub timeout_s: f64,
    /// A receiver still running this many seconds after its sender exited
    /// has failed: nothing more can arrive (a pydiode receiver that never got
    /// its end-of-file chunk waits forever). Must exceed `netcat_idle_s`.
    #[serde(default = "grace")]
    pub receiver_grace_s: f64,
    /// Netcat receiver idle timeout (`nc -w`), seconds.
    #[serde(default = "idle")]
    pub netcat_idle_s: u32,
    /// Let Diodon use UDP GSO (the guard then counts super-packets, not datagrams).
    #[serde(default)]
    pub diodon_gso: bool,
    /// Diodon's receive buffer: its own (`own`, the default: it forces
    /// rate × 250 ms, at least 4 MiB, past `net.core.rmem_max`), or the cell's
    /// `rcvbuf` like every other tool (`cell`).
    #[serde(default)]
    pub diodon_rcvbuf: DiodonRcvbuf,
    /// Where the diode is.
    #[serde(default)]
    pub link: LinkSpec,
    /// Harness self-test.
    pub fault: Option<Fault>,
}

fn zero_vec() -> Vec<u64> {
    vec![0]
}
fn mtu_vec() -> Vec<u32> {
    vec![1500]
}
fn loss_vec() -> Vec<f64> {
    vec![0.0]
}
fn repair() -> u32 {
    10
}
fn timeout() -> f64 {
    120.0
}
fn idle() -> u32 {
    1
}
fn grace() -> f64 {
    5.0
}

impl Plan {
    /// Reads and checks a plan file.
    pub fn load(path: &Path) -> Result<Plan, PlanError> {
        let text = std::fs::read_to_string(path).map_err(|source| PlanError::Read {
            path: path.to_owned(),
            source,
        })?;
        Plan::parse(&text).map_err(|e| match e {
            PlanError::Parse { message, .. } => PlanError::Parse {
                path: path.to_owned(),
                message,
            },
            other => other,
        })
    }

    /// Parses and checks plan text.
    pub fn parse(text: &str) -> Result<Plan, PlanError> {
        let plan: Plan = toml::from_str(text).map_err(|e| PlanError::Parse {
            path: PathBuf::from("<text>"),
            message: e.to_string(),
        })?;
        plan.check()?;
        Ok(plan)
    }

    /// The tools, parsed.
    pub fn tool_list(&self) -> Result<Vec<Tool>, PlanError> {
        self.tools.iter().map(|t| Tool::parse(t)).collect()
    }

    fn check(&self) -> Result<(), PlanError> {
        let bad = |m: String| Err(PlanError::Invalid(m));
        if self.tool_list()?.is_empty() {
            return bad("no tools".into());
        }
        if self.bitrates_mbps.is_empty()
            || self
                .bitrates_mbps
                .iter()
                .any(|b| !(b.is_finite() && *b > 0.0 && *b <= 100_000.0))
        {
            return bad("bitrates_mbps: give values in (0, 100000]".into());
        }
        if self.trials == 0 {
            return bad("trials must be at least 1".into());
        }
        if self.file.size == 0 {
            return bad("file.size must be > 0".into());
        }
        if self.rcvbuf.is_empty() || self.mtu.is_empty() || self.loss.is_empty() {
            return bad("rcvbuf, mtu and loss need at least one value".into());
        }
        if self
            .rcvbuf
            .iter()
            .any(|&b| b != 0 && !(4096..=1 << 31).contains(&b))
        {
            return bad("rcvbuf: 0 (system default) or 4096 ..= 2 GiB".into());
        }
        if self.mtu.iter().any(|m| !(1280..=65535).contains(m)) {
            return bad("mtu: 1280 ..= 65535".into());
        }
        if self.loss.iter().any(|l| !(0.0..=100.0).contains(l)) {
            return bad("loss: percent 0 ..= 100".into());
        }
        if !(self.timeout_s > 0.0 && self.timeout_s.is_finite()) {
            return bad("timeout_s must be > 0".into());
        }
        if !(self.receiver_grace_s.is_finite()
            && self.receiver_grace_s > f64::from(self.netcat_idle_s))
        {
            return bad("receiver_grace_s must exceed netcat_idle_s".into());
        }
        if !self.link.testbed && (self.link.tx_ns.is_none() || self.link.rx_ns.is_none()) {
            return bad(
                "on a real diode (link.testbed = false) give link.tx_ns and link.rx_ns".into(),
            );
        }
        if !self.link.testbed && (self.mtu.len() > 1 || self.loss.iter().any(|l| *l > 0.0)) {
            return bad(
                "on a real diode (link.testbed = false) MTU and loss cannot be varied".into(),
            );
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_a_minimal_plan_with_defaults() {
        let p = Plan::parse(
            "tools = [\"diodon\", \"nc\", \"pydiode-r2\"]\nbitrates_mbps = [100]\ntrials = 3\n",
        )
        .expect("test");
        assert_eq!(
            p.tool_list().expect("test"),
            vec![Tool::Diodon, Tool::Netcat, Tool::Pydiode(2)]
        );
        assert_eq!(p.file.size, 125_000_000);
        assert_eq!(p.file.content, Content::A);
        assert_eq!(p.rcvbuf, vec![0]);
        assert_eq!(p.mtu, vec![1500]);
        assert!(p.link.testbed && p.link.guard);
        assert_eq!(p.link.port, 7790);
        assert_eq!(p.diodon_rcvbuf, DiodonRcvbuf::Own);
        let p = Plan::parse(
            "tools = [\"diodon\"]\nbitrates_mbps = [100]\ntrials = 1\ndiodon_rcvbuf = \"cell\"\n",
        )
        .expect("test");
        assert_eq!(p.diodon_rcvbuf, DiodonRcvbuf::Cell);
    }

    #[test]
    fn accepts_a_given_diode() {
        let p = Plan::parse(
            "tools = [\"diodon\"]\nbitrates_mbps = [100]\ntrials = 1\n[link]\ntestbed = false\ntx_ns = \"a\"\nrx_ns = \"b\"\ntx_if = \"eth1\"\n",
        )
        .expect("test");
        assert!(!p.link.testbed);
        assert_eq!(p.link.tx_ns.as_deref(), Some("a"));
        assert_eq!(p.link.tx_if, "eth1");
    }

    #[test]
    fn rejects_bad_plans() {
        for text in [
            "tools = [\"ftp\"]\nbitrates_mbps = [100]\ntrials = 1\n",
            "tools = [\"diodon\"]\nbitrates_mbps = []\ntrials = 1\n",
            "tools = [\"diodon\"]\nbitrates_mbps = [100]\ntrials = 0\n",
            "tools = [\"diodon\"]\nbitrates_mbps = [100]\ntrials = 1\nmtu = [500]\n",
            "tools = [\"diodon\"]\nbitrates_mbps = [100]\ntrials = 1\nloss = [101.0]\n",
            "tools = [\"diodon\"]\nbitrates_mbps = [100]\ntrials = 1\nbogus = 1\n",
            "tools = [\"diodon\"]\nbitrates_mbps = [100]\ntrials = 1\nmtu = [1500, 9000]\n[link]\ntestbed = false\ntx_ns = \"a\"\nrx_ns = \"b\"\n",
            "tools = [\"diodon\"]\nbitrates_mbps = [100]\ntrials = 1\n[link]\ntestbed = false\nrx_ns = \"b\"\n",
        ] {
            assert!(Plan::parse(text).is_err(), "{text}");
        }
    }
}
