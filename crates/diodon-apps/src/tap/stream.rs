//! Across the diode: each agent's share of frames becomes a sequence of
//! datagram channels of the one-way protocol ("segments"), its packets
//! packed as records into full-size datagrams by the sender core.
//!
//! ```text
//!  worker: LocalRecords per agent [len][record: seq=?, ts, wire len][frame] …
//!     └─ append(agent) ─► AgentStream (lock): seq = next_seq++ patched in,
//!                          bytes to the segment buffer ─► SourceHandle::data (≥ 64 KiB, or
//!                          2 ms old on the next tick); a full sender queue blocks here
//!  segment "tap/<agent>/<first seq>": opened with its first record, ends after
//!  --segment-bytes or --segment-age with a mark record (seq = next), then finish()
//!  at the end: every open segment ends with a mark, and a last channel holding
//!  only a mark tells the receiver the agent's final count even if that
//!  segment failed
//! ```
//!
//! Segments keep one lost block from costing the rest of an agent's
//! stream: the core fails only the segment, the next one starts clean,
//! and the receiver counts the missing records from the sequence numbers
//! (PROTOCOL.md, "Packet channels").

use crate::send::{Closed, SourceHandle};
use diodon_filter::wire::{RecordRepr, RECORD_MARK};
use diodon_io::MonotonicClock;
use diodon_proto::{ChannelKind, ChannelMeta, Timestamp};
use std::sync::Mutex;
use std::time::Duration;

/// Bytes buffered per agent before they go to the sender's queue.
const FLUSH_BYTES: usize = 64 * 1024;
/// Records older than this go to the sender on the next tick.
const FLUSH_AGE: Duration = Duration::from_millis(2);

/// When an agent's segment ends and the next begins.
#[derive(Debug, Clone, Copy)]
pub struct SegmentPolicy {
    /// After this many record bytes.
    pub max_bytes: u64,
    /// After this long.
    pub max_age: Duration,
}

impl Default for SegmentPolicy {
    fn default() -> Self {
        SegmentPolicy {
            max_bytes: 16 << 20,
            max_age: Duration::from_secs(1),
        }
    }
}

/// Records a worker built for one agent, sequence numbers still blank.
#[derive(Debug, Default)]
pub struct LocalRecords {
    buf: Vec<u8>,
    /// Offsets of the blank sequence fields.
    seq_at: Vec<usize>,
}

impl LocalRecords {
    /// Appends a packet record (length prefix, header, frame).
    pub fn push(&mut self, timestamp_ns: u64, wire_len: u32, frame: &[u8]) {
        let len = RecordRepr::buffer_len(frame.len());
        self.buf.extend_from_slice(&(len as u16).to_be_bytes());
        self.seq_at.push(self.buf.len() + 8);
        RecordRepr {
            kind: diodon_filter::wire::RECORD_PACKET,
            seq: 0,
            timestamp_ns,
            original_len: wire_len,
        }
        .emit(frame, &mut self.buf);
    }

    /// Records held.
    pub fn len(&self) -> usize {
        self.seq_at.len()
    }

    /// Whether none are held.
    pub fn is_empty(&self) -> bool {
        self.seq_at.is_empty()
    }
}

#[derive(Debug)]
struct AgentStream {
    agent: usize,
    token: Option<u64>,
    next_seq: u64,
    segment_bytes: u64,
    opened: Timestamp,
    buf: Vec<u8>,
    oldest: Option<Timestamp>,
    segments: u64,
}

/// Every agent's stream into one sender.
#[derive(Debug)]
pub struct DiodeStreams {
    agents: Vec<Mutex<AgentStream>>,
    handle: SourceHandle,
    policy: SegmentPolicy,
    clock: MonotonicClock,
}

fn mark(seq: u64, now_ns: u64, out: &mut Vec<u8>) {
    out.extend_from_slice(&(RecordRepr::buffer_len(0) as u16).to_be_bytes());
    RecordRepr {
        kind: RECORD_MARK,
        seq,
        timestamp_ns: now_ns,
        original_len: 0,
    }
    .emit(&[], out);
}

fn meta(agent: usize, first_seq: u64) -> ChannelMeta {
    ChannelMeta {
        kind: ChannelKind::Datagrams,
        ..ChannelMeta::stream(format!("tap/{agent}/{first_seq}"))
    }
}

impl AgentStream {
    fn hand_on(&mut self, handle: &SourceHandle) -> Result<(), Closed> {
        if let (Some(t), false) = (self.token, self.buf.is_empty()) {
            let data = std::mem::replace(&mut self.buf, Vec::with_capacity(FLUSH_BYTES * 2));
            handle.data(t, data)?;
        }
        self.oldest = None;
        Ok(())
    }

    fn end_segment(&mut self, handle: &SourceHandle) -> Result<(), Closed> {
        if let Some(t) = self.token {
            mark(self.next_seq, diodon_io::unix_time_ns(), &mut self.buf);
            self.hand_on(handle)?;
            handle.finish(t)?;
            self.token = None;
        }
        Ok(())
    }
}

impl DiodeStreams {
    /// Streams for `agents` agents into `handle`.
    pub fn new(handle: SourceHandle, agents: usize, policy: SegmentPolicy) -> DiodeStreams {
        let clock = MonotonicClock::new();
        let now = clock.now();
        DiodeStreams {
            agents: (0..agents)
                .map(|agent| {
                    Mutex::new(AgentStream {
                        agent,
                        token: None,
                        next_seq: 0,
                        segment_bytes: 0,
                        opened: now,
                        buf: Vec::with_capacity(FLUSH_BYTES * 2),
                        oldest: None,
                        segments: 0,
                    })
                })
                .collect(),
            handle,
            policy,
            clock,
        }
    }

    /// Numbers `local`'s records and appends them to `agent`'s stream
    /// (emptying `local`). Blocks while the sender's queue is full.
    pub fn append(&self, agent: usize, local: &mut LocalRecords) -> Result<(), Closed> {
        if local.is_empty() {
            return Ok(());
        }
        let Some(m) = self.agents.get(agent) else {
            return Ok(());
        };
        let mut s = m.lock().map_err(|_| Closed)?;
        let now = self.clock.now();
        if s.token.is_none() {
            s.token = Some(self.handle.open(meta(s.agent, s.next_seq))?);
            s.segment_bytes = 0;
            s.opened = now;
            s.segments += 1;
        }
        for &at in &local.seq_at {
            local.buf[at..at + 8].copy_from_slice(&s.next_seq.to_be_bytes());
            s.next_seq += 1;
        }
        s.segment_bytes += local.buf.len() as u64;
        s.buf.extend_from_slice(&local.buf);
        s.oldest.get_or_insert(now);
        local.buf.clear();
        local.seq_at.clear();
        if s.buf.len() >= FLUSH_BYTES {
            s.hand_on(&self.handle)?;
        }
        if s.segment_bytes >= self.policy.max_bytes {
            s.end_segment(&self.handle)?;
        }
        Ok(())
    }

    /// Hands on records waiting longer than 2 ms and ends segments past
    /// their age. Call every few milliseconds.
    pub fn tick(&self) -> Result<(), Closed> {
        let now = self.clock.now();
        for m in &self.agents {
            let mut s = m.lock().map_err(|_| Closed)?;
            if s.oldest
                .is_some_and(|o| now.saturating_duration_since(o) >= FLUSH_AGE)
            {
                s.hand_on(&self.handle)?;
            }
            if s.token.is_some() && now.saturating_duration_since(s.opened) >= self.policy.max_age {
                s.end_segment(&self.handle)?;
            }
        }
        Ok(())
    }

    /// Ends every segment and sends each agent's final mark in a channel
    /// of its own.
    pub fn finish(&self) -> Result<(), Closed> {
        for m in &self.agents {
            let mut s = m.lock().map_err(|_| Closed)?;
            s.end_segment(&self.handle)?;
            if s.segments > 0 {
                let t = self.handle.open(meta(s.agent, s.next_seq))?;
                let mut data = Vec::new();
                mark(s.next_seq, diodon_io::unix_time_ns(), &mut data);
                self.handle.data(t, data)?;
                self.handle.finish(t)?;
            }
        }
        Ok(())
    }

    /// Records numbered per agent so far.
    pub fn sequenced(&self) -> Vec<u64> {
        self.agents
            .iter()
            .map(|m| m.lock().map_or(0, |s| s.next_seq))
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::send::{queue, SourceMsg};
    use diodon_filter::wire::PacketRecord;

    fn records(data: &[u8]) -> Vec<(u8, u64, Vec<u8>)> {
        let mut out = Vec::new();
        let mut at = 0;
        while at + 2 <= data.len() {
            let len = usize::from(u16::from_be_bytes([data[at], data[at + 1]]));
            let r = PacketRecord::new_checked(&data[at + 2..at + 2 + len]).unwrap();
            out.push((r.kind(), r.seq(), r.frame().to_vec()));
            at += 2 + len;
        }
        out
    }

    #[test]
    fn segments_number_records_and_end_with_marks() {
        let (handle, rx) = queue(1000);
        let policy = SegmentPolicy {
            max_bytes: 200,
            max_age: Duration::from_secs(60),
        };
        let streams = DiodeStreams::new(handle, 2, policy);
        for i in 0..6u8 {
            let mut l = LocalRecords::default();
            l.push(1, 60, &[i; 60]);
            streams.append(usize::from(i % 2), &mut l).unwrap();
        }
        streams.finish().unwrap();
        drop(streams);
        let mut names = Vec::new();
        let mut per_token: std::collections::BTreeMap<u64, Vec<u8>> =
            std::collections::BTreeMap::default();
        let mut tokens = std::collections::BTreeMap::new();
        while let Ok(m) = rx.try_recv() {
            match m {
                SourceMsg::Open { token, meta, .. } => {
                    assert_eq!(meta.kind, ChannelKind::Datagrams);
                    tokens.insert(token, meta.name.clone());
                    names.push(meta.name);
                }
                SourceMsg::Data { token, data } | SourceMsg::Records { token, data } => {
                    per_token.entry(token).or_default().extend(data);
                }
                SourceMsg::Block { token, block } => {
                    per_token.entry(token).or_default().extend(block.data());
                }
                SourceMsg::Finish { .. } | SourceMsg::Abort { .. } => {}
            }
        }
        // 84 record bytes each: two records fill a 200-byte segment... the
        // third ends it, then a final mark-only channel per agent.
        assert_eq!(
            names,
            ["tap/0/0", "tap/1/0", "tap/0/3", "tap/1/3"],
            "{names:?}"
        );
        let first = records(&per_token[&1]);
        assert_eq!(
            first.iter().map(|r| (r.0, r.1)).collect::<Vec<_>>(),
            [(1, 0), (1, 1), (1, 2), (2, 3)]
        );
        assert_eq!(first[1].2, vec![2u8; 60]);
        let last = records(&per_token[&3]);
        assert_eq!(
            last.iter().map(|r| (r.0, r.1)).collect::<Vec<_>>(),
            [(2, 3)]
        );
    }
}
