//! The one-way IP tunnel: packets the kernel routes into a TUN on the
//! sending host leave a TUN on the receiving host, carried as one packet
//! channel (`Datagrams`, records aligned to blocks) per sender session.
//!
//! ```text
//!  sending host
//!  kernel ─► TUN queue 0 ─► reader 0 ─┐ (read, vnet header, segment,   ┌─────────────────┐
//!  kernel ─► TUN queue 1 ─► reader 1 ─┼─ validate; never blocks) ─────►│ PacketQueue      │─► packer ─► SourceHandle::records
//!             ring full: tx_dropped   │                                │ bounded in bytes │   (frames records;  ─► core thread:
//!             (counted, the only      ┘                                │ full: drop-tail  │    blocks when the     write_record,
//!              loss before the queue)                                  │ or drop-head,    │    core is full)       FEC, pacing
//!                                                                      │ counted          │
//!                                                                      └─────────────────┘
//!  receiving host
//!  decoder ─► ChannelData (one block) ─► TunSink: BlockRecords ─► validate ─► write to TUN ─► kernel routes
//!             ChannelGap (lost block) ─► counted; the next block goes on
//! ```
//!
//! **Where a packet can be lost, and how it is counted.** (1) The TUN's own
//! ring, when the readers are starved of CPU: the kernel counts it in the
//! interface's `tx_dropped`, which the source reads as `tun_tx_dropped`
//! (stock kernels drop there; [`diodon_io::tun::probe_backpressure`] says so
//! at start-up). (1b) With `--shape`, the token-bucket qdisc installed in
//! front of the TUN ([`shaper_for`], [`diodon_io::qdisc`]): bursts wait
//! there and a local producer's socket blocks, so the ring stops
//! overflowing; what it drops past its limit (traffic that cannot be
//! slowed) the source reads as `shaper_dropped`. (2) Diodon's bounded
//! [`PacketQueue`], when the offered load
//! exceeds the link rate: the one place the tunnel drops by policy
//! ([`DropPolicy`]), counted per reason. (3) The link, beyond what FEC
//! repairs: the receiver counts each lost block as a gap. (4) Malformed
//! packets (truncated or inconsistent headers) are counted per reason and
//! never carried. Nothing else in the pipeline drops: the readers never
//! block, everything after the queue blocks its producer.
//!
//! **Privilege.** The sending side opens in two halves: [`open_tunnel`]
//! (the backpressure probe, the TUN's queues, txqueuelen, MTU, link up)
//! needs `CAP_NET_ADMIN` and starts no thread; [`serve_opened_tunnel`]
//! only reads and polls the open queues and reads `tx_dropped` from the
//! process's own `/proc`, so the process restricts itself in between
//! (`crate::sandbox::send_policy` with `SendSources::Tun`).
//!
//! **Latency.** The queue is sized in time at the link rate (default 30 ms);
//! the core's buffer holds two interleave groups; a partial block waits at
//! most the flush delay. Routing is the operator's: the receiving TUN
//! writes packets unchanged (no address rewrite), so the far side routes on
//! the original destination (README: routing and multicast set-up).

use crate::recv::{ChannelKey, ChannelOutcome, Sink, SinkError, SinkEvent, Verdict};
use crate::send::SourceHandle;
use crate::sink_error::Refusal;
use diodon_io::qdisc::{self, QdiscWatch, Shaper};
use diodon_io::tun::{self, Backpressure, Tun, TunConfig};
use diodon_io::MonotonicClock;
use diodon_packet::{inspect, segment, GsoError, PacketError, VnetHdr, VNET_HDR_LEN};
use diodon_proto::records::{push_record, BlockRecords};
use diodon_proto::{ChannelKind, ChannelMeta, Rate, SenderConfig};
use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::thread;
use std::time::Duration;

/// Record bytes the packer hands to the core at once (small: the core's
/// input queue adds latency in proportion).
pub const PACK_BYTES: usize = 16 * 1024;

/// How often the source reads the TUN's `tx_dropped`.
const DROP_POLL: Duration = Duration::from_millis(100);

diodon_counters::counters! {
    /// What the tunnel's sending side counted (a snapshot of [`TunnelSourceStats`]).
    #[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
    pub struct TunnelSourceCounters in Diodon "tunnel_source" {
        reads: counter Count "reads" "Reads from the TUN (one packet or one GSO super-packet each).",
        super_packets: counter Count "super_packets" "Reads that were GSO super-packets, segmented in user space.",
        packets: counter Count "packets" "Valid IP packets taken from the TUN (after segmentation).",
        bytes: counter Bytes "packet" "Bytes of those packets.",
        queued: counter Count "queued" "Packets handed to the core (framed as records).",
        /// The tunnel's one drop point by policy: Diodon's bounded queue.
        dropped_tail: counter Count "dropped_tail" "Packets dropped on arrival because the queue was full (drop-tail; offered load above the link rate).",
        dropped_head: counter Count "dropped_head" "Oldest queued packets dropped to make room (drop-head; offered load above the link rate).",
        /// The kernel's count for the TUN ring (readers starved of CPU).
        tun_tx_dropped: counter Count "tun_tx_dropped" "Packets the kernel dropped because the TUN ring was full (interface tx_dropped since start).",
        /// The shaper in front of the TUN (`--shape`), when there is one.
        shaper_dropped: counter Count "shaper_dropped" "Packets the shaper in front of the TUN dropped because its limit was full (traffic that cannot be slowed, e.g. forwarded).",
        shaper_backlog: gauge Bytes "shaper_backlog" "Bytes waiting in the shaper in front of the TUN now.",
        malformed_truncated: counter Count "malformed_truncated" "Reads shorter than an IP (or virtio-net) header, dropped.",
        malformed_version: counter Count "malformed_version" "Packets of an IP version other than 4 and 6, dropped.",
        malformed_header: counter Count "malformed_header" "IPv4 packets with a bad header length, dropped.",
        malformed_length: counter Count "malformed_length" "Packets whose length field disagrees with their size, dropped.",
        malformed_offload: counter Count "malformed_offload" "Super-packets with unusable offload offsets or kinds, dropped.",
        too_large: counter Count "too_large" "Packets larger than an FEC block can carry, dropped.",
        queue_bytes: gauge Bytes "queue" "Bytes in the queue now.",
    }
}

diodon_counters::counters! {
    /// What the tunnel's receiving side counted (a snapshot of [`TunnelSinkStats`]).
    #[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
    pub struct TunnelSinkCounters in Diodon "tunnel_sink" {
        packets: counter Count "packets" "Packets written to the TUN.",
        bytes: counter Bytes "packet" "Bytes of those packets.",
        gaps: counter Count "gaps" "Runs of lost blocks stepped over.",
        blocks_lost: counter Count "blocks_lost" "FEC blocks lost (their packets with them).",
        malformed: counter Count "malformed" "Records that are not an IP packet or run past their block, dropped.",
        write_errors: counter Count "write_errors" "Packets the TUN refused on write.",
    }
}

/// Which packet a full queue drops.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum DropPolicy {
    /// The arriving packet (keeps the oldest; a burst loses its tail).
    #[default]
    Tail,
    /// The oldest queued packets (keeps the freshest: video, telemetry).
    Head,
}

impl std::str::FromStr for DropPolicy {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "tail" | "drop-tail" => Ok(DropPolicy::Tail),
            "head" | "drop-head" => Ok(DropPolicy::Head),
            _ => Err(format!("drop policy {s:?}: tail or head")),
        }
    }
}

/// Live counters of the tunnel source; [`TunnelSourceStats::snapshot`]
/// reads them as declared counters.
#[derive(Debug, Default)]
pub struct TunnelSourceStats {
    /// Reads.
    pub reads: AtomicU64,
    /// GSO super-packets segmented.
    pub super_packets: AtomicU64,
    /// Valid packets.
    pub packets: AtomicU64,
    /// Their bytes.
    pub bytes: AtomicU64,
    /// Packets handed to the core.
    pub queued: AtomicU64,
    /// Drop-tail drops.
    pub dropped_tail: AtomicU64,
    /// Drop-head drops.
    pub dropped_head: AtomicU64,
    /// The TUN's `tx_dropped` since start.
    pub tun_tx_dropped: AtomicU64,
    /// The shaper's drops since start.
    pub shaper_dropped: AtomicU64,
    /// Bytes in the shaper now.
    pub shaper_backlog: AtomicU64,
    /// Malformed: truncated.
    pub malformed_truncated: AtomicU64,
    /// Malformed: version.
    pub malformed_version: AtomicU64,
    /// Malformed: IPv4 header length.
    pub malformed_header: AtomicU64,
    /// Malformed: length field.
    pub malformed_length: AtomicU64,
    /// Malformed: offload offsets or kind.
    pub malformed_offload: AtomicU64,
    /// Larger than a block.
    pub too_large: AtomicU64,
    /// Bytes queued now.
    pub queue_bytes: AtomicU64,
}

impl TunnelSourceStats {
    /// The counters now.
    pub fn snapshot(&self) -> TunnelSourceCounters {
        let g = |a: &AtomicU64| a.load(Ordering::Relaxed);
        TunnelSourceCounters {
            reads: g(&self.reads),
            super_packets: g(&self.super_packets),
            packets: g(&self.packets),
            bytes: g(&self.bytes),
            queued: g(&self.queued),
            dropped_tail: g(&self.dropped_tail),
            dropped_head: g(&self.dropped_head),
            tun_tx_dropped: g(&self.tun_tx_dropped),
            shaper_dropped: g(&self.shaper_dropped),
            shaper_backlog: g(&self.shaper_backlog),
            malformed_truncated: g(&self.malformed_truncated),
            malformed_version: g(&self.malformed_version),
            malformed_header: g(&self.malformed_header),
            malformed_length: g(&self.malformed_length),
            malformed_offload: g(&self.malformed_offload),
            too_large: g(&self.too_large),
            queue_bytes: g(&self.queue_bytes),
        }
    }

    fn malformed(&self, e: &GsoError) {
        let c = match e {
            GsoError::Ip(PacketError::Truncated(_)) => &self.malformed_truncated,
            GsoError::Ip(PacketError::Version(_)) => &self.malformed_version,
            GsoError::Ip(PacketError::HeaderLength(_)) => &self.malformed_header,
            GsoError::Ip(PacketError::Length { .. }) => &self.malformed_length,
            GsoError::Unsupported(_) | GsoError::Offsets | GsoError::ZeroSegment => {
                &self.malformed_offload
            }
        };
        c.fetch_add(1, Ordering::Relaxed);
    }
}

/// Diodon's bounded packet queue between the TUN readers and the packer:
/// bounded in bytes; when full, the [`DropPolicy`] decides and each drop
/// is counted. The readers never block on it.
#[derive(Debug)]
pub struct PacketQueue {
    inner: Mutex<QueueState>,
    ready: Condvar,
    capacity: usize,
    policy: DropPolicy,
}

#[derive(Debug, Default)]
struct QueueState {
    packets: VecDeque<Vec<u8>>,
    bytes: usize,
    closed: bool,
}

impl PacketQueue {
    /// A queue of at most `capacity` packet bytes.
    pub fn new(capacity: usize, policy: DropPolicy) -> Self {
        PacketQueue {
            inner: Mutex::new(QueueState::default()),
            ready: Condvar::new(),
            capacity: capacity.max(1),
            policy,
        }
    }

    /// Queues a packet, or drops by policy (counted in `stats`).
    pub fn push(&self, packet: Vec<u8>, stats: &TunnelSourceStats) {
        let mut one = vec![packet];
        self.push_all(&mut one, stats);
    }

    /// Queues every packet of `packets` in order (taking them; the vector
    /// is left empty for reuse), dropping by policy where the queue is
    /// full, under one lock and with one wake-up of the packer.
    pub fn push_all(&self, packets: &mut Vec<Vec<u8>>, stats: &TunnelSourceStats) {
        if packets.is_empty() {
            return;
        }
        let Ok(mut q) = self.inner.lock() else {
            packets.clear();
            return;
        };
        for packet in packets.drain(..) {
            let len = packet.len();
            if q.bytes + len > self.capacity {
                match self.policy {
                    DropPolicy::Tail => {
                        stats.dropped_tail.fetch_add(1, Ordering::Relaxed);
                        continue;
                    }
                    DropPolicy::Head => {
                        while q.bytes + len > self.capacity {
                            let Some(old) = q.packets.pop_front() else {
                                break;
                            };
                            q.bytes -= old.len();
                            stats.dropped_head.fetch_add(1, Ordering::Relaxed);
                        }
                        if q.bytes + len > self.capacity {
                            // Larger than the whole queue: it cannot be queued.
                            stats.dropped_tail.fetch_add(1, Ordering::Relaxed);
                            continue;
                        }
                    }
                }
            }
            q.bytes += len;
            q.packets.push_back(packet);
        }
        stats.queue_bytes.store(q.bytes as u64, Ordering::Relaxed);
        drop(q);
        self.ready.notify_one();
    }

    /// Takes up to `max` bytes of packets (at least one), waiting at most
    /// `wait`; empty on timeout or when closed and drained.
    pub fn pop_batch(&self, max: usize, wait: Duration, stats: &TunnelSourceStats) -> Vec<Vec<u8>> {
        let Ok(mut q) = self.inner.lock() else {
            return Vec::new();
        };
        if q.packets.is_empty() && !q.closed {
            q = match self.ready.wait_timeout(q, wait) {
                Ok((g, _)) => g,
                Err(_) => return Vec::new(),
            };
        }
        let mut out = Vec::new();
        let mut took = 0;
        while let Some(p) = q.packets.front() {
            if !out.is_empty() && took + p.len() > max {
                break;
            }
            took += p.len();
            if let Some(p) = q.packets.pop_front() {
                out.push(p);
            }
        }
        q.bytes -= took;
        stats.queue_bytes.store(q.bytes as u64, Ordering::Relaxed);
        out
    }

    /// No more packets will come; `pop_batch` returns what is left, then nothing.
    pub fn close(&self) {
        if let Ok(mut q) = self.inner.lock() {
            q.closed = true;
        }
        self.ready.notify_all();
    }

    fn is_drained(&self) -> bool {
        self.inner
            .lock()
            .map_or(true, |q| q.closed && q.packets.is_empty())
    }
}

/// How to run the tunnel's sending side.
#[derive(Debug, Clone)]
pub struct TunnelSourceOptions {
    /// The TUN (name, queues, virtio-net header, offloads).
    pub tun: TunConfig,
    /// MTU to set on the TUN (none: leave it).
    pub mtu: Option<u32>,
    /// Ring length per queue to set (txqueuelen; none: leave it).
    pub txqueuelen: Option<u32>,
    /// Capacity of Diodon's queue, in packet bytes.
    pub queue_bytes: usize,
    /// What a full queue drops.
    pub policy: DropPolicy,
    /// Largest packet a block carries (block bytes − record header).
    pub max_packet: usize,
    /// Run the backpressure probe at start-up (creates a scratch TUN).
    pub probe: bool,
    /// A token-bucket qdisc to install in front of the TUN (`--shape`).
    pub shaper: Option<Shaper>,
}

/// The shaper that lets packets into the TUN no faster than the link
/// carries them (`--shape auto`).
///
/// - rate: the link rate less the repair share of a full block and 10 %
///   for what else the pacer counts (Diodon's, UDP and IP headers, record
///   framing, beacons), in IP packet bytes per second — a shaper any faster
///   would only move the drops into Diodon's queue;
/// - burst: half the TUN's ring in packets of `packet_mtu` (at least one
///   packet, at most 64 KiB), so what passes back to back always fits;
/// - limit: 100 ms at that rate, at least 512 KiB: more than a socket's
///   default send buffer, so a local sender blocks before the shaper drops.
///
/// `None` for an unpaced link (there is no rate to shape to).
pub fn shaper_for(rate: Rate, config: &SenderConfig, ring: u32, packet_mtu: u32) -> Option<Shaper> {
    if rate.is_unlimited() {
        return None;
    }
    let k = u64::from(config.block_symbols.max(1));
    let m = u64::from(config.repair.repair_for(config.block_symbols));
    let rate_bytes_per_sec = (rate.bps() / 8 * k / (k + m) * 90 / 100).max(1);
    let mtu = packet_mtu.max(576);
    let burst_bytes = (ring / 2 * mtu).clamp(mtu, 64 * 1024);
    let limit_bytes = u32::try_from(rate_bytes_per_sec / 10)
        .unwrap_or(u32::MAX)
        .max(512 * 1024);
    Some(Shaper {
        rate_bytes_per_sec,
        burst_bytes,
        limit_bytes,
    })
}

/// Why the tunnel could not run.
#[derive(Debug, thiserror::Error)]
pub enum TunnelError {
    /// Opening or configuring the TUN.
    #[error("TUN {name}: {what}: {source}")]
    Tun {
        /// The interface.
        name: String,
        /// What was being done.
        what: &'static str,
        /// The OS error.
        #[source]
        source: std::io::Error,
    },
    /// The sender pipeline stopped.
    #[error("the sender pipeline has stopped")]
    Closed,
    /// A reader thread could not start.
    #[error("cannot start a TUN reader thread: {0}")]
    Thread(#[source] std::io::Error),
}

/// A sending side's TUN, opened and configured (the privileged half of
/// the source: [`open_tunnel`]); [`serve_opened_tunnel`] reads it.
#[derive(Debug)]
pub struct OpenedTun {
    queues: Vec<Tun>,
    /// The interface's `tx_dropped` when it was opened.
    base_drops: u64,
    /// The shaper's counters (opened before any sandbox) and its drops at start.
    shaper: Option<(QdiscWatch, u64)>,
}

/// Does what the tunnel's source needs privilege for, starting no thread:
/// logs the driver's features and (with `probe`) probes backpressure on a
/// scratch TUN, opens (creates) the TUN's queues, sets txqueuelen and MTU,
/// brings it up and reads its `tx_dropped` to count from.
pub fn open_tunnel(opts: &TunnelSourceOptions) -> Result<OpenedTun, TunnelError> {
    let name = opts.tun.name.clone();
    let err = |what: &'static str| {
        let name = name.clone();
        move |source| TunnelError::Tun { name, what, source }
    };
    announce(opts.probe);
    let queues = Tun::open_queues(&opts.tun).map_err(err("open"))?;
    if let Some(n) = opts.txqueuelen {
        tun::set_txqueuelen(&name, n).map_err(err("set txqueuelen"))?;
    }
    if let Some(m) = opts.mtu {
        tun::set_mtu(&name, m).map_err(err("set MTU"))?;
    }
    tun::set_up(&name).map_err(err("bring up"))?;
    let shaper = match opts.shaper {
        Some(mut s) => {
            // What passes back to back must fit the ring as it is now
            // (half of it, at least one packet).
            if let Ok(ring) = tun::txqueuelen(&name) {
                let mtu = opts.mtu.unwrap_or(1500).max(576);
                s.burst_bytes = s.burst_bytes.min((ring / 2 * mtu).max(mtu));
            }
            qdisc::set_shaper(&name, s).map_err(err("install the shaper"))?;
            let watch = QdiscWatch::open(&name).map_err(err("read the shaper"))?;
            let base = watch.read().map_err(err("read the shaper"))?.drops;
            tracing::info!(
                tun = %name,
                rate_mbit = s.rate_bytes_per_sec as f64 * 8.0 / 1e6,
                burst = s.burst_bytes,
                limit = s.limit_bytes,
                "shaper in front of the TUN: bursts wait there, local senders block"
            );
            Some((watch, base))
        }
        None => None,
    };
    tracing::info!(
        tun = %name,
        queues = queues.len(),
        vnet_hdr = opts.tun.vnet_hdr,
        offload = %queues.first().map(Tun::offload).unwrap_or_default(),
        txqueuelen = tun::txqueuelen(&name).unwrap_or(0),
        queue_bytes = opts.queue_bytes,
        policy = ?opts.policy,
        "tunnel reading"
    );
    Ok(OpenedTun {
        queues,
        base_drops: tun::tx_dropped(&name).unwrap_or(0),
        shaper,
    })
}

/// Opens the TUN ([`open_tunnel`]) and reads it ([`serve_opened_tunnel`]).
pub fn serve_tunnel(
    opts: &TunnelSourceOptions,
    handle: &SourceHandle,
    stop: &AtomicBool,
    stats: &Arc<TunnelSourceStats>,
) -> Result<(), TunnelError> {
    serve_opened_tunnel(open_tunnel(opts)?, opts, handle, stop, stats)
}

/// Reads the opened TUN until `stop` is set, carrying every packet as one
/// record of one packet channel; at `stop` the queue drains and the
/// channel finishes (its trailer carries the digest). Needs no privilege:
/// reads and polls on the open queues, `tx_dropped` from
/// `/proc/thread-self/net/dev`.
pub fn serve_opened_tunnel(
    tun: OpenedTun,
    opts: &TunnelSourceOptions,
    handle: &SourceHandle,
    stop: &AtomicBool,
    stats: &Arc<TunnelSourceStats>,
) -> Result<(), TunnelError> {
    let name = opts.tun.name.clone();
    let OpenedTun {
        queues,
        base_drops,
        shaper,
    } = tun;
    let shaper_unreadable = AtomicBool::new(false);
    let refresh_drops = || {
        if let Ok(d) = tun::tx_dropped(&name) {
            stats
                .tun_tx_dropped
                .store(d.saturating_sub(base_drops), Ordering::Relaxed);
        }
        if let Some((watch, base)) = &shaper {
            match watch.read() {
                Ok(q) => {
                    stats
                        .shaper_dropped
                        .store(q.drops.saturating_sub(*base), Ordering::Relaxed);
                    stats
                        .shaper_backlog
                        .store(q.backlog_bytes, Ordering::Relaxed);
                }
                Err(e) => {
                    if !shaper_unreadable.swap(true, Ordering::Relaxed) {
                        tracing::warn!(tun = %name, "cannot read the shaper's counters ({e}); its drops are not counted");
                    }
                }
            }
        }
    };
    let queue = Arc::new(PacketQueue::new(opts.queue_bytes, opts.policy));
    let readers_stop = Arc::new(AtomicBool::new(false));
    let mut readers = Vec::new();
    for (i, q) in queues.into_iter().enumerate() {
        let (queue, stats, rstop) = (
            Arc::clone(&queue),
            Arc::clone(stats),
            Arc::clone(&readers_stop),
        );
        let max = opts.max_packet;
        readers.push(
            thread::Builder::new()
                .name(format!("diodon-tun{i}"))
                .spawn(move || read_loop(&q, &queue, &stats, &rstop, max))
                .map_err(TunnelError::Thread)?,
        );
    }
    let token = handle
        .open(ChannelMeta::packets(format!("tun:{name}")))
        .map_err(|_| TunnelError::Closed)?;
    let clock = MonotonicClock::new();
    let mut last_poll = clock.now();
    let mut stopping = false;
    loop {
        if !stopping && stop.load(Ordering::Relaxed) {
            stopping = true;
            readers_stop.store(true, Ordering::Relaxed);
            for r in readers.drain(..) {
                let _ = r.join();
            }
            queue.close();
        }
        if stopping && queue.is_drained() {
            break;
        }
        let batch = queue.pop_batch(PACK_BYTES, Duration::from_millis(20), stats);
        if !batch.is_empty() {
            let mut data = Vec::with_capacity(PACK_BYTES + 2 * batch.len());
            for p in &batch {
                // Sizes were checked by the reader (≤ max_packet ≤ 65,535).
                let _ = push_record(&mut data, p);
            }
            stats
                .queued
                .fetch_add(batch.len() as u64, Ordering::Relaxed);
            handle
                .records(token, data)
                .map_err(|_| TunnelError::Closed)?;
        }
        let now = clock.now();
        if now.saturating_duration_since(last_poll) >= DROP_POLL {
            last_poll = now;
            refresh_drops();
        }
    }
    refresh_drops();
    handle.finish(token).map_err(|_| TunnelError::Closed)?;
    Ok(())
}

/// Logs what the TUN driver offers and, with `probe`, whether a full TUN
/// ring stops its queue (NODROP) or drops (stock kernels).
fn announce(probe: bool) {
    match tun::Tun::features() {
        Ok(f) => tracing::info!(
            multi_queue = f.multi_queue(),
            vnet_hdr = f.vnet_hdr(),
            napi = f.napi(),
            "TUN driver features"
        ),
        Err(e) => tracing::warn!("TUNGETFEATURES: {e}"),
    }
    if probe {
        let scratch = format!("dprb{}", std::process::id() % 1_000_000);
        match tun::probe_backpressure(&scratch) {
            Ok(Backpressure::Stops) => tracing::info!(
                "TUN backpressure: this kernel stops a full TUN queue (NODROP): the qdisc holds packets"
            ),
            Ok(Backpressure::Drops) => tracing::warn!(
                "TUN backpressure: not available — this kernel drops when a TUN ring is full (no NODROP patch); \
                 those drops are counted as tunnel_source.tun_tx_dropped"
            ),
            Err(e) => tracing::warn!("TUN backpressure probe failed: {e}; drops are counted from tx_dropped"),
        }
    }
}

/// Reads a reader takes from its queue before handing their packets to
/// the packet queue at once (one lock, one wake-up).
const READ_BATCH: usize = 64;

/// One TUN queue's reader: wait for a packet, then take what else waits
/// without waiting (up to [`READ_BATCH`] reads: one syscall per packet
/// instead of a poll and a read), finish/segment, validate, queue the batch.
/// Never blocks on anything but the wait for the first packet.
fn read_loop(
    tun: &Tun,
    queue: &PacketQueue,
    stats: &TunnelSourceStats,
    stop: &AtomicBool,
    max_packet: usize,
) {
    let mut buf = vec![0u8; tun::MAX_READ];
    let mut scratch = Vec::with_capacity(tun::MAX_READ);
    let mut batch = Vec::with_capacity(READ_BATCH);
    let vnet = tun.vnet_hdr();
    if let Err(e) = tun.set_nonblocking(true) {
        tracing::warn!(
            tun = tun.name(),
            "cannot read without waiting ({e}); one read per wake-up"
        );
    }
    while !stop.load(Ordering::Relaxed) {
        let n = match tun.recv(&mut buf, Duration::from_millis(50)) {
            Ok(Some(n)) => n,
            Ok(None) => continue,
            Err(e) => {
                tracing::error!(tun = tun.name(), "read: {e}");
                thread::sleep(Duration::from_millis(50));
                continue;
            }
        };
        take_read(&buf[..n], vnet, max_packet, &mut scratch, &mut batch, stats);
        for _ in 1..READ_BATCH {
            match tun.try_recv(&mut buf) {
                Ok(Some(n)) => {
                    take_read(&buf[..n], vnet, max_packet, &mut scratch, &mut batch, stats);
                }
                Ok(None) => break,
                Err(e) => {
                    tracing::error!(tun = tun.name(), "read: {e}");
                    break;
                }
            }
        }
        queue.push_all(&mut batch, stats);
    }
}

/// One read's bytes: virtio-net header (with `vnet`), finish or segment,
/// validate each packet and queue it; whatever is malformed is counted by
/// reason and dropped.
fn take_read(
    read: &[u8],
    vnet: bool,
    max_packet: usize,
    scratch: &mut Vec<u8>,
    out: &mut Vec<Vec<u8>>,
    stats: &TunnelSourceStats,
) {
    stats.reads.fetch_add(1, Ordering::Relaxed);
    let (hdr, packet) = if vnet {
        let Some(h) = VnetHdr::parse(read) else {
            stats.malformed_truncated.fetch_add(1, Ordering::Relaxed);
            return;
        };
        (h, &read[VNET_HDR_LEN..])
    } else {
        (VnetHdr::PLAIN, read)
    };
    if hdr.gso_size > 0 && hdr.gso_type != diodon_packet::vnet::GsoType::None {
        stats.super_packets.fetch_add(1, Ordering::Relaxed);
    }
    let r = segment(&hdr, packet, scratch, |p| {
        if p.len() > max_packet {
            stats.too_large.fetch_add(1, Ordering::Relaxed);
            return;
        }
        stats.packets.fetch_add(1, Ordering::Relaxed);
        stats.bytes.fetch_add(p.len() as u64, Ordering::Relaxed);
        out.push(p.to_vec());
    });
    if let Err(e) = r {
        stats.malformed(&e);
    }
}

/// Live counters of the TUN sink.
#[derive(Debug, Default)]
pub struct TunnelSinkStats {
    /// Packets written.
    pub packets: AtomicU64,
    /// Their bytes.
    pub bytes: AtomicU64,
    /// Gaps stepped over.
    pub gaps: AtomicU64,
    /// Blocks lost.
    pub blocks_lost: AtomicU64,
    /// Malformed records.
    pub malformed: AtomicU64,
    /// Write errors.
    pub write_errors: AtomicU64,
}

impl TunnelSinkStats {
    /// The counters now.
    pub fn snapshot(&self) -> TunnelSinkCounters {
        let g = |a: &AtomicU64| a.load(Ordering::Relaxed);
        TunnelSinkCounters {
            packets: g(&self.packets),
            bytes: g(&self.bytes),
            gaps: g(&self.gaps),
            blocks_lost: g(&self.blocks_lost),
            malformed: g(&self.malformed),
            write_errors: g(&self.write_errors),
        }
    }
}

/// Writes every packet of every packet channel into a TUN, from where the
/// kernel routes it.
#[derive(Debug)]
pub struct TunSink {
    tun: Tun,
    names: HashMap<ChannelKey, (String, u64)>,
    stats: Arc<TunnelSinkStats>,
}

impl TunSink {
    /// Opens (creates) TUN `name`, sets its MTU when given and brings it up.
    pub fn open(
        name: &str,
        mtu: Option<u32>,
        stats: Arc<TunnelSinkStats>,
    ) -> Result<Self, TunnelError> {
        let err = |what: &'static str| {
            let name = name.to_owned();
            move |source| TunnelError::Tun { name, what, source }
        };
        let tun = Tun::open(name).map_err(err("open"))?;
        if let Some(m) = mtu {
            tun::set_mtu(name, m).map_err(err("set MTU"))?;
        }
        tun::set_up(name).map_err(err("bring up"))?;
        tracing::info!(tun = name, "tunnel writing");
        Ok(TunSink {
            tun,
            names: HashMap::new(),
            stats,
        })
    }

    fn write_block(&mut self, key: ChannelKey, data: &[u8]) {
        let (mut n, mut bytes) = (0u64, 0u64);
        for r in BlockRecords::new(data) {
            let Ok(p) = r else {
                self.stats.malformed.fetch_add(1, Ordering::Relaxed);
                break;
            };
            if inspect(p).is_err() {
                self.stats.malformed.fetch_add(1, Ordering::Relaxed);
                continue;
            }
            match self.tun.send(p) {
                Ok(()) => {
                    n += 1;
                    bytes += p.len() as u64;
                }
                Err(e) => {
                    if self.stats.write_errors.fetch_add(1, Ordering::Relaxed) == 0 {
                        tracing::warn!(%key, "TUN write: {e}");
                    }
                }
            }
        }
        if let Some((_, b)) = self.names.get_mut(&key) {
            *b += bytes;
        }
        self.stats.packets.fetch_add(n, Ordering::Relaxed);
        self.stats.bytes.fetch_add(bytes, Ordering::Relaxed);
    }
}

impl Sink for TunSink {
    fn admit(meta: &ChannelMeta) -> Result<(), Refusal> {
        if meta.kind == ChannelKind::Datagrams && meta.aligned {
            Ok(())
        } else {
            Err(Refusal::NotPackets(meta.kind))
        }
    }

    fn handle(&mut self, event: SinkEvent) -> Result<Option<ChannelOutcome>, SinkError> {
        let location = format!("tun:{}", self.tun.name());
        match event {
            SinkEvent::Opened { key, meta } => {
                self.names.insert(key, (meta.name, 0));
                Ok(None)
            }
            // Only the file sink holds blocks across passes.
            SinkEvent::Refused { .. } | SinkEvent::Partial { .. } | SinkEvent::Assembled { .. } => {
                Ok(None)
            }
            SinkEvent::Data { key, data, .. } => {
                self.write_block(key, &data);
                Ok(None)
            }
            SinkEvent::Gap { count, .. } => {
                self.stats.gaps.fetch_add(1, Ordering::Relaxed);
                self.stats.blocks_lost.fetch_add(count, Ordering::Relaxed);
                Ok(None)
            }
            SinkEvent::Complete { key, digest, .. } => {
                let (name, bytes) = self.names.remove(&key).unwrap_or_default();
                Ok(Some(ChannelOutcome::new(
                    key,
                    name,
                    bytes,
                    &location,
                    Verdict::Verified {
                        blake3: hex::encode(digest),
                    },
                )))
            }
            SinkEvent::Failed { key, reason } => {
                let (name, bytes) = self.names.remove(&key).unwrap_or_default();
                Ok(Some(ChannelOutcome::new(
                    key,
                    name,
                    bytes,
                    &location,
                    Verdict::Failed {
                        reason: reason.to_string(),
                    },
                )))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_shaper_runs_below_the_links_payload_rate_and_its_burst_fits_the_ring() {
        let config = SenderConfig::default(); // 224 + 23
        let rate = Rate::bits_per_sec(100_000_000);
        let s = shaper_for(rate, &config, 25, 1500).expect("a paced link");
        assert_eq!(s.rate_bytes_per_sec, 12_500_000 * 224 / 247 * 90 / 100);
        assert!(
            s.rate_bytes_per_sec * 8 < 90_000_000,
            "below the link, repair and headers"
        );
        assert_eq!(s.burst_bytes, 12 * 1500, "half a ring of 25");
        assert_eq!(s.limit_bytes, 1_020_242, "100 ms at its rate");
        // A ring of one still lets one packet through; a huge ring 64 KiB.
        assert_eq!(
            shaper_for(rate, &config, 1, 1500).map(|s| s.burst_bytes),
            Some(1500)
        );
        assert_eq!(
            shaper_for(rate, &config, 10_000, 1500).map(|s| s.burst_bytes),
            Some(65_536)
        );
        // A slow link: the limit never falls under a socket's default buffer.
        let slow = shaper_for(Rate::bits_per_sec(1_000_000), &config, 25, 1500);
        assert_eq!(slow.map(|s| s.limit_bytes), Some(512 * 1024));
        assert_eq!(
            shaper_for(Rate::UNLIMITED, &config, 25, 1500),
            None,
            "nothing to shape to"
        );
    }

    #[test]
    fn a_full_queue_drops_by_policy_and_counts_it() {
        let stats = TunnelSourceStats::default();
        let q = PacketQueue::new(300, DropPolicy::Tail);
        for i in 0..5u8 {
            q.push(vec![i; 100], &stats);
        }
        assert_eq!(stats.dropped_tail.load(Ordering::Relaxed), 2);
        let got = q.pop_batch(10_000, Duration::ZERO, &stats);
        assert_eq!(got.iter().map(|p| p[0]).collect::<Vec<_>>(), vec![0, 1, 2]);

        let q = PacketQueue::new(300, DropPolicy::Head);
        for i in 0..5u8 {
            q.push(vec![i; 100], &stats);
        }
        assert_eq!(stats.dropped_head.load(Ordering::Relaxed), 2);
        let got = q.pop_batch(10_000, Duration::ZERO, &stats);
        assert_eq!(got.iter().map(|p| p[0]).collect::<Vec<_>>(), vec![2, 3, 4]);
        assert_eq!(stats.queue_bytes.load(Ordering::Relaxed), 0);
    }

    #[test]
    fn batches_are_bounded_but_never_empty_when_packets_wait() {
        let stats = TunnelSourceStats::default();
        let q = PacketQueue::new(1 << 20, DropPolicy::Tail);
        q.push(vec![0; 5000], &stats);
        q.push(vec![0; 5000], &stats);
        assert_eq!(q.pop_batch(100, Duration::ZERO, &stats).len(), 1);
        q.close();
        assert_eq!(q.pop_batch(100, Duration::ZERO, &stats).len(), 1);
        assert!(q.is_drained());
        assert!("head".parse::<DropPolicy>().is_ok() && "x".parse::<DropPolicy>().is_err());
    }

    #[test]
    fn malformed_reads_are_counted_by_reason_and_never_queued() {
        let stats = TunnelSourceStats::default();
        let q = PacketQueue::new(1 << 20, DropPolicy::Tail);
        let mut scratch = Vec::new();
        let mut good = vec![0u8; 28];
        good[0] = 0x45;
        good[3] = 28;
        let mut long = good.clone();
        long[3] = 40;
        let mut bad_ihl = good.clone();
        bad_ihl[0] = 0x43;
        for (read, vnet) in [
            (&good[..], false),
            (&good[..10], false),
            (&[0x20; 40][..], false),
            (&long[..], false),
            (&bad_ihl[..], false),
            (&[0u8; 4][..], true),
            (
                &[[0u8, 3, 0, 0, 100, 0, 20, 0, 6, 0].as_slice(), &good].concat()[..],
                true,
            ),
        ] {
            let mut out = Vec::new();
            take_read(read, vnet, 1500, &mut scratch, &mut out, &stats);
            q.push_all(&mut out, &stats);
        }
        let mut out = Vec::new();
        take_read(&good, false, 20, &mut scratch, &mut out, &stats);
        q.push_all(&mut out, &stats);
        let c = stats.snapshot();
        assert_eq!((c.reads, c.packets), (8, 1));
        assert_eq!(
            c.malformed_truncated, 2,
            "a short IP header and a short virtio-net header"
        );
        assert_eq!(c.malformed_version, 1);
        assert_eq!(c.malformed_length, 1);
        assert_eq!(c.malformed_header, 1);
        assert_eq!(c.malformed_offload, 1, "UFO is never asked for");
        assert_eq!(c.too_large, 1);
        assert_eq!(q.pop_batch(1 << 20, Duration::ZERO, &stats).len(), 1);
    }

    #[test]
    fn only_packet_channels_are_admitted() {
        assert!(TunSink::admit(&ChannelMeta::packets("tun:a")).is_ok());
        let udp = ChannelMeta {
            kind: ChannelKind::Datagrams,
            ..ChannelMeta::stream("udp:x")
        };
        assert!(TunSink::admit(&udp).is_err());
        assert!(TunSink::admit(&ChannelMeta::file("f", 1)).is_err());
        assert!(crate::udp_flow::UdpForwardSink::admit(&ChannelMeta::packets("t")).is_err());
    }
}
