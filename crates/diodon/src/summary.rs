//! Final summaries (human text and `--json`) and the TTY progress bar.
//!
//! ```text
//!  SendReport / RecvReport + kernel counter deltas ─► Summary ─► text (stderr) | JSON
//!  Send/RecvProgress atomics ─► progress thread ─► indicatif bar (TTY only)
//! ```

use diodon_apps::{ChannelOutcome, RecvReport, SendReport, SentChannel};
use diodon_io::UdpSnmp;
use indicatif::{ProgressBar, ProgressStyle};
use serde::Serialize;
use std::fmt::Write as _;
use std::io::Write;
use std::sync::OnceLock;
use std::time::Duration;

/// The progress bar, if one is shown (logs are printed around it).
pub static BAR: OnceLock<ProgressBar> = OnceLock::new();

/// A `tracing` writer that suspends the progress bar while printing.
#[derive(Debug, Clone, Copy)]
pub struct LogWriter;

impl Write for LogWriter {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        match BAR.get() {
            Some(bar) => bar
                .suspend(|| std::io::stderr().write_all(buf))
                .map(|()| buf.len()),
            None => std::io::stderr().write_all(buf).map(|()| buf.len()),
        }
    }
    fn flush(&mut self) -> std::io::Result<()> {
        std::io::stderr().flush()
    }
}

/// Creates the bar (bytes, with a known total or a spinner).
pub fn make_bar(total: u64) -> &'static ProgressBar {
    BAR.get_or_init(|| {
        let bar = if total > 0 { ProgressBar::new(total) } else { ProgressBar::new_spinner() };
        let style = if total > 0 {
            "{spinner} [{elapsed_precise}] {wide_bar} {bytes}/{total_bytes} {binary_bytes_per_sec} {msg}"
        } else {
            "{spinner} [{elapsed_precise}] {bytes} {binary_bytes_per_sec} {msg}"
        };
        if let Ok(s) = ProgressStyle::with_template(style) {
            bar.set_style(s);
        }
        bar.set_draw_target(indicatif::ProgressDrawTarget::stderr_with_hz(5));
        bar
    })
}

/// Kernel UDP counters over the run (this process's network namespace).
#[derive(Debug, Clone, Copy, Default, Serialize)]
pub struct KernelDelta {
    /// Datagrams delivered to sockets.
    pub in_datagrams: u64,
    /// Receive errors (all causes).
    pub in_errors: u64,
    /// Drops because a receive buffer was full.
    pub rcvbuf_errors: u64,
    /// Drops because a send buffer was full.
    pub sndbuf_errors: u64,
    /// Bad checksums.
    pub in_csum_errors: u64,
    /// Datagrams sent.
    pub out_datagrams: u64,
}

impl KernelDelta {
    /// `after - before`.
    pub fn between(before: Option<UdpSnmp>, after: Option<UdpSnmp>) -> Self {
        match (before, after) {
            (Some(b), Some(a)) => {
                let d = a.delta(&b);
                KernelDelta {
                    in_datagrams: d.in_datagrams,
                    in_errors: d.in_errors,
                    rcvbuf_errors: d.rcvbuf_errors,
                    sndbuf_errors: d.sndbuf_errors,
                    in_csum_errors: d.in_csum_errors,
                    out_datagrams: d.out_datagrams,
                }
            }
            _ => KernelDelta::default(),
        }
    }
}

fn mbps(bytes: u64, d: Duration) -> f64 {
    let s = d.as_secs_f64();
    if s > 0.0 {
        bytes as f64 * 8.0 / s / 1e6
    } else {
        0.0
    }
}

/// The sender's summary.
#[derive(Debug, Serialize)]
pub struct SendSummary {
    pub side: &'static str,
    pub session: String,
    pub bytes: u64,
    pub duration_s: f64,
    pub goodput_mbps: f64,
    pub cpu_s: f64,
    pub datagrams_sent: u64,
    pub data_symbols: u64,
    pub repair_symbols: u64,
    pub beacons: u64,
    pub wire_bytes: u64,
    pub gso: bool,
    pub enobufs_retries: u64,
    pub eagain_retries: u64,
    pub channels_sent: usize,
    pub channels_failed: usize,
    pub source_errors: usize,
    pub kernel: KernelDelta,
    pub warnings: Vec<String>,
    pub channels: Vec<SentChannel>,
    /// With `--udp-listen`: what the UDP-flow source read and what the
    /// kernel dropped on its socket (the source outran the link).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub udp_source: Option<UdpSourceSummary>,
}

/// The UDP-flow source's counters (`--udp-listen`).
#[derive(Debug, Clone, Copy, Serialize)]
pub struct UdpSourceSummary {
    /// Datagrams read.
    pub datagrams: u64,
    /// Payload bytes read.
    pub bytes: u64,
    /// Flows (channels) opened.
    pub flows: u64,
    /// Datagrams the kernel dropped on the listening socket (`SO_RXQ_OVFL`):
    /// the only admissible loss, a source faster than the configured rate.
    pub socket_drops: u64,
}

impl UdpSourceSummary {
    /// Reads the live counters.
    pub fn from_stats(s: &diodon_apps::udp_flow::UdpSourceStats) -> Self {
        use std::sync::atomic::Ordering::Relaxed;
        UdpSourceSummary {
            datagrams: s.datagrams.load(Relaxed),
            bytes: s.bytes.load(Relaxed),
            flows: s.flows.load(Relaxed),
            socket_drops: s.socket_drops.load(Relaxed),
        }
    }
}

impl SendSummary {
    /// From the report.
    pub fn new(r: &SendReport, kernel: KernelDelta, cpu_s: f64, source_errors: usize) -> Self {
        SendSummary {
            side: "send",
            session: r.session.to_string(),
            bytes: r.stats.bytes_accepted,
            duration_s: r.duration.as_secs_f64(),
            goodput_mbps: mbps(r.stats.bytes_accepted, r.duration),
            cpu_s,
            datagrams_sent: r.stats.datagrams_sent,
            data_symbols: r.stats.data_symbols,
            repair_symbols: r.stats.repair_symbols,
            beacons: r.stats.beacons,
            wire_bytes: r.stats.wire_bytes,
            gso: r.gso,
            enobufs_retries: r.io.enobufs_retries,
            eagain_retries: r.io.eagain_retries,
            channels_sent: r.channels.len() - r.failed(),
            channels_failed: r.failed(),
            source_errors,
            kernel,
            warnings: r.warnings.iter().map(ToString::to_string).collect(),
            channels: r.channels.clone(),
            udp_source: None,
        }
    }

    /// Human text.
    pub fn text(&self) -> String {
        let mut s = String::new();
        let _ = writeln!(s, "diodon send: session {}", self.session);
        if let Some(u) = &self.udp_source {
            let _ = writeln!(
                s,
                "  UDP flows {}: {} datagrams, {} bytes read; {} dropped by the kernel (source faster than the link)",
                u.flows, u.datagrams, u.bytes, u.socket_drops
            );
        }
        let _ = writeln!(
            s,
            "  {} bytes in {:.3} s = {:.1} Mbit/s goodput, {:.2} s CPU",
            self.bytes, self.duration_s, self.goodput_mbps, self.cpu_s
        );
        let _ = writeln!(
            s,
            "  datagrams sent {} (data {}, repair {}, beacons {}), {} wire bytes, GSO {}",
            self.datagrams_sent,
            self.data_symbols,
            self.repair_symbols,
            self.beacons,
            self.wire_bytes,
            self.gso
        );
        let _ = writeln!(
            s,
            "  local queue waits: ENOBUFS {} EAGAIN {}; kernel: OutDatagrams {} SndbufErrors {}",
            self.enobufs_retries,
            self.eagain_retries,
            self.kernel.out_datagrams,
            self.kernel.sndbuf_errors
        );
        let _ = writeln!(
            s,
            "  channels sent {}, failed {}",
            self.channels_sent,
            self.channels_failed + self.source_errors
        );
        for c in &self.channels {
            let _ = writeln!(
                s,
                "    {} {} {} blake3 {}",
                c.status, c.name, c.bytes, c.digest
            );
        }
        for w in &self.warnings {
            let _ = writeln!(s, "  warning: {w}");
        }
        s
    }
}

/// The receiver's summary.
#[derive(Debug, Serialize)]
pub struct RecvSummary {
    pub side: &'static str,
    pub sessions: Vec<String>,
    pub bytes: u64,
    pub duration_s: f64,
    pub goodput_mbps: f64,
    pub cpu_s: f64,
    pub datagrams_received: u64,
    pub accepted: u64,
    pub missing: u64,
    pub recovered: u64,
    pub blocks_recovered: u64,
    pub blocks_lost: u64,
    pub bad_check: u64,
    pub invalid: u64,
    pub stale_session: u64,
    pub duplicates: u64,
    pub late: u64,
    pub expired: u64,
    pub channels_complete: usize,
    pub channels_failed: usize,
    pub socket_drops: u64,
    pub queue_full_waits: u64,
    pub rcvbuf: usize,
    pub kernel: KernelDelta,
    pub mismatches: Vec<String>,
    pub warnings: Vec<String>,
    pub channels: Vec<ChannelOutcome>,
    /// With `--udp-forward`: datagrams sent to the destination.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub udp_forwarded: Option<u64>,
}

impl RecvSummary {
    /// From the report.
    pub fn new(r: &RecvReport, kernel: KernelDelta, cpu_s: f64) -> Self {
        let verified_bytes = r
            .channels
            .iter()
            .filter(|c| matches!(c.verdict, diodon_apps::Verdict::Verified { .. }))
            .map(|c| c.bytes)
            .sum();
        RecvSummary {
            side: "recv",
            sessions: r.sessions.clone(),
            bytes: verified_bytes,
            duration_s: r.duration.as_secs_f64(),
            goodput_mbps: mbps(verified_bytes, r.duration),
            cpu_s,
            datagrams_received: r.socket_datagrams,
            accepted: r.stats.accepted,
            missing: r.stats.missing,
            recovered: r.stats.recovered_symbols,
            blocks_recovered: r.stats.blocks_recovered,
            blocks_lost: r.stats.blocks_lost,
            bad_check: r.stats.bad_check,
            invalid: r.stats.invalid(),
            stale_session: r.stats.stale_session,
            duplicates: r.stats.duplicates,
            late: r.stats.late,
            expired: r.stats.expired,
            channels_complete: r.channels.len() - r.failed(),
            channels_failed: r.failed(),
            socket_drops: r.socket_drops,
            queue_full_waits: r.queue_full,
            rcvbuf: r.rcvbuf,
            kernel,
            mismatches: r.mismatches.clone(),
            warnings: r.warnings.iter().map(ToString::to_string).collect(),
            channels: r.channels.clone(),
            udp_forwarded: None,
        }
    }

    /// Human text.
    pub fn text(&self) -> String {
        let mut s = String::new();
        let _ = writeln!(s, "diodon recv: sessions {}", self.sessions.join(", "));
        if let Some(n) = self.udp_forwarded {
            let _ = writeln!(s, "  UDP datagrams forwarded {n}");
        }
        let _ = writeln!(
            s,
            "  {} verified bytes in {:.3} s = {:.1} Mbit/s goodput, {:.2} s CPU",
            self.bytes, self.duration_s, self.goodput_mbps, self.cpu_s
        );
        let _ = writeln!(s,
            "  datagrams received {} accepted {} missing {} recovered {} (blocks recovered {}, lost {})",
            self.datagrams_received, self.accepted, self.missing, self.recovered, self.blocks_recovered, self.blocks_lost
        );
        let _ = writeln!(
            s,
            "  rejected: bad check {} invalid {} stale session {} duplicates {} late {} expired {}",
            self.bad_check,
            self.invalid,
            self.stale_session,
            self.duplicates,
            self.late,
            self.expired
        );
        let _ = writeln!(s,
            "  socket drops {} (rcvbuf {} bytes), decoder-queue waits {}; kernel: InDatagrams {} RcvbufErrors {} InErrors {} InCsumErrors {}",
            self.socket_drops,
            self.rcvbuf,
            self.queue_full_waits,
            self.kernel.in_datagrams,
            self.kernel.rcvbuf_errors,
            self.kernel.in_errors,
            self.kernel.in_csum_errors
        );
        let _ = writeln!(
            s,
            "  channels complete {}, failed {}",
            self.channels_complete, self.channels_failed
        );
        for c in &self.channels {
            match &c.verdict {
                diodon_apps::Verdict::Verified { blake3 } => {
                    let _ = writeln!(
                        s,
                        "    verified {} {} bytes blake3 {} -> {}",
                        c.name.escape_debug(),
                        c.bytes,
                        blake3,
                        c.location
                    );
                }
                diodon_apps::Verdict::Failed { reason } => {
                    let _ = writeln!(
                        s,
                        "    FAILED {} ({}) -> {}",
                        c.name.escape_debug(),
                        reason,
                        c.location
                    );
                }
            }
        }
        for m in &self.mismatches {
            let _ = writeln!(s, "  configuration mismatch: {m}");
        }
        for w in &self.warnings {
            let _ = writeln!(s, "  warning: {w}");
        }
        s
    }
}

/// CPU time (user + system) of this process so far, from /proc/self/stat.
pub fn cpu_seconds() -> f64 {
    let Ok(stat) = std::fs::read_to_string("/proc/self/stat") else {
        return 0.0;
    };
    // Fields after the command name (which is in parentheses).
    let Some(rest) = stat.rsplit(')').next() else {
        return 0.0;
    };
    let f: Vec<&str> = rest.split_whitespace().collect();
    let ticks = |i: usize| f.get(i).and_then(|v| v.parse::<f64>().ok()).unwrap_or(0.0);
    // utime and stime are fields 14 and 15 (1-based), i.e. 11 and 12 here.
    (ticks(11) + ticks(12)) / 100.0
}
