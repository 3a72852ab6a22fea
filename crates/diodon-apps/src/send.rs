//! The sending pipeline: source threads feed a bounded queue; one core thread
//! owns the [`Sender`] state machine, paces with the monotonic clock and hands
//! GSO batches to [`BatchSender`].
//!
//! ```text
//!  source thread(s) ──SourceMsg──► sync_channel(queue_chunks) ──► core thread
//!    open / data / finish / abort   (full: the source blocks)      │ write ≤ writable()
//!                                                                  │ poll_transmit ─► BatchSender::send
//!                                                                  │ sleep_until(poll_timeout)
//!                                                                  ▼ events ─► SendReport
//! ```
//!
//! A source gets a [`SourceHandle`]; each channel it opens is identified by a
//! token (the core's [`ChannelId`] is assigned on the core thread). Messages
//! of one source keep their order. When every handle is dropped and the core
//! is idle, the thread lingers a few beacons (so the receiver sees the final
//! channel table) and returns its [`SendReport`].
//!
//! A block's buffer goes round: a reader fills it ([`SourceHandle::block_buffer`]),
//! the core takes it over as the block, and once the block's group went
//! out the core thread puts it back among the spare buffers (at most
//! [`SPARE_BLOCKS`], one set per process) for the next read. A fresh buffer
//! per block had the kernel fault in and zero its pages on every read.
//!
//! A whole block is also encoded where it is read: [`SourceHandle::data`]
//! runs the Reed–Solomon encode of a full block on the source's thread
//! (`diodon_proto::BlockCoding`, while the block is in that thread's
//! cache) and the core sends the repair symbols as they came
//! (`Sender::write_encoded_block`). The core thread is left to cut, seal
//! and send. Repair buffers go round like block buffers.

use crate::key_file::KeyReload;
use crate::multilink::{Change, Flows, LinkHealth, LinkWatch};
use crate::PipelineError;
use diodon_counters::{CounterSet as _, Snapshot};
use diodon_io::{
    BatchSender, MonotonicClock, SenderCounters, SetupWarning, UdpConfig, UdpError,
    MAX_GSO_SEGMENTS,
};
use diodon_proto::pool::BufferPool;
use diodon_proto::{
    BlockCoding, ChannelId, ChannelMeta, FullBlock, Sender, SenderConfig, SenderEvent, SenderStats,
    SessionId,
};
use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError, SyncSender, TryRecvError};
use std::sync::{Arc, LazyLock, Mutex};
use std::time::Duration;

/// Bytes the core thread takes from its sources before it sends again. The
/// core hashes and cuts (encodes) what it takes; taking a whole 8 MiB core
/// buffer at once delayed the first datagram of a file by ~65 ms.
const INGEST_BUDGET: usize = 1 << 20;

/// Block buffers kept between the core threads, which are done with them,
/// and the readers, which fill them again: at most this many (per process).
pub const SPARE_BLOCKS: usize = 8;

static SPARES: LazyLock<Mutex<BufferPool>> =
    LazyLock::new(|| Mutex::new(BufferPool::new(SPARE_BLOCKS)));

/// The repair buffers of blocks the core is done with, for the sources
/// that encode their blocks (as many as block buffers).
static SPARE_REPAIRS: LazyLock<Mutex<BufferPool>> =
    LazyLock::new(|| Mutex::new(BufferPool::new(SPARE_BLOCKS)));

/// Moves the core's spare block and repair buffers to the readers' spares,
/// up to [`SPARE_BLOCKS`] each.
fn keep_spare_blocks(sender: &mut Sender) {
    if let Ok(mut repairs) = SPARE_REPAIRS.lock() {
        while !repairs.is_full() {
            match sender.spare_repair() {
                Some(r) => repairs.put(r),
                None => break,
            }
        }
    }
    let Ok(mut spares) = SPARES.lock() else {
        return;
    };
    while !spares.is_full() {
        match sender.spare_block() {
            Some(b) => spares.put(b),
            None => break,
        }
    }
}

/// What a source tells the core thread.
#[derive(Debug)]
pub enum SourceMsg {
    /// A new channel; `token` names it in the following messages.
    Open {
        /// Source-chosen id (from [`SourceHandle::open`]).
        token: u64,
        /// Metadata announced to the receiver.
        meta: ChannelMeta,
        /// The source hashes the bytes itself and gives the digest with
        /// `Finish` ([`SourceHandle::open_digested`]).
        digested: bool,
    },
    /// Bytes of the channel, in order.
    Data {
        /// Channel token.
        token: u64,
        /// The bytes.
        data: Vec<u8>,
    },
    /// The channel's next bytes, a whole block encoded by the source
    /// ([`SourceHandle::data`] of a full block).
    Block {
        /// Channel token.
        token: u64,
        /// The block and its repair symbols.
        block: FullBlock,
    },
    /// Framed records of a `Datagrams` channel (`diodon_proto::records`),
    /// each handed to the core whole (`Sender::write_record`, which aligns
    /// them to blocks on a packet channel).
    Records {
        /// Channel token.
        token: u64,
        /// Records, each a 2-byte length and its payload.
        data: Vec<u8>,
    },
    /// End of the channel's bytes.
    Finish {
        /// Channel token.
        token: u64,
        /// BLAKE3 of every byte, from a source that opened the channel
        /// with [`SourceHandle::open_digested`].
        digest: Option<[u8; 32]>,
    },
    /// The source failed (read error, connection reset): the receiver fails
    /// the channel.
    Abort {
        /// Channel token.
        token: u64,
        /// Why (logged).
        reason: String,
    },
}

/// The queue closed: the core thread has stopped.
#[derive(Debug, Clone, Copy, thiserror::Error)]
#[error("the sender pipeline has stopped")]
pub struct Closed;

/// A producer's end of the sender's bounded input queue. Clone it per source
/// thread; the pipeline ends when every clone is dropped.
///
/// With several links (`crate::multilink`) there is one queue per link: a
/// channel goes to the link its key's stable hash picks among the links
/// that are up, and the link is written into its token (`token % links`),
/// so every later message of the channel finds the same queue.
#[derive(Debug, Clone)]
pub struct SourceHandle {
    links: Arc<[LinkInput]>,
    /// The links of keyed flows (`open_keyed`).
    flows: Arc<Mutex<Flows>>,
    tokens: Arc<AtomicU64>,
    chunk: usize,
}

/// One link's queue, whether the link is up, and how its core encodes
/// a full block (when the sources encode them).
#[derive(Debug)]
pub(crate) struct LinkInput {
    pub(crate) tx: SyncSender<SourceMsg>,
    pub(crate) health: Option<Arc<LinkHealth>>,
    pub(crate) coding: Option<BlockCoding>,
}

impl SourceHandle {
    /// Bytes a source reading a file should put in each data message: one
    /// full block of the core when [`queue_for_blocks`] made the queue
    /// (the core takes such a buffer over without copying it), else
    /// [`CHUNK`].
    pub fn chunk(&self) -> usize {
        self.chunk
    }

    /// An empty buffer for the next [`SourceHandle::chunk`] bytes a reader
    /// reads: a block buffer the core is done with when there is one (its
    /// pages are mapped already), else a new one.
    pub fn block_buffer(&self) -> Vec<u8> {
        let spare = SPARES.lock().ok().and_then(|mut s| s.take_kept(self.chunk));
        spare.unwrap_or_else(|| Vec::with_capacity(self.chunk))
    }

    /// Announces a channel and returns its token. With several links, the
    /// stable hash of the channel's name picks its link among those up.
    pub fn open(&self, meta: ChannelMeta) -> Result<u64, Closed> {
        let link = self.link_of(&meta);
        self.open_on(meta, link, false)
    }

    /// The link a channel takes: the stable hash of its name picks it
    /// among those up.
    fn link_of(&self, meta: &ChannelMeta) -> usize {
        if self.links.len() == 1 {
            0
        } else {
            crate::multilink::pick(meta.name.as_bytes(), self.links.len(), |i| self.is_up(i))
        }
    }

    /// [`SourceHandle::open`] for a source that hashes what it sends (BLAKE3
    /// of every byte, in order: a file source hashes each block as it
    /// reads it, on its own thread, while the block is in its cache) and
    /// ends the channel with [`SourceHandle::finish_digested`]. The core
    /// thread, which encodes and sends every byte of every channel, then
    /// does not hash them too.
    pub fn open_digested(&self, meta: ChannelMeta) -> Result<u64, Closed> {
        let link = self.link_of(&meta);
        self.open_on(meta, link, true)
    }

    /// Announces a channel of the flow `key` (the segments of one Kafka
    /// partition): every channel of a flow takes one link, which it leaves
    /// only when that link goes down, and flows spread evenly
    /// (`crate::multilink`).
    pub fn open_keyed(&self, meta: ChannelMeta, key: &[u8]) -> Result<u64, Closed> {
        let link = if self.links.len() == 1 {
            0
        } else {
            let mut flows = self.flows.lock().map_err(|_| Closed)?;
            flows.pick(key, self.links.len(), |i| self.is_up(i))
        };
        self.open_on(meta, link, false)
    }

    fn is_up(&self, link: usize) -> bool {
        self.links[link].health.as_ref().is_none_or(|h| h.is_up())
    }

    /// Announces a channel on link number `link`.
    fn open_on(&self, meta: ChannelMeta, link: usize, digested: bool) -> Result<u64, Closed> {
        let n = self.links.len() as u64;
        let token = self.tokens.fetch_add(1, Ordering::Relaxed) * n + link as u64;
        self.links[link]
            .tx
            .send(SourceMsg::Open {
                token,
                meta,
                digested,
            })
            .map_err(|_| Closed)?;
        Ok(token)
    }

    /// The queue of the link that carries `token`.
    fn tx(&self, token: u64) -> &SyncSender<SourceMsg> {
        &self.links[self.link_index(token)].tx
    }

    /// The link that carries `token`.
    fn link_index(&self, token: u64) -> usize {
        (token % self.links.len() as u64) as usize
    }

    /// The handle with each link's sources encoding full blocks as that
    /// link's core, `configs[i]`, would (on `kernel`, when one is given).
    #[must_use]
    pub(crate) fn encoding_blocks(
        self,
        configs: &[&SenderConfig],
        kernel: Option<&Arc<dyn diodon_proto::fec::SumKernel>>,
    ) -> Self {
        let links: Vec<LinkInput> = self
            .links
            .iter()
            .zip(configs)
            .map(|(l, config)| LinkInput {
                tx: l.tx.clone(),
                health: l.health.clone(),
                coding: Some(config.block_coding(kernel.cloned())),
            })
            .collect();
        SourceHandle {
            links: links.into(),
            ..self
        }
    }

    /// Queues bytes (blocks while the queue is full). A full block of the
    /// link's core is encoded here first, on the caller's thread.
    pub fn data(&self, token: u64, data: Vec<u8>) -> Result<(), Closed> {
        let link = &self.links[self.link_index(token)];
        let msg = match &link.coding {
            Some(coding) if data.len() == coding.block_bytes() => {
                let repair = SPARE_REPAIRS
                    .lock()
                    .ok()
                    .and_then(|mut s| s.take_kept(coding.repair_bytes().max(1)))
                    .unwrap_or_default();
                match coding.encode(data, repair) {
                    Ok(block) => SourceMsg::Block { token, block },
                    Err(data) => SourceMsg::Data { token, data },
                }
            }
            _ => SourceMsg::Data { token, data },
        };
        link.tx.send(msg).map_err(|_| Closed)
    }

    /// Queues framed records (blocks while the queue is full).
    pub fn records(&self, token: u64, data: Vec<u8>) -> Result<(), Closed> {
        self.tx(token)
            .send(SourceMsg::Records { token, data })
            .map_err(|_| Closed)
    }

    /// Queues all of `bytes` in [`CHUNK`]-sized pieces, then ends the
    /// channel (a manifest or bundle built in memory).
    pub fn data_and_finish(&self, token: u64, bytes: &[u8]) -> Result<(), Closed> {
        for chunk in bytes.chunks(CHUNK) {
            self.data(token, chunk.to_vec())?;
        }
        self.finish(token)
    }

    /// Ends the channel.
    pub fn finish(&self, token: u64) -> Result<(), Closed> {
        self.tx(token)
            .send(SourceMsg::Finish {
                token,
                digest: None,
            })
            .map_err(|_| Closed)
    }

    /// Ends a channel opened with [`SourceHandle::open_digested`]: `digest`
    /// is the BLAKE3 of every byte sent on it.
    pub fn finish_digested(&self, token: u64, digest: [u8; 32]) -> Result<(), Closed> {
        self.tx(token)
            .send(SourceMsg::Finish {
                token,
                digest: Some(digest),
            })
            .map_err(|_| Closed)
    }

    /// Gives the channel up.
    pub fn abort(&self, token: u64, reason: impl Into<String>) -> Result<(), Closed> {
        self.tx(token)
            .send(SourceMsg::Abort {
                token,
                reason: reason.into(),
            })
            .map_err(|_| Closed)
    }
}

/// How a channel ended, told to a [`SentHook`] as it happens (the report
/// lists them only at the end).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SentNotice {
    /// The token [`SourceHandle::open`] returned.
    pub token: u64,
    /// How it ended.
    pub status: SentStatus,
    /// Bytes it carried (0 unless sent).
    pub bytes: u64,
    /// Its BLAKE3 digest (when sent).
    pub digest: Option<[u8; 32]>,
    /// It failed because its link went down (aborted in flight or turned
    /// away): another link may carry it.
    pub link_lost: bool,
}

/// Called on the core thread for every channel that ends (must not block).
#[derive(Clone)]
pub struct SentHook {
    /// Told about each channel.
    pub call: Arc<dyn Fn(SentNotice) + Send + Sync>,
    /// Whether the report still lists every channel: a run that ends (a
    /// file source that sends again what a link lost); a long-running one
    /// (a sync, a Kafka source) lists none.
    pub keep_report: bool,
}

impl SentHook {
    /// A hook that the report does not duplicate.
    pub fn new(call: impl Fn(SentNotice) + Send + Sync + 'static) -> Self {
        SentHook {
            call: Arc::new(call),
            keep_report: false,
        }
    }
}

/// A hook that forwards every notice to the returned receiver (never
/// blocking the core).
pub fn notices(keep_report: bool) -> (SentHook, Receiver<SentNotice>) {
    let (tx, rx) = mpsc::channel::<SentNotice>();
    let tx = Mutex::new(tx);
    let mut hook = SentHook::new(move |n| {
        if let Ok(tx) = tx.lock() {
            let _ = tx.send(n);
        }
    });
    hook.keep_report = keep_report;
    (hook, rx)
}

impl std::fmt::Debug for SentHook {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("SentHook")
    }
}

/// How to run the sender.
#[derive(Debug, Clone)]
pub struct SendOptions {
    /// The core's configuration.
    pub config: SenderConfig,
    /// Where datagrams go.
    pub dest: SocketAddr,
    /// Local socket.
    pub udp: UdpConfig,
    /// Capacity of the input queue, in messages (each data message is one
    /// chunk of at most [`CHUNK`] bytes).
    pub queue_chunks: usize,
    /// How long to keep sending beacons once everything left.
    pub linger: Duration,
    /// Told about every channel as it ends (the sync scheduler counts passes).
    pub on_sent: Option<SentHook>,
    /// The key file, read again on SIGHUP (keyed modes).
    pub keys: Option<KeyReload>,
}

/// Bytes per data message that sources should read at once.
pub const CHUNK: usize = 256 * 1024;

/// Live counters for a progress display (updated by the core thread).
#[derive(Debug, Default)]
pub struct SendProgress {
    /// Channel bytes accepted by the core.
    pub bytes: AtomicU64,
    /// Datagrams handed to the kernel.
    pub datagrams: AtomicU64,
    /// Total bytes expected (sum of known file sizes), 0 if unknown.
    pub total_hint: AtomicU64,
    /// The core's and the socket's counters, refreshed about every 100 ms
    /// (for metrics exporters).
    pub snapshot: Mutex<(SenderStats, SenderCounters)>,
    /// The key id datagrams are sealed with now (keyed modes), refreshed
    /// with `snapshot`.
    pub key_id: Mutex<Option<u8>>,
}

/// A channel the sender finished.
///
/// In JSON it has the shape of the receiver's [`crate::ChannelOutcome`]
/// (docs/json.md): `name`, `bytes`, `verdict` (`sent`, `aborted`,
/// `refused`), `blake3` when the digest is known, `reason` when refused.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(into = "SentChannelJson", try_from = "SentChannelJson")]
pub struct SentChannel {
    /// Channel name.
    pub name: String,
    /// Bytes.
    pub bytes: u64,
    /// BLAKE3 digest, hex (empty when aborted or refused).
    pub digest: String,
    /// How it ended.
    pub status: SentStatus,
}

/// How a channel ended on the sending side. Reports print it as `sent`,
/// `aborted` or `refused: <why>`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SentStatus {
    /// Every symbol and every trailer copy left.
    Sent,
    /// Aborted: its trailer tells the receiver to fail it.
    Aborted,
    /// The core refused to open it (the core's `SendError`, as text).
    Refused(String),
}

impl std::fmt::Display for SentStatus {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            SentStatus::Sent => f.write_str("sent"),
            SentStatus::Aborted => f.write_str("aborted"),
            SentStatus::Refused(why) => write!(f, "refused: {why}"),
        }
    }
}

/// [`SentChannel`] as it is written in JSON.
#[derive(serde::Serialize, serde::Deserialize)]
struct SentChannelJson {
    name: String,
    bytes: u64,
    verdict: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    blake3: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    reason: Option<String>,
}

impl From<SentChannel> for SentChannelJson {
    fn from(c: SentChannel) -> Self {
        let (verdict, reason) = match c.status {
            SentStatus::Sent => ("sent", None),
            SentStatus::Aborted => ("aborted", None),
            SentStatus::Refused(why) => ("refused", Some(why)),
        };
        SentChannelJson {
            name: c.name,
            bytes: c.bytes,
            verdict: verdict.into(),
            blake3: c.digest,
            reason,
        }
    }
}

impl TryFrom<SentChannelJson> for SentChannel {
    type Error = String;
    fn try_from(j: SentChannelJson) -> Result<Self, String> {
        let status = match (j.verdict.as_str(), j.reason) {
            ("sent", _) => SentStatus::Sent,
            ("aborted", _) => SentStatus::Aborted,
            ("refused", why) => SentStatus::Refused(why.unwrap_or_default()),
            (other, _) => return Err(format!("unknown sent-channel verdict {other:?}")),
        };
        Ok(SentChannel {
            name: j.name,
            bytes: j.bytes,
            digest: j.blake3,
            status,
        })
    }
}

/// What the sender did.
#[derive(Debug, Clone)]
pub struct SendReport {
    /// Session id.
    pub session: SessionId,
    /// Core counters.
    pub stats: SenderStats,
    /// Socket counters (ENOBUFS retries etc.).
    pub io: SenderCounters,
    /// Every channel, in the order it ended (empty when `on_sent` was set:
    /// the hook was told about each one instead).
    pub channels: Vec<SentChannel>,
    /// From the first to the last datagram of channel data (without linger).
    pub duration: Duration,
    /// Socket setup warnings.
    pub warnings: Vec<SetupWarning>,
    /// Whether GSO was used.
    pub gso: bool,
}

impl SendReport {
    /// Channels that did not go out complete.
    pub fn failed(&self) -> usize {
        self.channels
            .iter()
            .filter(|c| c.status != SentStatus::Sent)
            .count()
    }
}

/// Creates the bounded input queue: the handle for sources, the receiving end
/// for [`run_sender`].
pub fn queue(capacity: usize) -> (SourceHandle, Receiver<SourceMsg>) {
    queue_of(capacity, CHUNK)
}

/// Largest block that sources read whole (larger blocks are read in
/// [`CHUNK`]s and copied): bounds the memory of one queued message.
pub const MAX_BLOCK_CHUNK: usize = 4 << 20;

/// The input queue of a core whose full blocks hold `block_bytes`: sources
/// read one block per message ([`SourceHandle::chunk`]) when it is at most
/// [`MAX_BLOCK_CHUNK`], and the queue holds about the bytes of `capacity`
/// messages of [`CHUNK`] (at least 2 messages).
pub fn queue_for_blocks(
    capacity: usize,
    block_bytes: usize,
) -> (SourceHandle, Receiver<SourceMsg>) {
    let (messages, chunk) = queue_shape(capacity, block_bytes);
    queue_of(messages, chunk)
}

/// Messages a queue holds and bytes per data message, for
/// [`queue_for_blocks`].
fn queue_shape(capacity: usize, block_bytes: usize) -> (usize, usize) {
    if block_bytes == 0 || block_bytes > MAX_BLOCK_CHUNK {
        return (capacity, CHUNK);
    }
    let messages = (capacity.saturating_mul(CHUNK) / block_bytes).max(2);
    (messages, block_bytes)
}

fn queue_of(capacity: usize, chunk: usize) -> (SourceHandle, Receiver<SourceMsg>) {
    let (tx, rx) = mpsc::sync_channel(capacity.max(1));
    (
        SourceHandle {
            links: Arc::new([LinkInput {
                tx,
                health: None,
                coding: None,
            }]),
            flows: Arc::default(),
            tokens: Arc::new(AtomicU64::new(1)),
            chunk,
        },
        rx,
    )
}

/// One input queue per link of `links`, each shaped like
/// [`queue_for_blocks`]'s, behind one handle that spreads channels over
/// the links that are up.
pub(crate) fn link_queues(
    capacity: usize,
    block_bytes: usize,
    links: &[Arc<LinkHealth>],
) -> (SourceHandle, Vec<Receiver<SourceMsg>>) {
    let (messages, chunk) = queue_shape(capacity, block_bytes);
    let (inputs, queues): (Vec<_>, Vec<_>) = links
        .iter()
        .map(|h| {
            let (tx, rx) = mpsc::sync_channel(messages.max(1));
            let health = Some(Arc::clone(h));
            let coding = None;
            (LinkInput { tx, health, coding }, rx)
        })
        .unzip();
    (
        SourceHandle {
            links: inputs.into(),
            flows: Arc::default(),
            tokens: Arc::new(AtomicU64::new(1)),
            chunk,
        },
        queues,
    )
}

struct Chan {
    id: Option<ChannelId>,
    name: String,
}

/// A channel the core is sending: its name and the source's token.
struct Open {
    name: String,
    token: u64,
}

/// Bytes, records or an encoded block taken from a source but not yet
/// into the core.
struct Pending {
    id: ChannelId,
    input: Input,
    /// Bytes of `Bytes` or `Records` already in the core.
    off: usize,
}

/// What a source handed over, as the core takes it.
enum Input {
    /// A channel's bytes (a whole block of them is taken over, not copied).
    Bytes(Vec<u8>),
    /// Framed records of a `Datagrams` channel, each taken whole.
    Records(Vec<u8>),
    /// A whole block the source encoded, taken with its repair symbols.
    Block(FullBlock),
}

impl Pending {
    fn new(id: ChannelId, input: Input) -> Self {
        Pending { id, input, off: 0 }
    }

    /// Hands as much as the core takes; `true` when all of it went in.
    fn feed(&mut self, now: diodon_proto::Timestamp, sender: &mut Sender) -> (bool, usize) {
        let block_bytes = sender.config().block_bytes();
        match &mut self.input {
            Input::Block(_) => {
                let Input::Block(block) =
                    std::mem::replace(&mut self.input, Input::Bytes(Vec::new()))
                else {
                    unreachable!("matched a block");
                };
                // Taken whole with its repair symbols, or waits whole for room.
                let n = block.len();
                match sender.write_encoded_block(now, self.id, block) {
                    Ok(None) => (true, n),
                    Ok(Some(back)) => {
                        self.input = Input::Block(back);
                        (false, 0)
                    }
                    Err(e) => {
                        tracing::warn!("write refused: {e}");
                        (true, 0)
                    }
                }
            }
            Input::Bytes(data) if self.off == 0 && data.len() == block_bytes => {
                // A whole block (a file read block by block): taken over, not
                // copied, or waits whole for room.
                let n = data.len();
                match sender.write_block(now, self.id, std::mem::take(data)) {
                    Ok(None) => (true, n),
                    Ok(Some(back)) => {
                        *data = back;
                        (false, 0)
                    }
                    Err(e) => {
                        tracing::warn!("write refused: {e}");
                        (true, 0)
                    }
                }
            }
            Input::Bytes(data) => match sender.write(now, self.id, &data[self.off..]) {
                Ok(n) => {
                    self.off += n;
                    (self.off == data.len(), n)
                }
                Err(e) => {
                    tracing::warn!("write refused: {e}");
                    (true, 0)
                }
            },
            Input::Records(data) => feed_records(now, sender, self.id, data, &mut self.off),
        }
    }
}

/// Hands framed records from `data[*off..]` to the core, each whole, as far
/// as it takes them; `true` when all went in, and the bytes taken.
fn feed_records(
    now: diodon_proto::Timestamp,
    sender: &mut Sender,
    id: ChannelId,
    data: &[u8],
    off: &mut usize,
) -> (bool, usize) {
    let start = *off;
    while data.len() - *off >= diodon_proto::records::RECORD_HEADER {
        let len = usize::from(u16::from_be_bytes([data[*off], data[*off + 1]]));
        let at = *off + diodon_proto::records::RECORD_HEADER;
        let Some(payload) = data.get(at..at + len) else {
            break;
        };
        match sender.write_record(now, id, payload) {
            Ok(true) => *off = at + len,
            Ok(false) => return (false, *off - start),
            Err(e) => {
                // A source checks sizes first; a record refused here
                // is skipped with a warning, the rest goes on.
                tracing::warn!("record refused: {e}");
                *off = at + len;
            }
        }
    }
    (true, *off - start)
}

/// The core thread's state.
struct Core {
    sender: Sender,
    udp: BatchSender,
    dest: SocketAddr,
    clock: MonotonicClock,
    tokens: HashMap<u64, Chan>,
    by_id: HashMap<ChannelId, Open>,
    on_sent: Option<SentHook>,
    pending: Option<Pending>,
    input_done: bool,
    report: Vec<SentChannel>,
    first_send: Option<diodon_proto::Timestamp>,
    last_data: diodon_proto::Timestamp,
    progress: Arc<SendProgress>,
    buf: Vec<u8>,
    /// Extra wait after the pacer's next permission so that a whole GSO
    /// batch accumulates (one syscall per batch, not per datagram).
    batch_gap: Duration,
    /// One link of several: its path, watched.
    link: Option<LinkWatch>,
    /// Channels in the core when the link went down: they end as lost.
    lost_to_link: std::collections::HashSet<ChannelId>,
    /// Channels that ended sent lately (one link of several): when, their
    /// token and name.
    recent_sent: std::collections::VecDeque<(diodon_proto::Timestamp, u64, String)>,
}

/// How long before a link is seen down a channel that ended sent may still
/// have lost datagrams to it (looks every 100 ms, a loaded machine).
const RECENTLY_SENT: Duration = Duration::from_millis(500);

/// Runs the core thread's loop on the calling thread until every
/// [`SourceHandle`] is dropped and everything left (or `stop` is set, which
/// aborts the open channels first).
pub fn run_sender(
    opts: &SendOptions,
    input: &Receiver<SourceMsg>,
    progress: Arc<SendProgress>,
    stop: &AtomicBool,
) -> Result<SendReport, PipelineError> {
    let udp = BatchSender::open(&opts.udp)?;
    run_sender_on(udp, opts, input, progress, stop)
}

/// [`run_sender`] on a socket already opened from `opts.udp` (a caller
/// that restricts itself opens the socket first, with its privileges).
pub fn run_sender_on(
    udp: BatchSender,
    opts: &SendOptions,
    input: &Receiver<SourceMsg>,
    progress: Arc<SendProgress>,
    stop: &AtomicBool,
) -> Result<SendReport, PipelineError> {
    run_link_sender(udp, opts, input, progress, stop, None)
}

/// [`run_sender_on`] for one link of several (`crate::multilink`): the
/// core watches its link's path, aborts what is open on it when it goes
/// down and turns new channels away (aborted) until it is up again; a send that fails
/// on the path does not end the run.
pub(crate) fn run_link_sender(
    udp: BatchSender,
    opts: &SendOptions,
    input: &Receiver<SourceMsg>,
    progress: Arc<SendProgress>,
    stop: &AtomicBool,
    link: Option<Arc<LinkHealth>>,
) -> Result<SendReport, PipelineError> {
    let clock = MonotonicClock::new();
    let mut config = opts.config.clone();
    if config.start_unix_ms == 0 {
        config.start_unix_ms = diodon_io::unix_time_ms();
    }
    let session = SessionId(rand::random::<u64>());
    let now = clock.now();
    let batch_gap = if config.rate.is_unlimited() {
        Duration::ZERO
    } else {
        let bits = (config.max_batch.saturating_sub(1)
            * (config.datagram_len() + config.per_datagram_overhead)) as u64
            * 8;
        Duration::from_nanos(bits.saturating_mul(1_000_000_000) / config.rate.bps())
            .min(Duration::from_millis(2))
    };
    let integrity = config.integrity.describe();
    let mut sender = Sender::new(config, session, now)?;
    if let Some(kernel) = crate::fec_kernel::best() {
        sender.use_kernel(kernel);
    }
    sender.use_prefetch(diodon_io::cache::prefetch);
    tracing::info!(%session, dest = %opts.dest, local = %udp.local_addr(), gso = udp.gso_enabled(), integrity, encode = crate::fec_kernel::describe(), "sender started");
    for w in &udp.setup().warnings {
        tracing::warn!("{w}");
    }
    let mut core = Core {
        sender,
        udp,
        dest: opts.dest,
        clock,
        tokens: HashMap::new(),
        by_id: HashMap::new(),
        on_sent: opts.on_sent.clone(),
        pending: None,
        input_done: false,
        report: Vec::new(),
        first_send: None,
        last_data: now,
        progress,
        buf: Vec::with_capacity(70_000),
        batch_gap,
        link: link.map(|h| LinkWatch::new(h, opts.udp.device.clone())),
        lost_to_link: std::collections::HashSet::new(),
        recent_sent: std::collections::VecDeque::new(),
    };
    let mut idle_since: Option<diodon_proto::Timestamp> = None;
    let mut stopping = false;
    let mut snapshot_at = now;
    let mut keys = opts.keys.clone();
    loop {
        let mut now = core.clock.now();
        if now.saturating_duration_since(snapshot_at) >= SNAPSHOT_EVERY {
            snapshot_at = now;
            core.publish();
            core.look_at_link(now);
            if let Some(k) = &mut keys {
                core.reload_keys(now, k);
            }
        }
        if !stopping && stop.load(Ordering::Relaxed) {
            stopping = true;
            core.abort_all(now, "sender stopped");
        }
        core.ingest(now, input);
        core.sender.handle_timeout(now);
        while core.send_batch(now)? {
            now = core.clock.now();
            core.ingest(now, input);
        }
        core.drain_events();
        if core.input_done && core.pending.is_none() && core.sender.is_idle() {
            let since = *idle_since.get_or_insert(now);
            if now.saturating_duration_since(since) >= opts.linger {
                break;
            }
        } else {
            idle_since = None;
        }
        core.wait(now, input);
    }
    let duration = core.first_send.map_or(Duration::ZERO, |f| {
        core.last_data.saturating_duration_since(f)
    });
    core.publish();
    tracing::info!(%session, "sender finished");
    Ok(SendReport {
        session,
        stats: core.sender.stats().clone(),
        io: core.udp.counters(),
        channels: core.report,
        duration,
        warnings: core.udp.setup().warnings.clone(),
        gso: core.udp.gso_enabled(),
    })
}

/// One more link of a sender: its receiver, its socket and its core's
/// settings (symbol size and overhead follow the link's MTU and family).
#[derive(Debug, Clone)]
pub struct LinkTarget {
    /// The link's receiver.
    pub dest: SocketAddr,
    /// Its local socket.
    pub udp: UdpConfig,
    /// Its core.
    pub config: SenderConfig,
}

/// The input side of a run over `links` (one or several, `health` one
/// each in the same order): the sources' handle and each link's queue.
pub(crate) fn link_inputs(
    links: &[(SendOptions, BatchSender)],
    health: &[Arc<LinkHealth>],
) -> (SourceHandle, Vec<Receiver<SourceMsg>>) {
    let (chunks, block) = links
        .first()
        .map_or((1, 0), |(o, _)| (o.queue_chunks, o.config.block_bytes()));
    let (handle, queues) = if links.len() == 1 {
        let (h, q) = queue_for_blocks(chunks, block);
        (h, vec![q])
    } else {
        link_queues(chunks, block, health)
    };
    let configs: Vec<&SenderConfig> = links.iter().map(|(o, _)| &o.config).collect();
    let kernel = crate::fec_kernel::best();
    (handle.encoding_blocks(&configs, kernel.as_ref()), queues)
}

/// `opts` and each of `more` as the options of one link each (the same
/// core, queue, hook and keys; each link's receiver, socket and symbol
/// size), with the sockets opened for them, in that order.
pub(crate) fn link_options(
    opts: &SendOptions,
    first: BatchSender,
    more: Vec<(LinkTarget, BatchSender)>,
) -> Vec<(SendOptions, BatchSender)> {
    let mut links = vec![(opts.clone(), first)];
    for (t, udp) in more {
        let mut o = opts.clone();
        (o.dest, o.udp, o.config) = (t.dest, t.udp, t.config);
        links.push((o, udp));
    }
    links
}

/// Runs the sender core of every link, each on `queues`' queue of the
/// same index: one link on the calling thread as ever; several on a
/// thread each, with their progress added up into `progress` every 100 ms
/// (the reports in the order of `links`).
pub(crate) fn run_links(
    links: Vec<(SendOptions, BatchSender)>,
    queues: Vec<mpsc::Receiver<crate::send::SourceMsg>>,
    health: Vec<Arc<LinkHealth>>,
    progress: &Arc<SendProgress>,
    stop: &Arc<AtomicBool>,
) -> Result<Vec<SendReport>, PipelineError> {
    if links.len() == 1 {
        let mut reports = Vec::new();
        for ((opts, udp), queue) in links.into_iter().zip(queues) {
            reports.push(run_sender_on(
                udp,
                &opts,
                &queue,
                Arc::clone(progress),
                stop,
            )?);
        }
        return Ok(reports);
    }
    let mut cores = Vec::new();
    let mut each = Vec::new();
    for (((opts, udp), queue), h) in links.into_iter().zip(queues).zip(health) {
        let p = Arc::new(SendProgress::default());
        each.push(Arc::clone(&p));
        let stop = Arc::clone(stop);
        let core = std::thread::Builder::new()
            .name("diodon-link".into())
            .spawn(move || run_link_sender(udp, &opts, &queue, p, &stop, Some(h)))
            .map_err(|_| PipelineError::Thread("link core"))?;
        cores.push(core);
    }
    while !cores.iter().all(std::thread::JoinHandle::is_finished) {
        add_up(&each, progress);
        std::thread::sleep(SNAPSHOT_EVERY);
    }
    add_up(&each, progress);
    cores
        .into_iter()
        .map(|c| c.join().map_err(|_| PipelineError::Thread("link core"))?)
        .collect()
}

/// The links' progress added up into `total` (bytes, datagrams, counters).
fn add_up(links: &[Arc<SendProgress>], total: &SendProgress) {
    let sum = |f: fn(&SendProgress) -> &std::sync::atomic::AtomicU64| {
        links
            .iter()
            .map(|p| f(p).load(Ordering::Relaxed))
            .sum::<u64>()
    };
    total.bytes.store(sum(|p| &p.bytes), Ordering::Relaxed);
    total
        .datagrams
        .store(sum(|p| &p.datagrams), Ordering::Relaxed);
    let (mut core, mut socket) = (Snapshot::default(), Snapshot::default());
    for p in links {
        if let Ok(g) = p.snapshot.lock() {
            core.add(&g.0.snapshot());
            socket.add(&g.1.snapshot());
        }
    }
    if let Ok(mut g) = total.snapshot.lock() {
        *g = (
            diodon_proto::SenderStats::from_snapshot(&core),
            diodon_io::SenderCounters::from_snapshot(&socket),
        );
    }
    if let (Some(first), Ok(mut k)) = (links.first(), total.key_id.lock()) {
        *k = first.key_id.lock().map(|g| *g).unwrap_or_default();
    }
}

/// How often the core thread refreshes [`SendProgress::snapshot`].
const SNAPSHOT_EVERY: Duration = Duration::from_millis(100);

impl Core {
    /// Takes the key file's keys after a SIGHUP; a file that cannot be
    /// used leaves the keys in force, with a warning.
    fn reload_keys(&mut self, now: diodon_proto::Timestamp, keys: &mut KeyReload) {
        match keys.poll() {
            None => {}
            Some(Ok(ring)) => {
                if let Some(id) = self.sender.replace_keys(ring, now) {
                    tracing::info!(key_id = id, file = %keys.path().display(), "key file read again: sealing with key id {id}");
                }
            }
            Some(Err(e)) => tracing::warn!(
                key_id = self.sender.key_id(now).unwrap_or(0),
                "{e}; the keys in force stay"
            ),
        }
    }

    /// Copies the counters into the shared progress (for exporters).
    fn publish(&self) {
        if let Ok(mut s) = self.progress.snapshot.lock() {
            *s = (self.sender.stats().clone(), self.udp.counters());
        }
        if let Ok(mut k) = self.progress.key_id.lock() {
            *k = self.sender.key_id(self.clock.now());
        }
    }

    /// Moves queued input into the core as far as its buffer allows.
    /// Takes source messages into the core until its buffer is full, the
    /// queue is empty, or [`INGEST_BUDGET`] bytes were taken while the core
    /// has something to send (then sending goes first).
    fn ingest(&mut self, now: diodon_proto::Timestamp, input: &Receiver<SourceMsg>) {
        let mut taken = 0usize;
        loop {
            if let Some(p) = &mut self.pending {
                let (done, n) = p.feed(now, &mut self.sender);
                taken += n;
                self.progress.bytes.fetch_add(n as u64, Ordering::Relaxed);
                if !done {
                    return;
                }
                self.pending = None;
                if taken >= INGEST_BUDGET && !self.sender.is_idle() {
                    return;
                }
            }
            if self.input_done {
                return;
            }
            match input.try_recv() {
                Ok(msg) => self.handle(now, msg),
                Err(TryRecvError::Empty) => return,
                Err(TryRecvError::Disconnected) => {
                    self.input_done = true;
                    return;
                }
            }
        }
    }

    fn handle(&mut self, now: diodon_proto::Timestamp, msg: SourceMsg) {
        match msg {
            SourceMsg::Open {
                token,
                meta,
                digested,
            } => {
                let name = meta.name.clone();
                // A channel that reaches a link while it is down fails as
                // aborted (a sync sends the file again later), not refused.
                let opened = match &self.link {
                    Some(w) if !w.health.is_up() => {
                        w.health.count_turned_away();
                        tracing::warn!(
                            name = %name,
                            "channel aborted: the link to {} is down ({})",
                            w.health.dest,
                            w.health.last_down()
                        );
                        Err(SentStatus::Aborted)
                    }
                    _ if digested => self.sender.open_channel_digested(meta).map_err(|e| {
                        tracing::error!(name = %name, "channel refused: {e}");
                        SentStatus::Refused(e.to_string())
                    }),
                    _ => self.sender.open_channel(meta).map_err(|e| {
                        tracing::error!(name = %name, "channel refused: {e}");
                        SentStatus::Refused(e.to_string())
                    }),
                };
                match opened {
                    Ok(id) => {
                        tracing::debug!(channel = %id, name = %name, "channel opened");
                        self.by_id.insert(
                            id,
                            Open {
                                name: name.clone(),
                                token,
                            },
                        );
                        self.tokens.insert(token, Chan { id: Some(id), name });
                    }
                    Err(status) => {
                        self.notify(SentNotice {
                            token,
                            link_lost: status == SentStatus::Aborted,
                            status: status.clone(),
                            bytes: 0,
                            digest: None,
                        });
                        self.record(SentChannel {
                            name: name.clone(),
                            bytes: 0,
                            digest: String::new(),
                            status,
                        });
                        self.tokens.insert(token, Chan { id: None, name });
                    }
                }
            }
            SourceMsg::Data { token, data } => {
                if let Some(Chan { id: Some(id), .. }) = self.tokens.get(&token) {
                    self.pending = Some(Pending::new(*id, Input::Bytes(data)));
                }
            }
            SourceMsg::Block { token, block } => {
                if let Some(Chan { id: Some(id), .. }) = self.tokens.get(&token) {
                    self.pending = Some(Pending::new(*id, Input::Block(block)));
                }
            }
            SourceMsg::Records { token, data } => {
                if let Some(Chan { id: Some(id), .. }) = self.tokens.get(&token) {
                    self.pending = Some(Pending::new(*id, Input::Records(data)));
                }
            }
            SourceMsg::Finish { token, digest } => {
                if let Some(Chan { id: Some(id), .. }) = self.tokens.remove(&token) {
                    let finished = match digest {
                        Some(d) => self.sender.finish_digested(now, id, d),
                        None => self.sender.finish(now, id),
                    };
                    if let Err(e) = finished {
                        tracing::warn!(channel = %id, "finish: {e}");
                    }
                }
            }
            SourceMsg::Abort { token, reason } => {
                if let Some(Chan { id: Some(id), name }) = self.tokens.remove(&token) {
                    tracing::warn!(channel = %id, name = %name, "aborting channel: {reason}");
                    if let Err(e) = self.sender.abort(now, id) {
                        tracing::warn!(channel = %id, "abort: {e}");
                    }
                }
            }
        }
    }

    fn abort_all(&mut self, now: diodon_proto::Timestamp, why: &str) {
        self.pending = None;
        for (_, chan) in self.tokens.drain() {
            if let Some(id) = chan.id {
                tracing::warn!(channel = %id, name = %chan.name, "aborting channel: {why}");
                let _ = self.sender.abort(now, id);
            }
        }
        self.input_done = true;
    }

    /// Looks at the link's path (one link of several) and acts on a change.
    fn look_at_link(&mut self, now: diodon_proto::Timestamp) {
        let udp = &self.udp;
        if let Some(change) = self.link.as_mut().and_then(|w| w.look(udp)) {
            self.link_changed(now, change);
        }
    }

    /// The link went down (every channel in the core is aborted: its source
    /// sees it fail, the receiver drops it) or came back.
    fn link_changed(&mut self, now: diodon_proto::Timestamp, change: Change) {
        let Some(w) = &self.link else { return };
        let dest = w.health.dest;
        match change {
            Change::Down(why) => {
                let open = self.by_id.len();
                w.health.count_aborted(open as u64);
                tracing::warn!(
                    link = %dest,
                    "the link to {dest} is down ({why}): its {open} channels in flight are \
                     aborted and new channels take the other links"
                );
                self.pending = None;
                for chan in self.tokens.values_mut() {
                    chan.id = None;
                }
                // Every channel in the core is lost to the link, also one
                // the core can no longer abort (all its data cut): when it
                // ends, it ends as lost, whatever the core says.
                let ids: Vec<ChannelId> = self.by_id.keys().copied().collect();
                for id in ids {
                    if let Err(e) = self.sender.abort(now, id) {
                        tracing::debug!(channel = %id, "abort: {e}");
                    }
                    self.lost_to_link.insert(id);
                }
                self.recall_recent(now);
            }
            Change::Up => tracing::warn!(
                link = %dest,
                "the link to {dest} is up again: new channels take it"
            ),
        }
    }

    /// Sends one batch if the core has one; returns whether it did.
    fn send_batch(&mut self, now: diodon_proto::Timestamp) -> Result<bool, PipelineError> {
        // The payloads go from their blocks to the kernel: no copy here.
        let mut pieces = Vec::with_capacity(3 * MAX_GSO_SEGMENTS);
        let Some(transmit) =
            self.sender
                .poll_transmit_gather(now, MAX_GSO_SEGMENTS, &mut self.buf, &mut pieces)
        else {
            return Ok(false);
        };
        let sent = self
            .udp
            .send_pieces(self.dest, &pieces, 3, transmit.segment_len());
        drop(pieces);
        keep_spare_blocks(&mut self.sender);
        let report = match (sent, &mut self.link) {
            (Ok(r), _) => r,
            (Err(e), Some(watch)) if path_failure(&e) => {
                // One link of several: what it cannot carry is lost like
                // on a lossy link, and the link is down.
                if let Some(change) = watch.send_failed(&e.to_string()) {
                    self.link_changed(now, change);
                }
                return Ok(true);
            }
            (Err(e), _) => return Err(e.into()),
        };
        if let Some(w) = &self.link {
            w.health.count_datagrams(report.datagrams);
        }
        self.progress
            .datagrams
            .fetch_add(report.datagrams, Ordering::Relaxed);
        self.first_send.get_or_insert(now);
        if !self.sender.is_idle() {
            self.last_data = now;
        }
        Ok(true)
    }

    fn drain_events(&mut self) {
        while let Some(ev) = self.sender.poll_event() {
            match ev {
                SenderEvent::ChannelSent { channel, .. }
                | SenderEvent::ChannelAborted { channel }
                    if self.lost_to_link.remove(&channel) =>
                {
                    self.ended_aborted(channel, true);
                }
                SenderEvent::ChannelSent {
                    channel,
                    bytes,
                    digest,
                } => {
                    let (name, token) = self.forget(channel);
                    if self.link.is_some() {
                        let now = self.clock.now();
                        while self.recent_sent.front().is_some_and(|(at, _, _)| {
                            now.saturating_duration_since(*at) > RECENTLY_SENT
                        }) {
                            self.recent_sent.pop_front();
                        }
                        self.recent_sent.push_back((now, token, name.clone()));
                    }
                    self.notify(SentNotice {
                        token,
                        status: SentStatus::Sent,
                        bytes,
                        digest: Some(digest),
                        link_lost: false,
                    });
                    let digest = hex::encode(digest);
                    tracing::debug!(%channel, name = %name, bytes, blake3 = %digest, "channel sent");
                    self.last_data = self.clock.now();
                    self.record(SentChannel {
                        name,
                        bytes,
                        digest,
                        status: SentStatus::Sent,
                    });
                }
                SenderEvent::ChannelAborted { channel } => self.ended_aborted(channel, false),
            }
        }
    }

    /// A channel ended aborted (`link_lost`: its link went down, so its
    /// source may send it over another): the source is told, the report
    /// lists it.
    fn ended_aborted(&mut self, channel: ChannelId, link_lost: bool) {
        let (name, token) = self.forget(channel);
        self.notify(SentNotice {
            token,
            status: SentStatus::Aborted,
            bytes: 0,
            digest: None,
            link_lost,
        });
        self.record(SentChannel {
            name,
            bytes: 0,
            digest: String::new(),
            status: SentStatus::Aborted,
        });
    }

    /// The link went down: channels that ended sent within
    /// [`RECENTLY_SENT`] may have left after it went (a look sees it up to
    /// 100 ms late), so they are told lost too, and the report says so.
    fn recall_recent(&mut self, now: diodon_proto::Timestamp) {
        while let Some((at, token, name)) = self.recent_sent.pop_front() {
            if now.saturating_duration_since(at) > RECENTLY_SENT {
                continue;
            }
            tracing::warn!(name = %name, "{name} ended just before its link went down: told lost");
            if let Some(w) = &self.link {
                w.health.count_recalled();
            }
            if let Some(c) = self
                .report
                .iter_mut()
                .rev()
                .find(|c| c.name == name && c.status == SentStatus::Sent)
            {
                c.status = SentStatus::Aborted;
                c.digest.clear();
                c.bytes = 0;
            }
            self.notify(SentNotice {
                token,
                status: SentStatus::Aborted,
                bytes: 0,
                digest: None,
                link_lost: true,
            });
        }
    }

    /// Keeps an ended channel for the final report, unless a hook is told
    /// about each one (a long-running sync would grow the list forever).
    fn record(&mut self, ch: SentChannel) {
        if let Some(w) = &self.link {
            w.health.count_ended(ch.status == SentStatus::Sent);
        }
        if self.on_sent.as_ref().is_none_or(|h| h.keep_report) {
            self.report.push(ch);
        }
    }

    /// The name and token of an ended channel.
    fn forget(&mut self, channel: ChannelId) -> (String, u64) {
        self.by_id
            .remove(&channel)
            .map_or_else(|| (String::new(), 0), |o| (o.name, o.token))
    }

    fn notify(&self, notice: SentNotice) {
        if let Some(hook) = &self.on_sent {
            (hook.call)(notice);
        }
    }

    /// Sleeps until the core has work or new input arrives.
    fn wait(&mut self, now: diodon_proto::Timestamp, input: &Receiver<SourceMsg>) {
        let next = self
            .sender
            .poll_timeout()
            .unwrap_or(now + Duration::from_millis(100));
        if next <= now {
            return;
        }
        // Symbols are waiting for the pacer: let a full batch of tokens build up.
        let next = if self.sender.is_idle() {
            next
        } else {
            next + self.batch_gap
        };
        let gap = next.saturating_duration_since(now);
        if self.input_done || self.pending.is_some() || gap < Duration::from_millis(1) {
            // Pacing or a full core buffer: only time frees it. Sleep without
            // spinning: the pacer's bucket holds PACING_SLACK (4 ms) of
            // credit while datagrams wait, so a wake-up a timer slack late
            // sends what accrued meanwhile and the rate holds; spinning the
            // last 100 µs before each batch cost a paced sender a sixth of
            // its CPU (1 Gbit/s: a batch every 384 µs).
            self.clock.sleep_until_with(next, Duration::ZERO);
            return;
        }
        match input.recv_timeout(gap) {
            Ok(msg) => {
                let now = self.clock.now();
                self.handle(now, msg);
            }
            Err(RecvTimeoutError::Timeout) => {}
            Err(RecvTimeoutError::Disconnected) => self.input_done = true,
        }
    }
}

/// Whether a send failed on the path (network or host unreachable, the
/// interface down, the kernel's queue stalled) rather than on the socket.
fn path_failure(e: &UdpError) -> bool {
    match e {
        UdpError::Send { source, .. } => {
            source.raw_os_error().is_some_and(diodon_io::is_path_error)
        }
        UdpError::SendStalled { .. } => true,
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_source_encodes_a_full_block_and_hands_anything_else_over_as_bytes() {
        let config = SenderConfig::default();
        let block = config.block_bytes();
        let (plain, rx) = queue_for_blocks(4, block);
        let handle = plain.clone().encoding_blocks(&[&config], None);
        handle.data(1, vec![7; block]).unwrap();
        handle.data(1, vec![7; block - 1]).unwrap();
        plain.data(1, vec![7; block]).unwrap();
        match rx.try_recv().unwrap() {
            SourceMsg::Block { token: 1, block: b } => {
                assert_eq!(b.data(), &vec![7; block][..]);
                assert_eq!(b.repair().len(), config.block_coding(None).repair_bytes());
            }
            other => panic!("a full block comes encoded: {other:?}"),
        }
        for expected in [block - 1, block] {
            match rx.try_recv().unwrap() {
                SourceMsg::Data { token: 1, data } => assert_eq!(data.len(), expected),
                other => panic!("bytes come as bytes: {other:?}"),
            }
        }
    }

    #[test]
    fn a_sent_channel_is_written_like_a_received_one() {
        for (status, digest, json) in [
            (
                SentStatus::Sent,
                "ab",
                r#"{"name":"f","bytes":1,"verdict":"sent","blake3":"ab"}"#,
            ),
            (
                SentStatus::Aborted,
                "",
                r#"{"name":"f","bytes":1,"verdict":"aborted"}"#,
            ),
            (
                SentStatus::Refused("channel ids exhausted".into()),
                "",
                r#"{"name":"f","bytes":1,"verdict":"refused","reason":"channel ids exhausted"}"#,
            ),
        ] {
            let ch = SentChannel {
                name: "f".into(),
                bytes: 1,
                digest: digest.into(),
                status,
            };
            assert_eq!(serde_json::to_string(&ch).unwrap_or_default(), json);
            let back: SentChannel = serde_json::from_str(json).expect("round trip");
            assert_eq!(back, ch);
        }
        assert!(
            serde_json::from_str::<SentChannel>(r#"{"name":"f","bytes":1,"verdict":"lost"}"#)
                .is_err()
        );
    }
}
