//! How the tap puts frames on a wire: the 14-byte encapsulation header for
//! agents on a local segment, and the packet records carried across the
//! diode inside a datagram channel (PROTOCOL.md, "Packet channels").
//!
//! ```text
//!  encapsulated frame (local segment, the thesis's marking):
//!  0          6          12     14
//! +----------+----------+------+---------------------------------+
//! | agent MAC| tap MAC  |0xF1F0| the original frame, unchanged     |
//! +----------+----------+------+---------------------------------+
//!
//!  packet record (one datagram-channel record, after its 2-byte length):
//!  0      1       2          4              8                   16                  24
//! +------+-------+----------+--------------+-------------------+-------------------+--------
//! | type | flags | reserved | original len |   sequence (64)   | timestamp ns (64) | frame …
//! +------+-------+----------+--------------+-------------------+-------------------+--------
//!   type 1 packet: the captured frame follows (original len ≥ its length)
//!   type 2 mark:   no frame; sequence = packets of this agent stream so far
//! ```
//!
//! All integers big-endian. After [`PacketRecord::check_len`] no accessor panics.

/// Length of the encapsulation header.
pub const ENCAP_LEN: usize = 14;
/// Length of a packet record's header.
pub const RECORD_HEADER_LEN: usize = 24;
/// Longest frame a record carries (the datagram channel's 2-byte length
/// bounds a record to 65,535 bytes).
pub const MAX_RECORD_FRAME: usize = 65_535 - RECORD_HEADER_LEN;

/// Record type: a captured packet.
pub const RECORD_PACKET: u8 = 1;
/// Record type: a sequence mark (no frame).
pub const RECORD_MARK: u8 = 2;

/// Writes the encapsulation header (`dst`, `src`, `ethertype`) and `frame`
/// into `out` (appended).
pub fn encapsulate(dst: [u8; 6], src: [u8; 6], ethertype: u16, frame: &[u8], out: &mut Vec<u8>) {
    out.extend_from_slice(&dst);
    out.extend_from_slice(&src);
    out.extend_from_slice(&ethertype.to_be_bytes());
    out.extend_from_slice(frame);
}

/// The original frame inside an encapsulated one, or `None` when `frame`
/// does not carry `ethertype` at bytes 12..14 (it is not marked).
pub fn decapsulate(frame: &[u8], ethertype: u16) -> Option<&[u8]> {
    (frame.len() >= ENCAP_LEN && frame[12..14] == ethertype.to_be_bytes())
        .then(|| &frame[ENCAP_LEN..])
}

/// Why a record was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum RecordError {
    /// Shorter than its header.
    #[error("packet record of {0} bytes is shorter than its 24-byte header")]
    Truncated(usize),
    /// Unknown type or non-zero flags/reserved bytes.
    #[error("packet record type {0} with flags {1:#x} is not known")]
    Unknown(u8, u8),
    /// A mark with a frame, or an original length below the frame's.
    #[error("packet record lengths disagree")]
    Inconsistent,
}

/// A borrowed view over one packet record.
#[derive(Debug, Clone, Copy)]
pub struct PacketRecord<T: AsRef<[u8]>> {
    buf: T,
}

impl<T: AsRef<[u8]>> PacketRecord<T> {
    /// Wraps `buf` after [`PacketRecord::check_len`].
    pub fn new_checked(buf: T) -> Result<Self, RecordError> {
        let r = PacketRecord { buf };
        r.check_len()?;
        Ok(r)
    }

    /// The header present, a known type, zero flags and reserved bytes,
    /// and lengths that agree.
    pub fn check_len(&self) -> Result<(), RecordError> {
        let b = self.buf.as_ref();
        if b.len() < RECORD_HEADER_LEN {
            return Err(RecordError::Truncated(b.len()));
        }
        if !matches!(b[0], RECORD_PACKET | RECORD_MARK) || b[1] != 0 || b[2] != 0 || b[3] != 0 {
            return Err(RecordError::Unknown(b[0], b[1]));
        }
        let frame = b.len() - RECORD_HEADER_LEN;
        let orig = u32::from_be_bytes([b[4], b[5], b[6], b[7]]) as usize;
        match b[0] {
            RECORD_MARK if frame != 0 || orig != 0 => Err(RecordError::Inconsistent),
            RECORD_PACKET if orig < frame => Err(RecordError::Inconsistent),
            _ => Ok(()),
        }
    }

    /// The type.
    pub fn kind(&self) -> u8 {
        self.buf.as_ref()[0]
    }

    /// Length of the frame on the wire (≥ the captured bytes).
    pub fn original_len(&self) -> u32 {
        let b = self.buf.as_ref();
        u32::from_be_bytes([b[4], b[5], b[6], b[7]])
    }

    /// The sequence number.
    pub fn seq(&self) -> u64 {
        let mut w = [0u8; 8];
        w.copy_from_slice(&self.buf.as_ref()[8..16]);
        u64::from_be_bytes(w)
    }

    /// Capture time, nanoseconds since the Unix epoch.
    pub fn timestamp_ns(&self) -> u64 {
        let mut w = [0u8; 8];
        w.copy_from_slice(&self.buf.as_ref()[16..24]);
        u64::from_be_bytes(w)
    }

    /// The captured frame (empty for a mark).
    pub fn frame(&self) -> &[u8] {
        &self.buf.as_ref()[RECORD_HEADER_LEN..]
    }
}

/// An owned description of a record, for emitting.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RecordRepr {
    /// [`RECORD_PACKET`] or [`RECORD_MARK`].
    pub kind: u8,
    /// Sequence number.
    pub seq: u64,
    /// Nanoseconds since the Unix epoch.
    pub timestamp_ns: u64,
    /// Length on the wire (0 for a mark).
    pub original_len: u32,
}

impl RecordRepr {
    /// Reads the header of a checked record.
    pub fn parse<T: AsRef<[u8]>>(r: &PacketRecord<T>) -> RecordRepr {
        RecordRepr {
            kind: r.kind(),
            seq: r.seq(),
            timestamp_ns: r.timestamp_ns(),
            original_len: r.original_len(),
        }
    }

    /// Bytes the record takes with a frame of `frame_len` bytes.
    pub fn buffer_len(frame_len: usize) -> usize {
        RECORD_HEADER_LEN + frame_len
    }

    /// Appends the header and `frame` to `out`.
    pub fn emit(&self, frame: &[u8], out: &mut Vec<u8>) {
        out.push(self.kind);
        out.extend_from_slice(&[0, 0, 0]);
        out.extend_from_slice(&self.original_len.to_be_bytes());
        out.extend_from_slice(&self.seq.to_be_bytes());
        out.extend_from_slice(&self.timestamp_ns.to_be_bytes());
        out.extend_from_slice(frame);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn encapsulation_round_trips_and_unmarked_frames_are_not_touched() {
        let frame = [0xaa; 60];
        let mut out = Vec::new();
        encapsulate(
            [2, 0, 0, 0, 0, 9],
            [2, 0, 0, 0, 0, 1],
            0xf1f0,
            &frame,
            &mut out,
        );
        assert_eq!(&out[12..14], &[0xf1, 0xf0]);
        assert_eq!(decapsulate(&out, 0xf1f0), Some(&frame[..]));
        assert_eq!(decapsulate(&out, 0xf1f1), None);
        assert_eq!(decapsulate(&frame, 0xf1f0), None);
        assert_eq!(decapsulate(&out[..13], 0xf1f0), None);
    }

    #[test]
    fn a_record_reads_back_byte_for_byte() {
        // A record as PROTOCOL.md shows it: seq 7, 1.5 s after the epoch, 4 of 60 bytes.
        let repr = RecordRepr {
            kind: RECORD_PACKET,
            seq: 7,
            timestamp_ns: 1_500_000_000,
            original_len: 60,
        };
        let mut out = Vec::new();
        repr.emit(&[1, 2, 3, 4], &mut out);
        assert_eq!(
            out,
            [
                1, 0, 0, 0, 0, 0, 0, 60, 0, 0, 0, 0, 0, 0, 0, 7, 0, 0, 0, 0, 0x59, 0x68, 0x2f,
                0x00, 1, 2, 3, 4
            ]
        );
        let r = PacketRecord::new_checked(&out[..]).unwrap();
        assert_eq!(RecordRepr::parse(&r), repr);
        assert_eq!(r.frame(), &[1, 2, 3, 4]);
        out[7] = 3;
        assert_eq!(
            PacketRecord::new_checked(&out[..]).unwrap_err(),
            RecordError::Inconsistent
        );
        assert!(PacketRecord::new_checked(&out[..23]).is_err());
    }
}
