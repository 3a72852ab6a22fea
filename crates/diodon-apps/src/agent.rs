//! `diodon agent`: the far end of the tap's local segment. It captures on
//! its interface, strips the 14-byte encapsulation from marked frames and
//! hands every frame on — to a TAP interface (so any capture tool, flow
//! exporter or IDS reads an ordinary interface), to rotated pcap files, or
//! to a local socket. Frames without the marker pass unchanged (as in the
//! thesis's Suricata patch), or are counted and dropped with
//! `marked_only`.
//!
//! ```text
//!  agent segment ─► TPACKET_V3 ring (ring full: counted) ─► frame
//!     ├─ bytes 12..14 = marker ─► strip 14 bytes ─► decapsulated ─┐
//!     │   (unicast to another MAC: for_others, skipped)            │
//!     └─ unmarked ─► passed (or dropped, counted, marked_only) ───┴─► FrameOut (TAP | pcap | socket)
//!                                                                     TAP: kernel drops = its rx_dropped
//! ```
//!
//! The thesis's third drop rate comes out of the counters: what the
//! ring dropped plus what the output lost, over what reached the agent.
//! An interface that goes away ends the run with an error (exit 3) and the
//! counters up to then.
//!
//! **Privilege.** The ring and the output (TAP created and up, pcap folder
//! and first file, Unix socket connected) are opened first; then the
//! caller's `restrict` runs (`crate::sandbox::agent_policy`), then the
//! loop. Nothing is opened again: an interface or output that goes away
//! ends the run, so the process keeps no capability.

use crate::frames_out::{FrameOut, FrameOutError, FrameTarget};
use crate::report::Exit;
use diodon_filter::frame::insert_vlan_tag;
use diodon_filter::wire::decapsulate;
use diodon_io::counters::process_cpu_seconds;
use diodon_io::packet::{CaptureRing, RingConfig};
use diodon_io::MonotonicClock;
use std::fmt::Write as _;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

diodon_counters::counters! {
    /// What the agent counted (a snapshot of [`AgentStats`]).
    #[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
    pub struct AgentCounters in Diodon "agent" {
        captured: counter Count "captured" "Frames read from the capture ring.",
        ring_drops: counter Count "ring_drops" "Frames the kernel dropped because the capture ring was full (PACKET_STATISTICS).",
        decapsulated: counter Count "decapsulated" "Frames that carried the marker and were stripped of it.",
        for_others: counter Count "for_others" "Marked frames addressed to another agent's MAC (a flooding switch; skipped).",
        unmarked_passed: counter Count "unmarked_passed" "Frames without the marker, passed on unchanged.",
        unmarked_dropped: counter Count "unmarked_dropped" "Frames without the marker, dropped (marked-only mode).",
        delivered: counter Count "delivered" "Frames handed to the output.",
        delivered_bytes: counter Bytes "delivered" "Bytes handed to the output.",
        output_drops: counter Count "output_drops" "Frames the kernel dropped behind the TAP output (its rx_dropped).",
    }
}

/// The agent's live counters.
#[derive(Debug, Default)]
pub struct AgentStats {
    /// Frames read from the ring.
    pub captured: AtomicU64,
    /// The ring's kernel drops.
    pub ring_drops: AtomicU64,
    /// Stripped of the marker.
    pub decapsulated: AtomicU64,
    /// Marked, for another agent.
    pub for_others: AtomicU64,
    /// Unmarked, passed.
    pub unmarked_passed: AtomicU64,
    /// Unmarked, dropped.
    pub unmarked_dropped: AtomicU64,
    /// Handed to the output.
    pub delivered: AtomicU64,
    /// Their bytes.
    pub delivered_bytes: AtomicU64,
    /// Dropped by the kernel behind a TAP.
    pub output_drops: AtomicU64,
}

impl AgentStats {
    /// The counters now.
    pub fn snapshot(&self) -> AgentCounters {
        let l = |a: &AtomicU64| a.load(Ordering::Relaxed);
        AgentCounters {
            captured: l(&self.captured),
            ring_drops: l(&self.ring_drops),
            decapsulated: l(&self.decapsulated),
            for_others: l(&self.for_others),
            unmarked_passed: l(&self.unmarked_passed),
            unmarked_dropped: l(&self.unmarked_dropped),
            delivered: l(&self.delivered),
            delivered_bytes: l(&self.delivered_bytes),
            output_drops: l(&self.output_drops),
        }
    }
}

/// Everything one `diodon agent` run needs.
#[derive(Debug)]
pub struct AgentJob {
    /// The interface facing the tap.
    pub interface: String,
    /// The marker EtherType.
    pub ethertype: u16,
    /// Drop (and count) frames without the marker instead of passing them.
    pub marked_only: bool,
    /// Where frames go.
    pub target: FrameTarget,
    /// Ring bytes per block.
    pub ring_block: usize,
    /// Ring blocks.
    pub ring_blocks: usize,
    /// Set on SIGINT/SIGTERM.
    pub stop: Arc<AtomicBool>,
    /// Shared counters.
    pub stats: Arc<AgentStats>,
}

/// Why an agent could not start.
#[derive(Debug, thiserror::Error)]
pub enum AgentError {
    /// The capture interface.
    #[error("capture on {interface}: {source}")]
    Capture {
        /// The interface.
        interface: String,
        /// The OS error.
        #[source]
        source: std::io::Error,
    },
    /// The output.
    #[error(transparent)]
    Output(#[from] FrameOutError),
    /// The process could not restrict itself once set up.
    #[error("restricting the process: {0}")]
    Sandbox(String),
    /// The metrics endpoint could not start (its text: `metrics` uses
    /// this module's counters, so not its type).
    #[error("metrics: {0}")]
    Metrics(String),
}

/// What an agent run did.
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
pub struct AgentSummary {
    /// Always `agent`.
    pub side: String,
    /// The interface.
    pub interface: String,
    /// The counters.
    pub counters: AgentCounters,
    /// Frames lost inside the agent (ring drops, output drops) over the
    /// frames that reached it.
    pub agent_drop_rate: f64,
    /// pcap files completed.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub files: Vec<String>,
    /// CPU seconds of the process.
    pub cpu_s: f64,
    /// Why the run ended early, if it did.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

impl AgentSummary {
    /// Human-readable text.
    pub fn text(&self) -> String {
        let c = &self.counters;
        let mut s = String::new();
        let _ = writeln!(s, "diodon agent: {}", self.interface);
        let _ = writeln!(
            s,
            "  captured {} (ring drops {}): decapsulated {}, for other agents {}, unmarked passed {}, unmarked dropped {}",
            c.captured, c.ring_drops, c.decapsulated, c.for_others, c.unmarked_passed, c.unmarked_dropped
        );
        let _ = writeln!(
            s,
            "  delivered {} frames ({} bytes); dropped behind the output {}; agent drop rate {:.2} %",
            c.delivered,
            c.delivered_bytes,
            c.output_drops,
            self.agent_drop_rate * 100.0
        );
        for f in &self.files {
            let _ = writeln!(s, "  file {f}");
        }
        if let Some(e) = &self.error {
            let _ = writeln!(s, "  stopped by an error: {e}");
        }
        s
    }

    /// The exit status.
    pub fn exit(&self) -> Exit {
        if self.error.is_some() {
            Exit::Io
        } else {
            Exit::Success
        }
    }
}

/// Hands one block's frames on; returns why the output failed, if it did.
fn one_block(
    block: &diodon_io::packet::Block<'_>,
    job: &AgentJob,
    own: [u8; 6],
    out: &mut FrameOut,
    scratch: &mut Vec<u8>,
) -> Option<String> {
    let st = &job.stats;
    let mut failed = None;
    let (mut n, mut dec, mut pass, mut dropped, mut del, mut bytes) = (0, 0, 0, 0, 0, 0);
    let mut others = 0;
    for f in block.frames() {
        n += 1;
        let data = match f.vlan {
            Some((tpid, tci)) => {
                insert_vlan_tag(f.data, tpid, tci, scratch);
                &scratch[..]
            }
            None => f.data,
        };
        let (frame, wire) = match decapsulate(data, job.ethertype) {
            // Unicast to another MAC: a switch flooded another agent's frame.
            Some(_) if data[..6] != own && data[0] & 1 == 0 => {
                others += 1;
                continue;
            }
            Some(inner) => {
                dec += 1;
                (inner, inner.len() as u32)
            }
            None if job.marked_only => {
                dropped += 1;
                continue;
            }
            None => {
                pass += 1;
                (data, data.len() as u32)
            }
        };
        if let Err(e) = out.deliver(f.timestamp_ns, wire, frame) {
            failed = Some(e.to_string());
            break;
        }
        del += 1;
        bytes += frame.len() as u64;
    }
    st.captured.fetch_add(n, Ordering::Relaxed);
    st.decapsulated.fetch_add(dec, Ordering::Relaxed);
    st.for_others.fetch_add(others, Ordering::Relaxed);
    st.unmarked_passed.fetch_add(pass, Ordering::Relaxed);
    st.unmarked_dropped.fetch_add(dropped, Ordering::Relaxed);
    st.delivered.fetch_add(del, Ordering::Relaxed);
    st.delivered_bytes.fetch_add(bytes, Ordering::Relaxed);
    failed
}

/// Runs the agent until `stop` or an error of its interface or output;
/// `watch` is called about every 100 ms. `restrict` is called once the
/// ring and the output are open, before the first frame (the caller
/// applies its sandbox there and may start its own threads after it).
pub fn run_agent(
    job: &AgentJob,
    restrict: impl FnOnce() -> Result<(), AgentError>,
    mut watch: impl FnMut(&AgentStats),
) -> Result<AgentSummary, AgentError> {
    let mut cfg = RingConfig::new(job.interface.clone());
    cfg.block_size = job.ring_block;
    cfg.blocks = job.ring_blocks;
    let capture = |source| AgentError::Capture {
        interface: job.interface.clone(),
        source,
    };
    // Frames addressed to this host arrive anyway; promiscuous mode would
    // only add other hosts' frames.
    cfg.promiscuous = false;
    let own = diodon_io::packet::interface_mac(&job.interface).map_err(capture)?;
    let mut ring = CaptureRing::open(&cfg).map_err(capture)?;
    let mut out = FrameOut::open(&job.target)?;
    restrict()?;
    tracing::info!(interface = %job.interface, target = ?job.target, "agent running");
    let cpu0 = process_cpu_seconds();
    let clock = MonotonicClock::new();
    let mut last = clock.now();
    let st = &job.stats;
    let mut scratch = Vec::with_capacity(70_000);
    let mut quiet = 0;
    let error = loop {
        let stopping = job.stop.load(Ordering::Relaxed);
        let (got, failed) =
            match ring.next_block(Duration::from_millis(if stopping { 20 } else { 50 })) {
                Ok(Some(block)) => (true, one_block(&block, job, own, &mut out, &mut scratch)),
                Ok(None) => (false, None),
                Err(e) => break Some(capture(e).to_string()),
            };
        if failed.is_some() {
            break failed;
        }
        let now = clock.now();
        if now.saturating_duration_since(last) >= Duration::from_millis(100) {
            last = now;
            if let Ok(r) = ring.stats() {
                st.ring_drops.store(r.drops, Ordering::Relaxed);
            }
            st.output_drops.store(out.kernel_drops(), Ordering::Relaxed);
            if let Err(e) = out.flush() {
                break Some(e.to_string());
            }
            watch(st);
        }
        if stopping {
            quiet = if got { 0 } else { quiet + 1 };
            if quiet >= 2 {
                break None;
            }
        }
    };
    if let Ok(r) = ring.stats() {
        st.ring_drops.store(r.drops, Ordering::Relaxed);
    }
    st.output_drops.store(out.kernel_drops(), Ordering::Relaxed);
    let error = match (error, out.close()) {
        (Some(e), _) => Some(e),
        (None, Err(e)) => Some(e.to_string()),
        (None, Ok(())) => None,
    };
    if let Some(e) = &error {
        tracing::error!("{e}");
    }
    let counters = st.snapshot();
    let reached = counters.captured + counters.ring_drops;
    let lost = counters.ring_drops + counters.output_drops;
    Ok(AgentSummary {
        side: "agent".into(),
        interface: job.interface.clone(),
        agent_drop_rate: if reached == 0 {
            0.0
        } else {
            lost as f64 / reached as f64
        },
        counters,
        files: out
            .completed_files()
            .iter()
            .map(|p| p.display().to_string())
            .collect(),
        cpu_s: process_cpu_seconds() - cpu0,
        error,
    })
}
