//! An in-memory one-way transfer on one thread, in virtual time: the whole
//! protocol path (cut, encode, hash, seal, validate, gather, decode,
//! deliver, verify) without sockets, stepped by the simulator loop. Used by
//! `diodon-proto`'s `inmem_throughput` example and `path` benchmark;
//! optional seeded random loss exercises the decoder.
//!
//! ```text
//!   data ─1 MiB writes─▶ Sender ─max_batch datagrams per step─▶ a_to_b: [Bernoulli(loss)] ─▶ Receiver ─▶ delivered bytes
//!                         (A)    each written in place into                                   (B)      (buffers recycled)
//!                                the buffer the link carries
//! ```
//!
//! With a transmit budget of one batch per step, a batch is handled by the
//! receiver right after it was sent, while it is still in the cache, as the
//! two threads of a gateway would; the loop's observer tells a caller which
//! side runs. Each datagram is written straight into a recycled buffer that
//! the link carries to the receiver: no copy and no zeroing on the way.

use std::net::SocketAddr;

use diodon_proto::wire::ChannelMeta;
use diodon_proto::{
    ChannelId, Event, Receiver, ReceiverConfig, ReceiverStats, Sender, SenderConfig, SessionId,
    Timestamp,
};

use crate::duplex::DuplexLink;
use crate::endpoint::{self, SimEndpoint, Transmit};
use crate::link::Link;
use crate::nodes::Bernoulli;
use crate::pair::Pair;
use crate::seed::Seed;

/// The seed of the transfer's loss draws (fixed: a run is reproducible).
pub const LOSS_SEED: Seed = Seed(0x9E37_79B9_7F4A_7C15);

/// Which side the transfer is about to run, for [`in_memory_transfer_metered`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Side {
    /// Sender work follows.
    Sender,
    /// Receiver work follows.
    Receiver,
}

/// Sends `data` as one channel through a link that drops `loss_percent` %
/// of datagrams (seeded with [`LOSS_SEED`]) and returns the receiver's
/// counters and the number of bytes delivered. Delivered buffers are
/// recycled.
///
/// # Panics
/// If `config` is invalid or `loss_percent` is over 100.
pub fn in_memory_transfer(
    config: SenderConfig,
    data: &[u8],
    loss_percent: u64,
) -> (ReceiverStats, u64) {
    in_memory_transfer_metered(config, data, 1, loss_percent, &mut |_| {})
}

/// Like [`in_memory_transfer`], but sends `data` as `channels` channels one
/// after the other in one session (as a long-running gateway would), and
/// calls `meter` whenever work switches between the sender and the receiver
/// (so a caller can attribute CPU time).
///
/// # Panics
/// If `config` is invalid or `loss_percent` is over 100.
pub fn in_memory_transfer_metered(
    config: SenderConfig,
    data: &[u8],
    channels: usize,
    loss_percent: u64,
    meter: &mut dyn FnMut(Side),
) -> (ReceiverStats, u64) {
    let mut link = Link::new();
    if loss_percent > 0 {
        link = link.with(Bernoulli::new(loss_percent as f64 / 100.0, LOSS_SEED));
    }
    in_memory_transfer_over(config, data, channels, link, meter)
}

/// Like [`in_memory_transfer_metered`], over any `link` (a loss model of
/// the caller's: bursts, a Gilbert–Elliott channel, outages).
///
/// # Panics
/// If `config` is invalid.
pub fn in_memory_transfer_over(
    config: SenderConfig,
    data: &[u8],
    channels: usize,
    link: Link,
    meter: &mut dyn FnMut(Side),
) -> (ReceiverStats, u64) {
    let start = Timestamp::from_millis(1);
    let batch = config.max_batch.max(1);
    let sender = Sender::new(config, SessionId(1), start).expect("valid sender config");
    let receiver = Receiver::new(ReceiverConfig::default(), start);
    let mut source = Source::new(sender, data, channels);
    if source.channel.is_none() {
        return (receiver.stats(), 0);
    }
    let mut pair = Pair::new(
        &mut source,
        Delivery {
            receiver,
            delivered: 0,
        },
        DuplexLink::one_way(link),
    )
    .starting_at(start)
    .with_seed(LOSS_SEED)
    .with_max_datagrams(1)
    .with_transmit_budget(batch);
    let mut observer = |side| {
        meter(match side {
            endpoint::Side::A => Side::Sender,
            endpoint::Side::B => Side::Receiver,
        });
    };
    while !(pair.a.done() && pair.link.in_flight() == 0) {
        pair.step_observed(Timestamp::MAX, &mut observer);
    }
    meter(Side::Sender);
    (pair.b.receiver.stats(), pair.b.delivered)
}

/// The application in front of the sender: writes `data` in 1 MiB pieces
/// (as a file reader would), once per channel, before each batch.
struct Source<'d> {
    sender: Sender,
    data: &'d [u8],
    meta: ChannelMeta,
    channel: Option<ChannelId>,
    /// Channels still to open after the current one.
    remaining: usize,
    written: usize,
    finished: bool,
}

impl<'d> Source<'d> {
    fn new(mut sender: Sender, data: &'d [u8], channels: usize) -> Source<'d> {
        let meta = ChannelMeta::file("loopback", data.len() as u64);
        let channel = sender.open_channel(meta.clone()).ok();
        Source {
            sender,
            data,
            meta,
            channel,
            remaining: channels.saturating_sub(1),
            written: 0,
            finished: false,
        }
    }

    /// One write, or the finish of a written channel (and the next one opened).
    fn feed(&mut self, now: Timestamp) {
        let Some(ch) = self.channel else { return };
        if self.written < self.data.len() {
            let end = self.data.len().min(self.written + (1 << 20));
            let chunk = &self.data[self.written..end];
            self.written += self.sender.write(now, ch, chunk).unwrap_or(0);
        } else if !self.finished {
            self.finished = self.sender.finish(now, ch).is_ok();
            if self.finished && self.remaining > 0 {
                if let Ok(next) = self.sender.open_channel(self.meta.clone()) {
                    (self.channel, self.written, self.finished) = (Some(next), 0, false);
                    self.remaining -= 1;
                }
            }
        }
    }

    /// Every channel written, finished and sent.
    fn done(&self) -> bool {
        self.finished && self.sender.is_idle()
    }
}

impl SimEndpoint for Source<'_> {
    fn handle_datagram(&mut self, now: Timestamp, from: SocketAddr, datagram: &[u8]) {
        SimEndpoint::handle_datagram(&mut self.sender, now, from, datagram);
    }

    fn handle_timeout(&mut self, now: Timestamp) {
        SimEndpoint::handle_timeout(&mut self.sender, now);
    }

    fn poll_transmit(
        &mut self,
        now: Timestamp,
        max_datagrams: usize,
        buf: &mut Vec<u8>,
    ) -> Option<Transmit> {
        self.feed(now);
        SimEndpoint::poll_transmit(&mut self.sender, now, max_datagrams, buf)
    }

    fn poll_timeout(&self) -> Option<Timestamp> {
        SimEndpoint::poll_timeout(&self.sender)
    }
}

/// The application behind the receiver: counts delivered bytes and gives
/// the buffers back at once.
struct Delivery {
    receiver: Receiver,
    delivered: u64,
}

impl Delivery {
    fn drain(&mut self) {
        while let Some(e) = self.receiver.poll_event() {
            if let Event::ChannelData { data, .. } = e {
                self.delivered += data.len() as u64;
                self.receiver.recycle(data);
            }
        }
    }
}

impl SimEndpoint for Delivery {
    fn handle_datagram(&mut self, now: Timestamp, from: SocketAddr, datagram: &[u8]) {
        SimEndpoint::handle_datagram(&mut self.receiver, now, from, datagram);
        self.drain();
    }

    fn handle_timeout(&mut self, now: Timestamp) {
        SimEndpoint::handle_timeout(&mut self.receiver, now);
        self.drain();
    }

    fn poll_transmit(
        &mut self,
        now: Timestamp,
        max_datagrams: usize,
        buf: &mut Vec<u8>,
    ) -> Option<Transmit> {
        SimEndpoint::poll_transmit(&mut self.receiver, now, max_datagrams, buf)
    }

    fn poll_timeout(&self) -> Option<Timestamp> {
        SimEndpoint::poll_timeout(&self.receiver)
    }
}

#[cfg(test)]
mod tests {
    use diodon_proto::{RepairRatio, SymbolSize};

    use super::*;

    fn config(repair: u32) -> SenderConfig {
        SenderConfig {
            symbol_size: SymbolSize::new(1452).expect("symbol"),
            repair: RepairRatio::percent(repair).expect("repair"),
            max_batch: 16,
            ..SenderConfig::default()
        }
    }

    #[test]
    fn every_byte_arrives_with_and_without_loss() {
        let data: Vec<u8> = (0..3_000_000u32).map(|i| (i ^ (i >> 9)) as u8).collect();
        let (stats, delivered) = in_memory_transfer(config(10), &data, 0);
        assert_eq!((stats.channels_complete, delivered), (1, 3_000_000));
        assert_eq!(stats.missing, 0);
        let (stats, delivered) = in_memory_transfer(config(25), &data, 2);
        assert_eq!((stats.channels_complete, delivered), (1, 3_000_000));
        assert!(
            stats.missing > 0 && stats.recovered_symbols > 0,
            "{stats:?}"
        );
    }

    #[test]
    fn channels_follow_each_other_and_the_meter_alternates() {
        let data = vec![7u8; 500_000];
        let mut switches = Vec::new();
        let (stats, delivered) =
            in_memory_transfer_metered(config(10), &data, 3, 0, &mut |s| switches.push(s));
        assert_eq!((stats.channels_complete, delivered), (3, 1_500_000));
        // Every call is a switch (the final one closes the last interval).
        let (last, switching) = switches.split_last().expect("metered");
        assert!(switching.windows(2).all(|w| w[0] != w[1]), "{switches:?}");
        assert_eq!(*last, Side::Sender);
        assert!(switches.len() > 10);
    }
}
