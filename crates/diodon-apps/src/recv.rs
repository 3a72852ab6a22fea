//! The receiving pipeline: three threads joined by bounded queues.
//!
//! ```text
//!  net thread                 decoder thread                    writer thread
//!  BatchReceiver::recv_into   Receiver::handle_datagram          Sink::handle
//!  (recvmmsg + GRO, nothing   handle_timeout, poll_event,        (files, stdout, TCP)
//!   else) ──NetBatch──► [queue_batches] ──► admit names ──SinkEvent──► [event_queue] ──►
//!        ▲                         │   ▲                                    │
//!        └──── empty buffers ◄─────┘   └──── reject_channel(why) ◄──────────┘
//! ```
//!
//! The kernel writes each datagram once, into a pooled receive buffer
//! (`RecvBuffer`, slots × slot size); the buffer itself is queued to the
//! decoder, which reads the datagrams in place and sends it back empty. At
//! most `queue_batches` + 2 buffers exist; their pages become resident only
//! as datagrams fill them, and an idle buffer beyond the few kept warm gives
//! its pages back (the receiver's memory stays flat, `BufferPool`).
//!
//! A batch that emptied the socket makes the net thread wait [`COALESCE`]
//! before it reads again, so a paced link is read in batches that grow
//! with the rate, not datagram by datagram.
//!
//! A full queue blocks its producer: the net thread then stops draining and
//! the kernel socket buffer absorbs the burst (its overflow is counted with
//! `SO_RXQ_OVFL` and reported as socket drops). Nothing inside is dropped.
//! A sink error on one channel goes back to the decoder, which fails that
//! channel in the core (`reject_channel`); the failure then flows to the
//! sink like any other verdict (quarantine, reset connection).

use crate::health::{self, HealthMonitor, LinkHealth};
use crate::key_file::KeyReload;
pub use crate::outcome::{ChannelKey, ChannelOutcome, OutcomeTally, Verdict};
pub use crate::sink_error::{FileOp, Refusal, SinkFailure};
use crate::status::StatusBoard;
use crate::PipelineError;
use diodon_io::clock::unix_time_ms;
use diodon_io::{BatchReceiver, MonotonicClock, RecvBuffer, SetupWarning, UdpConfig};
use diodon_proto::{
    BlockSet, ChannelId, ChannelMeta, Event, FailReason, Receiver, ReceiverConfig, ReceiverStats,
    SessionId, Timestamp,
};
use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc::{self, Receiver as Rx, RecvTimeoutError, SyncSender};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::Duration;

/// What the writer thread's sink gets, in channel order.
#[derive(Debug)]
pub enum SinkEvent {
    /// A channel opened and its name was admitted.
    Opened {
        /// Channel.
        key: ChannelKey,
        /// Metadata.
        meta: ChannelMeta,
    },
    /// A channel whose metadata was refused (name, kind); the core fails it.
    Refused {
        /// Channel.
        key: ChannelKey,
        /// Metadata.
        meta: ChannelMeta,
        /// Why.
        why: Refusal,
    },
    /// Bytes, contiguous with the previous ones of the channel.
    Data {
        /// Channel.
        key: ChannelKey,
        /// Offset in the channel.
        offset: u64,
        /// Bytes.
        data: Vec<u8>,
    },
    /// Blocks of a packet channel that could not be recovered: the records
    /// they held are lost, the next `Data` follows the gap (only channels
    /// with aligned records have gaps; others fail instead).
    Gap {
        /// Channel.
        key: ChannelKey,
        /// First lost block.
        block: u64,
        /// Consecutive blocks lost.
        count: u64,
    },
    /// Every byte arrived and the digest matched.
    Complete {
        /// Channel.
        key: ChannelKey,
        /// Total bytes.
        bytes: u64,
        /// Verified BLAKE3 digest.
        digest: [u8; 32],
    },
    /// The channel failed.
    Failed {
        /// Channel.
        key: ChannelKey,
        /// Why.
        reason: FailReason,
    },
    /// A sync file reached its trailer with blocks lost; `held` lists the
    /// blocks the sink has (its `Failed` follows).
    Partial {
        /// Channel.
        key: ChannelKey,
        /// The blocks in the sink's hands.
        held: BlockSet,
    },
    /// Every block of a sync file is in the sink's hands, some of them
    /// from an earlier pass: the sink MUST verify `digest` itself.
    Assembled {
        /// Channel.
        key: ChannelKey,
        /// The trailer's length.
        bytes: u64,
        /// The trailer's digest, unverified.
        digest: [u8; 32],
    },
}

/// A sink could not handle one channel (the channel fails, the pipeline
/// goes on).
#[derive(Debug, Clone, thiserror::Error)]
#[error("channel {key}: {why}")]
pub struct SinkError {
    /// Channel.
    pub key: ChannelKey,
    /// Why.
    pub why: SinkFailure,
}

/// Where channel bytes go; runs on the writer thread.
pub trait Sink: Send + 'static {
    /// Decides on the decoder thread whether a channel is acceptable (names,
    /// kinds). Must be cheap and must not block.
    fn admit(meta: &ChannelMeta) -> Result<(), Refusal>
    where
        Self: Sized;

    /// Handles one event. An `Err` fails the channel; an outcome is the
    /// channel's final verdict.
    fn handle(&mut self, event: SinkEvent) -> Result<Option<ChannelOutcome>, SinkError>;

    /// Handles a [`SinkEvent::Data`] and gives its buffer back when the
    /// sink did not keep it: the decoder builds later blocks in it (no
    /// allocation, page faults or zeroing per block). The default hands
    /// the event to [`Sink::handle`], which keeps the buffer.
    fn handle_data(
        &mut self,
        key: ChannelKey,
        offset: u64,
        data: Vec<u8>,
    ) -> (Result<Option<ChannelOutcome>, SinkError>, Option<Vec<u8>>) {
        (self.handle(SinkEvent::Data { key, offset, data }), None)
    }

    /// Channels the sink decided since the last call that the core should
    /// drop without a verdict (a sync receiver that already holds the
    /// file): their outcome was already returned.
    fn skipped(&mut self) -> Vec<ChannelKey> {
        Vec::new()
    }

    /// Channels whose blocks the sink already holds from an earlier pass,
    /// since the last call: the core skips those blocks (`hold_blocks`).
    fn resumed(&mut self) -> Vec<(ChannelKey, BlockSet)> {
        Vec::new()
    }
}

/// What the writer thread tells the decoder about a channel.
#[derive(Debug)]
enum SinkSignal {
    /// The sink failed the channel: the core fails it.
    Fail(SinkError),
    /// The sink already holds the channel's file: the core drops it.
    Skip(ChannelKey),
    /// The sink holds these blocks of the channel from an earlier pass.
    Resume(ChannelKey, BlockSet),
    /// A delivered block's buffer, written out: the core reuses it.
    Recycle(Vec<u8>),
}

/// How to run the receiver.
#[derive(Debug, Clone)]
pub struct RecvOptions {
    /// The core's configuration.
    pub config: ReceiverConfig,
    /// The socket.
    pub udp: UdpConfig,
    /// Net → decoder queue, in receive buffers (each `udp.recv_slots` ×
    /// `udp.slot_size` bytes, filled by one `recvmmsg`);
    /// [`NET_QUEUE_BATCHES`] unless there is a reason.
    pub queue_batches: usize,
    /// Decoder → writer queue, in events (a data event is one block).
    pub event_queue: usize,
    /// Return once channels were seen, every one is decided and the link is silent.
    pub once: bool,
    /// Return as soon as this many channels are decided, without waiting
    /// for the link to fall silent (the caller knows how many to expect).
    pub expect_channels: Option<u64>,
    /// Raise the link-silent alarm after this long without a valid datagram.
    pub silence_alarm: Duration,
    /// Give up when no valid datagram arrived this long after the start
    /// ([`RecvReport::nothing_arrived`]).
    pub give_up_after: Option<Duration>,
    /// The report lists the last this many channels (all are counted).
    pub list_channels: usize,
    /// The key file, read again on SIGHUP (keyed modes).
    pub keys: Option<KeyReload>,
}

diodon_counters::counters! {
    /// The receiving socket as the net thread saw it (a snapshot of
    /// [`RecvProgress`]'s live counters).
    #[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
    pub struct RecvSocketCounters in Diodon "receiver_socket" {
        datagrams: counter Count "datagrams" "Datagrams read from the receiving socket.",
        /// Datagrams per batch is what each hand-off to the decoder (and
        /// each wake-up of the net thread) carries.
        batches: counter Count "batches" "Batches the net thread read (recvmmsg calls that returned datagrams) and handed to the decoder.",
        /// The kernel counts packets, not datagrams: a GRO/GSO super-packet
        /// dropped whole counts once. The datagrams lost are the core's
        /// exact `missing`.
        dropped_packets: counter Count "dropped_packets" "Packets the kernel dropped on the receiving socket because its buffer was full (SO_RXQ_OVFL); a GRO/GSO super-packet counts once, however many datagrams it held (the datagrams lost are receiver missing).",
    }
}

/// Live counters for a progress display.
#[derive(Debug, Default)]
pub struct RecvProgress {
    /// Datagrams received from the socket.
    pub datagrams: AtomicU64,
    /// Batches of them handed to the decoder.
    pub batches: AtomicU64,
    /// Channel bytes delivered by the core.
    pub bytes: AtomicU64,
    /// Channels verified.
    pub complete: AtomicU64,
    /// Channels failed.
    pub failed: AtomicU64,
    /// Kernel socket drops so far.
    pub socket_drops: AtomicU64,
    /// Size announced by the latest opened channel.
    pub current_size: AtomicU64,
    /// The core's counters, refreshed about every 100 ms (for exporters).
    pub snapshot: Mutex<ReceiverStats>,
    /// Authentic datagrams per key id so far (keyed modes), refreshed with
    /// `snapshot`.
    pub key_use: Mutex<Vec<(u8, u64)>>,
    /// The link's state and alarms.
    pub health: LinkHealth,
    /// History, channels in flight and the last decided (`/api/status`).
    pub status: StatusBoard,
}

impl RecvProgress {
    /// The socket counters now.
    pub fn socket(&self) -> RecvSocketCounters {
        RecvSocketCounters {
            datagrams: self.datagrams.load(Ordering::Relaxed),
            batches: self.batches.load(Ordering::Relaxed),
            dropped_packets: self.socket_drops.load(Ordering::Relaxed),
        }
    }
}

/// What the receiver saw.
#[derive(Debug, Clone)]
pub struct RecvReport {
    /// Core counters.
    pub stats: ReceiverStats,
    /// Datagrams the net thread got from the socket.
    pub socket_datagrams: u64,
    /// Batches it handed to the decoder.
    pub socket_batches: u64,
    /// Kernel drops on our socket (`SO_RXQ_OVFL`).
    pub socket_drops: u64,
    /// Times the net thread found the decoder queue full and had to wait.
    pub queue_full: u64,
    /// Effective receive buffer.
    pub rcvbuf: usize,
    /// Setup warnings (capped buffer, …).
    pub warnings: Vec<SetupWarning>,
    /// The last channels' outcomes (`list_channels` of them), in decision order.
    pub channels: Vec<ChannelOutcome>,
    /// Channels verified, all of them.
    pub channels_verified: u64,
    /// Channels failed, all of them.
    pub channels_failed: u64,
    /// Bytes of every verified channel.
    pub verified_bytes: u64,
    /// Outcomes decided but not listed in `channels`.
    pub channels_unlisted: u64,
    /// First datagram to last verdict.
    pub duration: Duration,
    /// Sessions seen.
    pub sessions: Vec<String>,
    /// Configuration mismatches reported by the core.
    pub mismatches: Vec<String>,
    /// `give_up_after` passed without a valid datagram.
    pub nothing_arrived: bool,
    /// Authentic datagrams per key id (keyed modes; ascending ids).
    pub key_use: Vec<(u8, u64)>,
}

impl RecvReport {
    /// Channels that were not verified.
    pub fn failed(&self) -> usize {
        usize::try_from(self.channels_failed).unwrap_or(usize::MAX)
    }
}

/// Receive buffers queued between the net thread and the decoder
/// ([`RecvOptions::queue_batches`] of `diodon recv`): 8, about 4.6 MB at MTU
/// 9000, so the datagrams waiting for the decoder are still in the CPU's
/// cache when it reads them. The kernel socket buffer, sized for the
/// tolerated stall (`--stall`, `link::rcvbuf_for`), absorbs bursts, and
/// the decoder → writer queue absorbs a slow disk. With 256 buffers (150 MB
/// at MTU 9000) a receiver that fell behind read every datagram from
/// memory and cost more per byte the further behind it was: 0.67–0.85 s/GB
/// against 0.65–0.71 with 8, on one core at 10 Gbit/s (BENCHMARKS.md,
/// "A short queue keeps the receiver's buffers in the cache").
pub const NET_QUEUE_BATCHES: usize = 8;

/// Datagrams at least this long have the next one prefetched while they
/// are checked and gathered (`diodon_io::cache::prefetch`). A jumbo datagram
/// spans pages, where the CPU's own prefetcher stops, and its CRC32C waited
/// on memory (decoder thread 0.38–0.41 → 0.36–0.37 s/GB at MTU 9000); at
/// MTU 1500 the datagrams lie in a row within pages and the hint cost what
/// it saved (BENCHMARKS.md, "The next payload asked for ahead").
const PREFETCH_FROM_BYTES: usize = 4096;

/// One `recvmmsg`'s datagrams, in the memory the kernel wrote them to: the
/// buffer itself travels to the decoder and back (no copy).
struct NetBatch {
    at: Timestamp,
    datagrams: RecvBuffer,
    drops: u64,
}

/// Receive buffers the decoder has read, for the net thread to fill again:
/// a stack, so the buffer reused next is the one freed last, still warm in
/// the caches and the TLB (a queue would cycle through every buffer ever
/// made, each cold). Holds at most the buffers that exist (≤ queue + 2).
/// The top [`WARM_BUFFERS`] always keep their memory; a buffer below them
/// that stayed idle for [`COOL_AFTER`] gives its pages back to the kernel
/// and goes to the cold stack, so a burst that made the decoder lag (and
/// the net thread fill many buffers) leaves no resident memory behind — the
/// receiver's memory stays flat over months instead of growing towards
/// queue × buffer size. Buffers cool by idle time, not by count: releasing
/// every buffer returned beyond the warm ones made a bulk transfer fault
/// each page in again (one fault per datagram, 6 % of the receiver's CPU).
#[derive(Default)]
struct BufferPool(Mutex<IdleBuffers>);

/// Idle receive buffers that always keep their pages.
const WARM_BUFFERS: usize = 8;
/// A buffer beyond the warm ones gives its pages back after this long idle.
const COOL_AFTER: Duration = Duration::from_secs(1);

#[derive(Default)]
struct IdleBuffers {
    /// Their pages still resident, each with when it came back; the last
    /// returned at the back.
    warm: VecDeque<(NetBatch, Timestamp)>,
    /// Their pages given back.
    cold: Vec<NetBatch>,
}

impl IdleBuffers {
    /// Releases the pages of the buffers beyond the warm ones that have
    /// been idle for [`COOL_AFTER`] at `now`.
    fn cool(&mut self, now: Timestamp) {
        while self.warm.len() > WARM_BUFFERS
            && self
                .warm
                .front()
                .is_some_and(|(_, since)| now.saturating_duration_since(*since) >= COOL_AFTER)
        {
            if let Some((mut batch, _)) = self.warm.pop_front() {
                batch.datagrams.release_pages();
                self.cold.push(batch);
            }
        }
    }
}

impl BufferPool {
    fn take(&self) -> Option<NetBatch> {
        let mut idle = self.0.lock().ok()?;
        idle.warm
            .pop_back()
            .map(|(batch, _)| batch)
            .or_else(|| idle.cold.pop())
    }

    fn give_back(&self, batch: NetBatch, now: Timestamp) {
        if let Ok(mut idle) = self.0.lock() {
            idle.warm.push_back((batch, now));
            idle.cool(now);
        }
    }

    /// Cools idle buffers while none come back (the decoder's quiet ticks).
    fn cool(&self, now: Timestamp) {
        if let Ok(mut idle) = self.0.lock() {
            idle.cool(now);
        }
    }

    /// Idle buffers whose pages are resident, and those given back.
    #[cfg(test)]
    fn counts(&self) -> (usize, usize) {
        self.0
            .lock()
            .map_or((0, 0), |idle| (idle.warm.len(), idle.cold.len()))
    }
}

/// Runs the receiver until `stop` is set (or, with `once`, the first
/// transfer ends). The calling thread becomes the decoder; the net and writer
/// threads are spawned and joined here.
pub fn run_receiver<S: Sink>(
    opts: &RecvOptions,
    sink: S,
    progress: &Arc<RecvProgress>,
    stop: &Arc<AtomicBool>,
) -> Result<RecvReport, PipelineError> {
    let udp = BatchReceiver::open(&opts.udp)?;
    run_receiver_on(udp, opts, sink, progress, stop)
}

/// [`run_receiver`] on a socket already opened from `opts.udp` (a caller
/// that restricts itself opens the socket first, with its privileges).
pub fn run_receiver_on<S: Sink>(
    udp: BatchReceiver,
    opts: &RecvOptions,
    sink: S,
    progress: &Arc<RecvProgress>,
    stop: &Arc<AtomicBool>,
) -> Result<RecvReport, PipelineError> {
    let setup = udp.setup().clone();
    tracing::info!(
        local = %setup.local,
        rcvbuf = setup.rcvbuf,
        gro = setup.gro,
        decode = crate::fec_kernel::describe(),
        "receiver listening"
    );
    for w in &setup.warnings {
        tracing::warn!("{w}");
    }
    let clock = MonotonicClock::new();
    let (net_tx, net_rx) = mpsc::sync_channel::<NetBatch>(opts.queue_batches.max(1));
    let pool = Arc::new(BufferPool::default());
    let (ev_tx, ev_rx) = mpsc::sync_channel::<SinkEvent>(opts.event_queue.max(1));
    // Bounded by the number of channels in flight: at most one per channel.
    let (fail_tx, fail_rx) = mpsc::channel::<SinkSignal>();

    let net_stop = Arc::clone(stop);
    let net_progress = Arc::clone(progress);
    let net = thread::Builder::new()
        .name("diodon-net".into())
        .spawn({
            let pool = Arc::clone(&pool);
            move || net_loop(udp, clock, &net_tx, &pool, &net_stop, &net_progress)
        })
        .map_err(|_| PipelineError::Thread("net"))?;
    let writer_progress = Arc::clone(progress);
    let list = opts.list_channels;
    let writer = thread::Builder::new()
        .name("diodon-writer".into())
        .spawn(move || writer_loop(sink, &ev_rx, &fail_tx, &writer_progress, list))
        .map_err(|_| PipelineError::Thread("writer"))?;

    let mut dec = Decoder::new(opts, clock, ev_tx, progress, S::admit, setup.rcvbuf);
    let result = dec.run(
        opts.once,
        opts.expect_channels,
        &net_rx,
        &pool,
        &fail_rx,
        stop,
    );
    stop.store(true, Ordering::Relaxed);
    drop(net_rx);
    let stats = dec.core.stats();
    let key_use = dec.core.key_use();
    if let Ok(mut snap) = progress.snapshot.lock() {
        *snap = stats.clone();
    }
    let Decoder {
        ev_tx,
        sessions,
        mismatches,
        first,
        last_verdict,
        drops,
        nothing_arrived,
        ..
    } = dec;
    drop(ev_tx);
    let net_result = net.join().map_err(|_| PipelineError::Thread("net"))?;
    let tally = writer.join().map_err(|_| PipelineError::Thread("writer"))?;
    result?;
    let NetTotals {
        datagrams: socket_datagrams,
        batches: socket_batches,
        queue_full,
        drops: final_drops,
    } = net_result?;
    Ok(RecvReport {
        stats,
        socket_datagrams,
        socket_batches,
        socket_drops: final_drops.max(drops),
        queue_full,
        rcvbuf: setup.rcvbuf,
        warnings: setup.warnings,
        channels: tally.listed.into(),
        channels_verified: tally.verified,
        channels_failed: tally.failed,
        verified_bytes: tally.verified_bytes,
        channels_unlisted: tally.unlisted,
        duration: match (first, last_verdict) {
            (Some(a), Some(b)) => b.saturating_duration_since(a),
            _ => Duration::ZERO,
        },
        sessions,
        mismatches,
        nothing_arrived,
        key_use,
    })
}

/// What the net thread read in all.
struct NetTotals {
    datagrams: u64,
    batches: u64,
    /// Times the decoder queue was full.
    queue_full: u64,
    /// The socket's kernel drops at the end.
    drops: u64,
}

/// A batch that left the socket empty means a link that is not saturated:
/// read as they arrive, datagrams come a few per batch (8.7 on average at
/// 300 Mbit/s) and each batch costs a wake-up of the net thread and one of
/// the decoder. The net thread then lets the socket gather this long
/// before it reads again: batches grow with the rate, and a paced 1 Gbit/s
/// transfer costs the receiver a third less CPU, for at most this much
/// latency. A saturated link fills every batch and never waits.
const COALESCE: Duration = Duration::from_millis(1);
/// Waiting needs a receive buffer that holds what arrives meanwhile many
/// times over (1 ms at 1 Gbit/s is 125 KB; the default buffer is 250 ms of
/// the configured rate).
const COALESCE_MIN_RCVBUF: usize = 2 << 20;

/// The net thread: drains the socket, nothing else.
fn net_loop(
    mut udp: BatchReceiver,
    clock: MonotonicClock,
    tx: &SyncSender<NetBatch>,
    pool: &BufferPool,
    stop: &AtomicBool,
    progress: &RecvProgress,
) -> Result<NetTotals, PipelineError> {
    let mut total = 0u64;
    let mut batches = 0u64;
    let mut queue_full = 0u64;
    // A buffer that came back empty (timeout) is used again at once.
    let mut spare: Option<NetBatch> = None;
    let may_coalesce = udp.setup().rcvbuf >= COALESCE_MIN_RCVBUF;
    let mut coalesce = false;
    while !stop.load(Ordering::Relaxed) {
        if coalesce {
            thread::sleep(COALESCE);
        }
        let mut out = spare
            .take()
            .or_else(|| pool.take())
            .unwrap_or_else(|| NetBatch {
                at: Timestamp::ZERO,
                datagrams: udp.new_buffer(),
                drops: 0,
            });
        udp.recv_into(&mut out.datagrams, Some(Duration::from_millis(50)))?;
        if out.datagrams.is_empty() {
            spare = Some(out);
            continue;
        }
        out.at = clock.now();
        coalesce = may_coalesce && out.datagrams.messages() < out.datagrams.slots();
        let n = out.datagrams.len() as u64;
        total += n;
        batches += 1;
        progress.datagrams.fetch_add(n, Ordering::Relaxed);
        progress.batches.fetch_add(1, Ordering::Relaxed);
        out.drops = udp.socket_drops();
        progress.socket_drops.store(out.drops, Ordering::Relaxed);
        match tx.try_send(out) {
            Ok(()) => {}
            Err(mpsc::TrySendError::Full(out)) => {
                queue_full += 1;
                if tx.send(out).is_err() {
                    break;
                }
            }
            Err(mpsc::TrySendError::Disconnected(_)) => break,
        }
    }
    let drops = udp.socket_drops_now().unwrap_or(0).max(udp.socket_drops());
    Ok(NetTotals {
        datagrams: total,
        batches,
        queue_full,
        drops,
    })
}

/// The writer thread: feeds the sink, returns the outcomes' tally (the
/// last `list` of them listed).
fn writer_loop<S: Sink>(
    mut sink: S,
    rx: &Rx<SinkEvent>,
    fail: &mpsc::Sender<SinkSignal>,
    progress: &RecvProgress,
    list: usize,
) -> OutcomeTally {
    let mut outcomes = OutcomeTally::new(list);
    while let Ok(ev) = rx.recv() {
        let handled = if let SinkEvent::Data { key, offset, data } = ev {
            let (handled, back) = sink.handle_data(key, offset, data);
            if let Some(buffer) = back {
                let _ = fail.send(SinkSignal::Recycle(buffer));
            }
            handled
        } else {
            sink.handle(ev)
        };
        match handled {
            Ok(Some(outcome)) => {
                match &outcome.verdict {
                    Verdict::Verified { blake3 } => {
                        progress.complete.fetch_add(1, Ordering::Relaxed);
                        tracing::info!(name = %outcome.name, bytes = outcome.bytes, blake3 = %blake3, location = %outcome.location, "channel verified");
                    }
                    Verdict::Failed { reason } => {
                        progress.failed.fetch_add(1, Ordering::Relaxed);
                        tracing::error!(name = %outcome.name, location = %outcome.location, "channel failed: {reason}");
                    }
                }
                progress.status.decided(&outcome, unix_time_ms());
                outcomes.add(outcome);
            }
            Ok(None) => {}
            Err(e) => {
                tracing::warn!("{e}");
                // The decoder may be gone at shutdown; the sink already
                // recorded the failure then.
                let _ = fail.send(SinkSignal::Fail(e));
            }
        }
        for key in sink.skipped() {
            let _ = fail.send(SinkSignal::Skip(key));
        }
        for (key, held) in sink.resumed() {
            let _ = fail.send(SinkSignal::Resume(key, held));
        }
    }
    outcomes
}

struct Decoder {
    core: Receiver,
    clock: MonotonicClock,
    session: Option<SessionId>,
    ev_tx: SyncSender<SinkEvent>,
    sessions: Vec<String>,
    mismatches: Vec<String>,
    seen_channels: u64,
    decided: u64,
    silent: bool,
    first: Option<Timestamp>,
    last_verdict: Option<Timestamp>,
    last_now: Timestamp,
    published: Timestamp,
    drops: u64,
    /// The socket's receive buffer as the kernel granted it (bytes).
    rcvbuf: usize,
    progress: Arc<RecvProgress>,
    admit: fn(&ChannelMeta) -> Result<(), Refusal>,
    monitor: HealthMonitor,
    started: Timestamp,
    sampled: Timestamp,
    give_up_after: Option<Duration>,
    nothing_arrived: bool,
    keys: Option<KeyReload>,
}

/// The writer thread stopped (it only does when its queue closes).
struct WriterGone;

impl Decoder {
    fn new(
        opts: &RecvOptions,
        clock: MonotonicClock,
        ev_tx: SyncSender<SinkEvent>,
        progress: &Arc<RecvProgress>,
        admit: fn(&ChannelMeta) -> Result<(), Refusal>,
        rcvbuf: usize,
    ) -> Self {
        let start = clock.now();
        let monitor = HealthMonitor::new(
            &progress.health,
            opts.silence_alarm,
            opts.config.integrity.is_keyed(),
            start,
            unix_time_ms(),
        );
        let mut core = Receiver::new(opts.config.clone(), start);
        if let Some(kernel) = crate::fec_kernel::best() {
            core.use_kernel(kernel);
        }
        Decoder {
            core,
            clock,
            session: None,
            ev_tx,
            sessions: Vec::new(),
            mismatches: Vec::new(),
            seen_channels: 0,
            decided: 0,
            silent: false,
            first: None,
            last_verdict: None,
            last_now: Timestamp::ZERO,
            published: Timestamp::ZERO,
            drops: 0,
            rcvbuf,
            progress: Arc::clone(progress),
            admit,
            monitor,
            started: start,
            sampled: start,
            give_up_after: opts.give_up_after,
            nothing_arrived: false,
            keys: opts.keys.clone(),
        }
    }

    /// Takes the key file's keys after a SIGHUP; a file that cannot be
    /// used leaves the keys in force, with a warning.
    fn reload_keys(&mut self) {
        let Some(keys) = &mut self.keys else { return };
        match keys.poll() {
            None => {}
            Some(Ok(ring)) => {
                let ids = match ring.next_id() {
                    Some(next) => format!("{} and {next}", ring.current_id()),
                    None => ring.current_id().to_string(),
                };
                if self.core.replace_keys(ring) {
                    tracing::info!(file = %keys.path().display(), "key file read again: accepting key ids {ids}");
                }
            }
            Some(Err(e)) => tracing::warn!("{e}; the keys in force stay"),
        }
    }

    fn run(
        &mut self,
        once: bool,
        expect: Option<u64>,
        net: &Rx<NetBatch>,
        pool: &BufferPool,
        fails: &Rx<SinkSignal>,
        stop: &AtomicBool,
    ) -> Result<(), PipelineError> {
        loop {
            if stop.load(Ordering::Relaxed) {
                return Ok(());
            }
            let now = self.clock.now();
            let wait = self
                .core
                .poll_timeout()
                .map_or(Duration::from_millis(50), |t| {
                    t.saturating_duration_since(now)
                })
                .min(Duration::from_millis(50));
            // The core's time follows arrival times while batches are queued,
            // so a decoder that lags behind the socket never sees datagrams
            // "from the past" (that would turn its reorder grace into zero).
            let core_now = match net.recv_timeout(wait) {
                Ok(batch) => {
                    self.first.get_or_insert(batch.at);
                    self.drops = batch.drops;
                    let at = batch.at.max(self.last_now);
                    let mut ahead = batch.datagrams.iter().skip(1);
                    for d in &batch.datagrams {
                        if let Some(next) =
                            ahead.next().filter(|n| n.data.len() >= PREFETCH_FROM_BYTES)
                        {
                            diodon_io::cache::prefetch(next.data);
                        }
                        self.core.handle_datagram(at, d.data);
                    }
                    pool.give_back(batch, self.clock.now());
                    at
                }
                Err(RecvTimeoutError::Timeout) => {
                    let now = self.clock.now();
                    pool.cool(now);
                    now.max(self.last_now)
                }
                Err(RecvTimeoutError::Disconnected) => return Ok(()),
            };
            self.last_now = core_now;
            self.take_signals(fails);
            self.core.handle_timeout(core_now);
            if self.drain().is_err() {
                return Ok(());
            }
            let stats = self.core.stats();
            let wall = unix_time_ms();
            self.monitor
                .observe(&self.progress.health, core_now, wall, &stats);
            self.monitor.observe_socket(
                &self.progress.health,
                core_now,
                wall,
                self.drops,
                self.rcvbuf,
            );
            if core_now.saturating_duration_since(self.sampled) >= Duration::from_secs(1) {
                self.sampled = core_now;
                let drops = self.progress.socket_drops.load(Ordering::Relaxed);
                self.progress.status.sample(wall, &stats, drops);
            }
            if let Some(limit) = self.give_up_after.filter(|&d| {
                stats.accepted == 0 && core_now.saturating_duration_since(self.started) >= d
            }) {
                tracing::warn!(
                    "nothing arrived: no valid datagram within {:.1} s (--timeout)",
                    limit.as_secs_f64()
                );
                self.nothing_arrived = true;
                return Ok(());
            }
            if core_now.saturating_duration_since(self.published) >= Duration::from_millis(100) {
                self.published = core_now;
                if let Ok(mut snap) = self.progress.snapshot.lock() {
                    *snap = self.core.stats();
                }
                if let Ok(mut keys) = self.progress.key_use.lock() {
                    *keys = self.core.key_use();
                }
                self.reload_keys();
            }
            if once
                && self.silent
                && self.seen_channels > 0
                && self.core.open_channels() == 0
                && self.decided >= self.seen_channels
            {
                tracing::info!("transfer over: every channel decided and the link is silent");
                return Ok(());
            }
            if expect.is_some_and(|n| self.decided >= n) {
                tracing::info!(
                    channels = self.decided,
                    "transfer over: the expected channels are decided"
                );
                return Ok(());
            }
        }
    }

    /// What the writer thread decided about channels: failures, files it
    /// already holds, blocks it kept from an earlier pass.
    fn take_signals(&mut self, fails: &Rx<SinkSignal>) {
        while let Ok(signal) = fails.try_recv() {
            match signal {
                SinkSignal::Fail(e) if Some(e.key.session) == self.core.session_id() => {
                    self.core.reject_channel(e.key.channel, e.why);
                }
                SinkSignal::Skip(key) => {
                    // Its outcome came from the sink: decided, unless
                    // the core had decided it already.
                    if Some(key.session) == self.core.session_id()
                        && self.core.skip_channel(key.channel)
                    {
                        self.decided += 1;
                        self.progress.status.closed(key);
                    }
                }
                SinkSignal::Resume(key, held) if Some(key.session) == self.core.session_id() => {
                    match self.core.hold_blocks(key.channel, &held) {
                        Ok(n) => {
                            tracing::info!(%key, blocks = n, "blocks kept from an earlier pass are not needed again");
                        }
                        Err(e) => {
                            tracing::info!(%key, "blocks kept from an earlier pass not used: {e}");
                        }
                    }
                }
                SinkSignal::Recycle(buffer) => self.core.recycle(buffer),
                SinkSignal::Fail(_) | SinkSignal::Resume(..) => {}
            }
        }
    }

    /// Counts a verdict on `channel` and takes it off the status board.
    fn count_verdict(&mut self, channel: ChannelId) -> ChannelKey {
        self.decided += 1;
        self.last_verdict = Some(self.clock.now());
        let key = self.key(channel);
        self.progress.status.closed(key);
        key
    }

    fn key(&self, channel: ChannelId) -> ChannelKey {
        ChannelKey {
            session: self.session.unwrap_or(SessionId(0)),
            channel,
        }
    }

    fn forward(&self, ev: SinkEvent) -> Result<(), WriterGone> {
        self.ev_tx.send(ev).map_err(|_| WriterGone)
    }

    /// A channel's open: admitted (to the sink) or refused (failed in the core).
    fn opened(&mut self, channel: ChannelId, meta: ChannelMeta) -> Result<(), WriterGone> {
        let key = self.key(channel);
        self.seen_channels += 1;
        self.progress
            .current_size
            .store(meta.size.unwrap_or(0), Ordering::Relaxed);
        match (self.admit)(&meta) {
            Ok(()) => {
                tracing::info!(%key, name = %meta.name.escape_debug(), size = ?meta.size, "channel opened");
                self.progress
                    .status
                    .opened(key, &meta.name, meta.size, unix_time_ms());
                self.forward(SinkEvent::Opened { key, meta })
            }
            Err(why) => {
                tracing::warn!(%key, name = %meta.name.escape_debug(), "channel refused: {why}");
                self.core.reject_channel(channel, why.clone());
                self.forward(SinkEvent::Refused { key, meta, why })
            }
        }
    }

    fn drain(&mut self) -> Result<(), WriterGone> {
        while let Some(ev) = self.core.poll_event() {
            self.monitor
                .on_event(&self.progress.health, unix_time_ms(), &ev);
            match ev {
                Event::SessionStarted { session } => {
                    tracing::info!(%session, "session started");
                    self.session = Some(session);
                    self.sessions.push(session.to_string());
                }
                Event::SessionRestarted { new, .. } => {
                    // The health monitor raised the alarm (logged once there).
                    self.session = Some(new);
                    self.sessions.push(new.to_string());
                }
                Event::SessionExpired { session } => {
                    tracing::info!(%session, "session expired");
                }
                Event::SessionParams { beacon } => {
                    tracing::info!(
                        symbol = beacon.symbol_size,
                        k = beacon.block_symbols,
                        m = beacon.repair_symbols,
                        interleave = beacon.interleave_depth,
                        rate_bps = beacon.rate_bps,
                        "session parameters"
                    );
                }
                Event::ChannelOpened { channel, meta } => self.opened(channel, meta)?,
                Event::ChannelData {
                    channel,
                    offset,
                    data,
                } => {
                    self.progress
                        .bytes
                        .fetch_add(data.len() as u64, Ordering::Relaxed);
                    let key = self.key(channel);
                    self.progress.status.progressed(key, data.len() as u64);
                    self.forward(SinkEvent::Data { key, offset, data })?;
                }
                Event::ChannelGap {
                    channel,
                    block,
                    count,
                } => {
                    let key = self.key(channel);
                    tracing::warn!(%key, block, count, "blocks lost: the channel steps over them");
                    self.forward(SinkEvent::Gap { key, block, count })?;
                }
                Event::ChannelPartial { channel, held, .. } => {
                    let key = self.key(channel);
                    tracing::info!(%key, held = held.len(), blocks = held.total(), "blocks of a sync file kept for a later pass");
                    self.forward(SinkEvent::Partial { key, held })?;
                }
                Event::ChannelAssembled {
                    channel,
                    bytes,
                    digest,
                } => {
                    let key = self.count_verdict(channel);
                    self.forward(SinkEvent::Assembled { key, bytes, digest })?;
                }
                Event::ChannelComplete {
                    channel,
                    bytes,
                    digest,
                } => {
                    let key = self.count_verdict(channel);
                    self.forward(SinkEvent::Complete { key, bytes, digest })?;
                }
                Event::ChannelFailed { channel, reason } => {
                    let key = self.count_verdict(channel);
                    // A channel whose open never arrived still counts as seen.
                    self.seen_channels = self.seen_channels.max(self.decided);
                    self.forward(SinkEvent::Failed { key, reason })?;
                }
                Event::ConfigMismatch(m) => {
                    // The health monitor logged the alarm.
                    self.mismatches.push(health::describe(&m));
                }
                Event::LinkSilent { .. } => {
                    self.silent = true;
                    tracing::debug!("link silent");
                }
                Event::LinkResumed => {
                    self.silent = false;
                    tracing::debug!("link resumed");
                }
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn batch(drops: u64) -> NetBatch {
        NetBatch {
            at: Timestamp::ZERO,
            datagrams: RecvBuffer::default(),
            drops,
        }
    }

    #[test]
    fn idle_buffers_keep_their_pages_until_they_stayed_idle_a_second() {
        let pool = BufferPool::default();
        let t0 = Timestamp::from_millis(1_000);
        for i in 0..12 {
            pool.give_back(batch(i), t0);
        }
        // A bulk transfer hands buffers back faster than a second: all warm.
        assert_eq!(pool.counts(), (12, 0));
        pool.cool(t0 + Duration::from_millis(999));
        assert_eq!(pool.counts(), (12, 0));
        // Idle a second: all but the warm ones give their pages back.
        pool.cool(t0 + COOL_AFTER);
        assert_eq!(pool.counts(), (WARM_BUFFERS, 12 - WARM_BUFFERS));
        // The buffer reused next is the one returned last.
        assert_eq!(pool.take().map(|b| b.drops), Some(11));
        // Returning one cools nothing younger than a second.
        pool.give_back(batch(99), t0 + COOL_AFTER);
        assert_eq!(pool.counts(), (WARM_BUFFERS, 12 - WARM_BUFFERS));
    }
}
