//! Full blocks encoded where they are read, not on the core thread.
//!
//! A reader that hands the sender whole blocks (a file read block by block)
//! has each block in its cache right after reading and hashing it. Encoding
//! it there costs less than on the core thread, which would read it back
//! from memory, and takes the Reed–Solomon encode off the thread that paces
//! and sends. [`BlockCoding`] is what such a reader needs: the geometry and
//! repair count of a full block under a sender's configuration
//! (`SenderConfig::block_coding` makes it), and codecs (shared across
//! threads, one per concurrent caller). Its product, a
//! [`FullBlock`], goes to [`crate::Sender::write_encoded_block`], which
//! sends the repair symbols as given when the block's parameters are the
//! ones it would have used itself and encodes again otherwise. The repair
//! bytes are the same either way: the same code on the same bytes.

use crate::fec::{ErasureCode, ReedSolomon, SumKernel};
use std::sync::{Arc, Mutex};

/// Source symbols, shard length and the last symbol's length of a block
/// of `len` bytes with symbols of `symbol_size` bytes (the sender's and
/// this module's one rule).
pub(crate) fn block_geometry(symbol_size: usize, len: usize) -> (usize, usize, usize) {
    let k = len.div_ceil(symbol_size).max(1);
    let shard_len = if k == 1 {
        len.next_multiple_of(2)
    } else {
        symbol_size
    };
    (k, shard_len, len - (k - 1) * shard_len)
}

/// A full block and its repair symbols, encoded by [`BlockCoding::encode`].
#[derive(Debug)]
pub struct FullBlock {
    pub(crate) data: Vec<u8>,
    pub(crate) repair: Vec<u8>,
    pub(crate) k: u16,
    pub(crate) m: u16,
    pub(crate) shard_len: usize,
}

impl FullBlock {
    /// Source bytes in the block.
    pub fn len(&self) -> usize {
        self.data.len()
    }

    /// Whether the block holds no bytes (never, for an encoded one).
    pub fn is_empty(&self) -> bool {
        self.data.is_empty()
    }

    /// The block's source bytes and its repair symbols.
    pub fn into_parts(self) -> (Vec<u8>, Vec<u8>) {
        (self.data, self.repair)
    }

    /// The block's source bytes.
    pub fn data(&self) -> &[u8] {
        &self.data
    }

    /// Its repair symbols, one after the other.
    pub fn repair(&self) -> &[u8] {
        &self.repair
    }
}

/// How a sender with a given configuration encodes a full block, for any
/// number of threads (cheap to clone).
#[derive(Clone)]
pub struct BlockCoding {
    shared: Arc<Shared>,
}

struct Shared {
    block_bytes: usize,
    k: usize,
    m: usize,
    shard_len: usize,
    /// Codecs not in use; one is taken per encode, so concurrent callers
    /// each get their own work buffers.
    idle: Mutex<Vec<ReedSolomon>>,
    /// Made with the kernel once; every codec shares its factors.
    prototype: Mutex<ReedSolomon>,
}

impl std::fmt::Debug for BlockCoding {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("BlockCoding")
            .field("k", &self.shared.k)
            .field("m", &self.shared.m)
            .field("shard_len", &self.shared.shard_len)
            .finish_non_exhaustive()
    }
}

impl BlockCoding {
    /// Full blocks of `block_bytes` in symbols of `symbol_size` with `m`
    /// repair symbols each, on `kernel` when one is given (as
    /// [`crate::Sender::use_kernel`]).
    pub(crate) fn new(
        block_bytes: usize,
        symbol_size: usize,
        m: usize,
        kernel: Option<Arc<dyn SumKernel>>,
    ) -> Self {
        let (k, shard_len, _) = block_geometry(symbol_size, block_bytes);
        let mut prototype = ReedSolomon::new();
        if let Some(kernel) = kernel {
            prototype.use_kernel(kernel);
        }
        BlockCoding {
            shared: Arc::new(Shared {
                block_bytes,
                k,
                m,
                shard_len,
                idle: Mutex::new(Vec::new()),
                prototype: Mutex::new(prototype),
            }),
        }
    }

    /// Bytes of a full block.
    pub fn block_bytes(&self) -> usize {
        self.shared.block_bytes
    }

    /// Bytes of a full block's repair symbols.
    pub fn repair_bytes(&self) -> usize {
        self.shared.m * self.shared.shard_len
    }

    /// Encodes `data`, a full block, into `repair` (a buffer to reuse:
    /// its contents do not matter, it is resized). Gives `data` back when
    /// it is not a full block, or when the code refuses (a bug).
    pub fn encode(&self, data: Vec<u8>, mut repair: Vec<u8>) -> Result<FullBlock, Vec<u8>> {
        let s = &*self.shared;
        if data.len() != s.block_bytes || data.len() != s.k * s.shard_len {
            return Err(data);
        }
        let mut codec = self.take_codec();
        // The encoder writes every repair byte: no zeroing first.
        if repair.len() > s.m * s.shard_len {
            repair.truncate(s.m * s.shard_len);
        } else {
            repair.resize(s.m * s.shard_len, 0);
        }
        let encoded = codec.encode(s.k, s.m, s.shard_len, &data, &mut repair);
        if let Ok(mut idle) = s.idle.lock() {
            idle.push(codec);
        }
        match encoded {
            Ok(()) => Ok(FullBlock {
                data,
                repair,
                k: s.k as u16,
                m: s.m as u16,
                shard_len: s.shard_len,
            }),
            Err(e) => {
                debug_assert!(false, "FEC encode failed: {e}");
                Err(data)
            }
        }
    }

    fn take_codec(&self) -> ReedSolomon {
        let s = &*self.shared;
        if let Some(codec) = s.idle.lock().ok().and_then(|mut idle| idle.pop()) {
            return codec;
        }
        s.prototype
            .lock()
            .map_or_else(|_| ReedSolomon::new(), |p| p.sharing_kernel())
    }
}
