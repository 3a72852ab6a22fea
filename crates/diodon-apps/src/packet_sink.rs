//! The receiving side of the tap's packet channels (`diodon recv
//! --tap-out PREFIX` or `--pcap-out DIR`): each agent's segments
//! (`tap/<agent>/<first seq>`) are put back into one ordered stream of
//! frames and written to that agent's TAP interface or pcap files.
//!
//! ```text
//!  SinkEvent::Opened "tap/2/4096" ─► agent 2, segment from seq 4096
//!  SinkEvent::Data ─► records (may span events) ─► Sequencer(agent 2)
//!        seq == next ─► deliver (TAP write / pcap record), next += 1
//!        seq >  next ─► held until the gap is explained:
//!            the segment holding `next` failed ─► its missing records are lost (counted)
//!            no known segment holds `next` for GAP_WAIT ─► lost (counted)
//!        seq <  next ─► late (already counted lost), discarded
//!  mark record (seq = the segment's end) ─► where the segment ends
//!  Complete / Failed ─► the segment is decided; held records may move on
//! ```
//!
//! So every record arrives once and in order per agent (hence per flow),
//! or its loss is counted (`lost`); nothing is delivered twice or out of
//! order. Records carry the capture timestamp, which the pcap output keeps.

use crate::frames_out::{FrameOut, FrameOutError, FrameTarget};
use crate::recv::{ChannelKey, ChannelOutcome, Sink, SinkError, SinkEvent, Verdict};
use crate::sink_error::{Refusal, SinkFailure};
use diodon_filter::wire::{PacketRecord, RECORD_MARK};
use diodon_io::MonotonicClock;
use diodon_proto::{ChannelKind, ChannelMeta, SessionId, Timestamp};
use std::collections::{BTreeMap, HashMap};
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

/// How long a gap no known segment explains is waited for (longer than
/// the sender's 2Δt default, after which the core gives up on a channel).
pub const GAP_WAIT: Duration = Duration::from_secs(5);
/// Bytes of held records per agent before gaps are declared lost early.
pub const MAX_HELD_BYTES: usize = 64 << 20;
/// Agents a receiver accepts (channel names with a larger number are refused).
pub const MAX_AGENTS: usize = 4096;

diodon_counters::counters! {
    /// What the packet sink counted (a snapshot of [`PacketSinkStats`]).
    #[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
    pub struct PacketSinkCounters in Diodon "packet_sink" {
        delivered: counter Count "delivered" "Frames written to the agents' outputs.",
        delivered_bytes: counter Bytes "delivered" "Bytes of the frames written.",
        /// The transfer's drop point, counted from the sequence numbers.
        lost: counter Count "lost" "Frames that never arrived (sequence gaps of failed or missing segments).",
        late: counter Count "late" "Frames that arrived after their gap was counted lost (discarded).",
        segments: counter Count "segments" "Packet channels (segments) opened.",
        segments_failed: counter Count "segments_failed" "Segments the core failed (a lost block, a lost trailer).",
        malformed: counter Count "malformed" "Records that did not parse (their segment fails).",
        output_drops: counter Count "output_drops" "Frames the kernel dropped behind the TAP outputs (rx_dropped).",
    }
}

/// Live counters.
#[derive(Debug, Default)]
pub struct PacketSinkStats {
    /// Written.
    pub delivered: AtomicU64,
    /// Their bytes.
    pub delivered_bytes: AtomicU64,
    /// Counted lost.
    pub lost: AtomicU64,
    /// Late, discarded.
    pub late: AtomicU64,
    /// Segments opened.
    pub segments: AtomicU64,
    /// Segments failed.
    pub segments_failed: AtomicU64,
    /// Records that did not parse.
    pub malformed: AtomicU64,
    /// Kernel drops behind TAP outputs.
    pub output_drops: AtomicU64,
    /// Per agent: (delivered, lost).
    pub agents: std::sync::Mutex<BTreeMap<usize, (u64, u64)>>,
}

impl PacketSinkStats {
    /// The counters now.
    pub fn snapshot(&self) -> PacketSinkCounters {
        let l = |a: &AtomicU64| a.load(Ordering::Relaxed);
        PacketSinkCounters {
            delivered: l(&self.delivered),
            delivered_bytes: l(&self.delivered_bytes),
            lost: l(&self.lost),
            late: l(&self.late),
            segments: l(&self.segments),
            segments_failed: l(&self.segments_failed),
            malformed: l(&self.malformed),
            output_drops: l(&self.output_drops),
        }
    }
}

/// Where each agent's frames go.
#[derive(Debug, Clone)]
pub enum PacketOutput {
    /// TAP interfaces `PREFIX<agent>`.
    Tap(String),
    /// pcap files `DIR/agent-<agent>-NNNNNN.pcap`, rotated.
    Pcap {
        /// The folder.
        dir: PathBuf,
        /// Rotate after this many bytes (0: never).
        max_bytes: u64,
        /// Rotate after this long (zero: never).
        max_age: Duration,
    },
}

impl PacketOutput {
    fn target(&self, agent: usize) -> FrameTarget {
        match self {
            PacketOutput::Tap(prefix) => FrameTarget::Tap(format!("{prefix}{agent}")),
            PacketOutput::Pcap {
                dir,
                max_bytes,
                max_age,
            } => {
                crate::frames_out::pcap_target(dir, &format!("agent-{agent}"), *max_bytes, *max_age)
            }
        }
    }
}

/// The agent number and first sequence number a channel name announces.
pub fn parse_name(name: &str) -> Option<(usize, u64)> {
    let rest = name.strip_prefix("tap/")?;
    let (a, s) = rest.split_once('/')?;
    let agent: usize = a.parse().ok()?;
    (agent < MAX_AGENTS).then_some(())?;
    Some((agent, s.parse().ok()?))
}

#[derive(Debug)]
struct Segment {
    end: Option<u64>,
    decided: Option<bool>,
}

/// One record waiting for its turn.
#[derive(Debug)]
struct Held {
    ts: u64,
    wire: u32,
    frame: Vec<u8>,
}

#[derive(Debug)]
struct AgentRx {
    out: Option<FrameOut>,
    next: u64,
    held: BTreeMap<u64, Held>,
    held_bytes: usize,
    segments: BTreeMap<u64, Segment>,
    unexplained_since: Option<Timestamp>,
    delivered: u64,
    lost: u64,
}

#[derive(Debug)]
struct Open {
    agent: usize,
    first: u64,
    name: String,
    pending: Vec<u8>,
    bytes: u64,
}

/// Writes the agents' frames, in order, counting what never came.
#[derive(Debug)]
pub struct PacketSink {
    output: PacketOutput,
    session: Option<SessionId>,
    agents: HashMap<usize, AgentRx>,
    open: HashMap<ChannelKey, Open>,
    stats: Arc<PacketSinkStats>,
    clock: MonotonicClock,
}

impl PacketSink {
    /// A sink writing to `output`.
    pub fn new(output: PacketOutput, stats: Arc<PacketSinkStats>) -> PacketSink {
        PacketSink {
            output,
            session: None,
            agents: HashMap::new(),
            open: HashMap::new(),
            stats,
            clock: MonotonicClock::new(),
        }
    }

    fn agent(&mut self, a: usize) -> &mut AgentRx {
        agent_entry(&mut self.agents, a)
    }

    /// A new sender session: every agent's sequence starts again at 0.
    fn session(&mut self, s: SessionId) {
        if self.session != Some(s) {
            if self.session.is_some() {
                self.finish_all();
                for a in self.agents.values_mut() {
                    a.next = 0;
                    a.segments.clear();
                }
            }
            self.session = Some(s);
        }
    }

    /// Parses the complete records of `flow` and hands them on.
    fn records(&mut self, key: ChannelKey) -> Result<(), SinkFailure> {
        let Some(flow) = self.open.get_mut(&key) else {
            return Ok(());
        };
        let mut pending = std::mem::take(&mut flow.pending);
        let (agent, first) = (flow.agent, flow.first);
        let mut off = 0usize;
        let mut result = Ok(());
        while pending.len() - off >= 2 {
            let len = usize::from(u16::from_be_bytes([pending[off], pending[off + 1]]));
            let end = off + 2 + len;
            if end > pending.len() {
                break;
            }
            let rec = match PacketRecord::new_checked(&pending[off + 2..end]) {
                Ok(r) => r,
                Err(e) => {
                    self.stats.malformed.fetch_add(1, Ordering::Relaxed);
                    result = Err(SinkFailure::Refused(Refusal::NotTapPackets(e.to_string())));
                    off = pending.len();
                    break;
                }
            };
            off = end;
            if rec.kind() == RECORD_MARK {
                if let Some(s) = self.agent(agent).segments.get_mut(&first) {
                    s.end = Some(rec.seq());
                }
                continue;
            }
            self.arrive(
                agent,
                rec.seq(),
                rec.timestamp_ns(),
                rec.original_len(),
                rec.frame(),
            )?;
        }
        pending.drain(..off);
        if let Some(flow) = self.open.get_mut(&key) {
            flow.pending = pending;
        }
        result
    }

    fn arrive(
        &mut self,
        agent: usize,
        seq: u64,
        ts: u64,
        wire: u32,
        frame: &[u8],
    ) -> Result<(), SinkFailure> {
        let a = agent_entry(&mut self.agents, agent);
        if seq < a.next {
            self.stats.late.fetch_add(1, Ordering::Relaxed);
            return Ok(());
        }
        if seq == a.next {
            deliver(a, &self.output, agent, &self.stats, ts, wire, frame)?;
            return Ok(());
        }
        a.held_bytes += frame.len();
        a.held.insert(
            seq,
            Held {
                ts,
                wire,
                frame: frame.to_vec(),
            },
        );
        Ok(())
    }

    /// Delivers what can be delivered and counts gaps that are explained.
    fn advance(&mut self, agent: usize, force: bool) -> Result<(), SinkFailure> {
        let now = self.clock.now();
        let (output, stats) = (&self.output, Arc::clone(&self.stats));
        let Some(a) = self.agents.get_mut(&agent) else {
            return Ok(());
        };
        loop {
            if let Some(h) = a.held.remove(&a.next) {
                a.held_bytes -= h.frame.len();
                deliver(a, output, agent, &stats, h.ts, h.wire, &h.frame)?;
                continue;
            }
            let later_segment = a.segments.range(a.next + 1..).next().map(|(&s, _)| s);
            let later_held = a.held.keys().next().copied();
            let later = match (later_segment, later_held) {
                (Some(x), Some(y)) => Some(x.min(y)),
                (x, y) => x.or(y),
            };
            let covering = a
                .segments
                .range(..=a.next)
                .next_back()
                .filter(|(_, s)| s.end.is_none_or(|e| e > a.next))
                .map(|(_, s)| s.decided);
            let upto = match covering {
                // Its segment is still coming in: wait (unless memory says no).
                Some(None) if !(force || a.held_bytes > MAX_HELD_BYTES) => return Ok(()),
                // Decided (failed, or complete without its records): the rest
                // of it is lost, up to what is known to come after.
                Some(_) => match later {
                    Some(l) => l,
                    None => return Ok(()),
                },
                // No known segment holds `next`.
                None => {
                    let Some(l) = later else {
                        a.unexplained_since = None;
                        return Ok(());
                    };
                    let since = *a.unexplained_since.get_or_insert(now);
                    if !(force
                        || a.held_bytes > MAX_HELD_BYTES
                        || now.saturating_duration_since(since) >= GAP_WAIT)
                    {
                        return Ok(());
                    }
                    l
                }
            };
            let gap = upto.saturating_sub(a.next);
            if gap == 0 {
                return Ok(());
            }
            a.lost += gap;
            stats.lost.fetch_add(gap, Ordering::Relaxed);
            tracing::warn!(
                agent,
                from = a.next,
                frames = gap,
                "frames lost across the link (counted)"
            );
            a.next = upto;
            a.unexplained_since = None;
        }
    }

    fn advance_all(&mut self, force: bool) -> Result<(), SinkFailure> {
        let agents: Vec<usize> = self.agents.keys().copied().collect();
        for a in agents {
            self.advance(a, force)?;
        }
        Ok(())
    }

    /// Delivers everything held and counts every gap still open.
    fn finish_all(&mut self) {
        if let Err(e) = self.advance_all(true) {
            tracing::error!("{e}");
        }
        for a in self.agents.values_mut() {
            if let Some(o) = &mut a.out {
                if let Err(e) = o.close() {
                    tracing::error!("{e}");
                }
            }
        }
        self.publish_agents();
    }

    fn publish_agents(&self) {
        let drops: u64 = self
            .agents
            .values()
            .filter_map(|a| a.out.as_ref().map(FrameOut::kernel_drops))
            .sum();
        self.stats.output_drops.store(drops, Ordering::Relaxed);
        if let Ok(mut m) = self.stats.agents.lock() {
            for (&i, a) in &self.agents {
                m.insert(i, (a.delivered, a.lost));
            }
        }
    }

    fn decided(&mut self, key: ChannelKey, ok: bool) -> Option<Open> {
        let flow = self.open.remove(&key)?;
        if let Some(s) = self.agent(flow.agent).segments.get_mut(&flow.first) {
            s.decided = Some(ok);
        }
        Some(flow)
    }
}

fn agent_entry(agents: &mut HashMap<usize, AgentRx>, a: usize) -> &mut AgentRx {
    agents.entry(a).or_insert_with(|| AgentRx {
        out: None,
        next: 0,
        held: BTreeMap::new(),
        held_bytes: 0,
        segments: BTreeMap::new(),
        unexplained_since: None,
        delivered: 0,
        lost: 0,
    })
}

fn deliver(
    a: &mut AgentRx,
    output: &PacketOutput,
    agent: usize,
    stats: &PacketSinkStats,
    ts: u64,
    wire: u32,
    frame: &[u8],
) -> Result<(), SinkFailure> {
    if a.out.is_none() {
        a.out = Some(FrameOut::open(&output.target(agent)).map_err(|e| output_failure(&e))?);
    }
    if let Some(o) = &mut a.out {
        o.deliver(ts, wire, frame).map_err(|e| output_failure(&e))?;
    }
    a.next += 1;
    a.delivered += 1;
    stats.delivered.fetch_add(1, Ordering::Relaxed);
    stats
        .delivered_bytes
        .fetch_add(frame.len() as u64, Ordering::Relaxed);
    Ok(())
}

fn output_failure(e: &FrameOutError) -> SinkFailure {
    SinkFailure::Output(e.to_string())
}

impl Drop for PacketSink {
    fn drop(&mut self) {
        self.finish_all();
    }
}

impl Sink for PacketSink {
    fn admit(meta: &ChannelMeta) -> Result<(), Refusal> {
        if meta.kind != ChannelKind::Datagrams {
            return Err(Refusal::NotDatagrams(meta.kind));
        }
        if meta.aligned {
            return Err(Refusal::PacketsNeedTun);
        }
        parse_name(&meta.name).map(|_| ()).ok_or_else(|| {
            Refusal::NotTapPackets(format!(
                "'{}' is not tap/<agent>/<seq>",
                meta.name.escape_debug()
            ))
        })
    }

    fn handle(&mut self, event: SinkEvent) -> Result<Option<ChannelOutcome>, SinkError> {
        let fail = |key, why| SinkError { key, why };
        let outcome = match event {
            SinkEvent::Opened { key, meta } => {
                self.session(key.session);
                let Some((agent, first)) = parse_name(&meta.name) else {
                    return Ok(None);
                };
                self.stats.segments.fetch_add(1, Ordering::Relaxed);
                self.agent(agent).segments.insert(
                    first,
                    Segment {
                        end: None,
                        decided: None,
                    },
                );
                self.open.insert(
                    key,
                    Open {
                        agent,
                        first,
                        name: meta.name,
                        pending: Vec::new(),
                        bytes: 0,
                    },
                );
                None
            }
            // Tap channels are not aligned (refused in `admit`): no gaps.
            SinkEvent::Refused { .. }
            | SinkEvent::Gap { .. }
            | SinkEvent::Partial { .. }
            | SinkEvent::Assembled { .. } => None,
            SinkEvent::Data { key, data, .. } => {
                let Some(flow) = self.open.get_mut(&key) else {
                    return Ok(None);
                };
                flow.bytes += data.len() as u64;
                flow.pending.extend_from_slice(&data);
                let agent = flow.agent;
                self.records(key).map_err(|why| fail(key, why))?;
                self.advance(agent, false).map_err(|why| fail(key, why))?;
                None
            }
            SinkEvent::Complete { key, bytes, digest } => {
                let flow = self.decided(key, true);
                let (name, partial) = flow
                    .as_ref()
                    .map(|f| (f.name.clone(), f.pending.len()))
                    .unwrap_or_default();
                let location = flow
                    .as_ref()
                    .map_or_else(String::new, |f| self.output.target(f.agent).describe());
                let verdict = if partial == 0 {
                    Verdict::Verified {
                        blake3: hex::encode(digest),
                    }
                } else {
                    Verdict::Failed {
                        reason: format!("segment ends inside a record ({partial} bytes left)"),
                    }
                };
                Some(ChannelOutcome::new(key, name, bytes, &location, verdict))
            }
            SinkEvent::Failed { key, reason } => {
                self.stats.segments_failed.fetch_add(1, Ordering::Relaxed);
                let flow = self.decided(key, false);
                let (name, bytes, location) = flow.map_or_else(
                    || (String::new(), 0, String::new()),
                    |f| (f.name, f.bytes, self.output.target(f.agent).describe()),
                );
                Some(ChannelOutcome::new(
                    key,
                    name,
                    bytes,
                    &location,
                    Verdict::Failed {
                        reason: reason.to_string(),
                    },
                ))
            }
        };
        let key = outcome.as_ref().map(|o| ChannelKey {
            session: self.session.unwrap_or(SessionId(0)),
            channel: diodon_proto::ChannelId(o.channel),
        });
        if let Err(why) = self.advance_all(false) {
            if let Some(k) = key {
                return Err(fail(k, why));
            }
        }
        self.publish_agents();
        Ok(outcome)
    }
}

impl FrameTarget {
    /// A short description for reports.
    pub fn describe(&self) -> String {
        match self {
            FrameTarget::Tap(n) => format!("tap:{n}"),
            FrameTarget::Pcap { dir, prefix, .. } => format!("{}/{prefix}-*.pcap", dir.display()),
            FrameTarget::Socket(p) => format!("unix:{}", p.display()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use diodon_filter::wire::{RecordRepr, RECORD_PACKET};
    use diodon_proto::ChannelId;

    fn key(c: u32) -> ChannelKey {
        ChannelKey {
            session: SessionId(7),
            channel: ChannelId(c),
        }
    }

    fn rec(kind: u8, seq: u64, frame: &[u8]) -> Vec<u8> {
        let mut out = Vec::new();
        out.extend_from_slice(&((24 + frame.len()) as u16).to_be_bytes());
        RecordRepr {
            kind,
            seq,
            timestamp_ns: 1_000 + seq,
            original_len: frame.len() as u32,
        }
        .emit(frame, &mut out);
        out
    }

    fn open(sink: &mut PacketSink, c: u32, name: &str) {
        let meta = ChannelMeta {
            kind: ChannelKind::Datagrams,
            ..ChannelMeta::stream(name)
        };
        assert!(PacketSink::admit(&meta).is_ok());
        sink.handle(SinkEvent::Opened { key: key(c), meta })
            .unwrap();
    }

    fn data(sink: &mut PacketSink, c: u32, bytes: Vec<u8>) {
        sink.handle(SinkEvent::Data {
            key: key(c),
            offset: 0,
            data: bytes,
        })
        .unwrap();
    }

    fn frames(dir: &std::path::Path) -> Vec<u8> {
        let mut files: Vec<_> = std::fs::read_dir(dir)
            .unwrap()
            .flatten()
            .map(|e| e.path())
            .filter(|p| p.extension().is_some_and(|e| e == "pcap"))
            .collect();
        files.sort();
        files
            .iter()
            .flat_map(|f| diodon_io::pcap::read_all(f).unwrap())
            .map(|r| r.data[0])
            .collect()
    }

    #[test]
    fn segments_are_put_back_in_order_and_gaps_counted() {
        let dir = std::env::temp_dir().join(format!("diodon-psink-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let stats = Arc::new(PacketSinkStats::default());
        let mut sink = PacketSink::new(
            PacketOutput::Pcap {
                dir: dir.clone(),
                max_bytes: 0,
                max_age: Duration::ZERO,
            },
            Arc::clone(&stats),
        );
        // Segment 1 (0..3) arrives after segment 2 (3..6) has started.
        open(&mut sink, 2, "tap/0/3");
        let mut s2 = Vec::new();
        for i in 3..6u8 {
            s2.extend(rec(RECORD_PACKET, u64::from(i), &[i; 40]));
        }
        s2.extend(rec(RECORD_MARK, 6, &[]));
        data(&mut sink, 2, s2);
        open(&mut sink, 1, "tap/0/0");
        let mut s1 = Vec::new();
        for i in 0..3u8 {
            s1.extend(rec(RECORD_PACKET, u64::from(i), &[i; 40]));
        }
        s1.extend(rec(RECORD_MARK, 3, &[]));
        // Split a record across two data events.
        let tail = s1.split_off(50);
        data(&mut sink, 1, s1);
        data(&mut sink, 1, tail);
        assert_eq!(stats.delivered.load(Ordering::Relaxed), 6);
        // Segment 3 (6..) fails after one record; segment 4 starts at 10.
        open(&mut sink, 3, "tap/0/6");
        data(&mut sink, 3, rec(RECORD_PACKET, 6, &[6; 40]));
        open(&mut sink, 4, "tap/0/10");
        data(&mut sink, 4, rec(RECORD_PACKET, 10, &[10; 40]));
        assert_eq!(
            stats.delivered.load(Ordering::Relaxed),
            7,
            "10 waits for 7..10"
        );
        sink.handle(SinkEvent::Failed {
            key: key(3),
            reason: diodon_proto::FailReason::BlockLost { block: 0, count: 1 },
        })
        .unwrap();
        assert_eq!(stats.lost.load(Ordering::Relaxed), 3);
        assert_eq!(stats.delivered.load(Ordering::Relaxed), 8);
        // A record of the failed segment turning up late is not delivered.
        open(&mut sink, 5, "tap/0/99");
        drop(sink);
        assert_eq!(frames(&dir), [0, 1, 2, 3, 4, 5, 6, 10]);
        // At the end, the gap before the last known segment is lost too.
        assert_eq!(stats.lost.load(Ordering::Relaxed), 3 + 88);
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn names_and_kinds_are_checked() {
        assert_eq!(parse_name("tap/3/4096"), Some((3, 4096)));
        for bad in [
            "tap/3",
            "tap/x/1",
            "udp:1.2.3.4:5",
            "tap/99999/0",
            "tap/1/-1",
        ] {
            assert_eq!(parse_name(bad), None, "{bad}");
        }
        let meta = ChannelMeta::stream("tap/1/0");
        assert!(
            PacketSink::admit(&meta).is_err(),
            "a byte stream is not packets"
        );
    }
}
