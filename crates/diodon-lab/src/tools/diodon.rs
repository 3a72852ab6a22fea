//! Diodon itself: `diodon recv` in the receiving namespace, `diodon send` in
//! the sending one, and the receiver's typed JSON summary read back.
//!
//! ```text
//!  rx ns: diodon recv --listen RX:PORT --out OUT --channels 1 --json --no-fsync
//!                     --rate ⌈bitrate⌉mbit --mtu M [--rcvbuf CELL]   stdout ─► RecvSummary
//!  tx ns: diodon send --to RX:PORT --bind TX:0 --rate BITRATEmbit --mtu M --repair R
//!                     --json [--no-gso] INPUT
//! ```
//!
//! The summary is deserialised as [`RecvSummary`] (the type `diodon recv`
//! prints), and its counters read through their declarations
//! (`core_stats()`, `socket_counters()`), never by indexing untyped JSON.

use super::program::{csv_safe, last_line, Program, Readout, Started, Trial};
use crate::machine::ns_cmd;
use crate::plan::{DiodonRcvbuf, Plan, Tool};
use diodon_apps::report::RecvSummary;
use diodon_apps::Verdict;
use std::io;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Stdio};

/// `diodon send` / `diodon recv --channels 1`.
#[derive(Clone, Copy, Debug)]
pub struct Diodon;

impl Program for Diodon {
    fn tool(&self) -> Tool {
        Tool::Diodon
    }

    fn missing(&self, diodon_bin: &Path) -> Option<String> {
        (!diodon_bin.is_file()).then(|| {
            format!(
                "tool diodon needs the diodon gateway binary, not found at {} (build it with \
                 `cargo build --release --bin diodon`, or give its path with --diodon PATH)",
                diodon_bin.display()
            )
        })
    }

    fn start_receiver(&self, t: &Trial<'_>, out: &Path) -> io::Result<Child> {
        let c = t.config;
        let mut cmd = ns_cmd(&t.diode.rx_ns, t.diodon_bin);
        cmd.args(["recv", "--listen", &t.diode.peer().to_string(), "--out"])
            .arg(out)
            // Exit as soon as the one file is verified (or failed), not
            // after the link has been silent for a while.
            .args(["--channels", "1", "--json", "--no-fsync"])
            .args(["--rate", &format!("{}mbit", t.bitrate.ceil())])
            .args(["--mtu", &c.mtu.to_string()]);
        // Held to the cell's buffer like the other tools, or (the default)
        // Diodon's own: it forces rate × 250 ms, at least 4 MiB, whatever
        // net.core.rmem_max says (app_rcvbuf).
        if c.rcvbuf != 0 && t.plan.diodon_rcvbuf == DiodonRcvbuf::Cell {
            cmd.args(["--rcvbuf", &c.rcvbuf.to_string()]);
        }
        cmd.stdout(Stdio::piped()).stderr(t.receiver_log()?).spawn()
    }

    fn start_sender(&self, t: &Trial<'_>) -> io::Result<Started> {
        let e = t.diode;
        let mut cmd = ns_cmd(&e.tx_ns, t.diodon_bin);
        cmd.args(["send", "--to", &e.peer().to_string()])
            .args(["--bind", &SocketAddr::new(e.tx_addr, 0).to_string()])
            .args(["--rate", &format!("{}mbit", t.bitrate)])
            .args(["--mtu", &t.config.mtu.to_string()])
            .args(["--repair", &t.plan.repair.to_string()])
            .arg("--json");
        if !t.plan.diodon_gso || t.config.loss > 0.0 {
            cmd.arg("--no-gso");
        }
        let child = cmd
            .arg(t.input)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(t.sender_log()?)
            .spawn()?;
        Ok(Started { child, pacer: None })
    }

    fn output(&self, t: &Trial<'_>, out: &Path) -> PathBuf {
        out.join(t.input.file_name().unwrap_or_default())
    }

    fn read(&self, stdout: &str, stderr: &str) -> Readout {
        let Some(summary) = RecvSummary::from_output(stdout) else {
            return Readout {
                why: last_line(stderr),
                ..Readout::default()
            };
        };
        let core = summary.core_stats();
        Readout {
            missing: Some(core.missing),
            recovered: Some(core.recovered_symbols),
            socket_drops: Some(summary.socket_counters().dropped_packets),
            app_rcvbuf: Some(summary.rcvbuf as u64),
            corrupt: core.bad_check,
            why: says(&summary).or_else(|| last_line(stderr)),
        }
    }

    fn repair_ratio(&self, plan: &Plan) -> f64 {
        f64::from(plan.repair) / 100.0
    }
}

/// Why the receiver's summary says it failed: the failed channels' reasons,
/// with the datagrams it refused as expired or late, if any.
fn says(s: &RecvSummary) -> Option<String> {
    let mut why: Vec<String> = s
        .channels
        .iter()
        .filter_map(|c| match &c.verdict {
            Verdict::Failed { reason } => Some(reason.clone()),
            Verdict::Verified { .. } => None,
        })
        .collect();
    let core = s.core_stats();
    for (name, n) in [("expired", core.expired), ("late", core.late)] {
        if n > 0 {
            why.push(format!("{name} {n}"));
        }
    }
    (!why.is_empty()).then(|| csv_safe(&why.join("; ")))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// What `diodon recv --json` prints, with a log line before it.
    const PRINTED: &str = r#"2025-01-01 INFO receiving
{"side":"recv","sessions":["ab"],"bytes":1,"duration_s":1.0,"goodput_mbps":0.0,"cpu_s":0.1,"invalid":0,"channels_complete":1,"channels_failed":1,"queue_full_waits":0,"rcvbuf":4194304,"mismatches":[],"warnings":[],"channels":[{"session":"ab","channel":1,"name":"a","bytes":1,"location":"/o/a","verdict":"verified","blake3":"00"},{"session":"ab","channel":2,"name":"b","bytes":0,"location":"/q/b","verdict":"failed","reason":"block 37 lost (5 unrecoverable)"}],"core":{"expired":0,"late":3,"missing":12,"recovered_symbols":9,"bad_check":2},"socket":{"datagrams":100,"dropped_packets":4},"kernel":{}}
"#;

    #[test]
    fn reads_the_typed_summary_and_says_why() {
        let r = Diodon.read(PRINTED, "ignored\n");
        assert_eq!(
            r,
            Readout {
                missing: Some(12),
                recovered: Some(9),
                socket_drops: Some(4),
                app_rcvbuf: Some(4_194_304),
                corrupt: 2,
                why: Some("block 37 lost (5 unrecoverable); late 3".into()),
            }
        );
        // No summary (killed): the last line on stderr, nothing counted.
        let killed = Diodon.read("", "diodon: interrupted, exit\n");
        assert_eq!(killed.why.as_deref(), Some("diodon: interrupted; exit"));
        assert_eq!(killed.missing, None);
        // A summary that names nothing failed: no reason from it.
        let ok = PRINTED
            .replace(
                r#""verdict":"failed","reason":"block 37 lost (5 unrecoverable)""#,
                r#""verdict":"verified","blake3":"01""#,
            )
            .replace(r#""late":3"#, r#""late":0"#);
        assert_eq!(Diodon.read(&ok, "").why, None);
    }
}
