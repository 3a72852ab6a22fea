//! The sans-IO sending side of a one-way session.
//!
//! ```text
//!  write(ch, bytes) ──► per-channel pending bytes ──► blocks (k source shards)
//!        ▲ backpressure:                               │ FEC: + m repair shards
//!        │ accepts ≤ writable()                        ▼
//!        │                                   interleave groups (≤ depth blocks)
//!        │                                             │ round-robin by symbol index
//!  beacons (timer) ─┐                                  ▼
//!  open / trailer ──┴─ control queue (copies spaced) ─► pick ─► pacer ─► poll_transmit
//! ```
//!
//! Call order for a driver: feed the application with `open_channel` /
//! `write` / `finish` (respecting [`Sender::writable`]), then drain
//! [`Sender::poll_transmit`] (one GSO batch per call) until it returns
//! `None`, drain [`Sender::poll_event`], sleep until [`Sender::poll_timeout`]
//! (or until the application has more data), call [`Sender::handle_timeout`],
//! repeat. The sender never drops data: when its buffer is full `write`
//! accepts fewer bytes (possibly zero) and the caller waits.
//!
//! Timers: the next beacon, the pacer's permission, and two queues keyed by
//! deadline ([`diodon_sansio::Deadlines`]): the spaced copies of control
//! datagrams and each channel's partial-block flush. `poll_timeout` reads
//! their earliest entries, so it costs the same with one open channel or
//! ten thousand.

use crate::block_coding::{block_geometry, BlockCoding, FullBlock};
use crate::crypto::{KeyRing, SEQ_LIMIT};
use crate::fec::{ErasureCode, ReedSolomon};
use crate::pacer::Pacer;
use crate::pool::BufferPool;
use crate::types::{ChannelId, ConfigError, Rate, RepairRatio, SessionId, SymbolSize};
use crate::wire::{
    BeaconRepr, Body, ChannelEntry, ChannelMeta, ChannelState, DatagramRepr, Header, Integrity,
    Sealer, SymbolRepr, TrailerRepr, TrailerStatus, BEACON_ENTRY_LEN, BEACON_FIXED_LEN, HEADER_LEN,
    MAX_NAME_LEN, SYMBOL_HEADER_LEN,
};
use diodon_sansio::{Deadlines, Timestamp, Transmit, MAX_TRANSMIT_BYTES};
use std::collections::{BTreeMap, HashMap, VecDeque};
use std::time::Duration;
use thiserror::Error;

/// How late the driver may wake, or how long the core may be busy or
/// preempted, while datagrams wait for the pacer, before it loses rate: a
/// backlogged bucket holds this much of the rate (at least two batches).
/// A bucket of one batch lost 15 % of a 600 Mbit/s link to a sync of small
/// files on two shared cores: the tokens that came in while the core
/// thread waited for a CPU overflowed.
pub const PACING_SLACK: Duration = Duration::from_millis(4);

/// The pacer's two bucket sizes (bytes on the wire): one batch while idle
/// (the largest spike after a pause), [`PACING_SLACK`] of the rate and at
/// least two batches while backlogged (`pacer.rs`).
fn pacer_buckets(config: &SenderConfig) -> (u64, u64) {
    let batch = (config.max_batch * (config.datagram_len() + config.per_datagram_overhead)) as u64;
    let slack = u128::from(config.rate.bps()) / 8 * PACING_SLACK.as_nanos() / 1_000_000_000;
    (
        batch,
        u64::try_from(slack).unwrap_or(u64::MAX).max(2 * batch),
    )
}

/// Everything the sending side is configured with.
#[derive(Debug, Clone)]
pub struct SenderConfig {
    /// Shard length of full blocks (fixes the datagram size).
    pub symbol_size: SymbolSize,
    /// Source symbols per full block (k). Default 224, the
    /// [`crate::fec_plan::default_block`] of 10 % repair (23 repair
    /// symbols; the decoder's transforms have no padding): with 4-deep
    /// interleaving a 1 GB file fails less than once in 10⁶ at 1 % random
    /// loss, and any burst of 64 datagrams is repaired (PROTOCOL.md,
    /// "Block sizes and repair").
    pub block_symbols: u16,
    /// Repair symbols per source symbol of a full block.
    pub repair: RepairRatio,
    /// Random loss, in parts per million, that blocks shorter than
    /// `block_symbols` (small files, the tail of every file, flushed stream
    /// data) are sized for: each gets the fewest repair symbols that keep it
    /// below the per-block failure target at this loss (at least its share
    /// of the ratio, at most a full block's repair).
    pub design_loss_ppm: u32,
    /// Blocks whose symbols are interleaved (1 = no interleaving).
    pub interleave_depth: u8,
    /// Pacing rate on the wire (0 = unpaced).
    pub rate: Rate,
    /// Bytes the pacer adds per datagram for the IP and UDP headers.
    pub per_datagram_overhead: usize,
    /// CRC32C, keyed MAC or encryption.
    pub integrity: Integrity,
    /// A keyed mode with a next key in the ring: seal with the next key
    /// from this long after the session started (`Some(ZERO)`: from the
    /// start); `None` keeps the current key.
    pub next_key_after: Option<Duration>,
    /// Lifetime granted to each datagram (Delta-t MPL), at most 65.535 s.
    pub lifetime: Duration,
    /// Δt announced in beacons (MPL + R + A; R = A = 0 on a one-way link).
    pub delta_t: Duration,
    /// Beacon period.
    pub beacon_interval: Duration,
    /// Copies of each channel-open and trailer.
    pub control_copies: u8,
    /// A further copy goes out after this many other datagrams...
    pub control_spacing: u64,
    /// ...or after this much time, whichever comes first.
    pub control_interval: Duration,
    /// Channel bytes buffered (pending + encoded, not yet sent) before
    /// `write` pushes back.
    pub buffer_limit: usize,
    /// Most datagrams in one `poll_transmit` (the GSO segment count).
    pub max_batch: usize,
    /// A partial block waits at most this long for more bytes.
    pub flush_delay: Duration,
    /// Sender's wall clock at start, Unix ms (announced in beacons).
    pub start_unix_ms: u64,
}

impl Default for SenderConfig {
    fn default() -> Self {
        SenderConfig {
            symbol_size: SymbolSize::new(1418).expect("valid constant"),
            block_symbols: 224,
            repair: RepairRatio::percent(10).expect("valid constant"),
            design_loss_ppm: 10_000,
            interleave_depth: 4,
            rate: Rate::UNLIMITED,
            per_datagram_overhead: 28,
            integrity: Integrity::Crc32c,
            next_key_after: None,
            lifetime: Duration::from_secs(2),
            delta_t: Duration::from_secs(2),
            beacon_interval: Duration::from_millis(250),
            control_copies: 3,
            control_spacing: 32,
            // Long enough that a channel's data, still being read when its
            // open goes out, starts flowing between the copies: a burst of
            // consecutive datagrams then cannot take them all (the copies
            // are 32 datagrams apart while data flows).
            control_interval: Duration::from_millis(25),
            buffer_limit: 32 << 20,
            max_batch: 32,
            flush_delay: Duration::from_millis(10),
            start_unix_ms: 0,
        }
    }
}

impl SenderConfig {
    /// Checks the combination of settings.
    pub fn validate(&self) -> Result<(), ConfigError> {
        let k = usize::from(self.block_symbols);
        if !(1..=32_768).contains(&k) {
            return Err(ConfigError::BlockSymbols(k));
        }
        if self.interleave_depth == 0 {
            return Err(ConfigError::Interleave(0));
        }
        let m = usize::from(self.repair.repair_for(self.block_symbols));
        if !ReedSolomon::supports(k, m) {
            return Err(ConfigError::Inconsistent(
                "block size and repair ratio exceed the erasure code",
            ));
        }
        if self.lifetime.as_millis() > u128::from(u16::MAX) || self.lifetime.is_zero() {
            return Err(ConfigError::Inconsistent(
                "lifetime must be within 1 ms..=65.535 s",
            ));
        }
        if self.buffer_limit < 2 * self.group_bytes() {
            return Err(ConfigError::Inconsistent(
                "buffer limit must hold two interleave groups (2 × depth × block bytes)",
            ));
        }
        if self.control_copies == 0 || self.max_batch == 0 || self.beacon_interval.is_zero() {
            return Err(ConfigError::Inconsistent(
                "control copies, batch and beacon interval must be non-zero",
            ));
        }
        if self.next_key_after.is_some()
            && self
                .integrity
                .key_ring()
                .and_then(KeyRing::next_id)
                .is_none()
        {
            return Err(ConfigError::Inconsistent(
                "switching to the next key needs a key file with a next key",
            ));
        }
        let datagram = self.datagram_len();
        if datagram > crate::wire::MAX_DATAGRAM_LEN {
            return Err(ConfigError::SymbolSize(self.symbol_size.get()));
        }
        Ok(())
    }

    /// Copies of each channel-open and trailer actually sent: at least
    /// `control_copies`, more when the repair ratio says the link loses a
    /// lot. These datagrams are not erasure-coded, so their copies must
    /// make losing all of them as unlikely as losing a block: 5 copies up to
    /// 10 % repair, 7 up to 25 %, 9 up to 50 %, 12 above (at the loss each
    /// ratio is recommended for, all copies lost < 10⁻⁹).
    pub fn effective_control_copies(&self) -> u8 {
        let by_repair = match self.repair.get() {
            0 => 0,
            1..=10 => 5,
            11..=25 => 7,
            26..=50 => 9,
            _ => 12,
        };
        self.control_copies.max(by_repair)
    }

    /// Repair symbols of a block of `k` source symbols: the ratio's share
    /// for a full block; for a shorter one the fewest that keep it below the
    /// per-block failure target (the one that keeps a 1 GB file below 10⁻⁶)
    /// at [`SenderConfig::design_loss_ppm`] random loss — at least the
    /// ratio's share, at most a full block's repair.
    pub fn short_block_repair(&self, k: u16) -> u16 {
        let full = self.repair.repair_for(self.block_symbols);
        let share = self.repair.repair_for(k);
        if k >= self.block_symbols {
            return share.max(full);
        }
        if self.design_loss_ppm == 0 {
            return share;
        }
        let p = f64::from(self.design_loss_ppm) / 1e6;
        let target = crate::fec_plan::per_block_target(
            self.symbol_size.get(),
            u32::from(self.block_symbols),
        );
        let needed = crate::fec_plan::repair_needed(u32::from(k), p, target, u32::from(full));
        share.max(needed as u16).min(full.max(share))
    }

    /// How this configuration's full blocks are encoded, for a reader that
    /// encodes them itself (on `kernel`, when one is given; see
    /// [`Sender::write_encoded_block`]).
    pub fn block_coding(
        &self,
        kernel: Option<std::sync::Arc<dyn crate::fec::SumKernel>>,
    ) -> BlockCoding {
        let m = usize::from(self.short_block_repair(self.block_symbols));
        BlockCoding::new(self.block_bytes(), self.symbol_size.get(), m, kernel)
    }

    /// Bytes in one full block.
    pub fn block_bytes(&self) -> usize {
        usize::from(self.block_symbols) * self.symbol_size.get()
    }

    fn group_bytes(&self) -> usize {
        self.block_bytes() * usize::from(self.interleave_depth)
    }

    /// Length of a full-size symbol datagram.
    pub fn datagram_len(&self) -> usize {
        HEADER_LEN + SYMBOL_HEADER_LEN + self.symbol_size.get() + self.integrity.tag_len()
    }
}

/// What the application did wrong.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum SendError {
    /// No such channel, or it was already finished or aborted.
    #[error("channel {0} is not open")]
    NotOpen(ChannelId),
    /// The channel name does not fit a channel-open datagram.
    #[error("channel name of {0} bytes is too long")]
    NameTooLong(usize),
    /// All channel ids of this session are used.
    #[error("channel ids exhausted")]
    ChannelsExhausted,
    /// The metadata carries an extension its kind does not take
    /// ([`ChannelMeta::check`]); the receiver would refuse the channel.
    #[error("channel metadata refused: {0}")]
    BadMeta(&'static str),
    /// `finish` on a channel whose writer gives the digest
    /// ([`Sender::open_channel_digested`]).
    #[error("channel {0} takes its digest from its writer: finish it with that digest")]
    DigestMissing(ChannelId),
    /// `finish_digested` on a channel that hashes its own bytes.
    #[error("channel {0} hashes its own bytes: it takes no digest at finish")]
    DigestNotTaken(ChannelId),
    /// `write_record` on a channel whose writer gives the digest: records
    /// are framed (and maybe padded) here, so its writer cannot hash the
    /// bytes that go out.
    #[error("channel {0} takes its digest from its writer: it takes bytes, not records")]
    RecordsNeedOwnDigest(ChannelId),
    /// A record longer than a record can be (65,535 bytes), or, on an
    /// aligned channel, longer than a block.
    #[error("record of {len} bytes does not fit (at most {max})")]
    RecordTooLarge {
        /// The payload's length.
        len: usize,
        /// The largest this channel takes.
        max: usize,
    },
}

/// Something the application should know.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SenderEvent {
    /// Every symbol and every trailer copy of the channel left.
    ChannelSent {
        /// Channel.
        channel: ChannelId,
        /// Bytes it carried.
        bytes: u64,
        /// Its BLAKE3 digest.
        digest: [u8; 32],
    },
    /// The channel was aborted; its trailer says so.
    ChannelAborted {
        /// Channel.
        channel: ChannelId,
    },
}

diodon_counters::counters! {
    /// Counters of the sending side.
    #[derive(Debug, Clone, Default, PartialEq, Eq)]
    pub struct SenderStats in Diodon "sender" {
        datagrams_sent: counter Count "datagrams_sent" "Datagrams produced by the core.",
        data_symbols: counter Count "data_symbols" "Of which source symbols.",
        repair_symbols: counter Count "repair_symbols" "Of which repair symbols.",
        beacons: counter Count "beacons" "Of which beacons.",
        opens: counter Count "opens" "Of which channel-open copies.",
        trailers: counter Count "trailers" "Of which trailer copies.",
        wire_bytes: counter Bytes "wire" "Datagram bytes produced (UDP payload).",
        bytes_accepted: counter Bytes "accepted" "Channel bytes accepted from the application.",
        blocks: counter Count "blocks" "FEC blocks encoded.",
        blocks_encoded_by_source: counter Count "blocks_encoded_by_source" "Of which encoded by the thread that read them (their repair symbols came with them).",
        channels_opened: counter Count "channels_opened" "Channels opened.",
        channels_sent: counter Count "channels_sent" "Channels whose trailer went out with status complete.",
        channels_aborted: counter Count "channels_aborted" "Channels aborted.",
        backpressure_events: counter Count "backpressure_events" "Times write accepted fewer bytes than offered (the core's buffer pushed back).",
        padding_bytes: counter Bytes "padding" "Zero bytes that ended blocks of aligned record channels (a record never crosses a block).",
        pacer_credit_lost_bytes: counter Bytes "pacer_credit_lost" "Rate the pacer could not use: bytes of credit that overflowed its backlogged bucket (PACING_SLACK) because the core came back late while datagrams waited.",
    }
}

#[derive(Debug)]
struct ChannelTx {
    pending: Vec<u8>,
    /// Whole blocks taken over from the application's buffers
    /// ([`Sender::write_block`]), fewer than a group, waiting for the rest
    /// of their group. They come before `pending`, which is empty while
    /// there are any.
    taken: Vec<TakenBlock>,
    pending_since: Option<Timestamp>,
    next_block: u64,
    total_len: u64,
    /// The digest as the bytes come in; `None` when the writer computes it
    /// and gives it at `finish_digested` (then in `given_digest`).
    hasher: Option<blake3::Hasher>,
    given_digest: Option<[u8; 32]>,
    finishing: bool,
    /// Groups cut but not fully sent.
    groups_in_flight: usize,
    blocks_sent: u64,
    /// Records aligned to blocks (the channel-open's flag).
    aligned: bool,
    /// A sync channel: only whole blocks are cut before `finish`, so block
    /// `n` covers the same bytes in every pass (a stall only delays).
    block_stable: bool,
}

impl ChannelTx {
    /// Bytes waiting to be cut: taken-over blocks and pending bytes.
    fn waiting(&self) -> usize {
        self.taken.iter().map(|b| b.data().len()).sum::<usize>() + self.pending.len()
    }

    /// Copies the taken-over blocks into `pending`, before anything that
    /// cuts or pads by bytes: the channel's bytes stay in order and are cut
    /// exactly as if they had been written (repair symbols that came with
    /// them are dropped; the blocks are encoded again where they are cut).
    fn untake(&mut self) {
        if self.taken.is_empty() {
            return;
        }
        debug_assert!(self.pending.is_empty(), "taken blocks come first");
        let mut bytes = Vec::with_capacity(self.waiting());
        for block in self.taken.drain(..) {
            bytes.extend_from_slice(block.data());
        }
        bytes.append(&mut self.pending);
        self.pending = bytes;
    }

    /// Bytes a flush may cut now: all pending bytes, or on a block-stable
    /// channel not yet finishing only its whole blocks.
    fn flushable(&self, block_bytes: usize) -> usize {
        if self.block_stable && !self.finishing {
            self.pending.len() - self.pending.len() % block_bytes
        } else {
            self.pending.len()
        }
    }
}

/// A whole block taken over from the application, waiting for the rest
/// of its group.
#[derive(Debug)]
enum TakenBlock {
    /// Its bytes ([`Sender::write_block`]): the core encodes them.
    Bytes(Vec<u8>),
    /// With the repair symbols its reader made
    /// ([`Sender::write_encoded_block`]).
    Encoded(FullBlock),
}

impl TakenBlock {
    fn data(&self) -> &[u8] {
        match self {
            TakenBlock::Bytes(data) => data,
            TakenBlock::Encoded(block) => &block.data,
        }
    }
}

#[derive(Debug)]
struct EncodedBlock {
    block: u64,
    k: u16,
    m: u16,
    shard_len: usize,
    tail_len: u16,
    group_pos: u8,
    group_len: u8,
    data: Vec<u8>,
    repair: Vec<u8>,
}

impl EncodedBlock {
    fn symbol_count(&self) -> usize {
        usize::from(self.k) + usize::from(self.m)
    }

    fn payload(&self, index: usize) -> &[u8] {
        let k = usize::from(self.k);
        if index + 1 == k {
            &self.data[index * self.shard_len..index * self.shard_len + usize::from(self.tail_len)]
        } else if index < k {
            &self.data[index * self.shard_len..(index + 1) * self.shard_len]
        } else {
            let r = index - k;
            &self.repair[r * self.shard_len..(r + 1) * self.shard_len]
        }
    }
}

#[derive(Debug)]
struct Group {
    /// Names the group in a batch's [`Piece`]s (unique in the session).
    id: u64,
    channel: ChannelId,
    blocks: Vec<EncodedBlock>,
    /// Symbol index being emitted across the blocks.
    round: usize,
    /// Block within the round.
    slot: usize,
    rounds: usize,
    source_bytes: usize,
}

impl Group {
    /// Advances to the next (block, index) that exists; `None` when done.
    fn current(&mut self) -> Option<(usize, usize)> {
        while self.round < self.rounds {
            while self.slot < self.blocks.len() {
                if self.round < self.blocks[self.slot].symbol_count() {
                    return Some((self.slot, self.round));
                }
                self.slot += 1;
            }
            self.slot = 0;
            self.round += 1;
        }
        None
    }
}

#[derive(Debug)]
enum ControlBody {
    Open(ChannelMeta),
    Trailer(TrailerRepr),
}

#[derive(Debug)]
struct ControlItem {
    /// Key of its `due_time` in `Sender::control_due`.
    id: u64,
    channel: ChannelId,
    body: ControlBody,
    copies_left: u8,
    due_seq: u64,
    due_time: Timestamp,
}

/// Where one datagram of the last batch lies: `buf[start..head_end]`,
/// then the payload (none for a datagram written whole into `buf`), then
/// `buf[head_end..end]`.
#[derive(Debug, Clone, Copy)]
struct Piece {
    start: usize,
    head_end: usize,
    end: usize,
    payload: Option<PayloadAt>,
}

impl Piece {
    /// A datagram of `len` bytes written whole at `start` of the buffer.
    fn whole(start: usize, len: usize) -> Self {
        Piece {
            start,
            head_end: start + len,
            end: start + len,
            payload: None,
        }
    }

    /// The datagram's length, all pieces.
    fn len(&self) -> usize {
        self.end - self.start + self.payload.map_or(0, |p| p.len)
    }
}

/// A symbol's payload in its block: symbol `index` of block `slot` of
/// group `group` (in `active`, or in `retired` if the batch finished it),
/// `len` bytes.
#[derive(Debug, Clone, Copy)]
struct PayloadAt {
    group: u64,
    slot: usize,
    index: usize,
    len: usize,
}

#[derive(Debug, Clone, Copy)]
enum Next {
    Beacon,
    Control(usize),
    Symbol,
}

/// The sending side of one session.
#[derive(Debug)]
pub struct Sender {
    config: SenderConfig,
    session: SessionId,
    start: Timestamp,
    seq: u64,
    next_channel: u32,
    channels: BTreeMap<ChannelId, ChannelTx>,
    /// Groups cut and waiting, in cut order.
    groups: VecDeque<Group>,
    /// Groups being sent, at most one per channel, symbols round-robin.
    active: Vec<Group>,
    /// Groups the last batch finished: their payloads are in that batch's
    /// pieces, so their buffers go back to the pool with the next batch.
    retired: Vec<Group>,
    next_group_id: u64,
    /// The datagrams of the batch being written.
    pieces: Vec<Piece>,
    /// Index into `active` of the group whose symbol goes next.
    turn: usize,
    control: VecDeque<ControlItem>,
    /// `due_time` of every control item, by item id.
    control_due: Deadlines<u64>,
    next_control: u64,
    /// `pending_since + flush_delay` of every channel with pending bytes.
    flush_due: Deadlines<ChannelId>,
    recent: VecDeque<ChannelEntry>,
    pacer: Pacer,
    pace_wait: Option<Timestamp>,
    beacon_due: Timestamp,
    buffered: usize,
    fec: ReedSolomon,
    pool: BufferPool,
    /// Repair symbols of a short block, by its source symbols (memo of
    /// [`SenderConfig::short_block_repair`]).
    short_repair: HashMap<u16, u16>,
    events: VecDeque<SenderEvent>,
    stats: SenderStats,
    /// The session's ciphers (encrypted mode).
    sealing: Option<Sealing>,
    /// The driver's cache hint, given the payload of the datagram that goes
    /// next ([`Sender::use_prefetch`]).
    prefetch: Option<fn(&[u8])>,
}

/// The sender's sealers (keyed MAC or AEAD): the current key's and, when a
/// switch is configured, the next key's and the moment it takes over.
#[derive(Debug)]
struct Sealing {
    current: Sealer,
    next: Option<(Timestamp, Sealer)>,
}

impl Sealing {
    /// The sealers of `integrity`'s ring; the next key takes over at
    /// `switch_at` when given and still to come at `now`.
    fn new(
        integrity: &Integrity,
        session: SessionId,
        switch_at: Option<Timestamp>,
        now: Timestamp,
    ) -> Option<Self> {
        let ring = integrity.key_ring()?;
        let sealer = |id: u8| Sealer::new(integrity, session, id).expect("the ring holds its ids");
        let next = switch_at
            .filter(|at| *at > now)
            .zip(ring.next_id())
            .map(|(at, id)| (at, sealer(id)));
        Some(Sealing {
            current: sealer(ring.current_id()),
            next,
        })
    }

    /// The sealer in force at `now`.
    fn at(&self, now: Timestamp) -> &Sealer {
        match &self.next {
            Some((from, next)) if now >= *from => next,
            _ => &self.current,
        }
    }
}

/// Writes `repr` sealed as configured: with `sealing`'s key in force at
/// `now` (keyed MAC or encrypted), else with the CRC32C.
fn seal_into(
    repr: &DatagramRepr<'_>,
    buf: &mut [u8],
    integrity: &Integrity,
    sealing: Option<&Sealing>,
    now: Timestamp,
) -> usize {
    match sealing {
        Some(s) => repr.emit_sealed(buf, s.at(now)),
        None => repr.emit(buf, integrity),
    }
}

const RECENT_CHANNELS: usize = 64;

/// Zero padding of aligned record channels, appended in pieces.
const ZEROS: [u8; 256] = [0; 256];

impl Sender {
    /// Takes the encoder's transforms with a driver's platform kernel (see
    /// [`crate::fec::SumKernel`]): the same repair bytes, at less cost.
    pub fn use_kernel(&mut self, kernel: std::sync::Arc<dyn crate::fec::SumKernel>) {
        self.fec.use_kernel(kernel);
    }

    /// Takes a driver's cache hint (`diodon_io::cache::prefetch`): as each
    /// data or repair datagram is written, the next one's payload is handed
    /// to it, so that its check and the kernel's copy find it in the cache.
    /// The payload is read much later than its reader wrote it; without
    /// the hint the CRC32C waits on memory at every datagram.
    pub fn use_prefetch(&mut self, prefetch: fn(&[u8])) {
        self.prefetch = Some(prefetch);
    }

    /// A new session with id `session` (draw it from a CSPRNG) starting at `now`.
    pub fn new(
        config: SenderConfig,
        session: SessionId,
        now: Timestamp,
    ) -> Result<Self, ConfigError> {
        config.validate()?;
        let (burst, slack) = pacer_buckets(&config);
        Ok(Sender {
            pacer: Pacer::new(config.rate, burst, slack, now),
            session,
            start: now,
            seq: 0,
            next_channel: 1,
            channels: BTreeMap::new(),
            groups: VecDeque::new(),
            active: Vec::new(),
            retired: Vec::new(),
            next_group_id: 0,
            pieces: Vec::new(),
            turn: 0,
            control: VecDeque::new(),
            control_due: Deadlines::default(),
            next_control: 0,
            flush_due: Deadlines::default(),
            recent: VecDeque::new(),
            pace_wait: None,
            beacon_due: now,
            buffered: 0,
            fec: ReedSolomon::new(),
            pool: BufferPool::with_byte_limit(usize::from(u8::MAX) * 2, config.buffer_limit),
            short_repair: HashMap::new(),
            events: VecDeque::new(),
            stats: SenderStats::default(),
            sealing: Sealing::new(
                &config.integrity,
                session,
                config.next_key_after.map(|after| now + after),
                now,
            ),
            prefetch: None,
            config,
        })
    }

    /// Whether the session has used its last sequence number
    /// ([`crate::crypto::SEQ_LIMIT`]): it sends nothing more, and the
    /// application must start a new session (a new id, hence new keys).
    pub fn exhausted(&self) -> bool {
        self.seq == SEQ_LIMIT
    }

    /// The key id datagrams carry at `now` (keyed modes).
    pub fn key_id(&self, now: Timestamp) -> Option<u8> {
        self.sealing.as_ref().map(|s| s.at(now).key_id())
    }

    /// Takes the keys of `ring` (the key file read again): every datagram
    /// from now on is sealed with its current key; a configured switch to
    /// the next key that is still to come switches to the new ring's next
    /// key instead. Returns the key id now in force, or `None` when the
    /// session is not keyed (CRC32C: nothing changes). Datagrams already
    /// sealed keep their key; the receiver opens them if it still holds it.
    pub fn replace_keys(&mut self, ring: KeyRing, now: Timestamp) -> Option<u8> {
        if !self.config.integrity.is_keyed() {
            return None;
        }
        self.config.integrity = self.config.integrity.with_ring(ring);
        let switch_at = self.config.next_key_after.map(|after| self.start + after);
        self.sealing = Sealing::new(&self.config.integrity, self.session, switch_at, now);
        self.key_id(now)
    }

    /// Moves the sequence number (tests of the sequence limit).
    #[cfg(feature = "fuzzing")]
    #[doc(hidden)]
    pub fn set_seq_for_test(&mut self, seq: u64) {
        self.seq = seq;
    }

    /// This session's id.
    pub fn session_id(&self) -> SessionId {
        self.session
    }

    /// The configuration in force.
    pub fn config(&self) -> &SenderConfig {
        &self.config
    }

    /// Counters.
    pub fn stats(&self) -> &SenderStats {
        &self.stats
    }

    /// Bytes `write` will accept now (0 means wait: the buffer is full).
    pub fn writable(&self) -> usize {
        self.config.buffer_limit.saturating_sub(self.buffered)
    }

    /// Channels not yet fully sent.
    pub fn open_channels(&self) -> usize {
        self.channels.len()
    }

    /// One line per open channel, for diagnostics.
    pub fn describe_channels(&self) -> Vec<String> {
        let queue = format!(
            "groups queued {} active {} control queued {} pace_wait {:?} beacon_due {:?}",
            self.groups.len(),
            self.active.len(),
            self.control.len(),
            self.pace_wait,
            self.beacon_due
        );
        std::iter::once(queue).chain(self.channels
            .iter()
            .map(|(id, c)| {
                format!(
                    "channel {id}: pending {} finishing {} groups {} next_block {} sent {} total {}",
                    c.waiting(),
                    c.finishing,
                    c.groups_in_flight,
                    c.next_block,
                    c.blocks_sent,
                    c.total_len
                )
            }))
            .collect()
    }

    /// Nothing left to send but beacons.
    pub fn is_idle(&self) -> bool {
        self.channels.is_empty()
            && self.groups.is_empty()
            && self.active.is_empty()
            && self.control.is_empty()
    }

    /// Longest channel name: the channel-open datagram must be no larger
    /// than a full symbol datagram (so it never fragments) and the name at
    /// most [`MAX_NAME_LEN`] bytes. A channel with sync information has
    /// [`crate::wire::OPEN_SYNC_LEN`] bytes less room.
    pub fn max_name_len(&self) -> usize {
        (self.config.symbol_size.get() + SYMBOL_HEADER_LEN - crate::wire::OPEN_FIXED_LEN)
            .min(MAX_NAME_LEN)
    }

    /// Opens a channel; its metadata goes out (repeated) before its data.
    /// A channel with sync information is block-stable (its
    /// [`crate::wire::SyncInfo::block_bytes`] is set here to this sender's
    /// block size): it is cut only in whole blocks until `finish`.
    pub fn open_channel(&mut self, meta: ChannelMeta) -> Result<ChannelId, SendError> {
        self.open(meta, true)
    }

    /// Opens a channel whose writer computes its digest (BLAKE3 of every
    /// byte it writes, in order) and gives it at
    /// [`Sender::finish_digested`]: the hashing then runs where the writer
    /// runs (a file source hashes each block as it reads it, on its own
    /// thread, while the bytes are in its cache), not on the thread that
    /// drives this core. A wrong digest fails the file at the receiver.
    /// For byte writes only: records are framed here, so a record
    /// channel's writer cannot know its bytes (`write_record` on such a
    /// channel is refused).
    pub fn open_channel_digested(&mut self, meta: ChannelMeta) -> Result<ChannelId, SendError> {
        self.open(meta, false)
    }

    fn open(&mut self, mut meta: ChannelMeta, hash_here: bool) -> Result<ChannelId, SendError> {
        meta.check().map_err(SendError::BadMeta)?;
        let block_bytes = u32::try_from(self.config.block_bytes())
            .map_err(|_| SendError::BadMeta("block larger than 4 GiB"))?;
        if let Some(sync) = &mut meta.sync {
            sync.block_bytes = block_bytes;
        }
        let block_stable = meta.sync.is_some();
        let room = if meta.sync.is_some() {
            let open_room = (self.config.symbol_size.get() + SYMBOL_HEADER_LEN)
                .saturating_sub(crate::wire::OPEN_FIXED_LEN + crate::wire::OPEN_SYNC_LEN);
            self.max_name_len().min(open_room)
        } else {
            self.max_name_len()
        };
        if meta.name.len() > room {
            return Err(SendError::NameTooLong(meta.name.len()));
        }
        if self.next_channel == u32::MAX {
            return Err(SendError::ChannelsExhausted);
        }
        let id = ChannelId(self.next_channel);
        self.next_channel += 1;
        let aligned = meta.aligned;
        self.push_control(id, ControlBody::Open(meta), 0);
        self.channels.insert(
            id,
            ChannelTx {
                pending: Vec::new(),
                taken: Vec::new(),
                pending_since: None,
                next_block: 0,
                total_len: 0,
                hasher: hash_here.then(blake3::Hasher::new),
                given_digest: None,
                finishing: false,
                groups_in_flight: 0,
                blocks_sent: 0,
                aligned,
                block_stable,
            },
        );
        self.stats.channels_opened += 1;
        Ok(id)
    }

    /// Offers bytes; returns how many were accepted (fewer than offered, maybe
    /// zero, when the buffer is full: try again after sending).
    pub fn write(
        &mut self,
        now: Timestamp,
        channel: ChannelId,
        data: &[u8],
    ) -> Result<usize, SendError> {
        let room = self.writable();
        self.channels
            .get(&channel)
            .filter(|c| !c.finishing)
            .ok_or(SendError::NotOpen(channel))?;
        let n = data.len().min(room);
        if n < data.len() {
            self.stats.backpressure_events += 1;
        }
        if n == 0 {
            return Ok(0);
        }
        self.append(now, channel, &[&data[..n]]);
        Ok(n)
    }

    /// Takes `data` whole (all or nothing): like [`Sender::write`], but a
    /// buffer of exactly one full block, on a channel with nothing else
    /// waiting, is not copied: it becomes the block (a file read block by
    /// block reaches the datagrams with no copy of the sender's own). Any
    /// other buffer is copied like a `write`. Returns the buffer when there
    /// is no room for all of it: try again after sending.
    pub fn write_block(
        &mut self,
        now: Timestamp,
        channel: ChannelId,
        data: Vec<u8>,
    ) -> Result<Option<Vec<u8>>, SendError> {
        if !self.has_room(channel, data.len())? {
            return Ok(Some(data));
        }
        self.take_block(now, channel, TakenBlock::Bytes(data));
        Ok(None)
    }

    /// [`Sender::write_block`] for a block encoded already
    /// ([`crate::BlockCoding`], on the thread that read it): its repair
    /// symbols are sent as they came when the block is taken over whole
    /// with the code this sender uses for it; otherwise the bytes are
    /// taken like a `write_block` and encoded here. Returns the block
    /// when there is no room for it.
    pub fn write_encoded_block(
        &mut self,
        now: Timestamp,
        channel: ChannelId,
        block: FullBlock,
    ) -> Result<Option<FullBlock>, SendError> {
        if !self.has_room(channel, block.len())? {
            return Ok(Some(block));
        }
        self.take_block(now, channel, TakenBlock::Encoded(block));
        Ok(None)
    }

    /// Whether `channel` (open and not finishing) takes `len` more bytes
    /// now; counts a push-back when not.
    fn has_room(&mut self, channel: ChannelId, len: usize) -> Result<bool, SendError> {
        self.channels
            .get(&channel)
            .filter(|c| !c.finishing)
            .ok_or(SendError::NotOpen(channel))?;
        if len > self.writable() {
            self.stats.backpressure_events += 1;
            return Ok(false);
        }
        Ok(true)
    }

    /// Takes a block that fits (see [`Sender::has_room`]) over whole, or
    /// its bytes like a `write` when it cannot be a block of its own.
    fn take_block(&mut self, now: Timestamp, channel: ChannelId, block: TakenBlock) {
        let depth = usize::from(self.config.interleave_depth);
        let len = block.data().len();
        let (k, shard_len, _) = self.geometry(len);
        let whole_block = len == self.config.block_bytes() && k * shard_len == len;
        let Some(ch) = self.channels.get_mut(&channel) else {
            return;
        };
        if !whole_block || !ch.pending.is_empty() || ch.aligned {
            self.append(now, channel, &[block.data()]);
            match block {
                TakenBlock::Bytes(data) => self.pool.put(data),
                TakenBlock::Encoded(b) => {
                    self.pool.put(b.data);
                    self.pool.put(b.repair);
                }
            }
            return;
        }
        if let Some(h) = &mut ch.hasher {
            h.update(block.data());
        }
        ch.total_len += len as u64;
        self.buffered += len;
        self.stats.bytes_accepted += len as u64;
        ch.taken.push(block);
        if ch.taken.len() == depth {
            let blocks = std::mem::take(&mut ch.taken);
            ch.pending_since = None;
            self.push_blocks(channel, blocks);
            self.fill_active();
        } else {
            ch.pending_since.get_or_insert(now);
        }
        self.rearm_flush(channel);
    }

    /// Offers one record of a `Datagrams` channel (PROTOCOL.md § 5.3):
    /// frames it (2-byte length) and takes it whole or not at all; `false`
    /// means the buffer is full, try again after sending. On an aligned
    /// channel the record never crosses a block boundary: when it does not
    /// fit the rest of the current block, zeros pad the block first, and a
    /// record longer than a block is refused.
    pub fn write_record(
        &mut self,
        now: Timestamp,
        channel: ChannelId,
        payload: &[u8],
    ) -> Result<bool, SendError> {
        let block = self.config.block_bytes();
        let room = self.writable();
        let ch = self
            .channels
            .get_mut(&channel)
            .filter(|c| !c.finishing)
            .ok_or(SendError::NotOpen(channel))?;
        if ch.hasher.is_none() {
            return Err(SendError::RecordsNeedOwnDigest(channel));
        }
        ch.untake();
        let need = crate::records::framed_len(payload.len());
        let max = if ch.aligned {
            block - crate::records::RECORD_HEADER
        } else {
            crate::records::MAX_RECORD
        }
        .min(crate::records::MAX_RECORD);
        if payload.len() > max {
            return Err(SendError::RecordTooLarge {
                len: payload.len(),
                max,
            });
        }
        // Blocks are cut from the start of `pending`, so its length modulo
        // the block size is the position in the block being filled.
        let at = ch.pending.len() % block;
        let pad = if ch.aligned && at + need > block {
            block - at
        } else {
            0
        };
        if pad + need > room {
            self.stats.backpressure_events += 1;
            return Ok(false);
        }
        let mut parts: Vec<&[u8]> = Vec::with_capacity(pad.div_ceil(ZEROS.len()) + 2);
        let mut left = pad;
        while left > 0 {
            let n = left.min(ZEROS.len());
            parts.push(&ZEROS[..n]);
            left -= n;
        }
        let len = (payload.len() as u16).to_be_bytes();
        parts.push(&len);
        parts.push(payload);
        self.append(now, channel, &parts);
        if pad > 0 {
            self.stats.padding_bytes += pad as u64;
        }
        Ok(true)
    }

    /// Appends bytes (already checked against the buffer) to the channel.
    /// Whole groups of a single part (a stream's `write`) are encoded
    /// straight from the caller's bytes; only what does not fill a group is
    /// copied into `pending` (the copy and the move of the remainder were a
    /// tenth of the sender's memory traffic).
    fn append(&mut self, now: Timestamp, channel: ChannelId, parts: &[&[u8]]) {
        let group_bytes = self.config.block_bytes() * usize::from(self.config.interleave_depth);
        let Some(ch) = self.channels.get_mut(&channel) else {
            return;
        };
        ch.untake();
        let mut n = 0;
        for p in parts {
            if let Some(h) = &mut ch.hasher {
                h.update(p);
            }
            n += p.len();
        }
        ch.total_len += n as u64;
        self.buffered += n;
        self.stats.bytes_accepted += n as u64;
        let mut rest: &[u8] = if let [one] = parts {
            one
        } else {
            for p in parts {
                ch.pending.extend_from_slice(p);
            }
            &[]
        };
        if !rest.is_empty() && !ch.pending.is_empty() {
            let top_up = rest.len().min(group_bytes.saturating_sub(ch.pending.len()));
            ch.pending.extend_from_slice(&rest[..top_up]);
            rest = &rest[top_up..];
        }
        self.cut_groups(channel, now, false);
        if rest.len() >= group_bytes {
            while rest.len() >= group_bytes {
                self.push_group(channel, &rest[..group_bytes]);
                rest = &rest[group_bytes..];
            }
            self.fill_active();
        }
        let block_bytes = self.config.block_bytes();
        if let Some(ch) = self.channels.get_mut(&channel) {
            ch.pending.extend_from_slice(rest);
            // The flush delay runs from the oldest byte a flush may cut (on
            // a block-stable channel: once a whole block waits).
            if ch.flushable(block_bytes) == 0 {
                ch.pending_since = None;
            } else {
                ch.pending_since.get_or_insert(now);
            }
        }
        self.rearm_flush(channel);
    }

    /// Sends what is pending of `channel` now, as a partial block, instead of
    /// waiting for a full group or the flush delay.
    pub fn flush(&mut self, now: Timestamp, channel: ChannelId) -> Result<(), SendError> {
        if !self.channels.contains_key(&channel) {
            return Err(SendError::NotOpen(channel));
        }
        self.cut_groups(channel, now, true);
        Ok(())
    }

    /// An empty buffer of a full block's capacity that the core is done
    /// with (its group went out), for a reader to fill with a later block
    /// and hand back with [`Sender::write_block`]: a file read into memory
    /// already mapped costs no page faults (a fresh buffer per block cost
    /// the sender 8 % of its CPU at MTU 9000). `None` when none is free.
    pub fn spare_block(&mut self) -> Option<Vec<u8>> {
        let mut block = self.pool.take_kept(self.config.block_bytes())?;
        block.clear();
        Some(block)
    }

    /// No more bytes: cut the rest, then the trailer follows the last symbol.
    pub fn finish(&mut self, now: Timestamp, channel: ChannelId) -> Result<(), SendError> {
        self.finish_with(now, channel, None)
    }

    /// [`Sender::finish`] for a channel opened with
    /// [`Sender::open_channel_digested`]: `digest` is the BLAKE3 of every
    /// byte written to it, and goes out in its trailer.
    pub fn finish_digested(
        &mut self,
        now: Timestamp,
        channel: ChannelId,
        digest: [u8; 32],
    ) -> Result<(), SendError> {
        self.finish_with(now, channel, Some(digest))
    }

    fn finish_with(
        &mut self,
        now: Timestamp,
        channel: ChannelId,
        digest: Option<[u8; 32]>,
    ) -> Result<(), SendError> {
        let ch = self
            .channels
            .get_mut(&channel)
            .filter(|c| !c.finishing)
            .ok_or(SendError::NotOpen(channel))?;
        match (&ch.hasher, digest) {
            (None, None) => return Err(SendError::DigestMissing(channel)),
            (Some(_), Some(_)) => return Err(SendError::DigestNotTaken(channel)),
            _ => {}
        }
        ch.given_digest = digest;
        ch.finishing = true;
        self.cut_groups(channel, now, true);
        self.maybe_queue_trailer(channel, now);
        Ok(())
    }

    /// Gives the channel up: unsent blocks are discarded and an aborted
    /// trailer tells the receiver to fail it.
    pub fn abort(&mut self, now: Timestamp, channel: ChannelId) -> Result<(), SendError> {
        let Some(ch) = self.channels.remove(&channel) else {
            return Err(SendError::NotOpen(channel));
        };
        self.flush_due.set(channel, None);
        self.buffered -= ch.waiting();
        let mut freed = 0;
        let mut keep = |g: &Group| {
            if g.channel == channel {
                freed += g.source_bytes;
                false
            } else {
                true
            }
        };
        self.groups.retain(&mut keep);
        self.active.retain(keep);
        self.buffered -= freed;
        self.turn = 0;
        self.fill_active();
        self.queue_control(
            channel,
            ControlBody::Trailer(TrailerRepr {
                total_len: ch.total_len,
                total_blocks: ch.next_block,
                status: TrailerStatus::Aborted,
                digest: [0; 32],
            }),
            now,
        );
        self.remember(channel, ChannelState::Aborted, ch.blocks_sent);
        self.stats.channels_aborted += 1;
        self.events
            .push_back(SenderEvent::ChannelAborted { channel });
        Ok(())
    }

    /// Next event for the application.
    pub fn poll_event(&mut self) -> Option<SenderEvent> {
        self.events.pop_front()
    }

    /// When `handle_timeout` or a `poll_*` call has work: the next beacon,
    /// the pacer's next permission, a control copy or a partial-block flush.
    pub fn poll_timeout(&self) -> Option<Timestamp> {
        // Nothing can leave before the pacer allows it, so datagrams that
        // are already due wake the driver at the pacer's time, not earlier.
        if self.exhausted() {
            return None;
        }
        let floor = self.pace_wait.unwrap_or(Timestamp::ZERO);
        let mut next = self.beacon_due.max(floor);
        if let Some(t) = self.pace_wait {
            next = next.min(t);
        }
        // Keyed by deadline: the earliest control copy and partial-block
        // flush without a scan over the queue or the channels.
        if let Some(t) = self.control_due.next() {
            next = next.min(t.max(floor));
        }
        if let Some(t) = self.flush_due.next() {
            next = next.min(t);
        }
        Some(next)
    }

    /// Panics unless the deadline queues equal what a scan over the channels
    /// and the control queue computes (for the fuzzing entry points).
    #[cfg(feature = "fuzzing")]
    #[doc(hidden)]
    pub fn check_timers(&self) {
        let delay = self.config.flush_delay;
        let pending = self.channels.values().filter(|c| c.pending_since.is_some());
        assert_eq!(
            self.flush_due.len(),
            pending.count(),
            "one flush per pending channel"
        );
        for (id, c) in &self.channels {
            assert_eq!(
                self.flush_due.get(*id),
                c.pending_since.map(|t| t + delay),
                "channel {id}"
            );
        }
        assert_eq!(
            self.control_due.len(),
            self.control.len(),
            "one deadline per control item"
        );
        for item in &self.control {
            assert_eq!(
                self.control_due.get(item.id),
                Some(item.due_time),
                "control item"
            );
        }
        let scan = self.channels.values().filter_map(|c| c.pending_since).min();
        assert_eq!(
            self.flush_due.next(),
            scan.map(|t| t + delay),
            "earliest flush"
        );
        let scan = self.control.iter().map(|c| c.due_time).min();
        assert_eq!(self.control_due.next(), scan, "earliest control copy");
    }

    /// Processes timers due at `now` (flushes partial blocks, in channel
    /// order). Idempotent.
    pub fn handle_timeout(&mut self, now: Timestamp) {
        for id in self.flush_due.take_due(now) {
            self.cut_groups(id, now, true);
            self.rearm_flush(id);
        }
        if self.pace_wait.is_some_and(|t| t <= now) {
            self.pace_wait = None;
        }
    }

    /// Writes the next datagrams into `buf` for one send: at most
    /// `max_datagrams` (and at most [`SenderConfig::max_batch`]), all the
    /// same size except possibly a shorter last one, at most 65,000 bytes in
    /// all (one GSO `sendmsg`). Returns what it wrote, or `None` if nothing
    /// may leave at `now` (nothing queued, or the pacer says wait; then
    /// [`Sender::poll_timeout`] says until when).
    ///
    /// `buf` holds exactly the batch on return (`size` bytes; left as it
    /// was with `None`). The datagrams are those of
    /// [`Sender::poll_transmit_gather`], copied one after the other; a
    /// driver that can send from pieces calls that and copies nothing. The
    /// destination is `None`: a one-way sender has one peer, the driver's.
    pub fn poll_transmit(
        &mut self,
        now: Timestamp,
        max_datagrams: usize,
        buf: &mut Vec<u8>,
    ) -> Option<Transmit> {
        let mut pieces_buf = std::mem::take(buf);
        let mut parts = Vec::new();
        let transmit = self.poll_transmit_gather(now, max_datagrams, &mut pieces_buf, &mut parts);
        if transmit.is_some() {
            buf.clear();
            buf.reserve(transmit.map_or(0, |t| t.size));
            for part in parts {
                buf.extend_from_slice(part);
            }
        } else {
            *buf = pieces_buf;
        }
        transmit
    }

    /// Like [`Sender::poll_transmit`], but the payload of a data or repair
    /// datagram is not copied: each datagram is three pieces in `parts`
    /// (header and symbol sub-header in `buf`, the payload where its block
    /// holds it, the tag in `buf`; a beacon, open or trailer, and every
    /// datagram of the encrypted mode, is one piece in `buf` and two empty
    /// ones). `parts` holds `3 × count` pieces on return; `Transmit::size`
    /// and `segment_size` count whole datagrams. The pieces borrow the
    /// sender: send them before calling it again (blocks the batch
    /// finished are returned to the pool at the next batch).
    ///
    /// `buf` is reused: no allocation and no zeroing per datagram once it
    /// has grown to a batch.
    pub fn poll_transmit_gather<'a>(
        &'a mut self,
        now: Timestamp,
        max_datagrams: usize,
        buf: &'a mut Vec<u8>,
        parts: &mut Vec<&'a [u8]>,
    ) -> Option<Transmit> {
        for g in self.retired.drain(..) {
            for block in g.blocks {
                self.pool.put(block.data);
                self.pool.put(block.repair);
            }
        }
        self.pieces.clear();
        // `buf` keeps what it held: every piece overwrites its bytes whole,
        // so it is not zeroed first (that was a memset of every byte sent);
        // it grows only past its longest batch so far.
        let mut used = 0;
        let mut size = 0;
        let max = max_datagrams.min(self.config.max_batch).max(1);
        let mut segment_size = 0;
        let mut count = 0;
        while count < max {
            let Some(next) = self.pick(now) else {
                // Nothing left: credit beyond the idle burst is not kept.
                self.pacer.set_backlogged(now, false);
                break;
            };
            let len = self.next_len(next);
            // GSO: same size, or one shorter datagram that ends the batch.
            if count > 0 && (len > segment_size || size + len > MAX_TRANSMIT_BYTES) {
                break;
            }
            let wire = len + self.config.per_datagram_overhead;
            if !self.pacer.can_send(now, wire) {
                self.pace_wait = Some(self.pacer.next_send_time(now, wire));
                self.pacer.set_backlogged(now, true);
                break;
            }
            self.pacer.consume(now, wire);
            self.pace_wait = None;
            if buf.len() < used + len {
                buf.resize(used + len, 0);
            }
            let piece = self.emit(now, next, &mut buf[used..used + len], used);
            debug_assert_eq!(piece.len(), len);
            used = piece.end;
            self.pieces.push(piece);
            size += len;
            if count == 0 {
                segment_size = len;
            }
            count += 1;
            if len < segment_size {
                break;
            }
        }
        self.stats.pacer_credit_lost_bytes = self.pacer.credit_lost_bytes();
        if count == 0 {
            return None;
        }
        let this: &'a Self = self;
        let buf: &'a [u8] = buf;
        parts.clear();
        for piece in &this.pieces {
            parts.push(&buf[piece.start..piece.head_end]);
            parts.push(piece.payload.map_or(&[][..], |p| this.payload_at(p)));
            parts.push(&buf[piece.head_end..piece.end]);
        }
        Some(Transmit {
            destination: None,
            size,
            segment_size: (count > 1).then_some(segment_size),
        })
    }

    /// The payload a piece of the current batch points to.
    fn payload_at(&self, at: PayloadAt) -> &[u8] {
        let group = self
            .active
            .iter()
            .chain(&self.retired)
            .find(|g| g.id == at.group)
            .expect("a batch's groups are kept until the next batch");
        group.blocks[at.slot].payload(at.index)
    }

    fn pick(&self, now: Timestamp) -> Option<Next> {
        if self.exhausted() {
            return None;
        }
        if now >= self.beacon_due {
            return Some(Next::Beacon);
        }
        if let Some(i) = self
            .control
            .iter()
            .position(|c| c.due_seq <= self.seq || c.due_time <= now)
        {
            return Some(Next::Control(i));
        }
        if !self.active.is_empty() {
            return Some(Next::Symbol);
        }
        None
    }

    fn next_len(&self, next: Next) -> usize {
        let tag = self.config.integrity.tag_len();
        let body = match next {
            Next::Beacon => BEACON_FIXED_LEN + self.beacon_entries().len() * BEACON_ENTRY_LEN,
            Next::Control(i) => match &self.control[i].body {
                ControlBody::Open(meta) => meta.body_len(),
                ControlBody::Trailer(_) => crate::wire::TRAILER_LEN,
            },
            Next::Symbol => {
                let g = &self.active[self.turn];
                // `current` was normalised when the group was queued/advanced.
                let b = &g.blocks[g.slot];
                SYMBOL_HEADER_LEN + b.payload(g.round).len()
            }
        };
        HEADER_LEN + body + tag
    }

    fn header(&self, now: Timestamp, channel: ChannelId) -> Header {
        Header {
            session: self.session,
            seq: self.seq,
            channel,
            timestamp_ms: ((now - self.start).as_millis() & 0xFFFF_FFFF) as u32,
            lifetime_ms: self.config.lifetime.as_millis() as u16,
        }
    }

    fn beacon_entries(&self) -> Vec<ChannelEntry> {
        let room = (self.config.symbol_size.get() + SYMBOL_HEADER_LEN - BEACON_FIXED_LEN)
            / BEACON_ENTRY_LEN;
        let open = self.channels.iter().map(|(id, c)| ChannelEntry {
            channel: *id,
            state: ChannelState::Open,
            blocks_sent: c.blocks_sent,
        });
        let mut entries: Vec<ChannelEntry> = self.recent.iter().rev().copied().collect();
        entries.extend(open);
        entries.truncate(room);
        entries
    }

    /// Writes datagram `next` into `buf` (room for all of it), which
    /// starts at `offset` of the batch's buffer; a symbol's payload stays
    /// in its block. Returns where the datagram's pieces lie.
    fn emit(&mut self, now: Timestamp, next: Next, buf: &mut [u8], offset: usize) -> Piece {
        let whole = |written: usize| Piece::whole(offset, written);
        let piece = match next {
            Next::Beacon => {
                let repr = DatagramRepr {
                    header: self.header(now, ChannelId(0)),
                    body: Body::Beacon(BeaconRepr {
                        start_unix_ms: self.config.start_unix_ms,
                        symbol_size: self.config.symbol_size.get() as u16,
                        block_symbols: self.config.block_symbols,
                        repair_symbols: self.config.repair.repair_for(self.config.block_symbols),
                        interleave_depth: self.config.interleave_depth,
                        rate_bps: self.config.rate.bps(),
                        delta_t_ms: self.config.delta_t.as_millis().min(u128::from(u32::MAX))
                            as u32,
                        beacon_interval_ms: self
                            .config
                            .beacon_interval
                            .as_millis()
                            .min(u128::from(u32::MAX))
                            as u32,
                        datagrams_sent: self.stats.datagrams_sent,
                        bytes_sent: self.stats.bytes_accepted,
                        channels: self.beacon_entries(),
                    }),
                };
                self.beacon_due = now + self.config.beacon_interval;
                self.stats.beacons += 1;
                whole(seal_into(
                    &repr,
                    buf,
                    &self.config.integrity,
                    self.sealing.as_ref(),
                    now,
                ))
            }
            Next::Control(i) => {
                let item = &self.control[i];
                let body = match &item.body {
                    ControlBody::Open(meta) => {
                        self.stats.opens += 1;
                        Body::Open(meta.clone())
                    }
                    ControlBody::Trailer(t) => {
                        self.stats.trailers += 1;
                        Body::Trailer(*t)
                    }
                };
                let repr = DatagramRepr {
                    header: self.header(now, item.channel),
                    body,
                };
                let len = seal_into(
                    &repr,
                    buf,
                    &self.config.integrity,
                    self.sealing.as_ref(),
                    now,
                );
                self.control_sent(i, now);
                whole(len)
            }
            Next::Symbol => self.emit_symbol(now, buf, offset),
        };
        let len = piece.len();
        self.seq += 1;
        self.stats.datagrams_sent += 1;
        self.stats.wire_bytes += len as u64;
        piece
    }

    fn emit_symbol(&mut self, now: Timestamp, buf: &mut [u8], offset: usize) -> Piece {
        let header = self.header(now, self.active[self.turn].channel);
        let g = &mut self.active[self.turn];
        let (group, slot, index) = (g.id, g.slot, g.round);
        let b = &g.blocks[slot];
        let symbol = SymbolRepr {
            block: b.block,
            index: index as u16,
            k: b.k,
            m: b.m,
            tail_len: b.tail_len,
            group_pos: b.group_pos,
            group_len: b.group_len,
            payload: b.payload(index),
        };
        let repr = DatagramRepr {
            header,
            body: if index < usize::from(b.k) {
                Body::Data(symbol)
            } else {
                Body::Repair(symbol)
            },
        };
        let symbol_len = b.payload(index).len();
        let sealer = self.sealing.as_ref().map(|s| s.at(now));
        let (head, tail) = buf.split_at_mut(HEADER_LEN + SYMBOL_HEADER_LEN);
        let piece = if let Some((head_len, tag_len)) = repr.emit_around_payload(head, tail, sealer)
        {
            Piece {
                start: offset,
                head_end: offset + head_len,
                end: offset + head_len + tag_len,
                payload: Some(PayloadAt {
                    group,
                    slot,
                    index,
                    len: symbol_len,
                }),
            }
        } else {
            let len = seal_into(
                &repr,
                buf,
                &self.config.integrity,
                self.sealing.as_ref(),
                now,
            );
            Piece::whole(offset, len)
        };
        if index < usize::from(b.k) {
            self.stats.data_symbols += 1;
        } else {
            self.stats.repair_symbols += 1;
        }
        g.slot += 1;
        if g.current().is_none() {
            let done = self.active.remove(self.turn);
            self.group_done(now, done);
            self.fill_active();
        } else {
            self.turn += 1;
        }
        if self.turn >= self.active.len() {
            self.turn = 0;
        }
        if let (Some(prefetch), Some(g)) = (self.prefetch, self.active.get(self.turn)) {
            // The symbol that goes next unless a control datagram does
            // (every active group is normalised by `current`).
            prefetch(g.blocks[g.slot].payload(g.round));
        }
        piece
    }

    /// Moves waiting groups into the active set, at most `interleave_depth`
    /// groups and at most one per channel, oldest first. Interleaving across
    /// channels spreads a burst over several small files too (a one-block
    /// file cannot interleave with itself); one group per channel keeps each
    /// channel's groups strictly in order, which the receiver's loss rule
    /// relies on (PROTOCOL.md § 7.3).
    fn fill_active(&mut self) {
        let limit = usize::from(self.config.interleave_depth);
        let mut i = 0;
        while self.active.len() < limit && i < self.groups.len() {
            let channel = self.groups[i].channel;
            let busy = self.active.iter().any(|g| g.channel == channel)
                || self.groups.iter().take(i).any(|g| g.channel == channel);
            if busy {
                i += 1;
            } else if let Some(g) = self.groups.remove(i) {
                self.active.push(g);
            }
        }
    }

    fn group_done(&mut self, now: Timestamp, g: Group) {
        self.buffered -= g.source_bytes;
        if let Some(ch) = self.channels.get_mut(&g.channel) {
            ch.groups_in_flight -= 1;
            ch.blocks_sent += g.blocks.len() as u64;
        }
        let channel = g.channel;
        self.retired.push(g);
        self.maybe_queue_trailer(channel, now);
    }

    fn maybe_queue_trailer(&mut self, channel: ChannelId, now: Timestamp) {
        let Some(ch) = self.channels.get(&channel) else {
            return;
        };
        if !ch.finishing || ch.groups_in_flight > 0 || ch.waiting() > 0 {
            return;
        }
        let Some(ch) = self.channels.remove(&channel) else {
            return;
        };
        self.flush_due.set(channel, None);
        let digest = match &ch.hasher {
            Some(h) => *h.finalize().as_bytes(),
            None => ch.given_digest.unwrap_or_default(),
        };
        self.queue_control(
            channel,
            ControlBody::Trailer(TrailerRepr {
                total_len: ch.total_len,
                total_blocks: ch.next_block,
                status: TrailerStatus::Complete,
                digest,
            }),
            now,
        );
        self.remember(channel, ChannelState::Finished, ch.blocks_sent);
    }

    fn remember(&mut self, channel: ChannelId, state: ChannelState, blocks_sent: u64) {
        if self.recent.len() == RECENT_CHANNELS {
            self.recent.pop_front();
        }
        self.recent.push_back(ChannelEntry {
            channel,
            state,
            blocks_sent,
        });
    }

    fn queue_control(&mut self, channel: ChannelId, body: ControlBody, _now: Timestamp) {
        self.push_control(channel, body, self.seq);
    }

    fn push_control(&mut self, channel: ChannelId, body: ControlBody, due_seq: u64) {
        let id = self.next_control;
        self.next_control += 1;
        self.control_due.set(id, Some(Timestamp::ZERO));
        self.control.push_back(ControlItem {
            id,
            channel,
            body,
            copies_left: self.config.effective_control_copies(),
            due_seq,
            due_time: Timestamp::ZERO,
        });
    }

    fn control_sent(&mut self, i: usize, now: Timestamp) {
        let spacing = self.config.control_spacing;
        let interval = self.config.control_interval;
        let item = &mut self.control[i];
        item.copies_left -= 1;
        if item.copies_left > 0 {
            item.due_seq = self.seq.saturating_add(1).saturating_add(spacing);
            item.due_time = now + interval;
            self.control_due.set(item.id, Some(item.due_time));
            return;
        }
        let Some(item) = self.control.remove(i) else {
            return;
        };
        self.control_due.set(item.id, None);
        if let ControlBody::Trailer(t) = item.body {
            if t.status == TrailerStatus::Complete {
                self.stats.channels_sent += 1;
                self.events.push_back(SenderEvent::ChannelSent {
                    channel: item.channel,
                    bytes: t.total_len,
                    digest: t.digest,
                });
            }
        }
    }

    /// Cuts pending bytes of `channel` into blocks and interleave groups: full
    /// groups always; with `flush`, also the remainder.
    fn cut_groups(&mut self, channel: ChannelId, now: Timestamp, flush: bool) {
        let block_bytes = self.config.block_bytes();
        let depth = usize::from(self.config.interleave_depth);
        let group_bytes = block_bytes * depth;
        let Some(ch) = self.channels.get_mut(&channel) else {
            return;
        };
        if flush && ch.pending.is_empty() && !ch.taken.is_empty() {
            // Whole blocks only: cut as they were taken, the same blocks a
            // cut of their bytes would give (and their repair, if they came
            // encoded, goes out as it came).
            let blocks = std::mem::take(&mut ch.taken);
            ch.pending_since = None;
            self.push_blocks(channel, blocks);
            self.fill_active();
            self.rearm_flush(channel);
            return;
        }
        ch.untake();
        let end = if flush {
            ch.flushable(block_bytes)
        } else {
            ch.pending.len()
        };
        if end == 0 || (ch.pending.len() < group_bytes && !flush) {
            return;
        }
        // Cut from an offset and drain once at the end: draining group by
        // group would move the whole remainder each time (quadratic).
        let pending = std::mem::take(&mut ch.pending);
        let mut offset = 0;
        while offset < end && (end - offset >= group_bytes || flush) {
            let take = (end - offset).min(group_bytes);
            let bytes = &pending[offset..offset + take];
            offset += take;
            self.push_group(channel, bytes);
        }
        self.fill_active();
        let Some(ch) = self.channels.get_mut(&channel) else {
            return;
        };
        ch.pending = pending;
        ch.pending.drain(..offset);
        ch.pending_since = if ch.flushable(block_bytes) == 0 {
            None
        } else {
            Some(now)
        };
        self.rearm_flush(channel);
    }

    /// Encodes `bytes` (a whole group, or a flushed partial one) as the
    /// channel's next blocks and queues them for transmission.
    fn push_group(&mut self, channel: ChannelId, bytes: &[u8]) {
        let block_bytes = self.config.block_bytes();
        let n_blocks = bytes.len().div_ceil(block_bytes);
        let Some(first_block) = self.start_group(channel, n_blocks) else {
            return;
        };
        let mut blocks = Vec::with_capacity(n_blocks);
        for (pos, chunk) in bytes.chunks(block_bytes).enumerate() {
            let (k, shard_len, _) = self.geometry(chunk.len());
            let data = self.pool.take_with(chunk, k * shard_len);
            blocks.push(self.encode_block(
                first_block + pos as u64,
                pos as u8,
                n_blocks as u8,
                chunk.len(),
                data,
            ));
        }
        self.queue_group(channel, blocks, bytes.len());
    }

    /// Queues whole blocks taken over by [`Sender::write_block`] as the
    /// channel's next group: encoded in place, not copied.
    fn push_blocks(&mut self, channel: ChannelId, taken: Vec<TakenBlock>) {
        let n_blocks = taken.len();
        let Some(first_block) = self.start_group(channel, n_blocks) else {
            return;
        };
        let source_bytes = taken.iter().map(|b| b.data().len()).sum();
        let mut blocks = Vec::with_capacity(n_blocks);
        for (pos, taken) in taken.into_iter().enumerate() {
            let (block, group_pos, group_len) =
                (first_block + pos as u64, pos as u8, n_blocks as u8);
            let len = taken.data().len();
            let (k, shard_len, tail_len) = self.geometry(len);
            let m = self.repair_of(k);
            let data = match taken {
                TakenBlock::Encoded(b)
                    if (usize::from(b.k), usize::from(b.m), b.shard_len) == (k, m, shard_len)
                        && b.repair.len() == m * shard_len =>
                {
                    self.stats.blocks_encoded_by_source += 1;
                    blocks.push(EncodedBlock {
                        block,
                        k: b.k,
                        m: b.m,
                        shard_len,
                        tail_len: tail_len as u16,
                        group_pos,
                        group_len,
                        data: b.data,
                        repair: b.repair,
                    });
                    continue;
                }
                // Another code's repair: encoded again with this one.
                TakenBlock::Encoded(b) => {
                    self.pool.put(b.repair);
                    b.data
                }
                TakenBlock::Bytes(data) => data,
            };
            blocks.push(self.encode_block(block, group_pos, group_len, len, data));
        }
        self.queue_group(channel, blocks, source_bytes);
    }

    /// An empty buffer for a full block's repair symbols that the core is
    /// done with, for a reader that encodes its blocks
    /// ([`crate::BlockCoding`]); `None` when none is free.
    pub fn spare_repair(&mut self) -> Option<Vec<u8>> {
        let k = usize::from(self.config.block_symbols);
        let len = self.repair_of(k) * self.config.symbol_size.get();
        let mut repair = self.pool.take_kept(len.max(1))?;
        repair.clear();
        Some(repair)
    }

    /// Numbers the channel's next `n_blocks` blocks; returns the first.
    fn start_group(&mut self, channel: ChannelId, n_blocks: usize) -> Option<u64> {
        let ch = self.channels.get_mut(&channel)?;
        let first_block = ch.next_block;
        ch.next_block += n_blocks as u64;
        ch.groups_in_flight += 1;
        Some(first_block)
    }

    /// Queues a group's encoded blocks behind the groups already cut.
    fn queue_group(&mut self, channel: ChannelId, blocks: Vec<EncodedBlock>, source_bytes: usize) {
        let rounds = blocks
            .iter()
            .map(EncodedBlock::symbol_count)
            .max()
            .unwrap_or(0);
        self.stats.blocks += blocks.len() as u64;
        self.next_group_id += 1;
        self.groups.push_back(Group {
            id: self.next_group_id,
            channel,
            blocks,
            round: 0,
            slot: 0,
            rounds,
            source_bytes,
        });
    }

    /// Keeps `flush_due` equal to the channel's `pending_since + flush_delay`.
    fn rearm_flush(&mut self, channel: ChannelId) {
        let delay = self.config.flush_delay;
        let at = self
            .channels
            .get(&channel)
            .and_then(|c| c.pending_since)
            .map(|since| since + delay);
        self.flush_due.set(channel, at);
    }

    /// Source symbols, shard length and the last symbol's length of a
    /// block of `len` bytes.
    fn geometry(&self, len: usize) -> (usize, usize, usize) {
        block_geometry(self.config.symbol_size.get(), len)
    }

    /// Repair symbols of a block of `k` source symbols.
    fn repair_of(&mut self, k: usize) -> usize {
        let config = &self.config;
        usize::from(
            *self
                .short_repair
                .entry(k as u16)
                .or_insert_with(|| config.short_block_repair(k as u16)),
        )
    }

    /// Encodes a block of `len` source bytes held in `data` (`k` shards,
    /// the last padded with zeros).
    fn encode_block(
        &mut self,
        block: u64,
        group_pos: u8,
        group_len: u8,
        len: usize,
        data: Vec<u8>,
    ) -> EncodedBlock {
        let (k, shard_len, tail_len) = self.geometry(len);
        debug_assert_eq!(data.len(), k * shard_len);
        let m = self.repair_of(k);
        // The encoder writes every repair byte: no zeroing first.
        let mut repair = self.pool.take_any(m * shard_len);
        let m = match self.fec.encode(k, m, shard_len, &data, &mut repair) {
            Ok(()) => m,
            Err(e) => {
                // validate() guarantees supported parameters; a failure
                // here is a bug, and sending no repair keeps the data
                // correct.
                debug_assert!(false, "FEC encode failed: {e}");
                repair.clear();
                0
            }
        };
        EncodedBlock {
            block,
            k: k as u16,
            m: m as u16,
            shard_len,
            tail_len: tail_len as u16,
            group_pos,
            group_len,
            data,
            repair,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_whole_block_handed_over_is_encoded_in_place_not_copied() {
        let config = SenderConfig {
            block_symbols: 8,
            interleave_depth: 2,
            rate: Rate::UNLIMITED,
            ..SenderConfig::default()
        };
        let block = config.block_bytes();
        let mut tx = Sender::new(config, SessionId(1), Timestamp::ZERO).expect("sender");
        let ch = tx
            .open_channel(ChannelMeta::stream("blocks"))
            .expect("open");
        let first = vec![1u8; block];
        let second = vec![2u8; block];
        let at = [first.as_ptr(), second.as_ptr()];
        for data in [first, second] {
            let back = tx.write_block(Timestamp::ZERO, ch, data).expect("write");
            assert!(back.is_none(), "taken");
        }
        let group = tx
            .active
            .iter()
            .chain(&tx.groups)
            .find(|g| g.channel == ch)
            .expect("the two blocks make a group");
        let held: Vec<*const u8> = group.blocks.iter().map(|b| b.data.as_ptr()).collect();
        assert_eq!(held, at, "the blocks are the buffers handed over");
    }
}
