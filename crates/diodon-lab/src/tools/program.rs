//! What every measured program is given and gives back: the [`Program`]
//! trait, a trial's inputs ([`Trial`]), a started sender ([`Started`]),
//! what a receiver said ([`Readout`]), and the helpers the programs share.
//! Each program's own module depends on this one, never the other way.

use crate::diode::Diode;
use crate::plan::{Plan, Tool};
use crate::row::Config;
use std::fs::File;
use std::io;
use std::path::{Path, PathBuf};
use std::process::Child;
use std::sync::atomic::AtomicBool;
use std::sync::Arc;
use std::thread::JoinHandle;

/// What one trial gives the tool: the diode, the cell, the bitrate, the file.
#[derive(Clone, Copy, Debug)]
pub struct Trial<'a> {
    /// The plan (repair, GSO, buffers, idle timeouts).
    pub plan: &'a Plan,
    /// Where the ends are.
    pub diode: &'a Diode,
    /// The cell.
    pub config: &'a Config,
    /// Mbit/s.
    pub bitrate: f64,
    /// The file to send.
    pub input: &'a Path,
    /// Scratch directory: the receiver's and the sender's logs.
    pub work: &'a Path,
    /// The `diodon` gateway binary.
    pub diodon_bin: &'a Path,
    /// Set when the run is interrupted (a pacer stops feeding).
    pub stop: &'a Arc<AtomicBool>,
}

impl Trial<'_> {
    /// The receiver's stderr log, `work/receiver.log`.
    pub fn receiver_log(&self) -> io::Result<File> {
        File::create(self.work.join(RECEIVER_LOG))
    }

    /// The sender's stderr log, `work/sender.log`.
    pub fn sender_log(&self) -> io::Result<File> {
        File::create(self.work.join(SENDER_LOG))
    }
}

/// The receiver's stderr, inside the work directory.
pub const RECEIVER_LOG: &str = "receiver.log";
/// The sender's stderr, inside the work directory.
pub const SENDER_LOG: &str = "sender.log";

/// A started sender: the child and, when the harness feeds it, the pacer
/// thread doing so.
#[derive(Debug)]
pub struct Started {
    /// The sender process.
    pub child: Child,
    /// The thread feeding it (netcat), with its own result.
    pub pacer: Option<JoinHandle<io::Result<()>>>,
}

/// What a receiver said about its trial, beyond its exit code.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Readout {
    /// Source symbols missing (Diodon).
    pub missing: Option<u64>,
    /// Recovered by FEC (Diodon).
    pub recovered: Option<u64>,
    /// `SO_RXQ_OVFL` drops on its socket (Diodon).
    pub socket_drops: Option<u64>,
    /// The receive buffer it ended up with (Diodon).
    pub app_rcvbuf: Option<u64>,
    /// Datagrams it found corrupt itself (Diodon's failed checks), on top
    /// of the kernel's `InCsumErrors`.
    pub corrupt: u64,
    /// Why it says it failed, fit for the CSV's `reason` column.
    pub why: Option<String>,
}

/// One measured program.
pub trait Program {
    /// Which tool of the plan this is.
    fn tool(&self) -> Tool;
    /// Why it cannot run on this machine, if it cannot (a missing binary).
    fn missing(&self, diodon_bin: &Path) -> Option<String>;
    /// Starts the receiver in the receiving namespace; the file goes into `out`.
    fn start_receiver(&self, t: &Trial<'_>, out: &Path) -> io::Result<Child>;
    /// Starts the sender in the sending namespace.
    fn start_sender(&self, t: &Trial<'_>) -> io::Result<Started>;
    /// The file the receiver wrote into `out`.
    fn output(&self, t: &Trial<'_>, out: &Path) -> PathBuf;
    /// Reads the receiver's stdout (when piped) and its stderr log.
    fn read(&self, stdout: &str, stderr: &str) -> Readout;
    /// Repair overhead as a fraction of the data.
    fn repair_ratio(&self, plan: &Plan) -> f64;
}

/// Whether `program` is an executable file on `PATH`.
pub fn on_path(program: &str) -> bool {
    std::env::var_os("PATH")
        .is_some_and(|p| std::env::split_paths(&p).any(|d| d.join(program).is_file()))
}

/// The last non-empty line a program wrote on stderr (netcat's and
/// pydiode's errors, a Python traceback's last line), fit for the CSV.
pub fn last_line(stderr: &str) -> Option<String> {
    stderr
        .lines()
        .rev()
        .map(str::trim)
        .find(|l| !l.is_empty())
        .map(csv_safe)
}

/// `text` fit for one CSV field: commas become `;` and control characters
/// spaces; at most 200 characters.
pub fn csv_safe(text: &str) -> String {
    text.chars()
        .map(|c| match c {
            ',' => ';',
            c if c.is_control() => ' ',
            c => c,
        })
        .take(200)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_last_stderr_line_fits_one_csv_field() {
        let py =
            "Traceback (most recent call last):\n  File x, line 3\nValueError: bad chunk, 2\n\n";
        assert_eq!(last_line(py).as_deref(), Some("ValueError: bad chunk; 2"));
        assert_eq!(last_line(" \n\n"), None);
        let long = "x".repeat(500);
        assert_eq!(last_line(&long).map(|s| s.len()), Some(200));
        assert_eq!(csv_safe("a,b\tc"), "a;b c");
    }
}
