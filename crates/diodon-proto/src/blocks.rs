//! Which blocks of one block-stable (sync) channel are in the application's
//! hands: a bitmap over the channel's blocks plus the geometry they were
//! cut with (bytes per block), so that blocks kept from one carousel pass
//! are merged only into a pass cut the same way (PROTOCOL.md § 5.3.2).
//!
//! ```text
//!   block:   0 1 2 3 4 5 6 7 | 8 …      bytes: [n·B, (n+1)·B)
//!   bit:     1 1 1 0 1 1 1 1 | 1 …      (byte 0 bit 0 = block 0)
//! ```
//!
//! The receiver core fills one in `Event::ChannelPartial`; the application
//! keeps it beside the bytes (its [`BlockSet::to_bytes`] form) and gives it
//! back through `Receiver::hold_blocks` when the file is sent again.

use thiserror::Error;

/// Why a stored block map could not be read back.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum BlockSetError {
    /// Fewer bytes than the header, or a bitmap of another length.
    #[error("block map is {0} bytes, not what its header announces")]
    Length(usize),
    /// A zero block size.
    #[error("block map has a block size of 0")]
    ZeroBlockBytes,
    /// More blocks than [`MAX_BLOCKS`].
    #[error("block map of {0} blocks is larger than a block map may be")]
    TooLarge(u64),
}

/// Most blocks a set ranges over (a 16 MiB bitmap; at 90 KB blocks, files
/// of 12 TB): a count from the wire above it is refused, not allocated.
pub const MAX_BLOCKS: u64 = 1 << 27;

/// Length of the header of [`BlockSet::to_bytes`]: block bytes (4), block
/// count (8), both big-endian.
pub const BLOCK_SET_HEADER_LEN: usize = 12;

/// A set of block numbers below `total`, with the block size they refer to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BlockSet {
    block_bytes: u32,
    total: u64,
    bits: Vec<u8>,
}

impl BlockSet {
    /// An empty set over `total` blocks of `block_bytes` bytes (the last
    /// block may be shorter).
    pub fn new(block_bytes: u32, total: u64) -> Result<Self, BlockSetError> {
        if block_bytes == 0 {
            return Err(BlockSetError::ZeroBlockBytes);
        }
        if total > MAX_BLOCKS {
            return Err(BlockSetError::TooLarge(total));
        }
        Ok(BlockSet {
            block_bytes,
            total,
            bits: vec![0; total.div_ceil(8) as usize],
        })
    }

    /// Bytes of every block but the last.
    pub fn block_bytes(&self) -> u32 {
        self.block_bytes
    }

    /// Blocks the set ranges over.
    pub fn total(&self) -> u64 {
        self.total
    }

    /// Adds `block`; blocks at or above `total` are ignored.
    pub fn insert(&mut self, block: u64) {
        if block < self.total {
            self.bits[(block / 8) as usize] |= 1 << (block % 8);
        }
    }

    /// Whether `block` is in the set.
    pub fn contains(&self, block: u64) -> bool {
        block < self.total && self.bits[(block / 8) as usize] & (1 << (block % 8)) != 0
    }

    /// Blocks in the set.
    pub fn len(&self) -> u64 {
        self.bits.iter().map(|b| u64::from(b.count_ones())).sum()
    }

    /// Whether no block is in the set.
    pub fn is_empty(&self) -> bool {
        self.bits.iter().all(|b| *b == 0)
    }

    /// Whether every block below `total` is in the set.
    pub fn is_full(&self) -> bool {
        self.len() == self.total
    }

    /// The blocks in the set, in order.
    pub fn iter(&self) -> impl Iterator<Item = u64> + '_ {
        (0..self.total).filter(|b| self.contains(*b))
    }

    /// The blocks below `total` not in the set, in order.
    pub fn missing(&self) -> impl Iterator<Item = u64> + '_ {
        (0..self.total).filter(|b| !self.contains(*b))
    }

    /// Byte offset of `block` in the channel.
    pub fn offset(&self, block: u64) -> u64 {
        block * u64::from(self.block_bytes)
    }

    /// The stored form: header (block bytes, block count) then the bitmap.
    pub fn to_bytes(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(BLOCK_SET_HEADER_LEN + self.bits.len());
        out.extend_from_slice(&self.block_bytes.to_be_bytes());
        out.extend_from_slice(&self.total.to_be_bytes());
        out.extend_from_slice(&self.bits);
        out
    }

    /// Reads the stored form back; bits at or above the block count are
    /// cleared.
    pub fn from_bytes(b: &[u8]) -> Result<Self, BlockSetError> {
        let header = b
            .get(..BLOCK_SET_HEADER_LEN)
            .ok_or(BlockSetError::Length(b.len()))?;
        let mut block_bytes = [0u8; 4];
        block_bytes.copy_from_slice(&header[..4]);
        let block_bytes = u32::from_be_bytes(block_bytes);
        if block_bytes == 0 {
            return Err(BlockSetError::ZeroBlockBytes);
        }
        let mut total = [0u8; 8];
        total.copy_from_slice(&header[4..12]);
        let total = u64::from_be_bytes(total);
        if total > MAX_BLOCKS {
            return Err(BlockSetError::TooLarge(total));
        }
        let bits = &b[BLOCK_SET_HEADER_LEN..];
        if u64::try_from(bits.len()).ok() != Some(total.div_ceil(8)) {
            return Err(BlockSetError::Length(b.len()));
        }
        let mut set = BlockSet {
            block_bytes,
            total,
            bits: bits.to_vec(),
        };
        if total % 8 != 0 {
            if let Some(last) = set.bits.last_mut() {
                *last &= (1u8 << (total % 8)) - 1;
            }
        }
        Ok(set)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trips_and_clears_stray_bits() {
        let mut s = BlockSet::new(1000, 11).unwrap();
        for b in [0, 3, 10, 11, 99] {
            s.insert(b);
        }
        assert_eq!(s.iter().collect::<Vec<_>>(), vec![0, 3, 10]);
        assert_eq!(s.len(), 3);
        let mut bytes = s.to_bytes();
        assert_eq!(BlockSet::from_bytes(&bytes), Ok(s.clone()));
        *bytes.last_mut().unwrap() |= 0x80;
        assert_eq!(BlockSet::from_bytes(&bytes), Ok(s));
        assert_eq!(
            BlockSet::from_bytes(&bytes[..13]),
            Err(BlockSetError::Length(13))
        );
    }
}
