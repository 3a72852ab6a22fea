//! An in-memory sender → receiver run on one thread, in virtual time: the
//! whole protocol path (cut, encode, hash, seal, validate, gather, decode,
//! deliver, verify) without sockets. Used by the benchmarks and the
//! `inmem_throughput` example; optional pseudo-random loss exercises the
//! decoder.

use crate::wire::ChannelMeta;
use crate::{
    Event, Receiver, ReceiverConfig, ReceiverStats, Sender, SenderConfig, SessionId, Timestamp,
};

/// Which side the loopback is about to run, for [`in_memory_transfer_metered`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Side {
    /// Sender work follows.
    Sender,
    /// Receiver work follows.
    Receiver,
}

/// Sends `data` as one channel through a link that drops `loss_percent` %
/// of datagrams (xorshift, fixed seed) and returns the receiver's counters
/// and the number of bytes delivered. Delivered buffers are recycled.
///
/// # Panics
/// If `config` is invalid.
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
/// If `config` is invalid.
pub fn in_memory_transfer_metered(
    config: SenderConfig,
    data: &[u8],
    channels: usize,
    loss_percent: u64,
    meter: &mut dyn FnMut(Side),
) -> (ReceiverStats, u64) {
    let mut now = Timestamp::from_millis(1);
    let mut s = Sender::new(config, SessionId(1), now).expect("valid sender config");
    let mut r = Receiver::new(ReceiverConfig::default(), now);
    let meta = ChannelMeta::file("loopback", data.len() as u64);
    let Ok(mut ch) = s.open_channel(meta.clone()) else {
        return (r.stats(), 0);
    };
    let mut remaining = channels.saturating_sub(1);
    let mut written = 0;
    let mut finished = false;
    let mut buf = Vec::with_capacity(1 << 20);
    let mut delivered = 0u64;
    let mut rng = 0x9E37_79B9_7F4A_7C15u64;
    loop {
        meter(Side::Sender);
        if written < data.len() {
            // 1 MiB at a time, as a file reader would offer it.
            let chunk = &data[written..data.len().min(written + (1 << 20))];
            written += s.write(now, ch, chunk).unwrap_or(0);
        } else if !finished {
            finished = s.finish(now, ch).is_ok();
            if finished && remaining > 0 {
                if let Ok(next) = s.open_channel(meta.clone()) {
                    (ch, written, finished) = (next, 0, false);
                    remaining -= 1;
                }
            }
        }
        buf.clear();
        if let Some(batch) = s.poll_batch(now, &mut buf) {
            meter(Side::Receiver);
            for d in buf.chunks(batch.segment_size) {
                rng ^= rng << 13;
                rng ^= rng >> 7;
                rng ^= rng << 17;
                if rng % 100 >= loss_percent {
                    r.handle_datagram(now, d);
                }
            }
        } else if finished && s.is_idle() {
            break;
        } else if let Some(t) = s.poll_timeout() {
            // Only timers (trailer copies, beacons) are left: jump to them.
            now = now.max(t);
            s.handle_timeout(now);
        }
        while let Some(e) = r.poll_event() {
            if let Event::ChannelData { data, .. } = e {
                delivered += data.len() as u64;
                r.recycle(data);
            }
        }
    }
    meter(Side::Sender);
    (r.stats(), delivered)
}
