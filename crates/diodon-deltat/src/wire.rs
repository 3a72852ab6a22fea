//! The Delta-t segment on the wire: a borrowed view ([`Segment`]) with field
//! accessors, and a parsed representation ([`SegmentRepr`]) with
//! `parse` / `emit` / `buffer_len`.
//!
//! The segment is the whole payload of one UDP datagram (the ports multiplex
//! Delta-t connections over one UDP socket). Fixed 20-byte header (thesis
//! Figure 4.4), network byte order, no options:
//!
//! ```text
//!  0                   1                   2                   3
//!  0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1
//! +-------------------------------+-------------------------------+
//! |          Source port          |       Destination port        |  0
//! +-------------------------------+-------------------------------+
//! |            Length             |           Checksum            |  4
//! +-------------------------------+-------------------------------+
//! |                        Sequence number                        |  8
//! +---------------------------------------------------------------+
//! |        Deadline (ms since midnight UTC, mod 86 400 000)       | 12
//! +---+---+-+-+-+-+---------------+-------------------------------+
//! |Ver|Typ|D|O|R|W|   Lifetime    |     Window / Error code       | 16
//! +---+---+-+-+-+-+---------------+-------------------------------+
//! |        Data (data) or SACK blocks (ack, 8 octets each)        | 20
//! ```
//!
//! `W` (window scaled) makes the window field count units of 256 octets, so a
//! receive buffer up to 16 MiB can be advertised without a handshake. An ack's
//! payload is a list of SACK blocks: pairs of SNs `[start, end)` the receiver
//! holds beyond the cumulative ack.
//!
//! The checksum is the Internet checksum (RFC 1071, the "standard UDP
//! checksum" of the thesis) over the whole segment with the checksum field
//! taken as zero. Accessors never panic once [`Segment::check_len`] succeeded.

use std::fmt;
use std::num::NonZeroU8;
use std::time::Duration;

use crate::seq::Seq;

/// Length of the fixed header.
pub const HEADER_LEN: usize = 20;
/// Milliseconds in a day; deadlines are taken modulo this.
pub const MS_PER_DAY: u32 = 86_400_000;
/// Largest segment the 16-bit length field can describe.
pub const MAX_SEGMENT_LEN: usize = u16::MAX as usize;
/// A window field with the `W` flag counts octets in units of `1 << WINDOW_SCALE_SHIFT`.
pub const WINDOW_SCALE_SHIFT: u32 = 8;
/// Largest window a scaled field can advertise (65 535 · 256 octets).
pub const MAX_SCALED_WINDOW: usize = (u16::MAX as usize) << WINDOW_SCALE_SHIFT;
/// Most SACK blocks one ack carries.
pub const MAX_SACK_BLOCKS: usize = 16;
/// Octets of one SACK block on the wire (start SN, end SN).
pub const SACK_BLOCK_LEN: usize = 8;
/// Largest segment that carries no data: an ack with every SACK block.
pub const MAX_CONTROL_LEN: usize = HEADER_LEN + MAX_SACK_BLOCKS * SACK_BLOCK_LEN;

mod field {
    use std::ops::Range;
    pub const SRC_PORT: Range<usize> = 0..2;
    pub const DST_PORT: Range<usize> = 2..4;
    pub const LENGTH: Range<usize> = 4..6;
    pub const CHECKSUM: Range<usize> = 6..8;
    pub const SN: Range<usize> = 8..12;
    pub const DEADLINE: Range<usize> = 12..16;
    pub const VTF: usize = 16;
    pub const LIFETIME: usize = 17;
    pub const WINDOW: Range<usize> = 18..20;
}

/// Why a datagram is not a valid Delta-t segment.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum WireError {
    /// Shorter than the fixed header.
    #[error("datagram of {0} bytes is shorter than the 20-byte header")]
    Truncated(usize),
    /// The length field disagrees with the datagram length.
    #[error("length field {field} does not match the datagram length {actual}")]
    LengthMismatch {
        /// Value of the length field.
        field: u16,
        /// Bytes actually received.
        actual: usize,
    },
    /// The Internet checksum does not verify.
    #[error("checksum mismatch")]
    Checksum,
    /// Version other than 0.
    #[error("unsupported version {0}")]
    Version(u8),
    /// Deadline field not below 86 400 000.
    #[error("deadline {0} ms is not a time of day")]
    Deadline(u32),
    /// Lifetime field zero.
    #[error("lifetime is zero")]
    ZeroLifetime,
    /// A flag that this segment type must not carry (or the unused bit).
    #[error("flags {flags:#06b} are not allowed on a {kind} segment")]
    Flags {
        /// The segment type.
        kind: SegmentType,
        /// The four flag bits.
        flags: u8,
    },
    /// Rendezvous and nak segments carry no payload.
    #[error("{0} segment must not carry a payload")]
    UnexpectedPayload(SegmentType),
    /// An ack's payload is not a whole number of SACK blocks, or too many.
    #[error("ack payload of {0} bytes is not 1..={MAX_SACK_BLOCKS} SACK blocks of {SACK_BLOCK_LEN} bytes")]
    SackLength(usize),
    /// A SACK block whose end is not after its start.
    #[error("SACK block {start}..{end} is empty or inverted")]
    SackBlock {
        /// First SN of the block.
        start: u32,
        /// SN after the block.
        end: u32,
    },
    /// Data segments carry at least one octet.
    #[error("data segment without payload")]
    EmptyData,
    /// The payload does not fit a segment.
    #[error("payload of {0} bytes does not fit the 16-bit length field")]
    PayloadTooLarge(usize),
    /// The output buffer is smaller than `buffer_len()`.
    #[error("buffer of {have} bytes, segment needs {need}")]
    BufferTooSmall {
        /// Bytes available.
        have: usize,
        /// Bytes needed.
        need: usize,
    },
}

/// The 2-bit type field.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum SegmentType {
    /// 0: data (SN = SN of the first octet).
    Data,
    /// 1: ack (SN = next SN expected).
    Ack,
    /// 2: rendezvous (SN = SN of the ack that announced the zero window).
    Rendezvous,
    /// 3: nak (SN = SN of the segment that caused it; window field = error code).
    Nak,
}

impl SegmentType {
    const fn from_bits(bits: u8) -> SegmentType {
        match bits & 0b11 {
            0 => SegmentType::Data,
            1 => SegmentType::Ack,
            2 => SegmentType::Rendezvous,
            _ => SegmentType::Nak,
        }
    }

    const fn bits(self) -> u8 {
        match self {
            SegmentType::Data => 0,
            SegmentType::Ack => 1,
            SegmentType::Rendezvous => 2,
            SegmentType::Nak => 3,
        }
    }

    /// Flags this type may carry.
    const fn allowed_flags(self) -> u8 {
        match self {
            SegmentType::Data | SegmentType::Rendezvous => Flags::D.0 | Flags::W.0,
            SegmentType::Ack => Flags::O.0 | Flags::R.0 | Flags::W.0,
            SegmentType::Nak => 0,
        }
    }
}

impl fmt::Display for SegmentType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            SegmentType::Data => "data",
            SegmentType::Ack => "ack",
            SegmentType::Rendezvous => "rendezvous",
            SegmentType::Nak => "nak",
        })
    }
}

/// The 4 flag bits `D O R W`.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct Flags(u8);

impl Flags {
    /// No flag.
    pub const NONE: Flags = Flags(0);
    /// Data-run: every segment sent before this one has been acked.
    pub const D: Flags = Flags(0b1000);
    /// Overflow: window overrun, data beyond the ack SN was discarded.
    pub const O: Flags = Flags(0b0100);
    /// Reliable (window-opening) ack.
    pub const R: Flags = Flags(0b0010);
    /// Window scaled: the window field counts units of 256 octets.
    pub const W: Flags = Flags(0b0001);

    /// Whether every flag in `other` is set.
    pub const fn contains(self, other: Flags) -> bool {
        self.0 & other.0 == other.0
    }

    /// Union.
    #[must_use]
    pub const fn with(self, other: Flags) -> Flags {
        Flags(self.0 | other.0)
    }

    /// The four bits, D in bit 3.
    pub const fn bits(self) -> u8 {
        self.0
    }
}

impl fmt::Debug for Flags {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(self, f)
    }
}

impl fmt::Display for Flags {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.0 == 0 {
            return f.write_str("-");
        }
        for (flag, c) in [
            (Flags::D, 'D'),
            (Flags::O, 'O'),
            (Flags::R, 'R'),
            (Flags::W, 'W'),
        ] {
            if self.contains(flag) {
                write!(f, "{c}")?;
            }
        }
        Ok(())
    }
}

/// A deadline: milliseconds since midnight UTC, always `< 86 400 000`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct Deadline(u32);

impl Deadline {
    /// A checked deadline.
    pub const fn new(ms_since_midnight: u32) -> Option<Deadline> {
        if ms_since_midnight < MS_PER_DAY {
            Some(Deadline(ms_since_midnight))
        } else {
            None
        }
    }

    /// Any millisecond count, reduced modulo one day.
    pub const fn wrapping(ms: u64) -> Deadline {
        Deadline((ms % MS_PER_DAY as u64) as u32)
    }

    /// Milliseconds since midnight.
    pub const fn ms(self) -> u32 {
        self.0
    }

    /// `self + d`, wrapping at midnight.
    #[must_use]
    pub fn after(self, d: Duration) -> Deadline {
        let ms = u64::try_from(d.as_millis()).unwrap_or(u64::MAX) % u64::from(MS_PER_DAY);
        Deadline::wrapping(u64::from(self.0) + ms)
    }

    /// Signed milliseconds from `now` until `self`, wrap-aware: results lie in
    /// `(-12 h, +12 h]`. Negative means the deadline has passed.
    pub const fn remaining_ms(self, now: Deadline) -> i64 {
        let day = MS_PER_DAY as i64;
        let d = (self.0 as i64 - now.0 as i64).rem_euclid(day);
        if d > day / 2 {
            d - day
        } else {
            d
        }
    }
}

/// Segment lifetime in whole seconds (the value of Δt), never zero.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Lifetime(NonZeroU8);

impl Lifetime {
    /// A checked lifetime.
    pub const fn from_secs(secs: u8) -> Option<Lifetime> {
        match NonZeroU8::new(secs) {
            Some(n) => Some(Lifetime(n)),
            None => None,
        }
    }

    /// Seconds.
    pub const fn secs(self) -> u8 {
        self.0.get()
    }

    /// As a duration.
    pub const fn duration(self) -> Duration {
        Duration::from_secs(self.0.get() as u64)
    }
}

/// Error codes carried by nak segments in the window field.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum NakCode {
    /// 1: no connection and no listener on the destination port.
    PortUnreachable,
    /// 2: the segment's deadline had passed when it arrived (hint: clock skew
    /// or a path slower than MPL).
    Expired,
    /// 3: the application closed the connection; data is discarded.
    Closed,
    /// 4: the listener's accept queue is full.
    BacklogFull,
    /// Any other value (reported, otherwise ignored).
    Unknown(u16),
}

impl NakCode {
    /// Decode the window field of a nak.
    pub const fn from_u16(v: u16) -> NakCode {
        match v {
            1 => NakCode::PortUnreachable,
            2 => NakCode::Expired,
            3 => NakCode::Closed,
            4 => NakCode::BacklogFull,
            other => NakCode::Unknown(other),
        }
    }

    /// The wire value.
    pub const fn to_u16(self) -> u16 {
        match self {
            NakCode::PortUnreachable => 1,
            NakCode::Expired => 2,
            NakCode::Closed => 3,
            NakCode::BacklogFull => 4,
            NakCode::Unknown(v) => v,
        }
    }
}

impl fmt::Display for NakCode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            NakCode::PortUnreachable => f.write_str("port unreachable"),
            NakCode::Expired => f.write_str("segment expired"),
            NakCode::Closed => f.write_str("connection closed by peer application"),
            NakCode::BacklogFull => f.write_str("accept backlog full"),
            NakCode::Unknown(v) => write!(f, "unknown error code {v}"),
        }
    }
}

/// The Internet checksum (RFC 1071) of `bytes`, with bytes 6..8 (the
/// checksum field) taken as zero.
pub fn checksum(bytes: &[u8]) -> u16 {
    let mut sum: u32 = 0;
    let mut chunks = bytes.chunks_exact(2);
    for (i, c) in chunks.by_ref().enumerate() {
        if i != 3 {
            sum += u32::from(u16::from_be_bytes([c[0], c[1]]));
        }
    }
    if let [last] = chunks.remainder() {
        sum += u32::from(*last) << 8;
    }
    while sum > 0xffff {
        sum = (sum & 0xffff) + (sum >> 16);
    }
    !(sum as u16)
}

/// A borrowed view of a segment in `buffer`.
#[derive(Debug, Clone, Copy)]
pub struct Segment<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> Segment<T> {
    /// Wraps without checking; accessors may panic until [`Self::check_len`] passes.
    pub const fn new_unchecked(buffer: T) -> Segment<T> {
        Segment { buffer }
    }

    /// Wraps and checks the length.
    pub fn new_checked(buffer: T) -> Result<Segment<T>, WireError> {
        let s = Segment::new_unchecked(buffer);
        s.check_len()?;
        Ok(s)
    }

    /// Ensures the buffer holds the header and the length field matches it.
    pub fn check_len(&self) -> Result<(), WireError> {
        let b = self.buffer.as_ref();
        if b.len() < HEADER_LEN {
            return Err(WireError::Truncated(b.len()));
        }
        let field = self.length();
        if usize::from(field) != b.len() {
            return Err(WireError::LengthMismatch {
                field,
                actual: b.len(),
            });
        }
        Ok(())
    }

    /// The underlying buffer.
    pub fn into_inner(self) -> T {
        self.buffer
    }

    fn u16_at(&self, r: std::ops::Range<usize>) -> u16 {
        let b = &self.buffer.as_ref()[r];
        u16::from_be_bytes([b[0], b[1]])
    }

    fn u32_at(&self, r: std::ops::Range<usize>) -> u32 {
        let b = &self.buffer.as_ref()[r];
        u32::from_be_bytes([b[0], b[1], b[2], b[3]])
    }

    /// Source port.
    pub fn src_port(&self) -> u16 {
        self.u16_at(field::SRC_PORT)
    }
    /// Destination port.
    pub fn dst_port(&self) -> u16 {
        self.u16_at(field::DST_PORT)
    }
    /// Length field (header + payload).
    pub fn length(&self) -> u16 {
        self.u16_at(field::LENGTH)
    }
    /// Checksum field.
    pub fn checksum(&self) -> u16 {
        self.u16_at(field::CHECKSUM)
    }
    /// Sequence number.
    pub fn sn(&self) -> Seq {
        Seq(self.u32_at(field::SN))
    }
    /// Raw deadline field.
    pub fn deadline_raw(&self) -> u32 {
        self.u32_at(field::DEADLINE)
    }
    /// Version (2 bits).
    pub fn version(&self) -> u8 {
        self.buffer.as_ref()[field::VTF] >> 6
    }
    /// Segment type.
    pub fn segment_type(&self) -> SegmentType {
        SegmentType::from_bits(self.buffer.as_ref()[field::VTF] >> 4)
    }
    /// The four flag bits.
    pub fn flags_raw(&self) -> u8 {
        self.buffer.as_ref()[field::VTF] & 0x0f
    }
    /// Raw lifetime field, seconds.
    pub fn lifetime_raw(&self) -> u8 {
        self.buffer.as_ref()[field::LIFETIME]
    }
    /// Window (data/ack/rendezvous) or error code (nak).
    pub fn window(&self) -> u16 {
        self.u16_at(field::WINDOW)
    }
    /// Payload bytes.
    pub fn payload(&self) -> &[u8] {
        &self.buffer.as_ref()[HEADER_LEN..]
    }
    /// Whether the checksum verifies.
    pub fn verify_checksum(&self) -> bool {
        checksum(self.buffer.as_ref()) == self.checksum()
    }
}

impl<'a> Segment<&'a [u8]> {
    /// Payload with the buffer's lifetime.
    pub fn payload_slice(&self) -> &'a [u8] {
        let b: &'a [u8] = self.buffer;
        &b[HEADER_LEN..]
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Segment<T> {
    fn put(&mut self, r: std::ops::Range<usize>, bytes: &[u8]) {
        self.buffer.as_mut()[r].copy_from_slice(bytes);
    }
    /// Sets the source port.
    pub fn set_src_port(&mut self, v: u16) {
        self.put(field::SRC_PORT, &v.to_be_bytes());
    }
    /// Sets the destination port.
    pub fn set_dst_port(&mut self, v: u16) {
        self.put(field::DST_PORT, &v.to_be_bytes());
    }
    /// Sets the length field.
    pub fn set_length(&mut self, v: u16) {
        self.put(field::LENGTH, &v.to_be_bytes());
    }
    /// Sets the sequence number.
    pub fn set_sn(&mut self, v: Seq) {
        self.put(field::SN, &v.0.to_be_bytes());
    }
    /// Sets the deadline.
    pub fn set_deadline(&mut self, v: Deadline) {
        self.put(field::DEADLINE, &v.ms().to_be_bytes());
    }
    /// Sets version, type and flags.
    pub fn set_type_flags(&mut self, version: u8, kind: SegmentType, flags: Flags) {
        self.buffer.as_mut()[field::VTF] = (version << 6) | (kind.bits() << 4) | flags.bits();
    }
    /// Sets the lifetime.
    pub fn set_lifetime(&mut self, v: Lifetime) {
        self.buffer.as_mut()[field::LIFETIME] = v.secs();
    }
    /// Sets the window / error code.
    pub fn set_window(&mut self, v: u16) {
        self.put(field::WINDOW, &v.to_be_bytes());
    }
    /// Mutable payload.
    pub fn payload_mut(&mut self) -> &mut [u8] {
        &mut self.buffer.as_mut()[HEADER_LEN..]
    }
    /// Computes and stores the checksum; call last.
    pub fn fill_checksum(&mut self) {
        let c = checksum(self.buffer.as_ref());
        self.put(field::CHECKSUM, &c.to_be_bytes());
    }
}

/// A parsed, validated segment.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SegmentRepr<'a> {
    /// Source port.
    pub src_port: u16,
    /// Destination port.
    pub dst_port: u16,
    /// Segment type.
    pub kind: SegmentType,
    /// Flags (only those allowed for `kind`).
    pub flags: Flags,
    /// Sequence number.
    pub sn: Seq,
    /// Expiry time of this segment.
    pub deadline: Deadline,
    /// Δt of the sender of this segment.
    pub lifetime: Lifetime,
    /// Window (data/ack/rendezvous; in 256-octet units with `W`) or error code (nak).
    pub window: u16,
    /// Data (data segments) or SACK blocks (acks; see [`encode_sack`]).
    pub payload: &'a [u8],
}

/// Checks an ack payload: empty, or 1..=16 blocks `[start, end)` with `end` after `start`.
fn check_sack(payload: &[u8]) -> Result<(), WireError> {
    if !payload.len().is_multiple_of(SACK_BLOCK_LEN)
        || payload.len() > MAX_SACK_BLOCKS * SACK_BLOCK_LEN
    {
        return Err(WireError::SackLength(payload.len()));
    }
    for (start, end) in sack_iter(payload) {
        if end.diff(start) <= 0 {
            return Err(WireError::SackBlock {
                start: start.0,
                end: end.0,
            });
        }
    }
    Ok(())
}

fn sack_iter(payload: &[u8]) -> impl Iterator<Item = (Seq, Seq)> + '_ {
    payload.chunks_exact(SACK_BLOCK_LEN).map(|b| {
        let word = |r: std::ops::Range<usize>| {
            Seq(u32::from_be_bytes(b[r].try_into().expect("4-byte slice")))
        };
        (word(0..4), word(4..8))
    })
}

/// Encodes SACK blocks `[start, end)` as an ack payload (at most
/// [`MAX_SACK_BLOCKS`] are taken).
pub fn encode_sack(blocks: &[(Seq, Seq)]) -> Vec<u8> {
    SackPayload::new(blocks).as_slice().to_vec()
}

/// SACK blocks encoded as an ack payload, held inline (no allocation).
#[derive(Clone, Copy)]
pub struct SackPayload {
    bytes: [u8; MAX_SACK_BLOCKS * SACK_BLOCK_LEN],
    len: usize,
}

impl SackPayload {
    /// Encodes `[start, end)` blocks; at most [`MAX_SACK_BLOCKS`] are taken.
    pub fn new(blocks: &[(Seq, Seq)]) -> SackPayload {
        let mut p = SackPayload {
            bytes: [0; MAX_SACK_BLOCKS * SACK_BLOCK_LEN],
            len: 0,
        };
        for (start, end) in blocks.iter().take(MAX_SACK_BLOCKS) {
            p.bytes[p.len..p.len + 4].copy_from_slice(&start.0.to_be_bytes());
            p.bytes[p.len + 4..p.len + 8].copy_from_slice(&end.0.to_be_bytes());
            p.len += SACK_BLOCK_LEN;
        }
        p
    }

    /// No blocks.
    pub const EMPTY: SackPayload = SackPayload {
        bytes: [0; MAX_SACK_BLOCKS * SACK_BLOCK_LEN],
        len: 0,
    };

    /// The payload bytes.
    pub fn as_slice(&self) -> &[u8] {
        &self.bytes[..self.len]
    }
}

/// A segment without data (ack, nak, rendezvous), emitted and held inline
/// until it is sent: queuing one allocates nothing.
#[derive(Clone, Copy)]
pub struct ControlSegment {
    bytes: [u8; MAX_CONTROL_LEN],
    len: usize,
}

impl ControlSegment {
    /// The segment's bytes.
    pub fn as_bytes(&self) -> &[u8] {
        &self.bytes[..self.len]
    }
}

impl fmt::Debug for ControlSegment {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match SegmentRepr::parse_bytes(self.as_bytes()) {
            Ok(repr) => write!(f, "ControlSegment({repr})"),
            Err(e) => write!(f, "ControlSegment(invalid: {e})"),
        }
    }
}

impl SegmentRepr<'_> {
    /// The advertised window in octets (data, ack, rendezvous).
    pub fn window_octets(&self) -> u32 {
        if self.flags.contains(Flags::W) {
            u32::from(self.window) << WINDOW_SCALE_SHIFT
        } else {
            u32::from(self.window)
        }
    }

    /// SACK blocks of an ack (empty for other types).
    pub fn sack_blocks(&self) -> impl Iterator<Item = (Seq, Seq)> + '_ {
        let payload = if self.kind == SegmentType::Ack {
            self.payload
        } else {
            &[]
        };
        sack_iter(payload)
    }
}

impl<'a> SegmentRepr<'a> {
    /// Parses and validates a segment (length, checksum, version, deadline,
    /// lifetime, flags allowed for the type, payload rules).
    pub fn parse(seg: &Segment<&'a [u8]>) -> Result<SegmentRepr<'a>, WireError> {
        seg.check_len()?;
        if !seg.verify_checksum() {
            return Err(WireError::Checksum);
        }
        if seg.version() != 0 {
            return Err(WireError::Version(seg.version()));
        }
        let deadline =
            Deadline::new(seg.deadline_raw()).ok_or(WireError::Deadline(seg.deadline_raw()))?;
        let lifetime = Lifetime::from_secs(seg.lifetime_raw()).ok_or(WireError::ZeroLifetime)?;
        let kind = seg.segment_type();
        let flags = seg.flags_raw();
        if flags & !kind.allowed_flags() != 0 {
            return Err(WireError::Flags { kind, flags });
        }
        let payload = seg.payload_slice();
        match kind {
            SegmentType::Data if payload.is_empty() => return Err(WireError::EmptyData),
            SegmentType::Data => {}
            SegmentType::Ack => check_sack(payload)?,
            other if !payload.is_empty() => return Err(WireError::UnexpectedPayload(other)),
            _ => {}
        }
        Ok(SegmentRepr {
            src_port: seg.src_port(),
            dst_port: seg.dst_port(),
            kind,
            flags: Flags(flags),
            sn: seg.sn(),
            deadline,
            lifetime,
            window: seg.window(),
            payload,
        })
    }

    /// Parses a datagram.
    pub fn parse_bytes(bytes: &'a [u8]) -> Result<SegmentRepr<'a>, WireError> {
        SegmentRepr::parse(&Segment::new_unchecked(bytes))
    }

    /// Bytes needed to emit this segment.
    pub fn buffer_len(&self) -> usize {
        HEADER_LEN + self.payload.len()
    }

    /// Writes the segment (header, payload, checksum) into `seg`, whose
    /// buffer must be exactly [`Self::buffer_len`] bytes long.
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(
        &self,
        seg: &mut Segment<T>,
    ) -> Result<(), WireError> {
        let need = self.buffer_len();
        let length =
            u16::try_from(need).map_err(|_| WireError::PayloadTooLarge(self.payload.len()))?;
        let have = seg.buffer.as_ref().len();
        if have != need {
            return Err(WireError::BufferTooSmall { have, need });
        }
        seg.set_src_port(self.src_port);
        seg.set_dst_port(self.dst_port);
        seg.set_length(length);
        seg.set_sn(self.sn);
        seg.set_deadline(self.deadline);
        seg.set_type_flags(0, self.kind, self.flags);
        seg.set_lifetime(self.lifetime);
        seg.set_window(self.window);
        seg.payload_mut().copy_from_slice(self.payload);
        seg.fill_checksum();
        Ok(())
    }

    /// Appends the segment to `buf`; returns its length.
    pub fn append_to(&self, buf: &mut Vec<u8>) -> Result<usize, WireError> {
        self.append_gathered([self.payload, &[]], buf)
    }

    /// Appends the segment to `buf` with the payload taken from `parts`
    /// (concatenated; e.g. the two halves of a ring buffer, so the data is
    /// copied once, straight into the datagram). `self.payload` is not used.
    /// Returns the segment's length; on error `buf` is unchanged.
    pub fn append_gathered(
        &self,
        parts: [&[u8]; 2],
        buf: &mut Vec<u8>,
    ) -> Result<usize, WireError> {
        let payload_len = parts[0].len() + parts[1].len();
        let need = HEADER_LEN + payload_len;
        let length = u16::try_from(need).map_err(|_| WireError::PayloadTooLarge(payload_len))?;
        let start = buf.len();
        buf.resize(start + HEADER_LEN, 0);
        buf.extend_from_slice(parts[0]);
        buf.extend_from_slice(parts[1]);
        let mut seg = Segment::new_unchecked(&mut buf[start..]);
        seg.set_src_port(self.src_port);
        seg.set_dst_port(self.dst_port);
        seg.set_length(length);
        seg.set_sn(self.sn);
        seg.set_deadline(self.deadline);
        seg.set_type_flags(0, self.kind, self.flags);
        seg.set_lifetime(self.lifetime);
        seg.set_window(self.window);
        seg.fill_checksum();
        Ok(need)
    }

    /// Emits a segment without data (its payload at most SACK blocks)
    /// into an inline [`ControlSegment`].
    pub fn to_control(&self) -> Result<ControlSegment, WireError> {
        let need = self.buffer_len();
        if need > MAX_CONTROL_LEN {
            return Err(WireError::PayloadTooLarge(self.payload.len()));
        }
        let mut c = ControlSegment {
            bytes: [0; MAX_CONTROL_LEN],
            len: need,
        };
        self.emit(&mut Segment::new_unchecked(&mut c.bytes[..need]))?;
        Ok(c)
    }

    /// Emits into a fresh vector.
    pub fn to_vec(&self) -> Result<Vec<u8>, WireError> {
        let mut buf = vec![0u8; self.buffer_len()];
        self.emit(&mut Segment::new_unchecked(&mut buf[..]))?;
        Ok(buf)
    }
}

impl fmt::Display for SegmentRepr<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let span = if self.kind == SegmentType::Data {
            self.payload.len()
        } else {
            0
        };
        write!(
            f,
            "{} {} {}:{}({}) win {} lifetime {} deadline {}",
            self.kind,
            self.flags,
            self.sn,
            self.sn.add(span as u32),
            span,
            self.window,
            self.lifetime.secs(),
            self.deadline.ms()
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn sample(payload: &[u8]) -> SegmentRepr<'_> {
        SegmentRepr {
            src_port: 9090,
            dst_port: 8080,
            kind: SegmentType::Data,
            flags: Flags::D,
            sn: Seq(1000),
            deadline: Deadline::new(86_399_999).expect("valid test value"),
            lifetime: Lifetime::from_secs(32).expect("valid test value"),
            window: 32792,
            payload,
        }
    }

    #[test]
    fn header_layout_matches_figure_4_4() {
        let bytes = sample(b"xy").to_vec().expect("valid test value");
        assert_eq!(bytes.len(), 22);
        assert_eq!(&bytes[0..2], &9090u16.to_be_bytes());
        assert_eq!(&bytes[2..4], &8080u16.to_be_bytes());
        assert_eq!(&bytes[4..6], &22u16.to_be_bytes());
        assert_eq!(&bytes[8..12], &1000u32.to_be_bytes());
        assert_eq!(&bytes[12..16], &86_399_999u32.to_be_bytes());
        assert_eq!(bytes[16], 0b0000_1000, "version 0, type data, D flag");
        assert_eq!(bytes[17], 32);
        assert_eq!(&bytes[18..20], &32792u16.to_be_bytes());
        assert_eq!(&bytes[20..], b"xy");
    }

    fn ack(flags: Flags, window: u16, payload: &[u8]) -> SegmentRepr<'_> {
        SegmentRepr {
            kind: SegmentType::Ack,
            flags,
            window,
            payload,
            ..sample(b"")
        }
    }

    #[test]
    fn scaled_window_counts_256_octet_units() {
        assert_eq!(ack(Flags::NONE, 1000, &[]).window_octets(), 1000);
        assert_eq!(ack(Flags::W, 1000, &[]).window_octets(), 256_000);
        assert_eq!(
            ack(Flags::W, u16::MAX, &[]).window_octets() as usize,
            MAX_SCALED_WINDOW
        );
        let bytes = ack(Flags::W.with(Flags::O), 7, &[])
            .to_vec()
            .expect("valid test value");
        assert_eq!(bytes[16] & 0x0f, 0b0101, "O and W bits");
        let nak = SegmentRepr {
            kind: SegmentType::Nak,
            flags: Flags::W,
            ..sample(b"")
        };
        let bytes = nak.to_vec().expect("emit does not validate");
        assert!(matches!(
            SegmentRepr::parse_bytes(&bytes),
            Err(WireError::Flags { .. })
        ));
    }

    #[test]
    fn sack_blocks_round_trip_and_bad_lists_are_rejected() {
        let blocks = [(Seq(2000), Seq(3000)), (Seq(u32::MAX - 10), Seq(5))];
        let payload = encode_sack(&blocks);
        assert_eq!(payload.len(), 16);
        let bytes = ack(Flags::NONE, 100, &payload)
            .to_vec()
            .expect("valid test value");
        let parsed = SegmentRepr::parse_bytes(&bytes).expect("valid SACK ack");
        assert_eq!(parsed.sack_blocks().collect::<Vec<_>>(), blocks);

        let odd = [0u8; 12];
        let bytes = ack(Flags::NONE, 100, &odd).to_vec().expect("emit");
        assert_eq!(
            SegmentRepr::parse_bytes(&bytes),
            Err(WireError::SackLength(12))
        );
        let too_many = vec![0u8; (MAX_SACK_BLOCKS + 1) * SACK_BLOCK_LEN];
        let bytes = ack(Flags::NONE, 100, &too_many).to_vec().expect("emit");
        assert!(matches!(
            SegmentRepr::parse_bytes(&bytes),
            Err(WireError::SackLength(_))
        ));
        let inverted = encode_sack(&[(Seq(3000), Seq(2000))]);
        let bytes = ack(Flags::NONE, 100, &inverted).to_vec().expect("emit");
        assert_eq!(
            SegmentRepr::parse_bytes(&bytes),
            Err(WireError::SackBlock {
                start: 3000,
                end: 2000
            })
        );
        let empty = encode_sack(&[(Seq(3000), Seq(3000))]);
        let bytes = ack(Flags::NONE, 100, &empty).to_vec().expect("emit");
        assert!(SegmentRepr::parse_bytes(&bytes).is_err());
        let rdv = SegmentRepr {
            kind: SegmentType::Rendezvous,
            payload: &payload,
            ..sample(b"")
        };
        let bytes = rdv.to_vec().expect("emit");
        assert_eq!(
            SegmentRepr::parse_bytes(&bytes),
            Err(WireError::UnexpectedPayload(SegmentType::Rendezvous))
        );
    }

    #[test]
    fn every_single_bit_flip_is_rejected() {
        let bytes = sample(b"hello").to_vec().expect("valid test value");
        for bit in 0..bytes.len() * 8 {
            let mut b = bytes.clone();
            b[bit / 8] ^= 1 << (bit % 8);
            assert!(
                SegmentRepr::parse_bytes(&b).is_err(),
                "bit {bit} flip accepted"
            );
        }
    }

    #[test]
    fn invalid_fields_are_typed_errors() {
        let good = sample(b"a").to_vec().expect("valid test value");
        let mut b = good.clone();
        b.truncate(19);
        assert_eq!(SegmentRepr::parse_bytes(&b), Err(WireError::Truncated(19)));
        let refill = |mut b: Vec<u8>| {
            Segment::new_unchecked(&mut b[..]).fill_checksum();
            b
        };
        let mut b = good.clone();
        b[16] |= 0b0100_0000;
        assert_eq!(
            SegmentRepr::parse_bytes(&refill(b)),
            Err(WireError::Version(1))
        );
        let mut b = good.clone();
        b[17] = 0;
        assert_eq!(
            SegmentRepr::parse_bytes(&refill(b)),
            Err(WireError::ZeroLifetime)
        );
        let mut b = good.clone();
        b[12..16].copy_from_slice(&MS_PER_DAY.to_be_bytes());
        assert_eq!(
            SegmentRepr::parse_bytes(&refill(b)),
            Err(WireError::Deadline(MS_PER_DAY))
        );
        let mut b = good.clone();
        b[16] |= Flags::R.bits();
        assert!(matches!(
            SegmentRepr::parse_bytes(&refill(b)),
            Err(WireError::Flags { .. })
        ));
    }

    #[test]
    fn deadline_remaining_wraps_at_midnight() {
        let now = Deadline::new(MS_PER_DAY - 1000).expect("valid test value");
        let later = now.after(Duration::from_secs(3));
        assert_eq!(later.ms(), 2000);
        assert_eq!(later.remaining_ms(now), 3000);
        assert_eq!(now.remaining_ms(later), -3000);
    }

    fn kind_strategy() -> impl Strategy<Value = SegmentType> {
        prop_oneof![
            Just(SegmentType::Data),
            Just(SegmentType::Ack),
            Just(SegmentType::Rendezvous),
            Just(SegmentType::Nak)
        ]
    }

    proptest! {
        #[test]
        fn round_trip(
            src in any::<u16>(), dst in any::<u16>(), kind in kind_strategy(),
            flag_bits in 0u8..16, sn in any::<u32>(), deadline in 0..MS_PER_DAY,
            lifetime in 1u8..=255, window in any::<u16>(),
            data in proptest::collection::vec(any::<u8>(), 1..1500),
        ) {
            let flags = Flags(flag_bits & kind.allowed_flags());
            // Acks carry SACK blocks: pairs of SNs with a positive span.
            let blocks: Vec<(Seq, Seq)> = data
                .chunks_exact(3)
                .take(MAX_SACK_BLOCKS)
                .map(|c| (Seq(sn ^ u32::from(c[0])), Seq(sn ^ u32::from(c[0])).add(u32::from(c[1]) + 1)))
                .collect();
            let sack = encode_sack(&blocks);
            let payload: &[u8] = match kind {
                SegmentType::Data => &data,
                SegmentType::Ack => &sack,
                _ => &[],
            };
            let repr = SegmentRepr {
                src_port: src, dst_port: dst, kind, flags, sn: Seq(sn),
                deadline: Deadline::new(deadline).expect("valid test value"),
                lifetime: Lifetime::from_secs(lifetime).expect("valid test value"), window, payload,
            };
            let bytes = repr.to_vec().expect("valid test value");
            prop_assert_eq!(bytes.len(), repr.buffer_len());
            prop_assert_eq!(SegmentRepr::parse_bytes(&bytes), Ok(repr));
            if kind == SegmentType::Ack {
                prop_assert_eq!(repr.sack_blocks().collect::<Vec<_>>(), blocks);
            }
        }

        #[test]
        fn random_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..200)) {
            let seg = Segment::new_unchecked(&bytes[..]);
            if seg.check_len().is_ok() {
                let _ = (seg.src_port(), seg.sn(), seg.window(), seg.payload().len(), seg.verify_checksum());
            }
            let _ = SegmentRepr::parse_bytes(&bytes);
        }

        #[test]
        fn random_bytes_with_fixed_length_and_checksum_never_panic(
            mut bytes in proptest::collection::vec(any::<u8>(), 20..200)
        ) {
            let len = bytes.len() as u16;
            bytes[4..6].copy_from_slice(&len.to_be_bytes());
            Segment::new_unchecked(&mut bytes[..]).fill_checksum();
            if let Ok(repr) = SegmentRepr::parse_bytes(&bytes) {
                prop_assert_eq!(repr.to_vec().expect("valid test value"), bytes);
            }
        }
    }
}
