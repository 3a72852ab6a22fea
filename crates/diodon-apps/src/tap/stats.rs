//! The tap's counters: declared once here, kept live in atomics by the
//! workers (each adds its deltas after every ring block), read as
//! snapshots by the summary and the metrics exporter.
//!
//! ```text
//!  worker (local counts) ─ after each block ─► TapStats (atomics) ─► snapshot() ─► TapCounters
//!                                               agents[i]          ─► TapAgentCounters (label agent)
//!                                               rule_hits (line)   ─► RuleHit list
//! ```
//!
//! The thesis's first drop rate comes straight out of them: the
//! pre-filter drop rate is what the capture ring dropped plus what the
//! tap could not forward (runts, frames too large for the agents'
//! segment), over everything the kernel passed to the tap.

use diodon_filter::rules::Action;
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;

diodon_counters::counters! {
    /// What the tap counted (a snapshot of [`TapStats`]).
    #[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
    pub struct TapCounters in Diodon "tap" {
        captured: counter Count "captured" "Frames read from the capture ring(s).",
        captured_bytes: counter Bytes "captured" "Bytes on the wire of the frames read from the capture ring(s).",
        /// The capture path's one unavoidable drop point.
        ring_drops: counter Count "ring_drops" "Frames the kernel dropped because a capture ring was full (PACKET_STATISTICS).",
        runts: counter Count "runts" "Frames shorter than an Ethernet header (not forwarded).",
        marked: counter Count "marked" "Frames already carrying the encapsulation EtherType (not forwarded: stacked taps cannot loop).",
        denied: counter Count "denied" "Frames denied by a rule or the default action.",
        allowed: counter Count "allowed" "Frames allowed and assigned to an agent.",
        encap_sent: counter Count "encap_sent" "Encapsulated frames handed to the agents' segment.",
        oversize: counter Count "oversize" "Encapsulated frames the agents' segment refused as larger than its MTU (not forwarded).",
        records: counter Count "records" "Packet records handed to the one-way sender (across the diode).",
        truncated: counter Count "truncated" "Frames cut to the 65,511 bytes a packet record carries.",
        reloads: counter Count "reloads" "Rule files loaded (at start and on SIGHUP).",
        reload_errors: counter Count "reload_errors" "Rule reloads refused (the rules in force stay).",
        rules: gauge Count "rules" "Rules in force.",
    }
}

diodon_counters::counters! {
    /// What the tap counted for one agent (label `agent`).
    #[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
    pub struct TapAgentCounters in Diodon "tap_agent" {
        frames: counter Count "frames" "Frames assigned to this agent.",
        bytes: counter Bytes "frames" "Bytes on the wire of the frames assigned to this agent.",
        encap_sent: counter Count "encap_sent" "Encapsulated frames sent to this agent.",
        records: counter Count "records" "Packet records of this agent handed to the one-way sender.",
    }
}

diodon_counters::counters! {
    /// Frames one rule matched (labels `line`, `action`; line 0 is the default action).
    #[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
    pub struct RuleHitCounters in Diodon "tap_rule" {
        frames: counter Count "frames" "Frames the rule matched (first match).",
    }
}

/// Frames one rule line matched.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct RuleHit {
    /// The rule file line (0: the default action).
    pub line: u32,
    /// `allow` or `deny`.
    pub action: String,
    /// Frames it decided.
    pub frames: u64,
}

/// One agent's live counters.
#[derive(Debug, Default)]
pub struct AgentStats {
    /// Frames assigned.
    pub frames: AtomicU64,
    /// Their bytes on the wire.
    pub bytes: AtomicU64,
    /// Encapsulated frames sent.
    pub encap_sent: AtomicU64,
    /// Records handed to the sender.
    pub records: AtomicU64,
}

impl AgentStats {
    /// The counters now.
    pub fn snapshot(&self) -> TapAgentCounters {
        TapAgentCounters {
            frames: self.frames.load(Ordering::Relaxed),
            bytes: self.bytes.load(Ordering::Relaxed),
            encap_sent: self.encap_sent.load(Ordering::Relaxed),
            records: self.records.load(Ordering::Relaxed),
        }
    }
}

/// The tap's live counters, shared by its threads and the exporters.
#[derive(Debug, Default)]
pub struct TapStats {
    /// Frames read from the rings.
    pub captured: AtomicU64,
    /// Their bytes on the wire.
    pub captured_bytes: AtomicU64,
    /// Ring drops per worker (the kernel's count for that worker's socket).
    pub ring_drops: Vec<AtomicU64>,
    /// Shorter than an Ethernet header.
    pub runts: AtomicU64,
    /// Already encapsulated.
    pub marked: AtomicU64,
    /// Denied.
    pub denied: AtomicU64,
    /// Allowed.
    pub allowed: AtomicU64,
    /// Encapsulated frames sent.
    pub encap_sent: AtomicU64,
    /// Refused by the agents' segment as too large.
    pub oversize: AtomicU64,
    /// Records handed to the sender.
    pub records: AtomicU64,
    /// Frames cut to fit a record.
    pub truncated: AtomicU64,
    /// Rule files loaded.
    pub reloads: AtomicU64,
    /// Reloads refused.
    pub reload_errors: AtomicU64,
    /// Rules in force.
    pub rules: AtomicU64,
    /// Per agent.
    pub agents: Vec<AgentStats>,
    /// Frames per (rule line, action); line 0 is the default action.
    pub rule_hits: Mutex<BTreeMap<(u32, ActionKey), u64>>,
}

/// An action as a map key.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum ActionKey {
    /// Allow.
    Allow,
    /// Deny.
    Deny,
}

impl From<Action> for ActionKey {
    fn from(a: Action) -> Self {
        match a {
            Action::Allow => ActionKey::Allow,
            Action::Deny => ActionKey::Deny,
        }
    }
}

impl ActionKey {
    /// `allow` or `deny`.
    pub fn as_str(self) -> &'static str {
        match self {
            ActionKey::Allow => "allow",
            ActionKey::Deny => "deny",
        }
    }
}

impl TapStats {
    /// Counters for `workers` capture sockets and `agents` agents.
    pub fn new(workers: usize, agents: usize) -> TapStats {
        TapStats {
            ring_drops: (0..workers).map(|_| AtomicU64::new(0)).collect(),
            agents: (0..agents).map(|_| AgentStats::default()).collect(),
            ..TapStats::default()
        }
    }

    /// The counters now.
    pub fn snapshot(&self) -> TapCounters {
        let l = |a: &AtomicU64| a.load(Ordering::Relaxed);
        TapCounters {
            captured: l(&self.captured),
            captured_bytes: l(&self.captured_bytes),
            ring_drops: self.ring_drops.iter().map(l).sum(),
            runts: l(&self.runts),
            marked: l(&self.marked),
            denied: l(&self.denied),
            allowed: l(&self.allowed),
            encap_sent: l(&self.encap_sent),
            oversize: l(&self.oversize),
            records: l(&self.records),
            truncated: l(&self.truncated),
            reloads: l(&self.reloads),
            reload_errors: l(&self.reload_errors),
            rules: l(&self.rules),
        }
    }

    /// Rule lines that matched at least one frame, in line order.
    pub fn rule_hits(&self) -> Vec<RuleHit> {
        self.rule_hits
            .lock()
            .map(|m| {
                m.iter()
                    .map(|(&(line, action), &frames)| RuleHit {
                        line,
                        action: action.as_str().to_owned(),
                        frames,
                    })
                    .collect()
            })
            .unwrap_or_default()
    }
}

impl TapCounters {
    /// Frames the pre-filter failed to process or forward over the frames
    /// the kernel passed to it (denied frames are decisions, not drops).
    pub fn prefilter_drop_rate(&self) -> f64 {
        let lost = self.ring_drops + self.runts + self.oversize;
        let total = self.captured + self.ring_drops;
        if total == 0 {
            0.0
        } else {
            lost as f64 / total as f64
        }
    }
}
