//! One capture worker: its own ring (a member of the fanout group), the
//! rules in force, the agents, and its outputs. Everything per frame is
//! pure (`diodon-filter`); the worker only moves bytes and counts.
//!
//! ```text
//!  ring block ─► for each frame: restore a stripped VLAN tag ─► Headers::parse
//!     ├─ shorter than Ethernet ─► runts          ├─ already marked (0xF1F0) ─► marked
//!     ├─ Classifier: deny ─► denied (+ rule line) └─ allow ─► Rendezvous(FlowKey) ─► agent
//!     │     encap: [agent MAC | tap MAC | 0xF1F0 | frame] into the batch
//!     │     diode: record into the agent's LocalRecords
//!  block released ─► RawSender::send_all(batch) ─► DiodeStreams::append(agent) ─► counters
//! ```
//!
//! The block goes back to the kernel as soon as its frames are copied
//! out; sending happens after, so a slow output holds the worker, never
//! a ring block it has already read. A worker that cannot keep up leaves
//! the ring to fill, and the kernel counts what it drops (`ring_drops`).

use super::error::TapError;
use super::rulebook::{Compiled, RuleBook};
use super::stats::{ActionKey, TapStats};
use super::stream::{DiodeStreams, LocalRecords};
use diodon_filter::frame::insert_vlan_tag;
use diodon_filter::rules::Action;
use diodon_filter::wire::{encapsulate, MAX_RECORD_FRAME};
use diodon_filter::{FlowKey, FlowMode, Headers, Rendezvous};
use diodon_io::packet::{CaptureRing, Frame, RawSender};
use diodon_io::MonotonicClock;
use diodon_proto::Timestamp;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

/// How often a worker reads its ring's kernel counters.
const STATS_EVERY: Duration = Duration::from_millis(100);

/// The local-segment output of one worker.
pub(crate) struct EncapOut {
    pub sender: RawSender,
    pub src: [u8; 6],
    pub macs: Vec<[u8; 6]>,
    pub ethertype: u16,
    arena: Vec<u8>,
    frames: Vec<(usize, usize, usize)>,
}

impl EncapOut {
    pub(crate) fn new(sender: RawSender, src: [u8; 6], macs: Vec<[u8; 6]>, ethertype: u16) -> Self {
        EncapOut {
            sender,
            src,
            macs,
            ethertype,
            arena: Vec::with_capacity(1 << 20),
            frames: Vec::with_capacity(4096),
        }
    }
}

#[derive(Debug, Default, Clone, Copy)]
struct Local {
    captured: u64,
    captured_bytes: u64,
    runts: u64,
    marked: u64,
    denied: u64,
    allowed: u64,
    encap_sent: u64,
    oversize: u64,
    records: u64,
    truncated: u64,
}

#[derive(Debug, Default, Clone, Copy)]
struct LocalAgent {
    frames: u64,
    bytes: u64,
    encap_sent: u64,
    records: u64,
}

pub(crate) struct Worker {
    pub index: usize,
    pub ring: CaptureRing,
    pub book: Arc<RuleBook>,
    pub rendezvous: Rendezvous,
    pub mode: FlowMode,
    pub marker: u16,
    pub encap: Option<EncapOut>,
    pub diode: Option<Arc<DiodeStreams>>,
    pub stats: Arc<TapStats>,
    /// Count frames and do nothing else (the capture path's ceiling).
    pub capture_only: bool,
}

struct State {
    rules: Arc<Compiled>,
    local: Local,
    agents: Vec<LocalAgent>,
    hits: Vec<u64>,
    default_hits: u64,
    records: Vec<LocalRecords>,
    scratch: Vec<u8>,
}

impl Worker {
    /// Runs until `stop`, then drains what the ring still holds.
    pub(crate) fn run(mut self, stop: &AtomicBool) -> Result<(), TapError> {
        let n = self.rendezvous.len();
        let rules = self.book.current();
        let mut st = State {
            hits: vec![0; rules.classifier.len()],
            rules,
            local: Local::default(),
            agents: vec![LocalAgent::default(); n],
            default_hits: 0,
            records: (0..n).map(|_| LocalRecords::default()).collect(),
            scratch: Vec::with_capacity(70_000),
        };
        let clock = MonotonicClock::new();
        let mut stats_at = Timestamp::ZERO;
        let mut quiet = 0;
        loop {
            let stopping = stop.load(Ordering::Relaxed);
            let got = self.block(
                &mut st,
                Duration::from_millis(if stopping { 20 } else { 50 }),
            );
            let got = match got {
                Ok(g) => g,
                Err(e) => {
                    self.publish(&mut st);
                    return Err(e);
                }
            };
            self.emit(&mut st)?;
            let now = clock.now();
            if now.saturating_duration_since(stats_at) >= STATS_EVERY {
                stats_at = now;
                self.ring_stats();
            }
            self.publish(&mut st);
            if stopping {
                // Drain: a partly filled block is handed over after the
                // block timeout; two empty polls in a row mean it is empty.
                quiet = if got { 0 } else { quiet + 1 };
                if quiet >= 2 {
                    break;
                }
            }
        }
        self.ring_stats();
        Ok(())
    }

    fn ring_stats(&mut self) {
        if let Ok(s) = self.ring.stats() {
            if let Some(slot) = self.stats.ring_drops.get(self.index) {
                slot.store(s.drops, Ordering::Relaxed);
            }
        }
    }

    /// Reads one block; `Ok(false)` when none came.
    fn block(&mut self, st: &mut State, timeout: Duration) -> Result<bool, TapError> {
        let generation = self.book.generation();
        if generation != st.rules.generation {
            self.flush_hits(st);
            st.rules = self.book.current();
            st.hits = vec![0; st.rules.classifier.len()];
        }
        let iface = self.ring.interface().to_owned();
        let block = self
            .ring
            .next_block(timeout)
            .map_err(|source| TapError::Capture {
                interface: iface,
                source,
            })?;
        let Some(block) = block else {
            return Ok(false);
        };
        if self.capture_only {
            for f in block.frames() {
                st.local.captured += 1;
                st.local.captured_bytes += u64::from(f.wire_len);
            }
            return Ok(true);
        }
        let mut scratch = std::mem::take(&mut st.scratch);
        for f in block.frames() {
            Self::frame(
                &f,
                st,
                &mut scratch,
                &self.rendezvous,
                self.mode,
                self.marker,
                self.encap.as_mut(),
                self.diode.is_some(),
            );
        }
        st.scratch = scratch;
        Ok(true)
    }

    #[expect(
        clippy::too_many_arguments,
        reason = "split borrows of the worker's parts"
    )]
    fn frame(
        f: &Frame<'_>,
        st: &mut State,
        scratch: &mut Vec<u8>,
        rendezvous: &Rendezvous,
        mode: FlowMode,
        marker: u16,
        encap: Option<&mut EncapOut>,
        diode: bool,
    ) {
        let (data, wire_len) = match f.vlan {
            Some((tpid, tci)) => {
                insert_vlan_tag(f.data, tpid, tci, scratch);
                (&scratch[..], f.wire_len + 4)
            }
            None => (f.data, f.wire_len),
        };
        st.local.captured += 1;
        st.local.captured_bytes += u64::from(wire_len);
        let Some(h) = Headers::parse(data) else {
            st.local.runts += 1;
            return;
        };
        if data[12..14] == marker.to_be_bytes() {
            st.local.marked += 1;
            return;
        }
        let v = st.rules.classifier.classify(&h);
        match v.rule {
            Some(r) => {
                if let Some(x) = st.hits.get_mut(r as usize) {
                    *x += 1;
                }
            }
            None => st.default_hits += 1,
        }
        if v.action == Action::Deny {
            st.local.denied += 1;
            return;
        }
        let agent = rendezvous.pick(FlowKey::of(&h, mode).hash());
        st.local.allowed += 1;
        if let Some(a) = st.agents.get_mut(agent) {
            a.frames += 1;
            a.bytes += u64::from(wire_len);
        }
        if let Some(e) = encap {
            if let Some(mac) = e.macs.get(agent) {
                let start = e.arena.len();
                encapsulate(*mac, e.src, e.ethertype, data, &mut e.arena);
                e.frames.push((start, e.arena.len(), agent));
            }
        }
        if diode {
            let cut = data.len().min(MAX_RECORD_FRAME);
            if cut < data.len() {
                st.local.truncated += 1;
            }
            if let Some(r) = st.records.get_mut(agent) {
                r.push(f.timestamp_ns, wire_len, &data[..cut]);
            }
        }
    }

    /// Sends the batch and hands the records on.
    fn emit(&mut self, st: &mut State) -> Result<(), TapError> {
        if let Some(e) = &mut self.encap {
            if !e.frames.is_empty() {
                let refs: Vec<&[u8]> = e.frames.iter().map(|&(a, b, _)| &e.arena[a..b]).collect();
                let refused = e.sender.send_all(&refs).map_err(|source| TapError::Send {
                    interface: e.sender.interface().to_owned(),
                    source,
                })?;
                let mut r = refused.iter().peekable();
                for (i, &(_, _, agent)) in e.frames.iter().enumerate() {
                    if r.peek() == Some(&&i) {
                        r.next();
                        st.local.oversize += 1;
                        continue;
                    }
                    st.local.encap_sent += 1;
                    if let Some(a) = st.agents.get_mut(agent) {
                        a.encap_sent += 1;
                    }
                }
                e.frames.clear();
                e.arena.clear();
            }
        }
        if let Some(d) = &self.diode {
            for (agent, r) in st.records.iter_mut().enumerate() {
                let n = r.len() as u64;
                if n > 0 {
                    d.append(agent, r).map_err(|_| TapError::SenderStopped)?;
                    st.local.records += n;
                    if let Some(a) = st.agents.get_mut(agent) {
                        a.records += n;
                    }
                }
            }
        }
        Ok(())
    }

    fn flush_hits(&self, st: &mut State) {
        if let Ok(mut m) = self.stats.rule_hits.lock() {
            for (i, h) in st.hits.iter_mut().enumerate() {
                if *h > 0 {
                    let r = i as u32;
                    let action = st.rules.classifier.action(r).unwrap_or(Action::Allow);
                    *m.entry((st.rules.classifier.line(r), ActionKey::from(action)))
                        .or_default() += *h;
                    *h = 0;
                }
            }
            if st.default_hits > 0 {
                let action = ActionKey::from(st.rules.classifier.default_action());
                *m.entry((0, action)).or_default() += st.default_hits;
                st.default_hits = 0;
            }
        }
    }

    /// Adds the local counts to the shared counters.
    fn publish(&self, st: &mut State) {
        let s = &self.stats;
        let l = std::mem::take(&mut st.local);
        let add = |a: &std::sync::atomic::AtomicU64, v: u64| {
            if v > 0 {
                a.fetch_add(v, Ordering::Relaxed);
            }
        };
        add(&s.captured, l.captured);
        add(&s.captured_bytes, l.captured_bytes);
        add(&s.runts, l.runts);
        add(&s.marked, l.marked);
        add(&s.denied, l.denied);
        add(&s.allowed, l.allowed);
        add(&s.encap_sent, l.encap_sent);
        add(&s.oversize, l.oversize);
        add(&s.records, l.records);
        add(&s.truncated, l.truncated);
        for (a, shared) in st.agents.iter_mut().zip(&s.agents) {
            let a = std::mem::take(a);
            add(&shared.frames, a.frames);
            add(&shared.bytes, a.bytes);
            add(&shared.encap_sent, a.encap_sent);
            add(&shared.records, a.records);
        }
        self.flush_hits(st);
    }
}
