//! The verdict of a run as typed values: what `diodon send` and `diodon recv`
//! print (human text on stderr, `--json` on stdout), what the trial harness
//! reads back (`serde` both ways), and the exit code each outcome maps to.
//!
//! ```text
//!  SendReport / RecvReport ─┐
//!  kernel UDP MIB delta ────┼─► SendSummary / RecvSummary ─► text() | JSON | exit()
//!  process CPU seconds ─────┘        core, socket, kernel: counter snapshots
//! ```
//!
//! The counters are not listed here: `core`, `socket` and `kernel` are
//! [`Snapshot`]s of the declared counter sets ([`diodon_counters`]), so a
//! counter added to a core appears in the JSON without a change here. A
//! reader gets them back typed (`core_stats()`, `socket_counters()`,
//! `kernel_udp()`), and a summary out of a process's output with
//! `from_output` (the last JSON line), never by indexing untyped JSON.

use crate::files::FileSinkCounters;
use crate::kafka::{KafkaSinkCounters, KafkaSourceCounters};
use crate::multilink::{LinkCounters, LinkHealth};
use crate::packet_sink::PacketSinkCounters;
use crate::recv::{ChannelOutcome, RecvReport, RecvSocketCounters, Verdict};
use crate::send::{SendReport, SentChannel, SentStatus};
use crate::tunnel::{TunnelSinkCounters, TunnelSourceCounters};
use crate::udp_flow::{UdpForwardCounters, UdpSourceCounters};
use crate::PipelineError;
use diodon_counters::{CounterSet, Snapshot};
use diodon_io::{SenderCounters, UdpSnmp};
use diodon_proto::{ReceiverStats, SenderStats};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::sync::Arc;
use std::time::Duration;

/// The process exit status a run maps to (documented in the README).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Exit {
    /// 0: every channel verified.
    Success,
    /// 1: a channel failed or was refused, or nothing arrived with `--once`.
    ChannelFailed,
    /// 2: usage or configuration error.
    Config,
    /// 3: IO error (socket, output directory, a thread).
    Io,
    /// 4: `recv --timeout`: no valid datagram arrived in time.
    NothingArrived,
    /// 130: stopped by a signal before the end (the shell's 128 + SIGINT).
    Interrupted,
}

impl Exit {
    /// The numeric exit code.
    pub fn code(self) -> u8 {
        match self {
            Exit::Success => 0,
            Exit::ChannelFailed => 1,
            Exit::Config => 2,
            Exit::Io => 3,
            Exit::NothingArrived => 4,
            Exit::Interrupted => 130,
        }
    }
}

impl PipelineError {
    /// The exit status this error ends the process with.
    pub fn exit(&self) -> Exit {
        match self {
            PipelineError::Config(_) => Exit::Config,
            _ => Exit::Io,
        }
    }
}

/// One agent's packets on the receiving side.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct PacketAgent {
    /// The agent number.
    pub agent: usize,
    /// Frames written.
    pub delivered: u64,
    /// Frames counted lost.
    pub lost: u64,
}

/// The version of the summaries' JSON (docs/json.md). 2: both sides write
/// a channel as `name`, `bytes`, `verdict`, `blake3` / `reason` (before,
/// the sender wrote `digest` and `status`).
pub const SUMMARY_SCHEMA: u32 = 2;

/// The kernel's UDP counters over a run: `after − before` (empty when either
/// read failed, e.g. no `/proc`).
pub fn kernel_delta(before: Option<UdpSnmp>, after: Option<UdpSnmp>) -> Snapshot {
    match (before, after) {
        (Some(b), Some(a)) => a.delta(&b).snapshot(),
        _ => Snapshot::default(),
    }
}

/// The shortest run whose rate a summary states: below it, start-up and
/// the last datagram's timing dominate and the quotient means nothing (a
/// 48 KB file "arrives" faster than the link).
const SHORTEST_RATED_RUN_S: f64 = 0.2;

/// "1.234 s = 56.7 Mbit/s goodput", or the duration alone for a run too
/// short to state a rate.
fn rate_text(duration_s: f64, mbps: f64) -> String {
    if duration_s >= SHORTEST_RATED_RUN_S {
        format!("{duration_s:.3} s = {mbps:.1} Mbit/s goodput")
    } else {
        format!("{duration_s:.3} s (too short a run to state a rate)")
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
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct SendSummary {
    /// Always `send`.
    pub side: String,
    /// [`SUMMARY_SCHEMA`] (0 when read from a version that wrote none).
    #[serde(default)]
    pub schema: u32,
    /// Session id, hex.
    pub session: String,
    /// Channel bytes accepted.
    pub bytes: u64,
    /// First to last datagram of channel data.
    pub duration_s: f64,
    /// `bytes` over `duration_s`.
    pub goodput_mbps: f64,
    /// CPU seconds (user + system) of the whole process.
    pub cpu_s: f64,
    /// Whether GSO was used.
    pub gso: bool,
    /// Channels that went out complete.
    pub channels_sent: usize,
    /// Channels aborted or refused.
    pub channels_failed: usize,
    /// Sources (files, connections) that failed before the core.
    pub source_errors: usize,
    /// Socket setup warnings.
    pub warnings: Vec<String>,
    /// Every channel, in the order it ended.
    pub channels: Vec<SentChannel>,
    /// The core's counters (`SenderStats`).
    pub core: Snapshot,
    /// The socket's counters (`SenderCounters`: ENOBUFS/EAGAIN waits, GSO calls).
    pub socket: Snapshot,
    /// The kernel's UDP MIB over the run (`UdpSnmp`): the change during
    /// this run of the network namespace's totals, so it includes any other
    /// UDP traffic of the namespace (the metrics page shows the totals
    /// themselves, labelled `scope="netns"`).
    pub kernel: Snapshot,
    /// With `--udp-listen`: what the UDP-flow source read and what the
    /// kernel dropped on its socket (the source outran the link).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub udp_source: Option<UdpSourceCounters>,
    /// With `tunnel send`: packets read, queue drops by policy, the TUN's
    /// own drops (`tx_dropped`), malformed packets by reason.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tunnel: Option<TunnelSourceCounters>,
    /// With `--kafka`: records consumed, segments, offset commits, segments
    /// left uncommitted.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kafka: Option<KafkaSourceCounters>,
    /// With several links (`--to` more than once): each link's receiver,
    /// session and health; the fields above add up all links.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub links: Vec<LinkSummary>,
    /// With several links: channels that failed on a link that went down
    /// and were then sent over another (not in `channels_failed`).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub channels_retried: usize,
}

#[expect(
    clippy::trivially_copy_pass_by_ref,
    reason = "serde's skip_serializing_if passes a reference"
)]
fn is_zero(n: &usize) -> bool {
    *n == 0
}

/// One link of a sender with several.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct LinkSummary {
    /// The link's receiver.
    pub to: String,
    /// Its session id, hex.
    pub session: String,
    /// Channel bytes it accepted.
    pub bytes: u64,
    /// Channels it sent complete.
    pub channels_sent: usize,
    /// Channels aborted or refused on it.
    pub channels_failed: usize,
    /// Its health: up now, times down, channels aborted or turned away because
    /// it was down, datagrams.
    pub health: LinkCounters,
    /// Why it was last down (empty: never).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub last_down: String,
}

impl SendSummary {
    /// From the reports of several links (in the order of `links`): totals
    /// over all, and one [`LinkSummary`] each.
    pub fn of_links(
        reports: &[SendReport],
        links: &[Arc<LinkHealth>],
        kernel: Snapshot,
        cpu_s: f64,
        source_errors: usize,
    ) -> Self {
        let Some(first) = reports.first() else {
            let none = SendReport {
                session: diodon_proto::SessionId(0),
                stats: SenderStats::default(),
                io: SenderCounters::default(),
                channels: Vec::new(),
                duration: Duration::ZERO,
                warnings: Vec::new(),
                gso: false,
            };
            return SendSummary::new(&none, kernel, cpu_s, source_errors);
        };
        let mut all = SendSummary::new(first, kernel, cpu_s, source_errors);
        all.core = Snapshot::default();
        all.socket = Snapshot::default();
        all.channels.clear();
        all.warnings.clear();
        let mut duration = Duration::ZERO;
        for (r, h) in reports.iter().zip(links) {
            all.core.add(&r.stats.snapshot());
            all.socket.add(&r.io.snapshot());
            all.channels.extend(r.channels.iter().cloned());
            all.warnings.extend(
                r.warnings
                    .iter()
                    .map(|w| format!("link to {}: {w}", h.dest)),
            );
            all.gso &= r.gso;
            duration = duration.max(r.duration);
            let health = h.snapshot();
            all.links.push(LinkSummary {
                to: h.dest.to_string(),
                session: r.session.to_string(),
                bytes: r.stats.bytes_accepted,
                channels_sent: usize::try_from(health.sent).unwrap_or(usize::MAX),
                channels_failed: usize::try_from(health.failed).unwrap_or(usize::MAX),
                health,
                last_down: h.last_down(),
            });
        }
        all.session = all
            .links
            .iter()
            .map(|l| l.session.as_str())
            .collect::<Vec<_>>()
            .join(",");
        all.bytes = all.links.iter().map(|l| l.bytes).sum();
        all.channels_sent = all.links.iter().map(|l| l.channels_sent).sum();
        all.channels_failed = all.links.iter().map(|l| l.channels_failed).sum();
        if !all.channels.is_empty() {
            // A channel that failed and went again under its name counts
            // once, as sent.
            let sent: std::collections::HashSet<&str> = all
                .channels
                .iter()
                .filter(|c| c.status == SentStatus::Sent)
                .map(|c| c.name.as_str())
                .collect();
            let failed = all.channels.iter().filter(|c| c.status != SentStatus::Sent);
            let retried = failed
                .clone()
                .filter(|c| sent.contains(c.name.as_str()))
                .count();
            all.channels_retried = retried;
            all.channels_sent = all.channels.len() - failed.count();
            all.channels_failed = all.channels.len() - all.channels_sent - retried;
        }
        all.duration_s = duration.as_secs_f64();
        all.goodput_mbps = mbps(all.bytes, duration);
        all
    }

    /// From the report.
    pub fn new(r: &SendReport, kernel: Snapshot, cpu_s: f64, source_errors: usize) -> Self {
        SendSummary {
            side: "send".into(),
            schema: SUMMARY_SCHEMA,
            session: r.session.to_string(),
            bytes: r.stats.bytes_accepted,
            duration_s: r.duration.as_secs_f64(),
            goodput_mbps: mbps(r.stats.bytes_accepted, r.duration),
            cpu_s,
            gso: r.gso,
            channels_sent: r.channels.len() - r.failed(),
            channels_failed: r.failed(),
            source_errors,
            warnings: r.warnings.iter().map(ToString::to_string).collect(),
            channels: r.channels.clone(),
            core: r.stats.snapshot(),
            socket: r.io.snapshot(),
            kernel,
            udp_source: None,
            tunnel: None,
            kafka: None,
            links: Vec::new(),
            channels_retried: 0,
        }
    }

    /// The last sender summary in `output` (what `diodon send --json` printed).
    pub fn from_output(output: &str) -> Option<SendSummary> {
        last_json_line(output)
    }

    /// The core's counters, typed.
    pub fn core_stats(&self) -> SenderStats {
        SenderStats::from_snapshot(&self.core)
    }

    /// The socket's counters, typed.
    pub fn socket_counters(&self) -> SenderCounters {
        SenderCounters::from_snapshot(&self.socket)
    }

    /// The kernel's UDP MIB over the run, typed.
    pub fn kernel_udp(&self) -> UdpSnmp {
        UdpSnmp::from_snapshot(&self.kernel)
    }

    /// How the process should exit.
    pub fn exit(&self) -> Exit {
        if self.channels_failed + self.source_errors > 0 {
            Exit::ChannelFailed
        } else {
            Exit::Success
        }
    }

    /// Human text.
    pub fn text(&self) -> String {
        let (c, io, k) = (&self.core, &self.socket, &self.kernel);
        let mut s = String::new();
        let _ = writeln!(s, "diodon send: session {}", self.session);
        if let Some(t) = &self.tunnel {
            s.push_str(&tunnel_source_line(t));
        }
        if let Some(k) = &self.kafka {
            let _ = writeln!(
                s,
                "  kafka: {} records ({} bytes framed) in {} segments; {} offset commits; {} segments not sent (their offsets stay uncommitted); {} repeated copies; {} commits refused; {} consumer errors",
                k.records, k.bytes, k.segments, k.committed, k.unsent, k.repeats, k.commit_failures, k.consume_errors
            );
        }
        if let Some(u) = &self.udp_source {
            let _ = writeln!(
                s,
                "  UDP flows {}: {} datagrams, {} bytes read; {} dropped by the kernel (source faster than the link)",
                u.flows, u.datagrams, u.bytes, u.socket_drops
            );
        }
        let _ = writeln!(
            s,
            "  {} bytes in {}, {:.2} s CPU",
            self.bytes,
            rate_text(self.duration_s, self.goodput_mbps),
            self.cpu_s
        );
        let _ = writeln!(
            s,
            "  datagrams sent {} (data {}, repair {}, beacons {}), {} wire bytes, GSO {}",
            c.get("datagrams_sent"),
            c.get("data_symbols"),
            c.get("repair_symbols"),
            c.get("beacons"),
            c.get("wire_bytes"),
            self.gso
        );
        let _ = writeln!(
            s,
            "  local queue waits: ENOBUFS {} EAGAIN {}; kernel, whole namespace during the run (GSO batches count once): OutDatagrams {} SndbufErrors {}",
            io.get("enobufs_retries"),
            io.get("eagain_retries"),
            k.get("out_datagrams"),
            k.get("sndbuf_errors")
        );
        for l in &self.links {
            let h = &l.health;
            let _ = writeln!(
                s,
                "  link to {} (session {}): {} bytes, channels sent {}, failed {}; {}, down {} times, {} channels aborted while down and {} turned away",
                l.to,
                l.session,
                l.bytes,
                l.channels_sent,
                l.channels_failed,
                if h.up == 1 { "up" } else { "DOWN" },
                h.down_events,
                h.aborted,
                h.turned_away
            );
            if !l.last_down.is_empty() {
                let _ = writeln!(s, "    last down: {}", l.last_down);
            }
        }
        let _ = writeln!(
            s,
            "  channels sent {}, failed {}{}",
            self.channels_sent,
            self.channels_failed + self.source_errors,
            if self.channels_retried > 0 {
                format!(
                    " ({} more failed on a link that went down and were sent again over another)",
                    self.channels_retried
                )
            } else {
                String::new()
            }
        );
        for ch in &self.channels {
            let _ = writeln!(
                s,
                "    {} {} {} blake3 {}",
                ch.status, ch.name, ch.bytes, ch.digest
            );
        }
        for w in &self.warnings {
            let _ = writeln!(s, "  warning: {w}");
        }
        s
    }
}

/// The receiver's summary.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct RecvSummary {
    /// Always `recv`.
    pub side: String,
    /// [`SUMMARY_SCHEMA`] (0 when read from a version that wrote none).
    #[serde(default)]
    pub schema: u32,
    /// Sender sessions seen, hex.
    pub sessions: Vec<String>,
    /// Verified bytes.
    pub bytes: u64,
    /// First to last datagram.
    pub duration_s: f64,
    /// `bytes` over `duration_s`.
    pub goodput_mbps: f64,
    /// CPU seconds (user + system) of the whole process.
    pub cpu_s: f64,
    /// Datagrams rejected by validation (length, version, integrity, body).
    pub invalid: u64,
    /// Channels verified.
    pub channels_complete: usize,
    /// Channels failed.
    pub channels_failed: usize,
    /// Times the decoder queue was full (the net thread waited).
    pub queue_full_waits: u64,
    /// The socket's receive buffer in bytes, as the kernel granted it.
    pub rcvbuf: usize,
    /// Configuration mismatches the beacons revealed.
    pub mismatches: Vec<String>,
    /// Authentic datagrams per key id, the id as a string (keyed modes;
    /// left out without a key).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub keys: BTreeMap<String, u64>,
    /// Socket setup warnings.
    pub warnings: Vec<String>,
    /// Every channel's verdict.
    pub channels: Vec<ChannelOutcome>,
    /// The core's counters (`ReceiverStats`).
    pub core: Snapshot,
    /// The receiving socket's counters (`RecvSocketCounters`: datagrams,
    /// packets the kernel dropped).
    pub socket: Snapshot,
    /// The kernel's UDP MIB over the run (`UdpSnmp`): the change during
    /// this run of the network namespace's totals, so it includes any other
    /// UDP traffic of the namespace (the metrics page shows the totals
    /// themselves, labelled `scope="netns"`).
    pub kernel: Snapshot,
    /// With `--udp-forward`: what was sent to the destination.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub udp_forward: Option<UdpForwardCounters>,
    /// With `--tun`: packets written, gaps (lost blocks), malformed records.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tunnel: Option<TunnelSinkCounters>,
    /// With `--kafka`: records produced and acknowledged, skipped as
    /// already produced, gaps in the source offsets.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kafka: Option<KafkaSinkCounters>,
    /// With `--out`: files that found the disk full, the quarantine's
    /// evictions and levels.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub file_sink: Option<FileSinkCounters>,
    /// With `--out`: the mirror's decisions (files present, deleted,
    /// renamed; availability times).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mirror: Option<crate::mirror::MirrorCounters>,
    /// With `--tap-out`/`--pcap-out`: the tap's packets delivered and lost.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub packet_sink: Option<PacketSinkCounters>,
    /// The same per agent.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub packet_agents: Vec<PacketAgent>,
    /// `--timeout` passed without a valid datagram.
    #[serde(default)]
    pub nothing_arrived: bool,
    /// Channels decided but not in `channels` (which lists the last
    /// `--list-channels`; each was logged when decided).
    #[serde(default)]
    pub channels_unlisted: u64,
    /// The link's alarm counters over the run.
    #[serde(default)]
    pub link: Snapshot,
    /// The most recent alarms (at most [`crate::health::RECENT_ALARMS`]).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub alarms: Vec<crate::health::Alarm>,
}

impl RecvSummary {
    /// From the report.
    pub fn new(r: &RecvReport, kernel: Snapshot, cpu_s: f64) -> Self {
        let verified_bytes = r.verified_bytes;
        let socket = crate::recv::RecvSocketCounters {
            datagrams: r.socket_datagrams,
            batches: r.socket_batches,
            dropped_packets: r.socket_drops,
        };
        RecvSummary {
            side: "recv".into(),
            schema: SUMMARY_SCHEMA,
            sessions: r.sessions.clone(),
            bytes: verified_bytes,
            duration_s: r.duration.as_secs_f64(),
            goodput_mbps: mbps(verified_bytes, r.duration),
            cpu_s,
            invalid: r.stats.invalid(),
            channels_complete: usize::try_from(r.channels_verified).unwrap_or(usize::MAX),
            channels_failed: r.failed(),
            channels_unlisted: r.channels_unlisted,
            queue_full_waits: r.queue_full,
            rcvbuf: r.rcvbuf,
            mismatches: r.mismatches.clone(),
            keys: r
                .key_use
                .iter()
                .map(|(id, n)| (id.to_string(), *n))
                .collect(),
            warnings: r.warnings.iter().map(ToString::to_string).collect(),
            channels: r.channels.clone(),
            core: r.stats.snapshot(),
            socket: socket.snapshot(),
            kernel,
            udp_forward: None,
            tunnel: None,
            kafka: None,
            file_sink: None,
            mirror: None,
            packet_sink: None,
            packet_agents: Vec::new(),
            nothing_arrived: r.nothing_arrived,
            link: Snapshot::default(),
            alarms: Vec::new(),
        }
    }

    /// The last receiver summary in `output` (what `diodon recv --json`
    /// printed on stdout; log lines and other text around it are skipped).
    pub fn from_output(output: &str) -> Option<RecvSummary> {
        last_json_line(output)
    }

    /// The core's counters, typed.
    pub fn core_stats(&self) -> ReceiverStats {
        ReceiverStats::from_snapshot(&self.core)
    }

    /// The receiving socket's counters, typed.
    pub fn socket_counters(&self) -> RecvSocketCounters {
        RecvSocketCounters::from_snapshot(&self.socket)
    }

    /// The kernel's UDP MIB over the run, typed.
    pub fn kernel_udp(&self) -> UdpSnmp {
        UdpSnmp::from_snapshot(&self.kernel)
    }

    /// How the process should exit. With `once`, a run that saw no channel
    /// at all delivered nothing and fails.
    pub fn exit(&self, once: bool) -> Exit {
        if self.nothing_arrived {
            Exit::NothingArrived
        } else if self.channels_failed > 0 || (self.channels_complete == 0 && once) {
            Exit::ChannelFailed
        } else {
            Exit::Success
        }
    }

    /// The file sink's lines of [`RecvSummary::text`]: a full disk, the quarantine.
    fn file_sink_text(&self, s: &mut String) {
        if let Some(f) = &self.file_sink {
            if f.no_space > 0 {
                let _ = writeln!(
                    s,
                    "  output disk full: {} files refused or failed, {} partial bytes removed to free the space",
                    f.no_space, f.freed
                );
            }
            let _ = writeln!(
                s,
                "  quarantine {} entries, {} bytes; evicted {} entries ({} bytes); records not written {}",
                f.quarantine_entries,
                f.quarantine_bytes,
                f.quarantine_evictions,
                f.quarantine_evicted,
                f.reason_errors
            );
        }
        if let Some(m) = &self.mirror {
            s.push_str(&mirror_line(m));
        }
    }

    /// The link's lines of [`RecvSummary::text`]: nothing arrived, alarms.
    fn link_text(&self, s: &mut String) {
        if self.nothing_arrived {
            let _ = writeln!(s, "  nothing arrived: no valid datagram before --timeout");
        }
        let alarms: Vec<String> = self
            .link
            .0
            .iter()
            .filter(|(k, v)| k.starts_with("alarms_") && **v > 0)
            .map(|(k, v)| format!("{} {v}", k.trim_start_matches("alarms_").replace('_', " ")))
            .collect();
        if !alarms.is_empty() {
            let _ = writeln!(s, "  alarms: {}", alarms.join(", "));
        }
    }

    /// Why channels failed, when the counters say, and the cure: a socket
    /// that overflowed (this receiver fell behind: the cure is on this
    /// side), or blocks lost for good with no drop here (the link lost more
    /// than the repair covers: the cure is the sender's repair).
    fn failure_hint(&self, s: &mut String) {
        if self.channels_failed == 0 {
            return;
        }
        let dropped = self.socket.get("dropped_packets");
        let (missing, accepted, blocks_lost) = (
            self.core.get("missing"),
            self.core.get("accepted"),
            self.core.get("blocks_lost"),
        );
        if dropped > 0 {
            let _ = writeln!(
                s,
                "  the kernel dropped {dropped} packets on this receiver's socket (its buffer of \
                 {} bytes was full: this receiver fell behind the link), so not every loss was \
                 the link's: pace the sender lower (send --rate) or give the receiver a larger \
                 --rcvbuf",
                self.rcvbuf
            );
        } else if blocks_lost > 0 && missing > 0 {
            #[expect(clippy::cast_precision_loss, reason = "a percentage to print")]
            let loss = missing as f64 * 100.0 / (missing + accepted) as f64;
            // The next tenth of a per cent up: what the sender should expect.
            let expect = (loss * 10.0).ceil() / 10.0;
            let _ = writeln!(
                s,
                "  the link lost more than the repair covered: {missing} datagrams missing of \
                 {} ({loss:.2} %), {blocks_lost} blocks lost for good, none dropped here; give \
                 the sender --expected-loss {expect:.1} (it picks the repair for that loss and \
                 says what it chose) or a larger --repair",
                missing + accepted
            );
        }
    }

    /// The tap packets' lines of [`RecvSummary::text`].
    fn packet_text(&self, s: &mut String) {
        if let Some(p) = &self.packet_sink {
            let _ = writeln!(
                s,
                "  packets delivered {} ({} bytes), lost {} (counted from sequence gaps), late {}; segments {} (failed {}); dropped behind the outputs {}",
                p.delivered, p.delivered_bytes, p.lost, p.late, p.segments, p.segments_failed, p.output_drops
            );
            for a in &self.packet_agents {
                let _ = writeln!(
                    s,
                    "    agent {}: delivered {}, lost {}",
                    a.agent, a.delivered, a.lost
                );
            }
        }
    }

    /// Human-readable text.
    pub fn text(&self) -> String {
        let (c, io, k) = (&self.core, &self.socket, &self.kernel);
        let mut s = String::new();
        let _ = writeln!(s, "diodon recv: sessions {}", self.sessions.join(", "));
        self.link_text(&mut s);
        if let Some(u) = &self.udp_forward {
            let _ = writeln!(s, "  UDP datagrams forwarded {}", u.datagrams);
        }
        if let Some(t) = &self.tunnel {
            s.push_str(&tunnel_sink_line(t));
        }
        if let Some(k) = &self.kafka {
            s.push_str(&kafka_sink_line(k));
        }
        self.packet_text(&mut s);
        self.file_sink_text(&mut s);
        let _ = writeln!(
            s,
            "  {} verified bytes in {}, {:.2} s CPU",
            self.bytes,
            rate_text(self.duration_s, self.goodput_mbps),
            self.cpu_s
        );
        let _ = writeln!(
            s,
            "  datagrams received {} accepted {} missing {} recovered {} (blocks recovered {}, lost {})",
            io.get("datagrams"),
            c.get("accepted"),
            c.get("missing"),
            c.get("recovered_symbols"),
            c.get("blocks_recovered"),
            c.get("blocks_lost")
        );
        let _ = writeln!(
            s,
            "  rejected: bad check {} invalid {} stale session {} duplicates {} expired {}; \
             not needed: {} late (repair symbols of blocks already complete, datagrams of \
             channels already decided: normal with FEC)",
            c.get("bad_check"),
            self.invalid,
            c.get("stale_session"),
            c.get("duplicates"),
            c.get("expired"),
            c.get("late")
        );
        let _ = writeln!(
            s,
            "  socket: {} datagrams in {} batches, kernel dropped {} packets (a GRO super-packet counts once; datagrams lost: missing above), rcvbuf {} bytes, decoder-queue waits {}; kernel, whole namespace during the run (packets): InDatagrams {} RcvbufErrors {} InErrors {} InCsumErrors {}",
            io.get("datagrams"),
            io.get("batches"),
            io.get("dropped_packets"),
            self.rcvbuf,
            self.queue_full_waits,
            k.get("in_datagrams"),
            k.get("rcvbuf_errors"),
            k.get("in_errors"),
            k.get("in_csum_errors")
        );
        let _ = writeln!(
            s,
            "  channels complete {}, failed {}",
            self.channels_complete, self.channels_failed
        );
        self.failure_hint(&mut s);
        if self.channels_unlisted > 0 {
            let _ = writeln!(
                s,
                "  (the last {} are listed; {} earlier ones were logged when decided)",
                self.channels.len(),
                self.channels_unlisted
            );
        }
        for ch in &self.channels {
            match &ch.verdict {
                Verdict::Verified { blake3 } => {
                    let _ = writeln!(
                        s,
                        "    verified {} {} bytes blake3 {} -> {}",
                        ch.name.escape_debug(),
                        ch.bytes,
                        blake3,
                        ch.location
                    );
                }
                Verdict::Failed { reason } => {
                    let _ = writeln!(
                        s,
                        "    FAILED {} ({}) -> {}",
                        ch.name.escape_debug(),
                        reason,
                        ch.location
                    );
                }
            }
        }
        self.notes_text(&mut s);
        s
    }

    /// The configuration mismatches and setup warnings, one line each.
    fn notes_text(&self, s: &mut String) {
        for m in &self.mismatches {
            let _ = writeln!(s, "  configuration mismatch: {m}");
        }
        for w in &self.warnings {
            let _ = writeln!(s, "  warning: {w}");
        }
    }
}

/// The last line of `output` that parses as a `T` (JSON).
fn last_json_line<T: serde::de::DeserializeOwned>(output: &str) -> Option<T> {
    output
        .lines()
        .rev()
        .filter(|l| l.trim_start().starts_with('{'))
        .find_map(|l| serde_json::from_str(l).ok())
}

/// The mirror's line of the receiver's text summary (nothing when it
/// decided nothing: a one-shot receiver).
fn mirror_line(m: &crate::mirror::MirrorCounters) -> String {
    if *m == crate::mirror::MirrorCounters::default() {
        return String::new();
    }
    let mean = m.avail_ms_sum.checked_div(m.avail_count).unwrap_or(0);
    format!(
        "  mirror: files verified {}, failed {}, already present {}, deleted {}, renamed {}, records not applied {}; availability of {} files: mean {} ms, max {} ms, {} within 1 s; audit write errors {}\n",
        m.verified,
        m.failed,
        m.present,
        m.deleted,
        m.renamed,
        m.not_applied,
        m.avail_count,
        mean,
        m.avail_ms_max,
        m.avail_1s,
        m.audit_errors
    )
}

/// The Kafka sink's line of the receiver's text summary.
fn kafka_sink_line(k: &KafkaSinkCounters) -> String {
    format!(
        "  kafka: {} records produced, {} acknowledged by the far brokers, {} not; {} skipped as produced before; {} gaps ({} source offsets never arrived); {} source offsets held no record; {} stalls with the hold full\n",
        k.produced, k.delivered, k.failed, k.duplicates, k.gaps, k.gap_records, k.no_record, k.stalls
    )
}

/// The tunnel source's line of the sender's text summary.
fn tunnel_source_line(t: &TunnelSourceCounters) -> String {
    let malformed = t.malformed_truncated
        + t.malformed_version
        + t.malformed_header
        + t.malformed_length
        + t.malformed_offload;
    format!(
        "  tunnel: {} packets ({} bytes) from {} reads ({} super-packets); queue drops {} tail, {} head; \
         TUN ring drops (tx_dropped) {}; shaper drops {}; malformed {malformed} (truncated {}, version {}, header {}, length {}, offload {}), too large {}\n",
        t.packets,
        t.bytes,
        t.reads,
        t.super_packets,
        t.dropped_tail,
        t.dropped_head,
        t.tun_tx_dropped,
        t.shaper_dropped,
        t.malformed_truncated,
        t.malformed_version,
        t.malformed_header,
        t.malformed_length,
        t.malformed_offload,
        t.too_large
    )
}

/// The TUN sink's line of the receiver's text summary.
fn tunnel_sink_line(t: &TunnelSinkCounters) -> String {
    format!(
        "  tunnel: {} packets ({} bytes) written to the TUN; {} gaps ({} blocks lost); malformed {}; write errors {}\n",
        t.packets, t.bytes, t.gaps, t.blocks_lost, t.malformed, t.write_errors
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exit_codes_are_the_documented_ones() {
        assert_eq!(
            [
                Exit::Success,
                Exit::ChannelFailed,
                Exit::Config,
                Exit::Io,
                Exit::NothingArrived,
                Exit::Interrupted
            ]
            .map(Exit::code),
            [0, 1, 2, 3, 4, 130]
        );
    }

    #[test]
    fn a_rate_is_stated_only_for_a_run_long_enough_to_mean_it() {
        assert_eq!(
            rate_text(0.05, 7_680.0),
            "0.050 s (too short a run to state a rate)"
        );
        assert_eq!(rate_text(2.0, 812.34), "2.000 s = 812.3 Mbit/s goodput");
    }

    #[test]
    fn a_summary_reads_back_as_written() {
        let r = RecvReport {
            stats: diodon_proto::ReceiverStats {
                missing: 7,
                recovered_symbols: 5,
                ..Default::default()
            },
            socket_datagrams: 100,
            socket_batches: 4,
            socket_drops: 2,
            queue_full: 0,
            rcvbuf: 1 << 20,
            warnings: Vec::new(),
            channels: Vec::new(),
            duration: Duration::from_secs(1),
            sessions: vec!["ab".into()],
            mismatches: Vec::new(),
            nothing_arrived: false,
            key_use: Vec::new(),
            channels_verified: 0,
            channels_failed: 0,
            verified_bytes: 0,
            channels_unlisted: 0,
        };
        let s = RecvSummary::new(&r, Snapshot::default(), 0.5);
        let json = serde_json::to_string(&s).expect("serialises");
        let back: RecvSummary = serde_json::from_str(&json).expect("reads back");
        assert_eq!(back.core_stats().missing, 7);
        assert_eq!(back.socket_counters().dropped_packets, 2);
        let printed = format!("log line\n{json}\n{{not json\n");
        let found = RecvSummary::from_output(&printed).expect("found in output");
        assert_eq!(found.core_stats(), back.core_stats());
        assert!(RecvSummary::from_output("no summary\n").is_none());
        assert_eq!(back.core.get("missing"), 7);
        assert_eq!(back.core.get("recovered_symbols"), 5);
        assert_eq!(back.socket.get("dropped_packets"), 2);
        assert_eq!(back.exit(true), Exit::ChannelFailed, "nothing arrived");
        assert_eq!(back.exit(false), Exit::Success);
        assert!(back.text().contains("missing 7 recovered 5"));
        assert!(!back.text().contains("mirror:"), "a one-shot receiver");
        assert!(
            !back.text().contains("fell behind"),
            "drops without a failed channel are only counted"
        );
        let failed = RecvSummary {
            channels_failed: 1,
            ..back.clone()
        };
        assert!(
            failed.text().contains(
                "the kernel dropped 2 packets on this receiver's socket (its buffer of 1048576 bytes"
            ),
            "{}",
            failed.text()
        );
        // No drop here, blocks lost for good: the link lost more than the
        // repair covered (7 missing of 7 + 93 accepted).
        let mut lossy = RecvSummary {
            channels_failed: 1,
            ..back
        };
        lossy.socket.0.insert("dropped_packets".into(), 0);
        lossy.core.0.insert("accepted".into(), 93);
        lossy.core.0.insert("blocks_lost".into(), 2);
        let text = lossy.text();
        assert!(
            text.contains(
                "the link lost more than the repair covered: 7 datagrams missing of 100 (7.00 %), \
                 2 blocks lost for good, none dropped here; give the sender --expected-loss 7.0"
            ),
            "{text}"
        );
        assert!(!text.contains("fell behind"), "{text}");
    }

    #[test]
    fn a_mirror_receiver_says_what_it_decided() {
        let m = crate::mirror::MirrorCounters {
            verified: 3,
            present: 2,
            deleted: 1,
            avail_count: 3,
            avail_ms_sum: 900,
            avail_ms_max: 500,
            avail_1s: 3,
            ..Default::default()
        };
        let line = mirror_line(&m);
        assert!(
            line.contains("files verified 3, failed 0, already present 2, deleted 1"),
            "{line}"
        );
        assert!(
            line.contains("availability of 3 files: mean 300 ms, max 500 ms, 3 within 1 s"),
            "{line}"
        );
    }
}
