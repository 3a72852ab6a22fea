//! Records of a `Datagrams` channel (PROTOCOL.md § 5.3): the one framing
//! both UDP flows and the IP tunnel use. A record is a 2-byte big-endian
//! length and that many payload bytes.
//!
//! ```text
//!  channel bytes, unaligned (UDP flows): records may span blocks
//!   | len | payload ......... | len | payload .|.... | len | ...
//!                                               ^ block boundary
//!
//!  aligned (open flag bit 1, the tunnel): every block starts with a record,
//!  none crosses a boundary; the rest of a block that cannot hold the next
//!  record is zero padding (a zero length, or fewer than 2 bytes left)
//!   | len | packet | len | packet | 0 0 0 0 0 |  | len | packet | ...
//!   └───────────── block b ──────────────────┘  └── block b+1 ──
//! ```
//!
//! The sender's core aligns ([`crate::Sender::write_record`]); a receiver
//! reads one delivered block at a time with [`BlockRecords`], so a lost
//! block takes only its own records with it.

use thiserror::Error;

/// Bytes of a record's length prefix.
pub const RECORD_HEADER: usize = 2;

/// Largest record payload.
pub const MAX_RECORD: usize = u16::MAX as usize;

/// A record that cannot be framed or read.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Error)]
pub enum RecordError {
    /// The payload does not fit the 2-byte length.
    #[error("record of {0} bytes exceeds {MAX_RECORD}")]
    TooLarge(usize),
    /// A length runs past the end of its block (aligned records never do).
    #[error("record of {len} bytes at offset {at} runs past the block's {block} bytes")]
    Truncated {
        /// Offset of the length prefix in the block.
        at: usize,
        /// The length it announces.
        len: usize,
        /// The block's length.
        block: usize,
    },
}

/// Appends one framed record to `buf`.
pub fn push_record(buf: &mut Vec<u8>, payload: &[u8]) -> Result<(), RecordError> {
    let len = u16::try_from(payload.len()).map_err(|_| RecordError::TooLarge(payload.len()))?;
    buf.extend_from_slice(&len.to_be_bytes());
    buf.extend_from_slice(payload);
    Ok(())
}

/// Bytes a record of `payload` bytes takes in the channel.
pub fn framed_len(payload: usize) -> usize {
    RECORD_HEADER + payload
}

/// The records of one delivered block of an aligned channel, in order.
/// Stops at the padding; a length that runs past the block is an error
/// (then the rest of the block is unreadable and iteration ends).
#[derive(Debug, Clone)]
pub struct BlockRecords<'a> {
    block: &'a [u8],
    at: usize,
    done: bool,
}

impl<'a> BlockRecords<'a> {
    /// Reads `block` (one `ChannelData` of an aligned channel).
    pub fn new(block: &'a [u8]) -> Self {
        BlockRecords {
            block,
            at: 0,
            done: false,
        }
    }

    /// Bytes of the block not yet read (padding included once done).
    pub fn remaining(&self) -> usize {
        self.block.len() - self.at
    }
}

impl<'a> Iterator for BlockRecords<'a> {
    type Item = Result<&'a [u8], RecordError>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.done || self.block.len() - self.at < RECORD_HEADER {
            self.done = true;
            return None;
        }
        let at = self.at;
        let len = usize::from(u16::from_be_bytes([self.block[at], self.block[at + 1]]));
        if len == 0 {
            // Padding to the end of the block.
            self.done = true;
            return None;
        }
        let start = at + RECORD_HEADER;
        let Some(payload) = self.block.get(start..start + len) else {
            self.done = true;
            return Some(Err(RecordError::Truncated {
                at,
                len,
                block: self.block.len(),
            }));
        };
        self.at = start + len;
        Some(Ok(payload))
    }
}

/// Splits the complete records off the front of an unaligned byte stream
/// (records may span deliveries): calls `each` per record and returns the
/// bytes consumed; a partial record stays for the next call.
pub fn split_stream<E>(
    buf: &[u8],
    mut each: impl FnMut(&[u8]) -> Result<(), E>,
) -> Result<usize, E> {
    let mut at = 0;
    while buf.len() - at >= RECORD_HEADER {
        let len = usize::from(u16::from_be_bytes([buf[at], buf[at + 1]]));
        let end = at + RECORD_HEADER + len;
        if end > buf.len() {
            break;
        }
        each(&buf[at + RECORD_HEADER..end])?;
        at = end;
    }
    Ok(at)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_block_reads_back_its_records_and_stops_at_padding() {
        let mut b = Vec::new();
        push_record(&mut b, b"one").unwrap();
        push_record(&mut b, &[7; 300]).unwrap();
        b.extend_from_slice(&[0; 9]);
        let got: Vec<_> = BlockRecords::new(&b).collect::<Result<_, _>>().unwrap();
        assert_eq!(got, vec![&b"one"[..], &[7; 300][..]]);
        // One stray byte at the end is padding too.
        let mut c = Vec::new();
        push_record(&mut c, b"x").unwrap();
        c.push(0);
        assert_eq!(BlockRecords::new(&c).count(), 1);
    }

    #[test]
    fn a_length_past_the_block_is_an_error_and_ends_the_block() {
        let b = [0, 1, 9, 0, 50, 1, 2];
        let mut it = BlockRecords::new(&b);
        assert_eq!(it.next(), Some(Ok(&[9][..])));
        assert_eq!(
            it.next(),
            Some(Err(RecordError::Truncated {
                at: 3,
                len: 50,
                block: 7
            }))
        );
        assert_eq!(it.next(), None);
    }

    #[test]
    fn the_stream_splitter_keeps_a_partial_record() {
        let mut b = Vec::new();
        push_record(&mut b, b"ab").unwrap();
        push_record(&mut b, b"cde").unwrap();
        let mut seen = Vec::new();
        let n = split_stream::<()>(&b[..6], |r| {
            seen.push(r.to_vec());
            Ok(())
        })
        .unwrap();
        assert_eq!((n, seen), (4, vec![b"ab".to_vec()]));
        assert!(push_record(&mut b, &vec![0; MAX_RECORD + 1]).is_err());
    }
}
