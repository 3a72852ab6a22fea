//! The sans-IO receiving side of a one-way session: validates every
//! datagram, gathers symbols per block, decodes as soon as any `k` arrive,
//! delivers each channel's bytes in order, verifies the trailer digest, and
//! frees state by timers (Delta-t: nothing is ever acknowledged).
//!
//! ```text
//! datagram ─► length/version ─► CRC32C|MAC ─► body parse ─► session id
//!   (each rejection is counted, never trusted)                 │ new id: restart
//!                                                              ▼
//!            lifetime (age > lifetime: expired) ─► seq window (dup / too old)
//!                                                              │
//!          beacon ◄──────────────┬──────────────► open / trailer / symbol
//!   params, channel table        │                     │
//!                                ▼                     ▼
//!                       per channel: blocks ─► FEC decode ─► in-order delivery
//!                                                             ─► digest check
//! ```
//!
//! Call order for a driver: [`Receiver::handle_datagram`] for every datagram
//! (in arrival order), then drain [`Receiver::poll_event`]; whenever
//! [`Receiver::poll_timeout`] passes, call [`Receiver::handle_timeout`] and
//! drain events again.
//!
//! Timers: `LinkSilent` and session expiry in a [`TimerTable`]; each
//! channel's next deadline (its next loss check or its expiry 2Δt after it
//! was last heard) in a queue keyed by deadline ([`diodon_sansio::Deadlines`]),
//! re-armed after every datagram of the channel. `poll_timeout` and
//! `handle_timeout` touch only the channels that are due.
//!
//! A block is declared lost only when the sender has provably moved past it
//! (a symbol of a later interleave group, the trailer, or the beacon's
//! channel table) *and* a reorder grace has passed since; the loss fails its
//! channel only. A channel is complete only when every byte arrived, the
//! length matches the trailer and the BLAKE3 digest matches.

use crate::blocks::{BlockSet, BlockSetError};
use crate::crypto::{CipherCache, KeyRing};
use crate::fec::{ErasureCode, ReedSolomon};
use crate::pool::BufferPool;
use crate::types::{ChannelId, SessionId};
use crate::wire::{
    open_datagram, BeaconRepr, Body, ChannelMeta, ChannelState, DatagramRepr, Integrity,
    SymbolRepr, TrailerRepr, TrailerStatus, WireError,
};
use diodon_sansio::{Deadlines, TimerSlot, TimerTable, Timestamp};
use std::collections::{BTreeMap, HashMap, HashSet, VecDeque};
use std::sync::Arc;
use std::time::Duration;

/// Receiver settings.
#[derive(Debug, Clone)]
pub struct ReceiverConfig {
    /// CRC32C, keyed MAC or encryption; must match the sender (the keys may
    /// differ during a rollover: the receiver's ring opens both).
    pub integrity: Integrity,
    /// Δt: session and channel state is freed after 2Δt of silence.
    pub delta_t: Duration,
    /// `LinkSilent` is raised after this long without a valid datagram.
    pub silence_timeout: Duration,
    /// How long after the sender provably moved past a block the receiver
    /// still waits for its late (reordered) symbols.
    pub reorder_grace: Duration,
    /// Drop datagrams older than their lifetime (relative to the fastest
    /// datagram seen in the session).
    pub enforce_lifetime: bool,
    /// Channels open at once in a session.
    pub max_channels: usize,
    /// Block bytes buffered (not yet delivered) over all channels.
    pub max_buffered_bytes: usize,
    /// Largest symbol accepted (memory bound per block).
    pub max_symbol_size: usize,
}

impl Default for ReceiverConfig {
    fn default() -> Self {
        ReceiverConfig {
            integrity: Integrity::Crc32c,
            delta_t: Duration::from_secs(2),
            silence_timeout: Duration::from_secs(1),
            reorder_grace: Duration::from_millis(50),
            enforce_lifetime: true,
            max_channels: 4096,
            max_buffered_bytes: 512 << 20,
            max_symbol_size: 65_000,
        }
    }
}

/// Why a channel failed. Its bytes are never reported complete.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FailReason {
    /// A block could not be recovered: fewer than `k` of its symbols arrived.
    BlockLost {
        /// The first unrecoverable block.
        block: u64,
        /// Unrecoverable blocks seen at that moment.
        count: u64,
    },
    /// All bytes arrived but their BLAKE3 digest differs from the trailer's.
    DigestMismatch,
    /// The byte count differs from the trailer's total length.
    LengthMismatch {
        /// Length in the trailer.
        expected: u64,
        /// Bytes received.
        received: u64,
    },
    /// No datagram of the channel for 2Δt with blocks still missing.
    TimedOut,
    /// Every block arrived but no trailer within 2Δt.
    TrailerLost,
    /// Symbols arrived but no channel-open (metadata) within 2Δt.
    OpenLost,
    /// The sender aborted the channel.
    SenderAborted,
    /// The sender restarted (new session id) before the channel ended.
    SenderRestarted,
    /// Session state was freed after 2Δt of silence.
    SessionExpired,
    /// Too many channels or too many buffered bytes.
    ResourceLimit,
    /// The application refused the channel (see [`Receiver::reject_channel`]).
    Rejected(Rejection),
    /// A block of a block-stable (sync) channel other than its last is not
    /// the block size its open announced: the offsets would be wrong.
    Misaligned {
        /// The first such block.
        block: u64,
    },
}

/// Why [`Receiver::hold_blocks`] refused to merge held blocks into a channel.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum HoldError {
    /// The channel is not open in the current session (never seen, or it
    /// already ended).
    #[error("channel {0} is not open")]
    NotOpen(ChannelId),
    /// The channel has no sync information (its blocks may be cut
    /// differently in every pass), or its open has not arrived yet.
    #[error("channel {0} is not block-stable: its blocks cannot be merged")]
    NotBlockStable(ChannelId),
    /// The blocks were cut with another block size than this pass.
    #[error("held blocks are of {held} bytes, this pass cuts blocks of {announced} bytes")]
    Geometry {
        /// Block size of the held blocks.
        held: u32,
        /// Block size the channel-open announces.
        announced: u32,
    },
    /// The held blocks range over another block count than the announced
    /// size takes.
    #[error("held blocks range over {held} blocks, the announced size takes {announced}")]
    BlockCount {
        /// Blocks the held set ranges over.
        held: u64,
        /// Blocks of the announced size.
        announced: u64,
    },
}

/// Why the application gave a channel up: its own typed error, which the
/// core passes through to [`FailReason::Rejected`] without interpreting it
/// ([`Rejection::downcast_ref`] recovers it). Any `std::error::Error`
/// converts into one.
#[derive(Clone)]
pub struct Rejection(Arc<dyn std::error::Error + Send + Sync>);

impl Rejection {
    /// The application's error, if it is an `E`.
    pub fn downcast_ref<E: std::error::Error + 'static>(&self) -> Option<&E> {
        self.0.downcast_ref()
    }
}

impl<E: std::error::Error + Send + Sync + 'static> From<E> for Rejection {
    fn from(e: E) -> Self {
        Rejection(Arc::new(e))
    }
}

impl std::fmt::Debug for Rejection {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        std::fmt::Debug::fmt(&*self.0, f)
    }
}

impl std::fmt::Display for Rejection {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        std::fmt::Display::fmt(&*self.0, f)
    }
}

/// Two rejections are equal when they are the same error or say the same.
impl PartialEq for Rejection {
    fn eq(&self, other: &Self) -> bool {
        Arc::ptr_eq(&self.0, &other.0) || self.0.to_string() == other.0.to_string()
    }
}

impl Eq for Rejection {}

impl std::fmt::Display for FailReason {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            FailReason::BlockLost { block, count } => {
                write!(f, "block {block} lost ({count} unrecoverable)")
            }
            FailReason::DigestMismatch => f.write_str("digest mismatch"),
            FailReason::LengthMismatch { expected, received } => {
                write!(
                    f,
                    "length mismatch: trailer says {expected}, received {received}"
                )
            }
            FailReason::TimedOut => f.write_str("timed out (2Δt of silence with blocks missing)"),
            FailReason::TrailerLost => f.write_str("trailer lost"),
            FailReason::OpenLost => f.write_str("channel-open (metadata) lost"),
            FailReason::SenderAborted => f.write_str("aborted by the sender"),
            FailReason::SenderRestarted => f.write_str("sender restarted (new session)"),
            FailReason::SessionExpired => f.write_str("session expired (2Δt of silence)"),
            FailReason::ResourceLimit => f.write_str("receiver resource limit"),
            FailReason::Rejected(why) => write!(f, "rejected: {why}"),
            FailReason::Misaligned { block } => {
                write!(f, "block {block} is not of the announced block size")
            }
        }
    }
}

/// A difference between what the sender does and what this receiver expects.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Mismatch {
    /// A datagram of another protocol version.
    Version(u8),
    /// Keyed datagrams but no key here, or the reverse.
    Integrity {
        /// The datagram carries a MAC.
        datagram_keyed: bool,
    },
    /// Both sides have a key, but encrypted datagrams arrive at a receiver
    /// that expects the MAC only, or the reverse.
    Encryption {
        /// The datagram's body is encrypted.
        datagram_encrypted: bool,
    },
    /// The sender's symbols exceed `max_symbol_size`.
    SymbolTooLarge(u16),
    /// The sender announces a larger Δt than configured here: state would be
    /// freed too early.
    DeltaT {
        /// Announced by the sender, ms.
        sender_ms: u32,
        /// Configured here, ms.
        receiver_ms: u64,
    },
}

/// What the receiver tells the application, in order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Event {
    /// The first session was adopted.
    SessionStarted {
        /// Its id.
        session: SessionId,
    },
    /// A new session id replaced the current one (sender restart); the old
    /// session's unfinished channels were failed just before.
    SessionRestarted {
        /// Previous id.
        old: SessionId,
        /// New id.
        new: SessionId,
    },
    /// 2Δt of silence: the session's state was freed.
    SessionExpired {
        /// Its id.
        session: SessionId,
    },
    /// The first beacon of a session (or changed parameters).
    SessionParams {
        /// The beacon (its channel table and counters as of then).
        beacon: BeaconRepr,
    },
    /// A channel's metadata arrived; data events follow.
    ChannelOpened {
        /// Channel.
        channel: ChannelId,
        /// Metadata (untrusted: sanitise names before use).
        meta: ChannelMeta,
    },
    /// Bytes of a channel, in order, contiguous with the previous event's
    /// (or following a `ChannelGap`, or a run of held blocks).
    ChannelData {
        /// Channel.
        channel: ChannelId,
        /// Where `data` starts in the channel. On a block-stable (sync)
        /// channel always block × block size, gaps and held blocks
        /// included; on other channels the bytes delivered before `data`
        /// (its offset while no gap occurred).
        offset: u64,
        /// The bytes (one block).
        data: Vec<u8>,
    },
    /// Blocks of an aligned channel (packets) that could not be recovered:
    /// the channel steps over them and goes on; the next `ChannelData`
    /// follows the gap. The channel's verdict at its trailer is then
    /// `BlockLost` with the total, but everything else was delivered.
    ChannelGap {
        /// Channel.
        channel: ChannelId,
        /// The first lost block of this gap.
        block: u64,
        /// Consecutive blocks lost.
        count: u64,
    },
    /// A block-stable (sync) channel reached its trailer with blocks lost:
    /// `held` lists the blocks the application has (delivered in this pass
    /// or held from an earlier one), `digest` and `len` are the trailer's.
    /// The channel's `ChannelFailed { BlockLost }` follows at once; the
    /// application may keep the blocks to merge them with a later pass
    /// ([`Receiver::hold_blocks`]).
    ChannelPartial {
        /// Channel.
        channel: ChannelId,
        /// The blocks in the application's hands, over the trailer's block
        /// count, with the channel's block size.
        held: BlockSet,
        /// The trailer's digest of the whole channel.
        digest: [u8; 32],
        /// The trailer's total length.
        len: u64,
    },
    /// Every block of a channel with held blocks ([`Receiver::hold_blocks`])
    /// is in the application's hands: the blocks this pass delivered and
    /// those it held. The core saw only part of the bytes, so it verified
    /// nothing: the application MUST check `bytes` and `digest` (the
    /// trailer's) against what it assembled before it trusts the result.
    ChannelAssembled {
        /// Channel.
        channel: ChannelId,
        /// The trailer's total length.
        bytes: u64,
        /// The trailer's BLAKE3 digest, unverified.
        digest: [u8; 32],
    },
    /// Every byte arrived and the digest matched.
    ChannelComplete {
        /// Channel.
        channel: ChannelId,
        /// Total bytes.
        bytes: u64,
        /// Verified BLAKE3 digest.
        digest: [u8; 32],
    },
    /// The channel failed; bytes already delivered must be discarded or
    /// quarantined by the application.
    ChannelFailed {
        /// Channel.
        channel: ChannelId,
        /// Why.
        reason: FailReason,
    },
    /// The sender's configuration does not match this receiver's.
    ConfigMismatch(Mismatch),
    /// No valid datagram for `silence_timeout`.
    LinkSilent {
        /// Last valid datagram.
        last_heard: Timestamp,
    },
    /// Valid datagrams again after `LinkSilent`.
    LinkResumed,
}

diodon_counters::counters! {
    /// Exact accounting of every datagram.
    #[derive(Debug, Clone, Default, PartialEq, Eq)]
    pub struct ReceiverStats in Diodon "receiver" {
        datagrams: counter Count "datagrams" "Datagrams handed to the core.",
        accepted: counter Count "accepted" "Datagrams accepted (passed every check, not duplicate, not stale).",
        bad_length: counter Count "bad_length" "Datagrams too short, with a length disagreeing with the header, or unknown flags.",
        wrong_version: counter Count "wrong_version" "Datagrams of another protocol version.",
        integrity_mismatch: counter Count "integrity_mismatch" "Datagrams keyed while unkeyed was expected, encrypted while not, or the reverse.",
        bad_check: counter Count "bad_check" "Datagrams with a wrong CRC32C, MAC or AEAD tag, or an unknown key id (corruption, forgery or a wrong key).",
        malformed: counter Count "malformed" "Datagrams that passed the check but have an invalid body field.",
        stale_session: counter Count "stale_session" "Datagrams of a previous (retired) session.",
        duplicates: counter Count "duplicates" "Datagrams whose sequence number was already seen.",
        too_old: counter Count "too_old" "Datagrams below the replay window.",
        expired: counter Count "expired" "Datagrams older than their lifetime.",
        inconsistent: counter Count "inconsistent" "Symbols contradicting earlier symbols of their block (k, m, lengths).",
        late: counter Count "late" "Datagrams for a block already delivered or a channel already ended.",
        data_symbols: counter Count "data_symbols" "Source symbols accepted.",
        repair_symbols: counter Count "repair_symbols" "Repair symbols accepted.",
        beacons: counter Count "beacons" "Beacons accepted.",
        missing: counter Count "missing" "Datagrams never received, from sequence gaps (all sessions).",
        recovered_symbols: counter Count "recovered_symbols" "Source symbols rebuilt by FEC.",
        blocks_recovered: counter Count "blocks_recovered" "Blocks that needed FEC.",
        blocks_delivered: counter Count "blocks_delivered" "Blocks delivered.",
        blocks_lost: counter Count "blocks_lost" "Blocks that could not be recovered.",
        channels_opened: counter Count "channels_opened" "Channels opened (metadata received).",
        channels_complete: counter Count "channels_complete" "Channels complete and verified.",
        channels_failed: counter Count "channels_failed" "Channels failed.",
        channels_skipped: counter Count "channels_skipped" "Channels the application already held (skip_channel): their later datagrams count as late.",
        channels_partial: counter Count "channels_partial" "Block-stable channels that ended with blocks lost, their other blocks listed for a later pass (each also counts as failed).",
        channels_assembled: counter Count "channels_assembled" "Channels completed from blocks of this pass and blocks held from an earlier one, left to the application to verify.",
        blocks_held: counter Count "blocks_held" "Blocks the application already held from an earlier pass (hold_blocks): not needed again.",
        bytes_delivered: counter Bytes "delivered" "Channel bytes delivered.",
        sessions: counter Count "sessions" "Sender sessions adopted.",
    }
}

impl ReceiverStats {
    /// Datagrams rejected by validation (length, version, integrity, body).
    pub fn invalid(&self) -> u64 {
        self.bad_length
            + self.wrong_version
            + self.integrity_mismatch
            + self.bad_check
            + self.malformed
    }
}

const SEQ_WINDOW: u64 = 1 << 16;

/// Sliding bitmap of seen sequence numbers: duplicates, replays and gaps.
#[derive(Debug, Clone)]
struct SeqWindow {
    lowest: u64,
    highest: u64,
    bits: Vec<u64>,
    unique: u64,
}

enum SeqCheck {
    New,
    Duplicate,
    TooOld,
}

impl SeqWindow {
    fn new(first: u64) -> Self {
        let mut w = SeqWindow {
            lowest: first,
            highest: first,
            bits: vec![0; (SEQ_WINDOW / 64) as usize],
            unique: 1,
        };
        w.set(first);
        w
    }

    fn bit(seq: u64) -> (usize, u64) {
        let i = seq % SEQ_WINDOW;
        ((i / 64) as usize, 1 << (i % 64))
    }

    fn set(&mut self, seq: u64) {
        let (w, b) = Self::bit(seq);
        self.bits[w] |= b;
    }

    fn check(&mut self, seq: u64) -> SeqCheck {
        if seq > self.highest {
            if seq - self.highest >= SEQ_WINDOW {
                self.bits.fill(0);
            } else {
                for s in self.highest + 1..seq {
                    let (w, b) = Self::bit(s);
                    self.bits[w] &= !b;
                }
            }
            self.highest = seq;
        } else if self.highest - seq >= SEQ_WINDOW {
            return SeqCheck::TooOld;
        } else {
            let (w, b) = Self::bit(seq);
            if self.bits[w] & b != 0 {
                return SeqCheck::Duplicate;
            }
        }
        if seq < self.lowest {
            self.lowest = seq;
        }
        self.set(seq);
        self.unique += 1;
        SeqCheck::New
    }

    fn missing(&self) -> u64 {
        (self.highest - self.lowest + 1).saturating_sub(self.unique)
    }
}

#[derive(Debug)]
struct BlockRx {
    k: u16,
    m: u16,
    tail_len: u16,
    group_pos: u8,
    group_len: u8,
    shard_len: Option<usize>,
    data: Vec<u8>,
    present: Vec<bool>,
    present_count: usize,
    tail_stash: Option<Vec<u8>>,
    repair: Vec<(usize, Vec<u8>)>,
    /// Decoded block bytes, trimmed to their true length.
    done: Option<Vec<u8>>,
}

impl BlockRx {
    fn new(s: &SymbolRepr<'_>) -> Self {
        BlockRx {
            k: s.k,
            m: s.m,
            tail_len: s.tail_len,
            group_pos: s.group_pos,
            group_len: s.group_len,
            shard_len: None,
            data: Vec::new(),
            present: vec![false; usize::from(s.k)],
            present_count: 0,
            tail_stash: None,
            repair: Vec::new(),
            done: None,
        }
    }

    fn matches(&self, s: &SymbolRepr<'_>) -> bool {
        self.k == s.k
            && self.m == s.m
            && self.tail_len == s.tail_len
            && self.group_pos == s.group_pos
            && self.group_len == s.group_len
    }

    fn byte_len(&self, shard_len: usize) -> usize {
        (usize::from(self.k) - 1) * shard_len + usize::from(self.tail_len)
    }

    fn buffered(&self) -> usize {
        self.data.len()
            + self.tail_stash.as_ref().map_or(0, Vec::len)
            + self.repair.iter().map(|(_, r)| r.len()).sum::<usize>()
            + self.done.as_ref().map_or(0, Vec::len)
    }

    fn set_shard_len(&mut self, shard_len: usize, pool: &mut BufferPool) {
        self.shard_len = Some(shard_len);
        // Not zeroed: every source shard is written when it arrives or when
        // it is decoded before the block is read (`put_shard` zeroes the
        // tail shard's padding, which decoding reads).
        self.data = pool.take_any(usize::from(self.k) * shard_len);
        if let Some(tail) = self.tail_stash.take() {
            let at = (usize::from(self.k) - 1) * shard_len;
            self.put_shard(at, shard_len, &tail);
        }
    }

    /// Writes a source symbol's payload at `at` and zeroes the rest of its
    /// shard (the tail symbol's padding, zeros on the sending side too).
    fn put_shard(&mut self, at: usize, shard_len: usize, payload: &[u8]) {
        self.data[at..at + payload.len()].copy_from_slice(payload);
        self.data[at + payload.len()..at + shard_len].fill(0);
    }

    /// Stores a symbol; `Err(())` if it contradicts the block.
    fn insert(&mut self, s: &SymbolRepr<'_>, pool: &mut BufferPool) -> Result<bool, ()> {
        let index = usize::from(s.index);
        let k = usize::from(self.k);
        // Learn the shard length: any non-tail symbol carries it; a
        // single-symbol block has shard = tail rounded up to even.
        let implied = if s.is_tail() {
            (k == 1).then(|| usize::from(self.tail_len).next_multiple_of(2))
        } else {
            Some(s.payload.len())
        };
        match (self.shard_len, implied) {
            (Some(known), Some(new)) if known != new => return Err(()),
            (None, Some(new)) => {
                if k > 1 && new < usize::from(self.tail_len) {
                    return Err(());
                }
                self.set_shard_len(new, pool);
            }
            _ => {}
        }
        if index < k {
            if self.present[index] {
                return Ok(false);
            }
            match self.shard_len {
                Some(len) => self.put_shard(index * len, len, s.payload),
                None => self.tail_stash = Some(s.payload.to_vec()),
            }
            self.present[index] = true;
            self.present_count += 1;
        } else {
            let r = index - k;
            if self.repair.iter().any(|(i, _)| *i == r) {
                return Ok(false);
            }
            self.repair.push((r, s.payload.to_vec()));
        }
        Ok(true)
    }

    fn ready(&self) -> bool {
        self.done.is_none()
            && self.shard_len.is_some()
            && self.present_count + self.repair.len() >= usize::from(self.k)
    }
}

#[derive(Debug)]
struct ChannelRx {
    meta: Option<ChannelMeta>,
    next_block: u64,
    delivered: u64,
    hasher: blake3::Hasher,
    blocks: BTreeMap<u64, BlockRx>,
    /// Every block below this was fully sent by the sender.
    progress: u64,
    loss_checks: VecDeque<(u64, Timestamp)>,
    trailer: Option<TrailerRepr>,
    last_heard: Timestamp,
    buffered: usize,
    /// Blocks stepped over (aligned and block-stable channels) and the
    /// first of them.
    gaps: Option<(u64, u64)>,
    /// Runs of blocks lost (first, count), block-stable channels only:
    /// what `ChannelPartial` leaves out.
    lost_runs: Vec<(u64, u64)>,
    /// Blocks the application holds from an earlier pass
    /// ([`Receiver::hold_blocks`]): skipped, never delivered.
    held: Option<BlockSet>,
    /// Some block at or after `next_block` was held when it was marked: the
    /// channel ends `ChannelAssembled`, not `ChannelComplete`.
    assembled: bool,
    /// The first delivered block of a block-stable channel whose length is
    /// not the block size (only the last block may be shorter).
    short_block: Option<u64>,
}

impl ChannelRx {
    fn new(now: Timestamp) -> Self {
        ChannelRx {
            meta: None,
            next_block: 0,
            delivered: 0,
            hasher: blake3::Hasher::new(),
            blocks: BTreeMap::new(),
            progress: 0,
            loss_checks: VecDeque::new(),
            trailer: None,
            last_heard: now,
            buffered: 0,
            gaps: None,
            lost_runs: Vec::new(),
            held: None,
            assembled: false,
            short_block: None,
        }
    }

    /// Whether a lost block is a gap rather than the channel's failure:
    /// aligned records, and block-stable (sync) channels, whose later
    /// blocks are worth keeping for a later pass.
    fn steps_over_gaps(&self) -> bool {
        self.meta.as_ref().is_some_and(|m| m.aligned) || self.block_bytes().is_some()
    }

    /// The block size of a block-stable (sync) channel.
    fn block_bytes(&self) -> Option<u32> {
        self.meta
            .as_ref()
            .and_then(|m| m.sync.as_ref())
            .map(|s| s.block_bytes)
    }

    /// Whether the application holds `block` from an earlier pass.
    fn is_held(&self, block: u64) -> bool {
        self.held.as_ref().is_some_and(|h| h.contains(block))
    }

    /// The blocks below `total` the application has: all but the lost runs.
    fn in_hand(&self, total: u64) -> Result<BlockSet, BlockSetError> {
        let block_bytes = self.block_bytes().unwrap_or(0);
        let mut set = BlockSet::new(block_bytes, total)?;
        let mut runs = self.lost_runs.iter().peekable();
        let mut b = 0;
        while b < total {
            match runs.peek() {
                Some(&&(first, count)) if first <= b => {
                    b = b.max(first.saturating_add(count));
                    runs.next();
                }
                _ => {
                    set.insert(b);
                    b += 1;
                }
            }
        }
        Ok(set)
    }

    fn advance_progress(&mut self, to: u64, now: Timestamp, grace: Duration) {
        if to > self.progress {
            self.progress = to;
            self.loss_checks.push_back((to, now + grace));
        }
    }

    fn all_sent_blocks_delivered(&self) -> bool {
        self.next_block >= self.progress
    }

    /// When `handle_timeout` has work for this channel: its next loss check
    /// or its expiry (`expiry` = 2Δt after it was last heard).
    fn deadline(&self, expiry: Duration) -> Timestamp {
        let silent = self.last_heard + expiry;
        self.loss_checks
            .front()
            .map_or(silent, |(_, t)| silent.min(*t))
    }
}

#[derive(Debug)]
struct SessionRx {
    id: SessionId,
    window: SeqWindow,
    min_offset: Option<u32>,
    channels: HashMap<ChannelId, ChannelRx>,
    /// `ChannelRx::deadline` of every channel, keyed by deadline.
    channel_due: Deadlines<ChannelId>,
    ended: HashSet<ChannelId>,
    last_heard: Timestamp,
    beacon: Option<BeaconRepr>,
    mismatches: HashSet<u8>,
}

#[derive(Clone, Copy, Debug)]
enum Timer {
    Silence,
    SessionExpiry,
}

impl TimerSlot for Timer {
    const COUNT: usize = 2;
    fn index(self) -> usize {
        self as usize
    }
}

const RETIRED_SESSIONS: usize = 1024;

/// The receiving side.
#[derive(Debug)]
pub struct Receiver {
    config: ReceiverConfig,
    session: Option<SessionRx>,
    retired: VecDeque<SessionId>,
    retired_missing: u64,
    timers: TimerTable<Timer>,
    silent: bool,
    last_heard: Timestamp,
    buffered: usize,
    fec: ReedSolomon,
    pool: BufferPool,
    events: VecDeque<Event>,
    stats: ReceiverStats,
    reported: HashSet<u8>,
    /// Derived session ciphers (encrypted mode).
    ciphers: CipherCache,
    /// An encrypted datagram opened: header, plaintext body, tag.
    plain: Vec<u8>,
    /// Authentic datagrams per key id (keyed modes).
    key_use: Box<[u64; 256]>,
}

impl Receiver {
    /// Takes the decoder's sums and transforms with a driver's platform
    /// kernel (see [`crate::fec::SumKernel`]): the same bytes, at less cost.
    pub fn use_kernel(&mut self, kernel: Arc<dyn crate::fec::SumKernel>) {
        self.fec.use_kernel(kernel);
    }

    /// A receiver waiting for its first session, started at `now`.
    pub fn new(config: ReceiverConfig, now: Timestamp) -> Self {
        let mut timers = TimerTable::default();
        timers.set(Timer::Silence, now + config.silence_timeout);
        Receiver {
            session: None,
            retired: VecDeque::new(),
            retired_missing: 0,
            timers,
            silent: false,
            last_heard: now,
            buffered: 0,
            fec: ReedSolomon::new(),
            // Delivered buffers come back (`recycle`): at most 64 MiB idle.
            pool: BufferPool::with_byte_limit(64, 64 << 20),
            events: VecDeque::new(),
            stats: ReceiverStats::default(),
            reported: HashSet::new(),
            ciphers: CipherCache::new(config.integrity.key_ring().cloned()),
            plain: Vec::new(),
            key_use: Box::new([0; 256]),
            config,
        }
    }

    /// Takes the keys of `ring` (the key file read again): datagrams of its
    /// current and next key ids open from now on, those of any other id are
    /// `bad_check`. The mode (MAC or encrypted) stays; a CRC32C receiver
    /// has no keys and ignores the call (returns `false`).
    pub fn replace_keys(&mut self, ring: KeyRing) -> bool {
        if !self.config.integrity.is_keyed() {
            return false;
        }
        self.ciphers = CipherCache::new(Some(ring.clone()));
        self.config.integrity = self.config.integrity.with_ring(ring);
        true
    }

    /// Authentic datagrams received so far under each key id that was
    /// used (ascending ids; empty without a key): a rollover is complete
    /// once the old id's count stops growing.
    pub fn key_use(&self) -> Vec<(u8, u64)> {
        (0..=u8::MAX)
            .zip(self.key_use.iter())
            .filter(|(_, n)| **n > 0)
            .map(|(id, n)| (id, *n))
            .collect()
    }

    /// Counters, with `missing` computed over all sessions so far.
    pub fn stats(&self) -> ReceiverStats {
        let mut s = self.stats.clone();
        s.missing = self.retired_missing + self.session.as_ref().map_or(0, |x| x.window.missing());
        s
    }

    /// The configuration.
    pub fn config(&self) -> &ReceiverConfig {
        &self.config
    }

    /// The current session, if any.
    pub fn session_id(&self) -> Option<SessionId> {
        self.session.as_ref().map(|s| s.id)
    }

    /// The latest beacon of the current session.
    pub fn beacon(&self) -> Option<&BeaconRepr> {
        self.session.as_ref().and_then(|s| s.beacon.as_ref())
    }

    /// Channels still open in the current session.
    pub fn open_channels(&self) -> usize {
        self.session.as_ref().map_or(0, |s| s.channels.len())
    }

    /// Block bytes buffered and not yet delivered.
    pub fn buffered_bytes(&self) -> usize {
        self.buffered
    }

    /// Next event.
    pub fn poll_event(&mut self) -> Option<Event> {
        self.events.pop_front()
    }

    /// Gives a delivered `ChannelData` buffer back for reuse by later
    /// blocks (optional; saves an allocation and its page faults per block).
    pub fn recycle(&mut self, buffer: Vec<u8>) {
        self.pool.put(buffer);
    }

    /// Fails a channel on the application's behalf (a hostile name, a full
    /// disk, a destination that refused the connection). Later datagrams of
    /// the channel are counted as late and dropped. Events of the channel
    /// still queued are withdrawn — its data and even its completion, when
    /// the whole channel arrived in the batch that opened it: after a
    /// rejection the application hears only the failure, never a verdict
    /// of "complete" for a channel it refused.
    pub fn reject_channel(&mut self, channel: ChannelId, why: impl Into<Rejection>) {
        let mut completed = false;
        let mut assembled = false;
        let mut failed = false;
        self.events.retain(|e| match e {
            Event::ChannelData { channel: c, .. }
            | Event::ChannelGap { channel: c, .. }
            | Event::ChannelPartial { channel: c, .. } => *c != channel,
            Event::ChannelComplete { channel: c, .. } if *c == channel => {
                completed = true;
                false
            }
            Event::ChannelAssembled { channel: c, .. } if *c == channel => {
                assembled = true;
                false
            }
            Event::ChannelFailed { channel: c, .. } => {
                failed |= *c == channel;
                true
            }
            _ => true,
        });
        if completed || assembled {
            if completed {
                self.stats.channels_complete -= 1;
            } else {
                self.stats.channels_assembled -= 1;
            }
            self.stats.channels_failed += 1;
            self.events.push_back(Event::ChannelFailed {
                channel,
                reason: FailReason::Rejected(why.into()),
            });
        } else if !failed {
            self.fail_channel(channel, FailReason::Rejected(why.into()));
        }
    }

    /// Ends a channel on the application's behalf without a verdict: it
    /// already holds the announced bytes (a sync receiver recognised the
    /// file from its channel-open). The channel's state is freed, later
    /// datagrams of it are counted as late, and no further event of it is
    /// raised. Returns whether the channel was still open (`false`: it had
    /// already ended, with its own verdict).
    pub fn skip_channel(&mut self, channel: ChannelId) -> bool {
        let Some(s) = &mut self.session else {
            return false;
        };
        if s.ended.contains(&channel) {
            return false;
        }
        if let Some(ch) = s.channels.remove(&channel) {
            self.buffered -= ch.buffered;
        }
        s.channel_due.set(channel, None);
        s.ended.insert(channel);
        self.stats.channels_skipped += 1;
        true
    }

    /// Tells the core the application already holds `held` blocks of a
    /// block-stable (sync) channel from an earlier pass (call it after the
    /// channel's `ChannelOpened`). Those blocks count as decoded: the loss
    /// checks skip them, their symbols count as `late`, nothing of them is
    /// delivered, and the channel ends `ChannelAssembled` (the application
    /// verifies) instead of `ChannelComplete`. Refused, changing nothing,
    /// when the channel is not open, not block-stable, or was cut with
    /// another geometry. Returns how many blocks not yet delivered it marked.
    pub fn hold_blocks(&mut self, channel: ChannelId, held: &BlockSet) -> Result<u64, HoldError> {
        let Some(s) = &mut self.session else {
            return Err(HoldError::NotOpen(channel));
        };
        let ch = s
            .channels
            .get_mut(&channel)
            .ok_or(HoldError::NotOpen(channel))?;
        let announced = ch.block_bytes().ok_or(HoldError::NotBlockStable(channel))?;
        if announced != held.block_bytes() {
            return Err(HoldError::Geometry {
                held: held.block_bytes(),
                announced,
            });
        }
        if let Some(size) = ch.meta.as_ref().and_then(|m| m.size) {
            let blocks = size.div_ceil(u64::from(announced));
            if blocks != held.total() {
                return Err(HoldError::BlockCount {
                    held: held.total(),
                    announced: blocks,
                });
            }
        }
        let mut marked = 0;
        let mut merged = ch.held.take().unwrap_or_else(|| held.clone());
        for b in held.iter().filter(|b| *b >= ch.next_block) {
            merged.insert(b);
            if let Some(rx) = ch.blocks.remove(&b) {
                let freed = rx.buffered();
                ch.buffered -= freed;
                self.buffered -= freed;
            }
            marked += 1;
        }
        ch.held = Some(merged);
        ch.assembled |= marked > 0;
        self.stats.blocks_held += marked;
        self.deliver(channel);
        self.rearm(channel);
        Ok(marked)
    }

    /// Earliest time `handle_timeout` has work (the channels' deadlines are
    /// keyed by time: no scan over the channels).
    pub fn poll_timeout(&self) -> Option<Timestamp> {
        let next = self.timers.next();
        match self.session.as_ref().and_then(|s| s.channel_due.next()) {
            Some(t) => Some(next.map_or(t, |n| n.min(t))),
            None => next,
        }
    }

    /// Panics unless every channel's entry in the deadline queue equals the
    /// deadline a scan over the channels computes (for the fuzzing entry
    /// points, which call it after every input).
    #[cfg(feature = "fuzzing")]
    #[doc(hidden)]
    pub fn check_timers(&self) {
        let Some(s) = &self.session else { return };
        let expiry = 2 * self.config.delta_t;
        assert_eq!(
            s.channel_due.len(),
            s.channels.len(),
            "one deadline per channel"
        );
        for (id, ch) in &s.channels {
            assert_eq!(
                s.channel_due.get(*id),
                Some(ch.deadline(expiry)),
                "channel {id}"
            );
        }
        let scan = s.channels.values().map(|ch| ch.deadline(expiry)).min();
        assert_eq!(s.channel_due.next(), scan, "earliest channel deadline");
    }

    /// Runs the timers due at `now`: loss verdicts after the reorder grace,
    /// channel and session expiry after 2Δt of silence, `LinkSilent`.
    /// Calling it twice at the same `now` does nothing the second time.
    pub fn handle_timeout(&mut self, now: Timestamp) {
        if self.timers.take_expired(Timer::Silence, now) && !self.silent {
            self.silent = true;
            self.events.push_back(Event::LinkSilent {
                last_heard: self.last_heard,
            });
        }
        let expiry = 2 * self.config.delta_t;
        let mut failures: Vec<(ChannelId, FailReason)> = Vec::new();
        let mut gaps: Vec<(ChannelId, u64)> = Vec::new();
        if let Some(s) = &mut self.session {
            for id in s.channel_due.take_due(now) {
                let Some(ch) = s.channels.get_mut(&id) else {
                    continue;
                };
                let mut limit = None;
                while ch.loss_checks.front().is_some_and(|(_, t)| *t <= now) {
                    limit = ch.loss_checks.pop_front().map(|(p, _)| p);
                }
                if let Some(limit) = limit {
                    if let Some(lost) = first_lost(ch, limit) {
                        if ch.steps_over_gaps() {
                            gaps.push((id, limit));
                        } else {
                            failures.push((id, lost));
                            continue;
                        }
                    }
                }
                if ch.last_heard + expiry <= now {
                    failures.push((id, silence_reason(ch)));
                    continue;
                }
                s.channel_due.set(id, Some(ch.deadline(expiry)));
            }
        }
        gaps.sort_by_key(|(id, _)| *id);
        for (id, limit) in gaps {
            self.step_over(id, limit);
            self.rearm(id);
        }
        failures.sort_by_key(|(id, _)| *id);
        for (id, reason) in failures {
            if let FailReason::BlockLost { count, .. } = reason {
                self.stats.blocks_lost += count;
            }
            self.fail_channel(id, reason);
        }
        if self.timers.take_expired(Timer::SessionExpiry, now) {
            self.expire_session();
        }
    }

    /// Takes one datagram. Never panics on any input; every rejection is
    /// counted in [`ReceiverStats`].
    pub fn handle_datagram(&mut self, now: Timestamp, datagram: &[u8]) {
        self.stats.datagrams += 1;
        let mut plain = std::mem::take(&mut self.plain);
        match open_datagram(
            datagram,
            &self.config.integrity,
            &mut self.ciphers,
            &mut plain,
        ) {
            Ok(repr) => {
                if self.config.integrity.is_keyed() {
                    // The tag verified with this id's key: byte 2 is its id.
                    self.key_use[usize::from(datagram[2])] += 1;
                }
                self.handle_valid(now, repr);
            }
            Err(e) => self.count_rejection(&e),
        }
        self.plain = plain;
    }

    /// A datagram whose tag verified and whose body parsed: session,
    /// lifetime and replay checks, then its content.
    fn handle_valid(&mut self, now: Timestamp, repr: DatagramRepr<'_>) {
        if !self.accept_session(now, &repr) {
            return;
        }
        let Some(s) = &mut self.session else { return };
        if self.config.enforce_lifetime && expired(s, now, &repr) {
            self.stats.expired += 1;
            return;
        }
        match s.window.check(repr.header.seq) {
            SeqCheck::New => {}
            SeqCheck::Duplicate => {
                self.stats.duplicates += 1;
                return;
            }
            SeqCheck::TooOld => {
                self.stats.too_old += 1;
                return;
            }
        }
        self.stats.accepted += 1;
        s.last_heard = now;
        self.last_heard = now;
        self.timers
            .set(Timer::Silence, now + self.config.silence_timeout);
        self.timers
            .set(Timer::SessionExpiry, now + 2 * self.config.delta_t);
        if self.silent {
            self.silent = false;
            self.events.push_back(Event::LinkResumed);
        }
        let channel = repr.header.channel;
        match repr.body {
            Body::Beacon(beacon) => {
                let listed: Vec<ChannelId> = beacon.channels.iter().map(|e| e.channel).collect();
                self.on_beacon(now, beacon);
                for id in listed {
                    self.rearm(id);
                }
                return;
            }
            Body::Open(meta) => {
                if let Some(ch) = self.channel_mut(now, channel) {
                    if ch.meta.is_none() {
                        ch.meta = Some(meta.clone());
                        self.stats.channels_opened += 1;
                        self.events
                            .push_back(Event::ChannelOpened { channel, meta });
                        self.deliver(channel);
                    }
                }
            }
            Body::Trailer(trailer) => self.on_trailer(now, channel, trailer),
            Body::Data(sym) => {
                self.stats.data_symbols += 1;
                self.on_symbol(now, channel, &sym);
            }
            Body::Repair(sym) => {
                self.stats.repair_symbols += 1;
                self.on_symbol(now, channel, &sym);
            }
        }
        self.rearm(channel);
    }

    /// Keeps the channel's entry in `channel_due` equal to its deadline
    /// (after a datagram changed when it was last heard or its loss checks).
    fn rearm(&mut self, channel: ChannelId) {
        let expiry = 2 * self.config.delta_t;
        if let Some(s) = &mut self.session {
            let at = s.channels.get(&channel).map(|ch| ch.deadline(expiry));
            s.channel_due.set(channel, at);
        }
    }

    fn count_rejection(&mut self, e: &WireError) {
        match e {
            WireError::BadLength { .. } | WireError::BadFlags(_) => self.stats.bad_length += 1,
            WireError::BadVersion(v) => {
                self.stats.wrong_version += 1;
                self.mismatch_once(1, Mismatch::Version(*v));
            }
            WireError::IntegrityMismatch { datagram_keyed, .. } => {
                self.stats.integrity_mismatch += 1;
                self.mismatch_once(
                    2,
                    Mismatch::Integrity {
                        datagram_keyed: *datagram_keyed,
                    },
                );
            }
            WireError::EncryptionMismatch {
                datagram_encrypted, ..
            } => {
                self.stats.integrity_mismatch += 1;
                self.mismatch_once(
                    5,
                    Mismatch::Encryption {
                        datagram_encrypted: *datagram_encrypted,
                    },
                );
            }
            WireError::BadCheck => self.stats.bad_check += 1,
            WireError::UnknownType(_) | WireError::Malformed { .. } => self.stats.malformed += 1,
        }
    }

    /// Raises a receiver-wide mismatch once.
    fn mismatch_once(&mut self, kind: u8, m: Mismatch) {
        if self.reported.insert(kind) {
            self.events.push_back(Event::ConfigMismatch(m));
        }
    }

    /// Adopts, keeps or rejects the datagram's session. Returns whether to go on.
    fn accept_session(&mut self, now: Timestamp, repr: &DatagramRepr<'_>) -> bool {
        let id = repr.header.session;
        if self.session.as_ref().is_some_and(|s| s.id == id) {
            return true;
        }
        if self.retired.contains(&id) {
            self.stats.stale_session += 1;
            return false;
        }
        let old = self.session.as_ref().map(|s| s.id);
        if let Some(old_id) = old {
            self.fail_all(&FailReason::SenderRestarted);
            self.retire_current();
            self.events.push_back(Event::SessionRestarted {
                old: old_id,
                new: id,
            });
        } else {
            self.events.push_back(Event::SessionStarted { session: id });
        }
        self.stats.sessions += 1;
        self.session = Some(SessionRx {
            id,
            window: SeqWindow::new(repr.header.seq),
            min_offset: None,
            channels: HashMap::new(),
            channel_due: Deadlines::default(),
            ended: HashSet::new(),
            last_heard: now,
            beacon: None,
            mismatches: HashSet::new(),
        });
        // The first datagram opened the window; undo its count so the
        // regular check below accepts it once.
        if let Some(s) = &mut self.session {
            s.window = SeqWindow {
                unique: 0,
                ..s.window.clone()
            };
            let (w, b) = SeqWindow::bit(repr.header.seq);
            s.window.bits[w] &= !b;
        }
        true
    }

    fn retire_current(&mut self) {
        if let Some(s) = self.session.take() {
            self.retired_missing += s.window.missing();
            if self.retired.len() == RETIRED_SESSIONS {
                self.retired.pop_front();
            }
            self.retired.push_back(s.id);
        }
        self.buffered = 0;
        self.timers.stop(Timer::SessionExpiry);
    }

    fn expire_session(&mut self) {
        let Some(id) = self.session.as_ref().map(|s| s.id) else {
            return;
        };
        self.fail_all(&FailReason::SessionExpired);
        if let Some(s) = self.session.take() {
            self.retired_missing += s.window.missing();
        }
        self.buffered = 0;
        self.events.push_back(Event::SessionExpired { session: id });
    }

    fn fail_all(&mut self, reason: &FailReason) {
        let mut ids: Vec<ChannelId> = self
            .session
            .as_ref()
            .map(|s| s.channels.keys().copied().collect())
            .unwrap_or_default();
        ids.sort();
        for id in ids {
            let r = match (
                reason,
                self.session.as_ref().and_then(|s| s.channels.get(&id)),
            ) {
                (FailReason::SessionExpired, Some(ch)) => match silence_reason(ch) {
                    FailReason::TimedOut => FailReason::SessionExpired,
                    other => other,
                },
                _ => reason.clone(),
            };
            self.fail_channel(id, r);
        }
    }

    fn fail_channel(&mut self, channel: ChannelId, reason: FailReason) {
        let Some(s) = &mut self.session else { return };
        let existed = s.channels.remove(&channel);
        s.channel_due.set(channel, None);
        if existed.is_none() && s.ended.contains(&channel) {
            return;
        }
        if let Some(ch) = existed {
            self.buffered -= ch.buffered;
        }
        s.ended.insert(channel);
        self.stats.channels_failed += 1;
        self.events
            .push_back(Event::ChannelFailed { channel, reason });
    }

    /// Makes sure the channel has state (created on first sight); `false` if
    /// it already ended (the datagram is late) or the channel limit is reached.
    fn ensure_channel(&mut self, now: Timestamp, channel: ChannelId) -> bool {
        let Some(s) = self.session.as_mut() else {
            return false;
        };
        if s.ended.contains(&channel) {
            self.stats.late += 1;
            return false;
        }
        if !s.channels.contains_key(&channel) && s.channels.len() >= self.config.max_channels {
            self.stats.late += 1;
            self.fail_channel(channel, FailReason::ResourceLimit);
            return false;
        }
        let ch = s
            .channels
            .entry(channel)
            .or_insert_with(|| ChannelRx::new(now));
        ch.last_heard = now;
        true
    }

    fn channel_mut(&mut self, now: Timestamp, channel: ChannelId) -> Option<&mut ChannelRx> {
        if !self.ensure_channel(now, channel) {
            return None;
        }
        self.session.as_mut()?.channels.get_mut(&channel)
    }

    fn on_beacon(&mut self, now: Timestamp, beacon: BeaconRepr) {
        self.stats.beacons += 1;
        let grace = self.config.reorder_grace;
        let mut aborted = Vec::new();
        let mut new_mismatches = Vec::new();
        if let Some(s) = &mut self.session {
            if usize::from(beacon.symbol_size) > self.config.max_symbol_size
                && s.mismatches.insert(1)
            {
                new_mismatches.push(Mismatch::SymbolTooLarge(beacon.symbol_size));
            }
            let receiver_ms = self.config.delta_t.as_millis() as u64;
            if u64::from(beacon.delta_t_ms) > receiver_ms && s.mismatches.insert(2) {
                new_mismatches.push(Mismatch::DeltaT {
                    sender_ms: beacon.delta_t_ms,
                    receiver_ms,
                });
            }
            for e in &beacon.channels {
                if let Some(ch) = s.channels.get_mut(&e.channel) {
                    match e.state {
                        ChannelState::Aborted => aborted.push(e.channel),
                        // An open channel is alive even when idle (a quiet
                        // TCP connection): the beacon keeps its state.
                        ChannelState::Open => {
                            ch.last_heard = now;
                            ch.advance_progress(e.blocks_sent, now, grace);
                        }
                        // A finished one is not: if its trailer never comes
                        // it expires 2Δt after its last datagram.
                        ChannelState::Finished => ch.advance_progress(e.blocks_sent, now, grace),
                    }
                }
            }
            let changed = s.beacon.as_ref().is_none_or(|b| !same_params(b, &beacon));
            if changed {
                self.events.push_back(Event::SessionParams {
                    beacon: beacon.clone(),
                });
            }
            s.beacon = Some(beacon);
        }
        for m in new_mismatches {
            self.events.push_back(Event::ConfigMismatch(m));
        }
        for id in aborted {
            self.fail_channel(id, FailReason::SenderAborted);
        }
    }

    fn on_trailer(&mut self, now: Timestamp, channel: ChannelId, trailer: TrailerRepr) {
        let grace = self.config.reorder_grace;
        let Some(ch) = self.channel_mut(now, channel) else {
            return;
        };
        if trailer.status == TrailerStatus::Aborted {
            self.fail_channel(channel, FailReason::SenderAborted);
            return;
        }
        if ch.trailer.is_none() {
            ch.trailer = Some(trailer);
            ch.advance_progress(trailer.total_blocks, now, grace);
            self.deliver(channel);
        }
    }

    fn on_symbol(&mut self, now: Timestamp, channel: ChannelId, sym: &SymbolRepr<'_>) {
        if sym.payload.len() > self.config.max_symbol_size {
            self.stats.inconsistent += 1;
            return;
        }
        let grace = self.config.reorder_grace;
        let limit = self.config.max_buffered_bytes;
        if !self.ensure_channel(now, channel) {
            return;
        }
        let Some(ch) = self
            .session
            .as_mut()
            .and_then(|s| s.channels.get_mut(&channel))
        else {
            return;
        };
        if sym.block < ch.next_block || ch.trailer.is_some_and(|t| sym.block >= t.total_blocks) {
            self.stats.late += 1;
            return;
        }
        ch.advance_progress(sym.group_start(), now, grace);
        if ch.is_held(sym.block) {
            self.stats.late += 1;
            return;
        }
        if !ch.blocks.contains_key(&sym.block)
            && !ReedSolomon::supports(usize::from(sym.k), usize::from(sym.m))
        {
            // Parameters no conforming sender produces: refuse before any
            // memory is committed to the block.
            self.stats.inconsistent += 1;
            return;
        }
        let block = ch
            .blocks
            .entry(sym.block)
            .or_insert_with(|| BlockRx::new(sym));
        if !block.matches(sym) {
            self.stats.inconsistent += 1;
            return;
        }
        if block.done.is_some() {
            self.stats.late += 1;
            return;
        }
        let before = block.buffered();
        match block.insert(sym, &mut self.pool) {
            Ok(true) => {}
            Ok(false) => {
                self.stats.late += 1;
                return;
            }
            Err(()) => {
                self.stats.inconsistent += 1;
                return;
            }
        }
        let mut decoded = true;
        if block.ready() {
            let k = usize::from(block.k);
            let m = usize::from(block.m);
            let shard_len = block.shard_len.unwrap_or(0);
            let needed = k - block.present_count;
            if needed > 0 {
                let repair: Vec<(usize, &[u8])> = block
                    .repair
                    .iter()
                    .map(|(i, r)| (*i, r.as_slice()))
                    .collect();
                if self
                    .fec
                    .decode(k, m, shard_len, &mut block.data, &block.present, &repair)
                    .is_err()
                {
                    // Unreachable for codes `supports` accepts; should it
                    // happen, the block stays incomplete and the timers
                    // declare it lost.
                    self.stats.inconsistent += 1;
                    decoded = false;
                } else {
                    self.stats.recovered_symbols += needed as u64;
                    self.stats.blocks_recovered += 1;
                }
            }
            if decoded {
                let mut data = std::mem::take(&mut block.data);
                data.truncate(block.byte_len(shard_len));
                block.repair = Vec::new();
                block.done = Some(data);
            }
        }
        let after = block.buffered();
        ch.buffered = ch.buffered + after - before;
        self.buffered = self.buffered + after - before;
        if self.buffered > limit {
            self.fail_channel(channel, FailReason::ResourceLimit);
            return;
        }
        self.deliver(channel);
    }

    /// Steps an aligned channel over the blocks below `limit` that did not
    /// decode: each run of them is one `ChannelGap`, the decoded blocks
    /// between are delivered in order, then delivery goes on as usual.
    fn step_over(&mut self, channel: ChannelId, limit: u64) {
        let Some(s) = &mut self.session else { return };
        let Some(ch) = s.channels.get_mut(&channel) else {
            return;
        };
        let mut run: Option<(u64, u64)> = None;
        let keep_runs = ch.block_bytes().is_some();
        while ch.next_block < limit {
            let b = ch.next_block;
            let decoded = ch.is_held(b) || ch.blocks.get(&b).is_some_and(|x| x.done.is_some());
            if decoded {
                if let Some((block, count)) = run.take() {
                    if keep_runs {
                        ch.lost_runs.push((block, count));
                    }
                    self.events.push_back(Event::ChannelGap {
                        channel,
                        block,
                        count,
                    });
                }
                deliver_one(
                    ch,
                    channel,
                    &mut self.buffered,
                    &mut self.stats,
                    &mut self.events,
                );
                continue;
            }
            if let Some(partial) = ch.blocks.remove(&b) {
                let held = partial.buffered();
                ch.buffered -= held;
                self.buffered -= held;
            }
            self.stats.blocks_lost += 1;
            let (first, total) = ch.gaps.unwrap_or((b, 0));
            ch.gaps = Some((first, total + 1));
            run = Some(run.map_or((b, 1), |(block, n)| (block, n + 1)));
            ch.next_block += 1;
        }
        if let Some((block, count)) = run {
            if keep_runs {
                ch.lost_runs.push((block, count));
            }
            self.events.push_back(Event::ChannelGap {
                channel,
                block,
                count,
            });
        }
        self.deliver(channel);
    }

    /// Emits every decoded block in order, then the verdict once the trailer
    /// and all blocks are in.
    fn deliver(&mut self, channel: ChannelId) {
        let Some(s) = &mut self.session else { return };
        let Some(ch) = s.channels.get_mut(&channel) else {
            return;
        };
        if ch.meta.is_none() {
            return;
        }
        while deliver_one(
            ch,
            channel,
            &mut self.buffered,
            &mut self.stats,
            &mut self.events,
        ) {}
        let Some(trailer) = ch.trailer else { return };
        if ch.next_block < trailer.total_blocks {
            return;
        }
        let verdict = if let Some((block, count)) = ch.gaps {
            if let Ok(held) = ch.in_hand(trailer.total_blocks) {
                self.stats.channels_partial += 1;
                self.events.push_back(Event::ChannelPartial {
                    channel,
                    held,
                    digest: trailer.digest,
                    len: trailer.total_len,
                });
            }
            Err(FailReason::BlockLost { block, count })
        } else if let Some(block) = ch
            .short_block
            .filter(|b| b.saturating_add(1) < trailer.total_blocks)
        {
            Err(FailReason::Misaligned { block })
        } else if ch.assembled {
            let expected = ch
                .block_bytes()
                .map_or(0, |b| trailer.total_len.div_ceil(u64::from(b)));
            if expected == trailer.total_blocks {
                Ok(true)
            } else {
                Err(FailReason::LengthMismatch {
                    expected: trailer.total_len,
                    received: trailer
                        .total_blocks
                        .saturating_mul(u64::from(ch.block_bytes().unwrap_or(0))),
                })
            }
        } else if ch.delivered != trailer.total_len {
            Err(FailReason::LengthMismatch {
                expected: trailer.total_len,
                received: ch.delivered,
            })
        } else if *ch.hasher.finalize().as_bytes() != trailer.digest {
            Err(FailReason::DigestMismatch)
        } else {
            Ok(false)
        };
        match verdict {
            Ok(assembled) => {
                let bytes = ch.delivered;
                // Blocks beyond the trailer's count (forged or stray) may
                // still be held: release them with the channel.
                self.buffered -= ch.buffered;
                s.channels.remove(&channel);
                s.channel_due.set(channel, None);
                s.ended.insert(channel);
                if assembled {
                    self.stats.channels_assembled += 1;
                    self.events.push_back(Event::ChannelAssembled {
                        channel,
                        bytes: trailer.total_len,
                        digest: trailer.digest,
                    });
                } else {
                    self.stats.channels_complete += 1;
                    self.events.push_back(Event::ChannelComplete {
                        channel,
                        bytes,
                        digest: trailer.digest,
                    });
                }
            }
            Err(reason) => self.fail_channel(channel, reason),
        }
    }
}

/// Delivers the channel's next block if it is decoded; `false` otherwise.
fn deliver_one(
    ch: &mut ChannelRx,
    channel: ChannelId,
    buffered: &mut usize,
    stats: &mut ReceiverStats,
    events: &mut VecDeque<Event>,
) -> bool {
    if ch.is_held(ch.next_block) {
        ch.next_block += 1;
        return true;
    }
    if ch
        .blocks
        .get(&ch.next_block)
        .is_none_or(|b| b.done.is_none())
    {
        return false;
    }
    let Some(mut block) = ch.blocks.remove(&ch.next_block) else {
        return false;
    };
    let data = block.done.take().unwrap_or_default();
    let held = block.buffered() + data.len();
    ch.buffered -= held;
    *buffered -= held;
    ch.hasher.update(&data);
    let offset = match ch.block_bytes() {
        Some(b) => {
            if data.len() != b as usize && ch.short_block.is_none() {
                ch.short_block = Some(ch.next_block);
            }
            ch.next_block.saturating_mul(u64::from(b))
        }
        None => ch.delivered,
    };
    ch.delivered += data.len() as u64;
    ch.next_block += 1;
    stats.blocks_delivered += 1;
    stats.bytes_delivered += data.len() as u64;
    events.push_back(Event::ChannelData {
        channel,
        offset,
        data,
    });
    true
}

fn same_params(a: &BeaconRepr, b: &BeaconRepr) -> bool {
    a.symbol_size == b.symbol_size
        && a.block_symbols == b.block_symbols
        && a.repair_symbols == b.repair_symbols
        && a.interleave_depth == b.interleave_depth
        && a.rate_bps == b.rate_bps
        && a.delta_t_ms == b.delta_t_ms
}

/// Whether the datagram is older than its lifetime, judged against the
/// fastest datagram of the session (offsets are sender-clock minus
/// receiver-clock, mod 2^32 ms).
fn expired(s: &mut SessionRx, now: Timestamp, repr: &DatagramRepr<'_>) -> bool {
    let offset = (now.as_millis() as u32).wrapping_sub(repr.header.timestamp_ms);
    match s.min_offset {
        None => {
            s.min_offset = Some(offset);
            false
        }
        Some(min) => {
            let age = offset.wrapping_sub(min).cast_signed();
            if age < 0 {
                s.min_offset = Some(offset);
                false
            } else {
                age as u32 > u32::from(repr.header.lifetime_ms)
            }
        }
    }
}

/// The first block below `limit` that is not decoded, with the count of
/// such blocks.
fn first_lost(ch: &ChannelRx, limit: u64) -> Option<FailReason> {
    if limit <= ch.next_block {
        return None;
    }
    // A held block has no entry in `blocks` (its symbols are late), so the
    // two counts never overlap.
    let done_in_range = ch
        .blocks
        .range(ch.next_block..limit)
        .filter(|(_, b)| b.done.is_some())
        .count() as u64;
    let held_in_range = ch.held.as_ref().map_or(0, |h| {
        h.iter()
            .filter(|b| (ch.next_block..limit).contains(b))
            .count() as u64
    });
    let count = (limit - ch.next_block) - done_in_range - held_in_range;
    if count == 0 {
        return None;
    }
    let mut block = ch.next_block;
    while block < limit
        && (ch.is_held(block) || ch.blocks.get(&block).is_some_and(|b| b.done.is_some()))
    {
        block += 1;
    }
    Some(FailReason::BlockLost { block, count })
}

fn silence_reason(ch: &ChannelRx) -> FailReason {
    if ch.meta.is_none() {
        FailReason::OpenLost
    } else if ch.trailer.is_none()
        && ch.all_sent_blocks_delivered()
        && ch.blocks.is_empty()
        && ch.progress > 0
    {
        FailReason::TrailerLost
    } else {
        FailReason::TimedOut
    }
}
