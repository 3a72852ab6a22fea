//! The one-way wire format: a borrowed view over a datagram ([`Packet`]) and
//! owned/borrowed representations ([`DatagramRepr`] and the per-type bodies)
//! with `parse` / `emit` / `buffer_len`. PROTOCOL.md is the normative text;
//! this module is its implementation and the two must agree.
//!
//! ```text
//!  0      1      2             4                            12
//! +------+------+-------------+----------------------------+
//! | ver  | type |   flags     |        session id (64)     |
//! +------+------+-------------+----------------------------+
//! 12                           20            24            28       30       32
//! +----------------------------+-------------+-------------+--------+--------+
//! |      sequence number (64)  | channel id  | timestamp ms|lifetime|body len|
//! +----------------------------+-------------+-------------+--------+--------+
//! 32                                         32 + body len
//! +------------------------------------------+---------------------------+
//! |  body (type specific, body len bytes)    | tag: CRC32C (4), MAC (16) |
//! |  (encrypted when flag bit 1 is set)      | or AEAD tag (16)          |
//! +------------------------------------------+---------------------------+
//! ```
//!
//! All integers are big-endian. The CRC32C or MAC covers every byte before
//! it; an AEAD tag covers the header (associated data) and the encrypted
//! body. The keys and the cryptography are [`crate::crypto`]'s; this module
//! places its output. After [`Packet::check_len`] succeeds no accessor panics.

use crate::crypto::{self, CipherCache, KeyRing, SessionCipher, SessionMac};
use crate::types::{ChannelId, ConfigError, SessionId, SymbolSize};
use diodon_sansio::IpVersion;
use thiserror::Error;

/// Protocol version carried in byte 0.
pub const VERSION: u8 = 1;
/// Length of the common header.
pub const HEADER_LEN: usize = 32;
/// Length of the symbol sub-header at the start of data and repair bodies.
pub const SYMBOL_HEADER_LEN: usize = 18;
/// Tag length with CRC32C.
pub const CRC_TAG_LEN: usize = 4;
/// Tag length with the keyed BLAKE3 MAC.
pub const MAC_TAG_LEN: usize = 16;
/// Header flag: the tag is a 16-byte keyed MAC instead of a CRC32C.
pub const FLAG_KEYED: u16 = 0x0001;
/// Header flag: the body is encrypted and the tag is an AEAD tag (only
/// together with [`FLAG_KEYED`]); the flags' high byte is then the key id.
pub const FLAG_ENCRYPTED: u16 = 0x0002;
/// Header flag: the keyed MAC is AES-GMAC under the session's MAC key
/// instead of BLAKE3's keyed hash (only together with [`FLAG_KEYED`] and
/// without [`FLAG_ENCRYPTED`]).
pub const FLAG_AES_GMAC: u16 = 0x0004;
/// The flags' high byte: the key id of an encrypted datagram (0 otherwise).
pub const FLAG_KEY_ID: u16 = 0xFF00;
/// Largest datagram the protocol produces or accepts (UDP payload limit).
pub const MAX_DATAGRAM_LEN: usize = 65_507;
/// Longest channel name carried by a channel-open datagram.
pub const MAX_NAME_LEN: usize = 4096;
/// Length of a beacon's fixed part (before the channel table).
pub const BEACON_FIXED_LEN: usize = 50;
/// Length of one beacon channel-table entry.
pub const BEACON_ENTRY_LEN: usize = 13;
/// Length of a channel-open body's fixed part (before the name).
pub const OPEN_FIXED_LEN: usize = 28;
/// Length of a trailer body.
pub const TRAILER_LEN: usize = 50;
/// Length of the sync extension that follows the name of a channel-open
/// whose [`OPEN_SYNC`] flag (bit 2) is set ([`SyncInfo`]).
pub const OPEN_SYNC_LEN: usize = 48;

mod field {
    use std::ops::Range;
    pub const VERSION: usize = 0;
    pub const TYPE: usize = 1;
    pub const FLAGS: Range<usize> = 2..4;
    pub const SESSION: Range<usize> = 4..12;
    pub const SEQ: Range<usize> = 12..20;
    pub const CHANNEL: Range<usize> = 20..24;
    pub const TIMESTAMP: Range<usize> = 24..28;
    pub const LIFETIME: Range<usize> = 28..30;
    pub const BODY_LEN: Range<usize> = 30..32;
}

/// Why a datagram was rejected before any of its content was trusted.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Error)]
pub enum WireError {
    /// Shorter than the header, or its length disagrees with `body len` + tag.
    #[error("datagram length {got} does not match its header (expected {expected})")]
    BadLength {
        /// Length the header implies (0 when shorter than the header).
        expected: usize,
        /// Length received.
        got: usize,
    },
    /// Byte 0 is not [`VERSION`].
    #[error("unsupported protocol version {0}")]
    BadVersion(u8),
    /// Byte 1 is not a known datagram type.
    #[error("unknown datagram type {0}")]
    UnknownType(u8),
    /// Flag bits that this version does not define are set.
    #[error("undefined flag bits {0:#06x}")]
    BadFlags(u16),
    /// The tag is keyed but no key is configured, or the reverse.
    #[error(
        "integrity mode mismatch: datagram keyed={datagram_keyed}, receiver keyed={receiver_keyed}"
    )]
    IntegrityMismatch {
        /// The datagram carries a MAC.
        datagram_keyed: bool,
        /// The receiver has a key configured.
        receiver_keyed: bool,
    },
    /// Both sides are keyed, but one encrypts and the other does not.
    #[error("encryption mismatch: datagram encrypted={datagram_encrypted}, receiver encrypts={receiver_encrypts}")]
    EncryptionMismatch {
        /// The datagram's body is encrypted.
        datagram_encrypted: bool,
        /// The receiver expects encrypted datagrams.
        receiver_encrypts: bool,
    },
    /// CRC32C, MAC or AEAD tag does not match the content (for an
    /// encrypted datagram also: a key id the receiver does not hold).
    #[error("integrity check failed")]
    BadCheck,
    /// A body field is out of range or inconsistent.
    #[error("malformed {kind} body: {what}")]
    Malformed {
        /// Datagram type.
        kind: &'static str,
        /// The violated rule.
        what: &'static str,
    },
}

/// The kind of a datagram (byte 1).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum DatagramType {
    /// A source symbol: original channel bytes.
    Data = 0,
    /// A repair symbol produced by the erasure code.
    Repair = 1,
    /// Session parameters, channel table and counters; also the heartbeat.
    Beacon = 2,
    /// A channel's metadata (name, size, mode, mtime, kind).
    ChannelOpen = 3,
    /// A channel's end: total length, block count and digest.
    ChannelTrailer = 4,
}

impl DatagramType {
    /// Decodes byte 1.
    pub fn from_u8(value: u8) -> Result<Self, WireError> {
        Ok(match value {
            0 => Self::Data,
            1 => Self::Repair,
            2 => Self::Beacon,
            3 => Self::ChannelOpen,
            4 => Self::ChannelTrailer,
            other => return Err(WireError::UnknownType(other)),
        })
    }

    fn name(self) -> &'static str {
        match self {
            Self::Data => "data",
            Self::Repair => "repair",
            Self::Beacon => "beacon",
            Self::ChannelOpen => "channel-open",
            Self::ChannelTrailer => "channel-trailer",
        }
    }
}

/// How each datagram is protected: CRC32C against corruption, a keyed
/// MAC against forgery as well (BLAKE3's keyed hash truncated to 16 bytes,
/// or AES-GMAC under a per-session key), or ChaCha20-Poly1305 with a
/// per-session key against reading too.
#[derive(Clone, PartialEq, Eq)]
pub enum Integrity {
    /// CRC32C (Castagnoli) over every byte before the tag.
    Crc32c,
    /// BLAKE3 keyed hash, first 16 bytes, with the ring's current key (the
    /// datagram names its key id; a receiver checks with either key). A
    /// receiver in this mode takes AES-GMAC datagrams too.
    Keyed(KeyRing),
    /// AES-GMAC under a key derived per session from the ring's current
    /// key (PROTOCOL.md § 4.5). A receiver in this mode takes BLAKE3-keyed
    /// datagrams too: the two differ only in what the sender spends.
    Gmac(KeyRing),
    /// The body encrypted with a key derived per session from the ring's
    /// keys; the header is authenticated, not encrypted.
    Encrypted(KeyRing),
}

impl std::fmt::Debug for Integrity {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Crc32c => f.write_str("Crc32c"),
            Self::Keyed(_) => f.write_str("Keyed(<redacted>)"),
            Self::Gmac(_) => f.write_str("Gmac(<redacted>)"),
            Self::Encrypted(_) => f.write_str("Encrypted(<redacted>)"),
        }
    }
}

impl Integrity {
    /// The keyed MAC with one key (key id 0).
    pub fn mac(key: [u8; 32]) -> Self {
        Self::Keyed(KeyRing::single(key))
    }

    /// Tag length in bytes.
    pub fn tag_len(&self) -> usize {
        match self {
            Self::Crc32c => CRC_TAG_LEN,
            Self::Keyed(_) | Self::Gmac(_) | Self::Encrypted(_) => MAC_TAG_LEN,
        }
    }

    /// Whether a key is configured (MAC or encryption).
    pub fn is_keyed(&self) -> bool {
        !matches!(self, Self::Crc32c)
    }

    /// What a datagram carries, for a log line: `CRC32C`, `BLAKE3 MAC`,
    /// `AES-GMAC` or `ChaCha20-Poly1305`.
    pub fn describe(&self) -> &'static str {
        match self {
            Self::Crc32c => "CRC32C",
            Self::Keyed(_) => "BLAKE3 MAC",
            Self::Gmac(_) => "AES-GMAC",
            Self::Encrypted(_) => "ChaCha20-Poly1305",
        }
    }

    /// Whether bodies are encrypted.
    pub fn is_encrypted(&self) -> bool {
        matches!(self, Self::Encrypted(_))
    }

    /// The key ring of the keyed modes (MAC or encryption).
    pub fn key_ring(&self) -> Option<&KeyRing> {
        match self {
            Self::Keyed(ring) | Self::Gmac(ring) | Self::Encrypted(ring) => Some(ring),
            Self::Crc32c => None,
        }
    }

    /// The same mode with the keys of `ring` (a key file read again); the
    /// CRC32C mode has no keys and stays as it is.
    #[must_use]
    pub fn with_ring(&self, ring: KeyRing) -> Self {
        match self {
            Self::Crc32c => Self::Crc32c,
            Self::Keyed(_) => Self::Keyed(ring),
            Self::Gmac(_) => Self::Gmac(ring),
            Self::Encrypted(_) => Self::Encrypted(ring),
        }
    }

    /// Whether the CRC32C or the BLAKE3 MAC of the key `key_id` matches;
    /// an encrypted datagram is checked by [`open_datagram`] and never
    /// here, an AES-GMAC one by [`Packet::verify`].
    fn verify(&self, key_id: u8, content: &[u8], tag: &[u8]) -> bool {
        match self {
            Self::Crc32c => crc_fast::crc32_iscsi(content).to_be_bytes() == tag,
            Self::Keyed(ring) | Self::Gmac(ring) => ring
                .key(key_id)
                .is_some_and(|key| crypto::mac_matches(key, content, tag)),
            Self::Encrypted(_) => false,
        }
    }
}

/// How the sender seals its datagrams with one key: the keyed MAC (with
/// the key's id in the header) or the session's AEAD cipher.
#[derive(Debug)]
pub enum Sealer {
    /// The keyed MAC with this key, carrying this key id.
    Mac(u8, crypto::Secret),
    /// AES-GMAC with this session's MAC key.
    Gmac(SessionMac),
    /// ChaCha20-Poly1305 with this session cipher.
    Aead(SessionCipher),
}

impl Sealer {
    /// The sealer of key `key_id` of `integrity`'s ring for `session`
    /// (`None` for CRC32C, or an id the ring does not hold).
    pub fn new(integrity: &Integrity, session: SessionId, key_id: u8) -> Option<Self> {
        match integrity {
            Integrity::Crc32c => None,
            Integrity::Keyed(ring) => Some(Sealer::Mac(key_id, ring.key(key_id)?.clone())),
            Integrity::Gmac(ring) => Some(Sealer::Gmac(SessionMac::derive(
                ring.key(key_id)?,
                session.0,
                key_id,
            ))),
            Integrity::Encrypted(ring) => Some(Sealer::Aead(SessionCipher::derive(
                ring.key(key_id)?,
                session.0,
                key_id,
            ))),
        }
    }

    /// The header flags of the datagrams it seals: keyed, the MAC's or
    /// the cipher's bit, the key id.
    fn flags(&self) -> u16 {
        let kind = match self {
            Sealer::Mac(..) => 0,
            Sealer::Gmac(_) => FLAG_AES_GMAC,
            Sealer::Aead(_) => FLAG_ENCRYPTED,
        };
        FLAG_KEYED | kind | u16::from(self.key_id()) << 8
    }

    /// The MAC of the datagram with sequence number `seq` whose covered
    /// bytes are `pieces`, one after the other; `None` for the AEAD
    /// (which seals the body instead).
    fn mac(&self, seq: u64, pieces: &[&[u8]]) -> Option<[u8; MAC_TAG_LEN]> {
        match self {
            Sealer::Mac(_, key) => Some(crypto::mac_of_pieces(key, pieces)),
            Sealer::Gmac(mac) => Some(mac.tag(seq, pieces)),
            Sealer::Aead(_) => None,
        }
    }

    /// The key id the sealed datagrams carry.
    pub fn key_id(&self) -> u8 {
        match self {
            Sealer::Mac(id, _) => *id,
            Sealer::Gmac(mac) => mac.key_id(),
            Sealer::Aead(cipher) => cipher.key_id(),
        }
    }
}

/// A read-only (or writable) view of one datagram.
#[derive(Debug, Clone)]
pub struct Packet<T: AsRef<[u8]>> {
    buffer: T,
}

fn be_u16(b: &[u8], at: usize) -> u16 {
    u16::from_be_bytes([b[at], b[at + 1]])
}
fn be_u32(b: &[u8], at: usize) -> u32 {
    u32::from_be_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]])
}
fn be_u64(b: &[u8], at: usize) -> u64 {
    let mut x = [0u8; 8];
    x.copy_from_slice(&b[at..at + 8]);
    u64::from_be_bytes(x)
}

impl<T: AsRef<[u8]>> Packet<T> {
    /// Wraps a buffer without checking it.
    pub fn new_unchecked(buffer: T) -> Self {
        Packet { buffer }
    }

    /// Wraps a buffer and checks that every accessor is in bounds: the
    /// header is present, the version and flags are known, and the length is
    /// exactly header + body len + tag.
    pub fn new_checked(buffer: T) -> Result<Self, WireError> {
        let packet = Self::new_unchecked(buffer);
        packet.check_len()?;
        Ok(packet)
    }

    /// See [`Packet::new_checked`].
    pub fn check_len(&self) -> Result<(), WireError> {
        let b = self.buffer.as_ref();
        if b.len() < HEADER_LEN {
            return Err(WireError::BadLength {
                expected: HEADER_LEN,
                got: b.len(),
            });
        }
        if b[field::VERSION] != VERSION {
            return Err(WireError::BadVersion(b[field::VERSION]));
        }
        let flags = self.flags();
        let encrypted = flags & FLAG_ENCRYPTED != 0;
        let gmac = flags & FLAG_AES_GMAC != 0;
        let defined = if flags & FLAG_KEYED != 0 {
            FLAG_KEYED | FLAG_ENCRYPTED | FLAG_AES_GMAC | FLAG_KEY_ID
        } else {
            0
        };
        if flags & !defined != 0 || (encrypted && flags & FLAG_KEYED == 0) || (gmac && encrypted) {
            return Err(WireError::BadFlags(flags));
        }
        let expected = HEADER_LEN + self.body_len() + self.tag_len();
        if b.len() != expected {
            return Err(WireError::BadLength {
                expected,
                got: b.len(),
            });
        }
        Ok(())
    }

    /// Byte 0.
    pub fn version(&self) -> u8 {
        self.buffer.as_ref()[field::VERSION]
    }
    /// Byte 1, raw.
    pub fn type_byte(&self) -> u8 {
        self.buffer.as_ref()[field::TYPE]
    }
    /// Header flags.
    pub fn flags(&self) -> u16 {
        be_u16(self.buffer.as_ref(), field::FLAGS.start)
    }
    /// Whether the tag is keyed (a MAC, or an AEAD tag).
    pub fn is_keyed(&self) -> bool {
        self.flags() & FLAG_KEYED != 0
    }
    /// Whether the body is encrypted.
    pub fn is_encrypted(&self) -> bool {
        self.flags() & FLAG_ENCRYPTED != 0
    }

    /// Whether the tag is an AES-GMAC (flag bit 2).
    pub fn is_gmac(&self) -> bool {
        self.flags() & FLAG_AES_GMAC != 0
    }
    /// The key id of a keyed datagram (MAC or encrypted; 0 otherwise).
    pub fn key_id(&self) -> u8 {
        self.buffer.as_ref()[field::FLAGS.start]
    }
    /// Session id.
    pub fn session_id(&self) -> SessionId {
        SessionId(be_u64(self.buffer.as_ref(), field::SESSION.start))
    }
    /// Per-session sequence number.
    pub fn seq(&self) -> u64 {
        be_u64(self.buffer.as_ref(), field::SEQ.start)
    }
    /// Channel id (0 for beacons).
    pub fn channel_id(&self) -> ChannelId {
        ChannelId(be_u32(self.buffer.as_ref(), field::CHANNEL.start))
    }
    /// Sender session clock in milliseconds (wraps).
    pub fn timestamp_ms(&self) -> u32 {
        be_u32(self.buffer.as_ref(), field::TIMESTAMP.start)
    }
    /// Lifetime in milliseconds (Delta-t MPL granted to this datagram).
    pub fn lifetime_ms(&self) -> u16 {
        be_u16(self.buffer.as_ref(), field::LIFETIME.start)
    }
    /// Body length field.
    pub fn body_len(&self) -> usize {
        be_u16(self.buffer.as_ref(), field::BODY_LEN.start) as usize
    }
    /// Tag length implied by the flags.
    pub fn tag_len(&self) -> usize {
        if self.is_keyed() {
            MAC_TAG_LEN
        } else {
            CRC_TAG_LEN
        }
    }
    /// The type-specific body.
    pub fn body(&self) -> &[u8] {
        &self.buffer.as_ref()[HEADER_LEN..HEADER_LEN + self.body_len()]
    }
    /// The integrity tag.
    pub fn tag(&self) -> &[u8] {
        let b = self.buffer.as_ref();
        &b[b.len() - self.tag_len()..]
    }

    /// Checks that the datagram's mode (CRC32C, MAC, encrypted) is the
    /// receiver's.
    pub fn check_mode(&self, integrity: &Integrity) -> Result<(), WireError> {
        if self.is_keyed() != integrity.is_keyed() {
            return Err(WireError::IntegrityMismatch {
                datagram_keyed: self.is_keyed(),
                receiver_keyed: integrity.is_keyed(),
            });
        }
        if self.is_encrypted() != integrity.is_encrypted() {
            return Err(WireError::EncryptionMismatch {
                datagram_encrypted: self.is_encrypted(),
                receiver_encrypts: integrity.is_encrypted(),
            });
        }
        Ok(())
    }

    /// Checks the mode and the CRC32C or MAC with the receiver's integrity
    /// mode (an encrypted datagram does not verify here: [`open_datagram`]).
    pub fn verify(&self, integrity: &Integrity) -> Result<(), WireError> {
        self.check_mode(integrity)?;
        let b = self.buffer.as_ref();
        let covered = b.len() - self.tag_len();
        let (content, tag) = b.split_at(covered);
        let right = if self.is_gmac() {
            // Without a receiver's cache: the session's key derived for
            // this one datagram (the receiver uses `open_datagram`).
            integrity
                .key_ring()
                .and_then(|r| r.key(self.key_id()))
                .is_some_and(|psk| {
                    SessionMac::derive(psk, self.session_id().0, self.key_id()).matches(
                        self.seq(),
                        content,
                        tag,
                    )
                })
        } else {
            integrity.verify(self.key_id(), content, tag)
        };
        if right {
            Ok(())
        } else {
            Err(WireError::BadCheck)
        }
    }

    /// Consumes the view, returning the buffer.
    pub fn into_inner(self) -> T {
        self.buffer
    }
}

/// The common header fields, as the sender fills them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Header {
    /// Session id.
    pub session: SessionId,
    /// Per-session sequence number, +1 per datagram.
    pub seq: u64,
    /// Channel (0 for beacons).
    pub channel: ChannelId,
    /// Sender session clock, milliseconds, wrapping.
    pub timestamp_ms: u32,
    /// Lifetime granted, milliseconds.
    pub lifetime_ms: u16,
}

/// A source or repair symbol.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SymbolRepr<'a> {
    /// Block number within the channel, from 0.
    pub block: u64,
    /// Symbol index: `0..k` source, `k..k+m` repair.
    pub index: u16,
    /// Source symbols in this block.
    pub k: u16,
    /// Repair symbols in this block.
    pub m: u16,
    /// Bytes of the last source symbol (1..=shard length).
    pub tail_len: u16,
    /// Position of this block within its interleave group.
    pub group_pos: u8,
    /// Number of blocks in the interleave group.
    pub group_len: u8,
    /// Symbol bytes.
    pub payload: &'a [u8],
}

impl<'a> SymbolRepr<'a> {
    fn parse(kind: DatagramType, body: &'a [u8]) -> Result<Self, WireError> {
        let bad = |what| WireError::Malformed {
            kind: kind.name(),
            what,
        };
        if body.len() < SYMBOL_HEADER_LEN {
            return Err(bad("shorter than the symbol header"));
        }
        let s = SymbolRepr {
            block: be_u64(body, 0),
            index: be_u16(body, 8),
            k: be_u16(body, 10),
            m: be_u16(body, 12),
            tail_len: be_u16(body, 14),
            group_pos: body[16],
            group_len: body[17],
            payload: &body[SYMBOL_HEADER_LEN..],
        };
        if s.k == 0 {
            return Err(bad("k is zero"));
        }
        if u32::from(s.k) + u32::from(s.m) > u32::from(u16::MAX) {
            return Err(bad("k + m exceeds 65535"));
        }
        if u32::from(s.index) >= u32::from(s.k) + u32::from(s.m) {
            return Err(bad("index beyond k + m"));
        }
        if s.tail_len == 0 {
            return Err(bad("tail length is zero"));
        }
        if s.group_len == 0 || s.group_pos >= s.group_len {
            return Err(bad("group position outside the group"));
        }
        if u64::from(s.group_pos) > s.block {
            return Err(bad("group starts before block 0"));
        }
        match kind {
            DatagramType::Data if s.index >= s.k => return Err(bad("data index not below k")),
            DatagramType::Repair if s.index < s.k => return Err(bad("repair index below k")),
            _ => {}
        }
        if s.is_tail() {
            if s.payload.len() != usize::from(s.tail_len) {
                return Err(bad("last source symbol length differs from tail length"));
            }
        } else {
            if s.payload.is_empty() || !s.payload.len().is_multiple_of(2) {
                return Err(bad("shard length must be even and non-zero"));
            }
            if s.payload.len() < usize::from(s.tail_len) {
                return Err(bad("shard shorter than the tail"));
            }
        }
        Ok(s)
    }

    /// Whether this is the last source symbol of its block.
    pub fn is_tail(&self) -> bool {
        self.index + 1 == self.k
    }

    /// First block of this symbol's interleave group.
    pub fn group_start(&self) -> u64 {
        self.block - u64::from(self.group_pos)
    }

    fn body_len(&self) -> usize {
        SYMBOL_HEADER_LEN + self.payload.len()
    }

    fn emit(&self, b: &mut [u8]) {
        self.emit_head(b);
        b[SYMBOL_HEADER_LEN..SYMBOL_HEADER_LEN + self.payload.len()].copy_from_slice(self.payload);
    }

    /// Writes the symbol sub-header (everything before the payload).
    fn emit_head(&self, b: &mut [u8]) {
        b[0..8].copy_from_slice(&self.block.to_be_bytes());
        b[8..10].copy_from_slice(&self.index.to_be_bytes());
        b[10..12].copy_from_slice(&self.k.to_be_bytes());
        b[12..14].copy_from_slice(&self.m.to_be_bytes());
        b[14..16].copy_from_slice(&self.tail_len.to_be_bytes());
        b[16] = self.group_pos;
        b[17] = self.group_len;
    }
}

/// State of a channel in a beacon's table.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub enum ChannelState {
    /// Still sending.
    Open = 1,
    /// All blocks and the trailer sent.
    Finished = 2,
    /// Abandoned by the sender; the receiver fails it.
    Aborted = 3,
}

/// One entry of the beacon's channel table.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ChannelEntry {
    /// Channel.
    pub channel: ChannelId,
    /// Its state at the sender.
    pub state: ChannelState,
    /// Blocks of it the sender has fully emitted.
    pub blocks_sent: u64,
}

/// Session parameters, channel table and counters.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BeaconRepr {
    /// Sender's wall clock at session start, Unix milliseconds.
    pub start_unix_ms: u64,
    /// Symbol (shard) size of full blocks.
    pub symbol_size: u16,
    /// Source symbols per full block.
    pub block_symbols: u16,
    /// Repair symbols per full block.
    pub repair_symbols: u16,
    /// Interleave depth (blocks per group).
    pub interleave_depth: u8,
    /// Configured rate in bit/s (0 = unpaced).
    pub rate_bps: u64,
    /// Δt in milliseconds.
    pub delta_t_ms: u32,
    /// Beacon period in milliseconds.
    pub beacon_interval_ms: u32,
    /// Datagrams sent in this session before this beacon.
    pub datagrams_sent: u64,
    /// Channel bytes accepted by the sender so far.
    pub bytes_sent: u64,
    /// Open and recently finished channels.
    pub channels: Vec<ChannelEntry>,
}

impl BeaconRepr {
    fn parse(body: &[u8]) -> Result<Self, WireError> {
        let bad = |what| WireError::Malformed {
            kind: "beacon",
            what,
        };
        if body.len() < BEACON_FIXED_LEN {
            return Err(bad("shorter than the fixed part"));
        }
        let n = be_u16(body, 48) as usize;
        if body.len() != BEACON_FIXED_LEN + n * BEACON_ENTRY_LEN {
            return Err(bad("channel table length differs from its count"));
        }
        let mut channels = Vec::with_capacity(n);
        for i in 0..n {
            let e = &body[BEACON_FIXED_LEN + i * BEACON_ENTRY_LEN..][..BEACON_ENTRY_LEN];
            let state = match e[4] {
                1 => ChannelState::Open,
                2 => ChannelState::Finished,
                3 => ChannelState::Aborted,
                _ => return Err(bad("unknown channel state")),
            };
            channels.push(ChannelEntry {
                channel: ChannelId(be_u32(e, 0)),
                state,
                blocks_sent: be_u64(e, 5),
            });
        }
        let beacon = BeaconRepr {
            start_unix_ms: be_u64(body, 0),
            symbol_size: be_u16(body, 8),
            block_symbols: be_u16(body, 10),
            repair_symbols: be_u16(body, 12),
            interleave_depth: body[14],
            rate_bps: be_u64(body, 16),
            delta_t_ms: be_u32(body, 24),
            beacon_interval_ms: be_u32(body, 28),
            datagrams_sent: be_u64(body, 32),
            bytes_sent: be_u64(body, 40),
            channels,
        };
        if body[15] != 0 {
            return Err(bad("reserved byte is not zero"));
        }
        if beacon.symbol_size == 0 || !beacon.symbol_size.is_multiple_of(2) {
            return Err(bad("symbol size must be even and non-zero"));
        }
        if beacon.block_symbols == 0 || beacon.interleave_depth == 0 {
            return Err(bad("block symbols and interleave depth must be non-zero"));
        }
        Ok(beacon)
    }

    fn body_len(&self) -> usize {
        BEACON_FIXED_LEN + self.channels.len() * BEACON_ENTRY_LEN
    }

    fn emit(&self, b: &mut [u8]) {
        b[0..8].copy_from_slice(&self.start_unix_ms.to_be_bytes());
        b[8..10].copy_from_slice(&self.symbol_size.to_be_bytes());
        b[10..12].copy_from_slice(&self.block_symbols.to_be_bytes());
        b[12..14].copy_from_slice(&self.repair_symbols.to_be_bytes());
        b[14] = self.interleave_depth;
        b[15] = 0;
        b[16..24].copy_from_slice(&self.rate_bps.to_be_bytes());
        b[24..28].copy_from_slice(&self.delta_t_ms.to_be_bytes());
        b[28..32].copy_from_slice(&self.beacon_interval_ms.to_be_bytes());
        b[32..40].copy_from_slice(&self.datagrams_sent.to_be_bytes());
        b[40..48].copy_from_slice(&self.bytes_sent.to_be_bytes());
        b[48..50].copy_from_slice(&(self.channels.len() as u16).to_be_bytes());
        for (i, e) in self.channels.iter().enumerate() {
            let o = &mut b[BEACON_FIXED_LEN + i * BEACON_ENTRY_LEN..][..BEACON_ENTRY_LEN];
            o[0..4].copy_from_slice(&e.channel.0.to_be_bytes());
            o[4] = e.state as u8;
            o[5..13].copy_from_slice(&e.blocks_sent.to_be_bytes());
        }
    }
}

/// What a channel carries; the receiving application picks its sink by it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum ChannelKind {
    /// A regular file.
    File = 1,
    /// A byte stream of unknown length (pipe, TCP or Unix connection).
    Stream = 2,
    /// Length-prefixed datagrams (UDP flows).
    Datagrams = 3,
    /// A sync manifest: JSON Lines of deletions and renames of a mirrored
    /// tree (PROTOCOL.md § 5.5). Receivers that predate it count its open
    /// as malformed and fail the channel (`OpenLost`).
    Manifest = 4,
    /// A sync bundle: several small files of a mirrored tree, each with its
    /// own header and digest (PROTOCOL.md § 5.6, [`crate::bundle`]).
    /// Receivers that predate it fail the channel (`OpenLost`).
    Bundle = 5,
}

/// What a directory-tree sync sender adds to a file's channel-open: when it
/// first saw the file (the receiver's availability time is measured from
/// it), which pass over the file this is, and the file's digest when the
/// sender already knows it (from an earlier pass), so that a receiver that
/// holds the same bytes need not write them again. It follows the name of
/// a `File` channel's open whose [`OPEN_SYNC`] flag is set (PROTOCOL.md
/// § 5.3.2).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct SyncInfo {
    /// When the sender first saw this version of the file, Unix ms
    /// (sender's wall clock).
    pub first_seen_unix_ms: u64,
    /// Which time this version is sent, from 1.
    pub pass: u16,
    /// BLAKE3-256 of the content, when known before sending.
    pub digest: Option<[u8; 32]>,
    /// Bytes of every block but the last (`k·S`): a sync channel is
    /// block-stable, so block `n` covers bytes `[n·B, (n+1)·B)` in every
    /// pass, and a receiver merges the blocks of two passes only when both
    /// announce the same `B`. Never 0. The sender's core fills it in when
    /// the channel is opened, whatever the application put here.
    pub block_bytes: u32,
}

impl SyncInfo {
    fn parse(b: &[u8]) -> Result<Self, &'static str> {
        let digest = match b[10] {
            0 if b[12..44].iter().all(|&x| x == 0) => None,
            0 => return Err("digest bytes without a digest algorithm"),
            DIGEST_BLAKE3 => {
                let mut d = [0u8; 32];
                d.copy_from_slice(&b[12..44]);
                Some(d)
            }
            _ => return Err("unknown sync digest algorithm"),
        };
        if b[11] != 0 {
            return Err("sync reserved byte is not zero");
        }
        let pass = be_u16(b, 8);
        if pass == 0 {
            return Err("sync pass is zero");
        }
        let block_bytes = be_u32(b, 44);
        if block_bytes == 0 {
            return Err("sync block size is zero");
        }
        Ok(SyncInfo {
            first_seen_unix_ms: be_u64(b, 0),
            pass,
            digest,
            block_bytes,
        })
    }

    fn emit(&self, b: &mut [u8]) {
        b[0..8].copy_from_slice(&self.first_seen_unix_ms.to_be_bytes());
        b[8..10].copy_from_slice(&self.pass.to_be_bytes());
        b[10] = if self.digest.is_some() {
            DIGEST_BLAKE3
        } else {
            0
        };
        b[11] = 0;
        b[12..44].copy_from_slice(&self.digest.unwrap_or([0; 32]));
        b[44..48].copy_from_slice(&self.block_bytes.to_be_bytes());
    }
}

/// Channel-open flag: the size field is valid.
pub const OPEN_SIZE_KNOWN: u8 = 0x01;
/// Channel-open flag: records aligned to blocks, a lost block is a gap
/// (`Datagrams` only, PROTOCOL.md § 5.3.1).
pub const OPEN_ALIGNED: u8 = 0x02;
/// Channel-open flag: a [`SyncInfo`] follows the name (`File` only,
/// PROTOCOL.md § 5.3.2).
pub const OPEN_SYNC: u8 = 0x04;

/// A channel's metadata.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct ChannelMeta {
    /// What it carries.
    pub kind: ChannelKind,
    /// Total size when known in advance.
    pub size: Option<u64>,
    /// Unix permission bits (sanitised by the receiving application).
    pub mode: u32,
    /// Modification time, seconds since the Unix epoch.
    pub mtime_sec: i64,
    /// Modification time, nanoseconds part.
    pub mtime_nsec: u32,
    /// Name (relative path for files, label for streams), UTF-8.
    pub name: String,
    /// Records aligned to blocks (open flag bit 1, `Datagrams` only): every
    /// block starts with a record, no record crosses a block boundary, and
    /// a block ends in zero padding. A lost block is then a gap the
    /// receiver reports and steps over, not the channel's failure: the
    /// packets of an IP tunnel.
    pub aligned: bool,
    /// Directory-tree sync information (open flag bit 2, `File` only),
    /// `None` for one-shot sends.
    pub sync: Option<SyncInfo>,
}

impl ChannelMeta {
    /// A stream with a label and no size.
    pub fn stream(name: impl Into<String>) -> Self {
        ChannelMeta {
            kind: ChannelKind::Stream,
            size: None,
            mode: 0,
            mtime_sec: 0,
            mtime_nsec: 0,
            name: name.into(),
            aligned: false,
            sync: None,
        }
    }

    /// A channel of IP packets: `Datagrams`, records aligned to blocks, a
    /// lost block is a gap.
    pub fn packets(name: impl Into<String>) -> Self {
        ChannelMeta {
            kind: ChannelKind::Datagrams,
            aligned: true,
            ..ChannelMeta::stream(name)
        }
    }

    /// A file of known size.
    pub fn file(name: impl Into<String>, size: u64) -> Self {
        ChannelMeta {
            kind: ChannelKind::File,
            size: Some(size),
            mode: 0o644,
            mtime_sec: 0,
            mtime_nsec: 0,
            name: name.into(),
            aligned: false,
            sync: None,
        }
    }

    /// A channel of `kind` whose bytes are known in full before it opens
    /// and whose name is a label, not a path (a sync manifest or bundle):
    /// size known, owner-only mode, no time, no extension.
    pub fn labelled(kind: ChannelKind, label: impl Into<String>, size: u64) -> Self {
        ChannelMeta {
            kind,
            mode: 0o600,
            ..ChannelMeta::file(label, size)
        }
    }

    /// Whether the kind takes the extensions: aligned records only on a
    /// `Datagrams` channel, sync information only on a `File` channel
    /// (PROTOCOL.md § 5.3). The receiver refuses any other combination as
    /// malformed, so the sender refuses to open it.
    pub fn check(&self) -> Result<(), &'static str> {
        Self::check_extensions(self.kind, self.aligned, self.sync.is_some())
    }

    fn check_extensions(kind: ChannelKind, aligned: bool, sync: bool) -> Result<(), &'static str> {
        if aligned && kind != ChannelKind::Datagrams {
            return Err("aligned records outside a datagram channel");
        }
        if sync && kind != ChannelKind::File {
            return Err("sync information outside a file channel");
        }
        Ok(())
    }

    fn parse(body: &[u8]) -> Result<Self, WireError> {
        let bad = |what| WireError::Malformed {
            kind: "channel-open",
            what,
        };
        if body.len() < OPEN_FIXED_LEN {
            return Err(bad("shorter than the fixed part"));
        }
        let kind = match body[0] {
            1 => ChannelKind::File,
            2 => ChannelKind::Stream,
            3 => ChannelKind::Datagrams,
            4 => ChannelKind::Manifest,
            5 => ChannelKind::Bundle,
            _ => return Err(bad("unknown channel kind")),
        };
        let flags = body[1];
        if flags & !(OPEN_SIZE_KNOWN | OPEN_ALIGNED | OPEN_SYNC) != 0 {
            return Err(bad("undefined flag bits"));
        }
        Self::check_extensions(kind, flags & OPEN_ALIGNED != 0, flags & OPEN_SYNC != 0)
            .map_err(bad)?;
        let name_len = be_u16(body, 2) as usize;
        let ext_len = if flags & OPEN_SYNC != 0 {
            OPEN_SYNC_LEN
        } else {
            0
        };
        if name_len > MAX_NAME_LEN || body.len() != OPEN_FIXED_LEN + name_len + ext_len {
            return Err(bad("name length differs from the body"));
        }
        let name_end = OPEN_FIXED_LEN + name_len;
        let sync = if ext_len > 0 {
            Some(SyncInfo::parse(&body[name_end..]).map_err(bad)?)
        } else {
            None
        };
        let size = be_u64(body, 4);
        if flags & OPEN_SIZE_KNOWN == 0 && size != 0 {
            return Err(bad("size is not zero but flagged unknown"));
        }
        let mtime_nsec = be_u32(body, 24);
        if mtime_nsec >= 1_000_000_000 {
            return Err(bad("mtime nanoseconds out of range"));
        }
        let name = std::str::from_utf8(&body[OPEN_FIXED_LEN..name_end])
            .map_err(|_| bad("name is not UTF-8"))?
            .to_owned();
        Ok(ChannelMeta {
            kind,
            size: (flags & OPEN_SIZE_KNOWN != 0).then_some(size),
            mode: be_u32(body, 12),
            mtime_sec: be_u64(body, 16).cast_signed(),
            mtime_nsec,
            name,
            aligned: flags & OPEN_ALIGNED != 0,
            sync,
        })
    }

    /// Length of this metadata's channel-open body.
    pub fn body_len(&self) -> usize {
        OPEN_FIXED_LEN
            + self.name.len()
            + if self.sync.is_some() {
                OPEN_SYNC_LEN
            } else {
                0
            }
    }

    fn emit(&self, b: &mut [u8]) {
        b[0] = self.kind as u8;
        b[1] = if self.size.is_some() {
            OPEN_SIZE_KNOWN
        } else {
            0
        } | if self.aligned { OPEN_ALIGNED } else { 0 }
            | if self.sync.is_some() { OPEN_SYNC } else { 0 };
        b[2..4].copy_from_slice(&(self.name.len() as u16).to_be_bytes());
        b[4..12].copy_from_slice(&self.size.unwrap_or(0).to_be_bytes());
        b[12..16].copy_from_slice(&self.mode.to_be_bytes());
        b[16..24].copy_from_slice(&self.mtime_sec.to_be_bytes());
        b[24..28].copy_from_slice(&self.mtime_nsec.to_be_bytes());
        let name_end = OPEN_FIXED_LEN + self.name.len();
        b[OPEN_FIXED_LEN..name_end].copy_from_slice(self.name.as_bytes());
        if let Some(sync) = &self.sync {
            sync.emit(&mut b[name_end..name_end + OPEN_SYNC_LEN]);
        }
    }
}

/// How a channel ended at the sender.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub enum TrailerStatus {
    /// All bytes were sent; verify against the digest.
    Complete = 0,
    /// The sender gave up (source error); the receiver fails the channel.
    Aborted = 1,
}

/// A channel's end.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TrailerRepr {
    /// Channel bytes in total.
    pub total_len: u64,
    /// Number of blocks the bytes were cut into.
    pub total_blocks: u64,
    /// How it ended.
    pub status: TrailerStatus,
    /// BLAKE3-256 of the channel bytes.
    pub digest: [u8; 32],
}

/// Digest algorithm id carried in the trailer.
pub const DIGEST_BLAKE3: u8 = 1;

impl TrailerRepr {
    fn parse(body: &[u8]) -> Result<Self, WireError> {
        let bad = |what| WireError::Malformed {
            kind: "channel-trailer",
            what,
        };
        if body.len() != TRAILER_LEN {
            return Err(bad("wrong length"));
        }
        let status = match body[16] {
            0 => TrailerStatus::Complete,
            1 => TrailerStatus::Aborted,
            _ => return Err(bad("unknown status")),
        };
        if body[17] != DIGEST_BLAKE3 {
            return Err(bad("unknown digest algorithm"));
        }
        let mut digest = [0u8; 32];
        digest.copy_from_slice(&body[18..50]);
        Ok(TrailerRepr {
            total_len: be_u64(body, 0),
            total_blocks: be_u64(body, 8),
            status,
            digest,
        })
    }

    fn emit(&self, b: &mut [u8]) {
        b[0..8].copy_from_slice(&self.total_len.to_be_bytes());
        b[8..16].copy_from_slice(&self.total_blocks.to_be_bytes());
        b[16] = self.status as u8;
        b[17] = DIGEST_BLAKE3;
        b[18..50].copy_from_slice(&self.digest);
    }
}

/// A datagram's type-specific content.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Body<'a> {
    /// Source symbol.
    Data(SymbolRepr<'a>),
    /// Repair symbol.
    Repair(SymbolRepr<'a>),
    /// Beacon.
    Beacon(BeaconRepr),
    /// Channel open.
    Open(ChannelMeta),
    /// Channel trailer.
    Trailer(TrailerRepr),
}

impl Body<'_> {
    /// The datagram type this body travels as.
    pub fn kind(&self) -> DatagramType {
        match self {
            Body::Data(_) => DatagramType::Data,
            Body::Repair(_) => DatagramType::Repair,
            Body::Beacon(_) => DatagramType::Beacon,
            Body::Open(_) => DatagramType::ChannelOpen,
            Body::Trailer(_) => DatagramType::ChannelTrailer,
        }
    }

    fn len(&self) -> usize {
        match self {
            Body::Data(s) | Body::Repair(s) => s.body_len(),
            Body::Beacon(b) => b.body_len(),
            Body::Open(m) => m.body_len(),
            Body::Trailer(_) => TRAILER_LEN,
        }
    }
}

impl SymbolSize {
    /// The largest symbol whose datagram fits the path MTU without IP
    /// fragmentation: MTU − IP/UDP headers − our header − tag, rounded down
    /// to even.
    pub fn for_mtu(mtu: usize, ip: IpVersion, tag_len: usize) -> Result<Self, ConfigError> {
        let overhead = ip.overhead() + HEADER_LEN + SYMBOL_HEADER_LEN + tag_len;
        let room = mtu.checked_sub(overhead).ok_or(ConfigError::Mtu(mtu))?;
        Self::new(room & !1).map_err(|_| ConfigError::Mtu(mtu))
    }
}

/// A whole datagram: header plus body.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DatagramRepr<'a> {
    /// Common header.
    pub header: Header,
    /// Type-specific body.
    pub body: Body<'a>,
}

impl<'a> DatagramRepr<'a> {
    /// Parses a checked packet whose tag was already verified.
    pub fn parse(packet: &Packet<&'a [u8]>) -> Result<Self, WireError> {
        packet.check_len()?;
        let kind = DatagramType::from_u8(packet.type_byte())?;
        let buffer: &'a [u8] = packet.buffer;
        let body_bytes: &'a [u8] = &buffer[HEADER_LEN..HEADER_LEN + packet.body_len()];
        let body = match kind {
            DatagramType::Data => Body::Data(SymbolRepr::parse(kind, body_bytes)?),
            DatagramType::Repair => Body::Repair(SymbolRepr::parse(kind, body_bytes)?),
            DatagramType::Beacon => Body::Beacon(BeaconRepr::parse(body_bytes)?),
            DatagramType::ChannelOpen => Body::Open(ChannelMeta::parse(body_bytes)?),
            DatagramType::ChannelTrailer => Body::Trailer(TrailerRepr::parse(body_bytes)?),
        };
        if kind == DatagramType::Beacon && packet.channel_id().0 != 0 {
            return Err(WireError::Malformed {
                kind: "beacon",
                what: "channel id is not zero",
            });
        }
        Ok(DatagramRepr {
            header: Header {
                session: packet.session_id(),
                seq: packet.seq(),
                channel: packet.channel_id(),
                timestamp_ms: packet.timestamp_ms(),
                lifetime_ms: packet.lifetime_ms(),
            },
            body,
        })
    }

    /// Length of the emitted datagram with this integrity mode.
    pub fn buffer_len(&self, integrity: &Integrity) -> usize {
        HEADER_LEN + self.body.len() + integrity.tag_len()
    }

    /// Writes the datagram into `buf[..buffer_len]` and seals it; returns the length.
    /// A keyed mode seals with the ring's current key; in the encrypted
    /// mode its session key is derived for this one datagram (a sender
    /// keeps its [`Sealer`] and calls [`DatagramRepr::emit_sealed`]).
    ///
    /// # Panics
    /// If `buf` is shorter than [`DatagramRepr::buffer_len`] or the body is
    /// longer than 65535 bytes (the sender never builds such a body).
    pub fn emit(&self, buf: &mut [u8], integrity: &Integrity) -> usize {
        if let Some(ring) = integrity.key_ring() {
            let sealer = Sealer::new(integrity, self.header.session, ring.current_id())
                .expect("the ring holds its current key");
            return self.emit_sealed(buf, &sealer);
        }
        let total = self.emit_plain(buf, 0, CRC_TAG_LEN);
        let (content, tag) = buf[..total].split_at_mut(total - CRC_TAG_LEN);
        tag.copy_from_slice(&crc_fast::crc32_iscsi(content).to_be_bytes());
        total
    }

    /// Writes the datagram sealed by `sealer`: with the keyed MAC, or with
    /// its body encrypted by the session cipher (which must be this
    /// session's) and its AEAD tag; the header names the key id. Returns
    /// the length.
    ///
    /// # Panics
    /// As [`DatagramRepr::emit`].
    pub fn emit_sealed(&self, buf: &mut [u8], sealer: &Sealer) -> usize {
        let total = self.emit_plain(buf, sealer.flags(), MAC_TAG_LEN);
        if let Sealer::Aead(cipher) = sealer {
            debug_assert_eq!(
                cipher.session(),
                self.header.session.0,
                "another session's cipher"
            );
            let (header, rest) = buf[..total].split_at_mut(HEADER_LEN);
            let (body, tag) = rest.split_at_mut(total - HEADER_LEN - MAC_TAG_LEN);
            tag.copy_from_slice(&cipher.seal(self.header.seq, header, body));
            return total;
        }
        if let Sealer::Gmac(mac) = sealer {
            debug_assert_eq!(
                mac.session(),
                self.header.session.0,
                "another session's key"
            );
        }
        let (content, tag) = buf[..total].split_at_mut(total - MAC_TAG_LEN);
        tag.copy_from_slice(
            &sealer
                .mac(self.header.seq, &[content])
                .expect("a MAC sealer"),
        );
        total
    }

    /// Writes a data or repair datagram in three pieces of which it
    /// writes two, around the symbol's payload, which stays where the
    /// caller keeps it: the header and the symbol sub-header into `head`,
    /// the tag into `tail` (the CRC32C, or with `sealer` the keyed MAC,
    /// over header and payload). Sent one after the other, head, payload
    /// and tail are byte for byte what [`DatagramRepr::emit_sealed`] (or
    /// [`DatagramRepr::emit`] with the CRC32C) writes. Returns the lengths
    /// of head and tail; `None`, with nothing written, for another body
    /// and for an AEAD sealer (the body is encrypted in a buffer).
    ///
    /// # Panics
    /// If `head` or `tail` is shorter than its piece.
    pub fn emit_around_payload(
        &self,
        head: &mut [u8],
        tail: &mut [u8],
        sealer: Option<&Sealer>,
    ) -> Option<(usize, usize)> {
        let (Body::Data(symbol) | Body::Repair(symbol)) = &self.body else {
            return None;
        };
        let head_len = HEADER_LEN + SYMBOL_HEADER_LEN;
        let (flags, tag_len) = match sealer {
            None => (0, CRC_TAG_LEN),
            Some(Sealer::Aead(_)) => return None,
            Some(mac) => (mac.flags(), MAC_TAG_LEN),
        };
        let head = &mut head[..head_len];
        self.emit_header(head, flags);
        symbol.emit_head(&mut head[HEADER_LEN..]);
        if let Some(tag) = sealer.and_then(|s| s.mac(self.header.seq, &[head, symbol.payload])) {
            tail[..MAC_TAG_LEN].copy_from_slice(&tag);
        } else {
            let mut crc = crc_fast::Digest::new(crc_fast::CrcAlgorithm::Crc32Iscsi);
            crc.update(head);
            crc.update(symbol.payload);
            let crc = u32::try_from(crc.finalize()).expect("a CRC-32 fits 32 bits");
            tail[..CRC_TAG_LEN].copy_from_slice(&crc.to_be_bytes());
        }
        Some((head_len, tag_len))
    }

    /// Writes header (with `flags`) and plaintext body; returns the length
    /// including the `tag_len` bytes left for the tag.
    fn emit_plain(&self, buf: &mut [u8], flags: u16, tag_len: usize) -> usize {
        let body_len = self.body.len();
        let total = HEADER_LEN + body_len + tag_len;
        let b = &mut buf[..total];
        self.emit_header(b, flags);
        let body = &mut b[HEADER_LEN..HEADER_LEN + body_len];
        match &self.body {
            Body::Data(s) | Body::Repair(s) => s.emit(body),
            Body::Beacon(beacon) => beacon.emit(body),
            Body::Open(meta) => meta.emit(body),
            Body::Trailer(t) => t.emit(body),
        }
        total
    }

    /// Writes the common header (with `flags`) into `b[..HEADER_LEN]`.
    fn emit_header(&self, b: &mut [u8], flags: u16) {
        let body_len = self.body.len();
        b[field::VERSION] = VERSION;
        b[field::TYPE] = self.body.kind() as u8;
        b[field::FLAGS].copy_from_slice(&flags.to_be_bytes());
        b[field::SESSION].copy_from_slice(&self.header.session.0.to_be_bytes());
        b[field::SEQ].copy_from_slice(&self.header.seq.to_be_bytes());
        b[field::CHANNEL].copy_from_slice(&self.header.channel.0.to_be_bytes());
        b[field::TIMESTAMP].copy_from_slice(&self.header.timestamp_ms.to_be_bytes());
        b[field::LIFETIME].copy_from_slice(&self.header.lifetime_ms.to_be_bytes());
        let body_len16 = u16::try_from(body_len).expect("body longer than 65535 bytes");
        b[field::BODY_LEN].copy_from_slice(&body_len16.to_be_bytes());
    }
}

/// Checks the tag and parses a CRC32C or MAC datagram (an encrypted one is
/// refused as [`WireError::BadCheck`]: it needs [`open_datagram`]).
pub fn parse_datagram<'a>(
    datagram: &'a [u8],
    integrity: &Integrity,
) -> Result<DatagramRepr<'a>, WireError> {
    let packet = Packet::new_checked(datagram)?;
    packet.verify(integrity)?;
    DatagramRepr::parse(&packet)
}

/// The one entry point a receiver uses, in every mode: checks the length,
/// the flags and the mode, then the CRC32C or MAC and parses in place, or
/// opens an encrypted datagram into `plain` (header, plaintext body, tag)
/// with the ciphers of `ciphers` and parses that.
pub fn open_datagram<'a>(
    datagram: &'a [u8],
    integrity: &Integrity,
    ciphers: &mut CipherCache,
    plain: &'a mut Vec<u8>,
) -> Result<DatagramRepr<'a>, WireError> {
    let packet = Packet::new_checked(datagram)?;
    if !integrity.is_encrypted() {
        if packet.is_gmac() {
            packet.check_mode(integrity)?;
            let (content, tag) = datagram.split_at(datagram.len() - packet.tag_len());
            if !ciphers.gmac_matches(
                packet.session_id().0,
                packet.key_id(),
                packet.seq(),
                content,
                tag,
            ) {
                return Err(WireError::BadCheck);
            }
        } else {
            packet.verify(integrity)?;
        }
        return DatagramRepr::parse(&packet);
    }
    packet.check_mode(integrity)?;
    let body_end = HEADER_LEN + packet.body_len();
    plain.clear();
    plain.extend_from_slice(datagram);
    let (header, tag) = (&datagram[..HEADER_LEN], &datagram[body_end..]);
    ciphers
        .open(
            packet.session_id().0,
            packet.key_id(),
            packet.seq(),
            header,
            &datagram[HEADER_LEN..body_end],
            &mut plain[HEADER_LEN..body_end],
            tag,
        )
        .map_err(|_| WireError::BadCheck)?;
    DatagramRepr::parse(&Packet::new_unchecked(&plain[..]))
}
