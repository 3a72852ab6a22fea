//! Test driver: runs a sender and a receiver against each other over a
//! `diodon_sim::Link` in virtual time (the simulator loop, `diodon_sim::Pair`)
//! and collects what arrived.
//!
//! ```text
//!   payloads ─▶ Feeder(Sender) ─▶ Pair: a_to_b = the test's Link ─▶ Receiver ─▶ drain_events ─▶ Outcome
//!               (writes between batches)                               (checks order, collects verdicts)
//! ```
#![allow(dead_code, reason = "each test binary uses a different part")]
#![expect(clippy::unwrap_used, reason = "test helpers fail loudly")]

use diodon_proto::wire::ChannelMeta;
use diodon_proto::{
    ChannelId, Event, FailReason, Receiver, ReceiverConfig, Sender, SenderConfig, SessionId,
    Timestamp,
};
use diodon_sim::{DuplexLink, Link, Pair, SimEndpoint, Transmit};
use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::time::Duration;

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

/// A channel to send: its id, its bytes, and how many were written
/// (`usize::MAX` once finished).
pub type Channel<'a> = (ChannelId, &'a [u8], usize);

pub struct Transfer<'a> {
    pub sender: Sender,
    pub receiver: Receiver,
    pub channels: Vec<Channel<'a>>,
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

    /// Runs until every channel has a verdict (and the link is drained) or
    /// `limit` of virtual time passes. `link` carries the sender's
    /// datagrams (a `Link::new()` is a perfect one); it is handed back with
    /// its counters afterwards.
    pub fn run(&mut self, link: &mut Link, limit: Duration) {
        let deadline = self.now + limit;
        let feeder = Feeder {
            sender: &mut self.sender,
            channels: &mut self.channels,
        };
        let mut pair = Pair::new(
            feeder,
            &mut self.receiver,
            DuplexLink::one_way(std::mem::take(link)),
        )
        .starting_at(self.now);
        loop {
            pair.step_until(deadline);
            drain_events(pair.b, &mut self.out);
            if all_decided(pair.a.channels, &self.out) && pair.link.in_flight() == 0 {
                break;
            }
            if pair.now() >= deadline {
                break;
            }
        }
        self.now = pair.now();
        *link = std::mem::take(&mut pair.link.a_to_b);
        self.out.end = self.now;
    }
}

/// The application in front of the sender: writes what the sender takes
/// and finishes each channel, before every batch it is asked for.
struct Feeder<'s, 'a> {
    sender: &'s mut Sender,
    channels: &'s mut Vec<Channel<'a>>,
}

impl Feeder<'_, '_> {
    fn feed(&mut self, now: Timestamp) {
        for (id, data, written) in self.channels.iter_mut() {
            if *written == usize::MAX {
                continue;
            }
            if *written < data.len() {
                let n = self.sender.write(now, *id, &data[*written..]).unwrap();
                *written += n;
            }
            if *written == data.len() {
                self.sender.finish(now, *id).unwrap();
                *written = usize::MAX;
            }
        }
    }
}

impl SimEndpoint for Feeder<'_, '_> {
    fn handle_datagram(&mut self, now: Timestamp, from: SocketAddr, datagram: &[u8]) {
        SimEndpoint::handle_datagram(self.sender, now, from, datagram);
    }

    fn handle_timeout(&mut self, now: Timestamp) {
        SimEndpoint::handle_timeout(self.sender, now);
    }

    fn poll_transmit(
        &mut self,
        now: Timestamp,
        max_datagrams: usize,
        buf: &mut Vec<u8>,
    ) -> Option<Transmit> {
        self.feed(now);
        SimEndpoint::poll_transmit(self.sender, now, max_datagrams, buf)
    }

    fn poll_timeout(&self) -> Option<Timestamp> {
        SimEndpoint::poll_timeout(self.sender)
    }
}

/// Takes the receiver's events; every delivered buffer goes back to the
/// receiver scribbled over, so later blocks are built in dirty recycled
/// memory (the receiver does not zero it: every byte it delivers must have
/// been written by a symbol or by decoding).
fn drain_events(receiver: &mut Receiver, out: &mut Outcome) {
    while let Some(ev) = receiver.poll_event() {
        if let Event::ChannelData {
            channel,
            offset,
            mut data,
        } = ev
        {
            let buf = out.partial.entry(channel).or_default();
            assert_eq!(
                offset as usize,
                buf.len(),
                "data out of order on channel {channel}"
            );
            buf.extend_from_slice(&data);
            data.fill(0xA5);
            receiver.recycle(data);
            continue;
        }
        match &ev {
            Event::ChannelComplete { channel, bytes, .. } => {
                let buf = out.partial.remove(channel).unwrap_or_default();
                assert_eq!(buf.len() as u64, *bytes);
                assert!(
                    out.complete.insert(*channel, buf).is_none(),
                    "completed twice"
                );
            }
            Event::ChannelFailed { channel, reason } => {
                assert!(!out.complete.contains_key(channel), "failed after complete");
                out.failed.insert(*channel, reason.clone());
            }
            _ => {}
        }
        out.events.push(ev);
    }
}

fn all_decided(channels: &[Channel<'_>], out: &Outcome) -> bool {
    channels
        .iter()
        .all(|(id, _, _)| out.complete.contains_key(id) || out.failed.contains_key(id))
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
