//! Test driver: runs a sender and a receiver against each other over a link
//! in virtual time and collects what arrived.
#![allow(dead_code, reason = "each test binary uses a different part")]
#![expect(clippy::unwrap_used, reason = "test helpers fail loudly")]

use diodon_proto::wire::ChannelMeta;
use diodon_proto::{
    ChannelId, Event, FailReason, Receiver, ReceiverConfig, Sender, SenderConfig, SessionId,
    Timestamp,
};
use std::collections::{BTreeMap, VecDeque};
use std::time::Duration;

/// Anything that carries datagrams in virtual time.
pub trait TestLink {
    fn send(&mut self, now: Timestamp, datagram: Vec<u8>);
    fn next_delivery(&self) -> Option<Timestamp>;
    fn poll_deliver(&mut self, now: Timestamp) -> Option<(Timestamp, Vec<u8>)>;
}

/// A lossless, zero-delay FIFO.
#[derive(Default)]
pub struct PerfectLink(pub VecDeque<(Timestamp, Vec<u8>)>);

impl TestLink for PerfectLink {
    fn send(&mut self, now: Timestamp, datagram: Vec<u8>) {
        self.0.push_back((now, datagram));
    }
    fn next_delivery(&self) -> Option<Timestamp> {
        self.0.front().map(|x| x.0)
    }
    fn poll_deliver(&mut self, now: Timestamp) -> Option<(Timestamp, Vec<u8>)> {
        if self.0.front().is_some_and(|x| x.0 <= now) {
            self.0.pop_front()
        } else {
            None
        }
    }
}

impl TestLink for diodon_sim::Link {
    fn send(&mut self, now: Timestamp, datagram: Vec<u8>) {
        diodon_sim::Link::send(self, now, datagram);
    }
    fn next_delivery(&self) -> Option<Timestamp> {
        diodon_sim::Link::next_delivery(self)
    }
    fn poll_deliver(&mut self, now: Timestamp) -> Option<(Timestamp, Vec<u8>)> {
        diodon_sim::Link::poll_deliver(self, now)
    }
}

#[derive(Debug, Default)]
pub struct Outcome {
    /// Bytes of channels that completed, by channel.
    pub complete: BTreeMap<ChannelId, Vec<u8>>,
    pub failed: BTreeMap<ChannelId, FailReason>,
    /// Bytes received so far per channel (including failed ones).
    pub partial: BTreeMap<ChannelId, Vec<u8>>,
    pub events: Vec<Event>,
    pub end: Timestamp,
}

pub struct Transfer<'a> {
    pub sender: Sender,
    pub receiver: Receiver,
    pub channels: Vec<(ChannelId, &'a [u8], usize)>,
    pub out: Outcome,
    pub now: Timestamp,
}

impl<'a> Transfer<'a> {
    pub fn new(
        scfg: SenderConfig,
        rcfg: ReceiverConfig,
        session: u64,
        payloads: &'a [Vec<u8>],
    ) -> Self {
        let now = Timestamp::from_millis(1);
        let mut sender = Sender::new(scfg, SessionId(session), now).expect("valid config");
        let receiver = Receiver::new(rcfg, now);
        let channels = payloads
            .iter()
            .enumerate()
            .map(|(i, p)| {
                let id = sender
                    .open_channel(ChannelMeta::file(format!("f{i}"), p.len() as u64))
                    .unwrap();
                (id, p.as_slice(), 0)
            })
            .collect();
        Transfer {
            sender,
            receiver,
            channels,
            out: Outcome::default(),
            now,
        }
    }

    fn feed(&mut self) {
        for (id, data, written) in &mut self.channels {
            if *written == usize::MAX {
                continue;
            }
            if *written < data.len() {
                let n = self.sender.write(self.now, *id, &data[*written..]).unwrap();
                *written += n;
            }
            if *written == data.len() {
                self.sender.finish(self.now, *id).unwrap();
                *written = usize::MAX;
            }
        }
    }

    fn drain_events(&mut self) {
        while let Some(ev) = self.receiver.poll_event() {
            match &ev {
                Event::ChannelData {
                    channel,
                    offset,
                    data,
                } => {
                    let buf = self.out.partial.entry(*channel).or_default();
                    assert_eq!(
                        *offset as usize,
                        buf.len(),
                        "data out of order on channel {channel}"
                    );
                    buf.extend_from_slice(data);
                }
                Event::ChannelComplete { channel, bytes, .. } => {
                    let buf = self.out.partial.remove(channel).unwrap_or_default();
                    assert_eq!(buf.len() as u64, *bytes);
                    assert!(
                        self.out.complete.insert(*channel, buf).is_none(),
                        "completed twice"
                    );
                }
                Event::ChannelFailed { channel, reason } => {
                    assert!(
                        !self.out.complete.contains_key(channel),
                        "failed after complete"
                    );
                    self.out.failed.insert(*channel, reason.clone());
                }
                _ => {}
            }
            if !matches!(ev, Event::ChannelData { .. }) {
                self.out.events.push(ev);
            }
        }
    }

    fn all_decided(&self) -> bool {
        self.channels.iter().all(|(id, _, _)| {
            self.out.complete.contains_key(id) || self.out.failed.contains_key(id)
        })
    }

    /// Runs until every channel has a verdict (and the link is drained) or
    /// `limit` of virtual time passes.
    pub fn run(&mut self, link: &mut dyn TestLink, limit: Duration) {
        let deadline = self.now + limit;
        let mut buf = Vec::with_capacity(64 * 1024);
        let mut iterations = 0u64;
        loop {
            iterations += 1;
            assert!(
                iterations < 50_000_000,
                "driver loop does not make progress at {:?}",
                self.now
            );
            self.feed();
            // Send everything the sender allows now.
            loop {
                buf.clear();
                let Some(batch) = self.sender.poll_batch(self.now, &mut buf) else {
                    break;
                };
                let mut at = 0;
                for _ in 0..batch.count {
                    let len = batch.segment_size.min(batch.len - at);
                    link.send(self.now, buf[at..at + len].to_vec());
                    at += len;
                }
                self.feed();
            }
            while let Some((t, d)) = link.poll_deliver(self.now) {
                self.receiver.handle_datagram(t.max(self.now), &d);
            }
            self.drain_events();
            if self.all_decided() && link.next_delivery().is_none() {
                break;
            }
            if self.now >= deadline {
                break;
            }
            let mut next = deadline;
            for t in [
                self.sender.poll_timeout(),
                link.next_delivery(),
                self.receiver.poll_timeout(),
            ]
            .into_iter()
            .flatten()
            {
                next = next.min(t);
            }
            self.now = next.max(self.now);
            self.sender.handle_timeout(self.now);
            self.receiver.handle_timeout(self.now);
            self.drain_events();
        }
        self.out.end = self.now;
    }
}

pub fn payload(seed: u64, len: usize) -> Vec<u8> {
    // xorshift; deterministic content that differs per seed.
    let mut x = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect()
}

/// A pass-through link node placed after every impairment: it records, from
/// what actually reaches the receiver intact, which channels *should*
/// complete (every block has ≥ k distinct symbols, an open and a trailer
/// arrived). The receiver's verdicts are checked against it exactly.
pub mod oracle {
    use diodon_proto::wire::{parse_datagram, Body, Integrity};
    use diodon_proto::{ChannelId, Timestamp};
    use diodon_sim::{LinkNode, NodeStats};
    use std::cell::RefCell;
    use std::collections::{BTreeMap, BTreeSet};
    use std::rc::Rc;

    #[derive(Default, Debug)]
    pub struct Tally {
        /// (channel, block) -> (k, distinct symbol indexes)
        pub blocks: BTreeMap<(u32, u64), (u16, BTreeSet<u16>)>,
        pub opens: BTreeSet<u32>,
        /// channel -> total blocks
        pub trailers: BTreeMap<u32, u64>,
    }

    impl Tally {
        /// Whether `channel` had everything it needs to complete.
        pub fn deliverable(&self, channel: ChannelId) -> bool {
            let c = channel.0;
            let Some(&total) = self.trailers.get(&c) else {
                return false;
            };
            self.opens.contains(&c)
                && (0..total).all(|b| {
                    self.blocks
                        .get(&(c, b))
                        .is_some_and(|(k, got)| got.len() >= usize::from(*k))
                })
        }
    }

    pub struct Oracle {
        pub tally: Rc<RefCell<Tally>>,
        integrity: Integrity,
        stats: NodeStats,
    }

    impl Oracle {
        pub fn new(integrity: Integrity) -> (Self, Rc<RefCell<Tally>>) {
            let tally = Rc::new(RefCell::new(Tally::default()));
            (
                Oracle {
                    tally: tally.clone(),
                    integrity,
                    stats: NodeStats::default(),
                },
                tally,
            )
        }
    }

    impl LinkNode for Oracle {
        fn offer(
            &mut self,
            now: Timestamp,
            datagram: Vec<u8>,
            out: &mut Vec<(Timestamp, Vec<u8>)>,
        ) {
            self.stats.offered += 1;
            self.stats.passed += 1;
            if let Ok(repr) = parse_datagram(&datagram, &self.integrity) {
                let c = repr.header.channel.0;
                let mut t = self.tally.borrow_mut();
                match repr.body {
                    Body::Data(s) | Body::Repair(s) => {
                        t.blocks
                            .entry((c, s.block))
                            .or_insert_with(|| (s.k, BTreeSet::new()))
                            .1
                            .insert(s.index);
                    }
                    Body::Open(_) => {
                        t.opens.insert(c);
                    }
                    Body::Trailer(tr) => {
                        t.trailers.insert(c, tr.total_blocks);
                    }
                    Body::Beacon(_) => {}
                }
            }
            out.push((now, datagram));
        }
        fn stats(&self) -> NodeStats {
            self.stats.clone()
        }
        fn name(&self) -> &'static str {
            "oracle"
        }
    }
}
